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
pub mod damage;
mod definitions;
mod error;
pub mod inbox;
pub mod loads;
pub mod migrate;
pub mod node;
pub mod objects;
pub mod observe;
pub mod open;
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
pub mod writer;

pub use audit::{AuditRow, audit_field};
use audit::{SELECT_AUDIT, audit_changes, removed_detail};
pub(crate) use audit::{audit_at, audit_in};
pub use definitions::{
    ImportReport, JobRecord, NodeInstances, ObjectRow, ProcessorRow, object_conn_string,
};
use definitions::{
    SELECT_JOB_ID, SELECT_JOB_NAMED, SELECT_JOBS_BY_NAME, SELECT_OBJECT_ROWS,
    SELECT_PROCESSOR_ROWS, export_from, import_in, upsert_job,
};
pub use error::CatalogError;
pub(crate) use error::not_found;
pub use open::Access;
/// The PostgreSQL catalog as the rest of the crate names it (outside `catalog`, no path names
/// the driver's crate: `tests/tidy.rs`).
pub use postgres::node::TakeName as PgTakeName;
pub use postgres::{PgCatalog, PgSettings, redact as redact_url};
pub use runs::{CancelOutcome, RunFilter, RunRow};
use sql::{Query, Sql as _};

use std::path::{Path, PathBuf};
use std::time::Duration;

use r2d2::{Pool, PooledConnection};
use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::{Connection, OptionalExtension, Transaction, params};
use serde_json::{Map as JsonMap, Value as Json};

