//! [`DbWriter`] is the one write connection to a database file (the catalog, or a data
//! object's file), on a thread of its own which runs transactions back to back: the next one
//! starts as soon as the previous one committed, however busy the actors' thread is. The
//! handle is cheap to clone; whoever holds one submits operations and is answered after
//! commit. It is no actor: the runtime's actors hold the handle, and nothing here names actix.
//!
//! Invariant: every write to its database goes through it, in submission order; operations
//! that queue while a transaction is committing share the next transaction (group commit), each
//! inside its own savepoint when there are several, and none is acknowledged before its
//! transaction committed. WAL checkpoints run on a thread of their own (the Checkpointer), never
//! inside a commit.
//!
//! The WAL stays bounded (issue 12: it grew to 67 MB during a drain and stayed so after exit,
//! filling small disks). The Checkpointer's passive checkpoints copy pages back but can never
//! rewind a log that a writer appends to without pause, so past [`WAL_RESTART_BYTES`] the
//! writer's thread itself runs a RESTART checkpoint between two transactions (it copies what
//! the passive ones left; the next transaction writes the log from its start, over the same
//! file, which `journal_size_limit` keeps at that size); after [`SETTLE_AFTER_IDLE`] without
//! work, and when the writer is told to settle at shutdown, a TRUNCATE checkpoint empties the
//! file. Emptying the file at every bound instead cost the drain its file's preallocation
//! (measured: same peak, a drain rate that varied more).
//!
//! A corruption error met by an operation, a begin or a commit (or by a read of the same file:
//! they share its [`Damage`]) stops the writer for good (issue 12, defect 3): that transaction
//! and the rest of its batch roll back, later operations are refused without running, no
//! checkpoint or settle runs, and its connections do not checkpoint as they close, so the
//! file keeps the bytes it had when the damage was found.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::time::{Duration, Instant};

use rusqlite::Connection;
use tokio::sync::oneshot;

use crate::catalog::CatalogError;
use crate::catalog::checkpoint::{Checkpointer, keep_bytes_on_close};
use crate::catalog::damage::{Damage, DamageHook, Finding};

/// An operation's reply, called once its transaction's fate is known.
type Reply = Box<dyn FnOnce(Result<(), Failed>) + Send>;
/// An operation's body: given the connection, runs inside the batch's transaction and says how
/// it went; given none (the batch could not begin, or the file is damaged), runs nothing and
/// only hands out its reply.
type Body = Box<dyn FnOnce(Option<&Connection>) -> (Done, Reply) + Send>;

/// An operation: what it does, in words (for a finding of damage), and its body.
struct Op {
    doing: &'static str,
    body: Body,
}

impl Op {
    /// Runs the operation inside the current transaction.
    fn run(self, conn: &Connection) -> (Done, Reply) {
        (self.body)(Some(conn))
    }

    /// The reply of an operation that is not run: it receives its batch's failure.
    fn refuse(self) -> Reply {
        (self.body)(None).1
    }
}

/// How an operation went inside its transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Done {
    Ok,
    Failed,
    /// Failed because the disk is full.
    Full,
    /// Failed because the file is damaged: SQLite's words.
    Damaged(String),
}

/// Why a transaction did not commit, for every operation in it.
#[derive(Debug, Clone)]
struct Failed {
    text: String,
    /// SQLite found the disk full.
    full: bool,
    /// SQLite found the file damaged.
    damage: Option<Finding>,
}

/// Whether SQLite found the disk full.
pub(super) fn is_full(e: &rusqlite::Error) -> bool {
    e.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull)
}

/// Whether SQLite found the file damaged: a malformed page (`SQLITE_CORRUPT`) or a file that
/// is no database (`SQLITE_NOTADB`, a header overwritten).
fn is_corrupt(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase)
    )
}

impl CatalogError {
    /// Whether SQLite found the disk full (`SQLITE_FULL`, "database or disk is full"), here or
    /// in the error this one wraps (a writer's commit included: [`Failed::into_error`]).
    pub fn is_disk_full(&self) -> bool {
        match self {
            CatalogError::Sqlite(e) => is_full(e),
            CatalogError::In { source, .. } => source.is_disk_full(),
            _ => false,
        }
    }

