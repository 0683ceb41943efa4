//! The catalog's reads for a running node: [`Reader`], a cloneable handle on the read pool with
//! one named, blocking verb per question the runtime asks (call them on the blocking pool), and
//! [`Watch`], the change detector the scheduler polls.
//!
//! Invariant: the runtime holds no connection; every read it makes is a verb here, with its SQL
//! in the module the verb calls. A read that meets SQLite's corruption error marks the file
//! damaged ([`Damage`], shared with the catalog's writer, which then commits nothing more) and
//! answers [`CatalogError::FoundDamaged`], naming the file and the verb.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use r2d2::{Pool, PooledConnection};
use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::{Connection, OpenFlags};
use serde_json::Value as Json;

use super::activation::{self, JobActivation};
use super::damage::Damage;
use super::loads::{self, LocalProcessor, ScheduledJob};
use super::postgres::PgCatalog;
use super::slots::NextRun;
use super::upkeep::{self, PrunableObject};
use super::{CatalogError, DbSettings};

/// The read pool of one catalog (shared by the node's actors, executors and built-ins).
#[derive(Clone)]
pub struct Reader {
    path: PathBuf,
    /// `None` on PostgreSQL.
    pool: Option<Pool<SqliteConnectionManager>>,
    /// Whether the file was found damaged (shared with the catalog's writer).
    damage: Arc<Damage>,
    /// The catalog on PostgreSQL instead: each verb is a transaction on its connection thread
    /// (blocking, as the pool's reads are).
    pg: Option<PgCatalog>,
}

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader").field("path", &self.path).finish()
    }
}

impl Reader {
    pub(in crate::catalog) fn new(
        path: PathBuf,
        pool: Pool<SqliteConnectionManager>,
        damage: Arc<Damage>,
    ) -> Self {
        Self {
            path,
            pool: Some(pool),
            damage,
            pg: None,
        }
    }

    /// The reads of a node whose catalog is on PostgreSQL.
    pub(in crate::catalog) fn on_postgres(pg: PgCatalog) -> Self {
        Self {
            path: PathBuf::from(pg.url()),
            pool: None,
            damage: Arc::default(),
            pg: Some(pg),
        }
    }

    /// Whether the catalog is on PostgreSQL (SQLite's own upkeep has nothing to do there).
    pub fn is_postgres(&self) -> bool {
        self.pg.is_some()
    }

