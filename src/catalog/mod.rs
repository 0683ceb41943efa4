//! The catalog layer: the SQLite job catalog — opening, pragmas, migrations, and every
//! operation on it as a verb with its SQL beside it.
//!
//! Invariant: only `catalog` contains SQL; pragmas are set in `PRAGMAS` and nowhere else; a
//! multi-row change (`import`) is one transaction, so it lands whole or not at all.

pub mod accounts;
pub mod activation;
pub mod browse;
pub mod damage;
pub mod inbox;
pub mod migrate;
pub mod node;
pub mod objects;
pub mod observe;
pub mod open;
pub mod queue;
pub mod reader;
pub mod remote;
pub mod runs;
pub mod slots;
pub mod sql_job;
pub mod stats;
pub mod tree;
pub mod verbs;
pub mod writer;

pub use open::Access;
pub use runs::{CancelOutcome, RunFilter, RunRow};

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use r2d2::{Pool, PooledConnection};
use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::{Connection, OptionalExtension, Row, Transaction, params};
use serde::Serialize;
use serde_json::{Map as JsonMap, Value as Json};

use crate::config::{DatabaseSection, Durability};
use crate::jobconf::{CatalogFile, GroupDef, JobDef, ObjectDef, ProcessorDef};
use crate::model::{JobType, ObjectType};
use crate::schedule::{MisfirePolicy, OverlapPolicy, ScheduleSpec};

/// Errors of the catalog layer.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// SQLite reported an error.
    #[error("database: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// The read pool could not hand out a connection.
    #[error("connection pool: {0}")]
    Pool(#[from] r2d2::Error),
    /// The database folder could not be created.
    #[error("cannot create {path}: {source}")]
    Io {
        /// The folder.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A migration failed or was edited after it was applied.
    #[error("migration: {0}")]
    Migration(String),
    /// A named entry does not exist.
    #[error("{kind} `{name}` does not exist")]
    NotFound {
        /// job, processor, run, …
        kind: &'static str,
        /// The name or id asked for.
        name: String,
    },
    /// A row holds something this build cannot read (e.g. an enum spelling it does not know).
    #[error("corrupt catalog row: {0}")]
    Corrupt(String),
    /// The operation is refused in the current state.
    #[error("{0}")]
    Refused(String),
    /// A write transaction failed as a whole (it could not begin or commit): nothing of it
    /// was kept. A storage failure, not a refusal of what was asked.
    #[error("{0}")]
    Failed(String),
    /// The change conflicts with other rows (an entry that exists, runs that execute).
    #[error("{0}")]
    Conflict(String),
    /// This process no longer holds its node name: another process took it (this one was
    /// stopped or cut off past its heartbeats). It must claim and record nothing more.
    #[error(
        "node {node_id}: the node name was taken by another process (this process held generation {generation})"
    )]
    Fenced {
        /// The node.
        node_id: i64,
        /// The generation this process held it under.
        generation: i64,
    },
    /// The engine's writer is gone or did not answer.
    #[error("{0}")]
    Unavailable(String),
    /// There is no catalog at the path, and the command does not create one.
    #[error("no catalog at {}: create one with `jobvisor init` (or `jobvisor run`, `jobvisor import`)", path.display())]
    NoCatalog {
        /// The path.
        path: PathBuf,
    },
    /// The path holds something that is not a jobvisor catalog; it was not changed.
    #[error("{}: {reason}; refusing to use it as a catalog (nothing was changed)", path.display())]
    NotACatalog {
        /// The path.
        path: PathBuf,
        /// What it is instead.
        reason: String,
    },
    /// The catalog file is damaged (`quick_check` findings or SQLite's corruption error).
    #[error("{}: the catalog is damaged ({detail}); nothing was written to it. Restore it from a backup (the node's `catalog_backup` job keeps some in its data folder) or recover it with `sqlite3 {} .recover`", path.display(), path.display())]
    Damaged {
        /// The file.
        path: PathBuf,
        /// What SQLite found.
        detail: String,
    },
    /// A database file was found damaged while the node worked on it: its writer or a read met
    /// SQLite's corruption error ([`CatalogError::is_damaged`]). Nothing more is written to it
    /// ([`damage::Damage`]).
    #[error("{}: the database file is damaged (found while {doing}: {detail}); nothing more is written to it. Restore it from a backup (the node's `catalog_backup` job keeps some of the catalog in its data folder) or recover it with `sqlite3 {} .recover`", path.display(), path.display())]
    FoundDamaged {
        /// The file.
        path: PathBuf,
        /// What the node was doing.
        doing: String,
        /// What SQLite said.
        detail: String,
    },
    /// The catalog's schema is not this build's.
    #[error("{}: {reason}", path.display())]
    Schema {
        /// The file.
        path: PathBuf,
        /// Older or newer, and what to do.
        reason: String,
    },
    /// A storage error, with the file and what was being done.
    #[error("{}: {doing}: {}", path.display(), explain(source))]
    In {
        /// The catalog file.
        path: PathBuf,
        /// What the command or node was doing.
        doing: String,
        /// The error.
        source: Box<CatalogError>,
    },
}

/// A storage error in words, with what it usually means for an operator.
fn explain(e: &CatalogError) -> String {
    use rusqlite::ErrorCode;
    let hint = match e {
        CatalogError::Sqlite(s) => match s.sqlite_error_code() {
            Some(ErrorCode::ReadOnly) => " (the file or its folder is not writable by this user)",
            Some(ErrorCode::DiskFull) => " (the disk is full)",
            Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
                " (another process held the database longer than database.busy_timeout)"
            }
            Some(ErrorCode::CannotOpen) => " (the file or its folder cannot be opened)",
            Some(ErrorCode::DatabaseCorrupt) => {
                " (the catalog is damaged: restore it from a backup)"
            }
            _ => "",
        },
        _ => "",
    };
    format!("{e}{hint}")
}

