//! The API-server source against a scripted mock server: paged initial
//! list, bookmarks, a dropped connection resuming from the last bookmark
//! without duplicates, 410 Gone relisting into deletes of vanished objects,
//! 403 on list, streaming lists with the fallback to paged lists, and the
//! source's events for an item that cannot be decoded (what the informer
//! makes of them: `kube_decode.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::deltas::{no_more, take};
use common::*;
use futures::StreamExt;
use kubewasm::dispatch::Activity;
use kubewasm::informer::{InformerSet, InformerSpec, Source, SourceError};
use kubewasm::kind::KindInfo;
use kubewasm::object::StripOptions;
use kubewasm::source::kube::{InitialList, KubeSource};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

fn spec() -> InformerSpec {
    InformerSpec {
        kind: KindInfo::new("", "v1", "ConfigMap", "configmaps", true),
        namespace: Some("ns".into()),
        label_selector: Some("team=a".into()),
        field_selector: None,
    }
}

#[tokio::test]
async fn paged_list_bookmark_resume_and_410_relist() {
    let (client, mut server) = mock_client();
    let source = Arc::new(KubeSource::new(
        client,
        StripOptions::default(),
        InitialList::Paged,
        500,
    ));
    let set = InformerSet::new(
        source,
        Arc::new(Activity::default()),
        CancellationToken::new(),
        kubewasm::telemetry::Telemetry::new(kubewasm::telemetry::Identity::from_env()),
    );
    let (tx, mut rx) = mpsc::unbounded_channel();
    let handle = set.subscribe(spec(), tx);

    // 1. Paged initial list.
    let (req, send) = next(&mut server).await;
    assert_eq!(req.method, "GET");
    assert_eq!(req.path, "/api/v1/namespaces/ns/configmaps");
    assert_eq!(req.param("limit").as_deref(), Some("500"));
    assert_eq!(req.param("labelSelector").as_deref(), Some("team=a"));
    assert_eq!(req.param("watch"), None);
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
    assert!(handle.informer.has_synced());
    // managedFields were stripped; kind/apiVersion filled in for list items.
    let a = handle
        .informer
        .store()
        .snapshot()
        .get(&kubewasm::object::ObjectKey::new(Some("ns"), "a"))
        .unwrap();
    assert!(!a.json().contains("managedFields"), "{}", a.json());
    assert_eq!(a.meta().kind.as_ref(), "ConfigMap");

    // 2. Watch from the list's version, with bookmarks; then the connection drops.
    let (req, send) = next(&mut server).await;
    assert_eq!(req.param("watch").as_deref(), Some("true"));
    assert_eq!(req.param("resourceVersion").as_deref(), Some("10"));
    assert_eq!(req.param("allowWatchBookmarks").as_deref(), Some("true"));
    let (resp, feed) = watch_response();
    send.send_response(resp);
    feed.send("MODIFIED", configmap("ns", "a", "11", "2"));
    feed.bookmark("15", false);
    assert_eq!(take(&mut rx, 1).await, ["Updated a@11 old=a@5"]);
    drop(feed);

    // 3. The watch resumes from the bookmark: nothing replayed, nothing lost.
    let (req, send) = next(&mut server).await;
    assert_eq!(req.param("watch").as_deref(), Some("true"));
    assert_eq!(req.param("resourceVersion").as_deref(), Some("15"));
    let (resp, feed) = watch_response();
    send.send_response(resp);
    feed.send("ADDED", configmap("ns", "c", "16", "1"));
    assert_eq!(take(&mut rx, 1).await, ["Added c@16"]);
    // 410 Gone: the history is compacted.
    feed.gone();

    // 4. Relist: b vanished meanwhile (its delete was never watched), d is new.
    let (req, send) = next(&mut server).await;
    assert_eq!(req.param("watch"), None, "expected a relist, got {req:?}");
    send.send_response(json_response(
        200,
        &list(
            "20",
            vec![
                configmap("ns", "a", "11", "2"),
                configmap("ns", "c", "16", "1"),
                configmap("ns", "d", "17", "1"),
            ],
        ),
    ));
    assert_eq!(
        take(&mut rx, 2).await,
        ["Added d@17", "Deleted b@6 unknown"]
    );
    // 5. And watches from the relist's version.
    let (req, send) = next(&mut server).await;
    assert_eq!(req.param("resourceVersion").as_deref(), Some("20"));
    let (resp, feed) = watch_response();
    send.send_response(resp);
    feed.send("DELETED", configmap("ns", "c", "21", "1"));
    assert_eq!(take(&mut rx, 1).await, ["Deleted c@21"]);
    no_more(&mut rx).await;
    let names: Vec<String> = handle
        .informer
        .store()
        .snapshot()
        .iter()
        .map(|o| o.name().to_owned())
        .collect();
    assert_eq!(names, ["a", "d"]);
    set.unsubscribe(&handle);
    set.shutdown().await;
}

