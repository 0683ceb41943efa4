//! The Runs pages: the live list (filtered by status, job, node and time, paged by run id),
//! one run in full (params, result, error, output, attempts, timings), and cancel and retry,
//! of one run or of the runs ticked in the list.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use askama::Template;
use serde::Deserialize;

use super::jobs::{chrome, fmt};
use super::session::Session;
use super::view::{Chrome, Fmt, duration, pretty, query};
use super::{Ui, UiError, back, render, see_other};
use crate::http::ApiState;
use crate::model::RunStatus;
use crate::ops::runs::{Cancelled, RunQuery, TreeView};

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
    /// The page just above this run id (the "Newer" link of a page whose newest run it is).
    #[serde(default)]
    after: Option<i64>,
}

/// Where a page of runs starts: the newest, below a run id, or just above one.
#[derive(Debug, Clone, Copy)]
enum Anchor {
    Newest,
    Before(i64),
    After(i64),
}

impl ListQuery {
    fn anchor(&self) -> Anchor {
        match (self.after, self.before) {
            (Some(a), _) => Anchor::After(a),
            (None, Some(b)) => Anchor::Before(b),
            (None, None) => Anchor::Newest,
        }
    }

    fn url(&self, at: Anchor) -> String {
        let (before, after) = match at {
            Anchor::Newest => (String::new(), String::new()),
            Anchor::Before(b) => (b.to_string(), String::new()),
            Anchor::After(a) => (String::new(), a.to_string()),
        };
        format!(
            "/ui/runs{}",
            query(&[
                ("status", &self.status),
                ("job", &self.job),
                ("node", &self.node),
                ("since", &self.since),
                ("before", &before),
                ("after", &after),
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
    newer: Option<String>,
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
    let anchor = q.anchor();
    let mut query_ = RunQuery {
        job: opt(&q.job),
        status,
        node: opt(&q.node),
        since,
        until: None,
        before: None,
        after: None,
        limit: PAGE,
    };
    let read = api
        .read(move |ops| {
            let (newest, oldest) = ops.run_ids()?;
            // A rare filter reads a window of ids: below the anchor, or above it.
            let window = match anchor {
                Anchor::After(a) => {
                    let top = (a + 1 + WINDOW).min(newest + 1);
                    (a + 1, top)
                }
                Anchor::Before(b) => (b - WINDOW, b),
                Anchor::Newest => (newest + 1 - WINDOW, newest + 1),
            };
            // Ids in [low, top): below `top`, above `low - 1`.
            let (before, after) = if windowed {
                (Some(window.1), Some(window.0 - 1))
            } else {
                match anchor {
                    Anchor::After(a) => (None, Some(a)),
                    Anchor::Before(b) => (Some(b), None),
                    Anchor::Newest => (None, None),
                }
            };
            query_.before = before;
            query_.after = after;
            let runs = match anchor {
                Anchor::After(_) => ops.runs_above(&query_)?,
                Anchor::Before(_) | Anchor::Newest => ops.runs(&query_)?,
            };
            Ok((runs, windowed.then_some(window), newest, oldest))
        })
        .await;
    let (runs, window, newest_id, oldest) = match read {
        Ok(found) => found,
        Err(e) => {
            problem = Some(e.body.error);
            (Vec::new(), None, 0, 0)
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
    let (older, newer, searched) = pager(&q, &rows, window, newest_id, oldest);
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
            self_url: q.url(q.anchor()),
            newest: (!matches!(q.anchor(), Anchor::Newest)).then(|| q.url(Anchor::Newest)),
            older,
            newer,
            rows,
            problem,
            searched,
            q,
        },
    )
}

/// The Older and Newer links of a page of runs, and what a window looked through when it
/// holds fewer than a page. A full page continues past its last (or first) run; a window
/// that held fewer continues past the window, saying which runs it looked through.
fn pager(
    q: &ListQuery,
    rows: &[RunRow],
    window: Option<(i64, i64)>,
    newest: i64,
    oldest: i64,
) -> (Option<String>, Option<String>, Option<String>) {
    let full = rows.len() as i64 == PAGE;
    let (first, last) = (rows.first().map(|r| r.id), rows.last().map(|r| r.id));
    let mut searched = None;
    match q.anchor() {
        Anchor::Newest | Anchor::Before(_) => {
            let older = match (full, window, last) {
                (true, _, Some(last)) => Some(q.url(Anchor::Before(last))),
                (false, Some((low, top)), _) if low > oldest => {
                    searched = Some(format!(
                        "Looked through runs {}–{} for these; older runs are on the next page.",
                        low.max(oldest),
                        top - 1
                    ));
                    Some(q.url(Anchor::Before(low)))
                }
                _ => None,
            };
            let newer = match (q.anchor(), first) {
                (Anchor::Before(_), Some(first)) if first < newest => {
                    Some(q.url(Anchor::After(first)))
                }
                (Anchor::Before(b), None) => Some(q.url(Anchor::After(b - 1))),
                _ => None,
            };
            (older, newer, searched)
        }
        Anchor::After(a) => {
            let older = Some(q.url(Anchor::Before(last.unwrap_or(a + 1))));
            let newer = match (full, window, first) {
                (true, _, Some(first)) if first < newest => Some(q.url(Anchor::After(first))),
                (false, Some((low, top)), _) if top <= newest => {
                    searched = Some(format!(
                        "Looked through runs {low}–{} for these; newer runs are on the next page.",
                        top - 1
                    ));
                    Some(q.url(Anchor::After(top - 1)))
                }
                _ => None,
            };
            (older, newer, searched)
        }
    }
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
    priority: String,
    retry_of: Option<i64>,
    parent: Option<i64>,
    node: String,
    scheduled: String,
    created: String,
    claimed: String,
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
    tree: Option<TreeSection>,
}

/// The tree a run belongs to, as its page shows it (only when it has more than this run).
pub(super) struct TreeSection {
    root: i64,
    status: String,
    ended: bool,
    total: usize,
    counts: String,
    rows: Vec<TreeRow>,
    /// Runs of the tree not listed: beyond [`TREE_ROWS`], or beyond what a tree view holds.
    more: Option<String>,
}

/// One run of a tree: indented by its depth, named by its step (or its job), with its state,
/// timing and a link.
pub(super) struct TreeRow {
    id: i64,
    /// 0–6: the class that indents it (deeper runs stay at 6).
    depth: usize,
    name: String,
    job: String,
    status: String,
    superseded: bool,
    attempt: i64,
    started: String,
    took: String,
    error: String,
    this: bool,
}

/// The deepest indentation the stylesheet has (`.d6`).
const MAX_INDENT: usize = 6;
/// The most runs of a tree the page lists (it polls while the run is active); the API's tree
/// has them all.
const TREE_ROWS: usize = 500;

fn tree_section(t: &TreeView, this: i64, fmt: Fmt) -> Option<TreeSection> {
    if t.runs.len() < 2 {
        return None;
    }
    let counts: Vec<String> = t.counts.iter().map(|(s, n)| format!("{n} {s}")).collect();
    Some(TreeSection {
        root: t.root,
        status: t.status.clone(),
        ended: t.ended,
        total: t.runs.len(),
        counts: counts.join(", "),
        rows: t
            .runs
            .iter()
            .take(TREE_ROWS)
            .map(|n| {
                let r = &n.run;
                TreeRow {
                    id: r.id,
                    depth: n.depth.min(MAX_INDENT),
                    name: r.step.clone().unwrap_or_else(|| r.job.clone()),
                    job: r.job.clone(),
                    status: r.status.clone(),
                    superseded: n.superseded,
                    attempt: r.attempt,
                    started: fmt.time(r.started_at.map(|t| t.ms())),
                    took: duration(r.elapsed_ms),
                    error: r
                        .error
                        .as_deref()
                        .map(|e| e.chars().take(120).collect())
                        .unwrap_or_default(),
                    this: r.id == this,
                }
            })
            .collect(),
        more: (t.truncated || t.runs.len() > TREE_ROWS).then(|| {
            format!(
                "The first {} runs of the tree are listed; GET /api/v1/runs/{}/tree has {}.",
                TREE_ROWS.min(t.runs.len()),
                t.root,
                if t.truncated { "more" } else { "them all" }
            )
        }),
    })
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
    // The tree, as `runs tree` shows it (one indexed read by its root; a lone run's tree is
    // itself, and is not shown).
    let (r, tree) = api
        .read(move |ops| Ok((ops.run(id)?, ops.tree(id)?)))
        .await?;
    let fmt = fmt(&api).await;
    render(
        StatusCode::OK,
        &RunPage {
            chrome: chrome(&req, &ui, &api, &session, "Runs"),
            id: r.id,
            job: r.job.clone(),
            status: r.status.clone(),
            attempt: r.attempt,
            priority: r.priority_text(),
            retry_of: r.retry_of,
            parent: r.parent,
            node: r.node.clone().unwrap_or_default(),
            scheduled: fmt.time(r.scheduled_for.map(|t| t.ms())),
            created: fmt.time(Some(r.created_at.ms())),
            claimed: fmt.time(r.claimed_at.map(|t| t.ms())),
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
            tree: tree_section(&tree, id, fmt),
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
