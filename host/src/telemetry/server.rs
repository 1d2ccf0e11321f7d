//! The one HTTP listener of the host (`--metrics-addr`): `/healthz`
//! (liveness: the process and its core tasks run), `/readyz` (every
//! informer synced, every plugin file loaded or reported broken; leadership
//! plays no part), `/metrics` (Prometheus, OpenMetrics text) and
//! `/dead-letters` (JSON: the deltas plugins gave up on, for `kubewasm
//! dead-letters`); with `--ui`, the live web view under `/ui` (see
//! [`super::ui`]).

use std::net::SocketAddr;
use std::str::FromStr;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio_util::sync::CancellationToken;

use super::Telemetry;
use super::events::MetricsListening;
use super::metrics::CONTENT_TYPE;

/// The default listen address.
pub const DEFAULT_ADDR: &str = "0.0.0.0:9090";

/// Where the listener binds, or `off`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetricsAddr {
    Off,
    /// `HOST:PORT` (port 0 picks a free port).
    Listen(String),
}

impl Default for MetricsAddr {
    fn default() -> Self {
        MetricsAddr::Listen(DEFAULT_ADDR.to_owned())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid metrics address {0:?}: expected HOST:PORT, :PORT or off")]
pub struct AddrError(String);

impl FromStr for MetricsAddr {
    type Err = AddrError;

    fn from_str(s: &str) -> Result<Self, AddrError> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("off") {
            return Ok(MetricsAddr::Off);
        }
        let (host, port) = s.rsplit_once(':').ok_or_else(|| AddrError(s.to_owned()))?;
        port.parse::<u16>().map_err(|_| AddrError(s.to_owned()))?;
        if host.is_empty() {
            return Ok(MetricsAddr::Listen(format!("0.0.0.0:{port}")));
        }
        Ok(MetricsAddr::Listen(s.to_owned()))
    }
}

impl<'de> serde::Deserialize<'de> for MetricsAddr {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(
        "cannot listen on {addr} for /healthz, /readyz and /metrics: {source} (pass --metrics-addr HOST:PORT for another address, or --metrics-addr off)"
    )]
    Bind {
        addr: String,
        source: std::io::Error,
    },
}

/// The running listener; [`stop`](Self::stop) ends it.
#[derive(Debug)]
pub struct MetricsServer {
    addr: SocketAddr,
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl MetricsServer {
    /// Binds `addr` and serves until [`stop`](Self::stop); `None` when
    /// `addr` is `off`.
    pub async fn start(
        addr: &MetricsAddr,
        telemetry: Telemetry,
    ) -> Result<Option<Self>, ServerError> {
        Self::start_with(addr, telemetry, false).await
    }

    /// [`start`](Self::start), serving the web view under `/ui` when `ui`.
    pub async fn start_with(
        addr: &MetricsAddr,
        telemetry: Telemetry,
        ui: bool,
    ) -> Result<Option<Self>, ServerError> {
        let MetricsAddr::Listen(addr) = addr else {
            return Ok(None);
        };
        let bind_error = |source| ServerError::Bind {
            addr: addr.clone(),
            source,
        };
        let listener = tokio::net::TcpListener::bind(addr.as_str())
            .await
            .map_err(bind_error)?;
        let local = listener.local_addr().map_err(bind_error)?;
        let cancel = CancellationToken::new();
        let shutdown = cancel.clone().cancelled_owned();
        let mut app = router(telemetry.clone());
        if ui {
            app = app.merge(super::ui::router(telemetry, cancel.clone()));
        }
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app)
                .with_graceful_shutdown(shutdown)
                .await
            {
                tracing::error!(error = %e, "metrics listener failed");
            }
        });
        MetricsListening { addr: local, ui }.emit();
        Ok(Some(Self {
            addr: local,
            cancel,
            task,
        }))
    }

    /// The bound address (the real port when asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, lets requests in flight finish (a few seconds at
    /// most), and ends the task.
    pub async fn stop(self) {
        self.cancel.cancel();
        let mut task = self.task;
        if tokio::time::timeout(Duration::from_secs(5), &mut task)
            .await
            .is_err()
        {
            task.abort();
            let _ = task.await;
        }
    }
}

/// The routes, for serving and for tests.
pub fn router(telemetry: Telemetry) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/dead-letters", get(dead_letters))
        .with_state(telemetry)
}

/// A probe's body: `ok`, or one line per reason.
fn report(reasons: &[String]) -> String {
    reasons.iter().map(|r| format!("{r}\n")).collect()
}

fn status(result: Result<(), Vec<String>>) -> Response {
    let text = [(header::CONTENT_TYPE, "text/plain; charset=utf-8")];
    match result {
        Ok(()) => (StatusCode::OK, text, "ok\n").into_response(),
        Err(reasons) => (StatusCode::SERVICE_UNAVAILABLE, text, report(&reasons)).into_response(),
    }
}

