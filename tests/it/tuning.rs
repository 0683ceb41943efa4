//! Self-tuning as node state and history (issue 18, points 8–10), end to end on real nodes:
//! processor instances the policy adds persist across a restart and show in `processors list`
//! and the stats; a job's `stretch_max` round-trips through job.conf; the spec's object
//! statistics come from the object's writer and its prunes, and the elapsed time per schedule
//! kind is summed per minute (an engine whose injected clock steps a minute ahead), both read
//! back as time series. On both backends.

use serde_json::Value as Json;

use crate::support::{Workspace, wait_for};

crate::on_both_backends!(
    processor_instances_added_by_the_policy_persist_across_a_restart,
    object_statistics_come_from_the_writer_and_the_prunes,
    stretch_max_round_trips_through_job_conf_and_is_refused_on_on_demand_jobs,
    a_strained_node_stretches_a_job_and_a_healthy_one_brings_its_period_back,
    elapsed_time_per_schedule_kind_is_summed_per_minute_and_shows_in_stats,
);

/// A decision's time (RFC 3339 in JSON) in epoch ms.
fn at_ms(d: &Json) -> i64 {
    d["at"]
        .as_str()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.timestamp_millis())
        .unwrap()
}

/// The pacing of these tests, with health thresholds the shared machine cannot cross (they
/// are about what the node records, not about load).
fn tuned(ws: &Workspace) {
    for (k, v) in [
        ("JOBVISOR__HEALTH__INTERVAL", "1000"),
        ("JOBVISOR__POLICY__STEP_INTERVAL", "1000"),
        ("JOBVISOR__POLICY__COOLDOWN", "0"),
        ("JOBVISOR__POLICY__CPU_STRAINED", "100"),
        ("JOBVISOR__POLICY__CPU_CRITICAL", "100"),
        ("JOBVISOR__POLICY__PSI_STRAINED", "100"),
        ("JOBVISOR__POLICY__PSI_CRITICAL", "100"),
        ("JOBVISOR__POLICY__MEMORY_STRAINED", "0"),
        ("JOBVISOR__POLICY__MEMORY_CRITICAL", "0"),
        ("JOBVISOR__POLICY__DISK_STRAINED", "0"),
        ("JOBVISOR__POLICY__DISK_CRITICAL", "0"),
    ] {
        ws.set_node_env(k, v);
    }
}

fn processor_instances_added_by_the_policy_persist_across_a_restart(ws: Workspace) {
    tuned(&ws);
    let file = ws.write(
        "jobs.conf",
        r#"
[processor.busy]
instances = 1
max_instances = 3

# Three jobs that each run again as soon as they end: work for three instances.
[job.grind1]
type = "function"
processor = "busy"
run_always = true
payload = { function = "debug.sleep", ms = 400 }

[job.grind2]
type = "function"
processor = "busy"
run_always = true
payload = { function = "debug.sleep", ms = 400 }

[job.grind3]
type = "function"
processor = "busy"
run_always = true
payload = { function = "debug.sleep", ms = 400 }
"#,
    );
    ws.ok(&["import", &file.display().to_string()]);
    ws.disable_seeded_jobs();
    let node = ws.start_node("tuned");
    let processors =
        || -> Json { serde_json::from_str(&ws.ok(&["processors", "list", "--json"])).unwrap() };
    let running = wait_for(30.0, "the policy to run 3 instances", || {
        let list = processors();
        let busy = list
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "busy")
            .cloned()
            .unwrap();
        (busy["running"][0]["instances"] == 3).then_some(busy)
    });
    assert_eq!(running["running"][0]["node"], "tuned");
    assert!(
        running["running"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("add an instance (2 -> 3, max 3)"),
        "{running}"
    );
    let table = ws.ok(&["processors", "list"]);
    assert!(table.contains("tuned: 3"), "{table}");
    let decisions = ws.ok(&["decisions", "--json", "--node", "tuned"]);
    assert_eq!(
        decisions.matches("\"add_instance\"").count(),
        2,
        "{decisions}"
    );
    wait_for(5.0, "the instances to be recorded", || {
        let series = ws.ok(&[
            "stats",
            "job_processor.instances",
            "--subject",
            "busy",
            "--json",
            "--node",
            "tuned",
            "--limit",
            "1",
        ]);
        series.contains("\"value\": 3.0").then_some(())
    });
    assert_eq!(node.stop(), Some(0));

    // A restart starts the processor with the instances the policy had chosen.
    let node = ws.start_node("tuned");
    let busy = wait_for(10.0, "the processor to start", || {
        let log = std::fs::read_to_string(ws.path("tuned.log")).unwrap_or_default();
        log.lines()
            .find(|l| l.contains("processor started") && l.contains("processor=busy"))
            .map(str::to_string)
    });
    assert_eq!(node.stop(), Some(0));
    assert!(busy.contains("instances=3"), "{busy}");
}

