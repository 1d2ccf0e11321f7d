//! A plain-HTTP proxy in front of the test API server that answers writes
//! with 429 and 5xx storms: the API server itself cannot be told to refuse
//! writes on demand. Reads and watches are forwarded untouched (streamed),
//! and writes outside a storm too, through an admin `kube::Client`, so the
//! host behind it needs no credentials: its kubeconfig names only the proxy.
//! An injected answer never reaches the API server, so the write did not
//! happen and the host must try it again.
//!
//! It can also make a watcher relist, as a compacted etcd does: it cuts
//! the watches, holds the watch requests that follow (lists pass), and
//! answers them with 410 Expired once told to ([`FaultProxy::hold_watches`],
//! [`FaultProxy::expire_held_watches`]).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use tokio_util::sync::CancellationToken;

/// The answers a storm rotates through: (status, reason).
const FAULTS: [(u16, &str); 4] = [
    (429, "TooManyRequests"),
    (500, "InternalError"),
    (503, "ServiceUnavailable"),
    (504, "Timeout"),
];

struct Shared {
    client: kube::Client,
    storm: AtomicBool,
    /// Inject into one write in this many.
    one_in: AtomicU32,
    writes: AtomicU64,
    injected: AtomicU64,
    by_status: [AtomicU64; 4],
    /// Cancelled to end every watch stream forwarded so far.
    cut: std::sync::Mutex<CancellationToken>,
    /// Watch requests wait on this while held; cancelled to answer them.
    held: std::sync::Mutex<Option<CancellationToken>>,
    /// Watch requests waiting while held.
    waiting: AtomicU64,
    /// Watch requests forwarded.
    watches: AtomicU64,
}

/// The running proxy; stopped on drop.
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: CancellationToken,
}

impl FaultProxy {
    /// Listens on a free loopback port, forwarding to `client`'s server.
    pub async fn start(client: kube::Client) -> Self {
        let shared = Arc::new(Shared {
            client,
            storm: AtomicBool::new(false),
            one_in: AtomicU32::new(1),
            writes: AtomicU64::new(0),
            injected: AtomicU64::new(0),
            by_status: Default::default(),
            cut: std::sync::Mutex::new(CancellationToken::new()),
            held: std::sync::Mutex::new(None),
            waiting: AtomicU64::new(0),
            watches: AtomicU64::new(0),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the fault proxy");
        let addr = listener.local_addr().expect("the proxy's address");
        let app = axum::Router::new()
            .fallback(forward)
            .with_state(shared.clone());
        let stop = CancellationToken::new();
        let until = stop.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(until.cancelled_owned())
                .await;
        });
        Self { addr, shared, stop }
    }

    /// A kubeconfig in `dir` that names only the proxy.
    pub fn kubeconfig(&self, dir: &Path) -> PathBuf {
        let path = dir.join("proxy-kubeconfig");
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: proxy\n  cluster: {{server: \"http://{}\"}}\nusers:\n- name: proxy\n  user: {{}}\ncontexts:\n- name: proxy\n  context: {{cluster: proxy, user: proxy}}\ncurrent-context: proxy\n",
                self.addr
            ),
        )
        .expect("write the proxy kubeconfig");
        path
    }

    /// Starts a storm: one write in `one_in` gets an injected 429, 500,
    /// 503 or 504 (in turn) instead of reaching the server.
    pub fn storm(&self, one_in: u32) {
        self.shared.one_in.store(one_in.max(1), Ordering::SeqCst);
        self.shared.storm.store(true, Ordering::SeqCst);
    }

    /// Ends the storm: every write is forwarded.
    pub fn calm(&self) {
        self.shared.storm.store(false, Ordering::SeqCst);
    }

    /// Ends every watch stream forwarded so far and holds the watch
    /// requests that follow (unanswered) until
    /// [`FaultProxy::expire_held_watches`]; lists and writes pass.
    pub fn hold_watches(&self) {
        *self.shared.held.lock().unwrap() = Some(CancellationToken::new());
        let cut = std::mem::take(&mut *self.shared.cut.lock().unwrap());
        cut.cancel();
    }

    /// [`FaultProxy::hold_watches`] once some watch has been forwarded
    /// (its client's list is in); false before.
    pub fn hold_watches_once_watching(&self) -> bool {
        if self.shared.watches.load(Ordering::SeqCst) == 0 {
            return false;
        }
        self.hold_watches();
        true
    }

