//! Shared informers: one list+watch per (kind, namespace, label selector,
//! field selector), shared by every subscription that asks for the same
//! thing, feeding a lister cache and fanning deltas out to subscribers.
//!
//! This is client-go's Reflector + DeltaFIFO + SharedIndexInformer in one
//! task per informer; the per-plugin queueing lives in `dispatch`.

pub mod internal_events;
pub mod selector;
pub mod store;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::StreamExt;
use futures::stream::BoxStream;
use parking_lot::Mutex;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::activity::Activity;
use crate::kind::KindInfo;
use crate::object::{KObject, ObjectError, ObjectHandle};
use crate::telemetry::{InformerCounters, Telemetry};
use internal_events::{InformerForbidden, Relisted, WatchFailed, WatchResumed, WatchStalled};
pub use store::{Snapshot, Store};

/// What one informer lists and watches.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct InformerSpec {
    pub kind: KindInfo,
    pub namespace: Option<String>,
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
}

impl std::fmt::Display for InformerSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.kind.resource_name())?;
        if let Some(ns) = &self.namespace {
            write!(f, " in {ns}")?;
        }
        if let Some(l) = &self.label_selector {
            write!(f, " labels {l:?}")?;
        }
        if let Some(fs) = &self.field_selector {
            write!(f, " fields {fs:?}")?;
        }
        Ok(())
    }
}

/// One event of a source's list+watch stream (the shape of kube-runtime's
/// `watcher::Event`): a (re)list is `Init`, `InitApply`*, `InitDone`.
#[derive(Debug)]
pub enum WatchEvent {
    Init,
    InitApply(KObject),
    InitDone,
    Apply(KObject),
    Delete(KObject),
    /// The source is alive and nothing changed (it answered a probe after
    /// a silence): ends a reported stall.
    Progress,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum SourceError {
    /// The API server refused `verb` (`list` or `watch`) with 403.
    #[error(
        "forbidden to {verb}: {message} (grant the host's identity list and watch on this resource)"
    )]
    Forbidden { verb: &'static str, message: String },
    /// The watch produced nothing for `silent` and the server did not
    /// answer a probe: frozen, partitioned or overloaded. The watch keeps
    /// waiting (and the source keeps probing).
    #[error(
        "no watch event for {}s and the API server does not answer a list ({cause}); still waiting",
        silent.as_secs()
    )]
    Stalled {
        silent: std::time::Duration,
        cause: String,
    },
    /// An item of a (re)list could not be decoded. A list missing one
    /// object would read as that object's deletion, so the list is void:
    /// the source delivers no `InitDone` for it and lists again after
    /// backoff, and the informer discards what it buffered (its cache and
    /// deltas stay as they were).
    #[error(
        "{informer}: cannot decode list item {position}{}: {cause}; the list is discarded (the cache keeps the last complete one) and retried with backoff",
        object.as_deref().map(|o| format!(" ({o})")).unwrap_or_default()
    )]
    ListItemUndecodable {
        /// The informer's spec, as displayed.
        informer: String,
        /// The item's position in the list, from 1.
        position: usize,
        /// `namespace/name` (or `name`), when the item's name is readable.
        object: Option<String>,
        #[source]
        cause: Arc<ObjectError>,
    },
    #[error("{0}")]
    Other(String),
}

/// Where objects come from: a real API server or the local folder cluster.
pub trait Source: Send + Sync + 'static {
    /// A never-ending list+watch stream for `spec`; errors are reported and
    /// the stream recovers by itself (relisting as needed).
    fn watch(&self, spec: &InformerSpec) -> BoxStream<'static, Result<WatchEvent, SourceError>>;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DeltaType {
    Added,
    Updated,
    Deleted,
    Resync,
    Synced,
}

impl DeltaType {
    /// This type's slot in the metrics' `type` labels
    /// ([`crate::telemetry::metrics::DELTA_TYPES`]).
    pub fn metric_slot(self) -> usize {
        match self {
            DeltaType::Added => 0,
            DeltaType::Updated => 1,
            DeltaType::Deleted => 2,
            DeltaType::Resync => 3,
            DeltaType::Synced => 4,
        }
    }
}

impl InformerCounters {
    /// Counts one delta produced by the informer.
    #[inline]
    pub fn delta(&self, dtype: DeltaType) {
        self.delta_at(dtype.metric_slot());
    }
}

/// One change of one informer.
#[derive(Debug, Clone)]
pub struct Delta {
    pub dtype: DeltaType,
    /// New state (updates), last known state (deletes); `None` for `Synced`.
    pub object: Option<ObjectHandle>,
    pub old: Option<ObjectHandle>,
    pub initial: bool,
    pub final_state_unknown: bool,
    /// When the informer received it (for delivery latency).
    pub received: std::time::Instant,
    /// The informer's sequence number of this delta: every live delta gets
    /// the next one; the replay a new subscriber receives carries the
    /// number reached when it subscribed (its cut). A plugin swap uses it
    /// to tell what the old version saw before the new one subscribed.
    pub seq: u64,
}

impl Delta {
    fn new(dtype: DeltaType, object: ObjectHandle) -> Self {
        Self {
            dtype,
            object: Some(object),
            old: None,
            initial: false,
            final_state_unknown: false,
            received: std::time::Instant::now(),
            seq: 0,
        }
    }

