//! SQL jobs: one statement with bound parameters, run through the target object's Writer. A
//! run's `params.params` replaces the bound values (`payload.params`); the statement and the
//! object are the payload's, whatever a run's params say.
//!
//! Invariant: never runs against the catalog; only against a data object's own database.

use serde_json::Value as Json;

use super::{ExecEnv, ExecResult};
use crate::catalog::queue::ClaimedRun;

/// Runs a sql job.
pub async fn run(run: &ClaimedRun, env: &ExecEnv) -> ExecResult {
    let p = &run.payload;
    let (Some(sql), Some(object)) = (
        p.get("sql").and_then(Json::as_str),
        p.get("object").and_then(Json::as_str),
    ) else {
        return ExecResult::Err("payload needs sql and object".into());
    };
    let writer = match env.object_writers.running(object) {
        Some(w) => w,
        None => {
            // The object's first use on this node: open its database off the actors' thread.
            let (writers, name) = (env.object_writers.clone(), object.to_string());
            match actix_rt::task::spawn_blocking(move || writers.get(&name)).await {
                Ok(Ok(w)) => w,
                Ok(Err(e)) => return ExecResult::Err(e),
                Err(e) => return ExecResult::Err(format!("starting the object's writer: {e}")),
            }
        }
    };
    let params: Vec<Json> = run
        .params
        .as_ref()
        .and_then(|v| v.get("params"))
        .or_else(|| p.get("params"))
        .and_then(Json::as_array)
        .cloned()
        .unwrap_or_default();
    let sql = sql.to_string();
    let inserts = super::activity::is_insert(&sql);
    let result = writer.execute_sql(sql, params).await;
    match result {
        Ok(v) => {
            // Answered after the commit: the rows are in.
            if inserts && let Some(n) = v.get("changes").and_then(Json::as_u64) {
                env.activity.inserted(object, n, env.clock.now_ms());
            }
            ExecResult::Ok(v)
        }
        Err(e) => ExecResult::Err(e.to_string()),
    }
}
