//! Scenario 1, crashes: `kill -9` at seeded instants during a drain of command runs that append
//! their run id to a file, restarting after each. Nothing is lost, no recorded result changes,
//! every run executes at least once (duplicates bounded by what was in flight at each kill),
//! the catalog passes `integrity_check` after each restart, and a dead process's runs are back
//! in the queue by the time its successor is up (within 1 s).
//!
//! The issue's bound, "duplicates ≤ kills", holds only while a kill finds one run in flight:
//! on 4 instances a kill can leave four executing, and more that finished with their
//! completion not yet committed, each of which runs again. So the bound asserted is the one
//! that is defined: every duplicate is a run some kill left claimed but unrecorded, and there
//! are no more duplicates than such runs; the figures state duplicates against both.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use jobvisor::sim::SimRng;

use crate::support::{Workspace, queue_runs, wait_for};
use crate::{SizePeak, figures, integrity, open, serial, soak, statuses, wal};

const INSTANCES: i64 = 4;

/// A bound's verdict, for the figures.
fn verdict(holds: bool) -> &'static str {
    if holds { "holds" } else { "exceeded" }
}

#[test]
fn kill_9_during_a_drain_loses_no_run_and_records_none_twice() {
    let _one = serial();
    let (runs, kills) = if soak() { (20_000, 100) } else { (5_000, 20) };
    let seed = 0x5eed_0001;
    let ws = Workspace::new();
    let log = ws.path("executed.log");
    let file = ws.write(
        "jobs.conf",
        &format!(
            r#"
[processor.wide]
instances = {INSTANCES}

[job.append]
type = "command"
processor = "wide"
overlap_policy = "allow"
max_overlap = 1000000
max_attempts = 3
payload = {{ argv = ["sh", "-c", "echo $JOBVISOR_RUN_ID >> '{}'"] }}
"#,
            log.display()
        ),
    );
    ws.ok(&["import", &file.display().to_string()]);
    ws.disable_seeded_jobs();
    let db = ws.db();
    queue_runs(&db, "append", runs);
    let peak = SizePeak::start(wal(&db));
    let conn = open(&db);
    let mut rng = SimRng::new(seed);
    // Results recorded before each kill, which must never change: run id -> (token, end).
    let mut recorded: HashMap<i64, (i64, i64)> = HashMap::new();
    let mut recovery_ms = Vec::new();
    let mut integrity_ok = 0;
    let mut done_at_kill = Vec::new();
    // Runs each killed process left running (claimed, result not recorded): the only ones that
    // may execute twice.
    let mut left_by_kills: std::collections::HashSet<i64> = std::collections::HashSet::new();
    let mut left_total = 0;
    // The runs each kill left (the first pass reads the catalog before any node ran).
    let mut left_per_kill: Vec<Vec<i64>> = Vec::new();
    for _ in 0..kills {
        let left: Vec<(i64, i64)> = conn
            .prepare(
                "SELECT run_id, claim_token FROM job_run WHERE status IN ('claimed', 'running')",
            )
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        left_total += left.len();
        if !done_at_kill.is_empty() {
            left_per_kill.push(left.iter().map(|(id, _)| *id).collect());
        }
        left_by_kills.extend(left.iter().map(|(id, _)| *id));
        let t0 = Instant::now();
        let node = ws.start_node("n1");
        recovery_ms.push(t0.elapsed().as_millis() as i64);
        // The runs the killed process left running went back to the queue before the new one
        // claimed anything: none still runs under its old claim token.
        let stuck: i64 = left
            .iter()
            .map(|(id, token)| {
                conn.query_row(
                    "SELECT count(*) FROM job_run WHERE run_id = ?1 AND claim_token = ?2
                     AND status IN ('claimed', 'running')",
                    [id, token],
                    |r| r.get::<_, i64>(0),
                )
                .unwrap()
            })
            .sum();
        assert_eq!(stuck, 0, "runs of the killed process still running");
        std::thread::sleep(Duration::from_millis(rng.range_i64(100, 450) as u64));
        node.crash();
        let check = integrity(&db);
        assert_eq!(check, "ok", "integrity after a kill");
        integrity_ok += 1;
        let succeeded: Vec<(i64, i64, i64)> = conn
            .prepare(
                "SELECT run_id, claim_token, finished_at FROM job_run WHERE status = 'succeeded'",
            )
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        done_at_kill.push(succeeded.len());
        for (id, token, end) in succeeded {
            let kept = recorded.entry(id).or_insert((token, end));
            assert_eq!(*kept, (token, end), "run {id}: a recorded result changed");
        }
    }
    let left: Vec<i64> = conn
        .prepare("SELECT run_id FROM job_run WHERE status IN ('claimed', 'running')")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    left_total += left.len();
    left_per_kill.push(left.clone());
    left_by_kills.extend(left);
    let t0 = Instant::now();
    let node = ws.start_node("n1");
    recovery_ms.push(t0.elapsed().as_millis() as i64);
    wait_for(180.0, "every run to succeed", || {
        (statuses(&db, "append").get("succeeded") == Some(&runs)).then_some(())
    });
    assert_eq!(node.stop(), Some(0));
    let total: i64 = conn
        .query_row("SELECT count(*) FROM job_run", [], |r| r.get(0))
        .unwrap();
    let changed = recorded
        .iter()
        .filter(|(id, kept)| {
            let now: (i64, i64) = conn
                .query_row(
                    "SELECT claim_token, finished_at FROM job_run WHERE run_id = ?1",
                    [**id],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .unwrap();
            now != **kept
        })
        .count();
    let lines = std::fs::read_to_string(&log).unwrap();
    let mut executed: HashMap<i64, i64> = HashMap::new();
    for line in lines.lines() {
        *executed.entry(line.trim().parse().unwrap()).or_default() += 1;
    }
    let executions: i64 = executed.values().sum();
    let twice = executions - executed.len() as i64;
    let unexplained = executed
        .iter()
        .filter(|(id, n)| **n > 1 && !left_by_kills.contains(id))
        .count();
    // Per kill: the runs it left, and how many of them executed again.
    let left_counts: Vec<usize> = left_per_kill.iter().map(Vec::len).collect();
    let again_per_kill: Vec<usize> = left_per_kill
        .iter()
        .map(|ids| ids.iter().filter(|id| executed.get(id) > Some(&1)).count())
        .collect();
    let stale: i64 = conn
        .query_row("SELECT sum(stale_completions) FROM node", [], |r| r.get(0))
        .unwrap();
    recovery_ms.sort();
    let wal_peak = peak.peak_mb();
    drop(peak);
    figures(
        "scenario 1 crashes",
        &[
            format!(
                "seed {seed:#x}, {runs} command runs on {INSTANCES} instances, {kills} kill -9"
            ),
            format!(
                "lost 0 (succeeded {runs} of {runs}; rows {total}), recorded twice {changed} \
                 (results recorded before a kill that changed), stale completions rejected {stale}"
            ),
            format!(
                "executed {executions}: every run at least once ({} distinct), again after a kill \
                 {twice} (each among the {left_total} runs the kills left claimed but unrecorded: \
                 executing, buffered, or finished with the completion not yet committed; \
                 outside them: {unexplained})",
                executed.len(),
            ),
            format!(
                "restart to runs back in the queue (node up): median {} ms, max {} ms",
                recovery_ms[recovery_ms.len() / 2],
                recovery_ms.last().unwrap()
            ),
            format!(
                "integrity_check ok after {integrity_ok} of {kills} kills; WAL peak {wal_peak:.1} MB"
            ),
            format!(
                "duplicates {twice} vs kills {kills} (the issue's bound, duplicates <= kills: {}) \
                 vs runs the kills left claimed but unrecorded {left_total} (the bound asserted: \
                 {}); left at each kill {left_counts:?}, at most {} (up to {INSTANCES} \
                 executing, plus claimed runs waiting and finished runs whose completion was \
                 not yet committed); of them executed again {again_per_kill:?}, at most {} \
                 per kill",
                verdict(twice <= kills as i64),
                verdict(twice <= left_total as i64),
                left_counts.iter().max().unwrap_or(&0),
                again_per_kill.iter().max().unwrap_or(&0),
            ),
            format!("runs done at each kill: {done_at_kill:?}"),
        ],
    );
    assert_eq!(total, runs, "no run added or lost");
    assert_eq!(changed, 0, "no recorded result changed");
    assert_eq!(executed.len() as i64, runs, "every run executed");
    assert_eq!(
        unexplained, 0,
        "a run executed twice that no kill left unrecorded"
    );
    assert!(twice <= left_total as i64, "{twice} duplicates");
    assert!(
        *recovery_ms.last().unwrap() < 1000,
        "a restart took {recovery_ms:?} ms"
    );
    assert!(
        done_at_kill.first() < done_at_kill.last(),
        "the kills came during the drain: {done_at_kill:?}"
    );
}
