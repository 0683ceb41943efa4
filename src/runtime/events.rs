//! What an engine tells the application embedding it: [`Event`]s (a run queued, started,
//! finished; an activation decision) delivered to subscribers — a host actor's `Recipient` or
//! an [`EventStream`] — and the outcome of a run an application awaits ([`Engine::wait`]).
//!
//! Delivery never blocks the engine: each subscriber has a bounded buffer (an actor its
//! mailbox, a stream its channel), and an event that finds it full is dropped and counted
//! ([`Subscription::dropped`], [`Engine::events_dropped`]). A subscriber that never reads costs
//! one failed `try_send` per event. Waiters are resolved from the same completions, after they
//! are committed: what a waiter is told is in the catalog.
//!
//! Invariant: publishing takes one short lock and does no IO; with no subscriber and no waiter
//! it is one atomic load.
//!
//! [`Engine::wait`]: super::Engine::wait
//! [`Engine::events_dropped`]: super::Engine::events_dropped

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use actix::{Message, Recipient};
use serde::Serialize;
use serde_json::Value as Json;
use tokio::sync::{mpsc, oneshot};

use crate::catalog::complete::Outcome;
use crate::model::RunStatus;

/// Something the engine did, as a host application sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Message)]
#[rtype(result = "()")]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// Runs were queued by this engine (a trigger from code, the API, JSON-RPC).
    Queued {
        /// The job.
        job: String,
        /// The runs, in the order of their parameters.
        run_ids: Vec<i64>,
        /// When (epoch ms).
        at: i64,
    },
    /// A run began executing on this node.
    Started {
        /// The run.
        run_id: i64,
        /// Its job.
        job: String,
        /// 1 for the first attempt.
        attempt: i64,
        /// When (epoch ms).
        at: i64,
    },
    /// A run's end was recorded: its status is final (`succeeded`, `failed`, `timed_out`,
    /// `cancelled`, or `dead` once its attempts are spent); a failed run that will be retried
    /// names the run that retries it.
    Finished {
        /// The run.
        run_id: i64,
        /// Its job.
        job: String,
        /// 1 for the first attempt.
        attempt: i64,
        /// The recorded status.
        status: RunStatus,
        /// The run queued to retry it, if any.
        retry: Option<i64>,
        /// When it ended (epoch ms).
        at: i64,
    },
    /// The self-tuning policy (or a pin, or the start-up minimum) changed a job's or a
    /// processor's activation.
    Decision {
        /// activate, deactivate, stretch, hold, add_instance, pause_writes, …
        action: String,
        /// The job or processor concerned, if one is.
        subject: Option<String>,
        /// Why, in words.
        reason: String,
        /// health, pin, minimum or operator.
        cause: String,
        /// When (epoch ms).
        at: i64,
    },
}

/// How a run an application waited for ended: its last attempt's outcome.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunOutcome {
    /// The run that ended (the last attempt: a retried run's retry).
    pub run_id: i64,
    /// Its attempt.
    pub attempt: i64,
    /// succeeded, failed, timed_out, cancelled, dead, skipped.
    pub status: RunStatus,
    /// What it returned, when it succeeded.
    pub result: Option<Json>,
    /// Why it did not, otherwise.
    pub error: Option<String>,
}

impl RunOutcome {
    /// Whether the run succeeded.
    pub fn succeeded(&self) -> bool {
        self.status == RunStatus::Succeeded
    }
}

/// A run whose end was recorded, as its processor knows it: what waiters and subscribers are
/// told (the result is copied only for a run somebody waits for).
pub(crate) struct Ended<'a> {
    pub run_id: i64,
    pub job: &'a str,
    pub attempt: i64,
    pub status: RunStatus,
    pub retry: Option<i64>,
    pub at: i64,
    pub outcome: &'a Outcome,
}

impl Ended<'_> {
    fn result(&self) -> (Option<Json>, Option<String>) {
        match self.outcome {
            Outcome::Succeeded(v) => (Some(v.clone()), None),
            Outcome::Failed(e)
            | Outcome::TimedOut(e)
            | Outcome::Cancelled(e)
            | Outcome::Expired(e) => (None, Some(e.clone())),
            Outcome::Interrupted => (None, None),
        }
    }
}

/// Where events go.
enum Sink {
    Actor(Recipient<Event>),
    Stream(mpsc::Sender<Event>),
}

struct Subscriber {
    id: u64,
    sink: Sink,
    dropped: Arc<AtomicU64>,
}

impl Subscriber {
    /// A stream whose buffer is full (an actor's mailbox cannot be asked: it is tried).
    fn has_no_room(&self) -> bool {
        match &self.sink {
            Sink::Stream(tx) => tx.capacity() == 0 && !tx.is_closed(),
            Sink::Actor(_) => false,
        }
    }
}

