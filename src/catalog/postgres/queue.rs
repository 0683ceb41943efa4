//! The queue's verbs on PostgreSQL, with the SQLite catalog's semantics and types
//! (`catalog::queue`): enqueue (a slot once across the fleet, by the unique `(job,
//! scheduled_for)`), claim (priority, then age; `forbid` / `max_overlap` and per-object
//! serialization across nodes; only maintenance jobs while writes are paused; scheduled slots
//! only while the job is active on the claiming node), complete (only with the claim's token;
//! a stale completion is counted on the node; a run in a tree carried out in its tree in the
//! same transaction, the trees' roots locked first), spawn, trigger (a workflow's run starts its
//! tree in the trigger's transaction), and marking a suspect executing.
//!
//! Each verb is one transaction, run by the connection thread again after a lost connection
//! (`Attempt`): a claim whose commit went unanswered first puts back the runs it may have
//! claimed (found by their tokens, drawn from `claim_token_seq` before the commit), and a
//! completion finds a run it already recorded by its token and reports it, uncounted.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use postgres::{Client, Transaction};

use super::{Attempt, PgCatalog, commit, execute, query, query_one, query_opt};
use crate::catalog::CatalogError;
use crate::catalog::audit::audit_in;
use crate::catalog::complete::{Completion, Finishing, JobEnd, Outcome, Recorded, record_end};
use crate::catalog::node::NodeLease;
use crate::catalog::queue::{Claim, ClaimedRun, JobMeta, NewRun, RunStart, job_for_trigger};
use crate::catalog::tree::{self, Queued};
use crate::catalog::verbs::{Triggered, trigger_detail};
use crate::model::RunStatus;

const INSERT_RUN: &str = "INSERT INTO job_run (job_id, processor_id, priority, scheduled_for,
    run_after, params, status, error, created_at, finished_at)
    SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[],
        $6::text[], $7::text[], $8::text[], $9::bigint[], $10::bigint[])
    ON CONFLICT (job_id, scheduled_for) WHERE scheduled_for IS NOT NULL DO NOTHING
    RETURNING run_id, job_id, scheduled_for";

// The columns of a claim's candidates, and what makes a queued run one — `$1` processor, `$2`
// now, `$3` node, `$4` writes paused, `$5` how many, `$6` the jobs blocked: scheduled slots run
// only while the job is active on the claiming node, on-demand runs and retries always; with
// writes paused, only maintenance jobs — in claim order, locked.
macro_rules! candidates {
    (columns) => {
        "SELECT r.run_id, r.job_id, r.params, r.attempt, r.scheduled_for, r.priority, r.suspect,
        r.run_after, r.start_by
    FROM job_run r
    WHERE "
    };
    (rule) => {
        "r.status = 'queued' AND r.processor_id = $1 AND r.run_after <= $2
      AND (r.scheduled_for IS NULL OR r.retry_of IS NOT NULL OR EXISTS (SELECT 1 FROM job_activation a
           WHERE a.job_id = r.job_id AND a.node_id = $3 AND a.state = 'active'))
      AND (NOT $4 OR EXISTS (SELECT 1 FROM job j JOIN job_group g ON g.job_group_id = j.job_group_id
                             WHERE j.job_id = r.job_id AND g.maintenance = 1))
      AND r.job_id <> ALL($6)
    ORDER BY r.priority DESC, r.run_after, r.run_id
    LIMIT $5
    FOR UPDATE OF r SKIP LOCKED"
    };
}
const SELECT_CANDIDATES: &str = concat!(candidates!(columns), candidates!(rule));
// A later pass: SELECT_CANDIDATES among the first $7 due runs of the queue only. Passing over
// the runs of the jobs blocked ($6) row by row read a `forbid` job's whole backlog at every
// claim, its drain slowing as the backlog grew; now a claim reads at most
// [`PAST_BLOCKED`] of them, whatever the backlog.
const SELECT_PAST_BLOCKED: &str = concat!(
    candidates!(columns),
    "r.run_id IN (SELECT q.run_id FROM job_run q
                       WHERE q.status = 'queued' AND q.processor_id = $1 AND q.run_after <= $2
                       ORDER BY q.priority DESC, q.run_after, q.run_id LIMIT $7)
      AND ",
    candidates!(rule)
);
/// How far into the queue a later pass of a claim looks past blocked jobs' runs.
const PAST_BLOCKED: i64 = crate::lease::PAST_BLOCKED as i64;
// What a claim needs of its candidates' jobs, read without a lock: the runs in progress (the
// job's runs begun less those ended on every node) are an estimate here, checked by GRANT.
const SELECT_JOBS: &str = "SELECT j.job_id, j.job_name, t.job_type, j.job_payload,
    j.max_attempts, j.backoff_base, j.backoff_max, j.timeout, j.overlap_policy, j.max_overlap,
    j.runs_begun - coalesce((SELECT sum(e.runs_ended) FROM job_tally e
                             WHERE e.job_id = j.job_id), 0)::bigint,
    coalesce(j.start_within, 0)
    FROM job j JOIN job_type t ON t.job_type_id = j.job_type_id WHERE j.job_id = ANY($1)";
