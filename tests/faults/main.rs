//! The fault suite (issue 12), one module per scenario: real `jobvisor run` processes put
//! through crashes (1, `crash`), a poison job (2, `poison`), a full disk (3, `disk`), clock
//! jumps (4, `clock`), corrupt or foreign files — refused by every command, and a catalog
//! damaged under a running node (5, `files`) —, a stopped process whose name is taken
//! (6, `fence`), proptest targets for the parsers (7, `fuzz`, with its corpus in `corpus/`),
//! kills during an inbox's stream of files (8, `inbox`), and three nodes on one SQLite file — a
//! drain, a node killed, a node stopped past its lease, a per-second job, work sharing (9,
//! `fleet`), and the same on PostgreSQL — with a server restart mid-drain, a node's
//! housekeeping and workflows across the nodes there (10, `fleet_pg`: a database of each
//! test's own on the server `.ci/test` starts), and a node stopped past its runs' timeouts (11,
//! `stopped`). A binary of its own, and its scenarios one at a time (`serial`), so that no
//! other test's load changes their timing.
//!
//! Each scenario prints its figures (runs, kills, lost, recorded twice, executed twice, recovery
//! times, WAL peak, sha256 checks, …) to stderr and to `target/tmp/faults/<scenario>.txt`;
//! `.ci/test` prints those files at the end. `JOBVISOR_SOAK=1` runs the long variants.

#[path = "../it/support.rs"]
mod support;

mod clock;
mod crash;
mod disk;
mod fence;
mod files;
mod fleet;
mod fleet_pg;
mod fuzz;
mod inbox;
mod poison;
mod stopped;

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// One scenario at a time (libtest runs tests on several threads).
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Whether the long variants run (`JOBVISOR_SOAK=1`).
pub fn soak() -> bool {
    std::env::var("JOBVISOR_SOAK").is_ok_and(|v| v == "1")
}

/// Prints a scenario's figures and keeps them in `target/tmp/faults/<scenario>.txt`.
pub fn figures(scenario: &str, lines: &[String]) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("faults");
    std::fs::create_dir_all(&dir).unwrap();
    let text: String = lines.iter().map(|l| format!("{scenario}: {l}\n")).collect();
    eprint!("{text}");
    std::fs::write(dir.join(format!("{scenario}.txt")), text).unwrap();
}

/// `PRAGMA integrity_check` of the catalog at `db`, read by a connection of its own.
pub fn integrity(db: &Path) -> String {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.busy_timeout(Duration::from_secs(10)).unwrap();
    let rows: Vec<String> = conn
        .prepare("PRAGMA integrity_check")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    rows.join("; ")
}

/// A read connection to the catalog at `db` that waits for locks.
pub fn open(db: &Path) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.busy_timeout(Duration::from_secs(10)).unwrap();
    conn
}

/// Counts of the runs of `job` by status.
pub fn statuses(db: &Path, job: &str) -> std::collections::BTreeMap<String, i64> {
    open(db)
        .prepare(
            "SELECT r.status, count(*) FROM job_run r JOIN job j USING (job_id)
             WHERE j.job_name = ?1 GROUP BY r.status",
        )
        .unwrap()
        .query_map([job], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// Samples the size of a file every 10 ms until dropped; `peak()` is the largest seen.
pub struct SizePeak {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    peak: std::sync::Arc<std::sync::atomic::AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SizePeak {
    /// Starts sampling `path`.
    pub fn start(path: PathBuf) -> Self {
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let peak = std::sync::Arc::new(AtomicU64::new(0));
        let (s, p) = (stop.clone(), peak.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let size = std::fs::metadata(&path).map_or(0, |m| m.len());
                p.fetch_max(size, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        Self {
            stop,
            peak,
            thread: Some(thread),
        }
    }

    /// The largest size seen so far, MB.
    pub fn peak_mb(&self) -> f64 {
        self.peak.load(std::sync::atomic::Ordering::Relaxed) as f64 / 1e6
    }
}

impl Drop for SizePeak {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The size of a file, MB (0 when it does not exist).
pub fn size_mb(path: &Path) -> f64 {
    std::fs::metadata(path).map_or(0.0, |m| m.len() as f64 / 1e6)
}

/// The catalog's WAL beside `db`.
pub fn wal(db: &Path) -> PathBuf {
    PathBuf::from(format!("{}-wal", db.display()))
}

/// Checks that each whole second in `[from, to)` of a per-second job active on three nodes for
/// `secs` seconds fired once and succeeded; `rows` are its runs (slot, status, node name).
/// Prints the figures as `scenario`.
pub fn slots_fired_once(
    scenario: &str,
    secs: u64,
    from: i64,
    to: i64,
    rows: &[(i64, String, Option<String>)],
) {
    use std::collections::BTreeMap;
    let expected: Vec<i64> = (from..to).step_by(1000).collect();
    let mut fired: BTreeMap<i64, usize> = BTreeMap::new();
    for (slot, _, _) in rows {
        *fired.entry(*slot).or_default() += 1;
    }
    let missing: Vec<i64> = expected
        .iter()
        .filter(|s| !fired.contains_key(s))
        .copied()
        .collect();
    let twice: Vec<i64> = fired
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(s, _)| *s)
        .collect();
    let not_run: Vec<&(i64, String, Option<String>)> =
        rows.iter().filter(|(_, s, _)| s != "succeeded").collect();
    let mut by_node: BTreeMap<String, usize> = BTreeMap::new();
    for (_, _, node) in rows {
        *by_node
            .entry(node.clone().unwrap_or_else(|| "-".into()))
            .or_default() += 1;
    }
    figures(
        scenario,
        &[
            format!(
                "a per-second cron job active on 3 nodes for {secs} s: {} slots checked, fired \
                 {} (missing {}, twice {}, not succeeded {})",
                expected.len(),
                fired.len(),
                missing.len(),
                twice.len(),
                not_run.len()
            ),
            format!("runs by the node that executed them: {by_node:?}"),
        ],
    );
    assert!(expected.len() as u64 >= secs - 2);
    assert!(missing.is_empty(), "slots never fired: {missing:?}");
    assert!(twice.is_empty(), "slots fired twice: {twice:?}");
    assert!(not_run.is_empty(), "slots skipped or failed: {not_run:?}");
}