    /// The catalog file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn conn(&self) -> Result<PooledConnection<SqliteConnectionManager>, CatalogError> {
        match &self.pool {
            Some(pool) => Ok(pool.get()?),
            None => Err(CatalogError::Refused(
                "SQLite's own upkeep (counting an object's rows, quick_check, maintenance, \
                 backups): the catalog is on PostgreSQL, whose server does its own"
                    .into(),
            )),
        }
    }

    /// Runs `f` on a connection of the pool; a corruption error marks the file damaged, as
    /// found while `doing`.
    fn read<T>(
        &self,
        doing: &str,
        f: impl FnOnce(&Connection) -> Result<T, CatalogError>,
    ) -> Result<T, CatalogError> {
        self.conn()
            .and_then(|c| f(&c))
            .map_err(|e| self.damage.check(&self.path, doing, e))
    }

    /// A change detector on the catalog (the scheduler's): a connection of its own, whose
    /// corruption errors mark the file damaged like the pool's.
    pub fn watch(&self, settings: &DbSettings) -> Result<Watch, CatalogError> {
        if let Some(pg) = &self.pg {
            return Watch::on_postgres(pg);
        }
        Watch::open(&self.path, settings, self.damage.clone())
    }

    /// Every job's activation row on `node_id`.
    pub fn job_activations(&self, node_id: i64) -> Result<Vec<JobActivation>, CatalogError> {
        if let Some(pg) = &self.pg {
            return pg.job_activations(node_id);
        }
        self.read("reading the jobs' activations", |c| {
            activation::job_activations(c, node_id)
        })
    }

    /// The enabled processors `node_id` may run (local and remote: the node runs both), and
    /// the instances the policy set for them on it.
    pub fn local_processors(
        &self,
        node_id: i64,
    ) -> Result<(Vec<LocalProcessor>, HashMap<i64, u32>), CatalogError> {
        if let Some(pg) = &self.pg {
            return Ok((pg.local_processors(node_id)?, pg.instances(node_id)?));
        }
        self.read("reading the processors", |c| {
            Ok((
                loads::load_local_processors(c, node_id)?,
                activation::instances(c, node_id)?,
            ))
        })
    }

    /// Processor `processor_id`'s name and row, credentials included: for the rpc executor
    /// to call its node, and for nothing that is shown.
    pub fn remote_processor(
        &self,
        processor_id: i64,
    ) -> Result<(String, crate::jobconf::ProcessorDef), CatalogError> {
        if let Some(pg) = &self.pg {
            return pg.transact(move |tx| super::remote::processor(tx, processor_id));
        }
        self.read("reading a remote processor", |c| {
            super::remote::processor(c, processor_id)
        })
    }

    /// Where run `run_id` stands (`None`: no such run), for code awaiting its end.
    pub fn run_end(&self, run_id: i64) -> Result<Option<super::runs::RunEnd>, CatalogError> {
        if let Some(pg) = &self.pg {
            return pg.run_end(run_id);
        }
        self.read("reading a run", |c| super::runs::run_end(c, run_id))
    }

    /// The running runs of `node_id` an operator asked to cancel.
    pub fn cancel_requested(&self, node_id: i64) -> Result<Vec<i64>, CatalogError> {
        if let Some(pg) = &self.pg {
            return pg.cancel_requested(node_id);
        }
        self.read("reading cancel requests", |c| {
            super::runs::cancel_requested(c, node_id)
        })
    }

    /// Every enabled object: name and `conn_string`.
    pub fn enabled_objects(&self) -> Result<Vec<(String, Option<String>)>, CatalogError> {
        if let Some(pg) = &self.pg {
            return pg.enabled_objects();
        }
        self.read("reading the objects", |c| upkeep::all_objects(c))
    }

    /// An object's `conn_string` (`None`: no such object; `Some(None)`: in the catalog).
    pub fn object_conn_string(&self, name: &str) -> Result<Option<Option<String>>, CatalogError> {
        if let Some(pg) = &self.pg {
            return pg.object_conn_string(name);
        }
        self.read("reading an object", |c| super::object_conn_string(c, name))
    }

    /// The jobs `node_id` schedules.
    pub fn scheduled(&self, node_id: i64) -> Result<Vec<ScheduledJob>, CatalogError> {
        if let Some(pg) = &self.pg {
            return pg.scheduled(node_id);
        }
        self.read("reading the scheduled jobs", |c| {
            loads::load_scheduled(c, node_id)
        })
    }

    /// The next runs the catalog holds for `node_id`.
    pub fn next_runs(&self, node_id: i64) -> Result<Vec<NextRun>, CatalogError> {
        if let Some(pg) = &self.pg {
            return pg.next_runs(node_id);
        }
        self.read("reading the next runs", |c| {
            loads::load_next_runs(c, node_id)
        })
    }

    /// Rows of catalog table `table`.
    pub fn count_rows(&self, table: &str) -> Result<i64, CatalogError> {
        self.read("counting an object's rows", |c| {
            upkeep::count_rows(c, table)
        })
    }

    /// The objects whose old rows may be pruned.
    pub fn prunable_objects(&self) -> Result<Vec<PrunableObject>, CatalogError> {
        if let Some(pg) = &self.pg {
            return pg.transact(|tx| upkeep::prunable_objects(tx));
        }
        self.read("reading the prunable objects", |c| {
            upkeep::prunable_objects(c)
        })
    }

    /// `PRAGMA quick_check`: a damaged catalog is an error naming the file (and marks it
    /// damaged, like any read's corruption error).
    pub fn quick_check(&self) -> Result<(), CatalogError> {
        self.read("checking the catalog (quick_check)", |c| {
            super::open::quick_check(c, &self.path)
        })
    }

    /// `optimize`, `incremental_vacuum` and a TRUNCATE checkpoint, on a connection of the
    /// pool (a checkpoint cannot run inside the writer's transaction); what it did, as JSON.
    /// They write to the file (the checkpoint into the main file itself), so they run as the
    /// writer's transactions do, through [`Damage::unless_damaged`]: never once the file was
    /// found damaged, and a finding made meanwhile waits for them to end.
    pub fn maintain(&self) -> Result<Json, CatalogError> {
        const DOING: &str = "maintaining the catalog";
        let conn = self
            .conn()
            .map_err(|e| self.damage.check(&self.path, DOING, e))?;
        // The corruption check comes after the guard is released: recording a finding waits
        // for every write under way, this one included.
        match self.damage.unless_damaged(|| upkeep::maintain(&conn)) {
            Some(done) => done.map_err(|e| self.damage.check(&self.path, DOING, e)),
            None => Err(self
                .damage
                .found()
                .map(|f| f.error())
                .unwrap_or_else(|| CatalogError::Refused("the catalog file is damaged".into()))),
        }
    }

    /// Copies the catalog into a new database file at `target` (SQLite's online backup).
    pub fn backup_to(&self, target: &Path) -> Result<(), CatalogError> {
        self.read("backing the catalog up", |c| {
            c.backup(rusqlite::MAIN_DB, target, None).map_err(|e| {
                CatalogError::from(e).within(
                    &self.path,
                    format!("backing the catalog up to {}", target.display()),
                )
            })
        })
    }
}

