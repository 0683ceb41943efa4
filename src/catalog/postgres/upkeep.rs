//! The upkeep of a PostgreSQL catalog that a node's built-in jobs and health sampling do:
//! samples stored, runs stuck past their timeout failed, old runs and stats pruned — the
//! SQLite catalog's rules (`catalog::upkeep`), with PostgreSQL's statements where its schema
//! differs (a job's runs in progress are tallied per node; a run's earlier attempt is a row
//! its retry references). SQLite's own maintenance (`maintain`, `quick_check`, backups) has
//! no counterpart here: the server does its own (autovacuum, its backups).
//!
//! Also the reads a node makes beside its loads: where a run stands, the enabled objects.

use std::collections::BTreeMap;

use super::{PgCatalog, query};
use crate::catalog::CatalogError;
use crate::catalog::runs::{self, RunEnd};
use crate::catalog::tree::{self, Ended};
use crate::catalog::upkeep::{self, StatSample};
use crate::model::RunStatus;

/// The roots of the trees of the stuck runs, locked in id order before the runs are: every
/// change to a tree takes its root first (`catalog::tree`).
const LOCK_STUCK_TREES: &str = "SELECT run_id FROM job_run WHERE run_id IN (
        SELECT coalesce(r.stump, r.run_id) FROM job_run r JOIN job j ON j.job_id = r.job_id
        WHERE r.status = 'running' AND r.own_status IS NULL AND r.pid IS NOT NULL
          AND j.timeout > 0 AND r.started_at + j.timeout + $2 < $1)
    ORDER BY run_id FOR UPDATE";
/// Stuck runs, failed: their jobs, the nodes that held them, and their places in trees.
const FAIL_STUCK: &str = "UPDATE job_run r SET status = 'failed', finished_at = $1,
        error = 'reset by job_state_reset: running past its timeout', lease_until = NULL
    FROM job j
    WHERE j.job_id = r.job_id AND r.status = 'running' AND r.own_status IS NULL
      AND j.timeout > 0 AND r.started_at + j.timeout + $2 < $1
    RETURNING r.job_id, r.node_id, r.pid, r.step";

/// Finished runs older than `$1` outside trees, and trees' roots, as
/// `catalog::upkeep::prune_runs` chooses them, less those a later attempt's row still names
/// (`retry_of` is a foreign key here): they go at a later pass, once their retries went.
macro_rules! prunable {
    () => {
        "run_id < coalesce((SELECT run_id FROM job_run
            WHERE created_at >= $1 ORDER BY run_id LIMIT 1), 9223372036854775807)
        AND finished_at IS NOT NULL AND finished_at < $1
        AND status <> 'queued' AND status <> 'claimed' AND status <> 'running'
        AND stump IS NULL AND pid IS NULL
        AND NOT EXISTS (SELECT 1 FROM job_run n WHERE n.retry_of = job_run.run_id)"
    };
}
/// The members of the trees whose roots a prune deletes, first (they name their roots): a tree
/// goes whole, with its root, which ended last. One statement, so members naming each other
/// (parents, earlier attempts) go together.
const PRUNE_TREE_MEMBERS: &str = concat!(
    "DELETE FROM job_run WHERE stump IN (SELECT run_id FROM job_run WHERE ",
    prunable!(),
    ")"
);
const PRUNE_RUNS: &str = concat!("DELETE FROM job_run WHERE ", prunable!());

/// Most passes of a prune: one per attempt of the longest retry chain.
const PRUNE_PASSES: usize = 32;

impl PgCatalog {
    /// Stores samples taken at `at` (see `catalog::upkeep::record_stats`).
    pub fn record_stats(
        &self,
        node_id: i64,
        at: i64,
        stats: Vec<StatSample>,
    ) -> Result<(), CatalogError> {
        self.transact(move |tx| upkeep::record_stats(tx, node_id, at, &stats))
    }

    /// Deletes stat rows sampled before `before`.
    pub fn prune_stats(&self, before: i64) -> Result<usize, CatalogError> {
        self.transact(move |tx| upkeep::prune_stats(tx, before))
    }

    /// Deletes finished runs that ended before `before` (epoch ms), a retry chain from its
    /// last attempt back, a tree only whole with its root. Returns how many.
    pub fn prune_runs(&self, before: i64) -> Result<usize, CatalogError> {
        self.transact(move |tx| {
            let mut deleted = 0;
            for _ in 0..PRUNE_PASSES {
                let n = tx.execute(PRUNE_TREE_MEMBERS, &[&before])? as usize
                    + tx.execute(PRUNE_RUNS, &[&before])? as usize;
                deleted += n;
                if n == 0 {
                    break;
                }
            }
            Ok(deleted)
        })
    }

    /// Fails runs running longer than their job's timeout plus `grace_ms` (their node died
    /// without recording them, or lost them) and counts them ended on their jobs' tallies, on
    /// the nodes that held them; a failed run in a tree fails it as any failure does. Returns
    /// how many.
    pub fn fail_stuck_runs(&self, now: i64, grace_ms: i64) -> Result<usize, CatalogError> {
        self.transact(move |tx| {
            query(tx, LOCK_STUCK_TREES, &[&now, &grace_ms])?;
            let failed = query(tx, FAIL_STUCK, &[&now, &grace_ms])?;
            let mut ended: BTreeMap<(i64, i64), i64> = BTreeMap::new();
            // A failure queues nothing in its tree.
            let mut queued = Vec::new();
            for r in &failed {
                let node: Option<i64> = r.get(1);
                *ended.entry((r.get(0), node.unwrap_or(0))).or_default() += 1;
                let end = Ended {
                    pid: r.get(2),
                    step: r.get(3),
                    status: RunStatus::Failed,
                };
                tree::on_end(&mut *tx, end, now, &mut queued)?;
            }
            super::node::tally_recovered(tx, ended)?;
            Ok(failed.len())
        })
    }

    /// Where run `run_id` stands (`None`: no such run).
    pub fn run_end(&self, run_id: i64) -> Result<Option<RunEnd>, CatalogError> {
        self.transact(move |tx| runs::run_end(tx, run_id))
    }

    /// Every enabled object: name and `conn_string`.
    pub fn enabled_objects(&self) -> Result<Vec<(String, Option<String>)>, CatalogError> {
        self.transact(|tx| upkeep::all_objects(tx))
    }

    /// An enabled object's `conn_string` (`None`: no such object).
    pub fn object_conn_string(&self, name: &str) -> Result<Option<Option<String>>, CatalogError> {
        let name = name.to_string();
        self.transact(move |tx| crate::catalog::object_conn_string(tx, &name))
    }

    /// The instances the policy set for processors on `node_id`.
    pub fn instances(
        &self,
        node_id: i64,
    ) -> Result<std::collections::HashMap<i64, u32>, CatalogError> {
        self.transact(move |tx| crate::catalog::activation::instances(tx, node_id))
    }
}
