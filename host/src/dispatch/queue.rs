//! A per-plugin work queue keyed and level-triggered as client-go's
//! workqueue and kube-runtime's scheduler are, while still carrying deltas:
//!
//! - per key (subscription pair and object) at most one item pending (a
//!   delete followed by a recreation is the one pair kept apart) and one in
//!   flight; an object's pending deltas coalesce, so memory is bounded by
//!   the number of objects, not of events;
//! - a failed item goes back in front of what arrived meanwhile and is
//!   merged with it; the key backs off (a timer), unless a live delta
//!   arrived for it, which makes it ready at once (the earliest wins);
//! - one pending requeue per key, the earliest wins; a live delta for the
//!   key replaces it;
//! - the failure count lives on the key until its next success (client-go's
//!   `Forget`), so the next attempt says which one it is and why the last
//!   one failed.
//!
//! The queue holds no clock and no lock: the dispatcher passes `now` and
//! owns the timers' task, so every rule here is testable step by step.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hash::Hash;
use std::time::SystemTime;

use tokio::time::Instant;

use crate::informer::DeltaType;
use crate::runtime::{CallDelta, LastFailure};

/// A queued delta with its bookkeeping.
#[derive(Debug, Clone)]
pub struct Item {
    pub delta: CallDelta,
    /// Failed attempts of its key before this one (set when popped).
    pub attempts: u32,
    /// How many raw deltas this item stands for (after coalescing), still
    /// to be settled in the host's activity count (0 once parked).
    pub weight: u64,
    /// When the oldest delta it stands for reached the informer.
    pub received: std::time::Instant,
    /// The informer's sequence number of the newest delta it stands for
    /// (see [`Delta::seq`](crate::informer::Delta::seq)).
    pub seq: u64,
    /// When its key's first failed attempt (since the last success) failed.
    pub first_failed: Option<SystemTime>,
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

    /// Resyncs and requeues: they only ask to look at the object again.
    fn is_look_again(&self) -> bool {
        self.delta.dtype == DeltaType::Resync
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
    /// A resync or requeue folded into a pending delta (which delivers the
    /// object anyway).
    Dropped,
}

/// Why a key's timer was set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Timer {
    Backoff,
    Requeue,
}

type TimerId = (Instant, u64);

#[derive(Debug, Default)]
struct Entry {
    pending: VecDeque<Item>,
    in_flight: bool,
    /// Listed in `ready` (lazily: a listed key may have stopped being ready).
    listed: bool,
    /// A live delta arrived while the key was in flight: a failure then
    /// retries at once, with it merged in.
    kicked: bool,
    backoff: Option<TimerId>,
    requeue: Option<TimerId>,
    /// Failed attempts since the key's last success.
    failures: u32,
    last_failure: Option<LastFailure>,
    first_failed: Option<SystemTime>,
    /// Past its attempt budget or its backoff cap: a dead letter, still retried.
    parked: bool,
    /// A copy of the delete in flight, handed to the next version if the
    /// call outlives its version's stop grace.
    in_flight_delete: Option<Item>,
    /// Its version stopped while the call was in flight; the call's outcome
    /// is discarded.
    abandoned: bool,
}

impl Entry {
    fn is_empty(&self) -> bool {
        self.pending.is_empty()
            && !self.in_flight
            && self.backoff.is_none()
            && self.requeue.is_none()
    }

    fn ready(&self) -> bool {
        !self.pending.is_empty() && !self.in_flight && self.backoff.is_none()
    }

    fn forget(&mut self) {
        self.failures = 0;
        self.last_failure = None;
        self.first_failed = None;
        self.parked = false;
    }
}

