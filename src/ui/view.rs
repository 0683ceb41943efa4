//! The pages' templates (`templates/*.html`, compiled in by askama, every `{{ }}` escaped for
//! HTML) and what each one is given: display strings made here from the application layer's
//! views, so templates hold no logic beyond loops and conditions.

use askama::Template;
use chrono::TimeZone as _;
use chrono_tz::Tz;

use super::session::Session;
use crate::model::Role;

/// What every signed-in page shows around its content.
#[derive(Debug, Clone)]
pub struct Chrome {
    /// The user's name.
    pub user: String,
    /// Their role, in words.
    pub role: String,
    /// The session's CSRF token (forms' hidden field; `app.js` sends it as a header).
    pub csrf: String,
    /// The node serving the page.
    pub node: String,
    /// The page's navigation entry.
    pub active: &'static str,
    /// May trigger, cancel, retry, enable, disable, pin.
    pub operator: bool,
    /// May create and change every kind of job.
    pub admin: bool,
    /// What the last action did (shown once).
    pub flash: Option<String>,
}

impl Chrome {
    /// The chrome of page `active` for `session` on `node`.
    pub fn new(session: &Session, node: &str, active: &'static str) -> Self {
        Chrome {
            user: session.principal.user.clone(),
            role: session.principal.role.as_str().to_string(),
            csrf: session.csrf.clone(),
            node: node.to_string(),
            active,
            operator: session.principal.may(Role::Operator),
            admin: session.principal.may(Role::Admin),
            flash: None,
        }
    }

    /// The navigation: (path, label, whether it is this page).
    pub fn nav(&self) -> Vec<(&'static str, &'static str, bool)> {
        [
            ("/ui/", "Overview"),
            ("/ui/jobs", "Jobs"),
            ("/ui/runs", "Runs"),
            ("/ui/processors", "Processors"),
            ("/ui/objects", "Objects"),
            ("/ui/decisions", "Decisions"),
            ("/ui/pauses", "Pauses"),
            ("/ui/nodes", "Nodes"),
        ]
        .into_iter()
        .map(|(p, l)| (p, l, l == self.active))
        .collect()
    }
}

/// Formats instants in the node's zone and durations in their unit.
#[derive(Debug, Clone, Copy)]
pub struct Fmt {
    /// The node's zone.
    pub tz: Tz,
}

impl Fmt {
    /// `2026-11-01 14:03:22` in the node's zone; empty for none.
    pub fn time(&self, ms: Option<i64>) -> String {
        ms.and_then(|ms| self.tz.timestamp_millis_opt(ms).single())
            .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
            .unwrap_or_default()
    }

    /// `%a %Y-%m-%d %H:%M:%S %Z`, for fire times.
    pub fn long_time(&self, ms: i64) -> String {
        self.tz
            .timestamp_millis_opt(ms)
            .single()
            .map(|t| t.format("%a %Y-%m-%d %H:%M:%S %Z").to_string())
            .unwrap_or_default()
    }
}

/// `850 ms`, `1.2 s`, `3 min 4 s`, `2 h 5 min`; empty for none.
pub fn duration(ms: Option<i64>) -> String {
    let Some(ms) = ms else {
        return String::new();
    };
    match ms {
        ms if ms < 1000 => format!("{ms} ms"),
        ms if ms < 60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        ms if ms < 3_600_000 => format!("{} min {} s", ms / 60_000, ms % 60_000 / 1000),
        ms => format!("{} h {} min", ms / 3_600_000, ms % 3_600_000 / 60_000),
    }
}

/// JSON pretty-printed for reading; empty for none.
pub fn pretty(v: Option<&serde_json::Value>) -> String {
    v.map(|v| serde_json::to_string_pretty(v).unwrap_or_default())
        .unwrap_or_default()
}

/// The sign-in page.
#[derive(Template)]
#[template(path = "login.html")]
pub struct LoginPage {
    /// The login form's double-submit token.
    pub csrf: String,
    /// The user name typed, kept on a failed attempt.
    pub user: String,
    /// Why the last attempt failed.
    pub error: Option<String>,
}

/// An error page (its message is what `app.js` shows for a failed htmx request).
#[derive(Template)]
#[template(path = "error.html")]
pub struct ErrorPage {
    /// The HTTP status.
    pub status: u16,
    /// What went wrong.
    pub message: String,
}

/// A query string of `pairs`, empty values left out, each value encoded.
pub fn query(pairs: &[(&str, &str)]) -> String {
    let mut q = form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        if !v.is_empty() {
            q.append_pair(k, v);
        }
    }
    let q = q.finish();
    if q.is_empty() { q } else { format!("?{q}") }
}