    pub fn synced() -> Self {
        Self {
            dtype: DeltaType::Synced,
            object: None,
            old: None,
            initial: false,
            final_state_unknown: false,
            received: std::time::Instant::now(),
            seq: 0,
        }
    }
}

struct Fanout {
    subscribers: Vec<(u64, mpsc::UnboundedSender<Delta>)>,
    synced: bool,
    /// Who subscribed, by subscription id (plugin names; empty if unnamed).
    names: Vec<(u64, Arc<str>)>,
    /// The last live delta's sequence number.
    seq: u64,
    /// The object of the last delta emitted (its resourceVersion is the
    /// informer's last seen one; kept as the handle: an Arc clone per delta).
    last: Option<ObjectHandle>,
}

/// An informer the API server refuses to serve (403): its subscribers
/// never sync until the host's identity is granted the verb.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forbidden {
    /// `list` or `watch`.
    pub verb: &'static str,
    /// The API server's message.
    pub message: String,
}

/// A read-only view of one informer's cache, what plugins read through:
/// snapshots only (no upsert, remove or index), so the runtime cannot
/// change what every other consumer of the informer sees.
#[derive(Debug, Clone)]
pub struct CacheView(Arc<Informer>);

impl CacheView {
    /// A consistent copy of the cache as it is now (cheap: shared maps).
    pub fn snapshot(&self) -> Snapshot {
        self.0.store.snapshot()
    }

    /// Tells caches apart (two views of one informer are the same cache).
    pub fn id(&self) -> usize {
        Arc::as_ptr(&self.0) as usize
    }

    pub fn spec(&self) -> &InformerSpec {
        &self.0.spec
    }
}

/// One running list+watch with its cache.
pub struct Informer {
    spec: InformerSpec,
    store: Store,
    fanout: Mutex<Fanout>,
    synced_tx: watch::Sender<bool>,
    cancel: CancellationToken,
    activity: Arc<Activity>,
    counters: InformerCounters,
    /// Set while the source answers 403; cleared by the next data.
    forbidden: Mutex<Option<Forbidden>>,
    /// This informer's own counts (the metrics sum them per kind).
    watch_restarts: AtomicU64,
    relists: AtomicU64,
}

impl std::fmt::Debug for Informer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Informer")
            .field("spec", &self.spec)
            .finish()
    }
}

impl Informer {
    /// An informer its owner fills through [`store`](Self::store) instead
    /// of a source: `kubewasm test` serves a fixture's cache through it, so
    /// a plugin reads the same caches, snapshots and indexes as in the host.
    /// It has no task, no subscribers and never syncs by itself.
    pub fn detached(spec: InformerSpec) -> Arc<Self> {
        let (synced_tx, _) = watch::channel(true);
        let counters = Telemetry::default()
            .metrics()
            .informer(&spec.kind.resource_name());
        Arc::new(Self {
            spec,
            store: Store::default(),
            fanout: Mutex::new(Fanout {
                subscribers: Vec::new(),
                synced: true,
                names: Vec::new(),
                seq: 0,
                last: None,
            }),
            synced_tx,
            cancel: CancellationToken::new(),
            activity: Arc::default(),
            counters,
            forbidden: Mutex::new(None),
            watch_restarts: AtomicU64::new(0),
            relists: AtomicU64::new(0),
        })
    }

    pub fn spec(&self) -> &InformerSpec {
        &self.spec
    }

