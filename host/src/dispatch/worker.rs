//! The calls and their outcomes: one delivery loop per plugin instance
//! (on the instance's thread). The tasks beside it, the timers and the
//! leadership gate, are in `background.rs`.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::intake::push;
use super::internal_events::{DeltaDead, DeltaRetrying, PluginUnhealthy};
use super::queue::{Item, KeyedQueue, Retry};
use super::retry::Failure;
use super::{Handler, Key, Shared, dead};
use crate::actions::executor::ActionError;
use crate::informer::DeltaType;
use crate::runtime::{CallDelta, CallError, Handled};
use crate::telemetry::feed::FeedRecord;

/// The longest requeue-after honoured (a day): a longer one is a bug in the
/// plugin, and the default resync covers the rest.
pub const MAX_REQUEUE_AFTER: Duration = Duration::from_secs(24 * 3600);

/// One instance's delivery loop, on the instance's thread. The waits and
/// the settling are async and run in `rt`'s context; the call itself runs
/// outside it, as on any plain thread (WASI's blocking host functions enter
/// the runtime themselves, which they cannot do from inside it).
pub(super) fn run<H: Handler + ?Sized>(
    rt: &tokio::runtime::Handle,
    shared: Arc<Shared>,
    me: usize,
    caller: &mut H,
    cancel: CancellationToken,
) {
    let started = rt.block_on(async {
        let mut ready = shared.ready.subscribe();
        tokio::select! {
            () = cancel.cancelled() => false,
            () = shared.stopping.cancelled() => false,
            r = ready.wait_for(|r| *r) => r.is_ok(),
        }
    });
    if !started {
        return;
    }
    let mut gate = shared.leadership.subscribe();
    // Taken from the queue in one lock, called one by one: a backlog costs
    // one lock and one sibling wake per batch, not per delta. The batch
    // lives where idle siblings can take from it (one uncontended lock per
    // delta), so a slow call holds back no key a free instance could call.
    let me = me.min(shared.batches.len() - 1);
    let mine = &shared.batches[me];
    loop {
        if shared.stopping.is_cancelled() {
            // Stopping between deltas: the rest goes back to the queue (for
            // the next version), no attempt counted.
            put_back_all(&shared, &mut mine.lock());
            return;
        }
        let next = mine.lock().pop_front();
        let Some((key, mut item)) = next else {
            let mut batch = VecDeque::new();
            match next_batch(&shared, &mut batch) {
                Next::Ready => {
                    if batch.len() > 1 && shared.workers > 1 {
                        // A sibling may take part of it while this one calls.
                        shared.wake.notify_one();
                    }
                    mine.lock().extend(batch);
                }
                Next::Stop => return,
                Next::Wait(Blocked::Empty) if steal(&shared, me) => {}
                Next::Wait(what) => {
                    if !rt.block_on(wait(&shared, &cancel, &mut gate, what)) {
                        return;
                    }
                }
            }
            continue;
        };
        match refresh(&shared, &key, &mut item) {
            Fresh::Deliver => {}
            Fresh::Gone { absent } => {
                // Gone (or recreated) since: its delete, and add, are on
                // their way; a key parked on an object no longer cached is
                // resolved.
                if absent {
                    shared.object_gone(&key);
                }
                finish(&shared, item.weight, |q| q.ok(&key));
                continue;
            }
            Fresh::Seen => {
                // This state was handled already (the cache ran ahead of
                // the queue): each state once.
                shared.stats.coalesced.fetch_add(1, Ordering::Relaxed);
                finish(&shared, item.weight, |q| q.ok(&key));
                continue;
            }
        }
        let (result, elapsed) = caller.handle(&item.delta);
        let broken = matches!(&result, Err(e) if e.breaks_instance());
        shared.stats.call_time.record(elapsed);
        rt.block_on(settle(&shared, key, item, result, elapsed));
        if broken {
            // Not run on the fresh instance in one go: back to the queue,
            // where quarantine may hold them.
            put_back_all(&shared, &mut mine.lock());
        }
    }
}

