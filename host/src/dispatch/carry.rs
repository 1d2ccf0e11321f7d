//! Deletes across a new term of a replica that keeps acting. Sharded, any
//! change of the shards a replica holds starts a new term (to fence what
//! it gave up and replay what it took), and what the old term had not
//! handled is dropped because the new term's replay of the cache covers
//! it with every object's current state. A delete is what a replay cannot
//! carry (the object is no longer there), so the delete of an object whose
//! shard this replica has held without a break since the delete's term
//! goes on into the new term: whether it was queued (or backing off), in a
//! call the term change overtook, or still in the old subscription's
//! channel. A shard taken over from another replica starts from the replay
//! alone, as a new leader does.
//!
//! The old subscription's channel holds deltas the new subscription also
//! gets (those numbered after the new one's replay): each subscription
//! pair's replay cut per term is kept, so a channel hands on only the
//! deletes numbered up to its successor's cut, and each delete goes on
//! once.
//!
//! A shard whose renewals missed the renew deadline is suspended, not lost
//! (see [`Leadership::suspend`](crate::leader::Leadership::suspend)): its
//! deletes, from wherever the term change finds them and those arriving
//! meanwhile, are set aside; if this replica renews its own Lease record
//! again (nobody held the shard in between) they go on into that term,
//! otherwise they go when another holder is seen.

use std::collections::HashMap;

use super::queue::Item;
use super::{Key, Shared, SubId};
use crate::informer::DeltaType;
use crate::runtime::CallDelta;

/// Where a delete of term `from` goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Goes {
    /// On into this (the current) term: this replica acts in a later term
    /// and has held the object's shard since `from` or earlier.
    Now(u64),
    /// Set aside: the object's shard, held since `from` or earlier, is
    /// suspended.
    Aside,
    /// Nowhere: not a delete, not sharded, or no longer this replica's.
    Nowhere,
}

/// Where `delta`, of term `from`, goes (see [`Goes`]).
pub(super) fn goes(shared: &Shared, from: u64, delta: &CallDelta) -> Goes {
    if delta.dtype != DeltaType::Deleted {
        return Goes::Nowhere;
    }
    let Some(object) = delta.object.as_deref() else {
        return Goes::Nowhere;
    };
    let state = shared.leadership.state();
    let l = &shared.leadership;
    // Sharded, the object's shard's; unsharded, the one Lease's.
    let shard = state.shards.shard_of_object(object);
    if shard.is_none() && state.shards.is_sharded() {
        return Goes::Nowhere;
    }
    let held = match shard {
        Some(i) => l.held_since(i),
        None => l.held_since_whole(),
    };
    if state.leading && state.term > from && held.is_some_and(|since| since <= from) {
        return Goes::Now(state.term);
    }
    let suspended = || match shard {
        Some(i) => l.suspended_since(i),
        None => l.suspended_since_whole(),
    };
    if held.is_none() && suspended().is_some_and(|since| since <= from) {
        return Goes::Aside;
    }
    Goes::Nowhere
}

/// A delete in a call its term's end overtook: queued again in the current
/// term, or set aside (see [`goes`]); `None` when it goes nowhere.
pub(super) fn again(shared: &Shared, key: &Key, item: &Item) -> Option<Item> {
    let retried = |term: u64| {
        Item::new(CallDelta {
            attempt: 1,
            ..item.delta.clone()
        })
        .received_at(item.received)
        .seq(item.seq)
        .term(term)
    };
    match goes(shared, item.term, &item.delta) {
        Goes::Now(term) => Some(retried(term)),
        Goes::Aside => {
            set_aside(shared, vec![(key.clone(), retried(item.term))]);
            None
        }
        Goes::Nowhere => None,
    }
}

/// Drops what the queue holds when the gate closes, setting aside the
/// deletes of a suspended shard; returns the weight dropped and whether the
/// queue is idle.
pub(super) fn clear_queue(shared: &Shared) -> (u64, bool) {
    let mut aside = Vec::new();
    let (dropped, idle) = {
        let mut q = shared.queue.lock();
        let dropped = q.clear_pending(|key, i| {
            if goes(shared, i.term, &i.delta) == Goes::Aside {
                aside.push((key.clone(), i.clone()));
            }
        });
        (dropped, q.is_idle())
    };
    set_aside(shared, aside);
    (dropped, idle)
}

/// Keeps deletes of a suspended shard (already settled: the activity they
/// count is emitted again when they go on).
pub(super) fn set_aside(shared: &Shared, items: Vec<(Key, Item)>) {
    if items.is_empty() {
        return;
    }
    tracing::debug!(plugin = %shared.plugin, deletes = items.len(), "deletes of a suspended shard set aside");
    shared.carried.lock().aside.extend(items);
}

/// Every delete set aside (a stopping version hands them on).
pub(super) fn take_aside(shared: &Shared) -> Vec<(Key, Item)> {
    std::mem::take(&mut shared.carried.lock().aside)
}

