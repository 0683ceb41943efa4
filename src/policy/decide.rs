//! The activation policy as a sans-IO state machine: [`Policy`] takes health samples
//! ([`Policy::handle_sample`]) and the catalog's view of jobs and processors, and says what to
//! do now ([`Policy::poll_decisions`]) — activate, deactivate, stretch or unstretch a job, hold,
//! add or remove a processor instance, pause or resume writes — each [`Decision`] with a reason
//! in words and the sample values behind it.
//!
//! Invariant: reads no clock and does no IO — `now` is an argument; it imports neither actix
//! nor rusqlite. The state kept here is only *timing* (when the last step, shed and toggles
//! were); which jobs are active and how far each is stretched always come from the caller, so
//! the catalog stays the truth.
//!
//! The rules, in the order [`Policy::poll_decisions`] applies them:
//! 1. Disk critical pauses writes once, naming the jobs it holds: every active job outside
//!    maintenance groups — those that write data objects, and those that write nothing but
//!    their runs' history, since the runtime then claims nothing but maintenance runs, and a
//!    job that is stopped must not be listed `active` (issue 18, point 4). Disk back above
//!    critical resumes them once. A catalog write that failed because the disk is full
//!    ([`Policy::handle_write_full`]) pauses them too, until a later sample reads the disk
//!    above critical (issue 12, defect 6). While paused, no job the pause would hold is
//!    activated or unstretched by health (it would only be listed `paused`, spending its flap
//!    budget); pins and the minimum still are, and wait, said in their reason.
//! 2. Pins win: a job pinned active is activated, one pinned inactive deactivated, whatever
//!    the health, the cooldown or the flap budget.
//! 3. The minimum (required, or priority at or above the floor) is always active: a minimum
//!    job found inactive is activated at once, and a minimum job is never shed.
//! 4. Strain (a resource at strained or worse whose latest reading still says so) is relieved
//!    one step at a time, least important work first. Strained: first *stretch* the period
//!    of every recurring job that allows it (`stretch_max`), doubling one job's factor per
//!    step, lowest priority first; only when nothing is left to stretch, *shed* the
//!    lowest-priority job — at once, then one per `step_interval`. Critical (the latest
//!    reading too): shed one job per sample, no stretching. A disk strain asks for writers:
//!    stretch and shed the jobs that write data objects first, and, when only the disk is
//!    strained, nothing else (work that writes nothing frees no space); maintenance jobs are
//!    never shed for the disk's sake.
//! 5. Ok (every level, and every latest reading): undo in reverse, most important first —
//!    restore shed jobs, then bring stretched periods back (halving the factor per step), then
//!    activate standby jobs, one per step (see [`Policy::poll_decisions`] for the timing).
//!    A short disk (strained or worse) keeps back only the jobs that write data objects: the
//!    rest come back once every other resource is ok, as they were not shed for the disk.
//! 6. Processors: one instance step per `step_interval`.
//!
//! Priority order is strict both ways: the job shed is always the lowest-priority one its
//! rule may shed, and the job activated the highest-priority one waiting. When that job has
//! spent its flap budget, the policy *holds* (and says so once, with a `hold` decision) instead
//! of taking the next job: a higher-priority job is never shed while a lower one runs.
//!
//! Anti-flap is three rules. Nothing is activated, restored or unstretched within `cooldown`
//! of a shed or stretch. Nothing is shed or stretched for strain within `cooldown` of a
//! *restore* (strain that returns that soon is flapping). And a job is toggled by health at
//! most twice within `toggle_window` (its *flap budget*, 60 s by default): a decision that
//! would be its third waits. A shed right after a *standby step* is not delayed — the step
//! came after `step_interval` of health, so the job just activated is the likeliest cause of
//! the strain, and shedding is the safe direction — but the flap budget keeps that job from
//! coming straight back. Critical sheds wait for nothing but the flap budget: the node itself
//! is at risk. Pins and the minimum ignore all three.
//!
//! Durations (`step_interval`, `cooldown`) count as reached by a sample up to a quarter of a
//! sample interval early, so a sample that arrives a millisecond early does not cost a whole
//! interval. The flap budget's window is exact.
//!
//! This file holds the state, the entry points, the pins and the minimum (rules 2–3) and the
//! writes pause (rule 1); `strain.rs` relieves strain and undoes it (rules 4–5), `instances.rs`
//! steps processor instances (rule 6).

