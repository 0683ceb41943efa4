//! The node's verbs on the catalog: take a node name, prove with each heartbeat that it still
//! holds it, release it, and recover the runs an earlier process of the node left running.
//!
//! A name is held under a *generation* (a fencing token): taking it bumps the generation, and a
//! heartbeat or a claim carrying an older generation changes nothing — the process learns that
//! it lost its name. A taker does not trust a pid alone: a holder whose heartbeat went stale
//! while its process exists (stopped, or on another host) is watched for a heartbeat interval
//! first ([`Registration::Watch`]), and taken only if its heartbeat did not move meanwhile.
//!
//! Nodes sharing a catalog watch each other: every heartbeat also renews the leases of the
//! runs the node holds running, and a node whose heartbeat is older than the lease TTL it
//! stated is dead — another node's [`sweep`] fences it (bumps its generation, so that its
//! process, if it was only stopped, finds itself fenced at its next heartbeat and stops) and
//! recovers its runs whose leases expired, by the same rules as a restart's recovery.
//!
//! Recovery counts what it can attribute: a run is marked *suspect* when its node died while it
//! was claimed; a suspect is marked *executing* in the catalog before it starts; each node death
//! during a suspect's execution counts as an attempt, and after `min(max_attempts, 3)` of them
//! the run is quarantined (`dead`), its reason counting those deaths and the first, unblamed
//! one. A run merely buffered when the node died is not blamed.
//!
//! Invariant: like `queue`, every function takes a connection inside the caller's transaction
//! and reads no clock (`now` is an argument).

use rusqlite::{Connection, OptionalExtension, params};

use super::CatalogError;
use super::queue::RECOUNT_IN_PROGRESS;
use super::sql::{Query, Sql};
use super::tree::{self, Ended};
use crate::model::RunStatus;

/// A registration's answer, and the runs recovered when the name was taken over.
pub type Registered = (Registration, Option<Recovery>);

/// Who holds a node name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeHolder {
    /// Its pid.
    pub pid: i64,
    /// Its host.
    pub host: String,
    /// Epoch ms of its last heartbeat.
    pub heartbeat_at: i64,
    /// The generation it holds the name under.
    pub generation: i64,
    /// The node whose sweep fenced this generation, when one did (its heartbeat had stopped
    /// for longer than its lease TTL).
    pub fenced_by: Option<String>,
}

/// A node name held by this process: its row and the generation its heartbeats must carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeLease {
    /// `node.node_id`.
    pub node_id: i64,
    /// The fencing token.
    pub generation: i64,
}

/// What asking for a node name gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Registration {
    /// The name is this process's now.
    Taken(NodeLease),
    /// A live process holds it: its heartbeat is fresh, or it moved while watched.
    Held(NodeHolder),
    /// Its heartbeat is stale but its process may be alive (it exists on this host, or it is on
    /// another): ask again after a heartbeat interval, passing this holder as `watched`.
    Watch(NodeHolder),
}

/// What a process that wants a node name says about itself.
#[derive(Debug, Clone, Copy)]
pub struct Applicant<'a> {
    /// The node name.
    pub name: &'a str,
    /// This host.
    pub host: &'a str,
    /// This process.
    pub pid: i64,
    /// This build's version.
    pub version: &'a str,
    /// How long its heartbeat and its runs' leases hold without a new heartbeat, ms: other
    /// nodes judge it dead by this TTL, not by their own.
    pub lease_ttl_ms: i64,
}

const SELECT_NODE: &str = "SELECT node_id, pid, host, heartbeat_at, generation, fenced_by
    FROM node WHERE node_name = ?1";
const INSERT_NODE: &str = "INSERT INTO node (node_name, host, pid, version, started_at,
    heartbeat_at, generation, lease_ttl) VALUES (?1, ?2, ?3, ?4, ?5, ?5, 1, ?6)";
const TAKE_NODE: &str = "UPDATE node SET host = ?2, pid = ?3, version = ?4, started_at = ?5,
    heartbeat_at = ?5, status = 1, generation = generation + 1, lease_ttl = ?6,
    fenced_at = NULL, fenced_by = NULL WHERE node_id = ?1";

