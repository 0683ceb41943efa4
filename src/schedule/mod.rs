//! The pure scheduling core: from a job's schedule fields, its policies and its history, which
//! slots are due at `now`, what to do with each, and when to wake up next.
//!
//! Invariant: reads no clock and does no IO — `now` is always an argument; it imports neither
//! the actor runtime nor the database driver (`tests/tidy.rs` enforces both).
//!
//! - [`spec`]: the raw catalog fields ([`ScheduleSpec`]), validation ([`FieldError`]) and the
//!   policy enums ([`MisfirePolicy`], [`OverlapPolicy`]).
//! - [`calendar`]: [`Schedule`], the compiled schedule: next/previous slot around an instant,
//!   with one DST rule for every field.
//! - [`describe`]: the schedule in words, for `jobvisor jobs next`.
//! - [`backoff`]: [`FailureStreak`], the backoff of a recurring job that keeps failing.
//! - [`plan`]: [`JobPlanner`], the sans-IO state machine per job: `handle_*` inputs,
//!   [`JobPlanner::poll_due`] decisions, [`JobPlanner::next_wake`].
//!
//! Times at this API are `i64` epoch milliseconds, UTC, as the catalog stores them.

pub mod backoff;
pub mod calendar;
mod cron_fast;
pub mod describe;
pub mod plan;
pub mod spec;

#[cfg(test)]
mod tests;

pub use backoff::FailureStreak;
pub use calendar::{CronCache, Schedule, format_local, local_ms, rfc3339};
pub use plan::{Decision, JobHistory, JobPlanner, PlanPolicy, SkipReason, slot_keys};
pub use spec::{FieldError, MisfirePolicy, OverlapPolicy, RunDate, ScheduleSpec};