    /// The read-only view handed to plugins.
    pub fn view(self: &Arc<Self>) -> CacheView {
        CacheView(self.clone())
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn has_synced(&self) -> bool {
        *self.synced_tx.borrow()
    }

    /// Why the API server refuses this informer, while it does.
    pub fn forbidden(&self) -> Option<Forbidden> {
        self.forbidden.lock().clone()
    }

    /// The names its subscribers gave (plugins), sorted, each once.
    pub fn subscriber_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .fanout
            .lock()
            .names
            .iter()
            .filter(|(_, n)| !n.is_empty())
            .map(|(_, n)| n.to_string())
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// Records a 403 (logging once per refusal, naming the plugins that
    /// now cannot sync) or that data flows again.
    fn set_forbidden(&self, refusal: Option<Forbidden>) {
        let mut slot = self.forbidden.lock();
        if let Some(f) = &refusal
            && slot.as_ref() != Some(f)
        {
            InformerForbidden {
                informer: &self.spec,
                verb: f.verb,
                plugins: &self.subscriber_names(),
                message: &f.message,
            }
            .emit();
        } else if refusal.is_none() && slot.is_some() {
            tracing::info!(informer = %self.spec, "the API server serves the informer again");
        }
        *slot = refusal;
    }

    /// Waits until the initial list has been applied (WaitForCacheSync).
    pub async fn wait_synced(&self) {
        let mut rx = self.synced_tx.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }

    /// The resourceVersion of the object of the last delta emitted.
    pub fn last_resource_version(&self) -> Option<String> {
        self.fanout
            .lock()
            .last
            .as_ref()
            .map(|o| o.meta().resource_version.to_string())
    }

    /// Watch streams that failed and were restarted (with backoff).
    pub fn watch_restarts(&self) -> u64 {
        self.watch_restarts.load(Ordering::Relaxed)
    }

    /// Lists after the initial one.
    pub fn relists(&self) -> u64 {
        self.relists.load(Ordering::Relaxed)
    }

    /// The last live delta's sequence number: deltas numbered above it
    /// are yet to come.
    pub fn seq(&self) -> u64 {
        self.fanout.lock().seq
    }

    fn emit(&self, fanout: &mut Fanout, mut delta: Delta) {
        fanout.seq += 1;
        delta.seq = fanout.seq;
        if delta.object.is_some() {
            fanout.last.clone_from(&delta.object);
        }
        self.counters.delta(delta.dtype);
        // Count before sending, so the total can never lag what was handled.
        self.activity.emit(fanout.subscribers.len() as u64);
        let mut failed = 0;
        fanout.subscribers.retain(|(_, tx)| {
            let ok = tx.send(delta.clone()).is_ok();
            failed += u64::from(!ok);
            ok
        });
        self.activity.settle(failed);
    }

    /// Registers a subscriber; a late one first receives the cache as
    /// initial `Added` deltas (and `Synced` if the informer has synced), as a
    /// handler added to a running client-go informer does.
    /// Returns the cut: the sequence number the replay stands for.
    fn add_subscriber(&self, id: u64, name: Arc<str>, tx: mpsc::UnboundedSender<Delta>) -> u64 {
        let mut fanout = self.fanout.lock();
        fanout.names.push((id, name));
        let cut = fanout.seq;
        let snapshot = self.store.snapshot();
        for obj in snapshot.iter() {
            let mut d = Delta::new(DeltaType::Added, obj.clone());
            d.initial = true;
            d.seq = cut;
            self.send_one(&tx, d);
        }
        if fanout.synced {
            let mut d = Delta::synced();
            d.seq = cut;
            self.send_one(&tx, d);
        }
        fanout.subscribers.push((id, tx));
        cut
    }

    fn send_one(&self, tx: &mpsc::UnboundedSender<Delta>, d: Delta) {
        self.activity.emit(1);
        if tx.send(d).is_err() {
            self.activity.settle(1);
        }
    }

    fn remove_subscriber(&self, id: u64) -> usize {
        let mut fanout = self.fanout.lock();
        fanout.subscribers.retain(|(sid, _)| *sid != id);
        fanout.names.retain(|(sid, _)| *sid != id);
        fanout.subscribers.len()
    }

    /// Runs until cancelled; returns false if the source's stream ended
    /// by itself (it never should: the informer is then dead).
    async fn run(self: Arc<Self>, source: Arc<dyn Source>) -> bool {
        let mut stream = source.watch(&self.spec);
        let mut relist = Relist::Idle;
        let mut lists = 0u64;
        // Since when the source reports the watch stalled.
        let mut stalled: Option<std::time::Instant> = None;
        loop {
            let event = tokio::select! {
                () = self.cancel.cancelled() => break,
                event = stream.next() => event,
            };
            let Some(event) = event else {
                tracing::error!(informer = %self.spec, "watch stream ended; the informer stopped");
                return false;
            };
            match &event {
                Err(SourceError::Forbidden { verb, message }) => {
                    self.set_forbidden(Some(Forbidden {
                        verb,
                        message: message.clone(),
                    }))
                }
                Ok(WatchEvent::Init) | Err(_) => {}
                Ok(_) => {
                    if self.forbidden.lock().is_some() {
                        self.set_forbidden(None);
                    }
                }
            }
            let mut new_stall = false;
            match (&event, stalled) {
                (Err(SourceError::Stalled { .. }), None) => {
                    stalled = Some(std::time::Instant::now());
                    new_stall = true;
                }
                (Ok(_), Some(since)) => {
                    stalled = None;
                    WatchResumed {
                        informer: &self.spec,
                        after: since.elapsed(),
                    }
                    .emit();
                }
                _ => {}
            }
            match event {
                Err(err @ SourceError::Stalled { .. }) => WatchStalled {
                    informer: &self.spec,
                    error: &err,
                    first: new_stall,
                }
                .emit(&self.counters),
                Err(err) => {
                    if let SourceError::ListItemUndecodable { .. } = err {
                        // Nothing of a list with a hole is applied; the
                        // source lists again, starting with `Init`.
                        relist = Relist::Aborted;
                    }
                    self.watch_restarts.fetch_add(1, Ordering::Relaxed);
                    WatchFailed {
                        informer: &self.spec,
                        error: &err,
                    }
                    .emit(&self.counters)
                }
                Ok(WatchEvent::Progress) => {}
                Ok(WatchEvent::Init) => {
                    if lists > 0 {
                        self.relists.fetch_add(1, Ordering::Relaxed);
                        Relisted {
                            informer: &self.spec,
                        }
                        .emit(&self.counters);
                    }
                    lists += 1;
                    // A fresh buffer, whatever an earlier list left.
                    relist = Relist::Buffering(Vec::new());
                }
                Ok(WatchEvent::InitApply(obj)) => match &mut relist {
                    Relist::Buffering(buf) => buf.push(obj),
                    Relist::Idle => self.apply(obj),
                    Relist::Aborted => {
                        tracing::debug!(informer = %self.spec, object = %obj.key(), "ignoring an item of an aborted list");
                    }
                },
                Ok(WatchEvent::InitDone) => match std::mem::replace(&mut relist, Relist::Idle) {
                    Relist::Buffering(listed) => self.replace(listed),
                    // The end of no list: nothing to compare the cache with
                    // (an empty list here would delete everything).
                    Relist::Idle => self.synced(&mut self.fanout.lock()),
                    Relist::Aborted => {
                        tracing::debug!(informer = %self.spec, "ignoring the end of an aborted list");
                    }
                },
                Ok(WatchEvent::Apply(obj)) => self.apply(obj),
                Ok(WatchEvent::Delete(obj)) => self.delete(obj),
            }
        }
        tracing::debug!(informer = %self.spec, "informer stopped");
        true
    }

    fn apply(&self, obj: KObject) {
        let obj = Arc::new(obj);
        let mut fanout = self.fanout.lock();
        match self.store.upsert(obj.clone()) {
            Some(old)
                if old.meta().resource_version == obj.meta().resource_version && *old == *obj => {}
            Some(old) if recreated(&old, &obj) => self.emit_recreated(&mut fanout, old, obj),
            Some(old) => {
                let mut d = Delta::new(DeltaType::Updated, obj);
                d.old = Some(old);
                self.emit(&mut fanout, d);
            }
            None => self.emit(&mut fanout, Delta::new(DeltaType::Added, obj)),
        }
    }

    fn delete(&self, obj: KObject) {
        let mut fanout = self.fanout.lock();
        let key = obj.key();
        // The watch event carries the final state. A delete of an object the
        // cache never held (a watch racing a relist, or a selector the object
        // never matched) is nothing to the subscribers: emitting it would
        // hand plugins a delete of something they were never told about.
        if self.store.remove(&key).is_some() {
            self.emit(&mut fanout, Delta::new(DeltaType::Deleted, Arc::new(obj)));
        }
    }

    /// An object recreated under the same key (another uid): the old one
    /// went, so it is a delete (its final state unknown: the deletion was
    /// not watched) and then an add, never an update from one object to
    /// another. The store already holds the new one.
    fn emit_recreated(&self, fanout: &mut Fanout, old: ObjectHandle, new: ObjectHandle) {
        let mut gone = Delta::new(DeltaType::Deleted, old);
        gone.final_state_unknown = true;
        self.emit(fanout, gone);
        self.emit(fanout, Delta::new(DeltaType::Added, new));
    }

    /// Applies a complete list: new objects are added, changed ones updated,
    /// recreated ones (another uid) deleted then added, and objects missing
    /// from the list deleted with their last known state (flagged: the
    /// deletion was not watched).
    fn replace(&self, listed: Vec<KObject>) {
        let mut fanout = self.fanout.lock();
        let first = !fanout.synced;
        let mut seen = std::collections::HashSet::with_capacity(listed.len());
        for obj in listed {
            let obj = Arc::new(obj);
            seen.insert(obj.key());
            match self.store.upsert(obj.clone()) {
                Some(old) if recreated(&old, &obj) => self.emit_recreated(&mut fanout, old, obj),
                Some(old) if old.meta().resource_version == obj.meta().resource_version => {}
                Some(old) => {
                    let mut d = Delta::new(DeltaType::Updated, obj);
                    d.old = Some(old);
                    self.emit(&mut fanout, d);
                }
                None => {
                    let mut d = Delta::new(DeltaType::Added, obj);
                    d.initial = first;
                    self.emit(&mut fanout, d);
                }
            }
        }
        let vanished: Vec<ObjectHandle> = self
            .store
            .snapshot()
            .iter()
            .filter(|o| !seen.contains(&o.key()))
            .cloned()
            .collect();
        for obj in vanished {
            self.store.remove(&obj.key());
            let mut d = Delta::new(DeltaType::Deleted, obj);
            d.final_state_unknown = true;
            self.emit(&mut fanout, d);
        }
        self.synced(&mut fanout);
    }

    /// Marks the cache synced after its first list (once).
    fn synced(&self, fanout: &mut Fanout) {
        if !fanout.synced {
            fanout.synced = true;
            self.emit(fanout, Delta::synced());
            self.synced_tx.send_replace(true);
            tracing::info!(informer = %self.spec, objects = self.store.len(), "cache synced");
        }
    }
}

/// Where the informer is in a (re)list.
enum Relist {
    /// No list in progress: an `InitApply` applies at once.
    Idle,
    /// The objects of the list in progress, applied together at `InitDone`.
    Buffering(Vec<KObject>),
    /// The source voided the list in progress: its items and end are
    /// ignored until the next `Init`.
    Aborted,
}

/// True when `new` is another object than `old` under the same key: its
/// uid differs (objects without a uid, as some tests build, are never
/// told apart).
fn recreated(old: &KObject, new: &KObject) -> bool {
    let (a, b) = (&old.meta().uid, &new.meta().uid);
    !a.is_empty() && !b.is_empty() && a != b
}

/// A subscriber's handle on an informer; dropping it does not unsubscribe
/// (call [`InformerSet::unsubscribe`]), so that teardown order is explicit.
#[derive(Debug, Clone)]
pub struct SubscriptionHandle {
    pub informer: Arc<Informer>,
    pub id: u64,
    /// The informer's sequence number when it subscribed: live deltas
    /// after it are numbered above it.
    pub cut: u64,
}

/// The SharedInformerFactory: starts informers on first use, shares them,
/// stops them when their last subscriber leaves.
///
/// Lock order: the map of informers, then an informer's fanout (then its
/// store). Subscribing (find or create, then add the subscriber) and
/// unsubscribing (remove the subscriber, then stop the informer if none is
/// left) each happen whole under the map's lock, so an informer in the map
/// always has a subscriber or is about to get its first, and a subscriber
/// is never added to an informer being stopped.
pub struct InformerSet {
    source: Arc<dyn Source>,
    informers: Mutex<HashMap<InformerSpec, Arc<Informer>>>,
    next_id: AtomicU64,
    tasks: TaskTracker,
    cancel: CancellationToken,
    activity: Arc<Activity>,
    telemetry: Telemetry,
}

impl std::fmt::Debug for InformerSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InformerSet").finish_non_exhaustive()
    }
}

