//! The `kubewasm` command.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use kubewasm::admin::auth::{Authenticator, KubeReviewer};
use kubewasm::admin::server::{MetricsAddr, MetricsServer, UiServer};
use kubewasm::admin::ui::{AllowedHosts, UiAddr};
use kubewasm::app::{App, ClusterTarget};
use kubewasm::config::{CompilerKind, RunSettings};
use kubewasm::oci;
use kubewasm::source::kube::InitialList;
use kubewasm::telemetry::logging::LogFormat;
use kubewasm::telemetry::{Identity, Telemetry};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

// musl's malloc is slow under many threads: the static image uses jemalloc.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read at its first allocation: a background thread
/// returns pages freed for a second (dirty) straight to the system, so RSS
/// follows what the host holds instead of its peaks. jemalloc reads the
/// symbol as a `const char *`: a reference to an array is that pointer.
#[cfg(feature = "jemalloc")]
#[allow(unsafe_code)] // exporting a symbol by name is what jemalloc asks for
#[unsafe(export_name = "_rjem_malloc_conf")]
pub static JEMALLOC_CONF: &[u8; 60] =
    b"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0\0";

#[derive(Parser, Debug)]
#[command(
    name = "kubewasm",
    version,
    about = "Kubernetes event handlers as WebAssembly components"
)]
struct Cli {
    /// Log format (default: text on a terminal, JSON lines otherwise).
    #[arg(long, value_enum, global = true, env = "KUBEWASM_LOG_FORMAT")]
    log_format: Option<LogFormat>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
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

#[derive(clap::Args, Debug)]
#[command(
    after_help = "A fixture holds a cache (objects, or a folder of manifests), steps (a delta, \
the initial list, or the next pending retry or requeue) and each step's expected calls: result, \
actions, Events, logs. Print the format with --schema; see the book, docs/book/src/testing.md."
)]
struct TestArgs {
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

#[derive(clap::Args, Debug)]
#[command(
    after_help = "Per plugin, OUT/NAME.yaml holds the cache it started from, each delta it \
received and what each call did (result, actions, Events) as the step's expect. Actions are sent \
as server-side dry runs (dryRun=All): the server answers them (a refusal is kept as the step's \
failures) and persists nothing. Secret data is redacted. Replay: kubewasm test NAME.wasm \
OUT/NAME.yaml. See README.md, \"Recording from a real cluster\"."
)]
#[command(group(clap::ArgGroup::new("stop").required(true).args(["duration", "until_idle"])))]
struct RecordArgs {
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
fn record(rt: &tokio::runtime::Runtime, args: RecordArgs) -> anyhow::Result<()> {
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

/// `kubewasm test`, with its own exit codes.
fn test(args: TestArgs) -> std::process::ExitCode {
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
    };
    match kubewasm::testing::run(&opts, &mut std::io::stdout().lock()) {
        Ok(summary) => std::process::ExitCode::from(summary.exit_code()),
        Err(e) => {
            let _ = writeln!(std::io::stderr().lock(), "Error: {e}");
            std::process::ExitCode::from(2)
        }
    }
}

#[derive(clap::Args, Debug)]
struct CompileArgs {
    /// Folder of plugins (NAME.wasm; sidecars are not needed).
    folder: PathBuf,
    /// Compile cache to write (what `run --cache-dir` reads) [default: $XDG_CACHE_HOME/kubewasm/components].
    #[arg(long, visible_alias = "out", env = "KUBEWASM_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
    /// Size cap of the cache: older artifacts beyond it are evicted (this run's never).
    #[arg(long, value_parser = parse_size, default_value = "1Gi")]
    compile_cache_max: u64,
    /// Sign the artifacts with this key file (at least 32 bytes; the host verifies with its --artifact-key)
    /// [default: the cache folder's own key, which only a host using that folder accepts].
    #[arg(long, env = "KUBEWASM_ARTIFACT_KEY")]
    artifact_key: Option<PathBuf>,
    /// Compile for a host run with --no-epoch-deadlines (benchmarks only).
    #[arg(long, hide = true)]
    no_epoch_deadlines: bool,
}

/// How `push` and `pull` reach and log in to a registry.
#[derive(clap::Args, Debug)]
struct RegistryArgs {
    /// PEM file of a CA to trust besides the system roots (a private registry's).
    #[arg(long, env = "KUBEWASM_REGISTRY_CA")]
    ca: Option<PathBuf>,
    /// Talk plain HTTP to REF's registry (local development only; never the default).
    #[arg(long)]
    insecure_http: bool,
    /// Registry user (with --password).
    #[arg(long, requires = "password", conflicts_with = "docker_config")]
    username: Option<String>,
    /// Registry password (with --username).
    #[arg(
        long,
        requires = "username",
        env = "KUBEWASM_REGISTRY_PASSWORD",
        hide_env_values = true
    )]
    password: Option<String>,
    /// A docker config.json (or a Secret's .dockerconfigjson) to take REF's registry credentials from.
    #[arg(long)]
    docker_config: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
