//! A node under a service manager: the `sd_notify` datagrams a `Type=notify` unit with
//! `WatchdogSec=` expects — `READY=1` once the API serves, `WATCHDOG=1` while the Supervisor
//! runs, `STOPPING=1` at a stop — read from a unix datagram socket the test binds, as systemd
//! would.

use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use crate::support::{Workspace, http_raw};

/// The next datagram within `secs`, as text.
fn next(socket: &UnixDatagram, secs: u64) -> Option<String> {
    socket
        .set_read_timeout(Some(Duration::from_secs(secs)))
        .unwrap();
    let mut buf = [0u8; 4096];
    let len = socket.recv(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf[..len]).into_owned())
}

#[test]
fn a_node_tells_its_manager_ready_after_the_api_binds_pings_the_watchdog_and_says_stopping() {
    let ws = Workspace::new();
    let path = ws.path("notify.sock");
    let socket = UnixDatagram::bind(&path).unwrap();
    ws.set_node_env("NOTIFY_SOCKET", path.to_str().unwrap());
    // A 1 s watchdog: a ping every half second.
    ws.set_node_env("WATCHDOG_USEC", "1000000");
    let node = ws.start_node("svc");
    let mut seen = Vec::new();
    let ready = loop {
        let msg = next(&socket, 20).unwrap_or_else(|| panic!("no READY=1; got {seen:?}"));
        if msg.starts_with("READY=1") {
            break msg;
        }
        seen.push(msg);
    };
    assert!(
        ready.contains("STATUS=serving http://127.0.0.1:"),
        "{ready}"
    );
    // READY comes after the API binds: it answers now.
    let health = http_raw(&node.api, "GET", "/healthz", &[], b"");
    assert_eq!(health.status, 200);
    // Pings keep coming while the node runs: at least 4 in 3 s at one per 0.5 s.
    let started = Instant::now();
    let mut pings = seen.iter().filter(|m| *m == "WATCHDOG=1").count();
    while started.elapsed() < Duration::from_secs(3) {
        if next(&socket, 2).as_deref() == Some("WATCHDOG=1") {
            pings += 1;
        }
    }
    assert!(pings >= 4, "{pings} watchdog pings in 3 s");
    assert_eq!(node.stop(), Some(0));
    let mut rest = Vec::new();
    while let Some(msg) = next(&socket, 1) {
        rest.push(msg);
    }
    assert!(rest.iter().any(|m| m == "STOPPING=1"), "{rest:?}");
    println!(
        "figures (sd_notify): READY after the API bound; {pings} watchdog pings in 3 s; STOPPING at the stop"
    );
}

const UNIT: &str = include_str!("../../deploy/jobvisor.service");
const DOCKERFILE: &str = include_str!("../../Dockerfile");

