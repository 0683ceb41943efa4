//! One way to run the catalog's statements on either backend, so that code which differs only
//! in its driver is written once: a [`Query`] is SQLite's text (`?N` placeholders) and, where
//! PostgreSQL's dialect differs, PostgreSQL's (else the same text renumbered `$N`); values are
//! [`Val`]s; rows are read through [`Cols`]. [`Sql`] runs them in the caller's transaction —
//! a SQLite connection here, a PostgreSQL transaction in `postgres::sql`.
//!
//! Invariant: flags are 0/1 integers on both backends (PostgreSQL's booleans, from `EXISTS`,
//! read as 0/1 too), every other integer a 64-bit one.

use rusqlite::Connection;

use super::CatalogError;

/// The columns of a row, as both backends' rows give them.
pub trait Cols {
    /// The backend's error.
    type Error;
    /// An integer column (SQLite INTEGER; PostgreSQL bigint, integer or boolean).
    fn int(&self, i: usize) -> Result<i64, Self::Error>;
    /// A nullable integer column.
    fn opt_int(&self, i: usize) -> Result<Option<i64>, Self::Error>;
    /// A text column.
    fn text(&self, i: usize) -> Result<String, Self::Error>;
    /// A nullable text column.
    fn opt_text(&self, i: usize) -> Result<Option<String>, Self::Error>;
    /// A real number column (SQLite REAL; PostgreSQL double precision).
    fn real(&self, i: usize) -> Result<f64, Self::Error>;
    /// A 0/1 flag.
    fn flag(&self, i: usize) -> Result<bool, Self::Error> {
        Ok(self.int(i)? == 1)
    }
}

impl Cols for rusqlite::Row<'_> {
    type Error = rusqlite::Error;
    fn int(&self, i: usize) -> rusqlite::Result<i64> {
        self.get(i)
    }
    fn opt_int(&self, i: usize) -> rusqlite::Result<Option<i64>> {
        self.get(i)
    }
    fn text(&self, i: usize) -> rusqlite::Result<String> {
        self.get(i)
    }
    fn opt_text(&self, i: usize) -> rusqlite::Result<Option<String>> {
        self.get(i)
    }
    fn real(&self, i: usize) -> rusqlite::Result<f64> {
        self.get(i)
    }
}

/// A row of either backend, its errors as the catalog's (what [`Sql::rows`] hands its reader).
pub type Fields<'a> = dyn Cols<Error = CatalogError> + 'a;

/// A row with the catalog's errors.
pub struct Caught<'a, R: ?Sized>(pub &'a R);

impl<R: Cols + ?Sized> Cols for Caught<'_, R>
where
    R::Error: Into<CatalogError>,
{
    type Error = CatalogError;
    fn int(&self, i: usize) -> Result<i64, CatalogError> {
        self.0.int(i).map_err(Into::into)
    }
    fn opt_int(&self, i: usize) -> Result<Option<i64>, CatalogError> {
        self.0.opt_int(i).map_err(Into::into)
    }
    fn text(&self, i: usize) -> Result<String, CatalogError> {
        self.0.text(i).map_err(Into::into)
    }
    fn opt_text(&self, i: usize) -> Result<Option<String>, CatalogError> {
        self.0.opt_text(i).map_err(Into::into)
    }
    fn real(&self, i: usize) -> Result<f64, CatalogError> {
        self.0.real(i).map_err(Into::into)
    }
}

/// A statement's value, for either backend.
#[derive(Debug, Clone, PartialEq)]
pub enum Val {
    /// An integer, or NULL.
    Int(Option<i64>),
    /// A 0/1 flag.
    Flag(bool),
    /// A real number.
    Real(f64),
    /// Text, or NULL.
    Text(Option<String>),
}

impl rusqlite::ToSql for Val {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        match self {
            Val::Int(v) => v.to_sql(),
            Val::Flag(b) => b.to_sql(),
            Val::Real(v) => v.to_sql(),
            Val::Text(t) => t.to_sql(),
        }
    }
}

impl From<i64> for Val {
    fn from(v: i64) -> Self {
        Val::Int(Some(v))
    }
}

