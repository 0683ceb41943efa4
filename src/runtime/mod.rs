//! The actor runtime: the `Engine` handle and the actors behind it (Supervisor, Scheduler,
//! Processors, Writers, Health). Actix types stay behind `Engine` so the runtime can change
//! without breaking embedders.
//!
//! Invariant: before any processor starts, the node has claimed its name in the catalog and
//! returned to the queue every run it left running; all catalog writes after that go through
//! the one CatalogWriter.

pub mod builtins;
pub mod cgroup;
pub mod events;
pub mod health;
pub mod inbox;
pub mod notify;
pub mod processor;
pub mod scheduler;
pub mod supervisor;
pub mod tenure;
mod tuning;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use serde_json::Value as Json;

use crate::catalog::objects;
use crate::catalog::reader::Reader;
use crate::catalog::{Catalog, CatalogError, DbSettings};
use crate::config::NodeConfig;
use crate::executor::{ExecEnv, FnContext, Registry};
use crate::jobconf::{self, SeedError};

pub use crate::executor::{Clock, SystemClock};
pub use events::{Event, EventStream, RunOutcome, Subscription};
pub use supervisor::EngineStatus;

/// How runs are queued, beyond their parameters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TriggerOptions {
    /// Each run must start within this long, else it ends `expired` (the job's own
    /// `start_within` applies when this is not given).
    pub start_within: Option<std::time::Duration>,
}

/// Logs a catalog write that failed while the node runs: at `error`, or at `debug` when the
/// disk is full — the Supervisor says that once, and writes pause until space returns (a
/// line every sample or claim would fill the log of a node that can do nothing about it) —
/// or when the file is damaged: the fatal alarm says that once, and the node stops.
pub(crate) fn log_write_error(doing: &str, e: &CatalogError) {
    if e.is_disk_full() || e.is_damaged() {
        tracing::debug!("{doing}: {e}");
    } else {
        tracing::error!("{doing}: {e}");
    }
}

/// Gives memory the allocator holds freed back to the system (glibc keeps it in its arenas: a
/// node's RSS stayed at its start-up peak). Called after work that frees a lot at once.
pub(crate) fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory; it has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Errors starting or talking to an engine.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The catalog failed.
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    /// The seed catalog file is invalid.
    #[error(transparent)]
    Seed(#[from] SeedError),
    /// Another live process holds this node name.
    #[error(
        "node `{name}` is already running: pid {pid} on host {host} (last heartbeat {age_ms} ms ago); stop it, or give this node another name (--node NAME, node.name in the configuration file, or JOBVISOR__NODE__NAME)"
    )]
    NodeHeld {
        /// The node name.
        name: String,
        /// The holder's pid.
        pid: i64,
        /// The holder's host.
        host: String,
        /// How long ago it last proved alive.
        age_ms: i64,
    },
    /// The configuration does not hold together (a value no serde type refuses).
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The engine's actors are gone.
    #[error("the engine is not running")]
    Stopped,
    /// A run awaited did not end in time.
    #[error("run {run_id} did not end within {timeout:?}")]
    Timeout {
        /// The run (the attempt awaited last).
        run_id: i64,
        /// How long was waited.
        timeout: Duration,
    },
}

/// The actor audit rows name for runs triggered by embedding code through [`Engine::trigger`].
pub const EMBEDDED_ACTOR: &str = "embedded";

/// Builds an [`Engine`].
pub struct EngineBuilder {
    config: NodeConfig,
    registry: Registry,
    clock: Arc<dyn Clock>,
    notifier: notify::Notifier,
}

impl Default for EngineBuilder {
    fn default() -> Self {
        Self {
            config: NodeConfig::default(),
            registry: crate::runtime::builtins::registry(),
            clock: Arc::new(SystemClock),
            notifier: notify::Notifier::default(),
        }
    }
}

impl EngineBuilder {
    /// Use this node configuration (default: the built-in defaults).
    pub fn config(mut self, config: NodeConfig) -> Self {
        self.config = config;
        self
    }

