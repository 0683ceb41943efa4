//! `/api/v1/jobs`: list (paged, sorted, filtered), get, create, patch, delete, enable, disable,
//! pin, next fire times, and triggers (one run, or a batch in one transaction).

use actix_web::{HttpResponse, delete, get, patch, post, put, web};
use serde::Serialize;
use serde_json::Value as Json;
use utoipa::ToSchema;
use utoipa_actix_web::service_config::ServiceConfig;

use super::ApiState;
use super::auth::Principal;
use super::bodies::{
    BatchBody, JobFields, JobsQuery, NextQuery, PinBody, TriggerBody, in_request_terms,
};
use super::error::{ApiError, ErrorBody};
use super::extract::{Body, Query};
use super::rules::{require_for, require_for_processor};
use crate::model::Pin;
use crate::ops::jobs::{ActivationView, JobView, NextView, Saved};
use crate::ops::pages::{JobPage, JobQuery, JobSort};

type State = web::Data<ApiState>;

pub(super) fn routes(cfg: &mut ServiceConfig) {
    cfg.service(list_jobs)
        .service(create_job)
        .service(get_job)
        .service(patch_job)
        .service(delete_job)
        .service(enable_job)
        .service(disable_job)
        .service(pin_job)
        .service(next_times)
        .service(trigger)
        .service(trigger_batch);
}

/// List jobs, a page at a time.
#[utoipa::path(
    tag = "jobs",
    params(JobsQuery),
    responses(
        (status = 200, body = JobPage),
        (status = 422, description = "A filter or page size is invalid", body = ErrorBody),
    )
)]
#[get("/api/v1/jobs")]
async fn list_jobs(state: State, q: Query<JobsQuery>) -> Result<web::Json<JobPage>, ApiError> {
    let q = q.0;
    let sort = match q.sort.as_deref() {
        None => JobSort::Name,
        Some(s) => JobSort::parse(s).ok_or_else(|| {
            ApiError::invalid(
                "sort",
                format!("expected one of name, priority, last_end, next_run, got `{s}`"),
            )
        })?,
    };
    let query = JobQuery {
        group: q.group,
        processor: q.processor,
        enabled: q.enabled,
        activation: q.activation,
        job_type: q.job_type,
        search: q.search,
        sort,
        reversed: false,
        offset: q.offset.unwrap_or(0),
        limit: q.limit.unwrap_or(100),
    };
    Ok(web::Json(
        state.read(move |ops| ops.job_page(&query)).await?,
    ))
}

/// Create a job (sql, command, url and rpc jobs, and jobs on a remote processor: admins only).
#[utoipa::path(
    tag = "jobs",
    request_body = JobFields,
    responses(
        (status = 201, body = Saved),
        (status = 409, description = "A job of that name exists", body = ErrorBody),
        (status = 422, description = "A field is invalid", body = ErrorBody),
    )
)]
#[post("/api/v1/jobs")]
async fn create_job(
    state: State,
    who: Principal,
    body: Body<JobFields>,
) -> Result<HttpResponse, ApiError> {
    let fields = body.0;
    let name = fields
        .name
        .clone()
        .ok_or_else(|| ApiError::invalid("name", "is required"))?;
    let job_type = fields
        .job_type()?
        .ok_or_else(|| ApiError::invalid("type", "is required"))?;
    let processor = fields
        .processor
        .clone()
        .ok_or_else(|| ApiError::invalid("processor", "is required"))?;
    require_for(&who, job_type)?;
    let patch = fields.patch()?;
    let actor = who.user.clone();
    let saved = state
        .write(&actor, move |ops| {
            require_for_processor(&who, ops, &processor)?;
            Ok(ops.add_job(&name, job_type, &processor, &patch)?)
        })
        .await
        .map_err(|e| in_request_terms(e, &JobFields::FIELD_NAMES))?;
    Ok(HttpResponse::Created().json(saved))
}

/// One job, with its activation on this node.
#[utoipa::path(
    tag = "jobs",
    responses((status = 200, body = JobView), (status = 404, body = ErrorBody))
)]
#[get("/api/v1/jobs/{name}")]
async fn get_job(state: State, name: web::Path<String>) -> Result<web::Json<JobView>, ApiError> {
    let name = name.into_inner();
    Ok(web::Json(
        state.read(move |ops| Ok(ops.job(&name)?.0)).await?,
    ))
}

/// Change the fields given (nothing is written when they already hold those values).
#[utoipa::path(
    tag = "jobs",
    request_body = JobFields,
    responses(
        (status = 200, body = Saved),
        (status = 404, body = ErrorBody),
        (status = 422, body = ErrorBody),
    )
)]
#[patch("/api/v1/jobs/{name}")]
async fn patch_job(
    state: State,
    who: Principal,
    name: web::Path<String>,
    body: Body<JobFields>,
) -> Result<web::Json<Saved>, ApiError> {
    let name = name.into_inner();
    if body.0.name.as_ref().is_some_and(|n| n != &name) {
        return Err(ApiError::invalid(
            "name",
            "a job cannot be renamed: create it under the new name and remove the old one",
        ));
    }
    let new_type = body.0.job_type()?;
    if let Some(t) = new_type {
        require_for(&who, t)?;
    }
    let patch = body.0.patch()?;
    let actor = who.user.clone();
    let saved = state
        .write(&actor, move |ops| {
            let (_, def) = ops.job(&name)?;
            require_for(&who, def.job_type)?;
            require_for_processor(&who, ops, &def.processor)?;
            if let Some(processor) = &patch.processor {
                require_for_processor(&who, ops, processor)?;
            }
            Ok(ops.edit_job(&name, &patch)?)
        })
        .await
        .map_err(|e| in_request_terms(e, &JobFields::FIELD_NAMES))?;
    Ok(web::Json(saved))
}

