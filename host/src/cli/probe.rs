//! `kubewasm probe`: an exec probe that GETs a running host's listener.

use std::io::Write;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub(crate) struct ProbeArgs {
    /// Path to GET, e.g. /readyz, /healthz or /metrics (printed on stdout).
    path: String,
    #[command(flatten)]
    listener: ListenerArgs,
    /// Connect and read timeout.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    timeout: std::time::Duration,
}

/// Where a running host's listener is and how to ask it: what `kubewasm
/// probe` and `kubewasm dead-letters` share.
#[derive(clap::Args, Debug)]
pub(crate) struct ListenerArgs {
    /// The host's listener address (its --metrics-addr), HOST:PORT.
    #[arg(
        long,
        conflicts_with = "addr_file",
        required_unless_present = "addr_file"
    )]
    addr: Option<String>,
    /// File holding the listener address (the host's --metrics-addr-file).
    #[arg(long)]
    addr_file: Option<PathBuf>,
    /// File holding a bearer token to send (a host run with --metrics-auth
    /// asks one for /metrics and /dead-letters; /healthz and /readyz need
    /// none).
    #[arg(long, env = "KUBEWASM_TOKEN_FILE")]
    token_file: Option<PathBuf>,
    #[command(flatten)]
    tls: TlsArgs,
}

impl ListenerArgs {
    /// GETs `path` from the listener: the status code and the body.
    pub(crate) fn get(
        &self,
        path: &str,
        timeout: std::time::Duration,
    ) -> anyhow::Result<(u16, String)> {
        use kubewasm::admin::probe;
        let addr = match (&self.addr, &self.addr_file) {
            (Some(a), _) => a.clone(),
            (None, Some(f)) => probe::read_addr_file(f)?,
            (None, None) => anyhow::bail!("pass --addr HOST:PORT or --addr-file FILE"),
        };
        let token = self
            .token_file
            .as_deref()
            .map(probe::read_token_file)
            .transpose()?;
        let tls = self.tls.verify(token.is_some())?;
        Ok(probe::get_over(
            &addr,
            path,
            token.as_deref(),
            tls.as_ref(),
            timeout,
        )?)
    }
}

/// How a client checks the listener's certificate. A token is sent over
/// TLS only, so with `--token-file` one of the two is needed.
#[derive(clap::Args, Debug)]
pub(crate) struct TlsArgs {
    /// Speak TLS and check the listener's certificate against the
    /// certificates in this PEM file (e.g. the ca.crt of the Secret the
    /// host mounts as --metrics-cert-dir).
    #[arg(
        long,
        env = "KUBEWASM_CA_FILE",
        conflicts_with = "insecure_skip_tls_verify"
    )]
    ca_file: Option<PathBuf>,
    /// Speak TLS without checking the listener's certificate (the host's
    /// self-signed one: encrypted, not authenticated).
    #[arg(long)]
    insecure_skip_tls_verify: bool,
}

impl TlsArgs {
    /// TLS or not: a token never travels in clear.
    pub(crate) fn verify(
        &self,
        token: bool,
    ) -> anyhow::Result<Option<kubewasm::admin::tls::client::Verify>> {
        use kubewasm::admin::tls::client::Verify;
        match (&self.ca_file, self.insecure_skip_tls_verify) {
            (Some(file), _) => Ok(Some(Verify::CaFile(file.clone()))),
            (None, true) => Ok(Some(Verify::Skip)),
            (None, false) if token => anyhow::bail!(
                "a token is sent over TLS only: pass --ca-file FILE to check the host's certificate (the CA of its --metrics-cert-dir), or --insecure-skip-tls-verify for the certificate it self-signs"
            ),
            (None, false) => Ok(None),
        }
    }
}

pub(crate) fn probe(args: ProbeArgs) -> anyhow::Result<()> {
    let (code, body) = args.listener.get(&args.path, args.timeout)?;
    if code != 200 {
        anyhow::bail!("GET {} answered {code}: {}", args.path, body.trim());
    }
    if args.path == "/metrics" {
        std::io::stdout().lock().write_all(body.as_bytes())?;
    }
    Ok(())
}
