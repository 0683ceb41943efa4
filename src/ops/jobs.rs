//! Operations on jobs: list, show, add, edit (a field patch), enable, disable, remove, pin,
//! trigger a run, and the next fire times.

use serde::Serialize;
use serde_json::{Map as JsonMap, Value as Json};

use super::view::{Time, json_of};
use super::{OpError, Ops, Warning, problems_error};
use crate::catalog::JobRecord;
use crate::catalog::activation::ActivationByJob;
use crate::jobconf::{self, CatalogFile, JobDef};
use crate::model::{JobType, Pin};
use crate::schedule::{MisfirePolicy, OverlapPolicy, Schedule, ScheduleSpec};

/// The most fire times `next` computes.
pub const MAX_NEXT: usize = 1000;

/// A job's activation on one node: whether the node runs it now, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct ActivationView {
    /// The node.
    pub node: String,
    /// `active`, `standby`, `paused` (active, but held while the node's writes are paused:
    /// none of its runs is claimed), or `new` (the node has not decided yet).
    pub state: String,
    /// `active` or `inactive` when an operator pinned it.
    pub pinned: Option<String>,
    /// Why, in words.
    pub reason: String,
}

impl ActivationView {
    /// `active`, `standby`, `pinned active`, … as a table shows it; a job held by paused
    /// writes reads `paused` even when pinned (`paused (pinned active)`): it does not run.
    pub fn label(&self) -> String {
        match &self.pinned {
            Some(pin) if self.state == "paused" => format!("paused (pinned {pin})"),
            Some(pin) => format!("pinned {pin}"),
            None => self.state.clone(),
        }
    }
}

/// A job as listed and shown: its definition's fields, its schedule in words, its activation
/// on the caller's node and the engine's bookkeeping.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct JobView {
    /// Name.
    pub name: String,
    /// function, sql, url, rpc, command, workflow.
    #[serde(rename = "type")]
    pub job_type: &'static str,
    /// Processor name.
    pub processor: String,
    /// Group name.
    pub group: Option<String>,
    /// Larger is more important.
    pub priority: i64,
    /// `status = 1`.
    pub enabled: bool,
    /// Part of the minimum the node always runs.
    pub required: bool,
    /// Milliseconds; 0 = none.
    pub timeout_ms: i64,
    /// Milliseconds after becoming due by which a run must start, or it expires; 0 = none.
    pub start_within_ms: i64,
    /// Milliseconds a queued run waits per point of priority it gains; 0 = it never ages.
    pub aging_ms: i64,
    /// The schedule in words.
    pub schedule: String,
    /// Run again `run_delay` ms after each run ends.
    pub run_always: bool,
    /// Milliseconds.
    pub run_delay_ms: i64,
    /// Minutes.
    pub run_every: Option<i64>,
    /// Minute of the hour.
    pub run_on_the: Option<i64>,
    /// HH:MM[:SS].
    pub run_at: Option<String>,
    /// A day of month or a `#token#`.
    pub run_date: Option<String>,
    /// Cron expression.
    pub cron: Option<String>,
    /// IANA time zone of the schedule.
    pub timezone: Option<String>,
    /// once, skip, all.
    pub misfire_policy: &'static str,
    /// forbid, queue, allow.
    pub overlap_policy: &'static str,
    /// Attempts before a failing run is dead.
    pub max_attempts: i64,
    /// First retry delay, ms.
    pub backoff_base_ms: i64,
    /// Largest retry delay, ms.
    pub backoff_max_ms: i64,
    /// Objects the job writes.
    pub objects: Vec<String>,
    /// The executor's instructions.
    #[schema(value_type = Object)]
    pub payload: JsonMap<String, Json>,
    /// Free text.
    pub description: Option<String>,
    /// On the caller's node.
    pub activation: ActivationView,
    /// Why its slots do not fire for now, when it backs off after consecutive failed runs.
    pub backoff: Option<String>,
    /// Runs executing now.
    pub in_progress: i64,
    /// When the last run began.
    pub last_begin: Option<Time>,
    /// When the last run ended.
    pub last_end: Option<Time>,
    /// The last run's duration, ms.
    pub last_elapsed_ms: Option<i64>,
    /// The last run's result (JSON) or error (a string), abbreviated.
    pub last_response: Option<Json>,
    /// When the job runs next: the earliest next run among the running nodes where it is
    /// active, as each node's scheduler planned it. None for a job on demand, disabled, active
    /// on no running node, or a run_always job whose run is in flight.
    pub next_run_at: Option<Time>,
}

