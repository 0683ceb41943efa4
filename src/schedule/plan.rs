//! [`JobPlanner`]: the sans-IO state machine that turns one job's [`Schedule`], its
//! [`PlanPolicy`] and its [`JobHistory`] into [`Decision`]s at `now`, and says when to wake.
//!
//! Invariant: reads no clock and does no IO; it imports neither the actor runtime nor the
//! database driver. Inputs arrive through `handle_*` methods with `now` as an argument;
//! outputs are polled ([`JobPlanner::poll_due`], [`JobPlanner::next_wake`]).
//!
//! Once per slot: a decision names a slot *key* (the run's `scheduled_for`), and no key is
//! decided twice however the clock moves (the catalog's unique `(job_id, scheduled_for)` seen
//! from the inside). While the clock moves forward the key is the slot itself, strictly after
//! [`JobHistory::last_slot`], which never decreases.
//!
//! A clock that steps back (the wall clock now reads before the last decided slot) must neither
//! fire a slot twice nor silence the job for the size of the step. The span the clock repeats is
//! *re-lived* when the step is at least the schedule's period at the last slot (a per-minute job
//! stepped back an hour): its slots fire again by the clock as it now reads, each under the key
//! `slot + n` ms, where `n` counts the re-lived spans of this planner (1, 2, …). Calendar slots
//! fall on whole seconds, so these keys are never natural slots, and a second step back over the
//! same span gets other keys. A step shorter than the period (a daily job stepped back half an
//! hour) re-lives nothing: the job simply waits for its next slot, as cron does for fixed-time
//! jobs, so a daily job does not run twice in an hour. Either way the job fires again within two
//! periods of the step. Re-living ends when the clock passes the last slot decided before the
//! step. A job with no slot decided yet whose start lies ahead of the clock starts from now.
//!
//! Misfire: at a poll, the latest due slot is *on time* when `now - slot <= misfire_window_ms`;
//! every other due slot was *missed* (the node was down, throttled, or the clock jumped: it
//! should have fired earlier). `once` fires the latest slot and coalesces the rest into it;
//! `skip` fires the latest slot only if it is on time; `all` fires every missed slot, the most
//! recent `max_catchup` of them, plus the latest if on time. The missed slots that do not fire
//! are one [`Decision::Drop`] per poll, which the runtime records as one `skipped` row saying
//! how many slots it stands for — not a row per slot (a job activated after an hour in standby,
//! or a node back after a day down, writes one).
//!
//! Backoff: a job whose runs failed several times in a row ([`JobPlanner::handle_failures`])
//! fires no slot until its backoff has passed; the slots passed over are one `Drop` as well,
//! and the planner wakes for the first slot the backoff lets fire, not for each one before.
//!
//! Overlap, against the runs in flight at the poll: the runs of the job executing (on any node)
//! and its slot runs waiting in the queue. The runtime reads both from the catalog in the
//! transaction that records the decisions ([`JobPlanner::handle_in_flight`]), so a node decides
//! from what the database knows — runs fired or finished by other nodes included — not from its
//! own count of the events it saw; manual runs and retries waiting in the queue do not hold a
//! slot back. Then:
//! `forbid` skips every slot of the poll when anything is in flight (the slots of one poll go
//! together, so an `all` catch-up backlog is queued and run one after another); `queue` fires
//! while fewer than `max_queued` runs are in flight; `allow` fires while fewer than
//! `max_concurrent` are. A slot that may not fire is recorded as skipped with the reason.

use crate::schedule::backoff::FailureStreak;
use crate::schedule::calendar::{Kind, Schedule};
use crate::schedule::spec::{MisfirePolicy, OverlapPolicy};

/// At most this many due slots are looked at one by one per poll (a node down for a year with a
/// per-minute job does not enumerate half a million); older ones are counted into the
/// poll's [`Decision::Drop`].
pub const RECORD_LIMIT: usize = 100;

/// The largest accepted `max_catchup` (larger values are clamped to it).
pub const MAX_CATCHUP_LIMIT: u32 = 1000;

