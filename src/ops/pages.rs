//! Listing jobs a page at a time: filters (group, processor, enabled, activation, type), a sort
//! key, and bounded pages — what the API offers beyond the CLI's whole list.

use serde::Serialize;
use utoipa::ToSchema;

use super::jobs::JobView;
use super::{OpError, Ops};

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
    /// Only jobs in this activation state on the caller's node (`active`, `standby`, `new`).
    pub activation: Option<String>,
    /// Only jobs of this type.
    pub job_type: Option<String>,
    /// The order.
    pub sort: JobSort,
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
            && !["active", "standby", "new"].contains(&a.as_str())
        {
            return Err(OpError::invalid(
                "activation",
                format!("expected one of active, standby, new, got `{a}`"),
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
        let mut jobs: Vec<JobView> = self
            .jobs()?
            .into_iter()
            .filter(|j| q.group.as_ref().is_none_or(|g| j.group.as_ref() == Some(g)))
            .filter(|j| q.processor.as_ref().is_none_or(|p| &j.processor == p))
            .filter(|j| q.enabled.is_none_or(|e| j.enabled == e))
            .filter(|j| {
                q.activation
                    .as_ref()
                    .is_none_or(|a| &j.activation.state == a)
            })
            .filter(|j| q.job_type.as_ref().is_none_or(|t| j.job_type == t))
            .collect();
        match q.sort {
            JobSort::Name => {}
            JobSort::Priority => jobs.sort_by_key(|j| std::cmp::Reverse(j.priority)),
            JobSort::LastEnd => jobs.sort_by_key(|j| std::cmp::Reverse(j.last_end)),
            JobSort::NextRun => jobs.sort_by_key(|j| (j.next_run_at.is_none(), j.next_run_at)),
        }
        let total = jobs.len();
        let items = jobs.into_iter().skip(q.offset).take(q.limit).collect();
        Ok(JobPage {
            items,
            total,
            offset: q.offset,
            limit: q.limit,
        })
    }
}
