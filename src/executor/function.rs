//! Function jobs: a registry of named Rust functions taking JSON and returning JSON, either
//! blocking (plain `fn`) or async.
//!
//! Invariant: blocking functions run on the blocking pool, never on an actor thread; async
//! functions run as tasks on their processor's thread and must not block it; either way a panic
//! is a failure of that run, not of the node.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::Value as Json;
use tokio::sync::watch;

use super::custom::Executor;
use super::{ExecEnv, ExecResult, job_input};
use crate::catalog::queue::ClaimedRun;

/// A job function: gets its context and input, returns a JSON result or an error message.
pub type JobFn = Arc<dyn Fn(&FnContext, Json) -> Result<Json, String> + Send + Sync>;

/// What an async job function returns.
pub type JobFuture = Pin<Box<dyn Future<Output = Result<Json, String>>>>;

/// An async job function: gets its context and input, returns a future of the result.
pub type AsyncJobFn = Arc<dyn Fn(FnContext, Json) -> JobFuture + Send + Sync>;

/// A registered function.
#[derive(Clone)]
pub enum Function {
    /// Runs on the blocking pool.
    Blocking(JobFn),
    /// Runs on the processor's thread; must not block.
    Async(AsyncJobFn),
}

/// Named functions, and the executors of custom jobs.
#[derive(Default, Clone)]
pub struct Registry {
    functions: BTreeMap<String, Function>,
    executors: BTreeMap<String, Arc<dyn Executor>>,
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
        self.functions
            .insert(name.into(), Function::Blocking(Arc::new(f)));
    }

    /// Registers the async function `f` under `name`, replacing any earlier one. Its future runs
    /// on the processor's thread: await I/O, never block (use [`Registry::register`] for that).
    pub fn register_async<F, Fut>(&mut self, name: impl Into<String>, f: F)
    where
        F: Fn(FnContext, Json) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Json, String>> + 'static,
    {
        let f: AsyncJobFn = Arc::new(move |ctx, input| Box::pin(f(ctx, input)));
        self.functions.insert(name.into(), Function::Async(f));
    }

    /// The function called `name`.
    pub fn get(&self, name: &str) -> Option<&Function> {
        self.functions.get(name)
    }

    /// Every registered name.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.functions.keys().map(String::as_str)
    }

    /// Registers the executor of custom jobs whose `payload.executor` is `name`, replacing any
    /// earlier one.
    pub fn register_executor(&mut self, name: impl Into<String>, executor: impl Executor) {
        self.executors.insert(name.into(), Arc::new(executor));
    }

    /// The executor called `name`.
    pub fn executor(&self, name: &str) -> Option<Arc<dyn Executor>> {
        self.executors.get(name).cloned()
    }

    /// Every registered executor's name.
    pub fn executor_names(&self) -> impl Iterator<Item = &str> {
        self.executors.keys().map(String::as_str)
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
    /// Node resources (catalog writer and pool, data folder), shared by every run.
    pub env: Arc<ExecEnv>,
    cancelled: Arc<AtomicBool>,
}

impl FnContext {
    /// The context of `run`, and the flag that tells it it was cancelled.
    pub(crate) fn for_run(run: &ClaimedRun, env: &Arc<ExecEnv>) -> (Self, Arc<AtomicBool>) {
        let cancelled = Arc::new(AtomicBool::new(false));
        let ctx = FnContext {
            run_id: run.run_id,
            job_name: run.job_name.to_string(),
            attempt: run.attempt,
            env: env.clone(),
            cancelled: cancelled.clone(),
        };
        (ctx, cancelled)
    }

    /// Whether the run was cancelled (timeout or shutdown): long functions should check it and
    /// return early; their result is discarded anyway.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed)
    }

    /// Queues a child run of this run: a run of `job` with `params` overlaying its payload, in
    /// this run's tree (its parent is this run, its root this run's root). This run then ends
    /// with its last descendant, its status the minimum over its tree (a failure anywhere
    /// fails it). Returns the child's id. Waits for the catalog's writer on this thread: call
    /// it from a blocking function, and [`FnContext::spawn_async`] from an async one.
    pub fn spawn(&self, job: &str, params: Option<Json>) -> Result<i64, String> {
        let now = self.env.clock.now_ms();
        self.env
            .catalog_writer
            .spawn_blocking(self.run_id, job.to_string(), params, now)
            .map_err(|e| format!("spawning a run of `{job}`: {e}"))
    }

    /// [`FnContext::spawn`] for async functions: awaits the catalog's writer.
    pub fn spawn_async(
        &self,
        job: &str,
        params: Option<Json>,
    ) -> impl Future<Output = Result<i64, String>> + 'static {
        let (writer, parent, job) = (
            self.env.catalog_writer.clone(),
            self.run_id,
            job.to_string(),
        );
        let now = self.env.clock.now_ms();
        async move {
            writer
                .spawn(parent, job.clone(), params, now, None)
                .await
                .map_err(|e| format!("spawning a run of `{job}`: {e}"))
        }
    }
}

/// Runs a function job: a blocking one on the blocking pool, an async one right here (the
/// processor runs each execution in a task of its own, which contains a panic).
pub async fn run(
    run: &ClaimedRun,
    env: &Arc<ExecEnv>,
    mut cancel: watch::Receiver<bool>,
) -> ExecResult {
    let Some(name) = run.payload.get("function").and_then(Json::as_str) else {
        return ExecResult::Err("payload.function is missing".into());
    };
    let Some(f) = env.registry.get(name) else {
        return ExecResult::Err(format!("no function `{name}` is registered on this node"));
    };
    let (ctx, cancelled) = FnContext::for_run(run, env);
    let input = job_input(run, &["function"]);
    let work: JobFuture = match f {
        Function::Async(f) => f(ctx, input),
        Function::Blocking(f) => {
            let (f, name) = (f.clone(), name.to_string());
            let task = actix_rt::task::spawn_blocking(move || f(&ctx, input));
            Box::pin(async move {
                task.await
                    .unwrap_or_else(|e| Err(format!("function `{name}` panicked: {e}")))
            })
        }
    };
    tokio::select! {
        result = work => match result {
            Ok(v) => ExecResult::Ok(v),
            Err(e) => ExecResult::Err(e),
        },
        _ = cancel.wait_for(|c| *c) => {
            // Stop waiting: an async function's future is dropped here; a blocking one cannot
            // be interrupted, so it is told through `FnContext::is_cancelled`.
            cancelled.store(true, Ordering::Relaxed);
            ExecResult::Cancelled
        }
    }
}