/// Asks for `who.name`. Taken at once when the name is new, released, held by this pid, or held
/// by a process of this host that no longer exists; refused while its holder's heartbeat is
/// fresher than `stale_after_ms` and the holder exists; otherwise watched (see [`Registration`]).
/// `watched` is the holder seen by the previous ask: if nothing moved since, the name is taken.
pub fn register_node(
    conn: &Connection,
    who: &Applicant<'_>,
    now: i64,
    stale_after_ms: i64,
    is_alive: impl Fn(i64) -> bool,
    watched: Option<&NodeHolder>,
) -> Result<Registration, CatalogError> {
    type NodeRow = (
        i64,
        Option<i64>,
        Option<String>,
        Option<i64>,
        i64,
        Option<String>,
    );
    let row: Option<NodeRow> = conn
        .query_row(SELECT_NODE, [who.name], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
            ))
        })
        .optional()?;
    let take = |node_id: i64| -> Result<Registration, CatalogError> {
        conn.execute(
            TAKE_NODE,
            params![
                node_id,
                who.host,
                who.pid,
                who.version,
                now,
                who.lease_ttl_ms
            ],
        )?;
        let generation = conn.query_row(
            "SELECT generation FROM node WHERE node_id = ?1",
            [node_id],
            |r| r.get(0),
        )?;
        Ok(Registration::Taken(NodeLease {
            node_id,
            generation,
        }))
    };
    let Some((node_id, held_pid, held_host, heartbeat, generation, fenced_by)) = row else {
        conn.execute(
            INSERT_NODE,
            params![
                who.name,
                who.host,
                who.pid,
                who.version,
                now,
                who.lease_ttl_ms
            ],
        )?;
        return Ok(Registration::Taken(NodeLease {
            node_id: conn.last_insert_rowid(),
            generation: 1,
        }));
    };
    let holder = match (held_pid, held_host, heartbeat) {
        (Some(pid), Some(host), Some(heartbeat_at)) => Some(NodeHolder {
            pid,
            host,
            heartbeat_at,
            generation,
            fenced_by,
        }),
        _ => None,
    };
    match refusal(holder, who, now, stale_after_ms, is_alive, watched) {
        Some(answer) => Ok(answer),
        None => take(node_id),
    }
}

/// Why `who` may not take a name held by `holder` now (`None`: it may), by
/// [`register_node`]'s rules — both catalogs' one judgement. `holder` is `None` for a name
/// released at a clean stop.
pub(crate) fn refusal(
    holder: Option<NodeHolder>,
    who: &Applicant<'_>,
    now: i64,
    stale_after_ms: i64,
    is_alive: impl Fn(i64) -> bool,
    watched: Option<&NodeHolder>,
) -> Option<Registration> {
    let holder = holder?;
    if holder.host == who.host && (holder.pid == who.pid || !is_alive(holder.pid)) {
        // This process, or a process that is gone (a crash): nothing to wait for.
        return None;
    }
    if now - holder.heartbeat_at < stale_after_ms {
        return Some(Registration::Held(holder));
    }
    match watched {
        Some(seen) if *seen == holder => None,
        Some(_) => Some(Registration::Held(holder)),
        None => Some(Registration::Watch(holder)),
    }
}

const HEARTBEAT: &str = "UPDATE node SET heartbeat_at = ?3 WHERE node_id = ?1 AND generation = ?2";
// Running runs are few: their partial index, scanned whole, finds the node's.
const RENEW_LEASES: &str = "UPDATE job_run INDEXED BY job_run_running_job_idx
    SET lease_until = ?2 WHERE (status = 'claimed' OR status = 'running') AND node_id = ?1
      AND (lease_until IS NULL OR lease_until < ?2)";

