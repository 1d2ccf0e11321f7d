#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::sync::Mutex;

use futures::TryStreamExt;
use http_body_util::StreamBody;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ListParams, WatchParams};
use kube::core::WatchEvent;

use super::*;

use crate::proto::test_msg::{Msg, envelope};

/// A ConfigMap `name` in `ns` at resourceVersion `rv`, with binary data.
fn config_map(name: &str, rv: &str) -> Msg {
    let meta = Msg::default().str(1, name).str(3, "ns").str(6, rv);
    let data = Msg::default().str(1, "k").str(2, "v");
    let binary = Msg::default().str(1, "b").bytes(2, &[0, 255, 10]);
    Msg::default().msg(1, &meta).msg(2, &data).msg(3, &binary)
}

fn list(items: &[Msg], rv: &str) -> Vec<u8> {
    let mut list = Msg::default().msg(1, Msg::default().str(2, rv));
    for item in items {
        list = list.msg(2, item);
    }
    envelope("v1", "ConfigMapList", &list)
}

fn status_gone() -> Vec<u8> {
    let status = Msg::default()
        .msg(1, Msg::default())
        .str(2, "Failure")
        .str(3, "too old resource version: 1 (5)")
        .str(4, "Expired")
        .varint(6, 410);
    envelope("v1", "Status", &status)
}

fn frame(event_type: &str, object: &[u8]) -> Vec<u8> {
    let raw_ext = Msg::default().bytes(1, object);
    let event = Msg::default().str(1, event_type).msg(2, &raw_ext);
    let mut out = u32::try_from(event.0.len()).unwrap().to_be_bytes().to_vec();
    out.extend_from_slice(&event.0);
    out
}

fn text_of(object: &[u8]) -> String {
    match proto::transcode(object).unwrap() {
        Transcoded::Object(o) => o.text,
        Transcoded::List(l) => l.to_json(),
    }
}

type Chunks = futures::stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, Infallible>>>;

/// A response of `content_type` whose body arrives in `chunks`.
fn response(status: u16, content_type: &str, chunks: Vec<Vec<u8>>) -> Response<StreamBody<Chunks>> {
    let frames: Vec<_> = chunks
        .into_iter()
        .map(|c| Ok(Frame::data(Bytes::from(c))))
        .collect();
    Response::builder()
        .status(status)
        .header(CONTENT_TYPE, content_type)
        .body(StreamBody::new(futures::stream::iter(frames)))
        .unwrap()
}

/// Reads a body whole, as text.
async fn read<B>(body: B) -> Result<String, BoxError>
where
    B: HttpBody<Data = Bytes, Error = BoxError>,
{
    let bytes = body.collect().await?.to_bytes();
    Ok(String::from_utf8(bytes.to_vec()).unwrap())
}

type Seen = Arc<Mutex<Vec<(String, Option<String>)>>>;

/// A fake API server answering each request with the next response, and
/// the path and Accept header of every request it saw.
#[allow(clippy::type_complexity)]
fn server(
    mut responses: Vec<Response<StreamBody<Chunks>>>,
) -> (
    impl Service<
        Request<kube::client::Body>,
        Response = Response<StreamBody<Chunks>>,
        Error = Infallible,
        Future = futures::future::Ready<Result<Response<StreamBody<Chunks>>, Infallible>>,
    > + Send
    + 'static,
    Seen,
) {
    responses.reverse();
    let seen = Seen::default();
    let log = seen.clone();
    let responses = Mutex::new(responses);
    let svc = tower::service_fn(move |req: Request<kube::client::Body>| {
        let accept = req
            .headers()
            .get(ACCEPT)
            .map(|v| v.to_str().unwrap().to_owned());
        log.lock()
            .unwrap()
            .push((req.uri().path().to_owned(), accept));
        let res = responses
            .lock()
            .unwrap()
            .pop()
            .unwrap_or_else(|| response(500, "text/plain", vec![b"no more".to_vec()]));
        futures::future::ready(Ok(res))
    });
    (svc, seen)
}

fn client(layer: &WireLayer, responses: Vec<Response<StreamBody<Chunks>>>) -> (kube::Client, Seen) {
    let (svc, seen) = server(responses);
    (kube::Client::new(layer.layer(svc), "ns"), seen)
}

