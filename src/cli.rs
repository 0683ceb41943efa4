//! The command line: `jobvisor init|check|import|export|config|jobs|processors|objects|runs`.
//!
//! Invariant: commands that validate a file (`check`, `import`) finish validating before they
//! open any database, so a file with errors changes nothing; every failure maps to one of the
//! exit codes in `EXIT_CODES`.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Local};
use clap::{Args, Parser, Subcommand, ValueEnum};
use serde::Serialize;
use serde_json::Value as Json;

use crate::catalog::{Catalog, CatalogError, DbSettings, JobRecord, RunFilter, activation};
use crate::config::{self, ConfigError, NodeConfig, Overrides};
use crate::diag::Diagnostic;
use crate::jobconf::{self, CatalogFile, JobDef, SeedError, millix, toml_format};
use crate::model::{JobType, Pin, RunStatus};
use crate::schedule::{MisfirePolicy, OverlapPolicy, Schedule, ScheduleSpec, format_local};

/// The exit codes, shown in `--help`.
pub const EXIT_CODES: &str = "Exit codes:
  0   success
  1   an operation failed (database error, refused change)
  2   bad command-line usage
  65  bad input data: a named job or run does not exist, or a field value is invalid
  66  an input file cannot be read
  75  the node name is held by another running process (try again when it stops)
  78  a configuration or catalog file has errors (each printed as file:line:col: reason)";

/// Exit code: success.
pub const EXIT_OK: i32 = 0;
/// Exit code: an operation failed.
pub const EXIT_FAILURE: i32 = 1;
/// Exit code: bad input data (sysexits EX_DATAERR).
pub const EXIT_DATA: i32 = 65;
/// Exit code: an input file cannot be read (EX_NOINPUT).
pub const EXIT_NO_INPUT: i32 = 66;
/// Exit code: the node name is held by another live process (EX_TEMPFAIL).
pub const EXIT_HELD: i32 = 75;
/// Exit code: configuration or catalog file errors (EX_CONFIG).
pub const EXIT_CONFIG: i32 = 78;

/// jobvisor: a node-local, self-tuning job engine.
#[derive(Debug, Parser)]
#[command(name = "jobvisor", version, about, after_help = EXIT_CODES)]
pub struct Cli {
    /// The catalog database file (overrides database.path).
    #[arg(long, global = true, value_name = "PATH")]
    pub db: Option<PathBuf>,
    /// A node configuration file (TOML; see `jobvisor config --print-defaults`).
    #[arg(long, global = true, value_name = "FILE", env = "JOBVISOR_CONFIG")]
    pub config: Option<PathBuf>,
    /// Machine-readable JSON output instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
    /// The node whose activation state to show or pin (default: node.name, else the host name).
    #[arg(long, global = true, value_name = "NAME")]
    pub node: Option<String>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
// Parsed once per process; boxing the large job-field variants would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a node: the engine on the catalog, and the API on http.bind. Stops on SIGTERM/Ctrl-C.
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
    },
    /// Upsert a catalog file into the database by name, in one transaction.
    Import {
        /// The file.
        file: PathBuf,
        /// Its format.
        #[arg(long, value_enum, default_value_t = Format::Toml)]
        format: Format,
        /// Refuse a millix catalog with anything that cannot be mapped.
        #[arg(long)]
        strict: bool,
    },
    /// Write the catalog as job.conf (to stdout, or to a file).
    Export {
        /// Write here instead of stdout (atomically).
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
    /// Print the effective node configuration, or the documented defaults.
    Config {
        /// Print config/default.toml, which documents every key.
        #[arg(long)]
        print_defaults: bool,
    },
    /// List, show and edit jobs.
    #[command(subcommand)]
    Jobs(JobsCommand),
    /// List processors.
    #[command(subcommand)]
    Processors(ListCommand),
    /// List data objects.
    #[command(subcommand)]
    Objects(ListCommand),
    /// List and show runs.
    #[command(subcommand)]
    Runs(RunsCommand),
    /// The self-tuning policy's decisions, newest first: time, decision, reason, samples.
    Decisions {
        /// At most this many.
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
    /// This node's name in the catalog.
    #[arg(long)]
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
    /// List every job.
    List,
    /// Show one job: its definition (as job.conf) and its state.
    Show {
        /// Job name.
        name: String,
    },
    /// Add a job.
    Add {
        /// Job name.
        name: String,
        /// The job's fields.
        #[command(flatten)]
        fields: JobFields,
    },
    /// Change fields of a job.
    Edit {
        /// Job name.
        name: String,
        /// Fields to change.
        #[command(flatten)]
        fields: JobFields,
    },
    /// Enable a job.
    Enable {
        /// Job name.
        name: String,
    },
    /// Disable a job.
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
        /// How many fire times.
        #[arg(long, default_value_t = 5)]
        count: usize,
    },
}

