//! Deciding due slots inside the catalog writer's transaction: each due job's planner (the
//! pure core) learns what the catalog has in flight for its job, decides, and its decisions
//! become rows — so neither a reload racing the run events nor another node's runs make a node
//! skip a slot while nothing runs. The rules are written once, over a [`SlotStore`] — the
//! SQLite writer's connection here, a PostgreSQL transaction in `postgres::slots`.

use rusqlite::Connection;

use crate::catalog::CatalogError;
use crate::catalog::queue::{self, InFlight, NewRun};
use crate::catalog::sql::{Query, Sql};
use crate::catalog::tree;
use crate::model::RunStatus;
use crate::schedule::{Decision, JobPlanner, slot_keys};

/// What deciding due slots asks of a backend, inside its transaction (a job's failure streak,
/// the same statement on both, through [`Sql`]).
pub(crate) trait SlotStore: Sql {
    /// What is in flight for the job.
    fn in_flight(&mut self, job_id: i64) -> Result<InFlight, CatalogError>;
    /// Inserts a run; `None` when its slot was taken.
    fn enqueue(&mut self, run: &NewRun, now: i64) -> Result<Option<i64>, CatalogError>;
    /// When the job is a workflow, starts the tree of its run `run_id` (just queued for a slot)
    /// and returns (processor, priority) of each first step; `None` for any other job.
    fn start_workflow(
        &mut self,
        job_id: i64,
        run_id: i64,
        now: i64,
    ) -> Result<Option<Vec<(i64, i64)>>, CatalogError>;
}

impl SlotStore for &Connection {
    fn in_flight(&mut self, job_id: i64) -> Result<InFlight, CatalogError> {
        queue::in_flight(self, job_id)
    }
    fn enqueue(&mut self, run: &NewRun, now: i64) -> Result<Option<i64>, CatalogError> {
        queue::enqueue(self, run, now)
    }
    fn start_workflow(
        &mut self,
        job_id: i64,
        run_id: i64,
        now: i64,
    ) -> Result<Option<Vec<(i64, i64)>>, CatalogError> {
        start_slot_workflow(*self, job_id, run_id, now)
    }
}

/// [`SlotStore::start_workflow`] on either backend: a workflow's slot starts its tree in the
/// transaction that queued it (`tree::start_workflow`).
pub(crate) fn start_slot_workflow(
    mut c: impl Sql,
    job_id: i64,
    run_id: i64,
    now: i64,
) -> Result<Option<Vec<(i64, i64)>>, CatalogError> {
    if !tree::is_workflow(&mut c, job_id)? {
        return Ok(None);
    }
    let mut steps = Vec::new();
    tree::start_workflow(&mut c, run_id, now, &mut steps)?;
    Ok(Some(
        steps.iter().map(|q| (q.processor_id, q.priority)).collect(),
    ))
}

/// A due job's planner on its way into the writer's transaction, and back.
#[derive(Clone)]
pub struct DueJob {
    /// The job.
    pub job_id: i64,
    /// Its name, for the log.
    pub name: String,
    /// The processor its runs go to.
    pub processor_id: i64,
    /// Its runs' priority.
    pub priority: i64,
    /// Its planner (the pure core), which decides.
    pub planner: JobPlanner,
    /// The next run the catalog holds for the job on the deciding node
    /// (`job_activation.next_run_at`): the decide records the planner's new one when it
    /// differs, and hands back what the catalog then holds.
    pub shown: Option<i64>,
}

/// When a job runs next as one node plans it ([`JobPlanner::next_run`]), to record
/// (`job_activation.next_run_at`; `None` clears it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NextRun {
    /// The job.
    pub job_id: i64,
    /// Epoch ms, or none.
    pub at: Option<i64>,
}

// Not in the generation triggers (a next run changes no plan), and only its node writes a row.
// A value the row holds already is not written again (a load may have read the catalog before
// a decision recorded it, and then holds it for a change): no page or row version for nothing.
const SET_NEXT_RUN: Query = Query::same(
    "UPDATE job_activation SET next_run_at = ?1
    WHERE job_id = ?2 AND node_id = ?3 AND next_run_at IS DISTINCT FROM ?1",
);

/// Records the next runs `node_id` plans, in job order (the order of every activation write on
/// PostgreSQL, so a node's own transactions never wait on each other in a cycle).
pub(crate) fn record_next_runs(
    mut c: impl Sql,
    node_id: i64,
    next: &[NextRun],
) -> Result<(), CatalogError> {
    let mut next = next.to_vec();
    next.sort_by_key(|n| n.job_id);
    for n in next {
        c.exec(
            &SET_NEXT_RUN,
            &[n.at.into(), n.job_id.into(), node_id.into()],
        )?;
    }
    Ok(())
}

