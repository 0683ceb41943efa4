//! `jobvisor run`: a node process — logging, the engine, the HTTP listener, signals.
//!
//! Invariant: on SIGTERM or Ctrl-C the node stops claiming at once, lets running jobs finish
//! within `node.shutdown_grace`, returns the rest to the queue, and exits 0.

use std::io::Write as _;
use std::time::Duration;

use actix_web::{App, HttpResponse, HttpServer, web};
use tracing_subscriber::EnvFilter;

use crate::cli::{
    Cli, EXIT_CONFIG, EXIT_FAILURE, EXIT_HELD, EXIT_NO_INPUT, Failure, RunArgs, load_config_with,
};
use crate::config::{LogFormat, NodeConfig};
use crate::jobconf::SeedError;
use crate::runtime::{Engine, EngineError};

/// Runs a node until a signal stops it.
pub fn run(cli: &Cli, args: &RunArgs) -> Result<(), Failure> {
    let cfg = load_config_with(cli, args)?;
    init_logging(&cfg);
    std::fs::create_dir_all(&cfg.node.data_dir).map_err(|e| {
        Failure::new(
            EXIT_FAILURE,
            format!("{}: cannot create: {e}", cfg.node.data_dir),
        )
    })?;
    actix_rt::System::new().block_on(serve(cfg))
}

fn init_logging(cfg: &NodeConfig) {
    let filter =
        EnvFilter::try_from_env("JOBVISOR_LOG").unwrap_or_else(|_| EnvFilter::new(&cfg.log.level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match cfg.log.format {
        LogFormat::Human => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

fn engine_failure(e: EngineError) -> Failure {
    let code = match &e {
        EngineError::NodeHeld { .. } => EXIT_HELD,
        EngineError::Seed(SeedError::Invalid { .. }) => EXIT_CONFIG,
        EngineError::Seed(SeedError::Read { .. }) => EXIT_NO_INPUT,
        _ => EXIT_FAILURE,
    };
    Failure::new(code, e.to_string())
}

async fn serve(cfg: NodeConfig) -> Result<(), Failure> {
    // Listen for signals before anything else: a SIGTERM right after start must still drain.
    let signals = Signals::new();
    let engine = Engine::builder()
        .config(cfg.clone())
        .start()
        .map_err(engine_failure)?;
    let server = HttpServer::new(|| App::new().route("/healthz", web::get().to(healthz)))
        .workers(1)
        .disable_signals()
        .bind(&cfg.http.bind)
        .map_err(|e| Failure::new(EXIT_FAILURE, format!("http.bind {}: {e}", cfg.http.bind)))?;
    let addrs: Vec<String> = server
        .addrs()
        .iter()
        .map(|a| format!("http://{a}"))
        .collect();
    let server = server.run();
    let handle = server.handle();
    actix_rt::spawn(server);
    println!(
        "jobvisor node `{}` (id {}) running",
        engine.node_name(),
        engine.node_id()
    );
    println!(
        "  database: {}{}",
        engine.db_path().display(),
        if engine.seeded() {
            " (new, seeded)"
        } else {
            ""
        }
    );
    println!("  api:      {}", addrs.join(", "));
    let _ = std::io::stdout().flush();
    signals.wait().await;
    let grace = Duration::from_millis(cfg.node.shutdown_grace);
    tracing::info!(
        grace_ms = cfg.node.shutdown_grace,
        "stopping: no new claims; waiting for running jobs"
    );
    if let Err(e) = engine.shutdown(grace).await {
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

    async fn wait(mut self) {
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
