//! `kubewasm run`: the host itself. Its flags over the config file, the
//! admin listeners, then the app until a signal (or idle with --until-idle).

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::ValueEnum;
use kubewasm::admin::auth::{Authenticator, KubeReviewer};
use kubewasm::admin::server::{MetricsAddr, MetricsServer, UiServer};
use kubewasm::admin::ui::{AllowedHosts, UiAddr};
use kubewasm::app::{App, ClusterTarget};
use kubewasm::config::{CompilerKind, RunSettings};
use kubewasm::source::kube::{InitialList, Wire};
use kubewasm::telemetry::{Identity, Telemetry};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::parse_size;
use super::signal::ShutdownSignal;

#[derive(clap::Args, Debug)]
pub(crate) struct RunArgs {
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
    /// Encoding of informers' lists and watches: protobuf for built-in kinds (JSON for custom resources), or JSON for everything [default: auto].
    #[arg(long, value_enum)]
    wire: Option<WireArg>,
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
    /// A plugin of 1 MiB or more whose optimized code is not in the compile cache is served at once by
    /// the fast compiler (Winch, ~5x quicker to compile), its optimized code compiled in the background
    /// and swapped in (`auto`), or waits for its optimized code (`off`) [default: auto].
    #[arg(long, value_enum, env = "KUBEWASM_FAST_FIRST_COMPILE")]
    fast_first_compile: Option<FastFirstArg>,
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
    /// Serve /metrics and /dead-letters over TLS with tls.crt and tls.key
    /// from this folder (a mounted kubernetes.io/tls Secret; re-read when
    /// they change) [default: a certificate self-signed at start when
    /// --metrics-auth is on, else plain HTTP]. Probes answer plain HTTP
    /// and TLS on the same port either way.
    #[arg(long, env = "KUBEWASM_METRICS_CERT_DIR")]
    metrics_cert_dir: Option<PathBuf>,
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
pub(crate) struct ElectionArgs {
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
    /// Split the objects into N shards (1-64), each fenced by its own Lease
    /// (<lease name>-shard-<i>), so that N replicas act at once; each replica
    /// holds its fair share. Turns leader election on.
    #[arg(long, value_name = "N")]
    shards: Option<u32>,
    /// What places an object in a shard: its uid, or its namespace (a
    /// namespace's objects stay together) [default: uid].
    #[arg(long, value_enum)]
    shard_key: Option<ShardKeyArg>,
    /// Place an object that has a controller owner by its owner's uid, so a
    /// ReplicaSet and its Pods are handled by one replica.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    shard_follow_owner: Option<bool>,
    /// What a replica's informers cache: every object (a plugin's cache
    /// reads may cross shards), or only the objects of the shards it holds
    /// (asked of the API server with a shard selector, re-listed when the
    /// shards held change) [default: all].
    #[arg(long, value_enum)]
    shard_cache: Option<ShardCacheArg>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum ShardCacheArg {
    All,
    Held,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum ShardKeyArg {
    Uid,
    Namespace,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum FastFirstArg {
    Auto,
    Off,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum CompilerArg {
    Child,
    InProcess,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum WireArg {
    Auto,
    Json,
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
            fast_first_compile: self.fast_first_compile.map(|f| match f {
                FastFirstArg::Auto => kubewasm::runtime::FastFirstCompile::Auto,
                FastFirstArg::Off => kubewasm::runtime::FastFirstCompile::Off,
            }),
            keep_managed_fields: self.keep_managed_fields.then_some(true),
            metrics_addr: self.metrics_addr,
            metrics_auth: self.metrics_auth,
            metrics_cert_dir: self.metrics_cert_dir,
            ui: self.ui.then_some(true),
            ui_addr: self.ui_addr,
            ui_allowed_hosts: (!self.ui_allowed_hosts.is_empty()).then_some(self.ui_allowed_hosts),
            initial_list: self.initial_list.map(|i| match i {
                InitialListArg::Auto => InitialList::Auto,
                InitialListArg::Stream => InitialList::Stream,
                InitialListArg::Paged => InitialList::Paged,
            }),
            wire: self.wire.map(|w| match w {
                WireArg::Auto => Wire::Auto,
                WireArg::Json => Wire::Json,
            }),
            leader_elect: self.election.leader_elect,
            leader_elect_lease_duration: self.election.leader_elect_lease_duration,
            leader_elect_renew_deadline: self.election.leader_elect_renew_deadline,
            leader_elect_retry_period: self.election.leader_elect_retry_period,
            leader_elect_lease_name: self.election.leader_elect_lease_name,
            leader_elect_namespace: self.election.leader_elect_namespace,
            shards: self.election.shards,
            shard_key: self.election.shard_key.map(|k| match k {
                ShardKeyArg::Uid => kubewasm::shard::ShardKey::Uid,
                ShardKeyArg::Namespace => kubewasm::shard::ShardKey::Namespace,
            }),
            shard_follow_owner: self.election.shard_follow_owner,
            shard_cache: self.election.shard_cache.map(|c| match c {
                ShardCacheArg::All => kubewasm::shard::ShardCache::All,
                ShardCacheArg::Held => kubewasm::shard::ShardCache::Held,
            }),
            shutdown_grace: self.shutdown_grace,
            ..RunSettings::default()
        };
        Ok(flags.over(file))
    }
}

pub(crate) async fn run(args: RunArgs) -> anyhow::Result<()> {
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
    let tls = opts
        .admin
        .metrics_tls
        .as_ref()
        .map(kubewasm::admin::tls::server_config)
        .transpose()
        .context("cannot serve the metrics listener over TLS")?;
    let server =
        MetricsServer::start_with(&opts.metrics_addr, telemetry.clone(), auth, tls).await?;
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
