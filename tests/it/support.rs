//! Shared helpers: run the real binary against a temporary folder.
// Shared by the `it`, `faults` and `self_tuning` test binaries; each uses a different part.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A temporary folder with a catalog path in it, or a temporary PostgreSQL database.
pub struct Workspace {
    /// Keeps the folder alive.
    pub dir: tempfile::TempDir,
    /// The catalog's database on PostgreSQL (none: the SQLite file `catalog.db` in `dir`).
    pub pg: Option<PgDb>,
    /// Environment for nodes started from here.
    pub node_env: std::cell::RefCell<Vec<(String, String)>>,
    /// Where nodes' logs go (the folder itself when `None`).
    pub log_dir: std::cell::RefCell<Option<PathBuf>>,
    /// Cgroups' `cgroup.procs` files that nodes started from here join before the node's
    /// program starts (so its every allocation, CPU second and child is charged there).
    pub node_cgroups: std::cell::RefCell<Vec<PathBuf>>,
}

impl Workspace {
    /// A workspace whose nodes activate every job at start (a policy floor below any
    /// priority), so tests of the runtime do not wait for the self-tuning ramp.
    pub fn new() -> Self {
        let ws = Self {
            dir: tempfile::tempdir().unwrap(),
            pg: None,
            node_env: Default::default(),
            log_dir: Default::default(),
            node_cgroups: Default::default(),
        };
        ws.set_node_env("JOBVISOR__POLICY__PRIORITY_FLOOR", "-1000000000");
        ws
    }

    /// The same on a new PostgreSQL database of its own (see [`PgDb::create`]: `None` when no
    /// server was asked for and none answers).
    pub fn on_postgres(test: &str) -> Option<Self> {
        let mut ws = Self::new();
        ws.pg = Some(PgDb::create(test)?);
        Some(ws)
    }

    /// What `--db` names: the catalog file, or the PostgreSQL database's URL.
    pub fn db_arg(&self) -> std::ffi::OsString {
        match &self.pg {
            Some(pg) => pg.url.clone().into(),
            None => self.db().into(),
        }
    }

    /// A new workspace on the same backend as this one (on PostgreSQL, a database of its own
    /// named after `test`).
    pub fn another(&self, test: &str) -> Self {
        match &self.pg {
            Some(_) => Self::on_postgres(test).expect("the server this workspace is on"),
            None => Self::new(),
        }
    }

    /// The catalog's rows, for checks, on either backend.
    pub fn catalog(&self) -> TestDb {
        self.catalog_at().open()
    }

    /// Where the catalog is, for checks made on another thread (see [`CatalogAt::read`]).
    pub fn catalog_at(&self) -> CatalogAt {
        match &self.pg {
            Some(pg) => CatalogAt::Postgres(pg.url.clone()),
            None => CatalogAt::File(self.db()),
        }
    }

    /// The library's handle on the catalog (made and migrated when new), on either backend.
    pub fn open_catalog(&self) -> jobvisor::catalog::Catalog {
        use jobvisor::catalog::{Access, Catalog, DbSettings, PgSettings};
        match &self.pg {
            Some(pg) => {
                Catalog::open_postgres(PgSettings::new(&pg.url), "test", Access::Create).unwrap()
            }
            None => Catalog::open(&self.db(), &DbSettings::default()).unwrap(),
        }
    }

    /// Imports the job.conf text `conf` into the catalog (as the actor `test`).
    pub fn import_conf(&self, conf: &str) {
        let file = jobvisor::jobconf::toml_format::parse(conf).unwrap();
        self.open_catalog().import(&file, "test").unwrap();
    }

    /// The configuration of an engine embedded on this workspace's catalog (`database.path`
    /// or `database.url`), with its data folder `data` here; the rest the defaults.
    pub fn engine_config(&self) -> jobvisor::config::NodeConfig {
        let mut cfg = jobvisor::config::NodeConfig::default();
        cfg.node.data_dir = self.path("data").display().to_string();
        match &self.pg {
            Some(pg) => cfg.database.url = pg.url.clone(),
            None => cfg.database.path = self.db().display().to_string(),
        }
        cfg
    }

    /// Every run, by run id.
    pub fn runs(&self) -> Vec<Run> {
        self.catalog().runs()
    }

