//! The node registry on PostgreSQL, with the SQLite catalog's rules (`catalog::node`): a node
//! name taken under a generation (the fencing token), heartbeats, a check of the fence before
//! a claim, and the sweep by which any live node fences a dead one (heartbeat older than the
//! TTL it stated) and returns its expired runs to the queue — as suspects, the attempt counted
//! when the run was surely executing, quarantined after `min(max_attempts, 3)` such deaths,
//! recorded cancelled when an operator had asked. Sweepers lock the dead node's row (`SKIP
//! LOCKED`), so two never sweep one node at once and a later one finds nothing left.
//!
//! A heartbeat writes the node's row only: a run's lease is the later of its claim's
//! (`lease_until`: the claim's time, the job's timeout and the TTL) and its node's heartbeat
//! plus the TTL. The SQLite catalog's heartbeat renews `lease_until` on each running run
//! instead, which here rewrote every one of them (a new row version and an entry in each
//! index): 65 ms a heartbeat, on the claims' connection, with a node holding its claimed
//! runs of a drain. Both say the same of a dead node — its heartbeat plus the TTL has passed,
//! so a run's lease ended when its claim's did.

use postgres::Client;

use super::{PgCatalog, commit, execute, query_opt};
use crate::catalog::CatalogError;
use crate::catalog::node::{
    Applicant, NodeHolder, NodeLease, Recovery, Registration, Swept, recover_runs, refusal,
};
use crate::catalog::sharing::{self, GiveBack};

const SELECT_NODE: &str = "SELECT node_id, pid, host, heartbeat_at, generation, fenced_by
    FROM node WHERE node_name = $1 FOR UPDATE";
const INSERT_NODE: &str = "INSERT INTO node (node_name, host, pid, version, started_at,
    heartbeat_at, generation, lease_ttl) VALUES ($1, $2, $3, $4, $5, $5, 1, $6)
    ON CONFLICT (node_name) DO NOTHING RETURNING node_id";
const TAKE_NODE: &str = "UPDATE node SET host = $2, pid = $3, version = $4, started_at = $5,
    heartbeat_at = $5, status = 1, generation = generation + 1, lease_ttl = $6,
    fenced_at = NULL, fenced_by = NULL WHERE node_id = $1 RETURNING generation";
const SELECT_GENERATION: &str = "SELECT generation FROM node WHERE node_id = $1";
const HEARTBEAT: &str = "UPDATE node SET heartbeat_at = $3 WHERE node_id = $1 AND generation = $2";
// A dead node's heartbeat plus its TTL has passed, so the leases of its runs are their claims'.
const SELECT_DEAD: &str = "SELECT n.node_id, n.node_name, n.pid, n.host, n.heartbeat_at,
    n.lease_ttl, n.generation, n.pid IS NOT NULL AND n.fenced_at IS NULL
    FROM node n WHERE n.node_id <> $1
      AND (n.heartbeat_at IS NULL OR n.heartbeat_at + n.lease_ttl < $2)
      AND ((n.pid IS NOT NULL AND n.fenced_at IS NULL) OR EXISTS (
          SELECT 1 FROM job_run r WHERE (r.status = 'claimed' OR r.status = 'running') AND r.node_id = n.node_id
            AND r.own_status IS NULL AND coalesce(r.lease_until, 0) < $2))
    ORDER BY n.node_id FOR UPDATE OF n SKIP LOCKED";
const FENCE_NODE: &str = "UPDATE node SET generation = generation + 1, fenced_at = $3,
    fenced_by = $4 WHERE node_id = $1 AND generation = $2";
/// Locks, in id order, the roots of the trees of the runs the nodes `$1` left running (with
/// `$2`, those whose lease ended before it), before their recovery locks the runs: every change
/// to a tree takes its root first (`catalog::tree`).
const LOCK_LEFT_TREES: &str = "SELECT run_id FROM job_run WHERE run_id IN (
        SELECT coalesce(stump, run_id) FROM job_run
        WHERE (status = 'claimed' OR status = 'running') AND node_id = ANY($1) AND own_status IS NULL
          AND pid IS NOT NULL AND ($2::bigint IS NULL OR coalesce(lease_until, 0) < $2::bigint))
    ORDER BY run_id FOR UPDATE";