/// Counting dropped slots stops after this many; beyond it the count is `None`.
const COUNT_LIMIT: u64 = 100_000;

/// The per-job policy settings the planner applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanPolicy {
    /// What to do with missed slots. Default: `once`.
    pub misfire: MisfirePolicy,
    /// How late (ms) the latest due slot may be polled and still count as on time.
    /// Default: 60 000 (Quartz's misfire threshold).
    pub misfire_window_ms: i64,
    /// With `misfire = all`, at most this many missed slots run (the most recent).
    /// Default: 10; clamped to 1..=[`MAX_CATCHUP_LIMIT`].
    pub max_catchup: u32,
    /// What to do with a slot due while runs are in flight. Default: `forbid`.
    pub overlap: OverlapPolicy,
    /// With `overlap = allow`, at most this many runs in flight at once. Default: 4; min 1.
    pub max_concurrent: u32,
    /// With `overlap = queue`, at most this many runs in flight (one running, the rest
    /// waiting). Default: 10; min 1.
    pub max_queued: u32,
}

impl Default for PlanPolicy {
    fn default() -> Self {
        PlanPolicy {
            misfire: MisfirePolicy::Once,
            misfire_window_ms: 60_000,
            max_catchup: 10,
            overlap: OverlapPolicy::Forbid,
            max_concurrent: 4,
            max_queued: 10,
        }
    }
}

impl PlanPolicy {
    /// The policy of a catalog job's settings (its stored integers, clamped to the planner's
    /// types); the rest as default.
    pub fn of_job(
        misfire: MisfirePolicy,
        misfire_window_ms: i64,
        max_catchup: i64,
        overlap: OverlapPolicy,
        max_overlap: i64,
    ) -> Self {
        PlanPolicy {
            misfire,
            misfire_window_ms,
            max_catchup: max_catchup.clamp(1, u32::MAX as i64) as u32,
            overlap,
            max_concurrent: max_overlap.clamp(1, u32::MAX as i64) as u32,
            ..PlanPolicy::default()
        }
    }

    /// The policy with every number brought into its accepted range.
    pub fn normalized(self) -> Self {
        PlanPolicy {
            misfire_window_ms: self.misfire_window_ms.max(0),
            max_catchup: self.max_catchup.clamp(1, MAX_CATCHUP_LIMIT),
            max_concurrent: self.max_concurrent.max(1),
            max_queued: self.max_queued.max(1),
            ..self
        }
    }

    /// How many runs may be in flight before a new slot is refused.
    fn in_flight_cap(&self) -> u32 {
        match self.overlap {
            OverlapPolicy::Forbid => 1,
            OverlapPolicy::Queue => self.max_queued,
            OverlapPolicy::Allow => self.max_concurrent,
        }
    }
}

/// A job's scheduling history, as the catalog keeps it; enough to restore a planner.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JobHistory {
    /// The latest slot decided (fired or recorded skipped): `max(scheduled_for)` of the
    /// job's runs. Slots at or before it are never due again.
    pub last_slot: Option<i64>,
    /// Slots at or before this instant are never due: the job's creation or activation
    /// time. `None` (with no `last_slot`) makes the first poll set it to `now`, so a new
    /// job starts with the next slot rather than catching up on the past.
    pub since: Option<i64>,
    /// When the latest run began.
    pub last_begin: Option<i64>,
    /// When the latest run ended.
    pub last_end: Option<i64>,
    /// Runs executing.
    pub running: u32,
    /// Slot runs fired (queued) but not yet started.
    pub queued: u32,
}

impl JobHistory {
    /// Runs fired or started and not yet finished.
    pub fn in_flight(&self) -> u32 {
        self.running + self.queued
    }
}

/// Why a slot does not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SkipReason {
    /// Runs of the job were in flight and the overlap policy refused another.
    Overlap,
    /// The slot was missed and the misfire policy is `skip`.
    Misfire,
    /// The slot was missed and is covered by the one catch-up run of misfire policy `once`.
    Coalesced,
    /// The slot was missed and is older than the `max_catchup` most recent (policy `all`).
    CatchupLimit,
    /// The job failed several times in a row and backs off ([`crate::schedule::backoff`]).
    Backoff,
}

