//! What the writers of each data object did since the statistics last looked: rows inserted
//! and when the latest went in. The sql executor counts the rows its `INSERT`s add once their
//! transaction committed (a statement goes through the object's Writer, which answers after
//! the commit); a function job that writes an object through its Writer may count its own
//! with [`ObjectActivity::inserted`]. The `object_stats` builtin turns the counts into
//! `object.count_insert` and `object.date_recent_insert` rows.
//!
//! Invariant: counts only committed rows; taking the counts resets them, so each row is
//! counted in exactly one statistics period.

use std::collections::BTreeMap;
use std::sync::Mutex;

/// Inserts per object since the last [`ObjectActivity::take`].
#[derive(Debug, Default)]
pub struct ObjectActivity {
    inner: Mutex<BTreeMap<String, Inserts>>,
}

/// One object's inserts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Inserts {
    /// Rows inserted since the previous take.
    pub count: u64,
    /// When the latest insert committed, epoch ms (kept across takes).
    pub latest: Option<i64>,
}

impl ObjectActivity {
    /// Counts `rows` inserted into `object`, committed at `at`.
    pub fn inserted(&self, object: &str, rows: u64, at: i64) {
        if rows == 0 {
            return;
        }
        let mut map = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let e = map.entry(object.to_string()).or_default();
        e.count += rows;
        e.latest = Some(e.latest.map_or(at, |t| t.max(at)));
    }

    /// Each object's inserts since the previous take; the counts start again from zero.
    pub fn take(&self) -> BTreeMap<String, Inserts> {
        let mut map = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let out = map.clone();
        for e in map.values_mut() {
            e.count = 0;
        }
        out
    }
}

/// Whether `sql` inserts rows: its first keyword is `INSERT` or `REPLACE` (comments and a
/// leading `WITH` clause aside, a `WITH … INSERT` counts too).
pub fn is_insert(sql: &str) -> bool {
    let mut rest = sql.trim_start();
    loop {
        if let Some(after) = rest.strip_prefix("--") {
            rest = after.split_once('\n').map_or("", |(_, r)| r).trim_start();
        } else if let Some(after) = rest.strip_prefix("/*") {
            rest = after.split_once("*/").map_or("", |(_, r)| r).trim_start();
        } else {
            break;
        }
    }
    let word: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphabetic())
        .collect::<String>()
        .to_ascii_uppercase();
    match word.as_str() {
        "INSERT" | "REPLACE" => true,
        // The statement after the common table expressions decides.
        "WITH" => rest.to_ascii_uppercase().contains("INSERT"),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inserts_are_counted_per_period_and_the_latest_time_is_kept() {
        let a = ObjectActivity::default();
        a.inserted("events", 3, 100);
        a.inserted("events", 2, 90);
        a.inserted("other", 0, 50);
        let first = a.take();
        assert_eq!(
            first.get("events"),
            Some(&Inserts {
                count: 5,
                latest: Some(100)
            })
        );
        assert!(!first.contains_key("other"));
        let second = a.take();
        assert_eq!(second["events"].count, 0);
        assert_eq!(second["events"].latest, Some(100));
    }

    #[test]
    fn insert_statements_are_recognised() {
        for sql in [
            "INSERT INTO t VALUES (1)",
            "  insert or ignore into t values (1)",
            "REPLACE INTO t VALUES (1)",
            "-- note\nINSERT INTO t VALUES (1)",
            "/* x */ insert into t select 1",
            "WITH x AS (SELECT 1) INSERT INTO t SELECT * FROM x",
        ] {
            assert!(is_insert(sql), "{sql}");
        }
        for sql in ["DELETE FROM t", "UPDATE t SET a = 1", "SELECT 1", ""] {
            assert!(!is_insert(sql), "{sql}");
        }
    }
}
