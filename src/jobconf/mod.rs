//! job.conf: the catalog as a file — its model, validation, and the two formats that carry it
//! (our TOML `job.conf`, and the millix node's `job.json` for import).
//!
//! Invariant: nothing here opens a database or reads a clock; `validate` is the single
//! definition of what a well-formed catalog is, shared by `check`, `import`, the CLI's
//! `jobs add|edit` and (later) the API.

pub mod merge;
pub mod millix;
pub mod secret;
pub mod toml_format;
pub mod workflow;

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map as JsonMap, Value as Json};

use crate::config::NodeConfig;
use crate::diag::Diagnostic;
use crate::model::{JobType, ObjectType};
use crate::schedule::{MisfirePolicy, OverlapPolicy, ScheduleSpec};

/// The default catalog for the lowest supported hardware, compiled into the binary.
pub const DEFAULT_JOB_CONF: &str = include_str!("../../config/job.conf");

/// The seed catalog is unreadable or invalid.
#[derive(Debug, thiserror::Error)]
pub enum SeedError {
    /// The file cannot be read.
    #[error("{file}: cannot read: {source}")]
    Read {
        /// The file.
        file: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file has errors.
    #[error("{}", render_all(file, diagnostics))]
    Invalid {
        /// The file.
        file: String,
        /// Every error.
        diagnostics: Vec<Diagnostic>,
    },
}

fn render_all(file: &str, diagnostics: &[Diagnostic]) -> String {
    diagnostics
        .iter()
        .map(|d| d.render(file))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The catalog a new node is seeded with: `catalog.seed`, else the built-in `config/job.conf`;
/// returns it and where it came from.
pub fn load_seed(cfg: &NodeConfig) -> Result<(CatalogFile, String), SeedError> {
    let (file, text) = if cfg.catalog.seed.is_empty() {
        (
            "built-in config/job.conf".to_string(),
            DEFAULT_JOB_CONF.to_string(),
        )
    } else {
        let file = cfg.catalog.seed.clone();
        let text = std::fs::read_to_string(&file).map_err(|source| SeedError::Read {
            file: file.clone(),
            source,
        })?;
        (file, text)
    };
    match toml_format::parse(&text) {
        Ok(catalog) => Ok((catalog, file)),
        Err(diagnostics) => Err(SeedError::Invalid { file, diagnostics }),
    }
}

/// A whole catalog: processors, objects, groups and jobs, each keyed by its unique name.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CatalogFile {
    /// `job_processor` rows.
    pub processors: BTreeMap<String, ProcessorDef>,
    /// `object` rows.
    pub objects: BTreeMap<String, ObjectDef>,
    /// `job_group` rows.
    pub groups: BTreeMap<String, GroupDef>,
    /// `job` rows with their `job_object` links.
    pub jobs: BTreeMap<String, JobDef>,
}

/// A processor: threads on this node, or a remote node reached over its API.
#[derive(Clone, PartialEq)]
pub struct ProcessorDef {
    /// Concurrent executions, 1–[`MAX_INSTANCES`]. Default 1.
    pub instances: i64,
    /// Upper bound for the self-tuning policy, at most [`MAX_INSTANCES`]; `None` = `instances`.
    pub max_instances: Option<i64>,
    /// The nodes that may run it, by name (sorted); empty: any node sharing the catalog. A
    /// node starts only the processors it may run, and schedules and claims only their jobs.
    pub nodes: Vec<String>,
    /// Set for a remote processor (another node): an IP address or a host name.
    pub ip_address: Option<String>,
    /// The remote node's API port.
    pub port: Option<i64>,
    /// User on the remote node.
    pub rpc_user: Option<String>,
    /// The credential on the remote node: an API token (or, with `rpc_user`, a password), or
    /// a reference `env:NAME` / `file:PATH` resolved at each call ([`secret`]).
    pub rpc_password: Option<String>,
    /// `status = 1`.
    pub enabled: bool,
}

/// The API port of a remote processor's node when its row names none (the default
/// `http.bind`).
pub const DEFAULT_API_PORT: i64 = 7878;

impl ProcessorDef {
    /// `host:port` of the remote node (an IPv6 address in brackets); `None` for a local
    /// processor.
    pub fn address(&self) -> Option<String> {
        let host = self.ip_address.as_deref()?;
        let port = self.port.unwrap_or(DEFAULT_API_PORT);
        Some(if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        })
    }

