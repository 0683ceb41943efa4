//! Validation: the single definition of a well-formed catalog — references, ranges,
//! schedules and payloads, for a whole file, for entries imported into a catalog, or for
//! entries laid over a catalog without building the result.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map as JsonMap, Value as Json};

use super::*;

/// Every semantic problem in `file`, a whole catalog: references, ranges, schedules and
/// payloads.
pub fn validate(file: &CatalogFile) -> Vec<Problem> {
    validate_in(file, Scope::Whole)
}

/// Every semantic problem in `file`; in [`Scope::Entries`], a reference to a name the file does
/// not define is not one (the catalog it is imported into may define it).
pub fn validate_in(file: &CatalogFile, scope: Scope) -> Vec<Problem> {
    validate_layered(
        Layered {
            top: file,
            base: None,
        },
        scope,
    )
}

/// Every semantic problem of the catalog `entries` laid over `base` would make (an entry of
/// `entries` replaces `base`'s of the same name), without building it, which would copy every
/// entry of a large import.
pub fn validate_over(base: &CatalogFile, entries: &CatalogFile) -> Vec<Problem> {
    let layered = Layered {
        top: entries,
        base: Some(base),
    };
    validate_layered(layered, Scope::Whole)
}

/// A catalog seen as `top` laid over `base`: lookups find `top`'s entry first; listings give
/// each name once, in name order.
#[derive(Clone, Copy)]
struct Layered<'a> {
    top: &'a CatalogFile,
    base: Option<&'a CatalogFile>,
}

/// One section's entries of `top` over `base`'s, by name.
fn union<'a, T>(
    top: &'a BTreeMap<String, T>,
    base: Option<&'a BTreeMap<String, T>>,
) -> Vec<(&'a String, &'a T)> {
    let mut all: Vec<(&String, &T)> = top.iter().collect();
    if let Some(base) = base {
        all.extend(base.iter().filter(|(k, _)| !top.contains_key(*k)));
        all.sort_by(|a, b| a.0.cmp(b.0));
    }
    all
}

impl<'a> Layered<'a> {
    fn get<T>(
        &self,
        section: fn(&CatalogFile) -> &BTreeMap<String, T>,
        name: &str,
    ) -> Option<(&'a String, &'a T)> {
        section(self.top)
            .get_key_value(name)
            .or_else(|| self.base.and_then(|b| section(b).get_key_value(name)))
    }

    fn processor(&self, name: &str) -> Option<&'a ProcessorDef> {
        self.get(|f| &f.processors, name).map(|(_, v)| v)
    }

    fn object(&self, name: &str) -> Option<&'a ObjectDef> {
        self.get(|f| &f.objects, name).map(|(_, v)| v)
    }

    fn has_group(&self, name: &str) -> bool {
        self.get(|f| &f.groups, name).is_some()
    }

    /// The job and its name as the catalog holds it.
    fn job(&self, name: &str) -> Option<(&'a String, &'a JobDef)> {
        self.get(|f| &f.jobs, name)
    }
}

fn validate_layered(file: Layered<'_>, scope: Scope) -> Vec<Problem> {
    let mut p = Problems {
        found: Vec::new(),
        scope,
    };
    let processors = union(&file.top.processors, file.base.map(|b| &b.processors));
    let objects = union(&file.top.objects, file.base.map(|b| &b.objects));
    let groups = union(&file.top.groups, file.base.map(|b| &b.groups));
    let jobs = union(&file.top.jobs, file.base.map(|b| &b.jobs));
    let names = [
        (
            Section::Processor,
            processors.iter().map(|(k, _)| *k).collect::<Vec<_>>(),
        ),
        (Section::Object, objects.iter().map(|(k, _)| *k).collect()),
        (Section::Group, groups.iter().map(|(k, _)| *k).collect()),
        (Section::Job, jobs.iter().map(|(k, _)| *k).collect()),
    ];
    for (section, keys) in names {
        for name in keys {
            if let Err(reason) = check_name(name) {
                p.found.push(Problem {
                    section,
                    name: name.clone(),
                    field: None,
                    at: None,
                    reason,
                });
            }
        }
    }
    for (name, proc) in processors {
        validate_processor(&mut p, name, proc);
    }
    for (name, obj) in objects {
        validate_object(&mut p, name, obj);
    }
    for (name, job) in jobs {
        validate_job(&mut p, file, name, job);
    }
    p.found
}

