//! The embedding API: an engine inside the test's own actix System, with a custom function.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use jobvisor::catalog::{Catalog, DbSettings};
use jobvisor::jobconf::toml_format;
use jobvisor::runtime::Engine;
use serde_json::json;

use crate::support::{Workspace, runs_of};

#[test]
fn an_embedded_engine_runs_registered_functions_and_answers_messages() {
    let ws = Workspace::new();
    let db = ws.db();
    let conf = "[processor.main]\ninstances = 2\n[job.double]\ntype = \"function\"\nprocessor = \"main\"\npayload = { function = \"double\", n = 1 }\n";
    Catalog::open(&db, &DbSettings::default())
        .unwrap()
        .import(&toml_format::parse(conf).unwrap(), "test")
        .unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    actix_rt::System::new().block_on(async move {
        let mut cfg = jobvisor::config::NodeConfig::default();
        cfg.node.data_dir = ws.path("data").display().to_string();
        cfg.policy.priority_floor = i64::MIN;
        let engine = Engine::builder()
            .config(cfg)
            .db(&db)
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
            runs_of(&db, "double")[0].status,
            "queued",
            "a paused engine claims nothing"
        );
        let status = engine.status().await.unwrap();
        assert!(status.paused && status.processors.iter().all(|p| p.paused));
        engine.resume();
        for _ in 0..250 {
            if runs_of(&db, "double")
                .iter()
                .any(|r| r.run_id == paused && r.status == "succeeded")
            {
                break;
            }
            actix_rt::time::sleep(Duration::from_millis(20)).await;
        }
        let conn = rusqlite::Connection::open(&db).unwrap();
        let result: String = conn
            .query_row(
                "SELECT result FROM job_run WHERE run_id = ?1",
                [paused],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&result).unwrap(),
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
