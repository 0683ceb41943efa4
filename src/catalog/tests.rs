//! Catalog tests: pragmas, CHECK lists against the Rust enums, migrations, upgrades, atomicity.

use rusqlite::{Connection, params};

use super::migrate::{MIGRATIONS, Migration, apply};
use super::*;
use crate::jobconf::toml_format;
use crate::model::{ActivationState, JobType, ObjectType, Pin, Role, RunStatus};
use crate::schedule::{MisfirePolicy, OverlapPolicy};

fn temp_catalog(settings: &DbSettings) -> (tempfile::TempDir, Catalog) {
    let dir = tempfile::tempdir().unwrap();
    let catalog = Catalog::open(&dir.path().join("c.db"), settings).unwrap();
    (dir, catalog)
}

fn pragma(conn: &Connection, name: &str) -> String {
    conn.query_row(&format!("PRAGMA {name}"), [], |r| {
        r.get::<_, rusqlite::types::Value>(0)
    })
    .map(|v| match v {
        rusqlite::types::Value::Integer(i) => i.to_string(),
        rusqlite::types::Value::Text(t) => t,
        other => format!("{other:?}"),
    })
    .unwrap()
}

#[test]
fn pragmas_read_back() {
    for (durability, synchronous) in [(Durability::Normal, "1"), (Durability::Full, "2")] {
        let settings = DbSettings {
            durability,
            busy_timeout: Duration::from_millis(4321),
            read_pool_size: 2,
        };
        let (_dir, mut catalog) = temp_catalog(&settings);
        let read = catalog.read();
        for conn in [&*read, catalog.writer() as &Connection] {
            assert_eq!(pragma(conn, "journal_mode"), "wal");
            assert_eq!(pragma(conn, "foreign_keys"), "1");
            // Savepoint sub-journals stay in memory (every writer operation has a savepoint).
            assert_eq!(pragma(conn, "temp_store"), "2");
            assert_eq!(pragma(conn, "busy_timeout"), "4321");
            assert_eq!(
                pragma(conn, "journal_size_limit"),
                crate::catalog::JOURNAL_SIZE_LIMIT.to_string()
            );
            assert_eq!(pragma(conn, "synchronous"), synchronous);
        }
        // Read connections keep a small page cache; the writer SQLite's default.
        assert_eq!(pragma(&read, "cache_size"), "-512");
        assert_eq!(pragma(catalog.writer(), "cache_size"), "-2000");
    }
}

/// Inserts `value` into `table.column` through `insert` and reports whether SQLite accepted it.
fn accepts(conn: &Connection, insert: &str, value: &str) -> bool {
    conn.execute("SAVEPOINT probe", []).unwrap();
    let ok = conn.execute(insert, [value]).is_ok();
    conn.execute("ROLLBACK TO probe", []).unwrap();
    conn.execute("RELEASE probe", []).unwrap();
    ok
}

#[test]
fn check_lists_match_rust_enums() {
    let (_dir, mut catalog) = temp_catalog(&DbSettings::default());
    let conn = catalog.writer();
    conn.execute_batch(
        "INSERT INTO job_processor (processor_name) VALUES ('p');
         INSERT INTO job (job_name, processor_id, job_type_id) VALUES ('j', 1, 1);
         INSERT INTO node (node_name) VALUES ('n');",
    )
    .unwrap();
    let cases: Vec<(&str, Vec<&str>)> = vec![
        (
            "INSERT INTO job_type (job_type) VALUES (?1)",
            // Every type exists already (unique), so probe the CHECK via a temp copy below.
            vec![],
        ),
        (
            "INSERT INTO job_run (job_id, status, run_after, created_at) VALUES (1, ?1, 0, 0)",
            RunStatus::ALL.iter().map(|s| s.as_str()).collect(),
        ),
        (
            "INSERT INTO object (object_name, object_type) VALUES (hex(randomblob(8)), ?1)",
            ObjectType::ALL.iter().map(|s| s.as_str()).collect(),
        ),
        (
            "INSERT INTO users (user_name, password_hash, role) VALUES (hex(randomblob(8)), 'x', ?1)",
            Role::ALL.iter().map(|s| s.as_str()).collect(),
        ),
        (
            "INSERT INTO job (job_name, processor_id, job_type_id, misfire_policy) VALUES (hex(randomblob(8)), 1, 1, ?1)",
            MisfirePolicy::ALL.iter().map(|s| s.as_str()).collect(),
        ),
        (
            "INSERT INTO job (job_name, processor_id, job_type_id, overlap_policy) VALUES (hex(randomblob(8)), 1, 1, ?1)",
            OverlapPolicy::ALL.iter().map(|s| s.as_str()).collect(),
        ),
        (
            "INSERT OR REPLACE INTO job_activation (job_id, node_id, state) VALUES (1, 1, ?1)",
            ActivationState::ALL.iter().map(|s| s.as_str()).collect(),
        ),
        (
            "INSERT OR REPLACE INTO job_activation (job_id, node_id, pinned) VALUES (1, 1, ?1)",
            Pin::ALL.iter().map(|s| s.as_str()).collect(),
        ),
        (
            "INSERT INTO decision (node_id, at, action, reason) VALUES (1, 0, ?1, 'r')",
            super::activation::decision_actions(),
        ),
        (
            "INSERT INTO decision (node_id, at, action, reason, cause) VALUES (1, 0, 'hold', 'r', ?1)",
            crate::policy::Cause::ALL
                .iter()
                .map(|c| c.as_str())
                .collect(),
        ),
    ];
    for (insert, values) in cases.iter().skip(1) {
        for v in values {
            assert!(accepts(conn, insert, v), "{insert} refused `{v}`");
        }
        assert!(
            !accepts(conn, insert, "not-a-variant"),
            "{insert} accepted a stray value"
        );
    }
    // job_type rows: the lookup holds exactly the Rust enum, and its CHECK refuses others.
    let mut stmt = conn
        .prepare("SELECT job_type FROM job_type ORDER BY job_type_id")
        .unwrap();
    let types: Vec<String> = stmt
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let expected: Vec<String> = JobType::ALL
        .iter()
        .map(|t| t.as_str().to_string())
        .collect();
    assert_eq!(types, expected);
    drop(stmt);
    assert!(!accepts(conn, cases[0].0, "cronjob"));
}

