//! Runs on a remote processor: each is a JSON-RPC 2.0 call to the remote node's `/rpc`, with
//! the credentials of the processor's row, and its answer is the run's result here.
//!
//! - An `rpc` job calls `payload.method` (an engine command such as `job.run`, or a function
//!   registered on the remote node); a `function` job calls its `payload.function`. The
//!   parameters are the payload without that key, plus of the run's parameters only the
//!   fields `payload.open_params` lists ([`super::fixed_input`]: a run never overrides what an
//!   admin fixed, and a parameter naming another field fails the run), plus `_timeout_ms` when
//!   the job has a timeout, so that the remote node waits for its run as long as this one does.
//! - A call the remote node answers "not ended yet" (-32011, with its run id) is followed by
//!   `run.get` until that run ends: a job without a timeout may run for as long as it takes.
//! - The processor's row is read at every call, so an edit of its address or credentials takes
//!   effect with the next run; a credential given as `env:NAME` or `file:PATH` is read then too,
//!   and a missing variable or unreadable file fails the run naming it. A bearer token is sent when the row names no `rpc_user`; with a
//!   user, Basic `user:password` (the remote node verifies its argon2 hash once a minute, not
//!   per call; a token, `jobvisor tokens create` on that node, costs less still).
//!
//! Invariant: the credentials go in the Authorization header and nowhere else — never in a
//! result, an error or a log line; the failure reason names the node and what happened
//! (refused credentials, unreachable at its address, the remote error's message).

use std::time::Duration;

use serde_json::{Value as Json, json};
use tokio::sync::watch;

use super::{ExecEnv, ExecResult, fixed_input};
use crate::catalog::queue::ClaimedRun;
use crate::jobconf::secret::Secret;
use crate::model::JobType;

/// JSON-RPC code of a call whose run had not ended when the remote node stopped waiting.
const NOT_ENDED: i64 = -32011;
/// The first wait between `run.get` polls; it doubles up to [`POLL_MAX`].
const POLL_FIRST: Duration = Duration::from_millis(100);
/// The longest wait between `run.get` polls.
const POLL_MAX: Duration = Duration::from_secs(2);

/// Executes `run` on the remote processor `processor_id` (see the module doc).
pub async fn run(
    run: &ClaimedRun,
    env: &ExecEnv,
    processor_id: i64,
    mut cancel: watch::Receiver<bool>,
) -> ExecResult {
    let call = async {
        let (method, params) = call_of(run)?;
        let target = Target::load(env, processor_id).await?;
        let client = awc::Client::builder()
            .connector(
                awc::Connector::new().timeout(Duration::from_millis(env.limits.connect_timeout)),
            )
            // The run's timeout bounds the call (the processor enforces it); no client default.
            .disable_timeout()
            .finish();
        let limit = env.limits.response_limit;
        match target
            .post(&client, &method, params, run.run_id, limit)
            .await?
        {
            Reply::Result(v) => Ok(v),
            Reply::Error {
                code: NOT_ENDED,
                data,
                message,
            } => match data.get("run_id").and_then(Json::as_i64) {
                Some(remote_run) => {
                    target
                        .wait_for(&client, remote_run, run.run_id, limit)
                        .await
                }
                None => Err(format!("node `{}`: {message}", target.name)),
            },
            Reply::Error { message, .. } => Err(format!("node `{}`: {message}", target.name)),
        }
    };
    tokio::select! {
        r = call => match r {
            Ok(v) => ExecResult::Ok(v),
            Err(e) => ExecResult::Err(e),
        },
        _ = cancel.wait_for(|c| *c) => ExecResult::Cancelled,
    }
}

