//! Scenario 5, corrupt or foreign files (issue 12, defect 3): flipped pages, a truncated file,
//! another application's database, a file that is not SQLite, a `-wal` without its main file —
//! refused by every command, `run` (a node start) among them, with the file named; not one byte
//! of them changes and nothing is left beside them, not even an empty `-wal` or `-shm` (issue
//! 27, point 2d). A catalog damaged under a running node stops it (exit 78, the file named,
//! "damaged" said once): pages in the middle of the file overwritten with garbage, then work
//! that reads them (a processor enabled through the API claims the runs stored there), or pages
//! the node never reads, found by its next `db_maintenance` (`quick_check`). From the moment the
//! node says it stops, the file and its WAL keep their bytes, and the next start refuses the
//! file.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::{Node, Workspace, runs_of, text, wait_for};
use crate::{figures, open, serial, wal};

/// The file's sha256 (coreutils' `sha256sum`); "absent" when there is no such file.
fn digest(path: &Path) -> String {
    if !path.exists() {
        return "absent".into();
    }
    let out = Command::new("sha256sum").arg(path).output().unwrap();
    assert!(out.status.success(), "sha256sum {}", path.display());
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

/// The files in `dir`: names and sizes.
fn listing(dir: &Path) -> Vec<(String, u64)> {
    let mut files: Vec<(String, u64)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let size = e.metadata().map_or(0, |m| m.len());
            (e.file_name().to_string_lossy().into_owned(), size)
        })
        .collect();
    files.sort();
    files
}

/// Inserts `n` audit rows of 80 bytes each (ballast the node never reads).
fn audit_ballast(conn: &rusqlite::Connection, n: i64) {
    conn.execute(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
         INSERT INTO audit (at, actor, action, subject, detail)
         SELECT i, 'ballast', 'test', hex(randomblob(40)), NULL FROM n",
        [n],
    )
    .unwrap();
}

/// A catalog of a few hundred KiB: the default jobs plus audit rows at the end of the file.
fn catalog_with_ballast(ws: &Workspace) {
    ws.ok(&["init"]);
    audit_ballast(&open(&ws.db()), 3000);
}

/// The catalog file's size once its WAL is copied into it.
fn checkpointed_size(conn: &rusqlite::Connection, db: &Path) -> u64 {
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    std::fs::metadata(db).unwrap().len()
}

/// Inverts `len` bytes starting `from_end` bytes before the end of the file.
fn invert_tail(path: &Path, from_end: u64, len: usize) {
    use std::io::{Read, Seek, SeekFrom, Write};
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let size = f.metadata().unwrap().len();
    let at = size - from_end;
    let mut buf = vec![0u8; len];
    f.seek(SeekFrom::Start(at)).unwrap();
    f.read_exact(&mut buf).unwrap();
    for b in &mut buf {
        *b = !*b;
    }
    f.seek(SeekFrom::Start(at)).unwrap();
    f.write_all(&buf).unwrap();
}

/// Overwrites bytes `from..to` of the file with garbage (a byte no page type starts with).
fn overwrite(path: &Path, from: u64, to: u64) {
    use std::io::{Seek, SeekFrom, Write};
    let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.seek(SeekFrom::Start(from)).unwrap();
    f.write_all(&vec![0xa5u8; (to - from) as usize]).unwrap();
    f.sync_all().unwrap();
}

const COMMANDS: &[&[&str]] = &[
    &["jobs", "list"],
    &["export"],
    &["decisions"],
    &["init"],
    &["jobs", "disable", "device_stats"],
    &["run", "--bind", "127.0.0.1:0"],
];

/// A command that takes longer than this was not refused (a node that started): it is killed.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(20);

