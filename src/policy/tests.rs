//! Unit tests of the policy's parts: the config and its validation, the per-resource
//! classification and hysteresis, reasons and evidence, processors, clock jumps.
//!
//! Invariant: reads no clock and imports neither actix nor rusqlite.

use crate::policy::testkit::*;
use crate::policy::{
    Action, Bound, Cause, Evidence, Health, JobView, Level, Pin, Policy, PolicyConfig,
    ProcessorView, Resource, Sample, duration,
};

#[test]
fn defaults_are_the_documented_ones() {
    let c = PolicyConfig::default();
    assert_eq!((c.cpu_strained, c.cpu_critical), (90.0, 97.0));
    assert_eq!(
        (c.memory_strained, c.memory_critical),
        (200 * MIB, 100 * MIB)
    );
    assert_eq!((c.swap_strained, c.swap_critical), (50.0, 80.0));
    assert_eq!((c.disk_strained, c.disk_critical), (15.0, 5.0));
    assert_eq!(c.network_capacity, 0);
    assert_eq!((c.network_strained, c.network_critical), (80.0, 95.0));
    assert_eq!((c.psi_strained, c.psi_critical), (40.0, 80.0));
    assert_eq!((c.enter_after, c.leave_after), (2, 2));
    assert_eq!((c.step_interval, c.cooldown), (30_000, 30_000));
    assert_eq!(c.priority_floor, 100);
    assert_eq!((c.busy_high, c.busy_low), (0.9, 0.1));
    assert_eq!(c.validate(), Ok(()));
}

#[test]
fn config_reads_from_toml_with_defaults_and_rejects_unknown_keys() {
    #[derive(serde::Deserialize)]
    struct Node {
        policy: PolicyConfig,
    }
    let n: Node = toml::from_str("[policy]\ncpu_strained = 80.0\ncooldown = 60000\n").unwrap();
    assert_eq!(
        n.policy,
        PolicyConfig {
            cpu_strained: 80.0,
            cooldown: 60_000,
            ..PolicyConfig::default()
        }
    );
    let empty: Node = toml::from_str("[policy]\n").unwrap();
    assert_eq!(empty.policy, PolicyConfig::default());
    let err = toml::from_str::<Node>("[policy]\ncpu_strianed = 80.0\n")
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("cpu_strianed"), "{err}");
    // Every field round-trips, so `config --print-defaults` can print this struct.
    let text = toml::to_string(&PolicyConfig::default()).unwrap();
    assert_eq!(
        toml::from_str::<PolicyConfig>(&text).unwrap(),
        PolicyConfig::default()
    );
}

#[test]
fn validation_names_the_field_the_value_and_the_reason() {
    let bad = |f: fn(&mut PolicyConfig)| {
        let mut c = PolicyConfig::default();
        f(&mut c);
        c.validate().unwrap_err()
    };
    let e = bad(|c| c.cpu_critical = 80.0);
    assert_eq!(
        e.to_string(),
        "policy.cpu_critical = 80: must be at least cpu_strained (90)"
    );
    assert_eq!(bad(|c| c.disk_strained = 150.0).field, "disk_strained");
    assert_eq!(bad(|c| c.psi_critical = f64::NAN).field, "psi_critical");
    assert_eq!(
        bad(|c| c.memory_critical = 300 * MIB).field,
        "memory_critical"
    );
    assert_eq!(bad(|c| c.disk_critical = 20.0).field, "disk_critical");
    assert_eq!(bad(|c| c.busy_low = 0.95).field, "busy_low");
    assert_eq!(bad(|c| c.busy_high = 1.5).field, "busy_high");
    assert_eq!(bad(|c| c.enter_after = 0).field, "enter_after");
    assert_eq!(bad(|c| c.cooldown = -1).field, "cooldown");
    assert_eq!(bad(|c| c.network_critical = 50.0).field, "network_critical");
}

#[test]
fn each_resource_reads_its_value_in_its_unit_and_unknowns_are_ok() {
    let cfg = PolicyConfig {
        network_capacity: 1_000_000,
        ..PolicyConfig::default()
    };
    let s = Sample {
        swap_used: 3 * GIB,
        swap_total: 4 * GIB,
        net_bytes_per_s: 900_000.0,
        psi_memory: Some(85.0),
        ..healthy(T0)
    };
    let v = |r: Resource| r.value(&s, &cfg);
    assert_eq!(v(Resource::Cpu), Some(20.0));
    assert_eq!(v(Resource::Memory), Some((4 * GIB) as f64));
    assert_eq!(v(Resource::Swap), Some(75.0));
    assert_eq!(v(Resource::Disk), Some(50.0));
    assert_eq!(v(Resource::Network), Some(90.0));
    assert_eq!(v(Resource::PsiCpu), None);
    let level = |r: Resource| r.classify(v(r), &cfg);
    assert_eq!(level(Resource::Swap), Level::Strained);
    assert_eq!(level(Resource::Network), Level::Strained);
    assert_eq!(level(Resource::PsiMemory), Level::Critical);
    assert_eq!(level(Resource::PsiCpu), Level::Ok, "no PSI counts as ok");
    // No swap, unknown totals, unknown capacity, a NaN reading: no value, ok.
    let blind = Sample {
        memory_total: 0,
        disk_total: 0,
        cpu_used: f64::NAN,
        ..healthy(T0)
    };
    let d = PolicyConfig::default();
    for r in Resource::ALL {
        assert_eq!(r.classify(r.value(&blind, &d), &d), Level::Ok, "{r:?}");
    }
    for r in Resource::ALL {
        assert_eq!(Resource::parse(r.as_str()), Some(r));
    }
}