/// The object is a SQLite file of its own in the workspace, whichever backend the catalog is on.
fn object_statistics_come_from_the_writer_and_the_prunes(ws: Workspace) {
    tuned(&ws);
    let events = ws.path("events.db");
    crate::support::open_db(&events)
        .execute_batch("CREATE TABLE events (id INTEGER PRIMARY KEY, at INTEGER NOT NULL)")
        .unwrap();
    let file = ws.write(
        "jobs.conf",
        &format!(
            r#"
[processor.main]
instances = 2

[object.events]
conn_string = "{}"
key_field = "id"
name_field = "at"
time_to_live = 1
allow_prune = true

[job.insert]
type = "sql"
processor = "main"
cron = "* * * * * *"
objects = ["events"]
payload = {{ object = "events", sql = "INSERT INTO events (at) VALUES (CAST(unixepoch('subsec') * 1000 AS INTEGER) - 5000), (CAST(unixepoch('subsec') * 1000 AS INTEGER) - 5000)" }}

[job.stats]
type = "function"
processor = "main"
cron = "*/3 * * * * *"
payload = {{ function = "object_stats" }}

[job.prune]
type = "function"
processor = "main"
cron = "*/2 * * * * *"
objects = ["events"]
payload = {{ function = "object_prune" }}
"#,
            events.display()
        ),
    );
    ws.ok(&["import", &file.display().to_string()]);
    ws.disable_seeded_jobs();
    let node = ws.start_node("n");
    let series = |t: &str| -> Vec<Json> {
        let out = ws.ok(&["stats", t, "--subject", "events", "--json", "--node", "n"]);
        serde_json::from_str::<Json>(&out)
            .unwrap()
            .as_array()
            .unwrap()
            .clone()
    };
    wait_for(20.0, "inserts and prunes to be counted", || {
        let inserted: f64 = series("object.count_insert")
            .iter()
            .map(|p| p["value"].as_f64().unwrap())
            .sum();
        let pruned: f64 = series("object.count_prune")
            .iter()
            .map(|p| p["value"].as_f64().unwrap())
            .sum();
        (inserted >= 4.0 && pruned >= 2.0).then_some(())
    });
    assert_eq!(node.stop(), Some(0));
    for t in [
        "object.date_recent_insert",
        "object.date_recent_prune",
        "object.record_count",
        "object.file_size",
    ] {
        assert!(!series(t).is_empty(), "no {t}");
    }
    // Each insert statement adds 2 rows: the counts are even.
    for p in series("object.count_insert") {
        assert_eq!(p["value"].as_f64().unwrap() % 2.0, 0.0, "{p}");
    }
    let latest = ws.ok(&["stats", "--node", "n"]);
    for t in [
        "object.count_insert",
        "object.count_prune",
        "device.cpu_used",
        "job_processor.instances",
    ] {
        assert!(latest.contains(t), "{t} missing from:\n{latest}");
    }
    let table = ws.ok(&[
        "stats",
        "object.date_recent_prune",
        "--node",
        "n",
        "--limit",
        "1",
    ]);
    assert!(table.lines().count() == 2 && table.contains(":"), "{table}");
}

fn stretch_max_round_trips_through_job_conf_and_is_refused_on_on_demand_jobs(ws: Workspace) {
    let file = ws.write(
        "jobs.conf",
        r#"
[processor.main]

[job.slow]
type = "function"
processor = "main"
run_every = 1
stretch_max = 4
payload = { function = "debug.noop" }
"#,
    );
    ws.ok(&["import", &file.display().to_string()]);
    let exported = ws.ok(&["export"]);
    assert!(exported.contains("stretch_max = 4"), "{exported}");
    ws.ok(&["jobs", "edit", "slow", "--stretch-max", "8"]);
    assert!(ws.ok(&["export"]).contains("stretch_max = 8"));
    let refused = ws.run(&["jobs", "edit", "slow", "--stretch-max", "0"]);
    assert!(!refused.status.success());
    assert!(
        ws.ok(&["export"]).contains("stretch_max = 8"),
        "a refused edit changes nothing"
    );
    let bad = ws.write(
        "bad.conf",
        r#"
[processor.main]

[job.manual]
type = "function"
processor = "main"
stretch_max = 4
payload = { function = "debug.noop" }

[job.wild]
type = "function"
processor = "main"
run_every = 1
stretch_max = 100
payload = { function = "debug.noop" }
"#,
    );
    let out = ws.run(&["check", &bad.display().to_string()]);
    let text =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success());
    assert!(
        text.contains("stretch_max") && text.contains("only a recurring job"),
        "{text}"
    );
    assert!(text.contains("must be from 1 to 64, got 100"), "{text}");
}

