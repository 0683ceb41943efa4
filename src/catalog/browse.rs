//! Questions a screen asks of a large catalog, each one bounded query: a page of jobs filtered,
//! searched and sorted in SQL (10,000 jobs: the page, not the catalog, is read and mapped),
//! decisions filtered and paged by id, and the overview's counts — runs finished per minute,
//! stuck runs, failing jobs — over a bounded range of run ids, never the whole history.
//!
//! Invariant: read-only; no statement here scans `job_run` beyond the id range it computed
//! first (the runs table holds millions of rows, and an index more on it costs every run three
//! writes: `ARCHITECTURE.md`, "The hot path").

use rusqlite::{Connection, OptionalExtension as _, Row, params};

use super::activation::DecisionRow;
use super::definitions::{SELECT_JOBS, job_record};
use super::{Catalog, CatalogError, JobRecord};

/// How a page of jobs is ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum JobOrder {
    /// By name.
    #[default]
    Name,
    /// Most important first, then by name.
    Priority,
    /// Most recently ended first; never run last.
    LastEnd,
    /// Soonest next run first; none last.
    NextRun,
}

impl JobOrder {
    /// The `ORDER BY` of the order, ascending or reversed; always total (ends on the name).
    fn clause(self, reversed: bool) -> &'static str {
        match (self, reversed) {
            (JobOrder::Name, false) => "j.job_name",
            (JobOrder::Name, true) => "j.job_name DESC",
            (JobOrder::Priority, false) => "j.priority DESC, j.job_name",
            (JobOrder::Priority, true) => "j.priority, j.job_name",
            (JobOrder::LastEnd, false) => {
                "j.last_date_end IS NULL, j.last_date_end DESC, j.job_name"
            }
            (JobOrder::LastEnd, true) => "j.last_date_end IS NOT NULL, j.last_date_end, j.job_name",
            (JobOrder::NextRun, false) => "j.next_run_at IS NULL, j.next_run_at, j.job_name",
            (JobOrder::NextRun, true) => {
                "j.next_run_at IS NOT NULL, j.next_run_at DESC, j.job_name"
            }
        }
    }
}

/// Which jobs, in which order, which page.
#[derive(Debug, Clone, Default)]
pub struct JobFilter {
    /// The node whose activation state is filtered on and returned.
    pub node: String,
    /// Only jobs in this group.
    pub group: Option<String>,
    /// Only jobs on this processor.
    pub processor: Option<String>,
    /// Only enabled (`true`) or disabled jobs.
    pub enabled: Option<bool>,
    /// Only jobs in this activation state on `node`; `new`: no state yet.
    pub activation: Option<String>,
    /// Only jobs of this type.
    pub job_type: Option<String>,
    /// Only jobs whose name or description contains this, ignoring ASCII case.
    pub search: Option<String>,
    /// The order.
    pub order: JobOrder,
    /// The order reversed.
    pub reversed: bool,
    /// Jobs to skip.
    pub offset: i64,
    /// At most this many.
    pub limit: i64,
}

/// A job's activation row on one node: state, pin, reason.
pub type ActivationRow = (String, Option<String>, Option<String>);

/// A page of jobs and how many match over all pages.
#[derive(Debug, Clone)]
pub struct JobRows {
    /// The page's jobs, each with its activation row on the filter's node (none: not decided).
    pub jobs: Vec<(JobRecord, Option<ActivationRow>)>,
    /// Jobs matching the filters.
    pub total: i64,
}

// One WHERE for the page and its count. `instr` rather than LIKE: a search for `_` or `%`
// means those characters, and nothing needs escaping.
const JOB_FROM: &str = "FROM job j
    JOIN job_type t ON t.job_type_id = j.job_type_id
    JOIN job_processor p ON p.processor_id = j.processor_id
    LEFT JOIN job_group g ON g.job_group_id = j.job_group_id
    LEFT JOIN job_activation a ON a.job_id = j.job_id
        AND a.node_id = (SELECT node_id FROM node WHERE node_name = ?1)
    WHERE (?2 IS NULL OR g.job_group_name = ?2) AND (?3 IS NULL OR p.processor_name = ?3)
      AND (?4 IS NULL OR j.status = ?4) AND (?5 IS NULL OR t.job_type = ?5)
      AND (?6 IS NULL OR (?6 = 'new' AND a.state IS NULL) OR a.state = ?6)
      AND (?7 IS NULL OR instr(lower(j.job_name), lower(?7)) > 0
           OR instr(lower(coalesce(j.description, '')), lower(?7)) > 0)";

const SELECT_ACTIVATION_OF: &str = "SELECT a.state, a.pinned, a.reason FROM job_activation a
    WHERE a.job_id = ?1 AND a.node_id = (SELECT node_id FROM node WHERE node_name = ?2)";