/// Level-triggered delivery: the object's current cached state replaces
/// the one the delta carried (an update keeps the old object the plugin
/// last saw). Every add, update, resync, retry and requeue reads it, not
/// only retries: the cache runs ahead of the queue (the informer stores an
/// event before the intake queues it), so a retry that read the cache and
/// a delta queued behind it would otherwise deliver a newer state before an
/// older one. False when the object is gone or was recreated under its
/// name: that delete (and add) reach the queue by themselves. A recreation
/// is told by a new uid, or by a delete of the key already queued behind
/// this item (the cache may hold the recreated object under the same uid:
/// delivering it now would put it before that delete).
///
/// Then, per key, against the state this version last handled: an add or
/// update whose current state is that one is not delivered again (its
/// state was handled while this delta waited), and an update's `old` is
/// that state, whatever older states the queue merged.
fn refresh(shared: &Shared, key: &Key, item: &mut Item) -> Fresh {
    let fresh_needed = matches!(
        item.delta.dtype,
        DeltaType::Added | DeltaType::Updated | DeltaType::Resync
    );
    if !fresh_needed {
        return Fresh::Deliver;
    }
    // `None`: a pair this version does not know (delivered as it is);
    // `Some(None)`: the object is no longer cached.
    let now = shared
        .sub(key.0)
        .map(|sub| sub.informer.store().get(&key.1));
    if shared.queue.lock().delete_pending(key) {
        return Fresh::Gone {
            absent: now.is_some_and(|n| n.is_none()),
        };
    }
    let Some(now) = now else {
        return Fresh::Deliver;
    };
    let Some(now) = now else {
        return Fresh::Gone { absent: true };
    };
    let same = item
        .delta
        .object
        .as_ref()
        .is_none_or(|o| o.meta().uid == now.meta().uid);
    if !same {
        return Fresh::Gone { absent: false };
    }
    let last = shared
        .delivered
        .lock()
        .get(key)
        .filter(|l| l.meta().uid == now.meta().uid)
        .cloned();
    if let Some(last) = last {
        let live = matches!(item.delta.dtype, DeltaType::Added | DeltaType::Updated);
        if live && last.meta().resource_version == now.meta().resource_version {
            return Fresh::Seen;
        }
        if item.delta.dtype == DeltaType::Updated {
            item.delta.old = Some(last);
        }
    }
    item.delta.object = Some(now);
    Fresh::Deliver
}

/// What [`refresh`] found.
enum Fresh {
    Deliver,
    /// The object is gone, or was recreated under its name (`absent`: no
    /// longer in the cache at all).
    Gone {
        absent: bool,
    },
    /// Its current state was handled already.
    Seen,
}

/// Records what a handled delta showed the plugin: the state, or, for a
/// delete, that there is none.
fn handled(shared: &Shared, key: &Key, delta: &CallDelta) {
    match (&delta.dtype, &delta.object) {
        (DeltaType::Deleted, _) | (_, None) => shared.forget_delivered(key),
        (_, Some(obj)) => {
            shared.delivered.lock().insert(key.clone(), obj.clone());
        }
    }
}

/// Takes half (rounded up) of the fullest sibling's batch, from its end,
/// into worker `me`'s; false when every sibling's is empty. The keys stay
/// in flight: only who calls them changes.
fn steal(shared: &Shared, me: usize) -> bool {
    let Some((victim, _)) = shared
        .batches
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != me)
        .map(|(i, b)| (i, b.lock().len()))
        .filter(|(_, n)| *n > 0)
        .max_by_key(|(_, n)| *n)
    else {
        return false;
    };
    let taken: Vec<_> = {
        let mut b = shared.batches[victim].lock();
        let n = b.len().div_ceil(2);
        let at = b.len() - n;
        b.drain(at..).collect()
    };
    if taken.is_empty() {
        return false;
    }
    shared
        .stats
        .stolen
        .fetch_add(taken.len() as u64, Ordering::Relaxed);
    shared.batches[me].lock().extend(taken);
    true
}

