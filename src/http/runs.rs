//! `/api/v1/runs`: list with filters, one run with its output, cancel, retry.

use actix_web::{HttpResponse, get, post, web};
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_actix_web::service_config::ServiceConfig;

use super::ApiState;
use super::auth::Principal;
use super::bodies::RunsQuery;
use super::error::{ApiError, ErrorBody};
use super::extract::{Query, run_id};
use crate::ops::runs::{Cancelled, RunQuery, RunView};

type State = web::Data<ApiState>;

pub(super) fn routes(cfg: &mut ServiceConfig) {
    cfg.service(list_runs)
        .service(get_run)
        .service(cancel_run)
        .service(retry_run);
}

/// Runs, newest first. Page with `before`: the id of the last run of the previous page.
#[utoipa::path(
    tag = "runs",
    params(RunsQuery),
    responses((status = 200, body = Vec<RunView>), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody))
)]
#[get("/api/v1/runs")]
async fn list_runs(state: State, q: Query<RunsQuery>) -> Result<web::Json<Vec<RunView>>, ApiError> {
    let q = q.0;
    let now = crate::catalog::now_ms();
    let instant = |field: &str, text: &Option<String>| {
        text.as_deref()
            .map(|s| crate::ops::view::parse_instant(field, s, now))
            .transpose()
    };
    let query = RunQuery {
        status: q.status()?,
        since: instant("since", &q.since)?,
        until: instant("until", &q.until)?,
        before: q.before,
        after: None,
        job: q.job,
        node: q.node,
        limit: q.limit.unwrap_or(100),
    };
    Ok(web::Json(state.read(move |ops| ops.runs(&query)).await?))
}

/// One run in full: params, result, error and captured output.
#[utoipa::path(
    tag = "runs",
    responses((status = 200, body = RunView), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody))
)]
#[get("/api/v1/runs/{id}")]
async fn get_run(state: State, id: web::Path<String>) -> Result<web::Json<RunView>, ApiError> {
    let id = run_id(&id)?;
    Ok(web::Json(state.read(move |ops| ops.run(id)).await?))
}

/// What a cancel did.
#[derive(Debug, Serialize, ToSchema)]
struct CancelView {
    run_id: i64,
    result: Cancelled,
}

/// Cancel a queued run at once, or ask the node executing a running one to cancel it (a
/// command's process group is killed).
#[utoipa::path(
    tag = "runs",
    responses((status = 200, body = CancelView), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody))
)]
#[post("/api/v1/runs/{id}/cancel")]
async fn cancel_run(
    state: State,
    who: Principal,
    id: web::Path<String>,
) -> Result<web::Json<CancelView>, ApiError> {
    let id = run_id(&id)?;
    let result = state
        .write(&who.user, move |ops| Ok(ops.cancel_run(id)?))
        .await?;
    Ok(web::Json(CancelView { run_id: id, result }))
}

/// A retry queued.
#[derive(Debug, Serialize, ToSchema)]
struct RetryView {
    run_id: i64,
    retry_of: i64,
}

/// Queue a new attempt of a failed, timed-out, dead, cancelled or skipped run.
#[utoipa::path(
    tag = "runs",
    responses((status = 201, body = RetryView), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody))
)]
#[post("/api/v1/runs/{id}/retry")]
async fn retry_run(
    state: State,
    who: Principal,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = run_id(&id)?;
    let new = state
        .write(&who.user, move |ops| Ok(ops.retry_run(id)?))
        .await?;
    Ok(HttpResponse::Created().json(RetryView {
        run_id: new,
        retry_of: id,
    }))
}