/// Job fields settable from the command line (units as in job.conf).
#[derive(Debug, Clone, Default, Args)]
pub struct JobFields {
    /// Job type: function, sql, url, rpc, command, workflow.
    #[arg(long = "type")]
    pub job_type: Option<String>,
    /// Processor name.
    #[arg(long)]
    pub processor: Option<String>,
    /// Group name.
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
    /// forbid, queue or allow.
    #[arg(long)]
    pub overlap_policy: Option<String>,
    /// Attempts before a failing run is dead.
    #[arg(long, allow_negative_numbers = true)]
    pub max_attempts: Option<i64>,
    /// An object the job writes (repeat; replaces the list).
    #[arg(long = "object")]
    pub objects: Vec<String>,
    /// Part of the minimum the node always runs.
    #[arg(long)]
    pub required: Option<bool>,
}

/// `processors list`, `objects list`.
#[derive(Debug, Subcommand)]
pub enum ListCommand {
    /// List them.
    List,
}

/// `runs …`.
#[derive(Debug, Subcommand)]
pub enum RunsCommand {
    /// Recent runs, newest first.
    List {
        /// Only this job's runs.
        #[arg(long)]
        job: Option<String>,
        /// Only runs in this status.
        #[arg(long)]
        status: Option<String>,
        /// At most this many.
        #[arg(long, default_value_t = 50)]
        limit: i64,
    },
    /// One run in full.
    Show {
        /// Run id.
        id: i64,
    },
}

/// A failed command: what to print and the exit code.
#[derive(Debug)]
pub struct Failure {
    /// Exit code.
    pub code: i32,
    /// Lines to print on stderr.
    pub message: String,
}

impl Failure {
    /// A failure with its exit code.
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

impl From<CatalogError> for Failure {
    fn from(e: CatalogError) -> Self {
        let code = match e {
            CatalogError::NotFound { .. } => EXIT_DATA,
            _ => EXIT_FAILURE,
        };
        Failure::new(code, e.to_string())
    }
}

impl From<ConfigError> for Failure {
    fn from(e: ConfigError) -> Self {
        Failure::new(EXIT_CONFIG, e.to_string())
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        Failure::new(EXIT_FAILURE, e.to_string())
    }
}

type CliResult = Result<(), Failure>;

/// Parses `std::env::args`, runs the command, prints errors; returns the exit code.
pub fn main() -> i32 {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => EXIT_OK,
        Err(f) => {
            eprintln!("{}", f.message.trim_end());
            f.code
        }
    }
}

/// Runs one parsed command.
pub fn run(cli: Cli) -> CliResult {
    match &cli.command {
        Command::Check { file, format } => check(file, *format),
        Command::Import {
            file,
            format,
            strict,
        } => import(&cli, file, *format, *strict),
        Command::Config { print_defaults } => {
            if *print_defaults {
                print!("{}", config::DEFAULT_TOML);
            } else {
                let cfg = load_config(&cli)?;
                let text =
                    toml::to_string(&cfg).map_err(|e| Failure::new(EXIT_FAILURE, e.to_string()))?;
                print!("{text}");
            }
            Ok(())
        }
        Command::Run(args) => crate::node::run(&cli, args),
        Command::Init => init(&cli),
        Command::Export { output } => export(&cli, output.as_deref()),
        Command::Jobs(cmd) => jobs(&cli, cmd),
        Command::Processors(ListCommand::List) => processors(&cli),
        Command::Objects(ListCommand::List) => objects(&cli),
        Command::Runs(cmd) => runs(&cli, cmd),
        Command::Decisions { limit, all_nodes } => decisions(&cli, *limit, *all_nodes),
    }
}

