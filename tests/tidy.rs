//! Tidy: the pure core stays pure. Fails if a file of the core mentions an async runtime, a
//! database driver, a clock read or filesystem/network IO in its code (CONVENTIONS item 3).
//!
//! Invariant: reads files only under `CARGO_MANIFEST_DIR`, and only to look at their text.
//! Comments are not scanned, so that a module doc may state its invariant by naming what it
//! does not import; a mention in code, a string or an attribute is a failure.

use std::path::{Path, PathBuf};

/// The pure core, relative to the crate root: directories are scanned recursively.
const PURE_CORE: &[&str] = &["src/schedule", "src/sim.rs", "src/policy", "src/lease.rs"];

/// Entries of [`PURE_CORE`] that may be absent because they are not written yet. Every other
/// entry must exist, so that moving a module cannot silently turn this test into a no-op.
const NOT_WRITTEN_YET: &[&str] = &["src/policy"];

/// What the core must not mention, and why each is banned.
const FORBIDDEN: &[(&str, &str)] = &[
    ("actix", "the actor runtime stays outside the core"),
    ("tokio", "the async runtime stays outside the core"),
    ("rusqlite", "only the catalog layer talks to SQLite"),
    ("postgres", "only the catalog layer talks to PostgreSQL"),
    ("SystemTime::now", "the core takes `now` as an argument"),
    ("Instant::now", "the core takes `now` as an argument"),
    ("Utc::now", "the core takes `now` as an argument"),
    ("Local::now", "the core takes `now` as an argument"),
    ("std::fs", "the core does no filesystem IO"),
    ("std::net", "the core does no network IO"),
];

/// The text of `source` with `//` comments removed, line by line.
fn code_only(source: &str) -> Vec<(usize, String)> {
    source
        .lines()
        .enumerate()
        .map(|(i, line)| {
            let code = match line.find("//") {
                Some(at) => &line[..at],
                None => line,
            };
            (i + 1, code.to_string())
        })
        .collect()
}

/// Every forbidden mention in `source`, as `(line, word, why)`.
fn violations(source: &str) -> Vec<(usize, &'static str, &'static str)> {
    let mut found = Vec::new();
    for (line_no, code) in code_only(source) {
        for &(word, why) in FORBIDDEN {
            if code.contains(word) {
                found.push((line_no, word, why));
            }
        }
    }
    found
}

fn rust_files(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_dir() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
            .unwrap_or_else(|e| panic!("cannot list {}: {e}", path.display()))
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for entry in entries {
            rust_files(&entry, out);
        }
    } else if path.extension().is_some_and(|e| e == "rs") {
        out.push(path.to_path_buf());
    }
}

#[test]
fn the_pure_core_mentions_no_runtime_database_clock_or_io() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for entry in PURE_CORE {
        let path = root.join(entry);
        if !path.exists() {
            assert!(
                NOT_WRITTEN_YET.contains(entry),
                "{} is listed as pure core but does not exist; update PURE_CORE",
                path.display()
            );
            continue;
        }
        let before = files.len();
        rust_files(&path, &mut files);
        assert!(files.len() > before, "{} holds no .rs file", path.display());
    }
    let mut report = String::new();
    for file in &files {
        let source = std::fs::read_to_string(file).unwrap();
        for (line, word, why) in violations(&source) {
            report.push_str(&format!(
                "{}:{line}: mentions `{word}`: {why}\n",
                file.display()
            ));
        }
    }
    assert!(report.is_empty(), "the pure core is not pure:\n{report}");
}

#[test]
fn the_scanner_catches_code_and_ignores_comments() {
    let clean = "//! Reads no clock; imports neither actix nor rusqlite.\nfn f(now_ms: i64) -> i64 { now_ms } // not Instant::now\n";
    assert_eq!(violations(clean), vec![]);
    let dirty = "use std::fs;\nlet t = std::time::SystemTime::now();\nlet s = \"tokio\";\n";
    let words: Vec<&str> = violations(dirty).into_iter().map(|(_, w, _)| w).collect();
    assert_eq!(words, ["std::fs", "SystemTime::now", "tokio"]);
}

