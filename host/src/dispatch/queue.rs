//! A per-plugin work queue in the shape of client-go's workqueue + DeltaFIFO:
//! one FIFO of pending deltas per object key, keys handed out one at a time
//! (per-object order), pending deltas of one object coalesced (so memory is
//! bounded by the number of objects, not the number of events).

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hash;

use crate::informer::DeltaType;
use crate::runtime::CallDelta;

/// A queued delta with its bookkeeping.
#[derive(Debug, Clone)]
pub struct Item {
    pub delta: CallDelta,
    /// Failed attempts so far.
    pub attempts: u32,
    /// How many raw deltas this item stands for (after coalescing).
    pub weight: u64,
    /// When the oldest delta it stands for reached the informer.
    pub received: std::time::Instant,
    /// The informer's sequence number of the newest delta it stands for
    /// (see [`Delta::seq`](crate::informer::Delta::seq)).
    pub seq: u64,
    /// When its first attempt failed.
    pub first_failed: Option<std::time::SystemTime>,
}

impl Item {
    pub fn new(delta: CallDelta) -> Self {
        Self {
            delta,
            attempts: 0,
            weight: 1,
            received: std::time::Instant::now(),
            seq: 0,
            first_failed: None,
        }
    }

    #[must_use]
    pub fn seq(mut self, seq: u64) -> Self {
        self.seq = seq;
        self
    }

    #[must_use]
    pub fn received_at(mut self, at: std::time::Instant) -> Self {
        self.received = at;
        self
    }
}

/// What pushing did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    Queued,
    /// Merged into a pending delta of the same object.
    Coalesced,
    /// A live add and its delete both pending cancelled out: the plugin
    /// never saw the object. Carries the weight settled.
    Cancelled(u64),
    /// A resync dropped because a newer delta is already pending.
    Dropped,
}

#[derive(Debug)]
pub struct KeyedQueue<K> {
    pending: HashMap<K, VecDeque<Item>>,
    ready: VecDeque<K>,
    in_flight: HashSet<K>,
}

impl<K> Default for KeyedQueue<K> {
    fn default() -> Self {
        Self {
            pending: HashMap::new(),
            ready: VecDeque::new(),
            in_flight: HashSet::new(),
        }
    }
}

/// Merges `next` into `last` when the pair can be expressed as one delta.
fn coalesce(last: &mut Item, next: Item) -> Result<Option<u64>, Box<Item>> {
    use DeltaType::*;
    let w = last.weight + next.weight;
    let seq = last.seq.max(next.seq);
    let merged = match (last.delta.dtype, next.delta.dtype) {
        (Updated, Updated) => {
            last.delta.object = next.delta.object;
            last.weight = w;
            Ok(None)
        }
        (Added, Updated)
        | (Resync, Updated)
        | (Resync, Resync)
        | (Updated, Resync)
        | (Added, Resync) => {
            last.delta.object = next.delta.object;
            if last.delta.dtype == Resync && next.delta.dtype == Updated {
                last.delta.dtype = Updated;
                last.delta.old = next.delta.old;
            }
            last.weight = w;
            Ok(None)
        }
        (Updated, Deleted) | (Resync, Deleted) => {
            last.delta = next.delta;
            last.weight = w;
            Ok(None)
        }
        // A live add and its delete: the plugin never saw the object.
        (Added, Deleted) if last.attempts == 0 && !last.delta.initial => Ok(Some(w)),
        // An initial add (a start's list, a new version's replay) stands for
        // an object the plugin may have acted on before (in a previous run
        // or version): its delete must arrive.
        (Added, Deleted) if last.delta.initial => {
            last.delta = next.delta;
            last.weight = w;
            Ok(None)
        }
        _ => Err(Box::new(next)),
    };
    if matches!(merged, Ok(None)) {
        last.seq = seq;
    }
    merged
}

impl<K: Clone + Eq + Hash> KeyedQueue<K> {
    pub fn push(&mut self, key: K, item: Item) -> Pushed {
        let dtype = item.delta.dtype;
        let in_flight = self.in_flight.contains(&key);
        let queue = self.pending.entry(key.clone()).or_default();
        if let Some(last) = queue.back_mut() {
            if dtype == DeltaType::Resync {
                last.weight += item.weight;
                return Pushed::Dropped;
            }
            match coalesce(last, item) {
                Ok(None) => return Pushed::Coalesced,
                Ok(Some(weight)) => {
                    queue.pop_back();
                    if queue.is_empty() {
                        self.pending.remove(&key);
                        self.ready.retain(|k| *k != key);
                    }
                    return Pushed::Cancelled(weight);
                }
                Err(item) => queue.push_back(*item),
            }
        } else {
            queue.push_back(item);
            if !in_flight {
                self.ready.push_back(key);
            }
        }
        Pushed::Queued
    }

