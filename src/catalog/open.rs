//! Opening a catalog file: telling a jobvisor catalog from anything else, and refusing what is
//! not ours before a single byte is written.
//!
//! A catalog is marked twice: `PRAGMA application_id` in the file header ([`APPLICATION_ID`])
//! and a `catalog_meta` row (`format = jobvisor-catalog`). Catalogs written before the marks
//! existed are recognised by their schema (`schema_migration`, `catalog_meta`, `job` and
//! `job_processor`) and marked at their next writable open.
//!
//! Invariant: a file that is not a jobvisor catalog (another application's database, an empty
//! file, a damaged one, a main file missing beside its `-wal`) is refused with its path named and
//! is never written; a read-only open writes nothing, not even a migration.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags};

use super::migrate::MIGRATIONS;
use super::{CatalogError, DbSettings, apply_pragmas};

/// `PRAGMA application_id` of a jobvisor catalog: "JobV" in ASCII.
pub const APPLICATION_ID: i32 = 0x4A6F_6256;

/// The `catalog_meta` row that marks a jobvisor catalog.
pub const FORMAT_KEY: &str = "format";
/// Its value.
pub const FORMAT_VALUE: &str = "jobvisor-catalog";

/// How a command may use the catalog file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read an existing catalog; write nothing (works on a read-only file).
    ReadOnly,
    /// Read and write an existing catalog, migrating it to this build's schema.
    ReadWrite,
    /// Like `ReadWrite`, creating a new catalog where no file exists.
    Create,
}

/// The path of SQLite's write-ahead log beside a database file.
pub fn wal_path(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push("-wal");
    PathBuf::from(p)
}

