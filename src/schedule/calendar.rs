//! [`Schedule`]: a validated, compiled [`ScheduleSpec`] that answers "which calendar slot
//! comes next (or came last)" for any instant, in the job's time zone.
//!
//! Invariant: reads no clock and does no IO; it imports neither the actor runtime nor the
//! database driver. Every answer is a function of the schedule and the instant passed in.
//!
//! DST, one rule for every field: a local time that does not exist (the spring-forward gap)
//! fires at the first instant after the gap; a local time that occurs twice (fall back) fires
//! once, at its first occurrence. `run_at`, `run_on_the` and `run_date` follow it here;
//! cron follows croner, which applies the same rule to fixed-time patterns (seconds, minute
//! and hour each a single value) and runs interval patterns (`*/5 * * * *`) on elapsed
//! time: they skip the wall-clock times of a gap and fire in both passes of a repeated hour.
//! `run_every` is a fixed rate in absolute time, so DST changes neither its rate nor its
//! spacing.

use chrono::{
    DateTime, Datelike as _, Duration, LocalResult, NaiveDate, NaiveDateTime, NaiveTime,
    Offset as _, TimeZone as _, Timelike as _,
};
use std::collections::HashMap;
use std::sync::Arc;

use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};

use crate::schedule::cron_fast::CompiledCron;
use crate::schedule::spec::{
    CRON_HORIZON_YEARS, FieldError, RunDate, ScheduleSpec, VALIDATION_REFERENCE_MS, parse_run_at,
    parse_tz, text,
};

const MINUTE_MS: i64 = 60_000;
const HOUR_MS: i64 = 60 * MINUTE_MS;
const DAY_MS: i64 = 24 * HOUR_MS;

/// A compiled, validated schedule. Build it with [`Schedule::parse`].
#[derive(Debug, Clone)]
pub struct Schedule {
    // Shared, with the compiled cron below, so that cloning a schedule (one per planner)
    // copies no strings or cron tables.
    spec: Arc<ScheduleSpec>,
    tz: Tz,
    kind: Kind,
}

/// What a schedule does, once the spec's fields are combined.
#[derive(Debug, Clone)]
pub(crate) enum Kind {
    /// No schedule field: runs only when triggered.
    OnDemand,
    /// `run_always`: again `delay_ms` after each run ends.
    Always { delay_ms: i64 },
    /// `run_every`: instants `t` with `(t + offset_ms) % period_ms == 0`, on gated local dates.
    Every {
        period_ms: i64,
        offset_ms: i64,
        gate: Option<RunDate>,
    },
    /// `run_on_the`: minute `minute` of every local hour, on gated dates.
    Hourly { minute: u32, gate: Option<RunDate> },
    /// `run_at` (or `run_date` alone, at 00:00): once a day at a local time, on gated dates.
    Daily {
        time: NaiveTime,
        gate: Option<RunDate>,
    },
    /// `cron`, evaluated in the schedule's zone: by bit scans where that gives croner's
    /// answer (see [`CompiledCron`]), by croner itself elsewhere.
    Cron(Arc<CompiledCron>),
}

fn cron_parser() -> CronParser {
    // Year disallowed: the catalog's contract is 5 or 6 fields; a 7-field pattern is
    // more likely a Quartz expression pasted in than a wish for a year filter.
    CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Disallowed)
        .build()
}

/// Parses a cron expression and checks that it fires within [`CRON_HORIZON_YEARS`] of
/// [`VALIDATION_REFERENCE_MS`] in `tz`.
pub(crate) fn check_cron(raw: &str, tz: Tz) -> Result<Cron, String> {
    let fields = raw.split_whitespace().count();
    if !raw.trim_start().starts_with('@') && !(5..=6).contains(&fields) {
        return Err(format!(
            "must have 5 fields (minute hour day-of-month month day-of-week) or 6 (seconds first), got {fields} in {raw:?}"
        ));
    }
    if let Some(problem) = out_of_range(raw) {
        return Err(format!("{problem} in {raw:?}"));
    }
    let cron = cron_parser().parse(raw).map_err(|e| {
        // croner's words ("Component error: Invalid number.") without its category.
        let e = e.to_string();
        let e = e
            .trim_start_matches("Component error: ")
            .trim_end_matches('.');
        format!("is not a valid cron expression ({e}): {raw:?}")
    })?;
    let start = tz.timestamp_millis_opt(VALIDATION_REFERENCE_MS).unwrap();
    let horizon = VALIDATION_REFERENCE_MS + CRON_HORIZON_YEARS * 366 * DAY_MS;
    match cron.find_next_occurrence(&start, false) {
        Ok(t) if t.timestamp_millis() <= horizon => Ok(cron),
        _ => Err(format!(
            "never fires within {CRON_HORIZON_YEARS} years of 2026-01-01 (a date that does not exist?): {raw:?}"
        )),
    }
}

