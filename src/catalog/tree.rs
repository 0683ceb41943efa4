//! Job trees and workflows: runs that spawned runs (a parent, `pid`; the top-level ancestor,
//! `stump`), and workflow runs whose steps are queued as their predecessors succeed.
//!
//! A run with children open *waits* once its own execution ended (`own_status` set,
//! `finished_at` not): its instance is free, its status shows `running` — or `failed` as soon
//! as a failure shows anywhere below it — and it ends with its last child, with the minimum
//! over its tree (failed < cancelled < succeeded). A workflow's run executes nothing itself:
//! triggering it queues the steps that wait for nothing, and the rest follow.
//!
//! Invariant: a tree changes in the transaction of the event that changes it — a step is
//! queued in the transaction that records its last predecessor's success, a failed step's
//! dependents are skipped in the transaction of its last failure, a run ends in the transaction
//! of its last child's end. Every function takes a transaction of either backend
//! ([`Sql`]: the SQLite writer's connection, or a PostgreSQL transaction) and reads no clock
//! (`now` is an argument).
//!
//! On PostgreSQL several nodes change one tree at once, so each change locks before it counts:
//! reading a run to change it (`SELECT_NODE`) locks its row, so two nodes ending the last two
//! children of one parent count them one after the other and the parent ends once. Deadlocks
//! are kept out by one order: a transaction that changes trees locks their roots first, in id
//! order (`lock_tree` here; a completion batch locks all its roots in one statement), then
//! rows below them — a run's descendants are created after it, so their ids are larger. SQLite's
//! one writer serializes every change anyway; there the same statements only read.

use serde_json::{Map as JsonMap, Value as Json};

use super::CatalogError;
use super::sql::{Query, Sql, Val};
use crate::jobconf::workflow::{Step, WorkflowSpec};
use crate::model::RunStatus;

/// A run queued for a processor: the processor to wake, with the run's priority.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Queued {
    /// The processor whose queue got the run.
    pub processor_id: i64,
    /// The run's priority.
    pub priority: i64,
}

/// A run that reached its final status, for its parent to hear.
#[derive(Debug, Clone)]
pub(crate) struct Ended {
    /// Its parent, if any.
    pub pid: Option<i64>,
    /// The workflow step it ran, if any.
    pub step: Option<String>,
    /// How it ended.
    pub status: RunStatus,
}

/// What a run's end means for its tree: failed, timed out, dead and expired runs fail it (the
/// work was not done); cancelled and skipped ones cancel it; a success changes nothing.
fn verdict(status: RunStatus) -> Option<RunStatus> {
    match status {
        RunStatus::Failed | RunStatus::TimedOut | RunStatus::Dead | RunStatus::Expired => {
            Some(RunStatus::Failed)
        }
        RunStatus::Cancelled | RunStatus::Skipped => Some(RunStatus::Cancelled),
        RunStatus::Succeeded | RunStatus::Queued | RunStatus::Claimed | RunStatus::Running => None,
    }
}

/// The worse of two verdicts: failed before cancelled.
fn worse(a: Option<RunStatus>, b: Option<RunStatus>) -> Option<RunStatus> {
    match (a, b) {
        (Some(RunStatus::Failed), _) | (_, Some(RunStatus::Failed)) => Some(RunStatus::Failed),
        (Some(x), _) | (_, Some(x)) => Some(x),
        (None, None) => None,
    }
}

/// A run's final status: its own when its execution did not succeed, else its tree's verdict
/// (the minimum over the tree).
pub(crate) fn final_status(own: RunStatus, tree: Option<RunStatus>) -> RunStatus {
    if own == RunStatus::Succeeded {
        tree.unwrap_or(RunStatus::Succeeded)
    } else {
        own
    }
}

/// Reads a stored verdict (`tree_status`).
pub(crate) fn stored_verdict(text: Option<&str>) -> Option<RunStatus> {
    text.and_then(RunStatus::parse).and_then(verdict)
}

/// What the tree functions read of a run.
struct Node {
    run_id: i64,
    pid: Option<i64>,
    stump: Option<i64>,
    step: Option<String>,
    status: String,
    own: Option<String>,
    finished: bool,
    open: i64,
    tree: Option<RunStatus>,
    cancelled: bool,
    params: Option<String>,
    /// The job's payload when the job is a workflow.
    workflow: Option<String>,
}

