//! The runtime's verbs on the queue: enqueue slots, count what is in flight, claim runs (their
//! ends are recorded by `complete`; what it loads to plan is in `loads`, its upkeep — stats,
//! stuck runs, pruning — in `upkeep`, taking a node name and recovering its runs in `node`).
//!
//! Invariant: every function here takes a connection already inside the writer's transaction
//! (or a read connection), never opens one, and reads no clock: `now` is an
//! argument. A claim hands each run a token no other claim of any process gets.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::sync::Arc;

use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value as Json;

use super::CatalogError;
use super::sql::{Query, Sql};
use crate::model::{JobType, RunStatus};
use crate::schedule::OverlapPolicy;

/// Recounts every job's runs in progress from the run states (after a recovery or a reset): the
/// runs executing, not those waiting for their children (`tree`).
pub(crate) const RECOUNT_IN_PROGRESS: &str =
    "UPDATE job SET in_progress = (SELECT count(*) FROM job_run r
    WHERE r.job_id = job.job_id AND (r.status = 'claimed' OR r.status = 'running') AND r.own_status IS NULL)";

/// A run to insert.
#[derive(Debug, Clone)]
pub struct NewRun {
    /// The job.
    pub job_id: i64,
    /// Its processor.
    pub processor_id: i64,
    /// Claim order.
    pub priority: i64,
    /// The slot, for scheduled runs.
    pub scheduled_for: Option<i64>,
    /// Not claimable before.
    pub run_after: i64,
    /// Parameters (JSON text).
    pub params: Option<String>,
    /// `queued`, or `skipped` with `error` saying why.
    pub status: RunStatus,
    /// The skip reason.
    pub error: Option<String>,
}

const COUNT_RUNNING: &str = "SELECT count(*) FROM job_run INDEXED BY job_run_running_job_idx
    WHERE job_id = ?1 AND (status = 'claimed' OR status = 'running')";
const COUNT_QUEUED_SLOTS: &str = "SELECT count(*) FROM job_run INDEXED BY job_run_queued_slot_idx
    WHERE job_id = ?1 AND status = 'queued' AND scheduled_for IS NOT NULL";

/// A job's runs in flight, as the overlap policy counts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct InFlight {
    /// Runs executing, on any node.
    pub running: i64,
    /// Slot runs waiting in the queue (manual runs and retries do not hold a slot back).
    pub queued_slots: i64,
}

/// What is in flight for `job_id` now; both answers come from small partial indexes.
pub fn in_flight(conn: &Connection, job_id: i64) -> Result<InFlight, CatalogError> {
    let running = conn
        .prepare_cached(COUNT_RUNNING)?
        .query_row([job_id], |r| r.get(0))?;
    let queued_slots = conn
        .prepare_cached(COUNT_QUEUED_SLOTS)?
        .query_row([job_id], |r| r.get(0))?;
    Ok(InFlight {
        running,
        queued_slots,
    })
}

// Newest first through the (job_id, run_id) index; queued, running, skipped and cancelled runs
// neither end nor extend a streak.
const SELECT_RECENT_ENDS: &str = "SELECT status, finished_at FROM job_run
    WHERE job_id = ?1 AND finished_at IS NOT NULL
      AND (status = 'succeeded' OR status = 'failed' OR status = 'timed_out' OR status = 'dead')
    ORDER BY run_id DESC LIMIT 64";

/// The job's consecutive failed runs (failed, timed out, dead) since its last success, and
/// when the latest ended: what its backoff is computed from.
pub fn failure_streak(
    mut c: impl Sql,
    job_id: i64,
) -> Result<crate::schedule::FailureStreak, CatalogError> {
    let ends = c.rows(
        &super::sql::Query::same(SELECT_RECENT_ENDS),
        &[job_id.into()],
        |r| Ok((r.text(0)?, r.opt_int(1)?)),
    )?;
    Ok(streak_of(ends))
}

