//! When a job runs next (issue 27, point 3): each node records its planners' next runs
//! (`job_activation.next_run_at`) and every view reads the earliest among the live nodes where
//! the job is active — an embedded engine on an injected clock for the exact values and the
//! writes they cost, and a real node for the API and the CLI; on both backends.

use std::sync::Arc;
use std::time::{Duration, Instant};

use jobvisor::catalog::Catalog;
use jobvisor::runtime::{Clock, Engine};
use serde_json::Value;

use crate::support::{TestDb, Workspace, api, wait_for};

crate::on_both_backends!(
    each_planned_job_shows_its_next_run_and_a_node_at_rest_writes_none,
    next_run_at_is_served_by_the_api_and_the_cli_and_follows_edits_and_disabling,
);

const MIN: i64 = 60_000;
/// 2031-01-01T00:10:00Z.
const T: i64 = 1_924_992_000_000 + 10 * MIN;

/// A clock that reads [`T`] when the test starts and runs at the system clock's pace.
struct FromT(Instant);
impl Clock for FromT {
    fn now_ms(&self) -> i64 {
        T + self.0.elapsed().as_millis() as i64
    }
}

const CONF: &str = r#"
[processor.main]
instances = 2

[job.hourly]
type = "function"
processor = "main"
required = true
cron = "0 * * * *"
timezone = "UTC"
payload = { function = "debug.noop" }

[job.every]
type = "function"
processor = "main"
required = true
run_every = 5
timezone = "UTC"
payload = { function = "debug.noop" }

[job.always]
type = "function"
processor = "main"
required = true
run_always = true
run_delay = 600000
payload = { function = "debug.noop" }

[job.manual]
type = "function"
processor = "main"
required = true
payload = { function = "debug.noop" }
"#;

/// Logs each write of `job_activation.next_run_at` (its job) in a table of the test's own.
fn log_next_run_writes(db: &TestDb) {
    match db {
        TestDb::Sqlite(_) => db.execute(
            "CREATE TABLE next_run_writes (job_id INTEGER NOT NULL);
             CREATE TRIGGER next_run_written AFTER UPDATE OF next_run_at ON job_activation
             BEGIN INSERT INTO next_run_writes VALUES (new.job_id); END;",
        ),
        TestDb::Postgres(_) => db.execute(
            "CREATE TABLE next_run_writes (job_id bigint NOT NULL);
             CREATE FUNCTION next_run_written() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN INSERT INTO next_run_writes VALUES (new.job_id); RETURN NULL; END $$;
             CREATE TRIGGER next_run_written AFTER UPDATE OF next_run_at ON job_activation
             FOR EACH ROW EXECUTE FUNCTION next_run_written();",
        ),
    }
}

/// Writes of the next run of each slot-scheduled and on-demand job of [`CONF`], by name.
const WRITES: &str = "SELECT j.job_name, (SELECT count(*) FROM next_run_writes w
    WHERE w.job_id = j.job_id) FROM job j
    WHERE j.job_name IN ('every', 'hourly', 'manual') ORDER BY j.job_name";
/// Writes of any next run.
const ALL_WRITES: &str = "SELECT count(*) FROM next_run_writes";

/// The next run of each job of [`CONF`] as the catalog's views read it, by name.
fn next_runs(cat: &Catalog) -> Vec<(String, Option<i64>)> {
    cat.jobs()
        .unwrap()
        .into_iter()
        .filter(|j| ["always", "every", "hourly", "manual"].contains(&j.name.as_str()))
        .map(|j| (j.name, j.next_run_at))
        .collect()
}

fn next_of(cat: &Catalog, job: &str) -> Option<i64> {
    cat.job(job).unwrap().next_run_at
}

