//! `catalog::sql` on PostgreSQL: a row's columns read as the SQLite catalog reads them, the
//! statements' values as PostgreSQL takes them, and a transaction that runs a [`Query`] —
//! its PostgreSQL text, or SQLite's renumbered (`?N` as `$N`, once per statement, prepared once
//! per connection like the hot path's).

use std::collections::HashMap;
use std::sync::Mutex;

use postgres::types::{ToSql, Type};
use postgres::{Row, Statement, Transaction};

use super::prepared;
use crate::catalog::CatalogError;
use crate::catalog::sql::{Caught, Cols, Fields, Query, Sql, Val};

impl Cols for Row {
    type Error = postgres::Error;
    fn int(&self, i: usize) -> Result<i64, postgres::Error> {
        match *self.columns()[i].type_() {
            // Flags are `integer` columns; `EXISTS` is a boolean.
            Type::INT4 => Ok(i64::from(self.try_get::<_, i32>(i)?)),
            Type::BOOL => Ok(i64::from(self.try_get::<_, bool>(i)?)),
            _ => self.try_get(i),
        }
    }
    fn opt_int(&self, i: usize) -> Result<Option<i64>, postgres::Error> {
        match *self.columns()[i].type_() {
            Type::INT4 => Ok(self.try_get::<_, Option<i32>>(i)?.map(i64::from)),
            Type::BOOL => Ok(self.try_get::<_, Option<bool>>(i)?.map(i64::from)),
            _ => self.try_get(i),
        }
    }
    fn text(&self, i: usize) -> Result<String, postgres::Error> {
        self.try_get(i)
    }
    fn opt_text(&self, i: usize) -> Result<Option<String>, postgres::Error> {
        self.try_get(i)
    }
    fn real(&self, i: usize) -> Result<f64, postgres::Error> {
        match *self.columns()[i].type_() {
            Type::INT8 => Ok(self.try_get::<_, i64>(i)? as f64),
            Type::INT4 => Ok(f64::from(self.try_get::<_, i32>(i)?)),
            _ => self.try_get(i),
        }
    }
}

/// SQLite's `?N` placeholders as PostgreSQL's `$N`.
pub(super) fn numbered(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '?' && chars.peek().is_some_and(char::is_ascii_digit) {
            out.push('$');
        } else {
            out.push(c);
        }
    }
    out
}

/// The PostgreSQL text of `q`: its own, or SQLite's, renumbered (a text built from a SQLite
/// tail may hold `?N` too), made once per statement.
fn text_of(q: &Query) -> &'static str {
    static RENUMBERED: Mutex<Option<HashMap<&'static str, &'static str>>> = Mutex::new(None);
    let text = q.postgres.unwrap_or(q.sqlite);
    if !text.contains('?') {
        return text;
    }
    let mut map = RENUMBERED.lock().unwrap_or_else(|p| p.into_inner());
    map.get_or_insert_with(HashMap::new)
        .entry(text)
        // Bounded: one string per statement constant of the program.
        .or_insert_with(|| Box::leak(numbered(text).into_boxed_str()))
}

/// A value as PostgreSQL takes it for a parameter the server typed `ty`: a statement written
/// once for both backends compares a flag with an `integer` column here and a `bigint` one
/// there, so the value follows the parameter's type rather than its own.
fn pg_value(v: &Val, ty: &Type) -> Box<dyn ToSql + Sync> {
    match (v, ty) {
        (Val::Int(n), &Type::INT4) => Box::new(n.map(|n| n as i32)),
        (Val::Int(n), &Type::INT2) => Box::new(n.map(|n| n as i16)),
        (Val::Int(n), &Type::FLOAT8) => Box::new(n.map(|n| n as f64)),
        (Val::Int(n), &Type::BOOL) => Box::new(n.map(|n| n != 0)),
        (Val::Int(n), &Type::TEXT) => Box::new(n.map(|n| n.to_string())),
        (Val::Int(n), _) => Box::new(*n),
        (Val::Flag(b), &Type::INT8) => Box::new(i64::from(*b)),
        (Val::Flag(b), &Type::BOOL) => Box::new(*b),
        (Val::Flag(b), _) => Box::new(i32::from(*b)),
        (Val::Real(v), &Type::FLOAT4) => Box::new(*v as f32),
        (Val::Real(v), _) => Box::new(*v),
        (Val::Text(t), _) => Box::new(t.clone()),
    }
}

/// The prepared statement of `q` and its values, each as the server typed its parameter.
fn bound(
    tx: &mut Transaction<'_>,
    q: &Query,
    vals: &[Val],
) -> Result<(Statement, Vec<Box<dyn ToSql + Sync>>), CatalogError> {
    let stmt = prepared(tx, text_of(q))?;
    let boxed = vals
        .iter()
        .zip(stmt.params())
        .map(|(v, ty)| pg_value(v, ty))
        .collect();
    Ok((stmt, boxed))
}

/// The rows of `text` (SQLite's placeholders or PostgreSQL's), prepared for this call only.
pub(crate) fn rows_once<T>(
    tx: &mut Transaction<'_>,
    text: &str,
    vals: &[Val],
    mut read: impl FnMut(&Fields<'_>) -> Result<T, CatalogError>,
) -> Result<Vec<T>, CatalogError> {
    let stmt = tx.prepare(&numbered(text))?;
    let boxed: Vec<Box<dyn ToSql + Sync>> = vals
        .iter()
        .zip(stmt.params())
        .map(|(v, ty)| pg_value(v, ty))
        .collect();
    let refs: Vec<&(dyn ToSql + Sync)> = boxed.iter().map(|b| &**b).collect();
    tx.query(&stmt, &refs)?
        .iter()
        .map(|r| read(&Caught(r)))
        .collect()
}

impl Sql for Transaction<'_> {
    fn exec(&mut self, q: &Query, vals: &[Val]) -> Result<usize, CatalogError> {
        let (stmt, boxed) = bound(self, q, vals)?;
        let refs: Vec<&(dyn ToSql + Sync)> = boxed.iter().map(|b| &**b).collect();
        Ok(self.execute(&stmt, &refs)? as usize)
    }
    fn insert(&mut self, q: &Query, vals: &[Val]) -> Result<i64, CatalogError> {
        let ids = self.rows(q, vals, |r| r.int(0))?;
        ids.first().copied().ok_or_else(|| {
            CatalogError::Failed(format!("an insert returned no id: {}", text_of(q)))
        })
    }
    fn rows<T>(
        &mut self,
        q: &Query,
        vals: &[Val],
        mut read: impl FnMut(&Fields<'_>) -> Result<T, CatalogError>,
    ) -> Result<Vec<T>, CatalogError> {
        let (stmt, boxed) = bound(self, q, vals)?;
        let refs: Vec<&(dyn ToSql + Sync)> = boxed.iter().map(|b| &**b).collect();
        self.query(&stmt, &refs)?
            .iter()
            .map(|r| read(&Caught(r)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::numbered;

    #[test]
    fn placeholders_are_renumbered_and_nothing_else_changes() {
        assert_eq!(
            numbered("SELECT ?1, '?', x FROM t WHERE a = ?12"),
            "SELECT $1, '?', x FROM t WHERE a = $12"
        );
    }
}