/// The engine's subscribers and waiters (one per engine, shared by its actors); embedders
/// reach it through [`Engine`](super::Engine).
#[derive(Default)]
pub struct EventBus {
    /// Subscribers plus runs waited for: publishing is skipped while it is 0.
    interested: AtomicUsize,
    subscribers: Mutex<Vec<Subscriber>>,
    waiters: Mutex<HashMap<i64, Vec<oneshot::Sender<RunOutcome>>>>,
    next_id: AtomicU64,
    dropped: AtomicU64,
    /// The span each run triggered from inside one executes under (a request handler's), until
    /// it starts; `parented` counts them so that a run with none costs one atomic load.
    parents: Mutex<HashMap<i64, tracing::Span>>,
    parented: AtomicUsize,
}

/// Runs waiting to start with a parent span, at most: beyond, a trigger's runs get none (runs
/// that another node executes never take theirs).
const MAX_PARENTS: usize = 10_000;

impl EventBus {
    /// Whether anything listens (one atomic load: the hot path's whole cost when nothing does).
    pub fn wanted(&self) -> bool {
        self.interested.load(Ordering::Relaxed) > 0
    }

    fn add(&self, sink: Sink) -> Subscription {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let dropped = Arc::new(AtomicU64::new(0));
        self.lock_subscribers().push(Subscriber {
            id,
            sink,
            dropped: dropped.clone(),
        });
        self.interested.fetch_add(1, Ordering::Relaxed);
        Subscription { id, dropped }
    }

    /// Delivers `event` to the actor behind `to` from now on (its mailbox bounds the buffer).
    pub fn subscribe(&self, to: Recipient<Event>) -> Subscription {
        self.add(Sink::Actor(to))
    }

    /// A stream of events buffering at most `capacity` (at least 1).
    pub fn stream(&self, capacity: usize) -> EventStream {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let subscription = self.add(Sink::Stream(tx));
        EventStream { rx, subscription }
    }

