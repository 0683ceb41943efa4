//! The catalog's definitions as rows: an import's upserts of processors, objects, groups and
//! jobs (with its audit row), the export back to a catalog file, and the rows that list jobs,
//! processors and objects.

use std::collections::BTreeSet;

use rusqlite::{Connection, Transaction};
use serde::Serialize;
use serde_json::{Map as JsonMap, Value as Json};

use super::audit::audit_changes_with;
use super::sql::{Cols, Query, Sql, Val};
use super::{CatalogError, now_ms};
use crate::jobconf::{CatalogFile, GroupDef, JobDef, ObjectDef, ProcessorDef};
use crate::model::{JobType, ObjectType};
use crate::schedule::{MisfirePolicy, OverlapPolicy, ScheduleSpec};

/// What an import changed, per kind of entry.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct ImportReport {
    /// Entries that did not exist.
    pub created: Vec<String>,
    /// Entries that existed and differed.
    pub updated: Vec<String>,
    /// Entries that existed and were identical.
    pub unchanged: usize,
    /// Each entry's change, field by field.
    pub changes: Vec<crate::jobconf::merge::EntryChange>,
}

fn int(v: i64) -> Val {
    Val::Int(Some(v))
}

fn text(v: &str) -> Val {
    Val::Text(Some(v.to_string()))
}

fn opt_text(v: &Option<String>) -> Val {
    Val::Text(v.clone())
}

pub(super) fn import_in(
    tx: &Transaction<'_>,
    before: &CatalogFile,
    file: &CatalogFile,
    actor: &str,
    action: &str,
) -> Result<ImportReport, CatalogError> {
    import_with(&mut &**tx, before, file, actor, action)
}

/// Upserts what of `file` differs from `before` (the catalog as it is) and writes one audit row
/// for `action`: an import's rows on either backend.
pub(crate) fn import_with(
    tx: &mut impl Sql,
    before: &CatalogFile,
    file: &CatalogFile,
    actor: &str,
    action: &str,
) -> Result<ImportReport, CatalogError> {
    let mut report = ImportReport {
        changes: crate::jobconf::merge::changes(before, file),
        ..ImportReport::default()
    };
    let mut note = |kind: &str, name: &str, existed: bool, same: bool| {
        if same {
            report.unchanged += 1;
        } else if existed {
            report.updated.push(format!("{kind}.{name}"));
        } else {
            report.created.push(format!("{kind}.{name}"));
        }
        !same
    };
    // Order matters: jobs reference processors, groups and objects by name.
    for (name, p) in &file.processors {
        let old = before.processors.get(name);
        if note("processor", name, old.is_some(), old == Some(p)) {
            upsert_processor(tx, name, p)?;
        }
    }
    for (name, o) in &file.objects {
        let old = before.objects.get(name);
        if note("object", name, old.is_some(), old == Some(o)) {
            upsert_object(tx, name, o)?;
        }
    }
    for (name, g) in &file.groups {
        let old = before.groups.get(name);
        if note("group", name, old.is_some(), old == Some(g)) {
            tx.exec(&Query::same(UPSERT_GROUP), &group_values(name, g))?;
        }
    }
    for (name, j) in &file.jobs {
        let old = before.jobs.get(name);
        if note("job", name, old.is_some(), old == Some(j)) {
            upsert_job(tx, name, j)?;
        }
    }
    // A created entry is shown with its values; an updated one with the fields that changed.
    // Only the entries the audit row keeps are described, each found by its name: describing
    // every created entry, and searching the list for each, grows with the square of a large
    // import.
    let mut detail = audit_changes_with(&report.changes, |c| match c.change {
        "created" => {
            crate::jobconf::merge::describe(file, c.section, &c.name).unwrap_or_else(|| c.clone())
        }
        _ => c.clone(),
    });
    detail["created"] = report.created.len().into();
    detail["updated"] = report.updated.len().into();
    detail["unchanged"] = report.unchanged.into();
    super::audit::audit_in(tx, now_ms(), actor, action, "catalog", Some(&detail))?;
    Ok(report)
}

fn group_values(name: &str, g: &GroupDef) -> [Val; 4] {
    [
        text(name),
        Val::Flag(g.maintenance),
        opt_text(&g.description),
        Val::Flag(g.enabled),
    ]
}

