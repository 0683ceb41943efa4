//! The web UI over HTTP, against a real node: every route but the public few needs a session
//! (an API token is not one), sign-in sets a strict cookie, every page carries a CSP without
//! inline script, a write needs the session's CSRF token and comes from this node, a viewer is
//! refused every change by the server, and the role rules of the API hold (an operator cannot
//! create a command job). Browser behaviour is tested in `ui-tests/` (headless Chromium).

use crate::support::{Node, Response, Workspace, api, http_raw};

crate::on_both_backends!(
    runs_are_retried_and_cancelled_one_at_a_time_and_in_bulk,
    every_ui_route_but_the_public_ones_needs_a_session,
    signing_in_sets_a_strict_http_only_session_cookie_and_pages_carry_a_csp,
    a_post_without_a_session_or_without_the_csrf_token_is_refused,
    a_viewer_sees_no_edit_controls_and_the_server_refuses_their_changes,
    the_job_form_shows_each_problem_beside_its_field_and_previews_the_schedule,
    the_overview_names_failing_jobs_and_runs_stuck_on_a_silent_node,
    a_running_workflow_is_not_stuck_work_but_a_run_on_a_fenced_node_is,
    a_workflow_runs_page_shows_its_tree_with_each_steps_state_timing_and_link,
    the_node_api_and_the_overview_give_each_resources_level_and_a_standby_job_its_pressure,
    the_job_page_links_the_output_of_the_last_run_that_ran_not_a_skipped_one,
    the_processors_page_shows_the_instances_this_node_runs_and_how_many_are_busy,
    pausing_the_node_from_the_ui_asks_first_and_works_without_javascript,
    the_runs_list_pages_newer_as_well_as_older,
    a_job_form_takes_a_payload_as_large_as_the_api_does_and_shows_a_larger_one_at_its_field,
);

