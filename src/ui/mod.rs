//! The web UI, served by the node itself under `/ui/` (and `/`, a redirect there): pages
//! rendered on the server from `templates/` (askama, which escapes every value it writes),
//! made live by htmx (polling, forms and links swapped in place) and charts drawn by uPlot,
//! both vendored and embedded ([`assets`]). The pages call the application layer ([`crate::ops`])
//! the API calls, through the API's [`ApiState`], and the API's role rules
//! ([`crate::http::rules`]): a viewer sees no edit controls, and the server refuses them anyway.
//!
//! Security, all in [`guard`], which wraps every UI route: a page needs a session (a cookie
//! from signing in, [`session`]), except the few in [`PUBLIC`] — the login page and its
//! stylesheet, and `/`, which only redirects. Every request that is not a read must carry the
//! session's CSRF token (the `X-CSRF-Token` header that `app.js` adds to htmx requests, or a
//! form's `csrf` field) and, when it says where it comes from (`Origin`), come from this node.
//! Every answer has a Content-Security-Policy without inline scripts or styles, and is not
//! cached, framed or sniffed. The API's guard ([`crate::http::auth`]) leaves these paths to this
//! one, after its Host allowlist.
//!
//! Invariant: the routes are registered only by `ui_routes!`, which also lists them in
//! [`ROUTES`] (tests request each one without a session); no handler holds SQL, validation or
//! role logic of its own.

pub mod assets;
mod job_form;
mod jobs;
mod login;
mod pages;
mod pauses;
mod runs;
pub mod session;
mod view;

use std::time::Instant;

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{Payload, ServiceRequest, ServiceResponse};
use actix_web::http::header::{self, HeaderValue};
use actix_web::http::{Method, StatusCode};
use actix_web::middleware::{Next, from_fn};
use actix_web::{FromRequest, HttpMessage as _, HttpRequest, HttpResponse, ResponseError, web};

use crate::http::ApiState;
use crate::http::error::ApiError;
use crate::ops::OpError;
use crate::ops::accounts::Principal;
use session::{COOKIE, Session, Sessions, cookie_value, same_secret};

/// What the UI keeps between requests.
#[derive(Debug, Default)]
pub struct Ui {
    /// The signed-in browsers.
    pub sessions: Sessions,
}

/// One UI route: its method and path pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    /// `GET` or `POST`.
    pub method: &'static str,
    /// The path pattern (`/ui/jobs/{name}`).
    pub path: &'static str,
}

/// The routes served without a session, each for a reason: the login page and its form (there
/// is no session before it), the login page's stylesheet, and `/`, a redirect to `/ui/`.
/// Nothing else — not the scripts, not the charts' data — answers without one.
pub const PUBLIC: &[Route] = &[
    Route {
        method: "GET",
        path: "/",
    },
    Route {
        method: "GET",
        path: "/ui/login",
    },
    Route {
        method: "POST",
        path: "/ui/login",
    },
    Route {
        method: "GET",
        path: "/ui/static/app.css",
    },
];

/// Registers every UI route and lists it in [`ROUTES`]: one definition, so a route cannot be
/// served without being listed (and so tested without a session).
macro_rules! ui_routes {
    ($($method:ident $path:literal => $handler:path;)*) => {
        /// Every UI route (the paths relative to `/ui` as registered, here in full).
        pub const ROUTES: &[Route] = &[
            Route { method: "GET", path: "/" },
            $(Route { method: ui_routes!(@upper $method), path: concat!("/ui", $path) },)*
        ];

        fn register(cfg: &mut web::ServiceConfig) {
            $(cfg.route($path, web::$method().to($handler));)*
        }
    };
    (@upper get) => { "GET" };
    (@upper post) => { "POST" };
}

