//! The command line's grammar (clap): global flags, commands and their arguments.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use super::EXIT_CODES;

/// jobvisor: a node-local, self-tuning job engine.
#[derive(Debug, Parser)]
#[command(name = "jobvisor", version, about, after_help = EXIT_CODES)]
pub struct Cli {
    /// The catalog database file (overrides database.path). Only `init`, `run` and `import`
    /// create one.
    #[arg(long, global = true, value_name = "PATH")]
    pub db: Option<PathBuf>,
    /// A node configuration file (TOML; see `jobvisor config --print-defaults`).
    #[arg(long, global = true, value_name = "FILE", env = "JOBVISOR_CONFIG")]
    pub config: Option<PathBuf>,
    /// Machine-readable JSON output (and errors as a JSON object on stderr).
    #[arg(long, global = true)]
    pub json: bool,
    /// The node: its name when running (`run`); the node whose activation state `jobs` shows
    /// or pins and whose decisions `decisions` lists (default: node.name, else the host name);
    /// the node whose runs `runs list` lists (default: every node).
    #[arg(long, global = true, value_name = "NAME")]
    pub node: Option<String>,
    /// Talk to a running node's API instead of opening a catalog (`http://host:port`; the
    /// token in JOBVISOR_TOKEN): jobs (list, show, add, edit, remove, run, enable, disable,
    /// pin, next), runs, decisions, nodes.
    #[arg(long, global = true, value_name = "URL", env = "JOBVISOR_URL")]
    pub url: Option<String>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
// Parsed once per process; boxing the large job-field variants would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a node: the engine on the catalog, and the API on http.bind. Stops on SIGTERM/Ctrl-C
    /// (a second signal stops at once, returning running jobs to the queue).
    Run(RunArgs),
    /// Create the catalog database and seed it with the default job.conf (once).
    Init,
    /// Validate a catalog file without opening any database; print every error.
    Check {
        /// The file.
        file: PathBuf,
        /// Its format.
        #[arg(long, value_enum, default_value_t = Format::Toml)]
        format: Format,
        /// Treat warnings (an unknown function) as errors.
        #[arg(long)]
        strict: bool,
    },
    /// Upsert a catalog file into the database by name, in one transaction: an existing entry
    /// changes only in the fields the file names.
    Import {
        /// The file.
        file: PathBuf,
        /// Its format.
        #[arg(long, value_enum, default_value_t = Format::Toml)]
        format: Format,
        /// Refuse the file if anything cannot be mapped (millix) or a job names an unknown
        /// function.
        #[arg(long)]
        strict: bool,
    },
    /// Write the catalog as job.conf (to stdout, or to a file).
    Export {
        /// Write here instead of stdout (atomically).
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
    /// Print the effective node configuration (resolved values), or the documented defaults.
    Config {
        /// Print config/default.toml, which documents every key.
        #[arg(long)]
        print_defaults: bool,
    },
    /// List, show and edit jobs.
    #[command(subcommand)]
    Jobs(JobsCommand),
    /// List, add, edit and remove processors.
    #[command(subcommand)]
    Processors(ProcessorsCommand),
    /// List, add, edit and remove data objects.
    #[command(subcommand)]
    Objects(ObjectsCommand),
    /// List, show, cancel and retry runs.
    #[command(subcommand)]
    Runs(RunsCommand),
    /// The nodes sharing the catalog: name, state (alive, dead, fenced, stopped), host, pid,
    /// version, start, heartbeat age, lease TTL, stale completions.
    #[command(subcommand)]
    Nodes(NodesCommand),
    /// API users: list, add (argon2id password, a role), passwd, remove.
    #[command(subcommand)]
    Users(super::accounts::UsersCommand),
    /// API bearer tokens: list, create (printed once), revoke.
    #[command(subcommand)]
    Tokens(super::accounts::TokensCommand),
    /// Pause a processor, a job group or a job without editing it: nothing new of it is
    /// claimed (running runs finish) on this node (the global --node, else node.name) or, with
    /// --fleet, on every node sharing the catalog. Survives restarts; `resume` ends it.
    Pause {
        /// processor, group or job.
        scope: String,
        /// Its name.
        name: String,
        /// On every node sharing the catalog.
        #[arg(long)]
        fleet: bool,
        /// Why (shown in `pauses` and the audit log).
        #[arg(long)]
        reason: Option<String>,
    },
    /// End a pause (of this node, or with --fleet the fleet-wide one).
    Resume {
        /// processor, group or job.
        scope: String,
        /// Its name.
        name: String,
        /// The fleet-wide pause.
        #[arg(long)]
        fleet: bool,
    },
    /// The pauses in force: scope, name, node (or every node), who, when, why.
    Pauses,
    /// The self-tuning policy's decisions, newest first: time, decision, cause, reason, samples.
    Decisions {
        /// At most this many (1–10000).
        #[arg(long, default_value_t = 50)]
        limit: i64,
        /// Of every node, not just this one.
        #[arg(long)]
        all_nodes: bool,
    },
    /// Measured history as time series: the latest value of every series, or one series
    /// (device.cpu_used, job_processor.instances, object.count_insert, …) over time.
    Stats {
        /// A stat type; without it, the latest value of every series.
        stat_type: Option<String>,
        /// Only this subject (an object or a processor).
        #[arg(long)]
        subject: Option<String>,
        /// Only values sampled since: a duration back (90s, 10m, 2h, 7d) or a time.
        #[arg(long)]
        since: Option<String>,
        /// At most this many values of a series, newest first (1–100000).
        #[arg(long, default_value_t = 50)]
        limit: i64,
        /// Of every node, not just this one.
        #[arg(long)]
        all_nodes: bool,
    },
}

/// `run` flags (each overrides the configuration).
#[derive(Debug, Clone, Default, Args)]
pub struct RunArgs {
    /// Address of the API (e.g. 127.0.0.1:0 for any free port).
    #[arg(long)]
    pub bind: Option<String>,
    /// This node's name in the catalog (the same as the global --node).
    #[arg(long, hide = true)]
    pub node_name: Option<String>,
    /// Folder for the database, backups and job folders.
    #[arg(long)]
    pub data_dir: Option<String>,
    /// Log format: human or json.
    #[arg(long)]
    pub log_format: Option<String>,
}

/// Catalog file formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// jobvisor's job.conf (TOML).
    Toml,
    /// The millix node's job.json.
    Millix,
}

