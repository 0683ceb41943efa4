//! The operator's verbs on the catalog's definitions — seed, import, export, jobs added,
//! changed, enabled, pinned and removed, processors and objects removed, runs queued on demand,
//! audit rows — and their listings, each one transaction on either backend (`Catalog::reading`,
//! `Catalog::writing`), with its audit row.
//!
//! Invariant: a change and its audit row commit together, or neither does; a removal is
//! refused while something still uses the entry.

use rusqlite::{OptionalExtension, params};
use serde_json::{Map as JsonMap, Value as Json};

use super::audit::{SELECT_AUDIT, audit_changes, removed_detail};
use super::definitions::{
    self, SELECT_JOB_ID, SELECT_JOB_NAMED, SELECT_JOBS_BY_NAME, SELECT_OBJECT_ROWS,
    SELECT_PROCESSOR_ROWS, export_from, import_in, upsert_job,
};
use super::sql::{Query, Sql as _};
use super::{
    AuditRow, Catalog, CatalogError, ImportReport, JobRecord, ObjectRow, ProcessorRow, Store,
    activation, audit_field, audit_in, not_found, now_ms, queue, verbs, write_tx,
};
use crate::jobconf::{CatalogFile, JobDef};

impl Catalog {
    /// Imports `config`'s default catalog text into an empty, never-seeded catalog. Returns
    /// whether it did; a catalog that was seeded before is never touched again, so operator
    /// edits survive restarts.
    pub fn seed_if_new(&self, file: &CatalogFile, source: &str) -> Result<bool, CatalogError> {
        let mut conn = match &self.store {
            Store::Sqlite(lite) => lite.writer(),
            Store::Postgres(pg) => return pg.seed_if_new(file, source, now_ms()),
        };
        let tx = write_tx(&mut conn)?;
        let seeded: Option<String> = tx
            .query_row(SELECT_META, ["seeded_at"], |r| r.get(0))
            .optional()?;
        if seeded.is_some() {
            return Ok(false);
        }
        let before = export_from(&tx)?;
        import_in(&tx, &before, file, "node", &format!("seed from {source}"))?;
        tx.execute(UPSERT_META, params!["seeded_at", now_ms().to_string()])?;
        tx.execute(UPSERT_META, params!["seeded_from", source])?;
        tx.commit()?;
        Ok(true)
    }

    /// Upserts every entry of `file` by name, in one transaction; entries not in the file stay.
    pub fn import(&self, file: &CatalogFile, actor: &str) -> Result<ImportReport, CatalogError> {
        let file = std::sync::Arc::new(file.clone());
        self.update(actor, "import", move |_| {
            Ok::<_, CatalogError>(std::sync::Arc::clone(&file))
        })
    }

    /// One transaction that reads the whole catalog, asks `entries` what to store over it (a
    /// merge, a validation: an error changes nothing) and upserts what differs, with one audit
    /// row for `action`. On PostgreSQL, under the definitions' lock (two nodes' imports never
    /// diff against a catalog the other is changing), and `entries` is asked again if the
    /// connection was lost before the commit.
    pub fn update<E>(
        &self,
        actor: &str,
        action: &str,
        mut entries: impl FnMut(&CatalogFile) -> Result<std::sync::Arc<CatalogFile>, E> + Send + 'static,
    ) -> Result<ImportReport, E>
    where
        E: From<CatalogError> + Send + 'static,
    {
        let mut conn = match &self.store {
            Store::Sqlite(lite) => lite.writer(),
            Store::Postgres(pg) => return pg.update(actor, action, entries),
        };
        let tx = write_tx(&mut conn)?;
        let before = export_from(&tx)?;
        let file = entries(&before)?;
        let report = import_in(&tx, &before, &file, actor, action)?;
        tx.commit().map_err(CatalogError::from)?;
        Ok(report)
    }

    /// The whole catalog as a file model.
    pub fn export(&self) -> Result<CatalogFile, CatalogError> {
        self.reading(|tx| definitions::export_with(tx))
    }

    /// One job with its runtime state.
    pub fn job(&self, name: &str) -> Result<JobRecord, CatalogError> {
        let name = name.to_string();
        self.reading(move |tx| {
            let jobs = definitions::jobs_of(tx, &SELECT_JOB_NAMED, &[name.as_str().into()])?;
            jobs.into_iter()
                .next()
                .ok_or_else(|| not_found("job", &name))
        })
    }

    /// Every job with its runtime state, by name.
    pub fn jobs(&self) -> Result<Vec<JobRecord>, CatalogError> {
        self.reading(|tx| definitions::jobs_of(tx, &SELECT_JOBS_BY_NAME, &[]))
    }