#[test]
fn thresholds_are_strict() {
    let c = PolicyConfig::default();
    assert_eq!(Resource::Cpu.classify(Some(90.0), &c), Level::Ok);
    assert_eq!(Resource::Cpu.classify(Some(90.1), &c), Level::Strained);
    assert_eq!(Resource::Cpu.classify(Some(97.1), &c), Level::Critical);
    assert_eq!(Resource::Disk.classify(Some(15.0), &c), Level::Ok);
    assert_eq!(Resource::Disk.classify(Some(14.9), &c), Level::Strained);
    assert_eq!(Resource::Disk.classify(Some(4.9), &c), Level::Critical);
    let mem = |mib: u64| Some((mib * MIB) as f64);
    assert_eq!(Resource::Memory.classify(mem(200), &c), Level::Ok);
    assert_eq!(Resource::Memory.classify(mem(199), &c), Level::Strained);
    assert_eq!(Resource::Memory.classify(mem(99), &c), Level::Critical);
}

fn cpu_levels(cfg: &PolicyConfig, readings: &[f64]) -> Vec<Level> {
    let mut h = Health::default();
    readings
        .iter()
        .enumerate()
        .map(|(i, &cpu)| {
            h.handle_sample(
                &Sample {
                    cpu_used: cpu,
                    ..healthy(T0 + i as i64 * TICK)
                },
                cfg,
            );
            h.level(Resource::Cpu)
        })
        .collect()
}

#[test]
fn hysteresis_enters_after_k_bad_and_leaves_after_m_good_samples() {
    use Level::*;
    let c = PolicyConfig::default();
    // A lone spike changes nothing; two in a row enter; one good sample does not leave.
    assert_eq!(
        cpu_levels(&c, &[95.0, 20.0, 95.0, 95.0, 20.0, 95.0, 20.0, 20.0]),
        [Ok, Ok, Ok, Strained, Strained, Strained, Strained, Ok]
    );
    // Strained then critical readings: critical needs its own run of 2.
    assert_eq!(
        cpu_levels(&c, &[95.0, 99.0, 99.0, 95.0, 95.0, 20.0, 20.0]),
        [Ok, Strained, Critical, Critical, Strained, Strained, Ok]
    );
    // Two ok readings take a critical resource straight to ok.
    assert_eq!(
        cpu_levels(&c, &[99.0, 99.0, 20.0, 20.0]),
        [Ok, Critical, Critical, Ok]
    );
    // k = 3, m = 1.
    let c3 = PolicyConfig {
        enter_after: 3,
        leave_after: 1,
        ..c
    };
    assert_eq!(
        cpu_levels(&c3, &[95.0, 95.0, 20.0, 95.0, 95.0, 95.0, 20.0]),
        [Ok, Ok, Ok, Ok, Ok, Strained, Ok]
    );
    // 0 acts as 1 (the policy never panics on an unvalidated config).
    let c0 = PolicyConfig {
        enter_after: 0,
        leave_after: 0,
        ..PolicyConfig::default()
    };
    assert_eq!(cpu_levels(&c0, &[95.0, 20.0]), [Strained, Ok]);
}

#[test]
fn thresholds_change_at_run_time_through_the_same_hysteresis() {
    let mut p = Policy::new(PolicyConfig::default());
    for i in 0..3 {
        p.handle_sample(&Sample {
            cpu_used: 95.0,
            ..healthy(T0 + i * TICK)
        });
    }
    assert_eq!(p.level(Resource::Cpu), Level::Strained);
    p.set_config(PolicyConfig {
        cpu_strained: 96.0,
        ..PolicyConfig::default()
    });
    assert_eq!(p.config().cpu_strained, 96.0);
    assert_eq!(p.level(Resource::Cpu), Level::Strained, "no flip by itself");
    p.handle_sample(&Sample {
        cpu_used: 95.0,
        ..healthy(T0 + 3 * TICK)
    });
    p.handle_sample(&Sample {
        cpu_used: 95.0,
        ..healthy(T0 + 4 * TICK)
    });
    assert_eq!(p.level(Resource::Cpu), Level::Ok);
}

