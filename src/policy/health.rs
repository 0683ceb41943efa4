//! Health: one [`Sample`] of the device, the [`Resource`]s read from it, each resource's
//! per-sample [`Level`] against the thresholds, the hysteresis that turns those readings into
//! the levels the policy acts on ([`Health`]), and the words and [`Evidence`] that explain a
//! level to an operator.
//!
//! Invariant: reads no clock and does no IO; it imports neither actix nor rusqlite. Levels
//! change only in [`Health::handle_sample`], by counting samples — never by elapsed time — so a
//! trace of samples fixes the levels whatever the clock does. An explanation states the latest
//! reading against the threshold it is compared with, and how many readings in a row (over
//! how long) were on the same side of it: never a count the readings do not support.

use crate::policy::PolicyConfig;

/// Which limit a figure of the node's budget comes from: the host's, or the node's own
/// cgroup's (a container's, a service's) where that is tighter.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Hash,
    serde::Serialize,
    serde::Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    /// The machine's (or VM's) own figures.
    #[default]
    Host,
    /// The node's cgroup: its memory limit, CPU quota or cpuset.
    Cgroup,
}

impl Bound {
    /// `host` or `cgroup`.
    pub fn as_str(self) -> &'static str {
        match self {
            Bound::Host => "host",
            Bound::Cgroup => "cgroup",
        }
    }
}

/// One health sample; the runtime's Health actor fills it from sysinfo, `statvfs`,
/// `/proc/pressure` and the node's cgroup. Memory and CPU are the node's budget: the tightest
/// of the host's and the cgroup's, with the bound that applied.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Sample {
    /// When it was taken, epoch ms.
    pub at: i64,
    /// Percent of the node's cores in use (`cpu_cores` of them: the host's, or fewer when a
    /// cgroup's quota or cpuset allows fewer).
    pub cpu_used: f64,
    /// The cores the node may use: the fewest of the host's, the cgroup's quota (quota ÷
    /// period) and its cpuset; 0 when unknown.
    #[serde(default)]
    pub cpu_cores: f64,
    /// Whose limit `cpu_cores` is.
    #[serde(default)]
    pub cpu_bound: Bound,
    /// Percent of the cgroup's CPU quota periods since the previous sample in which it was
    /// throttled; `None` without a quota or before two readings (counted ok).
    #[serde(default)]
    pub cpu_throttled: Option<f64>,
    /// Bytes of memory available to the node: the host's available memory, or the cgroup's
    /// limit less its usage (reclaimable page cache counted free) when that is smaller
    /// (0 with `memory_total` 0: unknown, counted ok).
    pub memory_available: u64,
    /// Bytes of memory in total of the bound that applied (the host's memory or the cgroup's
    /// limit); 0 when unknown.
    pub memory_total: u64,
    /// Whose figures `memory_available` and `memory_total` are.
    #[serde(default)]
    pub memory_bound: Bound,
    /// Bytes of swap in use.
    pub swap_used: u64,
    /// Bytes of swap in total; 0 means no swap (swap is then always ok).
    pub swap_total: u64,
    /// Bytes free (for unprivileged writers) on the file system holding the data folder.
    pub disk_available: u64,
    /// Bytes in total on that file system; 0 when unknown (disk is then ok).
    pub disk_total: u64,
    /// The mount point of that file system, for reasons ("" when unknown).
    #[serde(default)]
    pub disk_mount: String,
    /// Bytes per second received plus sent.
    pub net_bytes_per_s: f64,
    /// PSI cpu `some`: percent of the time since the previous sample in which some task
    /// stalled waiting for a CPU; `None` where the kernel has no PSI (counted ok).
    pub psi_cpu: Option<f64>,
    /// PSI memory `some`, percent of the time since the previous sample.
    pub psi_memory: Option<f64>,
    /// PSI io `some`, percent of the time since the previous sample.
    pub psi_io: Option<f64>,
}

