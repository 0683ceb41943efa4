//! Work sharing between the nodes of one catalog (issue 16): a claim lasts about
//! `TARGET_BATCH_MS` at the rate a processor measured, but a run can take far longer than the
//! runs before it, and then the runs a node claimed wait behind it while another node idles.
//! An idle node's empty claim asks the live node with the longest unstarted tail of the
//! processor to give some back ([`ask`]); that node's next heartbeat takes the requests
//! addressed to it ([`take`]) and its processor puts those runs back in the queue.
//!
//! The tail is estimated: the node's running runs of the processor less the instances it runs
//! (its policy's count, else the processor's). The node itself gives back only runs it has not
//! started, so an estimate too high costs a request, never a run.
//!
//! Invariant: like `queue`, every function takes a connection inside the caller's transaction
//! and reads no clock; an ask that finds a request pending writes nothing, so idle nodes that
//! wake on every change to the file do not keep changing it.

use rusqlite::{Connection, params};

use super::CatalogError;

/// The least estimated tail worth asking for.
pub const MIN_TAIL: i64 = 2;

/// A request to give runs of a processor back to the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GiveBack {
    /// The processor.
    pub processor_id: i64,
    /// At most this many unstarted runs.
    pub runs: usize,
}

const LONGEST_TAIL: &str = "SELECT r.node_id, count(*) - coalesce(
        (SELECT a.instances FROM processor_activation a
         WHERE a.processor_id = ?1 AND a.node_id = r.node_id),
        (SELECT p.instances FROM job_processor p WHERE p.processor_id = ?1)) AS tail
    FROM job_run r INDEXED BY job_run_running_job_idx JOIN node n ON n.node_id = r.node_id
    WHERE (r.status = 'claimed' OR r.status = 'running') AND r.processor_id = ?1 AND r.node_id <> ?2
      AND r.own_status IS NULL AND r.pid IS NULL
      AND n.fenced_at IS NULL AND n.heartbeat_at + n.lease_ttl >= ?3
    GROUP BY r.node_id ORDER BY tail DESC, r.node_id LIMIT 1";
const ASK: &str = "INSERT INTO give_back (processor_id, node_id, runs, asked_by, asked_at)
    VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (processor_id, node_id) DO NOTHING";
const TAKE: &str = "DELETE FROM give_back WHERE node_id = ?1 RETURNING processor_id, runs";

/// After an empty claim of `node_id` for `processor_id`, which could start `free` runs: asks
/// the live node with the longest estimated unstarted tail (at least [`MIN_TAIL`]) to give
/// back half of it, at most `free`. Returns the node asked.
pub fn ask(
    conn: &Connection,
    processor_id: i64,
    node_id: i64,
    free: usize,
    now: i64,
) -> Result<Option<i64>, CatalogError> {
    let mut stmt = conn.prepare_cached(LONGEST_TAIL)?;
    let mut rows = stmt.query(params![processor_id, node_id, now])?;
    let Some(row) = rows.next()? else {
        return Ok(None);
    };
    let (victim, tail): (i64, i64) = (row.get(0)?, row.get(1)?);
    let Some(runs) = asked(tail, free) else {
        return Ok(None);
    };
    conn.prepare_cached(ASK)?
        .execute(params![processor_id, victim, runs, node_id, now])?;
    Ok(Some(victim))
}

/// How many runs to ask of a node whose estimated tail is `tail`, by one that can start
/// `free`: half the tail, at most `free`; `None` below [`MIN_TAIL`].
pub fn asked(tail: i64, free: usize) -> Option<i64> {
    (tail >= MIN_TAIL && free > 0).then(|| (tail / 2).min(free as i64))
}

/// Takes (deletes) the requests addressed to `node_id`.
pub fn take(conn: &Connection, node_id: i64) -> Result<Vec<GiveBack>, CatalogError> {
    let mut stmt = conn.prepare_cached(TAKE)?;
    let rows = stmt.query_map([node_id], |r| {
        Ok(GiveBack {
            processor_id: r.get(0)?,
            runs: r.get::<_, i64>(1)?.max(0) as usize,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

#[cfg(test)]
mod tests {
    use super::asked;

    #[test]
    fn half_the_tail_at_most_what_the_asker_can_start() {
        assert_eq!(asked(1, 8), None);
        assert_eq!(asked(2, 8), Some(1));
        assert_eq!(asked(56, 8), Some(8));
        assert_eq!(asked(9, 8), Some(4));
        assert_eq!(asked(40, 0), None);
    }
}
