//! Accounts of the API: users (argon2id password hashes, a role) and their bearer tokens (a
//! SHA-256 of each). Hashing happens in `ops::accounts`; this file only stores and finds.
//!
//! Invariant: no secret is stored in clear — a user's password only as a PHC string, a token
//! only as its hash; every change is one transaction with its audit row (no secret in it).

use serde::Serialize;

use super::sql::{Query, Sql};
use super::{Catalog, CatalogError, audit_in, not_found, now_ms};
use crate::model::Role;

const COUNT_USERS: &str = "SELECT count(*) FROM users";
const INSERT_USER: &str = "INSERT INTO users (user_name, password_hash, role) VALUES (?1, ?2, ?3)
    ON CONFLICT (user_name) DO NOTHING";
const SELECT_USERS: &str = "SELECT u.user_name, u.role, u.status, u.create_date,
    (SELECT count(*) FROM api_token t WHERE t.user_id = u.user_id)
    FROM users u ORDER BY u.user_name";
const DELETE_USER: &str = "DELETE FROM users WHERE user_name = ?1";
const UPDATE_PASSWORD: &str = "UPDATE users SET password_hash = ?2 WHERE user_name = ?1";
const SELECT_PASSWORD: &str =
    "SELECT password_hash, role FROM users WHERE user_name = ?1 AND status = 1";
const SELECT_USER_ID: &str = "SELECT user_id FROM users WHERE user_name = ?1";
const INSERT_TOKEN: &str = "INSERT INTO api_token
    (user_id, token_name, token_hash, created_at, expires_at)
    VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT DO NOTHING RETURNING token_id";
const SELECT_TOKENS: &str = "SELECT t.token_id, u.user_name, t.token_name, t.created_at,
    t.expires_at FROM api_token t JOIN users u ON u.user_id = t.user_id ORDER BY t.token_id";
const DELETE_TOKEN: &str = "DELETE FROM api_token WHERE token_id = ?1";
const SELECT_PRINCIPAL: &str = "SELECT u.user_name, u.role FROM api_token t
    JOIN users u ON u.user_id = t.user_id WHERE t.token_hash = ?1 AND u.status = 1
    AND (t.expires_at IS NULL OR t.expires_at > ?2)";

/// A user as listed (never its hash).
#[derive(Debug, Clone, Serialize)]
pub struct UserRow {
    /// Name.
    pub name: String,
    /// admin, operator or viewer.
    pub role: String,
    /// `status = 1`.
    pub enabled: bool,
    /// Epoch seconds.
    pub created: i64,
    /// Tokens the user holds.
    pub tokens: i64,
}

/// A token as listed (never its hash).
#[derive(Debug, Clone, Serialize)]
pub struct TokenRow {
    /// Its id (what `tokens revoke` takes).
    pub id: i64,
    /// Its user.
    pub user: String,
    /// Its label.
    pub name: String,
    /// Epoch ms.
    pub created_at: i64,
    /// Epoch ms from which it is refused; `None`: never.
    pub expires_at: Option<i64>,
}

impl Catalog {
    /// How many users exist (a node with none prints a first admin token at start).
    pub fn user_count(&self) -> Result<i64, CatalogError> {
        self.reading(|tx| {
            let n = tx.row(&Query::same(COUNT_USERS), &[], |r| r.int(0))?;
            Ok(n.unwrap_or(0))
        })
    }

    /// Adds a user with a password hash (a PHC string) and a role.
    pub fn add_user(
        &self,
        name: &str,
        password_hash: &str,
        role: Role,
        actor: &str,
    ) -> Result<(), CatalogError> {
        let (name, hash, actor) = (
            name.to_string(),
            password_hash.to_string(),
            actor.to_string(),
        );
        self.writing(move |tx| {
            if !insert_user(tx, &name, &hash, role, &actor)? {
                return Err(CatalogError::Conflict(format!(
                    "user `{name}` exists already"
                )));
            }
            Ok(())
        })
    }

    /// Every user, by name.
    pub fn users(&self) -> Result<Vec<UserRow>, CatalogError> {
        self.reading(|tx| {
            tx.rows(&Query::same(SELECT_USERS), &[], |r| {
                Ok(UserRow {
                    name: r.text(0)?,
                    role: r.text(1)?,
                    enabled: r.flag(2)?,
                    created: r.int(3)?,
                    tokens: r.int(4)?,
                })
            })
        })
    }

    /// Removes a user and its tokens.
    pub fn remove_user(&self, name: &str, actor: &str) -> Result<(), CatalogError> {
        let (name, actor) = (name.to_string(), actor.to_string());
        self.writing(move |tx| {
            if tx.exec(&Query::same(DELETE_USER), &[name.as_str().into()])? == 0 {
                return Err(not_found("user", &name));
            }
            audit_in(tx, now_ms(), &actor, "user.remove", &name, None)
        })
    }

    /// Replaces a user's password hash.
    pub fn set_password(
        &self,
        name: &str,
        password_hash: &str,
        actor: &str,
    ) -> Result<(), CatalogError> {
        let (name, hash, actor) = (
            name.to_string(),
            password_hash.to_string(),
            actor.to_string(),
        );
        self.writing(move |tx| {
            let vals = [name.as_str().into(), hash.as_str().into()];
            if tx.exec(&Query::same(UPDATE_PASSWORD), &vals)? == 0 {
                return Err(not_found("user", &name));
            }
            audit_in(tx, now_ms(), &actor, "user.password", &name, None)
        })
    }