/// Adds a user with a password through the CLI (the password on stdin).
pub fn add_user(ws: &Workspace, name: &str, role: &str, password: &str) {
    use std::io::Write;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_jobvisor"))
        .arg("--db")
        .arg(ws.db_arg())
        .args(["users", "add", name, "--role", role, "--password-stdin"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    writeln!(child.stdin.take().unwrap(), "{password}").unwrap();
    assert!(child.wait().unwrap().success(), "users add {name}");
}

/// A signed-in browser: its session cookie and CSRF token.
pub struct Browser {
    base: String,
    cookie: String,
    csrf: String,
}

fn cookie_of(r: &Response, name: &str) -> Option<String> {
    r.headers
        .iter()
        .filter(|(n, _)| n == "set-cookie")
        .find_map(|(_, v)| {
            let first = v.split(';').next()?;
            let (k, val) = first.split_once('=')?;
            (k == name).then(|| val.to_string())
        })
}

fn form_token(html: &str) -> String {
    let at = html
        .find("name=\"csrf\" value=\"")
        .unwrap_or_else(|| panic!("no csrf field in {html}"));
    let rest = &html[at + "name=\"csrf\" value=\"".len()..];
    rest[..rest.find('"').unwrap()].to_string()
}

fn form(pairs: &[(&str, &str)]) -> Vec<u8> {
    let mut s = form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        s.append_pair(k, v);
    }
    s.finish().into_bytes()
}

const FORM: (&str, &str) = ("Content-Type", "application/x-www-form-urlencoded");

impl Browser {
    /// Signs in through the login form.
    pub fn sign_in(base: &str, user: &str, password: &str) -> Browser {
        let page = http_raw(base, "GET", "/ui/login", &[], b"");
        assert_eq!(page.status, 200);
        let login = cookie_of(&page, "jv_login").expect("the login form sets its token cookie");
        let token = form_token(&page.body);
        let cookie = format!("jv_login={login}");
        let r = http_raw(
            base,
            "POST",
            "/ui/login",
            &[FORM, ("Cookie", &cookie)],
            &form(&[("csrf", &token), ("user", user), ("password", password)]),
        );
        assert_eq!(r.status, 303, "{}", r.body);
        let session = cookie_of(&r, "jv_session").expect("a session cookie");
        let cookie = format!("jv_session={session}");
        let overview = http_raw(base, "GET", "/ui/", &[("Cookie", &cookie)], b"");
        assert_eq!(overview.status, 200, "{}", overview.body);
        Browser {
            base: base.to_string(),
            csrf: form_token(&overview.body),
            cookie,
        }
    }

    pub fn get(&self, path: &str) -> Response {
        http_raw(&self.base, "GET", path, &[("Cookie", &self.cookie)], b"")
    }

    /// A form post with the session's CSRF token.
    pub fn post(&self, path: &str, pairs: &[(&str, &str)]) -> Response {
        let mut all = vec![("csrf", self.csrf.as_str())];
        all.extend_from_slice(pairs);
        http_raw(
            &self.base,
            "POST",
            path,
            &[FORM, ("Cookie", &self.cookie)],
            &form(&all),
        )
    }

    /// A form post with other headers and no token of its own.
    pub fn post_raw(
        &self,
        path: &str,
        headers: &[(&str, &str)],
        pairs: &[(&str, &str)],
    ) -> Response {
        let mut h = vec![FORM, ("Cookie", self.cookie.as_str())];
        h.extend_from_slice(headers);
        http_raw(&self.base, "POST", path, &h, &form(pairs))
    }
}

fn node_with_users(ws: Workspace) -> (Workspace, Node) {
    node_with_users_and(ws, None)
}

/// [`node_with_users`], with `conf` imported before the node starts.
fn node_with_users_and(ws: Workspace, conf: Option<&str>) -> (Workspace, Node) {
    ws.ok(&["init"]);
    ws.disable_seeded_jobs();
    add_user(&ws, "ada", "admin", "correct horse battery");
    add_user(&ws, "otto", "operator", "operator password 1");
    add_user(&ws, "vic", "viewer", "viewer password 12");
    ws.ok(&[
        "jobs",
        "add",
        "echo",
        "--type",
        "function",
        "--processor",
        "main",
        "--payload",
        r#"{"function": "debug.echo"}"#,
    ]);
    if let Some(conf) = conf {
        let file = ws.write("test.conf", conf);
        ws.ok(&["import", &file.display().to_string()]);
    }
    let node = ws.start_node("ui");
    (ws, node)
}

/// A new API token of `user`.
fn token_of(ws: &Workspace, user: &str) -> String {
    let made: serde_json::Value =
        serde_json::from_str(&ws.ok(&["--json", "tokens", "create", user])).unwrap();
    made["token"]
        .as_str()
        .unwrap_or_else(|| panic!("no token in {made}"))
        .to_string()
}

fn enabled(ws: &Workspace, job: &str) -> bool {
    let out = ws.ok(&["--json", "jobs", "show", job]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["job"]["enabled"]
        .as_bool()
        .or_else(|| v["enabled"].as_bool())
        .unwrap_or_else(|| panic!("no enabled in {v}"))
}

fn every_ui_route_but_the_public_ones_needs_a_session(ws: Workspace) {
    let (ws, node) = node_with_users(ws);
    let made: serde_json::Value =
        serde_json::from_str(&ws.ok(&["--json", "tokens", "create", "ada"])).unwrap();
    let token = made["token"].as_str().map(String::from);
    assert!(token.is_some());
    let mut checked = 0;
    for route in jobvisor::ui::ROUTES {
        let public = jobvisor::ui::PUBLIC.contains(route);
        let path = route.path.replace("{name}", "echo").replace("{id}", "1");
        // An API token is not a session: the UI answers browsers only.
        let bearer = format!("Bearer {}", token.as_deref().unwrap());
        for headers in [vec![], vec![("Authorization", bearer.as_str())]] {
            let r = http_raw(&node.api, route.method, &path, &headers, b"");
            if public {
                assert!(
                    r.status < 400 || route.method == "POST",
                    "{route:?}: {}",
                    r.status
                );
                continue;
            }
            checked += 1;
            match route.method {
                "GET" => {
                    assert_eq!(r.status, 303, "{route:?}: {}", r.body);
                    assert_eq!(r.header("location"), Some("/ui/login"), "{route:?}");
                }
                _ => assert_eq!(r.status, 401, "{route:?}: {}", r.body),
            }
            assert!(!r.body.contains("echo"), "{route:?} leaked: {}", r.body);
        }
    }
    assert!(checked > 40, "{checked} requests checked");
    // The scripts and the charts' data are not public either; the login page's stylesheet is.
    assert_eq!(
        http_raw(&node.api, "GET", "/ui/static/app.js", &[], b"").status,
        303
    );
    assert_eq!(
        http_raw(&node.api, "GET", "/ui/static/app.css", &[], b"").status,
        200
    );
    node.stop();
}

fn signing_in_sets_a_strict_http_only_session_cookie_and_pages_carry_a_csp(ws: Workspace) {
    let (_ws, node) = node_with_users(ws);
    let page = http_raw(&node.api, "GET", "/ui/login", &[], b"");
    let csp = page.header("content-security-policy").unwrap().to_string();
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
        "{csp}"
    );
    assert!(
        !page.body.contains("<script>") && !page.body.contains(" style="),
        "no inline script or style"
    );
    let login = cookie_of(&page, "jv_login").unwrap();
    let token = form_token(&page.body);
    // The form's token must match its cookie (login CSRF).
    let r = http_raw(
        &node.api,
        "POST",
        "/ui/login",
        &[FORM, ("Cookie", &format!("jv_login={login}"))],
        &form(&[
            ("csrf", "forged"),
            ("user", "ada"),
            ("password", "correct horse battery"),
        ]),
    );
    assert_eq!(r.status, 403);
    assert!(cookie_of(&r, "jv_session").is_none());
    let r = http_raw(
        &node.api,
        "POST",
        "/ui/login",
        &[FORM, ("Cookie", &format!("jv_login={login}"))],
        &form(&[
            ("csrf", &token),
            ("user", "ada"),
            ("password", "wrong password!"),
        ]),
    );
    assert_eq!(r.status, 401);
    assert!(
        r.body.contains("unknown user or wrong password"),
        "{}",
        r.body
    );
    let r = http_raw(
        &node.api,
        "POST",
        "/ui/login",
        &[FORM, ("Cookie", &format!("jv_login={login}"))],
        &form(&[
            ("csrf", &token),
            ("user", "ada"),
            ("password", "correct horse battery"),
        ]),
    );
    assert_eq!(r.status, 303);
    let set = r
        .headers
        .iter()
        .find(|(n, v)| n == "set-cookie" && v.starts_with("jv_session="))
        .map(|(_, v)| v.clone())
        .unwrap();
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Strict"),
        "{set}"
    );
    assert!(!set.contains("Secure"), "plain HTTP: {set}");
    // Behind a TLS proxy the cookie is Secure.
    let r = http_raw(
        &node.api,
        "POST",
        "/ui/login",
        &[
            FORM,
            ("Cookie", &format!("jv_login={login}")),
            ("X-Forwarded-Proto", "https"),
        ],
        &form(&[
            ("csrf", &token),
            ("user", "ada"),
            ("password", "correct horse battery"),
        ]),
    );
    assert!(
        r.headers.iter().any(|(n, v)| n == "set-cookie"
            && v.starts_with("jv_session=")
            && v.contains("; Secure")),
        "{:?}",
        r.headers
    );
    let b = Browser::sign_in(&node.api, "ada", "correct horse battery");
    for path in [
        "/ui/",
        "/ui/jobs",
        "/ui/runs",
        "/ui/jobs/echo",
        "/ui/decisions",
    ] {
        let r = b.get(path);
        assert_eq!(r.status, 200, "{path}");
        assert_eq!(r.header("content-security-policy"), Some(jobvisor::ui::CSP));
        assert_eq!(r.header("x-frame-options"), Some("DENY"));
        assert_eq!(r.header("cache-control"), Some("no-store"));
        assert!(!r.body.contains("<script>"), "{path} has an inline script");
    }
    // Signing out ends the session on the server.
    assert_eq!(b.post("/ui/logout", &[]).status, 303);
    assert_eq!(b.get("/ui/jobs").status, 303);
    node.stop();
}

