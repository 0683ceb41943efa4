//! Questions the API and `/metrics` ask about a running catalog: the nodes sharing it, stats as
//! bucketed time series and latest values, the queue's depth and lag, activation counts and
//! each job's activation, the policy's decisions.
//!
//! Invariant: read-only, and each question is one bounded query (the series by an index range
//! of `stat_type_time_idx`, at most the buckets the caller allowed).

use serde::Serialize;

use super::sql::{Query, Sql, Val};
use super::{Catalog, CatalogError, activation, stats};

const SELECT_NODES: &str = "SELECT node_name, host, pid, version, started_at, heartbeat_at,
    lease_ttl, fenced_at, fenced_by, stale_completions FROM node ORDER BY node_name";
const SELECT_STAT_TYPES: &str = "SELECT t.stat_type, t.unit,
    (SELECT max(s.sampled_at) FROM stat s WHERE s.stat_type_id = t.stat_type_id)
    FROM stat_type t ORDER BY t.stat_type";
const SELECT_SERIES: Query = Query::same(
    "SELECT (s.sampled_at - ?2) / ?4 AS bucket, avg(s.value),
    min(s.value), max(s.value), count(*)
    FROM stat s JOIN stat_type t ON t.stat_type_id = s.stat_type_id
    WHERE t.stat_type = ?1 AND s.sampled_at >= ?2 AND s.sampled_at < ?3
      AND (CAST(?5 AS TEXT) IS NULL OR s.subject = ?5)
      AND (CAST(?6 AS TEXT) IS NULL OR s.node_id =
          (SELECT node_id FROM node WHERE node_name = ?6))
    GROUP BY bucket ORDER BY bucket",
);
const SELECT_STAT_TYPE: &str = "SELECT unit FROM stat_type WHERE stat_type = ?1";
const SELECT_QUEUE: &str = "SELECT count(*), min(run_after) FROM job_run
    WHERE status = 'queued'";
const SELECT_IN_FLIGHT: &str = "SELECT count(*) FILTER (WHERE status = 'claimed'),
    count(*) FILTER (WHERE status = 'running')
    FROM job_run WHERE (status = 'claimed' OR status = 'running')";
const SELECT_ACTIVATION: &str = "SELECT a.state, count(*) FROM job_activation a
    JOIN node n ON n.node_id = a.node_id WHERE n.node_name = ?1 GROUP BY a.state";

/// A node that shares (or shared) the catalog.
#[derive(Debug, Clone, Serialize)]
pub struct NodeRow {
    /// Its name.
    pub name: String,
    /// Its host.
    pub host: Option<String>,
    /// Its process id while it runs.
    pub pid: Option<i64>,
    /// The jobvisor version it ran.
    pub version: Option<String>,
    /// Epoch ms it started.
    pub started_at: Option<i64>,
    /// Epoch ms of its last heartbeat (none once it stopped).
    pub heartbeat_at: Option<i64>,
    /// The lease TTL it stated, ms: its heartbeat older than this, it is dead.
    pub lease_ttl: i64,
    /// Epoch ms another node's sweep fenced it (cleared when a process takes the name).
    pub fenced_at: Option<i64>,
    /// The node that fenced it.
    pub fenced_by: Option<String>,
    /// Its completions rejected for a stale claim token.
    pub stale_completions: i64,
}

/// A kind of stat, and its unit.
#[derive(Debug, Clone, Serialize)]
pub struct StatTypeRow {
    /// e.g. `device.cpu_used`.
    pub name: String,
    /// e.g. `%`.
    pub unit: Option<String>,
    /// Epoch ms of its newest sample.
    pub latest: Option<i64>,
}

/// One bucket of a series.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Bucket {
    /// Its index from the series' start.
    pub index: i64,
    /// Mean of the samples in it.
    pub avg: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
    /// How many samples.
    pub count: i64,
}

/// Which samples a series covers.
#[derive(Debug, Clone)]
pub struct SeriesFilter<'a> {
    /// The stat type.
    pub stat_type: &'a str,
    /// Epoch ms, inclusive.
    pub from: i64,
    /// Epoch ms, exclusive.
    pub to: i64,
    /// Bucket width, ms (> 0).
    pub step: i64,
    /// Only this subject.
    pub subject: Option<&'a str>,
    /// Only this node's samples.
    pub node: Option<&'a str>,
}

/// The queue as `/metrics` shows it.
#[derive(Debug, Clone, Copy, Default)]
pub struct QueueState {
    /// Queued runs.
    pub queued: i64,
    /// Runs a node claimed and has not started.
    pub claimed: i64,
    /// Runs started and executing (not those claimed only).
    pub running: i64,
    /// Epoch ms the oldest queued run became due.
    pub oldest_due: Option<i64>,
}

