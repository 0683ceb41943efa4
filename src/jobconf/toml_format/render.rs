//! Writing the file model back as job.conf text.

use std::fmt::Write as _;

use toml::Value;

use super::{FORMAT_VERSION, json_to_toml};
use crate::jobconf::{CatalogFile, JobDef, ObjectDef};

/// Renders a catalog as job.conf text. Fields at their default are left out, so the output is
/// short and stable: export → import → export gives the same bytes.
pub fn render(file: &CatalogFile) -> Result<String, String> {
    let mut out = String::new();
    out.push_str("# jobvisor job catalog (job.conf). Check with `jobvisor check FILE`.\n");
    let _ = writeln!(out, "version = {FORMAT_VERSION}");
    for (name, p) in &file.processors {
        let mut e = Entry::new(&mut out, "processor", name);
        e.int_if("instances", p.instances, true);
        e.opt_int("max_instances", p.max_instances);
        e.opt_int("prefetch", p.prefetch);
        if !p.nodes.is_empty() {
            let list = Value::Array(p.nodes.iter().cloned().map(Value::String).collect());
            e.raw("nodes", &list);
        }
        e.opt_str("ip_address", &p.ip_address);
        e.opt_int("port", p.port);
        e.opt_str("rpc_user", &p.rpc_user);
        e.opt_str("rpc_password", &p.rpc_password);
        e.bool_if("enabled", p.enabled, !p.enabled);
    }
    let d = ObjectDef::default();
    for (name, o) in &file.objects {
        let mut e = Entry::new(&mut out, "object", name);
        e.str_if(
            "object_type",
            o.object_type.as_str(),
            o.object_type != d.object_type,
        );
        e.opt_str("conn_string", &o.conn_string);
        e.opt_str("key_field", &o.key_field);
        e.opt_str("name_field", &o.name_field);
        e.opt_int("id_length", o.id_length);
        e.opt_str("search_prefix", &o.search_prefix);
        e.opt_int("time_to_live", o.time_to_live);
        e.bool_if("allow_prune", o.allow_prune, o.allow_prune);
        e.bool_if("allow_list", o.allow_list, o.allow_list);
        e.opt_str("description", &o.description);
        e.bool_if("enabled", o.enabled, !o.enabled);
    }
    for (name, g) in &file.groups {
        let mut e = Entry::new(&mut out, "group", name);
        e.bool_if("maintenance", g.maintenance, g.maintenance);
        e.opt_str("description", &g.description);
        e.bool_if("enabled", g.enabled, !g.enabled);
    }
    for (name, j) in &file.jobs {
        render_job(&mut out, name, j)?;
    }
    Ok(out)
}

fn render_job(out: &mut String, name: &str, j: &JobDef) -> Result<(), String> {
    let d = JobDef::new(j.job_type, "");
    let payload = json_to_toml(&j.payload.json(), &format!("job.{name}.payload"))?;
    let mut e = Entry::new(out, "job", name);
    e.str_if("type", j.job_type.as_str(), true);
    e.str_if("processor", &j.processor, true);
    e.opt_str("group", &j.group);
    e.opt_str("description", &j.description);
    e.int_if("priority", j.priority, j.priority != d.priority);
    e.bool_if("required", j.required, j.required);
    e.bool_if("enabled", j.enabled, !j.enabled);
    e.int_if("timeout", j.timeout, j.timeout != d.timeout);
    let s = &j.schedule;
    e.bool_if("run_always", s.run_always, s.run_always);
    e.int_if("run_delay", s.run_delay, s.run_delay != 0);
    e.opt_int("run_every", s.run_every);
    e.opt_int("run_on_the", s.run_on_the);
    e.opt_str("run_at", &s.run_at);
    e.opt_str("run_date", &s.run_date);
    e.opt_str("cron", &s.cron);
    e.opt_str("timezone", &s.timezone);
    e.str_if(
        "misfire_policy",
        j.misfire_policy.as_str(),
        j.misfire_policy != d.misfire_policy,
    );
    e.int_if(
        "misfire_window",
        j.misfire_window,
        j.misfire_window != d.misfire_window,
    );
    e.int_if("max_catchup", j.max_catchup, j.max_catchup != d.max_catchup);
    e.str_if(
        "overlap_policy",
        j.overlap_policy.as_str(),
        j.overlap_policy != d.overlap_policy,
    );
    e.int_if("max_overlap", j.max_overlap, j.max_overlap != d.max_overlap);
    e.int_if("stretch_max", j.stretch_max, j.stretch_max != d.stretch_max);
    e.int_if("start_within", j.start_within, j.start_within != 0);
    e.int_if("aging", j.aging, j.aging != 0);
    e.int_if(
        "max_attempts",
        j.max_attempts,
        j.max_attempts != d.max_attempts,
    );
    e.int_if(
        "backoff_base",
        j.backoff_base,
        j.backoff_base != d.backoff_base,
    );
    e.int_if("backoff_max", j.backoff_max, j.backoff_max != d.backoff_max);
    if !j.objects.is_empty() {
        let list = Value::Array(j.objects.iter().cloned().map(Value::String).collect());
        e.raw("objects", &list);
    }
    if !j.payload.is_empty() {
        e.raw("payload", &payload);
    }
    Ok(())
}

/// Writes one `[section.name]` table.
struct Entry<'a> {
    out: &'a mut String,
}

impl<'a> Entry<'a> {
    fn new(out: &'a mut String, section: &str, name: &str) -> Self {
        let _ = write!(out, "\n[{section}.{}]\n", key(name));
        Self { out }
    }

    fn raw(&mut self, field: &str, value: &Value) {
        let _ = writeln!(self.out, "{field} = {value}");
    }

    fn str_if(&mut self, field: &str, value: &str, write: bool) {
        if write {
            self.raw(field, &Value::String(value.to_string()));
        }
    }

    fn opt_str(&mut self, field: &str, value: &Option<String>) {
        if let Some(v) = value {
            self.raw(field, &Value::String(v.clone()));
        }
    }

    fn int_if(&mut self, field: &str, value: i64, write: bool) {
        if write {
            self.raw(field, &Value::Integer(value));
        }
    }

    fn opt_int(&mut self, field: &str, value: Option<i64>) {
        if let Some(v) = value {
            self.raw(field, &Value::Integer(v));
        }
    }

    fn bool_if(&mut self, field: &str, value: bool, write: bool) {
        if write {
            self.raw(field, &Value::Boolean(value));
        }
    }
}

/// A bare key when possible, else a quoted one.
fn key(name: &str) -> String {
    if !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        name.to_string()
    } else {
        Value::String(name.to_string()).to_string()
    }
}
