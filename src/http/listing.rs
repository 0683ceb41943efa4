//! The rest of the catalog: processors and objects (admins change them), groups, the catalog
//! as job.conf (export, and import all or nothing), decisions, nodes and stats.

use actix_web::http::header::CONTENT_TYPE;
use actix_web::{HttpRequest, HttpResponse, delete, get, patch, post, web};
use utoipa_actix_web::service_config::ServiceConfig;

use super::ApiState;
use super::auth::Principal;
use super::bodies::{
    DecisionsQuery, ObjectFields, ProcessorFields, SeriesQueryParams, in_request_terms,
};
use super::error::{ApiError, ErrorBody};
use super::extract::{Body, Query};
use crate::model::Role;
use crate::ops::decisions::DecisionView;
use crate::ops::files::{Format, Imported, parse_text};
use crate::ops::node::{GroupView, NodeView, SeriesQuery, SeriesView, StatTypeView};
use crate::ops::objects::ObjectView;
use crate::ops::processors::ProcessorView;
use crate::ops::view::parse_instant;

type State = web::Data<ApiState>;

pub(super) fn routes(cfg: &mut ServiceConfig) {
    cfg.service(list_processors)
        .service(create_processor)
        .service(patch_processor)
        .service(delete_processor)
        .service(list_objects)
        .service(create_object)
        .service(patch_object)
        .service(delete_object)
        .service(list_groups)
        .service(export_catalog)
        .service(import_catalog)
        .service(list_decisions)
        .service(list_nodes)
        .service(list_stat_types)
        .service(stat_series);
}

fn name_of(name: &Option<String>) -> Result<String, ApiError> {
    name.clone()
        .ok_or_else(|| ApiError::invalid("name", "is required"))
}

fn same_name(body: &Option<String>, path: &str) -> Result<(), ApiError> {
    match body {
        Some(n) if n != path => Err(ApiError::invalid("name", "an entry cannot be renamed")),
        _ => Ok(()),
    }
}

/// Processors (a remote one's password is shown as `***`).
#[utoipa::path(tag = "processors", responses((status = 200, body = Vec<ProcessorView>)))]
#[get("/api/v1/processors")]
async fn list_processors(state: State) -> Result<web::Json<Vec<ProcessorView>>, ApiError> {
    Ok(web::Json(state.read(|ops| ops.processors()).await?))
}

/// Add a processor (admins).
#[utoipa::path(
    tag = "processors",
    request_body = ProcessorFields,
    responses((status = 201, description = "Created; the change, field by field", body = Object), (status = 409, body = ErrorBody), (status = 422, body = ErrorBody))
)]
#[post("/api/v1/processors")]
async fn create_processor(
    state: State,
    who: Principal,
    body: Body<ProcessorFields>,
) -> Result<HttpResponse, ApiError> {
    who.require(Role::Admin, "adding a processor")?;
    let name = name_of(&body.0.name)?;
    let patch = body.0.patch();
    let report = state
        .write(&who.user, move |ops| {
            Ok(ops.put_processor(&name, &patch, false)?)
        })
        .await?;
    Ok(HttpResponse::Created().json(report))
}

/// Change a processor's fields (admins).
#[utoipa::path(
    tag = "processors",
    request_body = ProcessorFields,
    responses((status = 200, description = "The change, field by field", body = Object), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody))
)]
#[patch("/api/v1/processors/{name}")]
async fn patch_processor(
    state: State,
    who: Principal,
    name: web::Path<String>,
    body: Body<ProcessorFields>,
) -> Result<HttpResponse, ApiError> {
    who.require(Role::Admin, "changing a processor")?;
    let name = name.into_inner();
    same_name(&body.0.name, &name)?;
    let patch = body.0.patch();
    let report = state
        .write(&who.user, move |ops| {
            Ok(ops.put_processor(&name, &patch, true)?)
        })
        .await?;
    Ok(HttpResponse::Ok().json(report))
}

/// Remove a processor that runs no job (admins).
#[utoipa::path(
    tag = "processors",
    responses((status = 204, description = "Removed"), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody))
)]
#[delete("/api/v1/processors/{name}")]
async fn delete_processor(
    state: State,
    who: Principal,
    name: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    who.require(Role::Admin, "removing a processor")?;
    let name = name.into_inner();
    state
        .write(&who.user, move |ops| Ok(ops.remove_processor(&name)?))
        .await?;
    Ok(HttpResponse::NoContent().finish())
}

