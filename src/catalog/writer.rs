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

use std::path::PathBuf;
use std::sync::mpsc::{
    Receiver, RecvTimeoutError, Sender, SyncSender, TrySendError, channel, sync_channel,
};
use std::time::{Duration, Instant};

use rusqlite::Connection;
use tokio::sync::oneshot;

use crate::catalog::CatalogError;

/// An operation's reply, called once its transaction's fate is known.
type Reply = Box<dyn FnOnce(Result<(), Failed>) + Send>;
/// An operation: runs inside the batch's transaction and says how it went.
type Op = Box<dyn FnOnce(&Connection) -> (Done, Reply) + Send>;

/// How an operation went inside its transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Done {
    Ok,
    Failed,
    /// Failed because the disk is full.
    Full,
}

/// Why a transaction did not commit, for every operation in it.
#[derive(Debug, Clone)]
struct Failed {
    text: String,
    /// SQLite found the disk full.
    full: bool,
}

/// Whether SQLite found the disk full.
fn is_full(e: &rusqlite::Error) -> bool {
    e.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull)
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
}

impl Failed {
    fn of(label: &str, doing: &str, e: &rusqlite::Error) -> Self {
        Failed {
            text: format!("{label}: {doing}: {e}"),
            full: is_full(e),
        }
    }

