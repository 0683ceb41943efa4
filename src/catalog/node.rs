//! The node's verbs on the catalog: take a node name, prove with each heartbeat that it still
//! holds it, release it, and recover the runs an earlier process of the node left running.
//!
//! A name is held under a *generation* (a fencing token): taking it bumps the generation, and a
//! heartbeat or a claim carrying an older generation changes nothing — the process learns that
//! it lost its name. A taker does not trust a pid alone: a holder whose heartbeat went stale
//! while its process exists (stopped, or on another host) is watched for a heartbeat interval
//! first ([`Registration::Watch`]), and taken only if its heartbeat did not move meanwhile.
//!
//! Recovery counts what it can attribute: a run is marked *suspect* when its node died while it
//! was claimed; a suspect is marked *executing* in the catalog before it starts; each node death
//! during a suspect's execution counts as an attempt, and after `min(max_attempts, 3)` of them
//! the run is quarantined (`dead`). A run merely buffered when the node died is not blamed.
//!
//! Invariant: like `queue`, every function takes a connection inside the caller's transaction
//! and reads no clock (`now` is an argument).

use rusqlite::{Connection, OptionalExtension, params};

use super::CatalogError;
use super::queue::RECOUNT_IN_PROGRESS;

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
}

const SELECT_NODE: &str =
    "SELECT node_id, pid, host, heartbeat_at, generation FROM node WHERE node_name = ?1";
const INSERT_NODE: &str =
    "INSERT INTO node (node_name, host, pid, version, started_at, heartbeat_at, generation)
    VALUES (?1, ?2, ?3, ?4, ?5, ?5, 1)";