impl Node {
    /// Its own execution ended and children remain.
    fn waiting(&self) -> bool {
        self.own.is_some() && !self.finished
    }

    /// The top of its tree.
    fn root(&self) -> i64 {
        self.stump.unwrap_or(self.run_id)
    }
}

// PostgreSQL locks the run: what is read of it (its open children, its verdict) is written
// back changed, and another node may be changing it too (see the module's doc).
const SELECT_NODE: Query = Query::each(
    "SELECT r.run_id, r.pid, r.stump, r.step, r.status, r.own_status,
    r.finished_at IS NOT NULL, r.children_open, r.tree_status, r.cancel_requested, r.params,
    CASE WHEN t.job_type = 'workflow' THEN j.job_payload END
    FROM job_run r JOIN job j ON j.job_id = r.job_id
    JOIN job_type t ON t.job_type_id = j.job_type_id WHERE r.run_id = ?1",
    "SELECT r.run_id, r.pid, r.stump, r.step, r.status, r.own_status,
    r.finished_at IS NOT NULL, r.children_open, r.tree_status, r.cancel_requested, r.params,
    CASE WHEN t.job_type = 'workflow' THEN j.job_payload END
    FROM job_run r JOIN job j ON j.job_id = r.job_id
    JOIN job_type t ON t.job_type_id = j.job_type_id WHERE r.run_id = $1 FOR UPDATE OF r",
);

fn node<S: Sql>(c: &mut S, run_id: i64) -> Result<Option<Node>, CatalogError> {
    c.row(&SELECT_NODE, &[run_id.into()], |r| {
        Ok(Node {
            run_id: r.int(0)?,
            pid: r.opt_int(1)?,
            stump: r.opt_int(2)?,
            step: r.opt_text(3)?,
            status: r.text(4)?,
            own: r.opt_text(5)?,
            finished: r.flag(6)?,
            open: r.int(7)?,
            tree: stored_verdict(r.opt_text(8)?.as_deref()),
            cancelled: r.int(9)? != 0,
            params: r.opt_text(10)?,
            workflow: r.opt_text(11)?,
        })
    })
}

fn node_of<S: Sql>(c: &mut S, run_id: i64) -> Result<Node, CatalogError> {
    node(c, run_id)?.ok_or_else(|| super::not_found("run", &run_id.to_string()))
}

// The root's id, from the run's own row (a run's `stump` never changes).
const LOCK_ROOT: Query = Query::each(
    "SELECT coalesce(stump, run_id) FROM job_run WHERE run_id = ?1",
    "SELECT run_id FROM job_run
     WHERE run_id = (SELECT coalesce(stump, run_id) FROM job_run WHERE run_id = $1)
     FOR UPDATE",
);

/// Takes the lock of the root of `run_id`'s tree on PostgreSQL, before anything below it:
/// the first statement of a change that starts inside a tree (a spawn, a cancel, a retry), so
/// that changes to one tree follow each other in one order (see the module's doc). On SQLite,
/// whose one writer serializes every change, it only reads the root's id.
pub(crate) fn lock_tree(mut c: impl Sql, run_id: i64) -> Result<(), CatalogError> {
    c.row(&LOCK_ROOT, &[run_id.into()], |r| r.int(0))?;
    Ok(())
}

/// A catalog job as a tree needs it.
struct JobRef {
    job_id: i64,
    processor_id: i64,
    priority: i64,
    workflow: bool,
}

const SELECT_JOB: Query = Query::same(
    "SELECT j.job_id, j.processor_id, j.priority, t.job_type = 'workflow'
    FROM job j JOIN job_type t ON t.job_type_id = j.job_type_id WHERE j.job_name = ?1",
);

fn job_ref<S: Sql>(c: &mut S, name: &str) -> Result<Option<JobRef>, CatalogError> {
    c.row(&SELECT_JOB, &[name.into()], |r| {
        Ok(JobRef {
            job_id: r.int(0)?,
            processor_id: r.int(1)?,
            priority: r.int(2)?,
            workflow: r.flag(3)?,
        })
    })
}