pub(super) const UPSERT_PROCESSOR: &str = "INSERT INTO job_processor
    (processor_name, instances, max_instances, ip_address, port, rpc_user, rpc_password, status,
     nodes, prefetch)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
    ON CONFLICT (processor_name) DO UPDATE SET
        instances = excluded.instances, max_instances = excluded.max_instances,
        prefetch = excluded.prefetch,
        ip_address = excluded.ip_address, port = excluded.port, rpc_user = excluded.rpc_user,
        rpc_password = excluded.rpc_password, status = excluded.status, nodes = excluded.nodes";

pub(super) fn upsert_processor(
    tx: &mut impl Sql,
    name: &str,
    p: &ProcessorDef,
) -> Result<(), CatalogError> {
    tx.exec(
        &Query::same(UPSERT_PROCESSOR),
        &[
            text(name),
            int(p.instances),
            Val::Int(p.max_instances),
            opt_text(&p.ip_address),
            Val::Int(p.port),
            opt_text(&p.rpc_user),
            opt_text(&p.rpc_password),
            Val::Flag(p.enabled),
            // Any node: NULL, so that the runtime's filter is one test on most catalogs.
            Val::Text((!p.nodes.is_empty()).then(|| Json::from(p.nodes.clone()).to_string())),
            Val::Int(p.prefetch),
        ],
    )?;
    Ok(())
}

pub(super) const UPSERT_OBJECT: &str = "INSERT INTO object
    (object_name, object_type, conn_string, object_key, object_name_field, id_length,
     search_prefix, time_to_live, allow_prune, allow_list, description, status)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)
    ON CONFLICT (object_name) DO UPDATE SET
        object_type = excluded.object_type, conn_string = excluded.conn_string,
        object_key = excluded.object_key, object_name_field = excluded.object_name_field,
        id_length = excluded.id_length, search_prefix = excluded.search_prefix,
        time_to_live = excluded.time_to_live, allow_prune = excluded.allow_prune,
        allow_list = excluded.allow_list, description = excluded.description,
        status = excluded.status";

pub(super) fn upsert_object(
    tx: &mut impl Sql,
    name: &str,
    o: &ObjectDef,
) -> Result<(), CatalogError> {
    tx.exec(
        &Query::same(UPSERT_OBJECT),
        &[
            text(name),
            text(o.object_type.as_str()),
            opt_text(&o.conn_string),
            opt_text(&o.key_field),
            opt_text(&o.name_field),
            Val::Int(o.id_length),
            opt_text(&o.search_prefix),
            Val::Int(o.time_to_live),
            Val::Flag(o.allow_prune),
            Val::Flag(o.allow_list),
            opt_text(&o.description),
            Val::Flag(o.enabled),
        ],
    )?;
    Ok(())
}

pub(super) const UPSERT_GROUP: &str =
    "INSERT INTO job_group (job_group_name, maintenance, description, status)
    VALUES (?1, ?2, ?3, ?4)
    ON CONFLICT (job_group_name) DO UPDATE SET
        maintenance = excluded.maintenance, description = excluded.description,
        status = excluded.status";

// A changed definition bumps the generation: every node's scheduler reloads it and records the
// job's next run from the new fields (`job_activation.next_run_at`).
pub(super) const UPSERT_JOB: &str = "INSERT INTO job
    (job_name, processor_id, job_group_id, job_type_id, job_payload, description, priority,
     timeout, run_always, run_delay, run_every, run_on_the, run_at, run_date, cron, timezone,
     misfire_policy, misfire_window, max_catchup, overlap_policy, max_overlap, max_attempts,
     backoff_base, backoff_max, required, status, stretch_max, start_within, aging)
    VALUES (?1,
        (SELECT processor_id FROM job_processor WHERE processor_name = ?2),
        (SELECT job_group_id FROM job_group WHERE job_group_name = ?3),
        (SELECT job_type_id FROM job_type WHERE job_type = ?4),
        ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22,
        ?23, ?24, ?25, ?26, ?27, ?28, ?29)
    ON CONFLICT (job_name) DO UPDATE SET
        processor_id = excluded.processor_id, job_group_id = excluded.job_group_id,
        job_type_id = excluded.job_type_id, job_payload = excluded.job_payload,
        description = excluded.description, priority = excluded.priority,
        timeout = excluded.timeout, run_always = excluded.run_always,
        run_delay = excluded.run_delay, run_every = excluded.run_every,
        run_on_the = excluded.run_on_the, run_at = excluded.run_at, run_date = excluded.run_date,
        cron = excluded.cron, timezone = excluded.timezone,
        misfire_policy = excluded.misfire_policy, misfire_window = excluded.misfire_window,
        max_catchup = excluded.max_catchup, overlap_policy = excluded.overlap_policy,
        max_overlap = excluded.max_overlap, max_attempts = excluded.max_attempts,
        backoff_base = excluded.backoff_base, backoff_max = excluded.backoff_max,
        required = excluded.required, status = excluded.status,
        stretch_max = excluded.stretch_max, start_within = excluded.start_within,
        aging = excluded.aging";