fn activation_of(node: &str, by_job: &ActivationByJob, name: &str) -> ActivationView {
    match by_job.get(name) {
        Some((state, pinned, reason)) => ActivationView {
            node: node.to_string(),
            state: state.clone(),
            pinned: pinned.clone(),
            reason: reason.clone().unwrap_or_default(),
        },
        None => ActivationView {
            node: node.to_string(),
            state: "new".into(),
            pinned: None,
            reason: format!("node `{node}` has not run since this job was added"),
        },
    }
}

fn job_view(j: &JobRecord, activation: ActivationView) -> JobView {
    let d = &j.def;
    let s = &d.schedule;
    JobView {
        name: j.name.clone(),
        job_type: d.job_type.as_str(),
        processor: d.processor.clone(),
        group: d.group.clone(),
        priority: d.priority,
        enabled: d.enabled,
        required: d.required,
        timeout_ms: d.timeout,
        start_within_ms: d.start_within,
        aging_ms: d.aging,
        schedule: schedule_words(s),
        run_always: s.run_always,
        run_delay_ms: s.run_delay,
        run_every: s.run_every,
        run_on_the: s.run_on_the,
        run_at: s.run_at.clone(),
        run_date: s.run_date.clone(),
        cron: s.cron.clone(),
        timezone: s.timezone.clone(),
        misfire_policy: d.misfire_policy.as_str(),
        overlap_policy: d.overlap_policy.as_str(),
        max_attempts: d.max_attempts,
        backoff_base_ms: d.backoff_base,
        backoff_max_ms: d.backoff_max,
        objects: d.objects.clone(),
        payload: d.payload.map(),
        description: d.description.clone(),
        activation,
        backoff: None,
        in_progress: j.in_progress,
        last_begin: Time::opt(j.last_date_begin),
        last_end: Time::opt(j.last_date_end),
        last_elapsed_ms: j.last_elapse,
        last_response: json_of(j.last_response.as_deref()),
        next_run_at: Time::opt(j.next_run_at),
    }
}

/// The schedule in words, from the schedule core (the zone does not change the words).
pub fn schedule_words(s: &ScheduleSpec) -> String {
    match Schedule::parse(s, chrono_tz::UTC) {
        Ok(schedule) => schedule.describe(),
        Err(errors) => {
            let why: Vec<String> = errors
                .iter()
                .map(|e| format!("{}: {}", e.field, e.reason))
                .collect();
            format!("invalid schedule ({})", why.join("; "))
        }
    }
}

