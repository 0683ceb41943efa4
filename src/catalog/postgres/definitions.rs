//! The catalog's definitions on PostgreSQL: an import (the upserts of `catalog::definitions`,
//! the same rows, the same report and audit row), the export back to a catalog file, and the
//! jobs with their bookkeeping. The rows are read and the upserts' values built by the SQLite
//! catalog's own functions (`Cols`, `DefinitionWriter`); only the SQL text that differs is here.
//!
//! Invariant: one import is one transaction, under a transaction-level advisory lock, so two
//! nodes importing at once never diff against a catalog the other is changing; an error
//! changes nothing.

use postgres::types::ToSql;
use postgres::types::Type;
use postgres::{Client, Row, Transaction};
use serde_json::Value as Json;

use super::{PgCatalog, commit};
use crate::catalog::CatalogError;
use crate::catalog::definitions::{
    Cols, DefinitionWriter, ImportReport, JobRecord, SELECT_GROUPS, SELECT_JOB_ID, SELECT_OBJECTS,
    SELECT_PROCESSORS, Val, group_row, import_with, job_record_of, object_row, processor_of,
};
use crate::catalog::now_ms;
use crate::jobconf::CatalogFile;

/// The advisory lock key that serializes changes to the definitions (an arbitrary constant:
/// "jv-defs").
const DEFINITIONS_LOCK: i64 = 0x006a_762d_6465_6673;

/// `catalog::definitions::SELECT_JOBS` in PostgreSQL's dialect, the bookkeeping from the view
/// `job_progress`.
const SELECT_JOBS: &str = "SELECT j.job_name, t.job_type, p.processor_name, g.job_group_name,
    j.job_payload, j.description, j.priority, j.timeout, j.run_always, j.run_delay, j.run_every,
    j.run_on_the, j.run_at, j.run_date, j.cron, j.timezone, j.misfire_policy, j.misfire_window,
    j.max_catchup, j.overlap_policy, j.max_overlap, j.max_attempts, j.backoff_base,
    j.backoff_max, j.status, j.required,
    (SELECT string_agg(o.object_name, chr(31)) FROM job_object jo
        JOIN object o ON o.object_id = jo.object_id WHERE jo.job_id = j.job_id),
    j.job_id, pr.in_progress, pr.last_date_begin, pr.last_date_end, pr.last_elapse,
    pr.last_response, j.next_run_at, j.stretch_max
    FROM job j
    JOIN job_type t ON t.job_type_id = j.job_type_id
    JOIN job_processor p ON p.processor_id = j.processor_id
    LEFT JOIN job_group g ON g.job_group_id = j.job_group_id
    JOIN job_progress pr ON pr.job_id = j.job_id
    ORDER BY j.job_name";

impl Cols for Row {
    type Error = postgres::Error;
    fn int(&self, i: usize) -> Result<i64, postgres::Error> {
        // Flags are `integer` columns; the rest `bigint`.
        if *self.columns()[i].type_() == Type::INT4 {
            Ok(i64::from(self.try_get::<_, i32>(i)?))
        } else {
            self.try_get(i)
        }
    }
    fn opt_int(&self, i: usize) -> Result<Option<i64>, postgres::Error> {
        if *self.columns()[i].type_() == Type::INT4 {
            Ok(self.try_get::<_, Option<i32>>(i)?.map(i64::from))
        } else {
            self.try_get(i)
        }
    }
    fn text(&self, i: usize) -> Result<String, postgres::Error> {
        self.try_get(i)
    }
    fn opt_text(&self, i: usize) -> Result<Option<String>, postgres::Error> {
        self.try_get(i)
    }
}

/// SQLite's `?N` placeholders as PostgreSQL's `$N`.
fn numbered(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '?' && chars.peek().is_some_and(char::is_ascii_digit) {
            out.push('$');
        } else {
            out.push(c);
        }
    }
    out
}

/// A value as PostgreSQL takes it: flags are `integer` columns, other integers `bigint`.
fn pg_value(v: &Val) -> Box<dyn ToSql + Sync> {
    match v {
        Val::Int(n) => Box::new(*n),
        Val::Flag(b) => Box::new(i32::from(*b)),
        Val::Text(t) => Box::new(t.clone()),
    }
}

