//! Signing in and out. The login form carries a token that must equal its cookie (a
//! double-submit CSRF token: there is no session yet to hold one); a password is checked by
//! the application layer (argon2id, the same cost for unknown users), and failures count
//! toward the API's throttle of that user name from that address (429 with `Retry-After`
//! after ten a minute; the right password always signs in).

use std::time::Instant;

use actix_web::http::StatusCode;
use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;

use super::session::{
    COOKIE, LOGIN_COOKIE, Session, cookie_value, random_token, same_secret, set_cookie,
};
use super::view::LoginPage;
use super::{Ui, UiError, over_tls, render};
use crate::http::ApiState;
use crate::http::auth::{FailureKey, password_principal};
use crate::http::error::ApiError;

/// The login form's fields.
#[derive(Debug, Deserialize)]
pub(super) struct LoginForm {
    csrf: String,
    user: String,
    password: String,
}

fn login_page(
    req: &HttpRequest,
    status: StatusCode,
    user: String,
    error: Option<String>,
) -> Result<HttpResponse, UiError> {
    let csrf = random_token().ok_or_else(|| {
        UiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the system's random source failed",
        )
    })?;
    let mut res = render(
        status,
        &LoginPage {
            csrf: csrf.clone(),
            user,
            error,
        },
    )?;
    let cookie = set_cookie(LOGIN_COOKIE, &csrf, "/ui/login", over_tls(req), None);
    if let Ok(v) = header::HeaderValue::from_str(&cookie) {
        res.headers_mut().append(header::SET_COOKIE, v);
    }
    Ok(res)
}

/// `GET /ui/login`.
pub(super) async fn form(req: HttpRequest) -> Result<HttpResponse, UiError> {
    login_page(&req, StatusCode::OK, String::new(), None)
}

/// `POST /ui/login`: a session cookie and the overview, or the form again saying why not.
pub(super) async fn submit(
    req: HttpRequest,
    api: web::Data<ApiState>,
    ui: web::Data<Ui>,
    form: web::Form<LoginForm>,
) -> Result<HttpResponse, UiError> {
    let form = form.into_inner();
    let cookie = req
        .headers()
        .get(header::COOKIE)
        .and_then(|v| v.to_str().ok())
        .and_then(|c| cookie_value(c, LOGIN_COOKIE))
        .unwrap_or_default();
    if cookie.is_empty() || !same_secret(cookie, &form.csrf) {
        return login_page(
            &req,
            StatusCode::FORBIDDEN,
            form.user,
            Some("the form expired or came from another page: sign in again".into()),
        );
    }
    let now = Instant::now();
    let ip = api
        .auth
        .client(req.peer_addr(), req.headers(), &api.engine.config().http);
    let found = password_principal(&api, form.user.clone(), form.password).await?;
    let Some(principal) = found else {
        let key = FailureKey::Password(ip, form.user.clone());
        let refusal = ApiError::unauthorized("unknown user or wrong password");
        let e = api.auth.refuse(key, now, refusal);
        let throttled = e.status == StatusCode::TOO_MANY_REQUESTS;
        let why = if throttled {
            "too many failed sign-ins with this user name: wait a minute"
        } else {
            "unknown user or wrong password"
        };
        let mut page = login_page(&req, e.status, form.user, Some(why.into()))?;
        if let Some(secs) = e.retry_after.filter(|_| throttled) {
            page.headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from(secs));
        }
        return Ok(page);
    };
    let value = ui.sessions.start(principal, now).ok_or_else(|| {
        UiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the system's random source failed",
        )
    })?;
    let tls = over_tls(&req);
    Ok(HttpResponse::SeeOther()
        .insert_header((header::LOCATION, "/ui/"))
        .append_header((
            header::SET_COOKIE,
            set_cookie(COOKIE, &value, "/ui", tls, None),
        ))
        .append_header((
            header::SET_COOKIE,
            set_cookie(LOGIN_COOKIE, "", "/ui/login", tls, Some(0)),
        ))
        .finish())
}

/// `POST /ui/logout`: ends the session and clears its cookie.
pub(super) async fn logout(req: HttpRequest, ui: web::Data<Ui>, session: Session) -> HttpResponse {
    ui.sessions.end(&session.key);
    HttpResponse::SeeOther()
        .insert_header((header::LOCATION, "/ui/login"))
        .append_header((
            header::SET_COOKIE,
            set_cookie(COOKIE, "", "/ui", over_tls(&req), Some(0)),
        ))
        .finish()
}
