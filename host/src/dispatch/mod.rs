//! Per-plugin dispatch: informer deltas are filtered (delta types, fields
//! that matter), queued per object, handed to the plugin's instances up to
//! its concurrency, and their actions executed. A delta whose call fails,
//! or one of whose actions fails, is handled again after an exponential
//! backoff with jitter (its object's later deltas wait behind it), and
//! goes to the plugin's dead letters after the last attempt. Each plugin
//! has its own queue and workers, so a slow or failing plugin never delays
//! another.
//!
//! A new plugin version takes over what the old one had not handled: the
//! old version stops delivering deltas the new one receives (the cut), and
//! the deletes it still held, waiting or retrying, and the plugin's dead
//! deletes go to the new version before its replay of the cache.
//!
//! Deliveries are gated twice: until the plugin's caches have synced, and
//! by leadership. An intake belongs to one leadership term and forwards
//! only while that term lasts (a new term resubscribes, replaying the
//! cache); losing leadership drops everything queued.

pub mod dead;
pub mod latency;
pub mod queue;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::actions::executor::{ActionError, ActionFailure, Executor};
use crate::actions::rate::ActionRate;
use crate::informer::{Delta, DeltaType, Informer};
use crate::kind::Gvk;
use crate::leader::Leadership;
use crate::object::{KObject, ObjectKey};
use crate::runtime::{Actor, CallDelta, CallError, Caller, Handled, LastFailure};
use crate::telemetry::events::{DeltaDead, DeltaRetrying, PluginUnhealthy};
use crate::telemetry::feed::FeedRecord;
use crate::telemetry::{PluginCounters, PluginTelemetry, Telemetry};
pub use dead::{DeadLetterRecord, DeadLetters};
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
    /// Deltas given up on, kept for listing and for the next version.
    pub dead_letters: Mutex<DeadLetters>,
    /// Deltas a version handed to its successor (deletes it had not
    /// handled, dead letters).
    pub handed_over: AtomicU64,
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
    /// How long stopping a version (a swap, an unload) waits for its calls
    /// in flight; no further delta is called once stopping.
    pub stop_grace: Duration,
    /// Actions a second the plugin's calls may have executed (the
    /// sidecar's `limits.actionsPerSecond`); 0 is unlimited.
    pub actions_per_second: u32,
    /// The resync period of subscriptions that ask for the host's default
    /// (`dispatch.defaultResync`); `None` turns those resyncs off.
    pub default_resync: Option<Duration>,
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
            stop_grace: Duration::from_secs(10),
            actions_per_second: 0,
            default_resync: Some(crate::runtime::DEFAULT_RESYNC),
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

