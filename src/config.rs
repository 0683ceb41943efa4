//! Node configuration: one serde struct per section, layered file → environment → CLI flags.
//!
//! Invariant: `load` is the only place layers are combined, and an unknown key or a wrong type
//! is an error naming the key and where it came from (file:line:col, or the environment).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use config::{Config, Environment, File, FileFormat};
use serde::{Deserialize, Serialize};

use crate::diag::line_col;

/// The documented defaults, also compiled into the binary (`jobvisor config --print-defaults`).
pub const DEFAULT_TOML: &str = include_str!("../config/default.toml");

/// Prefix of the environment variables that set keys: `JOBVISOR__SECTION__KEY`.
pub const ENV_PREFIX: &str = "JOBVISOR";

/// Errors from loading the node configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{path}: cannot read: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A key in the file is unknown, mistyped or out of range.
    #[error("{path}:{line}:{col}: {reason}")]
    File {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        col: usize,
        /// What is wrong, naming the key.
        reason: String,
    },
    /// An environment variable or flag set an unknown key or a wrong type.
    #[error("{origin}: {reason}")]
    Layer {
        /// "environment (JOBVISOR__…)" or "command line".
        origin: &'static str,
        /// What is wrong, naming the key.
        reason: String,
    },
    /// A value is well-typed but invalid.
    #[error("{key}: {reason}")]
    Invalid {
        /// The dotted key, e.g. `database.read_pool_size`.
        key: &'static str,
        /// Why.
        reason: String,
    },
}

/// The whole node configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct NodeConfig {
    /// Folders whose new files become runs (`[[inbox]]`). Default: none.
    pub inbox: Vec<InboxSection>,
    /// Identity and folders.
    pub node: NodeSection,
    /// The catalog database.
    pub database: DatabaseSection,
    /// Catalog seeding.
    pub catalog: CatalogSection,
    /// The API and web UI.
    pub http: HttpSection,
    /// Logging.
    pub log: LogSection,
    /// Health sampling.
    pub health: HealthSection,
    /// Limits on job executions.
    pub executor: ExecLimits,
    /// The self-tuning policy: thresholds, hysteresis, pacing.
    pub policy: crate::policy::PolicyConfig,
}

/// One `[[inbox]]`: a folder watched for new files, each of which becomes a run of `job`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InboxSection {
    /// The folder watched (created when missing). Required.
    pub path: String,
    /// The catalog job each file's run is of. Required.
    pub job: String,
    /// Which file names count, a glob (`*.eml`); others are left where they are. Default: "*".
    #[serde(default = "InboxSection::any_name")]
    pub pattern: String,
}

impl InboxSection {
    fn any_name() -> String {
        "*".into()
    }
}

/// `[node]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NodeSection {
    /// Node name in a shared catalog. Default: "" (the host name).
    pub name: String,
    /// Folder for the database, backups and job folders. Default: "jobvisor-data".
    pub data_dir: String,
    /// IANA time zone for schedules that name none. Default: "" (the system's).
    pub timezone: String,
    /// How long running jobs may finish at shutdown before they are returned to the queue,
    /// milliseconds. Default: 10000.
    pub shutdown_grace: u64,
    /// How often the node writes its heartbeat, milliseconds: it proves the node holds its
    /// name, renews the leases of the runs it holds, and sweeps the nodes sharing the catalog
    /// whose heartbeat stopped. Default: 5000.
    pub heartbeat_interval: u64,
    /// How long the node's heartbeat and the leases of its runs hold without a new heartbeat,
    /// milliseconds; 0 = six heartbeat intervals. A node whose heartbeat is older than its TTL
    /// is dead: another node sharing the catalog fences it and returns its runs to the queue
    /// once their leases (claim + job timeout + TTL, renewed by each heartbeat) expired. At
    /// least three heartbeat intervals (a node starts nothing two intervals after its last
    /// heartbeat). Default: 0.
    pub lease_ttl: u64,
}

