//! The scripted registry of the hostile-registry tests: a TCP listener on
//! 127.0.0.1 that answers each request (one per connection) with what the
//! test's handler returns, including bodies of gibibytes streamed from one
//! chunk and bodies trickled a byte at a time, and counts the body bytes
//! it managed to write.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A request as the handler sees it.
#[derive(Debug, Clone)]
pub struct Request {
    pub path: String,
    /// Lowercase names.
    pub headers: HashMap<String, String>,
}

impl Request {
    pub fn authorization(&self) -> Option<&str> {
        self.headers.get("authorization").map(String::as_str)
    }
}

pub enum Body {
    Bytes(Vec<u8>),
    /// `total` bytes of `fill`, sent as fast as the client reads: with a
    /// `Content-Length` of `total` when `declared`, else chunked. Never
    /// held in memory whole.
    Endless {
        fill: u8,
        total: u64,
        declared: bool,
    },
    /// `bytes`, one every `every`, after a `Content-Length` of them all.
    Trickle {
        bytes: Vec<u8>,
        every: Duration,
    },
}

pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Body,
}

impl Reply {
    pub fn ok(body: Vec<u8>) -> Self {
        Self {
            status: 200,
            headers: Vec::new(),
            body: Body::Bytes(body),
        }
    }

    pub fn status(status: u16, body: &str) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: Body::Bytes(body.as_bytes().to_vec()),
        }
    }

    pub fn not_found() -> Self {
        Self::status(
            404,
            r#"{"errors":[{"code":"MANIFEST_UNKNOWN","message":"unknown"}]}"#,
        )
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }
}

pub type Handler = Arc<dyn Fn(&Request, SocketAddr) -> Reply + Send + Sync>;

/// A scripted registry on 127.0.0.1: every request is logged and answered
/// by the handler, one per connection; the body bytes it managed to write
/// are counted.
pub struct Server {
    addr: SocketAddr,
    requests: Arc<parking_lot::Mutex<Vec<Request>>>,
    written: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    pub async fn start(
        handler: impl Fn(&Request, SocketAddr) -> Reply + Send + Sync + 'static,
    ) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let written = Arc::new(AtomicU64::new(0));
        let handler: Handler = Arc::new(handler);
        let task = tokio::spawn({
            let requests = requests.clone();
            let written = written.clone();
            async move {
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        return;
                    };
                    let (handler, requests, written) =
                        (handler.clone(), requests.clone(), written.clone());
                    tokio::spawn(async move {
                        let _ = serve(stream, addr, handler, requests, written).await;
                    });
                }
            }
        });
        Self {
            addr,
            requests,
            written,
            task,
        }
    }

    /// `host:port`, as a reference names it.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().clone()
    }

    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    /// Stops accepting: the registry is down.
    pub fn stop(&self) {
        self.task.abort();
    }
}

async fn serve(
    mut stream: TcpStream,
    addr: SocketAddr,
    handler: Handler,
    requests: Arc<parking_lot::Mutex<Vec<Request>>>,
    written: Arc<AtomicU64>,
) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf).await?;
        if n == 0 || head.len() > 64 << 10 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let mut lines = text.split("\r\n");
    let path = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .unwrap_or("/")
        .to_owned();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let request = Request { path, headers };
    requests.lock().push(request.clone());
    let reply = handler(&request, addr);
    let mut out = format!("HTTP/1.1 {} X\r\nConnection: close\r\n", reply.status);
    for (name, value) in &reply.headers {
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    match &reply.body {
        Body::Bytes(bytes) => out.push_str(&format!("Content-Length: {}\r\n", bytes.len())),
        Body::Endless {
            total,
            declared: true,
            ..
        } => out.push_str(&format!("Content-Length: {total}\r\n")),
        Body::Endless { .. } => out.push_str("Transfer-Encoding: chunked\r\n"),
        Body::Trickle { bytes, .. } => {
            out.push_str(&format!("Content-Length: {}\r\n", bytes.len()))
        }
    }
    out.push_str("\r\n");
    stream.write_all(out.as_bytes()).await?;
    match reply.body {
        Body::Bytes(bytes) => {
            stream.write_all(&bytes).await?;
            written.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        }
        Body::Endless {
            fill,
            total,
            declared,
        } => {
            let chunk = vec![fill; 64 << 10];
            let mut sent = 0u64;
            while sent < total {
                let n = chunk.len().min((total - sent) as usize);
                if declared {
                    stream.write_all(&chunk[..n]).await?;
                } else {
                    stream.write_all(format!("{n:x}\r\n").as_bytes()).await?;
                    stream.write_all(&chunk[..n]).await?;
                    stream.write_all(b"\r\n").await?;
                }
                sent += n as u64;
                written.fetch_add(n as u64, Ordering::Relaxed);
            }
            if !declared {
                stream.write_all(b"0\r\n\r\n").await?;
            }
        }
        Body::Trickle { bytes, every } => {
            for byte in bytes {
                stream.write_all(&[byte]).await?;
                stream.flush().await?;
                written.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(every).await;
            }
        }
    }
    stream.shutdown().await
}
