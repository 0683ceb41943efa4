//! Health is an actor. It owns the device sampler (sysinfo for CPU, memory and network;
//! `statvfs` for the data folder's file system; `/proc/pressure` for PSI; the node's own
//! cgroup, `runtime::cgroup`, whose limits bound memory and CPU where they are tighter than the
//! host's, and whose pressure files stand in for the host's where it has them); every
//! `health.interval` it sends a typed report to the Supervisor, which feeds the policy and
//! records the sample as `stat` rows.
//!
//! Invariant: sampling never blocks the arbiter for more than a refresh of counters and two
//! small `/proc` reads; the first CPU reading (meaningless to sysinfo) is never reported. The
//! disk is the file system the data folder is on, whatever its type (tmpfs, NFS and CIFS
//! included, which sysinfo's disk list leaves out), and the log says which mount that is.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use actix::prelude::*;
use serde::Serialize;
use sysinfo::{Networks, Pid, ProcessRefreshKind, ProcessesToUpdate, System};

use super::cgroup::Cgroup;
use crate::catalog::upkeep::StatSample;
use crate::executor::Clock;
use crate::policy::{Bound, Sample};

/// A health sample, sent to the Supervisor: what the policy judges (`sample`), plus what is
/// only recorded.
#[derive(Message, Debug, Clone, Serialize, PartialEq)]
#[rtype(result = "()")]
pub struct HealthReport {
    /// The resources the policy classifies (time, CPU, memory, swap, disk, network, PSI).
    #[serde(flatten)]
    pub sample: Sample,
    /// Bytes/s received over all interfaces since the previous sample.
    pub net_rx_per_s: f64,
    /// Bytes/s sent.
    pub net_tx_per_s: f64,
    /// 1-minute load average.
    pub load_1: f64,
    /// This process's CPU, % of one core.
    pub process_cpu: f64,
    /// This process's resident memory, bytes.
    pub process_rss: u64,
    /// How many times the OOM killer acted in the node's cgroup, when it has a memory
    /// controller that says.
    pub cgroup_oom_kills: Option<u64>,
}

impl HealthReport {
    /// The sample as `stat` rows.
    pub fn stats(&self) -> Vec<StatSample> {
        let mut out = Vec::new();
        let mut push = |t: &str, unit: &'static str, v: f64| {
            out.push(StatSample {
                stat_type: t.into(),
                unit,
                subject: None,
                value: v,
            });
        };
        push("device.cpu_used", "%", self.sample.cpu_used);
        push(
            "device.memory_available",
            "bytes",
            self.sample.memory_available as f64,
        );
        push("device.swap_used", "bytes", self.sample.swap_used as f64);
        push(
            "device.disk_available",
            "bytes",
            self.sample.disk_available as f64,
        );
        push("device.network_rx", "bytes/s", self.net_rx_per_s);
        push("device.network_tx", "bytes/s", self.net_tx_per_s);
        push("device.load_1", "load", self.load_1);
        for (name, v) in [
            ("device.psi_cpu", self.sample.psi_cpu),
            ("device.psi_memory", self.sample.psi_memory),
            ("device.psi_io", self.sample.psi_io),
        ] {
            if let Some(v) = v {
                push(name, "%", v);
            }
        }
        push("node.cpu_used", "%", self.process_cpu);
        push("node.rss", "bytes", self.process_rss as f64);
        if let Some(v) = self.sample.cpu_throttled {
            push("device.cpu_throttled", "%", v);
        }
        if let Some(n) = self.cgroup_oom_kills {
            push("node.cgroup_oom_kills", "kills", n as f64);
        }
        // The budget, its source as the subject: `jobvisor stats` lists it beside the rest.
        let mut budget = |t: &str, unit: &'static str, bound: Bound, v: f64| {
            out.push(StatSample {
                stat_type: t.into(),
                unit,
                subject: Some(bound.as_str().into()),
                value: v,
            });
        };
        if self.sample.memory_total > 0 {
            budget(
                "node.budget_memory",
                "bytes",
                self.sample.memory_bound,
                self.sample.memory_total as f64,
            );
        }
        if self.sample.cpu_cores > 0.0 {
            budget(
                "node.budget_cpu",
                "cores",
                self.sample.cpu_bound,
                self.sample.cpu_cores,
            );
        }
        out
    }
}

