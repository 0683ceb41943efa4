//! JSON-RPC 2.0 at `/rpc`: the engine's commands (`job.run`, `job.run_many`, `job.enable`,
//! `job.disable`, `job.get`, `run.get`, `run.tree`, `run.spawn`, `run.cancel`, `run.retry`,
//! `node.status`,
//! `node.pause`, `node.resume`, `rpc.methods`) and every registered function as a method of
//! its own name (a call runs it as a run of the node and answers with the run's result; see
//! `ops::rpc`). Each method needs a role: viewers may only read.
//!
//! Ids are what JSON-RPC 2.0 allows — a string, a number or null (`"id": null` is answered;
//! only a call without an `id` member is a notification); any other id is an invalid request.
//! A body that names a key twice in an object is refused whole (400, -32600, naming the key:
//! never last-wins). A batch holds at most `http.rpc_batch_max` calls (400 naming the cap past
//! it), and its calls run concurrently, each answered in its place.
//!
//! Invariant: a single call's failure has the HTTP status its kind has on REST (403, 404, 409,
//! 422, 503; 400 for a malformed request), with the JSON-RPC error in the body; a batch is
//! answered 200 with one response per call; a notification (no id) is answered 204.

use std::time::{Duration, Instant};

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, post, web};
use serde::{Deserialize, Serialize};
use serde_json::{Value as Json, json};
use utoipa::ToSchema;
use utoipa_actix_web::service_config::ServiceConfig;

use super::ApiState;
use super::auth::Principal;
use super::error::{ApiError, ErrorBody};
use crate::model::Role;
use crate::ops::rpc::{CALL_TIMEOUT, CallOutcome};

pub(super) fn routes(cfg: &mut ServiceConfig) {
    cfg.service(rpc);
}

/// The engine's commands, and the role each needs.
const COMMANDS: &[(&str, Role)] = &[
    ("job.run", Role::Operator),
    ("job.run_many", Role::Operator),
    ("job.enable", Role::Operator),
    ("job.disable", Role::Operator),
    ("job.get", Role::Viewer),
    ("run.get", Role::Viewer),
    ("run.tree", Role::Viewer),
    ("run.spawn", Role::Operator),
    ("run.cancel", Role::Operator),
    ("run.retry", Role::Operator),
    ("node.status", Role::Viewer),
    ("node.pause", Role::Operator),
    ("node.resume", Role::Operator),
    ("pause.list", Role::Viewer),
    ("pause.add", Role::Operator),
    ("pause.remove", Role::Operator),
    ("rpc.methods", Role::Viewer),
];

/// A JSON-RPC 2.0 request.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RpcRequest {
    /// `2.0`.
    pub jsonrpc: String,
    /// An engine command (`job.run`, …) or a registered function's name.
    pub method: String,
    /// Named parameters (an object); a function receives them as its run's parameters.
    #[schema(value_type = Option<Object>)]
    pub params: Option<Json>,
    /// The call's id; without one the call is a notification (no answer).
    #[schema(value_type = Option<Object>)]
    // Read from the call itself (`call_id`): serde reads `"id": null` as no id, which is not
    // the same call. Declared so that the document describes it and unknown fields are refused.
    #[allow(dead_code)]
    pub id: Option<Json>,
}

/// A JSON-RPC 2.0 error.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RpcError {
    /// -32700 parse, -32600 invalid request, -32601 no such method, -32602 invalid params,
    /// -32001 forbidden, -32002 not found, -32003 conflict, -32004 unavailable, -32010 the
    /// run failed, -32603 internal.
    pub code: i64,
    /// What happened.
    pub message: String,
    /// `{field, reason, status}` (and `run_id` for a failed run).
    #[schema(value_type = Option<Object>)]
    pub data: Option<Json>,
}

/// A JSON-RPC 2.0 response.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RpcResponse {
    /// `2.0`.
    pub jsonrpc: &'static str,
    /// The method's result.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub result: Option<Json>,
    /// Or its error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<RpcError>,
    /// The request's id.
    #[schema(value_type = Object)]
    pub id: Json,
}

