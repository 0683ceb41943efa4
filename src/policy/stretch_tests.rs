//! Simulations of stretching (issue 18, point 8): under strain the policy first stretches the
//! periods of recurring jobs that allow it, lowest priority first, and sheds only when nothing
//! is left to stretch; when the node is healthy again it undoes both, in reverse, most
//! important first. Each step is a decision with its reason.
//!
//! Invariant: reads no clock and imports neither actix nor rusqlite; a seed fixes every run.

use crate::policy::testkit::*;
use crate::policy::{Action, Cause, Decision, JobView, PolicyConfig, Resource};
use crate::sim::SimRng;

/// `mixed_jobs()` with stretch allowances: `thumbnails` ×4, `heartbeat` (required) ×2,
/// `stats` ×2, `report` ×4; the others run as scheduled or not at all.
fn stretchy_jobs() -> Vec<JobView> {
    let mut jobs = mixed_jobs();
    for j in &mut jobs {
        j.stretch_max = match j.job_id {
            7 | 4 => 4,
            1 | 10 => 2,
            _ => 1,
        };
    }
    jobs
}

fn stretches(w: &World) -> Vec<(i64, u32)> {
    w.log
        .iter()
        .filter_map(|d| match d.action {
            Action::Stretch { job_id, factor } => Some((job_id, factor)),
            _ => None,
        })
        .collect()
}

fn unstretches(w: &World) -> Vec<(i64, u32)> {
    w.log
        .iter()
        .filter_map(|d| match d.action {
            Action::Unstretch { job_id, factor } => Some((job_id, factor)),
            _ => None,
        })
        .collect()
}

fn is_shed(d: &Decision) -> bool {
    matches!(d.action, Action::Deactivate { .. }) && d.cause == Cause::Health
}

/// 4 minutes of health, a CPU ramp from 60 % to a strained 93–95 % over 3 minutes held for 8
/// minutes, then 10 minutes of health.
fn ramp(seed: u64) -> (World, i64) {
    let mut rng = SimRng::new(seed);
    let mut w = World::start(PolicyConfig::default(), stretchy_jobs());
    w.run(&calm(&mut rng, T0, 48));
    assert_eq!(w.active_ids().len(), 10, "{}", w.dump());
    let start = T0 + 48 * TICK;
    w.run(&trace(start, 36 + 96, |i, s| {
        s.cpu_used = (60.0 + i as f64).min(94.0) + noise(&mut rng, 1.0);
    }));
    let end = start + (36 + 96) * TICK;
    w.run(&calm(&mut rng, end, 120));
    (w, end)
}

#[test]
fn a_cpu_ramp_stretches_low_priority_periods_before_any_shed_and_restores_them_after() {
    let (w, end) = ramp(0x5eed_0801);
    println!("decision log of the stretching simulation:\n{}", w.dump());
    let first_shed = w.log.iter().position(is_shed).expect("a shed");
    let last_stretch = w
        .log
        .iter()
        .rposition(|d| matches!(d.action, Action::Stretch { .. }))
        .expect("a stretch");
    assert!(last_stretch < first_shed, "{}", w.dump());
    // Lowest priority first, each to its allowance (doubling), the required `heartbeat`
    // included (it allows it), `prune` (maintenance, ×1) never.
    assert_eq!(
        stretches(&w),
        [(7, 2), (7, 4), (1, 2), (10, 2), (4, 2), (4, 4)],
        "{}",
        w.dump()
    );
    let first = w
        .log
        .iter()
        .find(|d| matches!(d.action, Action::Stretch { .. }))
        .unwrap();
    assert!(
        first.reason.starts_with("cpu 9")
            && first.reason.ends_with(
                ": stretch the period of `thumbnails` (priority 5, the lowest-priority \
                 stretchable job) ×1 -> ×2 (at most ×4) before shedding anything"
            ),
        "{}",
        first.reason
    );
    assert_eq!(first.evidence[0].resource, Resource::Cpu);
    // Then the sheds, lowest first, down to the minimum (strained: one per step).
    let sheds: Vec<i64> = w
        .log
        .iter()
        .filter(|d| is_shed(d))
        .filter_map(|d| d.action.job_id())
        .collect();
    assert_eq!(sheds, [7, 8, 10, 6, 4, 5, 9], "{}", w.dump());

    // Healthy again: shed jobs come back first, most important first; then the periods,
    // most important first, halving; at the end every job runs as scheduled.
    let after: Vec<&Decision> = w.log.iter().filter(|d| d.at >= end).collect();
    let restores: Vec<i64> = after
        .iter()
        .filter(|d| matches!(d.action, Action::Activate { .. }))
        .filter_map(|d| d.action.job_id())
        .collect();
    assert_eq!(restores, [9, 5, 4, 6, 10, 8, 7], "{}", w.dump());
    let last_restore = after
        .iter()
        .rposition(|d| matches!(d.action, Action::Activate { .. }))
        .unwrap();
    let first_unstretch = after
        .iter()
        .position(|d| matches!(d.action, Action::Unstretch { .. }))
        .unwrap();
    assert!(last_restore < first_unstretch, "{}", w.dump());
    assert_eq!(
        unstretches(&w),
        [(4, 2), (4, 1), (10, 1), (1, 1), (7, 2), (7, 1)],
        "{}",
        w.dump()
    );
    let unstretch = after[first_unstretch];
    assert!(
        unstretch.reason.starts_with("all resources ok again for ")
            && unstretch.reason.ends_with(
                ": bring the period of `report` (priority 50) closer to its schedule, ×4 -> ×2"
            ),
        "{}",
        unstretch.reason
    );
    assert_eq!(w.active_ids().len(), 10);
    assert!(w.jobs.iter().all(|j| j.stretch == 1), "{:?}", w.jobs);
}

/// Stretch steps follow the strained pace: the first at once, then one per `step_interval`,
/// none within `cooldown` of an unstretch; critical skips stretching and sheds.
#[test]
fn stretching_follows_the_strained_pace_and_critical_sheds_at_once() {
    let mut w = World::start(PolicyConfig::default(), stretchy_jobs());
    let mut rng = SimRng::new(7);
    w.run(&calm(&mut rng, T0, 48));
    let start = T0 + 48 * TICK;
    w.run(&trace(start, 14, |_, s| s.cpu_used = 93.0));
    let times: Vec<i64> = w
        .log
        .iter()
        .filter(|d| matches!(d.action, Action::Stretch { .. }))
        .map(|d| d.at - start)
        .collect();
    assert_eq!(times, [5_000, 35_000, 65_000], "{}", w.dump());
    let critical = start + 14 * TICK;
    w.run(&trace(critical, 3, |_, s| s.cpu_used = 99.0));
    let after: Vec<&Decision> = w.log.iter().filter(|d| d.at >= critical).collect();
    assert!(after.iter().all(|d| is_shed(d)), "{}", w.dump());
    assert_eq!(after.len(), 2, "{}", w.dump());
}

/// Only jobs that allow it are stretched; with none, strain sheds as before.
#[test]
fn without_allowances_strain_sheds_as_before() {
    let mut w = World::start(PolicyConfig::default(), mixed_jobs());
    let mut rng = SimRng::new(8);
    w.run(&calm(&mut rng, T0, 48));
    w.run(&trace(T0 + 48 * TICK, 10, |_, s| s.cpu_used = 93.0));
    assert!(stretches(&w).is_empty());
    assert!(w.log.iter().any(is_shed));
}