    /// Whether SQLite found the file damaged (`SQLITE_CORRUPT`, "database disk image is
    /// malformed", or `SQLITE_NOTADB`), here or in the error this one wraps, or `quick_check`
    /// did: the node stops writing to the file ([`Damage`]). Not
    /// [`CatalogError::Corrupt`], a row this build cannot read, which says nothing of the file.
    pub fn is_damaged(&self) -> bool {
        match self {
            CatalogError::Sqlite(e) => is_corrupt(e),
            CatalogError::Damaged { .. } | CatalogError::FoundDamaged { .. } => true,
            CatalogError::In { source, .. } => source.is_damaged(),
            _ => false,
        }
    }
}

impl Failed {
    /// `e` failed the transaction at `step` (begin, commit) of a batch that was `doing`.
    fn of(label: &str, path: &Path, step: &str, doing: &str, e: &rusqlite::Error) -> Self {
        Failed {
            text: format!("{label} {}: {step} ({doing}): {e}", path.display()),
            full: is_full(e),
            damage: is_corrupt(e).then(|| Finding {
                path: path.to_path_buf(),
                doing: format!("{step} ({doing})"),
                detail: e.to_string(),
            }),
        }
    }

    /// The file was found damaged: nothing of the batch is kept.
    fn damaged(finding: Finding) -> Self {
        Failed {
            text: finding.error().to_string(),
            full: false,
            damage: Some(finding),
        }
    }

    /// The error an operation's caller receives: a full disk and a damaged file stay
    /// recognisable ([`CatalogError::is_disk_full`], [`CatalogError::is_damaged`]).
    fn into_error(self) -> CatalogError {
        if let Some(finding) = self.damage {
            finding.error()
        } else if self.full {
            CatalogError::Sqlite(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_FULL),
                Some(self.text),
            ))
        } else {
            CatalogError::Failed(self.text)
        }
    }
}

/// Called on the writer's thread after a transaction failed because the disk is full (the
/// Supervisor's cue to stop claiming: issue 12, defect 6). At most once per
/// [`FULL_HOOK_EVERY`].
pub type FullHook = Box<dyn Fn() + Send>;

/// Called with the runs a verb queued for processors as a side effect of what it was asked
/// (a workflow's next steps queued by a completion, a child spawned by a running function), once
/// their transaction committed: whoever runs the processors wakes them.
pub type QueuedHook = Box<dyn Fn(&[crate::catalog::tree::Queued]) + Send + Sync>;

/// The least time between two calls of a writer's [`FullHook`].
const FULL_HOOK_EVERY: Duration = Duration::from_millis(500);

/// What the writer's thread is asked to do.
enum Job {
    /// An operation for the next transaction.
    Op(Op),
    /// A TRUNCATE checkpoint, then the answer.
    Settle(oneshot::Sender<()>),
    /// Call this from now on when a transaction fails because the disk is full.
    OnFull(FullHook),
}

/// What one batch's transaction came to.
struct BatchOutcome {
    /// Committed, or why not (for the operations that did not fail by themselves).
    commit: Result<(), Failed>,
    /// Each operation's reply, to send.
    replies: Vec<Reply>,
    /// Something failed because the disk is full.
    full: bool,
    /// The file was found damaged.
    damage: Option<Finding>,
}

/// Past this WAL size the writer's thread rewinds the log with a RESTART checkpoint between two
/// transactions (after one that a reader made fail, not again before [`RESTART_EVERY`]).
pub const WAL_RESTART_BYTES: u64 = crate::catalog::JOURNAL_SIZE_LIMIT;
/// After a reader made rewinding the WAL fail, the least time before the next try.
const RESTART_EVERY: Duration = Duration::from_secs(1);
/// A checkpoint that needs readers to finish waits at most this long for them.
const CHECKPOINT_WAIT: Duration = Duration::from_millis(200);
/// A writer with nothing to do for this long empties the WAL (TRUNCATE checkpoint).
pub const SETTLE_AFTER_IDLE: Duration = Duration::from_secs(1);

/// Most operations that share one transaction.
const MAX_BATCH: usize = 2048;

