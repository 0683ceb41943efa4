//! Tests for the scheduling core: table tests per field, DST days, the planner's misfire and
//! overlap rules, simulation properties over random clock histories (through [`crate::sim`]),
//! and a cross-check of croner against the independent `cron` crate.
//!
//! Invariant: reads no clock — every instant is a literal or comes from the fake clock.

use std::collections::HashSet;

use chrono::{Datelike as _, TimeZone as _, Timelike as _, Weekday};
use chrono_tz::Tz;
use proptest::prelude::*;

use crate::schedule::calendar::{Kind, format_local, local_ms};
use crate::schedule::plan::RECORD_LIMIT;
use crate::schedule::{
    Decision, FieldError, JobHistory, JobPlanner, MisfirePolicy, OverlapPolicy, PlanPolicy,
    Schedule, ScheduleSpec, SkipReason,
};
use crate::sim::{ClockProfile, FakeWorkers, Sim, SimRng};

const MIN: i64 = 60_000;
const HOUR: i64 = 60 * MIN;
const DAY: i64 = 24 * HOUR;

fn ny() -> Tz {
    "America/New_York".parse().unwrap()
}
fn utc() -> Tz {
    chrono_tz::UTC
}
fn at(tz: Tz, s: &str) -> i64 {
    local_ms(tz, s).unwrap_or_else(|| panic!("bad or ambiguous local time {s}"))
}
fn utc_at(s: &str) -> i64 {
    at(utc(), s)
}
fn sched(spec: ScheduleSpec, tz: Tz) -> Schedule {
    Schedule::parse(&spec, tz).unwrap_or_else(|e| panic!("{spec:?} should parse: {e:?}"))
}
fn spec_on_the(m: i64) -> ScheduleSpec {
    ScheduleSpec {
        run_on_the: Some(m),
        ..Default::default()
    }
}
fn spec_at(t: &str, date: Option<&str>) -> ScheduleSpec {
    ScheduleSpec {
        run_at: Some(t.into()),
        run_date: date.map(Into::into),
        ..Default::default()
    }
}
fn spec_every(n: i64) -> ScheduleSpec {
    ScheduleSpec {
        run_every: Some(n),
        ..Default::default()
    }
}
fn spec_cron(c: &str) -> ScheduleSpec {
    ScheduleSpec {
        cron: Some(c.into()),
        ..Default::default()
    }
}
fn fires(s: &Schedule, from: i64, count: usize) -> Vec<String> {
    s.next_slots_after(from, count)
        .into_iter()
        .map(|t| format_local(s.tz(), t))
        .collect()
}

// ---------------------------------------------------------------- validation

#[test]
fn run_on_the_60_is_rejected_with_the_exact_field_and_reason() {
    assert_eq!(
        spec_on_the(60).validate(),
        vec![FieldError {
            field: "run_on_the",
            reason: "must be a minute 0–59, got 60".into()
        }]
    );
}

#[test]
fn each_invalid_field_is_named() {
    let s = |f: fn(&mut ScheduleSpec)| {
        let mut spec = ScheduleSpec::default();
        f(&mut spec);
        spec
    };
    let cases: Vec<(ScheduleSpec, &str, &str)> = vec![
        (s(|x| x.run_on_the = Some(-1)), "run_on_the", "got -1"),
        (
            s(|x| x.run_at = Some("25:00".into())),
            "run_at",
            "\"25:00\"",
        ),
        (
            s(|x| x.run_at = Some("12:60".into())),
            "run_at",
            "\"12:60\"",
        ),
        (
            s(|x| x.run_at = Some("12:00:60".into())),
            "run_at",
            "\"12:00:60\"",
        ),
        (s(|x| x.run_at = Some("7".into())), "run_at", "\"7\""),
        (s(|x| x.run_at = Some("3:5".into())), "run_at", "\"3:5\""),
        (s(|x| x.run_every = Some(0)), "run_every", "got 0"),
        (s(|x| x.run_every = Some(-7)), "run_every", "got -7"),
        (
            s(|x| {
                x.run_always = true;
                x.run_delay = -1
            }),
            "run_delay",
            "got -1",
        ),
        (s(|x| x.run_delay = 500), "run_delay", "run_always"),
        (s(|x| x.run_date = Some("32".into())), "run_date", "\"32\""),
        (s(|x| x.run_date = Some("0".into())), "run_date", "\"0\""),
        (
            s(|x| x.run_date = Some("#funday#".into())),
            "run_date",
            "\"#funday#\"",
        ),
        (
            s(|x| x.cron = Some("61 * * * *".into())),
            "cron",
            "61 * * * *",
        ),
        (s(|x| x.cron = Some("* * * *".into())), "cron", "got 4"),
        (
            s(|x| x.cron = Some("0 0 0 1 1 * 2030".into())),
            "cron",
            "got 7",
        ),
        (
            s(|x| x.cron = Some("0 0 30 2 *".into())),
            "cron",
            "never fires within 5 years",
        ),
        (
            s(|x| {
                x.timezone = Some("Mars/Olympus".into());
                x.run_every = Some(5)
            }),
            "timezone",
            "\"Mars/Olympus\"",
        ),
        (
            s(|x| {
                x.run_always = true;
                x.run_every = Some(5)
            }),
            "run_always",
            "run_every",
        ),
        (
            s(|x| {
                x.run_every = Some(5);
                x.run_at = Some("10:00".into())
            }),
            "run_at",
            "conflicts with run_every",
        ),
        (
            s(|x| {
                x.cron = Some("* * * * *".into());
                x.run_date = Some("1".into())
            }),
            "cron",
            "run_date",
        ),
    ];
    for (spec, field, needle) in cases {
        let errors = spec.validate();
        assert!(
            errors
                .iter()
                .any(|e| e.field == field && e.reason.contains(needle)),
            "{spec:?}: expected an error on {field} containing {needle:?}, got {errors:?}"
        );
        assert!(Schedule::parse(&spec, utc()).is_err(), "{spec:?} parsed");
    }
}

#[test]
fn every_error_is_reported_at_once() {
    let spec = ScheduleSpec {
        run_on_the: Some(75),
        run_date: Some("#someday#".into()),
        timezone: Some("Nowhere/Land".into()),
        ..Default::default()
    };
    let fields: Vec<&str> = spec.validate().iter().map(|e| e.field).collect();
    assert_eq!(fields, vec!["timezone", "run_on_the", "run_date"]);
}

#[test]
fn valid_specs_parse_and_blank_strings_count_as_unset() {
    let ok = [
        spec_on_the(0),
        spec_on_the(59),
        spec_at("00:00", None),
        spec_at("23:59:59", Some("31")),
        spec_at("7:05", Some("#Sunday#")),
        spec_every(1),
        spec_cron("*/5 * * * *"),
        spec_cron("0 30 2 * * *"),
        spec_cron("0 0 29 2 *"),
        spec_cron("@daily"),
        spec_cron("0 0 L * *"),
        ScheduleSpec {
            run_date: Some("#last_day_of_year#".into()),
            ..Default::default()
        },
        ScheduleSpec {
            run_always: true,
            run_delay: 10_000,
            ..Default::default()
        },
        ScheduleSpec {
            run_at: Some("  ".into()),
            cron: Some(String::new()),
            timezone: Some(String::new()),
            ..Default::default()
        },
    ];
    for spec in ok {
        assert_eq!(spec.validate(), vec![], "{spec:?}");
        Schedule::parse(&spec, utc()).unwrap();
    }
    let blank = ScheduleSpec {
        run_at: Some("".into()),
        ..Default::default()
    };
    assert!(blank.is_on_demand());
    assert!(sched(blank, utc()).is_on_demand());
}

#[test]
fn policy_enums_round_trip_their_catalog_spelling() {
    for p in MisfirePolicy::ALL {
        assert_eq!(MisfirePolicy::parse(p.as_str()), Some(p));
    }
    for p in OverlapPolicy::ALL {
        assert_eq!(OverlapPolicy::parse(p.as_str()), Some(p));
    }
    let names: Vec<&str> = MisfirePolicy::ALL.iter().map(|p| p.as_str()).collect();
    assert_eq!(names, ["once", "skip", "all"]);
    let names: Vec<&str> = OverlapPolicy::ALL.iter().map(|p| p.as_str()).collect();
    assert_eq!(names, ["forbid", "queue", "allow"]);
    assert_eq!(MisfirePolicy::default(), MisfirePolicy::Once);
    assert_eq!(OverlapPolicy::default(), OverlapPolicy::Forbid);
    assert_eq!(MisfirePolicy::parse("Once"), None);
    assert_eq!(OverlapPolicy::parse(""), None);
    let reasons: HashSet<&str> = SkipReason::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(reasons.len(), SkipReason::ALL.len());
}

// ---------------------------------------------------------------- fields

#[test]
fn run_at_with_last_day_of_month_fires_on_2028_02_29_not_02_28() {
    let s = sched(spec_at("03:30", Some("#last_day_of_month#")), utc());
    assert_eq!(
        s.next_slot_after(utc_at("2028-02-01 00:00")),
        Some(utc_at("2028-02-29 03:30"))
    );
    let next = fires(&s, utc_at("2028-01-15 00:00"), 4);
    assert_eq!(
        next,
        [
            "2028-01-31 03:30:00+00:00",
            "2028-02-29 03:30:00+00:00",
            "2028-03-31 03:30:00+00:00",
            "2028-04-30 03:30:00+00:00"
        ]
    );
    assert!(!next.iter().any(|f| f.starts_with("2028-02-28")));
    // Non-leap year: February ends on the 28th.
    assert_eq!(
        s.next_slot_after(utc_at("2027-02-01 00:00")),
        Some(utc_at("2027-02-28 03:30"))
    );
}

