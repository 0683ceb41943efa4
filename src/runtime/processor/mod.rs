//! Processor is an actor. It owns one `job_processor` row's executions on this node: it claims
//! queued runs for its processor id through the CatalogWriter (priority, then age) in batches
//! sized by `lease::ClaimSizer`, executes up to `instances` at a time, enforces timeouts, and
//! records completions in batches; it talks to the Scheduler (run started / finished) and
//! answers the Supervisor (pause, drain, instances, utilization).
//!
//! Invariant: at most `instances` runs execute at once; a run's result is recorded once, with
//! its claim token; after `Drain` it claims nothing, claimed runs not yet started go back to the
//! queue at once, and runs still executing at the grace deadline are cancelled and returned too.
//!
//! This file is the loop (the pump, the timer, the messages and their handlers);
//! `claiming.rs` claims runs and keeps the buffer of those not yet started, `returning.rs`
//! returns claimed runs that did not start (a claim's lease, busy instances, an idle node's
//! request, a shutdown), `execution.rs` starts, times out and records the runs it claimed.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use actix::prelude::*;
use tokio::sync::{oneshot, watch};

use super::events::EventBus;
use super::tenure::Tenure;
use crate::catalog::complete::{Completion, Outcome};
use crate::catalog::queue::{ClaimedRun, RunStart};
use crate::catalog::writer::DbWriter;
use crate::executor::ExecEnv;
use crate::lease::ClaimSizer;

mod claiming;
mod execution;
mod returning;

use execution::FailureLog;

/// Largest claim batch.
const MAX_BATCH: usize = 2048;
/// A claim batch aims at this much work, ms.
const TARGET_BATCH_MS: i64 = 50;
/// Claims failing in a row before the processor stops to be restarted by its supervisor.
const CLAIM_FAILURES_BEFORE_RESTART: u32 = 5;

/// Claim whatever is due now.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Wake;

/// Runs of this priority were queued for this processor: claim at once when they come before
/// runs already claimed and waiting here (a high-priority slot does not wait behind a buffered
/// batch of low-priority work).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Enqueued {
    /// The highest priority among the runs queued.
    pub priority: i64,
    /// How many runs were queued.
    pub runs: usize,
}

/// Stop (true) or resume (false) claiming.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SetPaused(pub bool);

/// Change the number of concurrent executions.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SetInstances(pub usize);

/// Change how many runs are claimed beyond the free instances (`None`: the measured number).
#[derive(Message)]
#[rtype(result = "()")]
pub struct SetPrefetch(pub Option<usize>);

/// Stop claiming; wait up to the grace period for running jobs, then cancel and requeue the
/// rest. Answers when nothing runs any more.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Drain(pub Duration);

/// The node lost its name (another process took it, or another node's sweep fenced it): claim
/// and start nothing more, forget the claimed runs not started (another node has them now),
/// and answer once the completions of the runs that finished have been offered to the catalog
/// — each rejected by its stale claim token, and counted — or after the duration, whichever
/// comes first. Runs still executing are left to end with the process.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Fence(pub Duration);

/// An idle node asked for runs of this processor: put back in the queue at most this many
/// claimed runs not started (the last in line), and claim again only once an instance is free
/// (`catalog::sharing`).
#[derive(Message)]
#[rtype(result = "()")]
pub struct GiveBack(pub usize);

/// Pause (true) or resume (false) jobs that write data objects, except maintenance jobs.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SetWritesPaused(pub bool);

/// Cancel these runs if this processor has them (an operator's `runs cancel`): a claimed run
/// that has not started is recorded `cancelled` at once; an executing one is cancelled (a
/// command's process group is killed) and recorded `cancelled`.
#[derive(Message)]
#[rtype(result = "()")]
pub struct CancelRuns(pub Vec<i64>);

/// The fraction (0..1) of its instances' time spent executing since the previous ask.
#[derive(Message)]
#[rtype(result = "Utilization")]
pub struct TakeUtilization;

/// A processor's busy fraction over a period.
#[derive(Debug, Clone, MessageResponse)]
pub struct Utilization {
    /// Busy time / (period × instances).
    pub fraction: f64,
    /// Busy time in the period, ms.
    pub busy_ms: i64,
    /// Instances now.
    pub instances: usize,
    /// Elapsed time (ms) of the runs that finished in the period, summed per job id.
    pub elapsed_by_job: Vec<(i64, i64)>,
}

/// What a processor is doing.
#[derive(Message)]
#[rtype(result = "ProcessorStatus")]
pub struct GetStatus;