// The last statement of a claim before its commit, so job rows stay locked only for the
// commit: locks the claimed runs' jobs (ascending, so claims never deadlock on them; `NO KEY
// UPDATE`, so runs queued meanwhile, whose foreign key takes `KEY SHARE`, do not wait) and
// grants each at most its cap less its runs in progress, counting the runs begun from the
// latest row and the ends from the statement's snapshot — which may miss an end committed
// meanwhile, so the count errs high, never low, and a cap is never exceeded. Only claims and a
// claim's undoing lock job rows; completions write their own node's `job_tally` row.
const GRANT: &str = "WITH c AS (
        SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[]) AS c(id, n, cap)),
    locked AS (
        SELECT j.job_id, LEAST(c.n, GREATEST(c.cap - (j.runs_begun - coalesce(
            (SELECT sum(e.runs_ended) FROM job_tally e WHERE e.job_id = j.job_id), 0)), 0)
            )::bigint AS granted
        FROM job j JOIN c ON c.id = j.job_id ORDER BY j.job_id FOR NO KEY UPDATE OF j),
    begun AS (
        UPDATE job j SET runs_begun = j.runs_begun + l.granted, last_date_begin = $4
        FROM locked l WHERE j.job_id = l.job_id)
    SELECT job_id, granted FROM locked";
const SELECT_JOB_OBJECTS: &str =
    "SELECT job_id, object_id FROM job_object WHERE job_id = ANY($1) ORDER BY object_id";
const LOCK_OBJECTS: &str = "SELECT object_id FROM object WHERE object_id = ANY($1)
    ORDER BY object_id FOR NO KEY UPDATE";
const BUSY_OBJECTS: &str = "SELECT DISTINCT jo.object_id FROM job_object jo
    JOIN job_run r ON r.job_id = jo.job_id AND (r.status = 'claimed' OR r.status = 'running')
    WHERE jo.object_id = ANY($1)";
// The runs were locked queued by the claim's SELECT_CANDIDATES, so their status needs no
// check here; stating it let the planner scan the whole queue index (see GENERIC_PLANS).
// Claimed, not started: no start time until its processor starts it (MARK_STARTED).
const MARK_CLAIMED: &str = "UPDATE job_run r SET status = 'claimed', node_id = $3,
    claim_token = c.token, claimed_at = $4, started_at = NULL, lease_until = c.lease,
    suspect = LEAST(r.suspect, 1)
    FROM unnest($1::bigint[], $2::bigint[], $5::bigint[]) AS c(id, token, lease)
    WHERE r.run_id = c.id";
// `COLLATE "C"`: found by their ids, not through the partial index of runs in flight.
const MARK_STARTED: &str = "UPDATE job_run r SET status = 'running', started_at = c.at
    FROM unnest($1::bigint[], $2::bigint[], $3::bigint[]) AS c(id, token, at)
    WHERE r.run_id = c.id AND r.claim_token = c.token AND r.status = 'claimed' COLLATE \"C\"";
// Runs marked by a claim beyond what GRANT allowed go back as they were.
const UNMARK: &str = "UPDATE job_run SET status = 'queued', node_id = NULL, claim_token = NULL,
    claimed_at = NULL, started_at = NULL, lease_until = NULL
    WHERE run_id = ANY($1) AND status = 'claimed'";
/// The first statement of a claim's and of a completion's transaction. A batch's runs are
/// found by their ids (an index probe each) whatever the planner believes of the queue and of
/// the running runs: with custom plans it chose from statistics taken when the queue was empty
/// or full — a scan of every queued or running run per batch (or of the table, hashed), 20-70
/// ms a batch of a drain by 3 node processes (`auto_explain`). Generic plans see an array of
/// ids as a few rows, and MARK_RUNNING and FINISH_SUCCEEDED match no partial index.
const GENERIC_PLANS: &str = "SET LOCAL plan_cache_mode = force_generic_plan";
// One index seek per priority present, not a read of every queued run: the queue index orders
// by priority before run_after (as `catalog::queue`'s).
const NEXT_DUE: &str = "WITH RECURSIVE level(priority) AS (
        SELECT max(priority) FROM job_run WHERE status = 'queued' AND processor_id = $1
        UNION ALL
        SELECT (SELECT max(priority) FROM job_run
                WHERE status = 'queued' AND processor_id = $1 AND priority < level.priority)
        FROM level WHERE level.priority IS NOT NULL)
    SELECT min((SELECT min(run_after) FROM job_run
                WHERE status = 'queued' AND processor_id = $1 AND priority = level.priority
                  AND run_after > $2))
    FROM level WHERE level.priority IS NOT NULL";
