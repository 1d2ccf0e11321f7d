use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::activity::Activity;
use crate::kind::KindInfo;
use crate::object::KObject;
use crate::telemetry::{Identity, Telemetry};

use super::scripted::{Script, Scripted};
use super::*;
use crate::object::StripOptions;

fn all_configmaps() -> InformerSpec {
    InformerSpec {
        kind: KindInfo::new("", "v1", "ConfigMap", "configmaps", true),
        namespace: None,
        label_selector: None,
        field_selector: None,
    }
}

fn cm(name: &str) -> KObject {
    cm_at(name, "1", name)
}

fn cm_at(name: &str, rv: &str, uid: &str) -> KObject {
    KObject::from_value(
        serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "default", "resourceVersion": rv, "uid": uid}}),
        StripOptions::default(),
    )
    .unwrap()
}

/// Informers over a script (`None`: a source that never answers), counting
/// into `telemetry`.
fn scripted_set(script: Option<Script>, telemetry: Telemetry) -> InformerSet {
    InformerSet::new(
        Arc::new(Scripted::new(script)),
        Arc::new(Activity::default()),
        CancellationToken::new(),
        telemetry,
    )
}

/// The sending end of a scripted source.
type Events = mpsc::UnboundedSender<Result<WatchEvent, SourceError>>;

/// An informer on a scripted source, its subscriber's deltas, and the
/// script's sender.
fn scripted() -> (
    InformerSet,
    SubscriptionHandle,
    mpsc::UnboundedReceiver<Delta>,
    Events,
) {
    scripted_in(Telemetry::new(Identity::from_env()))
}

/// [`scripted`], counting into `telemetry`.
fn scripted_in(
    telemetry: Telemetry,
) -> (
    InformerSet,
    SubscriptionHandle,
    mpsc::UnboundedReceiver<Delta>,
    Events,
) {
    let (events, rx) = mpsc::unbounded_channel();
    let set = scripted_set(Some(rx), telemetry);
    let (tx, deltas) = mpsc::unbounded_channel();
    let handle = set.subscribe(all_configmaps(), tx);
    (set, handle, deltas, events)
}

/// `Added a@1 uid=a initial #1`: what a test compares.
fn describe(d: &Delta) -> String {
    let mut s = format!("{:?}", d.dtype);
    if let Some(o) = &d.object {
        let m = o.meta();
        s = format!("{s} {}@{} uid={}", m.name, m.resource_version, m.uid);
    }
    if d.initial {
        s.push_str(" initial");
    }
    if d.final_state_unknown {
        s.push_str(" unknown");
    }
    format!("{s} #{}", d.seq)
}

async fn take(deltas: &mut mpsc::UnboundedReceiver<Delta>, n: usize) -> Vec<String> {
    let mut out = Vec::new();
    while out.len() < n {
        let d = tokio::time::timeout(std::time::Duration::from_secs(10), deltas.recv())
            .await
            .unwrap_or_else(|_| panic!("only {out:?} within 10s"))
            .unwrap();
        out.push(describe(&d));
    }
    out
}

#[tokio::test]
async fn a_relist_with_a_new_uid_under_a_name_is_a_delete_then_an_add() {
    let (set, handle, mut deltas, events) = scripted();
    handle.informer.store().add_index("uid", "/metadata/uid");
    for e in [
        WatchEvent::Init,
        WatchEvent::InitApply(cm_at("a", "1", "uid-1")),
        WatchEvent::InitDone,
        WatchEvent::Init,
        WatchEvent::InitApply(cm_at("a", "5", "uid-2")),
        WatchEvent::InitDone,
    ] {
        events.send(Ok(e)).unwrap();
    }
    assert_eq!(
        take(&mut deltas, 4).await,
        [
            "Added a@1 uid=uid-1 initial #1",
            "Synced #2",
            "Deleted a@1 uid=uid-1 unknown #3",
            "Added a@5 uid=uid-2 #4",
        ]
    );
    let snap = handle.informer.store().snapshot();
    assert_eq!(snap.len(), 1);
    let key = crate::object::ObjectKey::new(Some("default"), "a");
    assert_eq!(&*snap.get(&key).unwrap().meta().uid, "uid-2");
    assert!(snap.by_index("uid", "uid-1").unwrap().is_empty());
    assert_eq!(snap.by_index("uid", "uid-2").unwrap().len(), 1);
    set.unsubscribe(&handle);
    set.shutdown().await;
}