/// Refreshes the node's heartbeat if this process still holds the name under `lease`'s
/// generation, and extends the lease of every run it holds running to at least
/// `now + ttl_ms`, so that a long run (one without a timeout) keeps its lease while its node
/// lives. False when another process took the name or a sweep fenced it: nothing is renewed.
pub fn heartbeat(
    conn: &Connection,
    lease: NodeLease,
    now: i64,
    ttl_ms: i64,
) -> Result<bool, CatalogError> {
    let changed =
        conn.prepare_cached(HEARTBEAT)?
            .execute(params![lease.node_id, lease.generation, now])?;
    if changed == 1 {
        conn.prepare_cached(RENEW_LEASES)?
            .execute(params![lease.node_id, now.saturating_add(ttl_ms)])?;
    }
    Ok(changed == 1)
}

/// Fails with [`CatalogError::Fenced`] unless this process still holds its name under `lease`'s
/// generation: the first statement of a claim, so a process that lost its name claims nothing.
pub fn check_fence(conn: &Connection, lease: NodeLease) -> Result<(), CatalogError> {
    let generation: Option<i64> = conn
        .prepare_cached("SELECT generation FROM node WHERE node_id = ?1")?
        .query_row([lease.node_id], |r| r.get(0))
        .optional()?;
    if generation == Some(lease.generation) {
        Ok(())
    } else {
        Err(CatalogError::Fenced {
            node_id: lease.node_id,
            generation: lease.generation,
        })
    }
}

/// Who holds the name of `node_id` now.
pub fn holder(mut c: impl Sql, node_id: i64) -> Result<Option<NodeHolder>, CatalogError> {
    const SELECT: Query = Query::same(
        "SELECT pid, host, heartbeat_at, generation, fenced_by FROM node WHERE node_id = ?1",
    );
    let row = c.row(&SELECT, &[node_id.into()], |r| {
        Ok((
            r.opt_int(0)?,
            r.opt_text(1)?,
            r.opt_int(2)?,
            r.int(3)?,
            r.opt_text(4)?,
        ))
    })?;
    Ok(
        row.and_then(|(pid, host, heartbeat_at, generation, fenced_by)| {
            Some(NodeHolder {
                pid: pid?,
                host: host?,
                heartbeat_at: heartbeat_at?,
                generation,
                fenced_by,
            })
        }),
    )
}

/// Releases the node name at a clean shutdown (only if this process still holds it).
pub fn release_node(mut c: impl Sql, lease: NodeLease) -> Result<(), CatalogError> {
    const RELEASE: Query = Query::same(
        "UPDATE node SET pid = NULL, heartbeat_at = NULL WHERE node_id = ?1 AND generation = ?2",
    );
    c.exec(&RELEASE, &[lease.node_id.into(), lease.generation.into()])?;
    Ok(())
}

/// A node death during a suspect's execution is blamed on the run this many times at most
/// before it is quarantined (fewer when the job's `max_attempts` is lower).
pub const CRASH_LIMIT: i64 = 3;

/// What recovering a node's runs did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Runs put back in the queue, by id.
    pub requeued: Vec<i64>,
    /// Runs quarantined (`dead`): (run id, node deaths during its execution).
    pub quarantined: Vec<(i64, i64)>,
    /// Runs an operator had asked to cancel: recorded `cancelled`, not run again.
    pub cancelled: Vec<i64>,
}

impl Recovery {
    /// Whether it changed no run.
    pub fn is_empty(&self) -> bool {
        self.requeued.is_empty() && self.quarantined.is_empty() && self.cancelled.is_empty()
    }
}