#[test]
fn lists_and_watches_are_told_from_their_paths() {
    let cases = [
        ("/api/v1/pods", Some(("v1", "v1/pods"))),
        ("/api/v1/namespaces/ns/pods", Some(("v1", "v1/pods"))),
        ("/api/v1/namespaces", Some(("v1", "v1/namespaces"))),
        (
            "/apis/apps/v1/namespaces/ns/deployments",
            Some(("apps/v1", "apps/v1/deployments")),
        ),
        (
            "/apis/example.com/v1/widgets",
            Some(("example.com/v1", "example.com/v1/widgets")),
        ),
        ("/api/v1/namespaces/ns", None),
        ("/api/v1/namespaces/ns/pods/p", None),
        ("/api/v1/nodes/n/status", None),
        ("/api/v1", None),
        ("/apis/apps/v1", None),
        ("/apis", None),
        ("/version", None),
    ];
    for (path, want) in cases {
        let got = collection(path);
        let want = want.map(|(v, r)| (v.to_owned(), r.to_owned()));
        assert_eq!(got, want, "{path}");
    }
}

#[tokio::test]
async fn a_protobuf_list_reaches_kube_as_the_servers_json() {
    let items = [config_map("a", "5"), config_map("b", "6")];
    let body = list(&items, "7");
    // Split into a few chunks: the list is read whole before transcoding.
    let chunks = body.chunks(5).map(<[u8]>::to_vec).collect();
    let counters = WireCounters::default();
    let layer = WireLayer::new(Wire::Auto, counters.clone());
    let (client, seen) = client(&layer, vec![response(200, PROTOBUF, chunks)]);
    let api = kube::Api::<ConfigMap>::namespaced(client, "ns");
    let listed = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(listed.metadata.resource_version.as_deref(), Some("7"));
    let names: Vec<_> = listed
        .items
        .iter()
        .map(|c| c.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["a", "b"]);
    let binary = listed.items[0].binary_data.as_ref().unwrap();
    assert_eq!(binary["b"].0, [0, 255, 10]);
    assert_eq!(
        *seen.lock().unwrap(),
        [(
            "/api/v1/namespaces/ns/configmaps".to_owned(),
            Some(ACCEPT_PROTOBUF.to_owned())
        )]
    );
    assert_eq!((counters.protobuf.get(), counters.json.get()), (1, 0));
}

#[tokio::test]
async fn a_protobuf_list_is_the_transcoders_text() {
    let body = list(&[config_map("a", "5")], "7");
    let layer = WireLayer::new(Wire::Auto, WireCounters::default());
    let (mut svc, _) = server(vec![response(200, PROTOBUF, vec![body.clone()])]);
    let mut svc = layer.layer(&mut svc);
    let req = Request::get("/api/v1/configmaps")
        .body(kube::client::Body::empty())
        .unwrap();
    let res = svc.call(req).await.unwrap();
    assert_eq!(res.headers()[CONTENT_TYPE], "application/json");
    assert_eq!(read(res.into_body()).await.unwrap(), text_of(&body));
}

/// The events as kube would have received them in JSON.
fn json_lines(events: &[(&str, &[u8])]) -> String {
    events
        .iter()
        .map(|(t, o)| format!("{{\"type\":\"{t}\",\"object\":{}}}\n", text_of(o)))
        .collect()
}

#[tokio::test]
async fn a_watch_split_anywhere_is_transcoded_frame_by_frame() {
    let a = envelope("v1", "ConfigMap", config_map("a", "8"));
    let b = envelope("v1", "ConfigMap", config_map("b", "9"));
    let gone = status_gone();
    let events: [(&str, &[u8]); 3] = [("ADDED", &a), ("MODIFIED", &b), ("ERROR", &gone)];
    let stream: Vec<u8> = events.iter().flat_map(|(t, o)| frame(t, o)).collect();
    let want = json_lines(&events);
    let watch = "application/vnd.kubernetes.protobuf;stream=watch";
    // Every chunk size, so chunks end inside length prefixes, inside
    // frames and exactly on frame boundaries.
    for size in 1..=stream.len() {
        let chunks = stream.chunks(size).map(<[u8]>::to_vec).collect();
        let layer = WireLayer::new(Wire::Auto, WireCounters::default());
        let (mut svc, _) = server(vec![response(200, watch, chunks)]);
        let mut svc = layer.layer(&mut svc);
        let req = Request::get("/api/v1/namespaces/ns/configmaps?watch=true")
            .body(kube::client::Body::empty())
            .unwrap();
        let res = svc.call(req).await.unwrap();
        assert_eq!(
            read(res.into_body()).await.unwrap(),
            want,
            "chunks of {size}"
        );
    }
}