use crate::config::{DatabaseSection, Durability};
use crate::jobconf::{CatalogFile, JobDef};

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
    let queued = verbs::trigger(conn, job, &[params.map(Json::to_string)], now_ms(), actor)?;
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
    conn: Connection,
    pool: Pool<SqliteConnectionManager>,
    read_only: bool,
    /// The file keeps its bytes from now on ([`Catalog::keep_bytes`]).
    kept: bool,
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
                conn,
                pool,
                read_only: access == Access::ReadOnly,
                kept: false,
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
    pub fn keep_bytes(&mut self) {
        let Store::Sqlite(lite) = &mut self.store else {
            return;
        };
        lite.kept = true;
        if let Err(e) = lite.conn.set_db_config(
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
        if lite.read_only || lite.kept {
            return;
        }
        let _ = lite.conn.busy_timeout(Duration::ZERO);
        let _ = lite
            .conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
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
                    lite.conn,
                    settings.clone(),
                );
                // One finding of damage for both: a read that meets it stops the writer too.
                let reader = reader::Reader::new(self.path, lite.pool, writer.damage());
                Ok((writer, reader))
            }
            Store::Postgres(pg) => pg.node_handles(),
        }
    }

    /// The policy's decisions, newest first (of one node when `node` is given).
    pub fn decisions(
        &self,
        node: Option<&str>,
        limit: i64,
    ) -> Result<Vec<activation::DecisionRow>, CatalogError> {
        let node = node.map(str::to_string);
        self.reading(move |tx| activation::decisions(tx, node.as_deref(), limit))
    }

    /// Each job's activation (state, pin, reason) on `node`, by job name.
    pub fn activation_by_job(
        &self,
        node: &str,
    ) -> Result<activation::ActivationByJob, CatalogError> {
        let node = node.to_string();
        self.reading(move |tx| activation::activation_by_job(tx, &node))
    }

    /// The latest value of every stat series (of one node when `node` is given).
    pub fn stats_latest(
        &self,
        node: Option<&str>,
    ) -> Result<Vec<stats::SeriesSummary>, CatalogError> {
        let node = node.map(str::to_string);
        self.reading(move |tx| stats::latest(tx, node.as_deref()))
    }

    /// The newest `limit` values of one stat series sampled at or after `since`.
    pub fn stats_series(
        &self,
        stat_type: &str,
        subject: Option<&str>,
        node: Option<&str>,
        since: i64,
        limit: i64,
    ) -> Result<Vec<stats::StatPoint>, CatalogError> {
        let (stat_type, subject, node) = (
            stat_type.to_string(),
            subject.map(str::to_string),
            node.map(str::to_string),
        );
        self.reading(move |tx| {
            stats::series(
                tx,
                &stat_type,
                subject.as_deref(),
                node.as_deref(),
                since,
                limit,
            )
        })
    }

    /// The enabled objects jobs write to (each gets a writer of its own at start).
    pub fn written_objects(&self) -> Result<Vec<loads::WrittenObject>, CatalogError> {
        loads::load_written_objects(&*self.read()?)
    }

    /// One try at taking the node name for `who`, in one transaction: when it is `Taken`, the
    /// runs an earlier process of the node left running are recovered in the same transaction
    /// (see [`node::register_node`] for `Held` and `Watch`).
    pub fn try_take_node_name(
        &mut self,
        who: &node::Applicant<'_>,
        now: i64,
        stale_after_ms: i64,
        is_alive: impl Fn(i64) -> bool,
        watched: Option<&node::NodeHolder>,
    ) -> Result<(node::Registration, Option<node::Recovery>), CatalogError> {
        let tx = write_tx(self.conn_mut()?)?;
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

    /// Runs `f` on a read connection (SQLite) or in a transaction (PostgreSQL): a verb's reads,
    /// written once for both backends. On PostgreSQL `f` runs again after a lost connection.
    pub(in crate::catalog) fn reading<T: Send + 'static>(
        &self,
        f: impl Fn(&mut sql::Tx<'_, '_>) -> Result<T, CatalogError> + Send + 'static,
    ) -> Result<T, CatalogError> {
        match &self.store {
            Store::Sqlite(lite) => f(&mut sql::Tx::Lite(&*lite.pool.get()?)),
            Store::Postgres(pg) => pg.transact(move |tx| f(&mut sql::Tx::Pg(tx))),
        }
    }

    /// Runs `f` in one write transaction (SQLite's `BEGIN IMMEDIATE`, or PostgreSQL's), and
    /// commits when it succeeds: an error changes nothing. On PostgreSQL `f` runs again, from
    /// the start, after a lost connection or a conflict with another transaction.
    pub(in crate::catalog) fn writing<T: Send + 'static>(
        &mut self,
        f: impl Fn(&mut sql::Tx<'_, '_>) -> Result<T, CatalogError> + Send + 'static,
    ) -> Result<T, CatalogError> {
        match &mut self.store {
            Store::Sqlite(lite) => {
                let tx = write_tx(&mut lite.conn)?;
                let out = f(&mut sql::Tx::Lite(&tx))?;
                tx.commit()?;
                Ok(out)
            }
            Store::Postgres(pg) => pg.transact(move |tx| f(&mut sql::Tx::Pg(tx))),
        }
    }

    /// A read connection from the pool of a SQLite catalog (a verb not yet written for both
    /// backends is refused on PostgreSQL).
    pub(in crate::catalog) fn read(
        &self,
    ) -> Result<PooledConnection<SqliteConnectionManager>, CatalogError> {
        match &self.store {
            Store::Sqlite(lite) => Ok(lite.pool.get()?),
            Store::Postgres(_) => Err(not_on_postgres()),
        }
    }

    /// The write connection of a SQLite catalog (refused on PostgreSQL, as [`Catalog::read`]).
    pub(in crate::catalog) fn conn_mut(&mut self) -> Result<&mut Connection, CatalogError> {
        match &mut self.store {
            Store::Sqlite(lite) => Ok(&mut lite.conn),
            Store::Postgres(_) => Err(not_on_postgres()),
        }
    }

    /// The write connection (for the catalog's tests).
    #[cfg(test)]
    pub(in crate::catalog) fn writer(&mut self) -> &mut Connection {
        self.conn_mut().expect("a SQLite catalog")
    }

    /// Imports `config`'s default catalog text into an empty, never-seeded catalog. Returns
    /// whether it did; a catalog that was seeded before is never touched again, so operator
    /// edits survive restarts.
    pub fn seed_if_new(&mut self, file: &CatalogFile, source: &str) -> Result<bool, CatalogError> {
        let conn = match &mut self.store {
            Store::Sqlite(lite) => &mut lite.conn,
            Store::Postgres(pg) => return pg.seed_if_new(file, source, now_ms()),
        };
        let tx = write_tx(conn)?;
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
    pub fn import(
        &mut self,
        file: &CatalogFile,
        actor: &str,
    ) -> Result<ImportReport, CatalogError> {
        let file = file.clone();
        self.update(actor, "import", move |_| {
            Ok::<_, CatalogError>(file.clone())
        })
    }

    /// One transaction that reads the whole catalog, asks `entries` what to store over it (a
    /// merge, a validation: an error changes nothing) and upserts what differs, with one audit
    /// row for `action`. On PostgreSQL, under the definitions' lock (two nodes' imports never
    /// diff against a catalog the other is changing), and `entries` is asked again if the
    /// connection was lost before the commit.
    pub fn update<E>(
        &mut self,
        actor: &str,
        action: &str,
        mut entries: impl FnMut(&CatalogFile) -> Result<CatalogFile, E> + Send + 'static,
    ) -> Result<ImportReport, E>
    where
        E: From<CatalogError> + Send + 'static,
    {
        let conn = match &mut self.store {
            Store::Sqlite(lite) => &mut lite.conn,
            Store::Postgres(pg) => return pg.update(actor, action, entries),
        };
        let tx = write_tx(conn)?;
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
    pub fn put_job(&mut self, name: &str, job: &JobDef, actor: &str) -> Result<(), CatalogError> {
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
        &mut self,
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
    pub fn remove_job(&mut self, name: &str, actor: &str) -> Result<(), CatalogError> {
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
    pub fn remove_processor(&mut self, name: &str, actor: &str) -> Result<(), CatalogError> {
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
    pub fn remove_object(&mut self, name: &str, actor: &str) -> Result<(), CatalogError> {
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
        &mut self,
        name: &str,
        params: Option<&Json>,
        actor: &str,
    ) -> Result<i64, CatalogError> {
        let params = params.map(Json::to_string);
        let conn = match &mut self.store {
            Store::Sqlite(lite) => &mut lite.conn,
            Store::Postgres(pg) => {
                let queued = pg.trigger(name, vec![params], now_ms(), actor)?;
                return Ok(queued.run_ids[0]);
            }
        };
        let tx = write_tx(conn)?;
        let queued = verbs::trigger(&tx, name, &[params], now_ms(), actor)?;
        tx.commit()?;
        Ok(queued.run_ids[0])
    }

    /// Writes one audit row on its own (for a change that lives outside the catalog, such as
    /// pausing a running node).
    pub fn record_audit(
        &mut self,
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
        &mut self,
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

/// What a verb not yet written for PostgreSQL answers there.
fn not_on_postgres() -> CatalogError {
    CatalogError::Refused("not available on a PostgreSQL catalog yet (issue 16)".into())
}

const COUNT_RUNNING_OF_JOB: Query = Query::same(
    "SELECT (SELECT count(*) FROM job_run r
    WHERE r.job_id = j.job_id AND r.status = 'running') FROM job j WHERE j.job_name = ?1",
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
#[cfg(test)]
mod fleet_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tree_tests;
