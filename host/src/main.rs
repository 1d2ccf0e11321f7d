//! The `kubewasm` command.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use kubewasm::app::{App, RunOptions};
use kubewasm::dispatch::DispatchOptions;
use kubewasm::object::StripOptions;
use kubewasm::runtime::EngineOptions;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

#[derive(Parser, Debug)]
#[command(
    name = "kubewasm",
    version,
    about = "Kubernetes event handlers as WebAssembly components"
)]
struct Cli {
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true, env = "KUBEWASM_LOG_FORMAT")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the plugins of a folder against a cluster.
    Run(RunArgs),
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// Folder of plugins: NAME.wasm plus optional NAME.yaml; watched and hot-reloaded.
    #[arg(long, env = "KUBEWASM_PLUGINS")]
    plugins: PathBuf,
    /// Folder of YAML/JSON manifests served as an embedded local cluster.
    #[arg(long, env = "KUBEWASM_LOCAL")]
    local: PathBuf,
    /// Log every action instead of executing it.
    #[arg(long)]
    dry_run: bool,
    /// Exit 0 once the initial sync is handled and every queue is empty, printing a summary.
    #[arg(long)]
    until_idle: bool,
    /// Cache of compiled plugins (default: $XDG_CACHE_HOME/kubewasm/components).
    #[arg(long, env = "KUBEWASM_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
    /// Keep managedFields and the last-applied annotation in the cache.
    #[arg(long)]
    keep_managed_fields: bool,
}

fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    let mut engine = EngineOptions::default();
    if let Some(dir) = args.cache_dir {
        engine.cache_dir = Some(dir);
    }
    let opts = RunOptions {
        plugins: args.plugins,
        local: args.local,
        dry_run: args.dry_run,
        until_idle: args.until_idle,
        engine,
        strip: if args.keep_managed_fields {
            StripOptions {
                managed_fields: false,
                last_applied: false,
            }
        } else {
            StripOptions::default()
        },
        dispatch: DispatchOptions::default(),
        poll: Duration::from_secs(30),
    };
    let cancel = CancellationToken::new();
    let app = App::start(&opts, cancel.clone())
        .await
        .context("cannot start kubewasm")?;
    if opts.until_idle {
        tokio::select! {
            () = app.wait_idle() => {}
            () = shutdown_signal() => tracing::info!("signal received; shutting down"),
        }
        app.shutdown().await;
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", app.summary())?;
        return Ok(());
    }
    let tasks = TaskTracker::new();
    app.watch(opts.poll, &tasks);
    shutdown_signal().await;
    tracing::info!("signal received; draining in-flight calls");
    app.shutdown().await;
    tasks.close();
    tasks.wait().await;
    tracing::info!("stopped cleanly");
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    init_tracing(cli.log_format);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    match cli.command {
        Command::Run(args) => rt.block_on(run(args)),
    }
}
