//! Scenario 10, a fleet on PostgreSQL (issue 16): three `jobvisor run` processes with distinct
//! node names on one PostgreSQL catalog (`database.url`; a database of the test's own on the
//! server `.ci/test` started — these tests fail, never skip, when it said one is there). They
//! drain 20,000 runs with none lost and none recorded twice; a node killed with `kill -9`
//! mid-drain is swept by the others and its runs completed by them; a node stopped (SIGSTOP)
//! past its lease is swept, its late completions rejected by their stale claim tokens; a
//! per-second job active on all three fires each slot once; the server restarted mid-drain
//! loses nothing (the nodes reconnect with backoff); and workflows that fan out and in run
//! across the three, every step in order and each workflow ending once.
//!
//! The catalog is seeded by the first node from the test's own `job.conf` (`catalog.seed`),
//! so no housekeeping job runs. Everything is read back from the server: the runs' rows, the
//! per-node tallies of completions (`job_tally`), the claims (`job.runs_begun`), the nodes'
//! stale completions.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use postgres::Client;

use crate::support::{Node, PgDb, Workspace, wait_for};
use crate::{figures, serial, soak};

const HEARTBEAT_MS: u64 = 500;
const TTL_MS: u64 = 3_000;

/// A test's PostgreSQL database and the workspace whose nodes run on it, seeded with
/// processor `wide` (4 instances) and `jobs`; `None` when no server was asked for and none
/// answers.
fn fleet(test: &str, jobs: &str) -> Option<(Workspace, PgDb)> {
    let db = PgDb::create(test)?;
    let ws = Workspace::new();
    let seed = ws.write(
        "jobs.conf",
        &format!("[processor.wide]\ninstances = 4\n{jobs}"),
    );
    ws.set_node_env("JOBVISOR__DATABASE__URL", &db.url);
    ws.set_node_env("JOBVISOR__CATALOG__SEED", &seed.display().to_string());
    Some((ws, db))
}

/// A function job `name` running `function` with `payload` fields, overlapping freely.
fn job(name: &str, function: &str, extra: &str) -> String {
    format!(
        "[job.{name}]\ntype = \"function\"\nprocessor = \"wide\"\noverlap_policy = \"allow\"\n\
         max_overlap = 1000000\nmax_attempts = 3\npayload = {{ function = \"{function}\"{extra} }}\n"
    )
}

fn short_leases(ws: &Workspace) {
    ws.set_node_env(
        "JOBVISOR__NODE__HEARTBEAT_INTERVAL",
        &HEARTBEAT_MS.to_string(),
    );
    ws.set_node_env("JOBVISOR__NODE__LEASE_TTL", &TTL_MS.to_string());
}

/// Nodes `n1` … `nN`, the first started alone (it seeds the catalog).
fn start(ws: &Workspace, n: usize) -> Vec<Node> {
    (1..=n).map(|i| ws.start_node(&format!("n{i}"))).collect()
}

/// Queues `n` runs of `job` in one statement.
fn queue(c: &mut Client, job: &str, n: i64) {
    let queued = c
        .execute(
            "INSERT INTO job_run (job_id, processor_id, status, run_after, created_at)
             SELECT j.job_id, j.processor_id, 'queued', 0, 0
             FROM job j, generate_series(1, $2::bigint) WHERE j.job_name = $1",
            &[&job, &n],
        )
        .unwrap();
    assert_eq!(queued as i64, n, "job {job} exists");
}