fn validate_processor(p: &mut Problems, name: &str, proc: &ProcessorDef) {
    let s = Section::Processor;
    if !(1..=MAX_INSTANCES).contains(&proc.instances) {
        p.push(
            s,
            name,
            "instances",
            format!("must be 1–{MAX_INSTANCES}, got {}", proc.instances),
        );
    }
    if let Some(max) = proc.max_instances {
        if max > MAX_INSTANCES {
            p.push(
                s,
                name,
                "max_instances",
                format!("must be at most {MAX_INSTANCES}, got {max}"),
            );
        } else if max < proc.instances {
            p.push(
                s,
                name,
                "max_instances",
                format!("{max} is below instances = {}", proc.instances),
            );
        }
    }
    if let Some(n) = proc.prefetch
        && !(0..=MAX_PREFETCH).contains(&n)
    {
        p.push(
            s,
            name,
            "prefetch",
            format!("must be 0–{MAX_PREFETCH}, got {n}"),
        );
    }
    if let Some(host) = &proc.ip_address
        && !is_host(host)
    {
        p.push(
            s,
            name,
            "ip_address",
            format!("`{host}` is neither an IP address nor a host name"),
        );
    }
    for (i, node) in proc.nodes.iter().enumerate() {
        let problem = if node.trim().is_empty() {
            Some("a node name is empty".to_string())
        } else if node.trim() != node {
            Some(format!("`{node}` has spaces around it"))
        } else if node.contains(',') {
            Some(format!("`{node}`: a node name cannot contain a comma"))
        } else if proc.nodes[..i].contains(node) {
            Some(format!("`{node}` is named twice"))
        } else {
            None
        };
        if let Some(problem) = problem {
            p.push(s, name, "nodes", problem);
        }
    }
    if let Some(port) = proc.port
        && !(1..=65535).contains(&port)
    {
        p.push(s, name, "port", format!("must be 1–65535, got {port}"));
    }
    if let Some(problem) = proc
        .rpc_password
        .as_deref()
        .and_then(|v| secret::Secret::parse(v).problem())
    {
        p.push(s, name, "rpc_password", problem);
    }
    if proc.ip_address.is_none() {
        for (field, set) in [
            ("port", proc.port.is_some()),
            ("rpc_user", proc.rpc_user.is_some()),
            ("rpc_password", proc.rpc_password.is_some()),
        ] {
            if set {
                p.push(
                    s,
                    name,
                    field,
                    "only a remote processor (with ip_address) has one".into(),
                );
            }
        }
    }
}

fn validate_object(p: &mut Problems, name: &str, obj: &ObjectDef) {
    let s = Section::Object;
    if let Some(ttl) = obj.time_to_live
        && ttl < 0
    {
        p.push(
            s,
            name,
            "time_to_live",
            format!("must be seconds ≥ 0, got {ttl}"),
        );
    }
    if let Some(len) = obj.id_length
        && len < 1
    {
        p.push(
            s,
            name,
            "id_length",
            format!("must be at least 1, got {len}"),
        );
    }
    if obj.allow_prune && obj.time_to_live.is_none() {
        p.push(
            s,
            name,
            "allow_prune",
            "pruning needs a time_to_live".into(),
        );
    }
}