impl SkipReason {
    /// Every variant, in declaration order.
    pub const ALL: [SkipReason; 5] = [
        SkipReason::Overlap,
        SkipReason::Misfire,
        SkipReason::Coalesced,
        SkipReason::CatchupLimit,
        SkipReason::Backoff,
    ];

    /// A stable token, for the run's error column and metrics labels.
    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::Overlap => "overlap",
            SkipReason::Misfire => "misfire",
            SkipReason::Coalesced => "coalesced",
            SkipReason::CatchupLimit => "catchup_limit",
            SkipReason::Backoff => "backoff",
        }
    }

    /// A sentence for the operator.
    pub fn explain(self) -> &'static str {
        match self {
            SkipReason::Overlap => "skipped: the previous run was still in flight (overlap policy)",
            SkipReason::Misfire => "skipped: the slot was missed (misfire policy skip)",
            SkipReason::Coalesced => "skipped: covered by one catch-up run (misfire policy once)",
            SkipReason::CatchupLimit => {
                "skipped: older than the max_catchup most recent missed slots"
            }
            SkipReason::Backoff => {
                "skipped: the job backs off after consecutive failed runs (one success ends it)"
            }
        }
    }
}

/// What the runtime should do about one slot (or a range of old slots).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Enqueue a run with `scheduled_for = slot`.
    Fire {
        /// The slot, epoch ms.
        slot: i64,
        /// True when the run stands for one or more missed slots.
        catch_up: bool,
    },
    /// Record a `skipped` run with `scheduled_for = slot` and the reason.
    Skip {
        /// The slot, epoch ms.
        slot: i64,
        /// Why it does not run.
        reason: SkipReason,
    },
    /// Slots that do not run, summarised (missed slots a misfire policy does not fire, slots
    /// passed over while the job backs off): one `skipped` row stands for all of them.
    Drop {
        /// The oldest dropped slot.
        first: i64,
        /// The newest dropped slot.
        last: i64,
        /// How many; `None` when there were too many to count cheaply.
        count: Option<u64>,
        /// Why they do not run.
        reason: SkipReason,
    },
}

impl Decision {
    /// The slot a `Fire` or `Skip` names (`None` for `Drop`).
    pub fn slot(&self) -> Option<i64> {
        match *self {
            Decision::Fire { slot, .. } | Decision::Skip { slot, .. } => Some(slot),
            Decision::Drop { .. } => None,
        }
    }
}

/// The keys a decision's slot may be recorded under, best first: the key itself, and for a
/// re-lived slot (a key off the whole second) the following free keys within its second, for
/// when a planner restored after a restart picked a key that an earlier re-lived span used.
pub fn slot_keys(key: i64) -> impl Iterator<Item = i64> {
    let within = key.rem_euclid(1000);
    let last = if within == 0 { key } else { key - within + 999 };
    key..=last
}

/// The per-job scheduling state machine. One per scheduled job, owned by the runtime.
#[derive(Debug, Clone)]
pub struct JobPlanner {
    schedule: Schedule,
    policy: PlanPolicy,
    hist: JobHistory,
    /// `next_slot_after(floor)`, kept because the floor only moves in `poll_due`; this is
    /// what makes `next_wake` over a whole catalog cheap.
    next_slot: Option<(i64, Option<i64>)>,
    /// While the clock is behind the last decided slot and the span is being re-lived: the
    /// latest wall-clock slot re-lived so far (slots after it are due as the clock passes them).
    relive: Option<i64>,
    /// Spans re-lived by this planner: the key offset of the current one (see module docs).
    relived_spans: i64,
    /// The factor the node stretched the period by (1: as scheduled; see
    /// [`JobPlanner::set_stretch`]).
    stretch: u32,
    /// Due slots still to pass over before the next one fires (stretched slot schedules).
    pass: u32,
    /// No slot fires before this instant: the job keeps failing ([`FailureStreak`]).
    backoff_until: Option<i64>,
}

