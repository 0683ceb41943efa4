//! The scheduler's verb on PostgreSQL: the deciding of due slots, by `catalog::slots`' own
//! rules over a PostgreSQL transaction — so each slot fires once across the fleet (the unique `(job,
//! scheduled_for)`: a slot another node took is handed back to the planner), a misfire is one
//! row, and a job's overlap and failure backoff count the runs of every node; a workflow's
//! slot starts its tree in the transaction that queues it; and the recording of the next runs a
//! node plans.

use postgres::Transaction;

use super::{PgCatalog, commit, query_one};
use crate::catalog::CatalogError;
use crate::catalog::queue::{InFlight, NewRun};
use crate::catalog::slots::{
    Decided, DueJob, NextRun, SlotStore, decide_due_in, record_next_runs, start_slot_workflow,
};

const COUNT_RUNNING: &str = "SELECT count(*) FROM job_run WHERE job_id = $1
    AND (status = 'claimed' OR status = 'running')";
const COUNT_QUEUED_SLOTS: &str = "SELECT count(*) FROM job_run
    WHERE job_id = $1 AND status = 'queued' AND scheduled_for IS NOT NULL";

impl SlotStore for Transaction<'_> {
    fn in_flight(&mut self, job_id: i64) -> Result<InFlight, CatalogError> {
        Ok(InFlight {
            running: query_one(self, COUNT_RUNNING, &[&job_id])?.get(0),
            queued_slots: query_one(self, COUNT_QUEUED_SLOTS, &[&job_id])?.get(0),
        })
    }
    fn enqueue(&mut self, run: &NewRun, now: i64) -> Result<Option<i64>, CatalogError> {
        Ok(
            super::queue::enqueue_in(self, std::slice::from_ref(run), now)?
                .into_iter()
                .next()
                .flatten(),
        )
    }
    fn start_workflow(
        &mut self,
        job_id: i64,
        run_id: i64,
        now: i64,
    ) -> Result<Option<Vec<(i64, i64)>>, CatalogError> {
        start_slot_workflow(self, job_id, run_id, now)
    }
}

impl PgCatalog {
    /// Decides the due jobs' slots in one transaction (see `catalog::slots::decide_due`);
    /// after a lost connection, again from the planners as they were given.
    pub fn decide_due(
        &self,
        node_id: i64,
        due: Vec<DueJob>,
        now: i64,
    ) -> Result<Decided, CatalogError> {
        self.call(move |client, _| {
            let mut tx: Transaction<'_> = client.transaction()?;
            let decided = decide_due_in(&mut tx, node_id, due.clone(), now)?;
            commit(tx)?;
            Ok(decided)
        })
    }

    /// Records the next runs `node_id` plans (see `catalog::slots::record_next_runs`).
    pub fn record_next_runs(&self, node_id: i64, next: Vec<NextRun>) -> Result<(), CatalogError> {
        self.transact(move |tx| record_next_runs(tx, node_id, &next))
    }
}
