//! The mail pipeline (issue 14): an embedded node whose catalog is `examples/mail/job.conf` and
//! whose inbox folder feeds it — each mail that lands there becomes a run of the workflow
//! `mail` (store → split → (links → strip → index) and (headers → geolocate)).
//!
//! `cargo run --example mail -- [FOLDER] [--demo N]`: the node's data and its inbox (`FOLDER/in`)
//! live in FOLDER (default `mail-pipeline`). With `--demo N` it drops N sample mails into the
//! inbox, waits until their workflows ended, prints each tree's status and exits; otherwise it
//! runs until Ctrl-C (drop `.eml` files into the inbox meanwhile).

use std::path::PathBuf;
use std::time::Duration;

use jobvisor::catalog::{Catalog, DbSettings};
use jobvisor::config::{InboxSection, NodeConfig};
use jobvisor::jobconf::toml_format;
use jobvisor::runtime::Engine;

mod functions;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (mut folder, mut demo) = (PathBuf::from("mail-pipeline"), None);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--demo" => demo = args.next().and_then(|n| n.parse::<usize>().ok()),
            other => folder = PathBuf::from(other),
        }
    }
    let inbox = folder.join("in");
    std::fs::create_dir_all(&inbox)?;
    let db = folder.join("catalog.db");
    let conf = toml_format::parse(include_str!("job.conf")).map_err(|d| format!("{d:?}"))?;
    Catalog::open(&db, &DbSettings::default())?.import(&conf, "examples/mail")?;
    let mut cfg = NodeConfig::default();
    cfg.node.data_dir = folder.join("data").display().to_string();
    cfg.inbox = vec![InboxSection {
        path: inbox.display().to_string(),
        job: "mail".into(),
        pattern: "*.eml".into(),
    }];
    actix_rt::System::new().block_on(async move {
        let engine = functions::register(Engine::builder())
            .config(cfg)
            .db(&db)
            .start()?;
        println!("inbox: {} (drop .eml files here)", inbox.display());
        match demo {
            Some(n) => {
                for i in 0..n {
                    let tmp = folder.join(format!(".mail{i}.eml"));
                    std::fs::write(&tmp, functions::sample(i))?;
                    std::fs::rename(&tmp, inbox.join(format!("mail{i}.eml")))?;
                }
                wait_for_workflows(&db, n).await?;
            }
            None => {
                tokio::signal::ctrl_c().await?;
            }
        }
        engine.shutdown(Duration::from_secs(5)).await?;
        Ok::<_, Box<dyn std::error::Error>>(())
    })
}

/// Waits until `n` workflow runs ended, then prints their statuses.
async fn wait_for_workflows(
    db: &std::path::Path,
    n: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    let conn = rusqlite::Connection::open(db)?;
    loop {
        let ended: Vec<(i64, String)> = conn
            .prepare(
                "SELECT r.run_id, r.status FROM job_run r JOIN job j USING (job_id)
                 WHERE j.job_name = 'mail' AND r.finished_at IS NOT NULL ORDER BY r.run_id",
            )?
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?;
        if ended.len() >= n {
            for (id, status) in ended {
                println!(
                    "workflow run {id}: {status} (jobvisor --db {} runs tree {id})",
                    db.display()
                );
            }
            return Ok(());
        }
        actix_rt::time::sleep(Duration::from_millis(50)).await;
    }
}
