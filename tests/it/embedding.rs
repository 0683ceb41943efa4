//! Issue 17: the engine as part of a larger actix application — run events delivered to a host
//! actor and a stream, awaited results, the catalog managed from code, enqueueing inside the
//! application's own transaction, runs traced under the caller's span, custom executors. On both
//! backends but enqueueing in the application's transaction: `catalog::enqueue_in` takes a
//! connection to the SQLite catalog file (its own tables beside the catalog's).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix::prelude::*;
use jobvisor::catalog::DbSettings;
use jobvisor::executor::CustomRun;
use jobvisor::model::{JobType, Pin, RunStatus};
use jobvisor::ops::handle::OpsHandle;
use jobvisor::ops::jobs::JobPatch;
use jobvisor::runtime::{Engine, EngineError, Event};
use serde_json::json;

use crate::support::{Workspace, runs_of};

crate::on_both_backends!(
    a_host_is_told_of_runs_awaits_results_manages_jobs_and_runs_its_own_kind_of_job,
    a_subscriber_that_never_reads_drops_and_counts_and_slows_nothing,
    a_run_executes_in_its_own_span_under_the_trigger_s,
);

const CATALOG: &str = r#"
[processor.main]
instances = 2

[processor.spare]
instances = 1

[job.echo]
type = "function"
processor = "main"
payload = { function = "debug.echo", from = "payload" }

[job.flaky]
type = "function"
processor = "main"
max_attempts = 2
backoff_base = 10
backoff_max = 20
payload = { function = "debug.fail", message = "flaky says no" }

[job.parked]
type = "function"
processor = "spare"
payload = { function = "debug.noop" }
"#;

/// A catalog with the test's jobs, and an engine config whose every job is activated at start.
fn setup(ws: &Workspace) -> jobvisor::config::NodeConfig {
    ws.import_conf(CATALOG);
    let mut cfg = ws.engine_config();
    cfg.node.name = "host".into();
    cfg.policy.priority_floor = i64::MIN;
    cfg
}

/// A host actor that keeps the events it is told.
struct Host(Arc<Mutex<Vec<Event>>>);

impl Actor for Host {
    type Context = Context<Self>;
}

impl Handler<Event> for Host {
    type Result = ();

    fn handle(&mut self, event: Event, _: &mut Context<Self>) {
        self.0.lock().unwrap().push(event);
    }
}

const WAIT: Duration = Duration::from_secs(10);

