//! Nodes sharing one catalog (issue 16): claim tokens unique across processes.

use rusqlite::Connection;

use super::node::{self, Applicant, NodeLease, Registration};
use super::verbs::ClaimRequest;
use super::*;
use crate::jobconf::toml_format;

const CONF: &str = r#"
[processor.p]
instances = 8
[job.quick]
type = "function"
processor = "p"
overlap_policy = "allow"
max_overlap = 1000
max_attempts = 5
payload = { function = "f" }
[job.slow]
type = "function"
processor = "p"
overlap_policy = "allow"
max_overlap = 1000
timeout = 60000
payload = { function = "f" }
"#;

const TTL: i64 = 3_000;

/// A catalog with [`CONF`] imported, in a folder of its own.
fn catalog() -> (tempfile::TempDir, Catalog) {
    let dir = tempfile::tempdir().unwrap();
    let mut catalog = Catalog::open(&dir.path().join("c.db"), &DbSettings::default()).unwrap();
    catalog
        .import(&toml_format::parse(CONF).unwrap(), "t")
        .unwrap();
    (dir, catalog)
}

/// Takes node name `name` at `now`.
fn take(conn: &Connection, name: &str, now: i64) -> NodeLease {
    let who = Applicant {
        name,
        host: "h",
        pid: 1000 + i64::from(name.as_bytes()[0]),
        version: "v",
    };
    match node::register_node(conn, &who, now, 15_000, |_| true, None).unwrap() {
        Registration::Taken(lease) => lease,
        other => panic!("{other:?}"),
    }
}

fn processor(conn: &Connection) -> i64 {
    conn.query_row("SELECT processor_id FROM job_processor", [], |r| r.get(0))
        .unwrap()
}

/// Queues `n` on-demand runs of `job`.
fn queue_runs(conn: &Connection, job: &str, n: usize) {
    for _ in 0..n {
        verbs::trigger(conn, job, &[None], 0, "t").unwrap();
    }
}

/// A runtime to await the writers' answers on (the catalog names no actor runtime).
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

/// Two processes on one file (each its own writer connection) claim in turns: no claim token
/// is handed out twice, so a completion carrying one claim's token can never match another
/// claim of the same run. Before, each process counted from its start time in ms << 10, and
/// two processes started 2 ms apart reached each other's numbers after 2,048 claimed runs.
#[test]
fn claim_tokens_are_never_handed_out_twice_across_processes_sharing_a_catalog() {
    let (dir, mut first) = catalog();
    let path = dir.path().join("c.db");
    queue_runs(first.writer(), "quick", 300);
    let a = take(first.writer(), "a", 0);
    let mut second = Catalog::open(&path, &DbSettings::default()).unwrap();
    let b = take(second.writer(), "b", 0);
    let pid = processor(first.writer());
    let (wa, _ra) = first.into_node_handles(&DbSettings::default());
    let (wb, _rb) = second.into_node_handles(&DbSettings::default());
    let tokens = runtime().block_on(async move {
        let mut tokens = Vec::new();
        for round in 0..20 {
            for (writer, lease) in [(&wa, a), (&wb, b)] {
                let claim = writer
                    .claim(ClaimRequest {
                        fence: lease,
                        processor_id: pid,
                        node_id: lease.node_id,
                        limit: 7,
                        now: round,
                        lease_ms: TTL,
                        writes_paused: false,
                    })
                    .await
                    .unwrap();
                tokens.extend(claim.runs.iter().map(|r| r.claim_token));
            }
        }
        tokens
    });
    assert_eq!(tokens.len(), 280);
    let mut unique = tokens.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), tokens.len(), "a token was handed out twice");
}