#[test]
fn reasons_read_as_sentences() {
    let mut w = World::start(
        PolicyConfig::default(),
        vec![
            JobView {
                required: true,
                ..job(1, 50)
            },
            JobView {
                name: "report".into(),
                ..job(2, 5)
            },
            JobView {
                name: "sync".into(),
                ..job(3, 40)
            },
        ],
    );
    let mut out = Vec::new();
    for i in 0..7 {
        out.extend(w.feed(&healthy(T0 + i * TICK)));
    }
    assert_eq!(out.len(), 1);
    assert_eq!(
        out[0].reason,
        "all resources ok for 30 s: activate standby job `sync` (priority 40)"
    );
    assert_eq!(
        out[0].evidence.len(),
        3,
        "cpu, memory, disk: {:?}",
        out[0].evidence
    );
    let mut out = Vec::new();
    for (i, cpu) in [85.0, 96.2].into_iter().enumerate() {
        out.extend(w.feed(&Sample {
            cpu_used: cpu,
            ..healthy(T0 + (10 + i as i64) * TICK)
        }));
    }
    for i in 12..14 {
        out.extend(w.feed(&Sample {
            cpu_used: 96.2,
            ..healthy(T0 + i * TICK)
        }));
    }
    assert_eq!(out.len(), 1, "{out:?}");
    // 85% is ok, so the strain began at +55 s and was entered (and acted on) at +60 s.
    assert_eq!(out[0].at, T0 + 60_000);
    assert_eq!(
        out[0].reason,
        "cpu 96.2% > 90% (strained) for 2 samples in a row (5.0 s): shed lowest-priority job \
         `sync` (priority 40)"
    );
    assert_eq!(
        out[0].evidence,
        [Evidence {
            resource: Resource::Cpu,
            value: 96.2,
            unit: "%".into(),
            strained: 90.0,
            critical: 97.0,
            level: Level::Strained,
            reading: Level::Strained,
            budget: None,
        }]
    );
    assert_eq!(out[0].evidence[0].describe(), "cpu 96.2% (strained: > 90%)");
}

/// Regression (issue 18, defect 5): one rule for every duration, so "88 s" never stands
/// beside "90.0 s".
#[test]
fn durations_follow_one_rule() {
    let cases = [
        (0, "0 ms"),
        (6, "6 ms"),
        (999, "999 ms"),
        (1_000, "1.0 s"),
        (1_500, "1.5 s"),
        (9_949, "9.9 s"),
        (9_990, "10 s"),
        (88_000, "88 s"),
        (89_990, "90 s"),
        (90_000, "90 s"),
        (119_600, "2 min"),
        (120_000, "2 min"),
        (125_000, "2 min 5 s"),
    ];
    for (ms, text) in cases {
        assert_eq!(duration(ms), text, "{ms} ms");
    }
}

#[test]
fn decisions_serialize_with_stable_names() {
    let d = crate::policy::Decision {
        at: 1,
        action: Action::Deactivate { job_id: 7 },
        reason: "r".into(),
        evidence: vec![Evidence {
            resource: Resource::PsiIo,
            value: 50.0,
            unit: "%".into(),
            strained: 40.0,
            critical: 80.0,
            level: Level::Strained,
            reading: Level::Strained,
            budget: None,
        }],
        cause: Cause::Health,
        jobs: vec![],
    };
    assert_eq!(
        serde_json::to_string(&d).unwrap(),
        r#"{"at":1,"action":{"deactivate":{"job_id":7}},"reason":"r","evidence":[{"resource":"psi_io","value":50.0,"unit":"%","strained":40.0,"critical":80.0,"level":"strained","reading":"strained"}],"cause":"health"}"#
    );
    assert_eq!(
        serde_json::to_string(&Action::PauseWrites).unwrap(),
        r#""pause_writes""#
    );
    let names: Vec<&str> = [
        Action::Activate { job_id: 1 },
        Action::Deactivate { job_id: 1 },
        Action::AddInstance { processor_id: 1 },
        Action::RemoveInstance { processor_id: 1 },
        Action::PauseWrites,
        Action::ResumeWrites,
    ]
    .iter()
    .map(|a| a.as_str())
    .collect();
    assert_eq!(
        names,
        [
            "activate",
            "deactivate",
            "add_instance",
            "remove_instance",
            "pause_writes",
            "resume_writes"
        ]
    );
    for p in Pin::ALL {
        assert_eq!(Pin::parse(p.as_str()), Some(p));
    }
    for l in [Level::Ok, Level::Strained, Level::Critical] {
        assert_eq!(Level::parse(l.as_str()), Some(l));
    }
    assert!(Level::Ok < Level::Strained && Level::Strained < Level::Critical);
}

fn processor(id: i64, instances: u32, utilization: f64) -> ProcessorView {
    ProcessorView {
        processor_id: id,
        name: format!("p{id}"),
        instances,
        min_instances: 1,
        max_instances: 3,
        utilization,
    }
}

