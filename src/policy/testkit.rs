//! Test kit for the policy: sample builders, a fake node ([`World`]) that carries decisions
//! out the way the runtime does, and the invariants checked after every sample.
//!
//! Invariant: test-only; reads no clock and imports neither actix nor rusqlite. Randomness
//! comes only from [`crate::sim::SimRng`], so a seed names a run.

use crate::policy::{
    Action, Cause, Decision, JobView, Level, Pin, Policy, PolicyConfig, ProcessorView, Resource,
    Sample,
};
use crate::sim::SimRng;

pub const MIB: u64 = 1024 * 1024;
pub const GIB: u64 = 1024 * MIB;
/// Samples are 5 s apart, as the Health actor's default interval.
pub const TICK: i64 = 5_000;
/// An arbitrary epoch start, so that times are not small numbers by accident.
pub const T0: i64 = 1_700_000_000_000;

/// A comfortably healthy sample: 20% CPU, 4 of 8 GiB available, no swap, half the disk free,
/// a quiet link, no PSI.
pub fn healthy(at: i64) -> Sample {
    Sample {
        at,
        cpu_used: 20.0,
        memory_available: 4 * GIB,
        memory_total: 8 * GIB,
        swap_used: 0,
        swap_total: 0,
        disk_available: 50 * GIB,
        disk_total: 100 * GIB,
        disk_mount: "/data".into(),
        net_bytes_per_s: 1_000.0,
        psi_cpu: None,
        psi_memory: None,
        psi_io: None,
        cpu_cores: 0.0,
        cpu_bound: crate::policy::Bound::Host,
        cpu_throttled: None,
        memory_bound: crate::policy::Bound::Host,
    }
}

/// Uniform noise in `-amp..=amp`.
pub fn noise(rng: &mut SimRng, amp: f64) -> f64 {
    (rng.below(2001) as f64 / 1000.0 - 1.0) * amp
}

/// A job with the given id, priority and flags (inactive, unpinned).
pub fn job(job_id: i64, priority: i64) -> JobView {
    JobView {
        job_id,
        name: format!("job{job_id}"),
        priority,
        required: false,
        pin: None,
        active: false,
        held: false,
        writes_data: false,
        maintenance: false,
        stretch: 1,
        stretch_max: 1,
        memory_limit: None,
    }
}

/// A job set with every kind: two required, one at the floor, standby jobs of assorted
/// priorities (with a tie), a maintenance job and data writers.
pub fn mixed_jobs() -> Vec<JobView> {
    let mut jobs = vec![
        JobView {
            required: true,
            ..job(1, 10)
        },
        JobView {
            required: true,
            writes_data: true,
            ..job(2, 0)
        },
        job(3, 100),
        JobView {
            writes_data: true,
            ..job(4, 50)
        },
        job(5, 70),
        JobView {
            writes_data: true,
            ..job(6, 50)
        },
        job(7, 5),
        JobView {
            maintenance: true,
            writes_data: true,
            ..job(8, 20)
        },
        job(9, 90),
        JobView {
            writes_data: true,
            ..job(10, 30)
        },
    ];
    for j in &mut jobs {
        j.name = match j.job_id {
            1 => "heartbeat",
            2 => "ingest",
            3 => "sync",
            4 => "report",
            5 => "index",
            6 => "export",
            7 => "thumbnails",
            8 => "prune",
            9 => "backfill",
            _ => "stats",
        }
        .into();
    }
    jobs
}

/// A fake node: the catalog's job and processor state, the policy, and every decision.
pub struct World {
    pub policy: Policy,
    pub jobs: Vec<JobView>,
    pub processors: Vec<ProcessorView>,
    pub log: Vec<Decision>,
}

impl World {
    /// A node at start-up: the catalog's jobs with only the minimum active.
    pub fn start(cfg: PolicyConfig, mut jobs: Vec<JobView>) -> World {
        let policy = Policy::new(cfg);
        let minimum = policy.initial_active(&jobs);
        for j in &mut jobs {
            j.active = minimum.contains(&j.job_id);
        }
        World {
            policy,
            jobs,
            processors: Vec::new(),
            log: Vec::new(),
        }
    }

    /// One sample in, decisions polled at the sample's time, carried out, invariants checked.
    pub fn feed(&mut self, s: &Sample) -> Vec<Decision> {
        self.policy.handle_sample(s);
        let out = self
            .policy
            .poll_decisions(s.at, &self.jobs, &self.processors);
        for (i, d) in out.iter().enumerate() {
            self.check_decision(d, &out[..i]);
            self.apply(d);
        }
        self.log.extend(out.iter().cloned());
        self.check_state(&out);
        out
    }

    /// Feeds every sample of a trace.
    pub fn run(&mut self, trace: &[Sample]) {
        for s in trace {
            self.feed(s);
        }
    }