/// A queue key: subscription index and object.
pub type Key = (u32, ObjectKey);

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
    /// Workers (one per instance), for fair batch sizes and sibling wakes.
    workers: usize,
    quarantine: Mutex<Quarantine>,
    /// Set while a successor subscribes: per subscription, the last
    /// sequence number this version still delivers; later deltas are the
    /// successor's and wait in `held`.
    cuts: Mutex<Option<HashMap<u32, u64>>>,
    held: Mutex<Vec<(Key, Item)>>,
    counters: PluginCounters,
    rate: ActionRate,
    telemetry: Telemetry,
    /// Each subscription's informer, read when a requeue comes due (the
    /// object's current state).
    informers: Mutex<HashMap<u32, Arc<Informer>>>,
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
            plugin: plugin.clone(),
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
            rate: telemetry
                .metrics()
                .action_rate(&plugin, options.actions_per_second),
            options,
            cuts: Mutex::new(None),
            held: Mutex::new(Vec::new()),
            counters,
            telemetry,
            informers: Mutex::new(HashMap::new()),
        });
        shared.stats.queues.lock().push(Arc::downgrade(&shared));
        let tasks = TaskTracker::new();
        let worker_cancel = CancellationToken::new();
        let runtime = tokio::runtime::Handle::current();
        for actor in actors {
            let guard = shared
                .telemetry
                .task(format!("dispatcher worker of plugin {}", shared.plugin));
            let (shared, cancel, tracker, runtime) = (
                shared.clone(),
                worker_cancel.clone(),
                tasks.clone(),
                runtime.clone(),
            );
            // The worker runs on the instance's own thread and calls it
            // inline: a delta costs no thread hand-off, and a slow call
            // blocks only this instance.
            tasks.spawn(async move {
                let served = actor
                    .serve(move |caller| worker(&runtime, shared, caller, cancel, tracker))
                    .await;
                if let Err(e) = served {
                    tracing::error!(plugin = %actor.name(), error = %e, "dispatcher worker ended abnormally: the instance thread stopped");
                }
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
        self.shared
            .informers
            .lock()
            .insert(filter.index, informer.clone());
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

    /// From now on, delivers only deltas of subscription `i` numbered at
    /// most `cuts[i]` (a successor receives the later ones); the others
    /// wait for [`stop`](Self::stop). Subscriptions not named are cut at 0.
    pub fn cut(&self, cuts: HashMap<u32, u64>) {
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

    /// Stops taking deltas and calls (no further delta is called), waits
    /// for the calls in flight (at most the stop grace), and returns what
    /// was not handled: waiting, held back by the cut, and retrying, each
    /// object's deltas oldest first. Their weight is still unsettled: the
    /// caller hands them over or [`drops`](Self::drop_items) them.
    pub async fn stop(&self) -> Vec<(Key, Item)> {
        self.intake_cancel.cancel();
        self.shared.stopping.cancel();
        let grace = self.shared.options.stop_grace;
        let drained = async {
            loop {
                let idle = self.shared.idle.notified();
                if self.shared.queue.lock().in_flight_len() == 0 {
                    break;
                }
                idle.await;
            }
        };
        if tokio::time::timeout(grace, drained).await.is_err() {
            tracing::warn!(plugin = %self.shared.plugin, ?grace, "calls in flight did not finish within the stop grace; not waiting for them");
        }
        self.worker_cancel.cancel();
        self.tasks.close();
        if tokio::time::timeout(grace, self.tasks.wait())
            .await
            .is_err()
        {
            tracing::warn!(plugin = %self.shared.plugin, "dispatcher tasks did not end within the stop grace");
        }
        let mut items = std::mem::take(&mut *self.shared.held.lock());
        items.extend(self.shared.queue.lock().take_pending());
        items
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
                    let seq = informer.seq();
                    let snap = informer.store().snapshot();
                    shared.activity.emit(snap.len() as u64);
                    for obj in snap.iter() {
                        let d = CallDelta { object: Some(obj.clone()), ..CallDelta::new(DeltaType::Resync, filter.index, filter.kind.clone()) };
                        push(&shared, (filter.index, obj.key()), Item::new(d).seq(seq));
                    }
                }
                continue;
            }
        };
        accept(&shared, &filter, term, delta);
    }
    // What is still in the channel is queued too: a stopping version hands
    // what it did not handle to its successor.
    rx.close();
    while let Ok(delta) = rx.try_recv() {
        accept(&shared, &filter, term, delta);
    }
}

/// Filters one informer delta and queues it.
fn accept(shared: &Shared, filter: &SubscriptionFilter, term: u64, delta: Delta) {
    let wanted = in_term(shared, term)
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
        return;
    }
    let key = match &delta.object {
        Some(o) => (filter.index, o.key()),
        // Synced markers get a key of their own per subscription.
        None => (filter.index, ObjectKey::new(None, "")),
    };
    let call = CallDelta {
        object: delta.object,
        old: delta.old,
        initial: delta.initial,
        final_state_unknown: delta.final_state_unknown,
        ..CallDelta::new(delta.dtype, filter.index, filter.kind.clone())
    };
    push(
        shared,
        key,
        Item::new(call).received_at(delta.received).seq(delta.seq),
    );
}