#[test]
fn migration_list_matches_the_folder() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".sql"))
        .collect();
    files.sort();
    let listed: Vec<&str> = MIGRATIONS.iter().map(|m| m.name).collect();
    assert_eq!(files, listed);
    // Numbered 1, 2, 3, … with no gap, each named after its number.
    for (i, m) in MIGRATIONS.iter().enumerate() {
        assert_eq!(m.version, i as i64 + 1);
        assert!(m.name.starts_with(&format!("{:04}_", m.version)));
    }
}

#[test]
fn migrations_apply_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.db");
    drop(Catalog::open(&path, &DbSettings::default()).unwrap());
    let mut conn = Connection::open(&path).unwrap();
    assert_eq!(migrate::migrate(&mut conn).unwrap(), 0);
    let n: i64 = conn
        .query_row("SELECT count(*) FROM schema_migration", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, MIGRATIONS.len() as i64);
}

#[test]
fn an_edited_migration_is_refused() {
    let mut conn = Connection::open_in_memory().unwrap();
    let v1 = [Migration {
        version: 1,
        name: "0001_a.sql",
        sql: "CREATE TABLE a (x);",
    }];
    apply(&mut conn, &v1).unwrap();
    let edited = [Migration {
        version: 1,
        name: "0001_a.sql",
        sql: "CREATE TABLE a (x, y);",
    }];
    let err = apply(&mut conn, &edited).unwrap_err().to_string();
    assert!(err.contains("changed after it was applied"), "{err}");
}

#[test]
fn a_failing_migration_leaves_nothing_behind() {
    let mut conn = Connection::open_in_memory().unwrap();
    let set = [
        Migration {
            version: 1,
            name: "0001_a.sql",
            sql: "CREATE TABLE a (x);",
        },
        Migration {
            version: 2,
            name: "0002_b.sql",
            sql: "CREATE TABLE b (x); SELECT nonsense FROM nowhere;",
        },
    ];
    assert!(apply(&mut conn, &set).is_err());
    let tables: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE name IN ('a', 'b', 'schema_migration')",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(tables, 0);
}

#[test]
fn upgrades_a_v1_fixture_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    let fixture = include_str!("../../tests/fixtures/catalog_v1.sql");
    Connection::open(&path)
        .unwrap()
        .execute_batch(fixture)
        .unwrap();
    let catalog = Catalog::open(&path, &DbSettings::default()).unwrap();
    let read = catalog.read();
    let versions: Vec<i64> = read
        .prepare("SELECT version FROM schema_migration ORDER BY version")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let known: Vec<i64> = MIGRATIONS.iter().map(|m| m.version).collect();
    assert_eq!(versions, known);
    // The later migration's table exists and the old data is intact.
    read.execute(
        "INSERT INTO job_activation (job_id, node_id) VALUES (1, 1)",
        [],
    )
    .unwrap();
    let job = catalog.job("hourly_report").unwrap();
    assert_eq!(job.def.priority, 7);
    assert_eq!(job.def.objects, vec!["events".to_string()]);
    assert_eq!(catalog.run(1).unwrap().elapsed, Some(249));
}

const SMALL: &str = r#"
[processor.main]
instances = 2
[object.events]
time_to_live = 60
allow_prune = true
[group.reporting]
[job.report]
type = "function"
processor = "main"
group = "reporting"
run_every = 5
objects = ["events"]
payload = { function = "report" }
"#;

#[test]
fn import_is_all_or_nothing() {
    let (_dir, catalog) = temp_catalog(&DbSettings::default());
    let mut file = toml_format::parse(SMALL).unwrap();
    // A job whose processor is missing passes no validation; force it past to hit the database.
    let mut broken = file.jobs["report"].clone();
    broken.processor = "ghost".into();
    file.jobs.insert("z_broken".into(), broken);
    assert!(catalog.import(&file, "test").is_err());
    let after = catalog.export().unwrap();
    assert!(after.processors.is_empty() && after.jobs.is_empty() && after.objects.is_empty());
    assert!(catalog.audit_log(10).unwrap().is_empty());
}

#[test]
fn import_upserts_by_name_and_reports() {
    let (_dir, catalog) = temp_catalog(&DbSettings::default());
    let file = toml_format::parse(SMALL).unwrap();
    let first = catalog.import(&file, "test").unwrap();
    assert_eq!(first.created.len(), 4);
    let mut changed = file.clone();
    changed.jobs.get_mut("report").unwrap().priority = 9;
    let second = catalog.import(&changed, "test").unwrap();
    assert_eq!(second.updated, vec!["job.report".to_string()]);
    assert_eq!(second.unchanged, 3);
    assert_eq!(catalog.job("report").unwrap().def.priority, 9);
    assert_eq!(catalog.export().unwrap(), changed);
    assert_eq!(catalog.audit_log(10).unwrap().len(), 2);
}

#[test]
fn seeding_happens_once_and_keeps_operator_edits() {
    let (_dir, catalog) = temp_catalog(&DbSettings::default());
    let seed = toml_format::parse(SMALL).unwrap();
    assert!(catalog.seed_if_new(&seed, "test").unwrap());
    catalog
        .set_job_enabled("report", false, "operator")
        .unwrap();
    assert!(!catalog.seed_if_new(&seed, "test").unwrap());
    assert!(!catalog.job("report").unwrap().def.enabled);
}

#[test]
fn audit_is_append_only() {
    let (_dir, mut catalog) = temp_catalog(&DbSettings::default());
    catalog
        .import(&toml_format::parse(SMALL).unwrap(), "test")
        .unwrap();
    let conn = catalog.writer();
    assert!(conn.execute("UPDATE audit SET actor = 'x'", []).is_err());
    assert!(conn.execute("DELETE FROM audit", []).is_err());
}

#[test]
fn remove_refuses_a_running_job() {
    let (_dir, mut catalog) = temp_catalog(&DbSettings::default());
    catalog
        .import(&toml_format::parse(SMALL).unwrap(), "test")
        .unwrap();
    let job_id = catalog.job("report").unwrap().id;
    catalog
        .writer()
        .execute(
            "INSERT INTO job_run (job_id, status, run_after, created_at) VALUES (?1, 'running', 0, 0)",
            params![job_id],
        )
        .unwrap();
    assert!(matches!(
        catalog.remove_job("report", "t"),
        Err(CatalogError::Conflict(_))
    ));
    assert!(matches!(
        catalog.remove_job("nope", "t"),
        Err(CatalogError::NotFound { .. })
    ));
}

