//! Functions as remote procedures: a call of a registered function runs it as a run of the
//! node — of an on-demand job `rpc.<function>`, made (and pinned active) on the first call —
//! and answers with the run's result once it is recorded. The run is in the node's history
//! like any other, with its timeout, retries and output.

use std::time::Duration;

use serde_json::{Map as JsonMap, Value as Json};

use super::jobs::JobPatch;
use super::{OpError, Ops};
use crate::model::{JobType, Pin, RunStatus};

/// The job a function's calls are runs of.
pub fn job_of(function: &str) -> String {
    format!("rpc.{function}")
}

/// How a call ended.
#[derive(Debug, Clone)]
pub enum CallOutcome {
    /// The run succeeded with this result.
    Succeeded(Json),
    /// The run ended otherwise: its status and error.
    Failed {
        /// Its id.
        run_id: i64,
        /// failed, timed_out, dead, cancelled, skipped.
        status: String,
        /// Why.
        error: Option<String>,
    },
}

impl Ops {
    /// Whether `function` is registered by the engine running this catalog.
    pub fn is_function(&self, function: &str) -> bool {
        self.functions
            .as_ref()
            .is_some_and(|f| f.contains(function))
    }

    /// Makes sure the job `rpc.<function>` exists (on-demand, on the `main` processor or the
    /// first one) and is pinned active on the caller's node; returns its name.
    pub fn rpc_job(&self, function: &str) -> Result<String, OpError> {
        let name = job_of(function);
        match self.job(&name) {
            Ok((view, _)) if view.activation.pinned.as_deref() == Some("active") => {
                return Ok(name);
            }
            Ok(_) => {}
            Err(OpError::NotFound { .. }) => {
                let processors = self.processors()?;
                let processor = processors
                    .iter()
                    .find(|p| p.name == "main" && p.remote.is_none())
                    .or_else(|| processors.iter().find(|p| p.remote.is_none()))
                    .ok_or_else(|| {
                        OpError::Conflict("no local processor to run functions on".into())
                    })?
                    .name
                    .clone();
                let mut payload = JsonMap::new();
                payload.insert("function".into(), Json::String(function.into()));
                let patch = JobPatch {
                    payload: Some(payload),
                    description: Some(format!("calls of `{function}` over /rpc")),
                    ..JobPatch::default()
                };
                match self.add_job(&name, JobType::Function, &processor, &patch) {
                    // A concurrent call (a batch's, another request's) added it first.
                    Ok(_) | Err(OpError::Conflict(_)) => {}
                    Err(e) => return Err(e),
                }
            }
            Err(e) => return Err(e),
        }
        self.pin_job(&name, Some(Pin::Active))?;
        Ok(name)
    }

    /// The outcome of run `id` once it has ended, `None` while it is queued or running.
    pub fn call_outcome(&self, id: i64) -> Result<Option<CallOutcome>, OpError> {
        let run = self.run(id)?;
        let status = RunStatus::parse(&run.status);
        Ok(match status {
            Some(RunStatus::Queued | RunStatus::Claimed | RunStatus::Running) | None => None,
            Some(RunStatus::Succeeded) => {
                Some(CallOutcome::Succeeded(run.result.unwrap_or(Json::Null)))
            }
            Some(_) => Some(CallOutcome::Failed {
                run_id: id,
                status: run.status,
                error: run.error,
            }),
        })
    }
}

/// How long a call waits for its run by default.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);
