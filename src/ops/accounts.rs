//! Accounts: users with an argon2id password and a role, and API tokens (`jv_` + 64 hex digits
//! of 32 random bytes) of which only a SHA-256 is stored. Who a request is (a [`Principal`]) is
//! decided here, for every face that authenticates.
//!
//! A verified password is remembered for [`VERIFIED_FOR`] so that Basic auth does not pay an
//! argon2 verification per request: as a keyed hash ([`VerifiedPasswords`]) of the user, the
//! password and the stored hash it matched, so a changed password, a removed or disabled user
//! misses at once (the row is read at every request; only argon2 is skipped).
//!
//! Invariant: a password or token is shown once, when created, and never stored or logged in
//! clear (nor kept in memory: a verified password only as an HMAC under a key drawn at start);
//! an unknown user costs the same argon2 verification as a known one.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use argon2::{Argon2, PasswordHash, PasswordHasher as _, PasswordVerifier as _};
use ring::hmac;
use ring::rand::{SecureRandom as _, SystemRandom};
use serde::Serialize;
use utoipa::ToSchema;

use super::view::Time;
use super::{OpError, Ops};
use crate::jobconf::check_name;
use crate::model::Role;

/// Who a request is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The user's name (the audit rows' actor).
    pub user: String,
    /// What the user may do.
    pub role: Role,
}

impl Principal {
    /// Whether the principal's role is at least `role` (viewer < operator < admin).
    pub fn may(&self, role: Role) -> bool {
        rank(self.role) >= rank(role)
    }
}

fn rank(r: Role) -> u8 {
    match r {
        Role::Viewer => 0,
        Role::Operator => 1,
        Role::Admin => 2,
    }
}

/// A user as listed.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct UserView {
    /// Name.
    pub name: String,
    /// admin, operator or viewer.
    pub role: String,
    /// Whether the user may sign in.
    pub enabled: bool,
    /// How many tokens the user holds.
    pub tokens: i64,
}

/// A token as listed (never the token).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TokenView {
    /// Its id.
    pub id: i64,
    /// Its user.
    pub user: String,
    /// Its label.
    pub name: String,
    /// When it was created.
    pub created_at: Time,
    /// From when it is refused; null: never.
    pub expires_at: Option<Time>,
}

/// A token just created: the only time its text is shown.
#[derive(Debug, Clone, Serialize)]
pub struct NewToken {
    /// Its id.
    pub id: i64,
    /// Its user.
    pub user: String,
    /// The bearer token.
    pub token: String,
    /// From when it is refused; null: never.
    pub expires_at: Option<Time>,
}

/// When a token made at `now` with a lifetime of `expires` (`90m`, `12h`, `30d`) expires; an
/// error names `field`.
pub fn expiry(field: &str, expires: &str, now: i64) -> Result<i64, OpError> {
    match super::view::duration_ms(expires.trim()) {
        Some(ms) if ms > 0 => Ok(now.saturating_add(ms)),
        Some(_) => Err(OpError::invalid(
            field,
            "a token's lifetime must be longer than 0",
        )),
        None => Err(OpError::invalid(
            field,
            format!("expected a lifetime such as 90m, 12h or 30d, got `{expires}`"),
        )),
    }
}

/// How long a verified password is taken again without argon2.
pub const VERIFIED_FOR: Duration = Duration::from_secs(60);

/// Passwords verified lately: for each, an HMAC-SHA256 of (user, password, the PHC string it
/// matched) under a key drawn when the first is kept, and when it was verified. Bounded: past
/// 1,000 entries the expired ones are dropped, and past 10,000 all.
#[derive(Default)]
pub struct VerifiedPasswords {
    key: OnceLock<Option<hmac::Key>>,
    seen: Mutex<HashMap<Vec<u8>, Instant>>,
}

impl std::fmt::Debug for VerifiedPasswords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("VerifiedPasswords")
    }
}