#[test]
fn a_busy_processor_grows_to_its_maximum_one_step_at_a_time_only_while_healthy() {
    let mut w = World::start(PolicyConfig::default(), vec![]);
    w.processors = vec![processor(1, 1, 0.95), processor(2, 1, 0.97)];
    for i in 0..30 {
        w.feed(&healthy(T0 + i * TICK));
    }
    let adds: Vec<(i64, Option<i64>)> = w
        .log
        .iter()
        .map(|d| (d.at - T0, d.action.processor_id()))
        .collect();
    // The busiest first; one step per 30 s; each stops at its maximum of 3.
    assert_eq!(
        adds,
        [
            (30_000, Some(2)),
            (60_000, Some(2)),
            (90_000, Some(1)),
            (120_000, Some(1))
        ]
    );
    assert!(w.log[0].reason.starts_with(
        "processor `p2` 97% busy > 90% over the last sample and all resources ok: add an \
         instance (1 -> 2, max 3)"
    ));
    // Under strain nothing is added, though it is busy.
    let mut w = World::start(PolicyConfig::default(), vec![]);
    w.processors = vec![processor(1, 1, 0.95)];
    for i in 0..30 {
        w.feed(&Sample {
            cpu_used: 95.0,
            ..healthy(T0 + i * TICK)
        });
    }
    assert!(w.log.is_empty(), "{}", w.dump());
}

#[test]
fn an_idle_processor_shrinks_to_its_minimum() {
    let mut w = World::start(PolicyConfig::default(), vec![]);
    w.processors = vec![processor(1, 3, 0.02), processor(2, 2, 0.5)];
    for i in 0..20 {
        w.feed(&Sample {
            cpu_used: 95.0, // idling is reason enough, whatever the health
            ..healthy(T0 + i * TICK)
        });
    }
    let removes: Vec<i64> = w.log.iter().map(|d| d.at - T0).collect();
    assert_eq!(removes, [0, 30_000]);
    assert_eq!(w.processors[0].instances, 1);
    assert_eq!(w.processors[1].instances, 2);
    assert_eq!(
        w.log[0].reason,
        "processor `p1` 2% busy < 10% over the last sample: remove an instance (3 -> 2, min 1)"
    );
}

#[test]
fn a_clock_set_back_does_not_freeze_the_policy() {
    let mut w = World::start(
        PolicyConfig::default(),
        (1..=4).map(|i| job(i, 10 * i)).collect(),
    );
    for i in 0..7 {
        w.feed(&healthy(T0 + i * TICK));
    }
    assert_eq!(w.toggles().len(), 1);
    // The clock jumps back an hour: within a step interval of the jump the next job comes.
    let back = T0 - 3_600_000;
    for i in 0..8 {
        w.feed(&healthy(back + i * TICK));
    }
    assert_eq!(w.toggles().len(), 2, "{}", w.dump());
    assert_eq!(w.toggles()[1].at, back + 30_000);
}

#[test]
fn polling_twice_without_a_new_sample_decides_nothing_new() {
    let mut p = Policy::new(PolicyConfig::default());
    let mut jobs: Vec<JobView> = (1..=4)
        .map(|i| JobView {
            active: true,
            ..job(i, i)
        })
        .collect();
    jobs[0].pin = Some(Pin::Inactive);
    for i in 0..2 {
        p.handle_sample(&Sample {
            cpu_used: 99.0,
            ..healthy(T0 + i * TICK)
        });
    }
    let first = p.poll_decisions(T0 + TICK, &jobs, &[]);
    assert_eq!(
        first.iter().map(|d| d.action).collect::<Vec<_>>(),
        [
            Action::Deactivate { job_id: 1 },
            Action::Deactivate { job_id: 2 }
        ]
    );
    // Not yet carried out: the pin is decided again (it holds whatever happens), the shed
    // waits for the next sample.
    let again = p.poll_decisions(T0 + TICK + 100, &jobs, &[]);
    assert_eq!(
        again.iter().map(|d| d.action).collect::<Vec<_>>(),
        [Action::Deactivate { job_id: 1 }]
    );
}

/// Regression (issue 18, defect 5): "cpu 97.00% > 97% (critical) for 0 samples" — the level
/// was held critical by hysteresis while the reading, exactly at the threshold, was only
/// strained, and the shed went at the critical pace. A reason now states the reading against
/// the threshold it passed, with the readings that support it, and the pace follows the
/// reading.
#[test]
fn regression_a_level_held_by_hysteresis_is_not_reported_as_a_reading() {
    let mut w = World::start(PolicyConfig::default(), mixed_jobs());
    for i in 0..48 {
        w.feed(&healthy(T0 + i * TICK));
    }
    let s = T0 + 48 * TICK;
    let before = w.log.len();
    for (i, cpu) in [99.0, 99.0, 97.0, 97.0, 97.0, 97.0, 97.0, 97.0]
        .into_iter()
        .enumerate()
    {
        w.feed(&Sample {
            cpu_used: cpu,
            ..healthy(s + i as i64 * TICK)
        });
    }
    let sheds: Vec<_> = w.log[before..].iter().collect();
    assert_eq!(sheds.len(), 2, "{}", w.dump());
    assert_eq!(sheds[0].at, s + TICK);
    assert_eq!(
        sheds[0].reason,
        "cpu 99.0% > 97% (critical) for 2 samples in a row (5.0 s): shed lowest-priority job \
         `thumbnails` (priority 5)"
    );
    // 97.0% is not past 97%: the third sample reads strained while the level is still held
    // critical — it is not a critical shed (the old code shed at once, "for 0 samples");
    // the next shed comes a step later, at the strained pace.
    assert_eq!(sheds[1].at, s + TICK + 30_000);
    assert_eq!(
        sheds[1].reason,
        "cpu 97.0% > 90% (strained) for 8 samples in a row (35 s): shed lowest-priority job \
         `prune` (priority 20)"
    );
    let mut h = Health::default();
    let cfg = PolicyConfig::default();
    for (i, cpu) in [99.0, 99.0, 97.0].into_iter().enumerate() {
        h.handle_sample(
            &Sample {
                cpu_used: cpu,
                ..healthy(T0 + i as i64 * TICK)
            },
            &cfg,
        );
    }
    assert_eq!(h.level(Resource::Cpu), Level::Critical);
    assert_eq!(
        h.evidence(Resource::Cpu, &cfg).unwrap().describe(),
        "cpu 97% (strained: > 90%; level critical)"
    );
}

