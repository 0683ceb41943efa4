//! The running node and what it measured: trigger runs, pause and resume (through the
//! [`Engine`] handle, so a face inside the node process needs no catalog lock for them), the
//! nodes sharing the catalog, groups, and stats as bounded time series.

use serde::{Deserialize, Serialize};
use serde_json::Value as Json;
use utoipa::ToSchema;

use super::view::Time;
use super::{OpError, Ops};
use crate::catalog::observe::{NodeRow, SeriesFilter};
use crate::policy::{Bound, Evidence, Level, Resource};
use crate::runtime::{Engine, EngineError, TriggerOptions};

/// The most runs one trigger request may queue.
pub const MAX_BATCH: usize = 10_000;
/// The most buckets a series may have.
pub const MAX_BUCKETS: i64 = 10_000;
/// The longest range a series may cover: 90 days.
pub const MAX_RANGE_MS: i64 = 90 * 86_400_000;

/// Refuses parameters that are not JSON objects, naming the one at fault.
pub fn check_params(params: &[Option<Json>]) -> Result<(), OpError> {
    if params.is_empty() {
        return Err(OpError::invalid("runs", "at least one run is needed"));
    }
    if params.len() > MAX_BATCH {
        return Err(OpError::invalid(
            "runs",
            format!("at most {MAX_BATCH} runs per request, got {}", params.len()),
        ));
    }
    match params
        .iter()
        .position(|p| p.as_ref().is_some_and(|p| !p.is_object()))
    {
        Some(0) if params.len() == 1 => Err(OpError::invalid("params", "expected a JSON object")),
        Some(i) => Err(OpError::invalid(
            format!("runs[{i}].params"),
            "expected a JSON object",
        )),
        None => Ok(()),
    }
}

fn engine_error(e: EngineError) -> OpError {
    match e {
        EngineError::Catalog(c) => c.into(),
        EngineError::Stopped => OpError::Unavailable("the node is stopping".into()),
        other => OpError::Unavailable(other.to_string()),
    }
}

/// Queues one run of `job` per parameter set through the running engine, in one transaction
/// with one audit row naming `actor`; returns the run ids.
pub async fn trigger(
    engine: &Engine,
    actor: &str,
    job: &str,
    params: Vec<Option<Json>>,
    options: TriggerOptions,
) -> Result<Vec<i64>, OpError> {
    check_params(&params)?;
    engine
        .trigger_with(actor, job, params, options)
        .await
        .map_err(engine_error)
}

/// A trigger's start deadline in ms as the faces take it, checked (`field` names it in an
/// error): at least 1 ms.
pub fn start_within(ms: Option<i64>, field: &str) -> Result<Option<i64>, OpError> {
    match ms {
        Some(ms) if ms < 1 => Err(OpError::invalid(
            field,
            format!("must be at least 1 ms, got {ms}"),
        )),
        ms => Ok(ms),
    }
}

/// Trigger options from a start deadline in ms, checked as [`start_within`] does.
pub fn trigger_options(ms: Option<i64>, field: &str) -> Result<TriggerOptions, OpError> {
    Ok(TriggerOptions {
        start_within: start_within(ms, field)?
            .map(|ms| std::time::Duration::from_millis(ms as u64)),
    })
}

/// Queues a child run of the running run `parent` through the running engine, in its tree,
/// with an audit row naming `actor`; returns the child's id.
pub async fn spawn(
    engine: &Engine,
    actor: &str,
    parent: i64,
    job: &str,
    params: Option<Json>,
) -> Result<i64, OpError> {
    if params.as_ref().is_some_and(|p| !p.is_object()) {
        return Err(OpError::invalid("params", "expected a JSON object"));
    }
    engine
        .spawn_as(actor, parent, job, params)
        .await
        .map_err(engine_error)
}

/// What the node is doing.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct NodeStatusView {
    /// This node's name.
    pub node: String,
    /// Its id in the catalog.
    pub node_id: i64,
    /// Paused by an operator: no schedules fire, no runs are claimed.
    pub paused: bool,
    /// Why writes are paused, while they are: the disk is critical or full, so only
    /// maintenance runs are claimed until a health sample reads it above critical again.
    pub writes_paused: Option<String>,
    /// The node's health verdict: the worst level of any resource, as the policy judges it
    /// from its own thresholds (`policy.*_strained`, `policy.*_critical`) after hysteresis
    /// (`ok` before enough samples).
    pub level: Level,
    /// Each resource with a reading: its latest value against the policy's thresholds, and
    /// its level.
    pub resources: Vec<ResourceLevelView>,
    /// What the node may use, and whose limit binds it (none before the first sample).
    pub budget: Option<BudgetView>,
    /// Each processor this node runs, and the latest health sample.
    #[schema(value_type = Object)]
    pub detail: Json,
}