ui_routes! {
    get "/login" => login::form;
    post "/login" => login::submit;
    post "/logout" => login::logout;
    get "/static/{name}" => static_file;
    get "/" => pages::overview;
    get "/charts" => pages::charts;
    get "/jobs" => jobs::list;
    post "/jobs" => job_form::create;
    get "/new-job" => job_form::new_form;
    get "/schedule" => job_form::schedule_preview;
    get "/jobs/{name}" => jobs::detail;
    post "/jobs/{name}" => job_form::update;
    get "/jobs/{name}/edit" => job_form::edit_form;
    post "/jobs/{name}/enable" => jobs::enable;
    post "/jobs/{name}/disable" => jobs::disable;
    post "/jobs/{name}/pin" => jobs::pin;
    post "/jobs/{name}/run" => jobs::run_now;
    post "/jobs/{name}/delete" => jobs::delete;
    get "/runs" => runs::list;
    post "/runs/bulk" => runs::bulk;
    get "/runs/{id}" => runs::detail;
    post "/runs/{id}/cancel" => runs::cancel;
    post "/runs/{id}/retry" => runs::retry;
    get "/processors" => pages::processors;
    get "/objects" => pages::objects;
    get "/decisions" => pages::decisions;
    get "/nodes" => pages::nodes;
    get "/pauses" => pauses::list;
    post "/pauses" => pauses::add;
    post "/pauses/resume" => pauses::resume;
    post "/node/pause" => pages::pause;
    post "/node/resume" => pages::resume;
}

/// The UI's routes and state, for [`crate::http::app_with`]: `/` and the `/ui` scope behind
/// [`guard`].
pub fn configure(ui: web::Data<Ui>) -> impl FnOnce(&mut web::ServiceConfig) {
    move |cfg| {
        cfg.service(
            web::scope("/ui")
                .app_data(ui)
                .app_data(
                    web::FormConfig::default()
                        .limit(crate::http::BODY_LIMIT)
                        .error_handler(form_error),
                )
                .wrap(from_fn(guard))
                .configure(register),
        );
        cfg.route("/", web::get().to(root));
    }
}

/// Why a form is refused for its size: the API's body limit ([`crate::http::BODY_LIMIT`]) is
/// the UI's too, one limit for every request to the node.
pub(crate) fn too_large() -> String {
    format!(
        "the form is larger than {} KiB ({} bytes), the most a request to this node may carry; \
         nothing was saved",
        crate::http::BODY_LIMIT / 1024,
        crate::http::BODY_LIMIT
    )
}

/// A form body that cannot be read, in words (never the framework's own text).
fn form_error(e: actix_web::error::UrlencodedError, _: &HttpRequest) -> actix_web::Error {
    use actix_web::error::UrlencodedError as E;
    let e = match e {
        E::Overflow { .. } | E::UnknownLength => {
            UiError::new(StatusCode::PAYLOAD_TOO_LARGE, too_large())
        }
        E::ContentType => UiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "a form must be sent as application/x-www-form-urlencoded",
        ),
        _ => UiError::new(
            StatusCode::BAD_REQUEST,
            "the form could not be read (its body is not URL-encoded text)",
        ),
    };
    e.into()
}

/// `/`: the UI's start page is `/ui/` (a page of its own there needs a session).
async fn root() -> HttpResponse {
    see_other("/ui/")
}

/// A 303 to `to` (a form's answer, or a page that needs a session).
pub(crate) fn see_other(to: &str) -> HttpResponse {
    HttpResponse::SeeOther()
        .insert_header((header::LOCATION, to))
        .finish()
}

/// The page's policy: scripts, styles, images and requests from this node only; no inline
/// script or style, no plugins, no framing, forms posted here only.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    img-src 'self' data:; connect-src 'self'; font-src 'self'; form-action 'self'; \
    frame-ancestors 'none'; base-uri 'none'";

fn is_public(method: &Method, path: &str) -> bool {
    PUBLIC
        .iter()
        .any(|r| r.method == method.as_str() && r.path == path)
}

fn is_htmx(req: &HttpRequest) -> bool {
    req.headers().contains_key("hx-request")
}

/// Whether the request came over TLS (directly, or as a proxy in front says).
pub(crate) fn over_tls(req: &HttpRequest) -> bool {
    req.connection_info().scheme() == "https"
}

