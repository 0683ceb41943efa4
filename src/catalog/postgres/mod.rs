//! The catalog on PostgreSQL, for a fleet whose nodes run on several hosts: its own schema
//! (`migrations/postgres/`) and SQL behind the same verbs and types as the SQLite catalog's
//! queue and node verbs (`NewRun`, `Claim`, `Completion`, `Recorded`, `NodeLease`, `Swept`).
//! Claims take runs with `FOR UPDATE SKIP LOCKED`, so nodes claiming at once never wait on
//! each other's runs; claim tokens come from a sequence; a job's row is locked while its runs
//! are counted, so `forbid` and `max_overlap` hold across nodes, and a written object's row
//! likewise. Definitions changed and runs queued are announced with NOTIFY
//! (`jobvisor_catalog`, `jobvisor_queue`; [`PgCatalog::listen`]).
//!
//! Invariant: the synchronous `postgres::Client` lives on a thread of its own (`pg <label>`),
//! never on an actix or tokio thread — calling or dropping it there aborts the process
//! (reference/ecosystem.md, trap 3). Callers hand it closures ([`PgCatalog::call`], which
//! blocks: from async code, only inside `spawn_blocking`). When the server goes away the thread reconnects
//! with backoff and runs the closure again: a transaction that failed before its commit left
//! nothing; one whose commit went unanswered is undone or found again by its claim tokens
//! (see `queue`), so a run is never lost or recorded twice across a reconnect.
//!
//! Job trees and workflows are `catalog::tree`'s, run over a transaction here (a workflow's
//! run started by its trigger or slot, a step advanced by its completion, a child spawned, a
//! dead node's runs ended in their trees): since several nodes change one tree at once, every
//! change to a tree locks the tree's root first (in id order when it touches several), then
//! the runs below it, so the last two ends of a tree's runs are counted one after the other
//! and no two nodes wait for each other in a circle.
//!
//! The operator's verbs (definitions, accounts, runs, browsing) are `Catalog`'s, written once
//! over `catalog::sql` for both backends; what is here is the runtime's side and the SQL that
//! only PostgreSQL needs.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use std::cell::RefCell;
use std::collections::HashMap;

use postgres::types::ToSql;
use postgres::{Client, GenericClient, NoTls, Row, Statement};

use super::CatalogError;

pub mod activation;
pub mod definitions;
mod loads;
pub mod migrate;
pub mod node;
pub mod queue;
pub mod slots;
mod sql;
#[cfg(test)]
mod tree_tests;
mod upkeep;

pub(crate) use sql::rows_once;

/// The first wait before reconnecting; each failed attempt doubles it up to [`BACKOFF_MAX`].
const BACKOFF_START: Duration = Duration::from_millis(50);
/// The longest wait between two connection attempts.
const BACKOFF_MAX: Duration = Duration::from_secs(2);
/// Attempts at one closure whose transaction the server aborted for a conflict (deadlock,
/// serialization) before the error is returned.
const CONFLICT_RETRIES: u32 = 8;

/// Set on each connection as it opens. The catalog's statements are short, and a plan whose
/// estimated cost passes `jit_above_cost` (a generic plan of the claim's candidates, bounded by
/// a `LIMIT` it cannot see, estimates the whole queue) was compiled at each execution: 25-60 ms
/// for a query that runs in 0.3 ms.
const SESSION: &str = "SET jit = off";

/// How the connection thread reaches the server.
#[derive(Debug, Clone)]
pub struct PgSettings {
    /// `postgres://user@host:port/database`.
    pub url: String,
    /// How long a call waits for the server to come back before it fails with
    /// [`CatalogError::Unavailable`]; meanwhile it is retried, not lost.
    pub reconnect_for: Duration,
    /// Who connects, as `pg_stat_activity` shows it (`application_name`, each connection's
    /// label added): `jobvisor <node>` for a node, so that an operator — and a test — can tell
    /// a node's sessions apart. A URL that names one keeps its own.
    pub application: String,
}

impl PgSettings {
    /// Settings for `url` with the default reconnect window (60 s).
    pub fn new(url: impl Into<String>) -> Self {
        PgSettings {
            url: url.into(),
            reconnect_for: Duration::from_secs(60),
            application: "jobvisor".into(),
        }
    }
}

