//! Operations on runs: list with filters, show one, show its tree, cancel, retry.

use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

use super::view::{Time, json_of};
use super::{OpError, Ops};
use crate::catalog::{CancelOutcome, RunFilter, RunRow};
use crate::model::RunStatus;

/// The most runs one listing returns.
pub const MAX_RUNS: i64 = 1000;

/// Which runs to list.
#[derive(Debug, Clone, Default)]
pub struct RunQuery {
    /// Only this job's runs.
    pub job: Option<String>,
    /// Only runs in this status.
    pub status: Option<RunStatus>,
    /// Only runs claimed by this node.
    pub node: Option<String>,
    /// Only runs created at or after this instant (epoch ms).
    pub since: Option<i64>,
    /// Only runs created before this instant (epoch ms).
    pub until: Option<i64>,
    /// Only runs older than this run id: the next page after a listing whose oldest run it is.
    pub before: Option<i64>,
    /// Only runs newer than this run id (a window that bounds what a rare filter reads).
    pub after: Option<i64>,
    /// At most this many (1–[`MAX_RUNS`]).
    pub limit: i64,
}

/// A run as listed and shown.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RunView {
    /// Run id.
    pub id: i64,
    /// The job's name.
    pub job: String,
    /// queued, claimed (a node took it, not started yet), running (started), succeeded,
    /// failed, timed_out, skipped, dead, cancelled.
    pub status: String,
    /// 1 for the first attempt.
    pub attempt: i64,
    /// The slot, for scheduled runs.
    pub scheduled_for: Option<Time>,
    /// When it was queued.
    pub created_at: Time,
    /// When its node claimed it.
    pub claimed_at: Option<Time>,
    /// When it began executing (none while it is queued or claimed).
    pub started_at: Option<Time>,
    /// When it ended.
    pub finished_at: Option<Time>,
    /// Its duration, ms.
    pub elapsed_ms: Option<i64>,
    /// The node that claimed it.
    pub node: Option<String>,
    /// Parameters.
    pub params: Option<Json>,
    /// The result.
    pub result: Option<Json>,
    /// The error.
    pub error: Option<String>,
    /// Captured output.
    pub log: Option<String>,
    /// The run that spawned it.
    pub parent: Option<i64>,
    /// The root of its tree.
    pub root: Option<i64>,
    /// The attempt it retries.
    pub retry_of: Option<i64>,
    /// An operator asked to cancel it while it ran.
    pub cancel_requested: bool,
    /// The workflow step it runs (its parent is the workflow's run).
    pub step: Option<String>,
    /// Its claim order (larger first).
    pub priority: i64,
    /// How its priority aged while it waited ("aged from 10 to 40 while it waited"), if it did.
    pub aged: Option<String>,
}

impl RunView {
    /// Its priority in words, with how it aged: "40 (aged from 10 to 40 while it waited)".
    pub fn priority_text(&self) -> String {
        match &self.aged {
            Some(aged) => format!("{} ({aged})", self.priority),
            None => self.priority.to_string(),
        }
    }
}

fn run_view(r: RunRow) -> RunView {
    RunView {
        id: r.run_id,
        job: r.job,
        status: r.status,
        attempt: r.attempt,
        scheduled_for: Time::opt(r.scheduled_for),
        created_at: Time(r.created_at),
        claimed_at: Time::opt(r.claimed_at),
        started_at: Time::opt(r.started_at),
        finished_at: Time::opt(r.finished_at),
        elapsed_ms: r.elapsed,
        node: r.node,
        params: json_of(r.params.as_deref()),
        result: json_of(r.result.as_deref()),
        error: r.error,
        log: r.log,
        parent: r.pid,
        root: r.stump,
        retry_of: r.retry_of,
        cancel_requested: r.cancel_requested,
        step: r.step,
        priority: r.priority,
        aged: r
            .aged_from
            .filter(|&from| from != r.priority)
            .map(|from| format!("aged from {from} to {} while it waited", r.priority)),
    }
}

/// The most runs a tree view holds.
pub const MAX_TREE: i64 = 10_000;

/// A run's tree: its root, and every run below it depth first.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TreeView {
    /// The root run's id.
    pub root: i64,
    /// The root's status: the minimum over the tree (`failed` as soon as a run failed, even
    /// while others run; `succeeded` only once every run has).
    pub status: String,
    /// Whether the tree has ended (its root ends with its last descendant).
    pub ended: bool,
    /// How many of the tree's runs are in each status (superseded attempts not counted).
    pub counts: std::collections::BTreeMap<String, i64>,
    /// The runs, depth first: each run before its children, children in the order they were
    /// queued.
    pub runs: Vec<TreeNode>,
    /// The tree has more runs than [`MAX_TREE`]: the rest are not shown.
    pub truncated: bool,
}

/// One run of a tree.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TreeNode {
    /// 0 for the root, 1 for its children, …
    pub depth: usize,
    /// A later attempt of the same run (a retry, or a workflow's re-run of the step) took its
    /// place.
    pub superseded: bool,
    /// The run.
    pub run: RunView,
}

