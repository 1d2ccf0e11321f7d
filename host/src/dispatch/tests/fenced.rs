//! Calls that outlive the stop grace: fenced, their deletes handed over,
//! oldest first.

use super::*;

/// A rig whose plugin applies what it sees, with a stop grace of 1 s, and
/// whose calls on a delete hang until the sender is sent to (or dropped):
/// calls that outlive their version's stop grace.
fn deletes_outlive_the_grace() -> (Rig, std::sync::mpsc::Sender<()>) {
    let (release, gate) = std::sync::mpsc::channel::<()>();
    let gate = Mutex::new(gate);
    let r = rig(
        DispatchOptions {
            stop_grace: Duration::from_secs(1),
            ..DispatchOptions::default()
        },
        all_deltas(&[], None),
        Box::new(move |d| {
            if d.dtype == DeltaType::Deleted {
                let _ = gate.lock().recv();
            }
            Ok(Handled {
                actions: vec![apply_action(d)],
                requeue_after: None,
            })
        }),
    );
    (r, release)
}

/// The object is deleted and created again while the delete's call outlives
/// the stop grace: the successor must see the delete before the new add, or
/// it would take a live object for gone.
#[tokio::test(start_paused = true)]
async fn a_fenced_delete_is_handed_over_before_the_newer_deltas_of_its_object() {
    let (r, release) = deletes_outlive_the_grace();
    r.list(vec![cm("a", 1, "x"), cm("b", 1, "x")]);
    r.eventually("the adds' actions", |r| r.sink.done.lock().len() == 2)
        .await;
    r.send(WatchEvent::Delete(cm("a", 2, "x")));
    r.until("the delete's call", |s| {
        s.iter().any(|s| s.what == "deleted")
    })
    .await;
    // Created again, and another object changed, while the call hangs.
    r.send(WatchEvent::Apply(cm("a", 3, "y")));
    r.send(WatchEvent::Apply(cm("b", 4, "y")));
    r.eventually("both queued behind the hanging call", |r| {
        r.dispatcher.shared.queue.lock().pending_len() == 2
    })
    .await;
    let left = r.dispatcher.stop().await;
    let seen: Vec<(DeltaType, String, String)> = left
        .iter()
        .map(|(_, i)| {
            let o = i.delta.object.as_ref().expect("a delta with an object");
            let rv = o.to_value().expect("JSON")["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            (i.delta.dtype, o.name().to_owned(), rv)
        })
        .collect();
    let of_a: Vec<_> = seen.iter().filter(|(_, name, _)| name == "a").collect();
    assert_eq!(
        of_a,
        [
            &(DeltaType::Deleted, "a".to_owned(), "2".to_owned()),
            &(DeltaType::Added, "a".to_owned(), "3".to_owned())
        ],
        "a's deltas are handed over oldest first (all: {seen:?})"
    );
    assert_eq!(left.len(), 3, "b's update is handed over too");
    assert_eq!(r.dispatcher.stats().fenced_stops.load(Ordering::Relaxed), 1);
    release.send(()).unwrap();
    r.dispatcher.drop_items(&left);
    r.set.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_call_outliving_the_stop_grace_is_fenced_and_its_delete_handed_over() {
    let (r, release) = deletes_outlive_the_grace();
    r.list(vec![cm("a", 1, "x")]);
    r.eventually("the add's action", |r| r.sink.done.lock().len() == 1)
        .await;
    r.send(WatchEvent::Delete(cm("a", 2, "x")));
    r.until("the delete's call", |s| {
        s.iter().any(|s| s.what == "deleted")
    })
    .await;
    let left = r.dispatcher.stop().await;
    assert_eq!(left.len(), 1, "the fenced call's delete is handed over");
    assert_eq!(left[0].1.delta.dtype, DeltaType::Deleted);
    assert_eq!(r.dispatcher.stats().fenced_stops.load(Ordering::Relaxed), 1);
    // The late call returns: its action is refused, not executed.
    release.send(()).unwrap();
    r.eventually("the fenced action refused", |r| {
        r.dispatcher
            .shared
            .executor
            .stats
            .fenced
            .load(Ordering::Relaxed)
            == 1
    })
    .await;
    assert_eq!(r.sink.done.lock().len(), 1, "only the add's action ran");
    r.set.shutdown().await;
}

/// A call outlives the stop grace with other keys of its batch behind it:
/// they are abandoned with it, and when the call returns their weight is
/// settled, not put back into a queue nobody serves (the host's activity
/// count then waited for them forever, and `--until-idle` with it).
#[tokio::test(start_paused = true)]
async fn a_fenced_stop_settles_the_batch_behind_the_late_call() {
    let (release, gate) = std::sync::mpsc::channel::<()>();
    let gate = Mutex::new(gate);
    let r = rig(
        DispatchOptions {
            stop_grace: Duration::from_secs(1),
            ..DispatchOptions::default()
        },
        all_deltas(&[], None),
        Box::new(move |d| {
            if d.object.as_ref().unwrap().meta().name.as_ref() == "hang" {
                let _ = gate.lock().recv();
            }
            Ok(Handled::default())
        }),
    );
    r.list(vec![cm("hang", 1, "x"), cm("b", 2, "x"), cm("c", 3, "x")]);
    r.until("the hanging call", |s| s.iter().any(|s| s.name == "hang"))
        .await;
    let left = r.dispatcher.stop().await;
    assert_eq!(r.dispatcher.stats().fenced_stops.load(Ordering::Relaxed), 1);
    r.dispatcher.drop_items(&left);
    release.send(()).unwrap();
    r.eventually_real("the activity settled", |r| {
        r.dispatcher.shared.activity.is_idle()
    })
    .await;
    assert!(
        r.seen().iter().all(|s| s.name == "hang"),
        "nothing behind the late call ran: {:?}",
        r.seen()
    );
    r.set.shutdown().await;
}