/// Merges `next` into `last` when the pair can be expressed as one delta:
/// `Ok(None)` merged, `Ok(Some(w))` both cancelled (weight `w`), `Err` kept
/// apart (a delete followed by a recreation).
fn coalesce(last: &mut Item, next: Item) -> Result<Option<u64>, Box<Item>> {
    use DeltaType::*;
    let w = last.weight + next.weight;
    let seq = last.seq.max(next.seq);
    let merged = match (last.delta.dtype, next.delta.dtype) {
        (_, Resync) if last.delta.dtype != Deleted => {
            last.delta.object = next.delta.object.or(last.delta.object.take());
            last.weight = w;
            Ok(None)
        }
        (Deleted, Resync) => {
            last.weight = w;
            Ok(None)
        }
        (Updated, Updated) | (Added, Updated) => {
            last.delta.object = next.delta.object;
            last.weight = w;
            Ok(None)
        }
        (Resync, Updated) => {
            last.delta.dtype = Updated;
            last.delta.requeued = false;
            last.delta.object = next.delta.object;
            last.delta.old = next.delta.old;
            last.weight = w;
            Ok(None)
        }
        (Updated, Deleted) | (Resync, Deleted) => {
            last.delta = next.delta;
            last.weight = w;
            Ok(None)
        }
        // A live add and its delete, the add never attempted: the plugin
        // never saw the object.
        (Added, Deleted) if last.attempts == 0 && !last.delta.initial => Ok(Some(w)),
        // An initial add (a start's list, a new version's replay) stands for
        // an object the plugin may have acted on before, and an attempted
        // add may have acted in part: the delete must arrive.
        (Added, Deleted) => {
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

/// What a failed attempt leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// The key waits for its backoff.
    After,
    /// A live delta arrived meanwhile: ready at once, merged with it.
    Now,
}

#[derive(Debug)]
pub struct KeyedQueue<K> {
    entries: HashMap<K, Entry>,
    ready: VecDeque<K>,
    timers: BTreeMap<TimerId, (K, Timer)>,
    next_timer: u64,
    in_flight: usize,
    pending_items: usize,
    pending_weight: u64,
}

impl<K> Default for KeyedQueue<K> {
    fn default() -> Self {
        Self {
            entries: HashMap::new(),
            ready: VecDeque::new(),
            timers: BTreeMap::new(),
            next_timer: 0,
            in_flight: 0,
            pending_items: 0,
            pending_weight: 0,
        }
    }
}

impl<K: Clone + Eq + Hash> KeyedQueue<K> {
    fn list_if_ready(ready: &mut VecDeque<K>, key: &K, e: &mut Entry) {
        if e.ready() && !e.listed {
            e.listed = true;
            ready.push_back(key.clone());
        }
    }

    fn set_timer(&mut self, key: &K, at: Instant, timer: Timer) -> TimerId {
        let id = (at, self.next_timer);
        self.next_timer += 1;
        self.timers.insert(id, (key.clone(), timer));
        id
    }

    fn remove_if_empty(&mut self, key: &K) {
        if self.entries.get(key).is_some_and(Entry::is_empty) {
            self.entries.remove(key);
        }
    }

    /// Queues a delta of `key`'s object. A live delta (not a resync or a
    /// requeue) replaces the key's pending requeue and ends its backoff.
    pub fn push(&mut self, key: K, item: Item) -> Pushed {
        let live = !item.is_look_again();
        self.pending_weight += item.weight;
        let e = self.entries.entry(key.clone()).or_default();
        if live && let Some(id) = e.requeue.take() {
            self.timers.remove(&id);
        }
        let pushed = match e.pending.back_mut() {
            None => {
                e.pending.push_back(item);
                self.pending_items += 1;
                Pushed::Queued
            }
            Some(last) => match coalesce(last, item) {
                Ok(None) if live => Pushed::Coalesced,
                Ok(None) => Pushed::Dropped,
                Ok(Some(w)) => {
                    e.pending.pop_back();
                    self.pending_items -= 1;
                    self.pending_weight -= w;
                    Pushed::Cancelled(w)
                }
                Err(item) => {
                    e.pending.push_back(*item);
                    self.pending_items += 1;
                    Pushed::Queued
                }
            },
        };
        if live {
            if e.in_flight {
                e.kicked = true;
            } else if let Some(id) = e.backoff.take() {
                self.timers.remove(&id);
            }
        }
        Self::list_if_ready(&mut self.ready, &key, e);
        if matches!(pushed, Pushed::Cancelled(_)) {
            self.remove_if_empty(&key);
        }
        pushed
    }

    /// Takes the next ready key's oldest delta, told which attempt it is;
    /// the key stays busy until [`ok`](Self::ok), [`failed`](Self::failed)
    /// or [`put_back`](Self::put_back).
    pub fn pop(&mut self) -> Option<(K, Item)> {
        while let Some(key) = self.ready.pop_front() {
            let Some(e) = self.entries.get_mut(&key) else {
                continue;
            };
            e.listed = false;
            if !e.ready() {
                continue;
            }
            let Some(mut item) = e.pending.pop_front() else {
                continue;
            };
            self.pending_items -= 1;
            self.pending_weight -= item.weight;
            e.in_flight = true;
            e.kicked = false;
            self.in_flight += 1;
            item.attempts = e.failures;
            item.first_failed = e.first_failed;
            item.delta.attempt = e.failures + 1;
            item.delta.last_failure.clone_from(&e.last_failure);
            e.in_flight_delete = (item.delta.dtype == DeltaType::Deleted).then(|| item.clone());
            return Some((key, item));
        }
        None
    }

    /// Ends `key`'s flight (fields apart, so the caller may go on using
    /// `ready` and `timers`).
    fn end_flight<'e>(
        entries: &'e mut HashMap<K, Entry>,
        in_flight: &mut usize,
        key: &K,
    ) -> Option<&'e mut Entry> {
        let e = entries.get_mut(key)?;
        if e.in_flight {
            e.in_flight = false;
            e.in_flight_delete = None;
            *in_flight -= 1;
        }
        Some(e)
    }

    /// The key's call succeeded (or its delta needs no call): its failures
    /// are forgotten; what arrived meanwhile is ready.
    pub fn ok(&mut self, key: &K) {
        if let Some(e) = Self::end_flight(&mut self.entries, &mut self.in_flight, key) {
            e.forget();
            e.abandoned = false;
            Self::list_if_ready(&mut self.ready, key, e);
        }
        self.remove_if_empty(key);
    }

    /// The key's attempt failed with `failure`: `item` goes back in front
    /// of what arrived meanwhile, merged with it, and the key backs off
    /// until `retry_at` unless a live delta arrived meanwhile.
    pub fn failed(
        &mut self,
        key: &K,
        mut item: Item,
        failure: LastFailure,
        retry_at: Instant,
    ) -> Retry {
        let first_failed = item.first_failed.unwrap_or_else(SystemTime::now);
        let item_weight = item.weight;
        let timer = (retry_at, self.next_timer);
        let Some(e) = Self::end_flight(&mut self.entries, &mut self.in_flight, key) else {
            return Retry::After;
        };
        e.failures = e.failures.saturating_add(1);
        e.last_failure = Some(failure);
        e.first_failed.get_or_insert(first_failed);
        // Attempted: an add followed by its delete no longer cancels out.
        item.attempts = e.failures;
        let rest = std::mem::take(&mut e.pending);
        let rest_len = rest.len();
        let mut cancelled = 0;
        e.pending.push_back(item);
        for next in rest {
            match e.pending.back_mut() {
                Some(last) => match coalesce(last, next) {
                    Ok(None) => {}
                    Ok(Some(w)) => {
                        e.pending.pop_back();
                        cancelled += w;
                    }
                    Err(next) => e.pending.push_back(*next),
                },
                None => e.pending.push_back(next),
            }
        }
        let merged_len = e.pending.len();
        let retry = if std::mem::take(&mut e.kicked) {
            Retry::Now
        } else {
            Retry::After
        };
        let backoff = retry == Retry::After && !e.pending.is_empty();
        if backoff {
            e.backoff = Some(timer);
        }
        Self::list_if_ready(&mut self.ready, key, e);
        if backoff {
            self.next_timer += 1;
            self.timers.insert(timer, (key.clone(), Timer::Backoff));
        }
        self.pending_items = self.pending_items - rest_len + merged_len;
        self.pending_weight = self.pending_weight + item_weight - cancelled;
        self.remove_if_empty(key);
        retry
    }

    /// The key's attempt failed for good (a permanent failure, recorded as
    /// a dead letter by the caller): its failures are forgotten; what
    /// arrived meanwhile is ready, as a new chance.
    pub fn permanent(&mut self, key: &K) {
        self.ok(key);
    }

    /// Parks the key: its pending items stop counting as activity (the
    /// host may be idle while it is retried at its cap interval). Returns
    /// the weight to settle.
    pub fn park(&mut self, key: &K) -> u64 {
        let Some(e) = self.entries.get_mut(key) else {
            return 0;
        };
        e.parked = true;
        let w: u64 = e
            .pending
            .iter_mut()
            .map(|i| std::mem::take(&mut i.weight))
            .sum();
        self.pending_weight -= w;
        w
    }

    pub fn is_parked(&self, key: &K) -> bool {
        self.entries.get(key).is_some_and(|e| e.parked)
    }

    /// Puts a popped item back in front without counting an attempt (its
    /// version stops between deltas, a sibling's batch after a trap, a
    /// delta held for a successor); the key is free again.
    pub fn put_back(&mut self, key: &K, item: Item) {
        self.pending_weight += item.weight;
        self.pending_items += 1;
        let Some(e) = Self::end_flight(&mut self.entries, &mut self.in_flight, key) else {
            let mut e = Entry::default();
            e.pending.push_back(item);
            self.entries.insert(key.clone(), e);
            if let Some(e) = self.entries.get_mut(key) {
                Self::list_if_ready(&mut self.ready, key, e);
            }
            return;
        };
        e.pending.push_front(item);
        Self::list_if_ready(&mut self.ready, key, e);
    }

    /// Frees a popped key whose item the caller keeps (held back for a
    /// successor).
    pub fn release(&mut self, key: &K) {
        if let Some(e) = Self::end_flight(&mut self.entries, &mut self.in_flight, key) {
            Self::list_if_ready(&mut self.ready, key, e);
        }
        self.remove_if_empty(key);
    }

    /// Puts `item` before everything pending for `key` (a delta older than
    /// those, handed over from a previous plugin version), and the key
    /// ahead of the keys ready now (the new version's replay).
    pub fn push_front(&mut self, key: K, item: Item) {
        self.pending_weight += item.weight;
        self.pending_items += 1;
        let e = self.entries.entry(key.clone()).or_default();
        e.pending.push_front(item);
        if e.ready() && !e.listed {
            e.listed = true;
            self.ready.push_front(key);
        }
    }

    /// Asks to deliver `key` again at `at`: one pending requeue per key,
    /// the earliest wins. False when an earlier one was already pending.
    pub fn schedule_requeue(&mut self, key: K, at: Instant) -> bool {
        if let Some(e) = self.entries.get(&key)
            && let Some((t, _)) = e.requeue
            && t <= at
        {
            return false;
        }
        let id = self.set_timer(&key, at, Timer::Requeue);
        let e = self.entries.entry(key).or_default();
        if let Some(old) = e.requeue.replace(id) {
            self.timers.remove(&old);
        }
        true
    }

    /// The earliest timer (a backoff's end or a requeue).
    pub fn next_deadline(&self) -> Option<Instant> {
        self.timers.first_key_value().map(|((t, _), _)| *t)
    }

    /// Fires the timers due at `now`: backed-off keys become ready; the
    /// keys whose requeue is due are returned, for the caller to push their
    /// current state.
    pub fn fire(&mut self, now: Instant) -> Vec<K> {
        let mut requeues = Vec::new();
        while let Some(entry) = self.timers.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let (id, (key, timer)) = entry.remove_entry();
            let Some(e) = self.entries.get_mut(&key) else {
                continue;
            };
            match timer {
                Timer::Backoff if e.backoff == Some(id) => {
                    e.backoff = None;
                    Self::list_if_ready(&mut self.ready, &key, e);
                }
                Timer::Requeue if e.requeue == Some(id) => {
                    e.requeue = None;
                    requeues.push(key.clone());
                }
                _ => {}
            }
            self.remove_if_empty(&key);
        }
        requeues
    }

    /// Takes everything pending (backing off or not), each object's
    /// deltas oldest first, with the attempts their keys had.
    pub fn take_pending(&mut self) -> Vec<(K, Item)> {
        self.ready.clear();
        self.timers.clear();
        self.pending_items = 0;
        self.pending_weight = 0;
        let mut out = Vec::new();
        for (k, e) in &mut self.entries {
            e.listed = false;
            e.backoff = None;
            e.requeue = None;
            for mut item in e.pending.drain(..) {
                item.attempts = e.failures;
                out.push((k.clone(), item));
            }
        }
        self.entries.retain(|_, e| e.in_flight);
        out
    }

    /// Marks every call in flight as abandoned (its version's stop grace
    /// ran out) and returns copies of the deletes among them, for the next
    /// version; their originals settle nothing when they come back.
    pub fn abandon_in_flight(&mut self) -> Vec<(K, Item)> {
        let mut out = Vec::new();
        for (k, e) in &mut self.entries {
            if e.in_flight && !e.abandoned {
                e.abandoned = true;
                if let Some(copy) = e.in_flight_delete.take() {
                    out.push((k.clone(), copy));
                }
            }
        }
        out
    }

    /// Whether the key's call in flight was abandoned; if so the key is
    /// freed, and the weight its caller still has to settle is returned
    /// (none for a delete whose copy was handed over).
    pub fn take_abandoned(&mut self, key: &K, item: &Item) -> Option<u64> {
        let e = self.entries.get_mut(key)?;
        if !e.abandoned {
            return None;
        }
        e.abandoned = false;
        let handed = item.delta.dtype == DeltaType::Deleted;
        Self::end_flight(&mut self.entries, &mut self.in_flight, key);
        self.remove_if_empty(key);
        Some(if handed { 0 } else { item.weight })
    }

    /// Drops everything pending and every timer (leadership lost: the next
    /// leader replays the cache); returns the weight to settle.
    pub fn clear_pending(&mut self) -> u64 {
        let w = self.pending_weight;
        self.ready.clear();
        self.timers.clear();
        self.pending_items = 0;
        self.pending_weight = 0;
        for e in self.entries.values_mut() {
            e.pending.clear();
            e.listed = false;
            e.backoff = None;
            e.requeue = None;
            e.forget();
        }
        self.entries.retain(|_, e| e.in_flight);
        w
    }

    pub fn in_flight_len(&self) -> usize {
        self.in_flight
    }

    /// Whether `key` has a delete waiting behind its current flight: the
    /// object it names is gone, whatever the cache holds under its name
    /// now (a recreation that kept the uid, as a manifest's `uid:` does).
    pub fn delete_pending(&self, key: &K) -> bool {
        self.entries.get(key).is_some_and(|e| {
            e.pending
                .iter()
                .any(|i| i.delta.dtype == DeltaType::Deleted)
        })
    }

    /// Nothing to settle: no pending item that counts as activity (a
    /// parked key's does not) and no call in flight.
    pub fn is_idle(&self) -> bool {
        self.pending_weight == 0 && self.in_flight == 0
    }

    /// Items waiting, ready or backing off.
    pub fn pending_len(&self) -> usize {
        self.pending_items
    }

    /// Keys waiting on a timer: backing off, or with a requeue pending.
    pub fn delayed_len(&self) -> usize {
        self.timers.len()
    }

    /// Keys whose requeue is pending.
    pub fn requeues_len(&self) -> usize {
        self.timers
            .values()
            .filter(|(_, t)| *t == Timer::Requeue)
            .count()
    }

    pub fn ready_len(&self) -> usize {
        self.ready.len()
    }

    pub fn has_ready(&self) -> bool {
        !self.ready.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::Gvk;
    use crate::object::{KObject, StripOptions};
    use proptest::prelude::*;
    use std::sync::Arc;
    use std::time::Duration;

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

    fn rv(item: &Item) -> u32 {
        item.delta
            .object
            .as_ref()
            .unwrap()
            .meta()
            .resource_version
            .parse()
            .unwrap()
    }

    fn conflict() -> LastFailure {
        LastFailure::Conflict("409".into())
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
        assert_eq!((k, rv(&item)), ("a", 1));
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
        q.ok(&"a");
        let (k, item) = q.pop().unwrap();
        assert_eq!((k, rv(&item), item.weight), ("a", 3, 2));
        assert_eq!(item.delta.dtype, DeltaType::Updated);
        q.ok(&"a");
        q.ok(&"b");
        assert!(q.is_idle());
    }

    #[test]
    fn add_then_delete_cancels_unless_attempted_and_resync_never_overtakes() {
        let mut q = KeyedQueue::default();
        q.push("x", Item::new(delta(DeltaType::Added, 1)));
        assert_eq!(
            q.push("x", Item::new(delta(DeltaType::Deleted, 2))),
            Pushed::Cancelled(2)
        );
        assert!(q.pop().is_none());
        assert!(q.is_idle());
        q.push("y", Item::new(delta(DeltaType::Updated, 5)));
        assert_eq!(
            q.push("y", Item::new(delta(DeltaType::Resync, 4))),
            Pushed::Dropped
        );
        let (_, item) = q.pop().unwrap();
        assert_eq!(item.weight, 2);
        q.ok(&"y");
        // An add whose attempt failed, then its delete: the delete arrives.
        let t = Instant::now();
        q.push("z", Item::new(delta(DeltaType::Added, 1)));
        let (k, item) = q.pop().unwrap();
        q.push("z", Item::new(delta(DeltaType::Deleted, 2)));
        assert_eq!(
            q.failed(&k, item, conflict(), t + Duration::from_secs(1)),
            Retry::Now
        );
        let (_, item) = q.pop().unwrap();
        assert_eq!(
            (item.delta.dtype, item.delta.attempt),
            (DeltaType::Deleted, 2)
        );
    }

    #[test]
    fn a_failed_key_backs_off_then_retries_with_what_arrived_meanwhile() {
        let t = Instant::now();
        let mut q = KeyedQueue::default();
        q.push("a", Item::new(delta(DeltaType::Updated, 2)));
        let (k, item) = q.pop().unwrap();
        assert_eq!(
            q.failed(&k, item, conflict(), t + Duration::from_secs(1)),
            Retry::After
        );
        assert!(q.pop().is_none(), "backing off");
        assert_eq!(q.delayed_len(), 1);
        assert!(!q.is_idle());
        assert!(q.fire(t + Duration::from_millis(999)).is_empty());
        assert!(q.pop().is_none());
        q.fire(t + Duration::from_secs(1));
        let (k, item) = q.pop().unwrap();
        assert_eq!(
            (item.delta.attempt, item.delta.last_failure.clone()),
            (2, Some(conflict()))
        );
        // A live delta while backing off ends the backoff at once (the
        // earliest wins), merged into the failed item.
        assert_eq!(
            q.failed(&k, item, conflict(), t + Duration::from_secs(60)),
            Retry::After
        );
        q.push("a", Item::new(delta(DeltaType::Updated, 3)));
        let (k, item) = q.pop().unwrap();
        assert_eq!((rv(&item), item.delta.attempt, item.weight), (3, 3, 2));
        q.ok(&k);
        assert!(q.is_idle());
        assert_eq!(q.delayed_len(), 0);
        q.push("a", Item::new(delta(DeltaType::Updated, 4)));
        let (_, item) = q.pop().unwrap();
        assert_eq!(item.delta.attempt, 1, "a success forgets the failures");
    }

    #[test]
    fn one_requeue_per_key_the_earliest_wins_and_a_live_delta_replaces_it() {
        let t = Instant::now();
        let mut q: KeyedQueue<&str> = KeyedQueue::default();
        for i in 0..10 {
            q.schedule_requeue("a", t + Duration::from_secs(100 - i));
        }
        assert!(!q.schedule_requeue("a", t + Duration::from_secs(500)));
        assert_eq!(q.requeues_len(), 1);
        assert_eq!(q.next_deadline(), Some(t + Duration::from_secs(91)));
        assert!(q.is_idle(), "a pending requeue is not work");
        // A resync does not replace it; a live delta does.
        q.push("a", Item::new(delta(DeltaType::Resync, 1)));
        assert_eq!(q.requeues_len(), 1);
        let (k, _) = q.pop().unwrap();
        q.ok(&k);
        q.push("a", Item::new(delta(DeltaType::Updated, 2)));
        assert_eq!(q.requeues_len(), 0);
        let (k, _) = q.pop().unwrap();
        q.ok(&k);
        q.schedule_requeue("b", t + Duration::from_secs(5));
        assert_eq!(q.fire(t + Duration::from_secs(5)), vec!["b"]);
        assert_eq!(q.requeues_len(), 0);
        q.schedule_requeue("c", t + Duration::from_secs(5));
        q.clear_pending();
        assert_eq!(q.delayed_len(), 0, "a leadership loss drops requeues");
    }

    #[test]
    fn handed_over_deltas_go_ahead_of_the_replay() {
        let mut q = KeyedQueue::default();
        // The new version's replay, then the old version's unhandled delete
        // of another object, handed over.
        q.push("a", Item::new(delta(DeltaType::Added, 1)));
        q.push("b", Item::new(delta(DeltaType::Added, 1)));
        q.push_front("gone", Item::new(delta(DeltaType::Deleted, 1)));
        let order: Vec<_> = std::iter::from_fn(|| q.pop().map(|(k, _)| k)).collect();
        assert_eq!(order, ["gone", "a", "b"]);
    }

    #[test]
    fn handed_over_deltas_go_first_and_a_fenced_delete_is_copied() {
        let mut q = KeyedQueue::default();
        q.push("x", Item::new(delta(DeltaType::Updated, 2)).seq(7));
        q.push_front("x", Item::new(delta(DeltaType::Deleted, 1)).seq(4));
        let (k, item) = q.pop().unwrap();
        assert_eq!(
            (k, item.delta.dtype, item.seq),
            ("x", DeltaType::Deleted, 4)
        );
        let copies = q.abandon_in_flight();
        assert_eq!(copies.len(), 1);
        assert_eq!(
            q.take_abandoned(&"x", &item),
            Some(0),
            "its copy carries the weight"
        );
        assert_eq!(q.in_flight_len(), 0);
        let rest = q.take_pending();
        assert_eq!(rest.len(), 1);
        assert!(q.pop().is_none());
    }

    #[derive(Debug, Clone)]
    enum Op {
        Change(u8),
        Resync(u8),
        Pop,
        Ok,
        Fail,
        Tick(u8),
        Requeue(u8, u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u8..3).prop_map(Op::Change),
            (0u8..3).prop_map(Op::Resync),
            Just(Op::Pop),
            Just(Op::Pop),
            Just(Op::Ok),
            Just(Op::Fail),
            (1u8..5).prop_map(Op::Tick),
            ((0u8..3), (1u8..5)).prop_map(|(k, d)| Op::Requeue(k, d)),
        ]
    }

    proptest! {
        /// Whatever the interleaving of changes, failures, requeues and
        /// timers: one call in flight per key, a key's deliveries never go
        /// back in time, a retry carries the newest state pushed, every
        /// key ends on its last state (or an add and delete never seen),
        /// at most one requeue per key, and the counts add up.
        #[test]
        fn keyed_level_triggered(ops in proptest::collection::vec(op(), 1..120)) {
            let t0 = Instant::now();
            let mut now = t0;
            let mut q: KeyedQueue<u8> = KeyedQueue::default();
            let mut next_rv = 0u32;
            let mut exists = [false; 3];
            let mut last_pushed: [Option<(DeltaType, u32)>; 3] = [None; 3];
            let mut delivered: [u32; 3] = [0; 3];
            let mut flying: Vec<(u8, Item)> = Vec::new();
            let mut pushed_weight = 0u64;
            let mut settled = 0u64;
            let mut step = |q: &mut KeyedQueue<u8>, op: Op, now: &mut Instant, flying: &mut Vec<(u8, Item)>| -> Result<(), TestCaseError> {
                match op {
                    Op::Change(k) => {
                        next_rv += 1;
                        let dtype = match (exists[k as usize], next_rv % 3) {
                            (false, _) => DeltaType::Added,
                            (true, 0) => DeltaType::Deleted,
                            (true, _) => DeltaType::Updated,
                        };
                        exists[k as usize] = dtype != DeltaType::Deleted;
                        last_pushed[k as usize] = Some((dtype, next_rv));
                        pushed_weight += 1;
                        if let Pushed::Cancelled(w) = q.push(k, Item::new(delta(dtype, next_rv))) {
                            settled += w;
                        }
                    }
                    Op::Resync(k) => {
                        if let Some((dtype, rv)) = last_pushed[k as usize] && dtype != DeltaType::Deleted {
                            pushed_weight += 1;
                            q.push(k, Item::new(delta(DeltaType::Resync, rv)));
                        }
                    }
                    Op::Pop => {
                        if let Some((k, item)) = q.pop() {
                            prop_assert!(flying.iter().all(|(f, _)| *f != k), "two calls in flight for {}", k);
                            let r = rv(&item);
                            prop_assert!(r >= delivered[k as usize] || item.delta.dtype == DeltaType::Added, "key {} went back from {} to {}", k, delivered[k as usize], r);
                            delivered[k as usize] = r;
                            flying.push((k, item));
                        }
                    }
                    Op::Ok => {
                        if let Some((k, item)) = flying.pop() {
                            settled += item.weight;
                            q.ok(&k);
                        }
                    }
                    Op::Fail => {
                        if let Some((k, item)) = flying.pop() {
                            q.failed(&k, item, conflict(), *now + Duration::from_secs(2));
                        }
                    }
                    Op::Tick(s) => {
                        *now += Duration::from_secs(u64::from(s));
                        for k in q.fire(*now) {
                            if let Some((dtype, rv)) = last_pushed[k as usize] && dtype != DeltaType::Deleted {
                                pushed_weight += 1;
                                let mut d = delta(DeltaType::Resync, rv);
                                d.requeued = true;
                                q.push(k, Item::new(d));
                            }
                        }
                    }
                    Op::Requeue(k, d) => {
                        q.schedule_requeue(k, *now + Duration::from_secs(u64::from(d)));
                    }
                }
                prop_assert!(q.requeues_len() <= 3);
                prop_assert_eq!(q.in_flight_len(), flying.len());
                Ok(())
            };
            for o in ops {
                step(&mut q, o, &mut now, &mut flying)?;
            }
            // Drain: everything in flight succeeds, every timer fires.
            while let Some((k, item)) = flying.pop() {
                settled += item.weight;
                q.ok(&k);
            }
            let mut last_seen: [Option<(DeltaType, u32)>; 3] = [None; 3];
            for _ in 0..1000 {
                now += Duration::from_secs(10);
                q.fire(now);
                while let Some((k, item)) = q.pop() {
                    let r = rv(&item);
                    prop_assert!(r >= delivered[k as usize] || item.delta.dtype == DeltaType::Added);
                    delivered[k as usize] = r;
                    last_seen[k as usize] = Some((item.delta.dtype, r));
                    settled += item.weight;
                    q.ok(&k);
                }
                if q.next_deadline().is_none() {
                    break;
                }
            }
            prop_assert!(q.is_idle());
            prop_assert_eq!(q.pending_len(), 0);
            prop_assert_eq!(settled, pushed_weight, "every pushed delta is settled once");
            for k in 0..3 {
                if let Some((dtype, r)) = last_pushed[k] {
                    prop_assert!(
                        delivered[k] == r || dtype == DeltaType::Deleted,
                        "key {} ended on {} but {} was pushed last ({:?})", k, delivered[k], r, dtype
                    );
                    if let Some((seen, _)) = last_seen[k] && dtype == DeltaType::Deleted && delivered[k] == r {
                        prop_assert_eq!(seen, DeltaType::Deleted);
                    }
                }
            }
        }
    }
}
