//! Operations on processors: list, add, edit (a field patch), remove.

use serde::Serialize;

use super::view::Time;
use super::{OpError, Ops};
use crate::catalog::ImportReport;
use crate::jobconf::{ProcessorDef, Section};

pub use crate::jobconf::secret::REDACTED;

/// A processor as listed.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ProcessorView {
    /// Name.
    pub name: String,
    /// Concurrent executions.
    pub instances: i64,
    /// Upper bound for the self-tuning policy.
    pub max_instances: Option<i64>,
    /// Runs claimed beyond the free instances; `null`: sized from measured durations.
    pub prefetch: Option<i64>,
    /// The nodes that may run it; empty: any node sharing the catalog.
    pub nodes: Vec<String>,
    /// `host:port` of the remote node; `None` for a local processor.
    pub remote: Option<String>,
    /// User on the remote node.
    pub rpc_user: Option<String>,
    /// `***` when a credential is stored (never the credential itself); a reference
    /// `env:NAME` or `file:PATH` as written.
    pub rpc_password: Option<String>,
    /// `status = 1`.
    pub enabled: bool,
    /// Jobs assigned to it.
    pub jobs: i64,
    /// The instances each node's policy runs (a node that never changed them runs
    /// `instances`).
    pub running: Vec<NodeInstancesView>,
}

/// How many instances of a processor one node runs, as its policy last decided.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct NodeInstancesView {
    /// The node.
    pub node: String,
    /// Instances it runs.
    pub instances: i64,
    /// Why, as the decision said.
    pub reason: Option<String>,
    /// When.
    pub changed_at: Option<Time>,
}

/// Changes to a processor; `None` leaves a field as it is, `Some(None)` clears it.
#[derive(Debug, Clone, Default)]
pub struct ProcessorPatch {
    /// Concurrent executions.
    pub instances: Option<i64>,
    /// Upper bound for self-tuning.
    pub max_instances: Option<Option<i64>>,
    /// Runs claimed beyond the free instances (`None`: sized from measured durations).
    pub prefetch: Option<Option<i64>>,
    /// The nodes that may run it (empty: any node).
    pub nodes: Option<Vec<String>>,
    /// The remote node's address.
    pub ip_address: Option<Option<String>>,
    /// The remote node's API port.
    pub port: Option<Option<i64>>,
    /// User on the remote node.
    pub rpc_user: Option<Option<String>>,
    /// The credential on the remote node (a token, a password, or `env:NAME` / `file:PATH`).
    pub rpc_password: Option<Option<String>>,
    /// Enabled.
    pub enabled: Option<bool>,
}

impl ProcessorPatch {
    /// Applies the patch.
    pub fn apply(&self, p: &mut ProcessorDef) {
        fn set<T: Clone>(field: &mut T, value: &Option<T>) {
            if let Some(v) = value {
                *field = v.clone();
            }
        }
        set(&mut p.instances, &self.instances);
        set(&mut p.max_instances, &self.max_instances);
        set(&mut p.prefetch, &self.prefetch);
        if let Some(nodes) = &self.nodes {
            // Stored sorted, as a file is read: a patch and an import of the same list agree.
            let mut nodes = nodes.clone();
            nodes.sort();
            p.nodes = nodes;
        }
        set(&mut p.ip_address, &self.ip_address);
        set(&mut p.port, &self.port);
        set(&mut p.rpc_user, &self.rpc_user);
        set(&mut p.rpc_password, &self.rpc_password);
        set(&mut p.enabled, &self.enabled);
    }
}

impl Ops {
    /// Every processor, by name.
    pub fn processors(&self) -> Result<Vec<ProcessorView>, OpError> {
        let defs = self
            .catalog
            .processor_defs()
            .map_err(self.within("listing processors"))?;
        let rows = self
            .catalog
            .processors()
            .map_err(self.within("listing processors"))?;
        Ok(rows
            .into_iter()
            .map(|r| {
                let def = defs.get(&r.name).cloned().unwrap_or_default();
                ProcessorView {
                    remote: def.address(),
                    rpc_password: def.redacted().rpc_password,
                    rpc_user: def.rpc_user,
                    prefetch: def.prefetch,
                    nodes: def.nodes,
                    name: r.name,
                    instances: r.instances,
                    max_instances: r.max_instances,
                    enabled: r.enabled,
                    jobs: r.jobs,
                    running: r
                        .running
                        .into_iter()
                        .map(|n| NodeInstancesView {
                            node: n.node,
                            instances: n.instances,
                            reason: n.reason,
                            changed_at: n.changed_at.map(Time),
                        })
                        .collect(),
                }
            })
            .collect())
    }

    /// Adds a processor (`exists = false`) or changes one (`exists = true`), validated against
    /// the whole catalog.
    pub fn put_processor(
        &self,
        name: &str,
        patch: &ProcessorPatch,
        exists: bool,
    ) -> Result<ImportReport, OpError> {
        self.put_entry(
            Section::Processor,
            name,
            exists,
            |f| &f.processors,
            |f| &mut f.processors,
            {
                let patch = patch.clone();
                move |def| patch.apply(def)
            },
        )
    }

    /// Whether processor `name` is remote (a job on it calls another node); `false` for a
    /// processor that does not exist (its job is refused for that).
    pub fn is_remote_processor(&self, name: &str) -> Result<bool, OpError> {
        let rows = self
            .catalog
            .processors()
            .map_err(self.within("reading processors"))?;
        Ok(rows.iter().any(|p| p.name == name && p.remote.is_some()))
    }

    /// Removes a processor; refused while jobs are assigned to it.
    pub fn remove_processor(&self, name: &str) -> Result<(), OpError> {
        let actor = self.caller.actor.clone();
        let doing = format!("removing processor `{name}`");
        self.catalog
            .remove_processor(name, &actor)
            .map_err(self.within(doing))
    }
}
