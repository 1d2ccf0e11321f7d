//! Replacing a running version: the new one serves before the old one
//! stops, and takes over the deletes the old one had not handled and the
//! plugin's dead deletes, ahead of its replay.

use std::sync::Arc;

use super::version::PluginVersion;
use super::{Load, PluginHost};
use crate::dispatch::queue::Item;
use crate::dispatch::{Key, SubId};
use crate::informer::DeltaType;
use crate::runtime::{LoadError, Tier};

impl PluginHost {
    pub(super) async fn swap_in(
        &self,
        name: &str,
        load: Load,
    ) -> Result<Arc<PluginVersion>, LoadError> {
        let previous = self.plugins.lock().await.get(name).cloned();
        let version = match self.start(name, load, previous.as_deref()).await {
            Ok(v) => Arc::new(v),
            Err(e) => {
                if let Some(p) = &previous {
                    p.dispatcher.uncut();
                }
                return Err(e);
            }
        };
        let old = {
            let mut plugins = self.plugins.lock().await;
            let old = plugins.insert(name.to_owned(), version.clone());
            // Leadership was gained while it started: its intakes belong to
            // the old term; `replay_all` either ran before the insert or
            // will skip it, so replay here (under the same lock).
            let state = self.leadership.state();
            if state.leading && version.term.load(std::sync::atomic::Ordering::SeqCst) != state.term
            {
                version.replay(&self.informers, state.term);
            }
            old
        };
        if let Some(old) = &old {
            let old_informers = old.informers();
            // The new version's pair reading the informer `key`'s old pair
            // read: its id, registration index and cut.
            let successor = |key: &Key| {
                old_informers
                    .get(key.0 as usize)
                    .and_then(|i| version.successor_of(i))
            };
            let left = old.stop(&self.informers).await;
            // Deletes set aside for a suspended shard stay aside in the new
            // version (those its own stream has are after its cut).
            let aside: Vec<_> = old
                .dispatcher
                .take_aside()
                .into_iter()
                .filter_map(|(key, item)| {
                    let (id, index, cut) = successor(&key)?;
                    (item.seq <= cut).then(|| moved(id, index, key, item))
                })
                .collect();
            version.dispatcher.keep_aside(aside);
            let (keep, drop): (Vec<_>, Vec<_>) = left
                .into_iter()
                .map(|(key, item)| (successor(&key), key, item))
                .partition(|(to, _, item)| {
                    to.is_some_and(|(_, _, cut)| {
                        item.delta.dtype == DeltaType::Deleted && item.seq <= cut
                    })
                });
            let dropped: Vec<_> = drop.into_iter().map(|(_, k, i)| (k, i)).collect();
            old.dispatcher.drop_items(&dropped);
            let handed: Vec<_> = keep
                .into_iter()
                .filter_map(|(to, key, item)| to.map(|(id, index, _)| moved(id, index, key, item)))
                .collect();
            tracing::info!(
                plugin = name,
                handed_over = handed.len(),
                covered = dropped.len(),
                "previous version stopped; the deletes it had not handled go to the new version (the rest is in the new version's replay or stream)"
            );
            version.dispatcher.hand_over(handed);
        }
        self.requeue_dead_letters(name, &version);
        version.dispatcher.start_when_synced(version.informers());
        self.telemetry
            .metrics()
            .plugin_fast_tier(name, Some(version.tier() == Tier::Fast));
        Ok(version)
    }

    /// A new version gets the plugin's dead letters: permanently failed
    /// deletes are queued again (ahead of the replay), in the subscription
    /// pair that reads the same informer; parked keys came over with the
    /// old version's queue, and the other dead deltas' objects are in the
    /// replay, so their records are cleared.
    fn requeue_dead_letters(&self, name: &str, version: &PluginVersion) {
        let dead = version.stats().dead_letters.lock().take();
        if dead.is_empty() {
            return;
        }
        let total = dead.len();
        let requeued: Vec<_> = dead
            .into_iter()
            .filter(|t| !t.parked && t.item.delta.dtype == DeltaType::Deleted)
            .filter_map(|t| {
                let (id, filter) = version.pair_for(t.spec.as_ref()?)?;
                Some(moved(id, filter.index, t.key, t.item))
            })
            .collect();
        // Settled when they died; counted again while queued.
        self.activity
            .emit(requeued.iter().map(|(_, i)| i.weight).sum());
        tracing::info!(
            plugin = name,
            dead_letters = total,
            requeued_deletes = requeued.len(),
            "new version: dead deletes queued again, the other dead deltas' objects are in its replay"
        );
        version.dispatcher.hand_over(requeued);
    }
}

/// `item` of `key`, moved to subscription pair `id` (registration index
/// `index`) of a new version with fresh attempts.
fn moved(id: SubId, index: u32, key: Key, mut item: Item) -> (Key, Item) {
    item.attempts = 0;
    item.delta.subscription = index;
    ((id, key.1), item)
}
