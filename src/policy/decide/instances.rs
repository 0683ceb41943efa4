//! Rule 6 of the policy: processor instances, one step per `step_interval` — an instance added
//! to the busiest processor (above `busy_high`, below its maximum) once every resource has been
//! ok for a step and no shed is within the cooldown; otherwise one removed from the idlest
//! (below `busy_low`, above its minimum).

use crate::policy::{Action, Cause, Decision, Level, ProcessorView};

use super::Policy;

impl Policy {
    pub(super) fn processor_step(
        &mut self,
        now: i64,
        processors: &[ProcessorView],
        out: &mut Vec<Decision>,
    ) {
        let step = self.cfg.step_interval;
        if self
            .last_processor_step
            .is_some_and(|t| !self.reached(now, t, step))
        {
            return;
        }
        let healthy = self.overall() == Level::Ok
            && self.ok_since.is_some_and(|t| self.reached(now, t, step))
            && self
                .last_decrease
                .is_none_or(|t| self.reached(now, t, self.cfg.cooldown));
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
        let (action, reason) = match (healthy, busiest, idlest) {
            (true, Some(p), _) => (
                Action::AddInstance {
                    processor_id: p.processor_id,
                },
                format!(
                    "processor `{}` {:.0}% busy > {:.0}% over the last sample and all resources \
                     ok: add an instance ({} -> {}, max {})",
                    p.name,
                    p.utilization * 100.0,
                    self.cfg.busy_high * 100.0,
                    p.instances,
                    p.instances + 1,
                    p.max_instances
                ),
            ),
            (_, _, Some(p)) => (
                Action::RemoveInstance {
                    processor_id: p.processor_id,
                },
                format!(
                    "processor `{}` {:.0}% busy < {:.0}% over the last sample: remove an \
                     instance ({} -> {}, min {})",
                    p.name,
                    p.utilization * 100.0,
                    self.cfg.busy_low * 100.0,
                    p.instances,
                    p.instances - 1,
                    p.min_instances
                ),
            ),
            _ => return,
        };
        out.push(Decision {
            at: now,
            action,
            reason,
            evidence: self.all_evidence(),
            cause: Cause::Health,
            jobs: Vec::new(),
        });
        self.last_processor_step = Some(now);
    }
}
