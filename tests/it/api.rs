//! The HTTP API of a real node (`jobvisor run --bind 127.0.0.1:0`): REST round trips, security
//! defaults, and bad requests.

use serde_json::{Value, json};

use crate::support::{Node, Response, Workspace, api, http_raw, text, wait_for};

crate::on_both_backends!(
    triggers_queue_runs_that_the_node_runs_and_runs_can_be_read_cancelled_and_retried,
    a_first_start_prints_an_admin_token_once_and_stores_only_its_hash,
    jobs_round_trip_through_the_api_and_the_audit_names_the_user,
    jobs_are_filtered_sorted_and_paged_and_runs_paged_by_time_and_id,
    roles_viewers_read_operators_run_and_only_admins_define_code,
    processors_objects_groups_nodes_decisions_stats_and_the_catalog_are_served,
    without_credentials_every_route_but_healthz_is_401_and_bad_ones_are_throttled,
    host_names_outside_the_allowlist_are_refused,
    a_job_paused_through_the_api_or_json_rpc_waits_queued_until_resumed,
    a_run_not_started_within_its_jobs_deadline_ends_expired_not_failed,
    an_aging_run_overtakes_a_stream_of_more_important_work_within_its_bound,
    a_schedule_changed_through_the_api_is_seen_at_once_and_by_another_process_at_the_next_look,
);

/// A node on a fresh catalog with only the test's jobs active, and its admin token.
fn node(ws: Workspace) -> (Workspace, Node, String) {
    ws.ok(&["init"]);
    ws.disable_seeded_jobs();
    let node = ws.start_node("n1");
    let token = node
        .token
        .clone()
        .expect("a first start prints an admin token");
    (ws, node, token)
}

/// With `database.watch_interval` at a minute, a job whose schedule the CLI (another process)
/// changed to every second has not run 2.5 s later: the node looks at the catalog only every
/// minute. One changed the same way through the API has its first run within 3 s: the node was
/// told at once (and loads the CLI's change with it).
fn a_schedule_changed_through_the_api_is_seen_at_once_and_by_another_process_at_the_next_look(
    ws: Workspace,
) {
    ws.ok(&["init"]);
    ws.disable_seeded_jobs();
    let never = "[job.by_cli]\ntype = \"function\"\nprocessor = \"main\"\ncron = \"0 0 1 1 *\"\n\
        payload = { function = \"debug.noop\" }\n\n[job.by_api]\ntype = \"function\"\n\
        processor = \"main\"\ncron = \"0 0 1 1 *\"\npayload = { function = \"debug.noop\" }\n";
    ws.set_node_env("JOBVISOR__DATABASE__WATCH_INTERVAL", "60000");
    let (node, t) = node_with(&ws, never);
    let base = node.api.as_str();
    let succeeded = |job: &str| {
        let path = format!("/api/v1/runs?job={job}&status=succeeded");
        ok(api(base, Some(&t), "GET", &path, None), 200)
            .as_array()
            .map_or(0, Vec::len)
    };
    // Both jobs planned: the node's start-up and policy loads are behind it.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    ws.ok(&["jobs", "edit", "by_cli", "--cron", "* * * * * *"]);
    std::thread::sleep(std::time::Duration::from_millis(2500));
    assert_eq!(
        succeeded("by_cli"),
        0,
        "the node looked before its interval"
    );
    let changed = std::time::Instant::now();
    ok(
        api(
            base,
            Some(&t),
            "PATCH",
            "/api/v1/jobs/by_api",
            Some(&json!({"cron": "* * * * * *"})),
        ),
        200,
    );
    let first = wait_for(10.0, "a run of the job changed through the API", || {
        (succeeded("by_api") > 0).then(|| changed.elapsed())
    });
    assert!(
        first <= std::time::Duration::from_secs(3),
        "its first run came {first:?} after the API changed it"
    );
    wait_for(
        3.0,
        "the CLI's change, loaded with the API's, to run",
        || (succeeded("by_cli") > 0).then_some(()),
    );
    assert_eq!(node.stop(), Some(0));
}

/// Imports the job.conf text `conf`, then starts node `n1` and answers it with its admin token.
fn node_with(ws: &Workspace, conf: &str) -> (Node, String) {
    let file = ws.write("test.conf", conf);
    ws.ok(&["import", &file.display().to_string()]);
    let node = ws.start_node("n1");
    let token = node
        .token
        .clone()
        .expect("a first start prints an admin token");
    (node, token)
}

/// Queues a run of `job` through the API; its id.
fn queue_one(base: &str, token: &str, job: &str) -> i64 {
    let path = format!("/api/v1/jobs/{job}/runs");
    ok(api(base, Some(token), "POST", &path, None), 201)["run_ids"][0]
        .as_i64()
        .unwrap()
}

/// A token for a new user with `role`, made with the CLI while the node runs.
fn token_for(ws: &Workspace, user: &str, role: &str) -> String {
    ws.ok(&["users", "add", user, "--role", role]);
    let out = ws.ok(&["--json", "tokens", "create", user]);
    let v: Value = serde_json::from_str(&out).unwrap();
    v["token"].as_str().unwrap().to_string()
}

fn ok(r: Response, status: u16) -> Value {
    assert_eq!(r.status, status, "{}", r.body);
    if r.body.is_empty() {
        Value::Null
    } else {
        r.json()
    }
}

