//! The audit trail: a row for every change to the catalog (who, what, on what, each changed
//! field before and after — secrets as `***`).

use rusqlite::Connection;
use serde::Serialize;
use serde_json::Value as Json;

use super::CatalogError;
use super::definitions::export_with;
use super::sql::{Query, Sql};
use crate::jobconf::CatalogFile;
use crate::jobconf::merge::EntryChange;

pub(super) const INSERT_AUDIT: &str =
    "INSERT INTO audit (at, actor, action, subject, detail) VALUES (?1, ?2, ?3, ?4, ?5)";
pub(super) const SELECT_AUDIT: &str =
    "SELECT at, actor, action, subject, detail FROM audit ORDER BY audit_id DESC LIMIT ?1";

/// At most this many entries' changes go into one audit row (a large import says how many it
/// left out).
pub(super) const AUDIT_MAX_ENTRIES: usize = 200;

/// Whether a field holds a secret, which an audit row shows as `***`.
pub(super) fn is_secret(field: &str) -> bool {
    ["password", "secret", "token"]
        .iter()
        .any(|w| field.contains(w))
}

/// An audit row's detail for one field of one entry, in the shape of [`audit_changes`] (a pin,
/// a pause): `change` is `unchanged` when the request changed nothing.
pub fn audit_field(
    section: &str,
    name: &str,
    field: &str,
    before: Option<&str>,
    after: Option<&str>,
) -> Json {
    serde_json::json!({ "changes": [{
        "section": section,
        "name": name,
        "change": if before == after { "unchanged" } else { "updated" },
        "fields": [{ "field": field, "before": before, "after": after }],
    }]})
}

/// An audit row's detail: each changed entry's fields before and after (secrets as `***`).
pub(super) fn audit_changes(changes: Vec<EntryChange>) -> Json {
    audit_changes_with(&changes, EntryChange::clone)
}

/// [`audit_changes`], each kept entry shown as `shown` makes it (called only for the first
/// [`AUDIT_MAX_ENTRIES`] changed entries, so that a large import describes no more).
pub(super) fn audit_changes_with(
    changes: &[EntryChange],
    shown: impl Fn(&EntryChange) -> EntryChange,
) -> Json {
    let changed = changes.iter().filter(|c| c.change != "unchanged");
    let left_out = changed.clone().count().saturating_sub(AUDIT_MAX_ENTRIES);
    let changed: Vec<EntryChange> = changed
        .take(AUDIT_MAX_ENTRIES)
        .map(|c| {
            let mut c = shown(c);
            for f in c.fields.iter_mut().filter(|f| is_secret(&f.field)) {
                f.before = f.before.as_ref().map(|_| "***".into());
                f.after = f.after.as_ref().map(|_| "***".into());
            }
            c
        })
        .collect();
    let mut detail = serde_json::json!({ "changes": changed });
    if left_out > 0 {
        detail["changes_left_out"] = left_out.into();
    }
    detail
}

/// The audit detail of a removal: the entry `take` moves from the catalog's file model into an
/// empty one, every field with its value before and none after.
pub(super) fn removed_detail(
    tx: &mut impl Sql,
    take: impl FnOnce(&mut CatalogFile, &mut CatalogFile),
) -> Result<Json, CatalogError> {
    let (mut all, mut gone) = (export_with(tx)?, CatalogFile::default());
    take(&mut all, &mut gone);
    let changes = crate::jobconf::merge::described(&gone)
        .into_iter()
        .map(|mut c| {
            c.change = "removed";
            for f in &mut c.fields {
                std::mem::swap(&mut f.before, &mut f.after);
            }
            c
        })
        .collect();
    Ok(audit_changes(changes))
}

/// An audit row stamped `at` (ms): the runtime's verbs stamp their rows with its injected clock.
pub(crate) fn audit_at(
    tx: &Connection,
    at: i64,
    actor: &str,
    action: &str,
    subject: &str,
    detail: Option<&Json>,
) -> Result<(), CatalogError> {
    audit_in(&mut &*tx, at, actor, action, subject, detail)
}

/// [`audit_at`] in either backend's transaction.
pub(crate) fn audit_in(
    tx: &mut impl Sql,
    at: i64,
    actor: &str,
    action: &str,
    subject: &str,
    detail: Option<&Json>,
) -> Result<(), CatalogError> {
    let detail = detail.map(Json::to_string);
    tx.exec(
        &Query::same(INSERT_AUDIT),
        &[
            at.into(),
            actor.into(),
            action.into(),
            subject.into(),
            detail.into(),
        ],
    )?;
    Ok(())
}

/// One audit entry.
#[derive(Debug, Clone, Serialize)]
pub struct AuditRow {
    /// Epoch ms.
    pub at: i64,
    /// Who.
    pub actor: String,
    /// What.
    pub action: String,
    /// On what.
    pub subject: Option<String>,
    /// Details (JSON).
    pub detail: Option<String>,
}
