//! Per-plugin dispatch, keyed and level-triggered: informer deltas are
//! filtered (delta types, fields that matter) and queued per key (a
//! subscription pair and an object: at most one item pending, one in
//! flight), handed to the plugin's instances up to its concurrency, and
//! their actions executed. A failed key is tried again after a capped
//! backoff with the object's latest cached state (merged with what arrived
//! meanwhile; the delete if it went), never the stale object of the failed
//! attempt; requeues are one per key, the earliest wins. Each plugin has
//! its own queue and workers, so a slow or failing plugin never delays
//! another.
//!
//! The parts, each owning one thing: [`queue`] the keys and their timers,
//! [`retry`] when a failed key goes again, [`intake`] what an informer's
//! deltas become, [`worker`] the calls and their outcomes; this module
//! the version's lifetime: start, the swap's cut and hand-over, stop.
//!
//! A new plugin version takes over what the old one had not handled: the
//! old version stops delivering deltas the new one receives (the cut), and
//! the deletes it still held, waiting or retrying (or in a call that
//! outlived the stop grace, which is fenced), go to the new version before
//! its replay of the cache.
//!
//! Deliveries are gated twice: until the plugin's caches have synced, and
//! by leadership. An intake belongs to one leadership term and forwards
//! only while that term lasts (a new term resubscribes, replaying the
//! cache); losing leadership drops everything queued and every timer.

mod background;
mod carry;
pub mod dead;
mod figures;
mod intake;
pub mod internal_events;
pub mod latency;
pub mod queue;
pub mod retry;
mod worker;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::actions::executor::Executor;
use crate::actions::rate::ActionRate;
use crate::informer::{Delta, DeltaType, Informer, InformerSpec};
use crate::kind::Gvk;
use crate::leader::Leadership;
use crate::object::{KObject, ObjectKey};
use crate::runtime::{Actor, CallDelta, CallOutcome, Caller};
use crate::telemetry::{PluginCounters, PluginTelemetry, Telemetry};
pub use dead::{DeadLetterRecord, DeadLetters};
pub use latency::LatencyHistogram;
use queue::{Item, KeyedQueue};
pub use retry::Failure;
use retry::{RetryPolicy, RetryRate};
pub use worker::MAX_REQUEUE_AFTER;

pub use crate::activity::Activity;

/// Per-plugin counters.
#[derive(Debug, Default)]
pub struct PluginStats {
    pub delivered: AtomicU64,
    pub failed_calls: AtomicU64,
    pub retries: AtomicU64,
    /// Keys given up on (permanent failures) or parked.
    pub dead: AtomicU64,
    pub filtered: AtomicU64,
    pub coalesced: AtomicU64,
    pub consecutive_traps: AtomicU64,
    /// Times the plugin was quarantined (see [`DispatchOptions::unhealthy_after`]).
    pub quarantines: AtomicU64,
    /// Stops whose grace ran out with calls in flight: those calls were
    /// fenced (their remaining actions refused), their deletes handed to the
    /// next version.
    pub fenced_stops: AtomicU64,
    /// Leadership losses that dropped what was queued.
    pub leadership_drops: AtomicU64,
    /// Deltas an idle worker took from a busy sibling's batch.
    pub stolen: AtomicU64,
    /// From the informer receiving a delta to the plugin's call returning
    /// (queueing, coalescing and retries included).
    pub latency: LatencyHistogram,
    /// The plugin calls alone.
    pub call_time: LatencyHistogram,
    /// Keys given up on or parked, listed and handed to the next version.
    pub dead_letters: Mutex<DeadLetters>,
    /// Deltas a version handed to its successor (deletes it had not
    /// handled, dead letters).
    pub handed_over: AtomicU64,
    /// The queues of the plugin's running versions (two during a swap),
    /// read only when metrics are scraped.
    queues: Mutex<Vec<std::sync::Weak<Shared>>>,
}

impl PluginStats {
    fn sum_queues(&self, f: impl Fn(&KeyedQueue<Key>) -> usize) -> u64 {
        let mut queues = self.queues.lock();
        queues.retain(|q| q.strong_count() > 0);
        queues
            .iter()
            .filter_map(std::sync::Weak::upgrade)
            .map(|q| f(&q.queue.lock()) as u64)
            .sum()
    }

    /// Deltas waiting in the plugin's queues, ready or backing off (calls
    /// in flight excluded).
    pub fn queue_depth(&self) -> u64 {
        self.sum_queues(KeyedQueue::pending_len)
    }

