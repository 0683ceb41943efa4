//! An actix-web application embedding the engine: `POST /reports/{name}` queues a run of the
//! `report` job with the name as a parameter; `GET /engine` shows the engine's status.
//!
//! `cargo run --example embed`, then `curl -X POST localhost:8088/reports/weekly`.

use std::time::Duration;

use actix_web::{App, HttpResponse, HttpServer, web};
use jobvisor::catalog::{Catalog, DbSettings};
use jobvisor::jobconf::toml_format;
use jobvisor::runtime::Engine;
use serde_json::json;

const CATALOG: &str = r#"
[processor.reports]
instances = 2

[job.report]
type = "function"
processor = "reports"
timeout = 60000
max_attempts = 3
payload = { function = "build_report" }
"#;

async fn queue_report(engine: web::Data<Engine>, name: web::Path<String>) -> HttpResponse {
    match engine
        .trigger("report", Some(json!({ "name": name.into_inner() })))
        .await
    {
        Ok(run_id) => HttpResponse::Accepted().json(json!({ "run_id": run_id })),
        Err(e) => HttpResponse::ServiceUnavailable().json(json!({ "error": e.to_string() })),
    }
}

async fn engine_status(engine: web::Data<Engine>) -> HttpResponse {
    match engine.status().await {
        Ok(status) => HttpResponse::Ok().json(status),
        Err(e) => HttpResponse::ServiceUnavailable().json(json!({ "error": e.to_string() })),
    }
}

#[actix_web::main]
async fn main() -> std::io::Result<()> {
    let db = std::env::temp_dir()
        .join("jobvisor-embed")
        .join("catalog.db");
    let file = toml_format::parse(CATALOG).map_err(|d| std::io::Error::other(format!("{d:?}")))?;
    Catalog::open(&db, &DbSettings::default())
        .and_then(|mut c| c.import(&file, "embed"))
        .map_err(std::io::Error::other)?;
    let engine = Engine::builder()
        .db(&db)
        .node_name("embed")
        .function("build_report", |ctx, input| {
            let name = input
                .get("name")
                .and_then(|n| n.as_str())
                .unwrap_or("unnamed");
            if ctx.is_cancelled() {
                return Err("cancelled".into());
            }
            Ok(json!({ "report": name, "attempt": ctx.attempt }))
        })
        .start()
        .map_err(std::io::Error::other)?;
    let data = web::Data::new(engine.clone());
    println!(
        "listening on http://127.0.0.1:8088 (catalog {})",
        db.display()
    );
    HttpServer::new(move || {
        App::new()
            .app_data(data.clone())
            .route("/reports/{name}", web::post().to(queue_report))
            .route("/engine", web::get().to(engine_status))
    })
    .bind(("127.0.0.1", 8088))?
    .run()
    .await?;
    // The server stopped (Ctrl-C): let running reports finish.
    engine
        .shutdown(Duration::from_secs(10))
        .await
        .map_err(std::io::Error::other)
}