const TAKE_CLAIM: &str = "SELECT nextval('claim_token_seq')";
/// A claim's runs get the tokens `n * TOKENS_PER_CLAIM + k` for the claim's number `n` from
/// the sequence: unique across the fleet with one sequence call per claim (at most this many
/// runs per claim).
const TOKENS_PER_CLAIM: i64 = 4096;
/// Candidate fetches per claim at most (see [`claim_in`]).
const PASSES: usize = 3;
// Undoes a claim whose commit went unanswered (it may have committed): its runs, found by the
// tokens it drew, go back to the queue as they were.
const UNDO_CLAIM: &str = "WITH undone AS (
        UPDATE job_run SET status = 'queued', node_id = NULL, claim_token = NULL,
            claimed_at = NULL, started_at = NULL, lease_until = NULL
        WHERE claim_token = ANY($1) AND (status = 'claimed' OR status = 'running')
        RETURNING job_id)
    UPDATE job j SET runs_begun = GREATEST(j.runs_begun - u.n, 0)
    FROM (SELECT job_id, count(*) AS n FROM undone GROUP BY job_id) u WHERE j.job_id = u.job_id";

// `COLLATE "C"`: the same equalities, which the partial index of runs in flight does not
// match, so that the runs are found by their ids (see GENERIC_PLANS). A claimed run not yet
// marked started (its start mark waits for a batch) ends with its start time here.
const FINISH_SUCCEEDED: &str = "UPDATE job_run r SET status = 'succeeded', finished_at = c.fin,
    elapsed = c.el, result = c.res, error = NULL, log = c.log, started_at = c.st,
    lease_until = NULL
    FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[], $5::text[], $6::text[],
        $7::bigint[]) AS c(id, token, fin, el, res, log, st)
    WHERE r.run_id = c.id AND r.claim_token = c.token
      AND (r.status = 'running' COLLATE \"C\" OR r.status = 'claimed' COLLATE \"C\")
      AND r.pid IS NULL AND r.children_open = 0 AND r.tree_status IS NULL
    RETURNING r.run_id";
const SELECT_FOR_COMPLETE: &str = "SELECT r.job_id, r.attempt, r.processor_id, r.priority,
    r.params, coalesce(r.retry_of, r.run_id), j.max_attempts, r.pid, r.stump, r.step,
    r.children_open, r.tree_status, r.status, r.claim_token, r.own_status
    FROM job_run r JOIN job j ON j.job_id = r.job_id WHERE r.run_id = $1 FOR UPDATE OF r";
/// Locks, in id order, the roots of the trees the completions `$1` end runs of, before any
/// run of theirs: every change to a tree takes its root first (`catalog::tree`), so two nodes
/// ending the last runs of trees they share never wait for each other in a circle.
const LOCK_TREES: &str = "SELECT run_id FROM job_run WHERE run_id IN (
        SELECT coalesce(stump, run_id) FROM job_run
        WHERE run_id = ANY($1) AND (pid IS NOT NULL OR children_open > 0))
    ORDER BY run_id FOR UPDATE";
/// Adds runs ended to their jobs' tallies on a node, with the latest end (`NULL`s leave it as
/// it was). Rows taken in job order, by the node's completions (and by a sweep of a dead node).
pub(super) const TALLY_ENDS: &str = "INSERT INTO job_tally AS t (job_id, node_id, runs_ended,
        last_date_end, last_elapse, last_response)
    SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[],
        $6::text[])
    ON CONFLICT (job_id, node_id) DO UPDATE SET runs_ended = t.runs_ended + excluded.runs_ended,
        last_date_end = coalesce(excluded.last_date_end, t.last_date_end),
        last_elapse = coalesce(excluded.last_elapse, t.last_elapse),
        last_response = coalesce(excluded.last_response, t.last_response)";
const COUNT_STALE: &str =
    "UPDATE node SET stale_completions = stale_completions + $2 WHERE node_id = $1";

/// What a claim asks for (the SQLite writer's `ClaimRequest`, less its fence: see `node`).
#[derive(Debug, Clone, Copy)]
pub struct PgClaim {
    /// The processor whose runs are claimed.
    pub processor_id: i64,
    /// The claiming node, under the generation it holds its name by: a node whose name was
    /// taken (fenced) claims nothing.
    pub lease: NodeLease,
    /// At most this many runs.
    pub limit: usize,
    /// Epoch ms.
    pub now: i64,
    /// The lease beyond a run's timeout, ms.
    pub lease_ms: i64,
    /// Only maintenance jobs (the node's disk is critical or full).
    pub writes_paused: bool,
}

fn corrupt(what: String) -> CatalogError {
    CatalogError::Corrupt(what)
}

/// Inserts runs in one statement; the id of each, `None` where its slot was already taken (by
/// this node or another).
pub fn enqueue(
    client: &mut Client,
    runs: &[NewRun],
    now: i64,
) -> Result<Vec<Option<i64>>, CatalogError> {
    let mut tx = client.transaction()?;
    let ids = enqueue_in(&mut tx, runs, now)?;
    commit(tx)?;
    Ok(ids)
}