    /// Use this catalog file (overrides `database.path`).
    pub fn db(mut self, path: impl AsRef<Path>) -> Self {
        self.config.database.path = path.as_ref().to_string_lossy().into_owned();
        self
    }

    /// Use this node name (overrides `node.name`).
    pub fn node_name(mut self, name: impl Into<String>) -> Self {
        self.config.node.name = name.into();
        self
    }

    /// Registers a function that `function` jobs can name (`payload.function`).
    pub fn function<F>(mut self, name: impl Into<String>, f: F) -> Self
    where
        F: Fn(&FnContext, Json) -> Result<Json, String> + Send + Sync + 'static,
    {
        self.registry.register(name, f);
        self
    }

    /// Registers an async function that `function` jobs can name (`payload.function`). It runs
    /// on its processor's thread, so it must await rather than block; a panic fails its run.
    pub fn async_function<F, Fut>(mut self, name: impl Into<String>, f: F) -> Self
    where
        F: Fn(FnContext, Json) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<Json, String>> + 'static,
    {
        self.registry.register_async(name, f);
        self
    }

    /// Registers the executor of `custom` jobs whose `payload.executor` is `name`: a kind of job
    /// of the application's own, beside function, sql, url, rpc and command.
    pub fn executor(
        mut self,
        name: impl Into<String>,
        executor: impl crate::executor::Executor,
    ) -> Self {
        self.registry.register_executor(name, executor);
        self
    }

    /// Use this clock for schedules (tests).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Pings a service manager's watchdog from the Supervisor while it handles messages
    /// (`WATCHDOG=1` every half of `WATCHDOG_USEC`; default: no notifications). The daemon
    /// passes [`notify::Notifier::from_env`]; an embedding application that answers its
    /// manager itself leaves it out.
    pub fn notifier(mut self, notifier: notify::Notifier) -> Self {
        self.notifier = notifier;
        self
    }