const INSERT_CHILD: Query = Query::each(
    "INSERT INTO job_run (job_id, processor_id, priority, run_after,
    params, status, attempt, pid, stump, step, retry_of, created_at, finished_at, error)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, 1, ?7, ?8, ?9, ?10, ?4,
            CASE WHEN ?6 = 'skipped' THEN ?4 END, ?11)",
    "INSERT INTO job_run (job_id, processor_id, priority, run_after,
    params, status, attempt, pid, stump, step, retry_of, created_at, finished_at, error)
    VALUES ($1, $2, $3, $4, $5, $6, 1, $7, $8, $9, $10, $4,
            CASE WHEN $6 = 'skipped' THEN $4::bigint END, $11)
    RETURNING run_id",
);
const ADD_OPEN: Query =
    Query::same("UPDATE job_run SET children_open = children_open + ?2 WHERE run_id = ?1");
const SET_OPEN_AND_VERDICT: Query =
    Query::same("UPDATE job_run SET children_open = ?2, tree_status = ?3 WHERE run_id = ?1");
const START_WORKFLOW: Query = Query::same(
    "UPDATE job_run SET status = 'running', own_status = 'succeeded',
    started_at = ?2 WHERE run_id = ?1",
);
const FAIL_UNSTARTED: Query = Query::same(
    "UPDATE job_run SET status = 'failed', own_status = NULL,
    started_at = ?2, finished_at = ?2, error = ?3 WHERE run_id = ?1",
);
const FINISH_WAITING: Query = Query::same(
    "UPDATE job_run SET status = ?2, finished_at = ?3,
    elapsed = coalesce(elapsed, ?3 - started_at),
    error = coalesce(error, ?4) WHERE run_id = ?1",
);
const SHOW_FAILED: Query = Query::same(
    "UPDATE job_run SET status = 'failed'
    WHERE run_id = ?1 AND status = 'running' AND own_status IS NOT NULL AND finished_at IS NULL",
);
const SELECT_PARENT: Query = Query::same("SELECT pid FROM job_run WHERE run_id = ?1");
const MARK_TREE_FAILED: Query = Query::same(
    "UPDATE job_run SET tree_status = 'failed',
    error = coalesce(error, ?2) WHERE run_id = ?1",
);
// A workflow run has few children (its steps and their attempts): the parent index finds them.
const SELECT_LATEST_STEP: Query = Query::same(
    "SELECT run_id, status, result, coalesce(retry_of, run_id)
    FROM job_run WHERE pid = ?1 AND step = ?2 ORDER BY run_id DESC LIMIT 1",
);

/// The latest run of a workflow's step (later attempts and re-runs supersede earlier ones).
struct Latest {
    status: RunStatus,
    result: Option<String>,
    /// The step's first attempt, which every later one retries.
    first: i64,
}

fn latest<S: Sql>(c: &mut S, workflow: i64, step: &str) -> Result<Option<Latest>, CatalogError> {
    let row = c.row(&SELECT_LATEST_STEP, &[workflow.into(), step.into()], |r| {
        Ok((r.int(0)?, r.text(1)?, r.opt_text(2)?, r.int(3)?))
    })?;
    row.map(|(run_id, status, result, first)| {
        let status = RunStatus::parse(&status)
            .ok_or_else(|| CatalogError::Corrupt(format!("run {run_id}: status `{status}`")))?;
        Ok(Latest {
            status,
            result,
            first,
        })
    })
    .transpose()
}

/// The steps of a workflow run, read from its job's payload; `Err` with the reason when the
/// payload no longer reads as a workflow (validation keeps that from happening). Parsed once
/// per payload text on the writer's thread: every step's end reads its workflow's steps, and
/// parsing them again was a third of a two-step workflow's cost in the writer.
fn spec_of(w: &Node) -> Result<std::rc::Rc<WorkflowSpec>, String> {
    use std::cell::RefCell;
    use std::collections::HashMap;
    thread_local! {
        static PARSED: RefCell<HashMap<String, std::rc::Rc<WorkflowSpec>>> =
            RefCell::new(HashMap::new());
    }
    let payload = w.workflow.as_deref().unwrap_or("{}");
    if let Some(spec) = PARSED.with(|p| p.borrow().get(payload).cloned()) {
        return Ok(spec);
    }
    let spec = std::rc::Rc::new(parse_spec(payload)?);
    PARSED.with(|p| {
        let mut p = p.borrow_mut();
        // A few workflows at most: an edited payload leaves its old text behind.
        if p.len() >= 64 {
            p.clear();
        }
        p.insert(payload.to_string(), spec.clone());
    });
    Ok(spec)
}

