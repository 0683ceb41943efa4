//! The CLI end to end: init and seeding, job edits, listings, exit codes, configuration.

use crate::support::{Workspace, text};

crate::on_both_backends!(
    first_start_seeds_later_starts_keep_operator_edits,
    jobs_add_validates_against_the_catalog,
    unknown_names_exit_65,
    listings_are_aligned_tables_or_json,
    missing_input_exits_66_and_help_lists_exit_codes,
    jobs_next_lists_fire_times_and_explains_the_schedule,
);

fn first_start_seeds_later_starts_keep_operator_edits(ws: Workspace) {
    let out = ws.ok(&["init"]);
    assert!(out.contains("new catalog seeded with 7 job(s)"), "{out}");
    ws.ok(&[
        "jobs",
        "edit",
        "device_stats",
        "--priority",
        "77",
        "--run-every",
        "3",
    ]);
    ws.ok(&["jobs", "disable", "catalog_backup"]);
    ws.ok(&["jobs", "remove", "object_prune"]);
    let out = ws.ok(&["init"]);
    assert!(out.contains("not re-seeded"), "{out}");
    let list = ws.ok(&["jobs", "list", "--json"]);
    let jobs: serde_json::Value = serde_json::from_str(&list).unwrap();
    let jobs = jobs.as_array().unwrap();
    assert_eq!(jobs.len(), 6);
    let device = jobs.iter().find(|j| j["name"] == "device_stats").unwrap();
    assert_eq!(device["priority"], 77);
    assert_eq!(device["run_every"], 3);
    let backup = jobs.iter().find(|j| j["name"] == "catalog_backup").unwrap();
    assert_eq!(backup["enabled"], false);
}

fn jobs_add_validates_against_the_catalog(ws: Workspace) {
    ws.ok(&["init"]);
    let out = ws.run(&[
        "jobs",
        "add",
        "x",
        "--type",
        "function",
        "--processor",
        "ghost",
        "--payload",
        r#"{"function":"f"}"#,
    ]);
    assert_eq!(out.status.code(), Some(65), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("processor `ghost` is not defined"));
    let out = ws.run(&[
        "jobs",
        "add",
        "x",
        "--type",
        "function",
        "--processor",
        "main",
        "--payload",
        "[1]",
    ]);
    assert_eq!(out.status.code(), Some(65));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--payload"));
    let out = ws.run(&[
        "jobs",
        "add",
        "x",
        "--type",
        "function",
        "--processor",
        "main",
        "--run-on-the",
        "60",
        "--payload",
        r#"{"function":"f"}"#,
    ]);
    assert_eq!(out.status.code(), Some(65));
    assert!(String::from_utf8_lossy(&out.stderr).contains("run_on_the"));
    ws.ok(&[
        "jobs",
        "add",
        "x",
        "--type",
        "function",
        "--processor",
        "main",
        "--object",
        "stat",
        "--run-every",
        "5",
        "--payload",
        r#"{"function":"f"}"#,
    ]);
    let show = ws.ok(&["jobs", "show", "x"]);
    assert!(
        show.contains("[job.x]")
            && show.contains("objects = [\"stat\"]")
            && show.contains("run_every = 5"),
        "{show}"
    );
    let out = ws.run(&[
        "jobs",
        "add",
        "x",
        "--type",
        "function",
        "--processor",
        "main",
        "--payload",
        r#"{"function":"f"}"#,
    ]);
    assert_eq!(out.status.code(), Some(65), "adding twice must fail");
}

fn unknown_names_exit_65(ws: Workspace) {
    ws.ok(&["init"]);
    for args in [
        &["jobs", "show", "nope"][..],
        &["jobs", "enable", "nope"],
        &["jobs", "remove", "nope"],
        &["runs", "show", "42"],
    ] {
        let out = ws.run(args);
        assert_eq!(out.status.code(), Some(65), "{args:?}: {}", text(&out));
        assert!(String::from_utf8_lossy(&out.stderr).contains("does not exist"));
    }
    let out = ws.run(&["runs", "list", "--status", "exploded"]);
    assert_eq!(out.status.code(), Some(65));
}

fn listings_are_aligned_tables_or_json(ws: Workspace) {
    ws.ok(&["init"]);
    let table = ws.ok(&["processors", "list"]);
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("NAME") && lines.len() == 3, "{table}");
    let col = lines[0].find("INSTANCES").unwrap();
    assert!(
        lines[1..]
            .iter()
            .all(|l| l[col..].chars().next().unwrap().is_ascii_digit()),
        "{table}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&ws.ok(&["objects", "list", "--json"])).unwrap();
    assert_eq!(json.as_array().unwrap().len(), 2);
    let runs: serde_json::Value =
        serde_json::from_str(&ws.ok(&["runs", "list", "--json"])).unwrap();
    assert_eq!(runs, serde_json::json!([]));
}

fn missing_input_exits_66_and_help_lists_exit_codes(ws: Workspace) {
    let out = ws.run(&["check", "no-such-file.conf"]);
    assert_eq!(out.status.code(), Some(66));
    let help = ws.ok(&["--help"]);
    assert!(
        help.contains("Exit codes:") && help.contains("78"),
        "{help}"
    );
}

#[test]
fn config_errors_name_file_line_and_exit_78() {
    let ws = Workspace::new();
    let cfg = ws.write(
        "node.toml",
        "[database]\nbusy_timeout = 10\n\n[http]\nbnd = \"0.0.0.0:1\"\n",
    );
    let out = ws.run(&["--config", &cfg.display().to_string(), "init"]);
    assert_eq!(out.status.code(), Some(78), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("node.toml:5:1") && stderr.contains("bnd"),
        "{stderr}"
    );
    assert!(!ws.db().exists());
    let defaults = ws.ok(&["config", "--print-defaults"]);
    assert!(defaults.contains("[database]") && defaults.contains("Default: 5000"));
    let effective = ws.ok(&["config"]);
    assert!(effective.contains("catalog.db"), "{effective}");
}

fn jobs_next_lists_fire_times_and_explains_the_schedule(ws: Workspace) {
    ws.ok(&["init"]);
    ws.ok(&[
        "jobs",
        "add",
        "eom",
        "--type",
        "function",
        "--processor",
        "main",
        "--run-on-the",
        "15",
        "--run-date",
        "#last_day_of_month#",
        "--timezone",
        "UTC",
        "--payload",
        r#"{"function":"f"}"#,
    ]);
    let out = ws.ok(&["jobs", "next", "eom", "--count", "3"]);
    assert!(
        out.contains("at minute 15 of every hour, on the last day of the month"),
        "{out}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&ws.ok(&["jobs", "next", "eom", "--count", "3", "--json"])).unwrap();
    // Times in JSON are RFC 3339.
    let next: Vec<chrono::DateTime<chrono::Utc>> = json["next"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().parse().unwrap())
        .collect();
    assert_eq!(next.len(), 3);
    for pair in next.windows(2) {
        assert!(pair[1] > pair[0]);
    }
    for at in next {
        assert_eq!(chrono::Timelike::minute(&at), 15);
        let tomorrow = at + chrono::Duration::days(1);
        assert_eq!(
            chrono::Datelike::day(&tomorrow),
            1,
            "{at} is not the last day of its month"
        );
    }
}