/// Issue 18, point 4: while a node's writes are paused it claims only maintenance runs, so a
/// job an operator pins active then is `paused` (and the resume lets it go), not `active`
/// while it cannot run; a maintenance job pinned active is active.
#[test]
fn a_pin_active_while_writes_are_paused_leaves_the_job_paused_but_maintenance_active() {
    let (_dir, mut catalog) = temp_catalog(&DbSettings::default());
    let conf = r#"
[processor.main]
[group.cleanup]
maintenance = true
[job.work]
type = "function"
processor = "main"
payload = { function = "f" }
[job.prune]
type = "function"
processor = "main"
group = "cleanup"
payload = { function = "f" }
"#;
    catalog
        .import(&toml_format::parse(conf).unwrap(), "test")
        .unwrap();
    let node = activation::node_id(catalog.writer(), "n", true)
        .unwrap()
        .unwrap();
    activation::set_writes_paused(catalog.writer(), node, true).unwrap();
    for job in ["work", "prune"] {
        catalog.pin_job(job, "n", Some(Pin::Active), "t").unwrap();
    }
    let states = catalog.activation_by_job("n").unwrap();
    assert_eq!(states["work"].0, "paused", "{states:?}");
    assert_eq!(
        states["work"].2.as_deref(),
        Some("pinned active by the operator; held while writes are paused")
    );
    assert_eq!(states["prune"].0, "active", "{states:?}");
    // Writes resumed: a pin active is active at once.
    activation::set_writes_paused(catalog.writer(), node, false).unwrap();
    catalog.pin_job("work", "n", None, "t").unwrap();
    catalog
        .pin_job("work", "n", Some(Pin::Active), "t")
        .unwrap();
    assert_eq!(catalog.activation_by_job("n").unwrap()["work"].0, "active");
}

mod queue_verbs {
    use super::*;
    use crate::catalog::complete::{Completion, Outcome, Recorded};
    use crate::catalog::node;
    use crate::catalog::queue::{self, NewRun};
    use crate::catalog::{complete, loads, upkeep, waiting};

    const TWO_ON_ONE_OBJECT: &str = r#"
[processor.p]
instances = 4
[object.o]
[job.low]
type = "function"
processor = "p"
priority = 1
objects = ["o"]
payload = { function = "f" }
[job.high]
type = "function"
processor = "p"
priority = 9
objects = ["o"]
payload = { function = "f" }
[job.free]
type = "function"
processor = "p"
payload = { function = "f" }
"#;

    fn setup() -> (tempfile::TempDir, Catalog, i64, i64) {
        let (dir, mut catalog) = temp_catalog(&DbSettings::default());
        catalog
            .import(&toml_format::parse(TWO_ON_ONE_OBJECT).unwrap(), "t")
            .unwrap();
        let conn = catalog.writer();
        let node = register(conn, "n", "h", 1);
        let pid: i64 = conn
            .query_row("SELECT processor_id FROM job_processor", [], |r| r.get(0))
            .unwrap();
        (dir, catalog, node, pid)
    }

    /// Takes node name `name` for `pid` on `host`; returns the node id.
    pub(crate) fn register(conn: &Connection, name: &str, host: &str, pid: i64) -> i64 {
        let who = node::Applicant {
            name,
            host,
            pid,
            version: "v",
            lease_ttl_ms: 30_000,
        };
        match node::register_node(conn, &who, 0, 15_000, |_| true, None).unwrap() {
            node::Registration::Taken(lease) => lease.node_id,
            other => panic!("{other:?}"),
        }
    }

    fn enqueue(
        conn: &Connection,
        catalog_job: i64,
        pid: i64,
        priority: i64,
        slot: Option<i64>,
    ) -> Option<i64> {
        let run = NewRun {
            job_id: catalog_job,
            processor_id: pid,
            priority,
            scheduled_for: slot,
            run_after: 0,
            params: None,
            status: RunStatus::Queued,
            error: None,
        };
        queue::enqueue(conn, &run, 0).unwrap()
    }

    #[test]
    fn claim_orders_by_priority_and_keeps_objects_exclusive() {
        let (_dir, mut catalog, node, pid) = setup();
        let (low, high, free) = (
            catalog.job("low").unwrap().id,
            catalog.job("high").unwrap().id,
            catalog.job("free").unwrap().id,
        );
        let conn = catalog.writer();
        enqueue(conn, low, pid, 1, None);
        enqueue(conn, free, pid, 0, None);
        enqueue(conn, high, pid, 9, None);
        let claim = queue::claim(conn, pid, node, 4, 10, 1000, 100, false).unwrap();
        let names: Vec<&str> = claim.runs.iter().map(|r| &*r.job_name).collect();
        // `low` shares object `o` with `high`, which outranks it: it must wait.
        assert_eq!(names, ["high", "free"]);
        assert!(claim.blocked);
        assert_eq!(
            claim.runs.iter().map(|r| r.claim_token).collect::<Vec<_>>(),
            [100, 101]
        );
        // Once `high` completes, `low` is claimable.
        let done = Completion {
            run_id: claim.runs[0].run_id,
            job_id: claim.runs[0].job_id,
            claim_token: 100,
            outcome: Outcome::Succeeded(Json::Null),
            log: None,
            started_at: Some(10),
            finished_at: 20,
            retry_at: None,
        };
        assert_eq!(
            complete::complete(conn, node, &done).unwrap(),
            Recorded::Done(RunStatus::Succeeded, None)
        );
        let next = queue::claim(conn, pid, node, 4, 30, 1000, 200, false).unwrap();
        assert_eq!(
            next.runs.iter().map(|r| &*r.job_name).collect::<Vec<_>>(),
            ["low"]
        );
    }

    #[test]
    fn a_slot_is_enqueued_once_and_a_stale_completion_is_rejected() {
        let (_dir, mut catalog, node, pid) = setup();
        let free = catalog.job("free").unwrap().id;
        let conn = catalog.writer();
        activate(conn, node, free);
        assert!(enqueue(conn, free, pid, 0, Some(60_000)).is_some());
        assert!(
            enqueue(conn, free, pid, 0, Some(60_000)).is_none(),
            "the same slot twice"
        );
        let claim = queue::claim(conn, pid, node, 1, 60_000, 1000, 7, false).unwrap();
        let run = &claim.runs[0];
        let stale = Completion {
            run_id: run.run_id,
            job_id: run.job_id,
            claim_token: 6,
            outcome: Outcome::Succeeded(Json::Null),
            log: None,
            started_at: Some(60_000),
            finished_at: 61_000,
            retry_at: None,
        };
        assert_eq!(
            complete::complete(conn, node, &stale).unwrap(),
            Recorded::Stale
        );
        let good = Completion {
            claim_token: 7,
            ..stale.clone()
        };
        assert_eq!(
            complete::complete(conn, node, &good).unwrap(),
            Recorded::Done(RunStatus::Succeeded, None)
        );
        // Completing twice is stale too: the result is recorded once.
        assert_eq!(
            complete::complete(conn, node, &good).unwrap(),
            Recorded::Stale
        );
        let stale_count: i64 = conn
            .query_row("SELECT stale_completions FROM node", [], |r| r.get(0))
            .unwrap();
        assert_eq!(stale_count, 2);
    }