/// At subscription pair `id`'s subscription for `term`: its set-aside
/// deletes whose shard is held again with no other holder in between, to
/// queue in `term` (their activity emitted again); those of shards still
/// suspended (or of other pairs) stay, the rest go.
pub(super) fn resumed(shared: &Shared, id: SubId, term: u64) -> Vec<(Key, Item)> {
    let aside = std::mem::take(&mut shared.carried.lock().aside);
    if aside.is_empty() {
        return Vec::new();
    }
    let (mut on, mut keep) = (Vec::new(), Vec::new());
    for (key, item) in aside {
        match goes(shared, item.term, &item.delta) {
            Goes::Now(_) if key.0 == id => on.push((key, item.term(term))),
            Goes::Now(_) | Goes::Aside => keep.push((key, item)),
            Goes::Nowhere => {}
        }
    }
    shared.carried.lock().aside.extend(keep);
    let weight: u64 = on.iter().map(|(_, i)| i.weight).sum();
    if weight > 0 {
        shared.activity.emit(weight);
    }
    if !on.is_empty() {
        tracing::info!(plugin = %shared.plugin, term, deletes = on.len(), "a suspended shard held again with nobody in between: its deletes set aside go on");
    }
    on
}

/// What an old subscription's delete becomes.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Handing {
    /// Numbered up to the successor's cut: the successor never sees it.
    On,
    /// The successor's subscription got it too.
    Drop,
    /// No successor has subscribed yet: kept until one does.
    Wait,
}

/// Each subscription pair's replay cuts by term, the deletes waiting for
/// the next one (each item still of its own term), and those set aside
/// for a suspended shard.
#[derive(Debug, Default)]
pub(super) struct Cuts {
    by_pair: HashMap<SubId, Vec<(u64, u64)>>,
    waiting: Vec<(SubId, u64, Key, Item)>,
    aside: Vec<(Key, Item)>,
}

impl Cuts {
    /// Subscription pair `id` subscribed for `term`, its replay at `cut`:
    /// returns the waiting deletes it does not see (to route, each with
    /// the term it came from), and the weight of those it does (to settle).
    pub(super) fn subscribed(
        &mut self,
        id: SubId,
        term: u64,
        cut: u64,
    ) -> (Vec<(u64, Key, Item)>, u64) {
        let cuts = self.by_pair.entry(id).or_default();
        cuts.push((term, cut));
        // A channel's stragglers are gone long before sixteen more terms.
        let keep_from = cuts.len().saturating_sub(16);
        cuts.drain(..keep_from);
        let mut on = Vec::new();
        let mut settled = 0;
        let mut rest = Vec::new();
        for (pair, from, key, item) in self.waiting.drain(..) {
            if pair == id && from < term {
                if item.seq <= cut {
                    on.push((from, key, item));
                } else {
                    settled += item.weight;
                }
            } else {
                rest.push((pair, from, key, item));
            }
        }
        self.waiting = rest;
        (on, settled)
    }

    /// Where a delete numbered `seq` of pair `id`'s subscription of term
    /// `from` goes.
    pub(super) fn handing(&self, id: SubId, from: u64, seq: u64) -> Handing {
        let successor = self
            .by_pair
            .get(&id)
            .and_then(|c| c.iter().filter(|(t, _)| *t > from).min_by_key(|(t, _)| *t));
        match successor {
            Some((_, cut)) if seq <= *cut => Handing::On,
            Some(_) => Handing::Drop,
            None => Handing::Wait,
        }
    }

    pub(super) fn wait(&mut self, id: SubId, from: u64, key: Key, item: Item) {
        self.waiting.push((id, from, key, item));
    }

    /// The deletes still waiting (a stopping version hands them on).
    pub(super) fn take_waiting(&mut self) -> Vec<(Key, Item)> {
        self.waiting
            .drain(..)
            .map(|(_, _, key, item)| (key, item))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::Gvk;
    use crate::object::ObjectKey;

    fn item(seq: u64) -> Item {
        Item::new(CallDelta::new(
            DeltaType::Deleted,
            0,
            Gvk::new("", "v1", "ConfigMap"),
        ))
        .seq(seq)
    }

    fn key(name: &str) -> Key {
        (0, ObjectKey::new(Some("ns"), name))
    }

    #[test]
    fn an_old_channel_hands_on_only_what_its_successor_replay_came_after() {
        let mut cuts = Cuts::default();
        let (on, settled) = cuts.subscribed(0, 1, 10);
        assert!(on.is_empty() && settled == 0);
        // Nothing after term 1 yet: a term-1 delete waits.
        assert_eq!(cuts.handing(0, 1, 12), Handing::Wait);
        cuts.wait(0, 1, key("a"), item(12));
        cuts.wait(0, 1, key("b"), item(25));
        // Term 2 subscribed at 20: 12 is not in its stream, 25 is.
        let (on, settled) = cuts.subscribed(0, 2, 20);
        assert_eq!(
            on.iter().map(|(_, k, _)| k.clone()).collect::<Vec<_>>(),
            [key("a")]
        );
        assert_eq!(settled, 1);
        assert_eq!(cuts.handing(0, 1, 20), Handing::On);
        assert_eq!(cuts.handing(0, 1, 21), Handing::Drop);
        // Term 3 at 30: a term-1 straggler still goes by term 2's cut (the
        // term-2 channel hands on 21..=30), so each delete goes on once.
        cuts.subscribed(0, 3, 30);
        assert_eq!(cuts.handing(0, 1, 21), Handing::Drop);
        assert_eq!(cuts.handing(0, 2, 21), Handing::On);
        assert_eq!(cuts.handing(0, 2, 31), Handing::Drop);
        assert_eq!(cuts.handing(0, 3, 31), Handing::Wait);
        // Another pair's cuts are its own.
        assert_eq!(cuts.handing(1, 1, 5), Handing::Wait);
    }
}