/// On an engine whose clock reads 00:10 at start: the hourly cron job shows 01:00 (its 00:00
/// slot fired as a catch-up), the 5-minute job 00:15, the run_always job its run's end plus its
/// 10-minute delay, the on-demand job none; the node writes them once and, at rest, not again
/// (no write per tick or per catalog check); an edit of the schedule shows within a catalog
/// check; a job disabled or pinned inactive on the node shows none, and its value is cleared.
fn each_planned_job_shows_its_next_run_and_a_node_at_rest_writes_none(ws: Workspace) {
    ws.import_conf(CONF);
    let db = ws.catalog_at();
    log_next_run_writes(&db.open());
    let mut cat = ws.open_catalog();
    let mut cfg = ws.engine_config();
    cfg.health.interval = 100;
    actix_rt::System::new().block_on(async move {
        let engine = Engine::builder()
            .config(cfg)
            .node_name("planner")
            .clock(Arc::new(FromT(Instant::now())))
            .start()
            .unwrap();
        let (seen, cat_back) = actix_rt::task::spawn_blocking(move || {
            let seen = wait_for(20.0, "every scheduled job's next run", || {
                let seen = next_runs(&cat);
                seen.iter()
                    .all(|(job, at)| job == "manual" || at.is_some())
                    .then_some(seen)
            });
            (seen, cat)
        })
        .await
        .unwrap();
        cat = cat_back;
        let always = seen[0].1.unwrap();
        assert_eq!(
            seen,
            [
                ("always".to_string(), Some(always)),
                ("every".to_string(), Some(T + 5 * MIN)),
                ("hourly".to_string(), Some(T + 50 * MIN)),
                ("manual".to_string(), None),
            ],
            "each job's next run by the injected clock"
        );
        // Its run's end by the injected clock, plus its 10 minutes.
        assert!(
            (T + 10 * MIN..T + 11 * MIN).contains(&always),
            "{}",
            always - T
        );
        // One write each for the cron and 5-minute jobs: when their first slot was decided
        // (a job due at the load is left to that decision), none for the on-demand job. (The
        // run_always job writes when its run ends; how many runs it had by now depends on how
        // the start's reloads raced its first one.)
        assert_eq!(
            db.read(|db| db.rows(WRITES)).await,
            [
                [Value::from("every"), Value::from(1)],
                [Value::from("hourly"), Value::from(1)],
                [Value::from("manual"), Value::from(0)],
            ],
            "writes of each job's next run"
        );
        // At rest (no slot due before 00:15 by the clock that read 00:10) the node ticks
        // no slot but keeps sampling its health (every 100 ms) and checking the catalog:
        // none of it writes a next run.
        let writes = || db.read(|db| db.count(ALL_WRITES));
        let settled = writes().await;
        actix_rt::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(writes().await, settled, "a node at rest writes no next run");
        // The run_always job ran once: the end of its run reached the planner that came back
        // from deciding (it ran again at once when that end was lost to the decision).
        let ran = db
            .read(|db| {
                db.count(
                    "SELECT count(*) FROM job_run r JOIN job j ON j.job_id = r.job_id
                     WHERE j.job_name = 'always' AND r.status <> 'skipped'",
                )
            })
            .await;
        assert_eq!(ran, 1, "the run_always job ran once in its 10 minutes");

        // An edit of the schedule: the node reloads it and shows the new slot at once.
        let edited = Instant::now();
        let cat = actix_rt::task::spawn_blocking(move || {
            let mut hourly = cat.job("hourly").unwrap().def;
            hourly.schedule.cron = Some("30 * * * *".into());
            cat.put_job("hourly", &hourly, "test").unwrap();
            wait_for(10.0, "the edited schedule's next run", || {
                (next_of(&cat, "hourly") == Some(T + 20 * MIN)).then_some(())
            });
            cat
        })
        .await
        .unwrap();
        let took = edited.elapsed();
        assert!(took < Duration::from_secs(3), "shown after {took:?}");

        // Disabled, or pinned inactive here: no next run, at once, and the value goes.
        let node = engine.node_name().to_string();
        actix_rt::task::spawn_blocking(move || {
            cat.set_job_enabled("every", false, "test").unwrap();
            assert_eq!(
                next_of(&cat, "every"),
                None,
                "a disabled job has no next run"
            );
            cat.pin_job(
                "hourly",
                &node,
                Some(jobvisor::model::Pin::Inactive),
                "test",
            )
            .unwrap();
            wait_for(10.0, "the inactive job's next run to go", || {
                (next_of(&cat, "hourly").is_none()).then_some(())
            });
        })
        .await
        .unwrap();
        let stored = |job: &'static str| {
            db.read(move |db| {
                db.rows(&format!(
                    "SELECT count(*) FROM job_activation a JOIN job j ON j.job_id = a.job_id
                     WHERE j.job_name = '{job}' AND a.next_run_at IS NOT NULL"
                ))[0][0]
                    .clone()
            })
        };
        for _ in 0..250 {
            if stored("hourly").await == 0 {
                break;
            }
            actix_rt::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(
            stored("hourly").await,
            Value::from(0),
            "cleared when deactivated"
        );
        assert_eq!(
            stored("every").await,
            Value::from(0),
            "cleared when disabled"
        );
        engine.shutdown(Duration::from_secs(2)).await.unwrap();
    });
}

