//! Objects the host cannot decode, from a scripted mock API server through
//! the API-server source into an informer: each costs that object, never
//! the list or the watch. A list applies without it (a first list still
//! syncs) and keeps its cached state (a relist does not read its absence
//! as a deletion); a deleted one is removed by its name; each is counted
//! in `kubewasm_informer_undecodable_objects` until it decodes or goes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use common::deltas::{no_more, take};
use common::*;
use kubewasm::dispatch::Activity;
use kubewasm::informer::{Delta, InformerSet, InformerSpec, SubscriptionHandle};
use kubewasm::kind::KindInfo;
use kubewasm::object::StripOptions;
use kubewasm::source::kube::{InitialList, KubeSource};
use kubewasm::telemetry::{Identity, Telemetry};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

fn spec() -> InformerSpec {
    InformerSpec {
        kind: KindInfo::new("", "v1", "ConfigMap", "configmaps", true),
        namespace: Some("ns".into()),
        label_selector: None,
        field_selector: None,
    }
}

/// An informer on the API-server source of a mock client, its subscriber's
/// deltas and the telemetry it counts into.
fn informer(
    client: kube::Client,
    initial_list: InitialList,
) -> (
    InformerSet,
    SubscriptionHandle,
    mpsc::UnboundedReceiver<Delta>,
    Telemetry,
) {
    let telemetry = Telemetry::new(Identity::from_env());
    let source = Arc::new(KubeSource::new(
        client,
        StripOptions::default(),
        initial_list,
        500,
    ));
    let set = InformerSet::new(
        source,
        Arc::new(Activity::default()),
        CancellationToken::new(),
        telemetry.clone(),
    );
    let (tx, rx) = mpsc::unbounded_channel();
    let handle = set.subscribe(spec(), tx);
    (set, handle, rx, telemetry)
}

/// A ConfigMap the server could send but the host cannot decode (a label
/// value that is not a string); its name is readable.
fn undecodable_configmap(name: &str, rv: &str) -> serde_json::Value {
    let mut cm = configmap("ns", name, rv, "1");
    cm["metadata"]["labels"] = serde_json::json!({"team": 7});
    cm
}

/// `name@resourceVersion` of every cached object, in key order.
fn cached(handle: &SubscriptionHandle) -> Vec<String> {
    handle
        .informer
        .store()
        .snapshot()
        .iter()
        .map(|o| format!("{}@{}", o.name(), o.meta().resource_version))
        .collect()
}