/// The WAL size (pages) at which the writer checkpoints by itself: only when the Checkpointer
/// cannot keep up (SQLite's default is 1000, which made a commit stall for a checkpoint about
/// every 4 MiB written).
const WRITER_AUTOCHECKPOINT: u32 = 16_384;
/// The writer of one database file: the handle of its thread. The thread ends once every
/// handle is dropped and what was queued is done.
#[derive(Clone)]
pub struct DbWriter {
    label: String,
    path: PathBuf,
    /// To the writer's thread; `None` when the thread could not start.
    ops: Option<Sender<Job>>,
    /// Whether the file was found damaged (shared with the file's reads).
    damage: Arc<Damage>,
    /// Told of runs queued as a side effect (shared by every clone of the handle).
    queued_hook: std::sync::Arc<std::sync::RwLock<Option<QueuedHook>>>,
    /// The catalog on PostgreSQL instead: the verbs go to its connection thread (there is no
    /// file, no writer thread and no damage to find).
    pg: Option<crate::catalog::postgres::PgCatalog>,
    /// On PostgreSQL, the connection completions go to (beside `pg`'s claims).
    pg_ends: Option<crate::catalog::postgres::PgCatalog>,
}

impl std::fmt::Debug for DbWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DbWriter")
            .field("label", &self.label)
            .field("path", &self.path)
            .finish()
    }
}

impl DbWriter {
    /// A writer that owns `conn` (already configured with the pragmas), on a thread of its own.
    pub fn new(
        label: impl Into<String>,
        path: PathBuf,
        conn: Connection,
        settings: crate::catalog::DbSettings,
    ) -> Self {
        let label = label.into();
        let damage = Arc::new(Damage::default());
        let (ops, queued) = channel::<Job>();
        let thread = WriterThread {
            label: label.clone(),
            path: path.clone(),
            settings,
            conn: Some(conn),
            checkpointer: None,
            dirty: false,
            held_at: None,
            on_full: None,
            full_told_at: None,
            damage: damage.clone(),
            halted: false,
        };
        let started = std::thread::Builder::new()
            .name(format!("writer {label}"))
            .spawn(move || thread.run(queued));
        let ops = match started {
            Ok(_) => Some(ops),
            Err(e) => {
                tracing::error!(writer = %label, "cannot start the writer thread: {e}");
                None
            }
        };
        tracing::debug!(writer = %label, path = %path.display(), "writer started");
        Self {
            label,
            path,
            ops,
            damage,
            queued_hook: Default::default(),
            pg: None,
            pg_ends: None,
        }
    }

    /// The catalog writer of a node whose catalog is on PostgreSQL: each verb is a
    /// transaction on `pg`'s connection thread, awaited off the caller's thread.
    pub fn on_postgres(
        pg: crate::catalog::postgres::PgCatalog,
        ends: crate::catalog::postgres::PgCatalog,
    ) -> Self {
        Self {
            label: "catalog".into(),
            path: PathBuf::from(pg.url()),
            ops: None,
            damage: Arc::new(Damage::default()),
            queued_hook: Default::default(),
            pg: Some(pg),
            pg_ends: Some(ends),
        }
    }

    /// The PostgreSQL catalog this writer's verbs go to, if it is one.
    pub(in crate::catalog) fn postgres(&self) -> Option<&crate::catalog::postgres::PgCatalog> {
        self.pg.as_ref()
    }

    /// The PostgreSQL connection completions go to.
    pub(in crate::catalog) fn postgres_ends(&self) -> Option<&crate::catalog::postgres::PgCatalog> {
        self.pg_ends.as_ref()
    }

    /// Calls `hook` once when the file is found damaged, by this writer or by a read sharing
    /// its [`Damage`] (at once if it already was); from then on the writer commits nothing.
    pub fn on_damaged(&self, hook: DamageHook) {
        self.damage.on_damaged(hook);
    }

    /// Whether the file was found damaged (the writer commits nothing more).
    pub fn is_damaged(&self) -> bool {
        self.damage.is_damaged()
    }

    /// The file's damage state, for the reads of the same file to share.
    pub(in crate::catalog) fn damage(&self) -> Arc<Damage> {
        self.damage.clone()
    }

