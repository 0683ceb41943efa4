//! Security of every request, in one middleware ([`guard`]) wrapped around the whole app:
//! the Host allowlist (DNS rebinding), credentials (a bearer token, or Basic user:password),
//! throttling of failed logins per client address (429), and the role a method needs (a
//! viewer only reads). What needs more than the method says — only admins create or change
//! sql, command and url jobs, processors and objects — is checked by the handler with
//! [`Principal::require`].
//!
//! Invariant: nothing but `/healthz` answers without credentials, and the web UI's paths
//! ([`is_ui_path`]) without an Authorization header: those need its session instead; a write
//! needs an operator; an API error response is always JSON.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{AUTHORIZATION, CONTENT_TYPE, HOST};
use actix_web::http::{Method, StatusCode};
use actix_web::middleware::Next;
use actix_web::{FromRequest, HttpMessage as _, HttpRequest, ResponseError as _, web};

use super::ApiState;
use super::error::{ApiError, for_status};
use crate::model::Role;
pub use crate::ops::accounts::Principal;

/// Failed logins from one address within [`FAILURE_WINDOW`] before it gets 429 (the default
/// of `http.max_failed_logins`).
pub const MAX_FAILURES: usize = 10;
/// The window failed logins are counted in.
pub const FAILURE_WINDOW: Duration = Duration::from_secs(60);
/// How long a checked token is trusted without asking the catalog again (a revoked token
/// stops working within this).
const TOKEN_CACHE: Duration = Duration::from_secs(5);

/// Paths served without credentials.
const PUBLIC: &[&str] = &["/healthz"];

/// The web UI's paths (`/`, `/ui` and below). Browsers sign in there with a password and then
/// carry a session cookie, not an Authorization header: this guard checks their Host and
/// leaves the rest to the UI's own guard (`crate::ui::guard`: a session on every route but the
/// login page, its stylesheet and the redirect at `/`; a CSRF token on every write). Where no
/// UI is mounted they are 404s.
pub fn is_ui_path(path: &str) -> bool {
    path == "/" || path == "/ui" || path.starts_with("/ui/")
}

/// What the guard keeps between requests.
#[derive(Debug)]
pub struct AuthState {
    hosts: Vec<String>,
    max_failures: usize,
    failures: Mutex<HashMap<IpAddr, VecDeque<Instant>>>,
    tokens: Mutex<HashMap<String, (Principal, Instant)>>,
}

impl AuthState {
    /// Allows the loopback names, the bound address, and `extra` host names.
    pub fn new(bound: Option<IpAddr>, extra: &[String]) -> Self {
        let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "[::1]", "::1"]
            .iter()
            .map(|h| h.to_string())
            .collect();
        if let Some(ip) = bound.filter(|ip| !ip.is_unspecified()) {
            hosts.push(match ip {
                IpAddr::V4(v4) => v4.to_string(),
                IpAddr::V6(v6) => format!("[{v6}]"),
            });
        }
        hosts.extend(extra.iter().map(|h| h.to_ascii_lowercase()));
        Self {
            hosts,
            max_failures: MAX_FAILURES,
            failures: Mutex::default(),
            tokens: Mutex::default(),
        }
    }

    /// Allows `n` failed logins from one address within [`FAILURE_WINDOW`] before 429.
    pub fn max_failures(self, n: usize) -> Self {
        Self {
            max_failures: n,
            ..self
        }
    }

    fn host_allowed(&self, host: &str) -> bool {
        let host = host.to_ascii_lowercase();
        let name = match host.rsplit_once(':') {
            // `[::1]:7878`, `localhost:7878`; a bare `[::1]` has no port after its bracket.
            Some((name, port))
                if port.chars().all(|c| c.is_ascii_digit())
                    && (!name.starts_with('[') || name.ends_with(']')) =>
            {
                name.to_string()
            }
            _ => host,
        };
        self.hosts.contains(&name)
    }

    /// Whether `ip` failed too often lately.
    pub fn throttled(&self, ip: IpAddr, now: Instant) -> bool {
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        match failures.get_mut(&ip) {
            Some(times) => {
                while times
                    .front()
                    .is_some_and(|t| now.duration_since(*t) > FAILURE_WINDOW)
                {
                    times.pop_front();
                }
                times.len() >= self.max_failures
            }
            None => false,
        }
    }

    /// Counts a failed login from `ip`.
    pub fn failed(&self, ip: IpAddr, now: Instant) {
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        if failures.len() > 10_000 {
            // Bounded memory under a spray of addresses: forget the quiet ones.
            failures.retain(|_, t| {
                t.back()
                    .is_some_and(|t| now.duration_since(*t) < FAILURE_WINDOW)
            });
        }
        failures.entry(ip).or_default().push_back(now);
    }

    fn cached(&self, hash: &str, now: Instant) -> Option<Principal> {
        let tokens = self.tokens.lock().unwrap_or_else(|p| p.into_inner());
        tokens
            .get(hash)
            .filter(|(_, at)| now.duration_since(*at) < TOKEN_CACHE)
            .map(|(p, _)| p.clone())
    }

    fn remember(&self, hash: String, p: Principal, now: Instant) {
        let mut tokens = self.tokens.lock().unwrap_or_else(|p| p.into_inner());
        if tokens.len() > 1000 {
            tokens.retain(|_, (_, at)| now.duration_since(*at) < TOKEN_CACHE);
        }
        tokens.insert(hash, (p, now));
    }
}