/// A run that looks stuck.
#[derive(Debug, Clone)]
pub struct StuckRun {
    /// `run_id`.
    pub run_id: i64,
    /// Its job.
    pub job: String,
    /// The node executing it.
    pub node: Option<String>,
    /// Epoch ms it began.
    pub started_at: Option<i64>,
    /// Epoch ms of its node's last heartbeat.
    pub heartbeat_at: Option<i64>,
    /// The job's timeout, ms (0: none).
    pub timeout: i64,
}

// Running runs are few (a partial index holds them). A run is stuck when it runs past its
// job's timeout, or its node has gone silent (no heartbeat since `?2`): a lease is not renewed
// while a run executes, so an old lease alone says nothing.
const SELECT_STUCK: &str = "SELECT r.run_id, j.job_name, n.node_name, r.started_at,
    n.heartbeat_at, j.timeout
    FROM job_run r INDEXED BY job_run_running_job_idx
    JOIN job j ON j.job_id = r.job_id LEFT JOIN node n ON n.node_id = r.node_id
    WHERE r.status = 'running'
      AND ((j.timeout > 0 AND r.started_at + j.timeout < ?1)
           OR n.heartbeat_at IS NULL OR n.heartbeat_at < ?2)
    ORDER BY r.run_id LIMIT ?3";

const SELECT_OVERDUE: &str = "SELECT count(*), min(run_after) FROM job_run
    INDEXED BY job_run_queue_idx WHERE status = 'queued' AND run_after < ?1";

/// A job whose recent runs failed.
#[derive(Debug, Clone)]
pub struct FailingJob {
    /// Its name.
    pub job: String,
    /// Failed, timed out or dead runs among the runs scanned.
    pub failures: i64,
    /// The latest of them.
    pub last_run_id: i64,
    /// Epoch ms it ended.
    pub last_at: Option<i64>,
    /// Its error.
    pub last_error: Option<String>,
}

// `max(run_id)` makes SQLite take the bare columns from the row holding it (the latest failure).
// NOT INDEXED: grouping by job made SQLite walk `job_run_job_idx` over every run (76 ms on a
// million) instead of the rowid range of the window (3 ms).
const SELECT_FAILING: &str = "SELECT j.job_name, count(*), max(r.run_id), r.finished_at, r.error
    FROM job_run r NOT INDEXED JOIN job j ON j.job_id = r.job_id
    WHERE r.run_id > ?1
      AND (r.status = 'failed' OR r.status = 'timed_out' OR r.status = 'dead')
    GROUP BY r.job_id ORDER BY count(*) DESC, max(r.run_id) DESC LIMIT ?2";

/// Runs that ended in one bucket of time with one status.
#[derive(Debug, Clone)]
pub struct OutcomeBucket {
    /// Its index from the range's start.
    pub index: i64,
    /// The runs' final status.
    pub status: String,
    /// How many.
    pub count: i64,
}

/// Runs finished per bucket, and what was scanned for them.
#[derive(Debug, Clone)]
pub struct Outcomes {
    /// The non-empty buckets.
    pub buckets: Vec<OutcomeBucket>,
    /// The scan stopped at its bound: runs created earlier were not counted.
    pub truncated: bool,
}

// Two subqueries: `max` and `min` in one SELECT make SQLite scan the table (70 ms on a million
// runs); alone, each is one step down the rowid b-tree.
const SELECT_MAX_RUN: &str = "SELECT coalesce((SELECT max(run_id) FROM job_run), 0),
    coalesce((SELECT min(run_id) FROM job_run), 0)";
const SELECT_CREATED_FROM: &str =
    "SELECT run_id, created_at FROM job_run WHERE run_id >= ?1 ORDER BY run_id LIMIT 1";
const SELECT_OUTCOMES: &str = "SELECT (finished_at - ?2) / ?4, status, count(*) FROM job_run
    WHERE run_id >= ?1 AND finished_at >= ?2 AND finished_at < ?3 AND status <> 'queued'
      AND status <> 'running'
    GROUP BY 1, 2 ORDER BY 1";

/// Which decisions.
#[derive(Debug, Clone, Default)]
pub struct DecisionFilter {
    /// Only this node's.
    pub node: Option<String>,
    /// Only this action.
    pub action: Option<String>,
    /// Only this cause.
    pub cause: Option<String>,
    /// Only decisions whose subject or reason contains this, ignoring ASCII case.
    pub search: Option<String>,
    /// Only decisions older than this id (the page after one whose oldest it is).
    pub before: Option<i64>,
    /// At most this many.
    pub limit: i64,
}