struct PushArgs {
    /// The module to publish (a component or core module).
    file: PathBuf,
    /// Where: registry/repository:tag.
    reference: String,
    /// Also sign the pushed manifest digest with this private key and push
    /// the signature where cosign keeps it (`sha256-<hex>.sig`), so that
    /// `cosign verify --key` and a verifying pull accept it. An unencrypted
    /// PKCS#8 (or SEC1) P-256 key PEM, e.g. from `openssl ecparam -genkey
    /// -name prime256v1 -noout | openssl pkcs8 -topk8 -nocrypt`; cosign's
    /// encrypted cosign.key is not read.
    #[arg(long, value_name = "KEY.pem")]
    sign_key: Option<PathBuf>,
    #[command(flatten)]
    registry: RegistryArgs,
}

#[derive(clap::Args, Debug)]
struct PullArgs {
    /// What: registry/repository:tag or registry/repository@sha256:<hex>.
    reference: String,
    /// Where to write the module [default: <repository name>.wasm here].
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// Largest module accepted.
    #[arg(long, value_parser = parse_size, default_value = "64Mi")]
    max_module_size: u64,
    /// Write the module only if its cosign signature verifies with this
    /// public key PEM (cosign.pub); repeat to accept any of several keys.
    #[arg(long, value_name = "PUB.pem")]
    verify_key: Vec<PathBuf>,
    #[command(flatten)]
    registry: RegistryArgs,
}

impl RegistryArgs {
    fn client(
        &self,
        reference: &str,
        options: oci::PullOptions,
    ) -> anyhow::Result<(oci::OciClient, oci::Credentials)> {
        let registry = reference
            .parse::<oci::Reference>()
            .map(|r| r.resolve_registry().to_owned())
            .with_context(|| format!("{reference:?} is not an OCI reference"))?;
        let mut transport = oci::Transport::default();
        if let Some(ca) = &self.ca {
            let pem =
                std::fs::read(ca).with_context(|| format!("cannot read --ca {}", ca.display()))?;
            transport = transport.with_ca_pem(&pem, &ca.display().to_string())?;
        }
        if self.insecure_http {
            transport = transport.with_plain_http(&registry);
        }
        let credentials = match (&self.username, &self.password, &self.docker_config) {
            (Some(username), Some(password), _) => oci::Credentials::Basic {
                username: username.clone(),
                password: password.clone(),
            },
            (_, _, Some(file)) => {
                let bytes = std::fs::read(file)
                    .with_context(|| format!("cannot read --docker-config {}", file.display()))?;
                oci::credentials_from_docker_config(&bytes, &registry)
                    .with_context(|| format!("--docker-config {}", file.display()))?
            }
            _ => oci::Credentials::Anonymous,
        };
        Ok((oci::OciClient::new(transport, options), credentials))
    }
}

async fn push(args: PushArgs) -> anyhow::Result<()> {
    // The key is read before anything is pushed: a bad key pushes nothing.
    let key = args
        .sign_key
        .as_deref()
        .map(oci::SigningKey::load)
        .transpose()?;
    let (client, credentials) = args
        .registry
        .client(&args.reference, oci::PullOptions::default())?;
    let pushed = client
        .push_file(&args.file, &args.reference, &credentials)
        .await?;
    writeln!(std::io::stdout().lock(), "{}", pushed.pinned)?;
    if let Some(key) = key {
        let signature = client
            .push_signature(&args.reference, &pushed.digest, &key, &credentials)
            .await?;
        writeln!(std::io::stdout().lock(), "{signature}")?;
    }
    Ok(())
}

async fn pull(args: PullArgs) -> anyhow::Result<()> {
    let keys = args
        .verify_key
        .iter()
        .map(|p| oci::PublicKey::load(p))
        .collect::<Result<Vec<_>, _>>()?;
    let options = oci::PullOptions {
        max_module_bytes: args.max_module_size,
        cache: None,
        signatures: if keys.is_empty() {
            oci::SignaturePolicy::default()
        } else {
            oci::SignaturePolicy::everything(keys)
        },
    };
    let (client, credentials) = args.registry.client(&args.reference, options)?;
    let pulled = client.pull(&args.reference, &credentials).await?;
    let output = match args.output {
        Some(path) => path,
        None => {
            let parsed: oci::Reference = args.reference.parse()?;
            let name = parsed.repository().rsplit('/').next().unwrap_or("module");
            PathBuf::from(format!("{name}.wasm"))
        }
    };
    std::fs::write(&output, &pulled.bytes)
        .with_context(|| format!("cannot write {}", output.display()))?;
    let verified = pulled
        .verified
        .as_ref()
        .map(|v| format!("  signature verified by {}", v.key))
        .unwrap_or_default();
    writeln!(
        std::io::stdout().lock(),
        "{}  {}  {} bytes{verified}",
        pulled.pinned,
        output.display(),
        pulled.bytes.len()
    )?;
    Ok(())
}

fn parse_size(s: &str) -> Result<u64, String> {
    kubewasm::runtime::manifest::parse_bytes(s)
        .filter(|n| *n > 0)
        .ok_or_else(|| {
            format!("{s:?} is not a size above 0; write e.g. 512Mi, 1Gi or a byte count")
        })
}