fn parse_spec(payload: &str) -> Result<WorkflowSpec, String> {
    let map: JsonMap<String, Json> =
        serde_json::from_str(payload).map_err(|e| format!("its payload is not JSON: {e}"))?;
    WorkflowSpec::parse(&map).map_err(|problems| {
        let reasons: Vec<String> = problems
            .iter()
            .map(|p| format!("payload.{}: {}", p.at, p.reason))
            .collect();
        format!("its payload is not a workflow: {}", reasons.join("; "))
    })
}

/// Starts the workflow run `run_id`, just inserted as queued: it is running from `now`, and
/// the steps that wait for nothing are queued (appended to `out`). A payload that does not read
/// as a workflow fails the run at once.
pub(crate) fn start_workflow(
    mut c: impl Sql,
    run_id: i64,
    now: i64,
    out: &mut Vec<Queued>,
) -> Result<(), CatalogError> {
    start_in(&mut c, run_id, now, out)
}

fn start_in<S: Sql>(
    c: &mut S,
    run_id: i64,
    now: i64,
    out: &mut Vec<Queued>,
) -> Result<(), CatalogError> {
    let w = node_of(c, run_id)?;
    let spec = match spec_of(&w) {
        Ok(spec) => spec,
        Err(why) => {
            let error = format!("the workflow cannot start: {why}");
            c.exec(
                &FAIL_UNSTARTED,
                &[run_id.into(), now.into(), error.as_str().into()],
            )?;
            return on_end_in(c, ended(&w, RunStatus::Failed), now, out);
        }
    };
    c.exec(&START_WORKFLOW, &[run_id.into(), now.into()])?;
    let mut open = 0;
    for step in spec.roots() {
        open += i64::from(queue_step(c, &w, step, JsonMap::new(), None, now, out)?);
    }
    c.exec(&ADD_OPEN, &[run_id.into(), open.into()])?;
    if open == 0 {
        // Every first step's job is gone: nothing can run.
        let w = node_of(c, run_id)?;
        finish(c, &w, w.tree, now, out)?;
    }
    Ok(())
}

const IS_WORKFLOW: Query = Query::same(
    "SELECT t.job_type = 'workflow' FROM job j JOIN job_type t
     ON t.job_type_id = j.job_type_id WHERE j.job_id = ?1",
);

/// Whether the job `job_id` is a workflow (its runs start as trees).
pub(crate) fn is_workflow(mut c: impl Sql, job_id: i64) -> Result<bool, CatalogError> {
    Ok(c.row(&IS_WORKFLOW, &[job_id.into()], |r| r.flag(0))?
        .unwrap_or(false))
}

fn ended(n: &Node, status: RunStatus) -> Ended {
    Ended {
        pid: n.pid,
        step: n.step.clone(),
        status,
    }
}

/// Queues one step of workflow run `w` (`retry_of`: the first attempt of an earlier run of
/// the step it supersedes). Its parameters are the workflow run's, the step's over them, and
/// the results of its `inputs` under `inputs`. A step whose job is a workflow starts as a tree
/// of its own inside this one. Returns false when the step's job no longer exists (the step
/// then counts as failed; validation keeps that from happening).
fn queue_step<S: Sql>(
    c: &mut S,
    w: &Node,
    step: &Step,
    inputs: JsonMap<String, Json>,
    retry_of: Option<i64>,
    now: i64,
    out: &mut Vec<Queued>,
) -> Result<bool, CatalogError> {
    let Some(job) = job_ref(c, &step.job)? else {
        let why = format!("step `{}`: job `{}` no longer exists", step.name, step.job);
        c.exec(&MARK_TREE_FAILED, &[w.run_id.into(), why.as_str().into()])?;
        show_failed_in(c, w.run_id)?;
        return Ok(false);
    };
    let mut p: JsonMap<String, Json> = w
        .params
        .as_deref()
        .and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or_default();
    for (k, v) in &step.params {
        p.insert(k.clone(), v.clone());
    }
    if !inputs.is_empty() {
        p.insert("inputs".into(), Json::Object(inputs));
    }
    let params_text = (!p.is_empty()).then(|| Json::Object(p).to_string());
    let id = c.insert(
        &INSERT_CHILD,
        &[
            job.job_id.into(),
            job.processor_id.into(),
            job.priority.into(),
            now.into(),
            params_text.into(),
            RunStatus::Queued.as_str().into(),
            w.run_id.into(),
            w.root().into(),
            step.name.as_str().into(),
            retry_of.into(),
            Val::Text(None),
        ],
    )?;
    if job.workflow {
        start_in(c, id, now, out)?;
    } else {
        out.push(Queued {
            processor_id: job.processor_id,
            priority: job.priority,
        });
    }
    Ok(true)
}

