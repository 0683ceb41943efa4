//! Remote processors between two real nodes: node A's catalog has a processor pointing at node
//! B's API (learned after B bound port 0), with a token made on B; A's jobs on it run as
//! JSON-RPC calls to B, which runs them as runs of its own, and A records the outcome. A's
//! catalog is on either backend (B's a SQLite file): on PostgreSQL, A is a fleet's node calling
//! out.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Node, Run, Workspace, api, wait_for};

crate::on_both_backends!(
    a_job_of_node_a_runs_on_node_b_and_a_records_results_refusals_and_unreachability,
    outbound_credentials_are_never_shown_and_references_are_read_at_each_call,
    an_operator_cannot_steer_an_admins_rpc_job_through_its_params,
);

/// A token for a new operator on the node of `ws` (made with the CLI while it runs).
pub(crate) fn operator_token(ws: &Workspace, user: &str) -> String {
    ws.ok(&["users", "add", user, "--role", "operator"]);
    let out = ws.ok(&["--json", "tokens", "create", user]);
    let v: Value = serde_json::from_str(&out).unwrap();
    v["token"].as_str().unwrap().to_string()
}

/// `ws`'s catalog with only a test's jobs enabled.
fn quiet(ws: Workspace) -> Workspace {
    ws.ok(&["init"]);
    ws.disable_seeded_jobs();
    ws
}

/// Node B running on port 0, and a token of an operator on it (for node A to call with).
fn node_b() -> (Workspace, Node, String) {
    let wb = quiet(Workspace::new());
    let b = wb.start_node("b");
    let token = operator_token(&wb, "from-a");
    (wb, b, token)
}

/// `host` and `port` of a node's API base URL.
fn host_port(node: &Node) -> (String, String) {
    let addr = node.api.trim_start_matches("http://");
    let (host, port) = addr.rsplit_once(':').unwrap();
    (host.to_string(), port.to_string())
}

