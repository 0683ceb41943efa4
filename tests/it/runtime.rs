//! The actor runtime end to end: real `jobvisor run` processes on temporary catalogs.

use crate::support::{Workspace, http_get, wait_for};

/// A catalog with two processors and two objects; each test appends its jobs.
const BASE: &str = r#"
[processor.main]
instances = 1

[processor.wide]
instances = 4

[object.a]

[object.b]
"#;

crate::on_both_backends!(
    run_always_starts_run_delay_after_the_previous_end,
    a_command_past_its_timeout_is_timed_out_and_its_process_group_killed,
    a_failing_function_is_retried_with_growing_delays_then_dead,
    jobs_writing_one_object_never_overlap_others_run_concurrently,
    a_cron_job_fires_once_per_slot,
    a_second_process_with_the_same_node_name_is_refused,
    a_crashed_node_requeues_its_runs_at_the_next_start,
    a_node_killed_mid_drain_loses_no_run_and_records_none_twice,
    sigterm_lets_short_jobs_finish_and_requeues_long_ones,
    sql_url_and_builtin_jobs_do_their_work,
    a_run_waiting_for_a_free_instance_reads_claimed_not_running,
);

fn workspace(ws: Workspace, jobs: &str) -> Workspace {
    let file = ws.write("jobs.conf", &format!("{BASE}{jobs}"));
    ws.ok(&["import", &file.display().to_string()]);
    ws.disable_seeded_jobs();
    ws
}

fn run_always_starts_run_delay_after_the_previous_end(ws: Workspace) {
    let ws = workspace(
        ws,
        r#"
[job.always]
type = "function"
processor = "main"
run_always = true
run_delay = 200
payload = { function = "debug.sleep", ms = 30 }
"#,
    );
    let node = ws.start_node("n1");
    let done = wait_for(10.0, "5 runs", || {
        let r: Vec<_> = ws
            .runs_of("always")
            .into_iter()
            .filter(|r| r.status == "succeeded")
            .collect();
        (r.len() >= 5).then_some(r)
    });
    assert_eq!(node.stop(), Some(0));
    let gaps: Vec<i64> = done
        .windows(2)
        .map(|p| p[1].started_at.unwrap() - p[0].finished_at.unwrap())
        .collect();
    println!("run_always, run_delay 200: end-to-start gaps {gaps:?} ms");
    for pair in done.windows(2) {
        let gap = pair[1].started_at.unwrap() - pair[0].finished_at.unwrap();
        assert!(
            gap >= 200,
            "run {} started {gap} ms after run {} ended",
            pair[1].run_id,
            pair[0].run_id
        );
        assert!(
            gap < 1200,
            "run {} waited {gap} ms; run_delay is 200",
            pair[1].run_id
        );
    }
    let slots: std::collections::HashSet<_> = done.iter().map(|r| r.scheduled_for).collect();
    assert_eq!(slots.len(), done.len(), "each run has its own slot");
}

/// Whether `pid` is a live process. A zombie (killed, waiting for its new parent — init — to
/// reap it) holds no resources and counts as gone.
fn proc_exists(pid: i64) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rsplit_once(") ")
        .and_then(|(_, rest)| rest.chars().next());
    !matches!(state, Some('Z' | 'X') | None)
}

fn a_command_past_its_timeout_is_timed_out_and_its_process_group_killed(ws: Workspace) {
    let ws = workspace(
        ws,
        r#"
[job.sleeper]
type = "command"
processor = "main"
timeout = 300
payload = { argv = ["sleep", "30"] }

[job.tree]
type = "command"
processor = "wide"
timeout = 300
payload = { argv = ["/bin/sh", "-c", "sleep 30 & echo child=$!; wait"] }
"#,
    );
    let node = ws.start_node("n1");
    ws.ok(&["jobs", "run", "sleeper"]);
    ws.ok(&["jobs", "run", "tree"]);
    let finished = wait_for(10.0, "both runs to finish", || {
        let r: Vec<_> = ws
            .runs()
            .into_iter()
            .filter(|r| r.finished_at.is_some())
            .collect();
        (r.len() == 2).then_some(r)
    });
    assert_eq!(node.stop(), Some(0));
    for run in finished {
        assert_eq!(run.status, "timed_out", "{run:?}");
        let elapsed = run.finished_at.unwrap() - run.started_at.unwrap();
        println!(
            "{}: timed_out recorded {elapsed} ms after start (timeout 300 ms)",
            run.job
        );
        assert!(
            (300..1000).contains(&elapsed),
            "{}: recorded after {elapsed} ms",
            run.job
        );
        let log = run.log.clone().unwrap_or_default();
        let pid: i64 = log
            .strip_prefix("[pid ")
            .and_then(|l| l.split(']').next())
            .and_then(|p| p.parse().ok())
            .expect("pid in log");
        assert!(!proc_exists(pid), "{}: process {pid} still exists", run.job);
        if run.job == "tree" {
            let child: i64 = log
                .split("child=")
                .nth(1)
                .and_then(|l| l.split_whitespace().next())
                .and_then(|p| p.parse().ok())
                .expect("grandchild pid");
            assert!(
                !proc_exists(child),
                "grandchild {child} survived the timeout"
            );
        }
    }
}

