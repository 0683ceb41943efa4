//! Shared helpers: run the real binary against a temporary folder.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A temporary folder with a catalog path in it.
pub struct Workspace {
    /// Keeps the folder alive.
    pub dir: tempfile::TempDir,
}

impl Workspace {
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn db(&self) -> PathBuf {
        self.path("catalog.db")
    }

    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    /// Runs `jobvisor --db <db> ARGS` in the folder, with no config from the environment.
    pub fn run(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_jobvisor"))
            .arg("--db")
            .arg(self.db())
            .args(args)
            .current_dir(self.dir.path())
            .env_remove("JOBVISOR_CONFIG")
            .output()
            .unwrap()
    }

    /// Like `run`, asserting success; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "jobvisor {args:?} failed: {}",
            text(&out)
        );
        String::from_utf8(out.stdout).unwrap()
    }
}

/// stdout and stderr of a command, for messages.
pub fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Every file in `dir` whose name starts with `prefix`, with its bytes.
pub fn snapshot(dir: &Path, prefix: &str) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix))
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect();
    files.sort();
    files
}
