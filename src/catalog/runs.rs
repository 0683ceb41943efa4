//! Runs as an operator sees them: listing with filters, one run in full, cancel and retry.
//!
//! Invariant: cancel and retry are one transaction each with their audit row; a cancel of a
//! running run only records the request (the node executing it carries it out), so a run's
//! result is still written once, by its claim token.

use serde::Serialize;
use serde_json::Value as Json;

use crate::model::RunStatus;

use super::sql::{Fields, Query, Sql, Tx, Val};
use super::{Catalog, CatalogError, audit_in, not_found, now_ms, tree};

/// Which runs to list.
#[derive(Debug, Clone, Default)]
pub struct RunFilter {
    /// Only this job's runs.
    pub job: Option<String>,
    /// Only runs in this status.
    pub status: Option<String>,
    /// Only runs claimed by this node.
    pub node: Option<String>,
    /// Only runs created at or after this instant (epoch ms).
    pub since: Option<i64>,
    /// Only runs created before this instant (epoch ms).
    pub until: Option<i64>,
    /// Only runs whose id is below this one (keyset paging: the page after the run listed
    /// last; an id range, so a page costs the same however deep it is).
    pub before: Option<i64>,
    /// Only runs whose id is above this one (a window: a filter few runs match reads no
    /// further back than this).
    pub after: Option<i64>,
    /// At most this many.
    pub limit: i64,
    /// The oldest matching runs first (with `after`: the runs just above it, the page before
    /// a page), instead of the newest.
    pub oldest_first: bool,
}

/// A query of runs as [`run_row`] reads them, `$tail` (a WHERE, an ORDER BY) added; the same
/// text on both backends.
macro_rules! select_runs {
    ($($tail:expr),*) => {
        Query::same(concat!(
            "SELECT r.run_id, j.job_name, r.status, r.attempt, r.scheduled_for,
    r.created_at, r.started_at, r.finished_at, r.elapsed, r.params, r.result, r.error, r.log,
    r.pid, r.stump, r.retry_of, n.node_name, r.cancel_requested, r.step, r.claimed_at,
    r.priority, r.aged_from
    FROM job_run r JOIN job j ON j.job_id = r.job_id
    LEFT JOIN node n ON n.node_id = r.node_id",
            $($tail),*
        ))
    };
}

/// A page of runs filtered, in `$order` of run id (`$by_job` says how the job is chosen). The
/// node by its id, looked up once, not compared by name on every run read. A value only tested
/// for NULL is cast, so PostgreSQL knows its type.
macro_rules! select_runs_filtered {
    ($by_job:literal, $order:literal) => {
        select_runs!(concat!(
            " WHERE ",
            $by_job,
            " AND (CAST(?2 AS TEXT) IS NULL OR r.status = ?2)
               AND (CAST(?3 AS TEXT) IS NULL
                    OR r.node_id = (SELECT node_id FROM node WHERE node_name = ?3))
               AND (CAST(?4 AS BIGINT) IS NULL OR r.created_at >= ?4)
               AND (CAST(?6 AS BIGINT) IS NULL OR r.created_at < ?6)
               AND r.run_id < coalesce(?7, 9223372036854775807)
               AND r.run_id > coalesce(?8, -1)
             ORDER BY r.run_id ",
            $order,
            " LIMIT ?5"
        ))
    };
}

// One job's runs by its id, so SQLite walks `job_run_job_idx` (job_id, run_id) from the newest
// down: `?1 IS NULL OR j.job_name = ?1` hid the job from the planner, which scanned every run
// newest first for it (350 ms for a job of 100 runs among a million).
const SELECT_RUNS_OF_JOB: Query = select_runs_filtered!(
    "r.job_id = (SELECT job_id FROM job WHERE job_name = ?1)",
    "DESC"
);
const SELECT_RUNS_OF_ANY: Query = select_runs_filtered!("CAST(?1 AS TEXT) IS NULL", "DESC");
const SELECT_RUNS_OF_JOB_UP: Query = select_runs_filtered!(
    "r.job_id = (SELECT job_id FROM job WHERE job_name = ?1)",
    "ASC"
);
const SELECT_RUNS_OF_ANY_UP: Query = select_runs_filtered!("CAST(?1 AS TEXT) IS NULL", "ASC");
const SELECT_RUN: Query = select_runs!(" WHERE r.run_id = ?1");
const SELECT_ROOT: Query =
    Query::same("SELECT coalesce(stump, run_id) FROM job_run WHERE run_id = ?1");
