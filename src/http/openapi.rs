//! The OpenAPI document as the server behaves: what the handlers' annotations declare
//! (`utoipa`), completed here with what annotations cannot say or every route shares — the
//! answers of the guard and the extractors (400, 401, 403, 413, 415, 421, 429, 503), the
//! limits and vocabularies `ops` enforces (page sizes, enums, names, ranges), the fields a
//! create requires and a change may not carry, the JSON-RPC envelope (an id is a string, a
//! number or null; a batch is an array), and `anyOf` for a nullable value (utoipa's `oneOf`
//! of "any" and null refuses every null). It also answers the requests no route takes: 405
//! with `Allow` for a documented path's other methods ([`no_route`]).
//!
//! Invariant: each constraint stated here is one the server enforces with a 4xx — a
//! schemathesis run with every check (`tests/it/openapi.rs`) fails on a constraint the server
//! does not keep, and on one it keeps that the document does not state.

use std::sync::OnceLock;

use actix_web::http::StatusCode;
use actix_web::http::header::{ALLOW, HeaderValue};
use actix_web::{HttpRequest, HttpResponse, ResponseError as _};
use serde_json::{Map, Value, json};

use super::error::ApiError;
use crate::jobconf::{MAX_INSTANCES, MAX_NAME_LEN, NAME_PATTERN, STRETCH_MAX_LIMIT};
use crate::model::{JobType, ObjectType, RunStatus};
use crate::schedule::spec::MAX_RUN_EVERY_MINUTES;
use crate::schedule::{MisfirePolicy, OverlapPolicy};

/// A duration back from now or a time, as `ops::view::parse_instant` reads them: `90s`,
/// `15m`, `2h`, `1d`, an RFC 3339 time, or a local `YYYY-MM-DD[ HH:MM[:SS]]`.
const INSTANT_PATTERN: &str = "^\\s*([0-9]{1,15}(ms|s|m|min|h|d)|[0-9]{4}-[0-9]{2}-[0-9]{2}([T ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\\.[0-9]{1,9})?)?([Zz]|[+-][0-9]{2}:[0-9]{2})?)?)\\s*$";

/// An IP address (an IPv6 one may be bracketed) or a host name; `jobconf::is_host` decides.
const HOST_PATTERN: &str = "^(\\[[0-9A-Fa-f:.]+\\]|[0-9A-Za-z_.:-]+)$";

/// Completes the generated document (see the module doc).
pub(super) fn conform(doc: &mut Value) {
    let schemas = &mut doc["components"]["schemas"];
    constrain_bodies(schemas);
    rpc_envelope(schemas);
    split_create_and_change(doc);
    for (path, item) in doc["paths"].as_object_mut().into_iter().flatten() {
        for (method, op) in item.as_object_mut().into_iter().flatten() {
            constrain_parameters(path, op);
            shared_responses(path, method, op);
        }
    }
    optional_bodies(doc);
    rpc_operation(&mut doc["paths"]["/rpc"]["post"]);
    catalog_import(&mut doc["paths"]["/api/v1/catalog"]["post"]);
    nullable_as_any_of(doc);
}

fn strings<'a>(values: impl IntoIterator<Item = &'a str>) -> Vec<Value> {
    values.into_iter().map(Value::from).collect()
}

/// Merges `extra` into the property `field` of the object schema `schema`.
fn constrain(schema: &mut Value, field: &str, extra: Value) {
    // `get_mut`, not indexing: an index inserts the key it does not find.
    let prop = schema
        .get_mut("properties")
        .and_then(|p| p.get_mut(field))
        .and_then(Value::as_object_mut);
    if let (Some(prop), Value::Object(extra)) = (prop, extra) {
        prop.extend(extra);
    }
}

/// An enum for a nullable property: its values and `null` (which clears or omits it).
fn nullable_enum(values: Vec<Value>) -> Value {
    let mut values = values;
    values.push(Value::Null);
    json!({ "enum": values })
}