/// Changes to a job's fields; `None` leaves a field as it is.
#[derive(Debug, Clone, Default)]
pub struct JobPatch {
    /// Executor type.
    pub job_type: Option<JobType>,
    /// Processor name.
    pub processor: Option<String>,
    /// `Some(None)` removes the group.
    pub group: Option<Option<String>>,
    /// Replaces the payload.
    pub payload: Option<JsonMap<String, Json>>,
    /// Free text.
    pub description: Option<String>,
    /// Priority.
    pub priority: Option<i64>,
    /// Timeout, ms.
    pub timeout: Option<i64>,
    /// Clear every schedule field before applying the ones given.
    pub clear_schedule: bool,
    /// Schedule: run again after each end.
    pub run_always: Option<bool>,
    /// Schedule: delay after the end, ms.
    pub run_delay: Option<i64>,
    /// Schedule: every N minutes.
    pub run_every: Option<i64>,
    /// Schedule: minute of the hour.
    pub run_on_the: Option<i64>,
    /// Schedule: HH:MM[:SS].
    pub run_at: Option<String>,
    /// Schedule: date gate.
    pub run_date: Option<String>,
    /// Schedule: cron expression.
    pub cron: Option<String>,
    /// Schedule: time zone.
    pub timezone: Option<String>,
    /// Misfire policy.
    pub misfire_policy: Option<MisfirePolicy>,
    /// How far back a missed slot still counts, ms.
    pub misfire_window: Option<i64>,
    /// Catch-up cap for `misfire_policy = all`.
    pub max_catchup: Option<i64>,
    /// Overlap policy.
    pub overlap_policy: Option<OverlapPolicy>,
    /// Concurrency cap for `overlap_policy = allow`.
    pub max_overlap: Option<i64>,
    /// Attempts before dead.
    pub max_attempts: Option<i64>,
    /// First retry delay, ms.
    pub backoff_base: Option<i64>,
    /// Largest retry delay, ms.
    pub backoff_max: Option<i64>,
    /// Replaces the list of objects written.
    pub objects: Option<Vec<String>>,
    /// Part of the minimum.
    pub required: Option<bool>,
    /// How far the node may stretch the period under strain.
    pub stretch_max: Option<i64>,
    /// Start deadline after becoming due, ms (0: none).
    pub start_within: Option<i64>,
    /// Priority aging, ms per point (0: none).
    pub aging: Option<i64>,
}

impl JobPatch {
    /// Applies the patch to `job`.
    pub fn apply(&self, job: &mut JobDef) {
        fn set<T: Clone>(field: &mut T, value: &Option<T>) {
            if let Some(v) = value {
                *field = v.clone();
            }
        }
        set(&mut job.job_type, &self.job_type);
        set(&mut job.processor, &self.processor);
        set(&mut job.group, &self.group);
        if let Some(payload) = &self.payload {
            job.payload = payload.clone().into();
        }
        if self.description.is_some() {
            job.description = self.description.clone();
        }
        set(&mut job.priority, &self.priority);
        set(&mut job.stretch_max, &self.stretch_max);
        set(&mut job.timeout, &self.timeout);
        set(&mut job.start_within, &self.start_within);
        set(&mut job.aging, &self.aging);
        if self.clear_schedule {
            job.schedule = ScheduleSpec::default();
        }
        let s = &mut job.schedule;
        set(&mut s.run_always, &self.run_always);
        set(&mut s.run_delay, &self.run_delay);
        for (field, value) in [
            (&mut s.run_every, self.run_every),
            (&mut s.run_on_the, self.run_on_the),
        ] {
            if value.is_some() {
                *field = value;
            }
        }
        for (field, value) in [
            (&mut s.run_at, &self.run_at),
            (&mut s.run_date, &self.run_date),
            (&mut s.cron, &self.cron),
            (&mut s.timezone, &self.timezone),
        ] {
            if value.is_some() {
                *field = value.clone().filter(|v| !v.is_empty());
            }
        }
        set(&mut job.misfire_policy, &self.misfire_policy);
        set(&mut job.misfire_window, &self.misfire_window);
        set(&mut job.max_catchup, &self.max_catchup);
        set(&mut job.overlap_policy, &self.overlap_policy);
        set(&mut job.max_overlap, &self.max_overlap);
        set(&mut job.max_attempts, &self.max_attempts);
        set(&mut job.backoff_base, &self.backoff_base);
        set(&mut job.backoff_max, &self.backoff_max);
        if let Some(objects) = &self.objects {
            let mut objects = objects.clone();
            objects.sort();
            job.objects = objects;
        }
        set(&mut job.required, &self.required);
    }
}

/// Whether a change did anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Change {
    /// Written (with an audit row).
    Changed,
    /// Already so: nothing written, no audit row, no reload.
    Unchanged,
}

/// What adding or editing a job did.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Saved {
    /// The job after the change.
    pub job: JobView,
    /// Whether anything was written.
    pub change: Change,
    /// What an operator should know (an unknown function, …).
    pub warnings: Vec<Warning>,
}

/// The next fire times of a job.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct NextView {
    /// The job.
    pub job: String,
    /// Its schedule in words.
    pub schedule: String,
    /// The zone its times are computed in.
    pub timezone: String,
    /// The times, earliest first (empty for on-demand and run_always jobs).
    pub next: Vec<Time>,
    /// Whether the caller's node runs the job now, and why: a standby job fires none of them.
    pub activation: ActivationView,
}

