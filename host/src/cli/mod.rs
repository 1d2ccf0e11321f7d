//! The command line: the top-level [`Cli`] and its [`Command`]s, one file
//! per command holding its flags and its handler. The binary's own
//! modules, not the library's: they import the library as `kubewasm::`.

use clap::{Parser, Subcommand};
use kubewasm::telemetry::logging::LogFormat;

mod child_compile;
mod compile;
mod componentize;
mod crds;
mod dead_letters;
mod migrate;
mod new;
mod probe;
mod pull;
mod push;
mod rbac;
mod record;
mod registry;
mod run;
mod shards;
mod signal;
mod status;
mod test;

use child_compile::ChildCompileArgs;
use compile::CompileArgs;
use componentize::ComponentizeArgs;
use dead_letters::DeadLettersArgs;
use migrate::MigrateArgs;
use new::NewArgs;
use probe::ProbeArgs;
use pull::PullArgs;
use push::PushArgs;
use rbac::RbacArgs;
use record::RecordArgs;
use run::RunArgs;
use shards::ShardsArgs;
use status::StatusArgs;
use test::TestArgs;

pub(crate) use child_compile::child_compile;
pub(crate) use compile::compile;
pub(crate) use componentize::componentize;
pub(crate) use crds::crds;
pub(crate) use dead_letters::dead_letters;
pub(crate) use migrate::migrate;
pub(crate) use new::new_project;
pub(crate) use probe::probe;
pub(crate) use pull::pull;
pub(crate) use push::push;
pub(crate) use rbac::rbac;
pub(crate) use record::record;
pub(crate) use run::run;
pub(crate) use shards::shards;
pub(crate) use status::status;
pub(crate) use test::test;

#[derive(Parser, Debug)]
#[command(
    name = "kubewasm",
    version,
    about = "Kubernetes event handlers as WebAssembly components"
)]
pub(crate) struct Cli {
    /// Log format (default: text on a terminal, JSON lines otherwise).
    #[arg(long, value_enum, global = true, env = "KUBEWASM_LOG_FORMAT")]
    pub(crate) log_format: Option<LogFormat>,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    /// Run the plugins of a folder against a cluster.
    Run(Box<RunArgs>),
    /// Create a plugin project (WIT bindings wired, a build command, a fixture test).
    New(NewArgs),
    /// Make a core module (clang wasm32-wasi, Go wasip1) a plugin component.
    Componentize(ComponentizeArgs),
    /// Print the least-privilege RBAC (YAML) the plugins of a folder need.
    Rbac(RbacArgs),
    /// Print the CustomResourceDefinitions of Plugin and NamespacedPlugin (YAML).
    Crds,
    /// Print Plugin manifests for the plugins of a folder, their sidecars as specs (YAML).
    Migrate(MigrateArgs),
    /// Which replica leads (the Lease) and which plugin versions each replica serves
    /// (the Plugin objects' status), read from the cluster.
    Status(StatusArgs),
    /// Which replica holds which shard of a sharded host (`run --shards N`),
    /// read from its shard Leases and member Leases.
    Shards(ShardsArgs),
    /// GET a path of a running host's listener; exit 0 on 200 (for exec probes).
    Probe(ProbeArgs),
    /// List a running host's dead letters: deltas its plugins gave up on.
    DeadLetters(DeadLettersArgs),
    /// Precompile every plugin of a folder into the compile cache the host loads.
    Compile(CompileArgs),
    /// Publish a .wasm to an OCI registry as a Wasm artifact; prints REF@sha256:...
    Push(PushArgs),
    /// Fetch a plugin module from an OCI registry (digest verified); prints its digest.
    Pull(PullArgs),
    /// Run a plugin against fixture files (no cluster, no network): exit 0 when every case
    /// passes, 1 when one fails, 2 on bad input.
    Test(TestArgs),
    /// Record the plugins of a folder against a real cluster, in dry run (nothing written to
    /// the cluster), as one fixture per plugin that `kubewasm test` replays.
    Record(RecordArgs),
    /// Compile one component from stdin into an artifact (the host's compiler child).
    #[command(name = "__compile", hide = true)]
    ChildCompile(ChildCompileArgs),
}

pub(crate) fn parse_size(s: &str) -> Result<u64, String> {
    kubewasm::runtime::manifest::parse_bytes(s)
        .filter(|n| *n > 0)
        .ok_or_else(|| {
            format!("{s:?} is not a size above 0; write e.g. 512Mi, 1Gi or a byte count")
        })
}
