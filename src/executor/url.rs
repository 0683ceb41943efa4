//! URL jobs: an HTTP request with method, headers and body; connect and total timeouts; a cap
//! on the response size; TLS verified against the system's roots.
//!
//! The request is the payload's: a run's params never change its url, method or headers; they
//! reach the body only with `send_input = true` and no `body`, and then only in the fields
//! `payload.open_params` lists ([`super::fixed_input`]).
//!
//! Invariant: a non-2xx status is a failure carrying the status and the start of the body.

use std::time::Duration;

use serde_json::Value as Json;
use tokio::sync::watch;

use super::{ExecEnv, ExecResult, fixed_input};
use crate::catalog::queue::ClaimedRun;

/// Runs a url job.
pub async fn run(run: &ClaimedRun, env: &ExecEnv, mut cancel: watch::Receiver<bool>) -> ExecResult {
    let p = &run.payload;
    let Some(url) = p.get("url").and_then(Json::as_str) else {
        return ExecResult::Err("payload.url is missing".into());
    };
    let method = p.get("method").and_then(Json::as_str).unwrap_or("GET");
    let Ok(method) = awc::http::Method::from_bytes(method.as_bytes()) else {
        return ExecResult::Err(format!("bad method `{method}`"));
    };
    let connector =
        awc::Connector::new().timeout(Duration::from_millis(env.limits.connect_timeout));
    // The run's timeout bounds the whole request (enforced by the processor); no client default.
    let client = awc::Client::builder()
        .connector(connector)
        .disable_timeout()
        .max_redirects(5)
        .finish();
    let mut req = client.request(method, url);
    if let Some(Json::Object(headers)) = p.get("headers") {
        for (k, v) in headers {
            if let Some(v) = v.as_str() {
                req = req.insert_header((k.as_str(), v));
            }
        }
    }
    let body = match p.get("body") {
        Some(Json::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None if p.get("send_input").and_then(Json::as_bool).unwrap_or(false) => {
            match fixed_input(run, crate::jobconf::URL_KEYS) {
                Ok(input) => input.to_string(),
                Err(e) => return ExecResult::Err(e),
            }
        }
        None => String::new(),
    };
    let limit = env.limits.response_limit;
    let request = async move {
        let mut resp = req
            .send_body(body)
            .await
            .map_err(|e| format!("request to {url} failed: {e}"))?;
        let status = resp.status();
        let bytes = resp
            .body()
            .limit(limit)
            .await
            .map_err(|e| format!("reading the response: {e}"))?;
        Ok::<_, String>((status, bytes))
    };
    let outcome = tokio::select! {
        r = request => r,
        _ = cancel.wait_for(|c| *c) => return ExecResult::Cancelled,
    };
    match outcome {
        Err(e) => ExecResult::Err(e),
        Ok((status, bytes)) => {
            let text = String::from_utf8_lossy(&bytes).into_owned();
            let body = serde_json::from_str::<Json>(&text).unwrap_or(Json::String(text.clone()));
            if status.is_success() {
                ExecResult::Ok(serde_json::json!({ "status": status.as_u16(), "body": body }))
            } else {
                let head: String = text.chars().take(300).collect();
                ExecResult::Err(format!("HTTP {status}: {head}"))
            }
        }
    }
}