fn a_failing_function_is_retried_with_growing_delays_then_dead(ws: Workspace) {
    let ws = workspace(
        ws,
        r#"
[job.flaky]
type = "function"
processor = "main"
max_attempts = 4
backoff_base = 100
backoff_max = 10000
payload = { function = "debug.fail", message = "boom" }
"#,
    );
    let node = ws.start_node("n1");
    ws.ok(&["jobs", "run", "flaky"]);
    let attempts = wait_for(15.0, "a dead run", || {
        let r = ws.runs_of("flaky");
        r.iter().any(|r| r.status == "dead").then_some(r)
    });
    assert_eq!(node.stop(), Some(0));
    let statuses: Vec<&str> = attempts.iter().map(|r| r.status.as_str()).collect();
    assert_eq!(statuses, ["failed", "failed", "failed", "dead"]);
    assert_eq!(
        attempts.iter().map(|r| r.attempt).collect::<Vec<_>>(),
        [1, 2, 3, 4]
    );
    let first = attempts[0].run_id;
    assert!(attempts[1..].iter().all(|r| r.retry_of == Some(first)));
    assert!(attempts.iter().all(|r| r.error.as_deref() == Some("boom")));
    let delays: Vec<i64> = attempts
        .windows(2)
        .map(|w| w[1].started_at.unwrap() - w[0].finished_at.unwrap())
        .collect();
    println!("retry delays (backoff_base 100 ms): {delays:?} ms");
    // Equal jitter: attempt n waits between half and all of 100 ms × 2^(n-1).
    assert!(delays[0] >= 50, "{delays:?}");
    assert!(
        delays[1] >= delays[0] && delays[2] >= delays[1] && delays[2] > delays[0],
        "delays do not grow: {delays:?}"
    );
}

fn jobs_writing_one_object_never_overlap_others_run_concurrently(ws: Workspace) {
    let ws = workspace(
        ws,
        r#"
[job.a1]
type = "function"
processor = "wide"
objects = ["a"]
run_always = true
run_delay = 10
payload = { function = "debug.sleep", ms = 150 }

[job.a2]
type = "function"
processor = "wide"
objects = ["a"]
run_always = true
run_delay = 10
payload = { function = "debug.sleep", ms = 150 }

[job.b1]
type = "function"
processor = "wide"
objects = ["b"]
run_always = true
run_delay = 10
payload = { function = "debug.sleep", ms = 150 }
"#,
    );
    let node = ws.start_node("n1");
    wait_for(15.0, "4 runs of each job", || {
        let r: Vec<_> = ws
            .runs()
            .into_iter()
            .filter(|r| r.status == "succeeded")
            .collect();
        ["a1", "a2", "b1"]
            .iter()
            .all(|j| r.iter().filter(|x| x.job == *j).count() >= 4)
            .then_some(())
    });
    assert_eq!(node.stop(), Some(0));
    let done: Vec<_> = ws
        .runs()
        .into_iter()
        .filter(|r| r.status == "succeeded")
        .collect();
    let span = |r: &crate::support::Run| (r.started_at.unwrap(), r.finished_at.unwrap());
    let on_a: Vec<_> = done.iter().filter(|r| r.job != "b1").map(span).collect();
    for (i, x) in on_a.iter().enumerate() {
        for y in &on_a[i + 1..] {
            assert!(
                x.1 <= y.0 || y.1 <= x.0,
                "runs writing object a overlap: {x:?} {y:?}"
            );
        }
    }
    let b: Vec<_> = done.iter().filter(|r| r.job == "b1").map(span).collect();
    let concurrent = on_a
        .iter()
        .any(|x| b.iter().any(|y| x.0 < y.1 && y.0 < x.1));
    let overlapping = on_a
        .iter()
        .filter(|x| b.iter().any(|y| x.0 < y.1 && y.0 < x.1))
        .count();
    println!(
        "object a: {} runs, pairwise disjoint; {overlapping} of them overlapped a run on object b",
        on_a.len()
    );
    assert!(
        concurrent,
        "a job on object b never ran while one on object a did"
    );
}