    /// Opens (and, the first time, seeds) the catalog, claims the node name, recovers runs this
    /// node left running, and starts the actors. Call inside a running actix `System`.
    pub fn start(self) -> Result<Engine, EngineError> {
        let cfg = self.config;
        let (seed, source) = jobconf::load_seed(&cfg)?;
        let settings = DbSettings::from(&cfg.database);
        let node_name = cfg.node_name();
        let host = sysinfo::System::host_name().unwrap_or_else(|_| "localhost".into());
        let pid = i64::from(std::process::id());
        let cadence = cfg.cadence().ok_or(crate::config::ConfigError::Invalid {
            key: "node.lease_ttl",
            reason: "must be 0 or at least three heartbeat intervals".into(),
        })?;
        let who = crate::catalog::node::Applicant {
            name: &node_name,
            host: &host,
            pid,
            version: env!("CARGO_PKG_VERSION"),
            lease_ttl_ms: cadence.ttl_ms(),
        };
        let clock = &*self.clock;
        let opened = match cfg.postgres_url() {
            Some(url) => {
                let pg = crate::catalog::PgSettings {
                    url: url.to_string(),
                    reconnect_for: Duration::from_millis(cfg.database.reconnect_for),
                    application: format!("jobvisor {node_name}"),
                };
                open_postgres(pg, &seed, &source, &who, clock, cadence)?
            }
            None => open_sqlite(&cfg, &settings, &seed, &source, &who, clock, cadence)?,
        };
        let Opened {
            writer: catalog_writer,
            reader,
            lease,
            written,
            seeded,
            db_path,
        } = opened;
        let node_id = lease.node_id;
        let sup_ctx = Context::<supervisor::Supervisor>::new();
        let sup_addr = sup_ctx.address();
        // A write that fails for a full disk is the Supervisor's cue to pause writes.
        let (full_to, full_clock) = (sup_addr.clone(), self.clock.clone());
        catalog_writer.on_full(Box::new(move || {
            full_to.do_send(supervisor::WriteFull(full_clock.now_ms()))
        }));
        // A corruption error met by any write or read of the catalog stops the node, once,
        // before it writes more (issue 12, defect 3); the writer already commits nothing.
        let fatal = Arc::new(crate::executor::FatalAlarm::default());
        let damage_alarm = fatal.clone();
        catalog_writer.on_damaged(Box::new(move |finding| {
            damage_alarm.raise(finding.to_string())
        }));
        // Only now that the catalog is known to be ours: a refused file leaves nothing behind.
        let data_dir = PathBuf::from(&cfg.node.data_dir);
        std::fs::create_dir_all(&data_dir).map_err(|source| CatalogError::Io {
            path: data_dir.clone(),
            source,
        })?;
        let object_writers =
            objects::ObjectWriters::new(data_dir.clone(), settings.clone(), reader.clone());
        for object in written {
            if let Some(path) = objects::resolve(&data_dir, object.conn_string.as_deref()) {
                object_writers
                    .start(&object.name, path)
                    .map_err(CatalogError::Unavailable)?;
            }
        }
        let functions: Arc<[String]> = self.registry.names().map(String::from).collect();
        let executors: Arc<[String]> = self.registry.executor_names().map(String::from).collect();
        let env = ExecEnv {
            registry: Arc::new(self.registry),
            clock: self.clock.clone(),
            catalog_writer: catalog_writer.clone(),
            catalog: reader.clone(),
            data_dir: data_dir.clone(),
            object_writers: Arc::new(object_writers),
            node_id,
            limits: cfg.executor.clone(),
            fatal: fatal.clone(),
            activity: Arc::default(),
            remote: None,
        };
        let watch = reader.watch(&settings)?;
        let events = Arc::new(events::EventBus::default());
        let sched_events = events.clone();
        let (clock, tz) = (self.clock.clone(), cfg.timezone());
        let watch_every = Duration::from_millis(cfg.database.watch_interval);
        let (sched_reader, sched_writer, reload_to) = (
            reader.clone(),
            catalog_writer.clone(),
            sup_addr.clone().recipient(),
        );
        let scheduler = actix::Supervisor::start(move |_| {
            scheduler::Scheduler::new(
                node_id,
                sched_reader,
                sched_writer,
                clock,
                tz,
                watch,
                Some(reload_to),
            )
            .with_events(sched_events.clone())
            .watch_every(watch_every)
        });
        let interval = Duration::from_millis(cfg.health.interval);
        let report_to = sup_addr.clone().recipient();
        let health_dir = if data_dir.exists() {
            data_dir.clone()
        } else {
            db_path.parent().map(Path::to_path_buf).unwrap_or_default()
        };
        let health_clock = self.clock.clone();
        let health = actix::Supervisor::start(move |_| {
            health::Health::new(&health_dir, interval, report_to, health_clock)
        });
        // Inboxes queue through the CatalogWriter, after the node name is held and its runs
        // recovered (above): files are queued from now on, whoever claims them.
        let inboxes = Arc::new(inbox::Inboxes::start(
            &cfg.inbox,
            &data_dir,
            catalog_writer.clone(),
            self.clock.clone(),
        ));
        let supervisor = sup_ctx.run(
            supervisor::Supervisor::new(
                Arc::new(tenure::Tenure::new(lease, cadence)),
                reader.clone(),
                catalog_writer,
                env,
                scheduler.clone(),
                cfg.policy.clone(),
            )
            .with_events(events.clone(), &node_name)
            .with_watchdog(self.notifier),
        );
        tracing::info!(node = %node_name, node_id, db = %db_path.display(), seeded, "engine started");
        Ok(Engine {
            inboxes,
            fatal,
            supervisor,
            scheduler,
            _health: health,
            events,
            reader,
            config: Arc::new(cfg),
            functions,
            executors,
            node_id,
            node_name,
            db_path,
            seeded,
        })
    }
}