#[tokio::test]
async fn a_watched_object_with_a_new_uid_is_a_delete_then_an_add() {
    let (set, handle, mut deltas, events) = scripted();
    handle.informer.store().add_index("uid", "/metadata/uid");
    for e in [
        WatchEvent::Init,
        WatchEvent::InitApply(cm_at("a", "1", "uid-1")),
        WatchEvent::InitDone,
        WatchEvent::Apply(cm_at("a", "7", "uid-2")),
        // The same object again: an update, as ever.
        WatchEvent::Apply(cm_at("a", "8", "uid-2")),
    ] {
        events.send(Ok(e)).unwrap();
    }
    assert_eq!(
        take(&mut deltas, 5).await,
        [
            "Added a@1 uid=uid-1 initial #1",
            "Synced #2",
            "Deleted a@1 uid=uid-1 unknown #3",
            "Added a@7 uid=uid-2 #4",
            "Updated a@8 uid=uid-2 #5",
        ]
    );
    let snap = handle.informer.store().snapshot();
    assert!(snap.by_index("uid", "uid-1").unwrap().is_empty());
    assert_eq!(snap.by_index("uid", "uid-2").unwrap().len(), 1);
    set.unsubscribe(&handle);
    set.shutdown().await;
}

/// Subscribing and unsubscribing one spec from many threads at once:
/// every subscriber lands on the informer the set holds, running, and
/// no informer is left running without subscribers.
#[test]
fn concurrent_subscribes_and_unsubscribes_never_leave_a_subscriber_on_a_stopped_informer() {
    const THREADS: usize = 3;
    const ROUNDS: usize = 60_000;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let set = Arc::new(scripted_set(None, Telemetry::new(Identity::from_env())));
    let barrier = Arc::new(std::sync::Barrier::new(THREADS));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (set, barrier, handle) = (set.clone(), barrier.clone(), rt.handle().clone());
            std::thread::spawn(move || {
                let _rt = handle.enter();
                let (tx, _rx) = mpsc::unbounded_channel();
                let name: Arc<str> = Arc::from(format!("p{t}"));
                let mut seen: HashMap<usize, Arc<Informer>> = HashMap::new();
                barrier.wait();
                for round in 0..ROUNDS {
                    let h = set.subscribe_as(all_configmaps(), tx.clone(), name.clone());
                    let held = set.informers.lock().get(&all_configmaps()).cloned();
                    assert!(
                        held.is_some_and(|i| Arc::ptr_eq(&i, &h.informer)),
                        "round {round}: subscribed to an informer the set no longer holds"
                    );
                    assert!(
                        !h.informer.cancel.is_cancelled(),
                        "round {round}: subscribed to a stopped informer"
                    );
                    seen.insert(Arc::as_ptr(&h.informer) as usize, h.informer.clone());
                    set.unsubscribe(&h);
                }
                seen
            })
        })
        .collect();
    let mut seen = HashMap::new();
    for t in threads {
        seen.extend(t.join().unwrap());
    }
    assert!(set.informers().is_empty(), "everyone left");
    for informer in seen.values() {
        assert!(informer.fanout.lock().subscribers.is_empty());
        assert!(
            informer.cancel.is_cancelled(),
            "an informer without subscribers is still running"
        );
    }
    rt.block_on(set.shutdown());
}

