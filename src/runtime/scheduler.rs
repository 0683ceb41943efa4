//! Scheduler is an actor. It owns one `JobPlanner` (the pure core) per scheduled job; it arms a
//! single timer for the earliest due time, turns due decisions into `job_run` rows through the
//! CatalogWriter, and wakes the processors concerned. It talks to the Processors (run events,
//! wakes) and watches the catalog for edits by anyone (`PRAGMA data_version` + generation).
//!
//! The planners decide *inside* the writer's transaction that records their decisions: the
//! tick sends the due planners there, each is told what the catalog has in flight for its job
//! (runs executing on any node, slot runs queued) and then polled, and the planners come back
//! with their new state. A node's own count of Started/Finished events is only a cache for
//! choosing wake-up times: it drifted when a reload's snapshot raced the events, and it never
//! saw other nodes' runs, which made slots `skipped` while nothing ran.
//!
//! When each job runs next ([`JobPlanner::next_run`]) is recorded for this node
//! (`job_activation.next_run_at`) only when it changed: by the transaction that decides the due
//! slots (the value moves when a slot is decided: no commit of its own), and after a load, and
//! after a run_always job's run ended, in one batch; a load also clears the values of jobs this
//! node no longer plans. A node at rest writes nothing for it.
//!
//! Invariant: no busy polling — between catalog edits and due times it does nothing but a
//! two-query change check every `WATCH_INTERVAL` (and, for a run_always job waiting on a run
//! in flight, one look at the catalog every `RECHECK_IN_FLIGHT`); a slot key becomes a row at
//! most once (the unique `(job_id, scheduled_for)` decides between nodes).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use chrono_tz::Tz;
use serde_json::Value as Json;

use super::Clock;
use super::events::{Event, EventBus};
use super::processor::{Enqueued, Processor, RunEvent, RunEvents, Wake};
use crate::catalog::CatalogError;
use crate::catalog::loads::ScheduledJob;
use crate::catalog::reader::{Changed, Reader, Watch};
use crate::catalog::slots::{Decided, DueJob, NextRun};
use crate::catalog::writer::DbWriter;
use crate::schedule::{CronCache, JobPlanner, Schedule};

/// How often the catalog file is checked for edits made by other connections by default
/// (`database.watch_interval`): it bounds how long a run queued by another process (`jobvisor
/// jobs run`) waits before a free processor notices it. The check is one `PRAGMA
/// data_version` read.
pub const WATCH_INTERVAL: Duration = Duration::from_millis(100);

/// The catalog changed through this process's own application layer (the API, the web UI,
/// an `OpsHandle`): look now rather than at the next check.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Look;

/// A run_always job waiting for a run in flight looks at the catalog this often, besides the
/// run events it receives: the run may be another node's, or its event lost to a reload.
const RECHECK_IN_FLIGHT: i64 = 5_000;

/// A load that parsed at least this many schedules gives the memory its parsing freed back to
/// the system (validating and compiling a cron expression allocates about 10 KB, most of it
/// freed at once, and glibc keeps freed memory).
const TRIM_AFTER_PARSING: usize = 100;

/// A load's batch of next runs waits this long before it goes to the writer: a node that just
/// loaded its jobs has slots to decide and runs to claim first (queued behind the batch's
/// commit, the first run of a per-second job started up to 700 ms after its slot on a loaded
/// machine); an operator reading the value waits no longer than a catalog check or two.
const RECORD_AFTER_LOAD: Duration = Duration::from_millis(300);

/// After a failed attempt to record due decisions, wait this long before the next.
const RETRY_AFTER_ERROR: i64 = 1_000;

/// Re-read the catalog's jobs (someone edited it).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Reload;

/// The processors to wake, by processor id.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SetProcessors(pub HashMap<i64, Addr<Processor>>);

/// Queue runs of a job now, one per parameter set, in one transaction; answers their ids.
#[derive(Message)]
#[rtype(result = "Result<Vec<i64>, CatalogError>")]
pub struct Trigger {
    /// The job's name.
    pub job: String,
    /// Parameters for each run (a JSON object overlaying the payload, or none).
    pub params: Vec<Option<Json>>,
    /// Who asked, for the audit row.
    pub actor: String,
    /// A start deadline for each run, ms from now: not started by then, it ends `expired`.
    pub start_within: Option<i64>,
    /// The span the runs execute under as children (the caller's current span).
    pub parent: tracing::Span,
}