fn load_config(cli: &Cli) -> Result<NodeConfig, Failure> {
    load_config_with(cli, &RunArgs::default())
}

/// The configuration with `--db` and the `run` flags as the top layer.
pub fn load_config_with(cli: &Cli, args: &RunArgs) -> Result<NodeConfig, Failure> {
    let overrides = Overrides {
        db: cli.db.as_ref().map(|p| p.to_string_lossy().into_owned()),
        data_dir: args.data_dir.clone(),
        node_name: args.node_name.clone(),
        bind: args.bind.clone(),
        log_format: args.log_format.clone(),
    };
    Ok(config::load(cli.config.as_deref(), None, &overrides)?)
}

/// Opens the catalog the configuration names, seeding a brand-new one.
fn open(cli: &Cli) -> Result<Catalog, Failure> {
    let cfg = load_config(cli)?;
    open_with(&cfg).map(|(catalog, _)| catalog)
}

/// Opens the catalog and seeds it if it was never seeded; returns whether it seeded.
pub fn open_with(cfg: &NodeConfig) -> Result<(Catalog, bool), Failure> {
    // Validate the seed before touching the database, so a bad seed file changes nothing.
    let (seed, source) = jobconf::load_seed(cfg).map_err(seed_failure)?;
    let mut catalog = Catalog::open(&cfg.db_path(), &DbSettings::from(&cfg.database))?;
    let seeded = catalog.seed_if_new(&seed, &source)?;
    Ok((catalog, seeded))
}

fn seed_failure(e: SeedError) -> Failure {
    match e {
        SeedError::Read { .. } => Failure::new(EXIT_NO_INPUT, e.to_string()),
        SeedError::Invalid { .. } => Failure::new(EXIT_CONFIG, format!("{e}\nnothing was changed")),
    }
}

fn read_input(path: &Path) -> Result<String, Failure> {
    std::fs::read_to_string(path).map_err(|e| {
        Failure::new(
            EXIT_NO_INPUT,
            format!("{}: cannot read: {e}", path.display()),
        )
    })
}

fn diagnostics_failure(file: &str, diags: &[Diagnostic]) -> Failure {
    let mut message: String = diags.iter().map(|d| d.render(file) + "\n").collect();
    message.push_str(&format!(
        "{file}: {} error(s); nothing was changed",
        diags.len()
    ));
    Failure::new(EXIT_CONFIG, message)
}

/// Parses a catalog file in either format, returning it and the millix notes.
fn parse_file(path: &Path, format: Format) -> Result<(CatalogFile, Vec<Diagnostic>), Failure> {
    let text = read_input(path)?;
    let name = path.display().to_string();
    match format {
        Format::Toml => toml_format::parse(&text)
            .map(|f| (f, Vec::new()))
            .map_err(|d| diagnostics_failure(&name, &d)),
        Format::Millix => millix::parse(&text)
            .map(|m| (m.catalog, m.unmapped))
            .map_err(|d| diagnostics_failure(&name, &d)),
    }
}

fn summary(file: &CatalogFile) -> String {
    format!(
        "{} processor(s), {} object(s), {} group(s), {} job(s)",
        file.processors.len(),
        file.objects.len(),
        file.groups.len(),
        file.jobs.len()
    )
}

fn print_notes(path: &Path, notes: &[Diagnostic]) {
    for n in notes {
        eprintln!("{}", n.render(&format!("{} (not mapped)", path.display())));
    }
}

fn check(path: &Path, format: Format) -> CliResult {
    let (file, notes) = parse_file(path, format)?;
    print_notes(path, &notes);
    println!("{}: ok: {}", path.display(), summary(&file));
    Ok(())
}

