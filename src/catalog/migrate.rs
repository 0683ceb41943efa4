//! Schema migrations: the numbered `.sql` files of `migrations/`, compiled in.
//!
//! Invariant: each migration is applied once, in order, inside one transaction together with
//! its row in `schema_migration`; an applied migration whose text changed is refused.

use rusqlite::{Connection, OptionalExtension, params};

use super::CatalogError;

/// One numbered migration.
pub struct Migration {
    /// Its number, from the file name.
    pub version: i64,
    /// The file name.
    pub name: &'static str,
    /// The SQL.
    pub sql: &'static str,
}

/// Every migration, in order of increasing numbers. A test checks this list against the
/// `migrations/` folder. Numbers may skip one that another branch adds (merges renumber).
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "0001_catalog.sql",
        sql: include_str!("../../migrations/0001_catalog.sql"),
    },
    Migration {
        version: 2,
        name: "0002_activation.sql",
        sql: include_str!("../../migrations/0002_activation.sql"),
    },
    Migration {
        version: 3,
        name: "0003_runtime.sql",
        sql: include_str!("../../migrations/0003_runtime.sql"),
    },
    Migration {
        version: 4,
        name: "0004_policy.sql",
        sql: include_str!("../../migrations/0004_policy.sql"),
    },
    Migration {
        version: 5,
        name: "0005_hot_path_indexes.sql",
        sql: include_str!("../../migrations/0005_hot_path_indexes.sql"),
    },
    Migration {
        version: 6,
        name: "0006_job_run_rebuild.sql",
        sql: include_str!("../../migrations/0006_job_run_rebuild.sql"),
    },
    Migration {
        version: 7,
        name: "0007_job_run_lean_indexes.sql",
        sql: include_str!("../../migrations/0007_job_run_lean_indexes.sql"),
    },
    Migration {
        version: 8,
        name: "0008_run_cancel.sql",
        sql: include_str!("../../migrations/0008_run_cancel.sql"),
    },
    Migration {
        version: 9,
        name: "0009_object_generation.sql",
        sql: include_str!("../../migrations/0009_object_generation.sql"),
    },
    Migration {
        version: 10,
        name: "0010_queued_slot_index.sql",
        sql: include_str!("../../migrations/0010_queued_slot_index.sql"),
    },
    Migration {
        version: 11,
        name: "0011_api_tokens.sql",
        sql: include_str!("../../migrations/0011_api_tokens.sql"),
    },
    Migration {
        version: 12,
        name: "0012_self_tuning.sql",
        sql: include_str!("../../migrations/0012_self_tuning.sql"),
    },
    Migration {
        version: 13,
        name: "0013_fencing_and_poison.sql",
        sql: include_str!("../../migrations/0013_fencing_and_poison.sql"),
    },
    Migration {
        version: 14,
        name: "0014_workflows_and_trees.sql",
        sql: include_str!("../../migrations/0014_workflows_and_trees.sql"),
    },
    Migration {
        version: 15,
        name: "0015_inbox_files.sql",
        sql: include_str!("../../migrations/0015_inbox_files.sql"),
    },
    Migration {
        version: 16,
        name: "0016_custom_job_type.sql",
        sql: include_str!("../../migrations/0016_custom_job_type.sql"),
    },
    // 0015 and 0016 are being added on other branches; the merge renumbers if needed.
    Migration {
        version: 17,
        name: "0017_claim_tokens.sql",
        sql: include_str!("../../migrations/0017_claim_tokens.sql"),
    },
    Migration {
        version: 18,
        name: "0018_node_leases.sql",
        sql: include_str!("../../migrations/0018_node_leases.sql"),
    },
    Migration {
        version: 19,
        name: "0019_processor_nodes.sql",
        sql: include_str!("../../migrations/0019_processor_nodes.sql"),
    },
    Migration {
        version: 20,
        name: "0020_work_sharing.sql",
        sql: include_str!("../../migrations/0020_work_sharing.sql"),
    },
    Migration {
        version: 21,
        name: "0021_claimed_state.sql",
        sql: include_str!("../../migrations/0021_claimed_state.sql"),
    },
    Migration {
        version: 22,
        name: "0022_next_run_per_node.sql",
        sql: include_str!("../../migrations/0022_next_run_per_node.sql"),
    },
    Migration {
        version: 23,
        name: "0023_token_expiry.sql",
        sql: include_str!("../../migrations/0023_token_expiry.sql"),
    },
    Migration {
        version: 24,
        name: "0024_pause.sql",
        sql: include_str!("../../migrations/0024_pause.sql"),
    },
    Migration {
        version: 25,
        name: "0025_processor_prefetch.sql",
        sql: include_str!("../../migrations/0025_processor_prefetch.sql"),
    },
    Migration {
        version: 26,
        name: "0026_start_deadlines.sql",
        sql: include_str!("../../migrations/0026_start_deadlines.sql"),
    },
    Migration {
        version: 27,
        name: "0027_priority_aging.sql",
        sql: include_str!("../../migrations/0027_priority_aging.sql"),
    },
    Migration {
        version: 28,
        name: "0028_start_by_index.sql",
        sql: include_str!("../../migrations/0028_start_by_index.sql"),
    },
];

