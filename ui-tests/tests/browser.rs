//! The web UI in a real headless Chromium, driven over WebDriver (fantoccini → Debian's
//! chromedriver on a free loopback port) against a real `jobvisor run` node with a temporary
//! catalog: sign in; create a job with a bad cron and see the error beside the field; fix it;
//! run it now and see the run succeed without a reload; disable it; see the health chart drawn
//! with data; a job, params and command output full of HTML render inert on every page; a
//! viewer sees no edit controls and the server refuses their change; a POST without the CSRF
//! token or without a session is refused. Every page is saved as a screenshot at desktop and
//! phone width in `target/tmp/ui/` (and checked for sideways overflow at phone width).
//!
//! Needs `/usr/bin/chromium` and `chromedriver` (`.ci/test` installs Debian's) and the
//! `jobvisor` binary (`target/debug/jobvisor`, or `JOBVISOR_BIN`).

use std::io::BufRead as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value as Json, json};

const ADMIN: (&str, &str) = ("ada", "correct horse battery");
const VIEWER: (&str, &str) = ("vic", "viewer password 12");
const DESKTOP: (u32, u32) = (1280, 900);
const PHONE: (u32, u32) = (390, 844);

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn jobvisor_bin() -> PathBuf {
    let bin = std::env::var_os("JOBVISOR_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target/debug/jobvisor"));
    assert!(
        bin.exists(),
        "{} is missing: build it first (`cargo build`), or set JOBVISOR_BIN",
        bin.display()
    );
    bin
}

/// A child process killed when dropped (a failing test leaves nothing running).
struct Guarded(Child);

impl Drop for Guarded {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// chromedriver in a process group of its own, which is ended whole when dropped: the
/// browser it started (and that browser's helpers) would outlive it when a failing test never
/// closes its session.
struct Group(Child);

impl Drop for Group {
    fn drop(&mut self) {
        let group = format!("-{}", self.0.id());
        let _ = Command::new("kill").args(["-TERM", "--", &group]).status();
        std::thread::sleep(Duration::from_millis(300));
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = self.0.wait();
    }
}

/// A node on port 0 with a temporary catalog, an admin and a viewer.
struct Node {
    _dir: tempfile::TempDir,
    _child: Guarded,
    base: String,
}

fn cli(db: &Path, args: &[&str], stdin: Option<&str>) {
    use std::io::Write as _;
    let mut child = Command::new(jobvisor_bin())
        .arg("--db")
        .arg(db)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    if let Some(text) = stdin {
        writeln!(child.stdin.take().unwrap(), "{text}").unwrap();
    }
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success(), "jobvisor {args:?}");
}

fn start_node() -> Node {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("catalog.db");
    cli(&db, &["init"], None);
    cli(
        &db,
        &[
            "users",
            "add",
            ADMIN.0,
            "--role",
            "admin",
            "--password-stdin",
        ],
        Some(ADMIN.1),
    );
    cli(
        &db,
        &[
            "users",
            "add",
            VIEWER.0,
            "--role",
            "viewer",
            "--password-stdin",
        ],
        Some(VIEWER.1),
    );
    let mut child = Command::new(jobvisor_bin())
        .arg("--db")
        .arg(&db)
        .args(["run", "--bind", "127.0.0.1:0", "--node", "ui", "--data-dir"])
        .arg(dir.path().join("data"))
        .current_dir(dir.path())
        // Samples every second, so the charts have data within the test.
        .env("JOBVISOR__HEALTH__INTERVAL", "1000")
        .env("JOBVISOR__POLICY__PRIORITY_FLOOR", "-1000000000")
        .env("JOBVISOR__NODE__SHUTDOWN_GRACE", "1000")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(dir.path().join("node.log")).unwrap())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut base = None;
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(api) = line.trim().strip_prefix("api:") {
            base = Some(api.trim().to_string());
            break;
        }
    }
    std::thread::spawn(move || for _ in lines {});
    let base = base.expect("the node printed its address");
    Node {
        _dir: dir,
        _child: Guarded(child),
        base,
    }
}

