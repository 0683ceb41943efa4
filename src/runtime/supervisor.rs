//! Supervisor is an actor. It owns the node's children: the Scheduler, one Processor per active
//! local `job_processor` row, the Health actor (and, through the Engine, the Writers); it
//! restarts children that stop (actix `Supervisor`, with each child's own backoff), keeps the
//! node's heartbeat, receives health reports, and drains everything at shutdown.
//!
//! Invariant: a processor exists for every enabled local processor row and for no other; at
//! shutdown, processors stop claiming before anything else stops, and the node name is released
//! last.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicI64;
use std::time::Duration;

use actix::prelude::*;
use r2d2::Pool;
use r2d2_sqlite::SqliteConnectionManager;
use serde::Serialize;

use super::health::HealthReport;
use super::processor::{
    self, Drain, GetStatus, Processor, ProcessorConfig, ProcessorStatus, SetInstances, SetPaused,
};
use super::scheduler::{PauseSchedules, Reload, Scheduler, SetProcessors};
use super::writer::{self, Writer};
use crate::catalog::now_ms;
use crate::catalog::queue::{self, LocalProcessor};
use crate::executor::ExecEnv;

/// How often the node's heartbeat is written.
pub const HEARTBEAT: Duration = Duration::from_secs(5);

/// Pause (true) or resume (false) the whole node: schedules and claims.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Pause(pub bool);

/// Drain and stop; answers when every run has finished or been returned to the queue.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Shutdown(pub Duration);

/// The node's state.
#[derive(Message)]
#[rtype(result = "EngineStatus")]
pub struct GetEngineStatus;

/// What the engine is doing.
#[derive(Debug, Clone, Serialize, MessageResponse)]
pub struct EngineStatus {
    /// This node's id in the catalog.
    pub node_id: i64,
    /// Paused by the operator or the host.
    pub paused: bool,
    /// Each processor.
    pub processors: Vec<ProcessorStatus>,
    /// The latest health sample.
    pub health: Option<HealthReport>,
}

/// The Supervisor actor.
pub struct Supervisor {
    node_id: i64,
    pool: Pool<SqliteConnectionManager>,
    writer: Addr<Writer>,
    env: ExecEnv,
    scheduler: Addr<Scheduler>,
    processors: HashMap<i64, (LocalProcessor, Addr<Processor>)>,
    tokens: Arc<AtomicI64>,
    lease_ms: i64,
    last_health: Option<HealthReport>,
    paused: bool,
    stopping: bool,
}

impl Supervisor {
    /// A supervisor for `node_id`; `scheduler` is already running.
    pub fn new(
        node_id: i64,
        pool: Pool<SqliteConnectionManager>,
        writer: Addr<Writer>,
        env: ExecEnv,
        scheduler: Addr<Scheduler>,
    ) -> Self {
        // Claim tokens grow with time across restarts, and with each claim within one.
        let tokens = Arc::new(AtomicI64::new(now_ms() << 10));
        Self {
            node_id,
            pool,
            writer,
            env,
            scheduler,
            processors: HashMap::new(),
            tokens,
            lease_ms: 60_000,
            last_health: None,
            paused: false,
            stopping: false,
        }
    }

    /// Starts, resizes and stops processors to match the catalog's rows.
    fn sync_processors(&mut self, ctx: &mut Context<Self>) {
        let pool = self.pool.clone();
        let load = actix_rt::task::spawn_blocking(move || {
            let conn = pool.get()?;
            queue::load_local_processors(&conn)
        });
        ctx.spawn(load.into_actor(self).map(|joined, act, ctx| {
            let rows = match joined {
                Ok(Ok(rows)) => rows,
                Ok(Err(e)) => return tracing::error!("loading processors: {e}"),
                Err(e) => return tracing::error!("loading processors panicked: {e}"),
            };
            if act.stopping {
                return;
            }
            let wanted: HashMap<i64, LocalProcessor> =
                rows.into_iter().map(|r| (r.processor_id, r)).collect();
            act.processors.retain(|id, (row, addr)| {
                if wanted.contains_key(id) {
                    return true;
                }
                tracing::info!(processor = %row.name, "processor removed or disabled; draining it");
                addr.do_send(Drain(Duration::from_secs(30)));
                false
            });
            for (id, row) in wanted {
                match act.processors.get_mut(&id) {
                    Some((old, addr)) => {
                        if old.instances != row.instances {
                            addr.do_send(SetInstances(row.instances.max(1) as usize));
                        }
                        *old = row;
                    }
                    None => {
                        let addr = act.start_processor(&row, ctx);
                        act.processors.insert(id, (row, addr));
                    }
                }
            }
            let map = act
                .processors
                .iter()
                .map(|(id, (_, a))| (*id, a.clone()))
                .collect();
            act.scheduler.do_send(SetProcessors(map));
        }));
    }

