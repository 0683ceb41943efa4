//! Pauses without editing the catalog's definitions: a processor, a job group or a job, on one
//! node or on every node (`catalog::pause`). Operators and admins may pause and resume; the
//! faces (CLI, API) parse the scope here.

use serde::Serialize;

use super::view::Time;
use super::{OpError, Ops};
use crate::catalog::pause::{PauseRow, PauseScope};

/// A pause as listed.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct PauseView {
    /// `processor`, `group` or `job`.
    pub scope: PauseScope,
    /// The processor's, group's or job's name.
    pub name: String,
    /// The node it holds on; `null`: every node sharing the catalog.
    pub node: Option<String>,
    /// Who paused it.
    pub paused_by: String,
    /// When.
    pub paused_at: Time,
    /// Why, as given.
    pub reason: Option<String>,
}

impl From<PauseRow> for PauseView {
    fn from(p: PauseRow) -> Self {
        PauseView {
            scope: p.scope,
            name: p.target,
            node: p.node,
            paused_by: p.paused_by,
            paused_at: Time(p.paused_at),
            reason: p.reason,
        }
    }
}

/// Where a pause holds: one node, or every node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Where {
    /// This node only.
    Node(String),
    /// Every node sharing the catalog.
    Fleet,
}

impl Where {
    fn node(&self) -> Option<&str> {
        match self {
            Where::Node(n) => Some(n),
            Where::Fleet => None,
        }
    }
}

/// The scope named `s` (`processor`, `group`, `job`), or an error naming `field`.
pub fn parse_scope(s: &str, field: &str) -> Result<PauseScope, OpError> {
    PauseScope::parse(s).ok_or_else(|| OpError::Invalid {
        field: Some(field.to_string()),
        reason: format!("`{s}` is not one of processor, group, job"),
    })
}

/// The longest reason kept.
const MAX_REASON: usize = 1000;

impl Ops {
    /// Where a pause or resume acts: every node with `fleet`, else the caller's node.
    pub fn pause_where(&self, fleet: bool) -> Where {
        if fleet {
            Where::Fleet
        } else {
            Where::Node(self.caller().node.clone())
        }
    }

    /// Pauses `name` of `scope` where `at` says, with `reason`; pausing again replaces who,
    /// when and why. Nothing new of it is claimed from the next claim on.
    pub fn pause(
        &self,
        scope: PauseScope,
        name: &str,
        at: &Where,
        reason: Option<&str>,
    ) -> Result<PauseView, OpError> {
        if reason.is_some_and(|r| r.chars().count() > MAX_REASON) {
            return Err(OpError::Invalid {
                field: Some("reason".into()),
                reason: format!("at most {MAX_REASON} characters"),
            });
        }
        let row = PauseRow {
            scope,
            target: name.to_string(),
            node: at.node().map(str::to_string),
            paused_by: self.caller().actor.clone(),
            paused_at: crate::catalog::now_ms(),
            reason: reason.map(str::to_string),
        };
        self.catalog
            .pause(row.clone())
            .map_err(self.within(format!("pausing {} `{name}`", scope.as_str())))?;
        Ok(row.into())
    }

    /// Ends the pause of `name` of `scope` where `at` says; `NotFound` when there was none.
    pub fn resume(&self, scope: PauseScope, name: &str, at: &Where) -> Result<(), OpError> {
        let actor = self.caller().actor.clone();
        let resumed = self
            .catalog
            .resume(scope, name, at.node(), &actor, crate::catalog::now_ms())
            .map_err(self.within(format!("resuming {} `{name}`", scope.as_str())))?;
        if resumed {
            Ok(())
        } else {
            Err(OpError::NotFound {
                kind: "pause",
                name: match at {
                    Where::Node(n) => format!("{} {name} on node {n}", scope.as_str()),
                    Where::Fleet => format!("{} {name} on every node", scope.as_str()),
                },
            })
        }
    }

    /// Every pause.
    pub fn pauses(&self) -> Result<Vec<PauseView>, OpError> {
        Ok(self
            .catalog
            .pauses()
            .map_err(self.within("reading the pauses"))?
            .into_iter()
            .map(PauseView::from)
            .collect())
    }
}
