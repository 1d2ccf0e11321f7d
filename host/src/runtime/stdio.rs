//! A plugin's stdout and stderr when the sidecar grants no stdio: captured
//! into a bounded buffer per instance and logged after each call, at warn,
//! with the plugin's name. A Rust panic message or a Python traceback then
//! reaches the host log without the operator granting anything, and a guest
//! that prints without end costs the host at most [`CAPTURE_LIMIT`] per call.

use std::borrow::Cow;
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
    /// (the line after `panicked at`), a Go runtime crash's message with
    /// where it happened (see [`go_crash`]), else the last line (a Python
    /// or JavaScript exception).
    pub fn cause(&self) -> Option<Cow<'_, str>> {
        let lines: Vec<&str> = self.text.lines().filter(|l| !l.trim().is_empty()).collect();
        if let Some(message) = lines
            .iter()
            .position(|l| l.contains("panicked at"))
            .and_then(|i| lines.get(i + 1))
        {
            return Some(Cow::Borrowed(message));
        }
        if let Some(crash) = go_crash(&lines) {
            return Some(Cow::Owned(crash));
        }
        lines.last().map(|l| Cow::Borrowed(*l))
    }
}

/// A Go runtime crash (`fatal error: ...`, or a `panic: ...` nothing
/// recovered) is its message, then a goroutine's traceback: a function line
/// (`main.check({0x68e070, 0x8})`) and a location line (`\tmain.go:39
/// +0x3`) per frame. Its last line is the export glue's, so the message and
/// the first frame outside the Go runtime say more: `fatal error: ... (at
/// main.check, hello/main.go:39)`.
fn go_crash(lines: &[&str]) -> Option<String> {
    let start = lines
        .iter()
        .position(|l| l.starts_with("fatal error: ") || l.starts_with("panic: "))?;
    let message = lines[start];
    let header = start
        + lines[start..]
            .iter()
            .position(|l| l.starts_with("goroutine ") && l.ends_with("]:"))?;
    let mut frames = lines[header + 1..].iter();
    while let (Some(function), Some(location)) = (frames.next(), frames.next()) {
        let Some((name, _args)) = function.rsplit_once('(') else {
            break;
        };
        if name.starts_with("runtime.") {
            continue;
        }
        let location = location.trim_start();
        let location = location.split(" +0x").next().unwrap_or(location);
        return Some(format!("{message} (at {name}, {location})"));
    }
    Some(message.to_owned())
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
        assert_eq!(out.take().unwrap().cause().as_deref(), Some("boom on a/b"));
        stream
            .write(Bytes::from_static(b"Traceback:\n  x\nValueError: bad\n"))
            .unwrap();
        assert_eq!(
            out.take().unwrap().cause().as_deref(),
            Some("ValueError: bad")
        );
        // Go: a fatal error (a deadlock) and a panic nothing recovered, as
        // the Go runtime prints them; the last line is the export glue's.
        stream
            .write(Bytes::from_static(
                b"fatal error: all goroutines are asleep - deadlock!\n\ngoroutine 1 [chan receive (nil chan)]:\nmain.checkGreeting({0x68e070, 0x8})\n\thello-go/main.go:39 +0x3\nmain.hello.Handle({}, 0x6be070)\n\thello-go/main.go:21 +0x6\nkubewasm:plugin/handler@0.2.0#handle()\n\t<autogenerated>:1 +0x1\n",
            ))
            .unwrap();
        assert_eq!(
            out.take().unwrap().cause().as_deref(),
            Some(
                "fatal error: all goroutines are asleep - deadlock! (at main.checkGreeting, hello-go/main.go:39)"
            )
        );
        stream
            .write(Bytes::from_static(
                b"panic: runtime error: index out of range [3] with length 1\n\ngoroutine 1 [running]:\nruntime.goPanicIndex(...)\n\truntime/panic.go:115 +0x2\nmain.(*plugin).pick(...)\n\tdemo/main.go:12 +0x5\n",
            ))
            .unwrap();
        assert_eq!(
            out.take().unwrap().cause().as_deref(),
            Some(
                "panic: runtime error: index out of range [3] with length 1 (at main.(*plugin).pick, demo/main.go:12)"
            )
        );
    }
}
