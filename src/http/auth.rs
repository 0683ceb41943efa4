//! Security of every request, in one middleware ([`guard`]) wrapped around the whole app:
//! the Host allowlist (DNS rebinding), credentials (a bearer token, or Basic user:password),
//! throttling of failed credentials (429), and the role a method needs (a viewer only reads).
//! What needs more than the method says — only admins create or change sql, command and url
//! jobs, processors and objects — is checked by the handler with [`Principal::require`].
//!
//! Failed credentials are counted per what they tried ([`FailureKey`]): a user name from one
//! client address, a token by its first characters, a malformed header by its address. Past
//! [`MAX_FAILURES`] within [`FAILURE_WINDOW`], a failing request of that key answers 429 with
//! `Retry-After` instead of 401; valid credentials are checked first and always pass, so no
//! client can lock others out by failing. (Guessing a password stays slow: each guess costs an
//! argon2 verification, and those run one at a time, [`password_principal`].) The
//! client address is the peer's, or — only from a peer listed in `http.trusted_proxies` — the
//! one its `X-Forwarded-For` names ([`client_address`]).
//!
//! Invariant: nothing but `/healthz` answers without credentials, and the web UI's paths
//! ([`is_ui_path`]) without an Authorization header: those need its session instead; a write
//! needs an operator; an API error response is always JSON; every answer carries
//! `X-Content-Type-Options: nosniff`; the throttle never refuses valid credentials.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{
    AUTHORIZATION, CONTENT_TYPE, HOST, HeaderMap, HeaderValue, X_CONTENT_TYPE_OPTIONS,
};
use actix_web::http::{Method, StatusCode};
use actix_web::middleware::Next;
use actix_web::{FromRequest, HttpMessage as _, HttpRequest, ResponseError as _, web};

use super::ApiState;
use super::error::{ApiError, for_status};
use crate::model::Role;
pub use crate::ops::accounts::Principal;

/// Failed credentials of one [`FailureKey`] within [`FAILURE_WINDOW`] before the next failure
/// of that key gets 429 (the default of `http.max_failed_logins`).
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

/// What failed credentials are counted against: what a client tried, not only where from,
/// so that one client's failures throttle neither another user nor a valid token.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum FailureKey {
    /// A user name (Basic auth, the UI's sign-in) from one client address.
    Password(IpAddr, String),
    /// A bearer token, by its first [`TOKEN_PREFIX`] characters.
    Token(String),
    /// An Authorization header that is neither Bearer nor Basic, from one client address.
    Malformed(IpAddr),
}

/// The characters of a refused token its failures are counted by (`jv_` and 8 hex digits).
pub const TOKEN_PREFIX: usize = 11;

impl FailureKey {
    /// The key of a refused token.
    pub fn token(token: &str) -> Self {
        FailureKey::Token(token.chars().take(TOKEN_PREFIX).collect())
    }
}

/// The client's address: the peer's, unless the peer is one of the `trusted` proxies and says
/// whom it forwards for in `X-Forwarded-For`; then the rightmost address there that is not a
/// trusted proxy (each proxy appends the address it was called from, so entries left of the
/// last untrusted one are the client's own claims). A header that does not parse is ignored.
pub fn client_address(peer: Option<SocketAddr>, headers: &HeaderMap, trusted: &[IpAddr]) -> IpAddr {
    let peer = peer.map(|a| a.ip()).unwrap_or(IpAddr::from([0, 0, 0, 0]));
    if !trusted.contains(&peer) {
        return peer;
    }
    let hops: Option<Vec<IpAddr>> = headers
        .get_all("x-forwarded-for")
        .map(|v| v.to_str().ok())
        .collect::<Option<Vec<&str>>>()
        .and_then(|values| {
            values
                .iter()
                .flat_map(|v| v.split(','))
                .map(|a| a.trim().parse::<IpAddr>().ok())
                .collect()
        });
    hops.unwrap_or_default()
        .into_iter()
        .rev()
        .find(|ip| !trusted.contains(ip))
        .unwrap_or(peer)
}