use std::collections::{BTreeMap, BTreeSet};

use crate::policy::{
    Action, Cause, Decision, Evidence, Health, JobView, Level, Pin, PolicyConfig, ProcessorView,
    Resource, Sample,
};

mod instances;
mod strain;

/// The sans-IO activation policy of one node.
///
/// The runtime feeds every health sample to [`Policy::handle_sample`] and then calls
/// [`Policy::poll_decisions`] with the catalog's current state; it carries out every decision
/// before the next poll (a decision not reflected in the next call's views is simply decided
/// again when its rule next allows).
#[derive(Debug, Clone)]
pub struct Policy {
    cfg: PolicyConfig,
    health: Health,
    /// When the node's overall level last became ok (`None` while it is not, or before any
    /// sample: the policy activates nothing on no evidence).
    ok_since: Option<i64>,
    /// The last health increase (standby step, restore or unstretch).
    last_increase: Option<i64>,
    /// The last restore or unstretch (the undoing of a strain response).
    last_restore: Option<i64>,
    /// The last health decrease (shed or stretch).
    last_decrease: Option<i64>,
    /// The sample number of the last decrease: at most one per sample.
    last_decrease_sample: u64,
    /// What the last decrease was, for reasons: `shed` or `stretch`.
    last_decrease_kind: &'static str,
    /// A decrease happened and nothing was increased since: the next restore is the fast one.
    restoring: bool,
    /// Jobs shed by health and not active since, for "restore" wording and timing.
    shed: BTreeSet<i64>,
    /// The last two toggle times per job, older first (the flap budget).
    toggles: BTreeMap<i64, [Option<i64>; 2]>,
    /// The job a `hold` decision was last emitted for, while that hold lasts (said once).
    holding: Option<i64>,
    /// The job next in line to activate that waits because its declared memory does not fit,
    /// while it waits (said once).
    admit_holding: Option<i64>,
    /// The last processor step.
    last_processor_step: Option<i64>,
    /// Whether the last write decision was [`Action::PauseWrites`].
    writes_paused: bool,
    /// When a catalog write last failed because the disk was full, until a sample after it
    /// (and after the pause it caused) reads the disk above critical.
    write_full_at: Option<i64>,
    /// The node's latest sample when that write failed, which the policy may not have taken in
    /// (samples are not stepped before the start-up activation, nor while paused): the pause's
    /// reason gives its disk reading when the policy has none.
    sample_at_failure: Option<Sample>,
    /// When writes were paused (`None` before a pause, or when restored at start-up): the
    /// resume says for how long only maintenance runs were claimed.
    writes_paused_at: Option<i64>,
}

impl Policy {
    /// A policy with `cfg`, no samples yet (every resource ok, nothing decided).
    pub fn new(cfg: PolicyConfig) -> Self {
        Policy {
            cfg,
            health: Health::default(),
            ok_since: None,
            last_increase: None,
            last_restore: None,
            last_decrease: None,
            last_decrease_sample: 0,
            last_decrease_kind: "shed",
            restoring: false,
            shed: BTreeSet::new(),
            toggles: BTreeMap::new(),
            holding: None,
            admit_holding: None,
            last_processor_step: None,
            writes_paused: false,
            write_full_at: None,
            sample_at_failure: None,
            writes_paused_at: None,
        }
    }

    /// The settings in force.
    pub fn config(&self) -> &PolicyConfig {
        &self.cfg
    }

    /// Replaces the settings at run time. Levels and timers carry over: new thresholds
    /// apply from the next sample, through the same hysteresis, so a change cannot flip a
    /// level (or start a burst of decisions) by itself.
    pub fn set_config(&mut self, cfg: PolicyConfig) {
        self.cfg = cfg;
    }

    /// Takes over whether writes are paused (the runtime restores it from the catalog at
    /// start-up, so that a restart in the middle of a disk shortage resumes when it ends).
    pub fn set_writes_paused(&mut self, paused: bool) {
        self.writes_paused = paused;
    }

    /// A catalog write failed at `now` because the disk is full: writes pause at the next
    /// poll whatever the disk's level, and resume only once a sample taken after the pause
    /// reads the disk above critical (and its level allows). Returns whether this is news: no
    /// failure was pending and writes were not paused already.
    pub fn handle_write_full(&mut self, now: i64) -> bool {
        self.handle_write_full_after(now, None)
    }