    /// Every byte the catalog stores: the SQLite file, or `pg_dump`'s dump of the database.
    pub fn dump(&self) -> Vec<u8> {
        match &self.pg {
            Some(pg) => {
                let out = Command::new("pg_dump").arg(&pg.url).output().unwrap();
                assert!(out.status.success(), "pg_dump: {}", text(&out));
                out.stdout
            }
            None => std::fs::read(self.db()).unwrap(),
        }
    }

    /// Runs of one job.
    pub fn runs_of(&self, job: &str) -> Vec<Run> {
        self.catalog().runs_of(job)
    }

    /// Queues `n` on-demand runs of `job` straight into the catalog (one statement).
    pub fn queue_runs(&self, job: &str, n: i64) {
        self.catalog().queue_runs(job, n)
    }

    /// Disables the jobs the default catalog seeds, so that only a test's own jobs run: the
    /// housekeeping jobs would add noise. Seeds the catalog first if it is new.
    pub fn disable_seeded_jobs(&self) {
        let file =
            jobvisor::jobconf::toml_format::parse(jobvisor::jobconf::DEFAULT_JOB_CONF).unwrap();
        for job in file.jobs.keys() {
            self.ok(&["jobs", "disable", job]);
        }
    }

    /// Sets an environment variable for nodes started from here.
    pub fn set_node_env(&self, key: &str, value: &str) {
        let mut env = self.node_env.borrow_mut();
        env.retain(|(k, _)| k != key);
        env.push((key.to_string(), value.to_string()));
    }

    /// The log file of the node `name` (`<name>.log` in the log folder).
    pub fn log_path(&self, name: &str) -> PathBuf {
        match &*self.log_dir.borrow() {
            Some(dir) => dir.join(format!("{name}.log")),
            None => self.path(&format!("{name}.log")),
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn db(&self) -> PathBuf {
        self.path("catalog.db")
    }

    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    /// Runs `jobvisor --db <db> ARGS` in the folder, with no config from the environment.
    pub fn run(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_jobvisor"))
            .arg("--db")
            .arg(self.db_arg())
            .args(args)
            .current_dir(self.dir.path())
            .env_remove("JOBVISOR_CONFIG")
            .output()
            .unwrap()
    }

    /// Like `run`, asserting success; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "jobvisor {args:?} failed: {}",
            text(&out)
        );
        String::from_utf8(out.stdout).unwrap()
    }
}

/// stdout and stderr of a command, for messages.
pub fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Every file in `dir` whose name starts with `prefix`, with its bytes.
pub fn snapshot(dir: &Path, prefix: &str) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix))
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect();
    files.sort();
    files
}

/// A running `jobvisor run` process on port 0 with a temporary database.
pub struct Node {
    /// The process.
    pub child: std::process::Child,
    /// The API's base URL.
    pub api: String,
    /// The admin token a first start printed (none when the catalog had users).
    pub token: Option<String>,
}

impl Workspace {
    /// Starts `jobvisor run` on this workspace's database; waits for it to print its address.
    pub fn start_node(&self, name: &str) -> Node {
        self.try_start_node(name)
            .unwrap_or_else(|out| panic!("node did not start: {out}"))
    }

    /// Starts a node, or returns its output if it exits before printing its address.
    pub fn try_start_node(&self, name: &str) -> Result<Node, String> {
        self.try_start_node_on(name, "127.0.0.1:0")
    }

    /// Starts a node listening on `bind`, or returns its output if it exits before printing
    /// its address.
    pub fn try_start_node_on(&self, name: &str, bind: &str) -> Result<Node, String> {
        let child = self.spawn_node_on(name, bind);
        self.await_node(name, child)
    }

    /// Starts `jobvisor run` as node `name` without waiting for it (see [`Self::await_node`]).
    pub fn spawn_node(&self, name: &str) -> std::process::Child {
        self.spawn_node_on(name, "127.0.0.1:0")
    }

