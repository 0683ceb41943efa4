//! The PostgreSQL catalog (`catalog::postgres`) against a real server: each test creates a
//! database of its own and drops it after. The server is `JOBVISOR_TEST_PG` (an admin URL;
//! `.ci/test` starts PostgreSQL and sets it, and then every test here fails when it cannot
//! connect), else `postgres://postgres@127.0.0.1:5432/postgres`; when that is unset and not
//! reachable, the tests say so on stderr and pass without running.
//!
//! Nodes here are threads, each with its own connection and node name: the claims, leases,
//! fencing and reconnects are the catalog's, which is what these tests are about.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use jobvisor::catalog::CatalogError;
use jobvisor::catalog::complete::{Completion, Outcome, Recorded};
use jobvisor::catalog::node::{NodeLease, Registration};
use jobvisor::catalog::postgres::queue::PgClaim;
use jobvisor::catalog::postgres::{PgCatalog, PgSettings};
use jobvisor::catalog::queue::NewRun;
use jobvisor::model::RunStatus;
use postgres::{Client, NoTls};

pub use crate::support::PgDb;

/// One processor `p` and the jobs named, each `(name, overlap, max_overlap, max_attempts)`;
/// returns (processor id, job ids).
fn define(db: &PgDb, jobs: &[(&str, &str, i64, i64)]) -> (i64, Vec<i64>) {
    drop(db.catalog("schema"));
    let mut c = db.client();
    let p: i64 = c
        .query_one(
            "INSERT INTO job_processor (processor_name, instances) VALUES ('p', 8) RETURNING processor_id",
            &[],
        )
        .unwrap()
        .get(0);
    let ids = jobs
        .iter()
        .map(|(name, overlap, max_overlap, attempts)| {
            c.query_one(
                "INSERT INTO job (job_name, processor_id, job_type_id, overlap_policy, max_overlap,
                     max_attempts, backoff_base) VALUES ($1, $2, 1, $3, $4, $5, 0) RETURNING job_id",
                &[name, &p, overlap, max_overlap, attempts],
            )
            .unwrap()
            .get(0)
        })
        .collect();
    (p, ids)
}

fn run_of(job_id: i64, processor_id: i64, slot: Option<i64>) -> NewRun {
    NewRun {
        job_id,
        processor_id,
        priority: 0,
        scheduled_for: slot,
        run_after: 0,
        params: None,
        status: RunStatus::Queued,
        error: None,
    }
}

/// An object `name` that `jobs` write.
fn written_by(db: &PgDb, name: &str, jobs: &[i64]) {
    let mut c = db.client();
    let obj: i64 = c
        .query_one(
            "INSERT INTO object (object_name) VALUES ($1) RETURNING object_id",
            &[&name],
        )
        .unwrap()
        .get(0);
    for j in jobs {
        c.execute(
            "INSERT INTO job_object (job_id, object_id) VALUES ($1, $2)",
            &[j, &obj],
        )
        .unwrap();
    }
}

fn now_ms() -> i64 {
    jobvisor::catalog::now_ms()
}

fn register(cat: &PgCatalog, name: &str, ttl: i64) -> NodeLease {
    match cat
        .register_node(name.into(), "test-host".into(), 1, ttl, now_ms(), |_| true)
        .unwrap()
        .0
    {
        Registration::Taken(lease) => lease,
        other => panic!("node {name}: {other:?}"),
    }
}

fn claim_req(processor_id: i64, lease: NodeLease, limit: usize) -> PgClaim {
    PgClaim {
        processor_id,
        lease,
        limit,
        now: now_ms(),
        lease_ms: 30_000,
        writes_paused: false,
    }
}

fn success(run: &jobvisor::catalog::queue::ClaimedRun) -> Completion {
    let now = now_ms();
    Completion {
        run_id: run.run_id,
        job_id: run.job_id,
        claim_token: run.claim_token,
        outcome: Outcome::Succeeded(serde_json::json!({"ok": true})),
        log: None,
        started_at: Some(now),
        finished_at: now,
        retry_at: None,
    }
}

fn count(db: &PgDb, sql: &str) -> i64 {
    db.client().query_one(sql, &[]).unwrap().get(0)
}