fn a_post_without_a_session_or_without_the_csrf_token_is_refused(ws: Workspace) {
    let (ws, node) = node_with_users(ws);
    let b = Browser::sign_in(&node.api, "otto", "operator password 1");
    // No session at all.
    let r = http_raw(
        &node.api,
        "POST",
        "/ui/jobs/echo/disable",
        &[FORM],
        &form(&[("csrf", &b.csrf)]),
    );
    assert_eq!(r.status, 401);
    // A session, but no token, a wrong one, or a right one from another site.
    let r = b.post_raw("/ui/jobs/echo/disable", &[], &[]);
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(r.body.contains("CSRF"), "{}", r.body);
    let r = b.post_raw("/ui/jobs/echo/disable", &[("X-CSRF-Token", "nope")], &[]);
    assert_eq!(r.status, 403);
    let r = b.post_raw("/ui/jobs/echo/disable", &[], &[("csrf", "nope")]);
    assert_eq!(r.status, 403);
    let r = b.post_raw(
        "/ui/jobs/echo/disable",
        &[("Origin", "http://evil.example")],
        &[("csrf", &b.csrf)],
    );
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(enabled(&ws, "echo"), "nothing was changed");
    // The token as a header (htmx) or as the form's field works.
    let r = b.post_raw("/ui/jobs/echo/disable", &[("X-CSRF-Token", &b.csrf)], &[]);
    assert_eq!(r.status, 303, "{}", r.body);
    assert!(!enabled(&ws, "echo"));
    let r = b.post("/ui/jobs/echo/enable", &[]);
    assert_eq!(r.status, 303);
    assert!(enabled(&ws, "echo"));
    node.stop();
}