/// Records a step that will not run (`why`): a skipped row under the workflow's run, ended at
/// `now`, counted in no open children.
fn skip_step<S: Sql>(
    c: &mut S,
    w: &Node,
    step: &Step,
    why: &str,
    now: i64,
) -> Result<(), CatalogError> {
    // A step whose job is gone has no row to show; its workflow's error says so already.
    let Some(job) = job_ref(c, &step.job)? else {
        return Ok(());
    };
    c.insert(
        &INSERT_CHILD,
        &[
            job.job_id.into(),
            job.processor_id.into(),
            job.priority.into(),
            now.into(),
            Val::Text(None),
            RunStatus::Skipped.as_str().into(),
            w.run_id.into(),
            w.root().into(),
            step.name.as_str().into(),
            Val::Int(None),
            why.into(),
        ],
    )?;
    Ok(())
}

/// A step of workflow run `w` ended with `status`: queues each dependent whose predecessors
/// have now all succeeded (with their results as inputs), or — on a failure, or once the
/// workflow is cancelled — skips every step downstream that has no run yet.
fn advance<S: Sql>(
    c: &mut S,
    w: &Node,
    step: &str,
    status: RunStatus,
    now: i64,
    out: &mut Vec<Queued>,
) -> Result<Advanced, CatalogError> {
    let mut done = Advanced::default();
    let Ok(spec) = spec_of(w) else {
        return Ok(done);
    };
    if status == RunStatus::Succeeded && !w.cancelled {
        for dependent in spec.dependents(step) {
            let Some(results) = ready_inputs(c, w.run_id, dependent)? else {
                continue;
            };
            let superseded = match latest(c, w.run_id, &dependent.name)? {
                // Queued, running or done already (another predecessor's completion in this
                // batch got there first).
                Some(l) if !is_over_badly(l.status) => continue,
                Some(l) => Some(l.first),
                None => None,
            };
            if queue_step(c, w, dependent, results, superseded, now, out)? {
                done.queued += 1;
            } else {
                done.job_gone = true;
            }
        }
        return Ok(done);
    }
    let (targets, why) = if status == RunStatus::Succeeded {
        // The workflow was cancelled while this step ran: nothing after it starts.
        let mut targets: Vec<&Step> = spec.dependents(step).collect();
        for d in spec.dependents(step) {
            targets.extend(spec.downstream(&d.name));
        }
        (targets, "skipped: the workflow was cancelled".to_string())
    } else {
        let how = match status {
            RunStatus::Cancelled => "was cancelled",
            RunStatus::Skipped => "was skipped",
            RunStatus::TimedOut => "timed out",
            RunStatus::Expired => "expired (not started by its deadline)",
            _ => "failed",
        };
        (
            spec.downstream(step),
            format!("skipped: step `{step}` {how}"),
        )
    };
    let mut seen = std::collections::BTreeSet::new();
    for target in targets {
        if seen.insert(&target.name) && latest(c, w.run_id, &target.name)?.is_none() {
            skip_step(c, w, target, &why, now)?;
        }
    }
    Ok(done)
}

/// What advancing a workflow past a step did.
#[derive(Debug, Default)]
struct Advanced {
    /// Steps queued (children now open).
    queued: i64,
    /// A step to queue had no job any more (the workflow failed).
    job_gone: bool,
}