impl JobPlanner {
    /// A planner for a job with no history: its first poll anchors it (see
    /// [`JobHistory::since`]).
    pub fn new(schedule: Schedule, policy: PlanPolicy) -> Self {
        Self::restore(schedule, policy, JobHistory::default())
    }

    /// A planner restored from the catalog (after a restart or a schedule edit).
    pub fn restore(schedule: Schedule, policy: PlanPolicy, history: JobHistory) -> Self {
        let mut p = JobPlanner {
            schedule,
            policy: policy.normalized(),
            hist: history,
            next_slot: None,
            relive: None,
            relived_spans: 0,
            stretch: 1,
            pass: 0,
            backoff_until: None,
        };
        p.refresh_next();
        p
    }

    /// The schedule.
    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    /// The (normalized) policy.
    pub fn policy(&self) -> &PlanPolicy {
        &self.policy
    }

    /// The state to persist (and to restore from).
    pub fn history(&self) -> &JobHistory {
        &self.hist
    }

    /// Stretches the period by `factor` (1: as scheduled), as the activation policy decides
    /// under strain. A slot schedule (every, hourly, daily, cron) fires one due slot in
    /// `factor` and passes over the others without a row; `run_always` waits `factor` times
    /// its period (its run plus `run_delay`) between the end of a run and the next.
    pub fn set_stretch(&mut self, factor: u32) {
        self.stretch = factor.max(1);
        self.pass = self.pass.min(self.stretch - 1);
    }

    /// The stretch factor in force.
    pub fn stretch(&self) -> u32 {
        self.stretch
    }

    /// Takes over where `old` (the planner this one replaces after a catalog reload) was in
    /// its stretched slots, so that a reload does not fire a slot early.
    pub fn continue_from(&mut self, old: &JobPlanner) {
        self.pass = old.pass.min(self.stretch - 1);
    }

    /// `delay_ms` of a run_always job, stretched: the period (the last run's length plus the
    /// delay) times the factor, less the run's length.
    fn stretched_delay(&self, delay_ms: i64) -> i64 {
        if self.stretch <= 1 {
            return delay_ms;
        }
        let elapsed = match (self.hist.last_begin, self.hist.last_end) {
            (Some(b), Some(e)) if e >= b => e - b,
            _ => 0,
        };
        let f = i64::from(self.stretch);
        delay_ms
            .saturating_mul(f)
            .saturating_add(elapsed.saturating_mul(f - 1))
    }

    /// A run of this job began: a fired one leaving the queue, or a manual trigger.
    pub fn handle_run_started(&mut self, now_ms: i64) {
        self.hist.last_begin = Some(now_ms);
        // A start while runs are queued is taken to be one of them; if it was in fact a
        // manual run, the totals stay right and only which one is "queued" is swapped.
        self.hist.queued = self.hist.queued.saturating_sub(1);
        self.hist.running += 1;
    }

    /// A run of this job ended (any outcome), or a queued run was removed unstarted.
    pub fn handle_run_finished(&mut self, now_ms: i64) {
        if self.hist.running > 0 {
            self.hist.running -= 1;
        } else {
            self.hist.queued = self.hist.queued.saturating_sub(1);
        }
        self.hist.last_end = Some(now_ms);
    }

    /// The job's failure streak as the catalog knows it: after a few consecutive failures no
    /// slot fires until its backoff has passed ([`FailureStreak::backoff_until`]); the slots
    /// passed over are summarised in one [`Decision::Drop`].
    pub fn handle_failures(&mut self, streak: FailureStreak) {
        self.backoff_until = streak.backoff_until();
    }

    /// Until when the job backs off, if it does.
    pub fn backoff_until(&self) -> Option<i64> {
        self.backoff_until
    }