impl Default for NodeSection {
    fn default() -> Self {
        Self {
            name: String::new(),
            data_dir: "jobvisor-data".into(),
            timezone: String::new(),
            shutdown_grace: 10_000,
            heartbeat_interval: 5_000,
            lease_ttl: 0,
        }
    }
}

/// `[database]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DatabaseSection {
    /// Catalog file. Default: "" (`<data_dir>/jobvisor.db`). A `postgres://` URL here (as
    /// `--db` gives it) is the same as `url`.
    pub path: String,
    /// The catalog on PostgreSQL, shared by a fleet across hosts:
    /// `postgres://user[:password]@host[:port]/database`. Default: "" (the SQLite file).
    pub url: String,
    /// How long a PostgreSQL call waits for the server to answer again (reconnecting with
    /// backoff) before it fails, ms; also how long a node starting waits for it. Default:
    /// 60000.
    pub reconnect_for: u64,
    /// `synchronous` level. Default: normal.
    pub durability: Durability,
    /// Lock wait in milliseconds. Default: 5000.
    pub busy_timeout: u64,
    /// Read connections in the pool. Default: 4.
    pub read_pool_size: u32,
    /// How often the node looks at the catalog for changes another process made (a CLI
    /// command, another node on the same file), milliseconds; what this node's API, web UI or
    /// an embedding `OpsHandle` changes is seen at once. Default: 100.
    pub watch_interval: u64,
}

impl Default for DatabaseSection {
    fn default() -> Self {
        Self {
            path: String::new(),
            url: String::new(),
            reconnect_for: 60_000,
            durability: Durability::Normal,
            busy_timeout: 5000,
            read_pool_size: 4,
            watch_interval: 100,
        }
    }
}

/// How hard commits hold against power loss (DESIGN.md §9.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// WAL + `synchronous=NORMAL`: survives process crashes; a power cut may lose the last commits.
    #[default]
    Normal,
    /// WAL + `synchronous=FULL`: every acknowledged commit survives power loss.
    Full,
}

/// `[catalog]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct CatalogSection {
    /// job.conf imported into an empty catalog. Default: "" (the built-in one).
    pub seed: String,
}

/// `[http]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpSection {
    /// Listen address. Default: "127.0.0.1:7878". An address other than loopback is refused
    /// until the catalog has a user (`jobvisor users add`).
    pub bind: String,
    /// Host names the API answers to besides localhost, 127.0.0.1, [::1] and the bound
    /// address (a Host header naming another is refused: DNS rebinding). Default: [].
    pub allowed_hosts: Vec<String>,
    /// Addresses of reverse proxies whose `X-Forwarded-For` names the client: the login
    /// throttle counts failures by that address for requests from them (by the peer's own
    /// address otherwise; the header is ignored from any other peer). Default: [] (never read).
    pub trusted_proxies: Vec<String>,
    /// Calls in one JSON-RPC batch at most (a longer batch is refused whole). Default: 100.
    pub rpc_batch_max: usize,
    /// Distinct jobs `/metrics` labels by name (`job="…"`); the runs of every job past the
    /// first this many are counted under `job="(other)"`, so a large catalog cannot grow a
    /// scrape without bound. Default: 100.
    pub metrics_job_labels: usize,
    /// Failed logins one client address may make within a minute before the API answers it
    /// 429 for the rest of that minute. Default: 10.
    pub max_failed_logins: usize,
    /// A PEM file of the server's certificate chain (its own certificate first): with
    /// `tls_key`, the API, UI, JSON-RPC and /metrics are served over HTTPS only. Reread, with
    /// the key, on SIGHUP. Default: "" (plain HTTP).
    pub tls_cert: String,
    /// A PEM file of the certificate's private key (PKCS#8, PKCS#1 or SEC1). Default: "".
    pub tls_key: String,
    /// Milliseconds a request's whole body may take to arrive after its head; a body that
    /// stalls beyond is answered 408 and its connection closed. Default: 30000.
    pub body_timeout: u64,
}

