//! The catalog's verbs for a running node: what the runtime (actors, executors, built-in
//! functions) asks of the catalog, each one transaction of the [`DbWriter`], named after what it
//! does. The runtime holds no connection and builds no transaction: it calls these.
//!
//! Invariant: each verb is one transaction (one writer operation); the SQL is in the modules
//! the verbs call (`queue`, `node`, `activation`, `slots`, `sql_job`). A second backend
//! implements the same verbs with its own SQL.

use serde_json::Value as Json;

use super::activation::{self, DecisionContext, JobActivation, NewDecision};
use super::complete::{self, Completion, Recorded};
use super::node::{self, NodeHolder, NodeLease, Swept};
use super::postgres::queue::PgClaim;
use super::queue::{self, Claim};
use super::sharing::{self, GiveBack};
use super::slots::{self, Decided, DueJob, NextRun};
use super::sql::Sql;
use super::tree::{self, Queued};
use super::upkeep::{self, StatSample};
use super::waiting;
use super::writer::DbWriter;
use super::{CatalogError, audit_at};
use crate::model::ActivationState;
use crate::policy::Decision;

/// A verb the PostgreSQL catalog does not have: refused, naming what.
pub(super) fn not_on_postgres(what: &str) -> CatalogError {
    CatalogError::Refused(format!(
        "{what}: not supported on a PostgreSQL catalog (only on a SQLite one)"
    ))
}

/// What a claim asks for.
#[derive(Debug, Clone, Copy)]
pub struct ClaimRequest {
    /// The claiming process's hold on its node name: a process that lost it claims nothing.
    pub fence: NodeLease,
    /// The processor whose runs are claimed.
    pub processor_id: i64,
    /// The claiming node.
    pub node_id: i64,
    /// Most runs to claim.
    pub limit: usize,
    /// Epoch ms now.
    pub now: i64,
    /// How long past the job's timeout the claim holds, unless renewed by the node's
    /// heartbeats, before another node may take the runs back, ms (the lease TTL).
    pub lease_ms: i64,
    /// Writes are paused: runs of jobs that write data objects stay queued.
    pub writes_paused: bool,
}

/// What a heartbeat found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Beat {
    /// The node still holds its name; idle nodes asked it to give back these runs.
    Held(Vec<GiveBack>),
    /// Another process holds the name now (`None` when nobody can be named; the holder's
    /// `fenced_by` names the node whose sweep fenced this one).
    Lost(Option<NodeHolder>),
}

/// Runs queued by a trigger.
#[derive(Debug, Clone)]
pub struct Triggered {
    /// The new runs' ids, in the order of the parameter sets.
    pub run_ids: Vec<i64>,
    /// The processor that runs them.
    pub processor_id: i64,
    /// Their priority.
    pub priority: i64,
    /// Runs queued beside them, for other processors: a workflow's first steps.
    pub also_queued: Vec<Queued>,
}

/// One job's activation to write: its new state on the node, the reason, and, when the change
/// is a decision to log, its cause.
#[derive(Debug, Clone)]
pub struct ActivationChange {
    /// The job.
    pub job_id: i64,
    /// Its name (the decision row's subject).
    pub name: String,
    /// Its new state on the node.
    pub state: ActivationState,
    /// Why, in words.
    pub reason: String,
    /// `Some(cause)`: also a row of the decision log (action `activate`/`deactivate` from the
    /// state).
    pub decision: Option<&'static str>,
}

/// Queues one run of `job` per parameter set, now, and writes one audit row for them: the one
/// way a run is triggered (CLI, API, JSON-RPC and embedding code alike).
pub(crate) fn trigger(
    c: &rusqlite::Connection,
    job: &str,
    params: &[Option<String>],
    now: i64,
    actor: &str,
    start_within: Option<i64>,
) -> Result<Triggered, CatalogError> {
    let target = queue::job_for_trigger(c, job)?;
    for p in params {
        target.check_params(p.as_deref())?;
    }
    let (processor_id, priority) = (target.processor_id, target.priority);
    let mut run_ids = Vec::with_capacity(params.len());
    let mut also_queued = Vec::new();
    for params in params {
        let run = target.run_now(params.clone(), now);
        let id = queue::enqueue(c, &run, now)?
            .ok_or_else(|| CatalogError::Failed(format!("a run of `{job}` was not inserted")))?;
        if target.workflow {
            // A workflow's run is a tree's root: it starts at once, queuing its first steps.
            tree::start_workflow(c, id, now, &mut also_queued)?;
        }
        run_ids.push(id);
    }
    waiting::set_start_within(c, &run_ids, now, start_within)?;
    audit_at(
        c,
        now,
        actor,
        "job.run",
        job,
        Some(&trigger_detail(&run_ids)),
    )?;
    Ok(Triggered {
        run_ids,
        processor_id,
        priority,
        also_queued,
    })
}

