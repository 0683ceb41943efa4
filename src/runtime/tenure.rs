//! The node's tenure of its name: taking it at start (watching a stale holder that may be alive
//! before taking over), recovering the runs an earlier process of the node left running, and the
//! [`Tenure`] that every heartbeat renews and that processors consult before they claim or start
//! a run.
//!
//! Why a tenure and not only the catalog's generation check: runs claimed before a process was
//! stopped (SIGSTOP, a frozen VM) sit in its processors' buffers; when it continues, it could
//! start them before its next heartbeat finds that the name was taken, or that another node
//! swept it. So a process starts nothing once its last confirmed heartbeat is older than
//! [`Cadence::valid_for_ms`] (two heartbeats), which is shorter than the time a taker waits (the
//! stale threshold, then a watched heartbeat interval) and than the lease TTL after which a
//! sweep may give its runs away.
//!
//! Invariant: a process claims and starts runs only while its tenure is valid; once another
//! process took its name it never becomes valid again.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, Instant};

use super::EngineError;
use crate::catalog::Catalog;
use crate::catalog::node::{self, Applicant, NodeHolder, NodeLease, Registered, Registration};
use crate::catalog::{PgCatalog, PgTakeName};
use crate::executor::Clock;
use crate::lease::Cadence;

/// This process's hold on its node name, as its heartbeats last confirmed it.
#[derive(Debug)]
pub struct Tenure {
    lease: NodeLease,
    cadence: Cadence,
    origin: Instant,
    /// When the latest confirmed heartbeat was sent, ms after `origin`.
    confirmed_ms: AtomicI64,
    lost: AtomicBool,
}

impl Tenure {
    /// A tenure just taken (registration is a confirmation), renewed at `cadence`.
    pub fn new(lease: NodeLease, cadence: Cadence) -> Self {
        Self {
            lease,
            cadence,
            origin: Instant::now(),
            confirmed_ms: AtomicI64::new(0),
            lost: AtomicBool::new(false),
        }
    }

    /// The lease heartbeats and claims carry.
    pub fn lease(&self) -> NodeLease {
        self.lease
    }

    /// How often it is renewed, and how long its leases hold.
    pub fn cadence(&self) -> Cadence {
        self.cadence
    }

    /// A reading to take just before sending a heartbeat, and to confirm with once it landed.
    pub fn mark(&self) -> i64 {
        self.origin.elapsed().as_millis() as i64
    }

    /// A heartbeat sent at `mark` landed under this process's generation.
    pub fn confirm(&self, mark: i64) {
        self.confirmed_ms.fetch_max(mark, Ordering::AcqRel);
    }

    /// Another process took the name: nothing may be claimed or started any more.
    pub fn lose(&self) {
        self.lost.store(true, Ordering::Release);
    }

    /// Whether the name was taken by another process.
    pub fn is_lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
    }

    /// Whether this process may claim and start runs now.
    pub fn is_valid(&self) -> bool {
        !self.is_lost()
            && self.mark() - self.confirmed_ms.load(Ordering::Acquire) < self.cadence.valid_for_ms()
    }
}

/// Takes the node name for this process (watching a stale holder that may be alive for a
/// heartbeat interval first), and recovers the runs an earlier process of the node left
/// running, in one transaction with the take. Blocks while it watches.
pub fn take_name(
    catalog: &mut Catalog,
    who: &Applicant<'_>,
    clock: &dyn Clock,
    cadence: Cadence,
) -> Result<NodeLease, EngineError> {
    let path = catalog.path().to_path_buf();
    take_name_with(who, clock, cadence, |now, stale, watched| {
        Ok(catalog
            .try_take_node_name(who, now, stale, is_alive, watched)
            .map_err(|e| e.within(&path, format!("taking the node name `{}`", who.name)))?)
    })
}

/// [`take_name`] on a PostgreSQL catalog.
pub fn take_name_on_postgres(
    pg: &PgCatalog,
    who: &Applicant<'_>,
    clock: &dyn Clock,
    cadence: Cadence,
) -> Result<NodeLease, EngineError> {
    take_name_with(who, clock, cadence, |now, stale, watched| {
        let take = PgTakeName {
            name: who.name.to_string(),
            host: who.host.to_string(),
            pid: who.pid,
            lease_ttl_ms: who.lease_ttl_ms,
            now,
            stale_after_ms: stale,
            watched: watched.cloned(),
        };
        Ok(pg.try_take_node_name(take, is_alive)?)
    })
}

