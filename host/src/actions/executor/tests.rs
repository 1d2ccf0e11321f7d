use std::time::Duration;

use parking_lot::Mutex;

use super::*;
use crate::actions::{EventType, Target};
use crate::kind::KindInfo;
use crate::telemetry::Identity;

/// The registry a test's executor counts into (`count` reads it back).
fn telemetry() -> Telemetry {
    Telemetry::new(Identity::new(None, None, None))
}

/// A sink whose writes take 5s, recording those that complete.
#[derive(Default)]
struct SlowSink(Mutex<Vec<String>>);

impl ActionSink for SlowSink {
    fn execute<'a>(
        &'a self,
        _plugin: &'a str,
        action: &'a Action,
    ) -> BoxFuture<'a, Result<(), ActionError>> {
        Box::pin(async move {
            tokio::time::sleep(Duration::from_secs(5)).await;
            self.0.lock().push(action.to_string());
            Ok(())
        })
    }
}

fn event(reason: &str) -> Action {
    Action::Event {
        regarding: Target {
            kind: KindInfo::new("", "v1", "ConfigMap", "configmaps", true).into(),
            namespace: Some("n".into()),
            name: "c".into(),
            uid: None,
            preconditions: Default::default(),
        },
        event_type: EventType::Normal,
        reason: reason.into(),
        note: String::new(),
        reporter: "p@0".into(),
    }
}

#[tokio::test(start_paused = true)]
async fn followers_execute_nothing_and_a_lost_term_abandons_the_write_in_flight() {
    let sink = Arc::new(SlowSink::default());
    let leadership = Leadership::follower();
    let ex = Arc::new(
        Executor::new(sink.clone(), ExecutorOptions::default(), telemetry())
            .with_leadership(leadership.clone()),
    );
    assert_eq!(
        ex.execute("p", &event("follower")).await,
        Err(ActionError::NotLeader)
    );
    assert_eq!(ex.stats.fenced.load(Ordering::Relaxed), 1);

    leadership.gain();
    let ex2 = ex.clone();
    let in_flight = tokio::spawn(async move { ex2.execute("p", &event("lost")).await });
    tokio::time::sleep(Duration::from_secs(1)).await;
    // Lost and regained before the write returns: still a new term, so
    // the old term's write is abandoned.
    leadership.lose();
    leadership.gain();
    assert_eq!(in_flight.await.unwrap(), Err(ActionError::NotLeader));
    assert_eq!(ex.stats.fenced.load(Ordering::Relaxed), 2);

    assert_eq!(ex.execute("p", &event("leader")).await, Ok(()));
    let done = sink.0.lock().clone();
    assert_eq!(done.len(), 1, "{done:?}");
    assert!(done[0].contains("leader"), "{done:?}");
}

/// A sink that answers each action (by its [`Action::summary`], Event
/// reasons for Events) from a script (default: success), logs every
/// attempt, and holds Events while `hold` has no permits.
#[derive(Default)]
struct Scripted {
    answers: Mutex<std::collections::HashMap<String, Vec<Result<(), ActionError>>>>,
    log: Mutex<Vec<String>>,
    hold: Option<Arc<tokio::sync::Semaphore>>,
    /// Cancelled when an action with this name is executed.
    cancel_on: Option<(String, CancellationToken)>,
}

fn name(action: &Action) -> String {
    match action {
        Action::Event { reason, .. } => format!("event {reason}"),
        other => other.summary(),
    }
}

impl Scripted {
    fn answer(&self, action: &str, answers: Vec<Result<(), ActionError>>) {
        self.answers.lock().insert(action.to_owned(), answers);
    }

    fn log(&self) -> Vec<String> {
        self.log.lock().clone()
    }
}

impl ActionSink for Scripted {
    fn execute<'a>(
        &'a self,
        _plugin: &'a str,
        action: &'a Action,
    ) -> BoxFuture<'a, Result<(), ActionError>> {
        Box::pin(async move {
            let name = name(action);
            if let (Some(hold), true) = (&self.hold, action.is_event()) {
                hold.acquire().await.unwrap().forget();
            }
            self.log.lock().push(name.clone());
            if let Some((on, token)) = &self.cancel_on
                && *on == name
            {
                token.cancel();
            }
            let mut answers = self.answers.lock();
            match answers.get_mut(&name) {
                Some(a) if !a.is_empty() => a.remove(0),
                _ => Ok(()),
            }
        })
    }
}

