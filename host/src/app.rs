//! Wiring: source -> informers -> dispatchers -> plugins -> executor, and
//! the `run` command's lifecycle (initial sync, `--until-idle`, graceful
//! shutdown).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::actions::executor::{ActionSink, Executor, ExecutorOptions};
use crate::admin::server::MetricsAddr;
use crate::admin::view::AppView;
use crate::dispatch::{Activity, DispatchOptions};
use crate::informer::InformerSet;
use crate::informer::Source;
use crate::kind::KindRegistry;
use crate::leader::{
    ElectionOptions, Elector, FairShare, KubeLeases, KubeMembers, Leadership, Members, ShardBalance,
};
use crate::manager::PluginHost;
use crate::object::StripOptions;
use crate::objects::PluginObjects;
use crate::reload::{DirError, PluginDir};
use crate::runtime::{EngineOptions, Runtime};
use crate::source::kube::{Discovery, KubeError, KubeSink, KubeSource, KubeTarget};
use crate::source::local::{LocalCluster, LocalError};
use crate::telemetry::Telemetry;

#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error(transparent)]
    Local(#[from] LocalError),
    #[error(transparent)]
    Plugins(#[from] DirError),
    #[error(transparent)]
    Objects(#[from] crate::objects::ObjectsError),
    #[error(transparent)]
    Engine(#[from] crate::runtime::engine::EngineError),
    #[error(transparent)]
    Kube(#[from] KubeError),
    #[error("leader election needs a real cluster, not the embedded local one")]
    ElectionWithoutCluster,
}

/// Which cluster the host runs against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterTarget {
    /// The embedded local cluster over a folder of manifests.
    Local(PathBuf),
    /// A real API server.
    Kube(KubeTarget),
}

/// Options of `kubewasm run`.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub plugins: PathBuf,
    pub cluster: ClusterTarget,
    /// Plugin objects (`Plugin`, `NamespacedPlugin`) beside the folder;
    /// `None`: the folder alone (the local cluster, or turned off).
    pub objects: Option<crate::objects::ObjectOptions>,
    pub dry_run: bool,
    pub until_idle: bool,
    pub engine: EngineOptions,
    pub strip: StripOptions,
    pub dispatch: DispatchOptions,
    /// Safety-net rescan period of the plugin folder.
    pub poll: Duration,
    /// Leader election; `None` runs as the only replica (always acting).
    pub election: Option<ElectionOptions>,
    /// How long shutdown waits for in-flight calls and actions.
    pub shutdown_grace: Duration,
    /// Events waiting to be recorded at most (see `ExecutorOptions::event_queue`).
    pub event_queue: usize,
    /// Listen address of `/healthz`, `/readyz` and `/metrics` (`main`
    /// serves it; an `App` alone never binds).
    pub metrics_addr: MetricsAddr,
    /// Serve the web view on its own listener (`admin.ui_addr`).
    pub ui: bool,
    /// The admin surfaces: the web view's listener, metrics
    /// authentication, redaction.
    pub admin: AdminOptions,
    /// The host-wide ceiling on sidecar limits.
    pub limits: crate::runtime::limits::Ceiling,
}

/// Where the host's admin surfaces listen, whom they answer and what
/// they hide (`main` serves the listeners; an `App` only redacts).
#[derive(Debug, Clone, Default)]
pub struct AdminOptions {
    /// The web view's listen address (loopback by default).
    pub ui_addr: crate::admin::ui::UiAddr,
    /// Host names the web view answers to besides loopback and
    /// `localhost`.
    pub ui_allowed_hosts: Vec<String>,
    /// `/metrics` and `/dead-letters` behind TokenReview and
    /// SubjectAccessReview.
    pub metrics_auth: bool,
    /// `/metrics` and `/dead-letters` over TLS only, with this certificate.
    pub metrics_tls: Option<crate::admin::tls::TlsSource>,
    /// What objects shown to people hide (Secrets, `sensitiveFields`).
    pub redactor: crate::redact::Redactor,
}

/// Per-plugin figures of a run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PluginSummary {
    pub delivered: u64,
    pub failed_calls: u64,
    pub retries: u64,
    pub dead: u64,
    pub filtered: u64,
    /// The dead letters still recorded at the end of the run.
    pub dead_letters: Vec<crate::dispatch::DeadLetterRecord>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    pub plugins: BTreeMap<String, PluginSummary>,
    pub actions_applied: u64,
    pub actions_failed: u64,
    /// Plugin files that failed to load, with the error.
    pub failed_loads: BTreeMap<String, String>,
    /// Informers the API server refused (403) at the end of the run:
    /// informer, the refusal, and the plugins that could not sync.
    pub refused_informers: Vec<RefusedInformer>,
}

/// An informer refused with 403, as the summary reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedInformer {
    pub informer: String,
    pub verb: &'static str,
    pub message: String,
    pub plugins: Vec<String>,
}