    /// Inserts or replaces one job (already validated against the catalog).
    pub fn put_job(&self, name: &str, job: &JobDef, actor: &str) -> Result<(), CatalogError> {
        let (name, job, actor) = (name.to_string(), job.clone(), actor.to_string());
        self.writing(move |tx| {
            let before = definitions::export_with(tx)?;
            let existed = before.jobs.contains_key(&name);
            upsert_job(tx, &name, &job)?;
            let action = if existed { "job.edit" } else { "job.add" };
            let mut after = CatalogFile::default();
            after.jobs.insert(name.clone(), job.clone());
            let detail = audit_changes(if existed {
                crate::jobconf::merge::changes(&before, &after)
            } else {
                crate::jobconf::merge::described(&after)
            });
            audit_in(tx, now_ms(), &actor, action, &name, Some(&detail))
        })
    }

    /// Enables or disables a job.
    pub fn set_job_enabled(
        &self,
        name: &str,
        enabled: bool,
        actor: &str,
    ) -> Result<(), CatalogError> {
        let (name, actor) = (name.to_string(), actor.to_string());
        self.writing(move |tx| {
            let was = tx
                .row(&SELECT_JOB_ENABLED, &[name.as_str().into()], |r| r.flag(0))?
                .ok_or_else(|| not_found("job", &name))?;
            tx.exec(&UPDATE_JOB_STATUS, &[enabled.into(), name.as_str().into()])?;
            if !enabled {
                // Enabled again later, the job is new to every node (activated at once by a
                // healthy one); pins stay.
                tx.exec(&FORGET_UNPINNED_ACTIVATION, &[name.as_str().into()])?;
            }
            let detail = serde_json::json!({ "changes": [{
                "section": "job", "name": name,
                "change": if was == enabled { "unchanged" } else { "updated" },
                "fields": [{ "field": "enabled", "before": was.to_string(), "after": enabled.to_string() }],
            }] });
            let action = if enabled { "job.enable" } else { "job.disable" };
            audit_in(tx, now_ms(), &actor, action, &name, Some(&detail))
        })
    }

    /// Removes a job and its run history; refused while one of its runs is executing.
    pub fn remove_job(&self, name: &str, actor: &str) -> Result<(), CatalogError> {
        let (name, actor) = (name.to_string(), actor.to_string());
        self.writing(move |tx| {
            let running = tx
                .row(&COUNT_RUNNING_OF_JOB, &[name.as_str().into()], |r| r.int(0))?
                .ok_or_else(|| not_found("job", &name))?;
            if running > 0 {
                return Err(CatalogError::Conflict(format!(
                    "job `{name}` has {running} run(s) executing; disable it and retry when they end"
                )));
            }
            // A workflow naming it as a step would be left running a job that is gone.
            let workflows = tx.rows(&SELECT_WORKFLOWS, &[], |r| Ok((r.text(0)?, r.text(1)?)))?;
            for (workflow, payload) in workflows {
                let steps = serde_json::from_str::<JsonMap<String, Json>>(&payload)
                    .ok()
                    .and_then(|p| crate::jobconf::workflow::WorkflowSpec::parse(&p).ok());
                if let Some(step) = steps
                    .as_ref()
                    .and_then(|s| s.steps.iter().find(|s| s.job == name))
                {
                    return Err(CatalogError::Conflict(format!(
                        "job `{name}` is step `{}` of workflow `{workflow}`: remove the step first",
                        step.name
                    )));
                }
            }
            let detail = removed_detail(tx, |f, g| {
                if let Some(d) = f.jobs.remove(&name) {
                    g.jobs.insert(name.clone(), d);
                }
            })?;
            // Runs of other jobs in its runs' trees keep their history, detached from the runs
            // that go with the job.
            tx.exec(&DETACH_FROM_JOB, &[name.as_str().into()])?;
            tx.exec(&DELETE_JOB, &[name.as_str().into()])?;
            audit_in(tx, now_ms(), &actor, "job.remove", &name, Some(&detail))
        })
    }

    /// Removes a processor; refused while jobs are assigned to it.
    pub fn remove_processor(&self, name: &str, actor: &str) -> Result<(), CatalogError> {
        let (name, actor) = (name.to_string(), actor.to_string());
        self.writing(move |tx| {
            let jobs = tx.row(&SELECT_PROCESSOR_JOBS, &[name.as_str().into()], |r| {
                r.opt_text(0)
            })?;
            match jobs {
                None => return Err(not_found("processor", &name)),
                Some(Some(jobs)) => {
                    return Err(CatalogError::Conflict(format!(
                        "processor `{name}` runs job(s) {jobs}: move or remove them first"
                    )));
                }
                Some(None) => {}
            }
            let detail = removed_detail(tx, |f, g| {
                if let Some(d) = f.processors.remove(&name) {
                    g.processors.insert(name.clone(), d);
                }
            })?;
            tx.exec(&DELETE_PROCESSOR, &[name.as_str().into()])?;
            audit_in(
                tx,
                now_ms(),
                &actor,
                "processor.remove",
                &name,
                Some(&detail),
            )
        })
    }