// The root index holds only tree members: a tree costs its own size.
const SELECT_TREE: Query = Query::same(concat!(
    "SELECT * FROM (",
    "SELECT r.run_id, j.job_name, r.status, r.attempt, r.scheduled_for,
    r.created_at, r.started_at, r.finished_at, r.elapsed, r.params, r.result, r.error, r.log,
    r.pid, r.stump, r.retry_of, n.node_name, r.cancel_requested, r.step, r.claimed_at,
    r.priority, r.aged_from
    FROM job_run r JOIN job j ON j.job_id = r.job_id
    LEFT JOIN node n ON n.node_id = r.node_id WHERE r.run_id = ?1) root UNION ALL
    SELECT * FROM (",
    "SELECT r.run_id, j.job_name, r.status, r.attempt, r.scheduled_for,
    r.created_at, r.started_at, r.finished_at, r.elapsed, r.params, r.result, r.error, r.log,
    r.pid, r.stump, r.retry_of, n.node_name, r.cancel_requested, r.step, r.claimed_at,
    r.priority, r.aged_from
    FROM job_run r JOIN job j ON j.job_id = r.job_id
    LEFT JOIN node n ON n.node_id = r.node_id WHERE r.stump = ?1 ORDER BY r.run_id
    LIMIT ?2 - 1) below"
));

/// One `job_run` row.
#[derive(Debug, Clone, Serialize)]
pub struct RunRow {
    /// `run_id`.
    pub run_id: i64,
    /// The job's name.
    pub job: String,
    /// queued, claimed, running, succeeded, …
    pub status: String,
    /// 1 for the first attempt.
    pub attempt: i64,
    /// The slot (epoch ms), for scheduled runs.
    pub scheduled_for: Option<i64>,
    /// Enqueued at (epoch ms).
    pub created_at: i64,
    /// Began executing (epoch ms); none while queued or claimed.
    pub started_at: Option<i64>,
    /// Ended (epoch ms).
    pub finished_at: Option<i64>,
    /// Duration (ms).
    pub elapsed: Option<i64>,
    /// Parameters (JSON).
    pub params: Option<String>,
    /// Result (JSON).
    pub result: Option<String>,
    /// Error text.
    pub error: Option<String>,
    /// Captured output.
    pub log: Option<String>,
    /// Parent run.
    pub pid: Option<i64>,
    /// Root run.
    pub stump: Option<i64>,
    /// The attempt this one retries.
    pub retry_of: Option<i64>,
    /// The node that claimed it.
    pub node: Option<String>,
    /// An operator asked to cancel it while it ran.
    pub cancel_requested: bool,
    /// The workflow step it runs (its parent is the workflow's run).
    pub step: Option<String>,
    /// When its node claimed it (epoch ms).
    pub claimed_at: Option<i64>,
    /// Its claim order now.
    pub priority: i64,
    /// The priority it was queued with, when it aged since.
    pub aged_from: Option<i64>,
}

fn run_row(r: &Fields<'_>) -> Result<RunRow, CatalogError> {
    Ok(RunRow {
        run_id: r.int(0)?,
        job: r.text(1)?,
        status: r.text(2)?,
        attempt: r.int(3)?,
        scheduled_for: r.opt_int(4)?,
        created_at: r.int(5)?,
        started_at: r.opt_int(6)?,
        finished_at: r.opt_int(7)?,
        elapsed: r.opt_int(8)?,
        params: r.opt_text(9)?,
        result: r.opt_text(10)?,
        error: r.opt_text(11)?,
        log: r.opt_text(12)?,
        pid: r.opt_int(13)?,
        stump: r.opt_int(14)?,
        retry_of: r.opt_int(15)?,
        node: r.opt_text(16)?,
        cancel_requested: r.flag(17)?,
        step: r.opt_text(18)?,
        claimed_at: r.opt_int(19)?,
        priority: r.int(20)?,
        aged_from: r.opt_int(21)?,
    })
}

/// What a cancel did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelOutcome {
    /// The run was queued and is `cancelled` now.
    Cancelled,
    /// The run executes: its node was asked to cancel it.
    Requested,
}

