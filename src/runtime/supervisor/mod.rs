//! Supervisor is an actor. It owns the node's children: the Scheduler, one Processor per active
//! `job_processor` row (local or remote), the Health actor (and, through the Engine, the Writers); it
//! restarts children that stop (actix `Supervisor`; a restarted processor waits with exponential
//! backoff before it claims, a restarted writer reopens its connection), keeps the
//! node's heartbeat, receives health reports, and drains everything at shutdown.
//!
//! Invariant: a processor exists for every enabled processor row this node may run (one that
//! names no nodes, or names this one; a remote one's executions are calls to its node) and for
//! no other; at shutdown, processors stop claiming before
//! anything else stops, and the node name is released last.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use serde::Serialize;

use super::events::{Event, EventBus};
use super::health::HealthReport;
use super::processor::{
    self, CancelRuns, Drain, GetStatus, Processor, ProcessorConfig, ProcessorStatus, SetInstances,
    SetPaused, SetPrefetch, SetWritesPaused, SuspectGate, TakeUtilization, Utilization,
};
use super::scheduler::{PauseSchedules, Reload, Scheduler, SetProcessors};
use super::tenure::Tenure;
use super::tuning::{self, StatsBook};
use crate::catalog::CatalogError;
use crate::catalog::activation::{DecisionContext, JobActivation};
use crate::catalog::loads::LocalProcessor;
use crate::catalog::reader::Reader;
use crate::catalog::upkeep::StatSample;
use crate::catalog::verbs::{ActivationChange, DecidedStep};
use crate::catalog::writer::DbWriter;
use crate::executor::ExecEnv;
use crate::model::ActivationState;
use crate::policy::{Action, Decision, JobView, Policy, PolicyConfig, ProcessorView};

mod fleet;

/// How long a node that lost its name waits for its processors to offer the completions of
/// runs that finished (each rejected by its stale claim token, and counted) before it stops.
const FENCED_GRACE: Duration = Duration::from_secs(1);

/// Most decision batches kept while their write fails (the disk is full); older ones go.
const MAX_UNRECORDED: usize = 64;

/// Pause (true) or resume (false) the whole node: schedules and claims.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Pause(pub bool);

/// Drain and stop; answers when every run has finished or been returned to the queue.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Shutdown(pub Duration);

/// A catalog write failed at this instant (epoch ms) because the disk is full (from the
/// catalog's writer thread).
#[derive(Message)]
#[rtype(result = "()")]
pub struct WriteFull(pub i64);

/// The node's state.
#[derive(Message)]
#[rtype(result = "EngineStatus")]
pub struct GetEngineStatus;

/// What the engine is doing.
#[derive(Debug, Clone, Serialize, MessageResponse)]
pub struct EngineStatus {
    /// This node's id in the catalog.
    pub node_id: i64,
    /// Paused by the operator or the host.
    pub paused: bool,
    /// Each processor.
    pub processors: Vec<ProcessorStatus>,
    /// The latest health sample.
    pub health: Option<HealthReport>,
    /// The worst level of any resource, as the policy judges it (after hysteresis).
    pub level: crate::policy::Level,
    /// Each resource with a reading: its latest value against the policy's thresholds, and
    /// its level (after hysteresis, and of the reading alone).
    pub levels: Vec<crate::policy::Evidence>,
    /// Why writes are paused (the disk is critical or full: only maintenance runs are
    /// claimed), while they are.
    pub writes_paused: Option<String>,
}

/// The Supervisor actor.
pub struct Supervisor {
    node_id: i64,
    /// This process's hold on the node name, renewed by each heartbeat.
    tenure: Arc<Tenure>,
    /// Runs whose node died while they were claimed execute one at a time on this node.
    suspects: Arc<SuspectGate>,
    reader: Reader,
    writer: DbWriter,
    env: ExecEnv,
    scheduler: Addr<Scheduler>,
    processors: HashMap<i64, (LocalProcessor, Addr<Processor>)>,
    lease_ms: i64,
    last_health: Option<HealthReport>,
    paused: bool,
    stopping: bool,
    policy: Policy,
    /// Instances per processor as the policy set them (starts at the catalog's `instances`).
    instances: HashMap<i64, u32>,
    /// The initial activation is written; the policy may decide.
    activated: bool,
    evaluating: bool,
    writes_paused: bool,
    /// Why writes are paused, while they are (the pause decision's reason).
    paused_because: Option<String>,
    /// Decisions whose catalog write failed (the disk was full), with their context: written
    /// before the next ones, so the log and the catalog catch up once space returns.
    unrecorded: Vec<DecidedStep>,
    /// The statistics recorded with each sample, and their cadence.
    stats: StatsBook,
    /// The embedding application's subscribers and waiters.
    events: Arc<EventBus>,
    /// This node's name (in each run's trace span).
    node_name: Arc<str>,
    /// The service manager's watchdog, pinged from this actor's timer.
    notifier: crate::runtime::notify::Notifier,
}

