//! Helpers of the real-pressure tests: one test at a time, a tuned node whose jobs start
//! active without spending their flap budget, the node's own samples and decisions read back
//! from its catalog, a wait for the shared machine to be quiet, stress-ng loads that end with
//! their guard, and the decision log printed and kept for the record.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::Value as Json;

use crate::support::{Node, Tmpfs, Workspace, wait_for};

/// Health sample interval of every test here, ms.
pub const SAMPLE_MS: i64 = 1000;
/// The policy's cooldown in these tests, ms.
pub const COOLDOWN_MS: i64 = 5000;

/// How long a test waits for the shared machine to be quiet before it applies its load, s.
/// Other builds saturate this 2-core machine for minutes at a time; a CPU load can only be
/// told from theirs once they pause, and the time waited is printed. On a machine busy for
/// longer the test fails saying so.
pub const QUIET_WITHIN_S: f64 = 300.0;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Serializes the tests of this binary: two loads at once would measure each other.
pub fn one_at_a_time() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// Fails loudly when stress-ng is missing (`.ci/test` installs it).
pub fn require_stress_ng() {
    assert!(
        Command::new("stress-ng")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success()),
        "stress-ng is not installed (`.ci/test` installs it: apt-get install stress-ng)"
    );
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// A node under test: its workspace, the running process and its name.
pub struct Tuned {
    /// The tmpfs the workspace is on, if any: held for its `Drop`, which unmounts it before
    /// the workspace's folder is removed (fields drop in order).
    _tmpfs: Option<Tmpfs>,
    pub ws: Workspace,
    pub node: Option<Node>,
    pub name: &'static str,
    /// The jobs that start active and may be shed, most important first.
    pub sheddable: Vec<String>,
}

impl Tuned {
    /// A workspace with `catalog` imported and the seeded jobs disabled, the tests' pacing
    /// (1 s samples, 1 s steps, 5 s cooldown) and `env` on top. Call [`Tuned::start`] next.
    pub fn prepare(name: &'static str, catalog: &str, env: &[(&str, &str)]) -> Self {
        Self::prepare_in(Workspace::new(), None, name, catalog, env)
    }

    /// Like [`Tuned::prepare`], with the whole workspace (catalog, data folder, objects) on
    /// a tmpfs of `size`.
    pub fn prepare_on_tmpfs(
        size: &str,
        name: &'static str,
        catalog: impl FnOnce(&Path) -> String,
        env: &[(&str, &str)],
    ) -> Self {
        let ws = Workspace::new();
        let tmpfs = Tmpfs::mount(ws.dir.path(), size);
        let catalog = catalog(ws.dir.path());
        Self::prepare_in(ws, Some(tmpfs), name, &catalog, env)
    }

    fn prepare_in(
        ws: Workspace,
        tmpfs: Option<Tmpfs>,
        name: &'static str,
        catalog: &str,
        env: &[(&str, &str)],
    ) -> Self {
        ws.set_node_env("JOBVISOR__POLICY__PRIORITY_FLOOR", "100");
        ws.set_node_env("JOBVISOR__HEALTH__INTERVAL", &SAMPLE_MS.to_string());
        ws.set_node_env("JOBVISOR__POLICY__STEP_INTERVAL", "1000");
        ws.set_node_env("JOBVISOR__POLICY__COOLDOWN", &COOLDOWN_MS.to_string());
        for (k, v) in env {
            ws.set_node_env(k, v);
        }
        let file = ws.write("jobs.conf", catalog);
        ws.ok(&["import", &file.display().to_string()]);
        ws.disable_seeded_jobs();
        Tuned {
            _tmpfs: tmpfs,
            ws,
            node: None,
            name,
            sheddable: Vec::new(),
        }
    }

    /// Starts the node with `sheddable` active from the start and free to be shed: they are
    /// pinned active before the start (the start-up minimum activates them, which is no
    /// health toggle) and unpinned once the node runs, so no flap budget is spent on a
    /// ramp-up.
    pub fn start(&mut self, sheddable: &[&str]) {
        for job in sheddable {
            self.ws
                .ok(&["jobs", "pin", job, "active", "--node", self.name]);
        }
        self.node = Some(self.ws.start_node(self.name));
        wait_for(20.0, "the node's first samples", || {
            (self.samples("device.cpu_used").len() >= 2).then_some(())
        });
        for job in sheddable {
            self.ws
                .ok(&["jobs", "pin", job, "none", "--node", self.name]);
        }
        self.sheddable = sheddable.iter().map(|s| s.to_string()).collect();
    }

    /// Stops the node (SIGTERM) and checks it exits 0.
    pub fn stop(&mut self) {
        if let Some(node) = self.node.take() {
            assert_eq!(node.stop(), Some(0), "the node did not exit cleanly");
        }
    }

