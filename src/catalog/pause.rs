//! Pauses: an operator stops new claims of a processor, a job group or a job, on one node or
//! on every node sharing the catalog, without editing its definition. Running runs finish;
//! queued runs wait in the queue; resuming lets them be claimed at once (a PostgreSQL fleet is
//! told through the queue's notification channel, SQLite nodes see the file change).
//!
//! Invariant: a claim reads the pauses in its own transaction ([`paused_for_claim`]), so a
//! pause committed before a claim begins is obeyed by it on every node, on both backends.

use serde::Serialize;

use super::audit::audit_in;
use super::sql::{Query, Sql};
use super::{Catalog, CatalogError};

/// What a pause applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum PauseScope {
    /// Every job of a processor (its runs of any job).
    Processor,
    /// Every job of a job group.
    Group,
    /// One job.
    Job,
}

impl PauseScope {
    /// Its spelling in the catalog, the CLI and the API.
    pub fn as_str(self) -> &'static str {
        match self {
            PauseScope::Processor => "processor",
            PauseScope::Group => "group",
            PauseScope::Job => "job",
        }
    }

    /// From its spelling.
    pub fn parse(s: &str) -> Option<PauseScope> {
        match s {
            "processor" => Some(PauseScope::Processor),
            "group" => Some(PauseScope::Group),
            "job" => Some(PauseScope::Job),
            _ => None,
        }
    }
}

/// A pause as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PauseRow {
    /// What it applies to.
    pub scope: PauseScope,
    /// The processor's, group's or job's name.
    pub target: String,
    /// The node it holds on; `None`: every node.
    pub node: Option<String>,
    /// Who paused it.
    pub paused_by: String,
    /// When, epoch ms.
    pub paused_at: i64,
    /// Why, as given.
    pub reason: Option<String>,
}

/// What a claim of a processor on a node must leave alone.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Paused {
    /// The processor itself is paused here: claim nothing.
    pub processor: bool,
    /// Jobs paused here (by name or by group).
    pub jobs: Vec<i64>,
}

// The node's own pauses and the fleet's: 0 for the processor ?1 itself, else the jobs paused
// by name or group. Cheap while no pause exists (an empty table).
const PAUSED_FOR_CLAIM: Query = Query::same(
    "WITH here AS (
        SELECT scope, target FROM pause
        WHERE node_name = '' OR node_name = (SELECT node_name FROM node WHERE node_id = ?2))
     SELECT 0 FROM here p
     WHERE p.scope = 'processor'
       AND p.target = (SELECT processor_name FROM job_processor WHERE processor_id = ?1)
     UNION ALL
     SELECT j.job_id FROM here p JOIN job j ON j.job_name = p.target WHERE p.scope = 'job'
     UNION ALL
     SELECT j.job_id FROM here p JOIN job_group g ON g.job_group_name = p.target
       JOIN job j ON j.job_group_id = g.job_group_id
     WHERE p.scope = 'group'",
);
const ANY_PAUSE: Query = Query::same("SELECT 1 FROM pause LIMIT 1");
const PAUSE: Query = Query::same(
    "INSERT INTO pause (scope, target, node_name, paused_by, paused_at, reason)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6)
     ON CONFLICT (scope, target, node_name) DO UPDATE SET paused_by = excluded.paused_by,
         paused_at = excluded.paused_at, reason = excluded.reason",
);
const RESUME: Query =
    Query::same("DELETE FROM pause WHERE scope = ?1 AND target = ?2 AND node_name = ?3");
const SELECT_PAUSES: Query = Query::same(
    "SELECT scope, target, node_name, paused_by, paused_at, reason FROM pause
     ORDER BY scope, target, node_name",
);
const PROCESSOR_EXISTS: Query =
    Query::same("SELECT 1 FROM job_processor WHERE processor_name = ?1");
const GROUP_EXISTS: Query = Query::same("SELECT 1 FROM job_group WHERE job_group_name = ?1");
const JOB_EXISTS: Query = Query::same("SELECT 1 FROM job WHERE job_name = ?1");
// A row in the decision log of each node the pause or resume holds on (every node not fenced,
// for the fleet's), naming the processor or job it concerns.
const LOG_DECISION: Query = Query::same(
    "INSERT INTO decision (node_id, at, action, job_id, processor_id, subject, reason, evidence,
                           cause)
     SELECT n.node_id, ?1, ?2,
         CASE WHEN ?3 = 'job' THEN (SELECT job_id FROM job WHERE job_name = ?4) END,
         CASE WHEN ?3 = 'processor'
              THEN (SELECT processor_id FROM job_processor WHERE processor_name = ?4) END,
         ?4, ?5, ?6, 'operator'
     FROM node n WHERE n.fenced_at IS NULL AND (?7 = '' OR n.node_name = ?7)",
);
// Idle processors of every PostgreSQL node claim again; SQLite nodes see the file change.
const WAKE_FLEET: Query = Query::each("SELECT 0", "SELECT pg_notify('jobvisor_queue', 'resumed')");

/// What a claim of `processor_id` by `node_id` must leave alone now.
pub fn paused_for_claim(
    mut c: impl Sql,
    processor_id: i64,
    node_id: i64,
) -> Result<Paused, CatalogError> {
    // Most catalogs hold no pause: one look at the empty table spares each claim the
    // three-part question.
    if c.row(&ANY_PAUSE, &[], |r| r.int(0))?.is_none() {
        return Ok(Paused::default());
    }
    let ids = c.rows(
        &PAUSED_FOR_CLAIM,
        &[processor_id.into(), node_id.into()],
        |r| r.int(0),
    )?;
    let mut paused = Paused::default();
    for id in ids {
        if id == 0 {
            paused.processor = true;
        } else {
            paused.jobs.push(id);
        }
    }
    Ok(paused)
}