impl Summary {
    /// Why a `--until-idle` run did not do all it was asked: plugins that
    /// failed to load, informers the API server refused and deltas that
    /// went to dead letters. Empty when clean.
    pub fn problems(&self) -> Vec<String> {
        let refused = self.refused_informers.iter().map(|r| {
            format!(
                "informer {}: forbidden to {} ({}); plugins {} never synced: grant the host's identity list and watch on it",
                r.informer,
                r.verb,
                r.message,
                r.plugins.join(", ")
            )
        });
        let loads = self
            .failed_loads
            .iter()
            .map(|(name, e)| format!("plugin {name} failed to load: {e}"));
        let dead = self
            .plugins
            .iter()
            .filter(|(_, p)| p.dead > 0)
            .map(|(name, p)| {
                let mut line = format!(
                    "plugin {name}: {} delta(s) went to dead letters (see the errors logged above)",
                    p.dead
                );
                for d in p.dead_letters.iter().take(10) {
                    let ns = d
                        .namespace
                        .as_deref()
                        .map(|n| format!("{n}/"))
                        .unwrap_or_default();
                    line.push_str(&format!(
                        "\n    {} {} {ns}{} after {} attempt(s): {}",
                        d.delta, d.kind, d.name, d.attempts, d.last_error
                    ));
                }
                line
            });
        loads.chain(refused).chain(dead).collect()
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "{:<24} {:>10} {:>8} {:>8} {:>6}",
            "plugin", "delivered", "failed", "retries", "dead"
        )?;
        for (name, p) in &self.plugins {
            writeln!(
                f,
                "{name:<24} {:>10} {:>8} {:>8} {:>6}",
                p.delivered, p.failed_calls, p.retries, p.dead
            )?;
        }
        write!(
            f,
            "actions applied: {}, failed: {}",
            self.actions_applied, self.actions_failed
        )
    }
}

/// How long `--until-idle` waits on informers refused with 403 (which the
/// informer retries with backoff) once nothing else is left.
const REFUSAL_SETTLES: Duration = Duration::from_secs(5);

/// What differs between the local cluster and a real one.
struct Backend {
    kinds: KindRegistry,
    source: Arc<dyn Source>,
    sink: Arc<dyn ActionSink>,
    discovery: Option<Arc<Discovery>>,
    local: Option<Arc<LocalCluster>>,
    client: Option<kube::Client>,
}

/// A running host.
pub struct App {
    local: Option<Arc<LocalCluster>>,
    pub host: Arc<PluginHost>,
    pub plugin_dir: Arc<PluginDir>,
    /// Plugin objects, with a cluster (watched once it serves their CRDs).
    pub objects: Option<Arc<PluginObjects>>,
    pub activity: Arc<Activity>,
    pub executor: Arc<Executor>,
    /// Whether this replica leads (always, without election); read it for
    /// the `kubewasm_leader` gauge.
    pub leadership: Leadership,
    /// The elector and the replay-on-gain task, stopped after the drain.
    election: Option<(CancellationToken, TaskTracker)>,
    shutdown_grace: Duration,
    telemetry: Telemetry,
    cancel: CancellationToken,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App").finish_non_exhaustive()
    }
}

