//! The PostgreSQL rows of the benchmark (issue 16): a drain of N no-op runs through the
//! PostgreSQL catalog's claim and complete verbs by 1 and by 3 nodes (threads, each with its own
//! connection and node name, claiming batches of `BATCH`), beside the floor — a bare
//! `FOR UPDATE SKIP LOCKED` loop on the same server with the same batches and the same two
//! transactions per batch (claim, then complete), its statements prepared as the catalog's
//! are — measured in the same round. The server is
//! `JOBVISOR_TEST_PG` (an admin URL), else postgres@127.0.0.1:5432; each round creates a
//! database of its own and drops it.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::thread;
use std::time::Instant;

use jobvisor::catalog::complete::{Completion, Outcome};
use jobvisor::catalog::node::Registration;
use jobvisor::catalog::postgres::queue::PgClaim;
use jobvisor::catalog::postgres::{PgCatalog, PgSettings};
use jobvisor::catalog::queue::NewRun;
use jobvisor::model::RunStatus;
use postgres::{Client, NoTls};

use super::median;

/// Runs claimed per transaction, by the floor and by the catalog alike.
const BATCH: usize = 256;

pub(super) struct Db {
    admin: String,
    name: String,
    pub(super) url: String,
}

impl Db {
    pub(super) fn create(tag: &str) -> Db {
        let admin = std::env::var("JOBVISOR_TEST_PG")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
        let name = format!("jv_bench_{tag}_{}", std::process::id());
        let mut c = Client::connect(&admin, NoTls)
            .unwrap_or_else(|e| panic!("bench pg: cannot connect to {admin}: {e}"));
        c.batch_execute(&format!("DROP DATABASE IF EXISTS {name}"))
            .unwrap();
        c.batch_execute(&format!("CREATE DATABASE {name}")).unwrap();
        let (base, _) = admin.rsplit_once('/').unwrap();
        Db {
            url: format!("{base}/{name}"),
            admin,
            name,
        }
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        if let Ok(mut c) = Client::connect(&self.admin, NoTls) {
            let _ = c.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}

/// Seeds the catalog at `url` with the catalog file `text`.
pub(super) fn seed(url: &str, text: &str) {
    let file = jobvisor::jobconf::toml_format::parse(text).unwrap_or_else(|d| panic!("{d:?}"));
    PgCatalog::open(PgSettings::new(url), "bench")
        .unwrap()
        .seed_if_new(&file, "bench", 0)
        .unwrap();
}

/// `read` with a connection to `url`.
pub(super) fn read<T>(url: &str, read: impl FnOnce(&mut Client) -> T) -> T {
    read(&mut Client::connect(url, NoTls).unwrap())
}

/// Runs/s of the bare loop with `workers` connections.
fn floor(n: usize, workers: usize) -> f64 {
    let db = Db::create("floor");
    let mut c = Client::connect(&db.url, NoTls).unwrap();
    c.batch_execute(
        "CREATE TABLE q (id bigserial PRIMARY KEY, status int NOT NULL, token bigint,
             result text);
         CREATE INDEX q_queued ON q (id) WHERE status = 0;",
    )
    .unwrap();
    c.execute(
        "INSERT INTO q (status) SELECT 0 FROM generate_series(1, $1::bigint)",
        &[&(n as i64)],
    )
    .unwrap();
    c.batch_execute("VACUUM ANALYZE q").unwrap();
    let start = Instant::now();
    let machine = CpuUse::read(&mut c, &[]).machine;
    let handles: Vec<_> = (0..workers)
        .map(|_| {
            let url = db.url.clone();
            thread::spawn(move || {
                let mut c = Client::connect(&url, NoTls).unwrap();
                let backend: i32 = c.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
                // Prepared once, as the catalog's statements are.
                let take = c
                    .prepare(
                        "UPDATE q SET status = 1, token = 1 WHERE id IN (SELECT id FROM q
                         WHERE status = 0 ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)
                         RETURNING id",
                    )
                    .unwrap();
                let finish = c
                    .prepare(
                        "UPDATE q SET status = 2, result = '{}' WHERE id = ANY($1) AND token = 1",
                    )
                    .unwrap();
                loop {
                    let mut tx = c.transaction().unwrap();
                    let ids: Vec<i64> = tx
                        .query(&take, &[&(BATCH as i64)])
                        .unwrap()
                        .iter()
                        .map(|r| r.get(0))
                        .collect();
                    tx.commit().unwrap();
                    if ids.is_empty() {
                        return task_ms(backend as u32);
                    }
                    let mut tx = c.transaction().unwrap();
                    tx.execute(&finish, &[&ids]).unwrap();
                    tx.commit().unwrap();
                }
            })
        })
        .collect();
    let backends: f64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    let rate = n as f64 / start.elapsed().as_secs_f64();
    if std::env::var_os("BENCH_CPU").is_some() {
        eprintln!(
            "pg floor, {workers} conn: {:.0} ms; CPU ms: server backends {backends:.0}, the \
             machine {:.0}",
            start.elapsed().as_secs_f64() * 1e3,
            CpuUse::read(&mut c, &[]).machine - machine
        );
    }
    drop(c);
    rate
}

