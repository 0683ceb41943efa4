//! Activation state per node: which jobs a node runs now (active, standby, or paused while
//! writes are), how far it stretched each job's period, how many instances it runs of each
//! processor, operator pins, the policy's decision log, and whether the node has paused data
//! writes.
//!
//! Invariant: every change of a job's activation is written together with the decision that
//! caused it (same transaction, by the caller's writer op); the decision log is only appended to.

use std::collections::HashMap;

use serde::Serialize;

use super::CatalogError;
use super::sql::{Fields, Query, Sql};
use crate::model::{ActivationState, Pin};
use crate::policy::{Action, Decision};

/// A job as the policy sees it on one node.
#[derive(Debug, Clone, PartialEq)]
pub struct JobActivation {
    /// `job_id`.
    pub job_id: i64,
    /// Name.
    pub name: String,
    /// Priority.
    pub priority: i64,
    /// Part of the minimum.
    pub required: bool,
    /// Operator pin on this node.
    pub pin: Option<Pin>,
    /// Current state on this node (`None` before the node first decided).
    pub state: Option<ActivationState>,
    /// Writes at least one data object.
    pub writes_data: bool,
    /// In a maintenance group.
    pub maintenance: bool,
    /// The factor this node stretched its period by (1: as scheduled).
    pub stretch: u32,
    /// How far its period may be stretched (1 for jobs without a recurring schedule).
    pub stretch_max: u32,
    /// Its kind of schedule, for the elapsed-time statistics per kind.
    pub schedule_kind: ScheduleKind,
    /// The processor that runs it.
    pub processor_id: i64,
    /// The memory a run of it declares it may use (`payload.limits.memory`), bytes.
    pub memory_limit: Option<u64>,
}

/// A job's kind of schedule, as the spec's `job_processor.stat_elapsed_time_*` statistics
/// group them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ScheduleKind {
    /// `run_always`.
    RunAlways,
    /// `run_every`.
    RunEvery,
    /// `run_on_the` (hourly).
    RunOnThe,
    /// `run_at` or `run_date` (a daily time, or a date gate).
    RunDate,
    /// `cron`.
    Cron,
    /// No schedule: runs only when triggered.
    OnDemand,
}

const SELECT_VIEWS: Query = Query::each(
    views_sql!("json_each(p.nodes)", "?1"),
    views_sql!("jsonb_array_elements_text(p.nodes::jsonb)", "$1"),
);

