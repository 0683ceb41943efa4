//! What the runtime loads from the catalog to plan its work: the catalog generation, the
//! scheduler's jobs, the processors this node starts and the objects that get a writer.
//!
//! Invariant: every function here takes a read connection (or the writer's), never opens one,
//! and reads no clock.

use super::CatalogError;
use super::slots::NextRun;
use super::sql::{Fields, Query, Sql};
use crate::schedule::{JobHistory, MisfirePolicy, OverlapPolicy, PlanPolicy, ScheduleSpec};

/// The catalog generation: bumped by triggers on every definition change.
pub fn generation(mut c: impl Sql) -> Result<i64, CatalogError> {
    const SELECT: Query = Query::each(
        "SELECT CAST(value AS INTEGER) FROM catalog_meta WHERE key = 'generation'",
        "SELECT value::bigint FROM catalog_meta WHERE key = 'generation'",
    );
    c.row(&SELECT, &[], |r| r.int(0))?
        .ok_or_else(|| CatalogError::Corrupt("catalog_meta has no generation".into()))
}

/// A job as the scheduler needs it.
#[derive(Debug, Clone)]
pub struct ScheduledJob {
    /// `job_id`.
    pub job_id: i64,
    /// `job_name`.
    pub name: String,
    /// Where its runs go.
    pub processor_id: i64,
    /// Copied onto each run for claim order.
    pub priority: i64,
    /// The schedule fields.
    pub spec: ScheduleSpec,
    /// Misfire policy.
    pub misfire: MisfirePolicy,
    /// Misfire window, ms.
    pub misfire_window: i64,
    /// Catch-up cap.
    pub max_catchup: i64,
    /// Overlap policy.
    pub overlap: OverlapPolicy,
    /// Concurrency cap for `allow`.
    pub max_overlap: i64,
    /// `max(scheduled_for)` of its first attempts.
    pub last_slot: Option<i64>,
    /// Epoch ms the job was created.
    pub created_ms: i64,
    /// Last run's begin and end.
    pub last_begin: Option<i64>,
    /// Last run's end.
    pub last_end: Option<i64>,
    /// Runs executing (on any node).
    pub running: i64,
    /// Slot runs queued (fired by a schedule on any node, not yet started).
    pub queued: i64,
    /// The factor this node stretched the job's period by (1: as scheduled).
    pub stretch: u32,
}

impl ScheduledJob {
    /// Its misfire and overlap policy, as its planner applies them.
    pub fn policy(&self) -> PlanPolicy {
        PlanPolicy::of_job(
            self.misfire,
            self.misfire_window,
            self.max_catchup,
            self.overlap,
            self.max_overlap,
        )
    }

    /// What its planner starts from.
    pub fn history(&self) -> JobHistory {
        JobHistory {
            last_slot: self.last_slot,
            since: Some(self.created_ms),
            last_begin: self.last_begin,
            last_end: self.last_end,
            running: self.running.clamp(0, u32::MAX as i64) as u32,
            queued: self.queued.clamp(0, u32::MAX as i64) as u32,
        }
    }
}

const SELECT_SCHEDULED: Query = Query::each(SELECT_SCHEDULED_SQLITE, SELECT_SCHEDULED_PG);
const SELECT_SCHEDULED_SQLITE: &str = "SELECT j.job_id, j.job_name, j.processor_id, j.priority,
    j.run_always, j.run_delay, j.run_every, j.run_on_the, j.run_at, j.run_date, j.cron, j.timezone,
    j.misfire_policy, j.misfire_window, j.max_catchup, j.overlap_policy, j.max_overlap,
    -- Retries carry no slot, so the unique (job_id, scheduled_for) index answers this.
    (SELECT max(r.scheduled_for) FROM job_run r WHERE r.job_id = j.job_id),
    j.create_date * 1000, j.last_date_begin, j.last_date_end,
    (SELECT count(*) FROM job_run r INDEXED BY job_run_running_job_idx
     WHERE r.job_id = j.job_id AND (r.status = 'claimed' OR r.status = 'running')),
    (SELECT count(*) FROM job_run r INDEXED BY job_run_queued_slot_idx
     WHERE r.job_id = j.job_id AND r.status = 'queued' AND r.scheduled_for IS NOT NULL), a.stretch
    FROM job j JOIN job_processor p ON p.processor_id = j.processor_id
    JOIN job_activation a ON a.job_id = j.job_id AND a.node_id = ?1 AND a.state = 'active'
    WHERE j.status = 1 AND p.status = 1
      -- A processor that names its nodes: only they schedule its jobs (migration 19).
      AND (p.nodes IS NULL OR EXISTS (SELECT 1 FROM json_each(p.nodes) e
           JOIN node n ON n.node_name = e.value WHERE n.node_id = ?1))";
