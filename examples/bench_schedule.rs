//! Benchmark: the next wake-up over 100,000 jobs of mixed schedule kinds (`run_every`,
//! `run_on_the`, `run_at`, `run_date`, cron, `run_always`; five zones, some with DST).
//!
//! Run with `cargo run --release --example bench_schedule`. Prints, per measurement, the
//! median and the spread of several rounds. Target (issue 3): the wake-up over 100,000 jobs
//! in under 50 ms.
//!
//! - `next_wake`: what the runtime does to arm its one timer — ask every job's planner and
//!   take the earliest. Planners keep their next slot, so this is the steady-state cost.
//! - `next_slot_after` (cold): every schedule searched from scratch, as after a restart.
//! - `restore planners`: building the 100,000 planners from catalog history (includes the
//!   cold search, once per job).
//!
//! Invariant: the schedules are fixed by a seed, so two runs measure the same work.

use std::hint::black_box;
use std::time::{Duration, Instant};

use jobvisor::schedule::{JobHistory, JobPlanner, PlanPolicy, Schedule, ScheduleSpec};
use jobvisor::sim::SimRng;

const JOBS: usize = 100_000;
const ROUNDS: usize = 7;
/// 2026-03-01T00:00:00Z, a week before the New York DST change.
const NOW_MS: i64 = 1_772_323_200_000;

fn random_spec(rng: &mut SimRng) -> (ScheduleSpec, &'static str, &'static str) {
    let zones = [
        "UTC",
        "America/New_York",
        "Europe/Berlin",
        "Asia/Kolkata",
        "Australia/Lord_Howe",
    ];
    let gates = [
        "#monday#",
        "#last_day_of_month#",
        "15",
        "#first_day_of_year#",
    ];
    let crons = [
        "*/5 * * * *",
        "0 30 2 * * *",
        "0 */2 * * MON-FRI",
        "15 10 L * *",
        "0 0 1 1 *",
        "*/10 * * * * *",
    ];
    let zone = *rng.pick(&zones);
    let gate = rng.chance(25).then(|| rng.pick(&gates).to_string());
    let kind = rng.below(100);
    let label = match kind {
        0..25 => "run_every",
        25..45 => "run_on_the",
        45..65 => "run_at",
        65..70 => "run_date only",
        70..90 => "cron",
        _ => "run_always",
    };
    let spec = if kind < 25 {
        ScheduleSpec {
            run_every: Some(rng.range_i64(1, 240)),
            run_date: gate,
            ..Default::default()
        }
    } else if kind < 45 {
        ScheduleSpec {
            run_on_the: Some(rng.range_i64(0, 59)),
            run_date: gate,
            ..Default::default()
        }
    } else if kind < 65 {
        ScheduleSpec {
            run_at: Some(format!("{:02}:{:02}", rng.below(24), rng.below(60))),
            run_date: gate,
            ..Default::default()
        }
    } else if kind < 70 {
        ScheduleSpec {
            run_date: Some(rng.pick(&gates).to_string()),
            ..Default::default()
        }
    } else if kind < 90 {
        ScheduleSpec {
            cron: Some(rng.pick(&crons).to_string()),
            ..Default::default()
        }
    } else {
        ScheduleSpec {
            run_always: true,
            run_delay: rng.range_i64(0, 60_000),
            ..Default::default()
        }
    };
    (spec, zone, label)
}

fn median(mut v: Vec<Duration>) -> (Duration, Duration, Duration) {
    v.sort();
    (v[0], v[v.len() / 2], v[v.len() - 1])
}

fn measure<F: FnMut() -> i64>(mut f: F) -> (Duration, Duration, Duration, i64) {
    let mut times = Vec::with_capacity(ROUNDS);
    let mut out = 0;
    for _ in 0..ROUNDS {
        let t0 = Instant::now();
        out = black_box(f());
        times.push(t0.elapsed());
    }
    let (min, med, max) = median(times);
    (min, med, max, out)
}

