//! Counters the runtime keeps for `/metrics`: runs recorded by job and outcome with a duration
//! histogram (seconds, measured on the monotonic clock: not whole milliseconds), runs claimed,
//! stale completions, and the writers' batch sizes. Plain data in one process-wide registry,
//! so that actors count with one call and no handle to carry; the Prometheus text is written
//! by `http`.
//!
//! Invariant: counting never blocks on IO and takes one short lock per batch (a completion
//! flush, a claim, a writer commit), never one per statement; the `job` label takes at most
//! [`job_labels`] distinct values (the jobs first counted), every other job counts as
//! [`OTHER_JOBS`], so a catalog of many jobs cannot grow the registry or a scrape without bound.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

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
static JOB_LABELS: AtomicUsize = AtomicUsize::new(DEFAULT_JOB_LABELS);

/// The default of [`job_labels`] (`http.metrics_job_labels`).
pub const DEFAULT_JOB_LABELS: usize = 100;
/// The `job` label of the runs of every job past the first [`job_labels`]: not a valid job
/// name (`jobconf::check_name` refuses parentheses), so it cannot be mistaken for one.
pub const OTHER_JOBS: &str = "(other)";

/// Sets how many distinct jobs get a `job` label of their own (`http.metrics_job_labels`).
pub fn set_job_labels(n: usize) {
    JOB_LABELS.store(n, Ordering::Relaxed);
}

/// How many distinct jobs get a `job` label of their own.
pub fn job_labels() -> usize {
    JOB_LABELS.load(Ordering::Relaxed)
}

fn with<T>(f: impl FnOnce(&mut Registry) -> T) -> T {
    let mut r = REGISTRY.lock().unwrap_or_else(|p| p.into_inner());
    f(r.get_or_insert_with(Registry::default))
}

impl Registry {
    /// Counts one recorded run under its job's label, or [`OTHER_JOBS`] once `cap` jobs have
    /// labels of their own.
    fn record(&mut self, cap: usize, job: &str, status: &'static str, seconds: f64) {
        let labelled = self.runs.len() - usize::from(self.runs.contains_key(OTHER_JOBS));
        let entry = match self.runs.get_mut(job) {
            Some(e) => e,
            None if labelled < cap => self.runs.entry(job.to_string()).or_default(),
            None => self.runs.entry(OTHER_JOBS.to_string()).or_default(),
        };
        *entry.by_outcome.entry(status).or_default() += 1;
        entry.duration.observe(&DURATION_BUCKETS, seconds.max(0.0));
    }
}

/// Counts a batch of recorded runs: (job, final status, duration in seconds).
pub fn runs_recorded<'a>(runs: impl IntoIterator<Item = (&'a str, &'static str, f64)>) {
    let cap = job_labels();
    with(|r| {
        for (job, status, seconds) in runs {
            r.record(cap, job, status, seconds);
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
    fn jobs_past_the_label_cap_count_as_other_and_durations_keep_fractions() {
        let mut r = Registry::default();
        for (job, status, seconds) in [
            ("a", "succeeded", 0.0004),
            ("b", "succeeded", 0.25),
            ("c", "failed", 1.5),
            ("d", "failed", 2.0),
            ("a", "succeeded", 0.0001),
        ] {
            r.record(2, job, status, seconds);
        }
        assert_eq!(r.runs["a"].duration.count, 2);
        assert!((r.runs["a"].duration.sum - 0.0005).abs() < 1e-9);
        assert!(!r.runs.contains_key("c") && !r.runs.contains_key("d"));
        assert_eq!(r.runs[OTHER_JOBS].by_outcome["failed"], 2);
        assert_eq!(r.runs.len(), 3);
    }

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
