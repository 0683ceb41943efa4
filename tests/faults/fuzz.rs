//! Scenario 7, fuzzing (issue 12): proptest targets for what the node parses from outside —
//! the job.conf TOML format, the schedule fields (cron and the millix fields), the millix
//! `job.json` importer and the API's JSON bodies. Each target must refuse bad input with an
//! error, never panic. Every run replays the seed corpus (`tests/faults/corpus/<target>/`, with
//! the regressions found so far) and then fuzzes each target for a fixed number of cases:
//! inputs mutated from the corpus (bytes flipped, inserted, deleted, repeated, tokens of the
//! format spliced in) and inputs built from the format's tokens. The RNG seed is fixed, so a
//! run is reproducible; `JOBVISOR_FUZZ_SEED=<n>` explores another, `JOBVISOR_SOAK=1` runs 20
//! times the cases. A failure prints the shrunk input: add it to the corpus with the fix.

use std::path::{Path, PathBuf};
use std::time::Instant;

use jobvisor::http::bodies::{
    BatchBody, JobFields, ObjectFields, PinBody, ProcessorFields, TriggerBody,
};
use jobvisor::http::extract::parse_json;
use jobvisor::jobconf::{self, millix, toml_format};
use jobvisor::schedule::{JobHistory, JobPlanner, PlanPolicy, RunDate, Schedule, ScheduleSpec};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

use crate::{figures, serial, soak};

/// Fuzz cases per target (each a mutated seed or a token soup).
const CASES: u32 = 400;

/// Instants the schedules are asked about: 1900 to 2200, and a few edges.
const T_MIN: i64 = -2_208_988_800_000;
const T_MAX: i64 = 7_258_118_400_000;

fn corpus(target: &str) -> Vec<(PathBuf, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/faults/corpus")
        .join(target);
    let mut files: Vec<(PathBuf, String)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .map(|p| {
            let text = String::from_utf8_lossy(&std::fs::read(&p).unwrap()).into_owned();
            (p, text)
        })
        .collect();
    files.sort();
    files
}

fn seed() -> u64 {
    std::env::var("JOBVISOR_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x00f0_22ed)
}

fn runner(cases: u32, salt: u64) -> TestRunner {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed().to_le_bytes());
    bytes[8..16].copy_from_slice(&salt.to_le_bytes());
    let cases = if soak() { cases * 20 } else { cases };
    TestRunner::new_with_rng(
        Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        },
        TestRng::from_seed(RngAlgorithm::ChaCha, &bytes),
    )
}

/// One edit of a text.
#[derive(Debug, Clone)]
enum Edit {
    Flip(usize, u8),
    Insert(usize, String),
    Delete(usize, usize),
    Repeat(usize, usize),
    Truncate(usize),
}

fn apply(text: &str, edits: &[Edit]) -> String {
    let mut b = text.as_bytes().to_vec();
    for e in edits {
        let at = |i: usize, len: usize| if len == 0 { 0 } else { i % (len + 1) };
        match e {
            Edit::Flip(i, x) if !b.is_empty() => {
                let i = i % b.len();
                b[i] ^= x | 1;
            }
            Edit::Flip(..) => {}
            Edit::Insert(i, s) => {
                let i = at(*i, b.len());
                b.splice(i..i, s.bytes());
            }
            Edit::Delete(i, n) => {
                let i = at(*i, b.len());
                let end = (i + n % 64).min(b.len());
                b.drain(i..end);
            }
            Edit::Repeat(i, n) => {
                let i = at(*i, b.len());
                let end = (i + n % 256).min(b.len());
                let chunk = b[i..end].to_vec();
                b.splice(end..end, chunk);
            }
            Edit::Truncate(i) => {
                let i = at(*i, b.len());
                b.truncate(i);
            }
        }
    }
    // The parsers take text: invalid UTF-8 is the caller's refusal, not theirs.
    String::from_utf8_lossy(&b).into_owned()
}

fn edits(tokens: &'static [&'static str]) -> impl Strategy<Value = Vec<Edit>> {
    let token = prop_oneof![
        3 => proptest::sample::select(tokens).prop_map(String::from),
        1 => ".{0,8}",
    ];
    proptest::collection::vec(
        prop_oneof![
            (any::<usize>(), any::<u8>()).prop_map(|(i, x)| Edit::Flip(i, x)),
            (any::<usize>(), token).prop_map(|(i, s)| Edit::Insert(i, s)),
            (any::<usize>(), any::<usize>()).prop_map(|(i, n)| Edit::Delete(i, n)),
            (any::<usize>(), any::<usize>()).prop_map(|(i, n)| Edit::Repeat(i, n)),
            any::<usize>().prop_map(Edit::Truncate),
        ],
        1..6,
    )
}