impl App {
    /// Builds the pipeline and loads the plugin folder once, reporting
    /// metrics, readiness and task liveness through `telemetry` (the one
    /// the admin listener serves; readiness follows the plugin folder's
    /// first scan as it happens). Actions go to `sink` when given instead
    /// of the cluster (tests record them to assert them exactly).
    pub async fn start_with(
        opts: &RunOptions,
        sink: Option<Arc<dyn ActionSink>>,
        telemetry: Telemetry,
        cancel: CancellationToken,
    ) -> Result<Self, AppError> {
        telemetry.set_redactor(opts.admin.redactor.clone());
        // Tenant plugins' accounts: set by the Plugin objects, read by the
        // API server's action sink.
        let impersonations = crate::source::kube::Impersonations::default();
        let Backend {
            kinds,
            source,
            sink: default_sink,
            discovery,
            local,
            client,
        } = match &opts.cluster {
            ClusterTarget::Local(dir) => {
                let kinds = KindRegistry::builtin();
                let cluster = LocalCluster::new(dir.clone(), kinds.clone(), opts.strip)?;
                tracing::info!(dir = %dir.display(), objects = cluster.len(), "local cluster loaded");
                Backend {
                    kinds,
                    source: cluster.clone(),
                    sink: cluster.clone(),
                    discovery: None,
                    local: Some(cluster),
                    client: None,
                }
            }
            ClusterTarget::Kube(target) => {
                let client = target
                    .client_counted(telemetry.metrics().wire_counters())
                    .await?;
                let kinds = KindRegistry::default();
                let discovery = Arc::new(Discovery::new(client.clone(), kinds.clone()));
                discovery.run().await?;
                match client.apiserver_version().await {
                    Ok(v) => {
                        tracing::info!(version = %v.git_version, kinds = kinds.len(), "connected to the API server")
                    }
                    Err(e) => tracing::warn!(error = %e, "cannot read the API server version"),
                }
                Backend {
                    kinds,
                    source: Arc::new(KubeSource::new(
                        client.clone(),
                        opts.strip,
                        target.initial_list,
                        target.page_size,
                    )),
                    sink: Arc::new(
                        KubeSink::with_identity(client.clone(), telemetry.identity())
                            .with_impersonations(impersonations.clone()),
                    ),
                    discovery: Some(discovery),
                    local: None,
                    client: Some(client),
                }
            }
        };
        let activity = Arc::new(Activity::default());
        let informers = InformerSet::new(
            source,
            activity.clone(),
            cancel.child_token(),
            telemetry.clone(),
        );
        // `shardCache: held`: the informers cache the shards held, none yet.
        let informers = Arc::new(match &opts.election {
            Some(ElectionOptions {
                shards: Some(s), ..
            }) if s.cache == crate::shard::ShardCache::Held => informers.caching_shards(s.set()),
            _ => informers,
        });
        let sink = sink.unwrap_or(default_sink);
        let leadership = match &opts.election {
            Some(ElectionOptions {
                shards: Some(s), ..
            }) => Leadership::sharded(s.set()),
            Some(_) => Leadership::follower(),
            None => Leadership::always(),
        };
        let executor = Arc::new(
            Executor::new(
                sink,
                ExecutorOptions {
                    dry_run: opts.dry_run,
                    event_queue: opts.event_queue,
                    ..ExecutorOptions::default()
                },
                telemetry.clone(),
            )
            .with_leadership(leadership.clone())
            .with_activity(activity.clone()),
        );
        let runtime = Runtime::new(opts.engine.clone())?
            .with_shutdown(cancel.child_token())
            .with_ceiling(opts.limits.clone())
            .with_tenants(
                opts.objects
                    .as_ref()
                    .map(|o| o.tenant_limits.policy())
                    .unwrap_or_default(),
            )
            .with_telemetry(telemetry.clone());
        let mut host = PluginHost::new(
            runtime,
            informers,
            kinds,
            executor.clone(),
            activity.clone(),
            opts.dispatch.clone(),
            telemetry.clone(),
        )
        .with_leadership(leadership.clone());
        if let Some(d) = discovery {
            host = host.with_discovery(d);
        }
        let host = Arc::new(host);
        let plugin_dir = Arc::new(PluginDir::new(opts.plugins.clone(), host.clone()));
        let view = Arc::new(AppView::new(host.clone(), plugin_dir.clone()));
        telemetry.attach(view.clone());
        crate::admin::ui::attach(&telemetry, view);
        plugin_dir.scan().await?;
        // Watched once the cluster serves their CRDs, whenever that is
        // (`PluginObjects::run`).
        let objects = match (&opts.objects, &client) {
            (Some(o), Some(client)) => Some(Arc::new(
                PluginObjects::new(
                    host.clone(),
                    client.clone(),
                    opts.plugins.clone(),
                    leadership.clone(),
                    o.clone(),
                )?
                .with_impersonations(impersonations),
            )),
            _ => None,
        };
        let election = match (&opts.election, client) {
            (None, _) => None,
            (Some(_), None) => return Err(AppError::ElectionWithoutCluster),
            (Some(e), Some(client)) => {
                telemetry.leader().set(false);
                Some(start_election(
                    e,
                    client,
                    leadership.clone(),
                    host.clone(),
                    telemetry.leader().clone(),
                ))
            }
        };
        Ok(Self {
            local,
            host,
            plugin_dir,
            objects,
            activity,
            executor,
            leadership,
            election,
            shutdown_grace: opts.shutdown_grace,
            telemetry,
            cancel,
        })
    }