impl Supervisor {
    /// A supervisor for the node `tenure` holds; `scheduler` is already running.
    pub fn new(
        tenure: Arc<Tenure>,
        reader: Reader,
        writer: DbWriter,
        env: ExecEnv,
        scheduler: Addr<Scheduler>,
        policy: PolicyConfig,
    ) -> Self {
        Self {
            node_id: tenure.lease().node_id,
            lease_ms: tenure.cadence().ttl_ms(),
            tenure,
            suspects: Arc::new(SuspectGate::default()),
            reader,
            writer,
            env,
            scheduler,
            processors: HashMap::new(),
            last_health: None,
            paused: false,
            stopping: false,
            policy: Policy::new(policy),
            instances: HashMap::new(),
            activated: false,
            evaluating: false,
            writes_paused: false,
            paused_because: None,
            unrecorded: Vec::new(),
            stats: StatsBook::default(),
            events: Arc::default(),
            node_name: Arc::from(""),
            notifier: crate::runtime::notify::Notifier::default(),
        }
    }

    /// Pings the service manager's watchdog from this actor's timer (when it asks for pings).
    pub fn with_watchdog(mut self, notifier: crate::runtime::notify::Notifier) -> Self {
        self.notifier = notifier;
        self
    }

    /// Tells `events` this node's decisions, and gives it to the processors (their runs'
    /// starts and ends); `node_name` goes into each run's trace span.
    pub fn with_events(mut self, events: Arc<EventBus>, node_name: &str) -> Self {
        self.events = events;
        self.node_name = Arc::from(node_name);
        self
    }

    /// Epoch ms now, by the engine's clock.
    fn now(&self) -> i64 {
        self.env.clock.now_ms()
    }

    /// Tells the embedding application the logged decisions among activation `changes`
    /// (written at `at`).
    fn publish_changes(&self, changes: &[ActivationChange], at: i64) {
        if !self.events.wanted() {
            return;
        }
        let told: Vec<Event> = changes
            .iter()
            .filter_map(|c| {
                let cause = c.decision?;
                let action = match c.state {
                    ActivationState::Active | ActivationState::Paused => "activate",
                    ActivationState::Standby => "deactivate",
                };
                Some(Event::Decision {
                    action: action.into(),
                    subject: Some(c.name.clone()),
                    reason: c.reason.clone(),
                    cause: cause.into(),
                    at,
                })
            })
            .collect();
        self.events.publish(told);
    }

    /// Start-up as the spec says: only the minimum is active; the policy adds the rest while
    /// the node is healthy.
    fn activate_minimum(&mut self, ctx: &mut Context<Self>) {
        let (writer, node, now) = (self.writer.clone(), self.node_id, self.now());
        let policy = Policy::new(self.policy.config().clone());
        let write = async move {
            let changes = writer
                .settle_activations(node, now, move |jobs| tuning::start_up(&policy, jobs))
                .await?;
            writer.set_writes_paused(node, false).await?;
            Ok::<_, CatalogError>(changes)
        };
        ctx.spawn(
            write
                .into_actor(self)
                .map(move |result, act, _| match result {
                    Ok(changes) => {
                        act.publish_changes(&changes, now);
                        let n = changes
                            .iter()
                            .filter(|c| c.state == ActivationState::Active)
                            .count();
                        tracing::info!(active = n, "start-up minimum activated");
                        act.activated = true;
                        // Plan the active jobs now rather than at the next change check.
                        act.scheduler.do_send(Reload);
                    }
                    Err(e) => super::log_write_error("writing the start-up activation", &e),
                }),
        );
    }

