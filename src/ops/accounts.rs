//! Accounts: users with an argon2id password and a role, and API tokens (`jv_` + 64 hex digits
//! of 32 random bytes) of which only a SHA-256 is stored. Who a request is (a [`Principal`]) is
//! decided here, for every face that authenticates.
//!
//! Invariant: a password or token is shown once, when created, and never stored or logged in
//! clear; an unknown user costs the same argon2 verification as a known one.

use argon2::{Argon2, PasswordHash, PasswordHasher as _, PasswordVerifier as _};
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
        &mut self,
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
    pub fn remove_user(&mut self, name: &str) -> Result<(), OpError> {
        let actor = self.caller.actor.clone();
        self.catalog
            .remove_user(name, &actor)
            .map_err(self.within(format!("removing user `{name}`")))
    }

    /// Sets a user's password.
    pub fn set_password(&mut self, name: &str, password: &str) -> Result<(), OpError> {
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
        &mut self,
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
    pub fn revoke_token(&mut self, id: i64) -> Result<(), OpError> {
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
    /// purpose: call it off the request threads).
    pub fn principal_of_password(
        &self,
        user: &str,
        password: &str,
    ) -> Result<Option<Principal>, OpError> {
        let found = self
            .catalog
            .password_of(user)
            .map_err(self.within("checking a password"))?;
        let Some((phc, role)) = found else {
            verify(password, dummy_hash());
            return Ok(None);
        };
        Ok(verify(password, &phc)
            .then(|| role_of(&role))
            .flatten()
            .map(|role| Principal {
                user: user.to_string(),
                role,
            }))
    }

    /// On a catalog without users: creates `admin` (role admin, a random password nobody is
    /// shown) and a token for it, returned to be printed once. `None` when users exist.
    pub fn bootstrap_admin(&mut self) -> Result<Option<NewToken>, OpError> {
        if self.has_users()? {
            return Ok(None);
        }
        self.add_user("admin", Role::Admin, None)?;
        self.create_token("admin", "first-start", None).map(Some)
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