    /// [`Policy::handle_write_full`], given the node's latest health sample (which this
    /// policy may not have taken in): the pause's reason then states its disk reading.
    pub fn handle_write_full_after(&mut self, now: i64, latest: Option<&Sample>) -> bool {
        let news = self.write_full_at.is_none() && !self.writes_paused;
        self.write_full_at = Some(self.write_full_at.map_or(now, |t| t.max(now)));
        if let Some(sample) = latest {
            self.sample_at_failure = Some(sample.clone());
        }
        news
    }

    /// Whether a failed write holds writes paused (see [`Policy::handle_write_full`]).
    pub fn write_full(&self) -> bool {
        self.write_full_at.is_some()
    }

    /// Feeds one health sample: per-resource hysteresis, and the time the node became ok.
    pub fn handle_sample(&mut self, sample: &Sample) {
        self.health.handle_sample(sample, &self.cfg);
        // Space is back once a sample after the failure, taken while writes were paused for
        // it, reads the disk above critical (the pause and its resume are both decided).
        if self.writes_paused
            && self.write_full_at.is_some_and(|t| sample.at > t)
            && self.health.reading(Resource::Disk) < Level::Critical
        {
            self.write_full_at = None;
        }
        if self.health.overall_except(Some(Resource::Disk)) == Level::Ok {
            self.ok_since.get_or_insert(sample.at);
        } else {
            self.ok_since = None;
        }
    }

    /// The level of `r`, after hysteresis.
    pub fn level(&self, r: Resource) -> Level {
        self.health.level(r)
    }

    /// The worst level of any resource.
    pub fn overall(&self) -> Level {
        self.health.overall()
    }

    /// Whether writes are paused: the last write decision emitted was
    /// [`Action::PauseWrites`].
    pub fn writes_paused(&self) -> bool {
        self.writes_paused
    }

    /// Whether `job`, once active, must wait for writes to resume: writes are paused and it is
    /// outside a maintenance group. Whether it writes data objects does not matter: every run
    /// writes its own history, and the claim takes only maintenance runs while writes are
    /// paused, so any other job is stopped and is listed so (`paused`).
    pub fn held_by_pause(&self, job: &JobView) -> bool {
        self.writes_paused && !job.maintenance
    }

    /// Whether the disk is short: its level or its latest reading is not ok.
    pub fn disk_short(&self) -> bool {
        self.level(Resource::Disk) > Level::Ok || self.health.reading(Resource::Disk) > Level::Ok
    }

    /// Whether health must leave `job` inactive (or stretched) until the disk is ok again: it
    /// writes data objects outside a maintenance group and the disk is short. Work that
    /// writes nothing frees no space, so a short disk neither sheds it (rule 4) nor keeps it
    /// from coming back once every other resource is ok.
    pub fn waits_for_disk(&self, job: &JobView) -> bool {
        job.writes_data && !job.maintenance && self.disk_short()
    }

    /// The hysteresis state, for status pages.
    pub fn health(&self) -> &Health {
        &self.health
    }

    /// Whether `job` is part of the minimum: pinned active, required, or at or above the
    /// priority floor — and not pinned inactive, because pins win.
    pub fn in_minimum(&self, job: &JobView) -> bool {
        match job.pin {
            Some(Pin::Active) => true,
            Some(Pin::Inactive) => false,
            None => job.required || job.priority >= self.cfg.priority_floor,
        }
    }

    /// The minimum set at start-up, most important first: required, pinned active, or
    /// priority at or above the floor; never pinned inactive.
    pub fn initial_active(&self, jobs: &[JobView]) -> Vec<i64> {
        let mut min: Vec<&JobView> = jobs.iter().filter(|j| self.in_minimum(j)).collect();
        min.sort_by_key(|j| activation_order(j));
        min.into_iter().map(|j| j.job_id).collect()
    }