impl InformerSet {
    pub fn new(
        source: Arc<dyn Source>,
        activity: Arc<Activity>,
        cancel: CancellationToken,
    ) -> Self {
        Self {
            activity,
            source,
            informers: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            tasks: TaskTracker::new(),
            cancel,
            telemetry: Telemetry::default(),
        }
    }

    /// Counts deltas, restarts and relists into `telemetry`, and reports
    /// an informer task that dies to its liveness.
    #[must_use]
    pub fn with_telemetry(mut self, telemetry: Telemetry) -> Self {
        self.telemetry = telemetry;
        self
    }

    pub fn subscribe(
        &self,
        spec: InformerSpec,
        tx: mpsc::UnboundedSender<Delta>,
    ) -> SubscriptionHandle {
        self.subscribe_as(spec, tx, Arc::from(""))
    }

    /// [`subscribe`](Self::subscribe) naming the subscriber (a plugin), so
    /// that an informer the API server refuses can say whom it breaks.
    pub fn subscribe_as(
        &self,
        spec: InformerSpec,
        tx: mpsc::UnboundedSender<Delta>,
        name: Arc<str>,
    ) -> SubscriptionHandle {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        // Held until the subscriber is in: an unsubscribe of the informer's
        // last other subscriber cannot stop it in between.
        let mut map = self.informers.lock();
        let (informer, created) = match map.get(&spec) {
            Some(existing) => (existing.clone(), false),
            None => {
                let (synced_tx, _) = watch::channel(false);
                let informer = Arc::new(Informer {
                    spec: spec.clone(),
                    store: Store::default(),
                    fanout: Mutex::new(Fanout {
                        subscribers: Vec::new(),
                        synced: false,
                        seq: 0,
                        names: Vec::new(),
                        last: None,
                    }),
                    forbidden: Mutex::new(None),
                    watch_restarts: AtomicU64::new(0),
                    relists: AtomicU64::new(0),
                    synced_tx,
                    cancel: self.cancel.child_token(),
                    activity: self.activity.clone(),
                    counters: self
                        .telemetry
                        .metrics()
                        .informer(&spec.kind.resource_name()),
                });
                map.insert(spec.clone(), informer.clone());
                (informer, true)
            }
        };
        let cut = informer.add_subscriber(id, name, tx);
        drop(map);
        // Started after its first subscriber is in: what it reports at once
        // (a 403) names the plugin. Should that subscriber already have left,
        // the informer was cancelled and its task ends at once.
        if created {
            tracing::info!(informer = %spec, "starting informer");
            let guard = self.telemetry.task(format!("informer {spec}"));
            let run = informer.clone().run(self.source.clone());
            self.tasks.spawn(async move {
                if run.await {
                    guard.done();
                } else {
                    guard.failed("its watch stream ended");
                }
            });
        }
        SubscriptionHandle { informer, id, cut }
    }

