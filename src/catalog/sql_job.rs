//! The statement of a sql job, executed on a data object's connection (never the catalog's).
//!
//! Invariant: parameters are bound, never spliced into the text; a query returns at most
//! `ROW_LIMIT` rows.

use rusqlite::Connection;
use rusqlite::types::{Value, ValueRef};
use serde_json::Value as Json;

use super::CatalogError;

/// Most rows a query returns as its result.
pub const ROW_LIMIT: usize = 1000;

/// Executes `sql` with `params` bound positionally: a query returns its rows, anything else the
/// number of changed rows.
pub fn execute(conn: &Connection, sql: &str, params: &[Json]) -> Result<Json, CatalogError> {
    let mut stmt = conn.prepare(sql)?;
    let values: Vec<Value> = params.iter().map(to_sql).collect();
    let bound = rusqlite::params_from_iter(values.iter());
    if stmt.column_count() == 0 {
        let changes = stmt.execute(bound)?;
        return Ok(serde_json::json!({ "changes": changes }));
    }
    let columns: Vec<String> = stmt.column_names().iter().map(|c| c.to_string()).collect();
    let mut rows = stmt.query(bound)?;
    let mut out = Vec::new();
    let mut truncated = false;
    while let Some(row) = rows.next()? {
        if out.len() == ROW_LIMIT {
            truncated = true;
            break;
        }
        let cells: Vec<Json> = (0..columns.len())
            .map(|i| row.get_ref(i).map(from_sql))
            .collect::<Result<_, _>>()?;
        out.push(Json::Array(cells));
    }
    Ok(serde_json::json!({ "columns": columns, "rows": out, "truncated": truncated }))
}

fn to_sql(v: &Json) -> Value {
    match v {
        Json::Null => Value::Null,
        Json::Bool(b) => Value::Integer(i64::from(*b)),
        Json::Number(n) => n
            .as_i64()
            .map_or_else(|| Value::Real(n.as_f64().unwrap_or(0.0)), Value::Integer),
        Json::String(s) => Value::Text(s.clone()),
        other => Value::Text(other.to_string()),
    }
}

fn from_sql(v: ValueRef<'_>) -> Json {
    match v {
        ValueRef::Null => Json::Null,
        ValueRef::Integer(i) => Json::from(i),
        ValueRef::Real(f) => serde_json::Number::from_f64(f).map_or(Json::Null, Json::Number),
        ValueRef::Text(t) => Json::String(String::from_utf8_lossy(t).into_owned()),
        ValueRef::Blob(b) => Json::String(format!("<{} bytes>", b.len())),
    }
}