/// The middleware: see the module doc.
pub async fn guard(
    mut req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let now = Instant::now();
    let (Some(ui), Some(api)) = (
        req.app_data::<web::Data<Ui>>().cloned(),
        req.app_data::<web::Data<ApiState>>().cloned(),
    ) else {
        let e = UiError::new(StatusCode::SERVICE_UNAVAILABLE, "the UI is not set up");
        return Ok(secured(req.into_response(e.error_response())));
    };
    let public = is_public(req.method(), req.path());
    let mut session = req
        .headers()
        .get(header::COOKIE)
        .and_then(|v| v.to_str().ok())
        .and_then(|c| cookie_value(c, COOKIE))
        .and_then(|c| ui.sessions.find(c, now));
    if let Some(s) = session.take() {
        session = recheck(&ui, &api, s, now).await;
    }
    let write = !matches!(*req.method(), Method::GET | Method::HEAD);
    if !public {
        let Some(s) = &session else {
            let res = if is_htmx(req.request()) || write {
                HttpResponse::Unauthorized()
                    .insert_header(("HX-Redirect", "/ui/login"))
                    .content_type("text/plain; charset=utf-8")
                    .body("sign in first: this page needs a session")
            } else {
                see_other("/ui/login")
            };
            return Ok(secured(req.into_response(res)));
        };
        if write && let Err(e) = check_origin(req.request()) {
            return Ok(secured(req.into_response(e.error_response())));
        }
        if write
            && req.path() != "/ui/logout"
            && let Err(e) = s
                .principal
                .require(crate::model::Role::Operator, "a change")
        {
            return Ok(secured(
                req.into_response(UiError::from(e).error_response()),
            ));
        }
        if write {
            let refused = match carries_csrf(&mut req, &s.csrf).await {
                Csrf::Carried => None,
                Csrf::Missing => Some(UiError::new(
                    StatusCode::FORBIDDEN,
                    "the request carries no valid CSRF token (reload the page and try again)",
                )),
                Csrf::TooLarge => Some(UiError::new(StatusCode::PAYLOAD_TOO_LARGE, too_large())),
            };
            if let Some(e) = refused {
                return Ok(secured(req.into_response(e.error_response())));
            }
        }
    } else if write && let Err(e) = check_origin(req.request()) {
        return Ok(secured(req.into_response(e.error_response())));
    }
    if let Some(s) = session {
        req.extensions_mut().insert(s);
    }
    let res = next.call(req).await?;
    Ok(secured(res.map_into_boxed_body()))
}

/// Asks the catalog again who the session's user is, when the last answer is older than
/// [`session::RECHECK`]; a removed or disabled user ends the session.
async fn recheck(ui: &Ui, api: &ApiState, mut s: Session, now: Instant) -> Option<Session> {
    if !s.stale(now) {
        return Some(s);
    }
    let user = s.principal.user.clone();
    let found = api
        .read(move |ops| {
            Ok(ops
                .users()?
                .into_iter()
                .find(|u| u.name == user && u.enabled)
                .and_then(|u| {
                    crate::model::Role::parse(&u.role).map(|role| Principal { user: u.name, role })
                }))
        })
        .await
        .ok()?;
    ui.sessions.rechecked(&s.key, found.clone(), now);
    let principal = found?;
    s.principal = principal;
    Some(s)
}

/// A state-changing request that says where it comes from must come from this node's pages.
fn check_origin(req: &HttpRequest) -> Result<(), UiError> {
    let Some(origin) = req.headers().get(header::ORIGIN) else {
        return Ok(());
    };
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default();
    let same = origin.to_str().ok().is_some_and(|o| {
        o.strip_prefix("http://")
            .or_else(|| o.strip_prefix("https://"))
            .is_some_and(|rest| rest.eq_ignore_ascii_case(host))
    });
    if same {
        Ok(())
    } else {
        Err(UiError::new(
            StatusCode::FORBIDDEN,
            "the request comes from another site (its Origin is not this node)",
        ))
    }
}

/// Whether a write carries the session's CSRF token.
enum Csrf {
    /// It does.
    Carried,
    /// It does not, or a wrong one.
    Missing,
    /// Its form is larger than the body limit: the token in it cannot be read.
    TooLarge,
}