/// Runs/s of a drain through `PgCatalog` by `nodes` node threads.
fn catalog(n: usize, nodes: usize) -> f64 {
    let db = Db::create("catalog");
    let setup = PgCatalog::open(PgSettings::new(&db.url), "setup").unwrap();
    let mut c = Client::connect(&db.url, NoTls).unwrap();
    let p: i64 = c
        .query_one(
            "INSERT INTO job_processor (processor_name, instances) VALUES ('bench', 8)
             RETURNING processor_id",
            &[],
        )
        .unwrap()
        .get(0);
    let job: i64 = c
        .query_one(
            "INSERT INTO job (job_name, processor_id, job_type_id, overlap_policy, max_overlap)
             VALUES ('noop', $1, 1, 'allow', 1000000) RETURNING job_id",
            &[&p],
        )
        .unwrap()
        .get(0);
    let now = jobvisor::catalog::now_ms();
    for chunk in (0..n).collect::<Vec<_>>().chunks(10_000) {
        let runs = chunk
            .iter()
            .map(|_| NewRun {
                job_id: job,
                processor_id: p,
                priority: 0,
                scheduled_for: None,
                run_after: 0,
                params: None,
                status: RunStatus::Queued,
                error: None,
            })
            .collect();
        setup.enqueue(runs, now).unwrap();
    }
    try_schema(&mut c);
    c.batch_execute("VACUUM ANALYZE job_run").unwrap();
    let catalogs: Vec<PgCatalog> = (0..nodes)
        .map(|i| PgCatalog::open(PgSettings::new(&db.url), &format!("n{i}")).unwrap())
        .collect();
    let done = Arc::new(AtomicI64::new(0));
    let start = Instant::now();
    let mono_start = monotonic_s();
    let cpu0 = CpuUse::read(&mut c, &[]);
    let handles: Vec<_> = catalogs
        .into_iter()
        .enumerate()
        .map(|(i, cat)| {
            let done = done.clone();
            thread::spawn(move || {
                let now = jobvisor::catalog::now_ms();
                let Registration::Taken(lease) = cat
                    .register_node(
                        format!("n{i}"),
                        "bench".into(),
                        i as i64,
                        30_000,
                        now,
                        |_| true,
                    )
                    .unwrap()
                    .0
                else {
                    panic!("node name taken");
                };
                loop {
                    let now = jobvisor::catalog::now_ms();
                    let claim = cat
                        .claim(PgClaim {
                            processor_id: p,
                            lease,
                            limit: BATCH,
                            now,
                            lease_ms: 30_000,
                            writes_paused: false,
                        })
                        .unwrap();
                    if claim.runs.is_empty() {
                        if done.load(Ordering::SeqCst) as usize >= n {
                            // Kept until the CPU its connection used is read.
                            return cat;
                        }
                        thread::yield_now();
                        continue;
                    }
                    let end = jobvisor::catalog::now_ms();
                    let completions = claim
                        .runs
                        .iter()
                        .map(|r| Completion {
                            run_id: r.run_id,
                            job_id: r.job_id,
                            claim_token: r.claim_token,
                            outcome: Outcome::Succeeded(serde_json::Value::Null),
                            log: None,
                            started_at: Some(end),
                            finished_at: end,
                            retry_at: None,
                        })
                        .collect();
                    cat.complete(lease.node_id, completions).unwrap();
                    done.fetch_add(claim.runs.len() as i64, Ordering::SeqCst);
                }
            })
        })
        .collect();
    let kept: Vec<PgCatalog> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    if std::env::var_os("BENCH_WINDOW").is_some() {
        // For `perf report --time` of a `perf record -k CLOCK_MONOTONIC`: the drain alone.
        eprintln!("drain window: {:.6},{:.6}", mono_start, monotonic_s());
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    if std::env::var_os("BENCH_CPU").is_some() {
        let used = CpuUse::read(&mut c, &[]).since(&cpu0);
        eprintln!(
            "pg catalog, {nodes} node thread(s): {:.0} ms; CPU ms: server backends {:.0}, the \
             machine {:.0}",
            start.elapsed().as_secs_f64() * 1e3,
            used.backends,
            used.machine
        );
    }
    drop(kept);
    assert_all_succeeded(&mut c, n);
    rate
}

/// Prints the rows: the floor and the catalog with 1 and 3 nodes, and the ratios of each
/// round's pair, medians over `rounds`.
/// Runs/s of a drain of `n` no-op runs by `nodes` node processes (`jobvisor run`, this
/// executable re-run as for the API's rows; 2 executions each, as the SQLite fleet's rows) on
/// one PostgreSQL catalog: the runs queued in one statement while they run, the rate counted
/// from the first run claimed to the last one recorded, read every millisecond.
fn processes(n: usize, nodes: usize) -> f64 {
    let db = Db::create(&format!("procs{nodes}"));
    let dir = super::fresh_dir("pgfleet");
    let cfg = super::node_config(&dir, jobvisor::config::Durability::Normal);
    std::fs::create_dir_all(dir.join("data")).unwrap();
    seed(&db.url, &super::catalog_text(2, super::NOOP));
    try_schema(&mut Client::connect(&db.url, NoTls).unwrap());
    let env = [("JOBVISOR__DATABASE__URL", db.url.as_str())];
    let fleet: Vec<super::api::Node> = (1..=nodes)
        .map(|i| super::api::spawn(&cfg, &format!("n{i}"), &env))
        .collect();
    let mut c = Client::connect(&db.url, NoTls).unwrap();
    c.execute(
        "INSERT INTO job_run (job_id, processor_id, status, run_after, created_at)
         SELECT j.job_id, j.processor_id, 'queued', 0, 0
         FROM job j, generate_series(1, $1::bigint) WHERE j.job_name = 'noop'",
        &[&(n as i64)],
    )
    .unwrap();
    // Polled every millisecond, so each poll reads the job's row and its tallies (one per
    // node), and looks for runs left only once every run claimed has ended: a count of 20,000
    // queued runs cost the server 150-300 ms of CPU per drain (beside 670-730 ms for the
    // nodes' own statements), and `EXISTS` over the queue and running indexes, which step over
    // the entries of claimed and finished runs, 90-150 ms.
    // Prepared: parsing and planning each poll cost the server more than running it.
    let read_tally = c
        .prepare(
            "SELECT j.runs_begun, coalesce((SELECT sum(t.runs_ended) FROM job_tally t
                 WHERE t.job_id = j.job_id), 0)::bigint
             FROM job j WHERE j.job_name = 'noop'",
        )
        .unwrap();
    let tally = |c: &mut Client| -> (i64, i64) {
        let r = c.query_one(&read_tally, &[]).unwrap();
        (r.get(0), r.get(1))
    };
    let started = |c: &mut Client| tally(c).0 > 0;
    let busy = |c: &mut Client| -> bool {
        let (begun, ended) = tally(c);
        // Runs given back to the queue (work sharing) end twice: look for any left.
        begun > ended
            || ended < n as i64
            || c.query_one(
                "SELECT EXISTS (SELECT 1 FROM job_run WHERE status = 'queued')
                     OR EXISTS (SELECT 1 FROM job_run WHERE status = 'claimed' OR status = 'running')",
                &[],
            )
            .unwrap()
            .get(0)
    };
    let deadline = Instant::now() + std::time::Duration::from_secs(600);
    while !started(&mut c) {
        assert!(Instant::now() < deadline, "no node claimed a run");
        thread::sleep(std::time::Duration::from_micros(200));
    }
    let t0 = Instant::now();
    let pids: Vec<u32> = fleet.iter().map(super::api::Node::pid).collect();
    let cpu0 = std::env::var_os("BENCH_CPU").map(|_| CpuUse::read(&mut c, &pids));
    while busy(&mut c) {
        assert!(Instant::now() < deadline, "the drain did not end");
        thread::sleep(std::time::Duration::from_millis(1));
    }
    let rate = n as f64 / t0.elapsed().as_secs_f64();
    if let Some(cpu0) = cpu0 {
        let used = CpuUse::read(&mut c, &pids).since(&cpu0);
        eprintln!(
            "pg drain by {nodes} process(es): {:.0} ms; CPU ms: nodes {:.0}, their server \
             backends {:.0}, the bench's poll (its backend) {:.0}, the machine {:.0}",
            t0.elapsed().as_secs_f64() * 1e3,
            used.nodes,
            used.backends,
            used.poller,
            used.machine
        );
    }
    drop(fleet);
    assert_all_succeeded(&mut c, n);
    drop(c);
    let _ = std::fs::remove_dir_all(&dir);
    rate
}