/// Asks `try_take(now, stale_after_ms, watched)` for the name until it is taken or found held
/// by a live process, watching a stale holder that may be alive for a heartbeat interval.
fn take_name_with(
    who: &Applicant<'_>,
    clock: &dyn Clock,
    cadence: Cadence,
    mut try_take: impl FnMut(i64, i64, Option<&NodeHolder>) -> Result<Registered, EngineError>,
) -> Result<NodeLease, EngineError> {
    let mut watched: Option<NodeHolder> = None;
    let watch_for = Duration::from_millis(cadence.watch_for_ms() as u64);
    loop {
        let now = clock.now_ms();
        let taken = try_take(now, cadence.stale_after_ms(), watched.as_ref())?;
        match taken {
            (Registration::Taken(lease), recovery) => {
                if let Some(old) = &watched {
                    tracing::warn!(
                        node = who.name,
                        pid = old.pid,
                        host = %old.host,
                        "took over the node name from a process whose heartbeat stopped"
                    );
                }
                if let Some(r) = &recovery {
                    log_recovery(r);
                }
                return Ok(lease);
            }
            (Registration::Held(holder), _) => {
                return Err(EngineError::NodeHeld {
                    name: who.name.to_string(),
                    pid: holder.pid,
                    host: holder.host,
                    age_ms: now - holder.heartbeat_at,
                });
            }
            (Registration::Watch(holder), _) => {
                tracing::warn!(
                    node = who.name,
                    pid = holder.pid,
                    host = %holder.host,
                    heartbeat_age_ms = now - holder.heartbeat_at,
                    "the node name's holder stopped its heartbeat but may be alive; watching it for {:?}",
                    watch_for
                );
                std::thread::sleep(watch_for);
                watched = Some(holder);
            }
        }
    }
}

/// Names the runs a recovery requeued and quarantined (a long list is cut).
fn log_recovery(r: &node::Recovery) {
    const SHOWN: usize = 50;
    if !r.requeued.is_empty() {
        let ids: Vec<i64> = r.requeued.iter().copied().take(SHOWN).collect();
        tracing::warn!(
            count = r.requeued.len(),
            "runs left running by an earlier process of this node were returned to the queue: {ids:?}{}",
            if r.requeued.len() > SHOWN { " …" } else { "" }
        );
    }
    if !r.cancelled.is_empty() {
        tracing::info!(
            runs = ?r.cancelled,
            "runs an operator had asked to cancel were recorded cancelled instead of requeued"
        );
    }
    for (run, crashes) in &r.quarantined {
        tracing::error!(
            run,
            crashes,
            "run quarantined (dead): {}",
            node::quarantine_reason(*crashes)
        );
    }
}

/// Says what a sweep did to a dead node: which node, how long its heartbeat had stopped,
/// whether it was fenced, and the runs it returned to the queue (a long list is cut; the audit
/// row has them all), quarantined or recorded cancelled.
pub(super) fn log_sweep(s: &node::Swept, now: i64) {
    const SHOWN: usize = 50;
    let silent_ms = s.heartbeat_at.map(|at| now - at);
    let ids: Vec<i64> = s.recovery.requeued.iter().copied().take(SHOWN).collect();
    let more = if s.recovery.requeued.len() > SHOWN {
        " …"
    } else {
        ""
    };
    tracing::warn!(
        dead_node = %s.name,
        pid = ?s.pid,
        host = ?s.host,
        heartbeat_age_ms = ?silent_ms,
        lease_ttl_ms = s.lease_ttl,
        fenced_generation = ?s.fenced,
        requeued = s.recovery.requeued.len(),
        "swept node `{}`: its heartbeat stopped for longer than its lease TTL{}; runs whose leases \
         expired returned to the queue: {ids:?}{more}",
        s.name,
        if s.fenced.is_some() { ", so it was fenced" } else { "" },
    );
    if !s.recovery.cancelled.is_empty() {
        tracing::info!(
            dead_node = %s.name,
            runs = ?s.recovery.cancelled,
            "runs of a swept node that an operator had asked to cancel were recorded cancelled"
        );
    }
    for (run, crashes) in &s.recovery.quarantined {
        tracing::error!(
            dead_node = %s.name,
            run,
            crashes,
            "run quarantined (dead): {}",
            node::quarantine_reason(*crashes)
        );
    }
}

fn is_alive(pid: i64) -> bool {
    // SAFETY: kill(2) with signal 0 only checks that the process exists.
    pid > 0 && unsafe { libc::kill(pid as libc::pid_t, 0) } == 0
}
