//! Integration tests: one binary, driving the real `jobvisor` executable and real databases.

mod api;
mod api_bad_input;
mod bad_input;
mod catalog_files;
mod cli;
mod embed_example;
mod embedding;
mod engine;
mod fleet;
mod inbox;
mod metrics;
mod openapi;
mod operator;
mod postgres;
mod remote;
mod remote_cli;
mod rpc;
mod runtime;
mod slots;
mod support;
mod transport;
mod tuning;
mod ui;
mod workflows;
