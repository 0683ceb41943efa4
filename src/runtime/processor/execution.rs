//! The execution half of a Processor: starting a claimed run (a suspect marks itself executing
//! first), executing it under its timeout, and recording its end — completions gathered and
//! flushed to the CatalogWriter in batches, retries with backoff, rate-limited failure lines,
//! and the drain's last check. The claim loop that feeds it is `mod.rs`.

use super::{Executing, Processor, RunEvent, RunEvents, START_MARK_DELAY};
use crate::catalog::complete::{Completion, Outcome, Recorded};
use crate::catalog::queue::{ClaimedRun, RunStart};
use crate::executor::{self, ExecEnv, ExecResult};
use crate::runtime::events::{Ended, Event};
use actix::prelude::*;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tracing::Instrument;

impl Processor {
    pub(super) fn start(&mut self, run: ClaimedRun, ctx: &mut Context<Self>) {
        let (tx, rx) = watch::channel(false);
        let cancel = Arc::new(tx);
        let mut run = run;
        run.started_at = self.now();
        let executing = Executing {
            cancel: cancel.clone(),
            started_ms: run.started_at,
            began: Instant::now(),
        };
        self.running.insert(run.run_id, executing);
        if !run.suspect {
            self.unmarked_starts.push(RunStart {
                run_id: run.run_id,
                claim_token: run.claim_token,
                started_at: run.started_at,
            });
            self.mark_starts_soon(ctx);
        }
        self.started_events
            .push(RunEvent::Started(run.job_id, run.started_at));
        let events = &self.cfg.events;
        if events.wanted() {
            // Built only if a subscriber has room for it.
            events.publish(std::iter::once_with(|| Event::Started {
                run_id: run.run_id,
                job: run.job_name.to_string(),
                attempt: run.attempt,
                at: run.started_at,
            }));
        }
        // Each run executes in a span of its own, a child of the trigger's when a request
        // handler (or other traced code) of this process queued it.
        let parent = events.take_parent(run.run_id);
        let span = tracing::info_span!(
            parent: parent.as_ref().and_then(|p| p.id()),
            "run",
            job = %run.job_name,
            run_id = run.run_id,
            attempt = run.attempt,
            node = %self.cfg.node_name,
        );
        let (env, writer) = (self.env.clone(), self.writer.clone());
        let meta = run.clone();
        // A task of its own: a panicking executor fails its run, not this processor.
        let exec = actix_rt::spawn(
            async move {
                if run.suspect {
                    // Marked executing before it starts, so that a node death now is blamed on it.
                    let (id, token, at) = (run.run_id, run.claim_token, run.started_at);
                    match writer.mark_executing(id, token, at).await {
                        Ok(true) => {}
                        Ok(false) => return Start::NotOurs,
                        Err(_) => return Start::NotMarked,
                    }
                }
                Start::Ran(execute_with_timeout(&run, &env, rx, cancel).await)
            }
            .instrument(span),
        );
        ctx.spawn(exec.into_actor(self).map(move |joined, act, ctx| {
            let (result, log, timed_out) = match joined {
                Ok(Start::Ran(outcome)) => outcome,
                Ok(start) => return act.not_started(meta, start, ctx),
                Err(e) => (
                    ExecResult::Err(format!("the executor panicked: {e}")),
                    None,
                    false,
                ),
            };
            act.finish(meta, result, log, timed_out, ctx);
        }));
    }

    /// A suspect run that could not be marked executing: forgotten when its claim no longer
    /// holds, otherwise returned to the queue.
    pub(super) fn not_started(&mut self, run: ClaimedRun, start: Start, ctx: &mut Context<Self>) {
        self.running.remove(&run.run_id);
        self.cfg.suspects.leave();
        if matches!(start, Start::NotOurs) {
            self.events
                .do_send(RunEvents(vec![RunEvent::Finished(run.job_id, self.now())]));
        } else {
            self.end_unstarted(run, Outcome::Interrupted);
            self.flush(ctx);
        }
        self.pump(ctx);
    }