/// Nodes (threads) draining `p`'s queue until `total` runs were executed across them; returns
/// each run's executions.
fn drain(db: &PgDb, p: i64, nodes: usize, total: usize, batch: usize) -> HashMap<i64, usize> {
    let executed = Arc::new(Mutex::new(HashMap::<i64, usize>::new()));
    let done = Arc::new(AtomicI64::new(0));
    let handles: Vec<_> = (0..nodes)
        .map(|n| {
            let cat = db.catalog(&format!("node{n}"));
            let executed = executed.clone();
            let done = done.clone();
            thread::spawn(move || {
                let lease = register(&cat, &format!("node{n}"), 30_000);
                // A run left claimed by an attempt nobody heard of (a commit unanswered,
                // then its undo aborted) would keep the drain from ending: fail instead.
                let deadline = std::time::Instant::now() + Duration::from_secs(120);
                while (done.load(Ordering::SeqCst) as usize) < total {
                    assert!(
                        std::time::Instant::now() < deadline,
                        "{} of {total} runs recorded after 120 s",
                        done.load(Ordering::SeqCst)
                    );
                    let claim = cat.claim(claim_req(p, lease, batch)).unwrap();
                    if claim.runs.is_empty() {
                        thread::sleep(Duration::from_millis(2));
                        continue;
                    }
                    {
                        let mut e = executed.lock().unwrap();
                        for r in &claim.runs {
                            *e.entry(r.run_id).or_default() += 1;
                        }
                    }
                    let recorded = cat
                        .complete(lease.node_id, claim.runs.iter().map(success).collect())
                        .unwrap();
                    assert!(
                        recorded
                            .iter()
                            .all(|r| *r == Recorded::Done(RunStatus::Succeeded, None)),
                        "{recorded:?}"
                    );
                    done.fetch_add(claim.runs.len() as i64, Ordering::SeqCst);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    Arc::try_unwrap(executed).unwrap().into_inner().unwrap()
}

#[test]
fn pg_migrations_apply_once_and_refuse_edited_or_newer_schemas() {
    let Some(db) = PgDb::create("migrations") else {
        return;
    };
    // Three nodes starting at once: the schema is made once.
    let handles: Vec<_> = (0..3)
        .map(|n| {
            let url = db.url.clone();
            thread::spawn(move || PgCatalog::open(PgSettings::new(url), &format!("m{n}")).unwrap())
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(
        count(&db, "SELECT count(*) FROM schema_migration"),
        jobvisor::catalog::postgres::migrate::MIGRATIONS.len() as i64
    );
    assert_eq!(count(&db, "SELECT count(*) FROM job_type"), 7);
    let applied: String = db
        .client()
        .query_one(
            "SELECT checksum FROM schema_migration WHERE version = 1",
            &[],
        )
        .unwrap()
        .get(0);
    db.client()
        .execute(
            "UPDATE schema_migration SET checksum = 'edited' WHERE version = 1",
            &[],
        )
        .unwrap();
    let e = PgCatalog::open(PgSettings::new(&db.url), "edited").unwrap_err();
    assert!(
        e.to_string().contains("was changed after it was applied"),
        "{e}"
    );
    db.client()
        .execute(
            "UPDATE schema_migration SET checksum = $1 WHERE version = 1",
            &[&applied],
        )
        .unwrap();
    db.client()
        .execute(
            "INSERT INTO schema_migration (version, name, checksum) VALUES (99, '0099_x.sql', 'x')",
            &[],
        )
        .unwrap();
    let e = PgCatalog::open(PgSettings::new(&db.url), "newer").unwrap_err();
    assert!(e.to_string().contains("newer than this build knows"), "{e}");
}

#[test]
fn pg_three_nodes_drain_20000_runs_each_once() {
    let Some(db) = PgDb::create("drain") else {
        return;
    };
    let (p, jobs) = define(&db, &[("noop", "allow", 1_000_000, 1)]);
    let cat = db.catalog("setup");
    let runs: Vec<NewRun> = (0..20_000).map(|_| run_of(jobs[0], p, None)).collect();
    let ids = cat.enqueue(runs, now_ms()).unwrap();
    assert!(ids.iter().all(Option::is_some));
    let executed = drain(&db, p, 3, 20_000, 256);
    assert_eq!(executed.len(), 20_000, "every run executed");
    assert!(executed.values().all(|n| *n == 1), "no run executed twice");
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM job_run WHERE status = 'succeeded'"
        ),
        20_000
    );
    assert_eq!(
        count(&db, "SELECT sum(in_progress)::bigint FROM job_progress"),
        0
    );
    assert_eq!(
        count(&db, "SELECT sum(stale_completions)::bigint FROM node"),
        0
    );
    // Every node took part.
    assert_eq!(count(&db, "SELECT count(*) FROM node"), 3);
}

#[test]
fn pg_forbid_and_objects_hold_across_nodes() {
    let Some(db) = PgDb::create("forbid") else {
        return;
    };
    // `solo` forbids overlap; `w1` and `w2` allow it but write one object; `trio` allows 3.
    let (p, jobs) = define(
        &db,
        &[
            ("solo", "forbid", 1, 1),
            ("w1", "allow", 100, 1),
            ("w2", "allow", 100, 1),
            ("trio", "allow", 3, 1),
        ],
    );
    written_by(&db, "ledger", &jobs[1..3]);
    let cat = db.catalog("setup");
    let mut runs = Vec::new();
    for j in &jobs {
        runs.extend((0..40).map(|_| run_of(*j, p, None)));
    }
    cat.enqueue(runs, now_ms()).unwrap();
    // Per group (solo; the object's writers; trio): how many execute now, and the most seen.
    let running = Arc::new([AtomicI64::new(0), AtomicI64::new(0), AtomicI64::new(0)]);
    let most = Arc::new([AtomicI64::new(0), AtomicI64::new(0), AtomicI64::new(0)]);
    let done = Arc::new(AtomicI64::new(0));
    let group = {
        let jobs = jobs.clone();
        move |job_id: i64| [0, 1, 1, 2][jobs.iter().position(|j| *j == job_id).unwrap()]
    };
    let handles: Vec<_> = (0..3)
        .map(|n| {
            let cat = db.catalog(&format!("n{n}"));
            let (running, most, done) = (running.clone(), most.clone(), done.clone());
            let group = group.clone();
            thread::spawn(move || {
                let lease = register(&cat, &format!("n{n}"), 30_000);
                while done.load(Ordering::SeqCst) < 160 {
                    let claim = cat.claim(claim_req(p, lease, 8)).unwrap();
                    for r in &claim.runs {
                        let g = group(r.job_id);
                        let now = running[g].fetch_add(1, Ordering::SeqCst) + 1;
                        most[g].fetch_max(now, Ordering::SeqCst);
                    }
                    thread::sleep(Duration::from_millis(3));
                    for r in &claim.runs {
                        running[group(r.job_id)].fetch_sub(1, Ordering::SeqCst);
                    }
                    cat.complete(lease.node_id, claim.runs.iter().map(success).collect())
                        .unwrap();
                    done.fetch_add(claim.runs.len() as i64, Ordering::SeqCst);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(
        most[0].load(Ordering::SeqCst),
        1,
        "a forbid job ran twice at once"
    );
    assert_eq!(
        most[1].load(Ordering::SeqCst),
        1,
        "two writers of one object ran at once"
    );
    let trio = most[2].load(Ordering::SeqCst);
    assert!(trio <= 3, "a job capped at 3 ran {trio} at once");
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM job_run WHERE status = 'succeeded'"
        ),
        160
    );
    assert_eq!(
        count(&db, "SELECT sum(in_progress)::bigint FROM job_progress"),
        0
    );
}

#[test]
fn pg_each_slot_is_queued_once_across_nodes() {
    let Some(db) = PgDb::create("slots") else {
        return;
    };
    let (p, jobs) = define(&db, &[("tick", "forbid", 1, 1)]);
    // Three nodes each try to queue the same 120 per-second slots, in batches of 10.
    let won = Arc::new(AtomicI64::new(0));
    let handles: Vec<_> = (0..3)
        .map(|n| {
            let cat = db.catalog(&format!("s{n}"));
            let won = won.clone();
            let (job, p) = (jobs[0], p);
            thread::spawn(move || {
                for chunk in (0..120).collect::<Vec<i64>>().chunks(10) {
                    let runs = chunk
                        .iter()
                        .map(|s| run_of(job, p, Some(s * 1000)))
                        .collect();
                    let ids = cat.enqueue(runs, now_ms()).unwrap();
                    won.fetch_add(ids.iter().flatten().count() as i64, Ordering::SeqCst);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(won.load(Ordering::SeqCst), 120);
    assert_eq!(count(&db, "SELECT count(*) FROM job_run"), 120);
    assert_eq!(
        count(&db, "SELECT count(DISTINCT scheduled_for) FROM job_run"),
        120
    );
}

#[test]
fn pg_a_stopped_node_is_fenced_and_its_late_completions_are_rejected() {
    let Some(db) = PgDb::create("fence") else {
        return;
    };
    let (p, jobs) = define(&db, &[("work", "allow", 100, 1)]);
    let (a, b) = (db.catalog("a"), db.catalog("b"));
    a.enqueue(
        (0..10).map(|_| run_of(jobs[0], p, None)).collect(),
        now_ms(),
    )
    .unwrap();
    // Node a claims everything under a 300 ms TTL and then stops (no heartbeat).
    let la = register(&a, "a", 300);
    let lb = register(&b, "b", 30_000);
    let mut req = claim_req(p, la, 100);
    req.lease_ms = 300;
    let taken = a.claim(req).unwrap();
    assert_eq!(taken.runs.len(), 10);
    assert!(b.claim(claim_req(p, lb, 100)).unwrap().runs.is_empty());
    thread::sleep(Duration::from_millis(400));
    let swept = b.sweep(lb, now_ms()).unwrap();
    assert_eq!(swept.len(), 1);
    assert_eq!(swept[0].name, "a");
    assert_eq!(swept[0].fenced, Some(la.generation));
    assert_eq!(swept[0].recovery.requeued.len(), 10);
    // A second sweep finds nothing left.
    assert!(b.sweep(lb, now_ms()).unwrap().is_empty());
    // b completes them; a's late completions are stale, counted, and change nothing.
    let again = b.claim(claim_req(p, lb, 100)).unwrap();
    assert_eq!(again.runs.len(), 10);
    let done = b
        .complete(lb.node_id, again.runs.iter().map(success).collect())
        .unwrap();
    assert!(
        done.iter()
            .all(|r| matches!(r, Recorded::Done(RunStatus::Succeeded, _)))
    );
    let late = a
        .complete(la.node_id, taken.runs.iter().map(success).collect())
        .unwrap();
    assert!(late.iter().all(|r| *r == Recorded::Stale), "{late:?}");
    assert_eq!(a.stale_completions(la.node_id).unwrap(), 10);
    // And a, fenced, claims nothing and its heartbeat says it lost the name.
    assert!(matches!(
        a.claim(claim_req(p, la, 10)),
        Err(CatalogError::Fenced { .. })
    ));
    assert!(a.heartbeat(la, now_ms()).unwrap().is_none());
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM job_run WHERE status = 'succeeded'"
        ),
        10
    );
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM audit WHERE action = 'node.sweep' AND subject = 'a'"
        ),
        1
    );
}

#[test]
fn pg_heartbeats_keep_leases_and_a_run_that_kills_its_node_is_quarantined() {
    let Some(db) = PgDb::create("quarantine") else {
        return;
    };
    let (p, jobs) = define(&db, &[("crashy", "forbid", 1, 5)]);
    let cat = db.catalog("x");
    cat.enqueue(vec![run_of(jobs[0], p, None)], now_ms())
        .unwrap();
    let sweeper = register(&cat, "sweeper", 60_000);
    // Three nodes in turn claim the run, mark it executing, and die.
    for round in 1..=3 {
        let lease = register(&cat, &format!("dier{round}"), 200);
        let mut req = claim_req(p, lease, 1);
        req.lease_ms = 200;
        let claim = cat.claim(req).unwrap();
        assert_eq!(claim.runs.len(), 1, "round {round}");
        assert_eq!(claim.runs[0].suspect, round > 1);
        assert!(
            cat.mark_executing(claim.runs[0].run_id, claim.runs[0].claim_token, 0)
                .unwrap()
        );
        // A heartbeat renews the lease (its node's): the sweep right after leaves it.
        assert!(cat.heartbeat(lease, now_ms()).unwrap().is_some());
        assert!(
            cat.sweep(sweeper, now_ms())
                .unwrap()
                .iter()
                .all(|s| s.recovery.is_empty())
        );
        thread::sleep(Duration::from_millis(300));
        let swept = cat.sweep(sweeper, now_ms()).unwrap();
        let recovery = &swept[0].recovery;
        if round < 3 {
            assert_eq!(recovery.requeued.len(), 1, "round {round}");
        } else {
            assert_eq!(recovery.quarantined, vec![(claim.runs[0].run_id, 3)]);
        }
    }
    let mut c = db.client();
    let row = c
        .query_one("SELECT status, attempt, crashes FROM job_run", &[])
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "dead");
    assert_eq!(
        row.get::<_, i64>(1),
        3,
        "each death during its execution is an attempt"
    );
    assert_eq!(row.get::<_, i64>(2), 3);
    assert_eq!(count(&db, "SELECT in_progress FROM job_progress"), 0);
}

#[test]
fn pg_a_run_is_leased_by_its_nodes_heartbeat_or_its_claim_whichever_ends_later() {
    let Some(db) = PgDb::create("leases") else {
        return;
    };
    let (p, jobs) = define(&db, &[("short", "allow", 10, 1), ("long", "allow", 10, 1)]);
    db.client()
        .execute("UPDATE job SET timeout = 1500 WHERE job_name = 'long'", &[])
        .unwrap();
    let cat = db.catalog("l");
    let sweeper = register(&cat, "sweeper", 60_000);
    let node = register(&cat, "n", 300);
    cat.enqueue(
        vec![run_of(jobs[0], p, None), run_of(jobs[1], p, None)],
        now_ms(),
    )
    .unwrap();
    let mut req = claim_req(p, node, 2);
    req.lease_ms = 300;
    assert_eq!(cat.claim(req).unwrap().runs.len(), 2);
    let leases = || -> Vec<i64> {
        db.client()
            .query("SELECT lease_until FROM job_run ORDER BY run_id", &[])
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect()
    };
    let claimed = leases();
    // Heartbeats past the short run's claim lease keep both: they renew the node's row, not
    // the runs'.
    for _ in 0..4 {
        thread::sleep(Duration::from_millis(150));
        assert!(cat.heartbeat(node, now_ms()).unwrap().is_some());
        let swept = cat.sweep(sweeper, now_ms()).unwrap();
        assert!(swept.is_empty(), "{swept:?}");
    }
    assert_eq!(leases(), claimed, "no heartbeat rewrote a run");
    // Dead: the run whose claim lease ended goes back; the one within its timeout stays.
    thread::sleep(Duration::from_millis(400));
    let swept = cat.sweep(sweeper, now_ms()).unwrap();
    assert_eq!(swept.len(), 1);
    assert_eq!(swept[0].recovery.requeued.len(), 1);
    assert_eq!(
        count(&db, "SELECT job_id FROM job_run WHERE status = 'claimed'"),
        jobs[1]
    );
    // And once its claim's lease ends too, the next sweep takes it back.
    thread::sleep(Duration::from_millis(
        (claimed[1] - now_ms()).max(0) as u64 + 50,
    ));
    let swept = cat.sweep(sweeper, now_ms()).unwrap();
    assert_eq!(swept.len(), 1);
    assert_eq!(swept[0].recovery.requeued.len(), 1);
    assert_eq!(
        count(&db, "SELECT count(*) FROM job_run WHERE status = 'queued'"),
        2
    );
    assert_eq!(
        count(
            &db,
            "SELECT in_progress FROM job_progress ORDER BY job_id LIMIT 1"
        ),
        0
    );
}

#[test]
fn pg_failures_retry_with_their_attempts_and_end_dead() {
    let Some(db) = PgDb::create("retry") else {
        return;
    };
    let (p, jobs) = define(&db, &[("flaky", "forbid", 1, 3)]);
    let cat = db.catalog("r");
    let lease = register(&cat, "r", 30_000);
    cat.enqueue(vec![run_of(jobs[0], p, None)], now_ms())
        .unwrap();
    let mut statuses = Vec::new();
    for attempt in 1..=3 {
        let claim = cat.claim(claim_req(p, lease, 1)).unwrap();
        assert_eq!(claim.runs.len(), 1);
        assert_eq!(claim.runs[0].attempt, attempt);
        let mut c = success(&claim.runs[0]);
        c.outcome = Outcome::Failed("boom".into());
        c.retry_at = Some(0);
        statuses.push(cat.complete(lease.node_id, vec![c]).unwrap()[0]);
    }
    assert!(matches!(
        statuses[0],
        Recorded::Done(RunStatus::Failed, Some(_))
    ));
    assert!(matches!(
        statuses[1],
        Recorded::Done(RunStatus::Failed, Some(_))
    ));
    assert_eq!(statuses[2], Recorded::Done(RunStatus::Dead, None));
    assert!(cat.claim(claim_req(p, lease, 1)).unwrap().runs.is_empty());
    assert_eq!(
        count(
            &db,
            "SELECT count(DISTINCT coalesce(retry_of, run_id)) FROM job_run"
        ),
        1,
        "every retry retries the first attempt"
    );
    let last: String = db
        .client()
        .query_one("SELECT last_response FROM job_progress", &[])
        .unwrap()
        .get(0);
    assert_eq!(last, "boom");
}

#[test]
fn pg_the_server_going_away_loses_no_run_and_records_none_twice() {
    let Some(db) = PgDb::create("reconnect") else {
        return;
    };
    let (p, jobs) = define(&db, &[("noop", "allow", 1_000_000, 1)]);
    let cat = db.catalog("setup");
    cat.enqueue(
        (0..5_000).map(|_| run_of(jobs[0], p, None)).collect(),
        now_ms(),
    )
    .unwrap();
    // Every 100 ms, the server ends every connection to the database (as a restart does).
    let stop = Arc::new(AtomicBool::new(false));
    let killed = Arc::new(AtomicI64::new(0));
    let killer = {
        let (url, name, stop, killed) = (
            db.admin.clone(),
            db.name.clone(),
            stop.clone(),
            killed.clone(),
        );
        thread::spawn(move || {
            let mut admin = Client::connect(&url, NoTls).unwrap();
            while !stop.load(Ordering::SeqCst) {
                thread::sleep(Duration::from_millis(100));
                let n = admin
                    .execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                         WHERE datname = $1 AND pid <> pg_backend_pid()",
                        &[&name],
                    )
                    .unwrap();
                killed.fetch_add(n as i64, Ordering::SeqCst);
            }
        })
    };
    let executed = drain(&db, p, 2, 5_000, 8);
    stop.store(true, Ordering::SeqCst);
    killer.join().unwrap();
    let killed = killed.load(Ordering::SeqCst);
    eprintln!("connections ended by the server meanwhile: {killed}");
    assert!(killed >= 4, "only {killed} connections were ended");
    assert_eq!(executed.len(), 5_000, "every run executed");
    assert!(executed.values().all(|n| *n == 1), "no run executed twice");
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM job_run WHERE status = 'succeeded'"
        ),
        5_000
    );
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM job_run WHERE status IN ('claimed', 'running')"
        ),
        0
    );
    assert_eq!(
        count(&db, "SELECT sum(in_progress)::bigint FROM job_progress"),
        0
    );
}

#[test]
fn pg_listeners_hear_queued_runs_and_changed_definitions() {
    let Some(db) = PgDb::create("listen") else {
        return;
    };
    let (p, jobs) = define(&db, &[("noop", "forbid", 1, 1)]);
    let heard = Arc::new(Mutex::new(Vec::<(String, String)>::new()));
    let listening = Arc::new(AtomicBool::new(false));
    let handle = {
        let (heard, listening) = (heard.clone(), listening.clone());
        jobvisor::catalog::postgres::listen(PgSettings::new(&db.url), "t", move |ch, payload| {
            if ch == "listening" {
                listening.store(true, Ordering::SeqCst);
            }
            let mut h = heard.lock().unwrap();
            if ch != "idle" && ch != "listening" {
                h.push((ch.to_string(), payload.to_string()));
            }
            h.len() < 2
        })
        .unwrap()
    };
    // `listening` says the LISTEN is in place.
    while !listening.load(Ordering::SeqCst) {
        thread::sleep(Duration::from_millis(20));
    }
    let cat = db.catalog("q");
    cat.enqueue(vec![run_of(jobs[0], p, None)], now_ms())
        .unwrap();
    db.client()
        .execute("UPDATE job SET priority = 5", &[])
        .unwrap();
    handle.join().unwrap();
    let heard = heard.lock().unwrap();
    assert_eq!(heard[0], ("jobvisor_queue".to_string(), p.to_string()));
    assert_eq!(heard[1].0, "jobvisor_catalog");
}

#[test]
fn pg_a_blocked_job_at_the_head_of_the_queue_does_not_starve_the_rest() {
    let Some(db) = PgDb::create("head") else {
        return;
    };
    let (p, jobs) = define(&db, &[("solo", "forbid", 1, 1), ("many", "allow", 100, 1)]);
    let cat = db.catalog("h");
    let lease = register(&cat, "h", 30_000);
    // 100 runs of the forbid job first in the queue (higher priority), then 20 others.
    let mut runs: Vec<NewRun> = (0..100)
        .map(|_| NewRun {
            priority: 10,
            ..run_of(jobs[0], p, None)
        })
        .collect();
    runs.extend((0..20).map(|_| run_of(jobs[1], p, None)));
    cat.enqueue(runs, now_ms()).unwrap();
    let claim = cat.claim(claim_req(p, lease, 8)).unwrap();
    assert!(claim.blocked);
    let solo = claim.runs.iter().filter(|r| r.job_id == jobs[0]).count();
    assert_eq!(
        (solo, claim.runs.len()),
        (1, 8),
        "one of the forbid job, then the others"
    );
    assert_eq!(claim.runs[0].job_id, jobs[0], "priority order");
    let tokens: std::collections::BTreeSet<i64> =
        claim.runs.iter().map(|r| r.claim_token).collect();
    assert_eq!(tokens.len(), 8, "each run its own token");
}

/// A claim on a `forbid` job's backlog takes one run and says when the earliest run not yet
/// due becomes due, whatever its priority (issue 27, point 2c: that time is now read with a
/// seek per priority, and a later pass looks past the blocked job among a bounded window of
/// the queue, not its whole backlog).
#[test]
fn pg_a_claim_on_a_forbid_backlog_takes_one_and_says_when_the_next_is_due() {
    let Some(db) = PgDb::create("backlog") else {
        return;
    };
    let (p, jobs) = define(&db, &[("solo", "forbid", 1, 1)]);
    let cat = db.catalog("b");
    let lease = register(&cat, "b", 30_000);
    let now = now_ms();
    let mut runs: Vec<NewRun> = (0..3000).map(|_| run_of(jobs[0], p, None)).collect();
    for (priority, after) in [(5, 90_000), (0, 70_000), (-3, 80_000)] {
        runs.push(NewRun {
            priority,
            run_after: now + after,
            ..run_of(jobs[0], p, None)
        });
    }
    cat.enqueue(runs, now).unwrap();
    let first = cat.claim(claim_req(p, lease, 4)).unwrap();
    let second = cat.claim(claim_req(p, lease, 4)).unwrap();
    assert_eq!((first.runs.len(), second.runs.len()), (1, 0));
    assert!(first.blocked && second.blocked);
    assert_eq!(first.next_due, Some(now + 70_000));
    assert_eq!(second.next_due, Some(now + 70_000));
}

/// A claim applies a job's cap to what runs on every node as of its commit: here another
/// node's claim of the job's 3 slots is in flight (its transaction holds the job row) when this
/// claim reads the job, so this claim first takes runs of it, then — once its grant gets the
/// row, after the other commits — puts them back, and the job never runs more than its cap.
#[test]
fn pg_a_claim_gives_back_what_a_concurrent_claim_took_of_a_cap() {
    let Some(db) = PgDb::create("grant") else {
        return;
    };
    let (p, jobs) = define(&db, &[("trio", "allow", 3, 1)]);
    let cat = db.catalog("n1");
    cat.enqueue((0..6).map(|_| run_of(jobs[0], p, None)).collect(), now_ms())
        .unwrap();
    let lease = register(&cat, "n1", 30_000);
    // The other node's claim: its 3 runs begun, not yet committed.
    let mut other = db.client();
    let mut tx = other.transaction().unwrap();
    tx.execute(
        "UPDATE job SET runs_begun = runs_begun + 3 WHERE job_id = $1",
        &[&jobs[0]],
    )
    .unwrap();
    let claimer = thread::spawn(move || cat.claim(claim_req(p, lease, 8)).unwrap());
    // This claim waits for the job row's lock, in its grant: it has read the job already.
    let mut watch = db.client();
    let waiting = |watch: &mut Client| -> i64 {
        watch
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
                 AND wait_event_type = 'Lock' AND query LIKE '%runs_begun%'",
                &[],
            )
            .unwrap()
            .get(0)
    };
    for _ in 0..500 {
        if waiting(&mut watch) > 0 {
            break;
        }
        thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(waiting(&mut watch), 1, "the claim waits in its grant");
    tx.commit().unwrap();
    let claim = claimer.join().unwrap();
    assert!(claim.runs.is_empty(), "{:?}", claim.runs);
    assert!(claim.blocked);
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM job_run WHERE status = 'queued' AND node_id IS NULL AND claim_token IS NULL"
        ),
        6,
        "every run put back as it was"
    );
    assert_eq!(count(&db, "SELECT in_progress FROM job_progress"), 3);
}

/// A catalog file with every kind of entry and most fields set.
const DEFINITIONS: &str = r#"
[processor.main]
instances = 2
max_instances = 6
[processor.edge]
nodes = ["n1", "n2"]
[processor.remote]
ip_address = "10.0.0.7"
port = 7979
rpc_user = "svc"
rpc_password = "s3cret"

[object.ledger]
conn_string = "data/ledger.db"
key_field = "id"
time_to_live = 86400
allow_prune = true

[group.upkeep]
maintenance = true
description = "housekeeping"

[job.nightly]
type = "function"
processor = "main"
group = "upkeep"
cron = "0 3 * * *"
timezone = "Europe/Paris"
misfire_policy = "skip"
max_attempts = 4
backoff_base = 500
objects = ["ledger"]
payload = { function = "debug.noop", args = { n = 1 } }

[job.fetch]
type = "url"
processor = "edge"
run_every = 5
overlap_policy = "allow"
max_overlap = 3
priority = 7
timeout = 30000
description = "polls"
payload = { url = "http://127.0.0.1:1/x" }

[job.off]
type = "function"
processor = "remote"
enabled = false
required = true
run_every = 60
stretch_max = 4
payload = { function = "debug.noop" }
"#;

/// An import on PostgreSQL stores what the same import stores on SQLite: the exports are
/// equal, the reports too; again it changes nothing; an edit is reported field by field; and
/// an import that fails part-way (a job on a processor nobody defined) changes nothing and
/// writes no audit row.
#[test]
fn pg_an_import_stores_what_sqlite_stores_and_a_failed_one_nothing() {
    use jobvisor::catalog::{Catalog, DbSettings};
    use jobvisor::jobconf::toml_format;
    let Some(db) = PgDb::create("import") else {
        return;
    };
    let file = toml_format::parse(DEFINITIONS).unwrap();
    let pg = db.catalog("cli");
    let dir = tempfile::tempdir().unwrap();
    let lite = Catalog::open(&dir.path().join("c.db"), &DbSettings::default()).unwrap();
    // The SQLite catalog starts seeded; PostgreSQL's empty: compare what this import adds.
    let seeded = lite.export().unwrap();
    let on_pg = pg.import(&file, "test").unwrap();
    let on_lite = lite.import(&file, "test").unwrap();
    assert_eq!(on_pg.created, on_lite.created);
    assert_eq!(on_pg.created.len(), 8, "{:?}", on_pg.created);
    let mut expected = lite.export().unwrap();
    expected
        .processors
        .retain(|k, _| !seeded.processors.contains_key(k) || file.processors.contains_key(k));
    expected
        .objects
        .retain(|k, _| !seeded.objects.contains_key(k) || file.objects.contains_key(k));
    expected
        .groups
        .retain(|k, _| !seeded.groups.contains_key(k) || file.groups.contains_key(k));
    expected
        .jobs
        .retain(|k, _| !seeded.jobs.contains_key(k) || file.jobs.contains_key(k));
    assert_eq!(pg.export().unwrap(), expected);
    assert_eq!(
        pg.export().unwrap(),
        file,
        "what was imported is what is exported"
    );

    let again = pg.import(&file, "test").unwrap();
    assert_eq!(
        (again.created.len(), again.updated.len(), again.unchanged),
        (0, 0, 8)
    );
    let mut edited = file.clone();
    edited.jobs.get_mut("fetch").unwrap().max_overlap = 5;
    let report = pg.import(&edited, "test").unwrap();
    assert_eq!(report.updated, vec!["job.fetch".to_string()]);
    let jobs = pg.jobs().unwrap();
    let fetch = jobs.iter().find(|j| j.name == "fetch").unwrap();
    assert_eq!((fetch.def.max_overlap, fetch.in_progress), (5, 0));
    assert_eq!(
        count(&db, "SELECT count(*) FROM audit WHERE action = 'import'"),
        3
    );

    let mut broken = edited.clone();
    broken.processors.get_mut("main").unwrap().instances = 3;
    let mut orphan = broken.jobs["off"].clone();
    orphan.processor = "nobody".into();
    broken.jobs.insert("zz_orphan".into(), orphan);
    assert!(pg.import(&broken, "test").is_err());
    assert_eq!(
        pg.export().unwrap(),
        edited,
        "a failed import changes nothing"
    );
    assert_eq!(
        count(&db, "SELECT count(*) FROM audit WHERE action = 'import'"),
        3
    );
}

/// Work sharing on PostgreSQL (`catalog::sharing`): an empty claim asks the live node with the
/// longest unstarted tail of the processor for half of it (at most what the asker can start);
/// that node's heartbeat takes the request once; the runs it gives back are claimed by the
/// asker.
#[test]
fn pg_an_idle_node_asks_the_busiest_for_its_unstarted_tail() {
    let Some(db) = PgDb::create("share") else {
        return;
    };
    // Processor `p` runs 8 at once on each node.
    let (p, jobs) = define(&db, &[("many", "allow", 1000, 1)]);
    let busy = db.catalog("n1");
    let idle = db.catalog("n2");
    busy.enqueue(
        (0..20).map(|_| run_of(jobs[0], p, None)).collect(),
        now_ms(),
    )
    .unwrap();
    let (l1, l2) = (register(&busy, "n1", 30_000), register(&idle, "n2", 30_000));
    let held = busy.claim(claim_req(p, l1, 20)).unwrap();
    assert_eq!(held.runs.len(), 20);
    // n2 finds nothing: it asks n1 (20 held, 8 can run: a tail of 12) for 6; asked again
    // while that is pending, nothing changes.
    for _ in 0..2 {
        assert!(idle.claim(claim_req(p, l2, 8)).unwrap().runs.is_empty());
    }
    let asked = busy.heartbeat(l1, now_ms()).unwrap().unwrap();
    assert_eq!(asked.len(), 1);
    assert_eq!((asked[0].processor_id, asked[0].runs), (p, 6));
    assert_eq!(idle.heartbeat(l2, now_ms()).unwrap(), Some(vec![]));
    assert_eq!(
        busy.heartbeat(l1, now_ms()).unwrap(),
        Some(vec![]),
        "taken once"
    );
    // n1 gives back its last 6, unstarted; n2 claims them.
    let back: Vec<Completion> = held.runs[14..]
        .iter()
        .map(|r| Completion {
            outcome: Outcome::Interrupted,
            ..success(r)
        })
        .collect();
    let recorded = busy.complete(l1.node_id, back).unwrap();
    assert!(
        recorded
            .iter()
            .all(|r| *r == Recorded::Done(RunStatus::Queued, None))
    );
    let taken = idle.claim(claim_req(p, l2, 8)).unwrap();
    let mut ids: Vec<i64> = taken.runs.iter().map(|r| r.run_id).collect();
    ids.sort_unstable();
    let mut expected: Vec<i64> = held.runs[14..].iter().map(|r| r.run_id).collect();
    expected.sort_unstable();
    assert_eq!(ids, expected);
    assert_eq!(
        count(&db, "SELECT count(*) FROM job_run WHERE attempt <> 1"),
        0,
        "a run given back keeps its attempt"
    );
}

/// The due jobs' planners as the Scheduler builds them from `scheduled`'s rows.
fn due_planners(cat: &PgCatalog, node_id: i64) -> Vec<jobvisor::catalog::slots::DueJob> {
    use jobvisor::schedule::{JobPlanner, Schedule};
    cat.scheduled(node_id)
        .unwrap()
        .into_iter()
        .map(|job| {
            let schedule = Schedule::parse(&job.spec, chrono_tz::UTC).unwrap();
            let planner = JobPlanner::restore(schedule, job.policy(), job.history());
            jobvisor::catalog::slots::DueJob {
                job_id: job.job_id,
                name: job.name,
                processor_id: job.processor_id,
                priority: job.priority,
                planner,
                shown: None,
            }
        })
        .collect()
}

/// The scheduler's verbs on PostgreSQL: a node schedules only the jobs active on it; two nodes
/// deciding the same due slots at once queue each slot once between them (a slot the other
/// took is handed back, not fired again), the catch-up of a job that missed 10 minutes under
/// `misfire_policy = all`; under `once`, a second job's missed slots are one run and one
/// skipped row that says how many.
#[test]
fn pg_two_nodes_deciding_the_same_due_slots_queue_each_once() {
    let Some(db) = PgDb::create("slots") else {
        return;
    };
    let (_, jobs) = define(
        &db,
        &[("every", "allow", 1000, 1), ("once", "allow", 1000, 1)],
    );
    let nodes: Vec<PgCatalog> = (1..=2).map(|i| db.catalog(&format!("n{i}"))).collect();
    let leases: Vec<NodeLease> = nodes
        .iter()
        .enumerate()
        .map(|(i, c)| register(c, &format!("n{}", i + 1), 30_000))
        .collect();
    let mut c = db.client();
    // Both run every minute since ten and a half minutes ago; `every` catches every slot up.
    let created = now_ms() / 1000 - 630;
    c.execute(
        "UPDATE job SET run_every = 1, create_date = $1, misfire_window = 3600000,
             max_catchup = 100, misfire_policy = CASE job_name WHEN 'every' THEN 'all'
             ELSE 'once' END",
        &[&created],
    )
    .unwrap();
    assert!(
        due_planners(&nodes[0], leases[0].node_id).is_empty(),
        "active nowhere yet"
    );
    for l in &leases {
        c.execute(
            "INSERT INTO job_activation (job_id, node_id, state) SELECT job_id, $1, 'active'
             FROM job",
            &[&l.node_id],
        )
        .unwrap();
    }
    let now = now_ms();
    let fired: Vec<usize> = thread::scope(|s| {
        let handles: Vec<_> = nodes
            .iter()
            .zip(&leases)
            .map(|(cat, l)| {
                s.spawn(move || {
                    let due = due_planners(cat, l.node_id);
                    assert_eq!(due.len(), 2);
                    cat.decide_due(l.node_id, due, now).unwrap().fired.len()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let queued = |job: i64| -> i64 {
        db.client()
            .query_one(
                "SELECT count(*) FROM job_run WHERE job_id = $1 AND status = 'queued'",
                &[&job],
            )
            .unwrap()
            .get(0)
    };
    let every = queued(jobs[0]);
    assert!((10..=11).contains(&every), "{every} slots of `every`");
    assert_eq!(queued(jobs[1]), 1, "`once` runs its missed slots once");
    assert_eq!(
        fired.iter().sum::<usize>() as i64,
        every + 1,
        "each run fired by one node: {fired:?}"
    );
    let skipped: String = db
        .client()
        .query_one(
            "SELECT error FROM job_run WHERE job_id = $1 AND status = 'skipped'",
            &[&jobs[1]],
        )
        .unwrap()
        .get(0);
    assert!(skipped.contains("slots"), "{skipped}");
    // Deciding again now fires nothing more: every slot is in the queue.
    let again = nodes[1].decide_due(
        leases[1].node_id,
        due_planners(&nodes[1], leases[1].node_id),
        now,
    );
    assert!(again.unwrap().fired.is_empty());
}

/// Activation per node on PostgreSQL, by the SQLite catalog's functions: a node settles the
/// states of the jobs it may run (each change with its decision row), a policy step stores its
/// samples and carries out its decisions — a job deactivated (its queued slot skipped), a
/// processor's instances, writes paused (the data-writing job held) — and none of it touches
/// another node's rows.
#[test]
fn pg_a_nodes_policy_settles_and_sheds_only_its_own_jobs() {
    use jobvisor::catalog::activation::DecisionContext;
    use jobvisor::catalog::upkeep::StatSample;
    use jobvisor::catalog::verbs::{ActivationChange, DecidedStep};
    use jobvisor::model::ActivationState;
    use jobvisor::policy::{Action, Cause, Decision};
    let Some(db) = PgDb::create("activation") else {
        return;
    };
    let (p, jobs) = define(&db, &[("report", "allow", 1, 1), ("ingest", "allow", 1, 1)]);
    written_by(&db, "ledger", &jobs[1..]);
    let (a, b) = (db.catalog("a"), db.catalog("b"));
    let (la, lb) = (register(&a, "a", 30_000), register(&b, "b", 30_000));
    let seen = a.job_activations(la.node_id).unwrap();
    assert_eq!(seen.len(), 2);
    assert!(seen.iter().all(|j| j.state.is_none()));
    assert_eq!(
        seen.iter().map(|j| j.writes_data).collect::<Vec<_>>(),
        vec![false, true]
    );
    let now = now_ms();
    for (cat, node) in [(&a, la.node_id), (&b, lb.node_id)] {
        let changes = cat
            .settle_activations(node, now, |jobs| {
                jobs.iter()
                    .map(|j| ActivationChange {
                        job_id: j.job_id,
                        name: j.name.clone(),
                        state: ActivationState::Active,
                        reason: "the minimum".into(),
                        decision: Some("minimum"),
                    })
                    .collect()
            })
            .unwrap();
        assert_eq!(changes.len(), 2);
    }
    // A queued slot of `report`, which node a's policy then deactivates.
    a.enqueue(vec![run_of(jobs[0], p, Some(now))], now).unwrap();
    let decision = |action, reason: &str| Decision {
        at: now + 1,
        action,
        reason: reason.into(),
        evidence: Vec::new(),
        cause: Cause::Health,
        jobs: Vec::new(),
    };
    let cx = DecisionContext {
        jobs: [
            (jobs[0], "report".to_string()),
            (jobs[1], "ingest".to_string()),
        ]
        .into(),
        processors: [(p, "p".to_string())].into(),
        instances: [(p, 3)].into(),
        ..DecisionContext::default()
    };
    let pause = Decision {
        jobs: vec![jobs[1]],
        ..decision(Action::PauseWrites, "disk critical")
    };
    let step = DecidedStep {
        decisions: vec![
            decision(Action::Deactivate { job_id: jobs[0] }, "cpu strained"),
            decision(Action::AddInstance { processor_id: p }, "idle cpu"),
            pause,
        ],
        cx,
    };
    let sample = StatSample {
        stat_type: "device.cpu_used".into(),
        unit: "%",
        subject: None,
        value: 96.5,
    };
    a.record_policy_step(la.node_id, now + 1, vec![sample], vec![step])
        .unwrap();
    let states = |cat: &PgCatalog, node: i64| -> Vec<Option<ActivationState>> {
        cat.job_activations(node)
            .unwrap()
            .iter()
            .map(|j| j.state)
            .collect()
    };
    assert_eq!(
        states(&a, la.node_id),
        vec![
            Some(ActivationState::Standby),
            Some(ActivationState::Paused)
        ]
    );
    assert_eq!(
        states(&b, lb.node_id),
        vec![Some(ActivationState::Active), Some(ActivationState::Active)],
        "node b's jobs are its own"
    );
    assert_eq!(
        count(&db, "SELECT count(*) FROM job_run WHERE status = 'skipped'"),
        1
    );
    assert_eq!(
        count(
            &db,
            "SELECT instances FROM processor_activation WHERE node_id = (SELECT node_id FROM node WHERE node_name = 'a')"
        ),
        3
    );
    assert_eq!(count(&db, "SELECT sum(writes_paused)::bigint FROM node"), 1);
    // 2 + 2 settled, 3 of the step.
    assert_eq!(count(&db, "SELECT count(*) FROM decision"), 7);
    let cpu: f64 = db
        .client()
        .query_one("SELECT value FROM stat", &[])
        .unwrap()
        .get(0);
    assert_eq!(cpu, 96.5);
    a.set_writes_paused(la.node_id, false).unwrap();
    assert_eq!(count(&db, "SELECT sum(writes_paused)::bigint FROM node"), 0);
}

/// What a node loads on PostgreSQL: the processors it may start (those naming no nodes, and
/// those naming it), the objects jobs write, the generation (bumped by a definition's change),
/// and its runs an operator asked to cancel.
#[test]
fn pg_a_node_loads_its_processors_objects_generation_and_cancels() {
    use jobvisor::jobconf::toml_format;
    let Some(db) = PgDb::create("loads") else {
        return;
    };
    let cat = db.catalog("n1");
    cat.import(&toml_format::parse(DEFINITIONS).unwrap(), "test")
        .unwrap();
    let (l1, l2) = (register(&cat, "n1", 30_000), register(&cat, "n3", 30_000));
    let names = |node: i64| -> Vec<String> {
        cat.local_processors(node)
            .unwrap()
            .into_iter()
            .map(|p| p.name)
            .collect()
    };
    // `edge` names n1 and n2; `remote` calls another node.
    assert_eq!(names(l1.node_id), ["edge", "main", "remote"]);
    assert_eq!(names(l2.node_id), ["main", "remote"]);
    let remote: Vec<bool> = cat
        .local_processors(l2.node_id)
        .unwrap()
        .iter()
        .map(|p| p.remote)
        .collect();
    assert_eq!(remote, [false, true]);
    let objects: Vec<String> = cat
        .written_objects()
        .unwrap()
        .into_iter()
        .map(|o| o.name)
        .collect();
    assert_eq!(objects, ["ledger"]);
    let before = cat.generation().unwrap();
    let mut edited = toml_format::parse(DEFINITIONS).unwrap();
    edited.jobs.get_mut("fetch").unwrap().priority = 9;
    cat.import(&edited, "test").unwrap();
    assert!(cat.generation().unwrap() > before);

    let job: i64 = count(&db, "SELECT job_id FROM job WHERE job_name = 'nightly'");
    let p: i64 = count(
        &db,
        "SELECT processor_id FROM job_processor WHERE processor_name = 'main'",
    );
    cat.enqueue((0..2).map(|_| run_of(job, p, None)).collect(), now_ms())
        .unwrap();
    let claimed = cat.claim(claim_req(p, l1, 2)).unwrap();
    assert_eq!(claimed.runs.len(), 1, "the job forbids overlap");
    assert!(cat.cancel_requested(l1.node_id).unwrap().is_empty());
    db.client()
        .execute(
            "UPDATE job_run SET cancel_requested = 1 WHERE run_id = $1",
            &[&claimed.runs[0].run_id],
        )
        .unwrap();
    assert_eq!(
        cat.cancel_requested(l1.node_id).unwrap(),
        [claimed.runs[0].run_id]
    );
    assert!(cat.cancel_requested(l2.node_id).unwrap().is_empty());
}

/// The trigger path on PostgreSQL: one run per parameter set, queued now, one audit row
/// naming the actor; an unknown job is not found and queues nothing.
#[test]
fn pg_a_trigger_queues_a_run_per_parameter_set_with_one_audit_row() {
    use jobvisor::jobconf::toml_format;
    let Some(db) = PgDb::create("trigger") else {
        return;
    };
    let cat = db.catalog("api");
    cat.import(&toml_format::parse(DEFINITIONS).unwrap(), "test")
        .unwrap();
    let params = (1..=3).map(|n| Some(format!("{{\"n\":{n}}}"))).collect();
    let t = cat
        .trigger("fetch", params, now_ms(), "alice", None)
        .unwrap();
    assert_eq!(t.run_ids.len(), 3);
    assert_eq!(t.priority, 7);
    let rows = db
        .client()
        .query(
            "SELECT params, status FROM job_run WHERE run_id = ANY($1) ORDER BY run_id",
            &[&t.run_ids],
        )
        .unwrap();
    let got: Vec<(String, String)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(got[2], ("{\"n\":3}".to_string(), "queued".to_string()));
    let detail: String = db
        .client()
        .query_one(
            "SELECT detail FROM audit WHERE action = 'job.run' AND actor = 'alice'",
            &[],
        )
        .unwrap()
        .get(0);
    let detail: serde_json::Value = serde_json::from_str(&detail).unwrap();
    assert_eq!(detail["runs"], 3);
    let missing = cat.trigger("nope", vec![None], now_ms(), "alice", None);
    assert!(
        matches!(missing, Err(CatalogError::NotFound { .. })),
        "{missing:?}"
    );
    assert_eq!(count(&db, "SELECT count(*) FROM job_run"), 3);
}

/// A node that restarts under its name (its earlier process gone) takes the name and recovers
/// the runs that process left running, in the same transaction: back in the queue as suspects,
/// the one it was executing with an attempt counted, and the job's runs in progress back to 0.
#[test]
fn pg_a_restarted_node_recovers_the_runs_its_earlier_process_left() {
    let Some(db) = PgDb::create("restart") else {
        return;
    };
    let (p, jobs) = define(&db, &[("many", "allow", 10, 3)]);
    let cat = db.catalog("n1");
    cat.enqueue((0..2).map(|_| run_of(jobs[0], p, None)).collect(), now_ms())
        .unwrap();
    let first = register(&cat, "n1", 30_000);
    let claimed = cat.claim(claim_req(p, first, 2)).unwrap();
    assert!(
        cat.mark_executing(claimed.runs[0].run_id, claimed.runs[0].claim_token, 0)
            .unwrap()
    );
    assert_eq!(count(&db, "SELECT in_progress FROM job_progress"), 2);
    // Pid 1 is gone on this host: the name is taken over at once.
    let (again, recovery) = cat
        .register_node("n1".into(), "test-host".into(), 2, 30_000, now_ms(), |_| {
            false
        })
        .unwrap();
    let Registration::Taken(lease) = again else {
        panic!("{again:?}");
    };
    assert_eq!(lease.generation, first.generation + 1);
    let recovery = recovery.expect("a take-over recovers");
    assert_eq!(recovery.requeued.len(), 2);
    assert_eq!(count(&db, "SELECT in_progress FROM job_progress"), 0);
    let attempts: Vec<(i64, i32)> = db
        .client()
        .query("SELECT attempt, suspect FROM job_run ORDER BY run_id", &[])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(attempts, [(2, 1), (1, 1)]);
    // Released at a clean stop: a new process (alive) takes the name at once, nothing to recover.
    cat.release_node(lease).unwrap();
    let (next, recovery) = cat
        .register_node("n1".into(), "test-host".into(), 3, 30_000, now_ms(), |_| {
            true
        })
        .unwrap();
    assert!(matches!(next, Registration::Taken(_)), "{next:?}");
    assert!(recovery.is_none_or(|r| r.is_empty()));
}