/// Ways to register an actix route that bypass the OpenAPI document (utoipa-actix-web collects
/// paths only from `service(...)` of `#[utoipa::path]` handlers).
const UNDOCUMENTED_ROUTES: &[&str] =
    &[".route(", "web::resource(", "web::scope(", "Resource::new("];

#[test]
fn every_http_route_is_registered_through_the_openapi_document() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src/http"), &mut files);
    assert!(files.len() > 3, "src/http holds the API");
    let mut report = String::new();
    for file in &files {
        let source = std::fs::read_to_string(file).unwrap();
        for (line, code) in code_only(&source) {
            for word in UNDOCUMENTED_ROUTES {
                if code.contains(word) {
                    report.push_str(&format!("{}:{line}: `{word}`\n", file.display()));
                }
            }
        }
        // Every handler that actix registers by macro is described for OpenAPI too.
        let lines: Vec<&str> = source.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            let l = l.trim_start();
            let is_route = ["#[get(", "#[post(", "#[put(", "#[patch(", "#[delete("]
                .iter()
                .any(|m| l.starts_with(m));
            if is_route
                && !lines[..i]
                    .iter()
                    .rev()
                    .take(12)
                    .any(|p| p.contains("#[utoipa::path"))
            {
                report.push_str(&format!(
                    "{}:{}: a route without #[utoipa::path]\n",
                    file.display(),
                    i + 1
                ));
            }
        }
    }
    assert!(
        report.is_empty(),
        "routes outside the OpenAPI document:\n{report}"
    );
}

/// The web UI's routes are outside the OpenAPI document (they answer HTML to browsers with
/// sessions), so they are kept to one place instead: `src/ui/mod.rs` registers them only
/// through its `ui_routes!` table, which also lists them in `ui::ROUTES` — the list that
/// `it::ui::every_ui_route_but_the_public_ones_needs_a_session` requests without a session.
#[test]
fn ui_routes_are_registered_only_through_the_listed_table() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src/ui"), &mut files);
    assert!(files.len() > 3, "src/ui holds the web UI");
    let mut report = String::new();
    let mut registrations = Vec::new();
    for file in &files {
        let source = std::fs::read_to_string(file).unwrap();
        for (line, code) in code_only(&source) {
            for word in UNDOCUMENTED_ROUTES
                .iter()
                .chain(&[".service(", "#[get(", "#[post("])
            {
                if code.contains(word) {
                    registrations.push(format!("{}:{line}: `{word}`", file.display()));
                }
            }
        }
    }
    // The table's one `.route(`, the `/` redirect's, and the scope that wraps the table in the
    // session guard: nothing else registers anything.
    let expected = [
        "src/ui/mod.rs:.route(",
        "src/ui/mod.rs:.route(",
        "src/ui/mod.rs:web::scope(",
        "src/ui/mod.rs:.service(",
    ];
    let mut found: Vec<String> = registrations
        .iter()
        .map(|r| {
            let (file, rest) = r.split_once(':').unwrap();
            let word = rest.split('`').nth(1).unwrap();
            let file = file
                .strip_prefix(&format!("{}/", root.display()))
                .unwrap_or(file);
            format!("{file}:{word}")
        })
        .collect();
    found.sort();
    let mut want: Vec<String> = expected.iter().map(|s| s.to_string()).collect();
    want.sort();
    if found != want {
        report.push_str(&registrations.join("\n"));
    }
    assert!(
        report.is_empty(),
        "UI routes registered outside the ui_routes! table:\n{report}"
    );
    let mod_rs = std::fs::read_to_string(root.join("src/ui/mod.rs")).unwrap();
    assert!(
        mod_rs.contains("macro_rules! ui_routes") && mod_rs.contains("pub const ROUTES"),
        "the table lists what it registers"
    );
}

/// What only `src/catalog` may name: the database drivers and their pool (DESIGN.md §8).
const DRIVERS: &[&str] = &["rusqlite", "r2d2", "postgres::", "tokio_postgres"];

