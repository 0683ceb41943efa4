//! Request bodies and query strings of the API, as the OpenAPI document describes them, and
//! their translation into the application layer's requests (`JobPatch`, `RunQuery`, …). Like
//! the CLI's flags, they only name fields; every rule about values lives in `ops`.
//!
//! Invariant: unknown fields are refused (422 naming them); `null` clears a clearable field.

use serde::{Deserialize, Deserializer};
use serde_json::{Map as JsonMap, Value as Json};
use utoipa::{IntoParams, ToSchema};

use super::error::ApiError;
use crate::model::{JobType, ObjectType, RunStatus};
use crate::ops::jobs::JobPatch;
use crate::ops::objects::ObjectPatch;
use crate::ops::processors::ProcessorPatch;
use crate::schedule::{MisfirePolicy, OverlapPolicy};

/// `Some(None)` for an explicit `null`, `None` for an absent field.
fn nullable<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

fn choice<T>(
    field: &str,
    value: &Option<String>,
    parse: impl Fn(&str) -> Option<T>,
    expected: &str,
) -> Result<Option<T>, ApiError> {
    value
        .as_deref()
        .map(|v| {
            parse(v).ok_or_else(|| {
                ApiError::invalid(field, format!("expected one of {expected}, got `{v}`"))
            })
        })
        .transpose()
}

/// A job's fields: all of them optional in a PATCH; `name`, `type` and `processor` required
/// in a POST.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JobFields {
    /// The job's name (POST only): 1–100 letters, digits, `_`, `-`, `.`, the first a letter,
    /// a digit or `_`.
    pub name: Option<String>,
    /// function, sql, url, rpc, command, workflow.
    #[serde(rename = "type")]
    pub job_type: Option<String>,
    /// The processor that runs it.
    pub processor: Option<String>,
    /// Its group; `null` removes it.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<String>)]
    pub group: Option<Option<String>>,
    /// The executor's instructions (a JSON object).
    #[schema(value_type = Option<Object>)]
    pub payload: Option<JsonMap<String, Json>>,
    /// Free text.
    pub description: Option<String>,
    /// Larger is more important.
    pub priority: Option<i64>,
    /// Milliseconds; 0 = none.
    pub timeout_ms: Option<i64>,
    /// Milliseconds after becoming due by which a run must start, else it ends `expired`;
    /// 0 = no deadline.
    pub start_within_ms: Option<i64>,
    /// Priority aging: milliseconds a queued run waits per point of priority it gains (at most
    /// 1,000 points); 0 = its runs never age.
    pub aging_ms: Option<i64>,
    /// Clear every schedule field before applying the ones given.
    pub clear_schedule: Option<bool>,
    /// Run again `run_delay_ms` after each run ends.
    pub run_always: Option<bool>,
    /// Milliseconds.
    pub run_delay_ms: Option<i64>,
    /// Every N minutes.
    pub run_every: Option<i64>,
    /// At minute M of every hour.
    pub run_on_the: Option<i64>,
    /// HH:MM[:SS] local time ("" or null clears it).
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<String>)]
    pub run_at: Option<Option<String>>,
    /// A day of month or a `#token#` ("" or null clears it).
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<String>)]
    pub run_date: Option<Option<String>>,
    /// A cron expression ("" or null clears it).
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<String>)]
    pub cron: Option<Option<String>>,
    /// IANA time zone ("" or null clears it).
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<String>)]
    pub timezone: Option<Option<String>>,
    /// once, skip or all.
    pub misfire_policy: Option<String>,
    /// How far back a missed slot still counts, ms.
    pub misfire_window_ms: Option<i64>,
    /// Catch-up cap for misfire_policy = all.
    pub max_catchup: Option<i64>,
    /// forbid, queue or allow.
    pub overlap_policy: Option<String>,
    /// Concurrency cap for overlap_policy = allow.
    pub max_overlap: Option<i64>,
    /// Attempts before a failing run is dead.
    pub max_attempts: Option<i64>,
    /// First retry delay, ms.
    pub backoff_base_ms: Option<i64>,
    /// Largest retry delay, ms.
    pub backoff_max_ms: Option<i64>,
    /// Objects the job writes (replaces the list).
    pub objects: Option<Vec<String>>,
    /// Part of the minimum the node always runs.
    pub required: Option<bool>,
    /// How far the node may stretch this recurring job's period under strain (1 = never).
    pub stretch_max: Option<i64>,
}