/// Remove a job and its run history (refused while one of its runs executes).
#[utoipa::path(
    tag = "jobs",
    responses(
        (status = 204, description = "Removed"),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody),
    )
)]
#[delete("/api/v1/jobs/{name}")]
async fn delete_job(
    state: State,
    who: Principal,
    name: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let name = name.into_inner();
    let actor = who.user.clone();
    state
        .write(&actor, move |ops| {
            let (_, def) = ops.job(&name)?;
            require_for(&who, def.job_type)?;
            require_for_processor(&who, ops, &def.processor)?;
            Ok(ops.remove_job(&name)?)
        })
        .await?;
    Ok(HttpResponse::NoContent().finish())
}

/// Whether enabling or disabling changed anything.
#[derive(Debug, Serialize, ToSchema)]
struct Enabled {
    job: String,
    enabled: bool,
    change: crate::ops::jobs::Change,
}

async fn set_enabled(
    state: State,
    who: Principal,
    name: String,
    enabled: bool,
) -> Result<web::Json<Enabled>, ApiError> {
    let job = name.clone();
    let change = state
        .write(&who.user, move |ops| {
            Ok(ops.set_job_enabled(&name, enabled)?)
        })
        .await?;
    Ok(web::Json(Enabled {
        job,
        enabled,
        change,
    }))
}

/// Enable a job.
#[utoipa::path(tag = "jobs", responses((status = 200, body = Enabled), (status = 404, body = ErrorBody)))]
#[post("/api/v1/jobs/{name}/enable")]
async fn enable_job(
    state: State,
    who: Principal,
    name: web::Path<String>,
) -> Result<web::Json<Enabled>, ApiError> {
    set_enabled(state, who, name.into_inner(), true).await
}

/// Disable a job (its history stays).
#[utoipa::path(tag = "jobs", responses((status = 200, body = Enabled), (status = 404, body = ErrorBody)))]
#[post("/api/v1/jobs/{name}/disable")]
async fn disable_job(
    state: State,
    who: Principal,
    name: web::Path<String>,
) -> Result<web::Json<Enabled>, ApiError> {
    set_enabled(state, who, name.into_inner(), false).await
}

/// Pin a job active or inactive on this node regardless of health, or remove the pin.
#[utoipa::path(
    tag = "jobs",
    request_body = PinBody,
    responses((status = 200, body = ActivationView), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody))
)]
#[put("/api/v1/jobs/{name}/pin")]
async fn pin_job(
    state: State,
    who: Principal,
    name: web::Path<String>,
    body: Body<PinBody>,
) -> Result<web::Json<ActivationView>, ApiError> {
    let name = name.into_inner();
    let pin = match body.0.pin {
        None => {
            return Err(ApiError::invalid(
                "pin",
                "is required (null removes the pin)",
            ));
        }
        Some(None) => None,
        Some(Some(p)) => Some(Pin::parse(&p).ok_or_else(|| {
            ApiError::invalid(
                "pin",
                format!("expected active, inactive or null, got `{p}`"),
            )
        })?),
    };
    let activation = state
        .write(&who.user, move |ops| Ok(ops.pin_job(&name, pin)?))
        .await?;
    Ok(web::Json(activation))
}

/// The next fire times of a job, and its schedule in words.
#[utoipa::path(
    tag = "jobs",
    params(NextQuery),
    responses((status = 200, body = NextView), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody))
)]
#[get("/api/v1/jobs/{name}/next")]
async fn next_times(
    state: State,
    name: web::Path<String>,
    q: Query<NextQuery>,
) -> Result<web::Json<NextView>, ApiError> {
    let name = name.into_inner();
    let count = q.0.count.unwrap_or(5);
    let now = crate::catalog::now_ms();
    Ok(web::Json(
        state
            .read(move |ops| ops.next_times(&name, count, now))
            .await?,
    ))
}

/// Runs queued by a trigger.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct Queued {
    /// The job.
    job: String,
    /// The new runs' ids, in the order of the request.
    run_ids: Vec<i64>,
}

async fn queue(
    state: &ApiState,
    who: &Principal,
    job: String,
    params: Vec<Option<Json>>,
    start_within_ms: Option<i64>,
) -> Result<HttpResponse, ApiError> {
    let options = crate::ops::node::trigger_options(start_within_ms, "start_within_ms")?;
    let run_ids =
        crate::ops::node::trigger(&state.engine, &who.user, &job, params, options).await?;
    Ok(HttpResponse::Created().json(Queued { job, run_ids }))
}

/// Queue a run of a job now, with parameters overlaying its payload.
#[utoipa::path(
    tag = "runs",
    request_body = TriggerBody,
    responses((status = 201, body = Queued), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody))
)]
#[post("/api/v1/jobs/{name}/runs")]
async fn trigger(
    state: State,
    who: Principal,
    name: web::Path<String>,
    body: Body<TriggerBody>,
) -> Result<HttpResponse, ApiError> {
    let body = body.0;
    queue(
        &state,
        &who,
        name.into_inner(),
        vec![body.params],
        body.start_within_ms,
    )
    .await
}

/// Queue many runs of a job in one transaction (1–10,000).
#[utoipa::path(
    tag = "runs",
    request_body = BatchBody,
    responses((status = 201, body = Queued), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody))
)]
#[post("/api/v1/jobs/{name}/runs/batch")]
async fn trigger_batch(
    state: State,
    who: Principal,
    name: web::Path<String>,
    body: Body<BatchBody>,
) -> Result<HttpResponse, ApiError> {
    let body = body.0;
    let params = body.runs.into_iter().map(|r| r.params).collect();
    queue(
        &state,
        &who,
        name.into_inner(),
        params,
        body.start_within_ms,
    )
    .await
}