    /// The definition as it may be shown: a stored secret as `***` (a reference as written).
    pub fn redacted(&self) -> ProcessorDef {
        ProcessorDef {
            rpc_password: self.rpc_password.as_deref().map(secret::shown),
            ..self.clone()
        }
    }
}

impl CatalogFile {
    /// The catalog as it may be shown: every stored secret as `***`.
    pub fn redacted(&self) -> CatalogFile {
        let mut file = self.clone();
        for p in file.processors.values_mut() {
            *p = p.redacted();
        }
        file
    }
}

/// Debug output shows a stored secret as `***`: a definition printed in a log or a panic
/// message must not carry it.
impl std::fmt::Debug for ProcessorDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown = self.redacted();
        f.debug_struct("ProcessorDef")
            .field("instances", &shown.instances)
            .field("max_instances", &shown.max_instances)
            .field("nodes", &shown.nodes)
            .field("ip_address", &shown.ip_address)
            .field("port", &shown.port)
            .field("rpc_user", &shown.rpc_user)
            .field("rpc_password", &shown.rpc_password)
            .field("enabled", &shown.enabled)
            .finish()
    }
}

impl Default for ProcessorDef {
    fn default() -> Self {
        Self {
            instances: 1,
            max_instances: None,
            nodes: Vec::new(),
            ip_address: None,
            port: None,
            rpc_user: None,
            rpc_password: None,
            enabled: true,
        }
    }
}

/// A data object the node manages.
#[derive(Debug, Clone, PartialEq)]
pub struct ObjectDef {
    /// What it is. Default table.
    pub object_type: ObjectType,
    /// Where it lives: a SQLite file path, or `catalog` for the engine's own database.
    pub conn_string: Option<String>,
    /// `object_key`: the key column.
    pub key_field: Option<String>,
    /// `object_name_field`: the column holding a row's name or time.
    pub name_field: Option<String>,
    /// Length of generated ids.
    pub id_length: Option<i64>,
    /// Prefix for searches by id.
    pub search_prefix: Option<String>,
    /// Age in seconds after which rows may be pruned.
    pub time_to_live: Option<i64>,
    /// Whether `object_prune` may delete rows.
    pub allow_prune: bool,
    /// Whether the API may list the rows.
    pub allow_list: bool,
    /// Free text.
    pub description: Option<String>,
    /// `status = 1`.
    pub enabled: bool,
}

impl ObjectDef {
    /// Whether the object lives in the catalog database (`conn_string` absent or `catalog`).
    pub fn in_catalog(&self) -> bool {
        self.conn_string
            .as_deref()
            .is_none_or(|c| c.is_empty() || c == "catalog")
    }
}

impl Default for ObjectDef {
    fn default() -> Self {
        Self {
            object_type: ObjectType::Table,
            conn_string: None,
            key_field: None,
            name_field: None,
            id_length: None,
            search_prefix: None,
            time_to_live: None,
            allow_prune: false,
            allow_list: false,
            description: None,
            enabled: true,
        }
    }
}

/// A job group.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupDef {
    /// Maintenance groups (pruning, vacuum, backup rotation) keep running when the disk is
    /// critical, so that the node can recover.
    pub maintenance: bool,
    /// Free text.
    pub description: Option<String>,
    /// `status = 1`.
    pub enabled: bool,
}

impl Default for GroupDef {
    fn default() -> Self {
        Self {
            maintenance: false,
            description: None,
            enabled: true,
        }
    }
}