/// Every pause, by scope, target and node.
pub fn pauses(mut c: impl Sql) -> Result<Vec<PauseRow>, CatalogError> {
    c.rows(&SELECT_PAUSES, &[], |r| {
        let scope = r.text(0)?;
        let node = r.text(2)?;
        Ok(PauseRow {
            scope: PauseScope::parse(&scope)
                .ok_or_else(|| CatalogError::Corrupt(format!("pause scope `{scope}`")))?,
            target: r.text(1)?,
            node: (!node.is_empty()).then_some(node),
            paused_by: r.text(3)?,
            paused_at: r.int(4)?,
            reason: r.opt_text(5)?,
        })
    })
}

/// Logs a pause (`action` "pause") or resume as a decision of each node it holds on.
#[allow(clippy::too_many_arguments)]
fn log_decision(
    c: &mut impl Sql,
    action: &str,
    scope: PauseScope,
    target: &str,
    node: &str,
    actor: &str,
    reason: Option<&str>,
    at: i64,
) -> Result<(), CatalogError> {
    let where_ = if node.is_empty() {
        "fleet-wide".to_string()
    } else {
        format!("on node `{node}`")
    };
    let done = if action == "pause" {
        "paused"
    } else {
        "resumed"
    };
    let mut why = format!("{} `{target}` {done} {where_} by {actor}", scope.as_str());
    if let Some(r) = reason {
        why.push_str(": ");
        why.push_str(r);
    }
    let evidence = serde_json::json!({
        "scope": scope.as_str(),
        "target": target,
        "node": (!node.is_empty()).then_some(node),
        "by": actor,
        "reason": reason,
    });
    c.exec(
        &LOG_DECISION,
        &[
            at.into(),
            action.into(),
            scope.as_str().into(),
            target.into(),
            why.as_str().into(),
            evidence.to_string().as_str().into(),
            node.into(),
        ],
    )?;
    Ok(())
}

/// Refuses a pause of what does not exist.
fn check_target(c: &mut impl Sql, scope: PauseScope, target: &str) -> Result<(), CatalogError> {
    let (q, kind) = match scope {
        PauseScope::Processor => (&PROCESSOR_EXISTS, "processor"),
        PauseScope::Group => (&GROUP_EXISTS, "job group"),
        PauseScope::Job => (&JOB_EXISTS, "job"),
    };
    match c.row(q, &[target.into()], |r| r.int(0))? {
        Some(_) => Ok(()),
        None => Err(CatalogError::NotFound {
            kind,
            name: target.to_string(),
        }),
    }
}

impl Catalog {
    /// Records `pause` (its target must exist), with an audit row at its time naming who
    /// paused; pausing again replaces who, when and why.
    pub fn pause(&self, pause: PauseRow) -> Result<(), CatalogError> {
        self.writing(move |tx| {
            check_target(tx, pause.scope, &pause.target)?;
            let node = pause.node.clone().unwrap_or_default();
            tx.exec(
                &PAUSE,
                &[
                    pause.scope.as_str().into(),
                    pause.target.as_str().into(),
                    node.as_str().into(),
                    pause.paused_by.as_str().into(),
                    pause.paused_at.into(),
                    pause.reason.clone().into(),
                ],
            )?;
            log_decision(
                tx,
                "pause",
                pause.scope,
                &pause.target,
                &node,
                &pause.paused_by,
                pause.reason.as_deref(),
                pause.paused_at,
            )?;
            let detail = serde_json::json!({
                "scope": pause.scope.as_str(),
                "node": pause.node,
                "reason": pause.reason,
            });
            audit_in(
                tx,
                pause.paused_at,
                &pause.paused_by,
                "pause",
                &pause.target,
                Some(&detail),
            )
        })
    }

    /// Ends the pause of `target` of `scope` on `node` (`None`: the fleet's), as `actor` at
    /// `now`; false when there was none.
    pub fn resume(
        &self,
        scope: PauseScope,
        target: &str,
        node: Option<&str>,
        actor: &str,
        now: i64,
    ) -> Result<bool, CatalogError> {
        let (target, node, actor) = (
            target.to_string(),
            node.map(str::to_string),
            actor.to_string(),
        );
        self.writing(move |tx| {
            let gone = tx.exec(
                &RESUME,
                &[
                    scope.as_str().into(),
                    target.as_str().into(),
                    node.as_deref().unwrap_or("").into(),
                ],
            )?;
            if gone == 0 {
                return Ok(false);
            }
            tx.rows(&WAKE_FLEET, &[], |_| Ok(()))?;
            let here = node.as_deref().unwrap_or("");
            log_decision(tx, "resume", scope, &target, here, &actor, None, now)?;
            let detail = serde_json::json!({ "scope": scope.as_str(), "node": node });
            audit_in(tx, now, &actor, "resume", &target, Some(&detail))?;
            Ok(true)
        })
    }

    /// Every pause.
    pub fn pauses(&self) -> Result<Vec<PauseRow>, CatalogError> {
        self.reading(|tx| pauses(tx))
    }
}
