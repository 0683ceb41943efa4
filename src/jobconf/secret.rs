//! Outbound secrets (a remote processor's `rpc_password`): stored as given, or given as a
//! reference — `env:NAME` (an environment variable of the node) or `file:PATH` (a file's
//! contents, without its trailing newline) — resolved when a call is made. What any view, an
//! export or a change report shows of a stored secret is `***`; a reference is shown as
//! written, since it names where the secret is, not the secret.
//!
//! Invariant: pure (no environment or file read here: resolution is the executor's); a value
//! leaves through [`shown`] only.

/// What is shown in place of a stored secret.
pub const REDACTED: &str = "***";

/// A secret as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Secret<'a> {
    /// The secret itself.
    Literal(&'a str),
    /// `env:NAME`: the node's environment variable `NAME`.
    Env(&'a str),
    /// `file:PATH`: the contents of the file at `PATH`.
    File(&'a str),
}

impl<'a> Secret<'a> {
    /// Reads a stored value: a reference when it starts with `env:` or `file:`.
    pub fn parse(value: &'a str) -> Self {
        if let Some(name) = value.strip_prefix("env:") {
            Secret::Env(name)
        } else if let Some(path) = value.strip_prefix("file:") {
            Secret::File(path)
        } else {
            Secret::Literal(value)
        }
    }

    /// Why the value cannot be used, if it cannot: a reference must name a variable
    /// (`[A-Za-z_][A-Za-z0-9_]*`) or an absolute path (the node's working folder is no
    /// place to look for secrets). `***` passes: in a file it stands for the secret the
    /// catalog it is imported into holds ([`unheld`] says when there is none).
    pub fn problem(&self) -> Option<String> {
        match self {
            Secret::Literal("") => Some(
                "is empty: give the secret, or a reference env:NAME or file:PATH \
                 (an empty value clears it on the command line)"
                    .into(),
            ),
            Secret::Literal(_) => None,
            Secret::Env(name) => {
                let mut chars = name.chars();
                let ok = chars
                    .next()
                    .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                    && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
                (!ok).then(|| {
                    format!(
                        "env:{name} does not name an environment variable ([A-Za-z_][A-Za-z0-9_]*)"
                    )
                })
            }
            Secret::File(path) => {
                (!path.starts_with('/')).then(|| format!("file:{path} must name an absolute path"))
            }
        }
    }
}

/// Why a value about to be stored is `***` with no stored secret behind it (an export
/// imported into another catalog): the secret itself was never exported.
pub fn unheld() -> String {
    format!(
        "`{REDACTED}` stands for the secret a catalog holds, and this one holds none for it \
         (exports never carry secrets): give the secret, or a reference env:NAME or file:PATH"
    )
}

/// How a stored secret is shown: `***` for the secret itself, a reference as written.
pub fn shown(value: &str) -> String {
    match Secret::parse(value) {
        Secret::Literal(_) => REDACTED.to_string(),
        Secret::Env(_) | Secret::File(_) => value.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_are_told_from_secrets_and_only_secrets_are_hidden() {
        assert_eq!(Secret::parse("jv_abc"), Secret::Literal("jv_abc"));
        assert_eq!(Secret::parse("env:B_TOKEN"), Secret::Env("B_TOKEN"));
        assert_eq!(
            Secret::parse("file:/run/b.token"),
            Secret::File("/run/b.token")
        );
        assert_eq!(shown("jv_abc"), "***");
        assert_eq!(shown("env:B_TOKEN"), "env:B_TOKEN");
        assert_eq!(shown("file:/run/b.token"), "file:/run/b.token");
    }

    #[test]
    fn a_processor_definition_debug_prints_no_secret() {
        let def = crate::jobconf::ProcessorDef {
            ip_address: Some("10.0.0.2".into()),
            rpc_password: Some("jv_secret".into()),
            ..Default::default()
        };
        let printed = format!("{def:?}");
        assert!(
            printed.contains("\"***\"") && !printed.contains("jv_secret"),
            "{printed}"
        );
    }

    #[test]
    fn a_reference_must_name_a_variable_or_an_absolute_path() {
        for ok in [
            "s3cret",
            "***",
            "env:B_TOKEN",
            "env:_x1",
            "file:/etc/jobvisor/b.token",
        ] {
            assert_eq!(Secret::parse(ok).problem(), None, "{ok}");
        }
        for (bad, says) in [
            ("", "is empty"),
            ("env:", "does not name an environment variable"),
            ("env:1X", "does not name an environment variable"),
            ("env:B-TOKEN", "does not name an environment variable"),
            ("file:b.token", "absolute path"),
            ("file:", "absolute path"),
        ] {
            let problem = Secret::parse(bad).problem().unwrap_or_default();
            assert!(problem.contains(says), "{bad}: {problem}");
        }
    }
}
