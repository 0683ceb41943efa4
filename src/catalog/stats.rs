//! Reading the measured history back: the `stat` rows as time series, per type and subject,
//! for the CLI (and later the API and the UI's charts).
//!
//! Invariant: reads only; every series is ordered by time, newest first, and bounded by a
//! limit, so a year of samples never comes back whole.

use serde::Serialize;

use super::CatalogError;
use super::sql::{Fields, Query, Sql};

/// One recorded value.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StatPoint {
    /// When it was sampled, epoch ms.
    pub at: i64,
    /// The node that recorded it.
    pub node: Option<String>,
    /// `device.cpu_used`, `object.count_insert`, …
    pub stat_type: String,
    /// Its unit (`%`, `bytes`, `rows`, `ms`, `epoch ms`, …).
    pub unit: Option<String>,
    /// The object, processor or job it is about; `None` for the device.
    pub subject: Option<String>,
    /// The value.
    pub value: f64,
}

/// The latest value of one series, and how many values it holds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeriesSummary {
    /// The newest value.
    pub latest: StatPoint,
    /// How many values the series holds.
    pub count: i64,
}

const SELECT_SERIES: &str = "SELECT s.sampled_at, n.node_name, t.stat_type, t.unit, s.subject,
    s.value FROM stat s JOIN stat_type t USING (stat_type_id) LEFT JOIN node n USING (node_id)
    WHERE t.stat_type = ?1 AND (CAST(?2 AS TEXT) IS NULL OR s.subject = ?2)
      AND (CAST(?3 AS TEXT) IS NULL OR n.node_name = ?3)
      AND s.sampled_at >= ?4
    ORDER BY s.sampled_at DESC, s.stat_id DESC LIMIT ?5";

/// The values of `stat_type` sampled at or after `since` (of one subject and one node when
/// given), newest first, at most `limit`.
pub fn series(
    mut c: impl Sql,
    stat_type: &str,
    subject: Option<&str>,
    node: Option<&str>,
    since: i64,
    limit: i64,
) -> Result<Vec<StatPoint>, CatalogError> {
    let vals = [
        stat_type.into(),
        subject.into(),
        node.into(),
        since.into(),
        limit.into(),
    ];
    c.rows(&Query::same(SELECT_SERIES), &vals, point)
}

// The newest row per (type, subject, node): the stat_type index gives each type's rows in time
// order, so the scan per type is short for recent data.
const SELECT_LATEST: &str = "SELECT s.sampled_at, n.node_name, t.stat_type, t.unit, s.subject,
    s.value, c.n FROM (SELECT stat_type_id, subject, node_id, max(stat_id) AS id, count(*) AS n
                       FROM stat GROUP BY stat_type_id, subject, node_id) c
    JOIN stat s ON s.stat_id = c.id JOIN stat_type t ON t.stat_type_id = c.stat_type_id
    LEFT JOIN node n ON n.node_id = c.node_id
    WHERE (CAST(?1 AS TEXT) IS NULL OR n.node_name = ?1)
    ORDER BY t.stat_type, s.subject, n.node_name";

/// Every series with its latest value (of one node when given), by type and subject.
pub fn latest(mut c: impl Sql, node: Option<&str>) -> Result<Vec<SeriesSummary>, CatalogError> {
    c.rows(&Query::same(SELECT_LATEST), &[node.into()], |r| {
        Ok(SeriesSummary {
            latest: point(r)?,
            count: r.int(6)?,
        })
    })
}

fn point(r: &Fields<'_>) -> Result<StatPoint, CatalogError> {
    Ok(StatPoint {
        at: r.int(0)?,
        node: r.opt_text(1)?,
        stat_type: r.text(2)?,
        unit: r.opt_text(3)?,
        subject: r.opt_text(4)?,
        value: r.real(5)?,
    })
}
