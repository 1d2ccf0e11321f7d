//! One port, plain HTTP and TLS: each connection's first byte says which
//! (a TLS record starts with 0x16, an HTTP request with a letter). Plain
//! connections keep the kubelet's HTTP probes working; TLS ones carry
//! bearer tokens. Handshakes run beside the accept loop, each under a
//! deadline and a cap on how many are in progress, so a client that opens
//! a connection and sends nothing delays nobody.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::connect_info::Connected;
use axum::serve::IncomingStream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_util::sync::CancellationToken;

/// How long a connection may take to send its first byte and finish the
/// TLS handshake.
const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(10);
/// Connections between accept and a finished handshake at once; more wait
/// in the kernel's backlog.
const HANDSHAKES_AT_ONCE: usize = 64;
/// The first byte of a TLS handshake record.
const TLS_HANDSHAKE: u8 = 0x16;

/// Who is asking, and whether over TLS: each request carries it
/// (`ConnectInfo<Peer>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    pub addr: SocketAddr,
    pub tls: bool,
}

impl Connected<IncomingStream<'_, SniffListener>> for Peer {
    fn connect_info(stream: IncomingStream<'_, SniffListener>) -> Self {
        *stream.remote_addr()
    }
}

/// A connection, plain or TLS.
#[derive(Debug)]
pub enum Conn {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// Accepts on a TCP listener; with a TLS configuration, connections that
/// open with a handshake are decrypted and the others passed plain.
#[derive(Debug)]
pub struct SniffListener {
    local: SocketAddr,
    ready: mpsc::Receiver<(Conn, Peer)>,
    stop: CancellationToken,
}

impl SniffListener {
    /// Starts the accept loop on `tcp`; `tls` `None` passes every
    /// connection plain. The loop ends when the listener is dropped.
    pub fn new(tcp: TcpListener, tls: Option<Arc<rustls::ServerConfig>>) -> io::Result<Self> {
        let local = tcp.local_addr()?;
        let (tx, ready) = mpsc::channel(HANDSHAKES_AT_ONCE);
        let stop = CancellationToken::new();
        tokio::spawn(accept_loop(
            tcp,
            tls.map(TlsAcceptor::from),
            tx,
            stop.clone(),
        ));
        Ok(Self { local, ready, stop })
    }
}

impl Drop for SniffListener {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn accept_loop(
    tcp: TcpListener,
    tls: Option<TlsAcceptor>,
    tx: mpsc::Sender<(Conn, Peer)>,
    stop: CancellationToken,
) {
    let slots = Arc::new(Semaphore::new(HANDSHAKES_AT_ONCE));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let accepted = tokio::select! {
            () = stop.cancelled() => return,
            accepted = tcp.accept() => accepted,
        };
        let (stream, addr) = match accepted {
            Ok(pair) => pair,
            Err(e) => {
                // Out of descriptors and the like: say so, breathe, go on
                // (as axum's own loop does).
                tracing::warn!(error = %e, "metrics listener: accept failed");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let Some(tls) = tls.clone() else {
            drop(slot);
            let peer = Peer { addr, tls: false };
            if tx.send((Conn::Plain(stream), peer)).await.is_err() {
                return;
            }
            continue;
        };
        let tx = tx.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let opened = tokio::select! {
                () = stop.cancelled() => return,
                opened = tokio::time::timeout(HANDSHAKE_DEADLINE, open(stream, &tls)) => opened,
            };
            match opened {
                Ok(Ok(conn)) => {
                    let tls = matches!(conn, Conn::Tls(_));
                    let _ = tx.send((conn, Peer { addr, tls })).await;
                }
                Ok(Err(e)) => {
                    tracing::debug!(peer = %addr, error = %e, "metrics listener: TLS handshake failed");
                }
                Err(_) => {
                    tracing::debug!(peer = %addr, "metrics listener: no handshake within the deadline; closed");
                }
            }
        });
    }
}

/// Reads the first byte without taking it, then hands the stream over
/// plain or through the handshake.
async fn open(stream: TcpStream, tls: &TlsAcceptor) -> io::Result<Conn> {
    let mut first = [0u8; 1];
    let n = stream.peek(&mut first).await?;
    if n == 1 && first[0] == TLS_HANDSHAKE {
        Ok(Conn::Tls(Box::new(tls.accept(stream).await?)))
    } else {
        Ok(Conn::Plain(stream))
    }
}

impl axum::serve::Listener for SniffListener {
    type Io = Conn;
    type Addr = Peer;

    async fn accept(&mut self) -> (Conn, Peer) {
        match self.ready.recv().await {
            Some(ready) => ready,
            // The loop only ends when the listener is dropped or stopped;
            // axum's graceful shutdown stops calling before then.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Peer> {
        Ok(Peer {
            addr: self.local,
            tls: false,
        })
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_flush(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
