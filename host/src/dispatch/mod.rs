//! Per-plugin dispatch: informer deltas are filtered (delta types, fields
//! that matter), queued per object, handed to the plugin's instances up to
//! its concurrency, retried with exponential backoff, and recorded as dead
//! after the last attempt. Each plugin has its own queue and workers, so a
//! slow or failing plugin never delays another.
//!
//! Deliveries are gated twice: until the plugin's caches have synced, and
//! by leadership. An intake belongs to one leadership term and forwards
//! only while that term lasts (a new term resubscribes, replaying the
//! cache); losing leadership drops everything queued.

pub mod latency;
pub mod queue;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::actions::executor::Executor;
use crate::informer::{Delta, DeltaType, Informer};
use crate::kind::Gvk;
use crate::leader::Leadership;
use crate::object::{KObject, ObjectKey};
use crate::runtime::{Actor, CallDelta, CallError};
use crate::telemetry::events::{DeltaDead, HandlerRetrying, PluginUnhealthy};
use crate::telemetry::{PluginCounters, PluginTelemetry, Telemetry};
pub use latency::LatencyHistogram;
use queue::{Item, KeyedQueue, Pushed};

pub use crate::activity::Activity;

/// Per-plugin counters.
#[derive(Debug, Default)]
pub struct PluginStats {
    pub delivered: AtomicU64,
    pub failed_calls: AtomicU64,
    pub retries: AtomicU64,
    pub dead: AtomicU64,
    pub filtered: AtomicU64,
    pub coalesced: AtomicU64,
    pub consecutive_traps: AtomicU64,
    /// Times the plugin was quarantined (see [`DispatchOptions::unhealthy_after`]).
    pub quarantines: AtomicU64,
    /// From the informer receiving a delta to the plugin's call returning
    /// (queueing, coalescing and retries included).
    pub latency: LatencyHistogram,
    /// The plugin calls alone.
    pub call_time: LatencyHistogram,
    /// The queues of the plugin's running versions (two during a swap),
    /// read only when metrics are scraped.
    queues: Mutex<Vec<std::sync::Weak<Shared>>>,
}

impl PluginStats {
    /// Deltas waiting in the plugin's queues (calls in flight excluded).
    pub fn queue_depth(&self) -> u64 {
        let mut queues = self.queues.lock();
        queues.retain(|q| q.strong_count() > 0);
        queues
            .iter()
            .filter_map(std::sync::Weak::upgrade)
            .map(|q| q.queue.lock().pending_len() as u64)
            .sum()
    }
}

#[derive(Debug, Clone)]
pub struct DispatchOptions {
    pub max_attempts: u32,
    pub base_backoff: Duration,
    pub max_backoff: Duration,
    /// Consecutive failed calls (traps, deadlines, out-of-memory, instances
    /// that cannot start) after which the plugin is quarantined: no call and
    /// no new instance for a period, its deltas kept queued.
    pub unhealthy_after: u64,
    /// The first quarantine period; each one in a row doubles it.
    pub quarantine_base: Duration,
    /// The longest quarantine period.
    pub quarantine_max: Duration,
}

impl Default for DispatchOptions {
    fn default() -> Self {
        Self {
            max_attempts: 5,
            base_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(30),
            unhealthy_after: 3,
            quarantine_base: Duration::from_secs(1),
            quarantine_max: Duration::from_secs(300),
        }
    }
}

/// What a subscription delivers.
#[derive(Debug, Clone)]
pub struct SubscriptionFilter {
    pub index: u32,
    pub kind: Gvk,
    pub deltas: Vec<DeltaType>,
    pub fields: Vec<String>,
    pub resync: Option<Duration>,
}

impl SubscriptionFilter {
    /// Whether an update changed anything the plugin declared it cares about.
    fn update_matters(&self, old: &KObject, new: &KObject) -> bool {
        if self.fields.is_empty() {
            return true;
        }
        let (o, n) = (old.meta(), new.meta());
        if o.labels != n.labels
            || o.annotations != n.annotations
            || o.deletion_timestamp != n.deletion_timestamp
        {
            return true;
        }
        self.fields
            .iter()
            .any(|p| old.raw_field(p) != new.raw_field(p))
    }
}

