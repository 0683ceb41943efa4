//! One function per command: arguments → an operation of [`crate::ops`] → output.

use std::path::Path;

use serde_json::{Map as JsonMap, Value as Json};

use super::args::{
    Cli, Command, Format, JobFields, JobsCommand, NodesCommand, ObjectFields, ObjectsCommand,
    ProcessorFields, ProcessorsCommand, RunArgs, RunsCommand,
};
use super::{EXIT_CONFIG, EXIT_DATA, Failure, load_config, render};
use crate::catalog::{Access, ImportReport};
use crate::config::{self, NodeConfig};
use crate::jobconf::{CatalogFile, toml_format};
use crate::model::{JobType, ObjectType, Pin, RunStatus};
use crate::ops::files::{self, Parsed};
use crate::ops::jobs::{Change, JobPatch, Saved};
use crate::ops::objects::ObjectPatch;
use crate::ops::processors::ProcessorPatch;
use crate::ops::runs::{Cancelled, RunQuery};
use crate::ops::{Caller, OpError, Opened, Ops, Warning};
use crate::schedule::{MisfirePolicy, OverlapPolicy};

type CliResult = Result<(), Failure>;

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

fn config_of(cli: &Cli) -> Result<NodeConfig, Failure> {
    load_config(cli, &RunArgs::default())
}