/// chromedriver on a port the system chose free a moment before.
fn start_chromedriver() -> (Group, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new("chromedriver")
        .arg(format!("--port={port}"))
        .process_group(0)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver must be installed (.ci/test installs Debian's chromium-driver)");
    let guarded = Group(child);
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "chromedriver did not listen"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    (guarded, format!("http://127.0.0.1:{port}"))
}

async fn browser(driver: &str) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": "/usr/bin/chromium",
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-background-networking", "--disable-component-update",
                "--no-first-run", "--disable-sync", "--hide-scrollbars",
                format!("--window-size={},{}", DESKTOP.0, DESKTOP.1),
            ],
        }),
    );
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(driver)
        .await
        .expect("a WebDriver session")
}

/// The test's view of the browser.
struct Ui {
    c: Client,
    base: String,
    shots: PathBuf,
}

impl Ui {
    async fn goto(&self, path: &str) {
        self.c.goto(&format!("{}{path}", self.base)).await.unwrap();
    }

    async fn js(&self, script: &str) -> Json {
        self.c.execute(script, vec![]).await.unwrap()
    }

    /// Polls `expr` (a JavaScript expression) until it is truthy; returns its value.
    async fn until(&self, what: &str, expr: &str) -> Json {
        let start = Instant::now();
        loop {
            let v = self
                .c
                .execute(&format!("return ({expr});"), vec![])
                .await
                .unwrap_or(Json::Null);
            let truthy = match &v {
                Json::Null | Json::Bool(false) => false,
                Json::Number(n) => n.as_f64() != Some(0.0),
                Json::String(s) => !s.is_empty(),
                _ => true,
            };
            if truthy {
                return v;
            }
            if start.elapsed() > Duration::from_secs(45) {
                let body = self.js("return document.body.innerText").await;
                panic!("timed out waiting for {what} ({expr}); the page says:\n{body}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn click(&self, css: &str) {
        self.c
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no {css}: {e}"))
            .click()
            .await
            .unwrap();
    }

    async fn type_into(&self, css: &str, text: &str) {
        let e = self.c.find(Locator::Css(css)).await.unwrap();
        e.clear().await.unwrap();
        e.send_keys(text).await.unwrap();
    }

    /// No dialog is open (an alert would mean a script ran).
    async fn no_dialog(&self, page: &str) {
        if let Ok(text) = self.c.get_alert_text().await {
            panic!("a dialog opened on {page}: {text}");
        }
    }

    /// Saves the page at desktop and at phone width, and checks that at phone width the page
    /// does not scroll sideways (wide tables scroll inside their own box).
    async fn shots(&self, name: &str) {
        self.shots_at(name, None).await;
    }

    /// As [`Ui::shots`], with the element `css` scrolled into view at each width.
    async fn shots_at(&self, name: &str, css: Option<&str>) {
        for (label, (w, h)) in [("desktop", DESKTOP), ("phone", PHONE)] {
            self.c.set_window_size(w, h).await.unwrap();
            tokio::time::sleep(Duration::from_millis(400)).await;
            if let Some(css) = css {
                self.js(&format!(
                    "document.querySelector('{css}').scrollIntoView(); return 1"
                ))
                .await;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            if label == "phone" {
                let overflow = self
                    .js("return document.documentElement.scrollWidth - window.innerWidth")
                    .await
                    .as_f64()
                    .unwrap_or(0.0);
                assert!(
                    overflow <= 1.0,
                    "{name} scrolls sideways by {overflow}px at phone width"
                );
            }
            let png = self.c.screenshot().await.unwrap();
            std::fs::write(self.shots.join(format!("{name}-{label}.png")), png).unwrap();
        }
        self.c.set_window_size(DESKTOP.0, DESKTOP.1).await.unwrap();
    }

    async fn sign_in(&self, (user, password): (&str, &str)) {
        self.goto("/ui/login").await;
        self.type_into("#user", user).await;
        self.type_into("#password", password).await;
        self.click("button[type=submit]").await;
        self.until(
            "the overview",
            "document.querySelector('#node-state') !== null",
        )
        .await;
    }
}

/// How many pixels of a canvas in `chart` have the first series' colour (#2563eb), i.e. how
/// much of the line or its points uPlot drew, as opposed to axes and grid.
const SERIES_PIXELS: &str = "(function (id) {
  var el = document.getElementById(id); if (!el) { return 0; }
  var c = el.querySelector('canvas'); if (!c || !c.width) { return 0; }
  var d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data, n = 0;
  for (var i = 0; i < d.length; i += 4) {
    if (Math.abs(d[i] - 37) < 40 && Math.abs(d[i + 1] - 99) < 40 && Math.abs(d[i + 2] - 235) < 40 && d[i + 3] > 100) { n++; }
  }
  return n;
})";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_ui_in_headless_chromium() {
    let node = start_node();
    let (_driver, driver_url) = start_chromedriver();
    let shots = workspace_root().join("target/tmp/ui");
    std::fs::create_dir_all(&shots).unwrap();
    let ui = Ui {
        c: browser(&driver_url).await,
        base: node.base.clone(),
        shots,
    };

    // The login page, then in.
    ui.goto("/ui/jobs").await;
    ui.until("the login page", "location.pathname === '/ui/login'")
        .await;
    ui.shots("login").await;
    ui.sign_in(ADMIN).await;

    // A job with a bad cron: the live preview names the problem as it is typed, and saving
    // shows it beside the field.
    ui.goto("/ui/new-job").await;
    ui.type_into("#f-name", "nightly").await;
    ui.type_into(
        "#f-payload",
        r#"{"function": "debug.echo", "hello": "world"}"#,
    )
    .await;
    ui.type_into("#f-cron", "61 * * * *").await;
    ui.until(
        "the preview's problem",
        "(document.querySelector('#schedule-problems') || {}).textContent",
    )
    .await;
    ui.click("#save").await;
    let beside = ui
        .until(
            "the cron error beside its field",
            "document.querySelector('#cron-error') && document.querySelector('#f-cron').nextElementSibling.id",
        )
        .await;
    assert_eq!(beside, "cron-error");
    let said = ui
        .js("return document.querySelector('#cron-error').textContent")
        .await;
    // The field's own error names what is wrong (issue 27, point 16: the field and its range).
    assert!(
        said.as_str().unwrap().contains("minute 61 is out of range"),
        "{said}"
    );
    ui.shots("job-form-error").await;
    // Fixed: ten fire times as it is typed, then saved.
    ui.type_into("#f-cron", "5 4 * * *").await;
    let times = ui
        .until(
            "ten fire times",
            "document.querySelectorAll('#schedule-times li').length === 10 && document.querySelector('#schedule-words').textContent",
        )
        .await;
    assert!(!times.as_str().unwrap().is_empty());
    ui.shots("job-form").await;
    ui.click("#save").await;
    ui.until(
        "the job page",
        "document.querySelector('#run-now') !== null && document.title.startsWith('nightly')",
    )
    .await;

    // No run yet: the duration chart's empty note is drawn right under that chart (not under
    // the last output below it).
    let under = ui
        .until(
            "the empty duration chart's note",
            "(function () { var c = document.querySelector('[data-chart^=\"/ui/charts?c=job\"]'); \
             var n = c && c.nextElementSibling; \
             return n && n.className === 'chart-empty' && n.textContent; })()",
        )
        .await;
    assert_eq!(under, "no samples in this range yet");

    // Run it now: the run succeeds on the page without a reload.
    ui.js("window.__kept = 'no reload'; return 1").await;
    ui.type_into("#params", r#"{"day": "2026-11-30"}"#).await;
    ui.click("#run-now").await;
    ui.until(
        "a succeeded run in the history",
        "document.querySelector('#job-runs tr[data-status=succeeded]') !== null",
    )
    .await;
    assert_eq!(
        ui.js("return window.__kept").await,
        "no reload",
        "the page was reloaded"
    );
    ui.until(
        "the last response",
        "document.querySelector('#last-response').textContent.includes('2026-11-30')",
    )
    .await;
    ui.shots("job").await;

    // Disable it.
    ui.click("#disable").await;
    ui.until(
        "the job disabled",
        "document.querySelector('#job-state').textContent === 'disabled'",
    )
    .await;
    assert_eq!(ui.js("return window.__kept").await, "no reload");

    // The overview's health chart is drawn with data.
    ui.goto("/ui/").await;
    let points = ui
        .until(
            "the CPU chart's data",
            "Number((document.getElementById('chart-health.cpu') || {dataset: {}}).dataset.points || 0)",
        )
        .await;
    assert!(points.as_f64().unwrap() >= 1.0);
    let drawn = ui
        .until(
            "the CPU series drawn",
            &format!(
                "{SERIES_PIXELS}('chart-health.cpu') > 5 && {SERIES_PIXELS}('chart-health.cpu')"
            ),
        )
        .await;
    println!("CPU chart: {points} buckets with values, {drawn} pixels of the series' colour");
    ui.shots("overview").await;
    assert!(
        ui.js("return document.querySelector('#node-level').textContent")
            .await
            .as_str()
            .unwrap()
            .starts_with("health "),
        "the health verdict beside the state"
    );
    // Pausing the node asks first; only the confirming button pauses it.
    ui.click("#pause").await;
    ui.until(
        "the confirmation",
        "document.querySelector('#pause-confirm') !== null",
    )
    .await;
    ui.shots("confirm-pause").await;
    ui.click("#pause-confirm").await;
    ui.until(
        "the node paused",
        "(document.querySelector('#node-state') || {}).textContent === 'paused'",
    )
    .await;
    ui.click("#pause").await;
    ui.until(
        "the node resumed",
        "(document.querySelector('#node-state') || {}).textContent === 'running'",
    )
    .await;
    ui.js("document.querySelector('.charts').scrollIntoView(); return 1")
        .await;
    ui.shots("overview-charts").await;

    // A processor paused fleet-wide from the Pauses page, listed with who and why, resumed.
    ui.goto("/ui/pauses").await;
    ui.until(
        "the pause form",
        "document.querySelector('#pause-form') !== null",
    )
    .await;
    ui.type_into("#p-name", "main").await;
    ui.type_into("#p-reason", "db upgrade").await;
    ui.js("document.querySelector('#pause-form input[name=fleet]').checked = true; return 1")
        .await;
    ui.click("#pause-submit").await;
    let row = ui
        .until(
            "the pause listed",
            "(document.querySelector('tr[data-pause=\"processor/main@fleet\"]') || {}).textContent",
        )
        .await;
    let row = row.as_str().unwrap();
    assert!(row.contains("db upgrade") && row.contains(ADMIN.0), "{row}");
    ui.shots("pauses").await;
    ui.click("tr[data-pause=\"processor/main@fleet\"] button")
        .await;
    ui.until(
        "the pause ended",
        "document.querySelector('tr[data-pause]') === null",
    )
    .await;

    // The other pages.
    for (name, path) in [
        ("jobs", "/ui/jobs"),
        ("runs", "/ui/runs"),
        ("processors", "/ui/processors"),
        ("objects", "/ui/objects"),
        ("decisions", "/ui/decisions"),
        ("nodes", "/ui/nodes"),
    ] {
        ui.goto(path).await;
        ui.until(name, "document.querySelector('main h1') !== null")
            .await;
        ui.shots(name).await;
    }
    ui.goto("/ui/runs").await;
    let first = ui
        .until(
            "a run link",
            "(document.querySelector('#runs-table tbody a') || {}).href",
        )
        .await;
    ui.c.goto(first.as_str().unwrap()).await.unwrap();
    ui.until(
        "the run page",
        "document.querySelector('#run-status') !== null",
    )
    .await;
    ui.shots("run").await;

    // XSS: a name refused with its value echoed, a description, params and command output
    // full of HTML — all shown as text, nothing executed, on every page.
    ui.goto("/ui/new-job").await;
    ui.type_into("#f-name", "<script>alert(1)</script>").await;
    ui.click("#save").await;
    ui.until(
        "the name error",
        "document.querySelector('#name-error') !== null",
    )
    .await;
    ui.no_dialog("the refused name").await;
    let echoed = ui
        .js("return document.querySelector('#name-error').textContent")
        .await;
    assert!(
        echoed
            .as_str()
            .unwrap()
            .contains("<script>alert(1)</script>"),
        "{echoed}"
    );
    ui.goto("/ui/new-job").await;
    ui.type_into("#f-name", "xss").await;
    ui.c.find(Locator::Css("#f-type"))
        .await
        .unwrap()
        .select_by_value("command")
        .await
        .unwrap();
    ui.type_into("#f-description", "<script>alert(1)</script>")
        .await;
    ui.type_into(
        "#f-payload",
        r#"{"argv": ["sh", "-c", "echo '<img src=x onerror=alert(2)><script>alert(3)</script><b>bold</b>'; echo \"$JOBVISOR_PARAMS\"; exit 1"]}"#,
    )
    .await;
    ui.click("#save").await;
    ui.until(
        "the xss job's page",
        "document.querySelector('#run-now') !== null",
    )
    .await;
    ui.type_into("#params", r#"{"q": "\"><img src=x onerror=alert(4)>"}"#)
        .await;
    ui.click("#run-now").await;
    ui.until(
        "the xss run ended",
        "document.querySelector('#job-runs tr[data-status=failed]') !== null",
    )
    .await;
    let run = ui
        .js("return document.querySelector('#job-runs tr[data-status=failed]').dataset.run")
        .await;
    let run = run.as_str().unwrap().to_string();
    for path in [
        "/ui/jobs/xss".to_string(),
        "/ui/jobs?search=xss".to_string(),
        "/ui/runs".to_string(),
        format!("/ui/runs/{run}"),
        "/ui/".to_string(),
        "/ui/decisions".to_string(),
    ] {
        ui.goto(&path).await;
        ui.until(&path, "document.querySelector('main h1') !== null")
            .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        ui.no_dialog(&path).await;
        let live = ui
            .js("return document.querySelectorAll('img[src=\"x\"], b, main script, script:not([src])').length")
            .await;
        assert_eq!(live, 0, "{path}: HTML from the catalog became elements");
    }
    ui.goto(&format!("/ui/runs/{run}")).await;
    ui.until(
        "the run page",
        "document.querySelector('#run-log') !== null",
    )
    .await;
    let log = ui
        .js("return document.querySelector('#run-log').textContent")
        .await;
    assert!(
        log.as_str()
            .unwrap()
            .contains("<img src=x onerror=alert(2)>"),
        "shown as text: {log}"
    );
    let params = ui
        .js("return document.querySelector('#run-params').textContent")
        .await;
    assert!(
        params.as_str().unwrap().contains("onerror=alert(4)"),
        "{params}"
    );
    ui.shots("run-xss").await;
    ui.goto("/ui/jobs/xss").await;
    ui.until(
        "the job page",
        "document.querySelector('.description') !== null",
    )
    .await;
    let description = ui
        .js("return document.querySelector('.description').textContent")
        .await;
    assert_eq!(description, "<script>alert(1)</script>");
    ui.no_dialog("the xss job").await;

    // A POST without the CSRF token is refused, with the session.
    let status = ui
        .js("return fetch('/ui/jobs/nightly/enable', {method: 'POST'}).then(function (r) { return r.status; })")
        .await;
    assert_eq!(status, 403, "no CSRF token");

    // A viewer sees no edit controls, and the server refuses their change anyway.
    ui.c.delete_all_cookies().await.unwrap();
    ui.sign_in(VIEWER).await;
    ui.goto("/ui/jobs/nightly").await;
    ui.until(
        "the job page",
        "document.querySelector('#job-state') !== null",
    )
    .await;
    let controls = ui
        .js("return document.querySelectorAll('#run-now, #enable, #disable, #edit, form[action$=\"/delete\"]').length")
        .await;
    assert_eq!(controls, 0, "a viewer is shown edit controls");
    let status = ui
        .js("return fetch('/ui/jobs/nightly/enable', {method: 'POST', headers: {'X-CSRF-Token': document.querySelector('meta[name=csrf-token]').content}}).then(function (r) { return r.status; })")
        .await;
    assert_eq!(status, 403, "the viewer's change");
    ui.shots("job-viewer").await;

    // Without a session a POST is refused too.
    ui.c.delete_all_cookies().await.unwrap();
    let status = ui
        .js("return fetch('/ui/jobs/nightly/enable', {method: 'POST'}).then(function (r) { return r.status; })")
        .await;
    assert_eq!(status, 401, "no session");

    ui.c.close().await.unwrap();
}
