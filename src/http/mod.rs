//! The node's HTTP face, served by `jobvisor run` on the engine's actix System: REST under
//! `/api/v1`, `/healthz`, `/readyz`, and the OpenAPI document of it all. Handlers adapt HTTP to
//! the application layer ([`crate::ops`]) and back; the catalog is reached only through it,
//! on the blocking pool (rusqlite blocks), and the running engine through its handle.
//!
//! Invariant: every route is registered through `utoipa-actix-web`'s `service`, so a route
//! cannot be served without being in the OpenAPI document (`tests/tidy.rs` refuses `.route(`
//! here); the only routes outside it are the web UI's, added by [`app_with`] and listed in
//! `crate::ui::ROUTES`; every request passes [`auth::guard`]; a handler never holds validation
//! logic; a request's body arrives within its deadline ([`deadline`]) or the request is
//! refused and its connection closed.

pub mod auth;
pub mod bodies;
pub mod deadline;
pub mod error;
pub mod extract;
mod jobs;
mod listing;
mod metrics;
mod node;
pub mod openapi;
mod pauses;
mod rpc;
pub mod rules;
mod runs;
pub mod tls;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceFactory, ServiceRequest, ServiceResponse};
use actix_web::middleware::from_fn;
use actix_web::{App, web};
use utoipa::OpenApi as _;
use utoipa_actix_web::AppExt as _;
use utoipa_actix_web::service_config::ServiceConfig;

use crate::ops::{OpError, Ops};
use crate::runtime::Engine;
use error::ApiError;

/// The largest request body, bytes.
pub const BODY_LIMIT: usize = 1 << 20;

/// What every handler can reach.
pub struct ApiState {
    /// The application layer on the node's catalog, always called on the blocking pool: each
    /// request on a clone of its own, so reads run side by side (writes take the catalog's
    /// write lock in turn).
    pub ops: Ops,
    /// The running engine.
    pub engine: Engine,
    /// Host allowlist, login throttling, the token cache.
    pub auth: auth::AuthState,
}

impl ApiState {
    /// Runs a reading operation on the blocking pool.
    pub async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Ops) -> Result<T, OpError> + Send + 'static,
    ) -> Result<T, ApiError> {
        let ops = self.ops.clone();
        web::block(move || f(&ops))
            .await
            .map_err(|_| ApiError::unavailable("the node is stopping"))?
            .map_err(ApiError::from)
    }

    /// Runs a changing operation on the blocking pool, on behalf of `actor` (its audit rows
    /// name them). `f` may refuse with an [`ApiError`] of its own (a role check that depends on
    /// what is stored).
    pub async fn write<T: Send + 'static>(
        &self,
        actor: &str,
        f: impl FnOnce(&mut Ops) -> Result<T, ApiError> + Send + 'static,
    ) -> Result<T, ApiError> {
        let mut ops = self.ops.clone();
        ops.set_actor(actor);
        let done = web::block(move || f(&mut ops))
            .await
            .map_err(|_| ApiError::unavailable("the node is stopping"))?;
        if done.is_ok() {
            // The engine's next decision sees the change, not its next look at the file.
            self.engine.catalog_changed();
        }
        done
    }
}

/// The document's fixed parts; the paths and schemas come from the routes.
#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "jobvisor node API",
        description = "REST for a jobvisor node: its catalog (jobs, processors, objects, groups), \
            runs, triggers, the node itself, decisions, stats. Every route but /healthz needs \
            `Authorization: Bearer <token>` (`jobvisor tokens create`); viewers read, operators \
            also run, cancel, enable and pause, admins also create and change sql, command and \
            url jobs, processors and objects. Errors are JSON {error, field, reason}.",
        license(name = "MIT OR Apache-2.0")
    ),
    modifiers(&Security)
)]
struct ApiDoc;

struct Security;

impl utoipa::Modify for Security {
    fn modify(&self, api: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{
            HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme,
        };
        let components = api.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        components.add_security_scheme(
            "basic",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Basic).build()),
        );
        api.security = Some(vec![
            SecurityRequirement::new("bearer", Vec::<String>::new()),
            SecurityRequirement::new("basic", Vec::<String>::new()),
        ]);
    }
}

/// Registers every route, each with its OpenAPI description.
pub fn routes(cfg: &mut ServiceConfig) {
    node::routes(cfg);
    jobs::routes(cfg);
    runs::routes(cfg);
    pauses::routes(cfg);
    listing::routes(cfg);
    metrics::routes(cfg);
    rpc::routes(cfg);
}

/// The OpenAPI 3.1 document of the API (what `/api/v1/openapi.json` serves and
/// `src/http/openapi.json` keeps): the routes' annotations, completed by [`openapi::conform`].
pub fn openapi() -> serde_json::Value {
    let mut doc = App::new()
        .into_utoipa_app()
        .openapi(ApiDoc::openapi())
        .configure(routes)
        .split_for_parts()
        .1;
    describe_responses(&mut doc);
    let mut doc = serde_json::to_value(&doc).unwrap_or_default();
    openapi::conform(&mut doc);
    doc
}

/// OpenAPI requires a description on every response: a response the handler's annotation
/// does not describe gets its status's reason phrase (`Created`, `Unprocessable Entity`).
fn describe_responses(doc: &mut utoipa::openapi::OpenApi) {
    use utoipa::openapi::RefOr;
    for item in doc.paths.paths.values_mut() {
        let operations = [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
            &mut item.patch,
        ];
        for op in operations.into_iter().flatten() {
            for (code, response) in op.responses.responses.iter_mut() {
                if let RefOr::T(r) = response
                    && r.description.is_empty()
                {
                    r.description = code
                        .parse::<u16>()
                        .ok()
                        .and_then(|c| actix_web::http::StatusCode::from_u16(c).ok())
                        .and_then(|s| s.canonical_reason())
                        .unwrap_or("Response")
                        .to_string();
                }
            }
        }
    }
}

/// The document as the committed file holds it: pretty JSON and a final newline.
pub fn openapi_json() -> String {
    let mut text = serde_json::to_string_pretty(&openapi())
        .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    text.push('\n');
    text
}

/// The app: routes, their limits and error bodies, the security guard around them, and
/// around all the deadline on request bodies ([`deadline::guard`]; `jobvisor run` gives it
/// `http.body_timeout` as a [`deadline::BodyTimeout`]).
pub fn app(
    state: web::Data<ApiState>,
) -> App<
    impl ServiceFactory<
        ServiceRequest,
        Config = (),
        Response = ServiceResponse<impl MessageBody>,
        Error = actix_web::Error,
        InitError = (),
    >,
> {
    app_with(state, |_| {})
}

/// The app with more routes outside the API document: `jobvisor run` adds the web UI's
/// (`crate::ui::configure`), which sit behind the same guard ([`auth::guard`] hands the UI's
/// paths, [`auth::is_ui_path`], to the UI's own session guard after its Host check).
pub fn app_with(
    state: web::Data<ApiState>,
    extra: impl FnOnce(&mut web::ServiceConfig),
) -> App<
    impl ServiceFactory<
        ServiceRequest,
        Config = (),
        Response = ServiceResponse<impl MessageBody>,
        Error = actix_web::Error,
        InitError = (),
    >,
> {
    let (app, _) = App::new()
        .into_utoipa_app()
        .app_data(state)
        .app_data(web::PayloadConfig::new(BODY_LIMIT))
        .configure(routes)
        .split_for_parts();
    app.configure(extra)
        .default_service(web::to(openapi::no_route))
        .wrap(from_fn(auth::guard))
        .wrap(from_fn(deadline::guard))
}