    /// [`Self::queue_depth`] per shard of `shards` (empty unsharded).
    pub fn queue_depth_by_shard(&self, shards: &crate::shard::ShardSet) -> Vec<u64> {
        if !shards.is_sharded() {
            return Vec::new();
        }
        let mut out = vec![0u64; shards.count as usize];
        let mut queues = self.queues.lock();
        queues.retain(|q| q.strong_count() > 0);
        for q in queues.iter().filter_map(std::sync::Weak::upgrade) {
            for obj in q.queue.lock().pending_objects() {
                if let Some(n) = shards
                    .shard_of_object(obj)
                    .and_then(|i| out.get_mut(i as usize))
                {
                    *n += 1;
                }
            }
        }
        out
    }

    /// Keys waiting on a timer: backing off after a failure, or with a
    /// requeue pending.
    pub fn delayed_depth(&self) -> u64 {
        self.sum_queues(KeyedQueue::delayed_len)
    }

    /// Keys with a requeue pending (one per key at most).
    pub fn requeues_pending(&self) -> u64 {
        self.sum_queues(KeyedQueue::requeues_len)
    }
}

#[derive(Debug, Clone)]
pub struct DispatchOptions {
    /// Failed attempts after which a key is parked as a dead letter (still
    /// retried at `max_backoff`); `None`, the default, parks only when the
    /// backoff reaches `max_backoff`.
    pub max_attempts: Option<u32>,
    pub base_backoff: Duration,
    /// The longest wait between attempts of one key; a key whose backoff
    /// reaches it is parked and retried at this interval.
    pub max_backoff: Duration,
    /// Retries per second of all of a plugin's keys together, and the
    /// burst above it.
    pub retry_rate: u32,
    pub retry_burst: u32,
    /// Consecutive failed calls (traps, deadlines, out-of-memory, instances
    /// that cannot start) after which the plugin is quarantined: no call and
    /// no new instance for a period, its deltas kept queued.
    pub unhealthy_after: u64,
    /// The first quarantine period; each one in a row doubles it.
    pub quarantine_base: Duration,
    /// The longest quarantine period.
    pub quarantine_max: Duration,
    /// How long stopping a version (a swap, an unload) waits for its calls
    /// in flight; no further delta is called once stopping, and a call
    /// still running after it is fenced (its remaining actions refused).
    pub stop_grace: Duration,
    /// Actions a second the plugin's calls may have executed (the
    /// sidecar's `limits.actionsPerSecond`); 0 is unlimited.
    pub actions_per_second: u32,
    /// An action rate the plugin shares with others (a tenant namespace's
    /// quota), drawn from after its own.
    pub shared_rate: Option<crate::actions::rate::SharedRate>,
    /// The resync period of subscriptions that ask for the host's default
    /// (`dispatch.defaultResync`); `None` turns those resyncs off.
    pub default_resync: Option<Duration>,
    /// The most deltas a subscription's intake queues under one lock of
    /// the queue and one wake-up of the workers ([`INTAKE_BATCH`]); 1
    /// queues each delta alone.
    pub intake_batch: usize,
}

/// Deltas queued at once by default: a relist or a busy watch hands
/// hundreds at a time, and a batch this size holds the queue's lock for
/// microseconds.
pub const INTAKE_BATCH: usize = 256;

/// The longest wait between attempts of one key by default; a key whose
/// backoff reaches it is parked (the 13th failed attempt from the 100 ms
/// base, after 7 to 14 minutes of failures).
pub const DEFAULT_MAX_BACKOFF: Duration = Duration::from_secs(300);

impl Default for DispatchOptions {
    fn default() -> Self {
        Self {
            max_attempts: None,
            base_backoff: Duration::from_millis(100),
            max_backoff: DEFAULT_MAX_BACKOFF,
            retry_rate: 100,
            retry_burst: 1000,
            unhealthy_after: 3,
            quarantine_base: Duration::from_secs(1),
            quarantine_max: Duration::from_secs(300),
            stop_grace: Duration::from_secs(10),
            actions_per_second: 0,
            shared_rate: None,
            default_resync: Some(crate::runtime::DEFAULT_RESYNC),
            intake_batch: INTAKE_BATCH,
        }
    }
}

impl DispatchOptions {
    /// How a plugin's failed keys are retried under these options.
    pub fn policy(&self) -> RetryPolicy {
        RetryPolicy {
            base: self.base_backoff,
            cap: self.max_backoff,
            max_attempts: self.max_attempts,
            rate: self.retry_rate,
            burst: self.retry_burst,
        }
    }
}

