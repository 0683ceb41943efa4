//! One function per command: arguments → an operation of [`crate::ops`] → output.
//! This file dispatches them and holds the catalog's entity commands (jobs, processors,
//! objects, nodes); `files.rs` the catalog file and configuration commands, `runs.rs` runs and
//! decisions, `accounts.rs` users and tokens, `stats.rs` stat series.

use serde_json::{Map as JsonMap, Value as Json};

use super::args::{
    Cli, Command, JobFields, JobsCommand, NodesCommand, ObjectFields, ObjectsCommand,
    ProcessorFields, ProcessorsCommand, RunArgs,
};
use super::files::{check, export, import, init, show_config};
use super::runs::{decisions, runs};
use super::{EXIT_DATA, Failure, load_config, render};
use crate::catalog::{Access, ImportReport};
use crate::config::NodeConfig;
use crate::jobconf::{CatalogFile, toml_format};
use crate::model::{JobType, ObjectType, Pin};
use crate::ops::jobs::{Change, JobPatch, Saved};
use crate::ops::objects::ObjectPatch;
use crate::ops::processors::ProcessorPatch;
use crate::ops::{Caller, OpError, Opened, Ops, Warning};
use crate::schedule::{MisfirePolicy, OverlapPolicy};

pub(super) type CliResult = Result<(), Failure>;

/// Runs one parsed command.
pub fn run(cli: &Cli) -> CliResult {
    if let Some(url) = &cli.url
        && !matches!(cli.command, Command::Run(_))
    {
        return super::remote::run(cli, url);
    }
    match &cli.command {
        Command::Run(args) => {
            let cfg = load_config(cli, args)?;
            crate::daemon::run(cfg)
                .map_err(|e| Failure::new(super::exit_code(e.kind()), e.to_string()))
        }
        Command::Check {
            file,
            format,
            strict,
        } => check(cli, file, *format, *strict),
        Command::Import {
            file,
            format,
            strict,
        } => import(cli, file, *format, *strict),
        Command::Config { print_defaults } => show_config(cli, *print_defaults),
        Command::Init => init(cli),
        Command::Export { output } => export(cli, output.as_deref()),
        Command::Jobs(cmd) => jobs(cli, cmd),
        Command::Processors(cmd) => processors(cli, cmd),
        Command::Objects(cmd) => objects(cli, cmd),
        Command::Runs(cmd) => runs(cli, cmd),
        Command::Nodes(NodesCommand::List) => {
            let rows = reading(cli)?.nodes(crate::catalog::now_ms())?;
            if cli.json {
                render::json(&rows);
            } else {
                render::nodes(&rows);
            }
            Ok(())
        }
        Command::Decisions { limit, all_nodes } => decisions(cli, *limit, *all_nodes),
        Command::Pause {
            scope,
            name,
            fleet,
            reason,
        } => {
            let ops = writing(cli)?;
            let scope = crate::ops::pauses::parse_scope(scope, "scope")?;
            let at = ops.pause_where(*fleet);
            let view = ops.pause(scope, name, &at, reason.as_deref())?;
            if cli.json {
                render::json(&view);
            } else {
                match &view.node {
                    Some(node) => println!("paused {} {} on node {node}", scope.as_str(), name),
                    None => println!("paused {} {} on every node", scope.as_str(), name),
                }
            }
            Ok(())
        }
        Command::Resume { scope, name, fleet } => {
            let ops = writing(cli)?;
            let scope = crate::ops::pauses::parse_scope(scope, "scope")?;
            let at = ops.pause_where(*fleet);
            ops.resume(scope, name, &at)?;
            if !cli.json {
                println!("resumed {} {}", scope.as_str(), name);
            }
            Ok(())
        }
        Command::Pauses => {
            let rows = reading(cli)?.pauses()?;
            if cli.json {
                render::json(&rows);
            } else {
                render::pauses(&rows);
            }
            Ok(())
        }
        Command::Users(cmd) => super::accounts::users(cli, cmd),
        Command::Tokens(cmd) => super::accounts::tokens(cli, cmd),
        Command::Stats {
            stat_type,
            subject,
            since,
            limit,
            all_nodes,
        } => super::stats::run(
            cli,
            stat_type.as_deref(),
            subject.as_deref(),
            since.as_deref(),
            *limit,
            *all_nodes,
        ),
    }
}

pub(super) fn config_of(cli: &Cli) -> Result<NodeConfig, Failure> {
    load_config(cli, &RunArgs::default())
}

