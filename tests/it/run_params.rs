//! What a run's params may change in a job only admins define (issue 27, point 9): an rpc job
//! or a job on a remote processor (`remote.rs`), and here command, sql and url jobs — an
//! operator triggers them, and their params never reach what the admin wrote.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::remote::{ended, operator_token, trigger};
use crate::support::{Node, Workspace, api};

crate::on_both_backends!(a_runs_params_never_change_what_a_command_sql_or_url_job_fixes,);

/// Each request a [`recording_server`] answered: its request line and its body.
type Seen = Arc<Mutex<Vec<(String, String)>>>;

/// An HTTP server on port 0 that answers every request 200 and keeps each one's request line
/// and body.
fn recording_server() -> (u16, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let keep = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut raw = Vec::new();
            let mut buf = [0u8; 4096];
            // The head, then as many body bytes as Content-Length says.
            let (head, body) = loop {
                let Ok(n) = stream.read(&mut buf) else {
                    break (String::new(), String::new());
                };
                raw.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&raw).into_owned();
                if let Some((head, body)) = text.split_once("\r\n\r\n") {
                    let length = head
                        .lines()
                        .find_map(|l| {
                            let (n, v) = l.split_once(':')?;
                            n.eq_ignore_ascii_case("content-length")
                                .then(|| v.trim().parse::<usize>().ok())?
                        })
                        .unwrap_or(0);
                    if body.len() >= length || n == 0 {
                        break (head.to_string(), body.to_string());
                    }
                } else if n == 0 {
                    break (text, String::new());
                }
            };
            let line = head.lines().next().unwrap_or_default().to_string();
            keep.lock().unwrap().push((line, body));
            let reply = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\
                         Content-Length: 11\r\nConnection: close\r\n\r\n{\"ok\":true}";
            let _ = stream.write_all(reply.as_bytes());
        }
    });
    (port, seen)
}

/// Triggers `job` with `params` as `token`; the run once it has ended.
fn run_with(node: &Node, token: &str, job: &str, params: Value) -> Value {
    ended(node, token, trigger(node, token, job, params))
}

fn a_runs_params_never_change_what_a_command_sql_or_url_job_fixes(ws: Workspace) {
    ws.ok(&["init"]);
    ws.disable_seeded_jobs();
    let data = ws.path("notes.db");
    crate::support::open_db(&data)
        .execute_batch("CREATE TABLE notes (v INTEGER)")
        .unwrap();
    let (port, seen) = recording_server();
    let here = ws.dir.path().display().to_string();
    let conf = format!(
        r#"version = 1

[processor.main]
instances = 1

[object.notes]
conn_string = "{data}"

[job.cmd]
type = "command"
processor = "main"
payload = {{ argv = ["/bin/sh", "-c", "echo fixed:$WHO:$(pwd)"], env = {{ WHO = "admin" }}, cwd = "{here}" }}

[job.note]
type = "sql"
processor = "main"
payload = {{ sql = "INSERT INTO notes (v) VALUES (?1)", object = "notes", params = [1] }}

[job.hook]
type = "url"
processor = "main"
payload = {{ url = "http://127.0.0.1:{port}/hook", method = "POST", body = "fixed body" }}

[job.deploy]
type = "url"
processor = "main"
payload = {{ url = "http://127.0.0.1:{port}/deploy", method = "POST", send_input = true, env = "staging", open_params = ["day"] }}
"#,
        data = data.display()
    );
    ws.write("jobs.conf", &conf);
    ws.ok(&["import", "jobs.conf"]);
    let node = ws.start_node("n1");
    let operator = operator_token(&ws, "otto");

    // A command's params reach it only as JOBVISOR_PARAMS: not its argv, env or folder.
    let run = run_with(
        &node,
        &operator,
        "cmd",
        json!({"argv": ["/bin/echo", "steered"], "command": "echo steered", "shell": true,
               "env": {"WHO": "operator"}, "cwd": "/"}),
    );
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(
        run["log"].as_str().unwrap().lines().last(),
        Some(format!("fixed:admin:{here}").as_str()),
        "{run}"
    );

    // A sql job's params give its bound values, never its statement or its object.
    let run = run_with(
        &node,
        &operator,
        "note",
        json!({"sql": "DROP TABLE notes", "object": "job_run", "params": [42]}),
    );
    assert_eq!(run["status"], "succeeded", "{run}");
    let notes: Vec<i64> = crate::support::open_db(&data)
        .prepare("SELECT v FROM notes")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(notes, vec![42]);

    // A url job's params never change where it goes, how, or a body the payload gives.
    let run = run_with(
        &node,
        &operator,
        "hook",
        json!({"url": "http://127.0.0.1:1/evil", "method": "DELETE", "body": "steered",
               "headers": {"X-Evil": "1"}}),
    );
    assert_eq!(run["status"], "succeeded", "{run}");
    // With send_input, they fill only the fields the payload declares open: a trigger that
    // names another is refused naming it, and nothing is queued.
    for (params, field) in [
        (json!({"env": "prod"}), "params.env"),
        (json!({"url": "http://127.0.0.1:1/evil"}), "params.url"),
        (json!({"day": "mon", "who": "otto"}), "params.who"),
    ] {
        let r = api(
            &node.api,
            Some(&operator),
            "POST",
            "/api/v1/jobs/deploy/runs",
            Some(&json!({ "params": params })),
        );
        assert_eq!(r.status, 422, "{params}: {}", r.body);
        assert_eq!(r.json()["field"], field, "{}", r.body);
    }
    assert!(ws.runs_of("deploy").is_empty());
    let run = run_with(&node, &operator, "deploy", json!({"day": "mon"}));
    assert_eq!(run["status"], "succeeded", "{run}");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[0].0, "POST /hook HTTP/1.1");
    assert_eq!(seen[0].1, "fixed body");
    assert_eq!(seen[1].0, "POST /deploy HTTP/1.1");
    let body: Value = serde_json::from_str(&seen[1].1).unwrap();
    assert_eq!(body, json!({"env": "staging", "day": "mon"}));
}
