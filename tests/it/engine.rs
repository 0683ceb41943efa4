//! The embedding API: an engine inside the test's own actix System, with a custom function; on
//! both backends.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use jobvisor::runtime::Engine;
use serde_json::json;

use crate::support::Workspace;

crate::on_both_backends!(
    an_embedded_engine_runs_registered_functions_and_answers_messages,
    async_functions_run_and_a_panic_fails_only_its_run,
    the_injected_clock_stamps_runs_samples_heartbeats_decisions_and_audit_rows,
);

fn an_embedded_engine_runs_registered_functions_and_answers_messages(ws: Workspace) {
    let conf = "[processor.main]\ninstances = 2\n[job.double]\ntype = \"function\"\nprocessor = \"main\"\npayload = { function = \"double\", n = 1 }\n";
    ws.import_conf(conf);
    let db = ws.catalog_at();
    let mut cfg = ws.engine_config();
    cfg.policy.priority_floor = i64::MIN;
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    actix_rt::System::new().block_on(async move {
        let engine = Engine::builder()
            .config(cfg)
            .node_name("embedded")
            .function("double", move |ctx, input| {
                seen.fetch_add(1, Ordering::SeqCst);
                assert!(ctx.attempt >= 1);
                Ok(json!({ "n": input["n"].as_i64().unwrap_or(0) * 2 }))
            })
            .start()
            .unwrap();
        assert!(
            engine.trigger("nope", None).await.is_err(),
            "an unknown job is an error"
        );
        engine.pause();
        let paused = engine
            .trigger("double", Some(json!({ "n": 21 })))
            .await
            .unwrap();
        actix_rt::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(
            db.read(|db| db.runs_of("double")).await[0].status,
            "queued",
            "a paused engine claims nothing"
        );
        let status = engine.status().await.unwrap();
        assert!(status.paused && status.processors.iter().all(|p| p.paused));
        engine.resume();
        for _ in 0..250 {
            if db
                .read(|db| db.runs_of("double"))
                .await
                .iter()
                .any(|r| r.run_id == paused && r.status == "succeeded")
            {
                break;
            }
            actix_rt::time::sleep(Duration::from_millis(20)).await;
        }
        let result = db
            .read(move |db| {
                db.rows(&format!(
                    "SELECT result FROM job_run WHERE run_id = {paused}"
                ))
            })
            .await;
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(result[0][0].as_str().unwrap()).unwrap(),
            json!({ "n": 42 }),
            "params overlay the payload"
        );
        let status = engine.status().await.unwrap();
        assert_eq!(
            status.processors.iter().map(|p| p.completed).sum::<u64>(),
            1
        );
        engine.shutdown(Duration::from_secs(1)).await.unwrap();
    });
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

/// Async functions run on the processor's thread: results are recorded, an error fails its run,
/// and a panic fails its run without stopping the processor. 200 runs of one job recorded in
/// batches leave its bookkeeping exact (`in_progress` back to 0, last end = the latest end).
fn async_functions_run_and_a_panic_fails_only_its_run(ws: Workspace) {
    let conf = "[processor.main]\ninstances = 4\n\
        [job.add]\ntype = \"function\"\nprocessor = \"main\"\noverlap_policy = \"allow\"\nmax_overlap = 1000\npayload = { function = \"add\" }\n\
        [job.boom]\ntype = \"function\"\nprocessor = \"main\"\npayload = { function = \"boom\" }\n";
    ws.import_conf(conf);
    let db = ws.catalog_at();
    let mut cfg = ws.engine_config();
    cfg.policy.priority_floor = i64::MIN;
    actix_rt::System::new().block_on(async move {
        let engine = Engine::builder()
            .config(cfg)
            .node_name("async")
            .async_function("add", |_, input| async move {
                // Awaits like real I/O would.
                actix_rt::time::sleep(Duration::from_millis(1)).await;
                let n = input["n"].as_i64().ok_or("n is missing")?;
                Ok(json!({ "n": n + 1 }))
            })
            .async_function("boom", |_, _| async move {
                if true {
                    panic!("boom");
                }
                Ok(json!(null))
            })
            .start()
            .unwrap();
        engine.trigger("boom", None).await.unwrap();
        let params: Vec<Option<serde_json::Value>> =
            (0..200).map(|n| Some(json!({ "n": n }))).collect();
        engine.trigger_many("add", params).await.unwrap();
        engine.trigger("add", None).await.unwrap();
        for _ in 0..500 {
            let (add, boom) = db.read(|db| (db.runs_of("add"), db.runs_of("boom"))).await;
            let done = add.iter().filter(|r| r.finished_at.is_some()).count();
            if done == 201 && boom[0].finished_at.is_some() {
                break;
            }
            actix_rt::time::sleep(Duration::from_millis(20)).await;
        }
        engine.shutdown(Duration::from_secs(1)).await.unwrap();
    });
    let db = ws.catalog();
    let add = db.runs_of("add");
    let succeeded = add.iter().filter(|r| r.status == "succeeded").count();
    let failed: Vec<_> = add.iter().filter(|r| r.status == "failed").collect();
    assert_eq!((succeeded, failed.len()), (200, 1), "{add:?}");
    assert_eq!(failed[0].error.as_deref(), Some("n is missing"));
    let boom = db.runs_of("boom");
    assert_eq!(boom[0].status, "failed");
    assert!(
        boom[0].error.as_deref().unwrap_or("").contains("panicked"),
        "{:?}",
        boom[0].error
    );
    // Only `add`'s runs: the seeded jobs are active too (the priority floor is MIN), and one
    // that fires meanwhile succeeds with a result of its own.
    let results: Vec<i64> = db
        .rows(
            "SELECT result FROM job_run r JOIN job j USING (job_id)
             WHERE j.job_name = 'add' AND r.status = 'succeeded' ORDER BY r.run_id",
        )
        .iter()
        .map(|r| {
            let result: serde_json::Value = serde_json::from_str(r[0].as_str().unwrap()).unwrap();
            result["n"].as_i64().unwrap()
        })
        .collect();
    assert_eq!(results, (1..=200).collect::<Vec<i64>>());
    let row = db.rows(&format!(
        "SELECT p.in_progress, p.last_date_end, (SELECT max(finished_at) FROM job_run r
         WHERE r.job_id = j.job_id) FROM job j JOIN {} p USING (job_id) WHERE j.job_name = 'add'",
        db.job_progress()
    ));
    let (in_progress, last_end, latest) = (&row[0][0], &row[0][1], &row[0][2]);
    assert_eq!((in_progress, last_end), (&json!(0), latest));
}

