//! The runtime's verb that records runs' ends: a batch of completions, each only with the claim
//! token its run was claimed with (a stale one is counted on the node, not recorded), by one
//! rule for both catalogs (`verdict`: a retry while attempts are left, then `dead`); a run in a
//! tree is carried out in its tree in the same transaction (`record_end`).
//!
//! Invariant: as in `queue`, every function takes a connection already inside the writer's
//! transaction and reads no clock; a plain run's success stays one `UPDATE` (ARCHITECTURE.md,
//! "The hot path").

use std::collections::BTreeMap;

use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value as Json;

use super::CatalogError;
use super::sql::{Query, Sql};
use super::tree::{self, Ended, Queued};
use crate::model::RunStatus;

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Success with a result.
    Succeeded(Json),
    /// An error.
    Failed(String),
    /// Cancelled at its timeout.
    TimedOut(String),
    /// Interrupted by shutdown: goes back to the queue as it was.
    Interrupted,
    /// Cancelled by an operator (`runs cancel`): recorded `cancelled`, never retried.
    Cancelled(String),
    /// Not started by its deadline: recorded `expired` with the reason, never retried.
    Expired(String),
}

/// A finished run, reported by a processor.
#[derive(Debug, Clone)]
pub struct Completion {
    /// The run.
    pub run_id: i64,
    /// Its job.
    pub job_id: i64,
    /// The token it was claimed with.
    pub claim_token: i64,
    /// How it ended.
    pub outcome: Outcome,
    /// Captured output.
    pub log: Option<String>,
    /// When it began executing (a claimed run may wait in its processor's buffer first);
    /// `None` for a run that ends without having started (cancelled or returned while it
    /// waited): it keeps no start time.
    pub started_at: Option<i64>,
    /// When it ended.
    pub finished_at: i64,
    /// When to retry, if it failed and attempts remain (decided by the processor).
    pub retry_at: Option<i64>,
}

impl Completion {
    /// How long it executed, ms (0 when it never started).
    pub fn elapsed(&self) -> i64 {
        self.started_at
            .map_or(0, |began| (self.finished_at - began).max(0))
    }
}

/// What recording a completion did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// The run's final status (for a run that now waits for the runs it spawned, how its own
    /// execution ended), and the retry run if one was queued.
    Done(RunStatus, Option<i64>),
    /// The token did not match: the run was reclaimed (lease expired) or already completed.
    Stale,
}

const SELECT_FOR_COMPLETE: &str = "SELECT r.job_id, r.attempt, r.processor_id,
    r.priority, r.params, coalesce(r.retry_of, r.run_id), j.max_attempts, r.pid, r.stump,
    r.step, r.children_open, r.tree_status
    FROM job_run r JOIN job j ON j.job_id = r.job_id
    WHERE r.run_id = ?1 AND r.claim_token = ?2 AND (r.status = 'claimed' OR r.status = 'running')";
// The plain case: no parent and no child ever ended badly or is still open. A run in a tree
// fails these checks (three columns of the row being updated: no extra read) and is recorded
// by `complete_other`, which knows trees.
const FINISH_SUCCEEDED: &str = "UPDATE job_run SET status = 'succeeded', finished_at = ?3,
    elapsed = ?4, result = ?5, error = NULL, log = ?6, started_at = ?7, lease_until = NULL
    WHERE run_id = ?1 AND claim_token = ?2 AND (status = 'claimed' OR status = 'running')
      AND pid IS NULL AND children_open = 0 AND tree_status IS NULL";
// A run whose children go on waits for them (`tree`): its own ending is kept and its instance
// freed. SQLite clears its claim token, so no later completion matches it; PostgreSQL keeps it
// (its completions refuse a run with `own_status` set), so that a completion whose commit went
// unanswered finds the run it recorded by its token.
const WAIT_FOR_CHILDREN: Query = Query::each(
    "UPDATE job_run SET status = ?2, own_status = ?3, elapsed = ?4,
    result = ?5, error = ?6, log = ?7, started_at = ?8, claim_token = NULL, lease_until = NULL
    WHERE run_id = ?1",
    "UPDATE job_run SET status = $2, own_status = $3, elapsed = $4,
    result = $5, error = $6, log = $7, started_at = $8, lease_until = NULL
    WHERE run_id = $1",
);
const FINISH_RUN: Query = Query::same(
    "UPDATE job_run SET status = ?2, finished_at = ?3, elapsed = ?4,
    result = ?5, error = ?6, log = ?7, started_at = ?8, lease_until = NULL WHERE run_id = ?1",
);
const REQUEUE_RUN: Query = Query::same(
    "UPDATE job_run SET status = 'queued', node_id = NULL,
    claim_token = NULL, claimed_at = NULL, started_at = NULL, lease_until = NULL
    WHERE run_id = ?1",
);
const FINISH_JOB: &str = "UPDATE job SET in_progress = max(in_progress - ?2, 0),
    last_date_end = coalesce(?3, last_date_end), last_elapse = coalesce(?4, last_elapse),
    last_response = coalesce(?5, last_response) WHERE job_id = ?1";