    /// Decisions to carry out now, given the catalog's current state.
    ///
    /// Deterministic: the same policy state and inputs give the same decisions. Health
    /// increases need every resource ok and no shed or stretch within `cooldown`; then the
    /// highest-priority inactive job is considered — if it was shed, it is restored as soon
    /// as that holds (the first restore) or one `step_interval` after the previous increase
    /// (later ones); otherwise stretched periods are brought back first, at the same pace,
    /// and only then is a standby job activated, once every resource has been ok for
    /// `step_interval` and `step_interval` has passed since the last increase and decrease.
    /// At most one job is changed by health per poll.
    pub fn poll_decisions(
        &mut self,
        now: i64,
        jobs: &[JobView],
        processors: &[ProcessorView],
    ) -> Vec<Decision> {
        self.clamp_times(now);
        let mut out = Vec::new();
        let mut decided = BTreeSet::new();
        // Writes first: a pin decided in the same poll then applies on top of the pause (a
        // job pinned inactive ends standby), and a writer activated by a pin already knows
        // it will wait.
        self.writes(now, jobs, &mut out);
        self.pins_and_minimum(now, jobs, &mut out, &mut decided);
        let others = self.health.overall_except(Some(Resource::Disk));
        let relieved = if self.shed_level() >= Level::Strained {
            let before = out.len();
            self.relieve(now, jobs, &decided, &mut out);
            out.len() > before
        } else {
            self.holding = None;
            false
        };
        // A short disk alone asks only writers for relief; once it has none to give, the
        // jobs that write nothing may come back on the other resources' health.
        if !relieved && others == Level::Ok {
            self.increase(now, jobs, &decided, &mut out);
        }
        self.processor_step(now, processors, &mut out);
        self.forget(now, jobs, &out);
        out
    }

    /// The write rule alone, between samples: the pause a failed write calls for
    /// ([`Policy::handle_write_full`]) is decided at once rather than at the next sample.
    pub fn poll_writes(&mut self, now: i64, jobs: &[JobView]) -> Vec<Decision> {
        let mut out = Vec::new();
        self.writes(now, jobs, &mut out);
        out
    }

    /// A clock set back must not freeze the policy for as long as the jump: anything
    /// recorded "in the future" is taken to have happened now.
    fn clamp_times(&mut self, now: i64) {
        for t in [
            &mut self.ok_since,
            &mut self.last_increase,
            &mut self.last_restore,
            &mut self.last_decrease,
            &mut self.last_processor_step,
            &mut self.write_full_at,
        ]
        .into_iter()
        .flatten()
        {
            *t = (*t).min(now);
        }
        for pair in self.toggles.values_mut() {
            for t in pair.iter_mut().flatten() {
                *t = (*t).min(now);
            }
        }
    }

    /// Whether `d` ms have passed since `since`, counting a sample up to a quarter of the
    /// latest sample interval early as reaching it: timers jitter by milliseconds, and a
    /// sample 1 ms early must not cost a whole interval.
    fn reached(&self, now: i64, since: i64, d: i64) -> bool {
        now - since + self.health.gap() / 4 >= d
    }

    fn pins_and_minimum(
        &mut self,
        now: i64,
        jobs: &[JobView],
        out: &mut Vec<Decision>,
        decided: &mut BTreeSet<i64>,
    ) {
        let mut ordered: Vec<&JobView> = jobs.iter().collect();
        ordered.sort_by_key(|j| activation_order(j));
        for job in ordered {
            let (action, why, cause) = match (job.pin, job.active) {
                (Some(Pin::Active), false) => (
                    Action::Activate { job_id: job.job_id },
                    format!(
                        "job `{}` is pinned active by the operator: activate it",
                        job.name
                    ),
                    Cause::Pin,
                ),
                (Some(Pin::Inactive), true) => (
                    Action::Deactivate { job_id: job.job_id },
                    format!(
                        "job `{}` is pinned inactive by the operator: deactivate it",
                        job.name
                    ),
                    Cause::Pin,
                ),
                (None, false) if self.in_minimum(job) => {
                    let why = if job.required {
                        format!("job `{}` is required", job.name)
                    } else {
                        format!(
                            "job `{}` has priority {} at or above the floor {}",
                            job.name, job.priority, self.cfg.priority_floor
                        )
                    };
                    (
                        Action::Activate { job_id: job.job_id },
                        format!("{why}: part of the minimum, activate it"),
                        Cause::Minimum,
                    )
                }
                _ => continue,
            };
            let activate = matches!(action, Action::Activate { .. });
            let reason = if activate && self.held_by_pause(job) {
                format!("{why}; writes are paused, so it waits (listed paused) until they resume")
            } else {
                why
            };
            self.record_toggle(job.job_id, now);
            if activate {
                self.shed.remove(&job.job_id);
            }
            decided.insert(job.job_id);
            out.push(Decision {
                at: now,
                action,
                reason,
                evidence: Vec::new(),
                cause,
                jobs: Vec::new(),
            });
        }
    }