    /// Removes the subscriber; the informer stops when it was the last,
    /// decided under the map's lock that subscribing also holds.
    pub fn unsubscribe(&self, handle: &SubscriptionHandle) {
        let mut map = self.informers.lock();
        if handle.informer.remove_subscriber(handle.id) == 0 {
            let spec = handle.informer.spec();
            if map
                .get(spec)
                .is_some_and(|i| Arc::ptr_eq(i, &handle.informer))
            {
                map.remove(spec);
                handle.informer.cancel.cancel();
                tracing::info!(informer = %spec, "stopping informer: no subscribers left");
            }
        }
    }

    pub fn informers(&self) -> Vec<Arc<Informer>> {
        self.informers.lock().values().cloned().collect()
    }

    pub fn all_synced(&self) -> bool {
        self.informers.lock().values().all(|i| i.has_synced())
    }

    /// Stops every informer and waits for their tasks.
    pub async fn shutdown(&self) {
        for inf in self.informers() {
            inf.cancel.cancel();
        }
        self.tasks.close();
        self.tasks.wait().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::KindInfo;
    use crate::object::StripOptions;

    /// A source that replays scripted events, then stays open.
    struct Scripted(Mutex<Option<mpsc::UnboundedReceiver<Result<WatchEvent, SourceError>>>>);

    impl Source for Scripted {
        fn watch(
            &self,
            _spec: &InformerSpec,
        ) -> BoxStream<'static, Result<WatchEvent, SourceError>> {
            let Some(mut rx) = self.0.lock().take() else {
                return Box::pin(futures::stream::pending());
            };
            Box::pin(futures::stream::poll_fn(move |cx| rx.poll_recv(cx)))
        }
    }

