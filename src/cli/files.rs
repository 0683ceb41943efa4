//! The catalog file and configuration commands: `check` and `import` (a job.conf or millix
//! file, its warnings and the changes it makes), `init`, `export`, and `config` (the effective
//! configuration, or the defaults annotated).

use std::path::Path;

use serde_json::Value as Json;

use super::args::{Cli, Format};
use super::commands::{
    CliResult, builtin_functions, config_of, open, print_changes, reading, warn,
};
use super::{EXIT_CONFIG, Failure, render};
use crate::catalog::Access;
use crate::config::{self, NodeConfig};
use crate::jobconf::{CatalogFile, Scope};
use crate::ops::Opened;
use crate::ops::files::{self, Parsed};

pub(super) fn parse(path: &Path, format: Format, scope: Scope) -> Result<Parsed, Failure> {
    let format = match format {
        Format::Toml => files::Format::Toml,
        Format::Millix => files::Format::Millix,
    };
    Ok(files::parse_file(path, format, scope)?)
}

pub(super) fn print_unmapped(parsed: &Parsed) {
    for n in &parsed.unmapped {
        eprintln!("{}", n.render(&format!("{} (not mapped)", parsed.name)));
    }
}

pub(super) fn summary(file: &CatalogFile) -> String {
    format!(
        "{} processor(s), {} object(s), {} group(s), {} job(s)",
        file.processors.len(),
        file.objects.len(),
        file.groups.len(),
        file.jobs.len()
    )
}

pub(super) fn check(cli: &Cli, path: &Path, format: Format, strict: bool) -> CliResult {
    let parsed = parse(path, format, Scope::Whole)?;
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

pub(super) fn import(cli: &Cli, path: &Path, format: Format, strict: bool) -> CliResult {
    let parsed = parse(path, format, Scope::Entries)?;
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
    let (ops, _) = open(cli, Access::Create)?;
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

pub(super) fn init(cli: &Cli) -> CliResult {
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

pub(super) fn export(cli: &Cli, output: Option<&Path>) -> CliResult {
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
pub(super) fn toml_as_json(text: &str) -> Result<Json, Failure> {
    let value: toml::Table = toml::from_str(text)
        .map_err(|e| Failure::new(super::EXIT_FAILURE, format!("cannot read back TOML: {e}")))?;
    serde_json::to_value(value).map_err(|e| Failure::new(super::EXIT_FAILURE, e.to_string()))
}

pub(super) fn show_config(cli: &Cli, print_defaults: bool) -> CliResult {
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
        // A PostgreSQL URL's password is never shown, in JSON either.
        for url in [&mut cfg.database.path, &mut cfg.database.url] {
            if crate::config::is_postgres_url(url) {
                *url = crate::catalog::redact_url(url);
            }
        }
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
pub(super) fn annotated_config(effective: &toml::Table) -> String {
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
        match (section.as_str(), key, value) {
            // A PostgreSQL URL's password is never shown.
            ("database", "url" | "path", toml::Value::String(s))
                if crate::config::is_postgres_url(s) =>
            {
                let redacted = toml::Value::String(crate::catalog::redact_url(s));
                shown = format!("{key} = {redacted}");
                if key == "path" {
                    shown.push_str("  # a PostgreSQL catalog");
                }
            }
            ("database", "url", toml::Value::String(s)) if s.is_empty() => {
                let path = effective
                    .get("database")
                    .and_then(|d| d.get("path"))
                    .and_then(toml::Value::as_str);
                if path.is_some_and(crate::config::is_postgres_url) {
                    shown.push_str("  # none: `path` names the PostgreSQL catalog")
                } else {
                    shown.push_str("  # none: the catalog is the SQLite file of `path`")
                }
            }
            ("http", "tls_cert" | "tls_key", toml::Value::String(s)) if s.is_empty() => {
                shown.push_str("  # none: plain HTTP")
            }
            _ => {}
        }
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
