//! Reading the measured history back: the `stat` rows as time series, per type and subject,
//! for the CLI (and later the API and the UI's charts).
//!
//! Invariant: reads only; every series is ordered by time, newest first, and bounded by a
//! limit, so a year of samples never comes back whole.

use rusqlite::{Connection, params};
use serde::Serialize;

use super::CatalogError;

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
    WHERE t.stat_type = ?1 AND (?2 IS NULL OR s.subject = ?2) AND (?3 IS NULL OR n.node_name = ?3)
      AND s.sampled_at >= ?4
    ORDER BY s.sampled_at DESC, s.stat_id DESC LIMIT ?5";

/// The values of `stat_type` sampled at or after `since` (of one subject and one node when
/// given), newest first, at most `limit`.
pub fn series(
    conn: &Connection,
    stat_type: &str,
    subject: Option<&str>,
    node: Option<&str>,
    since: i64,
    limit: i64,
) -> Result<Vec<StatPoint>, CatalogError> {
    let mut stmt = conn.prepare_cached(SELECT_SERIES)?;
    let rows = stmt.query_map(params![stat_type, subject, node, since, limit], point)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

// The newest row per (type, subject, node): the stat_type index gives each type's rows in time
// order, so the scan per type is short for recent data.
const SELECT_LATEST: &str = "SELECT s.sampled_at, n.node_name, t.stat_type, t.unit, s.subject,
    s.value, c.n FROM (SELECT stat_type_id, subject, node_id, max(stat_id) AS id, count(*) AS n
                       FROM stat GROUP BY stat_type_id, subject, node_id) c
    JOIN stat s ON s.stat_id = c.id JOIN stat_type t ON t.stat_type_id = c.stat_type_id
    LEFT JOIN node n ON n.node_id = c.node_id
    WHERE (?1 IS NULL OR n.node_name = ?1)
    ORDER BY t.stat_type, s.subject, n.node_name";

/// Every series with its latest value (of one node when given), by type and subject.
pub fn latest(conn: &Connection, node: Option<&str>) -> Result<Vec<SeriesSummary>, CatalogError> {
    let mut stmt = conn.prepare_cached(SELECT_LATEST)?;
    let rows = stmt.query_map(params![node], |r| {
        Ok(SeriesSummary {
            latest: point(r)?,
            count: r.get(6)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

fn point(r: &rusqlite::Row<'_>) -> rusqlite::Result<StatPoint> {
    Ok(StatPoint {
        at: r.get(0)?,
        node: r.get(1)?,
        stat_type: r.get(2)?,
        unit: r.get(3)?,
        subject: r.get(4)?,
        value: r.get(5)?,
    })
}
