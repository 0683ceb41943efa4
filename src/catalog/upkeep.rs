//! The catalog's upkeep: measured samples stored, runs stuck past their timeout failed, old
//! runs, stats and object rows pruned, SQLite's own maintenance.
//!
//! Invariant: as in `queue`, every function takes a connection already inside the writer's
//! transaction (except [`maintain`], which must run outside one) and reads no clock.

use rusqlite::{Connection, params};
use serde_json::Value as Json;

use super::CatalogError;
use super::queue::RECOUNT_IN_PROGRESS;
use super::sql::{Query, Sql};
use super::tree::{self, Ended};
use crate::model::RunStatus;

/// A measured value to store.
#[derive(Debug, Clone, PartialEq)]
pub struct StatSample {
    /// `stat_type`, e.g. `device.cpu_used`.
    pub stat_type: String,
    /// Its unit, e.g. `%`.
    pub unit: &'static str,
    /// What it is about (an object, a processor), or `None` for the device.
    pub subject: Option<String>,
    /// The value.
    pub value: f64,
}

/// Stores samples taken at `at`, creating their `stat_type`s on first use.
pub fn record_stats(
    mut c: impl Sql,
    node_id: i64,
    at: i64,
    samples: &[StatSample],
) -> Result<(), CatalogError> {
    const TYPE: Query = Query::same(
        "INSERT INTO stat_type (stat_type, unit) VALUES (?1, ?2)
         ON CONFLICT (stat_type) DO NOTHING",
    );
    const SAMPLE: Query = Query::same(
        "INSERT INTO stat (stat_type_id, node_id, subject, value, sampled_at)
         SELECT stat_type_id, ?2, ?3, ?4, ?5 FROM stat_type WHERE stat_type = ?1",
    );
    for s in samples {
        c.exec(&TYPE, &[s.stat_type.as_str().into(), s.unit.into()])?;
        c.exec(
            &SAMPLE,
            &[
                s.stat_type.as_str().into(),
                node_id.into(),
                (&s.subject).into(),
                s.value.into(),
                at.into(),
            ],
        )?;
    }
    Ok(())
}

/// Fails runs that have been running longer than their job's timeout plus `grace_ms` (their
/// processor died without recording them) and frees their jobs; a failed run in a tree fails
/// it as any failure does. Returns how many.
pub fn fail_stuck_runs(conn: &Connection, now: i64, grace_ms: i64) -> Result<usize, CatalogError> {
    let stuck: Vec<(i64, Option<i64>, Option<String>)> = conn
        .prepare_cached(SELECT_STUCK)?
        .query_map(params![now, grace_ms], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })?
        .collect::<Result<_, _>>()?;
    let mut queued = Vec::new();
    for (run_id, pid, step) in &stuck {
        conn.prepare_cached(FAIL_STUCK)?
            .execute(params![run_id, now])?;
        let ended = Ended {
            pid: *pid,
            step: step.clone(),
            status: RunStatus::Failed,
        };
        tree::on_end(conn, ended, now, &mut queued)?;
    }
    if !stuck.is_empty() {
        conn.execute(RECOUNT_IN_PROGRESS, [])?;
    }
    Ok(stuck.len())
}

// A run waiting for its children executes nowhere: its tree ends it.
const SELECT_STUCK: &str = "SELECT r.run_id, r.pid, r.step FROM job_run r
    INDEXED BY job_run_running_job_idx JOIN job j ON j.job_id = r.job_id
    WHERE r.status = 'running' AND r.own_status IS NULL AND j.timeout > 0
      AND r.started_at + j.timeout + ?2 < ?1";
const FAIL_STUCK: &str = "UPDATE job_run SET status = 'failed', finished_at = ?2,
    error = 'reset by job_state_reset: running past its timeout', lease_until = NULL
    WHERE run_id = ?1";

/// Deletes finished runs that ended before `before` (epoch ms), a tree only as a whole (with
/// its root, which ends last). Returns how many.
///
/// No index on `finished_at` (every completion would write to it): a run finishes after it is
/// created and run ids grow with creation time, so the runs to delete are among the oldest
/// ids, below the first run created at or after `before` (found by walking ids from the
/// oldest). A run that a clock step placed beyond that point is deleted by a later prune.
pub fn prune_runs(conn: &Connection, before: i64) -> Result<usize, CatalogError> {
    // The members of prunable trees first (through the root index), whatever their own ids:
    // a root may not go while a run still names it as parent or root.
    let members = conn.execute(
        &format!(
            "DELETE FROM job_run WHERE stump IN (SELECT run_id FROM job_run WHERE {PRUNABLE})"
        ),
        [before],
    )?;
    let runs = conn.execute(&format!("DELETE FROM job_run WHERE {PRUNABLE}"), [before])?;
    Ok(members + runs)
}

