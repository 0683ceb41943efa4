//! The catalog layer: the SQLite job catalog — opening, pragmas, migrations, and every
//! operation on it as a verb with its SQL beside it.
//!
//! Invariant: only `catalog` contains SQL; pragmas are set in `PRAGMAS` and nowhere else; a
//! multi-row change (`import`) is one transaction, so it lands whole or not at all.

pub mod accounts;
pub mod activation;
mod audit;
pub mod browse;
mod checkpoint;
pub mod complete;
pub mod damage;
mod definitions;
mod edit;
mod error;
pub mod inbox;
pub mod loads;
pub mod migrate;
pub mod node;
pub mod objects;
pub mod observe;
pub mod open;
pub mod pause;
pub mod postgres;
pub mod queue;
pub mod reader;
pub mod remote;
pub mod runs;
pub mod sharing;
pub mod slots;
pub mod sql;
pub mod sql_job;
pub mod stats;
pub mod tree;
pub mod upkeep;
pub mod verbs;
pub mod waiting;
pub mod writer;

pub use audit::{AuditRow, audit_field};
pub(crate) use audit::{audit_at, audit_in};
pub use definitions::{
    ImportReport, JobRecord, NodeInstances, ObjectRow, ProcessorRow, object_conn_string,
};
pub use error::CatalogError;
pub(crate) use error::not_found;
pub use open::Access;
/// The PostgreSQL catalog as the rest of the crate names it (outside `catalog`, no path names
/// the driver's crate: `tests/tidy.rs`).
pub use postgres::node::TakeName as PgTakeName;
pub use postgres::{PgCatalog, PgSettings, redact as redact_url};
pub use runs::{CancelOutcome, RunFilter, RunRow};

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use r2d2::Pool;
use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::{Connection, Transaction};
use serde_json::Value as Json;

use crate::config::{DatabaseSection, Durability};

/// Database settings the catalog needs, taken from the node configuration.
#[derive(Debug, Clone)]
pub struct DbSettings {
    /// `synchronous` level.
    pub durability: Durability,
    /// Lock wait.
    pub busy_timeout: Duration,
    /// Read connections.
    pub read_pool_size: u32,
}

impl From<&DatabaseSection> for DbSettings {
    fn from(s: &DatabaseSection) -> Self {
        Self {
            durability: s.durability,
            busy_timeout: Duration::from_millis(s.busy_timeout),
            read_pool_size: s.read_pool_size,
        }
    }
}

impl Default for DbSettings {
    fn default() -> Self {
        (&DatabaseSection::default()).into()
    }
}

/// A WAL file left larger than this is cut back to it when the log is rewound (the runtime's
/// writer rewinds it past 16 MiB; this also bounds what other writers, the CLI's, leave).
pub const JOURNAL_SIZE_LIMIT: u64 = 16 << 20;

/// The pragmas every connection gets, in one place. A misspelt pragma is silently ignored by
/// SQLite, so `tests::pragmas_read_back` reads each one back.
fn pragmas(s: &DbSettings) -> String {
    let synchronous = match s.durability {
        Durability::Normal => "NORMAL",
        Durability::Full => "FULL",
    };
    format!(
        "PRAGMA journal_mode = WAL;
         PRAGMA synchronous = {synchronous};
         PRAGMA foreign_keys = ON;
         PRAGMA temp_store = MEMORY;
         PRAGMA journal_size_limit = {JOURNAL_SIZE_LIMIT};
         PRAGMA busy_timeout = {};",
        s.busy_timeout.as_millis()
    )
}

/// Prepared statements kept per connection: the claim and completion paths alone use more than
/// rusqlite's default of 16, and a statement pushed out is parsed again on its next use.
const STATEMENT_CACHE: usize = 64;

/// The page cache of each read-pool connection (SQLite's default is 2 MiB per connection, and
/// a node holds two pools: the engine's and the API's). Reads are listings and the scheduler's
/// loads, which touch few pages twice; the writer keeps the default for the hot path.
const READ_CACHE: &str = "PRAGMA cache_size = -512";

/// A read-pool connection unused this long is closed (r2d2 looks every 30 s): an idle node
/// keeps the connections its periodic reads use, not every one a burst of requests opened
/// (each holds the parsed schema, its page cache and its statements: about 0.3 MB).
const READ_IDLE: Duration = Duration::from_secs(30);