/// The method a run calls and its parameters.
fn call_of(run: &ClaimedRun) -> Result<(String, Json), String> {
    let key = match run.job_type {
        JobType::Rpc => "method",
        JobType::Function => "function",
        other => {
            return Err(format!(
                "a {other} job cannot run on a remote processor: only function and rpc jobs \
                 are calls to another node"
            ));
        }
    };
    let method = run
        .payload
        .get(key)
        .and_then(Json::as_str)
        .filter(|m| !m.trim().is_empty())
        .ok_or_else(|| format!("payload.{key} is missing"))?
        .to_string();
    let mut params = fixed_input(run, &[key])?;
    if run.timeout > 0
        && let Some(map) = params.as_object_mut()
    {
        map.insert("_timeout_ms".into(), json!(run.timeout));
    }
    Ok((method, params))
}

/// The credential a stored `rpc_password` stands for: itself, or what its reference names,
/// read now (an error names the variable or the file, never a value).
fn resolve(processor: &str, stored: &str) -> Result<String, String> {
    let value = match Secret::parse(stored) {
        Secret::Literal(v) => return Ok(v.to_string()),
        Secret::Env(name) => std::env::var(name).map_err(|e| {
            format!(
                "processor `{processor}`: rpc_password names the environment variable {name}, \
                 which {}",
                match e {
                    std::env::VarError::NotPresent => "is not set on this node",
                    std::env::VarError::NotUnicode(_) => "is not valid UTF-8",
                }
            )
        })?,
        Secret::File(path) => std::fs::read_to_string(path).map_err(|e| {
            format!("processor `{processor}`: rpc_password names the file {path}, which cannot be read: {e}")
        })?,
    };
    let value = value.trim_end_matches(['\n', '\r']).to_string();
    if value.is_empty() {
        return Err(format!(
            "processor `{processor}`: rpc_password names {stored}, which is empty"
        ));
    }
    Ok(value)
}

/// How a call authenticates.
enum Auth {
    /// No credentials in the row.
    None,
    /// `Authorization: Bearer <token>`.
    Bearer(String),
    /// `Authorization: Basic <user:password>`.
    Basic(String, String),
}

/// The remote node of one processor, as its row says at the time of a call.
struct Target {
    /// The processor's name (what the catalog calls the node).
    name: String,
    /// `host:port`.
    address: String,
    auth: Auth,
}

/// A JSON-RPC answer.
enum Reply {
    /// The method's result.
    Result(Json),
    /// The method's error.
    Error {
        code: i64,
        message: String,
        data: Json,
    },
}

impl Target {
    /// Reads processor `processor_id`'s row (on the blocking pool: a catalog read).
    async fn load(env: &ExecEnv, processor_id: i64) -> Result<Target, String> {
        let reader = env.catalog.clone();
        // A catalog read and, for a `file:` reference, a file read: both block.
        let read = actix_rt::task::spawn_blocking(move || {
            let (name, def) = reader
                .remote_processor(processor_id)
                .map_err(|e| format!("reading the remote processor: {e}"))?;
            let credential = def
                .rpc_password
                .as_deref()
                .map(|v| resolve(&name, v))
                .transpose()?;
            Ok::<_, String>((name, def, credential))
        });
        let (name, def, credential) = read
            .await
            .map_err(|e| format!("reading the remote processor: {e}"))??;
        let address = def
            .address()
            .ok_or_else(|| format!("processor `{name}` is no longer remote (no ip_address)"))?;
        let auth = match (def.rpc_user, credential) {
            (_, None) => Auth::None,
            (None, Some(token)) => Auth::Bearer(token),
            (Some(user), Some(password)) => Auth::Basic(user, password),
        };
        Ok(Target {
            name,
            address,
            auth,
        })
    }