#[test]
fn monday_token_fires_only_on_mondays() {
    for spec in [
        ScheduleSpec {
            run_date: Some("#monday#".into()),
            ..Default::default()
        },
        ScheduleSpec {
            run_date: Some("#monday#".into()),
            run_on_the: Some(5),
            ..Default::default()
        },
        ScheduleSpec {
            run_date: Some("#monday#".into()),
            run_every: Some(45),
            ..Default::default()
        },
    ] {
        let s = sched(spec.clone(), ny());
        let slots = s.next_slots_after(utc_at("2026-01-01 00:00"), 200);
        assert_eq!(slots.len(), 200);
        for t in &slots {
            let local = ny().timestamp_millis_opt(*t).unwrap();
            assert_eq!(local.weekday(), Weekday::Mon, "{spec:?} fired {local}");
        }
        // The slots reach at least a second Monday, so the gate lets later weeks through.
        let days: HashSet<_> = slots
            .iter()
            .map(|t| ny().timestamp_millis_opt(*t).unwrap().date_naive())
            .collect();
        assert!(
            days.len() >= 2
                || spec.run_date.is_some() && spec.run_every.is_none() && spec.run_on_the.is_none()
        );
    }
    // run_date alone: once that day at 00:00 local.
    let s = sched(
        ScheduleSpec {
            run_date: Some("#monday#".into()),
            ..Default::default()
        },
        ny(),
    );
    assert_eq!(
        fires(&s, at(ny(), "2026-01-01 00:00"), 2),
        ["2026-01-05 00:00:00-05:00", "2026-01-12 00:00:00-05:00"]
    );
}

#[test]
fn run_date_day_31_and_year_tokens() {
    let s = sched(spec_at("12:00", Some("31")), utc());
    assert_eq!(
        fires(&s, utc_at("2026-04-01 00:00"), 3),
        [
            "2026-05-31 12:00:00+00:00",
            "2026-07-31 12:00:00+00:00",
            "2026-08-31 12:00:00+00:00"
        ]
    );
    let first = sched(
        ScheduleSpec {
            run_date: Some("#first_day_of_year#".into()),
            ..Default::default()
        },
        utc(),
    );
    assert_eq!(
        fires(&first, utc_at("2026-03-01 00:00"), 1),
        ["2027-01-01 00:00:00+00:00"]
    );
    let last = sched(spec_on_the(45), utc());
    assert_eq!(
        fires(&last, utc_at("2026-03-01 10:45"), 1),
        ["2026-03-01 11:45:00+00:00"]
    );
    let last = sched(
        ScheduleSpec {
            run_date: Some("#last_day_of_year#".into()),
            run_on_the: Some(0),
            ..Default::default()
        },
        utc(),
    );
    let v = fires(&last, utc_at("2026-03-01 00:00"), 25);
    assert_eq!(v[0], "2026-12-31 00:00:00+00:00");
    assert_eq!(v[23], "2026-12-31 23:00:00+00:00");
    assert_eq!(v[24], "2027-12-31 00:00:00+00:00");
}

#[test]
fn run_at_with_seconds_and_slots_are_strictly_after() {
    let s = sched(spec_at("03:30:15", None), utc());
    let t = utc_at("2026-06-01 03:30:15");
    assert_eq!(s.next_slot_after(t - 1), Some(t));
    assert_eq!(s.next_slot_after(t), Some(t + DAY));
    assert_eq!(s.prev_slot_at_or_before(t), Some(t));
    assert_eq!(s.prev_slot_at_or_before(t - 1), Some(t - DAY));
}

#[test]
fn run_every_7_fires_every_7_minutes() {
    let s = sched(spec_every(7), utc());
    let slots = s.next_slots_after(utc_at("2026-05-01 00:00"), 500);
    assert!(slots.windows(2).all(|w| w[1] - w[0] == 7 * MIN));
    // Fixed rate in absolute time: aligned to the epoch (in UTC).
    assert!(slots.iter().all(|t| t % (7 * MIN) == 0));
    // Through the planner, over a simulated day with a poll at every wake-up.
    let mut p = JobPlanner::restore(
        s,
        PlanPolicy::default(),
        JobHistory {
            since: Some(utc_at("2026-05-01 00:00")),
            ..Default::default()
        },
    );
    let end = utc_at("2026-05-02 00:00");
    let mut now = utc_at("2026-05-01 00:00");
    let mut fired = Vec::new();
    while let Some(w) = p.next_wake(now).filter(|w| *w <= end) {
        now = w.max(now);
        for d in p.poll_due(now) {
            if let Decision::Fire { slot, .. } = d {
                fired.push(slot);
                p.handle_run_started(now);
                p.handle_run_finished(now + 1000);
            }
        }
    }
    // Every multiple of 7 minutes in (start, end]: 206 of them that day.
    let start = utc_at("2026-05-01 00:00");
    assert_eq!(fired.len() as i64, end / (7 * MIN) - start / (7 * MIN));
    assert_eq!(fired.len(), 206);
    assert!(fired.windows(2).all(|w| w[1] - w[0] == 7 * MIN));
}

#[test]
fn run_every_aligns_to_the_zone_and_keeps_its_rate_across_dst() {
    let kolkata: Tz = "Asia/Kolkata".parse().unwrap();
    let s = sched(spec_every(60), kolkata);
    assert_eq!(
        fires(&s, at(kolkata, "2026-05-01 10:10"), 1),
        ["2026-05-01 11:00:00+05:30"]
    );
    let s = sched(spec_every(30), ny());
    let slots = s.next_slots_after(at(ny(), "2026-03-07 23:00"), 12);
    assert!(
        slots.windows(2).all(|w| w[1] - w[0] == 30 * MIN),
        "DST must not change the rate"
    );
    let s = sched(
        ScheduleSpec {
            run_every: Some(90),
            run_date: Some("15".into()),
            ..Default::default()
        },
        ny(),
    );
    // The 90-minute grid is anchored at the zone's January offset (EST), so in summer it
    // runs 01:00, 02:30, … 23:30 EDT: the same instants, one wall-clock hour later.
    let v = fires(&s, at(ny(), "2026-05-01 00:00"), 17);
    assert_eq!(v[0], "2026-05-15 01:00:00-04:00");
    assert_eq!(v[15], "2026-05-15 23:30:00-04:00");
    assert_eq!(v[16], "2026-06-15 01:00:00-04:00");
}

#[test]
fn run_on_the_15_fires_24_times_in_a_day_of_polls() {
    let start = utc_at("2026-04-10 00:00");
    let mut sim = Sim::new(15, start);
    let mut p = JobPlanner::restore(
        sched(spec_on_the(15), utc()),
        PlanPolicy::default(),
        JobHistory {
            since: Some(start),
            ..Default::default()
        },
    );
    let mut fired = Vec::new();
    let mut polls = 0;
    // A poll every 10–30 s of fake time, 24×60×… polls in all, far more than slots.
    while sim.now() < start + DAY {
        sim.clock.advance(sim.rng.range_i64(10_000, 30_000));
        polls += 1;
        for d in p.poll_due(sim.now()) {
            match d {
                Decision::Fire { slot, catch_up } => {
                    assert!(!catch_up);
                    fired.push(slot);
                    p.handle_run_started(sim.now());
                    p.handle_run_finished(sim.now() + 2000);
                }
                other => panic!("unexpected {other:?}"),
            }
        }
    }
    assert!(polls > 2000);
    assert_eq!(fired.len(), 24);
    for (h, slot) in fired.iter().enumerate() {
        assert_eq!(*slot, start + h as i64 * HOUR + 15 * MIN);
    }
}

#[test]
fn run_always_with_delay_10s_and_3s_runs_starts_every_13s() {
    let start = utc_at("2026-04-10 12:00");
    let spec = ScheduleSpec {
        run_always: true,
        run_delay: 10_000,
        ..Default::default()
    };
    let mut sim = Sim::new(3, start);
    let mut p = JobPlanner::new(sched(spec, utc()), PlanPolicy::default());
    let mut workers = FakeWorkers::new();
    let mut starts = Vec::new();
    while sim.now() < start + 10 * MIN {
        for (end, ()) in workers.finished_by(sim.now()) {
            p.handle_run_finished(end);
        }
        for d in p.poll_due(sim.now()) {
            let Decision::Fire { .. } = d else {
                panic!("{d:?}")
            };
            starts.push(sim.now());
            p.handle_run_started(sim.now());
            workers.start(sim.now() + 3000, ());
        }
        // Never fires while a run is in flight (overlap forbid).
        assert_eq!(p.history().running as usize, workers.len());
        // The runtime sleeps until the next wake-up or the next run end, whichever first.
        let wake = [p.next_wake(sim.now()), workers.next_end()]
            .into_iter()
            .flatten()
            .min()
            .unwrap();
        sim.clock.set(wake.max(sim.now() + 1));
    }
    assert_eq!(starts[0], start, "the first run starts at once");
    let gaps: Vec<i64> = starts.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps.len() >= 40, "{gaps:?}");
    assert!(
        gaps.iter().all(|g| (13_000..=13_001).contains(g)),
        "{gaps:?}"
    );
}

#[test]
fn cron_takes_5_or_6_fields_in_the_jobs_zone() {
    let s = sched(spec_cron("*/20 * * * *"), utc());
    assert_eq!(
        fires(&s, utc_at("2026-01-01 00:00"), 3),
        [
            "2026-01-01 00:20:00+00:00",
            "2026-01-01 00:40:00+00:00",
            "2026-01-01 01:00:00+00:00"
        ]
    );
    let s = sched(spec_cron("30 0 9 * * MON"), utc());
    assert_eq!(
        fires(&s, utc_at("2026-01-01 00:00"), 1),
        ["2026-01-05 09:00:30+00:00"]
    );
    let paris = ScheduleSpec {
        timezone: Some("Europe/Paris".into()),
        ..spec_cron("0 9 * * *")
    };
    // The spec's zone wins over the caller's default.
    let s = sched(paris, ny());
    assert_eq!(
        s.next_slot_after(utc_at("2026-01-01 00:00")),
        Some(utc_at("2026-01-01 08:00"))
    );
    // Without one, the default applies.
    let s = sched(spec_cron("0 9 * * *"), ny());
    assert_eq!(
        s.next_slot_after(utc_at("2026-01-01 00:00")),
        Some(utc_at("2026-01-01 14:00"))
    );
}