/// Applies the pragmas to one connection, and sizes its prepared-statement cache.
pub fn apply_pragmas(conn: &Connection, s: &DbSettings) -> rusqlite::Result<()> {
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    conn.execute_batch(&pragmas(s))
}

/// Opens a connection to the database file at `path` with the pragmas applied.
pub fn open_connection(path: &Path, settings: &DbSettings) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    apply_pragmas(&conn, settings)?;
    Ok(conn)
}

/// Queues a run of `job` with `params` inside the caller's own transaction on the catalog file
/// (an application that keeps its tables in the catalog's database): the run exists if, and
/// only when, the caller commits. `conn` is the caller's connection or transaction (a
/// `rusqlite::Transaction` derefs to one); open it with [`open_connection`] so that it waits for
/// the engine's writer (`busy_timeout`) rather than failing at once. A running engine notices
/// the commit at its next change check (`WATCH_INTERVAL`). The audit row names `actor`.
pub fn enqueue_in(
    conn: &Connection,
    job: &str,
    params: Option<&Json>,
    actor: &str,
) -> Result<i64, CatalogError> {
    if params.is_some_and(|p| !p.is_object()) {
        return Err(CatalogError::Refused(
            "params: expected a JSON object".into(),
        ));
    }
    let queued = verbs::trigger(
        conn,
        job,
        &[params.map(Json::to_string)],
        now_ms(),
        actor,
        None,
    )?;
    Ok(queued.run_ids[0])
}

/// Begins a write transaction that takes the write lock at once (`BEGIN IMMEDIATE`). A deferred
/// transaction that reads first and writes later fails at once with `SQLITE_BUSY` when another
/// process committed meanwhile (WAL cannot upgrade a stale read snapshot); taking the lock up
/// front lets `busy_timeout` wait for it instead.
pub fn write_tx(conn: &mut Connection) -> Result<Transaction<'_>, CatalogError> {
    Ok(conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?)
}

/// An open catalog: a SQLite file (one write connection and a pool of read connections) or a
/// PostgreSQL database (its connection thread). Its verbs are the same on both.
pub struct Catalog {
    /// The file, or the server's URL with its password redacted (what errors name).
    path: PathBuf,
    store: Store,
}

/// Where a [`Catalog`]'s rows are.
enum Store {
    Sqlite(Lite),
    Postgres(PgCatalog),
}

/// A SQLite catalog file's connections.
struct Lite {
    /// The write connection: one writer at a time, whichever thread holds the handle.
    conn: Mutex<Connection>,
    pool: Pool<SqliteConnectionManager>,
    read_only: bool,
    /// The file keeps its bytes from now on ([`Catalog::keep_bytes`]).
    kept: AtomicBool,
}

