//! `kubewasm record`: fixtures recorded from a real cluster in dry run.

use std::io::Write;
use std::path::PathBuf;

use super::signal::ShutdownSignal;

#[derive(clap::Args, Debug)]
#[command(
    after_help = "Per plugin, OUT/NAME.yaml holds the cache it started from, each delta it \
received and what each call did (result, actions, Events) as the step's expect. Actions are sent \
as server-side dry runs (dryRun=All): the server answers them (a refusal is kept as the step's \
failures) and persists nothing. Secret data is redacted. Replay: kubewasm test NAME.wasm \
OUT/NAME.yaml. See README.md, \"Recording from a real cluster\"."
)]
#[command(group(clap::ArgGroup::new("stop").required(true).args(["duration", "until_idle"])))]
pub(crate) struct RecordArgs {
    /// The cluster's kubeconfig.
    #[arg(long, value_name = "FILE")]
    kubeconfig: PathBuf,
    /// Context in the kubeconfig [default: its current context].
    #[arg(long)]
    context: Option<String>,
    /// The plugin folder (NAME.wasm beside its sidecar NAME.yaml).
    #[arg(long, value_name = "DIR")]
    plugins: PathBuf,
    /// Where the fixtures go (created if missing): DIR/NAME.yaml per plugin.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Stop this long after the caches synced (30s, 5m).
    #[arg(long, value_parser = humantime::parse_duration)]
    duration: Option<std::time::Duration>,
    /// Stop once no delta arrived and no retry or requeue came due for --quiet after the
    /// caches synced.
    #[arg(long)]
    until_idle: bool,
    /// The quiet period of --until-idle.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration, requires = "until_idle")]
    quiet: std::time::Duration,
    /// Seed of everything random (retry jitter, WASI random), written into the fixtures
    /// [default: random].
    #[arg(long)]
    seed: Option<u64>,
    /// Compile cache (what `run` and `compile` use) [default: $XDG_CACHE_HOME/kubewasm/components].
    #[arg(long, env = "KUBEWASM_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
}

/// `kubewasm record`: SIGINT and SIGTERM stop it, and what was recorded
/// is written.
pub(crate) fn record(rt: &tokio::runtime::Runtime, args: RecordArgs) -> anyhow::Result<()> {
    use kubewasm::testing::record::{self, Stop};
    let opts = record::Options {
        kubeconfig: args.kubeconfig,
        context: args.context,
        plugins: args.plugins,
        out: args.out,
        stop: match args.duration {
            Some(d) => Stop::After(d),
            None => Stop::UntilIdle { quiet: args.quiet },
        },
        seed: args.seed,
        cache_dir: args.cache_dir,
    };
    let cancel = tokio_util::sync::CancellationToken::new();
    let on_signal = cancel.clone();
    let _guard = rt.enter();
    let mut signal = ShutdownSignal::install();
    rt.spawn(async move {
        signal.recv().await;
        // Cancelled before anything else: a log line written to a closed
        // stderr must not keep the recording going.
        on_signal.cancel();
        tracing::info!("signal received: stopping the recording and writing what was recorded");
    });
    let results = record::run(rt, &opts, &cancel)?;
    let mut failed = Vec::new();
    let mut out = std::io::stdout().lock();
    for (plugin, result) in results {
        match result {
            Ok(r) => writeln!(
                out,
                "recorded {plugin}: {} objects, {} steps, {} calls, {} actions in {} steps, {} refused by the server -> {}",
                r.objects,
                r.steps,
                r.calls,
                r.actions,
                r.steps_with_actions,
                r.refusals,
                r.file.display()
            )?,
            Err(e) => failed.push(format!("{plugin}: {e}")),
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        anyhow::bail!("recording failed for {}", failed.join("; "))
    }
}
