//! Backoff of a recurring job that keeps failing: after [`BACKOFF_AFTER`] consecutive failed
//! runs, its slots wait a growing time after the last failure before one may fire again, so a
//! per-second job whose function is missing (or whose host is down) tries once a minute, then
//! every 2, 4, … up to 60 minutes, instead of failing sixty times a minute. One success ends it.
//!
//! The rule is one pure function, used by the planner (which slots fire) and by the views
//! (the reason an operator reads).
//!
//! Invariant: reads no clock; `now` and the history are arguments.

/// Consecutive failures before a recurring job backs off.
pub const BACKOFF_AFTER: u32 = 3;
/// The first wait after the last failure, ms.
pub const BACKOFF_BASE_MS: i64 = 60_000;
/// The longest wait, ms.
pub const BACKOFF_MAX_MS: i64 = 3_600_000;

/// A recurring job's failure streak, as the catalog knows it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FailureStreak {
    /// Runs that ended failed, timed out or dead since its last success.
    pub failures: u32,
    /// When the latest of them ended, epoch ms.
    pub last_failure: Option<i64>,
}

impl FailureStreak {
    /// Until when the job's slots may not fire (`None`: they may).
    pub fn backoff_until(&self) -> Option<i64> {
        if self.failures < BACKOFF_AFTER {
            return None;
        }
        let exp = (self.failures - BACKOFF_AFTER).min(20);
        let wait = BACKOFF_BASE_MS
            .saturating_mul(1_i64 << exp)
            .min(BACKOFF_MAX_MS);
        self.last_failure.map(|t| t.saturating_add(wait))
    }

    /// The reason in words, while it holds at `now`: "backing off after 5 consecutive
    /// failures: the next slot may fire at or after …" (the caller formats the time).
    pub fn describe(&self, now: i64) -> Option<String> {
        let until = self.backoff_until().filter(|u| *u > now)?;
        Some(format!(
            "backing off after {} consecutive failed runs: no slot fires for another {} s \
             (one success ends it)",
            self.failures,
            (until - now + 999) / 1000
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn streak(failures: u32) -> FailureStreak {
        FailureStreak {
            failures,
            last_failure: Some(1_000_000),
        }
    }

    #[test]
    fn backs_off_after_three_failures_doubling_up_to_an_hour() {
        assert_eq!(streak(2).backoff_until(), None);
        assert_eq!(streak(3).backoff_until(), Some(1_000_000 + 60_000));
        assert_eq!(streak(4).backoff_until(), Some(1_000_000 + 120_000));
        assert_eq!(streak(9).backoff_until(), Some(1_000_000 + 3_600_000));
        assert_eq!(streak(60).backoff_until(), Some(1_000_000 + 3_600_000));
    }

    #[test]
    fn the_reason_counts_down_and_ends() {
        let s = streak(3);
        assert!(s.describe(1_000_000).unwrap().contains("another 60 s"));
        assert_eq!(s.describe(1_060_000), None);
        assert_eq!(FailureStreak::default().describe(0), None);
    }
}
