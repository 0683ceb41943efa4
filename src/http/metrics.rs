//! `/metrics` in the Prometheus text format (version 0.0.4): runs by job and outcome, their
//! duration histograms, claims and stale completions, writer batch sizes (from
//! [`crate::metrics`]); queue depth and lag and activation counts (from the catalog); health
//! readings, the operator's pause and whether writes are paused for the disk (from the
//! engine). `promtool check metrics` accepts it
//! (`tests/it/metrics.rs`).

use std::fmt::Write as _;

use actix_web::{HttpResponse, get, web};
use utoipa_actix_web::service_config::ServiceConfig;

use super::ApiState;
use super::error::{ApiError, ErrorBody};
use crate::metrics::{BATCH_BUCKETS, DURATION_BUCKETS, Histogram};

pub(super) fn routes(cfg: &mut ServiceConfig) {
    cfg.service(metrics);
}

/// A label value, escaped as the text format requires.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn head(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn histogram(out: &mut String, name: &str, labels: &str, bounds: &[f64], h: &Histogram) {
    let mut cumulative = 0;
    for (i, bound) in bounds.iter().enumerate() {
        cumulative += h.buckets.get(i).copied().unwrap_or(0);
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{bound}\"}} {cumulative}");
    }
    let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", h.count);
    let _ = writeln!(out, "{name}_sum{{{labels}}} {}", h.sum);
    let _ = writeln!(out, "{name}_count{{{labels}}} {}", h.count);
}

