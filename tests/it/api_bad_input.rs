//! More than 100 malformed API requests against a real node: each gets a 4xx whose JSON body
//! names the problem (and the field, where one is at fault), none a 5xx, and the catalog's
//! export is byte-for-byte the same after each.

use serde_json::json;

use crate::support::{Workspace, http_raw};

const JSON: &str = "application/json";

struct Case {
    method: &'static str,
    path: String,
    content_type: &'static str,
    body: Vec<u8>,
    status: u16,
    field: Option<&'static str>,
}

fn case(
    method: &'static str,
    path: &str,
    body: serde_json::Value,
    status: u16,
    field: Option<&'static str>,
) -> Case {
    Case {
        method,
        path: path.to_string(),
        content_type: JSON,
        body: body.to_string().into_bytes(),
        status,
        field,
    }
}

fn raw(
    method: &'static str,
    path: &str,
    content_type: &'static str,
    body: &[u8],
    status: u16,
) -> Case {
    Case {
        method,
        path: path.to_string(),
        content_type,
        body: body.to_vec(),
        status,
        field: None,
    }
}

fn get(path: &str, status: u16, field: Option<&'static str>) -> Case {
    Case {
        method: "GET",
        path: path.to_string(),
        content_type: JSON,
        body: Vec::new(),
        status,
        field,
    }
}

/// A valid new job with `extra` fields set over it.
fn job(extra: serde_json::Value) -> serde_json::Value {
    let mut j = json!({"name": "newjob", "type": "function", "processor": "main",
                       "payload": {"function": "debug.echo"}});
    for (k, v) in extra.as_object().unwrap() {
        j[k] = v.clone();
    }
    j
}

