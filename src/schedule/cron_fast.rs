//! [`CompiledCron`]: a parsed cron expression plus bitmasks of its time fields, so that the
//! next (or previous) slot is found by a few bit scans over local days instead of croner's
//! general walk.
//!
//! Invariant: reads no clock and does no IO. The answers are croner's, exactly: the fast path
//! answers only when the matching wall-clock time it finds is a single, unambiguous instant
//! and the start is not inside a repeated (fall-back) range that croner walks twice; in every
//! other case — a gap, a fold, no match within [`SCAN_DAYS`] — it returns `None` and the
//! caller asks croner itself. Day, month and year matching call croner's own pattern methods,
//! so `L`, `W`, `#` and the day-of-month/day-of-week rule are croner's too.

use chrono::{
    DateTime, Datelike as _, Duration, LocalResult, NaiveDate, NaiveDateTime, Offset as _,
    TimeZone as _, Timelike as _,
};
use std::sync::atomic::{AtomicU32, Ordering};

use chrono_tz::Tz;
use croner::{Cron, JobType};

/// The first year of [`CompiledCron`]'s year mask.
const YEARS_FROM: i32 = 1970;

/// Local days the fast path scans before it leaves the search to croner.
const SCAN_DAYS: u32 = 400;

/// A cron expression with its second, minute, hour and month fields as bitmasks.
#[derive(Debug)]
pub(crate) struct CompiledCron {
    /// The parsed expression: describes itself, and answers whatever the fast path declines.
    pub(crate) cron: Cron,
    seconds: u64,
    minutes: u64,
    hours: u64,
    /// Bit `m` for month `m`, 1–12.
    months: u64,
    /// The day fields as masks, when neither uses `L`, `W` or `#` (else `None`, and dates go
    /// through croner's `day_match`, via `month_days`).
    plain_days: Option<PlainDays>,
    /// For `L`/`W`/`#` patterns: croner's `day_match` over a whole month, filled on first
    /// use. It depends only on the month's length and the weekday of its first day, so slot
    /// `(length - 28) * 7 + weekday` holds bit `d` for each matching day `d`, and bit 0 once
    /// filled. A race fills a slot twice with the same value.
    month_days: [AtomicU32; 28],
    /// Bit `y - YEARS_FROM` for each year of `YEARS_FROM..YEARS_FROM + 128` croner's year
    /// field takes (years outside that window ask croner).
    years: u128,
    /// croner's fixed-time job type (seconds, minute and hour each one value): such a job
    /// fires once in a repeated hour and after a gap; an interval job does neither.
    fixed_time: bool,
    /// False when a field has no value at all (never for a validated expression): the fast
    /// path then always declines.
    usable: bool,
}

/// Day-of-month and day-of-week fields without modifiers, and croner's rule joining them.
#[derive(Debug, Clone, Copy)]
struct PlainDays {
    /// Bit `d` for day of month `d`, 1–31.
    dom: u64,
    /// Bit `w` for weekday `w`, 0 = Sunday.
    dow: u64,
    star_dom: bool,
    star_dow: bool,
    dom_and_dow: bool,
}

impl PlainDays {
    /// croner's `day_match` for a pattern without modifiers: its last step, on two bits.
    fn matches(&self, day: u32, weekday_from_sunday: u32) -> bool {
        let day_matches = has(self.dom, day);
        let dow_matches = has(self.dow, weekday_from_sunday);
        if (day_matches && self.star_dow) || (dow_matches && self.star_dom) {
            true
        } else if !self.star_dom && !self.star_dow {
            if self.dom_and_dow {
                day_matches && dow_matches
            } else {
                day_matches || dow_matches
            }
        } else {
            false
        }
    }
}

fn mask(range: std::ops::RangeInclusive<u32>, set: impl Fn(u32) -> bool) -> u64 {
    range.filter(|&v| set(v)).fold(0, |m, v| m | 1 << v)
}

/// The lowest set bit of `mask` at or above `from`.
fn bit_at_or_after(mask: u64, from: u32) -> Option<u32> {
    if from >= 64 {
        return None;
    }
    let m = mask & (u64::MAX << from);
    (m != 0).then(|| m.trailing_zeros())
}

/// The highest set bit of `mask` at or below `upto`.
fn bit_at_or_before(mask: u64, upto: u32) -> Option<u32> {
    let m = if upto >= 63 {
        mask
    } else {
        mask & ((1u64 << (upto + 1)) - 1)
    };
    (m != 0).then(|| 63 - m.leading_zeros())
}

fn has(mask: u64, v: u32) -> bool {
    v < 64 && mask >> v & 1 == 1
}

fn croner_weekday(d: NaiveDate) -> croner::Weekday {
    croner::Weekday::from_days_from_sunday(d.weekday().num_days_from_sunday())
}

