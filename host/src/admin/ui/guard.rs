//! Who the web view answers. It listens on 127.0.0.1 by default and is
//! reached with `kubectl port-forward` (which the API server authenticates
//! and authorizes: `create` on `pods/portforward`), so the listener trusts
//! whoever reaches it, and keeps browsers from reaching it for anyone else:
//!
//! - the Host header must name a loopback address or `localhost` (any
//!   port: a port-forward picks its own), or a name the operator lists
//!   (`--ui-allowed-host`); any other name is how a DNS-rebinding page
//!   would arrive (`evil.example` resolving to 127.0.0.1): 421;
//! - the page's data (`/ui/api/*`) and its event stream (`/ui/events`)
//!   answer only same-origin requests: an `Origin` header that is not
//!   this very host, or a browser's `Sec-Fetch-Site: cross-site`, is
//!   refused with 403 (the page itself never sends one to its own origin);
//! - every answer carries headers that keep it out of frames and other
//!   origins' contexts (CSP `frame-ancestors 'none'`, `nosniff`, no
//!   referrer).

use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The names the web view answers to besides loopback addresses and
/// `localhost`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowedHosts {
    names: Arc<[String]>,
}

impl AllowedHosts {
    /// `names`: host names or addresses, without ports, matched without
    /// regard to case.
    pub fn new<S: AsRef<str>>(names: &[S]) -> Self {
        Self {
            names: names
                .iter()
                .map(|n| n.as_ref().trim().trim_end_matches('.').to_ascii_lowercase())
                .filter(|n| !n.is_empty())
                .collect(),
        }
    }

    /// Whether `host` (a Host header's name, port removed) may be answered.
    pub fn allows(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        let bare = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(&host);
        if let Ok(ip) = bare.parse::<IpAddr>() {
            let mapped = match ip {
                IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
                v4 => v4,
            };
            if mapped.is_loopback() {
                return true;
            }
        } else if host == "localhost" || host.ends_with(".localhost") {
            // Browsers resolve these to loopback themselves (RFC 6761):
            // no DNS answer can point them elsewhere.
            return true;
        }
        self.names.iter().any(|n| {
            let n = n
                .strip_prefix('[')
                .and_then(|h| h.strip_suffix(']'))
                .unwrap_or(n);
            n == bare
        })
    }
}

/// The name of a Host header's `name[:port]` (`[v6]:port` keeps its
/// brackets).
fn host_name(authority: &str) -> &str {
    if authority.starts_with('[') {
        return authority.split_inclusive(']').next().unwrap_or(authority);
    }
    authority.rsplit_once(':').map_or(authority, |(h, _)| h)
}

/// A refused request: 421 (a foreign Host) or 403 (a foreign origin),
/// and why, in plain text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub status: StatusCode,
    pub message: String,
}

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        (
            self.status,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("kubewasm web view: {}\n", self.message),
        )
            .into_response()
    }
}

fn refuse(status: StatusCode, message: String) -> Refused {
    Refused { status, message }
}

/// Whether the request may be answered; the refusal otherwise.
pub fn check(hosts: &AllowedHosts, path: &str, headers: &HeaderMap) -> Result<(), Refused> {
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        return Err(refuse(
            StatusCode::MISDIRECTED_REQUEST,
            "the request has no Host header".into(),
        ));
    };
    let host = host.trim();
    if !hosts.allows(host_name(host)) {
        return Err(refuse(
            StatusCode::MISDIRECTED_REQUEST,
            format!(
                "Host {host:?} is not a name this listener answers to: it answers localhost and loopback addresses (reach it with kubectl port-forward), and names given with --ui-allowed-host (uiAllowedHosts)"
            ),
        ));
    }
    let data = path.starts_with("/ui/api/") || path == "/ui/events";
    if !data {
        return Ok(());
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        let same = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
            .is_some_and(|authority| authority.eq_ignore_ascii_case(host));
        if !same {
            return Err(refuse(
                StatusCode::FORBIDDEN,
                format!(
                    "requests from origin {origin:?} are refused: the web view's data is only for its own page (http://{host}/ui)"
                ),
            ));
        }
    }
    if headers
        .get("sec-fetch-site")
        .is_some_and(|s| s.as_bytes().eq_ignore_ascii_case(b"cross-site"))
    {
        return Err(refuse(
            StatusCode::FORBIDDEN,
            "cross-site requests are refused: the web view's data is only for its own page".into(),
        ));
    }
    Ok(())
}

