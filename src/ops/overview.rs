//! What a node's overview shows beyond its status and stats: runs finished per minute by
//! outcome, stuck runs (past their timeout, on a dead, fenced or stopped node, queued runs
//! waiting long), failing jobs, and the decision log filtered. Each question is bounded by the catalog
//! ([`crate::catalog::browse`]): a range of run ids, never the whole history.

use serde::Serialize;

use super::decisions::DecisionView;
use super::view::Time;
use super::{OpError, Ops};
use crate::catalog::browse::{DecisionFilter, StuckRun};

/// The most runs counted for a throughput series (the newest).
pub const THROUGHPUT_SCAN: i64 = 100_000;
/// How many of the newest runs are looked through for failing jobs.
pub const FAILING_WINDOW: i64 = 10_000;
/// A queued run due longer ago than this waits too long.
pub const OVERDUE_MS: i64 = 60_000;

/// Runs that finished in one bucket.
#[derive(Debug, Clone, Serialize)]
pub struct ThroughputPoint {
    /// The bucket's start.
    pub at: Time,
    /// Succeeded.
    pub succeeded: i64,
    /// Failed, timed out or dead.
    pub failed: i64,
    /// Cancelled or skipped.
    pub other: i64,
}

/// Runs finished per bucket over a range.
#[derive(Debug, Clone, Serialize)]
pub struct ThroughputView {
    /// Bucket width, ms.
    pub step_ms: i64,
    /// Every bucket of the range, empty ones too, in time order.
    pub points: Vec<ThroughputPoint>,
    /// Only the newest [`THROUGHPUT_SCAN`] runs were counted.
    pub truncated: bool,
}

/// A run that looks stuck.
#[derive(Debug, Clone, Serialize)]
pub struct StuckRunView {
    /// Run id.
    pub id: i64,
    /// Its job.
    pub job: String,
    /// The node executing it.
    pub node: Option<String>,
    /// When it began.
    pub started_at: Option<Time>,
    /// Why it looks stuck, in words.
    pub why: String,
}

/// Work that does not move.
#[derive(Debug, Clone, Serialize)]
pub struct StuckView {
    /// Executing runs past their timeout, or on a dead, fenced or stopped node.
    pub running: Vec<StuckRunView>,
    /// Queued runs due more than [`OVERDUE_MS`] ago.
    pub overdue: i64,
    /// When the oldest of them became due.
    pub oldest_due: Option<Time>,
}

/// A job whose recent runs failed.
#[derive(Debug, Clone, Serialize)]
pub struct FailingJobView {
    /// Its name.
    pub job: String,
    /// Failed, timed-out or dead runs among the newest [`FAILING_WINDOW`] runs.
    pub failures: i64,
    /// The latest of them.
    pub last_run: i64,
    /// When it ended.
    pub last_at: Option<Time>,
    /// Its error.
    pub last_error: Option<String>,
}

/// Which decisions to list.
#[derive(Debug, Clone, Default)]
pub struct DecisionQuery {
    /// Every node's (`true`) or the caller's node's.
    pub all_nodes: bool,
    /// Only this action (activate, deactivate, stretch, …).
    pub action: Option<String>,
    /// Only this cause (health, pin, minimum, operator).
    pub cause: Option<String>,
    /// Only decisions whose subject or reason contains this.
    pub search: Option<String>,
    /// Only decisions older than this id.
    pub before: Option<i64>,
    /// At most this many (1–[`super::decisions::MAX_DECISIONS`]).
    pub limit: i64,
}

impl Ops {
    /// Runs finished per `step` ms over `[from, to)`, by outcome.
    pub fn throughput(&self, from: i64, to: i64, step: i64) -> Result<ThroughputView, OpError> {
        if step < 1000 || to <= from {
            return Err(OpError::invalid(
                "step",
                "must be at least 1 s over a range",
            ));
        }
        let buckets = ((to - from + step - 1) / step) as usize;
        if buckets > super::node::MAX_BUCKETS as usize {
            return Err(OpError::invalid("step", "too many buckets"));
        }
        let found = self
            .catalog
            .run_outcomes(from, to, step, to - from, THROUGHPUT_SCAN)
            .map_err(self.within("counting finished runs"))?;
        let mut points: Vec<ThroughputPoint> = (0..buckets)
            .map(|i| ThroughputPoint {
                at: Time(from + i as i64 * step),
                succeeded: 0,
                failed: 0,
                other: 0,
            })
            .collect();
        for b in found.buckets {
            let Some(p) = usize::try_from(b.index)
                .ok()
                .and_then(|i| points.get_mut(i))
            else {
                continue;
            };
            match b.status.as_str() {
                "succeeded" => p.succeeded += b.count,
                "failed" | "timed_out" | "dead" => p.failed += b.count,
                _ => p.other += b.count,
            }
        }
        Ok(ThroughputView {
            step_ms: step,
            points,
            truncated: found.truncated,
        })
    }

