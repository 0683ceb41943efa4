//! The catalog writer's tests: group commit, damage, the WAL's bound and the Checkpointer.

use super::*;
use crate::catalog::DbSettings;

/// A runtime to await the writers' answers on (the catalog names no actor runtime); the
/// catalog's other tests use it too.
pub(in crate::catalog) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

/// A panicking operation loses its batch (its caller hears the writer did not answer); the
/// writer's thread goes on with a new connection and later operations commit.
#[test]
fn a_panicking_operation_does_not_stop_the_writer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.db");
    let settings = DbSettings::default();
    let conn = crate::catalog::open_connection(&path, &settings).unwrap();
    conn.execute_batch("CREATE TABLE t (v INTEGER)").unwrap();
    runtime().block_on(async move {
        let writer = DbWriter::new("test", path, conn, settings);
        let lost = writer
            .call("testing", |c| -> Result<(), CatalogError> {
                c.execute("INSERT INTO t (v) VALUES (1)", [])?;
                panic!("boom")
            })
            .await;
        assert!(
            matches!(lost, Err(CatalogError::Unavailable(_))),
            "{lost:?}"
        );
        writer
            .call("testing", |c| {
                Ok(c.execute("INSERT INTO t (v) VALUES (2)", [])?)
            })
            .await
            .unwrap();
        let kept: Vec<i64> = writer
            .call("testing", |c| {
                let mut stmt = c.prepare("SELECT v FROM t")?;
                let rows = stmt.query_map([], |r| r.get(0))?;
                Ok(rows.collect::<Result<_, _>>()?)
            })
            .await
            .unwrap();
        assert_eq!(
            kept,
            [2],
            "the panicking operation's insert was rolled back"
        );
    });
}

/// A database file of two tables, `u` (empty) and `t` (a few hundred KiB), whose pages in
/// the middle — `t`'s — are overwritten with garbage after it was closed.
fn file_with_garbage_pages(dir: &Path) -> PathBuf {
    let path = dir.join("c.db");
    let conn = crate::catalog::open_connection(&path, &DbSettings::default()).unwrap();
    conn.execute_batch(
        "CREATE TABLE u (v INTEGER);
         CREATE TABLE t (v BLOB);
         WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 300)
         INSERT INTO t (v) SELECT randomblob(1000) FROM n;",
    )
    .unwrap();
    // The last connection to close moves the WAL into the file.
    drop(conn);
    let mut bytes = std::fs::read(&path).unwrap();
    let middle = bytes.len() / 2 / 4096 * 4096;
    bytes[middle - 4 * 4096..middle + 4 * 4096].fill(0xa5);
    std::fs::write(&path, bytes).unwrap();
    path
}

/// The bytes of the file and of its WAL (empty when there is none).
fn bytes_of(path: &Path) -> (Vec<u8>, Vec<u8>) {
    let wal = crate::catalog::open::wal_path(path);
    (
        std::fs::read(path).unwrap(),
        std::fs::read(wal).unwrap_or_default(),
    )
}

/// Issue 12, defect 3: an operation that meets SQLite's corruption error stops the writer.
/// The hook hears it once, naming the file and what the operation was doing; the operation
/// queued behind it in the same batch does not run, nor does any later one (each caller
/// hears the damage), and neither a settle nor the writer's end writes a byte to the file.
#[test]
fn a_corruption_error_stops_the_writer_and_the_file_keeps_its_bytes() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let path = file_with_garbage_pages(dir.path());
    let settings = DbSettings::default();
    let conn = crate::catalog::open_connection(&path, &settings).unwrap();
    let told = Arc::new(AtomicUsize::new(0));
    let heard = Arc::new(std::sync::Mutex::new(String::new()));
    let ran = Arc::new(AtomicBool::new(false));
    runtime().block_on(async {
        let writer = DbWriter::new("test", path.clone(), conn, settings);
        let (t, h) = (told.clone(), heard.clone());
        writer.on_damaged(Box::new(move |e| {
            t.fetch_add(1, Ordering::SeqCst);
            *h.lock().unwrap() = e.to_string();
        }));
        // An operation holds the writer until the next two are queued: they share the
        // next transaction.
        let (release, gate) = std::sync::mpsc::channel::<()>();
        let (running, started) = std::sync::mpsc::channel::<()>();
        let w = writer.clone();
        let held = std::thread::spawn(move || {
            w.call_blocking("holding the writer", move |_| {
                running.send(()).unwrap();
                let _ = gate.recv();
                Ok(())
            })
        });
        started.recv().unwrap();
        let ran_after = ran.clone();
        let (read, after, ()) = tokio::join!(
            writer.call("reading t", |c| {
                Ok(c.query_row("SELECT sum(length(v)) FROM t", [], |r| r.get::<_, i64>(0))?)
            }),
            writer.call("inserting into u", move |c| {
                ran_after.store(true, Ordering::SeqCst);
                Ok(c.execute("INSERT INTO u (v) VALUES (1)", [])?)
            }),
            async move { release.send(()).unwrap() },
        );
        held.join().unwrap().unwrap();
        let read = read.unwrap_err();
        assert!(read.is_damaged(), "{read}");
        let after = after.unwrap_err();
        assert!(after.is_damaged(), "{after}");
        assert!(!ran.load(Ordering::SeqCst), "the operation after it ran");
        assert!(writer.is_damaged());
        let found = bytes_of(&path);
        let later = writer
            .call("inserting into u", |c| {
                Ok(c.execute("INSERT INTO u (v) VALUES (2)", [])?)
            })
            .await
            .unwrap_err();
        assert!(
            matches!(later, CatalogError::FoundDamaged { .. }),
            "{later}"
        );
        writer.settle().await;
        assert!(
            bytes_of(&path) == found,
            "written after the damage was found"
        );
        drop(writer);
    });
    assert_eq!(told.load(Ordering::SeqCst), 1, "told once");
    let said = heard.lock().unwrap().clone();
    assert!(
        said.contains("c.db: the database file is damaged (found while reading t:"),
        "{said}"
    );
}

