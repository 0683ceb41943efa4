//! Scenario 2, a poison job (issue 12, defect 1): a command job that kills its node
//! (`kill -9 $PPID`, `max_attempts = 3`) among 200 other runs on the same processor. The node
//! is restarted after each death; the poison run is quarantined (`dead`) after 4 deaths — the
//! first unblamed (it was not yet known to run), then one per attempt — with a reason that
//! counts all 4 (issue 27, point 2d: it said 3), and the 200 other runs all complete. The
//! recovery log names the runs it requeued.

use std::time::{Duration, Instant};

use crate::support::{Workspace, queue_runs, runs_of};
use crate::{figures, open, serial, statuses};

#[test]
fn a_poison_job_is_quarantined_and_the_rest_of_the_queue_completes() {
    let _one = serial();
    let ws = Workspace::new();
    let file = ws.write(
        "jobs.conf",
        r#"
[processor.main]
instances = 1

[job.poison]
type = "command"
processor = "main"
max_attempts = 3
payload = { argv = ["sh", "-c", "kill -9 $PPID; sleep 5"] }

[job.work]
type = "function"
processor = "main"
overlap_policy = "allow"
max_overlap = 1000
payload = { function = "debug.sleep", ms = 5 }
"#,
    );
    ws.ok(&["import", &file.display().to_string()]);
    ws.disable_seeded_jobs();
    let db = ws.db();
    queue_runs(&db, "work", 100);
    queue_runs(&db, "poison", 1);
    queue_runs(&db, "work", 100);
    let poison_id = runs_of(&db, "poison")[0].run_id;
    let t0 = Instant::now();
    let mut deaths = 0;
    let mut logs = String::new();
    let mut finished = false;
    for start in 0..12 {
        let mut node = ws.start_node("n1");
        let up = Instant::now();
        loop {
            if let Some(status) = node.child.try_wait().unwrap() {
                assert_eq!(status.code(), None, "killed by a signal: {status:?}");
                deaths += 1;
                break;
            }
            if statuses(&db, "work").get("succeeded") == Some(&200) {
                finished = true;
                break;
            }
            assert!(
                up.elapsed() < Duration::from_secs(30),
                "start {start} hangs"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        logs.push_str(&std::fs::read_to_string(ws.path("n1.log")).unwrap_or_default());
        if finished {
            assert_eq!(node.stop(), Some(0));
            break;
        }
        drop(node);
    }
    assert!(finished, "the queue completed within 12 starts");
    let (status, attempt, error): (String, i64, Option<String>) = open(&db)
        .query_row(
            "SELECT status, attempt, error FROM job_run WHERE run_id = ?1",
            [poison_id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    let named =
        logs.contains(&format!("{poison_id}")) && logs.contains("were returned to the queue: [");
    figures(
        "scenario 2 poison job",
        &[
            format!(
                "node deaths {deaths} (one unblamed, then one per attempt), poison run {poison_id}: \
                 {status} after attempt {attempt}, error {error:?}"
            ),
            format!(
                "other runs: {:?} of 200, in {:.1} s; recovery log names the requeued runs: {named}",
                statuses(&db, "work"),
                t0.elapsed().as_secs_f64()
            ),
        ],
    );
    assert_eq!(status, "dead");
    assert_eq!(
        error.as_deref(),
        Some("quarantined: the node died 4 times while it held this run, 3 of them while it ran"),
        "the reason counts the {deaths} deaths"
    );
    assert_eq!(deaths, 4, "one unblamed death, then three blamed ones");
    assert!(named, "the recovery log names the run ids it requeued");
}
