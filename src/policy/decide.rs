//! The activation policy as a sans-IO state machine: [`Policy`] takes health samples
//! ([`Policy::handle_sample`]) and the catalog's view of jobs and processors, and says what to
//! do now ([`Policy::poll_decisions`]) — activate or deactivate a job, add or remove a processor
//! instance, pause or resume writes — each [`Decision`] with a reason in words and the sample
//! values behind it.
//!
//! Invariant: reads no clock and does no IO — `now` is an argument; it imports neither actix
//! nor rusqlite. The state kept here is only *timing* (when the last step, shed and toggles
//! were); which jobs are active always comes from the caller, so the catalog stays the truth.
//!
//! The rules, in the order [`Policy::poll_decisions`] applies them:
//! 1. Pins win: a job pinned active is activated, one pinned inactive deactivated, whatever
//!    the health, the cooldown or the flap budget.
//! 2. The minimum (required, or priority at or above the floor) is always active: a minimum
//!    job found inactive is activated at once, and a minimum job is never shed.
//! 3. Disk critical pauses writes (once); disk back above critical resumes them (once).
//! 4. Strained: shed the lowest-priority sheddable job at once, then one more per
//!    `step_interval` while the latest sample still shows the strain. Critical: one per sample.
//! 5. Ok: restore shed jobs, then activate standby jobs, in priority order, one per step
//!    (see [`Policy::poll_decisions`] for the timing).
//! 6. Processors: one instance step per `step_interval`.
//!
//! Anti-flap is three rules. Nothing is activated within `cooldown` of a shed. Nothing is
//! shed for strain within `cooldown` of a *restore* (strain that returns that soon is
//! flapping). And a job is toggled by health at most twice within `2 × cooldown` (its *flap
//! budget*): a decision that would be its third waits. A shed right after a *standby step* is
//! not delayed — the step came after `step_interval` of health, so the job just activated is
//! the likeliest cause of the strain, and shedding is the safe direction — but the flap budget
//! keeps that job from coming straight back. Critical sheds wait for nothing but the flap
//! budget: the node itself is at risk. Pins and the minimum ignore all three.

use std::collections::{BTreeMap, BTreeSet};

use crate::policy::{Health, Level, PolicyConfig, Resource, Sample};

/// An operator's override of a job's activation on this node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pin {
    /// Active regardless of health; never shed.
    Active,
    /// Inactive regardless of health; never activated.
    Inactive,
}

impl Pin {
    /// Every pin.
    pub const ALL: [Pin; 2] = [Pin::Active, Pin::Inactive];

    /// `active` or `inactive`.
    pub fn as_str(self) -> &'static str {
        match self {
            Pin::Active => "active",
            Pin::Inactive => "inactive",
        }
    }

    /// The pin named by [`Pin::as_str`].
    pub fn parse(s: &str) -> Option<Pin> {
        Pin::ALL.into_iter().find(|p| p.as_str() == s)
    }
}

/// The catalog's view of one job, on this node.
#[derive(Debug, Clone, PartialEq)]
pub struct JobView {
    /// The job's id.
    pub job_id: i64,
    /// The job's name, for reasons.
    pub name: String,
    /// Larger is more important; ties go to the smaller (older) `job_id`.
    pub priority: i64,
    /// Part of the minimum: active from start-up, never shed.
    pub required: bool,
    /// The operator's override, if any.
    pub pin: Option<Pin>,
    /// Whether the job is active on this node now.
    pub active: bool,
    /// Whether it writes at least one data object (paused while the disk is critical).
    pub writes_data: bool,
    /// Whether its group is marked maintenance (pruning, vacuum, backup): it keeps running
    /// while the disk is strained or critical, because it is what frees the disk.
    pub maintenance: bool,
}

/// The runtime's view of one processor.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessorView {
    /// The processor's id.
    pub processor_id: i64,
    /// Its name, for reasons.
    pub name: String,
    /// Instances running now.
    pub instances: u32,
    /// The fewest instances it may have.
    pub min_instances: u32,
    /// The most instances it may have.
    pub max_instances: u32,
    /// Fraction of the last sample period its instances were busy, 0–1.
    pub utilization: f64,
}

/// What a decision does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Make the job active on this node.
    Activate {
        /// The job.
        job_id: i64,
    },
    /// Make the job standby on this node.
    Deactivate {
        /// The job.
        job_id: i64,
    },
    /// Start one more instance of the processor.
    AddInstance {
        /// The processor.
        processor_id: i64,
    },
    /// Stop one instance of the processor.
    RemoveInstance {
        /// The processor.
        processor_id: i64,
    },
    /// Disk critical: hold every job that writes data objects, except maintenance groups,
    /// which keep running and go first.
    PauseWrites,
    /// The disk is back above critical: let writing jobs run again.
    ResumeWrites,
}

