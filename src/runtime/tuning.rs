//! The Supervisor's self-tuning bookkeeping, apart from the actor: the policy's views of the
//! catalog's jobs, and the statistics recorded with each health sample — the device, each
//! processor's busy time and instances, and each processor's elapsed time per schedule kind
//! (per minute). While writes are paused (the disk is critical), the node records them once a
//! minute instead of every sample: its own writes are part of the shortage.
//!
//! Also the activations it settles (pure): the start-up minimum and the jobs new to the node.
//!
//! Invariant: no actor, no SQL; plain data in, plain data out, so the Supervisor's handlers
//! stay thin.

use std::collections::{BTreeMap, HashMap};

use super::events::Event;
use super::health::HealthReport;
use super::processor::Utilization;
use crate::catalog::activation::{JobActivation, ScheduleKind};
use crate::catalog::loads::LocalProcessor;
use crate::catalog::upkeep::StatSample;
use crate::catalog::verbs::{ActivationChange, DecidedStep};
use crate::model::{ActivationState, Pin};
use crate::policy::{Cause, JobView, Policy, ProcessorView};

/// How often statistics are recorded while writes are paused.
pub const REDUCED_STATS_EVERY_MS: i64 = 60_000;

/// How often the elapsed time per schedule kind is recorded (the spec's `_minute` sums).
pub const ELAPSED_EVERY_MS: i64 = 60_000;

/// The policy's view of one job's activation row.
pub fn job_view(j: &JobActivation) -> JobView {
    JobView {
        job_id: j.job_id,
        name: j.name.clone(),
        priority: j.priority,
        required: j.required,
        pin: j.pin.map(|p| match p {
            Pin::Active => crate::policy::Pin::Active,
            Pin::Inactive => crate::policy::Pin::Inactive,
        }),
        active: matches!(
            j.state,
            Some(ActivationState::Active | ActivationState::Paused)
        ),
        held: j.state == Some(ActivationState::Paused),
        writes_data: j.writes_data,
        maintenance: j.maintenance,
        stretch: j.stretch,
        stretch_max: j.stretch_max,
        memory_limit: j.memory_limit,
    }
}

/// The policy's view of one running processor.
pub fn processor_view(row: &LocalProcessor, u: &Utilization) -> ProcessorView {
    ProcessorView {
        processor_id: row.processor_id,
        name: row.name.clone(),
        instances: u.instances as u32,
        min_instances: min_instances(row),
        max_instances: max_instances(row),
        utilization: u.fraction,
    }
}

/// The fewest instances of a processor (its own `instances`).
pub fn min_instances(row: &LocalProcessor) -> u32 {
    row.instances.clamp(1, u32::MAX as i64) as u32
}

/// The most instances of a processor (`max_instances`, at least `instances`).
pub fn max_instances(row: &LocalProcessor) -> u32 {
    row.max_instances
        .max(row.instances)
        .clamp(1, u32::MAX as i64) as u32
}

/// What the Supervisor records with each sample, and when.
#[derive(Debug, Default)]
pub struct StatsBook {
    /// When statistics were last recorded (the reduced cadence counts from it).
    last_recorded: Option<i64>,
    /// Elapsed ms per (processor, schedule kind) since `elapsed_since`.
    elapsed: BTreeMap<(i64, ScheduleKind), i64>,
    elapsed_since: Option<i64>,
}

impl StatsBook {
    /// Adds the elapsed time of the runs that finished on `processor_id`, by their job's kind.
    pub fn add_elapsed(
        &mut self,
        processor_id: i64,
        u: &Utilization,
        kinds: &HashMap<i64, ScheduleKind>,
    ) {
        for &(job_id, ms) in &u.elapsed_by_job {
            let kind = kinds
                .get(&job_id)
                .copied()
                .unwrap_or(ScheduleKind::OnDemand);
            *self.elapsed.entry((processor_id, kind)).or_default() += ms;
        }
    }

    /// Whether the sample at `at` records the elapsed sums (a minute since the last).
    pub fn elapsed_due(&self, at: i64) -> bool {
        self.elapsed_since
            .is_some_and(|t| at - t >= ELAPSED_EVERY_MS)
    }