/// A resource the policy watches. Each has one value per sample, in the unit of its
/// thresholds (see [`Resource::value`]).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Resource {
    /// Percent of all cores in use.
    Cpu,
    /// Bytes of memory available.
    Memory,
    /// Percent of swap in use.
    Swap,
    /// Percent free of the data file system.
    Disk,
    /// Percent of the configured link capacity in use.
    Network,
    /// PSI cpu `some`, percent of the last sample interval.
    PsiCpu,
    /// PSI memory `some`, percent of the last sample interval.
    PsiMemory,
    /// PSI io `some`, percent of the last sample interval.
    PsiIo,
    /// Percent of the cgroup's CPU quota periods in which it was throttled.
    CpuThrottled,
}

impl Resource {
    /// Every resource, in a fixed order (the order of reasons and evidence).
    pub const ALL: [Resource; RESOURCES] = [
        Resource::Cpu,
        Resource::Memory,
        Resource::Swap,
        Resource::Disk,
        Resource::Network,
        Resource::PsiCpu,
        Resource::PsiMemory,
        Resource::PsiIo,
        Resource::CpuThrottled,
    ];

    /// The stable name: `cpu`, `memory`, `swap`, `disk`, `network`, `psi_cpu`, `psi_memory`,
    /// `psi_io`, `cpu_throttled`.
    pub fn as_str(self) -> &'static str {
        match self {
            Resource::Cpu => "cpu",
            Resource::Memory => "memory",
            Resource::Swap => "swap",
            Resource::Disk => "disk",
            Resource::Network => "network",
            Resource::PsiCpu => "psi_cpu",
            Resource::PsiMemory => "psi_memory",
            Resource::PsiIo => "psi_io",
            Resource::CpuThrottled => "cpu_throttled",
        }
    }

    /// The resource named by [`Resource::as_str`].
    pub fn parse(s: &str) -> Option<Resource> {
        Resource::ALL.into_iter().find(|r| r.as_str() == s)
    }

    /// This resource's value in `sample`, in the unit of its thresholds; `None` when the
    /// sample cannot say (no PSI, no swap, unknown totals, unknown link capacity) or the
    /// reading is not a number. A resource without a value is ok.
    pub fn value(self, sample: &Sample, cfg: &PolicyConfig) -> Option<f64> {
        let v = match self {
            Resource::Cpu => Some(sample.cpu_used),
            Resource::Memory => (sample.memory_total > 0).then_some(sample.memory_available as f64),
            Resource::Swap => (sample.swap_total > 0)
                .then(|| sample.swap_used as f64 * 100.0 / sample.swap_total as f64),
            Resource::Disk => (sample.disk_total > 0)
                .then(|| sample.disk_available as f64 * 100.0 / sample.disk_total as f64),
            Resource::Network => (cfg.network_capacity > 0)
                .then(|| sample.net_bytes_per_s * 100.0 / cfg.network_capacity as f64),
            Resource::PsiCpu => sample.psi_cpu,
            Resource::PsiMemory => sample.psi_memory,
            Resource::PsiIo => sample.psi_io,
            Resource::CpuThrottled => sample.cpu_throttled,
        };
        v.filter(|v| v.is_finite())
    }

    /// The strained and critical thresholds, and whether a higher value is worse.
    fn thresholds(self, cfg: &PolicyConfig) -> (f64, f64, bool) {
        match self {
            Resource::Cpu => (cfg.cpu_strained, cfg.cpu_critical, true),
            Resource::Memory => (
                cfg.memory_strained as f64,
                cfg.memory_critical as f64,
                false,
            ),
            Resource::Swap => (cfg.swap_strained, cfg.swap_critical, true),
            Resource::Disk => (cfg.disk_strained, cfg.disk_critical, false),
            Resource::Network => (cfg.network_strained, cfg.network_critical, true),
            Resource::PsiCpu | Resource::PsiMemory | Resource::PsiIo => {
                (cfg.psi_strained, cfg.psi_critical, true)
            }
            Resource::CpuThrottled => (cfg.throttled_strained, cfg.throttled_critical, true),
        }
    }

    /// The threshold a reading must pass to be at `level` (the strained one for `Ok`).
    fn threshold(self, level: Level, cfg: &PolicyConfig) -> f64 {
        let (strained, critical, _) = self.thresholds(cfg);
        if level == Level::Critical {
            critical
        } else {
            strained
        }
    }

    /// Whether a higher value is worse (CPU) or better (free memory, free disk).
    fn higher_is_worse(self) -> bool {
        !matches!(self, Resource::Memory | Resource::Disk)
    }

    /// The level of one reading, before hysteresis. Thresholds are strict (`>` / `<`), as in
    /// "CPU > 90 %": a reading exactly at the threshold is still ok.
    pub fn classify(self, value: Option<f64>, cfg: &PolicyConfig) -> Level {
        let Some(v) = value else { return Level::Ok };
        let (strained, critical, higher_is_worse) = self.thresholds(cfg);
        let past = |t: f64| if higher_is_worse { v > t } else { v < t };
        if past(critical) {
            Level::Critical
        } else if past(strained) {
            Level::Strained
        } else {
            Level::Ok
        }
    }

    /// The reading in words, without a comparison: "cpu 96.2%", "memory 150 MiB available",
    /// "disk /data: 3.1% free (7.9 MiB of 256 MiB)". `threshold` only decides the precision
    /// of a percentage (two decimals when one would print the threshold itself).
    fn reading_text(
        self,
        value: f64,
        threshold: f64,
        sample: &Sample,
        cfg: &PolicyConfig,
    ) -> String {
        let pct = if format!("{value:.1}") == format!("{threshold:.1}") {
            format!("{value:.2}%")
        } else {
            format!("{value:.1}%")
        };
        let budget = self.budget(sample);
        match self {
            Resource::Cpu => match budget {
                Some(b) => format!("cpu {pct} of {b}"),
                None => format!("cpu {pct}"),
            },
            Resource::Memory => match budget {
                Some(b) => format!("memory {} free of {b}", size(value)),
                None => format!("memory {} available", size(value)),
            },
            Resource::Swap => format!("swap {pct} used"),
            Resource::Disk => {
                let mount = if sample.disk_mount.is_empty() {
                    String::new()
                } else {
                    format!(" {}:", sample.disk_mount)
                };
                format!(
                    "disk{mount} {pct} free ({} of {})",
                    size(sample.disk_available as f64),
                    size(sample.disk_total as f64)
                )
            }
            Resource::Network => {
                format!("network {pct} of {}", rate(cfg.network_capacity))
            }
            Resource::PsiCpu => format!("cpu pressure {pct}"),
            Resource::PsiMemory => format!("memory pressure {pct}"),
            Resource::PsiIo => format!("io pressure {pct}"),
            Resource::CpuThrottled => match budget {
                Some(b) => format!("cpu throttled in {pct} of the quota's periods ({b})"),
                None => format!("cpu throttled in {pct} of the quota's periods"),
            },
        }
    }

    /// The budget a reading is measured against, naming whose it is: "the cgroup's 400 MiB",
    /// "the host's 2 cores"; `None` for resources without one or when it is unknown.
    pub fn budget(self, sample: &Sample) -> Option<String> {
        match self {
            Resource::Memory => (sample.memory_total > 0).then(|| {
                format!(
                    "the {}'s {}",
                    sample.memory_bound.as_str(),
                    size(sample.memory_total as f64)
                )
            }),
            Resource::Cpu | Resource::CpuThrottled => (sample.cpu_cores > 0.0).then(|| {
                format!(
                    "the {}'s {}",
                    sample.cpu_bound.as_str(),
                    cores(sample.cpu_cores)
                )
            }),
            _ => None,
        }
    }

    /// A threshold in words, in the unit of the reading: "90%", "200 MiB".
    fn threshold_text(self, threshold: f64) -> String {
        match self {
            Resource::Memory => size(threshold),
            _ => format!("{threshold}%"),
        }
    }

    /// The unit of [`Evidence::value`]: `MiB` for memory, `%` for the rest.
    pub fn unit(self) -> &'static str {
        match self {
            Resource::Memory => "MiB",
            _ => "%",
        }
    }

    /// `v` (in the unit of [`Resource::value`]) in the unit of [`Resource::unit`], rounded to
    /// a tenth.
    fn in_unit(self, v: f64) -> f64 {
        let v = match self {
            Resource::Memory => v / MIB,
            _ => v,
        };
        (v * 10.0).round() / 10.0
    }
}

