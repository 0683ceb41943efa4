//! Throughput and cost benchmark (issue: group commit, adaptive claims, SQLite's own limit).
//!
//! `cargo run --release --example bench -- [all|floor|drain|fleet|sql|latency|priority|idle|scale|flow|api|profile|api-readers|pg|pg-profile|pg-priority|forbid] [--rounds 3] [--n 20000] [--aging MS]`
//! (`profile` with `BENCH_DEAF=1`: beside a subscriber that never reads)
//!
//! Every workload runs on a fresh database file on disk; figures are medians over the rounds.
//! Each round measures the floor, the drains and the engine's SQL back to back, and each
//! throughput is also printed as the median of its ratios to the batched floor of its own round
//! (the machine's speed drifts between minutes on a shared host).
//! The drains also report the largest size of the catalog's WAL file during a drain and its size
//! after the engine shut down. `priority` measures the due-to-start latency of high-priority
//! per-second jobs while N low-priority runs drain on the same processor (`pg-priority` the same
//! on PostgreSQL; `--aging MS` gives the low-priority job an aging rate).
//! `api` drives a real node process over HTTP (see `bench/api.rs`; `api-readers` times a cheap
//! request beside 4 expensive ones, and with `BENCH_BEFORE=<a jobvisor binary>` another build's
//! node in the same rounds); `fleet` drains by 1 and by 3
//! node processes on one catalog file (see `bench/fleet.rs`; part of `drain` and `all`). `flow`
//! measures workflows: the delay from a step's end to its successor's start, and the drain rate
//! of 10,000 two-step workflows beside a plain drain of as many runs in the same round.
//! `sql` runs the engine's claim and completion SQL without the actors; `profile` is one drain
//! and nothing else, for `perf record`. `forbid` (only when asked for) drains an on-demand
//! backlog of one `forbid` job, 5,000 runs and 30,000 in each round: a start must cost the same
//! whatever the backlog behind it (issue 27, point 2c). Diagnostics on stderr: `BENCH_THREADS=1` prints how busy
//! each thread was during a drain, `BENCH_PHASES=1` the claim and completion time per run of
//! `sql`, `BENCH_CPU=1` where the CPU went during each drain on PostgreSQL, `BENCH_WINDOW=1`
//! the monotonic clock at the start and end of a drain by node threads on PostgreSQL (for
//! `perf record -k CLOCK_MONOTONIC -a … bench -- pg-profile` then `perf report --time a,b`),
//! `BENCH_PG_SQL` SQL run on each PostgreSQL catalog before its drain (a schema change tried
//! without a migration).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use jobvisor::catalog::complete::{self, Completion, Outcome};
use jobvisor::catalog::queue::{self, ClaimedRun, NewRun};
use jobvisor::catalog::{Catalog, DbSettings, activation, node};
use jobvisor::config::{Durability, NodeConfig};
use jobvisor::jobconf::toml_format;
use jobvisor::model::{ActivationState, RunStatus};
use jobvisor::runtime::Engine;
use rusqlite::{Connection, params};

#[path = "bench/api.rs"]
mod api;
#[path = "bench/fleet.rs"]
mod fleet;
#[path = "bench/pg.rs"]
mod pg;

struct Args {
    what: String,
    rounds: usize,
    n: usize,
    /// `priority`: the bulk job's aging, ms per point (0: none).
    aging: u64,
}

fn args() -> Args {
    let mut a = Args {
        what: "all".into(),
        rounds: 3,
        n: 20_000,
        aging: 0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--rounds" => a.rounds = it.next().and_then(|v| v.parse().ok()).unwrap_or(3),
            "--n" => a.n = it.next().and_then(|v| v.parse().ok()).unwrap_or(20_000),
            "--aging" => a.aging = it.next().and_then(|v| v.parse().ok()).unwrap_or(0),
            // Read by `idle-once` itself.
            "--distinct" => {}
            other => a.what = other.to_string(),
        }
    }
    a
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn fresh_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "jobvisor-bench-{}-{tag}-{}",
        std::process::id(),
        jobvisor::catalog::now_ms()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

// ---------------------------------------------------------------- floor

fn floor_conn(path: &Path) -> Connection {
    let c = Connection::open(path).unwrap();
    c.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA busy_timeout = 10000;",
    )
    .unwrap();
    c
}