impl NodeStatusView {
    /// The resources not ok with their levels ("cpu critical, memory strained"), or `None`
    /// when every resource is ok.
    pub fn pressure_levels(&self) -> Option<String> {
        let levels: Vec<String> = self
            .resources
            .iter()
            .filter(|r| r.level > Level::Ok)
            .map(|r| format!("{} {}", r.resource.as_str(), r.level.as_str()))
            .collect();
        (!levels.is_empty()).then(|| levels.join(", "))
    }

    /// The pressure on the node in words, as the policy judges it: each resource not ok with
    /// its reading against the threshold ("cpu 100% (critical: > 97%)"), or that every
    /// resource is ok.
    pub fn pressure(&self) -> String {
        let strained: Vec<&str> = self
            .resources
            .iter()
            .filter(|r| r.level > Level::Ok)
            .map(|r| r.text.as_str())
            .collect();
        if strained.is_empty() {
            "every resource is ok now: the policy activates jobs in standby, in priority order"
                .to_string()
        } else {
            format!("the node is under pressure: {}", strained.join("; "))
        }
    }
}

/// The node's budget: the tightest of the host's figures and its cgroup's limits, each with
/// the bound that applied.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct BudgetView {
    /// Bytes of memory in total of the bound that applied: the cgroup's limit when what it
    /// leaves free is less than the host's, else the host's memory.
    pub memory_bytes: u64,
    /// Bytes of memory available within it.
    pub memory_available_bytes: u64,
    /// Whose limit `memory_bytes` is.
    pub memory_source: Bound,
    /// The cores CPU use is measured against (the host's, or the cgroup's quota or cpuset).
    pub cpu_cores: f64,
    /// Whose cores they are.
    pub cpu_source: Bound,
    /// Percent of the cgroup's quota periods in which it was throttled, since the previous
    /// sample; none without a quota.
    pub cpu_throttled: Option<f64>,
    /// How many times the OOM killer acted in the node's cgroup, where the kernel says.
    pub oom_kills: Option<u64>,
}

impl BudgetView {
    /// The budget of a health report.
    pub fn of(h: &crate::runtime::health::HealthReport) -> BudgetView {
        BudgetView {
            memory_bytes: h.sample.memory_total,
            memory_available_bytes: h.sample.memory_available,
            memory_source: h.sample.memory_bound,
            cpu_cores: h.sample.cpu_cores,
            cpu_source: h.sample.cpu_bound,
            cpu_throttled: h.sample.cpu_throttled,
            oom_kills: h.cgroup_oom_kills,
        }
    }

    /// In words: "memory: the cgroup's 400 MiB (38 MiB free); cpu: the host's 2 cores".
    pub fn describe(&self) -> String {
        let mut out = format!(
            "memory: the {}'s {} ({} free); cpu: the {}'s {}",
            self.memory_source.as_str(),
            crate::policy::size(self.memory_bytes as f64),
            crate::policy::size(self.memory_available_bytes as f64),
            self.cpu_source.as_str(),
            crate::policy::cores(self.cpu_cores)
        );
        if let Some(t) = self.cpu_throttled {
            out.push_str(&format!(", throttled in {t:.1}% of its periods"));
        }
        if let Some(n) = self.oom_kills {
            out.push_str(&format!("; OOM kills in the cgroup: {n}"));
        }
        out
    }
}

/// One resource's health as the node's policy judges it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ResourceLevelView {
    /// The resource.
    pub resource: Resource,
    /// Its level after hysteresis: what the policy acts on.
    pub level: Level,
    /// The level of its latest reading alone.
    pub reading: Level,
    /// Its latest value in `unit`, rounded to a tenth.
    pub value: f64,
    /// `%` or `MiB`.
    pub unit: String,
    /// The policy's strained threshold, in `unit` (a higher value is worse for every
    /// resource but memory and disk, whose values are what is free).
    pub strained: f64,
    /// The policy's critical threshold, in `unit`.
    pub critical: f64,
    /// The budget the value is measured against, naming whose it is ("the cgroup's 400
    /// MiB", "the host's 2 cores"), for memory and CPU.
    pub budget: Option<String>,
    /// In words: "cpu 100% (critical: > 97%)".
    pub text: String,
}

