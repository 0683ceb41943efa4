//! The application layer: every operation an operator can ask for — on jobs, runs, processors,
//! objects, catalog files and decisions — as typed requests in and typed views out, with one
//! error type ([`OpError`]). The CLI is a thin adapter over it (arguments → request → render),
//! and the HTTP API is meant to be another.
//!
//! Invariant: validation in context (a job against the whole catalog), field patches, views and
//! warnings live here and nowhere in the faces; an operation that fails changes nothing.

pub mod accounts;
pub mod decisions;
pub mod error;
pub mod files;
pub mod handle;
pub mod jobs;
pub mod node;
pub mod objects;
pub mod overview;
pub mod pages;
pub mod pauses;
pub mod preview;
pub mod processors;
pub mod rpc;
pub mod runs;
pub mod stats;
pub mod view;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use chrono_tz::Tz;

use crate::catalog::{Access, Catalog, DbSettings, ImportReport, PgSettings};
use crate::config::NodeConfig;
use crate::jobconf::{self, CatalogFile, Problem, Section, SeedError, check_name};

pub use error::{Kind, OpError};

/// Who asks, and from where: the audit log's actor, and the node whose activation state the
/// views show and pins change.
#[derive(Debug, Clone)]
pub struct Caller {
    /// Recorded in audit rows (`cli`, a user name).
    pub actor: String,
    /// The node name activation questions are about.
    pub node: String,
}

/// An open catalog and the context of the operations on it. Cheap to clone: clones share the
/// catalog handle (SQLite's write connection behind its lock, the read pool, PostgreSQL's
/// connection thread), so a face that serves many users clones it per request and sets who
/// asks on its clone; operations of different clones run at once.
#[derive(Clone)]
pub struct Ops {
    catalog: Arc<Shared>,
    data_dir: std::path::PathBuf,
    caller: Caller,
    tz: Tz,
    functions: Option<Arc<BTreeSet<String>>>,
    executors: Arc<BTreeSet<String>>,
    /// Passwords verified lately (Basic auth costs argon2 once a while, not per request).
    verified: std::sync::Arc<accounts::VerifiedPasswords>,
}

/// What opening with `Access::Create` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opened {
    /// A catalog that existed.
    Existing,
    /// A new catalog, seeded from the seed file.
    Seeded,
}

impl Ops {
    /// Opens the catalog `cfg` names for `access`. With `Access::Create`, a new catalog is
    /// seeded from `catalog.seed` (validated before the database is touched).
    pub fn open(
        cfg: &NodeConfig,
        access: Access,
        caller: Caller,
    ) -> Result<(Ops, Opened), OpError> {
        let seed = if access == Access::Create {
            Some(jobconf::load_seed(cfg).map_err(seed_error)?)
        } else {
            None
        };
        let catalog = match cfg.postgres_url() {
            Some(url) => {
                let settings = PgSettings {
                    url: url.to_string(),
                    reconnect_for: std::time::Duration::from_millis(cfg.database.reconnect_for),
                    application: format!("jobvisor {}", caller.actor),
                };
                Catalog::open_postgres(settings, "ops", access)?
            }
            None => Catalog::open_as(&cfg.db_path(), &DbSettings::from(&cfg.database), access)?,
        };
        let path = catalog.path().to_path_buf();
        let mut opened = Opened::Existing;
        if let Some((file, source)) = seed
            && catalog
                .seed_if_new(&file, &source)
                .map_err(|e| e.within(&path, "seeding the catalog"))?
        {
            opened = Opened::Seeded;
        }
        let ops = Ops {
            catalog: Arc::new(Shared(catalog)),
            data_dir: cfg.node.data_dir.clone().into(),
            caller,
            tz: cfg.timezone(),
            functions: None,
            executors: Default::default(),
            verified: Default::default(),
        };
        Ok((ops, opened))
    }

