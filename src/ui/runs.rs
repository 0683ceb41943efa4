//! The Runs pages: the live list (filtered by status, job, node and time, paged by run id),
//! one run in full (params, result, error, output, attempts, timings), and cancel and retry,
//! of one run or of the runs ticked in the list.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use askama::Template;
use serde::Deserialize;

use super::jobs::{chrome, fmt};
use super::session::Session;
use super::view::{Chrome, duration, pretty, query};
use super::{Ui, UiError, back, render, see_other};
use crate::http::ApiState;
use crate::model::RunStatus;
use crate::ops::runs::{Cancelled, RunQuery};

/// Runs per page.
const PAGE: i64 = 50;
/// The most runs one bulk action takes.
const MAX_BULK: usize = 500;
/// How many run ids a page filtered by status or node (and not by job, whose index bounds
/// it) reads at most: a status few runs have, or none, would otherwise read the whole history
/// (160 ms for a million runs). The page then offers the next window.
pub const WINDOW: i64 = 100_000;

/// The list's query string.
#[derive(Debug, Clone, Default, Deserialize)]
pub(super) struct ListQuery {
    #[serde(default)]
    status: String,
    #[serde(default)]
    job: String,
    #[serde(default)]
    node: String,
    #[serde(default)]
    since: String,
    #[serde(default)]
    before: Option<i64>,
}

impl ListQuery {
    fn url(&self, before: Option<i64>) -> String {
        let before = before.map(|b| b.to_string()).unwrap_or_default();
        format!(
            "/ui/runs{}",
            query(&[
                ("status", &self.status),
                ("job", &self.job),
                ("node", &self.node),
                ("since", &self.since),
                ("before", &before),
            ])
        )
    }
}

/// One row of the runs table.
pub(super) struct RunRow {
    id: i64,
    job: String,
    status: String,
    attempt: i64,
    created: String,
    started: String,
    took: String,
    node: String,
    error: String,
    active: bool,
    ended_badly: bool,
}

/// The Runs page.
#[derive(Template)]
#[template(path = "runs.html")]
pub(super) struct RunsPage {
    chrome: Chrome,
    q: ListQuery,
    rows: Vec<RunRow>,
    statuses: Vec<&'static str>,
    spans: Vec<(&'static str, &'static str)>,
    self_url: String,
    older: Option<String>,
    newest: Option<String>,
    problem: Option<String>,
    searched: Option<String>,
}

