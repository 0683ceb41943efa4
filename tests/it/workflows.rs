//! Workflows and job trees on an embedded engine (issue 14): the example mail pipeline
//! (`examples/mail/`) triggered 100 times at once, a failure in one branch and its retry, and a
//! tree of 1,000 runs spawned by a function; and the same through a real node's faces. Each runs
//! on both backends, and keeps its figures in `target/tmp/flow/<test>.txt` on SQLite,
//! `<test>.postgres.txt` on PostgreSQL (`.ci/test` prints them: libtest hides a passing test's
//! output).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use jobvisor::jobconf::toml_format;
use jobvisor::runtime::{Engine, EngineBuilder};
use jobvisor::sim::SimRng;
use serde_json::json;

use crate::support::{CatalogAt, TestDb, Workspace};

crate::on_both_backends!(
    one_hundred_concurrent_mail_workflows_hold_every_ordering_constraint,
    a_failure_in_links_skips_strip_and_index_but_not_headers_and_geolocate_and_retry_completes_it,
    a_tree_of_1000_runs_ends_with_its_last_descendant_and_a_failure_anywhere_fails_its_root,
    children_spawned_over_the_api_and_rpc_join_the_tree_and_a_cancelled_workflow_kills_its_command,
    an_embedded_engine_spawns_children_and_runs_a_workflow_through_its_writer,
);

/// The example pipeline's functions (also used by `inbox`).
#[path = "../../examples/mail/functions.rs"]
pub mod mail;

const MAIL_CONF: &str = include_str!("../../examples/mail/job.conf");

/// Prints a test's figures and keeps them in `target/tmp/flow/<name>.txt` (on PostgreSQL,
/// `<name>.postgres.txt`, so that both backends' are kept).
pub fn figures(ws: &Workspace, name: &str, lines: &[String]) {
    let name = match ws.pg {
        Some(_) => format!("{name}.postgres"),
        None => name.to_string(),
    };
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("flow");
    std::fs::create_dir_all(&dir).unwrap();
    let text: String = lines.iter().map(|l| format!("{name}: {l}\n")).collect();
    eprint!("{text}");
    std::fs::write(dir.join(format!("{name}.txt")), text).unwrap();
}

/// Imports `conf` into the workspace's catalog and runs `body` with an engine started from
/// `builder` (functions registered) inside a System of the test's own.
fn with_engine<F, Fut>(ws: &Workspace, conf: &str, builder: EngineBuilder, body: F)
where
    F: FnOnce(Engine) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    ws.import_conf(conf);
    let mut cfg = ws.engine_config();
    cfg.policy.priority_floor = i64::MIN;
    // Only the test's jobs: the default catalog is not seeded into an imported one.
    actix_rt::System::new().block_on(async move {
        let engine = builder.config(cfg).node_name("flow").start().unwrap();
        body(engine.clone()).await;
        engine.shutdown(Duration::from_secs(5)).await.unwrap();
    });
}

/// One run as the ordering checks read it.
#[derive(Debug, Clone)]
struct StepRun {
    run_id: i64,
    pid: Option<i64>,
    step: Option<String>,
    status: String,
    started_at: Option<i64>,
    finished_at: Option<i64>,
    retry_of: Option<i64>,
    stump: Option<i64>,
}

/// Every run, by run id.
fn tree_rows(db: &TestDb) -> Vec<StepRun> {
    let int = |v: &serde_json::Value| v.as_i64();
    let text = |v: &serde_json::Value| v.as_str().map(String::from);
    db.rows(
        "SELECT run_id, pid, step, status, started_at, finished_at, retry_of, stump
         FROM job_run ORDER BY run_id",
    )
    .iter()
    .map(|r| StepRun {
        run_id: int(&r[0]).unwrap(),
        pid: int(&r[1]),
        step: text(&r[2]),
        status: text(&r[3]).unwrap(),
        started_at: int(&r[4]),
        finished_at: int(&r[5]),
        retry_of: int(&r[6]),
        stump: int(&r[7]),
    })
    .collect()
}