/// Rows of `table` in the database file at `path`, read on a read-only connection of its own
/// (an object's database).
pub fn count_rows_in_file(path: &Path, table: &str) -> Result<i64, CatalogError> {
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY)
        .map_err(|e| CatalogError::from(e).within(path, "opening an object's database"))?;
    upkeep::count_rows(&conn, table)
}

/// What a PostgreSQL watch's LISTEN thread heard.
#[derive(Debug, Default)]
struct Notices {
    /// The highest generation announced.
    generation: std::sync::atomic::AtomicI64,
    /// Runs were queued.
    data: std::sync::atomic::AtomicBool,
    /// Notices may have been missed (a reconnect): reload.
    resync: std::sync::atomic::AtomicBool,
    /// The watch is gone: the thread stops.
    dropped: std::sync::atomic::AtomicBool,
}

impl Drop for Watch {
    fn drop(&mut self) {
        if let Some(n) = &self.notices {
            n.dropped.store(true, std::sync::atomic::Ordering::Release);
        }
    }
}

/// What changed since the last poll.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Changed {
    /// Nothing.
    Nothing,
    /// Another connection committed (`PRAGMA data_version` moved).
    Data,
    /// The generation counter moved (a trigger or an edit asks for a reload).
    Generation,
}

/// Change detection for the scheduler: a connection of its own, whose `PRAGMA data_version`
/// moves when another connection commits, plus the catalog's generation counter.
pub struct Watch {
    /// SQLite: a connection of its own. `None` on PostgreSQL, whose watch is `notices`.
    conn: Option<Connection>,
    /// PostgreSQL: what a LISTEN thread heard since the last poll.
    notices: Option<Arc<Notices>>,
    data_version: i64,
    generation: i64,
    path: PathBuf,
    damage: Arc<Damage>,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch")
            .field("data_version", &self.data_version)
            .field("generation", &self.generation)
            .finish()
    }
}

impl Watch {
    /// A watch on the catalog at `path`, starting from what it holds now; its corruption
    /// errors are told to `damage`.
    fn open(path: &Path, settings: &DbSettings, damage: Arc<Damage>) -> Result<Self, CatalogError> {
        let conn = super::open_connection(path, settings)?;
        let mut w = Watch {
            conn: Some(conn),
            notices: None,
            data_version: -1,
            generation: -1,
            path: path.to_path_buf(),
            damage,
        };
        w.poll();
        Ok(w)
    }

    /// A watch on a PostgreSQL catalog: a thread LISTENs to its channels (`jobvisor_catalog`
    /// says the generation moved, `jobvisor_queue` that runs were queued) and the poll reads
    /// what it heard, without a round trip. The LISTEN in place, and each reconnect of that
    /// thread (notices may have been missed), count as a generation change, a second without
    /// notices as data. The thread stops soon after the watch is dropped.
    fn on_postgres(pg: &PgCatalog) -> Result<Self, CatalogError> {
        let generation = pg.generation()?;
        let notices = Arc::new(Notices::default());
        let heard = notices.clone();
        super::postgres::listen(pg.settings(), "watch", move |channel, payload| {
            use std::sync::atomic::Ordering::Release;
            match channel {
                "jobvisor_catalog" => {
                    match payload.parse::<i64>() {
                        Ok(g) => heard.generation.fetch_max(g, Release),
                        Err(_) => heard.resync.swap(true, Release) as i64,
                    };
                }
                // A quiet second counts too: a run blocked by an overlap cap or a busy object
                // that a completion (on any node) freed is claimed within a second.
                // Completions announce nothing: a NOTIFY in each would serialize commits.
                "jobvisor_queue" | "idle" => heard.data.store(true, Release),
                // The generation read below may predate the LISTEN: read again once it is in
                // place (at start), and after a reconnect (notices may have been missed).
                "listening" | "reconnected" => heard.resync.store(true, Release),
                _ => {}
            }
            !heard.dropped.load(std::sync::atomic::Ordering::Acquire)
        })?;
        notices
            .generation
            .fetch_max(generation, std::sync::atomic::Ordering::AcqRel);
        Ok(Watch {
            conn: None,
            notices: Some(notices),
            data_version: 0,
            generation,
            path: PathBuf::from(pg.url()),
            damage: Arc::default(),
        })
    }

