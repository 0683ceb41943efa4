//! Model: the closed vocabularies of the catalog (job types, run states, object types, roles).
//!
//! Invariant: every enum here mirrors a SQL `CHECK` list in `migrations/`, spelled by `as_str()`;
//! a catalog test inserts every variant and one value outside the list.

use std::fmt;

/// Declares a closed string enum with `ALL`, `as_str`, `parse` and `Display`.
macro_rules! string_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $($(#[$vmeta])* $variant),+
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The spelling used in the catalog, files and the API.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }

            /// Parses the catalog spelling; `None` for anything else.
            pub fn parse(text: &str) -> Option<Self> {
                match text {
                    $($text => Some($name::$variant),)+
                    _ => None,
                }
            }

            /// The accepted spellings, for error messages.
            pub fn expected() -> String {
                Self::ALL.iter().map(|v| v.as_str()).collect::<Vec<_>>().join(", ")
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }
    };
}

string_enum! {
    /// What executes a job (`job_type` lookup rows).
    JobType {
        /// A registered Rust function.
        Function => "function",
        /// A SQL statement against a data object's database.
        Sql => "sql",
        /// An HTTP request.
        Url => "url",
        /// A call to another node's API.
        Rpc => "rpc",
        /// A program started with argv (or a shell when asked).
        Command => "command",
        /// A DAG of other jobs.
        Workflow => "workflow",
        /// Carried out by an executor the embedding application registers (`payload.executor`
        /// names it).
        Custom => "custom",
    }
}

string_enum! {
    /// The state of one `job_run` row.
    RunStatus {
        /// Waiting to be claimed.
        Queued => "queued",
        /// Taken by a node (its node and claim time set), not started yet.
        Claimed => "claimed",
        /// Started, with a start time: executing.
        Running => "running",
        /// Finished without error.
        Succeeded => "succeeded",
        /// Finished with an error; may be retried.
        Failed => "failed",
        /// Cancelled after exceeding its timeout.
        TimedOut => "timed_out",
        /// Never ran: the slot was skipped (overlap or misfire policy), with a reason.
        Skipped => "skipped",
        /// Failed its last allowed attempt.
        Dead => "dead",
        /// Cancelled by an operator or by shutdown.
        Cancelled => "cancelled",
        /// Not started by its deadline (its own `start_by`, or its job's `start_within` after
        /// it became due): ended without running, with the reason.
        Expired => "expired",
    }
}

impl RunStatus {
    /// Whether a run in this status has ended (it is neither waiting nor executing).
    pub fn has_ended(self) -> bool {
        !matches!(
            self,
            RunStatus::Queued | RunStatus::Claimed | RunStatus::Running
        )
    }

    /// Whether a node holds a run in this status (claimed or started): what overlap rules,
    /// caps and busy objects count.
    pub fn in_flight(self) -> bool {
        matches!(self, RunStatus::Claimed | RunStatus::Running)
    }
}

string_enum! {
    /// What kind of thing a data object is.
    ObjectType {
        /// A table in a SQLite database.
        Table => "table",
        /// A file or folder.
        File => "file",
        /// A read-only view.
        View => "view",
    }
}

string_enum! {
    /// An API/UI account's role.
    Role {
        /// Everything, including SQL and command jobs and user management.
        Admin => "admin",
        /// Catalog edits and run control, but not SQL or command jobs.
        Operator => "operator",
        /// Read-only.
        Viewer => "viewer",
    }
}

string_enum! {
    /// A node's activation state for a job (`job_activation.state`).
    ActivationState {
        /// The node runs the job.
        Active => "active",
        /// In the catalog, waiting for the node to be healthy enough.
        Standby => "standby",
        /// Active, but held while writes are paused (the disk is critical or full, and the job
        /// is outside maintenance groups): its slots are not planned, and it runs again when
        /// writes resume.
        Paused => "paused",
    }
}

string_enum! {
    /// An operator's pin on a job's activation (`job_activation.pinned`).
    Pin {
        /// Active regardless of health.
        Active => "active",
        /// Inactive regardless of health.
        Inactive => "inactive",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_inverts_as_str() {
        for t in JobType::ALL {
            assert_eq!(JobType::parse(t.as_str()), Some(*t));
        }
        for s in RunStatus::ALL {
            assert_eq!(RunStatus::parse(s.as_str()), Some(*s));
        }
        assert_eq!(JobType::parse("cron"), None);
        assert_eq!(RunStatus::expected().split(", ").count(), 10);
    }
}
