//! The millix node's `job.json` catalog format, mapped onto our catalog for import.
//!
//! Invariant: everything in the input is either mapped or reported as a note naming its JSON
//! path; nothing is dropped silently.

use serde_json::{Map as JsonMap, Value as Json};

use super::{CatalogFile, JobDef, ObjectDef, ProcessorDef, Scope, validate_in};
use crate::diag::Diagnostic;
use crate::model::{JobType, ObjectType};

/// A millix catalog mapped onto ours.
#[derive(Debug)]
pub struct MillixImport {
    /// The mapped catalog.
    pub catalog: CatalogFile,
    /// What could not be mapped, each with its JSON path.
    pub unmapped: Vec<Diagnostic>,
}

/// Each of `problems` as a diagnostic at its path in a millix file (`job_list.x.timeout`).
pub fn locate_problems(problems: &[super::Problem]) -> Vec<Diagnostic> {
    problems
        .iter()
        .map(|problem| {
            let list = match problem.section {
                super::Section::Processor => "processor_list",
                super::Section::Object => "object_list",
                super::Section::Group | super::Section::Job => "job_list",
            };
            let field = problem.field.map(|f| format!(".{f}")).unwrap_or_default();
            Diagnostic::at_path(
                format!("{list}.{}{field}", problem.name),
                problem.reason.clone(),
            )
        })
        .collect()
}

/// Maps a millix `job.json`. Hard errors (bad JSON, wrong shapes, an unknown job type, a
/// catalog that fails validation) are returned as `Err`; fields we have no column for are
/// returned in `unmapped`.
pub fn parse(text: &str) -> Result<MillixImport, Vec<Diagnostic>> {
    parse_in(text, Scope::Whole)
}

/// [`parse`] for a file of `scope`: the entries of an import may reference the catalog's.
pub fn parse_in(text: &str, scope: Scope) -> Result<MillixImport, Vec<Diagnostic>> {
    let root: Json = serde_json::from_str(text).map_err(|e| {
        vec![Diagnostic {
            line: e.line(),
            col: e.column(),
            path: None,
            reason: e.to_string(),
        }]
    })?;
    let mut m = Mapper {
        errors: Vec::new(),
        unmapped: Vec::new(),
        catalog: CatalogFile::default(),
    };
    let Some(root) = root.as_object() else {
        return Err(vec![Diagnostic::at_path("$", "expected a JSON object")]);
    };
    for (key, value) in root {
        match key.as_str() {
            "version" => {}
            "processor_list" => m.each(value, "processor_list", Mapper::processor),
            "object_list" => m.each(value, "object_list", Mapper::object),
            "job_list" => m.each(value, "job_list", Mapper::job),
            other => m.note(other, "unknown top-level key; not imported"),
        }
    }
    let problems = validate_in(&m.catalog, scope);
    m.errors.extend(locate_problems(&problems));
    if m.errors.is_empty() {
        Ok(MillixImport {
            catalog: m.catalog,
            unmapped: m.unmapped,
        })
    } else {
        Err(m.errors)
    }
}

struct Mapper {
    errors: Vec<Diagnostic>,
    unmapped: Vec<Diagnostic>,
    catalog: CatalogFile,
}

impl Mapper {
    fn error(&mut self, path: &str, reason: impl Into<String>) {
        self.errors.push(Diagnostic::at_path(path, reason));
    }

    fn note(&mut self, path: &str, reason: impl Into<String>) {
        self.unmapped.push(Diagnostic::at_path(path, reason));
    }

    fn each(
        &mut self,
        value: &Json,
        list: &str,
        f: fn(&mut Self, &str, &str, &JsonMap<String, Json>),
    ) {
        let Some(map) = value.as_object() else {
            return self.error(list, "expected an object keyed by name");
        };
        for (name, entry) in map {
            let path = format!("{list}.{name}");
            match entry.as_object() {
                Some(fields) => f(self, &path, name, fields),
                None => self.error(&path, "expected an object"),
            }
        }
    }

    fn int(&mut self, path: &str, v: &Json) -> Option<i64> {
        // millix writes numbers and flags loosely: 1, "1", true.
        let parsed = match v {
            Json::Number(n) => n.as_i64(),
            Json::Bool(b) => Some(i64::from(*b)),
            Json::String(s) => s.trim().parse().ok(),
            _ => None,
        };
        if parsed.is_none() {
            self.error(path, format!("expected an integer, got {v}"));
        }
        parsed
    }

    fn string(&mut self, path: &str, v: &Json) -> Option<String> {
        match v {
            Json::String(s) => Some(s.clone()),
            Json::Number(n) => Some(n.to_string()),
            _ => {
                self.error(path, format!("expected a string, got {v}"));
                None
            }
        }
    }

    fn processor(&mut self, path: &str, name: &str, fields: &JsonMap<String, Json>) {
        let mut def = ProcessorDef::default();
        // Processors named localhost… run on this node; any other name is a remote node.
        if !name.starts_with("localhost") {
            def.ip_address = Some(name.to_string());
        }
        for (key, v) in fields {
            let p = format!("{path}.{key}");
            match key.as_str() {
                "instances" => def.instances = self.int(&p, v).unwrap_or(1),
                "port" => def.port = self.int(&p, v),
                "user" | "rpc_user" => def.rpc_user = self.string(&p, v),
                "password" | "rpc_password" => def.rpc_password = self.string(&p, v),
                "ip_address" => def.ip_address = self.string(&p, v),
                "status" => def.enabled = self.int(&p, v) != Some(0),
                _ => self.note(&p, "no matching job_processor column; not imported"),
            }
        }
        self.catalog.processors.insert(name.to_string(), def);
    }

