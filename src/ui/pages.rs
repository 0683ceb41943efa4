//! The Overview (the node's state, its health over time, runs finished per minute, the latest
//! decisions with their reasons and evidence, stuck and failing work), the charts' data, and
//! the Processors, Objects, Decisions and Nodes pages.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use askama::Template;
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

use super::jobs::{chrome, fmt};
use super::session::Session;
use super::view::{Chrome, Fmt, duration, pretty, query};
use super::{Ui, UiError, render};
use crate::http::ApiState;
use crate::ops::decisions::DecisionView;
use crate::ops::node::SeriesQuery;
use crate::ops::overview::DecisionQuery;
use crate::ops::runs::RunQuery;

/// Decisions on the overview.
const LATEST_DECISIONS: i64 = 8;
/// Decisions per page of the Decisions page.
const DECISIONS_PAGE: i64 = 50;

/// A decision as the pages show it.
pub(super) struct DecisionRow {
    id: i64,
    at: String,
    node: String,
    action: String,
    subject: String,
    reason: String,
    cause: String,
    evidence: String,
}

fn decision_row(d: &DecisionView, fmt: Fmt) -> DecisionRow {
    DecisionRow {
        id: d.id,
        at: fmt.time(Some(d.at.ms())),
        node: d.node.clone(),
        action: d.action.clone(),
        subject: d.subject.clone().unwrap_or_default(),
        reason: d.reason.clone(),
        cause: d.cause.clone(),
        evidence: pretty(d.evidence.as_ref()),
    }
}

/// A stuck run as the overview lists it.
pub(super) struct StuckRow {
    id: i64,
    job: String,
    node: String,
    started: String,
    why: String,
}

/// A resource's level as the overview lists it: the level's word (also its class) and the
/// reading against the policy's threshold, in words.
pub(super) struct LevelRow {
    level: &'static str,
    text: String,
}

/// A failing job as the overview lists it.
pub(super) struct FailingRow {
    job: String,
    failures: i64,
    last_run: i64,
    last_at: String,
    error: String,
}

/// The Overview page.
#[derive(Template)]
#[template(path = "overview.html")]
pub(super) struct OverviewPage {
    chrome: Chrome,
    state: &'static str,
    state_class: &'static str,
    state_why: String,
    level: &'static str,
    levels: Vec<LevelRow>,
    /// The node's budget and whose limits bind it, in words ("" before a sample).
    budget: String,
    paused: bool,
    activation: Vec<(String, i64)>,
    queued: i64,
    running: i64,
    lag: String,
    readings: Vec<(String, String)>,
    decisions: Vec<DecisionRow>,
    stuck: Vec<StuckRow>,
    overdue: i64,
    oldest_due: String,
    failing: Vec<FailingRow>,
    failing_window: String,
    charts: Vec<(&'static str, &'static str)>,
}

/// `10,000`.
fn thousands(n: i64) -> String {
    let digits = n.abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 { format!("-{out}") } else { out }
}

/// A health reading's name and value in its unit, from the status's JSON.
fn reading(name: &str, v: &Json) -> Option<(String, String)> {
    let x = v.as_f64()?;
    let text = if name == "cpu_cores" {
        crate::policy::cores(x)
    } else if name == "cgroup_oom_kills" {
        format!("{x:.0}")
    } else if name.starts_with("psi") || name.contains("cpu") {
        format!("{x:.1} %")
    } else if name.ends_with("_per_s") {
        format!("{:.1} KiB/s", x / 1024.0)
    } else if name.contains("memory")
        || name.contains("disk")
        || name.contains("swap")
        || name.contains("rss")
    {
        if x > 1e9 {
            format!("{:.2} GiB", x / (1u64 << 30) as f64)
        } else {
            format!("{:.1} MiB", x / (1u64 << 20) as f64)
        }
    } else if name == "at" {
        return None;
    } else {
        format!("{x:.2}")
    };
    Some((name.replace('_', " "), text))
}