/// Opens the catalog for `access`, on behalf of the CLI user.
pub(super) fn open(cli: &Cli, access: Access) -> Result<(Ops, Opened), Failure> {
    let mut cfg = config_of(cli)?;
    // A person waits for a command: a PostgreSQL server that does not answer is reported after
    // a few seconds, not after the minute a node waits for its server to come back.
    cfg.database.reconnect_for = cfg.database.reconnect_for.min(CLI_RECONNECT_MS);
    let caller = Caller {
        actor: "cli".into(),
        node: cli.node.clone().unwrap_or_else(|| cfg.node_name()),
    };
    let (ops, opened) = Ops::open(&cfg, access, caller)?;
    Ok((
        ops.with_functions(builtin_functions().iter().map(String::as_str)),
        opened,
    ))
}

/// How long a command waits for a PostgreSQL server that does not answer, ms.
const CLI_RECONNECT_MS: u64 = 5_000;

pub(super) fn builtin_functions() -> Vec<String> {
    crate::runtime::builtins::registry()
        .names()
        .map(String::from)
        .collect()
}

pub(super) fn reading(cli: &Cli) -> Result<Ops, Failure> {
    open(cli, Access::ReadOnly).map(|(ops, _)| ops)
}

pub(super) fn writing(cli: &Cli) -> Result<Ops, Failure> {
    open(cli, Access::ReadWrite).map(|(ops, _)| ops)
}

/// Prints warnings on stderr, or refuses them with `--strict`.
pub(super) fn warn(warnings: &[Warning], strict: bool, json: bool) -> CliResult {
    if strict && !warnings.is_empty() {
        let first = &warnings[0];
        let mut f = Failure::new(
            EXIT_DATA,
            warnings
                .iter()
                .map(|w| format!("{w} (--strict)"))
                .collect::<Vec<_>>()
                .join("\n")
                + "\nnothing was changed",
        );
        f.field = Some(first.field.clone());
        f.reason = first.reason.clone();
        return Err(f);
    }
    if !json {
        for w in warnings {
            eprintln!("warning: {w}");
        }
    }
    Ok(())
}

pub(super) fn print_changes(r: &ImportReport) {
    for c in r.changes.iter().filter(|c| c.change != "unchanged") {
        println!("  {} {} {}", c.change, c.section, c.name);
        for f in &c.fields {
            println!(
                "      {}: {} → {}",
                f.field,
                f.before.as_deref().unwrap_or("(default)"),
                f.after.as_deref().unwrap_or("(default)")
            );
        }
    }
}

fn json_object(flag: &str, text: &str) -> Result<JsonMap<String, Json>, Failure> {
    match serde_json::from_str::<Json>(text) {
        Ok(Json::Object(map)) => Ok(map),
        Ok(other) => {
            Err(OpError::invalid(flag, format!("expected a JSON object, got {other}")).into())
        }
        Err(e) => Err(OpError::invalid(flag, format!("not JSON: {e}")).into()),
    }
}

pub(super) fn parse_choice<T>(
    flag: &str,
    value: &str,
    parse: impl Fn(&str) -> Option<T>,
    expected: &str,
) -> Result<T, Failure> {
    parse(value).ok_or_else(|| {
        OpError::invalid(flag, format!("expected one of {expected}, got `{value}`")).into()
    })
}

pub(super) fn job_type(value: &str) -> Result<JobType, Failure> {
    parse_choice("--type", value, JobType::parse, &JobType::expected())
}

pub(super) fn job_patch(f: &JobFields) -> Result<JobPatch, Failure> {
    Ok(JobPatch {
        group: f.group.clone().map(|g| Some(g).filter(|g| !g.is_empty())),
        payload: f
            .payload
            .as_deref()
            .map(|p| json_object("--payload", p))
            .transpose()?,
        description: f.description.clone(),
        priority: f.priority,
        timeout: f.timeout,
        clear_schedule: f.clear_schedule,
        run_always: f.run_always,
        run_delay: f.run_delay,
        run_every: f.run_every,
        run_on_the: f.run_on_the,
        run_at: f.run_at.clone(),
        run_date: f.run_date.clone(),
        cron: f.cron.clone(),
        timezone: f.timezone.clone(),
        misfire_policy: f
            .misfire_policy
            .as_deref()
            .map(|v| {
                parse_choice(
                    "--misfire-policy",
                    v,
                    MisfirePolicy::parse,
                    "once, skip, all",
                )
            })
            .transpose()?,
        misfire_window: f.misfire_window,
        max_catchup: f.max_catchup,
        overlap_policy: f
            .overlap_policy
            .as_deref()
            .map(|v| {
                parse_choice(
                    "--overlap-policy",
                    v,
                    OverlapPolicy::parse,
                    "forbid, queue, allow",
                )
            })
            .transpose()?,
        max_overlap: f.max_overlap,
        max_attempts: f.max_attempts,
        backoff_base: f.backoff_base,
        backoff_max: f.backoff_max,
        objects: (!f.objects.is_empty()).then(|| f.objects.clone()),
        required: f.required,
        stretch_max: f.stretch_max,
        start_within: f.start_within,
        aging: f.aging,
        ..JobPatch::default()
    })
}

