//! The OpenAPI document: the committed copy is what the handlers generate, a real validator
//! accepts it, the node serves it, and every route in it is guarded — 401 without
//! credentials (but `/healthz`), 403 for a viewer on every write, no secret in any answer.

use serde_json::{Value, json};

use crate::support::{Workspace, api, http_raw};

const COMMITTED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/http/openapi.json");

#[test]
fn the_committed_openapi_document_is_what_the_handlers_generate() {
    let generated = jobvisor::http::openapi_json();
    if std::env::var_os("JOBVISOR_BLESS").is_some() {
        std::fs::write(COMMITTED, &generated).unwrap();
    }
    let committed = std::fs::read_to_string(COMMITTED).unwrap_or_default();
    assert!(
        committed == generated,
        "src/http/openapi.json is stale: regenerate it with \
         `JOBVISOR_BLESS=1 cargo test --test it openapi` and commit it"
    );
}

#[test]
fn the_openapi_document_passes_openapi_spec_validator() {
    // Installed by .ci/test (pip install openapi-spec-validator); absent, this fails.
    let out = std::process::Command::new("python3")
        .args(["-m", "openapi_spec_validator", COMMITTED])
        .output()
        .expect("python3 must be installed (.ci/test installs openapi-spec-validator)");
    assert!(
        out.status.success(),
        "openapi-spec-validator refused the document:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("OK"), "{said}");
}

/// Every (method, path) of the document, with path parameters filled in.
fn routes(doc: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        let path = path
            .replace("{name}", "device_stats")
            .replace("{id}", "1")
            .replace("{stat_type}", "device.cpu_used");
        for method in item.as_object().unwrap().keys() {
            out.push((method.to_uppercase(), path.clone()));
        }
    }
    out
}

#[test]
fn every_documented_route_needs_credentials_viewers_cannot_write_and_no_secret_leaks() {
    let ws = Workspace::new();
    ws.ok(&["init"]);
    ws.disable_seeded_jobs();
    let node = ws.start_node("guarded");
    let admin = node.token.clone().unwrap();
    ws.ok(&["users", "add", "vic", "--role", "viewer"]);
    let out = ws.ok(&["--json", "tokens", "create", "vic"]);
    let viewer = serde_json::from_str::<Value>(&out).unwrap()["token"]
        .as_str()
        .unwrap()
        .to_string();
    // A stored outbound secret, and a run so that /runs/1 exists.
    let secret = "outbound-s3cret-value";
    let r = api(
        &node.api,
        Some(&admin),
        "POST",
        "/api/v1/processors",
        Some(&json!({"name": "far", "ip_address": "127.0.0.1", "port": 9,
                     "rpc_user": "u", "rpc_password": secret})),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let r = api(
        &node.api,
        Some(&admin),
        "POST",
        "/api/v1/jobs/device_stats/runs",
        None,
    );
    assert_eq!(r.status, 201, "{}", r.body);

    let served = http_raw(
        &node.api,
        "GET",
        "/api/v1/openapi.json",
        &[("Authorization", &format!("Bearer {admin}"))],
        b"",
    );
    assert_eq!(served.status, 200);
    assert!(
        served.body == std::fs::read_to_string(COMMITTED).unwrap(),
        "the node serves another document than src/http/openapi.json"
    );
    let doc: Value = serde_json::from_str(&served.body).unwrap();
    let routes = routes(&doc);
    assert!(routes.len() >= 30, "{} routes", routes.len());
    let mut checked_writes = 0;
    for (method, path) in &routes {
        let anonymous = http_raw(&node.api, method, path, &[], b"");
        if path == "/healthz" {
            assert_eq!(anonymous.status, 200);
            assert_eq!(anonymous.json(), json!({"status": "ok"}), "no details");
            continue;
        }
        assert_eq!(anonymous.status, 401, "{method} {path}: {}", anonymous.body);
        assert!(anonymous.json()["error"].is_string());
        if method != "GET" {
            // /rpc answers a viewer's reads; a write method is what must be refused.
            let body = if path == "/rpc" {
                json!({"jsonrpc": "2.0", "method": "job.run", "params": {"job": "device_stats"}, "id": 1})
            } else {
                json!({})
            };
            let r = api(&node.api, Some(&viewer), method, path, Some(&body));
            assert_eq!(r.status, 403, "{method} {path} as a viewer: {}", r.body);
            checked_writes += 1;
        } else {
            for token in [&viewer, &admin] {
                let r = api(&node.api, Some(token), method, path, None);
                assert!(r.status < 500, "{method} {path}: {} {}", r.status, r.body);
                for leak in [secret, admin.as_str(), viewer.as_str()] {
                    assert!(
                        !r.body.contains(leak),
                        "{method} {path} leaks a secret: {}",
                        r.body
                    );
                }
            }
        }
    }
    assert!(checked_writes >= 15, "{checked_writes} writes");
    let log = std::fs::read_to_string(ws.path("guarded.log")).unwrap();
    for leak in [secret, admin.as_str(), viewer.as_str()] {
        assert!(!log.contains(leak), "the node's log holds a secret");
    }
}
