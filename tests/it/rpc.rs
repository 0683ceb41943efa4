//! JSON-RPC 2.0 at `/rpc` of a real node: engine commands, functions run as runs of the node,
//! roles, batches, notifications and malformed calls.

use serde_json::{Value, json};

use crate::support::{Workspace, api, http_raw};

crate::on_both_backends!(
    functions_are_methods_that_run_as_runs_of_the_node_and_commands_drive_the_engine,
    rpc_refuses_what_a_role_may_not_do_and_malformed_calls,
);

fn call(base: &str, token: &str, method: &str, params: Value) -> (u16, Value) {
    let body = json!({"jsonrpc": "2.0", "method": method, "params": params, "id": 7});
    let r = api(base, Some(token), "POST", "/rpc", Some(&body));
    let v = if r.body.is_empty() {
        Value::Null
    } else {
        r.json()
    };
    (r.status, v)
}

fn functions_are_methods_that_run_as_runs_of_the_node_and_commands_drive_the_engine(ws: Workspace) {
    ws.ok(&["init"]);
    ws.disable_seeded_jobs();
    let node = ws.start_node("r1");
    let t = node.token.clone().unwrap();
    let base = &node.api;
    // A function call: a run of `rpc.debug.echo`, answered with its result.
    let (status, v) = call(base, &t, "debug.echo", json!({"word": "hi"}));
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["id"], 7);
    assert_eq!(v["result"]["word"], "hi", "{v}");
    let runs = ws.runs_of("rpc.debug.echo");
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].status, "succeeded");
    // A failing function: the run's failure, with its id.
    let (status, v) = call(base, &t, "debug.fail", json!({"message": "no luck"}));
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["error"]["code"], -32010, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("no luck"),
        "{v}"
    );
    // Engine commands.
    let (status, v) = call(
        base,
        &t,
        "job.run",
        json!({"job": "device_stats", "params": {}}),
    );
    assert_eq!(status, 200, "{v}");
    let id = v["result"]["run_id"].as_i64().unwrap();
    let (_, v) = call(base, &t, "run.get", json!({"id": id}));
    assert_eq!(v["result"]["job"], "device_stats", "{v}");
    let (_, v) = call(
        base,
        &t,
        "job.run_many",
        json!({"job": "device_stats", "runs": [{}, null]}),
    );
    assert_eq!(v["result"]["run_ids"].as_array().unwrap().len(), 2, "{v}");
    let (_, v) = call(base, &t, "node.pause", json!({}));
    assert_eq!(v["result"]["paused"], true, "{v}");
    let (_, v) = call(base, &t, "node.resume", json!({}));
    assert_eq!(v["result"]["paused"], false, "{v}");
    let (_, v) = call(base, &t, "rpc.methods", json!({}));
    assert!(
        v["result"]["functions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f == "debug.echo")
    );
    // Batches and notifications.
    let batch = json!([
        {"jsonrpc": "2.0", "method": "node.status", "id": 1},
        {"jsonrpc": "2.0", "method": "job.get", "params": {"job": "nope"}, "id": 2},
        {"jsonrpc": "2.0", "method": "node.status"},
    ]);
    let r = api(base, Some(&t), "POST", "/rpc", Some(&batch));
    assert_eq!(r.status, 200, "{}", r.body);
    let answers = r.json();
    assert_eq!(answers.as_array().unwrap().len(), 2, "{answers}");
    assert_eq!(answers[1]["error"]["code"], -32002, "{answers}");
    let note = json!({"jsonrpc": "2.0", "method": "node.status"});
    assert_eq!(api(base, Some(&t), "POST", "/rpc", Some(&note)).status, 204);
}

fn rpc_refuses_what_a_role_may_not_do_and_malformed_calls(ws: Workspace) {
    ws.ok(&["init"]);
    let node = ws.start_node("r2");
    let admin = node.token.clone().unwrap();
    ws.ok(&["users", "add", "val", "--role", "viewer"]);
    let out = ws.ok(&["--json", "tokens", "create", "val"]);
    let viewer = serde_json::from_str::<Value>(&out).unwrap()["token"]
        .as_str()
        .unwrap()
        .to_string();
    let base = &node.api;
    let (status, v) = call(base, &viewer, "node.status", json!({}));
    assert_eq!(status, 200, "{v}");
    for (method, params) in [
        ("job.run", json!({"job": "device_stats"})),
        ("node.pause", json!({})),
        ("debug.echo", json!({})),
    ] {
        let (status, v) = call(base, &viewer, method, params);
        assert_eq!(status, 403, "{method}: {v}");
        assert_eq!(v["error"]["code"], -32001, "{method}: {v}");
    }
    let cases: Vec<(&[u8], u16, i64)> = vec![
        (b"{not json", 400, -32700),
        (b"{\"jsonrpc\": \"1.0\", \"method\": \"node.status\", \"id\": 1}", 400, -32600),
        (b"{\"jsonrpc\": \"2.0\", \"id\": 1}", 400, -32600),
        (b"{\"jsonrpc\": \"2.0\", \"method\": \"nope\", \"id\": 1}", 404, -32601),
        (b"{\"jsonrpc\": \"2.0\", \"method\": \"job.run\", \"params\": [1], \"id\": 1}", 422, -32602),
        (b"{\"jsonrpc\": \"2.0\", \"method\": \"job.run\", \"params\": {}, \"id\": 1}", 422, -32602),
        (b"{\"jsonrpc\": \"2.0\", \"method\": \"job.run\", \"params\": {\"job\": \"nope\"}, \"id\": 1}", 404, -32002),
        (b"{\"jsonrpc\": \"2.0\", \"method\": \"run.get\", \"params\": {\"id\": \"x\"}, \"id\": 1}", 422, -32602),
        (b"[]", 400, -32600),
    ];
    let auth = format!("Bearer {admin}");
    for (body, status, code) in cases {
        let r = http_raw(
            base,
            "POST",
            "/rpc",
            &[
                ("Authorization", &auth),
                ("Content-Type", "application/json"),
            ],
            body,
        );
        assert_eq!(
            r.status,
            status,
            "{}: {}",
            String::from_utf8_lossy(body),
            r.body
        );
        assert_eq!(r.json()["error"]["code"], code, "{}", r.body);
    }
    assert_eq!(
        api(base, None, "POST", "/rpc", Some(&json!({}))).status,
        401
    );
}
