//! Browser sessions: a random cookie value stands for a signed-in user, kept in the node's
//! memory (a restart signs everyone out), with its CSRF token. The cookie is `HttpOnly`,
//! `SameSite=Strict` and `Secure` when the request came over TLS; the store keys sessions by a
//! SHA-256 of the cookie, so what memory holds cannot be replayed as a cookie.
//!
//! Invariant: a session expires after [`IDLE`] without a request and [`LIFETIME`] after sign-in
//! whatever happens; its user is looked up again at most [`RECHECK`] after the last look, so a
//! removed or disabled user, or a changed role, takes effect within it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ring::rand::{SecureRandom as _, SystemRandom};

use crate::ops::accounts::Principal;

/// The session cookie's name.
pub const COOKIE: &str = "jv_session";
/// The login form's double-submit cookie (a CSRF token before there is a session).
pub const LOGIN_COOKIE: &str = "jv_login";
/// A session ends after this long without a request.
pub const IDLE: Duration = Duration::from_secs(8 * 3600);
/// A session ends this long after sign-in.
pub const LIFETIME: Duration = Duration::from_secs(24 * 3600);
/// How long a session's user and role are trusted before the catalog is asked again.
pub const RECHECK: Duration = Duration::from_secs(5);
/// The most sessions kept; past it the least recently used goes.
const MAX_SESSIONS: usize = 10_000;

/// A signed-in browser.
#[derive(Debug, Clone)]
pub struct Session {
    /// Who it is.
    pub principal: Principal,
    /// The token every state-changing request of this session must carry.
    pub csrf: String,
    /// The store's key (the cookie's hash), to end it.
    pub key: String,
    /// What the last action did, shown on the next page once.
    pub flash: Option<String>,
    created: Instant,
    seen: Instant,
    checked: Instant,
}

impl Session {
    /// Whether the user should be looked up again.
    pub fn stale(&self, now: Instant) -> bool {
        now.duration_since(self.checked) >= RECHECK
    }
}

/// The sessions of one node.
#[derive(Debug, Default)]
pub struct Sessions {
    map: Mutex<HashMap<String, Session>>,
}

/// 32 random bytes as URL-safe text (43 characters).
pub fn random_token() -> Option<String> {
    use base64::Engine as _;
    let mut bytes = [0u8; 32];
    SystemRandom::new().fill(&mut bytes).ok()?;
    Some(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

fn key_of(cookie: &str) -> String {
    crate::ops::accounts::token_hash(cookie)
}

/// Whether two secrets are equal, in time that does not depend on where they differ.
pub fn same_secret(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Sessions {
    /// Starts a session for `principal`; returns the cookie's value (shown to the browser only).
    pub fn start(&self, principal: Principal, now: Instant) -> Option<String> {
        let cookie = random_token()?;
        let csrf = random_token()?;
        let key = key_of(&cookie);
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|_, s| alive(s, now));
        if map.len() >= MAX_SESSIONS
            && let Some(oldest) = map
                .iter()
                .min_by_key(|(_, s)| s.seen)
                .map(|(k, _)| k.clone())
        {
            map.remove(&oldest);
        }
        map.insert(
            key.clone(),
            Session {
                principal,
                csrf,
                key,
                flash: None,
                created: now,
                seen: now,
                checked: now,
            },
        );
        Some(cookie)
    }

    /// The live session of a cookie's value, marked seen at `now`.
    pub fn find(&self, cookie: &str, now: Instant) -> Option<Session> {
        let key = key_of(cookie);
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        let session = map.get_mut(&key)?;
        if !alive(session, now) {
            map.remove(&key);
            return None;
        }
        session.seen = now;
        Some(session.clone())
    }

    /// After the catalog was asked again: the user as found now, or `None` to end the session.
    pub fn rechecked(&self, key: &str, found: Option<Principal>, now: Instant) {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        match found {
            Some(p) => {
                if let Some(s) = map.get_mut(key) {
                    s.principal = p;
                    s.checked = now;
                }
            }
            None => {
                map.remove(key);
            }
        }
    }

    /// Keeps `note` for the session's next page (an action's answer is a redirect).
    pub fn set_flash(&self, key: &str, note: String) {
        if let Some(s) = self
            .map
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(key)
        {
            s.flash = Some(note);
        }
    }

    /// Takes the note kept for the session's next page.
    pub fn take_flash(&self, key: &str) -> Option<String> {
        self.map
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(key)
            .and_then(|s| s.flash.take())
    }

    /// Ends a session.
    pub fn end(&self, key: &str) {
        self.map
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
    }
}

fn alive(s: &Session, now: Instant) -> bool {
    now.duration_since(s.seen) < IDLE && now.duration_since(s.created) < LIFETIME
}

/// The value of cookie `name` in a `Cookie` header.
pub fn cookie_value<'a>(header: &'a str, name: &str) -> Option<&'a str> {
    header.split(';').find_map(|pair| {
        let (k, v) = pair.trim().split_once('=')?;
        (k == name).then_some(v)
    })
}

