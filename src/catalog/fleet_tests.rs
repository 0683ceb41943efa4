//! Nodes sharing one catalog (issue 16): claim tokens unique across processes, leases renewed
//! by heartbeats, and sweeps of dead nodes — fenced, their expired runs recovered by the
//! restart's rules, an audit row each, their late completions rejected as stale.

use rusqlite::Connection;
use serde_json::Value as Json;

use super::complete::{Completion, Outcome, Recorded};
use super::node::{self, Applicant, NodeLease, Registration};
use super::queue::{self};
use super::verbs::ClaimRequest;
use super::writer::tests::runtime;
use super::*;
use crate::jobconf::toml_format;
use crate::model::RunStatus;

const CONF: &str = r#"
[processor.p]
instances = 8
[job.quick]
type = "function"
processor = "p"
overlap_policy = "allow"
max_overlap = 1000
max_attempts = 5
payload = { function = "f" }
[job.slow]
type = "function"
processor = "p"
overlap_policy = "allow"
max_overlap = 1000
timeout = 60000
payload = { function = "f" }
"#;

const TTL: i64 = 3_000;

/// A catalog with [`CONF`] imported, in a folder of its own.
fn catalog() -> (tempfile::TempDir, Catalog) {
    let dir = tempfile::tempdir().unwrap();
    let catalog = Catalog::open(&dir.path().join("c.db"), &DbSettings::default()).unwrap();
    catalog
        .import(&toml_format::parse(CONF).unwrap(), "t")
        .unwrap();
    (dir, catalog)
}

/// Takes node name `name` at `now` with lease TTL `ttl`.
fn take(conn: &Connection, name: &str, now: i64, ttl: i64) -> NodeLease {
    let who = Applicant {
        name,
        host: "h",
        pid: 1000 + i64::from(name.as_bytes()[0]),
        version: "v",
        lease_ttl_ms: ttl,
    };
    match node::register_node(conn, &who, now, 15_000, |_| true, None).unwrap() {
        Registration::Taken(lease) => lease,
        other => panic!("{other:?}"),
    }
}

fn processor(conn: &Connection) -> i64 {
    conn.query_row("SELECT processor_id FROM job_processor", [], |r| r.get(0))
        .unwrap()
}

/// Queues `n` on-demand runs of `job`.
fn queue_runs(conn: &Connection, job: &str, n: usize) {
    for _ in 0..n {
        verbs::trigger(conn, job, &[None], 0, "t", None).unwrap();
    }
}

/// Claims up to `limit` runs for `lease`'s node at `now`, tokens from the catalog.
fn claim(conn: &Connection, lease: NodeLease, limit: usize, now: i64) -> Vec<queue::ClaimedRun> {
    node::check_fence(conn, lease).unwrap();
    let first = queue::next_token(conn).unwrap();
    let runs = queue::claim(
        conn,
        processor(conn),
        lease.node_id,
        limit,
        now,
        TTL,
        first,
        false,
    )
    .unwrap()
    .runs;
    queue::spend_tokens(conn, runs.len()).unwrap();
    runs
}

fn succeeded(run: &queue::ClaimedRun, at: i64) -> Completion {
    Completion {
        run_id: run.run_id,
        job_id: run.job_id,
        claim_token: run.claim_token,
        outcome: Outcome::Succeeded(Json::Null),
        log: None,
        started_at: Some(at),
        finished_at: at,
        retry_at: None,
    }
}

/// (status, node_id, lease_until, suspect, attempt) of run `id`.
fn run_row(conn: &Connection, id: i64) -> (String, Option<i64>, Option<i64>, i64, i64) {
    conn.query_row(
        "SELECT status, node_id, lease_until, suspect, attempt FROM job_run WHERE run_id = ?1",
        [id],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
    )
    .unwrap()
}