fn validate_job(p: &mut Problems, file: Layered<'_>, name: &str, job: &JobDef) {
    let s = Section::Job;
    match file.processor(&job.processor) {
        None => p.unresolved(
            s,
            name,
            "processor",
            format!(
                "processor `{}` is not defined in this catalog",
                job.processor
            ),
        ),
        Some(proc) if job.job_type == JobType::Rpc && proc.ip_address.is_none() => p.push(
            s,
            name,
            "processor",
            format!(
                "an rpc job needs a remote processor; `{}` is local",
                job.processor
            ),
        ),
        Some(proc)
            if proc.ip_address.is_some()
                && !matches!(job.job_type, JobType::Function | JobType::Rpc) =>
        {
            p.push(
                s,
                name,
                "processor",
                format!(
                    "`{}` is a remote processor, whose runs are calls to its node: it runs \
                     function and rpc jobs only; a {} job needs a local processor",
                    job.processor, job.job_type
                ),
            )
        }
        Some(_) => {}
    }
    if let Some(group) = &job.group
        && !file.has_group(group)
    {
        p.unresolved(
            s,
            name,
            "group",
            format!("group `{group}` is not defined in this catalog"),
        );
    }
    let mut seen = BTreeSet::new();
    for object in &job.objects {
        if file.object(object).is_none() {
            p.unresolved(
                s,
                name,
                "objects",
                format!("object `{object}` is not defined in this catalog"),
            );
        }
        if !seen.insert(object) {
            p.push(
                s,
                name,
                "objects",
                format!("object `{object}` is listed twice"),
            );
        }
    }
    for (field, value, min) in [
        ("timeout", job.timeout, 0),
        ("start_within", job.start_within, 0),
        ("aging", job.aging, 0),
        ("misfire_window", job.misfire_window, 0),
        ("max_catchup", job.max_catchup, 1),
        ("max_overlap", job.max_overlap, 1),
        ("max_attempts", job.max_attempts, 1),
        ("backoff_base", job.backoff_base, 0),
        ("backoff_max", job.backoff_max, 0),
    ] {
        if value < min {
            p.push(
                s,
                name,
                field,
                format!("must be at least {min}, got {value}"),
            );
        }
    }
    if !(1..=STRETCH_MAX_LIMIT).contains(&job.stretch_max) {
        p.push(
            s,
            name,
            "stretch_max",
            format!(
                "must be from 1 to {STRETCH_MAX_LIMIT}, got {}",
                job.stretch_max
            ),
        );
    } else if job.stretch_max > 1 && job.schedule.is_on_demand() {
        p.push(
            s,
            name,
            "stretch_max",
            "only a recurring job (run_always, run_every, run_on_the, run_at or cron) has a \
             period to stretch"
                .to_string(),
        );
    }
    if job.backoff_max < job.backoff_base {
        p.push(
            s,
            name,
            "backoff_max",
            format!(
                "{} is below backoff_base = {}",
                job.backoff_max, job.backoff_base
            ),
        );
    }
    for e in job.schedule.validate() {
        p.push(s, name, e.field, e.reason);
    }
    validate_payload(p, file, name, job);
}

fn validate_payload(p: &mut Problems, file: Layered<'_>, name: &str, job: &JobDef) {
    let pay = &job.payload.map();
    let mut need_str = |key: &str| -> Option<String> {
        match pay.get(key) {
            Some(Json::String(v)) if !v.trim().is_empty() => Some(v.clone()),
            Some(other) => {
                p.push(
                    Section::Job,
                    name,
                    "payload",
                    format!("`{key}` must be a non-empty string, got {other}"),
                );
                None
            }
            None => {
                p.push(
                    Section::Job,
                    name,
                    "payload",
                    format!("a {} job needs payload.{key}", job.job_type),
                );
                None
            }
        }
    };
    match job.job_type {
        JobType::Function => {
            need_str("function");
        }
        JobType::Rpc => {
            need_str("method");
        }
        JobType::Sql => {
            need_str("sql");
            if let Some(object) = need_str("object") {
                match file.object(&object) {
                    None => p.unresolved(
                        Section::Job,
                        name,
                        "payload",
                        format!("payload.object `{object}` is not defined in this catalog"),
                    ),
                    Some(o) if o.in_catalog() => p.push(
                        Section::Job,
                        name,
                        "payload",
                        format!(
                            "payload.object `{object}` lives in the catalog database itself; a \
                             sql job may not run SQL against the catalog (it would bypass the \
                             engine's bookkeeping): give the object a database file of its own"
                        ),
                    ),
                    Some(_) => {}
                }
            }
        }
        JobType::Url => {
            if let Some(url) = need_str("url")
                && !(url.starts_with("http://") || url.starts_with("https://"))
            {
                p.push(
                    Section::Job,
                    name,
                    "payload",
                    format!("payload.url must start with http:// or https://, got `{url}`"),
                );
            }
            if let Some(method) = pay.get("method") {
                let ok = method.as_str().is_some_and(|m| {
                    ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"].contains(&m)
                });
                if !ok {
                    p.push(Section::Job, name, "payload", format!("payload.method must be GET, POST, PUT, PATCH, DELETE or HEAD, got {method}"));
                }
            }
        }
        JobType::Command => validate_command(p, name, pay),
        JobType::Workflow => validate_workflow(p, file, name, pay),
        JobType::Custom => {
            need_str("executor");
        }
    }
    validate_open_params(p, name, job);
}