const AUDIT: &str =
    "INSERT INTO audit (at, actor, action, subject, detail) VALUES ($1, $2, $3, $4, $5)";

const LONGEST_TAIL: &str = "SELECT r.node_id, (count(*) - coalesce(
        (SELECT a.instances FROM processor_activation a
         WHERE a.processor_id = $1 AND a.node_id = r.node_id),
        (SELECT p.instances FROM job_processor p WHERE p.processor_id = $1)))::bigint AS tail
    FROM job_run r JOIN node n ON n.node_id = r.node_id
    WHERE (r.status = 'claimed' OR r.status = 'running') AND r.processor_id = $1 AND r.node_id <> $2
      AND r.own_status IS NULL AND r.pid IS NULL
      AND n.fenced_at IS NULL AND n.heartbeat_at + n.lease_ttl >= $3
    GROUP BY r.node_id ORDER BY tail DESC, r.node_id LIMIT 1";
const ASK_GIVE_BACK: &str = "INSERT INTO give_back (processor_id, node_id, runs, asked_by,
    asked_at) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (processor_id, node_id) DO NOTHING";
const TAKE_GIVE_BACK: &str =
    "DELETE FROM give_back WHERE node_id = $1 RETURNING processor_id, runs";

/// After an empty claim: asks the live node with the longest unstarted tail of the processor
/// for runs, by `catalog::sharing::ask`'s rules.
pub(super) fn ask_to_share(
    tx: &mut postgres::Transaction<'_>,
    processor_id: i64,
    node_id: i64,
    free: usize,
    now: i64,
) -> Result<(), CatalogError> {
    let Some(row) = super::query_opt(tx, LONGEST_TAIL, &[&processor_id, &node_id, &now])? else {
        return Ok(());
    };
    let (victim, tail): (i64, i64) = (row.get(0), row.get(1));
    if let Some(runs) = sharing::asked(tail, free) {
        execute(
            tx,
            ASK_GIVE_BACK,
            &[&processor_id, &victim, &runs, &node_id, &now],
        )?;
    }
    Ok(())
}

/// A registration, and when the name was taken from an earlier process of the node, what
/// recovering the runs it left running did.
pub use crate::catalog::node::Registered;

/// Asks for `who.name`, by `catalog::node::register_node`'s rules (and `try_take_node_name`'s:
/// a name taken over recovers its earlier process's runs in the same transaction).
fn register(
    client: &mut Client,
    who: &Applicant<'_>,
    now: i64,
    stale_after_ms: i64,
    is_alive: &dyn Fn(i64) -> bool,
    watched: Option<&NodeHolder>,
) -> Result<Registered, CatalogError> {
    let mut tx = client.transaction()?;
    let args = (who.host, who.pid, who.version, now, who.lease_ttl_ms);
    if let Some(r) = tx.query_opt(
        INSERT_NODE,
        &[&who.name, &args.0, &args.1, &args.2, &args.3, &args.4],
    )? {
        commit(tx)?;
        let lease = NodeLease {
            node_id: r.get(0),
            generation: 1,
        };
        return Ok((Registration::Taken(lease), None));
    }
    let row = tx.query_one(SELECT_NODE, &[&who.name])?;
    let node_id: i64 = row.get(0);
    // Taken: the runs an earlier process of the node left running are recovered with it.
    let take = |tx: postgres::Transaction<'_>| -> Result<Registered, CatalogError> {
        let mut tx = tx;
        let generation = tx
            .query_one(
                TAKE_NODE,
                &[&node_id, &args.0, &args.1, &args.2, &args.3, &args.4],
            )?
            .get(0);
        tx.execute(LOCK_LEFT_TREES, &[&vec![node_id], &None::<i64>])?;
        let (recovery, jobs) = recover_runs(&mut tx, node_id, now, None)?;
        let mut ended = std::collections::BTreeMap::new();
        for job_id in jobs {
            *ended.entry((job_id, node_id)).or_default() += 1;
        }
        tally_recovered(&mut tx, ended)?;
        commit(tx)?;
        let lease = NodeLease {
            node_id,
            generation,
        };
        Ok((Registration::Taken(lease), Some(recovery)))
    };
    let holder = match (
        row.get::<_, Option<i64>>(1),
        row.get::<_, Option<String>>(2),
        row.get::<_, Option<i64>>(3),
    ) {
        (Some(pid), Some(host), Some(heartbeat_at)) => Some(NodeHolder {
            pid,
            host,
            heartbeat_at,
            generation: row.get(4),
            fenced_by: row.get(5),
        }),
        _ => None,
    };
    match refusal(holder, who, now, stale_after_ms, is_alive, watched) {
        Some(answer) => {
            commit(tx)?;
            Ok((answer, None))
        }
        None => take(tx),
    }
}