    /// What the catalog says is in flight now: runs of the job executing on any node, and its
    /// slot runs queued. The counts kept from run events are a cache between polls; this is
    /// the truth the next [`poll_due`](Self::poll_due) decides from.
    pub fn handle_in_flight(&mut self, running: u32, queued: u32) {
        self.hist.running = running;
        self.hist.queued = queued;
    }

    /// A fired slot's key was already in the catalog (another node decided it first): no run
    /// was queued for it here.
    pub fn handle_slot_taken(&mut self, _slot: i64) {
        self.hist.queued = self.hist.queued.saturating_sub(1);
    }

    /// Whether the clock went back behind the last decided slot and that span is re-lived.
    pub fn is_reliving(&self) -> bool {
        self.relive.is_some()
    }

    fn floor(&self) -> Option<i64> {
        match (self.hist.last_slot, self.hist.since) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }

    /// Where due slots start: the re-live cursor while re-living, else the floor.
    fn cursor(&self) -> Option<i64> {
        self.relive.or_else(|| self.floor())
    }

    fn refresh_next(&mut self) {
        self.next_slot = self.cursor().map(|f| (f, self.schedule.next_slot_after(f)));
    }

    /// The clock reads `now_ms`, before where due slots start: decide whether the repeated
    /// span is re-lived (module docs). Returns true when it is.
    fn clock_went_back(&mut self, now_ms: i64) -> bool {
        let Some(last) = self.hist.last_slot else {
            // Nothing decided yet: start from now rather than wait for the old start.
            self.hist.since = Some(now_ms);
            self.refresh_next();
            return false;
        };
        if self.relive.is_none() && last < self.hist.since.unwrap_or(i64::MIN) {
            // The floor is the start (activation), not a decided slot: start from now.
            self.hist.since = Some(now_ms);
            self.refresh_next();
            if now_ms >= last {
                return false;
            }
        }
        if self.steps_back_a_period(now_ms) {
            self.relive = Some(now_ms);
            self.relived_spans = self.relived_spans % 999 + 1;
            self.refresh_next();
            return true;
        }
        false
    }

    /// Whether the clock reads at least a period before the latest slot it already went
    /// through (the re-live cursor, or the last slot): a step back that re-lives the span.
    fn steps_back_a_period(&self, now_ms: i64) -> bool {
        let Some(passed) = self.relive.or(self.hist.last_slot) else {
            return false;
        };
        let period = self.schedule.next_slot_after(passed).map(|n| n - passed);
        period.is_some_and(|p| passed - now_ms >= p)
    }

    /// Whether a poll at `now_ms` has the clock's step back to handle
    /// ([`clock_went_back`](Self::clock_went_back) would change something): the clock reads
    /// before where due slots start, and either nothing is decided yet, the start lies ahead,
    /// or the step is a period or more. A shorter step needs no poll: the job waits for its
    /// next slot.
    fn must_rebase(&self, now_ms: i64) -> bool {
        let Some(from) = self.cursor() else {
            return false;
        };
        if now_ms >= from {
            return false;
        }
        match self.hist.last_slot {
            None => true,
            Some(last) => {
                (self.relive.is_none() && last < self.hist.since.unwrap_or(i64::MIN))
                    || self.steps_back_a_period(now_ms)
            }
        }
    }

    /// When the runtime should poll next: an instant at or before `now_ms` means "poll now";
    /// `None` means no timer is needed (on demand, or waiting for a run to end).
    /// After [`poll_due`](Self::poll_due) at `now_ms`, the answer is never at or before
    /// `now_ms` unless that poll left work it could not do.
    pub fn next_wake(&self, now_ms: i64) -> Option<i64> {
        match self.schedule.kind() {
            Kind::OnDemand => None,
            Kind::Always { delay_ms } => self.always_due(now_ms, *delay_ms),
            // The clock went back: poll now, or the timer would sleep until the clock reads
            // the old slots again (fault scenario 4 found a per-second job silent for the hour).
            _ if self.must_rebase(now_ms) => Some(now_ms),
            _ => {
                let next = match (self.cursor(), self.next_slot) {
                    (Some(f), Some((cached_floor, next))) if f == cached_floor => next,
                    (Some(f), _) => self.schedule.next_slot_after(f),
                    (None, _) => self.schedule.next_slot_after(now_ms),
                };
                // Backing off: the first slot the backoff lets fire; the ones before it are
                // summarised then, in one poll, not one wake-up each.
                match self.backoff_until.filter(|u| *u > now_ms) {
                    Some(until) => match next {
                        Some(n) if n >= until => Some(n),
                        _ => self.schedule.next_slot_after(until - 1),
                    },
                    None => next,
                }
            }
        }
    }