/// The streak from a job's latest ends, newest first ([`SELECT_RECENT_ENDS`]' rows).
fn streak_of(
    ends: impl IntoIterator<Item = (String, Option<i64>)>,
) -> crate::schedule::FailureStreak {
    let mut streak = crate::schedule::FailureStreak::default();
    for (status, finished_at) in ends {
        if status == "succeeded" {
            break;
        }
        if streak.failures == 0 {
            streak.last_failure = finished_at;
        }
        streak.failures += 1;
    }
    streak
}

const INSERT_RUN: &str = "INSERT INTO job_run (job_id, processor_id, priority, scheduled_for,
    run_after, params, status, error, created_at, finished_at)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, CASE WHEN ?7 = 'skipped' THEN ?9 END)
    ON CONFLICT (job_id, scheduled_for) DO NOTHING";

/// Inserts a run; `None` when its slot was already taken (by this or another node).
pub fn enqueue(conn: &Connection, run: &NewRun, now: i64) -> Result<Option<i64>, CatalogError> {
    let mut stmt = conn.prepare_cached(INSERT_RUN)?;
    let n = stmt.execute(params![
        run.job_id,
        run.processor_id,
        run.priority,
        run.scheduled_for,
        run.run_after,
        run.params,
        run.status.as_str(),
        run.error,
        now
    ])?;
    Ok((n == 1).then(|| conn.last_insert_rowid()))
}

/// A job as an on-demand run needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct TriggerTarget {
    /// `job_id`.
    pub job_id: i64,
    /// Where its runs go.
    pub processor_id: i64,
    /// Its runs' priority.
    pub priority: i64,
    /// A workflow: each run starts as a tree at once (`tree::start_workflow`).
    pub workflow: bool,
    /// The payload of a job an admin fixed (`jobconf::fixed_payload_keys`) and its executor's
    /// own keys: a run's params may fill only its `open_params`.
    pub fixed: Option<(Json, &'static [&'static str])>,
}

impl TriggerTarget {
    /// Refuses params that would override what the job's payload fixes, naming the field
    /// (the executor holds the same rule for runs queued otherwise: `executor::fixed_input`).
    pub fn check_params(&self, params: Option<&str>) -> Result<(), CatalogError> {
        let (Some((payload, own_keys)), Some(params)) = (&self.fixed, params) else {
            return Ok(());
        };
        let params: Json = serde_json::from_str(params).unwrap_or(Json::Null);
        match crate::jobconf::run_params_problem(payload, own_keys, &params) {
            Some((field, reason)) => Err(CatalogError::Invalid { field, reason }),
            None => Ok(()),
        }
    }

    /// An on-demand run of the job with `params`, due `now`.
    pub fn run_now(&self, params: Option<String>, now: i64) -> NewRun {
        NewRun {
            job_id: self.job_id,
            processor_id: self.processor_id,
            priority: self.priority,
            scheduled_for: None,
            run_after: now,
            params,
            status: RunStatus::Queued,
            error: None,
        }
    }
}

/// Looks up a job for an on-demand run.
pub fn job_for_trigger(mut c: impl Sql, name: &str) -> Result<TriggerTarget, CatalogError> {
    const SELECT: Query = Query::same(
        "SELECT j.job_id, j.processor_id, j.priority, t.job_type, j.job_payload,
                p.ip_address IS NOT NULL
         FROM job j JOIN job_type t ON t.job_type_id = j.job_type_id
         JOIN job_processor p ON p.processor_id = j.processor_id
         WHERE j.job_name = ?1",
    );
    c.row(&SELECT, &[name.into()], |r| {
        let job_type = r.text(3)?;
        let job_type = JobType::parse(&job_type)
            .ok_or_else(|| CatalogError::Corrupt(format!("job type `{job_type}`")))?;
        let payload: Json = serde_json::from_str(&r.text(4)?).unwrap_or(Json::Null);
        let fixed = crate::jobconf::fixed_payload_keys(job_type, r.flag(5)?, &payload);
        Ok(TriggerTarget {
            job_id: r.int(0)?,
            processor_id: r.int(1)?,
            priority: r.int(2)?,
            workflow: job_type == JobType::Workflow,
            fixed: fixed.map(|keys| (payload, keys)),
        })
    })?
    .ok_or_else(|| CatalogError::NotFound {
        kind: "job",
        name: name.to_string(),
    })
}