/// The file system a folder is on: its mount point and type, from `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// Where it is mounted (`/`, `/data`).
    pub point: PathBuf,
    /// Its type (`ext4`, `tmpfs`, `nfs4`).
    pub fs_type: String,
}

/// The mount that holds `path` (an absolute, canonical path): the longest mount point that is
/// a prefix of it, as listed in `mountinfo` (the text of `/proc/self/mountinfo`). Later lines
/// win a tie, as a later mount hides an earlier one at the same point.
pub fn mount_of(path: &Path, mountinfo: &str) -> Option<Mount> {
    let mut best: Option<Mount> = None;
    for line in mountinfo.lines() {
        // id parent major:minor root mount-point options [optional…] - type source super
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(dash) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        let (Some(point), Some(fs_type)) = (fields.get(4), fields.get(dash + 1)) else {
            continue;
        };
        let point = PathBuf::from(unescape_mount(point));
        if !path.starts_with(&point) {
            continue;
        }
        let longer = best
            .as_ref()
            .is_none_or(|b| point.as_os_str().len() >= b.point.as_os_str().len());
        if longer {
            best = Some(Mount {
                point,
                fs_type: (*fs_type).to_string(),
            });
        }
    }
    best
}

/// `mountinfo` escapes space, tab, newline and backslash as octal (`\040`).
fn unescape_mount(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Bytes available to unprivileged writers and bytes in total on the file system holding
/// `path` (`statvfs`), or `None` if it cannot be read.
pub fn disk_space(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs writes only into the struct we pass; the path is a valid C string.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statvfs(c_path.as_ptr(), &mut st) };
    if rc != 0 {
        return None;
    }
    let frsize = if st.f_frsize > 0 {
        st.f_frsize as u64
    } else {
        st.f_bsize as u64
    };
    Some((
        (st.f_bavail as u64).saturating_mul(frsize),
        (st.f_blocks as u64).saturating_mul(frsize),
    ))
}

/// `path` if it exists, else its nearest existing ancestor (a data folder not created yet is
/// on its parent's file system).
fn existing(path: &Path) -> PathBuf {
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let mut p = path.as_path();
    loop {
        if p.exists() {
            return std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        }
        match p.parent() {
            Some(parent) => p = parent,
            None => return path,
        }
    }
}

/// PSI `some`: the share of the time since the previous reading in which some task stalled,
/// from the kernel's cumulative `total=` (µs). The first reading has no previous one and
/// takes `avg10` instead. `avg10` alone is a 10-second moving average: it saw a short io
/// storm at a third of its height and kept restores waiting 12–16 s after it ended.
#[derive(Debug, Default)]
struct PsiWindow {
    previous: Option<(u64, Instant)>,
}

impl PsiWindow {
    /// The share from the cgroup's pressure file for `resource`, else the host's.
    fn read(&mut self, cgroup: &Cgroup, resource: &str) -> Option<f64> {
        let file = cgroup
            .pressure_file(resource)
            .unwrap_or_else(|| PathBuf::from(format!("/proc/pressure/{resource}")));
        let text = std::fs::read_to_string(file).ok()?;
        self.update(&text, Instant::now())
    }

    /// The share from the text of a `/proc/pressure/*` file read at `now`.
    fn update(&mut self, text: &str, now: Instant) -> Option<f64> {
        let some = text.lines().find(|l| l.starts_with("some"))?;
        let field = |name: &str| {
            some.split_whitespace()
                .find_map(|f| f.strip_prefix(name))
                .map(str::to_string)
        };
        let total: Option<u64> = field("total=").and_then(|v| v.parse().ok());
        let avg10: Option<f64> = field("avg10=").and_then(|v| v.parse().ok());
        let windowed = match (self.previous, total) {
            (Some((t0, at0)), Some(t1)) => {
                let us = now.duration_since(at0).as_micros().max(1) as f64;
                Some((t1.saturating_sub(t0) as f64 * 100.0 / us).clamp(0.0, 100.0))
            }
            _ => None,
        };
        self.previous = total.map(|t| (t, now));
        windowed.or(avg10)
    }
}