/// The runs a prune deletes, trees by their roots (members go with them).
const PRUNABLE: &str = "run_id < coalesce((SELECT run_id FROM job_run WHERE created_at >= ?1
        ORDER BY run_id LIMIT 1), 9223372036854775807)
    AND finished_at IS NOT NULL AND finished_at < ?1
    AND status <> 'queued' AND status <> 'claimed' AND status <> 'running' AND stump IS NULL
    AND run_id NOT IN (SELECT retry_of FROM job_run WHERE retry_of IS NOT NULL
                       AND (status = 'queued' OR status = 'claimed' OR status = 'running'))
    -- Children of a retried attempt may outlive their tree's root: it waits for them here.
    AND NOT EXISTS (SELECT 1 FROM job_run m WHERE m.stump = job_run.run_id
                    AND (m.status = 'queued' OR m.status = 'claimed'
                         OR m.status = 'running'))";

/// Deletes stat rows sampled before `before`. Returns how many.
pub fn prune_stats(mut c: impl Sql, before: i64) -> Result<usize, CatalogError> {
    const DELETE: Query = Query::same("DELETE FROM stat WHERE sampled_at < ?1");
    c.exec(&DELETE, &[before.into()])
}

/// Objects with their pruning settings: (name, conn_string, key_field, name_field, ttl seconds).
pub type PrunableObject = (String, Option<String>, Option<String>, Option<String>, i64);

/// Every enabled object that allows pruning.
pub fn prunable_objects(mut c: impl Sql) -> Result<Vec<PrunableObject>, CatalogError> {
    const SELECT: Query = Query::same(
        "SELECT object_name, conn_string, object_key, object_name_field, time_to_live
         FROM object WHERE status = 1 AND allow_prune = 1 AND time_to_live IS NOT NULL",
    );
    c.rows(&SELECT, &[], |r| {
        Ok((
            r.text(0)?,
            r.opt_text(1)?,
            r.opt_text(2)?,
            r.opt_text(3)?,
            r.int(4)?,
        ))
    })
}

/// Every enabled object: (name, conn_string).
pub fn all_objects(mut c: impl Sql) -> Result<Vec<(String, Option<String>)>, CatalogError> {
    const SELECT: Query =
        Query::same("SELECT object_name, conn_string FROM object WHERE status = 1");
    c.rows(&SELECT, &[], |r| Ok((r.text(0)?, r.opt_text(1)?)))
}

/// Rows in a table of the catalog (for `object.record_count`). The name is checked to be a
/// plain identifier before it is quoted into the statement.
pub fn count_rows(conn: &Connection, table: &str) -> Result<i64, CatalogError> {
    if !table.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(CatalogError::Refused(format!(
            "`{table}` is not a plain table name"
        )));
    }
    Ok(
        conn.query_row(&format!("SELECT count(*) FROM \"{table}\""), [], |r| {
            r.get(0)
        })?,
    )
}

/// Deletes rows of a catalog-resident or external table whose `time_field` (epoch ms) is older
/// than `before`. Names are checked to be plain identifiers.
pub fn prune_table(
    conn: &Connection,
    table: &str,
    time_field: &str,
    before: i64,
) -> Result<usize, CatalogError> {
    for name in [table, time_field] {
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(CatalogError::Refused(format!(
                "`{name}` is not a plain identifier"
            )));
        }
    }
    Ok(conn.execute(
        &format!("DELETE FROM \"{table}\" WHERE \"{time_field}\" < ?1"),
        [before],
    )?)
}

/// Runs SQLite's maintenance: `PRAGMA optimize`, an incremental vacuum and a WAL checkpoint.
/// Must run outside a transaction.
pub fn maintain(conn: &Connection) -> Result<Json, CatalogError> {
    conn.execute_batch("PRAGMA optimize; PRAGMA incremental_vacuum;")?;
    let (busy, log, checkpointed): (i64, i64, i64) =
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })?;
    Ok(
        serde_json::json!({ "checkpoint_busy": busy, "wal_frames": log, "checkpointed": checkpointed }),
    )
}