    pub(super) fn finish(
        &mut self,
        run: ClaimedRun,
        result: ExecResult,
        log: Option<String>,
        timed_out: bool,
        ctx: &mut Context<Self>,
    ) {
        let finished_at = self.now();
        let by_operator = self.cancelled.remove(&run.run_id);
        let outcome = match result {
            ExecResult::Ok(v) => Outcome::Succeeded(v),
            ExecResult::Err(_) | ExecResult::Cancelled if by_operator => {
                Outcome::Cancelled("cancelled by an operator while it ran".into())
            }
            ExecResult::Err(e) => Outcome::Failed(e),
            ExecResult::Cancelled if timed_out => {
                Outcome::TimedOut(format!("cancelled after its timeout of {} ms", run.timeout))
            }
            ExecResult::Cancelled if self.interrupting => Outcome::Interrupted,
            ExecResult::Cancelled => Outcome::Failed("cancelled".into()),
        };
        if let Outcome::Failed(error) | Outcome::TimedOut(error) = &outcome {
            self.failures.report(&run, error, finished_at);
        }
        let retry_at = match outcome {
            Outcome::Failed(_) | Outcome::TimedOut(_) if run.attempt < run.max_attempts => {
                Some(finished_at + self.backoff(run.attempt, run.backoff_base, run.backoff_max))
            }
            _ => None,
        };
        let completion = Completion {
            run_id: run.run_id,
            job_id: run.job_id,
            claim_token: run.claim_token,
            outcome,
            log,
            started_at: Some(run.started_at),
            finished_at,
            retry_at,
        };
        if run.suspect {
            self.cfg.suspects.leave();
        }
        // Its completion records its start: no separate write.
        self.unmarked_starts.retain(|s| s.run_id != run.run_id);
        // The instance is free as soon as the work ends; the result is recorded in a batch.
        if let Some(done) = self.running.remove(&run.run_id) {
            self.busy_ms += finished_at - done.started_ms.max(self.period_start);
            *self.elapsed_by_job.entry(run.job_id).or_default() += finished_at - done.started_ms;
            let took = done.began.elapsed();
            self.sizer
                .handle_completed(took.as_micros().min(u64::MAX as u128) as u64);
            self.took.insert(run.run_id, took.as_secs_f64());
        }
        self.unrecorded.push((run, completion));
        self.flush(ctx);
        self.pump(ctx);
    }

    /// Writes the starts waiting after `START_MARK_DELAY`, in one writer operation (one batch
    /// at a time). A start that fails to be written is not retried: its run's completion
    /// records the start time and its end together.
    fn mark_starts_soon(&mut self, ctx: &mut Context<Self>) {
        if self.marking_starts {
            return;
        }
        self.marking_starts = true;
        ctx.run_later(START_MARK_DELAY, |act, ctx| {
            let starts = std::mem::take(&mut act.unmarked_starts);
            if starts.is_empty() {
                act.marking_starts = false;
                return;
            }
            let writer = act.writer.clone();
            let write = async move { writer.mark_started(starts).await };
            ctx.spawn(write.into_actor(act).map(|marked, act, ctx| {
                act.marking_starts = false;
                if let Err(e) = marked {
                    tracing::debug!(processor = %act.cfg.name, "marking runs started failed: {e}");
                }
                if !act.unmarked_starts.is_empty() {
                    act.mark_starts_soon(ctx);
                }
            }));
        });
    }

    /// Writes every completion waiting, in one writer operation; completions that arrive
    /// meanwhile go in the next. A failed write is retried with backoff, so a finished run is
    /// not left `running`.
    pub(super) fn flush(&mut self, ctx: &mut Context<Self>) {
        if self.recording || self.unrecorded.is_empty() {
            return;
        }
        self.recording = true;
        let (runs, completions): (Vec<ClaimedRun>, Vec<Completion>) =
            std::mem::take(&mut self.unrecorded).into_iter().unzip();
        // Shared with the writer's operation, so a failed write can be retried without a copy.
        let completions = Arc::new(completions);
        let (node, writer, sent) = (self.cfg.node_id, self.writer.clone(), completions.clone());
        let write = async move { writer.complete(node, sent).await };
        ctx.spawn(write.into_actor(self).map(move |recorded, act, ctx| {
            act.recording = false;
            match recorded {
                Ok(results) => {
                    let mut finished = Vec::with_capacity(runs.len());
                    let mut counted = Vec::with_capacity(runs.len());
                    let told = act.cfg.events.clone();
                    let wanted = told.wanted();
                    let mut ended = Vec::new();
                    for ((run, completion), result) in runs.iter().zip(completions.iter()).zip(results) {
                        let took = act.took.remove(&run.run_id);
                        match result {
                            Recorded::Done(status, retry) => {
                                if wanted && status.has_ended() {
                                    ended.push(Ended {
                                        run_id: run.run_id,
                                        job: &run.job_name,
                                        attempt: run.attempt,
                                        status,
                                        retry,
                                        at: completion.finished_at,
                                        outcome: &completion.outcome,
                                    });
                                }
                                let seconds = took.unwrap_or(completion.elapsed() as f64 / 1000.0);
                                counted.push((&*run.job_name, status.as_str(), seconds));
                                tracing::debug!(processor = %act.cfg.name, run = run.run_id, job = %run.job_name, status = %status, ?retry, "run finished");
                            }
                            Recorded::Stale => {
                                crate::metrics::stale_completions(1);
                                tracing::warn!(run = run.run_id, "completion with a stale claim token rejected")
                            }
                        }
                        if completion.outcome != Outcome::Interrupted {
                            act.completed += 1;
                        }
                        finished.push(RunEvent::Finished(run.job_id, completion.finished_at));
                    }
                    crate::metrics::runs_recorded(counted);
                    act.events.do_send(RunEvents(finished));
                    if wanted {
                        told.ended(ended);
                    }

                }
                Err(e) => {
                    let tries = act.record_failures.min(6);
                    act.record_failures += 1;
                    let delay = Duration::from_millis(200u64 << tries);
                    if e.is_disk_full() {
                        // Said once by the Supervisor; retried until space returns.
                        tracing::debug!(processor = %act.cfg.name, runs = runs.len(), "recording completions failed, the disk is full; retrying in {delay:?}");
                    } else {
                        tracing::error!(processor = %act.cfg.name, runs = runs.len(), "recording completions failed: {e}; retrying in {delay:?}");
                    }
                    // Put them back first, in order, ahead of anything newer. The writer has
                    // dropped its operation by now, so the completions are ours again.
                    let completions =
                        Arc::try_unwrap(completions).unwrap_or_else(|shared| (*shared).clone());
                    let batch = runs.into_iter().zip(completions).collect();
                    let newer = std::mem::replace(&mut act.unrecorded, batch);
                    act.unrecorded.extend(newer);
                    ctx.run_later(delay, |act, ctx| act.flush(ctx));
                    return;
                }
            }
            act.record_failures = 0;
            act.check_drained();
            act.flush(ctx);
            // Retries queued by these completions report their due time through the next claim.
            act.pump(ctx);
        }));
    }