    /// Whether a sample can go through the policy now: after the start-up activation, one
    /// at a time, not while stopping or paused by the operator.
    fn can_evaluate(&self) -> bool {
        self.activated && !self.evaluating && !self.stopping && !self.paused
    }

    /// One policy step: the sample in, decisions out, carried out and logged together with
    /// the sample's statistics.
    fn evaluate(&mut self, report: HealthReport, ctx: &mut Context<Self>) {
        self.evaluating = true;
        let asks: Vec<_> = self
            .processors
            .iter()
            .map(|(id, (row, addr))| (*id, row.clone(), addr.send(TakeUtilization)))
            .collect();
        let (reader, node) = (self.reader.clone(), self.node_id);
        let gather = async move {
            let mut utils = Vec::new();
            for (id, row, ask) in asks {
                if let Ok(u) = ask.await {
                    utils.push((id, row, u));
                }
            }
            let jobs = actix_rt::task::spawn_blocking(move || reader.job_activations(node)).await;
            (utils, jobs)
        };
        ctx.spawn(gather.into_actor(self).map(move |(utils, jobs), act, ctx| {
            let jobs = match jobs {
                Ok(Ok(jobs)) => jobs,
                Ok(Err(e)) => {
                    act.evaluating = false;
                    return tracing::error!("loading activations: {e}");
                }
                Err(e) => {
                    act.evaluating = false;
                    return tracing::error!("loading activations panicked: {e}");
                }
            };
            act.decide(report, utils, jobs, ctx);
        }));
    }

    /// The policy's part of a step: feed the sample, poll, carry the decisions out.
    fn decide(
        &mut self,
        report: HealthReport,
        utils: Vec<(i64, LocalProcessor, Utilization)>,
        jobs: Vec<JobActivation>,
        ctx: &mut Context<Self>,
    ) {
        self.policy.handle_sample(&report.sample);
        let views: Vec<JobView> = jobs.iter().map(tuning::job_view).collect();
        let procs: Vec<ProcessorView> = utils
            .iter()
            .map(|(_, row, u)| tuning::processor_view(row, u))
            .collect();
        let decisions = self.policy.poll_decisions(report.sample.at, &views, &procs);
        // Names only of what the decisions concern: most samples decide nothing, and a
        // catalog may hold thousands of jobs.
        let named: std::collections::HashSet<i64> = decisions
            .iter()
            .flat_map(|d| d.action.job_id().into_iter().chain(d.jobs.iter().copied()))
            .collect();
        let mut cx = DecisionContext {
            jobs: jobs
                .iter()
                .filter(|j| named.contains(&j.job_id))
                .map(|j| (j.job_id, j.name.clone()))
                .collect(),
            processors: self
                .processors
                .iter()
                .map(|(id, (row, _))| (*id, row.name.clone()))
                .collect(),
            ..DecisionContext::default()
        };
        for d in &decisions {
            self.carry_out(d, &views, &mut cx);
        }
        let kinds = tuning::kinds_of_runs(&jobs, utils.iter().map(|(_, _, u)| u));
        for (id, _, u) in &utils {
            self.stats.add_elapsed(*id, u, &kinds);
        }
        let running: Vec<(&LocalProcessor, &Utilization, u32)> = utils
            .iter()
            .map(|(id, row, u)| {
                let now = self
                    .instances
                    .get(id)
                    .copied()
                    .unwrap_or(u.instances as u32);
                (row, u, now)
            })
            .collect();
        let kinds_of = if self.stats.elapsed_due(report.sample.at) {
            tuning::kinds_by_processor(&jobs)
        } else {
            HashMap::new()
        };
        let stats = self
            .stats
            .rows(&report, self.writes_paused, &running, &kinds_of);
        // Whatever changes a job's state or period changes what the scheduler plans.
        let reload = decisions.iter().any(|d| {
            !matches!(
                d.action,
                Action::Hold { .. } | Action::AddInstance { .. } | Action::RemoveInstance { .. }
            )
        });
        self.record(report.sample.at, stats, decisions, cx, reload, true, ctx);
    }

