//! One running version of a plugin: its subscriptions, which of them
//! takes over a delta of an earlier version, its replay for a new
//! leadership term, and how it stops.

use std::sync::Arc;

use tokio::sync::mpsc;

use super::LoadInfo;
use crate::dispatch::queue::Item;
use crate::dispatch::{Dispatcher, Key, PluginStats, SubId, SubscriptionFilter};
use crate::informer::{Informer, InformerSet, InformerSpec, SubscriptionHandle};
use crate::runtime::{Registration, Tier};

/// One running version of a plugin.
#[derive(Debug)]
pub struct PluginVersion {
    pub name: Arc<str>,
    pub registration: Registration,
    pub load: LoadInfo,
    pub(super) dispatcher: Dispatcher,
    /// What each subscription asks for, to subscribe again on a new term.
    pub(super) subscriptions: Vec<(InformerSpec, SubscriptionFilter)>,
    pub(super) handles: parking_lot::Mutex<Vec<SubscriptionHandle>>,
    /// The leadership term its intakes forward in.
    pub(super) term: std::sync::atomic::AtomicU64,
    pub(super) indexes: Vec<(Arc<Informer>, String)>,
    pub(super) prepared: Arc<crate::runtime::Prepared>,
}

impl PluginVersion {
    /// The version the plugin sees in its context (12 hex digits of the
    /// component's SHA-256).
    pub fn version(&self) -> &str {
        &self.prepared.version
    }

    /// Which compiler made the code this version runs (a fast-tier
    /// version is replaced by optimized code once that is compiled).
    pub fn tier(&self) -> Tier {
        self.prepared.tier
    }

    /// This version's subscription pair fed by `informer`: its id, its
    /// registration index and its cut.
    pub(super) fn successor_of(&self, informer: &Arc<Informer>) -> Option<(SubId, u32, u64)> {
        self.handles
            .lock()
            .iter()
            .zip(&self.subscriptions)
            .enumerate()
            .find(|(_, (h, _))| Arc::ptr_eq(&h.informer, informer))
            .map(|(id, (h, (_, f)))| (pair_id(id), f.index, h.cut))
    }

    /// This version's subscription pair reading `spec` (where a dead letter
    /// of an earlier version belongs now).
    pub(super) fn pair_for(&self, spec: &InformerSpec) -> Option<(SubId, &SubscriptionFilter)> {
        self.subscriptions
            .iter()
            .enumerate()
            .find(|(_, (s, _))| s == spec)
            .map(|(id, (_, f))| (pair_id(id), f))
    }

    pub fn stats(&self) -> &Arc<PluginStats> {
        self.dispatcher.stats()
    }

    /// The source language, when the component says (see
    /// [`crate::runtime::language`]).
    pub fn language(&self) -> Option<&str> {
        self.prepared.language.as_deref()
    }

    /// What each subscription watches, as its informer describes it.
    pub fn subscription_specs(&self) -> Vec<String> {
        self.subscriptions
            .iter()
            .map(|(spec, _)| spec.to_string())
            .collect()
    }

    pub fn is_idle(&self) -> bool {
        self.dispatcher.is_idle()
    }

    /// Instances created so far: the first ones and every replacement
    /// after a trap (a quarantined plugin gets none).
    pub fn instantiations(&self) -> u64 {
        self.prepared
            .instantiations
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Subscribes every subscription again for leadership term `term`:
    /// the informer replays its cache into the new intake as initial deltas
    /// (atomically with live deltas, so order holds), then the old
    /// subscription goes (the informer stays up: it always has one).
    pub(super) fn replay(&self, informers: &InformerSet, term: u64) {
        let mut handles = self.handles.lock();
        for (id, ((spec, filter), handle)) in self
            .subscriptions
            .iter()
            .zip(handles.iter_mut())
            .enumerate()
        {
            let (tx, rx) = mpsc::unbounded_channel();
            let fresh = informers.subscribe_as(spec.clone(), tx, self.name.clone());
            self.dispatcher.add_intake(
                pair_id(id),
                filter.clone(),
                fresh.informer.clone(),
                rx,
                term,
                fresh.cut,
            );
            let old = std::mem::replace(handle, fresh);
            informers.unsubscribe(&old);
        }
        self.term.store(term, std::sync::atomic::Ordering::SeqCst);
    }

    /// Each subscription pair's informer, by pair id.
    pub(super) fn informers(&self) -> Vec<Arc<Informer>> {
        self.handles
            .lock()
            .iter()
            .map(|h| h.informer.clone())
            .collect()
    }

    /// Stops delivering deltas the informers emit after now (a successor
    /// is about to subscribe and will receive them).
    pub(super) fn cut(&self) {
        let cuts = self
            .handles
            .lock()
            .iter()
            .enumerate()
            .map(|(id, h)| (pair_id(id), h.informer.seq()))
            .collect();
        self.dispatcher.cut(cuts);
    }

    /// Stops; returns the deltas it did not handle (see [`Dispatcher::stop`]).
    pub(super) async fn stop(&self, informers: &InformerSet) -> Vec<(Key, Item)> {
        let handles = std::mem::take(&mut *self.handles.lock());
        let left = self.dispatcher.stop().await;
        for h in &handles {
            informers.unsubscribe(h);
        }
        for (informer, index) in &self.indexes {
            informer.store().remove_index(index);
        }
        left
    }

    /// Stops with nobody to take over what it did not handle.
    pub(super) async fn stop_for_good(&self, informers: &InformerSet) {
        let left = self.stop(informers).await;
        tracing::info!(
            plugin = %self.name,
            unhandled = left.len(),
            "plugin version stopped; what it had not handled is in the next leader's (or the next start's) replay"
        );
        self.dispatcher.drop_items(&left);
    }
}
/// A subscription pair's id: its position in the version's subscriptions.
pub(super) fn pair_id(position: usize) -> SubId {
    SubId::try_from(position).unwrap_or(SubId::MAX)
}