const MIB: f64 = 1024.0 * 1024.0;

/// How many resources there are.
pub const RESOURCES: usize = 9;

/// A number of cores in words: "1 core", "2 cores", "0.5 cores", "1.25 cores".
pub fn cores(n: f64) -> String {
    let text = format!("{n:.2}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "1" {
        "1 core".into()
    } else {
        format!("{text} cores")
    }
}

/// A size in words: "7.9 MiB", "256 MiB", "1.5 GiB".
pub fn size(bytes: f64) -> String {
    let gib = bytes / (1024.0 * MIB);
    let mib = bytes / MIB;
    if gib >= 1.0 {
        format!("{gib:.1} GiB")
    } else if mib >= 10.0 || mib == mib.round() {
        format!("{mib:.0} MiB")
    } else {
        format!("{mib:.1} MiB")
    }
}

fn rate(bytes_per_s: u64) -> String {
    if bytes_per_s >= 1_000_000 {
        format!("{:.0} MB/s", bytes_per_s as f64 / 1e6)
    } else {
        format!("{bytes_per_s} B/s")
    }
}

/// How a resource (or the node) is doing. Ordered: `Ok < Strained < Critical`.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    /// Below every threshold: the node may take on work.
    #[default]
    Ok,
    /// Past the strained threshold: activate nothing, stretch or shed the least important
    /// work.
    Strained,
    /// Past the critical threshold: shed at every sample down to the minimum.
    Critical,
}