#[tokio::test]
async fn a_stall_is_counted_once_however_often_the_source_repeats_it() {
    let (events, rx) = mpsc::unbounded_channel();
    let telemetry = Telemetry::new(Identity::from_env());
    let set = scripted_set(Some(rx), telemetry.clone());
    let (tx, mut deltas) = mpsc::unbounded_channel();
    let handle = set.subscribe(all_configmaps(), tx);
    let stall = |s| SourceError::Stalled {
        silent: std::time::Duration::from_secs(s),
        cause: "probe list unanswered after 10s".into(),
    };
    events.send(Ok(WatchEvent::Init)).unwrap();
    events.send(Ok(WatchEvent::InitDone)).unwrap();
    // One stall reported twice, a recovery, then a second stall.
    events.send(Err(stall(30))).unwrap();
    events.send(Err(stall(70))).unwrap();
    events.send(Ok(WatchEvent::Progress)).unwrap();
    events.send(Err(stall(30))).unwrap();
    events.send(Ok(WatchEvent::Apply(cm("after")))).unwrap();
    // The Apply comes after every stall report: once it is a delta,
    // all of them were seen.
    loop {
        let d = tokio::time::timeout(std::time::Duration::from_secs(10), deltas.recv())
            .await
            .unwrap()
            .unwrap();
        if d.dtype == DeltaType::Added {
            break;
        }
    }
    let text = telemetry.metrics().encode().unwrap();
    assert!(
        text.contains("kubewasm_informer_watch_stalls_total{kind=\"configmaps\"} 2\n"),
        "{text}"
    );
    set.unsubscribe(&handle);
}

#[tokio::test]
async fn a_delete_of_an_object_never_held_is_not_emitted() {
    let (events, rx) = mpsc::unbounded_channel();
    let set = scripted_set(Some(rx), Telemetry::new(Identity::from_env()));
    let (tx, mut deltas) = mpsc::unbounded_channel();
    let handle = set.subscribe(all_configmaps(), tx);
    for e in [
        WatchEvent::Init,
        WatchEvent::InitApply(cm("held")),
        WatchEvent::InitDone,
        WatchEvent::Delete(cm("never-held")),
        WatchEvent::Delete(cm("held")),
    ] {
        events.send(Ok(e)).unwrap();
    }
    let mut seen = Vec::new();
    while seen.len() < 3 {
        let d = tokio::time::timeout(std::time::Duration::from_secs(10), deltas.recv())
            .await
            .unwrap()
            .unwrap();
        let name = d.object.as_ref().map(|o| o.meta().name.to_string());
        seen.push((d.dtype, name));
    }
    assert_eq!(
        seen,
        [
            (DeltaType::Added, Some("held".to_owned())),
            (DeltaType::Synced, None),
            (DeltaType::Deleted, Some("held".to_owned())),
        ]
    );
    assert!(deltas.try_recv().is_err(), "nothing else was emitted");
    set.unsubscribe(&handle);
    set.shutdown().await;
}

#[tokio::test]
async fn a_forbidden_informer_names_its_plugins_until_data_flows() {
    let (events, rx) = mpsc::unbounded_channel();
    let set = scripted_set(Some(rx), Telemetry::new(Identity::from_env()));
    let spec = InformerSpec {
        kind: KindInfo::new("", "v1", "ConfigMap", "configmaps", true),
        namespace: None,
        label_selector: None,
        field_selector: None,
    };
    let (tx, mut deltas) = mpsc::unbounded_channel();
    let a = set.subscribe_as(spec.clone(), tx.clone(), Arc::from("beta"));
    let b = set.subscribe_as(spec, tx, Arc::from("alpha"));
    let informer = a.informer.clone();
    assert_eq!(informer.subscriber_names(), ["alpha", "beta"]);
    let wait = |want: bool| {
        let informer = informer.clone();
        async move {
            tokio::time::timeout(std::time::Duration::from_secs(10), async {
                while informer.forbidden().is_some() != want {
                    tokio::task::yield_now().await;
                }
            })
            .await
            .unwrap();
        }
    };
    events.send(Ok(WatchEvent::Init)).unwrap();
    events
        .send(Err(SourceError::Forbidden {
            verb: "list",
            message: "no".into(),
        }))
        .unwrap();
    wait(true).await;
    assert_eq!(informer.forbidden().unwrap().verb, "list");
    // A retry's Init alone does not clear it; the list does.
    events.send(Ok(WatchEvent::Init)).unwrap();
    events.send(Ok(WatchEvent::InitDone)).unwrap();
    wait(false).await;
    assert_eq!(deltas.recv().await.unwrap().dtype, DeltaType::Synced);
    set.unsubscribe(&a);
    assert_eq!(informer.subscriber_names(), ["alpha"]);
    set.unsubscribe(&b);
    set.shutdown().await;
}