pub(super) const SELECT_JOB_ID: &str = "SELECT job_id FROM job WHERE job_name = ?1";
pub(super) const DELETE_JOB_OBJECTS: &str = "DELETE FROM job_object WHERE job_id = ?1";
pub(super) const INSERT_JOB_OBJECT: &str = "INSERT INTO job_object (job_id, object_id)
    SELECT CAST(?1 AS bigint), object_id FROM object WHERE object_name = ?2";

pub(super) fn upsert_job(tx: &mut impl Sql, name: &str, j: &JobDef) -> Result<(), CatalogError> {
    let s = &j.schedule;
    tx.exec(
        &Query::same(UPSERT_JOB),
        &[
            text(name),
            text(&j.processor),
            opt_text(&j.group),
            text(j.job_type.as_str()),
            text(j.payload.text()),
            opt_text(&j.description),
            int(j.priority),
            int(j.timeout),
            Val::Flag(s.run_always),
            int(s.run_delay),
            Val::Int(s.run_every),
            Val::Int(s.run_on_the),
            opt_text(&s.run_at),
            opt_text(&s.run_date),
            opt_text(&s.cron),
            opt_text(&s.timezone),
            text(j.misfire_policy.as_str()),
            int(j.misfire_window),
            int(j.max_catchup),
            text(j.overlap_policy.as_str()),
            int(j.max_overlap),
            int(j.max_attempts),
            int(j.backoff_base),
            int(j.backoff_max),
            Val::Flag(j.required),
            Val::Flag(j.enabled),
            int(j.stretch_max),
            Val::Int((j.start_within > 0).then_some(j.start_within)),
            Val::Int((j.aging > 0).then_some(j.aging)),
        ],
    )?;
    let job_id = tx
        .row(&Query::same(SELECT_JOB_ID), &[text(name)], |r| r.int(0))?
        .ok_or_else(|| CatalogError::Corrupt(format!("job `{name}` is gone after its upsert")))?;
    tx.exec(&Query::same(DELETE_JOB_OBJECTS), &[int(job_id)])?;
    for object in &j.objects {
        tx.exec(
            &Query::same(INSERT_JOB_OBJECT),
            &[int(job_id), text(object)],
        )?;
    }
    Ok(())
}

/// The processor columns [`processor_of`] reads, from `job_processor`; a query adds its tail.
macro_rules! select_processors {
    () => {
        "SELECT processor_name, instances, max_instances, ip_address,
    port, rpc_user, rpc_password, status, nodes, prefetch FROM job_processor"
    };
}
pub(super) use select_processors;
pub(super) const SELECT_PROCESSORS: &str = select_processors!();
pub(super) const SELECT_OBJECTS: &str = "SELECT object_name, object_type, conn_string, object_key,
    object_name_field, id_length, search_prefix, time_to_live, allow_prune, allow_list,
    description, status FROM object";
pub(super) const SELECT_GROUPS: &str =
    "SELECT job_group_name, maintenance, description, status FROM job_group";
/// A query of jobs with their bookkeeping, `$tail` (a WHERE or an ORDER BY) added: on SQLite
/// the bookkeeping is columns of `job`; on PostgreSQL the view `job_progress` sums each node's
/// tally (see `migrations/postgres/0001_catalog.sql`). Read by [`job_record_of`].
macro_rules! select_jobs {
    ($tail:literal) => {
        Query::each(
            concat!(
                job_columns!(),
                "(SELECT group_concat(o.object_name, char(31)) FROM job_object jo
        JOIN object o ON o.object_id = jo.object_id WHERE jo.job_id = j.job_id),
    j.job_id, j.in_progress, j.last_date_begin, j.last_date_end, j.last_elapse,
    j.last_response, ",
                next_run!(),
                ", j.stretch_max, j.start_within, j.aging",
                job_joins!(),
                $tail
            ),
            concat!(
                job_columns!(),
                "(SELECT string_agg(o.object_name, chr(31)) FROM job_object jo
        JOIN object o ON o.object_id = jo.object_id WHERE jo.job_id = j.job_id),
    j.job_id, pr.in_progress, pr.last_date_begin, pr.last_date_end, pr.last_elapse,
    pr.last_response, ",
                next_run!(),
                ", j.stretch_max, j.start_within, j.aging",
                job_joins!(),
                "
    JOIN job_progress pr ON pr.job_id = j.job_id",
                $tail
            ),
        )
    };
}

