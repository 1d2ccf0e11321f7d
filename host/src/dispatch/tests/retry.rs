//! Retries and requeues by key: a retry reads the fresh object, requeues
//! do not multiply, and no retry ends silently.

use super::*;

#[tokio::test(start_paused = true)]
async fn a_retry_after_a_conflict_sees_the_fresh_object_not_the_stale_one() {
    // The update changes only a field the subscription does not watch, so
    // it is filtered out: the retry must still read the cache, not resend
    // the failed attempt's object.
    let r = rig(
        DispatchOptions::default(),
        all_deltas(&["/metadata/labels"], None),
        Box::new(|d| {
            Ok(Handled {
                actions: vec![apply_action(d)],
                requeue_after: None,
            })
        }),
    );
    *r.sink.conflicts.lock() = 1;
    r.list(vec![cm("a", 1, "x")]);
    r.until("the first attempt", |s| !s.is_empty()).await;
    r.send(WatchEvent::Apply(cm("a", 2, "y")));
    r.until("the retry", |s| s.len() >= 2).await;
    let seen = r.seen();
    assert_eq!(seen[0].rv, "1");
    assert_eq!(
        (seen[1].rv.as_str(), seen[1].attempt, seen[1].failure),
        ("2", 2, Some("conflict")),
        "{seen:#?}"
    );
    r.eventually("the retry's action", |r| !r.sink.done.lock().is_empty())
        .await;
    assert_eq!(r.sink.done.lock().len(), 1);
    assert_eq!(r.seen().len(), 2, "{:#?}", r.seen());
    r.set.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn ten_resyncs_with_requeue_after_leave_one_pending_requeue() {
    let r = rig(
        DispatchOptions::default(),
        all_deltas(&[], Some(Duration::from_secs(1))),
        Box::new(|_| {
            Ok(Handled {
                actions: Vec::new(),
                requeue_after: Some(Duration::from_secs(3600)),
            })
        }),
    );
    r.list(vec![cm("a", 1, "x")]);
    // The initial add and ten resyncs, each asking to be requeued in an hour.
    r.until("ten resyncs", |s| {
        s.iter().filter(|s| s.what == "resync").count() >= 10
    })
    .await;
    assert_eq!(r.dispatcher.stats().requeues_pending(), 1);
    r.leadership.lose();
    r.eventually("a leadership loss drops pending requeues", |r| {
        r.dispatcher.stats().requeues_pending() == 0
    })
    .await;
    r.set.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_requeue_is_not_cancelled_by_a_change_the_subscription_filters_out() {
    let r = rig(
        DispatchOptions::default(),
        all_deltas(&["/metadata/labels"], None),
        Box::new(|d| {
            Ok(Handled {
                actions: Vec::new(),
                requeue_after: (!d.requeued).then_some(Duration::from_secs(10)),
            })
        }),
    );
    r.list(vec![cm("a", 1, "x")]);
    r.until("the add", |s| !s.is_empty()).await;
    // Status-only churn, filtered out.
    r.send(WatchEvent::Apply(cm("a", 2, "y")));
    r.until("the requeue", |s| s.iter().any(|s| s.what == "requeue"))
        .await;
    let seen = r.seen();
    assert_eq!(seen.len(), 2, "{seen:#?}");
    assert_eq!(seen[1].rv, "2", "the requeue carries the current state");
    r.set.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn retries_never_end_silently_and_a_parked_key_is_still_retried() {
    let r = rig(
        DispatchOptions {
            base_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(2),
            ..DispatchOptions::default()
        },
        all_deltas(&[], None),
        Box::new(|d| match d.dtype {
            DeltaType::Deleted => Ok(Handled::default()),
            _ => Err(CallError::Retry("not yet".into())),
        }),
    );
    r.list(vec![cm("a", 1, "x")]);
    // 100, 200, 400, 800 ms, then 1.6 s reaches the 2 s cap: parked.
    r.until("parked", |s| s.len() >= 6).await;
    r.eventually("the dead letter", |r| {
        !r.dispatcher.stats().dead_letters.lock().is_empty()
    })
    .await;
    let letters = r.dispatcher.stats().dead_letters.lock().records();
    assert_eq!(letters.len(), 1, "{letters:?}");
    assert!(letters[0].parked);
    assert!(
        r.dispatcher.is_idle(),
        "a parked key does not hold the host busy"
    );
    let before = r.seen().len();
    r.until("two more retries at the cap", |s| s.len() >= before + 2)
        .await;
    let attempts: Vec<u32> = r.seen().iter().map(|s| s.attempt).collect();
    assert!(
        attempts.windows(2).all(|w| w[1] == w[0] + 1),
        "{attempts:?}"
    );
    // The delete still arrives, and clears the dead letter.
    r.send(WatchEvent::Delete(cm("a", 3, "x")));
    r.until("the delete", |s| s.iter().any(|s| s.what == "deleted"))
        .await;
    r.eventually("the dead letter cleared", |r| {
        r.dispatcher.stats().dead_letters.lock().is_empty()
    })
    .await;
    r.set.shutdown().await;
}

/// A key parked at a 300 s cap must not hold back another key's routine
/// conflict retry: the plugin-wide retry rate is asked when a backoff
/// ends, not when a failure is recorded (which booked the parked key's
/// slot 300 s ahead and put every later retry behind it).
#[tokio::test(start_paused = true)]
async fn a_parked_key_does_not_slow_another_keys_conflict_retry() {
    // Default policy: 100 ms doubling to the 300 s cap, where "poison"
    // parks after a dozen failures.
    let r = rig(
        DispatchOptions::default(),
        all_deltas(&[], None),
        Box::new(|d| {
            let name = d.object.as_ref().unwrap().meta().name.to_string();
            if name == "poison" {
                return Err(CallError::Retry("never".into()));
            }
            Ok(Handled {
                actions: vec![apply_action(d)],
                requeue_after: None,
            })
        }),
    );
    r.list(vec![cm("poison", 1, "x")]);
    r.eventually("poison parked", |r| {
        !r.dispatcher.stats().dead_letters.lock().is_empty()
    })
    .await;
    // Now another key's action conflicts once.
    *r.sink.conflicts.lock() = 1;
    r.send(WatchEvent::Apply(cm("b", 1, "x")));
    r.until("b's first attempt", |s| s.iter().any(|s| s.name == "b"))
        .await;
    let first = tokio::time::Instant::now();
    r.until("b's retry", |s| {
        s.iter().filter(|s| s.name == "b").count() >= 2
    })
    .await;
    let waited = first.elapsed();
    eprintln!("b's conflict retry came {waited:?} after its first attempt");
    // About 0.2 s (its first backoff); under the paused clock a call on a
    // worker thread may let time jump a little. Booked behind the parked
    // key it would be about 290 s.
    assert!(
        waited < Duration::from_secs(60),
        "b's retry waited {waited:?} behind the parked key: {:#?}",
        r.seen()
    );
    r.set.shutdown().await;
}

/// A plugin that does not subscribe to deletes: when the object of a
/// parked key, or of a pending requeue, is deleted, its dead letter is
/// resolved and its timers go (they lingered: a "parked, still retried"
/// letter for an object that no longer exists made `--until-idle` fail).
#[tokio::test(start_paused = true)]
async fn a_deleted_objects_dead_letter_and_requeue_go_with_it() {
    let mut filter = all_deltas(&[], None);
    filter.deltas.retain(|d| *d != DeltaType::Deleted);
    let r = rig(
        DispatchOptions {
            max_attempts: Some(1),
            ..DispatchOptions::default()
        },
        filter,
        Box::new(|d| {
            let name = d.object.as_ref().unwrap().meta().name.to_string();
            if name == "poison" {
                return Err(CallError::Retry("never".into()));
            }
            Ok(Handled {
                actions: Vec::new(),
                requeue_after: Some(Duration::from_secs(3600)),
            })
        }),
    );
    r.list(vec![cm("poison", 1, "x"), cm("sleeper", 1, "x")]);
    r.eventually("poison parked, sleeper's requeue pending", |r| {
        !r.dispatcher.stats().dead_letters.lock().is_empty()
            && r.dispatcher.stats().requeues_pending() == 1
    })
    .await;
    r.send(WatchEvent::Delete(cm("poison", 2, "x")));
    r.send(WatchEvent::Delete(cm("sleeper", 2, "x")));
    r.eventually("the dead letter resolved, the requeue dropped", |r| {
        r.dispatcher.stats().dead_letters.lock().is_empty()
            && r.dispatcher.stats().requeues_pending() == 0
    })
    .await;
    assert!(r.dispatcher.shared.delivered.lock().is_empty());
    r.set.shutdown().await;
}