/// What deciding the due jobs did, for the actor to carry on.
#[derive(Default, Clone)]
pub struct Decided {
    /// The planners with their new state.
    pub jobs: Vec<DueJob>,
    /// (processor, priority) of each run queued.
    pub fired: Vec<(i64, i64)>,
}

/// Inside the writer's transaction: each due planner learns what the catalog has in flight for
/// its job, decides, and its decisions become rows. A fired slot whose key another node took
/// first is handed back to the planner; a re-lived slot takes the next free key of its second.
pub(crate) fn decide_due(
    c: &Connection,
    node_id: i64,
    due: Vec<DueJob>,
    now: i64,
) -> Result<Decided, CatalogError> {
    decide_due_in(&mut &*c, node_id, due, now)
}

/// [`decide_due`] over either backend's transaction; `node_id` is the deciding node.
pub(crate) fn decide_due_in(
    c: &mut impl SlotStore,
    node_id: i64,
    mut due: Vec<DueJob>,
    now: i64,
) -> Result<Decided, CatalogError> {
    // In job order, on every node: two nodes deciding the same slots on PostgreSQL wait for
    // each other's uncommitted slot rows, and in different orders they deadlocked (each
    // costing a second, `deadlock_timeout`, and a retry: per-second jobs on two nodes missed
    // slots).
    due.sort_by_key(|job| job.job_id);
    let mut fired = Vec::new();
    for job in &mut due {
        let f = c.in_flight(job.job_id)?;
        job.planner.handle_in_flight(
            f.running.clamp(0, u32::MAX as i64) as u32,
            f.queued_slots.clamp(0, u32::MAX as i64) as u32,
        );
        job.planner
            .handle_failures(queue::failure_streak(&mut *c, job.job_id)?);
        let mut rows: Vec<(i64, RunStatus, Option<String>)> = job
            .planner
            .poll_due(now)
            .into_iter()
            .map(|decision| match decision {
                Decision::Fire { slot, .. } => (slot, RunStatus::Queued, None),
                Decision::Skip { slot, reason } => {
                    (slot, RunStatus::Skipped, Some(reason.explain().to_string()))
                }
                Decision::Drop {
                    first,
                    last,
                    count,
                    reason,
                } => {
                    // One row stands for every slot of the summary.
                    let summary = summarise(first, last, count, reason.explain());
                    tracing::info!(job = %job.name, reason = reason.as_str(), "{summary}");
                    (first, RunStatus::Skipped, Some(summary))
                }
            })
            .collect();
        // A job's rows in slot order too (a summary of missed slots may come after the slot
        // that fires): the same order on every node, or two nodes deadlock within one job.
        rows.sort_by_key(|(slot, _, _)| *slot);
        for (slot, status, error) in rows {
            let mut run = NewRun {
                job_id: job.job_id,
                processor_id: job.processor_id,
                priority: job.priority,
                scheduled_for: Some(slot),
                run_after: slot.min(now),
                params: None,
                status,
                error,
            };
            let mut inserted = None;
            for key in slot_keys(slot) {
                run.scheduled_for = Some(key);
                if let Some(id) = c.enqueue(&run, now)? {
                    inserted = Some(id);
                    break;
                }
            }
            match (inserted, status) {
                // A workflow's slot starts its tree: its first steps are what runs.
                (Some(id), RunStatus::Queued) => match c.start_workflow(job.job_id, id, now)? {
                    Some(steps) => fired.extend(steps),
                    None => fired.push((job.processor_id, job.priority)),
                },
                (None, RunStatus::Queued) => job.planner.handle_slot_taken(slot),
                _ => {}
            }
        }
        // A planner that wants another poll now (a slot another node took, work an overlap
        // held back) has its next run recorded by the decision that follows.
        let next = job.planner.next_run(now);
        let settled = job.planner.next_wake(now).is_none_or(|w| w > now);
        if settled && next != job.shown {
            let next_run = NextRun {
                job_id: job.job_id,
                at: next,
            };
            record_next_runs(&mut *c, node_id, &[next_run])?;
            job.shown = next;
        }
    }
    Ok(Decided { jobs: due, fired })
}

/// "skipped: … (17 slots, 2026-12-01T05:01:00Z to 2026-12-01T05:17:00Z)".
fn summarise(first: i64, last: i64, count: Option<u64>, why: &str) -> String {
    let at = crate::schedule::rfc3339;
    match count {
        Some(1) => format!("{why} (1 slot, {})", at(first)),
        Some(n) => format!("{why} ({n} slots, {} to {})", at(first), at(last)),
        None => format!(
            "{why} (more than 100,000 slots, {} to {})",
            at(first),
            at(last)
        ),
    }
}