impl Ops {
    fn activations(&self) -> Result<ActivationByJob, OpError> {
        self.catalog
            .activation_by_job(&self.caller.node)
            .map_err(self.within("reading activations"))
    }

    /// Every job, by name, with its activation on the caller's node.
    pub fn jobs(&self) -> Result<Vec<JobView>, OpError> {
        let jobs = self.catalog.jobs().map_err(self.within("listing jobs"))?;
        let by_job = self.activations()?;
        jobs.iter()
            .map(|j| {
                let mut view = job_view(j, activation_of(&self.caller.node, &by_job, &j.name));
                view.backoff = self.backoff_of(j)?;
                Ok(view)
            })
            .collect()
    }

    /// The view of one stored job, given its activation row on the caller's node (a page of
    /// jobs reads its rows with the jobs, not the whole node's activations).
    pub(crate) fn job_view_of(
        &self,
        j: &JobRecord,
        activation: Option<crate::catalog::browse::ActivationRow>,
    ) -> Result<JobView, OpError> {
        let mut by_job = ActivationByJob::new();
        if let Some(row) = activation {
            by_job.insert(j.name.clone(), row);
        }
        let mut view = job_view(j, activation_of(&self.caller.node, &by_job, &j.name));
        view.backoff = self.backoff_of(j)?;
        Ok(view)
    }

    /// Why a recurring job fires no slot for now, if it backs off.
    fn backoff_of(&self, j: &JobRecord) -> Result<Option<String>, OpError> {
        if j.def.schedule.is_on_demand() {
            return Ok(None);
        }
        let streak = self
            .catalog
            .failure_streak(j.id)
            .map_err(self.within(format!("reading the runs of `{}`", j.name)))?;
        Ok(streak.describe(crate::catalog::now_ms()))
    }

    /// One job, and its definition (for rendering as job.conf).
    pub fn job(&self, name: &str) -> Result<(JobView, JobDef), OpError> {
        let job = self
            .catalog
            .job(name)
            .map_err(self.within(format!("reading job `{name}`")))?;
        let by_job = self.activations()?;
        let mut view = job_view(&job, activation_of(&self.caller.node, &by_job, name));
        view.backoff = self.backoff_of(&job)?;
        Ok((view, job.def))
    }

    /// Adds a job of `job_type` on `processor` with `patch`'s fields, validated against the
    /// whole catalog.
    pub fn add_job(
        &self,
        name: &str,
        job_type: JobType,
        processor: &str,
        patch: &JobPatch,
    ) -> Result<Saved, OpError> {
        // Here, not only in the catalog's validation, so that the refusal names the field.
        crate::jobconf::check_name(name).map_err(|reason| OpError::invalid("name", reason))?;
        let mut file = self
            .catalog
            .export()
            .map_err(self.within("reading the catalog"))?;
        if file.jobs.contains_key(name) {
            return Err(OpError::Conflict(format!(
                "job `{name}` exists already; change it with `jobs edit`"
            )));
        }
        let mut job = JobDef::new(job_type, processor);
        patch.apply(&mut job);
        self.save(&mut file, name, job, None)
    }

    /// Changes the fields `patch` names; writes nothing when they already hold those values.
    pub fn edit_job(&self, name: &str, patch: &JobPatch) -> Result<Saved, OpError> {
        let mut file = self
            .catalog
            .export()
            .map_err(self.within("reading the catalog"))?;
        let old = file
            .jobs
            .get(name)
            .cloned()
            .ok_or_else(|| OpError::NotFound {
                kind: "job",
                name: name.to_string(),
            })?;
        let mut job = old.clone();
        patch.apply(&mut job);
        self.save(&mut file, name, job, Some(old))
    }