impl Action {
    /// `activate`, `deactivate`, `add_instance`, `remove_instance`, `pause_writes` or
    /// `resume_writes`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Action::Activate { .. } => "activate",
            Action::Deactivate { .. } => "deactivate",
            Action::AddInstance { .. } => "add_instance",
            Action::RemoveInstance { .. } => "remove_instance",
            Action::PauseWrites => "pause_writes",
            Action::ResumeWrites => "resume_writes",
        }
    }

    /// The job it concerns, if any.
    pub fn job_id(&self) -> Option<i64> {
        match *self {
            Action::Activate { job_id } | Action::Deactivate { job_id } => Some(job_id),
            _ => None,
        }
    }

    /// The processor it concerns, if any.
    pub fn processor_id(&self) -> Option<i64> {
        match *self {
            Action::AddInstance { processor_id } | Action::RemoveInstance { processor_id } => {
                Some(processor_id)
            }
            _ => None,
        }
    }
}

/// Why a decision was taken, by kind: an operator's pin, the minimum, or the node's health.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// The operator pinned the job; health and anti-flap were not consulted.
    Pin,
    /// The job is part of the minimum (required or at/above the priority floor).
    Minimum,
    /// The node's health (including processor utilization).
    Health,
}

impl Cause {
    /// `pin`, `minimum` or `health`.
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::Pin => "pin",
            Cause::Minimum => "minimum",
            Cause::Health => "health",
        }
    }
}

/// One decision, with a reason an operator understands and the sample values behind it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Decision {
    /// When it was taken (the `now` of the poll), epoch ms.
    pub at: i64,
    /// What to do.
    pub action: Action,
    /// Why, in one sentence: "cpu 96.2% > 90% for 2 samples: shed lowest-priority job
    /// `report` (priority 5)".
    pub reason: String,
    /// The latest sample's values behind it, in each resource's unit (see [`Resource`]);
    /// empty for pins and the minimum, which do not depend on health.
    pub evidence: Vec<(Resource, f64)>,
    /// What kind of rule decided it.
    pub cause: Cause,
}

/// The sans-IO activation policy of one node.
///
/// The runtime feeds every health sample to [`Policy::handle_sample`] and then calls
/// [`Policy::poll_decisions`] with the catalog's current state; it carries out every decision
/// before the next poll (a decision not reflected in the next call's `active` flags is simply
/// decided again when its rule next allows).
#[derive(Debug, Clone)]
pub struct Policy {
    cfg: PolicyConfig,
    health: Health,
    /// When the node's overall level last became ok (`None` while it is not, or before any
    /// sample: the policy activates nothing on no evidence).
    ok_since: Option<i64>,
    /// The last health activation (standby step or restore).
    last_activation: Option<i64>,
    /// The last restore (activation of a job health had shed).
    last_restore: Option<i64>,
    /// The last health deactivation.
    last_shed: Option<i64>,
    /// The sample number of the last shed: at most one shed per sample.
    last_shed_sample: u64,
    /// A shed happened and nothing was activated since: the next restore is the fast one.
    restoring: bool,
    /// Jobs shed by health and not active since, for "restore" wording and timing.
    shed: BTreeSet<i64>,
    /// The last two toggle times per job, older first (the flap budget).
    toggles: BTreeMap<i64, [Option<i64>; 2]>,
    /// The last processor step.
    last_processor_step: Option<i64>,
    /// Whether the last write decision was [`Action::PauseWrites`].
    writes_paused: bool,
}