    #[test]
    fn a_run_cancelled_while_its_node_died_is_recorded_cancelled_at_recovery() {
        let (_dir, mut catalog, node, pid) = setup();
        let [free] = job_ids(&catalog, ["free"]);
        let conn = catalog.writer();
        enqueue(conn, free, pid, 0, None);
        queue::claim(conn, pid, node, 1, 0, 1000, 1, false).unwrap();
        conn.execute("UPDATE job_run SET cancel_requested = 1", [])
            .unwrap();
        let r = node::recover_node_runs(conn, node, 5).unwrap();
        assert_eq!((r.cancelled.len(), r.requeued.len()), (1, 0));
        assert_eq!(statuses(conn), ["cancelled"]);
    }

    #[test]
    fn recovery_requeues_only_this_nodes_running_runs() {
        let (_dir, mut catalog, node, pid) = setup();
        let [free, low] = job_ids(&catalog, ["free", "low"]);
        let conn = catalog.writer();
        enqueue(conn, free, pid, 0, None);
        queue::claim(conn, pid, node, 1, 0, 1000, 1, false).unwrap();
        let other = register(conn, "m", "h2", 2);
        enqueue(conn, low, pid, 0, None);
        queue::claim(conn, pid, other, 1, 0, 1000, 2, false).unwrap();
        assert_eq!(
            node::recover_node_runs(conn, node, 5)
                .unwrap()
                .requeued
                .len(),
            1
        );
        assert_eq!(statuses(conn), ["queued", "claimed"]);
        let in_progress: Vec<i64> = conn
            .prepare(
                "SELECT in_progress FROM job WHERE job_name IN ('free', 'low') ORDER BY job_name",
            )
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(in_progress, [0, 1]);
    }

    fn activate(conn: &Connection, node: i64, job: i64) {
        let active = crate::model::ActivationState::Active;
        crate::catalog::activation::set_state(conn, node, job, active, "test", 0).unwrap();
    }

    fn job_ids<const N: usize>(catalog: &Catalog, names: [&str; N]) -> [i64; N] {
        names.map(|n| catalog.job(n).unwrap().id)
    }

    /// One column of every run, by run id.
    fn run_column<T: rusqlite::types::FromSql>(conn: &Connection, column: &str) -> Vec<T> {
        conn.prepare(&format!("SELECT {column} FROM job_run ORDER BY run_id"))
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }

    fn statuses(conn: &Connection) -> Vec<String> {
        run_column(conn, "status")
    }

    /// Runs of jobs with different timeouts get their own leases while being marked together;
    /// each run gets its own token, and the candidate query is never re-prepared (a bound LIMIT
    /// would make SQLite re-prepare it on every claim).
    #[test]
    fn a_claim_marks_each_run_with_its_lease_and_token() {
        let (_dir, mut catalog, node, pid) = setup();
        let [free, low] = job_ids(&catalog, ["free", "low"]);
        let conn = catalog.writer();
        conn.execute_batch(
            "UPDATE job SET timeout = 5000 WHERE job_name = 'low';
             UPDATE job SET overlap_policy = 'allow', max_overlap = 10 WHERE job_name = 'free';",
        )
        .unwrap();
        for job in [free, low, free] {
            enqueue(conn, job, pid, 0, None);
        }
        let claim = queue::claim(conn, pid, node, 8, 100, 1000, 50, false).unwrap();
        assert_eq!(claim.runs.len(), 3);
        let mut tokens: Vec<i64> = claim.runs.iter().map(|r| r.claim_token).collect();
        tokens.sort();
        assert_eq!(tokens, [50, 51, 52]);
        for run in &claim.runs {
            // Claimed, not started: the claim time, no start time (issue 27, point 2).
            let row: (String, i64, i64, i64, Option<i64>, i64) = conn
                .query_row(
                    "SELECT status, node_id, claim_token, claimed_at, started_at, lease_until
                     FROM job_run WHERE run_id = ?1",
                    [run.run_id],
                    |r| {
                        Ok((
                            r.get(0)?,
                            r.get(1)?,
                            r.get(2)?,
                            r.get(3)?,
                            r.get(4)?,
                            r.get(5)?,
                        ))
                    },
                )
                .unwrap();
            let lease = if run.job_id == low {
                100 + 5000 + 1000
            } else {
                1100
            };
            assert_eq!(
                row,
                ("claimed".into(), node, run.claim_token, 100, None, lease)
            );
        }
        // More claims of other sizes: still the statement prepared first.
        for limit in [1, 3] {
            enqueue(conn, free, pid, 0, None);
            enqueue(conn, free, pid, 0, None);
            queue::claim(conn, pid, node, limit, 200, 1000, 100 * limit as i64, false).unwrap();
        }
        assert_eq!(queue::candidate_reprepares(conn).unwrap(), 0);
    }

