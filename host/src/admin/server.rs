//! The host's two HTTP listeners.
//!
//! The metrics listener (`--metrics-addr`, default `0.0.0.0:9090`), where
//! the kubelet and Prometheus expect it: `/healthz` (liveness: the process
//! and its core tasks run), `/readyz` (every informer synced, every plugin
//! file loaded or reported broken; leadership plays no part), `/metrics`
//! (Prometheus, OpenMetrics text) and `/dead-letters` (JSON: the deltas
//! plugins gave up on, for `kubewasm dead-letters`). With `--metrics-auth`
//! the last two need a bearer token that may `get` them (see
//! [`super::auth`]); probes never do. Without it, `/dead-letters` answers
//! loopback clients only (403 otherwise): it names the objects plugins
//! failed on and their errors, which whoever reaches the listener from the
//! cluster network may not read; `kubectl port-forward` and a shell in the
//! Pod are loopback.
//!
//! The web view's listener (`--ui`, `--ui-addr`, default
//! `127.0.0.1:9091`): the page, its data and its stream (see
//! [`super::ui`]), answering only loopback and listed Host names (see
//! [`super::ui::guard`]). Never the metrics listener: what Prometheus may
//! reach is not what a person browsing the caches may.

use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio_util::sync::CancellationToken;

use super::auth::Authenticator;
use super::tls::listener::{Peer, SniffListener};
use super::ui::{AllowedHosts, UiAddr};
use crate::telemetry::Telemetry;
use crate::telemetry::metrics::CONTENT_TYPE;

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
    #[error("cannot listen on {addr} for {what}: {source} ({hint})")]
    Bind {
        addr: String,
        what: &'static str,
        hint: &'static str,
        source: std::io::Error,
    },
}

