//! What one subscription pair's informer deltas become: filtered (delta
//! types, fields that matter, the leadership term) and queued per key;
//! periodic resyncs of the pair's cache.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::carry;
use super::queue::{Item, Pushed};
use super::{Key, Shared, SubId, SubscriptionFilter};
use crate::informer::{Delta, DeltaType, Informer};
use crate::object::ObjectKey;
use crate::runtime::CallDelta;

/// Whether deltas of intake term `term` may be queued now.
pub(super) fn in_term(shared: &Shared, term: u64) -> bool {
    let s = shared.leadership.state();
    s.leading && s.term == term
}

pub(super) fn push(shared: &Shared, key: Key, item: Item) {
    push_all(shared, &mut vec![(key, item)]);
}

/// Queues `items` (emptied) under one lock of the queue, then wakes the
/// workers once.
pub(super) fn push_all(shared: &Shared, items: &mut Vec<(Key, Item)>) {
    if items.is_empty() {
        return;
    }
    let (mut wake, mut coalesced, mut settled) = (false, 0u64, 0u64);
    {
        let mut queue = shared.queue.lock();
        for (key, item) in items.drain(..) {
            match queue.push(key, item) {
                Pushed::Queued => wake = true,
                // A coalesced live delta may have ended a backoff.
                Pushed::Coalesced | Pushed::Dropped => {
                    coalesced += 1;
                    wake = true;
                }
                Pushed::Cancelled(w) | Pushed::Stale(w) => {
                    coalesced += 1;
                    settled += w;
                }
            }
        }
    }
    if coalesced > 0 {
        shared
            .stats
            .coalesced
            .fetch_add(coalesced, Ordering::Relaxed);
    }
    if wake {
        shared.wake.notify_one();
    }
    if settled > 0 {
        shared.activity.settle(settled);
        if shared.queue.lock().is_idle() {
            shared.idle.notify_waiters();
        }
    }
}

pub(super) async fn run(
    shared: Arc<Shared>,
    id: SubId,
    filter: SubscriptionFilter,
    informer: Arc<Informer>,
    mut rx: mpsc::UnboundedReceiver<Delta>,
    term: u64,
    cancel: CancellationToken,
) {
    // A new term's intake: what older terms queued (and their timers) goes.
    let stale = {
        let mut q = shared.queue.lock();
        if term > q.term() {
            // What an older term delivered: the replay delivers it anew.
            shared.delivered.lock().clear();
        }
        // Deletes of shards held throughout go on, those of a suspended
        // shard are set aside (see `carry`).
        let mut aside = Vec::new();
        let stale = q.advance_term(term, |key, i| {
            match carry::goes(&shared, i.term, &i.delta) {
                carry::Goes::Now(_) => true,
                carry::Goes::Aside => {
                    aside.push((key.clone(), i.clone()));
                    false
                }
                carry::Goes::Nowhere => false,
            }
        });
        (stale, aside)
    };
    let (stale, aside) = stale;
    carry::set_aside(&shared, aside);
    if stale > 0 {
        shared.activity.settle(stale);
    }
    // What went on into this term (a delete waiting for its retry) is ready
    // now, its backoff gone with the old term: a worker takes it without
    // waiting for the next delta to wake one.
    shared.wake.notify_one();
    let mut resync = filter.resync.map(|period| {
        let mut t = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        t
    });
    // One queue lock and one wake-up of the workers per batch taken from
    // the channel (DispatchOptions::intake_batch).
    let batch = shared.options.intake_batch.max(1);
    let mut deltas = Vec::with_capacity(batch);
    let mut queued = Vec::with_capacity(batch);
    loop {
        tokio::select! {
            () = cancel.cancelled() => break,
            n = rx.recv_many(&mut deltas, batch) => if n == 0 { break },
            _ = async { match resync.as_mut() { Some(t) => t.tick().await, None => std::future::pending().await } } => {
                if filter.deltas.contains(&DeltaType::Resync) && in_term(&shared, term) {
                    resync_all(&shared, id, &filter, &informer, term);
                }
                continue;
            }
        }
        for delta in deltas.drain(..) {
            accept(&shared, id, &filter, term, delta, &mut queued);
        }
        push_all(&shared, &mut queued);
    }
    // What is still in the channel is queued too: a stopping version hands
    // what it did not handle to its successor.
    rx.close();
    while let Ok(delta) = rx.try_recv() {
        accept(&shared, id, &filter, term, delta, &mut queued);
    }
    push_all(&shared, &mut queued);
}

/// Queues every cached object as a resync delta (folded into any delta
/// already pending for it).
fn resync_all(
    shared: &Shared,
    id: SubId,
    filter: &SubscriptionFilter,
    informer: &Informer,
    term: u64,
) {
    let seq = informer.seq();
    let snap = informer.store().snapshot();
    shared.activity.emit(snap.len() as u64);
    let batch = shared.options.intake_batch.max(1);
    let mut queued = Vec::with_capacity(batch);
    let shards = shared.leadership.state().shards;
    for obj in snap.iter() {
        if !shards.owns_object(obj) {
            shared.activity.settle(1);
            continue;
        }
        let d = CallDelta {
            object: Some(obj.clone()),
            ..CallDelta::new(DeltaType::Resync, filter.index, filter.kind.clone())
        };
        queued.push(((id, obj.key()), Item::new(d).seq(seq).term(term)));
        if queued.len() >= batch {
            push_all(shared, &mut queued);
        }
    }
    push_all(shared, &mut queued);
}