/// One injected clock for the runtime (issue 13): an engine given a clock set in 2031 stamps
/// its runs' start and finish, its health samples, its heartbeats and its start-up decisions
/// by that clock, not by the system's.
fn the_injected_clock_stamps_runs_samples_heartbeats_decisions_and_audit_rows(ws: Workspace) {
    struct Fixed(i64);
    impl jobvisor::runtime::Clock for Fixed {
        fn now_ms(&self) -> i64 {
            self.0
        }
    }
    const T: i64 = 1_924_992_000_000; // 2031-01-01T00:00:00Z
    let conf = "[processor.main]\ninstances = 1\n[job.echo]\ntype = \"function\"\nprocessor = \"main\"\nrequired = true\npayload = { function = \"debug.echo\" }\n";
    ws.import_conf(conf);
    let db = ws.catalog_at();
    let mut cfg = ws.engine_config();
    cfg.health.interval = 200;
    actix_rt::System::new().block_on(async move {
        let engine = Engine::builder()
            .config(cfg)
            .node_name("clocked")
            .clock(Arc::new(Fixed(T)))
            .start()
            .unwrap();
        engine.trigger("echo", None).await.unwrap();
        for _ in 0..250 {
            let (runs, samples) = db
                .read(|db| (db.runs_of("echo"), db.count("SELECT count(*) FROM stat")))
                .await;
            if runs.iter().any(|r| r.status == "succeeded") && samples > 0 {
                break;
            }
            actix_rt::time::sleep(Duration::from_millis(20)).await;
        }
        let [run, samples, heartbeat, decisions, audited] = db
            .read(|db| {
                [
                    "SELECT started_at, finished_at FROM job_run WHERE status = 'succeeded'",
                    "SELECT min(sampled_at), max(sampled_at) FROM stat",
                    "SELECT heartbeat_at FROM node WHERE node_name = 'clocked'",
                    &format!("SELECT count(*), count(*) FILTER (WHERE at <> {T}) FROM decision"),
                    "SELECT at FROM audit WHERE action = 'job.run' AND actor = 'embedded'",
                ]
                .map(|sql| db.rows(sql).remove(0))
            })
            .await;
        assert_eq!(run, [json!(T), json!(T)], "run times by the injected clock");
        assert_eq!(
            samples,
            [json!(T), json!(T)],
            "health samples by the injected clock"
        );
        assert_eq!(
            heartbeat,
            [json!(T)],
            "the node's heartbeat by the injected clock"
        );
        assert!(
            decisions[0].as_i64() > Some(0),
            "the start-up activation is a decision"
        );
        assert_eq!(decisions[1], json!(0), "decisions by the injected clock");
        assert_eq!(
            audited,
            [json!(T)],
            "the trigger's audit row by the injected clock"
        );
        engine.shutdown(Duration::from_secs(2)).await.unwrap();
    });
}