    /// Warn about function jobs naming a function outside `names` (the functions registered in
    /// the engine that runs this catalog).
    pub fn with_functions<'a>(mut self, names: impl IntoIterator<Item = &'a str>) -> Self {
        self.functions = Some(Arc::new(names.into_iter().map(String::from).collect()));
        self
    }

    /// Warn about custom jobs naming an executor outside `names` (the executors registered in
    /// the engine that runs this catalog), once its functions are known ([`Ops::with_functions`]).
    pub fn with_executors<'a>(mut self, names: impl IntoIterator<Item = &'a str>) -> Self {
        self.executors = Arc::new(names.into_iter().map(String::from).collect());
        self
    }

    /// The functions the engine running this catalog registers (empty when not told).
    pub fn functions(&self) -> Vec<String> {
        self.functions
            .as_ref()
            .map(|f| f.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The catalog.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog.0
    }

    /// Who asks.
    pub fn caller(&self) -> &Caller {
        &self.caller
    }

    /// The catalog file was found damaged: this handle copies nothing more into it, not even
    /// when it is dropped ([`Catalog::keep_bytes`]).
    pub fn keep_bytes(&self) {
        self.catalog.keep_bytes();
    }

    /// Who asks from now on (a face that serves many users sets it per request).
    pub fn set_actor(&mut self, actor: &str) {
        if self.caller.actor != actor {
            self.caller.actor = actor.to_string();
        }
    }

    /// The node's time zone (for schedules that name none).
    pub fn timezone(&self) -> Tz {
        self.tz
    }

    /// Names the catalog file and what was being done, for a storage error.
    fn within<D: Into<String>>(
        &self,
        doing: D,
    ) -> impl FnOnce(crate::catalog::CatalogError) -> OpError + use<D> {
        let path = self.catalog.path().to_path_buf();
        move |e| OpError::from(e.within(&path, doing))
    }

    /// Adds (`exists = false`) or changes (`exists = true`) one entry of a section, validated
    /// against the whole catalog, in one transaction with its audit row.
    fn put_entry<T: Clone + Default + 'static>(
        &self,
        section: Section,
        name: &str,
        exists: bool,
        map: fn(&CatalogFile) -> &BTreeMap<String, T>,
        map_mut: fn(&mut CatalogFile) -> &mut BTreeMap<String, T>,
        apply: impl Fn(&mut T) + Send + 'static,
    ) -> Result<ImportReport, OpError> {
        let kind = section.as_str();
        check_name(name).map_err(|reason| OpError::invalid("name", reason))?;
        let action = format!("{kind}.{}", if exists { "edit" } else { "add" });
        let within = self.within(format!("saving {kind} `{name}`"));
        let actor = self.caller.actor.clone();
        let place = self.place();
        let name = name.to_string();
        self.catalog
            .update(&actor, &action, move |before| {
                let mut def = match (map(before).get(&name), exists) {
                    (Some(_), false) => {
                        return Err(OpError::Conflict(format!(
                            "{kind} `{name}` exists already; change it with `{kind}s edit`"
                        )));
                    }
                    (None, true) => {
                        return Err(OpError::NotFound {
                            kind,
                            name: name.clone(),
                        });
                    }
                    (Some(old), true) => old.clone(),
                    (None, false) => T::default(),
                };
                apply(&mut def);
                let mut one = CatalogFile::default();
                map_mut(&mut one).insert(name.clone(), def);
                files::new_problems(before, &one, &place)?;
                Ok(std::sync::Arc::new(one))
            })
            .map_err(|e| match e {
                OpError::Catalog(c) => within(c),
                other => other,
            })
    }

    /// Where this catalog and its node's data folder are, for validation in context.
    fn place(&self) -> files::Place {
        files::Place {
            catalog: self.catalog.path().to_path_buf(),
            data_dir: self.data_dir.clone(),
        }
    }

    /// Warnings about what `file` defines but the engine cannot run (unknown functions).
    pub fn warnings(&self, file: &CatalogFile) -> Vec<Warning> {
        self.functions
            .as_ref()
            .map(|known| {
                let mut w = files::function_warnings(file, known);
                w.extend(files::executor_warnings(file, &self.executors));
                w
            })
            .unwrap_or_default()
    }
}

/// The catalog the clones of an [`Ops`] share; the last one to go copies the write-ahead log
/// into the file ([`Catalog::settle`]).
struct Shared(Catalog);

impl std::ops::Deref for Shared {
    type Target = Catalog;

    fn deref(&self) -> &Catalog {
        &self.0
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.0.settle();
    }
}

/// Something an operation accepted but an operator should know (`--strict` makes it an error).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct Warning {
    /// What it is about (`job \`x\``).
    pub subject: String,
    /// The field concerned.
    pub field: String,
    /// Why it matters.
    pub reason: String,
}

impl std::fmt::Display for Warning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}: {}", self.subject, self.field, self.reason)
    }
}

fn seed_error(e: SeedError) -> OpError {
    match e {
        SeedError::Read { file, source } => OpError::Input {
            path: file.into(),
            reason: source.to_string(),
        },
        SeedError::Invalid { file, diagnostics } => OpError::File { file, diagnostics },
    }
}

/// The validation problems of one entry, as one error naming the entry and its field.
fn problems_error(problems: Vec<Problem>) -> Result<(), OpError> {
    let Some(first) = problems.first() else {
        return Ok(());
    };
    let subject = format!("{} `{}`", first.section.as_str(), first.name);
    // A problem inside a structured field (a workflow's step) names its path in it.
    let where_of = |p: &Problem| {
        p.field.map(|f| match &p.at {
            Some(at) => format!("{f}.{at}"),
            None => f.to_string(),
        })
    };
    let field = where_of(first);
    let reason = problems
        .iter()
        .map(|p| match where_of(p) {
            Some(f) if Some(&f) != field.as_ref() => format!("{f}: {}", p.reason),
            _ => p.reason.clone(),
        })
        .collect::<Vec<_>>()
        .join("; ");
    Err(OpError::Invalid {
        field,
        reason: format!("{reason} ({subject}; nothing was changed)"),
    })
}