type Key = (u32, ObjectKey);

/// A plugin that keeps failing is left alone for a growing period instead
/// of being re-instantiated for every delta.
#[derive(Debug)]
struct Quarantine {
    /// Quarantined until then.
    until: Option<tokio::time::Instant>,
    /// The next period.
    next: Duration,
}

struct Shared {
    plugin: Arc<str>,
    queue: Mutex<KeyedQueue<Key>>,
    wake: Notify,
    idle: Notify,
    activity: Arc<Activity>,
    stats: Arc<PluginStats>,
    options: DispatchOptions,
    executor: Arc<Executor>,
    leadership: Leadership,
    stopping: CancellationToken,
    /// Set once every informer the plugin subscribes to has synced: like a
    /// client-go controller, no delta is handed out before the caches the
    /// handler reads are complete.
    ready: tokio::sync::watch::Sender<bool>,
    /// Workers (one per instance), for fair batch sizes.
    workers: usize,
    quarantine: Mutex<Quarantine>,
    counters: PluginCounters,
    telemetry: Telemetry,
}

/// One plugin version's dispatcher.
pub struct Dispatcher {
    shared: Arc<Shared>,
    tasks: TaskTracker,
    intake_cancel: CancellationToken,
    worker_cancel: CancellationToken,
}

impl std::fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatcher")
            .field("plugin", &self.shared.plugin)
            .finish()
    }
}

impl Dispatcher {
    // Its collaborators, each owned elsewhere; a parameter struct would only
    // move this list.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        plugin: Arc<str>,
        actors: Vec<Arc<Actor>>,
        executor: Arc<Executor>,
        activity: Arc<Activity>,
        stats: Arc<PluginStats>,
        options: DispatchOptions,
        leadership: Leadership,
        telemetry: PluginTelemetry,
    ) -> Self {
        let PluginTelemetry {
            counters,
            telemetry,
        } = telemetry;
        let shared = Arc::new(Shared {
            plugin,
            queue: Mutex::new(KeyedQueue::default()),
            wake: Notify::new(),
            idle: Notify::new(),
            activity,
            stats,
            executor,
            leadership,
            stopping: CancellationToken::new(),
            ready: tokio::sync::watch::channel(false).0,
            workers: actors.len(),
            quarantine: Mutex::new(Quarantine {
                until: None,
                next: options.quarantine_base,
            }),
            options,
            counters,
            telemetry,
        });
        shared.stats.queues.lock().push(Arc::downgrade(&shared));
        let tasks = TaskTracker::new();
        let worker_cancel = CancellationToken::new();
        for actor in actors {
            let guard = shared
                .telemetry
                .task(format!("dispatcher worker of plugin {}", shared.plugin));
            let run = worker(shared.clone(), actor, worker_cancel.clone(), tasks.clone());
            tasks.spawn(async move {
                run.await;
                guard.done();
            });
        }
        tasks.spawn(drop_on_loss(shared.clone(), worker_cancel.clone()));
        Self {
            shared,
            tasks,
            intake_cancel: CancellationToken::new(),
            worker_cancel,
        }
    }

    /// Starts consuming one subscription's informer deltas, forwarded only
    /// while leadership term `term` lasts.
    pub fn add_intake(
        &self,
        filter: SubscriptionFilter,
        informer: Arc<Informer>,
        rx: mpsc::UnboundedReceiver<Delta>,
        term: u64,
    ) {
        let guard = self.shared.telemetry.task(format!(
            "dispatcher intake of plugin {} from {}",
            self.shared.plugin,
            informer.spec()
        ));
        let run = intake(
            self.shared.clone(),
            filter,
            informer,
            rx,
            term,
            self.intake_cancel.clone(),
        );
        self.tasks.spawn(async move {
            run.await;
            guard.done();
        });
    }

    /// Starts delivering once `informers` have all synced.
    pub fn start_when_synced(&self, informers: Vec<Arc<Informer>>) {
        let shared = self.shared.clone();
        let cancel = self.intake_cancel.clone();
        self.tasks.spawn(async move {
            tokio::select! {
                () = cancel.cancelled() => {}
                () = async { for i in &informers { i.wait_synced().await; } } => {
                    shared.ready.send_replace(true);
                }
            }
        });
    }

    pub fn stats(&self) -> &Arc<PluginStats> {
        &self.shared.stats
    }

    pub fn is_idle(&self) -> bool {
        self.shared.queue.lock().is_idle()
    }

    /// Stops taking deltas, drops what is pending (a replacement version
    /// replays the cache), waits for the calls in flight, and stops.
    pub async fn stop(&self) {
        self.intake_cancel.cancel();
        self.shared.stopping.cancel();
        let dropped = self.shared.queue.lock().clear_pending();
        self.shared.activity.settle(dropped);
        loop {
            let idle = self.shared.idle.notified();
            if self.shared.queue.lock().is_idle() {
                break;
            }
            idle.await;
        }
        self.worker_cancel.cancel();
        self.tasks.close();
        self.tasks.wait().await;
    }
}