    /// Starts the folder watchers (plugins and local manifests).
    pub fn watch(&self, poll: Duration, tasks: &tokio_util::task::TaskTracker) {
        let dir = self.plugin_dir.clone();
        let cancel = self.cancel.clone();
        let guard = self.telemetry.task("plugin folder watcher");
        tasks.spawn(async move {
            match dir.watch(cancel, poll).await {
                Ok(()) => guard.done(),
                Err(e) => {
                    tracing::error!(error = %e, "plugin folder watcher stopped");
                    guard.failed(&e.to_string());
                }
            }
        });
        if let Some(objects) = self.objects.clone() {
            let cancel = self.cancel.clone();
            let guard = self.telemetry.task("Plugin objects watcher");
            tasks.spawn(async move {
                objects.run(cancel).await;
                guard.done();
            });
        }
        if let Some(cluster) = self.local.clone() {
            let cancel = self.cancel.clone();
            let guard = self.telemetry.task("local cluster watcher");
            tasks.spawn(async move {
                match cluster.watch_files(cancel).await {
                    Ok(()) => guard.done(),
                    Err(e) => {
                        tracing::error!(error = %e, "local cluster watcher stopped");
                        guard.failed(&e.to_string());
                    }
                }
            });
        }
    }

    /// Metrics, readiness and liveness of this host.
    pub fn telemetry(&self) -> &Telemetry {
        &self.telemetry
    }

    /// The embedded local cluster, when the host runs on one.
    pub fn local(&self) -> Option<&Arc<LocalCluster>> {
        self.local.as_ref()
    }

