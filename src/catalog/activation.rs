//! Activation state per node: which jobs a node runs now, operator pins, the policy's decision
//! log, and whether the node has paused data writes.
//!
//! Invariant: every change of a job's activation is written together with the decision that
//! caused it (same transaction, by the caller's writer op); the decision log is only appended to.

use std::collections::HashMap;

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

use super::CatalogError;
use crate::model::{ActivationState, Pin};

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
}

const SELECT_VIEWS: &str = "SELECT j.job_id, j.job_name, j.priority, j.required, a.pinned, a.state,
    EXISTS (SELECT 1 FROM job_object jo WHERE jo.job_id = j.job_id), coalesce(g.maintenance, 0)
    FROM job j
    JOIN job_processor p ON p.processor_id = j.processor_id
    LEFT JOIN job_group g ON g.job_group_id = j.job_group_id
    LEFT JOIN job_activation a ON a.job_id = j.job_id AND a.node_id = ?1
    WHERE j.status = 1 AND p.status = 1 AND p.ip_address IS NULL
    ORDER BY j.priority DESC, j.job_id";

/// Every enabled job on an enabled local processor, with its activation on `node_id`.
pub fn job_activations(
    conn: &Connection,
    node_id: i64,
) -> Result<Vec<JobActivation>, CatalogError> {
    let mut stmt = conn.prepare_cached(SELECT_VIEWS)?;
    let rows = stmt.query_map([node_id], |r| {
        let pin: Option<String> = r.get(4)?;
        let state: Option<String> = r.get(5)?;
        Ok(JobActivation {
            job_id: r.get(0)?,
            name: r.get(1)?,
            priority: r.get(2)?,
            required: r.get::<_, i64>(3)? == 1,
            pin: pin.as_deref().and_then(Pin::parse),
            state: state.as_deref().and_then(ActivationState::parse),
            writes_data: r.get(6)?,
            maintenance: r.get::<_, i64>(7)? == 1,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

const UPSERT_STATE: &str = "INSERT INTO job_activation (job_id, node_id, state, reason, changed_at)
    VALUES (?1, ?2, ?3, ?4, ?5)
    ON CONFLICT (job_id, node_id) DO UPDATE SET state = excluded.state,
        reason = excluded.reason, changed_at = excluded.changed_at";

/// Sets a job's state on a node, with the reason.
pub fn set_state(
    conn: &Connection,
    node_id: i64,
    job_id: i64,
    state: ActivationState,
    reason: &str,
    now: i64,
) -> Result<(), CatalogError> {
    conn.prepare_cached(UPSERT_STATE)?.execute(params![
        job_id,
        node_id,
        state.as_str(),
        reason,
        now
    ])?;
    Ok(())
}

// ?3 is the state for a new row; ?7 the state to set on an existing one (NULL: keep it).
const UPSERT_PIN: &str =
    "INSERT INTO job_activation (job_id, node_id, state, pinned, reason, changed_at)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6)
    ON CONFLICT (job_id, node_id) DO UPDATE SET pinned = excluded.pinned,
        state = coalesce(?7, state), reason = excluded.reason, changed_at = excluded.changed_at";

/// Pins a job active or inactive on a node (or removes the pin); a pin takes effect at once.
pub fn set_pin(
    conn: &Connection,
    node_id: i64,
    job_id: i64,
    pin: Option<Pin>,
    now: i64,
) -> Result<(), CatalogError> {
    let (state, reason) = match pin {
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
    conn.prepare_cached(UPSERT_PIN)?.execute(params![
        job_id,
        node_id,
        initial,
        pin.map(Pin::as_str),
        reason,
        now,
        state
    ])?;
    Ok(())
}

const INSERT_DECISION: &str = "INSERT INTO decision
    (node_id, at, action, job_id, processor_id, subject, reason, evidence)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";

/// A decision to log.
#[derive(Debug, Clone)]
pub struct NewDecision<'a> {
    /// When.
    pub at: i64,
    /// `activate`, `deactivate`, `add_instance`, `remove_instance`, `pause_writes`, `resume_writes`.
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
}

/// Appends a decision to the node's log.
pub fn record_decision(
    conn: &Connection,
    node_id: i64,
    d: &NewDecision<'_>,
) -> Result<(), CatalogError> {
    conn.prepare_cached(INSERT_DECISION)?.execute(params![
        node_id,
        d.at,
        d.action,
        d.job_id,
        d.processor_id,
        d.subject,
        d.reason,
        d.evidence
    ])?;
    Ok(())
}

/// Records whether the node paused data-writing jobs.
pub fn set_writes_paused(
    conn: &Connection,
    node_id: i64,
    paused: bool,
) -> Result<(), CatalogError> {
    conn.execute(
        "UPDATE node SET writes_paused = ?2 WHERE node_id = ?1",
        params![node_id, paused],
    )?;
    Ok(())
}

/// The id of node `name`, creating its row (without a process) if asked.
pub fn node_id(conn: &Connection, name: &str, create: bool) -> Result<Option<i64>, CatalogError> {
    if create {
        conn.execute(
            "INSERT INTO node (node_name) VALUES (?1) ON CONFLICT (node_name) DO NOTHING",
            [name],
        )?;
    }
    Ok(conn
        .query_row(
            "SELECT node_id FROM node WHERE node_name = ?1",
            [name],
            |r| r.get(0),
        )
        .optional()?)
}

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
}

const SELECT_DECISIONS: &str = "SELECT d.decision_id, n.node_name, d.at, d.action, d.subject,
    d.reason, d.evidence FROM decision d JOIN node n ON n.node_id = d.node_id
    WHERE (?1 IS NULL OR n.node_name = ?1) ORDER BY d.decision_id DESC LIMIT ?2";

/// The newest decisions, of one node or all.
pub fn decisions(
    conn: &Connection,
    node: Option<&str>,
    limit: i64,
) -> Result<Vec<DecisionRow>, CatalogError> {
    let mut stmt = conn.prepare_cached(SELECT_DECISIONS)?;
    let rows = stmt.query_map(params![node, limit], |r| {
        let evidence: Option<String> = r.get(6)?;
        Ok(DecisionRow {
            id: r.get(0)?,
            node: r.get(1)?,
            at: r.get(2)?,
            action: r.get(3)?,
            subject: r.get(4)?,
            reason: r.get(5)?,
            evidence: evidence.and_then(|e| serde_json::from_str(&e).ok()),
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Activation of every job on node `name`: job name → (state, pin, reason).
pub type ActivationByJob = HashMap<String, (String, Option<String>, Option<String>)>;

/// Each job's activation on node `name`.
pub fn activation_by_job(conn: &Connection, node: &str) -> Result<ActivationByJob, CatalogError> {
    let mut stmt = conn.prepare_cached(
        "SELECT j.job_name, a.state, a.pinned, a.reason FROM job_activation a
         JOIN job j ON j.job_id = a.job_id JOIN node n ON n.node_id = a.node_id
         WHERE n.node_name = ?1",
    )?;
    let rows = stmt.query_map([node], |r| {
        Ok((r.get::<_, String>(0)?, (r.get(1)?, r.get(2)?, r.get(3)?)))
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}
