//! Scenario 11, a node stopped past its runs' timeouts (issue 27, point 2a): a node executes
//! four command runs (1 s timeout, 0.2 s of work) and is stopped (SIGSTOP) for longer than
//! the timeout while they run; their commands exit 0 during the stop. When the node continues
//! (SIGCONT) it finds each exit and its timer both there: the exit wins, and every run is
//! recorded `succeeded`, none `timed_out`. `JOBVISOR_SOAK=1` stops it for 60 s.

use std::time::{Duration, Instant};

use crate::support::{Workspace, queue_runs, wait_for};
use crate::{figures, serial, soak, statuses};

#[test]
fn a_node_stopped_past_its_runs_timeouts_records_the_exits_it_finds() {
    let _one = serial();
    const RUNS: i64 = 4;
    let stop = Duration::from_secs(if soak() { 60 } else { 3 });
    let ws = Workspace::new();
    let started = ws.path("started.log");
    let file = ws.write(
        "jobs.conf",
        &format!(
            r#"
[processor.wide]
instances = {RUNS}

[job.quick]
type = "command"
processor = "wide"
overlap_policy = "allow"
max_overlap = 100
timeout = 1000
payload = {{ argv = ["sh", "-c", "echo $JOBVISOR_RUN_ID >> '{started}'; sleep 0.2"] }}
"#,
            started = started.display()
        ),
    );
    ws.ok(&["import", &file.display().to_string()]);
    ws.disable_seeded_jobs();
    let db = ws.db();
    queue_runs(&db, "quick", RUNS);
    let node = ws.start_node("n1");
    let pid = node.child.id() as i32;
    wait_for(30.0, "every command to start", || {
        let text = std::fs::read_to_string(&started).unwrap_or_default();
        (text.lines().count() as i64 == RUNS).then_some(())
    });
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let stopped = Instant::now();
    // The stop itself: the commands exit during it, and their timeouts pass.
    std::thread::sleep(stop);
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    let ended = wait_for(30.0, "every run to end", || {
        let by_status = statuses(&db, "quick");
        let ended: i64 = by_status
            .iter()
            .filter(|(s, _)| !matches!(s.as_str(), "queued" | "claimed" | "running"))
            .map(|(_, n)| n)
            .sum();
        (ended == RUNS).then_some(by_status)
    });
    figures(
        "scenario 11 stopped past the timeouts",
        &[format!(
            "{RUNS} command runs (timeout 1 s, 0.2 s of work) on a node stopped for {:.1} s while \
             they ran: {ended:?}",
            stopped.elapsed().as_secs_f64()
        )],
    );
    assert_eq!(ended.get("timed_out"), None, "{ended:?}");
    assert_eq!(ended.get("succeeded"), Some(&RUNS), "{ended:?}");
    assert_eq!(node.stop(), Some(0));
}