/// Whether deltas of intake term `term` may be queued now.
fn in_term(shared: &Shared, term: u64) -> bool {
    let s = shared.leadership.state();
    s.leading && s.term == term
}

/// Drops what is queued whenever leadership is lost: a new term replays
/// the cache, and the leader that follows will have acted on it already.
async fn drop_on_loss(shared: Arc<Shared>, cancel: CancellationToken) {
    let mut gate = shared.leadership.subscribe();
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            changed = gate.changed() => if changed.is_err() { return },
        }
        let state = *gate.borrow_and_update();
        if state.leading {
            continue;
        }
        let (dropped, idle) = {
            let mut q = shared.queue.lock();
            (q.clear_pending(), q.is_idle())
        };
        shared.activity.settle(dropped);
        tracing::info!(plugin = %shared.plugin, dropped, term = state.term, "not the leader: dropped queued deltas");
        if idle {
            shared.idle.notify_waiters();
        }
    }
}

fn push(shared: &Shared, key: Key, item: Item) {
    let pushed = shared.queue.lock().push(key, item);
    match pushed {
        Pushed::Queued => shared.wake.notify_one(),
        Pushed::Coalesced => {
            shared.stats.coalesced.fetch_add(1, Ordering::Relaxed);
        }
        Pushed::Cancelled(w) => {
            shared.stats.coalesced.fetch_add(1, Ordering::Relaxed);
            shared.activity.settle(w);
        }
        Pushed::Dropped => {}
    }
}

async fn intake(
    shared: Arc<Shared>,
    filter: SubscriptionFilter,
    informer: Arc<Informer>,
    mut rx: mpsc::UnboundedReceiver<Delta>,
    term: u64,
    cancel: CancellationToken,
) {
    let mut resync = filter.resync.map(|period| {
        let mut t = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        t
    });
    loop {
        let delta = tokio::select! {
            () = cancel.cancelled() => break,
            d = rx.recv() => match d { Some(d) => d, None => break },
            _ = async { match resync.as_mut() { Some(t) => t.tick().await, None => std::future::pending().await } } => {
                if filter.deltas.contains(&DeltaType::Resync) && in_term(&shared, term) {
                    let snap = informer.store().snapshot();
                    shared.activity.emit(snap.len() as u64);
                    for obj in snap.iter() {
                        let d = CallDelta { dtype: DeltaType::Resync, subscription: filter.index, kind: filter.kind.clone(),
                            object: Some(obj.clone()), old: None, initial: false, final_state_unknown: false };
                        push(&shared, (filter.index, obj.key()), Item::new(d));
                    }
                }
                continue;
            }
        };
        let wanted = in_term(&shared, term)
            && filter.deltas.contains(&delta.dtype)
            && match (delta.dtype, &delta.old, &delta.object) {
                (DeltaType::Updated, Some(old), Some(new)) => {
                    let m = filter.update_matters(old, new);
                    if !m {
                        shared.stats.filtered.fetch_add(1, Ordering::Relaxed);
                    }
                    m
                }
                _ => true,
            };
        if !wanted {
            shared.activity.settle(1);
            continue;
        }
        let key = match &delta.object {
            Some(o) => (filter.index, o.key()),
            // Synced markers get a key of their own per subscription.
            None => (filter.index, ObjectKey::new(None, "")),
        };
        let call = CallDelta {
            dtype: delta.dtype,
            subscription: filter.index,
            kind: filter.kind.clone(),
            object: delta.object,
            old: delta.old,
            initial: delta.initial,
            final_state_unknown: delta.final_state_unknown,
        };
        push(&shared, key, Item::new(call).received_at(delta.received));
    }
    // Whatever is still in the channel will never be handled by this version.
    rx.close();
    let mut rest = 0;
    while rx.try_recv().is_ok() {
        rest += 1;
    }
    shared.activity.settle(rest);
}