fn compile(args: CompileArgs) -> anyhow::Result<()> {
    use kubewasm::runtime::CompileSource;
    let mut engine = kubewasm::runtime::EngineOptions {
        epoch_deadlines: !args.no_epoch_deadlines,
        cache_max_bytes: args.compile_cache_max,
        artifact_key: args.artifact_key,
        ..Default::default()
    };
    if args.cache_dir.is_some() {
        engine.cache_dir = args.cache_dir;
    }
    let report = kubewasm::precompile::compile_folder(&args.folder, engine)?;
    let mut out = std::io::stdout().lock();
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    let (mut compiled, mut cached) = (0, 0);
    for f in &report.files {
        match &f.outcome {
            Ok(c) => {
                let what = match c.source {
                    CompileSource::Compiled => {
                        compiled += 1;
                        "compiled"
                    }
                    CompileSource::Cached => {
                        cached += 1;
                        "cached  "
                    }
                };
                writeln!(
                    out,
                    "{what}  {}  {:.1} MiB in {:.2} s  {}",
                    f.path.display(),
                    mib(c.artifact_bytes),
                    c.elapsed.as_secs_f64(),
                    c.artifact.display()
                )?;
            }
            Err(e) => writeln!(
                out,
                "FAILED    {}: {e} (fix or remove the file; nothing was cached for it)",
                f.path.display()
            )?,
        }
    }
    let failed: Vec<&str> = report.failed().map(|f| f.name.as_str()).collect();
    writeln!(
        out,
        "{} plugins: {compiled} compiled, {cached} already cached, {} failed; cache {} holds {:.1} MiB (cap {:.1} MiB)",
        report.files.len(),
        failed.len(),
        report.cache_dir.display(),
        mib(report.cache_bytes),
        mib(report.cache_max_bytes)
    )?;
    match &report.key {
        kubewasm::runtime::artifact_key::KeySource::Operator(path) => writeln!(
            out,
            "artifacts signed with the key {}: hosts run with the same --artifact-key map them",
            path.display()
        )?,
        other => writeln!(
            out,
            "artifacts signed with {other}: only a host using this cache folder maps them (pass --artifact-key to ship them elsewhere)"
        )?,
    }
    anyhow::ensure!(
        failed.is_empty(),
        "{} of {} plugins did not compile: {}",
        failed.len(),
        report.files.len(),
        failed.join(", ")
    );
    Ok(())
}

#[derive(clap::Args, Debug)]
struct ChildCompileArgs {
    #[arg(long)]
    out: PathBuf,
    #[arg(long)]
    compat: String,
    #[arg(long)]
    digest: String,
    #[arg(long, action = clap::ArgAction::Set)]
    epoch_deadlines: bool,
    #[arg(long)]
    parent_pid: Option<u32>,
}