    /// The rows to record with the sample `report`, or none while writes are paused and the
    /// last record is less than a minute old. `processors`: each running processor's row, its
    /// utilization over the sample, and its instances after the sample's decisions; `kinds_of`: the schedule kinds of each processor's jobs
    /// (its elapsed sums are recorded for those kinds, zeros included).
    pub fn rows(
        &mut self,
        report: &HealthReport,
        writes_paused: bool,
        processors: &[(&LocalProcessor, &Utilization, u32)],
        kinds_of: &HashMap<i64, Vec<ScheduleKind>>,
    ) -> Vec<StatSample> {
        let at = report.sample.at;
        let since = *self.elapsed_since.get_or_insert(at);
        if writes_paused
            && self
                .last_recorded
                .is_some_and(|t| at - t < REDUCED_STATS_EVERY_MS)
        {
            return Vec::new();
        }
        self.last_recorded = Some(at);
        let mut rows = report.stats();
        for (row, u, instances) in processors {
            let subject = Some(row.name.clone());
            rows.push(StatSample {
                stat_type: "job_processor.busy_ms".into(),
                unit: "ms",
                subject: subject.clone(),
                value: u.busy_ms as f64,
            });
            rows.push(StatSample {
                stat_type: "job_processor.instances".into(),
                unit: "instances",
                subject,
                value: f64::from(*instances),
            });
        }
        // A sample recorded without the processors (`record_only`: a step still being
        // written, or the node paused) leaves the minute's sums to the next step's sample:
        // flushing here would write none of them and lose them all.
        if at - since >= ELAPSED_EVERY_MS && !processors.is_empty() {
            for (row, _, _) in processors {
                for &kind in kinds_of.get(&row.processor_id).into_iter().flatten() {
                    let ms = self
                        .elapsed
                        .get(&(row.processor_id, kind))
                        .copied()
                        .unwrap_or(0);
                    rows.push(StatSample {
                        stat_type: kind.elapsed_stat().into(),
                        unit: "ms",
                        subject: Some(row.name.clone()),
                        value: ms as f64,
                    });
                }
            }
            self.elapsed.clear();
            self.elapsed_since = Some(at);
        }
        rows
    }
}

/// The schedule kinds of the jobs whose runs `utils` report (a map of a few entries, not of
/// the whole catalog).
pub fn kinds_of_runs<'a>(
    jobs: &[JobActivation],
    utils: impl Iterator<Item = &'a Utilization>,
) -> HashMap<i64, ScheduleKind> {
    let wanted: std::collections::HashSet<i64> = utils
        .flat_map(|u| u.elapsed_by_job.iter().map(|(job, _)| *job))
        .collect();
    if wanted.is_empty() {
        return HashMap::new();
    }
    jobs.iter()
        .filter(|j| wanted.contains(&j.job_id))
        .map(|j| (j.job_id, j.schedule_kind))
        .collect()
}

/// Each processor's schedule kinds (sorted, unique): the kinds its elapsed sums are recorded
/// for, zeros included.
pub fn kinds_by_processor(jobs: &[JobActivation]) -> HashMap<i64, Vec<ScheduleKind>> {
    let mut by_processor: HashMap<i64, Vec<ScheduleKind>> = HashMap::new();
    for j in jobs {
        let kinds = by_processor.entry(j.processor_id).or_default();
        if !kinds.contains(&j.schedule_kind) {
            kinds.push(j.schedule_kind);
        }
    }
    for kinds in by_processor.values_mut() {
        kinds.sort();
    }
    by_processor
}

/// The start-up activation (pure): the policy's minimum active — each a decision, with its
/// cause —, every other job standby with the reason.
pub fn start_up(policy: &Policy, jobs: &[JobActivation]) -> Vec<ActivationChange> {
    let views: Vec<JobView> = jobs.iter().map(job_view).collect();
    let minimum = policy.initial_active(&views);
    jobs.iter()
        .map(|job| {
            let (state, reason, decision) = if minimum.contains(&job.job_id) {
                let (why, cause) = match (job.pin, job.required) {
                    (Some(Pin::Active), _) => ("pinned active", Cause::Pin),
                    (_, true) => ("start-up minimum: required", Cause::Minimum),
                    _ => (
                        "start-up minimum: priority at or above the floor",
                        Cause::Minimum,
                    ),
                };
                // The start-up activation is a decision like any later one.
                (ActivationState::Active, why, Some(cause.as_str()))
            } else if job.pin == Some(Pin::Inactive) {
                (ActivationState::Standby, "pinned inactive", None)
            } else {
                (
                    ActivationState::Standby,
                    "standby: activated in priority order while the node is healthy",
                    None,
                )
            };
            ActivationChange {
                job_id: job.job_id,
                name: job.name.clone(),
                state,
                reason: reason.to_string(),
                decision,
            }
        })
        .collect()
}