/// The audit detail of a trigger's runs: the run, or how many and the first and last ids.
pub(crate) fn trigger_detail(run_ids: &[i64]) -> Json {
    match run_ids {
        [one] => serde_json::json!({ "run_id": one }),
        ids => serde_json::json!({
            "runs": ids.len(),
            "first_run_id": ids.first(),
            "last_run_id": ids.last(),
        }),
    }
}

/// Writes `changes`: each job's state, and a decision row for those that are decisions.
fn write_activations(
    mut c: impl Sql,
    node_id: i64,
    changes: &[ActivationChange],
    now: i64,
) -> Result<(), CatalogError> {
    for change in changes {
        activation::set_state(
            &mut c,
            node_id,
            change.job_id,
            change.state,
            &change.reason,
            now,
        )?;
        if let Some(cause) = change.decision {
            // `paused` is an activation that waits for writes to resume.
            let action = match change.state {
                ActivationState::Active | ActivationState::Paused => "activate",
                ActivationState::Standby => "deactivate",
            };
            activation::record_decision(
                &mut c,
                node_id,
                &NewDecision {
                    at: now,
                    action,
                    job_id: Some(change.job_id),
                    processor_id: None,
                    subject: Some(&change.name),
                    reason: &change.reason,
                    evidence: None,
                    cause,
                },
            )?;
        }
    }
    Ok(())
}

/// Reads the node's job activations and writes the changes `decide` makes of them (the body
/// of `settle_activations` on either backend).
pub(crate) fn settle_in(
    mut c: impl Sql,
    node_id: i64,
    now: i64,
    decide: impl FnOnce(&[JobActivation]) -> Vec<ActivationChange>,
) -> Result<Vec<ActivationChange>, CatalogError> {
    activation::lock_node(&mut c, node_id)?;
    let changes = decide(&activation::job_activations(&mut c, node_id)?);
    write_activations(&mut c, node_id, &changes, now)?;
    Ok(changes)
}

/// One policy step's statistics and decisions (the body of `record_policy_step` on either
/// backend).
pub(crate) fn policy_step_in(
    mut c: impl Sql,
    node_id: i64,
    at: i64,
    stats: &[StatSample],
    steps: &[DecidedStep],
) -> Result<(), CatalogError> {
    upkeep::record_stats(&mut c, node_id, at, stats)?;
    if steps.iter().any(|s| !s.decisions.is_empty()) {
        activation::lock_node(&mut c, node_id)?;
    }
    for step in steps {
        for d in &step.decisions {
            activation::apply_decision(&mut c, node_id, d, &step.cx)?;
        }
    }
    Ok(())
}

/// A policy step's decisions and what the runtime knew beside them when it carried them out.
#[derive(Debug, Clone)]
pub struct DecidedStep {
    /// The decisions, in order.
    pub decisions: Vec<Decision>,
    /// Names, held activations and instance counts for their catalog part.
    pub cx: DecisionContext,
}