const SELECT_STATUS: Query = Query::same("SELECT status, pid, step FROM job_run WHERE run_id = ?1");
const CANCEL_QUEUED: Query = Query::same(
    "UPDATE job_run SET status = 'cancelled', finished_at = ?2,
    error = ?3 WHERE run_id = ?1 AND status = 'queued'",
);
const REQUEST_CANCEL: Query = Query::same(
    "UPDATE job_run SET cancel_requested = 1 WHERE run_id = ?1
    AND (status = 'claimed' OR status = 'running')",
);
// The nodes' catalog watch reloads when the generation moves; a node then looks for cancel
// requests among the runs it executes.
// PostgreSQL's nodes hear the generation on `jobvisor_catalog`, as its triggers announce it.
const BUMP_GENERATION: Query = Query::each(
    "UPDATE catalog_meta SET value = value + 1 WHERE key = 'generation'",
    "WITH g AS (UPDATE catalog_meta SET value = (value::bigint + 1)::text
                WHERE key = 'generation' RETURNING value)
     SELECT pg_notify('jobvisor_catalog', value) FROM g",
);
// A run waiting for its children executes nowhere: its node has nothing to cancel.
const SELECT_CANCEL_REQUESTED: Query = Query::each(
    "SELECT run_id FROM job_run INDEXED BY job_run_running_job_idx
    WHERE (status = 'claimed' OR status = 'running') AND node_id = ?1 AND cancel_requested = 1 AND own_status IS NULL",
    "SELECT run_id FROM job_run
    WHERE (status = 'claimed' OR status = 'running') AND node_id = $1 AND cancel_requested = 1 AND own_status IS NULL",
);
const SELECT_FOR_RETRY: Query = Query::same(
    "SELECT r.status, r.params, j.job_id, j.processor_id, j.priority,
    j.job_name, r.pid, coalesce(r.stump, r.pid), t.job_type = 'workflow'
    FROM job_run r JOIN job j ON j.job_id = r.job_id
    JOIN job_type t ON t.job_type_id = j.job_type_id WHERE r.run_id = ?1",
);
const INSERT_MANUAL_RETRY: Query = Query::each(
    "INSERT INTO job_run (job_id, processor_id, priority,
    run_after, params, status, attempt, retry_of, created_at)
    VALUES (?1, ?2, ?3, ?4, ?5, 'queued', 1, ?6, ?4)",
    "INSERT INTO job_run (job_id, processor_id, priority,
    run_after, params, status, attempt, retry_of, created_at)
    VALUES ($1, $2, $3, $4, $5, 'queued', 1, $6, $4) RETURNING run_id",
);

/// What a retry reads of the run.
struct RetryRow {
    status: String,
    params: Option<String>,
    job_id: i64,
    processor_id: i64,
    priority: i64,
    job: String,
    pid: Option<i64>,
    root: Option<i64>,
    workflow: bool,
}

/// Statuses a run can be retried from.
const RETRYABLE: [&str; 5] = ["failed", "timed_out", "dead", "cancelled", "skipped"];

/// Where a run stands, for code awaiting its end: its status and outcome, and the run that
/// retries it (its next attempt), once queued.
#[derive(Debug, Clone)]
pub struct RunEnd {
    /// Its status.
    pub status: RunStatus,
    /// Its attempt.
    pub attempt: i64,
    /// What it returned (JSON).
    pub result: Option<Json>,
    /// Why it failed.
    pub error: Option<String>,
    /// Its next attempt, if one was queued.
    pub retry: Option<i64>,
}

const SELECT_RUN_END: Query = Query::same(
    "SELECT r.status, r.attempt, r.result, r.error,
    (SELECT n.run_id FROM job_run n
      WHERE n.retry_of = coalesce(r.retry_of, r.run_id) AND n.attempt = r.attempt + 1)
    FROM job_run r WHERE r.run_id = ?1",
);

/// Where run `run_id` stands; `None` when there is no such run.
pub fn run_end(mut c: impl Sql, run_id: i64) -> Result<Option<RunEnd>, CatalogError> {
    let row = c.row(&SELECT_RUN_END, &[run_id.into()], |r| {
        Ok((
            r.text(0)?,
            r.int(1)?,
            r.opt_text(2)?,
            r.opt_text(3)?,
            r.opt_int(4)?,
        ))
    })?;
    let Some((status, attempt, result, error, retry)) = row else {
        return Ok(None);
    };
    let status = RunStatus::parse(&status)
        .ok_or_else(|| CatalogError::Corrupt(format!("run {run_id}: status `{status}`")))?;
    Ok(Some(RunEnd {
        status,
        attempt,
        result: result.and_then(|r| serde_json::from_str(&r).ok()),
        error,
        retry,
    }))
}

