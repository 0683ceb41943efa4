//! `jobvisor users …` and `jobvisor tokens …`: the API's accounts, managed on the node's host
//! (whoever can write the catalog file may create an admin).

use std::io::BufRead as _;

use clap::Subcommand;

use super::commands::{reading, writing};
use super::{Cli, EXIT_USAGE, Failure, render};
use crate::model::Role;
use crate::ops::OpError;

/// `users …`.
#[derive(Debug, Subcommand)]
pub enum UsersCommand {
    /// List users and their roles.
    List,
    /// Add a user. Without --password-stdin a random password is generated and printed once.
    Add {
        /// User name.
        name: String,
        /// viewer (reads), operator (also runs, cancels, enables, pauses) or admin (also
        /// creates and changes sql, command and url jobs, processors, objects).
        #[arg(long, value_parser = ["viewer", "operator", "admin"])]
        role: String,
        /// Read the password (at least 12 characters) from the first line of stdin.
        #[arg(long)]
        password_stdin: bool,
    },
    /// Set a user's password, read from the first line of stdin.
    Passwd {
        /// User name.
        name: String,
    },
    /// Remove a user and the user's tokens.
    Remove {
        /// User name.
        name: String,
    },
}

/// `tokens …`.
#[derive(Debug, Subcommand)]
pub enum TokensCommand {
    /// List tokens (never their text).
    List,
    /// Create a bearer token for a user; it is printed once, and only its hash is stored.
    Create {
        /// The user it acts as.
        user: String,
        /// A label, unique per user.
        #[arg(long, default_value = "cli")]
        name: String,
        /// Its lifetime (90m, 12h, 30d): refused with 401 once it has passed. Default: it
        /// never expires.
        #[arg(long, value_name = "DURATION")]
        expires: Option<String>,
    },
    /// Revoke a token by id (running nodes stop accepting it within 5 s).
    Revoke {
        /// Token id (see `tokens list`).
        id: i64,
    },
}

fn password_from_stdin() -> Result<String, Failure> {
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|e| Failure::new(EXIT_USAGE, format!("cannot read the password: {e}")))?;
    Ok(line.trim_end_matches(['\r', '\n']).to_string())
}

/// Runs a `users` command.
pub fn users(cli: &Cli, cmd: &UsersCommand) -> Result<(), Failure> {
    match cmd {
        UsersCommand::List => {
            let users = reading(cli)?.users()?;
            if cli.json {
                render::json(&users);
            } else {
                render::table(
                    &["NAME", "ROLE", "STATUS", "TOKENS"],
                    users
                        .iter()
                        .map(|u| {
                            vec![
                                u.name.clone(),
                                u.role.clone(),
                                if u.enabled { "enabled" } else { "disabled" }.into(),
                                u.tokens.to_string(),
                            ]
                        })
                        .collect(),
                );
            }
        }
        UsersCommand::Add {
            name,
            role,
            password_stdin,
        } => {
            let role = Role::parse(role)
                .ok_or_else(|| OpError::invalid("--role", "expected viewer, operator or admin"))?;
            let password = password_stdin.then(password_from_stdin).transpose()?;
            let generated = writing(cli)?.add_user(name, role, password.as_deref())?;
            if cli.json {
                render::json(&serde_json::json!({
                    "user": name, "role": role.as_str(), "password": generated,
                }));
            } else {
                println!("user `{name}` added ({role})");
                if let Some(p) = generated {
                    println!("  password (shown once): {p}");
                }
                println!("  a token for the API: jobvisor tokens create {name}");
            }
        }
        UsersCommand::Passwd { name } => {
            let password = password_from_stdin()?;
            writing(cli)?.set_password(name, &password)?;
            println!("password of `{name}` changed");
        }
        UsersCommand::Remove { name } => {
            writing(cli)?.remove_user(name)?;
            println!("user `{name}` removed, with its tokens");
        }
    }
    Ok(())
}

/// Runs a `tokens` command.
pub fn tokens(cli: &Cli, cmd: &TokensCommand) -> Result<(), Failure> {
    match cmd {
        TokensCommand::List => {
            let tokens = reading(cli)?.tokens()?;
            if cli.json {
                render::json(&tokens);
            } else {
                let now = crate::catalog::now_ms();
                render::table(
                    &["ID", "USER", "NAME", "CREATED", "EXPIRES"],
                    tokens
                        .iter()
                        .map(|t| {
                            vec![
                                t.id.to_string(),
                                t.user.clone(),
                                t.name.clone(),
                                render::time(Some(t.created_at)),
                                match t.expires_at {
                                    None => "never".into(),
                                    Some(at) if at.ms() <= now => {
                                        format!("{} (expired)", render::time(Some(at)))
                                    }
                                    Some(at) => render::time(Some(at)),
                                },
                            ]
                        })
                        .collect(),
                );
            }
        }
        TokensCommand::Create {
            user,
            name,
            expires,
        } => {
            let token = writing(cli)?.create_token(user, name, expires.as_deref())?;
            if cli.json {
                render::json(&token);
            } else {
                println!(
                    "token {} for `{user}` (shown once; send it as \
                          Authorization: Bearer <token>):",
                    token.id
                );
                println!("{}", token.token);
                if let Some(at) = token.expires_at {
                    println!("expires {}", render::time(Some(at)));
                }
            }
        }
        TokensCommand::Revoke { id } => {
            writing(cli)?.revoke_token(*id)?;
            println!("token {id} revoked");
        }
    }
    Ok(())
}