    /// One JSON-RPC call; `Err` says why no JSON-RPC answer came (with the node's name).
    async fn post(
        &self,
        client: &awc::Client,
        method: &str,
        params: Json,
        id: i64,
        limit: usize,
    ) -> Result<Reply, String> {
        let url = format!("http://{}/rpc", self.address);
        let mut req = client
            .post(&url)
            .insert_header(("Content-Type", "application/json"));
        req = match &self.auth {
            Auth::None => req,
            Auth::Bearer(token) => req.bearer_auth(token),
            Auth::Basic(user, password) => req.basic_auth(user, password),
        };
        let body = json!({"jsonrpc": "2.0", "method": method, "params": params, "id": id});
        let mut resp = req
            .send_body(body.to_string())
            .await
            .map_err(|e| self.send_failed(&e))?;
        let status = resp.status();
        let bytes = resp.body().limit(limit).await.map_err(|e| {
            format!(
                "node `{}` at {}: reading the answer: {e}",
                self.name, self.address
            )
        })?;
        let text = String::from_utf8_lossy(&bytes);
        let answer: Option<Json> = serde_json::from_str(&text).ok();
        // The API's error body ({error, field, reason}) says why a request was refused.
        let why = || {
            answer
                .as_ref()
                .and_then(|a| a.get("error"))
                .and_then(|e| e.as_str().or_else(|| e.get("message")?.as_str()))
                .map(String::from)
                .unwrap_or_else(|| text.chars().take(300).collect())
        };
        match status.as_u16() {
            401 => {
                return Err(format!(
                    "node `{}` refused the credentials (HTTP 401 at {}: {})",
                    self.name,
                    self.address,
                    why()
                ));
            }
            429 => {
                return Err(format!(
                    "node `{}` throttles this node after failed logins (HTTP 429 at {}: {})",
                    self.name,
                    self.address,
                    why()
                ));
            }
            _ => {}
        }
        if let Some(a) = &answer {
            if let Some(result) = a.get("result") {
                return Ok(Reply::Result(result.clone()));
            }
            if let Some(e) = a.get("error").filter(|e| e.is_object()) {
                return Ok(Reply::Error {
                    code: e.get("code").and_then(Json::as_i64).unwrap_or_default(),
                    message: e
                        .get("message")
                        .and_then(Json::as_str)
                        .unwrap_or("no message")
                        .to_string(),
                    data: e.get("data").cloned().unwrap_or(Json::Null),
                });
            }
        }
        Err(format!(
            "node `{}` at {} answered HTTP {status} without a JSON-RPC answer: {}",
            self.name,
            self.address,
            why()
        ))
    }

    /// Polls `run.get` until the remote run ends; its result, or its failure.
    async fn wait_for(
        &self,
        client: &awc::Client,
        remote_run: i64,
        id: i64,
        limit: usize,
    ) -> Result<Json, String> {
        let mut pause = POLL_FIRST;
        loop {
            actix_rt::time::sleep(pause).await;
            pause = (pause * 2).min(POLL_MAX);
            let view = match self
                .post(client, "run.get", json!({ "id": remote_run }), id, limit)
                .await?
            {
                Reply::Result(view) => view,
                Reply::Error { message, .. } => {
                    return Err(format!(
                        "node `{}`: waiting for its run {remote_run}: {message}",
                        self.name
                    ));
                }
            };
            match view.get("status").and_then(Json::as_str) {
                Some("queued" | "claimed" | "running") => continue,
                Some("succeeded") => return Ok(view.get("result").cloned().unwrap_or(Json::Null)),
                status => {
                    let error = view
                        .get("error")
                        .and_then(Json::as_str)
                        .unwrap_or("no error recorded");
                    return Err(format!(
                        "node `{}`: run {remote_run} {}: {error}",
                        self.name,
                        status.unwrap_or("ended")
                    ));
                }
            }
        }
    }