    /// The error an operation's caller receives: a full disk stays recognisable
    /// ([`CatalogError::is_disk_full`]).
    fn into_error(self) -> CatalogError {
        if self.full {
            CatalogError::Sqlite(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_FULL),
                Some(self.text),
            ))
        } else {
            CatalogError::Refused(self.text)
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
    /// Starts the thread for the database at `path`.
    pub fn start(
        label: &str,
        path: &std::path::Path,
        settings: &crate::catalog::DbSettings,
    ) -> Result<Self, CatalogError> {
        let conn = crate::catalog::open_connection(path, settings)?;
        let (poke, poked) = sync_channel::<()>(1);
        let name = label.to_string();
        std::thread::Builder::new()
            .name(format!("checkpoint {label}"))
            .spawn(move || {
                while poked.recv().is_ok() {
                    let done = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
                        Ok((r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
                    });
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
            .map_err(|e| CatalogError::Refused(format!("cannot start a checkpoint thread: {e}")))?;
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

/// The writer of one database file: the handle of its thread. The thread ends once every
/// handle is dropped and what was queued is done.
#[derive(Clone)]
pub struct DbWriter {
    label: String,
    path: PathBuf,
    /// To the writer's thread; `None` when the thread could not start.
    ops: Option<Sender<Job>>,
    /// Told of runs queued as a side effect (shared by every clone of the handle).
    queued_hook: std::sync::Arc<std::sync::RwLock<Option<QueuedHook>>>,
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
            queued_hook: Default::default(),
        }
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

    /// Runs `f` inside the writer's next transaction and returns its result once committed.
    pub(in crate::catalog) async fn call<T, F>(&self, f: F) -> Result<T, CatalogError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, CatalogError> + Send + 'static,
    {
        let (op, rx) = operation(f);
        self.submit(Job::Op(op));
        rx.await
            .map_err(|_| CatalogError::Refused("writer stopped before answering".into()))?
    }

    /// Like [`DbWriter::call`], for blocking code (functions on the blocking pool): waits on
    /// this thread.
    pub(in crate::catalog) fn call_blocking<T, F>(&self, f: F) -> Result<T, CatalogError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, CatalogError> + Send + 'static,
    {
        let (op, rx) = operation(f);
        self.submit(Job::Op(op));
        rx.blocking_recv()
            .map_err(|_| CatalogError::Refused("writer stopped before answering".into()))?
    }

    /// Empties the WAL into the database file now (a TRUNCATE checkpoint, between
    /// transactions): at a clean shutdown, so that the file alone holds everything. Answers
    /// when done (or given up on because a reader held the log).
    pub async fn settle(&self) {
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
}

impl WriterThread {
    /// Runs transactions until every handle is gone and nothing is queued.
    fn run(mut self, queued: Receiver<Job>) {
        self.checkpointer = match Checkpointer::start(&self.label, &self.path, &self.settings) {
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
        tracing::debug!(writer = %self.label, "writer thread ends");
    }

    /// After a commit: rewinds a WAL grown past [`WAL_RESTART_BYTES`] (module docs).
    fn bound_wal(&mut self) {
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
        if !self.dirty {
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
        let done = loop {
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
        };
        let _ = conn.busy_timeout(self.settings.busy_timeout);
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
        let Some(conn) = self.conn.as_ref() else {
            // No connection: the batch's operations are dropped, and their callers told so.
            self.reopen();
            return;
        };
        let label = self.label.as_str();
        crate::metrics::writer_batch(label, batch.len());
        let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_batch(conn, batch, label)
        }));
        match done {
            Ok((commit, replies, full)) => {
                if let Some(c) = &self.checkpointer {
                    c.poke();
                }
                for reply in replies {
                    reply(commit.clone());
                }
                if full {
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

/// Runs a batch in one transaction; returns the commit result, the replies to send, and
/// whether anything failed because the disk is full.
fn run_batch(
    conn: &Connection,
    batch: Vec<Op>,
    label: &str,
) -> (Result<(), Failed>, Vec<Reply>, bool) {
    if let Err(e) = exec(conn, "BEGIN IMMEDIATE") {
        let err = Failed::of(label, "cannot begin", &e);
        let replies = batch.into_iter().map(|op| op_failed(op, conn)).collect();
        let full = err.full;
        return (Err(err), replies, full);
    }
    // Alone in its transaction, an operation needs no savepoint (which would copy every page it
    // changes into a statement journal): if it fails, the transaction rolls back.
    let alone = batch.len() == 1;
    let mut end = "COMMIT";
    let mut replies = Vec::with_capacity(batch.len());
    let mut full = false;
    for op in batch {
        if alone {
            let (done, reply) = op(conn);
            if done != Done::Ok {
                end = "ROLLBACK";
            }
            full |= done == Done::Full;
            replies.push(reply);
            continue;
        }
        // Each operation in its own savepoint, so one failing leaves the others intact.
        let _ = exec(conn, "SAVEPOINT op");
        let (done, reply) = op(conn);
        if done != Done::Ok {
            let _ = exec(conn, "ROLLBACK TO op");
        }
        full |= done == Done::Full;
        let _ = exec(conn, "RELEASE op");
        replies.push(reply);
    }
    match exec(conn, end) {
        Ok(()) => (Ok(()), replies, full),
        Err(e) => {
            let _ = exec(conn, "ROLLBACK");
            let err = Failed::of(label, "commit failed", &e);
            let full = full || err.full;
            (Err(err), replies, full)
        }
    }
}

/// Obtains an op's reply when its batch could not begin. An op hands out its reply only by
/// running, so it runs inside a savepoint that is rolled back: nothing it did is kept, and its
/// reply receives the begin error.
fn op_failed(op: Op, conn: &Connection) -> Reply {
    let _ = conn.execute_batch("SAVEPOINT dead");
    let (_, reply) = op(conn);
    let _ = conn.execute_batch("ROLLBACK TO dead; RELEASE dead");
    reply
}

type Answer<T> = oneshot::Receiver<Result<T, CatalogError>>;

fn operation<T, F>(f: F) -> (Op, Answer<T>)
where
    T: Send + 'static,
    F: FnOnce(&Connection) -> Result<T, CatalogError> + Send + 'static,
{
    let (tx, rx) = oneshot::channel();
    let op: Op = Box::new(move |conn| {
        let result = f(conn);
        let done = match &result {
            Ok(_) => Done::Ok,
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
    (op, rx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::DbSettings;

    /// A runtime to await the writer's answers on (the catalog names no actor runtime).
    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
    }

    /// A panicking operation loses its batch (its caller hears the writer did not answer); the
    /// writer's thread goes on with a new connection and later operations commit.
    #[test]
    fn a_panicking_operation_does_not_stop_the_writer() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.db");
        let settings = DbSettings::default();
        let conn = crate::catalog::open_connection(&path, &settings).unwrap();
        conn.execute_batch("CREATE TABLE t (v INTEGER)").unwrap();
        runtime().block_on(async move {
            let writer = DbWriter::new("test", path, conn, settings);
            let lost = writer
                .call(|c| -> Result<(), CatalogError> {
                    c.execute("INSERT INTO t (v) VALUES (1)", [])?;
                    panic!("boom")
                })
                .await;
            assert!(matches!(lost, Err(CatalogError::Refused(_))), "{lost:?}");
            writer
                .call(|c| Ok(c.execute("INSERT INTO t (v) VALUES (2)", [])?))
                .await
                .unwrap();
            let kept: Vec<i64> = writer
                .call(|c| {
                    let mut stmt = c.prepare("SELECT v FROM t")?;
                    let rows = stmt.query_map([], |r| r.get(0))?;
                    Ok(rows.collect::<Result<_, _>>()?)
                })
                .await
                .unwrap();
            assert_eq!(
                kept,
                [2],
                "the panicking operation's insert was rolled back"
            );
        });
    }

    /// Issue 12, defect 2: a writer that commits without pause keeps its WAL near its bound
    /// (the passive checkpoints alone let it grow without end), and the log is emptied when the
    /// writer is told to settle, and after it idles.
    #[test]
    fn the_wal_stays_bounded_under_constant_writes_and_is_emptied_when_settled_or_idle() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.db");
        let wal = crate::catalog::open::wal_path(&path);
        let settings = DbSettings::default();
        let conn = crate::catalog::open_connection(&path, &settings).unwrap();
        conn.execute_batch("CREATE TABLE t (v BLOB)").unwrap();
        let size = |p: &std::path::Path| std::fs::metadata(p).map_or(0, |m| m.len());
        runtime().block_on(async move {
            let writer = DbWriter::new("test", path.clone(), conn, settings);
            let mut peak = 0;
            // 48 MiB written (and 24 MiB deleted) in 12 KiB transactions, back to back.
            for i in 0..4096 {
                writer
                    .call(move |c| {
                        c.execute("INSERT INTO t (v) VALUES (zeroblob(12000))", [])?;
                        if i % 2 == 1 {
                            c.execute(
                                "DELETE FROM t WHERE rowid = (SELECT min(rowid) FROM t)",
                                [],
                            )?;
                        }
                        Ok(())
                    })
                    .await
                    .unwrap();
                peak = peak.max(size(&wal));
            }
            assert!(
                peak <= WAL_RESTART_BYTES + (4 << 20),
                "WAL peak {peak} bytes, bound {WAL_RESTART_BYTES}"
            );
            writer.settle().await;
            assert_eq!(size(&wal), 0, "settled: the WAL is empty");
            writer
                .call(|c| Ok(c.execute("DELETE FROM t", [])?))
                .await
                .unwrap();
            assert!(size(&wal) > 0);
            tokio::time::sleep(SETTLE_AFTER_IDLE + Duration::from_millis(500)).await;
            assert_eq!(size(&wal), 0, "idle: the WAL is empty");
        });
    }

    /// Pages a commit leaves in the WAL reach the database file through the Checkpointer's
    /// thread, while the writing connection never checkpoints by itself.
    #[test]
    fn the_checkpointer_copies_the_wal_into_the_database_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.db");
        let settings = DbSettings::default();
        let conn = crate::catalog::open_connection(&path, &settings).unwrap();
        tune_writer(&conn, "test", true);
        conn.execute_batch("CREATE TABLE t (v BLOB)").unwrap();
        let checkpointer = Checkpointer::start("test", &path, &settings).unwrap();
        let db_size = || std::fs::metadata(&path).unwrap().len();
        let before = db_size();
        conn.execute_batch("BEGIN").unwrap();
        for _ in 0..256 {
            conn.execute("INSERT INTO t (v) VALUES (zeroblob(4000))", [])
                .unwrap();
        }
        conn.execute_batch("COMMIT").unwrap();
        assert_eq!(db_size(), before, "the writer left its pages in the WAL");
        checkpointer.poke();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while db_size() < 1_000_000 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(db_size() >= 1_000_000, "checkpointed: {} bytes", db_size());
    }
}