// A retry takes its attempt's place in a tree: same parent, root and step.
const INSERT_RETRY: Query = Query::each(
    "INSERT INTO job_run (job_id, processor_id, priority, run_after, params,
    status, attempt, retry_of, created_at, pid, stump, step)
    VALUES (?1, ?2, ?3, ?4, ?5, 'queued', ?6, ?7, ?8, ?9, ?10, ?11)",
    "INSERT INTO job_run (job_id, processor_id, priority, run_after, params,
    status, attempt, retry_of, created_at, pid, stump, step)
    VALUES ($1, $2, $3, $4, $5, 'queued', $6, $7, $8, $9, $10, $11) RETURNING run_id",
);
const COUNT_STALE: &str =
    "UPDATE node SET stale_completions = stale_completions + ?2 WHERE node_id = ?1";

/// What recording a failure (or a run in a tree) reads of the run (by both catalogs).
pub(crate) struct Finishing {
    pub(crate) job_id: i64,
    pub(crate) attempt: i64,
    pub(crate) processor_id: Option<i64>,
    pub(crate) priority: i64,
    pub(crate) params: Option<String>,
    /// The run's first attempt (what every retry of it retries).
    pub(crate) first_run: i64,
    pub(crate) max_attempts: i64,
    /// Its parent, root and workflow step, when it is in a tree.
    pub(crate) pid: Option<i64>,
    pub(crate) stump: Option<i64>,
    pub(crate) step: Option<String>,
    /// Its children not ended yet, and the worst way one of them ended.
    pub(crate) children_open: i64,
    pub(crate) tree_status: Option<String>,
}

/// What a batch of completions does to one job's row: runs no longer in progress, and the
/// latest end (instant, elapsed, response) among them.
#[derive(Default)]
pub(crate) struct JobEnd {
    /// Runs no longer in progress.
    pub(crate) ended: i64,
    /// The latest end: instant, elapsed, response.
    pub(crate) last: Option<(i64, i64, String)>,
}

impl JobEnd {
    /// Counts one end, keeping the latest.
    pub(crate) fn finished(&mut self, at: i64, elapsed: i64, response: String) {
        self.ended += 1;
        if self.last.as_ref().is_none_or(|(t, _, _)| at >= *t) {
            self.last = Some((at, elapsed, response));
        }
    }
}

/// How a run's end is recorded: its retry, if one is due, and its status, result and error.
pub(crate) struct Verdict {
    /// When its retry runs: a failure or timeout with a retry time and attempts left.
    pub(crate) retry: Option<i64>,
    /// Its status.
    pub(crate) status: RunStatus,
    /// Its result (JSON text), for a success.
    pub(crate) result: Option<String>,
    /// Its error.
    pub(crate) error: Option<String>,
}

/// Both catalogs' one rule for recording `c`, attempt `attempt` of at most `max_attempts`: a
/// failure with attempts left is `failed` and retried at `c.retry_at`; without, it is `dead`
/// when the job allowed more than one attempt. An interruption is requeued, never recorded.
pub(crate) fn verdict(c: &Completion, attempt: i64, max_attempts: i64) -> Verdict {
    let retry = match (&c.outcome, c.retry_at) {
        (Outcome::Failed(_) | Outcome::TimedOut(_), Some(at)) if attempt < max_attempts => Some(at),
        _ => None,
    };
    let (status, result, error) = match &c.outcome {
        Outcome::Succeeded(v) => (RunStatus::Succeeded, Some(v.to_string()), None),
        Outcome::Failed(e) | Outcome::TimedOut(e) if retry.is_none() && max_attempts > 1 => {
            (RunStatus::Dead, None, Some(e.clone()))
        }
        Outcome::Failed(e) => (RunStatus::Failed, None, Some(e.clone())),
        Outcome::TimedOut(e) => (RunStatus::TimedOut, None, Some(e.clone())),
        Outcome::Cancelled(e) => (RunStatus::Cancelled, None, Some(e.clone())),
        Outcome::Expired(e) => (RunStatus::Expired, None, Some(e.clone())),
        Outcome::Interrupted => unreachable!("an interruption is requeued, not recorded"),
    };
    Verdict {
        retry,
        status,
        result,
        error,
    }
}