fn a_first_start_prints_an_admin_token_once_and_stores_only_its_hash(ws: Workspace) {
    let (ws, node, token) = node(ws);
    assert!(token.starts_with("jv_") && token.len() == 67, "{token}");
    let db = ws.dump();
    let needle = token.as_bytes();
    assert!(
        !db.windows(needle.len()).any(|w| w == needle),
        "the token must not be stored"
    );
    assert_eq!(node.stop(), Some(0));
    // A second start has a user: no token again.
    let again = ws.start_node("n1");
    assert_eq!(again.token, None);
    let users = ws.ok(&["users", "list"]);
    assert!(users.contains("admin"), "{users}");
}

fn jobs_round_trip_through_the_api_and_the_audit_names_the_user(ws: Workspace) {
    let (ws, node, t) = node(ws);
    let base = &node.api;
    let created = ok(
        api(
            base,
            Some(&t),
            "POST",
            "/api/v1/jobs",
            Some(
                &json!({"name": "hello", "type": "function", "processor": "main",
                         "payload": {"function": "debug.echo"}, "priority": 5,
                         "group": "housekeeping"}),
            ),
        ),
        201,
    );
    assert_eq!(created["change"], "changed");
    assert_eq!(created["job"]["priority"], 5);
    let got = ok(api(base, Some(&t), "GET", "/api/v1/jobs/hello", None), 200);
    assert_eq!(got["type"], "function");
    let patched = ok(
        api(
            base,
            Some(&t),
            "PATCH",
            "/api/v1/jobs/hello",
            Some(&json!({"priority": 7, "group": null, "cron": "0 3 * * *"})),
        ),
        200,
    );
    assert_eq!(patched["job"]["priority"], 7);
    assert_eq!(patched["job"]["group"], Value::Null);
    let unchanged = ok(
        api(
            base,
            Some(&t),
            "PATCH",
            "/api/v1/jobs/hello",
            Some(&json!({"priority": 7})),
        ),
        200,
    );
    assert_eq!(unchanged["change"], "unchanged");
    // Paging, filters and sort.
    let page = ok(
        api(
            base,
            Some(&t),
            "GET",
            "/api/v1/jobs?limit=2&offset=1&sort=priority",
            None,
        ),
        200,
    );
    assert_eq!(page["items"].as_array().unwrap().len(), 2);
    assert!(page["total"].as_u64().unwrap() > 2);
    let one = ok(
        api(
            base,
            Some(&t),
            "GET",
            "/api/v1/jobs?type=function&enabled=true",
            None,
        ),
        200,
    );
    assert_eq!(one["total"], 1, "{one}");
    assert_eq!(one["items"][0]["name"], "hello");
    let next = ok(
        api(
            base,
            Some(&t),
            "GET",
            "/api/v1/jobs/hello/next?count=3",
            None,
        ),
        200,
    );
    assert_eq!(next["next"].as_array().unwrap().len(), 3);
    let pinned = ok(
        api(
            base,
            Some(&t),
            "PUT",
            "/api/v1/jobs/hello/pin",
            Some(&json!({"pin": "active"})),
        ),
        200,
    );
    assert_eq!(pinned["pinned"], "active");
    ok(
        api(base, Some(&t), "POST", "/api/v1/jobs/hello/disable", None),
        200,
    );
    let listed = ok(
        api(
            base,
            Some(&t),
            "GET",
            "/api/v1/jobs?enabled=false&limit=1000",
            None,
        ),
        200,
    );
    assert!(
        listed["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|j| j["name"] == "hello")
    );
    ok(
        api(base, Some(&t), "POST", "/api/v1/jobs/hello/enable", None),
        200,
    );
    // The audit log names the user the token belongs to.
    let conn = ws.catalog();
    let actors: Vec<String> = conn
        .rows("SELECT actor FROM audit WHERE subject = 'hello'")
        .iter()
        .map(|r| r[0].as_str().unwrap().to_string())
        .collect();
    assert!(
        actors.len() >= 4 && actors.iter().all(|a| a == "admin"),
        "{actors:?}"
    );
    ok(
        api(base, Some(&t), "DELETE", "/api/v1/jobs/hello", None),
        204,
    );
    ok(api(base, Some(&t), "GET", "/api/v1/jobs/hello", None), 404);
    // Every change's audit row holds the fields before and after: the creation's values, the
    // patch's changed fields, the enable's state, the removal's last definition.
    let details: Vec<(String, Value)> = conn
        .rows("SELECT action, detail FROM audit WHERE subject = 'hello' ORDER BY audit_id")
        .iter()
        .map(|r| {
            let (a, d) = (r[0].as_str().unwrap(), r[1].as_str().unwrap());
            (a.to_string(), serde_json::from_str(d).unwrap())
        })
        .collect();
    let field = |d: &Value, name: &str| -> (Value, Value) {
        let f = d["changes"][0]["fields"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["field"] == name)
            .unwrap_or_else(|| panic!("no field {name} in {d}"))
            .clone();
        (f["before"].clone(), f["after"].clone())
    };
    let of = |action: &str| {
        details
            .iter()
            .find(|(a, _)| a == action)
            .unwrap_or_else(|| panic!("no {action} row in {details:?}"))
            .1
            .clone()
    };
    assert_eq!(field(&of("job.add"), "priority"), (Value::Null, json!("5")));
    let edit = details
        .iter()
        .find(|(a, d)| a == "job.edit" && d.to_string().contains("priority"))
        .map(|(_, d)| d.clone())
        .unwrap_or_else(|| panic!("no edit of the priority in {details:?}"));
    assert_eq!(field(&edit, "priority"), (json!("5"), json!("7")));
    assert_eq!(
        field(&of("job.enable"), "enabled"),
        (json!("false"), json!("true"))
    );
    // The pin's row says what the pin was before.
    let pin = of("job.pin");
    assert_eq!(field(&pin, "pin"), (Value::Null, json!("active")), "{pin}");
    assert_eq!(pin["node"], "n1");
    let removed = of("job.remove");
    assert_eq!(removed["changes"][0]["change"], "removed");
    assert_eq!(field(&removed, "priority"), (json!("7"), Value::Null));
}

fn triggers_queue_runs_that_the_node_runs_and_runs_can_be_read_cancelled_and_retried(
    ws: Workspace,
) {
    let (ws, node, t) = node(ws);
    let base = &node.api;
    ok(
        api(
            base,
            Some(&t),
            "POST",
            "/api/v1/jobs",
            Some(
                &json!({"name": "echo", "type": "function", "processor": "main",
                         "payload": {"function": "debug.echo"}}),
            ),
        ),
        201,
    );
    let one = ok(
        api(
            base,
            Some(&t),
            "POST",
            "/api/v1/jobs/echo/runs",
            Some(&json!({"params": {"n": 1}})),
        ),
        201,
    );
    let id = one["run_ids"][0].as_i64().unwrap();
    let batch = ok(
        api(
            base,
            Some(&t),
            "POST",
            "/api/v1/jobs/echo/runs/batch",
            Some(&json!({"runs": [{"params": {"n": 2}}, {}, {"params": {"n": 4}}]})),
        ),
        201,
    );
    assert_eq!(batch["run_ids"].as_array().unwrap().len(), 3);
    // One trigger path: API triggers are audited like the CLI's, naming the user (one row for
    // the single run, one for the batch).
    let audited: Vec<(String, String)> = ws
        .catalog()
        .rows("SELECT actor, detail FROM audit WHERE action = 'job.run' AND subject = 'echo'")
        .iter()
        .map(|r| (r[0].as_str().unwrap().into(), r[1].as_str().unwrap().into()))
        .collect();
    assert_eq!(audited.len(), 2, "{audited:?}");
    assert!(audited.iter().all(|(a, _)| a == "admin"), "{audited:?}");
    assert!(
        audited[0].1.contains(&format!("\"run_id\":{id}")),
        "{audited:?}"
    );
    assert!(audited[1].1.contains("\"runs\":3"), "{audited:?}");
    wait_for(20.0, "the four runs to succeed", || {
        let runs = ws.runs_of("echo");
        (runs.len() == 4 && runs.iter().all(|r| r.status == "succeeded")).then_some(())
    });
    let run = ok(
        api(base, Some(&t), "GET", &format!("/api/v1/runs/{id}"), None),
        200,
    );
    assert_eq!(run["status"], "succeeded");
    assert_eq!(run["params"], json!({"n": 1}));
    let listed = ok(
        api(
            base,
            Some(&t),
            "GET",
            "/api/v1/runs?job=echo&status=succeeded&since=1h",
            None,
        ),
        200,
    );
    assert_eq!(listed.as_array().unwrap().len(), 4);
    let retried = ok(
        api(
            base,
            Some(&t),
            "POST",
            &format!("/api/v1/runs/{id}/retry"),
            None,
        ),
        409,
    );
    assert!(
        retried["reason"].as_str().unwrap().contains("succeeded"),
        "{retried}"
    );
    // A paused node queues but does not run; a queued run cancels at once.
    let paused = ok(api(base, Some(&t), "POST", "/api/v1/node/pause", None), 200);
    assert_eq!(paused["paused"], true);
    let queued = ok(
        api(base, Some(&t), "POST", "/api/v1/jobs/echo/runs", None),
        201,
    );
    let qid = queued["run_ids"][0].as_i64().unwrap();
    let cancelled = ok(
        api(
            base,
            Some(&t),
            "POST",
            &format!("/api/v1/runs/{qid}/cancel"),
            None,
        ),
        200,
    );
    assert_eq!(cancelled["result"], "cancelled");
    let retry = ok(
        api(
            base,
            Some(&t),
            "POST",
            &format!("/api/v1/runs/{qid}/retry"),
            None,
        ),
        201,
    );
    assert_eq!(retry["retry_of"], qid);
    ok(
        api(base, Some(&t), "POST", "/api/v1/node/resume", None),
        200,
    );
    wait_for(20.0, "the retry to run", || {
        let runs = ws.runs_of("echo");
        runs.iter()
            .any(|r| r.retry_of == Some(qid) && r.status == "succeeded")
            .then_some(())
    });
    // The pause and the resume are audit rows naming the user, with the state before and after.
    let rows: Vec<(String, String, Value)> = ws
        .catalog()
        .rows(
            "SELECT action, actor, detail FROM audit WHERE action LIKE 'node.%' ORDER BY audit_id",
        )
        .iter()
        .map(|r| {
            let text = |i: usize| r[i].as_str().unwrap().to_string();
            (text(0), text(1), serde_json::from_str(&text(2)).unwrap())
        })
        .collect();
    let shape = |(action, actor, d): &(String, String, Value)| {
        let f = &d["changes"][0]["fields"][0];
        (
            action.clone(),
            actor.clone(),
            f["field"].clone(),
            f["before"].clone(),
            f["after"].clone(),
        )
    };
    assert_eq!(
        rows.iter().map(shape).collect::<Vec<_>>(),
        [
            (
                "node.pause".into(),
                "admin".into(),
                json!("paused"),
                json!("false"),
                json!("true")
            ),
            (
                "node.resume".into(),
                "admin".into(),
                json!("paused"),
                json!("true"),
                json!("false")
            ),
        ],
        "{rows:?}"
    );
}

fn jobs_are_filtered_sorted_and_paged_and_runs_paged_by_time_and_id(ws: Workspace) {
    let (ws, node, t) = node(ws);
    let base = node.api.as_str();
    let conf = ws.write(
        "f.conf",
        "[processor.main]\n[processor.side]\n[group.reports]\n[group.sync]\n\
         [job.r1]\ntype = \"function\"\nprocessor = \"main\"\ngroup = \"reports\"\npriority = 30\npayload = { function = \"debug.noop\" }\n\
         [job.r2]\ntype = \"function\"\nprocessor = \"side\"\ngroup = \"reports\"\npriority = 10\npayload = { function = \"debug.noop\" }\n\
         [job.s1]\ntype = \"function\"\nprocessor = \"side\"\ngroup = \"sync\"\npriority = 20\npayload = { function = \"debug.noop\" }\n",
    );
    ws.ok(&["import", conf.to_str().unwrap()]);
    ws.ok(&["--node", "n1", "jobs", "pin", "r2", "inactive"]);
    let names = |q: &str| -> Vec<String> {
        let page = ok(
            api(base, Some(&t), "GET", &format!("/api/v1/jobs?{q}"), None),
            200,
        );
        page["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| j["name"].as_str().unwrap().to_string())
            .filter(|n| ["r1", "r2", "s1"].contains(&n.as_str()))
            .collect()
    };
    assert_eq!(names("group=reports"), ["r1", "r2"]);
    assert_eq!(names("processor=side"), ["r2", "s1"]);
    assert_eq!(names("group=reports&processor=side"), ["r2"]);
    assert_eq!(
        names("activation=standby&group=reports"),
        ["r2"],
        "pinned inactive"
    );
    assert_eq!(names("sort=priority&group=reports"), ["r1", "r2"]);
    assert_eq!(names("sort=priority&processor=side"), ["s1", "r2"]);
    let page = ok(
        api(
            base,
            Some(&t),
            "GET",
            "/api/v1/jobs?sort=priority&processor=side&limit=1&offset=1",
            None,
        ),
        200,
    );
    assert_eq!(
        (page["total"].as_i64(), page["items"][0]["name"].as_str()),
        (Some(2), Some("r2"))
    );
    // Runs: pages by id (`before` the last id listed), and a time range.
    ok(api(base, Some(&t), "POST", "/api/v1/node/pause", None), 200);
    let batch = ok(
        api(
            base,
            Some(&t),
            "POST",
            "/api/v1/jobs/r1/runs/batch",
            Some(&json!({"runs": [{}, {}, {}, {}, {}]})),
        ),
        201,
    );
    let ids: Vec<i64> = batch["run_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    let listed = |q: &str| -> Vec<i64> {
        ok(
            api(
                base,
                Some(&t),
                "GET",
                &format!("/api/v1/runs?job=r1&{q}"),
                None,
            ),
            200,
        )
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect()
    };
    let first = listed("limit=2");
    assert_eq!(first, [ids[4], ids[3]]);
    let second = listed(&format!("limit=2&before={}", first[1]));
    assert_eq!(second, [ids[2], ids[1]]);
    let last = listed(&format!("limit=2&before={}", second[1]));
    assert_eq!(last, [ids[0]]);
    assert_eq!(listed("until=2000-01-01T00:00:00Z"), Vec::<i64>::new());
    assert_eq!(listed("since=1h&until=2999-01-01T00:00:00Z").len(), 5);
    let bad = api(
        base,
        Some(&t),
        "GET",
        "/api/v1/runs?since=1h&until=2h",
        None,
    );
    assert_eq!(bad.status, 422, "{}", bad.body);
    assert_eq!(bad.json()["field"], "until");
}

fn processors_objects_groups_nodes_decisions_stats_and_the_catalog_are_served(ws: Workspace) {
    let (_ws, node, t) = node(ws);
    let base = &node.api;
    ok(
        api(
            base,
            Some(&t),
            "POST",
            "/api/v1/processors",
            Some(
                &json!({"name": "far", "instances": 1, "ip_address": "127.0.0.1", "port": 9,
                         "rpc_user": "u", "rpc_password": "s3cret-password"}),
            ),
        ),
        201,
    );
    let procs = api(base, Some(&t), "GET", "/api/v1/processors", None);
    assert_eq!(procs.status, 200);
    assert!(procs.body.contains("\"***\""), "{}", procs.body);
    assert!(!procs.body.contains("s3cret-password"));
    let export = api(base, Some(&t), "GET", "/api/v1/catalog", None);
    assert_eq!(export.status, 200);
    assert!(!export.body.contains("s3cret-password"), "{}", export.body);
    // Importing the redacted export back keeps the stored password.
    let auth = format!("Bearer {t}");
    let imported = http_raw(
        base,
        "POST",
        "/api/v1/catalog",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/toml"),
        ],
        export.body.as_bytes(),
    );
    assert_eq!(imported.status, 200, "{}", imported.body);
    assert_eq!(imported.json()["updated"], json!([]), "{}", imported.body);
    ok(
        api(
            base,
            Some(&t),
            "PATCH",
            "/api/v1/processors/far",
            Some(&json!({"instances": 2})),
        ),
        200,
    );
    ok(
        api(
            base,
            Some(&t),
            "POST",
            "/api/v1/objects",
            Some(&json!({"name": "events", "type": "table", "conn_string": "events.db"})),
        ),
        201,
    );
    let objects = ok(api(base, Some(&t), "GET", "/api/v1/objects", None), 200);
    assert!(
        objects
            .as_array()
            .unwrap()
            .iter()
            .any(|o| o["name"] == "events")
    );
    ok(
        api(base, Some(&t), "DELETE", "/api/v1/objects/events", None),
        204,
    );
    ok(
        api(base, Some(&t), "DELETE", "/api/v1/processors/far", None),
        204,
    );
    let groups = ok(api(base, Some(&t), "GET", "/api/v1/groups", None), 200);
    assert!(
        groups
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["name"] == "housekeeping")
    );
    let nodes = ok(api(base, Some(&t), "GET", "/api/v1/nodes", None), 200);
    assert_eq!(nodes[0]["name"], "n1");
    ok(
        api(
            base,
            Some(&t),
            "GET",
            "/api/v1/decisions?limit=5&all_nodes=true",
            None,
        ),
        200,
    );
    let status = ok(api(base, Some(&t), "GET", "/api/v1/node", None), 200);
    assert_eq!(status["node"], "n1");
    ok(api(base, Some(&t), "GET", "/readyz", None), 200);
    wait_for(20.0, "a device stat", || {
        let types = ok(api(base, Some(&t), "GET", "/api/v1/stats", None), 200);
        types
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["name"] == "device.cpu_used")
            .then_some(())
    });
    let series = ok(
        api(
            base,
            Some(&t),
            "GET",
            "/api/v1/stats/device.cpu_used?from=10m&step=60",
            None,
        ),
        200,
    );
    assert_eq!(series["step_ms"], 60_000);
    assert!(!series["points"].as_array().unwrap().is_empty(), "{series}");
}