impl Lite {
    /// The write connection, for one transaction.
    fn writer(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Epoch milliseconds now (the catalog layer stamps audit rows; the pure core never reads a clock).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl Catalog {
    /// Opens (creating if needed) the catalog at `path`, applies pragmas and pending migrations.
    /// Refuses a file that is not a sound jobvisor catalog (see [`open`]).
    pub fn open(path: &Path, settings: &DbSettings) -> Result<Self, CatalogError> {
        Self::open_as(path, settings, Access::Create)
    }

    /// Opens the catalog at `path` for `access`: a read-only open writes nothing and needs a
    /// catalog at this build's schema; a writable one migrates; only `Create` makes a new file.
    /// Every open refuses what is not a jobvisor catalog, and a damaged one, unchanged.
    pub fn open_as(
        path: &Path,
        settings: &DbSettings,
        access: Access,
    ) -> Result<Self, CatalogError> {
        let exists = open::precheck(path, access)?;
        let identity = if exists {
            Some(open::check_existing(path, settings, access)?)
        } else {
            None
        };
        if !exists && let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| CatalogError::Io {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        let in_path = |e: CatalogError| e.within(path, "opening the catalog");
        let conn = if access == Access::ReadOnly {
            open::open_read_only(path, settings).map_err(in_path)?
        } else {
            let mut conn = open::open_writable(path, settings).map_err(in_path)?;
            migrate::migrate(&mut conn).map_err(|e| e.within(path, "migrating the catalog"))?;
            if identity != Some(open::Identity::Ours) {
                open::mark(&conn)
                    .map_err(|e| CatalogError::from(e).within(path, "marking the catalog"))?;
            }
            conn
        };
        let init = settings.clone();
        let manager = if access == Access::ReadOnly {
            SqliteConnectionManager::file(path)
                .with_flags(
                    rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY
                        | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX
                        | rusqlite::OpenFlags::SQLITE_OPEN_URI,
                )
                .with_init(move |c| {
                    c.busy_timeout(init.busy_timeout)?;
                    c.execute_batch(READ_CACHE)
                })
        } else {
            SqliteConnectionManager::file(path).with_init(move |c| {
                apply_pragmas(c, &init)?;
                c.execute_batch(READ_CACHE)
            })
        };
        let pool = Pool::builder()
            .max_size(settings.read_pool_size)
            .min_idle(Some(0))
            .idle_timeout(Some(READ_IDLE))
            .build(manager)
            .map_err(|e| CatalogError::from(e).within(path, "opening the read pool"))?;
        Ok(Self {
            path: path.to_path_buf(),
            store: Store::Sqlite(Lite {
                conn: Mutex::new(conn),
                pool,
                read_only: access == Access::ReadOnly,
                kept: AtomicBool::new(false),
            }),
        })
    }

    /// Opens the catalog on the PostgreSQL server `settings` names for `access` (see
    /// [`PgCatalog::open_as`]). `label` names its connection thread.
    pub fn open_postgres(
        settings: PgSettings,
        label: &str,
        access: Access,
    ) -> Result<Self, CatalogError> {
        let pg = PgCatalog::open_as(settings, label, access)?;
        Ok(Self {
            path: PathBuf::from(pg.url()),
            store: Store::Postgres(pg),
        })
    }

    /// Whether the catalog is on PostgreSQL.
    pub fn on_postgres(&self) -> bool {
        matches!(self.store, Store::Postgres(_))
    }

    /// From now on this handle copies nothing into the file: no [`Catalog::settle`], and no
    /// checkpoint when its connection closes (SQLite runs one when the last connection to a WAL
    /// database closes). For a file the node found damaged (issue 12, defect 3), whose other
    /// writers already commit nothing.
    pub fn keep_bytes(&self) {
        let Store::Sqlite(lite) = &self.store else {
            return;
        };
        lite.kept.store(true, Ordering::Relaxed);
        if let Err(e) = lite.writer().set_db_config(
            rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
            true,
        ) {
            tracing::warn!("cannot keep a damaged file from a checkpoint at close: {e}");
        }
    }

    /// Copies what the write-ahead log holds into the database file and empties the log, if no
    /// other connection is reading (it never waits for one): after a command that wrote, the
    /// catalog file alone holds every change, whoever copies it. A read-only open does nothing.
    /// The read pool's connections may close on a background thread after this one, or not at
    /// all before the process exits, so the last close cannot be trusted to checkpoint.
    pub fn settle(&self) {
        let Store::Sqlite(lite) = &self.store else {
            return;
        };
        if lite.read_only || lite.kept.load(Ordering::Relaxed) {
            return;
        }
        let conn = lite.writer();
        let _ = conn.busy_timeout(Duration::ZERO);
        let _ = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
    }

    /// Gives the write connection to a new [`writer::DbWriter`] (the node's CatalogWriter) and
    /// the read pool to a [`reader::Reader`]: the handles a running node works through.
    pub fn into_node_handles(
        self,
        settings: &DbSettings,
    ) -> Result<(writer::DbWriter, reader::Reader), CatalogError> {
        match self.store {
            Store::Sqlite(lite) => {
                let writer = writer::DbWriter::new(
                    "catalog",
                    self.path.clone(),
                    lite.conn
                        .into_inner()
                        .unwrap_or_else(PoisonError::into_inner),
                    settings.clone(),
                );
                // One finding of damage for both: a read that meets it stops the writer too.
                let reader = reader::Reader::new(self.path, lite.pool, writer.damage());
                Ok((writer, reader))
            }
            Store::Postgres(pg) => pg.node_handles(),
        }
    }

    /// The enabled objects jobs write to (each gets a writer of its own at start).
    pub fn written_objects(&self) -> Result<Vec<loads::WrittenObject>, CatalogError> {
        self.reading(|tx| loads::load_written_objects(tx))
    }

    /// One try at taking the node name for `who`, in one transaction: when it is `Taken`, the
    /// runs an earlier process of the node left running are recovered in the same transaction
    /// (see [`node::register_node`] for `Held` and `Watch`). A SQLite catalog's: a node on
    /// PostgreSQL takes its name through `PgCatalog::try_take_node_name`.
    pub fn try_take_node_name(
        &self,
        who: &node::Applicant<'_>,
        now: i64,
        stale_after_ms: i64,
        is_alive: impl Fn(i64) -> bool,
        watched: Option<&node::NodeHolder>,
    ) -> Result<(node::Registration, Option<node::Recovery>), CatalogError> {
        let Store::Sqlite(lite) = &self.store else {
            return Err(verbs::not_on_postgres(
                "taking a node name through `Catalog`",
            ));
        };
        let mut conn = lite.writer();
        let tx = write_tx(&mut conn)?;
        let registration = node::register_node(&tx, who, now, stale_after_ms, is_alive, watched)?;
        let recovery = match &registration {
            node::Registration::Taken(lease) => {
                let recovery = node::recover_node_runs(&tx, lease.node_id, now)?;
                tx.commit()?;
                Some(recovery)
            }
            _ => None,
        };
        Ok((registration, recovery))
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `f` in a read transaction, on a read connection (SQLite) or the connection thread
    /// (PostgreSQL): a verb's reads, written once for both backends, all from one snapshot (a
    /// page's order and its rows agree). On PostgreSQL `f` runs again after a lost connection.
    pub(in crate::catalog) fn reading<T: Send + 'static>(
        &self,
        f: impl Fn(&mut sql::Tx<'_, '_>) -> Result<T, CatalogError> + Send + 'static,
    ) -> Result<T, CatalogError> {
        match &self.store {
            Store::Sqlite(lite) => {
                let conn = lite.pool.get()?;
                conn.execute_batch("BEGIN")?;
                let out = f(&mut sql::Tx::Lite(&conn));
                if conn.execute_batch("COMMIT").is_err() {
                    let _ = conn.execute_batch("ROLLBACK");
                }
                out
            }
            // PostgreSQL's default gives each statement a snapshot of its own.
            Store::Postgres(pg) => pg.transact(move |tx| {
                tx.batch_execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")?;
                f(&mut sql::Tx::Pg(tx))
            }),
        }
    }

    /// Runs `f` in one write transaction (SQLite's `BEGIN IMMEDIATE`, or PostgreSQL's), and
    /// commits when it succeeds: an error changes nothing. On PostgreSQL `f` runs again, from
    /// the start, after a lost connection or a conflict with another transaction.
    pub(in crate::catalog) fn writing<T: Send + 'static>(
        &self,
        f: impl Fn(&mut sql::Tx<'_, '_>) -> Result<T, CatalogError> + Send + 'static,
    ) -> Result<T, CatalogError> {
        match &self.store {
            Store::Sqlite(lite) => {
                let mut conn = lite.writer();
                let tx = write_tx(&mut conn)?;
                let out = f(&mut sql::Tx::Lite(&tx))?;
                tx.commit()?;
                Ok(out)
            }
            Store::Postgres(pg) => pg.transact(move |tx| f(&mut sql::Tx::Pg(tx))),
        }
    }

    /// A read connection from the pool (for the catalog's tests).
    #[cfg(test)]
    pub(in crate::catalog) fn read(&self) -> r2d2::PooledConnection<SqliteConnectionManager> {
        match &self.store {
            Store::Sqlite(lite) => lite.pool.get().unwrap(),
            Store::Postgres(_) => panic!("a SQLite catalog"),
        }
    }

    /// The write connection (for the catalog's tests).
    #[cfg(test)]
    pub(in crate::catalog) fn writer(&mut self) -> &mut Connection {
        match &mut self.store {
            Store::Sqlite(lite) => lite.conn.get_mut().unwrap_or_else(PoisonError::into_inner),
            Store::Postgres(_) => panic!("a SQLite catalog"),
        }
    }
}

#[cfg(test)]
mod fleet_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tree_tests;