    /// Removes an object; refused while a job writes it or a sql job targets it.
    pub fn remove_object(&self, name: &str, actor: &str) -> Result<(), CatalogError> {
        let (name, actor) = (name.to_string(), actor.to_string());
        self.writing(move |tx| {
            let users = tx.row(&SELECT_OBJECT_USERS, &[name.as_str().into()], |r| {
                r.opt_text(0)
            })?;
            match users {
                None => return Err(not_found("object", &name)),
                Some(Some(jobs)) => {
                    return Err(CatalogError::Conflict(format!(
                        "object `{name}` is written by job(s) {jobs}: change them first"
                    )));
                }
                Some(None) => {}
            }
            let detail = removed_detail(tx, |f, g| {
                if let Some(d) = f.objects.remove(&name) {
                    g.objects.insert(name.clone(), d);
                }
            })?;
            tx.exec(&DELETE_OBJECT, &[name.as_str().into()])?;
            audit_in(tx, now_ms(), &actor, "object.remove", &name, Some(&detail))
        })
    }

    /// Queues an on-demand run of `name` with `params` (a JSON object); a running node picks it
    /// up within its change-check interval (on PostgreSQL, at once: the run is announced).
    /// Returns the run id.
    pub fn enqueue_now(
        &self,
        name: &str,
        params: Option<&Json>,
        actor: &str,
        start_within: Option<i64>,
    ) -> Result<i64, CatalogError> {
        let params = params.map(Json::to_string);
        let mut conn = match &self.store {
            Store::Sqlite(lite) => lite.writer(),
            Store::Postgres(pg) => {
                let queued = pg.trigger(name, vec![params], now_ms(), actor, start_within)?;
                return Ok(queued.run_ids[0]);
            }
        };
        let tx = write_tx(&mut conn)?;
        let queued = verbs::trigger(&tx, name, &[params], now_ms(), actor, start_within)?;
        tx.commit()?;
        Ok(queued.run_ids[0])
    }

    /// Writes one audit row on its own (for a change that lives outside the catalog, such as
    /// pausing a running node).
    pub fn record_audit(
        &self,
        actor: &str,
        action: &str,
        subject: &str,
        detail: &Json,
    ) -> Result<(), CatalogError> {
        let (actor, action, subject, detail) = (
            actor.to_string(),
            action.to_string(),
            subject.to_string(),
            detail.clone(),
        );
        self.writing(move |tx| audit_in(tx, now_ms(), &actor, &action, &subject, Some(&detail)))
    }

    /// Pins `name` active or inactive on node `node` (created if new), or removes the pin.
    pub fn pin_job(
        &self,
        name: &str,
        node: &str,
        pin: Option<crate::model::Pin>,
        actor: &str,
    ) -> Result<(), CatalogError> {
        let (name, node, actor) = (name.to_string(), node.to_string(), actor.to_string());
        self.writing(move |tx| {
            let job_id = tx
                .row(&Query::same(SELECT_JOB_ID), &[name.as_str().into()], |r| {
                    r.int(0)
                })?
                .ok_or_else(|| not_found("job", &name))?;
            let node_id = activation::node_id(&mut *tx, &node, true)?
                .ok_or_else(|| not_found("node", &node))?;
            activation::lock_node(&mut *tx, node_id)?;
            let before = activation::pin_of(&mut *tx, node_id, job_id)?;
            activation::set_pin(&mut *tx, node_id, job_id, pin, now_ms())?;
            let mut detail = audit_field(
                "job",
                &name,
                "pin",
                before.as_deref(),
                pin.map(|p| p.as_str()),
            );
            detail["node"] = node.as_str().into();
            audit_in(tx, now_ms(), &actor, "job.pin", &name, Some(&detail))
        })
    }

    /// Processors with how many jobs each runs.
    pub fn processors(&self) -> Result<Vec<ProcessorRow>, CatalogError> {
        self.reading(|tx| {
            tx.rows(&SELECT_PROCESSOR_ROWS, &[], |r| {
                Ok(ProcessorRow {
                    name: r.text(0)?,
                    instances: r.int(1)?,
                    max_instances: r.opt_int(2)?,
                    remote: r.opt_text(3)?,
                    enabled: r.flag(4)?,
                    jobs: r.int(5)?,
                    running: r
                        .opt_text(6)?
                        .and_then(|j| serde_json::from_str(&j).ok())
                        .unwrap_or_default(),
                })
            })
        })
    }

