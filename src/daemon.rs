//! `jobvisor run`: a node process — the listener, logging, the engine, signals.
//!
//! The API's address is bound before anything else happens, so a port in use (or a bad
//! address) is one clear error, with nothing started and nothing written to the catalog.
//!
//! Invariant: on SIGTERM or Ctrl-C the node stops claiming at once, lets running jobs finish
//! within `node.shutdown_grace`, returns the rest to the queue, and exits 0; a second signal
//! during that grace returns the running jobs to the queue at once.

use std::io::{IsTerminal as _, Write as _};
use std::net::TcpListener;
use std::time::Duration;

use actix_web::{HttpServer, web};
use tracing_subscriber::EnvFilter;

use crate::catalog::Access;
use crate::config::{LogFormat, NodeConfig};
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
}

impl DaemonError {
    /// The kind of failure (the CLI maps it to an exit code).
    pub fn kind(&self) -> Kind {
        match self {
            DaemonError::AddressInUse { .. } => Kind::Unavailable,
            DaemonError::Bind { .. }
            | DaemonError::LogFilter { .. }
            | DaemonError::Fatal(_)
            | DaemonError::Unprotected { .. } => Kind::Config,
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
    let system = actix_rt::System::new();
    let result = system.block_on(serve(cfg, listener));
    if matches!(result, Err(DaemonError::Fatal(_))) {
        // Dropping the System would drop the actors and close their catalog connections, and
        // the last one to close checkpoints the WAL into the file: a damaged catalog must keep
        // its bytes. The process exits right after the error is printed.
        std::mem::forget(system);
    }
    result
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

/// The application layer for the API: its own connection to the catalog the engine runs
/// (one writer and a small read pool), and on a catalog without users a first admin token.
fn api_ops(cfg: &NodeConfig, engine: &Engine) -> Result<(Ops, Option<String>), DaemonError> {
    let mut cfg = cfg.clone();
    if cfg.postgres_url().is_none() {
        cfg.database.path = engine.db_path().display().to_string();
    }
    cfg.database.read_pool_size = 2;
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

async fn serve(cfg: NodeConfig, listener: TcpListener) -> Result<(), DaemonError> {
    // Listen for signals before anything else: a SIGTERM right after start must still drain.
    let mut signals = Signals::new();
    let engine = Engine::builder().config(cfg.clone()).start()?;
    let addrs: Vec<String> = listener
        .local_addr()
        .map(|a| vec![format!("http://{a}")])
        .unwrap_or_default();
    let addr = cfg.http.bind.clone();
    let (ops, admin_token) = api_ops(&cfg, &engine)?;
    let bound = listener.local_addr().ok().map(|a| a.ip());
    let api_ops = std::sync::Arc::new(std::sync::Mutex::new(ops));
    let state = web::Data::new(crate::http::ApiState {
        ops: api_ops.clone(),
        engine: engine.clone(),
        auth: crate::http::auth::AuthState::new(bound, &cfg.http.allowed_hosts),
    });
    // The web UI's sessions live as long as the process: one store for every worker.
    let ui = web::Data::new(crate::ui::Ui::default());
    let server = HttpServer::new(move || {
        crate::http::app_with(state.clone(), crate::ui::configure(ui.clone()))
    })
    .workers(1)
    .disable_signals()
    .listen(listener)
    .map_err(|source| DaemonError::Bind { addr, source })?
    .run();
    let handle = server.handle();
    actix_rt::spawn(server);
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
    tokio::select! {
        _ = signals.next() => {}
        reason = engine.fatal() => {
            // No graceful stop: requeueing and releasing the node name would write to a
            // damaged file. The runs it left running are recovered once it is repaired. The
            // API's own handle on the file, dropped when the server stops, checkpoints nothing
            // into it either.
            api_ops.lock().unwrap_or_else(|p| p.into_inner()).keep_bytes();
            handle.stop(false).await;
            return Err(DaemonError::Fatal(reason));
        }
    }
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