fn a_host_is_told_of_runs_awaits_results_manages_jobs_and_runs_its_own_kind_of_job(ws: Workspace) {
    let cfg = setup(&ws);
    let db = ws.catalog_at();
    actix_rt::System::new().block_on(async move {
        let engine = Engine::builder()
            .config(cfg)
            .executor("double", |run: CustomRun| async move {
                let n = run.input["n"].as_i64().ok_or("input needs n")?;
                Ok(json!({ "doubled": n * 2, "run": run.ctx.run_id, "timeout_ms": run.timeout_ms }))
            })
            .start()
            .unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let host = Host(seen.clone()).start();
        let subscription = engine.subscribe(host.recipient());
        let mut stream = engine.events(1000);

        // Awaiting a result: the run's outcome and output, no polling.
        let outcome = engine
            .run("echo", Some(json!({ "word": "hi" })), WAIT)
            .await
            .unwrap();
        assert_eq!(outcome.status, RunStatus::Succeeded);
        assert_eq!(
            outcome.result,
            Some(json!({ "from": "payload", "word": "hi" }))
        );
        // A run that ended already answers from the catalog at once.
        let again = engine.wait(outcome.run_id, WAIT).await.unwrap();
        assert_eq!(again, outcome);
        // Through its retries to the last attempt.
        let dead = engine.run("flaky", None, WAIT).await.unwrap();
        assert_eq!(
            (dead.status, dead.attempt),
            (RunStatus::Dead, 2),
            "{dead:?}"
        );
        assert!(dead.error.unwrap().contains("flaky says no"));

        // The host actor and the stream were told, in order, for each run.
        let echo = outcome.run_id;
        let mut told = Vec::new();
        while told.len() < 3 {
            match tokio::time::timeout(WAIT, stream.next())
                .await
                .unwrap()
                .unwrap()
            {
                e @ (Event::Queued { .. } | Event::Started { .. } | Event::Finished { .. })
                    if event_run(&e) == Some(echo) =>
                {
                    told.push(e)
                }
                _ => {}
            }
        }
        assert!(
            matches!(told[0], Event::Queued { ref job, .. } if job == "echo"),
            "{told:?}"
        );
        assert!(
            matches!(told[1], Event::Started { attempt: 1, .. }),
            "{told:?}"
        );
        assert!(
            matches!(
                told[2],
                Event::Finished {
                    status: RunStatus::Succeeded,
                    retry: None,
                    ..
                }
            ),
            "{told:?}"
        );
        actix_rt::time::sleep(Duration::from_millis(50)).await;
        let actor_saw = seen.lock().unwrap().clone();
        let flaky: Vec<_> = actor_saw
            .iter()
            .filter_map(|e| match e {
                Event::Finished {
                    job, status, retry, ..
                } if job == "flaky" => Some((*status, retry.is_some())),
                _ => None,
            })
            .collect();
        assert_eq!(
            flaky,
            [(RunStatus::Failed, true), (RunStatus::Dead, false)],
            "the actor heard of the retry and the dead end: {actor_saw:?}"
        );
        assert_eq!(subscription.dropped(), 0);

        // The catalog managed from code: the same operations as the CLI and the API.
        let ops = OpsHandle::open(&engine, "host-app").unwrap();
        let patch = JobPatch {
            payload: Some(
                json!({ "executor": "double", "n": 1 })
                    .as_object()
                    .cloned()
                    .unwrap(),
            ),
            ..JobPatch::default()
        };
        ops.add_job("twice", JobType::Custom, "main", patch)
            .await
            .unwrap();
        ops.pin_job("twice", Some(Pin::Active)).await.unwrap();
        // Its own kind of job, carried out by the application's executor.
        let twice = engine
            .run("twice", Some(json!({ "n": 21 })), WAIT)
            .await
            .unwrap();
        assert_eq!(twice.result.as_ref().unwrap()["doubled"], 42, "{twice:?}");
        // A paused processor claims nothing: the wait times out; resumed, the run ends.
        ops.set_processor_enabled("spare", false).await.unwrap();
        actix_rt::time::sleep(Duration::from_millis(300)).await;
        let parked = engine.trigger("parked", None).await.unwrap();
        let waited = engine.wait(parked, Duration::from_millis(500)).await;
        assert!(
            matches!(waited, Err(EngineError::Timeout { run_id, .. }) if run_id == parked),
            "{waited:?}"
        );
        ops.set_processor_enabled("spare", true).await.unwrap();
        assert!(engine.wait(parked, WAIT).await.unwrap().succeeded());
        // Cancel a queued run from code; the waiter is told it was cancelled.
        ops.set_processor_enabled("spare", false).await.unwrap();
        actix_rt::time::sleep(Duration::from_millis(300)).await;
        let queued = engine.trigger("parked", None).await.unwrap();
        ops.cancel_run(queued).await.unwrap();
        let cancelled = engine.wait(queued, WAIT).await.unwrap();
        assert_eq!(cancelled.status, RunStatus::Cancelled);
        let retried = ops.retry_run(queued).await.unwrap();
        ops.set_processor_enabled("spare", true).await.unwrap();
        assert!(engine.wait(retried, WAIT).await.unwrap().succeeded());
        // Disabled and edited from code; every change is audited as the application.
        ops.set_job_enabled("twice", false).await.unwrap();
        ops.edit_job(
            "twice",
            JobPatch {
                priority: Some(9),
                ..JobPatch::default()
            },
        )
        .await
        .unwrap();
        let audited: Vec<String> = db
            .read(|db| {
                db.rows("SELECT action FROM audit WHERE actor = 'host-app' ORDER BY audit_id")
            })
            .await
            .iter()
            .map(|r| r[0].as_str().unwrap().to_string())
            .collect();
        assert!(
            [
                "job.add",
                "job.pin",
                "processor.edit",
                "run.cancel",
                "run.retry",
                "job.disable",
                "job.edit"
            ]
            .iter()
            .all(|a| audited.iter().any(|x| x == a)),
            "{audited:?}"
        );
        engine.unsubscribe(&subscription);
        engine.shutdown(Duration::from_secs(1)).await.unwrap();
    });
}

fn event_run(e: &Event) -> Option<i64> {
    match e {
        Event::Queued { run_ids, .. } => run_ids.first().copied(),
        Event::Started { run_id, .. } | Event::Finished { run_id, .. } => Some(*run_id),
        Event::Decision { .. } => None,
    }
}

