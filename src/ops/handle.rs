//! The application layer for code that embeds the engine: [`OpsHandle`], the operations the
//! CLI and the API perform (add, edit, enable, disable, pin and remove jobs; cancel and retry
//! runs; pause and resume processors; and everything else [`Ops`] offers), on the catalog an
//! [`Engine`] runs, from async code.
//!
//! Like the API's, the handle has a connection to the catalog of its own (as a second process
//! would), and each operation runs on the blocking pool, never on an actor's thread; after each
//! one the engine is told to look at the catalog at once.

use super::jobs::{ActivationView, Change, JobPatch, Saved};
use super::processors::ProcessorPatch;
use super::runs::Cancelled;
use super::{Caller, OpError, Ops};
use crate::catalog::{Access, ImportReport};
use crate::model::{JobType, Pin};
use crate::runtime::Engine;

/// The operations on an engine's catalog, for embedding code. Cheap to clone; reads run side
/// by side, writes take the catalog's write lock in turn.
#[derive(Clone)]
pub struct OpsHandle {
    ops: Ops,
    /// Told after each operation through the handle, so that it sees a change at once.
    engine: Option<Engine>,
}

impl OpsHandle {
    /// A handle on the catalog `engine` runs, whose changes are audited as `actor`; warnings
    /// (a function the engine does not register) know the engine's functions.
    pub fn open(engine: &Engine, actor: &str) -> Result<Self, OpError> {
        let mut cfg = engine.config().clone();
        cfg.database.path = engine.db_path().display().to_string();
        let caller = Caller {
            actor: actor.to_string(),
            node: engine.node_name().to_string(),
        };
        let (ops, _) = Ops::open(&cfg, Access::ReadWrite, caller)?;
        let ops = ops
            .with_functions(engine.functions().iter().map(String::as_str))
            .with_executors(engine.executors().iter().map(String::as_str));
        Ok(Self {
            ops,
            engine: Some(engine.clone()),
        })
    }

    /// A handle on `ops` (an engine running on its catalog sees its changes at its next look
    /// at the catalog).
    pub fn from_ops(ops: Ops) -> Self {
        Self { ops, engine: None }
    }

    /// Runs `f` on the operations, on the blocking pool.
    pub async fn call<T, F>(&self, f: F) -> Result<T, OpError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Ops) -> Result<T, OpError> + Send + 'static,
    {
        let mut ops = self.ops.clone();
        let done = actix_rt::task::spawn_blocking(move || f(&mut ops))
            .await
            .map_err(|_| OpError::Unavailable("the operation panicked".into()))?;
        if let Some(engine) = self.engine.as_ref().filter(|_| done.is_ok()) {
            engine.catalog_changed();
        }
        done
    }

    /// Adds job `name` of `job_type` on `processor` with `patch`'s fields, validated against
    /// the whole catalog.
    pub async fn add_job(
        &self,
        name: &str,
        job_type: JobType,
        processor: &str,
        patch: JobPatch,
    ) -> Result<Saved, OpError> {
        let (name, processor) = (name.to_string(), processor.to_string());
        self.call(move |ops| ops.add_job(&name, job_type, &processor, &patch))
            .await
    }

    /// Changes the fields `patch` names of job `name` (nothing when they hold those values).
    pub async fn edit_job(&self, name: &str, patch: JobPatch) -> Result<Saved, OpError> {
        let name = name.to_string();
        self.call(move |ops| ops.edit_job(&name, &patch)).await
    }

    /// Enables (`true`) or disables job `name`.
    pub async fn set_job_enabled(&self, name: &str, enabled: bool) -> Result<Change, OpError> {
        let name = name.to_string();
        self.call(move |ops| ops.set_job_enabled(&name, enabled))
            .await
    }

    /// Pins job `name` active or inactive on the engine's node, or removes the pin (`None`).
    pub async fn pin_job(&self, name: &str, pin: Option<Pin>) -> Result<ActivationView, OpError> {
        let name = name.to_string();
        self.call(move |ops| ops.pin_job(&name, pin)).await
    }

    /// Removes job `name` (refused while runs of it execute).
    pub async fn remove_job(&self, name: &str) -> Result<(), OpError> {
        let name = name.to_string();
        self.call(move |ops| ops.remove_job(&name)).await
    }

    /// Cancels run `id`: a queued one at once, a running one by its node (a command's process
    /// group is killed).
    pub async fn cancel_run(&self, id: i64) -> Result<Cancelled, OpError> {
        self.call(move |ops| ops.cancel_run(id)).await
    }

    /// Queues a new attempt of run `id` (failed, timed out, dead, cancelled or skipped).
    pub async fn retry_run(&self, id: i64) -> Result<i64, OpError> {
        self.call(move |ops| ops.retry_run(id)).await
    }

    /// Pauses (`false`) or resumes (`true`) processor `name`: a disabled processor claims
    /// nothing on any node; its queued runs wait.
    pub async fn set_processor_enabled(
        &self,
        name: &str,
        enabled: bool,
    ) -> Result<ImportReport, OpError> {
        let name = name.to_string();
        let patch = ProcessorPatch {
            enabled: Some(enabled),
            ..ProcessorPatch::default()
        };
        self.call(move |ops| ops.put_processor(&name, &patch, true))
            .await
    }
}
