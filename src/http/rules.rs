//! The role rules that depend on what a request changes, beyond the method's (a viewer only
//! reads, [`super::auth`]): the API's handlers and the web UI's ([`crate::ui`]) ask these same
//! functions, so a face cannot allow what the other refuses.
//!
//! Invariant: only admins create, change or remove sql, command, url and rpc jobs (they run
//! code or reach the network as the node) and any job on a remote processor (a call to another
//! node with the credentials the processor stores).

use super::auth::Principal;
use super::error::ApiError;
use crate::model::{JobType, Role};
use crate::ops::Ops;

/// Types only admins may create or change: they run code or reach the network as the node
/// (an rpc job calls another node with the credentials its processor stores).
pub fn admin_only(t: JobType) -> bool {
    matches!(
        t,
        JobType::Sql | JobType::Command | JobType::Url | JobType::Rpc
    )
}

/// Refuses a job of type `t` to anyone but an admin when [`admin_only`].
pub fn require_for(who: &Principal, t: JobType) -> Result<(), ApiError> {
    if admin_only(t) {
        who.require(Role::Admin, &format!("a {t} job"))
    } else {
        Ok(())
    }
}

/// A job on a remote processor is a call to another node with the credentials the processor
/// stores, whatever its type: only admins create, change or remove one.
pub fn require_for_processor(who: &Principal, ops: &Ops, processor: &str) -> Result<(), ApiError> {
    if ops.is_remote_processor(processor)? {
        who.require(
            Role::Admin,
            &format!("a job on the remote processor `{processor}`"),
        )
    } else {
        Ok(())
    }
}