#[tokio::test]
async fn forbidden_list_is_reported_and_retried() {
    let (client, mut server) = mock_client();
    let source = KubeSource::new(client, StripOptions::default(), InitialList::Paged, 50);
    let mut stream = source.watch(&spec());
    // kube-runtime announces a (re)list before it is made.
    assert!(matches!(
        stream.next().await,
        Some(Ok(kubewasm::informer::WatchEvent::Init))
    ));
    let script = tokio::spawn(async move {
        let (req, send) = next(&mut server).await;
        assert_eq!(req.param("limit").as_deref(), Some("50"));
        send.send_response(status(
            403,
            "Forbidden",
            "configmaps is forbidden: User \"bob\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"ns\"",
        ));
        // The stream retries (after backoff) and recovers once RBAC allows it.
        let (req, send) = next(&mut server).await;
        assert_eq!(req.path, "/api/v1/namespaces/ns/configmaps");
        send.send_response(json_response(200, &list("3", vec![])));
        server
    });
    match stream.next().await {
        Some(Err(SourceError::Forbidden { verb, message })) => {
            assert_eq!(verb, "list");
            assert!(
                message.contains("cannot list resource \"configmaps\""),
                "{message}"
            );
            let shown = SourceError::Forbidden { verb, message }.to_string();
            assert!(
                shown.contains("forbidden to list") && shown.contains("grant"),
                "{shown}"
            );
        }
        other => panic!("expected Forbidden, got {other:?}"),
    }
    assert!(matches!(
        stream.next().await,
        Some(Ok(kubewasm::informer::WatchEvent::Init))
    ));
    assert!(matches!(
        stream.next().await,
        Some(Ok(kubewasm::informer::WatchEvent::InitDone))
    ));
    let _server = script.await.unwrap();
}

#[tokio::test]
async fn streaming_list_when_served_and_paged_fallback_when_refused() {
    // A server with WatchList: one watch request brings the initial state.
    let (client, mut server) = mock_client();
    let source = Arc::new(KubeSource::new(
        client,
        StripOptions::default(),
        InitialList::Auto,
        500,
    ));
    let set = InformerSet::new(
        source,
        Arc::new(Activity::default()),
        CancellationToken::new(),
        kubewasm::telemetry::Telemetry::new(kubewasm::telemetry::Identity::from_env()),
    );
    let (tx, mut rx) = mpsc::unbounded_channel();
    let handle = set.subscribe(spec(), tx);
    let (req, send) = next(&mut server).await;
    assert_eq!(req.param("watch").as_deref(), Some("true"));
    assert_eq!(req.param("sendInitialEvents").as_deref(), Some("true"));
    assert_eq!(
        req.param("resourceVersionMatch").as_deref(),
        Some("NotOlderThan")
    );
    let (resp, feed) = watch_response();
    send.send_response(resp);
    feed.send("ADDED", configmap("ns", "a", "5", "1"));
    feed.send("ADDED", configmap("ns", "b", "6", "1"));
    feed.bookmark("7", true);
    feed.send("MODIFIED", configmap("ns", "b", "8", "2"));
    assert_eq!(
        take(&mut rx, 4).await,
        [
            "Added a@5 initial",
            "Added b@6 initial",
            "Synced",
            "Updated b@8 old=b@6"
        ]
    );
    set.unsubscribe(&handle);
    drop(feed);

    // A server without WatchList refuses sendInitialEvents with 422: the
    // source switches to paged lists, for this and later informers.
    let (client, mut server) = mock_client();
    let source = Arc::new(KubeSource::new(
        client,
        StripOptions::default(),
        InitialList::Auto,
        500,
    ));
    let set = InformerSet::new(
        source,
        Arc::new(Activity::default()),
        CancellationToken::new(),
        kubewasm::telemetry::Telemetry::new(kubewasm::telemetry::Identity::from_env()),
    );
    let (tx, mut rx) = mpsc::unbounded_channel();
    let handle = set.subscribe(spec(), tx);
    let (req, send) = next(&mut server).await;
    assert_eq!(req.param("sendInitialEvents").as_deref(), Some("true"));
    send.send_response(status(
        422,
        "Invalid",
        "ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled",
    ));
    let (req, send) = next(&mut server).await;
    assert_eq!(
        req.param("watch"),
        None,
        "expected a paged list, got {req:?}"
    );
    assert_eq!(req.param("limit").as_deref(), Some("500"));
    send.send_response(json_response(
        200,
        &list("9", vec![configmap("ns", "a", "5", "1")]),
    ));
    assert_eq!(take(&mut rx, 2).await, ["Added a@5 initial", "Synced"]);
    let (req, _send) = next(&mut server).await;
    assert_eq!(req.param("resourceVersion").as_deref(), Some("9"));
    // A second informer on the same source starts paged right away.
    let mut other = spec();
    other.label_selector = None;
    let (tx2, _rx2) = mpsc::unbounded_channel();
    let _h2 = set.subscribe(other, tx2);
    let (req, _send) = next(&mut server).await;
    assert_eq!(req.param("sendInitialEvents"), None, "{req:?}");
    assert_eq!(req.param("watch"), None, "{req:?}");
    set.unsubscribe(&handle);
}