/// When every predecessor of `step` under workflow run `workflow` has succeeded (its latest
/// run), the results `step` takes as `inputs`; `None` while one has not.
fn ready_inputs<S: Sql>(
    c: &mut S,
    workflow: i64,
    step: &Step,
) -> Result<Option<JsonMap<String, Json>>, CatalogError> {
    let mut inputs = JsonMap::new();
    for pred in &step.after {
        match latest(c, workflow, pred)? {
            Some(l) if l.status == RunStatus::Succeeded => {
                if step.inputs.contains(pred) {
                    let result = l
                        .result
                        .as_deref()
                        .and_then(|t| serde_json::from_str(t).ok())
                        .unwrap_or(Json::Null);
                    inputs.insert(pred.clone(), result);
                }
            }
            _ => return Ok(None),
        }
    }
    Ok(Some(inputs))
}

/// A step's latest run ended without success (a re-run may supersede it).
fn is_over_badly(status: RunStatus) -> bool {
    verdict(status).is_some()
}

/// A run reached its final status: its parent hears it — a workflow advances past the step, the
/// parent's open children and verdict are updated, a failure shows on the waiting runs above,
/// and a waiting parent whose last child this was ends now (and its parent hears that).
pub(crate) fn on_end(
    mut c: impl Sql,
    ended: Ended,
    now: i64,
    out: &mut Vec<Queued>,
) -> Result<(), CatalogError> {
    on_end_in(&mut c, ended, now, out)
}

fn on_end_in<S: Sql>(
    c: &mut S,
    ended: Ended,
    now: i64,
    out: &mut Vec<Queued>,
) -> Result<(), CatalogError> {
    let Some(pid) = ended.pid else {
        return Ok(());
    };
    let Some(parent) = node(c, pid)? else {
        return Ok(());
    };
    let mut open = parent.open - 1;
    let mut before = parent.tree;
    if let Some(step) = &ended.step
        && parent.workflow.is_some()
    {
        let advanced = advance(c, &parent, step, ended.status, now, out)?;
        open += advanced.queued;
        if advanced.job_gone {
            // A step's job is gone: the workflow failed (`queue_step` wrote it).
            before = Some(RunStatus::Failed);
        }
    }
    let mut tree = worse(before, verdict(ended.status));
    if parent.cancelled && ended.status == RunStatus::Succeeded && parent.workflow.is_some() {
        tree = worse(tree, Some(RunStatus::Cancelled));
    }
    c.exec(
        &SET_OPEN_AND_VERDICT,
        &[
            pid.into(),
            open.max(0).into(),
            tree.map(RunStatus::as_str).into(),
        ],
    )?;
    if verdict(ended.status) == Some(RunStatus::Failed) {
        show_failed_in(c, pid)?;
    }
    if parent.waiting() && open <= 0 {
        finish(c, &parent, tree, now, out)?;
    }
    Ok(())
}

/// Ends a waiting run whose last child ended: with the minimum over its tree.
fn finish<S: Sql>(
    c: &mut S,
    n: &Node,
    tree: Option<RunStatus>,
    now: i64,
    out: &mut Vec<Queued>,
) -> Result<(), CatalogError> {
    let own = n
        .own
        .as_deref()
        .and_then(RunStatus::parse)
        .unwrap_or(RunStatus::Succeeded);
    let status = final_status(own, tree);
    let why = match (own, status) {
        (RunStatus::Succeeded, RunStatus::Failed) if n.workflow.is_some() => {
            Some("a step of the workflow failed (runs tree shows which)")
        }
        (RunStatus::Succeeded, RunStatus::Failed) => Some("a run in its tree failed"),
        (RunStatus::Succeeded, RunStatus::Cancelled) => Some("its tree was cancelled"),
        _ => None,
    };
    c.exec(
        &FINISH_WAITING,
        &[
            n.run_id.into(),
            status.as_str().into(),
            now.into(),
            why.into(),
        ],
    )?;
    on_end_in(c, ended(n, status), now, out)
}

/// Shows a failure at `from` and every waiting run above it: their status turns `failed` at
/// once (they still end with their last child).
pub(crate) fn show_failed(mut c: impl Sql, from: i64) -> Result<(), CatalogError> {
    show_failed_in(&mut c, from)
}

fn show_failed_in<S: Sql>(c: &mut S, from: i64) -> Result<(), CatalogError> {
    let mut at = Some(from);
    let mut hops = 0;
    while let Some(id) = at {
        c.exec(&SHOW_FAILED, &[id.into()])?;
        at = c
            .row(&SELECT_PARENT, &[id.into()], |r| r.opt_int(0))?
            .flatten();
        hops += 1;
        if hops > 10_000 {
            return Err(CatalogError::Corrupt(format!(
                "run {from}: its parents form a loop"
            )));
        }
    }
    Ok(())
}

