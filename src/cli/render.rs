//! How the CLI prints for people (aligned tables, local times, durations and sizes with units)
//! and for scripts (JSON).

use std::io::Write as _;

use chrono::{DateTime, Local};
use serde::Serialize;
use serde_json::Value as Json;

use crate::ops::decisions::DecisionView;
use crate::ops::runs::TreeView;
use crate::ops::view::Time;

/// Prints `value` as pretty JSON on stdout.
pub fn json<T: Serialize + ?Sized>(value: &T) {
    let text =
        serde_json::to_string_pretty(value).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    println!("{text}");
}

/// A local time for people: `2026-12-01 06:13:51`, or `-`.
pub fn time(t: Option<Time>) -> String {
    t.and_then(|t| DateTime::from_timestamp_millis(t.ms()))
        .map(|t| {
            t.with_timezone(&Local)
                .format("%Y-%m-%d %H:%M:%S")
                .to_string()
        })
        .unwrap_or_else(|| "-".into())
}

/// A local time with its UTC offset: `2026-12-01 06:13:51.123 +01:00`, or `-`.
pub fn time_long(t: Option<Time>) -> String {
    t.and_then(|t| DateTime::from_timestamp_millis(t.ms()))
        .map(|t| {
            t.with_timezone(&Local)
                .format("%Y-%m-%d %H:%M:%S%.3f %:z")
                .to_string()
        })
        .unwrap_or_else(|| "-".into())
}

/// A duration for people: `350 ms`, `2.5 s`, `3 min 5 s`, `2 h 10 min`, or `-`.
pub fn duration(ms: Option<i64>) -> String {
    let Some(ms) = ms else {
        return "-".into();
    };
    match ms {
        ..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        60_000..3_600_000 => format!("{} min {} s", ms / 60_000, (ms % 60_000) / 1000),
        _ => format!("{} h {} min", ms / 3_600_000, (ms % 3_600_000) / 60_000),
    }
}

