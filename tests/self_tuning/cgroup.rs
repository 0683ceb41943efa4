//! A node inside a memory cgroup (issue 31's measurement): six command jobs of 90 MB each in a
//! 400 MiB cgroup, on a host with gigabytes free. The node reads its budget from the cgroup —
//! the status, `/metrics` and `jobvisor stats` say so, and its decisions name "the cgroup's
//! 400 MiB" — activates only what fits, most important first, and the kernel's OOM killer never
//! acts in the cgroup. And a node held to half a core by a CFS quota with three CPU-bound jobs:
//! it reads its CPU against 0.5 core, sees the cgroup throttled, and sheds lowest priority first,
//! each reason naming "the cgroup's 0.5 cores"; the per-second job's start delay is printed.
//!
//! It needs root and a writable memory hierarchy (cgroup v1's `memory` mount, or cgroup v2
//! with the memory controller). Where it cannot make one it fails when `CI` is set, and
//! elsewhere says it did not run.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::Value as Json;

use crate::pressure::*;
use crate::support::api;

const MIB: u64 = 1 << 20;

/// A memory cgroup made for one test, removed when dropped.
struct MemCgroup {
    dir: PathBuf,
    v2: bool,
}

impl MemCgroup {
    /// A new cgroup limited to `limit` bytes, in the v1 memory hierarchy or the v2 one.
    fn create(limit: u64) -> Result<MemCgroup, String> {
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| e.to_string())?;
        let mount_of = |want: &dyn Fn(&str, &str) -> bool| {
            mounts.lines().find_map(|l| {
                let f: Vec<&str> = l.split(' ').collect();
                let dash = f.iter().position(|x| *x == "-")?;
                let (fs, opts) = (*f.get(dash + 1)?, *f.get(dash + 3)?);
                want(fs, opts).then(|| PathBuf::from(f[4]))
            })
        };
        let name = format!("jobvisor-test-{}", std::process::id());
        if let Some(root) =
            mount_of(&|fs, opts| fs == "cgroup" && opts.split(',').any(|o| o == "memory"))
        {
            let dir = root.join(name);
            std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            let cg = MemCgroup { dir, v2: false };
            cg.write("memory.limit_in_bytes", &limit.to_string())?;
            return Ok(cg);
        }
        let root = mount_of(&|fs, _| fs == "cgroup2").ok_or("no cgroup mount")?;
        let controllers =
            std::fs::read_to_string(root.join("cgroup.controllers")).unwrap_or_default();
        if !controllers.split_whitespace().any(|c| c == "memory") {
            return Err(format!("{}: no memory controller", root.display()));
        }
        let _ = std::fs::write(root.join("cgroup.subtree_control"), "+memory");
        let dir = root.join(name);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let cg = MemCgroup { dir, v2: true };
        cg.write("memory.max", &limit.to_string())?;
        cg.write("memory.swap.max", "0").ok();
        Ok(cg)
    }

    fn write(&self, file: &str, value: &str) -> Result<(), String> {
        std::fs::write(self.dir.join(file), value)
            .map_err(|e| format!("{}: {e}", self.dir.join(file).display()))
    }

    fn read(&self, file: &str) -> String {
        std::fs::read_to_string(self.dir.join(file)).unwrap_or_default()
    }

    fn procs(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    /// How many times the OOM killer acted in the cgroup.
    fn oom_kills(&self) -> u64 {
        let file = if self.v2 {
            "memory.events"
        } else {
            "memory.oom_control"
        };
        self.read(file)
            .lines()
            .find_map(|l| l.strip_prefix("oom_kill ")?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no oom_kill count in {}", self.dir.join(file).display()))
    }

    /// The cgroup's peak usage, where the kernel keeps one.
    fn peak(&self) -> Option<u64> {
        let file = if self.v2 {
            "memory.peak"
        } else {
            "memory.max_usage_in_bytes"
        };
        self.read(file).trim().parse().ok()
    }
}

impl Drop for MemCgroup {
    fn drop(&mut self) {
        // A cgroup goes once its processes have: the node's jobs end with it.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("could not remove {}", self.dir.display());
    }
}

/// The cgroup, or `None` (said) where this machine cannot make one; with `CI` set, a failure.
fn memory_cgroup(limit: u64) -> Option<MemCgroup> {
    match MemCgroup::create(limit) {
        Ok(cg) => Some(cg),
        Err(why) => {
            let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false");
            assert!(
                !ci,
                "CI: cannot create a memory cgroup ({why}); this test needs root and a writable memory hierarchy"
            );
            println!("NOT RUN: cannot create a memory cgroup here ({why})");
            None
        }
    }
}

/// Six command jobs that each hold 90 MB for 3 s, again and again, priorities 60 to 10; each
/// declaring `limit` of memory when given.
fn catalog(limit: Option<&str>) -> String {
    let limits = limit
        .map(|l| format!(", limits = {{ memory = \"{l}\" }}"))
        .unwrap_or_default();
    let mut out = String::from("[processor.main]\ninstances = 6\nmax_instances = 6\n");
    for p in [60, 50, 40, 30, 20, 10] {
        out.push_str(&format!(
            r#"
[job.m{p}]
type = "command"
processor = "main"
priority = {p}
run_always = true
run_delay = 200
timeout = 60000
payload = {{ argv = ["/usr/bin/python3", "-c", "import time; b = b'x' * (90 << 20); time.sleep(3)"]{limits} }}
"#
        ));
    }
    out
}

#[test]
fn in_a_400_mib_memory_cgroup_the_node_reads_its_budget_there_and_no_oom_kill_happens() {
    six_jobs_in_400_mib("cgroup_memory", None, 60);
}

/// Issue 31, point 3: jobs that declare 100 MiB each are activated only while that fits above
/// the strained threshold; the next waits, the decision log says why, naming the cgroup.
#[test]
fn in_a_400_mib_memory_cgroup_jobs_declaring_their_memory_wait_until_it_fits() {
    six_jobs_in_400_mib("cgroup_memory_declared", Some("100MiB"), 60);
}

fn six_jobs_in_400_mib(title: &'static str, limit: Option<&str>, secs: u64) {
    let _one = one_at_a_time();
    let Some(cg) = memory_cgroup(400 * MIB) else {
        return;
    };
    let mut t = Tuned::prepare(title, &catalog(limit), &[]);
    *t.ws.node_cgroups.borrow_mut() = vec![cg.procs()];
    let started = now_ms();
    t.start(&[]);
    // A minute: each job allocates and frees its 90 MB every 3 s, twenty rounds of the load
    // the OOM killer acted on; the activation order is checked as it goes.
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut most_active = 0;
    while Instant::now() < deadline {
        let active: Vec<i64> = t
            .states()
            .iter()
            .filter(|(_, s)| s == "active")
            .filter_map(|(j, _)| j.strip_prefix('m')?.parse().ok())
            .collect();
        most_active = most_active.max(active.len());
        std::thread::sleep(Duration::from_millis(500));
    }
    let oom_kills = cg.oom_kills();
    let node = t.node.as_ref().unwrap();
    let token = node.token.clone().expect("a first start prints a token");
    let status = api(&node.api, Some(&token), "GET", "/api/v1/node", None).json();
    let metrics = api(&node.api, Some(&token), "GET", "/metrics", None).body;
    let stats = t.ws.ok(&["stats", "--all-nodes"]);
    let rows = t.decisions();
    t.stop();
    let log = t.print_log(title);

    assert_eq!(
        oom_kills, 0,
        "the OOM killer acted in the node's cgroup:\n{log}"
    );
    let budget = &status["budget"];
    assert_eq!(budget["memory_source"], "cgroup", "{status}");
    assert_eq!(budget["memory_bytes"], 400 * MIB, "{status}");
    assert!(
        metrics.contains(&format!(
            "jobvisor_budget_memory_bytes{{source=\"cgroup\"}} {}",
            400 * MIB
        )),
        "{metrics}"
    );
    assert!(
        stats.lines().any(|l| l.contains("node.budget_memory")
            && l.contains("cgroup")
            && l.contains("400 MiB")),
        "{stats}"
    );
    // What fits is activated, most important first; the rest waits in standby.
    let activated: Vec<&str> = rows
        .iter()
        .filter(|d| d.action == "activate" && d.cause == "health")
        .map(|d| d.subject.as_str())
        .collect();
    assert!(!activated.is_empty(), "nothing was activated:\n{log}");
    assert_eq!(activated[0], "m60", "{log}");
    assert!(most_active < 6, "all six jobs were active at once:\n{log}");
    assert!(
        !activated.contains(&"m10"),
        "the least important job was activated:\n{log}"
    );
    // The decisions name the cgroup's bound, not the host's memory.
    let named = |d: &Decision| {
        d.reason.contains("the cgroup's 400 MiB")
            || d.evidence.to_string().contains("the cgroup's 400 MiB")
    };
    let naming = rows
        .iter()
        .filter(|d| d.cause == "health" && named(d))
        .count();
    assert!(naming > 0, "no decision names the cgroup's bound:\n{log}");
    assert!(
        !rows.iter().any(|d| d.reason.contains("free of the host's")),
        "a decision names the host's memory:\n{log}"
    );
    let sheds = rows.iter().filter(|d| d.action == "deactivate").count();
    let holds: Vec<&Decision> = rows
        .iter()
        .filter(|d| d.action == "hold" && d.reason.contains("declares"))
        .collect();
    if let Some(l) = limit {
        let l = l.replace("MiB", " MiB");
        assert!(
            holds
                .iter()
                .any(|d| d.reason.contains(&format!("declares {l} of memory"))
                    && d.reason.contains("free of the cgroup's 400 MiB")),
            "no hold for a declared limit naming the cgroup:\n{log}"
        );
        assert!(
            !activated.contains(&"m20"),
            "a job was activated past the declared budget:\n{log}"
        );
    }
    let evidence = rows
        .iter()
        .filter(|d| d.cause == "health")
        .find_map(|d| {
            d.evidence
                .as_array()?
                .iter()
                .find(|e| e["resource"] == "memory")
                .map(Json::to_string)
        })
        .unwrap_or_default();
    figures(
        title,
        &format!(
            "400 MiB cgroup, six 90 MB jobs (declared: {limit:?}) for {:.0} s: {oom_kills} OOM \
             kills; at most {most_active} jobs active at once; activated in order \
             {activated:?}; {sheds} sheds; {} holds for declared memory; {naming} health \
             decisions name the cgroup's bound; peak usage {} MiB; memory evidence {evidence}",
            (now_ms() - started) as f64 / 1000.0,
            holds.len(),
            cg.peak().map_or("?".into(), |p| (p / MIB).to_string()),
        ),
    );
    drop(t);
}

/// CPU cgroups made for one test (the cpu hierarchy, and cpuacct's where it is mounted apart),
/// removed when dropped.
struct CpuCgroup {
    dirs: Vec<PathBuf>,
}

impl CpuCgroup {
    /// New cgroups whose CFS quota is `cores` (v1, or v2's `cpu.max`).
    fn create(cores: f64) -> Result<CpuCgroup, String> {
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| e.to_string())?;
        let name = format!("jobvisor-test-cpu-{}", std::process::id());
        let period = 100_000u64;
        let quota = (cores * period as f64) as u64;
        let mut v1 = Vec::new();
        let mut v2 = None;
        for l in mounts.lines() {
            let f: Vec<&str> = l.split(' ').collect();
            let Some(dash) = f.iter().position(|x| *x == "-") else {
                continue;
            };
            let (fs, opts) = (
                f.get(dash + 1).copied(),
                f.get(dash + 3).copied().unwrap_or(""),
            );
            let opts: Vec<&str> = opts.split(',').collect();
            match fs {
                Some("cgroup") if opts.contains(&"cpu") || opts.contains(&"cpuacct") => {
                    v1.push((PathBuf::from(f[4]), opts.contains(&"cpu")))
                }
                Some("cgroup2") => v2 = Some(PathBuf::from(f[4])),
                _ => {}
            }
        }
        let make = |dir: &PathBuf| {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))
        };
        let write = |file: PathBuf, v: String| {
            std::fs::write(&file, v).map_err(|e| format!("{}: {e}", file.display()))
        };
        if v1.iter().any(|(_, cpu)| *cpu) {
            let mut out = CpuCgroup { dirs: Vec::new() };
            for (root, cpu) in v1 {
                let dir = root.join(&name);
                make(&dir)?;
                out.dirs.push(dir.clone());
                if cpu {
                    write(dir.join("cpu.cfs_period_us"), period.to_string())?;
                    write(dir.join("cpu.cfs_quota_us"), quota.to_string())?;
                }
            }
            return Ok(out);
        }
        let root = v2.ok_or("no cpu cgroup mount")?;
        let controllers =
            std::fs::read_to_string(root.join("cgroup.controllers")).unwrap_or_default();
        if !controllers.split_whitespace().any(|c| c == "cpu") {
            return Err(format!("{}: no cpu controller", root.display()));
        }
        let _ = std::fs::write(root.join("cgroup.subtree_control"), "+cpu");
        let dir = root.join(name);
        make(&dir)?;
        write(dir.join("cpu.max"), format!("{quota} {period}"))?;
        Ok(CpuCgroup { dirs: vec![dir] })
    }

    fn procs(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| d.join("cgroup.procs")).collect()
    }
}

