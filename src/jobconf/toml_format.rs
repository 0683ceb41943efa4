//! The job.conf TOML format: parse with positions, and render back byte-for-byte stably.
//!
//! Invariant: `parse` reports every problem it can find (not just the first) as a diagnostic
//! with line and column, and `render(parse(render(c))) == render(c)`.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use serde::Deserialize;
use serde_json::{Map as JsonMap, Value as Json};
use toml::{Spanned, Value};

use super::{CatalogFile, GroupDef, JobDef, ObjectDef, ProcessorDef, Scope, Section, validate_in};
use crate::diag::Diagnostic;
use crate::model::{JobType, ObjectType};
use crate::schedule::{MisfirePolicy, OverlapPolicy};

/// The catalog file format version this build writes and reads.
pub const FORMAT_VERSION: i64 = 1;

type RawEntry = BTreeMap<Spanned<String>, Spanned<Value>>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    version: Option<Spanned<i64>>,
    #[serde(default)]
    processor: BTreeMap<Spanned<String>, RawEntry>,
    #[serde(default)]
    object: BTreeMap<Spanned<String>, RawEntry>,
    #[serde(default)]
    group: BTreeMap<Spanned<String>, RawEntry>,
    #[serde(default)]
    job: BTreeMap<Spanned<String>, RawEntry>,
}

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

/// Reads job.conf `text` into a file model with where each entry and field was written, and
/// the problems of reading it (unknown fields, wrong types); no validation.
///
/// A large file is read part by part (see [`parts`]): a parsed TOML document takes some
/// twenty times its text, and an import of 192,000 jobs held a gigabyte for it. Where a part
/// does not parse on its own, or an entry is written in two parts, the file is read whole
/// again, which gives the same model or the error a whole read finds.
fn read_spans(text: &str) -> Result<(CatalogFile, SpanIndex, Vec<Diagnostic>), Vec<Diagnostic>> {
    read_in_parts(text, PART_BYTES)
}

/// [`read_spans`] in parts of about `size` bytes.
fn read_in_parts(
    text: &str,
    size: usize,
) -> Result<(CatalogFile, SpanIndex, Vec<Diagnostic>), Vec<Diagnostic>> {
    let parts = parts(text, size);
    if parts.len() > 1 {
        let mut read = Read::default();
        let whole = parts
            .iter()
            .try_for_each(|&(from, to)| read.part(text, from, to).map_err(|_| ()));
        if whole.is_ok() && !read.spans.repeated {
            read.file.jobs.append(&mut read.jobs);
            return Ok((read.file, read.spans, read.diags));
        }
    }
    let mut read = Read::default();
    read.part(text, 0, text.len())?;
    read.file.jobs.append(&mut read.jobs);
    Ok((read.file, read.spans, read.diags))
}

/// The size of the parts a large file is read in.
const PART_BYTES: usize = 256 * 1024;

/// `text` cut, as `(from, to)` byte ranges, before table headers (`[job.name]`, not a table of
/// an entry above, `[job.name.payload]`) about every `size` bytes. A cut inside a multi-line
/// string or array leaves the part before it unterminated, which then does not parse.
fn parts(text: &str, size: usize) -> Vec<(usize, usize)> {
    let mut parts = Vec::new();
    let (mut from, mut at) = (0, 0);
    let mut entry = "";
    for line in text.split_inclusive('\n') {
        let header = line
            .trim()
            .strip_prefix('[')
            .filter(|h| !h.starts_with('['))
            .and_then(|h| h.split_once(']'))
            .map(|(h, _)| h.trim());
        if let Some(h) = header {
            let within = !entry.is_empty()
                && h.strip_prefix(entry)
                    .is_some_and(|rest| rest.starts_with('.'));
            if !within {
                if at > from && at - from >= size {
                    parts.push((from, at));
                    from = at;
                }
                entry = h;
            }
        }
        at += line.len();
    }
    parts.push((from, text.len()));
    parts
}

/// A file model read part by part.
#[derive(Default)]
struct Read {
    file: CatalogFile,
    /// Jobs read and not yet in `file`: a map filled in key order keeps its nodes about half
    /// full, and one merged into another (`append`) is built with full nodes. Merged when it
    /// is half the size of `file`'s, each job moves a few times (192,000 jobs: 48 MB less).
    jobs: BTreeMap<String, JobDef>,
    spans: SpanIndex,
    diags: Vec<Diagnostic>,
}