fn a_cron_job_fires_once_per_slot(ws: Workspace) {
    let ws = workspace(
        ws,
        r#"
[job.tick]
type = "function"
processor = "main"
cron = "* * * * * *"
payload = { function = "debug.noop" }
"#,
    );
    let node = ws.start_node("n1");
    let done = wait_for(10.0, "3 runs", || {
        let r: Vec<_> = ws
            .runs_of("tick")
            .into_iter()
            .filter(|r| r.status == "succeeded")
            .collect();
        (r.len() >= 3).then_some(r)
    });
    assert_eq!(node.stop(), Some(0));
    for pair in done.windows(2) {
        let (a, b) = (
            pair[0].scheduled_for.unwrap(),
            pair[1].scheduled_for.unwrap(),
        );
        assert_eq!(a % 1000, 0);
        assert!(b > a, "slots must increase: {a} {b}");
    }
    for r in &done {
        let late = r.started_at.unwrap() - r.scheduled_for.unwrap();
        assert!(
            (0..500).contains(&late),
            "run {} started {late} ms after its slot",
            r.run_id
        );
    }
}

fn a_second_process_with_the_same_node_name_is_refused(ws: Workspace) {
    let ws = workspace(ws, "");
    let node = ws.start_node("same");
    let (status, body) = http_get(&node.api, "/healthz");
    assert!(status.contains("200"), "{status}");
    assert!(body.contains("ok"), "{body}");
    let refused = ws
        .try_start_node("same")
        .err()
        .expect("the second node must not start");
    assert!(refused.contains("exit Some(75)"), "{refused}");
    assert!(
        refused.contains(&format!("pid {}", node.child.id())),
        "{refused}"
    );
    // Another name on the same catalog is fine.
    let other = ws.start_node("other");
    assert_eq!(other.stop(), Some(0));
    assert_eq!(node.stop(), Some(0));
}

fn a_crashed_node_requeues_its_runs_at_the_next_start(ws: Workspace) {
    let ws = workspace(
        ws,
        r#"
[job.long]
type = "command"
processor = "main"
payload = { argv = ["sleep", "0.8"] }
"#,
    );
    let node = ws.start_node("n1");
    ws.ok(&["jobs", "run", "long"]);
    wait_for(5.0, "the run to start", || {
        ws.runs_of("long")
            .iter()
            .any(|r| r.status == "running")
            .then_some(())
    });
    node.crash();
    assert_eq!(ws.runs_of("long")[0].status, "running");
    let node = ws.start_node("n1");
    let done = wait_for(10.0, "the run to succeed", || {
        let r = ws.runs_of("long");
        (r[0].status == "succeeded").then_some(r)
    });
    assert_eq!(node.stop(), Some(0));
    assert_eq!(
        done.len(),
        1,
        "one run, executed again, recorded once: {done:?}"
    );
}