impl DefinitionWriter for Transaction<'_> {
    fn upsert(&mut self, sql: &'static str, values: &[Val]) -> Result<(), CatalogError> {
        let boxed: Vec<Box<dyn ToSql + Sync>> = values.iter().map(pg_value).collect();
        let refs: Vec<&(dyn ToSql + Sync)> = boxed.iter().map(|b| &**b).collect();
        self.execute(numbered(sql).as_str(), &refs)?;
        Ok(())
    }
    fn job_id(&mut self, name: &str) -> Result<i64, CatalogError> {
        Ok(self
            .query_one(numbered(SELECT_JOB_ID).as_str(), &[&name])?
            .get(0))
    }
    fn audit(
        &mut self,
        actor: &str,
        action: &str,
        subject: &str,
        detail: &Json,
    ) -> Result<(), CatalogError> {
        self.execute(
            "INSERT INTO audit (at, actor, action, subject, detail) VALUES ($1, $2, $3, $4, $5)",
            &[&now_ms(), &actor, &action, &subject, &detail.to_string()],
        )?;
        Ok(())
    }
}

/// The whole catalog's definitions as a file model.
fn export_in(tx: &mut Transaction<'_>) -> Result<CatalogFile, CatalogError> {
    let mut file = CatalogFile::default();
    for r in tx.query(SELECT_PROCESSORS, &[])? {
        let (name, def) = processor_of(&r)?;
        file.processors.insert(name, def);
    }
    for r in tx.query(SELECT_OBJECTS, &[])? {
        let (name, def) = object_row(&r)??;
        file.objects.insert(name, def);
    }
    for r in tx.query(SELECT_GROUPS, &[])? {
        let (name, def) = group_row(&r)?;
        file.groups.insert(name, def);
    }
    for record in jobs_in(tx)? {
        file.jobs.insert(record.name, record.def);
    }
    Ok(file)
}

fn jobs_in(tx: &mut Transaction<'_>) -> Result<Vec<JobRecord>, CatalogError> {
    tx.query(SELECT_JOBS, &[])?
        .iter()
        .map(|r| job_record_of(r)?)
        .collect()
}

/// One transaction: the catalog as it is, `entries`' answer over it, the upserts of what
/// differs and the audit row (see `Catalog::update`).
fn update_in<E: From<CatalogError>>(
    client: &mut Client,
    actor: &str,
    action: &str,
    entries: &mut dyn FnMut(&CatalogFile) -> Result<CatalogFile, E>,
) -> Result<Result<ImportReport, E>, CatalogError> {
    let mut tx = client.transaction()?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&DEFINITIONS_LOCK])?;
    let before = export_in(&mut tx)?;
    let file = match entries(&before) {
        Ok(file) => file,
        Err(e) => return Ok(Err(e)),
    };
    let report = import_with(&mut tx, &before, &file, actor, action)?;
    commit(tx)?;
    Ok(Ok(report))
}

impl PgCatalog {
    /// Stores `file`'s entries over the catalog (see `Catalog::import`).
    pub fn import(&self, file: &CatalogFile, actor: &str) -> Result<ImportReport, CatalogError> {
        let file = file.clone();
        self.update(actor, "import", move |_| {
            Ok::<_, CatalogError>(file.clone())
        })
    }

    /// One transaction that reads the whole catalog, asks `entries` what to store over it (a
    /// merge, a validation: an error changes nothing) and upserts what differs, with one audit
    /// row for `action` (see `Catalog::update`). `entries` runs again if the connection is lost
    /// before the commit.
    pub fn update<E>(
        &self,
        actor: &str,
        action: &str,
        mut entries: impl FnMut(&CatalogFile) -> Result<CatalogFile, E> + Send + 'static,
    ) -> Result<ImportReport, E>
    where
        E: From<CatalogError> + Send + 'static,
    {
        let (actor, action) = (actor.to_string(), action.to_string());
        self.call(move |client, _| update_in(client, &actor, &action, &mut entries))?
    }

    /// The whole catalog as a file model.
    pub fn export(&self) -> Result<CatalogFile, CatalogError> {
        self.call(|client, _| {
            let mut tx = client.transaction()?;
            let file = export_in(&mut tx)?;
            commit(tx)?;
            Ok(file)
        })
    }

    /// Every job with its bookkeeping across the fleet, by name.
    pub fn jobs(&self) -> Result<Vec<JobRecord>, CatalogError> {
        self.call(|client, _| {
            let mut tx = client.transaction()?;
            let jobs = jobs_in(&mut tx)?;
            commit(tx)?;
            Ok(jobs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::numbered;

    #[test]
    fn placeholders_are_renumbered_and_nothing_else_changes() {
        assert_eq!(
            numbered("SELECT ?1, '?', x FROM t WHERE a = ?12"),
            "SELECT $1, '?', x FROM t WHERE a = $12"
        );
    }
}