fn main() {
    let mut rng = SimRng::new(2026);
    let (schedules, labels): (Vec<Schedule>, Vec<&str>) = (0..JOBS)
        .map(|_| {
            let (spec, zone, label) = random_spec(&mut rng);
            let s = Schedule::parse(&spec, zone.parse().unwrap())
                .expect("the generator makes valid specs");
            (s, label)
        })
        .unzip();
    // Every job is up to date (its latest slot decided, run_always jobs mid-run), so nothing
    // is due and each planner has a real next wake-up to report.
    let history = |s: &Schedule| JobHistory {
        last_slot: s.prev_slot_at_or_before(NOW_MS),
        since: Some(NOW_MS - 86_400_000),
        last_begin: Some(NOW_MS - 60_000),
        last_end: Some(NOW_MS - 30_000),
        running: s.run_always_delay().is_some() as u32,
        queued: 0,
    };

    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!("jobvisor schedule benchmark: {JOBS} jobs, mixed kinds, {ROUNDS} rounds");
    println!(
        "{:<34} {:>10} {:>10} {:>10}",
        "measurement", "min ms", "median ms", "max ms"
    );
    let row = |name: &str, (min, med, max, _): (Duration, Duration, Duration, i64)| {
        println!(
            "{name:<34} {:>10.2} {:>10.2} {:>10.2}",
            ms(min),
            ms(med),
            ms(max)
        );
    };

    let restore = measure(|| {
        let planners: Vec<JobPlanner> = schedules
            .iter()
            .map(|s| JobPlanner::restore(s.clone(), PlanPolicy::default(), history(s)))
            .collect();
        planners.len() as i64
    });
    let planners: Vec<JobPlanner> = schedules
        .iter()
        .map(|s| JobPlanner::restore(s.clone(), PlanPolicy::default(), history(s)))
        .collect();

    let wake = measure(|| {
        planners
            .iter()
            .filter_map(|p| p.next_wake(NOW_MS))
            .min()
            .unwrap_or(i64::MAX)
    });
    let cold = measure(|| {
        schedules
            .iter()
            .filter_map(|s| s.next_slot_after(NOW_MS))
            .min()
            .unwrap_or(i64::MAX)
    });
    row("next_wake over all planners", wake);
    row("next_slot_after, cold (restart)", cold);
    for kind in [
        "run_every",
        "run_on_the",
        "run_at",
        "run_date only",
        "cron",
        "run_always",
    ] {
        let subset: Vec<&Schedule> = schedules
            .iter()
            .zip(&labels)
            .filter(|(_, l)| **l == kind)
            .map(|(s, _)| s)
            .collect();
        let r = measure(|| {
            subset
                .iter()
                .filter_map(|s| s.next_slot_after(NOW_MS))
                .min()
                .unwrap_or(0)
        });
        row(&format!("  cold, {kind} ({} jobs)", subset.len()), r);
    }
    // The cron schedules parsed afresh before each round: their first search also fills
    // the per-month day masks of `L`/`W`/`#` patterns, which later searches reuse.
    let cron_specs: Vec<(ScheduleSpec, chrono_tz::Tz)> = schedules
        .iter()
        .zip(&labels)
        .filter(|(_, l)| **l == "cron")
        .map(|(s, _)| (s.spec().clone(), s.tz()))
        .collect();
    let mut first_times = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let fresh: Vec<Schedule> = cron_specs
            .iter()
            .map(|(spec, tz)| Schedule::parse(spec, *tz).unwrap())
            .collect();
        let t0 = Instant::now();
        black_box(fresh.iter().filter_map(|s| s.next_slot_after(NOW_MS)).min());
        first_times.push(t0.elapsed());
    }
    let (min, med, max) = median(first_times);
    row(
        &format!("  cold, cron, first search ({})", cron_specs.len()),
        (min, med, max, 0),
    );
    row("restore planners (incl. cold)", restore);
    println!("earliest wake-up: {} ms after now", wake.3 - NOW_MS);
    let target = Duration::from_millis(50);
    println!(
        "target: next wake-up over {JOBS} jobs < 50 ms -> {} (median {:.2} ms)",
        if wake.1 < target { "met" } else { "MISSED" },
        ms(wake.1)
    );
}
