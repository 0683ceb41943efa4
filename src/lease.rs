//! Claim sizing: how many runs a processor claims at once — sized so a batch lasts about a
//! target duration at the processor's measured rate, starting from one and doubling (slow
//! start), with the next batch requested when half of the current one is done (two deep).
//!
//! The rate is what the processor can execute, not what it did: its instances divided by the
//! mean execution time of its runs. A completion rate would measure the supply instead (while
//! batches are small, runs arrive slowly and the rate stays low, which keeps batches small).
//!
//! [`Cadence`] is the timing of a node's hold on its name and its runs in a shared catalog:
//! how often it proves it is alive (its heartbeat), how long its leases hold without one (the
//! lease TTL), and the thresholds derived from them.
//!
//! Invariant: reads no clock (durations are arguments) and imports neither actix nor rusqlite;
//! a size is never below the processor's free instances nor above `max`; a process's tenure
//! lapses before its leases can expire (`valid_for < ttl`).

/// How many due runs at the head of a processor's queue a claim looks through for runs it can
/// take past those it cannot (their job at its overlap cap, or an object of theirs busy): runs
/// further behind wait until the queue ahead of them moves. Both backends; the SQLite claim's
/// statement spells the number out.
pub const PAST_BLOCKED: usize = 256;

/// Sizes claim batches from the measured execution time.
#[derive(Debug, Clone)]
pub struct ClaimSizer {
    size: usize,
    max: usize,
    target_us: f64,
    /// Mean execution time of a run, µs, smoothed; `None` until a run completed.
    mean_us: Option<f64>,
    /// The processor's configured prefetch, if any (else it follows the measure).
    fixed_prefetch: Option<usize>,
}

/// Runs longer than this (µs) are never claimed ahead of a free instance.
pub const LONG_RUN_US: f64 = 1_000_000.0;

/// Weight of the newest execution time in the mean.
const SMOOTHING: f64 = 0.1;

impl ClaimSizer {
    /// A sizer starting at one run, growing to at most `max`, aiming at batches of `target_ms`.
    pub fn new(max: usize, target_ms: i64) -> Self {
        Self {
            size: 1,
            max: max.max(1),
            target_us: target_ms.max(1) as f64 * 1000.0,
            mean_us: None,
            fixed_prefetch: None,
        }
    }

    /// With a fixed prefetch (a processor's `prefetch`), or the measured one (`None`).
    pub fn with_prefetch(mut self, prefetch: Option<usize>) -> Self {
        self.set_prefetch(prefetch);
        self
    }

    /// Fixes the prefetch (a processor's `prefetch`), or lets it follow the measure (`None`).
    pub fn set_prefetch(&mut self, prefetch: Option<usize>) {
        self.fixed_prefetch = prefetch;
    }

    /// The current batch size.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Runs per second that `instances` executions sustain at the measured execution time.
    pub fn rate_per_s(&self, instances: usize) -> Option<f64> {
        self.mean_us
            .map(|m| instances as f64 * 1_000_000.0 / m.max(1.0))
    }

    /// A run completed after executing `exec_us` µs.
    pub fn handle_completed(&mut self, exec_us: u64) {
        let sample = exec_us as f64;
        self.mean_us = Some(match self.mean_us {
            Some(m) => (1.0 - SMOOTHING) * m + SMOOTHING * sample,
            None => sample,
        });
    }

    /// How many runs may wait claimed beyond the free instances: the runs of about `target_ms`
    /// at the measured execution time (so that a batch of short runs keeps a drain fed), none
    /// for runs longer than [`LONG_RUN_US`] or before a run was measured (a claimed run waiting
    /// behind a long one is held from every other node), at most the slow-start size; a
    /// processor's configured prefetch replaces all that.
    pub fn prefetch(&self, instances: usize) -> usize {
        let measured = match (self.fixed_prefetch, self.mean_us) {
            (Some(n), _) => return n,
            (None, Some(m)) if m <= LONG_RUN_US => {
                (instances as f64 * self.target_us / m.max(1.0)).round() as usize
            }
            (None, _) => 0,
        };
        measured.min(self.size)
    }

    /// How many runs to claim now, given `buffered` claimed-but-not-started runs, `free` idle
    /// instances of `instances`: up to the free instances plus [`ClaimSizer::prefetch`], never
    /// more; 0 while the buffer covers the free instances and more than half the prefetch.
    pub fn poll_claim(&mut self, buffered: usize, free: usize, instances: usize) -> usize {
        let prefetch = self.prefetch(instances);
        if buffered * 2 > prefetch && buffered >= free {
            return 0;
        }
        // Slow start doubles; the measured rate caps the batch at `target_ms` of work.
        let by_rate = self.rate_per_s(instances).map_or(usize::MAX, |r| {
            (r * self.target_us / 1_000_000.0).round().max(1.0) as usize
        });
        self.size = (self.size * 2).min(by_rate).clamp(1, self.max);
        (free + self.prefetch(instances)).saturating_sub(buffered)
    }