/// The example workflow's edges: (predecessor, step).
fn mail_edges() -> Vec<(String, String)> {
    let file = toml_format::parse(MAIL_CONF).unwrap();
    let spec =
        jobvisor::jobconf::workflow::WorkflowSpec::parse(&file.jobs["mail"].payload.map()).unwrap();
    spec.steps
        .iter()
        .flat_map(|s| s.after.iter().map(|a| (a.clone(), s.name.clone())))
        .collect()
}

/// Waits (polling the catalog) until every run in `roots` has ended.
async fn roots_ended(db: &CatalogAt, roots: &[i64], secs: u64) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let rows = db.read(tree_rows).await;
        let open = rows
            .iter()
            .filter(|r| roots.contains(&r.run_id) && r.finished_at.is_none())
            .count();
        if open == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{open} of {} workflows not ended after {secs} s",
            roots.len()
        );
        actix_rt::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Writes `n` sample mails into the workspace; their paths.
fn mails(ws: &Workspace, n: usize, tag: &str) -> Vec<String> {
    let dir = ws.path("mails");
    std::fs::create_dir_all(&dir).unwrap();
    (0..n)
        .map(|i| {
            let path = dir.join(format!("{tag}{i}.eml"));
            std::fs::write(&path, mail::sample(i)).unwrap();
            path.display().to_string()
        })
        .collect()
}

fn one_hundred_concurrent_mail_workflows_hold_every_ordering_constraint(ws: Workspace) {
    let paths = mails(&ws, 100, "m");
    let (db2, data) = (ws.catalog_at(), ws.path("data"));
    let builder = mail::register(Engine::builder());
    let took = Arc::new(std::sync::Mutex::new(Duration::ZERO));
    let took2 = took.clone();
    with_engine(&ws, MAIL_CONF, builder, |engine| async move {
        let t0 = Instant::now();
        let params = paths.iter().map(|p| Some(json!({ "path": p }))).collect();
        let roots = engine.trigger_many("mail", params).await.unwrap();
        roots_ended(&db2, &roots, 120).await;
        *took2.lock().unwrap() = t0.elapsed();
    });
    let rows = tree_rows(&ws.catalog());
    let roots: Vec<&StepRun> = rows.iter().filter(|r| r.pid.is_none()).collect();
    assert_eq!(roots.len(), 100);
    let edges = mail_edges();
    let (mut checked, mut violations, mut gaps) = (0, Vec::new(), Vec::new());
    let mut concurrent_max = 0;
    for root in &roots {
        assert_eq!(root.status, "succeeded", "workflow {}", root.run_id);
        let steps: HashMap<&str, &StepRun> = rows
            .iter()
            .filter(|r| r.pid == Some(root.run_id))
            .map(|r| (r.step.as_deref().unwrap(), r))
            .collect();
        assert_eq!(steps.len(), 7, "every step ran once: {:?}", steps.keys());
        assert!(steps.values().all(|s| s.status == "succeeded"));
        for (pred, step) in &edges {
            let (a, b) = (steps[pred.as_str()], steps[step.as_str()]);
            checked += 1;
            let (end, start) = (a.finished_at.unwrap(), b.started_at.unwrap());
            gaps.push(start - end);
            if start < end {
                violations.push(format!("{pred} ended {end}, {step} started {start}"));
            }
        }
        // The root ends in the transaction of its last step's end.
        let last = steps.values().filter_map(|s| s.finished_at).max().unwrap();
        assert_eq!(root.finished_at, Some(last), "workflow {}", root.run_id);
    }
    // How many workflows were in flight at once (their steps interleave).
    let mut events: Vec<(i64, i32)> = roots
        .iter()
        .flat_map(|r| [(r.started_at.unwrap(), 1), (r.finished_at.unwrap(), -1)])
        .collect();
    events.sort();
    let mut now = 0;
    for (_, d) in events {
        now += d;
        concurrent_max = concurrent_max.max(now);
    }
    gaps.sort();
    let pct = |p: f64| gaps[((gaps.len() - 1) as f64 * p).round() as usize];
    let index = std::fs::read_to_string(data.join("mail/index.txt")).unwrap();
    figures(
        &ws,
        "workflows_100",
        &[
            format!(
                "100 mail workflows triggered at once: all succeeded in {:.2} s, {} step runs, \
                 up to {concurrent_max} workflows in flight at once",
                took.lock().unwrap().as_secs_f64(),
                rows.len() - 100
            ),
            format!(
                "ordering constraints checked {checked} (6 edges x 100), violated {}; predecessor \
                 end to successor start p50 {} ms, p99 {} ms, max {} ms",
                violations.len(),
                pct(0.5),
                pct(0.99),
                gaps.last().unwrap()
            ),
            format!("index lines written {}", index.lines().count()),
        ],
    );
    assert!(violations.is_empty(), "{violations:?}");
    assert_eq!(index.lines().count(), 200, "2 distinct links per mail");
}