/// Every resource explains itself with its unit and threshold, rounded.
#[test]
fn each_resource_explains_its_reading_with_unit_and_threshold() {
    let cfg = PolicyConfig {
        network_capacity: 125_000_000,
        ..PolicyConfig::default()
    };
    let mut h = Health::default();
    let bad = |at| Sample {
        cpu_used: 97.004,
        memory_available: 150 * MIB + 12_345,
        swap_used: 3 * GIB,
        swap_total: 4 * GIB,
        disk_available: 8 * MIB,
        disk_total: 256 * MIB,
        net_bytes_per_s: 110_000_000.0,
        psi_io: Some(45.25),
        ..healthy(at)
    };
    h.handle_sample(&bad(T0), &cfg);
    h.handle_sample(&bad(T0 + 1_000), &cfg);
    let text = |r, l| h.explain(r, l, &cfg).unwrap();
    assert_eq!(
        text(Resource::Cpu, Level::Critical),
        "cpu 97.00% > 97% (critical) for 2 samples in a row (1.0 s)"
    );
    assert_eq!(
        text(Resource::Memory, Level::Strained),
        "memory 150 MiB free of the host's 8.0 GiB < 200 MiB (strained) for 2 samples in a row (1.0 s)"
    );
    assert_eq!(
        text(Resource::Swap, Level::Strained),
        "swap 75.0% used > 50% (strained) for 2 samples in a row (1.0 s)"
    );
    assert_eq!(
        text(Resource::Disk, Level::Critical),
        "disk /data: 3.1% free (8 MiB of 256 MiB) < 5% (critical) for 2 samples in a row (1.0 s)"
    );
    assert_eq!(
        text(Resource::Network, Level::Strained),
        "network 88.0% of 125 MB/s > 80% (strained) for 2 samples in a row (1.0 s)"
    );
    assert_eq!(
        text(Resource::PsiIo, Level::Strained),
        "io pressure 45.2% > 40% (strained) for 2 samples in a row (1.0 s)"
    );
    // Against a threshold it does not pass: the other side, and the readings on that side.
    assert_eq!(
        text(Resource::Swap, Level::Critical),
        "swap 75.0% used <= 80% for 2 samples in a row (1.0 s)"
    );
    let e = h.evidence(Resource::Memory, &cfg).unwrap();
    assert_eq!((e.value, e.unit.as_str()), (150.0, "MiB"));
    assert_eq!(
        e.describe(),
        "memory 150 MiB free of the host's 8.0 GiB (strained: < 200 MiB)"
    );
}

/// Issue 31: a node in a cgroup reads its budget there, and every reason and piece of
/// evidence names the bound that applied — the cgroup's limit, not the host's memory.
#[test]
fn a_cgroup_bound_is_named_in_reasons_and_evidence() {
    let cfg = PolicyConfig::default();
    let mut h = Health::default();
    let tight = |at| Sample {
        cpu_used: 98.0,
        cpu_cores: 0.5,
        cpu_bound: Bound::Cgroup,
        cpu_throttled: Some(70.0),
        memory_available: 38 * MIB,
        memory_total: 400 * MIB,
        memory_bound: Bound::Cgroup,
        ..healthy(at)
    };
    h.handle_sample(&tight(T0), &cfg);
    h.handle_sample(&tight(T0 + 1_000), &cfg);
    let text = |r, l| h.explain(r, l, &cfg).unwrap();
    assert_eq!(
        text(Resource::Memory, Level::Critical),
        "memory 38 MiB free of the cgroup's 400 MiB < 100 MiB (critical) for 2 samples in a row (1.0 s)"
    );
    assert_eq!(
        text(Resource::Cpu, Level::Critical),
        "cpu 98.0% of the cgroup's 0.5 cores > 97% (critical) for 2 samples in a row (1.0 s)"
    );
    assert_eq!(
        text(Resource::CpuThrottled, Level::Critical),
        "cpu throttled in 70.0% of the quota's periods (the cgroup's 0.5 cores) > 60% (critical) for 2 samples in a row (1.0 s)"
    );
    // Throttling is a strain signal of its own.
    assert_eq!(h.level(Resource::CpuThrottled), Level::Critical);
    assert_eq!(
        h.evidence(Resource::CpuThrottled, &cfg).unwrap().describe(),
        "cpu_throttled 70% of the quota's periods (the cgroup's 0.5 cores) (critical: > 60%)"
    );
    let e = h.evidence(Resource::Memory, &cfg).unwrap();
    assert_eq!(e.budget.as_deref(), Some("the cgroup's 400 MiB"));
    assert_eq!(
        e.describe(),
        "memory 38 MiB free of the cgroup's 400 MiB (critical: < 100 MiB)"
    );
    // Without a quota there is no throttling reading: ok, and no evidence.
    let mut h = Health::default();
    h.handle_sample(&healthy(T0), &cfg);
    assert_eq!(h.level(Resource::CpuThrottled), Level::Ok);
    assert!(h.evidence(Resource::CpuThrottled, &cfg).is_none());
    assert_eq!(crate::policy::cores(1.0), "1 core");
    assert_eq!(crate::policy::cores(2.0), "2 cores");
    assert_eq!(crate::policy::cores(1.25), "1.25 cores");
}