/// Jobs new to the node (pure): active at once — a decision caused by the operator — while
/// the node is healthy (a short disk holds back only jobs that write data), else standby with
/// the pressure named. While writes are paused, a job admitted outside maintenance is
/// `paused` rather than `active` (nothing but maintenance is claimed then), so that the
/// resume names it and it runs at once.
pub fn admit(
    jobs: &[JobActivation],
    others_ok: bool,
    disk_short: bool,
    writes_paused: bool,
    pressure: &[String],
) -> Vec<ActivationChange> {
    jobs.iter()
        .filter(|job| job.state.is_none())
        .map(|job| {
            let waits_for_disk = disk_short && job.writes_data && !job.maintenance;
            let (state, reason, decision) = if others_ok && !waits_for_disk {
                let reason = if writes_paused && !job.maintenance {
                    "added or enabled by an operator while writes are paused: held (paused) \
                     until they resume, then active at once"
                } else if disk_short {
                    "added or enabled by an operator while the node is healthy but for a short \
                     disk, and it writes no data: active at once"
                } else {
                    "added or enabled by an operator while the node is healthy: active at once"
                };
                let state = if writes_paused && !job.maintenance {
                    ActivationState::Paused
                } else {
                    ActivationState::Active
                };
                (state, reason.to_string(), Some(Cause::Operator.as_str()))
            } else {
                let reason = format!(
                    "added or enabled while the node is under pressure ({}): standby until the \
                     policy activates it, in priority order, once the node is healthy (pin it \
                     active to run it regardless)",
                    pressure.join(", ")
                );
                (ActivationState::Standby, reason, None)
            };
            ActivationChange {
                job_id: job.job_id,
                name: job.name.clone(),
                state,
                reason,
                decision,
            }
        })
        .collect()
}

