//! `jobvisor run`: a node process — the listener, logging, the engine, signals.
//!
//! The API's address is bound before anything else happens, so a port in use (or a bad
//! address) is one clear error, with nothing started and nothing written to the catalog.
//!
//! With `http.tls_cert` and `http.tls_key` the listener speaks HTTPS only; the pair is read
//! before anything else (a bad file is one error naming it, exit 78) and reread on SIGHUP (a
//! bad new pair is logged and the old one kept). A listener beyond loopback without TLS is
//! warned about at start: passwords and tokens would cross the network in clear.
//!
//! Invariant: on SIGTERM or Ctrl-C the node stops claiming at once, lets running jobs finish
//! within `node.shutdown_grace`, returns the rest to the queue, and exits 0; a second signal
//! during that grace returns the running jobs to the queue at once.

use std::io::{IsTerminal as _, Write as _};
use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use actix_web::{HttpServer, web};
use tracing_subscriber::EnvFilter;

use crate::catalog::Access;
use crate::config::{LogFormat, NodeConfig};
use crate::http::deadline::BodyTimeout;
use crate::http::tls::{Certificates, TlsError};
use crate::jobconf::SeedError;
use crate::ops::error::catalog_kind;
use crate::ops::{Caller, Kind, OpError, Ops};
use crate::runtime::{Engine, EngineError};