    pub fn job(&self, id: i64) -> &JobView {
        self.jobs
            .iter()
            .find(|j| j.job_id == id)
            .expect("job exists")
    }

    pub fn set_pin(&mut self, id: i64, pin: Option<Pin>) {
        self.jobs.iter_mut().find(|j| j.job_id == id).unwrap().pin = pin;
    }

    fn apply(&mut self, d: &Decision) {
        let held_by_pause: Vec<bool> = self
            .jobs
            .iter()
            .map(|j| self.policy.held_by_pause(j))
            .collect();
        match d.action {
            Action::Activate { job_id } | Action::Deactivate { job_id } => {
                let i = self.jobs.iter().position(|j| j.job_id == job_id).unwrap();
                let j = &mut self.jobs[i];
                j.active = matches!(d.action, Action::Activate { .. });
                // As the runtime does: a writer activated while writes are paused waits.
                j.held = j.active && held_by_pause[i];
            }
            Action::Stretch { job_id, factor } | Action::Unstretch { job_id, factor } => {
                let j = self.jobs.iter_mut().find(|j| j.job_id == job_id).unwrap();
                j.stretch = factor;
            }
            Action::Hold { .. } => {}
            Action::AddInstance { processor_id } | Action::RemoveInstance { processor_id } => {
                let p = self
                    .processors
                    .iter_mut()
                    .find(|p| p.processor_id == processor_id)
                    .unwrap();
                if matches!(d.action, Action::AddInstance { .. }) {
                    p.instances += 1;
                } else {
                    p.instances -= 1;
                }
            }
            Action::PauseWrites | Action::ResumeWrites => {
                let pause = d.action == Action::PauseWrites;
                for id in &d.jobs {
                    let j = self.jobs.iter_mut().find(|j| j.job_id == *id).unwrap();
                    j.held = pause;
                }
            }
        }
    }

    /// What must hold of each decision, before it is carried out.
    /// `earlier`: the decisions of the same poll before it (jobs a pin or the minimum
    /// decided there are not the health rules' to take).
    fn check_decision(&self, d: &Decision, earlier: &[Decision]) {
        let decided = |o: &JobView| {
            earlier
                .iter()
                .any(|e| e.cause != Cause::Health && e.action.job_id() == Some(o.job_id))
        };
        assert!(!d.reason.is_empty(), "a decision without a reason: {d:?}");
        assert!(
            !d.reason.contains(" 0 sample") && !d.reason.contains("no sample"),
            "a count the readings do not support: {}",
            d.reason
        );
        assert!(
            !has_long_decimals(&d.reason),
            "an unrounded number in: {}",
            d.reason
        );
        for e in &d.evidence {
            assert_eq!((e.value * 10.0).round() / 10.0, e.value, "unrounded: {e:?}");
        }
        if let Some(id) = d.action.processor_id() {
            let p = self
                .processors
                .iter()
                .find(|p| p.processor_id == id)
                .unwrap_or_else(|| panic!("decision names an unknown processor: {d:?}"));
            match d.action {
                Action::AddInstance { .. } => assert!(p.instances < p.max_instances, "{d:?}"),
                _ => assert!(p.instances > p.min_instances, "{d:?}"),
            }
        }
        if d.action == Action::PauseWrites {
            assert!(
                self.policy.level(Resource::Disk) == Level::Critical || self.policy.write_full(),
                "writes paused with the disk neither critical nor full: {d:?}"
            );
        }
        let Some(id) = d.action.job_id() else { return };
        let j = self
            .jobs
            .iter()
            .find(|j| j.job_id == id)
            .unwrap_or_else(|| panic!("decision names an unknown job: {d:?}"));
        match d.action {
            Action::Activate { .. } => {
                assert!(!j.active, "activates an active job: {d:?}");
                assert_ne!(
                    j.pin,
                    Some(Pin::Inactive),
                    "activates a pinned-inactive job"
                );
                if d.cause == Cause::Health {
                    // A short disk keeps back only writers: the rest need every other
                    // resource ok.
                    self.assert_ok_but_disk(d);
                    assert!(
                        !self.policy.waits_for_disk(j),
                        "activates a writer while the disk is short: {d:?}"
                    );
                    assert!(
                        !self.policy.held_by_pause(j),
                        "activates a job that writes are paused for: {d:?}"
                    );
                    let ahead = self.jobs.iter().find(|o| {
                        !o.active
                            && o.pin.is_none()
                            && !self.policy.waits_for_disk(o)
                            && !self.policy.held_by_pause(o)
                            && activation_key(o) < activation_key(j)
                    });
                    assert!(
                        ahead.is_none(),
                        "activates `{}` while `{}` (more important) waits:\n{}",
                        j.name,
                        ahead.unwrap().name,
                        self.dump()
                    );
                }
            }
            Action::Deactivate { .. } => {
                assert!(j.active, "deactivates an inactive job: {d:?}");
                assert_ne!(j.pin, Some(Pin::Active), "deactivates a pinned-active job");
                if j.pin != Some(Pin::Inactive) {
                    assert!(!j.required, "deactivates a required job: {d:?}");
                    assert!(
                        !self.policy.in_minimum(j),
                        "sheds a job of the minimum: {d:?}"
                    );
                }
                if d.cause == Cause::Health {
                    assert!(!j.held, "sheds a job held by paused writes: {d:?}");
                    if j.maintenance {
                        assert!(
                            self.policy.level(Resource::Disk) < Level::Strained,
                            "sheds a maintenance job while the disk is strained: {d:?}"
                        );
                    }
                    let lower =
                        self.lower_in_line(j, |o| !self.policy.in_minimum(o) && !decided(o));
                    assert!(
                        lower.is_none(),
                        "priority inversion: sheds `{}` while `{}` runs:\n{}",
                        j.name,
                        lower.unwrap().name,
                        self.dump()
                    );
                }
            }
            Action::Stretch { factor, .. } => {
                assert_eq!(d.cause, Cause::Health);
                assert!(j.active && !j.held && j.pin.is_none(), "{d:?}");
                assert!(factor > j.stretch && factor <= j.stretch_max, "{d:?} {j:?}");
                let lower = self.lower_in_line(j, |o| o.stretch < o.stretch_max && !decided(o));
                assert!(
                    lower.is_none(),
                    "stretches `{}` before `{}`:\n{}",
                    j.name,
                    lower.unwrap().name,
                    self.dump()
                );
            }
            Action::Unstretch { factor, .. } => {
                assert_eq!(d.cause, Cause::Health);
                assert!(factor < j.stretch && factor >= 1, "{d:?} {j:?}");
                self.assert_ok_but_disk(d);
                assert!(!self.policy.waits_for_disk(j), "{d:?}");
            }
            Action::Hold { .. } => assert_eq!(d.cause, Cause::Health),
            _ => {}
        }
    }