/// Issue 12, defect 6: a catalog write that failed for a full disk pauses writes at the next
/// poll although the disk's level (behind its hysteresis) is not critical yet, says so once,
/// and resumes once, when a sample taken after the pause reads the disk above critical; a
/// failure while writes are paused already is no news.
#[test]
fn a_write_that_failed_for_a_full_disk_pauses_writes_once_and_resumes_when_space_returns() {
    let mut w = World::start(PolicyConfig::default(), mixed_jobs());
    w.feed(&healthy(T0));
    let full = |at: i64| Sample {
        disk_available: 0,
        ..healthy(at)
    };
    // The disk fills between two samples; a write fails before the next one.
    assert!(w.policy.handle_write_full(T0 + 1_000));
    assert!(!w.policy.handle_write_full(T0 + 2_000), "said once");
    let out = w.feed(&full(T0 + TICK));
    let pauses: Vec<_> = out
        .iter()
        .filter(|d| d.action == Action::PauseWrites)
        .collect();
    assert_eq!(pauses.len(), 1, "{}", w.dump());
    assert!(
        pauses[0].reason.starts_with(
            "the disk is full: a catalog write failed (latest sample: disk /data: 0.0% free (0 MiB of 100.0 GiB) \
             < 5% (critical) for 1 sample): pause writes — hold the job that writes data \
             objects (`ingest`) and the 2 jobs that write only their runs' history (`sync` and \
             `heartbeat`);"
        ) && pauses[0]
            .reason
            .ends_with("until writes resume, and claims no other run meanwhile"),
        "{}",
        pauses[0].reason
    );
    assert!(w.policy.writes_paused());
    // Full for a while (the level turns critical meanwhile), failures go on: nothing new.
    for i in 2..6 {
        assert!(!w.policy.handle_write_full(T0 + i * TICK - 10));
        let out = w.feed(&full(T0 + i * TICK));
        assert!(
            !out.iter()
                .any(|d| matches!(d.action, Action::PauseWrites | Action::ResumeWrites)),
            "{}",
            w.dump()
        );
    }
    // Space returns: resumed once, when the level has left critical.
    for i in 6..12 {
        w.feed(&healthy(T0 + i * TICK));
    }
    let writes: Vec<_> = w
        .log
        .iter()
        .filter(|d| matches!(d.action, Action::PauseWrites | Action::ResumeWrites))
        .map(|d| (d.action, d.at))
        .collect();
    assert_eq!(
        writes,
        [
            (Action::PauseWrites, T0 + TICK),
            (Action::ResumeWrites, T0 + 7 * TICK)
        ],
        "{}",
        w.dump()
    );
    assert!(!w.policy.write_full() && !w.policy.writes_paused());

    // A failure whose disk reads fine at the next samples (space came back by itself): paused
    // at the next poll, resumed at the one after — each said once.
    let at = T0 + 20 * TICK;
    assert!(w.policy.handle_write_full(at - 100));
    let writes = |out: Vec<crate::policy::Decision>| -> Vec<crate::policy::Decision> {
        out.into_iter()
            .filter(|d| matches!(d.action, Action::PauseWrites | Action::ResumeWrites))
            .collect()
    };
    let paused = writes(w.feed(&healthy(at)));
    let resumed = writes(w.feed(&healthy(at + TICK)));
    assert_eq!(
        (paused.len(), resumed.len()),
        (1, 1),
        "{paused:?} {resumed:?}"
    );
    assert_eq!(
        (paused[0].action, resumed[0].action),
        (Action::PauseWrites, Action::ResumeWrites)
    );
    assert!(
        paused[0].reason.starts_with(
            "the disk is full: a catalog write failed (latest sample: disk /data: 50.0% free (50.0 GiB of \
             100.0 GiB) >= 5% for "
        ),
        "{}",
        paused[0].reason
    );
}