impl CatalogError {
    /// Whether this is an error of the storage itself (SQLite, the pool, the file system), as
    /// opposed to a refusal of the operation.
    pub fn is_storage(&self) -> bool {
        matches!(
            self,
            CatalogError::Sqlite(_) | CatalogError::Pool(_) | CatalogError::Io { .. }
        )
    }

    /// Names the file and what was being done, for a storage error; other errors pass as they
    /// are (they already say what is wrong).
    pub fn within(self, path: &Path, doing: impl Into<String>) -> CatalogError {
        if self.is_storage() {
            CatalogError::In {
                path: path.to_path_buf(),
                doing: doing.into(),
                source: Box::new(self),
            }
        } else {
            self
        }
    }
}

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

/// An open catalog: one write connection and a pool of read connections.
pub struct Catalog {
    path: PathBuf,
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
            .build(manager)
            .map_err(|e| CatalogError::from(e).within(path, "opening the read pool"))?;
        Ok(Self {
            path: path.to_path_buf(),
            conn,
            pool,
            read_only: access == Access::ReadOnly,
            kept: false,
        })
    }

    /// From now on this handle copies nothing into the file: no [`Catalog::settle`], and no
    /// checkpoint when its connection closes (SQLite runs one when the last connection to a WAL
    /// database closes). For a file the node found damaged (issue 12, defect 3), whose other
    /// writers already commit nothing.
    pub fn keep_bytes(&mut self) {
        self.kept = true;
        if let Err(e) = self.conn.set_db_config(
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
        if self.read_only || self.kept {
            return;
        }
        let _ = self.conn.busy_timeout(Duration::ZERO);
        let _ = self
            .conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
    }

    /// Gives the write connection to a new [`writer::DbWriter`] (the node's CatalogWriter) and
    /// the read pool to a [`reader::Reader`]: the handles a running node works through.
    pub fn into_node_handles(self, settings: &DbSettings) -> (writer::DbWriter, reader::Reader) {
        let writer =
            writer::DbWriter::new("catalog", self.path.clone(), self.conn, settings.clone());
        // One finding of damage for both: a read that meets it stops the writer too.
        let reader = reader::Reader::new(self.path, self.pool, writer.damage());
        (writer, reader)
    }

    /// The policy's decisions, newest first (of one node when `node` is given).
    pub fn decisions(
        &self,
        node: Option<&str>,
        limit: i64,
    ) -> Result<Vec<activation::DecisionRow>, CatalogError> {
        activation::decisions(&*self.read()?, node, limit)
    }

    /// Each job's activation (state, pin, reason) on `node`, by job name.
    pub fn activation_by_job(
        &self,
        node: &str,
    ) -> Result<activation::ActivationByJob, CatalogError> {
        activation::activation_by_job(&*self.read()?, node)
    }

    /// The latest value of every stat series (of one node when `node` is given).
    pub fn stats_latest(
        &self,
        node: Option<&str>,
    ) -> Result<Vec<stats::SeriesSummary>, CatalogError> {
        stats::latest(&*self.read()?, node)
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
        stats::series(&*self.read()?, stat_type, subject, node, since, limit)
    }

    /// The enabled objects jobs write to (each gets a writer of its own at start).
    pub fn written_objects(&self) -> Result<Vec<queue::WrittenObject>, CatalogError> {
        queue::load_written_objects(&*self.read()?)
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
        let tx = write_tx(&mut self.conn)?;
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

    /// A read connection from the pool.
    pub(in crate::catalog) fn read(
        &self,
    ) -> Result<PooledConnection<SqliteConnectionManager>, CatalogError> {
        Ok(self.pool.get()?)
    }

    /// The write connection (for the catalog's tests).
    #[cfg(test)]
    pub(in crate::catalog) fn writer(&mut self) -> &mut Connection {
        &mut self.conn
    }

    /// Imports `config`'s default catalog text into an empty, never-seeded catalog. Returns
    /// whether it did; a catalog that was seeded before is never touched again, so operator
    /// edits survive restarts.
    pub fn seed_if_new(&mut self, file: &CatalogFile, source: &str) -> Result<bool, CatalogError> {
        let tx = write_tx(&mut self.conn)?;
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
        self.update(actor, "import", |_| Ok::<_, CatalogError>(file.clone()))
    }

    /// One transaction that reads the whole catalog, asks `entries` what to store over it (a
    /// merge, a validation: an error changes nothing) and upserts what differs, with one audit
    /// row for `action`.
    pub fn update<E: From<CatalogError>>(
        &mut self,
        actor: &str,
        action: &str,
        entries: impl FnOnce(&CatalogFile) -> Result<CatalogFile, E>,
    ) -> Result<ImportReport, E> {
        let tx = write_tx(&mut self.conn)?;
        let before = export_from(&tx)?;
        let file = entries(&before)?;
        let report = import_in(&tx, &before, &file, actor, action)?;
        tx.commit().map_err(CatalogError::from)?;
        Ok(report)
    }

    /// The whole catalog as a file model.
    pub fn export(&self) -> Result<CatalogFile, CatalogError> {
        export_from(&*self.read()?)
    }

    /// One job with its runtime state.
    pub fn job(&self, name: &str) -> Result<JobRecord, CatalogError> {
        let conn = self.read()?;
        let mut stmt = conn.prepare_cached(&format!("{SELECT_JOBS} WHERE j.job_name = ?1"))?;
        let row = stmt.query_row([name], job_record).optional()?;
        row.ok_or_else(|| not_found("job", name))?
    }

    /// Every job with its runtime state, by name.
    pub fn jobs(&self) -> Result<Vec<JobRecord>, CatalogError> {
        let conn = self.read()?;
        let mut stmt = conn.prepare_cached(&format!("{SELECT_JOBS} ORDER BY j.job_name"))?;
        let rows = stmt
            .query_map([], job_record)?
            .collect::<Result<Vec<_>, _>>()?;
        rows.into_iter().collect()
    }

    /// Inserts or replaces one job (already validated against the catalog).
    pub fn put_job(&mut self, name: &str, job: &JobDef, actor: &str) -> Result<(), CatalogError> {
        let tx = write_tx(&mut self.conn)?;
        let before = export_from(&tx)?;
        let existed = before.jobs.contains_key(name);
        upsert_job(&tx, name, job)?;
        let action = if existed { "job.edit" } else { "job.add" };
        let mut after = CatalogFile::default();
        after.jobs.insert(name.to_string(), job.clone());
        let detail = audit_changes(if existed {
            crate::jobconf::merge::changes(&before, &after)
        } else {
            crate::jobconf::merge::described(&after)
        });
        audit(&tx, actor, action, name, Some(&detail))?;
        tx.commit()?;
        Ok(())
    }

    /// Enables or disables a job.
    pub fn set_job_enabled(
        &mut self,
        name: &str,
        enabled: bool,
        actor: &str,
    ) -> Result<(), CatalogError> {
        let tx = write_tx(&mut self.conn)?;
        let was: bool = tx
            .query_row(SELECT_JOB_ENABLED, [name], |r| r.get(0))
            .optional()?
            .ok_or_else(|| not_found("job", name))?;
        tx.execute(UPDATE_JOB_STATUS, params![i64::from(enabled), name])?;
        if !enabled {
            // Enabled again later, the job is new to every node (activated at once by a
            // healthy one); pins stay.
            tx.execute(FORGET_UNPINNED_ACTIVATION, [name])?;
        }
        let detail = serde_json::json!({ "changes": [{
            "section": "job", "name": name, "change": if was == enabled { "unchanged" } else { "updated" },
            "fields": [{ "field": "enabled", "before": was.to_string(), "after": enabled.to_string() }],
        }] });
        audit(
            &tx,
            actor,
            if enabled { "job.enable" } else { "job.disable" },
            name,
            Some(&detail),
        )?;
        tx.commit()?;
        Ok(())
    }

    /// Removes a job and its run history; refused while one of its runs is executing.
    pub fn remove_job(&mut self, name: &str, actor: &str) -> Result<(), CatalogError> {
        let tx = write_tx(&mut self.conn)?;
        let running: i64 = tx
            .query_row(COUNT_RUNNING_OF_JOB, [name], |r| r.get(0))
            .optional()?
            .ok_or_else(|| not_found("job", name))?;
        if running > 0 {
            return Err(CatalogError::Conflict(format!(
                "job `{name}` has {running} run(s) executing; disable it and retry when they end"
            )));
        }
        // A workflow naming it as a step would be left running a job that is gone.
        let workflows: Vec<(String, String)> = tx
            .prepare_cached(SELECT_WORKFLOWS)?
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?;
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
        let detail = removed_detail(&tx, |f, g| {
            if let Some(d) = f.jobs.remove(name) {
                g.jobs.insert(name.to_string(), d);
            }
        })?;
        // Runs of other jobs in its runs' trees keep their history, detached from the runs
        // that go with the job.
        tx.execute(DETACH_FROM_JOB, [name])?;
        tx.execute(DELETE_JOB, [name])?;
        audit(&tx, actor, "job.remove", name, Some(&detail))?;
        tx.commit()?;
        Ok(())
    }

    /// Removes a processor; refused while jobs are assigned to it.
    pub fn remove_processor(&mut self, name: &str, actor: &str) -> Result<(), CatalogError> {
        let tx = write_tx(&mut self.conn)?;
        let jobs: Option<Option<String>> = tx
            .query_row(SELECT_PROCESSOR_JOBS, [name], |r| r.get(0))
            .optional()?;
        match jobs {
            None => return Err(not_found("processor", name)),
            Some(Some(jobs)) => {
                return Err(CatalogError::Conflict(format!(
                    "processor `{name}` runs job(s) {jobs}: move or remove them first"
                )));
            }
            Some(None) => {}
        }
        let detail = removed_detail(&tx, |f, g| {
            if let Some(d) = f.processors.remove(name) {
                g.processors.insert(name.to_string(), d);
            }
        })?;
        tx.execute(DELETE_PROCESSOR, [name])?;
        audit(&tx, actor, "processor.remove", name, Some(&detail))?;
        tx.commit()?;
        Ok(())
    }

    /// Removes an object; refused while a job writes it or a sql job targets it.
    pub fn remove_object(&mut self, name: &str, actor: &str) -> Result<(), CatalogError> {
        let tx = write_tx(&mut self.conn)?;
        let users: Option<Option<String>> = tx
            .query_row(SELECT_OBJECT_USERS, [name], |r| r.get(0))
            .optional()?;
        match users {
            None => return Err(not_found("object", name)),
            Some(Some(jobs)) => {
                return Err(CatalogError::Conflict(format!(
                    "object `{name}` is written by job(s) {jobs}: change them first"
                )));
            }
            Some(None) => {}
        }
        let detail = removed_detail(&tx, |f, g| {
            if let Some(d) = f.objects.remove(name) {
                g.objects.insert(name.to_string(), d);
            }
        })?;
        tx.execute(DELETE_OBJECT, [name])?;
        audit(&tx, actor, "object.remove", name, Some(&detail))?;
        tx.commit()?;
        Ok(())
    }

    /// Queues an on-demand run of `name` with `params` (a JSON object); a running node picks it
    /// up within its change-check interval. Returns the run id.
    pub fn enqueue_now(
        &mut self,
        name: &str,
        params: Option<&Json>,
        actor: &str,
    ) -> Result<i64, CatalogError> {
        let tx = write_tx(&mut self.conn)?;
        let queued = verbs::trigger(&tx, name, &[params.map(Json::to_string)], now_ms(), actor)?;
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
        let tx = write_tx(&mut self.conn)?;
        audit(&tx, actor, action, subject, Some(detail))?;
        tx.commit()?;
        Ok(())
    }

    /// Pins `name` active or inactive on node `node` (created if new), or removes the pin.
    pub fn pin_job(
        &mut self,
        name: &str,
        node: &str,
        pin: Option<crate::model::Pin>,
        actor: &str,
    ) -> Result<(), CatalogError> {
        let tx = write_tx(&mut self.conn)?;
        let job_id: i64 = tx
            .query_row(SELECT_JOB_ID, [name], |r| r.get(0))
            .optional()?
            .ok_or_else(|| not_found("job", name))?;
        let node_id =
            activation::node_id(&tx, node, true)?.ok_or_else(|| not_found("node", node))?;
        let before = activation::pin_of(&tx, node_id, job_id)?;
        activation::set_pin(&tx, node_id, job_id, pin, now_ms())?;
        let mut detail = audit_field(
            "job",
            name,
            "pin",
            before.as_deref(),
            pin.map(|p| p.as_str()),
        );
        detail["node"] = node.into();
        audit(&tx, actor, "job.pin", name, Some(&detail))?;
        tx.commit()?;
        Ok(())
    }

    /// Processors with how many jobs each runs.
    pub fn processors(&self) -> Result<Vec<ProcessorRow>, CatalogError> {
        let conn = self.read()?;
        let mut stmt = conn.prepare_cached(SELECT_PROCESSOR_ROWS)?;
        let rows = stmt.query_map([], |r| {
            Ok(ProcessorRow {
                name: r.get(0)?,
                instances: r.get(1)?,
                max_instances: r.get(2)?,
                remote: r.get(3)?,
                enabled: r.get::<_, i64>(4)? == 1,
                jobs: r.get(5)?,
                running: r
                    .get::<_, String>(6)
                    .ok()
                    .and_then(|j| serde_json::from_str(&j).ok())
                    .unwrap_or_default(),
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Objects with how many jobs write each.
    pub fn objects(&self) -> Result<Vec<ObjectRow>, CatalogError> {
        let conn = self.read()?;
        let mut stmt = conn.prepare_cached(SELECT_OBJECT_ROWS)?;
        let rows = stmt.query_map([], |r| {
            Ok(ObjectRow {
                name: r.get(0)?,
                object_type: r.get(1)?,
                conn_string: r.get(2)?,
                time_to_live: r.get(3)?,
                allow_prune: r.get::<_, i64>(4)? == 1,
                enabled: r.get::<_, i64>(5)? == 1,
                writers: r.get(6)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// A job's consecutive failed runs since its last success (what its backoff comes from).
    pub fn failure_streak(
        &self,
        job_id: i64,
    ) -> Result<crate::schedule::FailureStreak, CatalogError> {
        queue::failure_streak(&*self.read()?, job_id)
    }

    /// The most recent audit entries, newest first.
    pub fn audit_log(&self, limit: i64) -> Result<Vec<AuditRow>, CatalogError> {
        let conn = self.read()?;
        let mut stmt = conn.prepare_cached(SELECT_AUDIT)?;
        let rows = stmt.query_map([limit], |r| {
            Ok(AuditRow {
                at: r.get(0)?,
                actor: r.get(1)?,
                action: r.get(2)?,
                subject: r.get(3)?,
                detail: r.get(4)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

pub(crate) fn not_found(kind: &'static str, name: &str) -> CatalogError {
    CatalogError::NotFound {
        kind,
        name: name.to_string(),
    }
}

const SELECT_META: &str = "SELECT value FROM catalog_meta WHERE key = ?1";
const UPSERT_META: &str = "INSERT INTO catalog_meta (key, value) VALUES (?1, ?2)
    ON CONFLICT (key) DO UPDATE SET value = excluded.value";
const INSERT_AUDIT: &str =
    "INSERT INTO audit (at, actor, action, subject, detail) VALUES (?1, ?2, ?3, ?4, ?5)";
const SELECT_AUDIT: &str =
    "SELECT at, actor, action, subject, detail FROM audit ORDER BY audit_id DESC LIMIT ?1";

/// At most this many entries' changes go into one audit row (a large import says how many it
/// left out).
const AUDIT_MAX_ENTRIES: usize = 200;

/// Whether a field holds a secret, which an audit row shows as `***`.
fn is_secret(field: &str) -> bool {
    ["password", "secret", "token"]
        .iter()
        .any(|w| field.contains(w))
}

/// An audit row's detail for one field of one entry, in the shape of [`audit_changes`] (a pin,
/// a pause): `change` is `unchanged` when the request changed nothing.
pub fn audit_field(
    section: &str,
    name: &str,
    field: &str,
    before: Option<&str>,
    after: Option<&str>,
) -> Json {
    serde_json::json!({ "changes": [{
        "section": section,
        "name": name,
        "change": if before == after { "unchanged" } else { "updated" },
        "fields": [{ "field": field, "before": before, "after": after }],
    }]})
}

/// An audit row's detail: each changed entry's fields before and after (secrets as `***`).
fn audit_changes(changes: Vec<crate::jobconf::merge::EntryChange>) -> Json {
    let mut changed: Vec<_> = changes
        .into_iter()
        .filter(|c| c.change != "unchanged")
        .map(|mut c| {
            for f in c.fields.iter_mut().filter(|f| is_secret(&f.field)) {
                f.before = f.before.as_ref().map(|_| "***".into());
                f.after = f.after.as_ref().map(|_| "***".into());
            }
            c
        })
        .collect();
    let left_out = changed.len().saturating_sub(AUDIT_MAX_ENTRIES);
    changed.truncate(AUDIT_MAX_ENTRIES);
    let mut detail = serde_json::json!({ "changes": changed });
    if left_out > 0 {
        detail["changes_left_out"] = left_out.into();
    }
    detail
}

/// The audit detail of a removal: the entry `take` moves from the catalog's file model into an
/// empty one, every field with its value before and none after.
fn removed_detail(
    conn: &Connection,
    take: impl FnOnce(&mut CatalogFile, &mut CatalogFile),
) -> Result<Json, CatalogError> {
    let (mut all, mut gone) = (export_from(conn)?, CatalogFile::default());
    take(&mut all, &mut gone);
    let changes = crate::jobconf::merge::described(&gone)
        .into_iter()
        .map(|mut c| {
            c.change = "removed";
            for f in &mut c.fields {
                std::mem::swap(&mut f.before, &mut f.after);
            }
            c
        })
        .collect();
    Ok(audit_changes(changes))
}

pub(crate) fn audit(
    tx: &Connection,
    actor: &str,
    action: &str,
    subject: &str,
    detail: Option<&Json>,
) -> Result<(), CatalogError> {
    audit_at(tx, now_ms(), actor, action, subject, detail)
}

/// [`audit`] stamped `at` (ms): the runtime's verbs stamp their rows with its injected clock.
pub(crate) fn audit_at(
    tx: &Connection,
    at: i64,
    actor: &str,
    action: &str,
    subject: &str,
    detail: Option<&Json>,
) -> Result<(), CatalogError> {
    let detail = detail.map(Json::to_string);
    tx.execute(INSERT_AUDIT, params![at, actor, action, subject, detail])?;
    Ok(())
}

/// What an import changed, per kind of entry.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct ImportReport {
    /// Entries that did not exist.
    pub created: Vec<String>,
    /// Entries that existed and differed.
    pub updated: Vec<String>,
    /// Entries that existed and were identical.
    pub unchanged: usize,
    /// Each entry's change, field by field.
    pub changes: Vec<crate::jobconf::merge::EntryChange>,
}

fn import_in(
    tx: &Transaction<'_>,
    before: &CatalogFile,
    file: &CatalogFile,
    actor: &str,
    action: &str,
) -> Result<ImportReport, CatalogError> {
    let mut report = ImportReport {
        changes: crate::jobconf::merge::changes(before, file),
        ..ImportReport::default()
    };
    let mut note = |kind: &str, name: &str, existed: bool, same: bool| {
        if same {
            report.unchanged += 1;
        } else if existed {
            report.updated.push(format!("{kind}.{name}"));
        } else {
            report.created.push(format!("{kind}.{name}"));
        }
        !same
    };
    // Order matters: jobs reference processors, groups and objects by name.
    for (name, p) in &file.processors {
        let old = before.processors.get(name);
        if note("processor", name, old.is_some(), old == Some(p)) {
            upsert_processor(tx, name, p)?;
        }
    }
    for (name, o) in &file.objects {
        let old = before.objects.get(name);
        if note("object", name, old.is_some(), old == Some(o)) {
            upsert_object(tx, name, o)?;
        }
    }
    for (name, g) in &file.groups {
        let old = before.groups.get(name);
        if note("group", name, old.is_some(), old == Some(g)) {
            tx.execute(
                UPSERT_GROUP,
                params![name, g.maintenance, g.description, g.enabled],
            )?;
        }
    }
    for (name, j) in &file.jobs {
        let old = before.jobs.get(name);
        if note("job", name, old.is_some(), old == Some(j)) {
            upsert_job(tx, name, j)?;
        }
    }
    // A created entry is shown with its values; an updated one with the fields that changed.
    let described = crate::jobconf::merge::described(file);
    let changes = report
        .changes
        .iter()
        .map(|c| match c.change {
            "created" => described
                .iter()
                .find(|d| d.section == c.section && d.name == c.name)
                .unwrap_or(c)
                .clone(),
            _ => c.clone(),
        })
        .collect();
    let mut detail = audit_changes(changes);
    detail["created"] = report.created.len().into();
    detail["updated"] = report.updated.len().into();
    detail["unchanged"] = report.unchanged.into();
    audit(tx, actor, action, "catalog", Some(&detail))?;
    Ok(report)
}

const UPSERT_PROCESSOR: &str = "INSERT INTO job_processor
    (processor_name, instances, max_instances, ip_address, port, rpc_user, rpc_password, status,
     nodes)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
    ON CONFLICT (processor_name) DO UPDATE SET
        instances = excluded.instances, max_instances = excluded.max_instances,
        ip_address = excluded.ip_address, port = excluded.port, rpc_user = excluded.rpc_user,
        rpc_password = excluded.rpc_password, status = excluded.status, nodes = excluded.nodes";

fn upsert_processor(
    tx: &Transaction<'_>,
    name: &str,
    p: &ProcessorDef,
) -> Result<(), CatalogError> {
    tx.execute(
        UPSERT_PROCESSOR,
        params![
            name,
            p.instances,
            p.max_instances,
            p.ip_address,
            p.port,
            p.rpc_user,
            p.rpc_password,
            p.enabled,
            // Any node: NULL, so that the runtime's filter is one test on most catalogs.
            (!p.nodes.is_empty()).then(|| Json::from(p.nodes.clone()).to_string())
        ],
    )?;
    Ok(())
}

const UPSERT_OBJECT: &str = "INSERT INTO object
    (object_name, object_type, conn_string, object_key, object_name_field, id_length,
     search_prefix, time_to_live, allow_prune, allow_list, description, status)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)
    ON CONFLICT (object_name) DO UPDATE SET
        object_type = excluded.object_type, conn_string = excluded.conn_string,
        object_key = excluded.object_key, object_name_field = excluded.object_name_field,
        id_length = excluded.id_length, search_prefix = excluded.search_prefix,
        time_to_live = excluded.time_to_live, allow_prune = excluded.allow_prune,
        allow_list = excluded.allow_list, description = excluded.description,
        status = excluded.status";

fn upsert_object(tx: &Transaction<'_>, name: &str, o: &ObjectDef) -> Result<(), CatalogError> {
    tx.execute(
        UPSERT_OBJECT,
        params![
            name,
            o.object_type.as_str(),
            o.conn_string,
            o.key_field,
            o.name_field,
            o.id_length,
            o.search_prefix,
            o.time_to_live,
            o.allow_prune,
            o.allow_list,
            o.description,
            o.enabled
        ],
    )?;
    Ok(())
}

const UPSERT_GROUP: &str =
    "INSERT INTO job_group (job_group_name, maintenance, description, status)
    VALUES (?1, ?2, ?3, ?4)
    ON CONFLICT (job_group_name) DO UPDATE SET
        maintenance = excluded.maintenance, description = excluded.description,
        status = excluded.status";

// A changed definition clears `next_run_at`, so the scheduler recomputes it from the new fields.
const UPSERT_JOB: &str = "INSERT INTO job
    (job_name, processor_id, job_group_id, job_type_id, job_payload, description, priority,
     timeout, run_always, run_delay, run_every, run_on_the, run_at, run_date, cron, timezone,
     misfire_policy, misfire_window, max_catchup, overlap_policy, max_overlap, max_attempts,
     backoff_base, backoff_max, required, status, stretch_max)
    VALUES (?1,
        (SELECT processor_id FROM job_processor WHERE processor_name = ?2),
        (SELECT job_group_id FROM job_group WHERE job_group_name = ?3),
        (SELECT job_type_id FROM job_type WHERE job_type = ?4),
        ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22,
        ?23, ?24, ?25, ?26, ?27)
    ON CONFLICT (job_name) DO UPDATE SET
        processor_id = excluded.processor_id, job_group_id = excluded.job_group_id,
        job_type_id = excluded.job_type_id, job_payload = excluded.job_payload,
        description = excluded.description, priority = excluded.priority,
        timeout = excluded.timeout, run_always = excluded.run_always,
        run_delay = excluded.run_delay, run_every = excluded.run_every,
        run_on_the = excluded.run_on_the, run_at = excluded.run_at, run_date = excluded.run_date,
        cron = excluded.cron, timezone = excluded.timezone,
        misfire_policy = excluded.misfire_policy, misfire_window = excluded.misfire_window,
        max_catchup = excluded.max_catchup, overlap_policy = excluded.overlap_policy,
        max_overlap = excluded.max_overlap, max_attempts = excluded.max_attempts,
        backoff_base = excluded.backoff_base, backoff_max = excluded.backoff_max,
        required = excluded.required, status = excluded.status,
        stretch_max = excluded.stretch_max, next_run_at = NULL";
const SELECT_JOB_ID: &str = "SELECT job_id FROM job WHERE job_name = ?1";
const DELETE_JOB_OBJECTS: &str = "DELETE FROM job_object WHERE job_id = ?1";
const INSERT_JOB_OBJECT: &str = "INSERT INTO job_object (job_id, object_id)
    SELECT ?1, object_id FROM object WHERE object_name = ?2";
const UPDATE_JOB_STATUS: &str = "UPDATE job SET status = ?1 WHERE job_name = ?2";
const SELECT_JOB_ENABLED: &str = "SELECT status = 1 FROM job WHERE job_name = ?1";
const FORGET_UNPINNED_ACTIVATION: &str = "DELETE FROM job_activation
    WHERE pinned IS NULL AND job_id = (SELECT job_id FROM job WHERE job_name = ?1)";
const COUNT_RUNNING_OF_JOB: &str = "SELECT (SELECT count(*) FROM job_run r
    WHERE r.job_id = j.job_id AND r.status = 'running') FROM job j WHERE j.job_name = ?1";
const DELETE_JOB: &str = "DELETE FROM job WHERE job_name = ?1";
const SELECT_WORKFLOWS: &str = "SELECT j.job_name, j.job_payload FROM job j
    JOIN job_type t ON t.job_type_id = j.job_type_id WHERE t.job_type = 'workflow'";
const DETACH_FROM_JOB: &str = "WITH gone(id) AS (SELECT r.run_id FROM job_run r
        JOIN job j ON j.job_id = r.job_id WHERE j.job_name = ?1)
    UPDATE job_run SET pid = CASE WHEN pid IN (SELECT id FROM gone) THEN NULL ELSE pid END,
        stump = CASE WHEN stump IN (SELECT id FROM gone) THEN NULL ELSE stump END
    WHERE pid IN (SELECT id FROM gone) OR stump IN (SELECT id FROM gone)";
const SELECT_PROCESSOR_JOBS: &str = "SELECT (SELECT group_concat('`' || j.job_name || '`', ', ')
    FROM job j WHERE j.processor_id = p.processor_id) FROM job_processor p
    WHERE p.processor_name = ?1";
const DELETE_PROCESSOR: &str = "DELETE FROM job_processor WHERE processor_name = ?1";
const SELECT_OBJECT_USERS: &str = "SELECT (SELECT group_concat('`' || j.job_name || '`', ', ')
    FROM job j WHERE EXISTS (SELECT 1 FROM job_object jo WHERE jo.job_id = j.job_id
                             AND jo.object_id = o.object_id)
       OR json_extract(j.job_payload, '$.object') = o.object_name)
    FROM object o WHERE o.object_name = ?1";
const DELETE_OBJECT: &str = "DELETE FROM object WHERE object_name = ?1";

fn upsert_job(tx: &Transaction<'_>, name: &str, j: &JobDef) -> Result<(), CatalogError> {
    let s = &j.schedule;
    tx.execute(
        UPSERT_JOB,
        params![
            name,
            j.processor,
            j.group,
            j.job_type.as_str(),
            Json::Object(j.payload.clone()).to_string(),
            j.description,
            j.priority,
            j.timeout,
            s.run_always,
            s.run_delay,
            s.run_every,
            s.run_on_the,
            s.run_at,
            s.run_date,
            s.cron,
            s.timezone,
            j.misfire_policy.as_str(),
            j.misfire_window,
            j.max_catchup,
            j.overlap_policy.as_str(),
            j.max_overlap,
            j.max_attempts,
            j.backoff_base,
            j.backoff_max,
            j.required,
            j.enabled,
            j.stretch_max
        ],
    )?;
    let job_id: i64 = tx.query_row(SELECT_JOB_ID, [name], |r| r.get(0))?;
    tx.execute(DELETE_JOB_OBJECTS, [job_id])?;
    for object in &j.objects {
        tx.execute(INSERT_JOB_OBJECT, params![job_id, object])?;
    }
    Ok(())
}

const SELECT_PROCESSORS: &str = "SELECT processor_name, instances, max_instances, ip_address,
    port, rpc_user, rpc_password, status, nodes FROM job_processor";
const SELECT_OBJECTS: &str = "SELECT object_name, object_type, conn_string, object_key,
    object_name_field, id_length, search_prefix, time_to_live, allow_prune, allow_list,
    description, status FROM object";
const SELECT_GROUPS: &str =
    "SELECT job_group_name, maintenance, description, status FROM job_group";
const SELECT_JOBS: &str = "SELECT j.job_name, t.job_type, p.processor_name, g.job_group_name,
    j.job_payload, j.description, j.priority, j.timeout, j.run_always, j.run_delay, j.run_every,
    j.run_on_the, j.run_at, j.run_date, j.cron, j.timezone, j.misfire_policy, j.misfire_window,
    j.max_catchup, j.overlap_policy, j.max_overlap, j.max_attempts, j.backoff_base,
    j.backoff_max, j.status, j.required,
    (SELECT group_concat(o.object_name, char(31)) FROM job_object jo
        JOIN object o ON o.object_id = jo.object_id WHERE jo.job_id = j.job_id),
    j.job_id, j.in_progress, j.last_date_begin, j.last_date_end, j.last_elapse,
    j.last_response, j.next_run_at, j.stretch_max
    FROM job j
    JOIN job_type t ON t.job_type_id = j.job_type_id
    JOIN job_processor p ON p.processor_id = j.processor_id
    LEFT JOIN job_group g ON g.job_group_id = j.job_group_id";

/// A processor's name and definition from a row of [`SELECT_PROCESSORS`]' columns.
pub(crate) fn processor_row(r: &Row<'_>) -> rusqlite::Result<(String, ProcessorDef)> {
    Ok((
        r.get(0)?,
        ProcessorDef {
            instances: r.get(1)?,
            max_instances: r.get(2)?,
            ip_address: r.get(3)?,
            port: r.get(4)?,
            rpc_user: r.get(5)?,
            rpc_password: r.get(6)?,
            enabled: r.get::<_, i64>(7)? == 1,
            nodes: r
                .get::<_, Option<String>>(8)?
                .and_then(|text| serde_json::from_str(&text).ok())
                .unwrap_or_default(),
        },
    ))
}

fn export_from(conn: &Connection) -> Result<CatalogFile, CatalogError> {
    let mut file = CatalogFile::default();
    let mut stmt = conn.prepare_cached(SELECT_PROCESSORS)?;
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        let (name, def) = processor_row(r)?;
        file.processors.insert(name, def);
    }
    let mut stmt = conn.prepare_cached(SELECT_OBJECTS)?;
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        let object_type: String = r.get(1)?;
        file.objects.insert(
            r.get(0)?,
            ObjectDef {
                object_type: ObjectType::parse(&object_type)
                    .ok_or_else(|| CatalogError::Corrupt(format!("object_type `{object_type}`")))?,
                conn_string: r.get(2)?,
                key_field: r.get(3)?,
                name_field: r.get(4)?,
                id_length: r.get(5)?,
                search_prefix: r.get(6)?,
                time_to_live: r.get(7)?,
                allow_prune: r.get::<_, i64>(8)? == 1,
                allow_list: r.get::<_, i64>(9)? == 1,
                description: r.get(10)?,
                enabled: r.get::<_, i64>(11)? == 1,
            },
        );
    }
    let mut stmt = conn.prepare_cached(SELECT_GROUPS)?;
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        file.groups.insert(
            r.get(0)?,
            GroupDef {
                maintenance: r.get::<_, i64>(1)? == 1,
                description: r.get(2)?,
                enabled: r.get::<_, i64>(3)? == 1,
            },
        );
    }
    let mut stmt = conn.prepare_cached(SELECT_JOBS)?;
    let records = stmt
        .query_map([], job_record)?
        .collect::<Result<Vec<_>, _>>()?;
    for record in records {
        let record = record?;
        file.jobs.insert(record.name, record.def);
    }
    Ok(file)
}

/// A job as stored: its definition and the engine's bookkeeping (millix names).
#[derive(Debug, Clone)]
pub struct JobRecord {
    /// `job_id`.
    pub id: i64,
    /// `job_name`.
    pub name: String,
    /// The definition.
    pub def: JobDef,
    /// Runs executing now.
    pub in_progress: i64,
    /// Epoch ms the last run began.
    pub last_date_begin: Option<i64>,
    /// Epoch ms the last run ended.
    pub last_date_end: Option<i64>,
    /// The last run's duration in ms.
    pub last_elapse: Option<i64>,
    /// The last run's result or error, abbreviated.
    pub last_response: Option<String>,
    /// Epoch ms of the next scheduled slot, when computed.
    pub next_run_at: Option<i64>,
}

/// Reads one `SELECT_JOBS` row; the outer `Result` is SQLite's, the inner one is ours.
fn job_record(r: &Row<'_>) -> rusqlite::Result<Result<JobRecord, CatalogError>> {
    let name: String = r.get(0)?;
    let job_type: String = r.get(1)?;
    let payload: String = r.get(4)?;
    let misfire: String = r.get(16)?;
    let overlap: String = r.get(19)?;
    let objects: Option<String> = r.get(26)?;
    let corrupt = |what: String| Ok(Err(CatalogError::Corrupt(format!("job `{name}`: {what}"))));
    let Some(job_type) = JobType::parse(&job_type) else {
        return corrupt(format!("job type `{job_type}`"));
    };
    let Ok(Json::Object(payload)) = serde_json::from_str::<Json>(&payload) else {
        return corrupt("payload is not a JSON object".into());
    };
    let (Some(misfire_policy), Some(overlap_policy)) = (
        MisfirePolicy::parse(&misfire),
        OverlapPolicy::parse(&overlap),
    ) else {
        return corrupt(format!("policies `{misfire}` / `{overlap}`"));
    };
    let objects: BTreeSet<String> = objects
        .map(|s| s.split('\u{1f}').map(String::from).collect())
        .unwrap_or_default();
    let def = JobDef {
        job_type,
        processor: r.get(2)?,
        group: r.get(3)?,
        payload: payload as JsonMap<String, Json>,
        description: r.get(5)?,
        priority: r.get(6)?,
        timeout: r.get(7)?,
        schedule: ScheduleSpec {
            run_always: r.get::<_, i64>(8)? == 1,
            run_delay: r.get(9)?,
            run_every: r.get(10)?,
            run_on_the: r.get(11)?,
            run_at: r.get(12)?,
            run_date: r.get(13)?,
            cron: r.get(14)?,
            timezone: r.get(15)?,
        },
        misfire_policy,
        misfire_window: r.get(17)?,
        max_catchup: r.get(18)?,
        overlap_policy,
        max_overlap: r.get(20)?,
        max_attempts: r.get(21)?,
        backoff_base: r.get(22)?,
        backoff_max: r.get(23)?,
        enabled: r.get::<_, i64>(24)? == 1,
        required: r.get::<_, i64>(25)? == 1,
        objects: objects.into_iter().collect(),
        stretch_max: r.get(34)?,
    };
    Ok(Ok(JobRecord {
        name,
        def,
        id: r.get(27)?,
        in_progress: r.get(28)?,
        last_date_begin: r.get(29)?,
        last_date_end: r.get(30)?,
        last_elapse: r.get(31)?,
        last_response: r.get(32)?,
        next_run_at: r.get(33)?,
    }))
}

const SELECT_PROCESSOR_ROWS: &str = "SELECT p.processor_name, p.instances, p.max_instances,
    p.ip_address, p.status,
    (SELECT count(*) FROM job j WHERE j.processor_id = p.processor_id),
    (SELECT json_group_array(json_object('node', n.node_name, 'instances', a.instances,
                                         'reason', a.reason, 'changed_at', a.changed_at))
       FROM processor_activation a JOIN node n ON n.node_id = a.node_id
       WHERE a.processor_id = p.processor_id)
    FROM job_processor p ORDER BY p.processor_name";

/// A processor as listed.
#[derive(Debug, Clone, Serialize)]
pub struct ProcessorRow {
    /// Name.
    pub name: String,
    /// Concurrent executions.
    pub instances: i64,
    /// Upper bound for self-tuning.
    pub max_instances: Option<i64>,
    /// The remote node's address, if remote.
    pub remote: Option<String>,
    /// `status = 1`.
    pub enabled: bool,
    /// Jobs assigned.
    pub jobs: i64,
    /// The instances each node's policy runs (nodes that never changed them run `instances`).
    pub running: Vec<NodeInstances>,
}

/// How many instances of a processor one node runs, as its policy last decided.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct NodeInstances {
    /// The node.
    pub node: String,
    /// Instances it runs.
    pub instances: i64,
    /// Why, as the decision said.
    pub reason: Option<String>,
    /// When, epoch ms.
    pub changed_at: Option<i64>,
}

const SELECT_OBJECT_CONN: &str =
    "SELECT conn_string FROM object WHERE object_name = ?1 AND status = 1";

/// An enabled object's `conn_string` (`Some(None)`: it has none), or `None` when there is no
/// such enabled object.
pub fn object_conn_string(
    conn: &Connection,
    name: &str,
) -> Result<Option<Option<String>>, CatalogError> {
    Ok(conn
        .prepare_cached(SELECT_OBJECT_CONN)?
        .query_row([name], |r| r.get(0))
        .optional()?)
}

const SELECT_OBJECT_ROWS: &str = "SELECT o.object_name, o.object_type, o.conn_string,
    o.time_to_live, o.allow_prune, o.status,
    (SELECT count(*) FROM job_object jo WHERE jo.object_id = o.object_id)
    FROM object o ORDER BY o.object_name";

/// An object as listed.
#[derive(Debug, Clone, Serialize)]
pub struct ObjectRow {
    /// Name.
    pub name: String,
    /// table, file or view.
    pub object_type: String,
    /// Where it lives.
    pub conn_string: Option<String>,
    /// Seconds before rows may be pruned.
    pub time_to_live: Option<i64>,
    /// Pruning allowed.
    pub allow_prune: bool,
    /// `status = 1`.
    pub enabled: bool,
    /// Jobs that write it.
    pub writers: i64,
}

/// One audit entry.
#[derive(Debug, Clone, Serialize)]
pub struct AuditRow {
    /// Epoch ms.
    pub at: i64,
    /// Who.
    pub actor: String,
    /// What.
    pub action: String,
    /// On what.
    pub subject: Option<String>,
    /// Details (JSON).
    pub detail: Option<String>,
}

#[cfg(test)]
mod fleet_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tree_tests;