/// Seeds mutated, token soups, and for the JSON formats well-formed documents of their keys.
fn inputs(
    seeds: Vec<String>,
    tokens: &'static [&'static str],
    json: bool,
) -> impl Strategy<Value = String> {
    prop_oneof![
        3 => (proptest::sample::select(seeds), edits(tokens)).prop_map(|(s, e)| apply(&s, &e)),
        1 => proptest::collection::vec(proptest::sample::select(tokens), 0..40)
            .prop_map(|t| t.concat()),
        if json { 3 } else { 0 } => json_docs(tokens),
    ]
}

/// Runs `check` on every corpus file of `target`, then on `CASES` fuzzed inputs; returns the
/// figure line. A panic fails the scenario with the (shrunk) input.
fn fuzz(
    target: &str,
    salt: u64,
    tokens: &'static [&'static str],
    check: impl Fn(&str) -> bool,
) -> String {
    let started = Instant::now();
    let files = corpus(target);
    for (path, text) in &files {
        if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            check(text);
        })) {
            std::panic::resume_unwind(Box::new(format!(
                "{target}: corpus file {} panics: {:?}",
                path.display(),
                panic
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| panic.downcast_ref::<&str>().copied())
            )));
        }
    }
    let seeds: Vec<String> = files.into_iter().map(|(_, t)| t).collect();
    let mut runner = runner(CASES, salt);
    let cases = runner.config().cases;
    let accepted = std::cell::Cell::new(0u32);
    let json = matches!(target, "millix" | "api");
    let result = runner.run(&inputs(seeds.clone(), tokens, json), |input| {
        if check(&input) {
            accepted.set(accepted.get() + 1);
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{target}: a fuzzed input panics (seed {}): {e}", seed());
    }
    format!(
        "{target}: {} corpus files replayed, {cases} fuzzed inputs ({} accepted, the rest \
         refused), 0 panics, {:.1} s",
        seeds.len(),
        accepted.get(),
        started.elapsed().as_secs_f64()
    )
}

#[rustfmt::skip]
const TOML_TOKENS: &[&str] = &[
    "\n", " ", "=", "\"", "'", "[", "]", "{", "}", ",", ".", "#", "[[job.x]]", "[job.a]",
    "[processor.p]", "[object.o]", "[group.g]", "[job.a.payload]", "version = 1\n",
    "type = \"function\"\n", "type = \"sql\"\n", "type = \"command\"\n", "type = \"url\"\n",
    "processor = \"main\"\n", "cron = \"", "* * * * * *", "run_at = \"", "25:61",
    "run_date = \"", "#last_day_of_month#", "run_every = ", "run_on_the = ", "run_always = true",
    "run_delay = ", "timezone = \"", "Europe/Berlin", "misfire_policy = \"all\"",
    "max_catchup = ", "overlap_policy = \"allow\"", "max_overlap = ", "priority = ",
    "timeout = ", "objects = [\"o\"]", "payload = { function = \"debug.noop\" }",
    "payload = { argv = [] }", "payload = { object = \"o\", sql = \"SELECT 1\" }",
    "instances = ", "max_instances = ", "stretch_max = ", "conn_string = \"", "catalog",
    "time_to_live = ", "-1", "0", "1", "59", "60", "9223372036854775807",
    "-9223372036854775808", "99999999999999999999", "1e309", "nan", "inf", "true", "\"\"",
    "1979-05-27T07:32:00Z", "\u{0}", "\u{feff}", "é", "\\u0000", "\"\"\"", "'''",
];

#[rustfmt::skip]
const CRON_FIELDS: &[&str] = &[
    "*", "?", "0", "1", "5", "7", "12", "23", "24", "29", "30", "31", "32", "59", "60", "99",
    "4294967296", "-1", "*/0", "*/1", "*/7", "*/61", "0-59", "59-0", "1-5", "5-1", "1,2,3", ",",
    "L", "LW", "1W", "31W", "W", "5L", "5#3", "5#6", "0#1", "MON", "mon-fri", "SUN-SAT", "JAN",
    "DEC", "FOO", "2099", "1970", "9999", "1-", "-", "/", "#",
];

#[rustfmt::skip]
const SCHEDULE_TOKENS: &[&str] = &[
    "{", "}", "\"", ":", ",", " ", "\"cron\": \"", "\"run_at\": \"", "\"run_date\": \"",
    "\"timezone\": \"", "\"run_every\": ", "\"run_on_the\": ", "\"run_always\": true",
    "\"run_delay\": ", "* * * * * *", "@yearly", "@reboot", "@hourly", "L", "W", "#", "?",
    "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Pacific/Chatham", "UTC",
    "Etc/GMT+12", "Nope/Zone", "02:30", "23:59:60", "24:00", "-1", "0", "31", "32", "60",
    "#monday#", "#last_day_of_month#", "#first_day_of_year#", "#last_day_of_year#", "#x#",
    "9223372036854775807", "-9223372036854775808",
];

#[rustfmt::skip]
const MILLIX_TOKENS: &[&str] = &[
    "{", "}", "[", "]", "\"", ":", ",", "null", "true", "false", "0", "1", "-1", "1.5", "1e400",
    "9223372036854775807", "\"version\"", "\"processor_list\"", "\"object_list\"",
    "\"job_list\"", "\"instances\"", "\"port\"", "\"user\"", "\"password\"", "\"object_type\"",
    "\"time_to_live\"", "\"allow_prune\"", "\"type\"", "\"function\"", "\"processor\"",
    "\"priority\"", "\"run_always\"", "\"run_every\"", "\"run_on_the\"", "\"run_at\"",
    "\"run_date\"", "\"run_delay\"", "\"timeout\"", "\"object\"", "\"group\"", "\"payload\"",
    "\"status\"", "\"table\"", "\"localhost\"", "\"#monday#\"", "\"25:99\"", "\"\"", "\\u0000",
];

#[rustfmt::skip]
const API_TOKENS: &[&str] = &[
    "{", "}", "[", "]", "\"", ":", ",", "null", "true", "false", "0", "-1", "1e400", "1.5",
    "9223372036854775807", "-9223372036854775808", "\"type\"", "\"function\"", "\"sql\"",
    "\"command\"", "\"processor\"", "\"main\"", "\"group\"", "\"payload\"", "\"priority\"",
    "\"timeout_ms\"", "\"cron\"", "\"* * * * * *\"", "\"run_at\"", "\"run_date\"",
    "\"run_every\"", "\"run_on_the\"", "\"timezone\"", "\"misfire_policy\"", "\"overlap_policy\"",
    "\"max_overlap\"", "\"objects\"", "\"stretch_max\"", "\"clear_schedule\"", "\"params\"",
    "\"runs\"", "\"pin\"", "\"active\"", "\"instances\"", "\"max_instances\"", "\"port\"",
    "\"conn_string\"", "\"time_to_live_s\"", "\"name\"", "\"\\u0000\"", "\"é\"",
];

/// A job.conf: parsed; when it parses, validated, rendered and parsed again. Whether it was
/// a valid catalog.
fn check_toml(text: &str) -> bool {
    let Ok(file) = toml_format::parse(text) else {
        return false;
    };
    {
        let problems = jobconf::validate(&file);
        if let Ok(rendered) = toml_format::render(&file) {
            let again = toml_format::parse(&rendered);
            assert!(
                again.is_ok(),
                "a rendered catalog does not parse: {again:?}\n{rendered}"
            );
        }
        for job in file.jobs.values() {
            exercise_schedule(&job.schedule);
        }
        if problems.is_empty() {
            for job in file.jobs.values() {
                plan(job);
            }
        }
        problems.is_empty()
    }
}

/// A schedule: validated, parsed, asked for slots around instants over three centuries.
/// Whether it parsed.
fn exercise_schedule(spec: &ScheduleSpec) -> bool {
    let _ = spec.validate();
    if let Some(d) = &spec.run_date {
        let _ = RunDate::parse(d);
    }
    let Ok(schedule) = Schedule::parse(spec, chrono_tz::UTC) else {
        return false;
    };
    let _ = jobvisor::ops::jobs::schedule_words(spec);
    for t in [
        T_MIN,
        0,
        1_700_000_000_000,
        1_774_746_000_000, // 2026-03-29 01:00 UTC: a DST change in Europe
        4_102_444_799_000, // 2099-12-31 23:59:59
        T_MAX,
    ] {
        if let Some(n) = schedule.next_slot_after(t) {
            assert!(n > t, "next slot {n} not after {t} for {spec:?}");
        }
        if let Some(p) = schedule.prev_slot_at_or_before(t) {
            assert!(p <= t, "previous slot {p} after {t} for {spec:?}");
        }
        let _ = schedule.next_slots_after(t, 3);
    }
    true
}

/// A valid job's planner, built as the scheduler builds it, polled through a day with runs
/// that start and end, a clock step back and forward, and its period stretched as far as the
/// job allows: the arithmetic of extreme but valid settings must not overflow.
fn plan(job: &jobconf::JobDef) {
    let Ok(schedule) = Schedule::parse(&job.schedule, chrono_tz::UTC) else {
        return;
    };
    let policy = PlanPolicy::of_job(
        job.misfire_policy,
        job.misfire_window,
        job.max_catchup,
        job.overlap_policy,
        job.max_overlap,
    );
    let t0 = 1_774_746_000_000;
    let mut p = JobPlanner::restore(
        schedule,
        policy,
        JobHistory {
            since: Some(t0 - 86_400_000),
            ..JobHistory::default()
        },
    );
    p.set_stretch(job.stretch_max.clamp(1, 64) as u32);
    let mut now = t0;
    for step in 0..48 {
        now += match step {
            20 => -7_200_000,
            30 => 90_000_000,
            _ => 1_800_000,
        };
        let _ = p.next_wake(now);
        for d in p.poll_due(now) {
            if matches!(d, jobvisor::schedule::Decision::Fire { .. }) {
                p.handle_run_started(now);
                p.handle_run_finished(now + 1_000);
            }
        }
    }
}

/// A line of the schedule corpus: a JSON object of schedule fields. Whether one parsed.
fn check_schedule_json(text: &str) -> bool {
    let mut any = false;
    for line in text.lines() {
        let Ok(serde_json::Value::Object(m)) = serde_json::from_str::<serde_json::Value>(line)
        else {
            continue;
        };
        let s = |k: &str| m.get(k).and_then(|v| v.as_str()).map(String::from);
        let i = |k: &str| m.get(k).and_then(|v| v.as_i64());
        any |= exercise_schedule(&ScheduleSpec {
            run_always: m
                .get("run_always")
                .and_then(|v| v.as_bool())
                .unwrap_or(false),
            run_delay: i("run_delay").unwrap_or(0),
            run_every: i("run_every"),
            run_on_the: i("run_on_the"),
            run_at: s("run_at"),
            run_date: s("run_date"),
            cron: s("cron"),
            timezone: s("timezone"),
        });
    }
    any
}

/// Cron expressions built field by field from the grammar's pieces: mostly well-formed pieces
/// with numbers anywhere in and around each field's range, sometimes odd ones.
fn crons() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        12 => Just("*".to_string()),
        6 => (1u32..13).prop_map(|n| n.to_string()),
        1 => (0u32..64).prop_map(|n| n.to_string()),
        2 => (1u32..7, 1u32..13).prop_map(|(a, b)| format!("{a}-{b}")),
        2 => (1u32..70).prop_map(|n| format!("*/{n}")),
        1 => (1u32..13, 1u32..70).prop_map(|(a, n)| format!("{a}/{n}")),
        1 => proptest::sample::select(CRON_FIELDS).prop_map(String::from),
    ];
    let field = prop_oneof![
        4 => piece.clone(),
        1 => proptest::collection::vec(piece, 2..4).prop_map(|parts| parts.join(",")),
    ];
    proptest::collection::vec(field, 5..7).prop_map(|f| f.join(" "))
}