/// Whether the request carries `csrf`: in the `X-CSRF-Token` header, or as the `csrf` field of
/// a form body (read here and put back for the handler).
async fn carries_csrf(req: &mut ServiceRequest, csrf: &str) -> Csrf {
    let verdict = |ok: bool| if ok { Csrf::Carried } else { Csrf::Missing };
    if let Some(token) = req.headers().get("x-csrf-token") {
        return verdict(token.to_str().is_ok_and(|t| same_secret(t, csrf)));
    }
    let is_form = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    if !is_form {
        return Csrf::Missing;
    }
    let body = match req.extract::<web::Bytes>().await {
        Ok(body) => body,
        Err(e) if e.as_response_error().status_code() == StatusCode::PAYLOAD_TOO_LARGE => {
            return Csrf::TooLarge;
        }
        Err(_) => return Csrf::Missing,
    };
    let ok = form_urlencoded::parse(&body).any(|(k, v)| k == "csrf" && same_secret(&v, csrf));
    req.set_payload(Payload::from(body));
    verdict(ok)
}

/// The headers every UI answer carries.
fn secured(mut res: ServiceResponse<BoxBody>) -> ServiceResponse<BoxBody> {
    let is_asset = res.request().path().starts_with("/ui/static/");
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    if !is_asset {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    res
}

/// `/ui/static/{name}`: an embedded file.
async fn static_file(name: web::Path<String>) -> HttpResponse {
    match assets::find(&name) {
        Some(a) => HttpResponse::Ok()
            .content_type(a.content_type)
            .insert_header((header::CACHE_CONTROL, "private, max-age=3600"))
            .body(a.body),
        None => HttpResponse::NotFound()
            .content_type("text/plain; charset=utf-8")
            .body("no such file"),
    }
}

impl FromRequest for Session {
    type Error = UiError;
    type Future = std::future::Ready<Result<Self, UiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        std::future::ready(req.extensions().get::<Session>().cloned().ok_or_else(|| {
            UiError::new(
                StatusCode::UNAUTHORIZED,
                "sign in first: this page needs a session",
            )
        }))
    }
}

/// A refusal or failure, answered as a small HTML page whose message `app.js` shows when htmx
/// asked (`.error-message`, read as text).
#[derive(Debug, Clone)]
pub struct UiError {
    /// The status.
    pub status: StatusCode,
    /// What went wrong, in words (escaped when written).
    pub message: String,
}

impl UiError {
    /// An error with a status and a message.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for UiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.status, self.message)
    }
}

impl ResponseError for UiError {
    fn status_code(&self) -> StatusCode {
        self.status
    }

    fn error_response(&self) -> HttpResponse {
        let page = view::ErrorPage {
            status: self.status.as_u16(),
            message: self.message.clone(),
        };
        HttpResponse::build(self.status)
            .content_type("text/html; charset=utf-8")
            .body(askama::Template::render(&page).unwrap_or_else(|_| "error".into()))
    }
}

impl From<ApiError> for UiError {
    fn from(e: ApiError) -> Self {
        UiError::new(e.status, e.body.error)
    }
}

impl From<OpError> for UiError {
    fn from(e: OpError) -> Self {
        ApiError::from(e).into()
    }
}

/// Renders a template as a page (or a fragment) with `status`.
pub(crate) fn render<T: askama::Template>(
    status: StatusCode,
    t: &T,
) -> Result<HttpResponse, UiError> {
    let body = t.render().map_err(|e| {
        UiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("rendering the page failed: {e}"),
        )
    })?;
    Ok(HttpResponse::build(status)
        .content_type("text/html; charset=utf-8")
        .body(body))
}

/// The page to go back to after an action: where the browser was (htmx says), else `fallback`.
/// Only a path on this node is followed.
pub(crate) fn back(req: &HttpRequest, fallback: &str) -> String {
    let current = req
        .headers()
        .get("hx-current-url")
        .or_else(|| req.headers().get(header::REFERER))
        .and_then(|v| v.to_str().ok());
    current
        .and_then(|url| {
            let rest = url
                .strip_prefix("http://")
                .or_else(|| url.strip_prefix("https://"))?;
            let path = &rest[rest.find('/')?..];
            path.starts_with("/ui/").then(|| path.to_string())
        })
        .unwrap_or_else(|| fallback.to_string())
}