fn import(cli: &Cli, path: &Path, format: Format, strict: bool) -> CliResult {
    let (file, notes) = parse_file(path, format)?;
    print_notes(path, &notes);
    if strict && !notes.is_empty() {
        return Err(Failure::new(
            EXIT_CONFIG,
            format!(
                "{}: {} item(s) cannot be mapped (--strict); nothing was changed",
                path.display(),
                notes.len()
            ),
        ));
    }
    let mut catalog = open(cli)?;
    let report = catalog.import(&file, "cli")?;
    if cli.json {
        print_json(&report);
    } else {
        println!(
            "{}: imported into {}: {} created, {} updated, {} unchanged",
            path.display(),
            catalog.path().display(),
            report.created.len(),
            report.updated.len(),
            report.unchanged
        );
        for name in &report.created {
            println!("  created {name}");
        }
        for name in &report.updated {
            println!("  updated {name}");
        }
    }
    Ok(())
}

fn init(cli: &Cli) -> CliResult {
    let cfg = load_config(cli)?;
    let (catalog, seeded) = open_with(&cfg)?;
    let jobs = catalog.jobs()?.len();
    if seeded {
        println!(
            "{}: new catalog seeded with {jobs} job(s)",
            catalog.path().display()
        );
    } else {
        println!(
            "{}: catalog exists ({jobs} job(s)); not re-seeded",
            catalog.path().display()
        );
    }
    Ok(())
}

fn export(cli: &Cli, output: Option<&Path>) -> CliResult {
    let catalog = open(cli)?;
    let text =
        toml_format::render(&catalog.export()?).map_err(|e| Failure::new(EXIT_FAILURE, e))?;
    match output {
        None => print!("{text}"),
        Some(path) => {
            let tmp = path.with_extension("tmp");
            std::fs::write(&tmp, &text)?;
            std::fs::rename(&tmp, path)?;
        }
    }
    Ok(())
}

