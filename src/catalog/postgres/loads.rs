//! What a node loads from a PostgreSQL catalog to plan its work, by `catalog::loads`' and
//! `catalog::runs`' own functions over a transaction: the catalog generation, the jobs it
//! schedules (with their history across the fleet) and the next runs it recorded, the processors it starts, the objects
//! that get a writer, and the runs it executes that an operator asked to cancel.

use super::PgCatalog;
use crate::catalog::CatalogError;
use crate::catalog::loads::{self, LocalProcessor, ScheduledJob, WrittenObject};
use crate::catalog::runs;
use crate::catalog::slots::NextRun;

impl PgCatalog {
    /// The catalog generation (bumped by every change to a definition).
    pub fn generation(&self) -> Result<i64, CatalogError> {
        self.transact(|tx| loads::generation(tx))
    }

    /// The jobs `node_id` schedules: enabled, on an enabled processor the node may run, active
    /// on the node; each with its history across the fleet.
    pub fn scheduled(&self, node_id: i64) -> Result<Vec<ScheduledJob>, CatalogError> {
        self.transact(move |tx| loads::load_scheduled(tx, node_id))
    }

    /// The next runs the catalog holds for `node_id`.
    pub fn next_runs(&self, node_id: i64) -> Result<Vec<NextRun>, CatalogError> {
        self.transact(move |tx| loads::load_next_runs(tx, node_id))
    }

    /// The processors `node_id` starts: enabled, naming no nodes or naming it.
    pub fn local_processors(&self, node_id: i64) -> Result<Vec<LocalProcessor>, CatalogError> {
        self.transact(move |tx| loads::load_local_processors(tx, node_id))
    }

    /// The enabled objects that jobs write.
    pub fn written_objects(&self) -> Result<Vec<WrittenObject>, CatalogError> {
        self.transact(|tx| loads::load_written_objects(tx))
    }

    /// The running runs of `node_id` an operator asked to cancel.
    pub fn cancel_requested(&self, node_id: i64) -> Result<Vec<i64>, CatalogError> {
        self.transact(move |tx| runs::cancel_requested(tx, node_id))
    }
}
