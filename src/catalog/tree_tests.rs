//! Workflows and job trees against a real catalog, without actors: runs are claimed and
//! completed through the catalog's own verbs, so each test states exactly which transaction
//! queued, skipped or ended what.

use std::collections::BTreeMap;

use rusqlite::Connection;
use serde_json::{Value as Json, json};

use super::complete::{Completion, Outcome, Recorded};
use super::queue::{self, ClaimedRun};
use super::tree::Queued;
use super::upkeep;
use super::*;
use crate::jobconf::toml_format;
use crate::model::RunStatus;

/// a → (b, c) → d, with d taking b's and c's results; e waits for a only; plus a plain job.
/// (Also the PostgreSQL catalog's tree tests', `postgres::tree_tests`.)
pub(super) const CONF: &str = r#"
[processor.p]
instances = 100
[job.a]
type = "function"
processor = "p"
overlap_policy = "allow"
max_overlap = 1000
payload = { function = "f" }
[job.b]
type = "function"
processor = "p"
overlap_policy = "allow"
max_overlap = 1000
payload = { function = "f" }
[job.flaky]
type = "function"
processor = "p"
overlap_policy = "allow"
max_overlap = 1000
max_attempts = 2
backoff_base = 0
backoff_max = 0
payload = { function = "f" }
[job.w]
type = "workflow"
processor = "p"
payload.steps = [
    { name = "a", job = "a", params = { k = 1 } },
    { name = "b", job = "b", after = ["a"], inputs = ["a"] },
    { name = "c", job = "flaky", after = ["a"] },
    { name = "d", job = "b", after = ["b", "c"], inputs = ["b", "c"] },
    { name = "e", job = "b", after = ["a"] },
]
"#;

struct World {
    _dir: tempfile::TempDir,
    catalog: Catalog,
    node: i64,
    processor: i64,
    clock: i64,
    token: i64,
}