/// Stretching on a real node (issue 18, point 8): a node held strained (a CPU threshold of 0%)
/// stretches a per-second job that allows ×4 to one slot in four, a step at a time, each step a
/// decision; restarted healthy, it brings the period back, a step at a time.
fn a_strained_node_stretches_a_job_and_a_healthy_one_brings_its_period_back(ws: Workspace) {
    tuned(&ws);
    ws.set_node_env("JOBVISOR__POLICY__CPU_STRAINED", "0");
    ws.set_node_env("JOBVISOR__POLICY__PRIORITY_FLOOR", "100");
    let file = ws.write(
        "jobs.conf",
        r#"
[processor.main]

[job.tick]
type = "function"
processor = "main"
required = true
cron = "* * * * * *"
stretch_max = 4
payload = { function = "debug.noop" }
"#,
    );
    ws.ok(&["import", &file.display().to_string()]);
    ws.disable_seeded_jobs();
    let decisions = || -> Vec<Json> {
        let out = ws.ok(&["decisions", "--json", "--node", "n", "--limit", "100"]);
        let mut rows = serde_json::from_str::<Json>(&out)
            .unwrap()
            .as_array()
            .unwrap()
            .clone();
        rows.reverse();
        rows
    };
    let node = ws.start_node("n");
    let stretched = wait_for(15.0, "the period to be stretched ×4", || {
        decisions().into_iter().find(|d| {
            d["action"] == "stretch" && d["reason"].as_str().unwrap().contains("×2 -> ×4")
        })
    });
    let runs_in = |from: i64, to: i64| {
        ws.runs_of("tick")
            .iter()
            .filter(|r| {
                r.scheduled_for.is_some_and(|s| s > from && s <= to) && r.status == "succeeded"
            })
            .count()
    };
    let from = at_ms(&stretched) + 1_000;
    std::thread::sleep(std::time::Duration::from_secs(9));
    let stretched_runs = runs_in(from, from + 8_000);
    assert_eq!(node.stop(), Some(0));
    assert!(
        (1..=3).contains(&stretched_runs),
        "{stretched_runs} runs in 8 s stretched ×4"
    );
    // The start-up activation of the required job is logged too (cause `minimum`).
    let rows: Vec<Json> = decisions()
        .into_iter()
        .filter(|d| d["cause"] == "health")
        .collect();
    let steps: Vec<&str> = rows.iter().filter_map(|d| d["action"].as_str()).collect();
    assert_eq!(steps, ["stretch", "stretch"], "{rows:?}");
    assert!(
        rows[0]["reason"].as_str().unwrap().ends_with(
            "stretch the period of `tick` (priority 0, the lowest-priority stretchable job) ×1 -> \
             ×2 (at most ×4) before shedding anything"
        ),
        "{}",
        rows[0]["reason"]
    );
    assert_eq!(rows[0]["cause"], "health");

    // Healthy again: the period comes back in two steps, and the job runs every second.
    ws.set_node_env("JOBVISOR__POLICY__CPU_STRAINED", "100");
    let node = ws.start_node("n");
    let back = wait_for(15.0, "the period to be back", || {
        decisions().into_iter().find(|d| {
            d["action"] == "unstretch" && d["reason"].as_str().unwrap().contains("×2 -> ×1")
        })
    });
    let from = at_ms(&back) + 1_000;
    std::thread::sleep(std::time::Duration::from_secs(5));
    let runs = runs_in(from, from + 4_000);
    assert_eq!(node.stop(), Some(0));
    assert!(runs >= 3, "{runs} runs in 4 s as scheduled");
    let unstretches = decisions()
        .iter()
        .filter(|d| d["action"] == "unstretch")
        .count();
    assert_eq!(unstretches, 2);
}

