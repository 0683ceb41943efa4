//! Scenario 6, a stopped node whose name is taken (issue 12, defect 5): node A is stopped
//! (SIGSTOP) past three heartbeats while it runs command jobs; a second process B with the same
//! name watches A's heartbeat for an interval, sees it not move, takes the name (a new
//! generation) and recovers A's runs. When A continues it starts nothing more: its heartbeat
//! finds the generation moved and it stops. No run is executed by two processes at once.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::support::{Workspace, queue_runs, wait_for};
use crate::{figures, serial, statuses};

/// (run id, node pid, start ns, end ns) of each execution, from the jobs' own log.
fn executions(log: &str) -> Vec<(i64, i64, i128, i128)> {
    let mut open: HashMap<(i64, i64), i128> = HashMap::new();
    let mut out = Vec::new();
    for line in log.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let [what, run, pid, ns] = f[..] else {
            continue;
        };
        let (run, pid, ns): (i64, i64, i128) = (
            run.parse().unwrap(),
            pid.parse().unwrap(),
            ns.parse().unwrap(),
        );
        match what {
            "start" => {
                open.insert((run, pid), ns);
            }
            "end" => {
                let start = open.remove(&(run, pid)).expect("an end after its start");
                out.push((run, pid, start, ns));
            }
            _ => {}
        }
    }
    // A start without an end: still running when its process was killed or the log was read.
    out.extend(
        open.into_iter()
            .map(|((run, pid), s)| (run, pid, s, i128::MAX)),
    );
    out
}

#[test]
fn a_stopped_node_whose_name_is_taken_runs_nothing_beside_the_taker() {
    let _one = serial();
    const RUNS: i64 = 300;
    let ws = Workspace::new();
    let log = ws.path("executions.log");
    let file = ws.write(
        "jobs.conf",
        &format!(
            r#"
[processor.wide]
instances = 4

[job.work]
type = "command"
processor = "wide"
overlap_policy = "allow"
max_overlap = 1000
max_attempts = 3
payload = {{ argv = ["sh", "-c", "echo start $JOBVISOR_RUN_ID $PPID $(date +%s%N) >> '{log}'; sleep 0.3; echo end $JOBVISOR_RUN_ID $PPID $(date +%s%N) >> '{log}'"] }}
"#,
            log = log.display()
        ),
    );
    ws.ok(&["import", &file.display().to_string()]);
    ws.disable_seeded_jobs();
    let db = ws.db();
    queue_runs(&db, "work", RUNS);
    let mut a = ws.start_node("n1");
    let a_pid = a.child.id() as i64;
    std::thread::sleep(Duration::from_millis(1500));
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(a_pid as i32, libc::SIGSTOP) };
    let stopped = Instant::now();
    // Three heartbeats (5 s each) missed, and a margin.
    std::thread::sleep(Duration::from_secs(16));
    let t0 = Instant::now();
    let b = ws.start_node("n1");
    let takeover_ms = t0.elapsed().as_millis();
    let b_pid = b.child.id() as i64;
    std::thread::sleep(Duration::from_secs(2));
    // SAFETY: as above.
    unsafe { libc::kill(a_pid as i32, libc::SIGCONT) };
    let resumed = Instant::now();
    let a_code = wait_for(15.0, "A to stop by itself", || a.child.try_wait().unwrap());
    let a_exit_ms = resumed.elapsed().as_millis();
    let a_log = std::fs::read_to_string(ws.path("n1.log")).unwrap_or_default();
    wait_for(120.0, "every run to succeed", || {
        (statuses(&db, "work").get("succeeded") == Some(&RUNS)).then_some(())
    });
    assert_eq!(b.stop(), Some(0));
    let text = std::fs::read_to_string(&log).unwrap();
    let runs = executions(&text);
    // Two executions of one run by different processes that overlap in time.
    let mut by_run: HashMap<i64, Vec<(i64, i128, i128)>> = HashMap::new();
    for (run, pid, s, e) in &runs {
        by_run.entry(*run).or_default().push((*pid, *s, *e));
    }
    let mut concurrent = 0;
    let mut twice = 0;
    for list in by_run.values() {
        twice += list.len().saturating_sub(1);
        for (i, x) in list.iter().enumerate() {
            for y in &list[i + 1..] {
                if x.0 != y.0 && x.1 < y.2 && y.1 < x.2 {
                    concurrent += 1;
                }
            }
        }
    }
    let resumed_ns = {
        let now_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as i128;
        now_ns - resumed.elapsed().as_nanos() as i128
    };
    let a_started_after_resume = runs
        .iter()
        .filter(|(_, pid, s, _)| *pid == a_pid && *s >= resumed_ns)
        .count();
    let by_a = runs.iter().filter(|r| r.1 == a_pid).count();
    let by_b = runs.iter().filter(|r| r.1 == b_pid).count();
    figures(
        "scenario 6 SIGSTOP and a second process",
        &[
            format!(
                "{RUNS} command runs (0.3 s each, 4 instances); A stopped for {:.1} s; B up {takeover_ms} ms \
                 after it was started (it watched A's heartbeat first)",
                (resumed - stopped).as_secs_f64()
            ),
            format!(
                "executions: A {by_a}, B {by_b}; executed twice {twice}; executed by two processes at \
                 once {concurrent}; A started {a_started_after_resume} runs after it continued"
            ),
            format!(
                "A stopped by itself {a_exit_ms} ms after it continued, exit {:?}",
                a_code.code()
            ),
        ],
    );
    assert_eq!(concurrent, 0, "no run executed by two processes at once");
    assert_eq!(
        a_started_after_resume, 0,
        "A started runs after it lost its name"
    );
    assert!(a_code.code().is_some_and(|c| c != 0), "{a_code:?}");
    assert!(
        a_log.contains("the node name was taken by"),
        "A says why it stopped: {a_log}"
    );
    assert!(
        takeover_ms >= 5000,
        "B watched A's heartbeat before taking over"
    );
}