// ---------------------------------------------------------------- DST

#[test]
fn dst_spring_forward_in_new_york_2026_03_08() {
    let from = at(ny(), "2026-03-07 12:00");
    // run_at in the gap: the first instant after it, 03:00 EDT; then 02:30 again.
    let s = sched(spec_at("02:30", None), ny());
    assert_eq!(
        fires(&s, from, 3),
        [
            "2026-03-08 03:00:00-04:00",
            "2026-03-09 02:30:00-04:00",
            "2026-03-10 02:30:00-04:00"
        ]
    );
    // Same rule for cron fixed-time patterns (croner).
    let c = sched(spec_cron("0 30 2 * * *"), ny());
    assert_eq!(fires(&c, from, 3), fires(&s, from, 3));
    // run_on_the: the 02:30 that does not exist fires at 03:00, and 03:30 still fires.
    let h = sched(spec_on_the(30), ny());
    assert_eq!(
        fires(&h, at(ny(), "2026-03-08 00:00"), 4),
        [
            "2026-03-08 00:30:00-05:00",
            "2026-03-08 01:30:00-05:00",
            "2026-03-08 03:00:00-04:00",
            "2026-03-08 03:30:00-04:00"
        ]
    );
    // run_on_the = 0: the missing 02:00 and the real 03:00 are one instant, one slot.
    let h0 = sched(spec_on_the(0), ny());
    assert_eq!(
        fires(&h0, at(ny(), "2026-03-08 00:30"), 3),
        [
            "2026-03-08 01:00:00-05:00",
            "2026-03-08 03:00:00-04:00",
            "2026-03-08 04:00:00-04:00"
        ]
    );
    // Backwards gives the same slots.
    let t = at(ny(), "2026-03-08 03:10");
    assert_eq!(
        h.prev_slot_at_or_before(t),
        Some(at(ny(), "2026-03-08 03:00"))
    );
    assert_eq!(
        s.prev_slot_at_or_before(t),
        Some(at(ny(), "2026-03-08 03:00"))
    );
}

#[test]
fn dst_fall_back_in_new_york_2026_11_01_fires_the_repeated_hour_once() {
    let from = at(ny(), "2026-10-31 12:00");
    let s = sched(spec_at("01:30", None), ny());
    assert_eq!(
        fires(&s, from, 2),
        ["2026-11-01 01:30:00-04:00", "2026-11-02 01:30:00-05:00"]
    );
    let c = sched(spec_cron("0 30 1 * * *"), ny());
    assert_eq!(fires(&c, from, 2), fires(&s, from, 2));
    let h = sched(spec_on_the(30), ny());
    assert_eq!(
        fires(&h, at(ny(), "2026-11-01 00:00"), 3),
        [
            "2026-11-01 00:30:00-04:00",
            "2026-11-01 01:30:00-04:00",
            "2026-11-01 02:30:00-05:00"
        ]
    );
    // From inside the second pass of 01:xx, the next slot is 02:30 EST and the previous one
    // is the first pass's 01:30 EDT.
    let second_pass = at(ny(), "2026-11-01 02:00") - 20 * MIN; // 01:40 EST
    assert_eq!(
        h.next_slot_after(second_pass),
        Some(at(ny(), "2026-11-01 02:30"))
    );
    assert_eq!(
        h.prev_slot_at_or_before(second_pass),
        Some(at(ny(), "2026-11-01 02:00") - 90 * MIN)
    );
    // Interval cron patterns follow croner: elapsed time, both passes of the repeated hour.
    let i = sched(spec_cron("30 * * * *"), ny());
    assert_eq!(
        fires(&i, at(ny(), "2026-11-01 00:45"), 3),
        [
            "2026-11-01 01:30:00-04:00",
            "2026-11-01 01:30:00-05:00",
            "2026-11-01 02:30:00-05:00"
        ]
    );
}

// ---------------------------------------------------------------- describe

#[test]
fn describe_in_words() {
    let cases: Vec<(ScheduleSpec, &str)> = vec![
        (
            ScheduleSpec {
                run_on_the: Some(15),
                run_date: Some("#last_day_of_month#".into()),
                ..Default::default()
            },
            "at minute 15 of every hour, on the last day of the month",
        ),
        (spec_every(7), "every 7 minutes"),
        (spec_every(1), "every minute"),
        (spec_every(120), "every 2 hours"),
        (spec_at("03:30", None), "at 03:30 every day"),
        (
            spec_at("03:30:05", Some("#monday#")),
            "at 03:30:05, on Mondays",
        ),
        (
            spec_at("23:00", Some("12")),
            "at 23:00, on day 12 of the month",
        ),
        (
            ScheduleSpec {
                run_date: Some("#first_day_of_year#".into()),
                ..Default::default()
            },
            "at 00:00, on the first day of the year",
        ),
        (
            ScheduleSpec {
                run_always: true,
                run_delay: 10_000,
                ..Default::default()
            },
            "continuously: again 10 seconds after the previous run ends",
        ),
        (
            ScheduleSpec::default(),
            "on demand only (no schedule field is set)",
        ),
        (
            spec_cron("0 30 2 * * *"),
            "at 02:30 (cron \"0 30 2 * * *\")",
        ),
    ];
    for (spec, want) in cases {
        assert_eq!(sched(spec, utc()).describe(), want);
    }
}

// ---------------------------------------------------------------- planner

fn hourly_planner(policy: PlanPolicy, last_slot: i64) -> JobPlanner {
    JobPlanner::restore(
        sched(spec_on_the(0), utc()),
        policy,
        JobHistory {
            last_slot: Some(last_slot),
            ..Default::default()
        },
    )
}

#[test]
fn a_new_job_starts_with_the_next_slot_not_the_past() {
    let mut p = JobPlanner::new(sched(spec_on_the(0), utc()), PlanPolicy::default());
    let now = utc_at("2026-02-01 10:30");
    assert_eq!(p.next_wake(now), Some(utc_at("2026-02-01 11:00")));
    assert_eq!(p.poll_due(now), vec![]);
    assert_eq!(p.history().since, Some(now));
    assert_eq!(p.next_wake(now), Some(utc_at("2026-02-01 11:00")));
    assert_eq!(
        p.poll_due(utc_at("2026-02-01 11:00")),
        vec![Decision::Fire {
            slot: utc_at("2026-02-01 11:00"),
            catch_up: false
        }]
    );
}

#[test]
fn misfire_policies_after_five_hours_down() {
    let last = utc_at("2026-02-01 10:00");
    let now = utc_at("2026-02-01 15:00") + 20_000; // 15:00 is 20 s late: on time
    let late_now = utc_at("2026-02-01 15:05"); // 15:00 is 5 min late: missed
    let slot = |h: u32| utc_at(&format!("2026-02-01 {h}:00"));
    let fire = |h, c| Decision::Fire {
        slot: slot(h),
        catch_up: c,
    };
    let pol = |m, c| PlanPolicy {
        misfire: m,
        max_catchup: c,
        ..PlanPolicy::default()
    };
    use SkipReason::*;

    let drop = |from: u32, to: u32, r| Decision::Drop {
        first: slot(from),
        last: slot(to),
        count: Some(u64::from(to - from + 1)),
        reason: r,
    };
    // Missed slots that do not fire are one summary, not a row each.
    let want = vec![drop(11, 14, Coalesced), fire(15, true)];
    assert_eq!(
        hourly_planner(pol(MisfirePolicy::Once, 10), last).poll_due(now),
        want
    );
    assert_eq!(
        hourly_planner(pol(MisfirePolicy::Once, 10), last).poll_due(late_now),
        want
    );

    let want = vec![drop(11, 14, Misfire), fire(15, false)];
    assert_eq!(
        hourly_planner(pol(MisfirePolicy::Skip, 10), last).poll_due(now),
        want
    );
    let want = vec![drop(11, 15, Misfire)];
    assert_eq!(
        hourly_planner(pol(MisfirePolicy::Skip, 10), last).poll_due(late_now),
        want
    );

    let want = vec![
        drop(11, 11, CatchupLimit),
        fire(12, true),
        fire(13, true),
        fire(14, true),
        fire(15, false),
    ];
    assert_eq!(
        hourly_planner(pol(MisfirePolicy::All, 3), last).poll_due(now),
        want
    );
    let want = vec![
        drop(11, 12, CatchupLimit),
        fire(13, true),
        fire(14, true),
        fire(15, true),
    ];
    assert_eq!(
        hourly_planner(pol(MisfirePolicy::All, 3), last).poll_due(late_now),
        want
    );
}

#[test]
fn a_long_outage_is_summarised_not_recorded_slot_by_slot() {
    let last = utc_at("2025-02-01 00:00");
    let now = utc_at("2026-02-01 00:00");
    let mut p = JobPlanner::restore(
        sched(spec_every(1), utc()),
        PlanPolicy {
            misfire: MisfirePolicy::Skip,
            ..PlanPolicy::default()
        },
        JobHistory {
            last_slot: Some(last),
            ..Default::default()
        },
    );
    let out = p.poll_due(now);
    let total = 365 * 24 * 60;
    assert_eq!(
        out,
        vec![
            Decision::Drop {
                first: last + MIN,
                last: now - MIN,
                count: Some(total - 1),
                reason: SkipReason::Misfire
            },
            Decision::Fire {
                slot: now,
                catch_up: false
            }
        ]
    );
    assert_eq!(p.history().last_slot, Some(now));
    assert_eq!(p.next_wake(now), Some(now + MIN));
}