impl CompiledCron {
    pub(crate) fn new(cron: Cron) -> Self {
        let p = &cron.pattern;
        let seconds = mask(0..=59, |v| p.second_match(v).unwrap_or(false));
        let minutes = mask(0..=59, |v| p.minute_match(v).unwrap_or(false));
        let hours = mask(0..=23, |v| p.hour_match(v).unwrap_or(false));
        let months = mask(1..=12, |v| p.month_match(v).unwrap_or(false));
        let fixed_time = cron.determine_job_type() == JobType::FixedTime;
        let plain_days =
            (!p.days.has_modifiers() && !p.days_of_week.has_modifiers()).then(|| PlainDays {
                dom: p.days.values().into_iter().fold(0, |m, v| m | 1 << v),
                dow: p
                    .days_of_week
                    .values()
                    .into_iter()
                    .fold(0, |m, v| m | 1 << v),
                star_dom: p.is_dom_wildcard(),
                star_dow: p.is_dow_wildcard(),
                dom_and_dow: p.matches_dom_and_dow(),
            });
        let years = (0..128u32)
            .filter(|&i| p.year_match(YEARS_FROM + i as i32).unwrap_or(false))
            .fold(0u128, |m, i| m | 1 << i);
        CompiledCron {
            month_days: std::array::from_fn(|_| AtomicU32::new(0)),
            years,
            plain_days,
            usable: seconds != 0 && minutes != 0 && hours != 0 && months != 0,
            cron,
            seconds,
            minutes,
            hours,
            months,
            fixed_time,
        }
    }

    /// Whether croner's day fields take local date `d`; `None` on an error.
    pub(crate) fn day_matches(&self, d: NaiveDate) -> Option<bool> {
        match &self.plain_days {
            Some(plain) => Some(plain.matches(d.day(), d.weekday().num_days_from_sunday())),
            None => Some(self.month_mask(d)? >> d.day() & 1 == 1),
        }
    }

    /// Bit `d` for each day `d` of `date`'s month that croner's day fields take.
    fn month_mask(&self, date: NaiveDate) -> Option<u32> {
        let first = date.with_day(1)?;
        let len = first
            .checked_add_months(chrono::Months::new(1))?
            .pred_opt()?
            .day();
        let wd = croner_weekday(first);
        let slot = &self.month_days[((len - 28) * 7 + wd.num_days_from_sunday()) as usize];
        let cached = slot.load(Ordering::Relaxed);
        if cached & 1 == 1 {
            return Some(cached);
        }
        let p = &self.cron.pattern;
        let mut mask = 1;
        for day in 1..=len {
            if p.day_match(first.year(), first.month(), day, wd.shift(day as i32 - 1))
                .ok()?
            {
                mask |= 1 << day;
            }
        }
        slot.store(mask, Ordering::Relaxed);
        Some(mask)
    }

    /// A found match, if croner's year field takes it too (else the search is croner's).
    fn year_checked(&self, found: Option<NaiveDateTime>) -> Option<NaiveDateTime> {
        let found = found?;
        let ok = match u32::try_from(found.year() - YEARS_FROM) {
            Ok(i) if i < 128 => self.years >> i & 1 == 1,
            _ => self.cron.pattern.year_match(found.year()).unwrap_or(false),
        };
        ok.then_some(found)
    }

    /// The earliest time of day at or after `h:m:s` whose three fields match.
    fn time_at_or_after(&self, h: u32, m: u32, s: u32) -> Option<(u32, u32, u32)> {
        if has(self.hours, h) {
            if has(self.minutes, m)
                && let Some(s) = bit_at_or_after(self.seconds, s)
            {
                return Some((h, m, s));
            }
            if let Some(m) = bit_at_or_after(self.minutes, m + 1) {
                return Some((h, m, self.seconds.trailing_zeros()));
            }
        }
        let h = bit_at_or_after(self.hours, h + 1)?;
        Some((
            h,
            self.minutes.trailing_zeros(),
            self.seconds.trailing_zeros(),
        ))
    }

    /// The latest time of day at or before `h:m:s` whose three fields match.
    fn time_at_or_before(&self, h: u32, m: u32, s: u32) -> Option<(u32, u32, u32)> {
        let last = |mask: u64| 63 - mask.leading_zeros();
        if has(self.hours, h) {
            if has(self.minutes, m)
                && let Some(s) = bit_at_or_before(self.seconds, s)
            {
                return Some((h, m, s));
            }
            if m > 0
                && let Some(m) = bit_at_or_before(self.minutes, m - 1)
            {
                return Some((h, m, last(self.seconds)));
            }
        }
        let h = bit_at_or_before(self.hours, h.checked_sub(1)?)?;
        Some((h, last(self.minutes), last(self.seconds)))
    }

