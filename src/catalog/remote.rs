//! Remote processors as the rpc executor reads them: a processor row's address and
//! credentials, read at each call so that an edit takes effect with the next run.
//!
//! Invariant: read-only; the credential read here is handed to the executor only, never to a
//! view or a log.

use super::definitions::{processor_of, select_processors};
use super::sql::{Query, Sql};
use super::{CatalogError, not_found};
use crate::jobconf::ProcessorDef;

/// One processor row, with the columns every processor read has.
const SELECT_REMOTE: Query = Query::same(concat!(select_processors!(), " WHERE processor_id = ?1"));

/// Processor `processor_id` (its name and row), as a remote call needs it.
pub fn processor(
    mut c: impl Sql,
    processor_id: i64,
) -> Result<(String, ProcessorDef), CatalogError> {
    c.row(&SELECT_REMOTE, &[processor_id.into()], |r| processor_of(r))?
        .ok_or_else(|| not_found("processor", &format!("#{processor_id}")))
}
