//! Scenario 8, an inbox under crashes: a stream of 500 files moved into a watched folder while
//! the node is killed (`kill -9`) at 20 seeded instants and restarted. Every file is queued
//! exactly once (one run, one key), every run succeeds with its file in its own folder, and
//! nothing is left behind — no file in the watched folder, no marker of a file between its move
//! and its run.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use jobvisor::sim::SimRng;

use crate::support::{Workspace, wait_for};
use crate::{figures, integrity, open, serial, soak};

#[test]
fn kill_9_during_an_inbox_stream_queues_every_file_exactly_once_and_leaves_none_behind() {
    let _one = serial();
    let (files, kills) = if soak() { (5_000, 100) } else { (500, 20) };
    let seed = 0x5eed_0008;
    let ws = Workspace::new();
    let inbox = ws.path("in");
    let staging = ws.path("staging");
    std::fs::create_dir_all(&inbox).unwrap();
    std::fs::create_dir_all(&staging).unwrap();
    let log = ws.path("took.log");
    let conf = ws.write(
        "jobs.conf",
        &format!(
            r#"
[processor.wide]
instances = 4

[job.take]
type = "command"
processor = "wide"
overlap_policy = "allow"
max_overlap = 1000000
max_attempts = 3
payload = {{ argv = ["sh", "-c", "echo \"$JOBVISOR_RUN_ID $JOBVISOR_PARAMS\" >> '{}'"] }}
"#,
            log.display()
        ),
    );
    ws.ok(&["import", &conf.display().to_string()]);
    ws.disable_seeded_jobs();
    let node_conf = ws.write(
        "node.toml",
        &format!(
            "[[inbox]]\npath = \"{}\"\njob = \"take\"\npattern = \"*.msg\"\n",
            inbox.display()
        ),
    );
    ws.set_node_env("JOBVISOR_CONFIG", &node_conf.display().to_string());
    let db = ws.db();
    let pending = ws.path("data/inbox/take/.pending");

    // The stream: each file written beside the folder, then moved in (a complete file).
    let written = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let feeder = {
        let (written, done, inbox, staging) = (
            written.clone(),
            done.clone(),
            inbox.clone(),
            staging.clone(),
        );
        std::thread::spawn(move || {
            for i in 0..files {
                let name = format!("{i:05}.msg");
                let tmp = staging.join(&name);
                std::fs::write(&tmp, format!("file {i}\n")).unwrap();
                std::fs::rename(&tmp, inbox.join(&name)).unwrap();
                written.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(18));
            }
            done.store(true, Ordering::SeqCst);
        })
    };
    let mut rng = SimRng::new(seed);
    let conn = open(&db);
    let (mut markers_at_kills, mut queued_not_cleared, mut written_at_kill) = (0, 0, Vec::new());
    let mut integrity_ok = 0;
    for _ in 0..kills {
        let node = ws.start_node("n1");
        std::thread::sleep(Duration::from_millis(rng.range_i64(150, 600) as u64));
        node.crash();
        written_at_kill.push(written.load(Ordering::SeqCst));
        assert_eq!(integrity(&db), "ok", "integrity after a kill");
        integrity_ok += 1;
        // Files the kill caught between their move and their marker's removal: queued already
        // (the key is recorded) or not yet. The next start must queue exactly the latter.
        let keys: Vec<String> = std::fs::read_dir(&pending)
            .map(|d| {
                d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                    .collect()
            })
            .unwrap_or_default();
        markers_at_kills += keys.len();
        for key in &keys {
            let recorded: i64 = conn
                .query_row(
                    "SELECT count(*) FROM inbox_file WHERE inbox_key = ?1",
                    [format!("take/{key}")],
                    |r| r.get(0),
                )
                .unwrap();
            queued_not_cleared += recorded;
        }
    }
    feeder.join().unwrap();
    assert!(done.load(Ordering::SeqCst));
    let t0 = Instant::now();
    let node = ws.start_node("n1");
    let count = |sql: &str| -> i64 { conn.query_row(sql, [], |r| r.get(0)).unwrap() };
    wait_for(120.0, "every file's run to succeed", || {
        let ok = count(
            "SELECT count(*) FROM job_run r JOIN job j USING (job_id)
             WHERE j.job_name = 'take' AND r.status = 'succeeded'",
        );
        (ok >= files as i64).then_some(())
    });
    let drained_ms = t0.elapsed().as_millis();
    // A moment for a stray second run, were there one.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(node.stop(), Some(0));

    let runs: Vec<(i64, String, String)> = conn
        .prepare(
            "SELECT r.run_id, r.status, r.params FROM job_run r JOIN job j USING (job_id)
             WHERE j.job_name = 'take' ORDER BY r.run_id",
        )
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let mut per_file: BTreeMap<String, usize> = BTreeMap::new();
    let mut wrong_bytes = 0;
    let mut outside = 0;
    for (_, _, params) in &runs {
        let p: serde_json::Value = serde_json::from_str(params).unwrap();
        let name = p["file"].as_str().unwrap().to_string();
        let path = std::path::PathBuf::from(p["path"].as_str().unwrap());
        if !path.starts_with(ws.path("data/inbox/take")) {
            outside += 1;
        }
        let want = format!(
            "file {}\n",
            name.trim_end_matches(".msg").parse::<usize>().unwrap()
        );
        if std::fs::read_to_string(&path).ok().as_deref() != Some(want.as_str()) {
            wrong_bytes += 1;
        }
        *per_file.entry(name).or_default() += 1;
    }
    let twice = per_file.values().filter(|n| **n > 1).count();
    let expected: BTreeSet<String> = (0..files).map(|i| format!("{i:05}.msg")).collect();
    let lost = expected
        .iter()
        .filter(|n| !per_file.contains_key(*n))
        .count();
    let left_in_inbox = std::fs::read_dir(&inbox).unwrap().count();
    let left_pending = std::fs::read_dir(&pending).unwrap().count();
    let keys = count("SELECT count(*) FROM inbox_file");
    let failed = runs.iter().filter(|r| r.1 != "succeeded").count();
    let executions = std::fs::read_to_string(&log).unwrap().lines().count();
    figures(
        "scenario 8 inbox",
        &[
            format!(
                "seed {seed:#x}, {files} files moved into the inbox (one every ~18 ms), {kills} \
                 kill -9 while it streamed; files written at each kill: {written_at_kill:?}"
            ),
            format!(
                "runs {} for {files} files: lost {lost}, queued twice {twice}, keys recorded \
                 {keys}; runs not succeeded {failed}; file not in its run's folder {outside}, \
                 with other bytes {wrong_bytes}",
                runs.len()
            ),
            format!(
                "the kills caught {markers_at_kills} files between their move and their marker's \
                 removal ({queued_not_cleared} already queued, {} not yet): each queued once at \
                 the next start",
                markers_at_kills as i64 - queued_not_cleared
            ),
            format!(
                "left behind: {left_in_inbox} files in the inbox, {left_pending} markers; \
                 executions {executions} (a command the kills interrupted runs again)"
            ),
            format!(
                "last start to every run succeeded: {drained_ms} ms; integrity_check ok after \
                 {integrity_ok} of {kills} kills"
            ),
        ],
    );
    assert_eq!(lost, 0, "every file queued");
    assert_eq!(twice, 0, "no file queued twice");
    assert_eq!(runs.len(), files, "one run per file");
    assert_eq!(keys, files as i64);
    assert_eq!(failed, 0);
    assert_eq!((outside, wrong_bytes), (0, 0));
    assert_eq!((left_in_inbox, left_pending), (0, 0), "nothing left behind");
    assert!(executions >= files);
    assert!(
        written_at_kill.first() < written_at_kill.last(),
        "the kills came during the stream: {written_at_kill:?}"
    );
}