/// The job views' statement, `$nodes` the list of a processor's node names as a table of
/// `value`s, `$node` the node id's placeholder.
macro_rules! views_sql {
    ($nodes:literal, $node:literal) => {
        concat!("SELECT j.job_id, j.job_name, j.priority, j.required, a.pinned, a.state,
    EXISTS (SELECT 1 FROM job_object jo WHERE jo.job_id = j.job_id), coalesce(g.maintenance, 0),
    coalesce(a.stretch, 1), j.stretch_max,
    CASE WHEN j.run_always = 1 THEN 'always' WHEN j.cron IS NOT NULL AND j.cron <> '' THEN 'cron'
         WHEN j.run_every IS NOT NULL THEN 'every' WHEN j.run_on_the IS NOT NULL THEN 'on_the'
         WHEN (j.run_at IS NOT NULL AND j.run_at <> '') OR (j.run_date IS NOT NULL AND j.run_date <> '')
         THEN 'date' ELSE 'none' END, j.processor_id, j.job_payload, t.job_type
    FROM job j
    JOIN job_type t ON t.job_type_id = j.job_type_id
    JOIN job_processor p ON p.processor_id = j.processor_id
    LEFT JOIN job_group g ON g.job_group_id = j.job_group_id
    LEFT JOIN job_activation a ON a.job_id = j.job_id AND a.node_id = ", $node, "
    WHERE j.status = 1 AND p.status = 1
      -- A processor that names its nodes: the others neither run nor activate its jobs.
      AND (p.nodes IS NULL OR EXISTS (SELECT 1 FROM ", $nodes, " e
           JOIN node n ON n.node_name = e.value WHERE n.node_id = ", $node, "))
    ORDER BY j.priority DESC, j.job_id")
    };
}
use views_sql;

/// Every enabled job on an enabled processor (local or remote) that `node_id` may run, with
/// its activation on `node_id`.
pub fn job_activations(mut c: impl Sql, node_id: i64) -> Result<Vec<JobActivation>, CatalogError> {
    let mut jobs = c.rows(&SELECT_VIEWS, &[node_id.into()], |r| {
        let pin = r.opt_text(4)?;
        let state = r.opt_text(5)?;
        Ok(JobActivation {
            job_id: r.int(0)?,
            name: r.text(1)?,
            priority: r.int(2)?,
            required: r.flag(3)?,
            pin: pin.as_deref().and_then(Pin::parse),
            state: state.as_deref().and_then(ActivationState::parse),
            writes_data: r.flag(6)?,
            maintenance: r.flag(7)?,
            stretch: r.int(8)?.clamp(1, u32::MAX as i64) as u32,
            stretch_max: r.int(9)?.clamp(1, u32::MAX as i64) as u32,
            schedule_kind: match r.text(10)?.as_str() {
                "always" => ScheduleKind::RunAlways,
                "cron" => ScheduleKind::Cron,
                "every" => ScheduleKind::RunEvery,
                "on_the" => ScheduleKind::RunOnThe,
                "date" => ScheduleKind::RunDate,
                _ => ScheduleKind::OnDemand,
            },
            processor_id: r.int(11)?,
            // A command's declared limits (another type's payload is its input); a payload
            // the import validated, one written otherwise declares nothing.
            memory_limit: if r.text(13)? == "command" {
                serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(&r.text(12)?)
                    .ok()
                    .and_then(|p| crate::jobconf::limits::memory_limit(&p).ok().flatten())
            } else {
                None
            },
        })
    })?;
    for j in &mut jobs {
        // Only a recurring job has a period to stretch.
        if j.schedule_kind == ScheduleKind::OnDemand {
            j.stretch_max = 1;
        }
    }
    Ok(jobs)
}

impl ScheduleKind {
    /// The `stat_type` of the elapsed time of its runs per processor, summed per minute: the
    /// spec's four names, and two of ours for cron and on-demand jobs.
    pub fn elapsed_stat(self) -> &'static str {
        match self {
            ScheduleKind::RunAlways => "job_processor.stat_elapsed_time_sum_run_always_minute",
            ScheduleKind::RunEvery => "job_processor.stat_elapsed_time_run_every_sum",
            ScheduleKind::RunOnThe => "job_processor.stat_elapsed_time_run_on_the_sum",
            ScheduleKind::RunDate => "job_processor.stat_elapsed_time_run_date_sum",
            ScheduleKind::Cron => "job_processor.stat_elapsed_time_cron_sum",
            ScheduleKind::OnDemand => "job_processor.stat_elapsed_time_on_demand_sum",
        }
    }
}

const UPDATE_STRETCH: Query = Query::same(
    "UPDATE job_activation SET stretch = ?3, reason = ?4, changed_at = ?5
    WHERE job_id = ?1 AND node_id = ?2",
);

/// Sets the factor `node_id` stretches the job's period by, with the reason.
pub fn set_stretch(
    mut c: impl Sql,
    node_id: i64,
    job_id: i64,
    factor: u32,
    reason: &str,
    now: i64,
) -> Result<(), CatalogError> {
    c.exec(
        &UPDATE_STRETCH,
        &[
            job_id.into(),
            node_id.into(),
            i64::from(factor.max(1)).into(),
            reason.into(),
            now.into(),
        ],
    )?;
    Ok(())
}

const HOLD_FOR_WRITES: Query = Query::same(
    "UPDATE job_activation SET state = ?3, reason = ?4, changed_at = ?5
    WHERE job_id = ?1 AND node_id = ?2 AND state IN ('active', 'paused')",
);