    /// Runs that look stuck at `now`: executing past their timeout, or on a node that is dead
    /// (no heartbeat within the lease TTL it stated), fenced or stopped. A run that executes
    /// nothing itself — a workflow's run, a parent waiting for its children — is never stuck
    /// for its node: it has none, or none it needs.
    pub fn stuck(&self, now: i64) -> Result<StuckView, OpError> {
        let (running, overdue, oldest) = self
            .catalog
            .stuck_runs(now, now - OVERDUE_MS, 50)
            .map_err(self.within("looking for stuck runs"))?;
        Ok(StuckView {
            running: running
                .into_iter()
                .map(|r| {
                    let why = stuck_why(&r, now);
                    StuckRunView {
                        id: r.run_id,
                        job: r.job,
                        node: Some(r.node),
                        started_at: Time::opt(r.started_at),
                        why,
                    }
                })
                .collect(),
            overdue,
            oldest_due: Time::opt(oldest),
        })
    }

    /// Jobs with failed runs among the newest [`FAILING_WINDOW`] runs, most failures first.
    pub fn failing_jobs(&self, limit: i64) -> Result<Vec<FailingJobView>, OpError> {
        let rows = self
            .catalog
            .failing_jobs(FAILING_WINDOW, limit)
            .map_err(self.within("looking for failing jobs"))?;
        Ok(rows
            .into_iter()
            .map(|f| FailingJobView {
                job: f.job,
                failures: f.failures,
                last_run: f.last_run_id,
                last_at: Time::opt(f.last_at),
                last_error: f.last_error,
            })
            .collect())
    }

    /// Decisions matching `q`, newest first.
    pub fn decision_page(&self, q: &DecisionQuery) -> Result<Vec<DecisionView>, OpError> {
        let max = super::decisions::MAX_DECISIONS;
        if !(1..=max).contains(&q.limit) {
            return Err(OpError::invalid(
                "limit",
                format!("must be 1–{max}, got {}", q.limit),
            ));
        }
        let filter = DecisionFilter {
            node: (!q.all_nodes).then(|| self.caller.node.clone()),
            action: q.action.clone().filter(|a| !a.is_empty()),
            cause: q.cause.clone().filter(|c| !c.is_empty()),
            search: q.search.clone(),
            before: q.before,
            limit: q.limit,
        };
        let rows = self
            .catalog
            .decisions_filtered(&filter)
            .map_err(self.within("reading decisions"))?;
        Ok(rows
            .into_iter()
            .map(|d| DecisionView {
                id: d.id,
                node: d.node,
                at: Time(d.at),
                action: d.action,
                subject: d.subject,
                reason: d.reason,
                evidence: d.evidence,
                cause: d.cause,
            })
            .collect())
    }
}

/// Why a run the catalog found stuck is: its node's state first (fenced, dead, stopped), else
/// its timeout.
fn stuck_why(r: &StuckRun, now: i64) -> String {
    let node = &r.node;
    let n = &r.node_row;
    match (n.fenced_at, n.heartbeat_at) {
        (Some(at), _) => format!(
            "node `{node}` was fenced {} s ago (its heartbeat had stopped)",
            (now - at).max(0) / 1000
        ),
        (None, Some(beat)) if now - beat > n.lease_ttl => format!(
            "node `{node}` has sent no heartbeat for {} s",
            (now - beat) / 1000
        ),
        (None, None) => format!("node `{node}` has stopped"),
        _ if n.pid.is_none() => format!("node `{node}` has stopped"),
        _ => match r.started_at {
            Some(start) => format!(
                "running for {} s, past its timeout of {} s",
                (now - start) / 1000,
                r.timeout / 1000
            ),
            None => "running past its timeout".to_string(),
        },
    }
}