/// What the thread did to a call's transactions: how a closure learns whether it runs again,
/// and whether an earlier attempt may have committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    /// The first attempt.
    First,
    /// Again after the connection broke while an earlier attempt's commit was unanswered: it
    /// may have committed. Sticky: the attempts after it are told so too, even when the one
    /// in between failed before its commit (whatever it undid was undone with it).
    AfterUnansweredCommit,
    /// Again after the previous attempt failed before its commit (nothing of it was kept).
    AfterAbort,
}

type Work = Box<dyn FnOnce(&mut Conn) + Send>;

/// The connection as closures see it: the client, and how this attempt came about.
pub struct Conn {
    client: Option<Client>,
    settings: PgSettings,
    /// The connection's part in its process (`catalog`, `ends`, `watch`, …).
    label: String,
    /// Connections made so far (more than 1: it reconnected, which `listen` reports).
    pub connects: u64,
}

impl Attempt {
    /// The next attempt's state after this one ended as `ended` says.
    fn then(self, ended: Attempt) -> Attempt {
        if self == Attempt::AfterUnansweredCommit {
            self
        } else {
            ended
        }
    }
}

impl Conn {
    /// The connection's settings: the URL's, and who connects.
    fn config(&self) -> Result<postgres::Config, CatalogError> {
        let mut config: postgres::Config = self.settings.url.parse()?;
        if config.get_application_name().is_none() {
            config.application_name(&format!("{} {}", self.settings.application, self.label));
        }
        Ok(config)
    }

    /// The client, connecting (with backoff, for up to `reconnect_for`) if there is none.
    fn client(&mut self) -> Result<&mut Client, CatalogError> {
        if self.client.as_ref().is_some_and(Client::is_closed) {
            self.drop_client();
        }
        if self.client.is_none() {
            let deadline = Instant::now() + self.settings.reconnect_for;
            let mut wait = BACKOFF_START;
            let client = loop {
                let opened = self.config().and_then(|config| {
                    let mut c = config.connect(NoTls)?;
                    c.batch_execute(SESSION)?;
                    Ok(c)
                });
                match opened {
                    Ok(c) => break c,
                    Err(e) if Instant::now() + wait > deadline => {
                        return Err(CatalogError::Unavailable(format!(
                            "postgres: cannot reach {} for {:?}: {e}",
                            redact(&self.settings.url),
                            self.settings.reconnect_for
                        )));
                    }
                    Err(e) => {
                        tracing::warn!(url = %redact(&self.settings.url), "postgres: cannot connect ({e}); again in {wait:?}");
                        thread::sleep(wait);
                        wait = (wait * 2).min(BACKOFF_MAX);
                    }
                }
            };
            self.connects += 1;
            self.client = Some(client);
        }
        Ok(self.client.as_mut().expect("connected above"))
    }

    fn drop_client(&mut self) {
        // Dropped here, on the connection thread: never on an async one. Its prepared
        // statements go with it.
        self.client = None;
        STATEMENTS.with(|s| s.borrow_mut().clear());
    }
}

/// Whether `e` says the connection is gone (as opposed to an error of the statement): closed,
/// an IO error, or the server shutting down.
fn connection_lost(e: &CatalogError) -> bool {
    let CatalogError::Postgres(p) = e else {
        return false;
    };
    if p.is_closed() {
        return true;
    }
    if let Some(d) = p.as_db_error() {
        // admin_shutdown, crash_shutdown, cannot_connect_now: the server is going away.
        return matches!(d.code().code(), "57P01" | "57P02" | "57P03");
    }
    std::error::Error::source(p).is_some_and(|s| s.is::<std::io::Error>())
}

fn is_conflict_code(code: &str) -> bool {
    // serialization_failure, deadlock_detected
    matches!(code, "40001" | "40P01")
}

/// Whether the server aborted the transaction for a conflict with another: run it again.
fn conflict(e: &CatalogError) -> bool {
    matches!(e, CatalogError::Postgres(p) if p.code().is_some_and(|c| is_conflict_code(c.code())))
}

/// A URL with its password, if any, replaced by `***` (for logs and errors).
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    match rest.split_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

