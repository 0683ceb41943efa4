//! Inbox files: a file an inbox moved into its run's folder is queued as a run of the inbox's
//! job in one transaction with its key (`inbox_file`), so that a file is queued once, however
//! often a node that died in between finds its folder again.
//!
//! Invariant: a key is queued at most once — the run and the key's row are written together,
//! and a key already recorded queues nothing.

use rusqlite::{Connection, OptionalExtension, params};
use serde_json::json;

use super::CatalogError;
use super::tree::Queued;
use super::verbs;

/// A file moved into its run's folder, to queue.
#[derive(Debug, Clone)]
pub struct InboxFile {
    /// `<job>/<folder>`: the folder's key, unique.
    pub key: String,
    /// The job its run is of.
    pub job: String,
    /// Where the file is now (`params.path`).
    pub path: String,
    /// Its name (`params.file`).
    pub file: String,
    /// The watched folder it landed in (`params.inbox`).
    pub inbox: String,
    /// Where it landed.
    pub source: String,
}

const SELECT_KEY: &str = "SELECT run_id FROM inbox_file WHERE inbox_key = ?1";
const INSERT_KEY: &str = "INSERT INTO inbox_file (inbox_key, run_id, path, source, created_at)
    VALUES (?1, ?2, ?3, ?4, ?5)";

/// The parameters of a file's run: where it is, its name, the inbox it came from.
pub(crate) fn run_params(f: &InboxFile) -> String {
    json!({ "path": f.path, "file": f.file, "inbox": f.inbox }).to_string()
}

/// Queues the run of `f` and records its key; `Ok(None)` (nothing queued) when the key was
/// queued before. Appends the runs queued to `queued` (the run, or a workflow's first steps).
pub(crate) fn enqueue_file(
    c: &Connection,
    f: &InboxFile,
    now: i64,
    queued: &mut Vec<Queued>,
) -> Result<Option<i64>, CatalogError> {
    if c.prepare_cached(SELECT_KEY)?
        .query_row([&f.key], |r| r.get::<_, i64>(0))
        .optional()?
        .is_some()
    {
        return Ok(None);
    }
    let params = run_params(f);
    let actor = format!("inbox:{}", f.inbox);
    let t = verbs::trigger(c, &f.job, &[Some(params)], now, &actor, None)?;
    let run_id = t.run_ids[0];
    c.prepare_cached(INSERT_KEY)?
        .execute(params![f.key, run_id, f.path, f.source, now])?;
    if t.also_queued.is_empty() {
        queued.push(Queued {
            processor_id: t.processor_id,
            priority: t.priority,
        });
    }
    queued.extend(t.also_queued);
    Ok(Some(run_id))
}
