//! The job form, for a new job and for editing one: every problem shown beside its field, and
//! the schedule in words with its next ten fire times as it is typed (`schedule_preview`, the
//! fragment htmx redraws). Saving goes through the same `JobPatch` as the API.

use std::collections::BTreeMap;

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use askama::Template;
use serde_json::Value as Json;

use super::session::Session;
use super::view::{Chrome, Fmt};
use super::{Ui, UiError, render, see_other};
use crate::http::ApiState;
use crate::http::rules::{admin_only, require_for, require_for_processor};
use crate::jobconf::JobDef;
use crate::model::JobType;
use crate::ops::jobs::JobPatch;
use crate::ops::preview::{FieldProblem, SchedulePreview};
use crate::schedule::{MisfirePolicy, OverlapPolicy, ScheduleSpec};

use super::jobs::{chrome, fmt, urlencode};

/// Fire times in a schedule preview.
const PREVIEW: usize = 10;

/// The fields of the job form, as typed (shown again with the problems).
#[derive(Debug, Clone, Default)]
pub(super) struct Fields {
    name: String,
    job_type: String,
    processor: String,
    group: String,
    priority: String,
    description: String,
    payload: String,
    run_always: bool,
    run_delay: String,
    run_every: String,
    run_on_the: String,
    run_at: String,
    run_date: String,
    cron: String,
    timezone: String,
    misfire_policy: String,
    overlap_policy: String,
    max_overlap: String,
    max_attempts: String,
    backoff_base: String,
    backoff_max: String,
    timeout: String,
    start_within: String,
    aging: String,
    objects: String,
    required: bool,
    stretch_max: String,
}

impl Fields {
    fn from_form(pairs: &[(String, String)]) -> Self {
        let map: BTreeMap<&str, &str> = pairs
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let s = |k: &str| map.get(k).map(|v| v.trim().to_string()).unwrap_or_default();
        Fields {
            name: s("name"),
            job_type: s("type"),
            processor: s("processor"),
            group: s("group"),
            priority: s("priority"),
            description: map
                .get("description")
                .map(|v| v.to_string())
                .unwrap_or_default(),
            payload: map
                .get("payload")
                .map(|v| v.to_string())
                .unwrap_or_default(),
            run_always: map.contains_key("run_always"),
            run_delay: s("run_delay"),
            run_every: s("run_every"),
            run_on_the: s("run_on_the"),
            run_at: s("run_at"),
            run_date: s("run_date"),
            cron: s("cron"),
            timezone: s("timezone"),
            misfire_policy: s("misfire_policy"),
            overlap_policy: s("overlap_policy"),
            max_overlap: s("max_overlap"),
            max_attempts: s("max_attempts"),
            backoff_base: s("backoff_base"),
            backoff_max: s("backoff_max"),
            timeout: s("timeout"),
            start_within: s("start_within"),
            aging: s("aging"),
            objects: s("objects"),
            required: map.contains_key("required"),
            stretch_max: s("stretch_max"),
        }
    }

    fn of_job(name: &str, def: &JobDef) -> Self {
        let sch = &def.schedule;
        let n = |v: Option<i64>| v.map(|v| v.to_string()).unwrap_or_default();
        Fields {
            name: name.to_string(),
            job_type: def.job_type.as_str().into(),
            processor: def.processor.clone(),
            group: def.group.clone().unwrap_or_default(),
            priority: def.priority.to_string(),
            description: def.description.clone().unwrap_or_default(),
            payload: serde_json::to_string_pretty(&def.payload.json()).unwrap_or_default(),
            run_always: sch.run_always,
            run_delay: if sch.run_always {
                sch.run_delay.to_string()
            } else {
                String::new()
            },
            run_every: n(sch.run_every),
            run_on_the: n(sch.run_on_the),
            run_at: sch.run_at.clone().unwrap_or_default(),
            run_date: sch.run_date.clone().unwrap_or_default(),
            cron: sch.cron.clone().unwrap_or_default(),
            timezone: sch.timezone.clone().unwrap_or_default(),
            misfire_policy: def.misfire_policy.as_str().into(),
            overlap_policy: def.overlap_policy.as_str().into(),
            max_overlap: def.max_overlap.to_string(),
            max_attempts: def.max_attempts.to_string(),
            backoff_base: def.backoff_base.to_string(),
            backoff_max: def.backoff_max.to_string(),
            timeout: def.timeout.to_string(),
            start_within: def.start_within.to_string(),
            aging: def.aging.to_string(),
            objects: def.objects.join(", "),
            required: def.required,
            stretch_max: def.stretch_max.to_string(),
        }
    }

