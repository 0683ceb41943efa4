//! How a node's HTTP travels (issue 27, point 12): HTTPS from PEM files reloaded on SIGHUP,
//! tokens that expire, a warning for a wide bind in clear, and a deadline on request bodies.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::{Node, Response, Workspace, api, parse_response, text, wait_for};

crate::on_both_backends!(
    a_token_is_refused_from_its_expiry_on,
    an_expired_token_is_refused_with_401_and_listed_as_expired,
);

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/tls")
        .join(name)
}

/// Copies the test pair `pair` (`a` or `b`) to `tls.crt` and `tls.key` in the workspace.
fn install_pair(ws: &Workspace, pair: &str) {
    std::fs::copy(fixture(&format!("{pair}.crt")), ws.path("tls.crt")).unwrap();
    std::fs::copy(fixture(&format!("{pair}.key")), ws.path("tls.key")).unwrap();
}

fn serve_tls(ws: &Workspace) {
    ws.set_node_env(
        "JOBVISOR__HTTP__TLS_CERT",
        ws.path("tls.crt").to_str().unwrap(),
    );
    ws.set_node_env(
        "JOBVISOR__HTTP__TLS_KEY",
        ws.path("tls.key").to_str().unwrap(),
    );
}

/// One HTTPS GET of `path` on `base` (`https://127.0.0.1:port`) by a client that trusts only
/// the certificate in `ca`; Err is the TLS or connection failure.
fn https_get(base: &str, ca: &Path, path: &str, token: Option<&str>) -> Result<Response, String> {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(ca).unwrap())
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::try_from("localhost").unwrap();
    let conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let addr = base.strip_prefix("https://").expect("an https:// address");
    let tcp = TcpStream::connect(addr).map_err(|e| e.to_string())?;
    tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n{auth}\r\n");
    tls.write_all(request.as_bytes())
        .map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    match tls.read_to_end(&mut raw) {
        Ok(_) => {}
        // A peer that closes without close_notify after a whole response.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => {}
        Err(e) => return Err(e.to_string()),
    }
    Ok(parse_response(&raw))
}

fn sighup(node: &Node) {
    // SAFETY: signalling our own child process.
    unsafe {
        libc::kill(node.child.id() as i32, libc::SIGHUP);
    }
}

fn log_of(ws: &Workspace, name: &str) -> String {
    std::fs::read_to_string(ws.log_path(name)).unwrap_or_default()
}

const CLEAR_WARNING: &str = "passwords and tokens cross the network in clear";

#[test]
fn https_serves_the_api_with_the_configured_pair_and_a_sighup_loads_a_new_one() {
    let ws = Workspace::new();
    install_pair(&ws, "a");
    serve_tls(&ws);
    let node = ws.start_node("tls");
    assert!(node.api.starts_with("https://"), "{}", node.api);
    let token = node.token.clone().expect("a first start prints a token");
    let (a, b) = (fixture("a.crt"), fixture("b.crt"));

    let health = https_get(&node.api, &a, "/healthz", None).unwrap();
    assert_eq!(health.status, 200, "{}", health.body);
    let me = https_get(&node.api, &a, "/api/v1/node", Some(&token)).unwrap();
    assert_eq!(me.status, 200, "{}", me.body);
    let metrics = https_get(&node.api, &a, "/metrics", Some(&token)).unwrap();
    assert_eq!(metrics.status, 200, "{}", metrics.body);
    let refused = https_get(&node.api, &b, "/healthz", None).unwrap_err();
    assert!(refused.contains("certificate"), "{refused}");
    // No plain HTTP on the TLS port: the server answers a cleartext request with no HTTP.
    let plain = format!("http://{}", node.api.trim_start_matches("https://"));
    let mut tcp = TcpStream::connect(plain.trim_start_matches("http://")).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = tcp.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n");
    let mut answer = Vec::new();
    let _ = tcp.read_to_end(&mut answer);
    assert!(
        !answer.starts_with(b"HTTP/"),
        "cleartext got an HTTP answer"
    );

    // A bad new pair (b's certificate with a's key) is logged and a's pair kept.
    std::fs::copy(fixture("b.crt"), ws.path("tls.crt")).unwrap();
    sighup(&node);
    wait_for(10.0, "the refused reload in the log", || {
        log_of(&ws, "tls")
            .contains("still serving the previous certificate")
            .then_some(())
    });
    assert!(log_of(&ws, "tls").contains("http.tls_key"), "names the key");
    let still = https_get(&node.api, &a, "/healthz", None).unwrap();
    assert_eq!(
        still.status, 200,
        "the old pair still serves after a bad reload"
    );

    // The whole of b: served from the next handshake on.
    std::fs::copy(fixture("b.key"), ws.path("tls.key")).unwrap();
    sighup(&node);
    let reloaded = wait_for(10.0, "the new certificate served", || {
        https_get(&node.api, &b, "/healthz", None).ok()
    });
    assert_eq!(reloaded.status, 200);
    assert!(
        https_get(&node.api, &a, "/healthz", None).is_err(),
        "the old certificate is no longer presented"
    );
    let log = log_of(&ws, "tls");
    assert!(
        !log.contains(CLEAR_WARNING),
        "no clear-text warning on loopback: {log}"
    );
    assert_eq!(node.stop(), Some(0), "the node outlived both SIGHUPs");
}