/// Queue a child run of a running run, in its tree; answers the child's id. Its processor is
/// woken through the writer's hook, like every run a verb queues as a side effect.
#[derive(Message)]
#[rtype(result = "Result<i64, CatalogError>")]
pub struct Spawn {
    /// The running run whose child it is.
    pub parent: i64,
    /// The child's job.
    pub job: String,
    /// Its parameters (a JSON object overlaying the job's payload), or none.
    pub params: Option<Json>,
    /// Who asked, for the audit row.
    pub actor: String,
}

/// Runs were queued as a side effect of another write (a workflow's next steps by a completion,
/// a child spawned by a running function): wake their processors. Sent by the CatalogWriter's
/// hook ([`DbWriter::on_queued`]) after the commit.
#[derive(Message)]
#[rtype(result = "()")]
pub struct QueuedElsewhere(pub Vec<crate::catalog::tree::Queued>);

/// Stop (true) or resume (false) firing schedules.
#[derive(Message)]
#[rtype(result = "()")]
pub struct PauseSchedules(pub bool);

struct Entry {
    job: ScheduledJob,
    planner: JobPlanner,
    /// When its planner last decided against the catalog's counts.
    checked_at: i64,
    /// Its next run as the catalog holds it for this node (`job_activation.next_run_at`).
    shown: Option<i64>,
}

/// The Scheduler actor.
pub struct Scheduler {
    node_id: i64,
    reader: Reader,
    writer: DbWriter,
    clock: Arc<dyn Clock>,
    tz: Tz,
    entries: HashMap<i64, Entry>,
    processors: HashMap<i64, Addr<Processor>>,
    timer: Option<SpawnHandle>,
    ticking: bool,
    /// Runs that ended while due planners were away deciding, by job: the planners that come
    /// back learn of them (else a run_always job forgot its run's end and ran again at once).
    ended_while_deciding: Vec<(i64, i64)>,
    /// Loads of the schedules in flight, and the run ends heard meanwhile: a planner restored
    /// from a history read before such an end would count that run in flight until its next
    /// look at the catalog (`RECHECK_IN_FLIGHT`), so `install` replays the ends it did not see.
    loading: u32,
    ended_while_loading: Vec<(i64, i64)>,
    tick_again: bool,
    /// Counts installs: planners coming back from the writer replace only the same install's.
    installs: u64,
    /// No tick records anything before this instant (a write failed).
    retry_at: i64,
    paused: bool,
    watch: Option<Watch>,
    /// How often `watch` is looked at.
    watch_every: Duration,
    on_reload: Option<Recipient<Reload>>,
    /// The embedding application's subscribers, and the runs' parent spans.
    events: Arc<EventBus>,
    /// Cron expressions compiled once for all the jobs that use them.
    crons: CronCache,
}

impl Scheduler {
    /// A scheduler over the catalog read through `reader` and written through `writer`;
    /// `watch` detects changes made by others.
    pub fn new(
        node_id: i64,
        reader: Reader,
        writer: DbWriter,
        clock: Arc<dyn Clock>,
        tz: Tz,
        watch: Watch,
        on_reload: Option<Recipient<Reload>>,
    ) -> Self {
        Self {
            node_id,
            reader,
            writer,
            clock,
            tz,
            entries: HashMap::new(),
            processors: HashMap::new(),
            timer: None,
            ticking: false,
            ended_while_deciding: Vec::new(),
            loading: 0,
            ended_while_loading: Vec::new(),
            tick_again: false,
            installs: 0,
            retry_at: i64::MIN,
            paused: false,
            watch: Some(watch),
            watch_every: WATCH_INTERVAL,
            on_reload,
            events: Arc::default(),
            crons: CronCache::default(),
        }
    }

    /// Tells `events` the runs it queues, and gives their parent spans to the processors.
    pub fn with_events(mut self, events: Arc<EventBus>) -> Self {
        self.events = events;
        self
    }

    /// Looks at the catalog for other processes' changes every `every`.
    pub fn watch_every(mut self, every: Duration) -> Self {
        self.watch_every = every;
        self
    }