fn patch(name: &str) -> Action {
    Action::Patch {
        target: Target::new(
            KindInfo::new("", "v1", "ConfigMap", "configmaps", true),
            Some("n".into()),
            name,
        ),
        patch_type: crate::actions::PatchType::Merge,
        patch: serde_json::json!({"data": {"k": "v"}}),
    }
}

fn quick() -> ExecutorOptions {
    ExecutorOptions {
        base_backoff: Duration::from_millis(100),
        max_backoff: Duration::from_secs(10),
        ..ExecutorOptions::default()
    }
}

async fn call(
    ex: &Executor,
    actions: Vec<Action>,
    fence: &CancellationToken,
) -> Result<(), ActionFailure> {
    let counters = ex.runner.telemetry.metrics().actions("p");
    ex.execute_all_counted(
        "p",
        &counters,
        &ActionRate::unlimited(),
        actions,
        fence,
        None,
    )
    .await
}

fn count(ex: &Executor, verb: &str, outcome: Outcome) -> u64 {
    ex.runner
        .telemetry
        .metrics()
        .actions("p")
        .outcome(verb, outcome)
        .get()
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_fence_refuses_the_calls_remaining_actions() {
    // Cancelled before the call: nothing runs.
    let sink = Arc::new(Scripted::default());
    let ex = Executor::new(sink.clone(), quick(), telemetry());
    let fence = CancellationToken::new();
    fence.cancel();
    let err = call(&ex, vec![patch("a"), event("e"), patch("b")], &fence)
        .await
        .unwrap_err();
    assert_eq!(
        (err.error, err.index, err.attempts),
        (ActionError::Stopping, 1, 0)
    );
    assert!(sink.log().is_empty());
    assert_eq!(ex.stats.fenced.load(Ordering::Relaxed), 3);
    assert_eq!(count(&ex, "patch", Outcome::Fenced), 2);
    assert_eq!(count(&ex, "create", Outcome::Fenced), 1);

    // Cancelled while the first action runs: it completes (it was sent),
    // the rest are refused, and the Event before them is not queued.
    let fence = CancellationToken::new();
    let sink = Arc::new(Scripted {
        cancel_on: Some(("patch configmaps n/a".into(), fence.clone())),
        ..Scripted::default()
    });
    let ex = Executor::new(sink.clone(), quick(), telemetry());
    let err = call(
        &ex,
        vec![event("e"), patch("a"), patch("b"), patch("c")],
        &fence,
    )
    .await
    .unwrap_err();
    assert_eq!((err.error, err.index), (ActionError::Stopping, 3));
    ex.events_idle().await;
    assert_eq!(sink.log(), ["patch configmaps n/a"]);
    assert_eq!(ex.stats.applied.load(Ordering::Relaxed), 1);
    // b, c and the deferred Event.
    assert_eq!(ex.stats.fenced.load(Ordering::Relaxed), 3);
    assert_eq!(ex.events_pending(), 0);

    // Cancelled during the wait between attempts: the wait is
    // abandoned, the action and the rest are refused.
    let sink = Arc::new(Scripted::default());
    sink.answer(
        "patch configmaps n/a",
        vec![Err(ActionError::Transient("reset".into()))],
    );
    let ex = Arc::new(Executor::new(sink.clone(), quick(), telemetry()));
    let fence = CancellationToken::new();
    let (ex2, fence2) = (ex.clone(), fence.clone());
    let running =
        tokio::spawn(async move { call(&ex2, vec![patch("a"), patch("b")], &fence2).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        sink.log(),
        ["patch configmaps n/a"],
        "first attempt, then a wait"
    );
    fence.cancel();
    let err = running.await.unwrap().unwrap_err();
    assert_eq!(
        (err.error, err.index, err.attempts),
        (ActionError::Stopping, 1, 1)
    );
    assert_eq!(sink.log().len(), 1, "no attempt after the fence");
    assert_eq!(ex.stats.fenced.load(Ordering::Relaxed), 2);
}

#[tokio::test(start_paused = true)]
async fn events_are_recorded_after_the_calls_other_actions_and_off_its_path() {
    let hold = Arc::new(tokio::sync::Semaphore::new(0));
    let sink = Arc::new(Scripted {
        hold: Some(hold.clone()),
        ..Scripted::default()
    });
    let activity = Arc::new(Activity::default());
    let ex = Executor::new(sink.clone(), quick(), telemetry()).with_activity(activity.clone());
    let fence = CancellationToken::new();
    // The call returns while its Events are still held by the sink.
    call(
        &ex,
        vec![event("first"), patch("a"), event("second")],
        &fence,
    )
    .await
    .unwrap();
    assert_eq!(sink.log(), ["patch configmaps n/a"]);
    assert_eq!(ex.events_pending(), 2);
    assert!(!activity.is_idle(), "queued Events are work");
    hold.add_permits(2);
    ex.events_idle().await;
    assert_eq!(
        sink.log(),
        ["patch configmaps n/a", "event first", "event second"]
    );
    assert!(activity.is_idle());
    assert_eq!(count(&ex, "create", Outcome::Applied), 2);
}

#[tokio::test(start_paused = true)]
async fn a_failed_call_queues_none_of_its_events_and_a_failed_event_fails_nothing() {
    let sink = Arc::new(Scripted::default());
    sink.answer(
        "patch configmaps n/b",
        vec![Err(ActionError::Invalid("bad".into()))],
    );
    sink.answer(
        "event refused",
        vec![Err(ActionError::Forbidden("terminating namespace".into()))],
    );
    let ex = Executor::new(sink.clone(), quick(), telemetry());
    let fence = CancellationToken::new();
    let err = call(&ex, vec![event("lost"), patch("a"), patch("b")], &fence)
        .await
        .unwrap_err();
    assert_eq!(err.index, 3);
    ex.events_idle().await;
    assert_eq!(sink.log(), ["patch configmaps n/a", "patch configmaps n/b"]);
    assert_eq!(count(&ex, "create", Outcome::Skipped), 1);

    // Its retry succeeds: the Event goes once.
    call(&ex, vec![event("lost"), patch("a"), patch("b")], &fence)
        .await
        .unwrap();
    ex.events_idle().await;
    assert_eq!(sink.log().iter().filter(|l| *l == "event lost").count(), 1);

    // A refused Event is counted as a failure, and the call stands.
    call(&ex, vec![event("refused"), patch("c")], &fence)
        .await
        .unwrap();
    ex.events_idle().await;
    assert_eq!(count(&ex, "create", Outcome::Failed), 1);
    assert!(sink.log().contains(&"patch configmaps n/c".to_owned()));
}

#[tokio::test(start_paused = true)]
async fn a_full_event_queue_drops_and_counts() {
    let hold = Arc::new(tokio::sync::Semaphore::new(0));
    let sink = Arc::new(Scripted {
        hold: Some(hold.clone()),
        ..Scripted::default()
    });
    let ex = Executor::new(
        sink.clone(),
        ExecutorOptions {
            event_queue: 2,
            ..quick()
        },
        telemetry(),
    );
    let fence = CancellationToken::new();
    let events: Vec<Action> = (0..5).map(|i| event(&format!("e{i}"))).collect();
    // Queued in one go (the worker has not taken any yet): 2 fit.
    call(&ex, events, &fence).await.unwrap();
    assert_eq!(ex.stats.events_dropped.load(Ordering::Relaxed), 3);
    assert_eq!(
        ex.runner
            .telemetry
            .metrics()
            .actions("p")
            .events_dropped
            .get(),
        3
    );
    let metrics = ex.runner.telemetry.metrics().encode().unwrap();
    assert!(
        metrics.contains("kubewasm_events_dropped_total{plugin=\"p\"} 3"),
        "{metrics}"
    );
    hold.add_permits(5);
    ex.events_idle().await;
    assert_eq!(sink.log(), ["event e0", "event e1"]);
}

#[tokio::test(start_paused = true)]
async fn shutdown_records_queued_events_within_the_drain_time_and_drops_the_rest() {
    // Each Event takes 5 s: 3 fit in a 20 s drain.
    let sink = Arc::new(SlowSink::default());
    let ex = Executor::new(
        sink.clone(),
        ExecutorOptions {
            event_drain: Duration::from_secs(20),
            ..quick()
        },
        telemetry(),
    );
    let fence = CancellationToken::new();
    call(&ex, vec![event("a"), event("b"), event("c")], &fence)
        .await
        .unwrap();
    ex.shutdown().await;
    assert_eq!(sink.0.lock().len(), 3);
    // Refused once shut down.
    call(&ex, vec![event("late")], &fence).await.unwrap();
    assert_eq!(ex.stats.events_dropped.load(Ordering::Relaxed), 1);

    // A 7 s drain: one is recorded, the one in flight is abandoned and
    // the last is dropped unsent.
    let sink = Arc::new(SlowSink::default());
    let ex = Executor::new(
        sink.clone(),
        ExecutorOptions {
            event_drain: Duration::from_secs(7),
            ..quick()
        },
        telemetry(),
    );
    call(&ex, vec![event("a"), event("b"), event("c")], &fence)
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    ex.shutdown().await;
    assert!(started.elapsed() < Duration::from_secs(8));
    assert_eq!(sink.0.lock().len(), 1);
    assert_eq!(ex.stats.events_dropped.load(Ordering::Relaxed), 2);
    assert_eq!(ex.events_pending(), 0);
}

#[tokio::test(start_paused = true)]
async fn the_servers_retry_after_is_honoured_or_handed_back() {
    let sink = Arc::new(Scripted::default());
    let throttled = |secs| {
        Err(ActionError::Throttled {
            message: "429".into(),
            retry_after: Some(Duration::from_secs(secs)),
        })
    };
    sink.answer("patch configmaps n/a", vec![throttled(3), Ok(())]);
    let ex = Executor::new(sink.clone(), quick(), telemetry());
    let started = tokio::time::Instant::now();
    ex.execute("p", &patch("a")).await.unwrap();
    assert!(
        started.elapsed() >= Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(ex.stats.retried.load(Ordering::Relaxed), 1);

    // Longer than max_backoff: not waited out here, handed back.
    sink.answer("patch configmaps n/b", vec![throttled(60), Ok(())]);
    let started = tokio::time::Instant::now();
    let err = ex.execute("p", &patch("b")).await.unwrap_err();
    assert_eq!(err.retry_after(), Some(Duration::from_secs(60)));
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(sink.log().iter().filter(|l| l.ends_with("n/b")).count(), 1);
}

#[test]
fn only_invalid_requests_are_permanent() {
    let cases = [
        (ActionError::Unauthorized("t".into()), false, false, false),
        (ActionError::Forbidden("t".into()), false, false, false),
        (ActionError::Invalid("t".into()), true, false, false),
        (ActionError::Conflict("t".into()), false, true, false),
        (ActionError::NotFound("t".into()), false, false, false),
        (
            ActionError::Throttled {
                message: "t".into(),
                retry_after: None,
            },
            false,
            false,
            true,
        ),
        (ActionError::Transient("t".into()), false, false, true),
        (
            ActionError::TimedOut(Duration::from_secs(1)),
            false,
            false,
            true,
        ),
    ];
    for (e, permanent, conflict, transient) in cases {
        assert_eq!(e.permanent(), permanent, "{e}");
        assert_eq!(e.is_conflict(), conflict, "{e}");
        assert_eq!(e.transient(), transient, "{e}");
        assert_eq!(e.retry_after(), None, "{e}");
    }
    let e = ActionError::Throttled {
        message: "m".into(),
        retry_after: Some(Duration::from_secs(2)),
    };
    assert_eq!(e.retry_after(), Some(Duration::from_secs(2)));
    assert!(e.to_string().contains("retry after 2s"), "{e}");
}

/// Log lines written while a test runs on its own thread.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn dry_run_prints_an_applys_body_as_it_would_be_sent_like_a_patchs() {
    let logs = Captured::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let sink = Arc::new(Scripted::default());
    let ex = Executor::new(
        sink.clone(),
        ExecutorOptions {
            dry_run: true,
            ..quick()
        },
        telemetry(),
    );
    let mut guarded = Target::new(
        KindInfo::new("", "v1", "ConfigMap", "configmaps", true),
        Some("n".into()),
        "a",
    );
    guarded.preconditions.resource_version = Some("7".into());
    let apply = Action::Apply {
        target: guarded,
        object: serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "n"}, "data": {"k": "applied"}}),
        force: false,
        status: false,
    };
    call(&ex, vec![apply, patch("b")], &CancellationToken::new())
        .await
        .unwrap();
    assert!(sink.log().is_empty(), "a dry run sends nothing");
    let text = String::from_utf8(logs.0.lock().clone()).unwrap();
    let line = |needle: &str| {
        text.lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no line with {needle}: {text}"))
            .to_owned()
    };
    let applied = line("apply configmaps n/a");
    assert!(applied.contains("dry run: not sending"), "{applied}");
    assert!(
        applied.contains(r#""data":{"k":"applied"}"#)
            && applied.contains(r#""resourceVersion":"7""#),
        "the body as sent, precondition included: {applied}"
    );
    let patched = line("patch configmaps n/b");
    assert!(patched.contains(r#"{"data":{"k":"v"}}"#), "{patched}");
    assert_eq!(count(&ex, "patch", Outcome::DryRun), 2);
}

/// Actions are counted in the registry the caller passed, the one
/// `/metrics` serves: both ways in (a plugin call, and one action at once).
#[tokio::test(start_paused = true)]
async fn actions_are_counted_in_the_registry_the_caller_passed() {
    let served = telemetry();
    let sink = Arc::new(Scripted::default());
    sink.answer(
        "patch configmaps n/b",
        vec![Err(ActionError::Invalid("bad".into()))],
    );
    let ex = Executor::new(sink.clone(), quick(), served.clone());
    let counters = served.metrics().actions("p");
    ex.execute_all_counted(
        "p",
        &counters,
        &ActionRate::unlimited(),
        vec![patch("a"), patch("b")],
        &CancellationToken::new(),
        None,
    )
    .await
    .unwrap_err();
    ex.execute("p", &patch("c")).await.unwrap();
    let text = served.metrics().encode().unwrap();
    for series in [
        r#"kubewasm_actions_total{plugin="p",verb="patch",outcome="applied"} 2"#,
        r#"kubewasm_actions_total{plugin="p",verb="patch",outcome="failed"} 1"#,
    ] {
        assert!(text.lines().any(|l| l == series), "{series} in {text}");
    }
}

/// Queued Events wait out a gate closed for a moment (a shard whose
/// renewal was missed and renewed again at once) instead of being refused;
/// a gate closed for longer than the pause refuses them, as before.
#[tokio::test(start_paused = true)]
async fn queued_events_wait_out_a_short_closure_of_the_gate() {
    let sink = Arc::new(Scripted::default());
    let leadership = Leadership::follower();
    leadership.gain();
    let ex = Executor::new(sink.clone(), quick(), telemetry()).with_leadership(leadership.clone());
    let fence = CancellationToken::new();
    call(&ex, vec![event("before")], &fence).await.unwrap();
    // Closed before the worker took it.
    leadership.lose();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(sink.log().is_empty(), "nothing recorded while closed");
    leadership.gain();
    ex.events_idle().await;
    assert_eq!(sink.log(), ["event before"]);
    assert_eq!(ex.stats.fenced.load(Ordering::Relaxed), 0);

    // A term change (the shards held moved) cuts a write off: it is sent
    // again in the new term.
    let hold = Arc::new(tokio::sync::Semaphore::new(0));
    let held = Arc::new(Scripted {
        hold: Some(hold.clone()),
        ..Scripted::default()
    });
    let ex2 = Executor::new(held.clone(), quick(), telemetry()).with_leadership(leadership.clone());
    call(&ex2, vec![event("cut")], &fence).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    leadership.gain();
    tokio::time::sleep(Duration::from_secs(1)).await;
    hold.add_permits(5);
    ex2.events_idle().await;
    assert_eq!(ex2.stats.fenced.load(Ordering::Relaxed), 1, "cut off once");
    assert_eq!(ex2.stats.events_dropped.load(Ordering::Relaxed), 0);
    assert_eq!(held.log().last().map(String::as_str), Some("event cut"));

    // Closed for good: refused once the pause is over.
    call(&ex, vec![event("after")], &fence).await.unwrap();
    leadership.lose();
    tokio::time::sleep(Duration::from_secs(11)).await;
    ex.events_idle().await;
    assert_eq!(sink.log(), ["event before"]);
    assert_eq!(ex.stats.fenced.load(Ordering::Relaxed), 1);
}
