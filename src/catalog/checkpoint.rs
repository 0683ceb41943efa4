//! The [`Checkpointer`]: one database file's passive WAL checkpoints, on a thread and a
//! connection of their own, so that a writer's commit never waits for one (the writer bounds
//! the WAL itself past its limit, `writer::WAL_RESTART_BYTES`).
//!
//! Invariant: nothing is checkpointed into a file found damaged, and its connection then
//! does not checkpoint as it closes.

use std::sync::Arc;
use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};
use std::time::Duration;

use rusqlite::Connection;
use rusqlite::config::DbConfig;

use super::CatalogError;
use super::damage::Damage;
use super::writer::is_full;

/// The least time between two checkpoints of the Checkpointer: commits in between share one.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(100);

/// Checkpoints one database file's WAL on a thread of its own with a connection of its own
/// (`PRAGMA wal_checkpoint(PASSIVE)`: it never blocks the writer or readers). Poked after each
/// commit; idle (blocked on its channel) while nothing is written. The thread ends when the
/// Checkpointer is dropped.
pub struct Checkpointer {
    poke: SyncSender<()>,
}

impl Checkpointer {
    /// Starts the thread for the database at `path`; it checkpoints nothing once `damage`
    /// says the file is damaged.
    pub fn start(
        label: &str,
        path: &std::path::Path,
        settings: &crate::catalog::DbSettings,
        damage: Arc<Damage>,
    ) -> Result<Self, CatalogError> {
        let conn = crate::catalog::open_connection(path, settings)?;
        let (poke, poked) = sync_channel::<()>(1);
        let name = label.to_string();
        std::thread::Builder::new()
            .name(format!("checkpoint {label}"))
            .spawn(move || {
                while poked.recv().is_ok() {
                    let checkpoint = || {
                        conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
                            Ok((r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
                        })
                    };
                    let Some(done) = damage.unless_damaged(checkpoint) else {
                        keep_bytes_on_close(&conn);
                        break;
                    };
                    match done {
                        Ok((log, copied)) => {
                            tracing::trace!(db = %name, log, copied, "checkpoint")
                        }
                        // A full disk is said once, by the Supervisor (issue 12, defect 6).
                        Err(e) if is_full(&e) => {
                            tracing::debug!(db = %name, "checkpoint failed: {e}")
                        }
                        Err(e) => tracing::warn!(db = %name, "checkpoint failed: {e}"),
                    }
                    std::thread::sleep(CHECKPOINT_EVERY);
                }
            })
            .map_err(|e| {
                CatalogError::Unavailable(format!("cannot start a checkpoint thread: {e}"))
            })?;
        Ok(Self { poke })
    }

    /// Asks for a checkpoint soon (at most one is pending).
    pub fn poke(&self) {
        match self.poke.try_send(()) {
            Ok(()) | Err(TrySendError::Full(())) => {}
            Err(TrySendError::Disconnected(())) => {
                tracing::warn!("the checkpoint thread is gone; the writer checkpoints by itself")
            }
        }
    }
}

/// Tells SQLite not to checkpoint when `conn` closes (it does when the last connection to a
/// WAL database closes): a damaged file keeps its bytes.
pub(super) fn keep_bytes_on_close(conn: &Connection) {
    if let Err(e) = conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true) {
        tracing::warn!("cannot keep a damaged file from a checkpoint at close: {e}");
    }
}