/// An error of the application layer in the request's terms: the catalog names fields as
/// job.conf does (`timeout`), a request body as its type does (`timeout_ms`); `names` lists
/// the (key, field) pairs that differ.
pub fn in_request_terms(e: ApiError, names: &[(&str, &str)]) -> ApiError {
    let Some(field) = &e.body.field else {
        return e;
    };
    let Some((_, named)) = names.iter().find(|(key, _)| key == field) else {
        return e;
    };
    let reason = names
        .iter()
        .fold(e.body.reason.clone(), |r, (k, f)| rename_word(&r, k, f));
    ApiError {
        body: ApiError::new(e.status, Some(named), reason).body,
        ..e
    }
}

/// Replaces each whole word `from` in `text` by `to`.
fn rename_word(text: &str, from: &str, to: &str) -> String {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(from) {
        let before = rest[..i].chars().next_back();
        let after = rest[i + from.len()..].chars().next();
        out.push_str(&rest[..i]);
        if before.is_some_and(word) || after.is_some_and(word) {
            out.push_str(from);
        } else {
            out.push_str(to);
        }
        rest = &rest[i + from.len()..];
    }
    out.push_str(rest);
    out
}

fn cleared(v: &Option<Option<String>>) -> Option<String> {
    v.as_ref().map(|v| v.clone().unwrap_or_default())
}

impl JobFields {
    /// The job type, parsed.
    pub fn job_type(&self) -> Result<Option<JobType>, ApiError> {
        choice("type", &self.job_type, JobType::parse, &JobType::expected())
    }

    /// The job.conf keys whose field here has another name (the unit in it), as (key, field).
    pub const FIELD_NAMES: [(&str, &str); 7] = [
        ("timeout", "timeout_ms"),
        ("start_within", "start_within_ms"),
        ("aging", "aging_ms"),
        ("run_delay", "run_delay_ms"),
        ("misfire_window", "misfire_window_ms"),
        ("backoff_base", "backoff_base_ms"),
        ("backoff_max", "backoff_max_ms"),
    ];

    /// The application layer's patch.
    pub fn patch(&self) -> Result<JobPatch, ApiError> {
        Ok(JobPatch {
            job_type: self.job_type()?,
            processor: self.processor.clone(),
            group: self.group.clone(),
            payload: self.payload.clone(),
            description: self.description.clone(),
            priority: self.priority,
            timeout: self.timeout_ms,
            clear_schedule: self.clear_schedule.unwrap_or(false),
            run_always: self.run_always,
            run_delay: self.run_delay_ms,
            run_every: self.run_every,
            run_on_the: self.run_on_the,
            run_at: cleared(&self.run_at),
            run_date: cleared(&self.run_date),
            cron: cleared(&self.cron),
            timezone: cleared(&self.timezone),
            misfire_policy: choice(
                "misfire_policy",
                &self.misfire_policy,
                MisfirePolicy::parse,
                "once, skip, all",
            )?,
            misfire_window: self.misfire_window_ms,
            max_catchup: self.max_catchup,
            overlap_policy: choice(
                "overlap_policy",
                &self.overlap_policy,
                OverlapPolicy::parse,
                "forbid, queue, allow",
            )?,
            max_overlap: self.max_overlap,
            max_attempts: self.max_attempts,
            backoff_base: self.backoff_base_ms,
            backoff_max: self.backoff_max_ms,
            objects: self.objects.clone(),
            required: self.required,
            stretch_max: self.stretch_max,
            start_within: self.start_within_ms,
            aging: self.aging_ms,
        })
    }
}