/// Puts a worker's untaken batch back at the front of the queue. After a
/// fenced stop its keys were abandoned (their deletes handed over, the rest
/// left to the successor's replay): their weight is settled instead, so
/// the host's activity count does not wait for them forever.
fn put_back_all(shared: &Shared, batch: &mut VecDeque<(Key, Item)>) {
    let mut q = shared.queue.lock();
    let mut settled = 0;
    for (key, item) in batch.drain(..).rev() {
        match q.take_abandoned(&key, &item) {
            Some(weight) => settled += weight,
            None => q.put_back(&key, item),
        }
    }
    let idle = q.in_flight_len() == 0;
    drop(q);
    if settled > 0 {
        shared.activity.settle(settled);
    }
    shared.wake.notify_one();
    if idle {
        shared.idle.notify_waiters();
    }
}

/// What a worker does next.
enum Next {
    /// The batch holds deltas to call.
    Ready,
    Wait(Blocked),
    Stop,
}

/// Why a worker cannot call now.
#[derive(Debug, Clone, Copy)]
enum Blocked {
    NotLeading,
    Quarantined(tokio::time::Instant),
    Empty,
}

/// Whether `item` of pair `key.0` is beyond this version's cut.
fn beyond_cut(shared: &Shared, key: &Key, item: &Item) -> bool {
    match &*shared.cuts.lock() {
        None => false,
        Some(cuts) => item.seq > cuts.get(&key.0).copied().unwrap_or(0),
    }
}

/// Pops the next delta this version may deliver; those beyond the cut are
/// held for the successor, those of an earlier leadership term dropped.
fn pop_deliverable(shared: &Shared, q: &mut KeyedQueue<Key>) -> Option<(Key, Item)> {
    loop {
        let (key, item) = q.pop()?;
        if item.term < q.term() {
            q.ok(&key);
            shared.activity.settle(item.weight);
            continue;
        }
        if !beyond_cut(shared, &key, &item) {
            return Some((key, item));
        }
        q.release(&key);
        shared.held.lock().push((key, item));
    }
}

/// Fills `batch` with the next deltas to call (the first ready one and a
/// fair share of the rest, the other instances' workers getting theirs), or
/// says why there are none; checked without waiting, so a backlog is served
/// without entering the runtime.
fn next_batch(shared: &Shared, batch: &mut VecDeque<(Key, Item)>) -> Next {
    if shared.stopping.is_cancelled() {
        return Next::Stop;
    }
    if !shared.leadership.is_leader() {
        return Next::Wait(Blocked::NotLeading);
    }
    // Quarantined: no call, so no new instance; deltas stay queued.
    if let Some(until) = shared.quarantine.lock().until
        && until > tokio::time::Instant::now()
    {
        return Next::Wait(Blocked::Quarantined(until));
    }
    let mut q = shared.queue.lock();
    let Some(first) = pop_deliverable(shared, &mut q) else {
        return Next::Wait(Blocked::Empty);
    };
    batch.push_back(first);
    // A plugin that has just failed gets one delta at a time.
    if shared.stats.consecutive_traps.load(Ordering::Relaxed) == 0 {
        let share = q
            .ready_len()
            .div_ceil(shared.workers.max(1))
            .min(MAX_BATCH - 1);
        for _ in 0..share {
            match pop_deliverable(shared, &mut q) {
                Some(v) => batch.push_back(v),
                None => break,
            }
        }
    }
    if shared.workers > 1 && q.has_ready() {
        // More is ready: let a sibling instance take it.
        shared.wake.notify_one();
    }
    Next::Ready
}

/// Most deltas a worker takes from the queue at once.
const MAX_BATCH: usize = 64;