/// `GET /ui/`.
pub(super) async fn overview(
    req: HttpRequest,
    api: web::Data<ApiState>,
    ui: web::Data<Ui>,
    session: Session,
) -> Result<HttpResponse, UiError> {
    let status = crate::ops::node::status(&api.engine).await?;
    let now = crate::catalog::now_ms();
    let (queue, decisions, stuck, failing) = api
        .read(move |ops| {
            Ok((
                ops.queue_gauges(now)?,
                ops.decisions(LATEST_DECISIONS, false)?,
                ops.stuck(now)?,
                ops.failing_jobs(10)?,
            ))
        })
        .await?;
    let fmt = fmt(&api).await;
    // The state is a word (its badge stays within its card); what it means is said beside it.
    let (state, state_class, state_why) = match (&status.writes_paused, status.paused) {
        (_, true) => (
            "paused",
            "paused",
            "by an operator: no schedule fires, no run is claimed".to_string(),
        ),
        (Some(why), false) => ("writes paused", "paused", why.clone()),
        (None, false) => ("running", "active", String::new()),
    };
    let level = status.level.as_str();
    let levels = status
        .resources
        .iter()
        .map(|r| LevelRow {
            level: r.level.as_str(),
            text: r.text.clone(),
        })
        .collect();
    let readings = status
        .detail
        .get("health")
        .and_then(Json::as_object)
        .map(|m| m.iter().filter_map(|(k, v)| reading(k, v)).collect())
        .unwrap_or_default();
    render(
        StatusCode::OK,
        &OverviewPage {
            chrome: chrome(&req, &ui, &api, &session, "Overview"),
            state,
            state_class,
            state_why,
            level,
            levels,
            budget: status
                .budget
                .as_ref()
                .map(|b| b.describe())
                .unwrap_or_default(),
            paused: status.paused,
            activation: queue.activation.clone(),
            queued: queue.queued,
            running: queue.running,
            lag: duration(Some(queue.lag_ms)),
            readings,
            decisions: decisions.iter().map(|d| decision_row(d, fmt)).collect(),
            stuck: stuck
                .running
                .iter()
                .map(|s| StuckRow {
                    id: s.id,
                    job: s.job.clone(),
                    node: s.node.clone().unwrap_or_default(),
                    started: fmt.time(s.started_at.map(|t| t.ms())),
                    why: s.why.clone(),
                })
                .collect(),
            overdue: stuck.overdue,
            oldest_due: fmt.time(stuck.oldest_due.map(|t| t.ms())),
            failing: failing
                .iter()
                .map(|f| FailingRow {
                    job: f.job.clone(),
                    failures: f.failures,
                    last_run: f.last_run,
                    last_at: fmt.time(f.last_at.map(|t| t.ms())),
                    error: f
                        .last_error
                        .as_deref()
                        .map(|e| e.chars().take(160).collect())
                        .unwrap_or_default(),
                })
                .collect(),
            failing_window: thousands(crate::ops::overview::FAILING_WINDOW),
            charts: vec![
                ("health.cpu", "CPU used"),
                ("health.memory", "Memory available"),
                ("health.disk", "Disk available"),
                ("health.network", "Network"),
                ("health.psi", "Pressure (PSI)"),
                ("runs", "Runs finished per minute"),
            ],
        },
    )
}

/// Pauses (`true`) or resumes this node through its engine, with the audit row the API writes.
async fn set_paused(
    api: web::Data<ApiState>,
    ui: web::Data<Ui>,
    session: Session,
    paused: bool,
) -> Result<HttpResponse, UiError> {
    let (before, _) = crate::ops::node::set_paused(&api.engine, paused).await?;
    let node = api.engine.node_name().to_string();
    let name = node.clone();
    api.write(&session.principal.user, move |ops| {
        Ok(ops.audit_pause(&name, before, paused)?)
    })
    .await?;
    let note = match (before, paused) {
        (false, true) => format!("node `{node}` paused: no schedule fires, no run is claimed"),
        (true, false) => format!("node `{node}` resumed"),
        (_, true) => format!("node `{node}` was paused already"),
        (_, false) => format!("node `{node}` was running already"),
    };
    ui.sessions.set_flash(&session.key, note);
    // To the overview, where the buttons are (the confirmation page is no page to go back to).
    Ok(super::see_other("/ui/"))
}

/// The pause form: `confirm` is set by the confirmation page's button.
#[derive(Debug, Deserialize)]
pub(super) struct PauseForm {
    #[serde(default)]
    confirm: String,
}

/// The page that asks before pausing the whole node (a form, so it works without scripts).
#[derive(Template)]
#[template(path = "confirm_pause.html")]
pub(super) struct ConfirmPausePage {
    chrome: Chrome,
}

