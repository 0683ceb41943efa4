//! The activation policy: the pure core of self-tuning. From health samples (CPU, memory,
//! swap, disk, network, Linux PSI) and the catalog's view of jobs and processors, it decides
//! which standby jobs to activate, which to stretch or shed, when a processor gains or loses an
//! instance, and when writes pause — each decision with a reason in words and the samples
//! behind it.
//!
//! Invariant: reads no clock and does no IO — `now` is always an argument; it imports neither
//! actix nor rusqlite (`tests/tidy.rs` enforces both). The runtime's Health actor feeds
//! samples in and the Supervisor carries decisions out.
//!
//! - [`config`]: [`PolicyConfig`], the `[policy]` section (thresholds, hysteresis, pacing) and
//!   its validation.
//! - [`health`]: [`Sample`], [`Resource`], [`Level`], the per-resource hysteresis
//!   ([`Health`]) and the words and [`Evidence`] that explain a level.
//! - [`decision`]: the views the policy decides from and the [`Decision`]s it answers with.
//! - [`decide`]: [`Policy`], the sans-IO state machine (`handle_sample`, `poll_decisions`).
//!
//! Times at this API are `i64` epoch milliseconds.

pub mod config;
pub mod decide;
pub mod decision;
pub mod health;

#[cfg(test)]
mod flap_tests;
#[cfg(test)]
mod sim_tests;
#[cfg(test)]
mod stretch_tests;
#[cfg(test)]
mod testkit;
#[cfg(test)]
mod tests;

pub use config::{PolicyConfig, PolicyConfigError};
pub use decide::Policy;
pub use decision::{Action, Cause, Decision, JobView, Pin, ProcessorView};
pub use health::{Bound, Evidence, Health, Level, Resource, Sample, cores, duration, size};