fn cases() -> Vec<Case> {
    let jobs = "/api/v1/jobs";
    let ds = "/api/v1/jobs/device_stats";
    let huge = "x".repeat(10_000);
    vec![
        // Creating jobs: wrong types, missing and unknown fields, bad values, bad references.
        case("POST", jobs, job(json!({"name": 5})), 422, Some("name")),
        case("POST", jobs, job(json!({"priority": "high"})), 422, Some("priority")),
        case("POST", jobs, job(json!({"timeout_ms": -5})), 422, Some("timeout_ms")),
        case("POST", jobs, job(json!({"colour": "red"})), 422, Some("colour")),
        case("POST", jobs, job(json!({"name": huge})), 422, Some("name")),
        case("POST", jobs, job(json!({"name": "has space"})), 422, Some("name")),
        case("POST", jobs, job(json!({"name": ""})), 422, Some("name")),
        case("POST", jobs, job(json!({"name": "a/b"})), 422, Some("name")),
        case("POST", jobs, job(json!({"name": "ジョブ"})), 422, Some("name")),
        case("POST", jobs, job(json!({"name": null})), 422, Some("name")),
        case("POST", jobs, job(json!({"cron": "61 * * * *"})), 422, Some("cron")),
        case("POST", jobs, job(json!({"cron": "not a cron"})), 422, Some("cron")),
        case("POST", jobs, job(json!({"processor": "nope"})), 422, Some("processor")),
        case("POST", jobs, job(json!({"group": "nogroup"})), 422, Some("group")),
        case("POST", jobs, job(json!({"objects": ["missing"]})), 422, Some("objects")),
        case("POST", jobs, job(json!({"objects": "missing"})), 422, Some("objects")),
        case("POST", jobs, job(json!({"type": "cron"})), 422, Some("type")),
        case("POST", jobs, json!({"name": "a", "processor": "main"}), 422, Some("type")),
        case("POST", jobs, json!({"name": "a", "type": "function"}), 422, Some("processor")),
        case("POST", jobs, json!({"type": "function", "processor": "main"}), 422, Some("name")),
        case("POST", jobs, job(json!({"payload": [1]})), 422, Some("payload")),
        case("POST", jobs, job(json!({"payload": {}})), 422, Some("payload")),
        case("POST", jobs, job(json!({"run_every": 0})), 422, Some("run_every")),
        case("POST", jobs, job(json!({"run_on_the": 60})), 422, Some("run_on_the")),
        case("POST", jobs, job(json!({"run_at": "25:00"})), 422, Some("run_at")),
        case("POST", jobs, job(json!({"run_date": "#funday#"})), 422, Some("run_date")),
        case("POST", jobs, job(json!({"cron": "0 3 * * *", "timezone": "Mars/Olympus"})), 422, Some("timezone")),
        case("POST", jobs, job(json!({"misfire_policy": "sometimes"})), 422, Some("misfire_policy")),
        case("POST", jobs, job(json!({"overlap_policy": "never"})), 422, Some("overlap_policy")),
        case("POST", jobs, job(json!({"max_attempts": 0})), 422, Some("max_attempts")),
        case("POST", jobs, job(json!({"backoff_base_ms": -1})), 422, Some("backoff_base_ms")),
        case("POST", jobs, job(json!({"backoff_base_ms": 10, "backoff_max_ms": 5})), 422, Some("backoff_max_ms")),
        case("POST", jobs, job(json!({"misfire_window_ms": -1})), 422, Some("misfire_window_ms")),
        // Names that are path segments (`.`, `..`) or read as a flag (`-x`).
        case("POST", jobs, job(json!({"name": "."})), 422, Some("name")),
        case("POST", jobs, job(json!({"name": ".."})), 422, Some("name")),
        case("POST", jobs, job(json!({"name": "-x"})), 422, Some("name")),
        case("POST", jobs, job(json!({"name": ".hidden"})), 422, Some("name")),
        case("POST", jobs, job(json!({"priority": 1e30})), 422, Some("priority")),
        case("POST", jobs, job(json!({"priority": 9_223_372_036_854_775_808_u64})), 422, Some("priority")),
        case("POST", jobs, job(json!({"required": "yes"})), 422, Some("required")),
        case("POST", jobs, job(json!({"description": 5})), 422, Some("description")),
        case("POST", jobs, job(json!({"clear_schedule": "true"})), 422, Some("clear_schedule")),
        case("POST", jobs, job(json!({"run_always": 1})), 422, Some("run_always")),
        case("POST", jobs, job(json!({"name": "device_stats"})), 409, None),
        case("POST", jobs, job(json!({"type": "sql", "payload": {"object": "missing", "sql": "select 1"}})), 422, Some("payload")),
        case("POST", jobs, job(json!({"type": "command", "payload": {"argv": "ls"}})), 422, Some("payload")),
        case("POST", jobs, job(json!({"type": "url", "payload": {"url": "not a url"}})), 422, Some("payload")),
        case("POST", jobs, job(json!({"payload": {"function": "debug.echo", "open_params": "day"}})), 422, Some("payload")),
        case("POST", jobs, job(json!({"payload": {"function": "debug.echo", "open_params": [1]}})), 422, Some("payload")),
        case("POST", jobs, job(json!({"payload": {"function": "debug.echo", "open_params": ["function"]}})), 422, Some("payload")),
        case("POST", jobs, job(json!({"type": "url", "payload": {"url": "http://127.0.0.1:1/", "send_input": true, "open_params": ["url"]}})), 422, Some("payload")),
        raw("POST", jobs, JSON, br#"{"name":"#, 400),
        raw("POST", jobs, JSON, b"{\"name\": \"\xff\xfe\"}", 400),
        raw("POST", jobs, JSON, br#"{} trailing"#, 400),
        raw("POST", jobs, JSON, b"[]", 422),
        raw("POST", jobs, JSON, br#""just a string""#, 422),
        raw("POST", jobs, "text/plain", br#"{"name":"a"}"#, 415),
        raw("POST", jobs, "application/x-www-form-urlencoded", b"name=a", 415),
        raw("POST", jobs, JSON, &vec![b' '; 2 << 20], 413),
        // A key named twice is refused naming it, never last-wins (issue 27, point 11).
        Case { field: Some("name"), ..raw("POST", jobs, JSON, br#"{"name":"a","type":"function","processor":"main","payload":{"function":"debug.echo"},"name":"b"}"#, 400) },
        Case { field: Some("payload.function"), ..raw("POST", jobs, JSON, br#"{"name":"a","type":"function","processor":"main","payload":{"function":"debug.echo","function":"debug.fail"}}"#, 400) },
        Case { field: Some("priority"), ..raw("PATCH", ds, JSON, br#"{"priority":1,"priority":2}"#, 400) },
        Case { field: Some("params.day"), ..raw("POST", &format!("{ds}/runs"), JSON, br#"{"params":{"day":1,"day":2}}"#, 400) },
        Case { field: Some("jobs"), ..raw("POST", "/api/v1/catalog", JSON, br#"{"jobs":[],"jobs":[]}"#, 400) },
        // Changing a job.
        case("PATCH", ds, json!({"priority": "x"}), 422, Some("priority")),
        case("PATCH", ds, json!({"name": "other"}), 422, Some("name")),
        case("PATCH", ds, json!({"cron": "* * * * * * * *"}), 422, Some("cron")),
        case("PATCH", ds, json!({"nope": 1}), 422, Some("nope")),
        case("PATCH", ds, json!({"processor": "nope"}), 422, Some("processor")),
        case("PATCH", ds, json!({"type": "bogus"}), 422, Some("type")),
        case("PATCH", "/api/v1/jobs/missing", json!({"priority": 1}), 404, None),
        case("PATCH", &format!("/api/v1/jobs/{}", "y".repeat(5000)), json!({"priority": 1}), 404, None),
        case("PATCH", ds, json!({"timeout_ms": -1}), 422, Some("timeout_ms")),
        case("PATCH", ds, json!({"max_overlap": -1}), 422, Some("max_overlap")),
        case("PATCH", ds, json!({"max_catchup": -1}), 422, Some("max_catchup")),
        case("PATCH", ds, json!({"run_delay_ms": -1}), 422, Some("run_delay_ms")),
        case("PATCH", ds, json!({"backoff_max_ms": -1}), 422, Some("backoff_max_ms")),
        case("PATCH", ds, json!({"objects": [1]}), 422, Some("objects[0]")),
        raw("PATCH", ds, JSON, br#"{"priority": }"#, 400),
        // Pins, next fire times, enabling.
        case("PUT", &format!("{ds}/pin"), json!({}), 422, Some("pin")),
        case("PUT", &format!("{ds}/pin"), json!({"pin": "sideways"}), 422, Some("pin")),
        case("PUT", &format!("{ds}/pin"), json!({"pin": 1}), 422, Some("pin")),
        case("PUT", "/api/v1/jobs/missing/pin", json!({"pin": "active"}), 404, None),
        get(&format!("{ds}/next?count=0"), 422, Some("count")),
        get(&format!("{ds}/next?count=1001"), 422, Some("count")),
        get(&format!("{ds}/next?count=abc"), 422, Some("count")),
        get(&format!("{ds}/next?count=-1"), 422, Some("count")),
        get("/api/v1/jobs/missing/next", 404, None),
        get(&format!("{ds}/next?foo=1"), 422, Some("foo")),
        raw("POST", "/api/v1/jobs/missing/enable", JSON, b"", 404),
        raw("POST", "/api/v1/jobs/missing/disable", JSON, b"", 404),
        raw("DELETE", "/api/v1/jobs/missing", JSON, b"", 404),
        // Listing jobs: bad paging and filters.
        get("/api/v1/jobs?limit=0", 422, Some("limit")),
        get("/api/v1/jobs?limit=1001", 422, Some("limit")),
        get("/api/v1/jobs?limit=abc", 422, Some("limit")),
        get("/api/v1/jobs?offset=-1", 422, Some("offset")),
        get("/api/v1/jobs?sort=random", 422, Some("sort")),
        get("/api/v1/jobs?activation=sleeping", 422, Some("activation")),
        get("/api/v1/jobs?type=cron", 422, Some("type")),
        get("/api/v1/jobs?enabled=maybe", 422, Some("enabled")),
        get("/api/v1/jobs?page=2", 422, Some("page")),
        // Triggers.
        raw("POST", "/api/v1/jobs/missing/runs", JSON, b"", 404),
        case("POST", &format!("{ds}/runs"), json!({"params": [1]}), 422, Some("params")),
        case("POST", &format!("{ds}/runs"), json!({"params": "x"}), 422, Some("params")),
        case("POST", &format!("{ds}/runs"), json!({"parms": {}}), 422, Some("parms")),
        case("POST", &format!("{ds}/runs/batch"), json!({"runs": []}), 422, Some("runs")),
        case("POST", &format!("{ds}/runs/batch"), json!({"runs": {}}), 422, Some("runs")),
        case("POST", &format!("{ds}/runs/batch"), json!({"runs": vec![json!({}); 10_001]}), 422, Some("runs")),
        case("POST", &format!("{ds}/runs/batch"), json!({"runs": [{}, {"params": 5}]}), 422, Some("runs[1].params")),
        raw("POST", &format!("{ds}/runs/batch"), JSON, br#"{"runs": [{}"#, 400),
        // Runs.
        get("/api/v1/runs/abc", 400, Some("id")),
        get("/api/v1/runs/0", 400, Some("id")),
        get("/api/v1/runs/99999999", 404, None),
        get("/api/v1/runs?limit=0", 422, Some("limit")),
        get("/api/v1/runs?limit=5000", 422, Some("limit")),
        get("/api/v1/runs?status=weird", 422, Some("status")),
        get("/api/v1/runs?since=yesterday", 422, Some("since")),
        get("/api/v1/runs?job=nope", 404, None),
        raw("POST", "/api/v1/runs/99999999/cancel", JSON, b"", 404),
        raw("POST", "/api/v1/runs/abc/retry", JSON, b"", 400),
        raw("POST", "/api/v1/runs/99999999/retry", JSON, b"", 404),
        // Processors and objects.
        case("POST", "/api/v1/processors", json!({"name": "p", "instances": 0}), 422, Some("instances")),
        case("POST", "/api/v1/processors", json!({"name": "p", "instances": "two"}), 422, Some("instances")),
        case("POST", "/api/v1/processors", json!({"name": "p", "instances": 1_000_000_000}), 422, Some("instances")),
        case("POST", "/api/v1/processors", json!({"name": "p", "max_instances": 1_000_000}), 422, Some("max_instances")),
        case("POST", "/api/v1/processors", json!({"name": "p", "ip_address": "not a host!"}), 422, Some("ip_address")),
        case("POST", "/api/v1/processors", json!({"name": "p", "ip_address": "http://10.0.0.1/"}), 422, Some("ip_address")),
        case("POST", "/api/v1/processors", json!({"name": "-x"}), 422, Some("name")),
        case("POST", "/api/v1/processors", json!({"name": "p", "ip_address": "127.0.0.1", "port": 70000}), 422, Some("port")),
        case("POST", "/api/v1/processors", json!({"instances": 1}), 422, Some("name")),
        case("POST", "/api/v1/processors", json!({"name": "main"}), 409, None),
        case("POST", "/api/v1/processors", json!({"name": "p", "threads": 2}), 422, Some("threads")),
        case("PATCH", "/api/v1/processors/missing", json!({"instances": 2}), 404, None),
        case("PATCH", "/api/v1/processors/main", json!({"instances": 4, "max_instances": 2}), 422, Some("max_instances")),
        raw("DELETE", "/api/v1/processors/main", JSON, b"", 409),
        raw("DELETE", "/api/v1/processors/missing", JSON, b"", 404),
        case("POST", "/api/v1/objects", json!({"name": "o", "type": "blob"}), 422, Some("type")),
        case("POST", "/api/v1/objects", json!({"name": "o", "time_to_live_s": -1}), 422, Some("time_to_live_s")),
        case("POST", "/api/v1/objects", json!({"name": ".."}), 422, Some("name")),
        case("POST", "/api/v1/objects", json!({"name": "o o"}), 422, Some("name")),
        raw("DELETE", "/api/v1/objects/missing", JSON, b"", 404),
        case("PATCH", "/api/v1/objects/missing", json!({"allow_prune": true}), 404, None),
        // Importing job.conf.
        raw("POST", "/api/v1/catalog", "application/toml", b"[job.x\ntype = ", 422),
        raw("POST", "/api/v1/catalog", "application/toml", b"[job.x]\ntype = \"function\"\nprocessor = \"nope\"\npayload = { function = \"debug.echo\" }\n", 422),
        raw("POST", "/api/v1/catalog", "image/png", b"\x89PNG", 415),
        raw("POST", "/api/v1/catalog", "application/toml", b"[job.x]\ndescription = \"\xff\"\n", 400),
        raw("POST", "/api/v1/catalog", "application/toml", &vec![b'#'; 2 << 20], 413),
        raw("POST", "/api/v1/catalog", JSON, b"{\"not\": \"millix\"}", 422),
        // Stats and decisions: bounded ranges.
        get("/api/v1/stats/device.cpu_used?step=0", 422, Some("step")),
        get("/api/v1/stats/device.cpu_used?from=100d", 422, Some("from")),
        get("/api/v1/stats/nope", 404, None),
        get("/api/v1/stats/device.cpu_used?from=garbage", 422, Some("from")),
        get("/api/v1/stats/device.cpu_used?from=1h&to=2h", 422, Some("to")),
        get("/api/v1/stats/device.cpu_used?from=89d&step=1", 422, Some("step")),
        get("/api/v1/decisions?limit=0", 422, Some("limit")),
        get("/api/v1/decisions?limit=100000", 422, Some("limit")),
        get("/api/v1/decisions?all_nodes=perhaps", 422, Some("all_nodes")),
        // Routes and methods that do not exist.
        get("/api/v1/nope", 404, None),
        // A documented path and another method: 405 (with `Allow`, tests/it/openapi.rs).
        raw("PUT", "/api/v1/jobs", JSON, b"{}", 405),
        raw("DELETE", "/api/v1/runs", JSON, b"", 405),
    ]
}

#[test]
fn malformed_requests_are_4xx_naming_the_problem_and_change_nothing() {
    let ws = Workspace::new();
    ws.ok(&["init"]);
    ws.disable_seeded_jobs();
    let node = ws.start_node("bad");
    let token = node.token.clone().unwrap();
    let auth = format!("Bearer {token}");
    let export = || {
        let r = http_raw(
            &node.api,
            "GET",
            "/api/v1/catalog",
            &[("Authorization", &auth)],
            b"",
        );
        assert_eq!(r.status, 200);
        r.body
    };
    // Stat types appear with the first health sample.
    crate::support::wait_for(20.0, "the first device sample", || {
        let r = http_raw(
            &node.api,
            "GET",
            "/api/v1/stats",
            &[("Authorization", &auth)],
            b"",
        );
        r.body.contains("device.cpu_used").then_some(())
    });
    let before = export();
    let cases = cases();
    assert!(cases.len() >= 100, "only {} cases", cases.len());
    let mut wrong = Vec::new();
    for c in &cases {
        let r = http_raw(
            &node.api,
            c.method,
            &c.path,
            &[("Authorization", &auth), ("Content-Type", c.content_type)],
            &c.body,
        );
        let what = format!(
            "{} {} {}",
            c.method,
            &c.path[..c.path.len().min(80)],
            String::from_utf8_lossy(&c.body[..c.body.len().min(120)])
        );
        assert!(r.status < 500, "{what}: a 5xx: {} {}", r.status, r.body);
        assert!(
            (400..500).contains(&r.status),
            "{what}: {} {}",
            r.status,
            r.body
        );
        let body = r.json();
        let error = body["error"].as_str().unwrap_or_default();
        assert!(!error.is_empty(), "{what}: no error text: {}", r.body);
        if r.status != c.status {
            wrong.push(format!(
                "{what}: expected {}, got {} {}",
                c.status, r.status, r.body
            ));
        }
        if let Some(field) = c.field {
            // The body's `field` names it (a path below it may follow: `objects[0]`), in the
            // request's terms (`timeout_ms`, not job.conf's `timeout`).
            let got = body["field"].as_str().unwrap_or_default();
            let named = got == field
                || got.starts_with(&format!("{field}["))
                || got.starts_with(&format!("{field}."));
            if !named {
                wrong.push(format!("{what}: expected field {field}, got {}", r.body));
            }
        }
        assert_eq!(export(), before, "{what}: the catalog changed");
    }
    assert!(
        wrong.is_empty(),
        "{} wrong:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}