pub(super) fn enqueue_in(
    tx: &mut Transaction<'_>,
    runs: &[NewRun],
    now: i64,
) -> Result<Vec<Option<i64>>, CatalogError> {
    let col = |f: &dyn Fn(&NewRun) -> i64| runs.iter().map(f).collect::<Vec<i64>>();
    let opt = |f: &dyn Fn(&NewRun) -> Option<i64>| runs.iter().map(f).collect::<Vec<_>>();
    let status: Vec<&str> = runs.iter().map(|r| r.status.as_str()).collect();
    let finished: Vec<Option<i64>> = runs
        .iter()
        .map(|r| (r.status == RunStatus::Skipped).then_some(now))
        .collect();
    let params: Vec<Option<&str>> = runs.iter().map(|r| r.params.as_deref()).collect();
    let errors: Vec<Option<&str>> = runs.iter().map(|r| r.error.as_deref()).collect();
    let rows = query(
        tx,
        INSERT_RUN,
        &[
            &col(&|r| r.job_id),
            &col(&|r| r.processor_id),
            &col(&|r| r.priority),
            &opt(&|r| r.scheduled_for),
            &col(&|r| r.run_after),
            &params,
            &status,
            &errors,
            &vec![now; runs.len()],
            &finished,
        ],
    )?;
    // Match the inserted rows back to the runs asked for (a run without a slot never
    // conflicts, so each is one row, in order, among those with its job).
    let mut by_slot: HashMap<(i64, Option<i64>), Vec<i64>> = HashMap::new();
    for r in &rows {
        by_slot
            .entry((r.get(1), r.get(2)))
            .or_default()
            .push(r.get(0));
    }
    for ids in by_slot.values_mut() {
        ids.reverse();
    }
    Ok(runs
        .iter()
        .map(|r| {
            by_slot
                .get_mut(&(r.job_id, r.scheduled_for))
                .and_then(Vec::pop)
        })
        .collect())
}

/// A job of a claim's candidates: what the claim needs of it, its runs running on every node
/// (an estimate until GRANT), and how many of them this claim took.
struct Locked {
    meta: JobMeta,
    running: i64,
    claimed: i64,
}

/// Claims up to `limit` due runs, as `catalog::queue::claim` does on SQLite, in one
/// transaction: the candidates are locked with `SKIP LOCKED` (runs another node is claiming
/// are passed over, not waited for), their written objects' rows locked in id order and the
/// object rule checked against what runs on every node; the overlap rule is applied to an
/// estimate of what runs, then checked at the end under the jobs' locks (GRANT), runs beyond
/// it put back. A first pass fetches `limit` candidates; when some were blocked (their job at its
/// overlap cap, an object busy), up to [`PASSES`] - 1 more fetch past those jobs among the first
/// [`PAST_BLOCKED`] due runs, so a blocked job at the head of the queue neither starves the
/// rest nor makes every claim lock eight times the runs it takes, nor read its whole backlog. `tokens_drawn` holds the tokens of every earlier attempt of this
/// call: once one's commit went unanswered, the runs any of them may have taken are put back
/// first — also when the attempt that put them back was itself aborted (its undo with it), so
/// none stays claimed by a node that never heard of it. Tokens of aborted attempts match
/// nothing (each is drawn once).
fn claim_in(
    client: &mut Client,
    c: PgClaim,
    attempt: Attempt,
    tokens_drawn: &mut Vec<i64>,
) -> Result<Claim, CatalogError> {
    let limit = c.limit.min(TOKENS_PER_CLAIM as usize);
    let mut tx = client.transaction()?;
    tx.batch_execute(GENERIC_PLANS)?;
    super::node::check_fence(&mut tx, c.lease)?;
    if attempt == Attempt::AfterUnansweredCommit && !tokens_drawn.is_empty() {
        execute(&mut tx, UNDO_CLAIM, &[&*tokens_drawn])?;
    }
    let paused = crate::catalog::pause::paused_for_claim(&mut tx, c.processor_id, c.lease.node_id)?;
    if paused.processor {
        // Paused here: nothing is claimed until it is resumed (which notifies the fleet).
        commit(tx)?;
        return Ok(Claim::default());
    }
    let mut claim = Claim::default();
    let mut jobs: HashMap<i64, Locked> = HashMap::new();
    let mut busy: BTreeSet<i64> = BTreeSet::new();
    // Jobs no run of which can be claimed now (at their cap, or an object of theirs busy, or
    // paused on this node).
    let mut blocked_jobs: Vec<i64> = paused.jobs;
    let mut base_token = None;
    for pass in 0..PASSES {
        let want = limit - claim.runs.len();
        let fetch = if pass == 0 { want } else { want * 4 } as i64;
        let (sql, window) = if pass == 0 {
            (SELECT_CANDIDATES, None)
        } else {
            (SELECT_PAST_BLOCKED, Some(PAST_BLOCKED))
        };
        let mut params: Vec<&(dyn postgres::types::ToSql + Sync)> = vec![
            &c.processor_id,
            &c.now,
            &c.lease.node_id,
            &c.writes_paused,
            &fetch,
            &blocked_jobs,
        ];
        if let Some(window) = &window {
            params.push(window);
        }
        let candidates = query(&mut tx, sql, &params)?;
        let new_jobs: Vec<i64> = candidates
            .iter()
            .map(|r| r.get::<_, i64>(1))
            .filter(|j| !jobs.contains_key(j))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        if !new_jobs.is_empty() {
            read_jobs(&mut tx, &new_jobs, &mut jobs, &mut busy)?;
        }
        let first = claim.runs.len();
        let mut leases = Vec::new();
        let mut blocked_here = false;
        for r in &candidates {
            if claim.runs.len() >= limit {
                break;
            }
            let job_id: i64 = r.get(1);
            let Some(locked) = jobs.get_mut(&job_id) else {
                continue;
            };
            let Locked {
                meta,
                running,
                claimed,
            } = locked;
            if *running >= meta.cap || meta.objects.iter().any(|o| busy.contains(o)) {
                claim.blocked = true;
                blocked_here = true;
                if !blocked_jobs.contains(&job_id) {
                    blocked_jobs.push(job_id);
                }
                continue;
            }
            *running += 1;
            *claimed += 1;
            busy.extend(meta.objects.iter().copied());
            let run_id: i64 = r.get(0);
            let [max_attempts, backoff_base, backoff_max, timeout] = meta.nums;
            leases.push(
                c.now
                    .saturating_add(timeout.max(0))
                    .saturating_add(c.lease_ms),
            );
            let params = r
                .get::<_, Option<String>>(2)
                .as_deref()
                .map(serde_json::from_str)
                .transpose()
                .map_err(|_| corrupt(format!("run {run_id}: params")))?;
            claim.runs.push(ClaimedRun {
                run_id,
                claim_token: 0,
                job_id,
                job_name: meta.name.clone(),
                job_type: meta.job_type,
                payload: meta.payload.clone(),
                params,
                attempt: r.get(3),
                max_attempts,
                backoff_base,
                backoff_max,
                timeout,
                scheduled_for: r.get(4),
                priority: r.get(5),
                suspect: r.get::<_, i32>(6) > 0,
                objects: meta.objects.clone(),
                started_at: c.now,
                start_by: meta.start_by(r.get(7), r.get(8)),
            });
        }
        if claim.runs.len() > first {
            // One number from the sequence per claim; its runs' tokens follow it.
            let base = match base_token {
                Some(b) => b,
                None => {
                    let b: i64 = query_one(&mut tx, TAKE_CLAIM, &[])?.get(0);
                    base_token = Some(b * TOKENS_PER_CLAIM);
                    b * TOKENS_PER_CLAIM
                }
            };
            let picked = &mut claim.runs[first..];
            for (k, run) in picked.iter_mut().enumerate() {
                run.claim_token = base + (first + k) as i64;
            }
            let ids: Vec<i64> = picked.iter().map(|r| r.run_id).collect();
            let tokens: Vec<i64> = picked.iter().map(|r| r.claim_token).collect();
            tokens_drawn.extend_from_slice(&tokens);
            // Marked now, or the next pass would fetch them again (this transaction's own
            // locks do not make it skip them).
            let marked = execute(
                &mut tx,
                MARK_CLAIMED,
                &[&ids, &tokens, &c.lease.node_id, &c.now, &leases],
            )?;
            if marked != ids.len() as u64 {
                return Err(corrupt(format!(
                    "a claim marked {marked} of {} queued runs",
                    ids.len()
                )));
            }
        }
        if claim.runs.len() >= limit || !blocked_here || (candidates.len() as i64) < fetch {
            break;
        }
    }
    if claim.runs.len() < limit {
        claim.next_due = query_one(&mut tx, NEXT_DUE, &[&c.processor_id, &c.now])?.get(0);
    }
    grant(&mut tx, &mut claim, &jobs, c.now)?;
    if claim.runs.is_empty() && !claim.blocked {
        // Idle: another node may hold runs it cannot start soon.
        super::node::ask_to_share(&mut tx, c.processor_id, c.lease.node_id, limit, c.now)?;
    }
    commit(tx)?;
    Ok(claim)
}