/// `BENCH_PG_SQL`, run on each catalog's database before its drain: a schema change tried
/// without a migration.
fn try_schema(c: &mut Client) {
    if let Ok(sql) = std::env::var("BENCH_PG_SQL") {
        c.batch_execute(&sql).unwrap();
    }
}

/// CLOCK_MONOTONIC in seconds (perf's clock with `-k CLOCK_MONOTONIC`).
fn monotonic_s() -> f64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
}

/// The CPU time a process used so far (all its threads), ms.
fn task_ms(pid: u32) -> f64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0.0;
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<f64>().ok())
        .sum::<f64>()
        / 1e6
}

/// CPU time used so far (ms), for `BENCH_CPU=1`: by the node processes (all their threads),
/// by the server's backends of their connections, by the backend of the bench's own
/// connection (its polling), and by the whole machine (every process, others' included).
struct CpuUse {
    nodes: f64,
    backends: f64,
    poller: f64,
    machine: f64,
}

impl CpuUse {
    fn read(c: &mut Client, nodes: &[u32]) -> CpuUse {
        let me: i32 = c.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
        let backends: f64 = c
            .query(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database()
                   AND pid <> pg_backend_pid()",
                &[],
            )
            .unwrap()
            .iter()
            .map(|r| task_ms(r.get::<_, i32>(0) as u32))
            .sum();
        let stat = std::fs::read_to_string("/proc/stat").unwrap();
        let cpu: Vec<f64> = stat
            .lines()
            .next()
            .unwrap()
            .split_whitespace()
            .skip(1)
            .filter_map(|v| v.parse().ok())
            .collect();
        // user nice system (idle iowait) irq softirq steal, in USER_HZ (100/s).
        let busy = cpu[0] + cpu[1] + cpu[2] + cpu[5] + cpu[6] + cpu[7];
        CpuUse {
            nodes: nodes.iter().map(|&p| task_ms(p)).sum(),
            backends,
            poller: task_ms(me as u32),
            machine: busy * 10.0,
        }
    }

