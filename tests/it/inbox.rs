//! Inboxes (issue 14, point 3) on an embedded engine: the example mail pipeline fed by an inbox
//! folder — files there before the start, files written and closed in it, files moved in, and
//! files the pattern leaves alone; on both backends.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use jobvisor::config::InboxSection;
use jobvisor::runtime::Engine;

use crate::support::Workspace;
use crate::workflows::mail;

crate::on_both_backends!(
    an_inbox_turns_each_complete_file_into_one_run_of_the_mail_pipeline_in_its_own_folder,
);

fn an_inbox_turns_each_complete_file_into_one_run_of_the_mail_pipeline_in_its_own_folder(
    ws: Workspace,
) {
    ws.import_conf(include_str!("../../examples/mail/job.conf"));
    let inbox = ws.path("in");
    std::fs::create_dir_all(&inbox).unwrap();
    // There before the node starts, and one the pattern does not take.
    for i in 0..3 {
        std::fs::write(inbox.join(format!("early{i}.eml")), mail::sample(i)).unwrap();
    }
    std::fs::write(inbox.join("notes.txt"), "not a mail").unwrap();
    let mut cfg = ws.engine_config();
    cfg.policy.priority_floor = i64::MIN;
    cfg.inbox = vec![InboxSection {
        path: inbox.display().to_string(),
        job: "mail".into(),
        pattern: "*.eml".into(),
    }];
    let (inbox2, staging) = (inbox.clone(), ws.path("staging"));
    std::fs::create_dir_all(&staging).unwrap();
    let db = ws.catalog_at();
    actix_rt::System::new().block_on(async move {
        let engine = mail::register(Engine::builder())
            .config(cfg)
            .node_name("inbox")
            .start()
            .unwrap();
        // Written and closed in the folder, and written elsewhere then moved in.
        for i in 3..6 {
            std::fs::write(inbox2.join(format!("written{i}.eml")), mail::sample(i)).unwrap();
        }
        for i in 6..9 {
            let tmp = staging.join(format!("moved{i}.eml"));
            std::fs::write(&tmp, mail::sample(i)).unwrap();
            std::fs::rename(&tmp, inbox2.join(format!("moved{i}.eml"))).unwrap();
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let done = db
                .read(|db| {
                    db.count(
                        "SELECT count(*) FROM job_run r JOIN job j USING (job_id)
                         WHERE j.job_name = 'mail' AND r.finished_at IS NOT NULL",
                    )
                })
                .await;
            if done >= 9 {
                break;
            }
            assert!(Instant::now() < deadline, "{done} of 9 mails done");
            actix_rt::time::sleep(Duration::from_millis(20)).await;
        }
        engine.shutdown(Duration::from_secs(5)).await.unwrap();
    });
    let db = ws.catalog();
    let runs: Vec<(String, String)> = db
        .rows(
            "SELECT r.status, r.params FROM job_run r JOIN job j USING (job_id)
             WHERE j.job_name = 'mail' ORDER BY r.run_id",
        )
        .iter()
        .map(|r| (r[0].as_str().unwrap().into(), r[1].as_str().unwrap().into()))
        .collect();
    assert_eq!(runs.len(), 9, "one run per mail: {runs:?}");
    let mut names = BTreeSet::new();
    for (status, params) in &runs {
        assert_eq!(status, "succeeded", "{params}");
        let p: serde_json::Value = serde_json::from_str(params).unwrap();
        let path = std::path::PathBuf::from(p["path"].as_str().unwrap());
        // In its run's own folder under the data folder, with its own bytes.
        assert!(
            path.starts_with(ws.path("data/inbox/mail")),
            "{}",
            path.display()
        );
        assert!(
            std::fs::read_to_string(&path)
                .unwrap()
                .starts_with("From: sender")
        );
        assert_eq!(p["inbox"], inbox.display().to_string());
        names.insert(p["file"].as_str().unwrap().to_string());
    }
    assert_eq!(names.len(), 9);
    let left: Vec<String> = std::fs::read_dir(&inbox)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, ["notes.txt"], "only the file the pattern leaves");
    let pending = std::fs::read_dir(ws.path("data/inbox/mail/.pending"))
        .unwrap()
        .count();
    assert_eq!(pending, 0, "no file left between its move and its run");
    let keys = db.count("SELECT count(DISTINCT inbox_key) FROM inbox_file");
    assert_eq!(keys, 9);
}
