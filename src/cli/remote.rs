//! `--url`: the CLI as a client of a running node's API, so an operator can manage a remote
//! node: `jobs` (list, show, add, edit, remove, run, enable, disable, pin, next), `runs`
//! (list, show, cancel, retry), `decisions` and `nodes list` become requests (the token comes from
//! `JOBVISOR_TOKEN`), and the answers print as tables or, with `--json`, as the API's JSON.
//!
//! Invariant: the token is read from the environment only (never a flag, which `ps` shows);
//! an API error keeps its field and reason, and maps to the exit code of its kind.

use serde_json::{Value as Json, json};

use super::args::{Command, JobsCommand, NodesCommand, RunsCommand};
use super::{
    Cli, EXIT_DATA, EXIT_FAILURE, EXIT_NO_INPUT, EXIT_TEMPFAIL, EXIT_USAGE, Failure, render,
};
use crate::http::bodies::job_body;
use crate::ops::decisions::DecisionView;
use crate::ops::node::NodeView;

/// The environment variable holding the API token.
pub const TOKEN_ENV: &str = "JOBVISOR_TOKEN";

/// Exit code: the token was refused (EX_NOPERM).
pub const EXIT_NOPERM: i32 = 77;

struct Request {
    method: &'static str,
    path: String,
    body: Option<Json>,
}

fn get(path: String) -> Request {
    Request {
        method: "GET",
        path,
        body: None,
    }
}

fn post(path: String, body: Option<Json>) -> Request {
    Request {
        method: "POST",
        path,
        body,
    }
}

/// A path segment, percent-encoded.
fn seg(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}

fn query(pairs: &[(&str, Option<String>)]) -> String {
    let mut q = form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        if let Some(v) = v {
            q.append_pair(k, v);
        }
    }
    q.finish()
}

fn unsupported(what: &str) -> Failure {
    Failure::new(
        EXIT_USAGE,
        format!(
            "{what} is not available with --url: over the API, jobs (list, show, add, edit, \
             remove, run, enable, disable, pin, next), runs (list, show, cancel, retry) and \
             decisions are"
        ),
    )
}

/// The most jobs one page of `jobs list` asks for (the API's page bound).
const JOBS_PAGE: usize = 1000;

fn request_for(cli: &Cli) -> Result<Request, Failure> {
    Ok(match &cli.command {
        Command::Jobs(cmd) => match cmd {
            JobsCommand::List => get(format!("/api/v1/jobs?limit={JOBS_PAGE}&offset=0")),
            JobsCommand::Add {
                name,
                job_type,
                processor,
                fields,
                ..
            } => {
                let mut patch = super::commands::job_patch(fields)?;
                patch.job_type = Some(super::commands::job_type(job_type)?);
                patch.processor = Some(processor.clone());
                post(
                    "/api/v1/jobs".into(),
                    Some(Json::Object(job_body(Some(name), &patch))),
                )
            }
            JobsCommand::Edit {
                name,
                job_type,
                processor,
                fields,
                ..
            } => {
                let mut patch = super::commands::job_patch(fields)?;
                patch.job_type = job_type
                    .as_deref()
                    .map(super::commands::job_type)
                    .transpose()?;
                patch.processor = processor.clone();
                Request {
                    method: "PATCH",
                    path: format!("/api/v1/jobs/{}", seg(name)),
                    body: Some(Json::Object(job_body(None, &patch))),
                }
            }
            JobsCommand::Remove { name } => Request {
                method: "DELETE",
                path: format!("/api/v1/jobs/{}", seg(name)),
                body: None,
            },
            JobsCommand::Show { name } => get(format!("/api/v1/jobs/{}", seg(name))),
            JobsCommand::Run {
                name,
                params,
                start_within,
            } => {
                let params = params
                    .as_deref()
                    .map(serde_json::from_str::<Json>)
                    .transpose()
                    .map_err(|e| {
                        Failure::from(crate::ops::OpError::invalid(
                            "--params",
                            format!("not JSON: {e}"),
                        ))
                    })?;
                post(
                    format!("/api/v1/jobs/{}/runs", seg(name)),
                    Some(json!({ "params": params, "start_within_ms": start_within })),
                )
            }
            JobsCommand::Enable { name } => {
                post(format!("/api/v1/jobs/{}/enable", seg(name)), None)
            }
            JobsCommand::Disable { name } => {
                post(format!("/api/v1/jobs/{}/disable", seg(name)), None)
            }
            JobsCommand::Pin { name, pin } => Request {
                method: "PUT",
                path: format!("/api/v1/jobs/{}/pin", seg(name)),
                body: Some(json!({ "pin": (pin != "none").then_some(pin) })),
            },
            JobsCommand::Next { name, count } => {
                get(format!("/api/v1/jobs/{}/next?count={count}", seg(name)))
            }
        },
        Command::Runs(cmd) => match cmd {
            RunsCommand::List {
                job,
                status,
                since,
                until,
                before,
                limit,
            } => get(format!(
                "/api/v1/runs?{}",
                query(&[
                    ("job", job.clone()),
                    ("status", status.clone()),
                    ("since", since.clone()),
                    ("until", until.clone()),
                    ("before", before.map(|b| b.to_string())),
                    ("node", cli.node.clone()),
                    ("limit", Some(limit.to_string())),
                ])
            )),
            RunsCommand::Show { id } => get(format!("/api/v1/runs/{id}")),
            RunsCommand::Tree { id } => get(format!("/api/v1/runs/{id}/tree")),
            RunsCommand::Cancel { id } => post(format!("/api/v1/runs/{id}/cancel"), None),
            RunsCommand::Retry { id } => post(format!("/api/v1/runs/{id}/retry"), None),
        },
        Command::Decisions { limit, all_nodes } => get(format!(
            "/api/v1/decisions?limit={limit}&all_nodes={all_nodes}"
        )),
        Command::Nodes(NodesCommand::List) => get("/api/v1/nodes".into()),
        other => return Err(unsupported(&format!("`{}`", command_name(other)))),
    })
}

