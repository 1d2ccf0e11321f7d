//! A sharded replica's dispatcher: handed only the objects of the shards
//! it holds, and, when its shards change, a replay under the new set.

use std::collections::BTreeSet;

use super::*;
use crate::shard::{ShardKey, ShardSet, fnv1a64, shard_of};

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
    let r = rig_led(
        DispatchOptions::default(),
        all_deltas(&[], None),
        Box::new(|_| Ok(Handled::default())),
        1,
        leadership.clone(),
    );
    // UUID-shaped uids, random-looking as the API server's are (FNV-1a's
    // top bits barely move when only a string's last bytes differ, so
    // `uid-0`, `uid-1`, ... would all fall in one shard).
    let uid = |i: usize| {
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
    };
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
    let (tx, rx) = mpsc::unbounded_channel();
    let fresh = r.set.subscribe(
        crate::informer::InformerSpec {
            kind: configmaps(),
            namespace: None,
            label_selector: None,
            field_selector: None,
        },
        tx,
    );
    r.dispatcher
        .add_intake(0, all_deltas(&[], None), fresh.informer.clone(), rx, term);
    let all: BTreeSet<String> = (0..20).map(|i| format!("c{i}")).collect();
    r.until("every object after the replay", |s| {
        names_in(s, "added") == all
    })
    .await;
    r.set.shutdown().await;
}