/// When job `j` runs next, the same on both backends: the earliest next run among the nodes
/// that plan it — where it is active, on a node that holds its name and is not fenced (a node
/// stopped or swept plans nothing). Each node records its own (`job_activation.next_run_at`,
/// migration 22): nodes may plan one job differently (a stretch is per node), each writes only
/// its own rows, and a node that deactivates the job or stops drops out of the minimum at
/// once, before it has cleared anything. None for a disabled job.
macro_rules! next_run {
    () => {
        "(SELECT min(na.next_run_at) FROM job_activation na JOIN node nn ON nn.node_id = na.node_id
        WHERE na.job_id = j.job_id AND na.state = 'active' AND j.status = 1
          AND nn.pid IS NOT NULL AND nn.fenced_at IS NULL)"
    };
}

/// [`next_run!`], for the orders of a page of jobs.
pub(super) const NEXT_RUN: &str = next_run!();

/// The definition's columns of [`select_jobs`], the same on both backends.
macro_rules! job_columns {
    () => {
        "SELECT j.job_name, t.job_type, p.processor_name, g.job_group_name,
    j.job_payload, j.description, j.priority, j.timeout, j.run_always, j.run_delay, j.run_every,
    j.run_on_the, j.run_at, j.run_date, j.cron, j.timezone, j.misfire_policy, j.misfire_window,
    j.max_catchup, j.overlap_policy, j.max_overlap, j.max_attempts, j.backoff_base,
    j.backoff_max, j.status, j.required,
    "
    };
}

/// The joins of [`select_jobs`], the same on both backends.
macro_rules! job_joins {
    () => {
        "
    FROM job j
    JOIN job_type t ON t.job_type_id = j.job_type_id
    JOIN job_processor p ON p.processor_id = j.processor_id
    LEFT JOIN job_group g ON g.job_group_id = j.job_group_id"
    };
}

/// Every job, by name.
pub(super) const SELECT_JOBS_BY_NAME: Query = select_jobs!(" ORDER BY j.job_name");
/// The job named `?1`.
pub(super) const SELECT_JOB_NAMED: Query = select_jobs!(" WHERE j.job_name = ?1");
/// The job with id `?1`.
pub(super) const SELECT_JOB_WITH_ID: Query = select_jobs!(" WHERE j.job_id = ?1");

/// The jobs of `q` (one of the queries above) with `vals`.
pub(crate) fn jobs_of(
    tx: &mut impl Sql,
    q: &Query,
    vals: &[Val],
) -> Result<Vec<JobRecord>, CatalogError> {
    tx.rows(q, vals, |r| job_record_of(r)?)
}

/// A processor's name and definition from a row of [`SELECT_PROCESSORS`]' columns, from
/// either backend's row.
pub(crate) fn processor_of<C: Cols + ?Sized>(r: &C) -> Result<(String, ProcessorDef), C::Error> {
    Ok((
        r.text(0)?,
        ProcessorDef {
            instances: r.int(1)?,
            max_instances: r.opt_int(2)?,
            prefetch: r.opt_int(9)?,
            ip_address: r.opt_text(3)?,
            port: r.opt_int(4)?,
            rpc_user: r.opt_text(5)?,
            rpc_password: r.opt_text(6)?,
            enabled: r.flag(7)?,
            nodes: r
                .opt_text(8)?
                .and_then(|text| serde_json::from_str(&text).ok())
                .unwrap_or_default(),
        },
    ))
}

/// An object's name and definition from a row of [`SELECT_OBJECTS`]' columns.
pub(crate) fn object_row<C: Cols + ?Sized>(
    r: &C,
) -> Result<Result<(String, ObjectDef), CatalogError>, C::Error> {
    let object_type = r.text(1)?;
    let Some(object_type) = ObjectType::parse(&object_type) else {
        return Ok(Err(CatalogError::Corrupt(format!(
            "object_type `{object_type}`"
        ))));
    };
    Ok(Ok((
        r.text(0)?,
        ObjectDef {
            object_type,
            conn_string: r.opt_text(2)?,
            key_field: r.opt_text(3)?,
            name_field: r.opt_text(4)?,
            id_length: r.opt_int(5)?,
            search_prefix: r.opt_text(6)?,
            time_to_live: r.opt_int(7)?,
            allow_prune: r.flag(8)?,
            allow_list: r.flag(9)?,
            description: r.opt_text(10)?,
            enabled: r.flag(11)?,
        },
    )))
}