/// What a subscription delivers.
#[derive(Debug, Clone)]
pub struct SubscriptionFilter {
    /// The subscription's index in the plugin's registration: what the
    /// plugin is told; never a key inside the host (see [`SubId`]).
    pub index: u32,
    pub kind: Gvk,
    pub deltas: Vec<DeltaType>,
    pub fields: Vec<String>,
    pub resync: Option<Duration>,
}

impl SubscriptionFilter {
    /// Whether the subscription delivers a delta of type `dtype` (with its
    /// old and new objects): its delta types, and for an update whether it
    /// changed a field that matters.
    pub fn wants(&self, dtype: DeltaType, old: Option<&KObject>, new: Option<&KObject>) -> bool {
        self.deltas.contains(&dtype)
            && match (dtype, old, new) {
                (DeltaType::Updated, Some(old), Some(new)) => self.update_matters(old, new),
                _ => true,
            }
    }

    /// Whether an update changed anything the plugin declared it cares about.
    fn update_matters(&self, old: &KObject, new: &KObject) -> bool {
        if self.fields.is_empty() {
            return true;
        }
        if !old.labels().eq(new.labels())
            || !old.annotations().eq(new.annotations())
            || old.meta().deletion_timestamp != new.meta().deletion_timestamp
        {
            return true;
        }
        self.fields
            .iter()
            .any(|p| old.raw_field(p) != new.raw_field(p))
    }
}

/// A (subscription, informer) pair inside one plugin version: its position
/// in the version's subscriptions. A subscription narrowed to N namespaces
/// is N pairs with N informers; the registration index is only what the
/// plugin is told.
pub type SubId = u32;

/// A queue key: subscription pair and object.
pub type Key = (SubId, ObjectKey);

/// A plugin that keeps failing is left alone for a growing period instead
/// of being re-instantiated for every delta.
#[derive(Debug)]
struct Quarantine {
    /// Quarantined until then.
    until: Option<tokio::time::Instant>,
    /// The next period.
    next: Duration,
}

/// One subscription pair's filter and cache (shared: a retry or requeue
/// reads it without copying the filter).
#[derive(Debug)]
struct Sub {
    filter: SubscriptionFilter,
    informer: Arc<Informer>,
}

struct Shared {
    plugin: Arc<str>,
    queue: Mutex<KeyedQueue<Key>>,
    wake: Notify,
    idle: Notify,
    /// A timer was set that may be earlier than the one slept on.
    timers_changed: Notify,
    activity: Arc<Activity>,
    stats: Arc<PluginStats>,
    options: DispatchOptions,
    policy: RetryPolicy,
    retry_rate: Mutex<RetryRate>,
    executor: Arc<Executor>,
    leadership: Leadership,
    /// No new call once cancelled.
    stopping: CancellationToken,
    /// Cancelled when the stop grace runs out: actions not yet started by
    /// calls still running are refused.
    fence: CancellationToken,
    /// Set once every informer the plugin subscribes to has synced: like a
    /// client-go controller, no delta is handed out before the caches the
    /// handler reads are complete.
    ready: tokio::sync::watch::Sender<bool>,
    /// Workers (one per instance), for fair batch sizes and sibling wakes.
    workers: usize,
    /// Each worker's batch: taken from the queue in one lock, called one by
    /// one; a worker with nothing else to do takes half of another's, so
    /// keys behind a slow call wait only while no sibling is free.
    batches: Vec<Mutex<std::collections::VecDeque<(Key, Item)>>>,
    quarantine: Mutex<Quarantine>,
    /// Set while a successor subscribes: per subscription pair, the last
    /// sequence number this version still delivers; later deltas are the
    /// successor's and wait in `held`.
    cuts: Mutex<Option<HashMap<SubId, u64>>>,
    held: Mutex<Vec<(Key, Item)>>,
    counters: PluginCounters,
    rate: ActionRate,
    telemetry: Telemetry,
    /// Each subscription pair's filter and informer: where a retry or a
    /// requeue reads the object's current state.
    subs: Mutex<HashMap<SubId, Arc<Sub>>>,
    /// Per key, the state this version last handled in this leadership
    /// term: a delta whose current state it is already is not delivered
    /// again, and an update's `old` is it. Released with the object.
    delivered: Mutex<HashMap<Key, crate::object::ObjectHandle>>,
    /// Each subscription pair's replay cut per term, and the deletes of an
    /// old subscription waiting for its successor's (see [`carry`]).
    carried: Mutex<carry::Cuts>,
}

