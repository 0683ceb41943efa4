//! An actix-web shop that embeds the engine (issue 17's example application):
//!
//! - `POST /reports/{name}` runs the `report` job and answers with its result: the handler
//!   awaits the run (`Engine::run`), and the run's span is a child of the request's;
//! - `POST /orders` (`{"item": "…", "fail": false}`) stores an order in the shop's own table
//!   and queues its `ship` run in the same transaction (`catalog::enqueue_in`): with
//!   `"fail": true` the transaction rolls back, and no run is queued either;
//! - `PUT /jobs/report/priority` (`{"priority": 7}`) and `POST /jobs/report/disable|enable`
//!   manage the `report` job from code (`ops::handle::OpsHandle`: the CLI's and the API's
//!   operations);
//! - `GET /events` shows what the host actor `Tally` was told (it subscribes to the engine's
//!   run events as actix messages) and how many events it missed.
//!
//! `cargo run --example embed -- [BIND] [DATA_DIR]` (default `127.0.0.1:8088` and a folder in
//! the system's temp dir); it prints `listening on http://ADDR` once it serves. Then
//! `curl -X POST localhost:8088/reports/weekly`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use actix_web::{App, HttpResponse, HttpServer, web};
use jobvisor::catalog::{Catalog, DbSettings};
use jobvisor::jobconf::toml_format;
use jobvisor::ops::handle::OpsHandle;
use jobvisor::ops::jobs::JobPatch;
use jobvisor::runtime::{Engine, Event, Subscription};
use serde_json::{Value, json};

const CATALOG: &str = r#"
[processor.shop]
instances = 2

[job.report]
type = "function"
processor = "shop"
timeout = 60000
max_attempts = 3
payload = { function = "build_report" }

[job.ship]
type = "function"
processor = "shop"
payload = { function = "ship_order" }
"#;

/// The host actor: counts the runs it is told of, per job and status.
#[derive(Default)]
struct Tally {
    finished: BTreeMap<String, BTreeMap<String, u64>>,
    started: u64,
    queued: u64,
}

impl Actor for Tally {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        // Room for a burst; beyond it the engine drops (and counts) rather than wait for us.
        ctx.set_mailbox_capacity(1024);
    }
}

impl Handler<Event> for Tally {
    type Result = ();

    fn handle(&mut self, event: Event, _: &mut Context<Self>) {
        match event {
            Event::Queued { run_ids, .. } => self.queued += run_ids.len() as u64,
            Event::Started { .. } => self.started += 1,
            Event::Finished { job, status, .. } => {
                *self
                    .finished
                    .entry(job)
                    .or_default()
                    .entry(status.to_string())
                    .or_default() += 1;
            }
            Event::Decision { .. } => {}
        }
    }
}

/// What the tally holds.
#[derive(Message)]
#[rtype(result = "Value")]
struct Report;

impl Handler<Report> for Tally {
    type Result = MessageResult<Report>;

    fn handle(&mut self, _: Report, _: &mut Context<Self>) -> Self::Result {
        MessageResult(json!({
            "queued": self.queued,
            "started": self.started,
            "finished": self.finished,
        }))
    }
}

struct Shop {
    engine: Engine,
    ops: OpsHandle,
    tally: Addr<Tally>,
    subscription: Subscription,
    db: PathBuf,
}

fn error(status: actix_web::http::StatusCode, e: impl ToString) -> HttpResponse {
    HttpResponse::build(status).json(json!({ "error": e.to_string() }))
}

/// Runs a report and answers with its result, once the run has ended.
async fn run_report(shop: web::Data<Shop>, name: web::Path<String>) -> HttpResponse {
    let span = tracing::info_span!("request", route = "/reports/{name}");
    let run = shop.engine.run(
        "report",
        Some(json!({ "name": name.into_inner() })),
        Duration::from_secs(30),
    );
    match tracing::Instrument::instrument(run, span).await {
        Ok(outcome) => HttpResponse::Ok().json(outcome),
        Err(e) => error(actix_web::http::StatusCode::SERVICE_UNAVAILABLE, e),
    }
}

/// Stores an order and queues its shipping in one transaction of the shop's own.
async fn place_order(shop: web::Data<Shop>, body: web::Json<Value>) -> HttpResponse {
    let item = body["item"].as_str().unwrap_or("something").to_string();
    let fail = body["fail"].as_bool().unwrap_or(false);
    let db = shop.db.clone();
    let placed = web::block(move || -> Result<Value, String> {
        let mut conn = jobvisor::catalog::open_connection(&db, &DbSettings::default())
            .map_err(|e| e.to_string())?;
        let tx = conn.transaction().map_err(|e| e.to_string())?;
        tx.execute("INSERT INTO orders (item) VALUES (?1)", [&item])
            .map_err(|e| e.to_string())?;
        let order = tx.last_insert_rowid();
        let run =
            jobvisor::catalog::enqueue_in(&tx, "ship", Some(&json!({ "order": order })), "shop")
                .map_err(|e| e.to_string())?;
        if fail {
            // Something later in the request went wrong: neither the order nor its run stays.
            tx.rollback().map_err(|e| e.to_string())?;
            return Ok(json!({ "rolled_back": true, "order": order, "run_id": run }));
        }
        tx.commit().map_err(|e| e.to_string())?;
        Ok(json!({ "order": order, "run_id": run }))
    })
    .await;
    match placed {
        Ok(Ok(v)) => HttpResponse::Created().json(v),
        Ok(Err(e)) => error(actix_web::http::StatusCode::INTERNAL_SERVER_ERROR, e),
        Err(e) => error(actix_web::http::StatusCode::SERVICE_UNAVAILABLE, e),
    }
}