/// In PostgreSQL's dialect: the history from the view `job_progress`, a processor's node list
/// read with `jsonb_array_elements_text`.
const SELECT_SCHEDULED_PG: &str = "SELECT j.job_id, j.job_name, j.processor_id, j.priority,
    j.run_always, j.run_delay, j.run_every, j.run_on_the, j.run_at, j.run_date, j.cron, j.timezone,
    j.misfire_policy, j.misfire_window, j.max_catchup, j.overlap_policy, j.max_overlap,
    (SELECT max(r.scheduled_for) FROM job_run r WHERE r.job_id = j.job_id),
    j.create_date * 1000, pr.last_date_begin, pr.last_date_end,
    (SELECT count(*) FROM job_run r WHERE r.job_id = j.job_id AND (r.status = 'claimed' OR r.status = 'running')),
    (SELECT count(*) FROM job_run r
     WHERE r.job_id = j.job_id AND r.status = 'queued' AND r.scheduled_for IS NOT NULL),
    a.stretch
    FROM job j JOIN job_processor p ON p.processor_id = j.processor_id
    JOIN job_activation a ON a.job_id = j.job_id AND a.node_id = $1 AND a.state = 'active'
    JOIN job_progress pr ON pr.job_id = j.job_id
    WHERE j.status = 1 AND p.status = 1
      AND (p.nodes IS NULL OR EXISTS (SELECT 1 FROM jsonb_array_elements_text(p.nodes::jsonb) e
           JOIN node n ON n.node_name = e.value WHERE n.node_id = $1))
    ORDER BY j.job_id";

/// Every enabled job on an enabled processor that `node_id` may run and on which the job is
/// active, with its scheduling history (a job on a remote processor is scheduled here and runs
/// as a call to that node).
pub fn load_scheduled(mut c: impl Sql, node_id: i64) -> Result<Vec<ScheduledJob>, CatalogError> {
    c.rows(&SELECT_SCHEDULED, &[node_id.into()], scheduled_row)
}

/// The next runs the catalog holds for `node_id` (`job_activation.next_run_at`), what its
/// scheduler compares its planners with after a load: a job it no longer plans keeps no value.
pub fn load_next_runs(mut c: impl Sql, node_id: i64) -> Result<Vec<NextRun>, CatalogError> {
    const SELECT: Query = Query::same(
        "SELECT job_id, next_run_at FROM job_activation
         WHERE node_id = ?1 AND next_run_at IS NOT NULL",
    );
    c.rows(&SELECT, &[node_id.into()], |r| {
        Ok(NextRun {
            job_id: r.int(0)?,
            at: r.opt_int(1)?,
        })
    })
}

/// A [`ScheduledJob`] from a row of [`SELECT_SCHEDULED`]' columns.
fn scheduled_row(r: &Fields<'_>) -> Result<ScheduledJob, CatalogError> {
    let misfire = r.text(12)?;
    let overlap = r.text(15)?;
    Ok(ScheduledJob {
        job_id: r.int(0)?,
        name: r.text(1)?,
        processor_id: r.int(2)?,
        priority: r.int(3)?,
        spec: ScheduleSpec {
            run_always: r.flag(4)?,
            run_delay: r.int(5)?,
            run_every: r.opt_int(6)?,
            run_on_the: r.opt_int(7)?,
            run_at: r.opt_text(8)?,
            run_date: r.opt_text(9)?,
            cron: r.opt_text(10)?,
            timezone: r.opt_text(11)?,
        },
        misfire: MisfirePolicy::parse(&misfire).unwrap_or_default(),
        misfire_window: r.int(13)?,
        max_catchup: r.int(14)?,
        overlap: OverlapPolicy::parse(&overlap).unwrap_or_default(),
        max_overlap: r.int(16)?,
        last_slot: r.opt_int(17)?,
        created_ms: r.int(18)?,
        last_begin: r.opt_int(19)?,
        last_end: r.opt_int(20)?,
        running: r.int(21)?,
        queued: r.int(22)?,
        stretch: r.int(23)?.clamp(1, u32::MAX as i64) as u32,
    })
}

