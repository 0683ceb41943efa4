//! The Supervisor's hold on the node name among the nodes sharing the catalog: the heartbeat
//! (renewing the tenure and the leases, handing idle nodes' requests for unstarted runs to the
//! processors), the sweep of dead nodes after each confirmed one, and the stop when another
//! process took the name or a sweep fenced this node.

use actix::prelude::*;

use super::{FENCED_GRACE, Supervisor};
use crate::catalog::CatalogError;
use crate::catalog::node::{NodeHolder, Swept};
use crate::catalog::verbs::Beat;
use crate::runtime::processor::{Fence, GiveBack, Wake};
use crate::runtime::scheduler::PauseSchedules;

impl Supervisor {
    /// Writes the heartbeat under this process's generation: it renews the tenure and the
    /// leases of the runs the node holds, or finds that another process took the name (or a
    /// sweep fenced it). A confirmed heartbeat is followed by a sweep of the dead nodes.
    pub(super) fn heartbeat(&mut self, ctx: &mut Context<Self>) {
        if self.tenure.is_lost() {
            return;
        }
        let (writer, lease, mark) = (self.writer.clone(), self.tenure.lease(), self.tenure.mark());
        let (now, ttl) = (self.now(), self.tenure.cadence().ttl_ms());
        let beat = async move { writer.heartbeat(lease, now, ttl).await };
        ctx.spawn(
            beat.into_actor(self)
                .map(move |result, act, ctx| match result {
                    Ok(Beat::Held(give_back)) => {
                        act.tenure.confirm(mark);
                        // Idle nodes asked for runs this node's processors have not started.
                        for ask in give_back {
                            if let Some((_, addr)) = act.processors.get(&ask.processor_id) {
                                addr.do_send(GiveBack(ask.runs));
                            }
                        }
                        act.sweep(ctx);
                    }
                    Ok(Beat::Lost(taker)) => act.fenced(taker, ctx),
                    Err(e) => super::super::log_write_error("heartbeat", &e),
                }),
        );
    }

    /// Sweeps the nodes sharing the catalog whose heartbeat stopped for longer than their
    /// lease TTL: fences them and returns their runs whose leases expired to the queue, then
    /// wakes this node's processors to claim them.
    fn sweep(&mut self, ctx: &mut Context<Self>) {
        if self.stopping {
            return;
        }
        let (writer, fence, now) = (self.writer.clone(), self.tenure.lease(), self.now());
        let sweep = async move { writer.sweep(fence, now).await };
        ctx.spawn(
            sweep
                .into_actor(self)
                .map(move |result, act, ctx| match result {
                    Ok(swept) => {
                        act.on_swept(&swept, now);
                        act.queue_upkeep(ctx);
                    }
                    // This node lost its name meanwhile: its next heartbeat says so.
                    Err(CatalogError::Fenced { .. }) => {}
                    Err(e) => super::super::log_write_error("sweeping dead nodes", &e),
                }),
        );
    }

    /// Ends `expired` the queued runs past their start deadline that no claim took (a paused
    /// processor's, one running on no node; a claimed run past it is its processor's to end),
    /// and ages the queued runs of jobs with an aging rate; wakes the processors when a run
    /// moved up, so the next claim sees the new order.
    fn queue_upkeep(&mut self, ctx: &mut Context<Self>) {
        let (writer, now) = (self.writer.clone(), self.now());
        let upkeep = async move { writer.queue_upkeep(now).await };
        ctx.spawn(upkeep.into_actor(self).map(|result, act, _| match result {
            Ok((expired, aged)) => {
                if !expired.is_empty() {
                    tracing::info!(
                        runs = expired.len(),
                        "expired queued runs not started by their deadline"
                    );
                    crate::metrics::runs_recorded(
                        expired.iter().map(|j| (j.as_str(), "expired", 0.0)),
                    );
                }
                if aged > 0 {
                    tracing::debug!(runs = aged, "queued runs aged");
                    for (_, addr) in act.processors.values() {
                        addr.do_send(Wake);
                    }
                }
            }
            Err(e) => super::super::log_write_error("the queue's upkeep", &e),
        }));
    }

    fn on_swept(&mut self, swept: &[Swept], now: i64) {
        for s in swept {
            super::super::tenure::log_sweep(s, now);
        }
        if swept.iter().any(|s| !s.recovery.requeued.is_empty()) {
            for (_, addr) in self.processors.values() {
                addr.do_send(Wake);
            }
        }
    }

    /// Another process took the node name, or another node's sweep fenced this one: stop
    /// claiming and starting at once, give the processors a moment to offer the completions
    /// of runs that finished (each is rejected by its stale claim token and counted: the runs
    /// are another node's now), and stop the node without requeueing anything.
    fn fenced(&mut self, holder: Option<NodeHolder>, ctx: &mut Context<Self>) {
        self.tenure.lose();
        self.stopping = true;
        self.scheduler.do_send(PauseSchedules(true));
        let offered: Vec<_> = self
            .processors
            .values()
            .map(|(_, addr)| addr.send(Fence(FENCED_GRACE)))
            .collect();
        let ttl = self.tenure.cadence().ttl_ms();
        let reason = match holder {
            Some(NodeHolder {
                fenced_by: Some(by),
                ..
            }) => format!(
                "node `{by}` fenced this node: its heartbeat was older than its lease TTL of \
                 {ttl} ms (this process was stopped or cut off), and its runs went back to the \
                 queue: stopping; completions of runs that finished meanwhile were rejected \
                 by their stale claim tokens"
            ),
            other => {
                let by = other.map_or_else(
                    || "another process".to_string(),
                    |t| format!("pid {} on host {}", t.pid, t.host),
                );
                format!(
                    "the node name was taken by {by} while this process did not renew it \
                     (stopped or cut off past its heartbeats): stopping without requeueing its \
                     runs; completions of runs that finished meanwhile were rejected by their \
                     stale claim tokens"
                )
            }
        };
        let fatal = self.env.fatal.clone();
        ctx.spawn(
            async move {
                for offer in offered {
                    let _ = offer.await;
                }
                fatal.raise(reason);
            }
            .into_actor(self),
        );
    }
}