struct Failure {
    status: StatusCode,
    error: RpcError,
}

impl From<ApiError> for Failure {
    fn from(e: ApiError) -> Self {
        let code = match e.status {
            StatusCode::FORBIDDEN => -32001,
            StatusCode::NOT_FOUND => -32002,
            StatusCode::CONFLICT => -32003,
            StatusCode::SERVICE_UNAVAILABLE => -32004,
            StatusCode::UNPROCESSABLE_ENTITY | StatusCode::BAD_REQUEST => -32602,
            _ => -32603,
        };
        Failure {
            status: e.status,
            error: RpcError {
                code,
                message: e.body.error.clone(),
                data: Some(json!({
                    "field": e.body.field,
                    "reason": e.body.reason,
                    "status": e.status.as_u16(),
                })),
            },
        }
    }
}

impl From<crate::ops::OpError> for Failure {
    fn from(e: crate::ops::OpError) -> Self {
        ApiError::from(e).into()
    }
}

fn failure(status: StatusCode, code: i64, message: impl Into<String>) -> Failure {
    Failure {
        status,
        error: RpcError {
            code,
            message: message.into(),
            data: None,
        },
    }
}

/// A named parameter.
fn param<'a>(params: &'a Json, name: &str) -> Result<&'a Json, ApiError> {
    params
        .get(name)
        .ok_or_else(|| ApiError::invalid(&format!("params.{name}"), "is required"))
}

fn string_param(params: &Json, name: &str) -> Result<String, ApiError> {
    param(params, name)?
        .as_str()
        .map(String::from)
        .ok_or_else(|| ApiError::invalid(&format!("params.{name}"), "expected a string"))
}

fn id_param(params: &Json) -> Result<i64, ApiError> {
    param(params, "id")?
        .as_i64()
        .filter(|id| *id > 0)
        .ok_or_else(|| ApiError::invalid("params.id", "expected a run id (a positive integer)"))
}

/// A trigger's options from a call's params: `start_within_ms`, a positive integer.
fn rpc_trigger_options(p: &Json) -> Result<crate::runtime::TriggerOptions, ApiError> {
    let ms = match p.get("start_within_ms") {
        None | Some(Json::Null) => None,
        Some(v) => Some(v.as_i64().ok_or_else(|| {
            ApiError::invalid("params.start_within_ms", "expected an integer (ms)")
        })?),
    };
    Ok(crate::ops::node::trigger_options(
        ms,
        "params.start_within_ms",
    )?)
}