/// Takes the claimed runs' jobs' locks and their grants (GRANT); the runs of a job beyond its
/// grant (the last claimed, the least urgent) go back to the queue and the claim is marked
/// blocked.
fn grant(
    tx: &mut Transaction<'_>,
    claim: &mut Claim,
    jobs: &HashMap<i64, Locked>,
    now: i64,
) -> Result<(), CatalogError> {
    let mut ids = Vec::new();
    let (mut counts, mut caps) = (Vec::new(), Vec::new());
    for (id, m) in jobs.iter().filter(|(_, m)| m.claimed > 0) {
        ids.push(*id);
        counts.push(m.claimed);
        caps.push(m.meta.cap);
    }
    if ids.is_empty() {
        return Ok(());
    }
    let mut excess: HashMap<i64, i64> = HashMap::new();
    for r in query(tx, GRANT, &[&ids, &counts, &caps, &now])? {
        let (job_id, granted): (i64, i64) = (r.get(0), r.get(1));
        let claimed = jobs.get(&job_id).map_or(0, |m| m.claimed);
        if granted < claimed {
            excess.insert(job_id, claimed - granted);
        }
    }
    if excess.is_empty() {
        return Ok(());
    }
    let mut back = Vec::new();
    for i in (0..claim.runs.len()).rev() {
        if let Some(n) = excess.get_mut(&claim.runs[i].job_id).filter(|n| **n > 0) {
            *n -= 1;
            back.push(claim.runs.remove(i).run_id);
        }
    }
    execute(tx, UNMARK, &[&back])?;
    claim.blocked = true;
    Ok(())
}