    /// The schedule typed so far.
    fn schedule(&self) -> (ScheduleSpec, Vec<FieldProblem>) {
        let mut problems = Vec::new();
        let spec = ScheduleSpec {
            run_always: self.run_always,
            run_delay: int("run_delay", &self.run_delay, &mut problems).unwrap_or(0),
            run_every: int("run_every", &self.run_every, &mut problems),
            run_on_the: int("run_on_the", &self.run_on_the, &mut problems),
            run_at: (!self.run_at.is_empty()).then(|| self.run_at.clone()),
            run_date: (!self.run_date.is_empty()).then(|| self.run_date.clone()),
            cron: (!self.cron.is_empty()).then(|| self.cron.clone()),
            timezone: (!self.timezone.is_empty()).then(|| self.timezone.clone()),
        };
        (spec, problems)
    }

    /// The application layer's patch, and the problems of fields that do not even parse.
    fn patch(&self) -> (Option<JobType>, JobPatch, Vec<FieldProblem>) {
        let (spec, mut problems) = self.schedule();
        let job_type = match self.job_type.as_str() {
            "" => None,
            t => {
                let parsed = JobType::parse(t);
                if parsed.is_none() {
                    problems.push(problem(
                        "type",
                        format!("expected one of {}, got `{t}`", JobType::expected()),
                    ));
                }
                parsed
            }
        };
        let payload = match self.payload.trim() {
            "" => Some(serde_json::Map::new()),
            text => match serde_json::from_str::<Json>(text) {
                Ok(Json::Object(map)) => Some(map),
                Ok(_) => {
                    problems.push(problem("payload", "must be a JSON object".into()));
                    None
                }
                Err(e) => {
                    problems.push(problem("payload", format!("is not JSON: {e}")));
                    None
                }
            },
        };
        let misfire_policy = match self.misfire_policy.as_str() {
            "" => None,
            m => MisfirePolicy::parse(m).or_else(|| {
                problems.push(problem(
                    "misfire_policy",
                    format!("expected once, skip or all, got `{m}`"),
                ));
                None
            }),
        };
        let overlap_policy = match self.overlap_policy.as_str() {
            "" => None,
            o => OverlapPolicy::parse(o).or_else(|| {
                problems.push(problem(
                    "overlap_policy",
                    format!("expected forbid, queue or allow, got `{o}`"),
                ));
                None
            }),
        };
        let p = &mut problems;
        let patch = JobPatch {
            job_type,
            processor: (!self.processor.is_empty()).then(|| self.processor.clone()),
            group: Some((!self.group.is_empty()).then(|| self.group.clone())),
            payload,
            description: (!self.description.is_empty()).then(|| self.description.clone()),
            priority: int("priority", &self.priority, p),
            timeout: int("timeout", &self.timeout, p),
            start_within: int("start_within", &self.start_within, p),
            aging: int("aging", &self.aging, p),
            clear_schedule: true,
            run_always: Some(spec.run_always),
            run_delay: Some(spec.run_delay),
            run_every: spec.run_every,
            run_on_the: spec.run_on_the,
            run_at: spec.run_at,
            run_date: spec.run_date,
            cron: spec.cron,
            timezone: spec.timezone,
            misfire_policy,
            misfire_window: None,
            max_catchup: None,
            overlap_policy,
            max_overlap: int("max_overlap", &self.max_overlap, p),
            max_attempts: int("max_attempts", &self.max_attempts, p),
            backoff_base: int("backoff_base", &self.backoff_base, p),
            backoff_max: int("backoff_max", &self.backoff_max, p),
            objects: Some(
                self.objects
                    .split([',', ' '])
                    .filter(|o| !o.is_empty())
                    .map(String::from)
                    .collect(),
            ),
            required: Some(self.required),
            stretch_max: int("stretch_max", &self.stretch_max, p),
        };
        (job_type, patch, problems)
    }
}