    /// Calls `hook` with the runs a verb queued for processors beyond what it was asked for
    /// (see [`QueuedHook`]); replaces an earlier hook.
    pub fn on_queued(&self, hook: QueuedHook) {
        if let Ok(mut slot) = self.queued_hook.write() {
            *slot = Some(hook);
        }
    }

    /// Tells the hook about `queued` (nothing to do when empty: the common case costs no lock).
    pub(in crate::catalog) fn announce(&self, queued: &[crate::catalog::tree::Queued]) {
        if queued.is_empty() {
            return;
        }
        if let Ok(slot) = self.queued_hook.read()
            && let Some(hook) = slot.as_ref()
        {
            hook(queued);
        }
    }

    /// Calls `hook` (on the writer's thread) whenever a transaction fails because the disk is
    /// full, at most once per [`FULL_HOOK_EVERY`]; replaces an earlier hook.
    pub fn on_full(&self, hook: FullHook) {
        if self.pg.is_some() {
            return; // The server's disk is the server's to watch.
        }
        self.submit(Job::OnFull(hook));
    }

    /// The database file it writes.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    fn submit(&self, job: Job) {
        // A failed send drops the operation: its caller hears the writer did not answer.
        if self.ops.as_ref().is_none_or(|ops| ops.send(job).is_err()) {
            tracing::error!(writer = %self.label, "the writer thread is gone; operation dropped");
        }
    }

    /// Runs `f` inside the writer's next transaction and returns its result once committed;
    /// `doing` says what it does, in words ("claiming runs"), should it find the file damaged.
    pub(in crate::catalog) async fn call<T, F>(
        &self,
        doing: &'static str,
        f: F,
    ) -> Result<T, CatalogError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, CatalogError> + Send + 'static,
    {
        let (op, rx) = operation(doing, f);
        self.submit(Job::Op(op));
        rx.await
            .map_err(|_| CatalogError::Unavailable("the writer stopped before answering".into()))?
    }

    /// Like [`DbWriter::call`], for blocking code (functions on the blocking pool): waits on
    /// this thread.
    pub(in crate::catalog) fn call_blocking<T, F>(
        &self,
        doing: &'static str,
        f: F,
    ) -> Result<T, CatalogError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, CatalogError> + Send + 'static,
    {
        let (op, rx) = operation(doing, f);
        self.submit(Job::Op(op));
        rx.blocking_recv()
            .map_err(|_| CatalogError::Unavailable("the writer stopped before answering".into()))?
    }

    /// Empties the WAL into the database file now (a TRUNCATE checkpoint, between
    /// transactions): at a clean shutdown, so that the file alone holds everything. Answers
    /// when done (or given up on because a reader held the log).
    pub async fn settle(&self) {
        if self.pg.is_some() {
            return;
        }
        let (tx, rx) = oneshot::channel();
        self.submit(Job::Settle(tx));
        let _ = rx.await;
    }
}

/// The writer's thread: its connection and its checkpoints.
struct WriterThread {
    label: String,
    path: PathBuf,
    settings: crate::catalog::DbSettings,
    conn: Option<Connection>,
    checkpointer: Option<Checkpointer>,
    /// Something was committed since the WAL was last emptied.
    dirty: bool,
    /// When rewinding a WAL grown past its bound last failed (a reader held it).
    held_at: Option<Instant>,
    /// Told when a transaction failed because the disk is full.
    on_full: Option<FullHook>,
    /// When `on_full` was last called.
    full_told_at: Option<Instant>,
    /// Whether the file was found damaged (by this thread or a read of the file).
    damage: Arc<Damage>,
    /// The damage was acted on: no checkpointer, no checkpoint when the connection closes.
    halted: bool,
}