/// Why a node did not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The API's address is taken.
    #[error(
        "http.bind {addr}: {source} (another process listens there: stop it, or choose another \
         address with --bind or http.bind; port 0 picks a free one)"
    )]
    AddressInUse {
        /// The address.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    /// The API's address cannot be bound for another reason.
    #[error("http.bind {addr}: {source}")]
    Bind {
        /// The address.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    /// A logging filter is invalid.
    #[error("{origin}: invalid log filter `{filter}`: {reason}")]
    LogFilter {
        /// `log.level` or `JOBVISOR_LOG`.
        origin: &'static str,
        /// The filter.
        filter: String,
        /// Why.
        reason: String,
    },
    /// The engine did not start.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The engine had to stop at once (its catalog was found damaged).
    #[error("{0}")]
    Fatal(String),
    /// The API would listen beyond this host with no account to authenticate anyone.
    #[error(
        "http.bind {addr}: not a loopback address, and the catalog has no user: create one \
         first (jobvisor users add NAME --role admin, then jobvisor tokens create NAME), or \
         bind 127.0.0.1"
    )]
    Unprotected {
        /// The address.
        addr: String,
    },
    /// The API's catalog connection could not be opened.
    #[error(transparent)]
    Ops(#[from] OpError),
    /// The TLS certificate or key cannot be used.
    #[error(transparent)]
    Tls(#[from] TlsError),
}

impl DaemonError {
    /// The kind of failure (the CLI maps it to an exit code).
    pub fn kind(&self) -> Kind {
        match self {
            DaemonError::AddressInUse { .. } => Kind::Unavailable,
            DaemonError::Bind { .. }
            | DaemonError::LogFilter { .. }
            | DaemonError::Fatal(_)
            | DaemonError::Unprotected { .. }
            | DaemonError::Tls(_) => Kind::Config,
            DaemonError::Ops(e) => e.kind(),
            DaemonError::Engine(e) => match e {
                EngineError::NodeHeld { .. } => Kind::Unavailable,
                EngineError::Seed(SeedError::Invalid { .. }) | EngineError::Config(_) => {
                    Kind::Config
                }
                EngineError::Seed(SeedError::Read { .. }) => Kind::NoInput,
                EngineError::Catalog(c) => catalog_kind(c),
                EngineError::Stopped => Kind::Storage,
                EngineError::Timeout { .. } => Kind::Unavailable,
            },
        }
    }
}

/// Runs a node until a signal stops it.
pub fn run(cfg: NodeConfig) -> Result<(), DaemonError> {
    let tls = match cfg.http.tls() {
        Some((cert, key)) => {
            let certs = Certificates::load(cert, key)?;
            let config = certs.server_config()?;
            Some(Tls { certs, config })
        }
        None => None,
    };
    let listener = bind(&cfg.http.bind)?;
    let loopback = listener
        .local_addr()
        .map(|a| a.ip().is_loopback())
        .unwrap_or(false);
    if !loopback && !has_users(&cfg) {
        return Err(DaemonError::Unprotected {
            addr: cfg.http.bind.clone(),
        });
    }
    init_logging(&cfg)?;
    if !loopback && tls.is_none() {
        tracing::warn!(
            "http.bind {} is not a loopback address and TLS is off: passwords and tokens \
             cross the network in clear (set http.tls_cert and http.tls_key, or bind \
             127.0.0.1 behind a TLS proxy)",
            cfg.http.bind
        );
    }
    let system = actix_rt::System::new();
    let result = system.block_on(serve(cfg, listener, tls));
    if matches!(result, Err(DaemonError::Fatal(_))) {
        // Dropping the System would drop the actors and close their catalog connections, and
        // the last one to close checkpoints the WAL into the file: a damaged catalog must keep
        // its bytes. The process exits right after the error is printed.
        std::mem::forget(system);
    }
    result
}

/// The listener's TLS: the pair it presents (reloaded on SIGHUP) and its rustls configuration.
struct Tls {
    certs: Arc<Certificates>,
    config: rustls::ServerConfig,
}

fn bind(addr: &str) -> Result<TcpListener, DaemonError> {
    TcpListener::bind(addr).map_err(|source| {
        let addr = addr.to_string();
        if source.kind() == std::io::ErrorKind::AddrInUse {
            DaemonError::AddressInUse { addr, source }
        } else {
            DaemonError::Bind { addr, source }
        }
    })
}

/// Whether the catalog (if there is one yet) has a user; asked before anything is written.
fn has_users(cfg: &NodeConfig) -> bool {
    let caller = Caller {
        actor: "node".into(),
        node: cfg.node_name(),
    };
    Ops::open(cfg, Access::ReadOnly, caller)
        .and_then(|(ops, _)| ops.has_users())
        .unwrap_or(false)
}

/// Read connections of the API's catalog handle: requests read side by side up to this many
/// (each connection idle for 30 s closes, so a quiet node keeps few).
const API_READERS: u32 = 8;

/// The application layer for the API: its own connection to the catalog the engine runs
/// (one writer and a read pool), and on a catalog without users a first admin token.
fn api_ops(cfg: &NodeConfig, engine: &Engine) -> Result<(Ops, Option<String>), DaemonError> {
    let mut cfg = cfg.clone();
    if cfg.postgres_url().is_none() {
        cfg.database.path = engine.db_path().display().to_string();
    }
    cfg.database.read_pool_size = API_READERS;
    let caller = Caller {
        actor: "api".into(),
        node: engine.node_name().to_string(),
    };
    let (ops, _) = Ops::open(&cfg, Access::ReadWrite, caller)?;
    let mut ops = ops.with_functions(crate::runtime::builtins::registry().names());
    let token = ops.bootstrap_admin()?.map(|t| t.token);
    ops.set_actor("api");
    Ok((ops, token))
}

/// A start that failed once the engine ran: the engine's actors stop (its runs back to the
/// queue, its node name released) while the runtime still runs them, so the error is the
/// process's one word — dropping running actors with the runtime made them panic.
async fn stop_after_failed_start(engine: &Engine, error: DaemonError) -> DaemonError {
    if let Err(e) = engine.shutdown(Duration::ZERO).await {
        tracing::warn!("stopping after a failed start: {e}");
    }
    error
}

/// Colour only on a terminal, and never with `NO_COLOR` set (https://no-color.org).
fn use_colour() -> bool {
    colour(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    )
}

/// Whether to colour log lines written to a terminal (`terminal`) given `NO_COLOR`'s value: a
/// set, non-empty `NO_COLOR` turns colour off (an empty one does not, as no-color.org says).
fn colour(terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}

fn init_logging(cfg: &NodeConfig) -> Result<(), DaemonError> {
    let filter = match std::env::var("JOBVISOR_LOG") {
        Ok(f) => EnvFilter::try_new(&f).map_err(|e| DaemonError::LogFilter {
            origin: "JOBVISOR_LOG",
            filter: f.clone(),
            reason: e.to_string(),
        })?,
        Err(_) => EnvFilter::try_new(&cfg.log.level).map_err(|e| DaemonError::LogFilter {
            origin: "log.level",
            filter: cfg.log.level.clone(),
            reason: e.to_string(),
        })?,
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(use_colour())
        .with_writer(std::io::stderr);
    let _ = match cfg.log.format {
        LogFormat::Human => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
    Ok(())
}

async fn serve(
    cfg: NodeConfig,
    listener: TcpListener,
    tls: Option<Tls>,
) -> Result<(), DaemonError> {
    // Listen for signals before anything else: a SIGTERM right after start must still drain,
    // and a SIGHUP must reload, not kill, once the node has said it is up.
    let mut signals = Signals::new();
    crate::metrics::set_job_labels(cfg.http.metrics_job_labels);
    let hangup = tls.as_ref().map(|_| hangup_signal());
    let notifier = crate::runtime::notify::Notifier::from_env();
    let engine = Engine::builder()
        .config(cfg.clone())
        .notifier(notifier.clone())
        .start()?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    let addrs: Vec<String> = listener
        .local_addr()
        .map(|a| vec![format!("{scheme}://{a}")])
        .unwrap_or_default();
    let addr = cfg.http.bind.clone();
    let (ops, admin_token) = match api_ops(&cfg, &engine) {
        Ok(opened) => opened,
        Err(e) => return Err(stop_after_failed_start(&engine, e).await),
    };
    let bound = listener.local_addr().ok().map(|a| a.ip());
    let state = web::Data::new(crate::http::ApiState {
        ops: ops.clone(),
        engine: engine.clone(),
        auth: crate::http::auth::AuthState::new(bound, &cfg.http.allowed_hosts)
            .max_failures(cfg.http.max_failed_logins),
    });
    // The web UI's sessions live as long as the process: one store for every worker.
    let ui = web::Data::new(crate::ui::Ui::default());
    let body_timeout = web::Data::new(BodyTimeout(Duration::from_millis(cfg.http.body_timeout)));
    let server = HttpServer::new(move || {
        crate::http::app_with(state.clone(), crate::ui::configure(ui.clone()))
            .app_data(body_timeout.clone())
    })
    .workers(1)
    .disable_signals();
    let (server, certs) = match tls {
        Some(Tls { certs, config }) => (server.listen_rustls_0_23(listener, config), Some(certs)),
        None => (server.listen(listener), None),
    };
    let server = match server {
        Ok(server) => server.run(),
        Err(source) => {
            let e = DaemonError::Bind { addr, source };
            return Err(stop_after_failed_start(&engine, e).await);
        }
    };
    let handle = server.handle();
    actix_rt::spawn(server);
    if let (Some(certs), Some(Some(hangup))) = (certs, hangup) {
        actix_rt::spawn(reload_on_hangup(certs, hangup));
    }
    actix_rt::spawn(release_freed_memory_now_and_then());
    // The banner is for whoever started the node; if they went away, the node goes on.
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "jobvisor node `{}` (id {}) running",
        engine.node_name(),
        engine.node_id()
    );
    let _ = writeln!(
        out,
        "  database: {}{}",
        engine.db_path().display(),
        if engine.seeded() {
            " (new, seeded)"
        } else {
            ""
        }
    );
    let admin_token_shown = admin_token.is_some();
    if let Some(token) = admin_token {
        // Shown once: only its hash is stored. On stdout, for whoever started the node; the
        // log (stderr) never carries it.
        let _ = writeln!(
            out,
            "  admin token (shown once; user `admin`, create others with `jobvisor tokens \
             create`):\n  token:    {token}"
        );
    }
    let _ = writeln!(out, "  api:      {}", addrs.join(", "));
    let ui: Vec<String> = addrs.iter().map(|a| format!("{a}/ui/")).collect();
    // A first start's `admin` has a token and no password: say how to give it one.
    let sign_in = if admin_token_shown {
        "sign in with a user's password; `admin` has none yet: set one with \
         `jobvisor users passwd admin` (reads it from stdin), or add a user with \
         `jobvisor users add NAME --role admin`"
    } else {
        "sign in with a user's password; `jobvisor users passwd NAME` sets one"
    };
    let _ = writeln!(out, "  web ui:   {} ({sign_in})", ui.join(", "));
    let _ = out.flush();
    drop(out);
    // The listener is bound and served, the engine started: a manager may route to it now.
    notifier.ready(&format!("serving {}", addrs.join(", ")));
    tokio::select! {
        _ = signals.next() => {}
        reason = engine.fatal() => {
            // No graceful stop: requeueing and releasing the node name would write to a
            // damaged file. The runs it left running are recovered once it is repaired. The
            // API's own handle on the file, dropped when the server stops, checkpoints nothing
            // into it either.
            ops.keep_bytes();
            handle.stop(false).await;
            return Err(DaemonError::Fatal(reason));
        }
    }
    notifier.stopping();
    let grace = Duration::from_millis(cfg.node.shutdown_grace);
    tracing::info!(
        grace_ms = cfg.node.shutdown_grace,
        "stopping: no new claims; waiting for running jobs (a second signal stops at once)"
    );
    let graceful = engine.shutdown(grace);
    let result = tokio::select! {
        r = graceful => r,
        _ = signals.next() => {
            tracing::warn!("second signal: returning running jobs to the queue now");
            engine.shutdown(Duration::ZERO).await
        }
    };
    if let Err(e) = result {
        tracing::error!("shutdown: {e}");
    }
    handle.stop(true).await;
    tracing::info!("stopped");
    Ok(())
}

/// Hands the memory the allocator holds freed back to the system: once the API's worker has
/// started (building its routes and the first requests free more than an idle node keeps: 1.4
/// MB of a 23 MB RSS), then every [`TRIM_EVERY`] (a burst of requests leaves the same).
async fn release_freed_memory_now_and_then() {
    actix_rt::time::sleep(Duration::from_secs(2)).await;
    let mut every = actix_rt::time::interval(TRIM_EVERY);
    loop {
        every.tick().await;
        crate::runtime::release_freed_memory();
    }
}

/// How often a running node returns freed memory to the system (a trim of a few-MB heap takes
/// well under a millisecond).
const TRIM_EVERY: Duration = Duration::from_secs(30);

/// SIGHUP, registered (a node that serves TLS reloads its pair on it rather than dying).
fn hangup_signal() -> Option<tokio::signal::unix::Signal> {
    use tokio::signal::unix::{SignalKind, signal};
    signal(SignalKind::hangup())
        .inspect_err(|e| tracing::warn!("SIGHUP cannot be caught ({e}): no TLS reload"))
        .ok()
}

/// Rereads the TLS certificate and key on every SIGHUP; a pair that fails to load is logged
/// and the one in use kept. (Two small files read on the actix thread: microseconds.)
async fn reload_on_hangup(certs: Arc<Certificates>, mut hangup: tokio::signal::unix::Signal) {
    while hangup.recv().await.is_some() {
        match certs.reload() {
            Ok(()) => tracing::info!("SIGHUP: TLS certificate and key reloaded"),
            Err(e) => tracing::error!("SIGHUP: {e}; still serving the previous certificate"),
        }
    }
}

/// SIGTERM and Ctrl-C, registered when created.
struct Signals {
    term: Option<tokio::signal::unix::Signal>,
    int: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    fn new() -> Self {
        use tokio::signal::unix::{SignalKind, signal};
        Self {
            term: signal(SignalKind::terminate()).ok(),
            int: signal(SignalKind::interrupt()).ok(),
        }
    }

    /// The next SIGTERM or SIGINT.
    async fn next(&mut self) {
        let term = async {
            match &mut self.term {
                Some(s) => s.recv().await,
                None => std::future::pending().await,
            }
        };
        let int = async {
            match &mut self.int {
                Some(s) => s.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = term => {}
            _ = int => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::colour;

    #[test]
    fn logs_are_coloured_only_on_a_terminal_without_no_color() {
        assert!(colour(true, None));
        assert!(
            colour(true, Some("".as_ref())),
            "an empty NO_COLOR does not count"
        );
        assert!(!colour(true, Some("1".as_ref())));
        assert!(
            !colour(false, None),
            "a file or a pipe gets no colour codes"
        );
    }
}