/// An object of `event` that could not be decoded, named `default/NAME`
/// (`None`: its name was unreadable too).
fn undecodable(event: UndecodableEvent, name: Option<&str>) -> Result<WatchEvent, SourceError> {
    Ok(WatchEvent::Undecodable(Undecodable {
        event,
        key: name.map(|n| crate::object::ObjectKey::new(Some("default"), n)),
        error: Arc::new(crate::object::ObjectError::NotAnObject("metadata.labels")),
    }))
}

/// `name@resourceVersion` of every cached object, in key order.
fn cached(handle: &SubscriptionHandle) -> Vec<String> {
    handle
        .informer
        .store()
        .snapshot()
        .iter()
        .map(|o| format!("{}@{}", o.meta().name, o.meta().resource_version))
        .collect()
}

/// The value of the configmaps series of `family`.
fn series(telemetry: &Telemetry, family: &str) -> String {
    let text = telemetry.metrics().encode().unwrap();
    let prefix = format!("{family}{{kind=\"configmaps\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {prefix} in {text}"))
        .to_owned()
}

/// What the informer lists as undecodable: `object: error`.
fn listed_undecodable(handle: &SubscriptionHandle) -> Vec<String> {
    handle
        .informer
        .undecodable()
        .iter()
        .map(|u| {
            let name = u.object.as_deref().unwrap_or("(name unreadable)");
            format!("{name}: {}", u.error)
        })
        .collect()
}

#[tokio::test]
async fn a_relist_with_an_undecodable_item_applies_the_rest_and_keeps_its_cached_state() {
    let telemetry = Telemetry::new(Identity::from_env());
    let (set, handle, mut deltas, events) = scripted_in(telemetry.clone());
    for e in [
        WatchEvent::Init,
        WatchEvent::InitApply(cm("a")),
        WatchEvent::InitApply(cm("b")),
        WatchEvent::InitDone,
    ] {
        events.send(Ok(e)).unwrap();
    }
    assert_eq!(
        take(&mut deltas, 3).await,
        [
            "Added a@1 uid=a initial #1",
            "Added b@1 uid=b initial #2",
            "Synced #3"
        ]
    );
    // A relist whose second item cannot be decoded: b is alive, only
    // unreadable, so the list must not read as its deletion.
    events.send(Ok(WatchEvent::Init)).unwrap();
    events
        .send(Ok(WatchEvent::InitApply(cm_at("a", "2", "a"))))
        .unwrap();
    events
        .send(undecodable(UndecodableEvent::InitApply, Some("b")))
        .unwrap();
    events
        .send(Ok(WatchEvent::InitApply(cm_at("c", "2", "c"))))
        .unwrap();
    events.send(Ok(WatchEvent::InitDone)).unwrap();
    assert_eq!(
        take(&mut deltas, 2).await,
        ["Updated a@2 uid=a #4", "Added c@2 uid=c #5"]
    );
    // The list's deltas are emitted together: a delete of b would be here.
    assert!(deltas.try_recv().is_err(), "nothing else was emitted");
    assert_eq!(cached(&handle), ["a@2", "b@1", "c@2"]);
    assert_eq!(
        listed_undecodable(&handle),
        ["default/b: object's metadata.labels is not a JSON object"]
    );
    assert_eq!(
        series(&telemetry, "kubewasm_informer_undecodable_objects"),
        "1"
    );
    assert_eq!(
        series(&telemetry, "kubewasm_informer_decode_failures_total"),
        "1"
    );
    assert_eq!(handle.informer.watch_restarts(), 0, "the watch went on");
    // b decodes again: an update from its last decoded state, and it is
    // no longer counted.
    events
        .send(Ok(WatchEvent::Apply(cm_at("b", "3", "b"))))
        .unwrap();
    assert_eq!(take(&mut deltas, 1).await, ["Updated b@3 uid=b #6"]);
    assert!(listed_undecodable(&handle).is_empty());
    assert_eq!(
        series(&telemetry, "kubewasm_informer_undecodable_objects"),
        "0"
    );
    set.unsubscribe(&handle);
    set.shutdown().await;
}

