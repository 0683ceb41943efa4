//! The API's rows of the benchmark: a real node process (this executable, re-run as
//! `jobvisor run` through `cli::main_with`) on a fresh catalog, driven over HTTP/1.1 with
//! keep-alive (awc): single-run triggers, batch triggers against the in-process
//! `Engine::trigger_many` of the same round, JSON-RPC round trips, and the node's idle CPU and
//! RSS with the API up; and (`api-readers`) whether requests wait for each other.

use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use jobvisor::config::Durability;
use jobvisor::runtime::Engine;
use serde_json::{Value, json};

use super::{NOOP, catalog_text, fresh_dir, median, node_config, prepare};

/// A node process and what it printed.
pub struct Node {
    child: Child,
    base: String,
    token: String,
}

impl Node {
    /// The node's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        // SAFETY: signalling our own child.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let _ = self.child.wait();
    }
}

/// Runs `jobvisor` with `args` in this process (the child side of [`start`]).
pub fn node_main(args: Vec<String>) -> ! {
    let mut argv = vec![std::ffi::OsString::from("jobvisor")];
    argv.extend(args.into_iter().map(Into::into));
    std::process::exit(jobvisor::cli::main_with(argv))
}

/// Starts a node on a fresh catalog holding `jobs` (TOML) and waits for its banner.
fn start(dir: &Path, jobs: &str) -> Node {
    let cfg = node_config(dir, Durability::Normal);
    prepare(dir, &cfg, &catalog_text(2, jobs));
    spawn(&cfg, "bench", &[])
}

/// The release `jobvisor` binary beside this example (`cargo build --release --bin jobvisor`),
/// if there is one: the idle node's memory is the product binary's, linked with its code
/// order (`link/jobvisor.order`). This executable carries the benchmark's own code, and its
/// dependencies are built with the dev-dependencies' features, so the order's names miss.
fn product_binary() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let bin = exe.parent()?.parent()?.join("jobvisor");
    bin.is_file().then_some(bin)
}

/// Starts `jobvisor run` as node `name` on `cfg`'s catalog (this executable re-run, so the
/// benchmark builds no other binary), with `env` set, and waits for its banner. The token is
/// the one a first start on a catalog without users prints (empty for the nodes after it).
pub fn spawn(cfg: &jobvisor::config::NodeConfig, name: &str, env: &[(&str, &str)]) -> Node {
    spawn_with(None, cfg, name, env)
}

/// [`spawn`] with `bin` as the node (the `jobvisor` binary) instead of this executable.
fn spawn_with(
    bin: Option<&Path>,
    cfg: &jobvisor::config::NodeConfig,
    name: &str,
    env: &[(&str, &str)],
) -> Node {
    let mut command = match bin {
        Some(bin) => Command::new(bin),
        None => {
            let mut c = Command::new(std::env::current_exe().unwrap());
            c.arg("api-node");
            c
        }
    };
    let mut child = command
        .args(["--db", &cfg.database.path, "run", "--bind", "127.0.0.1:0"])
        .args(["--node-name", name, "--data-dir", &cfg.node.data_dir])
        .env("JOBVISOR__POLICY__PRIORITY_FLOOR", "-1000000000")
        .env("JOBVISOR_LOG", "warn")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let (mut base, mut token) = (None, None);
    for line in lines.by_ref().map_while(Result::ok) {
        let line = line.trim().to_string();
        if let Some(t) = line.strip_prefix("token:") {
            token = Some(t.trim().to_string());
        }
        if let Some(a) = line.strip_prefix("api:") {
            base = Some(a.trim().to_string());
            break;
        }
    }
    std::thread::spawn(move || for _ in lines {});
    Node {
        child,
        base: base.expect("the node printed its address"),
        token: token.unwrap_or_default(),
    }
}

async fn post(client: &awc::Client, node: &Node, path: &str, body: &Value) -> Value {
    let mut res = client
        .post(format!("{}{path}", node.base))
        .bearer_auth(&node.token)
        .send_json(body)
        .await
        .unwrap();
    let bytes = res.body().limit(16 << 20).await.unwrap();
    assert!(
        res.status().is_success(),
        "{path}: {} {:?}",
        res.status(),
        bytes
    );
    serde_json::from_slice(&bytes).unwrap_or(Value::Null)
}

fn client() -> awc::Client {
    awc::Client::builder()
        .timeout(Duration::from_secs(60))
        .finish()
}