/// A processor's state.
#[derive(Debug, Clone, serde::Serialize, MessageResponse)]
pub struct ProcessorStatus {
    /// Name.
    pub name: String,
    /// Concurrent executions allowed.
    pub instances: usize,
    /// Executing now.
    pub running: usize,
    /// Runs finished since start.
    pub completed: u64,
    /// Claiming paused.
    pub paused: bool,
}

/// Tells the Scheduler about runs that started or finished, in order (one message per batch).
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub struct RunEvents(pub Vec<RunEvent>);

/// A job's run started or finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEvent {
    /// A run of the job began at the instant.
    Started(i64, i64),
    /// A run of the job ended at the instant.
    Finished(i64, i64),
}

/// Static settings of one processor.
#[derive(Clone)]
pub struct ProcessorConfig {
    /// `processor_id`.
    pub processor_id: i64,
    /// Name, for logs.
    pub name: String,
    /// Concurrent executions.
    pub instances: usize,
    /// This node.
    pub node_id: i64,
    /// How long past its timeout a claimed run's lease lasts, ms.
    pub lease_ms: i64,
    /// Runs claimed beyond the free instances; `None`: sized from measured durations.
    pub prefetch: Option<usize>,
    /// The node's hold on its name: nothing is claimed or started while it is not valid.
    pub tenure: Arc<Tenure>,
    /// Shared by the node's processors: one suspect run executes at a time.
    pub suspects: Arc<SuspectGate>,
    /// The embedding application's subscribers and waiters, and runs' parent spans.
    pub events: Arc<EventBus>,
    /// This node's name (in each run's span).
    pub node_name: Arc<str>,
}

/// Lets one *suspect* run (its node died while it was claimed) execute at a time on a node, so
/// that a node death during its execution is not blamed on another suspect that merely ran
/// beside it.
#[derive(Debug, Default)]
pub struct SuspectGate(AtomicBool);

impl SuspectGate {
    fn try_enter(&self) -> bool {
        self.0
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    fn leave(&self) {
        self.0.store(false, Ordering::Release);
    }
}

/// While a processor may not start its next run (no valid tenure, the suspect gate taken), it
/// looks again this often.
const RETRY_START: Duration = Duration::from_millis(50);

/// How long a claimed run may wait in its processor's buffer while every instance is busy
/// before it goes back to the queue, for a node with a free instance to take (issue 29: no node
/// idles for over a second beside claimed work it could start).
const HOLD_WHILE_BUSY_MS: i64 = 500;

/// How long a started run may read `claimed` before its start is written: runs that end
/// sooner are recorded `claimed` → end in one write (a drain of short runs writes no starts).
const START_MARK_DELAY: Duration = Duration::from_millis(50);

/// A run executing now.
struct Executing {
    /// Set to true to cancel it.
    cancel: Arc<watch::Sender<bool>>,
    /// Epoch ms it began (busy time).
    started_ms: i64,
    /// The instant it began (execution time, for claim sizing).
    began: Instant,
}

/// The Processor actor.
pub struct Processor {
    cfg: ProcessorConfig,
    /// Shared by every run (one reference count per run, not a copy).
    env: Arc<ExecEnv>,
    writer: DbWriter,
    events: Recipient<RunEvents>,
    /// Run starts not yet told to the Scheduler (sent at the end of each pump).
    started_events: Vec<RunEvent>,
    /// Executing runs by run id.
    running: HashMap<i64, Executing>,
    /// Executing runs an operator cancelled.
    cancelled: HashSet<i64>,
    /// Failed runs, logged at WARN at most once a minute per job.
    failures: FailureLog,
    claiming: bool,
    paused: bool,
    draining: bool,
    /// The node lost its name: nothing claimed is ours any more.
    fenced: bool,
    interrupting: bool,
    wake_again: bool,
    timer: Option<SpawnHandle>,
    completed: u64,
    drained: Vec<oneshot::Sender<()>>,
    rng: u64,
    writes_paused: bool,
    /// Busy time accounting: finished runs' time since `period_start`.
    busy_ms: i64,
    period_start: i64,
    /// Elapsed time of the runs finished since `period_start`, per job (the statistics of
    /// elapsed time per schedule kind).
    elapsed_by_job: HashMap<i64, i64>,
    /// Claimed, not yet started (the next batch is claimed while these run: two deep).
    local: VecDeque<ClaimedRun>,
    sizer: ClaimSizer,
    /// Starts not yet written (`claimed` → `running`), and whether a batch of them is due or
    /// being written: written after `START_MARK_DELAY`, so that a run which ends before that
    /// goes from `claimed` to its end in its completion's one write.
    unmarked_starts: Vec<RunStart>,
    marking_starts: bool,
    /// Completions waiting for the writer, and whether a batch of them is being written.
    unrecorded: Vec<(ClaimedRun, Completion)>,
    /// How long each run of `unrecorded` executed, seconds on the monotonic clock (its
    /// completion holds whole milliseconds of the wall clock), for `/metrics`.
    took: HashMap<i64, f64>,
    recording: bool,
    record_failures: u32,
    claim_failures: u32,
    restarts: u32,
    last_error: Option<String>,
    requeue_pending: bool,
    /// How many runs were queued that come before the buffered ones: claimed without waiting
    /// for the buffer to run low.
    urgent: usize,
    /// A claim of such runs is in flight beside the batch's.
    claiming_urgent: bool,
    /// A pump is due after `RETRY_START`.
    retry_armed: bool,
    /// Runs were given back to an idle node: claim nothing until an instance is free (or the
    /// same runs would come straight back).
    gave_back: bool,
    /// A look at the buffer is due (`release_held`).
    hold_armed: bool,
}

impl Processor {
    /// Epoch ms now, by the engine's clock.
    fn now(&self) -> i64 {
        self.env.clock.now_ms()
    }