/// The hand-written loop: `per_tx` claims in one transaction, then their completions in one.
fn floor(n: usize, per_tx: usize, workers: usize) -> f64 {
    let dir = fresh_dir("floor");
    let path = dir.join("floor.db");
    let c = floor_conn(&path);
    c.execute_batch(
        "CREATE TABLE q (id INTEGER PRIMARY KEY, status INTEGER NOT NULL DEFAULT 0, worker INTEGER, result TEXT);
         CREATE INDEX q_queued ON q (id) WHERE status = 0;",
    )
    .unwrap();
    c.execute_batch("BEGIN").unwrap();
    for _ in 0..n {
        c.execute("INSERT INTO q (status) VALUES (0)", []).unwrap();
    }
    c.execute_batch("COMMIT").unwrap();
    let t0 = Instant::now();
    let handles: Vec<_> = (0..workers)
        .map(|w| {
            let path = path.clone();
            std::thread::spawn(move || {
                let c = floor_conn(&path);
                loop {
                    c.execute_batch("BEGIN IMMEDIATE").unwrap();
                    let ids: Vec<i64> = c
                        .prepare_cached("UPDATE q SET status = 1, worker = ?1 WHERE id IN (SELECT id FROM q WHERE status = 0 ORDER BY id LIMIT ?2) RETURNING id")
                        .unwrap()
                        .query_map(params![w as i64, per_tx as i64], |r| r.get(0))
                        .unwrap()
                        .map(Result::unwrap)
                        .collect();
                    c.execute_batch("COMMIT").unwrap();
                    if ids.is_empty() {
                        break;
                    }
                    c.execute_batch("BEGIN IMMEDIATE").unwrap();
                    for id in ids {
                        c.prepare_cached("UPDATE q SET status = 2, result = '{}' WHERE id = ?1").unwrap().execute([id]).unwrap();
                    }
                    c.execute_batch("COMMIT").unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let rate = n as f64 / t0.elapsed().as_secs_f64();
    let _ = std::fs::remove_dir_all(&dir);
    rate
}

// ---------------------------------------------------------------- engine helpers

fn catalog_text(instances: usize, jobs: &str) -> String {
    format!("[processor.bench]\ninstances = {instances}\n{jobs}")
}

// Runs of one job may overlap: each is an independent task, as in a queue.
const NOOP: &str = "[job.noop]\ntype = \"function\"\nprocessor = \"bench\"\noverlap_policy = \"allow\"\nmax_overlap = 1000000\npayload = { function = \"debug.noop\" }\n";

fn node_config(dir: &Path, durability: Durability) -> NodeConfig {
    let mut cfg = NodeConfig::default();
    cfg.node.data_dir = dir.join("data").display().to_string();
    cfg.node.name = "bench".into();
    cfg.database.path = dir.join("catalog.db").display().to_string();
    cfg.database.durability = durability;
    // Every job is part of the minimum: the benchmark measures the engine, not the ramp.
    cfg.policy.priority_floor = i64::MIN;
    cfg
}

fn prepare(dir: &Path, cfg: &NodeConfig, text: &str) {
    let catalog = Catalog::open(
        Path::new(&cfg.database.path),
        &DbSettings::from(&cfg.database),
    )
    .unwrap();
    let file = toml_format::parse(text).unwrap_or_else(|d| panic!("{d:?}"));
    catalog.seed_if_new(&file, "bench").unwrap();
    std::fs::create_dir_all(dir.join("data")).unwrap();
}

async fn completed(engine: &Engine) -> u64 {
    engine
        .status()
        .await
        .map(|s| s.processors.iter().map(|p| p.completed).sum())
        .unwrap_or(0)
}

/// What one drain measured.
struct Drained {
    /// Runs per second through `trigger`.
    single_rate: f64,
    /// Runs per second through `trigger_many`.
    batch_rate: f64,
    /// Runs per second drained.
    drain_rate: f64,
    /// The largest size of the catalog's WAL file during the drain, MB.
    wal_peak_mb: f64,
    /// Its size after the engine shut down, MB.
    wal_after_mb: f64,
    /// Events dropped by a subscriber that never reads (when it had one).
    dropped: u64,
}

/// Samples the size of `path` every 5 ms until told to stop; answers the largest, MB.
struct FileSizePeak {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<u64>,
}

impl FileSizePeak {
    fn start(path: PathBuf) -> Self {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut peak = 0;
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                peak = peak.max(file_size(&path));
                std::thread::sleep(Duration::from_millis(5));
            }
            peak.max(file_size(&path))
        });
        Self { stop, thread }
    }

    fn finish(self) -> f64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().unwrap() as f64 / 1e6
    }
}

fn file_size(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

fn wal_of(db: &str) -> PathBuf {
    PathBuf::from(format!("{db}-wal"))
}

fn drain(n: usize, instances: usize, durability: Durability) -> Drained {
    drain_with(n, instances, durability, false)
}

/// A drain; with `deaf`, while a subscriber to the engine's events never reads them (its
/// 16-event buffer fills at once, and the rest are dropped and counted).
fn drain_with(n: usize, instances: usize, durability: Durability, deaf: bool) -> Drained {
    let dir = fresh_dir("drain");
    let cfg = node_config(&dir, durability);
    prepare(&dir, &cfg, &catalog_text(instances, NOOP));
    let wal = wal_of(&cfg.database.path);
    let out = actix_rt::System::new().block_on(async move {
        let engine = Engine::builder().config(cfg).start().unwrap();
        let deaf = deaf.then(|| engine.events(16));
        engine.pause();
        let single = 2_000.min(n);
        let t0 = Instant::now();
        for _ in 0..single {
            engine.trigger("noop", None).await.unwrap();
        }
        let single_rate = single as f64 / t0.elapsed().as_secs_f64();
        let rest = n - single;
        let t0 = Instant::now();
        let mut left = rest;
        while left > 0 {
            let k = left.min(1000);
            engine.trigger_many("noop", vec![None; k]).await.unwrap();
            left -= k;
        }
        let batch_rate = rest.max(1) as f64 / t0.elapsed().as_secs_f64();
        let t0 = Instant::now();
        let ticks0 = thread_ticks();
        let peak = FileSizePeak::start(wal.clone());
        engine.resume();
        while completed(&engine).await < n as u64 {
            actix_rt::time::sleep(Duration::from_millis(2)).await;
        }
        let drain_rate = n as f64 / t0.elapsed().as_secs_f64();
        let wal_peak_mb = peak.finish();
        if std::env::var_os("BENCH_THREADS").is_some() {
            // How busy each thread was: shows which one limits the drain.
            // SAFETY: sysconf has no preconditions.
            let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
            let secs = t0.elapsed().as_secs_f64();
            for (name, ticks) in thread_ticks() {
                let used = ticks - ticks0.get(&name).copied().unwrap_or(0);
                if used > 0 {
                    eprintln!(
                        "  thread {name}: busy {:.0}% of the drain",
                        used as f64 / hz / secs * 100.0
                    );
                }
            }
        }
        engine.shutdown(Duration::from_secs(5)).await.unwrap();
        Drained {
            single_rate,
            batch_rate,
            drain_rate,
            wal_peak_mb,
            wal_after_mb: file_size(&wal) as f64 / 1e6,
            dropped: deaf.map_or(0, |s| s.subscription().dropped()),
        }
    });
    let _ = std::fs::remove_dir_all(&dir);
    out
}

// ---------------------------------------------------------------- forbid

// Its runs never overlap: one at a time, whatever the instances.
const FORBID: &str = "[job.solo]\ntype = \"function\"\nprocessor = \"bench\"\noverlap_policy = \"forbid\"\npayload = { function = \"debug.noop\" }\n";

/// The CPU time this process has used (every thread, user and system), µs.
fn cpu_us() -> f64 {
    // SAFETY: getrusage writes into the struct it is given, nothing else.
    let usage = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        u
    };
    let us = |t: libc::timeval| t.tv_sec as f64 * 1e6 + t.tv_usec as f64;
    us(usage.ru_utime) + us(usage.ru_stime)
}

/// Drains an on-demand backlog of `n` runs of one `forbid` job, queued while the engine is
/// paused: runs per second, and the CPU time the process spent per run, µs (on a busy shared
/// host the CPU time varies much less than the rate).
fn forbid_drain(n: usize) -> (f64, f64) {
    let dir = fresh_dir("forbid");
    let cfg = node_config(&dir, Durability::Normal);
    prepare(&dir, &cfg, &catalog_text(2, FORBID));
    let out = actix_rt::System::new().block_on(async move {
        let engine = Engine::builder().config(cfg).start().unwrap();
        engine.pause();
        let mut left = n;
        while left > 0 {
            let k = left.min(1000);
            engine.trigger_many("solo", vec![None; k]).await.unwrap();
            left -= k;
        }
        let (t0, cpu0) = (Instant::now(), cpu_us());
        engine.resume();
        while completed(&engine).await < n as u64 {
            actix_rt::time::sleep(Duration::from_millis(2)).await;
        }
        let rate = n as f64 / t0.elapsed().as_secs_f64();
        let cpu = (cpu_us() - cpu0) / n as f64;
        engine.shutdown(Duration::from_secs(5)).await.unwrap();
        (rate, cpu)
    });
    let _ = std::fs::remove_dir_all(&dir);
    out
}

/// `forbid`: the drains of a 5,000-run and a 30,000-run backlog of a `forbid` job, back to back
/// in each round: their rates and CPU time per run, and the ratios (medians of the rounds').
/// A round of `forbid`: (rate, CPU µs per run) of the 5,000-run drain, then the 30,000-run one.
type ForbidRound = ((f64, f64), (f64, f64));

fn forbid(rounds: usize) {
    let runs: Vec<ForbidRound> = (0..rounds)
        .map(|_| (forbid_drain(5_000), forbid_drain(30_000)))
        .collect();
    let rate = |pick: fn(&ForbidRound) -> f64| median(runs.iter().map(pick).collect());
    println!(
        "{:<52} {:>10.0} j/s",
        "forbid: a 5,000-run backlog of one job, drained",
        rate(|r| r.0.0)
    );
    println!(
        "{:<52} {:>10.0} j/s {:>9.2}x",
        "forbid: a 30,000-run backlog of one job, drained",
        rate(|r| r.1.0),
        rate(|r| r.1.0 / r.0.0)
    );
    println!(
        "{:<52} {:>11.1} µs",
        "forbid: CPU per run, 5,000-run backlog",
        rate(|r| r.0.1)
    );
    println!(
        "{:<52} {:>11.1} µs {:>9.2}x",
        "forbid: CPU per run, 30,000-run backlog (5,000's/this)",
        rate(|r| r.1.1),
        rate(|r| r.0.1 / r.1.1)
    );
    let each: Vec<String> = runs
        .iter()
        .map(|((s, sc), (l, lc))| format!("{s:.0}/{l:.0} ({sc:.0}/{lc:.0} µs)"))
        .collect();
    println!("{:<52} {}", "  (5,000/30,000 per round)", each.join(" "));
}

// ---------------------------------------------------------------- latency

fn latency(jobs: usize, secs: u64) -> (f64, f64, usize) {
    let dir = fresh_dir("latency");
    let cfg = node_config(&dir, Durability::Normal);
    // 1,000 recurring jobs spread over the seconds of a minute.
    let mut text = String::new();
    for i in 0..jobs {
        text.push_str(&format!(
            "[job.j{i}]\ntype = \"function\"\nprocessor = \"bench\"\ncron = \"{} * * * * *\"\npayload = {{ function = \"debug.noop\" }}\n",
            i % 60
        ));
    }
    prepare(&dir, &cfg, &catalog_text(2, &text));
    let db = PathBuf::from(&cfg.database.path);
    actix_rt::System::new().block_on(async move {
        let engine = Engine::builder().config(cfg).start().unwrap();
        actix_rt::time::sleep(Duration::from_secs(secs)).await;
        engine.shutdown(Duration::from_secs(5)).await.unwrap();
    });
    let conn = Connection::open(&db).unwrap();
    let mut delays: Vec<f64> = conn
        .prepare("SELECT started_at - scheduled_for FROM job_run WHERE status = 'succeeded' AND scheduled_for IS NOT NULL")
        .unwrap()
        .query_map([], |r| r.get::<_, i64>(0))
        .unwrap()
        .map(|d| d.unwrap() as f64)
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    delays.sort_by(|a, b| a.total_cmp(b));
    if delays.is_empty() {
        return (f64::NAN, f64::NAN, 0);
    }
    let pct = |p: f64| delays[((delays.len() - 1) as f64 * p).round() as usize];
    (pct(0.50), pct(0.99), delays.len())
}

/// What one `priority` round measured.
struct Priority {
    /// Due-to-start latency of the per-second jobs' slots during the drain, ms.
    p50: f64,
    p99: f64,
    /// Their slots that ran, and that were skipped, while the drain lasted.
    ran: usize,
    skipped: usize,
    /// The longest a bulk run waited from its trigger to its start, ms.
    bulk_wait: f64,
}

/// Due-to-start latency of high-priority per-second jobs while `n` low-priority runs drain on
/// the same processor, on a SQLite file or (`pg`) a PostgreSQL database of the round's own.
/// `aging` (ms per point, 0 for none) is the bulk job's.
fn priority_latency(n: usize, aging: u64, pg: bool) -> Priority {
    const TICKS: usize = 5;
    let dir = fresh_dir("priority");
    let mut cfg = node_config(&dir, Durability::Normal);
    // The bulk runs sleep 1 ms each, so that 20,000 of them on 2 executions last about 10 s.
    let mut text = format!(
        "[job.bulk]\ntype = \"function\"\nprocessor = \"bench\"\npriority = 0\naging = {aging}\noverlap_policy = \"allow\"\nmax_overlap = 1000000\npayload = {{ function = \"debug.sleep\", ms = 1 }}\n",
    );
    for i in 0..TICKS {
        text.push_str(&format!(
            "[job.tick{i}]\ntype = \"function\"\nprocessor = \"bench\"\npriority = 1000\ncron = \"* * * * * *\"\npayload = {{ function = \"debug.noop\" }}\n"
        ));
    }
    let text = catalog_text(2, &text);
    let db = pg.then(|| pg::Db::create("priority"));
    match &db {
        Some(db) => {
            cfg.database.url = db.url.clone();
            pg::seed(&db.url, &text);
            std::fs::create_dir_all(dir.join("data")).unwrap();
        }
        None => prepare(&dir, &cfg, &text),
    }
    let file = PathBuf::from(&cfg.database.path);
    let (from, to) = actix_rt::System::new().block_on(async move {
        let engine = Engine::builder().config(cfg).start().unwrap();
        engine.pause();
        let mut left = n;
        while left > 0 {
            let k = left.min(1000);
            engine.trigger_many("bulk", vec![None; k]).await.unwrap();
            left -= k;
        }
        engine.resume();
        let from = jobvisor::catalog::now_ms();
        while completed(&engine).await < n as u64 {
            actix_rt::time::sleep(Duration::from_millis(20)).await;
        }
        let to = jobvisor::catalog::now_ms();
        engine.shutdown(Duration::from_secs(5)).await.unwrap();
        (from, to)
    });
    // Both dialects read these alike.
    const TICKS_SQL: &str = "SELECT r.status, r.started_at - r.scheduled_for FROM job_run r
        JOIN job j USING (job_id)
        WHERE j.job_name LIKE 'tick%' AND r.scheduled_for >= $1 AND r.scheduled_for < $2";
    const BULK_SQL: &str = "SELECT max(r.started_at - r.created_at) FROM job_run r
        JOIN job j USING (job_id) WHERE j.job_name = 'bulk'";
    // Where a slot's delay goes: queued after its time, claimed after queued, started after
    // claimed (`BENCH_PHASES=1`).
    const PHASES_SQL: &str = "SELECT r.created_at - r.scheduled_for, r.claimed_at - r.created_at,
            r.started_at - r.claimed_at FROM job_run r JOIN job j USING (job_id)
        WHERE j.job_name LIKE 'tick%' AND r.status = 'succeeded' AND r.scheduled_for >= $1
          AND r.scheduled_for < $2";
    let phases = std::env::var_os("BENCH_PHASES").is_some();
    let (rows, bulk_wait): (Vec<(String, Option<i64>)>, Option<i64>) = match &db {
        Some(db) => pg::read(&db.url, |c| {
            let rows = c
                .query(TICKS_SQL, &[&from, &to])
                .unwrap()
                .iter()
                .map(|r| (r.get(0), r.get(1)))
                .collect();
            if phases {
                let rows: Vec<[i64; 3]> = c
                    .query(PHASES_SQL, &[&from, &to])
                    .unwrap()
                    .iter()
                    .map(|r| [r.get(0), r.get(1), r.get(2)])
                    .collect();
                print_phases(&rows);
            }
            (rows, c.query_one(BULK_SQL, &[]).unwrap().get(0))
        }),
        None => {
            let conn = Connection::open(&file).unwrap();
            let rows = conn
                .prepare(TICKS_SQL)
                .unwrap()
                .query_map(params![from, to], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap()
                .map(Result::unwrap)
                .collect();
            if phases {
                let rows: Vec<[i64; 3]> = conn
                    .prepare(PHASES_SQL)
                    .unwrap()
                    .query_map(params![from, to], |r| Ok([r.get(0)?, r.get(1)?, r.get(2)?]))
                    .unwrap()
                    .map(Result::unwrap)
                    .collect();
                print_phases(&rows);
            }
            (rows, conn.query_row(BULK_SQL, [], |r| r.get(0)).unwrap())
        }
    };
    drop(db);
    let _ = std::fs::remove_dir_all(&dir);
    let mut delays: Vec<f64> = rows
        .iter()
        .filter(|(status, _)| status == "succeeded")
        .filter_map(|(_, d)| d.map(|d| d as f64))
        .collect();
    let skipped = rows
        .iter()
        .filter(|(status, _)| status == "skipped")
        .count();
    delays.sort_by(|a, b| a.total_cmp(b));
    let pct = |p: f64| {
        delays
            .get(((delays.len().max(1) - 1) as f64 * p).round() as usize)
            .copied()
            .unwrap_or(f64::NAN)
    };
    Priority {
        p50: pct(0.50),
        p99: pct(0.99),
        ran: delays.len(),
        skipped,
        bulk_wait: bulk_wait.map_or(f64::NAN, |w| w as f64),
    }
}

/// Prints the p50 and p99 of each phase of the slots' delays, ms (stderr).
fn print_phases(rows: &[[i64; 3]]) {
    let names = [
        "queued after its time",
        "claimed after queued",
        "started after claimed",
    ];
    let text: Vec<String> = (0..3)
        .map(|k| {
            let v: Vec<f64> = rows.iter().map(|r| r[k] as f64).collect();
            format!(
                "{} p50 {} p99 {}",
                names[k],
                api::pct(&v, 0.5),
                api::pct(&v, 0.99)
            )
        })
        .collect();
    eprintln!("priority phases: {}", text.join("; "));
}

/// Prints `priority` (and `pg-priority`): medians over the rounds.
fn print_priority(n: usize, rounds: usize, aging: u64, pg: bool) {
    let results: Vec<Priority> = (0..rounds)
        .map(|_| priority_latency(n, aging, pg))
        .collect();
    let on = if pg { "postgres" } else { "sqlite" };
    let rows = [
        ("p50", median(results.iter().map(|r| r.p50).collect())),
        ("p99", median(results.iter().map(|r| r.p99).collect())),
    ];
    for (what, ms) in rows {
        println!(
            "{:<52} {:>11.1} ms",
            format!("priority ({on}): per-second jobs during a drain, {what}"),
            ms
        );
    }
    println!(
        "{:<52} {:>14}",
        "  (slots run/skipped per round)",
        results
            .iter()
            .map(|r| format!("{}/{}", r.ran, r.skipped))
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!(
        "{:<52} {:>11.1} s",
        format!("  longest wait of a bulk run (aging {aging} ms/point)"),
        median(results.iter().map(|r| r.bulk_wait).collect()) / 1000.0
    );
}

// ---------------------------------------------------------------- idle

fn proc_cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let rest = stat.rsplit_once(") ").unwrap().1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

/// CPU ticks per thread name, for `BENCH_THREADS=1`.
fn thread_ticks() -> std::collections::BTreeMap<String, u64> {
    let mut out = std::collections::BTreeMap::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        let (head, rest) = stat.rsplit_once(") ").unwrap();
        let name = head.split_once(" (").map_or("?", |x| x.1).to_string();
        let f: Vec<&str> = rest.split_whitespace().collect();
        *out.entry(name).or_default() +=
            f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    }
    out
}

fn rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: f64 = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    kb / 1024.0
}

/// Measures idle CPU and RSS in a fresh process: in this one, earlier workloads' allocations
/// would count in the RSS.
fn idle_in_child(distinct: bool) -> (f64, f64) {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .arg("idle-once")
        .args(distinct.then_some("--distinct"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last().unwrap_or_default();
    let mut figures = line.split_whitespace().map(|v| v.parse::<f64>().unwrap());
    match (figures.next(), figures.next()) {
        (Some(cpu), Some(rss)) => (cpu, rss),
        _ => panic!("idle-once printed {text:?}"),
    }
}

/// Idle CPU and RSS of `jobs` recurring jobs: all of one cron expression, or with `distinct`,
/// each of its own (the scheduler compiles an expression once for all the jobs that use it).
fn idle(jobs: usize, secs: u64, distinct: bool) -> (f64, f64) {
    let dir = fresh_dir("idle");
    let cfg = node_config(&dir, Durability::Normal);
    let mut text = String::new();
    for i in 0..jobs {
        // Nothing due during the measurement: once a year.
        let cron = if distinct {
            format!("{} {} 1 1 *", i % 60, (i / 60) % 24)
        } else {
            "0 0 1 1 *".to_string()
        };
        text.push_str(&format!(
            "[job.j{i}]\ntype = \"function\"\nprocessor = \"bench\"\ncron = \"{cron}\"\npayload = {{ function = \"debug.noop\" }}\n"
        ));
    }
    prepare(&dir, &cfg, &catalog_text(2, &text));
    let out = actix_rt::System::new().block_on(async move {
        let engine = Engine::builder().config(cfg).start().unwrap();
        // Let start-up (activation, schedule load) settle first.
        actix_rt::time::sleep(Duration::from_secs(3)).await;
        let ticks0 = proc_cpu_ticks();
        let t0 = Instant::now();
        actix_rt::time::sleep(Duration::from_secs(secs)).await;
        let ticks = proc_cpu_ticks() - ticks0;
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        let cpu_pct = ticks as f64 / hz / t0.elapsed().as_secs_f64() * 100.0;
        if std::env::var_os("BENCH_TRIM").is_some() {
            // SAFETY: malloc_trim has no preconditions. (An experiment, not a default.)
            unsafe { libc::malloc_trim(0) };
        }
        let rss = rss_mb();
        engine.shutdown(Duration::from_secs(5)).await.unwrap();
        (cpu_pct, rss)
    });
    let _ = std::fs::remove_dir_all(&dir);
    out
}

// ---------------------------------------------------------------- scale

/// A catalog for driving `queue` directly: the no-op job, a node and the processor.
/// Returns (its folder, the catalog, job id, node id, processor id).
fn sql_catalog(tag: &str) -> (PathBuf, Connection, i64, i64, i64) {
    let dir = fresh_dir(tag);
    let db = dir.join("catalog.db");
    let catalog = Catalog::open(&db, &DbSettings::default()).unwrap();
    catalog
        .import(
            &toml_format::parse(&catalog_text(2, NOOP)).unwrap(),
            "bench",
        )
        .unwrap();
    let job_id = catalog.job("noop").unwrap().id;
    drop(catalog);
    // A connection of the bench's own, with the catalog's pragmas: the SQL alone is measured.
    let mut catalog = jobvisor::catalog::open_connection(&db, &DbSettings::default()).unwrap();
    let conn = &mut catalog;
    let who = node::Applicant {
        name: "bench",
        host: "h",
        pid: 1,
        version: "v",
        lease_ttl_ms: 30_000,
    };
    let node::Registration::Taken(lease) =
        node::register_node(conn, &who, 0, 15_000, |_| true, None).unwrap()
    else {
        panic!("the bench node name is free")
    };
    let node = lease.node_id;
    let pid: i64 = conn
        .query_row("SELECT processor_id FROM job_processor", [], |r| r.get(0))
        .unwrap();
    (dir, catalog, job_id, node, pid)
}

/// An on-demand run of the no-op job, due at once.
fn noop_run(job_id: i64, processor_id: i64) -> NewRun {
    NewRun {
        job_id,
        processor_id,
        priority: 0,
        scheduled_for: None,
        run_after: 0,
        params: None,
        status: RunStatus::Queued,
        error: None,
    }
}

/// The completion of a claimed run that succeeded.
fn succeeded(run: &ClaimedRun) -> Completion {
    Completion {
        run_id: run.run_id,
        job_id: run.job_id,
        claim_token: run.claim_token,
        outcome: Outcome::Succeeded(serde_json::json!({})),
        log: None,
        started_at: Some(1),
        finished_at: 2,
        retry_at: None,
    }
}

/// A catalog with `history` finished runs of the no-op job: (folder, catalog, job, node,
/// processor).
fn history_catalog(history: usize) -> (PathBuf, Connection, i64, i64, i64) {
    let (dir, mut catalog, job_id, node, pid) = sql_catalog(&format!("scale-{history}"));
    let conn = &mut catalog;
    activation::set_state(&*conn, node, job_id, ActivationState::Active, "bench", 0).unwrap();
    conn.execute_batch("BEGIN").unwrap();
    {
        let mut ins = conn
            .prepare("INSERT INTO job_run (job_id, processor_id, status, scheduled_for, run_after, created_at, started_at, finished_at, elapsed, result)
                      VALUES (?1, ?2, 'succeeded', ?3, ?3, ?3, ?3, ?3 + 1, 1, '{}')")
            .unwrap();
        for i in 0..history {
            ins.execute(params![job_id, pid, i as i64]).unwrap();
        }
    }
    conn.execute_batch("COMMIT").unwrap();
    (dir, catalog, job_id, node, pid)
}

/// Median claim latency (µs) of one queued run with 10,000 and with 1,000,000 finished runs in
/// the table, sampled alternately so that both see the same machine.
fn claim_latency() -> (f64, f64) {
    let mut catalogs = [history_catalog(10_000), history_catalog(1_000_000)];
    let mut samples = [Vec::new(), Vec::new()];
    for i in 0..400 {
        for (k, (_, catalog, job_id, node, pid)) in catalogs.iter_mut().enumerate() {
            let conn = &*catalog;
            queue::enqueue(conn, &noop_run(*job_id, *pid), 0).unwrap();
            let t0 = Instant::now();
            conn.execute_batch("BEGIN IMMEDIATE").unwrap();
            let claim = queue::claim(conn, *pid, *node, 1, 1, 1000, i, false).unwrap();
            conn.execute_batch("COMMIT").unwrap();
            samples[k].push(t0.elapsed().as_secs_f64() * 1e6);
            complete::complete(conn, *node, &succeeded(&claim.runs[0])).unwrap();
        }
    }
    for (dir, ..) in catalogs {
        let _ = std::fs::remove_dir_all(&dir);
    }
    let [small, large] = samples;
    (median(small), median(large))
}

// ---------------------------------------------------------------- sql

/// The engine's own claim and completion SQL (`queue::claim`, `complete::complete_all`) in one
/// thread, `per_tx` runs per transaction, without the actors: what the writer thread costs.
fn engine_sql(n: usize, per_tx: usize) -> f64 {
    let (dir, mut catalog, job_id, node, pid) = sql_catalog("sql");
    let conn = &mut catalog;
    conn.execute_batch("BEGIN").unwrap();
    for _ in 0..n {
        queue::enqueue(conn, &noop_run(job_id, pid), 0).unwrap();
    }
    conn.execute_batch("COMMIT").unwrap();
    let t0 = Instant::now();
    let mut token = 1;
    let (mut claiming, mut completing) = (Duration::ZERO, Duration::ZERO);
    loop {
        let tc = Instant::now();
        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        let claim = queue::claim(conn, pid, node, per_tx, 1, 1000, token, false).unwrap();
        conn.execute_batch("COMMIT").unwrap();
        claiming += tc.elapsed();
        if claim.runs.is_empty() {
            break;
        }
        token += per_tx as i64;
        let done: Vec<Completion> = claim.runs.iter().map(succeeded).collect();
        let tc = Instant::now();
        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        complete::complete_all(conn, node, &done).unwrap();
        conn.execute_batch("COMMIT").unwrap();
        completing += tc.elapsed();
    }
    if std::env::var_os("BENCH_PHASES").is_some() {
        eprintln!(
            "claim {:.1} µs/run, complete {:.1} µs/run",
            claiming.as_secs_f64() * 1e6 / n as f64,
            completing.as_secs_f64() * 1e6 / n as f64
        );
    }
    let rate = n as f64 / t0.elapsed().as_secs_f64();
    let _ = std::fs::remove_dir_all(&dir);
    rate
}

// ---------------------------------------------------------------- flow

/// Two no-op jobs and a workflow running one after the other.
const TWO_STEPS: &str = "[job.a]\ntype = \"function\"\nprocessor = \"bench\"\noverlap_policy = \"allow\"\nmax_overlap = 1000000\npayload = { function = \"debug.noop\" }\n\
[job.b]\ntype = \"function\"\nprocessor = \"bench\"\noverlap_policy = \"allow\"\nmax_overlap = 1000000\npayload = { function = \"debug.noop\" }\n\
[job.two]\ntype = \"workflow\"\nprocessor = \"bench\"\npayload.steps = [{ job = \"a\" }, { job = \"b\", after = [\"a\"] }]\n";

/// Drains `workflows` two-step workflows queued while paused, on 2 executions; workflows per
/// second (each is two step runs, queued one after the other).
fn flow_drain(workflows: usize) -> f64 {
    let dir = fresh_dir("flow");
    let cfg = node_config(&dir, Durability::Normal);
    prepare(&dir, &cfg, &catalog_text(2, TWO_STEPS));
    let rate = actix_rt::System::new().block_on(async move {
        let engine = Engine::builder().config(cfg).start().unwrap();
        engine.pause();
        let mut left = workflows;
        while left > 0 {
            let k = left.min(1000);
            engine.trigger_many("two", vec![None; k]).await.unwrap();
            left -= k;
        }
        let t0 = Instant::now();
        engine.resume();
        // A workflow's run ends in the transaction of its second step's completion.
        while completed(&engine).await < 2 * workflows as u64 {
            actix_rt::time::sleep(Duration::from_millis(2)).await;
        }
        let rate = workflows as f64 / t0.elapsed().as_secs_f64();
        engine.shutdown(Duration::from_secs(5)).await.unwrap();
        rate
    });
    let _ = std::fs::remove_dir_all(&dir);
    rate
}

/// The delay (ms) from step `a`'s end to step `b`'s start in `workflows` two-step workflows
/// triggered one every 2 ms on 4 executions (the successor never waits for an instance): p50,
/// p99, max, and how many were measured.
fn flow_latency(workflows: usize) -> (f64, f64, f64, usize) {
    let dir = fresh_dir("flow-latency");
    let cfg = node_config(&dir, Durability::Normal);
    prepare(&dir, &cfg, &catalog_text(4, TWO_STEPS));
    let db = PathBuf::from(&cfg.database.path);
    actix_rt::System::new().block_on(async move {
        let engine = Engine::builder().config(cfg).start().unwrap();
        let mut roots = Vec::with_capacity(workflows);
        for _ in 0..workflows {
            roots.push(engine.trigger("two", None).await.unwrap());
            actix_rt::time::sleep(Duration::from_millis(2)).await;
        }
        while completed(&engine).await < 2 * workflows as u64 {
            actix_rt::time::sleep(Duration::from_millis(5)).await;
        }
        engine.shutdown(Duration::from_secs(5)).await.unwrap();
    });
    let conn = Connection::open(&db).unwrap();
    let mut delays: Vec<f64> = conn
        .prepare(
            "SELECT b.started_at - a.finished_at FROM job_run a JOIN job_run b
             ON b.pid = a.pid AND b.step = 'b' AND a.step = 'a'
             WHERE a.status = 'succeeded' AND b.status = 'succeeded'",
        )
        .unwrap()
        .query_map([], |r| r.get::<_, i64>(0))
        .unwrap()
        .map(|d| d.unwrap() as f64)
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    delays.sort_by(|a, b| a.total_cmp(b));
    if delays.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN, 0);
    }
    let pct = |p: f64| delays[((delays.len() - 1) as f64 * p).round() as usize];
    (pct(0.50), pct(0.99), *delays.last().unwrap(), delays.len())
}

/// The workflow figures: delay from a step's end to its successor's start, and the drain rate
/// of 10,000 two-step workflows against a plain drain of as many runs (20,000) in the same round.
fn flow(rounds: usize) {
    const WORKFLOWS: usize = 10_000;
    let mut latency = Vec::new();
    let mut rates = Vec::new();
    for _ in 0..rounds {
        latency.push(flow_latency(1000));
        let plain = drain(2 * WORKFLOWS, 2, Durability::Normal).drain_rate;
        let workflows = flow_drain(WORKFLOWS);
        rates.push((plain, workflows));
    }
    let p50 = median(latency.iter().map(|l| l.0).collect());
    let p99 = median(latency.iter().map(|l| l.1).collect());
    let max = latency.iter().map(|l| l.2).fold(0.0, f64::max);
    println!(
        "{:<52} {:>11.1} ms",
        "flow: step end to successor start, p50", p50
    );
    println!(
        "{:<52} {:>11.1} ms   (target < 10 ms)",
        "flow: step end to successor start, p99", p99
    );
    println!(
        "{:<52} {:>14}",
        "  (max; pairs measured per round)",
        format!(
            "{max:.0} ms; {}",
            latency
                .iter()
                .map(|l| l.3.to_string())
                .collect::<Vec<_>>()
                .join("/")
        )
    );
    let plain = median(rates.iter().map(|r| r.0).collect());
    let wf = median(rates.iter().map(|r| r.1).collect());
    let ratio = median(rates.iter().map(|r| 2.0 * r.1 / r.0).collect());
    println!(
        "{:<52} {:>10.0} j/s",
        "flow: plain drain, 20,000 runs, 2 executions", plain
    );
    println!(
        "{:<52} {:>10.0} w/s {:>9.2}x",
        "flow: 10,000 two-step workflows, 2 executions", wf, ratio
    );
    println!(
        "{:<52} {:>14}",
        "  (step runs/s vs the plain drain, per round)",
        rates
            .iter()
            .map(|r| format!("{:.0}/{:.0}", 2.0 * r.1, r.0))
            .collect::<Vec<_>>()
            .join(" ")
    );
}

// ---------------------------------------------------------------- throughput

/// A throughput figure: label, unit, value.
type Figure = (&'static str, &'static str, f64);

/// Floor, drains and the engine's SQL, each round measuring all of them back to back: on a
/// shared machine the speed changes from minute to minute, so each figure is compared with the
/// floor measured next to it, and the median of those ratios is printed.
fn throughput(what: &str, n: usize, rounds: usize) {
    let all = what == "all";
    let drains = all || what == "drain";
    let fleet = drains || what == "fleet";
    let sql = drains || what == "sql";
    // Per round: its batched floor, and its figures in printing order.
    let mut measured: Vec<(f64, Vec<Figure>)> = Vec::new();
    for round in 0..rounds {
        let floor_batched = floor(n, 100, 2);
        let mut row = vec![
            (
                "floor: rusqlite loop, 1 per tx, 2 workers",
                "j/s",
                floor(n, 1, 2),
            ),
            (
                "floor: rusqlite loop, 100 per tx, 2 workers",
                "j/s",
                floor_batched,
            ),
        ];
        if drains {
            let two = drain(n, 2, Durability::Normal);
            row.push(("enqueue: single API (trigger)", "r/s", two.single_rate));
            row.push((
                "enqueue: batch API (trigger_many, 1000 per call)",
                "r/s",
                two.batch_rate,
            ));
            row.push(("drain: 2 executions", "j/s", two.drain_rate));
            // A drain measured right after another is slower on this kind of machine (the
            // earlier file's writeback): the deaf drain and its plain twin swap places from one
            // round to the next, so neither is always second.
            let (plain, deaf) = if round % 2 == 0 {
                let plain = drain(n, 2, Durability::Normal);
                (plain, drain_with(n, 2, Durability::Normal, true))
            } else {
                let deaf = drain_with(n, 2, Durability::Normal, true);
                (drain(n, 2, Durability::Normal), deaf)
            };
            row.push((
                "drain: 2 executions, a subscriber that never reads",
                "j/s",
                deaf.drain_rate,
            ));
            row.push((
                "  (its rate / a plain drain beside it, order alternating)",
                "x",
                deaf.drain_rate / plain.drain_rate,
            ));
            row.push(("  (events it dropped)", "events", deaf.dropped as f64));
            let eight = drain(n, 8, Durability::Normal);
            row.push(("drain: 8 executions", "j/s", eight.drain_rate));
            let full = drain(n, 2, Durability::Full);
            row.push((
                "drain: 2 executions, durability = full",
                "j/s",
                full.drain_rate,
            ));
            let peak = [&two, &eight, &full].map(|d| d.wal_peak_mb);
            let after = [&two, &eight, &full].map(|d| d.wal_after_mb);
            row.push((
                "drain: WAL peak (largest of the three drains)",
                "MB",
                peak.into_iter().fold(0.0, f64::max),
            ));
            row.push((
                "drain: WAL after shutdown (largest of the three)",
                "MB",
                after.into_iter().fold(0.0, f64::max),
            ));
        }
        if fleet {
            let one = fleet::drain(n, 1);
            let three = fleet::drain(n, 3);
            row.push(("drain: 1 node process, 2 executions", "j/s", one));
            row.push(("drain: 3 node processes on one file, 2 each", "j/s", three));
            row.push(("  (its rate / 1 node process)", "x", three / one));
        }
        if sql {
            let rate = engine_sql(n, 256);
            row.push((
                "engine SQL alone: claim + complete, 256 per tx",
                "j/s",
                rate,
            ));
        }
        measured.push((floor_batched, row));
    }
    for (i, &(label, unit, _)) in measured[0].1.iter().enumerate() {
        let figure = median(measured.iter().map(|(_, row)| row[i].2).collect());
        let ratios: Vec<f64> = measured.iter().map(|(f, row)| row[i].2 / f).collect();
        if unit == "r/s" || unit == "events" {
            println!("{label:<52} {figure:>10.0} {unit}");
            continue;
        }
        if unit == "x" {
            let each: Vec<String> = measured
                .iter()
                .map(|(_, row)| format!("{:.2}", row[i].2))
                .collect();
            println!(
                "{label:<52} {figure:>10.2}x    (per round {})",
                each.join("/")
            );
            continue;
        }
        if unit == "MB" {
            let each: Vec<String> = measured
                .iter()
                .map(|(_, row)| format!("{:.1}", row[i].2))
                .collect();
            println!(
                "{label:<52} {figure:>11.1} {unit}   (per round {})",
                each.join("/")
            );
            continue;
        }
        println!(
            "{label:<52} {figure:>10.0} {unit} {:>9.2}x",
            median(ratios.clone())
        );
        if label == "drain: 2 executions" {
            let each: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
            println!(
                "{:<52} {:>14}",
                "  (ratio to the floor per round)",
                each.join("/")
            );
        }
    }
}

// ---------------------------------------------------------------- main

fn main() {
    let mut argv = std::env::args().skip(1);
    if argv.next().as_deref() == Some("api-node") {
        api::node_main(argv.collect());
    }
    let a = args();
    let all = a.what == "all";
    let rounds = a.rounds.max(1);
    println!(
        "jobvisor bench: N = {}, median of {rounds} round(s), release = {}",
        a.n,
        !cfg!(debug_assertions)
    );
    println!("{:<52} {:>14} {:>10}", "workload", "figure", "vs floor");
    if all || ["floor", "drain", "fleet", "sql"].contains(&a.what.as_str()) {
        throughput(&a.what, a.n, rounds);
    }
    if a.what == "profile" {
        // One drain with 2 executions and nothing else: for `perf record`, or for
        // `valgrind --tool=callgrind` (instructions, which a busy machine does not change);
        // BENCH_DEAF=1 adds a subscriber that never reads.
        let deaf = std::env::var_os("BENCH_DEAF").is_some();
        let d = drain_with(a.n, 2, Durability::Normal, deaf);
        println!("{:<52} {:>10.0} j/s", "drain: 2 executions", d.drain_rate);
        if deaf {
            println!(
                "{:<52} {:>10} events",
                "  dropped by a subscriber that never reads", d.dropped
            );
        }
    }
    if all || a.what == "priority" {
        print_priority(a.n, rounds, a.aging, false);
    }
    // Needs a PostgreSQL server (see bench/pg.rs): only when asked for.
    if a.what == "pg-priority" {
        print_priority(a.n, rounds, a.aging, true);
    }
    if all || a.what == "latency" {
        let results: Vec<(f64, f64, usize)> = (0..rounds).map(|_| latency(1000, 12)).collect();
        let p50 = median(results.iter().map(|r| r.0).collect());
        let p99 = median(results.iter().map(|r| r.1).collect());
        println!(
            "{:<52} {:>11.1} ms",
            "latency: 1,000 recurring jobs, due-to-start p50", p50
        );
        println!(
            "{:<52} {:>11.1} ms",
            "latency: 1,000 recurring jobs, due-to-start p99", p99
        );
        println!(
            "{:<52} {:>14}",
            "  (runs measured per round)",
            results
                .iter()
                .map(|r| r.2.to_string())
                .collect::<Vec<_>>()
                .join("/")
        );
    }
    if a.what == "idle-once" {
        // One idle measurement in a process of its own (see `idle_in_child`).
        let distinct = std::env::args().any(|a| a == "--distinct");
        let (cpu, rss) = idle(1000, 30, distinct);
        println!("{cpu} {rss}");
        return;
    }
    if all || a.what == "idle" {
        let results: Vec<(f64, f64)> = (0..rounds).map(|_| idle_in_child(false)).collect();
        println!(
            "{:<52} {:>12.2} %",
            "idle: 1,000 recurring jobs, 30 s, CPU of one core",
            median(results.iter().map(|r| r.0).collect())
        );
        println!(
            "{:<52} {:>11.1} MB",
            "idle: 1,000 recurring jobs, RSS",
            median(results.iter().map(|r| r.1).collect())
        );
        let distinct: Vec<(f64, f64)> = (0..rounds).map(|_| idle_in_child(true)).collect();
        println!(
            "{:<52} {:>11.1} MB",
            "idle: 1,000 jobs of 1,000 cron expressions, RSS",
            median(distinct.iter().map(|r| r.1).collect())
        );
    }
    if all || a.what == "flow" {
        flow(rounds);
    }
    // 35,000 runs one at a time per round: only when asked for.
    if a.what == "forbid" {
        forbid(rounds);
    }
    if all || a.what == "api" {
        api::print(a.n, rounds);
    }
    if a.what == "api-readers" {
        api::print_readers(rounds);
    }
    // Needs a PostgreSQL server (see bench/pg.rs): only when asked for.
    if a.what == "pg" {
        pg::print(a.n, rounds);
    }
    if a.what == "pg-profile" {
        // One drain by 3 node threads through the PostgreSQL catalog and nothing else: for
        // `perf record` of the server's backends.
        pg::profile(a.n);
    }
    if all || a.what == "scale" {
        let results: Vec<(f64, f64)> = (0..rounds).map(|_| claim_latency()).collect();
        let small = median(results.iter().map(|r| r.0).collect());
        let large = median(results.iter().map(|r| r.1).collect());
        let ratio = median(results.iter().map(|r| r.1 / r.0).collect());
        println!(
            "{:<52} {:>11.1} µs",
            "scale: claim latency, 10,000 history rows", small
        );
        println!(
            "{:<52} {:>11.1} µs {:>9.2}x",
            "scale: claim latency, 1,000,000 history rows", large, ratio
        );
    }
}