    /// A claimed run reads `claimed` with no start time until its processor starts it; the
    /// start mark needs the run's current claim and leaves a run already ended as it is
    /// (issue 27, point 2: a run waiting for an instance was shown `running`, with a start).
    #[test]
    fn a_claimed_run_reads_running_only_once_marked_started() {
        let (_dir, mut catalog, node, pid) = setup();
        let [free] = job_ids(&catalog, ["free"]);
        let conn = catalog.writer();
        conn.execute_batch(
            "UPDATE job SET overlap_policy = 'allow', max_overlap = 10 WHERE job_name = 'free'",
        )
        .unwrap();
        for _ in 0..3 {
            enqueue(conn, free, pid, 0, None);
        }
        let claim = queue::claim(conn, pid, node, 8, 100, 1000, 50, false).unwrap();
        let [a, b, c] = [0, 1, 2].map(|i| claim.runs[i].clone());
        assert_eq!(statuses(conn), ["claimed", "claimed", "claimed"]);
        assert_eq!(
            run_column::<Option<i64>>(conn, "started_at"),
            [None, None, None]
        );
        // `c` ends before its start is written: its completion records both.
        let done = Completion {
            run_id: c.run_id,
            job_id: c.job_id,
            claim_token: c.claim_token,
            outcome: Outcome::Succeeded(serde_json::Value::Null),
            log: None,
            started_at: Some(130),
            finished_at: 140,
            retry_at: None,
        };
        complete::complete(conn, node, &done).unwrap();
        let start = |run: &queue::ClaimedRun, token: i64, at: i64| queue::RunStart {
            run_id: run.run_id,
            claim_token: token,
            started_at: at,
        };
        let marks = [
            start(&a, a.claim_token, 120),
            // A stale claim (the run was taken back and claimed again) marks nothing.
            start(&b, b.claim_token + 1000, 121),
            start(&c, c.claim_token, 150),
        ];
        assert_eq!(queue::mark_started(conn, &marks).unwrap(), 1);
        assert_eq!(statuses(conn), ["running", "claimed", "succeeded"]);
        assert_eq!(
            run_column::<Option<i64>>(conn, "started_at"),
            [Some(120), None, Some(130)]
        );
        // The job's runs in flight (what its overlap policy counts): claimed and running.
        assert_eq!(queue::in_flight(conn, free).unwrap().running, 2);
    }

    /// A claim costs the same whatever the backlog of a job at its overlap cap: with 6,000
    /// queued runs of the `forbid` job
    /// `free` its SQLite statements take no more steps than with 1,500, for a small claim and
    /// a large one (reading when the next run not yet due becomes due read every
    /// queued run: the queue index orders by priority first). And that next due time is still
    /// right: the earliest future run of any priority.
    #[test]
    fn a_claim_costs_the_same_whatever_the_backlog_of_a_forbid_job() {
        let steps = |backlog: usize, limit: usize| {
            let (_dir, mut catalog, node, pid) = setup();
            let free = catalog.job("free").unwrap().id;
            let conn = catalog.writer();
            for _ in 0..backlog {
                enqueue(conn, free, pid, 0, None);
            }
            for (priority, run_after) in [(5, 9_000), (0, 7_000), (-3, 8_000)] {
                let later = NewRun {
                    job_id: free,
                    processor_id: pid,
                    priority,
                    scheduled_for: None,
                    run_after,
                    params: None,
                    status: RunStatus::Queued,
                    error: None,
                };
                queue::enqueue(conn, &later, 0).unwrap();
            }
            let before = queue::claim_steps(conn).unwrap();
            // The first claim takes one run; the second finds the job at its cap.
            let first = queue::claim(conn, pid, node, limit, 100, 1000, 1, false).unwrap();
            let second = queue::claim(conn, pid, node, limit, 100, 1000, 10_000, false).unwrap();
            assert_eq!((first.runs.len(), second.runs.len()), (1, 0));
            assert!(second.blocked);
            assert_eq!(
                (first.next_due, second.next_due),
                (Some(7_000), Some(7_000))
            );
            queue::claim_steps(conn).unwrap() - before
        };
        // A small claim, and one as large as a processor's claims grow to on a fast drain
        // (it once stepped over eight times its size in runs of the blocked job).
        for (limit, small, large) in [(4, 1_500, 6_000), (2048, 1_500, 6_000)] {
            let (a, b) = (steps(small, limit), steps(large, limit));
            assert!(
                b <= a + a / 5,
                "steps of two claims of {limit}: {a} with {small} queued runs, {b} with {large}"
            );
        }
    }

