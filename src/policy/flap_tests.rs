//! Simulations of the flap budget and priority order under the real test's settings (1 s
//! samples, `step_interval` 1 s, `cooldown` 5 s): a load switching on and off every few
//! seconds must not toggle a job more than twice a minute, must never leave a job standby
//! while a less important one runs, and a step must not wait an extra sample for a
//! millisecond of timer jitter (issue 18, defects 2, 3 and 6).
//!
//! Invariant: reads no clock and imports neither actix nor rusqlite; a seed fixes every run.

use crate::policy::testkit::*;
use crate::policy::{Action, Cause, JobView, Level, PolicyConfig, Resource};
use crate::sim::SimRng;

/// One sample a second, as `tests/self_tuning.rs` configures the node.
const SECOND: i64 = 1_000;

/// The real test's pacing: steps of 1 s, a cooldown of 5 s.
fn fast(cooldown: i64) -> PolicyConfig {
    PolicyConfig {
        step_interval: 1_000,
        cooldown,
        ..PolicyConfig::default()
    }
}

/// A required job and five standby jobs of distinct priorities, as in the report
/// (`a70`, `b60`, …).
fn ladder() -> Vec<JobView> {
    let mut jobs = vec![JobView {
        required: true,
        name: "keeper".into(),
        ..job(1, 10)
    }];
    for (i, p) in [70, 60, 50, 40, 30].into_iter().enumerate() {
        jobs.push(JobView {
            name: format!("{}{p}", (b'a' + i as u8) as char),
            ..job(i as i64 + 2, p)
        });
    }
    jobs
}

/// 30 s of health (every job active), then `secs` of a load that is on for `half` ms (CPU
/// 99 %, critical) and off for `half` ms (CPU 10 %), with a little noise; checks after every
/// sample that no job is standby while a less important one runs.
fn flap(cfg: PolicyConfig, seed: u64, half: i64, secs: usize) -> World {
    let mut rng = SimRng::new(seed);
    let mut w = World::start(cfg, ladder());
    w.run(&trace_every(T0, 30, SECOND, |_, s| {
        s.cpu_used = 20.0 + noise(&mut rng, 5.0)
    }));
    assert_eq!(w.active_ids().len(), 6, "ramp-up:\n{}", w.dump());
    let start = T0 + 30 * SECOND;
    let phase = rng.below(half as u64) as i64;
    for s in trace_every(start, secs, SECOND, |i, s| {
        let on = ((i as i64 * SECOND + phase) / half) % 2 == 0;
        s.cpu_used = if on { 99.0 } else { 10.0 } + noise(&mut rng, 0.8);
    }) {
        w.feed(&s);
        let inv = w.inversions();
        assert!(
            inv.is_empty(),
            "at +{} s `{}` waits while `{}` runs:\n{}",
            (s.at - T0) / 1000,
            inv[0].0.name,
            inv[0].1.name,
            w.dump()
        );
    }
    w
}

/// The most health toggles of any one job in any window of 60 s.
fn max_toggles_of_a_job_per_minute(w: &World) -> usize {
    w.jobs
        .iter()
        .flat_map(|j| {
            w.toggles_of(j.job_id, 0, i64::MAX)
                .iter()
                .map(|d| w.toggles_of(j.job_id, d.at, d.at + 59_999).len())
                .collect::<Vec<_>>()
        })
        .max()
        .unwrap_or(0)
}

/// Regression (issue 18, defect 2): with `cooldown` 5 s the budget was 2 toggles per 10 s, and
/// a load flapping 4 s on / 4 s off toggled each job 5–7 times a minute. The budget's window is
/// now a minute whatever the cooldown.
#[test]
fn a_job_toggles_at_most_twice_a_minute_whatever_the_cooldown() {
    for cooldown in [0, 1_000, 5_000, 30_000] {
        for half in [2_000, 3_000, 4_000, 5_000, 8_000, 15_000] {
            for seed in 0..4 {
                let w = flap(fast(cooldown), seed, half, 120);
                let max = max_toggles_of_a_job_per_minute(&w);
                assert!(
                    max <= 2,
                    "cooldown {cooldown}, half {half}, seed {seed}: {max} toggles\n{}",
                    w.dump()
                );
                assert!(
                    w.log
                        .iter()
                        .any(|d| matches!(d.action, Action::Deactivate { .. })),
                    "cooldown {cooldown}, half {half}: the flapping load shed nothing"
                );
            }
        }
    }
}

/// Regression (issue 18, defect 3): when the lowest job had spent its budget, a critical shed
/// took the next one up ("shed job `a70` (priority 70); `b60` was toggled twice within 10 s"),
/// and for 41 of 120 s a more important job was standby while a less important one ran. Now
/// the policy holds, says so once, and `flap` checks the order after every sample.
#[test]
fn flapping_never_leaves_a_job_standby_while_a_less_important_one_runs() {
    let mut holds = 0;
    for half in [2_000, 3_000, 4_000, 5_000] {
        for seed in 0..6 {
            let w = flap(fast(5_000), seed, half, 120);
            holds += w
                .log
                .iter()
                .filter(|d| matches!(d.action, Action::Hold { .. }))
                .count();
        }
    }
    assert!(holds > 0, "the flap budget never made the policy hold");
}