    /// A claim came back with fewer runs than asked: the queue is drained, shrink to restart
    /// slowly when work arrives.
    pub fn handle_short_claim(&mut self) {
        self.size = (self.size / 2).max(1);
    }
}

/// How often a node heartbeats and how long its leases hold, ms.
///
/// A heartbeat renews the node's name and the leases of its running runs to `now + ttl`; a
/// claim's lease is `now + timeout + ttl`. A node whose heartbeat is older than its TTL is
/// dead: any other node sharing the catalog fences it and returns its runs whose leases
/// expired to the queue (a sweep, at every heartbeat). A process starts and claims nothing once
/// its last confirmed heartbeat is older than [`Cadence::valid_for_ms`] (two heartbeats), which
/// the TTL must exceed: a process that was only stopped then starts none of the runs a sweep
/// may have given away meanwhile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cadence {
    heartbeat_ms: i64,
    ttl_ms: i64,
}

impl Cadence {
    /// The default heartbeat interval.
    pub const DEFAULT_HEARTBEAT_MS: i64 = 5_000;
    /// The default TTL, in heartbeat intervals (30 s at the default heartbeat: a dead node's
    /// runs are back in the queue within about 35 s, as the reliability plan proposes).
    pub const TTL_HEARTBEATS: i64 = 6;
    /// The shortest TTL allowed, in heartbeat intervals: above the tenure's two.
    pub const MIN_TTL_HEARTBEATS: i64 = 3;

    /// A cadence of `heartbeat_ms` with a TTL of `ttl_ms` (0: [`Cadence::TTL_HEARTBEATS`]
    /// heartbeats); `None` when the TTL is not above the tenure's validity
    /// ([`Cadence::MIN_TTL_HEARTBEATS`] heartbeats at least) or the heartbeat is not positive.
    pub fn new(heartbeat_ms: i64, ttl_ms: i64) -> Option<Self> {
        let ttl_ms = if ttl_ms == 0 {
            heartbeat_ms.saturating_mul(Self::TTL_HEARTBEATS)
        } else {
            ttl_ms
        };
        (heartbeat_ms > 0 && ttl_ms >= heartbeat_ms.saturating_mul(Self::MIN_TTL_HEARTBEATS))
            .then_some(Self {
                heartbeat_ms,
                ttl_ms,
            })
    }

    /// How often the node heartbeats (and sweeps), ms.
    pub fn heartbeat_ms(&self) -> i64 {
        self.heartbeat_ms
    }

    /// How long the node's heartbeat and its runs' leases hold without a new heartbeat, ms.
    pub fn ttl_ms(&self) -> i64 {
        self.ttl_ms
    }

    /// A holder of the node name whose heartbeat is older than this may be replaced by a
    /// process of the same name (once watched for [`Cadence::watch_for_ms`]): three heartbeats.
    pub fn stale_after_ms(&self) -> i64 {
        3 * self.heartbeat_ms
    }

    /// How long a confirmed heartbeat lets the process claim and start runs: two heartbeats,
    /// below the TTL and below what a taker of its name waits.
    pub fn valid_for_ms(&self) -> i64 {
        2 * self.heartbeat_ms
    }

    /// How long a taker watches a stale holder that may be alive: a heartbeat and a margin.
    pub fn watch_for_ms(&self) -> i64 {
        self.heartbeat_ms + 1_000
    }
}