    /// A processor executing with `env`, writing through `writer`, reporting to `events`.
    pub fn new(
        cfg: ProcessorConfig,
        env: ExecEnv,
        writer: DbWriter,
        events: Recipient<RunEvents>,
    ) -> Self {
        let start = env.clock.now_ms();
        let rng = 0x9e37_79b9_7f4a_7c15 ^ (cfg.processor_id as u64) ^ (start as u64);
        let sizer = ClaimSizer::new(MAX_BATCH, TARGET_BATCH_MS).with_prefetch(cfg.prefetch);
        Self {
            cfg,
            env: Arc::new(env),
            writer,
            events,
            started_events: Vec::new(),
            running: HashMap::new(),
            cancelled: HashSet::new(),
            failures: FailureLog::default(),
            claiming: false,
            paused: false,
            draining: false,
            fenced: false,
            interrupting: false,
            wake_again: false,
            timer: None,
            completed: 0,
            drained: Vec::new(),
            rng,
            writes_paused: false,
            busy_ms: 0,
            period_start: start,
            elapsed_by_job: HashMap::new(),
            local: VecDeque::new(),
            sizer,
            unmarked_starts: Vec::new(),
            marking_starts: false,
            unrecorded: Vec::new(),
            took: HashMap::new(),
            recording: false,
            record_failures: 0,
            claim_failures: 0,
            restarts: 0,
            last_error: None,
            requeue_pending: false,
            urgent: 0,
            claiming_urgent: false,
            retry_armed: false,
            gave_back: false,
            hold_armed: false,
        }
    }

    /// Starts paused (the node was paused before this processor existed).
    pub fn paused(mut self, paused: bool) -> Self {
        self.paused = paused;
        self
    }

    fn free(&self) -> usize {
        self.cfg.instances.saturating_sub(self.running.len())
    }

    /// Starts buffered runs on free instances, and claims the next batch when the buffer is
    /// at most half a batch (unless a claim is in flight).
    fn pump(&mut self, ctx: &mut Context<Self>) {
        if self.paused || self.draining {
            return;
        }
        if !self.cfg.tenure.is_valid() {
            // Not sure this process still holds the node name (no heartbeat confirmed lately):
            // start and claim nothing until one does, or the supervisor learns it was taken.
            if !self.cfg.tenure.is_lost() {
                self.retry_later(ctx);
            }
            return;
        }
        let mut expired = false;
        while self.running.len() < self.cfg.instances {
            let Some(front) = self.local.front() else {
                break;
            };
            let now = self.now();
            if let Some(by) = front.start_by.filter(|&by| now > by) {
                let run = self.local.pop_front().expect("the front run");
                let why = format!(
                    "not started by its deadline {} ({} ms late)",
                    crate::schedule::calendar::rfc3339(by),
                    now - by
                );
                self.end_unstarted(run, Outcome::Expired(why));
                expired = true;
                continue;
            }
            if front.suspect && !self.cfg.suspects.try_enter() {
                self.retry_later(ctx);
                break;
            }
            let run = self.local.pop_front().expect("the front run");
            self.start(run, ctx);
        }
        if !self.started_events.is_empty() {
            self.events
                .do_send(RunEvents(std::mem::take(&mut self.started_events)));
        }
        if expired {
            self.flush(ctx);
        }
        if self.free() == 0 && !self.local.is_empty() {
            self.arm_hold_check(ctx);
        }
        if self.claiming {
            self.wake_again = true;
            // Runs that come before the buffered ones were queued while a claim is in flight
            // (behind the writer's batch of completions): claim them beside it, not after it.
            if self.urgent > 0 && !self.claiming_urgent && !self.gave_back {
                let urgent = self.take_urgent();
                self.claim(urgent, true, ctx);
            }
            return;
        }
        if self.gave_back {
            if self.free() == 0 {
                return;
            }
            self.gave_back = false;
        }
        // Every run queued before the buffered ones is claimed now, with the batch if one is
        // due (a claim takes the highest priorities first).
        let limit = self
            .sizer
            .poll_claim(self.local.len(), self.free(), self.cfg.instances)
            .max(self.take_urgent());
        if limit == 0 {
            return;
        }
        self.wake_again = false;
        self.claim(limit, false, ctx);
    }