/// Runs `jobvisor ARGS` in the workspace folder (no `--db` added), killing it after
/// [`COMMAND_TIMEOUT`].
fn jobvisor(ws: &Workspace, args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_jobvisor"))
        .args(args)
        .current_dir(ws.dir.path())
        .env_remove("JOBVISOR_CONFIG")
        .env_remove("JOBVISOR_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() && started.elapsed() < COMMAND_TIMEOUT {
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    child.wait_with_output().unwrap()
}

/// What one command did to one file.
struct Outcome {
    case: &'static str,
    command: String,
    exit: Option<i32>,
    /// The error named the file.
    named: bool,
    /// The error said what the file is (damaged, not a catalog, …).
    said: bool,
    /// The files' sha256 before and after were equal.
    unchanged: bool,
    panicked: bool,
    first_line: String,
}

/// What the commands of one case left beside the file: files that were not there before,
/// with their sizes.
struct Case {
    name: &'static str,
    outcomes: Vec<Outcome>,
    beside: Vec<(String, u64)>,
}

/// Runs every command against `db` and records, for each, the exit code, whether the error
/// names the file and says `what`, and whether `files` stayed as they were; and what files
/// the commands left in the folder.
fn try_every_command(
    ws: &Workspace,
    case: &'static str,
    db: &Path,
    what: &str,
    files: &[&Path],
) -> Case {
    let db_arg = db.display().to_string();
    let name = db.file_name().unwrap().to_string_lossy().into_owned();
    let folder = listing(ws.dir.path());
    let outcomes = COMMANDS
        .iter()
        .map(|args| {
            let before: Vec<String> = files.iter().map(|f| digest(f)).collect();
            let mut full = vec!["--db", db_arg.as_str()];
            full.extend(args.iter());
            let out = jobvisor(ws, &full);
            let err = String::from_utf8_lossy(&out.stderr).into_owned();
            Outcome {
                case,
                command: args.join(" "),
                exit: out.status.code(),
                named: err.contains(&name),
                said: err.contains(what),
                unchanged: files.iter().map(|f| digest(f)).collect::<Vec<_>>() == before,
                panicked: err.contains("panicked"),
                first_line: err.lines().next().unwrap_or("").to_string(),
            }
        })
        .collect();
    let beside = listing(ws.dir.path())
        .into_iter()
        .filter(|(n, _)| !folder.iter().any(|(f, _)| f == n))
        .collect();
    Case {
        name: case,
        outcomes,
        beside,
    }
}

#[test]
fn damaged_foreign_and_orphaned_files_are_refused_unchanged() {
    let _one = serial();
    let mut cases = Vec::new();

    // Flipped pages: 4 KiB inverted near the end of the file (the audit table's pages).
    let ws = Workspace::new();
    catalog_with_ballast(&ws);
    invert_tail(&ws.db(), 16 * 1024, 4096);
    cases.push(try_every_command(
        &ws,
        "4 KiB of pages flipped",
        &ws.db(),
        "damaged",
        &[&ws.db()],
    ));

    // Truncation: the file cut to half its size.
    let ws = Workspace::new();
    catalog_with_ballast(&ws);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(ws.db())
        .unwrap();
    let size = f.metadata().unwrap().len();
    f.set_len(size / 2).unwrap();
    drop(f);
    cases.push(try_every_command(
        &ws,
        "truncated to half",
        &ws.db(),
        "damaged",
        &[&ws.db()],
    ));

    // Another application's database.
    let ws = Workspace::new();
    let conn = rusqlite::Connection::open(ws.db()).unwrap();
    conn.execute_batch("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT);")
        .unwrap();
    drop(conn);
    cases.push(try_every_command(
        &ws,
        "foreign database",
        &ws.db(),
        "not a jobvisor catalog",
        &[&ws.db()],
    ));

    // Not SQLite at all.
    let ws = Workspace::new();
    std::fs::write(ws.db(), "name,email\nada,ada@example.org\n".repeat(50)).unwrap();
    cases.push(try_every_command(
        &ws,
        "a CSV file",
        &ws.db(),
        "not a SQLite database",
        &[&ws.db()],
    ));

    // A -wal whose main file is missing: never replaced by a new catalog.
    let ws = Workspace::new();
    let lone = ws.path("catalog.db-wal");
    std::fs::write(&lone, vec![0x37u8; 8192]).unwrap();
    cases.push(try_every_command(
        &ws,
        "lone -wal",
        &ws.db(),
        "write-ahead log",
        &[&lone],
    ));
    let no_new_catalog = !ws.db().exists();

    let outcomes: Vec<&Outcome> = cases.iter().flat_map(|c| &c.outcomes).collect();
    let count = |f: fn(&Outcome) -> bool| outcomes.iter().filter(|o| f(o)).count();
    let n = outcomes.len();
    let mut lines: Vec<String> = outcomes
        .iter()
        .map(|o| {
            format!(
                "{:<22} {:<26} exit {:<4} file named {:<5} sha256 unchanged {:<5} {}",
                o.case,
                o.command,
                o.exit.map_or("sig".into(), |c| c.to_string()),
                o.named,
                o.unchanged,
                o.first_line
            )
        })
        .collect();
    for case in &cases {
        let beside: Vec<String> = case
            .beside
            .iter()
            .map(|(name, size)| format!("{name} ({size} B)"))
            .collect();
        lines.push(format!(
            "{}: left beside the file: {}",
            case.name,
            if beside.is_empty() {
                "nothing".to_string()
            } else {
                beside.join(", ")
            }
        ));
    }
    lines.push(format!(
        "cases {}, commands {} each: refused (exit 78) {} of {n}, file named {} of {n}, \
         what it is said {} of {n}, sha256 unchanged {} of {n}; lone -wal: no new catalog \
         created {no_new_catalog}",
        cases.len(),
        COMMANDS.len(),
        count(|o| o.exit == Some(78)),
        count(|o| o.named),
        count(|o| o.said),
        count(|o| o.unchanged),
    ));
    figures("scenario 5 files", &lines);
    for o in &outcomes {
        let at = format!("{}: {}: {}", o.case, o.command, o.first_line);
        assert_eq!(o.exit, Some(78), "{at}");
        assert!(o.named && o.said, "{at}");
        assert!(!o.panicked, "{at}");
        assert!(o.unchanged, "{at}: the file changed");
    }
    // Not even the empty log and shared-memory index a reader of a WAL database creates
    // (issue 27, point 2d): the folder lists what it listed before.
    for case in &cases {
        assert!(
            case.beside.is_empty(),
            "{}: left beside the file: {:?}",
            case.name,
            case.beside
        );
    }
    assert!(
        no_new_catalog,
        "a new catalog was created over the lone -wal"
    );
}

/// `PATCH /api/v1/processors/NAME {"enabled": true}`: the answer's status line, or `None`
/// when the node closed the connection without answering (it stopped first).
fn enable_processor(base: &str, token: &str, name: &str) -> Option<String> {
    use std::io::{Read, Write};
    let addr = base.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(addr).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let body = r#"{"enabled":true}"#;
    write!(
        stream,
        "PATCH /api/v1/processors/{name} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Authorization: Bearer {token}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .ok()?;
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer
        .lines()
        .next()
        .filter(|l| !l.is_empty())
        .map(String::from)
}

/// How a node stopped on a damaged catalog.
struct Stop {
    exit: Option<i32>,
    /// The log line that says it stops.
    said: String,
    /// Since the fault was set off: when it said so, when it exited.
    said_after: Duration,
    exited_after: Duration,
    /// sha256 of the catalog and of its WAL when it said so, and after it exited.
    at_notice: (String, String),
    after_exit: (String, String),
    /// How many times the log says it stops.
    times_said: usize,
    log: String,
}

/// Waits for `node` to say it stops (then takes the catalog's and its WAL's sha256) and to
/// exit, each within `secs` of `since`.
fn watch_stop(ws: &Workspace, mut node: Node, name: &str, since: Instant, secs: f64) -> Stop {
    let db = ws.db();
    let log_path = ws.log_path(name);
    let said = wait_for(secs, "the node to say it stops", || {
        std::fs::read_to_string(&log_path)
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.find("stopping the node").map(|at| l[at..].to_string()))
    });
    let said_after = since.elapsed();
    let at_notice = (digest(&db), digest(&wal(&db)));
    let status = wait_for(secs, "the node to exit", || node.child.try_wait().unwrap());
    let exited_after = since.elapsed();
    // It exited: nothing to kill.
    std::mem::forget(node);
    let after_exit = (digest(&db), digest(&wal(&db)));
    let log = std::fs::read_to_string(&log_path).unwrap();
    Stop {
        exit: status.code(),
        said: said.trim().to_string(),
        said_after,
        exited_after,
        at_notice,
        after_exit,
        times_said: log.matches("stopping the node").count(),
        log,
    }
}

/// `jobvisor run` on the damaged catalog: refused (its exit code) and the file unchanged.
fn next_start_refused(ws: &Workspace) -> (Option<i32>, bool) {
    let before = (digest(&ws.db()), digest(&wal(&ws.db())));
    let out = Command::new(env!("CARGO_BIN_EXE_jobvisor"))
        .arg("--db")
        .arg(ws.db())
        .args(["run", "--bind", "127.0.0.1:0", "--node-name", "n1"])
        .env_remove("JOBVISOR_CONFIG")
        .output()
        .unwrap();
    let after = (digest(&ws.db()), digest(&wal(&ws.db())));
    if out.status.code() != Some(78) {
        eprintln!("the next start: {}", text(&out));
    }
    (out.status.code(), before == after)
}

/// The figures of a stop, and its assertions: exit 78 within `within` of the fault, the log
/// names the file and says it is damaged, once; nothing written after the node said so; the
/// next start refuses the file without changing it.
fn report_stop(scenario: &str, mut lines: Vec<String>, ws: &Workspace, stop: &Stop, within: f64) {
    let (next_exit, next_unchanged) = next_start_refused(ws);
    let kept = stop.at_notice == stop.after_exit;
    lines.push(format!(
        "stopped: exit {}, said after {:.2} s, exited after {:.2} s; said {} time(s): {}",
        stop.exit.map_or("by a signal".into(), |c| c.to_string()),
        stop.said_after.as_secs_f64(),
        stop.exited_after.as_secs_f64(),
        stop.times_said,
        stop.said
    ));
    lines.push(format!(
        "sha256 of catalog.db and its -wal when the node said it stops = after it exited: \
         {kept}; the next start: exit {}, sha256 unchanged {next_unchanged}",
        next_exit.map_or("by a signal".into(), |c| c.to_string())
    ));
    figures(scenario, &lines);
    assert_eq!(stop.exit, Some(78), "{}", stop.log);
    assert!(
        stop.said.contains("catalog.db") && stop.said.contains("damaged"),
        "the log names the file: {}",
        stop.log
    );
    assert_eq!(stop.times_said, 1, "said once: {}", stop.log);
    assert!(
        stop.exited_after.as_secs_f64() < within,
        "exited {:?} after the fault",
        stop.exited_after
    );
    assert!(
        kept,
        "the file was written after the node noticed: {:?} then {:?}",
        stop.at_notice, stop.after_exit
    );
    assert_eq!(next_exit, Some(78), "the next start refuses the file");
    assert!(next_unchanged, "the next start changed the file");
}

/// Regression (issue 12, defect 3: a corruption error met at run time was only logged, and the
/// node went on writing): the queued runs of a disabled processor lie in the middle of the
/// file, between audit rows. With the node up and at rest, their pages are overwritten with
/// garbage and the processor is enabled through the API; its claim reads them and meets
/// SQLite's corruption error. The node says so once, naming the file and what it was doing,
/// and exits 78 within seconds; the file and its WAL are not written after it said so.
#[test]
fn pages_overwritten_under_a_running_node_stop_it_when_work_reads_them() {
    let _one = serial();
    let ws = Workspace::new();
    ws.ok(&["init"]);
    ws.disable_seeded_jobs();
    let conf = ws.write(
        "jobs.conf",
        r#"
[processor.late]
instances = 1
enabled = false

[job.work]
type = "function"
processor = "late"
overlap_policy = "allow"
max_overlap = 100000
payload = { function = "debug.noop" }
"#,
    );
    ws.ok(&["import", &conf.display().to_string()]);
    let db = ws.db();
    let runs = 3000;
    let (from, to, size) = {
        let conn = open(&db);
        audit_ballast(&conn, 2000);
        let from = checkpointed_size(&conn, &db);
        conn.execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
             INSERT INTO job_run (job_id, processor_id, status, run_after, created_at, params)
             SELECT j.job_id, j.processor_id, 'queued', 0, 0,
                    json_object('pad', hex(randomblob(150)))
             FROM job j, n WHERE j.job_name = 'work'",
            [runs],
        )
        .unwrap();
        let to = checkpointed_size(&conn, &db);
        audit_ballast(&conn, 2000);
        (from, to, checkpointed_size(&conn, &db))
    };
    // The first three quarters of the runs' pages: the runs a claim takes first are there.
    let garbage = (from, from + (to - from) * 3 / 4 / 4096 * 4096);
    let node = ws.start_node("n1");
    let token = node
        .token
        .clone()
        .expect("a first start prints an admin token");
    // Once the start-up work is done (the writer, at rest, emptied its WAL), only new work
    // reads what lies there: the node's caches do not hide the garbage.
    let idle = Instant::now();
    wait_for(10.0, "the writer to settle after the start", || {
        (std::fs::metadata(wal(&db)).map_or(0, |m| m.len()) == 0).then_some(())
    });
    let idle = idle.elapsed();
    overwrite(&db, garbage.0, garbage.1);
    let fault = Instant::now();
    let enabled = enable_processor(&node.api, &token, "late");
    let stop = watch_stop(&ws, node, "n1", fault, 10.0);
    let lines = vec![format!(
        "catalog {} KiB; with the node up and at rest ({:.1} s after it was up), bytes {}..{} \
             overwritten with garbage ({} KiB: the pages of {runs} queued runs, between audit \
             rows); then processor `late` enabled through the API: {}",
        size / 1024,
        idle.as_secs_f64(),
        garbage.0,
        garbage.1,
        (garbage.1 - garbage.0) / 1024,
        enabled
            .as_deref()
            .unwrap_or("no answer (the node had stopped)")
    )];
    report_stop(
        "scenario 5 damaged under a running node",
        lines,
        &ws,
        &stop,
        5.0,
    );
}