/// Queues a run of `job` on A through its API; its id.
pub(crate) fn trigger(a: &Node, token: &str, job: &str, params: Value) -> i64 {
    let r = api(
        &a.api,
        Some(token),
        "POST",
        &format!("/api/v1/jobs/{job}/runs"),
        Some(&json!({ "params": params })),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    r.json()["run_ids"][0].as_i64().unwrap()
}

/// Run `id` of A once it has ended (as A's API shows it).
pub(crate) fn ended(a: &Node, token: &str, id: i64) -> Value {
    wait_for(30.0, &format!("run {id} to end"), || {
        let r = api(
            &a.api,
            Some(token),
            "GET",
            &format!("/api/v1/runs/{id}"),
            None,
        );
        assert_eq!(r.status, 200, "{}", r.body);
        let v = r.json();
        (!matches!(v["status"].as_str(), Some("queued" | "claimed" | "running"))).then_some(v)
    })
}

/// The three attempts of `job` from run `first` on, once the last is dead.
fn three_attempts(ws: &Workspace, job: &str, first: i64) -> Vec<Run> {
    wait_for(
        30.0,
        &format!("three attempts of {job}, the last dead"),
        || {
            let runs: Vec<_> = ws
                .runs_of(job)
                .into_iter()
                .filter(|r| r.run_id >= first)
                .collect();
            (runs.len() == 3 && runs[2].status == "dead").then_some(runs)
        },
    )
}

/// Node A's catalog: the remote processor `nodeb` and the jobs that run on it.
fn a_catalog(host: &str, port: &str, token: &str) -> String {
    format!(
        r#"version = 1

[processor.nodeb]
ip_address = "{host}"
port = {port}
rpc_password = "{token}"

# A function job on a remote processor calls the function of that name on the node.
[job.echo_on_b]
type = "function"
processor = "nodeb"
max_attempts = 3
backoff_base = 50
backoff_max = 200
payload = {{ function = "debug.echo", from = "a", open_params = ["word"] }}

# An rpc job calls any method of the node: a function, or an engine command.
[job.fail_on_b]
type = "rpc"
processor = "nodeb"
payload = {{ method = "debug.fail", message = "no luck on b" }}

# A's timeout (300 ms) is shorter than the run on B (3 s): A records it timed out.
[job.late_on_b]
type = "rpc"
processor = "nodeb"
timeout = 300
payload = {{ method = "debug.sleep", ms = 3000 }}

# B stops waiting after 100 ms and answers with its run id; A then follows that run.
[job.slow_on_b]
type = "rpc"
processor = "nodeb"
payload = {{ method = "debug.sleep", ms = 600, _timeout_ms = 100 }}
"#
    )
}

fn a_job_of_node_a_runs_on_node_b_and_a_records_results_refusals_and_unreachability(ws: Workspace) {
    let (wb, b, b_token) = node_b();
    let (host, port) = host_port(&b);
    let wa = quiet(ws);
    wa.write("remote.conf", &a_catalog(&host, &port, &b_token));
    wa.ok(&["import", "remote.conf"]);
    let a = wa.start_node("a");
    let ta = a.token.clone().unwrap();

    // A job of A runs on B: B's history has the run, A records B's answer as its result.
    let began = Instant::now();
    let id = trigger(&a, &ta, "echo_on_b", json!({"word": "hi"}));
    let run = ended(&a, &ta, id);
    let round_trip = began.elapsed();
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(run["result"], json!({"from": "a", "word": "hi"}), "{run}");
    let on_b = wb.runs_of("rpc.debug.echo");
    assert_eq!(on_b.len(), 1, "{on_b:?}");
    assert_eq!(on_b[0].status, "succeeded");
    let b_run = api(
        &b.api,
        b.token.as_deref(),
        "GET",
        &format!("/api/v1/runs/{}", on_b[0].run_id),
        None,
    )
    .json();
    assert_eq!(
        b_run["params"],
        json!({"from": "a", "word": "hi"}),
        "{b_run}"
    );
    assert_eq!(b_run["result"], run["result"]);
    eprintln!(
        "remote run: trigger on A to result recorded on A in {} ms (A's run took {} ms)",
        round_trip.as_millis(),
        run["elapsed_ms"]
    );

    // A JSON-RPC error is the failure's reason, named with the node.
    let id = trigger(&a, &ta, "fail_on_b", json!({}));
    let run = ended(&a, &ta, id);
    assert_eq!(run["status"], "failed", "{run}");
    let error = run["error"].as_str().unwrap();
    assert!(
        error.starts_with("node `nodeb`: run ") && error.ends_with("failed: no luck on b"),
        "{error}"
    );
    eprintln!("a JSON-RPC error: {error}");

    // A run B has not finished when it answers is followed until it ends.
    let id = trigger(&a, &ta, "slow_on_b", json!({}));
    let run = ended(&a, &ta, id);
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(run["result"], json!({"slept_ms": 600}), "{run}");

    // A run past A's timeout is timed out on A, as a local one would be.
    let began = Instant::now();
    let id = trigger(&a, &ta, "late_on_b", json!({}));
    let run = ended(&a, &ta, id);
    assert_eq!(run["status"], "timed_out", "{run}");
    assert!(
        began.elapsed() < Duration::from_secs(3),
        "timed out at 300 ms, not after B"
    );
    eprintln!("a remote run past its timeout: {}", run["error"]);

    // Wrong credentials: each attempt is refused, retried with backoff, then dead.
    wa.ok(&[
        "processors",
        "edit",
        "nodeb",
        "--rpc-password",
        "jv_not-a-token-of-b",
    ]);
    let id = trigger(&a, &ta, "echo_on_b", json!({}));
    let attempts = three_attempts(&wa, "echo_on_b", id);
    for (n, r) in attempts.iter().enumerate() {
        assert_eq!(r.attempt, n as i64 + 1);
        assert_eq!(r.status, if n < 2 { "failed" } else { "dead" }, "{r:?}");
        let error = r.error.as_deref().unwrap();
        assert!(
            error.starts_with("node `nodeb` refused the credentials (HTTP 401"),
            "{error}"
        );
    }
    eprintln!(
        "wrong credentials: {}",
        attempts[0].error.as_deref().unwrap()
    );
    assert_eq!(
        wb.runs_of("rpc.debug.echo").len(),
        1,
        "B ran nothing for refused calls"
    );

    // B down: each attempt finds B unreachable at its address; retried, then dead.
    wa.ok(&["processors", "edit", "nodeb", "--rpc-password", &b_token]);
    assert_eq!(b.stop(), Some(0));
    let began = Instant::now();
    let id = trigger(&a, &ta, "echo_on_b", json!({}));
    let attempts = three_attempts(&wa, "echo_on_b", id);
    let took = began.elapsed();
    eprintln!("B down: {}", attempts[0].error.as_deref().unwrap());
    for (n, r) in attempts.iter().enumerate() {
        assert_eq!(r.status, if n < 2 { "failed" } else { "dead" }, "{r:?}");
        let error = r.error.as_deref().unwrap();
        assert!(
            error.starts_with(&format!("node `nodeb` unreachable at {host}:{port}: ")),
            "{error}"
        );
    }
    // The retries waited their backoff (50 ms, then 100 ms, half of each jittered).
    let gaps: Vec<i64> = attempts
        .windows(2)
        .map(|w| w[1].started_at.unwrap() - w[0].finished_at.unwrap())
        .collect();
    assert!(gaps[0] >= 25 && gaps[1] >= 50, "{gaps:?}");
    eprintln!(
        "B down: 3 attempts dead in {} ms (gaps between attempts {gaps:?} ms)",
        took.as_millis()
    );
    assert!(took < Duration::from_secs(20));
    // A dead run is retried over the API as a new attempt.
    let dead = attempts[2].run_id;
    let r = api(
        &a.api,
        Some(&ta),
        "POST",
        &format!("/api/v1/runs/{dead}/retry"),
        None,
    );
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.json()["retry_of"], dead);
}