/// A catalog opened for a node: its handles, the node name taken, what it found there.
struct Opened {
    writer: crate::catalog::writer::DbWriter,
    reader: Reader,
    lease: crate::catalog::node::NodeLease,
    /// The objects jobs write (each gets a writer).
    written: Vec<crate::catalog::loads::WrittenObject>,
    /// Whether this start seeded the catalog.
    seeded: bool,
    /// The catalog file, or the PostgreSQL URL with its password redacted.
    db_path: PathBuf,
}

/// Opens (and, the first time, seeds) the SQLite catalog, takes the node name, recovers the
/// runs this node left running.
fn open_sqlite(
    cfg: &NodeConfig,
    settings: &DbSettings,
    seed: &crate::jobconf::CatalogFile,
    source: &str,
    who: &crate::catalog::node::Applicant<'_>,
    clock: &dyn Clock,
    cadence: crate::lease::Cadence,
) -> Result<Opened, EngineError> {
    let db_path = cfg.db_path();
    let mut catalog = Catalog::open(&db_path, settings)?;
    let seeded = catalog
        .seed_if_new(seed, source)
        .map_err(|e| e.within(&db_path, "seeding the catalog"))?;
    let lease = tenure::take_name(&mut catalog, who, clock, cadence)?;
    let written = catalog
        .written_objects()
        .map_err(|e| e.within(&db_path, "reading the objects"))?;
    let (writer, reader) = catalog.into_node_handles(settings)?;
    Ok(Opened {
        writer,
        reader,
        lease,
        written,
        seeded,
        db_path,
    })
}

/// The same on a PostgreSQL catalog (its schema brought up to date first).
fn open_postgres(
    settings: crate::catalog::PgSettings,
    seed: &crate::jobconf::CatalogFile,
    source: &str,
    who: &crate::catalog::node::Applicant<'_>,
    clock: &dyn Clock,
    cadence: crate::lease::Cadence,
) -> Result<Opened, EngineError> {
    let pg = crate::catalog::PgCatalog::open(settings, "catalog")?;
    let db_path = PathBuf::from(pg.url());
    let seeded = pg
        .seed_if_new(seed, source, clock.now_ms())
        .map_err(|e| e.within(&db_path, "seeding the catalog"))?;
    let lease = tenure::take_name_on_postgres(&pg, who, clock, cadence)?;
    let written = pg
        .written_objects()
        .map_err(|e| e.within(&db_path, "reading the objects"))?;
    let (writer, reader) = pg
        .node_handles()
        .map_err(|e| e.within(&db_path, "connecting the node"))?;
    Ok(Opened {
        writer,
        reader,
        lease,
        written,
        seeded,
        db_path,
    })
}

/// A running engine: the handle an embedding application (or `jobvisor run`) holds.
#[derive(Clone)]
pub struct Engine {
    /// The `[[inbox]]` watchers; stopped at shutdown, and when the last handle goes.
    inboxes: Arc<inbox::Inboxes>,
    fatal: Arc<crate::executor::FatalAlarm>,
    supervisor: Addr<supervisor::Supervisor>,
    scheduler: Addr<scheduler::Scheduler>,
    _health: Addr<health::Health>,
    events: Arc<events::EventBus>,
    reader: Reader,
    config: Arc<NodeConfig>,
    functions: Arc<[String]>,
    executors: Arc<[String]>,
    node_id: i64,
    node_name: String,
    db_path: PathBuf,
    seeded: bool,
}

impl Engine {
    /// A builder with the default configuration and the built-in functions.
    pub fn builder() -> EngineBuilder {
        EngineBuilder::default()
    }

    /// Tells the engine that the catalog changed through this process (another connection
    /// than the engine's own, such as an [`OpsHandle`](crate::ops::handle::OpsHandle)): it
    /// looks at once instead of at its next check (`database.watch_interval`).
    pub fn catalog_changed(&self) {
        self.scheduler.do_send(scheduler::Look);
    }

    /// This node's id in the catalog.
    pub fn node_id(&self) -> i64 {
        self.node_id
    }

