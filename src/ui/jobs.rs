//! The Jobs pages: the catalog as a filtered, searched, sorted and paged table; one job (its
//! definition, activation, run history with a duration chart, last response and output); and
//! the actions (enable, disable, pin, run now with params, delete). Actions answer with a
//! redirect back to the page they came from, which htmx follows and swaps in. The create and
//! edit form is `job_form.rs`.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use askama::Template;
use serde::Deserialize;
use serde_json::Value as Json;

use super::session::Session;
use super::view::{Chrome, Fmt, duration, query};
use super::{Ui, UiError, back, render, see_other};
use crate::http::ApiState;
use crate::http::rules::{require_for, require_for_processor};
use crate::jobconf::{CatalogFile, JobDef};
use crate::model::{JobType, Pin};
use crate::ops::jobs::JobView;
use crate::ops::pages::{JobQuery, JobSort};
use crate::ops::runs::{RunQuery, RunView};

/// Jobs per page.
const PAGE: usize = 50;
/// Runs in a job's history.
const HISTORY: i64 = 50;

/// The chrome of a page, with the note the last action left (only on a page the browser
/// navigated to: a poll must not take it).
pub(super) fn chrome(
    req: &HttpRequest,
    ui: &Ui,
    api: &ApiState,
    session: &Session,
    active: &'static str,
) -> Chrome {
    let mut c = Chrome::new(session, api.engine.node_name(), active);
    let navigated =
        !req.headers().contains_key("hx-request") || req.headers().contains_key("hx-boosted");
    if navigated {
        c.flash = ui.sessions.take_flash(&session.key);
    }
    c
}

/// The node's time formats.
pub(super) async fn fmt(api: &ApiState) -> Fmt {
    let tz = api
        .read(|ops| Ok(ops.timezone()))
        .await
        .unwrap_or(chrono_tz::UTC);
    Fmt { tz }
}

// ---- the list ----

/// The list's query string.
#[derive(Debug, Clone, Default, Deserialize)]
pub(super) struct ListQuery {
    #[serde(default)]
    search: String,
    #[serde(default)]
    group: String,
    #[serde(default)]
    processor: String,
    #[serde(default, rename = "type")]
    job_type: String,
    #[serde(default)]
    state: String,
    #[serde(default)]
    enabled: String,
    #[serde(default)]
    sort: String,
    #[serde(default)]
    dir: String,
    #[serde(default)]
    offset: usize,
}

impl ListQuery {
    fn pairs(&self) -> Vec<(&'static str, String)> {
        vec![
            ("search", self.search.clone()),
            ("group", self.group.clone()),
            ("processor", self.processor.clone()),
            ("type", self.job_type.clone()),
            ("state", self.state.clone()),
            ("enabled", self.enabled.clone()),
            ("sort", self.sort.clone()),
            ("dir", self.dir.clone()),
        ]
    }

    fn url(&self, offset: usize, sort: Option<(&str, &str)>) -> String {
        let mut pairs = self.pairs();
        if let Some((s, d)) = sort {
            pairs.retain(|(k, _)| *k != "sort" && *k != "dir");
            pairs.push(("sort", s.to_string()));
            pairs.push(("dir", d.to_string()));
        }
        let offset = offset.to_string();
        let mut refs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
        if offset != "0" {
            refs.push(("offset", &offset));
        }
        format!("/ui/jobs{}", query(&refs))
    }
}

/// One row of the jobs table.
pub(super) struct JobRow {
    name: String,
    job_type: &'static str,
    processor: String,
    group: String,
    priority: i64,
    state: String,
    state_class: String,
    reason: String,
    /// For a job in standby: what holds it back now, shown under its state.
    held: String,
    enabled: bool,
    schedule: String,
    next_run: String,
    last_end: String,
    last_result: String,
    may_change: bool,
}

fn short(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_string()
    } else {
        let mut s: String = text.chars().take(max).collect();
        s.push('…');
        s
    }
}