    /// Watch requests waiting since [`FaultProxy::hold_watches`].
    pub fn held_watches(&self) -> u64 {
        self.shared.waiting.load(Ordering::SeqCst)
    }

    /// Answers the held watch requests with a 410 Expired event, as the API
    /// server does for a resourceVersion compacted away (the watcher lists
    /// again), and forwards watches from then on.
    pub fn expire_held_watches(&self) {
        if let Some(held) = self.shared.held.lock().unwrap().take() {
            held.cancel();
        }
    }

    /// Writes answered by the proxy itself so far.
    pub fn injected(&self) -> u64 {
        self.shared.injected.load(Ordering::SeqCst)
    }

    /// Injected answers by status, in [`FAULTS`] order (429, 500, 503, 504).
    pub fn injected_by_status(&self) -> Vec<(u16, u64)> {
        FAULTS
            .iter()
            .zip(&self.shared.by_status)
            .map(|((code, _), n)| (*code, n.load(Ordering::SeqCst)))
            .collect()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn forward(State(shared): State<Arc<Shared>>, req: Request) -> Response {
    let write = matches!(
        *req.method(),
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    );
    if write {
        let n = shared.writes.fetch_add(1, Ordering::SeqCst);
        let one_in = u64::from(shared.one_in.load(Ordering::SeqCst));
        if shared.storm.load(Ordering::SeqCst) && n.is_multiple_of(one_in) {
            let turn = shared.injected.fetch_add(1, Ordering::SeqCst);
            let slot = usize::try_from(turn % FAULTS.len() as u64).unwrap_or(0);
            shared.by_status[slot].fetch_add(1, Ordering::SeqCst);
            return injected(FAULTS[slot]);
        }
    }
    let watch = req
        .uri()
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
    if watch {
        let held = shared.held.lock().unwrap().clone();
        if let Some(held) = held {
            shared.waiting.fetch_add(1, Ordering::SeqCst);
            held.cancelled().await;
            return expired();
        }
    }
    let (parts, body) = req.into_parts();
    let bytes = match body.collect().await {
        Ok(b) => b.to_bytes().to_vec(),
        Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    };
    let uri = parts
        .uri
        .path_and_query()
        .map_or_else(|| parts.uri.path().to_owned(), |p| p.as_str().to_owned());
    let mut out = axum::http::Request::builder().method(parts.method).uri(uri);
    for (name, value) in &parts.headers {
        if name != header::HOST && name != header::AUTHORIZATION && name != header::CONTENT_LENGTH {
            out = out.header(name, value);
        }
    }
    let Ok(out) = out.body(kube::client::Body::from(bytes)) else {
        return (StatusCode::BAD_REQUEST, "bad request").into_response();
    };
    match shared.client.send(out).await {
        Ok(resp) if watch => {
            shared.watches.fetch_add(1, Ordering::SeqCst);
            let (parts, body) = resp.into_parts();
            let cut = shared.cut.lock().unwrap().clone();
            let stream =
                futures::StreamExt::take_until(body.into_data_stream(), cut.cancelled_owned());
            Response::from_parts(parts, Body::from_stream(stream))
        }
        Ok(resp) => {
            let (parts, body) = resp.into_parts();
            Response::from_parts(parts, Body::new(body))
        }
        Err(e) => (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    }
}

/// A watch answered as the API server answers one from a compacted
/// resourceVersion: 200, then one ERROR event with a 410 Expired Status.
fn expired() -> Response {
    let event = serde_json::json!({
        "type": "ERROR",
        "object": {
            "kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "reason": "Expired", "code": 410,
            "message": "too old resource version (expired by the test's fault proxy)",
        },
    });
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        format!("{event}\n"),
    )
        .into_response()
}

/// An API-server-shaped refusal (a `Status` object), with `Retry-After`
/// on 429 as the server sends it.
fn injected((code, reason): (u16, &str)) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "reason": reason, "code": code,
        "message": format!("injected by the test's fault proxy: {reason}"),
    })
    .to_string();
    let mut resp = (status, [(header::CONTENT_TYPE, "application/json")], body).into_response();
    if code == 429 {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
    }
    resp
}