impl Default for HttpSection {
    fn default() -> Self {
        Self {
            bind: "127.0.0.1:7878".into(),
            allowed_hosts: Vec::new(),
            trusted_proxies: Vec::new(),
            rpc_batch_max: 100,
            // `metrics::DEFAULT_JOB_LABELS`, `http::auth::MAX_FAILURES` (named here would
            // make config import what it configures).
            metrics_job_labels: 100,
            max_failed_logins: 10,
            tls_cert: String::new(),
            tls_key: String::new(),
            body_timeout: 30_000,
        }
    }
}

impl HttpSection {
    /// The certificate and key files, when TLS is on.
    pub fn tls(&self) -> Option<(&Path, &Path)> {
        (!self.tls_cert.is_empty() && !self.tls_key.is_empty())
            .then(|| (Path::new(&self.tls_cert), Path::new(&self.tls_key)))
    }
}

/// `[log]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogSection {
    /// Output format. Default: human.
    pub format: LogFormat,
    /// tracing filter. Default: "info".
    pub level: String,
}

impl Default for LogSection {
    fn default() -> Self {
        Self {
            format: LogFormat::Human,
            level: "info".into(),
        }
    }
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Human,
    /// One JSON object per line.
    Json,
}

/// `[health]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HealthSection {
    /// Sampling interval in milliseconds. Default: 5000.
    pub interval: u64,
}

impl Default for HealthSection {
    fn default() -> Self {
        Self { interval: 5000 }
    }
}

/// Limits on what executions may consume.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExecLimits {
    /// Bytes of stdout + stderr kept per command run. Default: 65536.
    pub output_limit: usize,
    /// Environment variables passed through to commands (the rest is cleared).
    /// Default: ["PATH", "HOME", "LANG", "TZ"].
    pub env_allowlist: Vec<String>,
    /// Bytes of an HTTP response body kept. Default: 1048576.
    pub response_limit: usize,
    /// HTTP connect timeout in milliseconds. Default: 10000.
    pub connect_timeout: u64,
}

impl Default for ExecLimits {
    fn default() -> Self {
        Self {
            output_limit: 65_536,
            env_allowlist: ["PATH", "HOME", "LANG", "TZ"].map(String::from).to_vec(),
            response_limit: 1_048_576,
            connect_timeout: 10_000,
        }
    }
}

/// The command-line layer: flags that override any file or environment value.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `--db`.
    pub db: Option<String>,
    /// `--data-dir`.
    pub data_dir: Option<String>,
    /// `--node-name`.
    pub node_name: Option<String>,
    /// `--bind`.
    pub bind: Option<String>,
    /// `--log-format`.
    pub log_format: Option<String>,
}

/// Loads the configuration: defaults, then `file` (if any), then the environment (`env`, or the
/// process environment when `None`), then `overrides`.
pub fn load(
    file: Option<&Path>,
    env: Option<HashMap<String, String>>,
    overrides: &Overrides,
) -> Result<NodeConfig, ConfigError> {
    let defaults = NodeConfig::default();
    let env_keys: Option<Vec<String>> = env.as_ref().map(|m| m.keys().cloned().collect());
    let mut builder = Config::builder()
        .add_source(Config::try_from(&defaults).map_err(|e| layer_error("built-in defaults", e))?);
    if let Some(path) = file {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        check_file(path, &text)?;
        builder = builder.add_source(File::from_str(&text, FileFormat::Toml));
    }
    let cfg = builder
        .add_source(
            Environment::with_prefix(ENV_PREFIX)
                .prefix_separator("__")
                .separator("__")
                .try_parsing(true)
                .source(env),
        )
        .build()
        .and_then(|c| c.try_deserialize::<NodeConfig>())
        .map_err(|e| layer_error("environment (JOBVISOR__SECTION__KEY)", e))?;
    let cfg = apply_overrides(cfg, overrides)?;
    match (cfg.validate(), file) {
        (Err(ConfigError::Invalid { key, reason }), Some(path)) => {
            let from_env = env_sets(env_keys.as_ref(), key);
            Err(locate_invalid(path, key, reason, from_env, overrides))
        }
        (result, _) => result.map(|()| cfg),
    }
}