impl Drop for CpuCgroup {
    fn drop(&mut self) {
        for dir in &self.dirs {
            for _ in 0..50 {
                if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// A required per-second job and three CPU-bound command jobs (2 s busy loops, again and
/// again).
fn cpu_catalog() -> String {
    let mut out = String::from(
        r#"[processor.main]
instances = 4
max_instances = 4

[job.tick]
type = "function"
processor = "main"
required = true
priority = 90
cron = "* * * * * *"
payload = { function = "debug.noop" }
"#,
    );
    for p in [30, 20, 10] {
        out.push_str(&format!(
            r#"
[job.c{p}]
type = "command"
processor = "main"
priority = {p}
run_always = true
run_delay = 100
timeout = 60000
payload = {{ argv = ["/usr/bin/python3", "-c", "import time\ne = time.time() + 2\nwhile time.time() < e: pass"] }}
"#
        ));
    }
    out
}

/// Percentile `p` (0–100) of `v`, sorted in place.
fn percentile(v: &mut [i64], p: f64) -> i64 {
    v.sort_unstable();
    v[((v.len() - 1) as f64 * p / 100.0).round() as usize]
}

#[test]
fn held_to_half_a_core_the_node_reads_its_cpu_against_it_sees_throttling_and_sheds_in_order() {
    let _one = one_at_a_time();
    let cg = match CpuCgroup::create(0.5) {
        Ok(cg) => cg,
        Err(why) => {
            let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false");
            assert!(
                !ci,
                "CI: cannot create a cpu cgroup ({why}); this test needs root"
            );
            println!("NOT RUN: cannot create a cpu cgroup here ({why})");
            return;
        }
    };
    let mut t = Tuned::prepare("cgroup_cpu", &cpu_catalog(), &[]);
    *t.ws.node_cgroups.borrow_mut() = cg.procs();
    let started = now_ms();
    t.start(&["c30", "c20", "c10"]);
    t.wait_for(90.0, "the three CPU-bound jobs shed", || {
        let states = t.states();
        ["c30", "c20", "c10"]
            .iter()
            .all(|j| states.iter().any(|(n, s)| n == j && s != "active"))
            .then_some(())
    });
    let all_shed = now_ms();
    // A while without the load, for the per-second job's latency at rest.
    std::thread::sleep(Duration::from_secs(10));
    let node = t.node.as_ref().unwrap();
    let token = node.token.clone().expect("a first start prints a token");
    let status = api(&node.api, Some(&token), "GET", "/api/v1/node", None).json();
    let metrics = api(&node.api, Some(&token), "GET", "/metrics", None).body;
    let runs: Json = serde_json::from_str(
        &t.ws
            .ok(&["runs", "list", "--job", "tick", "--json", "--limit", "1000"]),
    )
    .unwrap();
    let rows = t.decisions();
    let cpu = t.samples("device.cpu_used");
    let throttled = t.samples("device.cpu_throttled");
    t.stop();
    let log = t.print_log("cgroup_cpu");

    let budget = &status["budget"];
    assert_eq!(budget["cpu_source"], "cgroup", "{status}");
    assert_eq!(budget["cpu_cores"], 0.5, "{status}");
    assert!(
        metrics.contains("jobvisor_budget_cpu_cores{source=\"cgroup\"} 0.5"),
        "{metrics}"
    );
    let sheds: Vec<&Decision> = rows.iter().filter(|d| d.action == "deactivate").collect();
    let order: Vec<&str> = sheds.iter().map(|d| d.subject.as_str()).collect();
    assert_eq!(order, ["c10", "c20", "c30"], "{log}");
    for d in &sheds {
        assert!(
            // Use or throttling against the quota: either names the cgroup's cores.
            d.reason.contains("the cgroup's 0.5 cores"),
            "the shed does not name the cgroup's bound: {}",
            d.reason
        );
    }
    // The load read against half a core, and throttling seen.
    let peak_cpu = cpu.iter().map(|(_, v)| *v).fold(0.0, f64::max);
    let peak_throttled = throttled.iter().map(|(_, v)| *v).fold(0.0, f64::max);
    assert!(peak_cpu > 90.0, "cpu never read near the quota: {cpu:?}");
    assert!(
        peak_throttled > 25.0,
        "throttling never seen: {throttled:?}"
    );
    // The first shed within 2 samples of the second reading past the critical threshold.
    let second = cpu
        .iter()
        .filter(|(_, v)| *v > 97.0)
        .nth(1)
        .map(|(at, _)| *at)
        .expect("two critical readings");
    let first_shed = sheds[0].at;
    assert!(
        first_shed - second <= 2 * SAMPLE_MS,
        "first shed {} ms after the second critical reading:\n{log}",
        first_shed - second
    );
    // The per-second job's delay from its slot to its start, under the load and after it.
    let delays = |from: i64, to: i64| -> Vec<i64> {
        runs.as_array()
            .unwrap()
            .iter()
            .filter_map(|r| {
                let slot = at_ms(&serde_json::json!({"at": r["scheduled_for"]}));
                let start = at_ms(&serde_json::json!({"at": r["started_at"].as_str()?}));
                (slot >= from && slot < to).then_some(start - slot)
            })
            .collect()
    };
    let mut under = delays(started, all_shed);
    let mut after = delays(all_shed, now_ms());
    figures(
        "cgroup_cpu",
        &format!(
            "0.5-core quota, three CPU-bound jobs: peak cpu {peak_cpu:.0}% of the cgroup's 0.5 \
             cores, peak throttled {peak_throttled:.0}% of periods; sheds {order:?}, the first \
             {} ms after the second critical reading, all by +{} ms from start; per-second job \
             start delay p99 {} ms under the load ({} runs), {} ms after ({} runs)",
            first_shed - second,
            all_shed - started,
            if under.is_empty() {
                -1
            } else {
                percentile(&mut under, 99.0)
            },
            under.len(),
            if after.is_empty() {
                -1
            } else {
                percentile(&mut after, 99.0)
            },
            after.len(),
        ),
    );
    drop(t);
}
