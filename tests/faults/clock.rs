//! Scenario 4, clock jumps (issue 12): a real node whose wall clock libfaketime moves —
//! `LD_PRELOAD` of `libfaketimeMT.so.1` with `FAKETIME_TIMESTAMP_FILE` (re-read on every call,
//! `FAKETIME_NO_CACHE=1`) and the monotonic clock left alone (`FAKETIME_DONT_FAKE_MONOTONIC=1`).
//! Rust's `SystemTime::now` calls glibc's `clock_gettime(CLOCK_REALTIME)` through the PLT, which
//! the preloaded library intercepts (its vDSO fast path is glibc's own business, behind that
//! symbol), so the node's wall clock follows the file while `Instant` (tokio's timers) does not.
//!
//! The clock steps +1 h, then back 1 h, then the node stops and starts 3 h after its latest
//! slot. Misfire policies hold (`once` fires one catch-up for the slots a jump passed over,
//! `skip` none), no slot key is recorded twice, an interval job (`run_always`) keeps its period
//! in real time across every step, and a per-second calendar job resumes at once after the step
//! back.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::support::{Node, Workspace};
use crate::{figures, open, serial};

/// Where Debian's `libfaketime` puts the library (`.ci/test` installs `faketime`).
fn libfaketime() -> PathBuf {
    let found = std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("faketime/libfaketimeMT.so.1"))
        .chain([PathBuf::from("/usr/lib/faketime/libfaketimeMT.so.1")])
        .find(|p| p.exists());
    found.expect("libfaketime is not installed (`.ci/test` installs it: apt-get install faketime)")
}

/// Real time now, epoch ms.
fn real_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// The fake clock's offset, written where libfaketime reads it on every call.
struct FakeClock {
    file: PathBuf,
    offset_ms: i64,
}

impl FakeClock {
    fn new(file: PathBuf) -> Self {
        let clock = FakeClock { file, offset_ms: 0 };
        clock.write();
        clock
    }

