//! What a new operator runs into (issue 11): files that are not ours, read-only commands,
//! errors that name the file, no panics, exit codes, activation made visible, JSON everywhere,
//! output people can read, and the verbs a job engine's CLI is expected to have.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value as Json;

use crate::support::{ReadOnly, Workspace, text, wait_for};

crate::on_both_backends!(
    runs_cancel_stops_a_running_command_and_kills_its_process_group,
    runs_retry_queues_a_new_attempt_and_cancel_stops_a_queued_run,
    reading_commands_need_a_catalog_and_create_nothing,
    a_missing_required_flag_is_a_usage_error_and_a_bad_log_filter_a_config_error,
    every_command_speaks_json_and_errors_are_json_objects,
    runs_show_prints_local_times_and_json_values,
    unknown_functions_warn_and_strict_refuses_them,
    import_changes_only_the_fields_the_file_names_and_says_which,
    processors_and_objects_are_managed_from_the_cli,
    runs_list_filters_by_since_and_node_and_next_is_capped,
    a_job_added_while_the_node_is_healthy_runs_at_once_and_says_why,
    start_up_activations_are_decisions,
    an_object_added_while_the_node_runs_is_usable_at_once_in_the_data_folder,
    a_second_signal_stops_at_once_and_returns_running_runs,
    failing_runs_are_logged_at_warn_once_a_minute_per_job,
    a_standby_job_activated_later_writes_one_skipped_row_not_one_per_missed_slot,
    a_recurring_job_that_keeps_failing_backs_off_and_says_why,
);

/// Runs `jobvisor ARGS` in the workspace folder with no `--db` added.
pub fn raw(ws: &Workspace, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_jobvisor"))
        .args(args)
        .current_dir(ws.dir.path())
        .env_remove("JOBVISOR_CONFIG")
        .env_remove("JOBVISOR_LOG")
        .output()
        .unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn bytes(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

/// A SQLite database of another application.
fn foreign_db(path: &Path) {
    let conn = crate::support::open_db(path);
    conn.execute_batch(
        "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT);
         INSERT INTO customers (name) VALUES ('Ada');",
    )
    .unwrap();
}

fn json_of(out: &Output) -> Json {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(out)))
}

#[test]
fn a_foreign_sqlite_file_is_refused_and_never_written() {
    let ws = Workspace::new();
    let db = ws.path("shop.db");
    foreign_db(&db);
    let before = bytes(&db);
    let file = ws.write("jobs.conf", "[processor.p]\n");
    let db_arg = db.display().to_string();
    let commands: Vec<Vec<&str>> = vec![
        vec!["jobs", "list"],
        vec!["export"],
        vec!["init"],
        vec!["import", file.to_str().unwrap()],
        vec!["jobs", "add", "x", "--type", "function", "--processor", "p"],
        vec!["run", "--bind", "127.0.0.1:0"],
    ];
    for args in commands {
        let mut full = vec!["--db", &db_arg];
        full.extend(&args);
        let out = raw(&ws, &full);
        assert_eq!(out.status.code(), Some(78), "{args:?}: {}", text(&out));
        let err = stderr(&out);
        assert!(
            err.contains("shop.db") && err.contains("not a jobvisor catalog"),
            "{args:?}: {err}"
        );
        assert_eq!(bytes(&db), before, "{args:?} changed the file");
    }
    assert!(
        !ws.path("jobvisor-data").exists(),
        "a refused run created its data folder"
    );
}

#[test]
fn an_empty_file_is_not_seeded() {
    let ws = Workspace::new();
    std::fs::write(ws.db(), b"").unwrap();
    for args in [&["init"][..], &["jobs", "list"]] {
        let out = ws.run(args);
        assert_eq!(out.status.code(), Some(78), "{}", text(&out));
        assert!(stderr(&out).contains("empty"), "{}", text(&out));
    }
    assert_eq!(std::fs::metadata(ws.db()).unwrap().len(), 0);
}

fn reading_commands_need_a_catalog_and_create_nothing(ws: Workspace) {
    for args in [
        &["jobs", "list"][..],
        &["jobs", "show", "x"],
        &["jobs", "next", "x"],
        &["export"],
        &["decisions"],
        &["runs", "list"],
        &["runs", "show", "1"],
        &["processors", "list"],
        &["objects", "list"],
        &[
            "jobs",
            "add",
            "x",
            "--type",
            "function",
            "--processor",
            "main",
        ],
    ] {
        let mut full = vec!["--db", "no/such/dir/x.db"];
        full.extend(args);
        let out = raw(&ws, &full);
        assert_eq!(out.status.code(), Some(66), "{args:?}: {}", text(&out));
        assert!(
            stderr(&out).contains("no catalog at no/such/dir/x.db"),
            "{}",
            text(&out)
        );
    }
    assert!(!ws.path("no").exists(), "a reading command created folders");
}