/// The first number of a 5- or 6-field cron expression outside its field's range, in words
/// naming the field ("day-of-month 32 is out of range 1–31"), or a step of 0: croner says only
/// "Number out of bounds", naming neither the field nor the value.
fn out_of_range(raw: &str) -> Option<String> {
    const FIVE: [(&str, u32, u32); 5] = [
        ("minute", 0, 59),
        ("hour", 0, 23),
        ("day-of-month", 1, 31),
        ("month", 1, 12),
        ("day-of-week", 0, 7),
    ];
    let fields: Vec<&str> = raw.split_whitespace().collect();
    let ranges: Vec<(&str, u32, u32)> = match fields.len() {
        5 => FIVE.to_vec(),
        6 => std::iter::once(("second", 0, 59)).chain(FIVE).collect(),
        _ => return None,
    };
    for (field, (name, min, max)) in fields.iter().zip(ranges) {
        for item in field.split(',') {
            let (base, step) = match item.split_once('/') {
                Some((base, step)) => (base, Some(step)),
                None => (item, None),
            };
            if step.and_then(|s| s.parse::<u32>().ok()) == Some(0) {
                return Some(format!("{name} step 0 in `{item}` never advances"));
            }
            for bound in base.split('-') {
                // `5#2` and `5L` (day-of-week): the number before the suffix; names and
                // `*`, `?`, `L`, `W` have none to check here.
                let digits: String = bound.chars().take_while(char::is_ascii_digit).collect();
                let Ok(n) = digits.parse::<u32>() else {
                    continue;
                };
                if n < min || n > max {
                    return Some(format!("{name} {n} is out of range {min}–{max}"));
                }
            }
        }
    }
    None
}

/// Compiled cron expressions shared by the schedules that use the same one (a scheduler keeps
/// one across its reloads). croner's parse of any expression holds a year table of 5,001
/// bytes: 1,000 jobs kept 5 MB of them, one copy per job, when most nodes' jobs use a few
/// expressions. A compiled expression does not depend on the zone, so it is keyed by its text.
#[derive(Default)]
pub struct CronCache {
    compiled: HashMap<String, Arc<CompiledCron>>,
}

impl CronCache {
    /// The compiled `raw`, shared when a schedule already uses it.
    fn share(&mut self, raw: &str, cron: Cron) -> Arc<CompiledCron> {
        self.compiled
            .entry(raw.trim().to_string())
            .or_insert_with(|| Arc::new(CompiledCron::new(cron)))
            .clone()
    }

    /// Forgets the expressions no schedule uses any more.
    pub fn retain_used(&mut self) {
        self.compiled.retain(|_, c| Arc::strong_count(c) > 1);
    }

    /// How many distinct expressions it holds.
    pub fn len(&self) -> usize {
        self.compiled.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.compiled.is_empty()
    }
}

impl Schedule {
    /// Validates `spec` and compiles it; `default_tz` is the zone used when the spec names
    /// none (the node config's zone, else the system's — the caller decides).
    pub fn parse(spec: &ScheduleSpec, default_tz: Tz) -> Result<Schedule, Vec<FieldError>> {
        Self::parse_shared(spec, default_tz, &mut CronCache::default())
    }