fn command_name(c: &Command) -> String {
    format!("{c:?}")
        .split(|ch: char| !ch.is_alphanumeric())
        .next()
        .unwrap_or_default()
        .to_lowercase()
}

/// Sends the request; returns the status and the body as JSON.
fn send(url: &str, token: &str, r: Request) -> Result<(u16, Json), Failure> {
    let target = format!("{}{}", url.trim_end_matches('/'), r.path);
    actix_rt::System::new().block_on(async move {
        let client = awc::Client::builder()
            .timeout(std::time::Duration::from_secs(30))
            .finish();
        let req = match r.method {
            "GET" => client.get(&target),
            "PUT" => client.put(&target),
            "PATCH" => client.patch(&target),
            "DELETE" => client.delete(&target),
            _ => client.post(&target),
        }
        .bearer_auth(token);
        let sent = match r.body {
            Some(b) => req.send_json(&b).await,
            None => req.send().await,
        };
        let mut res = sent.map_err(|e| {
            Failure::new(
                EXIT_TEMPFAIL,
                format!("{target}: cannot reach the node: {e}"),
            )
        })?;
        let bytes = res
            .body()
            .limit(64 << 20)
            .await
            .map_err(|e| Failure::new(EXIT_TEMPFAIL, format!("{target}: {e}")))?;
        let value = if bytes.is_empty() {
            Json::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Json::String(String::from_utf8_lossy(&bytes).into_owned()))
        };
        Ok((res.status().as_u16(), value))
    })
}

fn failure(status: u16, body: &Json) -> Failure {
    let code = match status {
        401 | 403 => EXIT_NOPERM,
        404 | 409 | 422 => EXIT_DATA,
        400 | 413 | 415 => EXIT_USAGE,
        429 | 503 => EXIT_TEMPFAIL,
        421 => EXIT_NO_INPUT,
        _ => EXIT_FAILURE,
    };
    let reason = body["reason"].as_str().unwrap_or("").to_string();
    let message = body["error"]
        .as_str()
        .map(String::from)
        .unwrap_or_else(|| format!("the node answered {status}: {body}"));
    Failure {
        code,
        message: format!("{message} (HTTP {status})"),
        field: body["field"].as_str().map(String::from),
        reason,
    }
}