fn print_saved(cli: &Cli, saved: &Saved, verb: &str) {
    if cli.json {
        render::json(saved);
        return;
    }
    let name = &saved.job.name;
    if saved.change == Change::Unchanged {
        println!("job `{name}` unchanged");
        return;
    }
    println!("job `{name}` {verb}");
    let a = &saved.job.activation;
    if verb == "added" && a.label() != "active" && a.pinned.is_none() {
        println!(
            "  it starts in standby: node `{}` activates it at its next catalog check when the \
             node is healthy (else in priority order once it is); to run it regardless of \
             health: jobvisor jobs pin {name} active",
            a.node
        );
    }
}

fn jobs(cli: &Cli, cmd: &JobsCommand) -> CliResult {
    match cmd {
        JobsCommand::List => {
            let jobs = reading(cli)?.jobs()?;
            let headers = [
                "NAME",
                "TYPE",
                "PROCESSOR",
                "PRIORITY",
                "STATUS",
                "ACTIVATION",
                "SCHEDULE",
                "NEXT RUN",
                "LAST END",
                "WHY",
            ];
            list(cli, &jobs, &headers, |j| {
                vec![
                    j.name.clone(),
                    j.job_type.to_string(),
                    j.processor.clone(),
                    j.priority.to_string(),
                    if j.enabled { "enabled" } else { "disabled" }.to_string(),
                    j.activation.label(),
                    j.schedule.clone(),
                    render::time(j.next_run_at),
                    render::time(j.last_end),
                    render::abbreviate(j.backoff.as_deref().unwrap_or(&j.activation.reason), 60),
                ]
            });
        }
        JobsCommand::Show { name } => {
            let (job, def) = reading(cli)?.job(name)?;
            if cli.json {
                render::json(&job);
                return Ok(());
            }
            let mut one = CatalogFile::default();
            one.jobs.insert(job.name.clone(), def);
            let text = toml_format::render(&one).map_err(|e| Failure::new(EXIT_DATA, e))?;
            let body = text
                .split_once("\n[")
                .map(|(_, rest)| format!("[{rest}"))
                .unwrap_or_default();
            print!("{body}");
            println!();
            let a = &job.activation;
            render::fields(&[
                ("# schedule", job.schedule.clone()),
                (
                    "# activation",
                    format!("{} on node `{}`: {}", a.label(), a.node, a.reason),
                ),
                (
                    "# backoff",
                    job.backoff.clone().unwrap_or_else(|| "-".into()),
                ),
                ("# in progress", job.in_progress.to_string()),
                ("# next run", render::time_long(job.next_run_at)),
                ("# last begin", render::time_long(job.last_begin)),
                ("# last end", render::time_long(job.last_end)),
                ("# last elapsed", render::duration(job.last_elapsed_ms)),
                ("# last result", render::value(job.last_response.as_ref())),
            ]);
        }
        JobsCommand::Add {
            name,
            job_type: t,
            processor,
            fields,
            strict,
        } => {
            let job_type = job_type(t)?;
            let patch = job_patch(fields)?;
            let ops = writing(cli)?;
            let preview = ops.warnings(&one_job(name, job_type, &patch));
            warn(&preview, *strict, true)?;
            let saved = ops.add_job(name, job_type, processor, &patch)?;
            warn(&saved.warnings, false, cli.json)?;
            print_saved(cli, &saved, "added");
        }
        JobsCommand::Edit {
            name,
            job_type: t,
            processor,
            fields,
            strict,
        } => {
            let mut patch = job_patch(fields)?;
            patch.job_type = t.as_deref().map(job_type).transpose()?;
            patch.processor = processor.clone();
            let ops = writing(cli)?;
            if *strict {
                let (_, mut def) = ops.job(name)?;
                patch.apply(&mut def);
                let mut one = CatalogFile::default();
                one.jobs.insert(name.clone(), def);
                warn(&ops.warnings(&one), true, true)?;
            }
            let saved = ops.edit_job(name, &patch)?;
            warn(&saved.warnings, false, cli.json)?;
            print_saved(cli, &saved, "changed");
        }
        JobsCommand::Enable { name } | JobsCommand::Disable { name } => {
            let enabled = matches!(cmd, JobsCommand::Enable { .. });
            let change = writing(cli)?.set_job_enabled(name, enabled)?;
            let word = if enabled { "enabled" } else { "disabled" };
            if cli.json {
                render::json(
                    &serde_json::json!({ "job": name, "enabled": enabled, "change": change }),
                );
            } else if change == Change::Unchanged {
                println!("job `{name}` is already {word}; unchanged");
            } else {
                println!("job `{name}` {word}");
            }
        }
        JobsCommand::Remove { name } => {
            writing(cli)?.remove_job(name)?;
            print_removed(cli, "job", name);
        }
        JobsCommand::Pin { name, pin } => {
            let pin = Pin::parse(pin);
            let activation = writing(cli)?.pin_job(name, pin)?;
            if cli.json {
                render::json(&activation);
            } else {
                println!(
                    "job `{name}` on node `{}`: {}",
                    activation.node,
                    pin.map_or("pin removed".to_string(), |p| format!("pinned {p}"))
                );
            }
        }
        JobsCommand::Run {
            name,
            params,
            start_within,
        } => {
            let params = params
                .as_deref()
                .map(|p| json_object("--params", p).map(Json::Object))
                .transpose()?;
            let id = writing(cli)?.trigger(name, params.as_ref(), *start_within)?;
            if cli.json {
                render::json(&serde_json::json!({ "run_id": id, "job": name }));
            } else {
                println!("run {id} of `{name}` queued");
            }
        }
        JobsCommand::Next { name, count } => {
            let now = crate::catalog::now_ms();
            let next = reading(cli)?.next_times(name, usize::from(*count), now)?;
            if cli.json {
                render::json(&next);
                return Ok(());
            }
            println!("{name}: {} ({})", next.schedule, next.timezone);
            let a = &next.activation;
            println!("  {} on node `{}`: {}", a.label(), a.node, a.reason);
            if next.next.is_empty() {
                println!("  no upcoming fire times (on demand or run_always)");
            }
            for t in &next.next {
                println!(
                    "  {}",
                    crate::schedule::format_local(
                        next.timezone.parse().unwrap_or(chrono_tz::UTC),
                        t.ms(),
                    )
                );
            }
        }
    }
    Ok(())
}