/// The middleware of the web view's listener.
pub async fn guard(State(hosts): State<AllowedHosts>, req: Request, next: Next) -> Response {
    if let Err(refusal) = check(&hosts, req.uri().path(), req.headers()) {
        tracing::debug!(
            path = req.uri().path(),
            host = ?req.headers().get(header::HOST),
            origin = ?req.headers().get(header::ORIGIN),
            status = refusal.status.as_u16(),
            "web view refused a request"
        );
        return refusal.into_response();
    }
    let mut res = next.run(req).await;
    let h = res.headers_mut();
    for (name, value) in [
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'",
        ),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "no-referrer"),
    ] {
        h.insert(name, HeaderValue::from_static(value));
    }
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    fn status(hosts: &AllowedHosts, path: &str, pairs: &[(&str, &str)]) -> u16 {
        match check(hosts, path, &headers(pairs)) {
            Ok(()) => 200,
            Err(r) => r.status.as_u16(),
        }
    }

    #[test]
    fn hosts_are_loopback_localhost_or_listed() {
        let none = AllowedHosts::default();
        for ok in [
            "127.0.0.1:9091",
            "127.0.0.1",
            "127.8.9.10:1",
            "localhost:8080",
            "LOCALHOST",
            "ui.localhost:1",
            "[::1]:9091",
            "[::ffff:127.0.0.1]:80",
        ] {
            assert_eq!(status(&none, "/ui", &[("host", ok)]), 200, "{ok}");
        }
        for bad in [
            "evil.example:9091",
            "localhost.evil.example",
            "10.0.0.5:9091",
            "[fe80::1]:9091",
            "0.0.0.0:9091",
            "",
        ] {
            assert_eq!(status(&none, "/ui", &[("host", bad)]), 421, "{bad}");
        }
        assert_eq!(status(&none, "/ui", &[]), 421);
        let listed = AllowedHosts::new(&["Kubewasm.internal.", "10.0.0.5", "[fe80::1]"]);
        assert_eq!(
            status(&listed, "/ui", &[("host", "kubewasm.INTERNAL:443")]),
            200
        );
        assert_eq!(status(&listed, "/ui", &[("host", "10.0.0.5:9091")]), 200);
        assert_eq!(status(&listed, "/ui", &[("host", "[fe80::1]:9091")]), 200);
        assert_eq!(status(&listed, "/ui", &[("host", "other.internal")]), 421);
        let refused = check(&none, "/ui", &headers(&[("host", "evil.example")])).unwrap_err();
        assert!(refused.message.contains("\"evil.example\""), "{refused:?}");
        let res = refused.into_response();
        assert!(
            res.headers()[header::CONTENT_TYPE]
                .to_str()
                .unwrap()
                .starts_with("text/plain")
        );
    }

    #[test]
    fn data_and_the_stream_answer_only_their_own_origin() {
        let none = AllowedHosts::default();
        let host = ("host", "localhost:8080");
        for path in ["/ui/events", "/ui/api/object", "/ui/api/state"] {
            assert_eq!(status(&none, path, &[host]), 200, "{path}");
            assert_eq!(
                status(&none, path, &[host, ("origin", "http://localhost:8080")]),
                200
            );
            for bad in [
                "http://evil.example",
                "http://localhost:8081",
                "null",
                "file://",
                "http://localhost:8080.evil.example",
            ] {
                assert_eq!(
                    status(&none, path, &[host, ("origin", bad)]),
                    403,
                    "{path} {bad}"
                );
            }
            assert_eq!(
                status(&none, path, &[host, ("sec-fetch-site", "cross-site")]),
                403
            );
            assert_eq!(
                status(&none, path, &[host, ("sec-fetch-site", "same-origin")]),
                200
            );
        }
        // The page may be opened from a link elsewhere: navigations pass.
        assert_eq!(
            status(&none, "/ui", &[host, ("sec-fetch-site", "cross-site")]),
            200
        );
    }
}