/// The cgroup's cumulative CPU counters at one reading.
#[derive(Debug, Clone, Copy)]
struct CpuCounters {
    at: Instant,
    usage_usec: Option<u64>,
    periods: Option<u64>,
    throttled_periods: Option<u64>,
}

/// The node's CPU budget from one reading of the host and the cgroup.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CpuBudget {
    /// Percent of `cores` in use.
    pub used: f64,
    /// The cores it is measured against.
    pub cores: f64,
    /// Whose they are.
    pub bound: Bound,
}

/// CPU use against the tightest budget: the cgroup's use of its effective cores
/// (`cgroup_used_cores`, from its usage counter) when its quota or cpuset allows fewer cores
/// than the host has, else the host's use of its cores. Contention from outside the cgroup
/// (a busy host starving a quota it does not reach) shows as CPU pressure, not here: a share
/// of the host would make the budget flip between two sizes from one sample to the next.
pub fn cpu_budget(
    host_used: f64,
    host_cores: f64,
    effective_cores: f64,
    cgroup_used_cores: Option<f64>,
) -> CpuBudget {
    match cgroup_used_cores {
        Some(used) if effective_cores < host_cores && effective_cores > 0.0 => CpuBudget {
            used: used * 100.0 / effective_cores,
            cores: effective_cores,
            bound: Bound::Cgroup,
        },
        _ => CpuBudget {
            used: host_used,
            cores: host_cores,
            bound: Bound::Host,
        },
    }
}

/// Memory against the tightest budget: `(available, total, bound)` — the host's, or the
/// cgroup's limit less its usage when that leaves less.
pub fn memory_budget(
    host_available: u64,
    host_total: u64,
    cgroup: Option<&super::cgroup::Memory>,
) -> (u64, u64, Bound) {
    match cgroup.and_then(|m| Some((m.available()?, m.limit?))) {
        Some((available, limit)) if available < host_available || host_total == 0 => {
            (available, limit, Bound::Cgroup)
        }
        _ => (host_available, host_total, Bound::Host),
    }
}

/// Reads the device's counters.
pub struct Sampler {
    system: Option<System>,
    networks: Option<Networks>,
    /// The data folder (or its nearest existing ancestor), whose file system is watched.
    data_dir: PathBuf,
    /// That file system's mount, when `/proc/self/mountinfo` says.
    mount: Option<Mount>,
    pid: Option<Pid>,
    /// When the network counters were last read (`received()` counts since then).
    last_net: Option<Instant>,
    psi: [PsiWindow; 3],
    /// The node's own cgroup.
    cgroup: Cgroup,
    /// The cgroup's CPU counters at the previous sample.
    cpu_before: Option<CpuCounters>,
}

impl Sampler {
    /// A sampler for the file system holding `data_dir`.
    pub fn new(data_dir: &Path) -> Self {
        let data_dir = existing(data_dir);
        let mount = std::fs::read_to_string("/proc/self/mountinfo")
            .ok()
            .and_then(|info| mount_of(&data_dir, &info));
        Self {
            system: System::new().ok(),
            networks: Networks::new_with_refreshed_list().ok(),
            data_dir,
            mount,
            pid: sysinfo::get_current_pid().ok(),
            last_net: None,
            psi: Default::default(),
            cgroup: Cgroup::of_self(),
            cpu_before: None,
        }
    }

    /// The node's cgroup, as found at start.
    pub fn cgroup(&self) -> &Cgroup {
        &self.cgroup
    }

    /// The folder whose file system is watched, and that file system's mount.
    pub fn watched(&self) -> (&Path, Option<&Mount>) {
        (&self.data_dir, self.mount.as_ref())
    }

