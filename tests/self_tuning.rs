//! The self-tuning policy on a real node under real CPU load (`stress-ng --cpu 2`, which
//! `.ci/run` installs). A test binary of its own, so no other test's load runs beside it.

#[path = "it/support.rs"]
mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value as Json;
use support::{Workspace, wait_for};

const CATALOG: &str = r#"
[processor.main]
instances = 2

[job.keeper]
type = "function"
processor = "main"
required = true
priority = 10
cron = "* * * * * *"
payload = { function = "debug.noop" }

[job.middle]
type = "function"
processor = "main"
priority = 5
cron = "* * * * * *"
payload = { function = "debug.noop" }

[job.victim]
type = "function"
processor = "main"
priority = 1
cron = "* * * * * *"
payload = { function = "debug.noop" }
"#;

/// Health sample interval in this test, ms.
const SAMPLE_MS: i64 = 1000;

fn decisions(ws: &Workspace) -> Vec<Json> {
    let out = ws.ok(&["decisions", "--all-nodes", "--json", "--limit", "1000"]);
    let mut rows: Vec<Json> = serde_json::from_str::<Json>(&out)
        .unwrap()
        .as_array()
        .unwrap()
        .clone();
    rows.reverse();
    rows
}

fn find(rows: &[Json], action: &str, subject: &str, after: i64) -> Option<Json> {
    rows.iter()
        .find(|d| d["action"] == action && d["subject"] == subject && at_ms(d) >= after)
        .cloned()
}

/// A decision's time (RFC 3339 in JSON) in epoch ms.
fn at_ms(d: &Json) -> i64 {
    d["at"]
        .as_str()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map_or(0, |t| t.timestamp_millis())
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

#[test]
fn a_node_under_cpu_load_sheds_its_lowest_priority_job_and_restores_it() {
    assert!(
        Command::new("stress-ng")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success()),
        "stress-ng is not installed (`.ci/run` installs it: apt-get install stress-ng)"
    );
    let ws = Workspace::new();
    // The real policy: only the required job is the minimum; the rest ramp up while healthy.
    ws.set_node_env("JOBVISOR__POLICY__PRIORITY_FLOOR", "100");
    ws.set_node_env("JOBVISOR__HEALTH__INTERVAL", &SAMPLE_MS.to_string());
    ws.set_node_env("JOBVISOR__POLICY__STEP_INTERVAL", "1000");
    ws.set_node_env("JOBVISOR__POLICY__COOLDOWN", "5000");
    let file = ws.write("jobs.conf", CATALOG);
    ws.ok(&["import", &file.display().to_string()]);
    ws.disable_seeded_jobs();
    let node = ws.start_node("tuned");
    // Ramp-up: middle, then victim, in priority order.
    wait_for(40.0, "the victim to be activated", || {
        find(&decisions(&ws), "activate", "victim", 0)
    });
    let rows = decisions(&ws);
    let order: Vec<&str> = rows
        .iter()
        .filter(|d| d["action"] == "activate")
        .filter_map(|d| d["subject"].as_str())
        .collect();
    // The start-up minimum (the required `keeper`) first, then the ramp in priority order.
    assert_eq!(
        order,
        ["keeper", "middle", "victim"],
        "activation follows priority"
    );

    let start = now_ms();
    let t0 = Instant::now();
    let mut stress = Command::new("stress-ng")
        .args(["--cpu", "2", "--timeout", "30s", "--quiet"])
        .spawn()
        .unwrap();
    let shed = wait_for(20.0, "the victim to be shed", || {
        find(&decisions(&ws), "deactivate", "victim", start)
    });
    let shed_at = at_ms(&shed);
    // Within 2 samples of the breach (plus the one sample whose window straddles the start).
    assert!(
        shed_at - start <= 3 * SAMPLE_MS + 500,
        "shed {} ms after the load began: {shed}",
        shed_at - start
    );
    assert!(shed["reason"].as_str().unwrap().contains("cpu"), "{shed}");
    let rows = decisions(&ws);
    assert!(
        find(&rows, "deactivate", "keeper", start).is_none(),
        "a required job is never shed"
    );

    stress.wait().unwrap();
    let end = now_ms();
    assert!(t0.elapsed() >= Duration::from_secs(29));
    let restored = wait_for(20.0, "the victim to be restored", || {
        find(&decisions(&ws), "activate", "victim", end)
    });
    let restored_at = at_ms(&restored);
    // Restores go in priority order, one per step: `middle` may come first.
    assert!(
        restored_at - end <= 6 * SAMPLE_MS,
        "restored {} ms after the load ended: {restored}",
        restored_at - end
    );
    assert!(!restored["reason"].as_str().unwrap().is_empty());
    assert_eq!(node.stop(), Some(0));

    let table = ws.ok(&["decisions", "--all-nodes"]);
    println!("{table}");
    assert!(table.contains("deactivate") && table.contains("victim"));
}