fn text(v: &Json) -> String {
    match v {
        Json::Null => "-".into(),
        Json::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn table(rows: &Json, columns: &[(&str, &str)]) {
    let headers: Vec<&str> = columns.iter().map(|(h, _)| *h).collect();
    let rows = rows
        .as_array()
        .map(|rows| {
            rows.iter()
                .map(|r| {
                    columns
                        .iter()
                        .map(|(_, path)| text(r.pointer(path).unwrap_or(&Json::Null)))
                        .collect()
                })
                .collect()
        })
        .unwrap_or_default();
    render::table(&headers, rows);
}

fn fields(v: &Json) {
    if let Some(map) = v.as_object() {
        let pairs: Vec<(&str, String)> = map.iter().map(|(k, v)| (k.as_str(), text(v))).collect();
        render::fields(&pairs);
    } else {
        println!("{}", text(v));
    }
}

/// Runs the command against the node at `url`.
pub fn run(cli: &Cli, url: &str) -> Result<(), Failure> {
    let token = std::env::var(TOKEN_ENV).map_err(|_| {
        Failure::new(
            EXIT_USAGE,
            format!("--url needs the node's API token in {TOKEN_ENV} (jobvisor tokens create)"),
        )
    })?;
    let request = request_for(cli)?;
    let (status, mut body) = send(url, &token, request)?;
    if !(200..300).contains(&status) {
        return Err(failure(status, &body));
    }
    // Every job, a page at a time.
    if matches!(cli.command, Command::Jobs(JobsCommand::List)) {
        let total = body["total"].as_u64().unwrap_or(0) as usize;
        let mut offset = JOBS_PAGE;
        while offset < total {
            let path = format!("/api/v1/jobs?limit={JOBS_PAGE}&offset={offset}");
            let (status, page) = send(url, &token, get(path))?;
            if !(200..300).contains(&status) {
                return Err(failure(status, &page));
            }
            let more = page["items"].as_array().cloned().unwrap_or_default();
            if more.is_empty() {
                break;
            }
            if let Some(items) = body["items"].as_array_mut() {
                items.extend(more);
            }
            offset += JOBS_PAGE;
        }
        body["limit"] = body["total"].clone();
    }
    if cli.json {
        render::json(&body);
        return Ok(());
    }
    match &cli.command {
        Command::Jobs(JobsCommand::List) => table(
            &body["items"],
            &[
                ("NAME", "/name"),
                ("TYPE", "/type"),
                ("PROCESSOR", "/processor"),
                ("PRIORITY", "/priority"),
                ("ENABLED", "/enabled"),
                ("ACTIVATION", "/activation/state"),
                ("SCHEDULE", "/schedule"),
                ("LAST END", "/last_end"),
            ],
        ),
        Command::Runs(RunsCommand::List { .. }) => table(
            &body,
            &[
                ("ID", "/id"),
                ("JOB", "/job"),
                ("STATUS", "/status"),
                ("ATTEMPT", "/attempt"),
                ("SLOT", "/scheduled_for"),
                ("STARTED", "/started_at"),
                ("ELAPSED MS", "/elapsed_ms"),
                ("NODE", "/node"),
                ("ERROR", "/error"),
            ],
        ),
        // The API's own view, printed by the local command's renderer: the same columns
        // (cause, readings with units and thresholds) and local times.
        Command::Decisions { .. } => {
            let rows: Vec<DecisionView> = serde_json::from_value(body).map_err(|e| {
                Failure::new(
                    EXIT_FAILURE,
                    format!("the node's decisions are not the API's decision list: {e}"),
                )
            })?;
            render::decisions(&rows);
        }
        // The API's own view, printed by the local command's renderer.
        Command::Runs(RunsCommand::Tree { .. }) => {
            let t: crate::ops::runs::TreeView = serde_json::from_value(body).map_err(|e| {
                Failure::new(
                    EXIT_FAILURE,
                    format!("the node's answer is not the API's run tree: {e}"),
                )
            })?;
            render::tree(&t);
        }
        Command::Nodes(NodesCommand::List) => {
            let rows: Vec<NodeView> = serde_json::from_value(body).map_err(|e| {
                Failure::new(
                    EXIT_FAILURE,
                    format!("the node's answer is not the API's node list: {e}"),
                )
            })?;
            render::nodes(&rows);
        }
        Command::Jobs(JobsCommand::Run { name, .. }) => {
            println!("run {} of `{name}` queued", text(&body["run_ids"][0]));
        }
        Command::Jobs(JobsCommand::Add { name, .. }) => println!("job `{name}` added"),
        Command::Jobs(JobsCommand::Edit { name, .. }) => {
            let changed = body["change"] != "unchanged";
            println!(
                "job `{name}` {}",
                if changed { "changed" } else { "unchanged" }
            );
        }
        Command::Jobs(JobsCommand::Remove { name }) => println!("job `{name}` removed"),
        _ => fields(&body),
    }
    Ok(())
}