impl From<Option<i64>> for Val {
    fn from(v: Option<i64>) -> Self {
        Val::Int(v)
    }
}

impl From<f64> for Val {
    fn from(v: f64) -> Self {
        Val::Real(v)
    }
}

impl From<bool> for Val {
    fn from(v: bool) -> Self {
        Val::Flag(v)
    }
}

impl From<&str> for Val {
    fn from(v: &str) -> Self {
        Val::Text(Some(v.to_string()))
    }
}

impl From<Option<&str>> for Val {
    fn from(v: Option<&str>) -> Self {
        Val::Text(v.map(str::to_string))
    }
}

impl From<&Option<String>> for Val {
    fn from(v: &Option<String>) -> Self {
        Val::Text(v.clone())
    }
}

impl From<Option<String>> for Val {
    fn from(v: Option<String>) -> Self {
        Val::Text(v)
    }
}

/// A statement: SQLite's text, and PostgreSQL's where it differs.
#[derive(Debug, Clone, Copy)]
pub struct Query {
    /// SQLite's text, `?N` placeholders.
    pub sqlite: &'static str,
    /// PostgreSQL's text (`$N` placeholders); `None`: SQLite's, renumbered.
    pub postgres: Option<&'static str>,
}

impl Query {
    /// A statement both backends take as written (but for the placeholders' sign).
    pub const fn same(sql: &'static str) -> Self {
        Query {
            sqlite: sql,
            postgres: None,
        }
    }

    /// A statement in each dialect.
    pub const fn each(sqlite: &'static str, postgres: &'static str) -> Self {
        Query {
            sqlite,
            postgres: Some(postgres),
        }
    }
}