/// What the guard keeps between requests.
#[derive(Debug)]
pub struct AuthState {
    hosts: Vec<String>,
    /// Failures of one key within [`FAILURE_WINDOW`] before it gets 429
    /// (`http.max_failed_logins`).
    max_failures: usize,
    failures: Mutex<HashMap<FailureKey, VecDeque<Instant>>>,
    tokens: Mutex<HashMap<String, (Principal, Instant)>>,
    /// `http.trusted_proxies`, parsed at the first request (validated with the config).
    trusted: OnceLock<Vec<IpAddr>>,
    /// One argon2 verification at a time, in the order asked ([`password_principal`]).
    argon2: tokio::sync::Semaphore,
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
            trusted: OnceLock::new(),
            argon2: tokio::sync::Semaphore::new(1),
        }
    }

    /// Allows `n` failures of one key (an address and user, a token prefix) within
    /// [`FAILURE_WINDOW`] before 429.
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

    /// How long the next failure of `key` must wait, when `key` failed too often lately.
    pub fn throttled(&self, key: &FailureKey, now: Instant) -> Option<Duration> {
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let times = failures.get_mut(key)?;
        while times
            .front()
            .is_some_and(|t| now.duration_since(*t) >= FAILURE_WINDOW)
        {
            times.pop_front();
        }
        if times.len() < self.max_failures.max(1) {
            return None;
        }
        // The failure that has to leave the window before the key is under the limit again.
        let frees = times[times.len() - self.max_failures.max(1)];
        Some(FAILURE_WINDOW.saturating_sub(now.duration_since(frees)))
    }

    /// Counts a failure of `key`.
    pub fn failed(&self, key: FailureKey, now: Instant) {
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        if failures.len() > 10_000 {
            // Bounded memory under a spray of keys: forget the quiet ones.
            failures.retain(|_, t| {
                t.back()
                    .is_some_and(|t| now.duration_since(*t) < FAILURE_WINDOW)
            });
        }
        let times = failures.entry(key).or_default();
        times.push_back(now);
        if times.len() > self.max_failures.max(1) {
            times.pop_front();
        }
    }

    /// A refused request's answer: 429 with the wait when `key` is throttled (the failure is
    /// not counted again), else `refusal` with the failure counted.
    pub fn refuse(&self, key: FailureKey, now: Instant, refusal: ApiError) -> ApiError {
        if let Some(wait) = self.throttled(&key, now) {
            let mut e = ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                None,
                format!(
                    "{} failed logins with these credentials within {} s: wait \
                     and retry (valid credentials are never throttled)",
                    self.max_failures,
                    FAILURE_WINDOW.as_secs()
                ),
            );
            e.retry_after = Some(retry_after_secs(wait));
            return e;
        }
        self.failed(key, now);
        refusal
    }

    /// The client address of a request (see [`client_address`]), with the proxies `cfg`
    /// trusts.
    pub fn client(
        &self,
        peer: Option<SocketAddr>,
        headers: &HeaderMap,
        cfg: &crate::config::HttpSection,
    ) -> IpAddr {
        let trusted = self.trusted.get_or_init(|| {
            cfg.trusted_proxies
                .iter()
                .filter_map(|a| a.parse().ok())
                .collect()
        });
        client_address(peer, headers, trusted)
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
        Credentials::Basic(user, password) => password_principal(state, user, password).await,
    }
}

/// Who a user name and password stand for, if they match — for the API's Basic auth and the
/// UI's sign-in. The stored hash is read through the application layer, but the argon2
/// verification runs outside its lock and one at a time, in the order asked: a client that
/// keeps failing (its failures are verified too, since valid credentials must pass) costs at
/// most one core and never holds up another request's catalog reads; a password verified
/// within the last minute skips argon2 and the queue.
pub async fn password_principal(
    state: &ApiState,
    user: String,
    password: String,
) -> Result<Option<Principal>, ApiError> {
    let stored = state.read(move |ops| ops.stored_password(&user)).await?;
    if let Some(p) = stored.known(&password, Instant::now()) {
        return Ok(Some(p));
    }
    let _turn = state
        .auth
        .argon2
        .acquire()
        .await
        .map_err(|_| ApiError::unavailable("the node is stopping"))?;
    web::block(move || stored.check(&password, Instant::now()))
        .await
        .map_err(|_| ApiError::unavailable("the node is stopping"))
}

