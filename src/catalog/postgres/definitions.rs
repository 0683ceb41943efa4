//! The catalog's definitions on PostgreSQL: an import (the upserts of `catalog::definitions`,
//! the same rows, the same report and audit row), the export back to a catalog file, and the
//! jobs with their bookkeeping. The rows are read and the upserts written by the SQLite
//! catalog's own functions (through `catalog::sql`); only the SQL text that differs is here.
//!
//! Invariant: one import is one transaction, under a transaction-level advisory lock, so two
//! nodes importing at once never diff against a catalog the other is changing; an error
//! changes nothing.

use std::sync::Arc;

use postgres::{Client, Transaction};

use super::{PgCatalog, commit};
use crate::catalog::CatalogError;
use crate::catalog::definitions::{
    ImportReport, JobRecord, SELECT_JOBS_BY_NAME, export_with, import_with, jobs_of,
};
use crate::catalog::reader::Reader;
use crate::catalog::writer::DbWriter;
use crate::jobconf::CatalogFile;

/// The advisory lock key that serializes changes to the definitions (an arbitrary constant:
/// "jv-defs").
const DEFINITIONS_LOCK: i64 = 0x006a_762d_6465_6673;

/// The whole catalog's definitions as a file model.
fn export_in(tx: &mut Transaction<'_>) -> Result<CatalogFile, CatalogError> {
    export_with(tx)
}

fn jobs_in(tx: &mut Transaction<'_>) -> Result<Vec<JobRecord>, CatalogError> {
    jobs_of(tx, &SELECT_JOBS_BY_NAME, &[])
}

/// One transaction: the catalog as it is, `entries`' answer over it, the upserts of what
/// differs and the audit row (see `Catalog::update`).
fn update_in<E: From<CatalogError>>(
    client: &mut Client,
    actor: &str,
    action: &str,
    entries: &mut dyn FnMut(&CatalogFile) -> Result<Arc<CatalogFile>, E>,
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
        let file = Arc::new(file.clone());
        self.update(actor, "import", move |_| {
            Ok::<_, CatalogError>(Arc::clone(&file))
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
        mut entries: impl FnMut(&CatalogFile) -> Result<Arc<CatalogFile>, E> + Send + 'static,
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