    /// Writes a step's statistics and decisions (after any decisions whose write failed
    /// before) in one writer operation; ends the policy step once written, if it is one
    /// (`ends_step`; the write rule between samples is not). Decisions that cannot be written now
    /// (the disk is full) are kept for the next write; statistics are dropped.
    #[allow(clippy::too_many_arguments)] // the step's parts, and what follows its write
    fn record(
        &mut self,
        at: i64,
        stats: Vec<StatSample>,
        decisions: Vec<Decision>,
        cx: DecisionContext,
        reload: bool,
        ends_step: bool,
        ctx: &mut Context<Self>,
    ) {
        let mut batches = std::mem::take(&mut self.unrecorded);
        if !decisions.is_empty() {
            batches.push(DecidedStep { decisions, cx });
        }
        let kept = batches.clone();
        let (writer, node) = (self.writer.clone(), self.node_id);
        let write = async move { writer.record_policy_step(node, at, stats, batches).await };
        ctx.spawn(write.into_actor(self).map(move |result, act, _| {
            if ends_step {
                act.evaluating = false;
            }
            if result.is_ok() && act.events.wanted() {
                let told: Vec<Event> = kept.iter().flat_map(tuning::decision_events).collect();
                act.events.publish(told);
            }
            match result {
                Ok(()) if reload => act.scheduler.do_send(Reload),
                Ok(()) => {}
                Err(e) => {
                    super::log_write_error("recording policy decisions", &e);
                    // Older first; a bounded backlog (a disk full for days decides little).
                    let newer = std::mem::replace(&mut act.unrecorded, kept);
                    act.unrecorded.extend(newer);
                    let excess = act.unrecorded.len().saturating_sub(MAX_UNRECORDED);
                    act.unrecorded.drain(..excess);
                }
            }
        }));
    }

    /// A catalog write failed because the disk is full: if that is news, writes pause now —
    /// processors claim only maintenance runs — with a decision said once (the policy's write
    /// rule, decided between samples); a later sample that reads the disk above critical
    /// resumes them.
    fn on_write_full(&mut self, at: i64, ctx: &mut Context<Self>) {
        let latest = self.last_health.as_ref().map(|h| &h.sample);
        if self.stopping || !self.policy.handle_write_full_after(at, latest) {
            return;
        }
        // Claims stop at once, before the decision's reasons are worked out.
        self.hold_claims(true);
        let (reader, node) = (self.reader.clone(), self.node_id);
        let load = actix_rt::task::spawn_blocking(move || reader.job_activations(node));
        ctx.spawn(load.into_actor(self).map(move |loaded, act, ctx| {
            let jobs = match loaded {
                Ok(Ok(jobs)) => jobs,
                Ok(Err(e)) => return tracing::error!("loading activations: {e}"),
                Err(e) => return tracing::error!("loading activations panicked: {e}"),
            };
            let views: Vec<JobView> = jobs.iter().map(tuning::job_view).collect();
            let decisions = act.policy.poll_writes(at, &views);
            if decisions.is_empty() {
                // The policy decided meanwhile (a sample's step): the processors follow it.
                let paused = act.policy.writes_paused();
                return act.hold_claims(paused);
            }
            let mut cx = DecisionContext {
                jobs: jobs.iter().map(|j| (j.job_id, j.name.clone())).collect(),
                ..DecisionContext::default()
            };
            for d in &decisions {
                act.carry_out(d, &views, &mut cx);
            }
            act.record(at, Vec::new(), decisions, cx, true, false, ctx);
        }));
    }

    /// Tells every processor whether writes are paused (only maintenance runs are claimed).
    fn hold_claims(&mut self, paused: bool) {
        self.writes_paused = paused;
        for (_, addr) in self.processors.values() {
            addr.do_send(SetWritesPaused(paused));
        }
    }

