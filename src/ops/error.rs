//! The one error type of the application layer, and what it means to each face: an exit code
//! for the CLI, an HTTP status for the API.

use std::path::PathBuf;

use crate::catalog::CatalogError;
use crate::config::ConfigError;
use crate::diag::Diagnostic;

/// Why an operation did not happen. Every variant leaves the catalog as it was.
#[derive(Debug, thiserror::Error)]
pub enum OpError {
    /// The request is malformed (a missing argument, a flag out of range).
    #[error("{0}")]
    Usage(String),
    /// A field's value is invalid; names the field.
    #[error("{}", match field { Some(f) => format!("{f}: {reason}"), None => reason.clone() })]
    Invalid {
        /// The field (`payload`, `run_on_the`, `--params`, …), if one is at fault.
        field: Option<String>,
        /// Why.
        reason: String,
    },
    /// The named entry does not exist.
    #[error("{kind} `{name}` does not exist")]
    NotFound {
        /// job, run, processor, object, node.
        kind: &'static str,
        /// What was asked for.
        name: String,
    },
    /// The change conflicts with the catalog's state (exists already, in use, running).
    #[error("{0}")]
    Conflict(String),
    /// The engine cannot take the request now (writer gone, node stopping).
    #[error("{0}")]
    Unavailable(String),
    /// An input file cannot be read.
    #[error("{}: cannot read: {reason}", path.display())]
    Input {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A catalog file has errors, each located by line and column.
    #[error("{}", render_diagnostics(file, diagnostics))]
    File {
        /// The file's name as given.
        file: String,
        /// Every error found.
        diagnostics: Vec<Diagnostic>,
    },
    /// The node configuration has an error.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The catalog refused or failed.
    #[error(transparent)]
    Catalog(CatalogError),
}

fn render_diagnostics(file: &str, diags: &[Diagnostic]) -> String {
    let mut message: String = diags.iter().map(|d| d.render(file) + "\n").collect();
    message.push_str(&format!(
        "{file}: {} error(s); nothing was changed",
        diags.len()
    ));
    message
}

impl From<CatalogError> for OpError {
    fn from(e: CatalogError) -> Self {
        match e {
            CatalogError::NotFound { kind, name } => OpError::NotFound { kind, name },
            CatalogError::Conflict(reason) | CatalogError::Refused(reason) => {
                OpError::Conflict(reason)
            }
            CatalogError::Unavailable(reason) => OpError::Unavailable(reason),
            CatalogError::Invalid { field, reason } => OpError::Invalid {
                field: Some(field),
                reason,
            },
            other => OpError::Catalog(other),
        }
    }
}

/// What kind of failure an error is, which both faces map: to an exit code and a status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Bad command-line usage or request shape.
    Usage,
    /// Bad input data (a field, a name that does not exist).
    Invalid,
    /// No such entry.
    NotFound,
    /// Conflicts with the catalog's state.
    Conflict,
    /// Try again later.
    Unavailable,
    /// An input file cannot be read, or there is no catalog.
    NoInput,
    /// A configuration or catalog file has errors, or the catalog file is not usable.
    Config,
    /// The storage failed.
    Storage,
}

/// The kind of a catalog error.
pub fn catalog_kind(e: &CatalogError) -> Kind {
    match e {
        CatalogError::NoCatalog { .. } => Kind::NoInput,
        CatalogError::NotACatalog { .. }
        | CatalogError::Damaged { .. }
        | CatalogError::FoundDamaged { .. }
        | CatalogError::Schema { .. }
        | CatalogError::Migration(_) => Kind::Config,
        CatalogError::NotFound { .. } => Kind::NotFound,
        CatalogError::Invalid { .. } => Kind::Invalid,
        CatalogError::Conflict(_) | CatalogError::Refused(_) => Kind::Conflict,
        CatalogError::Failed(_) => Kind::Storage,
        CatalogError::Unavailable(_) | CatalogError::Fenced { .. } => Kind::Unavailable,
        CatalogError::In { source, .. } => catalog_kind(source),
        _ => Kind::Storage,
    }
}

impl OpError {
    /// An invalid field.
    pub fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Self {
        OpError::Invalid {
            field: Some(field.into()),
            reason: reason.into(),
        }
    }

    /// The kind of failure.
    pub fn kind(&self) -> Kind {
        match self {
            OpError::Usage(_) => Kind::Usage,
            OpError::Invalid { .. } => Kind::Invalid,
            OpError::NotFound { .. } => Kind::NotFound,
            OpError::Conflict(_) => Kind::Conflict,
            OpError::Unavailable(_) => Kind::Unavailable,
            OpError::Input { .. } => Kind::NoInput,
            OpError::File { .. } | OpError::Config(_) => Kind::Config,
            OpError::Catalog(e) => catalog_kind(e),
        }
    }

    /// The field at fault, if one is.
    pub fn field(&self) -> Option<&str> {
        match self {
            OpError::Invalid { field, .. } => field.as_deref(),
            _ => None,
        }
    }

    /// The reason without the field's name.
    pub fn reason(&self) -> String {
        match self {
            OpError::Invalid { reason, .. } => reason.clone(),
            other => other.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_an_unavailable_writer_and_a_failed_commit_are_told_apart() {
        let kind = |e: CatalogError| OpError::from(e).kind();
        assert_eq!(kind(CatalogError::Refused("no".into())), Kind::Conflict);
        assert_eq!(
            kind(CatalogError::Unavailable("the writer stopped".into())),
            Kind::Unavailable
        );
        assert_eq!(
            kind(CatalogError::Failed(
                "catalog x.db: committing: disk I/O error".into()
            )),
            Kind::Storage
        );
    }
}