/// The configmaps series of `family`, as `/metrics` shows it.
fn series(telemetry: &Telemetry, family: &str) -> Option<String> {
    let text = telemetry.metrics().encode().unwrap();
    let prefix = format!("{family}{{kind=\"configmaps\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(str::to_owned)
}

const GAUGE: &str = "kubewasm_informer_undecodable_objects";

/// A relist that meets an object the host cannot decode applies every
/// other object, keeps the last decoded state of that one (its absence
/// would read as a deletion, and a garbage-collecting plugin would delete
/// its children) and goes on watching; the object counts as undecodable
/// until it decodes again.
#[tokio::test]
async fn a_relist_with_an_undecodable_item_applies_the_rest_and_keeps_its_cached_state() {
    let (client, mut server) = mock_client();
    let (set, handle, mut rx, telemetry) = informer(client, InitialList::Paged);
    let (_req, send) = next(&mut server).await;
    send.send_response(json_response(
        200,
        &list(
            "10",
            vec![
                configmap("ns", "a", "5", "1"),
                configmap("ns", "b", "6", "1"),
            ],
        ),
    ));
    assert_eq!(
        take(&mut rx, 3).await,
        ["Added a@5 initial", "Added b@6 initial", "Synced"]
    );
    let (req, send) = next(&mut server).await;
    assert_eq!(req.param("watch").as_deref(), Some("true"));
    let (resp, feed) = watch_response();
    send.send_response(resp);
    feed.gone();
    // The relist: b changed into something the host cannot decode, c is new.
    let (req, send) = next(&mut server).await;
    assert_eq!(req.param("watch"), None, "expected a relist, got {req:?}");
    send.send_response(json_response(
        200,
        &list(
            "20",
            vec![
                configmap("ns", "a", "5", "1"),
                undecodable_configmap("b", "19"),
                configmap("ns", "c", "20", "1"),
            ],
        ),
    ));
    assert_eq!(take(&mut rx, 1).await, ["Added c@20"]);
    // Watched from the relist's version: it was applied, not made again.
    let (req, send) = next(&mut server).await;
    assert_eq!(req.param("watch").as_deref(), Some("true"), "{req:?}");
    assert_eq!(req.param("resourceVersion").as_deref(), Some("20"));
    no_more(&mut rx).await;
    assert_eq!(cached(&handle), ["a@5", "b@6", "c@20"]);
    assert_eq!(series(&telemetry, GAUGE).as_deref(), Some("1"));
    // b decodes again: an update from its last decoded state.
    let (resp, feed) = watch_response();
    send.send_response(resp);
    feed.send("MODIFIED", configmap("ns", "b", "21", "2"));
    assert_eq!(take(&mut rx, 1).await, ["Updated b@21 old=b@6"]);
    assert_eq!(series(&telemetry, GAUGE).as_deref(), Some("0"));
    set.unsubscribe(&handle);
    set.shutdown().await;
}

/// An informer whose first list holds an object the host cannot decode
/// syncs without it (its plugins start), instead of listing again forever.
#[tokio::test]
async fn a_first_list_with_an_undecodable_item_syncs_without_it() {
    let (client, mut server) = mock_client();
    let (set, handle, mut rx, telemetry) = informer(client, InitialList::Paged);
    let (_req, send) = next(&mut server).await;
    send.send_response(json_response(
        200,
        &list(
            "3",
            vec![
                configmap("ns", "a", "1", "1"),
                undecodable_configmap("b", "2"),
                configmap("ns", "c", "3", "1"),
            ],
        ),
    ));
    assert_eq!(
        take(&mut rx, 3).await,
        ["Added a@1 initial", "Added c@3 initial", "Synced"]
    );
    assert!(handle.informer.has_synced());
    let (req, _send) = next(&mut server).await;
    assert_eq!(req.param("watch").as_deref(), Some("true"), "{req:?}");
    assert_eq!(req.param("resourceVersion").as_deref(), Some("3"));
    assert_eq!(cached(&handle), ["a@1", "c@3"]);
    assert_eq!(series(&telemetry, GAUGE).as_deref(), Some("1"));
    set.unsubscribe(&handle);
    set.shutdown().await;
}

/// A streaming list's event that is not even JSON: the list goes on
/// without it and syncs; its name unknown, the item is counted.
#[tokio::test]
async fn a_streaming_list_with_an_event_that_is_not_json_syncs_without_it() {
    let (client, mut server) = mock_client();
    let (set, handle, mut rx, telemetry) = informer(client, InitialList::Stream);
    let (req, send) = next(&mut server).await;
    assert_eq!(req.param("sendInitialEvents").as_deref(), Some("true"));
    let (resp, feed) = watch_response();
    send.send_response(resp);
    feed.send("ADDED", configmap("ns", "a", "5", "1"));
    feed.send_raw(r#"{"type":"ADDED","object":nope}"#);
    feed.send("ADDED", configmap("ns", "c", "6", "1"));
    feed.bookmark("7", true);
    assert_eq!(
        take(&mut rx, 3).await,
        ["Added a@5 initial", "Added c@6 initial", "Synced"]
    );
    assert_eq!(series(&telemetry, GAUGE).as_deref(), Some("1"));
    // The same watch goes on.
    feed.send("MODIFIED", configmap("ns", "a", "8", "2"));
    assert_eq!(take(&mut rx, 1).await, ["Updated a@8 old=a@5"]);
    set.unsubscribe(&handle);
    set.shutdown().await;
}

/// A watched deletion of an object the host cannot decode removes it by the
/// name its metadata gives: subscribers get a delete with its last decoded
/// state, and it no longer lingers in the cache (and its resyncs) until a
/// relist, which bookmarks make rare.
#[tokio::test]
async fn an_undecodable_deleted_object_is_removed_by_its_name() {
    let (client, mut server) = mock_client();
    let (set, handle, mut rx, telemetry) = informer(client, InitialList::Paged);
    let (_req, send) = next(&mut server).await;
    send.send_response(json_response(
        200,
        &list(
            "10",
            vec![
                configmap("ns", "a", "5", "1"),
                configmap("ns", "b", "6", "1"),
            ],
        ),
    ));
    assert_eq!(
        take(&mut rx, 3).await,
        ["Added a@5 initial", "Added b@6 initial", "Synced"]
    );
    let (_req, send) = next(&mut server).await;
    let (resp, feed) = watch_response();
    send.send_response(resp);
    // a stops decoding (kept as it was), then both are deleted undecodable.
    feed.send("MODIFIED", undecodable_configmap("a", "11"));
    feed.send("DELETED", undecodable_configmap("b", "12"));
    assert_eq!(take(&mut rx, 1).await, ["Deleted b@6"]);
    assert_eq!(cached(&handle), ["a@5"]);
    assert_eq!(series(&telemetry, GAUGE).as_deref(), Some("1"));
    feed.send("DELETED", undecodable_configmap("a", "13"));
    assert_eq!(take(&mut rx, 1).await, ["Deleted a@5"]);
    no_more(&mut rx).await;
    assert!(cached(&handle).is_empty());
    assert_eq!(series(&telemetry, GAUGE).as_deref(), Some("0"));
    set.unsubscribe(&handle);
    set.shutdown().await;
}