/// `systemd-analyze verify` accepts the unit (its `ExecStart` pointed at this build's binary,
/// which verify requires to exist), and it has what the node needs under systemd.
#[test]
fn the_systemd_unit_passes_systemd_analyze_verify() {
    for needed in [
        "Type=notify",
        "WatchdogSec=",
        "MemoryMax=",
        "CPUQuota=",
        "Delegate=yes",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "StateDirectory=jobvisor",
    ] {
        assert!(
            UNIT.lines().any(|l| l.starts_with(needed)),
            "deploy/jobvisor.service lacks {needed}"
        );
    }
    // Installed by .ci/test (Debian's systemd package); absent, this fails.
    let dir = tempfile::tempdir().unwrap();
    let unit = dir.path().join("jobvisor.service");
    std::fs::write(
        &unit,
        UNIT.replace("/usr/local/bin/jobvisor", env!("CARGO_BIN_EXE_jobvisor")),
    )
    .unwrap();
    let out = std::process::Command::new("systemd-analyze")
        .arg("verify")
        .arg(&unit)
        .output()
        .expect("systemd-analyze is not installed (.ci/test installs it: apt-get install systemd)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "systemd-analyze verify: {stderr}");
    assert!(!stderr.contains("jobvisor.service"), "{stderr}");
}

/// The Dockerfile cannot be built here (no builder): its required shape is checked instead —
/// multi-stage, a non-root user, the data folder a volume, a health check on `/healthz` — and
/// the health check's own command is run against a live node and a stopped one.
#[test]
fn the_dockerfile_is_multi_stage_non_root_with_a_volume_and_a_working_health_check() {
    // Continuation lines joined, comments dropped.
    let joined = DOCKERFILE.replace("\\\n", " ");
    let lines: Vec<&str> = joined
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let instr = |name: &str| -> Vec<&str> {
        lines
            .iter()
            .filter_map(|l| {
                let (i, rest) = l.split_once(char::is_whitespace)?;
                i.eq_ignore_ascii_case(name).then_some(rest.trim())
            })
            .collect()
    };
    let from = instr("FROM");
    assert!(from.len() >= 2, "not multi-stage: {from:?}");
    let stage = from[0].split_whitespace().last().unwrap();
    assert!(from[0].to_lowercase().contains(" as "), "{from:?}");
    assert!(
        instr("COPY")
            .iter()
            .any(|c| c.starts_with(&format!("--from={stage}"))),
        "the final image copies nothing from the build stage"
    );
    assert!(from.last().unwrap().contains("slim"), "{from:?}");
    let user = *instr("USER")
        .last()
        .expect("no USER: the image would run as root");
    let uid = user.split(':').next().unwrap();
    assert!(uid != "root" && uid != "0", "runs as root: USER {user}");
    assert!(
        instr("VOLUME")
            .iter()
            .any(|v| v.contains("/var/lib/jobvisor")),
        "the data folder is not a volume"
    );
    let env = instr("ENV").join(" ");
    assert!(
        env.contains("JOBVISOR__NODE__DATA_DIR=/var/lib/jobvisor"),
        "{env}"
    );
    let health = instr("HEALTHCHECK");
    assert_eq!(health.len(), 1, "{health:?}");
    assert!(health[0].contains("/healthz"), "{}", health[0]);
    // Its command, as JSON after CMD, run against a node on the port it probes.
    let cmd: Vec<String> = serde_json::from_str(health[0].split_once("CMD").unwrap().1.trim())
        .unwrap_or_else(|e| panic!("HEALTHCHECK CMD is not an exec-form array ({e})"));
    let ws = Workspace::new();
    let node = ws.start_node("probe");
    let port = node.api.rsplit(':').next().unwrap().to_string();
    let probe = || {
        let script = cmd[2].replace("/7878", &format!("/{port}"));
        std::process::Command::new(&cmd[0])
            .args([&cmd[1], &script])
            .status()
            .unwrap()
            .success()
    };
    assert!(probe(), "the health check fails against a healthy node");
    assert_eq!(node.stop(), Some(0));
    assert!(!probe(), "the health check passes with no node");
}

/// A wedged Supervisor (its thread blocked by the `debug.wedge` fault hook) sends no watchdog
/// ping, so the manager would restart it; the pings resume when it runs again.
#[test]
fn no_watchdog_ping_while_the_supervisor_is_wedged() {
    let ws = Workspace::new();
    let conf = ws.write(
        "wedge.conf",
        "[job.wedge]\ntype = \"function\"\nprocessor = \"main\"\n\
         payload = { function = \"debug.wedge\", ms = 4000 }\n",
    );
    ws.ok(&["init"]);
    ws.ok(&["import", conf.to_str().unwrap()]);
    let path = ws.path("notify.sock");
    let socket = UnixDatagram::bind(&path).unwrap();
    ws.set_node_env("NOTIFY_SOCKET", path.to_str().unwrap());
    ws.set_node_env("WATCHDOG_USEC", "1000000");
    let node = ws.start_node("wedged");
    // Pings while healthy.
    let t0 = Instant::now();
    let mut pings: Vec<Duration> = Vec::new();
    while pings.len() < 3 {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "no pings while healthy"
        );
        if next(&socket, 5).as_deref() == Some("WATCHDOG=1") {
            pings.push(t0.elapsed());
        }
    }
    let wedged_at = t0.elapsed();
    ws.ok(&["jobs", "run", "wedge"]);
    while t0.elapsed() < wedged_at + Duration::from_secs(10) {
        if next(&socket, 1).as_deref() == Some("WATCHDOG=1") {
            pings.push(t0.elapsed());
        }
    }
    let gaps: Vec<Duration> = pings.windows(2).map(|w| w[1] - w[0]).collect();
    let longest = gaps.iter().max().copied().unwrap_or_default();
    assert!(
        longest >= Duration::from_secs(3),
        "the pings went on while the Supervisor was wedged: {pings:?}"
    );
    let after = pings
        .iter()
        .filter(|p| **p > wedged_at + Duration::from_secs(5))
        .count();
    assert!(after >= 3, "the pings did not resume: {pings:?}");
    println!(
        "figures (watchdog): wedged 4 s by debug.wedge: longest gap between pings {:.1} s \
         (healthy: {:.1} s), {after} pings after it",
        longest.as_secs_f64(),
        gaps.first().unwrap().as_secs_f64()
    );
    drop(node);
}