/// A run handed to a processor. The job's fields are shared by every run of the job claimed in
/// the same batch.
#[derive(Debug, Clone)]
pub struct ClaimedRun {
    /// `run_id`.
    pub run_id: i64,
    /// The fencing token its completion must carry.
    pub claim_token: i64,
    /// The job.
    pub job_id: i64,
    /// The job's name.
    pub job_name: Arc<str>,
    /// The executor.
    pub job_type: JobType,
    /// The job's payload (JSON object).
    pub payload: Arc<Json>,
    /// The run's parameters (JSON), if any.
    pub params: Option<Json>,
    /// 1 for the first attempt.
    pub attempt: i64,
    /// The job's limit.
    pub max_attempts: i64,
    /// Retry delay base, ms.
    pub backoff_base: i64,
    /// Retry delay cap, ms.
    pub backoff_max: i64,
    /// ms; 0 = none.
    pub timeout: i64,
    /// The slot.
    pub scheduled_for: Option<i64>,
    /// Claim order.
    pub priority: i64,
    /// Its node died while it was claimed before: it is marked executing in the catalog before
    /// it starts, so that a crash during its execution is blamed on it (`node`).
    pub suspect: bool,
    /// Ids of the objects the job writes.
    pub objects: Arc<[i64]>,
    /// When it was claimed.
    pub started_at: i64,
    /// Epoch ms: it must start by then, or it ends `expired` (its own `start_by`, else its
    /// job's `start_within` after it became due).
    pub start_by: Option<i64>,
}

/// What a claim needs of a job, read once per job per claim (by both catalogs).
pub(crate) struct JobMeta {
    pub(crate) name: Arc<str>,
    pub(crate) job_type: JobType,
    pub(crate) payload: Arc<Json>,
    /// max_attempts, backoff_base, backoff_max, timeout.
    pub(crate) nums: [i64; 4],
    /// How many of its runs may run at once.
    pub(crate) cap: i64,
    pub(crate) objects: Arc<[i64]>,
    /// ms a run has to start after it became due (0: no deadline).
    pub(crate) start_within: i64,
}

impl JobMeta {
    /// From a job's row as stored: its type and payload parsed, its overlap policy turned
    /// into a cap (`max_overlap` when it allows overlap, else 1).
    pub(crate) fn parse(
        name: String,
        job_type: &str,
        payload: &str,
        nums: [i64; 4],
        overlap: &str,
        max_overlap: i64,
        objects: Arc<[i64]>,
    ) -> Result<JobMeta, CatalogError> {
        let corrupt = |what: &str| CatalogError::Corrupt(format!("job {name}: {what}"));
        Ok(JobMeta {
            job_type: JobType::parse(job_type).ok_or_else(|| corrupt("job type"))?,
            payload: Arc::new(serde_json::from_str(payload).map_err(|_| corrupt("payload"))?),
            nums,
            cap: if overlap == OverlapPolicy::Allow.as_str() {
                max_overlap
            } else {
                1
            },
            objects,
            name: name.into(),
            start_within: 0,
        })
    }

    /// When a run of this job due at `run_after` must start by: its own `start_by`, else
    /// `start_within` after it became due.
    pub(crate) fn start_by(&self, run_after: i64, start_by: Option<i64>) -> Option<i64> {
        start_by.or((self.start_within > 0).then(|| run_after.saturating_add(self.start_within)))
    }
}

