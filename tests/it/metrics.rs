//! `/metrics` of a real node that ran jobs: `promtool check metrics` accepts it, and it counts
//! what happened.

use serde_json::json;

use crate::support::{Workspace, api, wait_for};

crate::on_both_backends!(metrics_pass_promtool_and_count_runs_by_job_and_outcome,);

fn metrics_pass_promtool_and_count_runs_by_job_and_outcome(ws: Workspace) {
    ws.ok(&["init"]);
    ws.disable_seeded_jobs();
    // One job labelled by name: the runs of any other count as `(other)`.
    ws.set_node_env("JOBVISOR__HTTP__METRICS_JOB_LABELS", "1");
    let node = ws.start_node("m1");
    let t = node.token.clone().unwrap();
    let job = json!({"name": "m\"x", "type": "function", "processor": "main",
                     "payload": {"function": "debug.echo"}});
    // A name with a quote is refused; a plain one runs.
    assert_eq!(
        api(&node.api, Some(&t), "POST", "/api/v1/jobs", Some(&job)).status,
        422
    );
    let job = json!({"name": "echo", "type": "function", "processor": "main",
                     "payload": {"function": "debug.echo"}});
    assert_eq!(
        api(&node.api, Some(&t), "POST", "/api/v1/jobs", Some(&job)).status,
        201
    );
    let runs = json!({"runs": [{}, {}, {}]});
    let r = api(
        &node.api,
        Some(&t),
        "POST",
        "/api/v1/jobs/echo/runs/batch",
        Some(&runs),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    wait_for(20.0, "three runs", || {
        let done = ws.runs_of("echo");
        (done.iter().filter(|r| r.status == "succeeded").count() == 3).then_some(())
    });
    let r = wait_for(20.0, "the runs and a health sample in /metrics", || {
        let r = api(&node.api, Some(&t), "GET", "/metrics", None);
        (r.body
            .contains("jobvisor_runs_total{job=\"echo\",status=\"succeeded\"} 3")
            && r.body
                .contains("jobvisor_health_reading{reading=\"cpu_used\"}"))
        .then_some(r)
    });
    assert!(
        r.header("content-type")
            .unwrap()
            .starts_with("text/plain; version=0.0.4")
    );
    for needle in [
        "jobvisor_run_duration_seconds_count{job=\"echo\"} 3",
        "jobvisor_claimed_runs_total ",
        "jobvisor_queue_depth 0",
        "jobvisor_queue_lag_seconds ",
        "jobvisor_jobs{activation=\"active\"}",
        "jobvisor_paused 0",
        "jobvisor_writes_paused 0",
        "jobvisor_stale_completions_total 0",
        "jobvisor_budget_memory_bytes{source=\"",
        "jobvisor_budget_cpu_cores{source=\"",
    ] {
        assert!(r.body.contains(needle), "{needle} missing:\n{}", r.body);
    }
    // Seconds with the fraction the monotonic clock measured: three echoes take well under a
    // millisecond each, which whole milliseconds would sum to 0.
    let sum: f64 = r
        .body
        .lines()
        .find_map(|l| l.strip_prefix("jobvisor_run_duration_seconds_sum{job=\"echo\"} "))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no duration sum:\n{}", r.body));
    assert!(sum > 0.0 && (sum * 1000.0).fract() != 0.0, "{sum}");
    // A second job is past the label cap of 1.
    let other = json!({"name": "echo2", "type": "function", "processor": "main",
                       "payload": {"function": "debug.echo"}});
    let made = api(&node.api, Some(&t), "POST", "/api/v1/jobs", Some(&other));
    assert_eq!(made.status, 201, "{}", made.body);
    let ran = api(&node.api, Some(&t), "POST", "/api/v1/jobs/echo2/runs", None);
    assert_eq!(ran.status, 201, "{}", ran.body);
    let r = wait_for(20.0, "echo2's run counted as (other)", || {
        let r = api(&node.api, Some(&t), "GET", "/metrics", None);
        r.body
            .contains("jobvisor_runs_total{job=\"(other)\",status=\"succeeded\"} 1")
            .then_some(r)
    });
    assert!(!r.body.contains("echo2"), "{}", r.body);
    // Group commit is the SQLite writer's: on PostgreSQL each verb is a transaction of its own.
    let batches = "jobvisor_writer_batch_operations_bucket{writer=\"catalog\",le=\"+Inf\"}";
    assert_eq!(r.body.contains(batches), ws.pg.is_none(), "{}", r.body);
    // Debian's prometheus package, installed by .ci/test; absent, this fails.
    let file = ws.write("metrics.txt", &r.body);
    let out = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::fs::File::open(&file).unwrap())
        .output()
        .expect("promtool must be installed (.ci/test installs Debian's prometheus)");
    assert!(
        out.status.success(),
        "promtool check metrics:\n{}{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        r.body
    );
    assert_eq!(api(&node.api, None, "GET", "/metrics", None).status, 401);
}