    /// Every resource but the disk ok, by level and by latest reading.
    fn assert_ok_but_disk(&self, d: &Decision) {
        let health = self.policy.health();
        assert_eq!(
            health.overall_except(Some(Resource::Disk)),
            Level::Ok,
            "health increase while not ok: {d:?}"
        );
        assert!(
            Resource::ALL
                .iter()
                .all(|&r| r == Resource::Disk || health.reading(r) == Level::Ok),
            "health increase on a sample that is not ok: {d:?}"
        );
    }

    /// An active job that the relief rules would take before `j` (lower in line for the
    /// same resource), among the jobs `also` admits.
    fn lower_in_line(&self, j: &JobView, also: impl Fn(&JobView) -> bool) -> Option<&JobView> {
        let disk = self.policy.level(Resource::Disk) >= Level::Strained;
        self.jobs.iter().find(|o| {
            o.job_id != j.job_id
                && o.active
                && !o.held
                && o.pin.is_none()
                && !(disk && o.maintenance)
                && also(o)
                // Writers go first while the disk is strained.
                && (disk && o.writes_data && !j.writes_data
                    || (!disk || o.writes_data == j.writes_data) && shed_key(o) < shed_key(j))
        })
    }

    /// What must hold after every sample's decisions are carried out.
    fn check_state(&self, out: &[Decision]) {
        for j in &self.jobs {
            if j.pin == Some(Pin::Inactive) {
                assert!(!j.active, "pinned-inactive job `{}` is active", j.name);
            }
            if self.policy.in_minimum(j) {
                assert!(j.active, "job `{}` of the minimum is not active", j.name);
            }
            if j.held {
                assert!(
                    j.active && self.policy.writes_paused(),
                    "job `{}` is held while writes are not paused:\n{}",
                    j.name,
                    self.dump()
                );
            }
            // The pause is truthful (issue 18, point 4): while writes are paused only
            // maintenance runs are claimed, so every other active job is held (listed paused).
            if self.policy.writes_paused() && j.active && !j.maintenance {
                assert!(
                    j.held,
                    "job `{}` is stopped by the pause but not held:\n{}",
                    j.name,
                    self.dump()
                );
            }
            assert!(j.stretch >= 1 && j.stretch <= j.stretch_max.max(1), "{j:?}");
        }
        for p in &self.processors {
            assert!(p.instances >= p.min_instances && p.instances <= p.max_instances);
        }
        // The flap bound: no job toggled by health more than twice in any window of
        // `toggle_window`, whatever the cooldown.
        let window = self.policy.config().toggle_window;
        for d in out {
            if d.cause == Cause::Health && d.action.is_toggle() {
                let id = d.action.job_id().unwrap();
                let recent = self.toggles_of(id, d.at - window + 1, d.at);
                assert!(
                    recent.len() <= 2,
                    "job {id} toggled {} times within {window} ms:\n{}",
                    recent.len(),
                    self.dump()
                );
            }
        }
    }

