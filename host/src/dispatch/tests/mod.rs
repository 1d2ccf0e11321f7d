//! The dispatcher against a scripted source, a scripted handler and a
//! scripted sink, under tokio's paused clock: `retry` retries and requeues
//! by key, `swap` the property test of versions handing over to each other,
//! `fenced` calls that outlive the stop grace.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::actions::executor::{ActionError, ActionSink, ExecutorOptions};
use crate::actions::{Action, Preconditions, Target};
use crate::informer::scripted::Scripted;
use crate::informer::{InformerSet, SourceError, WatchEvent};
use crate::kind::KindInfo;
use crate::object::StripOptions;
use crate::runtime::{CallError, Handled, LastFailure};
use crate::telemetry::{Identity, Telemetry};

mod fenced;
mod model;
mod once;
mod retry;
mod shards;
mod swap;

type Events = mpsc::UnboundedSender<Result<WatchEvent, SourceError>>;

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

/// The ConfigMaps informer of the rigs.
fn spec() -> crate::informer::InformerSpec {
    crate::informer::InformerSpec {
        kind: configmaps(),
        namespace: None,
        label_selector: None,
        field_selector: None,
    }
}

/// What the handler saw of one call.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    what: &'static str,
    name: String,
    rv: String,
    /// An update's old state's resourceVersion.
    old: String,
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
            old: delta
                .old
                .as_ref()
                .map(|o| o.meta().resource_version.to_string())
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
    rig_with(options, filter, decide, 1)
}

/// [`rig`] with `instances` handlers (the plugin's concurrency).
fn rig_with(
    options: DispatchOptions,
    filter: SubscriptionFilter,
    decide: Decide,
    instances: usize,
) -> Rig {
    rig_led(options, filter, decide, instances, Leadership::always())
}

/// [`rig_with`] gated by `leadership`, its intake in the current term.
fn rig_led(
    options: DispatchOptions,
    filter: SubscriptionFilter,
    decide: Decide,
    instances: usize,
    leadership: Leadership,
) -> Rig {
    let (events, rx) = mpsc::unbounded_channel();
    let activity = Arc::new(Activity::default());
    let telemetry = Telemetry::new(Identity::from_env());
    let set = Arc::new(InformerSet::new(
        Arc::new(Scripted::new(Some(rx))),
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
        {
            let decide = Arc::new(decide);
            (0..instances)
                .map(|_| {
                    Box::new(Script {
                        seen: seen.clone(),
                        decide: decide.clone(),
                    }) as Box<dyn Handler + Send>
                })
                .collect()
        },
    );
    let term = leadership.state().term;
    dispatcher.add_intake(0, filter, handle.informer.clone(), deltas, term, handle.cut);
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

    /// [`eventually`](Self::eventually) bounded by real time (30 s), not
    /// by virtual steps: for a condition that waits on calls running on
    /// worker threads, which the paused clock does not wait for.
    async fn eventually_real(&self, what: &str, cond: impl Fn(&Self) -> bool) {
        let started = std::time::Instant::now();
        while !cond(self) {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "never: {what}; seen {:#?}",
                self.seen.lock()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().clone()
    }

    /// A new term's replay, as the manager makes it: subscribed again,
    /// the intake of term `term` added.
    fn replay(&self, term: u64) {
        let (tx, rx) = mpsc::unbounded_channel();
        let fresh = self.set.subscribe(spec(), tx);
        self.dispatcher.add_intake(
            0,
            all_deltas(&[], None),
            fresh.informer.clone(),
            rx,
            term,
            fresh.cut,
        );
    }
}