/// Waits until `blocked` may have changed; false when the worker is to end.
async fn wait(
    shared: &Shared,
    cancel: &CancellationToken,
    gate: &mut tokio::sync::watch::Receiver<crate::leader::LeaderState>,
    blocked: Blocked,
) -> bool {
    match blocked {
        Blocked::NotLeading => tokio::select! {
            () = cancel.cancelled() => false,
            () = shared.stopping.cancelled() => false,
            r = gate.wait_for(|s| s.leading) => r.is_ok(),
        },
        Blocked::Quarantined(until) => {
            let over = tokio::select! {
                () = cancel.cancelled() => false,
                () = shared.stopping.cancelled() => false,
                () = tokio::time::sleep_until(until) => true,
            };
            if over {
                tracing::info!(plugin = %shared.plugin, "quarantine over: trying the plugin again");
            }
            over
        }
        Blocked::Empty => {
            let wake = shared.wake.notified();
            tokio::pin!(wake);
            // Registered before the re-check: a push in between is not missed.
            wake.as_mut().enable();
            if shared.queue.lock().has_ready() {
                return true;
            }
            tokio::select! {
                () = cancel.cancelled() => false,
                () = shared.stopping.cancelled() => false,
                () = wake => true,
            }
        }
    }
}

/// Whether an item of leadership term `term` may still change the queue:
/// leading in that term, and the queue serves no later one. Called under
/// the queue's lock, so a loss's drop comes after whatever this lets in.
fn current(shared: &Shared, q: &KeyedQueue<Key>, term: u64) -> bool {
    let s = shared.leadership.state();
    s.leading && s.term == term && q.term() <= term
}

/// Shows one handled delta in the web view's feed, when a page is open
/// and the feed's budget allows (one relaxed load with no page open).
#[inline]
fn to_feed(
    shared: &Shared,
    key: &Key,
    item: &Item,
    outcome: &'static str,
    call: Duration,
    error: Option<&Failure>,
) {
    let feed = shared.telemetry.feed();
    if !feed.admit() {
        return;
    }
    feed.publish(FeedRecord {
        t: FeedRecord::now_ms(),
        row: "delta",
        plugin: shared.plugin.clone(),
        kind: item.delta.kind.kind.clone(),
        namespace: key.1.namespace.as_deref().map(str::to_owned),
        name: key.1.name.to_string(),
        what: dead::call_delta_name(&item.delta),
        outcome,
        us: FeedRecord::micros(call),
        error: error.map(ToString::to_string),
    });
}

/// Ends a call whose term is over: its outcome belongs to that term (the
/// next one replays the cache), unless it was a delete that goes on into
/// the current term (see [`carry`](super::carry)), queued again there.
fn overtaken(shared: &Shared, key: Key, item: Item) {
    let again = super::carry::again(shared, &key, &item);
    finish(shared, item.weight, |q| q.ok(&key));
    go_on(shared, key, again);
}

/// Queues the delete [`carry::again`](super::carry::again) says goes on
/// into the current term, counted as new work.
fn go_on(shared: &Shared, key: Key, again: Option<Item>) {
    if let Some(again) = again {
        shared.activity.emit(1);
        push(shared, key, again);
    }
}