fn a_failure_in_links_skips_strip_and_index_but_not_headers_and_geolocate_and_retry_completes_it(
    ws: Workspace,
) {
    let paths = mails(&ws, 3, "f");
    let db2 = ws.catalog_at();
    let ops_cfg = ws.engine_config();
    // `links` fails on the second mail (both its attempts) until the test mends it.
    let broken = Arc::new(AtomicBool::new(true));
    let b = broken.clone();
    let builder = mail::register(Engine::builder()).function("mail.links", move |ctx, input| {
        let path = input["path"].as_str().unwrap_or_default().to_string();
        if b.load(Ordering::SeqCst) && path.ends_with("f1.eml") {
            return Err(format!("cannot read the links of {path}"));
        }
        mail::links(ctx, input)
    });
    let outcome = Arc::new(std::sync::Mutex::new(BTreeMap::new()));
    let out = outcome.clone();
    with_engine(&ws, MAIL_CONF, builder, |engine| async move {
        let params = paths.iter().map(|p| Some(json!({ "path": p }))).collect();
        let roots = engine.trigger_many("mail", params).await.unwrap();
        roots_ended(&db2, &roots, 60).await;
        let failed = roots[1];
        let steps = |rows: &[StepRun]| -> BTreeMap<String, (String, i64)> {
            rows.iter()
                .filter(|r| r.pid == Some(failed))
                .map(|r| (r.step.clone().unwrap(), (r.status.clone(), r.run_id)))
                .collect()
        };
        let rows = db2.read(tree_rows).await;
        let before = steps(&rows);
        let status = |id: i64| rows.iter().find(|r| r.run_id == id).unwrap().status.clone();
        out.lock().unwrap().insert(
            "roots",
            roots
                .iter()
                .map(|r| status(*r))
                .collect::<Vec<_>>()
                .join(","),
        );
        // Retry through the API's own path (ops), as an operator would.
        broken.store(false, Ordering::SeqCst);
        let caller = jobvisor::ops::Caller {
            actor: "operator".into(),
            node: "flow".into(),
        };
        let (ops, _) =
            jobvisor::ops::Ops::open(&ops_cfg, jobvisor::catalog::Access::ReadWrite, caller)
                .unwrap();
        assert_eq!(ops.retry_run(failed).unwrap(), failed, "retried in place");
        roots_ended(&db2, &[failed], 60).await;
        let rows = db2.read(tree_rows).await;
        let after = steps(&rows);
        let rerun: Vec<String> = rows
            .iter()
            .filter(|r| r.pid == Some(failed) && r.retry_of.is_some() && r.step.is_some())
            .filter(|r| !before.values().any(|(_, id)| *id == r.run_id))
            .map(|r| r.step.clone().unwrap())
            .collect();
        let mut o = out.lock().unwrap();
        o.insert("before", format!("{before:?}"));
        o.insert("after", format!("{after:?}"));
        o.insert("rerun", rerun.join(","));
        o.insert(
            "root_after",
            rows.iter()
                .find(|r| r.run_id == failed)
                .unwrap()
                .status
                .clone(),
        );
    });
    let o = outcome.lock().unwrap();
    figures(
        &ws,
        "workflow_failure_and_retry",
        &[
            format!("workflows: {}", o["roots"]),
            format!("failed workflow's steps before the retry: {}", o["before"]),
            format!("steps the retry ran again: {}", o["rerun"]),
            format!("after the retry: {} ({})", o["root_after"], o["after"]),
        ],
    );
    assert_eq!(o["roots"], "succeeded,failed,succeeded");
    let before = &o["before"];
    for (step, status) in [
        ("store", "succeeded"),
        ("split", "succeeded"),
        ("links", "dead"),
        ("strip", "skipped"),
        ("index", "skipped"),
        ("headers", "succeeded"),
        ("geolocate", "succeeded"),
    ] {
        assert!(
            before.contains(&format!("\"{step}\": (\"{status}\"")),
            "{step} {status}: {before}"
        );
    }
    assert_eq!(
        o["rerun"], "links,strip,index",
        "only the failed and skipped steps"
    );
    assert_eq!(o["root_after"], "succeeded");
    assert!(
        !o["after"].contains("skipped") && !o["after"].contains("dead"),
        "{}",
        o["after"]
    );
}