/// `jobs …`.
#[derive(Debug, Subcommand)]
pub enum JobsCommand {
    /// List every job with its activation on this node.
    List,
    /// Show one job: its definition (as job.conf) and its state.
    Show {
        /// Job name.
        name: String,
    },
    /// Add a job (it runs once the node activates it: at once while the node is healthy).
    Add {
        /// Job name.
        name: String,
        /// Job type: function, sql, url, rpc, command, workflow.
        #[arg(long = "type", value_name = "TYPE")]
        job_type: String,
        /// Processor name.
        #[arg(long)]
        processor: String,
        /// The job's fields.
        #[command(flatten)]
        fields: JobFields,
        /// Treat warnings (an unknown function) as errors.
        #[arg(long)]
        strict: bool,
    },
    /// Change fields of a job (nothing is written when nothing changes).
    Edit {
        /// Job name.
        name: String,
        /// Job type.
        #[arg(long = "type", value_name = "TYPE")]
        job_type: Option<String>,
        /// Processor name.
        #[arg(long)]
        processor: Option<String>,
        /// Fields to change.
        #[command(flatten)]
        fields: JobFields,
        /// Treat warnings (an unknown function) as errors.
        #[arg(long)]
        strict: bool,
    },
    /// Enable a job.
    Enable {
        /// Job name.
        name: String,
    },
    /// Disable a job (its history stays).
    Disable {
        /// Job name.
        name: String,
    },
    /// Remove a job and its run history.
    Remove {
        /// Job name.
        name: String,
    },
    /// Queue a run of a job now (a running node picks it up).
    Run {
        /// Job name.
        name: String,
        /// Parameters, a JSON object overlaying the payload.
        #[arg(long)]
        params: Option<String>,
        /// The run must start within this many ms, else it ends `expired` (default: the job's
        /// start_within).
        #[arg(long, allow_negative_numbers = true)]
        start_within: Option<i64>,
    },
    /// Pin a job active or inactive on a node regardless of health, or remove the pin.
    Pin {
        /// Job name.
        name: String,
        /// active, inactive or none.
        #[arg(value_parser = ["active", "inactive", "none"])]
        pin: String,
    },
    /// The next fire times of a job, and its schedule in words.
    Next {
        /// Job name.
        name: String,
        /// How many fire times (1–1000).
        #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..=1000))]
        count: u16,
    },
}

