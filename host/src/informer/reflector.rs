//! An informer's list+watch loop (client-go's Reflector and DeltaFIFO):
//! source events into its store and deltas to its subscribers.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures::StreamExt;

use super::internal_events::{
    ObjectUndecodable, Relisted, WatchFailed, WatchResumed, WatchStalled,
};
use crate::object::{KObject, ObjectHandle};

use super::shared::Fanout;
use super::{
    Delta, DeltaType, Forbidden, Informer, Source, SourceError, Undecodable, UndecodableEvent,
    WatchEvent,
};

impl Informer {
    /// Runs until cancelled; returns false if the source's stream ended
    /// by itself (it never should: the informer is then dead).
    pub(super) async fn run(self: Arc<Self>, source: Arc<dyn Source>) -> bool {
        // With `shardCache: held`, the shards whose objects it caches: a
        // change starts a new list+watch of the new ones.
        let mut shards_rx = self.shards.clone();
        let mut shards = shards_rx.as_mut().map(|r| *r.borrow_and_update());
        let mut stream = match &shards {
            Some(s) => source.watch_shards(&self.spec, s),
            None => source.watch(&self.spec),
        };
        let mut relist = Relist::Idle;
        let mut lists = 0u64;
        // Since when the source reports the watch stalled.
        let mut stalled: Option<std::time::Instant> = None;
        // The version of the watched event being applied, raised into the
        // high water once it is in the store.
        let mut pending_high_water = 0u64;
        loop {
            if pending_high_water > 0 {
                self.high_water
                    .fetch_max(std::mem::take(&mut pending_high_water), Ordering::Relaxed);
            }
            let event = tokio::select! {
                () = self.cancel.cancelled() => break,
                changed = async {
                    match shards_rx.as_mut() {
                        Some(r) => r.changed().await.map(|()| *r.borrow_and_update()),
                        None => std::future::pending().await,
                    }
                } => {
                    match changed {
                        Ok(next) if Some(next) != shards => {
                            self.evict_outside(&next);
                            shards = Some(next);
                            stream = source.watch_shards(&self.spec, &next);
                            relist = Relist::Idle;
                        }
                        Ok(_) => {}
                        // The set is gone: the host is stopping.
                        Err(_) => shards_rx = None,
                    }
                    continue;
                }
                event = stream.next() => event,
            };
            // How far it has followed the API server: a watched change at
            // once, a list's items once the list is applied (at InitDone).
            match (&event, &mut relist) {
                (Some(Ok(WatchEvent::InitApply(o))), Relist::Buffering(list)) => {
                    list.high_water = list.high_water.max(version_of(o));
                }
                (
                    Some(Ok(
                        WatchEvent::InitApply(o) | WatchEvent::Apply(o) | WatchEvent::Delete(o),
                    )),
                    _,
                ) => {
                    pending_high_water = version_of(o);
                }
                _ => {}
            }
            // Objects of shards it does not cache are not its own (the
            // source may return everything: the API server without sharded
            // lists, the local cluster).
            let event = match (event, &shards) {
                (
                    Some(Ok(
                        WatchEvent::InitApply(o) | WatchEvent::Apply(o) | WatchEvent::Delete(o),
                    )),
                    Some(s),
                ) if !s.owns_object(&o) => {
                    continue;
                }
                (event, _) => event,
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
                    self.watch_restarts.fetch_add(1, Ordering::Relaxed);
                    WatchFailed {
                        informer: &self.spec,
                        error: &err,
                    }
                    .emit(&self.counters)
                }
                Ok(WatchEvent::Undecodable(u)) => {
                    ObjectUndecodable {
                        informer: &self.spec,
                        object: &u,
                    }
                    .emit(&self.counters);
                    match (u.event, &mut relist) {
                        (UndecodableEvent::InitApply, Relist::Buffering(list)) => {
                            list.failed.push(u);
                        }
                        (UndecodableEvent::Delete, _) => self.delete_undecodable(&u),
                        // An Apply, or an item of no list (applied at once).
                        _ => self.keep_undecodable(&u),
                    }
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
                    relist = Relist::Buffering(Listed::default());
                }
                Ok(WatchEvent::InitApply(obj)) => match &mut relist {
                    Relist::Buffering(list) => list.objects.push(obj),
                    Relist::Idle => self.apply(obj),
                },
                Ok(WatchEvent::InitDone) => {
                    match std::mem::replace(&mut relist, Relist::Idle) {
                        Relist::Buffering(listed) => self.replace(listed),
                        // The end of no list: nothing to compare the cache
                        // with (an empty list here would delete everything).
                        Relist::Idle => self.synced(&mut self.fanout.lock()),
                    }
                    if shards.is_some() {
                        self.applied.send_replace(shards);
                    }
                }
                Ok(WatchEvent::Apply(obj)) => self.apply(obj),
                Ok(WatchEvent::Delete(obj)) => self.delete(obj),
            }
        }
        // Its objects leave the gauge with it.
        self.undecodable.lock().clear();
        tracing::debug!(informer = %self.spec, "informer stopped");
        true
    }

    /// Drops, without a delta, the cached objects of shards it no longer
    /// caches: they were not deleted, only handed to another replica.
    fn evict_outside(&self, shards: &crate::shard::ShardSet) {
        let _fanout = self.fanout.lock();
        let gone: Vec<ObjectHandle> = self
            .store
            .snapshot()
            .iter()
            .filter(|o| !shards.owns_object(o))
            .cloned()
            .collect();
        for obj in &gone {
            self.store.remove(&obj.key());
        }
        tracing::info!(informer = %self.spec, evicted = gone.len(), shards = ?shards.indexes().collect::<Vec<_>>(), "the shards cached changed: listing them");
    }

    pub(super) fn apply(&self, obj: KObject) {
        let obj = Arc::new(obj);
        let mut fanout = self.fanout.lock();
        self.undecodable.lock().remove(|| obj.key());
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

    pub(super) fn delete(&self, obj: KObject) {
        let mut fanout = self.fanout.lock();
        let key = obj.key();
        self.undecodable.lock().remove(|| key.clone());
        // The watch event carries the final state. A delete of an object the
        // cache never held (a watch racing a relist, or a selector the object
        // never matched) is nothing to the subscribers: emitting it would
        // hand plugins a delete of something they were never told about.
        if self.store.remove(&key).is_some() {
            self.emit(&mut fanout, Delta::new(DeltaType::Deleted, Arc::new(obj)));
        }
    }

    /// A watched deletion of an object that could not be decoded: the
    /// object goes by the key read from its metadata, and subscribers get
    /// a plain delete with its last decoded state. Left cached, it would
    /// live on (and be resynced) until a relist, which bookmarks make rare.
    fn delete_undecodable(&self, u: &Undecodable) {
        let Some(key) = &u.key else {
            return;
        };
        let mut fanout = self.fanout.lock();
        self.undecodable.lock().remove(|| key.clone());
        if let Some(last) = self.store.remove(key) {
            self.emit(&mut fanout, Delta::new(DeltaType::Deleted, last));
        }
    }

    /// An added or modified object that could not be decoded: the cache
    /// keeps its previous state (nothing better is known) and the object
    /// is listed as undecodable until it decodes or goes.
    fn keep_undecodable(&self, u: &Undecodable) {
        if let Some(key) = &u.key {
            self.undecodable
                .lock()
                .insert(key.clone(), u.error.to_string());
        }
    }

    /// An object recreated under the same key (another uid): the old one
    /// went, so it is a delete (its final state unknown: the deletion was
    /// not watched) and then an add, never an update from one object to
    /// another. The store already holds the new one.
    pub(super) fn emit_recreated(&self, fanout: &mut Fanout, old: ObjectHandle, new: ObjectHandle) {
        let mut gone = Delta::new(DeltaType::Deleted, old);
        gone.final_state_unknown = true;
        self.emit(fanout, gone);
        self.emit(fanout, Delta::new(DeltaType::Added, new));
    }

    /// Applies a complete list: new objects are added, changed ones updated,
    /// recreated ones (another uid) deleted then added, and objects missing
    /// from the list deleted with their last known state (flagged: the
    /// deletion was not watched). An item that could not be decoded is not
    /// missing: its cached state, if any, is kept. One whose name was
    /// unreadable too could be any cached object, so such a list deletes
    /// nothing.
    pub(super) fn replace(&self, listed: Listed) {
        let Listed {
            objects,
            failed,
            high_water,
        } = listed;
        let mut fanout = self.fanout.lock();
        // Before any delta of the list: whoever sees one sees this too.
        self.undecodable.lock().replace(&failed);
        let first = !fanout.synced;
        let mut seen = std::collections::HashSet::with_capacity(objects.len() + failed.len());
        for obj in objects {
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
        let nameless = failed.iter().filter(|u| u.key.is_none()).count();
        seen.extend(failed.iter().filter_map(|u| u.key.clone()));
        let vanished: Vec<ObjectHandle> = self
            .store
            .snapshot()
            .iter()
            .filter(|o| !seen.contains(&o.key()))
            .cloned()
            .collect();
        if nameless > 0 && !vanished.is_empty() {
            tracing::warn!(
                informer = %self.spec,
                kept = vanished.len(),
                unreadable = nameless,
                "the list has items whose name is unreadable: the cached objects it did not return are kept, not deleted, until a list without such items"
            );
        } else {
            for obj in vanished {
                self.store.remove(&obj.key());
                let mut d = Delta::new(DeltaType::Deleted, obj);
                d.final_state_unknown = true;
                self.emit(&mut fanout, d);
            }
        }
        self.synced(&mut fanout);
        self.high_water.fetch_max(high_water, Ordering::Relaxed);
    }

    /// Marks the cache synced after its first list (once).
    pub(super) fn synced(&self, fanout: &mut Fanout) {
        if !fanout.synced {
            fanout.synced = true;
            self.emit(fanout, Delta::synced());
            self.synced_tx.send_replace(true);
            tracing::info!(informer = %self.spec, objects = self.store.len(), "cache synced");
        }
    }
}

/// Where the informer is in a (re)list.
pub(super) enum Relist {
    /// No list in progress: an `InitApply` applies at once.
    Idle,
    /// The list in progress, applied whole at `InitDone`.
    Buffering(Listed),
}

/// What a list brought so far.
#[derive(Default)]
pub(super) struct Listed {
    pub(super) objects: Vec<KObject>,
    /// Its items that could not be decoded: their keys are not missing
    /// from the list, only unknown in content.
    pub(super) failed: Vec<Undecodable>,
    /// The highest resourceVersion among its items.
    pub(super) high_water: u64,
}

/// An object's resourceVersion as a number (an etcd revision); 0 when it
/// is not one.
fn version_of(obj: &KObject) -> u64 {
    obj.meta().resource_version.parse().unwrap_or(0)
}

/// True when `new` is another object than `old` under the same key
/// ([`crate::object::recreated`]).
pub(super) fn recreated(old: &KObject, new: &KObject) -> bool {
    crate::object::recreated(&old.meta().uid, &new.meta().uid)
}