/// A processor row the supervisor starts: its instances execute on this node — for a remote
/// processor, each execution is a call to the remote node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalProcessor {
    /// `processor_id`.
    pub processor_id: i64,
    /// Name.
    pub name: String,
    /// Concurrent executions.
    pub instances: i64,
    /// Upper bound.
    pub max_instances: i64,
    /// The row names a remote node (`ip_address`): its runs are calls to that node's `/rpc`.
    pub remote: bool,
    /// Runs claimed beyond the free instances; `None`: sized from measured durations.
    pub prefetch: Option<i64>,
}

/// Every enabled processor, local and remote, that `node_id` may run: those that name no
/// nodes, and those that name it.
pub fn load_local_processors(
    mut c: impl Sql,
    node_id: i64,
) -> Result<Vec<LocalProcessor>, CatalogError> {
    const SELECT: Query = Query::each(
        "SELECT processor_id, processor_name, instances, coalesce(max_instances, instances),
                ip_address IS NOT NULL, prefetch
         FROM job_processor p WHERE status = 1
           AND (p.nodes IS NULL OR EXISTS (SELECT 1 FROM json_each(p.nodes) e
                JOIN node n ON n.node_name = e.value WHERE n.node_id = ?1))
         ORDER BY processor_name",
        "SELECT processor_id, processor_name, instances, coalesce(max_instances, instances),
                ip_address IS NOT NULL, prefetch
         FROM job_processor p WHERE status = 1
           AND (p.nodes IS NULL OR EXISTS (SELECT 1
                FROM jsonb_array_elements_text(p.nodes::jsonb) e
                JOIN node n ON n.node_name = e.value WHERE n.node_id = $1))
         ORDER BY processor_name",
    );
    c.rows(&SELECT, &[node_id.into()], |r| {
        Ok(LocalProcessor {
            processor_id: r.int(0)?,
            name: r.text(1)?,
            instances: r.int(2)?,
            max_instances: r.int(3)?,
            remote: r.flag(4)?,
            prefetch: r.opt_int(5)?,
        })
    })
}

/// A data object that jobs write, with where it lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrittenObject {
    /// `object_id`.
    pub object_id: i64,
    /// Name.
    pub name: String,
    /// `conn_string`: a SQLite path, or `catalog` / NULL for the catalog itself.
    pub conn_string: Option<String>,
}

/// Every enabled object that at least one job writes, or that a sql job targets.
pub fn load_written_objects(mut c: impl Sql) -> Result<Vec<WrittenObject>, CatalogError> {
    const SELECT: Query = Query::each(
        "SELECT o.object_id, o.object_name, o.conn_string FROM object o WHERE o.status = 1 AND (
            EXISTS (SELECT 1 FROM job_object jo WHERE jo.object_id = o.object_id)
            OR EXISTS (SELECT 1 FROM job j WHERE json_extract(j.job_payload, '$.object') = o.object_name))
         ORDER BY o.object_name",
        "SELECT o.object_id, o.object_name, o.conn_string FROM object o WHERE o.status = 1 AND (
            EXISTS (SELECT 1 FROM job_object jo WHERE jo.object_id = o.object_id)
            OR EXISTS (SELECT 1 FROM job j WHERE j.job_payload::jsonb ->> 'object' = o.object_name))
         ORDER BY o.object_name",
    );
    c.rows(&SELECT, &[], |r| {
        Ok(WrittenObject {
            object_id: r.int(0)?,
            name: r.text(1)?,
            conn_string: r.opt_text(2)?,
        })
    })
}