// A claim's candidates: due queued runs of processor ?1 at ?2 for node ?3 (?4: writes paused),
// in queue order. `$from` says how rows are found, `$job` is an extra condition.
macro_rules! candidates {
    ($from:literal, $job:literal) => {
        concat!(
            "SELECT r.run_id, r.job_id, r.params, r.attempt, r.scheduled_for, r.priority,
                r.suspect, r.run_after, r.start_by
            FROM ",
            $from,
            "
            WHERE r.status = 'queued' AND r.processor_id = ?1 AND r.run_after <= ?2",
            $job,
            "
              -- Scheduled slots run only while the job is active here; on-demand runs and
              -- retries always.
              AND (r.scheduled_for IS NULL OR r.retry_of IS NOT NULL
                   OR EXISTS (SELECT 1 FROM job_activation a
                              WHERE a.job_id = r.job_id AND a.node_id = ?3 AND a.state = 'active'))
              -- With writes paused (disk critical or full), only maintenance jobs: they free
              -- space.
              AND (?4 = 0 OR EXISTS (SELECT 1 FROM job j
                                     JOIN job_group g ON g.job_group_id = j.job_group_id
                                     WHERE j.job_id = r.job_id AND g.maintenance = 1))
            ORDER BY r.priority DESC, r.run_after, r.run_id"
        )
    };
}
const SELECT_CANDIDATES: &str = candidates!("job_run r INDEXED BY job_run_queue_idx", "");
// The candidates among the first `PAST_BLOCKED` due runs of the queue that are not runs of the
// jobs in ?5 (a JSON array), found by their ids (`NOT INDEXED`: not by a scan of the queue
// index checking each entry) and sorted.
pub(super) const SELECT_PAST_BLOCKED: &str = candidates!(
    "job_run r NOT INDEXED",
    " AND r.run_id IN (
        SELECT run_id FROM (
            SELECT q.run_id, q.job_id FROM job_run q INDEXED BY job_run_queue_idx
            WHERE q.status = 'queued' AND q.processor_id = ?1 AND q.run_after <= ?2
            ORDER BY q.priority DESC, q.run_after, q.run_id LIMIT 256)
        WHERE job_id NOT IN (SELECT value FROM json_each(?5)))"
);
/// How many candidates a claim's scan of the queue passes over (runs of jobs it cannot take)
/// before it looks past them through the queue index ([`SELECT_PAST_BLOCKED`]).
const PASS_OVER: usize = 64;
const SELECT_JOB_META: &str = "SELECT j.job_name, t.job_type, j.job_payload, j.max_attempts,
    j.backoff_base, j.backoff_max, j.timeout, j.overlap_policy, j.max_overlap, j.in_progress,
    coalesce(j.start_within, 0)
    FROM job j JOIN job_type t ON t.job_type_id = j.job_type_id WHERE j.job_id = ?1";
const OBJECT_BUSY: &str = "SELECT EXISTS (SELECT 1 FROM job_object jo
    JOIN job_run r ON r.job_id = jo.job_id AND (r.status = 'claimed' OR r.status = 'running') WHERE jo.object_id = ?1)";
const SELECT_JOB_OBJECTS: &str = "SELECT object_id FROM job_object WHERE job_id = ?1";
// Claimed, not started: no start time until its processor starts it (`mark_started`). A
// suspect claimed is not executing yet either (its processor marks it executing when it starts).
const MARK_CLAIMED: &str = "UPDATE job_run SET status = 'claimed', node_id = ?2,
    claim_token = ?3 + c.key, claimed_at = ?4, started_at = NULL, lease_until = ?5,
    suspect = min(suspect, 1)
    FROM json_each(?1) AS c WHERE job_run.run_id = c.value AND job_run.status = 'queued'";
const MARK_STARTED: &str = "UPDATE job_run SET status = 'running', started_at = ?3
    WHERE run_id = ?1 AND claim_token = ?2 AND status = 'claimed'";

/// A claimed run its processor started: the claim it holds and when it started (epoch ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunStart {
    /// The run.
    pub run_id: i64,
    /// Its claim's token: a run claimed again since is not marked.
    pub claim_token: i64,
    /// Epoch ms it started executing.
    pub started_at: i64,
}

/// Marks claimed runs `running` with their start times, each only while its claim holds and it
/// is still `claimed` (a run whose end is recorded already keeps it). Returns how many.
pub fn mark_started(conn: &Connection, starts: &[RunStart]) -> Result<usize, CatalogError> {
    let mut mark = conn.prepare_cached(MARK_STARTED)?;
    let mut marked = 0;
    for s in starts {
        marked += mark.execute(params![s.run_id, s.claim_token, s.started_at])?;
    }
    Ok(marked)
}
const MARK_JOB_BEGIN: &str =
    "UPDATE job SET in_progress = in_progress + ?2, last_date_begin = ?3 WHERE job_id = ?1";