    /// Objects with how many jobs write each.
    pub fn objects(&self) -> Result<Vec<ObjectRow>, CatalogError> {
        self.reading(|tx| {
            tx.rows(&Query::same(SELECT_OBJECT_ROWS), &[], |r| {
                Ok(ObjectRow {
                    name: r.text(0)?,
                    object_type: r.text(1)?,
                    conn_string: r.opt_text(2)?,
                    time_to_live: r.opt_int(3)?,
                    allow_prune: r.flag(4)?,
                    enabled: r.flag(5)?,
                    writers: r.int(6)?,
                })
            })
        })
    }

    /// A job's consecutive failed runs since its last success (what its backoff comes from).
    pub fn failure_streak(
        &self,
        job_id: i64,
    ) -> Result<crate::schedule::FailureStreak, CatalogError> {
        self.reading(move |tx| queue::failure_streak(tx, job_id))
    }

    /// The most recent audit entries, newest first.
    pub fn audit_log(&self, limit: i64) -> Result<Vec<AuditRow>, CatalogError> {
        self.reading(move |tx| {
            tx.rows(&Query::same(SELECT_AUDIT), &[limit.into()], |r| {
                Ok(AuditRow {
                    at: r.int(0)?,
                    actor: r.text(1)?,
                    action: r.text(2)?,
                    subject: r.opt_text(3)?,
                    detail: r.opt_text(4)?,
                })
            })
        })
    }
}

const COUNT_RUNNING_OF_JOB: Query = Query::same(
    "SELECT (SELECT count(*) FROM job_run r
    WHERE r.job_id = j.job_id AND (r.status = 'claimed' OR r.status = 'running')) FROM job j WHERE j.job_name = ?1",
);
const DELETE_JOB: Query = Query::same("DELETE FROM job WHERE job_name = ?1");
const DELETE_OBJECT: Query = Query::same("DELETE FROM object WHERE object_name = ?1");
const DELETE_PROCESSOR: Query = Query::same("DELETE FROM job_processor WHERE processor_name = ?1");
const DETACH_FROM_JOB: Query = Query::same(
    "WITH gone(id) AS (SELECT r.run_id FROM job_run r
        JOIN job j ON j.job_id = r.job_id WHERE j.job_name = ?1)
    UPDATE job_run SET pid = CASE WHEN pid IN (SELECT id FROM gone) THEN NULL ELSE pid END,
        stump = CASE WHEN stump IN (SELECT id FROM gone) THEN NULL ELSE stump END
    WHERE pid IN (SELECT id FROM gone) OR stump IN (SELECT id FROM gone)",
);
const FORGET_UNPINNED_ACTIVATION: Query = Query::same(
    "DELETE FROM job_activation
    WHERE pinned IS NULL AND job_id = (SELECT job_id FROM job WHERE job_name = ?1)",
);
const SELECT_JOB_ENABLED: Query = Query::same("SELECT status = 1 FROM job WHERE job_name = ?1");
const UPDATE_JOB_STATUS: Query = Query::same("UPDATE job SET status = ?1 WHERE job_name = ?2");
const SELECT_OBJECT_USERS: Query = Query::each(
    "SELECT (SELECT group_concat('`' || j.job_name || '`', ', ')
    FROM job j WHERE EXISTS (SELECT 1 FROM job_object jo WHERE jo.job_id = j.job_id
                             AND jo.object_id = o.object_id)
       OR json_extract(j.job_payload, '$.object') = o.object_name)
    FROM object o WHERE o.object_name = ?1",
    "SELECT (SELECT string_agg('`' || j.job_name || '`', ', ' ORDER BY j.job_id)
    FROM job j WHERE EXISTS (SELECT 1 FROM job_object jo WHERE jo.job_id = j.job_id
                             AND jo.object_id = o.object_id)
       OR j.job_payload::jsonb ->> 'object' = o.object_name)
    FROM object o WHERE o.object_name = $1",
);
const SELECT_PROCESSOR_JOBS: Query = Query::each(
    "SELECT (SELECT group_concat('`' || j.job_name || '`', ', ')
    FROM job j WHERE j.processor_id = p.processor_id) FROM job_processor p
    WHERE p.processor_name = ?1",
    "SELECT (SELECT string_agg('`' || j.job_name || '`', ', ' ORDER BY j.job_id)
    FROM job j WHERE j.processor_id = p.processor_id) FROM job_processor p
    WHERE p.processor_name = $1",
);
const SELECT_WORKFLOWS: Query = Query::same(
    "SELECT j.job_name, j.job_payload FROM job j
    JOIN job_type t ON t.job_type_id = j.job_type_id WHERE t.job_type = 'workflow'",
);

const SELECT_META: &str = "SELECT value FROM catalog_meta WHERE key = ?1";
const UPSERT_META: &str = "INSERT INTO catalog_meta (key, value) VALUES (?1, ?2)
    ON CONFLICT (key) DO UPDATE SET value = excluded.value";