impl From<&Evidence> for ResourceLevelView {
    fn from(e: &Evidence) -> Self {
        ResourceLevelView {
            resource: e.resource,
            level: e.level,
            reading: e.reading,
            value: e.value,
            unit: e.unit.clone(),
            strained: e.strained,
            critical: e.critical,
            budget: e.budget.clone(),
            text: e.describe(),
        }
    }
}

/// The node's status.
pub async fn status(engine: &Engine) -> Result<NodeStatusView, OpError> {
    let s = engine.status().await.map_err(engine_error)?;
    Ok(NodeStatusView {
        node: engine.node_name().to_string(),
        node_id: s.node_id,
        paused: s.paused,
        writes_paused: s.writes_paused,
        level: s.level,
        resources: s.levels.iter().map(ResourceLevelView::from).collect(),
        budget: s.health.as_ref().map(BudgetView::of),
        detail: serde_json::json!({ "processors": s.processors, "health": s.health }),
    })
}

/// Pauses (`true`) or resumes the node: schedules stop firing and claims stop; running jobs go
/// on. Returns whether it was paused before, and the status after; the caller audits the
/// change ([`Ops::audit_pause`]).
pub async fn set_paused(engine: &Engine, paused: bool) -> Result<(bool, NodeStatusView), OpError> {
    let before = status(engine).await?.paused;
    if paused {
        engine.pause();
    } else {
        engine.resume();
    }
    Ok((before, status(engine).await?))
}

/// Where a node sharing the catalog stands, from its row and the time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum NodeState {
    /// Its heartbeat is younger than its lease TTL.
    Alive,
    /// Its heartbeat is older than its lease TTL (killed, stopped or cut off) and no sweep
    /// fenced it yet (no other node is alive to sweep it).
    Dead,
    /// Another node's sweep fenced it after its heartbeat stopped: its runs went back to the
    /// queue, and its process, if it still runs, stops at its next heartbeat.
    Fenced,
    /// It released its name at a clean stop.
    Stopped,
}

impl NodeState {
    /// The state of a node whose row says `row`, at `now` (epoch ms).
    pub fn of(row: &NodeRow, now: i64) -> Self {
        match (row.pid, row.heartbeat_at) {
            (None, _) | (_, None) => NodeState::Stopped,
            _ if row.fenced_at.is_some() => NodeState::Fenced,
            (_, Some(at)) if now - at > row.lease_ttl => NodeState::Dead,
            _ => NodeState::Alive,
        }
    }

    /// The spelling in tables and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeState::Alive => "alive",
            NodeState::Dead => "dead",
            NodeState::Fenced => "fenced",
            NodeState::Stopped => "stopped",
        }
    }
}

/// A node sharing the catalog.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct NodeView {
    /// Its name.
    pub name: String,
    /// alive, dead, fenced or stopped.
    pub state: NodeState,
    /// Its host.
    pub host: Option<String>,
    /// Its process id while it runs.
    pub pid: Option<i64>,
    /// The jobvisor version it ran.
    pub version: Option<String>,
    /// When it started.
    pub started_at: Option<Time>,
    /// Its last heartbeat (none once it stopped).
    pub heartbeat_at: Option<Time>,
    /// How long ago its last heartbeat was, ms, when this view was made.
    pub heartbeat_age_ms: Option<i64>,
    /// The lease TTL it stated, ms.
    pub lease_ttl_ms: i64,
    /// When another node's sweep fenced it.
    pub fenced_at: Option<Time>,
    /// The node that fenced it.
    pub fenced_by: Option<String>,
    /// Its completions rejected for a stale claim token (late ones, after its runs were given
    /// to another node).
    pub stale_completions: i64,
}

/// A job group.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct GroupView {
    /// Its name.
    pub name: String,
    /// A maintenance group keeps running when the disk is critical.
    pub maintenance: bool,
    /// Free text.
    pub description: Option<String>,
    /// `status = 1`.
    pub enabled: bool,
    /// Jobs in it.
    pub jobs: usize,
}

