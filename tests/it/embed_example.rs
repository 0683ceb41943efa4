//! `examples/embed.rs` run as its users would: the shop answers a report request with the
//! awaited run's result, stores an order and its shipping run in one transaction (and neither
//! when it rolls back), manages its job from code, and its host actor is told of the runs.
//! `cargo test` builds the example before it runs the tests.

use std::io::BufRead;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::json;

use crate::support::{Workspace, api, runs_of, wait_for};

/// The example's binary, beside this test binary's folder (`target/<profile>/examples/`).
fn example() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile = exe.parent().and_then(|deps| deps.parent()).unwrap();
    let path = profile.join("examples").join("embed");
    assert!(
        path.exists(),
        "{} is missing: `cargo test` builds it (or `cargo build --example embed`)",
        path.display()
    );
    path
}

#[test]
fn the_embedding_example_awaits_results_enqueues_in_its_transaction_and_manages_its_job() {
    let ws = Workspace::new();
    let mut child = Command::new(example())
        .args(["127.0.0.1:0", ws.path("shop").to_str().unwrap()])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(ws.path("shop.log")).unwrap())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let base = std::io::BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .find_map(|l| l.strip_prefix("listening on ").map(String::from))
        .expect("the example prints its address");
    let db = ws.path("shop").join("catalog.db");

    // A request handler awaits its run and answers with the result.
    let r = api(&base, None, "POST", "/reports/weekly", None);
    assert_eq!(r.status, 200, "{}", r.body);
    let outcome = r.json();
    assert_eq!(outcome["status"], "succeeded", "{outcome}");
    assert_eq!(outcome["result"]["report"], "weekly");

    // An order and its shipping run commit together...
    let r = api(
        &base,
        None,
        "POST",
        "/orders",
        Some(&json!({ "item": "book" })),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let shipped = r.json()["run_id"].as_i64().unwrap();
    wait_for(10.0, "the order's shipping run", || {
        runs_of(&db, "ship")
            .into_iter()
            .find(|run| run.run_id == shipped && run.status == "succeeded")
    });
    // ...and roll back together.
    let r = api(
        &base,
        None,
        "POST",
        "/orders",
        Some(&json!({ "item": "x", "fail": true })),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.json()["rolled_back"], true);
    assert_eq!(
        runs_of(&db, "ship").len(),
        1,
        "a rolled-back order queued no run"
    );
    let conn = crate::support::open_db(&db);
    let orders: i64 = conn
        .query_row("SELECT count(*) FROM orders", [], |r| r.get(0))
        .unwrap();
    assert_eq!(orders, 1);

    // The job managed from code.
    let r = api(
        &base,
        None,
        "PUT",
        "/jobs/report/priority",
        Some(&json!({ "priority": 7 })),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let priority: i64 = conn
        .query_row(
            "SELECT priority FROM job WHERE job_name = 'report'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(priority, 7);
    let r = api(&base, None, "POST", "/jobs/report/disable", None);
    assert_eq!(r.status, 200, "{}", r.body);
    let enabled: i64 = conn
        .query_row(
            "SELECT status FROM job WHERE job_name = 'report'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(enabled, 0);
    assert_eq!(
        api(&base, None, "POST", "/jobs/report/enable", None).status,
        200
    );

    // The host actor was told of every run, and missed none.
    let events = wait_for(10.0, "the host actor's tally", || {
        let v = api(&base, None, "GET", "/events", None).json();
        (v["finished"]["ship"]["succeeded"] == 1 && v["finished"]["report"]["succeeded"] == 1)
            .then_some(v)
    });
    assert_eq!(events["dropped"], 0, "{events}");
    assert!(events["started"].as_u64().unwrap() >= 2, "{events}");

    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert_eq!(child.wait().unwrap().code(), Some(0));
}
