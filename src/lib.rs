//! jobvisor: a node-local, self-tuning job engine.
//!
//! A node keeps a job catalog in SQLite ([`catalog`]), edited as a file ([`jobconf`]) or through
//! the CLI; a pure core ([`schedule`]) decides when jobs are due. See `ARCHITECTURE.md`.
#![warn(missing_docs)]

pub mod catalog;
pub mod cli;
pub mod config;
pub mod daemon;
pub mod diag;
pub mod executor;
pub mod http;
pub mod jobconf;
pub mod lease;
pub mod metrics;
pub mod model;
pub mod ops;

pub mod policy;
pub mod runtime;
pub mod schedule;
pub mod sim;
pub mod ui;