    /// Pumps again after `RETRY_START` (one such timer at a time).
    fn retry_later(&mut self, ctx: &mut Context<Self>) {
        if std::mem::replace(&mut self.retry_armed, true) {
            return;
        }
        ctx.run_later(RETRY_START, |act, ctx| {
            act.retry_armed = false;
            act.pump(ctx);
        });
    }

    /// Wakes at `at` (epoch ms) to claim a run that becomes due then.
    fn arm(&mut self, at: i64, ctx: &mut Context<Self>) {
        if let Some(h) = self.timer.take() {
            ctx.cancel_future(h);
        }
        let delay = Duration::from_millis((at - self.now()).max(0) as u64 + 1);
        self.timer = Some(ctx.run_later(delay, |act, ctx| {
            act.timer = None;
            act.pump(ctx);
        }));
    }
}

impl Actor for Processor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        // A claimed run waits in `local` only while its claim's lease lasts (see
        // `return_stale_claims`); looked at four times a lease.
        let every = Duration::from_millis((self.cfg.lease_ms / 4).max(50) as u64);
        ctx.run_interval(every, |act, ctx| act.return_stale_claims(ctx));
        if self.restarts == 0 {
            tracing::info!(processor = %self.cfg.name, instances = self.cfg.instances, "processor started");
            self.pump(ctx);
            return;
        }
        if std::mem::take(&mut self.requeue_pending) {
            self.requeue_local(ctx);
        }
        // Exponential backoff between restarts: 200 ms, 400 ms, … at most 30 s.
        let delay = Duration::from_millis((100u64 << self.restarts.min(8)).min(30_000));
        tracing::info!(processor = %self.cfg.name, ?delay, "processor restarted; claiming after a pause");
        ctx.run_later(delay, |act, ctx| act.pump(ctx));
    }
}

impl Supervised for Processor {
    fn restarting(&mut self, _: &mut Context<Self>) {
        self.restarts += 1;
        tracing::warn!(
            processor = %self.cfg.name,
            restarts = self.restarts,
            why = self.last_error.as_deref().unwrap_or("stopped"),
            "processor restarting"
        );
        self.claiming = false;
        self.claim_failures = 0;
        // Claimed runs not started are still `running` for this node: give them back.
        self.requeue_pending = true;
    }
}

impl Handler<Wake> for Processor {
    type Result = ();
    fn handle(&mut self, _: Wake, ctx: &mut Context<Self>) {
        self.pump(ctx);
    }
}

impl Handler<Enqueued> for Processor {
    type Result = ();
    fn handle(&mut self, msg: Enqueued, ctx: &mut Context<Self>) {
        // The buffer is in priority order: its last run has the lowest priority.
        if self
            .local
            .back()
            .is_none_or(|buffered| buffered.priority < msg.priority)
        {
            self.urgent += msg.runs.max(1);
        }
        self.pump(ctx);
    }
}

impl Handler<SetPaused> for Processor {
    type Result = ();
    fn handle(&mut self, msg: SetPaused, ctx: &mut Context<Self>) {
        self.paused = msg.0;
        if !self.paused {
            self.pump(ctx);
        }
    }
}

impl Handler<SetInstances> for Processor {
    type Result = ();
    fn handle(&mut self, msg: SetInstances, ctx: &mut Context<Self>) {
        self.cfg.instances = msg.0.max(1);
        self.pump(ctx);
    }
}