impl Read {
    /// Reads `text[from..to]` into the model; its spans placed in `text`.
    fn part(&mut self, text: &str, from: usize, to: usize) -> Result<(), Vec<Diagnostic>> {
        let raw: RawFile = toml::from_str(&text[from..to]).map_err(|e| {
            let offset = from + e.span().map_or(0, |s| s.start);
            vec![Diagnostic::at(
                text,
                offset,
                e.message().trim().replace('\n', "; "),
            )]
        })?;
        let (file, diags, spans) = (&mut self.file, &mut self.diags, &mut self.spans);
        if let Some(v) = &raw.version
            && *v.get_ref() != FORMAT_VERSION
        {
            diags.push(Diagnostic::at(
                text,
                from + v.span().start,
                format!(
                    "version: this build reads version {FORMAT_VERSION}, got {}",
                    v.get_ref()
                ),
            ));
        }
        let at = (text, from);
        for (key, entry) in raw.processor {
            let mut r = Reader::new(at, Section::Processor, key, entry, diags, spans);
            let def = read_processor(&mut r);
            file.processors.insert(r.finish(), def);
        }
        for (key, entry) in raw.object {
            let mut r = Reader::new(at, Section::Object, key, entry, diags, spans);
            let def = read_object(&mut r);
            file.objects.insert(r.finish(), def);
        }
        for (key, entry) in raw.group {
            let mut r = Reader::new(at, Section::Group, key, entry, diags, spans);
            let def = GroupDef {
                maintenance: r.bool("maintenance").unwrap_or(false),
                description: r.string("description"),
                enabled: r.bool("enabled").unwrap_or(true),
            };
            file.groups.insert(r.finish(), def);
        }
        for (key, entry) in raw.job {
            let mut r = Reader::new(at, Section::Job, key, entry, diags, spans);
            if let Some(def) = read_job(&mut r) {
                self.jobs.insert(r.finish(), def);
            } else {
                r.finish();
            }
        }
        if self.jobs.len() * 2 >= file.jobs.len() {
            file.jobs.append(&mut self.jobs);
        }
        Ok(())
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

fn read_processor(r: &mut Reader<'_>) -> ProcessorDef {
    ProcessorDef {
        instances: r.int("instances").unwrap_or(1),
        max_instances: r.int("max_instances"),
        prefetch: r.int("prefetch"),
        nodes: {
            let mut nodes = r.string_list("nodes").unwrap_or_default();
            nodes.sort();
            nodes
        },
        ip_address: r.string("ip_address"),
        port: r.int("port"),
        rpc_user: r.string("rpc_user"),
        rpc_password: r.string("rpc_password"),
        enabled: r.bool("enabled").unwrap_or(true),
    }
}

fn read_object(r: &mut Reader<'_>) -> ObjectDef {
    ObjectDef {
        object_type: r
            .choice("object_type", ObjectType::parse, ObjectType::expected)
            .unwrap_or(ObjectType::Table),
        conn_string: r.string("conn_string"),
        key_field: r.string("key_field"),
        name_field: r.string("name_field"),
        id_length: r.int("id_length"),
        search_prefix: r.string("search_prefix"),
        time_to_live: r.int("time_to_live"),
        allow_prune: r.bool("allow_prune").unwrap_or(false),
        allow_list: r.bool("allow_list").unwrap_or(false),
        description: r.string("description"),
        enabled: r.bool("enabled").unwrap_or(true),
    }
}

fn read_job(r: &mut Reader<'_>) -> Option<JobDef> {
    let job_type = r.choice("type", JobType::parse, JobType::expected);
    let processor = r.string("processor");
    if job_type.is_none() && !r.has_error_on("type") {
        r.missing("type", &format!("one of {}", JobType::expected()));
    }
    if processor.is_none() && !r.has_error_on("processor") {
        r.missing("processor", "a processor name");
    }
    let mut job = JobDef::new(
        job_type.unwrap_or(JobType::Function),
        processor.unwrap_or_default(),
    );
    job.group = r.string("group");
    job.payload = r.table("payload").unwrap_or_default().into();
    job.description = r.string("description");
    job.priority = r.int("priority").unwrap_or(job.priority);
    job.timeout = r.int("timeout").unwrap_or(job.timeout);
    job.schedule.run_always = r.bool("run_always").unwrap_or(false);
    job.schedule.run_delay = r.int("run_delay").unwrap_or(0);
    job.schedule.run_every = r.int("run_every");
    job.schedule.run_on_the = r.int("run_on_the");
    job.schedule.run_at = r.string("run_at");
    job.schedule.run_date = r.date_gate("run_date");
    job.schedule.cron = r.string("cron");
    job.schedule.timezone = r.string("timezone");
    job.misfire_policy = r
        .choice("misfire_policy", MisfirePolicy::parse, || {
            MisfirePolicy::ALL
                .iter()
                .map(|p| p.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default();
    job.misfire_window = r.int("misfire_window").unwrap_or(job.misfire_window);
    job.max_catchup = r.int("max_catchup").unwrap_or(job.max_catchup);
    job.overlap_policy = r
        .choice("overlap_policy", OverlapPolicy::parse, || {
            OverlapPolicy::ALL
                .iter()
                .map(|p| p.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default();
    job.max_overlap = r.int("max_overlap").unwrap_or(job.max_overlap);
    job.max_attempts = r.int("max_attempts").unwrap_or(job.max_attempts);
    job.backoff_base = r.int("backoff_base").unwrap_or(job.backoff_base);
    job.backoff_max = r.int("backoff_max").unwrap_or(job.backoff_max);
    let mut objects = r.string_list("objects").unwrap_or_default();
    objects.sort();
    job.objects = objects;
    job.enabled = r.bool("enabled").unwrap_or(true);
    job.required = r.bool("required").unwrap_or(false);
    job.stretch_max = r.int("stretch_max").unwrap_or(job.stretch_max);
    (job_type.is_some()).then_some(job)
}

/// Takes typed fields out of one entry, recording a diagnostic for each bad one.
struct Reader<'a> {
    text: &'a str,
    /// Where the part of `text` the entry was parsed from starts: its spans count from there.
    base: usize,
    /// Where the entry and the fields read so far were written, kept at [`Reader::finish`].
    at: EntrySpans,
    section: Section,
    name: Spanned<String>,
    entry: RawEntry,
    diags: &'a mut Vec<Diagnostic>,
    spans: &'a mut SpanIndex,
    bad_fields: Vec<&'static str>,
}

impl<'a> Reader<'a> {
    fn new(
        (text, base): (&'a str, usize),
        section: Section,
        name: Spanned<String>,
        entry: RawEntry,
        diags: &'a mut Vec<Diagnostic>,
        spans: &'a mut SpanIndex,
    ) -> Self {
        let at = EntrySpans {
            at: base + name.span().start,
            fields: Vec::with_capacity(entry.len()),
        };
        Self {
            text,
            base,
            at,
            section,
            name,
            entry,
            diags,
            spans,
            bad_fields: Vec::new(),
        }
    }

    fn prefix(&self, field: &str) -> String {
        format!("{}.{}: {field}", self.section.as_str(), self.name.get_ref())
    }

    fn error(&mut self, field: &'static str, offset: usize, reason: String) {
        let msg = format!("{}: {reason}", self.prefix(field));
        let offset = self.base + offset;
        self.diags.push(Diagnostic::at(self.text, offset, msg));
        self.bad_fields.push(field);
    }

    fn has_error_on(&self, field: &str) -> bool {
        self.bad_fields.contains(&field)
    }

    fn missing(&mut self, field: &'static str, what: &str) {
        let offset = self.name.span().start;
        self.error(field, offset, format!("missing; expected {what}"));
    }

    fn take(&mut self, field: &'static str) -> Option<Spanned<Value>> {
        let key = self.entry.keys().find(|k| k.get_ref() == field)?.clone();
        let value = self.entry.remove(&key)?;
        self.at.fields.push((field, self.base + value.span().start));
        Some(value)
    }

    fn typed<T>(
        &mut self,
        field: &'static str,
        expected: &str,
        convert: impl FnOnce(&Value) -> Option<T>,
    ) -> Option<T> {
        let value = self.take(field)?;
        match convert(value.get_ref()) {
            Some(v) => Some(v),
            None => {
                let got = describe(value.get_ref());
                self.error(
                    field,
                    value.span().start,
                    format!("expected {expected}, got {got}"),
                );
                None
            }
        }
    }

    fn string(&mut self, field: &'static str) -> Option<String> {
        self.typed(field, "a string", |v| v.as_str().map(String::from))
    }

    fn int(&mut self, field: &'static str) -> Option<i64> {
        self.typed(field, "an integer", Value::as_integer)
    }

    fn bool(&mut self, field: &'static str) -> Option<bool> {
        // millix writes flags as 0/1; accept both spellings.
        self.typed(field, "true or false", |v| match v {
            Value::Boolean(b) => Some(*b),
            Value::Integer(0) => Some(false),
            Value::Integer(1) => Some(true),
            _ => None,
        })
    }

    fn date_gate(&mut self, field: &'static str) -> Option<String> {
        // A day of month may be written as a number or a string; a token is a string.
        self.typed(field, "a day of month or a #token#", |v| match v {
            Value::Integer(d) => Some(d.to_string()),
            Value::String(s) => Some(s.clone()),
            _ => None,
        })
    }

    fn string_list(&mut self, field: &'static str) -> Option<Vec<String>> {
        self.typed(field, "a list of strings", |v| {
            v.as_array()?
                .iter()
                .map(|s| s.as_str().map(String::from))
                .collect()
        })
    }

    fn table(&mut self, field: &'static str) -> Option<JsonMap<String, Json>> {
        let value = self.take(field)?;
        match toml_to_json(value.get_ref()) {
            Json::Object(map) => Some(map),
            _ => {
                let got = describe(value.get_ref());
                self.error(
                    field,
                    value.span().start,
                    format!("expected a table, got {got}"),
                );
                None
            }
        }
    }

    fn choice<T>(
        &mut self,
        field: &'static str,
        parse: impl Fn(&str) -> Option<T>,
        expected: impl Fn() -> String,
    ) -> Option<T> {
        let value = self.take(field)?;
        match value.get_ref().as_str().and_then(&parse) {
            Some(v) => Some(v),
            None => {
                let got = describe(value.get_ref());
                self.error(
                    field,
                    value.span().start,
                    format!("expected one of {}, got {got}", expected()),
                );
                None
            }
        }
    }

    /// Reports fields nobody took and returns the entry's name.
    fn finish(self) -> String {
        let prefix = format!("{}.{}", self.section.as_str(), self.name.get_ref());
        for (key, _) in self.entry {
            self.diags.push(Diagnostic::at(
                self.text,
                self.base + key.span().start,
                format!("{prefix}: unknown field `{}`", key.get_ref()),
            ));
        }
        let name = self.name.into_inner();
        let key = (self.section, name.clone());
        self.spans.repeated |= self.spans.entries.insert(key, self.at).is_some();
        name
    }
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

fn describe(v: &Value) -> String {
    match v {
        Value::String(s) => format!("the string {s:?}"),
        Value::Integer(i) => format!("the integer {i}"),
        Value::Float(f) => format!("the number {f}"),
        Value::Boolean(b) => format!("{b}"),
        Value::Datetime(d) => format!("the date {d}"),
        Value::Array(_) => "a list".into(),
        Value::Table(_) => "a table".into(),
    }
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

/// Renders a catalog as job.conf text. Fields at their default are left out, so the output is
/// short and stable: export → import → export gives the same bytes.
pub fn render(file: &CatalogFile) -> Result<String, String> {
    let mut out = String::new();
    out.push_str("# jobvisor job catalog (job.conf). Check with `jobvisor check FILE`.\n");
    let _ = writeln!(out, "version = {FORMAT_VERSION}");
    for (name, p) in &file.processors {
        let mut e = Entry::new(&mut out, "processor", name);
        e.int_if("instances", p.instances, true);
        e.opt_int("max_instances", p.max_instances);
        e.opt_int("prefetch", p.prefetch);
        if !p.nodes.is_empty() {
            let list = Value::Array(p.nodes.iter().cloned().map(Value::String).collect());
            e.raw("nodes", &list);
        }
        e.opt_str("ip_address", &p.ip_address);
        e.opt_int("port", p.port);
        e.opt_str("rpc_user", &p.rpc_user);
        e.opt_str("rpc_password", &p.rpc_password);
        e.bool_if("enabled", p.enabled, !p.enabled);
    }
    let d = ObjectDef::default();
    for (name, o) in &file.objects {
        let mut e = Entry::new(&mut out, "object", name);
        e.str_if(
            "object_type",
            o.object_type.as_str(),
            o.object_type != d.object_type,
        );
        e.opt_str("conn_string", &o.conn_string);
        e.opt_str("key_field", &o.key_field);
        e.opt_str("name_field", &o.name_field);
        e.opt_int("id_length", o.id_length);
        e.opt_str("search_prefix", &o.search_prefix);
        e.opt_int("time_to_live", o.time_to_live);
        e.bool_if("allow_prune", o.allow_prune, o.allow_prune);
        e.bool_if("allow_list", o.allow_list, o.allow_list);
        e.opt_str("description", &o.description);
        e.bool_if("enabled", o.enabled, !o.enabled);
    }
    for (name, g) in &file.groups {
        let mut e = Entry::new(&mut out, "group", name);
        e.bool_if("maintenance", g.maintenance, g.maintenance);
        e.opt_str("description", &g.description);
        e.bool_if("enabled", g.enabled, !g.enabled);
    }
    for (name, j) in &file.jobs {
        render_job(&mut out, name, j)?;
    }
    Ok(out)
}

fn render_job(out: &mut String, name: &str, j: &JobDef) -> Result<(), String> {
    let d = JobDef::new(j.job_type, "");
    let payload = json_to_toml(&j.payload.json(), &format!("job.{name}.payload"))?;
    let mut e = Entry::new(out, "job", name);
    e.str_if("type", j.job_type.as_str(), true);
    e.str_if("processor", &j.processor, true);
    e.opt_str("group", &j.group);
    e.opt_str("description", &j.description);
    e.int_if("priority", j.priority, j.priority != d.priority);
    e.bool_if("required", j.required, j.required);
    e.bool_if("enabled", j.enabled, !j.enabled);
    e.int_if("timeout", j.timeout, j.timeout != d.timeout);
    let s = &j.schedule;
    e.bool_if("run_always", s.run_always, s.run_always);
    e.int_if("run_delay", s.run_delay, s.run_delay != 0);
    e.opt_int("run_every", s.run_every);
    e.opt_int("run_on_the", s.run_on_the);
    e.opt_str("run_at", &s.run_at);
    e.opt_str("run_date", &s.run_date);
    e.opt_str("cron", &s.cron);
    e.opt_str("timezone", &s.timezone);
    e.str_if(
        "misfire_policy",
        j.misfire_policy.as_str(),
        j.misfire_policy != d.misfire_policy,
    );
    e.int_if(
        "misfire_window",
        j.misfire_window,
        j.misfire_window != d.misfire_window,
    );
    e.int_if("max_catchup", j.max_catchup, j.max_catchup != d.max_catchup);
    e.str_if(
        "overlap_policy",
        j.overlap_policy.as_str(),
        j.overlap_policy != d.overlap_policy,
    );
    e.int_if("max_overlap", j.max_overlap, j.max_overlap != d.max_overlap);
    e.int_if("stretch_max", j.stretch_max, j.stretch_max != d.stretch_max);
    e.int_if(
        "max_attempts",
        j.max_attempts,
        j.max_attempts != d.max_attempts,
    );
    e.int_if(
        "backoff_base",
        j.backoff_base,
        j.backoff_base != d.backoff_base,
    );
    e.int_if("backoff_max", j.backoff_max, j.backoff_max != d.backoff_max);
    if !j.objects.is_empty() {
        let list = Value::Array(j.objects.iter().cloned().map(Value::String).collect());
        e.raw("objects", &list);
    }
    if !j.payload.is_empty() {
        e.raw("payload", &payload);
    }
    Ok(())
}

/// Writes one `[section.name]` table.
struct Entry<'a> {
    out: &'a mut String,
}

impl<'a> Entry<'a> {
    fn new(out: &'a mut String, section: &str, name: &str) -> Self {
        let _ = write!(out, "\n[{section}.{}]\n", key(name));
        Self { out }
    }

    fn raw(&mut self, field: &str, value: &Value) {
        let _ = writeln!(self.out, "{field} = {value}");
    }

    fn str_if(&mut self, field: &str, value: &str, write: bool) {
        if write {
            self.raw(field, &Value::String(value.to_string()));
        }
    }

    fn opt_str(&mut self, field: &str, value: &Option<String>) {
        if let Some(v) = value {
            self.raw(field, &Value::String(v.clone()));
        }
    }

    fn int_if(&mut self, field: &str, value: i64, write: bool) {
        if write {
            self.raw(field, &Value::Integer(value));
        }
    }

    fn opt_int(&mut self, field: &str, value: Option<i64>) {
        if let Some(v) = value {
            self.raw(field, &Value::Integer(v));
        }
    }

    fn bool_if(&mut self, field: &str, value: bool, write: bool) {
        if write {
            self.raw(field, &Value::Boolean(value));
        }
    }
}

/// A bare key when possible, else a quoted one.
fn key(name: &str) -> String {
    if !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        name.to_string()
    } else {
        Value::String(name.to_string()).to_string()
    }
}

#[cfg(test)]
mod part_tests {
    use super::*;

    /// The model and the diagnostics of `text` read in parts of `size` bytes.
    fn read(text: &str, size: usize) -> Result<(CatalogFile, Vec<String>), Vec<String>> {
        let show = |diags: Vec<Diagnostic>| {
            diags
                .iter()
                .map(|d| format!("{}:{} {}", d.line, d.col, d.reason))
                .collect::<Vec<_>>()
        };
        read_in_parts(text, size)
            .map(|(file, _, diags)| (file, show(diags)))
            .map_err(show)
    }

    #[test]
    fn a_file_read_in_parts_reads_as_it_does_whole() {
        let files = [
            // Entries with tables of their own, a multi-line string holding header-like lines,
            // a multi-line array, and an error in a later entry (its line must be the file's).
            "version = 1\n[job.a]\ntype = \"function\"\nprocessor = \"main\"\n\
             [job.a.payload]\nfunction = \"debug.noop\"\n\n\
             [job.b]\ntype = \"command\"\nprocessor = \"main\"\ndescription = \"\"\"\n\
             [job.c]\nnot a header\n\"\"\"\npayload = { argv = [\n\"true\",\n] }\n\
             [job.d]\ntype = \"function\"\nprocessor = \"main\"\npriority = \"high\"\n\
             payload = { function = \"debug.noop\" }\n",
            // An entry whose table is written after another entry.
            "[job.a]\ntype = \"function\"\nprocessor = \"main\"\n\
             [job.b]\ntype = \"function\"\nprocessor = \"main\"\n\
             payload = { function = \"debug.noop\" }\n\
             [job.a.payload]\nfunction = \"debug.noop\"\n",
            // An entry written twice: an error wherever the cut falls.
            "[job.a]\ntype = \"function\"\nprocessor = \"main\"\n\
             [job.b]\ntype = \"function\"\nprocessor = \"main\"\n\
             [job.a]\ntype = \"function\"\nprocessor = \"main\"\n",
            // A syntax error in the last entry.
            "[job.a]\ntype = \"function\"\nprocessor = \"main\"\n\
             [job.b]\ntype = = \"function\"\n",
        ];
        for text in files {
            let whole = read(text, usize::MAX);
            for size in [0, 1, 16, 40, 80, 120] {
                assert_eq!(read(text, size), whole, "parts of {size} bytes of:\n{text}");
            }
        }
    }

    #[test]
    fn a_large_file_is_read_part_by_part_not_whole() {
        let text: String = (0..5000)
            .map(|i| {
                format!(
                    "[job.j{i}]\ntype = \"function\"\nprocessor = \"main\"\n\
                     description = \"bulk job number {i}\"\n\
                     payload = {{ function = \"debug.noop\" }}\n\n"
                )
            })
            .collect();
        let parts = parts(&text, PART_BYTES);
        assert!(parts.len() >= 2, "{} bytes in {parts:?}", text.len());
        assert!(parts.iter().all(|(from, to)| to - from < PART_BYTES + 200));
        let mut read = Read::default();
        for &(from, to) in &parts {
            read.part(&text, from, to).unwrap();
        }
        assert!(!read.spans.repeated);
        read.file.jobs.append(&mut read.jobs);
        assert_eq!(read.file, read_in_parts(&text, usize::MAX).unwrap().0);
        assert_eq!(read.file.jobs.len(), 5000);
    }

    #[test]
    fn a_file_is_cut_before_entries_not_before_an_entrys_own_tables() {
        let text = "[job.a]\nx = 1\n[job.a.payload]\ny = 2\n[job.ab]\nz = 3\n[[job.ab.steps]]\n";
        let at = |needle: &str| text.find(needle).unwrap();
        assert_eq!(
            parts(text, 0),
            vec![(0, at("[job.ab]")), (at("[job.ab]"), text.len())]
        );
        assert_eq!(parts(text, usize::MAX), vec![(0, text.len())]);
    }
}