/// A random tree shape: `children[i]` are node i's children; node 0 is the root; depth ≤ 5.
fn random_tree(rng: &mut SimRng, size: usize, max_depth: usize) -> Vec<Vec<usize>> {
    let mut children = vec![Vec::new(); 1];
    let mut depth = vec![0usize];
    while children.len() < size {
        // A random parent that may still have children.
        let parent = loop {
            let p = rng.range_i64(0, children.len() as i64 - 1) as usize;
            if depth[p] < max_depth {
                break p;
            }
        };
        let fan = rng.range_i64(1, 6) as usize;
        for _ in 0..fan.min(size - children.len()) {
            let next = children.len();
            children[parent].push(next);
            depth.push(depth[parent] + 1);
            children.push(Vec::new());
        }
    }
    children
}

fn a_tree_of_1000_runs_ends_with_its_last_descendant_and_a_failure_anywhere_fails_its_root(
    ws: Workspace,
) {
    let conf = "[processor.tree]\ninstances = 8\n\
        [job.node]\ntype = \"function\"\nprocessor = \"tree\"\noverlap_policy = \"allow\"\n\
        max_overlap = 100000\npayload = { function = \"grow\" }\n";
    let mut rng = SimRng::new(0x7ee_0014);
    let shape = Arc::new(random_tree(&mut rng, 1000, 5));
    let depth_of = {
        let mut depth = vec![0usize; shape.len()];
        for (i, kids) in shape.iter().enumerate() {
            for k in kids {
                depth[*k] = depth[i] + 1;
            }
        }
        depth
    };
    let fail_at = {
        // A node at the deepest level fails the second tree.
        let max = *depth_of.iter().max().unwrap();
        depth_of.iter().position(|d| *d == max).unwrap()
    };
    let s = shape.clone();
    let builder = Engine::builder().function("grow", move |ctx, input| {
        let node = input["node"].as_u64().unwrap() as usize;
        for child in &s[node] {
            let mut p = json!({ "node": child });
            if let Some(f) = input.get("fail") {
                p["fail"] = f.clone();
            }
            ctx.spawn("node", Some(p))?;
        }
        if input.get("fail").and_then(|f| f.as_u64()) == Some(node as u64) {
            return Err(format!("node {node} fails"));
        }
        Ok(json!({ "node": node, "children": s[node].len() }))
    });
    let db2 = ws.catalog_at();
    let took = Arc::new(std::sync::Mutex::new(Vec::new()));
    let t2 = took.clone();
    with_engine(&ws, conf, builder, |engine| async move {
        for fail in [None, Some(fail_at)] {
            let t0 = Instant::now();
            let mut params = json!({ "node": 0 });
            if let Some(f) = fail {
                params["fail"] = json!(f);
            }
            let root = engine.trigger("node", Some(params)).await.unwrap();
            roots_ended(&db2, &[root], 120).await;
            t2.lock().unwrap().push((root, t0.elapsed()));
        }
    });
    let rows = tree_rows(&ws.catalog());
    let mut lines = vec![format!(
        "tree shape: 1000 runs, depth {} (seed 0x7ee0014), fan-out 1–6 per spawning run, {} runs \
         with children",
        depth_of.iter().max().unwrap(),
        shape.iter().filter(|k| !k.is_empty()).count()
    )];
    let took = took.lock().unwrap();
    for (i, (root, elapsed)) in took.iter().enumerate() {
        let members: Vec<&StepRun> = rows
            .iter()
            .filter(|r| r.run_id == *root || r.stump == Some(*root))
            .collect();
        let r = rows.iter().find(|r| r.run_id == *root).unwrap();
        let last = members
            .iter()
            .filter(|m| m.run_id != *root)
            .filter_map(|m| m.finished_at)
            .max()
            .unwrap();
        let statuses: BTreeMap<&str, usize> = members.iter().fold(BTreeMap::new(), |mut m, r| {
            *m.entry(r.status.as_str()).or_default() += 1;
            m
        });
        lines.push(format!(
            "tree {}: {} runs in {:.2} s, root {} at {} = its last descendant's end {} ({statuses:?})",
            i + 1,
            members.len(),
            elapsed.as_secs_f64(),
            r.status,
            r.finished_at.unwrap(),
            last
        ));
        assert_eq!(members.len(), 1000);
        assert_eq!(
            r.finished_at,
            Some(last),
            "the root ends with its last descendant"
        );
        let want = if i == 0 { "succeeded" } else { "failed" };
        assert_eq!(r.status, want);
        if i == 0 {
            assert_eq!(statuses.get("succeeded"), Some(&1000));
        }
    }
    figures(&ws, "tree_1000", &lines);
}

