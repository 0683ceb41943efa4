//! The CLI as a client of a running node's API (`--url`, the token in JOBVISOR_TOKEN).

use std::process::{Command, Output};

use crate::support::{Workspace, text};

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