fn without_credentials_every_route_but_healthz_is_401_and_bad_ones_are_throttled(ws: Workspace) {
    let (_ws, node, t) = node(ws);
    let base = &node.api;
    assert_eq!(api(base, None, "GET", "/healthz", None).status, 200);
    let r = api(base, None, "GET", "/api/v1/jobs", None);
    assert_eq!(r.status, 401);
    assert!(r.header("www-authenticate").is_some());
    for i in 0..10 {
        let r = api(
            base,
            Some(&format!("jv_{:064}", i)),
            "GET",
            "/api/v1/jobs",
            None,
        );
        assert_eq!(r.status, 401, "attempt {i}: {}", r.body);
    }
    // The eleventh failure of the same token prefix is throttled; a valid token never is
    // (`api_auth.rs` has the rest).
    let r = api(
        base,
        Some(&format!("jv_{:064}", 10)),
        "GET",
        "/api/v1/jobs",
        None,
    );
    assert_eq!(r.status, 429, "{}", r.body);
    assert!(r.header("retry-after").is_some());
    assert_eq!(api(base, Some(&t), "GET", "/api/v1/jobs", None).status, 200);
    // /healthz stays open.
    assert_eq!(api(base, None, "GET", "/healthz", None).status, 200);
}

fn roles_viewers_read_operators_run_and_only_admins_define_code(ws: Workspace) {
    let (ws, node, admin) = node(ws);
    let base = &node.api;
    let viewer = token_for(&ws, "vera", "viewer");
    let operator = token_for(&ws, "otto", "operator");
    ok(api(base, Some(&viewer), "GET", "/api/v1/jobs", None), 200);
    let r = api(
        base,
        Some(&viewer),
        "POST",
        "/api/v1/jobs/device_stats/runs",
        None,
    );
    assert_eq!(r.status, 403, "{}", r.body);
    let command = json!({"name": "sh", "type": "command", "processor": "main",
                         "payload": {"argv": ["/bin/true"]}});
    let r = api(
        base,
        Some(&operator),
        "POST",
        "/api/v1/jobs",
        Some(&command),
    );
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(r.body.contains("admin"), "{}", r.body);
    ok(
        api(
            base,
            Some(&operator),
            "POST",
            "/api/v1/jobs/device_stats/runs",
            None,
        ),
        201,
    );
    let f = json!({"name": "f", "type": "function", "processor": "main",
                   "payload": {"function": "debug.echo"}});
    ok(
        api(base, Some(&operator), "POST", "/api/v1/jobs", Some(&f)),
        201,
    );
    // An operator cannot turn a job into a command job.
    let r = api(
        base,
        Some(&operator),
        "PATCH",
        "/api/v1/jobs/f",
        Some(&json!({"type": "command"})),
    );
    assert_eq!(r.status, 403, "{}", r.body);
    let r = api(
        base,
        Some(&operator),
        "POST",
        "/api/v1/processors",
        Some(&json!({"name": "p"})),
    );
    assert_eq!(r.status, 403, "{}", r.body);
    ok(
        api(base, Some(&admin), "POST", "/api/v1/jobs", Some(&command)),
        201,
    );
    let r = api(base, Some(&operator), "DELETE", "/api/v1/jobs/sh", None);
    assert_eq!(r.status, 403, "{}", r.body);
    // A revoked token stops working (within the 5 s the node trusts a checked token).
    let tokens = ws.ok(&["--json", "tokens", "list"]);
    let tokens: Value = serde_json::from_str(&tokens).unwrap();
    let id = tokens
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["user"] == "vera")
        .unwrap()["id"]
        .to_string();
    ws.ok(&["tokens", "revoke", &id]);
    wait_for(10.0, "the revoked token to be refused", || {
        (api(base, Some(&viewer), "GET", "/api/v1/jobs", None).status == 401).then_some(())
    });
}

