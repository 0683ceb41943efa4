//! Upsert by named fields: an entry of an imported file changes only the fields it names, and
//! the change is reported field by field.
//!
//! The schedule fields (`run_always`, `run_delay`, `run_every`, `run_on_the`, `run_at`,
//! `run_date`, `cron`, `timezone`) are one unit: a file that names any of them replaces the
//! whole schedule, so that `cron = "…"` on a job that ran every 5 minutes does not leave both.
//! The payload is one unit as well.
//!
//! Invariant: pure (no database, no clock); `merge(before, file, None)` is a plain replace.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;

use super::{CatalogFile, GroupDef, JobDef, ObjectDef, ProcessorDef, Section, toml_format};

/// The fields each entry of a file names: `(section, entry) → field names`.
pub type Named = HashMap<(Section, String), toml_format::EntrySpans>;

const SCHEDULE_FIELDS: [&str; 8] = [
    "run_always",
    "run_delay",
    "run_every",
    "run_on_the",
    "run_at",
    "run_date",
    "cron",
    "timezone",
];

/// One field's change, as job.conf spells the values (`None`: absent, i.e. its default).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FieldChange {
    /// The field.
    pub field: String,
    /// Before.
    pub before: Option<String>,
    /// After.
    pub after: Option<String>,
}

/// What an upsert does to one entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EntryChange {
    /// processor, object, group or job.
    pub section: &'static str,
    /// The entry's name.
    pub name: String,
    /// `created`, `updated` or `unchanged`.
    pub change: &'static str,
    /// The fields that differ (for `updated`).
    pub fields: Vec<FieldChange>,
}

/// The fields an entry names; `None` when every field counts as named (no `Named` given).
fn names_of(n: Option<&Named>, section: Section, name: &str) -> Option<Vec<&'static str>> {
    n.map(|n| {
        n.get(&(section, name.to_string()))
            .map(|e| e.names().collect())
            .unwrap_or_default()
    })
}

/// Copies into `new` every field of `old` that `named` does not name.
macro_rules! keep_unnamed {
    ($named:expr, $new:expr, $old:expr, [$($field:literal => $($path:ident).+),+ $(,)?]) => {
        $(if !$named.contains(&$field) { $new.$($path).+ = $old.$($path).+.clone(); })+
    };
}