/// Data objects.
#[utoipa::path(tag = "objects", responses((status = 200, body = Vec<ObjectView>)))]
#[get("/api/v1/objects")]
async fn list_objects(state: State) -> Result<web::Json<Vec<ObjectView>>, ApiError> {
    Ok(web::Json(state.read(|ops| ops.objects()).await?))
}

/// Add a data object (admins).
#[utoipa::path(
    tag = "objects",
    request_body = ObjectFields,
    responses((status = 201, description = "Created; the change, field by field", body = Object), (status = 409, body = ErrorBody), (status = 422, body = ErrorBody))
)]
#[post("/api/v1/objects")]
async fn create_object(
    state: State,
    who: Principal,
    body: Body<ObjectFields>,
) -> Result<HttpResponse, ApiError> {
    who.require(Role::Admin, "adding an object")?;
    let name = name_of(&body.0.name)?;
    let patch = body.0.patch()?;
    let report = state
        .write(&who.user, move |ops| {
            Ok(ops.put_object(&name, &patch, false)?)
        })
        .await
        .map_err(|e| in_request_terms(e, &ObjectFields::FIELD_NAMES))?;
    Ok(HttpResponse::Created().json(report))
}

/// Change a data object's fields (admins).
#[utoipa::path(
    tag = "objects",
    request_body = ObjectFields,
    responses((status = 200, description = "The change, field by field", body = Object), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody))
)]
#[patch("/api/v1/objects/{name}")]
async fn patch_object(
    state: State,
    who: Principal,
    name: web::Path<String>,
    body: Body<ObjectFields>,
) -> Result<HttpResponse, ApiError> {
    who.require(Role::Admin, "changing an object")?;
    let name = name.into_inner();
    same_name(&body.0.name, &name)?;
    let patch = body.0.patch()?;
    let report = state
        .write(&who.user, move |ops| {
            Ok(ops.put_object(&name, &patch, true)?)
        })
        .await
        .map_err(|e| in_request_terms(e, &ObjectFields::FIELD_NAMES))?;
    Ok(HttpResponse::Ok().json(report))
}

/// Remove a data object no job writes (admins).
#[utoipa::path(
    tag = "objects",
    responses((status = 204, description = "Removed"), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody))
)]
#[delete("/api/v1/objects/{name}")]
async fn delete_object(
    state: State,
    who: Principal,
    name: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    who.require(Role::Admin, "removing an object")?;
    let name = name.into_inner();
    state
        .write(&who.user, move |ops| Ok(ops.remove_object(&name)?))
        .await?;
    Ok(HttpResponse::NoContent().finish())
}

/// Job groups.
#[utoipa::path(tag = "catalog", responses((status = 200, body = Vec<GroupView>)))]
#[get("/api/v1/groups")]
async fn list_groups(state: State) -> Result<web::Json<Vec<GroupView>>, ApiError> {
    Ok(web::Json(state.read(|ops| ops.groups()).await?))
}

/// The whole catalog as job.conf (TOML); a remote processor's password is written `***`.
#[utoipa::path(
    tag = "catalog",
    responses((status = 200, description = "job.conf", content_type = "application/toml", body = String))
)]
#[get("/api/v1/catalog")]
async fn export_catalog(state: State) -> Result<HttpResponse, ApiError> {
    let text = state.read(|ops| ops.export()).await?;
    Ok(HttpResponse::Ok()
        .content_type("application/toml; charset=utf-8")
        .body(text))
}