    /// This node's name.
    pub fn node_name(&self) -> &str {
        &self.node_name
    }

    /// The catalog file.
    pub fn db_path(&self) -> &Path {
        &self.db_path
    }

    /// Waits until the engine must stop at once (its catalog was found damaged); returns why.
    /// The owner should then exit without a graceful shutdown, which would write to the file.
    pub async fn fatal(&self) -> String {
        self.fatal.raised().await
    }

    /// Whether this start seeded a new catalog.
    pub fn seeded(&self) -> bool {
        self.seeded
    }

    /// The configuration the engine runs with (its catalog, data folder, node name, zone).
    pub fn config(&self) -> &NodeConfig {
        &self.config
    }

    /// The functions `function` jobs may name on this engine.
    pub fn functions(&self) -> &[String] {
        &self.functions
    }

    /// The executors `custom` jobs may name on this engine.
    pub fn executors(&self) -> &[String] {
        &self.executors
    }

    /// Delivers this engine's [`Event`]s to the actor behind `to`, as messages, from now on.
    /// Its mailbox is the buffer: an event that finds it full is dropped and counted
    /// ([`Subscription::dropped`]), so a slow actor never slows the engine.
    pub fn subscribe(&self, to: Recipient<Event>) -> Subscription {
        self.events.subscribe(to)
    }

    /// This engine's [`Event`]s as a stream buffering at most `capacity`; an event that finds
    /// it full is dropped and counted ([`EventStream::subscription`]).
    pub fn events(&self, capacity: usize) -> EventStream {
        self.events.stream(capacity)
    }

    /// Stops delivering to `subscription`.
    pub fn unsubscribe(&self, subscription: &Subscription) {
        self.events.unsubscribe(subscription)
    }

    /// Events dropped because a subscriber's buffer was full, over all subscribers.
    pub fn events_dropped(&self) -> u64 {
        self.events.dropped()
    }

    /// Queues a run of `job` with `params` and waits until it has ended — through its retries
    /// — for at most `timeout`: its outcome and output ([`Engine::wait`]).
    pub async fn run(
        &self,
        job: &str,
        params: Option<Json>,
        timeout: Duration,
    ) -> Result<RunOutcome, EngineError> {
        let run_id = self.trigger(job, params).await?;
        self.wait(run_id, timeout).await
    }

