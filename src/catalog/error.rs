//! The catalog layer's one error type: what SQLite, PostgreSQL, the pool or the file system said, a refusal,
//! a missing entry — and, for a storage error, the file and what was being done.

use std::path::{Path, PathBuf};

/// What the server said, when it said something (the driver's own text for a server error is
/// only "db error").
fn postgres_message(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{}: {}", db.severity(), db.message()),
        None => e.to_string(),
    }
}

/// Errors of the catalog layer.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// SQLite reported an error.
    #[error("database: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// PostgreSQL reported an error (a fleet's catalog, `catalog::postgres`).
    #[error("postgres: {}", postgres_message(.0))]
    Postgres(#[from] postgres::Error),
    /// The read pool could not hand out a connection.
    #[error("connection pool: {0}")]
    Pool(#[from] r2d2::Error),
    /// The database folder could not be created.
    #[error("cannot create {path}: {source}")]
    Io {
        /// The folder.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A migration failed or was edited after it was applied.
    #[error("migration: {0}")]
    Migration(String),
    /// A named entry does not exist.
    #[error("{kind} `{name}` does not exist")]
    NotFound {
        /// job, processor, run, …
        kind: &'static str,
        /// The name or id asked for.
        name: String,
    },
    /// A row holds something this build cannot read (e.g. an enum spelling it does not know).
    #[error("corrupt catalog row: {0}")]
    Corrupt(String),
    /// The operation is refused in the current state.
    #[error("{0}")]
    Refused(String),
    /// A value given with the request cannot be taken (a run's params that would override
    /// what a job's payload fixes).
    #[error("{field}: {reason}")]
    Invalid {
        /// What it is, as the request names it (`params.job`).
        field: String,
        /// Why not.
        reason: String,
    },
    /// A write transaction failed as a whole (it could not begin or commit): nothing of it
    /// was kept. A storage failure, not a refusal of what was asked.
    #[error("{0}")]
    Failed(String),
    /// The change conflicts with other rows (an entry that exists, runs that execute).
    #[error("{0}")]
    Conflict(String),
    /// This process no longer holds its node name: another process took it (this one was
    /// stopped or cut off past its heartbeats). It must claim and record nothing more.
    #[error(
        "node {node_id}: the node name was taken by another process (this process held generation {generation})"
    )]
    Fenced {
        /// The node.
        node_id: i64,
        /// The generation this process held it under.
        generation: i64,
    },
    /// The engine's writer is gone or did not answer.
    #[error("{0}")]
    Unavailable(String),
    /// There is no catalog at the path, and the command does not create one.
    #[error("no catalog at {}: create one with `jobvisor init` (or `jobvisor run`, `jobvisor import`)", path.display())]
    NoCatalog {
        /// The path.
        path: PathBuf,
    },
    /// The path holds something that is not a jobvisor catalog; it was not changed.
    #[error("{}: {reason}; refusing to use it as a catalog (nothing was changed)", path.display())]
    NotACatalog {
        /// The path.
        path: PathBuf,
        /// What it is instead.
        reason: String,
    },
    /// The catalog file is damaged (`quick_check` findings or SQLite's corruption error).
    #[error("{}: the catalog is damaged ({detail}); nothing was written to it. Restore it from a backup (the node's `catalog_backup` job keeps some in its data folder) or recover it with `sqlite3 {} .recover`", path.display(), path.display())]
    Damaged {
        /// The file.
        path: PathBuf,
        /// What SQLite found.
        detail: String,
    },
    /// A database file was found damaged while the node worked on it: its writer or a read met
    /// SQLite's corruption error ([`CatalogError::is_damaged`]). Nothing more is written to it
    /// ([`damage::Damage`]).
    #[error("{}: the database file is damaged (found while {doing}: {detail}); nothing more is written to it. Restore it from a backup (the node's `catalog_backup` job keeps some of the catalog in its data folder) or recover it with `sqlite3 {} .recover`", path.display(), path.display())]
    FoundDamaged {
        /// The file.
        path: PathBuf,
        /// What the node was doing.
        doing: String,
        /// What SQLite said.
        detail: String,
    },
    /// The catalog's schema is not this build's.
    #[error("{}: {reason}", path.display())]
    Schema {
        /// The file.
        path: PathBuf,
        /// Older or newer, and what to do.
        reason: String,
    },
    /// A storage error, with the file and what was being done.
    #[error("{}: {doing}: {}", path.display(), explain(source))]
    In {
        /// The catalog file.
        path: PathBuf,
        /// What the command or node was doing.
        doing: String,
        /// The error.
        source: Box<CatalogError>,
    },
}

/// A storage error in words, with what it usually means for an operator.
fn explain(e: &CatalogError) -> String {
    use rusqlite::ErrorCode;
    let hint = match e {
        CatalogError::Sqlite(s) => match s.sqlite_error_code() {
            Some(ErrorCode::ReadOnly) => " (the file or its folder is not writable by this user)",
            Some(ErrorCode::DiskFull) => " (the disk is full)",
            Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
                " (another process held the database longer than database.busy_timeout)"
            }
            Some(ErrorCode::CannotOpen) => " (the file or its folder cannot be opened)",
            Some(ErrorCode::DatabaseCorrupt) => {
                " (the catalog is damaged: restore it from a backup)"
            }
            _ => "",
        },
        _ => "",
    };
    format!("{e}{hint}")
}

impl CatalogError {
    /// Whether this is an error of the storage itself (SQLite, the pool, the file system), as
    /// opposed to a refusal of the operation.
    pub fn is_storage(&self) -> bool {
        matches!(
            self,
            CatalogError::Sqlite(_)
                | CatalogError::Postgres(_)
                | CatalogError::Pool(_)
                | CatalogError::Io { .. }
        )
    }

    /// Names the file and what was being done, for a storage error; other errors pass as they
    /// are (they already say what is wrong).
    pub fn within(self, path: &Path, doing: impl Into<String>) -> CatalogError {
        if self.is_storage() {
            CatalogError::In {
                path: path.to_path_buf(),
                doing: doing.into(),
                source: Box::new(self),
            }
        } else {
            self
        }
    }
}

pub(crate) fn not_found(kind: &'static str, name: &str) -> CatalogError {
    CatalogError::NotFound {
        kind,
        name: name.to_string(),
    }
}