#[test]
fn overlap_forbid_records_the_slot_as_skipped() {
    let mut p = hourly_planner(PlanPolicy::default(), utc_at("2026-02-01 10:00"));
    let t11 = utc_at("2026-02-01 11:00");
    assert_eq!(
        p.poll_due(t11),
        vec![Decision::Fire {
            slot: t11,
            catch_up: false
        }]
    );
    p.handle_run_started(t11);
    let t12 = t11 + HOUR;
    assert_eq!(
        p.poll_due(t12),
        vec![Decision::Skip {
            slot: t12,
            reason: SkipReason::Overlap
        }]
    );
    p.handle_run_finished(t12 + 5);
    assert_eq!(
        p.poll_due(t12 + HOUR),
        vec![Decision::Fire {
            slot: t12 + HOUR,
            catch_up: false
        }]
    );
}

#[test]
fn overlap_queue_and_allow_are_capped() {
    for (overlap, cap) in [(OverlapPolicy::Queue, 2u32), (OverlapPolicy::Allow, 3)] {
        let policy = PlanPolicy {
            overlap,
            max_queued: 2,
            max_concurrent: 3,
            ..PlanPolicy::default()
        };
        let mut p = hourly_planner(policy, utc_at("2026-02-01 10:00"));
        let mut fired = 0;
        let mut skipped = 0;
        for h in 1..=5 {
            let now = utc_at("2026-02-01 10:00") + h * HOUR;
            for d in p.poll_due(now) {
                match d {
                    Decision::Fire { .. } => fired += 1,
                    Decision::Skip { reason, .. } => {
                        assert_eq!(reason, SkipReason::Overlap);
                        skipped += 1
                    }
                    Decision::Drop { .. } => panic!(),
                }
            }
            // Nothing ever finishes.
            assert!(p.history().in_flight() <= cap);
        }
        assert_eq!((fired, skipped), (cap, 5 - cap), "{overlap}");
    }
}

/// An hourly job whose clock steps back two hours re-lives the repeated span: it fires at
/// 10:00 and 11:00 again by the clock, under keys of their own (slot + 1 ms), then 12:00 as
/// usual — no key twice, and no silence for the size of the step.
#[test]
fn a_clock_stepping_back_re_lives_the_span_under_keys_of_its_own() {
    let mut p = hourly_planner(PlanPolicy::default(), utc_at("2026-02-01 10:00"));
    let t11 = utc_at("2026-02-01 11:00");
    assert_eq!(p.poll_due(t11 + 10).len(), 1);
    p.handle_run_started(t11 + 10);
    p.handle_run_finished(t11 + 20);
    // Back two hours (the step is twice the period): the span 09:00..11:00 is lived again.
    let mut fired = Vec::new();
    let mut now = t11 - 2 * HOUR;
    while now <= t11 + 90 * MIN {
        for d in p.poll_due(now) {
            match d {
                Decision::Fire { slot, .. } => fired.push((now, slot)),
                other => panic!("{other:?} at {}", format_local(utc(), now)),
            }
            p.handle_run_started(now);
            p.handle_run_finished(now + 5);
        }
        let wake = p.next_wake(now).unwrap();
        assert!(wake > now, "next wake {wake} <= {now}");
        now += MIN;
    }
    let t10 = t11 - HOUR;
    assert_eq!(
        fired,
        [(t10, t10 + 1), (t11, t11 + 1), (t11 + HOUR, t11 + HOUR)],
        "re-lived under slot + 1 ms, then the natural slot"
    );
    assert!(!p.is_reliving());
    assert_eq!(p.history().last_slot, Some(t11 + HOUR));
}

/// The case: a per-minute job whose clock steps back an hour goes on firing every
/// minute (it was silent for the whole hour).
#[test]
fn a_per_minute_job_keeps_firing_every_minute_after_the_clock_steps_back_an_hour() {
    let t0 = utc_at("2026-02-01 11:00");
    let mut p = JobPlanner::restore(
        sched(spec_cron("* * * * *"), utc()),
        PlanPolicy::default(),
        JobHistory {
            last_slot: Some(t0),
            ..Default::default()
        },
    );
    let mut keys = HashSet::new();
    keys.insert(t0);
    let mut fires = 0;
    // The clock reads 10:00:30 after the step; poll every 10 s for two hours.
    let mut now = t0 - HOUR + 30_000;
    let end = now + 2 * HOUR;
    while now < end {
        for d in p.poll_due(now) {
            let Decision::Fire { slot, .. } = d else {
                panic!("{d:?}")
            };
            assert!(keys.insert(slot), "key {slot} twice");
            assert!(slot - slot % 1000 <= now && now - (slot - slot % 1000) < 10_000);
            fires += 1;
            p.handle_run_started(now);
            p.handle_run_finished(now + 1);
        }
        now += 10_000;
    }
    assert_eq!(fires, 120, "one run a minute for two hours");
}

/// A daily job whose clock steps back half an hour across its slot does not run twice that
/// day (cron's rule for fixed-time jobs): it waits for its next slot.
#[test]
fn a_daily_job_stepped_back_across_its_slot_does_not_run_twice() {
    let slot = utc_at("2026-02-01 10:30");
    let mut p = JobPlanner::restore(
        sched(spec_at("10:30", None), utc()),
        PlanPolicy::default(),
        JobHistory {
            last_slot: Some(slot),
            ..Default::default()
        },
    );
    let mut now = utc_at("2026-02-01 10:00");
    while now < slot + DAY - MIN {
        assert_eq!(p.poll_due(now), vec![], "at {}", format_local(utc(), now));
        now += 5 * MIN;
    }
    assert!(!p.is_reliving());
    assert_eq!(
        p.poll_due(slot + DAY),
        vec![Decision::Fire {
            slot: slot + DAY,
            catch_up: false
        }]
    );
}

/// A new job (nothing decided yet) whose start lies ahead of a clock that stepped back starts
/// from the clock's reading instead of waiting for the old start.
#[test]
fn a_new_job_behind_a_clock_step_starts_from_now() {
    let created = utc_at("2026-02-01 11:00");
    let mut p = JobPlanner::restore(
        sched(spec_cron("* * * * *"), utc()),
        PlanPolicy::default(),
        JobHistory {
            since: Some(created),
            ..Default::default()
        },
    );
    let now = created - HOUR + 30_000;
    assert_eq!(p.poll_due(now), vec![]);
    assert_eq!(p.next_wake(now), Some(created - HOUR + MIN));
    assert_eq!(
        p.poll_due(created - HOUR + MIN),
        vec![Decision::Fire {
            slot: created - HOUR + MIN,
            catch_up: false
        }]
    );
}

/// The in-flight counts the runtime reads from the catalog replace the ones kept from run
/// events: a count that drifted (an event lost to a reload, a run another node fired and
/// finished) no longer refuses every later slot.
#[test]
fn in_flight_counts_from_the_catalog_override_a_drifted_event_count() {
    let mut p = hourly_planner(PlanPolicy::default(), utc_at("2026-02-01 10:00"));
    let t11 = utc_at("2026-02-01 11:00");
    assert_eq!(p.poll_due(t11).len(), 1);
    // The run started and finished, but the finish was never seen here.
    p.handle_run_started(t11 + 1);
    p.handle_in_flight(0, 0);
    assert_eq!(
        p.poll_due(t11 + HOUR),
        vec![Decision::Fire {
            slot: t11 + HOUR,
            catch_up: false
        }]
    );
    // Another node decided the slot first: nothing was queued here.
    p.handle_slot_taken(t11 + HOUR);
    assert_eq!(p.history().in_flight(), 0);
    // And a run executing elsewhere holds the next slot back (overlap forbid).
    p.handle_in_flight(1, 0);
    assert_eq!(
        p.poll_due(t11 + 2 * HOUR),
        vec![Decision::Skip {
            slot: t11 + 2 * HOUR,
            reason: SkipReason::Overlap
        }]
    );
}

#[test]
fn run_always_after_a_clock_jump_back_neither_stalls_nor_reuses_a_slot() {
    let spec = ScheduleSpec {
        run_always: true,
        run_delay: 5_000,
        ..Default::default()
    };
    let t0 = utc_at("2026-02-01 10:00");
    let mut p = JobPlanner::new(sched(spec, utc()), PlanPolicy::default());
    assert_eq!(
        p.poll_due(t0),
        vec![Decision::Fire {
            slot: t0,
            catch_up: false
        }]
    );
    p.handle_run_started(t0);
    p.handle_run_finished(t0 + 1000);
    // An hour back: the end lies in the future, so poll now to re-base on the new clock,
    // then the delay counts from there.
    let back = t0 - HOUR;
    assert_eq!(p.next_wake(back), Some(back));
    assert_eq!(p.poll_due(back), vec![]);
    assert_eq!(p.next_wake(back), Some(back + 5000));
    assert_eq!(p.poll_due(back + 4999), vec![]);
    assert_eq!(
        p.poll_due(back + 5000),
        vec![Decision::Fire {
            slot: t0 + 1,
            catch_up: false
        }]
    );
}

#[test]
fn restored_planner_continues_from_the_catalogs_history() {
    let h = JobHistory {
        last_slot: Some(utc_at("2026-02-01 10:00")),
        since: Some(utc_at("2026-01-01 00:00")),
        last_begin: Some(utc_at("2026-02-01 10:00")),
        last_end: Some(utc_at("2026-02-01 10:00") + 3000),
        running: 0,
        queued: 0,
    };
    let p = JobPlanner::restore(sched(spec_on_the(0), utc()), PlanPolicy::default(), h);
    assert_eq!(p.history(), &h);
    assert_eq!(
        p.next_wake(utc_at("2026-02-01 10:30")),
        Some(utc_at("2026-02-01 11:00"))
    );
    // A wake-up in the past means "poll now": the 11:00 and 12:00 slots are due.
    assert_eq!(
        p.next_wake(utc_at("2026-02-01 12:30")),
        Some(utc_at("2026-02-01 11:00"))
    );
}

// ---------------------------------------------------------------- simulation properties