    fn all_configmaps() -> InformerSpec {
        InformerSpec {
            kind: KindInfo::new("", "v1", "ConfigMap", "configmaps", true),
            namespace: None,
            label_selector: None,
            field_selector: None,
        }
    }

    fn cm(name: &str) -> KObject {
        cm_at(name, "1", name)
    }

    fn cm_at(name: &str, rv: &str, uid: &str) -> KObject {
        KObject::from_value(
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": "default", "resourceVersion": rv, "uid": uid}}),
            StripOptions::default(),
        )
        .unwrap()
    }

    /// An informer on a scripted source, its subscriber's deltas, and the
    /// script's sender.
    fn scripted() -> (
        InformerSet,
        SubscriptionHandle,
        mpsc::UnboundedReceiver<Delta>,
        mpsc::UnboundedSender<Result<WatchEvent, SourceError>>,
    ) {
        let (events, rx) = mpsc::unbounded_channel();
        let set = InformerSet::new(
            Arc::new(Scripted(Mutex::new(Some(rx)))),
            Arc::new(Activity::default()),
            CancellationToken::new(),
        );
        let (tx, deltas) = mpsc::unbounded_channel();
        let handle = set.subscribe(all_configmaps(), tx);
        (set, handle, deltas, events)
    }

    /// `Added a@1 uid=a initial #1`: what a test compares.
    fn describe(d: &Delta) -> String {
        let mut s = format!("{:?}", d.dtype);
        if let Some(o) = &d.object {
            let m = o.meta();
            s = format!("{s} {}@{} uid={}", m.name, m.resource_version, m.uid);
        }
        if d.initial {
            s.push_str(" initial");
        }
        if d.final_state_unknown {
            s.push_str(" unknown");
        }
        format!("{s} #{}", d.seq)
    }

    async fn take(deltas: &mut mpsc::UnboundedReceiver<Delta>, n: usize) -> Vec<String> {
        let mut out = Vec::new();
        while out.len() < n {
            let d = tokio::time::timeout(std::time::Duration::from_secs(10), deltas.recv())
                .await
                .unwrap_or_else(|_| panic!("only {out:?} within 10s"))
                .unwrap();
            out.push(describe(&d));
        }
        out
    }

    fn undecodable(position: usize, object: &str) -> SourceError {
        SourceError::ListItemUndecodable {
            informer: all_configmaps().to_string(),
            position,
            object: Some(object.into()),
            cause: Arc::new(ObjectError::Missing("metadata.name")),
        }
    }

    #[tokio::test]
    async fn a_list_with_an_undecodable_item_changes_nothing_and_the_next_list_applies() {
        let (set, handle, mut deltas, events) = scripted();
        for e in [
            WatchEvent::Init,
            WatchEvent::InitApply(cm("a")),
            WatchEvent::InitApply(cm("b")),
            WatchEvent::InitDone,
        ] {
            events.send(Ok(e)).unwrap();
        }
        assert_eq!(
            take(&mut deltas, 3).await,
            [
                "Added a@1 uid=a initial #1",
                "Added b@1 uid=b initial #2",
                "Synced #3"
            ]
        );
        // A relist whose second item cannot be decoded: applied, it would
        // update a and delete b, which is alive.
        events.send(Ok(WatchEvent::Init)).unwrap();
        events
            .send(Ok(WatchEvent::InitApply(cm_at("a", "2", "a"))))
            .unwrap();
        events.send(Err(undecodable(2, "default/b"))).unwrap();
        // Whatever a source still sends of that list is ignored too.
        events
            .send(Ok(WatchEvent::InitApply(cm_at("c", "2", "c"))))
            .unwrap();
        events.send(Ok(WatchEvent::InitDone)).unwrap();
        // The next list is complete: b is gone by now.
        events.send(Ok(WatchEvent::Init)).unwrap();
        events
            .send(Ok(WatchEvent::InitApply(cm_at("a", "3", "a"))))
            .unwrap();
        events.send(Ok(WatchEvent::InitDone)).unwrap();
        // Its deltas follow the first list's directly: the voided one
        // emitted nothing (not even a sequence number).
        assert_eq!(
            take(&mut deltas, 2).await,
            ["Updated a@3 uid=a #4", "Deleted b@1 uid=b unknown #5"]
        );
        assert!(deltas.try_recv().is_err(), "nothing else was emitted");
        let names: Vec<String> = handle
            .informer
            .store()
            .snapshot()
            .iter()
            .map(|o| format!("{}@{}", o.meta().name, o.meta().resource_version))
            .collect();
        assert_eq!(names, ["a@3"]);
        assert_eq!(handle.informer.watch_restarts(), 1);
        set.unsubscribe(&handle);
        set.shutdown().await;
    }

