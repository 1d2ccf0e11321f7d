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
use crate::telemetry::{Identity, Telemetry};

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
    cm_uid(name, name, rv, data)
}

/// [`cm`] with its own uid (the API server gives a recreated object a new
/// one).
fn cm_uid(name: &str, uid: &str, rv: u32, data: &str) -> KObject {
    KObject::from_value(
        serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "n", "resourceVersion": rv.to_string(), "uid": uid},
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
    let telemetry = Telemetry::new(Identity::from_env());
    let set = Arc::new(InformerSet::new(
        Arc::new(Scripted(Mutex::new(Some(rx)))),
        activity.clone(),
        CancellationToken::new(),
        telemetry.clone(),
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
            telemetry.clone(),
        )
        .with_leadership(leadership.clone()),
    );
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

/// What a version's sink saw succeed: (version, object, delta, rv).
type Done = Arc<Mutex<Vec<(u32, String, &'static str, u32)>>>;

/// Accepts every action, failing some once with a conflict (the marks
/// whose rv the case's seed picks), and records what succeeded.
struct MarkSink {
    version: u32,
    seed: u64,
    failed_once: Mutex<std::collections::HashSet<(String, u32, &'static str)>>,
    done: Done,
}

impl ActionSink for MarkSink {
    fn execute<'a>(
        &'a self,
        _plugin: &'a str,
        action: &'a Action,
    ) -> BoxFuture<'a, Result<(), ActionError>> {
        let Action::Apply { object, .. } = action else {
            return Box::pin(async { Ok(()) });
        };
        let name = object["data"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let what: &'static str = match object["data"]["what"].as_str().unwrap_or_default() {
            "added" => "added",
            "updated" => "updated",
            "deleted" => "deleted",
            "requeue" => "requeue",
            _ => "resync",
        };
        let rv: u32 = object["data"]["rv"]
            .as_str()
            .unwrap_or("0")
            .parse()
            .unwrap_or(0);
        let r = if (u64::from(rv) ^ self.seed).is_multiple_of(4)
            && self.failed_once.lock().insert((name.clone(), rv, what))
        {
            Err(ActionError::Conflict("injected".into()))
        } else {
            self.done.lock().push((self.version, name, what, rv));
            Ok(())
        };
        Box::pin(async move { r })
    }
}

/// The plugin: marks what it saw with one apply; asks to retry some calls
/// (first attempts whose rv the seed picks) and to be requeued on others.
fn marking(seed: u64) -> Decide {
    Box::new(move |d| {
        let meta = d.object.as_ref().map(|o| o.meta());
        let rv: u32 = meta
            .map(|m| m.resource_version.parse().unwrap_or(0))
            .unwrap_or(0);
        if d.attempt == 1 && (u64::from(rv) ^ seed) % 5 == 1 {
            return Err(CallError::Retry("not yet".into()));
        }
        let mark = Action::Apply {
            target: Target {
                kind: configmaps().into(),
                namespace: Some("n".into()),
                name: "mark".into(),
                uid: None,
                preconditions: Preconditions::default(),
            },
            object: serde_json::json!({"data": {
                "name": meta.map(|m| m.name.to_string()).unwrap_or_default(),
                "what": dead::call_delta_name(d),
                "rv": rv.to_string(),
            }}),
            force: false,
            status: false,
        };
        Ok(Handled {
            actions: vec![mark],
            requeue_after: (u64::from(rv) ^ seed)
                .is_multiple_of(3)
                .then_some(Duration::from_millis(700)),
        })
    })
}

#[derive(Debug, Clone)]
enum Step {
    Change(u8),
    Swap,
    Flip,
    Wait(u16),
}

fn step() -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    prop_oneof![
        6 => (0u8..3).prop_map(Step::Change),
        1 => Just(Step::Swap),
        1 => Just(Step::Flip),
        2 => (1u16..1500).prop_map(Step::Wait),
    ]
}

/// One version: its dispatcher and its subscription.
struct Version {
    dispatcher: Dispatcher,
    handle: crate::informer::SubscriptionHandle,
}

struct World {
    set: Arc<InformerSet>,
    events: Events,
    spec: InformerSpec,
    leadership: Leadership,
    activity: Arc<Activity>,
    stats: Arc<PluginStats>,
    seed: u64,
    done: Done,
    versions: u32,
}