/// JSON documents whose keys are the format's own (from `tokens`, the quoted ones), nested
/// a few levels, with values of every type.
fn json_docs(tokens: &'static [&'static str]) -> impl Strategy<Value = String> {
    let keys: Vec<String> = tokens
        .iter()
        .filter(|t| t.len() > 2 && t.starts_with('"') && t.ends_with('"'))
        .map(|t| t.trim_matches('"').to_string())
        .collect();
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        (-100i64..100).prop_map(serde_json::Value::from),
        any::<f64>().prop_map(serde_json::Value::from),
        proptest::sample::select(keys.clone()).prop_map(serde_json::Value::from),
        ".{0,12}".prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(4, 48, 8, move |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::from),
            proptest::collection::btree_map(proptest::sample::select(keys.clone()), inner, 0..8)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
    .prop_map(|v| v.to_string())
}

fn check_millix(text: &str) -> bool {
    let Ok(import) = millix::parse(text) else {
        return false;
    };
    let _ = toml_format::render(&import.catalog);
    jobconf::validate(&import.catalog).is_empty()
}

/// An API body, as the extractor reads it, for each body type; a job's patch applied to a
/// catalog job and the catalog validated, as `jobs edit` does.
fn check_api(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut any = false;
    if let Ok(fields) = parse_json::<JobFields>(bytes)
        && let Ok(patch) = fields.patch()
    {
        any = true;
        let mut file = toml_format::parse(jobconf::DEFAULT_JOB_CONF).unwrap();
        let job = file.jobs.get_mut("device_stats").unwrap();
        patch.apply(job);
        let job = job.clone();
        exercise_schedule(&job.schedule);
        if jobconf::validate(&file).is_empty() {
            plan(&job);
        }
        let _ = toml_format::render(&file);
    }
    if let Ok(p) = parse_json::<ProcessorFields>(bytes) {
        let _ = p.patch();
        any = true;
    }
    if let Ok(o) = parse_json::<ObjectFields>(bytes) {
        any |= o.patch().is_ok();
    }
    any |= parse_json::<TriggerBody>(bytes).is_ok();
    any |= parse_json::<BatchBody>(bytes).is_ok();
    any | parse_json::<PinBody>(bytes).is_ok()
}