/// A kind of stat.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct StatTypeView {
    /// e.g. `device.cpu_used`.
    pub name: String,
    /// e.g. `%`.
    pub unit: Option<String>,
    /// Its newest sample.
    pub latest: Option<Time>,
}

/// Which series to read.
#[derive(Debug, Clone)]
pub struct SeriesQuery {
    /// The stat type.
    pub stat_type: String,
    /// Start, epoch ms (inclusive).
    pub from: i64,
    /// End, epoch ms (exclusive).
    pub to: i64,
    /// Bucket width, ms.
    pub step: i64,
    /// Only this subject (an object, a processor).
    pub subject: Option<String>,
    /// Only this node's samples.
    pub node: Option<String>,
}

/// One point of a series: the samples of one bucket.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SeriesPoint {
    /// The bucket's start.
    pub at: Time,
    /// Mean.
    pub avg: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
    /// Samples in it.
    pub count: i64,
}

/// A stat as a time series.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SeriesView {
    /// The stat type.
    pub stat_type: String,
    /// Its unit.
    pub unit: Option<String>,
    /// Start.
    pub from: Time,
    /// End.
    pub to: Time,
    /// Bucket width, ms.
    pub step_ms: i64,
    /// The non-empty buckets, in time order.
    pub points: Vec<SeriesPoint>,
}

/// The node's pause states and health readings, for `/metrics`.
#[derive(Debug, Clone, Default)]
pub struct HealthGauges {
    /// Paused by an operator.
    pub paused: bool,
    /// Writes paused: the disk is critical or full, only maintenance runs are claimed.
    pub writes_paused: bool,
    /// Every number of the latest health report by name (percentages, bytes, bytes per
    /// second).
    pub readings: Vec<(String, f64)>,
    /// The node's budget and its sources (none before the first sample).
    pub budget: Option<BudgetView>,
}

/// The node's pause states and the numbers of its latest health report, for `/metrics`.
pub async fn health_readings(engine: &Engine) -> Result<HealthGauges, OpError> {
    let s = engine.status().await.map_err(engine_error)?;
    let mut readings = Vec::new();
    let budget = s.health.as_ref().map(BudgetView::of);
    if let Some(Json::Object(map)) = s
        .health
        .map(|h| serde_json::to_value(h).unwrap_or_default())
    {
        for (k, v) in map {
            if let Some(x) = v.as_f64()
                && k != "at"
            {
                readings.push((k, x));
            }
        }
    }
    Ok(HealthGauges {
        paused: s.paused,
        writes_paused: s.writes_paused.is_some(),
        readings,
        budget,
    })
}

/// The queue and activation counts, for `/metrics`.
#[derive(Debug, Clone, Default)]
pub struct QueueGauges {
    /// Queued runs.
    pub queued: i64,
    /// Runs claimed by a node, not started yet.
    pub claimed: i64,
    /// Runs started and executing.
    pub running: i64,
    /// How long the oldest due queued run has waited, ms (0 when none waits).
    pub lag_ms: i64,
    /// Jobs per activation state on the caller's node.
    pub activation: Vec<(String, i64)>,
}

impl Ops {
    /// The audit row of a pause or resume of node `node` (`node.pause` / `node.resume`, with
    /// the state before and after): written even when nothing changed, as the request was made.
    pub fn audit_pause(&self, node: &str, before: bool, paused: bool) -> Result<(), OpError> {
        let action = if paused { "node.pause" } else { "node.resume" };
        let detail = crate::catalog::audit_field(
            "node",
            node,
            "paused",
            Some(&before.to_string()),
            Some(&paused.to_string()),
        );
        let actor = self.caller.actor.clone();
        self.catalog
            .record_audit(&actor, action, node, &detail)
            .map_err(self.within(format!("recording {action}")))
    }

    /// The queue's depth and lag at `now`, and activation counts on the caller's node.
    pub fn queue_gauges(&self, now: i64) -> Result<QueueGauges, OpError> {
        let q = self
            .catalog
            .queue_state()
            .map_err(self.within("reading the queue"))?;
        let activation = self
            .catalog
            .activation_counts(&self.caller.node)
            .map_err(self.within("reading activations"))?;
        Ok(QueueGauges {
            queued: q.queued,
            claimed: q.claimed,
            running: q.running,
            lag_ms: q.oldest_due.map_or(0, |due| (now - due).max(0)),
            activation,
        })
    }