    fn object(&mut self, path: &str, name: &str, fields: &JsonMap<String, Json>) {
        let mut def = ObjectDef::default();
        for (key, v) in fields {
            let p = format!("{path}.{key}");
            match key.as_str() {
                "object_type" => match v.as_str().and_then(ObjectType::parse) {
                    Some(t) => def.object_type = t,
                    None => self.error(
                        &p,
                        format!("expected one of {}, got {v}", ObjectType::expected()),
                    ),
                },
                "object_name" => {}
                "object_name_field" => def.name_field = self.string(&p, v),
                "object_key" => def.key_field = self.string(&p, v),
                "id_length" => def.id_length = self.int(&p, v),
                "search_prefix" => def.search_prefix = self.string(&p, v),
                "time_to_live" => def.time_to_live = self.int(&p, v),
                "allow_prune" => def.allow_prune = self.int(&p, v) == Some(1),
                "allow_list" => def.allow_list = self.int(&p, v) == Some(1),
                "conn_string" => def.conn_string = self.string(&p, v),
                "status" => def.enabled = self.int(&p, v) != Some(0),
                _ => self.note(&p, "no matching object column; not imported"),
            }
        }
        self.catalog.objects.insert(name.to_string(), def);
    }

    fn job(&mut self, path: &str, name: &str, fields: &JsonMap<String, Json>) {
        let job_type = match fields.get("type").and_then(Json::as_str) {
            Some(t) => match JobType::parse(t) {
                Some(t) => t,
                None => {
                    return self.error(
                        &format!("{path}.type"),
                        format!(
                            "unknown job type `{t}`; expected one of {}",
                            JobType::expected()
                        ),
                    );
                }
            },
            None => return self.error(&format!("{path}.type"), "missing"),
        };
        let mut job = JobDef::new(job_type, "");
        for (key, v) in fields {
            let p = format!("{path}.{key}");
            match key.as_str() {
                "type" => {}
                "processor" => job.processor = self.string(&p, v).unwrap_or_default(),
                "group" => {
                    if let Some(group) = self.string(&p, v) {
                        // millix has no group list: a group exists by being named.
                        self.catalog.groups.entry(group.clone()).or_default();
                        job.group = Some(group);
                    }
                }
                "priority" => job.priority = self.int(&p, v).unwrap_or(0),
                "payload" => self.payload(&p, job_type, v, &mut job),
                "object_list" => match v.as_array() {
                    Some(list) => {
                        for o in list {
                            if let Some(o) = self.string(&p, o) {
                                job.objects.push(o);
                            }
                        }
                    }
                    None => self.error(&p, "expected a list of object names"),
                },
                "option_list" => match v.as_object() {
                    Some(options) => {
                        for (opt, ov) in options {
                            self.option(&format!("{p}.{opt}"), opt, ov, &mut job);
                        }
                    }
                    None => self.error(&p, "expected an object"),
                },
                other => self.option(&p, other, v, &mut job),
            }
        }
        job.objects.sort();
        if job.processor.is_empty() {
            self.error(&format!("{path}.processor"), "missing");
        }
        self.catalog.jobs.insert(name.to_string(), job);
    }

    fn payload(&mut self, path: &str, job_type: JobType, v: &Json, job: &mut JobDef) {
        let Some(map) = v.as_object() else {
            return self.error(path, "expected an object");
        };
        let mut map = map.clone();
        if job_type == JobType::Function {
            let module = map.remove("module");
            let function = map.remove("function_name");
            match (
                module.as_ref().and_then(Json::as_str),
                function.as_ref().and_then(Json::as_str),
            ) {
                (Some(m), Some(f)) => {
                    map.insert("function".into(), Json::String(format!("{m}.{f}")));
                }
                (None, Some(f)) => {
                    map.insert("function".into(), Json::String(f.to_string()));
                }
                _ => self.error(
                    &format!("{path}.function_name"),
                    "a function job needs function_name",
                ),
            }
        }
        job.payload = map.into();
    }

    fn option(&mut self, path: &str, key: &str, v: &Json, job: &mut JobDef) {
        let s = &mut job.schedule;
        match key {
            "run_always" => s.run_always = self.int(path, v) == Some(1),
            "run_delay" => s.run_delay = self.int(path, v).unwrap_or(0),
            "run_every" => s.run_every = self.int(path, v),
            "run_on_the" => s.run_on_the = self.int(path, v),
            "run_at" => s.run_at = self.string(path, v),
            "run_date" => s.run_date = self.string(path, v),
            "cron" => s.cron = self.string(path, v),
            "timezone" => s.timezone = self.string(path, v),
            "timeout" => job.timeout = self.int(path, v).unwrap_or(0),
            "priority" => job.priority = self.int(path, v).unwrap_or(0),
            "max_attempts" => job.max_attempts = self.int(path, v).unwrap_or(1),
            "enable" | "enabled" => job.enabled = self.int(path, v) == Some(1),
            "status" => job.enabled = self.int(path, v) != Some(0),
            "required" => job.required = self.int(path, v) == Some(1),
            "description" => job.description = self.string(path, v),
            // Runtime bookkeeping, recomputed by the engine.
            "in_progress" | "last_date_begin" | "last_date_end" | "last_elapse"
            | "last_response" => {
                self.note(path, "runtime state; not imported");
            }
            _ => self.note(path, "no matching job column; not imported"),
        }
    }
}
