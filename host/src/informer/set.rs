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
                    undecodable: Mutex::new(Undecodables::new(counters.undecodable.clone())),
                    synced_tx,
                    cancel: self.cancel.child_token(),
                    activity: self.activity.clone(),
                    counters,
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
