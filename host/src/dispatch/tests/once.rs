//! Each state once per version and term: the cache running ahead of the
//! queue delivers no state twice and an update's `old` is what the plugin
//! last handled; a call that straddles a leadership loss leaves nothing
//! behind for the next term.

use super::*;

fn update(obj: KObject, old: KObject) -> Item {
    Item::new(CallDelta {
        object: Some(Arc::new(obj)),
        old: Some(Arc::new(old)),
        ..CallDelta::new(DeltaType::Updated, 0, configmaps().gvk)
    })
}

/// The informer stores a state before its delta is queued, so a pop can
/// deliver a state whose own delta is still on its way: S1's delta,
/// popped with S2 already cached, delivers S2 (old: S0, what the plugin
/// last handled), and S2's delta then finds its state handled and is not
/// delivered again.
#[tokio::test(start_paused = true)]
async fn the_cache_running_ahead_delivers_each_state_once_with_the_old_last_handled() {
    let r = rig(
        DispatchOptions::default(),
        all_deltas(&[], None),
        Box::new(|_| Ok(Handled::default())),
    );
    r.list(vec![cm("a", 1, "s0")]);
    r.until("the add", |s| s.len() == 1).await;
    let shared = r.dispatcher.shared.clone();
    let informer = shared.sub(0).unwrap().informer.clone();
    // The cache holds S2; S1's delta is queued, S2's not yet.
    informer.store().upsert(Arc::new(cm("a", 3, "s2")));
    let key = (0, cm("a", 1, "").key());
    super::super::intake::push(
        &shared,
        key.clone(),
        update(cm("a", 2, "s1"), cm("a", 1, "s0")),
    );
    r.until("S1's delta", |s| s.len() == 2).await;
    r.eventually("its call settled", |r| r.dispatcher.is_idle())
        .await;
    super::super::intake::push(&shared, key, update(cm("a", 3, "s2"), cm("a", 2, "s1")));
    // Long enough for a second delivery to show.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let seen = r.seen();
    assert_eq!(seen.len(), 2, "a state delivered twice: {seen:#?}");
    assert_eq!(
        (seen[1].what, seen[1].rv.as_str(), seen[1].old.as_str()),
        ("updated", "3", "1"),
        "{seen:#?}"
    );
    r.set.shutdown().await;
}

/// A call that straddles a leadership loss: one that fails (its retry
/// would go back in the queue with a timer), one that succeeds asking for
/// a requeue. The next term delivers the object once, by its replay, and
/// no retry or requeue of the old term follows.
#[tokio::test(start_paused = true)]
async fn a_call_straddling_a_leadership_loss_leaves_no_retry_or_requeue_behind() {
    for outcome in ["fails", "requeues"] {
        straddle(outcome).await;
    }
}

async fn straddle(outcome: &'static str) {
    let leadership = Arc::new(Mutex::new(None::<(Leadership, Arc<PluginStats>)>));
    let lose = leadership.clone();
    let r = rig(
        DispatchOptions::default(),
        all_deltas(&[], None),
        Box::new(move |d| {
            // The first term's call: leadership goes while it runs.
            let gate = lose.lock().clone();
            if let Some((l, stats)) = gate
                && l.state().term == 0
            {
                l.lose();
                // The loss's drop runs while the call is still out: what
                // the call leaves behind comes after it.
                let started = std::time::Instant::now();
                while stats.leadership_drops.load(Ordering::Relaxed) == 0 {
                    assert!(started.elapsed() < Duration::from_secs(10), "no drop");
                    std::thread::yield_now();
                }
                return if outcome == "fails" {
                    Err(CallError::Retry("after the loss".into()))
                } else {
                    Ok(Handled {
                        // Never executed: its term is over.
                        actions: vec![apply_action(d)],
                        // Due well after the next term began.
                        requeue_after: Some(Duration::from_secs(10)),
                    })
                };
            }
            Ok(Handled::default())
        }),
    );
    *leadership.lock() = Some((r.leadership.clone(), r.dispatcher.stats().clone()));
    r.list(vec![cm("a", 1, "x")]);
    r.until("the first call", |s| s.len() == 1).await;
    // The loss dropped the queue, and the call came back after it.
    r.eventually("the loss's drop and the call's end", |r| {
        r.dispatcher
            .stats()
            .leadership_drops
            .load(Ordering::Relaxed)
            == 1
            && r.dispatcher.shared.queue.lock().in_flight_len() == 0
    })
    .await;
    let term = r.leadership.gain();
    r.replay(term);
    r.until("the replay", |s| s.len() >= 2).await;
    // Past any backoff or requeue the old term could have left.
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(
        r.sink.done.lock().is_empty(),
        "{outcome}: an action of the old term's call ran: {:?}",
        r.sink.done.lock()
    );
    let after: Vec<_> = r.seen()[1..].iter().map(|s| s.what).collect();
    assert_eq!(
        after,
        vec!["added"],
        "{outcome}: the new term's deliveries: {:#?}",
        r.seen()
    );
    r.set.shutdown().await;
}

/// Two instances; one call blocks. The keys its instance had taken in the
/// same batch are called by the other instance meanwhile, not after it
/// (they waited behind it, up to 63 of them).
#[tokio::test(start_paused = true)]
async fn keys_behind_a_slow_call_are_taken_by_an_idle_instance() {
    let release = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let hold = release.clone();
    let r = rig_with(
        DispatchOptions::default(),
        all_deltas(&[], None),
        Box::new(move |d| {
            if d.object.as_ref().unwrap().meta().name.as_ref() == "slow" {
                let started = std::time::Instant::now();
                while !hold.load(Ordering::Relaxed) {
                    assert!(
                        started.elapsed() < Duration::from_secs(30),
                        "never released"
                    );
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            Ok(Handled::default())
        }),
        2,
    );
    let mut objects = vec![cm("slow", 1, "x")];
    objects.extend((0..30).map(|i| cm(&format!("k{i:02}"), 2 + i, "x")));
    r.list(objects);
    r.eventually_real("every other key while the slow call runs", |r| {
        r.seen().iter().filter(|s| s.name != "slow").count() == 30
    })
    .await;
    release.store(true, Ordering::Relaxed);
    r.eventually_real("all settled", |r| r.dispatcher.is_idle())
        .await;
    r.set.shutdown().await;
}
