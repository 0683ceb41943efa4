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

use actix_web::{App, HttpResponse, HttpServer, web};
use tracing_subscriber::EnvFilter;

use crate::config::{LogFormat, NodeConfig};
use crate::jobconf::SeedError;
use crate::ops::Kind;
use crate::ops::error::catalog_kind;
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
}

impl DaemonError {
    /// The kind of failure (the CLI maps it to an exit code).
    pub fn kind(&self) -> Kind {
        match self {
            DaemonError::AddressInUse { .. } => Kind::Unavailable,
            DaemonError::Bind { .. } | DaemonError::LogFilter { .. } | DaemonError::Fatal(_) => {
                Kind::Config
            }
            DaemonError::Engine(e) => match e {
                EngineError::NodeHeld { .. } => Kind::Unavailable,
                EngineError::Seed(SeedError::Invalid { .. }) => Kind::Config,
                EngineError::Seed(SeedError::Read { .. }) => Kind::NoInput,
                EngineError::Catalog(c) => catalog_kind(c),
                EngineError::Stopped => Kind::Storage,
            },
        }
    }
}

/// Runs a node until a signal stops it.
pub fn run(cfg: NodeConfig) -> Result<(), DaemonError> {
    let listener = bind(&cfg.http.bind)?;
    init_logging(&cfg)?;
    actix_rt::System::new().block_on(serve(cfg, listener))
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

/// Colour only on a terminal, and never with `NO_COLOR` set (https://no-color.org).
fn use_colour() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
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
    let server = HttpServer::new(|| App::new().route("/healthz", web::get().to(healthz)))
        .workers(1)
        .disable_signals()
        .listen(listener)
        .map_err(|source| DaemonError::Bind { addr, source })?
        .run();
    let handle = server.handle();
    actix_rt::spawn(server);
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
    let _ = writeln!(out, "  api:      {}", addrs.join(", "));
    let _ = out.flush();
    drop(out);
    tokio::select! {
        _ = signals.next() => {}
        reason = engine.fatal() => {
            // No graceful stop: requeueing and releasing the node name would write to a
            // damaged file. The runs it left running are recovered once it is repaired.
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

async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({ "status": "ok" }))
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
