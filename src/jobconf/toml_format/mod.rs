//! The job.conf TOML format: parse with positions, and render back byte-for-byte stably.
//!
//! Invariant: `parse` reports every problem it can find (not just the first) as a diagnostic
//! with line and column, and `render(parse(render(c))) == render(c)`.
//!
//! `read` turns the text into the file model with where each entry and field was written (a
//! large file part by part); `render` writes a model back; this module places problems at
//! their lines and converts values between TOML and JSON.

mod read;
mod render;

use read::read_spans;
pub use render::render;

use std::collections::HashMap;

use serde_json::Value as Json;
use toml::{Spanned, Value};

use super::{CatalogFile, Scope, Section, validate_in};
use crate::diag::Diagnostic;

/// The catalog file format version this build writes and reads.
pub const FORMAT_VERSION: i64 = 1;

/// Where each entry and field was written, to place semantic problems.
#[derive(Default)]
struct SpanIndex {
    entries: HashMap<(Section, String), EntrySpans>,
    /// An entry was read twice: from two parts of a file read part by part.
    repeated: bool,
}

/// Where an entry's name and each of the fields it names were written (byte offsets in the
/// file).
#[derive(Debug, Clone, Default)]
pub struct EntrySpans {
    at: usize,
    fields: Vec<(&'static str, usize)>,
}

impl EntrySpans {
    /// The fields the entry names.
    pub fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.fields.iter().map(|(f, _)| *f)
    }
}

impl SpanIndex {
    fn entry(&self, section: Section, name: &str) -> Option<&EntrySpans> {
        self.entries.get(&(section, name.to_string()))
    }
}

/// Parses and validates a job.conf. On error, returns every diagnostic found, in file order.
pub fn parse(text: &str) -> Result<CatalogFile, Vec<Diagnostic>> {
    parse_spans(text, Scope::Whole).map(|(file, _)| file)
}

/// Like [`parse`], also returning the fields each entry names (for an upsert that changes
/// only those: [`super::merge`]).
pub fn parse_named(text: &str) -> Result<(CatalogFile, super::merge::Named), Vec<Diagnostic>> {
    parse_named_in(text, Scope::Whole)
}

/// [`parse_named`] for a file of `scope`: the entries of an import may reference the
/// catalog's.
pub fn parse_named_in(
    text: &str,
    scope: Scope,
) -> Result<(CatalogFile, super::merge::Named), Vec<Diagnostic>> {
    let (file, spans) = parse_spans(text, scope)?;
    Ok((file, spans.entries))
}

fn parse_spans(text: &str, scope: Scope) -> Result<(CatalogFile, SpanIndex), Vec<Diagnostic>> {
    let (file, spans, mut diags) = read_spans(text)?;
    let problems = validate_in(&file, scope);
    diags.extend(locate(text, &spans, &problems));
    if diags.is_empty() {
        Ok((file, spans))
    } else {
        diags.sort_by_key(|d| (d.line, d.col));
        Err(diags)
    }
}

/// Each of `problems` (found in the entries of job.conf `text`, or in a catalog they were
/// laid over) as a diagnostic at its line: the field's, else the entry's; a problem of an
/// entry `text` does not hold (a catalog's, made invalid by the file) at line 1, naming it.
pub fn locate_problems(text: &str, problems: &[super::Problem]) -> Vec<Diagnostic> {
    match read_spans(text) {
        Ok((_, spans, _)) => {
            let mut diags = locate(text, &spans, problems);
            diags.sort_by_key(|d| (d.line, d.col));
            diags
        }
        Err(diags) => diags,
    }
}