impl Level {
    /// `ok`, `strained` or `critical`.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Ok => "ok",
            Level::Strained => "strained",
            Level::Critical => "critical",
        }
    }

    /// The level named by [`Level::as_str`].
    pub fn parse(s: &str) -> Option<Level> {
        [Level::Ok, Level::Strained, Level::Critical]
            .into_iter()
            .find(|l| l.as_str() == s)
    }
}

/// One resource's latest value behind a decision, rounded, in a named unit, beside the
/// thresholds it was compared with and its levels: what an operator needs to check the
/// reason without knowing the configuration.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Evidence {
    /// The resource.
    pub resource: Resource,
    /// Its latest value in `unit`, rounded to a tenth.
    pub value: f64,
    /// `%` or `MiB`.
    pub unit: String,
    /// The strained threshold, in `unit`.
    pub strained: f64,
    /// The critical threshold, in `unit`.
    pub critical: f64,
    /// The level after hysteresis.
    pub level: Level,
    /// The level of the latest reading alone.
    pub reading: Level,
    /// The budget the value is measured against, naming whose it is ("the cgroup's 400
    /// MiB", "the host's 2 cores"), for memory and CPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<String>,
}

impl Evidence {
    /// In words: "cpu 97.1% (critical: > 97%)", "memory 150.2 MiB free of the cgroup's 400
    /// MiB (strained: < 200 MiB)",
    /// "cpu 92.0% (strained: > 90%; level critical)" when hysteresis holds a level the
    /// reading is no longer at.
    pub fn describe(&self) -> String {
        let higher_is_worse = self.resource.higher_is_worse();
        let threshold = if self.reading == Level::Critical {
            self.critical
        } else {
            self.strained
        };
        let cmp = match (self.reading, higher_is_worse) {
            (Level::Ok, true) => "<=",
            (Level::Ok, false) => ">=",
            (_, true) => ">",
            (_, false) => "<",
        };
        let held = if self.level == self.reading {
            String::new()
        } else {
            format!("; level {}", self.level.as_str())
        };
        let amount = |v: f64| {
            if self.unit == "MiB" {
                size(v * MIB)
            } else {
                format!("{v}{}", self.unit)
            }
        };
        let of = match (&self.budget, self.resource) {
            (Some(b), Resource::Memory) => format!(" free of {b}"),
            (Some(b), Resource::CpuThrottled) => format!(" of the quota's periods ({b})"),
            (Some(b), _) => format!(" of {b}"),
            (None, _) => String::new(),
        };
        format!(
            "{} {}{of} ({}: {cmp} {}{held})",
            self.resource.as_str(),
            amount(self.value),
            self.reading.as_str(),
            amount(threshold)
        )
    }
}

