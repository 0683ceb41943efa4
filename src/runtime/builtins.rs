//! The built-in functions that make the default catalog useful: run-state reset, device and
//! object statistics, pruning, database maintenance and catalog backup; plus `debug.*` helpers.
//!
//! Invariant: builtins write the catalog only through the CatalogWriter's blocking verbs
//! (`fail_stuck_runs`, `record_stats_blocking`, prunes) and read it through the pool; SQL stays
//! in `catalog`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value as Json, json};

use crate::catalog::CatalogError;
use crate::catalog::reader::count_rows_in_file;
use crate::catalog::upkeep::StatSample;
use crate::executor::{FnContext, Registry};
use crate::runtime::health::Sampler;

/// A registry holding every built-in function.
pub fn registry() -> Registry {
    let mut r = Registry::new();
    register(&mut r);
    r
}

/// Adds the built-ins to `r`.
pub fn register(r: &mut Registry) {
    r.register("job_state_reset", job_state_reset);
    r.register("device_stats", device_stats);
    r.register("object_stats", object_stats);
    r.register("object_prune", object_prune);
    r.register("run_history_prune", run_history_prune);
    r.register("db_maintenance", db_maintenance);
    r.register("catalog_backup", catalog_backup);
    r.register_async("debug.noop", |_, _| std::future::ready(Ok(json!({}))));
    r.register("debug.echo", |_, input| Ok(input));
    r.register("debug.fail", |_, input| {
        Err(input
            .get("message")
            .and_then(Json::as_str)
            .unwrap_or("debug.fail always fails")
            .to_string())
    });
    r.register("debug.sleep", debug_sleep);
    // A fault hook: blocks the thread the node's actors run on for `ms` (default 1000, at most
    // a minute), as a hung actor would — what must stop then (the service manager's watchdog
    // pings) can be tested on a real node.
    r.register_async("debug.wedge", |_, input| {
        let ms = int(&input, "ms", 1000).clamp(0, 60_000) as u64;
        std::thread::sleep(Duration::from_millis(ms));
        std::future::ready(Ok(json!({ "wedged_ms": ms })))
    });
}

fn err(e: CatalogError) -> String {
    e.to_string()
}

fn int(input: &Json, key: &str, default: i64) -> i64 {
    input.get(key).and_then(Json::as_i64).unwrap_or(default)
}

/// Fails runs stuck past their timeout (plus `grace_ms`, default 60 s) and frees their jobs.
fn job_state_reset(ctx: &FnContext, input: Json) -> Result<Json, String> {
    let grace = int(&input, "grace_ms", 60_000);
    let now = ctx.env.clock.now_ms();
    let reset = ctx
        .env
        .catalog_writer
        .fail_stuck_runs(now, grace)
        .map_err(err)?;
    Ok(json!({ "reset": reset }))
}

/// Samples the device (two samples `interval_ms` apart, default 250) into `stat`.
fn device_stats(ctx: &FnContext, input: Json) -> Result<Json, String> {
    let mut sampler = Sampler::new(&ctx.env.data_dir);
    sampler.sample(ctx.env.clock.now_ms());
    std::thread::sleep(Duration::from_millis(
        int(&input, "interval_ms", 250).clamp(50, 5000) as u64,
    ));
    let sample = sampler.sample(ctx.env.clock.now_ms());
    let stats = sample.stats();
    let node = ctx.env.node_id;
    let now = ctx.env.clock.now_ms();
    let count = stats.len();
    ctx.env
        .catalog_writer
        .record_stats_blocking(node, now, stats)
        .map_err(err)?;
    Ok(json!({ "recorded": count, "sample": sample }))
}

/// Where an object's rows live: the catalog itself, or a SQLite file of its own (a relative
/// path is in the data folder).
fn object_db(ctx: &FnContext, conn_string: &Option<String>) -> Option<PathBuf> {
    crate::catalog::objects::resolve(&ctx.env.data_dir, conn_string.as_deref())
}