/// Problems as diagnostics at the lines `spans` gives.
fn locate(text: &str, spans: &SpanIndex, problems: &[super::Problem]) -> Vec<Diagnostic> {
    let mut diags = Vec::new();
    // Spans of nested values (a workflow's steps), parsed only when a problem needs one.
    let mut nested: Option<Option<Spanned<toml::de::DeTable<'_>>>> = None;
    for problem in problems {
        let inside = match (problem.field, &problem.at) {
            (Some(field), Some(at)) => nested
                .get_or_insert_with(|| toml::de::DeTable::parse(text).ok())
                .as_ref()
                .and_then(|doc| {
                    let mut path = vec![
                        Segment::Key(problem.section.as_str()),
                        Segment::Key(&problem.name),
                        Segment::Key(field),
                    ];
                    path.extend(segments(at));
                    span_at(doc, &path)
                }),
            _ => None,
        };
        let offset = inside
            .or_else(|| {
                let entry = spans.entry(problem.section, &problem.name)?;
                let field = problem.field.and_then(|f| {
                    entry
                        .fields
                        .iter()
                        .find(|(name, _)| *name == f)
                        .map(|(_, at)| *at)
                });
                Some(field.unwrap_or(entry.at))
            })
            .unwrap_or(0);
        let what = match (problem.field, &problem.at) {
            (Some(field), Some(at)) => {
                format!(
                    "{}.{}: {field}.{at}: ",
                    problem.section.as_str(),
                    problem.name
                )
            }
            (Some(field), None) => {
                format!("{}.{}: {field}: ", problem.section.as_str(), problem.name)
            }
            (None, _) => format!("{}.{}: ", problem.section.as_str(), problem.name),
        };
        // An entry the file does not hold: the catalog's, made invalid by the file's entries.
        let what = if spans.entry(problem.section, &problem.name).is_some() {
            what
        } else {
            format!("in the catalog, {what}")
        };
        diags.push(Diagnostic::at(
            text,
            offset,
            format!("{what}{}", problem.reason),
        ));
    }
    diags
}

/// One step of a path into a TOML document.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Segment<'a> {
    Key(&'a str),
    Index(usize),
}

/// `steps[2].after` as segments.
fn segments(path: &str) -> Vec<Segment<'_>> {
    let mut out = Vec::new();
    for part in path.split('.') {
        let (key, rest) = part.split_once('[').unwrap_or((part, ""));
        if !key.is_empty() {
            out.push(Segment::Key(key));
        }
        for index in rest.split('[') {
            if let Ok(i) = index.trim_end_matches(']').parse() {
                out.push(Segment::Index(i));
            }
        }
    }
    out
}

/// Where the value at `path` starts in the document; as deep as the path resolves (a missing
/// key points at its table).
fn span_at(doc: &Spanned<toml::de::DeTable<'_>>, path: &[Segment<'_>]) -> Option<usize> {
    use toml::de::DeValue;
    let mut at = doc.span().start;
    let mut table = Some(doc.get_ref());
    let mut array: Option<&toml::de::DeArray<'_>> = None;
    for segment in path {
        let value = match (segment, table, array) {
            (Segment::Key(key), Some(t), _) => t
                .iter()
                .find(|(k, _)| k.get_ref().as_ref() == *key)
                .map(|(_, v)| v),
            (Segment::Index(i), _, Some(a)) => a.get(*i),
            _ => None,
        };
        let Some(value) = value else { break };
        at = value.span().start;
        (table, array) = match value.get_ref() {
            DeValue::Table(t) => (Some(t), None),
            DeValue::Array(a) => (None, Some(a)),
            _ => (None, None),
        };
    }
    Some(at)
}

/// Converts a TOML value into JSON (dates become RFC 3339 strings).
pub fn toml_to_json(v: &Value) -> Json {
    match v {
        Value::String(s) => Json::String(s.clone()),
        Value::Integer(i) => Json::from(*i),
        Value::Float(f) => serde_json::Number::from_f64(*f).map_or(Json::Null, Json::Number),
        Value::Boolean(b) => Json::Bool(*b),
        Value::Datetime(d) => Json::String(d.to_string()),
        Value::Array(a) => Json::Array(a.iter().map(toml_to_json).collect()),
        Value::Table(t) => Json::Object(
            t.iter()
                .map(|(k, v)| (k.clone(), toml_to_json(v)))
                .collect(),
        ),
    }
}

/// Converts JSON into TOML; `null` has no TOML spelling and is an error naming its path.
pub fn json_to_toml(v: &Json, path: &str) -> Result<Value, String> {
    Ok(match v {
        Json::Null => return Err(format!("{path}: null cannot be written in TOML")),
        Json::Bool(b) => Value::Boolean(*b),
        Json::Number(n) => match n.as_i64() {
            Some(i) => Value::Integer(i),
            None => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Json::String(s) => Value::String(s.clone()),
        Json::Array(a) => Value::Array(
            a.iter()
                .enumerate()
                .map(|(i, v)| json_to_toml(v, &format!("{path}[{i}]")))
                .collect::<Result<_, _>>()?,
        ),
        Json::Object(o) => Value::Table(
            o.iter()
                .map(|(k, v)| Ok((k.clone(), json_to_toml(v, &format!("{path}.{k}"))?)))
                .collect::<Result<_, String>>()?,
        ),
    })
}