    /// The sweep of overdue queued runs leaves its index of deadlines to the runs that may
    /// still need one: a run that ended loses its deadline once it passed, a queued run past
    /// it ends `expired` (and loses it too), a claimed run keeps it (it may go back to the
    /// queue), and no claim or completion writes the index.
    #[test]
    fn the_sweep_of_deadlines_forgets_the_runs_that_ended() {
        let (_dir, mut catalog, node, pid) = setup();
        let free = catalog.job("free").unwrap().id;
        let conn: &Connection = catalog.writer();
        let [ended, claimed, queued] = [(); 3].map(|_| enqueue(conn, free, pid, 0, None).unwrap());
        waiting::set_start_within(conn, &[ended, claimed, queued], 0, Some(100)).unwrap();
        let indexed = || -> i64 {
            conn.query_row(
                "SELECT count(*) FROM job_run INDEXED BY job_run_start_by_idx
                 WHERE start_by IS NOT NULL",
                [],
                |r| r.get(0),
            )
            .unwrap()
        };
        let first = queue::claim(conn, pid, node, 1, 1, 1000, 1, false).unwrap();
        assert_eq!(first.runs[0].run_id, ended);
        assert_eq!(first.runs[0].start_by, Some(100));
        let done = Completion {
            run_id: ended,
            job_id: free,
            claim_token: first.runs[0].claim_token,
            outcome: Outcome::Succeeded(serde_json::json!({})),
            log: None,
            started_at: Some(2),
            finished_at: 3,
            retry_at: None,
        };
        complete::complete_all(conn, node, &[done]).unwrap();
        let second = queue::claim(conn, pid, node, 1, 4, 1000, 2, false).unwrap();
        assert_eq!(second.runs[0].run_id, claimed);
        // Before the deadline nothing changes.
        assert!(waiting::expire_overdue(conn, 50).unwrap().is_empty());
        assert_eq!(indexed(), 3);
        assert_eq!(waiting::expire_overdue(conn, 200).unwrap(), ["free"]);
        let start_by = |run: i64| -> (String, Option<i64>) {
            conn.query_row(
                "SELECT status, start_by FROM job_run WHERE run_id = ?1",
                [run],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap()
        };
        assert_eq!(start_by(ended), ("succeeded".into(), None));
        assert_eq!(start_by(claimed), ("claimed".into(), Some(100)));
        assert_eq!(start_by(queued), ("expired".into(), None));
        assert_eq!(indexed(), 1);
    }

    /// A job at its overlap cap does not hold back the runs queued just behind its backlog: a
    /// claim looks through the first `PAST_BLOCKED` runs of the queue past the runs it cannot
    /// take, in queue order, and no further; either way its cost stays the same.
    #[test]
    fn a_claim_reaches_past_a_blocked_backlog_up_to_its_bound() {
        let claim = |backlog: usize| {
            let (_dir, mut catalog, node, pid) = setup();
            let [free, low, high] = ["free", "low", "high"].map(|j| catalog.job(j).unwrap().id);
            let conn = catalog.writer();
            for _ in 0..backlog {
                enqueue(conn, free, pid, 5, None);
            }
            // `low` and `high` write a common object: one of them at a time, the higher first.
            enqueue(conn, low, pid, 1, None);
            let high_run = enqueue(conn, high, pid, 2, None).unwrap();
            let before = queue::claim_steps(conn).unwrap();
            let claim = queue::claim(conn, pid, node, 8, 100, 1000, 1, false).unwrap();
            let steps = queue::claim_steps(conn).unwrap() - before;
            assert!(claim.blocked);
            let runs: Vec<(String, i64)> = claim
                .runs
                .iter()
                .map(|r| (r.job_name.to_string(), r.run_id))
                .collect();
            (runs, high_run, steps)
        };
        let window = crate::lease::PAST_BLOCKED;
        let (runs, high_run, near) = claim(window - 10);
        assert_eq!(
            runs,
            [("free".to_string(), 1), ("high".to_string(), high_run)]
        );
        let (runs, _, far) = claim(4_000);
        assert_eq!(runs, [("free".to_string(), 1)]);
        assert!(far <= near + near / 5, "steps: {near} and {far}");
        assert!(
            queue::SELECT_PAST_BLOCKED.contains(&format!("LIMIT {window})")),
            "the statement's window is PAST_BLOCKED"
        );
    }

    /// A pause of a job, its group or its processor, fleet-wide or on this node, keeps its runs
    /// queued; one on another node does not; resuming lets them be claimed.
    #[test]
    fn a_claim_leaves_paused_work_queued_until_resumed() {
        use crate::catalog::pause::{PauseRow, PauseScope};
        let (_dir, mut catalog, node, pid) = setup();
        let [free, low] = ["free", "low"].map(|j| catalog.job(j).unwrap().id);
        for _ in 0..100 {
            enqueue(catalog.writer(), free, pid, 5, None);
        }
        enqueue(catalog.writer(), low, pid, 1, None);
        let pause = |scope, target: &str, node: Option<&str>| PauseRow {
            scope,
            target: target.to_string(),
            node: node.map(str::to_string),
            paused_by: "op".to_string(),
            paused_at: 0,
            reason: Some("maintenance".to_string()),
        };
        let claimed = |catalog: &mut Catalog, token| -> Vec<String> {
            let c = queue::claim(catalog.writer(), pid, node, 4, 100, 1000, token, false).unwrap();
            let names = c.runs.iter().map(|r| r.job_name.to_string()).collect();
            // Put them back, for the next look.
            catalog
                .writer()
                .execute(
                    "UPDATE job_run SET status = 'queued', node_id = NULL, claim_token = NULL
                     WHERE status = 'claimed'",
                    [],
                )
                .unwrap();
            catalog
                .writer()
                .execute("UPDATE job SET in_progress = 0", [])
                .unwrap();
            names
        };
        assert_eq!(claimed(&mut catalog, 1), ["free", "low"]);
        catalog
            .pause(PauseRow {
                paused_at: 10,
                ..pause(PauseScope::Job, "free", None)
            })
            .unwrap();
        assert_eq!(claimed(&mut catalog, 10), ["low"], "past 100 paused runs");
        catalog
            .pause(PauseRow {
                paused_at: 11,
                ..pause(PauseScope::Processor, "p", Some("other"))
            })
            .unwrap();
        assert_eq!(claimed(&mut catalog, 20), ["low"], "another node's pause");
        catalog
            .pause(PauseRow {
                paused_at: 12,
                ..pause(PauseScope::Processor, "p", Some("n"))
            })
            .unwrap();
        assert!(
            claimed(&mut catalog, 30).is_empty(),
            "this node's processor"
        );
        assert!(
            catalog
                .resume(PauseScope::Processor, "p", Some("n"), "op", 13)
                .unwrap()
        );
        assert!(
            !catalog
                .resume(PauseScope::Processor, "p", Some("n"), "op", 14)
                .unwrap()
        );
        assert!(
            catalog
                .resume(PauseScope::Job, "free", None, "op", 15)
                .unwrap()
        );
        assert_eq!(claimed(&mut catalog, 40), ["free", "low"]);
        let listed = catalog.pauses().unwrap();
        assert_eq!(
            listed,
            [PauseRow {
                paused_at: 11,
                ..pause(PauseScope::Processor, "p", Some("other"))
            }]
        );
        let missing = catalog.pause(PauseRow {
            paused_at: 16,
            ..pause(PauseScope::Group, "nope", None)
        });
        assert!(
            matches!(
                missing,
                Err(CatalogError::NotFound {
                    kind: "job group",
                    ..
                })
            ),
            "{missing:?}"
        );
    }

    /// Pruning deletes runs that finished before the cutoff, and keeps queued and running runs,
    /// runs that finished later, and a failed run whose retry is still pending.
    #[test]
    fn prune_deletes_only_runs_finished_before_the_cutoff() {
        let (_dir, mut catalog, _node, pid) = setup();
        let free = catalog.job("free").unwrap().id;
        let conn = catalog.writer();
        // (status, created_at, finished_at, retry_of)
        let runs: [(&str, i64, Option<i64>, Option<i64>); 6] = [
            ("succeeded", 10, Some(20), None),
            ("running", 30, None, None),
            ("failed", 40, Some(50), None),
            ("succeeded", 60, Some(150), None),
            ("queued", 70, None, Some(3)),
            ("succeeded", 200, Some(210), None),
        ];
        for (status, created, finished, retry_of) in runs {
            conn.execute(
                "INSERT INTO job_run (job_id, processor_id, status, run_after, created_at,
                    finished_at, retry_of) VALUES (?1, ?2, ?3, 0, ?4, ?5, ?6)",
                params![free, pid, status, created, finished, retry_of],
            )
            .unwrap();
        }
        assert_eq!(upkeep::prune_runs(conn, 100).unwrap(), 1);
        let ids = |conn: &Connection| run_column::<i64>(conn, "run_id");
        assert_eq!(ids(conn), [2, 3, 4, 5, 6]);
        // The retry ends: it and the run it retried go.
        conn.execute(
            "UPDATE job_run SET status = 'succeeded', finished_at = 80 WHERE run_id = 5",
            [],
        )
        .unwrap();
        assert_eq!(upkeep::prune_runs(conn, 100).unwrap(), 2);
        assert_eq!(ids(conn), [2, 4, 6]);
        assert_eq!(upkeep::prune_runs(conn, 5).unwrap(), 0);
    }