async fn healthz(State(t): State<Telemetry>) -> Response {
    status(t.liveness())
}

async fn readyz(State(t): State<Telemetry>) -> Response {
    status(t.readiness())
}

async fn dead_letters(State(t): State<Telemetry>) -> Response {
    match serde_json::to_string(&t.dead_letters()) {
        Ok(body) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot encode dead letters: {e}\n"),
        )
            .into_response(),
    }
}

async fn metrics(State(t): State<Telemetry>) -> Response {
    match t.metrics().encode() {
        Ok(body) => (StatusCode::OK, [(header::CONTENT_TYPE, CONTENT_TYPE)], body).into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot encode metrics: {e}\n"),
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::Identity;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn addresses_parse() {
        assert_eq!("off".parse(), Ok(MetricsAddr::Off));
        assert_eq!(
            ":9090".parse(),
            Ok(MetricsAddr::Listen("0.0.0.0:9090".into()))
        );
        assert_eq!(
            "127.0.0.1:0".parse(),
            Ok(MetricsAddr::Listen("127.0.0.1:0".into()))
        );
        assert_eq!(
            "[::1]:9090".parse(),
            Ok(MetricsAddr::Listen("[::1]:9090".into()))
        );
        assert!("9090".parse::<MetricsAddr>().is_err());
        assert!("host:http".parse::<MetricsAddr>().is_err());
    }

    async fn get(addr: SocketAddr, path: &str) -> (u16, String, String) {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        let (head, body) = out.split_once("\r\n\r\n").unwrap();
        let code = head[9..12].parse().unwrap();
        (code, head.to_owned(), body.to_owned())
    }

    #[tokio::test]
    async fn serves_health_readiness_and_metrics_and_stops() {
        let t = Telemetry::new(Identity::new(None, None, None));
        let server = MetricsServer::start(&"127.0.0.1:0".parse().unwrap(), t.clone())
            .await
            .unwrap()
            .unwrap();
        let addr = server.local_addr();
        assert_ne!(addr.port(), 0);
        assert_eq!(get(addr, "/healthz").await.0, 200);
        let (code, _, body) = get(addr, "/readyz").await;
        assert_eq!(
            (code, body.as_str()),
            (503, "starting: connecting to the cluster\n")
        );
        let (code, head, body) = get(addr, "/metrics").await;
        assert_eq!(code, 200);
        assert!(
            head.to_lowercase()
                .contains("content-type: application/openmetrics-text"),
            "{head}"
        );
        assert!(body.contains("kubewasm_leader 1"), "{body}");
        let (code, head, body) = get(addr, "/dead-letters").await;
        assert_eq!((code, body.as_str()), (200, "[]"));
        assert!(head.to_lowercase().contains("application/json"), "{head}");
        // A second listener on the same port fails with the address named.
        let err = MetricsServer::start(&MetricsAddr::Listen(addr.to_string()), t.clone())
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&addr.to_string()) && err.contains("--metrics-addr"),
            "{err}"
        );
        assert!(
            MetricsServer::start(&MetricsAddr::Off, t)
                .await
                .unwrap()
                .is_none()
        );
        server.stop().await;
        assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    }

    #[tokio::test]
    async fn the_web_view_is_served_only_when_asked_and_its_streams_end_on_stop() {
        let t = Telemetry::new(Identity::new(None, None, None));
        let addr = "127.0.0.1:0".parse().unwrap();
        let plain = MetricsServer::start(&addr, t.clone())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(get(plain.local_addr(), "/ui").await.0, 404);
        plain.stop().await;

        let server = MetricsServer::start_with(&addr, t.clone(), true)
            .await
            .unwrap()
            .unwrap();
        let addr = server.local_addr();
        let (code, head, body) = get(addr, "/ui").await;
        assert_eq!(code, 200);
        assert!(head.to_lowercase().contains("text/html"), "{head}");
        assert!(body.contains("/ui/app.js"), "{body}");
        assert_eq!(get(addr, "/ui/app.js").await.0, 200);
        assert_eq!(get(addr, "/ui/api/objects").await.0, 400);
        let (code, _, body) = get(addr, "/ui/api/state").await;
        assert_eq!(code, 200, "{body}");
        assert!(body.contains("\"plugins\":[]"), "{body}");

        // An open page: the first event is the state; the feed counts it.
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /ui/events?plugin=p HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = vec![0u8; 4096];
        let mut got = String::new();
        while !got.contains("event: state") {
            let n = s.read(&mut buf).await.unwrap();
            assert!(n > 0, "{got}");
            got.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
        assert!(got.contains("text/event-stream"), "{got}");
        assert_eq!(t.feed().watchers(), 1);
        // Stopping ends the stream at once (not after the 5 s cutoff).
        let started = std::time::Instant::now();
        server.stop().await;
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
        while s.read(&mut buf).await.unwrap() > 0 {}
        assert_eq!(t.feed().watchers(), 0);
    }
}