#[test]
fn parsers_refuse_arbitrary_and_mutated_input_without_panicking() {
    let _one = serial();
    let started = Instant::now();
    let mut lines = vec![format!(
        "proptest, seed {:#x} (JOBVISOR_FUZZ_SEED), {} cases per target",
        seed(),
        if soak() { CASES * 20 } else { CASES }
    )];
    lines.push(fuzz("jobconf", 1, TOML_TOKENS, check_toml));
    lines.push(fuzz("schedule", 2, SCHEDULE_TOKENS, check_schedule_json));
    // Cron expressions from the grammar, in zones with odd offsets and DST rules.
    let cron_started = Instant::now();
    const ZONES: &[&str] = &[
        "UTC",
        "Europe/Berlin",
        "America/New_York",
        "Australia/Lord_Howe",
        "Pacific/Chatham",
        "Asia/Kathmandu",
    ];
    let parsed = std::cell::Cell::new(0u32);
    let result = runner(CASES, 3).run(&(crons(), proptest::sample::select(ZONES)), |(cron, tz)| {
        let ok = exercise_schedule(&ScheduleSpec {
            cron: Some(cron),
            timezone: Some(tz.to_string()),
            ..ScheduleSpec::default()
        });
        parsed.set(parsed.get() + u32::from(ok));
        Ok(())
    });
    if let Err(e) = result {
        panic!("cron: a generated expression panics (seed {}): {e}", seed());
    }
    lines.push(format!(
        "cron: {} expressions from the grammar ({} valid), 0 panics, {:.1} s",
        if soak() { CASES * 20 } else { CASES },
        parsed.get(),
        cron_started.elapsed().as_secs_f64()
    ));
    lines.push(fuzz("millix", 4, MILLIX_TOKENS, check_millix));
    lines.push(fuzz("api", 5, API_TOKENS, check_api));
    lines.push(format!(
        "all targets in {:.1} s",
        started.elapsed().as_secs_f64()
    ));
    figures("scenario 7 fuzzing", &lines);
}