impl World {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut catalog = Catalog::open(&dir.path().join("c.db"), &DbSettings::default()).unwrap();
        catalog
            .import(&toml_format::parse(CONF).unwrap(), "t")
            .unwrap();
        let conn = catalog.writer();
        let who = node::Applicant {
            name: "n",
            host: "h",
            pid: 1,
            version: "v",
            lease_ttl_ms: 30_000,
        };
        let node = match node::register_node(conn, &who, 0, 15_000, |_| true, None).unwrap() {
            node::Registration::Taken(lease) => lease.node_id,
            other => panic!("{other:?}"),
        };
        let processor = conn
            .query_row("SELECT processor_id FROM job_processor", [], |r| r.get(0))
            .unwrap();
        Self {
            _dir: dir,
            catalog,
            node,
            processor,
            // The wall clock: a retry through `Catalog` stamps its runs with it.
            clock: now_ms(),
            token: 1,
        }
    }

    fn conn(&mut self) -> &Connection {
        self.catalog.writer()
    }

    fn trigger(&mut self, job: &str, params: Option<Json>) -> i64 {
        let now = self.clock;
        let params = [params.map(|p| p.to_string())];
        let t = verbs::trigger(self.catalog.writer(), job, &params, now, "t", None).unwrap();
        t.run_ids[0]
    }

    /// Claims every due run, in one claim.
    fn claim(&mut self) -> Vec<ClaimedRun> {
        self.clock += 10;
        let (now, token, node, p) = (self.clock, self.token, self.node, self.processor);
        self.token += 1000;
        queue::claim(
            self.catalog.writer(),
            p,
            node,
            1000,
            now,
            60_000,
            token,
            false,
        )
        .unwrap()
        .runs
    }

    /// Completes `runs` in one transaction (one batch), each with `outcome(run)`; returns the
    /// runs queued by it for other processors.
    fn complete(
        &mut self,
        runs: &[ClaimedRun],
        outcome: impl Fn(&ClaimedRun) -> Outcome,
    ) -> (Vec<Recorded>, Vec<Queued>) {
        self.clock += 10;
        let done: Vec<Completion> = runs
            .iter()
            .map(|r| Completion {
                run_id: r.run_id,
                job_id: r.job_id,
                claim_token: r.claim_token,
                outcome: outcome(r),
                log: None,
                started_at: Some(self.clock - 5),
                finished_at: self.clock,
                retry_at: Some(self.clock),
            })
            .collect();
        let node = self.node;
        let mut queued = Vec::new();
        let conn = self.catalog.writer();
        conn.execute_batch("BEGIN").unwrap();
        let recorded = complete::complete_batch(conn, node, &done, &mut queued).unwrap();
        conn.execute_batch("COMMIT").unwrap();
        (recorded, queued)
    }

    /// Claims and completes until nothing is queued, `outcome` deciding each run; returns the
    /// runs in the order they were claimed.
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

    /// (step or job, status) of the runs under `root`, latest per step, in id order.
    fn steps(&mut self, root: i64) -> BTreeMap<String, String> {
        let mut stmt = self
            .conn()
            .prepare("SELECT coalesce(step, 'job:' || run_id), status FROM job_run WHERE pid = ?1 ORDER BY run_id")
            .unwrap();
        stmt.query_map([root], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }

    /// (status, finished_at, children_open) of a run.
    fn run(&mut self, id: i64) -> (String, Option<i64>, i64) {
        self.conn()
            .query_row(
                "SELECT status, finished_at, children_open FROM job_run WHERE run_id = ?1",
                [id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap()
    }

    fn column<T: rusqlite::types::FromSql>(&mut self, id: i64, column: &str) -> T {
        self.conn()
            .query_row(
                &format!("SELECT {column} FROM job_run WHERE run_id = ?1"),
                [id],
                |r| r.get(0),
            )
            .unwrap()
    }
}

pub(super) fn ok(r: &ClaimedRun) -> Outcome {
    Outcome::Succeeded(json!({ "from": r.run_id }))
}

fn names(runs: &[ClaimedRun]) -> Vec<String> {
    runs.iter()
        .map(|r| {
            r.params
                .as_ref()
                .and_then(|p| p.get("k"))
                .map_or_else(|| r.job_name.to_string(), |k| format!("{}:{k}", r.job_name))
        })
        .collect()
}

#[test]
fn a_workflow_queues_each_step_in_the_transaction_of_its_last_predecessor_and_ends_with_its_last() {
    let mut w = World::new();
    let root = w.trigger("w", Some(json!({ "mail": "m1" })));
    assert_eq!(
        w.run(root),
        ("running".into(), None, 1),
        "started with its one first step"
    );
    let first = w.claim();
    assert_eq!(names(&first), ["a:1"], "only a waits for nothing");
    assert_eq!(
        first[0].params.as_ref().unwrap()["mail"],
        "m1",
        "the workflow's params"
    );
    let (_, queued) = w.complete(&first, ok);
    assert_eq!(
        queued.len(),
        3,
        "b, c and e queued by a's completion: {queued:?}"
    );
    let second = w.claim();
    let mut got = names(&second);
    got.sort();
    assert_eq!(got, ["b", "b", "flaky"]);
    let b = second
        .iter()
        .find(|r| r.params.as_ref().unwrap().get("inputs").is_some())
        .unwrap();
    assert_eq!(
        b.params.as_ref().unwrap()["inputs"]["a"],
        json!({ "from": first[0].run_id }),
        "b takes a's result"
    );
    // c fails once (a retry is queued, d waits), then all three succeed.
    let (_, queued) = w.complete(&second, |r| {
        if &*r.job_name == "flaky" {
            Outcome::Failed("once".into())
        } else {
            ok(r)
        }
    });
    assert!(queued.is_empty(), "d waits for c's retry: {queued:?}");
    assert_eq!(
        w.run(root).0,
        "running",
        "a failure with a retry left fails nothing"
    );
    let retry = w.claim();
    assert_eq!(names(&retry), ["flaky"]);
    let (_, queued) = w.complete(&retry, ok);
    assert_eq!(queued.len(), 1, "d queued by c's retry");
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
        ("succeeded", Some(d_end), 0)
    );
    assert!(w.claim().is_empty());
    let steps = w.steps(root);
    assert!(steps.values().all(|s| s == "succeeded"), "{steps:?}");
}

#[test]
fn a_failed_step_skips_its_dependents_and_fails_the_workflow_while_its_other_branches_go_on() {
    let mut w = World::new();
    let root = w.trigger("w", None);
    let first = w.claim();
    w.complete(&first, ok);
    let second = w.claim();
    // b fails for good; c and e are still to complete.
    let b: Vec<ClaimedRun> = second
        .iter()
        .filter(|r| r.params.as_ref().is_some_and(|p| p.get("inputs").is_some()))
        .cloned()
        .collect();
    let rest: Vec<ClaimedRun> = second
        .iter()
        .filter(|r| r.run_id != b[0].run_id)
        .cloned()
        .collect();
    w.complete(&b, |_| Outcome::Failed("no".into()));
    let steps = w.steps(root);
    assert_eq!(steps["b"], "failed");
    assert_eq!(steps["d"], "skipped", "d waits for b");
    assert_eq!(
        w.run(root).0,
        "failed",
        "the failure shows at the root at once"
    );
    assert_eq!(w.run(root).1, None, "but it has not ended: c and e go on");
    w.complete(&rest, ok);
    let (status, finished, _) = w.run(root);
    assert_eq!((status.as_str(), finished.is_some()), ("failed", true));
    let steps = w.steps(root);
    assert_eq!(
        (steps["c"].as_str(), steps["e"].as_str()),
        ("succeeded", "succeeded")
    );
    let error: String = w.column(root, "error");
    assert!(error.contains("step of the workflow failed"), "{error}");

    // A retry runs b again, then d (skipped before); a, c and e keep their results.
    let again = w.catalog.retry_run(root, "t").unwrap();
    assert_eq!(again, root, "the same run, in place");
    assert_eq!(w.run(root), ("running".into(), None, 1));
    let rerun = w.drain(ok);
    assert_eq!(names(&rerun), ["b", "b"], "b, then d");
    let (status, _, _) = w.run(root);
    assert_eq!(status, "succeeded");
    let steps = w.steps(root);
    assert!(steps.values().all(|s| s == "succeeded"), "{steps:?}");
    let superseded: i64 = w
        .conn()
        .query_row(
            "SELECT count(*) FROM job_run WHERE pid = ?1 AND retry_of IS NOT NULL",
            [root],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(
        superseded, 2,
        "b's and d's new runs supersede their old ones"
    );
}

#[test]
fn cancelling_a_workflow_cancels_its_queued_steps_and_ends_with_its_running_ones() {
    let mut w = World::new();
    let root = w.trigger("w", None);
    let first = w.claim();
    w.complete(&first, ok);
    let second = w.claim();
    // b, c, e run; cancel the workflow: they are asked to stop.
    assert_eq!(
        w.catalog.cancel_run(root, "op").unwrap(),
        CancelOutcome::Requested
    );
    let asked: i64 = w
        .conn()
        .query_row(
            "SELECT count(*) FROM job_run WHERE pid = ?1 AND cancel_requested = 1",
            [root],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(asked, 3);
    // One finishes before its node cancels it, the others are cancelled: nothing new starts.
    let (_, queued) = w.complete(&second, |r| {
        if &*r.job_name == "flaky" {
            ok(r)
        } else {
            Outcome::Cancelled("cancelled by an operator while it ran".into())
        }
    });
    assert!(queued.is_empty());
    assert!(w.claim().is_empty());
    let steps = w.steps(root);
    assert_eq!(steps["d"], "skipped");
    assert_eq!(w.run(root).0, "cancelled");
    assert!(w.run(root).1.is_some());
}

#[test]
fn a_run_that_spawned_runs_waits_for_them_and_ends_with_the_minimum_over_its_tree() {
    let mut w = World::new();
    for failing in [false, true] {
        let parent = w.trigger("a", None);
        let claimed = w.claim();
        let now = w.clock;
        let mut queued = Vec::new();
        let kids: Vec<i64> = (0..3)
            .map(|_| tree::spawn(w.catalog.writer(), parent, "b", None, now, &mut queued).unwrap())
            .collect();
        assert_eq!(queued.len(), 3);
        // The parent's own execution ends first: it waits, its instance free.
        let (recorded, _) = w.complete(&claimed, ok);
        assert_eq!(recorded, [Recorded::Done(RunStatus::Succeeded, None)]);
        assert_eq!(w.run(parent), ("running".into(), None, 3));
        let in_progress: i64 = w
            .conn()
            .query_row(
                "SELECT in_progress FROM job WHERE job_name = 'a'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(in_progress, 0, "a waiting run executes nowhere");
        // A grandchild, spawned by a child while it runs.
        let children = w.claim();
        let now = w.clock;
        let grandchild = tree::spawn(
            w.catalog.writer(),
            children[0].run_id,
            "b",
            None,
            now,
            &mut queued,
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
}

#[test]
fn a_finished_tree_is_pruned_whole_and_a_running_one_not_at_all() {
    let mut w = World::new();
    let done = w.trigger("w", None);
    w.drain(ok);
    assert_eq!(w.run(done).0, "succeeded");
    let running = w.trigger("w", None);
    let first = w.claim();
    w.complete(&first, ok);
    let total = |w: &mut World| -> i64 {
        w.conn()
            .query_row("SELECT count(*) FROM job_run", [], |r| r.get(0))
            .unwrap()
    };
    let before = total(&mut w);
    let pruned = upkeep::prune_runs(w.catalog.writer(), i64::MAX).unwrap();
    assert_eq!(pruned, 6, "the finished workflow's root and its five steps");
    assert_eq!(total(&mut w), before - 6);
    assert_eq!(w.run(running).0, "running");
}

#[test]
fn a_workflow_step_cannot_be_removed_and_a_removed_parent_leaves_its_children_detached() {
    let mut w = World::new();
    let err = w.catalog.remove_job("flaky", "t").unwrap_err().to_string();
    assert!(err.contains("step `c` of workflow `w`"), "{err}");
    // A run of `a` that spawned a run of `b`, both ended; then `a` goes.
    let parent = w.trigger("a", None);
    let claimed = w.claim();
    let now = w.clock;
    let child = tree::spawn(w.catalog.writer(), parent, "b", None, now, &mut Vec::new()).unwrap();
    w.complete(&claimed, ok);
    w.drain(ok);
    assert_eq!(w.run(parent).0, "succeeded");
    w.catalog
        .writer()
        .execute("DELETE FROM job WHERE job_name = 'w'", [])
        .unwrap();
    w.catalog.remove_job("a", "t").unwrap();
    let (pid, stump): (Option<i64>, Option<i64>) = w
        .conn()
        .query_row(
            "SELECT pid, stump FROM job_run WHERE run_id = ?1",
            [child],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(
        (pid, stump),
        (None, None),
        "the child's history stays, detached"
    );
}

#[test]
fn a_step_its_node_died_executing_is_requeued_in_place_then_quarantined_failing_its_workflow() {
    let mut w = World::new();
    let root = w.trigger("w", None);
    let first = w.claim();
    w.complete(&first, ok);
    // `flaky` (step c) allows two attempts: the node's second death during it quarantines it.
    for death in 1..=2 {
        let runs = w.claim();
        let c = runs
            .iter()
            .find(|r| &*r.job_name == "flaky")
            .unwrap()
            .clone();
        assert!(node::mark_executing(w.conn(), c.run_id, c.claim_token, 0).unwrap());
        if death == 2 {
            let others: Vec<ClaimedRun> = runs
                .iter()
                .filter(|r| r.run_id != c.run_id)
                .cloned()
                .collect();
            w.complete(&others, ok);
        }
        let (now, node) = (w.clock, w.node);
        let recovery = node::recover_node_runs(w.conn(), node, now).unwrap();
        if death == 1 {
            assert_eq!(recovery.requeued.len(), 3, "b, c and e back in the queue");
            assert_eq!(w.run(root).0, "running");
        } else {
            assert_eq!(recovery.quarantined, [(c.run_id, 2)]);
        }
    }
    let steps = w.steps(root);
    assert_eq!(
        (steps["c"].as_str(), steps["d"].as_str()),
        ("dead", "skipped"),
        "{steps:?}"
    );
    let (status, finished, open) = w.run(root);
    assert_eq!(
        (status.as_str(), finished.is_some(), open),
        ("failed", true, 0),
        "the workflow ended with its quarantined step"
    );
}