/// Hysteresis for one resource. The run counters are functions of the recent readings only
/// (how many in a row were at least / at most each level), so the level is fixed by the trace;
/// beside each counter, when its run began (the time of its first reading), for durations.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Track {
    level: Level,
    /// Readings in a row at `Strained` or worse, and at `Critical`.
    run_at_least: [u32; 2],
    /// When each of those runs began.
    since_at_least: [i64; 2],
    /// Readings in a row at `Ok`, and at `Strained` or better.
    run_at_most: [u32; 2],
    /// When each of those runs began.
    since_at_most: [i64; 2],
}

impl Track {
    fn observe(&mut self, reading: Level, at: i64, enter_after: u32, leave_after: u32) {
        let bump = |run: &mut u32, since: &mut i64, cond: bool| {
            if !cond {
                *run = 0;
            } else {
                if *run == 0 {
                    *since = at;
                }
                *run = run.saturating_add(1);
            }
        };
        bump(
            &mut self.run_at_least[0],
            &mut self.since_at_least[0],
            reading >= Level::Strained,
        );
        bump(
            &mut self.run_at_least[1],
            &mut self.since_at_least[1],
            reading >= Level::Critical,
        );
        bump(
            &mut self.run_at_most[0],
            &mut self.since_at_most[0],
            reading <= Level::Ok,
        );
        bump(
            &mut self.run_at_most[1],
            &mut self.since_at_most[1],
            reading <= Level::Strained,
        );
        if reading > self.level {
            // Enter the worst level that has been sustained long enough.
            for (i, target) in [(1, Level::Critical), (0, Level::Strained)] {
                if target > self.level && self.run_at_least[i] >= enter_after {
                    self.level = target;
                    break;
                }
            }
        } else if reading < self.level {
            // Leave for the best level that has been sustained long enough: two ok readings
            // take a critical resource straight to ok.
            for (i, target) in [(0, Level::Ok), (1, Level::Strained)] {
                if target < self.level && self.run_at_most[i] >= leave_after {
                    self.level = target;
                    break;
                }
            }
        }
    }

    /// Readings in a row at the current level or worse (or at ok, when ok).
    fn run(&self) -> u32 {
        match self.level {
            Level::Ok => self.run_at_most[0],
            Level::Strained => self.run_at_least[0],
            Level::Critical => self.run_at_least[1],
        }
    }

    /// The run of readings on the same side of `level`'s threshold as the latest one: at
    /// `level` or worse when `past`, better than `level` otherwise. `(count, since)`.
    fn run_against(&self, level: Level, past: bool) -> (u32, i64) {
        let i = usize::from(level == Level::Critical);
        if past {
            (self.run_at_least[i], self.since_at_least[i])
        } else {
            (self.run_at_most[i], self.since_at_most[i])
        }
    }
}