#[tokio::test]
async fn kube_reads_the_transcoded_watch_events_and_its_410() {
    let a = envelope("v1", "ConfigMap", config_map("a", "8"));
    let mut stream = frame("ADDED", &a);
    stream.extend(frame("ERROR", &status_gone()));
    let chunks = stream.chunks(7).map(<[u8]>::to_vec).collect();
    let watch = "application/vnd.kubernetes.protobuf; stream=watch";
    let layer = WireLayer::new(Wire::Auto, WireCounters::default());
    let (client, seen) = client(&layer, vec![response(200, watch, chunks)]);
    let api = kube::Api::<ConfigMap>::namespaced(client, "ns");
    let events: Vec<_> = api
        .watch(&WatchParams::default(), "1")
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    match &events[..] {
        [WatchEvent::Added(cm), WatchEvent::Error(status)] => {
            assert_eq!(cm.metadata.name.as_deref(), Some("a"));
            assert_eq!(status.code, 410);
            assert_eq!(status.reason, "Expired");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(seen.lock().unwrap()[0].1.as_deref(), Some(ACCEPT_PROTOBUF));
}

#[tokio::test]
async fn json_and_custom_resources_pass_through_untouched() {
    let json = r#"{"kind":"WidgetList","apiVersion":"example.com/v1","metadata":{"resourceVersion":"3"},"items":[]}"#;
    let counters = WireCounters::default();
    let layer = WireLayer::new(Wire::Auto, counters.clone());
    let (mut svc, seen) = server(vec![
        response(200, "application/json", vec![json.as_bytes().to_vec()]),
        response(200, "application/json", vec![json.as_bytes().to_vec()]),
    ]);
    let mut svc = layer.layer(&mut svc);
    for path in ["/apis/example.com/v1/widgets", "/api/v1/pods"] {
        let req = Request::get(path)
            .body(kube::client::Body::empty())
            .unwrap();
        let res = svc.call(req).await.unwrap();
        assert_eq!(read(res.into_body()).await.unwrap(), json);
    }
    let seen = seen.lock().unwrap();
    // No protobuf form for a custom group: not asked.
    assert_eq!(seen[0].1, None);
    assert_eq!(seen[1].1.as_deref(), Some(ACCEPT_PROTOBUF));
    assert_eq!((counters.protobuf.get(), counters.json.get()), (0, 2));
}

#[tokio::test]
async fn json_wire_single_objects_and_other_verbs_are_not_asked_protobuf() {
    let layer = WireLayer::new(Wire::Json, WireCounters::default());
    let (mut svc, seen) = server(vec![]);
    let mut json = layer.layer(&mut svc);
    let req = Request::get("/api/v1/pods")
        .body(kube::client::Body::empty())
        .unwrap();
    let _ = json.call(req).await;
    let layer = WireLayer::new(Wire::Auto, WireCounters::default());
    let mut auto = layer.layer(&mut svc);
    for req in [
        Request::get("/api/v1/namespaces/ns/pods/p"),
        Request::delete("/api/v1/namespaces/ns/pods"),
        // kube's metadata-only list keeps its own Accept.
        Request::get("/api/v1/pods")
            .header(ACCEPT, "application/json;as=PartialObjectMetadataList"),
    ] {
        let _ = auto
            .call(req.body(kube::client::Body::empty()).unwrap())
            .await;
    }
    let accepts: Vec<_> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|(_, a)| a.clone())
        .collect();
    assert_eq!(
        accepts,
        [
            None,
            None,
            None,
            Some("application/json;as=PartialObjectMetadataList".to_owned())
        ]
    );
}

/// A kind the table does not know: what a newer server could send.
fn unknown_kind() -> Vec<u8> {
    envelope(
        "v1",
        "Frobnicator",
        Msg::default().msg(1, Msg::default().str(1, "f")),
    )
}

#[tokio::test]
async fn a_list_that_does_not_transcode_fails_and_falls_back_to_json() {
    let layer = WireLayer::new(Wire::Auto, WireCounters::default());
    let json = r#"{"kind":"FrobnicatorList","apiVersion":"v1","metadata":{},"items":null}"#;
    let (mut svc, seen) = server(vec![
        response(200, PROTOBUF, vec![unknown_kind()]),
        response(200, "application/json", vec![json.as_bytes().to_vec()]),
    ]);
    let mut svc = layer.layer(&mut svc);
    let get = || {
        Request::get("/api/v1/frobnicators")
            .body(kube::client::Body::empty())
            .unwrap()
    };
    let err = svc.call(get()).await.err().unwrap();
    let err = err.downcast::<WireError>().unwrap();
    assert!(matches!(*err, WireError::Transcode { .. }), "{err}");
    assert!(err.to_string().contains("v1/frobnicators"), "{err}");
    assert!(layer.is_json_only("v1/frobnicators"));
    let res = svc.call(get()).await.unwrap();
    assert_eq!(read(res.into_body()).await.unwrap(), json);
    let accepts: Vec<_> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|(_, a)| a.clone())
        .collect();
    assert_eq!(accepts, [Some(ACCEPT_PROTOBUF.to_owned()), None]);
}