    /// [`Self::spawn_node`] listening on `bind`.
    pub fn spawn_node_on(&self, name: &str, bind: &str) -> std::process::Child {
        let cgroups = self.node_cgroups.borrow();
        let mut cmd = if cgroups.is_empty() {
            Command::new(env!("CARGO_BIN_EXE_jobvisor"))
        } else {
            // The shell joins each cgroup, then becomes the node (same pid).
            let mut c = Command::new("/bin/sh");
            c.args([
                "-c",
                r#"while [ "$1" != -- ]; do echo $$ > "$1" || exit 1; shift; done; shift; exec "$@""#,
                "sh",
            ])
            .args(cgroups.iter())
            .arg("--")
            .arg(env!("CARGO_BIN_EXE_jobvisor"));
            c
        };
        cmd.arg("--db")
            .arg(self.db_arg())
            .args(["run", "--bind", bind, "--node", name, "--data-dir"])
            .arg(self.path("data"))
            .current_dir(self.dir.path())
            .env_remove("JOBVISOR_CONFIG")
            .env("JOBVISOR__NODE__SHUTDOWN_GRACE", "2000")
            .envs(
                self.node_env
                    .borrow()
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str())),
            )
            .stdout(std::process::Stdio::piped())
            .stderr(std::fs::File::create(self.log_path(name)).unwrap())
            .spawn()
            .unwrap()
    }

    /// Waits for a node [`Self::spawn_node`] started to print its address; its output if it
    /// exits first.
    pub fn await_node(&self, name: &str, mut child: std::process::Child) -> Result<Node, String> {
        use std::io::BufRead;
        let stdout = child.stdout.take().unwrap();
        let mut lines = std::io::BufReader::new(stdout).lines();
        let mut seen = String::new();
        let mut token = None;
        while let Some(Ok(line)) = lines.next() {
            seen.push_str(&line);
            seen.push('\n');
            if let Some(t) = line.trim().strip_prefix("token:") {
                token = Some(t.trim().to_string());
            }
            if let Some(api) = line.trim().strip_prefix("api:") {
                // Keep draining stdout so the node never blocks on a full pipe.
                std::thread::spawn(move || for _ in lines.by_ref() {});
                return Ok(Node {
                    child,
                    api: api.trim().to_string(),
                    token,
                });
            }
        }
        let status = child.wait().unwrap();
        let log = std::fs::read_to_string(self.log_path(name)).unwrap_or_default();
        Err(format!(
            "exit {:?}\nstdout:\n{seen}\nstderr:\n{log}",
            status.code()
        ))
    }
}

impl Node {
    /// SIGTERM, then the exit code.
    pub fn stop(mut self) -> Option<i32> {
        // SAFETY: signalling our own child process.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let code = self.child.wait().unwrap().code();
        std::mem::forget(self);
        code
    }

    /// SIGKILL: a crash.
    pub fn crash(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        std::mem::forget(self);
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `check` every 20 ms until it returns `Some`, or panics after `secs` seconds.
pub fn wait_for<T>(secs: f64, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs_f64(secs);
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out after {secs} s waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// One `job_run` row, as the runtime tests read them.
#[derive(Debug, Clone)]
pub struct Run {
    pub run_id: i64,
    pub job: String,
    pub status: String,
    pub attempt: i64,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    pub error: Option<String>,
    pub log: Option<String>,
    pub retry_of: Option<i64>,
    pub scheduled_for: Option<i64>,
}

/// A connection to the catalog at `db` that waits for locks as the node's own do: a node's
/// writer may be committing or checkpointing, and the last connection of a stopping engine
/// takes the file for its closing checkpoint, when a reader without a busy timeout gets
/// `database is locked`.
pub fn open_db(db: impl AsRef<Path>) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .unwrap();
    conn
}

const SELECT_RUNS: &str = "SELECT r.run_id, j.job_name, r.status, r.attempt, r.started_at,
    r.finished_at, r.error, r.log, r.retry_of, r.scheduled_for
    FROM job_run r JOIN job j USING (job_id) ORDER BY r.run_id";

// Both backends take it: PostgreSQL's `$N` placeholders are written for each.
const QUEUE_RUNS: &str =
    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {n})
    INSERT INTO job_run (job_id, processor_id, status, run_after, created_at)
    SELECT j.job_id, j.processor_id, 'queued', 0, 0 FROM job j, n WHERE j.job_name = '{job}'";

/// Where a workspace's catalog is: what a thread of its own can open.
#[derive(Debug, Clone)]
pub enum CatalogAt {
    /// The catalog file.
    File(PathBuf),
    /// The PostgreSQL database's URL.
    Postgres(String),
}

impl CatalogAt {
    /// A connection for checks.
    pub fn open(&self) -> TestDb {
        match self {
            CatalogAt::File(path) => TestDb::Sqlite(open_db(path)),
            CatalogAt::Postgres(url) => TestDb::Postgres(std::cell::RefCell::new(
                postgres::Client::connect(url, postgres::NoTls)
                    .expect("connect to the test database"),
            )),
        }
    }

