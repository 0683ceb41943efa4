//! `/api/v1/runs`: list with filters, one run with its output, its tree, a child spawned under
//! it, cancel, retry.

use actix_web::{HttpResponse, get, post, web};
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_actix_web::service_config::ServiceConfig;

use super::ApiState;
use super::auth::Principal;
use super::bodies::{RunsQuery, SpawnBody};
use super::error::{ApiError, ErrorBody};
use super::extract::{Body, Query, run_id};
use crate::ops::runs::{Cancelled, RunQuery, RunView, TreeView};

type State = web::Data<ApiState>;

pub(super) fn routes(cfg: &mut ServiceConfig) {
    cfg.service(list_runs)
        .service(get_run)
        .service(get_tree)
        .service(spawn_child)
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

/// The tree a run belongs to, from its root: every run depth first, the root's status (the
/// minimum over the tree) and counts by status.
#[utoipa::path(
    tag = "runs",
    responses((status = 200, body = TreeView), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody))
)]
#[get("/api/v1/runs/{id}/tree")]
async fn get_tree(state: State, id: web::Path<String>) -> Result<web::Json<TreeView>, ApiError> {
    let id = run_id(&id)?;
    Ok(web::Json(state.read(move |ops| ops.tree(id)).await?))
}

/// A child run queued.
#[derive(Debug, Serialize, ToSchema)]
struct ChildView {
    run_id: i64,
    parent: i64,
}

/// Queue a child run under a running run, in its tree: the parent ends with its last
/// descendant, its status the minimum over its tree.
#[utoipa::path(
    tag = "runs",
    request_body = SpawnBody,
    responses((status = 201, body = ChildView), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 422, body = ErrorBody))
)]
#[post("/api/v1/runs/{id}/children")]
async fn spawn_child(
    state: State,
    who: Principal,
    id: web::Path<String>,
    body: Body<SpawnBody>,
) -> Result<HttpResponse, ApiError> {
    let parent = run_id(&id)?;
    let SpawnBody { job, params } = body.0;
    let child = crate::ops::node::spawn(&state.engine, &who.user, parent, &job, params).await?;
    Ok(HttpResponse::Created().json(ChildView {
        run_id: child,
        parent,
    }))
}

/// What a cancel did.
#[derive(Debug, Serialize, ToSchema)]
struct CancelView {
    run_id: i64,
    result: Cancelled,
}

/// Cancel a queued run at once, or ask the node executing a running one to cancel it (a
/// command's process group is killed); a run heading a tree that has not ended (a workflow's
/// run) is cancelled with its whole tree.
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

/// Queue a new attempt of a failed, timed-out, dead, cancelled or skipped run. A workflow's run
/// is retried in place (`run_id` is its own id): its failed steps and what depends on them run
/// again.
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