impl DbWriter {
    /// Claims up to `limit` queued runs for a processor, if the claimer still holds its node
    /// name (else [`CatalogError::Fenced`]); each claimed run gets a claim token no other
    /// claim of any process got.
    pub async fn claim(&self, r: ClaimRequest) -> Result<Claim, CatalogError> {
        if let Some(pg) = self.postgres() {
            let c = PgClaim {
                processor_id: r.processor_id,
                lease: r.fence,
                limit: r.limit,
                now: r.now,
                lease_ms: r.lease_ms,
                writes_paused: r.writes_paused,
            };
            return pg.off_thread(move |pg| pg.claim(c)).await;
        }
        self.call("claiming runs", move |c| {
            // The fencing token first: a process that lost its name claims nothing.
            node::check_fence(c, r.fence)?;
            let first_token = queue::next_token(c)?;
            let claim = queue::claim(
                c,
                r.processor_id,
                r.node_id,
                r.limit,
                r.now,
                r.lease_ms,
                first_token,
                r.writes_paused,
            )?;
            queue::spend_tokens(c, claim.runs.len())?;
            if claim.runs.is_empty() && !claim.blocked {
                // Idle: another node may hold runs it cannot start soon.
                sharing::ask(c, r.processor_id, r.node_id, r.limit, r.now)?;
            }
            Ok(claim)
        })
        .await
    }

    /// Marks a claimed run as executing (a node death from now on counts as an attempt);
    /// `false` when its claim is no longer this one's.
    pub async fn mark_executing(
        &self,
        run_id: i64,
        claim_token: i64,
        started_at: i64,
    ) -> Result<bool, CatalogError> {
        if let Some(pg) = self.postgres() {
            return pg
                .off_thread(move |pg| pg.mark_executing(run_id, claim_token, started_at))
                .await;
        }
        self.call("marking a run executing", move |c| {
            node::mark_executing(c, run_id, claim_token, started_at)
        })
        .await
    }

    /// Marks claimed runs `running` with their start times, in one transaction; a run whose
    /// claim no longer holds, or whose end is recorded already, is left as it is. Returns how
    /// many it marked.
    pub async fn mark_started(&self, starts: Vec<queue::RunStart>) -> Result<usize, CatalogError> {
        if let Some(pg) = self.postgres_ends() {
            return pg.off_thread(move |pg| pg.mark_started(starts)).await;
        }
        self.call("marking runs started", move |c| {
            queue::mark_started(c, &starts)
        })
        .await
    }

    /// Records finished runs (outcome, retries, dead), each against its claim token, and
    /// carries them out in their trees in the same transaction: a workflow step whose last
    /// predecessor this was is queued (its processor woken through [`DbWriter::on_queued`]), a
    /// failed step's dependents are skipped, a run whose last child this was ends. Shared, so
    /// that a failed write can be retried without a copy.
    pub async fn complete(
        &self,
        node_id: i64,
        completions: std::sync::Arc<Vec<Completion>>,
    ) -> Result<Vec<Recorded>, CatalogError> {
        if let Some(pg) = self.postgres_ends() {
            let (recorded, queued) = pg
                .off_thread(move |pg| pg.complete_batch(node_id, completions.to_vec()))
                .await?;
            self.announce(&queued);
            return Ok(recorded);
        }
        let (recorded, queued) = self
            .call("recording completed runs", move |c| {
                let mut queued = Vec::new();
                let recorded = complete::complete_batch(c, node_id, &completions, &mut queued)?;
                Ok((recorded, queued))
            })
            .await?;
        self.announce(&queued);
        Ok(recorded)
    }

    /// Queues a child run of the running run `parent` (in its tree: the parent ends with its
    /// last child), of `job` with `params`; returns its id. Its processor is woken through
    /// [`DbWriter::on_queued`]. `actor`, when given, is named by an audit row (an operator's
    /// spawn through the API; a function's own spawns are the node's work, like retries).
    pub async fn spawn(
        &self,
        parent: i64,
        job: String,
        params: Option<Json>,
        now: i64,
        actor: Option<String>,
    ) -> Result<i64, CatalogError> {
        if let Some(pg) = self.postgres() {
            let params = params.map(|p| p.to_string());
            let (id, queued) = pg
                .off_thread(move |pg| pg.spawn(parent, job, params, now, actor))
                .await?;
            self.announce(&queued);
            return Ok(id);
        }
        let (id, queued) = self
            .call("queueing a child run", move |c| {
                let mut queued = Vec::new();
                let params = params.map(|p| p.to_string());
                let id = tree::spawn(c, parent, &job, params, now, &mut queued)?;
                if let Some(actor) = actor {
                    let detail = serde_json::json!({ "run_id": id, "parent": parent });
                    audit_at(c, now, &actor, "run.spawn", &job, Some(&detail))?;
                }
                Ok((id, queued))
            })
            .await?;
        self.announce(&queued);
        Ok(id)
    }