    /// Validates `job` within the whole catalog (so references resolve) and stores it, unless
    /// it equals `old`.
    fn save(
        &self,
        file: &mut CatalogFile,
        name: &str,
        job: JobDef,
        old: Option<JobDef>,
    ) -> Result<Saved, OpError> {
        file.jobs.insert(name.to_string(), job.clone());
        problems_error(
            jobconf::validate(file)
                .into_iter()
                .filter(|p| p.section == jobconf::Section::Job && p.name == name)
                .collect(),
        )?;
        let mut one = CatalogFile::default();
        one.jobs.insert(name.to_string(), job.clone());
        let warnings = self.warnings(&one);
        let change = if old.as_ref() == Some(&job) {
            Change::Unchanged
        } else {
            let actor = self.caller.actor.clone();
            let doing = format!("saving job `{name}`");
            self.catalog
                .put_job(name, &job, &actor)
                .map_err(self.within(doing))?;
            Change::Changed
        };
        let (job, _) = self.job(name)?;
        Ok(Saved {
            job,
            change,
            warnings,
        })
    }

    /// Enables or disables a job; unchanged when it already is.
    pub fn set_job_enabled(&self, name: &str, enabled: bool) -> Result<Change, OpError> {
        let job = self
            .catalog
            .job(name)
            .map_err(self.within(format!("reading job `{name}`")))?;
        if job.def.enabled == enabled {
            return Ok(Change::Unchanged);
        }
        let actor = self.caller.actor.clone();
        let doing = format!(
            "{} job `{name}`",
            if enabled { "enabling" } else { "disabling" }
        );
        self.catalog
            .set_job_enabled(name, enabled, &actor)
            .map_err(self.within(doing))?;
        Ok(Change::Changed)
    }

    /// Removes a job and its history; refused while one of its runs executes.
    pub fn remove_job(&self, name: &str) -> Result<(), OpError> {
        let actor = self.caller.actor.clone();
        let doing = format!("removing job `{name}`");
        self.catalog
            .remove_job(name, &actor)
            .map_err(self.within(doing))
    }

    /// Pins a job on the caller's node (or removes the pin).
    pub fn pin_job(&self, name: &str, pin: Option<Pin>) -> Result<ActivationView, OpError> {
        let (actor, node) = (self.caller.actor.clone(), self.caller.node.clone());
        let doing = format!("pinning job `{name}`");
        self.catalog
            .pin_job(name, &node, pin, &actor)
            .map_err(self.within(doing))?;
        Ok(self.job(name)?.0.activation)
    }

    /// Queues a run of `name` now with `params` (a JSON object); returns the run id.
    pub fn trigger(
        &self,
        name: &str,
        params: Option<&Json>,
        start_within_ms: Option<i64>,
    ) -> Result<i64, OpError> {
        let start_within = super::node::start_within(start_within_ms, "start_within")?;
        if let Some(p) = params
            && !p.is_object()
        {
            return Err(OpError::invalid("params", "expected a JSON object"));
        }
        let actor = self.caller.actor.clone();
        let doing = format!("queueing a run of `{name}`");
        self.catalog
            .enqueue_now(name, params, &actor, start_within)
            .map_err(self.within(doing))
    }

    /// The next `count` (1–[`MAX_NEXT`]) fire times of a job.
    pub fn next_times(&self, name: &str, count: usize, now: i64) -> Result<NextView, OpError> {
        if !(1..=MAX_NEXT).contains(&count) {
            return Err(OpError::invalid(
                "count",
                format!("must be 1–{MAX_NEXT}, got {count}"),
            ));
        }
        let (view, def) = self.job(name)?;
        let schedule = Schedule::parse(&def.schedule, self.tz).map_err(|errors| {
            let reasons: Vec<String> = errors
                .iter()
                .map(|e| format!("{}: {}", e.field, e.reason))
                .collect();
            OpError::invalid(
                "schedule",
                format!(
                    "job `{name}` has an invalid schedule: {}",
                    reasons.join("; ")
                ),
            )
        })?;
        Ok(NextView {
            job: name.to_string(),
            schedule: schedule.describe(),
            timezone: schedule.tz().name().to_string(),
            next: schedule
                .next_slots_after(now, count)
                .into_iter()
                .map(Time)
                .collect(),
            activation: view.activation,
        })
    }
}
