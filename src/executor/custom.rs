//! Custom jobs: kinds of work an embedding application defines. It registers an [`Executor`]
//! under a name (`EngineBuilder::executor`), and a catalog job of type `custom` whose
//! `payload.executor` names it is carried out by it — with the job's timeout, retries,
//! backoff, overlap and self-tuning like any other job.
//!
//! Invariant: an executor's future runs on its processor's thread and is dropped when the run
//! is cancelled (its timeout, an operator's cancel, shutdown); a panic fails its run only.

use std::future::Future;
use std::sync::Arc;

use serde_json::Value as Json;
use tokio::sync::watch;

use super::function::{FnContext, JobFuture};
use super::{ExecEnv, ExecResult, job_input};
use crate::catalog::queue::ClaimedRun;

/// What an executor is given for one run.
pub struct CustomRun {
    /// The run's context: ids, attempt, the node's resources, whether it was cancelled.
    pub ctx: FnContext,
    /// The job's payload as stored (with `executor`).
    pub payload: Arc<Json>,
    /// The run's own parameters, if it was triggered with some.
    pub params: Option<Json>,
    /// The payload without `executor`, overlaid with the parameters: what most executors want.
    pub input: Json,
    /// The job's timeout in ms (0: none); the engine enforces it by dropping the future.
    pub timeout_ms: i64,
}

/// A kind of job an embedding application carries out itself.
pub trait Executor: Send + Sync + 'static {
    /// Carries out one run: its result (JSON) or why it failed. It runs on its processor's
    /// thread: await, never block (spawn blocking work on the blocking pool).
    fn execute(&self, run: CustomRun) -> JobFuture;
}

/// Any `Fn(CustomRun) -> impl Future<Output = Result<Json, String>>` is an executor.
impl<F, Fut> Executor for F
where
    F: Fn(CustomRun) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Json, String>> + 'static,
{
    fn execute(&self, run: CustomRun) -> JobFuture {
        Box::pin(self(run))
    }
}

/// Runs a custom job with the executor its payload names.
pub async fn run(
    run: &ClaimedRun,
    env: &Arc<ExecEnv>,
    mut cancel: watch::Receiver<bool>,
) -> ExecResult {
    let Some(name) = run.payload.get("executor").and_then(Json::as_str) else {
        return ExecResult::Err("payload.executor is missing".into());
    };
    let Some(executor) = env.registry.executor(name) else {
        return ExecResult::Err(format!(
            "no executor `{name}` is registered on this node (an embedding application \
             registers custom executors with EngineBuilder::executor)"
        ));
    };
    let (ctx, cancelled) = FnContext::for_run(run, env);
    let work = executor.execute(CustomRun {
        ctx,
        payload: run.payload.clone(),
        params: run.params.clone(),
        input: job_input(run, &["executor"]),
        timeout_ms: run.timeout,
    });
    tokio::select! {
        result = work => match result {
            Ok(v) => ExecResult::Ok(v),
            Err(e) => ExecResult::Err(e),
        },
        _ = cancel.wait_for(|c| *c) => {
            cancelled.store(true, std::sync::atomic::Ordering::Relaxed);
            ExecResult::Cancelled
        }
    }
}