    /// The runtime's part of one decision (instances, paused writes), logged; its catalog
    /// part is written by `activation::apply_decision` with what it notes in `cx`.
    fn carry_out(&mut self, d: &Decision, views: &[JobView], cx: &mut DecisionContext) {
        let subject = d
            .action
            .job_id()
            .and_then(|id| cx.jobs.get(&id))
            .or_else(|| {
                d.action
                    .processor_id()
                    .and_then(|id| cx.processors.get(&id))
            });
        let subject = subject.map_or("-", String::as_str);
        if d.action == Action::PauseWrites {
            // The one line an operator needs to see: the node stops claiming until it resumes.
            tracing::warn!(action = d.action.as_str(), cause = d.cause.as_str(), subject, reason = %d.reason, "policy decision");
        } else {
            tracing::info!(action = d.action.as_str(), cause = d.cause.as_str(), subject, reason = %d.reason, "policy decision");
        }
        match d.action {
            Action::AddInstance { processor_id } | Action::RemoveInstance { processor_id } => {
                let add = matches!(d.action, Action::AddInstance { .. });
                if let Some((row, addr)) = self.processors.get(&processor_id) {
                    let now = self
                        .instances
                        .get(&processor_id)
                        .copied()
                        .unwrap_or(tuning::min_instances(row));
                    let next = if add { now + 1 } else { now.saturating_sub(1) }
                        .clamp(tuning::min_instances(row), tuning::max_instances(row));
                    self.instances.insert(processor_id, next);
                    cx.instances.insert(processor_id, next);
                    addr.do_send(SetInstances(next as usize));
                }
            }
            Action::PauseWrites | Action::ResumeWrites => {
                let paused = d.action == Action::PauseWrites;
                self.paused_because = paused.then(|| d.reason.clone());
                self.hold_claims(paused);
            }
            Action::Activate { job_id }
                if views
                    .iter()
                    .find(|v| v.job_id == job_id)
                    .is_some_and(|v| self.policy.held_by_pause(v)) =>
            {
                cx.held_on_activation.insert(job_id);
            }
            _ => {}
        }
    }

    /// A sample that cannot go through the policy now (a step is still being written, or the
    /// node is paused) is still recorded.
    fn record_only(&mut self, report: HealthReport, ctx: &mut Context<Self>) {
        let stats = self
            .stats
            .rows(&report, self.writes_paused, &[], &HashMap::new());
        if stats.is_empty() {
            return;
        }
        let (writer, node, at) = (self.writer.clone(), self.node_id, report.sample.at);
        ctx.spawn(
            async move {
                if let Err(e) = writer.record_stats(node, at, stats).await {
                    super::log_write_error("recording health stats", &e);
                }
            }
            .into_actor(self),
        );
    }

    /// Starts, resizes and stops processors to match the catalog's rows.
    fn sync_processors(&mut self, ctx: &mut Context<Self>) {
        let (reader, node) = (self.reader.clone(), self.node_id);
        let load = actix_rt::task::spawn_blocking(move || reader.local_processors(node));
        ctx.spawn(load.into_actor(self).map(|joined, act, ctx| {
            let (rows, kept) = match joined {
                Ok(Ok(loaded)) => loaded,
                Ok(Err(e)) => return tracing::error!("loading processors: {e}"),
                Err(e) => return tracing::error!("loading processors panicked: {e}"),
            };
            if act.stopping {
                return;
            }
            let wanted: HashMap<i64, LocalProcessor> =
                rows.into_iter().map(|r| (r.processor_id, r)).collect();
            act.processors.retain(|id, (row, addr)| {
                if wanted.contains_key(id) {
                    return true;
                }
                tracing::info!(processor = %row.name, "processor removed or disabled; draining it");
                addr.do_send(Drain(Duration::from_secs(30)));
                false
            });
            for (id, row) in wanted {
                // The instances the policy chose (kept in the catalog across restarts), within
                // the row's bounds, which the operator may have changed.
                let chosen = act
                    .instances
                    .get(&id)
                    .or_else(|| kept.get(&id))
                    .copied()
                    .unwrap_or_else(|| tuning::min_instances(&row))
                    .clamp(tuning::min_instances(&row), tuning::max_instances(&row));
                let before = act.instances.insert(id, chosen);
                if let Some((old, addr)) = act.processors.get(&id)
                    && old.remote != row.remote
                {
                    // Local executions and calls to a node are different executors: start
                    // the processor anew as the other kind.
                    tracing::info!(processor = %row.name, remote = row.remote, "processor changed between local and remote; restarting it");
                    addr.do_send(Drain(Duration::from_secs(30)));
                    act.processors.remove(&id);
                }
                match act.processors.get_mut(&id) {
                    Some((old, addr)) => {
                        if before != Some(chosen) {
                            addr.do_send(SetInstances(chosen as usize));
                        }
                        if old.prefetch != row.prefetch {
                            addr.do_send(SetPrefetch(prefetch_of(&row)));
                        }
                        *old = row;
                    }
                    None => {
                        let addr = act.start_processor(&row, chosen, ctx);
                        if act.writes_paused {
                            addr.do_send(SetWritesPaused(true));
                        }
                        act.processors.insert(id, (row, addr));
                    }
                }
            }
            let map = act
                .processors
                .iter()
                .map(|(id, (_, a))| (*id, a.clone()))
                .collect();
            act.scheduler.do_send(SetProcessors(map));
        }));
    }