    fn reload(&mut self, ctx: &mut Context<Self>) {
        let (reader, node) = (self.reader.clone(), self.node_id);
        // The watch keeps the generation it last saw, whatever this load read: a change
        // committed during the load shows at the next poll and loads again.
        let load = actix_rt::task::spawn_blocking(move || {
            Ok::<_, CatalogError>((reader.scheduled(node)?, reader.next_runs(node)?))
        });
        self.loading += 1;
        ctx.spawn(load.into_actor(self).map(|joined, act, ctx| {
            act.loading -= 1;
            match joined {
                Ok(Ok((jobs, recorded))) => {
                    act.install(jobs, &recorded);
                    act.tick(ctx);
                    act.record_next_runs(recorded, ctx);
                }
                Ok(Err(e)) => tracing::error!("loading schedules: {e}"),
                Err(e) => tracing::error!("loading schedules panicked: {e}"),
            }
            if act.loading == 0 {
                act.ended_while_loading.clear();
            }
        }));
    }

    /// Plans `jobs`; `recorded` is what the catalog holds as their next runs on this node.
    fn install(&mut self, jobs: Vec<ScheduledJob>, recorded: &[NextRun]) {
        let shown: HashMap<i64, i64> = recorded
            .iter()
            .filter_map(|n| Some((n.job_id, n.at?)))
            .collect();
        let mut entries = HashMap::with_capacity(jobs.len());
        let mut old = std::mem::take(&mut self.entries);
        let mut parsed = 0;
        let mut restored = Vec::new();
        for job in jobs {
            // A job whose plan did not change keeps its planner (a re-lived span, the counts,
            // where it is in stretched slots); only the stretch the policy set may change.
            let previous = match old.remove(&job.job_id) {
                Some(mut entry) if same_plan(&entry.job, &job) => {
                    entry.planner.set_stretch(job.stretch);
                    entry.shown = shown.get(&job.job_id).copied();
                    entries.insert(job.job_id, Entry { job, ..entry });
                    continue;
                }
                other => other,
            };
            parsed += 1;
            let schedule = match Schedule::parse_shared(&job.spec, self.tz, &mut self.crons) {
                Ok(s) => s,
                Err(errors) => {
                    let why: Vec<String> = errors
                        .iter()
                        .map(|e| format!("{}: {}", e.field, e.reason))
                        .collect();
                    tracing::warn!(job = %job.name, "schedule ignored: {}", why.join("; "));
                    continue;
                }
            };
            if schedule.is_on_demand() {
                continue;
            }
            let mut planner = JobPlanner::restore(schedule, job.policy(), job.history());
            planner.set_stretch(job.stretch);
            // A changed plan must not fire a stretched job's slot early either.
            if let Some(previous) = &previous {
                planner.continue_from(&previous.planner);
            }
            restored.push(job.job_id);
            entries.insert(
                job.job_id,
                Entry {
                    shown: shown.get(&job.job_id).copied(),
                    job,
                    planner,
                    checked_at: i64::MIN,
                },
            );
        }
        // Ends heard while this load read the catalog, which a restored planner's history may
        // not hold yet (its latest end is older): a kept planner heard them itself.
        for &(job_id, at) in &self.ended_while_loading {
            if let Some(e) = entries.get_mut(&job_id)
                && restored.contains(&job_id)
                && e.planner.history().last_end.is_none_or(|end| end < at)
            {
                e.planner.handle_run_finished(at);
            }
        }
        self.entries = entries;
        // The planners of jobs that changed or went away are dropped by now.
        drop(old);
        self.crons.retain_used();
        if parsed >= TRIM_AFTER_PARSING {
            super::release_freed_memory();
        }
        tracing::info!(
            jobs = self.entries.len(),
            cron_expressions = self.crons.len(),
            "schedules loaded"
        );
        self.installs += 1;
    }

    /// After a load: records the next run of every planned job whose value changed, and
    /// clears the values `recorded` holds for jobs this node no longer plans (disabled, on
    /// demand, deactivated here), in one batch.
    fn record_next_runs(&mut self, recorded: Vec<NextRun>, ctx: &mut Context<Self>) {
        let now = self.clock.now_ms();
        let planned: Vec<i64> = self.entries.keys().copied().collect();
        let mut changed = self.next_run_changes(&planned, now);
        changed.extend(
            recorded
                .into_iter()
                .filter(|n| !self.entries.contains_key(&n.job_id))
                .map(|n| NextRun {
                    job_id: n.job_id,
                    at: None,
                }),
        );
        if !changed.is_empty() {
            ctx.run_later(RECORD_AFTER_LOAD, move |act, ctx| {
                act.write_next_runs(changed, ctx)
            });
        }
    }

