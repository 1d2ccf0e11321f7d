//! Events off the critical path. An Event is a record for people, not a
//! write a plugin's correctness depends on: it must not fail a call (a 403
//! in a terminating namespace, an over-long generated name), delay the
//! call's other actions, or be sent again by a retry. So the executor hands
//! a call's Events here only once the call's other actions all succeeded,
//! and one worker task records them in order through the sink (which
//! aggregates repeats into series), with the executor's own retries of
//! transient failures, under leadership (a gate closed for a moment holds
//! them back, see [`GATE_PAUSE`]). The queue is bounded: when full,
//! Events are dropped and counted (`kubewasm_events_dropped_total`, a
//! warning per plugin at most every 10 s) rather than holding plugins back,
//! as client-go's and kube's recorders drop rather than block.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::Action;
use super::executor::{ActionError, ExecutorStats, Runner};
use super::internal_events::EventsDropped;
use crate::activity::Activity;
use crate::telemetry::ActionCounters;

/// How long queued Events wait for a closed gate to open again before they
/// are refused: a shard whose renewal was missed and that is renewed again
/// at once (a suspension) closes the gate for a second or two, and the
/// Events of what was handled before are still this replica's records.
const GATE_PAUSE: Duration = Duration::from_secs(10);

/// How often a plugin's dropped-Events warning repeats, at most.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// When a plugin's drops were last reported, and the drops since.
type DropReport = (Option<Instant>, u64);

/// One Event waiting to be recorded.
struct Queued {
    plugin: Arc<str>,
    action: Action,
    /// The emitting plugin's counters (shared by one call's Events).
    counters: Arc<ActionCounters>,
}

/// The Event queue of one executor: its worker starts with the first Event.
pub(crate) struct EventQueue {
    shared: Arc<Shared>,
    sender: OnceLock<mpsc::Sender<Queued>>,
    stop: CancellationToken,
    tasks: TaskTracker,
}

struct Shared {
    capacity: usize,
    /// Queued or being recorded.
    pending: AtomicU64,
    drained: Notify,
    activity: OnceLock<Arc<Activity>>,
    closed: AtomicBool,
    /// Per plugin: when its drops were last reported, and drops since.
    warned: Mutex<HashMap<Arc<str>, DropReport>>,
}

impl Shared {
    fn begin(&self) {
        self.pending.fetch_add(1, Ordering::SeqCst);
        if let Some(a) = self.activity.get() {
            a.begin_background(1);
        }
    }

    fn end(&self) {
        if let Some(a) = self.activity.get() {
            a.end_background(1);
        }
        if self.pending.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.drained.notify_waiters();
        }
    }

    /// Counts one Event not recorded: the queue was full or shut down.
    fn dropped(
        &self,
        stats: &ExecutorStats,
        plugin: &Arc<str>,
        counters: &ActionCounters,
        why: &'static str,
    ) {
        stats.events_dropped.fetch_add(1, Ordering::Relaxed);
        counters.events_dropped.inc();
        let now = Instant::now();
        let mut warned = self.warned.lock();
        let (last, since) = warned.entry(plugin.clone()).or_insert((None, 0));
        *since += 1;
        if last.is_none_or(|t| now.duration_since(t) >= WARN_EVERY) {
            EventsDropped {
                plugin,
                dropped: *since,
                capacity: self.capacity,
                why,
            }
            .emit();
            *last = Some(now);
            *since = 0;
        }
    }
}