    /// Jobs new to this node (an operator added or enabled them while it ran) are activated at
    /// once while every resource is ok — a person who just added a job expects it to run —
    /// and otherwise wait in standby, with the reason, for the policy's ramp. A short disk
    /// holds back only jobs that write data (as it does for the policy's own increases).
    fn admit_new_jobs(&mut self, ctx: &mut Context<Self>) {
        if !self.activated || self.stopping {
            return;
        }
        let others_ok = self
            .policy
            .health()
            .overall_except(Some(crate::policy::Resource::Disk))
            == crate::policy::Level::Ok;
        let disk_short = self.policy.disk_short();
        let writes_paused = self.policy.writes_paused();
        let pressure: Vec<String> = crate::policy::Resource::ALL
            .iter()
            .filter(|r| self.policy.level(**r) != crate::policy::Level::Ok)
            .map(|r| format!("{} {}", r.as_str(), self.policy.level(*r).as_str()))
            .collect();
        let (writer, node, now) = (self.writer.clone(), self.node_id, self.now());
        let write = async move {
            let changes = writer
                .settle_activations(node, now, move |jobs| {
                    tuning::admit(jobs, others_ok, disk_short, writes_paused, &pressure)
                })
                .await?;
            Ok::<_, CatalogError>(changes)
        };
        ctx.spawn(
            write
                .into_actor(self)
                .map(move |result, act, _| match result {
                    Ok(changes) => {
                        act.publish_changes(&changes, now);
                        let n = changes.iter().filter(|c| c.decision.is_some()).count();
                        if n > 0 {
                            tracing::info!(jobs = n, "jobs added while healthy activated at once");
                        }
                    }
                    Err(e) => super::log_write_error("activating new jobs", &e),
                }),
        );
    }

    /// Tells the processors which of this node's running runs an operator asked to cancel.
    fn forward_cancels(&mut self, ctx: &mut Context<Self>) {
        let (reader, node) = (self.reader.clone(), self.node_id);
        let load = actix_rt::task::spawn_blocking(move || reader.cancel_requested(node));
        ctx.spawn(load.into_actor(self).map(|joined, act, _| match joined {
            Ok(Ok(ids)) if !ids.is_empty() => {
                for (_, addr) in act.processors.values() {
                    addr.do_send(CancelRuns(ids.clone()));
                }
            }
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::error!("loading cancel requests: {e}"),
            Err(e) => tracing::error!("loading cancel requests panicked: {e}"),
        }));
    }

    /// Forgets the writers of objects that changed or went away (a new one starts on next use).
    fn sync_object_writers(&mut self, ctx: &mut Context<Self>) {
        let (reader, writers) = (self.reader.clone(), self.env.object_writers.clone());
        let sync = actix_rt::task::spawn_blocking(move || {
            let objects = reader.enabled_objects()?;
            writers.retain(&objects);
            Ok::<_, CatalogError>(())
        });
        ctx.spawn(sync.into_actor(self).map(|joined, _, _| match joined {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!("loading objects: {e}"),
            Err(e) => tracing::error!("loading objects panicked: {e}"),
        }));
    }

    fn start_processor(
        &self,
        row: &LocalProcessor,
        instances: u32,
        _ctx: &mut Context<Self>,
    ) -> Addr<Processor> {
        let cfg = ProcessorConfig {
            processor_id: row.processor_id,
            name: row.name.clone(),
            instances: instances.max(1) as usize,
            node_id: self.node_id,
            lease_ms: self.lease_ms,
            prefetch: prefetch_of(row),
            tenure: self.tenure.clone(),
            suspects: self.suspects.clone(),
            events: self.events.clone(),
            node_name: self.node_name.clone(),
        };
        let mut env = self.env.clone();
        env.remote = row.remote.then_some(row.processor_id);
        let writer = self.writer.clone();
        let events = self.scheduler.clone().recipient::<processor::RunEvents>();
        let paused = self.paused;
        actix::Supervisor::start(move |_| Processor::new(cfg, env, writer, events).paused(paused))
    }
}

