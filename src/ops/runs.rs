//! Operations on runs: list with filters, show one, cancel, retry.

use serde::Serialize;
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
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct RunView {
    /// Run id.
    pub id: i64,
    /// The job's name.
    pub job: String,
    /// queued, running, succeeded, failed, timed_out, skipped, dead, cancelled.
    pub status: String,
    /// 1 for the first attempt.
    pub attempt: i64,
    /// The slot, for scheduled runs.
    pub scheduled_for: Option<Time>,
    /// When it was queued.
    pub created_at: Time,
    /// When it began.
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
}

fn run_view(r: RunRow) -> RunView {
    RunView {
        id: r.run_id,
        job: r.job,
        status: r.status,
        attempt: r.attempt,
        scheduled_for: Time::opt(r.scheduled_for),
        created_at: Time(r.created_at),
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
    }
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

    /// Cancels a queued run at once, or asks the node executing a running one to cancel it.
    pub fn cancel_run(&mut self, id: i64) -> Result<Cancelled, OpError> {
        let actor = self.caller.actor.clone();
        self.catalog
            .cancel_run(id, &actor)
            .map(Cancelled::from)
            .map_err(self.within(format!("cancelling run {id}")))
    }

    /// Queues a new attempt of a run that failed, timed out, died, was cancelled or skipped,
    /// with the same parameters; returns the new run's id.
    pub fn retry_run(&mut self, id: i64) -> Result<i64, OpError> {
        let actor = self.caller.actor.clone();
        self.catalog
            .retry_run(id, &actor)
            .map_err(self.within(format!("retrying run {id}")))
    }
}
