//! The `runs` commands (list, show, tree, cancel, retry) and `decisions`.

use super::args::{Cli, RunsCommand};
use super::commands::{CliResult, list, parse_choice, reading, writing};
use super::render;
use crate::model::RunStatus;
use crate::ops::OpError;
use crate::ops::runs::{Cancelled, RunQuery};

/// `--since`: a duration back from `now` (`90s`, `15m`, `2h`, `1d`) or a time (RFC 3339, or
/// `YYYY-MM-DD[ HH:MM[:SS]]` local).
pub fn parse_since(text: &str, now: i64) -> Result<i64, OpError> {
    crate::ops::view::parse_instant("--since", text, now)
}

pub(super) fn runs(cli: &Cli, cmd: &RunsCommand) -> CliResult {
    match cmd {
        RunsCommand::List {
            job,
            status,
            since,
            until,
            before,
            limit,
        } => {
            let status = status
                .as_deref()
                .map(|s| parse_choice("--status", s, RunStatus::parse, &RunStatus::expected()))
                .transpose()?;
            let now = crate::catalog::now_ms();
            let instant = |flag: &str, text: &Option<String>| {
                text.as_deref()
                    .map(|s| crate::ops::view::parse_instant(flag, s, now))
                    .transpose()
            };
            let query = RunQuery {
                job: job.clone(),
                status,
                node: cli.node.clone(),
                since: instant("--since", since)?,
                until: instant("--until", until)?,
                before: *before,
                after: None,
                limit: *limit,
            };
            let rows = reading(cli)?.runs(&query).map_err(|e| match e {
                OpError::Invalid {
                    field: Some(f),
                    reason,
                } if f == "limit" || f == "until" => OpError::invalid(format!("--{f}"), reason),
                other => other,
            })?;
            let headers = [
                "ID", "JOB", "STATUS", "ATTEMPT", "SLOT", "STARTED", "ELAPSED", "NODE", "ERROR",
            ];
            list(cli, &rows, &headers, |r| {
                vec![
                    r.id.to_string(),
                    r.job.clone(),
                    r.status.clone(),
                    r.attempt.to_string(),
                    render::time(r.scheduled_for),
                    render::time(r.started_at),
                    render::duration(r.elapsed_ms),
                    r.node.clone().unwrap_or_else(|| "-".into()),
                    r.error
                        .as_deref()
                        .map_or(String::new(), |e| render::abbreviate(e, 60)),
                ]
            });
        }
        RunsCommand::Show { id } => {
            let r = reading(cli)?.run(*id)?;
            if cli.json {
                render::json(&r);
                return Ok(());
            }
            let opt = |v: Option<i64>| v.map_or("-".into(), |v| v.to_string());
            let mut status = r.status.clone();
            if r.cancel_requested && (r.status == "claimed" || r.status == "running") {
                status.push_str(" (cancel requested)");
            }
            render::fields(&[
                ("run", r.id.to_string()),
                ("job", r.job.clone()),
                ("status", status),
                ("attempt", r.attempt.to_string()),
                ("priority", r.priority_text()),
                ("slot", render::time_long(r.scheduled_for)),
                ("queued", render::time_long(Some(r.created_at))),
                ("claimed", render::time_long(r.claimed_at)),
                ("started", render::time_long(r.started_at)),
                ("finished", render::time_long(r.finished_at)),
                ("elapsed", render::duration(r.elapsed_ms)),
                ("node", r.node.clone().unwrap_or_else(|| "-".into())),
                ("parent run", opt(r.parent)),
                ("root run", opt(r.root)),
                ("retry of", opt(r.retry_of)),
                ("params", render::value(r.params.as_ref())),
                ("result", render::value(r.result.as_ref())),
                ("error", r.error.clone().unwrap_or_else(|| "-".into())),
                ("output", r.log.clone().unwrap_or_else(|| "-".into())),
            ]);
        }
        RunsCommand::Tree { id } => {
            let t = reading(cli)?.tree(*id)?;
            if cli.json {
                render::json(&t);
            } else {
                render::tree(&t);
            }
        }
        RunsCommand::Cancel { id } => {
            let outcome = writing(cli)?.cancel_run(*id)?;
            if cli.json {
                render::json(&serde_json::json!({ "run_id": id, "result": outcome }));
            } else if outcome == Cancelled::Cancelled {
                println!("run {id} cancelled (it had not started)");
            } else {
                println!(
                    "run {id} is executing: its node was asked to cancel it (a command's process \
                     group is killed); `jobvisor runs show {id}` shows when it is cancelled"
                );
            }
        }
        RunsCommand::Retry { id } => {
            let new = writing(cli)?.retry_run(*id)?;
            if cli.json {
                render::json(&serde_json::json!({ "run_id": new, "retry_of": id }));
            } else if new == *id {
                println!(
                    "workflow run {id} running again: its failed steps are queued, and the \
                     steps after them follow (`jobvisor runs tree {id}`)"
                );
            } else {
                println!("run {new} queued: a new attempt of run {id}");
            }
        }
    }
    Ok(())
}

pub(super) fn decisions(cli: &Cli, limit: i64, all_nodes: bool) -> CliResult {
    let rows = reading(cli)?
        .decisions(limit, all_nodes)
        .map_err(|e| match e {
            OpError::Invalid {
                field: Some(f),
                reason,
            } if f == "limit" => OpError::invalid("--limit", reason),
            other => other,
        })?;
    if cli.json {
        render::json(&rows);
    } else {
        render::decisions(&rows);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_takes_durations_and_times() {
        let now = 1_000_000_000_000;
        assert_eq!(parse_since("90s", now).unwrap(), now - 90_000);
        assert_eq!(parse_since("2h", now).unwrap(), now - 7_200_000);
        assert_eq!(
            parse_since("2026-12-01T08:00:00Z", now).unwrap(),
            1_796_112_000_000
        );
        assert!(parse_since("yesterday", now).is_err());
    }
}