    fn read(&self) -> rusqlite::Connection {
        let conn = rusqlite::Connection::open_with_flags(
            self.ws.db(),
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
        )
        .unwrap();
        conn.busy_timeout(Duration::from_secs(5)).unwrap();
        conn
    }

    /// The node's recorded values of `stat_type` (device stats: no subject), oldest first.
    pub fn samples(&self, stat_type: &str) -> Vec<(i64, f64)> {
        let conn = self.read();
        let mut stmt = conn
            .prepare(
                "SELECT s.sampled_at, s.value FROM stat s JOIN stat_type t USING (stat_type_id)
                 WHERE t.stat_type = ?1 AND s.subject IS NULL ORDER BY s.sampled_at",
            )
            .unwrap();
        stmt.query_map([stat_type], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }

    /// Stat rows recorded with `sampled_at` in `[from, to)`.
    pub fn stat_rows_between(&self, from: i64, to: i64) -> i64 {
        self.read()
            .query_row(
                "SELECT count(*) FROM stat WHERE sampled_at >= ?1 AND sampled_at < ?2",
                [from, to],
                |r| r.get(0),
            )
            .unwrap()
    }

    /// Run rows of `job` created strictly between `from` and `to` (epoch ms).
    pub fn runs_created_between(&self, job: &str, from: i64, to: i64) -> i64 {
        self.read()
            .query_row(
                "SELECT count(*) FROM job_run r JOIN job j USING (job_id)
                 WHERE j.job_name = ?1 AND r.created_at > ?2 AND r.created_at < ?3",
                rusqlite::params![job, from, to],
                |r| r.get(0),
            )
            .unwrap()
    }

    /// Each job's activation state on this node.
    pub fn states(&self) -> Vec<(String, String)> {
        let conn = self.read();
        let mut stmt = conn
            .prepare(
                "SELECT j.job_name, a.state FROM job_activation a JOIN job j USING (job_id)
                 JOIN node n USING (node_id) WHERE n.node_name = ?1 ORDER BY j.job_name",
            )
            .unwrap();
        stmt.query_map([self.name], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }

    /// The job's activation as `jobvisor jobs list` shows it to an operator for this node.
    pub fn listed(&self, job: &str) -> String {
        let out = self.ws.ok(&["jobs", "list", "--json", "--node", self.name]);
        let jobs: Json = serde_json::from_str(&out).unwrap();
        jobs.as_array()
            .unwrap()
            .iter()
            .find(|j| j["name"] == job)
            .and_then(|j| j["activation"]["state"].as_str())
            .unwrap_or_default()
            .to_string()
    }

    pub fn state_of(&self, job: &str) -> String {
        self.states()
            .into_iter()
            .find(|(j, _)| j == job)
            .map(|(_, s)| s)
            .unwrap_or_default()
    }

    /// Every decision of this node, oldest first.
    pub fn decisions(&self) -> Vec<Decision> {
        let out = self
            .ws
            .ok(&["decisions", "--all-nodes", "--json", "--limit", "10000"]);
        let mut rows: Vec<Decision> = serde_json::from_str::<Json>(&out)
            .unwrap()
            .as_array()
            .unwrap()
            .iter()
            .map(|d| Decision {
                at: at_ms(d),
                action: d["action"].as_str().unwrap().to_string(),
                subject: d["subject"].as_str().unwrap_or("-").to_string(),
                cause: d["cause"].as_str().unwrap_or("").to_string(),
                reason: d["reason"].as_str().unwrap().to_string(),
                evidence: d["evidence"].clone(),
            })
            .collect();
        rows.reverse();
        rows
    }

    /// Waits until the node's last `n` samples all pass `quiet`, every sheddable job is
    /// active, and no job was switched by health within the last `settle_ms` (the flap
    /// budget's window: a job the shared machine's own load made the policy switch twice
    /// would be held, not shed, by the test's load). Other builds run on this machine: it must
    /// be calm before a load is applied, or the load's effect could not be told from theirs.
    /// Fails with a clear message after `secs`.
    pub fn wait_until_quiet(
        &self,
        stat: &str,
        n: usize,
        settle_ms: i64,
        secs: f64,
        quiet: impl Fn(f64) -> bool,
    ) {
        let started = Instant::now();
        let what = format!(
            "{n} quiet samples of {stat}, every job active and none switched for {settle_ms} ms \
             (the machine stayed busy)"
        );
        let deadline = started + std::time::Duration::from_secs_f64(secs);
        let check = || {
            let s = self.samples(stat);
            let calm = s.len() >= n && s[s.len() - n..].iter().all(|(_, v)| quiet(*v));
            let states = self.states();
            let all_active = self
                .sheddable
                .iter()
                .all(|j| states.iter().any(|(n, st)| n == j && st == "active"));
            calm && all_active
                && self.decisions().iter().all(|d| {
                    d.cause != "health"
                        || !(d.action == "activate" || d.action == "deactivate")
                        || d.at < now_ms() - settle_ms
                })
        };
        while !check() {
            if Instant::now() > deadline {
                self.print_log("failure");
                panic!("timed out after {secs} s waiting for {what}");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let waited = started.elapsed().as_secs_f64();
        if waited > 2.0 {
            println!("(waited {waited:.1} s for the machine to be quiet)");
        }
    }

    /// Waits up to `secs` for `f` to give a value; on a timeout prints the decision log (what
    /// the node decided instead) and fails naming `what`.
    pub fn wait_for<T>(&self, secs: f64, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + Duration::from_secs_f64(secs);
        loop {
            if let Some(v) = f() {
                return v;
            }
            if Instant::now() > deadline {
                self.print_log("failure");
                panic!("timed out after {secs} s waiting for {what}");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Prints the decision log as `jobvisor decisions` shows it, and keeps a copy under
    /// `target/tmp/self_tuning/` (the closing notes quote these logs).
    pub fn print_log(&self, title: &str) -> String {
        let table = self
            .ws
            .ok(&["decisions", "--all-nodes", "--limit", "10000"]);
        let text = format!("== decision log: {title} (newest first)\n{table}");
        println!("{text}");
        std::fs::write(record_dir().join(format!("{title}.txt")), &text).unwrap();
        text
    }
}

/// Where the tests keep their decision logs and figures: `target/tmp/self_tuning/`, which
/// `.ci/test` clears before the suite and prints after it.
fn record_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("self_tuning");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Prints a test's figures line (`figures (disk): …`) and keeps it beside its decision log,
/// as `target/tmp/self_tuning/<title>.figures.txt`: libtest hides a passing test's output, so
/// without the file a CI run's figures would never be read.
pub fn figures(title: &str, line: &str) {
    println!("{line}");
    std::fs::write(
        record_dir().join(format!("{title}.figures.txt")),
        format!("{line}\n"),
    )
    .unwrap();
}

impl Drop for Tuned {
    fn drop(&mut self) {
        if let Some(node) = self.node.take() {
            node.crash();
        }
    }
}

/// A decision's time (RFC 3339 in JSON) in epoch ms.
pub fn at_ms(d: &Json) -> i64 {
    d["at"]
        .as_str()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.timestamp_millis())
        .unwrap_or_else(|| panic!("a decision without a time: {d}"))
}

/// One logged decision.
#[derive(Debug, Clone)]
pub struct Decision {
    pub at: i64,
    pub action: String,
    pub subject: String,
    pub cause: String,
    pub reason: String,
    pub evidence: Json,
}

/// The first `action` decision about `subject` at or after `from`.
pub fn first<'a>(
    rows: &'a [Decision],
    action: &str,
    subject: &str,
    from: i64,
) -> Option<&'a Decision> {
    rows.iter()
        .find(|d| d.action == action && d.subject == subject && d.at >= from)
}

/// A stress-ng load; stopped (SIGINT to its own process, which stops its workers) when
/// dropped, and bounded by its `--timeout` in any case.
pub struct Stress {
    child: Option<Child>,
}

impl Stress {
    pub fn start(args: &[&str]) -> Stress {
        let child = Command::new("stress-ng")
            .args(args)
            .arg("--quiet")
            .spawn()
            .expect("stress-ng starts");
        Stress { child: Some(child) }
    }

    /// Waits for the load's own `--timeout`.
    pub fn wait(mut self) {
        if let Some(mut c) = self.child.take() {
            c.wait().unwrap();
        }
    }
}

impl Drop for Stress {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: signalling the child we started, by its id.
            unsafe {
                libc::kill(c.id() as i32, libc::SIGINT);
            }
            let _ = c.wait();
        }
    }
}

/// The times of the samples from `from` on at which `stat` had read ok (`ok`) for `n` samples
/// in a row: the earliest moment the policy could see health again.
pub fn back_to_ok(
    samples: &[(i64, f64)],
    from: i64,
    n: usize,
    ok: impl Fn(f64) -> bool,
) -> Option<i64> {
    let after: Vec<&(i64, f64)> = samples.iter().filter(|(t, _)| *t >= from).collect();
    let mut run = 0;
    for (t, v) in after {
        run = if ok(*v) { run + 1 } else { 0 };
        if run >= n {
            return Some(*t);
        }
    }
    None
}
