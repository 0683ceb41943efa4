//! A disk filling on a tmpfs data folder (issue 18, defects 1 and 4): the node measures the
//! data folder's own file system (sysinfo's disk list leaves tmpfs out), sheds the writer and
//! nothing that writes nothing while the disk is strained, pauses writes at critical — naming
//! every job it stops (the writer, and `reader`, which writes only its runs' history: it ran 0
//! times while listed `active`), listing them `paused`, writing no run rows for them (their
//! slots are not planned), keeping maintenance running and recording its own statistics once
//! a minute — and resumes when space returns, the held jobs running again.

use std::io::Write as _;
use std::path::Path;

use jobvisor::runtime::health::disk_space;

use crate::pressure::*;
use crate::support::runs_of;

fn catalog(dir: &Path) -> String {
    let events = dir.join("events.db");
    let conn = rusqlite::Connection::open(&events).unwrap();
    conn.execute_batch(
        "CREATE TABLE events (id INTEGER PRIMARY KEY, at INTEGER NOT NULL, body TEXT)",
    )
    .unwrap();
    format!(
        r#"
[processor.main]
instances = 2

[object.events]
conn_string = "{events}"
key_field = "id"
name_field = "at"
description = "what the writers write"

[group.cleanup]
maintenance = true

[job.keeper]
type = "sql"
processor = "main"
required = true
priority = 10
cron = "* * * * * *"
objects = ["events"]
payload = {{ object = "events", sql = "INSERT INTO events (at, body) VALUES (CAST(unixepoch('subsec') * 1000 AS INTEGER), 'keeper')" }}

[job.loader]
type = "sql"
processor = "main"
priority = 5
cron = "* * * * * *"
objects = ["events"]
payload = {{ object = "events", sql = "INSERT INTO events (at, body) VALUES (CAST(unixepoch('subsec') * 1000 AS INTEGER), 'loader')" }}

[job.pruner]
type = "sql"
processor = "main"
group = "cleanup"
priority = 4
cron = "*/2 * * * * *"
objects = ["events"]
payload = {{ object = "events", sql = "DELETE FROM events WHERE id < (SELECT max(id) - 50 FROM events)" }}

[job.reader]
type = "function"
processor = "main"
priority = 3
cron = "* * * * * *"
payload = {{ function = "debug.noop" }}
"#,
        events = events.display()
    )
}

/// Writes a file that leaves `free_pct` percent of the file system free.
fn fill_to(dir: &Path, free_pct: f64) {
    let (available, total) = disk_space(dir).unwrap();
    let target = (free_pct / 100.0 * total as f64) as u64;
    let mut more = available.saturating_sub(target);
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(format!("filler-{free_pct}")))
        .unwrap();
    let chunk = vec![0x5au8; 1 << 20];
    while more > 0 {
        let n = more.min(chunk.len() as u64) as usize;
        f.write_all(&chunk[..n]).unwrap();
        more -= n as u64;
    }
    f.sync_all().unwrap();
}