/// A delete of an earlier term's subscription that goes on into the
/// current term, or of a suspended shard (see [`carry`]): `Some(Some(item))`
/// to queue now, `Some(None)` set aside or kept until the successor
/// subscribes (or dropped: its successor has it); `None` when it goes
/// nowhere.
fn carried(
    shared: &Shared,
    id: SubId,
    filter: &SubscriptionFilter,
    term: u64,
    delta: &Delta,
) -> Option<Option<(Key, Item)>> {
    delta.object.as_ref()?;
    let (key, item) = item_of(id, filter, term, delta.clone());
    let goes = carry::goes(shared, term, &item.delta);
    let current = shared.leadership.state().term == term;
    match goes {
        carry::Goes::Nowhere => return None,
        // This term's own delete of a suspended shard: no successor
        // subscription has it.
        carry::Goes::Aside if current => {
            shared.activity.settle(item.weight);
            carry::set_aside(shared, vec![(key, item)]);
            return Some(None);
        }
        carry::Goes::Now(_) | carry::Goes::Aside => {}
    }
    let mut cuts = shared.carried.lock();
    match cuts.handing(id, term, delta.seq) {
        carry::Handing::On => {
            drop(cuts);
            match goes {
                carry::Goes::Now(now) => Some(Some((key, item.term(now)))),
                _ => {
                    shared.activity.settle(item.weight);
                    carry::set_aside(shared, vec![(key, item)]);
                    Some(None)
                }
            }
        }
        carry::Handing::Drop => {
            drop(cuts);
            shared.activity.settle(1);
            Some(None)
        }
        carry::Handing::Wait => {
            let item = match goes {
                carry::Goes::Now(now) => item.term(now),
                _ => item,
            };
            cuts.wait(id, term, key, item);
            Some(None)
        }
    }
}

/// What an informer delta of subscription pair `id` is queued as, in term
/// `term`.
fn item_of(id: SubId, filter: &SubscriptionFilter, term: u64, delta: Delta) -> (Key, Item) {
    let key = match &delta.object {
        Some(o) => (id, o.key()),
        // Synced markers get a key of their own per subscription pair.
        None => (id, ObjectKey::new(None, "")),
    };
    let call = CallDelta {
        object: delta.object,
        old: delta.old,
        initial: delta.initial,
        final_state_unknown: delta.final_state_unknown,
        ..CallDelta::new(delta.dtype, filter.index, filter.kind.clone())
    };
    let item = Item::new(call)
        .received_at(delta.received)
        .seq(delta.seq)
        .term(term);
    (key, item)
}

/// Filters one informer delta and adds it to `queued`, the batch its
/// caller queues.
fn accept(
    shared: &Shared,
    id: SubId,
    filter: &SubscriptionFilter,
    term: u64,
    delta: Delta,
    queued: &mut Vec<(Key, Item)>,
) {
    // One read of the gate: the term, and the shards held (a synced
    // marker, without an object, is every shard's).
    let state = shared.leadership.state();
    let shard = delta
        .object
        .as_deref()
        .and_then(|o| state.shards.shard_of_object(o));
    let mine = shard.is_none_or(|i| state.shards.holds(i));
    let current = state.leading && state.term == term;
    let wanted = current && filter.deltas.contains(&delta.dtype) && mine && {
        let m = filter.wants(delta.dtype, delta.old.as_deref(), delta.object.as_deref());
        if !m {
            // The type is wanted: an update that changed nothing that matters.
            shared.stats.filtered.fetch_add(1, Ordering::Relaxed);
        }
        m
    };
    if !wanted {
        // A delete that may go on into a later term (an earlier term's, of
        // a shard held throughout) or be set aside (a suspended shard's).
        if delta.dtype == DeltaType::Deleted
            && !(current && mine)
            && filter.deltas.contains(&delta.dtype)
            && let Some(carried) = carried(shared, id, filter, term, &delta)
        {
            if let Some(item) = carried {
                queued.push(item);
            }
            return;
        }
        shared.activity.settle(1);
        if delta.dtype == DeltaType::Deleted
            && in_term(shared, term)
            && let Some(o) = &delta.object
        {
            // Not delivered, but the object is gone: its requeue timer, its
            // last handled state and its dead letter go with it, after what
            // the batch holds of it before the deletion.
            push_all(shared, queued);
            shared.object_gone(&(id, o.key()));
        }
        return;
    }
    if let Some(i) = shard {
        shared.telemetry.leader().count_shard_delta(i);
    }
    queued.push(item_of(id, filter, term, delta));
}