/// A node killed in the middle of a 50,000-run drain (batched claims, group commit) loses no
/// run and records none twice: after a restart every run has succeeded, each run recorded
/// before the kill kept its result (same claim token, same end), and the job's in-progress
/// count is back at 0.
fn a_node_killed_mid_drain_loses_no_run_and_records_none_twice(ws: Workspace) {
    const N: i64 = 50_000;
    let ws = workspace(
        ws,
        r#"
[job.noop]
type = "function"
processor = "wide"
overlap_policy = "allow"
max_overlap = 1000000
payload = { function = "debug.noop" }
"#,
    );
    let conn = ws.catalog();
    ws.queue_runs("noop", N);
    let succeeded = |conn: &crate::support::TestDb| -> Vec<(i64, i64, i64)> {
        conn.rows(
            "SELECT run_id, claim_token, finished_at FROM job_run
             WHERE status = 'succeeded' ORDER BY run_id",
        )
        .iter()
        .map(|r| {
            (
                r[0].as_i64().unwrap(),
                r[1].as_i64().unwrap(),
                r[2].as_i64().unwrap(),
            )
        })
        .collect()
    };
    let node = ws.start_node("n1");
    wait_for(30.0, "a part of the drain", || {
        (succeeded(&conn).len() >= 1000).then_some(())
    });
    node.crash();
    let before = succeeded(&conn);
    assert!(
        (before.len() as i64) < N,
        "the kill came mid-drain ({} done)",
        before.len()
    );
    let node = ws.start_node("n1");
    let after = wait_for(60.0, "every run to succeed", || {
        let done = succeeded(&conn);
        (done.len() as i64 == N).then_some(done)
    });
    assert_eq!(node.stop(), Some(0));
    let total = conn.count("SELECT count(*) FROM job_run");
    assert_eq!(total, N, "no run added or lost");
    let kept = after
        .iter()
        .filter(|r| before.binary_search(r).is_ok())
        .count();
    assert_eq!(
        kept,
        before.len(),
        "results recorded before the kill were kept as they were"
    );
    assert_eq!(conn.in_progress("noop"), 0);
}

/// SIGTERM stops claims at once, lets a running job finish within the grace period, and
/// returns a job still running at its end to the queue. `short` runs until the test creates a
/// file, after the signal: the test does not depend on how fast the node starts either run.
fn sigterm_lets_short_jobs_finish_and_requeues_long_ones(ws: Workspace) {
    let go = ws.path("go");
    let file = ws.write(
        "jobs.conf",
        &format!(
            r#"{BASE}
[job.short]
type = "command"
processor = "wide"
payload = {{ argv = ["sh", "-c", "while [ ! -e '{}' ]; do sleep 0.02; done"] }}

[job.long]
type = "command"
processor = "wide"
payload = {{ argv = ["sleep", "30"] }}
"#,
            go.display()
        ),
    );
    ws.ok(&["import", &file.display().to_string()]);
    ws.disable_seeded_jobs();
    let node = ws.start_node("n1");
    ws.ok(&["jobs", "run", "short"]);
    ws.ok(&["jobs", "run", "long"]);
    wait_for(10.0, "both running", || {
        (ws.runs().iter().filter(|r| r.status == "running").count() == 2).then_some(())
    });
    let t0 = std::time::Instant::now();
    let mut node = node;
    // SAFETY: signalling our own child process.
    unsafe {
        libc::kill(node.child.id() as i32, libc::SIGTERM);
    }
    // The node is stopping; `short` may still finish within the grace period (2 s in tests).
    std::thread::sleep(std::time::Duration::from_millis(300));
    std::fs::write(&go, "").unwrap();
    assert_eq!(node.child.wait().unwrap().code(), Some(0));
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(6),
        "shutdown took {:?}",
        t0.elapsed()
    );
    let after = ws.runs();
    let short = after.iter().find(|r| r.job == "short").unwrap();
    let long = after.iter().find(|r| r.job == "long").unwrap();
    assert_eq!(short.status, "succeeded", "{short:?}");
    assert_eq!(long.status, "queued", "{long:?}");
    assert!(long.started_at.is_none());
}

/// Serves one HTTP request on a free loopback port with `body`; returns the port.
fn one_shot_http(status: &'static str, body: &'static str) -> u16 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        if let Ok((mut stream, _)) = listener.accept() {
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let reply = format!(
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(reply.as_bytes());
        }
    });
    port
}