const ZONES: [&str; 5] = [
    "UTC",
    "America/New_York",
    "Europe/Berlin",
    "Australia/Lord_Howe",
    "Asia/Kolkata",
];
const GATES: [&str; 6] = [
    "#monday#",
    "#last_day_of_month#",
    "15",
    "31",
    "#first_day_of_year#",
    "#sunday#",
];
const CRONS: [&str; 8] = [
    "*/5 * * * *",
    "0 30 2 * * *",
    "15 1 * * *",
    "0 */2 * * MON-FRI",
    "*/30 * * * * *",
    "0 0 L * *",
    "0 0 0 1 1 *",
    "10 2,3 * * *",
];

/// A random valid schedule of any kind, in a zone chosen for its DST rules.
fn random_spec(rng: &mut SimRng) -> (ScheduleSpec, Tz) {
    let tz: Tz = rng.pick(&ZONES).parse().unwrap();
    let gate = rng.chance(30).then(|| rng.pick(&GATES).to_string());
    let spec = match rng.below(6) {
        0 => ScheduleSpec {
            run_every: Some(*rng.pick(&[1, 5, 7, 15, 60, 90, 1440])),
            run_date: gate,
            ..Default::default()
        },
        1 => ScheduleSpec {
            run_on_the: Some(rng.range_i64(0, 59)),
            run_date: gate,
            ..Default::default()
        },
        2 => ScheduleSpec {
            run_at: Some(format!("{:02}:{:02}", rng.below(24), rng.below(60))),
            run_date: gate,
            ..Default::default()
        },
        3 => ScheduleSpec {
            run_date: Some(rng.pick(&GATES).to_string()),
            ..Default::default()
        },
        4 => spec_cron(rng.pick::<&str>(&CRONS)),
        _ => ScheduleSpec {
            run_always: true,
            run_delay: *rng.pick(&[0, 1000, 10_000, 90_000]),
            ..Default::default()
        },
    };
    (spec, tz)
}

fn random_policy(rng: &mut SimRng) -> PlanPolicy {
    PlanPolicy {
        misfire: *rng.pick(&MisfirePolicy::ALL),
        misfire_window_ms: *rng.pick(&[0, 1000, 60_000, 30 * MIN]),
        max_catchup: *rng.pick(&[1, 3, 10, 150]),
        overlap: *rng.pick(&OverlapPolicy::ALL),
        max_concurrent: rng.range_i64(1, 3) as u32,
        max_queued: rng.range_i64(1, 3) as u32,
    }
}

/// What the planner must decide for a calendar schedule, computed the slow way: every due
/// slot enumerated forwards, then the policies applied as the module docs state them.
fn expected_decisions(p: &JobPlanner, floor: i64, now: i64) -> Option<Vec<Decision>> {
    let s = p.schedule();
    let pol = p.policy();
    let mut due = Vec::new();
    let mut t = floor;
    while let Some(n) = s.next_slot_after(t).filter(|n| *n <= now) {
        due.push(n);
        t = n;
        if due.len() > 50_000 {
            return None;
        }
    }
    if due.is_empty() {
        return Some(vec![]);
    }
    let keep = RECORD_LIMIT.max(pol.max_catchup as usize + 1);
    let (old, recent) = due.split_at(due.len().saturating_sub(keep));
    let n = recent.len();
    let latest = recent[n - 1];
    let on_time = now - latest <= pol.misfire_window_ms;
    let missed: Vec<bool> = (0..n).map(|i| i < n - 1 || !on_time).collect();
    let missed_count = missed.iter().filter(|m| **m).count();
    let (reason, fires): (SkipReason, Vec<bool>) = match pol.misfire {
        MisfirePolicy::Once => (SkipReason::Coalesced, (0..n).map(|i| i == n - 1).collect()),
        MisfirePolicy::Skip => (SkipReason::Misfire, (0..n).map(|i| !missed[i]).collect()),
        MisfirePolicy::All => {
            // The most recent max_catchup missed slots, and the latest if on time.
            let mut seen = 0;
            let mut v = vec![false; n];
            for i in (0..n).rev() {
                if !missed[i] {
                    v[i] = true;
                } else if seen < pol.max_catchup as usize {
                    v[i] = true;
                    seen += 1;
                }
            }
            (SkipReason::CatchupLimit, v)
        }
    };
    let mut out = Vec::new();
    // The missed slots that do not fire (always the oldest) are one summary with the older.
    let prefix = fires.iter().take_while(|f| !**f).count();
    if !old.is_empty() || prefix > 0 {
        out.push(Decision::Drop {
            first: old.first().copied().unwrap_or(recent[0]),
            last: if prefix > 0 {
                recent[prefix - 1]
            } else {
                *old.last().unwrap()
            },
            count: Some((old.len() + prefix) as u64),
            reason,
        });
    }
    let start = p.history().in_flight();
    let mut in_flight = start;
    let cap = match pol.overlap {
        OverlapPolicy::Forbid => 1,
        OverlapPolicy::Queue => pol.max_queued,
        OverlapPolicy::Allow => pol.max_concurrent,
    };
    for i in prefix..n {
        let slot = recent[i];
        let ok = match pol.overlap {
            OverlapPolicy::Forbid => start == 0,
            _ => in_flight < cap,
        };
        if ok {
            in_flight += 1;
            let catch_up = match pol.misfire {
                MisfirePolicy::Once => missed_count > 0 || !old.is_empty(),
                _ => missed[i],
            };
            out.push(Decision::Fire { slot, catch_up });
        } else {
            out.push(Decision::Skip {
                slot,
                reason: SkipReason::Overlap,
            });
        }
    }
    Some(out)
}

/// What a simulation exercised, so a test can show the properties were not vacuous.
#[derive(Debug, Default)]
struct SimStats {
    model_checked_polls: usize,
    fired_on_time: usize,
    fired_catch_up: usize,
    skipped: HashSet<&'static str>,
    dropped: usize,
    restarts: usize,
    jumps_back: usize,
    relived: usize,
}

/// One simulated node running one job: random clock (ticks, jumps both ways, outages),
/// fake workers, occasional crash-and-restore. Checks every invariant after every poll.
fn simulate_job(seed: u64, steps: usize) -> SimStats {
    let mut stats = SimStats::default();
    let start = at(utc(), "2026-01-01 00:00") + (seed % 1000) as i64 * 7 * HOUR;
    let mut sim = Sim::new(seed, start);
    let (spec, tz) = random_spec(&mut sim.rng);
    let policy = random_policy(&mut sim.rng);
    let schedule = sched(spec.clone(), tz);
    let is_always = schedule.run_always_delay().is_some();
    let mut p = JobPlanner::new(schedule.clone(), policy);
    let mut workers: FakeWorkers<()> = FakeWorkers::new();
    let mut queue = 0u32; // fired, waiting for a worker
    let mut decided: HashSet<i64> = HashSet::new();
    let mut last_decided: Option<i64> = None;
    let profile = ClockProfile {
        max_tick_ms: 20 * MIN,
        max_jump_ms: 3 * HOUR,
        max_down_ms: 9 * HOUR,
        ..ClockProfile::default()
    };
    sim.log(format_args!("{spec:?} in {tz}, {policy:?}"));
    for _ in 0..steps {
        let step = sim.clock_step(&profile);
        let now = sim.now();
        stats.jumps_back += matches!(step, crate::sim::ClockStep::JumpBack(_)) as usize;
        if matches!(step, crate::sim::ClockStep::Down(_)) && sim.rng.chance(50) {
            stats.restarts += 1;
            // The node restarts: in-flight runs are reset, the planner is restored from
            // what the catalog kept.
            workers.crash();
            queue = 0;
            let h = JobHistory {
                running: 0,
                queued: 0,
                ..*p.history()
            };
            p = JobPlanner::restore(schedule.clone(), policy, h);
            sim.log(format_args!("restart with {h:?}"));
        }
        for _ in workers.finished_by(now) {
            p.handle_run_finished(now);
        }
        // Event counts may drift (an event lost to a reload); the runtime hands the planner
        // the catalog's counts before each poll, which must win.
        if sim.rng.chance(10) {
            p.handle_run_started(now);
        }
        // The fake processor runs one at a time unless overlap allows more.
        let slots = if policy.overlap == OverlapPolicy::Allow {
            policy.max_concurrent
        } else {
            1
        };
        while queue > 0 && (workers.len() as u32) < slots {
            queue -= 1;
            p.handle_run_started(now);
            workers.start(now + sim.rng.range_i64(0, 2 * HOUR), ());
        }
        p.handle_in_flight(workers.len() as u32, queue);
        // Now and then the job is failing: the catalog's streak makes it back off.
        if sim.rng.chance(4) {
            let failures = sim.rng.range_i64(0, 6) as u32;
            let last_failure = Some(now - sim.rng.range_i64(0, 2 * HOUR));
            p.handle_failures(crate::schedule::FailureStreak {
                failures,
                last_failure,
            });
        }
        let before = *p.history();
        let floor = before.last_slot.max(before.since);
        // The model knows no re-lived spans and no backoff: it checks every other poll of a
        // clock at or past the floor.
        let backing_off = p
            .backoff_until()
            .is_some_and(|u| floor.is_none_or(|f| u > f));
        let expected = match floor {
            Some(floor) if !is_always && now >= floor && !p.is_reliving() && !backing_off => {
                expected_decisions(&p, floor, now)
            }
            _ => None,
        };
        let out = p.poll_due(now);
        sim.log(format_args!("poll at {} -> {out:?}", format_local(tz, now)));
        if let Some(want) = expected {
            assert_eq!(out, want, "misfire/overlap rules broken\n{}", sim.report());
            stats.model_checked_polls += 1;
        }
        for d in &out {
            // A summary is recorded as one row under its first slot's key.
            let key = match d {
                Decision::Drop { first, .. } => Some(*first),
                other => other.slot(),
            };
            if let Some(slot) = key {
                // The catalog records a re-lived slot under the first free key of its second
                // (a restored planner does not know the keys earlier spans used).
                let slot = crate::schedule::slot_keys(slot)
                    .find(|k| !decided.contains(k))
                    .expect("a free key");
                assert!(
                    decided.insert(slot),
                    "slot {slot} decided twice\n{}",
                    sim.report()
                );
                // Calendar slots fall on whole seconds; a re-lived slot's key is slot + n ms.
                let natural = is_always || slot % 1000 == 0;
                if natural {
                    assert!(
                        last_decided.is_none_or(|l| slot > l),
                        "slot {slot} not after the last one\n{}",
                        sim.report()
                    );
                    last_decided = Some(slot);
                } else {
                    stats.relived += 1;
                }
                if !is_always {
                    let wall = slot - slot.rem_euclid(1000);
                    assert!(wall <= now, "a future slot fired\n{}", sim.report());
                }
            }
            match d {
                Decision::Fire { catch_up, .. } => {
                    queue += 1;
                    if *catch_up {
                        stats.fired_catch_up += 1
                    } else {
                        stats.fired_on_time += 1
                    }
                }
                Decision::Skip { reason, .. } => {
                    stats.skipped.insert(reason.as_str());
                }
                Decision::Drop { reason, .. } => {
                    stats.dropped += 1;
                    stats.skipped.insert(reason.as_str());
                }
            }
        }
        if is_always {
            let fired = out.len() as u32;
            let cap = if policy.overlap == OverlapPolicy::Allow {
                policy.max_concurrent
            } else {
                1
            };
            assert!(fired <= 1);
            assert!(
                fired == 0 || before.in_flight() < cap,
                "run_always overlapped\n{}",
                sim.report()
            );
        }
        assert_eq!(
            p.history().in_flight(),
            queue + workers.len() as u32,
            "{}",
            sim.report()
        );
        // Nothing is left due, so the next wake-up is in the future (or not needed).
        if let Some(w) = p.next_wake(now) {
            assert!(
                w > now,
                "next wake {w} <= now {now} after a poll\n{}",
                sim.report()
            );
        }
    }
    stats
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn simulated_clock_histories_keep_every_invariant(seed in any::<u64>()) {
        simulate_job(seed, 120);
    }

    #[test]
    fn next_and_previous_slots_agree(seed in any::<u64>(), offset in 0i64..(3 * 365 * DAY)) {
        let mut rng = SimRng::new(seed);
        let (spec, tz) = random_spec(&mut rng);
        let s = sched(spec, tz);
        let t = at(utc(), "2026-01-01 00:00") + offset;
        let next = s.next_slot_after(t);
        let prev = s.prev_slot_at_or_before(t);
        prop_assert_eq!(next.is_some(), s.has_slots());
        if let Some(n) = next {
            prop_assert!(n > t);
            prop_assert_eq!(s.prev_slot_at_or_before(n - 1), prev, "prev of the next's eve");
            prop_assert_eq!(s.prev_slot_at_or_before(n), Some(n));
        }
        if let Some(p) = prev {
            prop_assert!(p <= t);
            prop_assert_eq!(s.next_slot_after(p), next);
        }
    }
}