fn jobs(cli: &Cli, cmd: &JobsCommand) -> CliResult {
    let mut catalog = open(cli)?;
    match cmd {
        JobsCommand::List => {
            let jobs = catalog.jobs()?;
            let node = node_name(cli)?;
            let activation = activation::activation_by_job(&*catalog.read()?, &node)?;
            let state_of = |name: &str| -> (String, String) {
                match activation.get(name) {
                    Some((_, Some(pin), reason)) => {
                        (format!("pinned {pin}"), reason.clone().unwrap_or_default())
                    }
                    Some((state, None, reason)) => {
                        (state.clone(), reason.clone().unwrap_or_default())
                    }
                    None => (
                        "-".into(),
                        "the node has not run since this job was added".into(),
                    ),
                }
            };
            if cli.json {
                let views: Vec<Json> = jobs
                    .iter()
                    .map(|j| {
                        let mut v = serde_json::to_value(job_view(j)).unwrap_or_default();
                        let (state, reason) = state_of(&j.name);
                        v["activation"] = Json::String(state);
                        v["activation_reason"] = Json::String(reason);
                        v
                    })
                    .collect();
                print_json(&views);
                return Ok(());
            }
            let rows = jobs
                .iter()
                .map(|j| {
                    vec![
                        j.name.clone(),
                        j.def.job_type.to_string(),
                        j.def.processor.clone(),
                        j.def.priority.to_string(),
                        if j.def.enabled { "enabled" } else { "disabled" }.to_string(),
                        if j.def.required { "yes" } else { "" }.to_string(),
                        schedule_summary(&j.def.schedule),
                        time_or_dash(j.last_date_end),
                    ]
                })
                .collect();
            print_table(
                &[
                    "NAME",
                    "TYPE",
                    "PROCESSOR",
                    "PRIORITY",
                    "STATUS",
                    "REQUIRED",
                    "SCHEDULE",
                    "LAST END",
                ],
                rows,
            );
        }
        JobsCommand::Show { name } => {
            let job = catalog.job(name)?;
            if cli.json {
                print_json(&job_view(&job));
                return Ok(());
            }
            let mut one = CatalogFile::default();
            one.jobs.insert(job.name.clone(), job.def.clone());
            let text = toml_format::render(&one).map_err(|e| Failure::new(EXIT_FAILURE, e))?;
            let body = text
                .split_once("\n[")
                .map(|(_, rest)| format!("[{rest}"))
                .unwrap_or_default();
            print!("{body}");
            println!();
            println!("# schedule:    {}", schedule_summary(&job.def.schedule));
            println!("# in progress: {}", job.in_progress);
            println!("# last begin:  {}", time_or_dash(job.last_date_begin));
            println!("# last end:    {}", time_or_dash(job.last_date_end));
            println!(
                "# last elapse: {}",
                job.last_elapse.map_or("-".into(), |ms| format!("{ms} ms"))
            );
            println!(
                "# last result: {}",
                job.last_response.as_deref().unwrap_or("-")
            );
        }
        JobsCommand::Add { name, fields } => {
            let mut file = catalog.export()?;
            if file.jobs.contains_key(name) {
                return Err(Failure::new(
                    EXIT_DATA,
                    format!("job `{name}` exists; use `jobs edit`"),
                ));
            }
            let job_type = fields
                .job_type
                .as_deref()
                .ok_or_else(|| Failure::new(EXIT_DATA, "--type is required"))?;
            let job_type = parse_enum("--type", job_type, JobType::parse, &JobType::expected())?;
            let processor = fields
                .processor
                .clone()
                .ok_or_else(|| Failure::new(EXIT_DATA, "--processor is required"))?;
            let mut job = JobDef::new(job_type, processor);
            apply_fields(&mut job, fields)?;
            save_job(&mut catalog, &mut file, name, job)?;
            println!("job `{name}` added");
        }
        JobsCommand::Edit { name, fields } => {
            let mut file = catalog.export()?;
            let mut job =
                file.jobs.get(name).cloned().ok_or_else(|| {
                    Failure::new(EXIT_DATA, format!("job `{name}` does not exist"))
                })?;
            if let Some(t) = &fields.job_type {
                job.job_type = parse_enum("--type", t, JobType::parse, &JobType::expected())?;
            }
            if let Some(p) = &fields.processor {
                job.processor = p.clone();
            }
            apply_fields(&mut job, fields)?;
            save_job(&mut catalog, &mut file, name, job)?;
            println!("job `{name}` changed");
        }
        JobsCommand::Enable { name } => {
            catalog.set_job_enabled(name, true, "cli")?;
            println!("job `{name}` enabled");
        }
        JobsCommand::Disable { name } => {
            catalog.set_job_enabled(name, false, "cli")?;
            println!("job `{name}` disabled");
        }
        JobsCommand::Remove { name } => {
            catalog.remove_job(name, "cli")?;
            println!("job `{name}` removed");
        }
        JobsCommand::Pin { name, pin } => {
            let pin = Pin::parse(pin);
            let node = node_name(cli)?;
            catalog.pin_job(name, &node, pin, "cli")?;
            println!(
                "job `{name}` on node `{node}`: {}",
                pin.map_or("pin removed".to_string(), |p| format!("pinned {p}"))
            );
        }
        JobsCommand::Run { name, params } => {
            let params = match params.as_deref().map(serde_json::from_str::<Json>) {
                None => None,
                Some(Ok(v @ Json::Object(_))) => Some(v),
                Some(Ok(_)) => {
                    return Err(Failure::new(EXIT_DATA, "--params: expected a JSON object"));
                }
                Some(Err(e)) => {
                    return Err(Failure::new(EXIT_DATA, format!("--params: not JSON: {e}")));
                }
            };
            let id = catalog.enqueue_now(name, params.as_ref(), "cli")?;
            if cli.json {
                print_json(&serde_json::json!({ "run_id": id }));
            } else {
                println!("run {id} of `{name}` queued");
            }
        }
        JobsCommand::Next { name, count } => {
            let job = catalog.job(name)?;
            let tz = load_config(cli)?.timezone();
            let schedule = Schedule::parse(&job.def.schedule, tz).map_err(|errors| {
                let reasons: Vec<String> = errors
                    .iter()
                    .map(|e| format!("{}: {}", e.field, e.reason))
                    .collect();
                Failure::new(
                    EXIT_DATA,
                    format!(
                        "job `{name}` has an invalid schedule: {}",
                        reasons.join("; ")
                    ),
                )
            })?;
            let now = crate::catalog::now_ms();
            let times = schedule.next_slots_after(now, *count);
            if cli.json {
                print_json(&serde_json::json!({
                    "job": name,
                    "schedule": schedule.describe(),
                    "timezone": schedule.tz().name(),
                    "next": times,
                }));
                return Ok(());
            }
            println!("{name}: {} ({})", schedule.describe(), schedule.tz().name());
            if times.is_empty() {
                println!("  no upcoming fire times (on demand or run_always)");
            }
            for t in times {
                println!("  {}", format_local(schedule.tz(), t));
            }
        }
    }
    Ok(())
}

