//! Scenario 3, a full disk (issue 12, defect 6): the node's folder (catalog, WAL, data folder)
//! on a small tmpfs, filled by another writer while a drain of command runs goes on, and kept
//! full for a while (the filler takes whatever space is freed). The node pauses writes — it
//! claims nothing but maintenance runs — says so once, reports it in its status and `/readyz`
//! and as a decision, and resumes by itself once the filler is removed. Nothing is lost: every
//! run succeeds, each executed exactly once (no node died); the WAL stays bounded; the catalog
//! passes `integrity_check`.

use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::support::{Tmpfs, Workspace, api, queue_runs, wait_for};
use crate::{SizePeak, figures, integrity, serial, size_mb, statuses, wal};

const RUNS: i64 = 2_000;
const TMPFS: &str = "48m";

/// Another process's writes: fills the file system, then keeps taking any space that frees
/// up (the disk stays full) until stopped, when its file is removed.
struct Filler {
    stop: Arc<AtomicBool>,
    written: Arc<AtomicU64>,
    full: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    path: PathBuf,
}

impl Filler {
    fn start(path: PathBuf) -> Filler {
        let (stop, written, full) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let (s, w, f, p) = (stop.clone(), written.clone(), full.clone(), path.clone());
        let thread = std::thread::spawn(move || {
            let mut file = std::fs::File::create(&p).unwrap();
            let chunk = vec![0x5au8; 1 << 20];
            while !s.load(Ordering::Relaxed) {
                // Big writes while they fit, then small ones, so every freed page is taken.
                let mut wrote = false;
                for size in [1 << 20, 64 << 10, 4 << 10] {
                    if file.write_all(&chunk[..size]).is_ok() {
                        w.fetch_add(size as u64, Ordering::Relaxed);
                        wrote = true;
                        break;
                    }
                }
                if !wrote {
                    f.store(true, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        });
        Filler {
            stop,
            written,
            full,
            thread: Some(thread),
            path,
        }
    }

    /// Stops taking space and removes the file.
    fn remove(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
        std::fs::remove_file(&self.path).unwrap();
        self.written.load(Ordering::Relaxed)
    }
}

impl Drop for Filler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

fn free_mb(dir: &Path) -> f64 {
    jobvisor::runtime::health::disk_space(dir)
        .map(|(available, _)| available as f64 / 1e6)
        .unwrap_or(-1.0)
}

/// Lines of the node's log that contain `text`.
fn lines_with(log: &str, text: &str) -> usize {
    log.lines().filter(|l| l.contains(text)).count()
}

#[test]
fn a_full_disk_pauses_claims_says_so_once_and_resumes_when_space_returns() {
    let _one = serial();
    let ws = Workspace::new();
    // Logs and the executions' record on the machine's disk, everything of the node on the
    // tmpfs (held until the end: it unmounts when dropped, after the node stopped).
    let outside = tempfile::tempdir().unwrap();
    ws.log_dir.replace(Some(outside.path().to_path_buf()));
    let tmpfs = Tmpfs::mount(ws.dir.path(), TMPFS);
    let executed_log = outside.path().join("executed.log");
    ws.set_node_env("JOBVISOR__HEALTH__INTERVAL", "500");
    let file = ws.write(
        "jobs.conf",
        &format!(
            r#"
[processor.wide]
instances = 4

[job.append]
type = "command"
processor = "wide"
overlap_policy = "allow"
max_overlap = 1000000
payload = {{ argv = ["sh", "-c", "echo $JOBVISOR_RUN_ID >> '{}'"] }}
"#,
            executed_log.display()
        ),
    );
    ws.ok(&["import", &file.display().to_string()]);
    ws.disable_seeded_jobs();
    let db = ws.db();
    queue_runs(&db, "append", RUNS);
    let peak = SizePeak::start(wal(&db));
    let node = ws.start_node("n1");
    let token = node.token.clone();
    let node_status = || api(&node.api, token.as_deref(), "GET", "/api/v1/node", None).json();
    let ready = || api(&node.api, token.as_deref(), "GET", "/readyz", None);
    let done = || {
        statuses(&db, "append")
            .get("succeeded")
            .copied()
            .unwrap_or(0)
    };
    wait_for(60.0, "a fifth of the drain", || {
        (done() >= RUNS / 5).then_some(())
    });

    // Full: the filler takes the rest of the tmpfs while the drain goes on.
    let free_before = free_mb(ws.dir.path());
    let filled_at = Instant::now();
    let filler = Filler::start(ws.path("filler"));
    wait_for(10.0, "the filler to fill the disk", || {
        filler.full.load(Ordering::Relaxed).then_some(())
    });
    let paused = wait_for(10.0, "the node to report writes paused", || {
        node_status()["writes_paused"].as_str().map(String::from)
    });
    let paused_after = filled_at.elapsed();
    let not_ready = ready();
    let gauge_full = api(&node.api, token.as_deref(), "GET", "/metrics", None)
        .body
        .lines()
        .any(|l| l == "jobvisor_writes_paused 1");
    // Claims stop: after what was claimed before the pause has run, nothing executes.
    std::thread::sleep(Duration::from_millis(1500));
    let count = || {
        std::fs::read_to_string(&executed_log)
            .unwrap_or_default()
            .lines()
            .count()
    };
    let settled = count();
    std::thread::sleep(Duration::from_secs(3));
    let executed_while_full = count() - settled;
    let done_while_full = done();

    // Space returns: the filler stops and its file goes.
    let freed_at = Instant::now();
    let filler_mb = filler.remove() as f64 / 1e6;
    wait_for(15.0, "the node to resume", || {
        node_status()["writes_paused"].is_null().then_some(())
    });
    let resumed_after = freed_at.elapsed();
    let ready_again = ready();
    wait_for(120.0, "every run to succeed", || {
        (done() == RUNS).then_some(())
    });
    let drained_after = freed_at.elapsed();
    assert_eq!(node.stop(), Some(0));
    let wal_peak = peak.peak_mb();
    drop(peak);
    let wal_after = size_mb(&wal(&db));

    let log = std::fs::read_to_string(ws.log_path("n1")).unwrap();
    let said_full = lines_with(&log, "disk is full");
    let said_paused = lines_with(&log, "action=\"pause_writes\"");
    let said_resumed = lines_with(&log, "action=\"resume_writes\"");
    let errors = lines_with(&log, " ERROR ");
    let decisions: Vec<serde_json::Value> =
        serde_json::from_str(&ws.ok(&["decisions", "--all-nodes", "--json", "--limit", "1000"]))
            .unwrap();
    let rows = |action: &str| -> Vec<String> {
        decisions
            .iter()
            .filter(|d| d["action"] == action)
            .map(|d| d["reason"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    let (pause_rows, resume_rows) = (rows("pause_writes"), rows("resume_writes"));
    let mut executed: HashMap<i64, i64> = HashMap::new();
    for line in std::fs::read_to_string(&executed_log).unwrap().lines() {
        *executed.entry(line.trim().parse().unwrap()).or_default() += 1;
    }
    let twice = executed.values().filter(|n| **n > 1).count();
    let check = integrity(&db);
    let succeeded = done();
    drop(tmpfs);
    figures(
        "scenario 3 disk full",
        &[
            format!(
                "{RUNS} command runs on 4 instances, node folder on a {TMPFS} tmpfs ({free_before:.1} MB \
                 free when filled; the filler took {filler_mb:.1} MB), health sampled every 500 ms"
            ),
            format!(
                "writes paused {:.2} s after the filler started; while full: {executed_while_full} \
                 executions in 3 s, {done_while_full} of {RUNS} runs recorded; resumed {:.2} s after \
                 the filler was removed; the rest drained {:.1} s after",
                paused_after.as_secs_f64(),
                resumed_after.as_secs_f64(),
                drained_after.as_secs_f64()
            ),
            format!(
                "lost {} (succeeded {succeeded} of {RUNS}), executed {} distinct, twice {twice}; \
                 integrity {check}",
                RUNS - succeeded,
                executed.len()
            ),
            format!(
                "said: 'disk is full' {said_full} line(s), pause {said_paused}, resume {said_resumed}, \
                 ERROR lines {errors}; decision rows: pause_writes {}, resume_writes {}",
                pause_rows.len(),
                resume_rows.len()
            ),
            format!("status while full: {paused}"),
            format!(
                "/readyz while full {} and after {}, /metrics jobvisor_writes_paused 1 while \
                 full: {gauge_full}; WAL peak {wal_peak:.1} MB, after exit {wal_after:.1} MB",
                not_ready.status, ready_again.status
            ),
        ],
    );
    assert_eq!(succeeded, RUNS, "every run succeeded");
    assert_eq!(executed.len() as i64, RUNS, "every run executed");
    assert_eq!(twice, 0, "no run executed twice");
    assert_eq!(check, "ok");
    assert_eq!(
        executed_while_full, 0,
        "claims stopped while the disk was full"
    );
    assert!(paused.contains("disk is full"), "{paused}");
    assert_eq!(not_ready.status, 503, "{}", not_ready.body);
    assert!(
        gauge_full,
        "/metrics says jobvisor_writes_paused 1 while full"
    );
    assert_eq!(ready_again.status, 200, "{}", ready_again.body);
    assert_eq!(said_full, 1, "the full disk is said once:\n{log}");
    assert_eq!((said_paused, said_resumed), (1, 1), "{log}");
    assert_eq!(errors, 0, "no ERROR line:\n{log}");
    assert_eq!(
        (pause_rows.len(), resume_rows.len()),
        (1, 1),
        "{decisions:?}"
    );
    assert!(
        pause_rows[0].starts_with("the disk is full"),
        "{pause_rows:?}"
    );
    assert!(
        wal_peak < 20.0,
        "the WAL stays near its 16 MiB bound: {wal_peak} MB"
    );
}
