use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::activity::Activity;
use crate::kind::KindInfo;
use crate::object::{KObject, ObjectError};
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

/// An informer on a scripted source, its subscriber's deltas, and the
/// script's sender.
fn scripted() -> (
    InformerSet,
    SubscriptionHandle,
    mpsc::UnboundedReceiver<Delta>,
    mpsc::UnboundedSender<Result<WatchEvent, SourceError>>,
) {
    let (events, rx) = mpsc::unbounded_channel();
    let set = scripted_set(Some(rx), Telemetry::new(Identity::from_env()));
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

fn undecodable(position: usize, object: &str) -> SourceError {
    SourceError::ListItemUndecodable {
        informer: all_configmaps().to_string(),
        position,
        object: Some(object.into()),
        cause: Arc::new(ObjectError::Missing("metadata.name")),
    }
}

#[tokio::test]
async fn a_list_with_an_undecodable_item_changes_nothing_and_the_next_list_applies() {
    let (set, handle, mut deltas, events) = scripted();
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
    // A relist whose second item cannot be decoded: applied, it would
    // update a and delete b, which is alive.
    events.send(Ok(WatchEvent::Init)).unwrap();
    events
        .send(Ok(WatchEvent::InitApply(cm_at("a", "2", "a"))))
        .unwrap();
    events.send(Err(undecodable(2, "default/b"))).unwrap();
    // Whatever a source still sends of that list is ignored too.
    events
        .send(Ok(WatchEvent::InitApply(cm_at("c", "2", "c"))))
        .unwrap();
    events.send(Ok(WatchEvent::InitDone)).unwrap();
    // The next list is complete: b is gone by now.
    events.send(Ok(WatchEvent::Init)).unwrap();
    events
        .send(Ok(WatchEvent::InitApply(cm_at("a", "3", "a"))))
        .unwrap();
    events.send(Ok(WatchEvent::InitDone)).unwrap();
    // Its deltas follow the first list's directly: the voided one
    // emitted nothing (not even a sequence number).
    assert_eq!(
        take(&mut deltas, 2).await,
        ["Updated a@3 uid=a #4", "Deleted b@1 uid=b unknown #5"]
    );
    assert!(deltas.try_recv().is_err(), "nothing else was emitted");
    let names: Vec<String> = handle
        .informer
        .store()
        .snapshot()
        .iter()
        .map(|o| format!("{}@{}", o.meta().name, o.meta().resource_version))
        .collect();
    assert_eq!(names, ["a@3"]);
    assert_eq!(handle.informer.watch_restarts(), 1);
    set.unsubscribe(&handle);
    set.shutdown().await;
}

#[tokio::test]
async fn a_voided_list_leaves_the_cache_as_it_was() {
    // Checked on the cache itself, between the voided list and the next.
    let (set, handle, mut deltas, events) = scripted();
    for e in [
        WatchEvent::Init,
        WatchEvent::InitApply(cm("a")),
        WatchEvent::InitApply(cm("b")),
        WatchEvent::InitDone,
        WatchEvent::Init,
        WatchEvent::InitApply(cm_at("a", "2", "a")),
    ] {
        events.send(Ok(e)).unwrap();
    }
    events.send(Err(undecodable(2, "default/b"))).unwrap();
    // A live event after it: once it is a delta, the list was handled.
    events
        .send(Ok(WatchEvent::Apply(cm_at("z", "4", "z"))))
        .unwrap();
    assert_eq!(take(&mut deltas, 4).await[3], "Added z@4 uid=z #4");
    let cached: Vec<String> = handle
        .informer
        .store()
        .snapshot()
        .iter()
        .map(|o| format!("{}@{}", o.meta().name, o.meta().resource_version))
        .collect();
    assert_eq!(cached, ["a@1", "b@1", "z@4"]);
    set.unsubscribe(&handle);
    set.shutdown().await;
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