/// `GET /ui/runs`.
pub(super) async fn list(
    req: HttpRequest,
    api: web::Data<ApiState>,
    ui: web::Data<Ui>,
    session: Session,
    q: web::Query<ListQuery>,
) -> Result<HttpResponse, UiError> {
    let q = q.into_inner();
    let now = crate::catalog::now_ms();
    let opt = |s: &str| (!s.trim().is_empty()).then(|| s.trim().to_string());
    let mut problem = None;
    let status = match q.status.as_str() {
        "" => None,
        s => RunStatus::parse(s).or_else(|| {
            problem = Some(format!("status: expected one of {}", RunStatus::expected()));
            None
        }),
    };
    let since = match opt(&q.since) {
        None => None,
        Some(s) => match crate::ops::view::parse_instant("since", &s, now) {
            Ok(t) => Some(t),
            Err(e) => {
                problem = Some(e.to_string());
                None
            }
        },
    };
    let windowed = (status.is_some() || opt(&q.node).is_some()) && opt(&q.job).is_none();
    let mut query_ = RunQuery {
        job: opt(&q.job),
        status,
        node: opt(&q.node),
        since,
        until: None,
        before: q.before,
        after: None,
        limit: PAGE,
    };
    let read = api
        .read(move |ops| {
            let (newest, oldest) = ops.run_ids()?;
            let window = windowed.then(|| {
                let top = query_.before.unwrap_or(newest + 1);
                (top - WINDOW, top)
            });
            query_.after = window.map(|(low, _)| low - 1);
            Ok((ops.runs(&query_)?, window, oldest))
        })
        .await;
    let (runs, window, oldest) = match read {
        Ok(found) => found,
        Err(e) => {
            problem = Some(e.body.error);
            (Vec::new(), None, 0)
        }
    };
    let fmt = fmt(&api).await;
    let rows: Vec<RunRow> = runs
        .iter()
        .map(|r| RunRow {
            id: r.id,
            job: r.job.clone(),
            status: r.status.clone(),
            attempt: r.attempt,
            created: fmt.time(Some(r.created_at.ms())),
            started: fmt.time(r.started_at.map(|t| t.ms())),
            took: duration(r.elapsed_ms),
            node: r.node.clone().unwrap_or_default(),
            error: r
                .error
                .as_deref()
                .map(|e| e.chars().take(120).collect())
                .unwrap_or_default(),
            active: matches!(r.status.as_str(), "queued" | "claimed" | "running"),
            ended_badly: matches!(
                r.status.as_str(),
                "failed" | "timed_out" | "dead" | "cancelled" | "skipped"
            ),
        })
        .collect();
    // A full page continues below its last run; a window that held fewer continues below
    // the window, saying which runs it looked through.
    let mut searched = None;
    let older = if rows.len() as i64 == PAGE {
        rows.last().map(|r| q.url(Some(r.id)))
    } else {
        match window {
            Some((low, top)) if low > oldest => {
                searched = Some(format!(
                    "Looked through runs {}–{} for these; older runs are on the next page.",
                    low.max(oldest),
                    top - 1
                ));
                Some(q.url(Some(low)))
            }
            _ => None,
        }
    };
    render(
        StatusCode::OK,
        &RunsPage {
            chrome: chrome(&req, &ui, &api, &session, "Runs"),
            statuses: RunStatus::ALL.iter().map(|s| s.as_str()).collect(),
            spans: vec![
                ("", "any time"),
                ("15m", "last 15 min"),
                ("1h", "last hour"),
                ("24h", "last day"),
                ("7d", "last week"),
            ],
            self_url: q.url(q.before),
            newest: q.before.is_some().then(|| q.url(None)),
            older,
            rows,
            problem,
            searched,
            q,
        },
    )
}

/// The run page.
#[derive(Template)]
#[template(path = "run.html")]
pub(super) struct RunPage {
    chrome: Chrome,
    id: i64,
    job: String,
    status: String,
    attempt: i64,
    retry_of: Option<i64>,
    parent: Option<i64>,
    node: String,
    scheduled: String,
    created: String,
    started: String,
    finished: String,
    took: String,
    params: String,
    result: String,
    error: String,
    log: String,
    cancel_requested: bool,
    active: bool,
    retryable: bool,
}

/// `GET /ui/runs/{id}`.
pub(super) async fn detail(
    req: HttpRequest,
    api: web::Data<ApiState>,
    ui: web::Data<Ui>,
    session: Session,
    id: web::Path<i64>,
) -> Result<HttpResponse, UiError> {
    let id = id.into_inner();
    let r = api.read(move |ops| ops.run(id)).await?;
    let fmt = fmt(&api).await;
    render(
        StatusCode::OK,
        &RunPage {
            chrome: chrome(&req, &ui, &api, &session, "Runs"),
            id: r.id,
            job: r.job.clone(),
            status: r.status.clone(),
            attempt: r.attempt,
            retry_of: r.retry_of,
            parent: r.parent,
            node: r.node.clone().unwrap_or_default(),
            scheduled: fmt.time(r.scheduled_for.map(|t| t.ms())),
            created: fmt.time(Some(r.created_at.ms())),
            started: fmt.time(r.started_at.map(|t| t.ms())),
            finished: fmt.time(r.finished_at.map(|t| t.ms())),
            took: duration(r.elapsed_ms),
            params: pretty(r.params.as_ref()),
            result: pretty(r.result.as_ref()),
            error: r.error.clone().unwrap_or_default(),
            log: r.log.clone().unwrap_or_default(),
            cancel_requested: r.cancel_requested,
            active: matches!(r.status.as_str(), "queued" | "claimed" | "running"),
            retryable: matches!(
                r.status.as_str(),
                "failed" | "timed_out" | "dead" | "cancelled" | "skipped"
            ),
        },
    )
}

