//! The dispatcher against a scripted source, a scripted handler and a
//! scripted sink, under tokio's paused clock.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::actions::executor::{ActionError, ActionSink, ExecutorOptions};
use crate::actions::{Action, Preconditions, Target};
use crate::informer::{InformerSet, Source, SourceError, WatchEvent};
use crate::kind::KindInfo;
use crate::object::StripOptions;
use crate::runtime::{CallError, Handled, LastFailure};
use crate::telemetry::Telemetry;

type Events = mpsc::UnboundedSender<Result<WatchEvent, SourceError>>;

/// Replays what the test sends, then stays open.
struct Scripted(Mutex<Option<mpsc::UnboundedReceiver<Result<WatchEvent, SourceError>>>>);

impl Source for Scripted {
    fn watch(&self, _spec: &InformerSpec) -> BoxStream<'static, Result<WatchEvent, SourceError>> {
        let Some(mut rx) = self.0.lock().take() else {
            return Box::pin(futures::stream::pending());
        };
        Box::pin(futures::stream::poll_fn(move |cx| rx.poll_recv(cx)))
    }
}

fn configmaps() -> KindInfo {
    KindInfo::new("", "v1", "ConfigMap", "configmaps", true)
}

fn cm(name: &str, rv: u32, data: &str) -> KObject {
    KObject::from_value(
        serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "n", "resourceVersion": rv.to_string(), "uid": name},
            "data": {"v": data}}),
        StripOptions::default(),
    )
    .unwrap()
}

/// What the handler saw of one call.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    what: &'static str,
    name: String,
    rv: String,
    attempt: u32,
    failure: Option<&'static str>,
}

type Decide = Box<dyn Fn(&CallDelta) -> Result<Handled, CallError> + Send + Sync>;

struct Script {
    seen: Arc<Mutex<Vec<Seen>>>,
    decide: Arc<Decide>,
}

impl Handler for Script {
    fn handle(&mut self, delta: &CallDelta) -> CallOutcome {
        let meta = delta.object.as_ref().map(|o| o.meta());
        self.seen.lock().push(Seen {
            what: dead::call_delta_name(delta),
            name: meta.map(|m| m.name.to_string()).unwrap_or_default(),
            rv: meta
                .map(|m| m.resource_version.to_string())
                .unwrap_or_default(),
            attempt: delta.attempt,
            failure: delta.last_failure.as_ref().map(|f| match f {
                LastFailure::Retry(_) => "retry",
                LastFailure::Trapped(_) => "trapped",
                LastFailure::Conflict(_) => "conflict",
                LastFailure::ActionFailed(_) => "action",
            }),
        });
        ((self.decide)(delta), Duration::from_micros(1))
    }
}

/// Fails the first `conflicts` actions with a conflict, then accepts.
#[derive(Default)]
struct Sink {
    conflicts: Mutex<u32>,
    done: Mutex<Vec<String>>,
}

impl ActionSink for Sink {
    fn execute<'a>(
        &'a self,
        _plugin: &'a str,
        action: &'a Action,
    ) -> BoxFuture<'a, Result<(), ActionError>> {
        let mut c = self.conflicts.lock();
        let r = if *c > 0 {
            *c -= 1;
            Err(ActionError::Conflict("the object has been modified".into()))
        } else {
            self.done.lock().push(action.to_string());
            Ok(())
        };
        Box::pin(async move { r })
    }
}

struct Rig {
    dispatcher: Dispatcher,
    events: Events,
    seen: Arc<Mutex<Vec<Seen>>>,
    sink: Arc<Sink>,
    leadership: Leadership,
    set: Arc<InformerSet>,
}

fn rig(options: DispatchOptions, filter: SubscriptionFilter, decide: Decide) -> Rig {
    let (events, rx) = mpsc::unbounded_channel();
    let activity = Arc::new(Activity::default());
    let set = Arc::new(InformerSet::new(
        Arc::new(Scripted(Mutex::new(Some(rx)))),
        activity.clone(),
        CancellationToken::new(),
    ));
    let (tx, deltas) = mpsc::unbounded_channel();
    let spec = InformerSpec {
        kind: configmaps(),
        namespace: None,
        label_selector: None,
        field_selector: None,
    };
    let handle = set.subscribe(spec, tx);
    let sink = Arc::new(Sink::default());
    let leadership = Leadership::always();
    let executor = Arc::new(
        Executor::new(
            sink.clone(),
            ExecutorOptions {
                max_attempts: 1,
                ..ExecutorOptions::default()
            },
        )
        .with_leadership(leadership.clone()),
    );
    let telemetry = Telemetry::default();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let dispatcher = Dispatcher::with_handlers(
        DispatcherParts {
            plugin: Arc::from("p"),
            actors: Vec::new(),
            executor,
            activity,
            stats: Arc::new(PluginStats::default()),
            options,
            leadership: leadership.clone(),
            telemetry: PluginTelemetry {
                counters: telemetry.metrics().plugin("p", &["configmaps".into()]),
                telemetry,
            },
        },
        vec![Box::new(Script {
            seen: seen.clone(),
            decide: Arc::new(decide),
        })],
    );
    dispatcher.add_intake(0, filter, handle.informer.clone(), deltas, 0);
    dispatcher.start_when_synced(vec![handle.informer.clone()]);
    Rig {
        dispatcher,
        events,
        seen,
        sink,
        leadership,
        set,
    }
}

fn all_deltas(fields: &[&str], resync: Option<Duration>) -> SubscriptionFilter {
    SubscriptionFilter {
        index: 0,
        kind: configmaps().gvk,
        deltas: vec![
            DeltaType::Added,
            DeltaType::Updated,
            DeltaType::Deleted,
            DeltaType::Resync,
        ],
        fields: fields.iter().map(|f| (*f).to_owned()).collect(),
        resync,
    }
}

fn apply_action(obj: &CallDelta) -> Action {
    let meta = obj.object.as_ref().unwrap().meta();
    Action::Apply {
        target: Target {
            kind: configmaps().into(),
            namespace: Some("n".into()),
            name: "out".into(),
            uid: None,
            preconditions: Preconditions {
                uid: None,
                resource_version: Some(meta.resource_version.to_string()),
            },
        },
        object: serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "out", "namespace": "n"}}),
        force: false,
        status: false,
    }
}

impl Rig {
    fn send(&self, e: WatchEvent) {
        self.events.send(Ok(e)).unwrap();
    }

    fn list(&self, objs: Vec<KObject>) {
        self.send(WatchEvent::Init);
        for o in objs {
            self.send(WatchEvent::InitApply(o));
        }
        self.send(WatchEvent::InitDone);
    }

    /// Waits (in virtual time, 10 ms steps) until `cond` holds of what the
    /// handler saw.
    async fn until(&self, what: &str, cond: impl Fn(&[Seen]) -> bool) {
        for _ in 0..100_000 {
            if cond(&self.seen.lock()) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("never: {what}; seen {:#?}", self.seen.lock());
    }

    /// Waits (in virtual time) until `cond` holds.
    async fn eventually(&self, what: &str, cond: impl Fn(&Self) -> bool) {
        for _ in 0..100_000 {
            if cond(self) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("never: {what}; seen {:#?}", self.seen.lock());
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().clone()
    }
}

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