/// The payload key that lists the fields a run's params may set in a job whose payload an
/// admin fixed (an rpc job, a job on a remote processor, a url job's body; see
/// `executor::fixed_input`): `open_params = ["day", "format"]`.
pub const OPEN_PARAMS: &str = "open_params";

/// A url job's own payload keys: its request (what a run's params never reach).
pub const URL_KEYS: &[&str] = &["url", "method", "headers", "body", "send_input"];

/// The payload keys of a job whose payload an admin fixed — a run's params fill only its
/// `open_params` there (`executor::fixed_input`) —, or `None` when a run's params are the
/// job's own input: an rpc job (`method`), a function job on a remote processor (`function`),
/// a url job that sends its input as its body (its request). Command and sql jobs take params
/// apart from their payload (`JOBVISOR_PARAMS`, bound values); local functions and custom
/// executors are not admin-only.
pub fn fixed_payload_keys(
    job_type: JobType,
    remote: bool,
    payload: &Json,
) -> Option<&'static [&'static str]> {
    match job_type {
        JobType::Rpc => Some(&["method"]),
        JobType::Function if remote => Some(&["function"]),
        JobType::Url
            if payload.get("body").is_none()
                && payload.get("send_input").and_then(Json::as_bool) == Some(true) =>
        {
            Some(URL_KEYS)
        }
        _ => None,
    }
}