    /// Takes the next ready object's oldest delta; the key stays busy until
    /// [`done`](Self::done) or [`retry_later`](Self::retry_later).
    pub fn pop(&mut self) -> Option<(K, Item)> {
        let key = self.ready.pop_front()?;
        let queue = self.pending.get_mut(&key)?;
        let item = queue.pop_front()?;
        if queue.is_empty() {
            self.pending.remove(&key);
        }
        self.in_flight.insert(key.clone());
        Some((key, item))
    }

    pub fn done(&mut self, key: &K) {
        self.in_flight.remove(key);
        if self.pending.contains_key(key) {
            self.ready.push_back(key.clone());
        }
    }

    /// Puts a failed item back at the front of its object's queue; the key
    /// stays busy (later deltas wait) until [`done`](Self::done).
    pub fn requeue_front(&mut self, key: &K, item: Item) {
        self.pending
            .entry(key.clone())
            .or_default()
            .push_front(item);
    }

    /// Puts `item` before everything pending for `key` (a delta older than
    /// those, handed over from a previous plugin version) and makes the
    /// key ready unless it is busy.
    pub fn push_front(&mut self, key: K, item: Item) {
        let queue = self.pending.entry(key.clone()).or_default();
        let was_empty = queue.is_empty();
        queue.push_front(item);
        if was_empty && !self.in_flight.contains(&key) {
            self.ready.push_back(key);
        }
    }

    /// Takes everything pending, each object's deltas oldest first.
    pub fn take_pending(&mut self) -> Vec<(K, Item)> {
        self.ready.clear();
        self.pending
            .drain()
            .flat_map(|(k, items)| items.into_iter().map(move |i| (k.clone(), i)))
            .collect()
    }

    pub fn in_flight_len(&self) -> usize {
        self.in_flight.len()
    }

    pub fn is_idle(&self) -> bool {
        self.pending.is_empty() && self.in_flight.is_empty()
    }

    pub fn pending_len(&self) -> usize {
        self.pending.values().map(VecDeque::len).sum()
    }

    pub fn ready_len(&self) -> usize {
        self.ready.len()
    }

    pub fn has_ready(&self) -> bool {
        !self.ready.is_empty()
    }

