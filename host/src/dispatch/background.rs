//! The dispatcher's two tasks beside its delivery loops: the timers'
//! (backoffs ending, requeues coming due) and the leadership gate's
//! (what is queued goes when leadership is lost).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio_util::sync::CancellationToken;

use super::intake::push;
use super::queue::Item;
use super::{Key, Shared};
use crate::informer::DeltaType;
use crate::runtime::CallDelta;

/// The timers' task: ends backoffs (the keys become ready) and turns due
/// requeues into requeue deltas of the objects' current state.
pub(super) async fn timers(shared: Arc<Shared>, cancel: CancellationToken) {
    loop {
        let changed = shared.timers_changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        let next = shared.queue.lock().next_deadline();
        let due = async {
            match next {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = cancel.cancelled() => return,
            () = changed => continue,
            () = due => {}
        }
        let requeues = shared
            .queue
            .lock()
            .fire(tokio::time::Instant::now(), |now| {
                shared.retry_rate.lock().reserve(now)
            });
        shared.wake.notify_waiters();
        for key in requeues {
            requeue(&shared, key);
        }
    }
}

/// Queues a requeue delta of `key`'s object as the cache holds it now
/// (nothing if it is gone: its delete is the plugin's next look).
fn requeue(shared: &Shared, key: Key) {
    let state = shared.leadership.state();
    if !state.leading {
        return;
    }
    let Some(sub) = shared.sub(key.0) else {
        return;
    };
    let Some(now) = sub.informer.store().get(&key.1) else {
        return;
    };
    let delta = CallDelta {
        object: Some(now),
        requeued: true,
        ..CallDelta::new(DeltaType::Resync, sub.filter.index, sub.filter.kind.clone())
    };
    shared.activity.emit(1);
    push(shared, key, Item::new(delta).term(state.term));
}

/// Drops what is queued, and every timer, whenever leadership is lost: a
/// new term replays the cache, and the leader that follows will have acted
/// on it already.
pub(super) async fn drop_on_loss(shared: Arc<Shared>, cancel: CancellationToken) {
    let mut gate = shared.leadership.subscribe();
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            changed = gate.changed() => if changed.is_err() { return },
        }
        let state = *gate.borrow_and_update();
        if state.leading {
            continue;
        }
        let (dropped, idle) = super::carry::clear_queue(&shared);
        shared.activity.settle(dropped);
        shared
            .stats
            .leadership_drops
            .fetch_add(1, Ordering::Relaxed);
        tracing::info!(plugin = %shared.plugin, dropped, term = state.term, "not the leader: dropped queued deltas and pending requeues and retries");
        if idle {
            shared.idle.notify_waiters();
        }
    }
}