    /// Queues the run of a file an inbox moved into its run's folder, with its key, in one
    /// transaction; `Ok(None)` when the key was queued before (a node found the folder again
    /// after it died). Blocking: the inbox's thread waits for the answer.
    pub fn enqueue_inbox_file(
        &self,
        file: super::inbox::InboxFile,
        now: i64,
    ) -> Result<Option<i64>, CatalogError> {
        if let Some(pg) = self.postgres() {
            let Some(t) = pg.enqueue_inbox_file(file, now)? else {
                return Ok(None);
            };
            // A workflow's run executes nothing itself: its first steps are what to wake.
            if t.also_queued.is_empty() {
                self.announce(&[Queued {
                    processor_id: t.processor_id,
                    priority: t.priority,
                }]);
            }
            self.announce(&t.also_queued);
            return Ok(t.run_ids.first().copied());
        }
        let (id, queued) = self.call_blocking("queueing an inbox file", move |c| {
            let mut queued = Vec::new();
            let id = super::inbox::enqueue_file(c, &file, now, &mut queued)?;
            Ok((id, queued))
        })?;
        self.announce(&queued);
        Ok(id)
    }

    /// Like [`DbWriter::spawn`], for blocking code (a function on the blocking pool).
    pub fn spawn_blocking(
        &self,
        parent: i64,
        job: String,
        params: Option<Json>,
        now: i64,
    ) -> Result<i64, CatalogError> {
        if let Some(pg) = self.postgres() {
            let params = params.map(|p| p.to_string());
            let (id, queued) = pg.spawn(parent, job, params, now, None)?;
            self.announce(&queued);
            return Ok(id);
        }
        let (id, queued) = self.call_blocking("queueing a child run", move |c| {
            let mut queued = Vec::new();
            let params = params.map(|p| p.to_string());
            let id = tree::spawn(c, parent, &job, params, now, &mut queued)?;
            Ok((id, queued))
        })?;
        self.announce(&queued);
        Ok(id)
    }

    /// Queues one run of `job` per parameter set, with one audit row naming `actor` (and a
    /// start deadline `start_within` ms from now, if given).
    pub async fn trigger(
        &self,
        job: String,
        params: Vec<Option<Json>>,
        now: i64,
        actor: String,
        start_within: Option<i64>,
    ) -> Result<Triggered, CatalogError> {
        let params: Vec<Option<String>> = params
            .into_iter()
            .map(|p| p.map(|p| p.to_string()))
            .collect();
        if let Some(pg) = self.postgres() {
            let triggered = pg
                .off_thread(move |pg| pg.trigger(&job, params, now, &actor, start_within))
                .await?;
            self.announce(&triggered.also_queued);
            return Ok(triggered);
        }
        let triggered = self
            .call("queueing runs", move |c| {
                trigger(c, &job, &params, now, &actor, start_within)
            })
            .await?;
        self.announce(&triggered.also_queued);
        Ok(triggered)
    }

    /// Lets each due job's planner decide against the catalog's counts and writes what it
    /// decided (see [`slots`]).
    /// `node_id` is the deciding node, whose next run of each job is recorded when it changed.
    pub async fn decide_due(
        &self,
        node_id: i64,
        due: Vec<DueJob>,
        now: i64,
    ) -> Result<Decided, CatalogError> {
        if let Some(pg) = self.postgres() {
            return pg
                .off_thread(move |pg| pg.decide_due(node_id, due, now))
                .await;
        }
        self.call("recording due slots", move |c| {
            slots::decide_due(c, node_id, due, now)
        })
        .await
    }

    /// Records when jobs run next as `node_id` plans them (`job_activation.next_run_at`), in
    /// one transaction.
    pub async fn record_next_runs(
        &self,
        node_id: i64,
        next: Vec<NextRun>,
    ) -> Result<(), CatalogError> {
        if let Some(pg) = self.postgres() {
            return pg
                .off_thread(move |pg| pg.record_next_runs(node_id, next))
                .await;
        }
        self.call("recording next runs", move |c| {
            slots::record_next_runs(c, node_id, &next)
        })
        .await
    }