/// Pages the node never reads (the audit table's) go bad while it runs: its next
/// `db_maintenance` finds them (`quick_check`) and the node stops as above.
#[test]
fn a_catalog_damaged_while_the_node_runs_stops_it_at_db_maintenance() {
    let _one = serial();
    let ws = Workspace::new();
    catalog_with_ballast(&ws);
    ws.disable_seeded_jobs();
    ws.ok(&[
        "jobs",
        "add",
        "maint",
        "--type",
        "function",
        "--processor",
        "maintenance",
        "--cron",
        "* * * * * *",
        "--payload",
        r#"{"function":"db_maintenance"}"#,
    ]);
    ws.ok(&["jobs", "pin", "maint", "active", "--node", "n1"]);
    let node = ws.start_node("n1");
    wait_for(10.0, "a first maintenance run", || {
        runs_of(&ws.db(), "maint")
            .into_iter()
            .find(|r| r.status == "succeeded")
    });
    invert_tail(&ws.db(), 16 * 1024, 4096);
    let fault = Instant::now();
    let stop = watch_stop(&ws, node, "n1", fault, 15.0);
    let lines = vec![
        "4 KiB of the audit table's pages inverted under a running node; `db_maintenance` \
         every second"
            .to_string(),
    ];
    report_stop("scenario 5 db_maintenance", lines, &ws, &stop, 5.0);
}
