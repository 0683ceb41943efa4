//! The PostgreSQL catalog's migrations: the numbered files of `migrations/postgres/`, compiled
//! in, applied as on SQLite (each once, in order, with its row and checksum in
//! `schema_migration`; an edited one is refused), under a transaction-scoped advisory lock so
//! that nodes starting at once apply each migration once. A database that has migrations this
//! build does not know (a newer jobvisor) is refused, not written.

use postgres::Client;

use crate::catalog::CatalogError;
use crate::catalog::migrate::{Migration, checksum};

/// Every PostgreSQL migration, in order. A test checks it against the folder.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "0001_catalog.sql",
        sql: include_str!("../../../migrations/postgres/0001_catalog.sql"),
    },
    Migration {
        version: 2,
        name: "0002_job_run_lean_indexes.sql",
        sql: include_str!("../../../migrations/postgres/0002_job_run_lean_indexes.sql"),
    },
    Migration {
        version: 3,
        name: "0003_claimed_state.sql",
        sql: include_str!("../../../migrations/postgres/0003_claimed_state.sql"),
    },
    Migration {
        version: 4,
        name: "0004_next_run_per_node.sql",
        sql: include_str!("../../../migrations/postgres/0004_next_run_per_node.sql"),
    },
    Migration {
        version: 5,
        name: "0005_token_expiry.sql",
        sql: include_str!("../../../migrations/postgres/0005_token_expiry.sql"),
    },
    Migration {
        version: 6,
        name: "0006_pause.sql",
        sql: include_str!("../../../migrations/postgres/0006_pause.sql"),
    },
    Migration {
        version: 7,
        name: "0007_processor_prefetch.sql",
        sql: include_str!("../../../migrations/postgres/0007_processor_prefetch.sql"),
    },
    Migration {
        version: 8,
        name: "0008_start_deadlines.sql",
        sql: include_str!("../../../migrations/postgres/0008_start_deadlines.sql"),
    },
    Migration {
        version: 9,
        name: "0009_priority_aging.sql",
        sql: include_str!("../../../migrations/postgres/0009_priority_aging.sql"),
    },
];

/// The advisory lock key migrations hold ("jobvisor" in ASCII, as a bigint).
const MIGRATION_LOCK: i64 = 0x6a6f_6276_6973_6f72;

const CREATE_HISTORY: &str = "CREATE TABLE IF NOT EXISTS schema_migration (
    version    bigint PRIMARY KEY,
    name       text   NOT NULL,
    checksum   text   NOT NULL,
    applied_at bigint NOT NULL DEFAULT extract(epoch FROM now())::bigint
)";

const HISTORY_EXISTS: &str = "SELECT to_regclass('schema_migration') IS NOT NULL";

/// What a database holds of this build's schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Schema {
    /// No jobvisor catalog (no migration history).
    Missing,
    /// Every migration this build knows, and no other.
    Current,
    /// An older catalog: migrations to apply.
    Behind,
}

/// Reads, without writing, how far the database's schema is from this build's (a database a
/// newer jobvisor migrated is refused, as by [`migrate`]).
pub fn schema(client: &mut Client) -> Result<Schema, CatalogError> {
    if !client.query_one(HISTORY_EXISTS, &[])?.get::<_, bool>(0) {
        return Ok(Schema::Missing);
    }
    let newest: Option<i64> = client
        .query_one("SELECT max(version) FROM schema_migration", &[])?
        .get(0);
    let known = MIGRATIONS.last().map_or(0, |m| m.version);
    match newest {
        None => Ok(Schema::Missing),
        Some(v) if v > known => Err(CatalogError::Migration(format!(
            "the database has migration {v}, newer than this build knows ({known}): it was              made by a newer jobvisor; nothing was changed"
        ))),
        Some(v) if v < known => Ok(Schema::Behind),
        Some(_) => Ok(Schema::Current),
    }
}

/// Applies every pending migration in one transaction; returns how many were applied.
pub fn migrate(client: &mut Client) -> Result<usize, CatalogError> {
    let migrations = MIGRATIONS;
    let mut tx = client.transaction()?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])?;
    tx.batch_execute(CREATE_HISTORY)?;
    let applied: Vec<(i64, String)> = tx
        .query(
            "SELECT version, checksum FROM schema_migration ORDER BY version",
            &[],
        )?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let known = migrations.last().map_or(0, |m| m.version);
    if let Some((v, _)) = applied.iter().find(|(v, _)| *v > known) {
        return Err(CatalogError::Migration(format!(
            "the database has migration {v}, newer than this build knows ({known}): it was \
             made by a newer jobvisor; nothing was changed"
        )));
    }
    let mut count = 0;
    for m in migrations {
        let sum = checksum(m.sql);
        match applied.iter().find(|(v, _)| *v == m.version) {
            Some((_, old)) if *old == sum => continue,
            Some(_) => {
                return Err(CatalogError::Migration(format!(
                    "postgres migration {} was changed after it was applied to this database",
                    m.name
                )));
            }
            None => {
                tx.batch_execute(m.sql).map_err(|e| {
                    CatalogError::Migration(format!("postgres {} failed: {e}", m.name))
                })?;
                tx.execute(
                    "INSERT INTO schema_migration (version, name, checksum) VALUES ($1, $2, $3)",
                    &[&m.version, &m.name, &sum],
                )?;
                count += 1;
            }
        }
    }
    super::commit(tx)?;
    Ok(count)
}