    /// `check` on a connection of its own, from async code (an engine's actix System): on a
    /// blocking thread, since PostgreSQL's synchronous client runs a runtime of its own, which
    /// may not be started inside another.
    pub async fn read<T: Send + 'static>(
        &self,
        check: impl FnOnce(&TestDb) -> T + Send + 'static,
    ) -> T {
        let at = self.clone();
        actix_rt::task::spawn_blocking(move || check(&at.open()))
            .await
            .unwrap()
    }
}

/// A connection to a workspace's catalog, for checks: the SQLite file (opened as by
/// [`open_db`]) or a client of the PostgreSQL database. Values come back as JSON.
pub enum TestDb {
    /// The catalog file.
    Sqlite(rusqlite::Connection),
    /// The PostgreSQL database.
    Postgres(std::cell::RefCell<postgres::Client>),
}

impl TestDb {
    /// Every row of `sql` (the same text on both backends), each column as JSON.
    pub fn rows(&self, sql: &str) -> Vec<Vec<serde_json::Value>> {
        use serde_json::Value;
        match self {
            TestDb::Sqlite(conn) => {
                let mut stmt = conn.prepare(sql).unwrap();
                let n = stmt.column_count();
                stmt.query_map([], |r| {
                    (0..n)
                        .map(|i| {
                            Ok(match r.get_ref(i)? {
                                rusqlite::types::ValueRef::Null => Value::Null,
                                rusqlite::types::ValueRef::Integer(v) => v.into(),
                                rusqlite::types::ValueRef::Real(v) => v.into(),
                                rusqlite::types::ValueRef::Text(t) => {
                                    String::from_utf8_lossy(t).into_owned().into()
                                }
                                rusqlite::types::ValueRef::Blob(_) => Value::Null,
                            })
                        })
                        .collect::<rusqlite::Result<Vec<_>>>()
                })
                .unwrap()
                .map(Result::unwrap)
                .collect()
            }
            TestDb::Postgres(client) => {
                use postgres::types::Type;
                let rows = client.borrow_mut().query(sql, &[]).unwrap();
                rows.iter()
                    .map(|r| {
                        (0..r.len())
                            .map(|i| match *r.columns()[i].type_() {
                                Type::INT8 => r.get::<_, Option<i64>>(i).into(),
                                Type::INT4 => r.get::<_, Option<i32>>(i).into(),
                                Type::BOOL => r.get::<_, Option<bool>>(i).map(i64::from).into(),
                                Type::FLOAT8 => r.get::<_, Option<f64>>(i).into(),
                                Type::NUMERIC => r
                                    .get::<_, Option<String>>(i)
                                    .map(|t| t.parse::<i64>().unwrap())
                                    .into(),
                                _ => r.get::<_, Option<String>>(i).into(),
                            })
                            .collect()
                    })
                    .collect()
            }
        }
    }

    /// The one integer `sql` answers.
    pub fn count(&self, sql: &str) -> i64 {
        self.rows(sql)[0][0].as_i64().unwrap_or(0)
    }

    /// Runs `sql` (a change).
    pub fn execute(&self, sql: &str) {
        match self {
            TestDb::Sqlite(conn) => {
                conn.execute_batch(sql).unwrap();
            }
            TestDb::Postgres(client) => client.borrow_mut().batch_execute(sql).unwrap(),
        }
    }