/// Figures of one round.
pub struct Round {
    /// Single-run triggers over HTTP, runs/s.
    pub single: f64,
    /// Batch triggers over HTTP, runs/s.
    pub batch: f64,
    /// In-process `trigger_many`, runs/s.
    pub in_process: f64,
    /// JSON-RPC `job.run` round trips, ms.
    pub rpc_command: Vec<f64>,
    /// JSON-RPC function calls (a run each, answered with its result), ms.
    pub rpc_function: Vec<f64>,
}

/// One round: the node is paused for the triggers, so they measure queueing alone, as the
/// in-process `trigger_many` beside them does.
pub fn round(n: usize, batch: usize) -> Round {
    let dir = fresh_dir("api");
    let node = start(&dir, NOOP);
    let (single, batch_rate, rpc_command, rpc_function) = actix_rt::System::new().block_on(async {
        let c = client();
        post(&c, &node, "/api/v1/node/pause", &json!({})).await;
        let singles = (n / 10).max(100);
        let t0 = Instant::now();
        for _ in 0..singles {
            post(&c, &node, "/api/v1/jobs/noop/runs", &json!({})).await;
        }
        let single = singles as f64 / t0.elapsed().as_secs_f64();
        let body = json!({ "runs": vec![json!({}); batch] });
        let t0 = Instant::now();
        for _ in 0..n.div_ceil(batch) {
            post(&c, &node, "/api/v1/jobs/noop/runs/batch", &body).await;
        }
        let batch_rate = (n.div_ceil(batch) * batch) as f64 / t0.elapsed().as_secs_f64();
        let mut rpc_command = Vec::new();
        for _ in 0..500 {
            let t0 = Instant::now();
            post(
                &c,
                &node,
                "/rpc",
                &json!({"jsonrpc": "2.0", "method": "job.run",
                    "params": {"job": "noop"}, "id": 1}),
            )
            .await;
            rpc_command.push(t0.elapsed().as_secs_f64() * 1000.0);
        }
        post(&c, &node, "/api/v1/node/resume", &json!({})).await;
        // Let the queued runs drain before timing calls that wait for their own run.
        loop {
            let mut res = c
                .get(format!("{}/api/v1/runs?status=queued&limit=1", node.base))
                .bearer_auth(&node.token)
                .send()
                .await
                .unwrap();
            let v: Value = res.json().limit(1 << 20).await.unwrap();
            if v.as_array().is_some_and(Vec::is_empty) {
                break;
            }
            actix_rt::time::sleep(Duration::from_millis(100)).await;
        }
        let mut rpc_function = Vec::new();
        for i in 0..300 {
            let t0 = Instant::now();
            let v = post(
                &c,
                &node,
                "/rpc",
                &json!({"jsonrpc": "2.0", "method": "debug.echo",
                    "params": {"i": i}, "id": i}),
            )
            .await;
            assert_eq!(v["result"]["i"], i, "{v}");
            rpc_function.push(t0.elapsed().as_secs_f64() * 1000.0);
        }
        (single, batch_rate, rpc_command, rpc_function)
    });
    drop(node);
    let in_process = in_process(n, batch);
    let _ = std::fs::remove_dir_all(&dir);
    Round {
        single,
        batch: batch_rate,
        in_process,
        rpc_command,
        rpc_function,
    }
}

/// `Engine::trigger_many` on a paused in-process engine: the same batches, no HTTP.
fn in_process(n: usize, batch: usize) -> f64 {
    let dir = fresh_dir("api-inproc");
    let cfg = node_config(&dir, Durability::Normal);
    prepare(&dir, &cfg, &catalog_text(2, NOOP));
    let rate = actix_rt::System::new().block_on(async move {
        let engine = Engine::builder().config(cfg).start().unwrap();
        engine.pause();
        let t0 = Instant::now();
        for _ in 0..n.div_ceil(batch) {
            engine
                .trigger_many("noop", vec![None; batch])
                .await
                .unwrap();
        }
        let rate = (n.div_ceil(batch) * batch) as f64 / t0.elapsed().as_secs_f64();
        engine.shutdown(Duration::from_secs(5)).await.unwrap();
        rate
    });
    let _ = std::fs::remove_dir_all(&dir);
    rate
}