/// The body of a POST (`name` given) or PATCH of a job that carries `patch`: the inverse of
/// [`JobFields::patch`], for a client of the API (the CLI's `--url`). A cleared field is sent
/// as `null` (the group) or `""` (the schedule's text fields), as the API reads them.
pub fn job_body(name: Option<&str>, p: &JobPatch) -> JsonMap<String, Json> {
    let mut b = JsonMap::new();
    let mut put = |k: &str, v: Option<Json>| {
        if let Some(v) = v {
            b.insert(k.to_string(), v);
        }
    };
    put("name", name.map(Json::from));
    put("type", p.job_type.map(|t| t.as_str().into()));
    put("processor", p.processor.clone().map(Json::from));
    put(
        "group",
        p.group.clone().map(|g| g.map_or(Json::Null, Json::from)),
    );
    put("payload", p.payload.clone().map(Json::Object));
    put("description", p.description.clone().map(Json::from));
    put("priority", p.priority.map(Json::from));
    put("timeout_ms", p.timeout.map(Json::from));
    put(
        "clear_schedule",
        p.clear_schedule.then_some(Json::Bool(true)),
    );
    put("run_always", p.run_always.map(Json::from));
    put("run_delay_ms", p.run_delay.map(Json::from));
    put("run_every", p.run_every.map(Json::from));
    put("run_on_the", p.run_on_the.map(Json::from));
    put("run_at", p.run_at.clone().map(Json::from));
    put("run_date", p.run_date.clone().map(Json::from));
    put("cron", p.cron.clone().map(Json::from));
    put("timezone", p.timezone.clone().map(Json::from));
    put(
        "misfire_policy",
        p.misfire_policy.map(|m| m.as_str().into()),
    );
    put("misfire_window_ms", p.misfire_window.map(Json::from));
    put("max_catchup", p.max_catchup.map(Json::from));
    put(
        "overlap_policy",
        p.overlap_policy.map(|o| o.as_str().into()),
    );
    put("max_overlap", p.max_overlap.map(Json::from));
    put("max_attempts", p.max_attempts.map(Json::from));
    put("backoff_base_ms", p.backoff_base.map(Json::from));
    put("backoff_max_ms", p.backoff_max.map(Json::from));
    put("objects", p.objects.clone().map(Json::from));
    put("required", p.required.map(Json::from));
    put("stretch_max", p.stretch_max.map(Json::from));
    put("start_within_ms", p.start_within.map(Json::from));
    put("aging_ms", p.aging.map(Json::from));
    b
}

/// A processor's fields.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProcessorFields {
    /// Its name (POST only).
    pub name: Option<String>,
    /// Concurrent executions, 1–1000.
    pub instances: Option<i64>,
    /// Upper bound for self-tuning, at most 1000; `null` clears it.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<i64>)]
    pub max_instances: Option<Option<i64>>,
    /// Runs claimed beyond the free instances, 0–1000; `null`: sized from the durations its
    /// runs measured (none for runs over a second).
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<i64>)]
    pub prefetch: Option<Option<i64>>,
    /// The nodes that may run it, by name; `[]` (or `null`): any node sharing the catalog.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<Vec<String>>)]
    pub nodes: Option<Option<Vec<String>>>,
    /// The remote node's address, an IP address or a host name (a remote processor); `null`
    /// makes it local.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<String>)]
    pub ip_address: Option<Option<String>>,
    /// The remote node's API port; `null` clears it.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<i64>)]
    pub port: Option<Option<i64>>,
    /// User on the remote node (calls then send Basic user:password); `null` clears it.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<String>)]
    pub rpc_user: Option<Option<String>>,
    /// The credential on the remote node: an API token made there (a password with
    /// `rpc_user`), or a reference `env:NAME` / `file:PATH` read at each call. Write-only: a
    /// stored credential reads back as `***`, a reference as written; `null` clears it.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<String>, write_only)]
    pub rpc_password: Option<Option<String>>,
    /// Enabled.
    pub enabled: Option<bool>,
}