/// The wait before attempt `attempts + 1`: exponential from the base
/// backoff up to the maximum, with jitter (between 1x and 2x).
fn backoff(options: &DispatchOptions, attempts: u32) -> Duration {
    use backon::BackoffBuilder;
    backon::ExponentialBuilder::default()
        .with_min_delay(options.base_backoff)
        .with_max_delay(options.max_backoff)
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
        .build()
        .nth(attempts.saturating_sub(1) as usize)
        .unwrap_or(options.max_backoff)
}

/// Whether `item` of subscription `key.0` is beyond this version's cut.
fn beyond_cut(shared: &Shared, key: &Key, item: &Item) -> bool {
    match &*shared.cuts.lock() {
        None => false,
        Some(cuts) => item.seq > cuts.get(&key.0).copied().unwrap_or(0),
    }
}

/// Pops the next delta this version may deliver; those beyond the cut are
/// held for the successor.
fn pop_deliverable(shared: &Shared, q: &mut KeyedQueue<Key>) -> Option<(Key, Item)> {
    loop {
        let (key, item) = q.pop()?;
        if !beyond_cut(shared, &key, &item) {
            return Some((key, item));
        }
        shared.held.lock().push((key.clone(), item));
        q.done(&key);
    }
}

/// One instance's delivery loop, on the instance's thread. The waits and
/// the settling are async and run in `rt`'s context; the call itself runs
/// outside it, as on any plain thread (WASI's blocking host functions enter
/// the runtime themselves, which they cannot do from inside it).
fn worker(
    rt: &tokio::runtime::Handle,
    shared: Arc<Shared>,
    caller: &mut Caller,
    cancel: CancellationToken,
    tasks: TaskTracker,
) {
    let started = rt.block_on(async {
        let mut ready = shared.ready.subscribe();
        tokio::select! {
            () = cancel.cancelled() => false,
            () = shared.stopping.cancelled() => false,
            r = ready.wait_for(|r| *r) => r.is_ok(),
        }
    });
    if !started {
        return;
    }
    let mut gate = shared.leadership.subscribe();
    // Taken from the queue in one lock, called one by one: a backlog costs
    // one lock and one sibling wake per batch, not per delta.
    let mut batch: VecDeque<(Key, Item)> = VecDeque::new();
    loop {
        if batch.is_empty() {
            match next_batch(&shared, &mut batch) {
                Next::Ready => {}
                Next::Stop => return,
                Next::Wait(what) => {
                    if !rt.block_on(wait(&shared, &cancel, &mut gate, what)) {
                        return;
                    }
                    continue;
                }
            }
        }
        if shared.stopping.is_cancelled() {
            // Stopping between deltas: the rest goes back to the queue (for
            // the next version), no attempt counted.
            requeue(&shared, &mut batch);
            return;
        }
        let Some((key, item)) = batch.pop_front() else {
            continue;
        };
        let (result, elapsed) = caller.handle(&item.delta);
        let broken = matches!(&result, Err(e) if e.breaks_instance());
        shared.stats.call_time.record(elapsed);
        rt.block_on(settle(&shared, &tasks, key, item, result, elapsed));
        if broken {
            // Not run on the fresh instance in one go: back to the queue,
            // where quarantine may hold them.
            requeue(&shared, &mut batch);
        }
    }
}

/// Puts a worker's untaken batch back at the front of the queue.
fn requeue(shared: &Shared, batch: &mut VecDeque<(Key, Item)>) {
    for (key, item) in batch.drain(..).rev() {
        back_to_queue(shared, &key, item);
    }
}

/// What a worker does next.
enum Next {
    /// The batch holds deltas to call.
    Ready,
    Wait(Blocked),
    Stop,
}

