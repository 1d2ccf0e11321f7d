//! `kubewasm test`: a plugin replayed against fixture files, no cluster.

use std::io::Write;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
#[command(
    after_help = "A fixture holds a cache (objects, or a folder of manifests), steps (a delta, \
the initial list, or the next pending retry or requeue) and each step's expected calls: result, \
actions, Events, logs. Print the format with --schema; see the book, docs/book/src/testing.md."
)]
pub(crate) struct TestArgs {
    /// The plugin component (.wasm).
    #[arg(required_unless_present = "schema")]
    plugin: Option<PathBuf>,
    /// Fixture files (YAML).
    #[arg(required_unless_present = "schema")]
    fixtures: Vec<PathBuf>,
    /// The sidecar of cases that name none [default: the plugin's own, NAME.yaml beside it].
    #[arg(long)]
    sidecar: Option<PathBuf>,
    /// The plugin's name (its field manager, what register is told) [default: the file name].
    #[arg(long)]
    name: Option<String>,
    /// Write what failing (or unrecorded) steps observed into their fixtures as `expect`.
    #[arg(long)]
    update: bool,
    /// Also write the results as JUnit XML.
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
    /// Seed of everything random (retry jitter, WASI random) [default: the case's, else random].
    #[arg(long)]
    seed: Option<u64>,
    /// Run only the cases whose name contains NAME.
    #[arg(long, value_name = "NAME")]
    filter: Option<String>,
    /// Compile cache (what `run` and `compile` use) [default: $XDG_CACHE_HOME/kubewasm/components].
    #[arg(long, env = "KUBEWASM_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
    /// Print the fixture format's JSON Schema and exit.
    #[arg(long, conflicts_with_all = ["update", "junit", "seed", "filter"])]
    schema: bool,
}

/// `kubewasm test`, with its own exit codes.
pub(crate) fn test(args: TestArgs) -> std::process::ExitCode {
    if args.schema {
        let text = kubewasm::testing::fixture::schema_text();
        let _ = std::io::stdout().lock().write_all(text.as_bytes());
        return std::process::ExitCode::SUCCESS;
    }
    let opts = kubewasm::testing::Options {
        plugin: args.plugin.unwrap_or_default(),
        name: args.name,
        sidecar: args.sidecar,
        fixtures: args.fixtures,
        update: args.update,
        junit: args.junit,
        seed: args.seed,
        filter: args.filter,
        cache_dir: args.cache_dir,
        mirror: None,
    };
    match kubewasm::testing::run(&opts, &mut std::io::stdout().lock()) {
        Ok(summary) => std::process::ExitCode::from(summary.exit_code()),
        Err(e) => {
            let _ = writeln!(std::io::stderr().lock(), "Error: {e}");
            std::process::ExitCode::from(2)
        }
    }
}