#[test]
fn a_bad_tls_file_at_start_is_one_error_naming_it_and_exit_78() {
    let ws = Workspace::new();
    ws.ok(&["init"]);
    std::fs::write(ws.path("garbage.pem"), "not a certificate\n").unwrap();
    let cases: [(&str, &str, &str); 4] = [
        ("missing.crt", "a.key", "missing.crt: cannot read"),
        ("garbage.pem", "a.key", "garbage.pem: holds no certificate"),
        ("a.crt", "garbage.pem", "garbage.pem: not a PEM private key"),
        ("a.crt", "b.key", "does not belong to the certificate"),
    ];
    for (cert, key, expected) in cases {
        let path = |f: &str| match f {
            "a.crt" | "a.key" | "b.key" => fixture(f),
            other => ws.path(other),
        };
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_jobvisor"))
            .arg("--db")
            .arg(ws.db())
            .args(["run", "--bind", "127.0.0.1:0", "--data-dir"])
            .arg(ws.path("data"))
            .env_remove("JOBVISOR_CONFIG")
            .env("JOBVISOR__HTTP__TLS_CERT", path(cert))
            .env("JOBVISOR__HTTP__TLS_KEY", path(key))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(78), "{cert}/{key}: {}", text(&out));
        assert!(err.contains(expected), "{cert}/{key}: {err}");
        assert!(!err.contains("panicked"), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "one error: {err}");
        assert!(!ws.path("data").exists(), "nothing started");
    }
    // One of the two alone is a configuration error naming the missing one.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_jobvisor"))
        .arg("--db")
        .arg(ws.db())
        .args(["run", "--bind", "127.0.0.1:0"])
        .env_remove("JOBVISOR_CONFIG")
        .env("JOBVISOR__HTTP__TLS_CERT", fixture("a.crt"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(78), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("http.tls_key"),
        "{}",
        text(&out)
    );
}

#[test]
fn a_wide_bind_without_tls_warns_that_credentials_cross_in_clear() {
    let ws = Workspace::new();
    ws.ok(&["init"]);
    ws.ok(&["users", "add", "root", "--role", "admin"]);
    let node = ws.try_start_node_on("wide", "0.0.0.0:0").unwrap();
    let log = log_of(&ws, "wide");
    assert!(log.contains(CLEAR_WARNING), "{log}");
    assert!(log.contains("http.tls_cert"), "says how to fix it: {log}");
    node.stop();

    install_pair(&ws, "a");
    serve_tls(&ws);
    let node = ws.try_start_node_on("wide-tls", "0.0.0.0:0").unwrap();
    assert!(node.api.starts_with("https://"));
    let log = log_of(&ws, "wide-tls");
    assert!(!log.contains(CLEAR_WARNING), "TLS on: no warning: {log}");
    node.stop();
}

/// Sends a request head announcing `declared` body bytes and then only `sent` of them, and
/// stalls; returns the response and how long after the head the server closed.
fn stall(base: &str, token: &str, head_extra: &str, first: &[u8]) -> (Response, Duration) {
    let addr = base.trim_start_matches("http://");
    let mut tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let head = format!(
        "POST /api/v1/jobs HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\n{head_extra}\r\n"
    );
    tcp.write_all(head.as_bytes()).unwrap();
    tcp.write_all(first).unwrap();
    let t0 = Instant::now();
    let mut raw = Vec::new();
    let read = tcp.read_to_end(&mut raw);
    let closed = t0.elapsed();
    assert!(
        read.is_ok(),
        "the server closed the connection (not our read timeout): {read:?}, after {closed:?} \
         with {:?}",
        String::from_utf8_lossy(&raw)
    );
    (parse_response(&raw), closed)
}