const TAKE_NODE: &str = "UPDATE node SET host = ?2, pid = ?3, version = ?4, started_at = ?5,
    heartbeat_at = ?5, status = 1, generation = generation + 1 WHERE node_id = ?1";

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
    type NodeRow = (i64, Option<i64>, Option<String>, Option<i64>, i64);
    let row: Option<NodeRow> = conn
        .query_row(SELECT_NODE, [who.name], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .optional()?;
    let take = |node_id: i64| -> Result<Registration, CatalogError> {
        conn.execute(
            TAKE_NODE,
            params![node_id, who.host, who.pid, who.version, now],
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
    let Some((node_id, held_pid, held_host, heartbeat, generation)) = row else {
        conn.execute(
            INSERT_NODE,
            params![who.name, who.host, who.pid, who.version, now],
        )?;
        return Ok(Registration::Taken(NodeLease {
            node_id: conn.last_insert_rowid(),
            generation: 1,
        }));
    };
    let (Some(pid), Some(host), Some(heartbeat_at)) = (held_pid, held_host, heartbeat) else {
        // Released at a clean stop.
        return take(node_id);
    };
    let holder = NodeHolder {
        pid,
        host,
        heartbeat_at,
        generation,
    };
    let here = holder.host == who.host;
    if here && (holder.pid == who.pid || !is_alive(holder.pid)) {
        // This process, or a process that is gone (a crash): nothing to wait for.
        return take(node_id);
    }
    if now - holder.heartbeat_at < stale_after_ms {
        return Ok(Registration::Held(holder));
    }
    match watched {
        Some(seen) if *seen == holder => take(node_id),
        Some(_) => Ok(Registration::Held(holder)),
        None => Ok(Registration::Watch(holder)),
    }
}

/// Refreshes the node's heartbeat if this process still holds the name under `lease`'s
/// generation; false when another process took it.
pub fn heartbeat(conn: &Connection, lease: NodeLease, now: i64) -> Result<bool, CatalogError> {
    let changed = conn
        .prepare_cached("UPDATE node SET heartbeat_at = ?3 WHERE node_id = ?1 AND generation = ?2")?
        .execute(params![lease.node_id, lease.generation, now])?;
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
pub fn holder(conn: &Connection, node_id: i64) -> Result<Option<NodeHolder>, CatalogError> {
    type Row = (Option<i64>, Option<String>, Option<i64>, i64);
    let row: Option<Row> = conn
        .query_row(
            "SELECT pid, host, heartbeat_at, generation FROM node WHERE node_id = ?1",
            [node_id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .optional()?;
    Ok(row.and_then(|(pid, host, heartbeat_at, generation)| {
        Some(NodeHolder {
            pid: pid?,
            host: host?,
            heartbeat_at: heartbeat_at?,
            generation,
        })
    }))
}

/// Releases the node name at a clean shutdown (only if this process still holds it).
pub fn release_node(conn: &Connection, lease: NodeLease) -> Result<(), CatalogError> {
    conn.execute(
        "UPDATE node SET pid = NULL, heartbeat_at = NULL WHERE node_id = ?1 AND generation = ?2",
        params![lease.node_id, lease.generation],
    )?;
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

// Running runs are few: the partial index of running runs, scanned whole, finds a node's.
const SELECT_LEFT_RUNNING: &str = "SELECT r.run_id, r.suspect, r.crashes,
    min(max(j.max_attempts, 1), ?2), r.cancel_requested
    FROM job_run r INDEXED BY job_run_running_job_idx JOIN job j ON j.job_id = r.job_id
    WHERE r.status = 'running' AND r.node_id = ?1
      -- A run waiting for its children executes nowhere: its tree ends it.
      AND r.own_status IS NULL ORDER BY r.run_id";
const REQUEUE_SUSPECT: &str = "UPDATE job_run SET status = 'queued', node_id = NULL,
    claim_token = NULL, lease_until = NULL, started_at = NULL, suspect = 1,
    crashes = ?2, attempt = attempt + ?3 WHERE run_id = ?1";
const CANCEL_LEFT: &str = "UPDATE job_run SET status = 'cancelled', node_id = NULL,
    claim_token = NULL, lease_until = NULL, finished_at = ?2,
    error = 'cancelled by an operator; its node stopped before it could' WHERE run_id = ?1";
const QUARANTINE: &str = "UPDATE job_run SET status = 'dead', node_id = NULL, claim_token = NULL,
    lease_until = NULL, suspect = 1, crashes = ?2, finished_at = ?3,
    error = 'quarantined: the node died while it ran ' || ?2 || ' times' WHERE run_id = ?1";

/// Recovers the runs `node_id` left running (its process crashed or was killed): each goes back
/// to the queue as a suspect, except a suspect the node died while executing for the
/// `min(max_attempts, CRASH_LIMIT)`-th time, which is quarantined. Recounts `in_progress`.
pub fn recover_node_runs(
    conn: &Connection,
    node_id: i64,
    now: i64,
) -> Result<Recovery, CatalogError> {
    let left: Vec<(i64, i64, i64, i64, bool)> = conn
        .prepare_cached(SELECT_LEFT_RUNNING)?
        .query_map(params![node_id, CRASH_LIMIT], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })?
        .collect::<Result<_, _>>()?;
    let mut recovery = Recovery::default();
    for (run_id, suspect, crashes, limit, cancel_requested) in left {
        if cancel_requested {
            conn.prepare_cached(CANCEL_LEFT)?
                .execute(params![run_id, now])?;
            recovery.cancelled.push(run_id);
            continue;
        }
        // Only a run marked executing (2) was surely executing when its node died.
        let blamed = i64::from(suspect >= 2);
        let crashes = crashes + blamed;
        if blamed == 1 && crashes >= limit {
            conn.prepare_cached(QUARANTINE)?
                .execute(params![run_id, crashes, now])?;
            recovery.quarantined.push((run_id, crashes));
        } else {
            conn.prepare_cached(REQUEUE_SUSPECT)?
                .execute(params![run_id, crashes, blamed])?;
            recovery.requeued.push(run_id);
        }
    }
    conn.execute(RECOUNT_IN_PROGRESS, [])?;
    Ok(recovery)
}

/// Marks a claimed suspect run as executing, just before it starts (see module docs); false
/// when its claim no longer holds.
pub fn mark_executing(
    conn: &Connection,
    run_id: i64,
    claim_token: i64,
) -> Result<bool, CatalogError> {
    let changed = conn
        .prepare_cached(
            "UPDATE job_run SET suspect = 2
             WHERE run_id = ?1 AND claim_token = ?2 AND status = 'running'",
        )?
        .execute(params![run_id, claim_token])?;
    Ok(changed == 1)
}
