//! A plugin's stdout and stderr when the sidecar grants no stdio: captured
//! into a bounded buffer per instance and logged after each call, at warn,
//! with the plugin's name. A Rust panic message or a Python traceback then
//! reaches the host log without the operator granting anything, and a guest
//! that prints without end costs the host at most [`CAPTURE_LIMIT`] per call.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use parking_lot::Mutex;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

/// Most guest output kept per call; the rest is counted and dropped.
pub const CAPTURE_LIMIT: usize = 64 << 10;

#[derive(Debug, Default)]
struct Buffer {
    bytes: Vec<u8>,
    dropped: u64,
}

/// The capture shared by an instance's stdout and stderr.
#[derive(Debug, Clone, Default)]
pub struct GuestOutput {
    inner: Arc<Mutex<Buffer>>,
}

/// What a call wrote, as taken by [`GuestOutput::take`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Captured {
    pub text: String,
    /// Bytes written past [`CAPTURE_LIMIT`] and not kept.
    pub dropped: u64,
}

impl GuestOutput {
    fn append(&self, data: &[u8]) {
        let mut b = self.inner.lock();
        let room = CAPTURE_LIMIT.saturating_sub(b.bytes.len());
        let kept = data.len().min(room);
        b.bytes.extend_from_slice(&data[..kept]);
        b.dropped += (data.len() - kept) as u64;
    }

    /// Takes what was written since the last take; `None` if nothing.
    pub fn take(&self) -> Option<Captured> {
        let mut b = self.inner.lock();
        if b.bytes.is_empty() && b.dropped == 0 {
            return None;
        }
        let bytes = std::mem::take(&mut b.bytes);
        let dropped = std::mem::take(&mut b.dropped);
        Some(Captured {
            text: String::from_utf8_lossy(&bytes).trim_end().to_owned(),
            dropped,
        })
    }

    /// Logs and clears what the guest wrote, one warn line per line of
    /// output, attributed to `plugin`.
    pub fn flush_to_log(&self, plugin: &str) -> Option<Captured> {
        let captured = self.take()?;
        for line in captured.text.lines().filter(|l| !l.trim().is_empty()) {
            tracing::warn!(target: "plugin", plugin, "guest output: {line}");
        }
        if captured.dropped > 0 {
            tracing::warn!(
                target: "plugin",
                plugin,
                truncated_bytes = captured.dropped,
                "guest output truncated: {} more bytes dropped (at most {} KiB are kept per call)",
                captured.dropped,
                CAPTURE_LIMIT >> 10
            );
        }
        Some(captured)
    }
}

impl Captured {
    /// The line that most likely names the cause: a Rust panic's message
    /// (the line after `panicked at`), else the last line (a Python or
    /// JavaScript exception).
    pub fn cause(&self) -> Option<&str> {
        let lines: Vec<&str> = self.text.lines().filter(|l| !l.trim().is_empty()).collect();
        lines
            .iter()
            .position(|l| l.contains("panicked at"))
            .and_then(|i| lines.get(i + 1))
            .or(lines.last())
            .copied()
    }
}

impl IsTerminal for GuestOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestOutput {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl OutputStream for GuestOutput {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.append(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        // Always writable: what does not fit is dropped, never a trap.
        Ok(CAPTURE_LIMIT)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for GuestOutput {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for GuestOutput {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.append(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_is_bounded_and_the_excess_counted() {
        let out = GuestOutput::default();
        let mut stream = out.clone();
        assert_eq!(out.take(), None);
        stream
            .write(Bytes::from_static(b"panicked at lib.rs:3\n"))
            .unwrap();
        assert_eq!(
            out.take(),
            Some(Captured {
                text: "panicked at lib.rs:3".into(),
                dropped: 0
            })
        );
        let big = vec![b'x'; CAPTURE_LIMIT + 100];
        stream.write(Bytes::from(big)).unwrap();
        stream.write(Bytes::from_static(b"more")).unwrap();
        let c = out.take().unwrap();
        assert_eq!((c.text.len(), c.dropped), (CAPTURE_LIMIT, 104));
        assert_eq!(out.take(), None, "taken once");
        stream
            .write(Bytes::from_static(
                b"thread '<unnamed>' panicked at src/lib.rs:9:5:\nboom on a/b\nnote: run with `RUST_BACKTRACE=1`\n",
            ))
            .unwrap();
        assert_eq!(out.take().unwrap().cause(), Some("boom on a/b"));
        stream
            .write(Bytes::from_static(b"Traceback:\n  x\nValueError: bad\n"))
            .unwrap();
        assert_eq!(out.take().unwrap().cause(), Some("ValueError: bad"));
    }
}