fn is_read(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// The middleware: see the module doc.
pub async fn guard(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let refuse =
        |req: ServiceRequest, e: ApiError| Ok(nosniff(req.into_response(e.error_response())));
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
        return Ok(nosniff(next.call(req).await?.map_into_boxed_body()));
    }
    if !PUBLIC.contains(&req.path()) {
        let now = Instant::now();
        let ip = state
            .auth
            .client(req.peer_addr(), req.headers(), &state.engine.config().http);
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
                let e = state.auth.refuse(FailureKey::Malformed(ip), now, e);
                return refuse(req, e);
            }
        };
        let key = match &creds {
            Credentials::Bearer(token) => FailureKey::token(token),
            Credentials::Basic(user, _) => FailureKey::Password(ip, user.clone()),
        };
        // Valid credentials first: the throttle only ever answers a failure.
        let principal = match authenticate(&state, creds, now).await {
            Ok(Some(p)) => p,
            Ok(None) => {
                let e = ApiError::unauthorized("invalid credentials");
                return refuse(req, state.auth.refuse(key, now, e));
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
    Ok(nosniff(json_errors(res)))
}

/// Tells browsers not to guess a response's type from its bytes (a JSON error that quotes a
/// request must never be read as HTML).
fn nosniff(mut res: ServiceResponse<BoxBody>) -> ServiceResponse<BoxBody> {
    res.headers_mut()
        .insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    res
}

/// `Retry-After` seconds for a wait: rounded up, at least 1.
pub fn retry_after_secs(wait: Duration) -> u64 {
    wait.as_millis().div_ceil(1000).max(1) as u64
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

    /// Issue 27, point 10: ten failed logins from one address locked every valid token out.
    #[test]
    fn failures_throttle_only_what_they_tried_and_say_how_long_to_wait() {
        let a = AuthState::new(None, &[]);
        let ip = IpAddr::from([127, 0, 0, 1]);
        let mallory = FailureKey::Password(ip, "admin".into());
        let t0 = Instant::now();
        for _ in 0..MAX_FAILURES {
            assert_eq!(a.throttled(&mallory, t0), None);
            a.failed(mallory.clone(), t0);
        }
        assert_eq!(a.throttled(&mallory, t0), Some(FAILURE_WINDOW));
        let later = t0 + Duration::from_millis(59_500);
        assert_eq!(retry_after_secs(a.throttled(&mallory, later).unwrap()), 1);
        // Another user from the same address, another address, a token: not throttled.
        for other in [
            FailureKey::Password(ip, "ops".into()),
            FailureKey::Password(IpAddr::from([127, 0, 0, 2]), "admin".into()),
            FailureKey::token("jv_0123456789abcdef"),
            FailureKey::Malformed(ip),
        ] {
            assert_eq!(a.throttled(&other, t0), None, "{other:?}");
        }
        // A refusal while throttled is 429 and is not counted again: a minute on, it is over.
        let e = a.refuse(mallory.clone(), t0, ApiError::unauthorized("no"));
        assert_eq!(e.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(e.retry_after, Some(FAILURE_WINDOW.as_secs()));
        assert_eq!(a.throttled(&mallory, t0 + FAILURE_WINDOW), None);
        // Tokens are counted by their prefix.
        assert_eq!(
            FailureKey::token("jv_0123456789abcdef"),
            FailureKey::token("jv_01234567ffffffff")
        );
    }

    #[test]
    fn the_client_address_is_the_peers_unless_a_trusted_proxy_forwards_for_another() {
        let peer = |ip: [u8; 4]| Some(SocketAddr::from((ip, 4000)));
        let mut h = HeaderMap::new();
        let xff = actix_web::http::header::HeaderName::from_static("x-forwarded-for");
        h.insert(xff.clone(), HeaderValue::from_static("6.6.6.6, 10.0.0.7"));
        let proxy = IpAddr::from([127, 0, 0, 1]);
        // Not configured: the header is ignored, whoever sends it.
        assert_eq!(client_address(peer([127, 0, 0, 1]), &h, &[]), proxy);
        // From the trusted proxy: the rightmost hop it did not add itself.
        assert_eq!(
            client_address(peer([127, 0, 0, 1]), &h, &[proxy]),
            IpAddr::from([10, 0, 0, 7])
        );
        // From another peer: the header is the client's own claim, ignored.
        assert_eq!(
            client_address(peer([10, 9, 9, 9]), &h, &[proxy]),
            IpAddr::from([10, 9, 9, 9])
        );
        // Two trusted proxies in a row are skipped; garbage falls back to the peer.
        let inner = IpAddr::from([10, 0, 0, 7]);
        assert_eq!(
            client_address(peer([127, 0, 0, 1]), &h, &[proxy, inner]),
            IpAddr::from([6, 6, 6, 6])
        );
        h.insert(xff, HeaderValue::from_static("not-an-address"));
        assert_eq!(client_address(peer([127, 0, 0, 1]), &h, &[proxy]), proxy);
    }
}
