//! The `[policy]` section of the node configuration: thresholds per resource, hysteresis and
//! pacing, with defaults after kubelet's eviction defaults, and the one validation of them.
//!
//! Invariant: reads no clock and does no IO; it imports neither actix nor rusqlite. Values are
//! plain data so that an operator can change thresholds in the config without a rebuild and
//! the runtime can hand a new value to [`crate::policy::Policy::set_config`].

use std::fmt;

/// One mebibyte, for the memory defaults.
const MIB: u64 = 1024 * 1024;

/// Policy settings; lives in the node config as `[policy]`.
///
/// Percentages are 0–100; durations are milliseconds. A resource is *strained* past its
/// `*_strained` threshold and *critical* past its `*_critical` one, as measured by one sample;
/// [`enter_after`](Self::enter_after) and [`leave_after`](Self::leave_after) turn those
/// per-sample readings into levels (hysteresis).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PolicyConfig {
    /// Percent of all cores in use above which CPU is strained. Default: 90.0.
    pub cpu_strained: f64,
    /// Percent of all cores in use above which CPU is critical. Default: 97.0.
    pub cpu_critical: f64,
    /// Bytes of memory available below which memory is strained. Default: 209715200 (200 MiB).
    pub memory_strained: u64,
    /// Bytes of memory available below which memory is critical. Default: 104857600 (100 MiB).
    pub memory_critical: u64,
    /// Percent of swap in use above which swap is strained (no swap: never). Default: 50.0.
    pub swap_strained: f64,
    /// Percent of swap in use above which swap is critical. Default: 80.0.
    pub swap_critical: f64,
    /// Percent free of the data folder's file system below which disk is strained: stop
    /// activating; stretch and shed the jobs that write data objects first. Default: 15.0.
    pub disk_strained: f64,
    /// Percent free of the data folder's file system below which disk is critical: pause
    /// writes — claim only maintenance runs, and hold (list `paused`) every other job.
    /// Default: 5.0.
    pub disk_critical: f64,
    /// Bytes per second the network link carries (receive + send); 0 means unknown, and the
    /// network is then never strained. Default: 0.
    pub network_capacity: u64,
    /// Percent of `network_capacity` in use above which the network is strained. Default: 80.0.
    pub network_strained: f64,
    /// Percent of `network_capacity` in use above which the network is critical. Default: 95.0.
    pub network_critical: f64,
    /// Linux PSI `some` — the percent of the time since the previous sample in which some task
    /// stalled on cpu, memory or io — above which that resource is strained; absent PSI
    /// counts as ok. Default: 40.0.
    pub psi_strained: f64,
    /// PSI `some` share of the last sample interval above which that resource is critical.
    /// Default: 80.0.
    pub psi_critical: f64,
    /// Percent of the cgroup's CPU quota periods in which it was throttled, since the previous
    /// sample, above which CPU throttling is strained (no quota: never). Default: 25.0.
    pub throttled_strained: f64,
    /// Percent of quota periods throttled above which CPU throttling is critical.
    /// Default: 60.0.
    pub throttled_critical: f64,
    /// Samples in a row at a worse level before a resource enters it (0 acts as 1).
    /// Default: 2.
    pub enter_after: u32,
    /// Samples in a row at a better level before a resource leaves its level (0 acts as 1).
    /// Default: 2.
    pub leave_after: u32,
    /// Milliseconds between steps: every resource ok this long before the next standby job is
    /// activated, one more job shed per this long while strained, one processor step per this
    /// long. Default: 30000.
    pub step_interval: i64,
    /// Milliseconds after a shed or stretch before anything is activated or restored again,
    /// and after a restore before the next strained shed or stretch (anti-flap).
    /// Default: 30000.
    pub cooldown: i64,
    /// Milliseconds of the flap budget's window: health activates or deactivates one job at
    /// most twice within it, whatever `cooldown` and `step_interval` are (a third toggle
    /// waits, and a shed waits rather than take a higher-priority job). Default: 60000.
    pub toggle_window: i64,
    /// Jobs with a priority at or above this are part of the minimum, like required jobs:
    /// active from start-up and never shed. Default: 100.
    pub priority_floor: i64,
    /// Processor utilization (0–1) above which it gets another instance, up to its maximum,
    /// when the node is healthy. Default: 0.9.
    pub busy_high: f64,
    /// Processor utilization (0–1) below which it loses an instance, down to its minimum.
    /// Default: 0.1.
    pub busy_low: f64,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            cpu_strained: 90.0,
            cpu_critical: 97.0,
            memory_strained: 200 * MIB,
            memory_critical: 100 * MIB,
            swap_strained: 50.0,
            swap_critical: 80.0,
            disk_strained: 15.0,
            disk_critical: 5.0,
            network_capacity: 0,
            network_strained: 80.0,
            network_critical: 95.0,
            psi_strained: 40.0,
            psi_critical: 80.0,
            throttled_strained: 25.0,
            throttled_critical: 60.0,
            enter_after: 2,
            leave_after: 2,
            step_interval: 30_000,
            cooldown: 30_000,
            toggle_window: 60_000,
            priority_floor: 100,
            busy_high: 0.9,
            busy_low: 0.1,
        }
    }
}