impl VerifiedPasswords {
    /// The tag of a credential; `None` when the system's random source failed (then nothing
    /// is remembered and every request pays argon2).
    fn tag(&self, user: &str, password: &str, phc: &str) -> Option<Vec<u8>> {
        let key = self
            .key
            .get_or_init(|| hmac::Key::generate(hmac::HMAC_SHA256, &SystemRandom::new()).ok())
            .as_ref()?;
        let mut ctx = hmac::Context::with_key(key);
        // Lengths first: no two (user, password, phc) triples share a message.
        for part in [user, password, phc] {
            ctx.update(&(part.len() as u64).to_be_bytes());
            ctx.update(part.as_bytes());
        }
        Some(ctx.sign().as_ref().to_vec())
    }

    /// Whether this credential matched this PHC string within [`VERIFIED_FOR`] of `now`.
    fn knows(&self, user: &str, password: &str, phc: &str, now: Instant) -> bool {
        let Some(tag) = self.tag(user, password, phc) else {
            return false;
        };
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        seen.get(&tag)
            .is_some_and(|at| now.saturating_duration_since(*at) < VERIFIED_FOR)
    }

    /// Remembers that this credential matched this PHC string at `now`.
    fn keep(&self, user: &str, password: &str, phc: &str, now: Instant) {
        let Some(tag) = self.tag(user, password, phc) else {
            return;
        };
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.len() >= 1000 {
            seen.retain(|_, at| now.saturating_duration_since(*at) < VERIFIED_FOR);
            if seen.len() >= 10_000 {
                seen.clear();
            }
        }
        seen.insert(tag, now);
    }
}

/// A user's stored password, read for one check ([`Ops::stored_password`]).
pub struct StoredPassword {
    user: String,
    /// The PHC string and the role, for an enabled user.
    found: Option<(String, String)>,
    verified: std::sync::Arc<VerifiedPasswords>,
}

impl StoredPassword {
    /// The principal, when `password` matched this stored hash within [`VERIFIED_FOR`]: no
    /// argon2, microseconds.
    pub fn known(&self, password: &str, now: Instant) -> Option<Principal> {
        let (phc, role) = self.found.as_ref()?;
        self.verified
            .knows(&self.user, password, phc, now)
            .then(|| self.principal(role))
            .flatten()
    }

    /// The principal, when `password` matches: an argon2 verification (slow on purpose; an
    /// unknown user costs the same), remembered when it matched.
    pub fn check(&self, password: &str, now: Instant) -> Option<Principal> {
        let Some((phc, role)) = &self.found else {
            verify(password, dummy_hash());
            return None;
        };
        if !verify(password, phc) {
            return None;
        }
        self.verified.keep(&self.user, password, phc, now);
        self.principal(role)
    }

    fn principal(&self, role: &str) -> Option<Principal> {
        Some(Principal {
            user: self.user.clone(),
            role: role_of(role)?,
        })
    }
}

/// 32 random bytes as hex.
fn random_hex() -> Result<String, OpError> {
    let mut bytes = [0u8; 32];
    SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| OpError::Unavailable("the system's random source failed".into()))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The stored form of a token: hex SHA-256.
pub fn token_hash(token: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// An argon2id PHC string of `password` (OWASP parameters: m = 19 MiB, t = 2, p = 1).
pub fn hash_password(password: &str) -> Result<String, OpError> {
    Argon2::default()
        .hash_password(password.as_bytes())
        .map(|h| h.to_string())
        .map_err(|e| OpError::Unavailable(format!("hashing the password failed: {e}")))
}

/// A PHC string that no password matches, verified for unknown users so that they cost as much
/// as known ones (no user enumeration by timing).
fn dummy_hash() -> &'static str {
    static DUMMY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DUMMY.get_or_init(|| hash_password("not a password of anyone").unwrap_or_default())
}

fn verify(password: &str, phc: &str) -> bool {
    PasswordHash::new(phc)
        .map(|h| {
            Argon2::default()
                .verify_password(password.as_bytes(), &h)
                .is_ok()
        })
        .unwrap_or(false)
}

fn role_of(text: &str) -> Option<Role> {
    Role::parse(text)
}