fn constrain_bodies(schemas: &mut Value) {
    for entry in ["JobFields", "ProcessorFields", "ObjectFields"] {
        let name = json!({"pattern": NAME_PATTERN, "maxLength": MAX_NAME_LEN});
        constrain(&mut schemas[entry], "name", name);
    }
    let job = &mut schemas["JobFields"];
    constrain(
        job,
        "type",
        nullable_enum(strings(JobType::ALL.iter().map(|t| t.as_str()))),
    );
    constrain(
        job,
        "misfire_policy",
        nullable_enum(strings(MisfirePolicy::ALL.iter().map(|p| p.as_str()))),
    );
    constrain(
        job,
        "overlap_policy",
        nullable_enum(strings(OverlapPolicy::ALL.iter().map(|p| p.as_str()))),
    );
    for field in [
        "timeout_ms",
        "start_within_ms",
        "aging_ms",
        "misfire_window_ms",
        "backoff_base_ms",
        "backoff_max_ms",
        "run_delay_ms",
    ] {
        constrain(job, field, json!({"minimum": 0}));
    }
    for field in ["max_catchup", "max_overlap", "max_attempts"] {
        constrain(job, field, json!({"minimum": 1}));
    }
    constrain(
        job,
        "stretch_max",
        json!({"minimum": 1, "maximum": STRETCH_MAX_LIMIT}),
    );
    constrain(
        job,
        "run_every",
        json!({"minimum": 1, "maximum": MAX_RUN_EVERY_MINUTES}),
    );
    constrain(job, "run_on_the", json!({"minimum": 0, "maximum": 59}));

    let processor = &mut schemas["ProcessorFields"];
    constrain(
        processor,
        "instances",
        json!({"minimum": 1, "maximum": MAX_INSTANCES}),
    );
    constrain(
        processor,
        "max_instances",
        json!({"maximum": MAX_INSTANCES}),
    );
    constrain(processor, "port", json!({"minimum": 1, "maximum": 65535}));
    constrain(processor, "ip_address", json!({"pattern": HOST_PATTERN}));

    let object = &mut schemas["ObjectFields"];
    constrain(
        object,
        "type",
        nullable_enum(strings(ObjectType::ALL.iter().map(|t| t.as_str()))),
    );
    constrain(object, "time_to_live_s", json!({"minimum": 0}));

    constrain(
        &mut schemas["BatchBody"],
        "runs",
        json!({"minItems": 1, "maxItems": crate::ops::node::MAX_BATCH}),
    );
    let pin = &mut schemas["PinBody"];
    constrain(pin, "pin", nullable_enum(strings(["active", "inactive"])));
    pin["required"] = json!(["pin"]);
}

/// POST takes a new entry's name (required, with what else a create needs); PATCH names the
/// entry in its path and refuses a `name` that differs, so its body has none.
fn split_create_and_change(doc: &mut Value) {
    let entries = [
        (
            "JobFields",
            "NewJob",
            "JobChange",
            "/api/v1/jobs",
            &["name", "type", "processor"][..],
        ),
        (
            "ProcessorFields",
            "NewProcessor",
            "ProcessorChange",
            "/api/v1/processors",
            &["name"],
        ),
        (
            "ObjectFields",
            "NewObject",
            "ObjectChange",
            "/api/v1/objects",
            &["name"],
        ),
    ];
    for (fields, new, change, path, required) in entries {
        let Some(base) = doc["components"]["schemas"]
            .as_object_mut()
            .and_then(|s| s.remove(fields))
        else {
            continue;
        };
        let mut create = base.clone();
        create["required"] = json!(required);
        for name in required {
            // Required, so not null: a create without it is refused.
            let Some(prop) = create.pointer_mut(&format!("/properties/{name}")) else {
                continue;
            };
            if let Some(types) = prop.get_mut("type").and_then(Value::as_array_mut) {
                types.retain(|t| t != "null");
            }
            if let Some(values) = prop.get_mut("enum").and_then(Value::as_array_mut) {
                values.retain(|v| !v.is_null());
            }
        }
        let mut edit = base;
        if let Some(props) = edit["properties"].as_object_mut() {
            props.remove("name");
        }
        let schemas = &mut doc["components"]["schemas"];
        schemas[new] = create;
        schemas[change] = edit;
        let body = |name: &str| json!({"$ref": format!("#/components/schemas/{name}")});
        let by_name = format!("{path}/{{name}}");
        doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"] =
            body(new);
        doc["paths"][by_name.as_str()]["patch"]["requestBody"]["content"]["application/json"]["schema"] =
            body(change);
    }
}