fn cancel_note(id: i64, c: Cancelled) -> String {
    match c {
        Cancelled::Cancelled => format!("run {id} cancelled"),
        Cancelled::Requested => format!("run {id}: its node was asked to cancel it"),
    }
}

/// `POST /ui/runs/{id}/cancel`.
pub(super) async fn cancel(
    req: HttpRequest,
    api: web::Data<ApiState>,
    ui: web::Data<Ui>,
    session: Session,
    id: web::Path<i64>,
) -> Result<HttpResponse, UiError> {
    let id = id.into_inner();
    let c = api
        .write(&session.principal.user, move |ops| Ok(ops.cancel_run(id)?))
        .await?;
    ui.sessions.set_flash(&session.key, cancel_note(id, c));
    Ok(see_other(&back(&req, &format!("/ui/runs/{id}"))))
}

/// `POST /ui/runs/{id}/retry`: the new attempt's page.
pub(super) async fn retry(
    api: web::Data<ApiState>,
    ui: web::Data<Ui>,
    session: Session,
    id: web::Path<i64>,
) -> Result<HttpResponse, UiError> {
    let id = id.into_inner();
    let new = api
        .write(&session.principal.user, move |ops| Ok(ops.retry_run(id)?))
        .await?;
    ui.sessions
        .set_flash(&session.key, format!("run {id} retried as run {new}"));
    Ok(see_other(&format!("/ui/runs/{new}")))
}

/// `POST /ui/runs/bulk`: `action` (cancel or retry) on every ticked `id`, each on its own: one
/// that cannot be cancelled or retried is named, and the others go on.
pub(super) async fn bulk(
    req: HttpRequest,
    api: web::Data<ApiState>,
    ui: web::Data<Ui>,
    session: Session,
    form: web::Form<Vec<(String, String)>>,
) -> Result<HttpResponse, UiError> {
    let form = form.into_inner();
    let action = form
        .iter()
        .find(|(k, _)| k == "action")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    let ids: Vec<i64> = form
        .iter()
        .filter(|(k, _)| k == "id")
        .filter_map(|(_, v)| v.parse().ok())
        .collect();
    if ids.is_empty() {
        return Err(UiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "id: tick at least one run",
        ));
    }
    if ids.len() > MAX_BULK {
        return Err(UiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("id: at most {MAX_BULK} runs at once, got {}", ids.len()),
        ));
    }
    if action != "cancel" && action != "retry" {
        return Err(UiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("action: expected cancel or retry, got `{action}`"),
        ));
    }
    let n = ids.len();
    let word = if action == "cancel" {
        "cancelled"
    } else {
        "retried"
    };
    let (done, refused) = api
        .write(&session.principal.user, move |ops| {
            let mut done = 0;
            let mut refused = Vec::new();
            for id in ids {
                let outcome = if action == "cancel" {
                    ops.cancel_run(id).map(|_| ())
                } else {
                    ops.retry_run(id).map(|_| ())
                };
                match outcome {
                    Ok(()) => done += 1,
                    Err(e) => refused.push(format!("run {id}: {e}")),
                }
            }
            Ok((done, refused))
        })
        .await?;
    let mut note = format!("{done} of {n} runs {word}");
    if !refused.is_empty() {
        note.push_str(&format!("; {}", refused.join("; ")));
    }
    ui.sessions.set_flash(&session.key, note);
    Ok(see_other(&back(&req, "/ui/runs")))
}