impl Handler<SetPrefetch> for Processor {
    type Result = ();
    fn handle(&mut self, SetPrefetch(prefetch): SetPrefetch, ctx: &mut Context<Self>) {
        self.cfg.prefetch = prefetch;
        self.sizer.set_prefetch(prefetch);
        self.pump(ctx);
    }
}

impl Handler<GiveBack> for Processor {
    type Result = ();
    fn handle(&mut self, GiveBack(asked): GiveBack, ctx: &mut Context<Self>) {
        if self.draining || self.fenced {
            return;
        }
        let n = asked.min(self.local.len());
        if n == 0 {
            return;
        }
        let back = self.local.split_off(self.local.len() - n);
        self.gave_back = true;
        self.give_back(back, ctx);
        tracing::info!(processor = %self.cfg.name, runs = n, kept = self.local.len(), "gave claimed runs not started back to the queue, for an idle node");
    }
}

impl Handler<SetWritesPaused> for Processor {
    type Result = ();
    fn handle(&mut self, msg: SetWritesPaused, ctx: &mut Context<Self>) {
        self.writes_paused = msg.0;
        self.pump(ctx);
    }
}

impl Handler<TakeUtilization> for Processor {
    type Result = Utilization;
    fn handle(&mut self, _: TakeUtilization, _: &mut Context<Self>) -> Utilization {
        let now = self.now();
        // Runs still executing count up to now; the next period starts now.
        let running: i64 = self
            .running
            .values()
            .map(|e| now - e.started_ms.max(self.period_start))
            .sum();
        let busy = self.busy_ms + running;
        let period = (now - self.period_start).max(1);
        let fraction = busy as f64 / (period as f64 * self.cfg.instances.max(1) as f64);
        self.busy_ms = 0;
        self.period_start = now;
        Utilization {
            fraction: fraction.clamp(0.0, 1.0),
            busy_ms: busy,
            instances: self.cfg.instances,
            elapsed_by_job: self.elapsed_by_job.drain().collect(),
        }
    }
}

impl Handler<GetStatus> for Processor {
    type Result = ProcessorStatus;
    fn handle(&mut self, _: GetStatus, _: &mut Context<Self>) -> ProcessorStatus {
        ProcessorStatus {
            name: self.cfg.name.clone(),
            instances: self.cfg.instances,
            running: self.running.len(),
            completed: self.completed,
            paused: self.paused,
        }
    }
}

impl Handler<CancelRuns> for Processor {
    type Result = ();

    fn handle(&mut self, msg: CancelRuns, ctx: &mut Context<Self>) {
        for id in msg.0 {
            if let Some(executing) = self.running.get(&id) {
                tracing::info!(processor = %self.cfg.name, run = id, "cancelling a run an operator cancelled");
                self.cancelled.insert(id);
                let _ = executing.cancel.send(true);
            } else if let Some(at) = self.local.iter().position(|r| r.run_id == id)
                && let Some(run) = self.local.remove(at)
            {
                let why = "cancelled by an operator before it started".to_string();
                self.end_unstarted(run, Outcome::Cancelled(why));
            }
        }
        self.flush(ctx);
    }
}

impl Handler<Fence> for Processor {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, msg: Fence, ctx: &mut Context<Self>) -> ResponseFuture<()> {
        self.fenced = true;
        self.paused = true;
        self.draining = true;
        if let Some(h) = self.timer.take() {
            ctx.cancel_future(h);
        }
        // Not started, so not executed here: forgotten, not reported (a report would only be
        // rejected as stale).
        self.local.clear();
        let (tx, rx) = oneshot::channel();
        self.drained.push(tx);
        self.flush(ctx);
        self.check_drained();
        Box::pin(async move {
            let _ = tokio::time::timeout(msg.0, rx).await;
        })
    }
}

impl Handler<Drain> for Processor {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, msg: Drain, ctx: &mut Context<Self>) -> ResponseFuture<()> {
        self.draining = true;
        if let Some(h) = self.timer.take() {
            ctx.cancel_future(h);
        }
        // Claimed runs that have not started go straight back to the queue.
        self.requeue_local(ctx);
        let (tx, rx) = oneshot::channel();
        self.drained.push(tx);
        self.check_drained();
        ctx.run_later(msg.0, |act, _| {
            if !act.running.is_empty() {
                tracing::info!(processor = %act.cfg.name, runs = act.running.len(), "grace period over: returning running jobs to the queue");
                act.interrupting = true;
                for executing in act.running.values() {
                    let _ = executing.cancel.send(true);
                }
            }
        });
        Box::pin(async move {
            let _ = rx.await;
        })
    }
}
