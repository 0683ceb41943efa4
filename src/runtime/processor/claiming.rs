//! Claiming for a Processor: how many runs to ask for, the claim through the CatalogWriter
//! (the batch, and beside it the runs queued before the buffered ones), its answer, and the
//! buffer of claimed runs in priority order. The loop that decides when to claim is `mod.rs`.

use std::time::Duration;

use actix::prelude::*;

use super::{CLAIM_FAILURES_BEFORE_RESTART, MAX_BATCH, Processor};
use crate::catalog::CatalogError;
use crate::catalog::queue::{Claim, ClaimedRun};
use crate::catalog::verbs::ClaimRequest;

impl Processor {
    /// How many of the runs queued before the buffered ones to claim now: no more than would
    /// start before the buffered runs do (the instances, or the buffer's length if longer), so
    /// that a node told of runs queued across the fleet does not take more than it can start
    /// soon; the rest come with later claims.
    pub(super) fn take_urgent(&mut self) -> usize {
        let soon = self.cfg.instances.max(self.local.len()).max(1);
        std::mem::take(&mut self.urgent).min(soon).min(MAX_BATCH)
    }

    /// Claims up to `limit` runs through the writer: the batch (`urgent = false`; one at a
    /// time), or beside it the runs that come before the buffered ones (`urgent`).
    pub(super) fn claim(&mut self, limit: usize, urgent: bool, ctx: &mut Context<Self>) {
        if urgent {
            self.claiming_urgent = true;
        } else {
            self.claiming = true;
        }
        let (pid, node, lease, paused) = (
            self.cfg.processor_id,
            self.cfg.node_id,
            self.cfg.lease_ms,
            self.writes_paused,
        );
        let now = self.now();
        let (writer, fence) = (self.writer.clone(), self.cfg.tenure.lease());
        let claim = async move {
            writer
                .claim(ClaimRequest {
                    fence,
                    processor_id: pid,
                    node_id: node,
                    limit,
                    now,
                    lease_ms: lease,
                    writes_paused: paused,
                })
                .await
        };
        ctx.spawn(
            claim
                .into_actor(self)
                .map(move |result, act, ctx| act.on_claimed(result, limit, urgent, ctx)),
        );
    }

    pub(super) fn on_claimed(
        &mut self,
        result: Result<Claim, CatalogError>,
        limit: usize,
        urgent: bool,
        ctx: &mut Context<Self>,
    ) {
        if urgent {
            self.claiming_urgent = false;
        } else {
            self.claiming = false;
        }
        if self.fenced {
            // Claimed before the name was lost: another node has these runs now.
            return;
        }
        let claim = match result {
            Ok(claim) => claim,
            Err(CatalogError::Fenced { .. }) => {
                // The supervisor's next heartbeat stops the node; claim nothing meanwhile.
                tracing::error!(processor = %self.cfg.name, "claim refused: the node name was taken by another process");
                self.cfg.tenure.lose();
                return;
            }
            Err(e) if e.is_damaged() => {
                // The fatal alarm said it once and the node stops: claim nothing more.
                tracing::debug!(processor = %self.cfg.name, "claim failed, the catalog is damaged: {e}");
                return;
            }
            Err(e) if e.is_disk_full() => {
                // The Supervisor heard it from the writer: it says so once and pauses writes,
                // after which only maintenance runs are claimed. Try again quietly meanwhile.
                tracing::debug!(processor = %self.cfg.name, "claim failed, the disk is full: {e}");
                ctx.run_later(Duration::from_secs(1), |act, ctx| act.pump(ctx));
                return;
            }
            Err(e) => {
                self.claim_failures += 1;
                tracing::error!(processor = %self.cfg.name, failures = self.claim_failures, "claim failed: {e}");
                if self.claim_failures >= CLAIM_FAILURES_BEFORE_RESTART
                    && self.running.is_empty()
                    && self.unrecorded.is_empty()
                {
                    // Something is wrong beyond one transaction: stop, and let the supervisor
                    // restart this processor with backoff.
                    self.last_error = Some(e.to_string());
                    ctx.stop();
                    return;
                }
                ctx.run_later(Duration::from_secs(1), |act, ctx| act.pump(ctx));
                return;
            }
        };
        self.claim_failures = 0;
        crate::metrics::claimed(claim.runs.len());
        let full = claim.runs.len() == limit;
        if !full && !urgent {
            self.sizer.handle_short_claim();
        }
        self.buffer(claim.runs);
        if self.draining {
            self.requeue_local(ctx);
            return;
        }
        if let Some(at) = claim.next_due {
            self.arm(at, ctx);
        }
        if full || self.wake_again || !self.local.is_empty() {
            self.pump(ctx);
        }
    }

    /// Adds claimed runs to the buffer in claim order: by priority (a later claim's urgent run
    /// goes before buffered runs of lower priority), then as claimed.
    pub(super) fn buffer(&mut self, runs: Vec<ClaimedRun>) {
        let jumps = runs.first().is_some_and(|first| {
            self.local
                .back()
                .is_some_and(|last| last.priority < first.priority)
        });
        if !jumps {
            self.local.extend(runs);
            return;
        }
        let older = std::mem::take(&mut self.local);
        let (mut a, mut b) = (older.into_iter().peekable(), runs.into_iter().peekable());
        while let (Some(x), Some(y)) = (a.peek(), b.peek()) {
            let next = if y.priority > x.priority {
                b.next()
            } else {
                a.next()
            };
            self.local.extend(next);
        }
        self.local.extend(a);
        self.local.extend(b);
    }
}