/// A JSON value on one line, strings without quotes; `-` for none.
pub fn value(v: Option<&Json>) -> String {
    match v {
        None | Some(Json::Null) => "-".into(),
        Some(Json::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// The first `n` characters of `s` on one line, with `…` when cut.
pub fn abbreviate(s: &str, n: usize) -> String {
    let one_line = s.replace(['\n', '\r'], " ");
    if one_line.chars().count() <= n {
        one_line
    } else {
        one_line.chars().take(n).collect::<String>() + "…"
    }
}

/// Prints rows as a table with aligned columns.
pub fn table(headers: &[&str], rows: Vec<Vec<String>>) {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = std::io::stdout().lock();
    let line = |cells: Vec<&str>| -> String {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        padded.join("  ").trim_end().to_string()
    };
    let _ = writeln!(out, "{}", line(headers.to_vec()));
    for row in &rows {
        let _ = writeln!(out, "{}", line(row.iter().map(String::as_str).collect()));
    }
}

/// The decision log as a table: one renderer for the local listing (`jobvisor decisions`)
/// and the remote one (`--url`, from the API's JSON), so both show the same columns — the
/// cause and the readings with their units and thresholds included.
pub fn decisions(rows: &[DecisionView]) {
    let headers = [
        "TIME", "NODE", "DECISION", "CAUSE", "SUBJECT", "REASON", "READINGS",
    ];
    let rows = rows
        .iter()
        .map(|d| {
            vec![
                // Samples may be a second apart: milliseconds and the zone.
                time_long(Some(d.at)),
                d.node.clone(),
                d.action.clone(),
                d.cause.clone(),
                d.subject.clone().unwrap_or_else(|| "-".into()),
                d.reason.clone(),
                evidence(d.evidence.as_ref()),
            ]
        })
        .collect();
    table(&headers, rows);
}

/// The nodes sharing a catalog as a table: one renderer for the local `nodes list` and the
/// remote one (`--url`, from the API's JSON).
pub fn nodes(rows: &[crate::ops::node::NodeView]) {
    let headers = [
        "NAME",
        "STATE",
        "HOST",
        "PID",
        "VERSION",
        "STARTED",
        "HEARTBEAT",
        "LEASE TTL",
        "STALE",
        "FENCED BY",
    ];
    let rows = rows
        .iter()
        .map(|n| {
            vec![
                n.name.clone(),
                n.state.as_str().into(),
                n.host.clone().unwrap_or_else(|| "-".into()),
                n.pid.map_or("-".into(), |p| p.to_string()),
                n.version.clone().unwrap_or_else(|| "-".into()),
                time(n.started_at),
                n.heartbeat_age_ms
                    .map_or("-".into(), |ms| format!("{} ago", duration(Some(ms)))),
                duration(Some(n.lease_ttl_ms)),
                n.stale_completions.to_string(),
                match (&n.fenced_by, n.fenced_at) {
                    (Some(by), at) => format!("{by} at {}", time(at)),
                    _ => "-".into(),
                },
            ]
        })
        .collect();
    table(&headers, rows);
}

/// The pauses in force.
pub fn pauses(rows: &[crate::ops::pauses::PauseView]) {
    let headers = ["SCOPE", "NAME", "NODE", "BY", "AT", "REASON"];
    let rows = rows
        .iter()
        .map(|p| {
            vec![
                p.scope.as_str().into(),
                p.name.clone(),
                p.node.clone().unwrap_or_else(|| "(every node)".into()),
                p.paused_by.clone(),
                time(Some(p.paused_at)),
                p.reason.clone().unwrap_or_default(),
            ]
        })
        .collect();
    table(&headers, rows);
}

/// A decision's readings for people: `cpu 97.1% (critical: > 97%), memory 22.9 GiB (ok: >=
/// 200 MiB)`; rows logged before evidence had units and thresholds: `cpu 97.0 %, memory 22.9
/// GiB`.
fn evidence(v: Option<&Json>) -> String {
    let Some(v) = v else {
        return String::new();
    };
    if let Ok(items) = serde_json::from_value::<Vec<crate::policy::Evidence>>(v.clone()) {
        return items
            .iter()
            .map(|e| e.describe())
            .collect::<Vec<_>>()
            .join(", ");
    }
    let pairs: Vec<(String, f64)> = match v {
        Json::Array(items) => items
            .iter()
            .filter_map(|p| Some((p.get(0)?.as_str()?.to_string(), p.get(1)?.as_f64()?)))
            .collect(),
        Json::Object(map) => map
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), v.as_f64()?)))
            .collect(),
        _ => return v.to_string(),
    };
    if pairs.is_empty() {
        return v.to_string();
    }
    pairs
        .iter()
        .map(|(k, x)| match k.as_str() {
            "memory" | "memory_available" | "disk_available" => format!("{k} {}", bytes(*x)),
            "network" | "net_bytes_per_s" => format!("{k} {}/s", bytes(*x)),
            _ => format!("{k} {x:.1} %"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Bytes with a binary unit: `22.9 GiB`.
pub fn bytes(n: f64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n;
    let mut i = 0;
    while v >= 1024.0 && i < units.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{v:.0} B")
    } else {
        format!("{v:.1} {}", units[i])
    }
}

/// `label  value` lines, the labels aligned.
pub fn fields(pairs: &[(&str, String)]) {
    let width = pairs.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (k, v) in pairs {
        let mut lines = v.lines();
        println!("{k:<width$}  {}", lines.next().unwrap_or(""));
        for l in lines {
            println!("{:<width$}  {l}", "");
        }
    }
}

/// Prints a run's tree: the root's status and counts, then each run indented under its parent
/// (a workflow's steps by name; superseded attempts marked). One renderer for the local and
/// the remote command.
pub fn tree(t: &TreeView) {
    let counts: Vec<String> = t.counts.iter().map(|(s, n)| format!("{n} {s}")).collect();
    println!(
        "tree of run {}: {}{} ({} runs: {})",
        t.root,
        t.status,
        if t.ended { "" } else { ", not ended" },
        t.runs.len(),
        counts.join(", ")
    );
    let rows = t
        .runs
        .iter()
        .map(|n| {
            let r = &n.run;
            let name = match &r.step {
                Some(step) => format!("{}{step}", "  ".repeat(n.depth)),
                None => format!("{}{}", "  ".repeat(n.depth), r.job),
            };
            let mut status = r.status.clone();
            if n.superseded {
                status.push_str(" (superseded)");
            }
            vec![
                r.id.to_string(),
                name,
                r.job.clone(),
                status,
                r.attempt.to_string(),
                time(r.started_at),
                duration(r.elapsed_ms),
                r.error
                    .as_deref()
                    .map_or(String::new(), |e| abbreviate(e, 60)),
            ]
        })
        .collect();
    table(
        &[
            "ID", "RUN", "JOB", "STATUS", "ATTEMPT", "STARTED", "ELAPSED", "ERROR",
        ],
        rows,
    );
    if t.truncated {
        println!("(more runs than shown: the tree is larger than a view holds)");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_with_units() {
        assert_eq!(duration(Some(350)), "350 ms");
        assert_eq!(duration(Some(2_500)), "2.5 s");
        assert_eq!(duration(Some(185_000)), "3 min 5 s");
        assert_eq!(duration(Some(7_800_000)), "2 h 10 min");
        assert_eq!(duration(None), "-");
    }

    #[test]
    fn sizes_have_units() {
        assert_eq!(bytes(24_568_639_488.0), "22.9 GiB");
        assert_eq!(bytes(512.0), "512 B");
    }
}
