//! Executors: how a claimed run is carried out, per job type — function, command, sql, url,
//! custom (an embedder's executor) — and, on a remote processor, as a call to its node (`rpc`).
//!
//! Invariant: an executor never writes the catalog itself — a function may spawn child runs,
//! through the CatalogWriter's `spawn` verb — and never outlives its cancel signal by more than
//! its own cleanup (a command's process group is killed and reaped; a function is told to stop
//! and abandoned).

pub mod activity;
pub mod command;
pub mod custom;
pub mod function;
pub mod rpc;
pub mod sql;
pub mod url;

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{Map as JsonMap, Value as Json};
use tokio::sync::watch;

pub use custom::{CustomRun, Executor};
pub use function::{AsyncJobFn, FnContext, Function, JobFn, JobFuture, Registry};

use crate::catalog::queue::ClaimedRun;
use crate::catalog::reader::Reader;
use crate::catalog::writer::DbWriter;
use crate::model::JobType;

/// How an execution ended, before the processor turns it into a recorded outcome.
#[derive(Debug, Clone, PartialEq)]
pub enum ExecResult {
    /// Success, with a JSON result.
    Ok(Json),
    /// Failure, with the error.
    Err(String),
    /// Stopped by its cancel signal (timeout or shutdown).
    Cancelled,
}

pub use crate::config::ExecLimits;

/// Raised when the node must stop at once (the catalog is damaged): whoever runs the node
/// (the daemon) waits on it and exits without writing another byte it can avoid.
#[derive(Debug)]
pub struct FatalAlarm {
    tx: watch::Sender<Option<String>>,
}

impl Default for FatalAlarm {
    fn default() -> Self {
        Self {
            tx: watch::channel(None).0,
        }
    }
}

impl FatalAlarm {
    /// Raises the alarm with the reason, logged once: the first reason wins, later ones are
    /// logged at debug.
    pub fn raise(&self, reason: impl Into<String>) {
        let reason = reason.into();
        self.tx.send_if_modified(|r| {
            if r.is_none() {
                tracing::error!("stopping the node: {reason}");
                *r = Some(reason);
                true
            } else {
                tracing::debug!("already stopping; also: {reason}");
                false
            }
        });
    }

    /// Waits until the alarm is raised; returns its reason.
    pub async fn raised(&self) -> String {
        let mut rx = self.tx.subscribe();
        loop {
            if let Some(reason) = rx.borrow_and_update().clone() {
                return reason;
            }
            if rx.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }
}

/// A source of the current time, injectable for tests.
pub trait Clock: Send + Sync {
    /// Epoch milliseconds now.
    fn now_ms(&self) -> i64;
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        crate::catalog::now_ms()
    }
}

/// What executors share: the function registry, the writers, the catalog read pool, limits.
#[derive(Clone)]
pub struct ExecEnv {
    /// Registered functions.
    pub registry: Arc<Registry>,
    /// The engine's clock: every wall-clock reading of the runtime comes from it.
    pub clock: Arc<dyn Clock>,
    /// The catalog's writer (the CatalogWriter).
    pub catalog_writer: DbWriter,
    /// The catalog's reads (its read pool).
    pub catalog: Reader,
    /// The node's data folder (backups go under it).
    pub data_dir: PathBuf,
    /// One writer per data object with its own database file, started on first use.
    pub object_writers: Arc<crate::catalog::objects::ObjectWriters>,
    /// This node.
    pub node_id: i64,
    /// Limits.
    pub limits: ExecLimits,
    /// Stops the node (a damaged catalog).
    pub fatal: Arc<FatalAlarm>,
    /// Rows inserted into each data object since the statistics last looked.
    pub activity: Arc<activity::ObjectActivity>,
    /// Set in the copy a remote processor executes with: its `processor_id`, whose runs are
    /// calls to the remote node (`rpc`). `None` for local processors.
    pub remote: Option<i64>,
}

/// The input a job gets whose payload a non-admin may write (a local function, a custom
/// executor): its payload without the executor's own keys, overlaid with the run's parameters.
/// A job only admins define takes [`fixed_input`] instead.
pub fn job_input(run: &ClaimedRun, own_keys: &[&str]) -> Json {
    let mut input: JsonMap<String, Json> = run
        .payload
        .as_object()
        .map(|m| {
            m.iter()
                .filter(|(k, _)| !own_keys.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default();
    if let Some(Json::Object(params)) = &run.params {
        for (k, v) in params {
            input.insert(k.clone(), v.clone());
        }
    }
    Json::Object(input)
}

pub use crate::jobconf::OPEN_PARAMS;

/// The input of a job whose payload an admin fixed — an rpc job, any job on a remote processor
/// (a call to another node with the credentials its processor stores), a url job's body: the
/// payload without the executor's own keys and [`OPEN_PARAMS`], with of the run's parameters
/// only the fields `payload.open_params` lists (a listed field's payload value is a default the
/// run may replace). A parameter naming any other field fails the run, naming the field: a run
/// never overrides what the payload fixes, whoever triggered it (an operator may trigger an
/// admin's job, and a workflow passes its own parameters and `inputs` to its steps).
pub fn fixed_input(run: &ClaimedRun, own_keys: &[&str]) -> Result<Json, String> {
    let params = run.params.clone().unwrap_or(Json::Null);
    if let Some((field, reason)) =
        crate::jobconf::run_params_problem(&run.payload, own_keys, &params)
    {
        return Err(format!("{field}: {reason}"));
    }
    let mut input: JsonMap<String, Json> = run
        .payload
        .as_object()
        .map(|m| {
            m.iter()
                .filter(|(k, _)| !own_keys.contains(&k.as_str()) && k.as_str() != OPEN_PARAMS)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default();
    if let Json::Object(params) = params {
        input.extend(params);
    }
    Ok(Json::Object(input))
}

/// Executes `run` with the executor of its job type; `cancel` turning true asks it to stop.
/// Returns the result and the captured output, if any.
pub async fn execute(
    run: &ClaimedRun,
    env: &Arc<ExecEnv>,
    cancel: watch::Receiver<bool>,
) -> (ExecResult, Option<String>) {
    if let Some(processor_id) = env.remote {
        return (rpc::run(run, env, processor_id, cancel).await, None);
    }
    match run.job_type {
        JobType::Function => (function::run(run, env, cancel).await, None),
        JobType::Command => command::run(run, &env.limits, cancel).await,
        JobType::Custom => (custom::run(run, env, cancel).await, None),
        JobType::Sql => (sql::run(run, env).await, None),
        JobType::Url => (url::run(run, env, cancel).await, None),
        JobType::Rpc => (
            ExecResult::Err(
                "an rpc job runs on a remote processor (one with ip_address); this one is local"
                    .into(),
            ),
            None,
        ),
        // A workflow's run starts in the transaction that queues it (`catalog::tree`): it is
        // never claimed, unless an older build queued it.
        JobType::Workflow => (
            ExecResult::Err(
                "a workflow's run starts when it is queued; this one was queued by an older \
                 build: trigger the workflow again"
                    .into(),
            ),
            None,
        ),
    }
}
