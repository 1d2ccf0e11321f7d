//! A hostile OCI registry on 127.0.0.1 for the tests: each repository's
//! first path segment picks a misbehaviour. It never materialises what it
//! sends (a multi-GiB manifest is a stream of blank chunks) and counts the
//! manifest requests it has started and the streams still open, so a test
//! can wait on the host having reached it rather than on a sleep.
//!
//! | repository | answer to a manifest request |
//! |---|---|
//! | `huge/...` | 200, an OCI manifest media type, `huge` bytes streamed without a length |
//! | `trickle/...` | 200, then one byte every 500 ms, without end |
//! | `errorbody/...` | 500 with a 16 MiB body |
//! | `redirect/...` | 307 to the same path on 127.0.0.2 (another host) |

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use futures::{StreamExt, stream};
use std::sync::Mutex;

const MANIFEST_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";

/// What the registry has seen.
#[derive(Debug, Default)]
pub struct Seen {
    /// Manifest requests begun, by repository's first segment.
    pub manifests: Mutex<BTreeMap<String, u64>>,
    /// Bytes sent of streamed bodies.
    pub streamed: AtomicU64,
    /// Streams still open.
    pub open: AtomicU64,
}

impl Seen {
    pub fn manifests(&self, kind: &str) -> u64 {
        self.manifests
            .lock()
            .map_or(0, |m| m.get(kind).copied().unwrap_or(0))
    }
}

#[derive(Clone)]
struct Registry {
    seen: Arc<Seen>,
    huge: u64,
    port: u16,
}

/// A running hostile registry; stops when dropped.
pub struct HostileRegistry {
    pub addr: SocketAddr,
    pub seen: Arc<Seen>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for HostileRegistry {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Decrements the open-stream count when the stream is dropped (the
/// client went away, or the body ended).
struct Open(Arc<Seen>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
    }
}

impl HostileRegistry {
    /// Serves on 127.0.0.1 (a free port); `huge` is the size of the
    /// `huge/...` manifests.
    pub async fn start(huge: u64) -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let seen = Arc::new(Seen::default());
        let registry = Registry {
            seen: seen.clone(),
            huge,
            port: addr.port(),
        };
        let app = axum::Router::new().fallback(answer).with_state(registry);
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { addr, seen, task })
    }

    /// `host:port` as a reference and `plainHttpRegistries` name it.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }
}

async fn answer(State(r): State<Registry>, request: Request) -> Response {
    let path = request.uri().path().to_owned();
    if path == "/v2/" || path == "/v2" {
        return Response::new(Body::from("{}"));
    }
    let Some((repo, _reference)) = path
        .strip_prefix("/v2/")
        .and_then(|p| p.split_once("/manifests/"))
    else {
        return status(StatusCode::NOT_FOUND, Body::from("{\"errors\":[]}"));
    };
    let kind = repo.split('/').next().unwrap_or("").to_owned();
    if let Ok(mut m) = r.seen.manifests.lock() {
        *m.entry(kind.clone()).or_default() += 1;
    }
    match kind.as_str() {
        "huge" => {
            let seen = r.seen.clone();
            seen.open.fetch_add(1, Ordering::SeqCst);
            let open = Arc::new(Open(seen.clone()));
            let chunk = Bytes::from(vec![b' '; 64 << 10]);
            let chunks = r.huge.div_ceil(64 << 10);
            let body = stream::iter(0..chunks).map(move |_| {
                let _keep = &open;
                seen.streamed.fetch_add(64 << 10, Ordering::Relaxed);
                Ok::<_, std::io::Error>(chunk.clone())
            });
            manifest(Body::from_stream(body))
        }
        "trickle" => {
            let seen = r.seen.clone();
            seen.open.fetch_add(1, Ordering::SeqCst);
            let open = Arc::new(Open(seen.clone()));
            let body = stream::unfold(0u64, move |n| {
                let (seen, _keep) = (seen.clone(), open.clone());
                async move {
                    if n > 0 {
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                    seen.streamed.fetch_add(1, Ordering::Relaxed);
                    Some((Ok::<_, std::io::Error>(Bytes::from_static(b" ")), n + 1))
                }
            });
            manifest(Body::from_stream(body))
        }
        "errorbody" => status(
            StatusCode::INTERNAL_SERVER_ERROR,
            Body::from(vec![b'E'; 16 << 20]),
        ),
        "redirect" => {
            let mut response = status(StatusCode::TEMPORARY_REDIRECT, Body::empty());
            if let Ok(to) = HeaderValue::from_str(&format!("http://127.0.0.2:{}{path}", r.port)) {
                response.headers_mut().insert(header::LOCATION, to);
            }
            response
        }
        _ => status(StatusCode::NOT_FOUND, Body::from("{\"errors\":[]}")),
    }
}

fn manifest(body: Body) -> Response {
    let mut response = Response::new(body);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(MANIFEST_TYPE),
    );
    response
}

fn status(code: StatusCode, body: Body) -> Response {
    let mut response = Response::new(body);
    *response.status_mut() = code;
    response
}

/// The peak resident memory of process `pid` (VmHWM), in bytes.
pub fn peak_rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}
