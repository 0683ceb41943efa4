//! Credentials at the API of a real node (issue 27, points 10 and 14): failed logins throttle
//! only what they tried — never valid credentials —, a trusted proxy's X-Forwarded-For is read
//! only when configured, every answer says `nosniff`, and Basic auth pays argon2 once a while,
//! not per request, while a changed password or a removed user is refused at once.

use std::time::Instant;

use serde_json::json;

use crate::support::{Node, Response, Workspace, api, http_raw};
use crate::ui::add_user;

crate::on_both_backends!(
    failed_logins_never_lock_out_valid_credentials_and_throttle_only_what_they_tried,
    basic_auth_verifies_a_password_once_a_while_and_follows_its_change_at_once,
    every_api_answer_says_nosniff,
);

/// A request with Basic `user:password`, and `extra` headers.
fn basic(node: &Node, user: &str, password: &str, extra: &[(&str, &str)]) -> Response {
    use base64::Engine as _;
    let auth = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
    );
    let mut headers = vec![("Authorization", auth.as_str())];
    headers.extend_from_slice(extra);
    http_raw(&node.api, "GET", "/api/v1/jobs", &headers, b"")
}

/// A `Retry-After` in seconds, at most the throttle's window.
fn retry_after(r: &Response) -> u64 {
    let secs: u64 = r
        .header("retry-after")
        .unwrap_or_else(|| panic!("no Retry-After: {r:?}"))
        .parse()
        .unwrap();
    assert!((1..=60).contains(&secs), "{secs}");
    secs
}

/// The UI's sign-in form posted with `user` and `password` (with the form's own token).
fn ui_sign_in(node: &Node, user: &str, password: &str) -> Response {
    let page = http_raw(&node.api, "GET", "/ui/login", &[], b"");
    let cookie = page
        .headers
        .iter()
        .find_map(|(n, v)| (n == "set-cookie").then(|| v.split(';').next())?)
        .filter(|c| c.starts_with("jv_login="))
        .expect("the login form's cookie")
        .to_string();
    let at = page.body.find("name=\"csrf\" value=\"").unwrap() + 19;
    let token = &page.body[at..at + page.body[at..].find('"').unwrap()];
    let body = form_urlencoded::Serializer::new(String::new())
        .append_pair("csrf", token)
        .append_pair("user", user)
        .append_pair("password", password)
        .finish();
    http_raw(
        &node.api,
        "POST",
        "/ui/login",
        &[
            ("Content-Type", "application/x-www-form-urlencoded"),
            ("Cookie", &cookie),
        ],
        body.as_bytes(),
    )
}

/// Issue 27, point 10: ten failed logins from one address locked every valid token out.
fn failed_logins_never_lock_out_valid_credentials_and_throttle_only_what_they_tried(ws: Workspace) {
    ws.ok(&["init"]);
    ws.disable_seeded_jobs();
    add_user(&ws, "ada", "admin", "correct horse battery");
    add_user(&ws, "otto", "operator", "operator password 1");
    let proxy = ws.write("proxy.toml", "[http]\ntrusted_proxies = [\"127.0.0.1\"]\n");
    let node = ws.start_node("n1");
    let token = {
        let out = ws.ok(&["--json", "tokens", "create", "ada"]);
        serde_json::from_str::<serde_json::Value>(&out).unwrap()["token"]
            .as_str()
            .unwrap()
            .to_string()
    };
    // Ten wrong passwords for `ada` from this address: 401 each, then 429 with Retry-After.
    for i in 0..10 {
        let r = basic(&node, "ada", "wrong password", &[]);
        assert_eq!(r.status, 401, "attempt {i}: {}", r.body);
    }
    let r = basic(&node, "ada", "wrong password", &[]);
    assert_eq!(r.status, 429, "{}", r.body);
    retry_after(&r);
    // Valid credentials are never refused: ada's own password, her token on every route, and
    // another user from the same address.
    assert_eq!(
        basic(&node, "ada", "correct horse battery", &[]).status,
        200
    );
    for path in ["/api/v1/jobs", "/metrics", "/readyz"] {
        let r = api(&node.api, Some(&token), "GET", path, None);
        assert_eq!(r.status, 200, "{path}: {}", r.body);
    }
    let rpc = json!({"jsonrpc": "2.0", "method": "node.status", "id": 1});
    let r = api(&node.api, Some(&token), "POST", "/rpc", Some(&rpc));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(basic(&node, "otto", "operator password 1", &[]).status, 200);
    assert_eq!(basic(&node, "otto", "a wrong one", &[]).status, 401);
    // The UI's sign-in counts the same failures: wrong is 429 with Retry-After, right signs in.
    let r = ui_sign_in(&node, "ada", "wrong password");
    assert_eq!(r.status, 429, "{}", r.body);
    retry_after(&r);
    assert_eq!(
        ui_sign_in(&node, "ada", "correct horse battery").status,
        303
    );

    // Bad tokens are counted by their prefix: one guessed prefix is throttled, not the rest.
    let jobs_with = |token: &str| api(&node.api, Some(token), "GET", "/api/v1/jobs", None);
    for i in 0..10 {
        let r = jobs_with(&format!("jv_00000000{i:056}"));
        assert_eq!(r.status, 401, "attempt {i}: {}", r.body);
    }
    let r = jobs_with(&format!("jv_00000000{:056}", 99));
    assert_eq!(r.status, 429, "{}", r.body);
    retry_after(&r);
    let r = jobs_with(&format!("jv_11111111{:056}", 0));
    assert_eq!(r.status, 401, "{}", r.body);
    assert_eq!(jobs_with(&token).status, 200);

    // Not configured, X-Forwarded-For is not read: otto's failures "from" other addresses
    // are all this one's.
    for i in 0..10 {
        let xff = format!("10.0.0.{i}");
        let r = basic(&node, "otto", "wrong", &[("X-Forwarded-For", &xff)]);
        assert!(matches!(r.status, 401 | 429), "{}", r.body);
    }
    let r = basic(&node, "otto", "wrong", &[("X-Forwarded-For", "10.9.9.9")]);
    assert_eq!(r.status, 429, "{}", r.body);
    drop(node);

    // Behind a trusted proxy, failures count by the address it forwards for.
    ws.set_node_env("JOBVISOR_CONFIG", &proxy.display().to_string());
    let node = ws.start_node("n2");
    for i in 0..10 {
        let r = basic(&node, "ada", "wrong", &[("X-Forwarded-For", "10.0.0.1")]);
        assert_eq!(r.status, 401, "attempt {i}: {}", r.body);
    }
    let r = basic(&node, "ada", "wrong", &[("X-Forwarded-For", "10.0.0.1")]);
    assert_eq!(r.status, 429, "{}", r.body);
    let r = basic(&node, "ada", "wrong", &[("X-Forwarded-For", "10.0.0.2")]);
    assert_eq!(r.status, 401, "another client behind the proxy: {}", r.body);
}