/// A frozen API server looks like a quiet resource until it is asked: a
/// silent watch is probed with a one-item list, an unanswered probe is
/// reported as a stall naming the cause, and an answer ends it.
#[tokio::test]
async fn a_silent_watch_whose_server_does_not_answer_is_reported_stalled() {
    use kubewasm::informer::WatchEvent;
    let (client, mut server) = mock_client();
    let source = KubeSource::new(client, StripOptions::default(), InitialList::Paged, 50)
        .with_stall_after(Duration::from_millis(600));
    let mut stream = source.watch(&spec());
    let script = tokio::spawn(async move {
        let (_req, send) = next(&mut server).await;
        send.send_response(json_response(200, &list("3", vec![])));
        let (req, send) = next(&mut server).await;
        assert_eq!(req.param("watch").as_deref(), Some("true"));
        let (resp, feed) = watch_response();
        send.send_response(resp);
        // Silence; the probe is left unanswered (a frozen server).
        let (probe, unanswered) = next(&mut server).await;
        assert_eq!(probe.param("limit").as_deref(), Some("1"), "{probe:?}");
        assert_eq!(probe.param("watch"), None, "{probe:?}");
        // The next probe is answered: the server is back.
        let (probe, send) = next(&mut server).await;
        assert_eq!(probe.param("limit").as_deref(), Some("1"), "{probe:?}");
        send.send_response(json_response(200, &list("3", vec![])));
        drop(unanswered);
        feed.send("ADDED", configmap("ns", "a", "4", "1"));
        (server, feed)
    });
    assert!(matches!(stream.next().await, Some(Ok(WatchEvent::Init))));
    assert!(matches!(
        stream.next().await,
        Some(Ok(WatchEvent::InitDone))
    ));
    match stream.next().await {
        Some(Err(e @ SourceError::Stalled { .. })) => {
            let shown = e.to_string();
            assert!(shown.contains("does not answer"), "{shown}");
            assert!(shown.contains("unanswered"), "{shown}");
        }
        other => panic!("expected a stall, got {other:?}"),
    }
    assert!(matches!(
        stream.next().await,
        Some(Ok(WatchEvent::Progress))
    ));
    match stream.next().await {
        Some(Ok(WatchEvent::Apply(o))) => assert_eq!(o.name(), "a"),
        other => panic!("expected the watch to go on, got {other:?}"),
    }
    let _keep = script.await.unwrap();
}

/// A ConfigMap the server could send but the host cannot decode (a label
/// value that is not a string).
fn undecodable_configmap(name: &str, rv: &str) -> serde_json::Value {
    let mut cm = configmap("ns", name, rv, "1");
    cm["metadata"]["labels"] = serde_json::json!({"team": 7});
    cm
}

async fn next_event(
    stream: &mut futures::stream::BoxStream<
        'static,
        Result<kubewasm::informer::WatchEvent, SourceError>,
    >,
) -> Result<kubewasm::informer::WatchEvent, SourceError> {
    tokio::time::timeout(Duration::from_secs(30), stream.next())
        .await
        .expect("no event within 30s")
        .expect("the stream ended")
}

/// What a source event is, for comparing sequences.
fn event_name(e: &Result<kubewasm::informer::WatchEvent, SourceError>) -> String {
    use kubewasm::informer::WatchEvent;
    match e {
        Ok(WatchEvent::Init) => "Init".into(),
        Ok(WatchEvent::InitApply(o)) => format!("InitApply {}", o.name()),
        Ok(WatchEvent::InitDone) => "InitDone".into(),
        Ok(WatchEvent::Apply(o)) => format!("Apply {}", o.name()),
        Ok(WatchEvent::Delete(o)) => format!("Delete {}", o.name()),
        Ok(WatchEvent::Progress) => "Progress".into(),
        Ok(WatchEvent::Undecodable(u)) => format!(
            "Undecodable {:?} {}",
            u.event,
            u.key.as_ref().map_or("?".into(), ToString::to_string)
        ),
        Err(e) => format!("Err {e}"),
    }
}

