//! The raw schedule fields of a catalog job ([`ScheduleSpec`]), their validation into
//! [`FieldError`]s, and the two per-job policy enums ([`MisfirePolicy`], [`OverlapPolicy`]).
//!
//! Invariant: reads no clock and does no IO; it imports neither the actor runtime nor the
//! database driver. Validation that needs an instant (does this cron fire within five years?)
//! uses the fixed [`VALIDATION_REFERENCE_MS`], so the same spec validates the same way forever.

use std::fmt;

use chrono::{NaiveTime, Weekday};
use chrono_tz::Tz;

/// The raw schedule fields of a catalog job, as stored (millix names and units).
///
/// Blank strings count as unset, because catalogs imported from millix store `""` for an
/// unused text column.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScheduleSpec {
    /// Run again `run_delay` ms after the previous run ends, as long as the node is healthy.
    pub run_always: bool,
    /// Milliseconds, measured from the previous run's end; only meaningful with `run_always`.
    pub run_delay: i64,
    /// Minutes between slots, fixed rate.
    pub run_every: Option<i64>,
    /// Minute of the hour, 0–59.
    pub run_on_the: Option<i64>,
    /// `"HH:MM"` or `"HH:MM:SS"`, local time of day.
    pub run_at: Option<String>,
    /// `"1"`..`"31"`, or one of the millix tokens `#monday#` … `#sunday#`,
    /// `#last_day_of_month#`, `#first_day_of_year#`, `#last_day_of_year#`.
    pub run_date: Option<String>,
    /// A cron expression of 5 or 6 fields (seconds optional), or an `@daily`-style nickname.
    pub cron: Option<String>,
    /// IANA zone name; `None` means the default zone the caller passes to `Schedule::parse`.
    pub timezone: Option<String>,
}

/// One problem with one schedule field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The catalog column at fault, e.g. `"run_on_the"`.
    pub field: &'static str,
    /// What is wrong, quoting the value, e.g. `"must be a minute 0–59, got 60"`.
    pub reason: String,
}

impl FieldError {
    fn new(field: &'static str, reason: impl Into<String>) -> Self {
        FieldError {
            field,
            reason: reason.into(),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.reason)
    }
}

impl std::error::Error for FieldError {}

/// The instant validation measures from (2026-01-01T00:00:00Z, in epoch ms): a cron must fire
/// at least once within [`CRON_HORIZON_YEARS`] of it. Fixed, so validation reads no clock.
pub const VALIDATION_REFERENCE_MS: i64 = 1_767_225_600_000;

/// How far past [`VALIDATION_REFERENCE_MS`] a cron expression must fire at least once.
pub const CRON_HORIZON_YEARS: i64 = 5;

/// The largest accepted `run_every`: five years of minutes, so `run_every` can never
/// overflow when turned into milliseconds and always fires within the cron horizon too.
pub const MAX_RUN_EVERY_MINUTES: i64 = 5 * 366 * 24 * 60;

/// What to do with slots that passed without firing (node down, throttled, clock jump).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum MisfirePolicy {
    /// One catch-up run stands for any number of missed slots.
    #[default]
    Once,
    /// Missed slots are recorded as skipped; only an on-time slot runs.
    Skip,
    /// Every missed slot runs, the most recent `max_catchup` of them.
    All,
}

impl MisfirePolicy {
    /// Every variant, in declaration order (mirrored by the catalog's SQL `CHECK` list).
    pub const ALL: [MisfirePolicy; 3] =
        [MisfirePolicy::Once, MisfirePolicy::Skip, MisfirePolicy::All];

    /// The catalog spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            MisfirePolicy::Once => "once",
            MisfirePolicy::Skip => "skip",
            MisfirePolicy::All => "all",
        }
    }

    /// Parses the catalog spelling (exact, lower case); `None` for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.as_str() == s)
    }
}

impl fmt::Display for MisfirePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What to do with a slot that comes due while runs of the same job are in flight.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum OverlapPolicy {
    /// The slot is recorded as a `skipped` run, with the reason.
    #[default]
    Forbid,
    /// The slot is queued behind the run in flight (up to a cap).
    Queue,
    /// The slot runs alongside the runs in flight (up to a cap).
    Allow,
}