/// The simulation reaches every decision the planner can make; without this the
/// properties above could pass by never getting anywhere interesting.
#[test]
fn simulation_covers_every_decision_kind() {
    let mut total = SimStats::default();
    for seed in 0..150 {
        let s = simulate_job(seed, 150);
        total.model_checked_polls += s.model_checked_polls;
        total.fired_on_time += s.fired_on_time;
        total.fired_catch_up += s.fired_catch_up;
        total.skipped.extend(s.skipped);
        total.dropped += s.dropped;
        total.restarts += s.restarts;
        total.jumps_back += s.jumps_back;
        total.relived += s.relived;
    }
    assert!(total.model_checked_polls > 5000, "{total:?}");
    assert!(
        total.fired_on_time > 300 && total.fired_catch_up > 100,
        "{total:?}"
    );
    assert_eq!(total.skipped.len(), SkipReason::ALL.len(), "{total:?}");
    assert!(
        total.dropped > 0 && total.restarts > 10 && total.jumps_back > 100 && total.relived > 10,
        "{total:?}"
    );
}

/// Frequent schedules for the step-back property: (schedule, its period in ms).
const FREQUENT: [(&str, i64); 5] = [
    ("* * * * *", MIN),
    ("*/5 * * * * *", 5_000),
    ("0 */15 * * * *", 15 * MIN),
    ("30 * * * * *", MIN),
    ("0 0 * * * *", HOUR),
];