    pub(super) fn check_drained(&mut self) {
        if self.draining
            && self.running.is_empty()
            && self.unrecorded.is_empty()
            && !self.recording
            && self.local.is_empty()
        {
            for done in self.drained.drain(..) {
                let _ = done.send(());
            }
        }
    }

    /// Exponential backoff with "equal jitter": half the delay fixed, half random, so delays
    /// grow from one attempt to the next yet spread out.
    pub(super) fn backoff(&mut self, attempt: i64, base: i64, max: i64) -> i64 {
        let exp = (attempt - 1).clamp(0, 30) as u32;
        let delay = base.saturating_mul(1i64 << exp).min(max).max(0);
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let half = delay / 2;
        half + if half > 0 {
            (self.rng % (half as u64 + 1)) as i64
        } else {
            0
        }
    }
}

/// How often one job's failures are logged at WARN; failures in between are counted and
/// reported with the next line.
const FAILURE_LOG_EVERY_MS: i64 = 60_000;

/// Rate-limited WARN lines for failing runs: a job failing every second (an unknown function, a
/// host that is down) writes one line a minute, not sixty.
#[derive(Default)]
pub(super) struct FailureLog {
    /// Per job: when it was last logged, and failures since.
    jobs: HashMap<i64, (i64, u64)>,
}

impl FailureLog {
    fn report(&mut self, run: &ClaimedRun, error: &str, now: i64) {
        let (last, quiet) = self.jobs.entry(run.job_id).or_insert((i64::MIN, 0));
        if now.saturating_sub(*last) < FAILURE_LOG_EVERY_MS {
            *quiet += 1;
            return;
        }
        let error: String = error.chars().take(300).collect();
        if *quiet > 0 {
            tracing::warn!(job = %run.job_name, run = run.run_id, attempt = run.attempt, also_failed = *quiet, "run failed: {error} ({} more failures of this job in the last minute)", *quiet);
        } else {
            tracing::warn!(job = %run.job_name, run = run.run_id, attempt = run.attempt, "run failed: {error}");
        }
        *last = now;
        *quiet = 0;
    }
}

/// How a run's start went.
pub(super) enum Start {
    /// It executed: result, captured output, whether its timeout fired.
    Ran((ExecResult, Option<String>, bool)),
    /// A suspect whose claim no longer holds (the node name was taken): not ours to run.
    NotOurs,
    /// A suspect that could not be marked executing (the writer failed): back to the queue.
    NotMarked,
}

/// Executes `run`; past its timeout, signals cancel and gives the executor a moment to clean
/// up. Returns the result, the captured output, and whether the timeout fired.
pub(super) async fn execute_with_timeout(
    run: &ClaimedRun,
    env: &Arc<ExecEnv>,
    rx: watch::Receiver<bool>,
    cancel: Arc<watch::Sender<bool>>,
) -> (ExecResult, Option<String>, bool) {
    with_timeout(run.timeout, executor::execute(run, env, rx), &cancel).await
}