/// A handle on the PostgreSQL catalog: one connection, on its own thread, which runs the
/// calls in the order they came. Cloning shares the thread; it stops when the last handle is
/// dropped.
#[derive(Clone)]
pub struct PgCatalog {
    tx: mpsc::Sender<Work>,
    url: String,
    settings: PgSettings,
}

impl std::fmt::Debug for PgCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgCatalog")
            .field("url", &redact(&self.url))
            .finish()
    }
}

impl PgCatalog {
    /// Starts the connection thread for `settings`, connects, and brings the schema up to
    /// date (`migrate`: several nodes starting at once apply each migration once).
    pub fn open(settings: PgSettings, label: &str) -> Result<Self, CatalogError> {
        let catalog = Self::start(settings, label)?;
        catalog.call(|c, _| migrate::migrate(c))?;
        Ok(catalog)
    }

    /// Opens the catalog for `access`, as [`Catalog::open_as`](crate::catalog::Catalog::open_as)
    /// opens a file: only `Create` makes a catalog in a database without one, a read-only open
    /// writes nothing and needs this build's schema, a writable one migrates.
    pub fn open_as(
        settings: PgSettings,
        label: &str,
        access: crate::catalog::Access,
    ) -> Result<Self, CatalogError> {
        use crate::catalog::Access;
        use migrate::Schema;
        let catalog = Self::start(settings, label)?;
        let found = catalog.call(|c, _| migrate::schema(c))?;
        let refused = |reason: &str| CatalogError::NotACatalog {
            path: catalog.url().into(),
            reason: reason.to_string(),
        };
        match (found, access) {
            (Schema::Missing, Access::Create) => {}
            (Schema::Missing, _) => {
                return Err(CatalogError::NoCatalog {
                    path: catalog.url().into(),
                });
            }
            (Schema::Behind, Access::ReadOnly) => {
                return Err(refused(
                    "a catalog of an older jobvisor: a command that writes (or a node)                      migrates it first",
                ));
            }
            (Schema::Current, Access::ReadOnly) => return Ok(catalog),
            _ => {}
        }
        catalog.call(|c, _| migrate::migrate(c))?;
        Ok(catalog)
    }

    /// A second connection thread to the same server (`pg <label>`), its schema already
    /// checked by this one: calls on it run beside this one's, not behind them.
    pub fn another(&self, label: &str) -> Result<Self, CatalogError> {
        Self::start(self.settings.clone(), label)
    }

    fn start(settings: PgSettings, label: &str) -> Result<Self, CatalogError> {
        let (tx, rx) = mpsc::channel::<Work>();
        let url = settings.url.clone();
        let kept = settings.clone();
        let label = label.to_string();
        thread::Builder::new()
            .name(format!("pg {label}"))
            .spawn(move || {
                let mut conn = Conn {
                    client: None,
                    settings,
                    label,
                    connects: 0,
                };
                for work in rx {
                    work(&mut conn);
                }
            })
            .map_err(|e| CatalogError::Unavailable(format!("cannot start a thread: {e}")))?;
        Ok(PgCatalog {
            tx,
            url,
            settings: kept,
        })
    }

    /// How its connection reaches the server (for a connection of another thread's own).
    pub(crate) fn settings(&self) -> PgSettings {
        self.settings.clone()
    }

    /// The server's URL, its password redacted.
    pub fn url(&self) -> String {
        redact(&self.url)
    }

    /// Runs `f` on the connection thread in a transaction of its own making, and waits for
    /// its answer. Blocks: never call it on an actix or tokio thread.
    /// `f` runs again when the connection broke (after reconnecting) or the server aborted
    /// the transaction for a conflict; its [`Attempt`] says which.
    pub fn call<T, F>(&self, f: F) -> Result<T, CatalogError>
    where
        T: Send + 'static,
        F: FnMut(&mut Client, Attempt) -> Result<T, CatalogError> + Send + 'static,
    {
        let (tx, rx) = mpsc::channel();
        self.submit(f, move |r| {
            let _ = tx.send(r);
        })?;
        rx.recv()
            .map_err(|_| CatalogError::Unavailable("the postgres thread stopped".into()))?
    }