    #[tokio::test]
    async fn a_voided_list_leaves_the_cache_as_it_was() {
        // Checked on the cache itself, between the voided list and the next.
        let (set, handle, mut deltas, events) = scripted();
        for e in [
            WatchEvent::Init,
            WatchEvent::InitApply(cm("a")),
            WatchEvent::InitApply(cm("b")),
            WatchEvent::InitDone,
            WatchEvent::Init,
            WatchEvent::InitApply(cm_at("a", "2", "a")),
        ] {
            events.send(Ok(e)).unwrap();
        }
        events.send(Err(undecodable(2, "default/b"))).unwrap();
        // A live event after it: once it is a delta, the list was handled.
        events
            .send(Ok(WatchEvent::Apply(cm_at("z", "4", "z"))))
            .unwrap();
        assert_eq!(take(&mut deltas, 4).await[3], "Added z@4 uid=z #4");
        let cached: Vec<String> = handle
            .informer
            .store()
            .snapshot()
            .iter()
            .map(|o| format!("{}@{}", o.meta().name, o.meta().resource_version))
            .collect();
        assert_eq!(cached, ["a@1", "b@1", "z@4"]);
        set.unsubscribe(&handle);
        set.shutdown().await;
    }

    #[tokio::test]
    async fn a_relist_with_a_new_uid_under_a_name_is_a_delete_then_an_add() {
        let (set, handle, mut deltas, events) = scripted();
        handle.informer.store().add_index("uid", "/metadata/uid");
        for e in [
            WatchEvent::Init,
            WatchEvent::InitApply(cm_at("a", "1", "uid-1")),
            WatchEvent::InitDone,
            WatchEvent::Init,
            WatchEvent::InitApply(cm_at("a", "5", "uid-2")),
            WatchEvent::InitDone,
        ] {
            events.send(Ok(e)).unwrap();
        }
        assert_eq!(
            take(&mut deltas, 4).await,
            [
                "Added a@1 uid=uid-1 initial #1",
                "Synced #2",
                "Deleted a@1 uid=uid-1 unknown #3",
                "Added a@5 uid=uid-2 #4",
            ]
        );
        let snap = handle.informer.store().snapshot();
        assert_eq!(snap.len(), 1);
        let key = crate::object::ObjectKey::new(Some("default"), "a");
        assert_eq!(&*snap.get(&key).unwrap().meta().uid, "uid-2");
        assert!(snap.by_index("uid", "uid-1").unwrap().is_empty());
        assert_eq!(snap.by_index("uid", "uid-2").unwrap().len(), 1);
        set.unsubscribe(&handle);
        set.shutdown().await;
    }

    #[tokio::test]
    async fn a_watched_object_with_a_new_uid_is_a_delete_then_an_add() {
        let (set, handle, mut deltas, events) = scripted();
        handle.informer.store().add_index("uid", "/metadata/uid");
        for e in [
            WatchEvent::Init,
            WatchEvent::InitApply(cm_at("a", "1", "uid-1")),
            WatchEvent::InitDone,
            WatchEvent::Apply(cm_at("a", "7", "uid-2")),
            // The same object again: an update, as ever.
            WatchEvent::Apply(cm_at("a", "8", "uid-2")),
        ] {
            events.send(Ok(e)).unwrap();
        }
        assert_eq!(
            take(&mut deltas, 5).await,
            [
                "Added a@1 uid=uid-1 initial #1",
                "Synced #2",
                "Deleted a@1 uid=uid-1 unknown #3",
                "Added a@7 uid=uid-2 #4",
                "Updated a@8 uid=uid-2 #5",
            ]
        );
        let snap = handle.informer.store().snapshot();
        assert!(snap.by_index("uid", "uid-1").unwrap().is_empty());
        assert_eq!(snap.by_index("uid", "uid-2").unwrap().len(), 1);
        set.unsubscribe(&handle);
        set.shutdown().await;
    }