/// Queues a child run of `parent` (a running run: executing, or waiting for its children) of
/// `job` with `params`, in its tree; the parent now also waits for it. A child that is a
/// workflow starts at once. Returns the child's id.
pub(crate) fn spawn(
    mut c: impl Sql,
    parent: i64,
    job: &str,
    params: Option<String>,
    now: i64,
    out: &mut Vec<Queued>,
) -> Result<i64, CatalogError> {
    let c = &mut c;
    lock_tree(&mut *c, parent)?;
    let p = node_of(c, parent)?;
    // A run executing may still read `claimed` (its start is written in a later batch).
    let executing = RunStatus::parse(&p.status).is_some_and(RunStatus::in_flight);
    if !executing || p.finished {
        return Err(CatalogError::Conflict(format!(
            "run {parent} is {}: only a running run may spawn runs",
            p.status
        )));
    }
    if p.cancelled {
        return Err(CatalogError::Conflict(format!(
            "run {parent} was cancelled: its tree takes no new runs"
        )));
    }
    let j = job_ref(c, job)?.ok_or_else(|| super::not_found("job", job))?;
    let id = c.insert(
        &INSERT_CHILD,
        &[
            j.job_id.into(),
            j.processor_id.into(),
            j.priority.into(),
            now.into(),
            params.into(),
            RunStatus::Queued.as_str().into(),
            parent.into(),
            p.root().into(),
            Val::Text(None),
            Val::Int(None),
            Val::Text(None),
        ],
    )?;
    c.exec(&ADD_OPEN, &[parent.into(), 1_i64.into()])?;
    if j.workflow {
        start_in(c, id, now, out)?;
    } else {
        out.push(Queued {
            processor_id: j.processor_id,
            priority: j.priority,
        });
    }
    Ok(id)
}

/// Whether run `run_id` heads a tree that has not ended (it waits, or it has children open):
/// a cancel then stops the whole tree. Takes the tree's lock first (`lock_tree`): what it
/// answers holds until the cancel that follows in the same transaction.
pub(crate) fn has_open_tree(mut c: impl Sql, run_id: i64) -> Result<bool, CatalogError> {
    lock_tree(&mut c, run_id)?;
    Ok(node(&mut c, run_id)?.is_some_and(|n| n.waiting() || n.open > 0))
}

/// What cancelling a tree did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TreeCancel {
    /// Queued runs cancelled at once.
    pub cancelled: usize,
    /// Executing runs whose nodes were asked to cancel them.
    pub requested: usize,
}

const SELECT_SUBTREE: Query = Query::each(
    "WITH RECURSIVE t(id) AS (
        SELECT ?1 UNION ALL SELECT r.run_id FROM job_run r JOIN t ON r.pid = t.id)
    SELECT r.run_id, r.pid, r.step, r.status, r.own_status IS NOT NULL AND r.finished_at IS NULL
    FROM job_run r JOIN t ON r.run_id = t.id ORDER BY r.run_id",
    "WITH RECURSIVE t(id) AS (
        SELECT $1::bigint UNION ALL SELECT r.run_id FROM job_run r JOIN t ON r.pid = t.id)
    SELECT r.run_id, r.pid, r.step, r.status, r.own_status IS NOT NULL AND r.finished_at IS NULL
    FROM job_run r JOIN t ON r.run_id = t.id ORDER BY r.run_id",
);
const FLAG_CANCELLED: Query =
    Query::same("UPDATE job_run SET cancel_requested = 1 WHERE run_id = ?1");
const CANCEL_QUEUED: Query = Query::same(
    "UPDATE job_run SET status = 'cancelled', finished_at = ?2,
    error = ?3 WHERE run_id = ?1 AND status = 'queued'",
);