/// Acts on one call's outcome: run its actions, then retry, park or give up.
async fn settle(
    shared: &Arc<Shared>,
    key: Key,
    mut item: Item,
    result: Result<Handled, CallError>,
    call: Duration,
) {
    let plugin = &*shared.plugin;
    let abandoned = |shared: &Shared, key: &Key, item: &Item| {
        let w = shared.queue.lock().take_abandoned(key, item);
        if let Some(w) = w {
            finish(shared, w, |_| {});
            true
        } else {
            false
        }
    };
    let failure = match result {
        Ok(Handled { .. }) if !current(shared, &shared.queue.lock(), item.term) => {
            // Leadership was lost (and maybe regained) during the call: its
            // actions belong to a term that is over and are not executed;
            // the next term replays the cache.
            overtaken(shared, key, item);
            return;
        }
        Ok(Handled {
            actions,
            requeue_after,
        }) => {
            if shared.stats.consecutive_traps.swap(0, Ordering::Relaxed) > 0 {
                let mut q = shared.quarantine.lock();
                if q.until.take().is_some() {
                    tracing::info!(plugin, "plugin recovered: quarantine lifted");
                }
                q.next = shared.options.quarantine_base;
            }
            let executed = shared
                .executor
                .execute_all_counted(
                    plugin,
                    &shared.counters.actions,
                    &shared.rate,
                    actions,
                    &shared.fence,
                    Some(item.term),
                )
                .await;
            if abandoned(shared, &key, &item) {
                return;
            }
            match executed {
                Ok(()) => {
                    to_feed(shared, &key, &item, "ok", call, None);
                    shared.stats.latency.record(item.received.elapsed());
                    shared.stats.delivered.fetch_add(1, Ordering::Relaxed);
                    shared.counters.delivered(key.0);
                    shared.stats.dead_letters.lock().resolve(&key);
                    handled(shared, &key, &item.delta);
                    let requeue_at = requeue_after
                        .map(|after| tokio::time::Instant::now() + after.min(MAX_REQUEUE_AFTER));
                    let term = item.term;
                    finish(shared, item.weight, |q| {
                        q.ok(&key);
                        // A call that straddled a leadership loss sets no
                        // timer: the next term replays the cache.
                        if let Some(at) = requeue_at
                            && current(shared, q, term)
                        {
                            q.schedule_requeue(key.clone(), at);
                        }
                    });
                    if requeue_at.is_some() {
                        shared.timers_changed.notify_one();
                    }
                    return;
                }
                // Leadership lost: the queue is dropped, the next leader
                // replays the cache.
                Err(f) if f.error == ActionError::NotLeader => {
                    overtaken(shared, key, item);
                    return;
                }
                // Stopping: the delta goes to the next version.
                Err(f) if f.error == ActionError::Stopping => {
                    put_back_all(shared, &mut VecDeque::from([(key, item)]));
                    return;
                }
                Err(f) => Failure::Actions(f),
            }
        }
        Err(err) => {
            if abandoned(shared, &key, &item) {
                return;
            }
            if err.breaks_instance() {
                let n = shared
                    .stats
                    .consecutive_traps
                    .fetch_add(1, Ordering::Relaxed)
                    + 1;
                if n == shared.options.unhealthy_after {
                    PluginUnhealthy {
                        plugin,
                        consecutive_failures: n,
                        error: &err,
                    }
                    .emit();
                }
                if n >= shared.options.unhealthy_after {
                    quarantine(shared, n, &err);
                }
            }
            Failure::Call(err)
        }
    };
    // A call that straddled a leadership loss: its outcome belongs to a
    // term that is over, so it is neither retried nor recorded (the next
    // term replays the cache). Checked again under the queue's lock below.
    if !current(shared, &shared.queue.lock(), item.term) {
        overtaken(shared, key, item);
        return;
    }
    let obj_key = key.1.to_string();
    let kind = item.delta.kind.kind.clone();
    let failures = item.attempts + 1;
    item.first_failed
        .get_or_insert_with(std::time::SystemTime::now);
    if !failure.retryable() {
        let weight = item.weight;
        handled(shared, &key, &item.delta);
        let record = Item {
            attempts: failures,
            ..item
        };
        to_dead_letters(shared, &key, record, &failure, call, None);
        finish(shared, weight, |q| q.permanent(&key));
        return;
    }
    let at_least = match &failure {
        Failure::Actions(f) => f.error.retry_after(),
        Failure::Call(_) => None,
    };
    let decision = shared.policy.decide(failures, at_least);
    let now = tokio::time::Instant::now();
    // The plugin-wide rate is applied when the backoff ends (the timers'
    // task), so a parked key's long wait holds back no other key.
    let retry_at = now + decision.wait;
    let newly_parked = decision.parked && !shared.queue.lock().is_parked(&key);
    let mut settle_weight = 0;
    if newly_parked {
        let record = Item {
            attempts: failures,
            ..item.clone()
        };
        to_dead_letters(shared, &key, record, &failure, call, Some(decision.wait));
        // A parked key no longer counts as activity: the host may be idle
        // while it is retried at its cap.
        settle_weight = std::mem::take(&mut item.weight);
    } else {
        to_feed(shared, &key, &item, "retry", call, Some(&failure));
    }
    let last_failure = failure.last_failure();
    // The term may have ended since the check above: then the call was
    // overtaken after all (a delete may go on, see `carry`).
    let mut overtaken_by = None;
    let retry = {
        let mut q = shared.queue.lock();
        if current(shared, &q, item.term) {
            let retry = q.failed(&key, item, last_failure, retry_at);
            if decision.parked {
                settle_weight += q.park(&key);
            }
            retry
        } else {
            settle_weight += item.weight;
            q.ok(&key);
            overtaken_by = Some(item);
            Retry::After
        }
    };
    let again = overtaken_by.and_then(|item| super::carry::again(shared, &key, &item));
    go_on(shared, key.clone(), again);
    if !newly_parked {
        DeltaRetrying {
            plugin,
            kind: &kind,
            key: &obj_key,
            attempt: failures,
            error: &failure,
            wait: match retry {
                Retry::Now => Duration::ZERO,
                Retry::After => retry_at.saturating_duration_since(now),
            },
        }
        .emit(&shared.stats);
    }
    shared.timers_changed.notify_one();
    finish(shared, settle_weight, |_| {});
}