impl Policy {
    /// A policy with `cfg`, no samples yet (every resource ok, nothing decided).
    pub fn new(cfg: PolicyConfig) -> Self {
        Policy {
            cfg,
            health: Health::default(),
            ok_since: None,
            last_activation: None,
            last_restore: None,
            last_shed: None,
            last_shed_sample: 0,
            restoring: false,
            shed: BTreeSet::new(),
            toggles: BTreeMap::new(),
            last_processor_step: None,
            writes_paused: false,
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

    /// Feeds one health sample: per-resource hysteresis, and the time the node became ok.
    pub fn handle_sample(&mut self, sample: &Sample) {
        self.health.handle_sample(sample, &self.cfg);
        if self.health.overall() == Level::Ok {
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
    /// activations need every resource ok and nothing shed within `cooldown`; then the
    /// highest-priority inactive job is activated — if it was shed, as soon as that holds
    /// (the first restore) or one `step_interval` after the previous activation (later
    /// restores); if it is a standby job, once every resource has been ok for
    /// `step_interval` and `step_interval` has passed since the last activation and shed.
    /// At most one job is activated or shed by health per poll.
    pub fn poll_decisions(
        &mut self,
        now: i64,
        jobs: &[JobView],
        processors: &[ProcessorView],
    ) -> Vec<Decision> {
        self.clamp_times(now);
        let mut out = Vec::new();
        let mut decided = BTreeSet::new();
        self.pins_and_minimum(now, jobs, &mut out, &mut decided);
        self.writes(now, &mut out);
        if self.shed_level() >= Level::Strained {
            self.shed_one(now, jobs, &decided, &mut out);
        } else if self.overall() == Level::Ok {
            self.activate_one(now, jobs, &decided, &mut out);
        }
        self.processor_step(now, processors, &mut out);
        self.forget(now, jobs, &out);
        out
    }

    /// A clock set back must not freeze the policy for as long as the jump: anything
    /// recorded "in the future" is taken to have happened now.
    fn clamp_times(&mut self, now: i64) {
        for t in [
            &mut self.ok_since,
            &mut self.last_activation,
            &mut self.last_restore,
            &mut self.last_shed,
            &mut self.last_processor_step,
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
            let (action, reason, cause) = match (job.pin, job.active) {
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
            self.record_toggle(job.job_id, now);
            if matches!(action, Action::Activate { .. }) {
                self.shed.remove(&job.job_id);
            }
            decided.insert(job.job_id);
            out.push(Decision {
                at: now,
                action,
                reason,
                evidence: Vec::new(),
                cause,
            });
        }
    }

    fn writes(&mut self, now: i64, out: &mut Vec<Decision>) {
        let disk = self.level(Resource::Disk);
        let value = self.value(Resource::Disk);
        if disk == Level::Critical && !self.writes_paused {
            self.writes_paused = true;
            let what = value.map_or_else(
                || "disk critical".to_string(),
                |v| Resource::Disk.describe(v, Level::Critical, &self.cfg),
            );
            out.push(Decision {
                at: now,
                action: Action::PauseWrites,
                reason: format!(
                    "{what} for {}: pause every job that writes data objects; \
                     maintenance jobs keep running",
                    samples(self.health.run(Resource::Disk))
                ),
                evidence: value.map(|v| (Resource::Disk, v)).into_iter().collect(),
                cause: Cause::Health,
            });
        } else if disk < Level::Critical && self.writes_paused {
            self.writes_paused = false;
            let what = value.map_or_else(
                || "disk free space unknown".to_string(),
                |v| format!("disk {v:.1}% free"),
            );
            out.push(Decision {
                at: now,
                action: Action::ResumeWrites,
                reason: format!(
                    "{what}, back above the critical {}% for {}: resume writes",
                    self.cfg.disk_critical,
                    samples(self.cfg.leave_after.max(1))
                ),
                evidence: value.map(|v| (Resource::Disk, v)).into_iter().collect(),
                cause: Cause::Health,
            });
        }
    }

    /// The level that sets the shedding pace. A critical disk counts as strained here:
    /// pausing writes is its critical answer, and shedding work that writes nothing would
    /// not free a byte.
    fn shed_level(&self) -> Level {
        Resource::ALL
            .into_iter()
            .map(|r| {
                let l = self.level(r);
                if r == Resource::Disk {
                    l.min(Level::Strained)
                } else {
                    l
                }
            })
            .max()
            .unwrap_or(Level::Ok)
    }

    fn shed_one(
        &mut self,
        now: i64,
        jobs: &[JobView],
        decided: &BTreeSet<i64>,
        out: &mut Vec<Decision>,
    ) {
        let critical = self.shed_level() == Level::Critical;
        // One shed per sample at most, and none on a sample that no longer shows the strain
        // (the level is on its way down; shedding then would only delay the recovery).
        if self.health.samples() == self.last_shed_sample || !self.strain_still_read() {
            return;
        }
        if !critical {
            // Strained: one more shed per step, and none within `cooldown` of a restore —
            // strain that returns that soon is flapping, and the restore gets its chance.
            // (Critical waits for neither: then the node itself is at risk.)
            let paced = self
                .last_shed
                .is_some_and(|t| now - t < self.cfg.step_interval);
            let just_restored = self
                .last_restore
                .is_some_and(|t| now - t < self.cfg.cooldown);
            if paced || just_restored {
                return;
            }
        }
        let disk_strained = self.level(Resource::Disk) >= Level::Strained;
        let mut candidates: Vec<&JobView> = jobs
            .iter()
            .filter(|j| {
                j.active
                    && j.pin.is_none()
                    && !self.in_minimum(j)
                    && !decided.contains(&j.job_id)
                    // Maintenance frees the disk: never shed it for the disk's sake.
                    && !(j.maintenance && disk_strained)
            })
            .collect();
        candidates.sort_by_key(|j| shed_order(j));
        let Some(lowest) = candidates.first() else {
            return;
        };
        // Strained: wait for the lowest job's flap budget (the order matters more than a few
        // seconds). Critical: shed the lowest job that may toggle.
        let pick = if critical {
            candidates.iter().find(|j| self.may_toggle(j.job_id, now))
        } else {
            Some(lowest).filter(|j| self.may_toggle(j.job_id, now))
        };
        let Some(job) = pick.copied() else {
            return;
        };
        let which = if job.job_id == lowest.job_id {
            format!(
                "shed lowest-priority job `{}` (priority {})",
                job.name, job.priority
            )
        } else {
            format!(
                "shed job `{}` (priority {}); `{}` was toggled twice within {}",
                job.name,
                job.priority,
                lowest.name,
                duration(2 * self.cfg.cooldown)
            )
        };
        let evidence = self.evidence(|l| l >= Level::Strained);
        out.push(Decision {
            at: now,
            action: Action::Deactivate { job_id: job.job_id },
            reason: format!("{}: {which}", self.conditions()),
            evidence,
            cause: Cause::Health,
        });
        self.last_shed = Some(now);
        self.last_shed_sample = self.health.samples();
        self.restoring = true;
        self.shed.insert(job.job_id);
        self.record_toggle(job.job_id, now);
    }

    fn activate_one(
        &mut self,
        now: i64,
        jobs: &[JobView],
        decided: &BTreeSet<i64>,
        out: &mut Vec<Decision>,
    ) {
        let Some(ok_since) = self.ok_since else {
            return;
        };
        if self.last_shed.is_some_and(|t| now - t < self.cfg.cooldown) {
            return;
        }
        let next = jobs
            .iter()
            .filter(|j| !j.active && j.pin.is_none() && !decided.contains(&j.job_id))
            .min_by_key(|j| activation_order(j));
        let Some(job) = next else {
            return;
        };
        // Priority order is kept strictly: if the next job is still within its flap budget,
        // nothing else jumps ahead of it.
        if !self.may_toggle(job.job_id, now) {
            return;
        }
        let step = self.cfg.step_interval;
        let since_activation_ok = self.last_activation.is_none_or(|t| now - t >= step);
        let restore = self.shed.contains(&job.job_id);
        let reason = if restore {
            if !(self.restoring || since_activation_ok) {
                return;
            }
            let after = self
                .last_shed
                .map(|t| format!(", {} after the last shed", duration(now - t)))
                .unwrap_or_default();
            format!(
                "all resources ok again{after}: restore shed job `{}` (priority {})",
                job.name, job.priority
            )
        } else {
            let since_shed_ok = self.last_shed.is_none_or(|t| now - t >= step);
            if now - ok_since < step || !since_activation_ok || !since_shed_ok {
                return;
            }
            format!(
                "all resources ok for {}: activate standby job `{}` (priority {})",
                duration(now - ok_since),
                job.name,
                job.priority
            )
        };
        out.push(Decision {
            at: now,
            action: Action::Activate { job_id: job.job_id },
            reason,
            evidence: self.evidence(|_| true),
            cause: Cause::Health,
        });
        self.last_activation = Some(now);
        if restore {
            self.last_restore = Some(now);
        }
        self.restoring = false;
        self.shed.remove(&job.job_id);
        self.record_toggle(job.job_id, now);
    }

    fn processor_step(&mut self, now: i64, processors: &[ProcessorView], out: &mut Vec<Decision>) {
        let step = self.cfg.step_interval;
        if self.last_processor_step.is_some_and(|t| now - t < step) {
            return;
        }
        let healthy = self.ok_since.is_some_and(|t| now - t >= step)
            && self.last_shed.is_none_or(|t| now - t >= self.cfg.cooldown);
        let busiest = processors
            .iter()
            .filter(|p| p.utilization > self.cfg.busy_high && p.instances < p.max_instances)
            .min_by(|a, b| {
                b.utilization
                    .total_cmp(&a.utilization)
                    .then(a.processor_id.cmp(&b.processor_id))
            });
        let idlest = processors
            .iter()
            .filter(|p| p.utilization < self.cfg.busy_low && p.instances > p.min_instances)
            .min_by(|a, b| {
                a.utilization
                    .total_cmp(&b.utilization)
                    .then(a.processor_id.cmp(&b.processor_id))
            });
        let decision = match (healthy, busiest, idlest) {
            (true, Some(p), _) => Decision {
                at: now,
                action: Action::AddInstance {
                    processor_id: p.processor_id,
                },
                reason: format!(
                    "processor `{}` {:.0}% busy > {:.0}% and all resources ok: add an instance \
                     ({} -> {}, max {})",
                    p.name,
                    p.utilization * 100.0,
                    self.cfg.busy_high * 100.0,
                    p.instances,
                    p.instances + 1,
                    p.max_instances
                ),
                evidence: self.evidence(|_| true),
                cause: Cause::Health,
            },
            (_, _, Some(p)) => Decision {
                at: now,
                action: Action::RemoveInstance {
                    processor_id: p.processor_id,
                },
                reason: format!(
                    "processor `{}` {:.0}% busy < {:.0}%: remove an instance ({} -> {}, min {})",
                    p.name,
                    p.utilization * 100.0,
                    self.cfg.busy_low * 100.0,
                    p.instances,
                    p.instances - 1,
                    p.min_instances
                ),
                evidence: self.evidence(|_| true),
                cause: Cause::Health,
            },
            _ => return,
        };
        out.push(decision);
        self.last_processor_step = Some(now);
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
        let window = 2 * self.cfg.cooldown;
        self.toggles
            .retain(|_, pair| pair[1].is_some_and(|t| now - t < window));
    }

    fn record_toggle(&mut self, job_id: i64, now: i64) {
        let pair = self.toggles.entry(job_id).or_default();
        *pair = [pair[1], Some(now)];
    }

    /// The flap budget: a job may toggle unless it already did twice within `2 × cooldown`.
    fn may_toggle(&self, job_id: i64, now: i64) -> bool {
        let window = 2 * self.cfg.cooldown;
        self.toggles
            .get(&job_id)
            .and_then(|pair| pair[0])
            .is_none_or(|t| now - t >= window)
    }

    /// Whether the latest sample itself still reads strained or worse on a resource whose
    /// level is strained or worse.
    fn strain_still_read(&self) -> bool {
        Resource::ALL
            .into_iter()
            .any(|r| self.level(r) >= Level::Strained && self.health.reading(r) >= Level::Strained)
    }

    fn value(&self, r: Resource) -> Option<f64> {
        self.health.last().and_then(|s| r.value(s, &self.cfg))
    }

    /// The latest values of the resources whose level passes `keep`.
    fn evidence(&self, keep: impl Fn(Level) -> bool) -> Vec<(Resource, f64)> {
        Resource::ALL
            .into_iter()
            .filter(|&r| keep(self.level(r)))
            .filter_map(|r| self.value(r).map(|v| (r, v)))
            .collect()
    }

    /// Every strained or critical resource in words: "cpu 96.2% > 90% for 2 samples".
    fn conditions(&self) -> String {
        let parts: Vec<String> = Resource::ALL
            .into_iter()
            .filter(|&r| self.level(r) >= Level::Strained)
            .map(|r| {
                let level = self.level(r);
                let what = self.value(r).map_or_else(
                    || format!("{} {}", r.as_str(), level.as_str()),
                    |v| r.describe(v, level, &self.cfg),
                );
                let critical = if level == Level::Critical {
                    " (critical)"
                } else {
                    ""
                };
                format!("{what}{critical} for {}", samples(self.health.run(r)))
            })
            .collect();
        parts.join(", ")
    }
}

/// Activation order: priority descending, then the older (smaller) job id first.
fn activation_order(j: &JobView) -> (std::cmp::Reverse<i64>, i64) {
    (std::cmp::Reverse(j.priority), j.job_id)
}

/// Shedding order: the reverse of [`activation_order`] — lowest priority, newest job first.
fn shed_order(j: &JobView) -> (i64, std::cmp::Reverse<i64>) {
    (j.priority, std::cmp::Reverse(j.job_id))
}

/// "1 sample", "3 samples".
fn samples(n: u32) -> String {
    if n == 1 {
        "1 sample".into()
    } else {
        format!("{n} samples")
    }
}

/// A duration in words: "30 s", "2 min", "1.5 s".
pub fn duration(ms: i64) -> String {
    if ms >= 60_000 && ms % 60_000 == 0 {
        format!("{} min", ms / 60_000)
    } else if ms % 1000 == 0 {
        format!("{} s", ms / 1000)
    } else {
        format!("{:.1} s", ms as f64 / 1000.0)
    }
}