/// A rejected `[policy]` value: which field, its value, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyConfigError {
    /// The field, as written in the config (`cpu_critical`).
    pub field: &'static str,
    /// The rejected value, as text.
    pub value: String,
    /// Why it is rejected.
    pub reason: String,
}

impl fmt::Display for PolicyConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "policy.{} = {}: {}", self.field, self.value, self.reason)
    }
}

impl std::error::Error for PolicyConfigError {}

impl PolicyConfig {
    /// Checks ranges and orderings; the first problem found is returned. The policy itself
    /// tolerates any value (it never panics on a bad config), so this is for the config
    /// loader, which should refuse to start on a mistake rather than run a strange policy.
    pub fn validate(&self) -> Result<(), PolicyConfigError> {
        let percents = [
            ("cpu_strained", self.cpu_strained),
            ("cpu_critical", self.cpu_critical),
            ("swap_strained", self.swap_strained),
            ("swap_critical", self.swap_critical),
            ("disk_strained", self.disk_strained),
            ("disk_critical", self.disk_critical),
            ("network_strained", self.network_strained),
            ("network_critical", self.network_critical),
            ("psi_strained", self.psi_strained),
            ("psi_critical", self.psi_critical),
            ("throttled_strained", self.throttled_strained),
            ("throttled_critical", self.throttled_critical),
        ];
        for (field, v) in percents {
            if !(0.0..=100.0).contains(&v) {
                return Err(err(field, v, "must be a percentage from 0 to 100".into()));
            }
        }
        for (field, v) in [("busy_high", self.busy_high), ("busy_low", self.busy_low)] {
            if !(0.0..=1.0).contains(&v) {
                return Err(err(field, v, "must be a fraction from 0 to 1".into()));
            }
        }
        // "Critical" must be the worse side of "strained", or a resource would skip a level.
        let higher_is_worse = [
            (
                "cpu_critical",
                self.cpu_critical,
                "cpu_strained",
                self.cpu_strained,
            ),
            (
                "swap_critical",
                self.swap_critical,
                "swap_strained",
                self.swap_strained,
            ),
            (
                "network_critical",
                self.network_critical,
                "network_strained",
                self.network_strained,
            ),
            (
                "psi_critical",
                self.psi_critical,
                "psi_strained",
                self.psi_strained,
            ),
            (
                "throttled_critical",
                self.throttled_critical,
                "throttled_strained",
                self.throttled_strained,
            ),
        ];
        for (field, critical, other, strained) in higher_is_worse {
            if critical < strained {
                return Err(err(
                    field,
                    critical,
                    format!("must be at least {other} ({strained})"),
                ));
            }
        }
        if self.memory_critical > self.memory_strained {
            return Err(err(
                "memory_critical",
                self.memory_critical,
                format!("must be at most memory_strained ({})", self.memory_strained),
            ));
        }
        if self.disk_critical > self.disk_strained {
            return Err(err(
                "disk_critical",
                self.disk_critical,
                format!("must be at most disk_strained ({})", self.disk_strained),
            ));
        }
        if self.busy_low >= self.busy_high {
            return Err(err(
                "busy_low",
                self.busy_low,
                format!(
                    "must be below busy_high ({}), or a processor would gain and lose instances in turn",
                    self.busy_high
                ),
            ));
        }
        for (field, v) in [
            ("enter_after", self.enter_after),
            ("leave_after", self.leave_after),
        ] {
            if v == 0 {
                return Err(err(field, v, "must be at least 1 sample".into()));
            }
        }
        for (field, v) in [
            ("step_interval", self.step_interval),
            ("cooldown", self.cooldown),
            ("toggle_window", self.toggle_window),
        ] {
            if v < 0 {
                return Err(err(field, v, "must be 0 or more milliseconds".into()));
            }
        }
        Ok(())
    }
}

fn err(field: &'static str, value: impl fmt::Display, reason: String) -> PolicyConfigError {
    PolicyConfigError {
        field,
        value: value.to_string(),
        reason,
    }
}