// The queue index orders by priority before run_after: `min(run_after)` over the processor's
// queued runs would read every entry, a scan of the backlog per claim. Instead, one seek per
// priority present: the next priority down, then its first run not yet due.
const NEXT_DUE: &str = "WITH RECURSIVE level(priority) AS (
        SELECT max(priority) FROM job_run WHERE status = 'queued' AND processor_id = ?1
        UNION ALL
        SELECT (SELECT max(priority) FROM job_run
                WHERE status = 'queued' AND processor_id = ?1 AND priority < level.priority)
        FROM level WHERE level.priority IS NOT NULL)
    SELECT min((SELECT min(run_after) FROM job_run
                WHERE status = 'queued' AND processor_id = ?1 AND priority = level.priority
                  AND run_after > ?2))
    FROM level WHERE level.priority IS NOT NULL";

const NEXT_TOKEN: &str =
    "SELECT CAST(value AS INTEGER) + 1 FROM catalog_meta WHERE key = 'claim_token'";
const SPEND_TOKENS: &str = "UPDATE catalog_meta SET value = CAST(value AS INTEGER) + ?1
    WHERE key = 'claim_token'";

/// The first claim token not handed out yet, from the catalog's counter (migration 0017), for
/// a claim in this transaction; [`spend_tokens`] then takes the ones it used. Inside one write
/// transaction no other claim can come between the two, so no two claims of any processes
/// sharing the file get the same token, and a completion carrying an old claim's token never
/// matches a new claim.
pub fn next_token(conn: &Connection) -> Result<i64, CatalogError> {
    Ok(conn
        .prepare_cached(NEXT_TOKEN)?
        .query_row([], |r| r.get(0))?)
}

/// Takes `used` tokens from the counter, after a claim that used them. A claim that took no
/// run writes nothing: an empty claim must not be a change, or every node that notices a
/// change (`PRAGMA data_version`) would claim again, and so on forever.
pub fn spend_tokens(conn: &Connection, used: usize) -> Result<(), CatalogError> {
    if used > 0 {
        conn.prepare_cached(SPEND_TOKENS)?.execute([used as i64])?;
    }
    Ok(())
}

/// How often the cached candidate query was re-prepared on `conn` (tests: it must not be).
#[cfg(test)]
pub(crate) fn candidate_reprepares(conn: &Connection) -> Result<i32, CatalogError> {
    Ok(conn
        .prepare_cached(SELECT_CANDIDATES)?
        .get_status(rusqlite::StatementStatus::RePrepare))
}

/// The virtual machine steps a claim's statements have taken on `conn` so far (tests: a claim's
/// cost must not grow with the queue behind it).
#[cfg(test)]
pub(crate) fn claim_steps(conn: &Connection) -> Result<i64, CatalogError> {
    let mut steps = 0;
    for sql in [
        SELECT_CANDIDATES,
        SELECT_PAST_BLOCKED,
        SELECT_JOB_META,
        OBJECT_BUSY,
        SELECT_JOB_OBJECTS,
        MARK_CLAIMED,
        MARK_JOB_BEGIN,
        NEXT_DUE,
    ] {
        let stmt = conn.prepare_cached(sql)?;
        steps += i64::from(stmt.get_status(rusqlite::StatementStatus::VmStep));
    }
    Ok(steps)
}

/// The result of a claim.
#[derive(Debug, Default)]
pub struct Claim {
    /// Runs now `claimed` by this node, in claim order.
    pub runs: Vec<ClaimedRun>,
    /// When the earliest queued run of this processor that is not yet due becomes due.
    pub next_due: Option<i64>,
    /// Whether due runs were left because of overlap or object conflicts (retry when a run ends).
    pub blocked: bool,
}

