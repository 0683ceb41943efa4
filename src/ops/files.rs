//! Catalog files: check one without a database, import one (an upsert of the fields it names,
//! all or nothing), export the catalog as job.conf.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use serde::Serialize;

use super::{OpError, Ops, Warning};
use crate::catalog::{ImportReport, objects};
use crate::diag::Diagnostic;
use crate::jobconf::merge::{self, Named};
use crate::jobconf::{self, CatalogFile, Scope, millix, secret, toml_format};
use crate::model::JobType;

/// Catalog file formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// jobvisor's job.conf (TOML).
    Toml,
    /// The millix node's job.json.
    Millix,
}

/// A parsed, validated catalog file.
#[derive(Debug, Clone)]
pub struct Parsed {
    /// The file's name as given.
    pub name: String,
    /// Its entries (shared: an import reads them without a copy).
    pub file: Arc<CatalogFile>,
    /// Its text and format, to place the problems an import finds in context at their lines.
    source: Arc<(String, Format)>,
    /// The fields each entry names (TOML); `None` when every field counts (millix rows carry
    /// them all).
    pub named: Option<Arc<Named>>,
    /// What a millix file holds that cannot be mapped.
    pub unmapped: Vec<Diagnostic>,
}

/// Reads and validates a catalog file, touching no database: as a whole catalog
/// ([`Scope::Whole`], `check`), or as entries to import ([`Scope::Entries`]: a name the file
/// does not define is resolved against the catalog at the import).
pub fn parse_file(path: &Path, format: Format, scope: Scope) -> Result<Parsed, OpError> {
    let text = std::fs::read_to_string(path).map_err(|e| OpError::Input {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    parse_owned(&path.display().to_string(), text, format, scope)
}

/// Parses and validates the text of a file to import (`name` is what diagnostics call it):
/// its references may be the catalog's ([`Scope::Entries`]).
pub fn parse_text(name: &str, text: &str, format: Format) -> Result<Parsed, OpError> {
    parse_text_in(name, text, format, Scope::Entries)
}

/// Parses and validates a catalog file's text in `scope`.
pub fn parse_text_in(
    name: &str,
    text: &str,
    format: Format,
    scope: Scope,
) -> Result<Parsed, OpError> {
    parse_owned(name, text.to_string(), format, scope)
}

/// [`parse_text_in`] keeping `text` (without a copy) to place an import's problems.
fn parse_owned(name: &str, text: String, format: Format, scope: Scope) -> Result<Parsed, OpError> {
    let name = name.to_string();
    let diagnostics = |diagnostics| OpError::File {
        file: name.clone(),
        diagnostics,
    };
    match format {
        Format::Toml => {
            let (file, named) = toml_format::parse_named_in(&text, scope).map_err(diagnostics)?;
            Ok(Parsed {
                name,
                file: Arc::new(file),
                source: Arc::new((text, format)),
                named: Some(Arc::new(named)),
                unmapped: Vec::new(),
            })
        }
        Format::Millix => {
            let m = millix::parse_in(&text, scope).map_err(diagnostics)?;
            Ok(Parsed {
                name,
                file: Arc::new(m.catalog),
                source: Arc::new((text, format)),
                named: None,
                unmapped: m.unmapped,
            })
        }
    }
}

/// Problems found importing `source`'s file into a catalog, as the file's diagnostics (at
/// their lines in job.conf, at their paths in a millix file).
fn located(name: &str, source: &(String, Format), problems: &[jobconf::Problem]) -> OpError {
    let diagnostics = match source.1 {
        Format::Toml => toml_format::locate_problems(&source.0, problems),
        Format::Millix => millix::locate_problems(problems),
    };
    OpError::File {
        file: name.to_string(),
        diagnostics,
    }
}

/// Function jobs of `file` naming a function outside `known` (a job on a remote processor
/// calls the remote node's functions, which this node cannot know).
pub fn function_warnings(file: &CatalogFile, known: &BTreeSet<String>) -> Vec<Warning> {
    let remote = |j: &jobconf::JobDef| {
        file.processors
            .get(&j.processor)
            .is_some_and(|p| p.ip_address.is_some())
    };
    file.jobs
        .iter()
        .filter(|(_, j)| j.job_type == JobType::Function && !remote(j))
        .filter_map(|(name, j)| {
            let function = j.payload.get_str("function")?;
            (!known.contains(&function)).then(|| Warning {
                subject: format!("job `{name}`"),
                field: "payload.function".into(),
                reason: format!(
                    "function `{function}` is not registered in this build: its runs will fail \
                     unless an engine that registers it runs the catalog (built-in functions: {})",
                    known.iter().cloned().collect::<Vec<_>>().join(", ")
                ),
            })
        })
        .collect()
}

/// Custom jobs of `file` naming an executor outside `known`.
pub fn executor_warnings(file: &CatalogFile, known: &BTreeSet<String>) -> Vec<Warning> {
    file.jobs
        .iter()
        .filter(|(_, j)| j.job_type == JobType::Custom)
        .filter_map(|(name, j)| {
            let executor = j.payload.get_str("executor")?;
            (!known.contains(&executor)).then(|| Warning {
                subject: format!("job `{name}`"),
                field: "payload.executor".into(),
                reason: format!(
                    "executor `{executor}` is not registered here: its runs fail unless an \
                     application that registers it (EngineBuilder::executor) runs the catalog"
                ),
            })
        })
        .collect()
}

/// What an import did.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Imported {
    /// The file.
    pub file: String,
    /// The catalog it went into.
    pub catalog: String,
    /// Per entry: created, updated (with the fields that changed) or unchanged.
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub report: ImportReport,
    /// What an operator should know.
    pub warnings: Vec<Warning>,
}

impl Ops {
    /// Upserts a parsed file: new entries as written, existing ones changed only in the fields
    /// the file names; validated as a whole catalog; one transaction.
    pub fn import(&self, parsed: &Parsed) -> Result<Imported, OpError> {
        let warnings = self.warnings(&parsed.file);
        let doing = format!("importing {}", parsed.name);
        let within = self.within(doing);
        let place = self.place();
        let (parsed_file, named) = (Arc::clone(&parsed.file), parsed.named.clone());
        let (name, source) = (parsed.name.clone(), Arc::clone(&parsed.source));
        let report = self
            .catalog
            .update(&self.caller.actor.clone(), "import", move |before| {
                // No copy of the file's entries unless something changes them: a large import
                // would hold them twice.
                let kept = keep_redacted_secrets(before, &parsed_file);
                let file = kept.as_ref().unwrap_or(&*parsed_file);
                let entries =
                    if kept.is_some() || merge::changes_anything(before, file, named.as_deref()) {
                        Arc::new(merge::merge(before, file, named.as_deref()))
                    } else {
                        Arc::clone(&parsed_file)
                    };
                // References resolve against the file and the catalog together: a problem
                // is one the import would add, placed in the file at its line.
                let fresh = fresh_problems(before, &entries, &place);
                if !fresh.is_empty() {
                    return Err(located(&name, &source, &fresh));
                }
                Ok::<_, OpError>(entries)
            })
            .map_err(|e| match e {
                OpError::Catalog(c) => within(c),
                other => other,
            })?;
        Ok(Imported {
            file: parsed.name.clone(),
            catalog: self.catalog.path().display().to_string(),
            report,
            warnings,
        })
    }

    /// The catalog as job.conf text, every stored secret written `***` (a reference
    /// `env:NAME` / `file:PATH` as written): what `jobvisor export` prints and the API serves.
    /// Importing it back into the same catalog keeps the stored secrets.
    pub fn export(&self) -> Result<String, OpError> {
        let file = self
            .catalog
            .export()
            .map_err(self.within("exporting the catalog"))?;
        toml_format::render(&file.redacted()).map_err(|reason| OpError::Invalid {
            field: None,
            reason: format!("the catalog cannot be written as job.conf: {reason}"),
        })
    }
}

/// Where a catalog is: what validation in context needs beyond the entries.
#[derive(Debug, Clone)]
pub(super) struct Place {
    /// The catalog file.
    pub catalog: std::path::PathBuf,
    /// The node's data folder (relative `conn_string`s are in it).
    pub data_dir: std::path::PathBuf,
}

/// Refuses `entries` if storing them over `before` makes the catalog invalid in a way it was
/// not before (a reference that no longer resolves, a field out of range), would store `***`
/// as a secret (a redacted export imported where no secret stands behind it), or would give an
/// object the catalog file itself as its database.
pub(super) fn new_problems(
    before: &CatalogFile,
    entries: &CatalogFile,
    place: &Place,
) -> Result<(), OpError> {
    super::problems_error(fresh_problems(before, entries, place))
}

/// The problems of [`new_problems`], every one.
fn fresh_problems(
    before: &CatalogFile,
    entries: &CatalogFile,
    place: &Place,
) -> Vec<jobconf::Problem> {
    let old: BTreeSet<_> = jobconf::validate(before).into_iter().collect();
    let mut fresh: Vec<_> = jobconf::validate_over(before, entries)
        .into_iter()
        .filter(|p| !old.contains(p))
        .collect();
    for (name, p) in &entries.processors {
        if p.rpc_password.as_deref() == Some(secret::REDACTED) {
            fresh.push(jobconf::Problem {
                section: jobconf::Section::Processor,
                name: name.clone(),
                field: Some("rpc_password"),
                at: None,
                reason: secret::unheld(),
            });
        }
    }
    for (name, o) in &entries.objects {
        let Some(path) = objects::resolve(&place.data_dir, o.conn_string.as_deref()) else {
            continue;
        };
        if objects::is_catalog_file(&place.catalog, &path) {
            fresh.push(jobconf::Problem {
                section: jobconf::Section::Object,
                name: name.clone(),
                field: Some("conn_string"),
                at: None,
                reason: format!(
                    "`{}` is the catalog file itself ({}); an object needs a database file of \
                     its own (sql jobs never run against the catalog)",
                    o.conn_string.as_deref().unwrap_or_default(),
                    place.catalog.display()
                ),
            });
        }
    }
    fresh
}

/// `file` with every secret written `***` (a redacted export) replaced by the stored one, so
/// a catalog exported and imported back keeps its secrets; `None` when there is none to
/// replace (`file` as it is). A `***` with no stored secret
/// behind it stays, for [`new_problems`] to refuse.
fn keep_redacted_secrets(before: &CatalogFile, file: &CatalogFile) -> Option<CatalogFile> {
    let stored = |name: &String| {
        before
            .processors
            .get(name)
            .and_then(|old| old.rpc_password.clone())
    };
    let replaces = file.processors.iter().any(|(name, p)| {
        p.rpc_password.as_deref() == Some(secret::REDACTED) && stored(name).is_some()
    });
    if !replaces {
        return None;
    }
    let mut file = file.clone();
    for (name, p) in file.processors.iter_mut() {
        if p.rpc_password.as_deref() == Some(secret::REDACTED)
            && let Some(stored) = before
                .processors
                .get(name)
                .and_then(|old| old.rpc_password.clone())
        {
            p.rpc_password = Some(stored);
        }
    }
    Some(file)
}