/// `POST /ui/node/pause`: pausing stops every schedule and claim of the node, so the first
/// post asks (a page with the confirming form); the node pauses only on `confirm=yes`.
pub(super) async fn pause(
    req: HttpRequest,
    api: web::Data<ApiState>,
    ui: web::Data<Ui>,
    session: Session,
    form: Option<web::Form<PauseForm>>,
) -> Result<HttpResponse, UiError> {
    // A post without a form (no body) is a first click too: it asks.
    if form.is_some_and(|f| f.confirm == "yes") {
        return set_paused(api, ui, session, true).await;
    }
    render(
        StatusCode::OK,
        &ConfirmPausePage {
            chrome: chrome(&req, &ui, &api, &session, "Overview"),
        },
    )
}

/// `POST /ui/node/resume`.
pub(super) async fn resume(
    api: web::Data<ApiState>,
    ui: web::Data<Ui>,
    session: Session,
) -> Result<HttpResponse, UiError> {
    set_paused(api, ui, session, false).await
}

// ---- charts ----

/// What a chart asks for.
#[derive(Debug, Deserialize)]
pub(super) struct ChartQuery {
    c: String,
    #[serde(default)]
    job: String,
    #[serde(default)]
    processor: String,
    #[serde(default)]
    minutes: Option<i64>,
}

/// One line of a chart.
#[derive(Debug, Serialize)]
struct Line {
    label: String,
    values: Vec<Option<f64>>,
}

/// A chart's data, as `app.js` hands it to uPlot: x in epoch seconds.
#[derive(Debug, Serialize)]
struct Chart {
    title: String,
    unit: String,
    x: Vec<f64>,
    series: Vec<Line>,
    bars: bool,
}

/// A range of time in buckets, epoch ms.
#[derive(Debug, Clone, Copy)]
struct Span {
    from: i64,
    to: i64,
    step: i64,
}

/// How a chart of stats is labelled: its title, its unit, and what a value is divided by.
struct Labels<'a> {
    title: &'a str,
    unit: &'a str,
    scale: f64,
}

/// Series of stats bucketed over the range, aligned on one x axis.
fn stat_chart(
    ops: &crate::ops::Ops,
    labels: Labels<'_>,
    types: &[(&str, &str)],
    subject: Option<&str>,
    span: Span,
) -> Result<Chart, crate::ops::OpError> {
    let Span { from, to, step } = span;
    let Labels { title, unit, scale } = labels;
    let buckets = ((to - from) / step) as usize;
    let x: Vec<f64> = (0..buckets)
        .map(|i| (from + i as i64 * step) as f64 / 1000.0)
        .collect();
    let mut series = Vec::new();
    for (stat, label) in types {
        let mut values = vec![None; buckets];
        let q = SeriesQuery {
            stat_type: stat.to_string(),
            from,
            to,
            step,
            subject: subject.map(String::from),
            node: Some(ops.caller().node.clone()),
        };
        match ops.series(&q) {
            Ok(s) => {
                for p in s.points {
                    let i = ((p.at.ms() - from) / step) as usize;
                    if let Some(v) = values.get_mut(i) {
                        *v = Some(p.avg / scale);
                    }
                }
            }
            // A series the node has not recorded yet is an empty line.
            Err(e) if e.kind() == crate::ops::Kind::NotFound => {}
            Err(e) => return Err(e),
        }
        series.push(Line {
            label: label.to_string(),
            values,
        });
    }
    // Drop the leading buckets no series has a value in, so a young node's chart is not a
    // long empty stretch.
    let first = (0..buckets).find(|&i| series.iter().any(|s| s.values[i].is_some()));
    let skip = first.unwrap_or(buckets.saturating_sub(1));
    Ok(Chart {
        title: title.to_string(),
        unit: unit.to_string(),
        x: x[skip..].to_vec(),
        series: series
            .into_iter()
            .map(|s| Line {
                label: s.label,
                values: s.values[skip..].to_vec(),
            })
            .collect(),
        bars: false,
    })
}