fn problem(field: &str, reason: String) -> FieldProblem {
    FieldProblem {
        field: field.to_string(),
        reason,
    }
}

fn int(field: &str, text: &str, problems: &mut Vec<FieldProblem>) -> Option<i64> {
    if text.is_empty() {
        return None;
    }
    match text.parse() {
        Ok(v) => Some(v),
        Err(_) => {
            problems.push(problem(
                field,
                format!("must be a whole number, got `{text}`"),
            ));
            None
        }
    }
}

/// The schedule preview fragment (beside the schedule fields, redrawn as they are typed).
#[derive(Template)]
#[template(path = "schedule_preview.html")]
pub(super) struct PreviewFragment {
    words: String,
    timezone: String,
    next: Vec<String>,
    problems: Vec<FieldProblem>,
}

fn preview_fragment(p: SchedulePreview, extra: Vec<FieldProblem>, fmt: Fmt) -> PreviewFragment {
    let mut problems = extra;
    problems.extend(p.problems);
    PreviewFragment {
        words: p.words,
        timezone: p.timezone,
        next: p.next.iter().map(|t| fmt.long_time(t.ms())).collect(),
        problems,
    }
}

/// The job form.
#[derive(Template)]
#[template(path = "job_form.html")]
pub(super) struct FormPage {
    chrome: Chrome,
    editing: bool,
    action: String,
    f: Fields,
    errors: BTreeMap<String, String>,
    preview: PreviewFragment,
    processors: Vec<String>,
    types: Vec<(&'static str, bool)>,
}

impl FormPage {
    /// The problem of `field`, or nothing.
    fn err(&self, field: &str) -> &str {
        self.errors
            .get(field)
            .map(String::as_str)
            .unwrap_or_default()
    }

    /// Problems whose field has no input of its own.
    fn other_errors(&self) -> Vec<(&String, &String)> {
        const INPUTS: &[&str] = &[
            "name",
            "type",
            "processor",
            "group",
            "priority",
            "description",
            "payload",
            "run_always",
            "run_delay",
            "run_every",
            "run_on_the",
            "run_at",
            "run_date",
            "cron",
            "timezone",
            "misfire_policy",
            "overlap_policy",
            "max_overlap",
            "max_attempts",
            "backoff_base",
            "backoff_max",
            "timeout",
            "start_within",
            "aging",
            "objects",
            "required",
            "stretch_max",
        ];
        self.errors
            .iter()
            .filter(|(k, _)| !INPUTS.contains(&k.as_str()))
            .collect()
    }

    fn selected(&self, field: &str, value: &str) -> bool {
        match field {
            "misfire_policy" => self.f.misfire_policy == value,
            "overlap_policy" => self.f.overlap_policy == value,
            "processor" => self.f.processor == value,
            _ => false,
        }
    }
}

/// What a handler renders a page with.
struct Ctx<'a> {
    req: &'a HttpRequest,
    api: &'a ApiState,
    ui: &'a Ui,
    session: &'a Session,
}

async fn form_page(
    ctx: Ctx<'_>,
    editing: bool,
    f: Fields,
    problems: Vec<FieldProblem>,
    status: StatusCode,
) -> Result<HttpResponse, UiError> {
    let Ctx {
        req,
        api,
        ui,
        session,
    } = ctx;
    let (spec, spec_problems) = f.schedule();
    let now = crate::catalog::now_ms();
    let (preview, processors) = api
        .read(move |ops| {
            let processors = ops.processor_names()?;
            Ok((ops.preview_schedule(&spec, PREVIEW, now), processors))
        })
        .await?;
    let fmt = fmt(api).await;
    let chrome = chrome(req, ui, api, session, "Jobs");
    let mut errors = BTreeMap::new();
    for p in problems {
        errors
            .entry(p.field)
            .and_modify(|e: &mut String| {
                e.push_str("; ");
                e.push_str(&p.reason);
            })
            .or_insert(p.reason);
    }
    let types = JobType::ALL
        .iter()
        .filter(|t| chrome.admin || !admin_only(**t))
        .map(|t| (t.as_str(), f.job_type == t.as_str()))
        .collect();
    let action = if editing {
        format!("/ui/jobs/{}", urlencode(&f.name))
    } else {
        "/ui/jobs".to_string()
    };
    render(
        status,
        &FormPage {
            preview: preview_fragment(preview, spec_problems, fmt),
            chrome,
            editing,
            action,
            f,
            errors,
            processors,
            types,
        },
    )
}