    /// The next runs of jobs `ids` that differ from what the catalog holds; the entries take
    /// them as held (the caller records them). A job due now is left out: the tick that
    /// follows decides its slot, which moves its next run, and records it (a planner not yet
    /// polled since a load would show a slot long past).
    fn next_run_changes(&mut self, ids: &[i64], now: i64) -> Vec<NextRun> {
        let mut changed = Vec::new();
        for &job_id in ids {
            let Some(entry) = self.entries.get(&job_id) else {
                continue;
            };
            if self.wake_of(entry, now).is_some_and(|w| w <= now) {
                continue;
            }
            let Some(entry) = self.entries.get_mut(&job_id) else {
                continue;
            };
            let at = entry.planner.next_run(now);
            if at != entry.shown {
                entry.shown = at;
                changed.push(NextRun { job_id, at });
            }
        }
        changed
    }

    /// Records next runs in one transaction (nothing when none changed). A failed write is
    /// logged: the catalog keeps the old values until the jobs' next decided slots record theirs.
    fn write_next_runs(&mut self, changed: Vec<NextRun>, ctx: &mut Context<Self>) {
        if changed.is_empty() {
            return;
        }
        let (writer, node) = (self.writer.clone(), self.node_id);
        let write = async move { writer.record_next_runs(node, changed).await };
        ctx.spawn(write.into_actor(self).map(|result, _, _| {
            if let Err(e) = result {
                super::log_write_error("recording next runs", &e);
            }
        }));
    }

    /// Sends the due planners into the writer's transaction, which decides and records their
    /// slots there (module docs), then re-arms the timer.
    fn tick(&mut self, ctx: &mut Context<Self>) {
        if self.paused {
            return;
        }
        if self.ticking {
            self.tick_again = true;
            return;
        }
        let now = self.clock.now_ms();
        let due: Vec<DueJob> = if now < self.retry_at {
            Vec::new()
        } else {
            self.entries
                .values()
                .filter(|e| self.wake_of(e, now).is_some_and(|w| w <= now))
                .map(|e| DueJob {
                    job_id: e.job.job_id,
                    name: e.job.name.clone(),
                    processor_id: e.job.processor_id,
                    priority: e.job.priority,
                    planner: e.planner.clone(),
                    shown: e.shown,
                })
                .collect()
        };
        if due.is_empty() {
            self.arm(now, ctx);
            return;
        }
        self.ticking = true;
        let installs = self.installs;
        let writer = self.writer.clone();
        let node = self.node_id;
        let decide = async move { writer.decide_due(node, due, now).await };
        ctx.spawn(decide.into_actor(self).map(move |result, act, ctx| {
            act.ticking = false;
            match result {
                Ok(decided) => act.on_decided(decided, installs, now, ctx),
                Err(e) => {
                    super::log_write_error("recording due slots", &e);
                    act.retry_at = now + RETRY_AFTER_ERROR;
                }
            }
            if std::mem::take(&mut act.tick_again) {
                act.tick(ctx);
            } else {
                act.arm(now, ctx);
            }
        }));
    }

    /// Takes back the planners that decided in the writer, and wakes the processors that got
    /// runs (with the highest priority queued for each).
    fn on_decided(&mut self, decided: Decided, installs: u64, now: i64, ctx: &mut Context<Self>) {
        let mut replanned = Vec::new();
        let ended = std::mem::take(&mut self.ended_while_deciding);
        for due in decided.jobs {
            let Some(entry) = self.entries.get_mut(&due.job_id) else {
                continue;
            };
            // What the catalog holds now, whichever install decided.
            entry.shown = due.shown;
            if installs == self.installs {
                entry.planner = due.planner;
                entry.checked_at = now;
                let mut replayed = false;
                for (_, at) in ended.iter().filter(|(job, _)| *job == due.job_id) {
                    entry.planner.handle_run_finished(*at);
                    replayed = true;
                }
                if replayed {
                    replanned.push(due.job_id);
                }
            } else {
                // A load replaced the planner meanwhile: its next run may differ.
                replanned.push(due.job_id);
            }
        }
        if !replanned.is_empty() {
            let changed = self.next_run_changes(&replanned, now);
            self.write_next_runs(changed, ctx);
        }
        wake_processors(&self.processors, decided.fired);
    }