/// Reads what a claim needs of job `job_id`, and how many of its runs run now on any node
/// (`job.in_progress`, kept in step with run states); `None` when the job is gone.
fn job_meta(conn: &Connection, job_id: i64) -> Result<Option<(JobMeta, i64)>, CatalogError> {
    type Row = (String, String, String, [i64; 4], String, i64, i64, i64);
    let row: Option<Row> = conn
        .prepare_cached(SELECT_JOB_META)?
        .query_row([job_id], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                [r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?],
                r.get(7)?,
                r.get(8)?,
                r.get(9)?,
                r.get(10)?,
            ))
        })
        .optional()?;
    let Some((name, job_type, payload, nums, overlap, max_overlap, running, start_within)) = row
    else {
        return Ok(None);
    };
    let objects: Arc<[i64]> = conn
        .prepare_cached(SELECT_JOB_OBJECTS)?
        .query_map([job_id], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    let mut meta = JobMeta::parse(
        name,
        &job_type,
        &payload,
        nums,
        &overlap,
        max_overlap,
        objects,
    )?;
    meta.start_within = start_within;
    Ok(Some((meta, running)))
}

/// A queued run a claim may take, as read from the queue.
struct Candidate {
    run_id: i64,
    job_id: i64,
    params: Option<String>,
    attempt: i64,
    scheduled_for: Option<i64>,
    priority: i64,
    suspect: bool,
    run_after: i64,
    start_by: Option<i64>,
}

impl Candidate {
    fn read(r: &rusqlite::Row<'_>) -> rusqlite::Result<Candidate> {
        Ok(Candidate {
            run_id: r.get(0)?,
            job_id: r.get(1)?,
            params: r.get(2)?,
            attempt: r.get(3)?,
            scheduled_for: r.get(4)?,
            priority: r.get(5)?,
            suspect: r.get::<_, i64>(6)? > 0,
            run_after: r.get(7)?,
            start_by: r.get(8)?,
        })
    }
}

/// A claim being chosen: what it took, and what it learnt of jobs and objects on the way.
struct Picker<'c> {
    conn: &'c Connection,
    now: i64,
    lease_ms: i64,
    claim: Claim,
    /// Per job seen: what the claim needs of it, its runs running (counting this claim's), and
    /// how many of them this claim took.
    jobs: HashMap<i64, Option<(Arc<JobMeta>, i64, i64)>>,
    /// Per object asked about: whether a running run, or a run claimed here, writes it.
    busy: HashMap<i64, bool>,
    /// Indexes into `claim.runs` by lease: runs with the same lease are marked by one statement.
    groups: Vec<(i64, Vec<usize>)>,
    /// Jobs paused on this node (`catalog::pause`): their runs wait.
    paused: HashSet<i64>,
}

impl Picker<'_> {
    /// Takes `c` unless its job is gone, at its overlap cap, or writes an object a run in
    /// progress (or taken here) writes; true when taken.
    fn offer(&mut self, c: Candidate) -> Result<bool, CatalogError> {
        let conn = self.conn;
        if self.paused.contains(&c.job_id) {
            return Ok(false);
        }
        if let Entry::Vacant(slot) = self.jobs.entry(c.job_id) {
            slot.insert(job_meta(conn, c.job_id)?.map(|(m, running)| (Arc::new(m), running, 0)));
        }
        let Some(Some((meta, running, claimed))) = self.jobs.get_mut(&c.job_id) else {
            return Ok(false);
        };
        if *running >= meta.cap {
            self.claim.blocked = true;
            return Ok(false);
        }
        // Runs writing a common object never run at once, even runs of one job.
        let mut conflict = false;
        for object in meta.objects.iter() {
            let taken = match self.busy.get(object) {
                Some(taken) => *taken,
                None => {
                    let taken = conn
                        .prepare_cached(OBJECT_BUSY)?
                        .query_row([object], |r| r.get(0))?;
                    self.busy.insert(*object, taken);
                    taken
                }
            };
            conflict |= taken;
        }
        if conflict {
            self.claim.blocked = true;
            return Ok(false);
        }
        *running += 1;
        *claimed += 1;
        for object in meta.objects.iter() {
            self.busy.insert(*object, true);
        }
        let [max_attempts, backoff_base, backoff_max, timeout] = meta.nums;
        // Saturating: a valid job's timeout may be i64::MAX ms (fuzz corpus `extremes.conf`).
        let lease = self
            .now
            .saturating_add(timeout.max(0))
            .saturating_add(self.lease_ms);
        let index = self.claim.runs.len();
        match self.groups.iter_mut().find(|(l, _)| *l == lease) {
            Some((_, members)) => members.push(index),
            None => self.groups.push((lease, vec![index])),
        }
        let run_id = c.run_id;
        let params = c
            .params
            .as_deref()
            .map(serde_json::from_str)
            .transpose()
            .map_err(|_| CatalogError::Corrupt(format!("run {run_id}: params")))?;
        self.claim.runs.push(ClaimedRun {
            run_id,
            // Assigned when marked.
            claim_token: 0,
            job_id: c.job_id,
            job_name: meta.name.clone(),
            job_type: meta.job_type,
            payload: meta.payload.clone(),
            params,
            attempt: c.attempt,
            max_attempts,
            backoff_base,
            backoff_max,
            timeout,
            scheduled_for: c.scheduled_for,
            priority: c.priority,
            suspect: c.suspect,
            objects: meta.objects.clone(),
            started_at: self.now,
            start_by: meta.start_by(c.run_after, c.start_by),
        });
        Ok(true)
    }

    /// Whether no run of `job_id` can be taken by this claim any more (found gone, at its cap,
    /// or writing a busy object: none of that changes within a claim).
    fn is_blocked(&self, job_id: i64) -> bool {
        if self.paused.contains(&job_id) {
            return true;
        }
        match self.jobs.get(&job_id) {
            Some(Some((meta, running, _))) => {
                *running >= meta.cap
                    || meta
                        .objects
                        .iter()
                        .any(|o| self.busy.get(o).copied().unwrap_or(false))
            }
            Some(None) => true,
            None => false,
        }
    }
}