/// Orders `rows` (a root first) depth first, children by id, and marks superseded attempts.
fn tree_view(rows: Vec<RunRow>, truncated: bool) -> Option<TreeView> {
    use std::collections::{BTreeMap, HashSet};
    let root = rows.first()?.run_id;
    // An attempt is superseded by a later run retrying the same first attempt.
    let mut latest: BTreeMap<i64, i64> = BTreeMap::new();
    for r in &rows {
        let first = r.retry_of.unwrap_or(r.run_id);
        let slot = latest.entry(first).or_insert(r.run_id);
        *slot = (*slot).max(r.run_id);
    }
    let superseded: HashSet<i64> = rows
        .iter()
        .filter(|r| latest.get(&r.retry_of.unwrap_or(r.run_id)) != Some(&r.run_id))
        .map(|r| r.run_id)
        .collect();
    let mut children: BTreeMap<i64, Vec<RunRow>> = BTreeMap::new();
    let mut head = None;
    for r in rows {
        match r.pid {
            Some(pid) if r.run_id != root => children.entry(pid).or_default().push(r),
            _ if head.is_none() => head = Some(r),
            _ => children.entry(root).or_default().push(r),
        }
    }
    let head = head?;
    let (status, ended) = (head.status.clone(), head.finished_at.is_some());
    let mut out = Vec::new();
    let mut stack = vec![(head, 0usize)];
    while let Some((r, depth)) = stack.pop() {
        if let Some(mut kids) = children.remove(&r.run_id) {
            kids.sort_by_key(|k| std::cmp::Reverse(k.run_id));
            stack.extend(kids.into_iter().map(|k| (k, depth + 1)));
        }
        out.push(TreeNode {
            depth,
            superseded: superseded.contains(&r.run_id),
            run: run_view(r),
        });
    }
    // Runs whose parent is not in the view (beyond the limit) come last, at depth 1.
    for (_, kids) in children {
        for k in kids {
            out.push(TreeNode {
                depth: 1,
                superseded: superseded.contains(&k.run_id),
                run: run_view(k),
            });
        }
    }
    let mut counts = BTreeMap::new();
    for n in out.iter().filter(|n| !n.superseded) {
        *counts.entry(n.run.status.clone()).or_insert(0) += 1;
    }
    Some(TreeView {
        root,
        status,
        ended,
        counts,
        runs: out,
        truncated,
    })
}

/// What a cancel did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Cancelled {
    /// The run was queued: it is `cancelled` now and will not run.
    Cancelled,
    /// The run is executing: its node cancels it (a command's process group is killed) and
    /// records it `cancelled`.
    Requested,
}

impl From<CancelOutcome> for Cancelled {
    fn from(o: CancelOutcome) -> Self {
        match o {
            CancelOutcome::Cancelled => Cancelled::Cancelled,
            CancelOutcome::Requested => Cancelled::Requested,
        }
    }
}

impl Ops {
    /// Runs matching `q`, newest first.
    pub fn runs(&self, q: &RunQuery) -> Result<Vec<RunView>, OpError> {
        self.list_runs(q, false)
    }

    /// The runs matching `q` just above `q.after` (the page before a page of
    /// [`Ops::runs`], whose newest run `after` is), newest first.
    pub fn runs_above(&self, q: &RunQuery) -> Result<Vec<RunView>, OpError> {
        let mut runs = self.list_runs(q, true)?;
        runs.reverse();
        Ok(runs)
    }

    fn list_runs(&self, q: &RunQuery, oldest_first: bool) -> Result<Vec<RunView>, OpError> {
        if !(1..=MAX_RUNS).contains(&q.limit) {
            return Err(OpError::invalid(
                "limit",
                format!("must be 1–{MAX_RUNS}, got {}", q.limit),
            ));
        }
        if let (Some(since), Some(until)) = (q.since, q.until)
            && until <= since
        {
            return Err(OpError::invalid(
                "until",
                "must be later than since (an empty range lists nothing)",
            ));
        }
        if let Some(job) = &q.job {
            self.catalog
                .job(job)
                .map_err(self.within(format!("reading job `{job}`")))?;
        }
        let filter = RunFilter {
            job: q.job.clone(),
            status: q.status.map(|s| s.as_str().to_string()),
            node: q.node.clone(),
            since: q.since,
            until: q.until,
            before: q.before,
            after: q.after,
            limit: q.limit,
            oldest_first,
        };
        let rows = self
            .catalog
            .runs(&filter)
            .map_err(self.within("listing runs"))?;
        Ok(rows.into_iter().map(run_view).collect())
    }

    /// The newest and the oldest run id (0 and 0 without runs): where a window of ids starts.
    pub fn run_ids(&self) -> Result<(i64, i64), OpError> {
        self.catalog
            .run_ids()
            .map_err(self.within("reading the run ids"))
    }

    /// One run in full.
    pub fn run(&self, id: i64) -> Result<RunView, OpError> {
        self.catalog
            .run(id)
            .map(run_view)
            .map_err(self.within(format!("reading run {id}")))
    }

    /// The tree run `id` belongs to, from its root.
    pub fn tree(&self, id: i64) -> Result<TreeView, OpError> {
        let rows = self
            .catalog
            .tree(id, MAX_TREE + 1)
            .map_err(self.within(format!("reading the tree of run {id}")))?;
        let truncated = rows.len() as i64 > MAX_TREE;
        let rows = rows.into_iter().take(MAX_TREE as usize).collect();
        tree_view(rows, truncated).ok_or_else(|| {
            OpError::from(crate::catalog::CatalogError::NotFound {
                kind: "run",
                name: id.to_string(),
            })
        })
    }

    /// Cancels a queued run at once, or asks the node executing a running one to cancel it;
    /// a run heading a tree that has not ended is cancelled with its whole tree.
    pub fn cancel_run(&self, id: i64) -> Result<Cancelled, OpError> {
        let actor = self.caller.actor.clone();
        self.catalog
            .cancel_run(id, &actor)
            .map(Cancelled::from)
            .map_err(self.within(format!("cancelling run {id}")))
    }

    /// Queues a new attempt of a run that failed, timed out, died, was cancelled or skipped,
    /// with the same parameters; returns the new run's id.
    pub fn retry_run(&self, id: i64) -> Result<i64, OpError> {
        let actor = self.caller.actor.clone();
        self.catalog
            .retry_run(id, &actor)
            .map_err(self.within(format!("retrying run {id}")))
    }
}