fn not_a_catalog(path: &Path, reason: impl Into<String>) -> CatalogError {
    CatalogError::NotACatalog {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// Checks, before any connection exists, what can be told from the path alone. Returns whether
/// the file exists.
pub(super) fn precheck(path: &Path, access: Access) -> Result<bool, CatalogError> {
    let text = path.to_string_lossy();
    if let Some((scheme, _)) = text.split_once("://") {
        let reason = if scheme.starts_with("postgres") {
            "a PostgreSQL URL, not a file: open it as a PostgreSQL catalog \
             (`Catalog::open_postgres`)"
                .to_string()
        } else {
            format!("a `{scheme}://` URL, not a file path; give the path of a SQLite catalog file")
        };
        return Err(not_a_catalog(path, reason));
    }
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => Err(not_a_catalog(path, "a folder, not a catalog file")),
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let wal = wal_path(path);
            if wal.exists() {
                return Err(not_a_catalog(
                    path,
                    format!(
                        "the file is missing but its write-ahead log {} is there: the catalog's \
                         main file was lost or moved; restore it rather than start a new catalog \
                         over its log",
                        wal.display()
                    ),
                ));
            }
            if access == Access::Create {
                Ok(false)
            } else {
                Err(CatalogError::NoCatalog {
                    path: path.to_path_buf(),
                })
            }
        }
        Err(source) => Err(CatalogError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Opens a connection that can only read, with the pragmas a reader needs.
pub(super) fn open_read_only(path: &Path, s: &DbSettings) -> Result<Connection, CatalogError> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_URI;
    let conn = Connection::open_with_flags(path, flags)?;
    conn.busy_timeout(s.busy_timeout)?;
    conn.set_prepared_statement_cache_capacity(64);
    Ok(conn)
}

/// What an existing file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Identity {
    /// A marked jobvisor catalog.
    Ours,
    /// A jobvisor catalog from before the marks: marked at its next writable open.
    OursUnmarked,
}

/// Tells whether the database behind `conn` is a jobvisor catalog; refuses anything else.
pub(super) fn identify(conn: &Connection, path: &Path) -> Result<Identity, CatalogError> {
    let app_id: i32 = match conn.query_row("PRAGMA application_id", [], |r| r.get(0)) {
        Ok(id) => id,
        Err(e) => return Err(classify(path, e)),
    };
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")
        .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
        .map_err(|e| classify(path, e))?;
    let has = |t: &str| tables.iter().any(|n| n == t);
    if app_id == APPLICATION_ID {
        return Ok(Identity::Ours);
    }
    if app_id != 0 {
        return Err(not_a_catalog(
            path,
            format!("another application's SQLite database (application_id {app_id:#010x})"),
        ));
    }
    if tables.is_empty() {
        return Err(not_a_catalog(
            path,
            "an empty database, not a jobvisor catalog; remove it (or choose another path) to \
             create a catalog there",
        ));
    }
    if ["schema_migration", "catalog_meta", "job", "job_processor"]
        .iter()
        .all(|t| has(t))
    {
        return Ok(Identity::OursUnmarked);
    }
    let mut shown: Vec<&str> = tables.iter().take(5).map(String::as_str).collect();
    if tables.len() > 5 {
        shown.push("…");
    }
    Err(not_a_catalog(
        path,
        format!(
            "another application's SQLite database (tables: {}), not a jobvisor catalog",
            shown.join(", ")
        ),
    ))
}

/// Maps an error met while identifying or checking a file to what it says about the file.
pub(super) fn classify(path: &Path, e: rusqlite::Error) -> CatalogError {
    use rusqlite::ErrorCode;
    match e.sqlite_error_code() {
        Some(ErrorCode::NotADatabase) => not_a_catalog(path, "not a SQLite database"),
        Some(ErrorCode::DatabaseCorrupt) => CatalogError::Damaged {
            path: path.to_path_buf(),
            detail: e.to_string(),
        },
        _ => CatalogError::In {
            path: path.to_path_buf(),
            doing: "opening the catalog".into(),
            source: Box::new(CatalogError::Sqlite(e)),
        },
    }
}

/// `PRAGMA quick_check`: the file's pages, records and indexes are well-formed (about 0.15 s
/// for a 56 MB catalog here). Any finding refuses the file.
pub fn quick_check(conn: &Connection, path: &Path) -> Result<(), CatalogError> {
    let found: Vec<String> = conn
        .prepare("PRAGMA quick_check(5)")
        .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
        .map_err(|e| classify(path, e))?;
    if found.len() == 1 && found[0] == "ok" {
        return Ok(());
    }
    Err(CatalogError::Damaged {
        path: path.to_path_buf(),
        detail: found.join("; "),
    })
}

/// The migrations applied to the catalog, compared with this build's: `Ok(pending)` when the
/// catalog is this build's or older (`pending` migrations to apply), an error when it was
/// written by a newer build.
pub(super) fn pending_migrations(conn: &Connection, path: &Path) -> Result<usize, CatalogError> {
    let applied: Vec<i64> = conn
        .prepare("SELECT version FROM schema_migration ORDER BY version")
        .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
        .map_err(|e| classify(path, e))?;
    if let Some(newest) = applied
        .iter()
        .find(|v| !MIGRATIONS.iter().any(|m| m.version == **v))
    {
        return Err(CatalogError::Schema {
            path: path.to_path_buf(),
            reason: format!(
                "written by a newer jobvisor (schema migration {newest}; this build knows \
                 1–{}): use that version",
                MIGRATIONS.last().map_or(0, |m| m.version)
            ),
        });
    }
    Ok(MIGRATIONS
        .iter()
        .filter(|m| !applied.contains(&m.version))
        .count())
}

/// Marks a catalog as ours: the header's application id and the format row. Runs inside the
/// migration's transaction (the header change commits with it).
pub(super) fn mark(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(&format!("PRAGMA application_id = {APPLICATION_ID}"))?;
    conn.execute(
        "INSERT INTO catalog_meta (key, value) VALUES (?1, ?2)
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        [FORMAT_KEY, FORMAT_VALUE],
    )?;
    Ok(())
}

/// The path of SQLite's shared-memory index beside a database file.
fn shm_path(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push("-shm");
    PathBuf::from(p)
}

/// An SQLite URI naming `path` opened `immutable`: read without locks and without the
/// `-wal` and `-shm` files a reader of a WAL database otherwise creates beside it.
fn immutable_uri(path: &Path) -> String {
    let mut uri = String::from("file:");
    if path.is_absolute() {
        // An empty authority, so that a path starting with `//` is not read as a host.
        uri.push_str("//");
    }
    for b in path.as_os_str().as_encoded_bytes() {
        match b {
            b'?' | b'#' | b'%' | 0x80.. | 0..=0x20 => uri.push_str(&format!("%{b:02X}")),
            _ => uri.push(char::from(*b)),
        }
    }
    uri.push_str("?immutable=1");
    uri
}

/// Opens an existing file read-only and refuses it unless it is a sound jobvisor catalog at
/// this build's schema.
///
/// A file nobody has open as a WAL database has no `-wal` and no `-shm` beside it (the last
/// connection removes them): it is checked `immutable`, which creates neither, so that a file
/// refused is left as it was found, with nothing beside it (issue 27, point 2d). A file in use
/// is checked as usual: its log holds committed pages. Should one appear during an immutable
/// check that refuses the file (another process opened it meanwhile and may have written it
/// under the check), the check is made again as usual.
pub(super) fn check_existing(
    path: &Path,
    settings: &DbSettings,
    access: Access,
) -> Result<Identity, CatalogError> {
    let in_use = |path: &Path| wal_path(path).exists() || shm_path(path).exists();
    if in_use(path) {
        return check(open_read_only(path, settings)?, path, access);
    }
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_URI;
    let conn = Connection::open_with_flags(immutable_uri(path), flags)?;
    match check(conn, path, access) {
        Err(_) if in_use(path) => check(open_read_only(path, settings)?, path, access),
        checked => checked,
    }
}

/// [`check_existing`] on the connection `conn` to `path`.
fn check(conn: Connection, path: &Path, access: Access) -> Result<Identity, CatalogError> {
    let identity = identify(&conn, path)?;
    quick_check(&conn, path)?;
    let pending = pending_migrations(&conn, path)?;
    if access == Access::ReadOnly && pending > 0 {
        return Err(CatalogError::Schema {
            path: path.to_path_buf(),
            reason: format!(
                "written by an older jobvisor ({pending} schema migration(s) behind this build); \
                 `jobvisor init` or starting the node upgrades it"
            ),
        });
    }
    Ok(identity)
}

/// A writable connection with the pragmas, for a file already checked (or new).
pub(super) fn open_writable(
    path: &Path,
    settings: &DbSettings,
) -> Result<Connection, CatalogError> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI,
    )?;
    apply_pragmas(&conn, settings)?;
    Ok(conn)
}
