//! [`KeyedQueue`]'s operations: push and pop, an attempt's outcome, the
//! keys' timers, and handing pending work to the next version.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::time::SystemTime;

use tokio::time::Instant;

use crate::informer::DeltaType;
use crate::runtime::LastFailure;

use super::entry::{Entry, Timer, TimerId, coalesce, room_for_one};
use super::{Item, KeyedQueue, Pushed, Retry};

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
            // A burst (a resync of every object) leaves its capacity
            // behind: given back once the map is three quarters empty.
            let (len, cap) = (self.entries.len(), self.entries.capacity());
            if cap > 1024 && len * 4 < cap {
                self.entries.shrink_to(len * 2);
            }
        }
    }

    /// Queues a delta of `key`'s object. A live delta (not a resync or a
    /// requeue) replaces the key's pending requeue and ends its backoff.
    pub fn push(&mut self, key: K, item: Item) -> Pushed {
        if item.term < self.term {
            return Pushed::Stale(item.weight);
        }
        let live = !item.is_look_again();
        self.pending_weight += item.weight;
        let e = self.entries.entry(key.clone()).or_default();
        if live && let Some(id) = e.requeue.take() {
            self.timers.remove(&id);
        }
        let pushed = match e.pending.back_mut() {
            None => {
                room_for_one(&mut e.pending);
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
                    room_for_one(&mut e.pending);
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
        if self.ready.is_empty() && self.ready.capacity() > 1024 {
            self.ready.shrink_to(64);
        }
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
            item.delta.last_failure = e.last_failure.as_deref().cloned();
            e.in_flight_delete =
                (item.delta.dtype == DeltaType::Deleted).then(|| Box::new(item.clone()));
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
        e.last_failure = Some(Box::new(failure));
        e.first_failed.get_or_insert(first_failed);
        // Attempted: an add followed by its delete no longer cancels out.
        item.attempts = e.failures;
        let rest = std::mem::take(&mut e.pending);
        let rest_len = rest.len();
        let mut cancelled = 0;
        room_for_one(&mut e.pending);
        e.pending.push_back(item);
        for next in rest {
            match e.pending.back_mut() {
                Some(last) => match coalesce(last, next) {
                    Ok(None) => {}
                    Ok(Some(w)) => {
                        e.pending.pop_back();
                        cancelled += w;
                    }
                    Err(next) => {
                        room_for_one(&mut e.pending);
                        e.pending.push_back(*next);
                    }
                },
                None => {
                    room_for_one(&mut e.pending);
                    e.pending.push_back(next);
                }
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
            room_for_one(&mut e.pending);
            e.pending.push_back(item);
            self.entries.insert(key.clone(), e);
            if let Some(e) = self.entries.get_mut(key) {
                Self::list_if_ready(&mut self.ready, key, e);
            }
            return;
        };
        room_for_one(&mut e.pending);
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
        room_for_one(&mut e.pending);
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

    /// Drops `key`'s pending requeue (its object is gone).
    pub fn drop_requeue(&mut self, key: &K) {
        if let Some(e) = self.entries.get_mut(key)
            && let Some(id) = e.requeue.take()
        {
            self.timers.remove(&id);
        }
        self.remove_if_empty(key);
    }

    /// The earliest timer (a backoff's end or a requeue).
    pub fn next_deadline(&self) -> Option<Instant> {
        self.timers.first_key_value().map(|((t, _), _)| *t)
    }

    /// Fires the timers due at `now`: a backed-off key asks `pace` (the
    /// plugin-wide retry rate) when it may go, and becomes ready then; the
    /// keys whose requeue is due are returned, for the caller to push their
    /// current state. The rate is asked when a backoff ends, never when a
    /// failure is recorded: one key's long wait books no slot that would
    /// hold back another key's retry.
    pub fn fire(&mut self, now: Instant, mut pace: impl FnMut(Instant) -> Instant) -> Vec<K> {
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
                    let slot = pace(now);
                    if slot > now {
                        let paced = (slot, self.next_timer);
                        self.next_timer += 1;
                        e.backoff = Some(paced);
                        self.timers.insert(paced, (key, Timer::Paced));
                        continue;
                    }
                    e.backoff = None;
                    Self::list_if_ready(&mut self.ready, &key, e);
                }
                Timer::Paced if e.backoff == Some(id) => {
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
                    out.push((k.clone(), *copy));
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

    /// The leadership term the queue serves now: items of earlier terms and
    /// every timer (all set in an earlier term) are dropped (a term's
    /// replay follows), the keys' failures forgotten; items of `term` already queued (a predecessor's
    /// hand-over) stay, and so do older items `carry` accepts (a delete
    /// the replay cannot stand for), moved into `term`. Returns the weight to settle. Called when a term's
    /// intake starts, so a loss and a regain that the leadership watch
    /// folded into one change still drop the old term's work.
    pub fn advance_term(&mut self, term: u64, mut carry: impl FnMut(&K, &Item) -> bool) -> u64 {
        if term <= self.term {
            return 0;
        }
        self.term = term;
        let mut settled = 0;
        let mut dropped_items = 0;
        for (k, e) in &mut self.entries {
            let before = e.pending.len();
            e.pending.retain_mut(|i| {
                if i.term < term && carry(k, i) {
                    i.term = term;
                }
                let keep = i.term >= term;
                if !keep {
                    settled += i.weight;
                }
                keep
            });
            dropped_items += before - e.pending.len();
            e.backoff = None;
            e.requeue = None;
            e.forget();
        }
        // Every timer was set in an earlier term (the queue's term only
        // moves here).
        self.timers.clear();
        self.pending_items -= dropped_items;
        self.pending_weight -= settled;
        self.ready.clear();
        for (k, e) in &mut self.entries {
            e.listed = false;
            if e.ready() {
                e.listed = true;
                self.ready.push_back(k.clone());
            }
        }
        self.entries.retain(|_, e| !e.is_empty());
        settled
    }

    /// The term the queue serves.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// Drops everything pending and every timer (leadership lost: the next
    /// leader replays the cache); returns the weight to settle.
    pub fn clear_pending(&mut self, mut dropped: impl FnMut(&K, &Item)) -> u64 {
        let w = self.pending_weight;
        for (k, e) in &self.entries {
            for i in &e.pending {
                dropped(k, i);
            }
        }
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

    /// The objects of the pending items (a synced marker has none).
    pub fn pending_objects(&self) -> impl Iterator<Item = &crate::object::KObject> {
        self.entries
            .values()
            .flat_map(|e| e.pending.iter())
            .filter_map(|i| i.delta.object.as_deref())
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
