//! One shared informer: its cache, who subscribed, and what it tells them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::internal_events::InformerForbidden;
use super::undecodable::{UndecodableObject, Undecodables};
use crate::activity::Activity;
use crate::object::ObjectHandle;
use crate::telemetry::InformerCounters;

use super::{Delta, DeltaType, InformerSpec, Snapshot, Store};

pub(super) struct Fanout {
    pub(super) subscribers: Vec<(u64, mpsc::UnboundedSender<Delta>)>,
    pub(super) synced: bool,
    /// Who subscribed, by subscription id (plugin names; empty if unnamed).
    pub(super) names: Vec<(u64, Arc<str>)>,
    /// The last live delta's sequence number.
    pub(super) seq: u64,
    /// The object of the last delta emitted (its resourceVersion is the
    /// informer's last seen one; kept as the handle: an Arc clone per delta).
    pub(super) last: Option<ObjectHandle>,
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
    pub(super) spec: InformerSpec,
    pub(super) store: Store,
    pub(super) fanout: Mutex<Fanout>,
    pub(super) synced_tx: watch::Sender<bool>,
    pub(super) cancel: CancellationToken,
    pub(super) activity: Arc<Activity>,
    pub(super) counters: InformerCounters,
    /// Set while the source answers 403; cleared by the next data.
    pub(super) forbidden: Mutex<Option<Forbidden>>,
    /// This informer's own counts (the metrics sum them per kind).
    pub(super) watch_restarts: AtomicU64,
    pub(super) relists: AtomicU64,
    /// Objects the source could not decode, as they stand now.
    pub(super) undecodable: Mutex<Undecodables>,
    /// The shards whose objects it caches, when it caches only those
    /// (`shardCache: held`); it lists again whenever they change.
    pub(super) shards: Option<watch::Receiver<crate::shard::ShardSet>>,
    /// The highest resourceVersion its source has returned (0: none yet):
    /// how far it has followed the API server, for a shard's hand-over.
    pub(super) high_water: AtomicU64,
    /// The shards its last complete list was of (`None`: every object).
    pub(super) applied: watch::Sender<Option<crate::shard::ShardSet>>,
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
    /// Its deltas are counted into `counters`.
    pub fn detached(spec: InformerSpec, counters: InformerCounters) -> Arc<Self> {
        let (synced_tx, _) = watch::channel(true);
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
            undecodable: Mutex::new(Undecodables::new(counters.undecodable.clone())),
            counters,
            forbidden: Mutex::new(None),
            watch_restarts: AtomicU64::new(0),
            relists: AtomicU64::new(0),
            high_water: AtomicU64::new(0),
            shards: None,
            applied: watch::channel(None).0,
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
    pub(super) fn set_forbidden(&self, refusal: Option<Forbidden>) {
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

    /// Waits until it caches the objects of `shards` (a complete list of
    /// them applied); at once for an informer that caches every object.
    pub async fn wait_shards(&self, shards: crate::shard::ShardSet) {
        if self.shards.is_none() {
            return;
        }
        let mut rx = self.applied.subscribe();
        let _ = rx.wait_for(|a| *a == Some(shards)).await;
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

    /// The objects its source could not decode now (the cache holds their
    /// last decoded state, if any): named ones in key order, then those
    /// whose name was unreadable too.
    pub fn undecodable(&self) -> Vec<UndecodableObject> {
        self.undecodable.lock().list()
    }

    /// The highest resourceVersion its source has returned, as a number
    /// (0 before any): a replica handing a shard over records it, and the
    /// next holder waits until its own informer has come as far before it
    /// replays, so that it never hands a plugin an older state than the
    /// last holder did.
    pub fn high_water(&self) -> u64 {
        self.high_water.load(Ordering::Relaxed)
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

    pub(super) fn emit(&self, fanout: &mut Fanout, mut delta: Delta) {
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
    pub(super) fn add_subscriber(
        &self,
        id: u64,
        name: Arc<str>,
        tx: mpsc::UnboundedSender<Delta>,
    ) -> u64 {
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

    pub(super) fn send_one(&self, tx: &mpsc::UnboundedSender<Delta>, d: Delta) {
        self.activity.emit(1);
        if tx.send(d).is_err() {
            self.activity.settle(1);
        }
    }

    pub(super) fn remove_subscriber(&self, id: u64) -> usize {
        let mut fanout = self.fanout.lock();
        fanout.subscribers.retain(|(sid, _)| *sid != id);
        fanout.names.retain(|(sid, _)| *sid != id);
        fanout.subscribers.len()
    }
}