/// Damage found by a read of the same file (which shares the writer's [`Damage`]) stops
/// the writer too: its next operation is refused without running.
#[test]
fn damage_found_by_a_read_stops_the_writer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.db");
    let settings = DbSettings::default();
    let conn = crate::catalog::open_connection(&path, &settings).unwrap();
    conn.execute_batch("CREATE TABLE t (v INTEGER)").unwrap();
    runtime().block_on(async move {
        let writer = DbWriter::new("test", path.clone(), conn, settings);
        let corrupt = CatalogError::Sqlite(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CORRUPT),
            None,
        ));
        writer.damage().check(&path, "reading the jobs", corrupt);
        let refused = writer
            .call("inserting", |c| {
                Ok(c.execute("INSERT INTO t (v) VALUES (1)", [])?)
            })
            .await
            .unwrap_err();
        assert!(
            refused.to_string().contains("found while reading the jobs"),
            "{refused}"
        );
    });
    let conn = Connection::open(dir.path().join("c.db")).unwrap();
    let rows: i64 = conn
        .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, 0);
}

/// Issue 12, defect 2: a writer that commits without pause keeps its WAL near its bound
/// (the passive checkpoints alone let it grow without end), and the log is emptied when the
/// writer is told to settle, and after it idles.
#[test]
fn the_wal_stays_bounded_under_constant_writes_and_is_emptied_when_settled_or_idle() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.db");
    let wal = crate::catalog::open::wal_path(&path);
    let settings = DbSettings::default();
    let conn = crate::catalog::open_connection(&path, &settings).unwrap();
    conn.execute_batch("CREATE TABLE t (v BLOB)").unwrap();
    let size = |p: &std::path::Path| std::fs::metadata(p).map_or(0, |m| m.len());
    runtime().block_on(async move {
        let writer = DbWriter::new("test", path.clone(), conn, settings);
        let mut peak = 0;
        // 48 MiB written (and 24 MiB deleted) in 12 KiB transactions, back to back.
        for i in 0..4096 {
            writer
                .call("testing", move |c| {
                    c.execute("INSERT INTO t (v) VALUES (zeroblob(12000))", [])?;
                    if i % 2 == 1 {
                        c.execute("DELETE FROM t WHERE rowid = (SELECT min(rowid) FROM t)", [])?;
                    }
                    Ok(())
                })
                .await
                .unwrap();
            peak = peak.max(size(&wal));
        }
        assert!(
            peak <= WAL_RESTART_BYTES + (4 << 20),
            "WAL peak {peak} bytes, bound {WAL_RESTART_BYTES}"
        );
        writer.settle().await;
        assert_eq!(size(&wal), 0, "settled: the WAL is empty");
        writer
            .call("testing", |c| Ok(c.execute("DELETE FROM t", [])?))
            .await
            .unwrap();
        assert!(size(&wal) > 0);
        tokio::time::sleep(SETTLE_AFTER_IDLE + Duration::from_millis(500)).await;
        assert_eq!(size(&wal), 0, "idle: the WAL is empty");
    });
}

/// Pages a commit leaves in the WAL reach the database file through the Checkpointer's
/// thread, while the writing connection never checkpoints by itself.
#[test]
fn the_checkpointer_copies_the_wal_into_the_database_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.db");
    let settings = DbSettings::default();
    let conn = crate::catalog::open_connection(&path, &settings).unwrap();
    tune_writer(&conn, "test", true);
    conn.execute_batch("CREATE TABLE t (v BLOB)").unwrap();
    let checkpointer = Checkpointer::start("test", &path, &settings, Arc::default()).unwrap();
    let db_size = || std::fs::metadata(&path).unwrap().len();
    let before = db_size();
    conn.execute_batch("BEGIN").unwrap();
    for _ in 0..256 {
        conn.execute("INSERT INTO t (v) VALUES (zeroblob(4000))", [])
            .unwrap();
    }
    conn.execute_batch("COMMIT").unwrap();
    assert_eq!(db_size(), before, "the writer left its pages in the WAL");
    checkpointer.poke();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while db_size() < 1_000_000 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(db_size() >= 1_000_000, "checkpointed: {} bytes", db_size());
}