    fn since(&self, before: &CpuUse) -> CpuUse {
        CpuUse {
            nodes: self.nodes - before.nodes,
            backends: self.backends - before.backends,
            poller: self.poller - before.poller,
            machine: self.machine - before.machine,
        }
    }
}

/// One drain by 3 node threads, printed (`pg-profile`).
pub fn profile(n: usize) {
    let c = catalog(n, 3);
    println!(
        "{:<52} {:>10.0} r/s",
        format!("postgres catalog: drain, 3 node(s), batch {BATCH}"),
        c
    );
}

pub fn print(n: usize, rounds: usize) {
    let mut rows: [Vec<f64>; 6] = Default::default();
    let mut ratios: [Vec<f64>; 4] = Default::default();
    for _ in 0..rounds {
        for (k, nodes) in [1, 3].into_iter().enumerate() {
            let f = floor(n, nodes);
            let c = catalog(n, nodes);
            let p = processes(n, nodes);
            rows[3 * k].push(f);
            rows[3 * k + 1].push(c);
            rows[3 * k + 2].push(p);
            ratios[2 * k].push(c / f);
            ratios[2 * k + 1].push(p / f);
        }
    }
    for (k, nodes) in [1, 3].into_iter().enumerate() {
        println!(
            "{:<52} {:>10.0} r/s",
            format!("postgres floor: SKIP LOCKED loop, {nodes} conn, batch {BATCH}"),
            median(rows[3 * k].clone())
        );
        println!(
            "{:<52} {:>10.0} r/s {:>9.2}x",
            format!("postgres catalog: drain, {nodes} node(s), batch {BATCH}"),
            median(rows[3 * k + 1].clone()),
            median(ratios[2 * k].clone())
        );
        println!(
            "{:<52} {:>10.0} r/s {:>9.2}x",
            format!("postgres: drain by {nodes} node process(es)"),
            median(rows[3 * k + 2].clone()),
            median(ratios[2 * k + 1].clone())
        );
    }
}

/// Checks a drain's end: each of its `n` runs recorded succeeded, once.
fn assert_all_succeeded(c: &mut Client, n: usize) {
    let succeeded: i64 = c
        .query_one(
            "SELECT count(*) FROM job_run WHERE status = 'succeeded'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(succeeded, n as i64, "every run recorded once");
}