/// Records a key given up on (`retry_every` none) or parked (still
/// retried every `retry_every`): the feed, the log and metric, the dead
/// letter with the informer its pair reads.
fn to_dead_letters(
    shared: &Shared,
    key: &Key,
    item: Item,
    failure: &Failure,
    call: Duration,
    retry_every: Option<Duration>,
) {
    let outcome = if retry_every.is_some() {
        "parked"
    } else {
        "dead"
    };
    to_feed(shared, key, &item, outcome, call, Some(failure));
    DeltaDead {
        plugin: &shared.plugin,
        kind: &item.delta.kind.kind,
        key: &key.1.to_string(),
        attempts: item.attempts,
        delta: dead::call_delta_name(&item.delta),
        error: failure,
        retry_every,
    }
    .emit(&shared.stats);
    let spec = shared.sub(key.0).map(|s| s.informer.spec().clone());
    shared.stats.dead_letters.lock().add(
        &shared.plugin,
        key.clone(),
        item,
        failure.to_string(),
        spec,
        retry_every.is_some(),
    );
}

/// Starts a quarantine period, doubling the next one (up to the maximum).
fn quarantine(shared: &Shared, failures: u64, err: &CallError) {
    let period = {
        let mut q = shared.quarantine.lock();
        let period = q.next;
        q.until = Some(tokio::time::Instant::now() + period);
        q.next = period.saturating_mul(2).min(
            shared
                .options
                .quarantine_max
                .max(shared.options.quarantine_base),
        );
        period
    };
    shared.stats.quarantines.fetch_add(1, Ordering::Relaxed);
    tracing::error!(
        plugin = %shared.plugin,
        consecutive_failures = failures,
        quarantine_ms = period.as_millis() as u64,
        error = %err,
        "plugin quarantined: it keeps failing; no call and no new instance until the period ends, its deltas stay queued, other plugins are unaffected"
    );
}

/// Updates the key under the queue's lock, settles `weight` and wakes who
/// waits for work or for idleness.
fn finish(shared: &Shared, weight: u64, update: impl FnOnce(&mut KeyedQueue<Key>)) {
    let (idle, none_in_flight) = {
        let mut q = shared.queue.lock();
        update(&mut q);
        (q.is_idle(), q.in_flight_len() == 0)
    };
    if weight > 0 {
        shared.activity.settle(weight);
    }
    shared.wake.notify_one();
    if idle || none_in_flight {
        shared.idle.notify_waiters();
    }
}