    /// Runs `f` in a transaction of its own (one snapshot, one commit); again, from the
    /// start, after a lost connection or a conflict.
    pub(crate) fn transact<T: Send + 'static>(
        &self,
        f: impl Fn(&mut postgres::Transaction<'_>) -> Result<T, CatalogError> + Send + 'static,
    ) -> Result<T, CatalogError> {
        self.call(move |client, _| {
            let mut tx = client.transaction()?;
            let out = f(&mut tx)?;
            commit(tx)?;
            Ok(out)
        })
    }

    /// Runs `f`, which calls this catalog's blocking verbs, on the blocking pool and awaits
    /// it: how async code (the runtime's actors) reaches the connection thread without
    /// blocking its own.
    pub async fn off_thread<T, F>(&self, f: F) -> Result<T, CatalogError>
    where
        T: Send + 'static,
        F: FnOnce(&PgCatalog) -> Result<T, CatalogError> + Send + 'static,
    {
        let pg = self.clone();
        tokio::task::spawn_blocking(move || f(&pg))
            .await
            .map_err(|e| CatalogError::Unavailable(format!("a postgres call did not end: {e}")))?
    }

    fn submit<T, F>(
        &self,
        mut f: F,
        answer: impl FnOnce(Result<T, CatalogError>) + Send + 'static,
    ) -> Result<(), CatalogError>
    where
        T: Send + 'static,
        F: FnMut(&mut Client, Attempt) -> Result<T, CatalogError> + Send + 'static,
    {
        let work: Work = Box::new(move |conn: &mut Conn| {
            let deadline = Instant::now() + conn.settings.reconnect_for;
            let mut attempt = Attempt::First;
            let mut conflicts = 0;
            let result = loop {
                let client = match conn.client() {
                    Ok(c) => c,
                    Err(e) => break Err(e),
                };
                COMMIT_UNANSWERED.with(|c| c.set(false));
                match f(client, attempt) {
                    Ok(v) => break Ok(v),
                    Err(e) if connection_lost(&e) && Instant::now() < deadline => {
                        tracing::warn!("postgres: connection lost ({e}); reconnecting");
                        attempt = attempt.then(commit_state());
                        conn.drop_client();
                    }
                    Err(e) if conflict(&e) && conflicts < CONFLICT_RETRIES => {
                        conflicts += 1;
                        attempt = attempt.then(Attempt::AfterAbort);
                    }
                    Err(e) => break Err(e),
                }
            };
            answer(result);
        });
        self.tx
            .send(work)
            .map_err(|_| CatalogError::Unavailable("the postgres thread stopped".into()))
    }
}

