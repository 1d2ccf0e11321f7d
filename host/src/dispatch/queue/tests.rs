use tokio::time::Instant;

use crate::informer::DeltaType;
use crate::runtime::{CallDelta, LastFailure};

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
fn pending_objects_are_the_queued_items_objects_not_the_ones_in_flight() {
    let mut q: KeyedQueue<&str> = KeyedQueue::default();
    q.push("a", Item::new(delta(DeltaType::Added, 1)));
    q.push("b", Item::new(delta(DeltaType::Added, 2)));
    assert_eq!(q.pending_objects().count(), 2);
    let (key, _) = q.pop().unwrap();
    assert_eq!(q.pending_objects().count(), 1, "{key} is in flight");
    let marker = CallDelta::new(DeltaType::Synced, 0, Gvk::new("", "v1", "Pod"));
    q.push("synced", Item::new(marker));
    assert_eq!(q.pending_len(), 2);
    assert_eq!(
        q.pending_objects().count(),
        1,
        "a synced marker has no object"
    );
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
fn an_initial_add_then_its_delete_delivers_the_delete_in_the_adds_place() {
    // A replay (the plugin may have acted on the object in an earlier
    // version): the delete must arrive, ahead of what was queued after
    // the add (the synced marker).
    let mut q = KeyedQueue::default();
    let mut add = delta(DeltaType::Added, 1);
    add.initial = true;
    q.push("x", Item::new(add));
    q.push("synced", Item::new(delta(DeltaType::Synced, 0)));
    assert_eq!(
        q.push("x", Item::new(delta(DeltaType::Deleted, 2))),
        Pushed::Coalesced
    );
    let (k, item) = q.pop().unwrap();
    assert_eq!(
        (
            k,
            item.delta.dtype,
            item.delta.initial,
            rv(&item),
            item.weight
        ),
        ("x", DeltaType::Deleted, false, 2, 2)
    );
    assert_eq!(q.pop().unwrap().0, "synced");
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
    assert!(q.fire(t + Duration::from_millis(999), |at| at).is_empty());
    assert!(q.pop().is_none());
    q.fire(t + Duration::from_secs(1), |at| at);
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
fn the_retry_rate_is_asked_when_a_backoff_ends_and_may_pace_it() {
    let t = Instant::now();
    let mut q = KeyedQueue::default();
    q.push("a", Item::new(delta(DeltaType::Updated, 1)));
    let (k, item) = q.pop().unwrap();
    q.failed(&k, item, conflict(), t + Duration::from_secs(1));
    // Nothing is asked of the rate until the backoff ends.
    let mut asked = Vec::new();
    q.fire(t + Duration::from_millis(500), |at| {
        asked.push(at);
        at
    });
    assert!(asked.is_empty());
    // It ends; the rate puts the retry 2 s later: still backing off.
    let end = t + Duration::from_secs(1);
    q.fire(end, |at| {
        asked.push(at);
        at + Duration::from_secs(2)
    });
    assert_eq!(asked, vec![end]);
    assert!(q.pop().is_none(), "paced by the rate");
    assert_eq!(q.next_deadline(), Some(end + Duration::from_secs(2)));
    // The slot comes: ready, without asking again.
    q.fire(end + Duration::from_secs(2), |_| panic!("asked twice"));
    let (k, item) = q.pop().unwrap();
    assert_eq!(item.delta.attempt, 2);
    // A live delta ends a paced wait too.
    q.failed(&k, item, conflict(), t + Duration::from_secs(5));
    q.fire(t + Duration::from_secs(5), |at| {
        at + Duration::from_secs(60)
    });
    assert!(q.pop().is_none());
    q.push("a", Item::new(delta(DeltaType::Updated, 2)));
    assert_eq!(rv(&q.pop().unwrap().1), 2);
    assert_eq!(q.delayed_len(), 0);
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
    assert_eq!(q.fire(t + Duration::from_secs(5), |at| at), vec!["b"]);
    assert_eq!(q.requeues_len(), 0);
    q.schedule_requeue("c", t + Duration::from_secs(5));
    q.clear_pending(|_, _| {});
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
                    for k in q.fire(*now, |at| at) {
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
            q.fire(now, |at| at);
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