#[tokio::test]
async fn a_watch_frame_that_does_not_transcode_ends_the_stream_after_the_good_ones() {
    let a = envelope("v1", "ConfigMap", config_map("a", "8"));
    let mut stream = frame("ADDED", &a);
    stream.extend(frame("ADDED", &unknown_kind()));
    stream.extend(frame("ADDED", &a));
    let watch = "application/vnd.kubernetes.protobuf;stream=watch";
    let layer = WireLayer::new(Wire::Auto, WireCounters::default());
    let (mut svc, _) = server(vec![response(200, watch, vec![stream])]);
    let mut svc = layer.layer(&mut svc);
    let req = Request::get("/api/v1/namespaces/ns/configmaps?watch=true")
        .body(kube::client::Body::empty())
        .unwrap();
    let res = svc.call(req).await.unwrap();
    let mut body = res.into_body();
    // The chunk's events before the bad frame are not lost: the layer
    // hands on every whole frame as it reads it.
    let mut got = String::new();
    let mut error = None;
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(f) => got.push_str(std::str::from_utf8(&f.into_data().unwrap()).unwrap()),
            Err(e) => {
                error = Some(e);
                break;
            }
        }
    }
    let error = error.expect("the stream ends with an error");
    assert!(error.to_string().contains("Frobnicator"), "{error}");
    assert!(layer.is_json_only("v1/configmaps"));
    assert!(body.frame().await.is_none());
    assert_eq!(got, json_lines(&[("ADDED", &a)]));
}

#[tokio::test]
async fn an_oversized_frame_is_a_clear_error() {
    let prefix = u32::try_from(MAX_FRAME + 1).unwrap().to_be_bytes().to_vec();
    let watch = "application/vnd.kubernetes.protobuf;stream=watch";
    let layer = WireLayer::new(Wire::Auto, WireCounters::default());
    let (mut svc, _) = server(vec![response(200, watch, vec![prefix])]);
    let mut svc = layer.layer(&mut svc);
    let req = Request::get("/api/v1/pods?watch=true")
        .body(kube::client::Body::empty())
        .unwrap();
    let res = svc.call(req).await.unwrap();
    let err = read(res.into_body()).await.unwrap_err();
    assert!(
        err.to_string().contains("over the 16777216-byte limit"),
        "{err}"
    );
    // Not a transcoding failure: protobuf stays.
    assert!(!layer.is_json_only("v1/pods"));
}

#[tokio::test]
async fn a_protobuf_error_status_reaches_kube_as_its_api_error() {
    let layer = WireLayer::new(Wire::Auto, WireCounters::default());
    let (client, _) = client(&layer, vec![response(410, PROTOBUF, vec![status_gone()])]);
    let api = kube::Api::<ConfigMap>::namespaced(client, "ns");
    match api.list(&ListParams::default()).await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 410),
        other => panic!("{other:?}"),
    }
}