/// Whether the environment (`keys`, or the process's when `None`) sets `key`
/// (`JOBVISOR__SECTION__KEY`), which then beats the file.
fn env_sets(keys: Option<&Vec<String>>, key: &str) -> bool {
    let name = format!("{ENV_PREFIX}__{}", key.replace('.', "__")).to_uppercase();
    match keys {
        Some(keys) => keys.iter().any(|k| k.to_uppercase() == name),
        None => std::env::var_os(name).is_some(),
    }
}

/// Whether `s` is a PostgreSQL connection URL.
pub fn is_postgres_url(s: &str) -> bool {
    s.starts_with("postgres://") || s.starts_with("postgresql://")
}

/// An invalid value, located at its line in the file when the file is where it came from (not
/// the environment or a flag): a config file with an error names file, line and reason.
fn locate_invalid(
    path: &Path,
    key: &'static str,
    reason: String,
    from_env: bool,
    o: &Overrides,
) -> ConfigError {
    let flag = match key {
        "database.path" => o.db.is_some(),
        "node.data_dir" => o.data_dir.is_some(),
        "node.name" => o.node_name.is_some(),
        "http.bind" => o.bind.is_some(),
        "log.format" => o.log_format.is_some(),
        _ => false,
    };
    let text = std::fs::read_to_string(path).unwrap_or_default();
    match line_of_key(&text, key) {
        Some(line) if !from_env && !flag => ConfigError::File {
            path: path.to_path_buf(),
            line,
            col: 1,
            reason: format!("{key}: {reason}"),
        },
        _ => ConfigError::Invalid { key, reason },
    }
}

/// The 1-based line of the file that assigns the dotted `key` (`log.level`), if one does.
fn line_of_key(text: &str, key: &str) -> Option<usize> {
    (1..=text.lines().count()).find(|&line| key_on_line(text, line).as_deref() == Some(key))
}

/// Validates a config file's text alone: unknown keys and wrong types, with line and column.
pub fn check_file(path: &Path, text: &str) -> Result<NodeConfig, ConfigError> {
    toml::from_str::<NodeConfig>(text).map_err(|e| {
        let (line, col) = e.span().map(|s| line_col(text, s.start)).unwrap_or((1, 1));
        let reason = e.message().trim().to_string();
        let reason = match key_on_line(text, line) {
            Some(key) if !reason.contains(&key) => format!("{key}: {reason}"),
            _ => reason,
        };
        ConfigError::File {
            path: path.to_path_buf(),
            line,
            col,
            reason,
        }
    })
}

/// The dotted key assigned on `line` (1-based), e.g. `health.interval`, for type errors whose
/// message names only the value.
fn key_on_line(text: &str, line: usize) -> Option<String> {
    let mut section = String::new();
    for (i, l) in text.lines().enumerate() {
        let l = l.trim();
        if l.starts_with('[') {
            section = l.trim_matches(|c| c == '[' || c == ']').trim().to_string();
        }
        if i + 1 == line {
            let key = l.split_once('=')?.0.trim();
            return Some(if section.is_empty() {
                key.to_string()
            } else {
                format!("{section}.{key}")
            });
        }
    }
    None
}