/// Why a worker cannot call now.
#[derive(Debug, Clone, Copy)]
enum Blocked {
    NotLeading,
    Quarantined(tokio::time::Instant),
    Empty,
}

/// Fills `batch` with the next deltas to call (the first ready one and a
/// fair share of the rest, the other instances' workers getting theirs), or
/// says why there are none; checked without waiting, so a backlog is served
/// without entering the runtime.
fn next_batch(shared: &Shared, batch: &mut VecDeque<(Key, Item)>) -> Next {
    if shared.stopping.is_cancelled() {
        return Next::Stop;
    }
    if !shared.leadership.is_leader() {
        return Next::Wait(Blocked::NotLeading);
    }
    // Quarantined: no call, so no new instance; deltas stay queued.
    if let Some(until) = shared.quarantine.lock().until
        && until > tokio::time::Instant::now()
    {
        return Next::Wait(Blocked::Quarantined(until));
    }
    let mut q = shared.queue.lock();
    let Some(first) = pop_deliverable(shared, &mut q) else {
        return Next::Wait(Blocked::Empty);
    };
    batch.push_back(first);
    // A plugin that has just failed gets one delta at a time.
    if shared.stats.consecutive_traps.load(Ordering::Relaxed) == 0 {
        let share = q
            .ready_len()
            .div_ceil(shared.workers.max(1))
            .min(MAX_BATCH - 1);
        for _ in 0..share {
            match pop_deliverable(shared, &mut q) {
                Some(v) => batch.push_back(v),
                None => break,
            }
        }
    }
    if shared.workers > 1 && q.has_ready() {
        // More is ready: let a sibling instance take it.
        shared.wake.notify_one();
    }
    Next::Ready
}

/// Most deltas a worker takes from the queue at once.
const MAX_BATCH: usize = 64;

/// Waits until `blocked` may have changed; false when the worker is to end.
async fn wait(
    shared: &Shared,
    cancel: &CancellationToken,
    gate: &mut tokio::sync::watch::Receiver<crate::leader::LeaderState>,
    blocked: Blocked,
) -> bool {
    match blocked {
        Blocked::NotLeading => tokio::select! {
            () = cancel.cancelled() => false,
            () = shared.stopping.cancelled() => false,
            r = gate.wait_for(|s| s.leading) => r.is_ok(),
        },
        Blocked::Quarantined(until) => {
            let over = tokio::select! {
                () = cancel.cancelled() => false,
                () = shared.stopping.cancelled() => false,
                () = tokio::time::sleep_until(until) => true,
            };
            if over {
                tracing::info!(plugin = %shared.plugin, "quarantine over: trying the plugin again");
            }
            over
        }
        Blocked::Empty => {
            let wake = shared.wake.notified();
            tokio::pin!(wake);
            // Registered before the re-check: a push in between is not missed.
            wake.as_mut().enable();
            if shared.queue.lock().has_ready() {
                return true;
            }
            tokio::select! {
                () = cancel.cancelled() => false,
                () = shared.stopping.cancelled() => false,
                () = wake => true,
            }
        }
    }
}

/// Puts a delta back at the front of its object's queue and frees the key.
fn back_to_queue(shared: &Shared, key: &Key, item: Item) {
    let mut q = shared.queue.lock();
    q.requeue_front(key, item);
    q.done(key);
    let idle = q.in_flight_len() == 0;
    drop(q);
    shared.wake.notify_one();
    if idle {
        shared.idle.notify_waiters();
    }
}

