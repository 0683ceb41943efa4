//! Questions a screen asks of a large catalog, each one bounded query: a page of jobs filtered,
//! searched and sorted in SQL (10,000 jobs: the page, not the catalog, is read and mapped),
//! decisions filtered and paged by id, and the overview's counts — runs finished per minute,
//! stuck runs, failing jobs — over a bounded range of run ids, never the whole history.
//!
//! Invariant: read-only; no statement here scans `job_run` beyond the id range it computed
//! first (the runs table holds millions of rows, and an index more on it costs every run three
//! writes: `ARCHITECTURE.md`, "The hot path").

use super::activation::{DecisionRow, decision_row};
use super::definitions::{NEXT_RUN, SELECT_JOB_WITH_ID, jobs_of};
use super::sql::{Query, Sql, Tx, Val};
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
    fn clause(self, reversed: bool) -> String {
        let next = NEXT_RUN;
        match (self, reversed) {
            (JobOrder::Name, false) => "j.job_name".into(),
            (JobOrder::Name, true) => "j.job_name DESC".into(),
            (JobOrder::Priority, false) => "j.priority DESC, j.job_name".into(),
            (JobOrder::Priority, true) => "j.priority, j.job_name".into(),
            (JobOrder::LastEnd, false) => {
                "j.last_date_end IS NULL, j.last_date_end DESC, j.job_name".into()
            }
            (JobOrder::LastEnd, true) => {
                "j.last_date_end IS NOT NULL, j.last_date_end, j.job_name".into()
            }
            (JobOrder::NextRun, false) => format!("{next} IS NULL, {next}, j.job_name"),
            (JobOrder::NextRun, true) => format!("{next} IS NOT NULL, {next} DESC, j.job_name"),
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
// means those characters, and nothing needs escaping (PostgreSQL's `strpos`, and the
// bookkeeping an order may sort by from `job_progress`: see `postgres_text`). A value only
// tested for NULL is cast, so that PostgreSQL knows its type.
const JOB_FROM: &str = "FROM job j
    JOIN job_type t ON t.job_type_id = j.job_type_id
    JOIN job_processor p ON p.processor_id = j.processor_id
    LEFT JOIN job_group g ON g.job_group_id = j.job_group_id
    LEFT JOIN job_activation a ON a.job_id = j.job_id
        AND a.node_id = (SELECT node_id FROM node WHERE node_name = ?1)
    WHERE (CAST(?2 AS TEXT) IS NULL OR g.job_group_name = ?2)
      AND (CAST(?3 AS TEXT) IS NULL OR p.processor_name = ?3)
      AND (CAST(?4 AS BIGINT) IS NULL OR j.status = ?4)
      AND (CAST(?5 AS TEXT) IS NULL OR t.job_type = ?5)
      AND (CAST(?6 AS TEXT) IS NULL OR (?6 = 'new' AND a.state IS NULL) OR a.state = ?6)
      AND (CAST(?7 AS TEXT) IS NULL OR instr(lower(j.job_name), lower(?7)) > 0
           OR instr(lower(coalesce(j.description, '')), lower(?7)) > 0)";

const SELECT_ACTIVATION_OF: Query = Query::same(
    "SELECT a.state, a.pinned, a.reason FROM job_activation a
    WHERE a.job_id = ?1 AND a.node_id = (SELECT node_id FROM node WHERE node_name = ?2)",
);

/// A statement of [`JOB_FROM`]'s in PostgreSQL's dialect: `instr` is `strpos` there, and the
/// last end a page may sort by is in the view `job_progress`.
fn postgres_text(sqlite: &str) -> String {
    sqlite
        .replace("instr(", "strpos(")
        .replace("j.last_date_end", "pr.last_date_end")
        .replace(
            "LEFT JOIN job_activation a",
            "JOIN job_progress pr ON pr.job_id = j.job_id\n    LEFT JOIN job_activation a",
        )
}

/// A run that looks stuck.
#[derive(Debug, Clone)]
pub struct StuckRun {
    /// `run_id`.
    pub run_id: i64,
    /// Its job.
    pub job: String,
    /// The node executing it.
    pub node: String,
    /// Epoch ms it began.
    pub started_at: Option<i64>,
    /// The job's timeout, ms (0: none).
    pub timeout: i64,
    /// Its node's row as it stands: whether it is alive, dead, fenced or stopped.
    pub node_row: StuckNode,
}

/// What a stuck run's node row says of it (see `ops::node::NodeState`).
#[derive(Debug, Clone)]
pub struct StuckNode {
    /// Its process id while it runs.
    pub pid: Option<i64>,
    /// Epoch ms of its last heartbeat (none once it stopped).
    pub heartbeat_at: Option<i64>,
    /// The lease TTL it stated, ms: a heartbeat older than this is a dead node's.
    pub lease_ttl: i64,
    /// When another node's sweep fenced it.
    pub fenced_at: Option<i64>,
}

// Running runs are few (a partial index holds them). A run is stuck when it executes (its own
// execution has not ended: a workflow's run, or a parent waiting for its children, executes
// nothing and has no node to die) and runs past its job's timeout, or its node is dead (no
// heartbeat within the lease TTL it stated), fenced or stopped: a lease is not renewed while a
// run executes, so an old lease alone says nothing. The node's own TTL, as the sweep judges it.
const SELECT_STUCK: Query = Query::each(
    "SELECT r.run_id, j.job_name, n.node_name, r.started_at, j.timeout,
    n.pid, n.heartbeat_at, n.lease_ttl, n.fenced_at
    FROM job_run r INDEXED BY job_run_running_job_idx
    JOIN job j ON j.job_id = r.job_id JOIN node n ON n.node_id = r.node_id
    WHERE (r.status = 'claimed' OR r.status = 'running') AND r.own_status IS NULL
      AND ((j.timeout > 0 AND r.started_at + j.timeout < ?1)
           OR n.fenced_at IS NOT NULL OR n.pid IS NULL OR n.heartbeat_at IS NULL
           OR n.heartbeat_at < ?1 - n.lease_ttl)
    ORDER BY r.run_id LIMIT ?2",
    "SELECT r.run_id, j.job_name, n.node_name, r.started_at, j.timeout,
    n.pid, n.heartbeat_at, n.lease_ttl, n.fenced_at
    FROM job_run r JOIN job j ON j.job_id = r.job_id JOIN node n ON n.node_id = r.node_id
    WHERE (r.status = 'claimed' OR r.status = 'running') AND r.own_status IS NULL
      AND ((j.timeout > 0 AND r.started_at + j.timeout < $1)
           OR n.fenced_at IS NOT NULL OR n.pid IS NULL OR n.heartbeat_at IS NULL
           OR n.heartbeat_at < $1 - n.lease_ttl)
    ORDER BY r.run_id LIMIT $2",
);

const SELECT_OVERDUE: Query = Query::each(
    "SELECT count(*), min(run_after) FROM job_run
    INDEXED BY job_run_queue_idx WHERE status = 'queued' AND run_after < ?1",
    "SELECT count(*), min(run_after) FROM job_run WHERE status = 'queued' AND run_after < $1",
);

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
// PostgreSQL takes no bare column beside an aggregate: the latest failure is joined back.
const SELECT_FAILING: Query = Query::each(
    "SELECT j.job_name, count(*), max(r.run_id), r.finished_at, r.error
    FROM job_run r NOT INDEXED JOIN job j ON j.job_id = r.job_id
    WHERE r.run_id > ?1
      AND (r.status = 'failed' OR r.status = 'timed_out' OR r.status = 'dead')
    GROUP BY r.job_id ORDER BY count(*) DESC, max(r.run_id) DESC LIMIT ?2",
    "SELECT j.job_name, f.n, f.last, r.finished_at, r.error
    FROM (SELECT job_id, count(*) AS n, max(run_id) AS last FROM job_run
          WHERE run_id > $1 AND (status = 'failed' OR status = 'timed_out' OR status = 'dead')
          GROUP BY job_id) f
    JOIN job_run r ON r.run_id = f.last JOIN job j ON j.job_id = f.job_id
    ORDER BY f.n DESC, f.last DESC LIMIT $2",
);

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
const SELECT_MAX_RUN: Query = Query::same(
    "SELECT coalesce((SELECT max(run_id) FROM job_run), 0),
    coalesce((SELECT min(run_id) FROM job_run), 0)",
);
const SELECT_CREATED_FROM: Query = Query::same(
    "SELECT run_id, created_at FROM job_run WHERE run_id >= ?1 ORDER BY run_id LIMIT 1",
);
const SELECT_OUTCOMES: Query = Query::same(
    "SELECT (finished_at - ?2) / ?4, status, count(*) FROM job_run
    WHERE run_id >= ?1 AND finished_at >= ?2 AND finished_at < ?3 AND status <> 'queued'
      AND status <> 'claimed' AND status <> 'running'
    GROUP BY 1, 2 ORDER BY 1",
);

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

const SELECT_DECISIONS_FILTERED: Query = Query::each(
    "SELECT d.decision_id, n.node_name, d.at, d.action,
    d.subject, d.reason, d.evidence, d.cause FROM decision d JOIN node n ON n.node_id = d.node_id
    WHERE (CAST(?1 AS TEXT) IS NULL OR n.node_name = ?1)
      AND (CAST(?2 AS TEXT) IS NULL OR d.action = ?2)
      AND (CAST(?3 AS TEXT) IS NULL OR d.cause = ?3)
      AND (CAST(?4 AS TEXT) IS NULL OR instr(lower(coalesce(d.subject, '')), lower(?4)) > 0
           OR instr(lower(d.reason), lower(?4)) > 0)
      AND d.decision_id < coalesce(?5, 9223372036854775807)
    ORDER BY d.decision_id DESC LIMIT ?6",
    "SELECT d.decision_id, n.node_name, d.at, d.action,
    d.subject, d.reason, d.evidence, d.cause FROM decision d JOIN node n ON n.node_id = d.node_id
    WHERE ($1::text IS NULL OR n.node_name = $1) AND ($2::text IS NULL OR d.action = $2)
      AND ($3::text IS NULL OR d.cause = $3)
      AND ($4::text IS NULL OR strpos(lower(coalesce(d.subject, '')), lower($4)) > 0
           OR strpos(lower(d.reason), lower($4)) > 0)
      AND d.decision_id < coalesce($5, 9223372036854775807)
    ORDER BY d.decision_id DESC LIMIT $6",
);

/// An id that splits the runs at `at`: every run below it was created before `at`, the first
/// one at or above it at or after (an id in a gap may be the answer). By bisection over the id range:
/// runs are inserted with the clock of the moment, so `created_at` rises with the id (a clock
/// step back only makes the bound a little early or late). About 20 point reads.
pub(crate) fn first_run_created_from(
    mut c: impl Sql,
    at: i64,
    lo: i64,
    hi: i64,
) -> Result<i64, CatalogError> {
    let (mut lo, mut hi) = (lo, hi + 1);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let found = c.row(&SELECT_CREATED_FROM, &[mid.into()], |r| {
            Ok((r.int(0)?, r.int(1)?))
        })?;
        match found {
            Some((id, created)) if created < at => lo = id + 1,
            _ => hi = mid,
        }
    }
    Ok(lo)
}

/// The newest and the oldest run id (0 and 0 without runs).
pub(crate) fn run_id_range(mut c: impl Sql) -> Result<(i64, i64), CatalogError> {
    let range = c.row(&SELECT_MAX_RUN, &[], |r| Ok((r.int(0)?, r.int(1)?)))?;
    Ok(range.unwrap_or((0, 0)))
}

/// The ids of a page of jobs and how many match: the order and the page are written into the
/// statement (a bound LIMIT expires SQLite's statement under STAT4: see the claim in queue.rs).
fn job_page(
    tx: &mut Tx<'_, '_>,
    f: &JobFilter,
    args: &[Val],
) -> Result<(Vec<i64>, i64), CatalogError> {
    let count = format!("SELECT count(*) {JOB_FROM}");
    let page = format!(
        "SELECT j.job_id {JOB_FROM} ORDER BY {} LIMIT {} OFFSET {}",
        f.order.clause(f.reversed),
        f.limit.max(0),
        f.offset.max(0)
    );
    let pg = tx.on_postgres();
    let text = |sqlite: &str| {
        if pg {
            postgres_text(sqlite)
        } else {
            sqlite.to_string()
        }
    };
    let total = tx.rows_once(&text(&count), args, |r| r.int(0))?;
    let ids = tx.rows_once(&text(&page), args, |r| r.int(0))?;
    Ok((ids, total.first().copied().unwrap_or(0)))
}

impl Catalog {
    /// The newest and the oldest run id (0 and 0 without runs).
    pub fn run_ids(&self) -> Result<(i64, i64), CatalogError> {
        self.reading(|tx| run_id_range(tx))
    }

    /// Every processor's definition, by name, without reading the jobs (`export` reads the
    /// whole catalog: 60 ms with 10,000 jobs).
    pub fn processor_defs(
        &self,
    ) -> Result<std::collections::BTreeMap<String, crate::jobconf::ProcessorDef>, CatalogError>
    {
        self.reading(|tx| {
            let rows = tx.rows(
                &Query::same(super::definitions::SELECT_PROCESSORS),
                &[],
                |r| super::definitions::processor_of(r),
            )?;
            Ok(rows.into_iter().collect())
        })
    }

    /// A page of jobs matching `f`, in its order, and how many match.
    pub fn job_rows(&self, f: &JobFilter) -> Result<JobRows, CatalogError> {
        let f = f.clone();
        self.reading(move |tx| {
            let args: [Val; 7] = [
                f.node.as_str().into(),
                f.group.clone().into(),
                f.processor.clone().into(),
                Val::Int(f.enabled.map(i64::from)),
                f.job_type.clone().into(),
                f.activation.clone().into(),
                f.search.as_deref().filter(|s| !s.is_empty()).into(),
            ];
            let (ids, total) = job_page(tx, &f, &args)?;
            let mut jobs = Vec::with_capacity(ids.len());
            for id in ids {
                let Some(record) = jobs_of(tx, &SELECT_JOB_WITH_ID, &[id.into()])?.pop() else {
                    continue;
                };
                let state = tx.row(
                    &SELECT_ACTIVATION_OF,
                    &[id.into(), f.node.as_str().into()],
                    |r| Ok((r.text(0)?, r.opt_text(1)?, r.opt_text(2)?)),
                )?;
                jobs.push((record, state));
            }
            Ok(JobRows { jobs, total })
        })
    }

    /// Executing runs past their job's timeout at `now` or whose node is dead (no heartbeat
    /// within its lease TTL at `now`), fenced or stopped, oldest first, and the queued runs due
    /// before `due_before` (how many, and the oldest due time).
    pub fn stuck_runs(
        &self,
        now: i64,
        due_before: i64,
        limit: i64,
    ) -> Result<(Vec<StuckRun>, i64, Option<i64>), CatalogError> {
        self.reading(move |tx| {
            let stuck = tx.rows(&SELECT_STUCK, &[now.into(), limit.into()], |r| {
                Ok(StuckRun {
                    run_id: r.int(0)?,
                    job: r.text(1)?,
                    node: r.text(2)?,
                    started_at: r.opt_int(3)?,
                    timeout: r.int(4)?,
                    node_row: StuckNode {
                        pid: r.opt_int(5)?,
                        heartbeat_at: r.opt_int(6)?,
                        lease_ttl: r.int(7)?,
                        fenced_at: r.opt_int(8)?,
                    },
                })
            })?;
            let (overdue, oldest) = tx
                .row(&SELECT_OVERDUE, &[due_before.into()], |r| {
                    Ok((r.int(0)?, r.opt_int(1)?))
                })?
                .unwrap_or((0, None));
            Ok((stuck, overdue, oldest))
        })
    }

    /// Jobs with failed, timed-out or dead runs among the newest `window` runs, most failures
    /// first.
    pub fn failing_jobs(&self, window: i64, limit: i64) -> Result<Vec<FailingJob>, CatalogError> {
        self.reading(move |tx| {
            let (max, _) = run_id_range(&mut *tx)?;
            tx.rows(
                &SELECT_FAILING,
                &[(max - window).into(), limit.into()],
                |r| {
                    Ok(FailingJob {
                        job: r.text(0)?,
                        failures: r.int(1)?,
                        last_run_id: r.int(2)?,
                        last_at: r.opt_int(3)?,
                        last_error: r.opt_text(4)?,
                    })
                },
            )
        })
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
        self.reading(move |tx| {
            let (max, min) = run_id_range(&mut *tx)?;
            let first = first_run_created_from(&mut *tx, from - lookback, min, max)?;
            let floor = max - max_scan + 1;
            let start = first.max(floor);
            let buckets = tx.rows(
                &SELECT_OUTCOMES,
                &[start.into(), from.into(), to.into(), step.max(1).into()],
                |r| {
                    Ok(OutcomeBucket {
                        index: r.int(0)?,
                        status: r.text(1)?,
                        count: r.int(2)?,
                    })
                },
            )?;
            Ok(Outcomes {
                buckets,
                truncated: first < floor && min < floor,
            })
        })
    }

    /// Decisions matching `f`, newest first.
    pub fn decisions_filtered(&self, f: &DecisionFilter) -> Result<Vec<DecisionRow>, CatalogError> {
        let f = f.clone();
        self.reading(move |tx| {
            let vals = [
                f.node.clone().into(),
                f.action.clone().into(),
                f.cause.clone().into(),
                f.search.as_deref().filter(|s| !s.is_empty()).into(),
                Val::Int(f.before),
                f.limit.into(),
            ];
            tx.rows(&SELECT_DECISIONS_FILTERED, &vals, decision_row)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::Connection;

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