fn sql_url_and_builtin_jobs_do_their_work(ws: Workspace) {
    let data = ws.path("events.db");
    crate::support::open_db(&data)
        .execute_batch("CREATE TABLE events (id INTEGER PRIMARY KEY, at INTEGER, v INTEGER)")
        .unwrap();
    let ok_port = one_shot_http("200 OK", "{\"pong\":true}");
    let bad_port = one_shot_http("503 Service Unavailable", "down");
    let conf = format!(
        r#"
[processor.main]
instances = 2

[object.events]
conn_string = "{data}"
name_field = "at"
time_to_live = 60
allow_prune = true

[job.insert]
type = "sql"
processor = "main"
objects = ["events"]
payload = {{ sql = "INSERT INTO events (at, v) VALUES (?1, ?2)", object = "events", params = [0, 7] }}

[job.count]
type = "sql"
processor = "main"
payload = {{ sql = "SELECT count(*) AS n FROM events", object = "events" }}

[job.ping]
type = "url"
processor = "main"
timeout = 5000
payload = {{ url = "http://127.0.0.1:{ok_port}/ping", method = "GET" }}

[job.ping_down]
type = "url"
processor = "main"
timeout = 5000
payload = {{ url = "http://127.0.0.1:{bad_port}/ping" }}
"#,
        data = data.display()
    );
    let file = ws.write("jobs.conf", &conf);
    ws.ok(&["import", &file.display().to_string()]);
    let node = ws.start_node("n1");
    let builtins = [
        "job_state_reset",
        "device_stats",
        "object_record_count",
        "object_prune",
        "run_history_prune",
        "db_maintenance",
        "catalog_backup",
    ];
    for job in ["insert", "ping", "ping_down"]
        .iter()
        .chain(builtins.iter())
    {
        ws.ok(&["jobs", "run", job]);
    }
    let mine: Vec<&str> = ["insert", "ping", "ping_down"]
        .into_iter()
        .chain(builtins)
        .collect();
    // Scheduled runs of the seeded jobs may come too; only the triggered ones are awaited.
    let triggered = |r: &Vec<crate::support::Run>| {
        r.iter()
            .filter(|r| r.scheduled_for.is_none() && mine.contains(&r.job.as_str()))
            .count()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let r = ws.runs();
        if triggered(&r) == mine.len()
            && r.iter()
                .filter(|r| r.scheduled_for.is_none())
                .all(|r| r.finished_at.is_some())
        {
            break;
        }
        if std::time::Instant::now() > deadline {
            let log = std::fs::read_to_string(ws.path("n1.log")).unwrap_or_default();
            panic!("runs did not finish: {r:#?}\n{log}");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    ws.ok(&["jobs", "run", "count"]);
    let all = wait_for(10.0, "the count", || {
        let r: Vec<_> = ws
            .runs()
            .into_iter()
            .filter(|r| r.scheduled_for.is_none())
            .collect();
        (r.len() == 11 && r.iter().all(|r| r.finished_at.is_some())).then_some(r)
    });
    assert_eq!(node.stop(), Some(0));
    let conn = ws.catalog();
    let result = |job: &str| -> serde_json::Value {
        let sql = "SELECT coalesce(r.result, r.error) FROM job_run r JOIN job j USING (job_id)
                 WHERE j.job_name = '{job}' AND r.scheduled_for IS NULL";
        let text = conn.rows(&sql.replace("{job}", job))[0][0]
            .as_str()
            .unwrap()
            .to_string();
        serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text))
    };
    // A PostgreSQL catalog is backed up with the server's tools.
    let on_postgres = ws.pg.is_some();
    let status = |job: &str| all.iter().find(|r| r.job == job).unwrap().status.clone();
    for job in ["insert", "count", "ping"].iter().chain(builtins.iter()) {
        if on_postgres && *job == "catalog_backup" {
            assert_eq!(status(job), "failed");
            assert!(result(job).as_str().unwrap().contains("pg_dump"));
            continue;
        }
        assert_eq!(status(job), "succeeded", "{job}: {}", result(job));
    }
    assert_eq!(result("insert")["changes"], 1);
    // The row was inserted at `at = 0`, older than the 60 s time to live: pruned, unless the
    // count ran before the prune. Either way the count saw a consistent table.
    assert_eq!(
        result("object_prune")["events"]["deleted"]
            .as_i64()
            .unwrap_or(-1)
            + result("count")["rows"][0][0].as_i64().unwrap(),
        1
    );
    assert_eq!(result("ping")["status"], 200);
    assert_eq!(result("ping")["body"]["pong"], true);
    assert_eq!(status("ping_down"), "failed");
    assert!(
        result("ping_down").as_str().unwrap().contains("503"),
        "{}",
        result("ping_down")
    );
    if !on_postgres {
        let backup = result("catalog_backup")["backup"]
            .as_str()
            .unwrap()
            .to_string();
        let copy = crate::support::open_db(&backup);
        let jobs: i64 = copy
            .query_row("SELECT count(*) FROM job", [], |r| r.get(0))
            .unwrap();
        assert!(jobs >= 11, "the backup holds the catalog: {jobs} jobs");
    }
    let stats = conn.count(
        "SELECT count(*) FROM stat JOIN stat_type USING (stat_type_id)
         WHERE stat_type IN ('device.cpu_used', 'object.record_count')",
    );
    assert!(stats >= 2, "device and object stats recorded");
    // The sql jobs never touched the catalog: `events` exists only in the object's own file.
    let in_catalog = conn.count(if on_postgres {
        "SELECT count(*) FROM pg_tables WHERE tablename = 'events'"
    } else {
        "SELECT count(*) FROM sqlite_master WHERE name = 'events'"
    });
    assert_eq!(in_catalog, 0);
}