/// Why a delta failed: its handler call, or one of the call's actions.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Failure {
    #[error(transparent)]
    Call(#[from] CallError),
    #[error(transparent)]
    Actions(#[from] ActionFailure),
}

impl Failure {
    /// Whether handling the delta again may succeed.
    pub fn retryable(&self) -> bool {
        match self {
            Failure::Call(e) => e.retryable(),
            Failure::Actions(f) => !f.error.permanent(),
        }
    }

    /// How the next attempt's delta reports this failure.
    pub fn last_failure(&self) -> LastFailure {
        match self {
            Failure::Call(CallError::Retry(m)) => LastFailure::Retry(m.clone()),
            Failure::Call(e) => LastFailure::Trapped(e.to_string()),
            Failure::Actions(f) if matches!(f.error, ActionError::Conflict(_)) => {
                LastFailure::Conflict(f.to_string())
            }
            Failure::Actions(f) => LastFailure::ActionFailed(f.to_string()),
        }
    }

    /// A few words for the log line.
    pub fn what(&self) -> &'static str {
        match self {
            Failure::Call(_) => "handler call failed",
            Failure::Actions(f) if matches!(f.error, ActionError::Conflict(_)) => {
                "an action hit a server-side apply conflict"
            }
            Failure::Actions(f) if f.error.permanent() => {
                "an action was refused by the API server (not retried)"
            }
            Failure::Actions(_) => "an action failed",
        }
    }
}

/// Shows one handled delta in the web view's feed, when a page is open
/// and the feed's budget allows (one relaxed load with no page open).
#[inline]
fn to_feed(
    shared: &Shared,
    key: &Key,
    item: &Item,
    outcome: &'static str,
    call: Duration,
    error: Option<&Failure>,
) {
    let feed = shared.telemetry.feed();
    if !feed.admit() {
        return;
    }
    feed.publish(FeedRecord {
        t: FeedRecord::now_ms(),
        row: "delta",
        plugin: shared.plugin.clone(),
        kind: item.delta.kind.kind.clone(),
        namespace: key.1.namespace.as_deref().map(str::to_owned),
        name: key.1.name.to_string(),
        what: dead::delta_name(item.delta.dtype),
        outcome,
        us: FeedRecord::micros(call),
        error: error.map(ToString::to_string),
    });
}

/// Acts on one call's outcome: run its actions, or retry, or give up.
async fn settle(
    shared: &Arc<Shared>,
    tasks: &TaskTracker,
    key: Key,
    mut item: Item,
    result: Result<Handled, CallError>,
    call: Duration,
) {
    let plugin = &*shared.plugin;
    let failure = match result {
        Ok(Handled {
            actions,
            requeue_after,
        }) => {
            if shared.stats.consecutive_traps.swap(0, Ordering::Relaxed) > 0 {
                let mut q = shared.quarantine.lock();
                if q.until.take().is_some() {
                    tracing::info!(plugin, "plugin recovered: quarantine lifted");
                }
                q.next = shared.options.quarantine_base;
            }
            match shared
                .executor
                .execute_all_counted(
                    plugin,
                    &shared.counters.actions,
                    &shared.rate,
                    actions,
                    &shared.stopping,
                )
                .await
            {
                Ok(()) => {
                    to_feed(shared, &key, &item, "ok", call, None);
                    shared.stats.latency.record(item.received.elapsed());
                    shared.stats.delivered.fetch_add(1, Ordering::Relaxed);
                    shared.counters.delivered(item.delta.subscription);
                    shared.stats.dead_letters.lock().resolve(&key);
                    if let Some(after) = requeue_after {
                        schedule_requeue(shared, tasks, &key, &item, after);
                    }
                    finish(shared, &key, item.weight);
                    return;
                }
                // Leadership lost: the queue is dropped, the next leader
                // replays the cache.
                Err(f) if f.error == ActionError::NotLeader => {
                    finish(shared, &key, item.weight);
                    return;
                }
                // Stopping: the delta goes to the next version.
                Err(f) if f.error == ActionError::Stopping => {
                    back_to_queue(shared, &key, item);
                    return;
                }
                Err(f) => Failure::Actions(f),
            }
        }
        Err(err) => {
            if err.breaks_instance() {
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
            Failure::Call(err)
        }
    };
    let obj_key = key.1.to_string();
    let kind = item.delta.kind.kind.clone();
    item.attempts += 1;
    item.first_failed
        .get_or_insert_with(std::time::SystemTime::now);
    // The next attempt tells the plugin which one it is, and why the last
    // one failed.
    item.delta.attempt = item.attempts + 1;
    item.delta.last_failure = Some(failure.last_failure());
    if failure.retryable() && item.attempts < shared.options.max_attempts {
        to_feed(shared, &key, &item, "retry", call, Some(&failure));
        let wait = backoff(&shared.options, item.attempts);
        DeltaRetrying {
            plugin,
            kind: &kind,
            key: &obj_key,
            attempt: item.attempts,
            error: &failure,
            wait,
        }
        .emit(&shared.stats);
        let shared2 = shared.clone();
        let stopping = shared.stopping.clone();
        // The key stays busy while it waits: the object's later deltas
        // queue (and coalesce) behind it.
        tasks.spawn(async move {
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = stopping.cancelled() => {
                    // Being replaced or unloaded: back to the queue, for
                    // the next version.
                    back_to_queue(&shared2, &key, item);
                    return;
                }
            }
            if !shared2.leadership.is_leader() {
                // Leadership was lost meanwhile: the queue was dropped.
                finish(&shared2, &key, item.weight);
                return;
            }
            back_to_queue(&shared2, &key, item);
        });
    } else {
        to_feed(shared, &key, &item, "dead", call, Some(&failure));
        DeltaDead {
            plugin,
            kind: &kind,
            key: &obj_key,
            attempts: item.attempts,
            delta: item.delta.dtype,
            error: &failure,
        }
        .emit(&shared.stats);
        let weight = item.weight;
        shared
            .stats
            .dead_letters
            .lock()
            .add(plugin, key.clone(), item, failure.to_string());
        finish(shared, &key, weight);
    }
}