    /// Like [`Schedule::parse`], sharing its compiled cron expression through `crons` with the
    /// other schedules parsed there.
    pub fn parse_shared(
        spec: &ScheduleSpec,
        default_tz: Tz,
        crons: &mut CronCache,
    ) -> Result<Schedule, Vec<FieldError>> {
        let errors = spec.validate_in(default_tz);
        if !errors.is_empty() {
            return Err(errors);
        }
        // Validation passed, so every parse below succeeds; the fallbacks are unreachable.
        let tz = text(&spec.timezone)
            .and_then(|z| parse_tz(z).ok())
            .unwrap_or(default_tz);
        let gate = text(&spec.run_date).and_then(|d| RunDate::parse(d).ok());
        let kind = if spec.run_always {
            Kind::Always {
                delay_ms: spec.run_delay,
            }
        } else if let Some(raw) = text(&spec.cron) {
            let cron = check_cron(raw, tz).map_err(|reason| {
                vec![FieldError {
                    field: "cron",
                    reason,
                }]
            })?;
            Kind::Cron(crons.share(raw, cron))
        } else if let Some(n) = spec.run_every {
            let period_ms = n * MINUTE_MS;
            // Align slots to the zone's offset at a fixed reference, so `run_every = 15`
            // lands on :00/:15/:30/:45 local in Asia/Kolkata (+05:30) as it does in UTC.
            let offset_s = tz
                .offset_from_utc_datetime(
                    &DateTime::from_timestamp_millis(VALIDATION_REFERENCE_MS)
                        .unwrap()
                        .naive_utc(),
                )
                .fix()
                .local_minus_utc() as i64;
            Kind::Every {
                period_ms,
                offset_ms: (offset_s * 1000).rem_euclid(period_ms),
                gate,
            }
        } else if let Some(m) = spec.run_on_the {
            Kind::Hourly {
                minute: m as u32,
                gate,
            }
        } else if let Some(raw) = text(&spec.run_at) {
            Kind::Daily {
                time: parse_run_at(raw).map_err(|reason| {
                    vec![FieldError {
                        field: "run_at",
                        reason,
                    }]
                })?,
                gate,
            }
        } else if gate.is_some() {
            Kind::Daily {
                time: NaiveTime::MIN,
                gate,
            }
        } else {
            Kind::OnDemand
        };
        Ok(Schedule {
            spec: Arc::new(spec.clone()),
            tz,
            kind,
        })
    }

    /// The spec this schedule was compiled from.
    pub fn spec(&self) -> &ScheduleSpec {
        &self.spec
    }

    /// The zone the schedule's local times are read in.
    pub fn tz(&self) -> Tz {
        self.tz
    }

    pub(crate) fn kind(&self) -> &Kind {
        &self.kind
    }

    /// True when the job runs only when triggered (no schedule field).
    pub fn is_on_demand(&self) -> bool {
        matches!(self.kind, Kind::OnDemand)
    }

    /// `Some(delay_ms)` for a `run_always` job.
    pub fn run_always_delay(&self) -> Option<i64> {
        match self.kind {
            Kind::Always { delay_ms } => Some(delay_ms),
            _ => None,
        }
    }

    /// True for schedules with calendar slots (every kind but on-demand and `run_always`).
    pub fn has_slots(&self) -> bool {
        !matches!(self.kind, Kind::OnDemand | Kind::Always { .. })
    }

    /// The next calendar slot strictly after `after_ms` (None for run_always / on demand /
    /// never, e.g. past croner's year 5000 limit).
    pub fn next_slot_after(&self, after_ms: i64) -> Option<i64> {
        match &self.kind {
            Kind::OnDemand | Kind::Always { .. } => None,
            Kind::Every {
                period_ms,
                offset_ms,
                gate,
            } => self.every_next(after_ms, *period_ms, *offset_ms, *gate),
            Kind::Hourly { minute, gate } => self.wall_next(after_ms, Wall::Hourly(*minute), *gate),
            Kind::Daily { time, gate } => self.wall_next(after_ms, Wall::Daily(*time), *gate),
            Kind::Cron(cron) => {
                let t = match cron.fast_next(self.tz, after_ms) {
                    Some(t) => t,
                    None => self.croner_next(&cron.cron, after_ms)?,
                };
                // croner works in whole seconds: step off a fractional start so that
                // "strictly after" holds for the millisecond value too.
                if t > after_ms {
                    Some(t)
                } else {
                    self.next_slot_after(t)
                }
            }
        }
    }