// Running runs are few: the partial index of running runs, scanned whole, finds a node's (all
// of them, or with ?3 those whose lease ended before it). PostgreSQL locks them.
const SELECT_LEFT_RUNNING: Query = Query::each(
    "SELECT r.run_id, r.suspect, r.crashes,
    min(max(j.max_attempts, 1), ?2), r.cancel_requested, r.job_id, r.pid, r.step
    FROM job_run r INDEXED BY job_run_running_job_idx JOIN job j ON j.job_id = r.job_id
    WHERE (r.status = 'claimed' OR r.status = 'running') AND r.node_id = ?1
      -- A run waiting for its children executes nowhere: its tree ends it.
      AND r.own_status IS NULL
      AND (?3 IS NULL OR coalesce(r.lease_until, 0) < ?3) ORDER BY r.run_id",
    // A run's lease on PostgreSQL is the later of its claim's and its node's heartbeat plus
    // the TTL (heartbeats do not renew each run there).
    "SELECT r.run_id, r.suspect, r.crashes,
    LEAST(GREATEST(j.max_attempts, 1), $2), r.cancel_requested, r.job_id, r.pid, r.step
    FROM job_run r JOIN job j ON j.job_id = r.job_id
    WHERE (r.status = 'claimed' OR r.status = 'running') AND r.node_id = $1 AND r.own_status IS NULL
      AND ($3::bigint IS NULL OR (coalesce(r.lease_until, 0) < $3::bigint
           AND coalesce((SELECT n.heartbeat_at + n.lease_ttl FROM node n
                         WHERE n.node_id = $1), 0) < $3::bigint))
    ORDER BY r.run_id FOR UPDATE OF r",
);
const REQUEUE_SUSPECT: Query = Query::same(
    "UPDATE job_run SET status = 'queued', node_id = NULL,
    claim_token = NULL, lease_until = NULL, claimed_at = NULL, started_at = NULL, suspect = 1,
    crashes = ?2, attempt = attempt + ?3 WHERE run_id = ?1",
);
const CANCEL_LEFT: Query = Query::same(
    "UPDATE job_run SET status = 'cancelled', node_id = NULL,
    claim_token = NULL, lease_until = NULL, finished_at = ?2,
    error = 'cancelled by an operator; its node stopped before it could' WHERE run_id = ?1",
);
const QUARANTINE: Query = Query::same(
    "UPDATE job_run SET status = 'dead', node_id = NULL, claim_token = NULL,
    lease_until = NULL, suspect = 1, crashes = ?2, finished_at = ?3, error = ?4
    WHERE run_id = ?1",
);

/// Why a run is quarantined after its node died `crashes` times while it executed. Its node
/// had died once more before those, while it held the run not yet known to execute (a run is
/// suspected, then marked executing before it starts, only after that first death): the
/// reason counts every death an operator saw, and says how many were blamed (issue 27, point
/// 2d: it said 3 after 4 deaths).
pub fn quarantine_reason(crashes: i64) -> String {
    format!(
        "quarantined: the node died {} times while it held this run, {crashes} of them while it ran",
        crashes + 1
    )
}

/// Recovers the runs `node_id` left running (its process crashed or was killed): each goes back
/// to the queue as a suspect, except a suspect the node died while executing for the
/// `min(max_attempts, CRASH_LIMIT)`-th time, which is quarantined. Recounts `in_progress`.
pub fn recover_node_runs(
    conn: &Connection,
    node_id: i64,
    now: i64,
) -> Result<Recovery, CatalogError> {
    let (recovery, _) = recover_runs(conn, node_id, now, None)?;
    conn.execute(RECOUNT_IN_PROGRESS, [])?;
    Ok(recovery)
}