    fn start_processor(&self, row: &LocalProcessor, _ctx: &mut Context<Self>) -> Addr<Processor> {
        let cfg = ProcessorConfig {
            processor_id: row.processor_id,
            name: row.name.clone(),
            instances: row.instances.max(1) as usize,
            node_id: self.node_id,
            lease_ms: self.lease_ms,
            tokens: self.tokens.clone(),
        };
        let env = self.env.clone();
        let writer = self.writer.clone();
        let events = self.scheduler.clone().recipient::<processor::RunEvent>();
        let paused = self.paused;
        actix::Supervisor::start(move |_| Processor::new(cfg, env, writer, events).paused(paused))
    }
}

impl Actor for Supervisor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.sync_processors(ctx);
        ctx.run_interval(HEARTBEAT, |act, ctx| {
            let (writer, node) = (act.writer.clone(), act.node_id);
            ctx.spawn(
                async move {
                    if let Err(e) =
                        writer::call(&writer, move |c| queue::heartbeat(c, node, now_ms())).await
                    {
                        tracing::warn!("heartbeat: {e}");
                    }
                }
                .into_actor(act),
            );
        });
    }
}

impl Handler<HealthReport> for Supervisor {
    type Result = ();
    fn handle(&mut self, msg: HealthReport, _: &mut Context<Self>) {
        tracing::debug!(
            cpu = msg.cpu_used,
            mem_avail = msg.memory_available,
            disk_avail = msg.disk_available,
            "health"
        );
        self.last_health = Some(msg);
    }
}

impl Handler<Reload> for Supervisor {
    type Result = ();
    fn handle(&mut self, _: Reload, ctx: &mut Context<Self>) {
        self.sync_processors(ctx);
    }
}

impl Handler<Pause> for Supervisor {
    type Result = ();
    fn handle(&mut self, msg: Pause, _: &mut Context<Self>) {
        self.paused = msg.0;
        self.scheduler.do_send(PauseSchedules(msg.0));
        for (_, addr) in self.processors.values() {
            addr.do_send(SetPaused(msg.0));
        }
    }
}

impl Handler<GetEngineStatus> for Supervisor {
    type Result = ResponseActFuture<Self, EngineStatus>;
    fn handle(&mut self, _: GetEngineStatus, _: &mut Context<Self>) -> Self::Result {
        let asks: Vec<_> = self
            .processors
            .values()
            .map(|(_, a)| a.send(GetStatus))
            .collect();
        let (node_id, paused, health) = (self.node_id, self.paused, self.last_health.clone());
        Box::pin(
            async move {
                let mut processors = Vec::new();
                for ask in asks {
                    if let Ok(s) = ask.await {
                        processors.push(s);
                    }
                }
                processors.sort_by(|a, b| a.name.cmp(&b.name));
                EngineStatus {
                    node_id,
                    paused,
                    processors,
                    health,
                }
            }
            .into_actor(self),
        )
    }
}

impl Handler<Shutdown> for Supervisor {
    type Result = ResponseActFuture<Self, ()>;
    fn handle(&mut self, msg: Shutdown, _: &mut Context<Self>) -> Self::Result {
        self.stopping = true;
        self.scheduler.do_send(PauseSchedules(true));
        let drains: Vec<_> = self
            .processors
            .values()
            .map(|(_, a)| a.send(Drain(msg.0)))
            .collect();
        let (writer, node) = (self.writer.clone(), self.node_id);
        Box::pin(
            async move {
                for d in drains {
                    let _ = d.await;
                }
                if let Err(e) = writer::call(&writer, move |c| queue::release_node(c, node)).await {
                    tracing::warn!("releasing the node name: {e}");
                }
            }
            .into_actor(self),
        )
    }
}
