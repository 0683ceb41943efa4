//! Benchmark: `jobvisor import` of a large job.conf (issue 27, point 2b: 192,000 jobs took
//! 714 s and 1.7 GB while each created entry was searched for in a list to build the audit
//! row). Target: 192,000 jobs in under 20 s and 300 MB.
//!
//! ```sh
//! cargo build --release --bin jobvisor
//! cargo run --release --example bench_import            # 192,000 jobs; or: -- 50000
//! ```
//!
//! Writes a job.conf of N jobs (mixed schedules, priorities, descriptions, groups and objects;
//! jobs only, on the processors of the seeded catalog), runs `jobvisor init` and then
//! `jobvisor import` of it under `/usr/bin/time -v` on a fresh catalog in a temporary folder,
//! and prints the import's wall time and peak RSS as `time -v` reports them.
//!
//! Invariant: the file is fixed by N, so two runs import the same work.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

const DEFAULT_JOBS: usize = 192_000;

/// job.conf text of `n` jobs on the seeded catalog's processors, groups and objects.
fn catalog_text(n: usize) -> String {
    let mut out = String::with_capacity(n * 180);
    for i in 0..n {
        let _ = writeln!(out, "[job.bulk_{i:06}]");
        out.push_str("type = \"function\"\nprocessor = \"main\"\n");
        let _ = writeln!(out, "priority = {}", i % 200);
        let _ = writeln!(out, "description = \"bulk job number {i}\"");
        match i % 4 {
            0 => {
                let _ = writeln!(out, "run_every = {}", 1 + i % 60);
            }
            1 => {
                let _ = writeln!(out, "cron = \"{} {} * * *\"", i % 60, i % 24);
            }
            2 => {
                let _ = writeln!(out, "run_at = \"{:02}:{:02}\"", i % 24, i % 60);
            }
            _ => {}
        }
        if i % 3 == 0 {
            out.push_str("group = \"monitoring\"\nobjects = [\"stat\"]\n");
        }
        out.push_str("payload = { function = \"debug.noop\" }\n\n");
    }
    out
}

fn binary() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bin = root.join("target/release/jobvisor");
    assert!(
        bin.exists(),
        "build it first: cargo build --release --bin jobvisor"
    );
    bin
}

/// The line of `time -v`'s report that starts with `label`, its value.
fn figure<'a>(report: &'a str, label: &str) -> &'a str {
    report
        .lines()
        .find_map(|l| l.trim().strip_prefix(label))
        .map(|v| v.trim_start_matches(':').trim())
        .unwrap_or("?")
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .map(|a| {
            a.replace([',', '_'], "")
                .parse()
                .expect("N: a number of jobs")
        })
        .unwrap_or(DEFAULT_JOBS);
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("bulk.conf");
    std::fs::write(&conf, catalog_text(n)).unwrap();
    let db = dir.path().join("catalog.db");
    let bin = binary();
    let init = Command::new(&bin)
        .arg("--db")
        .arg(&db)
        .arg("init")
        .output()
        .unwrap();
    assert!(init.status.success(), "init: {init:?}");
    let out = Command::new("/usr/bin/time")
        .arg("-v")
        .arg(&bin)
        .arg("--db")
        .arg(&db)
        .arg("import")
        .arg(&conf)
        .output()
        .expect("/usr/bin/time (Debian package `time`)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "import failed:\n{stderr}");
    let summary = stdout.lines().next().unwrap_or_default();
    println!("{summary}");
    println!(
        "import of {n} jobs: wall {}, max RSS {} kB, file {:.1} MB",
        figure(&stderr, "Elapsed (wall clock) time (h:mm:ss or m:ss)"),
        figure(&stderr, "Maximum resident set size (kbytes)"),
        std::fs::metadata(&conf).unwrap().len() as f64 / 1e6
    );
}