/// The runs node `node_id` executes that an operator asked to cancel.
pub fn cancel_requested(mut c: impl Sql, node_id: i64) -> Result<Vec<i64>, CatalogError> {
    c.rows(&SELECT_CANCEL_REQUESTED, &[node_id.into()], |r| r.int(0))
}

impl Catalog {
    /// Runs filtered, newest first (or oldest first: [`RunFilter::oldest_first`]).
    pub fn runs(&self, filter: &RunFilter) -> Result<Vec<RunRow>, CatalogError> {
        let filter = filter.clone();
        self.reading(move |tx| {
            // The time range becomes a range of run ids too (runs are inserted with the clock
            // of the moment, so ids rise with `created_at`): without it a range that holds few
            // runs read every run newer than it. The times stay in the WHERE, exact.
            let (mut before, mut after) = (filter.before, filter.after);
            if filter.since.is_some() || filter.until.is_some() {
                let (max, min) = super::browse::run_id_range(&mut *tx)?;
                if let Some(since) = filter.since {
                    let lo = super::browse::first_run_created_from(&mut *tx, since, min, max)?;
                    after = Some(after.map_or(lo - 1, |a| a.max(lo - 1)));
                }
                if let Some(until) = filter.until {
                    let hi = super::browse::first_run_created_from(&mut *tx, until, min, max)?;
                    before = Some(before.map_or(hi, |b| b.min(hi)));
                }
            }
            let query = match (filter.job.is_some(), filter.oldest_first) {
                (true, false) => &SELECT_RUNS_OF_JOB,
                (false, false) => &SELECT_RUNS_OF_ANY,
                (true, true) => &SELECT_RUNS_OF_JOB_UP,
                (false, true) => &SELECT_RUNS_OF_ANY_UP,
            };
            let vals = [
                filter.job.clone().into(),
                filter.status.clone().into(),
                filter.node.clone().into(),
                Val::Int(filter.since),
                filter.limit.into(),
                Val::Int(filter.until),
                Val::Int(before),
                Val::Int(after),
            ];
            tx.rows(query, &vals, run_row)
        })
    }

    /// One run by id.
    pub fn run(&self, run_id: i64) -> Result<RunRow, CatalogError> {
        self.reading(move |tx| {
            tx.row(&SELECT_RUN, &[run_id.into()], run_row)?
                .ok_or_else(|| not_found("run", &run_id.to_string()))
        })
    }

    /// Every run of the tree `run_id` belongs to, its root first, then by id (at most `limit`
    /// runs, the root included).
    pub fn tree(&self, run_id: i64, limit: i64) -> Result<Vec<RunRow>, CatalogError> {
        self.reading(move |tx| {
            let root = tx
                .row(&SELECT_ROOT, &[run_id.into()], |r| r.int(0))?
                .ok_or_else(|| not_found("run", &run_id.to_string()))?;
            tx.rows(&SELECT_TREE, &[root.into(), limit.into()], run_row)
        })
    }

    /// Cancels a queued run, or records a request to cancel a running one (its node carries it
    /// out); a run heading a tree that has not ended (a workflow's run, a run that spawned
    /// runs) is cancelled with its whole tree. Refused for a run that has ended.
    pub fn cancel_run(&self, run_id: i64, actor: &str) -> Result<CancelOutcome, CatalogError> {
        let actor = actor.to_string();
        self.writing(move |tx| cancel_in(tx, run_id, &actor, now_ms()))
    }

    /// Queues a fresh attempt (attempt 1, its own retry budget) of a run that ended without
    /// success, with its parameters, on its job's current processor. Returns the new run id. A
    /// workflow's run is retried in place (the same id is returned): its failed, cancelled and
    /// skipped steps run again, the steps that succeeded keep their results. A run inside a
    /// tree is retried through its root.
    pub fn retry_run(&self, run_id: i64, actor: &str) -> Result<i64, CatalogError> {
        let actor = actor.to_string();
        self.writing(move |tx| retry_in(tx, run_id, &actor, now_ms()))
    }
}