#[test]
fn only_the_catalog_names_a_database_driver() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    let catalog = root.join("src/catalog");
    let mut report = String::new();
    let mut scanned = 0;
    for file in files.iter().filter(|f| !f.starts_with(&catalog)) {
        scanned += 1;
        let source = std::fs::read_to_string(file).unwrap();
        for (line, code) in code_only(&source) {
            for word in DRIVERS {
                if code.contains(word) {
                    report.push_str(&format!("{}:{line}: `{word}`\n", file.display()));
                }
            }
        }
    }
    assert!(
        scanned > 30,
        "src holds the crate ({scanned} files outside the catalog)"
    );
    assert!(
        report.is_empty(),
        "outside src/catalog, code names a database driver (use the catalog's verbs):\n{report}"
    );
}

/// The top-level module a file of `src/` belongs to (`src/runtime/x.rs` → `runtime`).
fn module_of(root: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(root.join("src")).unwrap();
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

/// Top-level modules each module's code names as `crate::<module>`.
fn module_graph(
    root: &Path,
) -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    let mut graph: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
        Default::default();
    for file in &files {
        let from = module_of(root, file);
        let source = std::fs::read_to_string(file).unwrap();
        for (_, code) in code_only(&source) {
            let mut rest = code.as_str();
            while let Some(at) = rest.find("crate::") {
                rest = &rest[at + "crate::".len()..];
                let to: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !to.is_empty() && to != from {
                    graph.entry(from.clone()).or_default().insert(to);
                }
            }
        }
    }
    graph
}

/// A path of imports from `from` back to `to`, if there is one.
fn path_between(
    graph: &std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
    from: &str,
    to: &str,
) -> Option<Vec<String>> {
    let mut stack = vec![vec![from.to_string()]];
    let mut seen = std::collections::BTreeSet::new();
    while let Some(path) = stack.pop() {
        let last = path.last().unwrap().clone();
        if last == to {
            return Some(path);
        }
        if !seen.insert(last.clone()) {
            continue;
        }
        for next in graph.get(&last).into_iter().flatten() {
            let mut p = path.clone();
            p.push(next.clone());
            stack.push(p);
        }
    }
    None
}

#[test]
fn modules_import_each_other_one_way_only() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let graph = module_graph(root);
    assert!(
        graph.get("runtime").is_some_and(|t| t.contains("catalog")),
        "the scanner sees `crate::` paths: {graph:?}"
    );
    let mut report = String::new();
    for (from, targets) in &graph {
        for to in targets {
            if let Some(back) = path_between(&graph, to, from) {
                report.push_str(&format!("{from} -> {}\n", back.join(" -> ")));
            }
        }
    }
    assert!(
        report.is_empty(),
        "import cycles between modules:\n{report}"
    );
    // Configuration is plain data near the bottom: it names no layer above the core.
    for above in [
        "catalog", "runtime", "ops", "http", "cli", "daemon", "executor",
    ] {
        assert!(
            !graph.get("config").is_some_and(|t| t.contains(above)),
            "config imports {above}"
        );
    }
}

/// Issue 11, point 19: the README's test command is the script that installs what the tests
/// drive beyond a Rust toolchain (stress-ng for the CPU and memory loads, faketime, promtool,
/// the OpenAPI validator) and then runs `cargo test`; `.ci/run` runs that same script.
#[test]
fn the_readme_test_command_installs_what_the_tests_need_and_ci_runs_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |p: &str| std::fs::read_to_string(root.join(p)).unwrap();
    let readme = read("README.md");
    let setup = readme
        .split("## Set up")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("README has a Set up section");
    assert!(
        setup.contains(".ci/test") && setup.contains("cargo run --release -- run"),
        "the two commands: {setup}"
    );
    let test = read(".ci/test");
    for needed in [
        "stress-ng",
        "faketime",
        "prometheus",
        "openapi-spec-validator",
    ] {
        assert!(test.contains(needed), ".ci/test installs {needed}");
    }
    assert!(
        test.contains("cargo test --locked"),
        ".ci/test runs the suite"
    );
    let run = read(".ci/run");
    assert!(
        run.lines().any(|l| l.trim() == ".ci/test"),
        ".ci/run runs the README's test command"
    );
}