/// After a step back of any size at any moment, a job polled as the runtime polls it — when
/// `next_wake` says it is due — fires again within two periods of the clock's new reading,
/// keeps firing once a period, and never decides a key twice; re-lived keys are never natural
/// slots. (Regression, fault scenario 4: polled every tick, the property held, while the
/// runtime, which polls at `next_wake`, slept until the clock came back to the last slot.)
fn step_back_keeps_the_rhythm(seed: u64) {
    let mut rng = SimRng::new(seed);
    let &(cron, period) = rng.pick(&FREQUENT);
    let tz: Tz = rng.pick(&ZONES).parse().unwrap();
    let policy = PlanPolicy {
        overlap: OverlapPolicy::Allow,
        max_concurrent: 1000,
        ..PlanPolicy::default()
    };
    let mut p = JobPlanner::new(sched(spec_cron(cron), tz), policy);
    let poll_every = (period / 10).clamp(1000, MIN);
    let mut now =
        at(utc(), "2026-01-01 00:00") + rng.range_i64(0, 365) * DAY + rng.range_i64(0, DAY);
    let mut keys = HashSet::new();
    let mut last_fire: Option<i64> = None;
    let mut steps = 0;
    // The runtime restores a planner with the job's start (`since`); a first poll sets it.
    assert_eq!(p.poll_due(now), vec![]);
    for _ in 0..(3000 / (period / poll_every).max(1)).max(200) {
        // A few steps back of any size, up to six hours.
        let mut landed = None;
        if rng.chance(3) && steps < 4 {
            steps += 1;
            now -= rng.range_i64(1, 6 * HOUR);
            landed = Some(now);
            last_fire = None;
        }
        let due = p.next_wake(now).is_some_and(|w| w <= now);
        for d in if due { p.poll_due(now) } else { Vec::new() } {
            let Some(key) = d.slot() else { continue };
            assert!(keys.insert(key), "seed {seed}: key {key} twice");
            if let Decision::Fire { .. } = d {
                if let Some(l) = last_fire {
                    assert!(
                        now - l <= 2 * period + poll_every,
                        "seed {seed}: {cron} silent from {l} to {now}"
                    );
                }
                last_fire = Some(now);
            }
        }
        if let (Some(l), None) = (landed, last_fire) {
            // Checked at the next fire: within two periods of the landing.
            last_fire = Some(l);
        }
        now += poll_every;
    }
    if let Some(l) = last_fire {
        assert!(
            now - l <= 2 * period + 2 * poll_every,
            "seed {seed}: {cron} silent from {l} to the end, {now}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn a_clock_step_back_never_silences_a_frequent_job_nor_repeats_a_key(seed in any::<u64>()) {
        step_back_keeps_the_rhythm(seed);
    }
}

#[test]
fn every_kind_survives_both_new_york_dst_days_forward_and_back() {
    let days = ["2026-03-08 00:00", "2026-11-01 00:00"];
    let specs = [
        spec_on_the(0),
        spec_on_the(30),
        spec_at("01:30", None),
        spec_at("02:30", None),
        spec_every(20),
        spec_cron("0 30 2 * * *"),
        spec_cron("*/20 * * * *"),
    ];
    for spec in specs {
        let s = sched(spec.clone(), ny());
        for day in days {
            let from = at(ny(), day) - HOUR;
            let fwd = s.next_slots_after(from, 40);
            assert!(fwd.windows(2).all(|w| w[0] < w[1]));
            // Walk back from the last and find the same slots.
            let mut back = vec![*fwd.last().unwrap()];
            while back.len() < fwd.len() {
                back.push(s.prev_slot_at_or_before(back.last().unwrap() - 1).unwrap());
            }
            back.reverse();
            assert_eq!(fwd, back, "{spec:?} around {day}");
        }
    }
}

// ---------------------------------------------------------------- cron cross-check

/// A field both crates read the same way: `*`, `*/s`, `n`, `a-b`, `a-b/s` or a list.
fn cron_field(rng: &mut SimRng, lo: u32, hi: u32, allow_star: bool) -> String {
    let single = |rng: &mut SimRng| -> String {
        match rng.below(3) {
            0 => format!("{}", rng.range_i64(lo as i64, hi as i64)),
            1 => {
                let a = rng.range_i64(lo as i64, hi as i64);
                let b = rng.range_i64(a, hi as i64);
                format!("{a}-{b}")
            }
            _ => {
                let a = rng.range_i64(lo as i64, hi as i64);
                let b = rng.range_i64(a, hi as i64);
                let step = rng.range_i64(1, (hi - lo).max(1) as i64);
                format!("{a}-{b}/{step}")
            }
        }
    };
    match rng.below(if allow_star { 5 } else { 3 }) {
        0 => single(rng),
        1 => (0..rng.range_i64(2, 3))
            .map(|_| single(rng))
            .collect::<Vec<_>>()
            .join(","),
        2 => format!("*/{}", rng.range_i64(1, (hi - lo).max(1) as i64)),
        _ => "*".to_string(),
    }
}

/// Re-numbers a weekday field from POSIX (croner, 0 = Sunday) to Quartz (cron, 1 = Sunday).
fn quartz_weekdays(field: &str) -> String {
    let mut out = String::new();
    let mut num = String::new();
    let mut after_slash = false;
    let flush = |num: &mut String, out: &mut String, after_slash: bool| {
        if !num.is_empty() {
            let v: u32 = num.parse().unwrap();
            out.push_str(&if after_slash { v } else { v + 1 }.to_string());
            num.clear();
        }
    };
    for c in field.chars() {
        if c.is_ascii_digit() {
            num.push(c);
        } else {
            flush(&mut num, &mut out, after_slash);
            after_slash = c == '/';
            out.push(c);
        }
    }
    flush(&mut num, &mut out, after_slash);
    out
}

/// A random 6-field expression in both dialects. Day-of-month and day-of-week are never
/// both restricted: croner ORs them then (Vixie), the cron crate ANDs them.
fn random_cron_pair(rng: &mut SimRng) -> (String, String) {
    let sec = cron_field(rng, 0, 59, true);
    let min = cron_field(rng, 0, 59, true);
    let hour = cron_field(rng, 0, 23, true);
    let month = if rng.chance(60) {
        "*".to_string()
    } else {
        cron_field(rng, 1, 12, false)
    };
    // Days past 28 only when every month is allowed, so every expression fires.
    let dom_hi = if month == "*" { 31 } else { 28 };
    let (dom, dow) = match rng.below(3) {
        0 => (cron_field(rng, 1, dom_hi, false), "*".to_string()),
        1 => ("*".to_string(), cron_field(rng, 0, 6, false)),
        _ => ("*".to_string(), "*".to_string()),
    };
    let croner = format!("{sec} {min} {hour} {dom} {month} {dow}");
    let quartz = format!("{sec} {min} {hour} {dom} {month} {}", quartz_weekdays(&dow));
    (croner, quartz)
}

#[test]
fn quartz_weekday_renumbering() {
    assert_eq!(quartz_weekdays("0-6/2,3"), "1-7/2,4");
    assert_eq!(quartz_weekdays("*/3"), "*/3");
    assert_eq!(quartz_weekdays("*"), "*");
}

#[test]
fn croner_agrees_with_the_cron_crate_on_1000_random_expressions_over_a_year() {
    use std::str::FromStr as _;
    let mut rng = SimRng::new(0xC0FFEE);
    let year_start = utc_at("2026-01-01 00:00");
    let mut compared = 0usize;
    for _ in 0..1000 {
        let (ours, theirs) = random_cron_pair(&mut rng);
        let s = sched(spec_cron(&ours), utc());
        let other = cron::Schedule::from_str(&theirs)
            .unwrap_or_else(|e| panic!("cron rejects {theirs:?}: {e}"));
        // One start per month of the simulated year, at a random second of that month,
        // plus the year's first instant; the next 12 fire times from each must agree.
        for m in 0..=12 {
            let from = if m == 0 {
                year_start
            } else {
                year_start + (m - 1) * 30 * DAY + rng.range_i64(0, 30 * DAY / 1000) * 1000
            };
            let mine = s.next_slots_after(from, 12);
            let start = chrono::Utc.timestamp_millis_opt(from).unwrap();
            let want: Vec<i64> = other
                .after(&start)
                .take(12)
                .map(|t| t.timestamp_millis())
                .collect();
            assert_eq!(
                mine,
                want,
                "croner {ours:?} vs cron {theirs:?} from {}",
                format_local(utc(), from)
            );
            compared += mine.len();
        }
        // And membership: a slot croner yields is one the other crate includes.
        if let Some(t) = s.next_slot_after(year_start + rng.range_i64(0, 365 * DAY)) {
            assert!(other.includes(chrono::Utc.timestamp_millis_opt(t).unwrap()));
        }
    }
    assert!(
        compared > 100_000,
        "too few fire times compared: {compared}"
    );
}

#[test]
fn local_time_helpers_round_trip() {
    let t = at(ny(), "2026-07-04 09:15:30");
    assert_eq!(format_local(ny(), t), "2026-07-04 09:15:30-04:00");
    let local = ny().timestamp_millis_opt(t).unwrap();
    assert_eq!((local.hour(), local.minute(), local.second()), (9, 15, 30));
    // Ambiguous or missing local times are refused rather than guessed.
    assert_eq!(local_ms(ny(), "2026-11-01 01:30"), None);
    assert_eq!(local_ms(ny(), "2026-03-08 02:30"), None);
}

// ---------------------------------------------------------------- cron fast path

/// croner alone, as `next_slot_after` used it before the fast path.
fn croner_only_next(s: &Schedule, after: i64) -> Option<i64> {
    let Kind::Cron(c) = s.kind() else {
        panic!("not a cron schedule")
    };
    let t = s.croner_next(&c.cron, after)?;
    if t > after {
        Some(t)
    } else {
        croner_only_next(s, t)
    }
}

/// croner alone, as `prev_slot_at_or_before` used it before the fast path.
fn croner_only_prev(s: &Schedule, at: i64) -> Option<i64> {
    let Kind::Cron(c) = s.kind() else {
        panic!("not a cron schedule")
    };
    let floor = at.div_euclid(1000) * 1000;
    s.croner_prev(&c.cron, floor).filter(|&t| t <= at)
}

/// Expressions with croner's modifiers and nicknames, which the random pairs leave out.
const SPECIAL_CRONS: &[&str] = &[
    "15 10 L * *",
    "0 0 LW * *",
    "30 1 15W * *",
    "0 2 1W * *",
    "0 3 31W * *",
    "0 12 * * 5#2",
    "0 12 * * 1L",
    "0 1 13 * 5",
    "0 2 1,15 * MON-WED",
    "30 2 * * *",
    "0 30 2 * * *",
    "*/7 1-3 * * *",
    "*/5 * * * *",
    "*/10 * * * * *",
    "0 */2 * * MON-FRI",
    "0 0 1 1 *",
    "0 0 29 2 *",
    "@daily",
    "@hourly",
    "@weekly",
    "@monthly",
    "@yearly",
];

/// Zones with a DST change (60 and 30 minutes, both hemispheres), one without, and one that
/// skipped a whole day (Apia, 2011-12-30).
const FAST_PATH_ZONES: &[&str] = &[
    "America/New_York",
    "Europe/Berlin",
    "Australia/Lord_Howe",
    "Australia/Sydney",
    "America/Santiago",
    "Asia/Kolkata",
    "UTC",
    "Pacific/Apia",
];

/// Starts around the zone's DST changes (and Apia's skipped day): every 30 minutes for a
/// day either side of each change in 2025-2026, at random milliseconds.
fn starts_around_changes(tz: Tz, rng: &mut SimRng) -> Vec<i64> {
    let mut changes = Vec::new();
    let mut t = utc_at("2025-01-01 00:00");
    use chrono::Offset as _;
    let offset = |t: i64| {
        tz.offset_from_utc_datetime(
            &chrono::DateTime::from_timestamp_millis(t)
                .unwrap()
                .naive_utc(),
        )
        .fix()
    };
    while t < utc_at("2027-01-01 00:00") {
        if offset(t) != offset(t + HOUR) {
            changes.push(t);
        }
        t += HOUR;
    }
    changes.push(utc_at("2011-12-29 12:00"));
    changes.push(utc_at("2026-06-15 12:00"));
    let mut starts = Vec::new();
    for c in changes {
        let mut t = c - DAY;
        while t < c + DAY {
            starts.push(t + rng.range_i64(0, 30 * MIN));
            t += 30 * MIN;
        }
    }
    starts
}

#[test]
fn cron_fast_path_agrees_with_croner_across_dst_days() {
    let mut rng = SimRng::new(0xFA57);
    let mut exprs: Vec<String> = SPECIAL_CRONS.iter().map(|s| s.to_string()).collect();
    exprs.extend((0..150).map(|_| random_cron_pair(&mut rng).0));
    let (mut compared, mut fast) = (0usize, 0usize);
    for zone in FAST_PATH_ZONES {
        let tz: Tz = zone.parse().unwrap();
        let starts = starts_around_changes(tz, &mut rng);
        for expr in &exprs {
            let s = sched(spec_cron(expr), tz);
            let Kind::Cron(c) = s.kind() else {
                unreachable!()
            };
            // A sample of the starts per expression keeps the test quick.
            for &t in starts.iter().filter(|_| rng.chance(15)) {
                let want = croner_only_next(&s, t);
                assert_eq!(
                    s.next_slot_after(t),
                    want,
                    "next after {} for {expr:?} in {zone}",
                    format_local(tz, t)
                );
                let want_prev = croner_only_prev(&s, t);
                assert_eq!(
                    s.prev_slot_at_or_before(t),
                    want_prev,
                    "prev at or before {} for {expr:?} in {zone}",
                    format_local(tz, t)
                );
                // The slots themselves are starts too: exact-second boundaries.
                if let Some(n) = want {
                    assert_eq!(s.next_slot_after(n), croner_only_next(&s, n), "{expr:?}");
                    assert_eq!(s.prev_slot_at_or_before(n), Some(n), "{expr:?}");
                    assert_eq!(s.prev_slot_at_or_before(n - 1), croner_only_prev(&s, n - 1));
                }
                fast += c.fast_next(tz, t).is_some() as usize;
                compared += 1;
            }
        }
    }
    assert!(compared > 20_000, "too few starts compared: {compared}");
    assert!(
        fast * 10 > compared * 8,
        "the fast path answered only {fast} of {compared} searches"
    );
}

#[test]
fn plain_day_masks_agree_with_croners_day_match() {
    let mut rng = SimRng::new(0xDA75);
    let mut exprs: Vec<String> = SPECIAL_CRONS.iter().map(|s| s.to_string()).collect();
    exprs.extend((0..300).map(|_| random_cron_pair(&mut rng).0));
    let mut d = chrono::NaiveDate::from_ymd_opt(2024, 1, 1).unwrap();
    let days: Vec<chrono::NaiveDate> = (0..800)
        .map(|_| {
            d = d.succ_opt().unwrap();
            d
        })
        .collect();
    for expr in &exprs {
        let s = sched(spec_cron(expr), utc());
        let Kind::Cron(c) = s.kind() else {
            unreachable!()
        };
        for &d in &days {
            let want = c
                .cron
                .pattern
                .day_match(
                    d.year(),
                    d.month(),
                    d.day(),
                    croner::Weekday::from_days_from_sunday(d.weekday().num_days_from_sunday()),
                )
                .unwrap();
            assert_eq!(c.day_matches(d), Some(want), "{expr:?} on {d}");
        }
    }
}

/// Stretching (issue 18, point 8): a slot schedule stretched ×3 fires one due slot in three
/// and passes over the others without a row; back to ×1 it fires every slot again; a reload
/// carries the count over, so it does not fire early.
#[test]
fn a_stretched_slot_schedule_fires_one_slot_in_the_factor() {
    let start = utc_at("2026-04-10 12:00");
    let mut p = JobPlanner::new(sched(spec_every(1), utc()), PlanPolicy::default());
    assert_eq!(p.poll_due(start), vec![]);
    p.set_stretch(3);
    let mut fired = Vec::new();
    for m in 1..=12 {
        for d in p.poll_due(start + m * MIN) {
            match d {
                Decision::Fire { slot, catch_up } => {
                    assert!(!catch_up);
                    fired.push((slot - start) / MIN);
                    p.handle_run_started(slot);
                    p.handle_run_finished(slot + 1000);
                }
                other => panic!("a passed slot got a row: {other:?}"),
            }
        }
        if m == 6 {
            // A catalog reload builds a new planner: it continues the count.
            let mut q = JobPlanner::restore(
                sched(spec_every(1), utc()),
                PlanPolicy::default(),
                *p.history(),
            );
            q.set_stretch(3);
            q.continue_from(&p);
            p = q;
        }
        if m == 9 {
            p.set_stretch(1);
        }
    }
    assert_eq!(fired, [1, 4, 7, 10, 11, 12]);
    assert_eq!(p.stretch(), 1);
}

/// A run_always job stretched ×3 waits three periods (its run plus its delay) between the end
/// of a run and the next start: 10 s delay and 2 s runs start every 36 s instead of 12 s.
#[test]
fn a_stretched_run_always_job_waits_the_factor_times_its_period() {
    let start = utc_at("2026-04-10 12:00");
    let spec = ScheduleSpec {
        run_always: true,
        run_delay: 10_000,
        ..Default::default()
    };
    let mut p = JobPlanner::new(sched(spec, utc()), PlanPolicy::default());
    let mut starts = Vec::new();
    let mut ends_at: Option<i64> = None;
    let mut t = start;
    while t < start + 5 * MIN {
        if ends_at == Some(t) {
            p.handle_run_finished(t);
            ends_at = None;
        }
        if !p.poll_due(t).is_empty() {
            starts.push(t);
            p.handle_run_started(t);
            ends_at = Some(t + 2_000);
            if starts.len() == 2 {
                p.set_stretch(3);
            }
        }
        let wake = [p.next_wake(t), ends_at]
            .into_iter()
            .flatten()
            .min()
            .unwrap();
        t = wake.max(t + 1);
    }
    let gaps: Vec<i64> = starts.windows(2).map(|w| w[1] - w[0]).collect();
    assert_eq!(gaps[0], 12_000);
    assert!(gaps[1..].iter().all(|&g| g == 36_000), "{gaps:?}");
}

/// 1,000 jobs of one cron expression keep one compiled copy of it (croner's parse of any
/// expression holds a 5,001-byte year table), and a scheduler's cache forgets what no schedule
/// uses any more.
#[test]
fn schedules_of_one_cron_expression_share_its_compiled_form() {
    let mut crons = crate::schedule::CronCache::default();
    let schedules: Vec<Schedule> = (0..1000)
        .map(|_| Schedule::parse_shared(&spec_cron("0 0 1 1 *"), Tz::UTC, &mut crons).unwrap())
        .collect();
    let other = Schedule::parse_shared(&spec_cron("*/5 * * * *"), Tz::UTC, &mut crons).unwrap();
    assert_eq!(crons.len(), 2);
    let compiled = |s: &Schedule| match s.kind() {
        Kind::Cron(c) => std::sync::Arc::as_ptr(c),
        other => panic!("not a cron schedule: {other:?}"),
    };
    assert!(
        schedules
            .iter()
            .all(|s| compiled(s) == compiled(&schedules[0]))
    );
    assert_ne!(compiled(&other), compiled(&schedules[0]));
    drop(other);
    crons.retain_used();
    assert_eq!(crons.len(), 1, "the unused expression is forgotten");
    drop(schedules);
    crons.retain_used();
    assert!(crons.is_empty());
}

// ---------------------------------------------------------------- next run (issue 27, point 3)

/// `next_run_at` comes from the planner: a cron job's next slot, which moves on once the slot
/// fires; none for an on-demand job; the first slot after now (not "poll now") when the clock
/// stepped back.
#[test]
fn next_run_is_the_slot_that_fires_next_and_moves_on_when_it_fires() {
    let now = utc_at("2026-02-01 10:30");
    let mut p = JobPlanner::new(sched(spec_cron("0 * * * *"), utc()), PlanPolicy::default());
    assert_eq!(p.next_run(now), Some(utc_at("2026-02-01 11:00")));
    assert_eq!(p.poll_due(now), vec![]);
    assert_eq!(p.next_run(now), Some(utc_at("2026-02-01 11:00")));
    let eleven = utc_at("2026-02-01 11:00");
    assert_eq!(p.poll_due(eleven).len(), 1);
    assert_eq!(p.next_run(eleven), Some(utc_at("2026-02-01 12:00")));
    // The clock steps back a day: the job runs at the first slot after the clock's reading.
    let back = utc_at("2026-01-31 11:10");
    assert_eq!(p.next_wake(back), Some(back), "a poll now, to re-base");
    assert_eq!(p.next_run(back), Some(utc_at("2026-01-31 12:00")));

    let on_demand = JobPlanner::new(sched(ScheduleSpec::default(), utc()), PlanPolicy::default());
    assert_eq!(on_demand.next_run(now), None);
}

/// The next run of a stretched schedule is the slot that fires, not the ones it passes over;
/// of a job backing off, the first slot its backoff lets fire.
#[test]
fn next_run_skips_the_slots_a_stretch_or_a_backoff_passes_over() {
    let start = utc_at("2026-04-10 12:00");
    let mut p = JobPlanner::new(sched(spec_every(1), utc()), PlanPolicy::default());
    assert_eq!(p.poll_due(start), vec![]);
    p.set_stretch(3);
    let mut predicted = p.next_run(start);
    for m in 1..=12 {
        let now = start + m * MIN;
        for d in p.poll_due(now) {
            if let Decision::Fire { slot, .. } = d {
                assert_eq!(
                    Some(slot),
                    predicted,
                    "the slot shown is the one that fired"
                );
                p.handle_run_started(slot);
                p.handle_run_finished(slot + 1000);
            }
        }
        predicted = p.next_run(now);
    }
    assert_eq!(predicted, Some(start + 13 * MIN));

    let mut p = JobPlanner::new(sched(spec_every(1), utc()), PlanPolicy::default());
    assert_eq!(p.poll_due(start), vec![]);
    // Three failures, the last at 12:00:30: no slot before 12:01:30 fires.
    p.handle_failures(crate::schedule::FailureStreak {
        failures: 3,
        last_failure: Some(start + 30_000),
    });
    assert_eq!(p.next_run(start + 40_000), Some(start + 2 * MIN));
}

/// A run_always job's next run is when it is next eligible: unknown while its run is in
/// flight, the run's end plus its delay once it ended.
#[test]
fn next_run_of_a_run_always_job_is_its_end_plus_its_delay() {
    let start = utc_at("2026-04-10 12:00");
    let spec = ScheduleSpec {
        run_always: true,
        run_delay: 10_000,
        ..Default::default()
    };
    let mut p = JobPlanner::new(sched(spec, utc()), PlanPolicy::default());
    assert_eq!(p.poll_due(start).len(), 1);
    assert_eq!(p.next_run(start), None, "in flight: not known yet");
    p.handle_run_started(start);
    p.handle_run_finished(start + 2_000);
    assert_eq!(p.next_run(start + 2_000), Some(start + 12_000));
}

/// Issue 27, point 16: a cron number out of its field's range read "is not a valid cron
/// expression (Component error: Number out of bounds.)". The error names the field, the
/// value and the range, for a file and for `--cron` alike (both validate through here).
#[test]
fn regression_a_cron_number_out_of_range_names_its_field_and_range() {
    let error = |cron: &str| {
        let spec = ScheduleSpec {
            cron: Some(cron.into()),
            ..ScheduleSpec::default()
        };
        let errors = spec.validate();
        assert_eq!(errors.len(), 1, "{cron}: {errors:?}");
        assert_eq!(errors[0].field, "cron");
        errors[0].reason.clone()
    };
    for (cron, reason) in [
        (
            "0 0 32 * *",
            "day-of-month 32 is out of range 1–31 in \"0 0 32 * *\"",
        ),
        (
            "61 * * * *",
            "minute 61 is out of range 0–59 in \"61 * * * *\"",
        ),
        ("0 24 * * *", "hour 24 is out of range 0–23"),
        ("0 0 1 13 *", "month 13 is out of range 1–12"),
        ("0 0 * * 8", "day-of-week 8 is out of range 0–7"),
        ("0 0 * * 1-9", "day-of-week 9 is out of range 0–7"),
        ("0 0 * * 9#2", "day-of-week 9 is out of range 0–7"),
        ("60 0 0 * * *", "second 60 is out of range 0–59"),
        ("*/0 * * * *", "minute step 0 in `*/0` never advances"),
    ] {
        let got = error(cron);
        assert!(got.starts_with(reason), "{cron}: {got}");
        assert!(!got.contains("Component error"), "{cron}: {got}");
    }
    // What is in range still parses, names and suffixes included.
    for ok in [
        "0 0 31 12 7",
        "0 0 L * *",
        "0 0 * * MON-FRI",
        "0 0 * * 5#2",
        "*/15 * * * *",
    ] {
        let spec = ScheduleSpec {
            cron: Some(ok.into()),
            ..ScheduleSpec::default()
        };
        assert_eq!(spec.validate(), Vec::new(), "{ok}");
    }
}