impl Principal {
    /// Refuses with 403 unless the principal has at least `role`, saying why.
    pub fn require(&self, role: Role, why: &str) -> Result<(), ApiError> {
        if self.may(role) {
            Ok(())
        } else {
            Err(ApiError::forbidden(format!(
                "user `{}` is {}: {why} needs the {role} role",
                self.user, self.role
            )))
        }
    }
}

impl FromRequest for Principal {
    type Error = ApiError;
    type Future = std::future::Ready<Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut actix_web::dev::Payload) -> Self::Future {
        std::future::ready(
            req.extensions()
                .get::<Principal>()
                .cloned()
                .ok_or_else(|| ApiError::unauthorized("credentials are required")),
        )
    }
}

enum Credentials {
    Bearer(String),
    Basic(String, String),
}

fn credentials(req: &ServiceRequest) -> Result<Option<Credentials>, ApiError> {
    let Some(value) = req.headers().get(AUTHORIZATION) else {
        return Ok(None);
    };
    let bad = || {
        ApiError::unauthorized(
            "the Authorization header must be `Bearer <token>` or `Basic <base64 user:password>`",
        )
    };
    let text = value.to_str().map_err(|_| bad())?;
    let (scheme, rest) = text.split_once(' ').ok_or_else(bad)?;
    match scheme.to_ascii_lowercase().as_str() {
        "bearer" => Ok(Some(Credentials::Bearer(rest.trim().to_string()))),
        "basic" => {
            use base64::Engine as _;
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(rest.trim())
                .map_err(|_| bad())?;
            let decoded = String::from_utf8(decoded).map_err(|_| bad())?;
            let (user, password) = decoded.split_once(':').ok_or_else(bad)?;
            Ok(Some(Credentials::Basic(
                user.to_string(),
                password.to_string(),
            )))
        }
        _ => Err(bad()),
    }
}

/// Who the credentials stand for, if anyone.
async fn authenticate(
    state: &ApiState,
    creds: Credentials,
    now: Instant,
) -> Result<Option<Principal>, ApiError> {
    match creds {
        Credentials::Bearer(token) => {
            let hash = crate::ops::accounts::token_hash(&token);
            if let Some(p) = state.auth.cached(&hash, now) {
                return Ok(Some(p));
            }
            let found = state
                .read(move |ops| ops.principal_of_token(&token))
                .await?;
            if let Some(p) = &found {
                state.auth.remember(hash, p.clone(), now);
            }
            Ok(found)
        }
        Credentials::Basic(user, password) => {
            state
                .read(move |ops| ops.principal_of_password(&user, &password))
                .await
        }
    }
}