impl Shared {
    fn sub(&self, id: SubId) -> Option<Arc<Sub>> {
        self.subs.lock().get(&id).cloned()
    }

    /// The key's object is gone from the cache: what this version knew of
    /// it goes with it (a pending requeue, the state last handled, a dead
    /// letter).
    fn object_gone(&self, key: &Key) {
        self.queue.lock().drop_requeue(key);
        self.forget_delivered(key);
        self.stats.dead_letters.lock().resolve(key);
    }

    /// Forgets the state last handled for `key` (its object is gone),
    /// giving back the map's room once it is three quarters empty.
    fn forget_delivered(&self, key: &Key) {
        let mut delivered = self.delivered.lock();
        if delivered.remove(key).is_some() {
            let (len, cap) = (delivered.len(), delivered.capacity());
            if cap > 1024 && len * 4 < cap {
                delivered.shrink_to(len * 2);
            }
        }
    }
}

/// What a version's dispatcher is built from, each owned elsewhere.
pub struct DispatcherParts {
    pub plugin: Arc<str>,
    pub actors: Vec<Arc<Actor>>,
    pub executor: Arc<Executor>,
    pub activity: Arc<Activity>,
    pub stats: Arc<PluginStats>,
    pub options: DispatchOptions,
    pub leadership: Leadership,
    pub telemetry: PluginTelemetry,
}

/// One plugin version's dispatcher.
pub struct Dispatcher {
    shared: Arc<Shared>,
    tasks: TaskTracker,
    intake_cancel: CancellationToken,
    worker_cancel: CancellationToken,
}

/// A dispatcher dropped without [`stop`](Dispatcher::stop) (a version that
/// failed to start) still ends its workers, which run on the instances'
/// threads rather than as runtime tasks.
impl Drop for Dispatcher {
    fn drop(&mut self) {
        self.intake_cancel.cancel();
        self.worker_cancel.cancel();
    }
}

impl std::fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatcher")
            .field("plugin", &self.shared.plugin)
            .finish()
    }
}

/// What a worker calls: a plugin instance (the runtime's [`Caller`]), or
/// a scripted handler in tests.
pub trait Handler {
    fn handle(&mut self, delta: &CallDelta) -> CallOutcome;
}

impl Handler for Caller {
    fn handle(&mut self, delta: &CallDelta) -> CallOutcome {
        Caller::handle(self, delta)
    }
}

impl Dispatcher {
    pub fn new(parts: DispatcherParts) -> Self {
        let actors = parts.actors.clone();
        let workers = actors.len();
        Self::build(parts, workers, |shared, tasks, worker_cancel| {
            let runtime = tokio::runtime::Handle::current();
            for (me, actor) in actors.into_iter().enumerate() {
                let guard = shared
                    .telemetry
                    .task(format!("dispatcher worker of plugin {}", shared.plugin));
                let (shared, cancel, runtime) =
                    (shared.clone(), worker_cancel.clone(), runtime.clone());
                // The worker runs on the instance's own thread and calls it
                // inline: a delta costs no thread hand-off, and a slow call
                // blocks only this instance.
                tasks.spawn(async move {
                    let served = actor
                        .serve(move |caller| worker::run(&runtime, shared, me, caller, cancel))
                        .await;
                    if let Err(e) = served {
                        tracing::error!(plugin = %actor.name(), error = %e, "dispatcher worker ended abnormally: the instance thread stopped");
                    }
                    guard.done();
                });
            }
        })
    }

    /// A dispatcher whose workers call `handlers` (each on a thread of its
    /// own, as instances run), for tests without a component.
    #[cfg(test)]
    fn with_handlers(parts: DispatcherParts, handlers: Vec<Box<dyn Handler + Send>>) -> Self {
        let workers = handlers.len();
        Self::build(parts, workers, |shared, tasks, worker_cancel| {
            let runtime = tokio::runtime::Handle::current();
            for (me, mut handler) in handlers.into_iter().enumerate() {
                let (shared, cancel, runtime) =
                    (shared.clone(), worker_cancel.clone(), runtime.clone());
                let (done_tx, done_rx) = tokio::sync::oneshot::channel();
                std::thread::spawn(move || {
                    worker::run(&runtime, shared, me, &mut *handler, cancel);
                    let _ = done_tx.send(());
                });
                tasks.spawn(async move {
                    let _ = done_rx.await;
                });
            }
        })
    }