fn ticks_of(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = stat.rsplit_once(") ").unwrap().1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

fn rss_of(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}

/// How long the idle node is watched: past the 30 s after which the read connections that the
/// start and the first request opened close, and the node's heap trims every 30 s.
const IDLE_SECS: u64 = 75;

/// A node process with the API up and 1,000 recurring jobs, after one authenticated request
/// (so the API's connection and worker are warm): CPU of one core over `secs`, and RSS at the
/// end of it.
pub fn idle(jobs: usize, secs: u64) -> (f64, f64) {
    let dir = fresh_dir("api-idle");
    let mut text = String::new();
    for i in 0..jobs {
        text.push_str(&format!(
            "[job.j{i}]\ntype = \"function\"\nprocessor = \"bench\"\ncron = \"0 0 1 1 *\"\npayload = {{ function = \"debug.noop\" }}\n"
        ));
    }
    let cfg = node_config(&dir, Durability::Normal);
    prepare(&dir, &cfg, &catalog_text(2, &text));
    let node = spawn_with(product_binary().as_deref(), &cfg, "bench", &[]);
    actix_rt::System::new().block_on(async {
        let c = client();
        let mut res = c
            .get(format!("{}/api/v1/jobs?limit=10", node.base))
            .bearer_auth(&node.token)
            .send()
            .await
            .unwrap();
        assert!(res.status().is_success());
        let _ = res.body().await;
    });
    std::thread::sleep(Duration::from_secs(3));
    let pid = node.child.id();
    let t0 = Instant::now();
    let ticks0 = ticks_of(pid);
    std::thread::sleep(Duration::from_secs(secs));
    let ticks = ticks_of(pid) - ticks0;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let cpu = ticks as f64 / hz / t0.elapsed().as_secs_f64() * 100.0;
    let rss = rss_of(pid);
    drop(node);
    let _ = std::fs::remove_dir_all(&dir);
    (cpu, rss)
}

/// What `readers` measured, ms.
pub struct Readers {
    /// `GET /api/v1/jobs` with nothing else asked: p50, p99.
    pub alone: (f64, f64),
    /// The expensive read alone, median.
    pub heavy: f64,
    /// `GET /api/v1/jobs` while 4 clients run the expensive read back to back: p50, p99.
    pub loaded: (f64, f64),
}

/// The expensive read: runs of `noop` that succeeded on a node that ran none of them, which
/// looks at each of the job's 100,000 runs.
const HEAVY: &str = "/api/v1/runs?job=noop&status=succeeded&node=elsewhere&limit=100";

/// Requests waiting for each other: a node (`bin`, else this executable) whose catalog holds
/// 100,000 finished runs; the cheap `GET /api/v1/jobs` timed alone, then while 4 clients run
/// [`HEAVY`] back to back.
pub fn readers(bin: Option<&Path>) -> Readers {
    let dir = fresh_dir("api-readers");
    let cfg = node_config(&dir, Durability::Normal);
    prepare(&dir, &cfg, &catalog_text(2, NOOP));
    rusqlite::Connection::open(&cfg.database.path)
        .unwrap()
        .execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100000)
             INSERT INTO job_run (job_id, processor_id, status, run_after, created_at,
                 started_at, finished_at)
             SELECT j.job_id, j.processor_id, 'succeeded', i, i, i, i + 1
             FROM job j, n WHERE j.job_name = 'noop'",
            [],
        )
        .unwrap();
    let node = spawn_with(bin, &cfg, "bench", &[]);
    let figures = actix_rt::System::new().block_on(async {
        let c = client();
        let timed = |c: awc::Client, url: String, token: String| async move {
            let t0 = Instant::now();
            let mut res = c.get(url).bearer_auth(token).send().await.unwrap();
            let _ = res.body().limit(16 << 20).await.unwrap();
            assert!(res.status().is_success(), "{}", res.status());
            t0.elapsed().as_secs_f64() * 1000.0
        };
        let jobs = format!("{}/api/v1/jobs", node.base);
        let heavy = format!("{}{HEAVY}", node.base);
        let mut alone = Vec::new();
        for _ in 0..200 {
            alone.push(timed(c.clone(), jobs.clone(), node.token.clone()).await);
        }
        let mut heavy_alone = Vec::new();
        for _ in 0..10 {
            heavy_alone.push(timed(c.clone(), heavy.clone(), node.token.clone()).await);
        }
        let stop = std::rc::Rc::new(std::cell::Cell::new(false));
        let clients: Vec<_> = (0..4)
            .map(|_| {
                let (stop, url, token) = (stop.clone(), heavy.clone(), node.token.clone());
                let c = client();
                actix_rt::spawn(async move {
                    while !stop.get() {
                        timed(c.clone(), url.clone(), token.clone()).await;
                    }
                })
            })
            .collect();
        actix_rt::time::sleep(Duration::from_millis(300)).await;
        let mut loaded = Vec::new();
        for _ in 0..200 {
            loaded.push(timed(c.clone(), jobs.clone(), node.token.clone()).await);
            actix_rt::time::sleep(Duration::from_millis(5)).await;
        }
        stop.set(true);
        for t in clients {
            t.await.unwrap();
        }
        Readers {
            alone: (pct(&alone, 0.5), pct(&alone, 0.99)),
            heavy: median(heavy_alone),
            loaded: (pct(&loaded, 0.5), pct(&loaded, 0.99)),
        }
    });
    drop(node);
    let _ = std::fs::remove_dir_all(&dir);
    figures
}