/// A catalog job.
#[derive(Debug, Clone, PartialEq)]
pub struct JobDef {
    /// Which executor runs it.
    pub job_type: JobType,
    /// The processor (by name) that runs it.
    pub processor: String,
    /// The group (by name), if any.
    pub group: Option<String>,
    /// The executor's instructions (function name, URL, argv, SQL, steps…), a JSON object.
    pub payload: JsonMap<String, Json>,
    /// Free text.
    pub description: Option<String>,
    /// Larger is more important.
    pub priority: i64,
    /// Milliseconds; 0 = none.
    pub timeout: i64,
    /// When it runs.
    pub schedule: ScheduleSpec,
    /// What to do with missed slots.
    pub misfire_policy: MisfirePolicy,
    /// How far back (ms) a missed slot still counts.
    pub misfire_window: i64,
    /// Cap on catch-up runs for `misfire_policy = "all"`.
    pub max_catchup: i64,
    /// What to do when a slot comes while a run is in progress.
    pub overlap_policy: OverlapPolicy,
    /// Cap on concurrent runs for `overlap_policy = "allow"`.
    pub max_overlap: i64,
    /// Attempts before a failing run is `dead`.
    pub max_attempts: i64,
    /// First retry delay (ms); doubles each attempt.
    pub backoff_base: i64,
    /// Largest retry delay (ms).
    pub backoff_max: i64,
    /// Objects (by name) the job writes; sorted, unique.
    pub objects: Vec<String>,
    /// `status = 1`.
    pub enabled: bool,
    /// Part of the minimum the node always runs.
    pub required: bool,
    /// How far the node may stretch the period of this recurring job under strain (1: never;
    /// 4: it may run four times less often than scheduled). Up to [`STRETCH_MAX_LIMIT`].
    pub stretch_max: i64,
}

/// The largest accepted `stretch_max`.
pub const STRETCH_MAX_LIMIT: i64 = 64;

/// The most concurrent executions a processor may have (`instances`, `max_instances`): each
/// is a task and a connection's worth of memory; a billion would exhaust the node long before
/// the self-tuning policy could hold it back.
pub const MAX_INSTANCES: i64 = 1000;

/// The longest catalog name.
pub const MAX_NAME_LEN: usize = 100;

impl JobDef {
    /// A job of `job_type` on `processor` with every other field at its default.
    pub fn new(job_type: JobType, processor: impl Into<String>) -> Self {
        Self {
            job_type,
            processor: processor.into(),
            group: None,
            payload: JsonMap::new(),
            description: None,
            priority: 0,
            timeout: 0,
            schedule: ScheduleSpec::default(),
            misfire_policy: MisfirePolicy::default(),
            misfire_window: DEFAULT_MISFIRE_WINDOW,
            max_catchup: 10,
            overlap_policy: OverlapPolicy::default(),
            max_overlap: 1,
            max_attempts: 1,
            backoff_base: 1000,
            backoff_max: 300_000,
            objects: Vec::new(),
            enabled: true,
            required: false,
            stretch_max: 1,
        }
    }
}

/// Default misfire window: 60 s (Quartz's misfire threshold), in milliseconds.
pub const DEFAULT_MISFIRE_WINDOW: i64 = 60_000;

/// The four kinds of catalog entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Section {
    /// `[processor.NAME]`.
    Processor,
    /// `[object.NAME]`.
    Object,
    /// `[group.NAME]`.
    Group,
    /// `[job.NAME]`.
    Job,
}

impl Section {
    /// The table name used in job.conf.
    pub fn as_str(self) -> &'static str {
        match self {
            Section::Processor => "processor",
            Section::Object => "object",
            Section::Group => "group",
            Section::Job => "job",
        }
    }
}

