//! A node inside a memory cgroup (issue 31's measurement): six command jobs of 90 MB each in a
//! 400 MiB cgroup, on a host with gigabytes free. The node reads its budget from the cgroup —
//! the status, `/metrics` and `jobvisor stats` say so, and its decisions name "the cgroup's
//! 400 MiB" — activates only what fits, most important first, and the kernel's OOM killer never
//! acts in the cgroup.
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

/// Six command jobs that each hold 90 MB for 3 s, again and again, priorities 60 to 10.
fn catalog() -> String {
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
payload = {{ argv = ["/usr/bin/python3", "-c", "import time; b = b'x' * (90 << 20); time.sleep(3)"] }}
"#
        ));
    }
    out
}

#[test]
fn in_a_400_mib_memory_cgroup_the_node_reads_its_budget_there_and_no_oom_kill_happens() {
    let _one = one_at_a_time();
    let Some(cg) = memory_cgroup(400 * MIB) else {
        return;
    };
    let mut t = Tuned::prepare("cgroup_memory", &catalog(), &[]);
    *t.ws.node_cgroup.borrow_mut() = Some(cg.procs());
    let started = now_ms();
    t.start(&[]);
    // Two minutes, as the issue measured; the activation order is checked as it goes.
    let deadline = Instant::now() + Duration::from_secs(120);
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
    let log = t.print_log("cgroup_memory");

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
        "cgroup_memory",
        &format!(
            "400 MiB cgroup, six 90 MB jobs for {:.0} s: {oom_kills} OOM kills; at most \
             {most_active} jobs active at once; activated in order {activated:?}; {sheds} sheds; \
             {naming} health decisions name the cgroup's bound; peak usage {} MiB; memory \
             evidence {evidence}",
            (now_ms() - started) as f64 / 1000.0,
            cg.peak().map_or("?".into(), |p| (p / MIB).to_string()),
        ),
    );
    drop(t);
}