impl ProcessorFields {
    /// The application layer's patch.
    pub fn patch(&self) -> ProcessorPatch {
        ProcessorPatch {
            instances: self.instances,
            max_instances: self.max_instances,
            prefetch: self.prefetch,
            nodes: self.nodes.clone().map(Option::unwrap_or_default),
            ip_address: self.ip_address.clone(),
            port: self.port,
            rpc_user: self.rpc_user.clone(),
            rpc_password: self.rpc_password.clone(),
            enabled: self.enabled,
        }
    }
}

/// An object's fields.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ObjectFields {
    /// Its name (POST only).
    pub name: Option<String>,
    /// table, file or view.
    #[serde(rename = "type")]
    pub object_type: Option<String>,
    /// Where it lives: a SQLite file (relative to the node's data folder), or `catalog`.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<String>)]
    pub conn_string: Option<Option<String>>,
    /// The key column.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<String>)]
    pub key_field: Option<Option<String>>,
    /// The column with a row's name or time.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<String>)]
    pub name_field: Option<Option<String>>,
    /// Seconds before rows may be pruned.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<i64>)]
    pub time_to_live_s: Option<Option<i64>>,
    /// Pruning allowed.
    pub allow_prune: Option<bool>,
    /// Listing allowed.
    pub allow_list: Option<bool>,
    /// Free text.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<String>)]
    pub description: Option<Option<String>>,
    /// Enabled.
    pub enabled: Option<bool>,
}

impl ObjectFields {
    /// The job.conf keys whose field here has another name, as (key, field).
    pub const FIELD_NAMES: [(&str, &str); 1] = [("time_to_live", "time_to_live_s")];

    /// The application layer's patch.
    pub fn patch(&self) -> Result<ObjectPatch, ApiError> {
        Ok(ObjectPatch {
            object_type: choice(
                "type",
                &self.object_type,
                ObjectType::parse,
                &ObjectType::expected(),
            )?,
            conn_string: self.conn_string.clone(),
            key_field: self.key_field.clone(),
            name_field: self.name_field.clone(),
            time_to_live: self.time_to_live_s,
            allow_prune: self.allow_prune,
            allow_list: self.allow_list,
            description: self.description.clone(),
            enabled: self.enabled,
        })
    }
}

/// One run to queue.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TriggerBody {
    /// Parameters: a JSON object overlaying the job's payload.
    #[schema(value_type = Option<Object>)]
    pub params: Option<Json>,
    /// The run must start within this many ms, else it ends `expired` (default: the job's
    /// `start_within_ms`).
    #[schema(minimum = 1)]
    pub start_within_ms: Option<i64>,
}

/// One run of a batch.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchRun {
    /// Parameters: a JSON object overlaying the job's payload.
    #[schema(value_type = Option<Object>)]
    pub params: Option<Json>,
}

/// A child run to queue under a running run (in its tree).
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SpawnBody {
    /// The child's job.
    pub job: String,
    /// Parameters: a JSON object overlaying the job's payload.
    #[schema(value_type = Option<Object>)]
    pub params: Option<Json>,
}

/// Many runs of one job, queued in one transaction.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchBody {
    /// The runs (1–10,000).
    pub runs: Vec<BatchRun>,
    /// Each run must start within this many ms, else it ends `expired` (default: the job's
    /// `start_within_ms`).
    #[schema(minimum = 1)]
    pub start_within_ms: Option<i64>,
}

/// A job's pin on this node.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PinBody {
    /// active or inactive; `null` removes the pin.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<String>)]
    pub pin: Option<Option<String>>,
}

/// Which jobs to list.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct JobsQuery {
    /// Only jobs in this group.
    pub group: Option<String>,
    /// Only jobs on this processor.
    pub processor: Option<String>,
    /// Only enabled (true) or disabled (false) jobs.
    pub enabled: Option<bool>,
    /// Only jobs in this activation state on this node: active, standby, paused, new.
    pub activation: Option<String>,
    /// Only jobs of this type.
    #[serde(rename = "type")]
    #[param(rename = "type")]
    pub job_type: Option<String>,
    /// Only jobs whose name or description contains this text (ASCII case ignored).
    pub search: Option<String>,
    /// name (default), priority, last_end, next_run.
    pub sort: Option<String>,
    /// Jobs to skip (default 0).
    pub offset: Option<usize>,
    /// Page size, 1–1000 (default 100).
    pub limit: Option<usize>,
}

