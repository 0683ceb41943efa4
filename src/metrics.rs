//! Counters the runtime keeps for `/metrics`: runs recorded by job and outcome with a duration
//! histogram, runs claimed, stale completions, and the writers' batch sizes. Plain data in one
//! process-wide registry, so that actors count with one call and no handle to carry; the
//! Prometheus text is written by `http`.
//!
//! Invariant: counting never blocks on IO and takes one short lock per batch (a completion
//! flush, a claim, a writer commit), never one per statement.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Upper bounds of the run duration buckets, seconds.
pub const DURATION_BUCKETS: [f64; 12] = [
    0.001, 0.005, 0.025, 0.1, 0.25, 1.0, 2.5, 10.0, 30.0, 60.0, 300.0, 1800.0,
];
/// Upper bounds of the writer batch-size buckets, operations per commit.
pub const BATCH_BUCKETS: [f64; 8] = [1.0, 2.0, 5.0, 10.0, 50.0, 100.0, 500.0, 1000.0];

/// A cumulative histogram: counts per bucket (the last one is +Inf), sum and count.
#[derive(Debug, Clone, Default)]
pub struct Histogram {
    /// Observations at or below each bound (not cumulative; `+1` for +Inf).
    pub buckets: Vec<u64>,
    /// Sum of the observations.
    pub sum: f64,
    /// Observations.
    pub count: u64,
}

impl Histogram {
    fn observe(&mut self, bounds: &[f64], v: f64) {
        if self.buckets.is_empty() {
            self.buckets = vec![0; bounds.len() + 1];
        }
        let i = bounds.iter().position(|b| v <= *b).unwrap_or(bounds.len());
        self.buckets[i] += 1;
        self.sum += v;
        self.count += 1;
    }
}

/// What one job's recorded runs add up to.
#[derive(Debug, Clone, Default)]
pub struct JobRuns {
    /// Runs recorded per final status (`succeeded`, `failed`, …).
    pub by_outcome: BTreeMap<&'static str, u64>,
    /// Their durations, seconds.
    pub duration: Histogram,
}

#[derive(Default)]
struct Registry {
    runs: BTreeMap<String, JobRuns>,
    batches: BTreeMap<String, Histogram>,
}

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);
static CLAIMED: AtomicU64 = AtomicU64::new(0);
static CLAIMS: AtomicU64 = AtomicU64::new(0);
static GIVEN_BACK: AtomicU64 = AtomicU64::new(0);
static STALE: AtomicU64 = AtomicU64::new(0);

fn with<T>(f: impl FnOnce(&mut Registry) -> T) -> T {
    let mut r = REGISTRY.lock().unwrap_or_else(|p| p.into_inner());
    f(r.get_or_insert_with(Registry::default))
}

/// Counts a batch of recorded runs: (job, final status, duration in ms).
pub fn runs_recorded<'a>(runs: impl IntoIterator<Item = (&'a str, &'static str, i64)>) {
    with(|r| {
        for (job, status, ms) in runs {
            let entry = match r.runs.get_mut(job) {
                Some(e) => e,
                None => r.runs.entry(job.to_string()).or_default(),
            };
            *entry.by_outcome.entry(status).or_default() += 1;
            entry
                .duration
                .observe(&DURATION_BUCKETS, ms.max(0) as f64 / 1000.0);
        }
    });
}

/// Counts completions rejected for a stale claim token.
pub fn stale_completions(n: u64) {
    STALE.fetch_add(n, Ordering::Relaxed);
}

/// Counts one claim that took `runs` runs.
pub fn claimed(runs: usize) {
    CLAIMS.fetch_add(1, Ordering::Relaxed);
    CLAIMED.fetch_add(runs as u64, Ordering::Relaxed);
}

/// Counts claimed runs not started that were given back to the queue for an idle node.
pub fn given_back(runs: usize) {
    GIVEN_BACK.fetch_add(runs as u64, Ordering::Relaxed);
}

/// Counts one commit of `ops` operations by the writer `label`.
pub fn writer_batch(label: &str, ops: usize) {
    with(|r| {
        let h = match r.batches.get_mut(label) {
            Some(h) => h,
            None => r.batches.entry(label.to_string()).or_default(),
        };
        h.observe(&BATCH_BUCKETS, ops as f64);
    });
}

/// Everything counted so far.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Per job.
    pub runs: BTreeMap<String, JobRuns>,
    /// Per writer.
    pub batches: BTreeMap<String, Histogram>,
    /// Claims made.
    pub claims: u64,
    /// Runs claimed.
    pub claimed: u64,
    /// Claimed runs not started given back for an idle node.
    pub given_back: u64,
    /// Completions rejected for a stale token.
    pub stale: u64,
}

/// A copy of the counters.
pub fn snapshot() -> Snapshot {
    let (runs, batches) = with(|r| (r.runs.clone(), r.batches.clone()));
    Snapshot {
        runs,
        batches,
        claims: CLAIMS.load(Ordering::Relaxed),
        claimed: CLAIMED.load(Ordering::Relaxed),
        given_back: GIVEN_BACK.load(Ordering::Relaxed),
        stale: STALE.load(Ordering::Relaxed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duration_lands_in_the_first_bucket_that_holds_it() {
        let mut h = Histogram::default();
        h.observe(&DURATION_BUCKETS, 0.0005);
        h.observe(&DURATION_BUCKETS, 0.1);
        h.observe(&DURATION_BUCKETS, 5000.0);
        assert_eq!(h.buckets[0], 1);
        assert_eq!(h.buckets[3], 1);
        assert_eq!(h.buckets[DURATION_BUCKETS.len()], 1);
        assert_eq!(h.count, 3);
    }
}