impl Default for Cadence {
    fn default() -> Self {
        Self {
            heartbeat_ms: Self::DEFAULT_HEARTBEAT_MS,
            ttl_ms: Self::DEFAULT_HEARTBEAT_MS * Self::TTL_HEARTBEATS,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The TTL defaults to six heartbeats, and one the tenure would outlive is refused: a
    /// stopped process must stop starting runs before a sweep may give them away.
    #[test]
    fn a_lease_ttl_must_outlast_the_tenure() {
        let c = Cadence::new(5_000, 0).unwrap();
        assert_eq!((c.heartbeat_ms(), c.ttl_ms()), (5_000, 30_000));
        assert_eq!(c, Cadence::default());
        assert!(c.valid_for_ms() < c.ttl_ms());
        assert_eq!(Cadence::new(500, 1_500).unwrap().ttl_ms(), 1_500);
        assert_eq!(Cadence::new(500, 1_499), None);
        assert_eq!(Cadence::new(0, 0), None);
    }

    #[test]
    fn slow_start_doubles_up_to_the_rate_cap() {
        let mut s = ClaimSizer::new(1000, 100);
        // Before a run was measured, only the free instance is claimed for.
        let sizes: Vec<usize> = (0..5).map(|_| s.poll_claim(0, 1, 1)).collect();
        assert_eq!(sizes, [1; 5]);
        assert_eq!(s.size(), 32);
        // Runs of 100 µs on 1 instance: 10,000 per second, 100 ms of work is 1,000 runs.
        for _ in 0..100 {
            s.handle_completed(100);
        }
        assert!((s.rate_per_s(1).unwrap() - 10_000.0).abs() < 1.0);
        for _ in 0..10 {
            s.poll_claim(0, 1, 1);
        }
        assert_eq!(s.size(), 1000);
        assert_eq!(
            s.poll_claim(0, 1, 1),
            1001,
            "the free instance and 100 ms of runs"
        );
    }

    /// A run longer than a second is never claimed ahead of a free instance, nor is a run
    /// before any was measured: a claimed run waiting behind a long one is held from every
    /// other node. A configured prefetch replaces the measure.
    #[test]
    fn long_runs_are_claimed_only_for_free_instances() {
        let mut s = ClaimSizer::new(2048, 50);
        assert_eq!(s.poll_claim(0, 1, 1), 1);
        assert_eq!(
            s.poll_claim(0, 0, 1),
            0,
            "busy and unmeasured: nothing ahead"
        );
        for _ in 0..10 {
            s.handle_completed(300_000_000);
        }
        for _ in 0..5 {
            assert_eq!(s.poll_claim(0, 0, 1), 0);
            assert_eq!(s.poll_claim(0, 1, 1), 1);
        }
        // Runs of 0.9 s on 4 instances: 50 ms of work rounds to no run either.
        let mut s = ClaimSizer::new(2048, 50);
        for _ in 0..10 {
            s.handle_completed(900_000);
        }
        assert_eq!(s.poll_claim(0, 0, 4), 0);
        // Runs of 5 ms on 2 instances: 20 ahead once slow start reached them.
        let mut s = ClaimSizer::new(2048, 50);
        for _ in 0..10 {
            s.handle_completed(5_000);
        }
        for _ in 0..10 {
            s.poll_claim(0, 0, 2);
        }
        assert_eq!(s.prefetch(2), 20);
        assert_eq!(s.poll_claim(0, 2, 2), 22);
        assert_eq!(
            s.poll_claim(11, 0, 2),
            0,
            "more than half the prefetch buffered"
        );
        assert_eq!(s.poll_claim(10, 0, 2), 10);
        // Configured: 3 ahead, whatever the measure.
        let mut s = ClaimSizer::new(2048, 50).with_prefetch(Some(3));
        for _ in 0..10 {
            s.handle_completed(300_000_000);
        }
        assert_eq!(s.poll_claim(0, 1, 1), 4);
        assert_eq!(s.poll_claim(2, 0, 1), 0);
        assert_eq!(s.poll_claim(1, 0, 1), 2);
    }

    #[test]
    fn a_slow_processor_gets_small_batches() {
        let mut s = ClaimSizer::new(1000, 100);
        // Runs of 50 ms on 1 instance: 100 ms of work is 2 runs; on 4 instances, 8.
        for _ in 0..40 {
            s.handle_completed(50_000);
        }
        for _ in 0..10 {
            s.poll_claim(0, 1, 1);
        }
        assert_eq!(s.size(), 2);
        for _ in 0..10 {
            s.poll_claim(0, 1, 4);
        }
        assert_eq!(s.size(), 8);
    }

    #[test]
    fn the_rate_is_capacity_not_supply() {
        // Runs of 10 µs that trickled in slowly still allow full batches once work piles up:
        // only execution time counts, not how often runs completed.
        let mut s = ClaimSizer::new(2048, 50);
        for _ in 0..50 {
            s.handle_completed(10);
        }
        for _ in 0..20 {
            s.poll_claim(0, 2, 2);
        }
        assert_eq!(s.size(), 2048);
        // The mean follows a change of the jobs' speed.
        for _ in 0..100 {
            s.handle_completed(20_000);
        }
        s.handle_short_claim();
        for _ in 0..5 {
            s.poll_claim(0, 2, 2);
        }
        assert_eq!(s.size(), 5, "2 instances × 50 ms / 20 ms");
    }

    #[test]
    fn the_next_batch_is_requested_when_half_is_left() {
        let mut s = ClaimSizer::new(64, 1000);
        s.handle_completed(1_000);
        for _ in 0..5 {
            s.poll_claim(0, 1, 1);
        }
        let size = s.size();
        assert_eq!(
            s.poll_claim(size / 2 + 1, 0, 1),
            0,
            "more than half buffered: no claim"
        );
        assert!(
            s.poll_claim(size / 2, 0, 1) > 0,
            "half buffered: claim the next batch"
        );
        // Free instances are always covered.
        assert!(s.poll_claim(0, 8, 8) >= 8);
    }
}
