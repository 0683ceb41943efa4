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

/// A minimal millix job.json, for the tour's `import --format millix job.json`.
const TOUR_MILLIX: &str = r#"{
  "processor_list": { "localhost": { "instances": 1 } },
  "job_list": {
    "peer_rotation": { "type": "function", "processor": "localhost",
      "payload": { "module": "peer", "function_name": "_doPeerRotation" }, "priority": 0,
      "option_list": { "run_always": 1, "run_delay": 10000, "enable": true } }
  }
}"#;

/// README lines of a ```sh block that a test does not run, and why.
const NOT_RUN: &[(&str, &str)] = &[(
    ".ci/test",
    "the whole test suite, which runs this test: it would run itself",
)];

/// README commands of other tools (by their first word) that a test does not run, and why.
const OTHER_TOOLS: &[(&str, &str)] = &[
    (
        "docker",
        "no container engine on the test machines: service.rs checks the Dockerfile and runs its health check",
    ),
    (
        "sudo",
        "installs a service on the host: service.rs verifies the unit with systemd-analyze",
    ),
    (
        "systemd-analyze",
        "run by service.rs on the unit with this build's binary",
    ),
    ("journalctl", "reads a running service's log"),
];

/// The commands of each ```sh block of `text`: comments dropped, continuation lines joined.
fn shell_blocks(text: &str) -> Vec<Vec<String>> {
    let mut blocks = Vec::new();
    let mut current: Option<Vec<String>> = None;
    let mut pending = String::new();
    for line in text.lines() {
        match (&mut current, line.trim_end()) {
            (None, "```sh") => current = Some(Vec::new()),
            (Some(_), "```") => blocks.push(current.take().unwrap()),
            (Some(block), line) => {
                let code = strip_comment(line);
                if let Some(head) = code.trim_end().strip_suffix('\\') {
                    pending.push_str(head.trim());
                    pending.push(' ');
                } else if !code.trim().is_empty() || !pending.is_empty() {
                    pending.push_str(code.trim());
                    block.push(std::mem::take(&mut pending).trim().to_string());
                }
            }
            (None, _) => {}
        }
    }
    blocks
}

/// `line` up to a `#` that starts a comment (outside quotes, after a space or at the start).
fn strip_comment(line: &str) -> &str {
    let mut quote = None;
    let mut prev = ' ';
    for (i, c) in line.char_indices() {
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '#') if prev == ' ' => return &line[..i],
            _ => {}
        }
        prev = c;
    }
    line
}

/// A command line's words as a shell splits them, and the file a `>` sends stdout to.
fn shell_words(line: &str) -> (Vec<String>, Option<String>) {
    let (mut words, mut word, mut quote, mut started) = (Vec::new(), String::new(), None, false);
    for c in line.chars() {
        match (quote, c) {
            (None, ' ') if started => {
                words.push(std::mem::take(&mut word));
                started = false;
            }
            (None, ' ') => {}
            (None, '\'' | '"') => {
                quote = Some(c);
                started = true;
            }
            (Some(q), c) if c == q => quote = None,
            _ => {
                word.push(c);
                started = true;
            }
        }
    }
    if started {
        words.push(word);
    }
    match words.iter().position(|w| w == ">") {
        Some(i) => {
            let to = words.get(i + 1).cloned();
            words.truncate(i);
            (words, to)
        }
        None => (words, None),
    }
}

