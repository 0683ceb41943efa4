//! The service manager's notification protocol (`sd_notify`): `READY=1` once the node serves,
//! `STOPPING=1` when it begins to stop, `WATCHDOG=1` while its Supervisor handles messages — one
//! datagram each to the socket `NOTIFY_SOCKET` names (systemd's `Type=notify`,
//! `WatchdogSec=`; anything else that speaks it). Without `NOTIFY_SOCKET` every call does
//! nothing.
//!
//! Invariant: a notification never blocks and never fails the node (a datagram the manager
//! does not take is lost, and logged at debug); watchdog pings come from the Supervisor's own
//! timer, so a Supervisor that stops handling messages stops them and the manager acts.

use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::Duration;

/// Where notifications go, and how often the watchdog wants a ping.
#[derive(Debug, Clone, Default)]
pub struct Notifier {
    socket: Option<SocketAddr>,
    watchdog: Option<Duration>,
}

impl Notifier {
    /// From this process's environment: `NOTIFY_SOCKET` (a path, or `@name` for an abstract
    /// socket) and `WATCHDOG_USEC` (honoured only when `WATCHDOG_PID` is unset or this
    /// process's id).
    pub fn from_env() -> Notifier {
        Notifier::from_vars(
            std::env::var("NOTIFY_SOCKET").ok().as_deref(),
            std::env::var("WATCHDOG_USEC").ok().as_deref(),
            std::env::var("WATCHDOG_PID").ok().as_deref(),
            std::process::id(),
        )
    }

    /// From the variables' values (`None`: unset).
    pub fn from_vars(
        socket: Option<&str>,
        watchdog_usec: Option<&str>,
        watchdog_pid: Option<&str>,
        pid: u32,
    ) -> Notifier {
        let socket = socket
            .filter(|s| !s.is_empty())
            .and_then(|s| match s.strip_prefix('@') {
                Some(name) => {
                    use std::os::linux::net::SocketAddrExt;
                    SocketAddr::from_abstract_name(name.as_bytes()).ok()
                }
                None => SocketAddr::from_pathname(s).ok(),
            });
        let ours = watchdog_pid.is_none_or(|p| p.trim().parse::<u32>().ok() == Some(pid));
        let watchdog = watchdog_usec
            .and_then(|v| v.trim().parse::<u64>().ok())
            .filter(|us| *us > 0 && ours && socket.is_some())
            .map(Duration::from_micros);
        Notifier { socket, watchdog }
    }

    /// Whether a manager listens.
    pub fn enabled(&self) -> bool {
        self.socket.is_some()
    }

    /// How often to ping the watchdog: half its timeout, as systemd advises; `None` without
    /// one.
    pub fn watchdog_every(&self) -> Option<Duration> {
        self.watchdog.map(|t| t / 2)
    }

    /// Sends `state` (`READY=1`, newline-separated assignments); false when there is no socket
    /// or the datagram was not taken.
    pub fn notify(&self, state: &str) -> bool {
        let Some(addr) = &self.socket else {
            return false;
        };
        let sent = UnixDatagram::unbound().and_then(|s| {
            s.set_nonblocking(true)?;
            s.send_to_addr(state.as_bytes(), addr)
        });
        match sent {
            Ok(_) => true,
            Err(e) => {
                tracing::debug!(error = %e, state, "sd_notify: not delivered");
                false
            }
        }
    }

    /// `READY=1`, with a status line.
    pub fn ready(&self, status: &str) -> bool {
        self.notify(&format!(
            "READY=1\nSTATUS={status}\nMAINPID={}",
            std::process::id()
        ))
    }

    /// `STOPPING=1`.
    pub fn stopping(&self) -> bool {
        self.notify("STOPPING=1")
    }

    /// `WATCHDOG=1`.
    pub fn watchdog(&self) -> bool {
        self.notify("WATCHDOG=1")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notifications_reach_the_socket_named_and_nothing_happens_without_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify.sock");
        let listener = UnixDatagram::bind(&path).unwrap();
        listener
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let n = Notifier::from_vars(path.to_str(), Some("4000000"), None, 1);
        assert!(n.enabled());
        assert_eq!(n.watchdog_every(), Some(Duration::from_secs(2)));
        assert!(n.ready("serving"));
        assert!(n.watchdog());
        let mut buf = [0u8; 256];
        let len = listener.recv(&mut buf).unwrap();
        let first = std::str::from_utf8(&buf[..len]).unwrap();
        assert!(
            first.starts_with("READY=1\nSTATUS=serving\nMAINPID="),
            "{first}"
        );
        let len = listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"WATCHDOG=1");

        let none = Notifier::from_vars(None, Some("4000000"), None, 1);
        assert!(!none.enabled() && !none.ready("x") && none.watchdog_every().is_none());
        // Another process's watchdog is not ours to ping.
        let other = Notifier::from_vars(path.to_str(), Some("4000000"), Some("2"), 1);
        assert!(other.enabled() && other.watchdog_every().is_none());
        let ours = Notifier::from_vars(path.to_str(), Some("4000000"), Some("1"), 1);
        assert!(ours.watchdog_every().is_some());
        // A socket nobody listens on any more: the datagram is lost, the node goes on.
        drop(listener);
        assert!(!n.watchdog());
    }
}
