//! Health is an actor. It owns the device sampler (sysinfo, `/proc/pressure`); every
//! `health.interval` it records a sample as `stat` rows through the CatalogWriter and sends a
//! typed report to the Supervisor.
//!
//! Invariant: sampling never blocks the arbiter for more than a refresh of counters; the first
//! CPU reading (meaningless to sysinfo) is never reported.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use actix::prelude::*;
use serde::Serialize;
use sysinfo::{Disks, Networks, Pid, ProcessRefreshKind, ProcessesToUpdate, System};

use super::writer::{self, Writer};
use crate::catalog::now_ms;
use crate::catalog::queue::{self, StatSample};
use crate::policy::Sample;

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
        out
    }
}

/// Reads the device's counters.
pub struct Sampler {
    system: Option<System>,
    disks: Option<Disks>,
    networks: Option<Networks>,
    data_dir: PathBuf,
    pid: Option<Pid>,
    /// When the network counters were last read (`received()` counts since then).
    last_net: Option<Instant>,
}

impl Sampler {
    /// A sampler for the filesystem holding `data_dir`.
    pub fn new(data_dir: &Path) -> Self {
        Self {
            system: System::new().ok(),
            disks: Disks::new_with_refreshed_list().ok(),
            networks: Networks::new_with_refreshed_list().ok(),
            data_dir: std::fs::canonicalize(data_dir).unwrap_or_else(|_| data_dir.to_path_buf()),
            pid: sysinfo::get_current_pid().ok(),
            last_net: None,
        }
    }

    /// Takes a sample. CPU figures are relative to the previous call.
    pub fn sample(&mut self) -> HealthReport {
        let mut r = HealthReport {
            sample: Sample {
                at: now_ms(),
                cpu_used: 0.0,
                memory_available: 0,
                memory_total: 0,
                swap_used: 0,
                swap_total: 0,
                disk_available: 0,
                disk_total: 0,
                disk_mount: String::new(),
                net_bytes_per_s: 0.0,
                psi_cpu: psi("cpu"),
                psi_memory: psi("memory"),
                psi_io: psi("io"),
            },
            net_rx_per_s: 0.0,
            net_tx_per_s: 0.0,
            load_1: System::load_average().map(|l| l.one).unwrap_or(0.0),
            process_cpu: 0.0,
            process_rss: 0,
        };
        if let Some(sys) = &mut self.system {
            sys.refresh_cpu_usage();
            sys.refresh_memory();
            r.sample.cpu_used = f64::from(sys.global_cpu_usage());
            r.sample.memory_available = sys.available_memory();
            r.sample.memory_total = sys.total_memory();
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
        if let Some(disks) = &mut self.disks {
            disks.refresh(false);
            // The disk whose mount point is the longest prefix of the data folder.
            if let Some(d) = disks
                .iter()
                .filter(|d| self.data_dir.starts_with(d.mount_point()))
                .max_by_key(|d| d.mount_point().as_os_str().len())
            {
                r.sample.disk_available = d.available_space();
                r.sample.disk_total = d.total_space();
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

/// `some avg10` from `/proc/pressure/<resource>`, if the kernel has PSI.
fn psi(resource: &str) -> Option<f64> {
    let text = std::fs::read_to_string(format!("/proc/pressure/{resource}")).ok()?;
    let some = text.lines().find(|l| l.starts_with("some"))?;
    some.split_whitespace()
        .find_map(|f| f.strip_prefix("avg10="))
        .and_then(|v| v.parse().ok())
}

/// The Health actor.
pub struct Health {
    sampler: Sampler,
    interval: Duration,
    writer: Addr<Writer>,
    node_id: i64,
    report_to: Recipient<HealthReport>,
    warmed_up: bool,
}

impl Health {
    /// A health actor sampling every `interval`.
    pub fn new(
        data_dir: &Path,
        interval: Duration,
        writer: Addr<Writer>,
        node_id: i64,
        report_to: Recipient<HealthReport>,
    ) -> Self {
        Self {
            sampler: Sampler::new(data_dir),
            interval,
            writer,
            node_id,
            report_to,
            warmed_up: false,
        }
    }

    fn tick(&mut self, ctx: &mut Context<Self>) {
        let report = self.sampler.sample();
        if !self.warmed_up {
            // sysinfo's first CPU reading has no baseline.
            self.warmed_up = true;
            return;
        }
        self.report_to.do_send(report.clone());
        let stats = report.stats();
        let node = self.node_id;
        let writer = self.writer.clone();
        ctx.spawn(
            async move {
                if let Err(e) = writer::call(&writer, move |c| {
                    queue::record_stats(c, node, report.sample.at, &stats)
                })
                .await
                {
                    tracing::warn!("recording health stats: {e}");
                }
            }
            .into_actor(self),
        );
    }
}

impl Actor for Health {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.tick(ctx);
        // A first reading soon, then every interval.
        ctx.run_later(Duration::from_millis(500).min(self.interval), |act, ctx| {
            act.tick(ctx)
        });
        ctx.run_interval(self.interval, |act, ctx| act.tick(ctx));
    }
}

impl Supervised for Health {
    fn restarting(&mut self, _: &mut Context<Self>) {
        tracing::warn!("health actor restarting");
        self.warmed_up = false;
    }
}