impl OverlapPolicy {
    /// Every variant, in declaration order (mirrored by the catalog's SQL `CHECK` list).
    pub const ALL: [OverlapPolicy; 3] = [
        OverlapPolicy::Forbid,
        OverlapPolicy::Queue,
        OverlapPolicy::Allow,
    ];

    /// The catalog spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            OverlapPolicy::Forbid => "forbid",
            OverlapPolicy::Queue => "queue",
            OverlapPolicy::Allow => "allow",
        }
    }

    /// Parses the catalog spelling (exact, lower case); `None` for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.as_str() == s)
    }
}

impl fmt::Display for OverlapPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A parsed `run_date`: which local dates a schedule may fire on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunDate {
    /// This day of the month, 1–31 (a month without that day has no slot).
    DayOfMonth(u32),
    /// Every such weekday (`#monday#` …).
    Weekday(Weekday),
    /// `#last_day_of_month#`.
    LastDayOfMonth,
    /// `#first_day_of_year#`: January 1.
    FirstDayOfYear,
    /// `#last_day_of_year#`: December 31.
    LastDayOfYear,
}

const WEEKDAY_TOKENS: [(&str, Weekday); 7] = [
    ("#monday#", Weekday::Mon),
    ("#tuesday#", Weekday::Tue),
    ("#wednesday#", Weekday::Wed),
    ("#thursday#", Weekday::Thu),
    ("#friday#", Weekday::Fri),
    ("#saturday#", Weekday::Sat),
    ("#sunday#", Weekday::Sun),
];

impl RunDate {
    /// Parses a `run_date` value: `"1"`..`"31"` or a millix token (case-insensitive).
    pub fn parse(raw: &str) -> Result<RunDate, String> {
        let s = raw.trim().to_ascii_lowercase();
        if let Some(&(_, wd)) = WEEKDAY_TOKENS.iter().find(|(t, _)| *t == s) {
            return Ok(RunDate::Weekday(wd));
        }
        match s.as_str() {
            "#last_day_of_month#" => return Ok(RunDate::LastDayOfMonth),
            "#first_day_of_year#" => return Ok(RunDate::FirstDayOfYear),
            "#last_day_of_year#" => return Ok(RunDate::LastDayOfYear),
            _ => {}
        }
        match s.parse::<u32>() {
            Ok(d) if (1..=31).contains(&d) => Ok(RunDate::DayOfMonth(d)),
            _ => Err(format!(
                "must be a day of the month 1–31 or one of #monday# … #sunday#, \
                 #last_day_of_month#, #first_day_of_year#, #last_day_of_year#, got {raw:?}"
            )),
        }
    }
}

/// Parses `run_at`: `H:MM`, `HH:MM` or `HH:MM:SS`, 00:00:00–23:59:59.
pub(crate) fn parse_run_at(raw: &str) -> Result<NaiveTime, String> {
    let err = || {
        format!("must be a time of day HH:MM or HH:MM:SS between 00:00 and 23:59:59, got {raw:?}")
    };
    let parts: Vec<&str> = raw.trim().split(':').collect();
    if !(2..=3).contains(&parts.len()) {
        return Err(err());
    }
    let num = |p: &str, max_len: usize| -> Option<u32> {
        if p.is_empty() || p.len() > max_len || !p.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        p.parse().ok()
    };
    let h = num(parts[0], 2).ok_or_else(err)?;
    // Minutes and seconds must be two digits: "3:5" is more likely a typo than 03:05.
    let m = if parts[1].len() == 2 {
        num(parts[1], 2)
    } else {
        None
    }
    .ok_or_else(err)?;
    let s = match parts.get(2) {
        Some(p) if p.len() == 2 => num(p, 2).ok_or_else(err)?,
        Some(_) => return Err(err()),
        None => 0,
    };
    NaiveTime::from_hms_opt(h, m, s).ok_or_else(err)
}

/// Parses `timezone` as an IANA name.
pub(crate) fn parse_tz(raw: &str) -> Result<Tz, String> {
    raw.trim()
        .parse::<Tz>()
        .map_err(|_| format!("must be an IANA time zone name such as Europe/Paris, got {raw:?}"))
}

/// `Some(trimmed)` for a set, non-blank text field.
pub(crate) fn text(field: &Option<String>) -> Option<&str> {
    field.as_deref().map(str::trim).filter(|s| !s.is_empty())
}

