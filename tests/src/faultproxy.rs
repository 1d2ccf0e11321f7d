//! A plain-HTTP proxy in front of the test API server that answers writes
//! with 429 and 5xx storms: the API server itself cannot be told to refuse
//! writes on demand. Reads and watches are forwarded untouched (streamed),
//! and writes outside a storm too, through an admin `kube::Client`, so the
//! host behind it needs no credentials: its kubeconfig names only the proxy.
//! An injected answer never reaches the API server, so the write did not
//! happen and the host must try it again.

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
        Ok(resp) => {
            let (parts, body) = resp.into_parts();
            Response::from_parts(parts, Body::new(body))
        }
        Err(e) => (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    }
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
