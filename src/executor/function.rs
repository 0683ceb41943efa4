//! Function jobs: a registry of named Rust functions taking JSON and returning JSON.
//!
//! Invariant: functions run on the blocking pool, never on an actor thread; a panic is a
//! failure of that run, not of the node.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::Value as Json;
use tokio::sync::watch;

use super::{ExecEnv, ExecResult, job_input};
use crate::catalog::queue::ClaimedRun;

/// A job function: gets its context and input, returns a JSON result or an error message.
pub type JobFn = Arc<dyn Fn(&FnContext, Json) -> Result<Json, String> + Send + Sync>;

/// Named functions.
#[derive(Default, Clone)]
pub struct Registry {
    functions: BTreeMap<String, JobFn>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `f` under `name`, replacing any earlier one.
    pub fn register<F>(&mut self, name: impl Into<String>, f: F)
    where
        F: Fn(&FnContext, Json) -> Result<Json, String> + Send + Sync + 'static,
    {
        self.functions.insert(name.into(), Arc::new(f));
    }

    /// The function called `name`.
    pub fn get(&self, name: &str) -> Option<JobFn> {
        self.functions.get(name).cloned()
    }

    /// Every registered name.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.functions.keys().map(String::as_str)
    }
}

/// What a function can see of its run and of the node.
pub struct FnContext {
    /// The run.
    pub run_id: i64,
    /// The job's name.
    pub job_name: String,
    /// 1 for the first attempt.
    pub attempt: i64,
    /// Node resources (catalog writer and pool, data folder).
    pub env: ExecEnv,
    cancelled: Arc<AtomicBool>,
}

impl FnContext {
    /// Whether the run was cancelled (timeout or shutdown): long functions should check it and
    /// return early; their result is discarded anyway.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed)
    }
}

/// Runs a function job on the blocking pool.
pub async fn run(run: &ClaimedRun, env: &ExecEnv, mut cancel: watch::Receiver<bool>) -> ExecResult {
    let Some(name) = run.payload.get("function").and_then(Json::as_str) else {
        return ExecResult::Err("payload.function is missing".into());
    };
    let Some(f) = env.registry.get(name) else {
        return ExecResult::Err(format!("no function `{name}` is registered on this node"));
    };
    let cancelled = Arc::new(AtomicBool::new(false));
    let ctx = FnContext {
        run_id: run.run_id,
        job_name: run.job_name.clone(),
        attempt: run.attempt,
        env: env.clone(),
        cancelled: cancelled.clone(),
    };
    let input = job_input(run, &["function"]);
    let task = actix_rt::task::spawn_blocking(move || f(&ctx, input));
    tokio::select! {
        joined = task => match joined {
            Ok(Ok(v)) => ExecResult::Ok(v),
            Ok(Err(e)) => ExecResult::Err(e),
            Err(e) => ExecResult::Err(format!("function `{name}` panicked: {e}")),
        },
        _ = cancel.wait_for(|c| *c) => {
            // A blocking thread cannot be interrupted: tell the function and stop waiting.
            cancelled.store(true, Ordering::Relaxed);
            ExecResult::Cancelled
        }
    }
}