    /// Subscribing and unsubscribing one spec from many threads at once:
    /// every subscriber lands on the informer the set holds, running, and
    /// no informer is left running without subscribers.
    #[test]
    fn concurrent_subscribes_and_unsubscribes_never_leave_a_subscriber_on_a_stopped_informer() {
        const THREADS: usize = 3;
        const ROUNDS: usize = 60_000;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let set = Arc::new(InformerSet::new(
            Arc::new(Scripted(Mutex::new(None))),
            Arc::new(Activity::default()),
            CancellationToken::new(),
        ));
        let barrier = Arc::new(std::sync::Barrier::new(THREADS));
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                let (set, barrier, handle) = (set.clone(), barrier.clone(), rt.handle().clone());
                std::thread::spawn(move || {
                    let _rt = handle.enter();
                    let (tx, _rx) = mpsc::unbounded_channel();
                    let name: Arc<str> = Arc::from(format!("p{t}"));
                    let mut seen: HashMap<usize, Arc<Informer>> = HashMap::new();
                    barrier.wait();
                    for round in 0..ROUNDS {
                        let h = set.subscribe_as(all_configmaps(), tx.clone(), name.clone());
                        let held = set.informers.lock().get(&all_configmaps()).cloned();
                        assert!(
                            held.is_some_and(|i| Arc::ptr_eq(&i, &h.informer)),
                            "round {round}: subscribed to an informer the set no longer holds"
                        );
                        assert!(
                            !h.informer.cancel.is_cancelled(),
                            "round {round}: subscribed to a stopped informer"
                        );
                        seen.insert(Arc::as_ptr(&h.informer) as usize, h.informer.clone());
                        set.unsubscribe(&h);
                    }
                    seen
                })
            })
            .collect();
        let mut seen = HashMap::new();
        for t in threads {
            seen.extend(t.join().unwrap());
        }
        assert!(set.informers().is_empty(), "everyone left");
        for informer in seen.values() {
            assert!(informer.fanout.lock().subscribers.is_empty());
            assert!(
                informer.cancel.is_cancelled(),
                "an informer without subscribers is still running"
            );
        }
        rt.block_on(set.shutdown());
    }

    #[tokio::test]
    async fn a_stall_is_counted_once_however_often_the_source_repeats_it() {
        let (events, rx) = mpsc::unbounded_channel();
        let telemetry = Telemetry::default();
        let set = InformerSet::new(
            Arc::new(Scripted(Mutex::new(Some(rx)))),
            Arc::new(Activity::default()),
            CancellationToken::new(),
        )
        .with_telemetry(telemetry.clone());
        let (tx, mut deltas) = mpsc::unbounded_channel();
        let handle = set.subscribe(all_configmaps(), tx);
        let stall = |s| SourceError::Stalled {
            silent: std::time::Duration::from_secs(s),
            cause: "probe list unanswered after 10s".into(),
        };
        events.send(Ok(WatchEvent::Init)).unwrap();
        events.send(Ok(WatchEvent::InitDone)).unwrap();
        // One stall reported twice, a recovery, then a second stall.
        events.send(Err(stall(30))).unwrap();
        events.send(Err(stall(70))).unwrap();
        events.send(Ok(WatchEvent::Progress)).unwrap();
        events.send(Err(stall(30))).unwrap();
        events.send(Ok(WatchEvent::Apply(cm("after")))).unwrap();
        // The Apply comes after every stall report: once it is a delta,
        // all of them were seen.
        loop {
            let d = tokio::time::timeout(std::time::Duration::from_secs(10), deltas.recv())
                .await
                .unwrap()
                .unwrap();
            if d.dtype == DeltaType::Added {
                break;
            }
        }
        let text = telemetry.metrics().encode().unwrap();
        assert!(
            text.contains("kubewasm_informer_watch_stalls_total{kind=\"configmaps\"} 2\n"),
            "{text}"
        );
        set.unsubscribe(&handle);
    }

    #[tokio::test]
    async fn a_delete_of_an_object_never_held_is_not_emitted() {
        let (events, rx) = mpsc::unbounded_channel();
        let set = InformerSet::new(
            Arc::new(Scripted(Mutex::new(Some(rx)))),
            Arc::new(Activity::default()),
            CancellationToken::new(),
        );
        let (tx, mut deltas) = mpsc::unbounded_channel();
        let handle = set.subscribe(all_configmaps(), tx);
        for e in [
            WatchEvent::Init,
            WatchEvent::InitApply(cm("held")),
            WatchEvent::InitDone,
            WatchEvent::Delete(cm("never-held")),
            WatchEvent::Delete(cm("held")),
        ] {
            events.send(Ok(e)).unwrap();
        }
        let mut seen = Vec::new();
        while seen.len() < 3 {
            let d = tokio::time::timeout(std::time::Duration::from_secs(10), deltas.recv())
                .await
                .unwrap()
                .unwrap();
            let name = d.object.as_ref().map(|o| o.meta().name.to_string());
            seen.push((d.dtype, name));
        }
        assert_eq!(
            seen,
            [
                (DeltaType::Added, Some("held".to_owned())),
                (DeltaType::Synced, None),
                (DeltaType::Deleted, Some("held".to_owned())),
            ]
        );
        assert!(deltas.try_recv().is_err(), "nothing else was emitted");
        set.unsubscribe(&handle);
        set.shutdown().await;
    }

    #[tokio::test]
    async fn a_forbidden_informer_names_its_plugins_until_data_flows() {
        let (events, rx) = mpsc::unbounded_channel();
        let set = InformerSet::new(
            Arc::new(Scripted(Mutex::new(Some(rx)))),
            Arc::new(Activity::default()),
            CancellationToken::new(),
        );
        let spec = InformerSpec {
            kind: KindInfo::new("", "v1", "ConfigMap", "configmaps", true),
            namespace: None,
            label_selector: None,
            field_selector: None,
        };
        let (tx, mut deltas) = mpsc::unbounded_channel();
        let a = set.subscribe_as(spec.clone(), tx.clone(), Arc::from("beta"));
        let b = set.subscribe_as(spec, tx, Arc::from("alpha"));
        let informer = a.informer.clone();
        assert_eq!(informer.subscriber_names(), ["alpha", "beta"]);
        let wait = |want: bool| {
            let informer = informer.clone();
            async move {
                tokio::time::timeout(std::time::Duration::from_secs(10), async {
                    while informer.forbidden().is_some() != want {
                        tokio::task::yield_now().await;
                    }
                })
                .await
                .unwrap();
            }
        };
        events.send(Ok(WatchEvent::Init)).unwrap();
        events
            .send(Err(SourceError::Forbidden {
                verb: "list",
                message: "no".into(),
            }))
            .unwrap();
        wait(true).await;
        assert_eq!(informer.forbidden().unwrap().verb, "list");
        // A retry's Init alone does not clear it; the list does.
        events.send(Ok(WatchEvent::Init)).unwrap();
        events.send(Ok(WatchEvent::InitDone)).unwrap();
        wait(false).await;
        assert_eq!(deltas.recv().await.unwrap().dtype, DeltaType::Synced);
        set.unsubscribe(&a);
        assert_eq!(informer.subscriber_names(), ["alpha"]);
        set.unsubscribe(&b);
        set.shutdown().await;
    }
}
