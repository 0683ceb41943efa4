//! The self-tuning policy's decision log, as an operator reads it.

use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

use super::view::Time;
use super::{OpError, Ops};

/// The most decisions one listing returns.
pub const MAX_DECISIONS: i64 = 10_000;

// Deserialize: the CLI's `--url` reads it back from the API's JSON to print the local table.
/// One logged decision.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DecisionView {
    /// Its id.
    pub id: i64,
    /// The node that decided.
    pub node: String,
    /// When.
    pub at: Time,
    /// activate, deactivate, add_instance, …
    pub action: String,
    /// The job or processor concerned.
    pub subject: Option<String>,
    /// Why, in words.
    pub reason: String,
    /// The readings behind it: each resource's value, unit, thresholds and levels.
    pub evidence: Option<Json>,
    /// What kind of rule decided it: `health`, `pin`, `minimum` or `operator`.
    pub cause: String,
}

impl Ops {
    /// The newest `limit` decisions of the caller's node (or of every node), newest first.
    pub fn decisions(&self, limit: i64, all_nodes: bool) -> Result<Vec<DecisionView>, OpError> {
        if !(1..=MAX_DECISIONS).contains(&limit) {
            return Err(OpError::invalid(
                "limit",
                format!("must be 1–{MAX_DECISIONS}, got {limit}"),
            ));
        }
        let node = (!all_nodes).then(|| self.caller.node.clone());
        let rows = self
            .catalog
            .decisions(node.as_deref(), limit)
            .map_err(self.within("reading decisions"))?;
        Ok(rows
            .into_iter()
            .map(|d| DecisionView {
                id: d.id,
                node: d.node,
                at: Time(d.at),
                action: d.action,
                subject: d.subject,
                reason: d.reason,
                evidence: d.evidence,
                cause: d.cause,
            })
            .collect())
    }
}
