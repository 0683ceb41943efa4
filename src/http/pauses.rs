//! `/api/v1/pauses`: pause a processor, a job group or a job on this node or on every node,
//! list the pauses, resume. Operators and admins change them; viewers read.

use actix_web::{HttpResponse, delete, get, post, web};
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};
use utoipa_actix_web::service_config::ServiceConfig;

use super::ApiState;
use super::auth::Principal;
use super::error::{ApiError, ErrorBody};
use super::extract::{Body, Query};
use crate::catalog::pause::PauseScope;
use crate::ops::pauses::{PauseView, parse_scope};

type State = web::Data<ApiState>;

pub(super) fn routes(cfg: &mut ServiceConfig) {
    cfg.service(list_pauses)
        .service(add_pause)
        .service(remove_pause);
}

/// A pause to record.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PauseBody {
    /// What is paused: `processor`, `group` or `job`.
    #[schema(value_type = PauseScope)]
    pub scope: String,
    /// The processor's, group's or job's name.
    pub name: String,
    /// Pause it on every node sharing the catalog (default: this node only).
    #[serde(default)]
    pub fleet: bool,
    /// Why (at most 1,000 characters), shown with the pause.
    pub reason: Option<String>,
}

/// Which pause a resume ends.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ResumeQuery {
    /// End the fleet-wide pause (default: this node's).
    pub fleet: Option<bool>,
}

/// Every pause, on this node and fleet-wide, with who paused and when.
#[utoipa::path(tag = "pauses", responses((status = 200, body = Vec<PauseView>)))]
#[get("/api/v1/pauses")]
async fn list_pauses(state: State) -> Result<web::Json<Vec<PauseView>>, ApiError> {
    Ok(web::Json(state.read(|ops| ops.pauses()).await?))
}

/// Pause a processor, a job group or a job: nothing new of it is claimed from the next claim
/// on (running runs finish, queued runs wait). Pausing again replaces who, when and why.
#[utoipa::path(
    tag = "pauses",
    request_body = PauseBody,
    responses((status = 201, body = PauseView), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody))
)]
#[post("/api/v1/pauses")]
async fn add_pause(
    state: State,
    who: Principal,
    body: Body<PauseBody>,
) -> Result<HttpResponse, ApiError> {
    let view = pause(&state, &who, body.0).await?;
    Ok(HttpResponse::Created().json(view))
}

/// Resume: end the pause of a processor, a job group or a job, on this node or (`fleet=true`)
/// fleet-wide; its queued runs are claimed at once.
#[utoipa::path(
    tag = "pauses",
    params(
        ("scope" = PauseScope, Path, description = "processor, group or job"),
        ("name" = String, Path, description = "The processor's, group's or job's name"),
        ResumeQuery
    ),
    responses((status = 204, description = "Resumed"), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody))
)]
#[delete("/api/v1/pauses/{scope}/{name}")]
async fn remove_pause(
    state: State,
    who: Principal,
    path: web::Path<(String, String)>,
    q: Query<ResumeQuery>,
) -> Result<HttpResponse, ApiError> {
    let (scope, name) = path.into_inner();
    resume(&state, &who, &scope, name, q.0.fleet.unwrap_or(false)).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// Records a pause as `who` (REST and JSON-RPC).
pub(super) async fn pause(
    state: &ApiState,
    who: &Principal,
    body: PauseBody,
) -> Result<PauseView, ApiError> {
    let scope = parse_scope(&body.scope, "scope")?;
    state
        .write(&who.user, move |ops| {
            let at = ops.pause_where(body.fleet);
            Ok(ops.pause(scope, &body.name, &at, body.reason.as_deref())?)
        })
        .await
}

/// Ends a pause as `who` (REST and JSON-RPC).
pub(super) async fn resume(
    state: &ApiState,
    who: &Principal,
    scope: &str,
    name: String,
    fleet: bool,
) -> Result<(), ApiError> {
    let scope = parse_scope(scope, "scope")?;
    state
        .write(&who.user, move |ops| {
            let at = ops.pause_where(fleet);
            Ok(ops.resume(scope, &name, &at)?)
        })
        .await
}