fn parse_enum<T>(
    flag: &str,
    value: &str,
    parse: impl Fn(&str) -> Option<T>,
    expected: &str,
) -> Result<T, Failure> {
    parse(value).ok_or_else(|| {
        Failure::new(
            EXIT_DATA,
            format!("{flag}: expected one of {expected}, got `{value}`"),
        )
    })
}

fn apply_fields(job: &mut JobDef, f: &JobFields) -> Result<(), Failure> {
    if let Some(v) = &f.group {
        job.group = Some(v.clone()).filter(|g| !g.is_empty());
    }
    if let Some(v) = &f.payload {
        job.payload = match serde_json::from_str::<Json>(v) {
            Ok(Json::Object(map)) => map,
            Ok(_) => return Err(Failure::new(EXIT_DATA, "--payload: expected a JSON object")),
            Err(e) => return Err(Failure::new(EXIT_DATA, format!("--payload: not JSON: {e}"))),
        };
    }
    if let Some(v) = &f.description {
        job.description = Some(v.clone());
    }
    if let Some(v) = f.priority {
        job.priority = v;
    }
    if let Some(v) = f.timeout {
        job.timeout = v;
    }
    if f.clear_schedule {
        job.schedule = ScheduleSpec::default();
    }
    let s = &mut job.schedule;
    if let Some(v) = f.run_always {
        s.run_always = v;
    }
    if let Some(v) = f.run_delay {
        s.run_delay = v;
    }
    if f.run_every.is_some() {
        s.run_every = f.run_every;
    }
    if f.run_on_the.is_some() {
        s.run_on_the = f.run_on_the;
    }
    if f.run_at.is_some() {
        s.run_at = f.run_at.clone();
    }
    if f.run_date.is_some() {
        s.run_date = f.run_date.clone();
    }
    if f.cron.is_some() {
        s.cron = f.cron.clone();
    }
    if f.timezone.is_some() {
        s.timezone = f.timezone.clone();
    }
    if let Some(v) = &f.misfire_policy {
        job.misfire_policy = parse_enum(
            "--misfire-policy",
            v,
            MisfirePolicy::parse,
            "once, skip, all",
        )?;
    }
    if let Some(v) = &f.overlap_policy {
        job.overlap_policy = parse_enum(
            "--overlap-policy",
            v,
            OverlapPolicy::parse,
            "forbid, queue, allow",
        )?;
    }
    if let Some(v) = f.max_attempts {
        job.max_attempts = v;
    }
    if !f.objects.is_empty() {
        let mut objects = f.objects.clone();
        objects.sort();
        job.objects = objects;
    }
    if let Some(v) = f.required {
        job.required = v;
    }
    Ok(())
}

/// Validates the job within the whole catalog (so references resolve) and stores it.
fn save_job(catalog: &mut Catalog, file: &mut CatalogFile, name: &str, job: JobDef) -> CliResult {
    file.jobs.insert(name.to_string(), job.clone());
    let problems: Vec<String> = jobconf::validate(file)
        .into_iter()
        .filter(|p| p.name == name)
        .map(|p| match p.field {
            Some(field) => format!("job `{name}`: {field}: {}", p.reason),
            None => format!("job `{name}`: {}", p.reason),
        })
        .collect();
    if !problems.is_empty() {
        return Err(Failure::new(
            EXIT_DATA,
            problems.join("\n") + "\nnothing was changed",
        ));
    }
    catalog.put_job(name, &job, "cli")?;
    Ok(())
}

