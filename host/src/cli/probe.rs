//! `kubewasm probe`: an exec probe that GETs a running host's listener.

use std::io::Write;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub(crate) struct ProbeArgs {
    /// Path to GET, e.g. /readyz, /healthz or /metrics (printed on stdout).
    path: String,
    /// Listener address, HOST:PORT.
    #[arg(
        long,
        conflicts_with = "addr_file",
        required_unless_present = "addr_file"
    )]
    addr: Option<String>,
    /// File holding the listener address (the host's --metrics-addr-file).
    #[arg(long)]
    addr_file: Option<PathBuf>,
    /// File holding a bearer token to send (for /metrics of a host run with
    /// --metrics-auth; /healthz and /readyz need none).
    #[arg(long, env = "KUBEWASM_TOKEN_FILE")]
    token_file: Option<PathBuf>,
    /// Connect and read timeout.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    timeout: std::time::Duration,
}

pub(crate) fn probe(args: ProbeArgs) -> anyhow::Result<()> {
    use kubewasm::admin::probe;
    let addr = match (args.addr, args.addr_file) {
        (Some(a), _) => a,
        (None, Some(f)) => probe::read_addr_file(&f)?,
        (None, None) => anyhow::bail!("pass --addr HOST:PORT or --addr-file FILE"),
    };
    let token = args
        .token_file
        .as_deref()
        .map(probe::read_token_file)
        .transpose()?;
    let (code, body) = probe::get_with_token(&addr, &args.path, token.as_deref(), args.timeout)?;
    if code != 200 {
        anyhow::bail!("GET {} answered {code}: {}", args.path, body.trim());
    }
    if args.path == "/metrics" {
        std::io::stdout().lock().write_all(body.as_bytes())?;
    }
    Ok(())
}