    /// When the job runs next, as an operator reads it (`next_run_at`): the next slot that
    /// fires — after the backoff, past the slots a stretch passes over — or, for a run_always
    /// job, when it is next eligible (`None` while a run in flight holds it: not known yet).
    /// `None` for an on-demand job and a schedule with no slot left (a past `run_date`).
    /// Unlike [`next_wake`](Self::next_wake) it never answers "poll now" for a clock step: a
    /// calendar job whose clock went back runs next at the first slot after `now_ms`.
    pub fn next_run(&self, now_ms: i64) -> Option<i64> {
        let next = match self.schedule.kind() {
            Kind::OnDemand => return None,
            Kind::Always { delay_ms } => return self.always_due(now_ms, *delay_ms),
            _ if self.must_rebase(now_ms) => self.schedule.next_slot_after(now_ms),
            _ => self.next_wake(now_ms),
        };
        // A stretched schedule passes over `pass` due slots before the next one fires.
        (0..self.pass).try_fold(next?, |slot, _| self.schedule.next_slot_after(slot))
    }

    /// The due decisions at `now_ms`, in slot order; they update the planner's history
    /// (fired slots count as queued runs until `handle_run_started`).
    pub fn poll_due(&mut self, now_ms: i64) -> Vec<Decision> {
        match *self.schedule.kind() {
            Kind::OnDemand => Vec::new(),
            Kind::Always { delay_ms } => self.poll_always(now_ms, delay_ms),
            _ => self.poll_calendar(now_ms),
        }
    }

    /// When a run_always job may fire next, or `None` while the overlap policy holds it.
    fn always_due(&self, now_ms: i64, delay_ms: i64) -> Option<i64> {
        let delay_ms = self.stretched_delay(delay_ms);
        let h = &self.hist;
        if let Some(until) = self.backoff_until.filter(|u| *u > now_ms)
            && h.in_flight() == 0
        {
            return Some(until);
        }
        // A history time in the future means the clock went back: ask for a poll now, which
        // re-bases the history on `now` instead of stalling until the clock catches up.
        if h.last_end.is_some_and(|t| t > now_ms) || h.last_begin.is_some_and(|t| t > now_ms) {
            return Some(now_ms);
        }
        if h.in_flight() == 0 {
            match h.last_end.or(h.last_begin) {
                // Saturating: a valid job may wait i64::MAX ms (fuzz corpus `extremes.conf`).
                Some(end) => Some(end.saturating_add(delay_ms)),
                None => Some(h.since.unwrap_or(now_ms).min(now_ms)),
            }
        } else if self.policy.overlap == OverlapPolicy::Allow
            && h.queued == 0
            && h.running < self.policy.max_concurrent
        {
            // Alongside a run in progress, pace from the latest start.
            h.last_begin.map(|b| b.saturating_add(delay_ms))
        } else {
            None
        }
    }

    fn poll_always(&mut self, now_ms: i64, delay_ms: i64) -> Vec<Decision> {
        if self.hist.since.is_none() && self.hist.last_slot.is_none() {
            self.hist.since = Some(now_ms);
        }
        let h = &mut self.hist;
        h.last_end = h.last_end.map(|t| t.min(now_ms));
        h.last_begin = h.last_begin.map(|t| t.min(now_ms));
        let Some(due) = self.always_due(now_ms, delay_ms) else {
            return Vec::new();
        };
        if due > now_ms {
            return Vec::new();
        }
        // The slot key must grow even when the clock went back past the last one.
        let slot = match self.hist.last_slot {
            Some(last) => due.max(last + 1),
            None => due,
        };
        self.hist.last_slot = Some(slot);
        self.hist.queued += 1;
        vec![Decision::Fire {
            slot,
            catch_up: false,
        }]
    }