/// A processor row's `prefetch` as its processor takes it.
fn prefetch_of(row: &LocalProcessor) -> Option<usize> {
    row.prefetch.map(|n| n.max(0) as usize)
}

impl Actor for Supervisor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.activate_minimum(ctx);
        self.sync_processors(ctx);
        let every = Duration::from_millis(self.tenure.cadence().heartbeat_ms() as u64);
        ctx.run_interval(every, |act, ctx| act.heartbeat(ctx));
        // The Supervisor is the actor every decision and report goes through: when it stops
        // handling messages the node is of no use, and its own timer stops pinging.
        if let Some(every) = self.notifier.watchdog_every() {
            self.notifier.watchdog();
            ctx.run_interval(every, |act, _| {
                act.notifier.watchdog();
            });
        }
    }
}

impl Handler<HealthReport> for Supervisor {
    type Result = ();
    fn handle(&mut self, msg: HealthReport, ctx: &mut Context<Self>) {
        tracing::debug!(
            cpu = msg.sample.cpu_used,
            mem_avail = msg.sample.memory_available,
            disk_avail = msg.sample.disk_available,
            "health"
        );
        self.last_health = Some(msg.clone());
        if self.can_evaluate() {
            self.evaluate(msg, ctx);
        } else {
            self.record_only(msg, ctx);
        }
    }
}

impl Handler<WriteFull> for Supervisor {
    type Result = ();
    fn handle(&mut self, msg: WriteFull, ctx: &mut Context<Self>) {
        self.on_write_full(msg.0, ctx);
    }
}

impl Handler<Reload> for Supervisor {
    type Result = ();
    fn handle(&mut self, _: Reload, ctx: &mut Context<Self>) {
        self.admit_new_jobs(ctx);
        self.sync_processors(ctx);
        self.sync_object_writers(ctx);
        self.forward_cancels(ctx);
    }
}

impl Handler<Pause> for Supervisor {
    type Result = ();
    fn handle(&mut self, msg: Pause, _: &mut Context<Self>) {
        self.paused = msg.0;
        self.scheduler.do_send(PauseSchedules(msg.0));
        for (_, addr) in self.processors.values() {
            addr.do_send(SetPaused(msg.0));
        }
    }
}

impl Handler<GetEngineStatus> for Supervisor {
    type Result = ResponseActFuture<Self, EngineStatus>;
    fn handle(&mut self, _: GetEngineStatus, _: &mut Context<Self>) -> Self::Result {
        let asks: Vec<_> = self
            .processors
            .values()
            .map(|(_, a)| a.send(GetStatus))
            .collect();
        let (node_id, paused, health) = (self.node_id, self.paused, self.last_health.clone());
        let level = self.policy.overall();
        let levels = crate::policy::Resource::ALL
            .into_iter()
            .filter_map(|r| self.policy.health().evidence(r, self.policy.config()))
            .collect();
        let writes_paused = self.writes_paused.then(|| {
            self.paused_because.clone().unwrap_or_else(|| {
                "the disk is full: a catalog write failed (the pause is being decided)".into()
            })
        });
        Box::pin(
            async move {
                let mut processors = Vec::new();
                for ask in asks {
                    if let Ok(s) = ask.await {
                        processors.push(s);
                    }
                }
                processors.sort_by(|a, b| a.name.cmp(&b.name));
                EngineStatus {
                    node_id,
                    paused,
                    processors,
                    health,
                    level,
                    levels,
                    writes_paused,
                }
            }
            .into_actor(self),
        )
    }
}

impl Handler<Shutdown> for Supervisor {
    type Result = ResponseActFuture<Self, ()>;
    fn handle(&mut self, msg: Shutdown, _: &mut Context<Self>) -> Self::Result {
        self.stopping = true;
        self.scheduler.do_send(PauseSchedules(true));
        let drains: Vec<_> = self
            .processors
            .values()
            .map(|(_, a)| a.send(Drain(msg.0)))
            .collect();
        let (writer, lease) = (self.writer.clone(), self.tenure.lease());
        Box::pin(
            async move {
                for d in drains {
                    let _ = d.await;
                }
                if let Err(e) = writer.release_node(lease).await {
                    tracing::warn!("releasing the node name: {e}");
                }
                // The catalog file alone holds everything afterwards: the WAL is emptied.
                writer.settle().await;
            }
            .into_actor(self),
        )
    }
}
