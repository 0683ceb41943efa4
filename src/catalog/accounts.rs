//! Accounts of the API: users (argon2id password hashes, a role) and their bearer tokens (a
//! SHA-256 of each). Hashing happens in `ops::accounts`; this file only stores and finds.
//!
//! Invariant: no secret is stored in clear — a user's password only as a PHC string, a token
//! only as its hash; every change is one transaction with its audit row (no secret in it).

use rusqlite::{OptionalExtension, params};
use serde::Serialize;

use super::{Catalog, CatalogError, audit, not_found, now_ms, write_tx};

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
const INSERT_TOKEN: &str = "INSERT INTO api_token (user_id, token_name, token_hash, created_at)
    VALUES (?1, ?2, ?3, ?4) ON CONFLICT DO NOTHING";
const SELECT_TOKENS: &str = "SELECT t.token_id, u.user_name, t.token_name, t.created_at
    FROM api_token t JOIN users u ON u.user_id = t.user_id ORDER BY t.token_id";
const DELETE_TOKEN: &str = "DELETE FROM api_token WHERE token_id = ?1";
const SELECT_PRINCIPAL: &str = "SELECT u.user_name, u.role FROM api_token t
    JOIN users u ON u.user_id = t.user_id WHERE t.token_hash = ?1 AND u.status = 1";

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
}

impl Catalog {
    /// How many users exist (a node with none prints a first admin token at start).
    pub fn user_count(&self) -> Result<i64, CatalogError> {
        Ok(self.read()?.query_row(COUNT_USERS, [], |r| r.get(0))?)
    }

    /// Adds a user with a password hash (a PHC string) and a role.
    pub fn add_user(
        &mut self,
        name: &str,
        password_hash: &str,
        role: crate::model::Role,
        actor: &str,
    ) -> Result<(), CatalogError> {
        let tx = write_tx(&mut self.conn)?;
        if tx.execute(INSERT_USER, params![name, password_hash, role.as_str()])? == 0 {
            return Err(CatalogError::Conflict(format!(
                "user `{name}` exists already"
            )));
        }
        let detail = serde_json::json!({ "after": { "role": role.as_str() } });
        audit(&tx, actor, "user.add", name, Some(&detail))?;
        tx.commit()?;
        Ok(())
    }

    /// Every user, by name.
    pub fn users(&self) -> Result<Vec<UserRow>, CatalogError> {
        let conn = self.read()?;
        let mut stmt = conn.prepare_cached(SELECT_USERS)?;
        let rows = stmt.query_map([], |r| {
            Ok(UserRow {
                name: r.get(0)?,
                role: r.get(1)?,
                enabled: r.get::<_, i64>(2)? == 1,
                created: r.get(3)?,
                tokens: r.get(4)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Removes a user and its tokens.
    pub fn remove_user(&mut self, name: &str, actor: &str) -> Result<(), CatalogError> {
        let tx = write_tx(&mut self.conn)?;
        if tx.execute(DELETE_USER, [name])? == 0 {
            return Err(not_found("user", name));
        }
        audit(&tx, actor, "user.remove", name, None)?;
        tx.commit()?;
        Ok(())
    }

    /// Replaces a user's password hash.
    pub fn set_password(
        &mut self,
        name: &str,
        password_hash: &str,
        actor: &str,
    ) -> Result<(), CatalogError> {
        let tx = write_tx(&mut self.conn)?;
        if tx.execute(UPDATE_PASSWORD, params![name, password_hash])? == 0 {
            return Err(not_found("user", name));
        }
        audit(&tx, actor, "user.password", name, None)?;
        tx.commit()?;
        Ok(())
    }

    /// An enabled user's password hash and role.
    pub fn password_of(&self, name: &str) -> Result<Option<(String, String)>, CatalogError> {
        let conn = self.read()?;
        Ok(conn
            .prepare_cached(SELECT_PASSWORD)?
            .query_row([name], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?)
    }

    /// Stores a token's hash for `user` under `token_name`; returns its id.
    pub fn add_token(
        &mut self,
        user: &str,
        token_name: &str,
        token_hash: &str,
        actor: &str,
    ) -> Result<i64, CatalogError> {
        let tx = write_tx(&mut self.conn)?;
        let user_id: i64 = tx
            .query_row(SELECT_USER_ID, [user], |r| r.get(0))
            .optional()?
            .ok_or_else(|| not_found("user", user))?;
        if tx.execute(
            INSERT_TOKEN,
            params![user_id, token_name, token_hash, now_ms()],
        )? == 0
        {
            return Err(CatalogError::Conflict(format!(
                "user `{user}` has a token named `{token_name}` already"
            )));
        }
        let id = tx.last_insert_rowid();
        let detail = serde_json::json!({ "token_id": id, "name": token_name });
        audit(&tx, actor, "token.create", user, Some(&detail))?;
        tx.commit()?;
        Ok(id)
    }

    /// Every token (never a hash).
    pub fn tokens(&self) -> Result<Vec<TokenRow>, CatalogError> {
        let conn = self.read()?;
        let mut stmt = conn.prepare_cached(SELECT_TOKENS)?;
        let rows = stmt.query_map([], |r| {
            Ok(TokenRow {
                id: r.get(0)?,
                user: r.get(1)?,
                name: r.get(2)?,
                created_at: r.get(3)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Revokes a token by id.
    pub fn revoke_token(&mut self, id: i64, actor: &str) -> Result<(), CatalogError> {
        let tx = write_tx(&mut self.conn)?;
        if tx.execute(DELETE_TOKEN, [id])? == 0 {
            return Err(not_found("token", &id.to_string()));
        }
        audit(&tx, actor, "token.revoke", &id.to_string(), None)?;
        tx.commit()?;
        Ok(())
    }

    /// The enabled user (name, role) whose token hashes to `token_hash`.
    pub fn principal_of_token(
        &self,
        token_hash: &str,
    ) -> Result<Option<(String, String)>, CatalogError> {
        let conn = self.read()?;
        Ok(conn
            .prepare_cached(SELECT_PRINCIPAL)?
            .query_row([token_hash], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?)
    }
}