/// Awaits `work` for at most `timeout_ms` (0: no limit); past it, signals `cancel` and gives
/// the work a moment to clean up. An end that is there when the timer fires wins over it: a
/// node stopped (SIGSTOP) past a run's timeout finds both ready when it continues, and a run
/// whose command exited meanwhile ends as the command ended, not `timed_out` (issue 27, point
/// 2a). Only an execution stopped by the cancel (`ExecResult::Cancelled`) timed out.
async fn with_timeout(
    timeout_ms: i64,
    work: impl Future<Output = (ExecResult, Option<String>)>,
    cancel: &watch::Sender<bool>,
) -> (ExecResult, Option<String>, bool) {
    if timeout_ms <= 0 {
        let (r, log) = work.await;
        return (r, log, false);
    }
    tokio::pin!(work);
    tokio::select! {
        biased;
        (r, log) = &mut work => (r, log, false),
        _ = tokio::time::sleep(Duration::from_millis(timeout_ms as u64)) => {
            let _ = cancel.send(true);
            // Let the executor clean up (kill and reap a process group).
            match tokio::time::timeout(Duration::from_secs(5), work).await {
                Ok((ExecResult::Cancelled, log)) => (ExecResult::Cancelled, log, true),
                // It had ended by itself before the cancel reached it.
                Ok((r, log)) => (r, log, false),
                Err(_) => (ExecResult::Cancelled, None, true),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::queue::ClaimedRun;
    use crate::executor::{ExecLimits, command};
    use crate::model::JobType;
    use serde_json::json;

    /// A command run whose process had exited before the node noticed its timeout: the node was
    /// stopped (SIGSTOP) past the timeout while the command ran, and when it continues the
    /// exit and the timer are both there (issue 27, point 2a). The exit wins: the run succeeded,
    /// it did not time out. The runtime's one thread is held (the stop) until the command is a
    /// zombie and its timeout has passed; several rounds, as which of two ready branches a
    /// `select!` polls first is random.
    #[test]
    fn an_exit_there_when_the_timeout_fires_wins_over_the_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let mut staged_rounds = 0;
        for round in 0..12 {
            let pid_file = dir.path().join(format!("pid{round}"));
            let run = ClaimedRun {
                run_id: round,
                claim_token: 1,
                job_id: 1,
                job_name: "quick".into(),
                job_type: JobType::Command,
                payload: Arc::new(json!({
                    "argv": ["sh", "-c", format!("echo $$ > '{}'", pid_file.display())]
                })),
                params: None,
                attempt: 1,
                max_attempts: 1,
                backoff_base: 0,
                backoff_max: 0,
                timeout: 50,
                scheduled_for: None,
                priority: 0,
                suspect: false,
                objects: Arc::from(Vec::new()),
                started_at: 0,
                start_by: None,
            };
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let (result, timed_out, staged) = rt.block_on(async move {
                let (tx, rx) = watch::channel(false);
                let limits = ExecLimits::default();
                let timeout = Duration::from_millis(run.timeout as u64);
                let exec = tokio::spawn(async move {
                    let work = command::run(&run, &limits, rx);
                    with_timeout(run.timeout, work, &tx).await
                });
                // Until the command has started (and with it the timer).
                let spawned = Instant::now();
                let pid = loop {
                    assert!(
                        spawned.elapsed() < Duration::from_secs(30),
                        "round {round}: the command never wrote its pid"
                    );
                    tokio::task::yield_now().await;
                    let text = std::fs::read_to_string(&pid_file).unwrap_or_default();
                    if let Ok(pid) = text.trim().parse::<u32>() {
                        break pid;
                    }
                };
                // The stop: nothing of this runtime runs until the command has exited and its
                // timeout has passed (its timer started before the command did).
                // Bounded: should another reaper in this test process take the zombie (its pid
                // then gone or another process's), this round stages nothing and says so.
                let began = Instant::now();
                let stat = format!("/proc/{pid}/stat");
                let staged = loop {
                    let Ok(text) = std::fs::read_to_string(&stat) else {
                        break false;
                    };
                    let state = text.rsplit_once(") ").map(|(_, rest)| &rest[..1]);
                    if !text.contains("(sh)") || began.elapsed() > Duration::from_secs(10) {
                        break false;
                    }
                    if state == Some("Z") && began.elapsed() > timeout {
                        break true;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                };
                let (result, _, timed_out) = exec.await.unwrap();
                (result, timed_out, staged)
            });
            if !staged {
                continue;
            }
            staged_rounds += 1;
            assert!(
                matches!(&result, ExecResult::Ok(v) if v["exit_code"] == 0),
                "round {round}: {result:?}"
            );
            assert!(!timed_out, "round {round}");
        }
        assert!(
            staged_rounds >= 6,
            "only {staged_rounds} of 12 rounds staged the race"
        );
    }
}
