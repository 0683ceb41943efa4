//! Nodes sharing one catalog (issue 16): `jobvisor nodes list` (and `/api/v1/nodes`) says where
//! each stands.

use std::process::Command;

use crate::support::{Workspace, api, text, wait_for};

/// `jobvisor nodes list --json` rows by name.
fn listed(ws: &Workspace) -> std::collections::HashMap<String, serde_json::Value> {
    let rows: Vec<serde_json::Value> =
        serde_json::from_str(&ws.ok(&["--json", "nodes", "list"])).unwrap();
    rows.into_iter()
        .map(|r| (r["name"].as_str().unwrap().to_string(), r))
        .collect()
}

/// Issue 16, build 5: three nodes on one catalog with a short heartbeat; one stops cleanly,
/// one is killed. The list shows the survivor alive with a fresh heartbeat, the clean one
/// stopped, and the killed one fenced by the survivor's sweep once its TTL passed — locally, as
/// JSON, through the API and through `--url`.
#[test]
fn nodes_list_shows_each_node_alive_stopped_or_fenced_with_its_heartbeat_age() {
    let ws = Workspace::new();
    ws.ok(&["init"]);
    ws.disable_seeded_jobs();
    ws.set_node_env("JOBVISOR__NODE__HEARTBEAT_INTERVAL", "200");
    ws.set_node_env("JOBVISOR__NODE__LEASE_TTL", "800");
    let a = ws.start_node("a");
    let b = ws.start_node("b");
    let c = ws.start_node("c");
    let token = a.token.clone().unwrap();
    let c_pid = c.child.id() as i64;
    let all = listed(&ws);
    for name in ["a", "b", "c"] {
        assert_eq!(all[name]["state"], "alive", "{:?}", all[name]);
        assert_eq!(all[name]["lease_ttl_ms"], 800);
        assert!(all[name]["heartbeat_age_ms"].as_i64().unwrap() < 800);
    }
    assert_eq!(all["c"]["pid"], c_pid);
    assert_eq!(b.stop(), Some(0));
    c.crash();
    let all = wait_for(20.0, "a to sweep c", || {
        let all = listed(&ws);
        (all["c"]["state"] == "fenced").then_some(all)
    });
    assert_eq!(all["a"]["state"], "alive");
    assert_eq!(all["b"]["state"], "stopped");
    assert_eq!(all["b"]["heartbeat_at"], serde_json::Value::Null);
    assert_eq!(all["c"]["fenced_by"], "a");
    assert!(all["c"]["heartbeat_age_ms"].as_i64().unwrap() > 800);
    let table = ws.ok(&["nodes", "list"]);
    let header = table.lines().next().unwrap();
    for column in [
        "NAME",
        "STATE",
        "HOST",
        "PID",
        "VERSION",
        "STARTED",
        "HEARTBEAT",
    ] {
        assert!(header.contains(column), "{table}");
    }
    let row_c = table.lines().find(|l| l.starts_with("c ")).unwrap();
    assert!(
        row_c.contains("fenced") && row_c.contains(" ago"),
        "{table}"
    );
    let r = api(&a.api, Some(&token), "GET", "/api/v1/nodes", None);
    assert_eq!(r.status, 200, "{}", r.body);
    let states: Vec<(String, String)> = r
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["name"].as_str().unwrap().into(),
                n["state"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        states,
        [
            ("a".into(), "alive".into()),
            ("b".into(), "stopped".into()),
            ("c".into(), "fenced".into())
        ]
    );
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_jobvisor"))
        .args(["--url", &a.api, "nodes", "list"])
        .current_dir(dir.path())
        .env_remove("JOBVISOR_CONFIG")
        .env("JOBVISOR_TOKEN", &token)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let remote = String::from_utf8(out.stdout).unwrap();
    assert!(
        remote
            .lines()
            .any(|l| l.starts_with("c ") && l.contains("fenced")),
        "{remote}"
    );
    assert_eq!(a.stop(), Some(0));
}
