//! The measured history as an operator reads it: the latest value of every series, or one
//! series over time.

use serde::Serialize;

use super::view::Time;
use super::{OpError, Ops};
use crate::catalog::stats::StatPoint;

/// The most values one listing returns.
pub const MAX_VALUES: i64 = 100_000;

/// One recorded value.
#[derive(Debug, Clone, Serialize)]
pub struct StatView {
    /// When it was sampled.
    pub at: Time,
    /// The node that recorded it.
    pub node: Option<String>,
    /// `device.cpu_used`, `object.count_insert`, …
    pub stat_type: String,
    /// Its unit (`%`, `bytes`, `bytes/s`, `rows`, `ms`, `epoch ms`, `instances`, `load`).
    pub unit: Option<String>,
    /// The object or processor it is about; `None` for the device.
    pub subject: Option<String>,
    /// The value, in `unit`.
    pub value: f64,
    /// How many values the series holds (in the listing of latest values only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub values: Option<i64>,
}

impl StatView {
    fn of(p: StatPoint, values: Option<i64>) -> Self {
        StatView {
            at: Time(p.at),
            node: p.node,
            stat_type: p.stat_type,
            unit: p.unit,
            subject: p.subject,
            value: p.value,
            values,
        }
    }
}

impl Ops {
    /// The latest value of every series sampled at or after `since` (epoch ms), of the
    /// caller's node or of every node, by type and subject.
    pub fn stats_latest(&self, since: i64, all_nodes: bool) -> Result<Vec<StatView>, OpError> {
        let node = (!all_nodes).then(|| self.caller.node.clone());
        let rows = self
            .catalog
            .stats_latest(node.as_deref())
            .map_err(self.within("reading stats"))?;
        Ok(rows
            .into_iter()
            .filter(|r| r.latest.at >= since)
            .map(|r| StatView::of(r.latest, Some(r.count)))
            .collect())
    }

    /// The newest `limit` values of `stat_type` sampled at or after `since` (of one subject
    /// when given), of the caller's node or of every node, newest first.
    pub fn stats_series(
        &self,
        stat_type: &str,
        subject: Option<&str>,
        since: i64,
        limit: i64,
        all_nodes: bool,
    ) -> Result<Vec<StatView>, OpError> {
        if !(1..=MAX_VALUES).contains(&limit) {
            return Err(OpError::invalid(
                "limit",
                format!("must be 1–{MAX_VALUES}, got {limit}"),
            ));
        }
        // An unknown series is an error naming it, not an empty table; one the engine records
        // but has not yet (a new catalog) is an empty table.
        let recorded = match self.catalog.stat_unit(stat_type) {
            Ok(_) => true,
            Err(crate::catalog::CatalogError::NotFound { .. }) => false,
            Err(e) => return Err(self.within("reading stats")(e)),
        };
        if !recorded && !engine_series(stat_type) {
            return Err(OpError::NotFound {
                kind: "stat series",
                name: stat_type.to_string(),
            });
        }
        let node = (!all_nodes).then(|| self.caller.node.clone());
        let rows = self
            .catalog
            .stats_series(stat_type, subject, node.as_deref(), since, limit)
            .map_err(self.within("reading stats"))?;
        Ok(rows.into_iter().map(|p| StatView::of(p, None)).collect())
    }
}

/// The series a node records of its device, and the families it records per processor and per
/// object: known before their first value.
fn engine_series(stat_type: &str) -> bool {
    const DEVICE: [&str; 14] = [
        "device.cpu_used",
        "device.memory_available",
        "device.swap_used",
        "device.disk_available",
        "device.network_rx",
        "device.network_tx",
        "device.load_1",
        "device.psi_cpu",
        "device.psi_memory",
        "device.psi_io",
        "device.cpu_throttled",
        "node.budget_memory",
        "node.budget_cpu",
        "node.cgroup_oom_kills",
    ];
    DEVICE.contains(&stat_type)
        || ["job_processor.", "object."].iter().any(|family| {
            stat_type
                .strip_prefix(family)
                .is_some_and(|rest| !rest.is_empty())
        })
}