    /// The scheduler's per-job counts of runs in flight (running anywhere, slot runs queued: an
    /// on-demand run waiting does not hold a slot back), read the same way at load and at each
    /// decision; skipping a deactivated job's queued slots leaves its on-demand run.
    #[test]
    fn queued_runs_per_job_are_counted_and_skipped() {
        let (_dir, mut catalog, node, pid) = setup();
        let [free, low] = job_ids(&catalog, ["free", "low"]);
        let conn = catalog.writer();
        for job in [free, low] {
            activate(conn, node, job);
        }
        enqueue(conn, free, pid, 0, Some(60_000));
        enqueue(conn, free, pid, 0, Some(120_000));
        enqueue(conn, free, pid, 0, None);
        enqueue(conn, low, pid, 0, Some(60_000));
        let claim = queue::claim(conn, pid, node, 1, 0, 1000, 1, false).unwrap();
        assert_eq!(claim.runs[0].job_id, free);
        let counts: Vec<(i64, i64, i64)> = loads::load_scheduled(&*conn, node)
            .unwrap()
            .iter()
            .filter(|j| j.job_id == free || j.job_id == low)
            .map(|j| (j.job_id, j.running, j.queued))
            .collect();
        assert_eq!(counts.len(), 2);
        assert!(counts.contains(&(free, 1, 1)), "{counts:?}");
        assert!(counts.contains(&(low, 0, 1)), "{counts:?}");
        let f = queue::in_flight(conn, free).unwrap();
        assert_eq!((f.running, f.queued_slots), (1, 1));
        let l = queue::in_flight(conn, low).unwrap();
        assert_eq!((l.running, l.queued_slots), (0, 1));
        // Only the job's queued slots are skipped: not its on-demand run, not another job's.
        assert_eq!(queue::skip_queued_slots(&*conn, free, "off", 5).unwrap(), 1);
        assert_eq!(statuses(conn), ["claimed", "skipped", "queued", "queued"]);
    }

    fn applicant(pid: i64, host: &str) -> node::Applicant<'_> {
        node::Applicant {
            name: "n",
            host,
            pid,
            version: "v",
            lease_ttl_ms: 30_000,
        }
    }

    /// A live holder with a fresh heartbeat keeps its name; a holder whose process is gone (on
    /// this host) loses it at once, whatever its heartbeat says; each take bumps the generation.
    #[test]
    fn a_live_holder_keeps_its_node_name_and_a_dead_one_loses_it_at_once() {
        let (_dir, mut catalog, _node, _pid) = setup();
        let conn = catalog.writer();
        let held = node::register_node(conn, &applicant(99, "h"), 1000, 15_000, |_| true, None);
        let node::Registration::Held(holder) = held.unwrap() else {
            panic!("a fresh, live holder keeps the name")
        };
        assert_eq!(
            (holder.pid, holder.heartbeat_at, holder.generation),
            (1, 0, 1)
        );
        let took = node::register_node(conn, &applicant(99, "h"), 1000, 15_000, |_| false, None);
        assert!(
            matches!(took.unwrap(), node::Registration::Taken(l) if l.generation == 2),
            "a dead holder's name is taken at once, under the next generation"
        );
    }

    /// Issue 12, defect 5: a holder whose heartbeat is stale but whose process exists (stopped,
    /// or on another host) is watched first; the name is taken only if its heartbeat did not
    /// move meanwhile.
    #[test]
    fn a_stale_holder_that_may_be_alive_is_watched_before_its_name_is_taken() {
        /// The holder `setup` registered.
        const FIRST: node::NodeLease = node::NodeLease {
            node_id: 1,
            generation: 1,
        };
        let (_dir, mut catalog, _node, _pid) = setup();
        let conn = catalog.writer();
        for host in ["h", "elsewhere"] {
            let first =
                node::register_node(conn, &applicant(99, host), 60_000, 15_000, |_| true, None);
            let node::Registration::Watch(seen) = first.unwrap() else {
                panic!("a stale holder that may be alive is watched ({host})")
            };
            // It moved while watched: alive, refused.
            node::heartbeat(conn, FIRST, 1, 30_000).unwrap();
            let again = node::register_node(
                conn,
                &applicant(99, host),
                66_000,
                15_000,
                |_| true,
                Some(&seen),
            );
            assert!(
                matches!(again.unwrap(), node::Registration::Held(_)),
                "{host}"
            );
            // Reset the heartbeat for the next host.
            node::heartbeat(conn, FIRST, 0, 30_000).unwrap();
        }
        let first = node::register_node(conn, &applicant(99, "h"), 60_000, 15_000, |_| true, None);
        let node::Registration::Watch(seen) = first.unwrap() else {
            panic!("watched")
        };
        let again = node::register_node(
            conn,
            &applicant(99, "h"),
            66_000,
            15_000,
            |_| true,
            Some(&seen),
        );
        assert!(matches!(again.unwrap(), node::Registration::Taken(l) if l.generation == 2));
    }

    /// A process that lost its name changes nothing: its heartbeat, its claims (the fence is
    /// their first statement) and its release all carry the old generation.
    #[test]
    fn a_process_that_lost_its_name_is_fenced() {
        let (_dir, mut catalog, node_id, _pid) = setup();
        let conn = catalog.writer();
        let old = node::NodeLease {
            node_id,
            generation: 1,
        };
        assert!(node::heartbeat(conn, old, 10, 30_000).unwrap());
        node::check_fence(conn, old).unwrap();
        let took = node::register_node(conn, &applicant(99, "h"), 20, 15_000, |_| false, None);
        let node::Registration::Taken(new) = took.unwrap() else {
            panic!("taken")
        };
        assert!(!node::heartbeat(conn, old, 30, 30_000).unwrap());
        assert!(matches!(
            node::check_fence(conn, old),
            Err(CatalogError::Fenced { generation: 1, .. })
        ));
        node::release_node(&*conn, old).unwrap();
        let holder = node::holder(&mut *conn, node_id).unwrap().unwrap();
        assert_eq!(
            (holder.pid, holder.heartbeat_at, holder.generation),
            (99, 20, 2)
        );
        assert!(node::heartbeat(conn, new, 40, 30_000).unwrap());
    }

    /// Issue 12, defect 1: recovery blames a node death only on runs marked executing (a
    /// suspect marks itself before it starts); every blamed death is an attempt, and after
    /// min(max_attempts, 3) of them the run is quarantined with the reason. A run that was only
    /// claimed beside it is requeued, never blamed.
    #[test]
    fn recovery_quarantines_a_run_the_node_died_executing_after_its_attempts() {
        let (_dir, mut catalog, node_id, pid) = setup();
        let [free, low] = job_ids(&catalog, ["free", "low"]);
        let conn = catalog.writer();
        conn.execute("UPDATE job SET max_attempts = 5", []).unwrap();
        enqueue(conn, free, pid, 0, None);
        enqueue(conn, low, pid, 0, None);
        let claim = queue::claim(conn, pid, node_id, 2, 0, 1000, 1, false).unwrap();
        assert_eq!(claim.runs.len(), 2);
        assert!(claim.runs.iter().all(|r| !r.suspect));
        // First death: nothing was marked, nothing is blamed; both become suspects.
        let r = node::recover_node_runs(conn, node_id, 5).unwrap();
        assert_eq!((r.requeued.len(), r.quarantined.len()), (2, 0));
        for round in 1..=3 {
            let claim = queue::claim(conn, pid, node_id, 2, 0, 1000, 10 * round, false).unwrap();
            assert!(claim.runs.iter().all(|r| r.suspect), "round {round}");
            let poison = claim.runs.iter().find(|r| r.job_id == free).unwrap();
            assert!(node::mark_executing(conn, poison.run_id, poison.claim_token, 0).unwrap());
            let r = node::recover_node_runs(conn, node_id, 100 + round).unwrap();
            if round < 3 {
                assert_eq!(r.requeued.len(), 2, "round {round}");
            } else {
                assert_eq!(r.quarantined, [(poison.run_id, 3)]);
                assert_eq!(r.requeued.len(), 1);
            }
        }
        let rows: Vec<(String, i64, i64, Option<String>)> = conn
            .prepare("SELECT status, attempt, crashes, error FROM job_run ORDER BY run_id")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(rows[0].0, "dead");
        assert_eq!(
            (rows[0].1, rows[0].2),
            (3, 3),
            "each blamed death was an attempt"
        );
        assert_eq!(
            rows[0].3.as_deref(),
            Some(
                "quarantined: the node died 4 times while it held this run, 3 of them while it ran"
            )
        );
        assert_eq!(rows[1], ("queued".into(), 1, 0, None), "the bystander");
        // With max_attempts = 1 the first blamed death quarantines.
        conn.execute("UPDATE job SET max_attempts = 1", []).unwrap();
        let claim = queue::claim(conn, pid, node_id, 1, 0, 1000, 100, false).unwrap();
        let run = &claim.runs[0];
        assert!(node::mark_executing(conn, run.run_id, run.claim_token, 0).unwrap());
        let r = node::recover_node_runs(conn, node_id, 200).unwrap();
        assert_eq!(r.quarantined, [(run.run_id, 1)]);
    }
}