    fn build(
        parts: DispatcherParts,
        workers: usize,
        spawn_workers: impl FnOnce(&Arc<Shared>, &TaskTracker, &CancellationToken),
    ) -> Self {
        let DispatcherParts {
            plugin,
            actors: _,
            executor,
            activity,
            stats,
            options,
            leadership,
            telemetry:
                PluginTelemetry {
                    counters,
                    telemetry,
                },
        } = parts;
        let policy = options.policy();
        let shared = Arc::new(Shared {
            plugin: plugin.clone(),
            queue: Mutex::new(KeyedQueue::default()),
            wake: Notify::new(),
            idle: Notify::new(),
            timers_changed: Notify::new(),
            activity,
            stats,
            retry_rate: Mutex::new(RetryRate::new(policy.rate, policy.burst)),
            policy,
            executor,
            leadership,
            stopping: CancellationToken::new(),
            fence: CancellationToken::new(),
            ready: tokio::sync::watch::channel(false).0,
            workers,
            batches: (0..workers.max(1))
                .map(|_| Mutex::new(std::collections::VecDeque::new()))
                .collect(),
            quarantine: Mutex::new(Quarantine {
                until: None,
                next: options.quarantine_base,
            }),
            rate: telemetry
                .metrics()
                .action_rate(&plugin, options.actions_per_second)
                .with_shared(options.shared_rate.clone()),
            options,
            cuts: Mutex::new(None),
            held: Mutex::new(Vec::new()),
            counters,
            telemetry,
            subs: Mutex::new(HashMap::new()),
            delivered: Mutex::new(HashMap::new()),
            carried: Mutex::new(carry::Cuts::default()),
        });
        shared.stats.queues.lock().push(Arc::downgrade(&shared));
        let tasks = TaskTracker::new();
        let worker_cancel = CancellationToken::new();
        spawn_workers(&shared, &tasks, &worker_cancel);
        tasks.spawn(background::drop_on_loss(
            shared.clone(),
            worker_cancel.clone(),
        ));
        tasks.spawn(background::timers(shared.clone(), worker_cancel.clone()));
        Self {
            shared,
            tasks,
            intake_cancel: CancellationToken::new(),
            worker_cancel,
        }
    }

