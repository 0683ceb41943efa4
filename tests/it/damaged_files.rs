//! Fault scenario 5 (issue 12): corrupt or foreign files — flipped pages, a truncated file,
//! another application's database, a `-wal` without its main file — are refused by every
//! command with the file named, and not one byte of them changes; a catalog damaged while a
//! node runs stops the node at its next `db_maintenance`.

use std::path::Path;
use std::process::Command;

use crate::operator::raw;
use crate::support::{Workspace, text, wait_for};

/// The file's sha256 (coreutils' `sha256sum`).
fn digest(path: &Path) -> String {
    let out = Command::new("sha256sum").arg(path).output().unwrap();
    assert!(out.status.success(), "sha256sum {}", path.display());
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

/// A catalog of a few hundred KiB: the default jobs plus audit rows at the end of the file.
fn catalog_with_ballast(ws: &Workspace) {
    ws.ok(&["init"]);
    let conn = rusqlite::Connection::open(ws.db()).unwrap();
    conn.execute_batch(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3000)
         INSERT INTO audit (at, actor, action, subject, detail)
         SELECT i, 'ballast', 'test', hex(randomblob(40)), NULL FROM n;",
    )
    .unwrap();
    drop(conn);
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

const COMMANDS: &[&[&str]] = &[
    &["jobs", "list"],
    &["export"],
    &["decisions"],
    &["init"],
    &["jobs", "disable", "device_stats"],
    &["run", "--bind", "127.0.0.1:0"],
];

/// Runs every command against `db` and checks each is refused, names the file, says `what`,
/// and changes none of `files`; prints one line per command.
fn refused_everywhere(ws: &Workspace, case: &str, db: &Path, what: &str, files: &[&Path]) {
    let before: Vec<String> = files.iter().map(|f| digest(f)).collect();
    let db_arg = db.display().to_string();
    let name = db.file_name().unwrap().to_string_lossy().into_owned();
    for args in COMMANDS {
        let mut full = vec!["--db", db_arg.as_str()];
        full.extend(args.iter());
        let out = raw(ws, &full);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        let unchanged = files.iter().map(|f| digest(f)).collect::<Vec<_>>() == before;
        println!(
            "{case:<22} {:<28} exit {:<4} sha256 unchanged {unchanged}  {}",
            args.join(" "),
            out.status.code().map_or("sig".into(), |c| c.to_string()),
            err.lines().next().unwrap_or("")
        );
        assert_eq!(
            out.status.code(),
            Some(78),
            "{case}: {args:?}: {}",
            text(&out)
        );
        assert!(
            err.contains(&name) && err.contains(what),
            "{case}: {args:?}: {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
        assert!(unchanged, "{case}: {args:?} changed the file");
    }
}

#[test]
fn damaged_foreign_and_orphaned_files_are_refused_unchanged() {
    // Flipped pages: 4 KiB inverted near the end of the file (the audit table's pages).
    let ws = Workspace::new();
    catalog_with_ballast(&ws);
    invert_tail(&ws.db(), 16 * 1024, 4096);
    refused_everywhere(
        &ws,
        "4 KiB of pages flipped",
        &ws.db(),
        "damaged",
        &[&ws.db()],
    );

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
    refused_everywhere(&ws, "truncated to half", &ws.db(), "damaged", &[&ws.db()]);

    // Another application's database.
    let ws = Workspace::new();
    let conn = rusqlite::Connection::open(ws.db()).unwrap();
    conn.execute_batch("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT);")
        .unwrap();
    drop(conn);
    refused_everywhere(
        &ws,
        "foreign database",
        &ws.db(),
        "not a jobvisor catalog",
        &[&ws.db()],
    );

    // Not SQLite at all.
    let ws = Workspace::new();
    std::fs::write(ws.db(), "name,email\nada,ada@example.org\n".repeat(50)).unwrap();
    refused_everywhere(
        &ws,
        "a CSV file",
        &ws.db(),
        "not a SQLite database",
        &[&ws.db()],
    );

    // A -wal whose main file is missing: never replaced by a new catalog.
    let ws = Workspace::new();
    let wal = ws.path("catalog.db-wal");
    std::fs::write(&wal, vec![0x37u8; 8192]).unwrap();
    refused_everywhere(&ws, "lone -wal", &ws.db(), "write-ahead log", &[&wal]);
    assert!(
        !ws.db().exists(),
        "a new catalog was created over the lone -wal"
    );
}

#[test]
fn a_catalog_damaged_while_the_node_runs_stops_it_at_db_maintenance() {
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
    let mut node = ws.start_node("n1");
    wait_for(10.0, "a first maintenance run", || {
        crate::support::runs_of(&ws.db(), "maint")
            .into_iter()
            .find(|r| r.status == "succeeded")
    });
    // The audit table's pages, which the node never reads, go bad under it.
    invert_tail(&ws.db(), 16 * 1024, 4096);
    let status = wait_for(15.0, "the node to stop", || node.child.try_wait().unwrap());
    std::mem::forget(node);
    assert_eq!(status.code(), Some(78));
    let log = std::fs::read_to_string(ws.path("n1.log")).unwrap();
    assert!(
        log.contains("catalog.db") && log.contains("damaged"),
        "the log names the file: {log}"
    );
    // And the next start refuses it.
    let out = Command::new(env!("CARGO_BIN_EXE_jobvisor"))
        .arg("--db")
        .arg(ws.db())
        .args(["run", "--bind", "127.0.0.1:0", "--node", "n1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(78), "{}", text(&out));
}