/// Opens the catalog for `access`, on behalf of the CLI user.
fn open(cli: &Cli, access: Access) -> Result<(Ops, Opened), Failure> {
    let cfg = config_of(cli)?;
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

fn builtin_functions() -> Vec<String> {
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
fn warn(warnings: &[Warning], strict: bool, json: bool) -> CliResult {
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

fn parse(path: &Path, format: Format) -> Result<Parsed, Failure> {
    let format = match format {
        Format::Toml => files::Format::Toml,
        Format::Millix => files::Format::Millix,
    };
    Ok(files::parse_file(path, format)?)
}

fn print_unmapped(parsed: &Parsed) {
    for n in &parsed.unmapped {
        eprintln!("{}", n.render(&format!("{} (not mapped)", parsed.name)));
    }
}

fn summary(file: &CatalogFile) -> String {
    format!(
        "{} processor(s), {} object(s), {} group(s), {} job(s)",
        file.processors.len(),
        file.objects.len(),
        file.groups.len(),
        file.jobs.len()
    )
}

fn check(cli: &Cli, path: &Path, format: Format, strict: bool) -> CliResult {
    let parsed = parse(path, format)?;
    print_unmapped(&parsed);
    let known = builtin_functions().into_iter().collect();
    let warnings = files::function_warnings(&parsed.file, &known);
    warn(&warnings, strict, cli.json)?;
    if cli.json {
        render::json(&serde_json::json!({
            "file": parsed.name,
            "ok": true,
            "processors": parsed.file.processors.len(),
            "objects": parsed.file.objects.len(),
            "groups": parsed.file.groups.len(),
            "jobs": parsed.file.jobs.len(),
            "not_mapped": parsed.unmapped.iter().map(|d| d.render(&parsed.name)).collect::<Vec<_>>(),
            "warnings": warnings,
        }));
    } else {
        println!("{}: ok: {}", parsed.name, summary(&parsed.file));
    }
    Ok(())
}

fn import(cli: &Cli, path: &Path, format: Format, strict: bool) -> CliResult {
    let parsed = parse(path, format)?;
    print_unmapped(&parsed);
    if strict && !parsed.unmapped.is_empty() {
        return Err(Failure::new(
            EXIT_CONFIG,
            format!(
                "{}: {} item(s) cannot be mapped (--strict); nothing was changed",
                parsed.name,
                parsed.unmapped.len()
            ),
        ));
    }
    let known = builtin_functions().into_iter().collect();
    warn(
        &files::function_warnings(&parsed.file, &known),
        strict,
        true,
    )?;
    let (mut ops, _) = open(cli, Access::Create)?;
    let imported = ops.import(&parsed)?;
    if cli.json {
        render::json(&imported);
        return Ok(());
    }
    for w in &imported.warnings {
        eprintln!("warning: {w}");
    }
    let r = &imported.report;
    println!(
        "{}: imported into {}: {} created, {} updated, {} unchanged",
        imported.file,
        imported.catalog,
        r.created.len(),
        r.updated.len(),
        r.unchanged
    );
    print_changes(r);
    Ok(())
}

fn print_changes(r: &ImportReport) {
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

fn init(cli: &Cli) -> CliResult {
    let (ops, opened) = open(cli, Access::Create)?;
    let jobs = ops.jobs()?.len();
    let path = ops.catalog().path().display().to_string();
    if cli.json {
        render::json(&serde_json::json!({
            "catalog": path,
            "seeded": opened == Opened::Seeded,
            "jobs": jobs,
        }));
    } else if opened == Opened::Seeded {
        println!("{path}: new catalog seeded with {jobs} job(s)");
    } else {
        println!("{path}: catalog exists ({jobs} job(s)); not re-seeded");
    }
    Ok(())
}

fn export(cli: &Cli, output: Option<&Path>) -> CliResult {
    let text = reading(cli)?.export()?;
    match output {
        // The same entries as JSON: job.conf's tables as objects (`processor`, `job`, …).
        None if cli.json => render::json(&toml_as_json(&text)?),
        None => print!("{text}"),
        Some(path) => {
            let tmp = path.with_extension("tmp");
            let write = std::fs::write(&tmp, &text).and_then(|()| std::fs::rename(&tmp, path));
            if let Err(e) = write {
                let _ = std::fs::remove_file(&tmp);
                return Err(Failure::new(
                    super::EXIT_FAILURE,
                    format!("{}: cannot write: {e}", path.display()),
                ));
            }
            if cli.json {
                render::json(&serde_json::json!({ "exported": path.display().to_string() }));
            }
        }
    }
    Ok(())
}

/// TOML text this build wrote (an export, the defaults) as the same tree in JSON.
fn toml_as_json(text: &str) -> Result<Json, Failure> {
    let value: toml::Table = toml::from_str(text)
        .map_err(|e| Failure::new(super::EXIT_FAILURE, format!("cannot read back TOML: {e}")))?;
    serde_json::to_value(value).map_err(|e| Failure::new(super::EXIT_FAILURE, e.to_string()))
}

fn show_config(cli: &Cli, print_defaults: bool) -> CliResult {
    if print_defaults {
        if cli.json {
            render::json(&NodeConfig::default());
        } else {
            print!("{}", config::DEFAULT_TOML);
        }
        return Ok(());
    }
    let mut cfg = config_of(cli)?;
    // Show what the node would use, not the empty strings that mean "resolve at start".
    cfg.node.name = cfg.node_name();
    cfg.node.timezone = cfg.timezone().name().to_string();
    cfg.database.path = cfg.db_path().display().to_string();
    if cli.json {
        render::json(&cfg);
        return Ok(());
    }
    let effective = toml::Table::try_from(&cfg)
        .map_err(|e| Failure::new(super::EXIT_FAILURE, e.to_string()))?;
    print!("{}", annotated_config(&effective));
    Ok(())
}

/// The effective configuration in the layout of `config/default.toml` — its comments give
/// each key's unit and default — with each value replaced by the effective one, and a note
/// where a value means something resolved later (the built-in seed) or is a size in bytes.
fn annotated_config(effective: &toml::Table) -> String {
    let mut out = String::new();
    let mut section = String::new();
    for line in config::DEFAULT_TOML.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('[') {
            section = trimmed.trim_matches(|c| c == '[' || c == ']').to_string();
        }
        let key = (!trimmed.starts_with('#'))
            .then(|| trimmed.split_once('='))
            .flatten()
            .map(|(k, _)| k.trim());
        // Keys before the first [section] (the `inbox` list) are the file's own.
        let value = key.and_then(|k| match section.as_str() {
            "" => effective.get(k).map(|v| (k, v)),
            _ => effective.get(&section)?.get(k).map(|v| (k, v)),
        });
        let Some((key, value)) = value else {
            out.push_str(line);
            out.push('\n');
            continue;
        };
        let mut shown = format!("{key} = {value}");
        match (key, value) {
            ("seed", toml::Value::String(s)) if s.is_empty() => {
                shown.push_str("  # the built-in config/job.conf")
            }
            (k, toml::Value::Integer(n)) if k.starts_with("memory_") => {
                shown.push_str(&format!("  # {}", render::bytes(*n as f64)))
            }
            _ => {}
        }
        out.push_str(&shown);
        out.push('\n');
    }
    out
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

fn parse_choice<T>(
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
            let mut ops = writing(cli)?;
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
            let mut ops = writing(cli)?;
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
        JobsCommand::Run { name, params } => {
            let params = params
                .as_deref()
                .map(|p| json_object("--params", p).map(Json::Object))
                .transpose()?;
            let id = writing(cli)?.trigger(name, params.as_ref())?;
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
fn list<T: serde::Serialize>(
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

/// `--since`: a duration back from `now` (`90s`, `15m`, `2h`, `1d`) or a time (RFC 3339, or
/// `YYYY-MM-DD[ HH:MM[:SS]]` local).
pub fn parse_since(text: &str, now: i64) -> Result<i64, OpError> {
    crate::ops::view::parse_instant("--since", text, now)
}

fn runs(cli: &Cli, cmd: &RunsCommand) -> CliResult {
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
            if r.cancel_requested && r.status == "running" {
                status.push_str(" (cancel requested)");
            }
            render::fields(&[
                ("run", r.id.to_string()),
                ("job", r.job.clone()),
                ("status", status),
                ("attempt", r.attempt.to_string()),
                ("slot", render::time_long(r.scheduled_for)),
                ("queued", render::time_long(Some(r.created_at))),
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

fn decisions(cli: &Cli, limit: i64, all_nodes: bool) -> CliResult {
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