/// Recovers `node_id`'s running runs (with `expired_by`, only those whose lease ended before
/// it) by [`recover_node_runs`]' rules, on either backend; returns the recovery and the job of
/// each run it ended (the caller recounts or tallies the jobs' runs in progress). A run it
/// ends (quarantined, or cancelled as asked) ends in its tree too (`tree::on_end`), so a
/// workflow whose step died skips what follows it and fails, and a parent whose last child
/// this was ends.
pub(crate) fn recover_runs(
    mut c: impl Sql,
    node_id: i64,
    now: i64,
    expired_by: Option<i64>,
) -> Result<(Recovery, Vec<i64>), CatalogError> {
    let left = c.rows(
        &SELECT_LEFT_RUNNING,
        &[node_id.into(), CRASH_LIMIT.into(), expired_by.into()],
        |r| {
            Ok(LeftRunning {
                run_id: r.int(0)?,
                suspect: r.int(1)?,
                crashes: r.int(2)?,
                limit: r.int(3)?,
                cancel_requested: r.flag(4)?,
                job_id: r.int(5)?,
                pid: r.opt_int(6)?,
                step: r.opt_text(7)?,
            })
        },
    )?;
    let mut recovery = Recovery::default();
    let mut jobs = Vec::with_capacity(left.len());
    // A run that did not succeed queues nothing in its tree (only a success advances a
    // workflow): what ending one queues is empty.
    let mut queued = Vec::new();
    for run in left {
        let run_id = run.run_id;
        jobs.push(run.job_id);
        let ended = if run.cancel_requested {
            c.exec(&CANCEL_LEFT, &[run_id.into(), now.into()])?;
            recovery.cancelled.push(run_id);
            RunStatus::Cancelled
        } else {
            // Only a run marked executing (2) was surely executing when its node died.
            let blamed = i64::from(run.suspect >= 2);
            let crashes = run.crashes + blamed;
            if blamed == 1 && crashes >= run.limit {
                let reason = quarantine_reason(crashes);
                c.exec(
                    &QUARANTINE,
                    &[
                        run_id.into(),
                        crashes.into(),
                        now.into(),
                        reason.as_str().into(),
                    ],
                )?;
                recovery.quarantined.push((run_id, crashes));
                RunStatus::Dead
            } else {
                c.exec(
                    &REQUEUE_SUSPECT,
                    &[run_id.into(), crashes.into(), blamed.into()],
                )?;
                recovery.requeued.push(run_id);
                continue;
            }
        };
        // Ended here: its tree hears it as it would hear the node's own completion.
        let end = Ended {
            pid: run.pid,
            step: run.step,
            status: ended,
        };
        tree::on_end(&mut c, end, now, &mut queued)?;
    }
    Ok((recovery, jobs))
}

/// A run a node left running, as its recovery reads it.
struct LeftRunning {
    run_id: i64,
    /// 1: claimed after its node died; 2: marked executing since.
    suspect: i64,
    /// Node deaths during its execution so far.
    crashes: i64,
    /// The deaths after which it is quarantined.
    limit: i64,
    cancel_requested: bool,
    job_id: i64,
    /// Its parent and workflow step, when it is in a tree.
    pid: Option<i64>,
    step: Option<String>,
}

/// A node a sweep found dead, and what the sweep did about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Swept {
    /// `node.node_id`.
    pub node_id: i64,
    /// Its name.
    pub name: String,
    /// Its process as last registered (`None`: it released its name at a clean stop).
    pub pid: Option<i64>,
    /// Its host, likewise.
    pub host: Option<String>,
    /// Epoch ms of its last heartbeat (`None`: released).
    pub heartbeat_at: Option<i64>,
    /// The lease TTL it stated, ms.
    pub lease_ttl: i64,
    /// The generation this sweep fenced (its process's); `None` when it was fenced before or
    /// had released its name.
    pub fenced: Option<i64>,
    /// Its runs whose leases expired: requeued, quarantined or recorded cancelled.
    pub recovery: Recovery,
}

impl Swept {
    /// The `node.sweep` audit row's detail: the dead node as it stood, and its runs.
    pub fn audit_detail(&self) -> serde_json::Value {
        serde_json::json!({
            "pid": self.pid,
            "host": self.host,
            "heartbeat_at": self.heartbeat_at,
            "lease_ttl_ms": self.lease_ttl,
            "fenced_generation": self.fenced,
            "requeued": self.recovery.requeued,
            "quarantined": self.recovery.quarantined,
            "cancelled": self.recovery.cancelled,
        })
    }
}