    /// Records one health sample's statistics.
    pub async fn record_stats(
        &self,
        node_id: i64,
        at: i64,
        stats: Vec<StatSample>,
    ) -> Result<(), CatalogError> {
        if let Some(pg) = self.postgres() {
            return pg
                .off_thread(move |pg| pg.record_stats(node_id, at, stats))
                .await;
        }
        self.call("recording statistics", move |c| {
            upkeep::record_stats(c, node_id, at, &stats)
        })
        .await
    }

    /// Like [`DbWriter::record_stats`], for blocking code.
    pub fn record_stats_blocking(
        &self,
        node_id: i64,
        at: i64,
        stats: Vec<StatSample>,
    ) -> Result<(), CatalogError> {
        if let Some(pg) = self.postgres() {
            return pg.record_stats(node_id, at, stats);
        }
        self.call_blocking("recording statistics", move |c| {
            upkeep::record_stats(c, node_id, at, &stats)
        })
    }

    /// One policy step: the sample's statistics and the decisions' catalog part (states,
    /// stretch factors, instances, the decision log), together. `steps` holds the decisions of
    /// this step last, after those of earlier steps whose write failed (a full disk), each with
    /// the context it was decided in.
    pub async fn record_policy_step(
        &self,
        node_id: i64,
        at: i64,
        stats: Vec<StatSample>,
        steps: Vec<DecidedStep>,
    ) -> Result<(), CatalogError> {
        if let Some(pg) = self.postgres() {
            return pg
                .off_thread(move |pg| pg.record_policy_step(node_id, at, stats, steps))
                .await;
        }
        self.call("recording a policy step", move |c| {
            policy_step_in(c, node_id, at, &stats, &steps)
        })
        .await
    }

    /// Reads the node's job activations and writes the changes `decide` makes of them, in one
    /// transaction (the start-up minimum, jobs new to the node): `decide` is the pure part.
    pub async fn settle_activations<F>(
        &self,
        node_id: i64,
        now: i64,
        decide: F,
    ) -> Result<Vec<ActivationChange>, CatalogError>
    where
        F: FnOnce(&[JobActivation]) -> Vec<ActivationChange> + Send + 'static,
    {
        if let Some(pg) = self.postgres() {
            // Called once: a retried transaction reuses the first answer's changes.
            let mut decide = Some(decide);
            let mut first: Option<Vec<ActivationChange>> = None;
            return pg
                .off_thread(move |pg| {
                    pg.settle_activations(node_id, now, move |jobs| {
                        if let Some(decide) = decide.take() {
                            first = Some(decide(jobs));
                        }
                        first.clone().unwrap_or_default()
                    })
                })
                .await;
        }
        self.call("settling job activations", move |c| {
            settle_in(c, node_id, now, decide)
        })
        .await
    }

    /// Writes whether the node's writes are paused.
    pub async fn set_writes_paused(&self, node_id: i64, paused: bool) -> Result<(), CatalogError> {
        if let Some(pg) = self.postgres() {
            return pg
                .off_thread(move |pg| pg.set_writes_paused(node_id, paused))
                .await;
        }
        self.call("recording the write pause", move |c| {
            activation::set_writes_paused(c, node_id, paused)
        })
        .await
    }

    /// Renews the node's tenure and the leases of the runs it holds running (to `now +
    /// ttl_ms`; on PostgreSQL the node's heartbeat is its runs' lease, with the TTL it
    /// stated) and takes the requests of idle nodes to give runs back ([`Beat::Held`]), or
    /// finds who holds the name now ([`Beat::Lost`]).
    pub async fn heartbeat(
        &self,
        lease: NodeLease,
        now: i64,
        ttl_ms: i64,
    ) -> Result<Beat, CatalogError> {
        if let Some(pg) = self.postgres() {
            return pg
                .off_thread(move |pg| match pg.heartbeat(lease, now)? {
                    Some(asks) => Ok(Beat::Held(asks)),
                    None => Ok(Beat::Lost(pg.holder(lease.node_id)?)),
                })
                .await;
        }
        self.call("renewing the node's heartbeat", move |c| {
            if node::heartbeat(c, lease, now, ttl_ms)? {
                Ok(Beat::Held(sharing::take(c, lease.node_id)?))
            } else {
                Ok(Beat::Lost(node::holder(c, lease.node_id)?))
            }
        })
        .await
    }