/// SQLite only: the application's transaction is on a connection to the catalog file.
#[test]
fn a_rolled_back_transaction_enqueues_nothing_and_a_committed_one_runs() {
    let ws = Workspace::new();
    let cfg = setup(&ws);
    let db = ws.db();
    actix_rt::System::new().block_on(async move {
        let engine = Engine::builder().config(cfg).start().unwrap();
        // The application keeps its own table in the catalog's file.
        let mut app = jobvisor::catalog::open_connection(&db, &DbSettings::default()).unwrap();
        app.execute_batch("CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT)")
            .unwrap();
        let before = runs_of(&db, "echo").len();
        let tx = app.transaction().unwrap();
        tx.execute("INSERT INTO orders (item) VALUES ('lost')", [])
            .unwrap();
        jobvisor::catalog::enqueue_in(&tx, "echo", Some(&json!({ "order": "lost" })), "shop")
            .unwrap();
        tx.rollback().unwrap();
        actix_rt::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(
            runs_of(&db, "echo").len(),
            before,
            "a rolled-back enqueue left no run"
        );
        let tx = app.transaction().unwrap();
        tx.execute("INSERT INTO orders (item) VALUES ('kept')", [])
            .unwrap();
        let run_id =
            jobvisor::catalog::enqueue_in(&tx, "echo", Some(&json!({ "order": "kept" })), "shop")
                .unwrap();
        tx.commit().unwrap();
        let outcome = engine.wait(run_id, WAIT).await.unwrap();
        assert_eq!(outcome.result.unwrap()["order"], "kept");
        let orders: i64 = app
            .query_row("SELECT count(*) FROM orders", [], |r| r.get(0))
            .unwrap();
        assert_eq!(orders, 1);
        engine.shutdown(Duration::from_secs(1)).await.unwrap();
    });
}

/// A stream nobody reads fills, then its events are dropped and counted; the engine goes on.
fn a_subscriber_that_never_reads_drops_and_counts_and_slows_nothing(ws: Workspace) {
    let cfg = setup(&ws);
    actix_rt::System::new().block_on(async move {
        let engine = Engine::builder().config(cfg).start().unwrap();
        let stream = engine.events(16);
        let ids = engine
            .trigger_many("echo", (0..300).map(|i| Some(json!({ "i": i }))).collect())
            .await
            .unwrap();
        for &id in &ids {
            assert!(engine.wait(id, WAIT).await.unwrap().succeeded());
        }
        // One Queued for the batch, a Started and a Finished per run: all but the 16 buffered
        // were dropped.
        let dropped = stream.subscription().dropped();
        assert!(dropped >= 1 + 2 * 300 - 16, "dropped {dropped}");
        assert_eq!(engine.events_dropped(), dropped);
        engine.shutdown(Duration::from_secs(1)).await.unwrap();
    });
}

/// Each run executes in a span `run` with its job, run id, attempt and node; a run triggered
/// inside a span (a request handler's) is its child.
fn a_run_executes_in_its_own_span_under_the_trigger_s(ws: Workspace) {
    use tracing_subscriber::layer::SubscriberExt;

    /// A span seen: its name, its parent's name, its fields.
    type Seen = (String, Option<String>, String);
    #[derive(Clone, Default)]
    struct Spans(Arc<Mutex<Vec<Seen>>>);
    struct Fields(String);
    impl tracing::field::Visit for Fields {
        fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
            self.0.push_str(&format!("{}={:?} ", field.name(), value));
        }
    }
    impl<S> tracing_subscriber::Layer<S> for Spans
    where
        S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    {
        fn on_new_span(
            &self,
            attrs: &tracing::span::Attributes<'_>,
            id: &tracing::span::Id,
            ctx: tracing_subscriber::layer::Context<'_, S>,
        ) {
            let mut fields = Fields(String::new());
            attrs.record(&mut fields);
            let parent = ctx
                .span(id)
                .and_then(|s| s.parent().map(|p| p.name().to_string()));
            self.0
                .lock()
                .unwrap()
                .push((attrs.metadata().name().to_string(), parent, fields.0));
        }
    }

    let cfg = setup(&ws);
    let spans = Spans::default();
    let subscriber = tracing_subscriber::registry().with(spans.clone());
    tracing::subscriber::with_default(subscriber, || {
        actix_rt::System::new().block_on(async move {
            let engine = Engine::builder().config(cfg).start().unwrap();
            let request = tracing::info_span!("request", path = "/orders");
            let id = tracing::Instrument::instrument(engine.trigger("echo", None), request)
                .await
                .unwrap();
            assert!(engine.wait(id, WAIT).await.unwrap().succeeded());
            let untraced = engine.trigger("echo", None).await.unwrap();
            assert!(engine.wait(untraced, WAIT).await.unwrap().succeeded());
            engine.shutdown(Duration::from_secs(1)).await.unwrap();
            let seen = spans.0.lock().unwrap().clone();
            let run = |id: i64| {
                seen.iter()
                    .find(|(name, _, f)| name == "run" && f.contains(&format!("run_id={id} ")))
                    .cloned()
                    .unwrap_or_else(|| panic!("no span of run {id}: {seen:?}"))
            };
            let (_, parent, fields) = run(id);
            assert_eq!(parent.as_deref(), Some("request"), "{fields}");
            for part in ["job=echo ", "attempt=1 ", "node=host "] {
                assert!(fields.contains(part), "{part} in {fields}");
            }
            assert_eq!(
                run(untraced).1,
                None,
                "a run triggered outside a span has no parent"
            );
        });
    });
}