/// A recorded step's decisions as the events an embedding application is told.
pub fn decision_events(step: &DecidedStep) -> impl Iterator<Item = Event> + '_ {
    step.decisions.iter().map(|d| Event::Decision {
        action: d.action.as_str().to_string(),
        subject: step.cx.subject_of(d),
        reason: d.reason.clone(),
        cause: d.cause.as_str().to_string(),
        at: d.at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Sample;

    fn report(at: i64) -> HealthReport {
        HealthReport {
            sample: Sample {
                at,
                cpu_used: 10.0,
                memory_available: 1,
                memory_total: 2,
                swap_used: 0,
                swap_total: 0,
                disk_available: 1,
                disk_total: 2,
                disk_mount: "/".into(),
                net_bytes_per_s: 0.0,
                psi_cpu: None,
                psi_memory: None,
                psi_io: None,
                cpu_cores: 0.0,
                cpu_bound: crate::policy::Bound::Host,
                cpu_throttled: None,
                memory_bound: crate::policy::Bound::Host,
            },
            net_rx_per_s: 0.0,
            net_tx_per_s: 0.0,
            load_1: 0.0,
            process_cpu: 0.0,
            process_rss: 0,
            cgroup_oom_kills: None,
        }
    }

    fn row() -> LocalProcessor {
        LocalProcessor {
            processor_id: 1,
            name: "main".into(),
            instances: 1,
            max_instances: 2,
            remote: false,
            prefetch: None,
        }
    }

    fn util(elapsed_by_job: Vec<(i64, i64)>) -> Utilization {
        Utilization {
            fraction: 0.5,
            busy_ms: 500,
            instances: 1,
            elapsed_by_job,
        }
    }

    #[test]
    fn statistics_are_recorded_every_sample_or_once_a_minute_while_writes_are_paused() {
        let mut book = StatsBook::default();
        let none = HashMap::new();
        assert!(!book.rows(&report(0), false, &[], &none).is_empty());
        assert!(!book.rows(&report(1_000), false, &[], &none).is_empty());
        // Paused: nothing until a minute after the last record.
        assert!(book.rows(&report(2_000), true, &[], &none).is_empty());
        assert!(book.rows(&report(60_999), true, &[], &none).is_empty());
        assert!(!book.rows(&report(61_000), true, &[], &none).is_empty());
        assert!(book.rows(&report(62_000), true, &[], &none).is_empty());
        // Resumed: every sample again.
        assert!(!book.rows(&report(63_000), false, &[], &none).is_empty());
    }

    #[test]
    fn elapsed_time_is_summed_per_processor_and_schedule_kind_per_minute() {
        let mut book = StatsBook::default();
        let kinds: HashMap<i64, ScheduleKind> =
            [(10, ScheduleKind::RunEvery), (11, ScheduleKind::RunAlways)].into();
        let kinds_of: HashMap<i64, Vec<ScheduleKind>> = [(
            1,
            vec![
                ScheduleKind::RunAlways,
                ScheduleKind::RunEvery,
                ScheduleKind::Cron,
            ],
        )]
        .into();
        let r = row();
        let sums = |rows: &[StatSample]| -> Vec<(String, f64)> {
            rows.iter()
                .filter(|s| s.stat_type.contains("elapsed"))
                .map(|s| (s.stat_type.clone(), s.value))
                .collect()
        };
        let u = util(vec![(10, 300), (11, 50)]);
        book.add_elapsed(1, &u, &kinds);
        assert!(sums(&book.rows(&report(0), false, &[(&r, &u, 1)], &kinds_of)).is_empty());
        let u2 = util(vec![(10, 200), (11, 25)]);
        book.add_elapsed(1, &u2, &kinds);
        let rows = book.rows(&report(60_000), false, &[(&r, &u2, 2)], &kinds_of);
        assert_eq!(
            sums(&rows),
            [
                (
                    "job_processor.stat_elapsed_time_sum_run_always_minute".to_string(),
                    75.0
                ),
                (
                    "job_processor.stat_elapsed_time_run_every_sum".to_string(),
                    500.0
                ),
                ("job_processor.stat_elapsed_time_cron_sum".to_string(), 0.0),
            ]
        );
        let instances = rows
            .iter()
            .find(|s| s.stat_type == "job_processor.instances")
            .unwrap();
        assert_eq!(
            (instances.subject.as_deref(), instances.value),
            (Some("main"), 2.0)
        );
        // A sample recorded without the processors (a step still being written) when the
        // next minute is due keeps the sums for the next step's sample.
        book.add_elapsed(1, &util(vec![(11, 40)]), &kinds);
        assert!(sums(&book.rows(&report(120_000), false, &[], &HashMap::new())).is_empty());
        let rows = book.rows(&report(121_000), false, &[(&r, &u2, 2)], &kinds_of);
        assert_eq!(
            sums(&rows)[0],
            (
                "job_processor.stat_elapsed_time_sum_run_always_minute".to_string(),
                40.0
            )
        );
        // The next minute starts from zero.
        let rows = book.rows(&report(181_000), false, &[(&r, &u2, 2)], &kinds_of);
        assert!(
            sums(&rows).iter().all(|(_, v)| *v == 0.0),
            "{:?}",
            sums(&rows)
        );
    }

    fn new_job(job_id: i64, name: &str, writes_data: bool, maintenance: bool) -> JobActivation {
        JobActivation {
            job_id,
            name: name.into(),
            priority: 0,
            required: false,
            pin: None,
            state: None,
            writes_data,
            maintenance,
            stretch: 1,
            stretch_max: 1,
            schedule_kind: ScheduleKind::Cron,
            processor_id: 1,
            memory_limit: None,
        }
    }

    /// Issue 18, point 4: a job added while writes are paused (a catalog write failed for a
    /// full disk, the disk's level not short) is `paused`, not `active` — the node claims only
    /// maintenance runs meanwhile — so it is listed as stopped and the resume lets it go;
    /// maintenance is active at once.
    #[test]
    fn a_job_added_while_writes_are_paused_is_admitted_paused_and_maintenance_active() {
        let jobs = [
            new_job(1, "reader", false, false),
            new_job(2, "writer", true, false),
            new_job(3, "prune", true, true),
        ];
        let changes = admit(&jobs, true, false, true, &[]);
        let states: Vec<(&str, ActivationState)> =
            changes.iter().map(|c| (c.name.as_str(), c.state)).collect();
        assert_eq!(
            states,
            [
                ("reader", ActivationState::Paused),
                ("writer", ActivationState::Paused),
                ("prune", ActivationState::Active),
            ]
        );
        assert!(changes[0].reason.contains("while writes are paused"));
        assert!(changes.iter().all(|c| c.decision == Some("operator")));
        // Writes not paused: active at once, as before.
        let changes = admit(&jobs, true, false, false, &[]);
        assert!(changes.iter().all(|c| c.state == ActivationState::Active));
    }
}