/// A paged list with an item the host cannot decode goes on without it:
/// the item is handed on undecodable, named by its metadata, and the list
/// ends; the watch follows from the list's version.
#[tokio::test]
async fn a_paged_list_with_an_undecodable_item_names_it_and_ends() {
    let (client, mut server) = mock_client();
    let source = KubeSource::new(client, StripOptions::default(), InitialList::Paged, 50);
    let mut stream = source.watch(&spec());
    let script = tokio::spawn(async move {
        let (req, send) = next(&mut server).await;
        assert_eq!(req.param("watch"), None, "{req:?}");
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
        let (req, send) = next(&mut server).await;
        assert_eq!(
            req.param("watch").as_deref(),
            Some("true"),
            "expected the watch, got {req:?}"
        );
        assert_eq!(req.param("resourceVersion").as_deref(), Some("3"));
        (server, send)
    });
    let mut seen = Vec::new();
    for _ in 0..5 {
        seen.push(next_event(&mut stream).await);
    }
    let names: Vec<String> = seen.iter().map(event_name).collect();
    assert_eq!(
        names,
        [
            "Init",
            "InitApply a",
            "Undecodable InitApply ns/b",
            "InitApply c",
            "InitDone"
        ]
    );
    let Ok(kubewasm::informer::WatchEvent::Undecodable(u)) = &seen[2] else {
        panic!("not undecodable: {}", names[2]);
    };
    let shown = u.error.to_string();
    assert!(shown.contains("invalid type: integer"), "{shown}");
    assert!(shown.contains("metadata.labels"), "{shown}");
    // Polled on, the source watches from the list's version (no event yet).
    let (_none, script) = tokio::join!(
        tokio::time::timeout(Duration::from_secs(2), stream.next()),
        script
    );
    let _keep = script.unwrap();
}

/// A streaming list's event that is not even JSON: an item whose name is
/// unknown, and the list goes on to its end (kube's watcher goes on).
#[tokio::test]
async fn a_streaming_list_with_an_event_that_is_not_json_goes_on_without_it() {
    let (client, mut server) = mock_client();
    let source = KubeSource::new(client, StripOptions::default(), InitialList::Stream, 50);
    let mut stream = source.watch(&spec());
    let script = tokio::spawn(async move {
        let (req, send) = next(&mut server).await;
        assert_eq!(req.param("sendInitialEvents").as_deref(), Some("true"));
        let (resp, feed) = watch_response();
        send.send_response(resp);
        feed.send("ADDED", configmap("ns", "a", "5", "1"));
        feed.send_raw(r#"{"type":"ADDED","object":nope}"#);
        feed.send("ADDED", configmap("ns", "c", "6", "1"));
        feed.bookmark("7", true);
        (server, feed)
    });
    let mut names = Vec::new();
    for _ in 0..5 {
        names.push(event_name(&next_event(&mut stream).await));
    }
    assert_eq!(
        names,
        [
            "Init",
            "InitApply a",
            "Undecodable InitApply ?",
            "InitApply c",
            "InitDone"
        ]
    );
    let _keep = script.await.unwrap();
}

/// Watch events whose object cannot be decoded are handed on with the
/// object's name: an update (the informer keeps the previous state) and a
/// deletion (the informer removes the object by that name).
#[tokio::test]
async fn watched_objects_that_cannot_be_decoded_are_named() {
    let (client, mut server) = mock_client();
    let source = KubeSource::new(client, StripOptions::default(), InitialList::Paged, 50);
    let mut stream = source.watch(&spec());
    let script = tokio::spawn(async move {
        let (_req, send) = next(&mut server).await;
        send.send_response(json_response(200, &list("3", vec![])));
        let (_req, send) = next(&mut server).await;
        let (resp, feed) = watch_response();
        send.send_response(resp);
        feed.send("MODIFIED", undecodable_configmap("a", "4"));
        feed.send("DELETED", undecodable_configmap("b", "5"));
        // A name that is not a string: nothing names the object.
        let mut nameless = undecodable_configmap("c", "6");
        nameless["metadata"]["name"] = serde_json::json!(7);
        feed.send("DELETED", nameless);
        (server, feed)
    });
    let mut names = Vec::new();
    for _ in 0..5 {
        names.push(event_name(&next_event(&mut stream).await));
    }
    assert_eq!(
        names,
        [
            "Init",
            "InitDone",
            "Undecodable Apply ns/a",
            "Undecodable Delete ns/b",
            "Undecodable Delete ?"
        ]
    );
    let _keep = script.await.unwrap();
}