/// Records a completion if its claim token still holds; otherwise counts it as stale.
pub fn complete(conn: &Connection, node_id: i64, c: &Completion) -> Result<Recorded, CatalogError> {
    Ok(complete_all(conn, node_id, std::slice::from_ref(c))?[0])
}

/// Records completions, each only if its claim token still holds (the others are counted as
/// stale); each job's row is updated once for the whole batch.
pub fn complete_all(
    conn: &Connection,
    node_id: i64,
    completions: &[Completion],
) -> Result<Vec<Recorded>, CatalogError> {
    complete_batch(conn, node_id, completions, &mut Vec::new())
}

/// [`complete_all`], also carrying the completions out in their trees, in the same
/// transaction: a workflow step's successors whose predecessors have all succeeded are queued
/// (appended to `queued`, whose processors the caller wakes), a failed step's dependents
/// skipped, and a run whose last child this was ends with the minimum over its tree.
pub fn complete_batch(
    conn: &Connection,
    node_id: i64,
    completions: &[Completion],
    queued: &mut Vec<Queued>,
) -> Result<Vec<Recorded>, CatalogError> {
    let mut ends: BTreeMap<i64, JobEnd> = BTreeMap::new();
    let mut stale = 0;
    let mut recorded = Vec::with_capacity(completions.len());
    for c in completions {
        let r = match &c.outcome {
            Outcome::Succeeded(v) => match complete_succeeded(conn, c, v, &mut ends)? {
                // Not the plain case: a stale token, or a run in a tree.
                Recorded::Stale => complete_other(conn, c, &mut ends, queued)?,
                done => done,
            },
            _ => complete_other(conn, c, &mut ends, queued)?,
        };
        stale += i64::from(r == Recorded::Stale);
        recorded.push(r);
    }
    let mut finish_job = conn.prepare_cached(FINISH_JOB)?;
    for (job_id, end) in ends {
        let (at, elapsed, response) = match end.last {
            Some((at, elapsed, response)) => {
                let response: String = response.chars().take(1000).collect();
                (Some(at), Some(elapsed), Some(response))
            }
            None => (None, None, None),
        };
        finish_job.execute(params![job_id, end.ended, at, elapsed, response])?;
    }
    if stale > 0 {
        conn.prepare_cached(COUNT_STALE)?
            .execute(params![node_id, stale])?;
    }
    Ok(recorded)
}

/// The common case in one statement: the token check and the update together.
fn complete_succeeded(
    conn: &Connection,
    c: &Completion,
    value: &Json,
    ends: &mut BTreeMap<i64, JobEnd>,
) -> Result<Recorded, CatalogError> {
    let elapsed = c.elapsed();
    let result = value.to_string();
    // No RETURNING: SQLite would build an ephemeral table for it on every call.
    let changed = conn.prepare_cached(FINISH_SUCCEEDED)?.execute(params![
        c.run_id,
        c.claim_token,
        c.finished_at,
        elapsed,
        result,
        c.log,
        c.started_at
    ])?;
    if changed == 0 {
        return Ok(Recorded::Stale);
    }
    ends.entry(c.job_id)
        .or_default()
        .finished(c.finished_at, elapsed, result);
    Ok(Recorded::Done(RunStatus::Succeeded, None))
}