    /// Takes a sample stamped `at` (epoch ms, by the engine's clock). CPU and PSI figures are
    /// relative to the previous call.
    pub fn sample(&mut self, at: i64) -> HealthReport {
        let (disk_available, disk_total) = disk_space(&self.data_dir).unwrap_or((0, 0));
        let disk_mount = match &self.mount {
            Some(m) => m.point.display().to_string(),
            None => self.data_dir.display().to_string(),
        };
        let [cpu, memory, io] = &mut self.psi;
        let mut r = HealthReport {
            sample: Sample {
                at,
                cpu_used: 0.0,
                memory_available: 0,
                memory_total: 0,
                swap_used: 0,
                swap_total: 0,
                disk_available,
                disk_total,
                disk_mount,
                net_bytes_per_s: 0.0,
                psi_cpu: cpu.read(&self.cgroup, "cpu"),
                psi_memory: memory.read(&self.cgroup, "memory"),
                psi_io: io.read(&self.cgroup, "io"),
                cpu_cores: 0.0,
                cpu_bound: Bound::Host,
                cpu_throttled: None,
                memory_bound: Bound::Host,
            },
            net_rx_per_s: 0.0,
            net_tx_per_s: 0.0,
            load_1: System::load_average().map(|l| l.one).unwrap_or(0.0),
            process_cpu: 0.0,
            process_rss: 0,
            cgroup_oom_kills: None,
        };
        let memory = self.cgroup.memory();
        r.cgroup_oom_kills = memory.as_ref().and_then(|m| m.oom_kills);
        let cpu = self.cgroup.cpu();
        let now = Instant::now();
        let counters = CpuCounters {
            at: now,
            usage_usec: cpu.usage_usec,
            periods: cpu.periods,
            throttled_periods: cpu.throttled_periods,
        };
        let before = self.cpu_before.replace(counters);
        let delta = |f: fn(&CpuCounters) -> Option<u64>| {
            let b = before.as_ref()?;
            Some(f(&counters)?.saturating_sub(f(b)?))
        };
        let cgroup_used_cores = before.and_then(|b| {
            let wall_us = now.duration_since(b.at).as_micros().max(1) as f64;
            delta(|c| c.usage_usec).map(|us| us as f64 / wall_us)
        });
        if cpu.quota_cores.is_some() {
            r.sample.cpu_throttled = match (delta(|c| c.periods), delta(|c| c.throttled_periods)) {
                // No period elapses while nothing in the cgroup wants a CPU.
                (Some(0), Some(_)) => Some(0.0),
                (Some(p), Some(t)) => Some((t as f64 * 100.0 / p as f64).min(100.0)),
                _ => None,
            };
        }
        if let Some(sys) = &mut self.system {
            sys.refresh_cpu_usage();
            sys.refresh_memory();
            let host_cores = sys.cpus().len() as f64;
            let (effective, _) = cpu.effective_cores(host_cores);
            let budget = cpu_budget(
                f64::from(sys.global_cpu_usage()),
                host_cores,
                effective,
                cgroup_used_cores,
            );
            r.sample.cpu_used = budget.used;
            r.sample.cpu_cores = budget.cores;
            r.sample.cpu_bound = budget.bound;
            let (available, total, bound) =
                memory_budget(sys.available_memory(), sys.total_memory(), memory.as_ref());
            r.sample.memory_available = available;
            r.sample.memory_total = total;
            r.sample.memory_bound = bound;
            r.sample.swap_used = sys.used_swap();
            r.sample.swap_total = sys.total_swap();
            if let Some(pid) = self.pid {
                sys.refresh_processes_specifics(
                    ProcessesToUpdate::Some(&[pid]),
                    false,
                    ProcessRefreshKind::nothing().with_cpu().with_memory(),
                );
                if let Some(p) = sys.process(pid) {
                    r.process_cpu = f64::from(p.cpu_usage());
                    r.process_rss = p.memory();
                }
            }
        }
        if let Some(nets) = &mut self.networks {
            nets.refresh(true);
            let (rx, tx) = nets.iter().fold((0u64, 0u64), |(rx, tx), (_, n)| {
                (rx + n.received(), tx + n.transmitted())
            });
            let now = Instant::now();
            if let Some(then) = self.last_net {
                let secs = now.duration_since(then).as_secs_f64().max(0.001);
                // `received()` is the amount since the previous refresh.
                r.net_rx_per_s = rx as f64 / secs;
                r.net_tx_per_s = tx as f64 / secs;
                r.sample.net_bytes_per_s = r.net_rx_per_s + r.net_tx_per_s;
            }
            self.last_net = Some(now);
        }
        r
    }
}