/// Prints `readers` for this build's node and, when `BENCH_BEFORE` names another build's
/// `jobvisor` binary, for that one in the same rounds (alternating).
pub fn print_readers(rounds: usize) {
    let before = std::env::var_os("BENCH_BEFORE").map(PathBuf::from);
    let builds: Vec<(&str, Option<&Path>)> = match &before {
        Some(bin) => vec![("before", Some(bin.as_path())), ("this build", None)],
        None => vec![("this build", None)],
    };
    let mut results: Vec<Vec<Readers>> = builds.iter().map(|_| Vec::new()).collect();
    for _ in 0..rounds {
        for (k, (_, bin)) in builds.iter().enumerate() {
            results[k].push(readers(*bin));
        }
    }
    for ((name, _), rs) in builds.iter().zip(&results) {
        let col = |f: fn(&Readers) -> f64| median(rs.iter().map(f).collect());
        println!(
            "{:<52} {:>6.1} /{:>6.1} ms",
            format!("readers ({name}): GET /jobs alone, p50 / p99"),
            col(|r| r.alone.0),
            col(|r| r.alone.1)
        );
        println!(
            "{:<52} {:>15.1} ms",
            format!("readers ({name}): runs list over 100,000, alone"),
            col(|r| r.heavy)
        );
        println!(
            "{:<52} {:>6.1} /{:>6.1} ms",
            format!("readers ({name}): GET /jobs beside 4 of them, p50 / p99"),
            col(|r| r.loaded.0),
            col(|r| r.loaded.1)
        );
    }
}

/// Percentile of latencies, ms.
pub fn pct(v: &[f64], p: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// Prints the API rows for `rounds` rounds.
pub fn print(n: usize, rounds: usize) {
    let results: Vec<Round> = (0..rounds).map(|_| round(n, 1000)).collect();
    let col = |f: fn(&Round) -> f64| median(results.iter().map(f).collect());
    println!(
        "{:<52} {:>10.0} r/s",
        "api: single-run trigger over HTTP (keep-alive)",
        col(|r| r.single)
    );
    println!(
        "{:<52} {:>10.0} r/s",
        "api: in-process trigger_many, batches of 1,000",
        col(|r| r.in_process)
    );
    println!(
        "{:<52} {:>10.0} r/s {:>9.2}x",
        "api: batch trigger over HTTP, batches of 1,000",
        col(|r| r.batch),
        col(|r| r.batch / r.in_process)
    );
    let all = |f: fn(&Round) -> &Vec<f64>| -> Vec<f64> {
        results.iter().flat_map(|r| f(r).iter().copied()).collect()
    };
    let command = all(|r| &r.rpc_command);
    let function = all(|r| &r.rpc_function);
    println!(
        "{:<52} {:>11.2} ms",
        "api: JSON-RPC job.run round trip, p50",
        pct(&command, 0.5)
    );
    println!(
        "{:<52} {:>11.2} ms",
        "api: JSON-RPC job.run round trip, p99",
        pct(&command, 0.99)
    );
    println!(
        "{:<52} {:>11.2} ms",
        "api: JSON-RPC function call (a run) round trip, p50",
        pct(&function, 0.5)
    );
    println!(
        "{:<52} {:>11.2} ms",
        "api: JSON-RPC function call (a run) round trip, p99",
        pct(&function, 0.99)
    );
    let idle: Vec<(f64, f64)> = (0..rounds).map(|_| idle(1000, IDLE_SECS)).collect();
    println!(
        "{:<52} {:>12.2} %",
        "api: idle node with the API up, 75 s, CPU of one core",
        median(idle.iter().map(|r| r.0).collect())
    );
    println!(
        "{:<52} {:>11.1} MB",
        if product_binary().is_some() {
            "api: idle node with the API up, RSS, jobvisor bin"
        } else {
            "api: idle node, API up, RSS, this executable"
        },
        median(idle.iter().map(|r| r.1).collect())
    );
}