/// [`Catalog::cancel_run`] in the caller's transaction.
fn cancel_in(
    tx: &mut Tx<'_, '_>,
    run_id: i64,
    actor: &str,
    now: i64,
) -> Result<CancelOutcome, CatalogError> {
    // The tree's lock first (on PostgreSQL), then the run's state as it is under it.
    let open_tree = tree::has_open_tree(&mut *tx, run_id)?;
    let (status, pid, step) = tx
        .row(&SELECT_STATUS, &[run_id.into()], |r| {
            Ok((r.text(0)?, r.opt_int(1)?, r.opt_text(2)?))
        })?
        .ok_or_else(|| not_found("run", &run_id.to_string()))?;
    // The node notices the catalog changed and wakes its processors for whatever this
    // queued: the runs queued here need no announcement.
    let mut queued = Vec::new();
    let outcome = if open_tree {
        let why = format!("cancelled by {actor} with its tree, before it ran");
        let done = tree::cancel_tree(&mut *tx, run_id, &why, now, &mut queued)?;
        if done.requested > 0 {
            tx.exec(&BUMP_GENERATION, &[])?;
            CancelOutcome::Requested
        } else {
            CancelOutcome::Cancelled
        }
    } else {
        match status.as_str() {
            "queued" => {
                let why = format!("cancelled by {actor} before it ran");
                tx.exec(
                    &CANCEL_QUEUED,
                    &[run_id.into(), now.into(), why.as_str().into()],
                )?;
                let ended = tree::Ended {
                    pid,
                    step,
                    status: RunStatus::Cancelled,
                };
                tree::on_end(&mut *tx, ended, now, &mut queued)?;
                CancelOutcome::Cancelled
            }
            "claimed" | "running" => {
                tx.exec(&REQUEST_CANCEL, &[run_id.into()])?;
                tx.exec(&BUMP_GENERATION, &[])?;
                CancelOutcome::Requested
            }
            other => {
                return Err(CatalogError::Conflict(format!(
                    "run {run_id} is {other}: only a queued, claimed or running run can be cancelled"
                )));
            }
        }
    };
    let detail = serde_json::json!({ "run_id": run_id, "was": status });
    audit_in(
        tx,
        now,
        actor,
        "run.cancel",
        &run_id.to_string(),
        Some(&detail),
    )?;
    Ok(outcome)
}

/// [`Catalog::retry_run`] in the caller's transaction.
fn retry_in(tx: &mut Tx<'_, '_>, run_id: i64, actor: &str, now: i64) -> Result<i64, CatalogError> {
    let row = tx
        .row(&SELECT_FOR_RETRY, &[run_id.into()], |r| {
            Ok(RetryRow {
                status: r.text(0)?,
                params: r.opt_text(1)?,
                job_id: r.int(2)?,
                processor_id: r.int(3)?,
                priority: r.int(4)?,
                job: r.text(5)?,
                pid: r.opt_int(6)?,
                root: r.opt_int(7)?,
                workflow: r.flag(8)?,
            })
        })?
        .ok_or_else(|| not_found("run", &run_id.to_string()))?;
    let RetryRow {
        status,
        params,
        job_id,
        processor_id,
        priority,
        job,
        pid,
        root,
        workflow,
    } = row;
    if !RETRYABLE.contains(&status.as_str()) {
        return Err(CatalogError::Conflict(format!(
            "run {run_id} is {status}: only a run that {} can be retried (queue a new run \
             with `jobs run {job}`)",
            "failed, timed out, died, was cancelled or was skipped"
        )));
    }
    if let (Some(_), Some(root)) = (pid, root) {
        return Err(CatalogError::Conflict(format!(
            "run {run_id} is part of the tree of run {root}: retry run {root}, which runs \
             its failed steps again and what depends on them"
        )));
    }
    let (id, detail) = if workflow {
        // The same run again: its failed steps are queued anew, the rest follow.
        let steps = tree::retry_workflow(&mut *tx, run_id, now, &mut Vec::new())?;
        (
            run_id,
            serde_json::json!({ "run_id": run_id, "steps_queued": steps }),
        )
    } else {
        let vals = [
            job_id.into(),
            processor_id.into(),
            priority.into(),
            now.into(),
            params.into(),
            run_id.into(),
        ];
        let id = tx.insert(&INSERT_MANUAL_RETRY, &vals)?;
        (
            id,
            serde_json::json!({ "run_id": run_id, "new_run_id": id }),
        )
    };
    let subject = run_id.to_string();
    audit_in(tx, now, actor, "run.retry", &subject, Some(&detail))?;
    Ok(id)
}