/// Claims up to `limit` due runs of `processor_id` for `node_id`: by priority, then age; a job
/// never overlaps itself unless its overlap policy allows, and two jobs that write a common
/// object never run at once. Each claimed run gets its own token from `first_token` on. With
/// `writes_paused` (the disk is critical or full), only runs of maintenance jobs are claimed:
/// every other run waits in the queue, so the node writes little beyond what frees space.
/// Nothing of a processor, group or job paused on this node or fleet-wide is claimed.
///
/// The queue is scanned first, in its order (at most 8 × `limit` candidates, fewer when enough
/// are claimable, and stopping after [`PASS_OVER`] it cannot take). When that leaves the claim
/// short because some jobs could not be taken (at their cap, an object busy), the other jobs' runs are reached by job instead, one seek per
/// job with queued runs, so that neither the blocked jobs' backlogs hold the rest back nor a
/// claim's cost grows with them. Then the chosen runs are marked; each job's row is updated
/// once per claim.
#[allow(clippy::too_many_arguments)]
pub fn claim(
    conn: &Connection,
    processor_id: i64,
    node_id: i64,
    limit: usize,
    now: i64,
    lease_ms: i64,
    first_token: i64,
    writes_paused: bool,
) -> Result<Claim, CatalogError> {
    let paused = super::pause::paused_for_claim(conn, processor_id, node_id)?;
    if paused.processor {
        // Paused here: nothing is claimed until it is resumed (a change that wakes the claim).
        return Ok(Claim::default());
    }
    let mut p = Picker {
        conn,
        now,
        lease_ms,
        claim: Claim::default(),
        jobs: HashMap::new(),
        busy: HashMap::new(),
        groups: Vec::new(),
        paused: paused.jobs.into_iter().collect(),
    };
    let rule = params![processor_id, now, node_id, writes_paused];
    let mut passed_over = false;
    {
        let mut stmt = conn.prepare_cached(SELECT_CANDIDATES)?;
        // No `LIMIT ?`: SQLite re-prepares a statement whenever a LIMIT parameter is bound.
        // The index yields the order, so stepping stops early instead.
        let fetch = (limit * 8).max(16);
        let mut rows = stmt.query(rule)?;
        let (mut seen, mut passed) = (0, 0);
        while let Some(r) = rows.next()? {
            if p.claim.runs.len() >= limit {
                break;
            }
            if seen >= fetch || passed >= PASS_OVER {
                passed_over = true;
                break;
            }
            seen += 1;
            if !p.offer(Candidate::read(r)?)? {
                passed += 1;
            }
        }
    }
    if passed_over && (p.claim.blocked || !p.paused.is_empty()) {
        claim_past_blocked(&mut p, processor_id, node_id, limit, writes_paused)?;
    }
    let Picker {
        mut claim,
        groups,
        jobs,
        ..
    } = p;
    let mut mark = conn.prepare_cached(MARK_CLAIMED)?;
    let mut token = first_token;
    for (lease, members) in groups {
        let mut ids = String::with_capacity(members.len() * 8 + 2);
        ids.push('[');
        for (k, &i) in members.iter().enumerate() {
            let run = &mut claim.runs[i];
            run.claim_token = token + k as i64;
            let sep = if k > 0 { "," } else { "" };
            let _ = write!(ids, "{sep}{}", run.run_id);
        }
        ids.push(']');
        let marked = mark.execute(params![ids, node_id, token, now, lease])?;
        // The candidates were read in this transaction, which holds the write lock.
        if marked != members.len() {
            return Err(CatalogError::Corrupt(format!(
                "a claim marked {marked} of {} queued runs",
                members.len()
            )));
        }
        token += members.len() as i64;
    }
    let mut job_begin = conn.prepare_cached(MARK_JOB_BEGIN)?;
    for (job_id, seen) in jobs {
        if let Some((_, _, claimed @ 1..)) = seen {
            job_begin.execute(params![job_id, claimed, now])?;
        }
    }
    if claim.runs.len() < limit {
        claim.next_due = conn
            .prepare_cached(NEXT_DUE)?
            .query_row(params![processor_id, now], |r| r.get(0))?;
    }
    Ok(claim)
}