const SELECT_DECISIONS_FILTERED: &str = "SELECT d.decision_id, n.node_name, d.at, d.action,
    d.subject, d.reason, d.evidence, d.cause FROM decision d JOIN node n ON n.node_id = d.node_id
    WHERE (?1 IS NULL OR n.node_name = ?1) AND (?2 IS NULL OR d.action = ?2)
      AND (?3 IS NULL OR d.cause = ?3)
      AND (?4 IS NULL OR instr(lower(coalesce(d.subject, '')), lower(?4)) > 0
           OR instr(lower(d.reason), lower(?4)) > 0)
      AND d.decision_id < coalesce(?5, 9223372036854775807)
    ORDER BY d.decision_id DESC LIMIT ?6";

fn decision_row(r: &Row<'_>) -> rusqlite::Result<DecisionRow> {
    let evidence: Option<String> = r.get(6)?;
    Ok(DecisionRow {
        id: r.get(0)?,
        node: r.get(1)?,
        at: r.get(2)?,
        action: r.get(3)?,
        subject: r.get(4)?,
        reason: r.get(5)?,
        evidence: evidence.and_then(|e| serde_json::from_str(&e).ok()),
        cause: r.get(7)?,
    })
}

/// An id that splits the runs at `at`: every run below it was created before `at`, the first
/// one at or above it at or after (an id in a gap may be the answer). By bisection over the id range:
/// runs are inserted with the clock of the moment, so `created_at` rises with the id (a clock
/// step back only makes the bound a little early or late). About 20 point reads.
pub(crate) fn first_run_created_from(
    conn: &Connection,
    at: i64,
    lo: i64,
    hi: i64,
) -> rusqlite::Result<i64> {
    let mut stmt = conn.prepare_cached(SELECT_CREATED_FROM)?;
    let (mut lo, mut hi) = (lo, hi + 1);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let found: Option<(i64, i64)> = stmt
            .query_row([mid], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        match found {
            Some((id, created)) if created < at => lo = id + 1,
            _ => hi = mid,
        }
    }
    Ok(lo)
}

/// The newest and the oldest run id (0 and 0 without runs).
pub(crate) fn run_id_range(conn: &Connection) -> rusqlite::Result<(i64, i64)> {
    conn.prepare_cached(SELECT_MAX_RUN)?
        .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))
}

impl Catalog {
    /// The newest and the oldest run id (0 and 0 without runs).
    pub fn run_ids(&self) -> Result<(i64, i64), CatalogError> {
        Ok(run_id_range(&*self.read()?)?)
    }