/// Reads what a claim needs of each of `job_ids`, locks the rows of the objects they write
/// (ascending) and reads which of those objects a running run writes.
fn read_jobs(
    tx: &mut Transaction<'_>,
    job_ids: &[i64],
    jobs: &mut HashMap<i64, Locked>,
    busy: &mut BTreeSet<i64>,
) -> Result<(), CatalogError> {
    let mut objects_of: HashMap<i64, Vec<i64>> = HashMap::new();
    let mut new_objects = BTreeSet::new();
    for r in query(tx, SELECT_JOB_OBJECTS, &[&job_ids])? {
        objects_of.entry(r.get(0)).or_default().push(r.get(1));
        new_objects.insert(r.get::<_, i64>(1));
    }
    for r in query(tx, SELECT_JOBS, &[&job_ids])? {
        let job_id: i64 = r.get(0);
        let name: String = r.get(1);
        let job_type: String = r.get(2);
        let payload: String = r.get(3);
        let overlap: String = r.get(8);
        let mut meta = JobMeta::parse(
            name,
            &job_type,
            &payload,
            [r.get(4), r.get(5), r.get(6), r.get(7)],
            &overlap,
            r.get(9),
            objects_of.remove(&job_id).unwrap_or_default().into(),
        )?;
        meta.start_within = r.get(11);
        let meta = Locked {
            meta,
            running: r.get(10),
            claimed: 0,
        };
        jobs.insert(job_id, meta);
    }
    if !new_objects.is_empty() {
        let ids: Vec<i64> = new_objects.into_iter().collect();
        query(tx, LOCK_OBJECTS, &[&ids])?;
        busy.extend(
            query(tx, BUSY_OBJECTS, &[&ids])?
                .iter()
                .map(|r| r.get::<_, i64>(0)),
        );
    }
    Ok(())
}

/// Records completions, each only if its claim token still holds; the others are counted on
/// the node as stale. After an unanswered commit, a run already recorded with the token is
/// reported as it was recorded, not counted.
fn complete_in(
    client: &mut Client,
    node_id: i64,
    completions: &[Completion],
    attempt: Attempt,
    queued: &mut Vec<Queued>,
) -> Result<Vec<Recorded>, CatalogError> {
    let mut tx = client.transaction()?;
    tx.batch_execute(GENERIC_PLANS)?;
    let mut ends: BTreeMap<i64, JobEnd> = BTreeMap::new();
    // The plain successes in one statement.
    let plain: Vec<&Completion> = completions
        .iter()
        .filter(|c| matches!(c.outcome, Outcome::Succeeded(_)))
        .collect();
    let mut done: BTreeSet<i64> = BTreeSet::new();
    if !plain.is_empty() {
        let results: Vec<String> = plain
            .iter()
            .map(|c| match &c.outcome {
                Outcome::Succeeded(v) => v.to_string(),
                _ => unreachable!("filtered above"),
            })
            .collect();
        let elapsed: Vec<i64> = plain.iter().map(|c| c.elapsed()).collect();
        let rows = query(
            &mut tx,
            FINISH_SUCCEEDED,
            &[
                &plain.iter().map(|c| c.run_id).collect::<Vec<_>>(),
                &plain.iter().map(|c| c.claim_token).collect::<Vec<_>>(),
                &plain.iter().map(|c| c.finished_at).collect::<Vec<_>>(),
                &elapsed,
                &results,
                &plain.iter().map(|c| c.log.as_deref()).collect::<Vec<_>>(),
                &plain.iter().map(|c| c.started_at).collect::<Vec<_>>(),
            ],
        )?;
        done.extend(rows.iter().map(|r| r.get::<_, i64>(0)));
        for (i, c) in plain.iter().enumerate() {
            if done.contains(&c.run_id) {
                ends.entry(c.job_id).or_default().finished(
                    c.finished_at,
                    elapsed[i],
                    results[i].clone(),
                );
            }
        }
    }
    let others: Vec<i64> = completions
        .iter()
        .map(|c| c.run_id)
        .filter(|id| !done.contains(id))
        .collect();
    if !others.is_empty() {
        query(&mut tx, LOCK_TREES, &[&others])?;
    }
    let mut recorded = Vec::with_capacity(completions.len());
    let mut stale = 0i64;
    for c in completions {
        let r = if done.contains(&c.run_id) {
            Recorded::Done(RunStatus::Succeeded, None)
        } else {
            complete_other(&mut tx, c, &mut ends, attempt, queued)?
        };
        stale += i64::from(r == Recorded::Stale);
        recorded.push(r);
    }
    if !ends.is_empty() {
        let (mut ids, mut ended) = (Vec::new(), Vec::new());
        let (mut at, mut el, mut resp) = (Vec::new(), Vec::new(), Vec::new());
        for (job_id, end) in ends {
            ids.push(job_id);
            ended.push(end.ended);
            let last = end
                .last
                .map(|(t, e, r)| (t, e, r.chars().take(1000).collect::<String>()));
            at.push(last.as_ref().map(|l| l.0));
            el.push(last.as_ref().map(|l| l.1));
            resp.push(last.map(|l| l.2));
        }
        let nodes = vec![node_id; ids.len()];
        execute(
            &mut tx,
            TALLY_ENDS,
            &[&ids, &nodes, &ended, &at, &el, &resp],
        )?;
    }
    if stale > 0 {
        execute(&mut tx, COUNT_STALE, &[&node_id, &stale])?;
    }
    commit(tx)?;
    Ok(recorded)
}