    /// Waits until run `run_id` has ended, following its retries to the last attempt, for at
    /// most `timeout`. Told by this engine's processors when they record the end (no polling);
    /// a run that has ended already answers at once from the catalog. A run that another node
    /// sharing the catalog executes is not seen ending here: it waits until `timeout`.
    pub async fn wait(&self, run_id: i64, timeout: Duration) -> Result<RunOutcome, EngineError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut id = run_id;
        loop {
            // Listen first, then look: an end recorded in between is not missed.
            let told = self.events.wait_for(id);
            let reader = self.reader.clone();
            let end = actix_rt::task::spawn_blocking(move || reader.run_end(id))
                .await
                .map_err(|_| EngineError::Stopped)??;
            let Some(end) = end else {
                self.events.forget_waiters(id);
                return Err(CatalogError::NotFound {
                    kind: "run",
                    name: id.to_string(),
                }
                .into());
            };
            if end.status.has_ended() {
                self.events.forget_waiters(id);
                drop(told);
                match end.retry {
                    Some(next) => {
                        id = next;
                        continue;
                    }
                    None => {
                        return Ok(RunOutcome {
                            run_id: id,
                            attempt: end.attempt,
                            status: end.status,
                            result: end.result,
                            error: end.error,
                        });
                    }
                }
            }
            return match tokio::time::timeout_at(deadline, told).await {
                Ok(Ok(outcome)) => Ok(outcome),
                Ok(Err(_)) => Err(EngineError::Stopped),
                Err(_) => {
                    self.events.forget_waiters(id);
                    Err(EngineError::Timeout {
                        run_id: id,
                        timeout,
                    })
                }
            };
        }
    }

    /// Queues a run of `job` now, with `params` overlaying its payload; returns the run id
    /// (audited as [`EMBEDDED_ACTOR`]).
    pub async fn trigger(&self, job: &str, params: Option<Json>) -> Result<i64, EngineError> {
        let ids = self.trigger_many(job, vec![params]).await?;
        ids.into_iter().next().ok_or(EngineError::Stopped)
    }

    /// Queues one run of `job` per parameter set, in one transaction; returns the run ids.
    /// The audit row names the actor [`EMBEDDED_ACTOR`].
    pub async fn trigger_many(
        &self,
        job: &str,
        params: Vec<Option<Json>>,
    ) -> Result<Vec<i64>, EngineError> {
        self.trigger_many_as(EMBEDDED_ACTOR, job, params).await
    }

    /// Like [`Engine::trigger_many`], with the audit row naming `actor` (a user or token of the
    /// API, say).
    pub async fn trigger_many_as(
        &self,
        actor: &str,
        job: &str,
        params: Vec<Option<Json>>,
    ) -> Result<Vec<i64>, EngineError> {
        self.trigger_with(actor, job, params, TriggerOptions::default())
            .await
    }

    /// Queues one run of `job` per parameter set as `actor`, with `options`: the one trigger
    /// path of the CLI, the API, JSON-RPC and embedding code.
    pub async fn trigger_with(
        &self,
        actor: &str,
        job: &str,
        params: Vec<Option<Json>>,
        options: TriggerOptions,
    ) -> Result<Vec<i64>, EngineError> {
        let msg = scheduler::Trigger {
            job: job.to_string(),
            params,
            actor: actor.to_string(),
            start_within: options
                .start_within
                .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
            parent: tracing::Span::current(),
        };
        Ok(self
            .scheduler
            .send(msg)
            .await
            .map_err(|_| EngineError::Stopped)??)
    }

    /// Stops firing schedules and claiming runs; running jobs go on.
    pub fn pause(&self) {
        self.supervisor.do_send(supervisor::Pause(true));
    }

    /// Undoes [`pause`](Self::pause).
    pub fn resume(&self) {
        self.supervisor.do_send(supervisor::Pause(false));
    }

    /// Processors, pause state and the latest health sample.
    pub async fn status(&self) -> Result<EngineStatus, EngineError> {
        self.supervisor
            .send(supervisor::GetEngineStatus)
            .await
            .map_err(|_| EngineError::Stopped)
    }

    /// Stops claiming at once, lets running jobs finish within `grace`, returns the rest to the
    /// queue, and releases the node name.
    pub async fn shutdown(&self, grace: Duration) -> Result<(), EngineError> {
        self.inboxes.stop();
        self.supervisor
            .send(supervisor::Shutdown(grace))
            .await
            .map_err(|_| EngineError::Stopped)
    }
}

/// Job trees (issue 14): children of running runs, from outside the run (a running function
/// spawns through its `FnContext`).
impl Engine {
    /// Queues a child run of the running run `parent`: a run of `job` with `params`
    /// overlaying its payload, in `parent`'s tree (the parent ends with its last descendant,
    /// its status the minimum over its tree). Returns the child's id (audited as
    /// [`EMBEDDED_ACTOR`]).
    pub async fn spawn(
        &self,
        parent: i64,
        job: &str,
        params: Option<Json>,
    ) -> Result<i64, EngineError> {
        self.spawn_as(EMBEDDED_ACTOR, parent, job, params).await
    }

    /// Like [`Engine::spawn`], with the audit row naming `actor`.
    pub async fn spawn_as(
        &self,
        actor: &str,
        parent: i64,
        job: &str,
        params: Option<Json>,
    ) -> Result<i64, EngineError> {
        let msg = scheduler::Spawn {
            parent,
            job: job.to_string(),
            params,
            actor: actor.to_string(),
        };
        Ok(self
            .scheduler
            .send(msg)
            .await
            .map_err(|_| EngineError::Stopped)??)
    }
}