/// `GET /ui/charts?c=…`: one chart's data (health series, runs per minute, a processor's busy
/// time and instances, a job's run durations).
pub(super) async fn charts(
    api: web::Data<ApiState>,
    _session: Session,
    q: web::Query<ChartQuery>,
) -> Result<HttpResponse, UiError> {
    let q = q.into_inner();
    let minutes = q.minutes.unwrap_or(60).clamp(5, 7 * 24 * 60);
    let now = crate::catalog::now_ms();
    let step = (minutes * 60_000 / 120).max(5_000);
    let to = now - now % step + step;
    let from = to - minutes * 60_000;
    let chart = api
        .read(move |ops| {
            let span = Span { from, to, step };
            let stat = |title, unit, scale, types: &[(&str, &str)], subject: Option<&str>| {
                stat_chart(ops, Labels { title, unit, scale }, types, subject, span)
            };
            Ok(match q.c.as_str() {
                "health.cpu" => stat("CPU used", "%", 1.0, &[("device.cpu_used", "cpu")], None)?,
                "health.memory" => stat(
                    "Memory available",
                    "MiB",
                    1048576.0,
                    &[("device.memory_available", "available")],
                    None,
                )?,
                "health.disk" => stat(
                    "Disk available",
                    "GiB",
                    1073741824.0,
                    &[("device.disk_available", "available")],
                    None,
                )?,
                "health.network" => stat(
                    "Network",
                    "KiB/s",
                    1024.0,
                    &[
                        ("device.network_rx", "received"),
                        ("device.network_tx", "sent"),
                    ],
                    None,
                )?,
                "health.psi" => stat(
                    "Pressure stall (some)",
                    "%",
                    1.0,
                    &[
                        ("device.psi_cpu", "cpu"),
                        ("device.psi_memory", "memory"),
                        ("device.psi_io", "io"),
                    ],
                    None,
                )?,
                "processor" => stat(
                    "Busy time and instances",
                    "ms / instances",
                    1.0,
                    &[
                        ("job_processor.busy_ms", "busy ms"),
                        ("job_processor.instances", "instances"),
                    ],
                    Some(&q.processor),
                )?,
                "runs" => {
                    let step = 60_000;
                    let to = now - now % step + step;
                    let t = ops.throughput(to - minutes * 60_000, to, step)?;
                    Chart {
                        title: if t.truncated {
                            "Runs finished per minute (the newest runs)".into()
                        } else {
                            "Runs finished per minute".into()
                        },
                        unit: "runs".into(),
                        x: t.points.iter().map(|p| p.at.ms() as f64 / 1000.0).collect(),
                        series: vec![
                            Line {
                                label: "succeeded".into(),
                                values: t.points.iter().map(|p| Some(p.succeeded as f64)).collect(),
                            },
                            Line {
                                label: "failed".into(),
                                values: t.points.iter().map(|p| Some(p.failed as f64)).collect(),
                            },
                        ],
                        bars: true,
                    }
                }
                "job" => {
                    let runs = ops.runs(&RunQuery {
                        job: Some(q.job.clone()),
                        limit: 100,
                        ..RunQuery::default()
                    })?;
                    let mut done: Vec<_> = runs
                        .iter()
                        .filter_map(|r| Some((r.finished_at?.ms(), r.elapsed_ms?)))
                        .collect();
                    done.sort();
                    Chart {
                        title: "Run durations".into(),
                        unit: "ms".into(),
                        x: done.iter().map(|(t, _)| *t as f64 / 1000.0).collect(),
                        series: vec![Line {
                            label: "duration".into(),
                            values: done.iter().map(|(_, ms)| Some(*ms as f64)).collect(),
                        }],
                        bars: false,
                    }
                }
                other => {
                    return Err(crate::ops::OpError::invalid(
                        "c",
                        format!("no chart `{other}`"),
                    ));
                }
            })
        })
        .await?;
    Ok(HttpResponse::Ok().json(chart))
}

// ---- processors, objects, decisions, nodes ----

/// A processor as its page lists it.
pub(super) struct ProcessorRow {
    name: String,
    instances: i64,
    max_instances: String,
    remote: String,
    enabled: bool,
    jobs: i64,
    /// Per node: its name, what it runs (`1 instance, 1 busy`), and why (its policy's last
    /// word on the instances, if any).
    running: Vec<(String, String, String)>,
}

fn instances_text(instances: i64, busy: Option<usize>) -> String {
    let noun = if instances == 1 {
        "instance"
    } else {
        "instances"
    };
    match busy {
        Some(b) => format!("{instances} {noun}, {b} busy"),
        None => format!("{instances} {noun}"),
    }
}

/// The Processors page.
#[derive(Template)]
#[template(path = "processors.html")]
pub(super) struct ProcessorsPage {
    chrome: Chrome,
    rows: Vec<ProcessorRow>,
}