/// A transaction of either backend.
pub trait Sql {
    /// Runs `q` with `vals`: the rows it changed.
    fn exec(&mut self, q: &Query, vals: &[Val]) -> Result<usize, CatalogError>;
    /// Runs the one-row insert `q` with `vals`: the new row's id. PostgreSQL's text returns
    /// it (`RETURNING`); SQLite's does not (RETURNING would build an ephemeral table at every
    /// call): its connection knows the last id it inserted.
    fn insert(&mut self, q: &Query, vals: &[Val]) -> Result<i64, CatalogError>;
    /// The rows of `q` with `vals`, each read by `read`.
    fn rows<T>(
        &mut self,
        q: &Query,
        vals: &[Val],
        read: impl FnMut(&Fields<'_>) -> Result<T, CatalogError>,
    ) -> Result<Vec<T>, CatalogError>;
    /// The first row of `q`, if any, read by `read`.
    fn row<T>(
        &mut self,
        q: &Query,
        vals: &[Val],
        read: impl FnMut(&Fields<'_>) -> Result<T, CatalogError>,
    ) -> Result<Option<T>, CatalogError> {
        Ok(self.rows(q, vals, read)?.into_iter().next())
    }
}

impl<S: Sql + ?Sized> Sql for &mut S {
    fn exec(&mut self, q: &Query, vals: &[Val]) -> Result<usize, CatalogError> {
        (**self).exec(q, vals)
    }
    fn insert(&mut self, q: &Query, vals: &[Val]) -> Result<i64, CatalogError> {
        (**self).insert(q, vals)
    }
    fn rows<T>(
        &mut self,
        q: &Query,
        vals: &[Val],
        read: impl FnMut(&Fields<'_>) -> Result<T, CatalogError>,
    ) -> Result<Vec<T>, CatalogError> {
        (**self).rows(q, vals, read)
    }
}

/// A transaction of either backend, as the [`Catalog`](super::Catalog)'s verbs run in it: a
/// SQLite connection (a read connection, or the write connection inside `BEGIN IMMEDIATE`) or
/// a PostgreSQL transaction.
pub enum Tx<'a, 'b> {
    /// SQLite.
    Lite(&'a Connection),
    /// PostgreSQL.
    Pg(&'a mut postgres::Transaction<'b>),
}

impl Tx<'_, '_> {
    /// Whether this is a PostgreSQL transaction (for the few answers built differently there).
    pub fn on_postgres(&self) -> bool {
        matches!(self, Tx::Pg(_))
    }

    /// The rows of a statement made for this call (written-in orders and pages: a text that
    /// is not kept among the prepared statements), in this backend's dialect.
    pub fn rows_once<T>(
        &mut self,
        text: &str,
        vals: &[Val],
        read: impl FnMut(&Fields<'_>) -> Result<T, CatalogError>,
    ) -> Result<Vec<T>, CatalogError> {
        match self {
            Tx::Lite(c) => read_rows(&mut c.prepare(text)?, vals, read),
            Tx::Pg(t) => super::postgres::rows_once(t, text, vals, read),
        }
    }
}

impl Sql for Tx<'_, '_> {
    fn exec(&mut self, q: &Query, vals: &[Val]) -> Result<usize, CatalogError> {
        match self {
            Tx::Lite(c) => c.exec(q, vals),
            Tx::Pg(t) => t.exec(q, vals),
        }
    }
    fn insert(&mut self, q: &Query, vals: &[Val]) -> Result<i64, CatalogError> {
        match self {
            Tx::Lite(c) => c.insert(q, vals),
            Tx::Pg(t) => t.insert(q, vals),
        }
    }
    fn rows<T>(
        &mut self,
        q: &Query,
        vals: &[Val],
        read: impl FnMut(&Fields<'_>) -> Result<T, CatalogError>,
    ) -> Result<Vec<T>, CatalogError> {
        match self {
            Tx::Lite(c) => c.rows(q, vals, read),
            Tx::Pg(t) => t.rows(q, vals, read),
        }
    }
}

/// `Sql` for a type whose statements run on the SQLite connection `$conn` of `$this`.
macro_rules! sql_on_connection {
    ($ty:ty, $this:ident => $conn:expr) => {
        impl Sql for $ty {
            fn exec(&mut $this, q: &Query, vals: &[Val]) -> Result<usize, CatalogError> {
                let mut conn: &Connection = $conn;
                conn.exec(q, vals)
            }
            fn insert(&mut $this, q: &Query, vals: &[Val]) -> Result<i64, CatalogError> {
                let mut conn: &Connection = $conn;
                conn.insert(q, vals)
            }
            fn rows<T>(
                &mut $this,
                q: &Query,
                vals: &[Val],
                read: impl FnMut(&Fields<'_>) -> Result<T, CatalogError>,
            ) -> Result<Vec<T>, CatalogError> {
                let mut conn: &Connection = $conn;
                conn.rows(q, vals, read)
            }
        }
    };
}

sql_on_connection!(Connection, self => &*self);
sql_on_connection!(&rusqlite::Transaction<'_>, self => self);

impl Sql for &Connection {
    fn exec(&mut self, q: &Query, vals: &[Val]) -> Result<usize, CatalogError> {
        Ok(self
            .prepare_cached(q.sqlite)?
            .execute(rusqlite::params_from_iter(vals))?)
    }
    fn insert(&mut self, q: &Query, vals: &[Val]) -> Result<i64, CatalogError> {
        self.exec(q, vals)?;
        Ok(self.last_insert_rowid())
    }
    fn rows<T>(
        &mut self,
        q: &Query,
        vals: &[Val],
        read: impl FnMut(&Fields<'_>) -> Result<T, CatalogError>,
    ) -> Result<Vec<T>, CatalogError> {
        read_rows(&mut *self.prepare_cached(q.sqlite)?, vals, read)
    }
}

/// The rows of a SQLite statement with `vals`, each read by `read`.
fn read_rows<T>(
    stmt: &mut rusqlite::Statement<'_>,
    vals: &[Val],
    mut read: impl FnMut(&Fields<'_>) -> Result<T, CatalogError>,
) -> Result<Vec<T>, CatalogError> {
    let mut rows = stmt.query(rusqlite::params_from_iter(vals))?;
    let mut out = Vec::new();
    while let Some(r) = rows.next()? {
        out.push(read(&Caught(r))?);
    }
    Ok(out)
}