/// Issue 27, point 2: on a one-instance processor busy with a long run, runs that wait for the
/// instance were shown `running` with a start time (the node had claimed them ahead). Now the
/// catalog, the CLI, the API and the metrics agree: only the started run reads `running` and
/// has a start time; a run waiting reads `queued`, or `claimed` with its node and claim time.
/// Cancelling a claimed run ends it with no start time.
fn a_run_waiting_for_a_free_instance_reads_claimed_not_running(ws: Workspace) {
    let ws = workspace(
        ws,
        r#"
[job.long]
type = "command"
processor = "main"
payload = { argv = ["sleep", "30"] }

[job.quick]
type = "function"
processor = "main"
overlap_policy = "allow"
max_overlap = 5
payload = { function = "debug.noop" }
"#,
    );
    let mut node = ws.start_node("n1");
    let token = node.token.clone().unwrap();
    ws.ok(&["jobs", "run", "long"]);
    wait_for(10.0, "the long run to start", || {
        ws.runs_of("long")
            .into_iter()
            .find(|r| r.status == "running" && r.started_at.is_some())
    });
    ws.ok(&["jobs", "run", "quick"]);
    ws.ok(&["jobs", "run", "quick"]);
    let queued_at = std::time::Instant::now();
    // The node may claim the waiting runs ahead of a free instance (it did, and showed them
    // running): give it the time to, then every face must tell them apart from the one running.
    let waiting = wait_for(10.0, "the quick runs claimed or given time to be", || {
        let quick = ws.runs_of("quick");
        let claimed = quick.iter().all(|r| r.status == "claimed");
        // Or it claims no more than it can start: they stay queued.
        let waited = queued_at.elapsed() > std::time::Duration::from_secs(1);
        (claimed || waited).then_some(quick)
    });
    assert_eq!(waiting.len(), 2, "{waiting:?}");
    for r in &waiting {
        assert!(
            r.status == "claimed" || r.status == "queued",
            "a run waiting for the instance: {r:?}"
        );
        assert_eq!(r.started_at, None, "no start time before it starts: {r:?}");
    }
    // The CLI's filter and the API's list count only the started run.
    let cli: serde_json::Value =
        serde_json::from_str(&ws.ok(&["runs", "list", "--status", "running", "--json"])).unwrap();
    let names: Vec<&str> = cli
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["job"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["long"], "{cli}");
    let api = crate::support::api(
        &node.api,
        Some(&token),
        "GET",
        "/api/v1/runs?status=running",
        None,
    );
    assert_eq!(api.status, 200, "{}", api.body);
    let listed = api.json();
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    let claimed = crate::support::api(
        &node.api,
        Some(&token),
        "GET",
        "/api/v1/runs?status=claimed",
        None,
    );
    assert_eq!(claimed.status, 200, "{}", claimed.body);
    for r in claimed.json().as_array().unwrap() {
        assert!(r["started_at"].is_null(), "{r}");
        assert_eq!(r["node"], "n1", "{r}");
        assert!(r["claimed_at"].is_string(), "{r}");
    }
    let metrics = crate::support::api(&node.api, Some(&token), "GET", "/metrics", None);
    assert!(
        metrics.body.lines().any(|l| l == "jobvisor_running_runs 1"),
        "{}",
        metrics.body
    );
    // A waiting run cancelled ends with no start time.
    let first = waiting[0].run_id.to_string();
    ws.ok(&["runs", "cancel", &first]);
    let cancelled = wait_for(10.0, "the waiting run cancelled", || {
        ws.runs_of("quick")
            .into_iter()
            .find(|r| r.run_id == waiting[0].run_id && r.status == "cancelled")
    });
    assert_eq!(cancelled.started_at, None, "{cancelled:?}");
    // SAFETY: signalling our own child process; its long run goes back to the queue.
    unsafe { libc::kill(node.child.id() as i32, libc::SIGKILL) };
    let _ = node.child.wait();
    std::mem::forget(node);
}