    /// When an entry wants a poll: its planner's wake-up, or for a run_always job held back by
    /// a run in flight, a look at the catalog every `RECHECK_IN_FLIGHT`.
    fn wake_of(&self, entry: &Entry, now: i64) -> Option<i64> {
        entry.planner.next_wake(now).or_else(|| {
            let waiting = entry.planner.history().in_flight() > 0;
            (entry.planner.schedule().run_always_delay().is_some() && waiting)
                .then(|| entry.checked_at.saturating_add(RECHECK_IN_FLIGHT))
        })
    }

    /// One timer, for the earliest wake-up of any planner.
    fn arm(&mut self, now: i64, ctx: &mut Context<Self>) {
        if let Some(h) = self.timer.take() {
            ctx.cancel_future(h);
        }
        let Some(next) = self
            .entries
            .values()
            .filter_map(|e| self.wake_of(e, now))
            .min()
        else {
            return;
        };
        let next = next.max(self.retry_at);
        // A wake-up at or before now means work the last poll could not do (e.g. an overlap):
        // look again shortly rather than spin.
        let delay = if next <= now { 50 } else { (next - now) as u64 };
        self.timer = Some(ctx.run_later(Duration::from_millis(delay), |act, ctx| {
            act.timer = None;
            act.tick(ctx);
        }));
    }

    /// Cheap change detection: `data_version` moves when another connection commits; the
    /// generation moves only when a definition changed.
    fn watch(&mut self, ctx: &mut Context<Self>) {
        let Some(watch) = &mut self.watch else { return };
        let changed = watch.poll();
        if changed == Changed::Nothing {
            return;
        }
        // Another process may have queued runs (a trigger from the CLI).
        for p in self.processors.values() {
            p.do_send(Wake);
        }
        if changed == Changed::Generation {
            tracing::info!(
                generation = watch.generation(),
                "catalog changed; reloading"
            );
            if let Some(r) = &self.on_reload {
                r.do_send(Reload);
            }
            self.reload(ctx);
        }
    }
}

/// Tells each processor of `queued` runs (processor id, priority) how many it got and the
/// highest priority among them.
fn wake_processors(
    processors: &HashMap<i64, Addr<Processor>>,
    queued: impl IntoIterator<Item = (i64, i64)>,
) {
    let mut woken: HashMap<i64, Enqueued> = HashMap::new();
    for (pid, priority) in queued {
        let e = woken.entry(pid).or_insert(Enqueued { priority, runs: 0 });
        e.priority = e.priority.max(priority);
        e.runs += 1;
    }
    for (pid, enqueued) in woken {
        if let Some(p) = processors.get(&pid) {
            p.do_send(enqueued);
        }
    }
}

/// Whether two loads of a job plan it the same way (its planner can be kept).
fn same_plan(a: &ScheduledJob, b: &ScheduledJob) -> bool {
    a.spec == b.spec
        && a.processor_id == b.processor_id
        && a.priority == b.priority
        && a.misfire == b.misfire
        && a.misfire_window == b.misfire_window
        && a.max_catchup == b.max_catchup
        && a.overlap == b.overlap
        && a.max_overlap == b.max_overlap
}

impl Actor for Scheduler {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.set_mailbox_capacity(65_536);
        // Runs that completions and spawns queue are announced here, to wake their processors
        // (the scheduler knows them all). A restart installs the hook again.
        let me = ctx.address();
        self.writer.on_queued(Box::new(move |queued| {
            me.do_send(QueuedElsewhere(queued.to_vec()))
        }));
        self.reload(ctx);
        ctx.run_interval(self.watch_every, |act, ctx| act.watch(ctx));
    }
}

impl Supervised for Scheduler {
    fn restarting(&mut self, _: &mut Context<Self>) {
        tracing::warn!("scheduler restarting");
        self.ticking = false;
        self.ended_while_deciding.clear();
    }
}

impl Handler<Reload> for Scheduler {
    type Result = ();
    fn handle(&mut self, _: Reload, ctx: &mut Context<Self>) {
        self.reload(ctx);
    }
}

impl Handler<SetProcessors> for Scheduler {
    type Result = ();
    fn handle(&mut self, msg: SetProcessors, _: &mut Context<Self>) {
        self.processors = msg.0;
        // Runs fired before a processor was known here were not announced to it.
        for p in self.processors.values() {
            p.do_send(Wake);
        }
    }
}

