//! job.conf: the catalog as a file — its model, validation, and the two formats that carry it
//! (our TOML `job.conf`, and the millix node's `job.json` for import).
//!
//! Invariant: nothing here opens a database or reads a clock; `validate` is the single
//! definition of what a well-formed catalog is, shared by `check`, `import`, the CLI's
//! `jobs add|edit` and (later) the API.

pub mod limits;
pub mod merge;
pub mod millix;
mod payload;
pub mod secret;
pub mod toml_format;
mod validate;
pub mod workflow;

pub use payload::Payload;
pub use validate::{
    OPEN_PARAMS, URL_KEYS, fixed_payload_keys, open_params, run_params_problem, validate,
    validate_in, validate_over,
};

use std::collections::BTreeMap;

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
    /// Runs claimed beyond the free instances, at most [`MAX_PREFETCH`]; `None`: sized from the
    /// durations its runs measured (none before a run was measured, none for runs over a
    /// second).
    pub prefetch: Option<i64>,
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
            .field("prefetch", &shown.prefetch)
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
            prefetch: None,
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
    pub payload: Payload,
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
    /// Milliseconds: a run not started this long after it became due ends `expired`; 0 = no
    /// deadline.
    pub start_within: i64,
    /// Milliseconds a queued run waits per point of priority it gains (up to
    /// [`MAX_AGING_BOOST`]), so that a stream of more important work cannot starve it; 0 = its
    /// runs never age.
    pub aging: i64,
}

/// The most priority a queued run gains by aging.
pub const MAX_AGING_BOOST: i64 = 1000;

/// The largest accepted `stretch_max`.
pub const STRETCH_MAX_LIMIT: i64 = 64;

/// The most concurrent executions a processor may have (`instances`, `max_instances`): each
/// is a task and a connection's worth of memory; a billion would exhaust the node long before
/// the self-tuning policy could hold it back.
pub const MAX_INSTANCES: i64 = 1000;

/// The most runs a processor may claim beyond its free instances.
pub const MAX_PREFETCH: i64 = 1000;

/// The longest catalog name.
pub const MAX_NAME_LEN: usize = 100;

impl JobDef {
    /// A job of `job_type` on `processor` with every other field at its default.
    pub fn new(job_type: JobType, processor: impl Into<String>) -> Self {
        Self {
            job_type,
            processor: processor.into(),
            group: None,
            payload: Payload::default(),
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
            start_within: 0,
            aging: 0,
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
