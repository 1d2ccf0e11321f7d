//! The SharedInformerFactory: informers shared between subscriptions.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::activity::Activity;
use crate::telemetry::Telemetry;

use super::shared::Fanout;
use super::undecodable::Undecodables;
use super::{Delta, Informer, InformerSpec, Source, Store};

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
    pub(super) source: Arc<dyn Source>,
    pub(super) informers: Mutex<HashMap<InformerSpec, Arc<Informer>>>,
    pub(super) next_id: AtomicU64,
    pub(super) tasks: TaskTracker,
    pub(super) cancel: CancellationToken,
    pub(super) activity: Arc<Activity>,
    pub(super) telemetry: Telemetry,
    /// Set with `shardCache: held`: the shards every informer caches.
    pub(super) shards: Option<watch::Sender<crate::shard::ShardSet>>,
}

impl std::fmt::Debug for InformerSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InformerSet").finish_non_exhaustive()
    }
}

impl InformerSet {
    /// Informers over `source`; counts deltas, restarts and relists into
    /// `telemetry`, and reports an informer task that dies to its liveness.
    pub fn new(
        source: Arc<dyn Source>,
        activity: Arc<Activity>,
        cancel: CancellationToken,
        telemetry: Telemetry,
    ) -> Self {
        Self {
            activity,
            source,
            informers: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            tasks: TaskTracker::new(),
            cancel,
            telemetry,
            shards: None,
        }
    }

    /// Its informers cache only the objects of the shards `initial` holds,
    /// and list again whenever [`set_shards`](Self::set_shards) changes
    /// them (`shardCache: held`).
    #[must_use]
    pub fn caching_shards(mut self, initial: crate::shard::ShardSet) -> Self {
        self.shards = Some(watch::channel(initial).0);
        self
    }

    /// The shards whose objects the informers cache from now on; `None`
    /// when they cache every object.
    pub fn set_shards(&self, shards: crate::shard::ShardSet) -> Option<crate::shard::ShardSet> {
        let tx = self.shards.as_ref()?;
        tx.send_if_modified(|s| std::mem::replace(s, shards) != shards);
        Some(shards)
    }

    /// Each informer's [`high_water`](Informer::high_water), by its spec
    /// as displayed (the same on every replica running the same plugins).
    pub fn high_waters(&self) -> std::collections::BTreeMap<String, u64> {
        self.informers()
            .iter()
            .filter(|i| i.high_water() > 0)
            .map(|i| (i.spec().to_string(), i.high_water()))
            .collect()
    }

    /// The informers named in `marks` that have not followed the API server
    /// as far as their mark yet, with how far they have.
    pub fn behind(&self, marks: &std::collections::BTreeMap<String, u64>) -> Vec<(String, u64)> {
        self.informers()
            .iter()
            .map(|i| (i.spec().to_string(), i.high_water()))
            .filter(|(spec, h)| marks.get(spec).is_some_and(|m| h < m))
            .collect()
    }

    /// Waits until each informer named in `marks` has followed the API
    /// server at least as far as the mark (`true`), or until those behind
    /// have received nothing for `quiet` since their first list
    /// (`false`): a mark can be the
    /// version of a delete this replica's list came after, out of reach
    /// until the next change, while an informer that lags keeps receiving.
    /// Polled: the informers' hot path only raises a number.
    pub async fn wait_high_waters(
        &self,
        marks: &std::collections::BTreeMap<String, u64>,
        quiet: std::time::Duration,
    ) -> bool {
        let mut last = (0u64, tokio::time::Instant::now());
        loop {
            let behind = self.behind(marks);
            if behind.is_empty() {
                return true;
            }
            // One still in its first list is not quiet, only busy.
            let listing = self.informers().iter().any(|i| !i.has_synced());
            let progress = behind.iter().map(|(_, h)| h).sum::<u64>();
            if progress != last.0 || listing {
                last = (progress, tokio::time::Instant::now());
            } else if last.1.elapsed() >= quiet {
                return false;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// Waits until every informer caches the objects of `shards` (each
    /// applied a complete list of them).
    pub async fn wait_shards(&self, shards: crate::shard::ShardSet) {
        for i in self.informers() {
            i.wait_shards(shards).await;
        }
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
                let counters = self
                    .telemetry
                    .metrics()
                    .informer(&spec.kind.resource_name());
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
                    high_water: AtomicU64::new(0),
                    undecodable: Mutex::new(Undecodables::new(counters.undecodable.clone())),
                    synced_tx,
                    cancel: self.cancel.child_token(),
                    activity: self.activity.clone(),
                    counters,
                    shards: self.shards.as_ref().map(watch::Sender::subscribe),
                    applied: watch::channel(None).0,
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
