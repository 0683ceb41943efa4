//! CPU and memory loads: the lowest-priority job goes first, one per sample while critical,
//! the required job never; when the load ends the jobs come back most important first, as
//! soon as the node has read health for two samples and the cooldown has passed.

use crate::pressure::*;

const CATALOG: &str = r#"
[processor.main]
instances = 2

[job.keeper]
type = "function"
processor = "main"
required = true
priority = 10
cron = "* * * * * *"
payload = { function = "debug.noop" }

[job.c30]
type = "function"
processor = "main"
priority = 30
cron = "* * * * * *"
payload = { function = "debug.noop" }

[job.b20]
type = "function"
processor = "main"
priority = 20
cron = "* * * * * *"
payload = { function = "debug.noop" }

[job.a10]
type = "function"
processor = "main"
priority = 10
cron = "* * * * * *"
payload = { function = "debug.noop" }
"#;

const JOBS: [&str; 3] = ["c30", "b20", "a10"];

/// The flap budget's window in these two tests: 10 s, so that switches the shared machine's own
/// load caused before the test leave it soon (the flapping test keeps the 60 s default).
const TOGGLE_WINDOW_MS: i64 = 10_000;

/// What a load test checks, given the node's decisions and samples.
struct Load {
    /// When the load began and ended, epoch ms.
    start: i64,
    end: i64,
    /// The resource's stat and its ok predicate.
    stat: &'static str,
    ok: Box<dyn Fn(f64) -> bool>,
    /// A word every shed reason names.
    word: &'static str,
    /// How long after its start the load may take to be shed at the latest (a CPU load
    /// bites at once; memory is taken page by page).
    shed_within_ms: i64,
}

fn check(t: &Tuned, load: &Load) -> Vec<String> {
    let rows = t.decisions();
    let mut figures = Vec::new();
    // Shed: lowest first, the first within 3 samples of the start (the load's first second,
    // then two samples to enter the level), one per sample while critical.
    let sheds: Vec<&Decision> = rows
        .iter()
        .filter(|d| d.action == "deactivate" && d.at >= load.start && d.at <= load.end)
        .collect();
    let order: Vec<&str> = sheds.iter().map(|d| d.subject.as_str()).collect();
    assert_eq!(
        order,
        ["a10", "b20", "c30"],
        "shed order:\n{}",
        t.print_log("failure")
    );
    let first = sheds[0].at - load.start;
    assert!(
        first <= load.shed_within_ms,
        "first shed {first} ms after the load began"
    );
    // The level is entered at the second reading past the threshold; the shed is decided on
    // that sample.
    let samples = t.samples(load.stat);
    let entered = back_to_ok(&samples, load.start, 2, |v| !(load.ok)(v)).expect("a breach");
    assert!(
        sheds[0].at - entered <= SAMPLE_MS / 2,
        "first shed {} ms after the second reading past the threshold",
        sheds[0].at - entered
    );
    figures.push(format!(
        "second reading past the threshold at +{} ms; first shed at +{first} ms; all three \
         shed by +{} ms",
        entered - load.start,
        sheds[2].at - load.start
    ));
    for d in &sheds {
        assert_eq!(d.cause, "health");
        assert!(d.reason.contains(load.word), "{}", d.reason);
        assert!(!d.reason.contains(" 0 sample"), "{}", d.reason);
        let e = &d.evidence[0];
        assert!(e["unit"].is_string() && e["strained"].is_number(), "{e}");
    }
    assert!(
        !rows
            .iter()
            .any(|d| d.subject == "keeper" && d.action == "deactivate"),
        "a required job was shed"
    );
    // Restore: most important first; the first once the node read ok twice in a row and the
    // cooldown after the last shed has passed (plus one sample of timer slack).
    let restores: Vec<&Decision> = rows
        .iter()
        .filter(|d| d.action == "activate" && d.at >= load.end)
        .collect();
    let order: Vec<&str> = restores.iter().map(|d| d.subject.as_str()).collect();
    assert_eq!(
        order,
        ["c30", "b20", "a10"],
        "restore order:\n{}",
        t.print_log("failure")
    );
    let ok_at = back_to_ok(&t.samples(load.stat), load.end, 2, &load.ok).expect("ok again");
    let last_shed = rows
        .iter()
        .filter(|d| d.action == "deactivate")
        .map(|d| d.at)
        .max()
        .unwrap();
    let due = ok_at.max(last_shed + COOLDOWN_MS);
    let late = restores[0].at - due;
    assert!(
        late <= SAMPLE_MS + 500,
        "first restore {late} ms after it was due (ok again at +{} ms):\n{}",
        ok_at - load.end,
        t.print_log("failure")
    );
    figures.push(format!(
        "load ended; node read ok twice at +{} ms; first restore at +{} ms ({} ms after \
         ok and cooldown allowed it); all restored by +{} ms",
        ok_at - load.end,
        restores[0].at - load.end,
        late,
        restores[2].at - load.end
    ));
    figures
}