/// Issue 18, point 4: while writes are paused the node claims only maintenance runs, so a job
/// that writes no data object is stopped as surely as a writer. It ran 0 times while listed
/// `active`, and the pause did not name it. Now the pause holds and names every job it stops,
/// health activates none of them meanwhile (it would only list them paused), a pin still
/// does — the job waits, said in its reason —, maintenance still comes in, and the resume lets
/// every held job go.
#[test]
fn regression_a_pause_holds_and_names_every_job_it_stops_not_only_writers() {
    let jobs = vec![
        JobView {
            name: "keeper".into(),
            required: true,
            writes_data: true,
            ..job(1, 0)
        },
        JobView {
            name: "reader".into(),
            ..job(2, 50)
        },
        JobView {
            name: "report".into(),
            ..job(3, 40)
        },
        JobView {
            name: "prune".into(),
            maintenance: true,
            writes_data: true,
            ..job(4, 20)
        },
        JobView {
            name: "manual".into(),
            ..job(5, 30)
        },
    ];
    let mut w = World::start(PolicyConfig::default(), jobs);
    w.jobs[1].active = true;
    let full = |at: i64| Sample {
        disk_available: 0,
        ..healthy(at)
    };
    w.feed(&full(T0));
    let out = w.feed(&full(T0 + TICK));
    let pause = out
        .iter()
        .find(|d| d.action == Action::PauseWrites)
        .unwrap_or_else(|| panic!("no pause:\n{}", w.dump()));
    assert_eq!(pause.jobs, [2, 1], "most important first");
    assert!(
        pause.reason.contains(
            ": pause writes — hold the job that writes data objects (`keeper`) and the job \
             that writes only its runs' history (`reader`); maintenance jobs would keep running;"
        ),
        "{}",
        pause.reason
    );
    assert!(w.job(1).held && w.job(2).held);

    // Five minutes full: maintenance is activated by health, nothing the pause would hold is.
    let mut at = T0 + 2 * TICK;
    while at < T0 + 60 * TICK {
        if at == T0 + 30 * TICK {
            w.set_pin(5, Some(Pin::Active));
        }
        w.feed(&full(at));
        at += TICK;
    }
    let activated: Vec<i64> = w
        .log
        .iter()
        .filter(|d| d.cause == Cause::Health)
        .filter_map(|d| match d.action {
            Action::Activate { job_id } => Some(job_id),
            _ => None,
        })
        .collect();
    assert_eq!(activated, [4], "{}", w.dump());
    assert!(!w.job(3).active, "{}", w.dump());
    let pinned = w
        .log
        .iter()
        .find(|d| d.action == Action::Activate { job_id: 5 })
        .unwrap();
    assert_eq!(pinned.cause, Cause::Pin);
    assert!(
        pinned
            .reason
            .ends_with("; writes are paused, so it waits (listed paused) until they resume"),
        "{}",
        pinned.reason
    );
    assert!(w.job(5).active && w.job(5).held);
    assert!(w.job(4).active && !w.job(4).held, "maintenance runs");

    // Space back: every held job runs again, and the standby one comes back after.
    let resumed_from = w.log.len();
    for i in 0..20 {
        w.feed(&healthy(at + i * TICK));
    }
    let resume = w.log[resumed_from..]
        .iter()
        .find(|d| d.action == Action::ResumeWrites)
        .unwrap_or_else(|| panic!("no resume:\n{}", w.dump()));
    assert_eq!(resume.jobs, [2, 5, 1]);
    assert!(
        resume.reason.ends_with(
            ": resume writes — only maintenance runs were claimed for the last 5 min; the 3 \
             jobs held for writes run again (`reader`, `manual` and `keeper`)"
        ),
        "{}",
        resume.reason
    );
    assert!(w.jobs.iter().all(|j| !j.held), "{}", w.dump());
    assert!(w.job(3).active, "{}", w.dump());
}

/// Issue 27, point 2d: a write that failed for a full disk before the policy took in any
/// sample (samples are stepped only after the start-up activation) paused writes saying
/// "(latest sample: disk ok)" at 1.6 % free. The reason now gives the node's own sample at the
/// failure, its figure and level; without any sample, it says there is none.
#[test]
fn regression_a_pause_for_a_failed_write_states_the_disk_reading_not_disk_ok() {
    let mut w = World::start(PolicyConfig::default(), mixed_jobs());
    let nearly_full = Sample {
        disk_available: 16 * GIB / 10,
        ..healthy(T0)
    };
    // The node sampled 1.6 % free, but the policy has not taken that sample in.
    assert!(
        w.policy
            .handle_write_full_after(T0 + 100, Some(&nearly_full))
    );
    let views = w.jobs.clone();
    let out = w.policy.poll_writes(T0 + 100, &views);
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].action, Action::PauseWrites);
    assert!(
        out[0].reason.starts_with(
            "the disk is full: a catalog write failed (latest sample: disk /data: 1.6% free \
             (1.6 GiB of 100.0 GiB), critical below 5%): pause writes"
        ),
        "{}",
        out[0].reason
    );
    assert!(!out[0].reason.contains("disk ok"), "{}", out[0].reason);

    // No sample at all: said so, not "ok".
    let mut w = World::start(PolicyConfig::default(), mixed_jobs());
    assert!(w.policy.handle_write_full(T0));
    let views = w.jobs.clone();
    let out = w.policy.poll_writes(T0, &views);
    assert!(
        out[0]
            .reason
            .starts_with("the disk is full: a catalog write failed (no disk sample read yet)"),
        "{}",
        out[0].reason
    );
}