/// `GET /ui/processors`: each processor with the instances every node runs — this node's as
/// its engine runs them now (with how many are busy), the others' as their policy last set
/// them.
pub(super) async fn processors(
    req: HttpRequest,
    api: web::Data<ApiState>,
    ui: web::Data<Ui>,
    session: Session,
) -> Result<HttpResponse, UiError> {
    let list = api.read(|ops| ops.processors()).await?;
    let status = crate::ops::node::status(&api.engine).await?;
    let me = status.node.clone();
    // This node's processors as its engine reports them (`name`, `instances`, `running`).
    let local: Vec<(String, i64, usize)> = status
        .detail
        .get("processors")
        .and_then(Json::as_array)
        .map(|list| {
            list.iter()
                .filter_map(|p| {
                    Some((
                        p.get("name")?.as_str()?.to_string(),
                        p.get("instances")?.as_i64()?,
                        p.get("running")?.as_u64()? as usize,
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    let rows = list
        .into_iter()
        .map(|p| {
            let mut running: Vec<(String, String, String)> = Vec::new();
            let mine = p.running.iter().find(|n| n.node == me);
            if let Some((_, instances, busy)) = local.iter().find(|(name, ..)| *name == p.name) {
                running.push((
                    me.clone(),
                    instances_text(*instances, Some(*busy)),
                    mine.and_then(|n| n.reason.clone()).unwrap_or_default(),
                ));
            }
            running.extend(p.running.iter().filter(|n| n.node != me).map(|n| {
                (
                    n.node.clone(),
                    instances_text(n.instances, None),
                    n.reason.clone().unwrap_or_default(),
                )
            }));
            ProcessorRow {
                name: p.name,
                instances: p.instances,
                max_instances: p.max_instances.map(|m| m.to_string()).unwrap_or_default(),
                remote: p.remote.unwrap_or_default(),
                enabled: p.enabled,
                jobs: p.jobs,
                running,
            }
        })
        .collect();
    render(
        StatusCode::OK,
        &ProcessorsPage {
            chrome: chrome(&req, &ui, &api, &session, "Processors"),
            rows,
        },
    )
}

/// An object as its page lists it, with its writers' latest statistics.
pub(super) struct ObjectRow {
    name: String,
    object_type: String,
    conn_string: String,
    ttl: String,
    prune: bool,
    enabled: bool,
    writers: i64,
    stats: Vec<(String, String)>,
}

/// The Objects page.
#[derive(Template)]
#[template(path = "objects.html")]
pub(super) struct ObjectsPage {
    chrome: Chrome,
    rows: Vec<ObjectRow>,
}

/// The object statistics the page shows, with their labels.
const OBJECT_STATS: &[(&str, &str)] = &[
    ("object.record_count", "rows"),
    ("object.file_size", "file size"),
    ("object.count_insert", "inserts"),
    ("object.date_recent_insert", "last insert"),
    ("object.count_prune", "pruned"),
];

/// `GET /ui/objects`.
pub(super) async fn objects(
    req: HttpRequest,
    api: web::Data<ApiState>,
    ui: web::Data<Ui>,
    session: Session,
) -> Result<HttpResponse, UiError> {
    let since = crate::catalog::now_ms() - 86_400_000;
    let fmt = fmt(&api).await;
    let list = api
        .read(move |ops| {
            let objects = ops.objects()?;
            let mut out = Vec::new();
            for o in objects {
                let mut stats = Vec::new();
                for (stat, label) in OBJECT_STATS {
                    let latest = ops.stats_series(stat, Some(&o.name), since, 1, true)?;
                    if let Some(v) = latest.first() {
                        stats.push((label.to_string(), v.value, v.unit.clone()));
                    }
                }
                out.push((o, stats));
            }
            Ok(out)
        })
        .await?;
    let rows = list
        .into_iter()
        .map(|(o, stats)| ObjectRow {
            name: o.name,
            object_type: o.object_type,
            conn_string: o.conn_string.unwrap_or_default(),
            ttl: o
                .time_to_live_s
                .map(|s| duration(Some(s * 1000)))
                .unwrap_or_default(),
            prune: o.allow_prune,
            enabled: o.enabled,
            writers: o.writers,
            stats: stats
                .into_iter()
                .map(|(label, v, unit)| {
                    let text = match unit.as_deref() {
                        Some("epoch ms") => fmt.time(Some(v as i64)),
                        Some("bytes") => format!("{:.1} KiB", v / 1024.0),
                        Some(u) => format!("{v} {u}"),
                        None => v.to_string(),
                    };
                    (label, text)
                })
                .collect(),
        })
        .collect();
    render(
        StatusCode::OK,
        &ObjectsPage {
            chrome: chrome(&req, &ui, &api, &session, "Objects"),
            rows,
        },
    )
}

/// The Decisions page's query string.
#[derive(Debug, Clone, Default, Deserialize)]
pub(super) struct DecisionsQuery {
    #[serde(default)]
    action: String,
    #[serde(default)]
    cause: String,
    #[serde(default)]
    search: String,
    #[serde(default)]
    all: String,
    #[serde(default)]
    before: Option<i64>,
}

impl DecisionsQuery {
    fn url(&self, before: Option<i64>) -> String {
        let before = before.map(|b| b.to_string()).unwrap_or_default();
        format!(
            "/ui/decisions{}",
            query(&[
                ("action", &self.action),
                ("cause", &self.cause),
                ("search", &self.search),
                ("all", &self.all),
                ("before", &before),
            ])
        )
    }
}

/// The Decisions page.
#[derive(Template)]
#[template(path = "decisions.html")]
pub(super) struct DecisionsPage {
    chrome: Chrome,
    q: DecisionsQuery,
    rows: Vec<DecisionRow>,
    actions: Vec<&'static str>,
    causes: Vec<&'static str>,
    self_url: String,
    older: Option<String>,
    newest: Option<String>,
}

/// `GET /ui/decisions`.
pub(super) async fn decisions(
    req: HttpRequest,
    api: web::Data<ApiState>,
    ui: web::Data<Ui>,
    session: Session,
    q: web::Query<DecisionsQuery>,
) -> Result<HttpResponse, UiError> {
    let q = q.into_inner();
    let dq = DecisionQuery {
        all_nodes: !q.all.is_empty(),
        action: Some(q.action.clone()),
        cause: Some(q.cause.clone()),
        search: Some(q.search.trim().to_string()),
        before: q.before,
        limit: DECISIONS_PAGE,
    };
    let list = api.read(move |ops| ops.decision_page(&dq)).await?;
    let fmt = fmt(&api).await;
    let rows: Vec<DecisionRow> = list.iter().map(|d| decision_row(d, fmt)).collect();
    let older = (rows.len() as i64 == DECISIONS_PAGE)
        .then(|| rows.last().map(|r| q.url(Some(r.id))))
        .flatten();
    render(
        StatusCode::OK,
        &DecisionsPage {
            chrome: chrome(&req, &ui, &api, &session, "Decisions"),
            actions: crate::catalog::activation::decision_actions(),
            causes: vec!["health", "pin", "minimum", "operator"],
            self_url: q.url(q.before),
            newest: q.before.is_some().then(|| q.url(None)),
            older,
            rows,
            q,
        },
    )
}

/// A node as its page lists it.
pub(super) struct NodeRow {
    name: String,
    host: String,
    pid: String,
    version: String,
    started: String,
    heartbeat: String,
    state: &'static str,
    this: bool,
}

/// The Nodes page.
#[derive(Template)]
#[template(path = "nodes.html")]
pub(super) struct NodesPage {
    chrome: Chrome,
    rows: Vec<NodeRow>,
}

/// `GET /ui/nodes`.
pub(super) async fn nodes(
    req: HttpRequest,
    api: web::Data<ApiState>,
    ui: web::Data<Ui>,
    session: Session,
) -> Result<HttpResponse, UiError> {
    let now = crate::catalog::now_ms();
    let list = api.read(move |ops| ops.nodes(now)).await?;
    let fmt = fmt(&api).await;
    let me = api.engine.node_name().to_string();
    let rows = list
        .into_iter()
        .map(|n| {
            let age = n.heartbeat_age_ms;
            NodeRow {
                state: n.state.as_str(),
                heartbeat: match age {
                    Some(a) => format!(
                        "{} ({} ago)",
                        fmt.time(n.heartbeat_at.map(|t| t.ms())),
                        duration(Some(a))
                    ),
                    None => String::new(),
                },
                this: n.name == me,
                name: n.name,
                host: n.host.unwrap_or_default(),
                pid: n.pid.map(|p| p.to_string()).unwrap_or_default(),
                version: n.version.unwrap_or_default(),
                started: fmt.time(n.started_at.map(|t| t.ms())),
            }
        })
        .collect();
    render(
        StatusCode::OK,
        &NodesPage {
            chrome: chrome(&req, &ui, &api, &session, "Nodes"),
            rows,
        },
    )
}