/// The text without terminal colour codes (`ESC [ … m`).
fn without_ansi(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn free_pct(dir: &Path) -> f64 {
    let (a, t) = disk_space(dir).unwrap();
    a as f64 * 100.0 / t as f64
}

#[test]
fn a_disk_filling_on_tmpfs_sheds_writers_then_pauses_writes_and_resumes() {
    let _one = one_at_a_time();
    // CPU, memory and PSI off (thresholds at their limits): this test is about the disk,
    // whatever else the shared machine does meanwhile.
    let mut t = Tuned::prepare_on_tmpfs(
        "256m",
        "disk",
        catalog,
        &[
            ("JOBVISOR__POLICY__CPU_STRAINED", "100"),
            ("JOBVISOR__POLICY__CPU_CRITICAL", "100"),
            ("JOBVISOR__POLICY__PSI_STRAINED", "100"),
            ("JOBVISOR__POLICY__PSI_CRITICAL", "100"),
            ("JOBVISOR__POLICY__MEMORY_STRAINED", "0"),
            ("JOBVISOR__POLICY__MEMORY_CRITICAL", "0"),
        ],
    );
    let dir = t.ws.dir.path().to_path_buf();
    t.start(&["loader", "pruner", "reader"]);
    t.wait_until_quiet("device.disk_available", 3, 0, 60.0, |_| true);
    let log = without_ansi(&std::fs::read_to_string(t.ws.path("disk.log")).unwrap());
    assert!(
        log.contains("disk: watching the file system of the data folder")
            && log.contains(&format!("mount={}", dir.display()))
            && log.contains("fs_type=tmpfs"),
        "the log names the watched mount:\n{log}"
    );

    // Strained (10 % free < 15 %): the writer goes, the job that writes nothing stays.
    let strained_at = now_ms();
    fill_to(&dir, 10.0);
    let shed = t.wait_for(10.0, "the writer to be shed", || {
        first(&t.decisions(), "deactivate", "loader", strained_at).cloned()
    });
    assert!(
        shed.reason
            .starts_with(&format!("disk {}: ", dir.display()))
            && shed.reason.contains("% free (")
            && shed
                .reason
                .contains(" of 256 MiB) < 15% (strained) for 2 samples in a row")
            && shed.reason.ends_with(
                "shed lowest-priority job that writes data objects `loader` (priority 5)"
            ),
        "{}",
        shed.reason
    );
    std::thread::sleep(std::time::Duration::from_millis(3 * SAMPLE_MS as u64));
    for job in ["reader", "pruner", "keeper"] {
        assert_eq!(t.state_of(job), "active", "{job} was shed for the disk");
    }

    // Critical (3 % free < 5 %): writes pause, naming every job they stop — the required
    // writer, and the job that writes only its runs' history (none of its runs is claimed).
    let critical_at = now_ms();
    fill_to(&dir, 3.0);
    let pause = t.wait_for(10.0, "writes to pause", || {
        t.decisions()
            .into_iter()
            .find(|d| d.action == "pause_writes" && d.at >= critical_at)
    });
    assert_eq!(pause.subject, "keeper, reader");
    assert!(
        pause.reason.contains("% free (")
            && pause
                .reason
                .contains("< 5% (critical) for 2 samples in a row")
            && pause.reason.contains(
                ": pause writes — hold the job that writes data objects (`keeper`) and the job \
                 that writes only its runs' history (`reader`); maintenance jobs keep running \
                 (`pruner`); the node records its own statistics once a minute until writes \
                 resume"
            ),
        "{}",
        pause.reason
    );
    t.wait_for(5.0, "keeper and reader to be listed paused", || {
        (t.listed("keeper") == "paused" && t.listed("reader") == "paused").then_some(())
    });
    let rate_before = t.stat_rows_between(pause.at - 6_000, pause.at) as f64 / 6.0;
    std::thread::sleep(std::time::Duration::from_secs(8));
    let rate_during = t.stat_rows_between(pause.at + 1, pause.at + 8_001) as f64 / 8.0;
    for job in ["keeper", "reader"] {
        assert_eq!(t.listed(job), "paused", "{job} is stopped by the pause");
    }
    assert_eq!(t.listed("pruner"), "active");

    // Space back: writes resume, naming the job they let go.
    let freed_at = now_ms();
    for f in std::fs::read_dir(&dir).unwrap() {
        let p = f.unwrap().path();
        if p.file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("filler-")
        {
            std::fs::remove_file(p).unwrap();
        }
    }
    let resume = t.wait_for(10.0, "writes to resume", || {
        t.decisions()
            .into_iter()
            .find(|d| d.action == "resume_writes" && d.at >= freed_at)
    });
    assert_eq!(resume.subject, "keeper, reader");
    assert!(
        resume.reason.contains("% free (")
            && resume.reason.contains(">= 5% for 2 samples in a row")
            && resume
                .reason
                .contains(": resume writes — only maintenance runs were claimed for ")
            && resume
                .reason
                .ends_with("; the 2 jobs held for writes run again (`keeper` and `reader`)"),
        "{}",
        resume.reason
    );
    for job in ["keeper", "reader"] {
        t.wait_for(10.0, &format!("{job} to run again"), || {
            runs_of(&t.ws.db(), job)
                .iter()
                .any(|r| r.started_at.is_some_and(|s| s > resume.at) && r.status == "succeeded")
                .then_some(())
        });
        assert_eq!(t.listed(job), "active");
    }
    t.wait_for(30.0, "the writer to be restored", || {
        first(&t.decisions(), "activate", "loader", freed_at).map(|_| ())
    });
    t.stop();

    let rows = t.decisions();
    assert!(
        !rows
            .iter()
            .any(|d| d.action == "deactivate" && (d.subject == "reader" || d.subject == "pruner")),
        "a job that frees no space, or maintenance, was shed for the disk"
    );
    // While paused: no run of a held job started or ended, and at most one of its rows was
    // written (a slot decided before the scheduler saw the pause): its slots are not planned,
    // so a per-second job with overlap `forbid` writes no `skipped` row a second on a full
    // disk; its misfire policy decides about them when writes resume.
    let during = |t: Option<i64>| t.is_some_and(|t| t > pause.at + SAMPLE_MS && t < resume.at);
    let mut rows_while_paused = Vec::new();
    for job in ["keeper", "reader"] {
        let runs = runs_of(&t.ws.db(), job);
        let held: Vec<_> = runs
            .iter()
            .filter(|r| during(r.started_at) || during(r.finished_at))
            .collect();
        assert!(
            held.is_empty(),
            "the held job {job} has runs while paused: {held:?}"
        );
        let created = t.runs_created_between(job, pause.at, resume.at);
        assert!(
            created <= 1,
            "{job}: {created} run rows written while writes were paused"
        );
        rows_while_paused.push(format!("{job} {created}"));
    }
    let pruned_during = runs_of(&t.ws.db(), "pruner")
        .iter()
        .filter(|r| r.started_at.is_some_and(|s| s > pause.at && s < resume.at))
        .count();
    assert!(
        pruned_during >= 2,
        "maintenance kept running: {pruned_during} runs"
    );
    // The node's own statistics: about 15 rows a second before, none or one batch during.
    assert!(
        rate_before >= 5.0,
        "{rate_before} stat rows/s before the pause"
    );
    assert!(
        rate_during * 8.0 <= 20.0,
        "{rate_during} stat rows/s while writes were paused"
    );
    t.print_log("disk_tmpfs");
    figures(
        "disk_tmpfs",
        &format!(
            "figures (disk): free {:.1}% at the end; stat rows/s before the pause {rate_before:.1}, \
         while paused {rate_during:.2}; run rows written while paused: {}; pruner runs while \
         paused: {pruned_during}; shed at +{} ms after filling to 10%; paused +{} ms after \
         filling to 3%; resumed +{} ms after freeing",
            free_pct(&dir),
            rows_while_paused.join(", "),
            shed.at - strained_at,
            pause.at - critical_at,
            resume.at - freed_at
        ),
    );
}