impl World {
    fn start(&mut self, term: u64) -> Version {
        self.versions += 1;
        let telemetry = Telemetry::new(Identity::from_env());
        let executor = Arc::new(
            Executor::new(
                Arc::new(MarkSink {
                    version: self.versions,
                    seed: self.seed,
                    failed_once: Mutex::default(),
                    done: self.done.clone(),
                }),
                ExecutorOptions {
                    max_attempts: 1,
                    ..ExecutorOptions::default()
                },
                telemetry.clone(),
            )
            .with_leadership(self.leadership.clone()),
        );
        let dispatcher = Dispatcher::with_handlers(
            DispatcherParts {
                plugin: Arc::from("p"),
                actors: Vec::new(),
                executor,
                activity: self.activity.clone(),
                stats: self.stats.clone(),
                options: DispatchOptions {
                    base_backoff: Duration::from_millis(50),
                    max_backoff: Duration::from_millis(400),
                    ..DispatchOptions::default()
                },
                leadership: self.leadership.clone(),
                telemetry: PluginTelemetry {
                    counters: telemetry.metrics().plugin("p", &["configmaps".into()]),
                    telemetry,
                },
            },
            vec![Box::new(Script {
                seen: Arc::new(Mutex::new(Vec::new())),
                decide: Arc::new(marking(self.seed)),
            })],
        );
        let (tx, rx) = mpsc::unbounded_channel();
        let handle = self.set.subscribe(self.spec.clone(), tx);
        dispatcher.add_intake(0, all_deltas(&[], None), handle.informer.clone(), rx, term);
        Version { dispatcher, handle }
    }

    /// The manager's swap: cut the old version, subscribe the new one, stop
    /// the old one and hand its unhandled deletes over.
    async fn swap(&mut self, old: Version) -> Version {
        old.dispatcher
            .cut(HashMap::from([(0, old.handle.informer.seq())]));
        let new = self.start(self.leadership.state().term);
        let cut = new.handle.cut;
        finish_calls_in_flight(&old.dispatcher).await;
        let left = old.dispatcher.stop().await;
        self.set.unsubscribe(&old.handle);
        let (keep, drop): (Vec<_>, Vec<_>) = left
            .into_iter()
            .partition(|(_, i)| i.delta.dtype == DeltaType::Deleted && i.seq <= cut);
        old.dispatcher.drop_items(&drop);
        new.dispatcher.hand_over(keep);
        new.dispatcher
            .start_when_synced(vec![new.handle.informer.clone()]);
        new
    }

    /// The manager's replay on a new term: a fresh subscription.
    fn replay(&self, v: &mut Version, term: u64) {
        let (tx, rx) = mpsc::unbounded_channel();
        let fresh = self.set.subscribe(self.spec.clone(), tx);
        v.dispatcher
            .add_intake(0, all_deltas(&[], None), fresh.informer.clone(), rx, term);
        let old = std::mem::replace(&mut v.handle, fresh);
        self.set.unsubscribe(&old);
    }
}