    fn poll_calendar(&mut self, now_ms: i64) -> Vec<Decision> {
        let floor = match self.floor() {
            Some(f) => f,
            None => {
                self.hist.since = Some(now_ms);
                self.refresh_next();
                return Vec::new();
            }
        };
        let from = self.relive.unwrap_or(floor);
        if now_ms < from && !self.clock_went_back(now_ms) {
            return Vec::new();
        }
        let Some(floor) = self.cursor() else {
            return Vec::new();
        };
        // Fast path: the cached next slot is still in the future.
        if let Some((f, next)) = self.next_slot
            && f == floor
            && next.is_none_or(|n| n > now_ms)
        {
            return Vec::new();
        }
        if now_ms <= floor {
            return Vec::new();
        }
        let mut out = Vec::new();
        let mut floor = floor;
        // Backing off: every slot due before the backoff ends is passed over, in one summary.
        if self.relive.is_none()
            && let Some(until) = self.backoff_until.filter(|u| *u > floor)
        {
            let end = now_ms.min(until - 1);
            if let Some(first) = self.schedule.next_slot_after(floor).filter(|f| *f <= end) {
                let last = self.schedule.prev_slot_at_or_before(end).unwrap_or(first);
                out.push(Decision::Drop {
                    first,
                    last,
                    count: self.count_slots(first, last),
                    reason: SkipReason::Backoff,
                });
                self.decided_up_to(last, now_ms);
                if now_ms < until {
                    return out;
                }
                floor = last;
            }
        }
        let p = self.policy;
        let keep = RECORD_LIMIT.max(p.max_catchup as usize + 1);

        // The most recent `keep` due slots, walking back from now.
        let mut recent = Vec::new();
        let mut t = now_ms;
        while recent.len() < keep {
            match self.schedule.prev_slot_at_or_before(t) {
                Some(s) if s > floor => {
                    recent.push(s);
                    t = s - 1;
                }
                _ => break,
            }
        }
        if recent.is_empty() {
            self.end_relive(now_ms);
            self.refresh_next();
            return Vec::new();
        }
        recent.reverse();
        let latest = *recent.last().unwrap();
        if self.stretch > 1 {
            // Stretched: one due slot in `stretch` fires; the others pass without a row.
            let stretch = self.stretch;
            let mut pass = self.pass;
            recent.retain(|_| {
                if pass > 0 {
                    pass -= 1;
                    false
                } else {
                    pass = stretch - 1;
                    true
                }
            });
            self.pass = pass;
            if recent.is_empty() {
                self.decided_up_to(latest, now_ms);
                return Vec::new();
            }
        }
        // On time or not is the latest slot that may fire (a stretch may have passed over
        // later ones).
        let on_time = now_ms - *recent.last().unwrap() <= p.misfire_window_ms;

        // Older due slots that get no row of their own.
        let older = if recent.len() == keep {
            match self.schedule.next_slot_after(floor) {
                Some(first) if first < recent[0] => {
                    let last = self
                        .schedule
                        .prev_slot_at_or_before(recent[0] - 1)
                        .unwrap_or(first);
                    Some((first, last))
                }
                _ => None,
            }
        } else {
            None
        };
        let missed_any = recent.len() > 1 || older.is_some() || !on_time;

        // Misfire policy: which slots fire, and why the others do not.
        let n = recent.len();
        out.reserve(n + 1);
        let (old_reason, fire): (SkipReason, Vec<bool>) = match p.misfire {
            MisfirePolicy::Once => (SkipReason::Coalesced, (0..n).map(|i| i == n - 1).collect()),
            MisfirePolicy::Skip => (
                SkipReason::Misfire,
                (0..n).map(|i| i == n - 1 && on_time).collect(),
            ),
            MisfirePolicy::All => {
                // Missed slots are all but the latest, plus the latest when late.
                let missed_end = if on_time { n - 1 } else { n };
                let first_kept = missed_end.saturating_sub(p.max_catchup as usize);
                (
                    SkipReason::CatchupLimit,
                    (0..n).map(|i| i >= first_kept).collect(),
                )
            }
        };
        // The missed slots that do not fire are always the oldest ones: one summary for them
        // and for the older slots, not a row each (a job activated after an hour in standby
        // would otherwise write a `skipped` row per slot of that hour).
        let skipped = fire.iter().take_while(|f| !**f).count();
        let summary = match (older, skipped) {
            (None, 0) => None,
            (Some((first, last)), 0) => Some((first, last, self.count_slots(first, last))),
            (older, k) => {
                let count = match older {
                    None => Some(k as u64),
                    Some((f, l)) => self.count_slots(f, l).map(|c| c + k as u64),
                };
                Some((older.map_or(recent[0], |(f, _)| f), recent[k - 1], count))
            }
        };
        // Overlap policy, against what was in flight when the poll began.
        let cap = p.in_flight_cap();
        let blocked_at_start = self.hist.in_flight() >= cap;
        let mut in_flight = self.hist.in_flight();
        // Slots of a re-lived span (at or before the last decided slot) get keys of their own.
        let last = self.hist.last_slot;
        let spans = self.relived_spans;
        let key = |slot: i64| match last {
            Some(l) if slot <= l => slot + spans,
            _ => slot,
        };
        if let Some((first, last, count)) = summary {
            out.push(Decision::Drop {
                first: key(first),
                last: key(last),
                count,
                reason: old_reason,
            });
        }
        for (i, &slot) in recent.iter().enumerate().skip(skipped) {
            let slot = key(slot);
            let allowed = match p.overlap {
                OverlapPolicy::Forbid => !blocked_at_start,
                OverlapPolicy::Queue | OverlapPolicy::Allow => in_flight < cap,
            };
            if allowed {
                in_flight += 1;
                let catch_up = match p.misfire {
                    MisfirePolicy::Once => missed_any,
                    _ => i < n - 1 || !on_time,
                };
                out.push(Decision::Fire { slot, catch_up });
            } else {
                out.push(Decision::Skip {
                    slot,
                    reason: SkipReason::Overlap,
                });
            }
        }
        self.hist.queued += in_flight - self.hist.in_flight();
        self.decided_up_to(latest, now_ms);
        out
    }

