//! The fleet's rows of the benchmark (issue 16): a drain of N no-op runs by 1 and by 3 node
//! processes (this executable re-run as `jobvisor run`, as for the API's rows) sharing one
//! SQLite catalog, 2 executions each. The runs are queued in one statement while the nodes run
//! (each sees them at its next change check, within 100 ms); the rate counts from the first run
//! claimed to the last one recorded, read from the catalog every millisecond.

use std::time::{Duration, Instant};

use jobvisor::config::Durability;
use rusqlite::{Connection, params};

use super::api::{Node, spawn};
use super::{NOOP, catalog_text, fresh_dir, node_config, prepare};

const QUEUE: &str = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
    INSERT INTO job_run (job_id, processor_id, status, run_after, created_at)
    SELECT j.job_id, j.processor_id, 'queued', 0, 0 FROM job j, n WHERE j.job_name = 'noop'";
// Both answered from the partial indexes of queued and of claimed or running runs.
const LEFT: &str = "SELECT (SELECT count(*) FROM job_run WHERE status = 'queued'),
    (SELECT count(*) FROM job_run WHERE (status = 'claimed' OR status = 'running'))";

/// Runs/s of a drain of `n` no-op runs by `nodes` node processes on one catalog.
pub fn drain(n: usize, nodes: usize) -> f64 {
    let dir = fresh_dir("fleet");
    let cfg = node_config(&dir, Durability::Normal);
    prepare(&dir, &cfg, &catalog_text(2, NOOP));
    let fleet: Vec<Node> = (1..=nodes)
        .map(|i| spawn(&cfg, &format!("n{i}"), &[]))
        .collect();
    let conn = Connection::open(&cfg.database.path).unwrap();
    conn.busy_timeout(Duration::from_secs(10)).unwrap();
    conn.execute(QUEUE, params![n as i64]).unwrap();
    let left = || -> (i64, i64) {
        conn.query_row(LEFT, [], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
    };
    let deadline = Instant::now() + Duration::from_secs(600);
    while left().0 == n as i64 {
        assert!(Instant::now() < deadline, "no node claimed a run");
        std::thread::sleep(Duration::from_micros(200));
    }
    let t0 = Instant::now();
    while left() != (0, 0) {
        assert!(Instant::now() < deadline, "the drain did not end");
        std::thread::sleep(Duration::from_millis(1));
    }
    let rate = n as f64 / t0.elapsed().as_secs_f64();
    drop(conn);
    drop(fleet);
    let _ = std::fs::remove_dir_all(&dir);
    rate
}