/// A group's name and definition from a row of [`SELECT_GROUPS`]' columns.
pub(crate) fn group_row<C: Cols + ?Sized>(r: &C) -> Result<(String, GroupDef), C::Error> {
    Ok((
        r.text(0)?,
        GroupDef {
            maintenance: r.flag(1)?,
            description: r.opt_text(2)?,
            enabled: r.flag(3)?,
        },
    ))
}

/// The whole catalog's definitions as a file model, on either backend.
pub(crate) fn export_with(tx: &mut impl Sql) -> Result<CatalogFile, CatalogError> {
    let mut file = CatalogFile::default();
    for (name, def) in tx.rows(&Query::same(SELECT_PROCESSORS), &[], |r| processor_of(r))? {
        file.processors.insert(name, def);
    }
    for object in tx.rows(&Query::same(SELECT_OBJECTS), &[], |r| object_row(r))? {
        let (name, def) = object?;
        file.objects.insert(name, def);
    }
    for (name, def) in tx.rows(&Query::same(SELECT_GROUPS), &[], |r| group_row(r))? {
        file.groups.insert(name, def);
    }
    for record in jobs_of(tx, &SELECT_JOBS_BY_NAME, &[])? {
        file.jobs.insert(record.name, record.def);
    }
    Ok(file)
}

/// [`export_with`] on a SQLite connection.
pub(super) fn export_from(conn: &Connection) -> Result<CatalogFile, CatalogError> {
    export_with(&mut &*conn)
}

/// A job as stored: its definition and the engine's bookkeeping (millix names).
#[derive(Debug, Clone)]
pub struct JobRecord {
    /// `job_id`.
    pub id: i64,
    /// `job_name`.
    pub name: String,
    /// The definition.
    pub def: JobDef,
    /// Runs executing now.
    pub in_progress: i64,
    /// Epoch ms the last run began.
    pub last_date_begin: Option<i64>,
    /// Epoch ms the last run ended.
    pub last_date_end: Option<i64>,
    /// The last run's duration in ms.
    pub last_elapse: Option<i64>,
    /// The last run's result or error, abbreviated.
    pub last_response: Option<String>,
    /// Epoch ms of the next scheduled slot, when computed.
    pub next_run_at: Option<i64>,
}

/// Reads one row of [`select_jobs`]' queries, from either backend; the outer `Result` is the
/// driver's, the inner one ours.
pub(crate) fn job_record_of<C: Cols + ?Sized>(
    r: &C,
) -> Result<Result<JobRecord, CatalogError>, C::Error> {
    let name = r.text(0)?;
    let job_type = r.text(1)?;
    let payload = r.text(4)?;
    let misfire = r.text(16)?;
    let overlap = r.text(19)?;
    let objects = r.opt_text(26)?;
    let corrupt = |what: String| Ok(Err(CatalogError::Corrupt(format!("job `{name}`: {what}"))));
    let Some(job_type) = JobType::parse(&job_type) else {
        return corrupt(format!("job type `{job_type}`"));
    };
    let Ok(Json::Object(payload)) = serde_json::from_str::<Json>(&payload) else {
        return corrupt("payload is not a JSON object".into());
    };
    let (Some(misfire_policy), Some(overlap_policy)) = (
        MisfirePolicy::parse(&misfire),
        OverlapPolicy::parse(&overlap),
    ) else {
        return corrupt(format!("policies `{misfire}` / `{overlap}`"));
    };
    let objects: BTreeSet<String> = objects
        .map(|s| s.split('\u{1f}').map(String::from).collect())
        .unwrap_or_default();
    let def = JobDef {
        job_type,
        processor: r.text(2)?,
        group: r.opt_text(3)?,
        payload: (payload as JsonMap<String, Json>).into(),
        description: r.opt_text(5)?,
        priority: r.int(6)?,
        timeout: r.int(7)?,
        schedule: ScheduleSpec {
            run_always: r.flag(8)?,
            run_delay: r.int(9)?,
            run_every: r.opt_int(10)?,
            run_on_the: r.opt_int(11)?,
            run_at: r.opt_text(12)?,
            run_date: r.opt_text(13)?,
            cron: r.opt_text(14)?,
            timezone: r.opt_text(15)?,
        },
        misfire_policy,
        misfire_window: r.int(17)?,
        max_catchup: r.int(18)?,
        overlap_policy,
        max_overlap: r.int(20)?,
        max_attempts: r.int(21)?,
        backoff_base: r.int(22)?,
        backoff_max: r.int(23)?,
        enabled: r.flag(24)?,
        required: r.flag(25)?,
        objects: objects.into_iter().collect(),
        stretch_max: r.int(34)?,
        start_within: r.opt_int(35)?.unwrap_or(0),
        aging: r.opt_int(36)?.unwrap_or(0),
    };
    Ok(Ok(JobRecord {
        name,
        def,
        id: r.int(27)?,
        in_progress: r.int(28)?,
        last_date_begin: r.opt_int(29)?,
        last_date_end: r.opt_int(30)?,
        last_elapse: r.opt_int(31)?,
        last_response: r.opt_text(32)?,
        next_run_at: r.opt_int(33)?,
    }))
}

