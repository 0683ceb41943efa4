//! The CLI as a client of a running node's API (`--url`, the token in JOBVISOR_TOKEN).

use std::process::{Command, Output};

use crate::support::{Workspace, text, wait_for};

/// `jobvisor --url URL ARGS` with `token` in the environment, from a folder with no catalog.
fn remote(url: &str, token: Option<&str>, args: &[&str]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_jobvisor"));
    cmd.arg("--url").arg(url).args(args).current_dir(dir.path());
    cmd.env_remove("JOBVISOR_CONFIG")
        .env_remove("JOBVISOR_TOKEN");
    if let Some(t) = token {
        cmd.env("JOBVISOR_TOKEN", t);
    }
    cmd.output().unwrap()
}

/// Issue 13, point 8: a job defined, changed and removed on a remote node, and a listing of
/// more jobs than one page holds.
#[test]
fn the_cli_defines_changes_and_removes_jobs_on_a_remote_node_and_lists_every_page() {
    let ws = Workspace::new();
    ws.ok(&["init"]);
    let many: String = (0..1100)
        .map(|i| {
            format!(
                "[job.bulk{i:04}]\ntype = \"function\"\nprocessor = \"main\"\nenabled = false\n\
                 payload = {{ function = \"debug.noop\" }}\n"
            )
        })
        .collect();
    let file = ws.write("many.conf", &format!("[processor.main]\n{many}"));
    ws.ok(&["import", file.to_str().unwrap()]);
    let node = ws.start_node("far");
    let t = node.token.clone().unwrap();
    let ok = |args: &[&str]| {
        let out = remote(&node.api, Some(&t), args);
        assert!(out.status.success(), "{args:?}: {}", text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let out = ok(&[
        "jobs",
        "add",
        "far_job",
        "--type",
        "function",
        "--processor",
        "main",
        "--payload",
        r#"{"function":"debug.noop"}"#,
        "--cron",
        "0 3 * * *",
        "--priority",
        "5",
    ]);
    assert!(out.contains("job `far_job` added"), "{out}");
    let out = ok(&["jobs", "edit", "far_job", "--priority", "8", "--cron", ""]);
    assert!(out.contains("changed"), "{out}");
    let out = ok(&["jobs", "edit", "far_job", "--priority", "8"]);
    assert!(out.contains("unchanged"), "{out}");
    let shown: serde_json::Value =
        serde_json::from_str(&ok(&["--json", "jobs", "show", "far_job"])).unwrap();
    assert_eq!(shown["priority"], 8, "{shown}");
    assert!(
        !shown["schedule"].as_str().unwrap().contains("cron"),
        "{shown}"
    );
    // A bad field is the API's error, with its field and exit code.
    let out = remote(
        &node.api,
        Some(&t),
        &["--json", "jobs", "edit", "far_job", "--cron", "nope"],
    );
    assert_eq!(out.status.code(), Some(65), "{}", text(&out));
    let err: serde_json::Value = serde_json::from_slice(&out.stderr).unwrap();
    assert_eq!(err["field"], "cron", "{err}");
    // Every page: the seeded jobs, 1,100 more and the new one.
    let listed: serde_json::Value = serde_json::from_str(&ok(&["--json", "jobs", "list"])).unwrap();
    let items = listed["items"].as_array().unwrap();
    assert_eq!(items.len() as u64, listed["total"].as_u64().unwrap());
    assert!(items.len() > 1100, "{}", items.len());
    assert!(items.iter().any(|j| j["name"] == "bulk1099"));
    let table = ok(&["jobs", "list"]);
    assert!(table.contains("bulk1099") && table.contains("far_job"));
    let out = ok(&["jobs", "remove", "far_job"]);
    assert!(out.contains("removed"), "{out}");
    let out = remote(&node.api, Some(&t), &["jobs", "show", "far_job"]);
    assert_eq!(out.status.code(), Some(65), "{}", text(&out));
}

#[test]
fn the_cli_manages_a_remote_node_through_its_api() {
    let ws = Workspace::new();
    ws.ok(&["init"]);
    ws.disable_seeded_jobs();
    let node = ws.start_node("far");
    let t = node.token.clone().unwrap();
    let out = remote(&node.api, Some(&t), &["jobs", "list"]);
    assert!(out.status.success(), "{}", text(&out));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("NAME") && table.contains("device_stats"),
        "{table}"
    );
    let out = remote(&node.api, Some(&t), &["jobs", "enable", "device_stats"]);
    assert!(out.status.success(), "{}", text(&out));
    let out = remote(
        &node.api,
        Some(&t),
        &[
            "--json",
            "jobs",
            "run",
            "device_stats",
            "--params",
            "{\"n\": 1}",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = v["run_ids"][0].as_i64().unwrap().to_string();
    let out = remote(&node.api, Some(&t), &["runs", "show", &id]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("device_stats"));
    let out = remote(
        &node.api,
        Some(&t),
        &["runs", "list", "--job", "device_stats"],
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&id),
        "{}",
        text(&out)
    );
    let out = remote(&node.api, Some(&t), &["decisions", "--limit", "5"]);
    assert!(out.status.success(), "{}", text(&out));
    // Errors keep the API's field and reason, and their exit codes.
    let out = remote(&node.api, Some(&t), &["--json", "jobs", "show", "nope"]);
    assert_eq!(out.status.code(), Some(65), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not exist"));
    let out = remote(&node.api, Some(&t), &["runs", "list", "--limit", "0"]);
    assert_eq!(out.status.code(), Some(65), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("limit"),
        "{}",
        text(&out)
    );
    let out = remote(&node.api, Some("jv_wrong"), &["jobs", "list"]);
    assert_eq!(out.status.code(), Some(77), "{}", text(&out));
    let out = remote(&node.api, None, &["jobs", "list"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("JOBVISOR_TOKEN"));
    let out = remote(&node.api, Some(&t), &["export"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let out = remote("http://127.0.0.1:9", Some(&t), &["jobs", "list"]);
    assert_eq!(out.status.code(), Some(75), "{}", text(&out));
}

/// Issue 18: `jobvisor --url … decisions` printed no CAUSE and no READINGS, unlike the local
/// table. Both now render the API's decision view with one renderer: the remote listing is the
/// local one, line for line — a health decision's cause and readings with their thresholds
/// included.
#[test]
fn remote_decisions_print_the_local_table_with_cause_and_readings() {
    let ws = Workspace::new();
    // Quick steps, and thresholds the shared machine cannot cross: the standby job below is
    // activated by health one step after start, a decision with readings.
    for (k, v) in [
        ("JOBVISOR__HEALTH__INTERVAL", "500"),
        ("JOBVISOR__POLICY__PRIORITY_FLOOR", "100"),
        ("JOBVISOR__POLICY__STEP_INTERVAL", "1000"),
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
    let file = ws.write(
        "jobs.conf",
        "[processor.main]\n[job.extra]\ntype = \"function\"\nprocessor = \"main\"\npriority = 5\npayload = { function = \"debug.noop\" }\n",
    );
    ws.ok(&["import", &file.display().to_string()]);
    ws.disable_seeded_jobs();
    let node = ws.start_node("far");
    let t = node.token.clone().unwrap();
    let args = ["decisions", "--all-nodes", "--limit", "50"];
    let (local, far) = wait_for(30.0, "a health decision, listed alike by both", || {
        let local = ws.ok(&args);
        let out = remote(&node.api, Some(&t), &args);
        let far = String::from_utf8_lossy(&out.stdout).into_owned();
        (out.status.success() && local.contains("activate standby job `extra`") && far == local)
            .then_some((local, far))
    });
    let header = far.lines().next().unwrap();
    for column in [
        "TIME", "NODE", "DECISION", "CAUSE", "SUBJECT", "REASON", "READINGS",
    ] {
        assert!(header.contains(column), "{column} missing:\n{far}");
    }
    let row = far
        .lines()
        .find(|l| l.contains("activate standby job `extra`"))
        .unwrap();
    assert!(
        row.contains(" health ") && row.contains("cpu ") && row.contains("% (ok: <= 100%)"),
        "the cause and the readings with their thresholds:\n{row}"
    );
    assert_eq!(local, far);
    // --json stays the API's own JSON.
    let out = remote(&node.api, Some(&t), &["--json", "decisions", "--all-nodes"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v[0]["cause"].is_string() && v[0]["at"].is_string(), "{v}");
    assert_eq!(node.stop(), Some(0));
}
