//! The command line: `jobvisor init|run|check|import|export|config|jobs|processors|objects|runs|
//! decisions|stats`. A thin adapter: arguments → a request of the application layer ([`crate::ops`])
//! → a table for people or JSON for scripts; every failure maps to one documented exit code.
//!
//! Invariant: commands that validate a file (`check`, `import`) finish validating before they
//! open any database, so a file with errors changes nothing; only `init`, `run` and `import`
//! create a catalog, and the reading commands open it read-only.

mod accounts;
mod args;
mod commands;
mod examples;
mod files;
mod remote;
mod render;
mod runs;
mod stats;

use std::ffi::OsString;

pub use args::{Cli, Command, Format, RunArgs};

use crate::catalog::CatalogError;
use crate::config::{self, ConfigError, NodeConfig, Overrides};
use crate::ops::{Kind, OpError};

/// The exit codes, shown in `--help`.
pub const EXIT_CODES: &str = "Exit codes:
  0   success
  1   an operation failed (a database error)
  2   bad command-line usage
  65  bad input data: a named job, run, processor or object does not exist, a field value is
      invalid, or the change conflicts with the catalog (exists already, in use)
  66  an input file cannot be read, or there is no catalog at the path (create one with init)
  75  try again later: the node name is held by a running process, the API's address is in
      use, or the engine is unavailable
  77  the node's API refused the token (--url)
  78  a configuration or catalog file has errors (each printed as file:line:col: reason), or the
      database is not a usable jobvisor catalog (another application's, damaged, newer)
With --json, an error is also a JSON object on stderr: {error, field, reason, exit_code}.";

/// Exit code: success.
pub const EXIT_OK: i32 = 0;
/// Exit code: an operation failed.
pub const EXIT_FAILURE: i32 = 1;
/// Exit code: bad command-line usage.
pub const EXIT_USAGE: i32 = 2;
/// Exit code: bad input data (sysexits EX_DATAERR).
pub const EXIT_DATA: i32 = 65;
/// Exit code: an input file or the catalog cannot be found or read (EX_NOINPUT).
pub const EXIT_NO_INPUT: i32 = 66;
/// Exit code: try again later (EX_TEMPFAIL).
pub const EXIT_TEMPFAIL: i32 = 75;
/// Exit code: configuration or catalog file errors (EX_CONFIG).
pub const EXIT_CONFIG: i32 = 78;

/// A failed command: what to print and the exit code.
#[derive(Debug)]
pub struct Failure {
    /// Exit code.
    pub code: i32,
    /// The whole message, for people.
    pub message: String,
    /// The field at fault, if one is.
    pub field: Option<String>,
    /// The reason without the field's name.
    pub reason: String,
}

impl Failure {
    /// A failure with its exit code.
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        let message = message.into();
        Self {
            code,
            reason: message.clone(),
            message,
            field: None,
        }
    }
}

/// The exit code of a kind of failure.
pub fn exit_code(kind: Kind) -> i32 {
    match kind {
        Kind::Usage => EXIT_USAGE,
        Kind::Invalid | Kind::NotFound | Kind::Conflict => EXIT_DATA,
        Kind::Unavailable => EXIT_TEMPFAIL,
        Kind::NoInput => EXIT_NO_INPUT,
        Kind::Config => EXIT_CONFIG,
        Kind::Storage => EXIT_FAILURE,
    }
}

impl From<OpError> for Failure {
    fn from(e: OpError) -> Self {
        let mut message = e.to_string();
        if e.kind() == Kind::Invalid && !message.contains("nothing was changed") {
            message.push_str("; nothing was changed");
        }
        Failure {
            code: exit_code(e.kind()),
            field: e.field().map(String::from),
            reason: e.reason(),
            message,
        }
    }
}

impl From<CatalogError> for Failure {
    fn from(e: CatalogError) -> Self {
        OpError::from(e).into()
    }
}

impl From<ConfigError> for Failure {
    fn from(e: ConfigError) -> Self {
        OpError::from(e).into()
    }
}

/// Parses `std::env::args`, runs the command, prints errors; returns the exit code.
pub fn main() -> i32 {
    main_with(std::env::args_os().collect())
}

/// Like [`main`], with the arguments given.
pub fn main_with(argv: Vec<OsString>) -> i32 {
    limit_malloc_arenas();
    let json = argv.iter().any(|a| a == "--json");
    let parsed = examples::command()
        .try_get_matches_from(&argv)
        .and_then(|m| <Cli as clap::FromArgMatches>::from_arg_matches(&m));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) || !json {
                let _ = e.print();
                return e.exit_code();
            }
            let message = e.to_string();
            let first = message
                .lines()
                .next()
                .unwrap_or("")
                .trim_start_matches("error: ")
                .to_string();
            report(&Failure::new(EXIT_USAGE, first), true);
            return EXIT_USAGE;
        }
    };
    if !matches!(cli.command, Command::Run(_)) {
        restore_sigpipe();
    }
    match commands::run(&cli) {
        Ok(()) => EXIT_OK,
        Err(f) => {
            report(&f, cli.json);
            f.code
        }
    }
}

/// Prints a failure on stderr: the message, and with `--json` a JSON object after it.
fn report(f: &Failure, json: bool) {
    if json {
        let value = serde_json::json!({
            "error": f.message.trim_end(),
            "field": f.field,
            "reason": f.reason.trim_end(),
            "exit_code": f.code,
        });
        eprintln!("{value}");
    } else {
        eprintln!("{}", f.message.trim_end());
    }
}

/// A reading command whose output goes to a closed pipe (`jobvisor export | head -1`) ends
/// quietly, as ordinary tools do, instead of panicking on the write: the Rust runtime ignores
/// SIGPIPE, so the default action is restored for every command but `run` (a node must not die
/// because whoever read its banner went away).
fn restore_sigpipe() {
    // SAFETY: resetting a signal's disposition to its default before any thread is started.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// The configuration with the command-line flags as the top layer.
pub fn load_config(cli: &Cli, args: &RunArgs) -> Result<NodeConfig, Failure> {
    let node_name = match (&args.node_name, &cli.node) {
        (Some(a), Some(b)) if a != b => {
            return Err(Failure::new(
                EXIT_USAGE,
                format!("--node `{b}` and --node-name `{a}` disagree: give one"),
            ));
        }
        (a, b) => a.clone().or_else(|| b.clone()),
    };
    let overrides = Overrides {
        db: cli.db.as_ref().map(|p| p.to_string_lossy().into_owned()),
        data_dir: args.data_dir.clone(),
        node_name: if matches!(cli.command, Command::Run(_)) {
            node_name
        } else {
            None
        },
        bind: args.bind.clone(),
        log_format: args.log_format.clone(),
    };
    Ok(config::load(cli.config.as_deref(), None, &overrides)?)
}

/// glibc gives each thread that allocates under contention an arena of its own (up to eight
/// per core), and memory freed into one is kept there: a node's RSS grew from 20 to 30 MB
/// after three API listings of 1,000 jobs, and stayed. Two arenas keep it at 20 MB with no
/// measurable cost to the drain (the writer and the processors allocate little per run).
/// Set before any thread starts (the CLI is the process's entry point); `MALLOC_ARENA_MAX` in the environment still wins.
fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets an allocator parameter; called before any other thread
        // exists.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 2);
        }
    }
}