/// Fails with [`CatalogError::Fenced`] unless `lease` still holds its name.
pub(super) fn check_fence(
    tx: &mut postgres::Transaction<'_>,
    lease: NodeLease,
) -> Result<(), CatalogError> {
    let generation: Option<i64> =
        query_opt(tx, SELECT_GENERATION, &[&lease.node_id])?.map(|r| r.get(0));
    if generation == Some(lease.generation) {
        Ok(())
    } else {
        Err(CatalogError::Fenced {
            node_id: lease.node_id,
            generation: lease.generation,
        })
    }
}

/// One sweep by the node `fence` holds, by `catalog::node::sweep`'s rules.
fn sweep(client: &mut Client, fence: NodeLease, now: i64) -> Result<Vec<Swept>, CatalogError> {
    let mut tx = client.transaction()?;
    check_fence(&mut tx, fence)?;
    let dead = tx.query(SELECT_DEAD, &[&fence.node_id, &now])?;
    if dead.is_empty() {
        commit(tx)?;
        return Ok(Vec::new());
    }
    let sweeper: String = tx
        .query_one(
            "SELECT node_name FROM node WHERE node_id = $1",
            &[&fence.node_id],
        )?
        .get(0);
    let dead_ids: Vec<i64> = dead.iter().map(|r| r.get(0)).collect();
    tx.execute(LOCK_LEFT_TREES, &[&dead_ids, &Some(now)])?;
    let mut swept = Vec::with_capacity(dead.len());
    // Runs ended per (job, dead node), for the job tallies.
    let mut ended: std::collections::BTreeMap<(i64, i64), i64> = Default::default();
    for r in dead {
        let mut node = Swept {
            node_id: r.get(0),
            name: r.get(1),
            pid: r.get(2),
            host: r.get(3),
            heartbeat_at: r.get(4),
            lease_ttl: r.get(5),
            fenced: None,
            recovery: Recovery::default(),
        };
        let generation: i64 = r.get(6);
        if r.get::<_, bool>(7) {
            let changed = tx.execute(FENCE_NODE, &[&node.node_id, &generation, &now, &sweeper])?;
            node.fenced = (changed == 1).then_some(generation);
        }
        let (recovery, jobs) = recover_runs(&mut tx, node.node_id, now, Some(now))?;
        node.recovery = recovery;
        for job_id in jobs {
            *ended.entry((job_id, node.node_id)).or_default() += 1;
        }
        let detail = node.audit_detail().to_string();
        tx.execute(
            AUDIT,
            &[
                &now,
                &format!("node:{sweeper}"),
                &"node.sweep",
                &node.name,
                &detail,
            ],
        )?;
        swept.push(node);
    }
    tally_recovered(&mut tx, ended)?;
    commit(tx)?;
    Ok(swept)
}

/// Counts the runs a recovery ended on their jobs' tallies (per job and node, in job order),
/// and tells idle processors on every node to claim the requeued ones.
pub(super) fn tally_recovered(
    tx: &mut postgres::Transaction<'_>,
    ended: std::collections::BTreeMap<(i64, i64), i64>,
) -> Result<(), CatalogError> {
    if ended.is_empty() {
        return Ok(());
    }
    let (keys, counts): (Vec<(i64, i64)>, Vec<i64>) = ended.into_iter().unzip();
    let (jobs, nodes): (Vec<i64>, Vec<i64>) = keys.into_iter().unzip();
    let none = vec![None::<i64>; jobs.len()];
    let no_text = vec![None::<String>; jobs.len()];
    execute(
        tx,
        super::queue::TALLY_ENDS,
        &[&jobs, &nodes, &counts, &none, &none, &no_text],
    )?;
    tx.execute("SELECT pg_notify('jobvisor_queue', 'requeued')", &[])?;
    Ok(())
}