    /// Why a request got no answer at all.
    fn send_failed(&self, e: &awc::error::SendRequestError) -> String {
        use awc::error::{ConnectError, SendRequestError};
        match e {
            SendRequestError::Connect(ConnectError::Timeout) => format!(
                "node `{}` unreachable at {}: no connection within the connect timeout",
                self.name, self.address
            ),
            SendRequestError::Connect(c) => {
                format!("node `{}` unreachable at {}: {c}", self.name, self.address)
            }
            other => format!(
                "node `{}` at {} dropped the call: {other}",
                self.name, self.address
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn claimed(job_type: JobType, payload: Json, params: Option<Json>, timeout: i64) -> ClaimedRun {
        ClaimedRun {
            run_id: 1,
            claim_token: 1,
            job_id: 1,
            job_name: Arc::from("j"),
            job_type,
            payload: Arc::new(payload),
            params,
            attempt: 1,
            max_attempts: 1,
            backoff_base: 0,
            backoff_max: 0,
            timeout,
            scheduled_for: None,
            priority: 0,
            suspect: false,
            objects: Arc::from([]),
            started_at: 0,
            start_by: None,
        }
    }

    #[test]
    fn a_call_names_the_method_and_passes_the_input_and_the_timeout() {
        let run = claimed(
            JobType::Function,
            json!({"function": "debug.echo", "a": 1, "open_params": ["b"]}),
            Some(json!({"b": 2})),
            0,
        );
        assert_eq!(
            call_of(&run).unwrap(),
            ("debug.echo".to_string(), json!({"a": 1, "b": 2}))
        );
        let run = claimed(
            JobType::Rpc,
            json!({"method": "job.run", "job": "x"}),
            None,
            5000,
        );
        assert_eq!(
            call_of(&run).unwrap(),
            (
                "job.run".to_string(),
                json!({"job": "x", "_timeout_ms": 5000})
            )
        );
        let run = claimed(JobType::Command, json!({"argv": ["true"]}), None, 0);
        assert!(
            call_of(&run)
                .unwrap_err()
                .contains("only function and rpc jobs")
        );
        let run = claimed(JobType::Rpc, json!({"method": " "}), None, 0);
        assert_eq!(call_of(&run).unwrap_err(), "payload.method is missing");
    }

    /// Issue 27, point 9: an operator triggering an admin's rpc job steered it with params.
    #[test]
    fn a_runs_params_never_override_what_the_payload_of_a_remote_call_fixes() {
        let steer =
            |payload: Json, params: Json| call_of(&claimed(JobType::Rpc, payload, Some(params), 0));
        let fixed = json!({"method": "job.run", "job": "bjob"});
        let e = steer(fixed.clone(), json!({"job": "bsecret"})).unwrap_err();
        assert!(
            e.starts_with("params.job: the job's payload fixes `job`"),
            "{e}"
        );
        let e = steer(fixed.clone(), json!({"method": "node.pause"})).unwrap_err();
        assert!(
            e.starts_with("params.method: the job's payload fixes"),
            "{e}"
        );
        let e = steer(fixed.clone(), json!({"params": {"x": 1}})).unwrap_err();
        assert!(
            e.starts_with("params.params: not an open field") && e.contains("(none)"),
            "{e}"
        );
        // What the payload declares open, a run fills; the rest stays as the admin wrote it.
        let open = json!({"method": "job.run", "job": "bjob", "open_params": ["params"]});
        assert_eq!(
            steer(open.clone(), json!({"params": {"x": 1}})).unwrap(),
            ("job.run".into(), json!({"job": "bjob", "params": {"x": 1}}))
        );
        let e = steer(open, json!({"params": {}, "job": "bsecret"})).unwrap_err();
        assert!(e.contains("fixes `job`") && e.contains("(`params`)"), "{e}");
        // A function job on a remote processor is held to the same rule.
        let run = claimed(
            JobType::Function,
            json!({"function": "debug.echo", "word": "hi"}),
            Some(json!({"word": "steered"})),
            0,
        );
        assert!(call_of(&run).unwrap_err().contains("fixes `word`"));
        let run = claimed(JobType::Rpc, fixed, Some(json!(["bsecret"])), 0);
        assert!(
            call_of(&run)
                .unwrap_err()
                .starts_with("params: must be an object")
        );
    }
}