fn one_job(name: &str, job_type: JobType, patch: &JobPatch) -> CatalogFile {
    let mut def = crate::jobconf::JobDef::new(job_type, "");
    patch.apply(&mut def);
    let mut one = CatalogFile::default();
    one.jobs.insert(name.to_string(), def);
    one
}

/// A flag whose "" clears the field: `None` = not given, `Some(None)` = clear.
fn clearable(v: &Option<String>) -> Option<Option<String>> {
    v.as_ref()
        .map(|s| Some(s.clone()).filter(|s| !s.is_empty()))
}

fn clearable_int(flag: &str, v: &Option<String>) -> Result<Option<Option<i64>>, Failure> {
    match clearable(v) {
        None => Ok(None),
        Some(None) => Ok(Some(None)),
        Some(Some(s)) => s
            .parse::<i64>()
            .map(|n| Some(Some(n)))
            .map_err(|_| OpError::invalid(flag, format!("expected an integer, got `{s}`")).into()),
    }
}

fn processor_patch(f: &ProcessorFields) -> Result<ProcessorPatch, Failure> {
    Ok(ProcessorPatch {
        instances: f.instances,
        max_instances: clearable_int("--max-instances", &f.max_instances)?,
        prefetch: clearable_int("--prefetch", &f.prefetch)?,
        // Names as written: validation refuses an empty or spaced one, naming it.
        nodes: f.nodes.as_ref().map(|list| {
            if list.is_empty() {
                Vec::new()
            } else {
                list.split(',').map(String::from).collect()
            }
        }),
        ip_address: clearable(&f.ip_address),
        port: clearable_int("--port", &f.port)?,
        rpc_user: clearable(&f.rpc_user),
        rpc_password: clearable(&f.rpc_password),
        enabled: f.enabled,
    })
}