/// Audit rows hold each change's fields before and after, with secrets as `***`: an import
/// that sets and then changes a remote processor's password never writes the password into
/// the audit log.
#[test]
fn audit_rows_hold_before_and_after_with_secrets_hidden() {
    let (_dir, catalog) = temp_catalog(&DbSettings::default());
    let conf = |pw: &str, instances: u32| {
        format!(
            "[processor.remote]\ninstances = {instances}\nip_address = \"10.0.0.2\"\nport = 8080\nrpc_user = \"a\"\nrpc_password = \"{pw}\"\n"
        )
    };
    for (pw, n) in [("hunter2", 1), ("correct-horse", 2)] {
        let file = crate::jobconf::toml_format::parse(&conf(pw, n)).unwrap();
        catalog.import(&file, "alice").unwrap();
    }
    let rows = catalog.audit_log(10).unwrap();
    let text = format!("{rows:?}");
    assert!(
        !text.contains("hunter2") && !text.contains("correct-horse"),
        "{text}"
    );
    let last: Json = serde_json::from_str(rows[0].detail.as_deref().unwrap()).unwrap();
    let fields = last["changes"][0]["fields"].as_array().unwrap();
    let get = |name: &str| fields.iter().find(|f| f["field"] == name).unwrap().clone();
    assert_eq!(get("instances")["before"], "1");
    assert_eq!(get("instances")["after"], "2");
    assert_eq!(get("rpc_password")["before"], "***");
    assert_eq!(get("rpc_password")["after"], "***");
    let first: Json = serde_json::from_str(rows[1].detail.as_deref().unwrap()).unwrap();
    assert_eq!(first["changes"][0]["change"], "created");
    assert!(first.to_string().contains("10.0.0.2"), "{first}");
}

/// Issue 27, point 2b: an import described every entry it created and then searched that list
/// for each created entry to build its audit row, which keeps 200 of them: 192,000 jobs took
/// 714 s and 1.7 GB. Only the entries the audit row keeps are described, each found by name;
/// counted, not timed (the old code rendered every created entry: 1,201 here).
#[test]
fn regression_an_import_describes_only_the_entries_its_audit_row_keeps() {
    use super::audit::AUDIT_MAX_ENTRIES;
    use crate::jobconf::merge::RENDERED;
    let (_dir, catalog) = temp_catalog(&DbSettings::default());
    let mut file = toml_format::parse("[processor.main]\n").unwrap();
    let n = 6 * AUDIT_MAX_ENTRIES;
    for i in 0..n {
        let mut job = crate::jobconf::JobDef::new(JobType::Function, "main");
        job.payload = serde_json::json!({"function": "debug.noop"})
            .as_object()
            .unwrap()
            .clone()
            .into();
        job.priority = i as i64;
        file.jobs.insert(format!("job{i:05}"), job);
    }
    RENDERED.with(|r| r.set(0));
    let report = catalog.import(&file, "t").unwrap();
    let rendered = RENDERED.with(|r| r.get());
    assert_eq!(report.created.len(), n + 1);
    assert!(
        rendered <= AUDIT_MAX_ENTRIES,
        "{rendered} entries rendered for an audit row of {AUDIT_MAX_ENTRIES}"
    );
    let row = &catalog.audit_log(1).unwrap()[0];
    let detail: Json = serde_json::from_str(row.detail.as_deref().unwrap()).unwrap();
    let kept = detail["changes"].as_array().unwrap();
    assert_eq!(kept.len(), AUDIT_MAX_ENTRIES);
    assert_eq!(detail["changes_left_out"], n + 1 - AUDIT_MAX_ENTRIES);
    assert_eq!(detail["created"], n + 1);
    // A kept entry is shown with its values, as before.
    let job = kept.iter().find(|c| c["name"] == "job00007").unwrap();
    assert_eq!(job["change"], "created");
    assert!(
        job["fields"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["field"] == "priority" && f["after"] == "7"),
        "{job}"
    );
}