/// A request for a node name (see [`PgCatalog::try_take_node_name`]).
#[derive(Debug, Clone)]
pub struct TakeName {
    /// The name.
    pub name: String,
    /// This host.
    pub host: String,
    /// This process.
    pub pid: i64,
    /// The lease TTL this process states.
    pub lease_ttl_ms: i64,
    /// Epoch ms now.
    pub now: i64,
    /// A holder's heartbeat older than this is stale.
    pub stale_after_ms: i64,
    /// The stale holder watched since the last ask, if any.
    pub watched: Option<NodeHolder>,
}

impl PgCatalog {
    /// Asks for a node name (see `catalog::node::register_node`), a holder stale after
    /// `lease_ttl_ms`; `is_alive` tells whether a process of this host exists.
    pub fn register_node(
        &self,
        name: String,
        host: String,
        pid: i64,
        lease_ttl_ms: i64,
        now: i64,
        is_alive: fn(i64) -> bool,
    ) -> Result<Registered, CatalogError> {
        let take = TakeName {
            name,
            host,
            pid,
            lease_ttl_ms,
            now,
            stale_after_ms: lease_ttl_ms,
            watched: None,
        };
        self.try_take_node_name(take, is_alive)
    }

    /// Asks for a node name by `Catalog::try_take_node_name`'s rules: a holder whose heartbeat
    /// is older than `stale_after_ms` and whose process may be alive is watched first (the
    /// answer is `Watch`), and taken when asked again with it as `watched`.
    pub fn try_take_node_name(
        &self,
        take: TakeName,
        is_alive: fn(i64) -> bool,
    ) -> Result<Registered, CatalogError> {
        self.call(move |client, _| {
            let who = Applicant {
                name: &take.name,
                host: &take.host,
                pid: take.pid,
                version: env!("CARGO_PKG_VERSION"),
                lease_ttl_ms: take.lease_ttl_ms,
            };
            register(
                client,
                &who,
                take.now,
                take.stale_after_ms,
                &is_alive,
                take.watched.as_ref(),
            )
        })
    }

    /// Refreshes the node's heartbeat under `lease` — which renews the leases of its running
    /// runs, each the later of its claim's and the heartbeat plus the TTL the node stated —
    /// and takes the requests of idle nodes to give runs back (`catalog::sharing`); `None`
    /// when the name was taken or fenced (nothing renewed).
    pub fn heartbeat(
        &self,
        lease: NodeLease,
        now: i64,
    ) -> Result<Option<Vec<GiveBack>>, CatalogError> {
        self.call(move |client, _| {
            let mut tx = client.transaction()?;
            let held = execute(
                &mut tx,
                HEARTBEAT,
                &[&lease.node_id, &lease.generation, &now],
            )? == 1;
            let mut asks = None;
            if held {
                let taken = super::query(&mut tx, TAKE_GIVE_BACK, &[&lease.node_id])?;
                asks = Some(
                    taken
                        .iter()
                        .map(|r| GiveBack {
                            processor_id: r.get(0),
                            runs: r.get::<_, i64>(1).max(0) as usize,
                        })
                        .collect(),
                );
            }
            commit(tx)?;
            Ok(asks)
        })
    }

    /// Gives the node name up at a clean stop (if `lease` still holds it): the next process
    /// of the node takes it at once.
    pub fn release_node(&self, lease: NodeLease) -> Result<(), CatalogError> {
        self.call(move |client, _| {
            let mut tx = client.transaction()?;
            crate::catalog::node::release_node(&mut tx, lease)?;
            commit(tx)
        })
    }

    /// One sweep of the dead nodes by the node `fence` holds (see [`sweep`]).
    pub fn sweep(&self, fence: NodeLease, now: i64) -> Result<Vec<Swept>, CatalogError> {
        self.call(move |client, _| sweep(client, fence, now))
    }

    /// Who holds the name of `node_id` now (after a heartbeat found it lost).
    pub fn holder(&self, node_id: i64) -> Result<Option<NodeHolder>, CatalogError> {
        self.transact(move |tx| crate::catalog::node::holder(tx, node_id))
    }

    /// The stale completions counted on a node.
    pub fn stale_completions(&self, node_id: i64) -> Result<i64, CatalogError> {
        self.call(move |client, _| {
            Ok(client
                .query_one(
                    "SELECT stale_completions FROM node WHERE node_id = $1",
                    &[&node_id],
                )?
                .get(0))
        })
    }
}