/// `extract::Body` reads an empty body as `{}`: a body whose schema requires no field may be
/// left out.
fn optional_bodies(doc: &mut Value) {
    let schemas = doc["components"]["schemas"].clone();
    for item in doc["paths"].as_object_mut().into_iter().flatten() {
        for op in item
            .1
            .as_object_mut()
            .into_iter()
            .flatten()
            .map(|(_, op)| op)
        {
            let Some(body) = op.get_mut("requestBody") else {
                continue;
            };
            let name = body
                .pointer("/content/application~1json/schema/$ref")
                .and_then(Value::as_str)
                .and_then(|r| r.strip_prefix("#/components/schemas/"));
            let requires = name.is_some_and(|n| {
                schemas[n]["required"]
                    .as_array()
                    .is_some_and(|r| !r.is_empty())
            });
            if name.is_some() && !requires {
                body["required"] = json!(false);
            }
        }
    }
}

/// The JSON-RPC 2.0 envelope: ids are strings, numbers or null (never objects), `jsonrpc` is
/// "2.0", a result may be any JSON value.
fn rpc_envelope(schemas: &mut Value) {
    let id = json!({
        "type": ["string", "number", "null"],
        "description": "The call's id: a string or a number (null in an answer when the \
            request's id could not be read); without one the call is a notification."
    });
    let request = &mut schemas["RpcRequest"];
    request["properties"]["id"] = id.clone();
    constrain(request, "jsonrpc", json!({"enum": ["2.0"]}));
    let response = &mut schemas["RpcResponse"];
    response["properties"]["id"] = id;
    constrain(response, "jsonrpc", json!({"enum": ["2.0"]}));
    response["properties"]["result"] =
        json!({"description": "The method's result: any JSON value."});
    schemas["RpcError"]["properties"]["data"] = json!({
        "description": "`{field, reason, status}` (and `run_id` for a failed run), or null."
    });
}

fn rpc_operation(op: &mut Value) {
    if !op.is_object() {
        return;
    }
    // A batch's calls are answered one by one: an invalid call gets its error in the answer,
    // so a batch is any non-empty array.
    op["requestBody"]["content"]["application/json"]["schema"] = json!({
        "oneOf": [
            {"$ref": "#/components/schemas/RpcRequest"},
            {"type": "array", "minItems": 1, "description": "A batch: each element a call"}
        ]
    });
    let answer = json!({"$ref": "#/components/schemas/RpcResponse"});
    op["responses"]["200"]["content"]["application/json"]["schema"] = json!({
        "oneOf": [answer, {"type": "array", "items": answer}]
    });
    op["responses"]["200"]["description"] = json!("The answer, or a batch's answers");
    // A call's failure has the status its kind has on REST, its body the JSON-RPC error.
    for (code, description) in [
        ("409", "What the method asks conflicts with the state"),
        ("422", "A parameter is invalid"),
        ("503", "The node cannot serve the call now"),
        ("504", "A function's run did not end in time"),
    ] {
        op["responses"][code] = json!({
            "description": description,
            "content": {"application/json": {"schema": answer}}
        });
    }
    if let Some(responses) = op["responses"].as_object_mut() {
        sort_responses(responses);
    }
}

/// job.conf is TOML; `text/plain` is read as TOML too (and is what a generic client sends).
fn catalog_import(op: &mut Value) {
    if let Some(content) = op["requestBody"]["content"].as_object_mut()
        && let Some(toml) = content.get("application/toml").cloned()
    {
        content.insert("text/plain".into(), toml);
    }
}