impl ScheduleSpec {
    /// Every problem, each naming its field, e.g. `run_on_the = 60` gives
    /// `{field: "run_on_the", reason: "must be a minute 0–59, got 60"}`. Empty when valid.
    ///
    /// A cron expression is checked in the spec's own zone, else UTC; `Schedule::parse`
    /// re-checks it in the caller's default zone.
    pub fn validate(&self) -> Vec<FieldError> {
        self.validate_in(chrono_tz::UTC)
    }

    /// [`validate`](Self::validate) with the zone to assume when `timezone` is unset.
    pub(crate) fn validate_in(&self, default_tz: Tz) -> Vec<FieldError> {
        let mut errors = Vec::new();
        let tz = match text(&self.timezone) {
            None => default_tz,
            Some(raw) => parse_tz(raw).unwrap_or_else(|reason| {
                errors.push(FieldError::new("timezone", reason));
                default_tz
            }),
        };

        if self.run_delay < 0 {
            errors.push(FieldError::new(
                "run_delay",
                format!("must be 0 ms or more, got {}", self.run_delay),
            ));
        } else if self.run_delay > 0 && !self.run_always {
            errors.push(FieldError::new(
                "run_delay",
                format!(
                    "only applies to run_always jobs (the pause after each run ends), got {} with run_always off",
                    self.run_delay
                ),
            ));
        }
        if let Some(n) = self.run_every
            && !(1..=MAX_RUN_EVERY_MINUTES).contains(&n)
        {
            errors.push(FieldError::new(
                "run_every",
                format!("must be a number of minutes from 1 to {MAX_RUN_EVERY_MINUTES}, got {n}"),
            ));
        }
        if let Some(m) = self.run_on_the
            && !(0..=59).contains(&m)
        {
            errors.push(FieldError::new(
                "run_on_the",
                format!("must be a minute 0–59, got {m}"),
            ));
        }
        if let Some(raw) = text(&self.run_at)
            && let Err(reason) = parse_run_at(raw)
        {
            errors.push(FieldError::new("run_at", reason));
        }
        if let Some(raw) = text(&self.run_date)
            && let Err(reason) = RunDate::parse(raw)
        {
            errors.push(FieldError::new("run_date", reason));
        }
        if let Some(raw) = text(&self.cron)
            && let Err(reason) = crate::schedule::calendar::check_cron(raw, tz)
        {
            errors.push(FieldError::new("cron", reason));
        }

        // Combinations. Each error is reported on the field that joins a schedule already
        // given by a field earlier in this order, so the operator sees which one to drop.
        let set: Vec<&'static str> = [
            ("run_every", self.run_every.is_some()),
            ("run_on_the", self.run_on_the.is_some()),
            ("run_at", text(&self.run_at).is_some()),
            ("run_date", text(&self.run_date).is_some()),
            ("cron", text(&self.cron).is_some()),
        ]
        .into_iter()
        .filter_map(|(name, on)| on.then_some(name))
        .collect();
        if self.run_always {
            if let Some(first) = set.first() {
                errors.push(FieldError::new(
                    "run_always",
                    format!(
                        "cannot be combined with {first}: run_always runs again run_delay ms after each run ends, \
                         a calendar field fixes the times; set one or the other"
                    ),
                ));
            }
        } else {
            let times: Vec<&str> = set
                .iter()
                .copied()
                .filter(|f| matches!(*f, "run_every" | "run_on_the" | "run_at"))
                .collect();
            for extra in times.iter().skip(1) {
                errors.push(FieldError::new(
                    extra,
                    format!(
                        "conflicts with {}: run_every, run_on_the and run_at are alternatives; set only one (run_date may gate any of them)",
                        times[0]
                    ),
                ));
            }
            if set.contains(&"cron") && set.len() > 1 {
                errors.push(FieldError::new(
                    "cron",
                    format!(
                        "cannot be combined with {}: a cron expression is a whole schedule; use either cron or the millix fields",
                        set[0]
                    ),
                ));
            }
        }
        errors
    }

    /// True when no field asks for a schedule: the job runs only when triggered.
    pub fn is_on_demand(&self) -> bool {
        !self.run_always
            && self.run_every.is_none()
            && self.run_on_the.is_none()
            && text(&self.run_at).is_none()
            && text(&self.run_date).is_none()
            && text(&self.cron).is_none()
    }
}