/// The Health actor.
pub struct Health {
    sampler: Sampler,
    interval: Duration,
    report_to: Recipient<HealthReport>,
    clock: std::sync::Arc<dyn Clock>,
    warmed_up: bool,
}

impl Health {
    /// A health actor sampling every `interval` the device and the file system holding
    /// `data_dir`, stamping samples by `clock`.
    pub fn new(
        data_dir: &Path,
        interval: Duration,
        report_to: Recipient<HealthReport>,
        clock: std::sync::Arc<dyn Clock>,
    ) -> Self {
        let sampler = Sampler::new(data_dir);
        let (dir, mount) = sampler.watched();
        let (available, total) = disk_space(dir).unwrap_or((0, 0));
        match mount {
            Some(m) => tracing::info!(
                data_dir = %dir.display(),
                mount = %m.point.display(),
                fs_type = %m.fs_type,
                free = %crate::policy::size(available as f64),
                size = %crate::policy::size(total as f64),
                "disk: watching the file system of the data folder"
            ),
            None => tracing::warn!(
                data_dir = %dir.display(),
                "disk: watching the data folder (its mount is not listed in /proc/self/mountinfo)"
            ),
        }
        let cgroup = sampler.cgroup();
        let limit = cgroup
            .memory()
            .and_then(|m| m.limit)
            .map_or("none".to_string(), |l| crate::policy::size(l as f64));
        let quota = cgroup
            .cpu()
            .quota_cores
            .map_or("none".to_string(), crate::policy::cores);
        tracing::info!(
            cgroup = %cgroup.describe(),
            memory_limit = %limit,
            cpu_quota = %quota,
            "budget: the tightest of the host and this cgroup"
        );
        Self {
            sampler,
            interval,
            report_to,
            clock,
            warmed_up: false,
        }
    }

    fn tick(&mut self) {
        let report = self.sampler.sample(self.clock.now_ms());
        if !self.warmed_up {
            // sysinfo's first CPU reading has no baseline.
            self.warmed_up = true;
            return;
        }
        self.report_to.do_send(report);
    }
}

impl Actor for Health {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.tick();
        // A first reading soon, then every interval.
        ctx.run_later(Duration::from_millis(500).min(self.interval), |act, _| {
            act.tick()
        });
        ctx.run_interval(self.interval, |act, _| act.tick());
    }
}

