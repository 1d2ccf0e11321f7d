//! kube-rs baseline for the initial-sync benchmark: the kube-rs equivalent of
//! client-go's SharedInformer for Pods across all namespaces.
//!
//! A `kube::runtime::reflector` with a `reflector::store()` writer over
//! `kube::runtime::watcher(Api::<Pod>::all(client), config)`, typed
//! `k8s_openapi::api::core::v1::Pod`, objects kept as the server sends them
//! (managedFields included) — what a kube-rs user writes. No event handler:
//! the reflector stream is polled and its events dropped.
//!
//! `--initial-list streaming` uses `watcher::Config::default().streaming_lists()`
//! (a watch with `sendInitialEvents=true`); `--initial-list paged` uses the
//! default `watcher::Config` (a paginated LIST with kube's default page size
//! of 500 — the same as client-go's pager — and `ListSemantic::MostRecent`,
//! i.e. no resourceVersion: a consistent read; then a WATCH).
//!
//! Once `store.wait_until_ready()` resolves it prints exactly one stdout line
//! `SYNCED {"program":"kube-rs","version":"5.0.0","mode":"streaming","strip_managed_fields":false,"objects":N}`
//! and keeps watching until SIGTERM/SIGINT (exit 0), or exits at once with
//! `--exit-after-sync`. The default allocator (glibc malloc) is used.
//!
//! `--strip-managed-fields` drops `metadata.managedFields` in the watcher
//! stream (`WatchStreamExt::modify`) before the reflector stores a Pod: what
//! a kube-rs user who does not read them writes. On SIGUSR1 it prints one
//! `HEAP {"allocated_bytes":N}` line: glibc's `mallinfo2()`, bytes in use in
//! all arenas (`uordblks`) plus mmapped chunks (`hblkhd`): the live heap,
//! without the free memory malloc keeps.

use std::{path::PathBuf, pin::pin, process::ExitCode};

use anyhow::{Context as _, bail};
use clap::{Parser, ValueEnum};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api,
    runtime::{WatchStreamExt as _, reflector, watcher},
};
use kubewasm_bench::{Shutdown, client_from_kubeconfig};

/// The kube-rs version this binary is built against (pinned `=5.0.0` in
/// Cargo.toml).
const KUBE_VERSION: &str = "5.0.0";

#[derive(Clone, Copy, Debug, ValueEnum)]
enum InitialList {
    /// Streaming list: WATCH with sendInitialEvents=true.
    Streaming,
    /// Paginated LIST (limit=500), then WATCH.
    Paged,
}

impl InitialList {
    fn as_str(self) -> &'static str {
        match self {
            InitialList::Streaming => "streaming",
            InitialList::Paged => "paged",
        }
    }
}

/// kube-rs reflector over all Pods; prints a SYNCED line once the store is
/// ready.
#[derive(Debug, Parser)]
#[command(name = "kube-rs-informer")]
struct Args {
    /// Kubeconfig file to connect with (its current context).
    #[arg(long)]
    kubeconfig: PathBuf,
    /// How the initial state is fetched.
    #[arg(long, value_enum, default_value = "streaming")]
    initial_list: InitialList,
    /// Drop managedFields before storing (`.modify()` on the watcher stream).
    #[arg(long)]
    strip_managed_fields: bool,
    /// Exit right after printing the SYNCED line.
    #[arg(long)]
    exit_after_sync: bool,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("kube-rs-informer: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    let mut shutdown = Shutdown::install()?;
    let client = client_from_kubeconfig(&args.kubeconfig).await?;

    let config = match args.initial_list {
        InitialList::Streaming => watcher::Config::default().streaming_lists(),
        InitialList::Paged => watcher::Config::default(),
    };
    let api: Api<Pod> = Api::all(client);
    let (store, writer) = reflector::store::<Pod>();
    let strip = args.strip_managed_fields;
    let stream = watcher(api, config).modify(move |pod: &mut Pod| {
        if strip {
            pod.metadata.managed_fields = None;
        }
    });
    let mut events = pin!(reflector(writer, stream).default_backoff());
    let mut heap_requests =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1())
            .context("installing the SIGUSR1 handler")?;

    let mut ready = pin!(store.wait_until_ready());
    let mut synced = false;
    loop {
        tokio::select! {
            event = events.next() => match event {
                Some(Ok(_)) => {}
                // Before the first sync any error is fatal: a benchmark run
                // must not silently measure retries.
                Some(Err(err)) if !synced => {
                    return Err(err).context("watching Pods before the initial sync");
                }
                // Afterwards the watcher re-establishes itself (with backoff),
                // as in any long-running kube-rs program.
                Some(Err(err)) => eprintln!("kube-rs-informer: watch error (retrying): {err}"),
                None => bail!("the watch stream ended"),
            },
            result = &mut ready, if !synced => {
                result.context("the reflector writer was dropped before the store became ready")?;
                synced = true;
                println!(
                    "SYNCED {{\"program\":\"kube-rs\",\"version\":\"{KUBE_VERSION}\",\"mode\":\"{}\",\"strip_managed_fields\":{strip},\"objects\":{}}}",
                    args.initial_list.as_str(),
                    store.len()
                );
                if args.exit_after_sync {
                    return Ok(());
                }
            }
            Some(()) = heap_requests.recv(), if synced => {
                println!("HEAP {{\"allocated_bytes\":{}}}", malloc_in_use());
            }
            () = shutdown.wait() => return Ok(()),
        }
    }
}

/// Bytes glibc malloc has handed out and not had back, over all arenas.
fn malloc_in_use() -> u64 {
    // SAFETY: mallinfo2 takes no arguments and only reads malloc's state.
    let info = unsafe { libc::mallinfo2() };
    (info.uordblks + info.hblkhd) as u64
}
