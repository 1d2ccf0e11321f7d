//! A scripted mock API server on tower-test: each expected request is
//! checked (method, path, query) and answered with a JSON body or a watch
//! stream the test feeds event by event and can cut off.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod deltas;

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use futures::channel::mpsc;
use http::{Request, Response, StatusCode};
use http_body::Frame;
use http_body_util::StreamBody;
use kube::client::Body;
use serde_json::Value;

pub type MockBody = StreamBody<mpsc::UnboundedReceiver<Result<Frame<Bytes>, Infallible>>>;
pub type Handle = tower_test::mock::Handle<Request<Body>, Response<MockBody>>;

/// A client whose every request goes to the returned handle.
pub fn mock_client() -> (kube::Client, Handle) {
    let (svc, handle) = tower_test::mock::pair::<Request<Body>, Response<MockBody>>();
    (kube::Client::new(svc, "default"), handle)
}

/// A request as the test saw it.
#[derive(Debug)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub query: String,
    pub content_type: Option<String>,
    pub body: Option<Value>,
}

impl Seen {
    pub fn param(&self, key: &str) -> Option<String> {
        self.query.split('&').find_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            (k == key).then(|| percent_decode(v))
        })
    }
}

fn percent_decode(v: &str) -> String {
    let bytes = v.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Ok(b) = u8::from_str_radix(&v[i + 1..i + 3], 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(if bytes[i] == b'+' { b' ' } else { bytes[i] });
        i += 1;
    }
    String::from_utf8(out).unwrap()
}

/// A watch response the test writes events into; dropping it ends the
/// stream (a dropped connection).
pub struct WatchFeed {
    tx: mpsc::UnboundedSender<Result<Frame<Bytes>, Infallible>>,
}

impl WatchFeed {
    pub fn send(&self, event_type: &str, object: Value) {
        let line = serde_json::json!({"type": event_type, "object": object}).to_string() + "\n";
        self.tx
            .unbounded_send(Ok(Frame::data(Bytes::from(line))))
            .expect("watch stream closed by the client");
    }
    /// Writes `line` as it is (plus the newline): a malformed event.
    pub fn send_raw(&self, line: &str) {
        self.tx
            .unbounded_send(Ok(Frame::data(Bytes::from(format!("{line}\n")))))
            .expect("watch stream closed by the client");
    }
    pub fn bookmark(&self, rv: &str, initial_events_end: bool) {
        let mut meta = serde_json::json!({"resourceVersion": rv});
        if initial_events_end {
            meta["annotations"] = serde_json::json!({"k8s.io/initial-events-end": "true"});
        }
        self.send(
            "BOOKMARK",
            serde_json::json!({"kind": "ConfigMap", "apiVersion": "v1", "metadata": meta}),
        );
    }
    pub fn gone(&self) {
        self.send(
            "ERROR",
            serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                "message": "too old resource version", "reason": "Expired", "code": 410}),
        );
    }
}

/// Takes the next request, within 30 s.
pub async fn next(
    handle: &mut Handle,
) -> (Seen, tower_test::mock::SendResponse<Response<MockBody>>) {
    let (req, send) = tokio::time::timeout(Duration::from_secs(30), handle.next_request())
        .await
        .expect("no request within 30s")
        .expect("client gone");
    let (parts, body) = req.into_parts();
    let bytes = http_body_util::BodyExt::collect(body)
        .await
        .unwrap()
        .to_bytes();
    let seen = Seen {
        method: parts.method.to_string(),
        path: parts.uri.path().to_owned(),
        query: parts.uri.query().unwrap_or("").to_owned(),
        content_type: parts
            .headers
            .get(http::header::CONTENT_TYPE)
            .map(|v| v.to_str().unwrap().to_owned()),
        body: (!bytes.is_empty()).then(|| serde_json::from_slice(&bytes).unwrap()),
    };
    (seen, send)
}

pub fn json_response(status: u16, body: &Value) -> Response<MockBody> {
    let (tx, rx) = mpsc::unbounded();
    tx.unbounded_send(Ok(Frame::data(Bytes::from(body.to_string()))))
        .unwrap();
    drop(tx);
    Response::builder()
        .status(StatusCode::from_u16(status).unwrap())
        .header("content-type", "application/json")
        .body(StreamBody::new(rx))
        .unwrap()
}

pub fn status(code: u16, reason: &str, message: &str) -> Response<MockBody> {
    json_response(
        code,
        &serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": message, "reason": reason, "code": code}),
    )
}

pub fn watch_response() -> (Response<MockBody>, WatchFeed) {
    let (tx, rx) = mpsc::unbounded();
    let resp = Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .body(StreamBody::new(rx))
        .unwrap();
    (resp, WatchFeed { tx })
}

/// A ConfigMap as the server returns it.
pub fn configmap(ns: &str, name: &str, rv: &str, value: &str) -> Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"namespace": ns, "name": name, "uid": format!("uid-{name}"), "resourceVersion": rv,
            "managedFields": [{"manager": "kubectl", "operation": "Apply"}]},
        "data": {"v": value}
    })
}

pub fn list(rv: &str, items: Vec<Value>) -> Value {
    // Real list items carry no apiVersion/kind.
    let items: Vec<Value> = items
        .into_iter()
        .map(|mut i| {
            let o = i.as_object_mut().unwrap();
            o.remove("apiVersion");
            o.remove("kind");
            i
        })
        .collect();
    serde_json::json!({"apiVersion": "v1", "kind": "ConfigMapList", "metadata": {"resourceVersion": rv}, "items": items})
}