#[tokio::test]
async fn a_first_list_with_an_undecodable_item_syncs_without_it() {
    let telemetry = Telemetry::new(Identity::from_env());
    let (set, handle, mut deltas, events) = scripted_in(telemetry.clone());
    events.send(Ok(WatchEvent::Init)).unwrap();
    events
        .send(undecodable(UndecodableEvent::InitApply, Some("bad")))
        .unwrap();
    events.send(Ok(WatchEvent::InitApply(cm("a")))).unwrap();
    events.send(Ok(WatchEvent::InitDone)).unwrap();
    assert_eq!(
        take(&mut deltas, 2).await,
        ["Added a@1 uid=a initial #1", "Synced #2"]
    );
    assert!(handle.informer.has_synced());
    assert_eq!(cached(&handle), ["a@1"]);
    assert_eq!(
        listed_undecodable(&handle),
        ["default/bad: object's metadata.labels is not a JSON object"]
    );
    assert_eq!(
        series(&telemetry, "kubewasm_informer_undecodable_objects"),
        "1"
    );
    // A stopped informer takes its objects out of the gauge.
    set.unsubscribe(&handle);
    set.shutdown().await;
    assert_eq!(
        series(&telemetry, "kubewasm_informer_undecodable_objects"),
        "0"
    );
}

#[tokio::test]
async fn an_undecodable_delete_removes_the_object_by_its_key() {
    let telemetry = Telemetry::new(Identity::from_env());
    let (set, handle, mut deltas, events) = scripted_in(telemetry.clone());
    for e in [
        WatchEvent::Init,
        WatchEvent::InitApply(cm("a")),
        WatchEvent::InitApply(cm("b")),
        WatchEvent::InitDone,
    ] {
        events.send(Ok(e)).unwrap();
    }
    take(&mut deltas, 3).await;
    events
        .send(undecodable(UndecodableEvent::Delete, Some("b")))
        .unwrap();
    // An object never held: nothing to tell anyone.
    events
        .send(undecodable(UndecodableEvent::Delete, Some("never-held")))
        .unwrap();
    // A plain delete (watched, so not flagged) with b's last decoded state.
    assert_eq!(take(&mut deltas, 1).await, ["Deleted b@1 uid=b #4"]);
    // a stops decoding, then is deleted: it leaves the gauge with the cache.
    events
        .send(undecodable(UndecodableEvent::Apply, Some("a")))
        .unwrap();
    events
        .send(Ok(WatchEvent::Apply(cm_at("z", "5", "z"))))
        .unwrap();
    assert_eq!(take(&mut deltas, 1).await, ["Added z@5 uid=z #5"]);
    assert_eq!(
        series(&telemetry, "kubewasm_informer_undecodable_objects"),
        "1"
    );
    events
        .send(undecodable(UndecodableEvent::Delete, Some("a")))
        .unwrap();
    assert_eq!(take(&mut deltas, 1).await, ["Deleted a@1 uid=a #6"]);
    assert!(deltas.try_recv().is_err(), "nothing else was emitted");
    assert_eq!(cached(&handle), ["z@5"]);
    assert!(listed_undecodable(&handle).is_empty());
    assert_eq!(
        series(&telemetry, "kubewasm_informer_undecodable_objects"),
        "0"
    );
    assert_eq!(
        series(&telemetry, "kubewasm_informer_decode_failures_total"),
        "4"
    );
    set.unsubscribe(&handle);
    set.shutdown().await;
}