/// A semantic problem in a catalog, located by entry and field.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Problem {
    /// The kind of entry.
    pub section: Section,
    /// The entry's name.
    pub name: String,
    /// The field, if the problem is in one.
    pub field: Option<&'static str>,
    /// Where inside the field's value, for a structured one (`steps[2].after` in a workflow's
    /// payload): diagnostics point at that line.
    pub at: Option<String>,
    /// What is wrong.
    pub reason: String,
}

/// Where the names a file references must be defined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The file is a whole catalog (a seed, `check`): every processor, group, object and job
    /// it names is defined in it.
    Whole,
    /// The file's entries are upserted into a catalog (`import`): a name the file does not
    /// define may be the catalog's, so it is resolved later, against the file and the catalog
    /// together (`ops::files::new_problems`).
    Entries,
}

struct Problems {
    found: Vec<Problem>,
    scope: Scope,
}

impl Problems {
    /// A reference to an entry the file does not define: a problem of a whole catalog only.
    fn unresolved(&mut self, section: Section, name: &str, field: &'static str, reason: String) {
        if self.scope == Scope::Whole {
            self.push(section, name, field, reason);
        }
    }

    fn push(&mut self, section: Section, name: &str, field: &'static str, reason: String) {
        self.found.push(Problem {
            section,
            name: name.to_string(),
            field: Some(field),
            at: None,
            reason,
        });
    }
}

/// Checks a name used as a catalog key: 1–[`MAX_NAME_LEN`] characters of letters, digits,
/// `_`, `-`, `.`, the first a letter, a digit or `_` — so no name is `.` or `..` (a path
/// segment of the API) nor reads as a command-line flag (`-x`). Every face reaches it through
/// `ops`; the OpenAPI document states it as [`NAME_PATTERN`].
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(format!(
            "name `{name}` must be 1–{MAX_NAME_LEN} characters long"
        ));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    {
        return Err(format!(
            "name `{name}` may only contain letters, digits, `_`, `-` and `.`"
        ));
    }
    if !name.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_') {
        return Err(format!(
            "name `{name}` must begin with a letter, a digit or `_`"
        ));
    }
    Ok(())
}

/// [`check_name`] as a regular expression (for the OpenAPI document).
pub const NAME_PATTERN: &str = "^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$";

/// Whether `host` is an IP address (an IPv6 one may be in brackets) or a host name (RFC 1123:
/// dot-separated labels of 1–63 letters, digits and `-`, not beginning or ending with `-`;
/// 253 characters at most — and `_`, which RFC 1123 leaves out but container and service
/// names carry and resolvers answer).
pub fn is_host(host: &str) -> bool {
    let unbracketed = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if unbracketed.parse::<std::net::IpAddr>().is_ok() {
        return true;
    }
    let name = host.strip_suffix('.').unwrap_or(host);
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            (1..=63).contains(&label.len())
                && label
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

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
/// `entries` replaces `base`'s of the same name), without building it: an import of 192,000
/// jobs would copy them all for it.
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
    let pay = &job.payload;
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
        workflow::WorkflowSpec::parse(&def.payload)
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

#[cfg(test)]
mod name_and_host_tests {
    use super::*;

    #[test]
    fn names_that_are_path_segments_or_flags_are_refused() {
        for bad in [".", "..", "-x", ".hidden", "-", ""] {
            assert!(check_name(bad).is_err(), "{bad:?} accepted");
        }
        for good in ["a", "_x", "etl.nightly", "0-day", "x..y"] {
            assert!(check_name(good).is_ok(), "{good:?} refused");
        }
    }

    #[test]
    fn a_remote_address_is_an_ip_or_a_host_name() {
        for good in [
            "127.0.0.1",
            "::1",
            "[::1]",
            "node-b",
            "node_b",
            "jobs.example.org",
            "a.b.",
        ] {
            assert!(is_host(good), "{good} refused");
        }
        for bad in [
            "",
            "a b",
            "-x",
            "x-",
            "a..b",
            "http://x",
            "x:80",
            "é.example",
            &"a".repeat(64),
        ] {
            assert!(!is_host(bad), "{bad} accepted");
        }
    }
}
