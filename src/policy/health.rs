//! Health: one [`Sample`] of the device, the [`Resource`]s read from it, each resource's
//! per-sample [`Level`] against the thresholds, and the hysteresis that turns those readings
//! into the levels the policy acts on ([`Health`]).
//!
//! Invariant: reads no clock and does no IO; it imports neither actix nor rusqlite. Levels
//! change only in [`Health::handle_sample`], by counting samples — never by elapsed time — so a
//! trace of samples fixes the levels whatever the clock does.

use crate::policy::PolicyConfig;

/// One health sample; the runtime's Health actor fills it from sysinfo and `/proc/pressure`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Sample {
    /// When it was taken, epoch ms.
    pub at: i64,
    /// Percent of all cores in use.
    pub cpu_used: f64,
    /// Bytes of memory available (0 with `memory_total` 0: unknown, counted ok).
    pub memory_available: u64,
    /// Bytes of memory in total; 0 when unknown.
    pub memory_total: u64,
    /// Bytes of swap in use.
    pub swap_used: u64,
    /// Bytes of swap in total; 0 means no swap (swap is then always ok).
    pub swap_total: u64,
    /// Bytes free on the data filesystem.
    pub disk_available: u64,
    /// Bytes in total on the data filesystem; 0 when unknown (disk is then ok).
    pub disk_total: u64,
    /// Bytes per second received plus sent.
    pub net_bytes_per_s: f64,
    /// PSI cpu `some avg10`, percent; `None` where the kernel has no PSI (counted ok).
    pub psi_cpu: Option<f64>,
    /// PSI memory `some avg10`, percent.
    pub psi_memory: Option<f64>,
    /// PSI io `some avg10`, percent.
    pub psi_io: Option<f64>,
}

/// A resource the policy watches. Each has one value per sample, in the unit of its
/// thresholds (see [`Resource::value`]).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Resource {
    /// Percent of all cores in use.
    Cpu,
    /// Bytes of memory available.
    Memory,
    /// Percent of swap in use.
    Swap,
    /// Percent free of the data filesystem.
    Disk,
    /// Percent of the configured link capacity in use.
    Network,
    /// PSI cpu `some avg10`, percent.
    PsiCpu,
    /// PSI memory `some avg10`, percent.
    PsiMemory,
    /// PSI io `some avg10`, percent.
    PsiIo,
}

impl Resource {
    /// Every resource, in a fixed order (the order of reasons and evidence).
    pub const ALL: [Resource; 8] = [
        Resource::Cpu,
        Resource::Memory,
        Resource::Swap,
        Resource::Disk,
        Resource::Network,
        Resource::PsiCpu,
        Resource::PsiMemory,
        Resource::PsiIo,
    ];

    /// The stable name: `cpu`, `memory`, `swap`, `disk`, `network`, `psi_cpu`, `psi_memory`,
    /// `psi_io`.
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
        }
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

    /// `value` against the threshold of `level`, in words: "cpu 96.2% > 90%",
    /// "memory 150 MiB available < 200 MiB", "disk 4.1% free < 5%".
    pub fn describe(self, value: f64, level: Level, cfg: &PolicyConfig) -> String {
        let (strained, critical, higher_is_worse) = self.thresholds(cfg);
        let threshold = match level {
            Level::Critical => critical,
            _ => strained,
        };
        let cmp = match (level, higher_is_worse) {
            (Level::Ok, true) => "<=",
            (Level::Ok, false) => ">=",
            (_, true) => ">",
            (_, false) => "<",
        };
        // One decimal, or two when one would print the threshold itself ("90.0% > 90%").
        let pct = if format!("{value:.1}") == format!("{threshold:.1}") {
            format!("{value:.2}")
        } else {
            format!("{value:.1}")
        };
        match self {
            Resource::Memory => format!("memory {} available {cmp} {}", mib(value), mib(threshold)),
            Resource::Swap => format!("swap {pct}% used {cmp} {threshold}%"),
            Resource::Disk => format!("disk {pct}% free {cmp} {threshold}%"),
            Resource::Network => format!(
                "network {pct}% of {} {cmp} {threshold}%",
                rate(cfg.network_capacity)
            ),
            Resource::Cpu => format!("cpu {pct}% {cmp} {threshold}%"),
            Resource::PsiCpu => format!("cpu pressure {pct}% {cmp} {threshold}%"),
            Resource::PsiMemory => format!("memory pressure {pct}% {cmp} {threshold}%"),
            Resource::PsiIo => format!("io pressure {pct}% {cmp} {threshold}%"),
        }
    }
}

fn mib(bytes: f64) -> String {
    format!("{:.0} MiB", bytes / (1024.0 * 1024.0))
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
)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    /// Below every threshold: the node may take on work.
    #[default]
    Ok,
    /// Past the strained threshold: activate nothing, shed the least important work.
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

/// Hysteresis for one resource. The run counters are functions of the recent readings only
/// (how many in a row were at least / at most each level), so the level is fixed by the trace.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Track {
    level: Level,
    /// Readings in a row at `Strained` or worse, and at `Critical`.
    run_at_least: [u32; 2],
    /// Readings in a row at `Ok`, and at `Strained` or better.
    run_at_most: [u32; 2],
}

impl Track {
    fn observe(&mut self, reading: Level, enter_after: u32, leave_after: u32) {
        let bump = |run: &mut u32, cond: bool| *run = if cond { run.saturating_add(1) } else { 0 };
        bump(&mut self.run_at_least[0], reading >= Level::Strained);
        bump(&mut self.run_at_least[1], reading >= Level::Critical);
        bump(&mut self.run_at_most[0], reading <= Level::Ok);
        bump(&mut self.run_at_most[1], reading <= Level::Strained);
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

    /// Readings in a row at the current level or worse (for reasons: "for 3 samples").
    fn run(&self) -> u32 {
        match self.level {
            Level::Ok => self.run_at_most[0],
            Level::Strained => self.run_at_least[0],
            Level::Critical => self.run_at_least[1],
        }
    }
}

/// Every resource's level with hysteresis, and the latest sample.
#[derive(Debug, Clone, Default)]
pub struct Health {
    tracks: [Track; 8],
    last: Option<Sample>,
    /// The latest sample's reading (before hysteresis) per resource.
    readings: [Level; 8],
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
            self.tracks[i].observe(reading, enter, leave);
        }
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
        self.tracks
            .iter()
            .map(|t| t.level)
            .max()
            .unwrap_or(Level::Ok)
    }

    /// The latest sample, if any.
    pub fn last(&self) -> Option<&Sample> {
        self.last.as_ref()
    }

    /// How many samples have been handled (a sequence number for "once per sample").
    pub fn samples(&self) -> u64 {
        self.samples
    }
}
