//! Checking before saving: a schedule described in words with its next fire times while an
//! operator types it, and every problem of a job's fields at once, each with its field — what
//! a form shows beside each input. Saving (`add_job`, `edit_job`) validates the same way again.

use serde::Serialize;

use super::jobs::{JobPatch, MAX_NEXT};
use super::view::Time;
use super::{OpError, Ops};
use crate::jobconf::{self, JobDef, Section, check_name};
use crate::model::JobType;
use crate::schedule::{Schedule, ScheduleSpec};

/// One problem of one field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FieldProblem {
    /// The field (the catalog's column: `cron`, `run_at`, `processor`, `payload`, `timeout`).
    pub field: String,
    /// What is wrong.
    pub reason: String,
}

/// A schedule as it would fire.
#[derive(Debug, Clone, Serialize)]
pub struct SchedulePreview {
    /// In words (empty when it is invalid).
    pub words: String,
    /// The zone its times are computed in.
    pub timezone: String,
    /// The next fire times, earliest first (none for on-demand and run_always schedules).
    pub next: Vec<Time>,
    /// Its problems, each with its field; none when it is valid.
    pub problems: Vec<FieldProblem>,
}

impl Ops {
    /// The processors' names (a form's choices), without reading the rest of the catalog.
    pub fn processor_names(&self) -> Result<Vec<String>, OpError> {
        let rows = self
            .catalog
            .processors()
            .map_err(self.within("listing processors"))?;
        Ok(rows.into_iter().map(|r| r.name).collect())
    }

    /// The schedule `spec` in words and its next `count` (at most [`MAX_NEXT`]) fire times
    /// after `now`, or its problems.
    pub fn preview_schedule(&self, spec: &ScheduleSpec, count: usize, now: i64) -> SchedulePreview {
        match Schedule::parse(spec, self.tz) {
            Ok(schedule) => SchedulePreview {
                words: schedule.describe(),
                timezone: schedule.tz().name().to_string(),
                next: schedule
                    .next_slots_after(now, count.min(MAX_NEXT))
                    .into_iter()
                    .map(Time)
                    .collect(),
                problems: Vec::new(),
            },
            Err(errors) => SchedulePreview {
                words: String::new(),
                timezone: spec
                    .timezone
                    .clone()
                    .unwrap_or_else(|| self.tz.name().to_string()),
                next: Vec::new(),
                problems: errors
                    .into_iter()
                    .map(|e| FieldProblem {
                        field: e.field.to_string(),
                        reason: e.reason,
                    })
                    .collect(),
            },
        }
    }

    /// Every problem that saving `patch` would meet, without saving: as a new job `name` of
    /// `job_type` on `processor`, or (`existing`) as a change of job `name`. Validated against
    /// the whole catalog, as saving does.
    pub fn check_job(
        &self,
        name: &str,
        existing: bool,
        job_type: Option<JobType>,
        processor: Option<&str>,
        patch: &JobPatch,
    ) -> Result<Vec<FieldProblem>, OpError> {
        let mut problems = Vec::new();
        let problem = |field: &str, reason: String| FieldProblem {
            field: field.to_string(),
            reason,
        };
        if !existing && let Err(reason) = check_name(name) {
            problems.push(problem("name", reason));
        }
        let mut file = self
            .catalog
            .export()
            .map_err(self.within("reading the catalog"))?;
        let mut job = match (file.jobs.get(name), existing) {
            (Some(old), true) => old.clone(),
            (None, true) => {
                return Err(OpError::NotFound {
                    kind: "job",
                    name: name.to_string(),
                });
            }
            (Some(_), false) => {
                problems.push(problem(
                    "name",
                    format!("a job named `{name}` exists already"),
                ));
                return Ok(problems);
            }
            (None, false) => {
                let Some(job_type) = job_type else {
                    problems.push(problem("type", "is required".into()));
                    return Ok(problems);
                };
                let Some(processor) = processor.filter(|p| !p.is_empty()) else {
                    problems.push(problem("processor", "is required".into()));
                    return Ok(problems);
                };
                JobDef::new(job_type, processor)
            }
        };
        patch.apply(&mut job);
        // Validated under its name even when the name is refused, so that every other
        // field's problems are shown beside their fields at once.
        file.jobs.insert(name.to_string(), job);
        for p in jobconf::validate(&file)
            .into_iter()
            .filter(|p| p.section == Section::Job && p.name == name)
        {
            let p = problem(p.field.unwrap_or("job"), p.reason);
            if !problems.contains(&p) {
                problems.push(p);
            }
        }
        Ok(problems)
    }
}