/// Record counts and file sizes of every object, into `stat`.
fn object_stats(ctx: &FnContext, _input: Json) -> Result<Json, String> {
    let objects = ctx.env.catalog.enabled_objects().map_err(err)?;
    let mut stats = Vec::new();
    let mut report = serde_json::Map::new();
    for (name, conn_string) in objects {
        let (count, size) = match object_db(ctx, &conn_string) {
            None => (
                ctx.env.catalog.count_rows(&name).ok(),
                file_size(ctx.env.catalog.path()),
            ),
            Some(path) => (count_rows_in_file(&path, &name).ok(), file_size(&path)),
        };
        if let Some(count) = count {
            stats.push(StatSample {
                stat_type: "object.record_count".into(),
                unit: "rows",
                subject: Some(name.clone()),
                value: count as f64,
            });
        }
        if let Some(size) = size {
            stats.push(StatSample {
                stat_type: "object.file_size".into(),
                unit: "bytes",
                subject: Some(name.clone()),
                value: size as f64,
            });
        }
        report.insert(name, json!({ "record_count": count, "file_size": size }));
    }
    // Rows the writers inserted since the previous run (counted after each commit).
    for (name, inserts) in ctx.env.activity.take() {
        stats.push(StatSample {
            stat_type: "object.count_insert".into(),
            unit: "rows",
            subject: Some(name.clone()),
            value: inserts.count as f64,
        });
        if let Some(latest) = inserts.latest {
            stats.push(StatSample {
                stat_type: "object.date_recent_insert".into(),
                unit: "epoch ms",
                subject: Some(name.clone()),
                value: latest as f64,
            });
        }
        if let Some(Json::Object(entry)) = report.get_mut(&name) {
            entry.insert("count_insert".into(), json!(inserts.count));
            entry.insert("date_recent_insert".into(), json!(inserts.latest));
        }
    }
    let node = ctx.env.node_id;
    let now = ctx.env.clock.now_ms();
    ctx.env
        .catalog_writer
        .record_stats_blocking(node, now, stats)
        .map_err(err)?;
    Ok(Json::Object(report))
}

fn file_size(path: &Path) -> Option<u64> {
    std::fs::metadata(path).ok().map(|m| m.len())
}

/// Deletes rows older than `time_to_live` from every object that allows pruning. The engine's
/// own `job_run` and `stat` objects use their own prune verbs; other objects need a name field
/// holding epoch milliseconds.
fn object_prune(ctx: &FnContext, _input: Json) -> Result<Json, String> {
    let objects = ctx.env.catalog.prunable_objects().map_err(err)?;
    let mut report = serde_json::Map::new();
    for (name, conn_string, _key, time_field, ttl) in objects {
        let before = ctx.env.clock.now_ms() - ttl * 1000;
        let deleted = match (object_db(ctx, &conn_string), name.as_str()) {
            (None, "job_run") => ctx.env.catalog_writer.prune_runs(before),
            (None, "stat") => ctx.env.catalog_writer.prune_stats(before),
            (None, _) => Err(CatalogError::Refused(format!(
                "object `{name}` lives in the catalog; only job_run and stat are pruned there"
            ))),
            (Some(_), _) => match (ctx.env.object_writers.get(&name), time_field) {
                (Ok(writer), Some(field)) => {
                    let table = name.clone();
                    writer.prune_table(table, field, before)
                }
                (Err(e), _) => Err(CatalogError::Unavailable(e)),
                (_, None) => Err(CatalogError::Refused(format!(
                    "object `{name}` has no name_field (time column) to prune by"
                ))),
            },
        };
        if let Ok(n) = &deleted {
            record_prune(ctx, &name, *n)?;
        }
        report.insert(
            name,
            match deleted {
                Ok(n) => json!({ "deleted": n }),
                Err(e) => json!({ "error": e.to_string() }),
            },
        );
    }
    Ok(Json::Object(report))
}