/// The compiler child: no async runtime, the answer on stdout.
fn child_compile(args: ChildCompileArgs) -> std::process::ExitCode {
    let request = kubewasm::runtime::compiler::ChildRequest {
        out: args.out,
        compat: args.compat,
        digest: args.digest,
        epoch_deadlines: args.epoch_deadlines,
        parent: args.parent_pid,
    };
    if kubewasm::runtime::compiler::serve_child(
        &request,
        std::io::stdin().lock(),
        std::io::stdout().lock(),
    ) {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::from(2)
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum OutputFormat {
    Table,
    Json,
}

#[derive(clap::Args, Debug)]
struct DeadLettersArgs {
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
    /// File holding a bearer token that may get /dead-letters (a host run
    /// with --metrics-auth asks for one).
    #[arg(long, env = "KUBEWASM_TOKEN_FILE")]
    token_file: Option<PathBuf>,
    /// Output format.
    #[arg(long, short, value_enum, default_value = "table")]
    output: OutputFormat,
    /// Connect and read timeout.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    timeout: std::time::Duration,
}

fn dead_letters(args: DeadLettersArgs) -> anyhow::Result<()> {
    use kubewasm::admin::probe;
    use kubewasm::dispatch::DeadLetterRecord;
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
    let (code, body) =
        probe::get_with_token(&addr, "/dead-letters", token.as_deref(), args.timeout)?;
    if code == 401 || code == 403 {
        anyhow::bail!(
            "GET /dead-letters answered {code}: {} (the host runs with --metrics-auth: pass --token-file with a token whose user may get the non-resource URL /dead-letters)",
            body.trim()
        );
    }
    if code != 200 {
        anyhow::bail!("GET /dead-letters answered {code}: {}", body.trim());
    }
    let records: Vec<DeadLetterRecord> =
        serde_json::from_str(&body).context("the host's /dead-letters answer is not a list")?;
    let mut out = std::io::stdout().lock();
    match args.output {
        OutputFormat::Json => writeln!(out, "{}", serde_json::to_string_pretty(&records)?)?,
        OutputFormat::Table => {
            writeln!(
                out,
                "{:<20} {:<24} {:<40} {:<8} {:>8}  {:<8} {:<20}  LAST ERROR",
                "PLUGIN", "KIND", "OBJECT", "DELTA", "ATTEMPTS", "STATE", "LAST FAILED"
            )?;
            for r in &records {
                let object = match &r.namespace {
                    Some(ns) => format!("{ns}/{}", r.name),
                    None => r.name.clone(),
                };
                writeln!(
                    out,
                    "{:<20} {:<24} {:<40} {:<8} {:>8}  {:<8} {:<20}  {}",
                    r.plugin,
                    r.kind,
                    object,
                    r.delta,
                    r.attempts,
                    // Parked keys are still retried at the backoff cap.
                    if r.parked { "parked" } else { "dead" },
                    r.last_failed,
                    r.last_error
                )?;
            }
        }
    }
    Ok(())
}

#[derive(clap::Args, Debug)]
struct ProbeArgs {
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

fn probe(args: ProbeArgs) -> anyhow::Result<()> {
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

#[derive(clap::Args, Debug)]
struct RbacArgs {
    /// Folder of plugins (NAME.wasm plus optional NAME.yaml), loaded as `run` loads them.
    #[arg(long, env = "KUBEWASM_PLUGINS")]
    plugins: Option<PathBuf>,
    /// Plugin and NamespacedPlugin manifests (a YAML file of one or more documents, or a folder of them),
    /// as you would `kubectl apply` them: their access lists as the host grants them; repeatable.
    #[arg(long = "objects", value_name = "PATH")]
    objects: Vec<PathBuf>,
    /// Also the Plugin and NamespacedPlugin objects of the cluster (--kubeconfig, --context).
    #[arg(long)]
    from_cluster: bool,
    /// Kubeconfig of the cluster --from-cluster lists (unset: KUBECONFIG, the pod's service account, ~/.kube/config).
    #[arg(long, requires = "from_cluster")]
    kubeconfig: Option<PathBuf>,
    /// Context of the kubeconfig to use (default: its current context).
    #[arg(long, requires = "from_cluster")]
    context: Option<String>,
    /// The host's config file: NamespacedPlugins outside its `pluginObjects.tenantNamespaces`
    /// are never run, so they get no rules (without it, every NamespacedPlugin counts).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Namespace the host runs in (its ServiceAccount and Lease).
    #[arg(long, default_value = "kubewasm")]
    namespace: String,
    /// Name of the roles and bindings.
    #[arg(long, default_value = "kubewasm")]
    name: String,
    /// The host's ServiceAccount, in --namespace [default: --name].
    #[arg(long)]
    service_account: Option<String>,
    /// Only the plugins' roles, no leader-election Role (for more plugins bound to an existing ServiceAccount).
    #[arg(long)]
    plugins_only: bool,
    /// Name of the leader-election Lease.
    #[arg(long, default_value = "kubewasm")]
    lease_name: String,
    /// Leave out the ClusterRole of --metrics-auth (create TokenReviews and
    /// SubjectAccessReviews), for a host run with metrics authentication off.
    #[arg(long)]
    no_metrics_auth: bool,
    /// CustomResourceDefinition manifest (file or folder) for kinds not built in; repeatable.
    #[arg(long = "crd")]
    crds: Vec<PathBuf>,
    /// Cache of compiled plugins (default: $XDG_CACHE_HOME/kubewasm/components).
    #[arg(long, env = "KUBEWASM_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
}

async fn rbac(args: RbacArgs) -> anyhow::Result<()> {
    let mut opts = kubewasm::rbac::RbacOptions {
        plugins: args.plugins,
        objects: args.objects,
        from_cluster: args
            .from_cluster
            .then(|| kubewasm::source::kube::KubeTarget::new(args.kubeconfig, args.context)),
        ..kubewasm::rbac::RbacOptions::default()
    };
    opts.namespace = args.namespace;
    opts.service_account = args.service_account.unwrap_or_else(|| args.name.clone());
    opts.name = args.name;
    opts.host_role = !args.plugins_only;
    opts.lease_name = args.lease_name;
    opts.metrics_auth = !args.no_metrics_auth;
    opts.crds = args.crds;
    if let Some(file) = &args.config {
        let settings = kubewasm::config::RunSettings::from_file(file)?;
        opts.tenant_namespaces = Some(
            settings
                .plugin_objects
                .and_then(|o| o.tenant_namespaces)
                .unwrap_or_default(),
        );
    }
    if args.cache_dir.is_some() {
        opts.cache_dir = args.cache_dir;
    }
    let derived = kubewasm::rbac::derive(&opts).await?;
    for note in &derived.notes {
        eprintln!("note: {note}");
    }
    let yaml = kubewasm::rbac::render::render(&opts, &derived);
    std::io::stdout().lock().write_all(yaml.as_bytes())?;
    Ok(())
}

#[derive(clap::Args, Debug)]
struct MigrateArgs {
    /// Plugin folder (NAME.wasm and its sidecar NAME.yaml).
    folder: PathBuf,
    /// Take the modules from this ConfigMap (key NAME.wasm; `kubectl create configmap NAME
    /// --from-file=FOLDER`) instead of the host's plugin folder.
    #[arg(long)]
    configmap: Option<String>,
    /// The ConfigMap's namespace [default: the host's].
    #[arg(long, requires = "configmap")]
    configmap_namespace: Option<String>,
}

fn migrate(args: MigrateArgs) -> anyhow::Result<()> {
    use kubewasm::objects::migrate::{ModuleFrom, manifests};
    let from = match args.configmap {
        Some(name) => ModuleFrom::ConfigMap {
            name,
            namespace: args.configmap_namespace,
        },
        None => ModuleFrom::Folder,
    };
    let yaml = manifests(&args.folder, &from)?;
    std::io::stdout().lock().write_all(yaml.as_bytes())?;
    Ok(())
}

fn crds() -> anyhow::Result<()> {
    let yaml = kubewasm::crd::crds_yaml().context("cannot render the CRDs")?;
    std::io::stdout().lock().write_all(yaml.as_bytes())?;
    Ok(())
}

#[derive(clap::Args, Debug)]
struct NewArgs {
    /// Language of the plugin.
    #[arg(long, value_enum)]
    lang: kubewasm::scaffold::Lang,
    /// Project name: lowercase letters, digits and dashes.
    name: String,
    /// Folder to create the project in.
    #[arg(long, default_value = ".")]
    dir: PathBuf,
    /// Take the WIT from this folder instead of the one built into kubewasm.
    #[arg(long)]
    wit: Option<PathBuf>,
}

fn new_project(args: NewArgs) -> anyhow::Result<()> {
    let root = kubewasm::scaffold::create(args.lang, &args.name, &args.dir, args.wit.as_deref())?;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "created {} ({}): see its README for build, test and install",
        root.display(),
        args.lang.as_str()
    )?;
    Ok(())
}

#[derive(clap::Args, Debug)]
struct ComponentizeArgs {
    /// The core module the compiler wrote.
    core: PathBuf,
    /// The component to write.
    #[arg(long, short)]
    output: PathBuf,
    /// World to embed when the module carries no component type.
    #[arg(long, default_value = kubewasm::toolchain::componentize::DEFAULT_WORLD)]
    world: String,
    /// WIT folder to take the world from [default: the WIT built into kubewasm, wit/v0.2.0].
    #[arg(long)]
    wit: Option<PathBuf>,
}

fn componentize(args: ComponentizeArgs) -> anyhow::Result<()> {
    let opts = kubewasm::toolchain::Options {
        wit: args.wit,
        world: Some(args.world),
    };
    let done =
        kubewasm::toolchain::componentize::componentize_file(&args.core, &args.output, &opts)?;
    writeln!(
        std::io::stdout().lock(),
        "wrote {} ({} bytes): {done}",
        args.output.display(),
        done.component.len()
    )?;
    Ok(())
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// Config file (YAML or JSON, `apiVersion: kubewasm.io/v1alpha1`, `kind: HostConfig`); flags win over it.
    #[arg(long, env = "KUBEWASM_CONFIG")]
    config: Option<PathBuf>,
    /// Folder of plugins: NAME.wasm plus optional NAME.yaml; watched and hot-reloaded.
    #[arg(long, env = "KUBEWASM_PLUGINS")]
    plugins: Option<PathBuf>,
    /// Folder of YAML/JSON manifests served as an embedded local cluster
    /// (only when named: without it, the cluster of KUBECONFIG, the pod or ~/.kube/config).
    #[arg(long, env = "KUBEWASM_LOCAL", conflicts_with_all = ["kubeconfig", "context"])]
    local: Option<PathBuf>,
    /// Kubeconfig of a real cluster (unset: KUBECONFIG, the pod's service account, ~/.kube/config).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Context of the kubeconfig to use (default: its current context).
    #[arg(long)]
    context: Option<String>,
    /// Initial list strategy: streaming watch-list with paged fallback, always streaming, or always paged.
    #[arg(long, value_enum)]
    initial_list: Option<InitialListArg>,
    /// Log every action instead of executing it.
    #[arg(long)]
    dry_run: bool,
    /// Exit 0 once the initial sync is handled and every queue is empty, printing a summary.
    #[arg(long)]
    until_idle: bool,
    /// Cache of compiled plugins (default: $XDG_CACHE_HOME/kubewasm/components).
    #[arg(long, env = "KUBEWASM_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
    /// Size cap of the compile cache and pulled modules together, e.g. 512Mi [default: 1Gi]: least recently used entries beyond it are evicted.
    #[arg(long, value_parser = parse_size, env = "KUBEWASM_COMPILE_CACHE_MAX")]
    compile_cache_max: Option<u64>,
    /// Where plugins are compiled: a child process (the host's memory returns after) or a host thread [default: child].
    #[arg(long, value_enum)]
    compiler: Option<CompilerArg>,
    /// Key file (at least 32 bytes, e.g. a mounted Secret) that compiled artifacts must be signed with to be
    /// mapped (`kubewasm compile --artifact-key`) [default: a key the host generates into its cache folder].
    #[arg(long, env = "KUBEWASM_ARTIFACT_KEY")]
    artifact_key: Option<PathBuf>,
    /// Keep managedFields and the last-applied annotation in the cache.
    #[arg(long)]
    keep_managed_fields: bool,
    /// Listen address of /healthz, /readyz, /metrics and /dead-letters:
    /// HOST:PORT, :PORT or `off` (default 0.0.0.0:9090; off with --until-idle).
    #[arg(long, env = "KUBEWASM_METRICS_ADDR")]
    metrics_addr: Option<MetricsAddr>,
    /// /metrics and /dead-letters need a Kubernetes bearer token allowed to
    /// get them (TokenReview + SubjectAccessReview); probes never do
    /// [default: true in a Pod (KUBERNETES_SERVICE_HOST set, no kubeconfig), else false].
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", env = "KUBEWASM_METRICS_AUTH")]
    metrics_auth: Option<bool>,
    /// Write the listener's bound address to this file (for `kubewasm probe
    /// --addr-file` when several replicas share a host network and listen
    /// on free ports).
    #[arg(long, env = "KUBEWASM_METRICS_ADDR_FILE")]
    metrics_addr_file: Option<PathBuf>,
    /// Serve a live, read-only web view of the host (plugins, informers, a
    /// feed of deltas and actions, the cache with Secrets redacted, dead
    /// letters) on its own listener, --ui-addr; off by default.
    #[arg(long, env = "KUBEWASM_UI")]
    ui: bool,
    /// Listen address of the web view: HOST:PORT, or :PORT on 127.0.0.1
    /// [default: 127.0.0.1:9091; reach it with kubectl port-forward].
    #[arg(long, env = "KUBEWASM_UI_ADDR")]
    ui_addr: Option<UiAddr>,
    /// A Host name (or address) the web view answers to besides localhost
    /// and loopback addresses; repeatable.
    #[arg(
        long = "ui-allowed-host",
        env = "KUBEWASM_UI_ALLOWED_HOSTS",
        value_delimiter = ','
    )]
    ui_allowed_hosts: Vec<String>,
    #[command(flatten)]
    election: ElectionArgs,
    /// How long SIGTERM waits for in-flight calls and actions [default: 20s].
    #[arg(long, value_parser = humantime::parse_duration)]
    shutdown_grace: Option<std::time::Duration>,
}

/// Leader election on a coordination.k8s.io/v1 Lease.
#[derive(clap::Args, Debug)]
struct ElectionArgs {
    /// Elect a leader among replicas; followers stay warm but act on nothing
    /// [default: true in a Pod (KUBERNETES_SERVICE_HOST set, no kubeconfig), else false].
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    leader_elect: Option<bool>,
    /// How long followers wait after the leader's last renewal [default: 15s].
    #[arg(long, value_parser = humantime::parse_duration)]
    leader_elect_lease_duration: Option<std::time::Duration>,
    /// How long the leader acts without renewing before it stops [default: 10s].
    #[arg(long, value_parser = humantime::parse_duration)]
    leader_elect_renew_deadline: Option<std::time::Duration>,
    /// How often the leader renews and followers try to acquire [default: 2s].
    #[arg(long, value_parser = humantime::parse_duration)]
    leader_elect_retry_period: Option<std::time::Duration>,
    /// Name of the Lease [default: kubewasm].
    #[arg(long)]
    leader_elect_lease_name: Option<String>,
    /// Namespace of the Lease [default: POD_NAMESPACE, else the service account's namespace, else default].
    #[arg(long)]
    leader_elect_namespace: Option<String>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum CompilerArg {
    Child,
    InProcess,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum InitialListArg {
    Auto,
    Stream,
    Paged,
}

impl RunArgs {
    fn settings(self) -> anyhow::Result<RunSettings> {
        let file = match &self.config {
            Some(path) => RunSettings::from_file(path)?,
            None => RunSettings::default(),
        };
        let flags = RunSettings {
            plugins: self.plugins,
            local: self.local,
            kubeconfig: self.kubeconfig,
            context: self.context,
            dry_run: self.dry_run.then_some(true),
            until_idle: self.until_idle.then_some(true),
            cache_dir: self.cache_dir,
            compile_cache_max: self.compile_cache_max,
            artifact_key: self.artifact_key,
            compiler: self.compiler.map(|c| match c {
                CompilerArg::Child => CompilerKind::Child,
                CompilerArg::InProcess => CompilerKind::InProcess,
            }),
            keep_managed_fields: self.keep_managed_fields.then_some(true),
            metrics_addr: self.metrics_addr,
            metrics_auth: self.metrics_auth,
            ui: self.ui.then_some(true),
            ui_addr: self.ui_addr,
            ui_allowed_hosts: (!self.ui_allowed_hosts.is_empty()).then_some(self.ui_allowed_hosts),
            initial_list: self.initial_list.map(|i| match i {
                InitialListArg::Auto => InitialList::Auto,
                InitialListArg::Stream => InitialList::Stream,
                InitialListArg::Paged => InitialList::Paged,
            }),
            leader_elect: self.election.leader_elect,
            leader_elect_lease_duration: self.election.leader_elect_lease_duration,
            leader_elect_renew_deadline: self.election.leader_elect_renew_deadline,
            leader_elect_retry_period: self.election.leader_elect_retry_period,
            leader_elect_lease_name: self.election.leader_elect_lease_name,
            leader_elect_namespace: self.election.leader_elect_namespace,
            shutdown_grace: self.shutdown_grace,
            ..RunSettings::default()
        };
        Ok(flags.over(file))
    }
}

/// SIGTERM and Ctrl-C, registered once at the start of `run`: a signal
/// that arrives while the host is still starting is then held for it
/// (under the default action it would kill the host mid-start, exit
/// status "signal 15") and acted on as soon as startup is done.
struct ShutdownSignal {
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
}

impl ShutdownSignal {
    fn install() -> Self {
        Self {
            #[cfg(unix)]
            term: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok(),
        }
    }

    async fn recv(&mut self) {
        let ctrl_c = tokio::signal::ctrl_c();
        #[cfg(unix)]
        if let Some(term) = self.term.as_mut() {
            tokio::select! {
                _ = ctrl_c => {}
                _ = term.recv() => {}
            }
            return;
        }
        let _ = ctrl_c.await;
    }
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    let mut shutdown = ShutdownSignal::install();
    let metrics_addr_file = args.metrics_addr_file.clone();
    let opts = args
        .settings()?
        .into_options(kubewasm::config::default_cluster_available())?;
    let cancel = CancellationToken::new();
    let telemetry = Telemetry::new(Identity::from_env());
    telemetry.set_redactor(opts.admin.redactor.clone());
    let auth = match (&opts.cluster, opts.admin.metrics_auth) {
        (ClusterTarget::Kube(target), true) => {
            let client = target.client().await.context(
                "--metrics-auth reviews scrapers' tokens with the API server, which cannot be reached",
            )?;
            Some(Arc::new(Authenticator::new(KubeReviewer::new(client))))
        }
        _ => None,
    };
    // Listening first: probes answer (not ready) while plugins compile.
    let server = MetricsServer::start_with(&opts.metrics_addr, telemetry.clone(), auth).await?;
    if let (Some(file), Some(server)) = (&metrics_addr_file, &server) {
        kubewasm::admin::probe::write_addr_file(file, server.local_addr())
            .with_context(|| format!("writing the listener address to {}", file.display()))?;
    }
    let ui = if opts.ui {
        Some(
            UiServer::start(
                &opts.admin.ui_addr,
                telemetry.clone(),
                AllowedHosts::new(&opts.admin.ui_allowed_hosts),
            )
            .await?,
        )
    } else {
        None
    };
    let app = App::start_with(&opts, None, telemetry, cancel.clone())
        .await
        .context("cannot start kubewasm")?;
    if opts.until_idle {
        tokio::select! {
            () = app.wait_idle() => {}
            () = shutdown.recv() => tracing::info!("signal received; shutting down"),
        }
        // Informers stop with their plugins: read the refused ones first.
        let refused = app.refused_informers();
        app.shutdown().await;
        for listener in [server, ui].into_iter().flatten() {
            listener.stop().await;
        }
        let mut summary = app.summary();
        summary.refused_informers = refused;
        writeln!(std::io::stdout().lock(), "{summary}")?;
        let problems = summary.problems();
        anyhow::ensure!(
            problems.is_empty(),
            "the run did not handle everything:\n  {}",
            problems.join("\n  ")
        );
        return Ok(());
    }
    let tasks = TaskTracker::new();
    app.watch(opts.poll, &tasks);
    shutdown.recv().await;
    tracing::info!("signal received; draining in-flight calls");
    app.shutdown().await;
    tasks.close();
    tasks.wait().await;
    for listener in [server, ui].into_iter().flatten() {
        listener.stop().await;
    }
    tracing::info!("stopped cleanly");
    Ok(())
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    if let Command::Test(args) = cli.command {
        kubewasm::telemetry::logging::init_with(cli.log_format, "error");
        return test(args);
    }
    kubewasm::telemetry::logging::init(cli.log_format);
    let command = match cli.command {
        Command::ChildCompile(args) => return child_compile(args),
        other => other,
    };
    let result = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
        .and_then(|rt| match command {
            Command::Run(args) => rt.block_on(run(*args)),
            Command::Probe(args) => probe(args),
            Command::DeadLetters(args) => dead_letters(args),
            Command::New(args) => new_project(args),
            Command::Componentize(args) => componentize(args),
            Command::Rbac(args) => rt.block_on(rbac(args)),
            Command::Crds => crds(),
            Command::Migrate(args) => migrate(args),
            Command::Compile(args) => {
                // Progress lines of slow compiles need a runtime to tick on.
                let _entered = rt.enter();
                compile(args)
            }
            Command::Push(args) => rt.block_on(push(args)),
            Command::Pull(args) => rt.block_on(pull(args)),
            Command::Record(args) => record(&rt, args),
            Command::ChildCompile(_) | Command::Test(_) => Ok(()),
        });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // The cause chain, not a backtrace: these are the user's errors
            // to act on (and symbolising a backtrace takes seconds).
            let _ = writeln!(std::io::stderr().lock(), "Error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The command line's reference pages, generated from [`Cli`]: the book's
/// markdown page and the man pages (docs/man/, `man -l
/// docs/man/kubewasm-run.1`). Committed, and checked here: a flag added or
/// changed without regenerating them fails;
/// `KUBEWASM_REGENERATE=1 cargo test -p kubewasm --bin kubewasm reference`
/// rewrites them.
#[cfg(test)]
mod reference {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use clap::CommandFactory;
    use kubewasm::reference::{REGENERATE, check_or_write, cli, repo_root};

    const HOW: &str = "cargo test -p kubewasm --bin kubewasm reference";

    #[test]
    fn cli_page_is_current() {
        let page = cli::markdown(&super::Cli::command());
        for expected in [
            "## kubewasm run",
            "`--plugins <PLUGINS>`",
            "`KUBEWASM_PLUGINS`",
        ] {
            assert!(page.contains(expected), "{expected} missing:\n{page}");
        }
        assert!(!page.contains("__compile"), "a hidden command is listed");
        check_or_write("docs/book/src/reference/cli.md", page.as_bytes(), HOW).unwrap();
    }

    /// The flags in the book's hand-written tables (which say more than
    /// `--help`) exist, and every flag of `run` is in its chapter: a flag
    /// renamed, removed or added fails here until the prose follows.
    #[test]
    fn the_books_flag_tables_follow_the_cli() {
        let cli = super::Cli::command();
        let globals: Vec<String> = cli
            .get_arguments()
            .filter_map(|a| a.get_long().map(str::to_owned))
            .collect();
        for (chapter, section, command, complete) in [
            ("running.md", "", "run", true),
            ("commands.md", "## `kubewasm rbac`", "rbac", false),
        ] {
            let text =
                std::fs::read_to_string(repo_root().join("docs/book/src").join(chapter)).unwrap();
            let text = match section {
                "" => text.as_str(),
                _ => text.split(section).nth(1).unwrap(),
            };
            let text = text.split("\n## ").next().unwrap();
            let sub = cli.find_subcommand(command).unwrap();
            let flags: Vec<String> = sub
                .get_arguments()
                .filter(|a| !a.is_hide_set())
                .filter_map(|a| a.get_long().map(str::to_owned))
                .collect();
            let documented: Vec<&str> = text
                .lines()
                .filter_map(|l| l.strip_prefix("| `--"))
                .map(|l| {
                    l.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                        .next()
                        .unwrap()
                })
                .collect();
            assert!(!documented.is_empty(), "{chapter}: no flag table");
            for flag in &documented {
                assert!(
                    flags.iter().chain(&globals).any(|f| f == flag),
                    "{chapter} documents --{flag}, which `kubewasm {command}` does not have"
                );
            }
            if complete {
                for flag in &flags {
                    assert!(
                        text.contains(&format!("`--{flag}")),
                        "`kubewasm {command} --{flag}` is not in {chapter}: add a row to its table"
                    );
                }
            }
        }
    }

    /// The `kubewasm ...` command lines of the book (in `sh` blocks, with
    /// their indented continuation lines, and in code spans) name commands
    /// and flags that exist.
    #[test]
    fn the_books_command_lines_use_real_flags() {
        let cli = super::Cli::command();
        let longs = |cmd: &clap::Command| -> Vec<String> {
            cmd.get_arguments()
                .flat_map(|a| {
                    a.get_long()
                        .into_iter()
                        .chain(a.get_all_aliases().unwrap_or_default())
                        .map(str::to_owned)
                })
                .chain(["help".to_owned(), "version".to_owned()])
                .collect()
        };
        let globals = longs(&cli);
        let mut pages = Vec::new();
        for dir in ["docs/book/src", "docs/book/src/reference", "docs"] {
            for entry in std::fs::read_dir(repo_root().join(dir)).unwrap() {
                let path = entry.unwrap().path();
                if path.extension().is_some_and(|e| e == "md") && !path.ends_with("cli.md") {
                    pages.push(path);
                }
            }
        }
        pages.push(repo_root().join("README.md"));
        let mut checked = 0;
        for page in &pages {
            for line in command_lines(&std::fs::read_to_string(page).unwrap()) {
                let mut words = line.split_whitespace().skip(1);
                let name = words.next().unwrap_or("");
                let sub = cli
                    .find_subcommand(name)
                    .unwrap_or_else(|| panic!("{}: `{line}`: no command {name}", page.display()));
                let known = longs(sub);
                for word in line.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')) {
                    if let Some(flag) = word.strip_prefix("--").filter(|f| !f.is_empty()) {
                        assert!(
                            known.iter().chain(&globals).any(|k| k == flag),
                            "{}: `{line}`: kubewasm {name} has no --{flag}",
                            page.display()
                        );
                    }
                }
                checked += 1;
            }
        }
        assert!(checked > 20, "only {checked} command lines found");
    }

    /// `kubewasm ...` lines of `sh` blocks (joined with their indented
    /// continuations) and code spans that start with `kubewasm `.
    fn command_lines(text: &str) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let (mut shell, mut fenced, mut continuing) = (false, false, false);
        for line in text.lines() {
            if let Some(info) = line.strip_prefix("```") {
                fenced = !fenced;
                shell = fenced && ["sh", "bash", "console"].contains(&info.trim());
                continuing = false;
                continue;
            }
            let trimmed = line.trim();
            if shell {
                if let Some(rest) = trimmed.strip_prefix("kubewasm ") {
                    out.push(format!("kubewasm {rest}"));
                    continuing = true;
                } else if continuing && line.starts_with(' ') && !trimmed.is_empty() {
                    if let Some(last) = out.last_mut() {
                        last.push(' ');
                        last.push_str(trimmed);
                    }
                } else {
                    continuing = false;
                }
            } else if !fenced {
                for (i, span) in line.split('`').enumerate() {
                    if i % 2 == 1 && span.starts_with("kubewasm ") {
                        out.push(span.to_owned());
                    }
                }
            }
        }
        out
    }

    #[test]
    fn man_pages_are_current() {
        let out = tempfile::tempdir().unwrap();
        clap_mangen::generate_to(super::Cli::command(), out.path()).unwrap();
        let mut generated: Vec<(String, Vec<u8>)> = std::fs::read_dir(out.path())
            .unwrap()
            .map(|e| {
                let path = e.unwrap().path();
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                (name, std::fs::read(&path).unwrap())
            })
            // The compiler child is the binary's own business.
            .filter(|(name, _)| !name.contains("__compile"))
            .collect();
        generated.sort();
        let names: Vec<&str> = generated.iter().map(|(n, _)| n.as_str()).collect();
        assert!(
            names.contains(&"kubewasm.1") && names.contains(&"kubewasm-run.1"),
            "{names:?}"
        );
        let dir = repo_root().join("docs/man");
        let regenerate = std::env::var_os(REGENERATE).is_some();
        for entry in std::fs::read_dir(&dir).into_iter().flatten() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if !names.contains(&name.as_str()) {
                assert!(
                    regenerate,
                    "docs/man/{name} is no command's page: run `{REGENERATE}=1 {HOW}`"
                );
                std::fs::remove_file(&path).unwrap();
            }
        }
        for (name, text) in &generated {
            check_or_write(&format!("docs/man/{name}"), text, HOW).unwrap();
        }
    }
}