fn response_text(v: Option<&Json>) -> String {
    match v {
        None => String::new(),
        Some(Json::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

fn job_row(j: &JobView, fmt: Fmt, operator: bool) -> JobRow {
    JobRow {
        name: j.name.clone(),
        job_type: j.job_type,
        processor: j.processor.clone(),
        group: j.group.clone().unwrap_or_default(),
        priority: j.priority,
        state: if j.enabled {
            j.activation.label()
        } else {
            "disabled".into()
        },
        state_class: if j.enabled {
            j.activation.state.clone()
        } else {
            "disabled".into()
        },
        reason: j
            .backoff
            .clone()
            .unwrap_or_else(|| j.activation.reason.clone()),
        held: String::new(),
        enabled: j.enabled,
        schedule: j.schedule.clone(),
        next_run: fmt.time(j.next_run_at.map(|t| t.ms())),
        last_end: fmt.time(j.last_end.map(|t| t.ms())),
        last_result: short(&response_text(j.last_response.as_ref()), 80),
        may_change: operator,
    }
}

/// A sortable column's header link.
pub(super) struct SortLink {
    label: &'static str,
    href: String,
    mark: &'static str,
}

/// The Jobs page.
#[derive(Template)]
#[template(path = "jobs.html")]
pub(super) struct JobsPage {
    chrome: Chrome,
    q: ListQuery,
    rows: Vec<JobRow>,
    total: usize,
    first: usize,
    last: usize,
    self_url: String,
    prev: Option<String>,
    next: Option<String>,
    sorts: Vec<SortLink>,
    types: Vec<&'static str>,
}

/// `GET /ui/jobs`.
pub(super) async fn list(
    req: HttpRequest,
    api: web::Data<ApiState>,
    ui: web::Data<Ui>,
    session: Session,
    q: web::Query<ListQuery>,
) -> Result<HttpResponse, UiError> {
    let q = q.into_inner();
    let opt = |s: &str| (!s.is_empty()).then(|| s.to_string());
    let sort = JobSort::parse(&q.sort).unwrap_or_default();
    let query_ = JobQuery {
        group: opt(&q.group),
        processor: opt(&q.processor),
        enabled: match q.enabled.as_str() {
            "yes" => Some(true),
            "no" => Some(false),
            _ => None,
        },
        activation: opt(&q.state),
        job_type: opt(&q.job_type),
        search: opt(q.search.trim()),
        sort,
        reversed: q.dir == "desc",
        offset: q.offset,
        limit: PAGE,
    };
    let page = api.read(move |ops| ops.job_page(&query_)).await?;
    let fmt = fmt(&api).await;
    let chrome = chrome(&req, &ui, &api, &session, "Jobs");
    // A job in standby waits for the node's health: say what holds it back now.
    let standby = |j: &JobView| j.enabled && j.activation.state == "standby";
    let held = if page.items.iter().any(standby) {
        let status = crate::ops::node::status(&api.engine).await?;
        match status.pressure_levels() {
            Some(levels) => format!("held back: {levels}"),
            None => "the node is healthy: activated in priority order".to_string(),
        }
    } else {
        String::new()
    };
    let rows = page
        .items
        .iter()
        .map(|j| {
            let mut row = job_row(j, fmt, chrome.operator);
            if standby(j) {
                row.held = held.clone();
            }
            row
        })
        .collect();
    let sorts = [
        ("Name", "name"),
        ("Priority", "priority"),
        ("Last end", "last_end"),
        ("Next run", "next_run"),
    ]
    .into_iter()
    .map(|(label, key)| {
        let current = q.sort == key || (q.sort.is_empty() && key == "name");
        let desc = current && q.dir != "desc";
        SortLink {
            label,
            href: q.url(0, Some((key, if desc { "desc" } else { "" }))),
            mark: match (current, q.dir == "desc") {
                (false, _) => "",
                (true, false) => " ▲",
                (true, true) => " ▼",
            },
        }
    })
    .collect();
    let first = if page.total == 0 { 0 } else { q.offset + 1 };
    let last = (q.offset + page.items.len()).min(page.total);
    render(
        StatusCode::OK,
        &JobsPage {
            prev: (q.offset > 0).then(|| q.url(q.offset.saturating_sub(PAGE), None)),
            next: (last < page.total).then(|| q.url(q.offset + PAGE, None)),
            self_url: q.url(q.offset, None),
            chrome,
            rows,
            total: page.total,
            first,
            last,
            sorts,
            types: JobType::ALL.iter().map(|t| t.as_str()).collect(),
            q,
        },
    )
}

// ---- one job ----

/// One run as a job's history lists it.
pub(super) struct HistoryRow {
    id: i64,
    status: String,
    attempt: i64,
    created: String,
    started: String,
    took: String,
    node: String,
    error: String,
}

pub(super) fn history_row(r: &RunView, fmt: Fmt) -> HistoryRow {
    HistoryRow {
        id: r.id,
        status: r.status.clone(),
        attempt: r.attempt,
        created: fmt.time(Some(r.created_at.ms())),
        started: fmt.time(r.started_at.map(|t| t.ms())),
        took: duration(r.elapsed_ms),
        node: r.node.clone().unwrap_or_default(),
        error: short(r.error.as_deref().unwrap_or_default(), 120),
    }
}

/// The job page.
#[derive(Template)]
#[template(path = "job.html")]
pub(super) struct JobPage {
    chrome: Chrome,
    row: JobRow,
    description: String,
    definition: String,
    pinned: String,
    activation_reason: String,
    backoff: String,
    last_response: String,
    last_output: String,
    last_output_run: Option<i64>,
    /// For a job in standby: the node's pressure now, in words.
    held_back: Option<String>,
    runs: Vec<HistoryRow>,
    may_edit: bool,
}

fn definition_text(name: &str, def: &JobDef) -> String {
    let mut file = CatalogFile::default();
    file.jobs.insert(name.to_string(), def.clone());
    crate::jobconf::toml_format::render(&file)
        .map(|text| {
            text.lines()
                .filter(|l| !l.starts_with('#') && !l.starts_with("version"))
                .collect::<Vec<_>>()
                .join("\n")
                .trim()
                .to_string()
        })
        .unwrap_or_else(|e| format!("cannot render: {e}"))
}

/// `GET /ui/jobs/{name}`.
pub(super) async fn detail(
    req: HttpRequest,
    api: web::Data<ApiState>,
    ui: web::Data<Ui>,
    session: Session,
    name: web::Path<String>,
) -> Result<HttpResponse, UiError> {
    let name = name.into_inner();
    let who = session.principal.clone();
    let (view, def, runs, may_edit) = api
        .read(move |ops| {
            let (view, def) = ops.job(&name)?;
            let runs = ops.runs(&RunQuery {
                job: Some(name.clone()),
                limit: HISTORY,
                ..RunQuery::default()
            })?;
            let may_edit = require_for(&who, def.job_type).is_ok()
                && require_for_processor(&who, ops, &def.processor).is_ok()
                && who.may(crate::model::Role::Operator);
            Ok((view, def, runs, may_edit))
        })
        .await?;
    let fmt = fmt(&api).await;
    let chrome = chrome(&req, &ui, &api, &session, "Jobs");
    // The last run that ran: a skipped run, or one cancelled before it started, has no output.
    let last_output = runs
        .iter()
        .find(|r| r.finished_at.is_some() && r.started_at.is_some());
    // A job waiting in standby: the pressure on the node now that holds it back.
    let held_back = if view.enabled && view.activation.state == "standby" {
        let status = crate::ops::node::status(&api.engine).await?;
        Some(status.pressure())
    } else {
        None
    };
    render(
        StatusCode::OK,
        &JobPage {
            row: job_row(&view, fmt, chrome.operator),
            description: view.description.clone().unwrap_or_default(),
            definition: definition_text(&view.name, &def),
            pinned: view.activation.pinned.clone().unwrap_or_default(),
            activation_reason: view.activation.reason.clone(),
            backoff: view.backoff.clone().unwrap_or_default(),
            last_response: response_text(view.last_response.as_ref()),
            last_output: last_output.and_then(|r| r.log.clone()).unwrap_or_default(),
            last_output_run: last_output.map(|r| r.id),
            held_back,
            runs: runs.iter().map(|r| history_row(r, fmt)).collect(),
            may_edit,
            chrome,
        },
    )
}

/// A job name as a URL path segment.
pub(super) fn urlencode(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

// ---- actions ----

async fn act(
    req: &HttpRequest,
    ui: &Ui,
    session: &Session,
    note: String,
    fallback: &str,
) -> HttpResponse {
    ui.sessions.set_flash(&session.key, note);
    see_other(&back(req, fallback))
}

async fn set_enabled(
    req: HttpRequest,
    api: web::Data<ApiState>,
    ui: web::Data<Ui>,
    session: Session,
    name: String,
    enabled: bool,
) -> Result<HttpResponse, UiError> {
    let job = name.clone();
    let change = api
        .write(&session.principal.user, move |ops| {
            Ok(ops.set_job_enabled(&name, enabled)?)
        })
        .await?;
    let word = if enabled { "enabled" } else { "disabled" };
    let note = match change {
        crate::ops::jobs::Change::Changed => format!("job `{job}` {word}"),
        crate::ops::jobs::Change::Unchanged => format!("job `{job}` was {word} already"),
    };
    Ok(act(
        &req,
        &ui,
        &session,
        note,
        &format!("/ui/jobs/{}", urlencode(&job)),
    )
    .await)
}

/// `POST /ui/jobs/{name}/enable`.
pub(super) async fn enable(
    req: HttpRequest,
    api: web::Data<ApiState>,
    ui: web::Data<Ui>,
    session: Session,
    name: web::Path<String>,
) -> Result<HttpResponse, UiError> {
    set_enabled(req, api, ui, session, name.into_inner(), true).await
}

/// `POST /ui/jobs/{name}/disable`.
pub(super) async fn disable(
    req: HttpRequest,
    api: web::Data<ApiState>,
    ui: web::Data<Ui>,
    session: Session,
    name: web::Path<String>,
) -> Result<HttpResponse, UiError> {
    set_enabled(req, api, ui, session, name.into_inner(), false).await
}

/// The pin form.
#[derive(Debug, Deserialize)]
pub(super) struct PinForm {
    pin: String,
}

/// `POST /ui/jobs/{name}/pin`: `active`, `inactive` or `none`.
pub(super) async fn pin(
    req: HttpRequest,
    api: web::Data<ApiState>,
    ui: web::Data<Ui>,
    session: Session,
    name: web::Path<String>,
    form: web::Form<PinForm>,
) -> Result<HttpResponse, UiError> {
    let name = name.into_inner();
    let pin = match form.pin.as_str() {
        "none" | "" => None,
        p => Some(Pin::parse(p).ok_or_else(|| {
            UiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("pin: expected active, inactive or none, got `{p}`"),
            )
        })?),
    };
    let job = name.clone();
    let activation = api
        .write(&session.principal.user, move |ops| {
            Ok(ops.pin_job(&name, pin)?)
        })
        .await?;
    let note = format!("job `{job}` is {} now", activation.label());
    Ok(act(
        &req,
        &ui,
        &session,
        note,
        &format!("/ui/jobs/{}", urlencode(&job)),
    )
    .await)
}

/// The run-now form.
#[derive(Debug, Deserialize)]
pub(super) struct RunForm {
    #[serde(default)]
    params: String,
}

/// `POST /ui/jobs/{name}/run`: queue a run now, with params (a JSON object) when given.
pub(super) async fn run_now(
    req: HttpRequest,
    api: web::Data<ApiState>,
    ui: web::Data<Ui>,
    session: Session,
    name: web::Path<String>,
    form: web::Form<RunForm>,
) -> Result<HttpResponse, UiError> {
    let name = name.into_inner();
    let params = match form.params.trim() {
        "" => None,
        text => Some(serde_json::from_str::<Json>(text).map_err(|e| {
            UiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("params: not JSON: {e}"),
            )
        })?),
    };
    let ids = crate::ops::node::trigger(
        &api.engine,
        &session.principal.user,
        &name,
        vec![params],
        Default::default(),
    )
    .await?;
    let note = format!(
        "run {} of `{name}` queued",
        ids.first().map(|i| i.to_string()).unwrap_or_default()
    );
    Ok(act(
        &req,
        &ui,
        &session,
        note,
        &format!("/ui/jobs/{}", urlencode(&name)),
    )
    .await)
}

/// `POST /ui/jobs/{name}/delete`: remove the job and its history.
pub(super) async fn delete(
    api: web::Data<ApiState>,
    ui: web::Data<Ui>,
    session: Session,
    name: web::Path<String>,
) -> Result<HttpResponse, UiError> {
    let name = name.into_inner();
    let who = session.principal.clone();
    let job = name.clone();
    api.write(&who.user.clone(), move |ops| {
        let (_, def) = ops.job(&name)?;
        require_for(&who, def.job_type)?;
        require_for_processor(&who, ops, &def.processor)?;
        Ok(ops.remove_job(&name)?)
    })
    .await?;
    ui.sessions
        .set_flash(&session.key, format!("job `{job}` and its history removed"));
    Ok(see_other("/ui/jobs"))
}