#[tokio::test]
async fn an_undecodable_update_keeps_the_cached_state_until_the_object_decodes() {
    let (set, handle, mut deltas, events) = scripted();
    for e in [
        WatchEvent::Init,
        WatchEvent::InitApply(cm("a")),
        WatchEvent::InitDone,
    ] {
        events.send(Ok(e)).unwrap();
    }
    take(&mut deltas, 2).await;
    events
        .send(undecodable(UndecodableEvent::Apply, Some("a")))
        .unwrap();
    // Its name unreadable too: skipped, counted, listed by nothing.
    events
        .send(undecodable(UndecodableEvent::Apply, None))
        .unwrap();
    events
        .send(Ok(WatchEvent::Apply(cm_at("z", "5", "z"))))
        .unwrap();
    assert_eq!(take(&mut deltas, 1).await, ["Added z@5 uid=z #3"]);
    assert_eq!(cached(&handle), ["a@1", "z@5"]);
    assert_eq!(
        listed_undecodable(&handle),
        ["default/a: object's metadata.labels is not a JSON object"]
    );
    events
        .send(Ok(WatchEvent::Apply(cm_at("a", "6", "a"))))
        .unwrap();
    assert_eq!(take(&mut deltas, 1).await, ["Updated a@6 uid=a #4"]);
    assert!(listed_undecodable(&handle).is_empty());
    set.unsubscribe(&handle);
    set.shutdown().await;
}

/// An item whose name is unreadable could be any cached object: that list
/// deletes nothing, and the next complete one does what it missed.
#[tokio::test]
async fn a_list_item_without_a_readable_name_keeps_every_cached_object() {
    let telemetry = Telemetry::new(Identity::from_env());
    let (set, handle, mut deltas, events) = scripted_in(telemetry.clone());
    for e in [
        WatchEvent::Init,
        WatchEvent::InitApply(cm("a")),
        WatchEvent::InitApply(cm("b")),
        WatchEvent::InitDone,
    ] {
        events.send(Ok(e)).unwrap();
    }
    take(&mut deltas, 3).await;
    events.send(Ok(WatchEvent::Init)).unwrap();
    events
        .send(Ok(WatchEvent::InitApply(cm_at("a", "2", "a"))))
        .unwrap();
    events
        .send(undecodable(UndecodableEvent::InitApply, None))
        .unwrap();
    events.send(Ok(WatchEvent::InitDone)).unwrap();
    assert_eq!(take(&mut deltas, 1).await, ["Updated a@2 uid=a #4"]);
    assert!(deltas.try_recv().is_err(), "b was not deleted");
    assert_eq!(cached(&handle), ["a@2", "b@1"]);
    assert_eq!(
        listed_undecodable(&handle),
        ["(name unreadable): object's metadata.labels is not a JSON object"]
    );
    assert_eq!(
        series(&telemetry, "kubewasm_informer_undecodable_objects"),
        "1"
    );
    // The next list is whole: b was gone after all.
    events.send(Ok(WatchEvent::Init)).unwrap();
    events
        .send(Ok(WatchEvent::InitApply(cm_at("a", "2", "a"))))
        .unwrap();
    events.send(Ok(WatchEvent::InitDone)).unwrap();
    assert_eq!(take(&mut deltas, 1).await, ["Deleted b@1 uid=b unknown #5"]);
    assert!(listed_undecodable(&handle).is_empty());
    assert_eq!(
        series(&telemetry, "kubewasm_informer_undecodable_objects"),
        "0"
    );
    set.unsubscribe(&handle);
    set.shutdown().await;
}

/// A source that hands each watch a new script, and records the shards
/// each was asked for.
struct PerWatch {
    scripts: parking_lot::Mutex<std::collections::VecDeque<Script>>,
    asked: parking_lot::Mutex<Vec<Vec<u32>>>,
}

impl Source for PerWatch {
    fn watch(
        &self,
        _spec: &InformerSpec,
    ) -> futures::stream::BoxStream<'static, Result<WatchEvent, SourceError>> {
        let Some(mut rx) = self.scripts.lock().pop_front() else {
            return Box::pin(futures::stream::pending());
        };
        Box::pin(futures::stream::poll_fn(move |cx| rx.poll_recv(cx)))
    }

    fn watch_shards(
        &self,
        spec: &InformerSpec,
        shards: &crate::shard::ShardSet,
    ) -> futures::stream::BoxStream<'static, Result<WatchEvent, SourceError>> {
        self.asked.lock().push(shards.indexes().collect());
        self.watch(spec)
    }
}

