//! Command jobs: a program started with argv (a shell only when `shell = true`), a cleared
//! environment plus an allowlist, output captured up to a limit. A run's params reach the
//! program only as `JOBVISOR_PARAMS` (JSON): never its argv, environment or folder.
//!
//! Invariant: each command runs in its own process group; on cancel the whole group is killed
//! and the child reaped before this returns, so no process outlives its run.

use std::process::Stdio;

use serde_json::Value as Json;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;
use tokio::sync::watch;

use super::{ExecLimits, ExecResult};
use crate::catalog::queue::ClaimedRun;

/// Runs a command job; returns the result and the captured output.
pub async fn run(
    run: &ClaimedRun,
    limits: &ExecLimits,
    mut cancel: watch::Receiver<bool>,
) -> (ExecResult, Option<String>) {
    let p = &run.payload;
    let shell = p.get("shell").and_then(Json::as_bool).unwrap_or(false);
    let argv: Vec<String> = match (
        p.get("argv").and_then(Json::as_array),
        p.get("command").and_then(Json::as_str),
    ) {
        (Some(argv), _) => argv
            .iter()
            .filter_map(|a| a.as_str().map(String::from))
            .collect(),
        (None, Some(line)) if shell => vec!["/bin/sh".into(), "-c".into(), line.into()],
        _ => {
            return (
                ExecResult::Err("payload needs argv (or command with shell = true)".into()),
                None,
            );
        }
    };
    let Some((program, args)) = argv.split_first() else {
        return (ExecResult::Err("payload.argv is empty".into()), None);
    };
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd.process_group(0).kill_on_drop(true);
    for key in &limits.env_allowlist {
        if let Ok(value) = std::env::var(key) {
            cmd.env(key, value);
        }
    }
    if let Some(Json::Object(vars)) = p.get("env") {
        for (k, v) in vars {
            cmd.env(
                k,
                v.as_str()
                    .map(String::from)
                    .unwrap_or_else(|| v.to_string()),
            );
        }
    }
    cmd.env("JOBVISOR_RUN_ID", run.run_id.to_string())
        .env("JOBVISOR_JOB", &*run.job_name);
    if let Some(params) = &run.params {
        cmd.env("JOBVISOR_PARAMS", params.to_string());
    }
    if let Some(dir) = p.get("cwd").and_then(Json::as_str) {
        cmd.current_dir(dir);
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return (
                ExecResult::Err(format!("cannot start `{program}`: {e}")),
                None,
            );
        }
    };
    let pid = child.id().unwrap_or(0) as i32;
    let limit = limits.output_limit;
    let out = tokio::spawn(read_capped(child.stdout.take(), limit));
    let err = tokio::spawn(read_capped(child.stderr.take(), limit));
    let status = tokio::select! {
        // An exit already there wins over a cancel that came with it: a node stopped (SIGSTOP)
        // past a run's timeout finds both when it continues (issue 27, point 2a).
        biased;
        status = child.wait() => Some(status),
        _ = cancel.wait_for(|c| *c) => None,
    };
    let status = match status {
        Some(status) => Some(status),
        None => {
            kill_group(pid);
            // Reap, so the pid is gone when the run is recorded. An exit code (not a signal)
            // means the child had exited before the kill: it ends as it ended.
            match child.wait().await {
                Ok(exited) if exited.code().is_some() => Some(Ok(exited)),
                _ => None,
            }
        }
    };
    // Grandchildren may hold the pipes open; do not wait for them long.
    let grace = std::time::Duration::from_millis(200);
    let stdout = tokio::time::timeout(grace, out)
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
    let stderr = tokio::time::timeout(grace, err)
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
    let mut log = format!("[pid {pid}]\n");
    log.push_str(&stdout);
    if !stderr.is_empty() {
        log.push_str("\n[stderr]\n");
        log.push_str(&stderr);
    }
    let result = match status {
        None => ExecResult::Cancelled,
        Some(Err(e)) => ExecResult::Err(format!("waiting for `{program}`: {e}")),
        Some(Ok(s)) if s.success() => {
            ExecResult::Ok(serde_json::json!({ "exit_code": 0, "pid": pid }))
        }
        Some(Ok(s)) => {
            use std::os::unix::process::ExitStatusExt;
            let why = match (s.code(), s.signal()) {
                (Some(code), _) => format!("exit code {code}"),
                (None, Some(sig)) => format!("killed by signal {sig}"),
                _ => "failed".into(),
            };
            let tail: String = stderr
                .lines()
                .last()
                .unwrap_or("")
                .chars()
                .take(200)
                .collect();
            ExecResult::Err(if tail.is_empty() {
                format!("`{program}`: {why}")
            } else {
                format!("`{program}`: {why}: {tail}")
            })
        }
    };
    (result, Some(log))
}

/// SIGKILL to the whole group led by `pid` (negative pid = process group).
fn kill_group(pid: i32) {
    if pid > 0 {
        // SAFETY: kill(2) with a negative pid signals that process group; no memory is touched.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    }
}

async fn read_capped<R: AsyncRead + Unpin>(pipe: Option<R>, limit: usize) -> String {
    let Some(mut pipe) = pipe else {
        return String::new();
    };
    let mut kept = Vec::new();
    let mut buf = [0u8; 8192];
    let mut dropped = 0usize;
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = limit.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
                dropped += n.saturating_sub(room);
            }
        }
    }
    let mut text = String::from_utf8_lossy(&kept).into_owned();
    if dropped > 0 {
        text.push_str(&format!("\n[… {dropped} more bytes not kept]"));
    }
    text
}