// Dead: its heartbeat is older than the TTL it stated (or it released its name). Swept when a
// process may still hold its name (not fenced yet), or when runs of it have leases that
// expired (not a run that waits for its children: it executes nowhere, and its tree ends it);
// the runs' partial index is scanned once for all nodes.
const SELECT_DEAD: &str = "SELECT n.node_id, n.node_name, n.pid, n.host, n.heartbeat_at,
    n.lease_ttl, n.generation, n.pid IS NOT NULL AND n.fenced_at IS NULL
    FROM node n WHERE n.node_id <> ?1
      AND (n.heartbeat_at IS NULL OR n.heartbeat_at + n.lease_ttl < ?2)
      AND ((n.pid IS NOT NULL AND n.fenced_at IS NULL) OR n.node_id IN (
          SELECT r.node_id FROM job_run r INDEXED BY job_run_running_job_idx
          WHERE (r.status = 'claimed' OR r.status = 'running') AND r.own_status IS NULL
            AND coalesce(r.lease_until, 0) < ?2))
    ORDER BY n.node_id";
const FENCE_NODE: &str = "UPDATE node SET generation = generation + 1, fenced_at = ?3,
    fenced_by = ?4 WHERE node_id = ?1 AND generation = ?2";

/// One sweep by the node `fence` holds (it must still hold its name, else
/// [`CatalogError::Fenced`]), in the caller's transaction: every other node whose heartbeat is
/// older than its lease TTL is dead — it is fenced if a process may still hold its name (a new
/// generation: a process that was only stopped finds at its next heartbeat that it lost the
/// name, and stops), and its runs whose leases expired are recovered by
/// [`recover_node_runs`]' rules (requeued as suspects, quarantined after their crashes,
/// cancelled when an operator asked). Each swept node gets an audit row naming the sweeper
/// (`node:<name>`, action `node.sweep`) with the runs. Several nodes may sweep at once: the
/// write lock serializes them, and a later one finds nothing left to do.
pub fn sweep(conn: &Connection, fence: NodeLease, now: i64) -> Result<Vec<Swept>, CatalogError> {
    check_fence(conn, fence)?;
    // Each dead node as it stands, with the generation to fence and whether to fence it.
    let dead: Vec<(Swept, i64, bool)> = conn
        .prepare_cached(SELECT_DEAD)?
        .query_map(params![fence.node_id, now], |r| {
            let node = Swept {
                node_id: r.get(0)?,
                name: r.get(1)?,
                pid: r.get(2)?,
                host: r.get(3)?,
                heartbeat_at: r.get(4)?,
                lease_ttl: r.get(5)?,
                fenced: None,
                recovery: Recovery::default(),
            };
            Ok((node, r.get(6)?, r.get(7)?))
        })?
        .collect::<Result<_, _>>()?;
    if dead.is_empty() {
        return Ok(Vec::new());
    }
    let sweeper: String = conn.query_row(
        "SELECT node_name FROM node WHERE node_id = ?1",
        [fence.node_id],
        |r| r.get(0),
    )?;
    let mut swept = Vec::with_capacity(dead.len());
    for (mut node, generation, to_fence) in dead {
        if to_fence {
            let changed = conn.prepare_cached(FENCE_NODE)?.execute(params![
                node.node_id,
                generation,
                now,
                sweeper
            ])?;
            node.fenced = (changed == 1).then_some(generation);
        }
        node.recovery = recover_runs(conn, node.node_id, now, Some(now))?.0;
        let detail = node.audit_detail();
        super::audit_at(
            conn,
            now,
            &format!("node:{sweeper}"),
            "node.sweep",
            &node.name,
            Some(&detail),
        )?;
        swept.push(node);
    }
    if swept.iter().any(|s| !s.recovery.is_empty()) {
        conn.execute(RECOUNT_IN_PROGRESS, [])?;
    }
    Ok(swept)
}

/// Marks a claimed suspect run as executing, just before it starts (see module docs); false
/// when its claim no longer holds.
pub fn mark_executing(
    conn: &Connection,
    run_id: i64,
    claim_token: i64,
    started_at: i64,
) -> Result<bool, CatalogError> {
    let changed = conn
        .prepare_cached(
            "UPDATE job_run SET suspect = 2, status = 'running', started_at = ?3
             WHERE run_id = ?1 AND claim_token = ?2
               AND (status = 'claimed' OR status = 'running')",
        )?
        .execute(params![run_id, claim_token, started_at])?;
    Ok(changed == 1)
}