impl Ops {
    /// Adds a user; a password of `None` gets a random one (returned, shown once), so no
    /// account ever has a default or empty password.
    pub fn add_user(
        &self,
        name: &str,
        role: Role,
        password: Option<&str>,
    ) -> Result<Option<String>, OpError> {
        check_name(name).map_err(|reason| OpError::invalid("name", reason))?;
        let generated = match password {
            Some(p) if p.chars().count() < 12 => {
                return Err(OpError::invalid(
                    "password",
                    "must be at least 12 characters long",
                ));
            }
            Some(_) => None,
            None => Some(random_hex()?[..24].to_string()),
        };
        let hash = hash_password(password.or(generated.as_deref()).unwrap_or_default())?;
        let actor = self.caller.actor.clone();
        self.catalog
            .add_user(name, &hash, role, &actor)
            .map_err(self.within(format!("adding user `{name}`")))?;
        Ok(generated)
    }

    /// Every user.
    pub fn users(&self) -> Result<Vec<UserView>, OpError> {
        let rows = self.catalog.users().map_err(self.within("listing users"))?;
        Ok(rows
            .into_iter()
            .map(|u| UserView {
                name: u.name,
                role: u.role,
                enabled: u.enabled,
                tokens: u.tokens,
            })
            .collect())
    }

    /// Whether any user exists.
    pub fn has_users(&self) -> Result<bool, OpError> {
        Ok(self
            .catalog
            .user_count()
            .map_err(self.within("counting users"))?
            > 0)
    }

    /// Removes a user and the user's tokens.
    pub fn remove_user(&self, name: &str) -> Result<(), OpError> {
        let actor = self.caller.actor.clone();
        self.catalog
            .remove_user(name, &actor)
            .map_err(self.within(format!("removing user `{name}`")))
    }

    /// Sets a user's password.
    pub fn set_password(&self, name: &str, password: &str) -> Result<(), OpError> {
        if password.chars().count() < 12 {
            return Err(OpError::invalid(
                "password",
                "must be at least 12 characters long",
            ));
        }
        let hash = hash_password(password)?;
        let actor = self.caller.actor.clone();
        self.catalog
            .set_password(name, &hash, &actor)
            .map_err(self.within(format!("setting the password of `{name}`")))
    }

    /// Creates a token for `user`, refused once `expires` (a lifetime: `12h`, `30d`) has
    /// passed when one is given; its text is returned once and only its hash is stored.
    pub fn create_token(
        &self,
        user: &str,
        token_name: &str,
        expires: Option<&str>,
    ) -> Result<NewToken, OpError> {
        check_name(token_name).map_err(|reason| OpError::invalid("name", reason))?;
        let expires_at = expires
            .map(|e| expiry("expires", e, crate::catalog::now_ms()))
            .transpose()?;
        let token = format!("jv_{}", random_hex()?);
        let actor = self.caller.actor.clone();
        let id = self
            .catalog
            .add_token(user, token_name, &token_hash(&token), expires_at, &actor)
            .map_err(self.within(format!("creating a token for `{user}`")))?;
        Ok(NewToken {
            id,
            user: user.to_string(),
            token,
            expires_at: expires_at.map(Time),
        })
    }

    /// Every token (never its text).
    pub fn tokens(&self) -> Result<Vec<TokenView>, OpError> {
        let rows = self
            .catalog
            .tokens()
            .map_err(self.within("listing tokens"))?;
        Ok(rows
            .into_iter()
            .map(|t| TokenView {
                id: t.id,
                user: t.user,
                name: t.name,
                created_at: Time(t.created_at),
                expires_at: t.expires_at.map(Time),
            })
            .collect())
    }

    /// Revokes a token.
    pub fn revoke_token(&self, id: i64) -> Result<(), OpError> {
        let actor = self.caller.actor.clone();
        self.catalog
            .revoke_token(id, &actor)
            .map_err(self.within(format!("revoking token {id}")))
    }

    /// The principal a bearer token stands for, if it is valid (known, its user enabled, not
    /// expired).
    pub fn principal_of_token(&self, token: &str) -> Result<Option<Principal>, OpError> {
        if !token.starts_with("jv_") || token.len() != 67 {
            return Ok(None);
        }
        let found = self
            .catalog
            .principal_of_token(&token_hash(token), crate::catalog::now_ms())
            .map_err(self.within("checking a token"))?;
        Ok(found.and_then(|(user, role)| {
            Some(Principal {
                user,
                role: role_of(&role)?,
            })
        }))
    }