thread_local! {
    /// Set by [`commit`] when the connection broke while a commit was unanswered, read (and
    /// cleared) by the retry loop of the same thread.
    static COMMIT_UNANSWERED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

thread_local! {
    /// The statements prepared on this thread's connection, by their text (cleared when the
    /// connection goes): a statement of the hot path is parsed once, not at every call.
    static STATEMENTS: RefCell<HashMap<&'static str, Statement>> = RefCell::new(HashMap::new());
}

/// The statement for `sql`, prepared on `c` at its first use on this thread's connection.
fn prepared(c: &mut impl GenericClient, sql: &'static str) -> Result<Statement, CatalogError> {
    if let Some(s) = STATEMENTS.with(|s| s.borrow().get(sql).cloned()) {
        return Ok(s);
    }
    let s = c.prepare(sql)?;
    STATEMENTS.with(|m| m.borrow_mut().insert(sql, s.clone()));
    Ok(s)
}

type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// Runs the prepared `sql`: its rows.
pub(crate) fn query(
    c: &mut impl GenericClient,
    sql: &'static str,
    params: Params<'_>,
) -> Result<Vec<Row>, CatalogError> {
    let s = prepared(c, sql)?;
    Ok(c.query(&s, params)?)
}

/// Runs the prepared `sql`: its one row.
pub(crate) fn query_one(
    c: &mut impl GenericClient,
    sql: &'static str,
    params: Params<'_>,
) -> Result<Row, CatalogError> {
    let s = prepared(c, sql)?;
    Ok(c.query_one(&s, params)?)
}

/// Runs the prepared `sql`: its row, if any.
pub(crate) fn query_opt(
    c: &mut impl GenericClient,
    sql: &'static str,
    params: Params<'_>,
) -> Result<Option<Row>, CatalogError> {
    let s = prepared(c, sql)?;
    Ok(c.query_opt(&s, params)?)
}

/// Runs the prepared `sql`: the rows it changed.
pub(crate) fn execute(
    c: &mut impl GenericClient,
    sql: &'static str,
    params: Params<'_>,
) -> Result<u64, CatalogError> {
    let s = prepared(c, sql)?;
    Ok(c.execute(&s, params)?)
}

/// How the attempt that just lost its connection ended, for the next one.
fn commit_state() -> Attempt {
    if COMMIT_UNANSWERED.with(|c| c.replace(false)) {
        Attempt::AfterUnansweredCommit
    } else {
        Attempt::AfterAbort
    }
}

/// Commits `tx`; when the connection breaks before the server answers, remembers that the
/// commit may have happened (the next attempt is [`Attempt::AfterUnansweredCommit`]).
pub fn commit(tx: postgres::Transaction<'_>) -> Result<(), CatalogError> {
    tx.commit().map_err(|e| {
        let e = CatalogError::Postgres(e);
        if connection_lost(&e) {
            COMMIT_UNANSWERED.with(|c| c.set(true));
        }
        e
    })
}

/// Waits for NOTIFY on the catalog's channels on a connection of its own (thread
/// `pg listen <label>`), calling `on_notice(channel, payload)` for each; calls
/// `on_notice("listening", "")` once the LISTEN is in place, and reconnects with backoff and
/// calls `on_notice("reconnected", "")` after a reconnect (notices may have been missed
/// meanwhile: the caller re-reads). Stops when `on_notice` returns false.
pub fn listen(
    settings: PgSettings,
    label: &str,
    mut on_notice: impl FnMut(&str, &str) -> bool + Send + 'static,
) -> Result<thread::JoinHandle<()>, CatalogError> {
    let label = label.to_string();
    thread::Builder::new()
        .name(format!("pg listen {label}"))
        .spawn(move || {
            let mut conn = Conn {
                client: None,
                settings,
                label: format!("listen {label}"),
                connects: 0,
            };
            loop {
                let client = match conn.client() {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::warn!("postgres listen: {e}");
                        thread::sleep(BACKOFF_MAX);
                        continue;
                    }
                };
                if let Err(e) =
                    client.batch_execute("LISTEN jobvisor_catalog; LISTEN jobvisor_queue")
                {
                    tracing::warn!("postgres listen: {e}");
                    conn.drop_client();
                    continue;
                }
                // The caller reads what it watches after this, not before: a change committed
                // while the LISTEN was not yet in place is not missed.
                let event = if conn.connects > 1 {
                    "reconnected"
                } else {
                    "listening"
                };
                if !on_notice(event, "") {
                    return;
                }
                let client = conn.client.as_mut().expect("connected above");
                loop {
                    use postgres::fallible_iterator::FallibleIterator;
                    let next = client
                        .notifications()
                        .timeout_iter(Duration::from_secs(1))
                        .next();
                    match next {
                        Ok(Some(n)) => {
                            if !on_notice(n.channel(), n.payload()) {
                                return;
                            }
                        }
                        Ok(None) if !client.is_closed() => {
                            if !on_notice("idle", "") {
                                return;
                            }
                        }
                        Ok(None) => break,
                        Err(e) => {
                            tracing::warn!("postgres listen: connection lost ({e})");
                            break;
                        }
                    }
                }
                conn.drop_client();
            }
        })
        .map_err(|e| CatalogError::Unavailable(format!("cannot start a thread: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migration_list_matches_the_folder() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations/postgres");
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".sql"))
            .collect();
        files.sort();
        let listed: Vec<&str> = migrate::MIGRATIONS.iter().map(|m| m.name).collect();
        assert_eq!(files, listed);
        for (i, m) in migrate::MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version, i as i64 + 1);
            assert!(m.name.starts_with(&format!("{:04}_", m.version)));
        }
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact("postgres://jv:secret@db:5432/fleet"),
            "postgres://jv:***@db:5432/fleet"
        );
        assert_eq!(redact("postgres://jv@db/fleet"), "postgres://jv@db/fleet");
        assert_eq!(redact("not a url"), "not a url");
    }
}
