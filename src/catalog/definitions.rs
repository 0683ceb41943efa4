//! The catalog's definitions as rows: an import's upserts of processors, objects, groups and
//! jobs (with its audit row), the export back to a catalog file, and the rows that list jobs,
//! processors and objects.

use std::collections::BTreeSet;

use rusqlite::{Connection, OptionalExtension, Row, Transaction, params};
use serde::Serialize;
use serde_json::{Map as JsonMap, Value as Json};

use super::CatalogError;
use super::audit::{audit, audit_changes};
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

pub(super) fn import_in(
    tx: &Transaction<'_>,
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
            tx.execute(
                UPSERT_GROUP,
                params![name, g.maintenance, g.description, g.enabled],
            )?;
        }
    }
    for (name, j) in &file.jobs {
        let old = before.jobs.get(name);
        if note("job", name, old.is_some(), old == Some(j)) {
            upsert_job(tx, name, j)?;
        }
    }
    // A created entry is shown with its values; an updated one with the fields that changed.
    let described = crate::jobconf::merge::described(file);
    let changes = report
        .changes
        .iter()
        .map(|c| match c.change {
            "created" => described
                .iter()
                .find(|d| d.section == c.section && d.name == c.name)
                .unwrap_or(c)
                .clone(),
            _ => c.clone(),
        })
        .collect();
    let mut detail = audit_changes(changes);
    detail["created"] = report.created.len().into();
    detail["updated"] = report.updated.len().into();
    detail["unchanged"] = report.unchanged.into();
    audit(tx, actor, action, "catalog", Some(&detail))?;
    Ok(report)
}

pub(super) const UPSERT_PROCESSOR: &str = "INSERT INTO job_processor
    (processor_name, instances, max_instances, ip_address, port, rpc_user, rpc_password, status,
     nodes)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
    ON CONFLICT (processor_name) DO UPDATE SET
        instances = excluded.instances, max_instances = excluded.max_instances,
        ip_address = excluded.ip_address, port = excluded.port, rpc_user = excluded.rpc_user,
        rpc_password = excluded.rpc_password, status = excluded.status, nodes = excluded.nodes";