#[test]
fn reading_commands_work_on_a_read_only_catalog() {
    let ws = Workspace::new();
    ws.ok(&["init"]);
    let before = bytes(&ws.db());
    let _read_only = ReadOnly::make(&ws.db());
    for args in [
        &["jobs", "list"][..],
        &["jobs", "show", "device_stats"],
        &["jobs", "next", "device_stats"],
        &["export"],
        &["decisions"],
        &["runs", "list"],
        &["processors", "list"],
        &["stats"],
    ] {
        ws.ok(args);
    }
    assert_eq!(bytes(&ws.db()), before);
    // A write — by a command or a node's start — names the file, what was being done, and why
    // it failed; nothing is written.
    let out = ws.run(&["jobs", "disable", "device_stats"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = stderr(&out);
    assert!(
        err.contains("catalog.db: disabling job `device_stats`")
            && err.contains("readonly")
            && err.contains("not writable"),
        "{err}"
    );
    let out = ws.run(&["run", "--bind", "127.0.0.1:0"]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        stderr(&out).contains("catalog.db") && stderr(&out).contains("readonly"),
        "{}",
        text(&out)
    );
    assert_eq!(bytes(&ws.db()), before);
}

#[test]
fn database_errors_name_the_file_and_what_was_being_done() {
    let ws = Workspace::new();
    ws.ok(&["init"]);
    // A read-only open (as `jobs list` makes) cannot write: the storage error names the file,
    // what was being done, and what the SQLite error usually means.
    let catalog = jobvisor::catalog::Catalog::open_as(
        &ws.db(),
        &jobvisor::catalog::DbSettings::default(),
        jobvisor::catalog::Access::ReadOnly,
    )
    .unwrap();
    let e = catalog
        .set_job_enabled("device_stats", false, "test")
        .unwrap_err()
        .within(&ws.db(), "disabling job `device_stats`");
    let message = e.to_string();
    assert!(
        message.contains("catalog.db: disabling job `device_stats`")
            && message.contains("readonly")
            && message.contains("not writable"),
        "{message}"
    );
}

/// A command on a PostgreSQL catalog whose server does not answer gives up after a few
/// seconds (not the node's minute of `database.reconnect_for`), naming the server with its
/// password redacted, with exit 75 (try again later); nothing is created in the folder.
#[test]
fn a_command_whose_postgres_server_does_not_answer_fails_soon_naming_it() {
    let ws = Workspace::new();
    for args in [&["jobs", "list"][..], &["init"]] {
        let mut full = vec!["--db", "postgres://jv:secret@127.0.0.1:1/db"];
        full.extend(args);
        let started = std::time::Instant::now();
        let out = raw(&ws, &full);
        assert_eq!(out.status.code(), Some(75), "{}", text(&out));
        assert!(
            stderr(&out).contains("postgres://jv:***@127.0.0.1:1/db")
                && !stderr(&out).contains("secret"),
            "{}",
            text(&out)
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(15));
    }
    assert!(!ws.path("postgres:").exists());
    // `config` shows the URL with its password redacted, as text and as JSON.
    for json in [false, true] {
        let mut args = vec!["--db", "postgres://jv:secret@127.0.0.1:1/db", "config"];
        if json {
            args.insert(0, "--json");
        }
        let shown = String::from_utf8(raw(&ws, &args).stdout).unwrap();
        assert!(
            shown.contains("postgres://jv:***@127.0.0.1:1/db") && !shown.contains("secret"),
            "{shown}"
        );
    }
}

/// A node whose PostgreSQL server does not answer waits `database.reconnect_for`, then
/// stops with the reason (the server, its password redacted) and exit 75 (try again later).
#[test]
fn a_node_whose_postgres_server_does_not_answer_stops_naming_it() {
    let ws = Workspace::new();
    let out = Command::new(env!("CARGO_BIN_EXE_jobvisor"))
        .args(["--db", "postgres://jv:secret@127.0.0.1:1/db", "run"])
        .args(["--bind", "127.0.0.1:0", "--data-dir"])
        .arg(ws.path("data"))
        .current_dir(ws.dir.path())
        .env_remove("JOBVISOR_CONFIG")
        .env("JOBVISOR__DATABASE__RECONNECT_FOR", "300")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(75), "{}", text(&out));
    let err = stderr(&out);
    assert!(
        err.contains("cannot reach postgres://jv:***@127.0.0.1:1/db"),
        "{}",
        text(&out)
    );
    assert!(!text(&out).contains("secret"), "{}", text(&out));
}

#[test]
fn export_into_a_closed_pipe_ends_quietly() {
    let ws = Workspace::new();
    ws.ok(&["init"]);
    // Many jobs, so that the export is larger than a pipe buffer.
    let conf: String = (0..400)
        .map(|i| {
            format!(
                "[job.j{i}]\ntype = \"function\"\nprocessor = \"main\"\n\
                 description = \"{}\"\npayload = {{ function = \"debug.noop\" }}\n",
                "x".repeat(200)
            )
        })
        .collect();
    let file = ws.write("many.conf", &format!("[processor.main]\n{conf}"));
    ws.ok(&["import", &file.display().to_string()]);
    let mut child = Command::new(env!("CARGO_BIN_EXE_jobvisor"))
        .arg("--db")
        .arg(ws.db())
        .arg("export")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take()); // the reader goes away at once, like `| true`
    let out = child.wait_with_output().unwrap();
    let err = stderr(&out);
    assert!(!err.contains("panicked"), "{err}");
    assert_ne!(out.status.code(), Some(101), "{err}");
}

#[test]
fn run_on_a_port_in_use_is_one_error_and_writes_nothing() {
    let ws = Workspace::new();
    ws.ok(&["init"]);
    let before = bytes(&ws.db());
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = ws.run(&["run", "--bind", &addr, "--node", "n1"]);
    assert_eq!(out.status.code(), Some(75), "{}", text(&out));
    let err = stderr(&out);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one error: {err}");
    assert!(err.contains(&addr), "{err}");
    assert_eq!(bytes(&ws.db()), before, "no node row was written");
}