/// Holds (`paused`) or lets go (`active`) an active job while writes are paused.
pub fn set_held(
    mut c: impl Sql,
    node_id: i64,
    job_id: i64,
    held: bool,
    reason: &str,
    now: i64,
) -> Result<(), CatalogError> {
    let state = if held {
        ActivationState::Paused
    } else {
        ActivationState::Active
    };
    c.exec(
        &HOLD_FOR_WRITES,
        &[
            job_id.into(),
            node_id.into(),
            state.as_str().into(),
            reason.into(),
            now.into(),
        ],
    )?;
    Ok(())
}

const UPSERT_INSTANCES: Query = Query::same(
    "INSERT INTO processor_activation (processor_id, node_id, instances, reason, changed_at)
    VALUES (?1, ?2, ?3, ?4, ?5)
    ON CONFLICT (processor_id, node_id) DO UPDATE SET instances = excluded.instances,
        reason = excluded.reason, changed_at = excluded.changed_at",
);

/// Records how many instances `node_id` runs of a processor, with the reason.
pub fn set_instances(
    mut c: impl Sql,
    node_id: i64,
    processor_id: i64,
    instances: u32,
    reason: &str,
    now: i64,
) -> Result<(), CatalogError> {
    c.exec(
        &UPSERT_INSTANCES,
        &[
            processor_id.into(),
            node_id.into(),
            i64::from(instances.max(1)).into(),
            reason.into(),
            now.into(),
        ],
    )?;
    Ok(())
}

/// The instances `node_id` runs of each processor, by processor id (processors without a row
/// run their own `instances`).
pub fn instances(mut c: impl Sql, node_id: i64) -> Result<HashMap<i64, u32>, CatalogError> {
    const SELECT: Query =
        Query::same("SELECT processor_id, instances FROM processor_activation WHERE node_id = ?1");
    let rows = c.rows(&SELECT, &[node_id.into()], |r| {
        Ok((r.int(0)?, r.int(1)?.clamp(1, u32::MAX as i64) as u32))
    })?;
    Ok(rows.into_iter().collect())
}

/// Whether `node_id` has paused data writes.
pub fn writes_paused(mut c: impl Sql, node_id: i64) -> Result<bool, CatalogError> {
    const SELECT: Query = Query::same("SELECT writes_paused FROM node WHERE node_id = ?1");
    Ok(c.row(&SELECT, &[node_id.into()], |r| r.flag(0))?
        .unwrap_or(false))
}

const UPSERT_STATE: Query = Query::same(
    "INSERT INTO job_activation (job_id, node_id, state, reason, changed_at)
    VALUES (?1, ?2, ?3, ?4, ?5)
    ON CONFLICT (job_id, node_id) DO UPDATE SET state = excluded.state,
        reason = excluded.reason, changed_at = excluded.changed_at",
);

/// Sets a job's state on a node, with the reason.
pub fn set_state(
    mut c: impl Sql,
    node_id: i64,
    job_id: i64,
    state: ActivationState,
    reason: &str,
    now: i64,
) -> Result<(), CatalogError> {
    c.exec(
        &UPSERT_STATE,
        &[
            job_id.into(),
            node_id.into(),
            state.as_str().into(),
            reason.into(),
            now.into(),
        ],
    )?;
    Ok(())
}

// ?3 is the state for a new row; ?7 the state to set on an existing one (NULL: keep it).
const UPSERT_PIN: &str =
    "INSERT INTO job_activation (job_id, node_id, state, pinned, reason, changed_at)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6)
    ON CONFLICT (job_id, node_id) DO UPDATE SET pinned = excluded.pinned,
        state = coalesce(?7, job_activation.state), reason = excluded.reason, changed_at = excluded.changed_at";

// On PostgreSQL a transaction that reads a node's activations and writes them back (a settle,
// a policy step, a pin) holds this lock for the node until it ends: at READ COMMITTED a settle
// that read a job as new would otherwise overwrite a pin committed meanwhile (seen: a job
// pinned inactive admitted active). SQLite's write transactions are serialized already.
const LOCK_NODE: Query = Query::each(
    "SELECT ?1",
    "SELECT pg_advisory_xact_lock(1786143075, $1::integer)",
);