impl EventQueue {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            shared: Arc::new(Shared {
                capacity: capacity.max(1),
                pending: AtomicU64::new(0),
                drained: Notify::new(),
                activity: OnceLock::new(),
                closed: AtomicBool::new(false),
                warned: Mutex::new(HashMap::new()),
            }),
            sender: OnceLock::new(),
            stop: CancellationToken::new(),
            tasks: TaskTracker::new(),
        }
    }

    /// Counts queued Events as `activity`'s background work (the first
    /// one set stays).
    pub(crate) fn set_activity(&mut self, activity: Arc<Activity>) {
        let _ = self.shared.activity.set(activity);
    }

    /// Queues one successful call's Events, dropping (and counting) those
    /// that do not fit.
    pub(crate) fn enqueue(
        &self,
        runner: &Runner,
        plugin: &str,
        counters: &ActionCounters,
        events: Vec<Action>,
    ) {
        if events.is_empty() {
            return;
        }
        let plugin: Arc<str> = Arc::from(plugin);
        if self.shared.closed.load(Ordering::SeqCst) {
            for _ in &events {
                self.shared.dropped(
                    &runner.stats,
                    &plugin,
                    counters,
                    "the host is shutting down",
                );
            }
            return;
        }
        let sender = self.sender.get_or_init(|| self.start(runner.clone()));
        let shared_counters = Arc::new(counters.clone());
        for action in events {
            // Counted before it is visible to the worker, so the count
            // never goes below zero.
            self.shared.begin();
            let queued = Queued {
                plugin: plugin.clone(),
                action,
                counters: shared_counters.clone(),
            };
            if let Err(e) = sender.try_send(queued) {
                self.shared.end();
                let why = match e {
                    mpsc::error::TrySendError::Full(_) => "the Event queue is full",
                    mpsc::error::TrySendError::Closed(_) => "the host is shutting down",
                };
                self.shared.dropped(&runner.stats, &plugin, counters, why);
            }
        }
    }

    fn start(&self, runner: Runner) -> mpsc::Sender<Queued> {
        let (tx, rx) = mpsc::channel(self.shared.capacity);
        self.tasks
            .spawn(serve(runner, rx, self.shared.clone(), self.stop.clone()));
        tx
    }

    pub(crate) fn pending(&self) -> u64 {
        self.shared.pending.load(Ordering::SeqCst)
    }

    /// Waits until nothing is queued or being recorded.
    pub(crate) async fn idle(&self) {
        loop {
            let drained = self.shared.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            if self.pending() == 0 {
                return;
            }
            drained.await;
        }
    }

    /// Refuses new Events, waits up to `grace` for the queued ones, then
    /// stops the worker (what is left is dropped and counted).
    pub(crate) async fn shutdown(&self, grace: Duration) {
        self.shared.closed.store(true, Ordering::SeqCst);
        if tokio::time::timeout(grace, self.idle()).await.is_err() {
            tracing::warn!(
                pending = self.pending(),
                ?grace,
                "Events still queued at shutdown are not recorded"
            );
        }
        self.stop.cancel();
        self.tasks.close();
        self.tasks.wait().await;
    }
}

impl Drop for EventQueue {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The worker: records queued Events one at a time, in order, until
/// stopped or the queue is gone.
async fn serve(
    runner: Runner,
    mut rx: mpsc::Receiver<Queued>,
    shared: Arc<Shared>,
    stop: CancellationToken,
) {
    // The executor's waits between attempts are abandoned by the select
    // below, not by a fence: an Event has no plugin version to outlive.
    let no_fence = CancellationToken::new();
    let mut gate = runner.leadership().subscribe();
    // Since when the gate has been closed, while it is (tokio's clock, as
    // the waits).
    let mut closed_since: Option<tokio::time::Instant> = None;
    loop {
        let q = tokio::select! {
            biased;
            () = stop.cancelled() => break,
            q = rx.recv() => match q {
                Some(q) => q,
                None => break,
            },
        };
        let started = runner.feed_admits().then(Instant::now);
        // A write cut off by a term change (the shards held moved) or a
        // short closure of the gate is tried again: an Event outlives terms.
        let mut tries = 0;
        let result = loop {
            if gate.borrow_and_update().leading {
                closed_since = None;
            } else {
                let since = *closed_since.get_or_insert_with(tokio::time::Instant::now);
                let left = GATE_PAUSE.saturating_sub(since.elapsed());
                tokio::select! {
                    biased;
                    () = stop.cancelled() => {}
                    _ = tokio::time::timeout(left, gate.wait_for(|s| s.leading)) => {}
                }
            }
            let result = tokio::select! {
                biased;
                () = stop.cancelled() => Err((ActionError::Stopping, 0)),
                r = runner.run(&q.plugin, &q.counters, &q.action, &no_fence, None) => r,
            };
            match result {
                Err((ActionError::NotLeader, _))
                    if tries < 2
                        && !stop.is_cancelled()
                        && (gate.borrow().leading
                            || closed_since.is_none_or(|c| c.elapsed() < GATE_PAUSE)) =>
                {
                    tries += 1;
                }
                result => break result,
            }
        };
        if let Some(started) = started {
            runner.to_feed(&q.plugin, &q.action, &result, started.elapsed());
        }
        if matches!(result, Err((ActionError::Stopping, _))) {
            shared.dropped(
                &runner.stats,
                &q.plugin,
                &q.counters,
                "the host is shutting down",
            );
        }
        shared.end();
    }
    // Stopped: what is still queued is not recorded. Closed first, so no
    // Event can arrive after the last look.
    rx.close();
    while let Ok(q) = rx.try_recv() {
        shared.dropped(
            &runner.stats,
            &q.plugin,
            &q.counters,
            "the host is shutting down",
        );
        shared.end();
    }
}