fn backoff(options: &DispatchOptions, attempts: u32) -> Duration {
    let exp = options
        .base_backoff
        .saturating_mul(2u32.saturating_pow(attempts.saturating_sub(1)));
    exp.min(options.max_backoff)
}

async fn worker(
    shared: Arc<Shared>,
    actor: Arc<Actor>,
    cancel: CancellationToken,
    tasks: TaskTracker,
) {
    let mut ready = shared.ready.subscribe();
    tokio::select! {
        () = cancel.cancelled() => return,
        _ = ready.wait_for(|r| *r) => {}
    }
    let mut gate = shared.leadership.subscribe();
    loop {
        if !gate.borrow_and_update().leading {
            tokio::select! {
                () = cancel.cancelled() => return,
                r = gate.wait_for(|s| s.leading) => if r.is_err() { return },
            }
        }
        // Quarantined: no call, so no new instance; deltas stay queued.
        let until = shared.quarantine.lock().until;
        if let Some(until) = until
            && until > tokio::time::Instant::now()
        {
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep_until(until) => {}
            }
            tracing::info!(plugin = %shared.plugin, "quarantine over: trying the plugin again");
            continue;
        }
        let next = {
            let wake = shared.wake.notified();
            let popped = shared.queue.lock().pop();
            match popped {
                Some(v) => v,
                None => {
                    tokio::select! {
                        () = cancel.cancelled() => return,
                        () = wake => continue,
                    }
                }
            }
        };
        // Take a fair share of what else is ready (the other workers get
        // the rest), so a backlog costs one thread hand-off per batch.
        let mut batch = vec![next];
        // A plugin that has just failed gets one delta at a time.
        if shared.stats.consecutive_traps.load(Ordering::Relaxed) == 0 {
            let mut q = shared.queue.lock();
            let share = q
                .ready_len()
                .div_ceil(shared.workers.max(1))
                .min(MAX_BATCH - 1);
            for _ in 0..share {
                match q.pop() {
                    Some(v) => batch.push(v),
                    None => break,
                }
            }
            if q.has_ready() {
                // More is ready: let a sibling worker take it.
                shared.wake.notify_one();
            }
        }
        let outcomes = if batch.len() == 1 {
            vec![actor.handle(batch[0].1.delta.clone()).await]
        } else {
            actor
                .handle_batch(batch.iter().map(|(_, i)| i.delta.clone()).collect())
                .await
        };
        let mut outcomes = outcomes.into_iter();
        for (key, item) in batch {
            match outcomes.next() {
                Some((result, elapsed)) => {
                    shared.stats.call_time.record(elapsed);
                    settle(&shared, &tasks, key, item, result).await;
                }
                // Not run: an earlier call of the batch broke the instance.
                // Back to the queue, no attempt counted.
                None => {
                    let mut q = shared.queue.lock();
                    q.requeue_front(&key, item);
                    q.done(&key);
                    drop(q);
                    shared.wake.notify_one();
                }
            }
        }
    }
}

/// Most deltas handed to an instance at once.
const MAX_BATCH: usize = 64;