/// Import job.conf text (admins): an upsert by name of the fields each entry names, validated
/// as a whole catalog, in one transaction — all or nothing.
#[utoipa::path(
    tag = "catalog",
    request_body(content = String, content_type = "application/toml", description = "job.conf text"),
    responses(
        (status = 200, body = Imported),
        (status = 415, body = ErrorBody),
        (status = 422, description = "Errors, each with its line and column; nothing was changed", body = ErrorBody),
    )
)]
#[post("/api/v1/catalog")]
async fn import_catalog(
    state: State,
    who: Principal,
    req: HttpRequest,
    body: web::Bytes,
) -> Result<web::Json<Imported>, ApiError> {
    who.require(Role::Admin, "importing a catalog")?;
    let content_type = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    let format =
        if content_type.starts_with("application/toml") || content_type.starts_with("text/plain") {
            Format::Toml
        } else if content_type.starts_with("application/json") {
            Format::Millix
        } else {
            return Err(ApiError::new(
                actix_web::http::StatusCode::UNSUPPORTED_MEDIA_TYPE,
                None,
                "send job.conf as application/toml, or a millix job.json as application/json",
            ));
        };
    let text = std::str::from_utf8(&body).map_err(|e| {
        ApiError::bad_request(
            None,
            format!("the body is not UTF-8 (byte {})", e.valid_up_to()),
        )
    })?;
    if matches!(format, Format::Millix) {
        super::extract::no_duplicate_keys(text)?;
    }
    let parsed = parse_text("request body", text, format)?;
    if !parsed.unmapped.is_empty() {
        let first = &parsed.unmapped[0];
        return Err(ApiError::invalid(
            "body",
            format!(
                "{} item(s) cannot be mapped, the first: {}; nothing was changed",
                parsed.unmapped.len(),
                first.render("request body")
            ),
        ));
    }
    Ok(web::Json(
        state
            .write(&who.user, move |ops| Ok(ops.import(&parsed)?))
            .await?,
    ))
}

/// What the self-tuning policy decided, and why; newest first.
#[utoipa::path(
    tag = "node",
    params(DecisionsQuery),
    responses((status = 200, body = Vec<DecisionView>), (status = 422, body = ErrorBody))
)]
#[get("/api/v1/decisions")]
async fn list_decisions(
    state: State,
    q: Query<DecisionsQuery>,
) -> Result<web::Json<Vec<DecisionView>>, ApiError> {
    let limit = q.0.limit.unwrap_or(100);
    // The API's page bound; a local `jobvisor decisions` may read up to ops' larger one.
    if !(1..=crate::ops::pages::MAX_PAGE as i64).contains(&limit) {
        return Err(ApiError::invalid(
            "limit",
            format!("must be 1–{}, got {limit}", crate::ops::pages::MAX_PAGE),
        ));
    }
    let all = q.0.all_nodes.unwrap_or(false);
    Ok(web::Json(
        state.read(move |ops| ops.decisions(limit, all)).await?,
    ))
}

/// Nodes sharing this catalog: name, host, pid, version, start, heartbeat and its age, lease
/// TTL, and whether each is alive, dead (its heartbeat older than its TTL), fenced (swept by
/// another node) or stopped.
#[utoipa::path(tag = "node", responses((status = 200, body = Vec<NodeView>)))]
#[get("/api/v1/nodes")]
async fn list_nodes(state: State) -> Result<web::Json<Vec<NodeView>>, ApiError> {
    let now = crate::catalog::now_ms();
    Ok(web::Json(state.read(move |ops| ops.nodes(now)).await?))
}

/// The kinds of stats recorded.
#[utoipa::path(tag = "stats", responses((status = 200, body = Vec<StatTypeView>)))]
#[get("/api/v1/stats")]
async fn list_stat_types(state: State) -> Result<web::Json<Vec<StatTypeView>>, ApiError> {
    Ok(web::Json(state.read(|ops| ops.stat_types()).await?))
}

/// A stat as a time series of buckets (at most 90 days, at most 10,000 buckets).
#[utoipa::path(
    tag = "stats",
    params(SeriesQueryParams),
    responses((status = 200, body = SeriesView), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody))
)]
#[get("/api/v1/stats/{stat_type}")]
async fn stat_series(
    state: State,
    stat_type: web::Path<String>,
    q: Query<SeriesQueryParams>,
) -> Result<web::Json<SeriesView>, ApiError> {
    let q = q.0;
    let now = crate::catalog::now_ms();
    let from = match &q.from {
        Some(t) => parse_instant("from", t, now)?,
        None => now - 3_600_000,
    };
    let to = match &q.to {
        Some(t) => parse_instant("to", t, now)?,
        None => now,
    };
    let step = match q.step {
        Some(s) => s.saturating_mul(1000),
        None => ((to - from) / 60).max(1000),
    };
    let query = SeriesQuery {
        stat_type: stat_type.into_inner(),
        from,
        to,
        step,
        subject: q.subject,
        node: q.node,
    };
    Ok(web::Json(state.read(move |ops| ops.series(&query)).await?))
}