/// Cancels run `run_id` and everything below it: waiting runs are flagged (no step is queued
/// and no child spawned under them any more), queued runs are cancelled at once (their
/// dependents skipped), executing runs are flagged for their nodes to cancel (a command's
/// process group is killed). The tree's runs end as their last children do.
pub(crate) fn cancel_tree(
    mut c: impl Sql,
    run_id: i64,
    why: &str,
    now: i64,
    out: &mut Vec<Queued>,
) -> Result<TreeCancel, CatalogError> {
    let c = &mut c;
    lock_tree(&mut *c, run_id)?;
    let members = c.rows(&SELECT_SUBTREE, &[run_id.into()], |r| {
        Ok((
            r.int(0)?,
            r.opt_int(1)?,
            r.opt_text(2)?,
            r.text(3)?,
            r.flag(4)?,
        ))
    })?;
    let mut done = TreeCancel::default();
    // Flag first, so that the ends below queue nothing more under a cancelled run. In id
    // order: parents before their children, as every change to a tree locks them.
    for (id, _, _, status, waiting) in &members {
        if *waiting || RunStatus::parse(status).is_some_and(RunStatus::in_flight) {
            c.exec(&FLAG_CANCELLED, &[(*id).into()])?;
            done.requested += usize::from(!*waiting);
        }
    }
    for (id, pid, step, status, _) in members {
        if status == RunStatus::Queued.as_str()
            && c.exec(&CANCEL_QUEUED, &[id.into(), now.into(), why.into()])? == 1
        {
            done.cancelled += 1;
            let end = Ended {
                pid,
                step,
                status: RunStatus::Cancelled,
            };
            on_end_in(c, end, now, out)?;
        }
    }
    Ok(done)
}

const REOPEN: Query = Query::same(
    "UPDATE job_run SET status = 'running', finished_at = NULL,
    tree_status = NULL, cancel_requested = 0, error = NULL, children_open = ?2
    WHERE run_id = ?1",
);

/// Retries workflow run `run_id` (ended without success) in place: its failed, cancelled and
/// skipped steps whose predecessors all succeeded are queued again (each a new run that
/// supersedes the old), and the steps after them follow as they succeed; steps that succeeded
/// keep their results. Returns how many steps were queued.
pub(crate) fn retry_workflow(
    mut c: impl Sql,
    run_id: i64,
    now: i64,
    out: &mut Vec<Queued>,
) -> Result<usize, CatalogError> {
    let c = &mut c;
    lock_tree(&mut *c, run_id)?;
    let w = node_of(c, run_id)?;
    if !w.finished {
        return Err(CatalogError::Conflict(format!(
            "workflow run {run_id} has not ended (its steps still run): cancel it or wait"
        )));
    }
    if let Some(root) = w.pid.map(|_| w.root()) {
        return Err(CatalogError::Conflict(format!(
            "workflow run {run_id} is part of the tree of run {root}: retry run {root}"
        )));
    }
    let spec = spec_of(&w).map_err(|why| {
        CatalogError::Conflict(format!("workflow run {run_id} cannot be retried: {why}"))
    })?;
    let mut ready = Vec::new();
    for step in &spec.steps {
        let superseded = match latest(c, run_id, &step.name)? {
            Some(l) if l.status == RunStatus::Succeeded => continue,
            Some(l) => Some(l.first),
            None => None,
        };
        if let Some(inputs) = ready_inputs(c, run_id, step)? {
            ready.push((step, inputs, superseded));
        }
    }
    if ready.is_empty() {
        return Err(CatalogError::Conflict(format!(
            "workflow run {run_id} has no step to run again"
        )));
    }
    c.exec(&REOPEN, &[run_id.into(), 0_i64.into()])?;
    let w = node_of(c, run_id)?;
    let mut open = 0;
    for (step, inputs, superseded) in ready {
        open += i64::from(queue_step(c, &w, step, inputs, superseded, now, out)?);
    }
    c.exec(&ADD_OPEN, &[run_id.into(), open.into()])?;
    if open == 0 {
        let w = node_of(c, run_id)?;
        finish(c, &w, w.tree, now, out)?;
    }
    Ok(open as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tree_verdict_is_the_minimum_failed_before_cancelled_before_succeeded() {
        use RunStatus::*;
        assert_eq!(final_status(Succeeded, None), Succeeded);
        assert_eq!(
            final_status(Succeeded, worse(verdict(Skipped), None)),
            Cancelled
        );
        assert_eq!(
            final_status(Succeeded, worse(verdict(Cancelled), verdict(Dead))),
            Failed
        );
        assert_eq!(
            final_status(TimedOut, None),
            TimedOut,
            "its own ending first"
        );
        assert_eq!(verdict(Succeeded), None);
    }
}