fn a_missing_required_flag_is_a_usage_error_and_a_bad_log_filter_a_config_error(ws: Workspace) {
    ws.ok(&["init"]);
    let out = ws.run(&["jobs", "add", "x", "--processor", "main"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let out = ws.run(&["jobs", "add", "x", "--processor", "main", "--json"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err: Json = serde_json::from_str(stderr(&out).trim()).unwrap();
    assert_eq!(err["exit_code"], 2);
    let cfg = ws.write("bad-log.toml", "[log]\nlevel = \"info,[[[\"\n");
    let out = ws.run(&[
        "--config",
        cfg.to_str().unwrap(),
        "run",
        "--bind",
        "127.0.0.1:0",
    ]);
    assert_eq!(out.status.code(), Some(78), "{}", text(&out));
    assert!(stderr(&out).contains("log.level"), "{}", text(&out));
    // Like every other bad configuration value: refused by any command, at its file and line.
    for args in [vec!["config"], vec!["jobs", "list"]] {
        let out = ws.run(&[&["--config", cfg.to_str().unwrap()][..], &args].concat());
        assert_eq!(out.status.code(), Some(78), "{args:?}: {}", text(&out));
        assert!(
            stderr(&out).contains("bad-log.toml:2:1: log.level:"),
            "{args:?}: {}",
            text(&out)
        );
    }
}

fn every_command_speaks_json_and_errors_are_json_objects(ws: Workspace) {
    let conf = ws.write(
        "j.conf",
        "[processor.main]\n[job.a]\ntype = \"function\"\nprocessor = \"main\"\n\
         payload = { function = \"debug.echo\" }\n",
    );
    for args in [
        vec!["init", "--json"],
        vec!["config", "--json"],
        vec!["check", conf.to_str().unwrap(), "--json"],
        vec!["import", conf.to_str().unwrap(), "--json"],
        vec!["config", "--print-defaults", "--json"],
        vec!["export", "--json"],
        vec!["jobs", "list", "--json"],
        vec!["jobs", "show", "a", "--json"],
        vec![
            "jobs",
            "add",
            "b",
            "--type",
            "function",
            "--processor",
            "main",
            "--payload",
            r#"{"function":"debug.noop"}"#,
            "--backoff-base",
            "2000",
            "--json",
        ],
        vec!["jobs", "remove", "b", "--json"],
        vec!["processors", "add", "spare", "--instances", "2", "--json"],
        vec!["processors", "edit", "spare", "--instances", "3", "--json"],
        vec!["processors", "remove", "spare", "--json"],
        vec![
            "objects",
            "add",
            "events",
            "--conn-string",
            "events.db",
            "--json",
        ],
        vec!["objects", "remove", "events", "--json"],
        vec!["jobs", "edit", "a", "--priority", "3", "--json"],
        vec!["jobs", "disable", "a", "--json"],
        vec!["jobs", "enable", "a", "--json"],
        vec!["jobs", "pin", "a", "active", "--json"],
        vec!["jobs", "run", "a", "--json"],
        vec!["jobs", "next", "a", "--json"],
        vec!["runs", "list", "--json"],
        vec!["runs", "show", "1", "--json"],
        vec!["processors", "list", "--json"],
        vec!["objects", "list", "--json"],
        vec!["decisions", "--json"],
    ] {
        let out = ws.run(&args);
        assert!(out.status.success(), "{args:?}: {}", text(&out));
        json_of(&out);
    }
    // The export in JSON holds job.conf's tables.
    let export = json_of(&ws.run(&["export", "--json"]));
    assert_eq!(export["job"]["a"]["payload"]["function"], "debug.echo");
    // The config shows resolved values, not empty strings, with units where they are sizes.
    let human = ws.ok(&["config"]);
    for line in human.lines().filter(|l| !l.starts_with('#')) {
        assert!(
            !line.ends_with("= \"\"") && !line.contains("= \"\"  ")
                || line.contains("built-in")
                || line.contains("# none: "),
            "an unexplained empty value: {line}\n{human}"
        );
    }
    assert!(
        human.contains("memory_strained = 209715200  # 200.0 MiB"),
        "{human}"
    );
    assert!(human.contains("# How long a connection waits"), "{human}");
    let cfg = json_of(&ws.run(&["config", "--json"]));
    assert_ne!(cfg["node"]["name"], "");
    assert_ne!(cfg["node"]["timezone"], "");
    let path = cfg["database"]["path"].as_str().unwrap();
    match &ws.pg {
        None => assert!(path.ends_with("catalog.db"), "{path}"),
        Some(pg) => assert!(path.ends_with(&pg.name) && path.starts_with("postgres://")),
    }
    // An error: a JSON object on stderr with the field and the exit code.
    let out = ws.run(&["jobs", "edit", "a", "--run-on-the", "77", "--json"]);
    assert_eq!(out.status.code(), Some(65), "{}", text(&out));
    let err: Json = serde_json::from_str(stderr(&out).trim()).unwrap();
    assert_eq!(err["exit_code"], 65);
    assert_eq!(err["field"], "run_on_the");
    assert!(
        err["reason"].as_str().unwrap().contains("0–59")
            || err["reason"].as_str().unwrap().contains("59"),
        "{err}"
    );
    assert!(err["error"].as_str().unwrap().contains("run_on_the"));
}

fn runs_show_prints_local_times_and_json_values(ws: Workspace) {
    ws.ok(&["init"]);
    ws.disable_seeded_jobs();
    ws.ok(&[
        "jobs",
        "add",
        "echo",
        "--type",
        "function",
        "--processor",
        "main",
        "--payload",
        r#"{"function":"debug.echo"}"#,
    ]);
    let out = ws.ok(&["jobs", "run", "echo", "--params", r#"{"n": 7}"#, "--json"]);
    let id = serde_json::from_str::<Json>(&out).unwrap()["run_id"]
        .as_i64()
        .unwrap();
    let node = ws.start_node("n1");
    wait_for(10.0, "the echo run", || {
        ws.runs_of("echo")
            .into_iter()
            .find(|r| r.status == "succeeded")
    });
    assert_eq!(node.stop(), Some(0));
    let run = json_of(&ws.run(&["runs", "show", &id.to_string(), "--json"]));
    assert_eq!(run["params"], serde_json::json!({ "n": 7 }), "{run}");
    assert_eq!(
        run["result"]["n"], 7,
        "the result is JSON, not a string: {run}"
    );
    let created = run["created_at"].as_str().unwrap();
    assert!(
        chrono::DateTime::parse_from_rfc3339(created).is_ok(),
        "{created}"
    );
    assert!(
        run.get("pid").is_none() && run.get("parent").is_some(),
        "{run}"
    );
    let human = ws.ok(&["runs", "show", &id.to_string()]);
    assert!(
        human.contains("parent run") && !human.contains("pid "),
        "{human}"
    );
    assert!(
        !human.contains(&format!("{}", run_ms(created))),
        "times are not raw epoch ms: {human}"
    );
    let job = json_of(&ws.run(&["jobs", "show", "echo", "--json"]));
    assert_eq!(job["last_response"]["n"], 7, "{job}");
}

fn run_ms(rfc3339: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(rfc3339)
        .unwrap()
        .timestamp_millis()
}

#[test]
fn an_edit_that_changes_nothing_writes_nothing() {
    let ws = Workspace::new();
    ws.ok(&["init"]);
    let out = ws.ok(&["jobs", "edit", "device_stats", "--priority", "50"]);
    assert!(out.contains("unchanged"), "{out}");
    let before = bytes(&ws.db());
    let audit_rows = || -> i64 {
        crate::support::open_db(ws.db())
            .query_row("SELECT count(*) FROM audit", [], |r| r.get(0))
            .unwrap()
    };
    let audits = audit_rows();
    let out = ws.ok(&["jobs", "edit", "device_stats", "--priority", "50"]);
    assert!(out.contains("unchanged"), "{out}");
    let out = ws.ok(&["jobs", "enable", "device_stats"]);
    assert!(out.contains("unchanged"), "{out}");
    assert_eq!(audit_rows(), audits);
    assert_eq!(bytes(&ws.db()), before, "nothing was written");
    let out = ws.ok(&["jobs", "edit", "device_stats", "--priority", "51"]);
    assert!(out.contains("changed"), "{out}");
    assert_eq!(audit_rows(), audits + 1);
}

fn unknown_functions_warn_and_strict_refuses_them(ws: Workspace) {
    ws.ok(&["init"]);
    let add = |strict: bool| {
        let mut args = vec![
            "jobs",
            "add",
            "ghost",
            "--type",
            "function",
            "--processor",
            "main",
            "--payload",
            r#"{"function":"no.such.fn"}"#,
        ];
        if strict {
            args.push("--strict");
        }
        ws.run(&args)
    };
    let out = add(true);
    assert_eq!(out.status.code(), Some(65), "{}", text(&out));
    assert!(stderr(&out).contains("no.such.fn"), "{}", text(&out));
    let out = add(false);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        stderr(&out).contains("warning: job `ghost`"),
        "{}",
        text(&out)
    );
    let file = ws.write(
        "m.conf",
        "[processor.main]\n[job.g2]\ntype = \"function\"\nprocessor = \"main\"\n\
         payload = { function = \"nope\" }\n",
    );
    let out = ws.run(&["import", file.to_str().unwrap(), "--strict"]);
    assert_eq!(out.status.code(), Some(65), "{}", text(&out));
    // Without --strict the import goes through, and says why its runs would fail.
    let out = ws.run(&["import", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        stderr(&out).contains("warning: job `g2`") && stderr(&out).contains("nope"),
        "{}",
        text(&out)
    );
    let out = ws.run(&["check", file.to_str().unwrap()]);
    assert!(
        out.status.success() && stderr(&out).contains("warning"),
        "{}",
        text(&out)
    );
}

#[test]
fn a_sql_job_against_the_catalog_is_refused() {
    let ws = Workspace::new();
    ws.ok(&["init"]);
    let out = ws.run(&[
        "jobs",
        "add",
        "wipe",
        "--type",
        "sql",
        "--processor",
        "main",
        "--payload",
        r#"{"object":"stat","sql":"delete from job"}"#,
    ]);
    assert_eq!(out.status.code(), Some(65), "{}", text(&out));
    assert!(stderr(&out).contains("catalog"), "{}", text(&out));
    let file = ws.write(
        "w.conf",
        "[processor.main]\n[object.stat]\nconn_string = \"catalog\"\n[job.wipe]\n\
         type = \"sql\"\nprocessor = \"main\"\npayload = { object = \"stat\", sql = \"delete from job\" }\n",
    );
    let out = ws.run(&["check", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(78), "{}", text(&out));
    assert!(stderr(&out).contains("w.conf:"), "{}", text(&out));
    // The catalog file named as an object's own database, by any path that reaches it: refused
    // at add and import with the field named, and nothing stored.
    let db = ws.db();
    let absolute = db.to_str().unwrap().to_string();
    for conn in [absolute.as_str(), "../catalog.db", "./sub/../../catalog.db"] {
        let out = ws.run(&["objects", "add", "mine", "--conn-string", conn, "--json"]);
        assert_eq!(out.status.code(), Some(65), "{conn}: {}", text(&out));
        let err: Json = serde_json::from_str(stderr(&out).trim()).unwrap();
        assert_eq!(err["field"], "conn_string", "{conn}: {err}");
        assert!(
            err["reason"]
                .as_str()
                .unwrap()
                .contains("the catalog file itself"),
            "{err}"
        );
        let file = ws.write(
            "o.conf",
            &format!("[object.mine]\nconn_string = {}\n", Json::from(conn)),
        );
        // In a file, an error at its line: a catalog file with errors (78), nothing changed.
        let out = ws.run(&["import", file.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(78), "{conn}: {}", text(&out));
        assert!(stderr(&out).contains("conn_string"), "{}", text(&out));
    }
    let objects = json_of(&ws.run(&["objects", "list", "--json"]));
    assert!(
        !objects.to_string().contains("\"mine\""),
        "nothing was stored: {objects}"
    );
}

fn import_changes_only_the_fields_the_file_names_and_says_which(ws: Workspace) {
    let first = ws.write(
        "a.conf",
        "[processor.p]\ninstances = 2\nmax_instances = 8\n",
    );
    ws.ok(&["import", first.to_str().unwrap()]);
    let second = ws.write("b.conf", "[processor.p]\ninstances = 3\n");
    let out = ws.ok(&["import", second.to_str().unwrap()]);
    assert!(out.contains("instances: 2 → 3"), "{out}");
    let rows = json_of(&ws.run(&["processors", "list", "--json"]));
    let p = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "p")
        .unwrap();
    assert_eq!(
        (p["instances"].as_i64(), p["max_instances"].as_i64()),
        (Some(3), Some(8))
    );
}

fn processors_and_objects_are_managed_from_the_cli(ws: Workspace) {
    ws.ok(&["init"]);
    ws.ok(&[
        "processors",
        "add",
        "io",
        "--instances",
        "2",
        "--max-instances",
        "4",
    ]);
    let out = ws.run(&["processors", "add", "io"]);
    assert_eq!(out.status.code(), Some(65), "adding twice: {}", text(&out));
    ws.ok(&["processors", "edit", "io", "--instances", "3"]);
    let out = ws.run(&["processors", "edit", "io", "--instances", "0"]);
    assert_eq!(out.status.code(), Some(65), "{}", text(&out));
    ws.ok(&[
        "processors",
        "edit",
        "io",
        "--rpc-password",
        "s3cret",
        "--ip-address",
        "10.0.0.2",
    ]);
    let listed = ws.ok(&["processors", "list", "--json"]);
    assert!(!listed.contains("s3cret"), "{listed}");
    ws.ok(&["objects", "add", "events", "--conn-string", "events.db"]);
    ws.ok(&[
        "objects",
        "edit",
        "events",
        "--time-to-live",
        "60",
        "--allow-prune",
        "true",
    ]);
    ws.ok(&[
        "jobs",
        "add",
        "w",
        "--type",
        "function",
        "--processor",
        "main",
        "--object",
        "events",
        "--payload",
        r#"{"function":"debug.noop"}"#,
    ]);
    let out = ws.run(&["objects", "remove", "events"]);
    assert_eq!(out.status.code(), Some(65), "{}", text(&out));
    assert!(stderr(&out).contains("`w`"), "{}", text(&out));
    ws.ok(&["jobs", "remove", "w"]);
    ws.ok(&["objects", "remove", "events"]);
    ws.ok(&["processors", "remove", "io"]);
    let out = ws.run(&["processors", "remove", "main"]);
    assert_eq!(
        out.status.code(),
        Some(65),
        "main runs jobs: {}",
        text(&out)
    );
}

fn runs_list_filters_by_since_and_node_and_next_is_capped(ws: Workspace) {
    ws.ok(&["init"]);
    ws.ok(&["jobs", "run", "device_stats"]);
    let all = json_of(&ws.run(&["runs", "list", "--since", "1h", "--json"]));
    assert_eq!(all.as_array().unwrap().len(), 1);
    let none = json_of(&ws.run(&["runs", "list", "--since", "2099-01-01", "--json"]));
    assert_eq!(none.as_array().unwrap().len(), 0);
    let other = json_of(&ws.run(&["runs", "list", "--node", "elsewhere", "--json"]));
    assert_eq!(other.as_array().unwrap().len(), 0);
    let out = ws.run(&["runs", "list", "--since", "yesterday"]);
    assert_eq!(out.status.code(), Some(65), "{}", text(&out));
    assert!(stderr(&out).contains("--since"));
    let out = ws.run(&["jobs", "next", "device_stats", "--count", "100000"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let out = ws.run(&["runs", "list", "--limit", "0"]);
    assert_eq!(out.status.code(), Some(65), "{}", text(&out));
}

fn runs_retry_queues_a_new_attempt_and_cancel_stops_a_queued_run(ws: Workspace) {
    ws.ok(&["init"]);
    ws.disable_seeded_jobs();
    ws.ok(&[
        "jobs",
        "add",
        "boom",
        "--type",
        "function",
        "--processor",
        "main",
        "--payload",
        r#"{"function":"debug.fail"}"#,
    ]);
    let queued = json_of(&ws.run(&["jobs", "run", "boom", "--json"]))["run_id"]
        .as_i64()
        .unwrap();
    let out = ws.run(&["runs", "retry", &queued.to_string()]);
    assert_eq!(
        out.status.code(),
        Some(65),
        "a queued run is not retried: {}",
        text(&out)
    );
    ws.ok(&["runs", "cancel", &queued.to_string()]);
    let run = json_of(&ws.run(&["runs", "show", &queued.to_string(), "--json"]));
    assert_eq!(run["status"], "cancelled");
    let out = ws.run(&["runs", "cancel", &queued.to_string()]);
    assert_eq!(
        out.status.code(),
        Some(65),
        "cancelled twice: {}",
        text(&out)
    );
    let retried = json_of(&ws.run(&["runs", "retry", &queued.to_string(), "--json"]));
    let new = retried["run_id"].as_i64().unwrap();
    let run = json_of(&ws.run(&["runs", "show", &new.to_string(), "--json"]));
    assert_eq!(
        (run["status"].as_str(), run["retry_of"].as_i64()),
        (Some("queued"), Some(queued))
    );
    let node = ws.start_node("n1");
    wait_for(10.0, "the retried run to fail", || {
        ws.runs_of("boom")
            .into_iter()
            .find(|r| r.run_id == new && r.status == "failed")
    });
    assert_eq!(node.stop(), Some(0));
    // `runs list --node` lists the runs that node claimed, and only those.
    let by_n1 = json_of(&ws.run(&["runs", "list", "--node", "n1", "--json"]));
    let ids: Vec<i64> = by_n1
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    assert!(ids.contains(&new) && !ids.contains(&queued), "{by_n1}");
    // A failed run is retried as a new attempt too.
    let again = json_of(&ws.run(&["runs", "retry", &new.to_string(), "--json"]));
    let run = json_of(&ws.run(&["runs", "show", &again["run_id"].to_string(), "--json"]));
    assert_eq!(
        (run["status"].as_str(), run["retry_of"].as_i64()),
        (Some("queued"), Some(new))
    );
}

/// Whether `pid` is a live process (a zombie counts as gone).
fn alive(pid: i64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").and_then(|(_, r)| r.chars().next()))
        .is_some_and(|state| !matches!(state, 'Z' | 'X'))
}

fn runs_cancel_stops_a_running_command_and_kills_its_process_group(ws: Workspace) {
    ws.ok(&["init"]);
    ws.disable_seeded_jobs();
    let pidfile = ws.path("child.pid");
    let script = format!("sleep 60 & echo $! > {}; wait", pidfile.display());
    let payload = serde_json::json!({ "argv": ["/bin/sh", "-c", script] }).to_string();
    ws.ok(&[
        "jobs",
        "add",
        "long",
        "--type",
        "command",
        "--processor",
        "main",
        "--payload",
        &payload,
    ]);
    let node = ws.start_node("n1");
    let id = json_of(&ws.run(&["jobs", "run", "long", "--json"]))["run_id"]
        .as_i64()
        .unwrap();
    let child: i64 = wait_for(10.0, "the command to start", || {
        std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|s| s.trim().parse().ok())
    });
    assert!(alive(child));
    let out = ws.ok(&["runs", "cancel", &id.to_string()]);
    assert!(out.contains("asked to cancel"), "{out}");
    let run = wait_for(10.0, "the run to be cancelled", || {
        ws.runs_of("long")
            .into_iter()
            .find(|r| r.run_id == id && r.status == "cancelled")
    });
    assert!(run.error.unwrap_or_default().contains("operator"));
    wait_for(5.0, "the command's child to be killed", || {
        (!alive(child)).then_some(())
    });
    assert_eq!(node.stop(), Some(0));
}

fn a_job_added_while_the_node_is_healthy_runs_at_once_and_says_why(ws: Workspace) {
    // The real ramp (only the required jobs at start), so that "at once" is not the floor.
    ws.set_node_env("JOBVISOR__POLICY__PRIORITY_FLOOR", "1000000");
    // Healthy whatever else this shared machine runs: CPU and PSI thresholds it cannot pass.
    for key in [
        "CPU_STRAINED",
        "CPU_CRITICAL",
        "PSI_STRAINED",
        "PSI_CRITICAL",
    ] {
        ws.set_node_env(&format!("JOBVISOR__POLICY__{key}"), "100");
    }
    ws.ok(&["init"]);
    ws.disable_seeded_jobs();
    let node = ws.start_node("n1");
    let out = ws.ok(&[
        "--node",
        "n1",
        "jobs",
        "add",
        "tick",
        "--type",
        "function",
        "--processor",
        "main",
        "--cron",
        "* * * * * *",
        "--payload",
        r#"{"function":"debug.noop"}"#,
    ]);
    assert!(
        out.contains("standby") && out.contains("jobs pin tick active"),
        "{out}"
    );
    wait_for(15.0, "the new job's first run", || {
        ws.runs_of("tick")
            .into_iter()
            .find(|r| r.status == "succeeded")
    });
    let jobs = json_of(&ws.run(&["--node", "n1", "jobs", "list", "--json"]));
    let tick = jobs
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["name"] == "tick")
        .unwrap();
    assert_eq!(tick["activation"]["state"], "active", "{tick}");
    let table = ws.ok(&["--node", "n1", "jobs", "list"]);
    assert!(
        table.contains("ACTIVATION") && table.contains("operator"),
        "{table}"
    );
    let decisions = ws.ok(&["--node", "n1", "decisions"]);
    assert!(
        decisions.contains("tick") && decisions.contains("operator"),
        "{decisions}"
    );
    // `jobs show` and `jobs next` say the same, for people.
    let show = ws.ok(&["--node", "n1", "jobs", "show", "tick"]);
    assert!(
        show.contains("# activation") && show.contains("active on node `n1`"),
        "{show}"
    );
    let next = ws.ok(&["--node", "n1", "jobs", "next", "tick", "--count", "2"]);
    assert!(next.contains("active on node `n1`"), "{next}");
    // Disabled and enabled again, it is activated again at once (a second operator decision),
    // and runs.
    ws.ok(&["jobs", "disable", "tick"]);
    let activated = |ws: &Workspace| {
        json_of(&ws.run(&["--node", "n1", "decisions", "--json"]))
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["subject"] == "tick" && d["action"] == "activate")
            .count()
    };
    let before = activated(&ws);
    ws.ok(&["jobs", "enable", "tick"]);
    let enabled_at = ws.runs_of("tick").len();
    wait_for(15.0, "the enabled job's activation and a run", || {
        (activated(&ws) > before && ws.runs_of("tick").len() > enabled_at + 1).then_some(())
    });
    assert_eq!(node.stop(), Some(0));
}

fn start_up_activations_are_decisions(ws: Workspace) {
    ws.ok(&["init"]);
    let node = ws.start_node("n1");
    let rows = wait_for(10.0, "start-up decisions", || {
        let d = json_of(&ws.run(&["--node", "n1", "decisions", "--json"]));
        let rows = d.as_array().cloned().unwrap_or_default();
        (!rows.is_empty()).then_some(rows)
    });
    assert!(
        rows.iter().any(
            |d| d["action"] == "activate" && d["reason"].as_str().unwrap().contains("start-up")
        ),
        "{rows:?}"
    );
    assert_eq!(node.stop(), Some(0));
}

fn an_object_added_while_the_node_runs_is_usable_at_once_in_the_data_folder(ws: Workspace) {
    ws.ok(&["init"]);
    ws.disable_seeded_jobs();
    let node = ws.start_node("n1");
    ws.ok(&["objects", "add", "notes", "--conn-string", "notes.db"]);
    ws.ok(&[
        "jobs",
        "add",
        "mk",
        "--type",
        "sql",
        "--processor",
        "main",
        "--payload",
        r#"{"object":"notes","sql":"CREATE TABLE IF NOT EXISTS notes (n INTEGER)"}"#,
    ]);
    ws.ok(&["jobs", "run", "mk"]);
    let run = wait_for(10.0, "the sql run", || {
        ws.runs_of("mk")
            .into_iter()
            .find(|r| r.finished_at.is_some())
    });
    assert_eq!(run.status, "succeeded", "{run:?}");
    assert_eq!(node.stop(), Some(0));
    assert!(
        ws.path("data").join("notes.db").exists(),
        "a relative conn_string is a file in the data folder"
    );
    assert!(!ws.path("notes.db").exists());
}

#[test]
fn run_honours_the_node_flag_and_logs_to_a_file_have_no_colour() {
    let ws = Workspace::new();
    ws.ok(&["init"]);
    // support::start_node names its node with `run --node NAME`, the one documented flag.
    let node = ws.start_node("named-by-flag");
    assert_eq!(node.stop(), Some(0));
    let log = std::fs::read_to_string(ws.path("named-by-flag.log")).unwrap();
    assert!(log.contains("named-by-flag"), "{log}");
    let conn = crate::support::open_db(ws.db());
    let names: Vec<String> = conn
        .prepare("SELECT node_name FROM node")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(names, ["named-by-flag"], "the node row is named by --node");
    assert!(!log.contains('\u{1b}'), "colour codes in a log file: {log}");
}

fn a_second_signal_stops_at_once_and_returns_running_runs(ws: Workspace) {
    ws.ok(&["init"]);
    ws.disable_seeded_jobs();
    ws.set_node_env("JOBVISOR__NODE__SHUTDOWN_GRACE", "30000");
    ws.ok(&[
        "jobs",
        "add",
        "long",
        "--type",
        "command",
        "--processor",
        "main",
        "--payload",
        r#"{"argv":["sleep","60"]}"#,
    ]);
    let mut node = ws.start_node("n1");
    ws.ok(&["jobs", "run", "long"]);
    wait_for(10.0, "the run to start", || {
        ws.runs_of("long")
            .into_iter()
            .find(|r| r.status == "running")
    });
    let pid = node.child.id() as i32;
    let t0 = std::time::Instant::now();
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    std::thread::sleep(std::time::Duration::from_millis(300));
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let status = node.child.wait().unwrap();
    let took = t0.elapsed();
    std::mem::forget(node);
    assert_eq!(status.code(), Some(0));
    assert!(
        took.as_secs_f64() < 10.0,
        "stopped after {took:?} with a 30 s grace"
    );
    let run = ws.runs_of("long").pop().unwrap();
    assert_eq!(run.status, "queued", "returned to the queue: {run:?}");
}

fn failing_runs_are_logged_at_warn_once_a_minute_per_job(ws: Workspace) {
    ws.ok(&["init"]);
    ws.disable_seeded_jobs();
    let out = ws.run(&[
        "jobs",
        "add",
        "ghost",
        "--type",
        "function",
        "--processor",
        "main",
        "--cron",
        "* * * * * *",
        "--payload",
        r#"{"function":"no.such.fn"}"#,
    ]);
    assert!(out.status.success(), "{}", text(&out));
    ws.ok(&["jobs", "pin", "ghost", "active", "--node", "n1"]);
    let node = ws.start_node("n1");
    wait_for(15.0, "three failed runs", || {
        let failed = ws
            .runs_of("ghost")
            .into_iter()
            .filter(|r| r.status == "failed")
            .count();
        (failed >= 3).then_some(())
    });
    assert_eq!(node.stop(), Some(0));
    let log = std::fs::read_to_string(ws.path("n1.log")).unwrap();
    let warnings: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("run failed") && l.contains("ghost"))
        .collect();
    assert_eq!(warnings.len(), 1, "one line a minute per job: {log}");
    assert!(warnings[0].contains("no.such.fn"), "{}", warnings[0]);
}

fn a_standby_job_activated_later_writes_one_skipped_row_not_one_per_missed_slot(ws: Workspace) {
    ws.ok(&["init"]);
    ws.disable_seeded_jobs();
    ws.ok(&[
        "jobs",
        "add",
        "tick",
        "--type",
        "function",
        "--processor",
        "main",
        "--cron",
        "* * * * * *",
        "--payload",
        r#"{"function":"debug.noop"}"#,
    ]);
    ws.ok(&["jobs", "pin", "tick", "inactive", "--node", "n1"]);
    let node = ws.start_node("n1");
    // Standby for a few seconds: slots pass while the job does not run.
    std::thread::sleep(std::time::Duration::from_secs(4));
    assert!(ws.runs_of("tick").is_empty());
    ws.ok(&["jobs", "pin", "tick", "active", "--node", "n1"]);
    wait_for(10.0, "the job to run after its activation", || {
        ws.runs_of("tick")
            .into_iter()
            .find(|r| r.status == "succeeded")
    });
    assert_eq!(node.stop(), Some(0));
    let runs = ws.runs_of("tick");
    let first_run = runs
        .iter()
        .filter(|r| r.status == "succeeded")
        .filter_map(|r| r.scheduled_for)
        .min()
        .expect("the catch-up run is a slot's");
    // The slots the standby passed are those before the first run. A node slowed down later
    // (a loaded machine) may coalesce slots it missed then into a row of their own: not the
    // standby's.
    let skipped: Vec<_> = runs
        .into_iter()
        .filter(|r| r.status == "skipped" && r.scheduled_for < Some(first_run))
        .collect();
    println!("skipped rows after activation: {skipped:?}");
    assert!(skipped.len() <= 1, "one summary row at most: {skipped:?}");
    if let Some(row) = skipped.first() {
        assert!(
            row.error.as_deref().unwrap_or("").contains("slots"),
            "{row:?}"
        );
    }
}

fn a_recurring_job_that_keeps_failing_backs_off_and_says_why(ws: Workspace) {
    ws.ok(&["init"]);
    ws.disable_seeded_jobs();
    ws.ok(&[
        "jobs",
        "add",
        "flaky",
        "--type",
        "function",
        "--processor",
        "main",
        "--cron",
        "* * * * * *",
        "--payload",
        r#"{"function":"debug.fail"}"#,
    ]);
    ws.ok(&["jobs", "pin", "flaky", "active", "--node", "n1"]);
    let node = ws.start_node("n1");
    let failed = || {
        ws.runs_of("flaky")
            .into_iter()
            .filter(|r| r.status == "failed")
            .count()
    };
    wait_for(15.0, "three failed runs", || (failed() >= 3).then_some(()));
    // Backing off now: a minute before the next try, whatever the per-second schedule says.
    std::thread::sleep(std::time::Duration::from_secs(4));
    let after = failed();
    let job = json_of(&ws.run(&["--node", "n1", "jobs", "show", "flaky", "--json"]));
    assert_eq!(node.stop(), Some(0));
    assert_eq!(after, 3, "no run while backing off");
    let why = job["backoff"].as_str().unwrap_or_default();
    assert!(
        why.contains("backing off after 3 consecutive failed runs"),
        "{job}"
    );
}

/// Issue 27, point 2d: a second node started under a held name was told to "choose another
/// --node-name", a flag `--help` no longer shows. The refusal names the flag, the
/// configuration key and the environment variable that set a node's name, and exits 75.
#[test]
fn regression_a_held_node_name_refusal_names_the_real_flag() {
    let ws = Workspace::new();
    ws.ok(&["init"]);
    ws.disable_seeded_jobs();
    let first = ws.start_node("n1");
    let refused = match ws.try_start_node("n1") {
        Ok(second) => {
            second.stop();
            panic!("a second node took the held name `n1`");
        }
        Err(out) => out,
    };
    assert_eq!(first.stop(), Some(0));
    assert!(refused.starts_with("exit Some(75)"), "{refused}");
    assert!(
        refused.contains("node `n1` is already running")
            && refused.contains("--node NAME")
            && refused.contains("node.name")
            && refused.contains("JOBVISOR__NODE__NAME")
            && !refused.contains("--node-name"),
        "{refused}"
    );
    let help = ws.ok(&["run", "--help"]);
    assert!(!help.contains("--node-name"), "{help}");
}

/// Issue 27, point 16: a first start's banner said to sign in with a password, which the
/// `admin` it creates does not have (it gets a token). The banner says how to give it one; the
/// command it names works, and the banner of a later start no longer speaks of `admin`.
#[test]
fn regression_the_first_start_banner_says_how_admin_gets_a_password() {
    use std::io::{BufRead, Write};
    let ws = Workspace::new();
    let banner = |ws: &Workspace| -> String {
        let mut child = Command::new(env!("CARGO_BIN_EXE_jobvisor"))
            .arg("--db")
            .arg(ws.db())
            .args(["run", "--bind", "127.0.0.1:0", "--node", "n1", "--data-dir"])
            .arg(ws.path("data"))
            .current_dir(ws.dir.path())
            .env_remove("JOBVISOR_CONFIG")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut seen = String::new();
        for line in std::io::BufReader::new(stdout).lines() {
            let line = line.unwrap();
            seen.push_str(&line);
            seen.push('\n');
            if line.trim_start().starts_with("web ui:") {
                break;
            }
        }
        // SAFETY: signalling our own child process.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        assert_eq!(child.wait().unwrap().code(), Some(0), "{seen}");
        seen
    };
    let first = banner(&ws);
    assert!(
        first.contains("token:")
            && first.contains("`admin` has none yet")
            && first.contains("jobvisor users passwd admin"),
        "{first}"
    );
    let mut passwd = Command::new(env!("CARGO_BIN_EXE_jobvisor"))
        .arg("--db")
        .arg(ws.db())
        .args(["users", "passwd", "admin"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    passwd
        .stdin
        .take()
        .unwrap()
        .write_all(b"a long enough password\n")
        .unwrap();
    let out = passwd.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let again = banner(&ws);
    assert!(
        !again.contains("token:") && again.contains("`jobvisor users passwd NAME` sets one"),
        "{again}"
    );
}
