//! JSON-RPC 2.0 at `/rpc` of a real node: engine commands, functions run as runs of the node,
//! roles, batches, notifications and malformed calls.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Response, Workspace, api, http_raw};

crate::on_both_backends!(
    functions_are_methods_that_run_as_runs_of_the_node_and_commands_drive_the_engine,
    rpc_refuses_what_a_role_may_not_do_and_malformed_calls,
    null_ids_are_answered_and_object_ids_duplicate_keys_and_long_batches_refused,
    a_batchs_calls_run_concurrently_and_its_cap_is_configurable,
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
    for (body, status, code) in cases {
        let r = post(base, &admin, body);
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

/// A raw body posted to `/rpc` with `token`.
fn post(base: &str, token: &str, body: &[u8]) -> Response {
    let auth = format!("Bearer {token}");
    http_raw(
        base,
        "POST",
        "/rpc",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        body,
    )
}

/// Issue 27, point 11: `"id": null` got no answer, object ids were accepted, and duplicate
/// keys were last-wins: `{"method": "rpc.methods", "method": "node.pause"}` paused the node.
fn null_ids_are_answered_and_object_ids_duplicate_keys_and_long_batches_refused(ws: Workspace) {
    ws.ok(&["init"]);
    ws.disable_seeded_jobs();
    let node = ws.start_node("r3");
    let t = node.token.clone().unwrap();
    let base = &node.api;
    // A null id is an id: answered, with it.
    let r = post(
        base,
        &t,
        br#"{"jsonrpc":"2.0","method":"node.status","id":null}"#,
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert!(v.get("id").is_some_and(Value::is_null), "{v}");
    assert_eq!(v["result"]["paused"], false, "{v}");
    // Ids are strings, numbers or null: anything else is an invalid request, answered with
    // id null, and the call is not made.
    for id in [r#"{"a":1}"#, "[1]", "true"] {
        let body = format!(r#"{{"jsonrpc":"2.0","method":"node.pause","id":{id}}}"#);
        let r = post(base, &t, body.as_bytes());
        assert_eq!(r.status, 400, "{id}: {}", r.body);
        let v = r.json();
        assert_eq!(v["error"]["code"], -32600, "{v}");
        assert!(v["id"].is_null(), "{v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("id must be a string, a number or null"),
            "{message}"
        );
    }
    let r = post(
        base,
        &t,
        br#"{"jsonrpc":"2.0","method":"node.status","id":"s-1"}"#,
    );
    assert_eq!(r.json()["id"], "s-1", "{}", r.body);
    // A key named twice is refused whole, naming it, wherever it is.
    for (body, field) in [
        (&br#"{"jsonrpc":"2.0","method":"rpc.methods","method":"node.pause","id":1}"#[..], "method"),
        (br#"[{"jsonrpc":"2.0","method":"node.status","id":1},{"jsonrpc":"2.0","method":"node.pause","id":2,"id":3}]"#, "[1].id"),
        (br#"{"jsonrpc":"2.0","method":"job.run","params":{"job":"device_stats","job":"x"},"id":1}"#, "params.job"),
    ] {
        let r = post(base, &t, body);
        assert_eq!(r.status, 400, "{}", r.body);
        let v = r.json();
        assert_eq!(v["error"]["code"], -32600, "{v}");
        assert_eq!(v["error"]["data"]["field"], field, "{v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains("duplicate key"),
            "{v}"
        );
    }
    let (_, v) = call(base, &t, "node.status", json!({}));
    assert_eq!(v["result"]["paused"], false, "nothing paused the node: {v}");
    assert!(ws.runs_of("device_stats").is_empty());
    // A batch holds at most 100 calls by default; the refusal names the cap.
    let status = json!({"jsonrpc": "2.0", "method": "node.status", "id": 1});
    let r = api(
        base,
        Some(&t),
        "POST",
        "/rpc",
        Some(&json!(vec![status.clone(); 101])),
    );
    assert_eq!(r.status, 400, "{}", r.body);
    let message = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert_eq!(
        message,
        "a batch of 101 calls: at most 100 calls a batch (http.rpc_batch_max)"
    );
    let r = api(
        base,
        Some(&t),
        "POST",
        "/rpc",
        Some(&json!(vec![status; 100])),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json().as_array().unwrap().len(), 100);
}

/// Issue 27, point 11: a batch ran its calls one after another.
fn a_batchs_calls_run_concurrently_and_its_cap_is_configurable(ws: Workspace) {
    ws.ok(&["init"]);
    ws.disable_seeded_jobs();
    ws.set_node_env("JOBVISOR__HTTP__RPC_BATCH_MAX", "10");
    let node = ws.start_node("r4");
    let t = node.token.clone().unwrap();
    let base = &node.api;
    // Ten calls that each wait 400 ms for a run that takes longer (then answer "not ended"):
    // one after another they take 4 s or more, side by side about 400 ms.
    let calls: Vec<Value> = (0..10)
        .map(|i| {
            json!({"jsonrpc": "2.0", "method": "debug.sleep",
                   "params": {"ms": 1000, "_timeout_ms": 400}, "id": i})
        })
        .collect();
    let began = Instant::now();
    let r = api(base, Some(&t), "POST", "/rpc", Some(&json!(calls)));
    let took = began.elapsed();
    assert_eq!(r.status, 200, "{}", r.body);
    let answers = r.json();
    let answers = answers.as_array().unwrap();
    assert_eq!(answers.len(), 10);
    for (i, a) in answers.iter().enumerate() {
        assert_eq!(a["id"], i, "answered in their order: {a}");
        assert_eq!(a["error"]["code"], -32011, "{a}");
    }
    eprintln!(
        "a batch of 10 calls waiting 400 ms each: answered in {} ms",
        took.as_millis()
    );
    assert!(took < Duration::from_millis(2500), "{took:?}");
    // The cap is the configured one.
    let r = api(
        base,
        Some(&t),
        "POST",
        "/rpc",
        Some(&json!(vec![calls[0].clone(); 11])),
    );
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("at most 10 calls a batch"), "{}", r.body);
}