    /// Waits until every informer has synced and every delta emitted so far
    /// (including those caused by the plugins' own actions) has been handled.
    pub async fn wait_idle(&self) {
        let start = Instant::now();
        let mut last_report = Instant::now();
        let mut refused_since: Option<Instant> = None;
        loop {
            let informers = self.host.informers();
            // A refused informer never syncs, and its plugins never start:
            // once everything else is done (and the refusal has lasted a few
            // of the informer's retries), the run ends; its summary reports
            // the refusal and the exit is non-zero.
            let all = informers.informers();
            let refused = all.iter().any(|i| i.forbidden().is_some());
            if refused
                && all
                    .iter()
                    .all(|i| i.has_synced() || i.forbidden().is_some())
                && self.host.all_idle_or_refused().await
            {
                let since = *refused_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= REFUSAL_SETTLES {
                    tracing::warn!(
                        elapsed_ms = start.elapsed().as_millis() as u64,
                        "idle but for plugins whose informers the API server refuses"
                    );
                    return;
                }
            } else {
                refused_since = None;
            }
            let synced = informers.all_synced();
            if synced && self.activity.is_idle() && self.host.all_idle().await {
                let before = self.activity.emitted.load(Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(100)).await;
                if self.activity.emitted.load(Ordering::SeqCst) == before && self.activity.is_idle()
                {
                    tracing::info!(
                        elapsed_ms = start.elapsed().as_millis() as u64,
                        "idle: every delta handled"
                    );
                    return;
                }
                continue;
            }
            if last_report.elapsed() > Duration::from_secs(2) {
                let pending = informers
                    .informers()
                    .iter()
                    .filter(|i| !i.has_synced())
                    .count();
                tracing::info!(
                    unsynced_informers = pending,
                    outstanding_deltas = self
                        .activity
                        .emitted
                        .load(Ordering::SeqCst)
                        .saturating_sub(self.activity.settled.load(Ordering::SeqCst)),
                    "waiting for caches to sync and queues to drain"
                );
                last_report = Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Informers the API server refuses now (gone after shutdown: read
    /// them before).
    pub fn refused_informers(&self) -> Vec<RefusedInformer> {
        self.host
            .informers()
            .informers()
            .iter()
            .filter_map(|i| {
                let f = i.forbidden()?;
                Some(RefusedInformer {
                    informer: i.spec().to_string(),
                    verb: f.verb,
                    message: f.message,
                    plugins: i.subscriber_names(),
                })
            })
            .collect()
    }

    pub fn summary(&self) -> Summary {
        Summary {
            plugins: self
                .host
                .stats()
                .into_iter()
                .map(|(name, s)| {
                    (
                        name,
                        PluginSummary {
                            delivered: s.delivered.load(Ordering::Relaxed),
                            failed_calls: s.failed_calls.load(Ordering::Relaxed),
                            retries: s.retries.load(Ordering::Relaxed),
                            dead: s.dead.load(Ordering::Relaxed),
                            filtered: s.filtered.load(Ordering::Relaxed),
                            dead_letters: s.dead_letters.lock().records(),
                        },
                    )
                })
                .collect(),
            actions_applied: self.executor.stats.applied.load(Ordering::Relaxed),
            actions_failed: self.executor.stats.failed.load(Ordering::Relaxed),
            failed_loads: self.plugin_dir.failures(),
            refused_informers: self.refused_informers(),
        }
    }

    /// Stops taking deltas, drains in-flight calls and actions (for at
    /// most the shutdown grace) and the queued Events (for at most the
    /// executor's event drain time), then, when elected, stops acting and
    /// releases the lease so a follower takes over at once.
    pub async fn shutdown(&self) {
        self.cancel.cancel();
        let grace = self.shutdown_grace;
        if tokio::time::timeout(grace, self.host.shutdown())
            .await
            .is_err()
        {
            tracing::warn!(
                ?grace,
                "in-flight calls and actions did not finish within the shutdown grace; abandoning them"
            );
        }
        // Events the last calls queued are recorded while this replica
        // still leads (bounded by the executor's event drain time).
        self.executor.shutdown().await;
        if let Some((cancel, tasks)) = &self.election {
            self.leadership.lose();
            cancel.cancel();
            tasks.close();
            if tokio::time::timeout(Duration::from_secs(5), tasks.wait())
                .await
                .is_err()
            {
                tracing::warn!(
                    "the lease was not released within 5s; a follower takes over when it expires"
                );
            }
        }
        self.host.informers().shutdown().await;
    }
}

/// Starts the elector (one per shard, and the member count, when sharded)
/// and the task that replays the cache to every plugin each time this
/// replica becomes leader or its shards change.
fn start_election(
    opts: &ElectionOptions,
    client: kube::Client,
    leadership: Leadership,
    host: Arc<PluginHost>,
    leader_gauge: crate::telemetry::LeaderFlag,
) -> (CancellationToken, TaskTracker) {
    let cancel = CancellationToken::new();
    let tasks = TaskTracker::new();
    let service_account = std::env::var("POD_SERVICE_ACCOUNT").ok();
    // How far the informers have followed the API server, written on a
    // Lease this replica releases.
    let high_waters: Arc<dyn Fn() -> crate::leader::HandoverMarks + Send + Sync> = {
        let host = host.clone();
        Arc::new(move || host.informers().high_waters())
    };
    match &opts.shards {
        None => {
            let leases = Arc::new(
                KubeLeases::new(client, &opts.namespace, &opts.lease_name)
                    .owned_by_service_account(service_account),
            );
            let elector = Elector::new(leases, opts.clone(), leadership.clone())
                .with_view(leader_gauge.clone())
                .with_high_waters(high_waters.clone());
            tasks.spawn(elector.run(cancel.clone()));
        }
        Some(shards) => {
            let members = Members::new(
                Arc::new(KubeMembers::new(
                    client.clone(),
                    &opts.namespace,
                    &opts.lease_name,
                )),
                opts.clone(),
            );
            let balance: Arc<dyn ShardBalance> = Arc::new(FairShare::new(
                leadership.clone(),
                members.live(),
                opts.lease_duration,
            ));
            tasks.spawn(members.run(cancel.clone()));
            for index in 0..shards.count {
                let lease_name = opts.shard_lease_name(index);
                let leases = Arc::new(
                    KubeLeases::new(client.clone(), &opts.namespace, &lease_name)
                        .owned_by_service_account(service_account.clone()),
                );
                let shard_opts = ElectionOptions {
                    lease_name,
                    ..opts.clone()
                };
                let elector = Elector::new(leases, shard_opts, leadership.clone())
                    .for_shard(index, balance.clone())
                    .with_high_waters(high_waters.clone());
                tasks.spawn(elector.run(cancel.clone()));
            }
        }
    }
    let stop = cancel.clone();
    // How long a new term's replay waits for the informers to list the
    // shards now held (`shardCache: held`) before it goes ahead with what
    // they have (an informer the API server refuses never lists).
    let list_wait = opts.lease_duration * 4;
    // How long an informer behind the replica that handed a Lease over
    // may receive nothing before it counts as caught up: the mark can be
    // a delete this replica's list came after, out of reach until the
    // next change.
    let quiet = opts.retry_period.max(std::time::Duration::from_secs(2));
    tasks.spawn(async move {
        let mut gate = leadership.subscribe();
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                changed = gate.changed() => if changed.is_err() { return },
            }
            loop {
                let state = *gate.borrow_and_update();
                let leading = state.leading;
                leader_gauge.set(leading);
                leader_gauge.set_shards(
                    state.shards.count,
                    if leading { state.shards.held } else { 0 },
                );
                // The informers cache the shards held, and one suspended
                // (its deletes are set aside until it is held again).
                let cached = crate::shard::ShardSet {
                    held: state.shards.held | leadership.suspended(),
                    ..state.shards
                };
                if host.informers().set_shards(cached).is_some() && leading {
                    tokio::select! {
                        () = stop.cancelled() => return,
                        changed = gate.changed() => {
                            if changed.is_err() { return }
                            continue;
                        }
                        listed = tokio::time::timeout(list_wait, host.informers().wait_shards(cached)) => {
                            if listed.is_err() {
                                tracing::warn!(shards = ?cached.indexes().collect::<Vec<_>>(), waited = ?list_wait, "the informers have not listed the shards held yet: replaying what they cache, the rest follows as it is listed");
                            }
                        }
                    }
                }
                // A Lease handed over by a replica that had followed the API
                // server further: replay once these informers have too.
                let marks = leadership.take_handover();
                if leading && !marks.is_empty() {
                    let waited = std::time::Instant::now();
                    tokio::select! {
                        () = stop.cancelled() => return,
                        caught_up = tokio::time::timeout(list_wait, host.informers().wait_high_waters(&marks, quiet)) => {
                            let behind = host.informers().behind(&marks);
                            match caught_up {
                                Ok(true) => tracing::info!(waited = ?waited.elapsed(), ?marks, "informers as far as the replica that handed the lease over: replaying"),
                                Ok(false) => tracing::info!(waited = ?waited.elapsed(), ?marks, ?behind, "informers short of the replica that handed the lease over, but receiving nothing more: replaying"),
                                Err(_) => tracing::warn!(waited = ?list_wait, ?marks, ?behind, "informers not yet as far as the replica that handed the lease over: replaying what they cache"),
                            }
                        }
                    }
                }
                if leading {
                    host.replay_all().await;
                }
                break;
            }
        }
    });
    (cancel, tasks)
}