impl Handler<Spawn> for Scheduler {
    type Result = ResponseFuture<Result<i64, CatalogError>>;

    fn handle(&mut self, msg: Spawn, _: &mut Context<Self>) -> Self::Result {
        let writer = self.writer.clone();
        let now = self.clock.now_ms();
        Box::pin(async move {
            writer
                .spawn(msg.parent, msg.job, msg.params, now, Some(msg.actor))
                .await
        })
    }
}

/// After a [`Look`], the watch is looked at once more this much later: on PostgreSQL the
/// change's notification travels on a connection of its own and may arrive just after.
const LOOK_AGAIN: Duration = Duration::from_millis(50);

impl Handler<Look> for Scheduler {
    type Result = ();
    fn handle(&mut self, _: Look, ctx: &mut Context<Self>) {
        self.watch(ctx);
        ctx.run_later(LOOK_AGAIN, |act, ctx| act.watch(ctx));
    }
}

impl Handler<QueuedElsewhere> for Scheduler {
    type Result = ();
    fn handle(&mut self, msg: QueuedElsewhere, _: &mut Context<Self>) {
        let queued = msg.0.iter().map(|q| (q.processor_id, q.priority));
        wake_processors(&self.processors, queued);
    }
}

impl Handler<PauseSchedules> for Scheduler {
    type Result = ();
    fn handle(&mut self, msg: PauseSchedules, ctx: &mut Context<Self>) {
        self.paused = msg.0;
        if self.paused {
            if let Some(h) = self.timer.take() {
                ctx.cancel_future(h);
            }
        } else {
            self.tick(ctx);
        }
    }
}

impl Handler<RunEvents> for Scheduler {
    type Result = ();
    fn handle(&mut self, msg: RunEvents, ctx: &mut Context<Self>) {
        let now = self.clock.now_ms();
        // Whether a job that just finished a run is due now (run_always, or a slot refused by
        // overlap), and whether any run of a planned job finished at all.
        let (mut due, mut any_finished) = (false, false);
        // Jobs whose run ended: their next run may have become known (a run_always job's end
        // plus its delay).
        let mut ended = Vec::new();
        for event in msg.0 {
            let (job_id, at, finished) = match event {
                RunEvent::Started(job, at) => (job, at, false),
                RunEvent::Finished(job, at) => (job, at, true),
            };
            if finished && self.loading > 0 {
                self.ended_while_loading.push((job_id, at));
            }
            let Some(entry) = self.entries.get_mut(&job_id) else {
                continue;
            };
            if finished {
                entry.planner.handle_run_finished(at);
                if self.ticking {
                    self.ended_while_deciding.push((job_id, at));
                }
                any_finished = true;
                due |= entry.planner.next_wake(now).is_some_and(|w| w <= now);
                ended.push(job_id);
            } else {
                entry.planner.handle_run_started(at);
            }
        }
        let changed = self.next_run_changes(&ended, now);
        self.write_next_runs(changed, ctx);
        if any_finished && !self.ticking {
            if due {
                self.tick(ctx);
            } else {
                self.arm(now, ctx);
            }
        }
    }
}

impl Handler<Trigger> for Scheduler {
    type Result = ResponseActFuture<Self, Result<Vec<i64>, CatalogError>>;

    fn handle(&mut self, msg: Trigger, _: &mut Context<Self>) -> Self::Result {
        let writer = self.writer.clone();
        let now = self.clock.now_ms();
        let (job, parent) = (msg.job.clone(), msg.parent);
        let insert = async move {
            writer
                .trigger(msg.job, msg.params, now, msg.actor, msg.start_within)
                .await
        };
        Box::pin(insert.into_actor(self).map(move |result, act, _| {
            let queued = result?;
            // Before the processor hears of them: a run may start as soon as it does.
            act.events.set_parent(&queued.run_ids, &parent);
            if act.events.wanted() {
                act.events.publish([Event::Queued {
                    job,
                    run_ids: queued.run_ids.clone(),
                    at: now,
                }]);
            }
            if let Some(p) = act.processors.get(&queued.processor_id) {
                p.do_send(Enqueued {
                    priority: queued.priority,
                    runs: queued.run_ids.len(),
                });
            }
            Ok(queued.run_ids)
        }))
    }
}