/// The spec's `job_processor.stat_elapsed_time_*` sums (issue 18, point 10) end to end: a
/// node's processor sums the elapsed time of its runs per schedule kind, and records the sums
/// once a minute — by the engine's clock, so an embedded engine whose injected clock steps a
/// minute ahead records them at its next sample. `jobvisor stats` shows the run_always sum of
/// the processor in ms (the one 150 ms run, not the minute the clock stepped over: no run was
/// executing then) and a zero for the kind that did not run.
fn elapsed_time_per_schedule_kind_is_summed_per_minute_and_shows_in_stats(ws: Workspace) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicI64, Ordering};
    use std::time::Duration;

    use jobvisor::runtime::{Clock, Engine};

    /// The system's clock, shifted by what the test adds.
    struct Shifted(Arc<AtomicI64>);
    impl Clock for Shifted {
        fn now_ms(&self) -> i64 {
            jobvisor::catalog::now_ms() + self.0.load(Ordering::SeqCst)
        }
    }
    const SUM: &str = "job_processor.stat_elapsed_time_sum_run_always_minute";
    const CRON_SUM: &str = "job_processor.stat_elapsed_time_cron_sum";
    // One run at start, then none for 10 minutes: nothing runs when the clock steps. The cron
    // job (yearly) gives the processor a second kind, recorded as zero.
    let conf = r#"
[processor.main]

[job.once]
type = "function"
processor = "main"
required = true
run_always = true
run_delay = 600000
payload = { function = "debug.sleep", ms = 150 }

[job.yearly]
type = "function"
processor = "main"
required = true
cron = "0 0 0 1 1 *"
payload = { function = "debug.noop" }
"#;
    ws.import_conf(conf);
    let shift = Arc::new(AtomicI64::new(0));
    let clock = Shifted(shift.clone());
    let db = ws.catalog_at();
    let mut cfg = ws.engine_config();
    actix_rt::System::new().block_on(async move {
        cfg.health.interval = 200;
        // Thresholds the shared machine cannot cross: this is about what the node records.
        cfg.policy.cpu_strained = 100.0;
        cfg.policy.cpu_critical = 100.0;
        cfg.policy.psi_strained = 100.0;
        cfg.policy.psi_critical = 100.0;
        cfg.policy.memory_strained = 0;
        cfg.policy.memory_critical = 0;
        cfg.policy.disk_strained = 0.0;
        cfg.policy.disk_critical = 0.0;
        let engine = Engine::builder()
            .config(cfg)
            .node_name("clocked")
            .clock(Arc::new(clock))
            .start()
            .unwrap();
        let stat_rows = |t: &'static str, after: i64| {
            db.read(move |db| {
                db.count(&format!(
                    "SELECT count(*) FROM stat s JOIN stat_type t USING (stat_type_id)
                     WHERE t.stat_type = '{t}' AND s.sampled_at > {after}"
                ))
            })
        };
        // The run ends, and two samples take its elapsed time in.
        let mut ended = None;
        for _ in 0..500 {
            ended = db
                .read(|db| db.runs_of("once"))
                .await
                .iter()
                .find(|r| r.status == "succeeded")
                .and_then(|r| r.finished_at);
            if let Some(t) = ended
                && stat_rows("device.cpu_used", t).await >= 2
            {
                break;
            }
            actix_rt::time::sleep(Duration::from_millis(20)).await;
        }
        let ended = ended.expect("the run_always job ran");
        assert_eq!(stat_rows(SUM, 0).await, 0, "no sum before a minute");
        // A minute later, by the engine's clock: the next sample records the sums.
        shift.store(61_000, Ordering::SeqCst);
        for _ in 0..500 {
            if stat_rows(SUM, ended).await > 0 {
                break;
            }
            actix_rt::time::sleep(Duration::from_millis(20)).await;
        }
        engine.shutdown(Duration::from_secs(2)).await.unwrap();
    });
    let series = |t: &str| -> Vec<Json> {
        let out = ws.ok(&["stats", t, "--subject", "main", "--all-nodes", "--json"]);
        serde_json::from_str::<Json>(&out)
            .unwrap()
            .as_array()
            .unwrap()
            .clone()
    };
    let sums = series(SUM);
    assert_eq!(sums.len(), 1, "{sums:?}");
    assert_eq!(sums[0]["unit"], "ms", "{sums:?}");
    let ms = sums[0]["value"].as_f64().unwrap();
    assert!(
        (150.0..5_000.0).contains(&ms),
        "the one 150 ms run, in ms: {ms}"
    );
    let cron = series(CRON_SUM);
    assert_eq!(cron.len(), 1, "{cron:?}");
    assert_eq!(cron[0]["value"].as_f64(), Some(0.0), "{cron:?}");
    // The latest values as an operator reads them: the sum in its unit.
    let latest = ws.ok(&["stats", "--all-nodes"]);
    let row = latest
        .lines()
        .find(|l| l.starts_with(SUM))
        .unwrap_or_else(|| panic!("{SUM} missing from:\n{latest}"));
    assert!(
        row.contains(" main ") && row.contains(&jobvisor::policy::duration(ms as i64)),
        "{row}"
    );
}