    fn write(&self) {
        let text = format!("{:+.3}\n", self.offset_ms as f64 / 1000.0);
        // Written whole and renamed, so the node never reads half a line.
        let tmp = self.file.with_extension("tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &self.file).unwrap();
    }

    /// Sets the offset to about `offset_ms`, adjusted (by less than 10 s) so that the fake
    /// clock then reads 5 s into a 10-second period: the 10-second jobs' latest missed slot is
    /// then 5 s old, past their 2 s misfire window, whatever the instant of the step.
    fn step_to(&mut self, offset_ms: i64) -> i64 {
        let fake = real_ms() + offset_ms;
        self.offset_ms = offset_ms + (5_000 - fake.rem_euclid(10_000));
        self.write();
        self.offset_ms
    }
}

/// Counts a job's runs (not skipped) as they appear, in real time.
struct Watch {
    seen: Vec<(String, i64, Instant)>,
}

impl Watch {
    /// Polls the catalog for `for_ms`, noting the real instant each new run of each job is
    /// first seen.
    fn watch(&mut self, db: &Path, for_ms: u64) {
        let conn = open(db);
        let end = Instant::now() + Duration::from_millis(for_ms);
        while Instant::now() < end {
            let last = self.seen.iter().map(|(_, id, _)| *id).max().unwrap_or(0);
            let rows: Vec<(String, i64)> = conn
                .prepare(
                    "SELECT j.job_name, r.run_id FROM job_run r JOIN job j USING (job_id)
                     WHERE r.run_id > ?1 AND r.status != 'skipped' ORDER BY r.run_id",
                )
                .unwrap()
                .query_map([last], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap()
                .map(Result::unwrap)
                .collect();
            let now = Instant::now();
            self.seen
                .extend(rows.into_iter().map(|(job, id)| (job, id, now)));
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// The longest real time between two runs of `job` first seen within `[from, to]`, and
    /// from `from` to its first run: ms.
    fn longest_gap(&self, job: &str, from: Instant, to: Instant) -> i64 {
        let mut at: Vec<Instant> = self
            .seen
            .iter()
            .filter(|(j, _, t)| j == job && *t >= from && *t <= to)
            .map(|(_, _, t)| *t)
            .collect();
        at.insert(0, from);
        at.windows(2)
            .map(|w| (w[1] - w[0]).as_millis() as i64)
            .max()
            .unwrap_or(i64::MAX)
    }
}

/// Runs of `job` that fired as catch-ups: created well after their slot (a jump or a stop
/// passed over it), in run id order, after run id `after`.
fn catch_ups(db: &Path, job: &str, after: i64) -> i64 {
    open(db)
        .query_row(
            "SELECT count(*) FROM job_run r JOIN job j USING (job_id)
             WHERE j.job_name = ?1 AND r.run_id > ?2 AND r.status != 'skipped'
               AND r.created_at - r.scheduled_for > 2500",
            rusqlite::params![job, after],
            |r| r.get(0),
        )
        .unwrap()
}

/// The reasons of the `skipped` rows of `job` after run id `after`.
fn skipped(db: &Path, job: &str, after: i64) -> Vec<String> {
    open(db)
        .prepare(
            "SELECT r.error FROM job_run r JOIN job j USING (job_id)
             WHERE j.job_name = ?1 AND r.run_id > ?2 AND r.status = 'skipped' ORDER BY r.run_id",
        )
        .unwrap()
        .query_map(rusqlite::params![job, after], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

fn last_run_id(db: &Path) -> i64 {
    open(db)
        .query_row("SELECT coalesce(max(run_id), 0) FROM job_run", [], |r| {
            r.get(0)
        })
        .unwrap()
}

/// Slot rows in all, and slot keys recorded more than once.
fn slot_keys(db: &Path) -> (i64, i64) {
    open(db)
        .query_row(
            "SELECT count(*), count(*) - count(DISTINCT job_id || ':' || scheduled_for)
             FROM job_run WHERE scheduled_for IS NOT NULL",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap()
}

#[test]
fn clock_jumps_keep_misfire_policies_slots_and_periods() {
    let _one = serial();
    let ws = Workspace::new();
    let mut clock = FakeClock::new(ws.path("faketime"));
    ws.set_node_env("LD_PRELOAD", &libfaketime().display().to_string());
    ws.set_node_env("FAKETIME_TIMESTAMP_FILE", &clock.file.display().to_string());
    ws.set_node_env("FAKETIME_NO_CACHE", "1");
    ws.set_node_env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
    let file = ws.write(
        "jobs.conf",
        r#"
[processor.clock]
instances = 4

[job.tick]
type = "function"
processor = "clock"
cron = "* * * * * *"
payload = { function = "debug.noop" }

[job.ten_once]
type = "function"
processor = "clock"
cron = "*/10 * * * * *"
misfire_policy = "once"
misfire_window = 2000
payload = { function = "debug.noop" }

[job.ten_skip]
type = "function"
processor = "clock"
cron = "*/10 * * * * *"
misfire_policy = "skip"
misfire_window = 2000
payload = { function = "debug.noop" }

[job.interval]
type = "function"
processor = "clock"
run_always = true
run_delay = 1000
payload = { function = "debug.noop" }
"#,
    );
    ws.ok(&["import", &file.display().to_string()]);
    ws.disable_seeded_jobs();
    let db = ws.db();
    let mut watch = Watch { seen: Vec::new() };
    const PHASE_MS: u64 = 4_000;

    // The node's wall clock follows the file: it records slots an hour ahead after the step.
    let start = |ws: &Workspace| -> Node { ws.start_node("n1") };
    let node = start(&ws);
    let t0 = Instant::now();
    watch.watch(&db, PHASE_MS);

    // +1 h.
    let before_forward = last_run_id(&db);
    let t1 = Instant::now();
    let forward = clock.step_to(3_600_000);
    watch.watch(&db, PHASE_MS);
    let fake_now: i64 = open(&db)
        .query_row(
            "SELECT max(scheduled_for) FROM job_run WHERE status != 'skipped'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let ahead_s = (fake_now - real_ms()) / 1000;
    let forward_once = catch_ups(&db, "ten_once", before_forward);
    let forward_skip = catch_ups(&db, "ten_skip", before_forward);
    let forward_rows = (
        skipped(&db, "ten_once", before_forward),
        skipped(&db, "ten_skip", before_forward),
    );

    // Back 1 h.
    let t2 = Instant::now();
    let back = clock.step_to(0);
    watch.watch(&db, PHASE_MS);
    let t3 = Instant::now();
    assert_eq!(node.stop(), Some(0));

    // A 3 h stop: the node starts 3 h after its latest slot (the ones it fired an hour ahead).
    let before_stop = last_run_id(&db);
    let stopped = clock.step_to(forward + 3 * 3_600_000);
    let node = start(&ws);
    let t4 = Instant::now();
    watch.watch(&db, PHASE_MS);
    let t5 = Instant::now();
    assert_eq!(node.stop(), Some(0));
    let stop_once = catch_ups(&db, "ten_once", before_stop);
    let stop_skip = catch_ups(&db, "ten_skip", before_stop);
    let stop_rows = (
        skipped(&db, "ten_once", before_stop),
        skipped(&db, "ten_skip", before_stop),
    );
    let (slots, twice) = slot_keys(&db);
    let gap = |job: &str, from: Instant, to: Instant| watch.longest_gap(job, from, to);
    let interval_gaps = [gap("interval", t0, t2), gap("interval", t2, t3)];
    let interval_after_stop = gap("interval", t4, t5);
    let tick_back = gap("tick", t2, t3);
    let tick_forward = gap("tick", t1, t2);
    let ten_back = watch
        .seen
        .iter()
        .filter(|(j, _, t)| j.starts_with("ten_") && *t >= t2 && *t <= t3)
        .count();
    figures(
        "scenario 4 clock jumps",
        &[
            format!(
                "libfaketime {}: steps +{:.0} s, to {:+.0} s (back {:.0} s), node stopped and \
                 started at +{:.0} s (3 h after its latest slot); {} ms per phase; the node wrote \
                 slots {ahead_s} s ahead of real time after the first step",
                libfaketime().display(),
                forward as f64 / 1e3,
                back as f64 / 1e3,
                (forward - back) as f64 / 1e3,
                stopped as f64 / 1e3,
                PHASE_MS
            ),
            format!(
                "catch-ups of the 10-second jobs (misfire window 2 s): +1 h: once {forward_once}, \
                 skip {forward_skip}; after the 3 h stop: once {stop_once}, skip {stop_skip}"
            ),
            format!("skipped rows after +1 h: {forward_rows:?}"),
            format!("skipped rows after the stop: {stop_rows:?}"),
            format!(
                "slot rows {slots}, slot keys recorded twice {twice}; interval job (run_always, \
                 1 s delay) longest real gap: before and at +1 h {} ms, after the step back {} \
                 ms, after the restart {} ms",
                interval_gaps[0], interval_gaps[1], interval_after_stop
            ),
            format!(
                "per-second job longest real gap: after +1 h {tick_forward} ms, after the step \
                 back {tick_back} ms; 10-second jobs' runs in the {PHASE_MS} ms after the step \
                 back: {ten_back}"
            ),
        ],
    );
    assert!(
        ahead_s > 3_500,
        "libfaketime moved the node's clock: {ahead_s} s"
    );
    assert_eq!(
        (forward_once, forward_skip),
        (1, 0),
        "+1 h: once fires one catch-up, skip none"
    );
    assert_eq!(
        (stop_once, stop_skip),
        (1, 0),
        "after the stop: once fires one catch-up, skip none"
    );
    assert!(
        forward_rows
            .0
            .iter()
            .any(|r| r.contains("misfire policy once"))
            && forward_rows
                .1
                .iter()
                .any(|r| r.contains("misfire policy skip")),
        "{forward_rows:?}"
    );
    assert_eq!(twice, 0, "no slot key recorded twice");
    for g in interval_gaps.into_iter().chain([interval_after_stop]) {
        assert!(g <= 2_500, "the interval job kept its 1 s period: {g} ms");
    }
    assert!(
        tick_back <= 2_500 && tick_forward <= 2_500,
        "the per-second job went on across the steps: {tick_forward} ms, {tick_back} ms"
    );
}
