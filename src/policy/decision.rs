//! What the policy speaks in: the catalog's view of jobs and processors it decides from
//! ([`JobView`], [`ProcessorView`]) and the [`Decision`]s it answers with — an [`Action`], a
//! reason sentence, the [`Evidence`] behind it and its [`Cause`].
//!
//! Invariant: plain data; reads no clock, does no IO, imports neither actix nor rusqlite. Each
//! closed vocabulary has `as_str` names that the catalog's `CHECK` lists mirror (tested there).

use crate::policy::Evidence;

/// An operator's override of a job's activation on this node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pin {
    /// Active regardless of health; never shed nor stretched.
    Active,
    /// Inactive regardless of health; never activated.
    Inactive,
}

impl Pin {
    /// Every pin.
    pub const ALL: [Pin; 2] = [Pin::Active, Pin::Inactive];

    /// `active` or `inactive`.
    pub fn as_str(self) -> &'static str {
        match self {
            Pin::Active => "active",
            Pin::Inactive => "inactive",
        }
    }

    /// The pin named by [`Pin::as_str`].
    pub fn parse(s: &str) -> Option<Pin> {
        Pin::ALL.into_iter().find(|p| p.as_str() == s)
    }
}

/// The catalog's view of one job, on this node.
#[derive(Debug, Clone, PartialEq)]
pub struct JobView {
    /// The job's id.
    pub job_id: i64,
    /// The job's name, for reasons.
    pub name: String,
    /// Larger is more important; ties go to the smaller (older) `job_id`.
    pub priority: i64,
    /// Part of the minimum: active from start-up, never shed.
    pub required: bool,
    /// The operator's override, if any.
    pub pin: Option<Pin>,
    /// Whether the job is active on this node now (a job held by paused writes counts as
    /// active: the disk rule, not health, stopped it).
    pub active: bool,
    /// Whether it is held because writes are paused (its activation state is `paused`).
    pub held: bool,
    /// Whether it writes at least one data object (stretched and shed first while the disk
    /// is strained; held while writes are paused, as is every job outside maintenance).
    pub writes_data: bool,
    /// Whether its group is marked maintenance (pruning, vacuum, backup): it keeps running
    /// while the disk is strained or critical, because it is what frees the disk.
    pub maintenance: bool,
    /// The factor its period is stretched by on this node now (1: as scheduled).
    pub stretch: u32,
    /// The largest factor its period may be stretched by (1: never; only recurring jobs).
    pub stretch_max: u32,
    /// The memory a run of it declares it may use, bytes: it is activated only while that
    /// fits in what is available above the strained threshold.
    pub memory_limit: Option<u64>,
}

/// The runtime's view of one processor.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessorView {
    /// The processor's id.
    pub processor_id: i64,
    /// Its name, for reasons.
    pub name: String,
    /// Instances running now.
    pub instances: u32,
    /// The fewest instances it may have.
    pub min_instances: u32,
    /// The most instances it may have.
    pub max_instances: u32,
    /// Fraction of the last sample period its instances were busy, 0–1.
    pub utilization: f64,
}

/// What a decision does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Make the job active on this node.
    Activate {
        /// The job.
        job_id: i64,
    },
    /// Make the job standby on this node.
    Deactivate {
        /// The job.
        job_id: i64,
    },
    /// Stretch the job's period: it runs `factor` times less often than scheduled.
    Stretch {
        /// The job.
        job_id: i64,
        /// The new factor (2 or more).
        factor: u32,
    },
    /// Bring the job's period back toward its schedule.
    Unstretch {
        /// The job.
        job_id: i64,
        /// The new factor (1: as scheduled).
        factor: u32,
    },
    /// Nothing is shed although the strain calls for it: the job that is next in line has
    /// spent its flap budget, and no job more important than it is shed in its place.
    Hold {
        /// The job that is next in line.
        job_id: i64,
    },
    /// Start one more instance of the processor.
    AddInstance {
        /// The processor.
        processor_id: i64,
    },
    /// Stop one instance of the processor.
    RemoveInstance {
        /// The processor.
        processor_id: i64,
    },
    /// Disk critical or full: hold every active job outside maintenance groups
    /// ([`Decision::jobs`]) — the runtime claims only maintenance runs meanwhile, so those
    /// jobs are stopped whether they write data objects or only their runs' history;
    /// maintenance groups keep running.
    PauseWrites,
    /// The disk is back above critical: the held jobs ([`Decision::jobs`]) run again.
    ResumeWrites,
}