/// Why a run's `params` may not run a job whose payload fixes all but its `open_params`
/// (`own_keys` are the executor's: never open): `(field, reason)`, the field as
/// `params.<name>`.
pub fn run_params_problem(
    payload: &Json,
    own_keys: &[&str],
    params: &Json,
) -> Option<(String, String)> {
    let params = match params {
        Json::Null => return None,
        Json::Object(params) => params,
        _ => {
            return Some(("params".into(), "must be an object of named fields".into()));
        }
    };
    let open = open_params(payload);
    let listed = if open.is_empty() {
        "none".to_string()
    } else {
        open.iter()
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let fixed = |k: &str| own_keys.contains(&k) || payload.get(k).is_some();
    params
        .keys()
        .find(|k| !open.contains(&k.as_str()) || own_keys.contains(&k.as_str()))
        .map(|k| {
            let reason = if fixed(k) {
                format!(
                    "the job's payload fixes `{k}` and a run may not override it; a run's \
                     params may set only the fields payload.open_params lists ({listed})"
                )
            } else {
                format!(
                    "not an open field of the job's payload; a run's params may set only the \
                     fields payload.open_params lists ({listed}): an admin adds `{k}` there to \
                     allow it"
                )
            };
            (format!("params.{k}"), reason)
        })
}

/// The names `payload.open_params` lists.
pub fn open_params(payload: &Json) -> Vec<&str> {
    payload
        .get(OPEN_PARAMS)
        .and_then(Json::as_array)
        .map(|names| names.iter().filter_map(Json::as_str).collect())
        .unwrap_or_default()
}

/// `payload.open_params`: a list of field names, none of them the executor's own keys (a
/// run may never choose an rpc job's method, a function, a url job's request).
fn validate_open_params(p: &mut Problems, name: &str, job: &JobDef) {
    let Some(open) = job.payload.get(OPEN_PARAMS) else {
        return;
    };
    let names: Option<Vec<&str>> = open.as_array().and_then(|names| {
        names
            .iter()
            .map(|n| n.as_str().filter(|n| !n.trim().is_empty()))
            .collect()
    });
    let Some(names) = names else {
        p.push(
            Section::Job,
            name,
            "payload",
            format!(
                "payload.open_params must be a list of the field names a run's params may set, \
                 got {open}"
            ),
        );
        return;
    };
    let own: &[&str] = match job.job_type {
        JobType::Rpc => &["method"],
        JobType::Function => &["function"],
        JobType::Url => URL_KEYS,
        _ => &[],
    };
    if let Some(own) = names.iter().find(|n| own.contains(n) || **n == OPEN_PARAMS) {
        p.push(
            Section::Job,
            name,
            "payload",
            format!(
                "payload.open_params may not list `{own}`: what a {} job does is its \
                 payload's, never a run's",
                job.job_type
            ),
        );
    }
}

fn validate_command(p: &mut Problems, name: &str, pay: &JsonMap<String, Json>) {
    // A command's declared limits; another type's payload is its input, `limits` its own.
    if let Err(reason) = super::limits::memory_limit(pay) {
        p.push(Section::Job, name, "payload", reason);
    }
    let shell = pay.get("shell").and_then(Json::as_bool).unwrap_or(false);
    match (pay.get("argv"), pay.get("command")) {
        (Some(Json::Array(argv)), None) if !argv.is_empty() && argv.iter().all(Json::is_string) => {
        }
        (Some(_), None) => p.push(
            Section::Job,
            name,
            "payload",
            "payload.argv must be a non-empty list of strings".into(),
        ),
        (None, Some(Json::String(_))) if shell => {}
        (None, Some(_)) => p.push(
            Section::Job,
            name,
            "payload",
            "payload.command (a shell line) needs payload.shell = true; or give payload.argv"
                .into(),
        ),
        (Some(_), Some(_)) => p.push(
            Section::Job,
            name,
            "payload",
            "give payload.argv or payload.command, not both".into(),
        ),
        (None, None) => p.push(
            Section::Job,
            name,
            "payload",
            "a command job needs payload.argv (or payload.command with shell = true)".into(),
        ),
    }
}

fn validate_workflow(p: &mut Problems, file: Layered<'_>, name: &str, pay: &JsonMap<String, Json>) {
    let scope = p.scope;
    let mut located = |at: String, reason: String| {
        p.found.push(Problem {
            section: Section::Job,
            name: name.to_string(),
            field: Some("payload"),
            at: Some(at),
            reason,
        })
    };
    let spec = match workflow::WorkflowSpec::parse(pay) {
        Ok(spec) => spec,
        Err(problems) => {
            for problem in problems {
                located(problem.at, problem.reason);
            }
            return;
        }
    };
    for (i, step) in spec.steps.iter().enumerate() {
        if step.job == name {
            located(
                format!("steps[{i}].job"),
                format!("step `{}` runs the workflow itself", step.name),
            );
        } else if file.job(&step.job).is_none() && scope == Scope::Whole {
            located(
                format!("steps[{i}].job"),
                format!(
                    "step `{}` runs job `{}`, which is not defined in this catalog",
                    step.name, step.job
                ),
            );
        }
    }
    if let Some(cycle) = nested_cycle(file, name) {
        let i = spec
            .steps
            .iter()
            .position(|s| cycle.get(1) == Some(&s.job))
            .unwrap_or(0);
        located(
            format!("steps[{i}].job"),
            format!("workflows run each other in a cycle: {}", cycle.join(" → ")),
        );
    }
}

/// A cycle of workflows through their steps' jobs that starts at `start` (a workflow whose
/// step runs a workflow that runs it again would expand forever), if any.
fn nested_cycle(file: Layered<'_>, start: &str) -> Option<Vec<String>> {
    fn steps_of<'a>(file: Layered<'a>, job: &str) -> Vec<&'a str> {
        let Some((_, def)) = file.job(job) else {
            return Vec::new();
        };
        if def.job_type != JobType::Workflow {
            return Vec::new();
        }
        workflow::WorkflowSpec::parse(&def.payload.map())
            .map(|spec| {
                spec.steps
                    .iter()
                    .filter_map(|s| file.job(&s.job).map(|(k, _)| k.as_str()))
                    .collect()
            })
            .unwrap_or_default()
    }
    // Depth-first from `start`; a path that comes back to it is the cycle (other cycles are
    // reported by their own workflows).
    let mut path = vec![start.to_string()];
    let mut seen = BTreeSet::new();
    fn walk(
        file: Layered<'_>,
        start: &str,
        path: &mut Vec<String>,
        seen: &mut BTreeSet<String>,
    ) -> bool {
        let at = path.last().cloned().unwrap_or_default();
        for next in steps_of(file, &at) {
            if next == start {
                path.push(next.to_string());
                return true;
            }
            if seen.insert(next.to_string()) {
                path.push(next.to_string());
                if walk(file, start, path, seen) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    walk(file, start, &mut path, &mut seen).then_some(path)
}
