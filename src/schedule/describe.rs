//! [`Schedule::describe`]: a schedule in words, for `jobvisor jobs next` and the UI
//! ("at minute 15 of every hour, on the last day of the month").
//!
//! Invariant: reads no clock and does no IO; the words depend on the schedule alone (the
//! time zone is not part of the phrase: callers print it beside the fire times).

use chrono::{Timelike as _, Weekday};

use crate::schedule::calendar::{Kind, Schedule};
use crate::schedule::spec::RunDate;

fn plural(n: i64, one: &str, many: &str) -> String {
    if n == 1 {
        one.to_string()
    } else {
        format!("{n} {many}")
    }
}

fn weekday_name(w: Weekday) -> &'static str {
    match w {
        Weekday::Mon => "Monday",
        Weekday::Tue => "Tuesday",
        Weekday::Wed => "Wednesday",
        Weekday::Thu => "Thursday",
        Weekday::Fri => "Friday",
        Weekday::Sat => "Saturday",
        Weekday::Sun => "Sunday",
    }
}

/// The `run_date` gate as a phrase starting with "on".
pub fn describe_run_date(gate: RunDate) -> String {
    match gate {
        RunDate::DayOfMonth(n) => format!("on day {n} of the month"),
        RunDate::Weekday(w) => format!("on {}s", weekday_name(w)),
        RunDate::LastDayOfMonth => "on the last day of the month".to_string(),
        RunDate::FirstDayOfYear => "on the first day of the year".to_string(),
        RunDate::LastDayOfYear => "on the last day of the year".to_string(),
    }
}

fn with_gate(base: String, gate: Option<RunDate>) -> String {
    match gate {
        Some(g) => format!("{base}, {}", describe_run_date(g)),
        None => base,
    }
}

impl Schedule {
    /// The schedule in words: "at minute 15 of every hour, on the last day of the month",
    /// "every 7 minutes", "at 03:30 every day", "on demand only", …
    pub fn describe(&self) -> String {
        match self.kind() {
            Kind::OnDemand => "on demand only (no schedule field is set)".to_string(),
            Kind::Always { delay_ms: 0 } => {
                "continuously: again as soon as the previous run ends".to_string()
            }
            Kind::Always { delay_ms } => format!(
                "continuously: again {} after the previous run ends",
                ms_words(*delay_ms)
            ),
            Kind::Every {
                period_ms, gate, ..
            } => {
                let minutes = period_ms / 60_000;
                let base = if minutes % 1440 == 0 {
                    format!("every {}", plural(minutes / 1440, "day", "days"))
                } else if minutes % 60 == 0 {
                    format!("every {}", plural(minutes / 60, "hour", "hours"))
                } else {
                    format!("every {}", plural(minutes, "minute", "minutes"))
                };
                with_gate(base, *gate)
            }
            Kind::Hourly { minute, gate } => {
                with_gate(format!("at minute {minute} of every hour"), *gate)
            }
            Kind::Daily { time, gate } => {
                let hhmm = if time.second() == 0 {
                    time.format("%H:%M").to_string()
                } else {
                    time.format("%H:%M:%S").to_string()
                };
                match gate {
                    None => format!("at {hhmm} every day"),
                    Some(g) => format!("at {hhmm}, {}", describe_run_date(*g)),
                }
            }
            Kind::Cron(compiled) => {
                let cron = &compiled.cron;
                // croner's sentence ("At 02:30.") becomes a clause like the millix ones.
                let words = cron.describe();
                let words = words.trim().trim_end_matches('.');
                let mut chars = words.chars();
                let clause = match chars.next() {
                    Some(c) => c.to_lowercase().chain(chars).collect::<String>(),
                    None => String::new(),
                };
                format!("{clause} (cron {:?})", cron.pattern.to_string())
            }
        }
    }
}

fn ms_words(ms: i64) -> String {
    if ms % 3_600_000 == 0 {
        plural(ms / 3_600_000, "1 hour", "hours")
    } else if ms % 60_000 == 0 {
        plural(ms / 60_000, "1 minute", "minutes")
    } else if ms % 1000 == 0 {
        plural(ms / 1000, "1 second", "seconds")
    } else {
        format!("{ms} ms")
    }
}