fn apply_overrides(mut cfg: NodeConfig, o: &Overrides) -> Result<NodeConfig, ConfigError> {
    if let Some(db) = &o.db {
        cfg.database.path = db.clone();
    }
    if let Some(dir) = &o.data_dir {
        cfg.node.data_dir = dir.clone();
    }
    if let Some(name) = &o.node_name {
        cfg.node.name = name.clone();
    }
    if let Some(bind) = &o.bind {
        cfg.http.bind = bind.clone();
    }
    if let Some(format) = &o.log_format {
        cfg.log.format = match format.as_str() {
            "human" => LogFormat::Human,
            "json" => LogFormat::Json,
            other => {
                return Err(ConfigError::Layer {
                    origin: "command line",
                    reason: format!("--log-format: expected human or json, got `{other}`"),
                });
            }
        };
    }
    Ok(cfg)
}

fn layer_error(origin: &'static str, e: config::ConfigError) -> ConfigError {
    ConfigError::Layer {
        origin,
        reason: e.to_string(),
    }
}

impl NodeConfig {
    /// Checks values that types alone cannot.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (i, inbox) in self.inbox.iter().enumerate() {
            let invalid = |reason: String| ConfigError::Invalid {
                key: "inbox",
                reason: format!("inbox[{i}] ({}): {reason}", inbox.path),
            };
            if inbox.path.trim().is_empty() {
                return Err(invalid("path: a folder is needed".into()));
            }
            // Whether the job exists is the catalog's question, asked when the inbox starts.
            if inbox.job.trim().is_empty() {
                return Err(invalid("job: a job name is needed".into()));
            }
            glob::Pattern::new(&inbox.pattern)
                .map_err(|e| invalid(format!("pattern `{}`: {e}", inbox.pattern)))?;
        }
        if let Err(e) = self.policy.validate() {
            return Err(ConfigError::Invalid {
                key: "policy",
                reason: e.to_string(),
            });
        }
        if let Some(url) = self.postgres_url()
            && !is_postgres_url(url)
        {
            return Err(ConfigError::Invalid {
                key: "database.url",
                // Not echoed: it may hold a password.
                reason: "not a postgres:// or postgresql:// URL".into(),
            });
        }
        if self.database.read_pool_size == 0 {
            return Err(ConfigError::Invalid {
                key: "database.read_pool_size",
                reason: "must be at least 1".into(),
            });
        }
        if self.database.watch_interval == 0 {
            return Err(ConfigError::Invalid {
                key: "database.watch_interval",
                reason: "must be at least 1 ms".into(),
            });
        }
        if self.health.interval < 100 {
            return Err(ConfigError::Invalid {
                key: "health.interval",
                reason: format!("must be at least 100 ms, got {}", self.health.interval),
            });
        }
        if self.node.heartbeat_interval < 100 {
            return Err(ConfigError::Invalid {
                key: "node.heartbeat_interval",
                reason: format!(
                    "must be at least 100 ms, got {}",
                    self.node.heartbeat_interval
                ),
            });
        }
        if self.cadence().is_none() {
            return Err(ConfigError::Invalid {
                key: "node.lease_ttl",
                reason: format!(
                    "must be 0 or at least three heartbeat intervals ({} ms), got {}",
                    3 * self.node.heartbeat_interval,
                    self.node.lease_ttl
                ),
            });
        }
        if !self.node.timezone.is_empty() && self.node.timezone.parse::<chrono_tz::Tz>().is_err() {
            return Err(ConfigError::Invalid {
                key: "node.timezone",
                reason: format!("`{}` is not an IANA time zone", self.node.timezone),
            });
        }
        if self.http.bind.parse::<std::net::SocketAddr>().is_err() {
            return Err(ConfigError::Invalid {
                key: "http.bind",
                reason: format!("`{}` is not an address:port", self.http.bind),
            });
        }
        if let Some(bad) = self
            .http
            .trusted_proxies
            .iter()
            .find(|a| a.parse::<std::net::IpAddr>().is_err())
        {
            return Err(ConfigError::Invalid {
                key: "http.trusted_proxies",
                reason: format!("`{bad}` is not an IP address"),
            });
        }
        if self.http.rpc_batch_max == 0 {
            return Err(ConfigError::Invalid {
                key: "http.rpc_batch_max",
                reason: "must be at least 1".into(),
            });
        }
        if self.http.tls_cert.is_empty() != self.http.tls_key.is_empty() {
            let (key, missing) = if self.http.tls_cert.is_empty() {
                ("http.tls_cert", "http.tls_key is set")
            } else {
                ("http.tls_key", "http.tls_cert is set")
            };
            return Err(ConfigError::Invalid {
                key,
                reason: format!("{missing}: TLS needs both the certificate and its key"),
            });
        }
        if self.http.body_timeout < 100 {
            return Err(ConfigError::Invalid {
                key: "http.body_timeout",
                reason: format!("must be at least 100 ms, got {}", self.http.body_timeout),
            });
        }
        if let Err(e) = tracing_subscriber::EnvFilter::try_new(&self.log.level) {
            return Err(ConfigError::Invalid {
                key: "log.level",
                reason: format!("`{}` is not a log filter: {e}", self.log.level),
            });
        }
        Ok(())
    }

    /// The node's heartbeat and lease timing (`None` when the two settings do not fit
    /// together: `validate` refuses them).
    pub fn cadence(&self) -> Option<crate::lease::Cadence> {
        let ms = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        crate::lease::Cadence::new(ms(self.node.heartbeat_interval), ms(self.node.lease_ttl))
    }

    /// The catalog database path.
    pub fn db_path(&self) -> PathBuf {
        if self.database.path.is_empty() {
            Path::new(&self.node.data_dir).join("jobvisor.db")
        } else {
            PathBuf::from(&self.database.path)
        }
    }

    /// The PostgreSQL catalog's URL, when the catalog is there: `database.url`, or a
    /// `postgres://` URL given as `database.path` (`--db`).
    pub fn postgres_url(&self) -> Option<&str> {
        if !self.database.url.is_empty() {
            Some(&self.database.url)
        } else if is_postgres_url(&self.database.path) {
            Some(&self.database.path)
        } else {
            None
        }
    }

    /// The node's name: the configured one, else the host name.
    pub fn node_name(&self) -> String {
        if !self.node.name.is_empty() {
            return self.node.name.clone();
        }
        sysinfo::System::host_name().unwrap_or_else(|_| "localhost".into())
    }

    /// The zone for schedules that name none: the configured one, else the system's, else UTC.
    pub fn timezone(&self) -> chrono_tz::Tz {
        let name = if self.node.timezone.is_empty() {
            iana_time_zone::get_timezone().unwrap_or_default()
        } else {
            self.node.timezone.clone()
        };
        name.parse().unwrap_or(chrono_tz::UTC)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Option<HashMap<String, String>> {
        Some(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    #[test]
    fn default_toml_documents_exactly_the_defaults() {
        let parsed: NodeConfig = toml::from_str(DEFAULT_TOML).expect("default.toml parses");
        assert_eq!(parsed, NodeConfig::default());
        // Every key of the struct is written out in the file, not left to serde defaults.
        let from_file: toml::Table = toml::from_str(DEFAULT_TOML).unwrap();
        let from_struct = toml::Table::try_from(NodeConfig::default()).unwrap();
        assert_eq!(from_file, from_struct);
    }

    #[test]
    fn layers_apply_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("node.toml");
        std::fs::write(
            &file,
            "[database]\nbusy_timeout = 100\nread_pool_size = 2\n",
        )
        .unwrap();
        let overrides = Overrides {
            db: Some("/x/flag.db".into()),
            ..Default::default()
        };
        let cfg = load(
            Some(&file),
            env(&[
                ("JOBVISOR__DATABASE__READ_POOL_SIZE", "7"),
                ("JOBVISOR__DATABASE__PATH", "env.db"),
            ]),
            &overrides,
        )
        .unwrap();
        assert_eq!(cfg.database.busy_timeout, 100); // file
        assert_eq!(cfg.database.read_pool_size, 7); // env beats file
        assert_eq!(cfg.database.path, "/x/flag.db"); // flag beats env
        assert_eq!(cfg.http.bind, "127.0.0.1:7878"); // default
    }

    #[test]
    fn unknown_key_in_file_names_key_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("node.toml");
        std::fs::write(&file, "[database]\nbusy_timeout = 100\nbusy_timout = 5\n").unwrap();
        let err = load(Some(&file), env(&[]), &Overrides::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("node.toml:3:1"), "{err}");
        assert!(err.contains("busy_timout"), "{err}");
    }

    #[test]
    fn wrong_type_in_file_names_line() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("node.toml");
        std::fs::write(&file, "[health]\ninterval = \"fast\"\n").unwrap();
        let err = load(Some(&file), env(&[]), &Overrides::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("node.toml:2:"), "{err}");
        assert!(err.contains("interval") || err.contains("integer"), "{err}");
    }

    #[test]
    fn unknown_key_in_environment_is_an_error() {
        let err = load(
            None,
            env(&[("JOBVISOR__DATABASE__PATHH", "x")]),
            &Overrides::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("environment") && err.contains("pathh"),
            "{err}"
        );
    }

    #[test]
    fn wrong_type_in_environment_is_an_error() {
        let err = load(
            None,
            env(&[("JOBVISOR__HEALTH__INTERVAL", "soon")]),
            &Overrides::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("environment") && err.contains("interval"),
            "{err}"
        );
    }

    #[test]
    fn an_invalid_value_in_a_file_names_file_line_and_key() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("node.toml");
        std::fs::write(&file, "[node]\nname = \"a\"\n\n[log]\nlevel = \"info,[\"\n").unwrap();
        let err = load(Some(&file), env(&[]), &Overrides::default()).unwrap_err();
        assert!(matches!(err, ConfigError::File { line: 5, .. }), "{err:?}");
        let text = err.to_string();
        assert!(text.contains("node.toml:5:1: log.level:"), "{text}");
        // Set by a flag, the same kind of value is the flag's error, not the file's line.
        std::fs::write(&file, "[http]\nbind = \"127.0.0.1:1\"\n").unwrap();
        let flag = Overrides {
            bind: Some("nowhere".into()),
            ..Default::default()
        };
        let err = load(Some(&file), env(&[]), &flag).unwrap_err();
        assert!(
            matches!(
                err,
                ConfigError::Invalid {
                    key: "http.bind",
                    ..
                }
            ),
            "{err:?}"
        );
    }

    #[test]
    fn a_bad_log_filter_is_a_configuration_error() {
        let err = load(
            None,
            env(&[("JOBVISOR__LOG__LEVEL", "jobvisor=loud")]),
            &Overrides::default(),
        )
        .unwrap_err();
        assert!(
            matches!(
                err,
                ConfigError::Invalid {
                    key: "log.level",
                    ..
                }
            ),
            "{err:?}"
        );
    }

    #[test]
    fn invalid_values_are_rejected() {
        let err = load(
            None,
            env(&[("JOBVISOR__NODE__TIMEZONE", "Mars/Base")]),
            &Overrides::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("node.timezone"), "{err}");
    }

    /// A lease TTL the tenure would outlive (a stopped node could start runs a sweep gave
    /// away) is a configuration error naming the key; 0 is six heartbeats.
    #[test]
    fn a_lease_ttl_below_three_heartbeats_is_refused() {
        let err = load(
            None,
            env(&[
                ("JOBVISOR__NODE__HEARTBEAT_INTERVAL", "1000"),
                ("JOBVISOR__NODE__LEASE_TTL", "2500"),
            ]),
            &Overrides::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("node.lease_ttl"), "{err}");
        assert!(err.contains("3000 ms"), "{err}");
        let cfg = load(
            None,
            env(&[("JOBVISOR__NODE__HEARTBEAT_INTERVAL", "250")]),
            &Overrides::default(),
        )
        .unwrap();
        assert_eq!(cfg.cadence().unwrap().ttl_ms(), 1500);
    }
}