/// Runs of `job` by status.
fn statuses(c: &mut Client, job: &str) -> BTreeMap<String, i64> {
    c.query(
        "SELECT r.status, count(*) FROM job_run r JOIN job j USING (job_id)
         WHERE j.job_name = $1 GROUP BY r.status",
        &[&job],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

fn succeeded(c: &mut Client, job: &str) -> i64 {
    statuses(c, job).get("succeeded").copied().unwrap_or(0)
}

fn count(c: &mut Client, sql: &str) -> i64 {
    c.query_one(sql, &[]).unwrap().get(0)
}

/// node name -> node id.
/// The server sessions of node `name` (its connections name it: `application_name`).
fn sessions_of(c: &mut Client, name: &str) -> i64 {
    c.query_one(
        "SELECT count(*) FROM pg_stat_activity
         WHERE datname = current_database() AND application_name LIKE $1",
        &[&format!("jobvisor {name} %")],
    )
    .unwrap()
    .get(0)
}

fn node_id(c: &mut Client, name: &str) -> i64 {
    c.query_one("SELECT node_id FROM node WHERE node_name = $1", &[&name])
        .unwrap()
        .get(0)
}

/// Succeeded runs of `job` by the name of the node that completed them.
fn completed_by(c: &mut Client, job: &str) -> BTreeMap<String, i64> {
    c.query(
        "SELECT n.node_name, count(*) FROM job_run r JOIN job j USING (job_id)
         JOIN node n ON n.node_id = r.node_id
         WHERE j.job_name = $1 AND r.status = 'succeeded' GROUP BY n.node_name",
        &[&job],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

/// (claims of `job`'s runs, their completions recorded, per node): each claim and each
/// completion is counted where it was recorded, so a run recorded twice shows as more
/// completions than runs.
fn bookkeeping(c: &mut Client, job: &str) -> (i64, BTreeMap<String, i64>) {
    let begun: i64 = c
        .query_one("SELECT runs_begun FROM job WHERE job_name = $1", &[&job])
        .unwrap()
        .get(0);
    let ended = c
        .query(
            "SELECT n.node_name, t.runs_ended FROM job_tally t JOIN job j USING (job_id)
             JOIN node n ON n.node_id = t.node_id WHERE j.job_name = $1",
            &[&job],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    (begun, ended)
}

/// How many claimed runs not started the nodes `names` returned to the queue (from their logs:
/// for an idle node, past their claim's lease, or while every instance stayed busy): each is
/// claimed again, and ended once more in its first node's tally.
fn given_back(ws: &Workspace, names: &[&str]) -> i64 {
    names
        .iter()
        .map(|n| std::fs::read_to_string(ws.log_path(n)).unwrap_or_default())
        .flat_map(|log| {
            log.lines()
                .filter(|l| l.contains("claimed runs") && l.contains("to the queue"))
                .filter_map(|l| {
                    let n = l.split("runs=").nth(1)?;
                    n.split(|c: char| !c.is_ascii_digit())
                        .next()?
                        .parse::<i64>()
                        .ok()
                })
                .collect::<Vec<_>>()
        })
        .sum()
}

/// Ids of the runs node `node_id` holds running.
fn held_by(c: &mut Client, node_id: i64) -> Vec<i64> {
    c.query(
        "SELECT run_id FROM job_run WHERE status IN ('claimed', 'running') AND node_id = $1",
        &[&node_id],
    )
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// (status, completing node id) of each of `runs`.
fn ends(c: &mut Client, runs: &[i64]) -> Vec<(String, Option<i64>)> {
    c.query(
        "SELECT status, node_id FROM job_run WHERE run_id = ANY($1) ORDER BY run_id",
        &[&runs],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

/// The `node.sweep` audit rows: (swept node, requeued run ids).
fn sweeps(c: &mut Client) -> Vec<(String, Vec<i64>)> {
    c.query(
        "SELECT subject, detail FROM audit WHERE action = 'node.sweep' ORDER BY audit_id",
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| {
        let detail: serde_json::Value = serde_json::from_str(r.get::<_, &str>(1)).unwrap();
        let requeued = detail["requeued"]
            .as_array()
            .map(|a| a.iter().map(|v| v.as_i64().unwrap()).collect())
            .unwrap_or_default();
        (r.get(0), requeued)
    })
    .collect()
}

/// Lines of the nodes' logs at ERROR level.
fn error_lines(ws: &Workspace, names: &[&str]) -> Vec<String> {
    names
        .iter()
        .flat_map(|n| {
            std::fs::read_to_string(ws.log_path(n))
                .unwrap_or_default()
                .lines()
                .filter(|l| l.contains(" ERROR "))
                .map(|l| format!("{n}: {l}"))
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn three_nodes_on_postgres_drain_20000_runs_none_lost_none_recorded_twice() {
    let _one = serial();
    const RUNS: i64 = 20_000;
    let Some((ws, db)) = fleet("pg_drain", &job("noop", "debug.noop", "")) else {
        return;
    };
    let nodes = start(&ws, 3);
    let mut c = db.client();
    let t0 = Instant::now();
    queue(&mut c, "noop", RUNS);
    wait_for(600.0, "every run to succeed", || {
        (succeeded(&mut c, "noop") == RUNS).then_some(())
    });
    let drained = t0.elapsed();
    for node in nodes {
        assert_eq!(node.stop(), Some(0));
    }
    let by_node = completed_by(&mut c, "noop");
    let (claimed, recorded) = bookkeeping(&mut c, "noop");
    let rows = count(&mut c, "SELECT count(*) FROM job_run");
    let stale = count(&mut c, "SELECT sum(stale_completions)::bigint FROM node");
    let recorded_sum: i64 = recorded.values().sum();
    let errors = error_lines(&ws, &["n1", "n2", "n3"]);
    figures(
        "scenario 10 fleet on postgres: drain",
        &[
            format!(
                "{RUNS} no-op runs, 3 nodes on one PostgreSQL catalog (4 instances each): \
                 drained in {:.1} s, {:.0} runs/s (a debug build; the runs queued in one \
                 statement while the three ran)",
                drained.as_secs_f64(),
                RUNS as f64 / drained.as_secs_f64()
            ),
            format!(
                "completed by node {by_node:?}; completions recorded per node (job_tally) \
                 {recorded:?}, sum {recorded_sum}; claims {claimed}; stale completions {stale}"
            ),
            format!(
                "lost {} (rows {rows}); recorded twice {}; ERROR lines in the logs: {}",
                RUNS - by_node.values().sum::<i64>(),
                recorded_sum - RUNS,
                errors.len()
            ),
        ],
    );
    assert_eq!(rows, RUNS, "no run lost or added");
    assert_eq!(by_node.values().sum::<i64>(), RUNS);
    assert_eq!(recorded_sum, RUNS, "each run recorded once, by one node");
    assert_eq!(claimed, RUNS, "each run claimed once");
    assert_eq!(stale, 0);
    assert!(
        by_node.len() == 3,
        "each node took part: {by_node:?} (a starved node is a defect)"
    );
    assert!(errors.is_empty(), "{errors:#?}");
}

#[test]
fn kill_9_one_of_three_nodes_on_postgres_and_the_others_complete_its_runs() {
    let _one = serial();
    let runs: i64 = if soak() { 20_000 } else { 3_000 };
    let Some((ws, db)) = fleet("pg_kill", &job("nap", "debug.sleep", ", ms = 20")) else {
        return;
    };
    short_leases(&ws);
    let mut nodes = start(&ws, 3);
    let mut c = db.client();
    queue(&mut c, "nap", runs);
    let n2 = node_id(&mut c, "n2");
    wait_for(60.0, "n2 to hold runs", || {
        (held_by(&mut c, n2).len() >= 4).then_some(())
    });
    std::thread::sleep(Duration::from_millis(1000));
    nodes.remove(1).crash();
    let killed = Instant::now();
    // A transaction the node had sent may still commit after its process is gone: what it
    // held is read once the server has ended its sessions.
    wait_for(10.0, "n2's sessions to end", || {
        (sessions_of(&mut c, "n2") == 0).then_some(())
    });
    let left = held_by(&mut c, n2);
    let swept_after = wait_for(60.0, "n2's runs back in the queue", || {
        held_by(&mut c, n2).is_empty().then(|| killed.elapsed())
    });
    let done_after = wait_for(120.0, "n2's runs completed by the others", || {
        ends(&mut c, &left)
            .iter()
            .all(|(s, _)| s == "succeeded")
            .then(|| killed.elapsed())
    });
    wait_for(300.0, "every run to succeed", || {
        (succeeded(&mut c, "nap") == runs).then_some(())
    });
    for node in nodes {
        assert_eq!(node.stop(), Some(0));
    }
    let finishers: HashSet<Option<i64>> = ends(&mut c, &left).into_iter().map(|(_, n)| n).collect();
    let rows = count(&mut c, "SELECT count(*) FROM job_run");
    let audit = sweeps(&mut c);
    let bound = Duration::from_millis(TTL_MS + HEARTBEAT_MS);
    let (claimed, recorded) = bookkeeping(&mut c, "nap");
    let back = given_back(&ws, &["n1", "n2", "n3"]);
    figures(
        "scenario 10 fleet on postgres: kill -9",
        &[
            format!(
                "{runs} runs of 20 ms on 3 nodes (4 instances each), heartbeat {HEARTBEAT_MS} \
                 ms, lease TTL {TTL_MS} ms; n2 killed with {} runs held",
                left.len()
            ),
            format!(
                "kill to n2's runs back in the queue (swept): {} ms (TTL + heartbeat = {} ms); \
                 kill to all of them completed by n1 and n3: {} ms",
                swept_after.as_millis(),
                bound.as_millis(),
                done_after.as_millis()
            ),
            format!(
                "sweeps: {:?}; claims {claimed} (runs {runs} + the {} n2 held + {back} given \
                 back for an idle node), completions recorded {recorded:?}; lost {} (rows {rows})",
                audit
                    .iter()
                    .map(|(node, r)| format!("{node}: {} requeued", r.len()))
                    .collect::<Vec<_>>(),
                left.len(),
                runs - succeeded(&mut c, "nap")
            ),
        ],
    );
    assert_eq!(rows, runs, "no run lost or added");
    assert!(!finishers.contains(&Some(n2)), "a survivor completed each");
    assert!(
        swept_after >= Duration::from_millis(TTL_MS - HEARTBEAT_MS),
        "swept before its TTL: {swept_after:?}"
    );
    assert!(
        swept_after <= bound + Duration::from_secs(2),
        "swept {swept_after:?} after the kill; TTL + heartbeat is {bound:?}"
    );
    assert!(audit.iter().all(|(node, _)| node == "n2"), "{audit:?}");
    let mut requeued: Vec<i64> = audit.into_iter().flat_map(|(_, r)| r).collect();
    requeued.sort();
    let mut expected = left.clone();
    expected.sort();
    assert_eq!(requeued, expected, "each of n2's runs requeued once");
    assert_eq!(
        recorded.values().sum::<i64>(),
        runs + left.len() as i64 + back,
        "every run ended once, each of n2's also once by the sweep, and each given back once more"
    );
    assert_eq!(
        claimed,
        recorded.values().sum::<i64>(),
        "each claim ended once"
    );
}

#[test]
fn a_node_on_postgres_stopped_past_its_lease_is_swept_and_its_late_completions_rejected() {
    let _one = serial();
    const RUNS: i64 = 240;
    let Some((ws, db)) = fleet("pg_stop", &job("nap", "debug.sleep", ", ms = 400")) else {
        return;
    };
    short_leases(&ws);
    let mut nodes = start(&ws, 3);
    let mut c = db.client();
    queue(&mut c, "nap", RUNS);
    let n2 = node_id(&mut c, "n2");
    wait_for(60.0, "n2 to execute runs", || {
        (held_by(&mut c, n2).len() >= 4).then_some(())
    });
    let mut stopped_node = nodes.remove(1);
    let pid = stopped_node.child.id() as i32;
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let stopped = Instant::now();
    let held = held_by(&mut c, n2);
    let swept_after = wait_for(60.0, "the stopped node's runs back in the queue", || {
        held_by(&mut c, n2).is_empty().then(|| stopped.elapsed())
    });
    std::thread::sleep(Duration::from_millis(1000));
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    let resumed = Instant::now();
    let code = wait_for(30.0, "the stopped node to stop by itself", || {
        stopped_node.child.try_wait().unwrap()
    });
    let exit_after = resumed.elapsed();
    std::mem::forget(stopped_node);
    wait_for(300.0, "every run to succeed", || {
        (succeeded(&mut c, "nap") == RUNS).then_some(())
    });
    for node in nodes {
        assert_eq!(node.stop(), Some(0));
    }
    let stale: i64 = c
        .query_one(
            "SELECT stale_completions FROM node WHERE node_id = $1",
            &[&n2],
        )
        .unwrap()
        .get(0);
    let held_ends = ends(&mut c, &held);
    let elsewhere = held_ends
        .iter()
        .filter(|(s, n)| s == "succeeded" && *n != Some(n2))
        .count();
    let rows = count(&mut c, "SELECT count(*) FROM job_run");
    let log = std::fs::read_to_string(ws.log_path("n2")).unwrap_or_default();
    figures(
        "scenario 10 fleet on postgres: SIGSTOP",
        &[
            format!(
                "{RUNS} runs of 400 ms on 3 nodes (4 instances each), heartbeat {HEARTBEAT_MS} \
                 ms, lease TTL {TTL_MS} ms; n2 stopped holding {} runs for {:.1} s",
                held.len(),
                (resumed - stopped).as_secs_f64()
            ),
            format!(
                "stop to n2's runs back in the queue (swept): {} ms; n2 stopped by itself {} ms \
                 after it continued, exit {:?}",
                swept_after.as_millis(),
                exit_after.as_millis(),
                code.code()
            ),
            format!(
                "late completions of n2 rejected by their stale claim tokens: {stale}; of the \
                 {} runs it held, completed once elsewhere {elsewhere}; rows {rows} of {RUNS}",
                held.len()
            ),
        ],
    );
    assert!(stale >= 1, "n2's late completions were counted");
    assert_eq!(elsewhere, held.len(), "{held_ends:?}");
    assert_eq!(rows, RUNS, "each run recorded once");
    assert_eq!(code.code(), Some(78));
    assert!(
        log.contains("fenced this node"),
        "n2 says why it stopped: {log}"
    );
}

#[test]
fn a_per_second_job_on_three_nodes_on_postgres_fires_each_slot_exactly_once() {
    let _one = serial();
    let secs: u64 = if soak() { 120 } else { 30 };
    let Some((ws, db)) = fleet(
        "pg_slots",
        "[job.beat]\ntype = \"function\"\nprocessor = \"wide\"\ncron = \"* * * * * *\"\n\
         payload = { function = \"debug.noop\" }\n",
    ) else {
        return;
    };
    let nodes = start(&ws, 3);
    let from = jobvisor::catalog::now_ms().div_euclid(1000) * 1000 + 2000;
    std::thread::sleep(Duration::from_secs(secs + 2));
    let to = jobvisor::catalog::now_ms().div_euclid(1000) * 1000 - 1000;
    for node in nodes {
        assert_eq!(node.stop(), Some(0));
    }
    let mut c = db.client();
    let rows: Vec<(i64, String, Option<String>)> = c
        .query(
            "SELECT r.scheduled_for, r.status, n.node_name FROM job_run r
             JOIN job j USING (job_id) LEFT JOIN node n ON n.node_id = r.node_id
             WHERE j.job_name = 'beat' AND r.scheduled_for >= $1 AND r.scheduled_for < $2
             ORDER BY r.scheduled_for",
            &[&from, &to],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    crate::slots_fired_once(
        "scenario 10 fleet on postgres: per-second slots",
        secs,
        from,
        to,
        &rows,
    );
}

/// The local cluster listening on 5432 (`pg_lsclusters`: version and name), to restart.
fn local_cluster() -> Option<(String, String)> {
    let out = std::process::Command::new("pg_lsclusters")
        .arg("-h")
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout).lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() > 2 && f[2] == "5432").then(|| (f[0].to_string(), f[1].to_string()))
    })
}

#[test]
fn postgres_restarted_mid_drain_the_nodes_reconnect_and_lose_nothing() {
    let _one = serial();
    const RUNS: i64 = 10_000;
    let Some((ws, db)) = fleet("pg_restart", &job("nap", "debug.sleep", ", ms = 10")) else {
        return;
    };
    let Some((version, cluster)) = local_cluster() else {
        assert!(
            std::env::var("JOBVISOR_TEST_PG").is_err(),
            "JOBVISOR_TEST_PG is set but no local cluster on 5432 can be restarted"
        );
        eprintln!("not run: no local PostgreSQL cluster to restart");
        return;
    };
    let nodes = start(&ws, 3);
    let mut c = db.client();
    queue(&mut c, "nap", RUNS);
    wait_for(120.0, "a fifth of the runs to succeed", || {
        (succeeded(&mut c, "nap") >= RUNS / 5).then_some(())
    });
    drop(c);
    let t0 = Instant::now();
    let restart = std::process::Command::new("pg_ctlcluster")
        .args([&version, &cluster, "restart", "-m", "fast"])
        .output()
        .unwrap();
    let restarted_in = t0.elapsed();
    assert!(
        restart.status.success(),
        "pg_ctlcluster restart: {}",
        String::from_utf8_lossy(&restart.stderr)
    );
    let mut c = wait_for(30.0, "the server to answer again", || {
        postgres::Client::connect(&db.url, postgres::NoTls).ok()
    });
    let at_restart = succeeded(&mut c, "nap");
    wait_for(300.0, "every run to succeed", || {
        (succeeded(&mut c, "nap") == RUNS).then_some(())
    });
    let drained_after = t0.elapsed();
    let mut nodes = nodes;
    let mut alive = 0;
    for n in &mut nodes {
        alive += usize::from(n.child.try_wait().unwrap().is_none());
    }
    for node in nodes {
        assert_eq!(node.stop(), Some(0));
    }
    let (claimed, recorded) = bookkeeping(&mut c, "nap");
    let recorded_sum: i64 = recorded.values().sum();
    let rows = count(&mut c, "SELECT count(*) FROM job_run");
    let stale = count(&mut c, "SELECT sum(stale_completions)::bigint FROM node");
    let swept = sweeps(&mut c);
    let back = given_back(&ws, &["n1", "n2", "n3"]);
    let reconnects: usize = ["n1", "n2", "n3"]
        .iter()
        .map(|n| {
            std::fs::read_to_string(ws.log_path(n))
                .unwrap_or_default()
                .matches("reconnecting")
                .count()
        })
        .sum();
    figures(
        "scenario 10 fleet on postgres: server restart",
        &[
            format!(
                "{RUNS} runs of 10 ms on 3 nodes; PostgreSQL restarted (pg_ctlcluster restart \
                 -m fast, {} ms) with {at_restart} succeeded; every run succeeded {:.1} s after \
                 the restart began; nodes alive after: {alive} of 3",
                restarted_in.as_millis(),
                drained_after.as_secs_f64()
            ),
            format!(
                "rows {rows} of {RUNS}; claims {claimed}, completions recorded {recorded:?} \
                 (sum {recorded_sum}); stale {stale}; sweeps {}; claimed runs returned to the \
                 queue unstarted {back}; 'reconnecting' log lines {reconnects}",
                swept.len()
            ),
        ],
    );
    assert!(at_restart < RUNS, "the restart came mid-drain");
    assert_eq!(rows, RUNS, "no run lost or added");
    assert_eq!(alive, 3, "every node rode the restart out");
    let requeued: i64 = swept.iter().map(|(_, r)| r.len() as i64).sum();
    assert_eq!(
        recorded_sum,
        RUNS + requeued + back,
        "each run recorded once (runs requeued by a sweep or returned unstarted end twice on \
         the tallies)"
    );
    assert_eq!(claimed, recorded_sum, "every claim ended once");
}

/// A node on a new PostgreSQL catalog seeds the default catalog, and each housekeeping job
/// does its work there (a backup says to use the server's tools); it prints a first admin
/// token, and its API answers with it (and only with it) from the PostgreSQL catalog.
#[test]
fn a_node_on_postgres_seeds_the_default_catalog_and_runs_its_housekeeping() {
    let _one = serial();
    let Some(db) = PgDb::create("pg_seed") else {
        return;
    };
    let ws = Workspace::new();
    ws.set_node_env("JOBVISOR__DATABASE__URL", &db.url);
    let node = ws.start_node("n1");
    let mut c = db.client();
    let seeded = jobvisor::jobconf::toml_format::parse(jobvisor::jobconf::DEFAULT_JOB_CONF)
        .unwrap()
        .jobs
        .len() as i64;
    assert_eq!(count(&mut c, "SELECT count(*) FROM job"), seeded);
    c.execute(
        "INSERT INTO job_run (job_id, processor_id, status, run_after, created_at)
         SELECT job_id, processor_id, 'queued', 0, 0 FROM job",
        &[],
    )
    .unwrap();
    let queued_at = jobvisor::catalog::now_ms();
    let ended = wait_for(60.0, "each housekeeping run to end", || {
        let rows: Vec<(String, String, Option<String>)> = c
            .query(
                "SELECT j.job_name, r.status, r.error FROM job_run r JOIN job j USING (job_id)
                 WHERE r.created_at = 0 ORDER BY j.job_name",
                &[],
            )
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect();
        rows.iter()
            .all(|(_, s, _)| !matches!(s.as_str(), "queued" | "claimed" | "running"))
            .then_some(rows)
    });
    let took: Vec<(String, i64, i64)> = c
        .query(
            "SELECT j.job_name, r.started_at - $1, r.finished_at - $1 FROM job_run r
             JOIN job j USING (job_id) WHERE r.created_at = 0 ORDER BY j.job_name",
            &[&queued_at],
        )
        .unwrap()
        .iter()
        .map(|r| {
            let (s, f): (Option<i64>, Option<i64>) = (r.get(1), r.get(2));
            (r.get(0), s.unwrap_or(-1), f.unwrap_or(-1))
        })
        .collect();
    let (status, _) = crate::support::http_get(&node.api, "/healthz");
    let (anonymous, _) = crate::support::http_get(&node.api, "/api/v1/jobs");
    let token = node.token.clone().expect("a first admin token");
    let jobs = crate::support::api(&node.api, Some(&token), "GET", "/api/v1/jobs", None);
    let (api_status, api_body) = (jobs.status, jobs.body);
    assert_eq!(node.stop(), Some(0));
    figures(
        "scenario 10 fleet on postgres: seed and housekeeping",
        &[
            format!("seeded {seeded} jobs; one run of each: {ended:?}"),
            format!("started and finished, ms after they were queued: {took:?}"),
            format!(
                "/healthz: {status}; /api/v1/jobs: {anonymous} without a token, {api_status} with"
            ),
        ],
    );
    for (job, status, error) in &ended {
        if job == "catalog_backup" {
            assert_eq!(status, "failed");
            assert!(
                error.as_deref().unwrap_or("").contains("pg_dump"),
                "{error:?}"
            );
        } else {
            assert_eq!(status, "succeeded", "{job}: {error:?}");
        }
    }
    assert!(
        took.iter().all(|(_, _, f)| (0..10_000).contains(f)),
        "each ran within 10 s of being queued (one blocked by a busy object is woken within \
         a second of its end): {took:?}"
    );
    assert!(status.contains("200"), "{status}");
    assert!(anonymous.contains("401"), "{anonymous}");
    assert_eq!(api_status, 200, "{api_body}");
    let listed = serde_json::from_str::<serde_json::Value>(&api_body).unwrap();
    assert_eq!(listed["total"], seeded, "{api_body}");
}

/// An inbox on a node whose catalog is on PostgreSQL: each file becomes one run there, its key
/// recorded with it.
#[test]
fn an_inbox_on_a_postgres_node_queues_each_file_once() {
    let _one = serial();
    const FILES: i64 = 20;
    let Some((ws, db)) = fleet("pg_inbox", &job("take", "debug.noop", "")) else {
        return;
    };
    let inbox = ws.path("in");
    std::fs::create_dir_all(&inbox).unwrap();
    let cfg = ws.write(
        "node.toml",
        &format!(
            "[[inbox]]\npath = \"{}\"\njob = \"take\"\npattern = \"*.txt\"\n",
            inbox.display()
        ),
    );
    ws.set_node_env("JOBVISOR_CONFIG", &cfg.display().to_string());
    let node = ws.start_node("n1");
    for i in 0..FILES {
        std::fs::write(inbox.join(format!("f{i}.txt")), format!("file {i}")).unwrap();
    }
    let mut c = db.client();
    wait_for(60.0, "a run of each file to succeed", || {
        (succeeded(&mut c, "take") == FILES).then_some(())
    });
    assert_eq!(node.stop(), Some(0));
    let keys = count(
        &mut c,
        "SELECT count(*) FROM inbox_file f JOIN job_run r USING (run_id)",
    );
    let files: Vec<String> = c
        .query("SELECT params FROM job_run ORDER BY run_id", &[])
        .unwrap()
        .iter()
        .map(|r| {
            let p: serde_json::Value = serde_json::from_str(r.get::<_, &str>(0)).unwrap();
            p["file"].as_str().unwrap().to_string()
        })
        .collect();
    figures(
        "scenario 10 fleet on postgres: inbox",
        &[format!(
            "{FILES} files dropped into an inbox of a node on PostgreSQL: {} runs succeeded, \
             {keys} keys recorded with their runs",
            files.len()
        )],
    );
    assert_eq!(keys, FILES);
    let distinct: HashSet<&String> = files.iter().collect();
    assert_eq!(distinct.len(), FILES as usize, "{files:?}");
    assert_eq!(count(&mut c, "SELECT count(*) FROM job_run"), FILES);
}

/// A node on PostgreSQL runs a job of a remote processor: a JSON-RPC call to another node (on
/// a SQLite catalog here), the processor's address and credential read from PostgreSQL.
#[test]
fn a_postgres_node_runs_a_job_on_a_remote_processor() {
    let _one = serial();
    // Node B, whose API A's processor points at, and an operator's token made on it.
    let wb = Workspace::new();
    wb.ok(&["init"]);
    wb.disable_seeded_jobs();
    let b = wb.start_node("b");
    wb.ok(&["users", "add", "from-a", "--role", "operator"]);
    let token: serde_json::Value =
        serde_json::from_str(&wb.ok(&["--json", "tokens", "create", "from-a"])).unwrap();
    let token = token["token"].as_str().unwrap().to_string();
    let (host, port) = b
        .api
        .trim_start_matches("http://")
        .rsplit_once(':')
        .unwrap();
    let Some((ws, db)) = fleet(
        "pg_remote",
        &format!(
            "[processor.nodeb]\nip_address = \"{host}\"\nport = {port}\nrpc_password = \
             \"{token}\"\n[job.echo_on_b]\ntype = \"function\"\nprocessor = \"nodeb\"\n\
             payload = {{ function = \"debug.echo\", from = \"a\", open_params = [\"word\"] }}\n"
        ),
    ) else {
        return;
    };
    let a = ws.start_node("a");
    let mut c = db.client();
    c.execute(
        "INSERT INTO job_run (job_id, processor_id, status, run_after, created_at, params)
         SELECT job_id, processor_id, 'queued', 0, 0, '{\"word\": \"hi\"}' FROM job
         WHERE job_name = 'echo_on_b'",
        &[],
    )
    .unwrap();
    let (status, result): (String, Option<String>) =
        wait_for(30.0, "the remote run to end", || {
            let r = c
                .query_one("SELECT status, result FROM job_run", &[])
                .unwrap();
            let status: String = r.get(0);
            (!matches!(status.as_str(), "queued" | "claimed" | "running"))
                .then(|| (status, r.get(1)))
        });
    assert_eq!(a.stop(), Some(0));
    let on_b = crate::support::runs_of(&wb.db(), "rpc.debug.echo");
    assert_eq!(b.stop(), Some(0));
    figures(
        "scenario 10 fleet on postgres: remote processor",
        &[format!(
            "a run on a remote processor from a node on PostgreSQL: {status}, result {result:?}; \
             runs on the remote node {}",
            on_b.len()
        )],
    );
    assert_eq!(status, "succeeded", "{result:?}");
    let result: serde_json::Value = serde_json::from_str(&result.unwrap()).unwrap();
    assert_eq!(result, serde_json::json!({"from": "a", "word": "hi"}));
    assert_eq!(on_b.len(), 1);
}

/// A node on PostgreSQL records failures with their retries (the last attempt dead), a run
/// past its timeout as timed out, and runs one `forbid` job's runs one at a time.
#[test]
fn a_postgres_node_retries_times_out_and_holds_forbid() {
    let _one = serial();
    let Some((ws, db)) = fleet(
        "pg_outcomes",
        "[job.flaky]\ntype = \"function\"\nprocessor = \"wide\"\nmax_attempts = 3\n\
         backoff_base = 10\nbackoff_max = 20\npayload = { function = \"debug.fail\" }\n\
         [job.slow]\ntype = \"function\"\nprocessor = \"wide\"\ntimeout = 300\n\
         max_attempts = 1\npayload = { function = \"debug.sleep\", ms = 5000 }\n\
         [job.one]\ntype = \"function\"\nprocessor = \"wide\"\noverlap_policy = \"forbid\"\n\
         payload = { function = \"debug.sleep\", ms = 150 }\n",
    ) else {
        return;
    };
    let nodes = start(&ws, 2);
    let mut c = db.client();
    queue(&mut c, "flaky", 1);
    queue(&mut c, "slow", 1);
    queue(&mut c, "one", 6);
    wait_for(60.0, "every run to end", || {
        let open = count(
            &mut c,
            "SELECT count(*) FROM job_run WHERE status IN ('queued', 'claimed', 'running')",
        );
        let flaky = statuses(&mut c, "flaky").get("dead").copied().unwrap_or(0);
        (open == 0 && flaky == 1).then_some(())
    });
    for node in nodes {
        assert_eq!(node.stop(), Some(0));
    }
    let flaky: Vec<(i64, String)> = c
        .query(
            "SELECT r.attempt, r.status FROM job_run r JOIN job j USING (job_id)
             WHERE j.job_name = 'flaky' ORDER BY r.attempt",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let slow = statuses(&mut c, "slow");
    let spans: Vec<(i64, i64, Option<i64>)> = c
        .query(
            "SELECT r.started_at, r.finished_at, r.node_id FROM job_run r JOIN job j USING (job_id)
             WHERE j.job_name = 'one' ORDER BY r.started_at",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let overlaps = spans.windows(2).filter(|w| w[1].0 < w[0].1).count();
    let on: HashSet<Option<i64>> = spans.iter().map(|s| s.2).collect();
    figures(
        "scenario 10 fleet on postgres: outcomes",
        &[format!(
            "2 nodes: flaky's attempts {flaky:?}; slow (timeout 300 ms, sleeps 5 s) {slow:?}; \
             6 runs of a forbid job of 150 ms on nodes {on:?}, overlapping pairs {overlaps}"
        )],
    );
    assert_eq!(
        flaky,
        vec![
            (1, "failed".to_string()),
            (2, "failed".to_string()),
            (3, "dead".to_string())
        ]
    );
    assert_eq!(slow.get("timed_out"), Some(&1), "{slow:?}");
    assert_eq!(spans.len(), 6);
    assert_eq!(overlaps, 0, "forbid held across the two nodes: {spans:?}");
}

/// A workflow whose steps fan out and in: fetch → split (fetch's result as input) → a, b, c
/// (side by side) → join (their three results as inputs) → store.
const PIPE: &str = r#"[job.pipe]
type = "workflow"
processor = "wide"
payload.steps = [
    { name = "fetch", job = "nap" },
    { name = "split", job = "echo", after = ["fetch"], inputs = ["fetch"] },
    { name = "a", job = "nap", after = ["split"], params = { ms = 60 } },
    { name = "b", job = "nap", after = ["split"], params = { ms = 60 } },
    { name = "c", job = "nap", after = ["split"], params = { ms = 60 } },
    { name = "join", job = "echo", after = ["a", "b", "c"], inputs = ["a", "b", "c"] },
    { name = "store", job = "nap", after = ["join"] },
]
"#;

/// Each step's predecessors in [`PIPE`].
const AFTER: [(&str, &[&str]); 7] = [
    ("fetch", &[]),
    ("split", &["fetch"]),
    ("a", &["split"]),
    ("b", &["split"]),
    ("c", &["split"]),
    ("join", &["a", "b", "c"]),
    ("store", &["join"]),
];

/// A run of a workflow's tree as the ordering checks read it.
#[derive(Debug)]
struct TreeRun {
    pid: Option<i64>,
    step: Option<String>,
    status: String,
    created_at: i64,
    started_at: Option<i64>,
    finished_at: Option<i64>,
    node_id: Option<i64>,
    params: Option<String>,
}

#[test]
fn workflows_on_three_postgres_nodes_keep_every_step_order_and_end_once_with_their_last_step() {
    let _one = serial();
    const WORKFLOWS: usize = 40;
    let jobs = format!(
        "{}{}{PIPE}",
        job("nap", "debug.sleep", ", ms = 20"),
        job("echo", "debug.echo", "")
    );
    let Some((ws, db)) = fleet("pg_workflows", &jobs) else {
        return;
    };
    let nodes = start(&ws, 3);
    let mut c = db.client();
    wait_for(60.0, "the catalog to be seeded", || {
        (count(&mut c, "SELECT count(*) FROM job WHERE job_name = 'pipe'") == 1).then_some(())
    });
    // Triggered through the catalog, as the API and the CLI trigger: one transaction queues
    // each workflow's run and starts its tree (its first step queued).
    let catalog =
        jobvisor::catalog::PgCatalog::open(jobvisor::catalog::PgSettings::new(&db.url), "test")
            .unwrap();
    let params = (0..WORKFLOWS)
        .map(|i| Some(serde_json::json!({ "mail": i }).to_string()))
        .collect();
    let t0 = Instant::now();
    let roots = catalog
        .trigger("pipe", params, jobvisor::catalog::now_ms(), "test", None)
        .unwrap()
        .run_ids;
    drop(catalog);
    wait_for(120.0, "every workflow to end", || {
        let open: i64 = c
            .query_one(
                "SELECT count(*) FROM job_run WHERE run_id = ANY($1) AND finished_at IS NULL",
                &[&roots],
            )
            .unwrap()
            .get(0);
        (open == 0).then_some(())
    });
    let took = t0.elapsed();
    for node in nodes {
        assert_eq!(node.stop(), Some(0));
    }
    let rows: Vec<(i64, i64, TreeRun)> = c
        .query(
            "SELECT coalesce(stump, run_id), run_id, pid, step, status, created_at, started_at,
                finished_at, node_id, params
             FROM job_run WHERE run_id = ANY($1) OR stump = ANY($1) ORDER BY run_id",
            &[&roots],
        )
        .unwrap()
        .iter()
        .map(|r| {
            let run = TreeRun {
                pid: r.get(2),
                step: r.get(3),
                status: r.get(4),
                created_at: r.get(5),
                started_at: r.get(6),
                finished_at: r.get(7),
                node_id: r.get(8),
                params: r.get(9),
            };
            (r.get(0), r.get(1), run)
        })
        .collect();
    let mut trees: BTreeMap<i64, Vec<&TreeRun>> = BTreeMap::new();
    for (root, _, run) in &rows {
        trees.entry(*root).or_default().push(run);
    }
    assert_eq!(trees.len(), WORKFLOWS);
    let mut side_by_side = 0;
    let mut on_nodes = HashSet::new();
    for (root, runs) in &trees {
        let top = runs.iter().find(|r| r.pid.is_none()).unwrap();
        let steps: BTreeMap<&str, &TreeRun> = runs
            .iter()
            .filter_map(|r| Some((r.step.as_deref()?, *r)))
            .collect();
        assert_eq!(
            runs.len(),
            1 + AFTER.len(),
            "workflow {root}: one run a step: {runs:#?}"
        );
        assert_eq!(steps.len(), AFTER.len(), "workflow {root}: {runs:#?}");
        assert_eq!(top.status, "succeeded", "workflow {root}");
        for (name, after) in AFTER {
            let s = steps[name];
            assert_eq!(s.status, "succeeded", "workflow {root}: step {name}");
            on_nodes.insert(s.node_id);
            let started = s.started_at.unwrap();
            // Queued by a predecessor's completion (stamped with that run's end: the one
            // whose success was the last recorded, not always the last to end), or with the
            // workflow's run; started only once every predecessor had ended.
            let ends: Vec<i64> = after
                .iter()
                .map(|p| steps[*p].finished_at.unwrap())
                .collect();
            if ends.is_empty() {
                assert_eq!(
                    s.created_at, top.created_at,
                    "workflow {root}: {name} queued"
                );
            } else {
                assert!(
                    ends.contains(&s.created_at),
                    "workflow {root}: step {name} queued at {} but not by a predecessor's \
                     end {ends:?}",
                    s.created_at
                );
            }
            let last_end = ends.iter().copied().max().unwrap_or(top.created_at);
            assert!(
                started >= last_end,
                "workflow {root}: step {name} started at {started}, before {last_end}"
            );
        }
        assert_eq!(
            top.finished_at, steps["store"].finished_at,
            "workflow {root} ended with its last step"
        );
        let inputs: serde_json::Value =
            serde_json::from_str(steps["join"].params.as_deref().unwrap()).unwrap();
        assert_eq!(
            inputs["inputs"].as_object().map(|o| o.len()),
            Some(3),
            "join takes a's, b's and c's results: {inputs}"
        );
        let split: serde_json::Value =
            serde_json::from_str(steps["split"].params.as_deref().unwrap()).unwrap();
        assert_eq!(split["inputs"]["fetch"]["slept_ms"], 20, "{split}");
        assert_eq!(
            split["mail"], inputs["mail"],
            "the workflow's own parameters"
        );
        let spans: Vec<(i64, i64)> = ["a", "b", "c"]
            .iter()
            .map(|s| {
                (
                    steps[*s].started_at.unwrap(),
                    steps[*s].finished_at.unwrap(),
                )
            })
            .collect();
        let latest_start = spans.iter().map(|s| s.0).max().unwrap();
        let earliest_end = spans.iter().map(|s| s.1).min().unwrap();
        side_by_side += usize::from(latest_start < earliest_end);
    }
    let (claimed, recorded) = bookkeeping(&mut c, "nap");
    let naps = (5 * WORKFLOWS) as i64;
    let back = given_back(&ws, &["n1", "n2", "n3"]);
    let stale = count(&mut c, "SELECT sum(stale_completions)::bigint FROM node");
    let errors = error_lines(&ws, &["n1", "n2", "n3"]);
    figures(
        "scenario 10 fleet on postgres: workflows",
        &[
            format!(
                "{WORKFLOWS} workflows of 7 steps (fetch → split → a, b, c side by side → join → \
                 store) on 3 nodes, triggered in one transaction: all ended in {:.1} s; steps \
                 run by {} nodes; the fan-out ran side by side in {side_by_side} of them",
                took.as_secs_f64(),
                on_nodes.len()
            ),
            format!(
                "each step queued by a predecessor's completion and started after the last \
                 one's end; each workflow ended with its last step; nap claims {claimed}, completions recorded \
                 {recorded:?} ({naps} runs); claimed runs returned unstarted {back}; stale \
                 completions {stale}; ERROR lines {}",
                errors.len()
            ),
        ],
    );
    // A claimed run returned unstarted is claimed again, and ended once more on the tallies.
    assert_eq!(
        claimed,
        naps + back,
        "each step claimed once, or again once returned"
    );
    assert_eq!(
        recorded.values().sum::<i64>(),
        naps + back,
        "each step recorded once"
    );
    assert_eq!(stale, 0);
    assert!(on_nodes.len() >= 2, "the steps ran on {on_nodes:?}");
    assert!(side_by_side > 0, "the fan-out never ran side by side");
    assert!(errors.is_empty(), "{errors:#?}");
}