/// A running listener; [`stop`](Self::stop) ends it.
#[derive(Debug)]
pub struct Listener {
    addr: SocketAddr,
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Listener {
    /// Binds `addr` and serves `app(stop)` until [`stop`](Self::stop);
    /// `stop` is cancelled first, so open streams end at once.
    async fn start(
        addr: &str,
        what: &'static str,
        hint: &'static str,
        app: impl FnOnce(CancellationToken) -> Router,
    ) -> Result<Self, ServerError> {
        Self::start_on(addr, what, hint, None, app).await
    }

    /// [`start`](Self::start), on one port for plain HTTP and, with `tls`,
    /// TLS (see [`super::tls::listener`]); each request carries its
    /// [`Peer`] (`ConnectInfo<Peer>`).
    async fn start_on(
        addr: &str,
        what: &'static str,
        hint: &'static str,
        tls: Option<Arc<rustls::ServerConfig>>,
        app: impl FnOnce(CancellationToken) -> Router,
    ) -> Result<Self, ServerError> {
        let bind_error = |source| ServerError::Bind {
            addr: addr.to_owned(),
            what,
            hint,
            source,
        };
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(bind_error)?;
        let local = listener.local_addr().map_err(bind_error)?;
        let listener = SniffListener::new(listener, tls).map_err(bind_error)?;
        let cancel = CancellationToken::new();
        let shutdown = cancel.clone().cancelled_owned();
        let app = app(cancel.clone());
        let task = tokio::spawn(async move {
            let app = app.into_make_service_with_connect_info::<Peer>();
            if let Err(e) = axum::serve(listener, app)
                .with_graceful_shutdown(shutdown)
                .await
            {
                tracing::error!(listener = what, error = %e, "listener failed");
            }
        });
        Ok(Self {
            addr: local,
            cancel,
            task,
        })
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

/// The metrics listener: probes, metrics and dead letters.
#[derive(Debug)]
pub struct MetricsServer;

impl MetricsServer {
    /// Binds `addr` and serves until stopped, without authentication;
    /// `None` when `addr` is `off`.
    pub async fn start(
        addr: &MetricsAddr,
        telemetry: Telemetry,
    ) -> Result<Option<Listener>, ServerError> {
        Self::start_with(addr, telemetry, None, None).await
    }

    /// [`start`](Self::start), with `/metrics` and `/dead-letters` behind
    /// `auth` when given, and served over TLS only with `tls` (probes
    /// answer plain HTTP and TLS on the same port).
    pub async fn start_with(
        addr: &MetricsAddr,
        telemetry: Telemetry,
        auth: Option<Arc<Authenticator>>,
        tls: Option<Arc<rustls::ServerConfig>>,
    ) -> Result<Option<Listener>, ServerError> {
        let MetricsAddr::Listen(addr) = addr else {
            return Ok(None);
        };
        let guarded = auth.is_some();
        let secure = tls.is_some();
        let listener = Listener::start_on(
            addr,
            "/healthz, /readyz and /metrics",
            "pass --metrics-addr HOST:PORT for another address, or --metrics-addr off",
            tls,
            |_| router_with(telemetry, auth, secure),
        )
        .await?;
        MetricsListening {
            addr: listener.local_addr(),
            auth: guarded,
            tls: secure,
        }
        .emit();
        Ok(Some(listener))
    }
}

/// The web view's listener.
#[derive(Debug)]
pub struct UiServer;

impl UiServer {
    /// Binds `addr` and serves the web view until stopped, answering the
    /// Host names `hosts` allows.
    pub async fn start(
        addr: &UiAddr,
        telemetry: Telemetry,
        hosts: AllowedHosts,
    ) -> Result<Listener, ServerError> {
        let listener = Listener::start(
            addr.as_str(),
            "the web view",
            "pass --ui-addr HOST:PORT for another address (it stays on 127.0.0.1 unless a host is given)",
            |stop| super::ui::router(telemetry, stop, hosts),
        )
        .await?;
        UiListening {
            addr: listener.local_addr(),
        }
        .emit();
        Ok(listener)
    }
}

/// The routes, for serving and for tests, without authentication.
pub fn router(telemetry: Telemetry) -> Router {
    router_with(telemetry, None, false)
}

/// The routes, `/metrics` and `/dead-letters` behind `auth` when given;
/// without it, `/dead-letters` answers loopback clients only. With
/// `tls_only`, those two refuse a plain connection before it is
/// authenticated (its token has crossed the network in clear).
pub fn router_with(
    telemetry: Telemetry,
    auth: Option<Arc<Authenticator>>,
    tls_only: bool,
) -> Router {
    let mut dead = Router::new().route("/dead-letters", get(dead_letters));
    if auth.is_none() {
        dead = dead.route_layer(axum::middleware::from_fn(loopback_only));
    }
    let mut guarded = Router::new().route("/metrics", get(metrics)).merge(dead);
    if let Some(auth) = auth {
        guarded = guarded.layer(axum::middleware::from_fn_with_state(
            auth,
            super::auth::require,
        ));
    }
    if tls_only {
        guarded = guarded.layer(axum::middleware::from_fn(over_tls_only));
    }
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .merge(guarded)
        .with_state(telemetry)
}

/// Whether `ip` is this machine's loopback, IPv4-mapped spelling included.
fn is_loopback(ip: std::net::IpAddr) -> bool {
    match ip {
        std::net::IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map_or(v6.is_loopback(), |v4| v4.is_loopback()),
        v4 => v4.is_loopback(),
    }
}

/// Passes requests that came over TLS.
async fn over_tls_only(req: Request, next: Next) -> Response {
    let peer = req.extensions().get::<ConnectInfo<Peer>>().map(|c| c.0);
    if peer.is_some_and(|p| p.tls) {
        return next.run(req).await;
    }
    tracing::debug!(
        peer = ?peer.map(|p| p.addr),
        path = req.uri().path(),
        "refused a plain HTTP request for a path served over TLS only"
    );
    (
        StatusCode::BAD_REQUEST,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!(
            "Client sent an HTTP request to an HTTPS server: {} is served over TLS only (the host runs with --metrics-auth or --metrics-cert-dir); ask https://, e.g. kubewasm probe {} --token-file FILE --insecure-skip-tls-verify (or --ca-file FILE)\n",
            req.uri().path(),
            req.uri().path()
        ),
    )
        .into_response()
}

/// Passes requests from a loopback peer only (a request without a known
/// peer is refused): `/dead-letters` without `--metrics-auth`.
async fn loopback_only(req: Request, next: Next) -> Response {
    let peer = req
        .extensions()
        .get::<ConnectInfo<Peer>>()
        .map(|c| c.0.addr);
    if peer.is_some_and(|p| is_loopback(p.ip())) {
        return next.run(req).await;
    }
    tracing::debug!(
        peer = ?peer,
        path = req.uri().path(),
        "refused a request from off this machine: --metrics-auth is off"
    );
    (
        StatusCode::FORBIDDEN,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!(
            "Forbidden: without --metrics-auth, {} answers loopback clients only (it names the objects plugins failed on): ask from the host's machine or Pod (kubectl port-forward, kubectl exec), or run the host with --metrics-auth and send a token that may get it\n",
            req.uri().path()
        ),
    )
        .into_response()
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

/// Ready or not, and then which replica leads: a probe reads the code, a
/// person the text (a follower is ready, and delivers nothing).
async fn readyz(State(t): State<Telemetry>) -> Response {
    let mut response = status(t.readiness());
    let mut notes = t.notes();
    if let Some(lease) = t.leader().lease() {
        notes.insert(0, lease.line());
    }
    if !notes.is_empty() {
        let body = match t.readiness() {
            Ok(()) => "ok\n".to_owned(),
            Err(reasons) => report(&reasons),
        };
        *response.body_mut() = axum::body::Body::from(body + &report(&notes));
    }
    response
}

async fn dead_letters(State(t): State<Telemetry>) -> Response {
    match serde_json::to_string(&super::ui::dead_letters(&t)) {
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

/// The metrics and health listener is up.
#[derive(Debug)]
pub struct MetricsListening {
    pub addr: std::net::SocketAddr,
    /// `/metrics` and `/dead-letters` need a bearer token (`--metrics-auth`).
    pub auth: bool,
    /// `/metrics` and `/dead-letters` are served over TLS only.
    pub tls: bool,
}

impl MetricsListening {
    pub fn emit(self) {
        if self.auth || self.addr.ip().is_loopback() {
            tracing::info!(addr = %self.addr, auth = self.auth, tls = self.tls, "metrics listening");
        } else {
            tracing::info!(addr = %self.addr, auth = self.auth, tls = self.tls, "metrics listening; without --metrics-auth, /dead-letters answers loopback clients only");
        }
    }
}

/// The web view's listener is up.
#[derive(Debug)]
pub struct UiListening {
    pub addr: std::net::SocketAddr,
}

impl UiListening {
    pub fn emit(self) {
        let url = format!("http://{}/ui", self.addr);
        if self.addr.ip().is_loopback() {
            tracing::info!(url = %url, "web view serving");
        } else {
            tracing::warn!(url = %url, "web view serving on a non-loopback address: whoever reaches it sees the host's plugins, caches and feed (Secrets redacted); list the names clients use with --ui-allowed-host");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin::auth::{ReviewError, Reviewer, User};
    use crate::telemetry::Identity;
    use futures::future::BoxFuture;
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

    /// A GET with extra header lines: (status, head, body).
    async fn get_with(addr: SocketAddr, path: &str, headers: &str) -> (u16, String, String) {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(
            format!("GET {path} HTTP/1.1\r\n{headers}Connection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        let (head, body) = out.split_once("\r\n\r\n").unwrap();
        let code = head[9..12].parse().unwrap();
        (code, head.to_owned(), body.to_owned())
    }

    async fn get(addr: SocketAddr, path: &str) -> (u16, String, String) {
        get_with(addr, path, &format!("Host: {addr}\r\n")).await
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
        // The web view is never on this listener.
        assert_eq!(get(addr, "/ui").await.0, 404);
        assert_eq!(get(addr, "/ui/api/state").await.0, 404);
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
    async fn the_web_view_has_its_own_listener_and_its_streams_end_on_stop() {
        let t = Telemetry::new(Identity::new(None, None, None));
        let server = UiServer::start(&":0".parse().unwrap(), t.clone(), AllowedHosts::default())
            .await
            .unwrap();
        let addr = server.local_addr();
        assert!(addr.ip().is_loopback(), "{addr}");
        let (code, head, body) = get(addr, "/ui").await;
        assert_eq!(code, 200);
        assert!(head.to_lowercase().contains("text/html"), "{head}");
        assert!(
            head.to_lowercase().contains("frame-ancestors 'none'"),
            "{head}"
        );
        assert!(body.contains("/ui/app.js"), "{body}");
        assert_eq!(get(addr, "/ui/app.js").await.0, 200);
        assert_eq!(get(addr, "/ui/api/objects").await.0, 400);
        let (code, _, body) = get(addr, "/ui/api/state").await;
        assert_eq!(code, 200, "{body}");
        assert!(body.contains("\"plugins\":[]"), "{body}");
        // Not the metrics listener's routes.
        for path in ["/metrics", "/healthz", "/dead-letters"] {
            assert_eq!(get(addr, path).await.0, 404, "{path}");
        }
        // A foreign Host (DNS rebinding) and a foreign Origin are refused.
        let (code, _, body) = get_with(addr, "/ui/api/state", "Host: evil.example:9091\r\n").await;
        assert_eq!(code, 421, "{body}");
        assert!(
            body.contains("evil.example") && body.contains("--ui-allowed-host"),
            "{body}"
        );
        let (code, _, body) = get_with(
            addr,
            "/ui/events",
            &format!("Host: {addr}\r\nOrigin: http://evil.example\r\n"),
        )
        .await;
        assert_eq!(code, 403, "{body}");

        // An open page: the first event is the state; the feed counts it.
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(
            format!(
                "GET /ui/events?plugin=p HTTP/1.1\r\nHost: localhost:{}\r\n\r\n",
                addr.port()
            )
            .as_bytes(),
        )
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

    /// Token `scraper` may get /metrics, `reader` /dead-letters; `nobody`
    /// may get nothing.
    struct Fake;

    impl Reviewer for Fake {
        fn user<'a>(&'a self, token: &'a str) -> BoxFuture<'a, Result<Option<User>, ReviewError>> {
            Box::pin(async move {
                Ok(["scraper", "reader", "nobody"]
                    .contains(&token)
                    .then(|| User {
                        name: token.to_owned(),
                        ..User::default()
                    }))
            })
        }

        fn allowed<'a>(
            &'a self,
            user: &'a User,
            _verb: &'a str,
            path: &'a str,
        ) -> BoxFuture<'a, Result<Result<(), Option<String>>, ReviewError>> {
            Box::pin(async move {
                Ok(
                    if (user.name.as_str(), path) == ("scraper", "/metrics")
                        || (user.name.as_str(), path) == ("reader", "/dead-letters")
                    {
                        Ok(())
                    } else {
                        Err(None)
                    },
                )
            })
        }
    }

    #[tokio::test]
    async fn with_auth_metrics_and_dead_letters_need_a_token_and_probes_do_not() {
        let t = Telemetry::new(Identity::new(None, None, None));
        let server = MetricsServer::start_with(
            &"127.0.0.1:0".parse().unwrap(),
            t,
            Some(Arc::new(Authenticator::new(Fake))),
            None,
        )
        .await
        .unwrap()
        .unwrap();
        let addr = server.local_addr();
        assert_eq!(get(addr, "/healthz").await.0, 200);
        assert_eq!(get(addr, "/readyz").await.0, 503);
        let host = format!("Host: {addr}\r\n");
        for path in ["/metrics", "/dead-letters"] {
            let (code, head, body) = get(addr, path).await;
            assert_eq!(code, 401, "{path}: {body}");
            assert!(
                head.to_lowercase().contains("www-authenticate: bearer"),
                "{head}"
            );
            let (code, _, body) = get_with(
                addr,
                path,
                &format!("{host}Authorization: Bearer stolen\r\n"),
            )
            .await;
            assert_eq!(code, 401, "{path}: {body}");
            let (code, _, body) = get_with(
                addr,
                path,
                &format!("{host}Authorization: Bearer nobody\r\n"),
            )
            .await;
            assert_eq!(code, 403, "{path}: {body}");
            assert!(
                body.contains("nonResourceURLs") && body.contains(path),
                "{body}"
            );
        }
        let (code, _, body) = get_with(
            addr,
            "/metrics",
            &format!("{host}Authorization: Bearer scraper\r\n"),
        )
        .await;
        assert_eq!(code, 200, "{body}");
        assert!(body.contains("kubewasm_leader"), "{body}");
        let (code, _, _) = get_with(
            addr,
            "/dead-letters",
            &format!("{host}Authorization: Bearer scraper\r\n"),
        )
        .await;
        assert_eq!(code, 403, "a scraper may read metrics, not dead letters");
        server.stop().await;
    }

    /// `router` answering `path` for a client at `peer` (`None`: a request
    /// that did not come through a listener), with `token` if given.
    async fn ask(
        router: &Router,
        peer: Option<&str>,
        path: &str,
        token: Option<&str>,
    ) -> (u16, String) {
        use tower::ServiceExt;
        let mut req = axum::http::Request::get(path);
        if let Some(token) = token {
            req = req.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let mut req = req.body(axum::body::Body::empty()).unwrap();
        if let Some(peer) = peer {
            req.extensions_mut().insert(ConnectInfo(Peer {
                addr: peer.parse::<SocketAddr>().unwrap(),
                tls: false,
            }));
        }
        let res = router.clone().oneshot(req).await.unwrap();
        let code = res.status().as_u16();
        let body = axum::body::to_bytes(res.into_body(), 1 << 20)
            .await
            .unwrap();
        (code, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn without_auth_dead_letters_answer_loopback_clients_only() {
        let t = Telemetry::new(Identity::new(None, None, None));
        let open = router(t.clone());
        for peer in [
            "127.0.0.1:40000",
            "127.3.2.1:1",
            "[::1]:40000",
            "[::ffff:127.0.0.1]:1",
        ] {
            assert_eq!(
                ask(&open, Some(peer), "/dead-letters", None).await,
                (200, "[]".to_owned()),
                "{peer}"
            );
        }
        for peer in [
            Some("10.0.0.7:40000"),
            Some("[2001:db8::1]:1"),
            Some("[::ffff:10.0.0.7]:1"),
            None,
        ] {
            let (code, body) = ask(&open, peer, "/dead-letters", None).await;
            assert_eq!(code, 403, "{peer:?}: {body}");
            assert!(
                body.contains(
                    "without --metrics-auth, /dead-letters answers loopback clients only"
                ) && body.contains("kubectl port-forward"),
                "{body}"
            );
            // Probes and metrics stay open to the cluster network.
            for path in ["/healthz", "/metrics"] {
                assert_eq!(ask(&open, peer, path, None).await.0, 200, "{peer:?} {path}");
            }
        }
        // With auth, the token decides, wherever the client is; the same
        // authentication as /metrics.
        let guarded = router_with(t, Some(Arc::new(Authenticator::new(Fake))), false);
        let remote = Some("10.0.0.7:40000");
        for (path, token, code) in [
            ("/dead-letters", None, 401),
            ("/dead-letters", Some("nobody"), 403),
            ("/dead-letters", Some("scraper"), 403),
            ("/dead-letters", Some("reader"), 200),
            ("/metrics", Some("reader"), 403),
            ("/metrics", Some("scraper"), 200),
        ] {
            for peer in [remote, Some("127.0.0.1:1")] {
                let (got, body) = ask(&guarded, peer, path, token).await;
                assert_eq!(got, code, "{path} {token:?} from {peer:?}: {body}");
            }
        }
    }
}