    /// The PostgreSQL watch's poll.
    fn poll_notices(&mut self, notices: &Notices) -> Changed {
        use std::sync::atomic::Ordering::AcqRel;
        let generation = notices
            .generation
            .load(std::sync::atomic::Ordering::Acquire);
        let data = notices.data.swap(false, AcqRel);
        if notices.resync.swap(false, AcqRel) || generation > self.generation {
            self.generation = self.generation.max(generation);
            Changed::Generation
        } else if data {
            Changed::Data
        } else {
            Changed::Nothing
        }
    }

    /// The generation last seen.
    pub fn generation(&self) -> i64 {
        self.generation
    }

    /// Says what moved since the last poll: cheap while nothing did (one pragma); the
    /// generation is read only once `data_version` moved. A failed read is no change (and a
    /// corruption error marks the file damaged).
    pub fn poll(&mut self) -> Changed {
        if let Some(notices) = self.notices.clone() {
            return self.poll_notices(&notices);
        }
        let Some(conn) = &self.conn else {
            return Changed::Nothing;
        };
        let version = match conn.query_row("PRAGMA data_version", [], |r| r.get::<_, i64>(0)) {
            Ok(version) => version,
            Err(e) => {
                self.noticed(e.into());
                return Changed::Nothing;
            }
        };
        if version == self.data_version {
            return Changed::Nothing;
        }
        self.data_version = version;
        match loads::generation(conn) {
            Ok(generation) if generation != self.generation => {
                self.generation = generation;
                Changed::Generation
            }
            Ok(_) => Changed::Data,
            Err(e) => {
                self.noticed(e);
                Changed::Data
            }
        }
    }

    /// Tells a corruption error to the file's [`Damage`].
    fn noticed(&self, e: CatalogError) {
        self.damage
            .check(&self.path, "watching the catalog for changes", e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;

    /// Issue 12, defect 3 (fault scenario 5 saw the file change after the node said it
    /// stops): `db_maintenance`'s writes (optimize, incremental vacuum, the TRUNCATE
    /// checkpoint into the main file) run on a read connection, and must not run once a read
    /// or the writer found the file damaged.
    #[test]
    fn maintenance_writes_nothing_into_a_file_found_damaged() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.db");
        let settings = DbSettings::default();
        let catalog = Catalog::open(&path, &settings).unwrap();
        let (writer, reader) = catalog.into_node_handles(&settings).unwrap();
        // Something for the checkpoint to copy: a committed change still in the WAL.
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(
            "PRAGMA wal_autocheckpoint = 0; CREATE TABLE t (v); INSERT INTO t VALUES (1);",
        )
        .unwrap();
        let bytes = || {
            let wal = crate::catalog::open::wal_path(&path);
            (
                std::fs::read(&path).unwrap(),
                std::fs::read(wal).unwrap_or_default(),
            )
        };
        let before = bytes();
        assert!(!before.1.is_empty(), "the change is in the WAL");
        let corrupt = CatalogError::Sqlite(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CORRUPT),
            None,
        ));
        writer
            .damage()
            .check(&path, "checking the catalog (quick_check)", corrupt);
        let refused = reader.maintain().unwrap_err();
        assert!(refused.is_damaged(), "{refused}");
        assert!(
            refused
                .to_string()
                .contains("found while checking the catalog"),
            "{refused}"
        );
        assert!(
            before == bytes(),
            "maintenance changed a file found damaged"
        );
    }
}