fn outbound_credentials_are_never_shown_and_references_are_read_at_each_call(ws: Workspace) {
    let (wb, b, b_token) = node_b();
    let (host, port) = host_port(&b);
    let wa = quiet(ws);
    wa.write(
        "remote.conf",
        &format!(
            "[processor.nodeb]\nip_address = \"{host}\"\nport = {port}\nrpc_password = \"{b_token}\"\n\
             [job.echo_on_b]\ntype = \"function\"\nprocessor = \"nodeb\"\n\
             payload = {{ function = \"debug.echo\", open_params = [\"via\"] }}\n"
        ),
    );
    wa.ok(&["import", "remote.conf"]);

    // `export` and the processor listing show `***`, never the token.
    let export = wa.ok(&["export"]);
    assert!(export.contains("rpc_password = \"***\""), "{export}");
    let listed = wa.ok(&["--json", "processors", "list"]);
    assert!(listed.contains("\"rpc_password\": \"***\""), "{listed}");
    // Imported back, the export keeps the stored token; into another catalog, where no
    // token stands behind `***`, it is refused and nothing is written.
    wa.write("exported.conf", &export);
    let again = wa.ok(&["--json", "import", "exported.conf"]);
    assert!(again.contains("\"updated\": []"), "{again}");
    let other = wa.another("outbound_credentials_other");
    other.ok(&["init"]);
    let before = other.ok(&["export"]);
    let out = other.run(&["import", &wa.path("exported.conf").display().to_string()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // A catalog file with an error at its line (78), as every import error now is.
    assert_eq!(out.status.code(), Some(78), "{stderr}");
    assert!(
        stderr.contains("rpc_password") && stderr.contains("stands for the secret a catalog holds"),
        "{stderr}"
    );
    assert_eq!(other.ok(&["export"]), before);
    // A change of the token is reported as a change, shown `***` on both sides.
    let changed = wa.ok(&[
        "--json",
        "processors",
        "edit",
        "nodeb",
        "--rpc-password",
        "jv_other",
    ]);
    assert!(changed.contains("\"field\": \"rpc_password\""), "{changed}");
    assert!(!changed.contains("jv_other"), "{changed}");

    // A reference is shown as written, and read when a run calls: the environment...
    wa.ok(&[
        "processors",
        "edit",
        "nodeb",
        "--rpc-password",
        "env:B_TOKEN",
    ]);
    let listed = wa.ok(&["--json", "processors", "list"]);
    assert!(
        listed.contains("\"rpc_password\": \"env:B_TOKEN\""),
        "{listed}"
    );
    wa.set_node_env("B_TOKEN", &b_token);
    let a = wa.start_node("a");
    let ta = a.token.clone().unwrap();
    let run = ended(
        &a,
        &ta,
        trigger(&a, &ta, "echo_on_b", json!({"via": "env"})),
    );
    assert_eq!(run["status"], "succeeded", "{run}");
    // ... or a file (its trailing newline is not part of the token) ...
    let file = wa.write("b.token", &format!("{b_token}\n"));
    let reference = format!("file:{}", file.display());
    wa.ok(&["processors", "edit", "nodeb", "--rpc-password", &reference]);
    let run = ended(
        &a,
        &ta,
        trigger(&a, &ta, "echo_on_b", json!({"via": "file"})),
    );
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(wb.runs_of("rpc.debug.echo").len(), 2);
    // ... and a reference to nothing fails the run, naming what is missing.
    wa.ok(&[
        "processors",
        "edit",
        "nodeb",
        "--rpc-password",
        "env:JOBVISOR_TEST_UNSET",
    ]);
    let run = ended(&a, &ta, trigger(&a, &ta, "echo_on_b", json!({})));
    assert_eq!(run["status"], "failed", "{run}");
    assert_eq!(
        run["error"],
        "processor `nodeb`: rpc_password names the environment variable JOBVISOR_TEST_UNSET, \
         which is not set on this node"
    );
    std::fs::remove_file(&file).unwrap();
    wa.ok(&["processors", "edit", "nodeb", "--rpc-password", &reference]);
    let run = ended(&a, &ta, trigger(&a, &ta, "echo_on_b", json!({})));
    let error = run["error"].as_str().unwrap();
    assert!(
        error.starts_with(&format!(
            "processor `nodeb`: rpc_password names the file {}, which cannot be read",
            file.display()
        )),
        "{error}"
    );

    // Set through the API, the token is in none of its answers.
    let mut answers = vec![
        api(
            &a.api,
            Some(&ta),
            "PATCH",
            "/api/v1/processors/nodeb",
            Some(&json!({ "rpc_password": b_token })),
        )
        .body,
    ];
    for path in [
        "/api/v1/processors",
        "/api/v1/catalog",
        "/api/v1/jobs/echo_on_b",
    ] {
        let r = api(&a.api, Some(&ta), "GET", path, None);
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        answers.push(r.body);
    }
    for body in &answers {
        assert!(!body.contains(&b_token), "{body}");
    }
    let run = ended(&a, &ta, trigger(&a, &ta, "echo_on_b", json!({})));
    assert_eq!(run["status"], "succeeded", "{run}");

    // Only admins define what calls another node: an operator may not create an rpc job, a
    // job on the remote processor, or move a job onto it.
    let t_op = operator_token(&wa, "op");
    let create =
        |token: &str, body: Value| api(&a.api, Some(token), "POST", "/api/v1/jobs", Some(&body));
    let rpc_job = json!({"name": "r", "type": "rpc", "processor": "nodeb",
                         "payload": {"method": "node.status"}});
    let fn_job = json!({"name": "f", "type": "function", "processor": "nodeb",
                        "payload": {"function": "debug.echo"}});
    for body in [&rpc_job, &fn_job] {
        let r = create(&t_op, body.clone());
        assert_eq!(r.status, 403, "{}", r.body);
    }
    let local = json!({"name": "l", "type": "function", "processor": "main",
                       "payload": {"function": "debug.echo"}});
    assert_eq!(create(&t_op, local).status, 201);
    let moved = api(
        &a.api,
        Some(&t_op),
        "PATCH",
        "/api/v1/jobs/l",
        Some(&json!({"processor": "nodeb"})),
    );
    assert_eq!(moved.status, 403, "{}", moved.body);
    assert!(
        moved.body.contains("remote processor `nodeb`"),
        "{}",
        moved.body
    );
    assert_eq!(create(&ta, rpc_job).status, 201);

    // The token is in no log and no answer A gave.
    drop(a);
    drop(b);
    for log in [wa.path("a.log"), wb.path("b.log")] {
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(
            !text.contains(&b_token),
            "{} shows the token",
            log.display()
        );
    }
}

/// Issue 27, point 9: an operator triggered an admin's rpc job `{method: job.run, job: bjob}`
/// with `{"job": "bsecret"}` and node B ran `bsecret` with the credential A stores.
fn an_operator_cannot_steer_an_admins_rpc_job_through_its_params(ws: Workspace) {
    let (wb, b, b_token) = node_b();
    wb.write(
        "b.conf",
        "version = 1\n\n[processor.main]\ninstances = 1\n\n[job.bjob]\ntype = \"function\"\nprocessor = \"main\"\n\
         payload = { function = \"debug.echo\" }\n\n[job.bsecret]\ntype = \"function\"\n\
         processor = \"main\"\npayload = { function = \"debug.echo\", secret = true }\n",
    );
    wb.ok(&["import", "b.conf"]);
    let (host, port) = host_port(&b);
    let wa = quiet(ws);
    wa.write(
        "remote.conf",
        &format!(
            r#"version = 1

[processor.main]
instances = 1

[processor.nodeb]
ip_address = "{host}"
port = {port}
rpc_password = "{b_token}"

[job.run_b]
type = "rpc"
processor = "nodeb"
payload = {{ method = "job.run", job = "bjob" }}

# The admin lets a run give bjob's params, and nothing else.
[job.run_b_open]
type = "rpc"
processor = "nodeb"
payload = {{ method = "job.run", job = "bjob", open_params = ["params"] }}

# A workflow passes its params to its steps: the step's executor holds the same rule.
[job.via_workflow]
type = "workflow"
processor = "main"
payload.steps = [{{ name = "call", job = "run_b" }}]
"#
        ),
    );
    wa.ok(&["import", "remote.conf"]);
    let a = wa.start_node("a");
    let operator = operator_token(&wa, "otto");

    // The payload's `job` is the admin's: the trigger is refused naming the field (422 over
    // REST, -32602 over JSON-RPC), nothing is queued, B runs nothing.
    for (job, params, field) in [
        ("run_b", json!({"job": "bsecret"}), "params.job"),
        ("run_b", json!({"method": "node.pause"}), "params.method"),
        ("run_b", json!({"params": {"x": 1}}), "params.params"),
        (
            "run_b_open",
            json!({"job": "bsecret", "params": {}}),
            "params.job",
        ),
    ] {
        let r = api(
            &a.api,
            Some(&operator),
            "POST",
            &format!("/api/v1/jobs/{job}/runs"),
            Some(&json!({ "params": params })),
        );
        assert_eq!(r.status, 422, "{job} {params}: {}", r.body);
        assert_eq!(r.json()["field"], field, "{}", r.body);
        eprintln!("{job} with {params}: {}", r.json()["reason"]);
        let call = json!({"jsonrpc": "2.0", "method": "job.run",
                          "params": {"job": job, "params": params}, "id": 1});
        let r = api(&a.api, Some(&operator), "POST", "/rpc", Some(&call));
        assert_eq!(r.status, 422, "{}", r.body);
        assert_eq!(r.json()["error"]["data"]["field"], field, "{}", r.body);
    }
    assert!(wa.runs_of("run_b").is_empty() && wa.runs_of("run_b_open").is_empty());
    let run = ended(
        &a,
        &operator,
        trigger(&a, &operator, "via_workflow", json!({"job": "bsecret"})),
    );
    assert_eq!(run["status"], "failed", "{run}");
    let step = &wa.runs_of("run_b")[0];
    assert_eq!(step.status, "failed", "{step:?}");
    let error = step.error.as_deref().unwrap();
    assert!(
        error.starts_with("params.job: the job's payload fixes `job`"),
        "{error}"
    );
    assert!(wb.runs_of("bsecret").is_empty());
    assert!(wb.runs_of("bjob").is_empty());
    assert_eq!(
        api(&b.api, b.token.as_deref(), "GET", "/api/v1/node", None).json()["paused"],
        false
    );

    // A field the payload declares open is filled by the run; the rest stays the admin's.
    let run = ended(
        &a,
        &operator,
        trigger(
            &a,
            &operator,
            "run_b_open",
            json!({"params": {"day": "mon"}}),
        ),
    );
    assert_eq!(run["status"], "succeeded", "{run}");
    let on_b = wb.runs_of("bjob");
    assert_eq!(on_b.len(), 1, "{on_b:?}");
    assert_eq!(on_b[0].run_id, run["result"]["run_id"].as_i64().unwrap());
    let b_run = ended(&b, b.token.as_deref().unwrap(), on_b[0].run_id);
    assert_eq!(b_run["params"], json!({"day": "mon"}), "{b_run}");
    assert!(wb.runs_of("bsecret").is_empty());
}