impl WriterThread {
    /// Runs transactions until every handle is gone and nothing is queued.
    fn run(mut self, queued: Receiver<Job>) {
        self.checkpointer =
            match Checkpointer::start(&self.label, &self.path, &self.settings, self.damage.clone())
            {
                Ok(c) => Some(c),
                Err(e) => {
                    tracing::warn!(writer = %self.label, "{e}; the writer checkpoints by itself");
                    None
                }
            };
        if let Some(conn) = &self.conn {
            tune_writer(conn, &self.label, self.checkpointer.is_some());
        }
        loop {
            let first = if self.dirty {
                match queued.recv_timeout(SETTLE_AFTER_IDLE) {
                    Ok(job) => job,
                    Err(RecvTimeoutError::Timeout) => {
                        self.settle();
                        continue;
                    }
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            } else {
                match queued.recv() {
                    Ok(job) => job,
                    Err(_) => break,
                }
            };
            // Everything queued meanwhile shares the transaction; a settle waits for it.
            let mut batch = Vec::new();
            let mut settles = Vec::new();
            let mut next = Some(first);
            while let Some(job) = next.take() {
                match job {
                    Job::Op(op) => batch.push(op),
                    Job::Settle(done) => settles.push(done),
                    Job::OnFull(hook) => self.on_full = Some(hook),
                }
                if batch.len() < MAX_BATCH {
                    next = queued.try_recv().ok();
                }
            }
            if !batch.is_empty() {
                self.run_batch(batch);
                self.bound_wal();
            }
            if !settles.is_empty() {
                self.settle();
                for done in settles {
                    let _ = done.send(());
                }
            }
        }
        self.settle();
        self.halt_if_damaged();
        tracing::debug!(writer = %self.label, "writer thread ends");
    }

    /// Whether the file was found damaged; the first time, stops everything that could still
    /// write to it: the Checkpointer, and the checkpoint SQLite runs when the last connection
    /// to a WAL database closes.
    fn halt_if_damaged(&mut self) -> bool {
        if !self.damage.is_damaged() {
            return false;
        }
        if !self.halted {
            self.halted = true;
            self.checkpointer = None;
            if let Some(conn) = &self.conn {
                keep_bytes_on_close(conn);
            }
            tracing::debug!(writer = %self.label, "the file is damaged: the writer commits nothing more");
        }
        true
    }

    /// After a commit: rewinds a WAL grown past [`WAL_RESTART_BYTES`] (module docs).
    fn bound_wal(&mut self) {
        if self.halt_if_damaged() {
            return;
        }
        self.dirty = true;
        let wal = crate::catalog::open::wal_path(&self.path);
        if std::fs::metadata(&wal).map_or(0, |m| m.len()) <= WAL_RESTART_BYTES
            || self.held_at.is_some_and(|t| t.elapsed() < RESTART_EVERY)
        {
            return;
        }
        match self.checkpoint("RESTART") {
            Some((0, log, copied)) => {
                self.held_at = None;
                tracing::debug!(writer = %self.label, log, copied, "WAL rewound");
            }
            _ => {
                // A reader holds the log: let it finish before asking again.
                self.held_at = Some(Instant::now());
                tracing::debug!(writer = %self.label, "a reader holds the WAL past its bound");
            }
        }
    }

    /// Empties the WAL into the database file (TRUNCATE checkpoint), unless a reader holds it.
    fn settle(&mut self) {
        if !self.dirty || self.halt_if_damaged() {
            return;
        }
        match self.checkpoint("TRUNCATE") {
            Some((0, _, _)) => self.dirty = false,
            Some(_) => {
                tracing::debug!(writer = %self.label, "a reader holds the WAL; emptying it later")
            }
            None => {}
        }
    }

    /// Runs `PRAGMA wal_checkpoint(mode)` on the writer's connection (outside a transaction),
    /// waiting at most [`CHECKPOINT_WAIT`] for readers, and for the Checkpointer's passive
    /// checkpoint when one is under way: (busy, log pages, checkpointed pages).
    fn checkpoint(&self, mode: &str) -> Option<(i64, i64, i64)> {
        let conn = self.conn.as_ref()?;
        let _ = conn.busy_timeout(CHECKPOINT_WAIT);
        let started = Instant::now();
        let done = self.damage.unless_damaged(|| {
            loop {
                let done = conn.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                });
                // (1, -1, -1): another connection's checkpoint holds the log; it takes a moment.
                match done {
                    Ok((1, -1, -1)) if started.elapsed() < CHECKPOINT_WAIT => {
                        std::thread::sleep(Duration::from_millis(5))
                    }
                    other => break other,
                }
            }
        });
        let _ = conn.busy_timeout(self.settings.busy_timeout);
        let done = done?;
        match done {
            Ok(figures) => Some(figures),
            Err(e) => {
                if is_full(&e) {
                    tracing::debug!(writer = %self.label, "{mode} checkpoint failed: {e}");
                } else {
                    tracing::warn!(writer = %self.label, "{mode} checkpoint failed: {e}");
                }
                None
            }
        }
    }

    fn run_batch(&mut self, batch: Vec<Op>) {
        if self.halt_if_damaged() {
            // Found damaged (here or by a read): nothing runs, each caller hears why.
            if let Some(finding) = self.damage.found() {
                let failed = Failed::damaged(finding.clone());
                for op in batch {
                    op.refuse()(Err(failed.clone()));
                }
            }
            return;
        }
        let Some(conn) = self.conn.as_ref() else {
            // No connection: the batch's operations are dropped, and their callers told so.
            self.reopen();
            return;
        };
        let label = self.label.as_str();
        crate::metrics::writer_batch(label, batch.len());
        // A read that finds the file damaged meanwhile waits for this transaction to end; one
        // that found it already leaves the batch to be refused.
        let mut batch = Some(batch);
        let done = self.damage.unless_damaged(|| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                run_batch(conn, batch.take().unwrap_or_default(), label, &self.path)
            }))
        });
        let Some(done) = done else {
            return self.run_batch(batch.unwrap_or_default());
        };
        match done {
            Ok(outcome) => {
                if let Some(finding) = outcome.damage {
                    // Before any reply: a caller that hears of the damage finds it recorded.
                    self.damage.record(finding);
                    self.halt_if_damaged();
                } else if let Some(c) = &self.checkpointer {
                    c.poke();
                }
                for reply in outcome.replies {
                    reply(outcome.commit.clone());
                }
                if outcome.full {
                    self.tell_full();
                }
            }
            Err(_) => {
                // A panicking operation: its batch is lost (callers hear that the writer did not
                // answer) and the connection, maybe inside a transaction, is replaced.
                tracing::error!(writer = %self.label, "writer batch panicked");
                self.conn = None;
                self.reopen();
            }
        }
    }

    /// Calls the full-disk hook, at most once per [`FULL_HOOK_EVERY`].
    fn tell_full(&mut self) {
        let Some(hook) = &self.on_full else { return };
        if self
            .full_told_at
            .is_some_and(|t| t.elapsed() < FULL_HOOK_EVERY)
        {
            return;
        }
        self.full_told_at = Some(Instant::now());
        hook();
    }

    fn reopen(&mut self) {
        match crate::catalog::open_connection(&self.path, &self.settings) {
            Ok(conn) => {
                tracing::warn!(writer = %self.label, "writer continues with a new connection");
                tune_writer(&conn, &self.label, self.checkpointer.is_some());
                self.conn = Some(conn);
            }
            Err(e) => {
                tracing::error!(writer = %self.label, "writer cannot reopen {}: {e}", self.path.display());
                std::thread::sleep(Duration::from_secs(1));
            }
        }
    }
}

