//! `kubewasm probe`: an HTTP GET of the host's own listener, for exec
//! probes. Replicas on the host network of one node cannot all bind the same
//! port, so each listens on a free one (`--metrics-addr 127.0.0.1:0`),
//! records it (`--metrics-addr-file`), and the kubelet runs
//! `kubewasm probe /readyz --addr-file FILE` in the container (the image has
//! no shell or curl). Plain HTTP/1.0 over a std socket: no client stack for
//! one request. With `--metrics-auth`, `/metrics` and `/dead-letters` need a
//! bearer token (`--token-file`), sent over TLS only (rustls over the same
//! socket); probes never do.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::tls::client::{self, ClientTlsError, Verify};

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error(
        "cannot read the listener's address from {path}: {source} (is the host running with --metrics-addr-file {path}?)"
    )]
    AddrFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "cannot read a bearer token from {path}: {source} (pass --token-file with a file holding a Kubernetes token, e.g. from kubectl create token)"
    )]
    TokenFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("bad listener address {0:?}: expected HOST:PORT")]
    Addr(String),
    #[error("GET {path} from {addr}: {source}")]
    Request {
        addr: SocketAddr,
        path: String,
        source: std::io::Error,
    },
    #[error("TLS to {addr}: {source}")]
    Tls {
        addr: SocketAddr,
        source: ClientTlsError,
    },
    #[error("GET {path} from {addr}: not an HTTP answer: {head:?}")]
    Malformed {
        addr: SocketAddr,
        path: String,
        head: String,
    },
}

/// Writes the bound address where `kubewasm probe --addr-file` finds it
/// (temp file and rename: a probe never reads half an address).
pub fn write_addr_file(path: &Path, addr: SocketAddr) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, format!("{addr}\n"))?;
    std::fs::rename(tmp, path)
}

/// Reads an address written by [`write_addr_file`].
pub fn read_addr_file(path: &Path) -> Result<String, ProbeError> {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_owned())
        .map_err(|source| ProbeError::AddrFile {
            path: path.to_owned(),
            source,
        })
}

/// Reads a bearer token from a file (a projected service account token,
/// or `kubectl create token` saved), trimmed.
pub fn read_token_file(path: &Path) -> Result<String, ProbeError> {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_owned())
        .map_err(|source| ProbeError::TokenFile {
            path: path.to_owned(),
            source,
        })
}

/// GETs `path` from `addr`; the status code and the body.
pub fn get(addr: &str, path: &str, timeout: Duration) -> Result<(u16, String), ProbeError> {
    get_with_token(addr, path, None, timeout)
}

/// [`get`], sending `token` as a bearer token when given.
pub fn get_with_token(
    addr: &str,
    path: &str,
    token: Option<&str>,
    timeout: Duration,
) -> Result<(u16, String), ProbeError> {
    get_over(addr, path, token, None, timeout)
}

/// [`get_with_token`], over TLS when `tls` says how to check the
/// listener's certificate (a host run with `--metrics-auth` serves
/// `/metrics` and `/dead-letters` over TLS only).
pub fn get_over(
    addr: &str,
    path: &str,
    token: Option<&str>,
    tls: Option<&Verify>,
    timeout: Duration,
) -> Result<(u16, String), ProbeError> {
    let sock = addr
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| ProbeError::Addr(addr.to_owned()))?;
    let request_error = |source| ProbeError::Request {
        addr: sock,
        path: path.to_owned(),
        source,
    };
    let stream = TcpStream::connect_timeout(&sock, timeout).map_err(request_error)?;
    stream
        .set_read_timeout(Some(timeout))
        .map_err(request_error)?;
    stream
        .set_write_timeout(Some(timeout))
        .map_err(request_error)?;
    let auth = token.map_or_else(String::new, |t| format!("Authorization: Bearer {t}\r\n"));
    let request = format!("GET {path} HTTP/1.0\r\nHost: {sock}\r\n{auth}\r\n");
    let answer = match tls {
        None => exchange(stream, &request),
        Some(verify) => {
            let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
            let name =
                client::server_name(host).ok_or_else(|| ProbeError::Addr(addr.to_owned()))?;
            let config = client::client_config(verify).map_err(|e| ProbeError::Tls {
                addr: sock,
                source: e,
            })?;
            let conn =
                rustls::ClientConnection::new(config, name).map_err(|e| ProbeError::Tls {
                    addr: sock,
                    source: ClientTlsError::Config(e),
                })?;
            exchange(rustls::StreamOwned::new(conn, stream), &request)
        }
    }
    .map_err(request_error)?;
    let text = String::from_utf8_lossy(&answer);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse::<u16>().ok())
        .ok_or_else(|| ProbeError::Malformed {
            addr: sock,
            path: path.to_owned(),
            head: head.chars().take(80).collect(),
        })?;
    Ok((status, body.to_owned()))
}

/// Writes `request` and reads the answer to its end (1 MiB at most). A
/// peer that closes without TLS's close_notify after answering is taken
/// at its word: the answer is what HTTP/1.0 ends by closing.
fn exchange(mut stream: impl Read + Write, request: &str) -> std::io::Result<Vec<u8>> {
    stream.write_all(request.as_bytes())?;
    stream.flush()?;
    let mut answer = Vec::new();
    match stream.take(1 << 20).read_to_end(&mut answer) {
        Ok(_) => Ok(answer),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !answer.is_empty() => Ok(answer),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread")]
    async fn probes_the_real_listener_through_the_address_file() {
        let telemetry = crate::telemetry::Telemetry::new(crate::telemetry::Identity::from_env());
        let server =
            crate::admin::server::MetricsServer::start(&"127.0.0.1:0".parse().unwrap(), telemetry)
                .await
                .unwrap()
                .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("addr");
        write_addr_file(&file, server.local_addr()).unwrap();
        let addr = read_addr_file(&file).unwrap();
        let (code, _) = tokio::task::spawn_blocking(move || {
            get(&addr, "/healthz", Duration::from_secs(5)).unwrap()
        })
        .await
        .unwrap();
        assert_eq!(code, 200);
        let addr = read_addr_file(&file).unwrap();
        let (code, body) = tokio::task::spawn_blocking(move || {
            get(&addr, "/metrics", Duration::from_secs(5)).unwrap()
        })
        .await
        .unwrap();
        assert_eq!(code, 200);
        assert!(body.contains("kubewasm_"), "{body}");
        server.stop().await;
        assert!(matches!(
            read_addr_file(&dir.path().join("missing")),
            Err(ProbeError::AddrFile { .. })
        ));
    }
}
