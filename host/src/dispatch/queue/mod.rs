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
//!
//! A key's state and how its deltas coalesce are `entry.rs`'s; the
//! queue's operations (push, pop, outcomes, timers, hand-over) `keyed.rs`'s.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::SystemTime;

use crate::informer::DeltaType;
use crate::runtime::CallDelta;

mod entry;
mod keyed;
#[cfg(test)]
mod tests;

use entry::{Entry, Timer, TimerId};

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
    /// The leadership term it was queued in: an item of an older term than
    /// the queue's is dropped (the new term replays the cache).
    pub term: u64,
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
            term: 0,
        }
    }

    #[must_use]
    pub fn term(mut self, term: u64) -> Self {
        self.term = term;
        self
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
    /// Queued in a leadership term older than the queue's: dropped. Carries
    /// the weight to settle.
    Stale(u64),
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
    /// The newest leadership term queued for; older items and timers are
    /// dropped.
    term: u64,
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
            term: 0,
            in_flight: 0,
            pending_items: 0,
            pending_weight: 0,
        }
    }
}