    /// Drops everything pending; returns the settled weight.
    pub fn clear_pending(&mut self) -> u64 {
        let w = self.pending.values().flatten().map(|i| i.weight).sum();
        self.pending.clear();
        self.ready.clear();
        w
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::Gvk;
    use crate::object::{KObject, StripOptions};
    use proptest::prelude::*;
    use std::sync::Arc;

    fn delta(dtype: DeltaType, rv: u32) -> CallDelta {
        let obj = Arc::new(
            KObject::from_value(
                serde_json::json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "p", "namespace": "n", "resourceVersion": rv.to_string()}}),
                StripOptions::default(),
            )
            .unwrap(),
        );
        CallDelta {
            object: Some(obj),
            ..CallDelta::new(dtype, 0, Gvk::new("", "v1", "Pod"))
        }
    }

    fn rv(item: &Item) -> String {
        item.delta
            .object
            .as_ref()
            .unwrap()
            .meta()
            .resource_version
            .to_string()
    }

    #[test]
    fn coalesces_updates_and_keeps_per_key_order() {
        let mut q = KeyedQueue::default();
        assert_eq!(
            q.push("a", Item::new(delta(DeltaType::Added, 1))),
            Pushed::Queued
        );
        assert_eq!(
            q.push("b", Item::new(delta(DeltaType::Added, 1))),
            Pushed::Queued
        );
        let (k, item) = q.pop().unwrap();
        assert_eq!((k, rv(&item)), ("a", "1".into()));
        // While "a" is in flight, its new deltas wait and coalesce.
        assert_eq!(
            q.push("a", Item::new(delta(DeltaType::Updated, 2))),
            Pushed::Queued
        );
        assert_eq!(
            q.push("a", Item::new(delta(DeltaType::Updated, 3))),
            Pushed::Coalesced
        );
        let (k, _) = q.pop().unwrap();
        assert_eq!(k, "b");
        assert!(q.pop().is_none(), "a is busy");
        q.done(&"a");
        let (k, item) = q.pop().unwrap();
        assert_eq!((k, rv(&item), item.weight), ("a", "3".into(), 2));
        assert_eq!(item.delta.dtype, DeltaType::Updated);
        q.done(&"a");
        q.done(&"b");
        assert!(q.is_idle());
    }

    #[test]
    fn add_then_delete_cancels_and_resync_never_overtakes() {
        let mut q = KeyedQueue::default();
        q.push("x", Item::new(delta(DeltaType::Added, 1)));
        assert_eq!(
            q.push("x", Item::new(delta(DeltaType::Deleted, 2))),
            Pushed::Cancelled(2)
        );
        assert!(q.pop().is_none());
        q.push("y", Item::new(delta(DeltaType::Updated, 5)));
        assert_eq!(
            q.push("y", Item::new(delta(DeltaType::Resync, 4))),
            Pushed::Dropped
        );
        let (_, item) = q.pop().unwrap();
        assert_eq!((rv(&item), item.weight), ("5".into(), 2));
    }

    /// A new version's replay (or a start's initial list) stands for objects
    /// a plugin may have acted on before: an initial add followed by the
    /// object's delete, both pending, delivers the delete (a swap during
    /// churn once lost such deletes for good).
    #[test]
    fn initial_add_then_delete_delivers_the_delete() {
        let mut q = KeyedQueue::default();
        let mut initial = delta(DeltaType::Added, 1);
        initial.initial = true;
        q.push("x", Item::new(initial).seq(3));
        assert_eq!(
            q.push("x", Item::new(delta(DeltaType::Deleted, 2)).seq(9)),
            Pushed::Coalesced
        );
        let (_, item) = q.pop().unwrap();
        assert_eq!(item.delta.dtype, DeltaType::Deleted);
        assert!(!item.delta.initial);
        assert_eq!((rv(&item), item.weight, item.seq), ("2".into(), 2, 9));
    }

    #[test]
    fn handed_over_deltas_go_first_and_coalescing_keeps_the_newest_seq() {
        let mut q = KeyedQueue::default();
        q.push("x", Item::new(delta(DeltaType::Updated, 2)).seq(7));
        assert_eq!(
            q.push("x", Item::new(delta(DeltaType::Updated, 3)).seq(9)),
            Pushed::Coalesced
        );
        // An older delete of the object, from a previous version.
        q.push_front("x", Item::new(delta(DeltaType::Deleted, 1)).seq(4));
        q.push_front("y", Item::new(delta(DeltaType::Deleted, 1)).seq(5));
        let (k, item) = q.pop().unwrap();
        assert_eq!(
            (k, item.delta.dtype, item.seq),
            ("x", DeltaType::Deleted, 4)
        );
        q.done(&"x");
        let mut rest: Vec<_> = q
            .take_pending()
            .into_iter()
            .map(|(k, i)| (k, i.delta.dtype, i.seq))
            .collect();
        rest.sort_by_key(|r| r.0);
        assert_eq!(
            rest,
            [("x", DeltaType::Updated, 9), ("y", DeltaType::Deleted, 5)]
        );
        assert!(q.pop().is_none());
        assert!(q.is_idle());
    }

    proptest! {
        /// Whatever the interleaving, the last state a plugin sees for an
        /// object is the last one pushed, and nothing is delivered out of order.
        #[test]
        fn last_state_wins_in_order(ops in proptest::collection::vec((0u8..3, 0u8..4, any::<bool>()), 1..60)) {
            let mut q = KeyedQueue::default();
            let mut rvs = 0u32;
            let mut last_pushed: HashMap<u8, (DeltaType, u32)> = HashMap::new();
            let mut seen: HashMap<u8, u32> = HashMap::new();
            let mut exists: HashMap<u8, bool> = HashMap::new();
            for (key, kind, pop) in ops {
                rvs += 1;
                let alive = exists.get(&key).copied().unwrap_or(false);
                let dtype = match (alive, kind) {
                    (false, _) => DeltaType::Added,
                    (true, 0) => DeltaType::Deleted,
                    (true, _) => DeltaType::Updated,
                };
                exists.insert(key, dtype != DeltaType::Deleted);
                q.push(key, Item::new(delta(dtype, rvs)));
                last_pushed.insert(key, (dtype, rvs));
                if pop
                    && let Some((k, item)) = q.pop() {
                        let r: u32 = rv(&item).parse().unwrap();
                        prop_assert!(seen.get(&k).is_none_or(|prev| *prev < r));
                        seen.insert(k, r);
                        q.done(&k);
                    }
            }
            while let Some((k, item)) = q.pop() {
                let r: u32 = rv(&item).parse().unwrap();
                prop_assert!(seen.get(&k).is_none_or(|prev| *prev < r));
                seen.insert(k, r);
                q.done(&k);
            }
            for (k, (dtype, r)) in last_pushed {
                // Either delivered last, or an add+delete cancelled out unseen.
                prop_assert!(seen.get(&k) == Some(&r) || dtype == DeltaType::Deleted);
            }
        }
    }
}