/// Job fields settable from the command line (units as in job.conf).
#[derive(Debug, Clone, Default, Args)]
pub struct JobFields {
    /// Group name ("" removes the group).
    #[arg(long)]
    pub group: Option<String>,
    /// Payload as a JSON object.
    #[arg(long)]
    pub payload: Option<String>,
    /// Free text.
    #[arg(long)]
    pub description: Option<String>,
    /// Priority (larger is more important).
    #[arg(long, allow_negative_numbers = true)]
    pub priority: Option<i64>,
    /// Timeout in ms (0 = none).
    #[arg(long, allow_negative_numbers = true)]
    pub timeout: Option<i64>,
    /// A run not started this many ms after it became due ends `expired` (0 = no deadline).
    #[arg(long, allow_negative_numbers = true)]
    pub start_within: Option<i64>,
    /// Priority aging: ms a queued run waits per point of priority it gains (0 = none).
    #[arg(long, allow_negative_numbers = true)]
    pub aging: Option<i64>,
    /// Clear every schedule field before applying the ones given.
    #[arg(long)]
    pub clear_schedule: bool,
    /// Run again run_delay ms after each run ends.
    #[arg(long)]
    pub run_always: Option<bool>,
    /// Delay after the previous run's end, ms.
    #[arg(long, allow_negative_numbers = true)]
    pub run_delay: Option<i64>,
    /// Every N minutes.
    #[arg(long, allow_negative_numbers = true)]
    pub run_every: Option<i64>,
    /// At minute M of every hour.
    #[arg(long, allow_negative_numbers = true)]
    pub run_on_the: Option<i64>,
    /// At HH:MM[:SS] local time.
    #[arg(long)]
    pub run_at: Option<String>,
    /// A day of month or a #token# date gate.
    #[arg(long)]
    pub run_date: Option<String>,
    /// A cron expression (5 or 6 fields).
    #[arg(long)]
    pub cron: Option<String>,
    /// IANA time zone of the schedule.
    #[arg(long)]
    pub timezone: Option<String>,
    /// once, skip or all.
    #[arg(long)]
    pub misfire_policy: Option<String>,
    /// How far back a missed slot still counts, ms.
    #[arg(long, allow_negative_numbers = true)]
    pub misfire_window: Option<i64>,
    /// Cap on catch-up runs for misfire_policy = all.
    #[arg(long, allow_negative_numbers = true)]
    pub max_catchup: Option<i64>,
    /// forbid, queue or allow.
    #[arg(long)]
    pub overlap_policy: Option<String>,
    /// Cap on concurrent runs for overlap_policy = allow.
    #[arg(long, allow_negative_numbers = true)]
    pub max_overlap: Option<i64>,
    /// Attempts before a failing run is dead.
    #[arg(long, allow_negative_numbers = true)]
    pub max_attempts: Option<i64>,
    /// First retry delay, ms (doubles each attempt).
    #[arg(long, allow_negative_numbers = true)]
    pub backoff_base: Option<i64>,
    /// Largest retry delay, ms.
    #[arg(long, allow_negative_numbers = true)]
    pub backoff_max: Option<i64>,
    /// An object the job writes (repeat; replaces the list).
    #[arg(long = "object")]
    pub objects: Vec<String>,
    /// Part of the minimum the node always runs.
    #[arg(long)]
    pub required: Option<bool>,
    /// How far the node may stretch this recurring job's period under strain (1 = never).
    #[arg(long, allow_negative_numbers = true)]
    pub stretch_max: Option<i64>,
}

/// `processors …`.
#[derive(Debug, Subcommand)]
pub enum ProcessorsCommand {
    /// List them.
    List,
    /// Add a processor.
    Add {
        /// Name.
        name: String,
        /// Its fields.
        #[command(flatten)]
        fields: ProcessorFields,
    },
    /// Change a processor's fields.
    Edit {
        /// Name.
        name: String,
        /// Fields to change.
        #[command(flatten)]
        fields: ProcessorFields,
    },
    /// Remove a processor that runs no job.
    Remove {
        /// Name.
        name: String,
    },
}

