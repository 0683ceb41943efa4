//! Workflows and job trees on a real PostgreSQL server, as `catalog::tree_tests` has them on
//! SQLite: runs are claimed and completed through the PostgreSQL catalog's own verbs, so each
//! test states which transaction queued, skipped or ended what; and two nodes (threads, each
//! with its own connection) end the last steps of many workflows at once.
//!
//! Here, not among the integration tests beside `tests/it/postgres.rs`: they read what a tree's
//! cancel and a workflow's retry did (`tree::cancel_tree`'s counts, the steps
//! `tree::retry_workflow` queued), which only the crate sees (`Catalog::cancel_run` and
//! `retry_run` answer the outcome and the run). The server is `JOBVISOR_TEST_PG` (an
//! admin URL: then a test fails when it cannot connect), else the local default one; when that
//! is unset and does not answer, the tests say so and pass without running.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use postgres::{Client, NoTls};
use serde_json::{Value as Json, json};

use super::queue::PgClaim;
use super::{PgCatalog, PgSettings};
use crate::catalog::complete::{Completion, Outcome, Recorded};
use crate::catalog::node::{NodeLease, Registration};
use crate::catalog::queue::ClaimedRun;
use crate::catalog::tree::{self, Queued, TreeCancel};
// `catalog::tree_tests`' catalog: a → (b, c) → d, with d taking b's and c's results, e after a
// only, `flaky` (step c) allowed two attempts.
use crate::catalog::tree_tests::{CONF, ok};
use crate::catalog::{CatalogError, now_ms};
use crate::jobconf::toml_format;
use crate::model::RunStatus;
use crate::sim::SimRng;

/// A database of the test's own, dropped after (as `tests/it/support.rs`' `PgDb`).
struct TestDb {
    admin: String,
    name: String,
    url: String,
}

