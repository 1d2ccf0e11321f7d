//! Shared pieces of the kubewasm benchmark programs (`kube-rs-informer`,
//! `load-pods`).

use std::path::Path;

pub mod goals;

use anyhow::Context as _;
use kube::config::{KubeConfigOptions, Kubeconfig};

/// Builds a kube client from one kubeconfig file (its current context), the
/// way a kube-rs user points a program at an explicit kubeconfig.
pub async fn client_from_kubeconfig(path: &Path) -> anyhow::Result<kube::Client> {
    let kubeconfig = Kubeconfig::read_from(path)
        .with_context(|| format!("reading kubeconfig {}", path.display()))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .with_context(|| format!("loading kubeconfig {}", path.display()))?;
    kube::Client::try_from(config).context("building the kube client")
}

/// SIGTERM and SIGINT handlers, installed eagerly so that a signal arriving
/// at any point after [`Shutdown::install`] ends the program cleanly (exit 0)
/// instead of killing it.
#[derive(Debug)]
pub struct Shutdown {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Shutdown {
    /// Installs the handlers; needs a running tokio runtime.
    pub fn install() -> anyhow::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self {
            term: signal(SignalKind::terminate()).context("installing the SIGTERM handler")?,
            int: signal(SignalKind::interrupt()).context("installing the SIGINT handler")?,
        })
    }

    /// Resolves when the process receives SIGTERM or SIGINT.
    pub async fn wait(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}

/// Longest error text shown; API server messages can embed whole objects.
const MAX_ERROR_CHARS: usize = 400;

/// Short one-line description of a kube error (the API server's message for
/// API errors), cut to a readable length.
pub fn describe_kube_error(err: &kube::Error) -> String {
    let text = match err {
        kube::Error::Api(status) => {
            format!("{} ({} {})", status.message, status.code, status.reason)
        }
        other => format!("{other:#}"),
    };
    truncate(&text, MAX_ERROR_CHARS)
}

/// `text` cut to at most `max` characters, marked with an ellipsis.
pub fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.to_owned(),
    }
}

/// The text of a kubewasm's `/metrics`, at the address it wrote to
/// `addr_file` (`--metrics-addr-file`, metrics authentication off).
pub fn scrape_metrics(addr_file: &Path) -> Option<String> {
    use std::io::{Read as _, Write as _};
    let addr = std::fs::read_to_string(addr_file).ok()?;
    let mut conn = std::net::TcpStream::connect(addr.trim()).ok()?;
    conn.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .ok()?;
    write!(
        conn,
        "GET /metrics HTTP/1.0\r\nHost: {}\r\n\r\n",
        addr.trim()
    )
    .ok()?;
    let mut body = String::new();
    conn.read_to_string(&mut body).ok()?;
    Some(body)
}