    /// The principal a user name and password stand for, if they match (argon2, slow on
    /// purpose: call it off the request threads). [`Ops::stored_password`] and
    /// [`StoredPassword::check`] are its two halves, for a caller that must not hold this
    /// `Ops` during the argon2 verification.
    pub fn principal_of_password(
        &self,
        user: &str,
        password: &str,
    ) -> Result<Option<Principal>, OpError> {
        let stored = self.stored_password(user)?;
        Ok(stored
            .known(password, Instant::now())
            .or_else(|| stored.check(password, Instant::now())))
    }

    /// What a password check of `user` needs from the catalog: the user's stored hash and role
    /// (none for an unknown or disabled user), and the passwords verified lately. A catalog
    /// read: fast.
    pub fn stored_password(&self, user: &str) -> Result<StoredPassword, OpError> {
        let found = self
            .catalog
            .password_of(user)
            .map_err(self.within("checking a password"))?;
        Ok(StoredPassword {
            user: user.to_string(),
            found,
            verified: self.verified.clone(),
        })
    }

    /// On a catalog without users: creates `admin` (role admin, a random password nobody is
    /// shown) and a token for it, returned to be printed once. `None` when users exist — also
    /// when another node starting on the same catalog at the same moment made them: the check
    /// and both inserts are one transaction, so exactly one node prints a token.
    pub fn bootstrap_admin(&self) -> Result<Option<NewToken>, OpError> {
        if self.has_users()? {
            return Ok(None);
        }
        let hash = hash_password(&random_hex()?)?;
        let token = format!("jv_{}", random_hex()?);
        let actor = self.caller.actor.clone();
        let made = self
            .catalog
            .bootstrap_admin(&hash, "first-start", &token_hash(&token), &actor)
            .map_err(self.within("creating the first user, `admin`"))?;
        Ok(made.map(|id| NewToken {
            id,
            user: "admin".into(),
            expires_at: None,
            token,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_hash_is_sha256_hex() {
        assert_eq!(
            token_hash("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn passwords_verify_only_against_their_own_hash() {
        let phc = hash_password("correct horse battery").unwrap();
        assert!(phc.starts_with("$argon2id$"), "{phc}");
        assert!(verify("correct horse battery", &phc));
        assert!(!verify("wrong horse battery", &phc));
        assert!(!verify("anything", "not a phc string"));
    }

    #[test]
    fn a_verified_password_is_known_for_a_while_and_only_with_the_hash_it_matched() {
        let v = VerifiedPasswords::default();
        let t0 = Instant::now();
        v.keep("otto", "secret password", "$phc1", t0);
        assert!(v.knows("otto", "secret password", "$phc1", t0 + VERIFIED_FOR / 2));
        assert!(!v.knows("otto", "secret password", "$phc1", t0 + VERIFIED_FOR));
        assert!(
            !v.knows("otto", "secret password", "$phc2", t0),
            "a new password"
        );
        assert!(!v.knows("otto", "other password", "$phc1", t0));
        assert!(
            !v.knows("ott", "osecret password", "$phc1", t0),
            "no ambiguous join"
        );
        // Only a keyed hash is kept, never the password.
        let seen = v.seen.lock().unwrap();
        assert_eq!(seen.len(), 1);
        assert!(seen.keys().all(|k| k.len() == 32));
    }

    #[test]
    fn a_token_lifetime_is_a_positive_duration() {
        assert_eq!(expiry("expires", "90s", 1_000).unwrap(), 91_000);
        assert_eq!(expiry("expires", " 30d ", 0).unwrap(), 30 * 86_400_000);
        for bad in ["0s", "", "soon", "-5m", "12", "3w"] {
            let e = expiry("expires", bad, 0).unwrap_err().to_string();
            assert!(e.contains("expires"), "{bad}: {e}");
        }
    }

    #[test]
    fn roles_are_ordered() {
        let p = |role| Principal {
            user: "u".into(),
            role,
        };
        assert!(p(Role::Admin).may(Role::Operator));
        assert!(p(Role::Operator).may(Role::Viewer));
        assert!(!p(Role::Viewer).may(Role::Operator));
        assert!(!p(Role::Operator).may(Role::Admin));
    }
}