fn merge_processor(old: &ProcessorDef, new: &mut ProcessorDef, named: &[&'static str]) {
    keep_unnamed!(named, new, old, [
        "instances" => instances, "max_instances" => max_instances, "prefetch" => prefetch,
        "nodes" => nodes,
        "ip_address" => ip_address, "port" => port, "rpc_user" => rpc_user,
        "rpc_password" => rpc_password, "enabled" => enabled,
    ]);
}

fn merge_object(old: &ObjectDef, new: &mut ObjectDef, named: &[&'static str]) {
    keep_unnamed!(named, new, old, [
        "object_type" => object_type, "conn_string" => conn_string, "key_field" => key_field,
        "name_field" => name_field, "id_length" => id_length, "search_prefix" => search_prefix,
        "time_to_live" => time_to_live, "allow_prune" => allow_prune,
        "allow_list" => allow_list, "description" => description, "enabled" => enabled,
    ]);
}

fn merge_group(old: &GroupDef, new: &mut GroupDef, named: &[&'static str]) {
    keep_unnamed!(named, new, old, [
        "maintenance" => maintenance, "description" => description, "enabled" => enabled,
    ]);
}

fn merge_job(old: &JobDef, new: &mut JobDef, named: &[&'static str]) {
    keep_unnamed!(named, new, old, [
        "type" => job_type, "processor" => processor, "group" => group, "payload" => payload,
        "description" => description, "priority" => priority, "timeout" => timeout,
        "misfire_policy" => misfire_policy, "misfire_window" => misfire_window,
        "max_catchup" => max_catchup, "overlap_policy" => overlap_policy,
        "max_overlap" => max_overlap, "max_attempts" => max_attempts,
        "backoff_base" => backoff_base, "backoff_max" => backoff_max, "objects" => objects,
        "enabled" => enabled, "required" => required, "stretch_max" => stretch_max,
        "start_within" => start_within, "aging" => aging,
    ]);
    if !SCHEDULE_FIELDS.iter().any(|f| named.contains(f)) {
        new.schedule = old.schedule.clone();
    }
}

/// The entries of `file` as they will be stored over `before`: new entries as written, existing
/// ones with only the fields `named` names changed (`named = None`: every field is named).
pub fn merge(before: &CatalogFile, file: &CatalogFile, named: Option<&Named>) -> CatalogFile {
    let mut out = file.clone();
    for (name, new) in &mut out.processors {
        if let (Some(old), Some(n)) = (
            before.processors.get(name),
            names_of(named, Section::Processor, name),
        ) {
            merge_processor(old, new, &n);
        }
    }
    for (name, new) in &mut out.objects {
        if let (Some(old), Some(n)) = (
            before.objects.get(name),
            names_of(named, Section::Object, name),
        ) {
            merge_object(old, new, &n);
        }
    }
    for (name, new) in &mut out.groups {
        if let (Some(old), Some(n)) = (
            before.groups.get(name),
            names_of(named, Section::Group, name),
        ) {
            merge_group(old, new, &n);
        }
    }
    for (name, new) in &mut out.jobs {
        if let (Some(old), Some(n)) = (before.jobs.get(name), names_of(named, Section::Job, name)) {
            merge_job(old, new, &n);
        }
    }
    out
}

/// Whether [`merge`] changes anything of `file` over `before`: only an entry that exists
/// already, of a file that names its fields, keeps fields it does not name.
pub fn changes_anything(before: &CatalogFile, file: &CatalogFile, named: Option<&Named>) -> bool {
    named.is_some()
        && (file
            .processors
            .keys()
            .any(|k| before.processors.contains_key(k))
            || file.objects.keys().any(|k| before.objects.contains_key(k))
            || file.groups.keys().any(|k| before.groups.contains_key(k))
            || file.jobs.keys().any(|k| before.jobs.contains_key(k)))
}

#[cfg(test)]
thread_local! {
    /// How many entries this thread rendered as job.conf fields: an import's cost per entry
    /// is counted by it, not timed.
    pub(crate) static RENDERED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The `key = value` lines of one entry as job.conf renders it (defaults are left out;
/// a stored secret as `***`: a change report is shown and logged).
fn fields_of(file: &CatalogFile) -> BTreeMap<String, String> {
    #[cfg(test)]
    RENDERED.with(|n| n.set(n.get() + 1));
    let text = toml_format::render(&file.redacted()).unwrap_or_default();
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with('[') && !l.starts_with("version"))
        .filter_map(|l| l.split_once(" = "))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn one<T: Clone>(
    pick: impl FnOnce(&mut CatalogFile) -> &mut BTreeMap<String, T>,
    name: &str,
    def: &T,
) -> CatalogFile {
    let mut f = CatalogFile::default();
    pick(&mut f).insert(name.to_string(), def.clone());
    f
}

fn entry_change(
    section: Section,
    name: &str,
    before: Option<CatalogFile>,
    after: impl FnOnce() -> CatalogFile,
) -> EntryChange {
    // A created entry is not rendered here: a large import would render every entry.
    let Some(before) = before else {
        return EntryChange {
            section: section.as_str(),
            name: name.to_string(),
            change: "created",
            fields: Vec::new(),
        };
    };
    let after = after();
    let (old, new) = (fields_of(&before), fields_of(&after));
    let keys: BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    let mut fields: Vec<FieldChange> = keys
        .into_iter()
        .filter(|k| old.get(*k) != new.get(*k))
        .map(|k| FieldChange {
            field: k.clone(),
            before: old.get(k).cloned(),
            after: new.get(k).cloned(),
        })
        .collect();
    // One secret replaced by another reads `***` before and after: still a change to report.
    let secret = |f: &CatalogFile| {
        f.processors
            .values()
            .next()
            .and_then(|p| p.rpc_password.clone())
    };
    if secret(&before) != secret(&after) && !fields.iter().any(|f| f.field == "rpc_password") {
        fields.push(FieldChange {
            field: "rpc_password".into(),
            before: old.get("rpc_password").cloned(),
            after: new.get("rpc_password").cloned(),
        });
    }
    EntryChange {
        section: section.as_str(),
        name: name.to_string(),
        change: if fields.is_empty() && before == after {
            "unchanged"
        } else {
            "updated"
        },
        fields,
    }
}

/// The entry `name` of `section` (`processor`, `object`, `group` or `job`) of `entries` with
/// each of its fields as job.conf spells it (as `after`; a created entry's values, for an
/// audit row); `None` when `entries` has no such entry. One entry's cost, whatever the size of
/// `entries`.
pub fn describe(entries: &CatalogFile, section: &str, name: &str) -> Option<EntryChange> {
    let (section, file) = match section {
        "processor" => (
            Section::Processor,
            one(|f| &mut f.processors, name, entries.processors.get(name)?),
        ),
        "object" => (
            Section::Object,
            one(|f| &mut f.objects, name, entries.objects.get(name)?),
        ),
        "group" => (
            Section::Group,
            one(|f| &mut f.groups, name, entries.groups.get(name)?),
        ),
        "job" => (
            Section::Job,
            one(|f| &mut f.jobs, name, entries.jobs.get(name)?),
        ),
        _ => return None,
    };
    Some(created(section, name, &file))
}

/// An entry created as `file` (which holds only it) would be: every field as `after`.
fn created(section: Section, name: &str, file: &CatalogFile) -> EntryChange {
    EntryChange {
        section: section.as_str(),
        name: name.to_string(),
        change: "created",
        fields: fields_of(file)
            .into_iter()
            .map(|(field, v)| FieldChange {
                field,
                before: None,
                after: Some(v),
            })
            .collect(),
    }
}

/// Every entry of `entries` with each of its fields as job.conf spells it (as `after`; a
/// created entry's values, for an audit row), in the order `changes` lists entries.
pub fn described(entries: &CatalogFile) -> Vec<EntryChange> {
    let mut out = Vec::new();
    let mut push =
        |section: Section, name: &str, file: CatalogFile| out.push(created(section, name, &file));
    for (name, def) in &entries.processors {
        push(
            Section::Processor,
            name,
            one(|f| &mut f.processors, name, def),
        );
    }
    for (name, def) in &entries.objects {
        push(Section::Object, name, one(|f| &mut f.objects, name, def));
    }
    for (name, def) in &entries.groups {
        push(Section::Group, name, one(|f| &mut f.groups, name, def));
    }
    for (name, def) in &entries.jobs {
        push(Section::Job, name, one(|f| &mut f.jobs, name, def));
    }
    out
}

/// What storing `entries` over `before` changes, entry by entry, field by field.
pub fn changes(before: &CatalogFile, entries: &CatalogFile) -> Vec<EntryChange> {
    let mut out = Vec::new();
    for (name, def) in &entries.processors {
        let old = before
            .processors
            .get(name)
            .map(|o| one(|f| &mut f.processors, name, o));
        out.push(entry_change(Section::Processor, name, old, || {
            one(|f| &mut f.processors, name, def)
        }));
    }
    for (name, def) in &entries.objects {
        let old = before
            .objects
            .get(name)
            .map(|o| one(|f| &mut f.objects, name, o));
        out.push(entry_change(Section::Object, name, old, || {
            one(|f| &mut f.objects, name, def)
        }));
    }
    for (name, def) in &entries.groups {
        let old = before
            .groups
            .get(name)
            .map(|o| one(|f| &mut f.groups, name, o));
        out.push(entry_change(Section::Group, name, old, || {
            one(|f| &mut f.groups, name, def)
        }));
    }
    for (name, def) in &entries.jobs {
        let old = before.jobs.get(name).map(|o| one(|f| &mut f.jobs, name, o));
        out.push(entry_change(Section::Job, name, old, || {
            one(|f| &mut f.jobs, name, def)
        }));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> (CatalogFile, Named) {
        toml_format::parse_named(text).unwrap()
    }

    #[test]
    fn an_imported_processor_without_max_instances_keeps_it() {
        let (before, _) = parse("[processor.main]\ninstances = 2\nmax_instances = 8\n");
        let (file, named) = parse("[processor.main]\ninstances = 3\n");
        let merged = merge(&before, &file, Some(&named));
        let main = &merged.processors["main"];
        assert_eq!((main.instances, main.max_instances), (3, Some(8)));
        let changes = changes(&before, &merged);
        assert_eq!(changes.len(), 1);
        assert_eq!(changes[0].change, "updated");
        assert_eq!(
            changes[0].fields,
            vec![FieldChange {
                field: "instances".into(),
                before: Some("2".into()),
                after: Some("3".into())
            }]
        );
    }

    #[test]
    fn naming_one_schedule_field_replaces_the_schedule() {
        let base = "[processor.p]\n[job.j]\ntype = \"function\"\nprocessor = \"p\"\n\
                    payload = { function = \"f\" }\npriority = 5\n";
        let (before, _) = parse(&format!("{base}run_every = 5\n"));
        let (file, named) = parse(
            "[processor.p]\n[job.j]\ntype = \"function\"\nprocessor = \"p\"\n\
             payload = { function = \"f\" }\ncron = \"0 * * * *\"\n",
        );
        let merged = merge(&before, &file, Some(&named));
        let j = &merged.jobs["j"];
        assert_eq!(j.schedule.run_every, None);
        assert_eq!(j.schedule.cron.as_deref(), Some("0 * * * *"));
        assert_eq!(j.priority, 5, "priority is not named: kept");
    }

    #[test]
    fn without_names_an_entry_is_replaced_whole() {
        let (before, _) = parse("[processor.main]\ninstances = 2\nmax_instances = 8\n");
        let (file, _) = parse("[processor.main]\ninstances = 3\n");
        let merged = merge(&before, &file, None);
        assert_eq!(merged.processors["main"].max_instances, None);
    }
}
