//! Operations on data objects: list, add, edit (a field patch), remove.

use serde::Serialize;

use super::{OpError, Ops};
use crate::catalog::ImportReport;
use crate::jobconf::{ObjectDef, Section};
use crate::model::ObjectType;

/// An object as listed.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ObjectView {
    /// Name.
    pub name: String,
    /// table, file or view.
    #[serde(rename = "type")]
    pub object_type: String,
    /// Where it lives: a SQLite file (relative paths are in the node's data folder), or
    /// `catalog`.
    pub conn_string: Option<String>,
    /// Seconds before rows may be pruned.
    pub time_to_live_s: Option<i64>,
    /// Pruning allowed.
    pub allow_prune: bool,
    /// `status = 1`.
    pub enabled: bool,
    /// Jobs that write it.
    pub writers: i64,
}

/// Changes to an object; `None` leaves a field as it is, `Some(None)` clears it.
#[derive(Debug, Clone, Default)]
pub struct ObjectPatch {
    /// table, file or view.
    pub object_type: Option<ObjectType>,
    /// Where it lives.
    pub conn_string: Option<Option<String>>,
    /// The key column.
    pub key_field: Option<Option<String>>,
    /// The column with a row's name or time.
    pub name_field: Option<Option<String>>,
    /// Seconds before rows may be pruned.
    pub time_to_live: Option<Option<i64>>,
    /// Pruning allowed.
    pub allow_prune: Option<bool>,
    /// Listing allowed.
    pub allow_list: Option<bool>,
    /// Free text.
    pub description: Option<Option<String>>,
    /// Enabled.
    pub enabled: Option<bool>,
}

impl ObjectPatch {
    /// Applies the patch.
    pub fn apply(&self, o: &mut ObjectDef) {
        fn set<T: Clone>(field: &mut T, value: &Option<T>) {
            if let Some(v) = value {
                *field = v.clone();
            }
        }
        set(&mut o.object_type, &self.object_type);
        set(&mut o.conn_string, &self.conn_string);
        set(&mut o.key_field, &self.key_field);
        set(&mut o.name_field, &self.name_field);
        set(&mut o.time_to_live, &self.time_to_live);
        set(&mut o.allow_prune, &self.allow_prune);
        set(&mut o.allow_list, &self.allow_list);
        set(&mut o.description, &self.description);
        set(&mut o.enabled, &self.enabled);
    }
}

impl Ops {
    /// Every object, by name.
    pub fn objects(&self) -> Result<Vec<ObjectView>, OpError> {
        let rows = self
            .catalog
            .objects()
            .map_err(self.within("listing objects"))?;
        Ok(rows
            .into_iter()
            .map(|o| ObjectView {
                name: o.name,
                object_type: o.object_type,
                conn_string: o.conn_string,
                time_to_live_s: o.time_to_live,
                allow_prune: o.allow_prune,
                enabled: o.enabled,
                writers: o.writers,
            })
            .collect())
    }

    /// Adds an object (`exists = false`) or changes one (`exists = true`), validated against
    /// the whole catalog. A running node starts a writer for a new object by itself.
    pub fn put_object(
        &self,
        name: &str,
        patch: &ObjectPatch,
        exists: bool,
    ) -> Result<ImportReport, OpError> {
        self.put_entry(
            Section::Object,
            name,
            exists,
            |f| &f.objects,
            |f| &mut f.objects,
            {
                let patch = patch.clone();
                move |def| patch.apply(def)
            },
        )
    }

    /// Removes an object; refused while a job writes it or a sql job targets it.
    pub fn remove_object(&self, name: &str) -> Result<(), OpError> {
        let actor = self.caller.actor.clone();
        let doing = format!("removing object `{name}`");
        self.catalog
            .remove_object(name, &actor)
            .map_err(self.within(doing))
    }
}