    /// Every processor's definition, by name, without reading the jobs (`export` reads the
    /// whole catalog: 60 ms with 10,000 jobs).
    pub fn processor_defs(
        &self,
    ) -> Result<std::collections::BTreeMap<String, crate::jobconf::ProcessorDef>, CatalogError>
    {
        let conn = self.read()?;
        let mut stmt = conn.prepare_cached(super::definitions::SELECT_PROCESSORS)?;
        let rows = stmt.query_map([], super::definitions::processor_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// A page of jobs matching `f`, in its order, and how many match.
    pub fn job_rows(&self, f: &JobFilter) -> Result<JobRows, CatalogError> {
        let conn = self.read()?;
        let enabled = f.enabled.map(i64::from);
        let args = params![
            f.node,
            f.group,
            f.processor,
            enabled,
            f.job_type,
            f.activation,
            f.search.as_deref().filter(|s| !s.is_empty()),
        ];
        let total: i64 = conn
            .prepare_cached(&format!("SELECT count(*) {JOB_FROM}"))?
            .query_row(args, |r| r.get(0))?;
        let sql = format!(
            "SELECT j.job_id {JOB_FROM} ORDER BY {} LIMIT {} OFFSET {}",
            f.order.clause(f.reversed),
            f.limit.max(0),
            f.offset.max(0)
        );
        // LIMIT and OFFSET are written in, not bound: a bound LIMIT expires the statement
        // under STAT4 (see the claim in queue.rs), and both are integers from the caller.
        let ids: Vec<i64> = conn
            .prepare(&sql)?
            .query_map(args, |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        let mut one = conn.prepare_cached(&format!("{SELECT_JOBS} WHERE j.job_id = ?1"))?;
        let mut activation = conn.prepare_cached(SELECT_ACTIVATION_OF)?;
        let mut jobs = Vec::with_capacity(ids.len());
        for id in ids {
            let Some(record) = one.query_row([id], job_record).optional()? else {
                continue;
            };
            let state = activation
                .query_row(params![id, f.node], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })
                .optional()?;
            jobs.push((record?, state));
        }
        Ok(JobRows { jobs, total })
    }

    /// Running runs past their job's timeout at `now` or whose node has sent no heartbeat
    /// since `silent_before`, oldest first, and the queued runs due before `due_before` (how
    /// many, and the oldest due time).
    pub fn stuck_runs(
        &self,
        now: i64,
        silent_before: i64,
        due_before: i64,
        limit: i64,
    ) -> Result<(Vec<StuckRun>, i64, Option<i64>), CatalogError> {
        let conn = self.read()?;
        let stuck = conn
            .prepare_cached(SELECT_STUCK)?
            .query_map(params![now, silent_before, limit], |r| {
                Ok(StuckRun {
                    run_id: r.get(0)?,
                    job: r.get(1)?,
                    node: r.get(2)?,
                    started_at: r.get(3)?,
                    heartbeat_at: r.get(4)?,
                    timeout: r.get(5)?,
                })
            })?
            .collect::<Result<_, _>>()?;
        let (overdue, oldest) = conn
            .prepare_cached(SELECT_OVERDUE)?
            .query_row([due_before], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok((stuck, overdue, oldest))
    }

    /// Jobs with failed, timed-out or dead runs among the newest `window` runs, most failures
    /// first.
    pub fn failing_jobs(&self, window: i64, limit: i64) -> Result<Vec<FailingJob>, CatalogError> {
        let conn = self.read()?;
        let (max, _) = run_id_range(&conn)?;
        let rows = conn
            .prepare_cached(SELECT_FAILING)?
            .query_map(params![max - window, limit], |r| {
                Ok(FailingJob {
                    job: r.get(0)?,
                    failures: r.get(1)?,
                    last_run_id: r.get(2)?,
                    last_at: r.get(3)?,
                    last_error: r.get(4)?,
                })
            })?
            .collect::<Result<_, _>>()?;
        Ok(rows)
    }

    /// Runs that finished in `[from, to)` per `step` ms and final status, counting runs
    /// created since `from - lookback` and at most the newest `max_scan` runs.
    pub fn run_outcomes(
        &self,
        from: i64,
        to: i64,
        step: i64,
        lookback: i64,
        max_scan: i64,
    ) -> Result<Outcomes, CatalogError> {
        let conn = self.read()?;
        let (max, min) = run_id_range(&conn)?;
        let first = first_run_created_from(&conn, from - lookback, min, max)?;
        let floor = max - max_scan + 1;
        let start = first.max(floor);
        let buckets = conn
            .prepare_cached(SELECT_OUTCOMES)?
            .query_map(params![start, from, to, step.max(1)], |r| {
                Ok(OutcomeBucket {
                    index: r.get(0)?,
                    status: r.get(1)?,
                    count: r.get(2)?,
                })
            })?
            .collect::<Result<_, _>>()?;
        Ok(Outcomes {
            buckets,
            truncated: first < floor && min < floor,
        })
    }

    /// Decisions matching `f`, newest first.
    pub fn decisions_filtered(&self, f: &DecisionFilter) -> Result<Vec<DecisionRow>, CatalogError> {
        let conn = self.read()?;
        let rows = conn
            .prepare_cached(SELECT_DECISIONS_FILTERED)?
            .query_map(
                params![
                    f.node,
                    f.action,
                    f.cause,
                    f.search.as_deref().filter(|s| !s.is_empty()),
                    f.before,
                    f.limit
                ],
                decision_row,
            )?
            .collect::<Result<_, _>>()?;
        Ok(rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runs(created: &[(i64, i64)]) -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE job_run (run_id INTEGER PRIMARY KEY, created_at INTEGER)")
            .unwrap();
        for (id, at) in created {
            conn.execute("INSERT INTO job_run VALUES (?1, ?2)", [id, at])
                .unwrap();
        }
        conn
    }

    #[test]
    fn the_first_run_created_from_an_instant_is_found_by_bisection_over_gapped_ids() {
        // Ids with gaps (pruned history), several runs per instant.
        let conn = runs(&[
            (3, 100),
            (4, 100),
            (9, 200),
            (10, 250),
            (11, 250),
            (20, 400),
        ]);
        let (max, min) = run_id_range(&conn).unwrap();
        assert_eq!((max, min), (20, 3));
        // The first run at or above the bound found.
        let first = |at| {
            let bound = first_run_created_from(&conn, at, min, max).unwrap();
            conn.query_row(
                "SELECT coalesce(min(run_id), 21) FROM job_run WHERE run_id >= ?1",
                [bound],
                |r| r.get::<_, i64>(0),
            )
            .unwrap()
        };
        assert_eq!(first(0), 3, "before every run: the oldest");
        assert_eq!(first(100), 3);
        assert_eq!(first(101), 9);
        assert_eq!(first(250), 10, "the first of the runs at that instant");
        assert_eq!(first(251), 20);
        assert_eq!(first(401), 21, "after every run: past the newest");
        let empty = runs(&[]);
        assert_eq!(run_id_range(&empty).unwrap(), (0, 0));
        assert_eq!(first_run_created_from(&empty, 5, 0, 0).unwrap(), 0);
    }
}