#[test]
fn a_stalled_request_body_is_answered_408_and_closed_within_the_body_timeout() {
    let ws = Workspace::new();
    ws.ok(&["init"]);
    ws.set_node_env("JOBVISOR__HTTP__BODY_TIMEOUT", "500");
    let node = ws.start_node("slow");
    let token = node.token.clone().unwrap();

    let framings: [(&str, &[u8]); 2] = [
        ("Content-Length: 1000\r\n", b"{\"name\": "),
        ("Transfer-Encoding: chunked\r\n", b"9\r\n{\"name\": \r\n"),
    ];
    for (framing, part) in framings {
        let (r, closed) = stall(&node.api, &token, framing, part);
        assert_eq!(r.status, 408, "{framing}: {}", r.body);
        assert!(r.body.contains("http.body_timeout"), "{}", r.body);
        assert_eq!(r.header("connection"), Some("close"), "{framing}");
        assert!(
            closed < Duration::from_secs(5),
            "{framing}: closed after {closed:?}"
        );
    }

    // A body that arrives in time is untouched by the deadline.
    let ok = api(&node.api, Some(&token), "GET", "/api/v1/jobs", None);
    assert_eq!(ok.status, 200, "{}", ok.body);
    let bad = api(
        &node.api,
        Some(&token),
        "POST",
        "/api/v1/jobs",
        Some(&serde_json::json!({})),
    );
    assert_ne!(bad.status, 408, "{}", bad.body);
    assert!(bad.status < 500, "{}", bad.body);
}

fn a_token_is_refused_from_its_expiry_on(ws: Workspace) {
    use jobvisor::model::Role;
    let catalog = ws.open_catalog();
    catalog.add_user("eve", "x", Role::Viewer, "test").unwrap();
    catalog
        .add_token("eve", "short", "hash-short", Some(5_000), "test")
        .unwrap();
    catalog
        .add_token("eve", "forever", "hash-forever", None, "test")
        .unwrap();
    let who = |hash: &str, now: i64| catalog.principal_of_token(hash, now).unwrap();
    assert!(who("hash-short", 4_999).is_some());
    assert!(who("hash-short", 5_000).is_none(), "refused at its expiry");
    assert!(who("hash-short", 9_000_000_000_000).is_none());
    assert!(who("hash-forever", 9_000_000_000_000).is_some());
    let listed: Vec<Option<i64>> = catalog
        .tokens()
        .unwrap()
        .iter()
        .map(|t| t.expires_at)
        .collect();
    assert_eq!(listed, [Some(5_000), None]);
}

fn an_expired_token_is_refused_with_401_and_listed_as_expired(ws: Workspace) {
    ws.ok(&["init"]);
    ws.ok(&["users", "add", "ops", "--role", "operator"]);
    let created = ws.ok(&["--json", "tokens", "create", "ops", "--expires", "1h"]);
    let created: serde_json::Value = serde_json::from_str(&created).unwrap();
    let day = ws.ok(&[
        "--json",
        "tokens",
        "create",
        "ops",
        "--name",
        "day",
        "--expires",
        "1d",
    ]);
    let day: serde_json::Value = serde_json::from_str(&day).unwrap();
    let forever = ws.ok(&["--json", "tokens", "create", "ops", "--name", "forever"]);
    let forever: serde_json::Value = serde_json::from_str(&forever).unwrap();
    assert!(forever["expires_at"].is_null(), "{forever}");
    let expires = chrono::DateTime::parse_from_rfc3339(created["expires_at"].as_str().unwrap())
        .unwrap()
        .timestamp_millis();
    let in_an_hour = chrono::Utc::now().timestamp_millis() + 3_600_000;
    assert!((expires - in_an_hour).abs() < 60_000, "{created}");

    // `day` expired: its expiry moved into the past, as time would.
    let id = day["id"].as_i64().unwrap();
    ws.catalog().execute(&format!(
        "UPDATE api_token SET expires_at = 1000 WHERE token_id = {id}"
    ));
    let list = ws.ok(&["tokens", "list"]);
    assert!(list.contains("EXPIRES"), "{list}");
    let line = |name: &str| {
        list.lines()
            .find(|l| l.split_whitespace().nth(2) == Some(name))
            .unwrap_or_else(|| panic!("{name} in {list}"))
            .to_string()
    };
    assert!(line("day").contains("(expired)"), "{list}");
    assert!(line("forever").trim_end().ends_with("never"), "{list}");
    assert!(!line("cli").contains("expired"), "{list}");

    let node = ws.start_node("n1");
    let get =
        |t: &serde_json::Value| api(&node.api, t["token"].as_str(), "GET", "/api/v1/node", None);
    assert_eq!(get(&created).status, 200);
    assert_eq!(get(&forever).status, 200);
    let refused = get(&day);
    assert_eq!(refused.status, 401, "{}", refused.body);

    let out = ws.run(&[
        "tokens",
        "create",
        "ops",
        "--name",
        "x",
        "--expires",
        "soon",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("expires") && err.contains("soon"), "{err}");
    let none = ws
        .catalog()
        .count("SELECT count(*) FROM api_token WHERE token_name = 'x'");
    assert_eq!(none, 0, "nothing half-written");
}
