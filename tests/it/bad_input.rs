//! The bad-input table (issue 11): catalog files, command-line arguments, configuration,
//! `--db` targets and pipes, each with the exit code it must get. Every case: no panic, a
//! message on stderr, and the catalog (or the foreign file) byte-for-byte unchanged.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::support::{Workspace, text};

/// A case: its name, the arguments (`{db}`, `{dir}` and `{f:NAME}` are replaced), the exit code.
struct Case {
    name: &'static str,
    args: &'static [&'static str],
    code: i32,
}

const fn case(name: &'static str, args: &'static [&'static str], code: i32) -> Case {
    Case { name, args, code }
}

/// Catalog files, each checked and imported (`{f:NAME}` names one of these).
const FILES: &[(&str, &str)] = &[
    ("syntax", "[job.a\ntype = \"function\"\n"),
    ("unknown_field", "[processor.p]\ncolour = \"red\"\n"),
    ("wrong_type", "[processor.p]\ninstances = \"two\"\n"),
    (
        "missing_type",
        "[processor.p]\n[job.a]\nprocessor = \"p\"\n",
    ),
    (
        "unknown_processor",
        "[job.a]\ntype = \"function\"\nprocessor = \"ghost\"\npayload = { function = \"f\" }\n",
    ),
    (
        "bad_cron",
        "[processor.p]\n[job.a]\ntype = \"function\"\nprocessor = \"p\"\ncron = \"61 * * * *\"\npayload = { function = \"f\" }\n",
    ),
    (
        "run_on_the_77",
        "[processor.p]\n[job.a]\ntype = \"function\"\nprocessor = \"p\"\nrun_on_the = 77\npayload = { function = \"f\" }\n",
    ),
    (
        "run_at_25",
        "[processor.p]\n[job.a]\ntype = \"function\"\nprocessor = \"p\"\nrun_at = \"25:00\"\npayload = { function = \"f\" }\n",
    ),
    (
        "bad_timezone",
        "[processor.p]\n[job.a]\ntype = \"function\"\nprocessor = \"p\"\nrun_every = 5\ntimezone = \"Mars/Olympus\"\npayload = { function = \"f\" }\n",
    ),
    (
        "negative_timeout",
        "[processor.p]\n[job.a]\ntype = \"function\"\nprocessor = \"p\"\ntimeout = -1\npayload = { function = \"f\" }\n",
    ),
    (
        "max_below_instances",
        "[processor.p]\ninstances = 4\nmax_instances = 2\n",
    ),
    (
        "port_70000",
        "[processor.p]\nip_address = \"10.0.0.1\"\nport = 70000\n",
    ),
    (
        "object_twice",
        "[processor.p]\n[object.o]\n[job.a]\ntype = \"function\"\nprocessor = \"p\"\nobjects = [\"o\", \"o\"]\npayload = { function = \"f\" }\n",
    ),
    (
        "workflow_cycle",
        "[processor.p]\n[job.a]\ntype = \"function\"\nprocessor = \"p\"\npayload = { function = \"f\" }\n[job.b]\ntype = \"function\"\nprocessor = \"p\"\npayload = { function = \"f\" }\n[job.w]\ntype = \"workflow\"\nprocessor = \"p\"\npayload = { steps = [{ job = \"a\", after = [\"b\"] }, { job = \"b\", after = [\"a\"] }] }\n",
    ),
    (
        "sql_on_catalog",
        "[processor.p]\n[object.stat]\nconn_string = \"catalog\"\n[job.a]\ntype = \"sql\"\nprocessor = \"p\"\npayload = { object = \"stat\", sql = \"delete from job\" }\n",
    ),
    (
        "url_not_http",
        "[processor.p]\n[job.a]\ntype = \"url\"\nprocessor = \"p\"\npayload = { url = \"ftp://x\" }\n",
    ),
    (
        "command_no_argv",
        "[processor.p]\n[job.a]\ntype = \"command\"\nprocessor = \"p\"\npayload = { }\n",
    ),
    (
        "payload_not_table",
        "[processor.p]\n[job.a]\ntype = \"function\"\nprocessor = \"p\"\npayload = 5\n",
    ),
    ("version_2", "version = 2\n[processor.p]\n"),
    ("name_with_space", "[processor.\"my proc\"]\n"),
    ("name_dot_dot", "[processor.\"..\"]\n"),
    ("name_dash_x", "[processor.-x]\n"),
    (
        "instances_billion",
        "[processor.p]\ninstances = 1000000000\n",
    ),
    (
        "ip_not_a_host",
        "[processor.p]\nip_address = \"not a host!\"\n",
    ),
    (
        "name_too_long",
        "[processor.pppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppp]\n",
    ),
    (
        "rpc_on_local",
        "[processor.p]\n[job.a]\ntype = \"rpc\"\nprocessor = \"p\"\npayload = { method = \"m\" }\n",
    ),
    (
        "command_on_remote",
        "[processor.far]\nip_address = \"10.0.0.1\"\n[job.a]\ntype = \"command\"\nprocessor = \"far\"\npayload = { argv = [\"true\"] }\n",
    ),
    (
        "two_schedules",
        "[processor.p]\n[job.a]\ntype = \"function\"\nprocessor = \"p\"\nrun_every = 5\ncron = \"* * * * *\"\npayload = { function = \"f\" }\n",
    ),
    (
        "unknown_group",
        "[processor.p]\n[job.a]\ntype = \"function\"\nprocessor = \"p\"\ngroup = \"nope\"\npayload = { function = \"f\" }\n",
    ),
    (
        "cron_day_32",
        "[processor.p]\n[job.a]\ntype = \"function\"\nprocessor = \"p\"\ncron = \"0 0 32 * *\"\npayload = { function = \"f\" }\n",
    ),
    (
        "jobs_only_unknown_group",
        "[job.a]\ntype = \"function\"\nprocessor = \"main\"\ngroup = \"ghost\"\npayload = { function = \"f\" }\n",
    ),
    (
        "misfire_bogus",
        "[processor.p]\n[job.a]\ntype = \"function\"\nprocessor = \"p\"\nmisfire_policy = \"later\"\npayload = { function = \"f\" }\n",
    ),
];

/// Node configuration files (`{c:NAME}`).
const CONFIGS: &[(&str, &str)] = &[
    ("unknown_key", "[node]\ncolour = \"red\"\n"),
    ("wrong_type", "[health]\ninterval = \"fast\"\n"),
    ("bad_timezone", "[node]\ntimezone = \"Mars/Olympus\"\n"),
    ("bad_bind", "[http]\nbind = \"localhost\"\n"),
    ("bad_log_filter", "[log]\nlevel = \"info,[[[\"\n"),
    ("bad_durability", "[database]\ndurability = \"paranoid\"\n"),
    ("pool_zero", "[database]\nread_pool_size = 0\n"),
    ("watch_zero", "[database]\nwatch_interval = 0\n"),
    ("interval_10", "[health]\ninterval = 10\n"),
    ("toml_syntax", "[node\nname = \"x\"\n"),
];

const CASES: &[Case] = &[
    // Catalog files: check (no database) and import (nothing changed).
    case("check: TOML syntax error", &["check", "{f:syntax}"], 78),
    case("check: unknown field", &["check", "{f:unknown_field}"], 78),
    case("check: wrong type", &["check", "{f:wrong_type}"], 78),
    case(
        "check: job without type",
        &["check", "{f:missing_type}"],
        78,
    ),
    case(
        "check: unknown processor",
        &["check", "{f:unknown_processor}"],
        78,
    ),
    case("check: bad cron", &["check", "{f:bad_cron}"], 78),
    case("check: run_on_the 77", &["check", "{f:run_on_the_77}"], 78),
    case("check: run_at 25:00", &["check", "{f:run_at_25}"], 78),
    case(
        "check: unknown time zone",
        &["check", "{f:bad_timezone}"],
        78,
    ),
    case(
        "check: negative timeout",
        &["check", "{f:negative_timeout}"],
        78,
    ),
    case(
        "check: max_instances < instances",
        &["check", "{f:max_below_instances}"],
        78,
    ),
    case("check: port 70000", &["check", "{f:port_70000}"], 78),
    case(
        "check: object listed twice",
        &["check", "{f:object_twice}"],
        78,
    ),
    case(
        "check: workflow cycle",
        &["check", "{f:workflow_cycle}"],
        78,
    ),
    case(
        "check: sql job on the catalog",
        &["check", "{f:sql_on_catalog}"],
        78,
    ),
    case("check: url not http", &["check", "{f:url_not_http}"], 78),
    case(
        "check: command without argv",
        &["check", "{f:command_no_argv}"],
        78,
    ),
    case(
        "check: payload not a table",
        &["check", "{f:payload_not_table}"],
        78,
    ),
    case("check: format version 2", &["check", "{f:version_2}"], 78),
    case(
        "check: name with a space",
        &["check", "{f:name_with_space}"],
        78,
    ),
    case(
        "check: 101-character name",
        &["check", "{f:name_too_long}"],
        78,
    ),
    case("check: name `..`", &["check", "{f:name_dot_dot}"], 78),
    case("check: name `-x`", &["check", "{f:name_dash_x}"], 78),
    case(
        "check: instances = 1000000000",
        &["check", "{f:instances_billion}"],
        78,
    ),
    case(
        "import: ip_address not a host",
        &["import", "{f:ip_not_a_host}"],
        78,
    ),
    case(
        "jobs add `..`",
        &[
            "jobs",
            "add",
            "..",
            "--type",
            "function",
            "--processor",
            "main",
        ],
        65,
    ),
    case(
        "jobs add `.`",
        &[
            "jobs",
            "add",
            ".",
            "--type",
            "function",
            "--processor",
            "main",
        ],
        65,
    ),
    case(
        "processors edit --instances 1000000000",
        &["processors", "edit", "main", "--instances", "1000000000"],
        65,
    ),
    case(
        "processors add --ip-address not a host",
        &["processors", "add", "far", "--ip-address", "not a host!"],
        65,
    ),
    case(
        "check: rpc job on a local processor",
        &["check", "{f:rpc_on_local}"],
        78,
    ),
    case(
        "check: command job on a remote processor",
        &["check", "{f:command_on_remote}"],
        78,
    ),
    case(
        "check: two schedule kinds",
        &["check", "{f:two_schedules}"],
        78,
    ),
    case("check: unknown group", &["check", "{f:unknown_group}"], 78),
    case(
        "check: misfire policy bogus",
        &["check", "{f:misfire_bogus}"],
        78,
    ),
    case("check: invalid UTF-8", &["check", "{f:invalid_utf8}"], 66),
    case("check: a folder", &["check", "{dir}"], 66),
    case("check: missing file", &["check", "no-such.conf"], 66),
    case(
        "check: millix not JSON",
        &["check", "--format", "millix", "{f:syntax}"],
        78,
    ),
    case(
        "check: millix wrong shape",
        &["check", "--format", "millix", "{f:millix_shape}"],
        78,
    ),
    case(
        "check: format bogus",
        &["check", "--format", "yaml", "{f:syntax}"],
        2,
    ),
    case("import: TOML syntax error", &["import", "{f:syntax}"], 78),
    case(
        "import: unknown processor",
        &["import", "{f:unknown_processor}"],
        78,
    ),
    case("import: bad cron", &["import", "{f:bad_cron}"], 78),
    case(
        "import: sql job on the catalog",
        &["import", "{f:sql_on_catalog}"],
        78,
    ),
    case(
        "import: workflow cycle",
        &["import", "{f:workflow_cycle}"],
        78,
    ),
    case("check: cron day 32", &["check", "{f:cron_day_32}"], 78),
    case("import: cron day 32", &["import", "{f:cron_day_32}"], 78),
    case(
        "import: jobs only, a group in neither file nor catalog",
        &["import", "{f:jobs_only_unknown_group}"],
        78,
    ),
    case("import: missing file", &["import", "no-such.conf"], 66),
    case("import: invalid UTF-8", &["import", "{f:invalid_utf8}"], 66),
    case(
        "import --strict: unknown function",
        &["import", "--strict", "{f:unknown_function}"],
        65,
    ),
    // Command-line arguments.
    case("unknown command", &["frobnicate"], 2),
    case("unknown flag", &["jobs", "list", "--colour"], 2),
    case(
        "jobs add without --type",
        &["jobs", "add", "x", "--processor", "main"],
        2,
    ),
    case(
        "jobs add without --processor",
        &["jobs", "add", "x", "--type", "function"],
        2,
    ),
    case(
        "jobs add --type bogus",
        &["jobs", "add", "x", "--type", "cron", "--processor", "main"],
        65,
    ),
    case(
        "jobs add --priority abc",
        &[
            "jobs",
            "add",
            "x",
            "--type",
            "function",
            "--processor",
            "main",
            "--priority",
            "abc",
        ],
        2,
    ),
    case(
        "jobs add --payload not JSON",
        &[
            "jobs",
            "add",
            "x",
            "--type",
            "function",
            "--processor",
            "main",
            "--payload",
            "{nope",
        ],
        65,
    ),
    case(
        "jobs add --payload array",
        &[
            "jobs",
            "add",
            "x",
            "--type",
            "function",
            "--processor",
            "main",
            "--payload",
            "[1]",
        ],
        65,
    ),
    case(
        "jobs add without payload.function",
        &[
            "jobs",
            "add",
            "x",
            "--type",
            "function",
            "--processor",
            "main",
        ],
        65,
    ),
    case(
        "jobs add unknown processor",
        &[
            "jobs",
            "add",
            "x",
            "--type",
            "function",
            "--processor",
            "ghost",
            "--payload",
            "{\"function\":\"debug.noop\"}",
        ],
        65,
    ),
    case(
        "jobs add existing name",
        &[
            "jobs",
            "add",
            "device_stats",
            "--type",
            "function",
            "--processor",
            "main",
            "--payload",
            "{\"function\":\"debug.noop\"}",
        ],
        65,
    ),
    case(
        "jobs add bad name",
        &[
            "jobs",
            "add",
            "a b",
            "--type",
            "function",
            "--processor",
            "main",
            "--payload",
            "{\"function\":\"debug.noop\"}",
        ],
        65,
    ),
    case(
        "jobs add --strict unknown function",
        &[
            "jobs",
            "add",
            "x",
            "--type",
            "function",
            "--processor",
            "main",
            "--payload",
            "{\"function\":\"nope\"}",
            "--strict",
        ],
        65,
    ),
    case(
        "jobs add sql on the catalog",
        &[
            "jobs",
            "add",
            "x",
            "--type",
            "sql",
            "--processor",
            "main",
            "--payload",
            "{\"object\":\"stat\",\"sql\":\"delete from job\"}",
        ],
        65,
    ),
    case(
        "jobs edit --cron bad",
        &["jobs", "edit", "device_stats", "--cron", "* * *"],
        65,
    ),
    case(
        "jobs edit --timezone bad",
        &["jobs", "edit", "device_stats", "--timezone", "Mars/Olympus"],
        65,
    ),
    case(
        "jobs edit --run-at 99:00",
        &[
            "jobs",
            "edit",
            "device_stats",
            "--clear-schedule",
            "--run-at",
            "99:00",
        ],
        65,
    ),
    case(
        "jobs edit --misfire-policy bogus",
        &["jobs", "edit", "device_stats", "--misfire-policy", "later"],
        65,
    ),
    case(
        "jobs edit --overlap-policy bogus",
        &["jobs", "edit", "device_stats", "--overlap-policy", "maybe"],
        65,
    ),
    case(
        "jobs edit --max-attempts 0",
        &["jobs", "edit", "device_stats", "--max-attempts", "0"],
        65,
    ),
    case(
        "jobs edit --backoff-max < base",
        &[
            "jobs",
            "edit",
            "device_stats",
            "--backoff-base",
            "5000",
            "--backoff-max",
            "10",
        ],
        65,
    ),
    case(
        "jobs edit --object unknown",
        &["jobs", "edit", "device_stats", "--object", "nope"],
        65,
    ),
    case(
        "jobs edit --required maybe",
        &["jobs", "edit", "device_stats", "--required", "maybe"],
        2,
    ),
    case(
        "jobs edit missing job",
        &["jobs", "edit", "ghost", "--priority", "1"],
        65,
    ),
    case("jobs show missing job", &["jobs", "show", "ghost"], 65),
    case("jobs remove missing job", &["jobs", "remove", "ghost"], 65),
    case("jobs enable missing job", &["jobs", "enable", "ghost"], 65),
    case(
        "jobs pin bogus",
        &["jobs", "pin", "device_stats", "sometimes"],
        2,
    ),
    case(
        "jobs pin missing job",
        &["jobs", "pin", "ghost", "active"],
        65,
    ),
    case(
        "jobs run --params not JSON",
        &["jobs", "run", "device_stats", "--params", "x=1"],
        65,
    ),
    case(
        "jobs run --params array",
        &["jobs", "run", "device_stats", "--params", "[1,2]"],
        65,
    ),
    case("jobs run missing job", &["jobs", "run", "ghost"], 65),
    case(
        "jobs next --count 0",
        &["jobs", "next", "device_stats", "--count", "0"],
        2,
    ),
    case(
        "jobs next --count 100000",
        &["jobs", "next", "device_stats", "--count", "100000"],
        2,
    ),
    case("jobs next missing job", &["jobs", "next", "ghost"], 65),
    case("runs show abc", &["runs", "show", "abc"], 2),
    case("runs show 999", &["runs", "show", "999"], 65),
    case("runs cancel 999", &["runs", "cancel", "999"], 65),
    case("runs retry 999", &["runs", "retry", "999"], 65),
    case("runs list --limit 0", &["runs", "list", "--limit", "0"], 65),
    case(
        "runs list --limit 5000",
        &["runs", "list", "--limit", "5000"],
        65,
    ),
    case(
        "runs list --status bogus",
        &["runs", "list", "--status", "done"],
        65,
    ),
    case(
        "runs list --since bogus",
        &["runs", "list", "--since", "yesterday"],
        65,
    ),
    case(
        "runs list --job missing",
        &["runs", "list", "--job", "ghost"],
        65,
    ),
    case("decisions --limit 0", &["decisions", "--limit", "0"], 65),
    case("processors add bad name", &["processors", "add", "a/b"], 65),
    case(
        "processors add existing",
        &["processors", "add", "main"],
        65,
    ),
    case(
        "processors edit --instances 0",
        &["processors", "edit", "main", "--instances", "0"],
        65,
    ),
    case(
        "processors edit --max-instances x",
        &["processors", "edit", "main", "--max-instances", "x"],
        65,
    ),
    case(
        "processors edit --port 0",
        &[
            "processors",
            "edit",
            "main",
            "--ip-address",
            "10.0.0.1",
            "--port",
            "0",
        ],
        65,
    ),
    case(
        "jobs add --cron day 32",
        &[
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
            "{\"function\":\"f\"}",
        ],
        65,
    ),
    case("stats: an unknown series", &["stats", "nope.series"], 65),
    case(
        "processors edit missing",
        &["processors", "edit", "ghost", "--instances", "2"],
        65,
    ),
    case(
        "processors remove in use",
        &["processors", "remove", "main"],
        65,
    ),
    case(
        "objects add --type bogus",
        &["objects", "add", "o", "--type", "blob"],
        65,
    ),
    case(
        "objects add prune without ttl",
        &["objects", "add", "o", "--allow-prune", "true"],
        65,
    ),
    case(
        "objects edit missing",
        &["objects", "edit", "ghost", "--description", "x"],
        65,
    ),
    case("objects remove in use", &["objects", "remove", "stat"], 65),
    // Configuration.
    case(
        "config: unknown key",
        &["--config", "{c:unknown_key}", "jobs", "list"],
        78,
    ),
    case(
        "config: wrong type",
        &["--config", "{c:wrong_type}", "jobs", "list"],
        78,
    ),
    case(
        "config: unknown time zone",
        &["--config", "{c:bad_timezone}", "jobs", "list"],
        78,
    ),
    case(
        "config: bind without port",
        &["--config", "{c:bad_bind}", "jobs", "list"],
        78,
    ),
    case(
        "config: bad log filter",
        &[
            "--config",
            "{c:bad_log_filter}",
            "run",
            "--bind",
            "127.0.0.1:0",
        ],
        78,
    ),
    case(
        "config: durability bogus",
        &["--config", "{c:bad_durability}", "jobs", "list"],
        78,
    ),
    case(
        "config: read_pool_size 0",
        &["--config", "{c:pool_zero}", "jobs", "list"],
        78,
    ),
    case(
        "config: watch_interval 0",
        &["--config", "{c:watch_zero}", "jobs", "list"],
        78,
    ),
    case(
        "config: health.interval 10",
        &["--config", "{c:interval_10}", "jobs", "list"],
        78,
    ),
    case(
        "config: TOML syntax error",
        &["--config", "{c:toml_syntax}", "jobs", "list"],
        78,
    ),
    case(
        "config: missing file",
        &["--config", "no-such.toml", "jobs", "list"],
        78,
    ),
    case(
        "config: a folder",
        &["--config", "{dir}", "jobs", "list"],
        78,
    ),
    case(
        "run --log-format xml",
        &["run", "--bind", "127.0.0.1:0", "--log-format", "xml"],
        78,
    ),
    case("run --bind bogus", &["run", "--bind", "nowhere"], 78),
    // --db targets (the foreign and empty files must stay as they are).
    case(
        "--db another app's database",
        &["--db", "{foreign}", "jobs", "list"],
        78,
    ),
    case(
        "--db another app's database: init",
        &["--db", "{foreign}", "init"],
        78,
    ),
    case("--db an empty file", &["--db", "{empty}", "init"], 78),
    case("--db a folder", &["--db", "{dir}", "jobs", "list"], 78),
    case("--db a CSV file", &["--db", "{f:csv}", "export"], 78),
    case(
        "--db a PostgreSQL server that does not answer",
        &["--db", "postgres://u:pw@127.0.0.1:1/db", "jobs", "list"],
        75,
    ),
    case(
        "--db no such folder (read)",
        &["--db", "no/such/x.db", "jobs", "list"],
        66,
    ),
    case(
        "--db no such folder (write)",
        &["--db", "no/such/x.db", "jobs", "disable", "x"],
        66,
    ),
    case("--db a lone -wal", &["--db", "{lonewal}", "init"], 78),
];

fn expand(arg: &str, ws: &Workspace, extra: &std::collections::HashMap<&str, PathBuf>) -> String {
    if let Some(name) = arg.strip_prefix("{f:").and_then(|a| a.strip_suffix('}')) {
        return ws.path(&format!("{name}.conf")).display().to_string();
    }
    if let Some(name) = arg.strip_prefix("{c:").and_then(|a| a.strip_suffix('}')) {
        return ws.path(&format!("cfg-{name}.toml")).display().to_string();
    }
    match arg {
        "{dir}" => ws.dir.path().display().to_string(),
        other => match extra.get(other) {
            Some(p) => p.display().to_string(),
            None => other.to_string(),
        },
    }
}

fn bytes(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_default()
}

#[test]
fn bad_inputs_fail_cleanly_with_the_documented_code() {
    let ws = Workspace::new();
    ws.ok(&["init"]);
    for (name, body) in FILES {
        ws.write(&format!("{name}.conf"), body);
    }
    ws.write("unknown_function.conf", "[processor.main]\n[job.u]\ntype = \"function\"\nprocessor = \"main\"\npayload = { function = \"nope\" }\n");
    ws.write("millix_shape.conf", "{\"job_list\": 5}");
    ws.write("csv.conf", "a,b\n1,2\n");
    std::fs::write(
        ws.path("invalid_utf8.conf"),
        b"[processor.p]\ndescription = \"\xff\xfe\"\n",
    )
    .unwrap();
    for (name, body) in CONFIGS {
        ws.write(&format!("cfg-{name}.toml"), body);
    }
    let foreign = ws.path("shop.db");
    let conn = crate::support::open_db(&foreign);
    conn.execute_batch("CREATE TABLE customers (id INTEGER PRIMARY KEY);")
        .unwrap();
    drop(conn);
    let empty = ws.path("empty.db");
    std::fs::write(&empty, b"").unwrap();
    let lonewal = ws.path("gone.db");
    std::fs::write(ws.path("gone.db-wal"), vec![1u8; 4096]).unwrap();
    let extra: std::collections::HashMap<&str, PathBuf> = [
        ("{foreign}", foreign.clone()),
        ("{empty}", empty.clone()),
        ("{lonewal}", lonewal.clone()),
    ]
    .into_iter()
    .collect();
    let watched = [ws.db(), foreign, empty, ws.path("gone.db-wal")];
    let before: Vec<Vec<u8>> = watched.iter().map(|p| bytes(p)).collect();
    let export = ws.ok(&["export"]);

    let mut rows = Vec::new();
    let mut failures = Vec::new();
    for c in CASES {
        let args: Vec<String> = c.args.iter().map(|a| expand(a, &ws, &extra)).collect();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_jobvisor"));
        if !args.iter().any(|a| a == "--db") {
            cmd.arg("--db").arg(ws.db());
        }
        let out = cmd
            .args(&args)
            .current_dir(ws.dir.path())
            .env_remove("JOBVISOR_CONFIG")
            .env_remove("JOBVISOR_LOG")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        let first = err
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
            .trim()
            .to_string();
        let code = out.status.code();
        let unchanged = watched.iter().map(|p| bytes(p)).collect::<Vec<_>>() == before;
        rows.push(format!(
            "| {} | `jobvisor {}` | {} | {} |",
            c.name,
            c.args.join(" "),
            code.map_or("signal".into(), |c| c.to_string()),
            first.replace('|', "\\|")
        ));
        if code != Some(c.code) || err.contains("panicked") || first.is_empty() || !unchanged {
            failures.push(format!(
                "{}: expected exit {}, unchanged files: {unchanged}\n{}",
                c.name,
                c.code,
                text(&out)
            ));
        }
    }
    // Pipes: a closed stdout ends quietly (SIGPIPE's default action), never a panic.
    for args in [
        &["export"][..],
        &["jobs", "list"],
        &["config", "--print-defaults"],
        &["--help"],
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_jobvisor"))
            .arg("--db")
            .arg(ws.db())
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        rows.push(format!(
            "| closed pipe | `jobvisor {} \\| true` | {} | {} |",
            args.join(" "),
            out.status
                .code()
                .map_or("SIGPIPE".into(), |c| c.to_string()),
            err.lines().next().unwrap_or("(quiet)")
        ));
        if err.contains("panicked") || out.status.code() == Some(101) {
            failures.push(format!("closed pipe {args:?}: {err}"));
        }
    }
    // A read-only catalog file: reading commands work, writing ones fail naming the file.
    let ro = Workspace::new();
    ro.ok(&["init"]);
    let ro_before = bytes(&ro.db());
    let guard = crate::support::ReadOnly::make(&ro.db());
    for (args, code) in [
        (&["jobs", "list"][..], 0),
        (&["jobs", "show", "device_stats"], 0),
        (&["export"], 0),
        (&["runs", "list"], 0),
        (&["decisions"], 0),
        (&["jobs", "disable", "device_stats"], 1),
        (&["jobs", "run", "device_stats"], 1),
        (&["processors", "add", "extra"], 1),
        (&["run", "--bind", "127.0.0.1:0"], 1),
    ] {
        let out = ro.run(args);
        let err = String::from_utf8_lossy(&out.stderr);
        let first = err
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("(quiet)");
        rows.push(format!(
            "| read-only catalog | `jobvisor {}` | {} | {} |",
            args.join(" "),
            out.status.code().map_or("signal".into(), |c| c.to_string()),
            first.trim().replace('|', "\\|")
        ));
        let named = code == 0 || err.contains("catalog.db");
        if out.status.code() != Some(code) || err.contains("panicked") || !named {
            failures.push(format!(
                "read-only {args:?}: expected exit {code}\n{}",
                text(&out)
            ));
        }
    }
    drop(guard);
    if bytes(&ro.db()) != ro_before {
        failures.push("the read-only catalog changed".into());
    }
    println!("| case | command | exit | message |\n|---|---|---|---|");
    for r in &rows {
        println!("{r}");
    }
    println!("{} cases, {} failures", rows.len(), failures.len());
    assert!(rows.len() >= 100, "the table has {} cases", rows.len());
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert_eq!(ws.ok(&["export"]), export, "the catalog is unchanged");
}
