//! Reading job.conf text into the file model, with where each entry and field was written
//! and the problems of reading it (unknown fields, wrong types); a large file part by part.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map as JsonMap, Value as Json};

use toml::{Spanned, Value};

use super::{EntrySpans, FORMAT_VERSION, SpanIndex, toml_to_json};
use crate::diag::Diagnostic;
use crate::jobconf::{CatalogFile, GroupDef, JobDef, ObjectDef, ProcessorDef, Section};
use crate::model::{JobType, ObjectType};
use crate::schedule::{MisfirePolicy, OverlapPolicy};

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

/// Reads job.conf `text` into a file model with where each entry and field was written, and
/// the problems of reading it (unknown fields, wrong types); no validation.
///
/// A large file is read part by part (see [`parts`]): a parsed TOML document takes some
/// twenty times its text, so a part's document is all a large file holds at once. Where a part
/// does not parse on its own, or an entry is written in two parts, the file is read whole
/// again, which gives the same model or the error a whole read finds.
pub(super) fn read_spans(
    text: &str,
) -> Result<(CatalogFile, SpanIndex, Vec<Diagnostic>), Vec<Diagnostic>> {
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
    /// is half the size of `file`'s, so each job moves a few times.
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

/// The spellings a choice accepts, for its error: "once, skip, all".
fn spelled<'a>(names: impl Iterator<Item = &'a str>) -> String {
    names.collect::<Vec<_>>().join(", ")
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
            spelled(MisfirePolicy::ALL.iter().map(|p| p.as_str()))
        })
        .unwrap_or_default();
    job.misfire_window = r.int("misfire_window").unwrap_or(job.misfire_window);
    job.max_catchup = r.int("max_catchup").unwrap_or(job.max_catchup);
    job.overlap_policy = r
        .choice("overlap_policy", OverlapPolicy::parse, || {
            spelled(OverlapPolicy::ALL.iter().map(|p| p.as_str()))
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
    job.start_within = r.int("start_within").unwrap_or(job.start_within);
    job.aging = r.int("aging").unwrap_or(job.aging);
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