/// Serializes the transactions that change node `node_id`'s activations (see [`LOCK_NODE`]).
pub fn lock_node(mut c: impl Sql, node_id: i64) -> Result<(), CatalogError> {
    c.rows(&LOCK_NODE, &[node_id.into()], |_| Ok(()))?;
    Ok(())
}

/// The pin of job `job_id` on node `node_id`, as stored (`active`, `inactive`), if any.
pub fn pin_of(mut c: impl Sql, node_id: i64, job_id: i64) -> Result<Option<String>, CatalogError> {
    let pin = c.row(
        &Query::same(SELECT_PIN),
        &[job_id.into(), node_id.into()],
        |r| r.opt_text(0),
    )?;
    Ok(pin.flatten())
}

const SELECT_PIN: &str = "SELECT pinned FROM job_activation WHERE job_id = ?1 AND node_id = ?2";

// Whether the node's writes are paused and the job is outside maintenance groups: then the
// node claims none of its runs, and a pin active leaves it `paused`.
const HELD_BY_PAUSE: &str =
    "SELECT coalesce((SELECT writes_paused FROM node WHERE node_id = ?1), 0) = 1
    AND NOT EXISTS (SELECT 1 FROM job j JOIN job_group g ON g.job_group_id = j.job_group_id
                    WHERE j.job_id = ?2 AND g.maintenance = 1)";

/// Pins a job active or inactive on a node (or removes the pin); a pin takes effect at once.
/// A job pinned active while the node's writes are paused is `paused` until they resume (the
/// node claims only maintenance runs meanwhile; the resume lets it go with the others).
pub fn set_pin(
    mut c: impl Sql,
    node_id: i64,
    job_id: i64,
    pin: Option<Pin>,
    now: i64,
) -> Result<(), CatalogError> {
    let held = pin == Some(Pin::Active)
        && c.row(
            &Query::same(HELD_BY_PAUSE),
            &[node_id.into(), job_id.into()],
            |r| r.flag(0),
        )?
        .unwrap_or(false);
    let (state, reason) = match pin {
        Some(Pin::Active) if held => (
            Some(ActivationState::Paused.as_str()),
            "pinned active by the operator; held while writes are paused",
        ),
        Some(Pin::Active) => (
            Some(ActivationState::Active.as_str()),
            "pinned active by the operator",
        ),
        Some(Pin::Inactive) => (
            Some(ActivationState::Standby.as_str()),
            "pinned inactive by the operator",
        ),
        None => (None, "pin removed by the operator; the policy decides"),
    };
    // A new row needs a state; without a pin the policy sets it at its next step.
    let initial = state.unwrap_or(ActivationState::Standby.as_str());
    c.exec(
        &Query::same(UPSERT_PIN),
        &[
            job_id.into(),
            node_id.into(),
            initial.into(),
            pin.map(Pin::as_str).into(),
            reason.into(),
            now.into(),
            state.into(),
        ],
    )?;
    Ok(())
}

/// Every action the decision log holds, as its `CHECK` list has them: the policy's
/// ([`crate::policy::Action::NAMES`]), then an operator's pauses and resumes (`catalog::pause`).
pub fn decision_actions() -> Vec<&'static str> {
    let mut all = crate::policy::Action::NAMES.to_vec();
    all.extend(["pause", "resume"]);
    all
}

const INSERT_DECISION: Query = Query::same(
    "INSERT INTO decision
    (node_id, at, action, job_id, processor_id, subject, reason, evidence, cause)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
);

/// A decision to log.
#[derive(Debug, Clone)]
pub struct NewDecision<'a> {
    /// When.
    pub at: i64,
    /// One of `policy::Action::NAMES`.
    pub action: &'a str,
    /// The job concerned.
    pub job_id: Option<i64>,
    /// The processor concerned.
    pub processor_id: Option<i64>,
    /// Its name.
    pub subject: Option<&'a str>,
    /// Why, in words.
    pub reason: &'a str,
    /// The samples behind it (JSON).
    pub evidence: Option<String>,
    /// `health`, `pin`, `minimum` or `operator`.
    pub cause: &'a str,
}