/// Failures, timeouts (with their retry), interruptions, and runs in trees.
fn complete_other(
    conn: &Connection,
    c: &Completion,
    ends: &mut BTreeMap<i64, JobEnd>,
    queued: &mut Vec<Queued>,
) -> Result<Recorded, CatalogError> {
    let row: Option<Finishing> = conn
        .prepare_cached(SELECT_FOR_COMPLETE)?
        .query_row(params![c.run_id, c.claim_token], |r| {
            Ok(Finishing {
                job_id: r.get(0)?,
                attempt: r.get(1)?,
                processor_id: r.get(2)?,
                priority: r.get(3)?,
                params: r.get(4)?,
                first_run: r.get(5)?,
                max_attempts: r.get(6)?,
                pid: r.get(7)?,
                stump: r.get(8)?,
                step: r.get(9)?,
                children_open: r.get(10)?,
                tree_status: r.get(11)?,
            })
        })
        .optional()?;
    let Some(run) = row else {
        return Ok(Recorded::Stale);
    };
    record_end(conn, run, c, ends, queued)
}

/// Records completion `c` of `run` (its claim checked by the caller) by both catalogs' one
/// rule: an interruption goes back to the queue; otherwise its end counts on its job, and a
/// run whose children go on waits for them (a failure shown at once up its tree), while any
/// other ends with the minimum over its tree and either its retry takes its attempt's place in
/// the tree or its end is carried out in the tree (`tree::on_end`: a workflow advances, a
/// parent whose last child this was ends) — in the caller's transaction.
pub(crate) fn record_end(
    mut conn: impl Sql,
    run: Finishing,
    c: &Completion,
    ends: &mut BTreeMap<i64, JobEnd>,
    queued: &mut Vec<Queued>,
) -> Result<Recorded, CatalogError> {
    if c.outcome == Outcome::Interrupted {
        conn.exec(&REQUEUE_RUN, &[c.run_id.into()])?;
        ends.entry(run.job_id).or_default().ended += 1;
        return Ok(Recorded::Done(RunStatus::Queued, None));
    }
    let Verdict {
        retry,
        status,
        result,
        error,
    } = verdict(c, run.attempt, run.max_attempts);
    let elapsed = c.elapsed();
    let response = result.as_deref().or(error.as_deref()).unwrap_or("");
    ends.entry(run.job_id)
        .or_default()
        .finished(c.finished_at, elapsed, response.to_string());
    let verdict = tree::stored_verdict(run.tree_status.as_deref());
    if retry.is_none() && run.children_open > 0 {
        // Its children go on: it waits for them, showing a failure at once if one is known.
        let failed = status != RunStatus::Succeeded || verdict == Some(RunStatus::Failed);
        let shown = if failed && status != RunStatus::Cancelled {
            RunStatus::Failed
        } else {
            RunStatus::Running
        };
        conn.exec(
            &WAIT_FOR_CHILDREN,
            &[
                c.run_id.into(),
                shown.as_str().into(),
                status.as_str().into(),
                elapsed.into(),
                result.into(),
                error.into(),
                (&c.log).into(),
                c.started_at.into(),
            ],
        )?;
        if shown == RunStatus::Failed {
            tree::show_failed(&mut conn, c.run_id)?;
        }
        return Ok(Recorded::Done(status, None));
    }
    // The minimum over its tree, once its own execution and every child have ended.
    let status = match retry {
        Some(_) => status,
        None => tree::final_status(status, verdict),
    };
    let error = match (&error, status) {
        (None, RunStatus::Failed) => Some("a run in its tree failed".to_string()),
        (None, RunStatus::Cancelled) => Some("its tree was cancelled".to_string()),
        _ => error,
    };
    conn.exec(
        &FINISH_RUN,
        &[
            c.run_id.into(),
            status.as_str().into(),
            c.finished_at.into(),
            elapsed.into(),
            result.into(),
            error.into(),
            (&c.log).into(),
            c.started_at.into(),
        ],
    )?;
    let retry_id = match retry {
        Some(at) => Some(conn.insert(
            &INSERT_RETRY,
            &[
                run.job_id.into(),
                run.processor_id.into(),
                run.priority.into(),
                at.into(),
                run.params.into(),
                (run.attempt + 1).into(),
                run.first_run.into(),
                c.finished_at.into(),
                run.pid.into(),
                run.stump.into(),
                run.step.into(),
            ],
        )?),
        None => {
            let ended = Ended {
                pid: run.pid,
                step: run.step,
                status,
            };
            tree::on_end(&mut conn, ended, c.finished_at, queued)?;
            None
        }
    };
    Ok(Recorded::Done(status, retry_id))
}