/// A `Set-Cookie` value: HttpOnly and SameSite=Strict always, Secure over TLS; `max_age`
/// `Some(0)` deletes it.
pub fn set_cookie(
    name: &str,
    value: &str,
    path: &str,
    secure: bool,
    max_age: Option<u64>,
) -> String {
    let mut c = format!("{name}={value}; Path={path}; HttpOnly; SameSite=Strict");
    if secure {
        c.push_str("; Secure");
    }
    if let Some(age) = max_age {
        c.push_str(&format!("; Max-Age={age}"));
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Role;

    fn admin() -> Principal {
        Principal {
            user: "ada".into(),
            role: Role::Admin,
        }
    }

    #[test]
    fn a_session_is_found_by_its_cookie_and_ends_when_idle_or_old() {
        let s = Sessions::default();
        let t0 = Instant::now();
        let cookie = s.start(admin(), t0).unwrap();
        assert_eq!(cookie.len(), 43);
        let found = s.find(&cookie, t0).unwrap();
        assert_eq!(found.principal, admin());
        assert!(s.find("not-the-cookie", t0).is_none());
        // Seen often, it still ends at its lifetime.
        let mut t = t0;
        while t < t0 + LIFETIME - Duration::from_secs(3600) {
            t += Duration::from_secs(3600);
            assert!(s.find(&cookie, t).is_some());
        }
        assert!(s.find(&cookie, t0 + LIFETIME).is_none());
        let other = s.start(admin(), t0).unwrap();
        assert!(s.find(&other, t0 + IDLE).is_none(), "idle too long");
    }

    #[test]
    fn a_recheck_that_finds_no_user_ends_the_session() {
        let s = Sessions::default();
        let t0 = Instant::now();
        let cookie = s.start(admin(), t0).unwrap();
        let found = s.find(&cookie, t0).unwrap();
        assert!(!found.stale(t0));
        assert!(found.stale(t0 + RECHECK));
        let viewer = Principal {
            user: "ada".into(),
            role: Role::Viewer,
        };
        s.rechecked(&found.key, Some(viewer.clone()), t0);
        assert_eq!(s.find(&cookie, t0).unwrap().principal, viewer);
        s.rechecked(&found.key, None, t0);
        assert!(s.find(&cookie, t0).is_none());
    }

    #[test]
    fn cookies_are_http_only_strict_and_secure_over_tls() {
        assert_eq!(
            set_cookie("jv_session", "abc", "/ui", false, None),
            "jv_session=abc; Path=/ui; HttpOnly; SameSite=Strict"
        );
        assert!(
            set_cookie("jv_session", "abc", "/ui", true, Some(0)).ends_with("; Secure; Max-Age=0")
        );
        assert_eq!(
            cookie_value("a=1; jv_session=xyz; b=2", "jv_session"),
            Some("xyz")
        );
        assert_eq!(cookie_value("jv_sessionx=1", "jv_session"), None);
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd"));
        assert!(!same_secret("abc", "abcd"));
    }
}