/// A real node with a cron job, a run_always job and an on-demand job: `GET /api/v1/jobs`,
/// `GET /api/v1/jobs/{name}`, `jobs list` and `jobs show` give the cron job's next slot (the
/// next whole hour) and none for the on-demand job; `jobs edit --cron` moves it within a
/// catalog check; `jobs disable` clears it. Sorting by next run puts the soonest first.
fn next_run_at_is_served_by_the_api_and_the_cli_and_follows_edits_and_disabling(ws: Workspace) {
    ws.ok(&["init"]);
    ws.disable_seeded_jobs();
    ws.import_conf(CONF);
    let node = ws.start_node("n1");
    let (base, token) = (&node.api, node.token.clone().expect("an admin token"));
    let get = |path: &str| {
        let r = api(base, Some(&token), "GET", path, None);
        assert_eq!(r.status, 200, "{}", r.body);
        r.json()
    };
    let ms = |v: &Value| {
        v.as_str().map(|t| {
            chrono::DateTime::parse_from_rfc3339(t)
                .unwrap()
                .timestamp_millis()
        })
    };
    const HOUR: i64 = 60 * MIN;
    let listed = wait_for(20.0, "the scheduled jobs' next runs in the API", || {
        let page = get("/api/v1/jobs?sort=next_run");
        let listed: Vec<(String, Option<i64>)> = page["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| {
                (
                    j["name"].as_str().unwrap().to_string(),
                    ms(&j["next_run_at"]),
                )
            })
            .collect();
        let known = |job: &str| listed.iter().any(|(n, t)| n == job && t.is_some());
        (known("hourly") && known("every") && known("always")).then_some(listed)
    });
    let of = |job: &str| listed.iter().find(|(n, _)| n == job).unwrap().1;
    let now = jobvisor::catalog::now_ms();
    let hourly = of("hourly").unwrap();
    assert_eq!(hourly % HOUR, 0, "a whole hour");
    assert!(
        hourly > now - 5_000 && hourly <= now + HOUR,
        "the next hour"
    );
    assert!(of("every").unwrap() <= now + 5 * MIN, "{listed:?}");
    let always = of("always").unwrap();
    assert!(
        always > now && always <= now + 10 * MIN,
        "its end plus 10 min: {listed:?}"
    );
    assert_eq!(of("manual"), None);
    assert_eq!(
        get("/api/v1/jobs/hourly")["next_run_at"],
        Value::from(jobvisor::schedule::rfc3339(hourly))
    );
    // Sorted by next run: the soonest first, the jobs without one last.
    let times: Vec<Option<i64>> = listed.iter().map(|(_, t)| *t).collect();
    let scheduled = times.iter().take_while(|t| t.is_some()).count();
    assert_eq!(scheduled, 3, "{listed:?}");
    assert!(times[..scheduled].is_sorted(), "{listed:?}");
    assert!(times[scheduled..].iter().all(Option::is_none), "{listed:?}");

    let shown = |job: &str| -> Option<i64> {
        let v: Value = serde_json::from_str(&ws.ok(&["--json", "jobs", "show", job])).unwrap();
        ms(&v["next_run_at"])
    };
    assert_eq!(shown("hourly"), Some(hourly));
    assert_eq!(shown("manual"), None);
    let list = ws.ok(&["jobs", "list"]);
    assert!(list.contains("NEXT RUN"), "{list}");
    let local = chrono::DateTime::from_timestamp_millis(hourly)
        .unwrap()
        .with_timezone(&chrono::Local)
        .format("%Y-%m-%d %H:%M:%S")
        .to_string();
    let line = list.lines().find(|l| l.starts_with("hourly")).unwrap();
    assert!(line.contains(&local), "{line}");
    let text = ws.ok(&["jobs", "show", "hourly"]);
    assert!(
        text.lines()
            .any(|l| l.starts_with("# next run") && !l.trim_end().ends_with('-')),
        "{text}"
    );

    let edited = Instant::now();
    ws.ok(&["jobs", "edit", "hourly", "--cron", "30 * * * *"]);
    let moved = wait_for(5.0, "the edited schedule's next run", || {
        ms(&get("/api/v1/jobs/hourly")["next_run_at"]).filter(|t| t % HOUR == 30 * MIN)
    });
    assert!(moved <= jobvisor::catalog::now_ms() + HOUR);
    let took = edited.elapsed();
    assert!(took < Duration::from_secs(3), "shown after {took:?}");

    ws.ok(&["jobs", "disable", "hourly"]);
    assert_eq!(get("/api/v1/jobs/hourly")["next_run_at"], Value::Null);
    assert_eq!(shown("hourly"), None);
    drop(node);
}
