//! Claimed runs that go back to the queue unstarted: at a shutdown, past their claim's lease,
//! after every instance stayed busy for `HOLD_WHILE_BUSY_MS`, or given to an idle node; each is
//! recorded through the completion path, so a later claim takes it again.

use std::collections::VecDeque;
use std::time::Duration;

use actix::prelude::*;

use super::{HOLD_WHILE_BUSY_MS, Processor};
use crate::catalog::complete::{Completion, Outcome};
use crate::catalog::queue::ClaimedRun;

impl Processor {
    /// Returns claimed-but-unstarted runs to the queue (shutdown).
    pub(super) fn requeue_local(&mut self, ctx: &mut Context<Self>) {
        for run in std::mem::take(&mut self.local) {
            self.end_unstarted(run, Outcome::Interrupted);
        }
        self.flush(ctx);
    }

    /// Records a claimed run that never started (with the next flush).
    pub(super) fn end_unstarted(&mut self, run: ClaimedRun, outcome: Outcome) {
        let now = self.now();
        let completion = Completion {
            run_id: run.run_id,
            job_id: run.job_id,
            claim_token: run.claim_token,
            outcome,
            log: None,
            // Never started: no start time.
            started_at: None,
            finished_at: now,
            retry_at: None,
        };
        self.unrecorded.push((run, completion));
    }

    /// Returns to the queue every claimed run not started within its claim's lease (the
    /// node's lease TTL): a run that waits behind a longer one than its processor measured is
    /// not held from the other nodes, nor shown `claimed` for longer than a lease.
    pub(super) fn return_stale_claims(&mut self, ctx: &mut Context<Self>) {
        if self.draining || self.fenced || self.local.is_empty() {
            return;
        }
        // Until it starts, a claimed run's `started_at` is its claim's time.
        let since = self.now() - self.cfg.lease_ms;
        let (stale, kept): (VecDeque<_>, VecDeque<_>) = std::mem::take(&mut self.local)
            .into_iter()
            .partition(|run| run.started_at < since);
        self.local = kept;
        if stale.is_empty() {
            return;
        }
        let n = self.give_back(stale, ctx);
        tracing::info!(processor = %self.cfg.name, runs = n, lease_ms = self.cfg.lease_ms, "returned claimed runs not started within their claim's lease to the queue");
    }

    /// Puts claimed runs this processor has not started back in the queue (recorded
    /// interrupted, flushed now), and claims smaller batches for a while; returns how many.
    pub(super) fn give_back(
        &mut self,
        runs: impl IntoIterator<Item = ClaimedRun>,
        ctx: &mut Context<Self>,
    ) -> usize {
        let mut n = 0;
        for run in runs {
            self.end_unstarted(run, Outcome::Interrupted);
            n += 1;
        }
        self.sizer.handle_short_claim();
        crate::metrics::given_back(n);
        self.flush(ctx);
        n
    }

    /// Looks at the buffer once its oldest run has waited [`HOLD_WHILE_BUSY_MS`] (one such
    /// timer at a time).
    pub(super) fn arm_hold_check(&mut self, ctx: &mut Context<Self>) {
        // The flag first: every pump calls this, and the scan for the oldest run walks the
        // whole buffer (prefetch fills it with hundreds of runs during a drain).
        if self.hold_armed {
            return;
        }
        let Some(oldest) = self.local.iter().map(|r| r.started_at).min() else {
            return;
        };
        self.hold_armed = true;
        let due = oldest + HOLD_WHILE_BUSY_MS - self.now();
        ctx.run_later(Duration::from_millis(due.max(1) as u64), |act, ctx| {
            act.hold_armed = false;
            act.release_held(ctx);
        });
    }

    /// Returns to the queue the claimed runs that have waited [`HOLD_WHILE_BUSY_MS`] while
    /// every instance stayed busy: a node with a free instance takes them (it wakes on the
    /// change) rather than idling beside them; this one claims again once an instance frees.
    pub(super) fn release_held(&mut self, ctx: &mut Context<Self>) {
        if self.draining || self.fenced || self.local.is_empty() {
            return;
        }
        if self.free() > 0 {
            self.pump(ctx);
            return;
        }
        let since = self.now() - HOLD_WHILE_BUSY_MS;
        let (held, kept): (VecDeque<_>, VecDeque<_>) = std::mem::take(&mut self.local)
            .into_iter()
            .partition(|run| run.started_at <= since);
        self.local = kept;
        if !held.is_empty() {
            self.gave_back = true;
            let n = self.give_back(held, ctx);
            tracing::info!(processor = %self.cfg.name, runs = n, held_ms = HOLD_WHILE_BUSY_MS, "returned claimed runs to the queue: every instance stayed busy");
        }
        if !self.local.is_empty() {
            self.arm_hold_check(ctx);
        }
    }
}