pub(super) fn upsert_processor(
    tx: &Transaction<'_>,
    name: &str,
    p: &ProcessorDef,
) -> Result<(), CatalogError> {
    tx.execute(
        UPSERT_PROCESSOR,
        params![
            name,
            p.instances,
            p.max_instances,
            p.ip_address,
            p.port,
            p.rpc_user,
            p.rpc_password,
            p.enabled,
            // Any node: NULL, so that the runtime's filter is one test on most catalogs.
            (!p.nodes.is_empty()).then(|| Json::from(p.nodes.clone()).to_string())
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
    tx: &Transaction<'_>,
    name: &str,
    o: &ObjectDef,
) -> Result<(), CatalogError> {
    tx.execute(
        UPSERT_OBJECT,
        params![
            name,
            o.object_type.as_str(),
            o.conn_string,
            o.key_field,
            o.name_field,
            o.id_length,
            o.search_prefix,
            o.time_to_live,
            o.allow_prune,
            o.allow_list,
            o.description,
            o.enabled
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

// A changed definition clears `next_run_at`, so the scheduler recomputes it from the new fields.
pub(super) const UPSERT_JOB: &str = "INSERT INTO job
    (job_name, processor_id, job_group_id, job_type_id, job_payload, description, priority,
     timeout, run_always, run_delay, run_every, run_on_the, run_at, run_date, cron, timezone,
     misfire_policy, misfire_window, max_catchup, overlap_policy, max_overlap, max_attempts,
     backoff_base, backoff_max, required, status, stretch_max)
    VALUES (?1,
        (SELECT processor_id FROM job_processor WHERE processor_name = ?2),
        (SELECT job_group_id FROM job_group WHERE job_group_name = ?3),
        (SELECT job_type_id FROM job_type WHERE job_type = ?4),
        ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22,
        ?23, ?24, ?25, ?26, ?27)
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
        stretch_max = excluded.stretch_max, next_run_at = NULL";
pub(super) const SELECT_JOB_ID: &str = "SELECT job_id FROM job WHERE job_name = ?1";
pub(super) const DELETE_JOB_OBJECTS: &str = "DELETE FROM job_object WHERE job_id = ?1";
pub(super) const INSERT_JOB_OBJECT: &str = "INSERT INTO job_object (job_id, object_id)
    SELECT ?1, object_id FROM object WHERE object_name = ?2";

pub(super) fn upsert_job(tx: &Transaction<'_>, name: &str, j: &JobDef) -> Result<(), CatalogError> {
    let s = &j.schedule;
    tx.execute(
        UPSERT_JOB,
        params![
            name,
            j.processor,
            j.group,
            j.job_type.as_str(),
            Json::Object(j.payload.clone()).to_string(),
            j.description,
            j.priority,
            j.timeout,
            s.run_always,
            s.run_delay,
            s.run_every,
            s.run_on_the,
            s.run_at,
            s.run_date,
            s.cron,
            s.timezone,
            j.misfire_policy.as_str(),
            j.misfire_window,
            j.max_catchup,
            j.overlap_policy.as_str(),
            j.max_overlap,
            j.max_attempts,
            j.backoff_base,
            j.backoff_max,
            j.required,
            j.enabled,
            j.stretch_max
        ],
    )?;
    let job_id: i64 = tx.query_row(SELECT_JOB_ID, [name], |r| r.get(0))?;
    tx.execute(DELETE_JOB_OBJECTS, [job_id])?;
    for object in &j.objects {
        tx.execute(INSERT_JOB_OBJECT, params![job_id, object])?;
    }
    Ok(())
}

pub(super) const SELECT_PROCESSORS: &str =
    "SELECT processor_name, instances, max_instances, ip_address,
    port, rpc_user, rpc_password, status, nodes FROM job_processor";
pub(super) const SELECT_OBJECTS: &str = "SELECT object_name, object_type, conn_string, object_key,
    object_name_field, id_length, search_prefix, time_to_live, allow_prune, allow_list,
    description, status FROM object";
pub(super) const SELECT_GROUPS: &str =
    "SELECT job_group_name, maintenance, description, status FROM job_group";
pub(super) const SELECT_JOBS: &str =
    "SELECT j.job_name, t.job_type, p.processor_name, g.job_group_name,
    j.job_payload, j.description, j.priority, j.timeout, j.run_always, j.run_delay, j.run_every,
    j.run_on_the, j.run_at, j.run_date, j.cron, j.timezone, j.misfire_policy, j.misfire_window,
    j.max_catchup, j.overlap_policy, j.max_overlap, j.max_attempts, j.backoff_base,
    j.backoff_max, j.status, j.required,
    (SELECT group_concat(o.object_name, char(31)) FROM job_object jo
        JOIN object o ON o.object_id = jo.object_id WHERE jo.job_id = j.job_id),
    j.job_id, j.in_progress, j.last_date_begin, j.last_date_end, j.last_elapse,
    j.last_response, j.next_run_at, j.stretch_max
    FROM job j
    JOIN job_type t ON t.job_type_id = j.job_type_id
    JOIN job_processor p ON p.processor_id = j.processor_id
    LEFT JOIN job_group g ON g.job_group_id = j.job_group_id";

/// A processor's name and definition from a row of [`SELECT_PROCESSORS`]' columns.
pub(crate) fn processor_row(r: &Row<'_>) -> rusqlite::Result<(String, ProcessorDef)> {
    Ok((
        r.get(0)?,
        ProcessorDef {
            instances: r.get(1)?,
            max_instances: r.get(2)?,
            ip_address: r.get(3)?,
            port: r.get(4)?,
            rpc_user: r.get(5)?,
            rpc_password: r.get(6)?,
            enabled: r.get::<_, i64>(7)? == 1,
            nodes: r
                .get::<_, Option<String>>(8)?
                .and_then(|text| serde_json::from_str(&text).ok())
                .unwrap_or_default(),
        },
    ))
}

pub(super) fn export_from(conn: &Connection) -> Result<CatalogFile, CatalogError> {
    let mut file = CatalogFile::default();
    let mut stmt = conn.prepare_cached(SELECT_PROCESSORS)?;
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        let (name, def) = processor_row(r)?;
        file.processors.insert(name, def);
    }
    let mut stmt = conn.prepare_cached(SELECT_OBJECTS)?;
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        let object_type: String = r.get(1)?;
        file.objects.insert(
            r.get(0)?,
            ObjectDef {
                object_type: ObjectType::parse(&object_type)
                    .ok_or_else(|| CatalogError::Corrupt(format!("object_type `{object_type}`")))?,
                conn_string: r.get(2)?,
                key_field: r.get(3)?,
                name_field: r.get(4)?,
                id_length: r.get(5)?,
                search_prefix: r.get(6)?,
                time_to_live: r.get(7)?,
                allow_prune: r.get::<_, i64>(8)? == 1,
                allow_list: r.get::<_, i64>(9)? == 1,
                description: r.get(10)?,
                enabled: r.get::<_, i64>(11)? == 1,
            },
        );
    }
    let mut stmt = conn.prepare_cached(SELECT_GROUPS)?;
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        file.groups.insert(
            r.get(0)?,
            GroupDef {
                maintenance: r.get::<_, i64>(1)? == 1,
                description: r.get(2)?,
                enabled: r.get::<_, i64>(3)? == 1,
            },
        );
    }
    let mut stmt = conn.prepare_cached(SELECT_JOBS)?;
    let records = stmt
        .query_map([], job_record)?
        .collect::<Result<Vec<_>, _>>()?;
    for record in records {
        let record = record?;
        file.jobs.insert(record.name, record.def);
    }
    Ok(file)
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

/// Reads one `SELECT_JOBS` row; the outer `Result` is SQLite's, the inner one is ours.
pub(super) fn job_record(r: &Row<'_>) -> rusqlite::Result<Result<JobRecord, CatalogError>> {
    let name: String = r.get(0)?;
    let job_type: String = r.get(1)?;
    let payload: String = r.get(4)?;
    let misfire: String = r.get(16)?;
    let overlap: String = r.get(19)?;
    let objects: Option<String> = r.get(26)?;
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
        processor: r.get(2)?,
        group: r.get(3)?,
        payload: payload as JsonMap<String, Json>,
        description: r.get(5)?,
        priority: r.get(6)?,
        timeout: r.get(7)?,
        schedule: ScheduleSpec {
            run_always: r.get::<_, i64>(8)? == 1,
            run_delay: r.get(9)?,
            run_every: r.get(10)?,
            run_on_the: r.get(11)?,
            run_at: r.get(12)?,
            run_date: r.get(13)?,
            cron: r.get(14)?,
            timezone: r.get(15)?,
        },
        misfire_policy,
        misfire_window: r.get(17)?,
        max_catchup: r.get(18)?,
        overlap_policy,
        max_overlap: r.get(20)?,
        max_attempts: r.get(21)?,
        backoff_base: r.get(22)?,
        backoff_max: r.get(23)?,
        enabled: r.get::<_, i64>(24)? == 1,
        required: r.get::<_, i64>(25)? == 1,
        objects: objects.into_iter().collect(),
        stretch_max: r.get(34)?,
    };
    Ok(Ok(JobRecord {
        name,
        def,
        id: r.get(27)?,
        in_progress: r.get(28)?,
        last_date_begin: r.get(29)?,
        last_date_end: r.get(30)?,
        last_elapse: r.get(31)?,
        last_response: r.get(32)?,
        next_run_at: r.get(33)?,
    }))
}

pub(super) const SELECT_PROCESSOR_ROWS: &str =
    "SELECT p.processor_name, p.instances, p.max_instances,
    p.ip_address, p.status,
    (SELECT count(*) FROM job j WHERE j.processor_id = p.processor_id),
    (SELECT json_group_array(json_object('node', n.node_name, 'instances', a.instances,
                                         'reason', a.reason, 'changed_at', a.changed_at))
       FROM processor_activation a JOIN node n ON n.node_id = a.node_id
       WHERE a.processor_id = p.processor_id)
    FROM job_processor p ORDER BY p.processor_name";

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

pub(super) const SELECT_OBJECT_CONN: &str =
    "SELECT conn_string FROM object WHERE object_name = ?1 AND status = 1";

/// An enabled object's `conn_string` (`Some(None)`: it has none), or `None` when there is no
/// such enabled object.
pub fn object_conn_string(
    conn: &Connection,
    name: &str,
) -> Result<Option<Option<String>>, CatalogError> {
    Ok(conn
        .prepare_cached(SELECT_OBJECT_CONN)?
        .query_row([name], |r| r.get(0))
        .optional()?)
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
