//! TEMPORARY stub of the schedule core, replaced by helper's module.
#![allow(missing_docs)]
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScheduleSpec {
    pub run_always: bool,
    pub run_delay: i64,
    pub run_every: Option<i64>,
    pub run_on_the: Option<i64>,
    pub run_at: Option<String>,
    pub run_date: Option<String>,
    pub cron: Option<String>,
    pub timezone: Option<String>,
}
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub field: &'static str,
    pub reason: String,
}
impl ScheduleSpec {
    pub fn validate(&self) -> Vec<FieldError> {
        let mut v = Vec::new();
        if let Some(m) = self.run_on_the {
            if !(0..=59).contains(&m) {
                v.push(FieldError {
                    field: "run_on_the",
                    reason: format!("must be a minute 0–59, got {m}"),
                });
            }
        }
        v
    }
}
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MisfirePolicy {
    #[default]
    Once,
    Skip,
    All,
}
impl MisfirePolicy {
    pub const ALL: [MisfirePolicy; 3] = [Self::Once, Self::Skip, Self::All];
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Once => "once",
            Self::Skip => "skip",
            Self::All => "all",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == s)
    }
}
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OverlapPolicy {
    #[default]
    Forbid,
    Queue,
    Allow,
}
impl OverlapPolicy {
    pub const ALL: [OverlapPolicy; 3] = [Self::Forbid, Self::Queue, Self::Allow];
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Forbid => "forbid",
            Self::Queue => "queue",
            Self::Allow => "allow",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == s)
    }
}