    /// Sweeps the nodes sharing the catalog whose heartbeat is older than their lease TTL:
    /// fences them and recovers their runs whose leases expired ([`node::sweep`]); the node
    /// `fence` holds must still hold its name (else [`CatalogError::Fenced`]).
    pub async fn sweep(&self, fence: NodeLease, now: i64) -> Result<Vec<Swept>, CatalogError> {
        if let Some(pg) = self.postgres() {
            return pg.off_thread(move |pg| pg.sweep(fence, now)).await;
        }
        self.call("sweeping dead nodes", move |c| node::sweep(c, fence, now))
            .await
    }

    /// The queue's upkeep after each sweep, in one transaction: ends `expired` the queued runs
    /// past their deadline that no claim took ([`waiting::expire_overdue`]: their jobs' names, one
    /// per run) and ages the queued runs of jobs with an aging rate ([`waiting::age_queued`]:
    /// how many moved up).
    pub async fn queue_upkeep(&self, now: i64) -> Result<(Vec<String>, usize), CatalogError> {
        fn upkeep(mut c: impl Sql, now: i64) -> Result<(Vec<String>, usize), CatalogError> {
            let expired = waiting::expire_overdue(&mut c, now)?;
            Ok((expired, waiting::age_queued(&mut c, now)?))
        }
        if let Some(pg) = self.postgres() {
            return pg
                .off_thread(move |pg| pg.transact(move |tx| upkeep(tx, now)))
                .await;
        }
        self.call("the queue's upkeep", move |c| upkeep(c, now))
            .await
    }

    /// Gives the node name up at a clean stop (if this process still holds it).
    pub async fn release_node(&self, lease: NodeLease) -> Result<(), CatalogError> {
        if let Some(pg) = self.postgres() {
            return pg.off_thread(move |pg| pg.release_node(lease)).await;
        }
        self.call("releasing the node name", move |c| {
            node::release_node(c, lease)
        })
        .await
    }

    /// Runs a sql job's statement on this writer's database (a data object's).
    pub async fn execute_sql(&self, sql: String, params: Vec<Json>) -> Result<Json, CatalogError> {
        if self.postgres().is_some() {
            return Err(not_on_postgres("a sql job on the catalog itself"));
        }
        self.call("running a sql job's statement", move |c| {
            super::sql_job::execute(c, &sql, &params)
        })
        .await
    }

    /// Fails runs still `running` past their timeout plus `grace_ms` (blocking).
    pub fn fail_stuck_runs(&self, now: i64, grace_ms: i64) -> Result<usize, CatalogError> {
        if let Some(pg) = self.postgres() {
            return pg.fail_stuck_runs(now, grace_ms);
        }
        self.call_blocking("failing stuck runs", move |c| {
            upkeep::fail_stuck_runs(c, now, grace_ms)
        })
    }

    /// Deletes finished runs older than `before` (blocking).
    pub fn prune_runs(&self, before: i64) -> Result<usize, CatalogError> {
        if let Some(pg) = self.postgres() {
            return pg.prune_runs(before);
        }
        self.call_blocking("pruning run history", move |c| {
            upkeep::prune_runs(c, before)
        })
    }

    /// Deletes statistics older than `before` (blocking).
    pub fn prune_stats(&self, before: i64) -> Result<usize, CatalogError> {
        if let Some(pg) = self.postgres() {
            return pg.prune_stats(before);
        }
        self.call_blocking("pruning statistics", move |c| {
            upkeep::prune_stats(c, before)
        })
    }

    /// Deletes rows of `table` whose `time_field` is older than `before` (blocking).
    pub fn prune_table(
        &self,
        table: String,
        time_field: String,
        before: i64,
    ) -> Result<usize, CatalogError> {
        if self.postgres().is_some() {
            return Err(not_on_postgres("pruning an object kept in the catalog"));
        }
        self.call_blocking("pruning an object's rows", move |c| {
            upkeep::prune_table(c, &table, &time_field, before)
        })
    }
}
