//! Rules 4 and 5 of the policy: strain relieved one step at a time, least important work
//! first (stretch the periods that allow it, then shed; a disk strain asks for writers), and,
//! once every resource is ok, the same steps undone in reverse (restore, unstretch, activate
//! standby jobs) — with the cooldowns and the flap budget that keep them from flapping.

use std::collections::BTreeSet;

use crate::policy::health::{duration, samples_over, size};
use crate::policy::{Action, Cause, Decision, JobView, Level, Resource};

use super::{Policy, activation_order, shed_order, which};

impl Policy {
    /// The level that calls for relief. A critical disk counts as strained here: pausing
    /// writes is its critical answer, and shedding work that writes nothing would not free
    /// a byte.
    pub(super) fn shed_level(&self) -> Level {
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

    /// The resources whose level and latest reading both say strained or worse: the strain
    /// a relief answers (a level held by hysteresis alone, on its way down, asks for none).
    pub(super) fn strained_now(&self) -> Vec<Resource> {
        Resource::ALL
            .into_iter()
            .filter(|&r| {
                self.level(r) >= Level::Strained && self.health.reading(r) >= Level::Strained
            })
            .collect()
    }

    /// The pace of relief: critical when a resource other than the disk is critical by level
    /// and by its latest reading; strained otherwise.
    pub(super) fn pace(&self, strained: &[Resource]) -> Level {
        let critical = strained.iter().any(|&r| {
            r != Resource::Disk
                && self.level(r) == Level::Critical
                && self.health.reading(r) == Level::Critical
        });
        if critical {
            Level::Critical
        } else {
            Level::Strained
        }
    }

    /// One step of relief: stretch, shed, or hold (see the module's rule 4).
    pub(super) fn relieve(
        &mut self,
        now: i64,
        jobs: &[JobView],
        decided: &BTreeSet<i64>,
        out: &mut Vec<Decision>,
    ) {
        let strained = self.strained_now();
        // One step per sample at most, and none on a sample that no longer shows the strain
        // (the level is on its way down; relieving then would only delay the recovery).
        if self.health.samples() == self.last_decrease_sample || strained.is_empty() {
            return;
        }
        let critical = self.pace(&strained) == Level::Critical;
        if !critical {
            // Strained: one step per `step_interval`, and none within `cooldown` of a
            // restore — strain that returns that soon is flapping, and the restore gets its
            // chance. (Critical waits for neither: then the node itself is at risk.)
            let paced = self
                .last_decrease
                .is_some_and(|t| !self.reached(now, t, self.cfg.step_interval));
            let just_restored = self
                .last_restore
                .is_some_and(|t| !self.reached(now, t, self.cfg.cooldown));
            if paced || just_restored {
                return;
            }
        }
        let disk = self.level(Resource::Disk) >= Level::Strained;
        let disk_only = strained.iter().all(|&r| r == Resource::Disk);
        // Who may give way: never pinned, never decided this poll, never held by the pause
        // (nor about to be, by this poll's pause);
        // for the disk's sake writers only when only the disk is strained, and never
        // maintenance (it frees the disk).
        let eligible = |j: &&JobView| {
            j.active
                && !self.held_by_pause(j)
                && j.pin.is_none()
                && !decided.contains(&j.job_id)
                && !(disk && j.maintenance)
                && (!disk_only || j.writes_data)
        };
        // Writers first while the disk is strained, then the lowest priority, newest first.
        let order = |j: &&JobView| (disk && !j.writes_data, shed_order(j));
        let conditions = self.conditions(&strained);
        if !critical {
            let mut stretchable: Vec<&JobView> = jobs
                .iter()
                .filter(eligible)
                .filter(|j| j.stretch < j.stretch_max)
                .collect();
            stretchable.sort_by_key(order);
            if let Some(job) = stretchable.first() {
                let factor = job.stretch.max(1).saturating_mul(2).min(job.stretch_max);
                out.push(Decision {
                    at: now,
                    action: Action::Stretch {
                        job_id: job.job_id,
                        factor,
                    },
                    reason: format!(
                        "{conditions}: stretch the period of `{}` (priority {}, the {}) ×{} -> ×{} \
                         (at most ×{}) before shedding anything",
                        job.name,
                        job.priority,
                        which(disk, job, "lowest-priority stretchable job"),
                        job.stretch.max(1),
                        factor,
                        job.stretch_max
                    ),
                    evidence: self.strain_evidence(),
                    cause: Cause::Health,
                    jobs: Vec::new(),
                });
                self.decreased(now, "stretch");
                self.holding = None;
                return;
            }
        }
        let mut candidates: Vec<&JobView> = jobs
            .iter()
            .filter(eligible)
            .filter(|j| !self.in_minimum(j))
            .collect();
        candidates.sort_by_key(order);
        let Some(&job) = candidates.first() else {
            return;
        };
        if !self.may_toggle(job.job_id, now) {
            // Priority order matters more than the seconds: hold rather than shed a more
            // important job in its place, and say so once per hold.
            if self.holding != Some(job.job_id) {
                self.holding = Some(job.job_id);
                let free_at = self.toggle_free_at(job.job_id).unwrap_or(now);
                out.push(Decision {
                    at: now,
                    action: Action::Hold { job_id: job.job_id },
                    reason: format!(
                        "{conditions}: hold — the next job to shed, `{}` (priority {}), was \
                         switched twice within {} and may switch again in {}; no job more \
                         important than it is shed in its place",
                        job.name,
                        job.priority,
                        duration(self.cfg.toggle_window),
                        duration(free_at - now)
                    ),
                    evidence: self.strain_evidence(),
                    cause: Cause::Health,
                    jobs: Vec::new(),
                });
            }
            return;
        }
        out.push(Decision {
            at: now,
            action: Action::Deactivate { job_id: job.job_id },
            reason: format!(
                "{conditions}: shed {} `{}` (priority {})",
                which(disk, job, "lowest-priority job"),
                job.name,
                job.priority
            ),
            evidence: self.strain_evidence(),
            cause: Cause::Health,
            jobs: Vec::new(),
        });
        self.decreased(now, "shed");
        self.holding = None;
        self.shed.insert(job.job_id);
        self.record_toggle(job.job_id, now);
    }

    pub(super) fn decreased(&mut self, now: i64, kind: &'static str) {
        self.last_decrease = Some(now);
        self.last_decrease_kind = kind;
        self.last_decrease_sample = self.health.samples();
        self.restoring = true;
    }

    /// One step back toward full work (see the module's rule 5).
    pub(super) fn increase(
        &mut self,
        now: i64,
        jobs: &[JobView],
        decided: &BTreeSet<i64>,
        out: &mut Vec<Decision>,
    ) {
        let Some(ok_since) = self.ok_since else {
            return;
        };
        // A short disk holds back only the jobs that write (`waits_for_disk`); the rest come
        // back on the other resources' health.
        let skip = self.disk_short().then_some(Resource::Disk);
        let all = if skip.is_some() {
            "every resource but the disk"
        } else {
            "all resources"
        };
        let disk_note = if skip.is_some() {
            " (the disk is short: jobs that write data wait for it)"
        } else {
            ""
        };
        // Every latest reading ok too: a level still ok by hysteresis while a reading is
        // already past its threshold is a load arriving, not health.
        let (n_ok, ok_readings_since) = self.health.ok_readings_except(skip);
        if n_ok == 0 {
            return;
        }
        let (step, cooldown) = (self.cfg.step_interval, self.cfg.cooldown);
        if self
            .last_decrease
            .is_some_and(|t| !self.reached(now, t, cooldown))
        {
            return;
        }
        // Jobs the pause would hold wait for the resume: activating one now would only list it
        // paused, and spend its flap budget on nothing.
        let next = jobs
            .iter()
            .filter(|j| !j.active && j.pin.is_none() && !decided.contains(&j.job_id))
            .filter(|j| !self.waits_for_disk(j) && !self.held_by_pause(j))
            .min_by_key(|j| activation_order(j));
        let since_increase = self
            .last_increase
            .is_none_or(|t| self.reached(now, t, step));
        // Undoing a strain response: the first at once, the rest one per step.
        let undo_allowed = self.restoring || since_increase;
        let after = self
            .last_decrease
            .map(|t| {
                format!(
                    ", {} after the last {}",
                    duration(now - t),
                    self.last_decrease_kind
                )
            })
            .unwrap_or_default();
        let ok_for = duration(now - ok_since);
        let ok_again = format!(
            "{all} ok again for {}{after}{disk_note}",
            samples_over(n_ok, now - ok_readings_since)
        );
        if let Some(job) = next.filter(|j| self.shed.contains(&j.job_id)) {
            // Priority order is kept strictly: if the next job is still within its flap
            // budget, nothing else jumps ahead of it.
            if !undo_allowed || !self.may_toggle(job.job_id, now) {
                return;
            }
            if self.waits_for_memory(now, job, jobs, &ok_again, out) {
                return;
            }
            out.push(Decision {
                at: now,
                action: Action::Activate { job_id: job.job_id },
                reason: format!(
                    "{ok_again}: restore shed job `{}` (priority {})",
                    job.name, job.priority
                ),
                evidence: self.all_evidence(),
                cause: Cause::Health,
                jobs: Vec::new(),
            });
            self.increased(now, true);
            self.shed.remove(&job.job_id);
            self.record_toggle(job.job_id, now);
            return;
        }
        let stretched = jobs
            .iter()
            .filter(|j| j.active && j.stretch > 1 && !decided.contains(&j.job_id))
            .filter(|j| !self.waits_for_disk(j) && !self.held_by_pause(j))
            .min_by_key(|j| activation_order(j));
        if let Some(job) = stretched {
            if !undo_allowed {
                return;
            }
            let factor = (job.stretch / 2).max(1);
            let back = if factor == 1 {
                "back to its schedule"
            } else {
                "closer to its schedule"
            };
            out.push(Decision {
                at: now,
                action: Action::Unstretch {
                    job_id: job.job_id,
                    factor,
                },
                reason: format!(
                    "{ok_again}: bring the period of `{}` (priority {}) {back}, ×{} -> ×{factor}",
                    job.name, job.priority, job.stretch
                ),
                evidence: self.all_evidence(),
                cause: Cause::Health,
                jobs: Vec::new(),
            });
            self.increased(now, true);
            return;
        }
        let Some(job) = next else {
            return;
        };
        let since_decrease = self
            .last_decrease
            .is_none_or(|t| self.reached(now, t, step));
        if !self.reached(now, ok_since, step)
            || !since_increase
            || !since_decrease
            || !self.may_toggle(job.job_id, now)
        {
            return;
        }
        if self.waits_for_memory(now, job, jobs, &format!("{all} ok for {ok_for}"), out) {
            return;
        }
        out.push(Decision {
            at: now,
            action: Action::Activate { job_id: job.job_id },
            reason: format!(
                "{all} ok for {ok_for}{disk_note}: activate standby job `{}` (priority {})",
                job.name, job.priority
            ),
            evidence: self.all_evidence(),
            cause: Cause::Health,
            jobs: Vec::new(),
        });
        self.increased(now, false);
        self.record_toggle(job.job_id, now);
    }

    /// Whether `job`, next in line to activate, waits because the memory it declares
    /// (`memory_limit`) would leave less than the strained threshold free; says so once per
    /// wait, naming the bound the free memory is measured against. Free is the smaller of what
    /// the sample read and the budget less what the active jobs declare: a run between two
    /// runs holds nothing at the instant of a sample, yet its next run takes what it declared.
    /// Priority order is kept: no smaller job jumps ahead of it.
    fn waits_for_memory(
        &mut self,
        now: i64,
        job: &JobView,
        jobs: &[JobView],
        conditions: &str,
        out: &mut Vec<Decision>,
    ) -> bool {
        let reserved: u64 = jobs
            .iter()
            .filter(|j| j.active)
            .filter_map(|j| j.memory_limit)
            .sum();
        let misfit = job.memory_limit.and_then(|need| {
            let measured = self.health.value(Resource::Memory, &self.cfg)?;
            let total = self.health.last().map_or(0, |s| s.memory_total) as f64;
            let free = measured.min(total - reserved as f64).max(0.0);
            let left = free - need as f64;
            (left < self.cfg.memory_strained as f64).then_some((need, free, left))
        });
        let Some((need, free, left)) = misfit else {
            self.admit_holding = None;
            return false;
        };
        if self.admit_holding != Some(job.job_id) {
            self.admit_holding = Some(job.job_id);
            let of = self
                .health
                .last()
                .and_then(|s| Resource::Memory.budget(s))
                .map(|b| format!(" of {b}"))
                .unwrap_or_default();
            let counted = if reserved > 0 {
                format!(
                    " (counting the {} the active jobs declare)",
                    size(reserved as f64)
                )
            } else {
                String::new()
            };
            out.push(Decision {
                at: now,
                action: Action::Hold { job_id: job.job_id },
                reason: format!(
                    "{conditions}, but `{}` (priority {}) declares {} of memory and {} is free{of}{counted}: it would leave {}, below the strained threshold of {}; it waits in standby",
                    job.name,
                    job.priority,
                    size(need as f64),
                    size(free),
                    size(left.max(0.0)),
                    size(self.cfg.memory_strained as f64)
                ),
                evidence: self.all_evidence(),
                cause: Cause::Health,
                jobs: Vec::new(),
            });
        }
        true
    }

    pub(super) fn increased(&mut self, now: i64, undo: bool) {
        self.last_increase = Some(now);
        if undo {
            self.last_restore = Some(now);
        }
        self.restoring = false;
    }
}