impl TestDb {
    /// A new empty database; `None` when no server was asked for and none answers.
    fn create(test: &str) -> Option<TestDb> {
        let (admin, required) = match std::env::var("JOBVISOR_TEST_PG") {
            Ok(url) if !url.is_empty() => (url, true),
            _ => (
                "postgres://postgres@127.0.0.1:5432/postgres".to_string(),
                false,
            ),
        };
        let mut client = match Client::connect(&admin, NoTls) {
            Ok(c) => c,
            Err(e) if !required => {
                eprintln!("{test}: not run: no PostgreSQL at {admin} ({e}); set JOBVISOR_TEST_PG");
                return None;
            }
            Err(e) => panic!("JOBVISOR_TEST_PG={admin}: cannot connect: {e}"),
        };
        let name = format!("jv_lib_{test}_{}", std::process::id());
        for sql in [
            format!("DROP DATABASE IF EXISTS {name}"),
            format!("CREATE DATABASE {name}"),
        ] {
            client
                .batch_execute(&sql)
                .expect("create the test database");
        }
        let (base, _) = admin.rsplit_once('/').expect("the URL names a database");
        Some(TestDb {
            url: format!("{base}/{name}"),
            admin,
            name,
        })
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Ok(mut c) = Client::connect(&self.admin, NoTls) {
            let _ = c.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}

/// One node on a test database with `conf` imported, its clock and its processor.
struct World {
    pg: PgCatalog,
    client: Client,
    lease: NodeLease,
    processor: i64,
    clock: i64,
    // Last: dropped after the connections above.
    _db: TestDb,
}

impl World {
    fn new(test: &str, conf: &str) -> Option<World> {
        let db = TestDb::create(test)?;
        let pg = PgCatalog::open(PgSettings::new(&db.url), test).unwrap();
        pg.import(&toml_format::parse(conf).unwrap(), "t").unwrap();
        let lease = register(&pg, "n1");
        let mut client = Client::connect(&db.url, NoTls).unwrap();
        let processor = client
            .query_one("SELECT min(processor_id) FROM job_processor", &[])
            .unwrap()
            .get(0);
        Some(World {
            pg,
            client,
            lease,
            processor,
            clock: now_ms(),
            _db: db,
        })
    }

    fn trigger(&mut self, job: &str, params: Option<Json>) -> i64 {
        let t = self
            .pg
            .trigger(
                job,
                vec![params.map(|p| p.to_string())],
                self.clock,
                "t",
                None,
            )
            .unwrap();
        t.run_ids[0]
    }

    /// Claims every due run, in one claim.
    fn claim(&mut self) -> Vec<ClaimedRun> {
        self.clock += 10;
        claim(&self.pg, self.processor, self.lease, self.clock)
    }

    /// Completes `runs` in one transaction, each with `outcome(run)`; returns the runs it
    /// queued for processors.
    fn complete(
        &mut self,
        runs: &[ClaimedRun],
        outcome: impl Fn(&ClaimedRun) -> Outcome,
    ) -> (Vec<Recorded>, Vec<Queued>) {
        self.clock += 10;
        let done = completions(runs, self.clock, outcome);
        self.pg.complete_batch(self.lease.node_id, done).unwrap()
    }

    /// Claims and completes until nothing is queued; the runs in the order they were claimed.
    fn drain(&mut self, outcome: impl Fn(&ClaimedRun) -> Outcome) -> Vec<ClaimedRun> {
        let mut all = Vec::new();
        loop {
            let runs = self.claim();
            if runs.is_empty() {
                return all;
            }
            self.complete(&runs, &outcome);
            all.extend(runs);
        }
    }

    /// (step or job, status) of the runs under `root`, the latest per step.
    fn steps(&mut self, root: i64) -> BTreeMap<String, String> {
        steps(&mut self.client, root)
    }

    /// (status, finished_at, children_open) of a run.
    fn run(&mut self, id: i64) -> (String, Option<i64>, i64) {
        let r = self
            .client
            .query_one(
                "SELECT status, finished_at, children_open FROM job_run WHERE run_id = $1",
                &[&id],
            )
            .unwrap();
        (r.get(0), r.get(1), r.get(2))
    }

    fn column<T: for<'a> postgres::types::FromSql<'a>>(&mut self, id: i64, column: &str) -> T {
        self.client
            .query_one(
                &format!("SELECT {column} FROM job_run WHERE run_id = $1"),
                &[&id],
            )
            .unwrap()
            .get(0)
    }

    /// Cancels run `id` with its tree, as `Catalog::cancel_run` does for a run heading an
    /// open tree, in one transaction.
    fn cancel_tree(&mut self, id: i64) -> TreeCancel {
        let now = self.clock;
        self.pg
            .transact(move |tx| {
                assert!(tree::has_open_tree(&mut *tx, id)?);
                tree::cancel_tree(&mut *tx, id, "cancelled by op", now, &mut Vec::new())
            })
            .unwrap()
    }

    /// Retries workflow run `id` in place, as `Catalog::retry_run` does; how many steps it
    /// queued.
    fn retry_workflow(&mut self, id: i64) -> Result<usize, CatalogError> {
        let now = self.clock;
        self.pg
            .transact(move |tx| tree::retry_workflow(&mut *tx, id, now, &mut Vec::new()))
    }
}

fn register(pg: &PgCatalog, name: &str) -> NodeLease {
    match pg
        .register_node(name.into(), "h".into(), 1, 60_000, now_ms(), |_| true)
        .unwrap()
        .0
    {
        Registration::Taken(lease) => lease,
        other => panic!("{other:?}"),
    }
}

fn claim(pg: &PgCatalog, processor_id: i64, lease: NodeLease, now: i64) -> Vec<ClaimedRun> {
    pg.claim(PgClaim {
        processor_id,
        lease,
        limit: 1000,
        now,
        lease_ms: 60_000,
        writes_paused: false,
    })
    .unwrap()
    .runs
}

fn completions(
    runs: &[ClaimedRun],
    now: i64,
    outcome: impl Fn(&ClaimedRun) -> Outcome,
) -> Vec<Completion> {
    runs.iter()
        .map(|r| Completion {
            run_id: r.run_id,
            job_id: r.job_id,
            claim_token: r.claim_token,
            outcome: outcome(r),
            log: None,
            started_at: Some(now - 5),
            finished_at: now,
            retry_at: Some(now),
        })
        .collect()
}

fn steps(client: &mut Client, root: i64) -> BTreeMap<String, String> {
    client
        .query(
            "SELECT coalesce(step, 'job:' || run_id), status FROM job_run WHERE pid = $1
             ORDER BY run_id",
            &[&root],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

fn names(runs: &[ClaimedRun]) -> Vec<String> {
    let mut names: Vec<String> = runs
        .iter()
        .map(|r| {
            r.params
                .as_ref()
                .and_then(|p| p.get("k"))
                .map_or_else(|| r.job_name.to_string(), |k| format!("{}:{k}", r.job_name))
        })
        .collect();
    names.sort();
    names
}

#[test]
fn pg_a_workflow_queues_each_step_with_its_inputs_as_its_last_predecessor_succeeds() {
    let Some(mut w) = World::new("wf_order", CONF) else {
        return;
    };
    let root = w.trigger("w", Some(json!({ "mail": "m1" })));
    assert_eq!(
        w.run(root),
        ("running".into(), None, 1),
        "started with its one first step in the trigger's transaction"
    );
    let first = w.claim();
    assert_eq!(names(&first), ["a:1"]);
    assert_eq!(first[0].params.as_ref().unwrap()["mail"], "m1");
    let (_, queued) = w.complete(&first, ok);
    assert_eq!(queued.len(), 3, "b, c and e fan out from a: {queued:?}");
    let second = w.claim();
    assert_eq!(names(&second), ["b", "b", "flaky"]);
    let b = second
        .iter()
        .find(|r| r.params.as_ref().unwrap().get("inputs").is_some())
        .unwrap();
    assert_eq!(
        b.params.as_ref().unwrap()["inputs"]["a"],
        json!({ "from": first[0].run_id }),
        "b takes a's result"
    );
    // c fails once (its retry takes its place in the tree; d waits), the others succeed.
    let (_, queued) = w.complete(&second, |r| {
        if &*r.job_name == "flaky" {
            Outcome::Failed("once".into())
        } else {
            ok(r)
        }
    });
    assert!(queued.is_empty(), "d waits for c's retry: {queued:?}");
    assert_eq!(w.run(root).0, "running");
    let retry = w.claim();
    assert_eq!(names(&retry), ["flaky"]);
    let (pid, step): (Option<i64>, Option<String>) = (
        w.column(retry[0].run_id, "pid"),
        w.column(retry[0].run_id, "step"),
    );
    assert_eq!((pid, step.as_deref()), (Some(root), Some("c")));
    let (_, queued) = w.complete(&retry, ok);
    assert_eq!(queued.len(), 1, "d fans in on c's retry");
    let last = w.claim();
    let inputs = &last[0].params.as_ref().unwrap()["inputs"];
    assert_eq!(
        inputs["c"],
        json!({ "from": retry[0].run_id }),
        "c's latest result"
    );
    assert!(
        inputs.get("b").is_some() && inputs.get("a").is_none(),
        "{inputs}"
    );
    w.complete(&last, ok);
    let (status, finished, open) = w.run(root);
    let d_end: i64 = w.column(last[0].run_id, "finished_at");
    assert_eq!(
        (status.as_str(), finished, open),
        ("succeeded", Some(d_end), 0),
        "the workflow ended in the transaction of its last step's end"
    );
    assert!(w.claim().is_empty());
    let steps = w.steps(root);
    assert!(steps.values().all(|s| s == "succeeded"), "{steps:?}");
    let ended: i64 = w
        .client
        .query_one("SELECT sum(runs_ended)::bigint FROM job_tally", &[])
        .unwrap()
        .get(0);
    assert_eq!(
        ended, 6,
        "each step's attempt counted once; the workflow's run not at all"
    );
}

#[test]
fn pg_a_failed_step_skips_what_follows_fails_the_workflow_and_a_retry_reruns_only_that() {
    let Some(mut w) = World::new("wf_fail", CONF) else {
        return;
    };
    let root = w.trigger("w", None);
    let first = w.claim();
    w.complete(&first, ok);
    let second = w.claim();
    let (b, rest): (Vec<ClaimedRun>, Vec<ClaimedRun>) = second
        .into_iter()
        .partition(|r| r.params.as_ref().is_some_and(|p| p.get("inputs").is_some()));
    w.complete(&b, |_| Outcome::Failed("no".into()));
    let steps = w.steps(root);
    assert_eq!(
        (steps["b"].as_str(), steps["d"].as_str()),
        ("failed", "skipped")
    );
    assert_eq!(
        w.run(root).0,
        "failed",
        "the failure shows at the root at once"
    );
    assert_eq!(w.run(root).1, None, "but c and e go on");
    w.complete(&rest, ok);
    let (status, finished, _) = w.run(root);
    assert_eq!((status.as_str(), finished.is_some()), ("failed", true));
    let error: String = w.column(root, "error");
    assert!(error.contains("step of the workflow failed"), "{error}");

    // In place: b again, then d; a, c and e keep their results.
    assert_eq!(w.retry_workflow(root).unwrap(), 1);
    assert_eq!(w.run(root), ("running".into(), None, 1));
    let rerun = w.drain(ok);
    assert_eq!(
        rerun
            .iter()
            .map(|r| r.job_name.to_string())
            .collect::<Vec<_>>(),
        ["b", "b"],
        "b, then d"
    );
    assert_eq!(w.run(root).0, "succeeded");
    let steps = w.steps(root);
    assert!(steps.values().all(|s| s == "succeeded"), "{steps:?}");
    let superseding: i64 = w
        .client
        .query_one(
            "SELECT count(*) FROM job_run WHERE pid = $1 AND retry_of IS NOT NULL",
            &[&root],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        superseding, 2,
        "b's and d's new runs supersede their old ones"
    );
    let again = w.retry_workflow(root).unwrap_err().to_string();
    assert!(again.contains("no step to run again"), "{again}");
}

#[test]
fn pg_cancelling_a_workflow_cancels_its_queued_steps_and_ends_with_its_running_ones() {
    let Some(mut w) = World::new("wf_cancel", CONF) else {
        return;
    };
    let root = w.trigger("w", None);
    let first = w.claim();
    w.complete(&first, ok);
    let second = w.claim();
    assert_eq!(
        w.cancel_tree(root),
        TreeCancel {
            cancelled: 0,
            requested: 3
        },
        "b, c and e run: their nodes are asked to stop them"
    );
    // One finishes before its node cancels it; the others are cancelled: nothing new starts.
    let (_, queued) = w.complete(&second, |r| {
        if &*r.job_name == "flaky" {
            ok(r)
        } else {
            Outcome::Cancelled("cancelled by an operator while it ran".into())
        }
    });
    assert!(queued.is_empty());
    assert!(w.claim().is_empty());
    assert_eq!(w.steps(root)["d"], "skipped");
    let (status, finished, _) = w.run(root);
    assert_eq!((status.as_str(), finished.is_some()), ("cancelled", true));

    // A workflow whose steps are still queued: they are cancelled at once, and it ends.
    let queued_root = w.trigger("w", None);
    assert_eq!(
        w.cancel_tree(queued_root),
        TreeCancel {
            cancelled: 1,
            requested: 0
        }
    );
    let (status, finished, open) = w.run(queued_root);
    assert_eq!(
        (status.as_str(), finished.is_some(), open),
        ("cancelled", true, 0)
    );
    assert!(w.claim().is_empty());
}

#[test]
fn pg_a_run_that_spawned_runs_waits_for_them_and_ends_with_its_last_descendant() {
    let Some(mut w) = World::new("wf_spawn", CONF) else {
        return;
    };
    for failing in [false, true] {
        let parent = w.trigger("a", None);
        let claimed = w.claim();
        let kids: Vec<i64> = (0..3)
            .map(|_| {
                let (id, queued) = w.pg.spawn(parent, "b".into(), None, w.clock, None).unwrap();
                assert_eq!(queued.len(), 1);
                id
            })
            .collect();
        let (recorded, _) = w.complete(&claimed, ok);
        assert_eq!(recorded, [Recorded::Done(RunStatus::Succeeded, None)]);
        assert_eq!(w.run(parent), ("running".into(), None, 3), "it waits");
        let children = w.claim();
        assert_eq!(children.len(), 3);
        let (grandchild, _) =
            w.pg.spawn(
                children[0].run_id,
                "b".into(),
                None,
                w.clock,
                Some("op".into()),
            )
            .unwrap();
        let stump: i64 = w.column(grandchild, "stump");
        assert_eq!(
            stump, parent,
            "the grandchild's root is the top of the tree"
        );
        w.complete(&children, ok);
        assert_eq!(w.run(parent).1, None, "the grandchild still runs");
        let last = w.claim();
        assert_eq!(last.len(), 1);
        w.complete(&last, |r| {
            if failing {
                Outcome::Failed("x".into())
            } else {
                ok(r)
            }
        });
        let (status, finished, open) = w.run(parent);
        let end: i64 = w.column(grandchild, "finished_at");
        let want = if failing { "failed" } else { "succeeded" };
        assert_eq!((status.as_str(), finished, open), (want, Some(end), 0));
        assert!(kids.iter().all(|k| w.run(*k).1.is_some()));
    }
    // Spawning under a run that ended is refused; the spawn by an operator was audited.
    let done = w.trigger("a", None);
    w.drain(ok);
    let refused =
        w.pg.spawn(done, "b".into(), None, w.clock, None)
            .unwrap_err();
    assert!(matches!(refused, CatalogError::Conflict(_)), "{refused:?}");
    let audited: i64 = w
        .client
        .query_one("SELECT count(*) FROM audit WHERE action = 'run.spawn'", &[])
        .unwrap()
        .get(0);
    assert_eq!(audited, 2, "one grandchild spawned by `op` in each tree");
    // A finished tree is pruned whole, with its root.
    let before: i64 = w
        .client
        .query_one("SELECT count(*) FROM job_run", &[])
        .unwrap()
        .get(0);
    assert_eq!(w.pg.prune_runs(i64::MAX).unwrap() as i64, before);
}

/// A step's node dies: a sweep requeues its runs in their places (the workflow goes on) or,
/// after its crashes, quarantines the step (the workflow skips what follows and fails), as a
/// restart's recovery does on SQLite.
#[test]
fn pg_a_dead_nodes_steps_are_requeued_in_their_workflow_or_quarantined_and_fail_it() {
    let Some(mut w) = World::new("wf_sweep", CONF) else {
        return;
    };
    let root = w.trigger("w", None);
    let first = w.claim();
    w.complete(&first, ok);
    // n1 dies executing c (`flaky`: two attempts, so two deaths quarantine it).
    let mut late = w.clock;
    for (death, sweeper) in [(1, "n2"), (2, "n3")] {
        let runs = w.claim();
        let c = runs.iter().find(|r| &*r.job_name == "flaky").unwrap();
        assert!(w.pg.mark_executing(c.run_id, c.claim_token, 0).unwrap());
        if death == 2 {
            // b and e end before the node dies.
            let others: Vec<ClaimedRun> = runs
                .iter()
                .filter(|r| r.run_id != c.run_id)
                .cloned()
                .collect();
            w.complete(&others, ok);
        }
        w.client
            .execute(
                "UPDATE node SET heartbeat_at = 0 WHERE node_id = $1",
                &[&w.lease.node_id],
            )
            .unwrap();
        let next = register(&w.pg, sweeper);
        late += 200_000;
        let swept = w.pg.sweep(next, late).unwrap();
        let recovery = &swept[0].recovery;
        if death == 1 {
            assert_eq!(recovery.requeued.len(), 3, "b, c and e back in the queue");
            let step: Option<String> = w.column(c.run_id, "step");
            assert_eq!(step.as_deref(), Some("c"), "in its place in the tree");
            assert_eq!(w.run(root).0, "running");
        } else {
            assert_eq!(recovery.quarantined, [(c.run_id, 2)]);
        }
        w.lease = next;
    }
    let steps = w.steps(root);
    assert_eq!(
        (steps["c"].as_str(), steps["d"].as_str()),
        ("dead", "skipped"),
        "{steps:?}"
    );
    assert_eq!(
        (steps["b"].as_str(), steps["e"].as_str()),
        ("succeeded", "succeeded")
    );
    let (status, finished, open) = w.run(root);
    assert_eq!(
        (status.as_str(), finished.is_some(), open),
        ("failed", true, 0)
    );
    assert!(w.claim().is_empty());
}

/// Two nodes (threads, connections of their own) end the last two steps of many workflows at
/// once, in batches of random sizes and orders: each inner workflow (`pair`: x on one node, y
/// on the other, in parallel) ends exactly once, so its outer workflow queues `last` once and
/// ends with it — an inner end counted twice would end the outer one before `last`, one missed
/// would leave it running.
#[test]
fn pg_two_nodes_ending_the_last_steps_of_many_workflows_at_once_end_each_exactly_once() {
    const CONF2: &str = r#"
[processor.px]
instances = 100
[processor.py]
instances = 100
[job.x]
type = "function"
processor = "px"
overlap_policy = "allow"
max_overlap = 100000
payload = { function = "f" }
[job.y]
type = "function"
processor = "py"
overlap_policy = "allow"
max_overlap = 100000
payload = { function = "f" }
[job.pair]
type = "workflow"
processor = "px"
payload.steps = [{ name = "x", job = "x" }, { name = "y", job = "y" }]
[job.outer]
type = "workflow"
processor = "px"
payload.steps = [
    { name = "inner", job = "pair" },
    { name = "last", job = "x", after = ["inner"] },
]
"#;
    const WORKFLOWS: usize = 300;
    let Some(mut w) = World::new("wf_race", CONF2) else {
        return;
    };
    let t =
        w.pg.trigger("outer", vec![None; WORKFLOWS], w.clock, "t", None)
            .unwrap();
    let processors: HashMap<String, i64> = w
        .client
        .query(
            "SELECT processor_name, processor_id FROM job_processor",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let nodes: Vec<_> = [("px", "nx", 1_u64), ("py", "ny", 2)]
        .into_iter()
        .map(|(p, name, seed)| {
            let pg = w.pg.another(name).unwrap();
            let processor = processors[p];
            let stop = stop.clone();
            std::thread::spawn(move || {
                let lease = register(&pg, name);
                let mut rng = SimRng::new(seed);
                let mut completed = 0;
                while !stop.load(Ordering::Acquire) {
                    let mut runs = claim(&pg, processor, lease, now_ms());
                    if runs.is_empty() {
                        std::thread::sleep(std::time::Duration::from_millis(2));
                        continue;
                    }
                    // Random orders across trees: the roots are locked in one order anyway.
                    for i in (1..runs.len()).rev() {
                        runs.swap(i, rng.below(i as u64 + 1) as usize);
                    }
                    while !runs.is_empty() {
                        let n = (1 + rng.below(40) as usize).min(runs.len());
                        let batch: Vec<ClaimedRun> = runs.drain(..n).collect();
                        let done = completions(&batch, now_ms(), ok);
                        let recorded = pg.complete(lease.node_id, done).unwrap();
                        assert!(
                            recorded.iter().all(|r| *r != Recorded::Stale),
                            "{recorded:?}"
                        );
                        completed += batch.len();
                    }
                }
                completed
            })
        })
        .collect();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let open: i64 = w
            .client
            .query_one(
                "SELECT count(*) FROM job_run WHERE run_id = ANY($1) AND finished_at IS NULL",
                &[&t.run_ids],
            )
            .unwrap()
            .get(0);
        if open == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{open} workflows never ended"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    stop.store(true, Ordering::Release);
    let completed: usize = nodes.into_iter().map(|n| n.join().unwrap()).sum();
    assert_eq!(completed, 3 * WORKFLOWS, "x, y and last of each");
    for root in &t.run_ids {
        let steps = steps(&mut w.client, *root);
        assert_eq!(
            (steps.len(), steps["inner"].as_str(), steps["last"].as_str()),
            (2, "succeeded", "succeeded"),
            "workflow {root}: {steps:?}"
        );
    }
    let rows = w
        .client
        .query(
            "SELECT o.run_id, o.status, o.finished_at, o.children_open,
                (SELECT count(*) FROM job_run l WHERE l.pid = o.run_id AND l.step = 'last'),
                (SELECT max(l.finished_at) FROM job_run l WHERE l.pid = o.run_id),
                (SELECT count(*) FROM job_run i WHERE i.stump = o.run_id)
             FROM job_run o WHERE o.run_id = ANY($1)",
            &[&t.run_ids],
        )
        .unwrap();
    for r in &rows {
        let (id, status, finished, open): (i64, String, Option<i64>, i64) =
            (r.get(0), r.get(1), r.get(2), r.get(3));
        let (lasts, last_end, members): (i64, Option<i64>, i64) = (r.get(4), r.get(5), r.get(6));
        assert_eq!(
            (status.as_str(), open, lasts, members),
            ("succeeded", 0, 1, 4),
            "workflow {id}: `last` queued once; inner, its x and y, and last in its tree"
        );
        assert_eq!(finished, last_end, "workflow {id} ended with its last step");
    }
}