/// Failures, timeouts (with their retry), interruptions, cancellations, runs in trees, and the
/// successes the batched statement did not take (a stale token, or a run already recorded),
/// each recorded by `catalog::complete::record_end` once its claim is checked here: the token
/// must match a run still executing (not one waiting for its children, which keeps its token:
/// see `queue`'s `WAIT_FOR_CHILDREN`).
fn complete_other(
    tx: &mut Transaction<'_>,
    c: &Completion,
    ends: &mut BTreeMap<i64, JobEnd>,
    attempt: Attempt,
    queued: &mut Vec<Queued>,
) -> Result<Recorded, CatalogError> {
    let Some(row) = query_opt(tx, SELECT_FOR_COMPLETE, &[&c.run_id])? else {
        return Ok(Recorded::Stale);
    };
    let status: String = row.get(12);
    let token: Option<i64> = row.get(13);
    let own: Option<String> = row.get(14);
    let in_flight = status == "claimed" || status == "running";
    if token != Some(c.claim_token) || !in_flight || own.is_some() {
        // Recorded by this very completion before a commit that went unanswered (a run that
        // now waits for its children reports how its own execution ended).
        if attempt == Attempt::AfterUnansweredCommit && token == Some(c.claim_token) {
            let ended = own.unwrap_or(status);
            let status = RunStatus::parse(&ended)
                .ok_or_else(|| corrupt(format!("run {}: status {ended}", c.run_id)))?;
            return Ok(Recorded::Done(status, None));
        }
        return Ok(Recorded::Stale);
    }
    let run = Finishing {
        job_id: row.get(0),
        attempt: row.get(1),
        processor_id: row.get(2),
        priority: row.get(3),
        params: row.get(4),
        first_run: row.get(5),
        max_attempts: row.get(6),
        pid: row.get(7),
        stump: row.get(8),
        step: row.get(9),
        children_open: row.get(10),
        tree_status: row.get(11),
    };
    record_end(tx, run, c, ends, queued)
}

/// Queues one on-demand run of `job` per parameter set and one audit row for them, as
/// `catalog::verbs::trigger` does on SQLite: a workflow's runs start their trees at once.
fn trigger_in(
    client: &mut Client,
    job: &str,
    params: &[Option<String>],
    now: i64,
    actor: &str,
    start_within: Option<i64>,
) -> Result<Triggered, CatalogError> {
    let mut tx = client.transaction()?;
    let triggered = trigger_tx(&mut tx, job, params, now, actor)?;
    crate::catalog::waiting::set_start_within(&mut tx, &triggered.run_ids, now, start_within)?;
    commit(tx)?;
    Ok(triggered)
}

/// [`trigger_in`]'s work inside the caller's transaction.
fn trigger_tx(
    tx: &mut postgres::Transaction<'_>,
    job: &str,
    params: &[Option<String>],
    now: i64,
    actor: &str,
) -> Result<Triggered, CatalogError> {
    let target = job_for_trigger(&mut *tx, job)?;
    for p in params {
        target.check_params(p.as_deref())?;
    }
    let runs: Vec<NewRun> = params
        .iter()
        .map(|p| target.run_now(p.clone(), now))
        .collect();
    let run_ids: Vec<i64> = enqueue_in(tx, &runs, now)?
        .into_iter()
        .collect::<Option<_>>()
        .ok_or_else(|| CatalogError::Failed(format!("a run of `{job}` was not inserted")))?;
    let mut also_queued = Vec::new();
    if target.workflow {
        // Each run is a tree's root: it starts at once, queuing its first steps.
        for id in &run_ids {
            tree::start_workflow(&mut *tx, *id, now, &mut also_queued)?;
        }
    }
    audit_in(
        &mut *tx,
        now,
        actor,
        "job.run",
        job,
        Some(&trigger_detail(&run_ids)),
    )?;
    Ok(Triggered {
        run_ids,
        processor_id: target.processor_id,
        priority: target.priority,
        also_queued,
    })
}

/// The key of an inbox file, taken before its run is queued (`0` until then, in the same
/// transaction): of two nodes queueing one file at once, one takes it.
const TAKE_INBOX_KEY: &str = "INSERT INTO inbox_file (inbox_key, run_id, path, source,
    created_at) VALUES ($1, 0, $2, $3, $4) ON CONFLICT (inbox_key) DO NOTHING";
const SET_INBOX_RUN: &str = "UPDATE inbox_file SET run_id = $2 WHERE inbox_key = $1";