/// Appends a decision to the node's log.
pub fn record_decision(
    mut c: impl Sql,
    node_id: i64,
    d: &NewDecision<'_>,
) -> Result<(), CatalogError> {
    c.exec(
        &INSERT_DECISION,
        &[
            node_id.into(),
            d.at.into(),
            d.action.into(),
            d.job_id.into(),
            d.processor_id.into(),
            d.subject.into(),
            d.reason.into(),
            (&d.evidence).into(),
            d.cause.into(),
        ],
    )?;
    Ok(())
}

/// What the runtime knows beside a policy decision when it carries it out.
#[derive(Debug, Default, Clone)]
pub struct DecisionContext {
    /// Job names by id (subjects).
    pub jobs: HashMap<i64, String>,
    /// Processor names by id.
    pub processors: HashMap<i64, String>,
    /// Jobs that an activation makes `paused` rather than `active` (they write data objects
    /// and writes are paused).
    pub held_on_activation: std::collections::BTreeSet<i64>,
    /// The instance count each instance decision leaves its processor with.
    pub instances: HashMap<i64, u32>,
}

impl DecisionContext {
    /// The name a decision's log row gives its subject: the job's or the processor's, or the
    /// jobs a writes pause holds or lets go.
    pub fn subject_of(&self, d: &Decision) -> Option<String> {
        match d.action {
            Action::Activate { job_id }
            | Action::Deactivate { job_id }
            | Action::Stretch { job_id, .. }
            | Action::Unstretch { job_id, .. }
            | Action::Hold { job_id } => self.jobs.get(&job_id).cloned(),
            Action::AddInstance { processor_id } | Action::RemoveInstance { processor_id } => {
                self.processors.get(&processor_id).cloned()
            }
            Action::PauseWrites | Action::ResumeWrites => {
                let names: Vec<&str> = d
                    .jobs
                    .iter()
                    .filter_map(|j| self.jobs.get(j).map(String::as_str))
                    .collect();
                (!names.is_empty()).then(|| names.join(", "))
            }
        }
    }
}

/// Carries out one policy decision's catalog part — a job's state or stretch, a processor's
/// instances, the node's paused writes — and logs it with its cause, in the caller's
/// transaction (the invariant: a change is written together with the decision that caused
/// it).
pub fn apply_decision(
    mut conn: impl Sql,
    node_id: i64,
    d: &Decision,
    cx: &DecisionContext,
) -> Result<(), CatalogError> {
    let (job_id, processor_id) = match d.action {
        Action::Activate { job_id } => {
            let state = if cx.held_on_activation.contains(&job_id) {
                ActivationState::Paused
            } else {
                ActivationState::Active
            };
            set_state(&mut conn, node_id, job_id, state, &d.reason, d.at)?;
            (Some(job_id), None)
        }
        Action::Deactivate { job_id } => {
            set_state(
                &mut conn,
                node_id,
                job_id,
                ActivationState::Standby,
                &d.reason,
                d.at,
            )?;
            super::queue::skip_queued_slots(
                &mut conn,
                job_id,
                &format!("skipped: job deactivated ({})", d.reason),
                d.at,
            )?;
            (Some(job_id), None)
        }
        Action::Stretch { job_id, factor } | Action::Unstretch { job_id, factor } => {
            set_stretch(&mut conn, node_id, job_id, factor, &d.reason, d.at)?;
            (Some(job_id), None)
        }
        Action::Hold { job_id } => (Some(job_id), None),
        Action::AddInstance { processor_id } | Action::RemoveInstance { processor_id } => {
            if let Some(&n) = cx.instances.get(&processor_id) {
                set_instances(&mut conn, node_id, processor_id, n, &d.reason, d.at)?;
            }
            (None, Some(processor_id))
        }
        Action::PauseWrites | Action::ResumeWrites => {
            let paused = d.action == Action::PauseWrites;
            set_writes_paused(&mut conn, node_id, paused)?;
            for &job in &d.jobs {
                set_held(&mut conn, node_id, job, paused, &d.reason, d.at)?;
            }
            (None, None)
        }
    };
    let subject = cx.subject_of(d);
    let row = NewDecision {
        at: d.at,
        action: d.action.as_str(),
        job_id,
        processor_id,
        subject: subject.as_deref(),
        reason: &d.reason,
        evidence: (!d.evidence.is_empty())
            .then(|| serde_json::to_string(&d.evidence).ok())
            .flatten(),
        cause: d.cause.as_str(),
    };
    record_decision(conn, node_id, &row)
}