    /// The latest calendar slot at or before `at_ms` (None when there is none, or for
    /// run_always / on demand).
    pub fn prev_slot_at_or_before(&self, at_ms: i64) -> Option<i64> {
        match &self.kind {
            Kind::OnDemand | Kind::Always { .. } => None,
            Kind::Every {
                period_ms,
                offset_ms,
                gate,
            } => self.every_prev(at_ms, *period_ms, *offset_ms, *gate),
            Kind::Hourly { minute, gate } => self.wall_prev(at_ms, Wall::Hourly(*minute), *gate),
            Kind::Daily { time, gate } => self.wall_prev(at_ms, Wall::Daily(*time), *gate),
            Kind::Cron(cron) => {
                // croner's inclusive search looks at whole seconds; flooring keeps a slot
                // at second s visible from any millisecond of that second.
                let floor_ms = at_ms.div_euclid(1000) * 1000;
                let t = match cron.fast_prev(self.tz, floor_ms) {
                    Some(t) => t,
                    None => self.croner_prev(&cron.cron, floor_ms)?,
                };
                (t <= at_ms).then_some(t)
            }
        }
    }

    /// croner's next occurrence strictly after `after_ms` (whole seconds: a fractional
    /// start reads as its second), without the fast path.
    pub(crate) fn croner_next(&self, cron: &Cron, after_ms: i64) -> Option<i64> {
        let start = self.tz.timestamp_millis_opt(after_ms).single()?;
        cron.find_next_occurrence(&start, false)
            .ok()
            .map(|t| t.timestamp_millis())
    }

    /// croner's latest occurrence at or before whole-second `at_ms`, without the fast path.
    pub(crate) fn croner_prev(&self, cron: &Cron, at_ms: i64) -> Option<i64> {
        let start = self.tz.timestamp_millis_opt(at_ms).single()?;
        cron.find_previous_occurrence(&start, true)
            .ok()
            .map(|t| t.timestamp_millis())
    }

    /// The next `count` slots strictly after `after_ms`, for `jobvisor jobs next`.
    pub fn next_slots_after(&self, after_ms: i64, count: usize) -> Vec<i64> {
        let mut out = Vec::with_capacity(count.min(1024));
        let mut t = after_ms;
        while out.len() < count {
            match self.next_slot_after(t) {
                Some(next) => {
                    out.push(next);
                    t = next;
                }
                None => break,
            }
        }
        out
    }

    fn every_next(
        &self,
        after: i64,
        period: i64,
        offset: i64,
        gate: Option<RunDate>,
    ) -> Option<i64> {
        let mut t = (after + offset).div_euclid(period) * period - offset + period;
        let Some(gate) = gate else { return Some(t) };
        // Each pass either returns or jumps to the start of a later gated day; a gated day
        // comes within 366 days (day 31 within two months, Feb 29 is not a gate value).
        for _ in 0..800 {
            let local = self.local_date(t);
            if gate_matches(gate, local) {
                return Some(t);
            }
            let next_day = next_gated_date(gate, local)?;
            let day_start = self.resolve_wall(next_day.and_time(NaiveTime::MIN))?;
            t = (day_start - 1 + offset).div_euclid(period) * period - offset + period;
        }
        None
    }

    fn every_prev(&self, at: i64, period: i64, offset: i64, gate: Option<RunDate>) -> Option<i64> {
        let mut t = (at + offset).div_euclid(period) * period - offset;
        let Some(gate) = gate else { return Some(t) };
        for _ in 0..800 {
            let local = self.local_date(t);
            if gate_matches(gate, local) {
                return Some(t);
            }
            let prev_day = prev_gated_date(gate, local)?;
            let day_end = self.resolve_wall(prev_day.succ_opt()?.and_time(NaiveTime::MIN))? - 1;
            t = (day_end + offset).div_euclid(period) * period - offset;
        }
        None
    }

    fn local_date(&self, t: i64) -> NaiveDate {
        self.local(t).date()
    }