async fn command(
    state: &ApiState,
    who: &Principal,
    method: &str,
    p: Json,
) -> Result<Json, ApiError> {
    Ok(match method {
        "job.run" => {
            let job = string_param(&p, "job")?;
            let params = p.get("params").cloned().filter(|v| !v.is_null());
            let options = rpc_trigger_options(&p)?;
            let ids =
                crate::ops::node::trigger(&state.engine, &who.user, &job, vec![params], options)
                    .await?;
            json!({ "run_id": ids[0] })
        }
        "job.run_many" => {
            let job = string_param(&p, "job")?;
            let runs = param(&p, "runs")?
                .as_array()
                .ok_or_else(|| ApiError::invalid("params.runs", "expected an array"))?
                .iter()
                .map(|v| Some(v.clone()).filter(|v| !v.is_null()))
                .collect();
            let options = rpc_trigger_options(&p)?;
            let ids =
                crate::ops::node::trigger(&state.engine, &who.user, &job, runs, options).await?;
            json!({ "run_ids": ids })
        }
        "job.enable" | "job.disable" => {
            let job = string_param(&p, "job")?;
            let enabled = method == "job.enable";
            let change = state
                .write(
                    &who.user,
                    move |ops| Ok(ops.set_job_enabled(&job, enabled)?),
                )
                .await?;
            json!({ "enabled": enabled, "change": change })
        }
        "job.get" => {
            let job = string_param(&p, "job")?;
            let view = state.read(move |ops| Ok(ops.job(&job)?.0)).await?;
            value(&view)
        }
        "run.get" => {
            let id = id_param(&p)?;
            value(&state.read(move |ops| ops.run(id)).await?)
        }
        "run.tree" => {
            let id = id_param(&p)?;
            value(&state.read(move |ops| ops.tree(id)).await?)
        }
        "run.spawn" => {
            let parent = match p.get("parent") {
                Some(v) => v
                    .as_i64()
                    .ok_or_else(|| ApiError::invalid("params.parent", "expected a run id"))?,
                None => return Err(ApiError::invalid("params.parent", "missing")),
            };
            let job = string_param(&p, "job")?;
            let params = p.get("params").cloned().filter(|v| !v.is_null());
            let id =
                crate::ops::node::spawn(&state.engine, &who.user, parent, &job, params).await?;
            json!({ "run_id": id, "parent": parent })
        }
        "run.cancel" => {
            let id = id_param(&p)?;
            let r = state
                .write(&who.user, move |ops| Ok(ops.cancel_run(id)?))
                .await?;
            json!({ "run_id": id, "result": r })
        }
        "run.retry" => {
            let id = id_param(&p)?;
            let new = state
                .write(&who.user, move |ops| Ok(ops.retry_run(id)?))
                .await?;
            json!({ "run_id": new, "retry_of": id })
        }
        "node.status" => value(&crate::ops::node::status(&state.engine).await?),
        "node.pause" | "node.resume" => {
            let paused = method == "node.pause";
            value(&super::node::pause_node(state, who, paused).await?)
        }
        "pause.list" => value(&state.read(|ops| ops.pauses()).await?),
        "pause.add" => {
            let body = serde_json::from_value(p.clone())
                .map_err(|e| ApiError::invalid("params", e.to_string()))?;
            value(&super::pauses::pause(state, who, body).await?)
        }
        "pause.remove" => {
            let (scope, name) = (string_param(&p, "scope")?, string_param(&p, "name")?);
            let fleet = p.get("fleet").and_then(Json::as_bool).unwrap_or(false);
            super::pauses::resume(state, who, &scope, name.clone(), fleet).await?;
            json!({ "scope": scope, "name": name, "resumed": true })
        }
        "rpc.methods" => {
            let functions = state.read(|ops| Ok(ops.functions())).await?;
            json!({
                "commands": COMMANDS.iter().map(|(m, _)| *m).collect::<Vec<_>>(),
                "functions": functions,
            })
        }
        other => {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                None,
                format!("no method `{other}`"),
            ));
        }
    })
}

/// Runs a registered function as a run of the node and waits for its result.
async fn call_function(
    state: &ApiState,
    who: &Principal,
    function: String,
    p: Json,
) -> Result<Json, Failure> {
    let timeout = match p.get("_timeout_ms") {
        None => CALL_TIMEOUT,
        Some(v) => Duration::from_millis(v.as_u64().ok_or_else(|| {
            Failure::from(ApiError::invalid(
                "params._timeout_ms",
                "expected milliseconds",
            ))
        })?),
    };
    let mut params = p;
    if let Some(map) = params.as_object_mut() {
        map.remove("_timeout_ms");
    }
    let job = state
        .write(&who.user, move |ops| Ok(ops.rpc_job(&function)?))
        .await?;
    let params = (!params.is_null()).then_some(params);
    let ids = crate::ops::node::trigger(
        &state.engine,
        &who.user,
        &job,
        vec![params],
        Default::default(),
    )
    .await?;
    let id = ids[0];
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(1);
    loop {
        match state.read(move |ops| ops.call_outcome(id)).await? {
            Some(CallOutcome::Succeeded(result)) => return Ok(result),
            Some(CallOutcome::Failed {
                run_id,
                status,
                error,
            }) => {
                return Err(Failure {
                    status: StatusCode::OK,
                    error: RpcError {
                        code: -32010,
                        message: format!(
                            "run {run_id} {status}: {}",
                            error.as_deref().unwrap_or("no error recorded")
                        ),
                        data: Some(json!({ "run_id": run_id, "status": status, "error": error })),
                    },
                });
            }
            None if Instant::now() >= deadline => {
                return Err(Failure {
                    status: StatusCode::GATEWAY_TIMEOUT,
                    error: RpcError {
                        code: -32011,
                        message: format!(
                            "run {id} has not ended within {} ms; `run.get` tells when it does",
                            timeout.as_millis()
                        ),
                        data: Some(json!({ "run_id": id })),
                    },
                });
            }
            None => {
                actix_web::rt::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(20));
            }
        }
    }
}