    fn writes(&mut self, now: i64, jobs: &[JobView], out: &mut Vec<Decision>) {
        let disk = self.level(Resource::Disk);
        let full = self.write_full_at.is_some();
        let pause = (disk == Level::Critical || full) && !self.writes_paused;
        let resume = disk < Level::Critical && !full && self.writes_paused;
        if !pause && !resume {
            return;
        }
        let reading = self.disk_reading();
        let reading = if pause && disk < Level::Critical {
            let sample = reading.map_or_else(
                || "no disk sample read yet".to_string(),
                |r| format!("latest sample: {r}"),
            );
            format!("the disk is full: a catalog write failed ({sample})")
        } else {
            reading.unwrap_or_else(|| format!("disk {}", disk.as_str()))
        };
        let mut concerned: Vec<&JobView> = jobs
            .iter()
            .filter(|j| {
                if pause {
                    j.active && !j.held && !j.maintenance
                } else {
                    j.held
                }
            })
            .collect();
        concerned.sort_by_key(|j| activation_order(j));
        let names = name_list(&concerned);
        let reason = if pause {
            let maintenance: Vec<&JobView> =
                jobs.iter().filter(|j| j.active && j.maintenance).collect();
            // Writers and the rest apart: a job that writes no data object is held too (its
            // runs would write their history, and none is claimed), and the reason says why.
            let (writers, others): (Vec<&JobView>, Vec<&JobView>) =
                concerned.iter().partition(|j| j.writes_data);
            let mut parts = Vec::new();
            match writers.len() {
                0 => {}
                1 => parts.push(format!(
                    "the job that writes data objects ({})",
                    name_list(&writers)
                )),
                n => parts.push(format!(
                    "the {n} jobs that write data objects ({})",
                    name_list(&writers)
                )),
            }
            match others.len() {
                0 => {}
                1 => parts.push(format!(
                    "the job that writes only its runs' history ({})",
                    name_list(&others)
                )),
                n => parts.push(format!(
                    "the {n} jobs that write only their runs' history ({})",
                    name_list(&others)
                )),
            }
            let held = if parts.is_empty() {
                "no job outside maintenance is active now".to_string()
            } else {
                format!("hold {}", parts.join(" and "))
            };
            let kept = if maintenance.is_empty() {
                "maintenance jobs would keep running".to_string()
            } else {
                format!(
                    "maintenance jobs keep running ({})",
                    name_list(&maintenance)
                )
            };
            format!(
                "{reading}: pause writes — {held}; {kept}; the node records its own statistics \
                 once a minute until writes resume, and claims no other run meanwhile"
            )
        } else {
            // What the pause held: every claim but maintenance's, whether or not a job was
            // listed paused (none is when nothing outside maintenance was active).
            let claims = match self.writes_paused_at {
                Some(at) => format!(
                    "only maintenance runs were claimed for the last {}",
                    crate::policy::health::duration(now - at)
                ),
                None => "only maintenance runs were claimed".to_string(),
            };
            let held = match concerned.len() {
                0 => "other runs are claimed again (no job was listed paused)".to_string(),
                1 => format!("the job held for writes runs again ({names})"),
                n => format!("the {n} jobs held for writes run again ({names})"),
            };
            format!("{reading}: resume writes — {claims}; {held}")
        };
        self.writes_paused = pause;
        self.writes_paused_at = pause.then_some(now);
        if !pause {
            self.sample_at_failure = None;
        }
        out.push(Decision {
            at: now,
            action: if pause {
                Action::PauseWrites
            } else {
                Action::ResumeWrites
            },
            reason,
            evidence: self
                .health
                .evidence(Resource::Disk, &self.cfg)
                .into_iter()
                .collect(),
            cause: Cause::Health,
            jobs: concerned.iter().map(|j| j.job_id).collect(),
        });
    }

    /// The disk's reading in words: the latest sample the policy took in, against the
    /// critical threshold, or the node's sample at a failed write when that one is newer (the
    /// policy takes no sample in before the start-up activation, nor while paused); `None`
    /// without either.
    fn disk_reading(&self) -> Option<String> {
        let at_failure = self
            .sample_at_failure
            .as_ref()
            .filter(|s| self.health.last().is_none_or(|last| s.at > last.at))
            .and_then(|s| Health::describe_sample(Resource::Disk, s, &self.cfg));
        at_failure.or_else(|| {
            self.health
                .explain(Resource::Disk, Level::Critical, &self.cfg)
        })
    }