impl PgCatalog {
    /// Queues the run of a file an inbox moved into its run's folder, with its key, in one
    /// transaction (see `catalog::inbox`); `Ok(None)` when the key was queued before, by this
    /// node or another.
    pub fn enqueue_inbox_file(
        &self,
        f: crate::catalog::inbox::InboxFile,
        now: i64,
    ) -> Result<Option<Triggered>, CatalogError> {
        self.call(move |client, _| {
            let mut tx = client.transaction()?;
            if tx.execute(TAKE_INBOX_KEY, &[&f.key, &f.path, &f.source, &now])? == 0 {
                return Ok(None);
            }
            let params = crate::catalog::inbox::run_params(&f);
            let actor = format!("inbox:{}", f.inbox);
            let t = trigger_tx(&mut tx, &f.job, &[Some(params)], now, &actor)?;
            tx.execute(SET_INBOX_RUN, &[&f.key, &t.run_ids[0]])?;
            commit(tx)?;
            Ok(Some(t))
        })
    }

    /// Queues one run of `job` per parameter set, now, with one audit row naming `actor`: the
    /// one trigger path, as on SQLite (see `catalog::verbs::trigger`).
    pub fn trigger(
        &self,
        job: &str,
        params: Vec<Option<String>>,
        now: i64,
        actor: &str,
        start_within: Option<i64>,
    ) -> Result<Triggered, CatalogError> {
        let (job, actor) = (job.to_string(), actor.to_string());
        self.call(move |client, _| trigger_in(client, &job, &params, now, &actor, start_within))
    }

    /// Queues `runs` (see [`enqueue`]).
    pub fn enqueue(&self, runs: Vec<NewRun>, now: i64) -> Result<Vec<Option<i64>>, CatalogError> {
        self.call(move |client, _| enqueue(client, &runs, now))
    }

    /// Claims runs for a node (see [`claim_in`]); the runs are `running` for `c.lease`'s node, each
    /// with its own token, leased until `now + timeout + lease_ms`.
    pub fn claim(&self, c: PgClaim) -> Result<Claim, CatalogError> {
        let mut drawn = Vec::new();
        self.call(move |client, attempt| claim_in(client, c, attempt, &mut drawn))
    }

    /// Records completions for `node_id` (see [`complete_in`]).
    pub fn complete(
        &self,
        node_id: i64,
        completions: Vec<Completion>,
    ) -> Result<Vec<Recorded>, CatalogError> {
        Ok(self.complete_batch(node_id, completions)?.0)
    }

    /// [`PgCatalog::complete`], also carrying the completions out in their trees in the same
    /// transaction (as `catalog::complete::complete_batch`): the runs that queued for processors
    /// (a workflow's next steps) come back beside what was recorded, for the caller to wake.
    pub fn complete_batch(
        &self,
        node_id: i64,
        completions: Vec<Completion>,
    ) -> Result<(Vec<Recorded>, Vec<Queued>), CatalogError> {
        self.call(move |client, attempt| {
            // Anew at each attempt: an aborted one queued nothing.
            let mut queued = Vec::new();
            let recorded = complete_in(client, node_id, &completions, attempt, &mut queued)?;
            Ok((recorded, queued))
        })
    }

    /// Queues a child run of the running run `parent`, of `job` with `params`, in its tree (see
    /// `catalog::tree::spawn`), with an audit row naming `actor` when given; the child's id and
    /// the runs queued for processors.
    pub fn spawn(
        &self,
        parent: i64,
        job: String,
        params: Option<String>,
        now: i64,
        actor: Option<String>,
    ) -> Result<(i64, Vec<Queued>), CatalogError> {
        self.call(move |client, _| {
            let mut tx = client.transaction()?;
            let mut queued = Vec::new();
            let id = tree::spawn(&mut tx, parent, &job, params.clone(), now, &mut queued)?;
            if let Some(actor) = &actor {
                let detail = serde_json::json!({ "run_id": id, "parent": parent });
                audit_in(&mut tx, now, actor, "run.spawn", &job, Some(&detail))?;
            }
            commit(tx)?;
            Ok((id, queued))
        })
    }

    /// Marks a claimed suspect executing, just before it starts; false when its claim no
    /// longer holds.
    pub fn mark_executing(
        &self,
        run_id: i64,
        claim_token: i64,
        started_at: i64,
    ) -> Result<bool, CatalogError> {
        self.call(move |client, _| {
            Ok(client.execute(
                "UPDATE job_run SET suspect = 2, status = 'running', started_at = $3
                 WHERE run_id = $1 AND claim_token = $2
                   AND (status = 'claimed' OR status = 'running')",
                &[&run_id, &claim_token, &started_at],
            )? == 1)
        })
    }

    /// Marks claimed runs `running` with their start times (see `queue::mark_started`).
    pub fn mark_started(&self, starts: Vec<RunStart>) -> Result<usize, CatalogError> {
        let ids: Vec<i64> = starts.iter().map(|s| s.run_id).collect();
        let tokens: Vec<i64> = starts.iter().map(|s| s.claim_token).collect();
        let ats: Vec<i64> = starts.iter().map(|s| s.started_at).collect();
        self.call(move |client, _| {
            let mut tx = client.transaction()?;
            tx.batch_execute(GENERIC_PLANS)?;
            let marked = execute(&mut tx, MARK_STARTED, &[&ids, &tokens, &ats])?;
            tx.commit()?;
            Ok(marked as usize)
        })
    }
}