/// Changes the report job's priority from code.
async fn set_priority(shop: web::Data<Shop>, body: web::Json<Value>) -> HttpResponse {
    let Some(priority) = body["priority"].as_i64() else {
        return error(
            actix_web::http::StatusCode::UNPROCESSABLE_ENTITY,
            "priority: expected an integer",
        );
    };
    let patch = JobPatch {
        priority: Some(priority),
        ..JobPatch::default()
    };
    match shop.ops.edit_job("report", patch).await {
        Ok(saved) => HttpResponse::Ok().json(saved),
        Err(e) => error(actix_web::http::StatusCode::UNPROCESSABLE_ENTITY, e),
    }
}

/// Disables or enables the report job from code.
async fn set_enabled(shop: web::Data<Shop>, action: web::Path<String>) -> HttpResponse {
    let enabled = match action.as_str() {
        "enable" => true,
        "disable" => false,
        _ => return error(actix_web::http::StatusCode::NOT_FOUND, "enable or disable"),
    };
    match shop.ops.set_job_enabled("report", enabled).await {
        Ok(change) => HttpResponse::Ok().json(json!({ "enabled": enabled, "change": change })),
        Err(e) => error(actix_web::http::StatusCode::UNPROCESSABLE_ENTITY, e),
    }
}

/// What the host actor was told, and what it missed.
async fn events(shop: web::Data<Shop>) -> HttpResponse {
    match shop.tally.send(Report).await {
        Ok(mut v) => {
            v["dropped"] = shop.subscription.dropped().into();
            HttpResponse::Ok().json(v)
        }
        Err(e) => error(actix_web::http::StatusCode::SERVICE_UNAVAILABLE, e),
    }
}

#[actix_web::main]
async fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let bind = args.next().unwrap_or_else(|| "127.0.0.1:8088".into());
    let dir = args
        .next()
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("jobvisor-embed"));
    let db = dir.join("catalog.db");
    let file = toml_format::parse(CATALOG).map_err(|d| std::io::Error::other(format!("{d:?}")))?;
    Catalog::open(&db, &DbSettings::default())
        .and_then(|c| c.import(&file, "embed"))
        .map_err(std::io::Error::other)?;
    // The shop's own table lives in the catalog's file, so an order and its run share a
    // transaction.
    jobvisor::catalog::open_connection(&db, &DbSettings::default())
        .and_then(|c| {
            c.execute_batch(
                "CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, item TEXT NOT NULL)",
            )
        })
        .map_err(std::io::Error::other)?;
    let mut cfg = jobvisor::config::NodeConfig::default();
    cfg.node.data_dir = dir.join("data").display().to_string();
    cfg.policy.priority_floor = i64::MIN; // every job active from the start
    let engine = Engine::builder()
        .config(cfg)
        .db(&db)
        .node_name("shop")
        .function("build_report", |ctx, input| {
            let name = input
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("unnamed");
            tracing::info!(report = name, "building");
            Ok(json!({ "report": name, "attempt": ctx.attempt, "run": ctx.run_id }))
        })
        .function("ship_order", |_ctx, input| {
            Ok(json!({ "shipped": input["order"] }))
        })
        .start()
        .map_err(std::io::Error::other)?;
    let tally = Tally::default().start();
    let subscription = engine.subscribe(tally.clone().recipient());
    let ops = OpsHandle::open(&engine, "shop").map_err(std::io::Error::other)?;
    let shop = web::Data::from(Arc::new(Shop {
        engine: engine.clone(),
        ops,
        tally,
        subscription,
        db,
    }));
    let server = HttpServer::new(move || {
        App::new()
            .app_data(shop.clone())
            .route("/reports/{name}", web::post().to(run_report))
            .route("/orders", web::post().to(place_order))
            .route("/jobs/report/priority", web::put().to(set_priority))
            .route("/jobs/report/{action}", web::post().to(set_enabled))
            .route("/events", web::get().to(events))
    })
    .workers(1)
    .bind(&bind)?;
    for addr in server.addrs() {
        println!("listening on http://{addr}");
    }
    server.run().await?;
    // The server stopped (Ctrl-C, SIGTERM): let running runs finish.
    engine
        .shutdown(Duration::from_secs(10))
        .await
        .map_err(std::io::Error::other)
}
