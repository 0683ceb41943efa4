//! Listing jobs a page at a time: filters (group, processor, enabled, activation, type, a
//! search of names and descriptions), a sort key, and bounded pages — what the API and the web
//! UI offer beyond the CLI's whole list. The catalog filters, sorts and pages in SQL
//! ([`crate::catalog::browse`]), so a page of 10,000 jobs reads and maps its own jobs only.

use serde::Serialize;
use utoipa::ToSchema;

use super::jobs::JobView;
use super::{OpError, Ops};
use crate::catalog::browse::{JobFilter, JobOrder};

/// The largest page.
pub const MAX_PAGE: usize = 1000;

/// How jobs are sorted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum JobSort {
    /// By name (the default).
    #[default]
    Name,
    /// Most important first, then by name.
    Priority,
    /// Most recently ended first; never run last.
    LastEnd,
    /// Soonest next run first; none last.
    NextRun,
}

impl JobSort {
    /// Parses `name`, `priority`, `last_end`, `next_run`.
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "name" => JobSort::Name,
            "priority" => JobSort::Priority,
            "last_end" => JobSort::LastEnd,
            "next_run" => JobSort::NextRun,
            _ => return None,
        })
    }
}

/// Which jobs, in which order, which page.
#[derive(Debug, Clone, Default)]
pub struct JobQuery {
    /// Only jobs in this group.
    pub group: Option<String>,
    /// Only jobs on this processor.
    pub processor: Option<String>,
    /// Only enabled (`true`) or disabled jobs.
    pub enabled: Option<bool>,
    /// Only jobs in this activation state on the caller's node (`active`, `standby`,
    /// `paused`, `new`).
    pub activation: Option<String>,
    /// Only jobs of this type.
    pub job_type: Option<String>,
    /// Only jobs whose name or description contains this (ASCII case ignored).
    pub search: Option<String>,
    /// The order.
    pub sort: JobSort,
    /// The order reversed (a table's second click on a column).
    pub reversed: bool,
    /// Jobs to skip.
    pub offset: usize,
    /// At most this many (1–[`MAX_PAGE`]).
    pub limit: usize,
}

/// One page of jobs.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct JobPage {
    /// The jobs of this page.
    pub items: Vec<JobView>,
    /// Jobs matching the filters, over all pages.
    pub total: usize,
    /// As asked.
    pub offset: usize,
    /// As asked.
    pub limit: usize,
}

impl Ops {
    /// A page of the jobs matching `q`.
    pub fn job_page(&self, q: &JobQuery) -> Result<JobPage, OpError> {
        if !(1..=MAX_PAGE).contains(&q.limit) {
            return Err(OpError::invalid(
                "limit",
                format!("must be 1–{MAX_PAGE}, got {}", q.limit),
            ));
        }
        if let Some(a) = &q.activation
            && !["active", "standby", "paused", "new"].contains(&a.as_str())
        {
            return Err(OpError::invalid(
                "activation",
                format!("expected one of active, standby, paused, new, got `{a}`"),
            ));
        }
        if let Some(t) = &q.job_type
            && crate::model::JobType::parse(t).is_none()
        {
            return Err(OpError::invalid(
                "type",
                format!(
                    "expected one of {}, got `{t}`",
                    crate::model::JobType::expected()
                ),
            ));
        }
        let order = match q.sort {
            JobSort::Name => JobOrder::Name,
            JobSort::Priority => JobOrder::Priority,
            JobSort::LastEnd => JobOrder::LastEnd,
            JobSort::NextRun => JobOrder::NextRun,
        };
        let filter = JobFilter {
            node: self.caller.node.clone(),
            group: q.group.clone(),
            processor: q.processor.clone(),
            enabled: q.enabled,
            activation: q.activation.clone(),
            job_type: q.job_type.clone(),
            search: q.search.clone(),
            order,
            reversed: q.reversed,
            offset: i64::try_from(q.offset).unwrap_or(i64::MAX),
            limit: q.limit as i64,
        };
        let rows = self
            .catalog
            .job_rows(&filter)
            .map_err(self.within("listing jobs"))?;
        let items = rows
            .jobs
            .into_iter()
            .map(|(record, activation)| self.job_view_of(&record, activation))
            .collect::<Result<_, _>>()?;
        let total = rows.total as usize;
        Ok(JobPage {
            items,
            total,
            offset: q.offset,
            limit: q.limit,
        })
    }
}