/// The rest of a claim whose scan of the queue stopped among runs of jobs it cannot take: the
/// due runs of the other jobs among the first [`PAST_BLOCKED`](crate::lease::PAST_BLOCKED) of
/// the queue, in queue order.
fn claim_past_blocked(
    p: &mut Picker<'_>,
    processor_id: i64,
    node_id: i64,
    limit: usize,
    writes_paused: bool,
) -> Result<(), CatalogError> {
    let conn = p.conn;
    let blocked: Vec<i64> = p
        .jobs
        .keys()
        .chain(&p.paused)
        .copied()
        .filter(|&job| p.is_blocked(job))
        .collect();
    let blocked = serde_json::to_string(&blocked).expect("a list of numbers");
    let taken: HashSet<i64> = p.claim.runs.iter().map(|r| r.run_id).collect();
    let mut stmt = conn.prepare_cached(SELECT_PAST_BLOCKED)?;
    let mut rows = stmt.query(params![
        processor_id,
        p.now,
        node_id,
        writes_paused,
        blocked
    ])?;
    while let Some(r) = rows.next()? {
        if p.claim.runs.len() >= limit {
            break;
        }
        let c = Candidate::read(r)?;
        if !taken.contains(&c.run_id) && !p.is_blocked(c.job_id) {
            p.offer(c)?;
        }
    }
    Ok(())
}

/// Marks a deactivated job's queued slots `skipped` (its ad-hoc runs and retries stay queued).
pub fn skip_queued_slots(
    mut c: impl Sql,
    job_id: i64,
    reason: &str,
    now: i64,
) -> Result<usize, CatalogError> {
    // The queue index holds only queued runs: the job's are among them.
    const SKIP: Query = Query::each(
        "UPDATE job_run SET status = 'skipped', error = ?2, finished_at = ?3
         WHERE run_id IN (SELECT run_id FROM job_run INDEXED BY job_run_queue_idx
                          WHERE status = 'queued' AND job_id = ?1)
           AND scheduled_for IS NOT NULL AND retry_of IS NULL",
        "UPDATE job_run SET status = 'skipped', error = $2, finished_at = $3
         WHERE status = 'queued' AND job_id = $1 AND scheduled_for IS NOT NULL
           AND retry_of IS NULL",
    );
    c.exec(&SKIP, &[job_id.into(), reason.into(), now.into()])
}