fn node_name(cli: &Cli) -> Result<String, Failure> {
    Ok(match &cli.node {
        Some(n) => n.clone(),
        None => load_config(cli)?.node_name(),
    })
}

fn decisions(cli: &Cli, limit: i64, all_nodes: bool) -> CliResult {
    let catalog = open(cli)?;
    let node = if all_nodes {
        None
    } else {
        Some(node_name(cli)?)
    };
    let rows = activation::decisions(&*catalog.read()?, node.as_deref(), limit)?;
    if cli.json {
        print_json(&rows);
        return Ok(());
    }
    let table = rows
        .iter()
        .map(|d| {
            vec![
                time_or_dash(Some(d.at)),
                d.node.clone(),
                d.action.clone(),
                d.subject.clone().unwrap_or_else(|| "-".into()),
                d.reason.clone(),
                d.evidence.as_ref().map_or(String::new(), Json::to_string),
            ]
        })
        .collect();
    print_table(
        &["TIME", "NODE", "DECISION", "SUBJECT", "REASON", "SAMPLES"],
        table,
    );
    Ok(())
}

fn processors(cli: &Cli) -> CliResult {
    let rows = open(cli)?.processors()?;
    if cli.json {
        print_json(&rows);
        return Ok(());
    }
    let table = rows
        .iter()
        .map(|p| {
            vec![
                p.name.clone(),
                p.instances.to_string(),
                p.max_instances.map_or("-".into(), |m| m.to_string()),
                p.remote.clone().unwrap_or_else(|| "local".into()),
                if p.enabled { "enabled" } else { "disabled" }.into(),
                p.jobs.to_string(),
            ]
        })
        .collect();
    print_table(
        &["NAME", "INSTANCES", "MAX", "WHERE", "STATUS", "JOBS"],
        table,
    );
    Ok(())
}

fn objects(cli: &Cli) -> CliResult {
    let rows = open(cli)?.objects()?;
    if cli.json {
        print_json(&rows);
        return Ok(());
    }
    let table = rows
        .iter()
        .map(|o| {
            vec![
                o.name.clone(),
                o.object_type.clone(),
                o.conn_string.clone().unwrap_or_else(|| "-".into()),
                o.time_to_live.map_or("-".into(), |s| format!("{s} s")),
                if o.allow_prune { "yes" } else { "no" }.into(),
                o.writers.to_string(),
            ]
        })
        .collect();
    print_table(&["NAME", "TYPE", "CONN", "TTL", "PRUNE", "WRITERS"], table);
    Ok(())
}

fn runs(cli: &Cli, cmd: &RunsCommand) -> CliResult {
    let catalog = open(cli)?;
    match cmd {
        RunsCommand::List { job, status, limit } => {
            if let Some(s) = status {
                parse_enum("--status", s, RunStatus::parse, &RunStatus::expected())?;
            }
            if let Some(j) = job {
                catalog.job(j)?;
            }
            let filter = RunFilter {
                job: job.clone(),
                status: status.clone(),
                limit: *limit,
            };
            let rows = catalog.runs(&filter)?;
            if cli.json {
                print_json(&rows);
                return Ok(());
            }
            let table = rows
                .iter()
                .map(|r| {
                    vec![
                        r.run_id.to_string(),
                        r.job.clone(),
                        r.status.clone(),
                        r.attempt.to_string(),
                        time_or_dash(r.scheduled_for),
                        time_or_dash(r.started_at),
                        r.elapsed.map_or("-".into(), |ms| format!("{ms} ms")),
                        r.error
                            .as_deref()
                            .map_or(String::new(), |e| e.chars().take(60).collect()),
                    ]
                })
                .collect();
            print_table(
                &[
                    "ID", "JOB", "STATUS", "ATTEMPT", "SLOT", "STARTED", "ELAPSED", "ERROR",
                ],
                table,
            );
        }
        RunsCommand::Show { id } => {
            let run = catalog.run(*id)?;
            if cli.json {
                print_json(&run);
                return Ok(());
            }
            let value = serde_json::to_value(&run).unwrap_or_default();
            if let Json::Object(map) = value {
                for (k, v) in map {
                    let text = match v {
                        Json::String(s) => s,
                        Json::Null => "-".into(),
                        other => other.to_string(),
                    };
                    println!("{k:<14} {text}");
                }
            }
        }
    }
    Ok(())
}

