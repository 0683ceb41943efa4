//! The node itself: `/healthz` (liveness: no credentials, no details), `/readyz` (the engine
//! answers, the catalog reads and writes are not paused for the disk), status (with the
//! node's level per resource), pause and resume, and the OpenAPI document.

use actix_web::{HttpResponse, get, post, web};
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_actix_web::service_config::ServiceConfig;

use super::ApiState;
use super::auth::Principal;
use super::error::{ApiError, ErrorBody};
use crate::ops::node::{NodeStatusView, set_paused, status};

type State = web::Data<ApiState>;

pub(super) fn routes(cfg: &mut ServiceConfig) {
    cfg.service(healthz)
        .service(readyz)
        .service(openapi_json)
        .service(node_status)
        .service(pause)
        .service(resume);
}

/// A liveness answer.
#[derive(Debug, Serialize, ToSchema)]
struct Health {
    /// `ok`.
    status: &'static str,
}

/// Liveness: the process answers. No credentials, no details.
#[utoipa::path(tag = "node", security(()), responses((status = 200, body = Health)))]
#[get("/healthz")]
async fn healthz() -> web::Json<Health> {
    web::Json(Health { status: "ok" })
}

/// Readiness: the engine answers, the catalog can be read, and the node claims work — not
/// while writes are paused because the disk is critical or full (503 with the reason; only
/// maintenance runs are claimed then).
#[utoipa::path(
    tag = "node",
    responses((status = 200, body = Health), (status = 503, body = ErrorBody))
)]
#[get("/readyz")]
async fn readyz(state: State) -> Result<web::Json<Health>, ApiError> {
    let node = status(&state.engine).await?;
    state
        .read(|ops| ops.catalog().user_count().map_err(Into::into))
        .await?;
    if let Some(why) = node.writes_paused {
        // Built here, not from an `OpError`: a probe every few seconds must not log each time.
        let mut err = ApiError::new(
            actix_web::http::StatusCode::SERVICE_UNAVAILABLE,
            None,
            format!("not ready: writes are paused, only maintenance runs are claimed: {why}"),
        );
        err.retry_after = Some(5);
        return Err(err);
    }
    Ok(web::Json(Health { status: "ok" }))
}

/// This document.
#[utoipa::path(
    tag = "node",
    responses((status = 200, description = "The OpenAPI 3.1 document", content_type = "application/json", body = Object))
)]
#[get("/api/v1/openapi.json")]
async fn openapi_json() -> HttpResponse {
    // Built on request: kept in memory, it would cost every idle node its size.
    HttpResponse::Ok()
        .content_type("application/json")
        .body(super::openapi_json())
}

/// What the node is doing: pause state, its health verdict (the worst level of any resource,
/// and each resource's level against the policy's thresholds), processors, the latest health
/// sample.
#[utoipa::path(tag = "node", responses((status = 200, body = NodeStatusView), (status = 503, body = ErrorBody)))]
#[get("/api/v1/node")]
async fn node_status(state: State) -> Result<web::Json<NodeStatusView>, ApiError> {
    Ok(web::Json(status(&state.engine).await?))
}

/// Pause the node: schedules stop firing and no run is claimed; running jobs go on.
#[utoipa::path(tag = "node", responses((status = 200, body = NodeStatusView), (status = 503, body = ErrorBody)))]
#[post("/api/v1/node/pause")]
async fn pause(state: State, who: Principal) -> Result<web::Json<NodeStatusView>, ApiError> {
    Ok(web::Json(pause_node(&state, &who, true).await?))
}

/// Resume a paused node.
#[utoipa::path(tag = "node", responses((status = 200, body = NodeStatusView), (status = 503, body = ErrorBody)))]
#[post("/api/v1/node/resume")]
async fn resume(state: State, who: Principal) -> Result<web::Json<NodeStatusView>, ApiError> {
    Ok(web::Json(pause_node(&state, &who, false).await?))
}

/// Pauses or resumes the node and writes the audit row naming who asked (REST and JSON-RPC).
pub(super) async fn pause_node(
    state: &ApiState,
    who: &Principal,
    paused: bool,
) -> Result<NodeStatusView, ApiError> {
    let (before, view) = set_paused(&state.engine, paused).await?;
    let node = view.node.clone();
    state
        .write(&who.user, move |ops| {
            Ok(ops.audit_pause(&node, before, paused)?)
        })
        .await?;
    Ok(view)
}