    /// The earliest local wall-clock time at or after `from` that the pattern matches,
    /// within [`SCAN_DAYS`].
    fn wall_at_or_after(&self, from: NaiveDateTime) -> Option<NaiveDateTime> {
        if !self.usable {
            return None;
        }
        let mut date = from.date();
        let (mut h, mut m, mut s) = (from.hour(), from.minute(), from.second());
        for _ in 0..SCAN_DAYS {
            if !has(self.months, date.month()) {
                // The first day of the next month.
                date = date
                    .with_day(1)?
                    .checked_add_months(chrono::Months::new(1))?;
            } else {
                if self.day_matches(date)?
                    && let Some((hh, mm, ss)) = self.time_at_or_after(h, m, s)
                {
                    return self.year_checked(date.and_hms_opt(hh, mm, ss));
                }
                date = date.succ_opt()?;
            }
            (h, m, s) = (0, 0, 0);
        }
        None
    }

    /// The latest local wall-clock time at or before `from` that the pattern matches,
    /// within [`SCAN_DAYS`].
    fn wall_at_or_before(&self, from: NaiveDateTime) -> Option<NaiveDateTime> {
        if !self.usable {
            return None;
        }
        let mut date = from.date();
        let (mut h, mut m, mut s) = (from.hour(), from.minute(), from.second());
        for _ in 0..SCAN_DAYS {
            if !has(self.months, date.month()) {
                // The last day of the previous month.
                date = date.with_day(1)?.pred_opt()?;
            } else {
                if self.day_matches(date)?
                    && let Some((hh, mm, ss)) = self.time_at_or_before(h, m, s)
                {
                    return self.year_checked(date.and_hms_opt(hh, mm, ss));
                }
                date = date.pred_opt()?;
            }
            (h, m, s) = (23, 59, 59);
        }
        None
    }

    /// croner's `find_next_occurrence(after, exclusive)` in `tz`, when the fast path can
    /// answer it; `None` means "ask croner".
    pub(crate) fn fast_next(&self, tz: Tz, after_ms: i64) -> Option<i64> {
        // croner reads the start's wall clock to the whole second, then steps one second.
        let origin_s = after_ms.div_euclid(1000);
        let wall0 = local_wall(tz, origin_s)?;
        let wall = self.wall_at_or_after(wall0 + Duration::seconds(1))?;
        let LocalResult::Single(t) = tz.from_local_datetime(&wall) else {
            return None; // a gap or a repeated time: croner's rules, croner's code
        };
        // An interval job started in the first pass of a repeated range also fires in the
        // second pass, which croner finds by a second walk: leave that case to croner.
        if !self.fixed_time && in_first_pass(tz, wall0, after_ms) {
            return None;
        }
        Some(t.timestamp_millis())
    }

    /// croner's `find_previous_occurrence(at, inclusive)` in `tz` for a whole-second `at_ms`,
    /// when the fast path can answer it; `None` means "ask croner".
    pub(crate) fn fast_prev(&self, tz: Tz, at_ms: i64) -> Option<i64> {
        if at_ms.rem_euclid(1000) != 0 {
            return None;
        }
        let wall0 = local_wall(tz, at_ms / 1000)?;
        let wall = self.wall_at_or_before(wall0)?;
        let LocalResult::Single(t) = tz.from_local_datetime(&wall) else {
            return None;
        };
        // A start in the second pass of a repeated range: croner also walks the first pass.
        if in_second_pass(tz, wall0, at_ms) {
            return None;
        }
        Some(t.timestamp_millis())
    }
}

/// The local wall-clock time of whole second `secs` in `tz`.
fn local_wall(tz: Tz, secs: i64) -> Option<NaiveDateTime> {
    let utc = DateTime::from_timestamp(secs, 0)?.naive_utc();
    let off = tz.offset_from_utc_datetime(&utc).fix().local_minus_utc();
    utc.checked_add_signed(Duration::seconds(off as i64))
}

/// Whether instant `t_ms`, whose wall clock reads `wall`, lies in the first pass of a
/// repeated range (croner's `Fold::Earlier`).
fn in_first_pass(tz: Tz, wall: NaiveDateTime, t_ms: i64) -> bool {
    match tz.from_local_datetime(&wall) {
        LocalResult::Ambiguous(_, later) => t_ms < later.timestamp_millis(),
        _ => false,
    }
}

/// Whether instant `t_ms`, whose wall clock reads `wall`, lies in the second pass of a
/// repeated range (croner's `Fold::Later`).
fn in_second_pass(tz: Tz, wall: NaiveDateTime, t_ms: i64) -> bool {
    match tz.from_local_datetime(&wall) {
        LocalResult::Ambiguous(_, later) => t_ms >= later.timestamp_millis(),
        _ => false,
    }
}