    /// Stops delivering to `subscription`.
    pub fn unsubscribe(&self, subscription: &Subscription) {
        let mut subs = self.lock_subscribers();
        let before = subs.len();
        subs.retain(|s| s.id != subscription.id);
        if subs.len() < before {
            self.interested.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Events dropped because a subscriber's buffer was full, over all subscribers.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Offers `events` to every subscriber without waiting: a full buffer drops (and counts)
    /// the event, a subscriber gone is removed.
    pub fn publish<I>(&self, events: I)
    where
        I: IntoIterator<Item = Event>,
        I::IntoIter: ExactSizeIterator,
    {
        let events = events.into_iter();
        let mut subs = self.lock_subscribers();
        if subs.is_empty() {
            return;
        }
        // Streams with no room left drop the whole batch: count it without building a single
        // event (a subscriber that never reads costs a drain a few atomic operations per batch).
        if subs.iter().all(Subscriber::has_no_room) {
            let n = events.len() as u64;
            for s in subs.iter() {
                s.dropped.fetch_add(n, Ordering::Relaxed);
            }
            self.dropped
                .fetch_add(n * subs.len() as u64, Ordering::Relaxed);
            return;
        }
        let mut gone = Vec::new();
        for event in events {
            for s in subs.iter() {
                let sent = match &s.sink {
                    Sink::Actor(r) => match r.try_send(event.clone()) {
                        Ok(()) => Ok(()),
                        Err(actix::prelude::SendError::Full(_)) => Err(false),
                        Err(actix::prelude::SendError::Closed(_)) => Err(true),
                    },
                    Sink::Stream(tx) => match tx.try_send(event.clone()) {
                        Ok(()) => Ok(()),
                        Err(mpsc::error::TrySendError::Full(_)) => Err(false),
                        Err(mpsc::error::TrySendError::Closed(_)) => Err(true),
                    },
                };
                match sent {
                    Ok(()) => {}
                    Err(false) => {
                        s.dropped.fetch_add(1, Ordering::Relaxed);
                        self.dropped.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(true) => gone.push(s.id),
                }
            }
        }
        if !gone.is_empty() {
            subs.retain(|s| !gone.contains(&s.id));
            self.interested.fetch_sub(gone.len(), Ordering::Relaxed);
        }
    }

    /// A receiver told how `run_id` ends (following its retries). Register before looking at
    /// the catalog, so that an end recorded meanwhile is not missed.
    pub fn wait_for(&self, run_id: i64) -> oneshot::Receiver<RunOutcome> {
        let (tx, rx) = oneshot::channel();
        self.lock_waiters().entry(run_id).or_default().push(tx);
        self.interested.fetch_add(1, Ordering::Relaxed);
        rx
    }

    /// Forgets the waiters of `run_id` that gave up (timed out, dropped).
    pub fn forget_waiters(&self, run_id: i64) {
        let mut waiters = self.lock_waiters();
        if let Some(list) = waiters.get_mut(&run_id) {
            let before = list.len();
            list.retain(|tx| !tx.is_closed());
            let gone = before - list.len();
            if list.is_empty() {
                waiters.remove(&run_id);
            }
            self.interested.fetch_sub(gone, Ordering::Relaxed);
        }
    }

    /// The recorded ends of a batch of runs: waiters resolved (or moved to the retry), then the
    /// subscribers told.
    pub(crate) fn ended(&self, ended: Vec<Ended<'_>>) {
        {
            let mut waiters = self.lock_waiters();
            if !waiters.is_empty() {
                for e in &ended {
                    let Some(list) = waiters.remove(&e.run_id) else {
                        continue;
                    };
                    match e.retry {
                        Some(retry) => waiters.entry(retry).or_default().extend(list),
                        None => {
                            self.interested.fetch_sub(list.len(), Ordering::Relaxed);
                            let (result, error) = e.result();
                            for tx in list {
                                let _ = tx.send(RunOutcome {
                                    run_id: e.run_id,
                                    attempt: e.attempt,
                                    status: e.status,
                                    result: result.clone(),
                                    error: error.clone(),
                                });
                            }
                        }
                    }
                }
            }
        }
        self.publish(ended.into_iter().map(|e| Event::Finished {
            run_id: e.run_id,
            job: e.job.to_string(),
            attempt: e.attempt,
            status: e.status,
            retry: e.retry,
            at: e.at,
        }));
    }

    /// Runs `run_ids` execute under a span whose parent is `span` (a trigger's current span),
    /// when it is a real one.
    pub fn set_parent(&self, run_ids: &[i64], span: &tracing::Span) {
        if span.is_none() || span.is_disabled() {
            return;
        }
        let mut parents = self.parents.lock().unwrap_or_else(|p| p.into_inner());
        if parents.len() + run_ids.len() > MAX_PARENTS {
            return;
        }
        for &id in run_ids {
            parents.insert(id, span.clone());
        }
        self.parented.store(parents.len(), Ordering::Relaxed);
    }

    /// The parent span of run `run_id`, taken (it starts now).
    pub fn take_parent(&self, run_id: i64) -> Option<tracing::Span> {
        if self.parented.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let mut parents = self.parents.lock().unwrap_or_else(|p| p.into_inner());
        let span = parents.remove(&run_id);
        self.parented.store(parents.len(), Ordering::Relaxed);
        span
    }

    fn lock_subscribers(&self) -> std::sync::MutexGuard<'_, Vec<Subscriber>> {
        self.subscribers.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock_waiters(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<i64, Vec<oneshot::Sender<RunOutcome>>>> {
        self.waiters.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A subscription to an engine's events: how many of its events were dropped because its
/// buffer was full. Dropping it does not unsubscribe ([`Engine::unsubscribe`] does; a stream or
/// actor that goes away is removed by itself).
///
/// [`Engine::unsubscribe`]: super::Engine::unsubscribe
#[derive(Debug, Clone)]
pub struct Subscription {
    id: u64,
    dropped: Arc<AtomicU64>,
}

impl Subscription {
    /// Events this subscriber missed because its buffer was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// Events as a stream, for code that is not an actor. Ends when the engine stops.
#[derive(Debug)]
pub struct EventStream {
    rx: mpsc::Receiver<Event>,
    subscription: Subscription,
}

impl EventStream {
    /// The next event, or `None` once the engine is gone.
    pub async fn next(&mut self) -> Option<Event> {
        self.rx.recv().await
    }

    /// Its subscription: how many events it missed because it was full.
    pub fn subscription(&self) -> &Subscription {
        &self.subscription
    }
}

impl futures_core::Stream for EventStream {
    type Item = Event;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Event>> {
        self.rx.poll_recv(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DONE: Outcome = Outcome::Interrupted;

    fn ended(run_id: i64, status: RunStatus, retry: Option<i64>) -> Ended<'static> {
        Ended {
            run_id,
            job: "j",
            attempt: 1,
            status,
            retry,
            at: 0,
            outcome: &DONE,
        }
    }

    #[test]
    fn a_full_stream_drops_and_counts_instead_of_blocking() {
        let bus = EventBus::default();
        let mut stream = bus.stream(2);
        let sub = stream.subscription().clone();
        assert!(bus.wanted());
        bus.ended(
            (1..=5)
                .map(|id| ended(id, RunStatus::Succeeded, None))
                .collect(),
        );
        assert_eq!((sub.dropped(), bus.dropped()), (3, 3));
        let first = stream.rx.try_recv().unwrap();
        assert!(
            matches!(first, Event::Finished { run_id: 1, .. }),
            "{first:?}"
        );
        bus.unsubscribe(&sub);
        assert!(!bus.wanted());
    }

    #[test]
    fn a_waiter_follows_retries_to_the_last_attempt() {
        let bus = EventBus::default();
        let mut rx = bus.wait_for(10);
        bus.ended(vec![ended(10, RunStatus::Failed, Some(11))]);
        assert!(
            rx.try_recv().is_err(),
            "not resolved by an attempt that is retried"
        );
        bus.ended(vec![ended(11, RunStatus::Dead, None)]);
        let outcome = rx.try_recv().unwrap();
        assert_eq!((outcome.run_id, outcome.status), (11, RunStatus::Dead));
        assert!(!bus.wanted(), "a resolved waiter no longer counts");
    }

    #[test]
    fn a_closed_stream_is_removed() {
        let bus = EventBus::default();
        let stream = bus.stream(1);
        drop(stream);
        bus.publish([Event::Queued {
            job: "j".into(),
            run_ids: vec![1],
            at: 0,
        }]);
        assert!(!bus.wanted());
    }
}