/// A listing: JSON for scripts, an aligned table for people.
pub(super) fn list<T: serde::Serialize>(
    cli: &Cli,
    rows: &[T],
    headers: &[&str],
    row: impl Fn(&T) -> Vec<String>,
) {
    if cli.json {
        render::json(rows);
    } else {
        render::table(headers, rows.iter().map(row).collect());
    }
}

fn print_removed(cli: &Cli, kind: &str, name: &str) {
    if cli.json {
        render::json(&serde_json::json!({ kind: name, "removed": true }));
    } else {
        println!("{kind} `{name}` removed");
    }
}

fn print_report(cli: &Cli, r: &ImportReport) {
    if cli.json {
        render::json(r);
    } else if r.unchanged > 0 && r.created.is_empty() && r.updated.is_empty() {
        for c in &r.changes {
            println!("{} `{}` unchanged", c.section, c.name);
        }
    } else {
        print_changes(r);
    }
}

fn processors(cli: &Cli, cmd: &ProcessorsCommand) -> CliResult {
    match cmd {
        ProcessorsCommand::List => {
            let rows = reading(cli)?.processors()?;
            let headers = [
                "NAME",
                "INSTANCES",
                "MAX",
                "NODES",
                "WHERE",
                "STATUS",
                "JOBS",
                "RUNNING (NODE: INSTANCES)",
            ];
            list(cli, &rows, &headers, |p| {
                vec![
                    p.name.clone(),
                    p.instances.to_string(),
                    p.max_instances.map_or("-".into(), |m| m.to_string()),
                    if p.nodes.is_empty() {
                        "any".into()
                    } else {
                        p.nodes.join(",")
                    },
                    p.remote.clone().unwrap_or_else(|| "local".into()),
                    if p.enabled { "enabled" } else { "disabled" }.into(),
                    p.jobs.to_string(),
                    if p.running.is_empty() {
                        "-".into()
                    } else {
                        p.running
                            .iter()
                            .map(|r| format!("{}: {}", r.node, r.instances))
                            .collect::<Vec<_>>()
                            .join(", ")
                    },
                ]
            });
        }
        ProcessorsCommand::Add { name, fields } | ProcessorsCommand::Edit { name, fields } => {
            let exists = matches!(cmd, ProcessorsCommand::Edit { .. });
            let patch = processor_patch(fields)?;
            let report = writing(cli)?.put_processor(name, &patch, exists)?;
            print_report(cli, &report);
        }
        ProcessorsCommand::Remove { name } => {
            writing(cli)?.remove_processor(name)?;
            print_removed(cli, "processor", name);
        }
    }
    Ok(())
}

fn object_patch(f: &ObjectFields) -> Result<ObjectPatch, Failure> {
    Ok(ObjectPatch {
        object_type: f
            .object_type
            .as_deref()
            .map(|v| parse_choice("--type", v, ObjectType::parse, &ObjectType::expected()))
            .transpose()?,
        conn_string: clearable(&f.conn_string),
        key_field: clearable(&f.key_field),
        name_field: clearable(&f.name_field),
        time_to_live: clearable_int("--time-to-live", &f.time_to_live)?,
        allow_prune: f.allow_prune,
        allow_list: f.allow_list,
        description: clearable(&f.description),
        enabled: f.enabled,
    })
}

fn objects(cli: &Cli, cmd: &ObjectsCommand) -> CliResult {
    match cmd {
        ObjectsCommand::List => {
            let rows = reading(cli)?.objects()?;
            let headers = ["NAME", "TYPE", "CONN", "TTL", "PRUNE", "WRITERS"];
            list(cli, &rows, &headers, |o| {
                vec![
                    o.name.clone(),
                    o.object_type.clone(),
                    o.conn_string.clone().unwrap_or_else(|| "-".into()),
                    o.time_to_live_s
                        .map_or("-".into(), |s| render::duration(Some(s * 1000))),
                    if o.allow_prune { "yes" } else { "no" }.into(),
                    o.writers.to_string(),
                ]
            });
        }
        ObjectsCommand::Add { name, fields } | ObjectsCommand::Edit { name, fields } => {
            let exists = matches!(cmd, ObjectsCommand::Edit { .. });
            let patch = object_patch(fields)?;
            let report = writing(cli)?.put_object(name, &patch, exists)?;
            print_report(cli, &report);
        }
        ObjectsCommand::Remove { name } => {
            writing(cli)?.remove_object(name)?;
            print_removed(cli, "object", name);
        }
    }
    Ok(())
}
