//! Activation per node on PostgreSQL — the jobs a node may run with their state on it, the
//! settling of those states, a policy step's statistics and decisions (states, stretch,
//! instances, paused writes, the decision log) — by the SQLite catalog's own functions
//! (`catalog::activation`, `verbs::settle_in`, `verbs::policy_step_in`) over a transaction.
//! One node's policy writes only its own rows (`job_activation`, `processor_activation`,
//! `decision` by `node_id`), so it never sheds another node's work.

use super::{PgCatalog, commit};
use crate::catalog::CatalogError;
use crate::catalog::activation::{self, JobActivation};
use crate::catalog::upkeep::StatSample;
use crate::catalog::verbs::{ActivationChange, DecidedStep, policy_step_in, settle_in};

impl PgCatalog {
    /// Every enabled job on an enabled processor that `node_id` may run, with its activation
    /// there (see `catalog::activation::job_activations`).
    pub fn job_activations(&self, node_id: i64) -> Result<Vec<JobActivation>, CatalogError> {
        self.call(move |client, _| {
            let mut tx = client.transaction()?;
            let jobs = activation::job_activations(&mut tx, node_id)?;
            commit(tx)?;
            Ok(jobs)
        })
    }

    /// Reads the node's job activations and writes the changes `decide` makes of them, in one
    /// transaction; `decide` runs again if the connection is lost before the commit.
    pub fn settle_activations<F>(
        &self,
        node_id: i64,
        now: i64,
        mut decide: F,
    ) -> Result<Vec<ActivationChange>, CatalogError>
    where
        F: FnMut(&[JobActivation]) -> Vec<ActivationChange> + Send + 'static,
    {
        self.call(move |client, _| {
            let mut tx = client.transaction()?;
            let changes = settle_in(&mut tx, node_id, now, &mut decide)?;
            commit(tx)?;
            Ok(changes)
        })
    }

    /// One policy step: the sample's statistics and the decisions' catalog part, together.
    pub fn record_policy_step(
        &self,
        node_id: i64,
        at: i64,
        stats: Vec<StatSample>,
        steps: Vec<DecidedStep>,
    ) -> Result<(), CatalogError> {
        self.call(move |client, _| {
            let mut tx = client.transaction()?;
            policy_step_in(&mut tx, node_id, at, &stats, &steps)?;
            commit(tx)
        })
    }

    /// Records whether the node's writes are paused.
    pub fn set_writes_paused(&self, node_id: i64, paused: bool) -> Result<(), CatalogError> {
        self.call(move |client, _| {
            let mut tx = client.transaction()?;
            activation::set_writes_paused(&mut tx, node_id, paused)?;
            commit(tx)
        })
    }
}