    /// Every due slot up to `latest` is decided (fired, skipped, or passed over by a
    /// stretch): the history moves past it, under its re-lived key while a span is re-lived.
    fn decided_up_to(&mut self, latest: i64, now_ms: i64) {
        if self.relive.is_some() {
            let (last, spans) = (self.hist.last_slot, self.relived_spans);
            let key = match last {
                Some(l) if latest <= l => latest + spans,
                _ => latest,
            };
            self.relive = Some(latest);
            self.hist.last_slot = Some(last.map_or(latest, |l| l.max(key)));
            self.end_relive(now_ms);
        } else {
            self.hist.last_slot = Some(latest);
        }
        self.refresh_next();
    }

    /// Re-living ends once the clock has passed the last slot decided before the step.
    fn end_relive(&mut self, now_ms: i64) {
        if self.hist.last_slot.is_some_and(|l| now_ms >= l) {
            self.relive = None;
        }
    }

    /// How many slots lie in `[first, last]`, or `None` past [`COUNT_LIMIT`].
    fn count_slots(&self, first: i64, last: i64) -> Option<u64> {
        if let Kind::Every {
            period_ms,
            gate: None,
            ..
        } = self.schedule.kind()
        {
            return Some(((last - first) / period_ms + 1) as u64);
        }
        let mut count = 1;
        let mut t = first;
        while let Some(next) = self.schedule.next_slot_after(t) {
            if next > last {
                return Some(count);
            }
            count += 1;
            if count > COUNT_LIMIT {
                return None;
            }
            t = next;
        }
        Some(count)
    }
}