/// Issue 27, point 2d: with no job active outside maintenance, a pause listed none paused, and
/// its resume said "no job was held" after 25 s in which no run but maintenance's was
/// claimed. The resume now says what the pause held — every other claim — and for how long.
#[test]
fn regression_a_resume_says_only_maintenance_was_claimed_and_for_how_long() {
    let jobs: Vec<JobView> = mixed_jobs()
        .into_iter()
        .map(|mut j| {
            j.required = false;
            j.pin = None;
            j.priority = 0;
            j
        })
        .filter(|j| !j.maintenance)
        .collect();
    let mut w = World::start(PolicyConfig::default(), jobs);
    assert!(w.jobs.iter().all(|j| !j.active), "{}", w.dump());
    assert!(w.policy.handle_write_full(T0 - 10));
    w.feed(&healthy(T0));
    assert!(w.policy.writes_paused(), "{}", w.dump());
    let resumed = (1..10)
        .flat_map(|i| w.feed(&healthy(T0 + 25_000 + (i - 1) * TICK)))
        .find(|d| d.action == Action::ResumeWrites)
        .unwrap_or_else(|| panic!("no resume:\n{}", w.dump()));
    assert!(
        resumed.reason.ends_with(
            ": resume writes — only maintenance runs were claimed for the last 25 s; other runs \
             are claimed again (no job was listed paused)"
        ),
        "{}",
        resumed.reason
    );
    assert!(!resumed.reason.contains("no job was held"));
}

/// Issue 31, point 3: a job that declares its memory is activated only while that fits above
/// the strained threshold in what is free of the node's budget; it waits, said once with the
/// bound, and no less important job jumps ahead of it; it goes once memory frees up.
#[test]
fn a_job_whose_declared_memory_does_not_fit_waits_and_nothing_jumps_ahead() {
    let mut jobs = vec![
        JobView {
            memory_limit: Some(256 * MIB),
            ..job(1, 50)
        },
        JobView {
            memory_limit: Some(10 * MIB),
            ..job(2, 10)
        },
    ];
    jobs[0].name = "big".into();
    let mut w = World::start(PolicyConfig::default(), jobs);
    // 380 MiB free of the cgroup's 400 MiB: 256 MiB would leave 124 MiB, under 200 MiB.
    let tight = |_: usize, s: &mut Sample| {
        s.memory_available = 380 * MIB;
        s.memory_total = 400 * MIB;
        s.memory_bound = Bound::Cgroup;
    };
    w.run(&trace(T0, 30, tight));
    assert!(w.active_ids().is_empty(), "{}", w.dump());
    let holds: Vec<&crate::policy::Decision> = w
        .log
        .iter()
        .filter(|d| matches!(d.action, Action::Hold { job_id: 1 }))
        .collect();
    assert_eq!(holds.len(), 1, "said once: {}", w.dump());
    assert!(
        holds[0].reason.contains(
            "`big` (priority 50) declares 256 MiB of memory and 380 MiB is free of the \
             cgroup's 400 MiB: it would leave 124 MiB, below the strained threshold of 200 MiB"
        ),
        "{}",
        holds[0].reason
    );
    // Memory frees up: the job goes first, then the smaller one.
    w.run(&trace(T0 + 30 * TICK, 30, |_, s| {
        s.memory_available = 2048 * MIB;
        s.memory_total = 4096 * MIB;
    }));
    let order: Vec<i64> = w
        .log
        .iter()
        .filter_map(|d| match d.action {
            Action::Activate { job_id } => Some(job_id),
            _ => None,
        })
        .collect();
    assert_eq!(order, [1, 2], "{}", w.dump());
}

/// What active jobs declare counts as taken even when a sample catches them between runs.
#[test]
fn what_active_jobs_declare_counts_as_taken_between_their_runs() {
    let mut jobs: Vec<JobView> = (1..=3)
        .map(|i| JobView {
            memory_limit: Some(100 * MIB),
            ..job(i, 70 - 10 * i)
        })
        .collect();
    jobs[0].name = "first".into();
    let mut w = World::start(PolicyConfig::default(), jobs);
    // The samples read 390 MiB free whatever runs: every run is caught between two runs.
    w.run(&trace(T0, 40, |_, s| {
        s.memory_available = 390 * MIB;
        s.memory_total = 400 * MIB;
        s.memory_bound = Bound::Cgroup;
    }));
    // 400 − 100 − 100 = 200 free for the third: it would leave 100 MiB.
    assert_eq!(w.active_ids(), [1, 2], "{}", w.dump());
    let hold = w
        .log
        .iter()
        .find(|d| matches!(d.action, Action::Hold { job_id: 3 }))
        .unwrap_or_else(|| panic!("{}", w.dump()));
    assert!(
        hold.reason.contains(
            "declares 100 MiB of memory and 200 MiB is free of the cgroup's 400 MiB (counting \
             the 200 MiB the active jobs declare): it would leave 100 MiB"
        ),
        "{}",
        hold.reason
    );
}
