//! Claim sizing: how many runs a processor claims at once — sized so a batch lasts about a
//! target duration at the processor's measured rate, starting from one and doubling (slow
//! start), with the next batch requested when half of the current one is done (two deep).
//!
//! Invariant: reads no clock (`now` is an argument) and imports neither actix nor rusqlite; a
//! size is never below the processor's free instances nor above `max`.

/// Sizes claim batches from the measured completion rate.
#[derive(Debug, Clone)]
pub struct ClaimSizer {
    size: usize,
    max: usize,
    target_ms: f64,
    /// Completions per ms, smoothed; `None` until measured.
    rate: Option<f64>,
    window_start: i64,
    window_done: u64,
}

/// How long the rate window is, ms.
const WINDOW_MS: i64 = 50;

impl ClaimSizer {
    /// A sizer starting at one run, growing to at most `max`, aiming at batches of `target_ms`.
    pub fn new(max: usize, target_ms: i64, now: i64) -> Self {
        Self {
            size: 1,
            max: max.max(1),
            target_ms: target_ms.max(1) as f64,
            rate: None,
            window_start: now,
            window_done: 0,
        }
    }

    /// The current batch size.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The measured rate, completions per second.
    pub fn rate_per_s(&self) -> Option<f64> {
        self.rate.map(|r| r * 1000.0)
    }

    /// A run completed at `now`.
    pub fn handle_completed(&mut self, now: i64) {
        self.window_done += 1;
        let elapsed = now - self.window_start;
        if elapsed >= WINDOW_MS {
            let sample = self.window_done as f64 / elapsed as f64;
            self.rate = Some(match self.rate {
                Some(r) => 0.7 * r + 0.3 * sample,
                None => sample,
            });
            self.window_start = now;
            self.window_done = 0;
        }
    }

    /// The queue went idle at `now`: the next burst starts a fresh window.
    pub fn handle_idle(&mut self, now: i64) {
        self.window_start = now;
        self.window_done = 0;
    }

    /// How many runs to claim now, given `buffered` claimed-but-not-started runs and `free`
    /// idle instances; 0 means the buffer is deep enough (more than half a batch).
    pub fn poll_claim(&mut self, buffered: usize, free: usize) -> usize {
        if buffered * 2 > self.size && buffered >= free {
            return 0;
        }
        // Slow start doubles; the measured rate caps the batch at `target_ms` of work.
        let by_rate = self.rate.map_or(usize::MAX, |r| {
            (r * self.target_ms).ceil().max(1.0) as usize
        });
        self.size = (self.size * 2).min(by_rate).clamp(1, self.max);
        self.size.max(free).saturating_sub(buffered)
    }

    /// A claim came back with fewer runs than asked: the queue is drained, shrink to restart
    /// slowly when work arrives.
    pub fn handle_short_claim(&mut self) {
        self.size = (self.size / 2).max(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_start_doubles_up_to_the_rate_cap() {
        let mut s = ClaimSizer::new(1000, 100, 0);
        let sizes: Vec<usize> = (0..5).map(|_| s.poll_claim(0, 1)).collect();
        assert_eq!(sizes, [2, 4, 8, 16, 32]);
        // 10 completions per ms measured: 100 ms of work is 1000 runs, capped at max.
        for t in 0..=100 {
            for _ in 0..10 {
                s.handle_completed(t);
            }
        }
        assert!(
            (s.rate_per_s().unwrap() - 10_000.0).abs() < 500.0,
            "{:?}",
            s.rate_per_s()
        );
        for _ in 0..10 {
            s.poll_claim(0, 1);
        }
        assert_eq!(s.size(), 1000);
    }

    #[test]
    fn a_slow_processor_gets_small_batches() {
        let mut s = ClaimSizer::new(1000, 100, 0);
        // One completion every 50 ms: 100 ms of work is 2 runs.
        for t in (0..2000).step_by(50) {
            s.handle_completed(t);
        }
        for _ in 0..10 {
            s.poll_claim(0, 1);
        }
        assert!(s.size() <= 3, "{}", s.size());
    }

    #[test]
    fn the_next_batch_is_requested_when_half_is_left() {
        let mut s = ClaimSizer::new(64, 1000, 0);
        for _ in 0..5 {
            s.poll_claim(0, 1);
        }
        let size = s.size();
        assert_eq!(
            s.poll_claim(size / 2 + 1, 0),
            0,
            "more than half buffered: no claim"
        );
        assert!(
            s.poll_claim(size / 2, 0) > 0,
            "half buffered: claim the next batch"
        );
        // Free instances are always covered.
        assert!(s.poll_claim(0, 8) >= 8);
    }
}