impl Catalog {
    /// Every node, by name.
    pub fn nodes(&self) -> Result<Vec<NodeRow>, CatalogError> {
        self.reading(|tx| {
            tx.rows(&Query::same(SELECT_NODES), &[], |r| {
                Ok(NodeRow {
                    name: r.text(0)?,
                    host: r.opt_text(1)?,
                    pid: r.opt_int(2)?,
                    version: r.opt_text(3)?,
                    started_at: r.opt_int(4)?,
                    heartbeat_at: r.opt_int(5)?,
                    lease_ttl: r.int(6)?,
                    fenced_at: r.opt_int(7)?,
                    fenced_by: r.opt_text(8)?,
                    stale_completions: r.int(9)?,
                })
            })
        })
    }

    /// Every stat type.
    pub fn stat_types(&self) -> Result<Vec<StatTypeRow>, CatalogError> {
        self.reading(|tx| {
            tx.rows(&Query::same(SELECT_STAT_TYPES), &[], |r| {
                Ok(StatTypeRow {
                    name: r.text(0)?,
                    unit: r.opt_text(1)?,
                    latest: r.opt_int(2)?,
                })
            })
        })
    }

    /// The unit of a stat type, or `NotFound`.
    pub fn stat_unit(&self, stat_type: &str) -> Result<Option<String>, CatalogError> {
        let stat_type = stat_type.to_string();
        self.reading(move |tx| {
            tx.row(
                &Query::same(SELECT_STAT_TYPE),
                &[stat_type.as_str().into()],
                |r| r.opt_text(0),
            )?
            .ok_or_else(|| super::not_found("stat type", &stat_type))
        })
    }

    /// The non-empty buckets of a series, in time order.
    pub fn series(&self, f: &SeriesFilter<'_>) -> Result<Vec<Bucket>, CatalogError> {
        let vals: [Val; 6] = [
            f.stat_type.into(),
            f.from.into(),
            f.to.into(),
            f.step.into(),
            f.subject.into(),
            f.node.into(),
        ];
        self.reading(move |tx| {
            tx.rows(&SELECT_SERIES, &vals, |r| {
                Ok(Bucket {
                    index: r.int(0)?,
                    avg: r.real(1)?,
                    min: r.real(2)?,
                    max: r.real(3)?,
                    count: r.int(4)?,
                })
            })
        })
    }

    /// Queued and running runs, and when the oldest queued one became due.
    pub fn queue_state(&self) -> Result<QueueState, CatalogError> {
        self.reading(|tx| {
            let (queued, oldest_due) = tx
                .row(&Query::same(SELECT_QUEUE), &[], |r| {
                    Ok((r.int(0)?, r.opt_int(1)?))
                })?
                .unwrap_or((0, None));
            let (claimed, running) = tx
                .row(&Query::same(SELECT_IN_FLIGHT), &[], |r| {
                    Ok((r.int(0)?, r.int(1)?))
                })?
                .unwrap_or((0, 0));
            Ok(QueueState {
                queued,
                claimed,
                running,
                oldest_due,
            })
        })
    }

    /// How many jobs are in each activation state on `node`.
    pub fn activation_counts(&self, node: &str) -> Result<Vec<(String, i64)>, CatalogError> {
        let node = node.to_string();
        self.reading(move |tx| {
            tx.rows(
                &Query::same(SELECT_ACTIVATION),
                &[node.as_str().into()],
                |r| Ok((r.text(0)?, r.int(1)?)),
            )
        })
    }

    /// The policy's decisions, newest first (of one node when `node` is given).
    pub fn decisions(
        &self,
        node: Option<&str>,
        limit: i64,
    ) -> Result<Vec<activation::DecisionRow>, CatalogError> {
        let node = node.map(str::to_string);
        self.reading(move |tx| activation::decisions(tx, node.as_deref(), limit))
    }

    /// Each job's activation (state, pin, reason) on `node`, by job name.
    pub fn activation_by_job(
        &self,
        node: &str,
    ) -> Result<activation::ActivationByJob, CatalogError> {
        let node = node.to_string();
        self.reading(move |tx| activation::activation_by_job(tx, &node))
    }

    /// The latest value of every stat series (of one node when `node` is given).
    pub fn stats_latest(
        &self,
        node: Option<&str>,
    ) -> Result<Vec<stats::SeriesSummary>, CatalogError> {
        let node = node.map(str::to_string);
        self.reading(move |tx| stats::latest(tx, node.as_deref()))
    }

    /// The newest `limit` values of one stat series sampled at or after `since`.
    pub fn stats_series(
        &self,
        stat_type: &str,
        subject: Option<&str>,
        node: Option<&str>,
        since: i64,
        limit: i64,
    ) -> Result<Vec<stats::StatPoint>, CatalogError> {
        let (stat_type, subject, node) = (
            stat_type.to_string(),
            subject.map(str::to_string),
            node.map(str::to_string),
        );
        self.reading(move |tx| {
            stats::series(
                tx,
                &stat_type,
                subject.as_deref(),
                node.as_deref(),
                since,
                limit,
            )
        })
    }
}