/// Acts on one call's outcome: run its actions, or retry, or give up.
async fn settle(
    shared: &Arc<Shared>,
    tasks: &TaskTracker,
    key: Key,
    mut item: Item,
    result: Result<Vec<crate::actions::Action>, CallError>,
) {
    let plugin = &*shared.plugin;
    let obj_key = key.1.to_string();
    let kind = item.delta.kind.kind.clone();
    match result {
        Ok(actions) => {
            shared.stats.latency.record(item.received.elapsed());
            shared.stats.delivered.fetch_add(1, Ordering::Relaxed);
            if shared.stats.consecutive_traps.swap(0, Ordering::Relaxed) > 0 {
                let mut q = shared.quarantine.lock();
                if q.until.take().is_some() {
                    tracing::info!(plugin, "plugin recovered: quarantine lifted");
                }
                q.next = shared.options.quarantine_base;
            }
            shared.counters.delivered(item.delta.subscription);
            shared
                .executor
                .execute_all_counted(plugin, &shared.counters.actions, actions)
                .await;
            finish(shared, &key, item.weight);
        }
        Err(err) => {
            if err.is_trap() || matches!(err, CallError::Unavailable(_)) {
                let n = shared
                    .stats
                    .consecutive_traps
                    .fetch_add(1, Ordering::Relaxed)
                    + 1;
                if n == shared.options.unhealthy_after {
                    PluginUnhealthy {
                        plugin,
                        consecutive_failures: n,
                        error: &err,
                    }
                    .emit();
                }
                if n >= shared.options.unhealthy_after {
                    quarantine(shared, n, &err);
                }
            }
            item.attempts += 1;
            if err.retryable() && item.attempts < shared.options.max_attempts {
                let wait = backoff(&shared.options, item.attempts);
                HandlerRetrying {
                    plugin,
                    kind: &kind,
                    key: &obj_key,
                    attempt: item.attempts,
                    error: &err,
                    wait,
                }
                .emit(&shared.stats);
                let shared2 = shared.clone();
                let stopping = shared.stopping.clone();
                tasks.spawn(async move {
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        () = stopping.cancelled() => {
                            // Being replaced or unloaded: the next version replays.
                            finish(&shared2, &key, item.weight);
                            return;
                        }
                    }
                    if !shared2.leadership.is_leader() {
                        // Leadership was lost meanwhile: the queue was dropped.
                        finish(&shared2, &key, item.weight);
                        return;
                    }
                    let mut q = shared2.queue.lock();
                    q.requeue_front(&key, item);
                    q.done(&key);
                    drop(q);
                    shared2.wake.notify_one();
                });
            } else {
                DeltaDead {
                    plugin,
                    kind: &kind,
                    key: &obj_key,
                    attempts: item.attempts,
                    delta: item.delta.dtype,
                    error: &err,
                }
                .emit(&shared.stats);
                finish(shared, &key, item.weight);
            }
        }
    }
}

/// Starts a quarantine period, doubling the next one (up to the maximum).
fn quarantine(shared: &Shared, failures: u64, err: &CallError) {
    let period = {
        let mut q = shared.quarantine.lock();
        let period = q.next;
        q.until = Some(tokio::time::Instant::now() + period);
        q.next = period.saturating_mul(2).min(
            shared
                .options
                .quarantine_max
                .max(shared.options.quarantine_base),
        );
        period
    };
    shared.stats.quarantines.fetch_add(1, Ordering::Relaxed);
    tracing::error!(
        plugin = %shared.plugin,
        consecutive_failures = failures,
        quarantine_ms = period.as_millis() as u64,
        error = %err,
        "plugin quarantined: it keeps failing; no call and no new instance until the period ends, its deltas stay queued, other plugins are unaffected"
    );
}

fn finish(shared: &Shared, key: &Key, weight: u64) {
    let idle = {
        let mut q = shared.queue.lock();
        q.done(key);
        q.is_idle()
    };
    shared.activity.settle(weight);
    shared.wake.notify_one();
    if idle {
        shared.idle.notify_waiters();
    }
}

/// `CallError` is re-exported for callers matching on results.
pub type Failure = CallError;