/// Two processes on one file (each its own writer connection) claim in turns: no claim token
/// is handed out twice, so a completion carrying one claim's token can never match another
/// claim of the same run. Before, each process counted from its start time in ms << 10, and
/// two processes started 2 ms apart reached each other's numbers after 2,048 claimed runs.
#[test]
fn claim_tokens_are_never_handed_out_twice_across_processes_sharing_a_catalog() {
    let (dir, mut first) = catalog();
    let path = dir.path().join("c.db");
    queue_runs(first.writer(), "quick", 300);
    let a = take(first.writer(), "a", 0, TTL);
    let mut second = Catalog::open(&path, &DbSettings::default()).unwrap();
    let b = take(second.writer(), "b", 0, TTL);
    let pid = processor(first.writer());
    let (wa, _ra) = first.into_node_handles(&DbSettings::default()).unwrap();
    let (wb, _rb) = second.into_node_handles(&DbSettings::default()).unwrap();
    let tokens = runtime().block_on(async move {
        let mut tokens = Vec::new();
        for round in 0..20 {
            for (writer, lease) in [(&wa, a), (&wb, b)] {
                let claim = writer
                    .claim(ClaimRequest {
                        fence: lease,
                        processor_id: pid,
                        node_id: lease.node_id,
                        limit: 7,
                        now: round,
                        lease_ms: TTL,
                        writes_paused: false,
                    })
                    .await
                    .unwrap();
                tokens.extend(claim.runs.iter().map(|r| r.claim_token));
            }
        }
        tokens
    });
    assert_eq!(tokens.len(), 280);
    let mut unique = tokens.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), tokens.len(), "a token was handed out twice");
}

/// Regression: a claim that finds nothing to claim commits no change. When it took its tokens
/// up front it wrote the counter every time; every node's change check (`PRAGMA data_version`)
/// saw that write and woke its processors, which claimed again: a write every 100 ms forever,
/// and a WAL never emptied at rest (fault scenario 5 found it waiting for the WAL to empty).
#[test]
fn an_empty_claim_commits_no_change_that_would_wake_the_nodes() {
    let (dir, mut catalog) = catalog();
    let lease = take(catalog.writer(), "a", 0, TTL);
    let pid = processor(catalog.writer());
    let watcher = Connection::open(dir.path().join("c.db")).unwrap();
    let version = || -> i64 {
        watcher
            .query_row("PRAGMA data_version", [], |r| r.get(0))
            .unwrap()
    };
    let (writer, _reader) = catalog.into_node_handles(&DbSettings::default()).unwrap();
    let before = version();
    let claim = runtime().block_on(async move {
        writer
            .claim(ClaimRequest {
                fence: lease,
                processor_id: pid,
                node_id: lease.node_id,
                limit: 16,
                now: 1,
                lease_ms: TTL,
                writes_paused: false,
            })
            .await
            .unwrap()
    });
    assert!(claim.runs.is_empty());
    assert_eq!(version(), before, "the empty claim changed the file");
}

/// Issue 16, build 1: a heartbeat extends the lease of every run its node holds running to
/// `now + ttl` (a run without a timeout keeps its lease while the node lives), and only its
/// own; a heartbeat under a lost generation renews nothing.
#[test]
fn a_heartbeat_extends_the_leases_of_its_own_running_runs_only() {
    let (_dir, mut catalog) = catalog();
    let conn = catalog.writer();
    queue_runs(conn, "quick", 2);
    let a = take(conn, "a", 0, TTL);
    let b = take(conn, "b", 0, TTL);
    let [ra] = claim(conn, a, 1, 100).try_into().unwrap();
    let [rb] = claim(conn, b, 1, 100).try_into().unwrap();
    assert_eq!(
        run_row(conn, ra.run_id).2,
        Some(100 + TTL),
        "claim + timeout 0 + ttl"
    );
    assert!(node::heartbeat(conn, a, 2_000, TTL).unwrap());
    assert_eq!(run_row(conn, ra.run_id).2, Some(2_000 + TTL), "renewed");
    assert_eq!(
        run_row(conn, rb.run_id).2,
        Some(100 + TTL),
        "another node's"
    );
    // A lease never shrinks (a long timeout's lease outlasts the heartbeats).
    assert!(node::heartbeat(conn, a, 1_000, TTL).unwrap());
    assert_eq!(run_row(conn, ra.run_id).2, Some(2_000 + TTL));
    // Fenced (a sweep bumped the generation): nothing renewed.
    conn.execute(
        "UPDATE node SET generation = generation + 1 WHERE node_id = ?1",
        [a.node_id],
    )
    .unwrap();
    assert!(!node::heartbeat(conn, a, 4_000, TTL).unwrap());
    assert_eq!(run_row(conn, ra.run_id).2, Some(2_000 + TTL));
}