    /// The relation with a job's `in_progress` and `last_date_end` by `job_id`: `job` itself on
    /// SQLite; on PostgreSQL, which keeps them apart, the view `job_progress` (claimed less
    /// ended on every node, the latest end of any).
    pub fn job_progress(&self) -> &'static str {
        match self {
            TestDb::Sqlite(_) => "job",
            TestDb::Postgres(_) => "job_progress",
        }
    }

    /// The runs of `job` in progress.
    pub fn in_progress(&self, job: &str) -> i64 {
        self.count(&format!(
            "SELECT p.in_progress FROM {} p JOIN job j USING (job_id) WHERE j.job_name = '{job}'",
            self.job_progress()
        ))
    }

    /// Every run, by run id.
    pub fn runs(&self) -> Vec<Run> {
        let int = |v: &serde_json::Value| v.as_i64();
        let text = |v: &serde_json::Value| v.as_str().map(String::from);
        self.rows(SELECT_RUNS)
            .iter()
            .map(|r| Run {
                run_id: int(&r[0]).unwrap(),
                job: text(&r[1]).unwrap(),
                status: text(&r[2]).unwrap(),
                attempt: int(&r[3]).unwrap(),
                started_at: int(&r[4]),
                finished_at: int(&r[5]),
                error: text(&r[6]),
                log: text(&r[7]),
                retry_of: int(&r[8]),
                scheduled_for: int(&r[9]),
            })
            .collect()
    }

    /// The runs of `job`, by run id.
    pub fn runs_of(&self, job: &str) -> Vec<Run> {
        self.runs().into_iter().filter(|r| r.job == job).collect()
    }

    /// Queues `n` on-demand runs of `job` (one statement; the CLI would take one process per
    /// run).
    pub fn queue_runs(&self, job: &str, n: i64) {
        assert!(!job.contains('\''), "a plain job name");
        let before = self.count("SELECT count(*) FROM job_run");
        self.execute(
            &QUEUE_RUNS
                .replace("{n}", &n.to_string())
                .replace("{job}", job),
        );
        let after = self.count("SELECT count(*) FROM job_run");
        assert_eq!(after - before, n, "job {job} exists");
    }
}

/// Every run of the catalog file at `db`, by run id.
pub fn runs(db: &Path) -> Vec<Run> {
    TestDb::Sqlite(open_db(db)).runs()
}

/// Queues `n` on-demand runs of `job` straight into the catalog file at `db`.
pub fn queue_runs(db: &Path, job: &str, n: i64) {
    TestDb::Sqlite(open_db(db)).queue_runs(job, n)
}

/// Runs of one job.
pub fn runs_of(db: &Path, job: &str) -> Vec<Run> {
    runs(db).into_iter().filter(|r| r.job == job).collect()
}

/// Tests that run once on each backend: for each function `$name(ws: Workspace)`, the tests
/// `$name::sqlite` (a catalog file) and `$name::postgres` (a PostgreSQL database of its own),
/// each given its new `Workspace`.
#[macro_export]
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[test]
                fn sqlite() {
                    super::$name($crate::support::Workspace::new())
                }

                #[test]
                fn postgres() {
                    if let Some(ws) = $crate::support::Workspace::on_postgres(stringify!($name)) {
                        super::$name(ws)
                    }
                }
            }
        )*
    };
}

/// A plain HTTP/1.0 GET; returns the status line and the body.
pub fn http_get(base: &str, path: &str) -> (String, String) {
    use std::io::{Read, Write};
    let addr = base.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (
        head.lines().next().unwrap_or("").to_string(),
        body.to_string(),
    )
}

/// An HTTP response as the API tests read it.
#[derive(Debug, Clone)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// The headers, names in lower case.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: String,
}

impl Response {
    /// The body as JSON (panics with the body when it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {} {}", self.status, self.body))
    }

    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// One HTTP/1.1 request on a new connection, with raw headers and body bytes.