    /// Starts consuming the informer deltas of subscription pair `id`,
    /// forwarded only while leadership term `term` lasts; `cut` is the
    /// informer's sequence number the subscription's replay was taken at
    /// (its [`SubscriptionHandle::cut`](crate::informer::SubscriptionHandle)).
    /// A pair added again (a new term's replay) replaces its informer.
    pub fn add_intake(
        &self,
        id: SubId,
        filter: SubscriptionFilter,
        informer: Arc<Informer>,
        rx: mpsc::UnboundedReceiver<Delta>,
        term: u64,
        cut: u64,
    ) {
        // Deletes an older subscription of the pair held for this one, and
        // those set aside while a shard was suspended (see `carry`).
        let (waited, mut settled) = self.shared.carried.lock().subscribed(id, term, cut);
        let mut on = Vec::new();
        let mut aside = Vec::new();
        for (from, key, item) in waited {
            match carry::goes(&self.shared, from, &item.delta) {
                carry::Goes::Now(_) => on.push((key, item.term(term))),
                carry::Goes::Aside => {
                    settled += item.weight;
                    aside.push((key, item.term(from)));
                }
                carry::Goes::Nowhere => settled += item.weight,
            }
        }
        carry::set_aside(&self.shared, aside);
        if settled > 0 {
            self.shared.activity.settle(settled);
        }
        on.extend(carry::resumed(&self.shared, id, term));
        intake::push_all(&self.shared, &mut on);
        let guard = self.shared.telemetry.task(format!(
            "dispatcher intake of plugin {} from {}",
            self.shared.plugin,
            informer.spec()
        ));
        self.shared.subs.lock().insert(
            id,
            Arc::new(Sub {
                filter: filter.clone(),
                informer: informer.clone(),
            }),
        );
        let run = intake::run(
            self.shared.clone(),
            id,
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

    /// The informer spec of subscription pair `id`.
    pub fn spec_of(&self, id: SubId) -> Option<InformerSpec> {
        self.shared.sub(id).map(|s| s.informer.spec().clone())
    }

    /// From now on, delivers only deltas of subscription pair `i` numbered
    /// at most `cuts[i]` (a successor receives the later ones); the others
    /// wait for [`stop`](Self::stop). Pairs not named are cut at 0.
    pub fn cut(&self, cuts: HashMap<SubId, u64>) {
        *self.shared.cuts.lock() = Some(cuts);
    }

    /// Undoes [`cut`](Self::cut) (the successor failed to start).
    pub fn uncut(&self) {
        *self.shared.cuts.lock() = None;
        let held = std::mem::take(&mut *self.shared.held.lock());
        let mut q = self.shared.queue.lock();
        for (key, item) in held.into_iter().rev() {
            q.push_front(key, item);
        }
        drop(q);
        self.shared.wake.notify_waiters();
    }

    /// Stop's first step: no further delta is queued or called; the calls
    /// in flight go on.
    fn begin_stop(&self) {
        self.intake_cancel.cancel();
        self.shared.stopping.cancel();
    }

    /// Stops taking deltas and calls (no further delta is called), waits
    /// for the calls in flight (at most the stop grace, after which they
    /// are fenced: their remaining actions refused), and returns what was
    /// not handled: waiting or backing off, held back by the cut, and the
    /// deletes of fenced calls, each object's deltas oldest first. Their
    /// weight is still unsettled: the caller hands them over or
    /// [`drops`](Self::drop_items) them.
    pub async fn stop(&self) -> Vec<(Key, Item)> {
        self.begin_stop();
        let deadline = tokio::time::Instant::now() + self.shared.options.stop_grace;
        let drained = async {
            loop {
                let idle = self.shared.idle.notified();
                if self.shared.queue.lock().in_flight_len() == 0 {
                    break;
                }
                idle.await;
            }
        };
        let mut fenced = Vec::new();
        if tokio::time::timeout_at(deadline, drained).await.is_err() {
            self.shared.fence.cancel();
            fenced = self.shared.queue.lock().abandon_in_flight();
            self.shared
                .stats
                .fenced_stops
                .fetch_add(1, Ordering::Relaxed);
            tracing::warn!(plugin = %self.shared.plugin, grace = ?self.shared.options.stop_grace, handed_deletes = fenced.len(), "calls in flight did not finish within the stop grace: fenced (their remaining actions are refused), their deletes go to the next version");
        }
        self.worker_cancel.cancel();
        self.tasks.close();
        if tokio::time::timeout_at(deadline, self.tasks.wait())
            .await
            .is_err()
        {
            tracing::warn!(plugin = %self.shared.plugin, "dispatcher tasks did not end within the stop grace (a call still running ends at its deadline)");
        }
        // Each object's deltas oldest first: a fenced call's delete was
        // taken from the queue before anything held back by the cut or
        // still waiting for the same object (a call is only started on a
        // delta within the cut, and held ones are the first past it).
        let mut items = fenced;
        items.append(&mut self.shared.held.lock());
        items.extend(self.shared.queue.lock().take_pending());
        items.extend(self.shared.carried.lock().take_waiting());
        items
    }

    /// The deletes it set aside for a suspended shard (see [`carry`]), for
    /// its successor to keep aside in turn ([`keep_aside`](Self::keep_aside)):
    /// queued, they would be delivered while the shard is not held.
    pub fn take_aside(&self) -> Vec<(Key, Item)> {
        carry::take_aside(&self.shared)
    }

    /// Keeps a predecessor's set-aside deletes (already settled) until the
    /// shard is held again, or drops them when another replica took it.
    pub fn keep_aside(&self, items: Vec<(Key, Item)>) {
        carry::set_aside(&self.shared, items);
    }

    /// Settles items that nobody will handle.
    pub fn drop_items(&self, items: &[(Key, Item)]) {
        self.shared
            .activity
            .settle(items.iter().map(|(_, i)| i.weight).sum());
    }

    /// Queues deltas a previous version did not handle, before everything
    /// queued for their objects (this version's replay); call before
    /// [`start_when_synced`](Self::start_when_synced).
    pub fn hand_over(&self, items: Vec<(Key, Item)>) {
        if items.is_empty() {
            return;
        }
        self.shared
            .stats
            .handed_over
            .fetch_add(items.len() as u64, Ordering::Relaxed);
        let mut q = self.shared.queue.lock();
        for (key, item) in items.into_iter().rev() {
            q.push_front(key, item);
        }
    }
}

#[cfg(test)]
mod tests;
