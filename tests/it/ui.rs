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
    let node = ws.start_node("ui");
    (ws, node)
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
    let made: serde_json::Value =
        serde_json::from_str(&ws.ok(&["--json", "tokens", "create", "ada"])).unwrap();
    let token = made["token"].as_str().map(String::from);
    let r = api(
        &node.api,
        token.as_deref(),
        "POST",
        "/api/v1/node/pause",
        None,
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let mut ids = Vec::new();
    for _ in 0..3 {
        let r = api(
            &node.api,
            token.as_deref(),
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