/// The faces of a real node: children spawned over the API and JSON-RPC join a running run's
/// tree, which `GET …/tree`, `run.tree` and `jobvisor runs tree` show; a workflow triggered from
/// the CLI runs; `runs cancel` of a workflow kills its running command step and skips the rest.
fn children_spawned_over_the_api_and_rpc_join_the_tree_and_a_cancelled_workflow_kills_its_command(
    ws: Workspace,
) {
    use crate::support::{api, wait_for};
    ws.ok(&["init"]);
    ws.disable_seeded_jobs();
    let conf = ws.write(
        "flow.conf",
        r#"
[processor.p]
instances = 4
[job.slow]
type = "function"
processor = "p"
payload = { function = "debug.sleep", ms = 1500 }
[job.echo]
type = "function"
processor = "p"
overlap_policy = "allow"
max_overlap = 100
payload = { function = "debug.echo" }
[job.nap]
type = "command"
processor = "p"
payload = { argv = ["sleep", "30"] }
[job.hello]
type = "workflow"
processor = "p"
payload.steps = [{ name = "one", job = "echo" }, { name = "two", job = "echo", after = ["one"], inputs = ["one"] }]
[job.held]
type = "workflow"
processor = "p"
payload.steps = [{ name = "nap", job = "nap" }, { name = "after", job = "echo", after = ["nap"] }]
[job.ticker]
type = "workflow"
processor = "p"
cron = "* * * * * *"
payload.steps = [{ job = "echo" }]
"#,
    );
    ws.ok(&["import", &conf.display().to_string()]);
    let node = ws.start_node("n1");
    let (base, token) = (node.api.clone(), node.token.clone().unwrap());
    let status_of = |id: i64| -> (String, Option<i64>) {
        let rows = ws.catalog().rows(&format!(
            "SELECT status, finished_at FROM job_run WHERE run_id = {id}"
        ));
        let row = &rows[0];
        (row[0].as_str().unwrap().to_string(), row[1].as_i64())
    };
    let r = api(
        &base,
        Some(&token),
        "POST",
        "/api/v1/jobs/slow/runs",
        Some(&json!({})),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let parent = r.json()["run_ids"][0].as_i64().unwrap();
    wait_for(20.0, "the parent to run", || {
        (status_of(parent).0 == "running").then_some(())
    });
    let body = json!({ "job": "echo", "params": { "word": "api" } });
    let path = format!("/api/v1/runs/{parent}/children");
    let r = api(&base, Some(&token), "POST", &path, Some(&body));
    assert_eq!(r.status, 201, "{}", r.body);
    let api_child = r.json()["run_id"].as_i64().unwrap();
    let call = json!({"jsonrpc": "2.0", "method": "run.spawn", "id": 1,
                      "params": { "parent": parent, "job": "echo", "params": { "word": "rpc" } }});
    let r = api(&base, Some(&token), "POST", "/rpc", Some(&call));
    assert_eq!(r.status, 200, "{}", r.body);
    let rpc_child = r.json()["result"]["run_id"].as_i64().unwrap();
    wait_for(20.0, "the tree to end", || status_of(parent).1.map(|_| ()));
    assert_eq!(status_of(parent).0, "succeeded");
    let r = api(
        &base,
        Some(&token),
        "GET",
        &format!("/api/v1/runs/{rpc_child}/tree"),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let tree = r.json();
    assert_eq!(tree["root"], parent);
    assert_eq!(tree["ended"], true);
    let ids: Vec<i64> = tree["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["run"]["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, [parent, api_child, rpc_child]);
    // An ended run takes no children.
    let r = api(&base, Some(&token), "POST", &path, Some(&body));
    assert_eq!(r.status, 409, "{}", r.body);
    let call = json!({"jsonrpc": "2.0", "method": "run.tree", "id": 2, "params": { "id": parent }});
    let r = api(&base, Some(&token), "POST", "/rpc", Some(&call));
    assert_eq!(r.json()["result"]["counts"]["succeeded"], 3);

    // A workflow queued from the CLI (another process writing the catalog) runs its steps.
    let out = ws.ok(&["--json", "jobs", "run", "hello"]);
    let root = serde_json::from_str::<serde_json::Value>(&out).unwrap()["run_id"]
        .as_i64()
        .unwrap();
    wait_for(20.0, "the workflow to end", || {
        status_of(root).1.map(|_| ())
    });
    assert_eq!(status_of(root).0, "succeeded");
    let shown = ws.ok(&["runs", "tree", &root.to_string()]);
    assert!(
        shown.starts_with(&format!("tree of run {root}: succeeded (3 runs")),
        "{shown}"
    );
    assert!(
        shown.contains("  one") && shown.contains("  two"),
        "{shown}"
    );

    // Cancelled while its command step sleeps: the command is killed, the next step skipped.
    let out = ws.ok(&["--json", "jobs", "run", "held"]);
    let held = serde_json::from_str::<serde_json::Value>(&out).unwrap()["run_id"]
        .as_i64()
        .unwrap();
    let nap = wait_for(20.0, "the command step to run", || {
        let rows = ws.catalog().rows(&format!(
            "SELECT run_id FROM job_run WHERE pid = {held} AND step = 'nap' AND status = 'running'"
        ));
        rows.first().and_then(|r| r[0].as_i64())
    });
    let t0 = Instant::now();
    let out = ws.ok(&["runs", "cancel", &held.to_string()]);
    assert!(out.contains("asked to cancel"), "{out}");
    wait_for(20.0, "the cancelled workflow to end", || {
        status_of(held).1.map(|_| ())
    });
    let took = t0.elapsed();
    assert_eq!(status_of(held).0, "cancelled");
    assert_eq!(status_of(nap).0, "cancelled");
    assert!(
        took < Duration::from_secs(10),
        "the sleep 30 was killed: {took:?}"
    );
    let shown = ws.ok(&["runs", "tree", &held.to_string()]);
    assert!(shown.contains("skipped"), "{shown}");

    // A workflow's slot starts its tree like a trigger does.
    wait_for(20.0, "a scheduled workflow to succeed", || {
        let rows = ws.catalog().rows(
            "SELECT r.run_id FROM job_run r JOIN job j USING (job_id) WHERE j.job_name = 'ticker'
             AND r.scheduled_for IS NOT NULL AND r.status = 'succeeded'
             AND EXISTS (SELECT 1 FROM job_run s WHERE s.pid = r.run_id AND s.status = 'succeeded')",
        );
        rows.first().and_then(|r| r[0].as_i64())
    });
    drop(node);
}

/// Runs of `job` (each: its id, parent, status, finished_at), read on a blocking thread (see
/// `CatalogAt::read`).
async fn job_runs(
    at: &CatalogAt,
    job: &'static str,
) -> Vec<(i64, Option<i64>, String, Option<i64>)> {
    let sql = format!(
        "SELECT r.run_id, r.pid, r.status, r.finished_at FROM job_run r
         JOIN job j USING (job_id) WHERE j.job_name = '{job}' ORDER BY r.run_id"
    );
    at.read(move |db| {
        db.rows(&sql)
            .iter()
            .map(|r| {
                (
                    r[0].as_i64().unwrap(),
                    r[1].as_i64(),
                    r[2].as_str().unwrap().to_string(),
                    r[3].as_i64(),
                )
            })
            .collect()
    })
    .await
}

/// An embedded engine: a function's children spawned through the catalog writer's `spawn`
/// verb — by a blocking function (`FnContext::spawn`), an async one (`spawn_async`) and the
/// host (`Engine::spawn`, audited) — join their parent's tree, and each parent ends with its
/// last child; a workflow triggered through the engine fans out and in and ends with its last
/// step.
fn an_embedded_engine_spawns_children_and_runs_a_workflow_through_its_writer(ws: Workspace) {
    let builder = Engine::builder()
        .function("fan", |ctx, _| {
            for i in 0..3 {
                ctx.spawn("leaf", Some(serde_json::json!({ "i": i })))?;
            }
            Ok(serde_json::json!({ "spawned": 3 }))
        })
        .async_function("fan_async", |ctx, _| async move {
            ctx.spawn_async("leaf", None).await?;
            ctx.spawn_async("leaf", None).await?;
            Ok(serde_json::json!({ "spawned": 2 }))
        });
    let at = ws.catalog_at();
    let ids = Arc::new(std::sync::Mutex::new((0, 0, 0, 0)));
    let kept = ids.clone();
    with_engine(&ws, CHILDREN_CONF, builder, |engine| async move {
        let fan = engine.trigger("fan", None).await.unwrap();
        let fan_async = engine.trigger("fan_async", None).await.unwrap();
        let hold = engine.trigger("hold", None).await.unwrap();
        let wf = engine.trigger("wf", None).await.unwrap();
        // The host spawns under `hold` while it runs.
        loop {
            let holds = job_runs(&at, "hold").await;
            if holds[0].2 == "running" {
                break;
            }
            actix_rt::time::sleep(Duration::from_millis(10)).await;
        }
        // A run of its own job: `forbid` keeps it queued until `hold`'s own execution ended,
        // so `hold` then waits for it.
        engine.spawn(hold, "hold", None).await.unwrap();
        let started = Instant::now();
        loop {
            let mut open = 0;
            for job in ["fan", "fan_async", "hold", "wf"] {
                open += job_runs(&at, job)
                    .await
                    .iter()
                    .filter(|r| r.3.is_none())
                    .count();
            }
            if open == 0 {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "{open} trees open"
            );
            actix_rt::time::sleep(Duration::from_millis(20)).await;
        }
        *kept.lock().unwrap() = (fan, fan_async, hold, wf);
    });
    let (fan, fan_async, hold, wf) = *ids.lock().unwrap();
    let db = ws.catalog();
    let children = |parent: i64| -> Vec<(String, Option<i64>)> {
        db.rows(&format!(
            "SELECT status, finished_at FROM job_run WHERE pid = {parent} ORDER BY run_id"
        ))
        .iter()
        .map(|r| (r[0].as_str().unwrap().to_string(), r[1].as_i64()))
        .collect()
    };
    for (parent, spawned) in [(fan, 3), (fan_async, 2), (hold, 1), (wf, 4)] {
        let kids = children(parent);
        let r = &db.rows(&format!(
            "SELECT status, finished_at, children_open, own_status FROM job_run
             WHERE run_id = {parent}"
        ))[0];
        let (status, finished, open, own) = (
            r[0].as_str().unwrap(),
            r[1].as_i64(),
            r[2].as_i64().unwrap(),
            r[3].as_str(),
        );
        assert_eq!(kids.len(), spawned, "run {parent}: {kids:?}");
        assert!(
            kids.iter().all(|k| k.0 == "succeeded"),
            "run {parent}: {kids:?}"
        );
        assert_eq!((status, open), ("succeeded", 0), "run {parent}");
        let last = kids.iter().filter_map(|k| k.1).max();
        if own.is_some() || parent == hold {
            // It waited for its children: it ended in the transaction of the last one's end.
            assert_eq!(finished, last, "run {parent} ended with its last child");
        } else {
            // Its children ended while it executed: it ended with its own completion.
            assert!(finished >= last, "run {parent} ended before a child");
        }
    }
    let join = db.rows(&format!(
        "SELECT params FROM job_run WHERE pid = {wf} AND step = 'join'"
    ))[0][0]
        .as_str()
        .unwrap()
        .to_string();
    let join: serde_json::Value = serde_json::from_str(&join).unwrap();
    assert_eq!(join["inputs"]["two"]["slept_ms"], 50, "{join}");
    assert_eq!(join["inputs"]["three"]["slept_ms"], 50, "{join}");
    assert_eq!(
        db.count("SELECT count(*) FROM audit WHERE action = 'run.spawn'"),
        1,
        "the host's spawn is audited; a function's own are the node's work"
    );
}

/// The jobs of [`an_embedded_engine_spawns_children_and_runs_a_workflow_through_its_writer`].
const CHILDREN_CONF: &str = r#"
[processor.p]
instances = 4
[job.leaf]
type = "function"
processor = "p"
overlap_policy = "allow"
max_overlap = 100
payload = { function = "debug.sleep", ms = 50 }
[job.fan]
type = "function"
processor = "p"
payload = { function = "fan" }
[job.fan_async]
type = "function"
processor = "p"
payload = { function = "fan_async" }
[job.hold]
type = "function"
processor = "p"
payload = { function = "debug.sleep", ms = 400 }
[job.echo]
type = "function"
processor = "p"
overlap_policy = "allow"
max_overlap = 100
payload = { function = "debug.echo" }
[job.wf]
type = "workflow"
processor = "p"
payload.steps = [
    { name = "one", job = "leaf" },
    { name = "two", job = "leaf", after = ["one"] },
    { name = "three", job = "leaf", after = ["one"] },
    { name = "join", job = "echo", after = ["two", "three"], inputs = ["two", "three"] },
]
"#;