pub(super) const SELECT_PROCESSOR_ROWS: Query = Query::each(
    "SELECT p.processor_name, p.instances, p.max_instances,
    p.ip_address, p.status,
    (SELECT count(*) FROM job j WHERE j.processor_id = p.processor_id),
    (SELECT json_group_array(json_object('node', n.node_name, 'instances', a.instances,
                                         'reason', a.reason, 'changed_at', a.changed_at))
       FROM processor_activation a JOIN node n ON n.node_id = a.node_id
       WHERE a.processor_id = p.processor_id)
    FROM job_processor p ORDER BY p.processor_name",
    "SELECT p.processor_name, p.instances, p.max_instances,
    p.ip_address, p.status,
    (SELECT count(*) FROM job j WHERE j.processor_id = p.processor_id),
    (SELECT coalesce(json_agg(json_build_object('node', n.node_name, 'instances', a.instances,
                                                'reason', a.reason, 'changed_at', a.changed_at)
                              ORDER BY n.node_name), '[]')::text
       FROM processor_activation a JOIN node n ON n.node_id = a.node_id
       WHERE a.processor_id = p.processor_id)
    FROM job_processor p ORDER BY p.processor_name",
);

/// A processor as listed.
#[derive(Debug, Clone, Serialize)]
pub struct ProcessorRow {
    /// Name.
    pub name: String,
    /// Concurrent executions.
    pub instances: i64,
    /// Upper bound for self-tuning.
    pub max_instances: Option<i64>,
    /// The remote node's address, if remote.
    pub remote: Option<String>,
    /// `status = 1`.
    pub enabled: bool,
    /// Jobs assigned.
    pub jobs: i64,
    /// The instances each node's policy runs (nodes that never changed them run `instances`).
    pub running: Vec<NodeInstances>,
}

/// How many instances of a processor one node runs, as its policy last decided.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct NodeInstances {
    /// The node.
    pub node: String,
    /// Instances it runs.
    pub instances: i64,
    /// Why, as the decision said.
    pub reason: Option<String>,
    /// When, epoch ms.
    pub changed_at: Option<i64>,
}

const SELECT_OBJECT_CONN: Query =
    Query::same("SELECT conn_string FROM object WHERE object_name = ?1 AND status = 1");

/// An enabled object's `conn_string` (`Some(None)`: it has none), or `None` when there is no
/// such enabled object.
pub fn object_conn_string(
    mut c: impl Sql,
    name: &str,
) -> Result<Option<Option<String>>, CatalogError> {
    c.row(&SELECT_OBJECT_CONN, &[name.into()], |r| r.opt_text(0))
}

pub(super) const SELECT_OBJECT_ROWS: &str = "SELECT o.object_name, o.object_type, o.conn_string,
    o.time_to_live, o.allow_prune, o.status,
    (SELECT count(*) FROM job_object jo WHERE jo.object_id = o.object_id)
    FROM object o ORDER BY o.object_name";

/// An object as listed.
#[derive(Debug, Clone, Serialize)]
pub struct ObjectRow {
    /// Name.
    pub name: String,
    /// table, file or view.
    pub object_type: String,
    /// Where it lives.
    pub conn_string: Option<String>,
    /// Seconds before rows may be pruned.
    pub time_to_live: Option<i64>,
    /// Pruning allowed.
    pub allow_prune: bool,
    /// `status = 1`.
    pub enabled: bool,
    /// Jobs that write it.
    pub writers: i64,
}