/// Records whether the node paused data-writing jobs.
pub fn set_writes_paused(mut c: impl Sql, node_id: i64, paused: bool) -> Result<(), CatalogError> {
    const UPDATE: Query = Query::same("UPDATE node SET writes_paused = ?2 WHERE node_id = ?1");
    c.exec(&UPDATE, &[node_id.into(), paused.into()])?;
    Ok(())
}

/// The id of node `name`, creating its row (without a process) if asked.
pub fn node_id(mut c: impl Sql, name: &str, create: bool) -> Result<Option<i64>, CatalogError> {
    if create {
        c.exec(&Query::same(INSERT_NODE_NAME), &[name.into()])?;
    }
    c.row(&Query::same(SELECT_NODE_ID), &[name.into()], |r| r.int(0))
}

const INSERT_NODE_NAME: &str =
    "INSERT INTO node (node_name) VALUES (?1) ON CONFLICT (node_name) DO NOTHING";
const SELECT_NODE_ID: &str = "SELECT node_id FROM node WHERE node_name = ?1";

/// One logged decision.
#[derive(Debug, Clone, Serialize)]
pub struct DecisionRow {
    /// `decision_id`.
    pub id: i64,
    /// The node's name.
    pub node: String,
    /// Epoch ms.
    pub at: i64,
    /// What was decided.
    pub action: String,
    /// The job or processor concerned.
    pub subject: Option<String>,
    /// Why.
    pub reason: String,
    /// The samples behind it (JSON).
    pub evidence: Option<serde_json::Value>,
    /// `health`, `pin`, `minimum` or `operator`.
    pub cause: String,
}

const SELECT_DECISIONS: &str = "SELECT d.decision_id, n.node_name, d.at, d.action, d.subject,
    d.reason, d.evidence, d.cause FROM decision d JOIN node n ON n.node_id = d.node_id
    WHERE (CAST(?1 AS TEXT) IS NULL OR n.node_name = ?1) ORDER BY d.decision_id DESC LIMIT ?2";

/// The newest decisions, of one node or all.
pub fn decisions(
    mut c: impl Sql,
    node: Option<&str>,
    limit: i64,
) -> Result<Vec<DecisionRow>, CatalogError> {
    c.rows(
        &Query::same(SELECT_DECISIONS),
        &[node.into(), limit.into()],
        decision_row,
    )
}

/// A row of the decision log: id, node name, at, action, subject, reason, evidence, cause.
pub(crate) fn decision_row(r: &Fields<'_>) -> Result<DecisionRow, CatalogError> {
    Ok(DecisionRow {
        id: r.int(0)?,
        node: r.text(1)?,
        at: r.int(2)?,
        action: r.text(3)?,
        subject: r.opt_text(4)?,
        reason: r.text(5)?,
        evidence: r.opt_text(6)?.and_then(|e| serde_json::from_str(&e).ok()),
        cause: r.text(7)?,
    })
}

/// Activation of every job on node `name`: job name → (state, pin, reason).
pub type ActivationByJob = HashMap<String, (String, Option<String>, Option<String>)>;

/// Each job's activation on node `name`.
pub fn activation_by_job(mut c: impl Sql, node: &str) -> Result<ActivationByJob, CatalogError> {
    let rows = c.rows(
        &Query::same(SELECT_ACTIVATION_BY_JOB),
        &[node.into()],
        |r| Ok((r.text(0)?, (r.text(1)?, r.opt_text(2)?, r.opt_text(3)?))),
    )?;
    Ok(rows.into_iter().collect())
}

const SELECT_ACTIVATION_BY_JOB: &str = "SELECT j.job_name, a.state, a.pinned, a.reason
    FROM job_activation a JOIN job j ON j.job_id = a.job_id JOIN node n ON n.node_id = a.node_id
    WHERE n.node_name = ?1";