    /// Jobs that are not active while a less important job of the same kind is: unpinned,
    /// outside the minimum, not held, and both writers or both not (so that the disk's
    /// writers-first rule is not counted).
    pub fn inversions(&self) -> Vec<(&JobView, &JobView)> {
        let free = |j: &&JobView| j.pin.is_none() && !self.policy.in_minimum(j) && !j.held;
        let mut out = Vec::new();
        for waiting in self.jobs.iter().filter(free).filter(|j| !j.active) {
            for running in self.jobs.iter().filter(free).filter(|j| j.active) {
                if running.writes_data == waiting.writes_data
                    && activation_key(waiting) < activation_key(running)
                {
                    out.push((waiting, running));
                }
            }
        }
        out
    }

    /// Health toggles (activate or deactivate) of one job within `from..=to`.
    pub fn toggles_of(&self, id: i64, from: i64, to: i64) -> Vec<&Decision> {
        self.log
            .iter()
            .filter(|d| d.cause == Cause::Health && d.action.is_toggle())
            .filter(|d| d.action.job_id() == Some(id))
            .filter(|d| (from..=to).contains(&d.at))
            .collect()
    }

    /// Every activate/deactivate decision, all jobs together.
    pub fn toggles(&self) -> Vec<&Decision> {
        self.log.iter().filter(|d| d.action.is_toggle()).collect()
    }

    /// The most toggles (all jobs together) in any 60 s window, `[t, t + 60 s)`, from `from`.
    pub fn max_toggles_per_minute(&self, from: i64) -> usize {
        let times: Vec<i64> = self
            .toggles()
            .iter()
            .map(|d| d.at)
            .filter(|&t| t >= from)
            .collect();
        (0..times.len())
            .map(|i| {
                times[i..]
                    .iter()
                    .take_while(|&&t| t < times[i] + 60_000)
                    .count()
            })
            .max()
            .unwrap_or(0)
    }

    /// The first decision at or after `at` matching `f`.
    pub fn first_after(&self, at: i64, f: impl Fn(&Decision) -> bool) -> Option<&Decision> {
        self.log.iter().find(|d| d.at >= at && f(d))
    }

    pub fn active_ids(&self) -> Vec<i64> {
        self.jobs
            .iter()
            .filter(|j| j.active)
            .map(|j| j.job_id)
            .collect()
    }

    /// The decision log, one line each, for failure messages.
    pub fn dump(&self) -> String {
        self.log
            .iter()
            .map(|d| {
                format!(
                    "  +{:>7.1}s {:<15} {:<8} {}",
                    (d.at - T0) as f64 / 1000.0,
                    d.action.as_str(),
                    d.cause.as_str(),
                    d.reason
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Activation order: priority descending, then the older job first.
fn activation_key(j: &JobView) -> (std::cmp::Reverse<i64>, i64) {
    (std::cmp::Reverse(j.priority), j.job_id)
}

/// Shedding order: lowest priority, newest job first.
fn shed_key(j: &JobView) -> (i64, std::cmp::Reverse<i64>) {
    (j.priority, std::cmp::Reverse(j.job_id))
}

/// Whether `text` holds a number with three or more decimals ("24582008832.0" has one, but
/// "97.00000001" or "0.123" would not be a rounded figure).
fn has_long_decimals(text: &str) -> bool {
    let b = text.as_bytes();
    (1..b.len()).any(|i| {
        b[i] == b'.'
            && b[i - 1].is_ascii_digit()
            && b[i + 1..].iter().take_while(|c| c.is_ascii_digit()).count() >= 3
    })
}

/// `n` samples from `start`, `TICK` apart, each built by `f(i, sample)` from a healthy one.
pub fn trace(start: i64, n: usize, f: impl FnMut(usize, &mut Sample)) -> Vec<Sample> {
    trace_every(start, n, TICK, f)
}

/// `n` samples from `start`, `tick` ms apart, each built by `f(i, sample)` from a healthy one.
pub fn trace_every(
    start: i64,
    n: usize,
    tick: i64,
    mut f: impl FnMut(usize, &mut Sample),
) -> Vec<Sample> {
    (0..n)
        .map(|i| {
            let mut s = healthy(start + i as i64 * tick);
            f(i, &mut s);
            s
        })
        .collect()
}

/// Healthy samples with a little CPU noise.
pub fn calm(rng: &mut SimRng, start: i64, n: usize) -> Vec<Sample> {
    trace(start, n, |_, s| s.cpu_used = 25.0 + noise(rng, 10.0))
}