/// Issue 27, point 14: every Basic-auth request paid an argon2 verification.
fn basic_auth_verifies_a_password_once_a_while_and_follows_its_change_at_once(ws: Workspace) {
    ws.ok(&["init"]);
    ws.disable_seeded_jobs();
    add_user(&ws, "otto", "operator", "operator password 1");
    let node = ws.start_node("n1");
    let began = Instant::now();
    let r = basic(&node, "otto", "operator password 1", &[]);
    let first = began.elapsed();
    assert_eq!(r.status, 200, "{}", r.body);
    let began = Instant::now();
    for _ in 0..20 {
        assert_eq!(basic(&node, "otto", "operator password 1", &[]).status, 200);
    }
    let next = began.elapsed() / 20;
    eprintln!(
        "Basic auth: first request {} ms (argon2), then {:.2} ms a request",
        first.as_millis(),
        next.as_secs_f64() * 1000.0
    );
    assert!(next * 4 < first, "first {first:?}, then {next:?} a request");
    // A wrong password is still verified (and refused), never taken from what was verified.
    assert_eq!(basic(&node, "otto", "operator password 2", &[]).status, 401);
    // A new password: the old one is refused at once, the new one accepted.
    {
        use std::io::Write;
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_jobvisor"))
            .arg("--db")
            .arg(ws.db_arg())
            .args(["users", "passwd", "otto"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        writeln!(child.stdin.take().unwrap(), "a new password 12").unwrap();
        assert!(child.wait().unwrap().success());
    }
    assert_eq!(basic(&node, "otto", "operator password 1", &[]).status, 401);
    assert_eq!(basic(&node, "otto", "a new password 12", &[]).status, 200);
    // A removed user is refused at once.
    ws.ok(&["users", "remove", "otto"]);
    assert_eq!(basic(&node, "otto", "a new password 12", &[]).status, 401);

    // A client that keeps failing Basic auth (each failure verified: valid credentials must
    // pass) does not hold up the requests of others: argon2 runs outside the catalog's lock.
    let token = crate::remote::operator_token(&ws, "olga");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let hammers: Vec<_> = (0..3)
        .map(|_| {
            let (api_url, stop) = (node.api.clone(), stop.clone());
            std::thread::spawn(move || {
                use base64::Engine as _;
                let auth = format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode("admin:guess")
                );
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    http_raw(
                        &api_url,
                        "GET",
                        "/api/v1/jobs",
                        &[("Authorization", &auth)],
                        b"",
                    );
                }
            })
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(200)); // the hammers under way
    let mut took: Vec<_> = (0..15)
        .map(|_| {
            let began = Instant::now();
            let r = api(&node.api, Some(&token), "GET", "/api/v1/jobs", None);
            assert_eq!(r.status, 200, "{}", r.body);
            began.elapsed()
        })
        .collect();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for h in hammers {
        h.join().unwrap();
    }
    took.sort();
    let median = took[took.len() / 2];
    eprintln!(
        "a token request while 3 clients keep failing Basic auth: median {:.1} ms (one argon2 \
         verification: {} ms)",
        median.as_secs_f64() * 1000.0,
        first.as_millis()
    );
    assert!(median * 2 < first, "median {median:?}, argon2 {first:?}");
    drop(node);
}

/// Issue 27, point 14: API responses lacked `X-Content-Type-Options: nosniff`.
fn every_api_answer_says_nosniff(ws: Workspace) {
    ws.ok(&["init"]);
    let node = ws.start_node("n1");
    let t = node.token.clone().unwrap();
    let rpc = json!({"jsonrpc": "2.0", "method": "node.status", "id": 1});
    for (token, method, path, body, status) in [
        (None, "GET", "/healthz", None, 200),
        (Some(t.as_str()), "GET", "/api/v1/jobs", None, 200),
        (Some(t.as_str()), "GET", "/metrics", None, 200),
        (Some(t.as_str()), "GET", "/api/v1/openapi.json", None, 200),
        (Some(t.as_str()), "POST", "/rpc", Some(&rpc), 200),
        (None, "GET", "/api/v1/jobs", None, 401),
        (Some(t.as_str()), "GET", "/api/v1/nope", None, 404),
        (Some(t.as_str()), "GET", "/api/v1/jobs/nope", None, 404),
    ] {
        let r = api(&node.api, token, method, path, body);
        assert_eq!(r.status, status, "{path}: {}", r.body);
        assert_eq!(
            r.header("x-content-type-options"),
            Some("nosniff"),
            "{method} {path}"
        );
    }
}