fn param_schema(path: &str, name: &str) -> Option<Value> {
    // The API's bound on every page (`ops::pages::MAX_PAGE`, `MAX_RUNS`, `MAX_NEXT`: 1000).
    let page = json!({"type": "integer", "minimum": 1, "maximum": crate::ops::pages::MAX_PAGE});
    Some(match (path, name) {
        (_, "limit") | ("/api/v1/jobs/{name}/next", "count") => page,
        (_, "name") => json!({"type": "string", "pattern": NAME_PATTERN}),
        (_, "id") => json!({"type": "integer", "format": "int64", "minimum": 1}),
        ("/api/v1/jobs", "sort") => {
            json!({"type": "string", "enum": ["name", "priority", "last_end", "next_run"]})
        }
        ("/api/v1/jobs", "activation") => {
            json!({"type": "string", "enum": ["active", "standby", "paused", "new"]})
        }
        ("/api/v1/jobs", "type") => {
            json!({"type": "string", "enum": strings(JobType::ALL.iter().map(|t| t.as_str()))})
        }
        ("/api/v1/runs", "status") => {
            json!({"type": "string", "enum": strings(RunStatus::ALL.iter().map(|s| s.as_str()))})
        }
        (_, "since" | "until" | "from" | "to") => {
            json!({"type": "string", "pattern": INSTANT_PATTERN})
        }
        ("/api/v1/stats/{stat_type}", "step") => json!({"type": "integer", "minimum": 1}),
        _ => return None,
    })
}

fn constrain_parameters(path: &str, op: &mut Value) {
    let params = op.get_mut("parameters").and_then(Value::as_array_mut);
    for p in params.into_iter().flatten() {
        let name = p["name"].as_str().unwrap_or_default().to_string();
        if let Some(schema) = param_schema(path, &name)
            && let Some(have) = p["schema"].as_object_mut()
            && let Value::Object(schema) = schema
        {
            have.extend(schema);
        }
    }
}

fn error_response(description: &str) -> Value {
    json!({
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
    })
}

fn with_retry_after(mut response: Value) -> Value {
    response["headers"] = json!({"Retry-After": {
        "description": "Seconds to wait before trying again.",
        "required": true,
        "schema": {"type": "integer", "minimum": 0}
    }});
    response
}

/// The answers every route shares, each added where the route can give it and its own
/// annotation does not already describe it.
fn shared_responses(path: &str, method: &str, op: &mut Value) {
    let public = path == "/healthz";
    let rpc = path == "/rpc";
    let takes_json = op["requestBody"]["content"]["application/json"].is_object();
    let has_query = op["parameters"]
        .as_array()
        .is_some_and(|ps| ps.iter().any(|p| p["in"] == "query"));
    let has_id = path.contains("{id}");
    let mut add: Vec<(u16, Value)> = vec![(
        421,
        error_response("The Host header names a host this node does not answer to"),
    )];
    if !public {
        add.push((
            401,
            error_response("No credentials, or invalid ones (with `WWW-Authenticate`)"),
        ));
        add.push((
            429,
            with_retry_after(error_response(
                "Too many failed logins from this address: wait `Retry-After` seconds",
            )),
        ));
        add.push((
            503,
            with_retry_after(error_response(
                "The node is stopping, or its catalog cannot be used now",
            )),
        ));
    }
    if method != "get" && !rpc {
        add.push((403, error_response("The change needs another role")));
    }
    if op.get("requestBody").is_some() && !rpc {
        add.push((400, error_response("The body is not UTF-8, or not JSON")));
    }
    if takes_json && !rpc {
        add.push((
            415,
            error_response("A body that is not `Content-Type: application/json`"),
        ));
        add.push((
            422,
            error_response("A field is invalid (the body names it)"),
        ));
    }
    if op.get("requestBody").is_some() {
        add.push((
            413,
            error_response(&format!(
                "The body is larger than {} bytes",
                super::BODY_LIMIT
            )),
        ));
    }
    if has_query {
        add.push((
            422,
            error_response("A query parameter is invalid (the body names it)"),
        ));
    }
    if has_id {
        add.push((400, error_response("The path's id is not a run id")));
    }
    let Some(responses) = op["responses"].as_object_mut() else {
        return;
    };
    for (code, response) in add {
        responses.entry(code.to_string()).or_insert(response);
    }
    sort_responses(responses);
}