/// A new job's fields: the defaults a job.conf entry gets, on the first processor.
async fn new_fields(api: &ApiState) -> Result<Fields, UiError> {
    let processor = api
        .read(|ops| ops.processor_names())
        .await?
        .into_iter()
        .next()
        .unwrap_or_default();
    let mut f = Fields::of_job("", &JobDef::new(JobType::Function, processor));
    f.payload = String::new();
    Ok(f)
}

/// `GET /ui/new-job`.
pub(super) async fn new_form(
    req: HttpRequest,
    api: web::Data<ApiState>,
    ui: web::Data<Ui>,
    session: Session,
) -> Result<HttpResponse, UiError> {
    let f = new_fields(&api).await?;
    form_page(
        Ctx {
            req: &req,
            api: &api,
            ui: &ui,
            session: &session,
        },
        false,
        f,
        Vec::new(),
        StatusCode::OK,
    )
    .await
}

/// `GET /ui/jobs/{name}/edit`.
pub(super) async fn edit_form(
    req: HttpRequest,
    api: web::Data<ApiState>,
    ui: web::Data<Ui>,
    session: Session,
    name: web::Path<String>,
) -> Result<HttpResponse, UiError> {
    let name = name.into_inner();
    let key = name.clone();
    let (_, def) = api.read(move |ops| ops.job(&key)).await?;
    let f = Fields::of_job(&name, &def);
    form_page(
        Ctx {
            req: &req,
            api: &api,
            ui: &ui,
            session: &session,
        },
        true,
        f,
        Vec::new(),
        StatusCode::OK,
    )
    .await
}

/// What saving a form did: saved, or the problems to show.
enum Outcome {
    Saved(String),
    Problems(Vec<FieldProblem>),
}

async fn save(
    req: HttpRequest,
    api: web::Data<ApiState>,
    ui: web::Data<Ui>,
    session: Session,
    form: Vec<(String, String)>,
    editing: Option<String>,
) -> Result<HttpResponse, UiError> {
    let mut f = Fields::from_form(&form);
    if let Some(name) = &editing {
        f.name = name.clone();
    }
    let (job_type, patch, parse_problems) = f.patch();
    let is_edit = editing.is_some();
    let who = session.principal.clone();
    let fields = f.clone();
    let outcome = api
        .write(&who.user.clone(), move |ops| {
            let name = fields.name.clone();
            let existing = editing.is_some();
            if existing {
                let (_, def) = ops.job(&name)?;
                require_for(&who, def.job_type)?;
                require_for_processor(&who, ops, &def.processor)?;
            }
            if let Some(t) = job_type {
                require_for(&who, t)?;
            }
            if let Some(p) = &patch.processor {
                require_for_processor(&who, ops, p)?;
            }
            // Saving validates against the whole catalog (200 ms with 10,000 jobs): a form
            // that parses is saved at once, and only when saving refuses it are its problems
            // collected field by field, so a good form pays for one validation, not two.
            let every_problem = |ops: &crate::ops::Ops, mut problems: Vec<FieldProblem>| {
                problems.extend(ops.check_job(
                    &name,
                    existing,
                    job_type,
                    patch.processor.as_deref(),
                    &patch,
                )?);
                Ok::<_, crate::ops::OpError>(Outcome::Problems(problems))
            };
            if !parse_problems.is_empty() {
                return Ok(every_problem(ops, parse_problems)?);
            }
            let saved = match (existing, job_type, patch.processor.clone()) {
                (true, _, _) => ops.edit_job(&name, &patch),
                (false, Some(t), Some(p)) => ops.add_job(&name, t, &p, &patch),
                // A type or processor missing: check_job names it.
                (false, _, _) => return Ok(every_problem(ops, Vec::new())?),
            };
            let saved = match saved {
                Ok(saved) => saved,
                Err(crate::ops::OpError::Invalid { field, reason }) => {
                    let mut found = every_problem(ops, Vec::new())?;
                    if let Outcome::Problems(list) = &mut found
                        && list.is_empty()
                    {
                        list.push(problem(field.as_deref().unwrap_or("job"), reason));
                    }
                    return Ok(found);
                }
                Err(e) => return Err(e.into()),
            };
            let mut note = match (existing, saved.change) {
                (false, _) => format!("job `{name}` created"),
                (true, crate::ops::jobs::Change::Changed) => format!("job `{name}` saved"),
                (true, crate::ops::jobs::Change::Unchanged) => {
                    format!("job `{name}` unchanged: the form held its values already")
                }
            };
            for w in &saved.warnings {
                note.push_str(&format!("; warning: {w}"));
            }
            Ok(Outcome::Saved(note))
        })
        .await?;
    let existing = f.name.clone();
    match outcome {
        Outcome::Saved(note) => {
            ui.sessions.set_flash(&session.key, note);
            Ok(see_other(&format!("/ui/jobs/{}", urlencode(&existing))))
        }
        Outcome::Problems(problems) => {
            form_page(
                Ctx {
                    req: &req,
                    api: &api,
                    ui: &ui,
                    session: &session,
                },
                is_edit,
                f,
                problems,
                StatusCode::UNPROCESSABLE_ENTITY,
            )
            .await
        }
    }
}