    /// Every node sharing the catalog, and where each stands at `now` (epoch ms).
    pub fn nodes(&self, now: i64) -> Result<Vec<NodeView>, OpError> {
        let rows = self.catalog.nodes().map_err(self.within("listing nodes"))?;
        Ok(rows
            .into_iter()
            .map(|n| NodeView {
                state: NodeState::of(&n, now),
                heartbeat_age_ms: n.heartbeat_at.map(|at| (now - at).max(0)),
                name: n.name,
                host: n.host,
                pid: n.pid,
                version: n.version,
                started_at: Time::opt(n.started_at),
                heartbeat_at: Time::opt(n.heartbeat_at),
                lease_ttl_ms: n.lease_ttl,
                fenced_at: Time::opt(n.fenced_at),
                fenced_by: n.fenced_by,
                stale_completions: n.stale_completions,
            })
            .collect())
    }

    /// Every job group, with how many jobs it has.
    pub fn groups(&self) -> Result<Vec<GroupView>, OpError> {
        let file = self
            .catalog
            .export()
            .map_err(self.within("listing groups"))?;
        Ok(file
            .groups
            .iter()
            .map(|(name, g)| GroupView {
                name: name.clone(),
                maintenance: g.maintenance,
                description: g.description.clone(),
                enabled: g.enabled,
                jobs: file
                    .jobs
                    .values()
                    .filter(|j| j.group.as_deref() == Some(name))
                    .count(),
            })
            .collect())
    }

    /// Every kind of stat recorded.
    pub fn stat_types(&self) -> Result<Vec<StatTypeView>, OpError> {
        let rows = self
            .catalog
            .stat_types()
            .map_err(self.within("listing stat types"))?;
        Ok(rows
            .into_iter()
            .map(|t| StatTypeView {
                name: t.name,
                unit: t.unit,
                latest: Time::opt(t.latest),
            })
            .collect())
    }

    /// A stat as a series of buckets; the range and the bucket count are bounded.
    pub fn series(&self, q: &SeriesQuery) -> Result<SeriesView, OpError> {
        if q.to <= q.from {
            return Err(OpError::invalid("to", "must be after `from`"));
        }
        if q.to - q.from > MAX_RANGE_MS {
            return Err(OpError::invalid(
                "from",
                format!(
                    "the range may cover at most {} days",
                    MAX_RANGE_MS / 86_400_000
                ),
            ));
        }
        if q.step < 1000 {
            return Err(OpError::invalid("step", "must be at least 1 s"));
        }
        let buckets = (q.to - q.from + q.step - 1) / q.step;
        if buckets > MAX_BUCKETS {
            return Err(OpError::invalid(
                "step",
                format!(
                    "{buckets} buckets; at most {MAX_BUCKETS}: choose a larger step or a \
                     shorter range"
                ),
            ));
        }
        let unit = self
            .catalog
            .stat_unit(&q.stat_type)
            .map_err(self.within("reading a stat type"))?;
        let filter = SeriesFilter {
            stat_type: &q.stat_type,
            from: q.from,
            to: q.to,
            step: q.step,
            subject: q.subject.as_deref(),
            node: q.node.as_deref(),
        };
        let rows = self
            .catalog
            .series(&filter)
            .map_err(self.within("reading a series"))?;
        Ok(SeriesView {
            stat_type: q.stat_type.clone(),
            unit,
            from: Time(q.from),
            to: Time(q.to),
            step_ms: q.step,
            points: rows
                .into_iter()
                .map(|b| SeriesPoint {
                    at: Time(q.from + b.index * q.step),
                    avg: b.avg,
                    min: b.min,
                    max: b.max,
                    count: b.count,
                })
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_must_be_objects_and_batches_bounded() {
        assert!(check_params(&[None, Some(serde_json::json!({"a": 1}))]).is_ok());
        let e = check_params(&[None, Some(serde_json::json!([1]))]).unwrap_err();
        assert_eq!(e.field(), Some("runs[1].params"));
        let e = check_params(&[Some(serde_json::json!(3))]).unwrap_err();
        assert_eq!(e.field(), Some("params"));
        assert!(check_params(&[]).is_err());
        assert!(check_params(&vec![None; MAX_BATCH + 1]).is_err());
    }
}