const CREATE_HISTORY: &str = "CREATE TABLE IF NOT EXISTS schema_migration (
    version    INTEGER PRIMARY KEY,
    name       TEXT    NOT NULL,
    checksum   TEXT    NOT NULL,
    applied_at INTEGER NOT NULL DEFAULT (unixepoch())
)";
const SELECT_APPLIED: &str = "SELECT checksum FROM schema_migration WHERE version = ?1";
const INSERT_APPLIED: &str =
    "INSERT INTO schema_migration (version, name, checksum) VALUES (?1, ?2, ?3)";

/// A stable checksum (FNV-1a 64) of a migration's text, to detect edited migrations.
pub(crate) fn checksum(sql: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in sql.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// Applies every pending migration in one transaction; returns how many were applied.
pub fn migrate(conn: &mut Connection) -> Result<usize, CatalogError> {
    apply(conn, MIGRATIONS)
}

/// Applies pending migrations with foreign keys off, as SQLite's procedure for rebuilding a
/// table requires (a `DROP TABLE` would otherwise delete or check rows of other tables); the
/// whole schema is checked with `foreign_key_check` before the commit, and the setting is
/// restored after.
pub(crate) fn apply(
    conn: &mut Connection,
    migrations: &[Migration],
) -> Result<usize, CatalogError> {
    let fk: bool = conn.query_row("PRAGMA foreign_keys", [], |r| r.get(0))?;
    conn.execute_batch("PRAGMA foreign_keys = OFF")?;
    let applied = apply_in_tx(conn, migrations);
    conn.execute_batch(if fk {
        "PRAGMA foreign_keys = ON"
    } else {
        "PRAGMA foreign_keys = OFF"
    })?;
    applied
}

fn apply_in_tx(conn: &mut Connection, migrations: &[Migration]) -> Result<usize, CatalogError> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    tx.execute_batch(CREATE_HISTORY)?;
    let mut applied = 0;
    for m in migrations {
        let sum = checksum(m.sql);
        let existing: Option<String> = tx
            .query_row(SELECT_APPLIED, [m.version], |r| r.get(0))
            .optional()?;
        match existing {
            Some(old) if old == sum => continue,
            Some(_) => {
                return Err(CatalogError::Migration(format!(
                    "migration {} was changed after it was applied to this database",
                    m.name
                )));
            }
            None => {
                tx.execute_batch(m.sql)
                    .map_err(|e| CatalogError::Migration(format!("{} failed: {e}", m.name)))?;
                tx.execute(INSERT_APPLIED, params![m.version, m.name, sum])?;
                applied += 1;
            }
        }
    }
    if applied > 0 {
        let broken: Option<(String, i64)> = tx
            .query_row("PRAGMA foreign_key_check", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .optional()?;
        if let Some((table, rowid)) = broken {
            return Err(CatalogError::Migration(format!(
                "after migrating, row {rowid} of `{table}` refers to a row that does not exist"
            )));
        }
    }
    tx.commit()?;
    Ok(applied)
}