/// `shardCache: held`: an informer caches only the held shards' objects
/// (filtering what a source that cannot narrow returns), lists again when
/// they change, hands a taken shard's objects as adds, and drops a given-up
/// shard's objects without a delete (they were not deleted).
#[tokio::test]
async fn an_informer_caching_shards_lists_again_when_they_change() {
    use crate::shard::{ShardKey, ShardSet, fnv1a64, shard_of};
    let uid_in = |shard: u32| -> String {
        (0..)
            .map(|i| format!("uid-{i}-{}", i * 7919))
            .find(|u| shard_of(fnv1a64(u.as_bytes()), 2) == shard)
            .unwrap()
    };
    let (u0, u1) = (uid_in(0), uid_in(1));
    let mut scripts = std::collections::VecDeque::new();
    let mut senders = Vec::new();
    for _ in 0..3 {
        let (tx, rx) = mpsc::unbounded_channel();
        scripts.push_back(rx);
        senders.push(tx);
    }
    let source = Arc::new(PerWatch {
        scripts: parking_lot::Mutex::new(scripts),
        asked: parking_lot::Mutex::default(),
    });
    let none = ShardSet::sharded(2, ShardKey::Uid, false);
    let set = InformerSet::new(
        source.clone(),
        Arc::new(Activity::default()),
        CancellationToken::new(),
        Telemetry::new(Identity::from_env()),
    )
    .caching_shards(none.with(0, true));
    let (tx, mut deltas) = mpsc::unbounded_channel();
    let handle = set.subscribe(all_configmaps(), tx);
    let list = |tx: &Events| {
        tx.send(Ok(WatchEvent::Init)).unwrap();
        tx.send(Ok(WatchEvent::InitApply(cm_at("a", "1", &u0))))
            .unwrap();
        tx.send(Ok(WatchEvent::InitApply(cm_at("b", "1", &u1))))
            .unwrap();
        tx.send(Ok(WatchEvent::InitDone)).unwrap();
    };
    // The source ignores the shards (as an API server before 1.36 does):
    // shard 1's b is filtered here.
    list(&senders[0]);
    let d = take(&mut deltas, 2).await;
    assert_eq!(d[0], format!("Added a@1 uid={u0} initial #1"));
    assert_eq!(d[1], "Synced #2");
    set.wait_shards(none.with(0, true)).await;
    let names = |set: &InformerSet| -> Vec<String> {
        let mut n: Vec<String> = set.informers()[0]
            .store()
            .snapshot()
            .iter()
            .map(|o| o.meta().name.to_string())
            .collect();
        n.sort();
        n
    };
    assert_eq!(names(&set), ["a"]);
    // A watched change of b is not its own either, but it is as far as
    // the informer has followed the API server.
    senders[0]
        .send(Ok(WatchEvent::Apply(cm_at("b", "2", &u1))))
        .unwrap();
    let marks = std::collections::BTreeMap::from([(all_configmaps().to_string(), 2)]);
    let caught_up = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        set.wait_high_waters(&marks, std::time::Duration::from_secs(20)),
    )
    .await
    .expect("the high water follows every event, cached or not");
    assert!(caught_up);
    assert_eq!(set.high_waters(), marks);

    // Shard 1 taken too: a new list of both; b comes as an add.
    set.set_shards(none.with(0, true).with(1, true));
    list(&senders[1]);
    assert_eq!(
        take(&mut deltas, 1).await,
        [format!("Added b@1 uid={u1} #3")]
    );
    set.wait_shards(none.with(0, true).with(1, true)).await;
    assert_eq!(names(&set), ["a", "b"]);

    // Shard 0 given up: a leaves the cache with no delete.
    set.set_shards(none.with(1, true));
    senders[2].send(Ok(WatchEvent::Init)).unwrap();
    senders[2]
        .send(Ok(WatchEvent::InitApply(cm_at("b", "1", &u1))))
        .unwrap();
    senders[2].send(Ok(WatchEvent::InitDone)).unwrap();
    set.wait_shards(none.with(1, true)).await;
    assert_eq!(names(&set), ["b"]);
    assert!(deltas.try_recv().is_err(), "no delta for a shard given up");
    assert_eq!(*source.asked.lock(), [vec![0], vec![0, 1], vec![1]]);
    set.unsubscribe(&handle);
    set.shutdown().await;
}
