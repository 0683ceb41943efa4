//! `catalog::sql` on PostgreSQL: a row's columns read as the SQLite catalog reads them, the
//! statements' values as PostgreSQL takes them, and a transaction that runs a [`Query`] —
//! its PostgreSQL text, or SQLite's renumbered (`?N` as `$N`, once per statement, prepared once
//! per connection like the hot path's).

use std::collections::HashMap;
use std::sync::Mutex;

use postgres::types::{ToSql, Type};
use postgres::{Row, Transaction};

use super::query;
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

/// The PostgreSQL text of `q`: its own, or SQLite's renumbered, made once per statement.
fn text_of(q: &Query) -> &'static str {
    static RENUMBERED: Mutex<Option<HashMap<&'static str, &'static str>>> = Mutex::new(None);
    if let Some(pg) = q.postgres {
        return pg;
    }
    let mut map = RENUMBERED.lock().unwrap_or_else(|p| p.into_inner());
    map.get_or_insert_with(HashMap::new)
        .entry(q.sqlite)
        // Bounded: one string per statement constant of the program.
        .or_insert_with(|| Box::leak(numbered(q.sqlite).into_boxed_str()))
}

/// A value as PostgreSQL takes it: flags are `integer` columns, other integers `bigint`.
fn pg_value(v: &Val) -> Box<dyn ToSql + Sync> {
    match v {
        Val::Int(n) => Box::new(*n),
        Val::Flag(b) => Box::new(i32::from(*b)),
        Val::Real(v) => Box::new(*v),
        Val::Text(t) => Box::new(t.clone()),
    }
}

fn run(tx: &mut Transaction<'_>, q: &Query, vals: &[Val]) -> Result<Vec<Row>, CatalogError> {
    let boxed: Vec<Box<dyn ToSql + Sync>> = vals.iter().map(pg_value).collect();
    let refs: Vec<&(dyn ToSql + Sync)> = boxed.iter().map(|b| &**b).collect();
    query(tx, text_of(q), &refs)
}

impl Sql for Transaction<'_> {
    fn exec(&mut self, q: &Query, vals: &[Val]) -> Result<usize, CatalogError> {
        let boxed: Vec<Box<dyn ToSql + Sync>> = vals.iter().map(pg_value).collect();
        let refs: Vec<&(dyn ToSql + Sync)> = boxed.iter().map(|b| &**b).collect();
        Ok(super::execute(self, text_of(q), &refs)? as usize)
    }
    fn insert(&mut self, q: &Query, vals: &[Val]) -> Result<i64, CatalogError> {
        let rows = run(self, q, vals)?;
        let row = rows.first().ok_or_else(|| {
            CatalogError::Failed(format!("an insert returned no id: {}", text_of(q)))
        })?;
        Caught(row).int(0)
    }
    fn rows<T>(
        &mut self,
        q: &Query,
        vals: &[Val],
        mut read: impl FnMut(&Fields<'_>) -> Result<T, CatalogError>,
    ) -> Result<Vec<T>, CatalogError> {
        run(self, q, vals)?
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