impl Supervised for Health {
    fn restarting(&mut self, _: &mut Context<Self>) {
        tracing::warn!("health actor restarting");
        self.warmed_up = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
22 1 253:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
40 22 0:35 / /data rw,nosuid - tmpfs tmpfs rw,size=262144k
41 22 0:36 / /data/nfs\\040share rw - nfs4 srv:/export rw
42 40 0:37 / /data rw - tmpfs tmpfs rw,size=1024k
";

    #[test]
    fn the_longest_mount_point_holding_the_folder_is_watched() {
        let m = mount_of(Path::new("/data/jobvisor"), MOUNTINFO).unwrap();
        assert_eq!(m.point, Path::new("/data"));
        // The later mount on /data hides the earlier one.
        assert_eq!(m.fs_type, "tmpfs");
        let nfs = mount_of(Path::new("/data/nfs share/x"), MOUNTINFO).unwrap();
        assert_eq!(
            (nfs.point.to_str(), nfs.fs_type.as_str()),
            (Some("/data/nfs share"), "nfs4")
        );
        // A prefix of characters is not a prefix of components.
        let root = mount_of(Path::new("/database"), MOUNTINFO).unwrap();
        assert_eq!(root.point, Path::new("/"));
        assert_eq!(root.fs_type, "ext4");
    }

    /// Regression (issue 18, defect 7): `avg10` saw an io storm at a third of its height and
    /// kept it for 12–16 s after it ended. The share of each sample interval sees it whole and
    /// drops as soon as it ends.
    #[test]
    fn psi_is_the_stalled_share_of_each_sample_interval() {
        let text = |total: u64, avg10: f64| {
            format!(
                "some avg10={avg10:.2} avg60=1.00 avg300=0.50 total={total}\n\
                 full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
            )
        };
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut w = PsiWindow::default();
        // The first reading has no interval: avg10 stands in.
        assert_eq!(w.update(&text(1_000_000, 3.5), at(0)), Some(3.5));
        // 900 ms of stall in 1 s: 90 %, while avg10 still says 31 %.
        assert_eq!(w.update(&text(1_900_000, 31.0), at(1_000)), Some(90.0));
        // The storm ended: no stall in the next second, though avg10 decays slowly.
        assert_eq!(w.update(&text(1_900_000, 28.0), at(2_000)), Some(0.0));
        // 250 ms of stall in 500 ms.
        assert_eq!(w.update(&text(2_150_000, 27.0), at(2_500)), Some(50.0));
        assert_eq!(w.update("garbage", at(3_000)), None);
    }

    const MIB: u64 = 1 << 20;

    #[test]
    fn memory_is_the_tightest_of_host_and_cgroup() {
        let cg = |limit: Option<u64>, usage: u64, inactive: u64| super::super::cgroup::Memory {
            version: super::super::cgroup::Version::V1,
            limit,
            usage,
            inactive_file: inactive,
            oom_kills: Some(0),
        };
        // The measurement of issue 31: a 400 MB cgroup on a host with 20 GiB free.
        let host = (20 * 1024 * MIB, 24 * 1024 * MIB);
        let m = cg(Some(400 * MIB), 380 * MIB, 18 * MIB);
        assert_eq!(
            memory_budget(host.0, host.1, Some(&m)),
            (38 * MIB, 400 * MIB, Bound::Cgroup)
        );
        // No limit, or a limit looser than what the host has free: the host's.
        assert_eq!(
            memory_budget(host.0, host.1, Some(&cg(None, 1, 0))),
            (host.0, host.1, Bound::Host)
        );
        let loose = cg(Some(64 * 1024 * MIB), 0, 0);
        assert_eq!(
            memory_budget(host.0, host.1, Some(&loose)),
            (host.0, host.1, Bound::Host)
        );
        assert_eq!(
            memory_budget(host.0, host.1, None),
            (host.0, host.1, Bound::Host)
        );
    }

    #[test]
    fn cpu_is_measured_against_the_effective_cores() {
        // Half a core used of a half-core quota on an idle 2-core host: 100 % of the cgroup's.
        assert_eq!(
            cpu_budget(25.0, 2.0, 0.5, Some(0.5)),
            CpuBudget {
                used: 100.0,
                cores: 0.5,
                bound: Bound::Cgroup
            }
        );
        // A busy host beside an idle cgroup: the node's own share of its quota (the host's
        // contention is CPU pressure's to show).
        assert_eq!(
            cpu_budget(99.0, 2.0, 0.5, Some(0.1)),
            CpuBudget {
                used: 20.0,
                cores: 0.5,
                bound: Bound::Cgroup
            }
        );
        // No quota or cpuset below the host's cores, or no usage counter: the host's.
        assert_eq!(cpu_budget(40.0, 2.0, 2.0, Some(0.8)).bound, Bound::Host);
        assert_eq!(cpu_budget(40.0, 2.0, 0.5, None).bound, Bound::Host);
    }

    #[test]
    fn disk_space_reads_the_folders_own_file_system() {
        let dir = tempfile::tempdir().unwrap();
        let (avail, total) = disk_space(dir.path()).unwrap();
        assert!(total > 0 && avail <= total, "{avail} of {total}");
        assert!(disk_space(Path::new("/no/such/folder")).is_none());
        // A folder not created yet is measured on its nearest existing ancestor.
        let sampler = Sampler::new(&dir.path().join("not/yet"));
        assert_eq!(
            sampler.watched().0,
            std::fs::canonicalize(dir.path()).unwrap()
        );
    }
}
