//! Registers a Rust function as a job, triggers it with parameters, and prints the result.
//!
//! `cargo run --example custom_function`

use std::time::Duration;

use jobvisor::catalog::{Catalog, DbSettings, RunFilter};
use jobvisor::jobconf::toml_format;
use jobvisor::runtime::Engine;
use serde_json::json;

const CATALOG: &str = r#"
[processor.main]
instances = 2

[job.word_count]
type = "function"
processor = "main"
timeout = 5000
payload = { function = "word_count" }
"#;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("jobvisor-example-{}", std::process::id()));
    let db = dir.join("catalog.db");
    // The catalog is edited before (or while) the engine runs; here, once, up front.
    Catalog::open(&db, &DbSettings::default())?.import(
        &toml_format::parse(CATALOG).map_err(|d| format!("{d:?}"))?,
        "example",
    )?;

    actix_rt::System::new().block_on(async {
        let engine = Engine::builder()
            .db(&db)
            .node_name("example")
            .function("word_count", |_ctx, input| {
                let text = input
                    .get("text")
                    .and_then(|t| t.as_str())
                    .ok_or("input needs `text`")?;
                Ok(json!({ "words": text.split_whitespace().count() }))
            })
            .start()?;
        let run_id = engine
            .trigger("word_count", Some(json!({ "text": "the quick brown fox" })))
            .await?;
        let catalog = Catalog::open(&db, &DbSettings::default())?;
        let filter = RunFilter {
            job: Some("word_count".into()),
            status: Some("succeeded".into()),
            limit: 1,
            ..RunFilter::default()
        };
        for _ in 0..200 {
            if let Some(run) = catalog
                .runs(&filter)?
                .into_iter()
                .find(|r| r.run_id == run_id)
            {
                println!("run {run_id}: {}", run.result.unwrap_or_default());
                break;
            }
            actix_rt::time::sleep(Duration::from_millis(20)).await;
        }
        engine.shutdown(Duration::from_secs(5)).await?;
        Ok::<_, Box<dyn std::error::Error>>(())
    })?;
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