    /// An enabled user's password hash and role.
    pub fn password_of(&self, name: &str) -> Result<Option<(String, String)>, CatalogError> {
        let name = name.to_string();
        self.reading(move |tx| {
            tx.row(
                &Query::same(SELECT_PASSWORD),
                &[name.as_str().into()],
                |r| Ok((r.text(0)?, r.text(1)?)),
            )
        })
    }

    /// Stores a token's hash for `user` under `token_name`, refused from `expires_at` (epoch
    /// ms) on when one is given; returns its id.
    pub fn add_token(
        &self,
        user: &str,
        token_name: &str,
        token_hash: &str,
        expires_at: Option<i64>,
        actor: &str,
    ) -> Result<i64, CatalogError> {
        let (user, token_name, hash, actor) = (
            user.to_string(),
            token_name.to_string(),
            token_hash.to_string(),
            actor.to_string(),
        );
        self.writing(move |tx| insert_token(tx, &user, &token_name, &hash, expires_at, &actor))
    }

    /// Creates the first user, `admin`, with a token, in one transaction, if the catalog has no
    /// user yet; `None` when it has one (another node starting at the same moment may have
    /// made it: on SQLite the write transaction serialises the two, on PostgreSQL the second
    /// insert waits on the name's unique index and then inserts nothing).
    pub fn bootstrap_admin(
        &self,
        password_hash: &str,
        token_name: &str,
        token_hash: &str,
        actor: &str,
    ) -> Result<Option<i64>, CatalogError> {
        let (password_hash, token_name, token_hash, actor) = (
            password_hash.to_string(),
            token_name.to_string(),
            token_hash.to_string(),
            actor.to_string(),
        );
        self.writing(move |tx| {
            let users = tx.row(&Query::same(COUNT_USERS), &[], |r| r.int(0))?;
            if users.unwrap_or(0) > 0
                || !insert_user(tx, "admin", &password_hash, Role::Admin, &actor)?
            {
                return Ok(None);
            }
            insert_token(tx, "admin", &token_name, &token_hash, None, &actor).map(Some)
        })
    }

    /// Every token (never a hash).
    pub fn tokens(&self) -> Result<Vec<TokenRow>, CatalogError> {
        self.reading(|tx| {
            tx.rows(&Query::same(SELECT_TOKENS), &[], |r| {
                Ok(TokenRow {
                    id: r.int(0)?,
                    user: r.text(1)?,
                    name: r.text(2)?,
                    created_at: r.int(3)?,
                    expires_at: r.opt_int(4)?,
                })
            })
        })
    }

    /// Revokes a token by id.
    pub fn revoke_token(&self, id: i64, actor: &str) -> Result<(), CatalogError> {
        let actor = actor.to_string();
        self.writing(move |tx| {
            if tx.exec(&Query::same(DELETE_TOKEN), &[id.into()])? == 0 {
                return Err(not_found("token", &id.to_string()));
            }
            audit_in(tx, now_ms(), &actor, "token.revoke", &id.to_string(), None)
        })
    }

    /// The enabled user (name, role) whose token hashes to `token_hash`, if that token has
    /// not expired at `now` (epoch ms).
    pub fn principal_of_token(
        &self,
        token_hash: &str,
        now: i64,
    ) -> Result<Option<(String, String)>, CatalogError> {
        let hash = token_hash.to_string();
        self.reading(move |tx| {
            tx.row(
                &Query::same(SELECT_PRINCIPAL),
                &[hash.as_str().into(), now.into()],
                |r| Ok((r.text(0)?, r.text(1)?)),
            )
        })
    }
}

/// Adds a user and its audit row; false when the name is taken.
fn insert_user(
    tx: &mut impl Sql,
    name: &str,
    hash: &str,
    role: Role,
    actor: &str,
) -> Result<bool, CatalogError> {
    let vals = [name.into(), hash.into(), role.as_str().into()];
    if tx.exec(&Query::same(INSERT_USER), &vals)? == 0 {
        return Ok(false);
    }
    let detail = serde_json::json!({ "after": { "role": role.as_str() } });
    audit_in(tx, now_ms(), actor, "user.add", name, Some(&detail))?;
    Ok(true)
}

/// Stores a token's hash for `user` and its audit row; returns the token's id.
fn insert_token(
    tx: &mut impl Sql,
    user: &str,
    token_name: &str,
    hash: &str,
    expires_at: Option<i64>,
    actor: &str,
) -> Result<i64, CatalogError> {
    let user_id = tx
        .row(&Query::same(SELECT_USER_ID), &[user.into()], |r| r.int(0))?
        .ok_or_else(|| not_found("user", user))?;
    let vals = [
        user_id.into(),
        token_name.into(),
        hash.into(),
        now_ms().into(),
        expires_at.into(),
    ];
    let Some(id) = tx.row(&Query::same(INSERT_TOKEN), &vals, |r| r.int(0))? else {
        return Err(CatalogError::Conflict(format!(
            "user `{user}` has a token named `{token_name}` already"
        )));
    };
    let detail =
        serde_json::json!({ "token_id": id, "name": token_name, "expires_at": expires_at });
    audit_in(tx, now_ms(), actor, "token.create", user, Some(&detail))?;
    Ok(id)
}