/// What a call's `id` member is.
enum CallId {
    /// No `id` member: a notification, not answered.
    Notification,
    /// A string, a number or null: answered with it.
    Answer(Json),
    /// Another kind of value: an invalid request (answered with id null).
    Invalid(&'static str),
}

fn call_id(req: &Json) -> CallId {
    match req.get("id") {
        None => CallId::Notification,
        Some(id @ (Json::Null | Json::String(_) | Json::Number(_))) => CallId::Answer(id.clone()),
        Some(Json::Object(_)) => CallId::Invalid("an object"),
        Some(Json::Array(_)) => CallId::Invalid("an array"),
        Some(Json::Bool(_)) => CallId::Invalid("a boolean"),
    }
}

async fn dispatch(
    state: &ApiState,
    who: &Principal,
    req: Json,
) -> (Option<Json>, Result<Json, Failure>) {
    let id = match call_id(&req) {
        CallId::Notification => None,
        CallId::Answer(id) => Some(id),
        CallId::Invalid(kind) => {
            return (
                Some(Json::Null),
                Err(failure(
                    StatusCode::BAD_REQUEST,
                    -32600,
                    format!("invalid request: id must be a string, a number or null, got {kind}"),
                )),
            );
        }
    };
    let req: RpcRequest = match serde_json::from_value(req) {
        Ok(r) => r,
        Err(e) => {
            return (
                Some(id.unwrap_or(Json::Null)),
                Err(failure(
                    StatusCode::BAD_REQUEST,
                    -32600,
                    format!("invalid request: {e}"),
                )),
            );
        }
    };
    if req.jsonrpc != "2.0" {
        return (
            Some(id.unwrap_or(Json::Null)),
            Err(failure(
                StatusCode::BAD_REQUEST,
                -32600,
                "jsonrpc must be \"2.0\"",
            )),
        );
    }
    let params = req.params.unwrap_or(Json::Object(Default::default()));
    if !params.is_object() {
        return (
            id,
            Err(failure(
                StatusCode::UNPROCESSABLE_ENTITY,
                -32602,
                "params must be an object (named parameters)",
            )),
        );
    }
    let outcome = if let Some((_, role)) = COMMANDS.iter().find(|(m, _)| *m == req.method) {
        match who.require(*role, &format!("`{}`", req.method)) {
            Ok(()) => command(state, who, &req.method, params)
                .await
                .map_err(Failure::from),
            Err(e) => Err(e.into()),
        }
    } else {
        let method = req.method.clone();
        let known = state.read(move |ops| Ok(ops.is_function(&method))).await;
        match known {
            Ok(true) => match who.require(Role::Operator, "calling a function") {
                Ok(()) => call_function(state, who, req.method.clone(), params).await,
                Err(e) => Err(e.into()),
            },
            Ok(false) => Err(failure(
                StatusCode::NOT_FOUND,
                -32601,
                format!("no method `{}` (rpc.methods lists them)", req.method),
            )),
            Err(e) => Err(e.into()),
        }
    };
    (id, outcome)
}

fn response(id: Json, outcome: Result<Json, Failure>) -> (StatusCode, RpcResponse) {
    match outcome {
        Ok(result) => (
            StatusCode::OK,
            RpcResponse {
                jsonrpc: "2.0",
                result: Some(result),
                error: None,
                id,
            },
        ),
        Err(f) => (
            f.status,
            RpcResponse {
                jsonrpc: "2.0",
                result: None,
                error: Some(f.error),
                id,
            },
        ),
    }
}

/// JSON-RPC 2.0: one call or a batch (see the module doc for the methods and their roles).
#[utoipa::path(
    tag = "rpc",
    request_body = RpcRequest,
    responses(
        (status = 200, body = RpcResponse),
        (status = 204, description = "A notification: no answer"),
        (status = 400, description = "Not JSON, or not a JSON-RPC request", body = RpcResponse),
        (status = 403, description = "The method needs another role", body = RpcResponse),
        (status = 404, description = "No such method, or what it names does not exist", body = RpcResponse),
        (status = 413, body = ErrorBody),
    )
)]
#[post("/rpc")]
async fn rpc(state: web::Data<ApiState>, who: Principal, body: web::Bytes) -> HttpResponse {
    let refused = |code: i64, message: String, data: Option<Json>| {
        let (status, r) = response(
            Json::Null,
            Err(Failure {
                status: StatusCode::BAD_REQUEST,
                error: RpcError {
                    code,
                    message,
                    data,
                },
            }),
        );
        HttpResponse::build(status).json(r)
    };
    let parsed: Result<(&str, Json), _> = std::str::from_utf8(&body)
        .map_err(|e| e.to_string())
        .and_then(|t| Ok((t, serde_json::from_str(t).map_err(|e| e.to_string())?)));
    let value = match parsed {
        Ok((text, value)) => match super::extract::no_duplicate_keys(text) {
            Ok(()) => value,
            Err(e) => {
                let data = json!({"field": e.body.field, "reason": e.body.reason, "status": 400});
                return refused(
                    -32600,
                    format!("invalid request: {}", e.body.reason),
                    Some(data),
                );
            }
        },
        Err(e) => return refused(-32700, format!("parse error: {e}"), None),
    };
    let max = state.engine.config().http.rpc_batch_max;
    match value {
        Json::Array(calls) if calls.is_empty() => refused(-32600, "an empty batch".into(), None),
        Json::Array(calls) if calls.len() > max => refused(
            -32600,
            format!(
                "a batch of {} calls: at most {max} calls a batch (http.rpc_batch_max)",
                calls.len()
            ),
            Some(
                json!({"field": "batch", "reason": format!("at most {max} calls"), "status": 400}),
            ),
        ),
        Json::Array(calls) => {
            let answers = batch(&state, &who, calls).await;
            if answers.is_empty() {
                HttpResponse::NoContent().finish()
            } else {
                HttpResponse::Ok().json(answers)
            }
        }
        call => {
            let (id, outcome) = dispatch(&state, &who, call).await;
            match id {
                None => HttpResponse::NoContent().finish(),
                Some(id) => {
                    let (status, r) = response(id, outcome);
                    HttpResponse::build(status).json(r)
                }
            }
        }
    }
}

/// Runs a batch's calls concurrently — each as a task of its own on this worker, so a call
/// that waits for its run does not hold up the others — and answers them in their order
/// (notifications get none).
async fn batch(state: &web::Data<ApiState>, who: &Principal, calls: Vec<Json>) -> Vec<RpcResponse> {
    let tasks: Vec<_> = calls
        .into_iter()
        .map(|call| {
            let (state, who) = (state.clone(), who.clone());
            actix_web::rt::spawn(async move { dispatch(&state, &who, call).await })
        })
        .collect();
    let mut answers = Vec::with_capacity(tasks.len());
    for task in tasks {
        let (id, outcome) = match task.await {
            Ok(answer) => answer,
            Err(e) => (
                Some(Json::Null),
                Err(failure(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    -32603,
                    format!("the call stopped: {e}"),
                )),
            ),
        };
        if let Some(id) = id {
            answers.push(response(id, outcome).1);
        }
    }
    answers
}

/// A view as a JSON value.
fn value<T: Serialize>(v: &T) -> Json {
    serde_json::to_value(v).unwrap_or_default()
}