fn sort_responses(responses: &mut Map<String, Value>) {
    let mut all: Vec<(String, Value)> = std::mem::take(responses).into_iter().collect();
    all.sort_by(|a, b| a.0.cmp(&b.0));
    responses.extend(all);
}

/// `oneOf: [X, {type: null}]` as `anyOf`: when X admits null too (an "any" value), `oneOf`
/// refuses null for matching both.
fn nullable_as_any_of(v: &mut Value) {
    match v {
        Value::Object(map) => {
            let nullable = map
                .get("oneOf")
                .and_then(Value::as_array)
                .is_some_and(|branches| {
                    branches.len() == 2 && branches.iter().any(|b| *b == json!({"type": "null"}))
                });
            if nullable && let Some(branches) = map.remove("oneOf") {
                map.insert("anyOf".into(), branches);
            }
            map.values_mut().for_each(nullable_as_any_of);
        }
        Value::Array(items) => items.iter_mut().for_each(nullable_as_any_of),
        _ => {}
    }
}

/// The documented routes: each path template's segments and its methods (`GET, POST`).
fn route_table() -> &'static [(Vec<String>, String)] {
    static TABLE: OnceLock<Vec<(Vec<String>, String)>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let doc = super::openapi();
        doc["paths"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(path, item)| {
                let segments = path.split('/').map(String::from).collect();
                let mut methods: Vec<String> = item
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(m, _)| m.to_uppercase())
                    .collect();
                methods.sort();
                let methods = methods.join(", ");
                (segments, methods)
            })
            .collect()
    })
}

/// The methods a documented path takes, when `path` is one (`{name}` matches any segment).
pub fn allowed_methods(path: &str) -> Option<&'static str> {
    let segments: Vec<&str> = path.split('/').collect();
    route_table().iter().find_map(|(template, methods)| {
        let same = template.len() == segments.len()
            && template
                .iter()
                .zip(&segments)
                .all(|(t, s)| (t.starts_with('{') && t.ends_with('}') && !s.is_empty()) || t == s);
        same.then_some(methods.as_str())
    })
}

/// What a request no route took gets: 405 with `Allow` on a documented path (another method
/// than its own), 404 elsewhere; JSON but under the web UI's paths, which keep a bare 404.
pub async fn no_route(req: HttpRequest) -> HttpResponse {
    if super::auth::is_ui_path(req.path()) {
        return HttpResponse::NotFound().finish();
    }
    match allowed_methods(req.path()) {
        Some(methods) => {
            let mut res = ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                None,
                format!(
                    "{} takes {methods}, not {}: see /api/v1/openapi.json",
                    req.path(),
                    req.method()
                ),
            )
            .error_response();
            if let Ok(v) = HeaderValue::from_str(methods) {
                res.headers_mut().insert(ALLOW, v);
            }
            res
        }
        None => super::error::for_status(StatusCode::NOT_FOUND).error_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_documented_path_answers_its_methods() {
        assert_eq!(allowed_methods("/api/v1/jobs"), Some("GET, POST"));
        assert_eq!(
            allowed_methods("/api/v1/jobs/etl"),
            Some("DELETE, GET, PATCH")
        );
        assert_eq!(allowed_methods("/api/v1/jobs/etl/nope"), None);
        assert_eq!(allowed_methods("/api/v1/jobs/"), None);
    }

    #[test]
    fn a_nullable_any_value_is_any_of_so_null_is_valid() {
        let mut v =
            json!({"a": {"oneOf": [{"$ref": "#/components/schemas/Value"}, {"type": "null"}]}});
        nullable_as_any_of(&mut v);
        assert!(v["a"]["anyOf"].is_array() && v["a"].get("oneOf").is_none());
    }
}