    /// Drops what no longer matters: shed marks of jobs gone or active again (other than the
    /// one shed just now, which the caller has not applied yet), and toggles older than the
    /// flap window.
    fn forget(&mut self, now: i64, jobs: &[JobView], out: &[Decision]) {
        let mut keep: BTreeSet<i64> = jobs
            .iter()
            .filter(|j| !j.active)
            .map(|j| j.job_id)
            .collect();
        keep.extend(out.iter().filter_map(|d| match d.action {
            Action::Deactivate { job_id } => Some(job_id),
            _ => None,
        }));
        self.shed.retain(|id| keep.contains(id));
        let window = self.cfg.toggle_window;
        self.toggles
            .retain(|_, pair| pair[1].is_some_and(|t| now - t < window));
    }

    fn record_toggle(&mut self, job_id: i64, now: i64) {
        let pair = self.toggles.entry(job_id).or_default();
        *pair = [pair[1], Some(now)];
    }

    /// The flap budget: a job may toggle unless it already did twice within the window.
    fn may_toggle(&self, job_id: i64, now: i64) -> bool {
        self.toggle_free_at(job_id).is_none_or(|t| now >= t)
    }

    /// When the job's flap budget allows its next toggle (`None`: it does now).
    fn toggle_free_at(&self, job_id: i64) -> Option<i64> {
        self.toggles
            .get(&job_id)
            .and_then(|pair| pair[0])
            .map(|t| t + self.cfg.toggle_window)
    }

    /// The strained resources in words: "cpu 96.2% > 90% (strained) for 2 samples in a row
    /// (5.0 s)".
    fn conditions(&self, strained: &[Resource]) -> String {
        // Each against the threshold of the level it is acted on at: the lower of its level
        // and its latest reading (a critical reading before the level entered critical is
        // relieved at the strained pace, and said so).
        let parts: Vec<String> = strained
            .iter()
            .filter_map(|&r| {
                let at = self.level(r).min(self.health.reading(r));
                self.health.explain(r, at, &self.cfg)
            })
            .collect();
        if parts.is_empty() {
            // Only resources without a value can get here (never, as a value is needed to
            // read strained); say what is known rather than nothing.
            let levels: Vec<String> = strained
                .iter()
                .map(|r| format!("{} {}", r.as_str(), self.level(*r).as_str()))
                .collect();
            return levels.join(", ");
        }
        parts.join(", ")
    }

    /// The values of every resource that is strained or worse by level or reading.
    fn strain_evidence(&self) -> Vec<Evidence> {
        Resource::ALL
            .into_iter()
            .filter(|&r| {
                self.level(r) >= Level::Strained || self.health.reading(r) >= Level::Strained
            })
            .filter_map(|r| self.health.evidence(r, &self.cfg))
            .collect()
    }

    /// The values of every resource that has one.
    fn all_evidence(&self) -> Vec<Evidence> {
        Resource::ALL
            .into_iter()
            .filter_map(|r| self.health.evidence(r, &self.cfg))
            .collect()
    }
}

/// How the chosen job ranks, for reasons: the given words, or, when the disk's strain put
/// writers first, "lowest-priority job that writes data objects".
fn which(disk: bool, job: &JobView, plain: &str) -> String {
    if disk && job.writes_data {
        format!("{plain} that writes data objects")
    } else {
        plain.to_string()
    }
}

/// "`a`, `b` and `c`".
fn name_list(jobs: &[&JobView]) -> String {
    let names: Vec<String> = jobs.iter().map(|j| format!("`{}`", j.name)).collect();
    match names.split_last() {
        None => String::new(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
    }
}

/// Activation order: priority descending, then the older (smaller) job id first.
pub(crate) fn activation_order(j: &JobView) -> (std::cmp::Reverse<i64>, i64) {
    (std::cmp::Reverse(j.priority), j.job_id)
}

/// Shedding order: the reverse of [`activation_order`] — lowest priority, newest job first.
pub(crate) fn shed_order(j: &JobView) -> (i64, std::cmp::Reverse<i64>) {
    (j.priority, std::cmp::Reverse(j.job_id))
}