/// The hold itself: `e30` (the lowest) was shed and restored within the minute, so a critical
/// load holds instead of shedding `d40`, says so once, and sheds `e30` when its budget frees.
#[test]
fn a_critical_shed_holds_rather_than_take_the_next_job_up() {
    let mut w = World::start(fast(5_000), ladder());
    // 70 s of health: the ramp-up's activations leave the flap window.
    w.run(&trace_every(T0, 70, SECOND, |_, s| s.cpu_used = 20.0));
    let at = |s: i64| T0 + s * SECOND;
    // Critical from +70 s: `e30` is shed at +71 s.
    w.run(&trace_every(at(70), 2, SECOND, |_, s| s.cpu_used = 99.0));
    assert_eq!(
        w.log.last().unwrap().action,
        Action::Deactivate { job_id: 6 }
    );
    // Ok from +72 s: `e30` is restored once ok and 5 s after the shed (+76 s).
    w.run(&trace_every(at(72), 6, SECOND, |_, s| s.cpu_used = 10.0));
    let restored = w.log.last().unwrap();
    assert_eq!(
        restored.action,
        Action::Activate { job_id: 6 },
        "{}",
        w.dump()
    );
    assert_eq!(restored.at, at(76));
    // Critical again: `e30` may not switch a third time before +71 s + 60 s.
    w.run(&trace_every(at(78), 30, SECOND, |_, s| s.cpu_used = 99.0));
    let after: Vec<_> = w.log.iter().filter(|d| d.at > at(76)).collect();
    assert_eq!(after.len(), 1, "one hold, said once:\n{}", w.dump());
    assert_eq!(after[0].action, Action::Hold { job_id: 6 });
    assert_eq!(after[0].cause, Cause::Health);
    assert_eq!(
        after[0].reason,
        "cpu 99.0% > 97% (critical) for 2 samples in a row (1.0 s): hold — the next job to \
         shed, `e30` (priority 30), was switched twice within 60 s and may switch again in 52 \
         s; no job more important than it is shed in its place"
    );
    assert!(w.job(2).active && w.job(3).active && w.job(4).active && w.job(5).active);
    // Its budget frees at +131 s: then it is shed, and the others follow one per sample.
    w.run(&trace_every(at(108), 30, SECOND, |_, s| s.cpu_used = 99.0));
    let sheds: Vec<(i64, i64)> = w
        .log
        .iter()
        .filter(|d| d.at > at(76) && matches!(d.action, Action::Deactivate { .. }))
        .map(|d| ((d.at - T0) / 1000, d.action.job_id().unwrap()))
        .collect();
    assert_eq!(
        sheds,
        [(131, 6), (132, 5), (133, 4), (134, 3), (135, 2)],
        "{}",
        w.dump()
    );
}

/// Regression (issue 18, defect 6): a step counted in wall time waited one more sample when
/// the samples came a millisecond early (a default 30 s step took 35 s). A sample up to a
/// quarter interval early now reaches the step; one more than that does not.
#[test]
fn a_step_is_not_delayed_a_sample_by_millisecond_jitter() {
    let first_activation = |tick: i64| {
        let mut w = World::start(PolicyConfig::default(), ladder());
        w.run(&trace_every(T0, 20, tick, |_, _| {}));
        w.toggles()[0].at - T0
    };
    // 5 s samples that arrive 1 ms early each: the 6th is 29.994 s after the first.
    assert_eq!(first_activation(4_999), 29_994);
    // Exact 5 s samples: the 6th, at 30 s.
    assert_eq!(first_activation(5_000), 30_000);
    // 4 s samples: 28 s is a whole second short (more than a quarter interval): 32 s.
    assert_eq!(first_activation(4_000), 32_000);
}

/// The hysteresis of the flapping resource, for the record: a load on for 2 s never enters
/// the critical level with `enter_after` 2 at 1 s samples only if the phase splits it — the
/// flap test above sees both; this pins that the level does reach critical in the 4 s case.
#[test]
fn a_four_second_load_reaches_the_critical_level() {
    let w = flap(fast(5_000), 0, 4_000, 16);
    assert!(
        w.log
            .iter()
            .any(|d| d.reason.contains("(critical)") && d.cause == Cause::Health),
        "{}",
        w.dump()
    );
    assert_eq!(w.policy.level(Resource::Memory), Level::Ok);
}

/// Regression (found by the real flapping test): a job was restored on a sample reading CPU
/// 98.5% while the level was still ok by hysteresis, with the reason "all resources ok again
/// for 1 sample". An increase now needs every latest reading ok as well.
#[test]
fn regression_no_restore_on_a_sample_past_a_threshold() {
    let mut w = World::start(fast(5_000), ladder());
    w.run(&trace_every(T0, 70, SECOND, |_, s| s.cpu_used = 20.0));
    let at = |s: i64| T0 + s * SECOND;
    w.run(&trace_every(at(70), 2, SECOND, |_, s| s.cpu_used = 99.0));
    w.run(&trace_every(at(72), 4, SECOND, |_, s| s.cpu_used = 10.0));
    // The restore is due at +76 s; that sample reads 98.5%.
    w.run(&trace_every(at(76), 1, SECOND, |_, s| s.cpu_used = 98.5));
    assert_eq!(
        w.policy.level(Resource::Cpu),
        Level::Ok,
        "one reading enters nothing"
    );
    assert_eq!(
        w.log.last().unwrap().action,
        Action::Deactivate { job_id: 6 }
    );
    w.run(&trace_every(at(77), 1, SECOND, |_, s| s.cpu_used = 10.0));
    let restore = w.log.last().unwrap();
    assert_eq!(restore.action, Action::Activate { job_id: 6 });
    assert_eq!(restore.at, at(77));
    assert_eq!(
        restore.reason,
        "all resources ok again for 1 sample, 6.0 s after the last shed: restore shed job `e30` \
         (priority 30)"
    );
}