fn host_names_outside_the_allowlist_are_refused(ws: Workspace) {
    let (_ws, node, t) = node(ws);
    let auth = format!("Bearer {t}");
    for host in ["evil.example", "evil.example:7878", "127.0.0.1.nip.io"] {
        let r = http_raw(
            &node.api,
            "GET",
            "/api/v1/jobs",
            &[("Host", host), ("Authorization", &auth)],
            b"",
        );
        assert_eq!(r.status, 421, "{host}: {}", r.body);
        assert_eq!(r.json()["field"], "Host");
    }
}

#[test]
fn a_non_loopback_bind_is_refused_until_the_catalog_has_a_user() {
    let ws = Workspace::new();
    ws.ok(&["init"]);
    let out = ws.run(&["run", "--bind", "0.0.0.0:0", "--data-dir", "data"]);
    assert_eq!(out.status.code(), Some(78), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no user") && err.contains("users add"),
        "{err}"
    );
    assert!(
        !ws.path("data").exists(),
        "nothing may be started or written"
    );
    ws.ok(&["users", "add", "root", "--role", "admin"]);
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_jobvisor"))
        .args(["--db"])
        .arg(ws.db())
        .args([
            "run",
            "--bind",
            "0.0.0.0:0",
            "--node-name",
            "wide",
            "--data-dir",
        ])
        .arg(ws.path("data"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    use std::io::BufRead as _;
    let stdout = child.stdout.take().unwrap();
    let started = std::io::BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .any(|l| l.trim().starts_with("api:"));
    let _ = child.kill();
    let _ = child.wait();
    assert!(started, "with a user the node serves on a wide address");
}

/// Pause and resume through the API and JSON-RPC as through the CLI: a paused job's runs wait
/// `queued`, the pause is listed with who and why, viewers may read but not pause, a bad scope
/// is a 422 naming the field, and a resume lets the waiting run start.
fn a_job_paused_through_the_api_or_json_rpc_waits_queued_until_resumed(ws: Workspace) {
    let (ws, node, t) = node(ws);
    let base = node.api.as_str();
    ws.ok(&[
        "jobs",
        "add",
        "echo",
        "--type",
        "function",
        "--processor",
        "main",
        "--payload",
        r#"{"function":"debug.noop"}"#,
    ]);
    let viewer = token_for(&ws, "vera", "viewer");
    let pause = json!({"scope": "job", "name": "echo", "reason": "maintenance"});
    let refused = api(base, Some(&viewer), "POST", "/api/v1/pauses", Some(&pause));
    assert_eq!(refused.status, 403, "{}", refused.body);
    let bad = api(
        base,
        Some(&t),
        "POST",
        "/api/v1/pauses",
        Some(&json!({"scope": "queue", "name": "echo"})),
    );
    assert_eq!(bad.status, 422, "{}", bad.body);
    assert_eq!(bad.json()["field"], "scope", "{}", bad.body);
    let missing = api(
        base,
        Some(&t),
        "POST",
        "/api/v1/pauses",
        Some(&json!({"scope": "job", "name": "nope"})),
    );
    assert_eq!(missing.status, 404, "{}", missing.body);

    let paused = ok(
        api(base, Some(&t), "POST", "/api/v1/pauses", Some(&pause)),
        201,
    );
    assert_eq!(
        (&paused["scope"], &paused["name"], &paused["node"]),
        (&json!("job"), &json!("echo"), &json!("n1"))
    );
    assert_eq!(paused["paused_by"], "admin", "{paused}");
    let queued = ok(
        api(base, Some(&t), "POST", "/api/v1/jobs/echo/runs", None),
        201,
    );
    let id = queued["run_ids"][0].as_i64().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let run = ok(
        api(base, Some(&t), "GET", &format!("/api/v1/runs/{id}"), None),
        200,
    );
    assert_eq!(run["status"], "queued", "{run}");
    let listed = ok(api(base, Some(&viewer), "GET", "/api/v1/pauses", None), 200);
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    let metrics = api(base, Some(&viewer), "GET", "/metrics", None).body;
    assert!(
        metrics.contains("jobvisor_pauses{scope=\"job\",name=\"echo\",node=\"n1\"} 1"),
        "{metrics}"
    );
    assert_eq!(listed[0]["reason"], "maintenance", "{listed}");

    // JSON-RPC sees the same pause and may end it; a second resume finds none.
    let rpc = |token: &str, method: &str, params: Value| {
        let body = json!({"jsonrpc": "2.0", "method": method, "params": params, "id": 1});
        api(base, Some(token), "POST", "/rpc", Some(&body)).json()
    };
    let listed = rpc(&viewer, "pause.list", json!({}));
    assert_eq!(listed["result"][0]["name"], "echo", "{listed}");
    let refused = rpc(
        &viewer,
        "pause.remove",
        json!({"scope": "job", "name": "echo"}),
    );
    assert!(refused["error"].is_object(), "{refused}");
    let resumed = rpc(&t, "pause.remove", json!({"scope": "job", "name": "echo"}));
    assert_eq!(resumed["result"]["resumed"], true, "{resumed}");
    wait_for(10.0, "the waiting run to start after the resume", || {
        let run = api(base, Some(&t), "GET", &format!("/api/v1/runs/{id}"), None).json();
        (run["status"] == "succeeded").then_some(())
    });
    let gone = api(base, Some(&t), "DELETE", "/api/v1/pauses/job/echo", None);
    assert_eq!(gone.status, 404, "{}", gone.body);

    // Fleet-wide through JSON-RPC, ended through the API.
    let fleet = rpc(
        &t,
        "pause.add",
        json!({"scope": "processor", "name": "main", "fleet": true}),
    );
    assert!(fleet["result"]["node"].is_null(), "{fleet}");
    let this_node_only = api(
        base,
        Some(&t),
        "DELETE",
        "/api/v1/pauses/processor/main",
        None,
    );
    assert_eq!(this_node_only.status, 404, "{}", this_node_only.body);
    ok(
        api(
            base,
            Some(&t),
            "DELETE",
            "/api/v1/pauses/processor/main?fleet=true",
            None,
        ),
        204,
    );
    let none = ok(api(base, Some(&t), "GET", "/api/v1/pauses", None), 200);
    assert_eq!(none, json!([]));

    // Each pause and resume is in the node's decision log, the operator's, with who and why.
    let decisions = ok(
        api(base, Some(&viewer), "GET", "/api/v1/decisions", None),
        200,
    );
    let logged: Vec<(String, String)> = decisions
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["action"] == "pause" || d["action"] == "resume")
        .map(|d| {
            assert_eq!(d["cause"], "operator", "{d}");
            (
                d["action"].as_str().unwrap().to_string(),
                d["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let expected = [
        (
            "pause",
            "job `echo` paused on node `n1` by admin: maintenance",
        ),
        ("resume", "job `echo` resumed on node `n1` by admin"),
        ("pause", "processor `main` paused fleet-wide by admin"),
        ("resume", "processor `main` resumed fleet-wide by admin"),
    ];
    for (action, reason) in expected {
        assert!(
            logged.iter().any(|(a, r)| a == action && r == reason),
            "no {action} decision `{reason}` in {logged:?}"
        );
    }
    assert_eq!(logged.len(), 4, "{logged:?}");
    assert_eq!(node.stop(), Some(0));
}

/// Start deadlines: a job's `start_within` ends a run `expired` (not failed, with the reason)
/// when it could not start in time — behind a longer run on its one instance (its processor
/// ends it when it reaches it), or on a paused processor (the node's sweep ends it while it is
/// still queued) — and a run that starts in time is untouched. Counted in `/metrics`.
fn a_run_not_started_within_its_jobs_deadline_ends_expired_not_failed(ws: Workspace) {
    let (ws, node, t) = node(ws);
    let base = node.api.as_str();
    for (name, payload, within) in [
        ("slow", r#"{"function":"debug.sleep","ms":1500}"#, "0"),
        ("quick", r#"{"function":"debug.noop"}"#, "300"),
    ] {
        ws.ok(&[
            "jobs",
            "add",
            name,
            "--type",
            "function",
            "--processor",
            "main",
            "--payload",
            payload,
            "--start-within",
            within,
        ]);
    }
    let job = ok(api(base, Some(&t), "GET", "/api/v1/jobs/quick", None), 200);
    assert_eq!(job["start_within_ms"], 300, "{job}");
    let trigger = |job: &str| queue_one(base, &t, job);
    let run = |id: i64| api(base, Some(&t), "GET", &format!("/api/v1/runs/{id}"), None).json();
    let ended = |id: i64| {
        wait_for(20.0, "the run to end", || {
            let r = run(id);
            (r["status"] != "queued" && r["status"] != "claimed" && r["status"] != "running")
                .then_some(r)
        })
    };

    // In time: it starts at once.
    let on_time = trigger("quick");
    assert_eq!(ended(on_time)["status"], "succeeded");

    // Behind a 1.5 s run on the processor's one instance: expired when reached.
    let slow = trigger("slow");
    wait_for(10.0, "the slow run to start", || {
        (run(slow)["status"] == "running").then_some(())
    });
    let late = trigger("quick");
    let r = ended(late);
    assert_eq!(r["status"], "expired", "{r}");
    let error = r["error"].as_str().unwrap_or_default();
    assert!(error.contains("not started by its deadline"), "{r}");
    assert!(
        r["started_at"].is_null(),
        "an expired run never started: {r}"
    );
    assert_eq!(ended(slow)["status"], "succeeded");

    // On a paused processor: still queued at its deadline, the sweep ends it.
    ok(
        api(
            base,
            Some(&t),
            "POST",
            "/api/v1/pauses",
            Some(&json!({"scope": "processor", "name": "main"})),
        ),
        201,
    );
    let waiting = trigger("quick");
    let r = ended(waiting);
    assert_eq!(r["status"], "expired", "{r}");
    assert!(
        r["error"]
            .as_str()
            .unwrap_or_default()
            .contains("still queued"),
        "{r}"
    );

    // A deadline of the run's own, on a job without one: through the API, JSON-RPC and the CLI.
    let bad = api(
        base,
        Some(&t),
        "POST",
        "/api/v1/jobs/slow/runs",
        Some(&json!({"start_within_ms": 0})),
    );
    assert_eq!(bad.status, 422, "{}", bad.body);
    assert_eq!(bad.json()["field"], "start_within_ms", "{}", bad.body);
    let own = ok(
        api(
            base,
            Some(&t),
            "POST",
            "/api/v1/jobs/slow/runs",
            Some(&json!({"start_within_ms": 200})),
        ),
        201,
    )["run_ids"][0]
        .as_i64()
        .unwrap();
    let call = json!({"jsonrpc": "2.0", "method": "job.run", "id": 1,
                      "params": {"job": "slow", "start_within_ms": 200}});
    let by_rpc = api(base, Some(&t), "POST", "/rpc", Some(&call)).json()["result"]["run_id"]
        .as_i64()
        .unwrap();
    let by_cli: Value =
        serde_json::from_str(&ws.ok(&["--json", "jobs", "run", "slow", "--start-within", "200"]))
            .unwrap();
    for id in [own, by_rpc, by_cli["run_id"].as_i64().unwrap()] {
        let r = ended(id);
        assert_eq!(r["status"], "expired", "{r}");
    }

    let metrics = api(base, Some(&t), "GET", "/metrics", None).body;
    assert!(
        metrics.contains("jobvisor_runs_total{job=\"quick\",status=\"expired\"} 2"),
        "{metrics}"
    );
    let listed = ok(
        api(
            base,
            Some(&t),
            "GET",
            "/api/v1/runs?status=expired&job=quick",
            None,
        ),
        200,
    );
    assert_eq!(listed.as_array().map(Vec::len), Some(2), "{listed}");
    assert_eq!(node.stop(), Some(0));
}

/// Priority aging: on a one-instance processor kept busy by a stream of priority-50 runs, a
/// priority-0 run of a job that ages a point every 100 ms starts once it has outranked them
/// (51 points: 5.1 s, plus one sweep), while the stream still flows, and says how it aged; a
/// run of a job that does not age, queued beside it, still waits.
fn an_aging_run_overtakes_a_stream_of_more_important_work_within_its_bound(ws: Workspace) {
    ws.ok(&["init"]);
    ws.disable_seeded_jobs();
    ws.set_node_env("JOBVISOR__NODE__HEARTBEAT_INTERVAL", "200");
    let (node, t) = node_with(
        &ws,
        "[processor.one]\ninstances = 1\nmax_instances = 1\n\n\
         [job.hot]\ntype = \"function\"\nprocessor = \"one\"\npriority = 50\n\
         overlap_policy = \"allow\"\nmax_overlap = 100000\n\
         payload = { function = \"debug.sleep\", ms = 20 }\n\n\
         [job.patient]\ntype = \"function\"\nprocessor = \"one\"\naging = 100\n\
         payload = { function = \"debug.noop\" }\n\n\
         [job.stuck]\ntype = \"function\"\nprocessor = \"one\"\n\
         payload = { function = \"debug.noop\" }\n",
    );
    let base = node.api.as_str();
    let hot = |n: usize| {
        let runs: Vec<Value> = (0..n).map(|_| json!({})).collect();
        ok(
            api(
                base,
                Some(&t),
                "POST",
                "/api/v1/jobs/hot/runs/batch",
                Some(&json!({"runs": runs})),
            ),
            201,
        );
    };
    let trigger = |job: &str| queue_one(base, &t, job);
    let run = |id: i64| api(base, Some(&t), "GET", &format!("/api/v1/runs/{id}"), None).json();
    hot(200);
    let queued_at = std::time::Instant::now();
    let (patient, stuck) = (trigger("patient"), trigger("stuck"));
    // Keep the stream ahead of the instance: 50 runs of 20 ms every half second.
    let started = loop {
        let r = run(patient);
        if r["status"] == "succeeded" {
            break queued_at.elapsed();
        }
        assert!(
            queued_at.elapsed() < std::time::Duration::from_secs(20),
            "{r}"
        );
        hot(25);
        std::thread::sleep(std::time::Duration::from_millis(250));
    };
    let r = run(patient);
    let still = run(stuck);
    let hot_queued = api(
        base,
        Some(&t),
        "GET",
        "/api/v1/runs?job=hot&status=queued&limit=1000",
        None,
    )
    .json()
    .as_array()
    .map_or(0, Vec::len);
    assert_eq!(node.stop(), Some(0));
    eprintln!(
        "aging: the priority-0 run started {:.1} s after it was queued; {hot_queued} priority-50 \
         runs were still queued; {}",
        started.as_secs_f64(),
        r["aged"]
    );
    assert!(
        started >= std::time::Duration::from_millis(5000),
        "it started before it could outrank the stream: {started:?} {r}"
    );
    assert!(
        started <= std::time::Duration::from_millis(8000),
        "it started {started:?} after it was queued (bound: 5.1 s and a sweep): {r}"
    );
    assert!(
        hot_queued > 0,
        "the stream ran dry: the aging run proves nothing"
    );
    let aged = r["aged"].as_str().unwrap_or_default();
    assert!(aged.starts_with("aged from 0 to 5"), "{r}");
    assert_eq!(
        still["status"], "queued",
        "a job that does not age waited: {still}"
    );
    assert!(still["aged"].is_null(), "{still}");
}