/// The longest requeue-after honoured (a day): a longer one is a bug in the
/// plugin, and the default resync covers the rest.
pub const MAX_REQUEUE_AFTER: Duration = Duration::from_secs(24 * 3600);

/// Delivers `item`'s object again after `after`, as a requeue delta of its
/// current cached state, unless the object changed meanwhile (its newer
/// delta replaced the requeue) or is gone. Requeues pending when the
/// version stops are not carried over: the next version replays the cache.
fn schedule_requeue(
    shared: &Arc<Shared>,
    tasks: &TaskTracker,
    key: &Key,
    item: &Item,
    after: Duration,
) {
    let Some(object) = item.delta.object.clone() else {
        return;
    };
    let after = after.min(MAX_REQUEUE_AFTER);
    let (shared, key) = (shared.clone(), key.clone());
    let (subscription, kind) = (item.delta.subscription, item.delta.kind.clone());
    // A pending requeue is not activity: `--until-idle` does not wait for
    // it (a plugin requeueing forever would never be idle).
    tasks.spawn(async move {
        tokio::select! {
            () = tokio::time::sleep(after) => {}
            () = shared.stopping.cancelled() => return,
        }
        let informer = shared.informers.lock().get(&subscription).cloned();
        let current = informer.and_then(|i| i.store().get(&key.1));
        match current {
            Some(now) if now.meta().resource_version == object.meta().resource_version => {
                let delta = CallDelta {
                    object: Some(now),
                    requeued: true,
                    ..CallDelta::new(DeltaType::Resync, subscription, kind)
                };
                shared.activity.emit(1);
                push(&shared, key, Item::new(delta));
            }
            // Changed (its newer delta is the plugin's next look) or gone.
            _ => {}
        }
    });
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
    let (idle, none_in_flight) = {
        let mut q = shared.queue.lock();
        q.done(key);
        (q.is_idle(), q.in_flight_len() == 0)
    };
    shared.activity.settle(weight);
    shared.wake.notify_one();
    if idle || none_in_flight {
        shared.idle.notify_waiters();
    }
}
