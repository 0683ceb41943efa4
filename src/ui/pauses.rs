//! The Pauses page: the pauses in force (a processor, a job group or a job, on one node or
//! the fleet) with who paused, when and why, a form to pause, and a resume button on each.
//! Operators change them (the guard refuses a viewer's post); `ops::pauses` holds the rules.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use askama::Template;
use serde::Deserialize;

use super::jobs::{chrome, fmt};
use super::session::Session;
use super::view::Chrome;
use super::{Ui, UiError, render, see_other};
use crate::catalog::pause::PauseScope;
use crate::http::ApiState;
use crate::ops::pauses::parse_scope;

/// A pause as the page lists it.
pub(super) struct PauseRow {
    scope: String,
    name: String,
    /// `fleet` or the node's name.
    node: String,
    fleet: bool,
    by: String,
    at: String,
    reason: String,
}

/// The Pauses page.
#[derive(Template)]
#[template(path = "pauses.html")]
pub(super) struct PausesPage {
    chrome: Chrome,
    rows: Vec<PauseRow>,
    scopes: [&'static str; 3],
}

/// `GET /ui/pauses`.
pub(super) async fn list(
    req: HttpRequest,
    api: web::Data<ApiState>,
    ui: web::Data<Ui>,
    session: Session,
) -> Result<HttpResponse, UiError> {
    let pauses = api.read(|ops| ops.pauses()).await?;
    let fmt = fmt(&api).await;
    let rows = pauses
        .into_iter()
        .map(|p| PauseRow {
            scope: p.scope.as_str().to_string(),
            name: p.name,
            fleet: p.node.is_none(),
            node: p.node.unwrap_or_else(|| "fleet".to_string()),
            by: p.paused_by,
            at: fmt.time(Some(p.paused_at.ms())),
            reason: p.reason.unwrap_or_default(),
        })
        .collect();
    render(
        StatusCode::OK,
        &PausesPage {
            chrome: chrome(&req, &ui, &api, &session, "Pauses"),
            rows,
            scopes: ["processor", "group", "job"],
        },
    )
}

/// The pause and resume forms: `fleet` is a checkbox (present when ticked).
#[derive(Debug, Deserialize)]
pub(super) struct PauseForm {
    scope: String,
    name: String,
    #[serde(default)]
    fleet: Option<String>,
    #[serde(default)]
    reason: String,
}

impl PauseForm {
    /// What the form names: the scope (parsed), the name, and whether fleet-wide.
    fn target(&self) -> Result<(PauseScope, String, bool), UiError> {
        let scope = parse_scope(&self.scope, "scope")?;
        Ok((scope, self.name.trim().to_string(), self.fleet.is_some()))
    }
}

/// `POST /ui/pauses`: pauses what the form names, here or fleet-wide.
pub(super) async fn add(
    api: web::Data<ApiState>,
    ui: web::Data<Ui>,
    session: Session,
    form: web::Form<PauseForm>,
) -> Result<HttpResponse, UiError> {
    let f = form.into_inner();
    let (scope, name, fleet) = f.target()?;
    let reason = Some(f.reason.trim().to_string()).filter(|r| !r.is_empty());
    let view = api
        .write(&session.principal.user, move |ops| {
            let at = ops.pause_where(fleet);
            Ok(ops.pause(scope, &name, &at, reason.as_deref())?)
        })
        .await?;
    let place = view
        .node
        .map_or("on every node".to_string(), |n| format!("on node `{n}`"));
    let note = format!(
        "{} `{}` paused {place}: nothing new of it is claimed",
        view.scope.as_str(),
        view.name
    );
    ui.sessions.set_flash(&session.key, note);
    Ok(see_other("/ui/pauses"))
}

/// `POST /ui/pauses/resume`: ends the pause the form names.
pub(super) async fn resume(
    api: web::Data<ApiState>,
    ui: web::Data<Ui>,
    session: Session,
    form: web::Form<PauseForm>,
) -> Result<HttpResponse, UiError> {
    let (scope, name, fleet) = form.target()?;
    let note = format!("{} `{name}` resumed", scope.as_str());
    api.write(&session.principal.user, move |ops| {
        let at = ops.pause_where(fleet);
        Ok(ops.resume(scope, &name, &at)?)
    })
    .await?;
    ui.sessions.set_flash(&session.key, note);
    Ok(see_other("/ui/pauses"))
}