/// The node's metrics, for Prometheus.
#[utoipa::path(
    tag = "node",
    responses(
        (status = 200, description = "Prometheus text format 0.0.4", content_type = "text/plain", body = String),
        (status = 503, body = ErrorBody),
    )
)]
#[get("/metrics")]
async fn metrics(state: web::Data<ApiState>) -> Result<HttpResponse, ApiError> {
    let now = crate::catalog::now_ms();
    let queue = state.read(move |ops| ops.queue_gauges(now)).await?;
    let pauses = state.read(|ops| ops.pauses()).await?;
    let health = crate::ops::node::health_readings(&state.engine).await?;
    let counted = crate::metrics::snapshot();
    let mut out = String::with_capacity(4096);

    head(
        &mut out,
        "jobvisor_runs_total",
        "counter",
        "Runs this node recorded, by job and final status.",
    );
    for (job, runs) in &counted.runs {
        for (status, n) in &runs.by_outcome {
            let _ = writeln!(
                out,
                "jobvisor_runs_total{{job=\"{}\",status=\"{status}\"}} {n}",
                label(job)
            );
        }
    }
    head(
        &mut out,
        "jobvisor_run_duration_seconds",
        "histogram",
        "Durations of the runs this node recorded, by job.",
    );
    for (job, runs) in &counted.runs {
        let labels = format!("job=\"{}\"", label(job));
        histogram(
            &mut out,
            "jobvisor_run_duration_seconds",
            &labels,
            &DURATION_BUCKETS,
            &runs.duration,
        );
    }
    head(
        &mut out,
        "jobvisor_claims_total",
        "counter",
        "Claims this node's processors made.",
    );
    let _ = writeln!(out, "jobvisor_claims_total {}", counted.claims);
    head(
        &mut out,
        "jobvisor_claimed_runs_total",
        "counter",
        "Runs this node's processors claimed.",
    );
    let _ = writeln!(out, "jobvisor_claimed_runs_total {}", counted.claimed);
    head(
        &mut out,
        "jobvisor_given_back_runs_total",
        "counter",
        "Claimed runs not started that this node gave back to the queue for an idle node.",
    );
    let _ = writeln!(out, "jobvisor_given_back_runs_total {}", counted.given_back);
    head(
        &mut out,
        "jobvisor_stale_completions_total",
        "counter",
        "Completions rejected because their claim token was stale.",
    );
    let _ = writeln!(out, "jobvisor_stale_completions_total {}", counted.stale);
    head(
        &mut out,
        "jobvisor_writer_batch_operations",
        "histogram",
        "Operations per commit, by writer (catalog or object).",
    );
    for (writer, h) in &counted.batches {
        let labels = format!("writer=\"{}\"", label(writer));
        histogram(
            &mut out,
            "jobvisor_writer_batch_operations",
            &labels,
            &BATCH_BUCKETS,
            h,
        );
    }
    head(
        &mut out,
        "jobvisor_queue_depth",
        "gauge",
        "Runs queued in the catalog.",
    );
    let _ = writeln!(out, "jobvisor_queue_depth {}", queue.queued);
    head(
        &mut out,
        "jobvisor_running_runs",
        "gauge",
        "Runs started and executing, on every node of the catalog.",
    );
    let _ = writeln!(out, "jobvisor_running_runs {}", queue.running);
    head(
        &mut out,
        "jobvisor_claimed_runs",
        "gauge",
        "Runs a node claimed and has not started yet, on every node of the catalog.",
    );
    let _ = writeln!(out, "jobvisor_claimed_runs {}", queue.claimed);
    head(
        &mut out,
        "jobvisor_queue_lag_seconds",
        "gauge",
        "How long the oldest due queued run has waited.",
    );
    let _ = writeln!(
        out,
        "jobvisor_queue_lag_seconds {}",
        queue.lag_ms as f64 / 1000.0
    );
    head(
        &mut out,
        "jobvisor_jobs",
        "gauge",
        "Jobs per activation state on this node.",
    );
    for (activation, n) in &queue.activation {
        let _ = writeln!(
            out,
            "jobvisor_jobs{{activation=\"{}\"}} {n}",
            label(activation)
        );
    }
    head(
        &mut out,
        "jobvisor_paused",
        "gauge",
        "1 while an operator has paused the node.",
    );
    let _ = writeln!(out, "jobvisor_paused {}", u8::from(health.paused));
    head(
        &mut out,
        "jobvisor_pauses",
        "gauge",
        "1 for each processor, group or job an operator paused, on a node or the fleet (node=\"\").",
    );
    for p in &pauses {
        let _ = writeln!(
            out,
            "jobvisor_pauses{{scope=\"{}\",name=\"{}\",node=\"{}\"}} 1",
            p.scope.as_str(),
            label(&p.name),
            label(p.node.as_deref().unwrap_or_default())
        );
    }
    head(
        &mut out,
        "jobvisor_writes_paused",
        "gauge",
        "1 while writes are paused: the disk is critical or full, only maintenance runs are claimed.",
    );
    let _ = writeln!(
        out,
        "jobvisor_writes_paused {}",
        u8::from(health.writes_paused)
    );
    head(
        &mut out,
        "jobvisor_health_reading",
        "gauge",
        "The latest health sample, by reading (percent, bytes, bytes per second, load).",
    );
    for (reading, v) in &health.readings {
        let _ = writeln!(
            out,
            "jobvisor_health_reading{{reading=\"{}\"}} {v}",
            label(reading)
        );
    }
    if let Some(b) = &health.budget {
        head(
            &mut out,
            "jobvisor_budget_memory_bytes",
            "gauge",
            "Bytes of memory the node may use: its cgroup's limit where that leaves less free than the host, else the host's memory (source).",
        );
        let _ = writeln!(
            out,
            "jobvisor_budget_memory_bytes{{source=\"{}\"}} {}",
            b.memory_source.as_str(),
            b.memory_bytes
        );
        head(
            &mut out,
            "jobvisor_budget_memory_available_bytes",
            "gauge",
            "Bytes of memory available within the budget (source).",
        );
        let _ = writeln!(
            out,
            "jobvisor_budget_memory_available_bytes{{source=\"{}\"}} {}",
            b.memory_source.as_str(),
            b.memory_available_bytes
        );
        head(
            &mut out,
            "jobvisor_budget_cpu_cores",
            "gauge",
            "Cores CPU use is measured against: the host's, or its cgroup's quota or cpuset where fewer (source).",
        );
        let _ = writeln!(
            out,
            "jobvisor_budget_cpu_cores{{source=\"{}\"}} {}",
            b.cpu_source.as_str(),
            b.cpu_cores
        );
        if let Some(n) = b.oom_kills {
            head(
                &mut out,
                "jobvisor_cgroup_oom_kills",
                "gauge",
                "How many times the kernel's OOM killer acted in the node's cgroup (the kernel's count).",
            );
            let _ = writeln!(out, "jobvisor_cgroup_oom_kills {n}");
        }
    }
    Ok(HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4; charset=utf-8")
        .body(out))
}
