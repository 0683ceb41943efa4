//! What happens to runs while they wait in the queue: start deadlines (a trigger's own, set
//! when it queues runs; a queued run past its deadline that no claim took ends `expired`) and
//! priority aging (a queued run of a job with an `aging` rate gains priority as it waits). A
//! claimed run past its deadline is its processor's to end, through the completion path.
//!
//! Invariant: like `queue`, every function works inside the caller's transaction, on both
//! backends, and reads no clock: `now` is an argument.

use super::CatalogError;
use super::sql::{Query, Sql};

// SQLite is told which index finds the runs with a deadline of their own, and to find the
// queued runs of the jobs with a `start_within` from those jobs (left to itself, it scans
// the whole queue at every sweep); PostgreSQL's planner finds both ways by itself.
macro_rules! expire {
    ($hint:literal, $join:literal) => {
        concat!(
            "UPDATE job_run SET status = 'expired', finished_at = ?1,
                error = 'not started by its deadline (' || (?1 - coalesce(start_by, run_after +
                    (SELECT j.start_within FROM job j WHERE j.job_id = job_run.job_id)))
                    || ' ms late): still queued'
             WHERE run_id IN (
                 SELECT r.run_id FROM job_run r ",
            $hint,
            "
                 WHERE r.status = 'queued' AND r.start_by IS NOT NULL AND r.start_by < ?1
                   AND r.pid IS NULL
                 UNION ALL
                 SELECT r.run_id FROM job j ",
            $join,
            "
                     ON r.processor_id = j.processor_id AND r.job_id = j.job_id
                 WHERE j.start_within IS NOT NULL AND r.status = 'queued'
                   AND r.start_by IS NULL AND r.pid IS NULL
                   AND r.run_after + j.start_within < ?1)
             RETURNING job_id"
        )
    };
}
const EXPIRE: Query = Query::each(
    expire!(
        "INDEXED BY job_run_start_by_idx",
        "CROSS JOIN job_run r INDEXED BY job_run_queue_idx"
    ),
    expire!("", "JOIN job_run r"),
);

// The smaller of two values is `min` in SQLite, `LEAST` in PostgreSQL; SQLite is told to
// find the queued runs from the jobs that age (left to itself, it scans the whole queue at
// every sweep).
macro_rules! age {
    ($least:literal, $join:literal) => {
        concat!(
            "UPDATE job_run SET aged_from = coalesce(aged_from, priority),
                priority = coalesce(aged_from, priority) + ",
            $least,
            "(?2, (?1 - run_after) /
                    (SELECT j.aging FROM job j WHERE j.job_id = job_run.job_id))
             WHERE run_id IN (
                 SELECT r.run_id FROM job j ",
            $join,
            "
                     ON r.processor_id = j.processor_id AND r.job_id = j.job_id
                 WHERE j.aging IS NOT NULL AND r.status = 'queued' AND r.run_after <= ?1
                   AND coalesce(r.aged_from, r.priority) + ",
            $least,
            "(?2, (?1 - r.run_after) / j.aging)
                       > r.priority)"
        )
    };
}
const AGE: Query = Query::each(
    age!("min", "CROSS JOIN job_run r INDEXED BY job_run_queue_idx"),
    age!("LEAST", "JOIN job_run r"),
);

/// Ends `expired` the queued runs past their deadline that no claim took (their processor
/// paused, or running on no node): runs with a `start_by` of their own, and runs of jobs with
/// a `start_within`. A run in a tree is left to its processor, which records its end through
/// its tree. Returns the expired runs' jobs' names, a name per run.
pub fn expire_overdue(mut c: impl Sql, now: i64) -> Result<Vec<String>, CatalogError> {
    // A run that ended needs its deadline no more. SQLite's index of deadlines leaves `status`
    // out of its predicate (so that claims and completions never touch it): without this its
    // entries of ended runs would pile up for the scan above. PostgreSQL's keeps `status` in
    // it: nothing to clear there.
    const FORGET_ENDED: Query = Query::each(
        "UPDATE job_run SET start_by = NULL
         WHERE run_id IN (
             SELECT r.run_id FROM job_run r INDEXED BY job_run_start_by_idx
             WHERE r.start_by IS NOT NULL AND r.start_by < ?1
               AND r.status <> 'queued' AND r.status <> 'claimed' AND r.status <> 'running')",
        "UPDATE job_run SET start_by = NULL WHERE false AND start_by < $1",
    );
    const NAME: Query = Query::same("SELECT job_name FROM job WHERE job_id = ?1");
    let jobs = c.rows(&EXPIRE, &[now.into()], |r| r.int(0))?;
    c.exec(&FORGET_ENDED, &[now.into()])?;
    let mut names = Vec::with_capacity(jobs.len());
    for job_id in jobs {
        names.extend(c.row(&NAME, &[job_id.into()], |r| r.text(0))?);
    }
    Ok(names)
}

/// Gives runs just queued a start deadline of their own, `start_within` ms after `now` (a
/// trigger's option): not started by then, each ends `expired`.
pub fn set_start_within(
    mut c: impl Sql,
    run_ids: &[i64],
    now: i64,
    start_within: Option<i64>,
) -> Result<(), CatalogError> {
    const SET: Query = Query::same("UPDATE job_run SET start_by = ?2 WHERE run_id = ?1");
    let Some(within) = start_within else {
        return Ok(());
    };
    let by = now.saturating_add(within);
    for id in run_ids {
        c.exec(&SET, &[(*id).into(), by.into()])?;
    }
    Ok(())
}

/// Ages the queued runs of jobs with an `aging` rate: each gains a point of priority per
/// `aging` ms it has been due (at most [`MAX_AGING_BOOST`](crate::jobconf::MAX_AGING_BOOST)),
/// counted from the priority it was queued with, which it keeps (`aged_from`). Returns how many
/// runs moved up.
pub fn age_queued(mut c: impl Sql, now: i64) -> Result<usize, CatalogError> {
    // The queue index finds a job's queued runs by its processor; `aged_from` is set once.
    c.exec(&AGE, &[now.into(), crate::jobconf::MAX_AGING_BOOST.into()])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{Catalog, DbSettings};

    /// SQLite reaches the queued runs of the jobs that age or have a `start_within` from those
    /// jobs, through the queue index: a sweep never walks the whole queue.
    #[test]
    fn the_sweeps_find_queued_runs_from_their_jobs_not_by_scanning_the_queue() {
        let dir = tempfile::tempdir().unwrap();
        let mut catalog = Catalog::open(&dir.path().join("c.db"), &DbSettings::default()).unwrap();
        let conn = catalog.writer();
        for (q, params) in [(&AGE, 2), (&EXPIRE, 1)] {
            let mut stmt = conn
                .prepare(&format!("EXPLAIN QUERY PLAN {}", q.sqlite))
                .unwrap();
            let values = vec![0i64; params];
            let plan: Vec<String> = stmt
                .query_map(rusqlite::params_from_iter(values), |r| {
                    r.get::<_, String>(3)
                })
                .unwrap()
                .map(Result::unwrap)
                .collect();
            assert!(
                plan.iter()
                    .any(|p| p.contains("SEARCH r USING INDEX job_run_queue_idx (processor_id=?)")),
                "{plan:#?}"
            );
            assert!(!plan.iter().any(|p| p.starts_with("SCAN r")), "{plan:#?}");
        }
    }
}