    fn local(&self, t: i64) -> NaiveDateTime {
        let utc = DateTime::from_timestamp_millis(t)
            .unwrap_or_default()
            .naive_utc();
        let off = self.tz.offset_from_utc_datetime(&utc).fix();
        utc + Duration::seconds(off.local_minus_utc() as i64)
    }

    /// The instant a local wall-clock time fires at: itself; the first occurrence when the
    /// time repeats; the first instant after the gap when it does not exist.
    fn resolve_wall(&self, wall: NaiveDateTime) -> Option<i64> {
        match self.tz.from_local_datetime(&wall) {
            LocalResult::Single(t) => Some(t.timestamp_millis()),
            LocalResult::Ambiguous(a, b) => Some(a.timestamp_millis().min(b.timestamp_millis())),
            LocalResult::None => self.after_gap(wall),
        }
    }

    /// The first instant whose local time is past the gap containing `wall`.
    fn after_gap(&self, wall: NaiveDateTime) -> Option<i64> {
        // Walk whole minutes to the first one that exists (gaps are 30 or 60 minutes in
        // practice; the 2011 Samoa day-skip is 1440), then narrow to the second, because the
        // gap's end is the transition instant, which need not be a whole minute after `wall`.
        let start = wall.with_second(0)?;
        let mut hi = start;
        for _ in 0..=(2 * 24 * 60) {
            hi += Duration::minutes(1);
            if !matches!(self.tz.from_local_datetime(&hi), LocalResult::None) {
                break;
            }
        }
        let mut lo = hi - Duration::minutes(1); // does not exist
        while (hi - lo).num_seconds() > 1 {
            let mid = lo + Duration::seconds((hi - lo).num_seconds() / 2);
            if matches!(self.tz.from_local_datetime(&mid), LocalResult::None) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        match self.tz.from_local_datetime(&hi) {
            LocalResult::Single(t) => Some(t.timestamp_millis()),
            LocalResult::Ambiguous(a, _) => Some(a.timestamp_millis()),
            LocalResult::None => None,
        }
    }

    // Wall-clock candidates are visited in increasing local order; their resolved instants
    // never decrease (a gap time maps to the gap's end, a repeated time to its first pass),
    // so the first candidate past `after` is the answer. Starting at the local hour of
    // `after` is safe: any earlier wall time resolves to an instant at or before `after`.
    // So the walk starts one step later: the candidate at or before the local time of
    // `after` would only be looked up to be rejected.
    fn wall_next(&self, after: i64, wall: Wall, gate: Option<RunDate>) -> Option<i64> {
        let local = self.local(after);
        let mut cand = wall.step(wall.at_or_before(local));
        for _ in 0..(400 * 24) {
            let date = cand.date();
            if gate.is_none_or(|g| gate_matches(g, date)) {
                if let Some(t) = self.resolve_wall(cand)
                    && t > after
                {
                    return Some(t);
                }
                cand = wall.step(cand);
            } else {
                let next = next_gated_date(gate?, date)?;
                cand = wall.first_on(next);
            }
        }
        None
    }

    fn wall_prev(&self, at: i64, wall: Wall, gate: Option<RunDate>) -> Option<i64> {
        // Start one wall step past the local time: in the first pass of a repeated hour,
        // the local hour's candidate may resolve later than `at`, and the one after it is
        // later still, so the walk back meets the answer.
        let local = self.local(at);
        let mut cand = wall.step(wall.at_or_before(local));
        for _ in 0..(400 * 24) {
            let date = cand.date();
            if gate.is_none_or(|g| gate_matches(g, date)) {
                if let Some(t) = self.resolve_wall(cand)
                    && t <= at
                {
                    return Some(t);
                }
                cand = wall.step_back(cand);
            } else {
                let prev = prev_gated_date(gate?, date)?;
                cand = wall.last_on(prev);
            }
        }
        None
    }
}

/// A wall-clock pattern: a minute of every hour, or a time of every day.
#[derive(Clone, Copy)]
enum Wall {
    Hourly(u32),
    Daily(NaiveTime),
}

impl Wall {
    /// The latest candidate at or before the local hour (hourly) or day (daily) of `local`.
    fn at_or_before(self, local: NaiveDateTime) -> NaiveDateTime {
        match self {
            Wall::Hourly(m) => {
                let c = local.date().and_hms_opt(local.hour(), m, 0).unwrap();
                if c <= local {
                    c
                } else {
                    c - Duration::hours(1)
                }
            }
            Wall::Daily(t) => {
                let c = local.date().and_time(t);
                if c <= local { c } else { c - Duration::days(1) }
            }
        }
    }
    fn step(self, c: NaiveDateTime) -> NaiveDateTime {
        match self {
            Wall::Hourly(_) => c + Duration::hours(1),
            Wall::Daily(_) => c + Duration::days(1),
        }
    }
    fn step_back(self, c: NaiveDateTime) -> NaiveDateTime {
        match self {
            Wall::Hourly(_) => c - Duration::hours(1),
            Wall::Daily(_) => c - Duration::days(1),
        }
    }
    fn first_on(self, d: NaiveDate) -> NaiveDateTime {
        match self {
            Wall::Hourly(m) => d.and_hms_opt(0, m, 0).unwrap(),
            Wall::Daily(t) => d.and_time(t),
        }
    }
    fn last_on(self, d: NaiveDate) -> NaiveDateTime {
        match self {
            Wall::Hourly(m) => d.and_hms_opt(23, m, 0).unwrap(),
            Wall::Daily(t) => d.and_time(t),
        }
    }
}

fn last_day_of_month(d: NaiveDate) -> bool {
    d.succ_opt().is_none_or(|n| n.month() != d.month())
}

/// Whether a local date passes the `run_date` gate.
pub(crate) fn gate_matches(gate: RunDate, d: NaiveDate) -> bool {
    match gate {
        RunDate::DayOfMonth(n) => d.day() == n,
        RunDate::Weekday(w) => d.weekday() == w,
        RunDate::LastDayOfMonth => last_day_of_month(d),
        RunDate::FirstDayOfYear => d.ordinal() == 1,
        RunDate::LastDayOfYear => d.month() == 12 && d.day() == 31,
    }
}

fn next_gated_date(gate: RunDate, mut d: NaiveDate) -> Option<NaiveDate> {
    for _ in 0..800 {
        d = d.succ_opt()?;
        if gate_matches(gate, d) {
            return Some(d);
        }
    }
    None
}

fn prev_gated_date(gate: RunDate, mut d: NaiveDate) -> Option<NaiveDate> {
    for _ in 0..800 {
        d = d.pred_opt()?;
        if gate_matches(gate, d) {
            return Some(d);
        }
    }
    None
}

/// Parses the epoch-ms instant of a zone-local `YYYY-MM-DD HH:MM[:SS]` string; for tests,
/// examples and the CLI (`None` when the text or the local time is invalid or ambiguous).
pub fn local_ms(tz: Tz, local: &str) -> Option<i64> {
    let naive = NaiveDateTime::parse_from_str(local, "%Y-%m-%d %H:%M:%S")
        .or_else(|_| NaiveDateTime::parse_from_str(local, "%Y-%m-%d %H:%M"))
        .ok()?;
    tz.from_local_datetime(&naive)
        .single()
        .map(|t| t.timestamp_millis())
}

/// Formats an epoch-ms instant as RFC 3339 in UTC with milliseconds
/// (`2026-12-01T05:13:51.123Z`), the spelling of instants in JSON and stored texts.
pub fn rfc3339(t_ms: i64) -> String {
    match chrono::DateTime::<chrono::Utc>::from_timestamp_millis(t_ms) {
        Some(t) => t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        None => format!("{t_ms} ms"),
    }
}

/// Formats an epoch-ms instant in `tz` as `YYYY-MM-DD HH:MM:SS±HH:MM`.
pub fn format_local(tz: Tz, t_ms: i64) -> String {
    match tz.timestamp_millis_opt(t_ms).single() {
        Some(t) => t.format("%Y-%m-%d %H:%M:%S%:z").to_string(),
        None => format!("{t_ms} ms"),
    }
}
