//! A sharded replica's dispatcher: handed only the objects of the shards
//! it holds, and, when its shards change, a replay under the new set.

use std::collections::BTreeSet;

use super::*;
use crate::shard::{ShardKey, ShardSet, fnv1a64, shard_of};

/// UUID-shaped uids, random-looking as the API server's are (FNV-1a's
/// top bits barely move when only a string's last bytes differ, so
/// `uid-0`, `uid-1`, ... would all fall in one shard).
fn uid(i: usize) -> String {
    let mut x = (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^= x >> 31;
    let y = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        x >> 32,
        (x >> 16) & 0xffff,
        x & 0xfff,
        y & 0xfff,
        y >> 16
    )
}

fn names_in(seen: &[Seen], what: &str) -> BTreeSet<String> {
    seen.iter()
        .filter(|s| s.what == what)
        .map(|s| s.name.clone())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_sharded_replica_is_handed_only_the_objects_of_the_shards_it_holds() {
    let leadership = Leadership::sharded(ShardSet::sharded(2, ShardKey::Uid, false));
    leadership.hold(0, true);
    let r = handling_all(&leadership);
    let shard = |i: usize| shard_of(fnv1a64(uid(i).as_bytes()), 2);
    let objects: Vec<KObject> = (0..20)
        .map(|i| cm_uid(&format!("c{i}"), &uid(i), 1, "x"))
        .collect();
    let of_shard = |s: u32| -> BTreeSet<String> {
        (0..20)
            .filter(|i| shard(*i) == s)
            .map(|i| format!("c{i}"))
            .collect()
    };
    assert!(!of_shard(0).is_empty() && !of_shard(1).is_empty());
    r.list(objects);
    r.until("shard 0's objects", |s| names_in(s, "added") == of_shard(0))
        .await;
    // A live update of each object: only shard 0's are handed over.
    for i in 0..20 {
        r.send(WatchEvent::Apply(cm_uid(&format!("c{i}"), &uid(i), 2, "y")));
    }
    r.until("shard 0's updates", |s| {
        names_in(s, "updated") == of_shard(0)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        names_in(&r.seen(), "updated"),
        of_shard(0),
        "{:#?}",
        r.seen()
    );

    // Shard 1 taken too: a new term, whose replay hands over shard 1's
    // objects as well.
    let term = leadership.hold(1, true);
    r.seen.lock().clear();
    r.replay(term);
    let all: BTreeSet<String> = (0..20).map(|i| format!("c{i}")).collect();
    r.until("every object after the replay", |s| {
        names_in(s, "added") == all
    })
    .await;
    r.set.shutdown().await;
}

/// How a delete of a shard-0 object is caught by shard 1's gain (a new
/// term): waiting for its retry, or in the call the gain overtook.
#[derive(Clone, Copy)]
enum Caught {
    Retrying,
    InTheCall,
}

/// A replica that keeps shard 0 while it takes shard 1 starts a new term
/// (what it queued is dropped, its cache replayed), but a delete of a
/// shard-0 object is what the replay cannot stand for: it reaches the
/// plugin in the new term, after the replay.
async fn a_delete_of_a_shard_held_throughout_outlives_a_new_term(caught: Caught) {
    let leadership = Leadership::sharded(ShardSet::sharded(2, ShardKey::Uid, false));
    leadership.hold(0, true);
    let (mine, name) = one_in(0);
    let first = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let r = rig_led(
        no_early_retry(),
        all_deltas(&[], None),
        Box::new({
            let (leadership, first) = (leadership.clone(), first.clone());
            move |d| {
                if d.dtype != DeltaType::Deleted
                    || !first.swap(false, std::sync::atomic::Ordering::SeqCst)
                {
                    return Ok(Handled::default());
                }
                match caught {
                    Caught::Retrying => Err(CallError::Retry("not yet".into())),
                    Caught::InTheCall => {
                        leadership.hold(1, true);
                        Ok(Handled::default())
                    }
                }
            }
        }),
        1,
        leadership.clone(),
    );
    r.list(vec![cm_uid(&name, &uid(mine), 1, "x")]);
    r.until("the add", |s| names_in(s, "added").contains(&name))
        .await;
    r.send(WatchEvent::Delete(cm_uid(&name, &uid(mine), 2, "x")));
    r.until("the delete's first call", |s| {
        names_in(s, "deleted").contains(&name)
    })
    .await;
    let term = match caught {
        Caught::Retrying => leadership.hold(1, true),
        Caught::InTheCall => leadership.state().term,
    };
    r.replay(term);
    // The replay has nothing of the object; the delete comes again.
    r.until("the delete in the new term", |s| {
        s.iter()
            .filter(|s| s.what == "deleted" && s.name == name)
            .count()
            == 2
    })
    .await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let deletes = r.seen().iter().filter(|s| s.what == "deleted").count();
    assert_eq!(deletes, 2, "once per term: {:#?}", r.seen());
    r.set.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_retrying_delete_of_a_shard_held_throughout_outlives_a_new_term() {
    a_delete_of_a_shard_held_throughout_outlives_a_new_term(Caught::Retrying).await;
}

#[tokio::test(start_paused = true)]
async fn a_delete_whose_call_a_new_term_overtook_is_delivered_again_in_it() {
    a_delete_of_a_shard_held_throughout_outlives_a_new_term(Caught::InTheCall).await;
}

/// A shard taken from another replica starts from its replay alone: a
/// delete this replica saw while it did not hold the shard is not carried.
#[tokio::test(start_paused = true)]
async fn a_delete_of_a_shard_just_taken_is_not_carried() {
    let leadership = Leadership::sharded(ShardSet::sharded(2, ShardKey::Uid, false));
    leadership.hold(0, true);
    let (theirs, name) = one_in(1);
    let r = handling_all(&leadership);
    r.list(vec![cm_uid(&name, &uid(theirs), 1, "x")]);
    r.send(WatchEvent::Delete(cm_uid(&name, &uid(theirs), 2, "x")));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let term = leadership.hold(1, true);
    r.replay(term);
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(
        r.seen().iter().all(|s| s.name != name),
        "shard 1's object, deleted before it was taken: {:#?}",
        r.seen()
    );
    r.set.shutdown().await;
}

/// The first test object (index and name) in shard `shard` of 2.
fn one_in(shard: u32) -> (usize, String) {
    let i = (0..50)
        .find(|i| shard_of(fnv1a64(uid(*i).as_bytes()), 2) == shard)
        .unwrap();
    (i, format!("c{i}"))
}

/// A rig under `leadership` whose plugin handles every delta.
fn handling_all(leadership: &Leadership) -> Rig {
    rig_led(
        DispatchOptions::default(),
        all_deltas(&[], None),
        Box::new(|_| Ok(Handled::default())),
        1,
        leadership.clone(),
    )
}

/// Retries back off for an hour: a delete asked to retry is still waiting
/// when the test changes the term, however the threads are scheduled.
fn no_early_retry() -> DispatchOptions {
    DispatchOptions {
        base_backoff: Duration::from_secs(3600),
        max_backoff: Duration::from_secs(3600),
        ..DispatchOptions::default()
    }
}

/// A rig under `leadership` whose plugin asks for a retry of the first
/// delete it is handed (so that it is still queued when the term ends).
fn first_delete_retried(leadership: &Leadership) -> Rig {
    let first = std::sync::atomic::AtomicBool::new(true);
    rig_led(
        no_early_retry(),
        all_deltas(&[], None),
        Box::new(move |d| {
            if d.dtype == DeltaType::Deleted
                && first.swap(false, std::sync::atomic::Ordering::SeqCst)
            {
                return Err(CallError::Retry("not yet".into()));
            }
            Ok(Handled::default())
        }),
        1,
        leadership.clone(),
    )
}

/// What happens to a shard between a delete and the replay that follows.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Gap {
    /// Suspended (renewals missed the deadline), then renewed again by this
    /// replica with nobody in between.
    Resumed,
    /// Suspended, then another holder seen, then taken back from it.
    Forfeited,
}

/// A shard whose renewals missed the renew deadline is fenced at once, but
/// if its Lease is renewed again by the same replica nobody else acted on
/// it: the deletes queued when it was suspended (one backing off here) and
/// those that arrived while it was suspended reach the plugin after the
/// replay. Taken back from another holder, they do not: the other holder
/// had them. `others` keeps shard 1 held throughout (the gate stays open)
/// or not (the gate closes).
async fn deletes_of_a_suspended_shard(gap: Gap, others: bool) {
    let leadership = Leadership::sharded(ShardSet::sharded(2, ShardKey::Uid, false));
    leadership.hold(0, true);
    if others {
        leadership.hold(1, true);
    }
    let mine: Vec<usize> = (0..80)
        .filter(|i| shard_of(fnv1a64(uid(*i).as_bytes()), 2) == 0)
        .take(2)
        .collect();
    let (queued, later) = (format!("c{}", mine[0]), format!("c{}", mine[1]));
    let r = first_delete_retried(&leadership);
    r.list(vec![
        cm_uid(&queued, &uid(mine[0]), 1, "x"),
        cm_uid(&later, &uid(mine[1]), 1, "x"),
    ]);
    r.until("both adds", |s| names_in(s, "added").len() == 2)
        .await;
    r.send(WatchEvent::Delete(cm_uid(&queued, &uid(mine[0]), 2, "x")));
    r.until("the first delete's first call", |s| {
        names_in(s, "deleted").contains(&queued)
    })
    .await;
    // Renewals missed: shard 0 suspended while its delete backs off.
    let suspended_in = leadership.suspend(0);
    assert!(!leadership.state().shards.holds(0));
    assert_eq!(leadership.is_leader(), others);
    if others {
        r.replay(suspended_in);
    }
    r.send(WatchEvent::Delete(cm_uid(&later, &uid(mine[1]), 3, "x")));
    tokio::time::sleep(Duration::from_secs(5)).await;
    let deleted = |r: &Rig| {
        r.seen()
            .iter()
            .filter(|s| s.what == "deleted")
            .map(|s| s.name.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        deleted(&r),
        std::slice::from_ref(&queued),
        "fenced while suspended"
    );
    let term = match gap {
        Gap::Resumed => leadership.resume(0),
        Gap::Forfeited => {
            leadership.forfeit(0);
            leadership.hold(0, true)
        }
    };
    r.replay(term);
    match gap {
        Gap::Resumed => {
            r.until("both deletes after the resume", |s| {
                names_in(s, "deleted") == BTreeSet::from([queued.clone(), later.clone()])
                    && s.iter().filter(|s| s.what == "deleted").count() == 3
            })
            .await;
            tokio::time::sleep(Duration::from_secs(10)).await;
            let mut seen = deleted(&r);
            seen.sort();
            let mut want = vec![queued.clone(), queued.clone(), later.clone()];
            want.sort();
            assert_eq!(
                seen,
                want,
                "each delete once more, no more: {:#?}",
                r.seen()
            );
        }
        Gap::Forfeited => {
            tokio::time::sleep(Duration::from_secs(10)).await;
            assert_eq!(
                deleted(&r),
                std::slice::from_ref(&queued),
                "another replica held the shard in between: {:#?}",
                r.seen()
            );
        }
    }
    r.set.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn deletes_of_a_suspended_shard_go_on_when_it_is_renewed_with_nobody_in_between() {
    deletes_of_a_suspended_shard(Gap::Resumed, false).await;
}

#[tokio::test(start_paused = true)]
async fn deletes_of_a_suspended_shard_go_on_beside_a_shard_held_throughout() {
    deletes_of_a_suspended_shard(Gap::Resumed, true).await;
}

#[tokio::test(start_paused = true)]
async fn deletes_of_a_suspended_shard_another_replica_held_in_between_do_not() {
    deletes_of_a_suspended_shard(Gap::Forfeited, false).await;
}

/// Unsharded, the one Lease is suspended and resumed the same way: the
/// deletes queued when its renewals missed the deadline and those that
/// arrived meanwhile reach the plugin once it is renewed with nobody in
/// between; taken over by another holder in between, they do not.
#[tokio::test(start_paused = true)]
async fn an_unsharded_leader_renewed_with_nobody_in_between_delivers_its_deletes() {
    for resumed in [true, false] {
        let leadership = Leadership::follower();
        leadership.gain();
        let r = first_delete_retried(&leadership);
        r.list(vec![
            cm_uid("a", &uid(1), 1, "x"),
            cm_uid("b", &uid(2), 1, "x"),
        ]);
        r.until("both adds", |s| names_in(s, "added").len() == 2)
            .await;
        r.send(WatchEvent::Delete(cm_uid("a", &uid(1), 2, "x")));
        r.until("a's first delete call", |s| {
            names_in(s, "deleted").contains("a")
        })
        .await;
        leadership.suspend_whole();
        r.send(WatchEvent::Delete(cm_uid("b", &uid(2), 3, "x")));
        tokio::time::sleep(Duration::from_secs(5)).await;
        let deleted = |r: &Rig| r.seen().iter().filter(|s| s.what == "deleted").count();
        assert_eq!(deleted(&r), 1, "fenced while suspended");
        let term = if resumed {
            leadership.resume_whole()
        } else {
            leadership.forfeit_whole();
            leadership.gain()
        };
        r.replay(term);
        if resumed {
            r.until("both deletes after the resume", |s| {
                s.iter().filter(|s| s.what == "deleted").count() == 3
            })
            .await;
        }
        tokio::time::sleep(Duration::from_secs(10)).await;
        let want = if resumed { 3 } else { 1 };
        assert_eq!(deleted(&r), want, "resumed {resumed}: {:#?}", r.seen());
        if resumed {
            assert_eq!(
                names_in(&r.seen(), "deleted"),
                BTreeSet::from(["a".to_owned(), "b".to_owned()])
            );
        }
        r.set.shutdown().await;
    }
}

/// A version that stops while a shard is suspended hands the deletes it
/// set aside to its successor, which keeps them aside too and delivers
/// them once the shard is held again (a hot swap within a suspension).
#[tokio::test(start_paused = true)]
async fn deletes_set_aside_go_to_the_next_version() {
    let leadership = Leadership::sharded(ShardSet::sharded(2, ShardKey::Uid, false));
    leadership.hold(0, true);
    let (mine, name) = one_in(0);
    let old = handling_all(&leadership);
    old.list(vec![cm_uid(&name, &uid(mine), 1, "x")]);
    old.until("the add", |s| names_in(s, "added").contains(&name))
        .await;
    leadership.suspend(0);
    old.send(WatchEvent::Delete(cm_uid(&name, &uid(mine), 2, "x")));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(names_in(&old.seen(), "deleted").is_empty(), "fenced");
    old.dispatcher.stop().await;
    let aside = old.dispatcher.take_aside();
    assert_eq!(aside.len(), 1, "{aside:?}");

    let new = handling_all(&leadership);
    new.dispatcher.keep_aside(aside);
    new.list(Vec::new());
    let term = leadership.resume(0);
    new.replay(term);
    new.until("the delete in the new version", |s| {
        names_in(s, "deleted").contains(&name)
    })
    .await;
    old.set.shutdown().await;
    new.set.shutdown().await;
}