/// Issue 27, point 16: the README's tour named a job (`stats`) and a processor (`gpu`) that do
/// not exist and ran `runs show 42` on a catalog without run 42. Every command of the README's
/// ```sh blocks is run here, in order, against a temporary catalog per block, and must exit 0:
/// `jobvisor run` (and `cargo run --release -- run`, the same binary) starts a node on a fresh
/// catalog of its own, as a first start, on a free port; it must print its address and stop on
/// SIGTERM with exit 0 — at once, or at the end of its block when the block sends it `curl`
/// requests (their token and address are the node's; each must answer 200), in which case the
/// block's other commands run on that node's catalog. `> FILE` writes stdout to FILE. The lines
/// of [`NOT_RUN`] are skipped, each for its reason; ``` blocks not marked `sh` hold no commands.
#[test]
fn regression_every_readme_command_runs_as_documented() {
    let readme = include_str!("../../README.md");
    let blocks = shell_blocks(readme);
    assert!(blocks.len() >= 3, "{blocks:?}");
    let mut ran = 0;
    for block in blocks {
        let serves = block.iter().any(|c| c.starts_with("curl "));
        let ws = Workspace::new();
        ws.write("job.json", TOUR_MILLIX);
        let mut node: Option<(crate::support::Node, String)> = None;
        for command in &block {
            if NOT_RUN.iter().any(|(line, _)| command == line)
                || OTHER_TOOLS
                    .iter()
                    .any(|(tool, _)| command.split_whitespace().next() == Some(*tool))
            {
                continue;
            }
            ran += 1;
            let (words, to) = shell_words(command);
            let args: Vec<&str> = match words.iter().map(String::as_str).collect::<Vec<_>>()[..] {
                ["jobvisor", ref rest @ ..] => rest.to_vec(),
                ["cargo", "run", "--release", "--", ref rest @ ..] => rest.to_vec(),
                ["curl", "-H", header, url] => {
                    let (started, token) = node.as_ref().expect("curl needs a node started above");
                    let header = header.replace("jv_…", token);
                    let (name, value) = header.split_once(": ").unwrap();
                    let path = url.trim_start_matches("http://127.0.0.1:7878");
                    let r =
                        crate::support::http_raw(&started.api, "GET", path, &[(name, value)], b"");
                    assert_eq!(r.status, 200, "{command}: {}", r.body);
                    continue;
                }
                _ => panic!("a README command this test does not know how to run: {command}"),
            };
            if args == ["run"] {
                // A first start: on the block's catalog when it serves the block's requests,
                // else on a fresh one of its own, so the tour's catalog holds only its runs.
                let own = Workspace::new();
                let started = if serves { &ws } else { &own }.start_node("readme");
                let token = started.token.clone().expect("a first start prints a token");
                if serves {
                    node = Some((started, token));
                } else {
                    assert_eq!(started.stop(), Some(0), "{command}");
                }
                continue;
            }
            let out = ws.run(&args);
            assert_eq!(out.status.code(), Some(0), "{command}: {}", text(&out));
            if let Some(file) = to {
                std::fs::write(ws.path(&file), &out.stdout).unwrap();
            }
        }
        if let Some((started, _)) = node {
            assert_eq!(started.stop(), Some(0));
        }
    }
    assert!(ran >= 30, "only {ran} README commands ran");
}

/// Issue 27, point 16: `stats nope.series` printed an empty table and exited 0. An unknown
/// series exits 65 naming it; a known one with no values yet is still an empty table.
#[test]
fn regression_an_unknown_stats_series_exits_65_naming_it() {
    let ws = Workspace::new();
    ws.ok(&["init"]);
    let out = ws.run(&["stats", "nope.series"]);
    assert_eq!(out.status.code(), Some(65), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("`nope.series`"), "{stderr}");
    assert!(out.stdout.is_empty(), "{}", text(&out));
    let known = ws.ok(&["stats", "device.cpu_used", "--since", "10m"]);
    assert!(known.starts_with("TIME"), "{known}");
}

/// Issue 27, point 16: a cron out of range in a file read "Component error: Number out of
/// bounds" where `--cron` was clear. One message, naming the field, the value and the range,
/// from a file (at its line) and from the command line.
#[test]
fn regression_a_cron_error_reads_the_same_from_a_file_and_from_the_flag() {
    let ws = Workspace::new();
    ws.ok(&["init"]);
    let wanted = "day-of-month 32 is out of range 1–31 in \"0 0 32 * *\"";
    let file = ws.write(
        "bad.conf",
        "[job.x]\ntype = \"function\"\nprocessor = \"main\"\ncron = \"0 0 32 * *\"\npayload = { function = \"debug.noop\" }\n",
    );
    let file = file.display().to_string();
    let out = ws.run(&["import", &file]);
    assert_eq!(out.status.code(), Some(78), "{}", text(&out));
    let from_file = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        from_file.contains(&format!("{file}:4:")) && from_file.contains(wanted),
        "{from_file}"
    );
    let out = ws.run(&[
        "jobs",
        "add",
        "x",
        "--type",
        "function",
        "--processor",
        "main",
        "--cron",
        "0 0 32 * *",
        "--payload",
        r#"{"function":"debug.noop"}"#,
    ]);
    assert_eq!(out.status.code(), Some(65), "{}", text(&out));
    let from_flag = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(from_flag.contains(wanted), "{from_flag}");
    for stderr in [from_file, from_flag] {
        assert!(!stderr.contains("Component error"), "{stderr}");
    }
}