/// `object.count_prune` (rows deleted) and `object.date_recent_prune` (when) of one prune.
fn record_prune(ctx: &FnContext, object: &str, deleted: usize) -> Result<(), String> {
    let now = ctx.env.clock.now_ms();
    let stats = vec![
        StatSample {
            stat_type: "object.count_prune".into(),
            unit: "rows",
            subject: Some(object.to_string()),
            value: deleted as f64,
        },
        StatSample {
            stat_type: "object.date_recent_prune".into(),
            unit: "epoch ms",
            subject: Some(object.to_string()),
            value: now as f64,
        },
    ];
    let node = ctx.env.node_id;
    ctx.env
        .catalog_writer
        .record_stats_blocking(node, now, stats)
        .map_err(err)
}

/// Deletes finished runs older than `days` (default: the job_run object's time_to_live, else 30).
fn run_history_prune(ctx: &FnContext, input: Json) -> Result<Json, String> {
    let ttl_s = {
        ctx.env
            .catalog
            .prunable_objects()
            .map_err(err)?
            .into_iter()
            .find(|o| o.0 == "job_run")
            .map_or(30 * 86_400, |o| o.4)
    };
    let days = input.get("days").and_then(Json::as_i64);
    let before = ctx.env.clock.now_ms() - days.map_or(ttl_s * 1000, |d| d * 86_400_000);
    let deleted = ctx.env.catalog_writer.prune_runs(before).map_err(err)?;
    record_prune(ctx, "job_run", deleted)?;
    Ok(json!({ "deleted": deleted, "before": before }))
}

/// `PRAGMA optimize`, incremental vacuum and a WAL checkpoint, on a connection of its own
/// (a checkpoint cannot run inside the writer's transaction).
fn db_maintenance(ctx: &FnContext, _input: Json) -> Result<Json, String> {
    if ctx.env.catalog.is_postgres() {
        return Ok(json!({
            "skipped": "the catalog is on PostgreSQL, whose server maintains it (autovacuum)"
        }));
    }
    // A damaged catalog stops the node before anything else is written to it: the Reader's
    // finding raises the fatal alarm, and the writer commits nothing more.
    ctx.env.catalog.quick_check().map_err(err)?;
    ctx.env.catalog.maintain().map_err(err)
}

/// Online backup of the catalog to `<data_dir>/backups/catalog-<time>.db`, keeping the newest
/// `keep` (default 4).
fn catalog_backup(ctx: &FnContext, input: Json) -> Result<Json, String> {
    if ctx.env.catalog.is_postgres() {
        return Err(
            "the catalog is on PostgreSQL: back it up with the server's tools \
                    (pg_dump, base backups)"
                .into(),
        );
    }
    let keep = int(&input, "keep", 4).max(1) as usize;
    let dir = ctx.env.data_dir.join("backups");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let now = chrono::DateTime::from_timestamp_millis(ctx.env.clock.now_ms()).unwrap_or_default();
    let stamp = now.format("%Y%m%dT%H%M%S%3fZ");
    let target = dir.join(format!("catalog-{stamp}.db"));
    ctx.env.catalog.backup_to(&target).map_err(err)?;
    let mut backups: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|e| e.to_string())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("catalog-"))
        })
        .collect();
    backups.sort();
    let mut removed = Vec::new();
    while backups.len() > keep {
        let old = backups.remove(0);
        if std::fs::remove_file(&old).is_ok() {
            removed.push(old.display().to_string());
        }
    }
    Ok(
        json!({ "backup": target.display().to_string(), "bytes": file_size(&target), "removed": removed }),
    )
}

/// Sleeps `ms` (default 100), checking for cancellation every 10 ms.
fn debug_sleep(ctx: &FnContext, input: Json) -> Result<Json, String> {
    let ms = int(&input, "ms", 100).max(0) as u64;
    let until = std::time::Instant::now() + Duration::from_millis(ms);
    while std::time::Instant::now() < until {
        if ctx.is_cancelled() {
            return Err("cancelled".into());
        }
        // Wakes every 10 ms to notice a cancel, but never sleeps past the end.
        let left = until.saturating_duration_since(std::time::Instant::now());
        std::thread::sleep(left.min(Duration::from_millis(10)));
    }
    Ok(json!({ "slept_ms": ms }))
}