/// Every resource's level with hysteresis, and the latest sample.
#[derive(Debug, Clone, Default)]
pub struct Health {
    tracks: [Track; RESOURCES],
    last: Option<Sample>,
    /// The time of the sample before the latest one.
    previous_at: Option<i64>,
    /// The latest sample's reading (before hysteresis) per resource.
    readings: [Level; RESOURCES],
    samples: u64,
}

impl Health {
    /// Feeds one sample: each resource's reading moves its counters, and its level changes
    /// after `enter_after` readings in a row at a worse level, or `leave_after` at a better one.
    pub fn handle_sample(&mut self, sample: &Sample, cfg: &PolicyConfig) {
        let (enter, leave) = (cfg.enter_after.max(1), cfg.leave_after.max(1));
        for (i, r) in Resource::ALL.into_iter().enumerate() {
            let reading = r.classify(r.value(sample, cfg), cfg);
            self.readings[i] = reading;
            self.tracks[i].observe(reading, sample.at, enter, leave);
        }
        self.previous_at = self.last.as_ref().map(|s| s.at);
        self.last = Some(sample.clone());
        self.samples += 1;
    }

    /// The level of `r` after hysteresis (ok before any sample).
    pub fn level(&self, r: Resource) -> Level {
        self.tracks[r as usize].level
    }

    /// The latest reading of `r` before hysteresis.
    pub fn reading(&self, r: Resource) -> Level {
        self.readings[r as usize]
    }

    /// How many readings in a row `r` has had at its current level (or worse, if not ok).
    pub fn run(&self, r: Resource) -> u32 {
        self.tracks[r as usize].run()
    }

    /// The worst level of any resource.
    pub fn overall(&self) -> Level {
        self.overall_except(None)
    }

    /// The worst level of any resource but `skip`.
    pub fn overall_except(&self, skip: Option<Resource>) -> Level {
        self.kept(skip).map(|t| t.level).max().unwrap_or(Level::Ok)
    }

    /// The tracks of every resource but `skip`.
    fn kept(&self, skip: Option<Resource>) -> impl Iterator<Item = &Track> {
        self.tracks
            .iter()
            .enumerate()
            .filter(move |(i, _)| skip.is_none_or(|r| r as usize != *i))
            .map(|(_, t)| t)
    }

    /// The latest sample, if any.
    pub fn last(&self) -> Option<&Sample> {
        self.last.as_ref()
    }

    /// Milliseconds between the latest two samples (0 before two, or if the clock went back).
    pub fn gap(&self) -> i64 {
        match (&self.last, self.previous_at) {
            (Some(s), Some(p)) => (s.at - p).max(0),
            _ => 0,
        }
    }

    /// How many samples have been handled (a sequence number for "once per sample").
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// The run of samples in which every resource read ok: `(count, since)`, the shortest
    /// run of any resource.
    pub fn ok_readings(&self) -> (u32, i64) {
        self.ok_readings_except(None)
    }

    /// [`Health::ok_readings`] of every resource but `skip`.
    pub fn ok_readings_except(&self, skip: Option<Resource>) -> (u32, i64) {
        let n = self.kept(skip).map(|t| t.run_at_most[0]).min().unwrap_or(0);
        let since = self
            .kept(skip)
            .map(|t| t.since_at_most[0])
            .max()
            .unwrap_or(0);
        (n, since)
    }

    /// `r`'s latest value, in the unit of its thresholds.
    pub fn value(&self, r: Resource, cfg: &PolicyConfig) -> Option<f64> {
        self.last.as_ref().and_then(|s| r.value(s, cfg))
    }