/// Page cache of a writer's connection, KiB (SQLite's default is 2 MiB; the hot path's indexes
/// and rows stay cached). Read connections keep the default.
const WRITER_CACHE_KIB: u32 = 16_384;

/// Gives a writer's connection a larger page cache and, when a Checkpointer runs, leaves
/// checkpoints to it, keeping a far threshold in case it falls behind (without one, SQLite's
/// own threshold stays).
fn tune_writer(conn: &Connection, label: &str, checkpointer: bool) {
    let mut pragmas = format!("PRAGMA cache_size = -{WRITER_CACHE_KIB};");
    if checkpointer {
        pragmas.push_str(&format!(
            "PRAGMA wal_autocheckpoint = {WRITER_AUTOCHECKPOINT};"
        ));
    }
    if let Err(e) = conn.execute_batch(&pragmas) {
        tracing::warn!(writer = %label, "cannot tune the writer's connection: {e}");
    }
}

/// Runs one transaction-control statement, prepared once per connection.
fn exec(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(drop)
}

/// What the operations of a batch do, in words (each once).
fn doings(batch: &[Op]) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for op in batch {
        if !seen.contains(&op.doing) {
            seen.push(op.doing);
        }
    }
    seen.join(", ")
}

/// Runs a batch in one transaction on the file at `path`. An operation that finds the file
/// damaged ends it: the transaction rolls back, and the operations after it do not run.
fn run_batch(conn: &Connection, batch: Vec<Op>, label: &str, path: &Path) -> BatchOutcome {
    if let Err(e) = exec(conn, "BEGIN IMMEDIATE") {
        let err = Failed::of(label, path, "beginning a transaction", &doings(&batch), &e);
        let replies = batch.into_iter().map(Op::refuse).collect();
        return BatchOutcome {
            full: err.full,
            damage: err.damage.clone(),
            commit: Err(err),
            replies,
        };
    }
    let what = doings(&batch);
    // Alone in its transaction, an operation needs no savepoint (which would copy every page it
    // changes into a statement journal): if it fails, the transaction rolls back.
    let alone = batch.len() == 1;
    let mut end = "COMMIT";
    let mut replies = Vec::with_capacity(batch.len());
    let mut full = false;
    let mut damage = None;
    for op in batch {
        if damage.is_some() {
            replies.push(op.refuse());
            continue;
        }
        let doing = op.doing;
        if !alone {
            // Each operation in its own savepoint, so one failing leaves the others intact.
            let _ = exec(conn, "SAVEPOINT op");
        }
        let (done, reply) = op.run(conn);
        replies.push(reply);
        full |= done == Done::Full;
        if let Done::Damaged(detail) = done {
            damage = Some(Finding {
                path: path.to_path_buf(),
                doing: doing.to_string(),
                detail,
            });
            end = "ROLLBACK";
            continue;
        }
        if alone {
            if done != Done::Ok {
                end = "ROLLBACK";
            }
        } else {
            if done != Done::Ok {
                let _ = exec(conn, "ROLLBACK TO op");
            }
            let _ = exec(conn, "RELEASE op");
        }
    }
    if let Some(finding) = damage {
        let _ = exec(conn, "ROLLBACK");
        return BatchOutcome {
            commit: Err(Failed::damaged(finding.clone())),
            replies,
            full,
            damage: Some(finding),
        };
    }
    match exec(conn, end) {
        Ok(()) => BatchOutcome {
            commit: Ok(()),
            replies,
            full,
            damage: None,
        },
        Err(e) => {
            let _ = exec(conn, "ROLLBACK");
            let err = Failed::of(label, path, "committing", &what, &e);
            BatchOutcome {
                full: full || err.full,
                damage: err.damage.clone(),
                commit: Err(err),
                replies,
            }
        }
    }
}