/// Regression (found by this scenario's corpus): a valid job.conf whose numbers are at their
/// limits — `run_delay`, `timeout`, `misfire_window` of i64::MAX ms — made the planner's delay
/// and the claim's lease overflow (a panic in a debug build, a wrapped time in a release one).
/// A real node runs both jobs and logs no panic.
#[test]
fn jobs_whose_settings_are_at_their_limits_run_on_a_real_node() {
    let _one = serial();
    let ws = crate::support::Workspace::new();
    let (path, _) = corpus("jobconf")
        .into_iter()
        .find(|(p, _)| p.ends_with("extremes.conf"))
        .expect("corpus/jobconf/extremes.conf");
    ws.ok(&["import", &path.display().to_string()]);
    ws.disable_seeded_jobs();
    // Every job in the start-up minimum, the one of priority i64::MIN included.
    ws.set_node_env("JOBVISOR__POLICY__PRIORITY_FLOOR", &i64::MIN.to_string());
    let node = ws.start_node("n1");
    let db = ws.db();
    crate::support::wait_for(20.0, "both jobs to run", || {
        let ok = |job: &str| crate::statuses(&db, job).get("succeeded").copied() >= Some(1);
        (ok("always_max") && ok("window_max")).then_some(())
    });
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert_eq!(node.stop(), Some(0));
    let log = std::fs::read_to_string(ws.log_path("n1")).unwrap();
    assert!(!log.contains("panicked"), "{log}");
    let always = crate::statuses(&db, "always_max");
    assert_eq!(
        always.get("succeeded"),
        Some(&1),
        "run_always with an i64::MAX delay runs once: {always:?}"
    );
}