/// Processor fields settable from the command line.
#[derive(Debug, Clone, Default, Args)]
pub struct ProcessorFields {
    /// Concurrent executions.
    #[arg(long, allow_negative_numbers = true)]
    pub instances: Option<i64>,
    /// Upper bound for self-tuning ("" clears it).
    #[arg(long)]
    pub max_instances: Option<String>,
    /// Runs claimed beyond the free instances ("" sizes it from measured run durations).
    #[arg(long)]
    pub prefetch: Option<String>,
    /// The nodes that may run it, by name, comma-separated ("" lets any node run it). Not
    /// `--node`: that global flag names the node the command acts as.
    #[arg(long, value_name = "NAMES")]
    pub nodes: Option<String>,
    /// The remote node's address (a remote processor; "" makes it local).
    #[arg(long)]
    pub ip_address: Option<String>,
    /// The remote node's API port ("" clears it).
    #[arg(long)]
    pub port: Option<String>,
    /// User on the remote node; calls then send Basic user:password ("" clears it).
    #[arg(long)]
    pub rpc_user: Option<String>,
    /// The credential on the remote node: an API token made there (a password with
    /// --rpc-user), or env:NAME / file:PATH read at each call. Never shown back ("***").
    /// "" clears it; prefer JOBVISOR_RPC_PASSWORD to keep it out of the shell history.
    #[arg(long, env = "JOBVISOR_RPC_PASSWORD", hide_env_values = true)]
    pub rpc_password: Option<String>,
    /// Enabled.
    #[arg(long)]
    pub enabled: Option<bool>,
}

/// `objects …`.
#[derive(Debug, Subcommand)]
pub enum ObjectsCommand {
    /// List them.
    List,
    /// Add a data object.
    Add {
        /// Name.
        name: String,
        /// Its fields.
        #[command(flatten)]
        fields: ObjectFields,
    },
    /// Change an object's fields.
    Edit {
        /// Name.
        name: String,
        /// Fields to change.
        #[command(flatten)]
        fields: ObjectFields,
    },
    /// Remove an object no job writes.
    Remove {
        /// Name.
        name: String,
    },
}

/// Object fields settable from the command line.
#[derive(Debug, Clone, Default, Args)]
pub struct ObjectFields {
    /// table, file or view.
    #[arg(long = "type", value_name = "TYPE")]
    pub object_type: Option<String>,
    /// Where it lives: a SQLite file (relative to the node's data folder), or `catalog`.
    #[arg(long)]
    pub conn_string: Option<String>,
    /// The key column ("" clears it).
    #[arg(long)]
    pub key_field: Option<String>,
    /// The column with a row's name or time ("" clears it).
    #[arg(long)]
    pub name_field: Option<String>,
    /// Seconds before rows may be pruned ("" clears it).
    #[arg(long)]
    pub time_to_live: Option<String>,
    /// Pruning allowed.
    #[arg(long)]
    pub allow_prune: Option<bool>,
    /// Listing allowed.
    #[arg(long)]
    pub allow_list: Option<bool>,
    /// Free text.
    #[arg(long)]
    pub description: Option<String>,
    /// Enabled.
    #[arg(long)]
    pub enabled: Option<bool>,
}

/// `nodes …`.
#[derive(Debug, Subcommand)]
pub enum NodesCommand {
    /// List them: alive (heartbeat younger than its lease TTL), dead (older: killed, stopped
    /// or cut off), fenced (another node swept it and returned its runs to the queue) or
    /// stopped (it released its name).
    List,
}

/// `runs …`.
#[derive(Debug, Subcommand)]
pub enum RunsCommand {
    /// Recent runs, newest first (with the global --node: only runs that node claimed).
    List {
        /// Only this job's runs.
        #[arg(long)]
        job: Option<String>,
        /// Only runs in this status.
        #[arg(long)]
        status: Option<String>,
        /// Only runs queued since: a duration back from now (`90s`, `15m`, `2h`, `1d`) or a
        /// time (`2026-12-01T08:00:00Z`, `2026-12-01 08:00` local).
        #[arg(long)]
        since: Option<String>,
        /// Only runs queued before: a duration back from now or a time, as for --since.
        #[arg(long)]
        until: Option<String>,
        /// Only runs older than this run id: the next page after a listing whose last (oldest)
        /// run this is.
        #[arg(long, value_name = "ID")]
        before: Option<i64>,
        /// At most this many (1–1000).
        #[arg(long, default_value_t = 50)]
        limit: i64,
    },
    /// One run in full.
    Show {
        /// Run id.
        id: i64,
    },
    /// The tree a run belongs to (a workflow's steps, the runs a run spawned), from its root.
    Tree {
        /// Run id (any run of the tree).
        id: i64,
    },
    /// Cancel a queued run, or a running one (its node kills a command's process group); a
    /// workflow's run or a run that spawned runs is cancelled with its whole tree.
    Cancel {
        /// Run id.
        id: i64,
    },
    /// Queue a new attempt of a failed, timed-out, dead, cancelled or skipped run; a workflow's
    /// run is retried in place: its failed steps and what depends on them run again.
    Retry {
        /// Run id.
        id: i64,
    },
}