#[derive(Serialize)]
struct JobView<'a> {
    name: &'a str,
    #[serde(rename = "type")]
    job_type: &'a str,
    processor: &'a str,
    group: Option<&'a str>,
    priority: i64,
    enabled: bool,
    required: bool,
    timeout: i64,
    schedule: String,
    run_always: bool,
    run_delay: i64,
    run_every: Option<i64>,
    run_on_the: Option<i64>,
    run_at: Option<&'a str>,
    run_date: Option<&'a str>,
    cron: Option<&'a str>,
    timezone: Option<&'a str>,
    misfire_policy: &'a str,
    overlap_policy: &'a str,
    max_attempts: i64,
    objects: &'a [String],
    payload: &'a serde_json::Map<String, Json>,
    in_progress: i64,
    last_date_begin: Option<i64>,
    last_date_end: Option<i64>,
    last_elapse: Option<i64>,
    last_response: Option<&'a str>,
    next_run_at: Option<i64>,
}

fn job_view(j: &JobRecord) -> JobView<'_> {
    let d = &j.def;
    let s = &d.schedule;
    JobView {
        name: &j.name,
        job_type: d.job_type.as_str(),
        processor: &d.processor,
        group: d.group.as_deref(),
        priority: d.priority,
        enabled: d.enabled,
        required: d.required,
        timeout: d.timeout,
        schedule: schedule_summary(s),
        run_always: s.run_always,
        run_delay: s.run_delay,
        run_every: s.run_every,
        run_on_the: s.run_on_the,
        run_at: s.run_at.as_deref(),
        run_date: s.run_date.as_deref(),
        cron: s.cron.as_deref(),
        timezone: s.timezone.as_deref(),
        misfire_policy: d.misfire_policy.as_str(),
        overlap_policy: d.overlap_policy.as_str(),
        max_attempts: d.max_attempts,
        objects: &d.objects,
        payload: &d.payload,
        in_progress: j.in_progress,
        last_date_begin: j.last_date_begin,
        last_date_end: j.last_date_end,
        last_elapse: j.last_elapse,
        last_response: j.last_response.as_deref(),
        next_run_at: j.next_run_at,
    }
}

/// The schedule in words, from the schedule core (the zone does not change the words).
fn schedule_summary(s: &ScheduleSpec) -> String {
    match Schedule::parse(s, chrono_tz::UTC) {
        Ok(schedule) => schedule.describe(),
        Err(errors) => {
            let why: Vec<String> = errors
                .iter()
                .map(|e| format!("{}: {}", e.field, e.reason))
                .collect();
            format!("invalid schedule ({})", why.join("; "))
        }
    }
}

fn time_or_dash(ms: Option<i64>) -> String {
    ms.and_then(DateTime::from_timestamp_millis)
        .map(|t| {
            t.with_timezone(&Local)
                .format("%Y-%m-%d %H:%M:%S")
                .to_string()
        })
        .unwrap_or_else(|| "-".into())
}

fn print_json<T: Serialize + ?Sized>(value: &T) {
    let text =
        serde_json::to_string_pretty(value).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    println!("{text}");
}

/// Prints rows as a table with aligned columns.
fn print_table(headers: &[&str], rows: Vec<Vec<String>>) {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = std::io::stdout().lock();
    let line = |cells: Vec<&str>| -> String {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        padded.join("  ").trim_end().to_string()
    };
    let _ = writeln!(out, "{}", line(headers.to_vec()));
    for row in &rows {
        let _ = writeln!(out, "{}", line(row.iter().map(String::as_str).collect()));
    }
}