    /// `sample`'s reading of `r` in words with the level it reads (before hysteresis) and the
    /// threshold of that level, or of strained when it reads ok: "disk /data: 1.6% free (16 MiB
    /// of 1.0 GiB), critical below 5%". `None` without a value. For a sample the policy has not
    /// taken in (a write failed before the policy saw any).
    pub fn describe_sample(r: Resource, sample: &Sample, cfg: &PolicyConfig) -> Option<String> {
        let value = r.value(sample, cfg)?;
        let level = r.classify(Some(value), cfg);
        let threshold = r.threshold(level.max(Level::Strained), cfg);
        let side = match (level, r.higher_is_worse()) {
            (Level::Ok, true) => "strained above",
            (Level::Ok, false) => "strained below",
            (_, true) => "above",
            (_, false) => "below",
        };
        let named = if level == Level::Ok {
            "ok, ".to_string()
        } else {
            format!("{} ", level.as_str())
        };
        Some(format!(
            "{}, {named}{side} {}",
            r.reading_text(value, threshold, sample, cfg),
            r.threshold_text(threshold)
        ))
    }

    /// The latest reading of `r` against the threshold of `level` (strained or critical), in
    /// words, with the run of readings on the same side of that threshold:
    /// "cpu 96.2% > 90% (strained) for 2 samples in a row (5.0 s)",
    /// "disk /data: 10.0% free (25 MiB of 256 MiB) >= 5% for 2 samples in a row (1.0 s)".
    /// `None` without a value.
    pub fn explain(&self, r: Resource, level: Level, cfg: &PolicyConfig) -> Option<String> {
        let sample = self.last.as_ref()?;
        let value = r.value(sample, cfg)?;
        let level = level.max(Level::Strained);
        let threshold = r.threshold(level, cfg);
        let past = r.classify(Some(value), cfg) >= level;
        let cmp = match (past, r.higher_is_worse()) {
            (true, true) => ">",
            (true, false) => "<",
            (false, true) => "<=",
            (false, false) => ">=",
        };
        let named = if past {
            format!(" ({})", level.as_str())
        } else {
            String::new()
        };
        let (n, since) = self.tracks[r as usize].run_against(level, past);
        Some(format!(
            "{} {cmp} {}{named} for {}",
            r.reading_text(value, threshold, sample, cfg),
            r.threshold_text(threshold),
            samples_over(n, sample.at - since)
        ))
    }

    /// `r`'s latest value as evidence, if it has one.
    pub fn evidence(&self, r: Resource, cfg: &PolicyConfig) -> Option<Evidence> {
        let value = self.value(r, cfg)?;
        let (strained, critical, _) = r.thresholds(cfg);
        Some(Evidence {
            resource: r,
            value: r.in_unit(value),
            unit: r.unit().to_string(),
            strained: r.in_unit(strained),
            critical: r.in_unit(critical),
            level: self.level(r),
            reading: self.reading(r),
            budget: self.last.as_ref().and_then(|s| r.budget(s)),
        })
    }
}

/// "1 sample", "3 samples in a row (2.0 s)" ("no sample" for 0, which a reason never
/// states: it is called with a run that supports it).
pub fn samples_over(n: u32, ms: i64) -> String {
    match n {
        0 => "no sample".into(),
        1 => "1 sample".into(),
        _ => format!("{n} samples in a row ({})", duration(ms)),
    }
}

/// A duration in words, with one rule for every size: milliseconds below a second ("6 ms"),
/// tenths of a second below 10 s ("1.5 s", "2.0 s"), whole seconds below 2 min ("88 s",
/// "90 s"), minutes and seconds above ("2 min", "2 min 5 s").
pub fn duration(ms: i64) -> String {
    let ms = ms.max(0);
    if ms < 1_000 {
        return format!("{ms} ms");
    }
    if ms < 9_950 {
        return format!("{:.1} s", ms as f64 / 1000.0);
    }
    let s = (ms + 500) / 1000;
    if s < 120 {
        format!("{s} s")
    } else if s % 60 == 0 {
        format!("{} min", s / 60)
    } else {
        format!("{} min {} s", s / 60, s % 60)
    }
}