type Answer<T> = oneshot::Receiver<Result<T, CatalogError>>;

fn operation<T, F>(doing: &'static str, f: F) -> (Op, Answer<T>)
where
    T: Send + 'static,
    F: FnOnce(&Connection) -> Result<T, CatalogError> + Send + 'static,
{
    let (tx, rx) = oneshot::channel();
    let body: Body = Box::new(move |conn| {
        let Some(conn) = conn else {
            let reply: Reply = Box::new(move |commit| {
                let why = commit.err().map_or_else(
                    || CatalogError::Failed("operation not run".into()),
                    Failed::into_error,
                );
                let _ = tx.send(Err(why));
            });
            return (Done::Failed, reply);
        };
        let result = f(conn);
        let done = match &result {
            Ok(_) => Done::Ok,
            Err(e) if e.is_damaged() => Done::Damaged(Finding::detail_of(e)),
            Err(e) if e.is_disk_full() => Done::Full,
            Err(_) => Done::Failed,
        };
        let reply: Reply = Box::new(move |commit| {
            let answer = match (commit, result) {
                (Ok(()), r) => r,
                (Err(e), Ok(_)) => Err(e.into_error()),
                (Err(_), Err(e)) => Err(e),
            };
            let _ = tx.send(answer);
        });
        (done, reply)
    });
    (Op { doing, body }, rx)
}

#[cfg(test)]
#[path = "writer_tests.rs"]
pub(in crate::catalog) mod tests;