pub fn http_raw(
    base: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Response {
    use std::io::{Read, Write};
    let addr = base.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    let mut head = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
        head.push_str(&format!("Host: {addr}\r\n"));
    }
    for (n, v) in headers {
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    stream.write_all(head.as_bytes()).unwrap();
    // A refused request may close the connection before the whole body is read.
    let _ = stream.write_all(body);
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    parse_response(&raw)
}

/// An HTTP/1.1 response as read whole from its connection.
pub fn parse_response(raw: &[u8]) -> Response {
    let text = String::from_utf8_lossy(raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_string()
    };
    Response {
        status,
        headers,
        body,
    }
}

fn dechunk(mut text: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = text.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        text = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// A JSON request with a bearer token.
pub fn api(
    base: &str,
    token: Option<&str>,
    method: &str,
    path: &str,
    body: Option<&serde_json::Value>,
) -> Response {
    let auth = token.map(|t| format!("Bearer {t}"));
    let mut headers = vec![];
    if let Some(a) = &auth {
        headers.push(("Authorization", a.as_str()));
    }
    let bytes = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
    if body.is_some() {
        headers.push(("Content-Type", "application/json"));
    }
    http_raw(base, method, path, &headers, &bytes)
}

/// `path` mounted as a tmpfs of `size` (e.g. "256m") until dropped. Needs root (CI runs as
/// root); fails loudly otherwise.
pub struct Tmpfs {
    path: PathBuf,
}

impl Tmpfs {
    pub fn mount(path: &Path, size: &str) -> Tmpfs {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        assert!(root, "mounting a tmpfs needs root (CI runs as root)");
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "mount -t tmpfs failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs {
            path: path.to_path_buf(),
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let ok = std::process::Command::new("umount")
            .arg(&self.path)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            // Something still holds a file there (a node that was killed): detach it.
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(&self.path)
                .status();
        }
    }
}

/// Makes a file read-only for real while it lives: immutable (`chattr +i`) when the tests run
/// as root, whom a file mode does not stop; its mode otherwise.
pub struct ReadOnly(PathBuf);

impl ReadOnly {
    pub fn make(path: &Path) -> Self {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            let ok = std::process::Command::new("chattr")
                .arg("+i")
                .arg(path)
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "chattr +i {} (e2fsprogs) failed", path.display());
        } else {
            let mut perms = std::fs::metadata(path).unwrap().permissions();
            perms.set_readonly(true);
            std::fs::set_permissions(path, perms).unwrap();
        }
        Self(path.to_path_buf())
    }
}

impl Drop for ReadOnly {
    fn drop(&mut self) {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            let _ = std::process::Command::new("chattr")
                .arg("-i")
                .arg(&self.0)
                .status();
        }
    }
}

/// The PostgreSQL server of the tests: `JOBVISOR_TEST_PG` (an admin URL; `.ci/test` starts
/// PostgreSQL and sets it, and then every test that needs it fails when it cannot connect),
/// else `postgres://postgres@127.0.0.1:5432/postgres`; when that is unset and not reachable,
/// the tests say so on stderr and pass without running.
const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// A database of one test's own, dropped (with its connections) at the end.
pub struct PgDb {
    /// The admin URL it was created through.
    pub admin: String,
    /// The database's name.
    pub name: String,
    /// Its URL.
    pub url: String,
}

impl PgDb {
    /// A new empty database, or `None` when no server was asked for and none is reachable.
    pub fn create(test: &str) -> Option<PgDb> {
        let (admin, required) = match std::env::var("JOBVISOR_TEST_PG") {
            Ok(url) if !url.is_empty() => (url, true),
            _ => (DEFAULT_URL.to_string(), false),
        };
        let mut client = match postgres::Client::connect(&admin, postgres::NoTls) {
            Ok(c) => c,
            Err(e) if !required => {
                eprintln!("{test}: not run: no PostgreSQL at {admin} ({e}); set JOBVISOR_TEST_PG");
                return None;
            }
            Err(e) => panic!("JOBVISOR_TEST_PG={admin}: cannot connect: {e}"),
        };
        static N: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);
        let name = format!(
            "jv_{}_{}_{}",
            test.chars().take(30).collect::<String>(),
            std::process::id(),
            N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        client
            .batch_execute(&format!("DROP DATABASE IF EXISTS {name}"))
            .expect("drop a leftover test database");
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .expect("create the test database");
        let (base, _) = admin.rsplit_once('/').expect("the URL names a database");
        Some(PgDb {
            url: format!("{base}/{name}"),
            admin,
            name,
        })
    }

    /// A catalog handle on it (migrated).
    pub fn catalog(&self, label: &str) -> jobvisor::catalog::postgres::PgCatalog {
        use jobvisor::catalog::postgres::{PgCatalog, PgSettings};
        PgCatalog::open(PgSettings::new(&self.url), label).expect("open the postgres catalog")
    }

    /// A plain client, for setup and checks.
    pub fn client(&self) -> postgres::Client {
        postgres::Client::connect(&self.url, postgres::NoTls).expect("connect to the test database")
    }
}

impl Drop for PgDb {
    fn drop(&mut self) {
        if let Ok(mut c) = postgres::Client::connect(&self.admin, postgres::NoTls) {
            let _ = c.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}