fn is_read(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// The middleware: see the module doc.
pub async fn guard(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let refuse = |req: ServiceRequest, e: ApiError| Ok(req.into_response(e.error_response()));
    let Some(state) = req.app_data::<web::Data<ApiState>>().cloned() else {
        return refuse(req, ApiError::unavailable("the API is not set up"));
    };
    if let Some(host) = req.headers().get(HOST) {
        let allowed = host.to_str().is_ok_and(|h| state.auth.host_allowed(h));
        if !allowed {
            let e = ApiError::new(
                StatusCode::MISDIRECTED_REQUEST,
                Some("Host"),
                "this node does not answer to that host name (add it to http.allowed_hosts)",
            );
            return refuse(req, e);
        }
    }
    if is_ui_path(req.path()) {
        return Ok(next.call(req).await?.map_into_boxed_body());
    }
    if !PUBLIC.contains(&req.path()) {
        let now = Instant::now();
        let ip = req
            .peer_addr()
            .map(|a| a.ip())
            .unwrap_or(IpAddr::from([0, 0, 0, 0]));
        if state.auth.throttled(ip, now) {
            let mut e = ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                None,
                format!(
                    "more than {} failed logins from this address within {} s; \
                     wait and retry",
                    state.auth.max_failures,
                    FAILURE_WINDOW.as_secs()
                ),
            );
            e.retry_after = Some(FAILURE_WINDOW.as_secs());
            return refuse(req, e);
        }
        let creds = match credentials(&req) {
            Ok(Some(c)) => c,
            Ok(None) => {
                let e = ApiError::unauthorized(
                    "credentials are required: Authorization: Bearer <token> (jobvisor tokens \
                     create)",
                );
                return refuse(req, e);
            }
            Err(e) => {
                state.auth.failed(ip, now);
                return refuse(req, e);
            }
        };
        let principal = match authenticate(&state, creds, now).await {
            Ok(Some(p)) => p,
            Ok(None) => {
                state.auth.failed(ip, now);
                return refuse(req, ApiError::unauthorized("invalid credentials"));
            }
            Err(e) => return refuse(req, e),
        };
        // JSON-RPC checks each method's role itself.
        if !is_read(req.method())
            && req.path() != "/rpc"
            && let Err(e) = principal.require(Role::Operator, "a change")
        {
            return refuse(req, e);
        }
        req.extensions_mut().insert(principal);
    }
    let res = next.call(req).await?;
    Ok(json_errors(res))
}

/// Gives an error response that has no JSON body (the router's 404 and 405, an extractor's
/// refusal) the API's JSON error body.
fn json_errors<B: MessageBody + 'static>(res: ServiceResponse<B>) -> ServiceResponse<BoxBody> {
    let status = res.status();
    let is_json = res
        .headers()
        .get(CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if (status.is_client_error() || status.is_server_error()) && !is_json {
        let (req, _) = res.into_parts();
        return ServiceResponse::new(req, for_status(status).error_response());
    }
    res.map_into_boxed_body()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_allowed_by_name_with_or_without_port() {
        let a = AuthState::new(Some(IpAddr::from([10, 1, 2, 3])), &["jobs.example".into()]);
        for ok in [
            "localhost",
            "localhost:7878",
            "127.0.0.1:1",
            "[::1]:7878",
            "[::1]",
            "10.1.2.3:7878",
            "JOBS.example:80",
        ] {
            assert!(a.host_allowed(ok), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:7878",
            "127.0.0.2",
            "localhost.evil:1",
        ] {
            assert!(!a.host_allowed(bad), "{bad}");
        }
    }

    #[test]
    fn the_eleventh_failure_within_a_minute_is_throttled() {
        let a = AuthState::new(None, &[]);
        let ip = IpAddr::from([127, 0, 0, 1]);
        let t0 = Instant::now();
        for _ in 0..MAX_FAILURES {
            assert!(!a.throttled(ip, t0));
            a.failed(ip, t0);
        }
        assert!(a.throttled(ip, t0));
        assert!(!a.throttled(IpAddr::from([127, 0, 0, 2]), t0));
        assert!(!a.throttled(ip, t0 + FAILURE_WINDOW + Duration::from_secs(1)));
    }
}