/// Issue 16, build 2 and 3: node `a` stops heartbeating. While its heartbeat is younger than
/// its TTL nothing happens; after, `b`'s sweep fences it (a new generation, `fenced_by` b) and
/// requeues its run whose lease expired as a suspect, in one transaction with an audit row
/// naming both nodes and the run; its run with a long timeout keeps its lease until that
/// expires too. `a`'s late completion is rejected as stale and counted on its row, its
/// heartbeat and claims are refused, and `b` completes the run once.
#[test]
fn a_sweep_fences_a_silent_node_and_requeues_its_runs_whose_leases_expired() {
    let (_dir, mut catalog) = catalog();
    let conn = catalog.writer();
    queue_runs(conn, "quick", 1);
    queue_runs(conn, "slow", 1);
    let a = take(conn, "a", 0, TTL);
    let b = take(conn, "b", 0, 60_000);
    let runs = claim(conn, a, 2, 0);
    let quick = runs
        .iter()
        .find(|r| &*r.job_name == "quick")
        .unwrap()
        .clone();
    let slow = runs
        .iter()
        .find(|r| &*r.job_name == "slow")
        .unwrap()
        .clone();
    // Within a's TTL (b's own TTL is longer and does not matter): nothing to sweep.
    assert!(node::heartbeat(conn, b, TTL - 1, 60_000).unwrap());
    assert_eq!(node::sweep(conn, b, TTL - 1).unwrap(), []);
    let swept = node::sweep(conn, b, TTL + 1).unwrap();
    assert_eq!(swept.len(), 1);
    let s = &swept[0];
    assert_eq!((s.name.as_str(), s.fenced), ("a", Some(a.generation)));
    assert_eq!(
        s.recovery.requeued,
        [quick.run_id],
        "only the expired lease"
    );
    assert_eq!(
        run_row(conn, quick.run_id),
        ("queued".into(), None, None, 1, 1)
    );
    assert_eq!(
        run_row(conn, slow.run_id).0,
        "claimed",
        "its lease: claim + 60 s + ttl"
    );
    // The fenced process learns it at its next heartbeat, and from whom; it claims nothing.
    assert!(!node::heartbeat(conn, a, TTL + 2, TTL).unwrap());
    let holder = node::holder(&mut *conn, a.node_id).unwrap().unwrap();
    assert_eq!(holder.fenced_by.as_deref(), Some("b"));
    assert!(matches!(
        node::check_fence(conn, a),
        Err(CatalogError::Fenced { .. })
    ));
    // Its late completion is stale, and counted on its own row.
    assert_eq!(
        complete::complete(conn, a.node_id, &succeeded(&quick, TTL + 3)).unwrap(),
        Recorded::Stale
    );
    let stale: i64 = conn
        .query_row(
            "SELECT stale_completions FROM node WHERE node_id = ?1",
            [a.node_id],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(stale, 1);
    // b runs it (a suspect now) and records it once.
    let [again] = claim(conn, b, 1, TTL + 4).try_into().unwrap();
    assert_eq!((again.run_id, again.suspect), (quick.run_id, true));
    assert_eq!(
        complete::complete(conn, b.node_id, &succeeded(&again, TTL + 5)).unwrap(),
        Recorded::Done(RunStatus::Succeeded, None)
    );
    // Later sweeps: a is fenced already; its slow run goes once its lease expired.
    assert_eq!(node::sweep(conn, b, 60_000).unwrap(), []);
    let later = node::sweep(conn, b, 60_000 + TTL + 1).unwrap();
    assert_eq!(later.len(), 1);
    assert_eq!(
        (later[0].fenced, &later[0].recovery.requeued),
        (None, &vec![slow.run_id])
    );
    assert_eq!(node::sweep(conn, b, 200_000).unwrap(), [], "nothing left");
    let in_progress: i64 = conn
        .query_row("SELECT sum(in_progress) FROM job", [], |r| r.get(0))
        .unwrap();
    assert_eq!(in_progress, 0, "recounted");
    // The audit log names the sweeper, the dead node and the runs.
    let audit = catalog.audit_log(10).unwrap();
    let sweeps: Vec<_> = audit.iter().filter(|r| r.action == "node.sweep").collect();
    assert_eq!(sweeps.len(), 2);
    let first = sweeps.last().unwrap();
    assert_eq!(
        (first.actor.as_str(), first.subject.as_deref()),
        ("node:b", Some("a"))
    );
    let detail: Json = serde_json::from_str(first.detail.as_deref().unwrap()).unwrap();
    assert_eq!(detail["requeued"], serde_json::json!([quick.run_id]));
    assert_eq!(detail["fenced_generation"], a.generation);
}

/// A sweep reuses the restart's rules: a run its node died executing (marked, as a suspect
/// is before it starts) counts the death as an attempt and is quarantined after
/// `min(max_attempts, 3)` of them; a run an operator asked to cancel is recorded cancelled.
/// Two nodes sweeping the same dead node requeue its runs once.
#[test]
fn a_sweep_blames_deaths_on_the_runs_executing_and_two_sweepers_requeue_once() {
    let (_dir, mut catalog) = catalog();
    let conn = catalog.writer();
    conn.execute("UPDATE job SET max_attempts = 2", []).unwrap();
    queue_runs(conn, "quick", 2);
    let b = take(conn, "b", 0, TTL);
    let c = take(conn, "c", 0, TTL);
    let mut now = 0;
    let mut poison = None;
    for death in 1..=3 {
        // A node of a new name each time claims both, marks the suspect one executing, dies.
        let name = format!("dead{death}");
        let d = take(conn, &name, now, TTL);
        let runs = claim(conn, d, 2, now);
        assert_eq!(runs.len(), 2, "death {death}");
        let victim = *poison.get_or_insert(runs[0].run_id);
        if death > 1 {
            let run = runs.iter().find(|r| r.run_id == victim).unwrap();
            assert!(run.suspect);
            assert!(node::mark_executing(conn, run.run_id, run.claim_token, 0).unwrap());
        }
        if death == 3 {
            let other = runs.iter().find(|r| r.run_id != victim).unwrap();
            conn.execute(
                "UPDATE job_run SET cancel_requested = 1 WHERE run_id = ?1",
                [other.run_id],
            )
            .unwrap();
        }
        now += TTL + 1;
        for live in [b, c] {
            assert!(node::heartbeat(conn, live, now, TTL).unwrap());
        }
        let by_b = node::sweep(conn, b, now).unwrap();
        let by_c = node::sweep(conn, c, now).unwrap();
        assert_eq!(by_b.len(), 1, "death {death}: {by_b:?}");
        assert_eq!(by_c, [], "death {death}: swept once");
        let r = &by_b[0].recovery;
        match death {
            1 | 2 => assert_eq!(r.requeued.len(), 2, "death {death}"),
            _ => {
                // Blamed twice (deaths 2 and 3) = max_attempts: quarantined.
                assert_eq!(r.quarantined, [(victim, 2)]);
                assert_eq!(r.cancelled.len(), 1);
            }
        }
    }
    let (status, _, _, _, attempt) = run_row(conn, poison.unwrap());
    assert_eq!(
        (status.as_str(), attempt),
        ("dead", 2),
        "one blamed death counted"
    );
}
