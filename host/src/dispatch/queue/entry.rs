//! One key's state in the queue, and how its pending deltas coalesce.

use std::collections::VecDeque;
use std::time::SystemTime;

use tokio::time::Instant;

use crate::informer::DeltaType;
use crate::runtime::LastFailure;

use super::Item;

/// Why a key's timer was set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Timer {
    /// The key's backoff ends: it asks the plugin-wide retry rate for a
    /// slot then, and waits for it as [`Timer::Paced`] if the rate says so.
    Backoff,
    /// The key's backoff ended and its slot of the retry rate comes.
    Paced,
    Requeue,
}

pub(super) type TimerId = (Instant, u64);

#[derive(Debug, Default)]
pub(super) struct Entry {
    pub(super) pending: VecDeque<Item>,
    pub(super) in_flight: bool,
    /// Listed in `ready` (lazily: a listed key may have stopped being ready).
    pub(super) listed: bool,
    /// A live delta arrived while the key was in flight: a failure then
    /// retries at once, with it merged in.
    pub(super) kicked: bool,
    pub(super) backoff: Option<TimerId>,
    pub(super) requeue: Option<TimerId>,
    /// Failed attempts since the key's last success.
    pub(super) failures: u32,
    /// Boxed, as the copy below: most keys never fail, and an entry's
    /// size is paid per key.
    pub(super) last_failure: Option<Box<LastFailure>>,
    pub(super) first_failed: Option<SystemTime>,
    /// Past its attempt budget or its backoff cap: a dead letter, still retried.
    pub(super) parked: bool,
    /// A copy of the delete in flight, handed to the next version if the
    /// call outlives its version's stop grace.
    pub(super) in_flight_delete: Option<Box<Item>>,
    /// Its version stopped while the call was in flight; the call's outcome
    /// is discarded.
    pub(super) abandoned: bool,
}

/// Adds room for one more pending item, exactly: most keys hold one, and
/// a `VecDeque`'s first growth would make room for four.
pub(super) fn room_for_one(pending: &mut std::collections::VecDeque<Item>) {
    if pending.len() == pending.capacity() {
        pending.reserve_exact(1);
    }
}

impl Entry {
    pub(super) fn is_empty(&self) -> bool {
        self.pending.is_empty()
            && !self.in_flight
            && self.backoff.is_none()
            && self.requeue.is_none()
    }

    pub(super) fn ready(&self) -> bool {
        !self.pending.is_empty() && !self.in_flight && self.backoff.is_none()
    }

    pub(super) fn forget(&mut self) {
        self.failures = 0;
        self.last_failure = None;
        self.first_failed = None;
        self.parked = false;
    }
}

/// Merges `next` into `last` when the pair can be expressed as one delta:
/// `Ok(None)` merged, `Ok(Some(w))` both cancelled (weight `w`), `Err` kept
/// apart (a delete followed by a recreation).
pub(super) fn coalesce(last: &mut Item, next: Item) -> Result<Option<u64>, Box<Item>> {
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