#[test]
fn a_cpu_load_sheds_lowest_first_and_restores_most_important_first() {
    let _one = one_at_a_time();
    require_stress_ng();
    let window = TOGGLE_WINDOW_MS.to_string();
    // PSI off (thresholds at 100): this test is about the CPU reading.
    let mut t = Tuned::prepare(
        "cpu",
        CATALOG,
        &[
            ("JOBVISOR__POLICY__PSI_STRAINED", "100"),
            ("JOBVISOR__POLICY__PSI_CRITICAL", "100"),
            ("JOBVISOR__POLICY__TOGGLE_WINDOW", &window),
        ],
    );
    t.start(&JOBS);
    t.wait_until_quiet(
        "device.cpu_used",
        3,
        TOGGLE_WINDOW_MS,
        QUIET_WITHIN_S,
        |v| v < 80.0,
    );
    let start = now_ms();
    let stress = Stress::start(&["--cpu", "2", "--timeout", "20s"]);
    t.wait_for(20.0, "c30 to be shed", || {
        first(&t.decisions(), "deactivate", "c30", start).map(|_| ())
    });
    stress.wait();
    let end = now_ms();
    t.wait_for(
        120.0,
        "a10 to be restored (the machine stayed busy?)",
        || first(&t.decisions(), "activate", "a10", end).map(|_| ()),
    );
    t.stop();
    let measured = check(
        &t,
        &Load {
            start,
            end,
            stat: "device.cpu_used",
            ok: Box::new(|v| v <= 90.0),
            word: "cpu ",
            // The first second of the load, then two samples to enter the level.
            shed_within_ms: 3 * SAMPLE_MS + 500,
        },
    );
    t.print_log("cpu_load");
    figures(
        "cpu_load",
        &format!("figures (cpu): {}", measured.join("; ")),
    );
}

#[test]
fn a_memory_load_sheds_lowest_first_and_restores_most_important_first() {
    let _one = one_at_a_time();
    require_stress_ng();
    let window = TOGGLE_WINDOW_MS.to_string();
    // Thresholds below the memory available now, so that a 4 GiB load crosses both while
    // leaving the machine plenty; CPU and PSI off: this test is about memory.
    let available = mem_available();
    const GIB: u64 = 1 << 30;
    assert!(
        available > 6 * GIB,
        "needs 6 GiB available, has {available}"
    );
    let strained = available - 2 * GIB;
    let critical = available - 3 * GIB;
    let (s, c) = (strained.to_string(), critical.to_string());
    let mut t = Tuned::prepare(
        "memory",
        CATALOG,
        &[
            ("JOBVISOR__POLICY__MEMORY_STRAINED", &s),
            ("JOBVISOR__POLICY__MEMORY_CRITICAL", &c),
            ("JOBVISOR__POLICY__CPU_STRAINED", "100"),
            ("JOBVISOR__POLICY__CPU_CRITICAL", "100"),
            ("JOBVISOR__POLICY__PSI_STRAINED", "100"),
            ("JOBVISOR__POLICY__PSI_CRITICAL", "100"),
            ("JOBVISOR__POLICY__TOGGLE_WINDOW", &window),
        ],
    );
    t.start(&JOBS);
    let quiet_above = (strained + GIB / 2) as f64;
    t.wait_until_quiet(
        "device.memory_available",
        3,
        TOGGLE_WINDOW_MS,
        QUIET_WITHIN_S,
        |v| v > quiet_above,
    );
    let start = now_ms();
    let stress = Stress::start(&[
        "--vm",
        "1",
        "--vm-bytes",
        "4g",
        "--vm-keep",
        "--timeout",
        "15s",
    ]);
    t.wait_for(20.0, "c30 to be shed", || {
        first(&t.decisions(), "deactivate", "c30", start).map(|_| ())
    });
    stress.wait();
    let end = now_ms();
    t.wait_for(
        120.0,
        "a10 to be restored (the machine stayed busy?)",
        || first(&t.decisions(), "activate", "a10", end).map(|_| ()),
    );
    t.stop();
    let ok_above = strained as f64;
    let measured = check(
        &t,
        &Load {
            start,
            end,
            stat: "device.memory_available",
            ok: Box::new(move |v| v >= ok_above),
            word: "memory ",
            shed_within_ms: 15_000,
        },
    );
    t.print_log("memory_load");
    figures(
        "memory_load",
        &format!("figures (memory): {}", measured.join("; ")),
    );
}

fn mem_available() -> u64 {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap();
    let kb: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}