fn a_viewer_sees_no_edit_controls_and_the_server_refuses_their_changes(ws: Workspace) {
    let (ws, node) = node_with_users(ws);
    let v = Browser::sign_in(&node.api, "vic", "viewer password 12");
    for path in ["/ui/jobs", "/ui/jobs/echo", "/ui/runs"] {
        let page = v.get(path);
        assert_eq!(page.status, 200);
        for control in [
            "/disable\"",
            "/run\"",
            "New job",
            "/edit\"",
            "Retry</button>",
        ] {
            assert!(
                !page.body.contains(control),
                "{path} shows {control} to a viewer"
            );
        }
    }
    for (path, pairs) in [
        ("/ui/jobs/echo/disable", vec![]),
        ("/ui/jobs/echo/run", vec![]),
        ("/ui/jobs/echo/pin", vec![("pin", "inactive")]),
        ("/ui/jobs/echo/delete", vec![]),
        (
            "/ui/jobs/echo",
            vec![("type", "function"), ("processor", "main")],
        ),
        (
            "/ui/jobs",
            vec![
                ("name", "mine"),
                ("type", "function"),
                ("processor", "main"),
            ],
        ),
        ("/ui/runs/bulk", vec![("action", "retry"), ("id", "1")]),
    ] {
        let r = v.post(path, &pairs);
        assert_eq!(r.status, 403, "{path}: {}", r.body);
        assert!(r.body.contains("viewer"), "{path}: {}", r.body);
    }
    assert!(enabled(&ws, "echo"));
    let runs = ws.runs_of("echo");
    assert!(runs.is_empty(), "a viewer queued runs: {runs:?}");
    // The API's role rules hold here too: only admins create command jobs.
    let o = Browser::sign_in(&node.api, "otto", "operator password 1");
    let r = o.post(
        "/ui/jobs",
        &[
            ("name", "shell"),
            ("type", "command"),
            ("processor", "main"),
            ("payload", r#"{"argv": ["true"]}"#),
        ],
    );
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(r.body.contains("admin"), "{}", r.body);
    let a = Browser::sign_in(&node.api, "ada", "correct horse battery");
    let r = a.post(
        "/ui/jobs",
        &[
            ("name", "shell"),
            ("type", "command"),
            ("processor", "main"),
            ("payload", r#"{"argv": ["true"]}"#),
        ],
    );
    assert_eq!(r.status, 303, "{}", r.body);
    node.stop();
}

fn the_job_form_shows_each_problem_beside_its_field_and_previews_the_schedule(ws: Workspace) {
    let (ws, node) = node_with_users(ws);
    let b = Browser::sign_in(&node.api, "ada", "correct horse battery");
    let r = b.post(
        "/ui/jobs",
        &[
            ("name", "<script>alert(1)</script>"),
            ("type", "function"),
            ("processor", "main"),
            ("cron", "61 * * * *"),
            ("priority", "high"),
            ("payload", r#"{"function": "debug.echo"}"#),
        ],
    );
    assert_eq!(r.status, 422, "{}", r.body);
    assert!(r.body.contains("id=\"cron-error\""), "{}", r.body);
    assert!(r.body.contains("id=\"priority-error\""), "{}", r.body);
    assert!(r.body.contains("id=\"name-error\""), "{}", r.body);
    assert!(
        !r.body.contains("<script>alert(1)</script>"),
        "the name is escaped"
    );
    assert!(
        r.body.contains("&#60;script&#62;alert(1)&#60;/script&#62;"),
        "{}",
        r.body
    );
    // Fixed, it saves.
    let r = b.post(
        "/ui/jobs",
        &[
            ("name", "hourly"),
            ("type", "function"),
            ("processor", "main"),
            ("cron", "5 * * * *"),
            ("payload", r#"{"function": "debug.echo"}"#),
        ],
    );
    assert_eq!(r.status, 303, "{}", r.body);
    assert_eq!(r.header("location"), Some("/ui/jobs/hourly"));
    let shown = ws.ok(&["jobs", "show", "hourly"]);
    assert!(shown.contains("5 * * * *"), "{shown}");
    // The preview: the words and ten fire times, or the problem.
    let p = b.get("/ui/schedule?cron=5+*+*+*+*");
    assert_eq!(p.status, 200);
    assert_eq!(p.body.matches("<li>").count(), 10, "{}", p.body);
    let p = b.get("/ui/schedule?cron=61+*+*+*+*");
    assert!(
        p.body.contains("schedule-problems") && p.body.contains("cron"),
        "{}",
        p.body
    );
    let p = b.get("/ui/schedule?run_every=abc");
    assert!(p.body.contains("whole number"), "{}", p.body);
    node.stop();
}

fn runs_are_retried_and_cancelled_one_at_a_time_and_in_bulk(ws: Workspace) {
    let (ws, node) = node_with_users(ws);
    // Three runs queued while the node is paused stay queued: cancel two of them in bulk.
    let token = token_of(&ws, "ada");
    let r = api(&node.api, Some(&token), "POST", "/api/v1/node/pause", None);
    assert_eq!(r.status, 200, "{}", r.body);
    let mut ids = Vec::new();
    for _ in 0..3 {
        let r = api(
            &node.api,
            Some(&token),
            "POST",
            "/api/v1/jobs/echo/runs",
            Some(&serde_json::json!({})),
        );
        ids.push(
            r.json()["run_ids"][0]
                .as_i64()
                .unwrap_or_else(|| panic!("{}", r.body)),
        );
    }
    let b = Browser::sign_in(&node.api, "otto", "operator password 1");
    let (a, c) = (ids[0].to_string(), ids[1].to_string());
    let r = b.post(
        "/ui/runs/bulk",
        &[("action", "cancel"), ("id", &a), ("id", &c)],
    );
    assert_eq!(r.status, 303, "{}", r.body);
    let page = b.get("/ui/runs");
    assert!(
        page.body.contains("2 of 2 runs cancelled"),
        "the note: {}",
        page.body
    );
    let statuses: Vec<String> = ws
        .runs_of("echo")
        .iter()
        .map(|r| r.status.clone())
        .collect();
    assert_eq!(
        statuses.iter().filter(|s| *s == "cancelled").count(),
        2,
        "{statuses:?}"
    );
    // Retry both in bulk, and one of them again singly; cancel the third singly.
    let r = b.post(
        "/ui/runs/bulk",
        &[("action", "retry"), ("id", &a), ("id", &c)],
    );
    assert_eq!(r.status, 303);
    let r = b.post(&format!("/ui/runs/{a}/retry"), &[]);
    assert_eq!(r.status, 303);
    let r = b.post(&format!("/ui/runs/{}/cancel", ids[2]), &[]);
    assert_eq!(r.status, 303);
    let runs = ws.runs_of("echo");
    assert_eq!(runs.len(), 6, "{runs:?}");
    // A run that cannot be retried is named; the page says so.
    let r = b.post("/ui/runs/bulk", &[("action", "retry"), ("id", "999999")]);
    assert_eq!(r.status, 303);
    assert!(b.get("/ui/runs").body.contains("run 999999"), "named");
    let detail = b.get(&format!("/ui/runs/{a}"));
    assert!(
        detail.body.contains("cancelled") && detail.body.contains("Retry"),
        "{}",
        detail.body
    );
    node.stop();
}

fn the_overview_names_failing_jobs_and_runs_stuck_on_a_silent_node(ws: Workspace) {
    let (ws, node) = node_with_users(ws);
    ws.ok(&[
        "jobs",
        "add",
        "breaks",
        "--type",
        "function",
        "--processor",
        "main",
        "--payload",
        r#"{"function": "debug.fail", "message": "<b>disk</b> on fire"}"#,
    ]);
    ws.ok(&["jobs", "run", "breaks"]);
    crate::support::wait_for(30.0, "the failed run", || {
        ws.runs_of("breaks")
            .iter()
            .any(|r| r.status == "failed")
            .then_some(())
    });
    // A run left running by a node that stopped an hour ago (its heartbeat is that old).
    let hour_ago = jobvisor::catalog::now_ms() - 3_600_000;
    let sql = "INSERT INTO node (node_name, host, heartbeat_at) VALUES ('gone', 'elsewhere', {at});
        INSERT INTO job_run (job_id, processor_id, node_id, status, run_after, created_at,
         started_at, lease_until)
         SELECT j.job_id, j.processor_id, (SELECT node_id FROM node WHERE node_name = 'gone'),
                'running', {at}, {at}, {at}, {at} + 60000 FROM job j WHERE j.job_name = 'echo'";
    ws.catalog()
        .execute(&sql.replace("{at}", &hour_ago.to_string()));
    let b = Browser::sign_in(&node.api, "vic", "viewer password 12");
    let page = b.get("/ui/");
    assert_eq!(page.status, 200);
    assert!(page.body.contains("failed ×1"), "{}", page.body);
    assert!(page.body.contains("/ui/jobs/breaks"), "{}", page.body);
    assert!(
        page.body.contains("&#60;b&#62;disk&#60;/b&#62; on fire"),
        "escaped: {}",
        page.body
    );
    assert!(
        page.body
            .contains("node `gone` has sent no heartbeat for 3600 s")
            || page
                .body
                .contains("node `gone` has sent no heartbeat for 3601 s"),
        "{}",
        page.body
    );
    node.stop();
}

/// A workflow whose step `nap` sleeps a minute beside a quick step `hello`.
const NAPPING_FLOW: &str = r#"
[processor.p]
instances = 2
[job.nap]
type = "function"
processor = "p"
payload = { function = "debug.sleep", ms = 60000 }
[job.hi]
type = "function"
processor = "p"
payload = { function = "debug.echo" }
[job.flow]
type = "workflow"
processor = "p"
payload.steps = [{ name = "napping", job = "nap" }, { name = "hello", job = "hi" }]
"#;

/// Starts [`NAPPING_FLOW`] and waits until its root runs, its `napping` step executes and its
/// `hello` step succeeded: (the node, the root's id, the napping step's id, hello's id).
fn running_workflow(ws: Workspace) -> (Workspace, Node, i64, i64, i64) {
    let (ws, node) = node_with_users_and(ws, Some(NAPPING_FLOW));
    ws.ok(&["jobs", "run", "flow"]);
    let (root, nap, hello) = crate::support::wait_for(30.0, "the workflow to run", || {
        let runs = ws.runs();
        let find = |job: &str, status: &str| {
            runs.iter()
                .find(|r| r.job == job && r.status == status)
                .map(|r| r.run_id)
        };
        Some((
            find("flow", "running")?,
            find("nap", "running")?,
            find("hi", "succeeded")?,
        ))
    });
    (ws, node, root, nap, hello)
}

/// Issue 27: a workflow's run executes nothing and has no node, and the overview listed it as
/// stuck work, "node `?` has stopped". Only an executing run on a dead, fenced or stopped node
/// (or past its timeout) is stuck; a run on a live node is not.
fn a_running_workflow_is_not_stuck_work_but_a_run_on_a_fenced_node_is(ws: Workspace) {
    let (ws, node, root, _, _) = running_workflow(ws);
    let b = Browser::sign_in(&node.api, "vic", "viewer password 12");
    let page = b.get("/ui/");
    assert!(page.body.contains("Nothing is stuck."), "{}", page.body);
    assert!(!page.body.contains("has stopped"), "{}", page.body);
    assert!(
        !page.body.contains(&format!("/ui/runs/{root}\"")),
        "{}",
        page.body
    );
    // A run on a node another node fenced is stuck; one on a live node (its heartbeat now,
    // within its lease TTL) is not.
    let now = jobvisor::catalog::now_ms();
    let sql =
        "INSERT INTO node (node_name, host, pid, heartbeat_at, lease_ttl, fenced_at, fenced_by)
         VALUES ('cut', 'elsewhere', 41, {now}, 30000, {now} - 5000, 'ui');
        INSERT INTO node (node_name, host, pid, heartbeat_at, lease_ttl)
         VALUES ('busy', 'elsewhere', 42, {now}, 30000);
        INSERT INTO job_run (job_id, processor_id, node_id, status, run_after, created_at,
         started_at, lease_until)
         SELECT j.job_id, j.processor_id, n.node_id, 'running', {now}, {now}, {now}, {now} + 60000
         FROM job j, node n WHERE j.job_name = 'echo' AND n.node_name IN ('cut', 'busy')";
    ws.catalog()
        .execute(&sql.replace("{now}", &now.to_string()));
    let page = b.get("/ui/");
    assert!(
        page.body.contains("node `cut` was fenced"),
        "the fenced node's run: {}",
        page.body
    );
    assert!(!page.body.contains("`busy`"), "{}", page.body);
    assert!(!page.body.contains("`?`"), "{}", page.body);
    assert_eq!(page.body.matches("st-failed\">stuck</span>").count(), 1);
    node.stop();
}

/// Issue 27: a workflow run's page listed no steps and sent the user to `jobvisor runs tree`.
/// It shows the tree as the CLI does: each step by name, indented under its parent, with its
/// state, timing and a link; the page of a step shows the same tree with itself marked.
fn a_workflow_runs_page_shows_its_tree_with_each_steps_state_timing_and_link(ws: Workspace) {
    let (ws, node, root, nap, hello) = running_workflow(ws);
    let b = Browser::sign_in(&node.api, "vic", "viewer password 12");
    let page = b.get(&format!("/ui/runs/{root}"));
    assert_eq!(page.status, 200);
    let body = &page.body;
    assert!(body.contains("id=\"run-tree\""), "{body}");
    assert!(body.contains("3 runs: "), "{body}");
    for (id, step, status) in [(nap, "napping", "running"), (hello, "hello", "succeeded")] {
        let row = body
            .split("<tr data-run=\"")
            .find(|r| r.starts_with(&format!("{id}\"")))
            .unwrap_or_else(|| panic!("no row for run {id}: {body}"));
        assert!(row.contains(&format!("data-status=\"{status}\"")), "{row}");
        assert!(row.contains(&format!("href=\"/ui/runs/{id}\"")), "{row}");
        assert!(row.contains(&format!("class=\"d1\">{step}")), "{row}");
        assert!(row.contains("href=\"/ui/jobs/"), "its job is linked: {row}");
    }
    // hello ran: its timing is there.
    let hello_row = body
        .split("<tr data-run=\"")
        .find(|r| r.starts_with(&format!("{hello}\"")))
        .unwrap();
    assert!(
        hello_row.contains(" ms</td>") || hello_row.contains(" s</td>"),
        "{hello_row}"
    );
    assert!(!body.contains("runs tree"), "{body}");
    // A step's page shows the same tree, the step marked.
    let page = b.get(&format!("/ui/runs/{nap}"));
    assert!(
        page.body.contains(&format!(
            "<tr data-run=\"{nap}\" data-status=\"running\" class=\"this\""
        )),
        "{}",
        page.body
    );
    // A run outside any tree shows none.
    ws.ok(&["jobs", "run", "echo"]);
    let lone = crate::support::wait_for(30.0, "a lone run of echo", || {
        ws.runs_of("echo")
            .iter()
            .find(|r| r.run_id > nap && r.run_id != hello)
            .map(|r| r.run_id)
    });
    let page = b.get(&format!("/ui/runs/{lone}"));
    assert_eq!(page.status, 200);
    assert!(!page.body.contains("run-tree"), "{}", page.body);
    node.stop();
}

/// Issue 27: the overview showed a green `running` beside a critical reading, and
/// `GET /api/v1/node` had no level. Both give the node's level and each resource's, from the
/// policy's own thresholds; a job waiting in standby shows the pressure that holds it back.
fn the_node_api_and_the_overview_give_each_resources_level_and_a_standby_job_its_pressure(
    ws: Workspace,
) {
    // Memory is critical whatever the machine has (below 1 PB available); nothing else can be.
    for (k, v) in [
        ("JOBVISOR__HEALTH__INTERVAL", "500"),
        ("JOBVISOR__POLICY__STEP_INTERVAL", "1000"),
        ("JOBVISOR__POLICY__PRIORITY_FLOOR", "100"),
        ("JOBVISOR__POLICY__CPU_STRAINED", "100"),
        ("JOBVISOR__POLICY__CPU_CRITICAL", "100"),
        ("JOBVISOR__POLICY__PSI_STRAINED", "100"),
        ("JOBVISOR__POLICY__PSI_CRITICAL", "100"),
        ("JOBVISOR__POLICY__DISK_STRAINED", "0"),
        ("JOBVISOR__POLICY__DISK_CRITICAL", "0"),
        ("JOBVISOR__POLICY__MEMORY_STRAINED", "1000000000000000"),
        ("JOBVISOR__POLICY__MEMORY_CRITICAL", "1000000000000000"),
    ] {
        ws.set_node_env(k, v);
    }
    let (ws, node) = node_with_users(ws);
    let token = token_of(&ws, "vic");
    let status = crate::support::wait_for(30.0, "the node to judge memory critical", || {
        let r = api(&node.api, Some(&token), "GET", "/api/v1/node", None);
        assert_eq!(r.status, 200, "{}", r.body);
        let v = r.json();
        (v["level"] == "critical").then_some(v)
    });
    let resources = status["resources"].as_array().unwrap();
    let memory = resources
        .iter()
        .find(|r| r["resource"] == "memory")
        .unwrap_or_else(|| panic!("{status}"));
    assert_eq!(memory["level"], "critical", "{memory}");
    assert_eq!(memory["unit"], "MiB", "{memory}");
    assert_eq!(
        memory["critical"], 953674316.4,
        "the policy's threshold in MiB: {memory}"
    );
    assert!(
        memory["text"].as_str().unwrap().contains("(critical: <"),
        "{memory}"
    );
    let cpu = resources.iter().find(|r| r["resource"] == "cpu").unwrap();
    assert_eq!(cpu["level"], "ok", "{cpu}");
    // Issue 31: the budget and whose limit binds it, in the status and beside each reading.
    let budget = &status["budget"];
    assert!(
        ["host", "cgroup"].contains(&budget["memory_source"].as_str().unwrap_or("")),
        "{budget}"
    );
    assert!(budget["memory_bytes"].as_u64().unwrap_or(0) > 0, "{budget}");
    assert!(
        budget["cpu_cores"].as_f64().unwrap_or(0.0) > 0.0,
        "{budget}"
    );
    let whose = format!(
        "free of the {}'s ",
        budget["memory_source"].as_str().unwrap()
    );
    assert!(
        memory["text"].as_str().unwrap().contains(&whose),
        "{memory}"
    );
    assert!(memory["budget"].as_str().is_some(), "{memory}");
    let b = Browser::sign_in(&node.api, "vic", "viewer password 12");
    let page = b.get("/ui/");
    assert!(
        page.body.contains("id=\"node-budget\"") && page.body.contains("Budget: memory: the "),
        "{}",
        page.body
    );
    assert!(
        page.body
            .contains("<span class=\"st st-critical\" id=\"node-level\""),
        "{}",
        page.body
    );
    assert!(
        page.body.contains(">health critical</span>"),
        "{}",
        page.body
    );
    assert!(
        page.body
            .contains("<li><span class=\"st st-critical\">critical</span> memory "),
        "{}",
        page.body
    );
    assert!(
        page.body
            .contains("<li><span class=\"st st-ok\">ok</span> cpu "),
        "{}",
        page.body
    );
    // A job added now waits in standby: its page and the jobs table say what holds it back.
    ws.ok(&[
        "jobs",
        "add",
        "later",
        "--type",
        "function",
        "--processor",
        "main",
        "--payload",
        r#"{"function": "debug.echo"}"#,
    ]);
    let page = crate::support::wait_for(30.0, "the new job in standby", || {
        let page = b.get("/ui/jobs/later");
        page.body
            .contains("id=\"job-state\">standby")
            .then_some(page)
    });
    let held = page
        .body
        .split("id=\"held-back\">")
        .nth(1)
        .unwrap_or_else(|| panic!("{}", page.body));
    assert!(
        held.starts_with("Now: the node is under pressure: memory "),
        "{held}"
    );
    let list = b.get("/ui/jobs?search=later");
    assert!(
        list.body
            .contains("<div class=\"small held\">held back: memory critical</div>"),
        "{}",
        list.body
    );
    node.stop();
}

/// Issue 27: the job page's "Last output" linked a skipped run, which has no output. It links
/// the last run that ran.
fn the_job_page_links_the_output_of_the_last_run_that_ran_not_a_skipped_one(ws: Workspace) {
    let (ws, node) = node_with_users(ws);
    ws.ok(&["jobs", "run", "echo"]);
    let ran = crate::support::wait_for(30.0, "echo to run", || {
        ws.runs_of("echo")
            .iter()
            .find(|r| r.status == "succeeded")
            .map(|r| r.run_id)
    });
    // A newer run, skipped (its slot overlapped): it never started.
    let now = jobvisor::catalog::now_ms();
    let sql = "INSERT INTO job_run (job_id, processor_id, status, run_after, created_at,
         finished_at, error)
         SELECT job_id, processor_id, 'skipped', {now}, {now}, {now}, 'overlap: skipped'
         FROM job WHERE job_name = 'echo'";
    ws.catalog()
        .execute(&sql.replace("{now}", &now.to_string()));
    let skipped = ws
        .runs_of("echo")
        .iter()
        .find(|r| r.status == "skipped")
        .map(|r| r.run_id)
        .unwrap();
    assert!(skipped > ran);
    let b = Browser::sign_in(&node.api, "vic", "viewer password 12");
    let page = b.get("/ui/jobs/echo");
    assert!(
        page.body.contains(&format!(
            "Last output <a href=\"/ui/runs/{ran}\">(run {ran})</a>"
        )),
        "{}",
        page.body
    );
    // The duration chart's box is its own, so its empty note is drawn under it.
    assert!(
        page.body
            .contains("<div class=\"chart-slot\"><div class=\"chart\" data-chart="),
        "{}",
        page.body
    );
    node.stop();
}

/// Issue 27: the Processors page showed no instances while both processors ran one (a node
/// whose policy never changed them was left out). It shows what this node's engine runs now,
/// and how many instances are busy.
fn the_processors_page_shows_the_instances_this_node_runs_and_how_many_are_busy(ws: Workspace) {
    // `main` as `init` made it (a file's jobs name processors of the same file).
    let conf = r#"
[processor.main]
instances = 1
[processor.side]
instances = 1
[job.nap_main]
type = "function"
processor = "main"
payload = { function = "debug.sleep", ms = 60000 }
[job.nap_side]
type = "function"
processor = "side"
payload = { function = "debug.sleep", ms = 60000 }
"#;
    let (ws, node) = node_with_users_and(ws, Some(conf));
    ws.ok(&["jobs", "run", "nap_main"]);
    ws.ok(&["jobs", "run", "nap_side"]);
    crate::support::wait_for(30.0, "both naps to run", || {
        let runs = ws.runs();
        let running = |job: &str| runs.iter().any(|r| r.job == job && r.status == "running");
        (running("nap_main") && running("nap_side")).then_some(())
    });
    let b = Browser::sign_in(&node.api, "vic", "viewer password 12");
    let page = crate::support::wait_for(10.0, "both processors busy on the page", || {
        let page = b.get("/ui/processors");
        (page
            .body
            .matches("<div data-node=\"ui\">ui: 1 instance, 1 busy")
            .count()
            == 2)
            .then_some(page)
    });
    assert!(!page.body.contains(">none<"), "{}", page.body);
    node.stop();
}

/// Issue 27: one click on the overview's button paused the whole node. The first post asks,
/// on a page of its own (a form: no script needed); only its confirming post pauses, and it
/// needs the CSRF token like every write. The state's badge is a word; what it means is
/// beside it, so the badge stays within its card.
fn pausing_the_node_from_the_ui_asks_first_and_works_without_javascript(ws: Workspace) {
    let (ws, node) = node_with_users(ws);
    let token = token_of(&ws, "vic");
    let paused = || {
        api(&node.api, Some(&token), "GET", "/api/v1/node", None).json()["paused"]
            .as_bool()
            .unwrap()
    };
    let b = Browser::sign_in(&node.api, "otto", "operator password 1");
    let overview = b.get("/ui/");
    assert!(
        overview.body.contains("Pause the node…"),
        "{}",
        overview.body
    );
    let ask = b.post("/ui/node/pause", &[]);
    assert_eq!(ask.status, 200, "{}", ask.body);
    assert!(ask.body.contains("id=\"confirm-pause\""), "{}", ask.body);
    assert!(
        ask.body
            .contains("<input type=\"hidden\" name=\"confirm\" value=\"yes\">"),
        "{}",
        ask.body
    );
    assert_eq!(
        form_token(&ask.body),
        b.csrf,
        "the confirming form carries the token"
    );
    assert!(!paused(), "asking paused nothing");
    // A post with no form at all (a script's, the token in its header) asks too.
    let r = http_raw(
        &node.api,
        "POST",
        "/ui/node/pause",
        &[("Cookie", &b.cookie), ("X-CSRF-Token", &b.csrf)],
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains("id=\"confirm-pause\""), "{}", r.body);
    assert!(!paused());
    // The confirming post without the token is refused.
    let r = b.post_raw("/ui/node/pause", &[], &[("confirm", "yes")]);
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(!paused());
    let r = b.post("/ui/node/pause", &[("confirm", "yes")]);
    assert_eq!(r.status, 303, "{}", r.body);
    assert_eq!(r.header("location"), Some("/ui/"));
    assert!(paused());
    let overview = b.get("/ui/");
    assert!(
        overview.body.contains("id=\"node-state\">paused</span>"),
        "{}",
        overview.body
    );
    assert!(
        overview
            .body
            .contains("id=\"node-state-why\">by an operator"),
        "{}",
        overview.body
    );
    // Resuming asks nothing.
    let r = b.post("/ui/node/resume", &[]);
    assert_eq!(r.status, 303, "{}", r.body);
    assert!(!paused());
    node.stop();
}

/// The run ids of a runs page, in the order listed.
fn listed_runs(html: &str) -> Vec<i64> {
    html.split("<tr data-run=\"")
        .skip(1)
        .map(|r| r[..r.find('"').unwrap()].parse().unwrap())
        .collect()
}

/// The href of the link whose id is `id`, unescaped.
fn link(html: &str, id: &str) -> Option<String> {
    let tag = html
        .split("<a ")
        .find(|a| a.contains(&format!("id=\"{id}\"")))?;
    let href = tag.split("href=\"").nth(1)?;
    Some(
        href[..href.find('"')?]
            .replace("&#38;", "&")
            .replace("&amp;", "&"),
    )
}

/// Issue 27: the runs list paged only "Older". A page below the newest offers "Newer", which
/// lists the runs just above it — the page it came from — filtered or not.
fn the_runs_list_pages_newer_as_well_as_older(ws: Workspace) {
    let (ws, node) = node_with_users(ws);
    let token = token_of(&ws, "ada");
    let r = api(&node.api, Some(&token), "POST", "/api/v1/node/pause", None);
    assert_eq!(r.status, 200, "{}", r.body);
    ws.queue_runs("echo", 120);
    let b = Browser::sign_in(&node.api, "vic", "viewer password 12");
    for first in ["/ui/runs", "/ui/runs?status=queued"] {
        let page1 = b.get(first);
        let ids1 = listed_runs(&page1.body);
        assert_eq!(ids1.len(), 50, "{first}");
        assert!(
            link(&page1.body, "runs-newer").is_none(),
            "{first}: the newest page"
        );
        let older = link(&page1.body, "runs-older").unwrap_or_else(|| panic!("{}", page1.body));
        let page2 = b.get(&older);
        let ids2 = listed_runs(&page2.body);
        assert_eq!(ids2.len(), 50, "{older}");
        assert!(ids2[0] < *ids1.last().unwrap(), "{older}: older runs");
        let newer = link(&page2.body, "runs-newer").unwrap_or_else(|| panic!("{}", page2.body));
        let back = b.get(&newer);
        assert_eq!(
            listed_runs(&back.body),
            ids1,
            "{newer}: the page it came from"
        );
        assert!(
            link(&back.body, "runs-newer").is_none(),
            "{newer}: nothing newer"
        );
        let again = link(&back.body, "runs-older").unwrap();
        assert_eq!(listed_runs(&b.get(&again).body), ids2, "{again}");
    }
    node.stop();
}

/// Issue 27: the UI's forms took 16 KiB while the API takes 1 MiB, and a 20 KB payload was
/// refused with the framework's text in a banner. One limit for both; past it, the problem is
/// shown at the payload field (htmx posts carry the token in a header), or, for a plain form
/// post whose token cannot be read past the limit, in words.
fn a_job_form_takes_a_payload_as_large_as_the_api_does_and_shows_a_larger_one_at_its_field(
    ws: Workspace,
) {
    let (ws, node) = node_with_users(ws);
    let b = Browser::sign_in(&node.api, "ada", "correct horse battery");
    let big = |bytes: usize| {
        format!(
            r#"{{"function": "debug.echo", "text": "{}"}}"#,
            "x".repeat(bytes)
        )
    };
    let r = b.post(
        "/ui/jobs",
        &[
            ("name", "wide"),
            ("type", "function"),
            ("processor", "main"),
            ("payload", &big(20_000)),
        ],
    );
    assert_eq!(r.status, 303, "{}", r.body);
    assert!(
        ws.ok(&["jobs", "show", "wide"])
            .contains(&"x".repeat(20_000))
    );
    // Just under the limit both ways.
    let near = big(jobvisor::http::BODY_LIMIT - 4096);
    let r = b.post(
        "/ui/jobs/wide",
        &[
            ("type", "function"),
            ("processor", "main"),
            ("payload", &near),
        ],
    );
    assert_eq!(r.status, 303, "{}", r.body);
    // Past it, as htmx posts it: the form again, the problem at the payload.
    let past = big(jobvisor::http::BODY_LIMIT);
    let body = form(&[
        ("type", "function"),
        ("processor", "main"),
        ("payload", &past),
    ]);
    let r = http_raw(
        &node.api,
        "POST",
        "/ui/jobs/wide",
        &[
            FORM,
            ("Cookie", &b.cookie),
            ("X-CSRF-Token", &b.csrf),
            ("HX-Request", "true"),
        ],
        &body,
    );
    assert_eq!(r.status, 422, "{}", r.body);
    let at_field = r
        .body
        .split("id=\"payload-error\">")
        .nth(1)
        .unwrap_or_else(|| panic!("{}", r.body));
    assert!(
        at_field.starts_with("the form is larger than 1024 KiB (1048576 bytes)"),
        "{at_field}"
    );
    // A plain form post past the limit: its token cannot be read, and it says why.
    let r = b.post(
        "/ui/jobs/wide",
        &[
            ("type", "function"),
            ("processor", "main"),
            ("payload", &past),
        ],
    );
    assert_eq!(r.status, 413, "{}", r.body);
    assert!(
        r.body.contains("the form is larger than 1024 KiB"),
        "{}",
        r.body
    );
    assert!(!r.body.contains("CSRF"), "{}", r.body);
    assert!(
        ws.ok(&["jobs", "show", "wide"])
            .contains(&"x".repeat(20_000)),
        "nothing half-written"
    );
    node.stop();
}