/// Which runs to list.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct RunsQuery {
    /// Only this job's runs.
    pub job: Option<String>,
    /// Only runs in this status.
    pub status: Option<String>,
    /// Only runs claimed by this node.
    pub node: Option<String>,
    /// Only runs queued since: a duration back from now (`90s`, `15m`, `2h`, `1d`) or an RFC
    /// 3339 time.
    pub since: Option<String>,
    /// Only runs queued before: a duration back from now or an RFC 3339 time.
    pub until: Option<String>,
    /// Only runs older than this run id: the next page after a listing whose last (oldest)
    /// run it is.
    pub before: Option<i64>,
    /// At most this many, 1–1000 (default 100).
    pub limit: Option<i64>,
}

impl RunsQuery {
    /// The status, parsed.
    pub fn status(&self) -> Result<Option<RunStatus>, ApiError> {
        choice(
            "status",
            &self.status,
            RunStatus::parse,
            &RunStatus::expected(),
        )
    }
}

/// How many fire times.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct NextQuery {
    /// 1–1000 (default 5).
    pub count: Option<usize>,
}

/// How many decisions, of which nodes.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DecisionsQuery {
    /// 1–1000 (default 100).
    pub limit: Option<i64>,
    /// Of every node, not just this one.
    pub all_nodes: Option<bool>,
}

/// A stat's range and step.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct SeriesQueryParams {
    /// Start: RFC 3339 or a duration back from now (`1h`); default one hour ago.
    pub from: Option<String>,
    /// End: RFC 3339 or a duration back from now; default now.
    pub to: Option<String>,
    /// Bucket width in seconds (default: the range over 60 buckets, at least 1 s).
    pub step: Option<i64>,
    /// Only this subject (an object, a processor).
    pub subject: Option<String>,
    /// Only this node's samples.
    pub node: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_about_a_job_conf_key_names_the_request_field() {
        let names = &JobFields::FIELD_NAMES;
        let e = ApiError::invalid("backoff_max", "5 is below backoff_base = 9 (job `x`)");
        let e = in_request_terms(e, names);
        assert_eq!(e.body.field.as_deref(), Some("backoff_max_ms"));
        assert_eq!(e.body.reason, "5 is below backoff_base_ms = 9 (job `x`)");
        assert_eq!(e.body.error, format!("backoff_max_ms: {}", e.body.reason));
        for (key, field) in JobFields::FIELD_NAMES {
            let e = in_request_terms(ApiError::invalid(key, "must be at least 0"), names);
            assert_eq!(e.body.field.as_deref(), Some(field));
        }
        let e = in_request_terms(ApiError::invalid("timezone", "timeout_x"), names);
        assert_eq!(e.body.field.as_deref(), Some("timezone"));
        assert_eq!(e.body.reason, "timeout_x");
    }

    #[test]
    fn a_patch_sent_as_a_body_reads_back_as_the_same_patch() {
        let patch = JobPatch {
            job_type: Some(JobType::Command),
            processor: Some("main".into()),
            group: Some(None),
            payload: serde_json::json!({ "argv": ["true"] }).as_object().cloned(),
            priority: Some(7),
            clear_schedule: true,
            cron: Some(String::new()),
            run_at: Some("02:00".into()),
            misfire_policy: Some(MisfirePolicy::Skip),
            overlap_policy: Some(OverlapPolicy::Allow),
            backoff_base: Some(30_000),
            objects: Some(vec!["events".into()]),
            stretch_max: Some(4),
            ..JobPatch::default()
        };
        let body = Json::Object(job_body(Some("nightly"), &patch));
        let fields: JobFields = serde_json::from_value(body.clone()).unwrap();
        assert_eq!(fields.name.as_deref(), Some("nightly"));
        assert_eq!(
            format!("{:?}", fields.patch().unwrap()),
            format!("{patch:?}"),
            "{body}"
        );
    }
}