impl Action {
    /// Every action's name, as the decision log's `CHECK` list has them.
    pub const NAMES: [&'static str; 9] = [
        "activate",
        "deactivate",
        "stretch",
        "unstretch",
        "hold",
        "add_instance",
        "remove_instance",
        "pause_writes",
        "resume_writes",
    ];

    /// `activate`, `deactivate`, `stretch`, `unstretch`, `hold`, `add_instance`,
    /// `remove_instance`, `pause_writes` or `resume_writes`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Action::Activate { .. } => "activate",
            Action::Deactivate { .. } => "deactivate",
            Action::Stretch { .. } => "stretch",
            Action::Unstretch { .. } => "unstretch",
            Action::Hold { .. } => "hold",
            Action::AddInstance { .. } => "add_instance",
            Action::RemoveInstance { .. } => "remove_instance",
            Action::PauseWrites => "pause_writes",
            Action::ResumeWrites => "resume_writes",
        }
    }

    /// The job it concerns, if any.
    pub fn job_id(&self) -> Option<i64> {
        match *self {
            Action::Activate { job_id }
            | Action::Deactivate { job_id }
            | Action::Stretch { job_id, .. }
            | Action::Unstretch { job_id, .. }
            | Action::Hold { job_id } => Some(job_id),
            _ => None,
        }
    }

    /// Whether it switches a job on or off (what the flap budget counts).
    pub fn is_toggle(&self) -> bool {
        matches!(self, Action::Activate { .. } | Action::Deactivate { .. })
    }

    /// The processor it concerns, if any.
    pub fn processor_id(&self) -> Option<i64> {
        match *self {
            Action::AddInstance { processor_id } | Action::RemoveInstance { processor_id } => {
                Some(processor_id)
            }
            _ => None,
        }
    }
}

/// Why a decision was taken, by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// The node's health (including processor utilization).
    Health,
    /// The operator pinned the job; health and anti-flap were not consulted.
    Pin,
    /// The job is part of the minimum (required or at/above the priority floor), at start-up
    /// or found inactive later.
    Minimum,
    /// An operator's command (the CLI or API), not the policy.
    Operator,
}

impl Cause {
    /// Every cause, in declaration order.
    pub const ALL: [Cause; 4] = [Cause::Health, Cause::Pin, Cause::Minimum, Cause::Operator];

    /// `health`, `pin`, `minimum` or `operator`.
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::Health => "health",
            Cause::Pin => "pin",
            Cause::Minimum => "minimum",
            Cause::Operator => "operator",
        }
    }

    /// The cause named by [`Cause::as_str`].
    pub fn parse(s: &str) -> Option<Cause> {
        Cause::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

/// One decision, with a reason an operator understands and the sample values behind it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Decision {
    /// When it was taken (the `now` of the poll), epoch ms.
    pub at: i64,
    /// What to do.
    pub action: Action,
    /// Why, in one sentence that states the rule, the reading, the threshold and how long:
    /// "cpu 96.2% > 90% (strained) for 2 samples in a row (5.0 s): shed lowest-priority job
    /// `report` (priority 5)".
    pub reason: String,
    /// The latest sample's values behind it, rounded, with units and thresholds; empty for
    /// pins and the minimum, which do not depend on health.
    pub evidence: Vec<Evidence>,
    /// What kind of rule decided it.
    pub cause: Cause,
    /// The jobs a node-wide decision concerns: the jobs [`Action::PauseWrites`] holds and
    /// [`Action::ResumeWrites`] lets go, most important first; empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jobs: Vec<i64>,
}
