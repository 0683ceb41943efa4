//! The catalog's definitions on PostgreSQL: an import (the upserts of `catalog::definitions`,
//! the same rows, the same report and audit row), the export back to a catalog file, and the
//! jobs with their bookkeeping. The rows are read and the upserts written by the SQLite
//! catalog's own functions (through `catalog::sql`); only the SQL text that differs is here.
//!
//! Invariant: one import is one transaction, under a transaction-level advisory lock, so two
//! nodes importing at once never diff against a catalog the other is changing; an error
//! changes nothing.

use postgres::{Client, Transaction};

use super::{PgCatalog, commit};
use crate::catalog::CatalogError;
use crate::catalog::definitions::{
    ImportReport, JobRecord, SELECT_GROUPS, SELECT_OBJECTS, SELECT_PROCESSORS, group_row,
    import_with, job_record_of, object_row, processor_of,
};
use crate::catalog::reader::Reader;
use crate::catalog::writer::DbWriter;
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

/// The seed's marks in `catalog_meta`.
const SELECT_SEEDED: &str = "SELECT value FROM catalog_meta WHERE key = 'seeded_at'";
const MARK_SEEDED: &str = "INSERT INTO catalog_meta (key, value) VALUES ('seeded_at', $1),
    ('seeded_from', $2) ON CONFLICT (key) DO UPDATE SET value = excluded.value";

impl PgCatalog {
    /// Imports `file` (the seed, read from `source`) if the catalog was never seeded, in one
    /// transaction under the definitions' lock: of several nodes starting at once on a new
    /// catalog, one seeds it. Whether this call did.
    pub fn seed_if_new(
        &self,
        file: &CatalogFile,
        source: &str,
        now: i64,
    ) -> Result<bool, CatalogError> {
        let (file, source) = (file.clone(), source.to_string());
        self.call(move |client, _| {
            let mut tx = client.transaction()?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&DEFINITIONS_LOCK])?;
            if tx.query_opt(SELECT_SEEDED, &[])?.is_some() {
                return Ok(false);
            }
            let before = export_in(&mut tx)?;
            import_with(
                &mut tx,
                &before,
                &file,
                "node",
                &format!("seed from {source}"),
            )?;
            tx.execute(MARK_SEEDED, &[&now.to_string(), &source])?;
            commit(tx)?;
            Ok(true)
        })
    }

    /// The handles a node's runtime holds on this catalog: its verbs and its reads, each a
    /// transaction — claims and the rest on this connection thread, completions on a second,
    /// reads on a third, so that none waits behind the others' round trips.
    pub fn node_handles(&self) -> Result<(DbWriter, Reader), CatalogError> {
        Ok((
            DbWriter::on_postgres(self.clone(), self.another("ends")?),
            Reader::on_postgres(self.another("reads")?),
        ))
    }

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