/// The start of [`Dispatcher::stop`] (no further delta is called), then the
/// calls in flight finish, as they do within the stop grace in real time.
/// Here time is paused, and a call runs on a worker thread the clock does
/// not wait for: left idle, the runtime would jump the 10 s grace at once
/// and fence a call that was about to finish (a fenced call's delete goes
/// to the next version at least once: `a_call_outliving_the_stop_grace_is_fenced_and_its_delete_handed_over`
/// covers that). Yielding keeps the runtime busy, so the clock stands still.
async fn finish_calls_in_flight(d: &Dispatcher) {
    d.begin_stop();
    let started = std::time::Instant::now();
    while d.shared.queue.lock().in_flight_len() > 0 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "a call in flight did not finish in 30 s"
        );
        tokio::task::yield_now().await;
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 12, ..Default::default() })]
    /// Random changes, failures, conflicts, requeues, swaps and leadership
    /// flips through real dispatchers: per key, what succeeded never goes
    /// back in time; each object ends on its last state (its delete, unless
    /// leadership changed after it: a new leader replays only what exists);
    /// a delete succeeds at most once; no key has two requeues pending.
    #[test]
    fn dispatchers_reconcile_by_key_through_swaps_and_leadership_flips(
        seed in 0u64..1000,
        steps in proptest::collection::vec(step(), 5..40),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(async move {
            let (events, rx) = mpsc::unbounded_channel();
            let activity = Arc::new(Activity::default());
            let set = Arc::new(InformerSet::new(
                Arc::new(Scripted(Mutex::new(Some(rx)))),
                activity.clone(),
                CancellationToken::new(),
                Telemetry::new(Identity::from_env()),
            ));
            let leadership = Leadership::always();
            let mut w = World {
                set,
                events,
                spec: InformerSpec { kind: configmaps(), namespace: None, label_selector: None, field_selector: None },
                leadership,
                activity,
                stats: Arc::new(PluginStats::default()),
                seed,
                done: Arc::new(Mutex::new(Vec::new())),
                versions: 0,
            };
            let mut rv = 1u32;
            let mut state: [Option<u32>; 3] = [Some(1), None, None];
            // Each key's incarnation: a recreated object gets a new uid.
            let mut incarnation = [0u32; 3];
            w.events.send(Ok(WatchEvent::Init)).unwrap();
            w.events.send(Ok(WatchEvent::InitApply(cm_uid("k0", "k0-0", 1, "x")))).unwrap();
            w.events.send(Ok(WatchEvent::InitDone)).unwrap();
            let mut v = w.start(0);
            v.dispatcher.start_when_synced(vec![v.handle.informer.clone()]);
            // When leadership last changed, in `rv` terms.
            let mut flipped_at = 0u32;
            for s in steps {
                match s {
                    Step::Change(k) => {
                        rv += 1;
                        let name = format!("k{k}");
                        let slot = &mut state[k as usize];
                        match slot {
                            Some(_) if rv.is_multiple_of(4) => {
                                let uid = format!("{name}-{}", incarnation[k as usize]);
                                w.events.send(Ok(WatchEvent::Delete(cm_uid(&name, &uid, rv, "gone")))).unwrap();
                                *slot = None;
                            }
                            _ => {
                                if slot.is_none() {
                                    incarnation[k as usize] += 1;
                                }
                                let uid = format!("{name}-{}", incarnation[k as usize]);
                                w.events.send(Ok(WatchEvent::Apply(cm_uid(&name, &uid, rv, &rv.to_string())))).unwrap();
                                *slot = Some(rv);
                            }
                        }
                    }
                    Step::Swap => v = w.swap(v).await,
                    Step::Flip => {
                        rv += 1;
                        flipped_at = rv;
                        w.leadership.lose();
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        let term = w.leadership.gain();
                        w.replay(&mut v, term);
                    }
                    Step::Wait(ms) => tokio::time::sleep(Duration::from_millis(u64::from(ms))).await,
                }
                assert!(w.stats.requeues_pending() <= 3, "requeues multiplied");
            }
            // Quiescence: every object's last state, or its delete, succeeded.
            let done = w.done.clone();
            let settled = |final_: &[Option<u32>; 3]| {
                let done = done.lock();
                (0..3).all(|k| {
                    let name = format!("k{k}");
                    let last = done.iter().rev().find(|d| d.1 == name);
                    match (final_[k], last) {
                        (Some(rv), Some(d)) => d.3 == rv && d.2 != "deleted",
                        (Some(_), None) => false,
                        (None, Some(d)) => d.2 == "deleted" || d.3 < flipped_at,
                        (None, None) => true,
                    }
                })
            };
            for _ in 0..20_000 {
                if settled(&state) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let done = w.done.lock().clone();
            assert_eq!(w.stats.fenced_stops.load(std::sync::atomic::Ordering::Relaxed), 0, "a swap was fenced: the properties below are those of swaps whose calls finish");
            assert!(settled(&state), "not every object ended on its last state: {state:?}\n{done:#?}");
            for k in 0..3 {
                let name = format!("k{k}");
                let mine: Vec<_> = done.iter().filter(|d| d.1 == name).collect();
                assert!(mine.windows(2).all(|p| p[1].3 >= p[0].3), "{name} went back in time: {mine:#?}");
                let mut deletes: Vec<u32> = mine.iter().filter(|d| d.2 == "deleted").map(|d| d.3).collect();
                let n = deletes.len();
                deletes.dedup();
                assert_eq!(deletes.len(), n, "{name}: a delete succeeded twice: {mine:#?}");
            }
            v.dispatcher.stop().await;
            w.set.shutdown().await;
        });
    }
}

/// The object is deleted and created again while the delete's call outlives
/// the stop grace: the successor must see the delete before the new add, or
/// it would take a live object for gone.
#[tokio::test(start_paused = true)]
async fn a_fenced_delete_is_handed_over_before_the_newer_deltas_of_its_object() {
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
                // A call that outlives its version's stop grace.
                let _ = gate.lock().recv();
            }
            Ok(Handled {
                actions: vec![apply_action(d)],
                requeue_after: None,
            })
        }),
    );
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