/// A form body the handler could not read: too large (the problem shown at the payload, the
/// field that makes a form large, on the form as it was before this post — the body, past the
/// limit, is not read), or otherwise unreadable.
async fn unread(
    ctx: Ctx<'_>,
    editing: Option<String>,
    e: actix_web::Error,
) -> Result<HttpResponse, UiError> {
    let status = e.as_response_error().status_code();
    if status != StatusCode::PAYLOAD_TOO_LARGE {
        return Err(UiError::new(status, e.to_string()));
    }
    let f = match &editing {
        Some(name) => {
            let key = name.clone();
            let (_, def) = ctx.api.read(move |ops| ops.job(&key)).await?;
            Fields::of_job(name, &def)
        }
        None => new_fields(ctx.api).await?,
    };
    let problems = vec![problem("payload", super::too_large())];
    form_page(
        ctx,
        editing.is_some(),
        f,
        problems,
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await
}

/// A job form's body, or why it could not be read.
type FormBody = Result<web::Form<Vec<(String, String)>>, actix_web::Error>;

/// `POST /ui/jobs`: create a job.
pub(super) async fn create(
    req: HttpRequest,
    api: web::Data<ApiState>,
    ui: web::Data<Ui>,
    session: Session,
    form: FormBody,
) -> Result<HttpResponse, UiError> {
    match form {
        Ok(form) => save(req, api, ui, session, form.into_inner(), None).await,
        Err(e) => {
            let ctx = Ctx {
                req: &req,
                api: &api,
                ui: &ui,
                session: &session,
            };
            unread(ctx, None, e).await
        }
    }
}

/// `POST /ui/jobs/{name}`: save the edit form.
pub(super) async fn update(
    req: HttpRequest,
    api: web::Data<ApiState>,
    ui: web::Data<Ui>,
    session: Session,
    name: web::Path<String>,
    form: FormBody,
) -> Result<HttpResponse, UiError> {
    let name = name.into_inner();
    match form {
        Ok(form) => save(req, api, ui, session, form.into_inner(), Some(name)).await,
        Err(e) => {
            let ctx = Ctx {
                req: &req,
                api: &api,
                ui: &ui,
                session: &session,
            };
            unread(ctx, Some(name), e).await
        }
    }
}

/// `GET /ui/schedule?…`: the preview fragment for the schedule fields typed so far.
pub(super) async fn schedule_preview(
    api: web::Data<ApiState>,
    q: web::Query<Vec<(String, String)>>,
) -> Result<HttpResponse, UiError> {
    let f = Fields::from_form(&q.into_inner());
    let (spec, problems) = f.schedule();
    let now = crate::catalog::now_ms();
    let preview = api
        .read(move |ops| Ok(ops.preview_schedule(&spec, PREVIEW, now)))
        .await?;
    let fmt = fmt(&api).await;
    render(StatusCode::OK, &preview_fragment(preview, problems, fmt))
}
