//! Bytes of dispatch state per key at 100k keys, counted by a global
//! allocator: a key with a delta pending (a resync of every object), an
//! idle key (handled; the dispatcher keeps the state it last handled), a
//! key waiting on a requeue, and a deleted one (nothing may remain).
//!
//! `cargo bench -p kubewasm --bench queue_memory` (`--profile dev` gives
//! the same figures without a release build).
#![allow(
    unsafe_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::cast_precision_loss,
    clippy::cast_possible_wrap
)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

use kubewasm::dispatch::queue::{Item, KeyedQueue};
use kubewasm::informer::DeltaType;
use kubewasm::kind::Gvk;
use kubewasm::object::{KObject, ObjectHandle, ObjectKey, StripOptions};
use kubewasm::runtime::CallDelta;

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new as isize - layout.size() as isize, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const KEYS: usize = 100_000;

type Key = (u32, ObjectKey);

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

fn main() {
    let gvk = Gvk {
        group: String::new(),
        version: "v1".into(),
        kind: "ConfigMap".into(),
    };
    // The objects live in the informer's cache, not in the queue: built
    // before counting.
    let objects: Vec<ObjectHandle> = (0..KEYS)
        .map(|i| {
            Arc::new(
                KObject::from_value(
                    serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": format!("cm-{i:06}"), "namespace": "team-a",
                            "resourceVersion": (i + 1).to_string(), "uid": format!("uid-{i}")},
                        "data": {"k": "v"}}),
                    StripOptions::default(),
                )
                .expect("a ConfigMap"),
            )
        })
        .collect();
    let mut q: KeyedQueue<Key> = KeyedQueue::default();
    let mut delivered: HashMap<Key, ObjectHandle> = HashMap::new();
    let per_key = |before: isize| (live() - before) as f64 / KEYS as f64;

    let base = live();
    for o in &objects {
        let delta = CallDelta {
            object: Some(o.clone()),
            ..CallDelta::new(DeltaType::Resync, 0, gvk.clone())
        };
        q.push((0, o.key()), Item::new(delta));
    }
    let pending = per_key(base);

    // Handled: the queue forgets the key, the dispatcher keeps the state
    // it last handled (each state once, `old`).
    while let Some((key, item)) = q.pop() {
        q.ok(&key);
        if let Some(o) = item.delta.object {
            delivered.insert(key, o);
        }
    }
    let idle = per_key(base);

    let now = tokio::time::Instant::now();
    for o in &objects {
        q.schedule_requeue((0, o.key()), now + Duration::from_secs(3600));
    }
    let requeue = per_key(base);

    // Deleted: the requeue and the state go with the object.
    for o in &objects {
        let key = (0, o.key());
        q.drop_requeue(&key);
        delivered.remove(&key);
    }
    // As the dispatcher's map gives its room back (`forget_delivered`).
    delivered.shrink_to(0);
    let deleted = per_key(base);

    println!("dispatch state per key at {KEYS} keys (bytes, heap):");
    println!("  a delta pending:          {pending:>7.0}");
    println!("  idle (last state kept):   {idle:>7.0}   (goal <= 300)");
    println!("  idle, a requeue pending:  {requeue:>7.0}");
    println!("  deleted:                  {deleted:>7.0}   (goal 0)");
    println!(
        "  sizes: Item {} B, CallDelta {} B",
        std::mem::size_of::<Item>(),
        std::mem::size_of::<CallDelta>()
    );
    drop((q, delivered, objects));
}
