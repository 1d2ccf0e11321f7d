//! Plugins as objects: every replica watches `Plugin` and
//! `NamespacedPlugin` objects and loads what they name through the same
//! install as the plugin folder (compiled off the hot path, the previous
//! version handing over what it had not handled), so changing a spec is a
//! hot swap with nothing lost and no rollout. A spec that cannot be served
//! leaves the previous version serving and says why on the object's status,
//! which the leader writes.

mod fetch;
mod keyed;
pub mod migrate;
pub mod reasons;
mod recheck;
mod reconcile;
mod report;
mod served;
mod source;
mod status;
mod tenant;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, StreamExt, stream};
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use crate::crd::{NamespacedPlugin, Plugin, PluginParts, PluginStatus};
use crate::leader::Leadership;
use crate::manager::PluginHost;

pub use fetch::{FetchError, Fetcher};
pub use status::{MANAGER, Outcome, Served, clears_by_itself, replica_for, status_for};
pub use tenant::{DEFAULT_SERVICE_ACCOUNT, TenantAccounts};

use report::Write;
use source::{Op, Seen, Source, object_of_cluster, object_of_tenant, seen};

use crate::source::kube::Impersonations;

/// How often specs that could not be served are tried again (a registry
/// back up, a ConfigMap created, a CRD installed).
const RETRY: Duration = Duration::from_secs(30);

/// How often, by default, a serving tenant plugin's account is asked again
/// whether it may read what the plugin reads through the shared cache
/// (`pluginObjects.tenants.recheck`).
pub const TENANT_RECHECK: Duration = Duration::from_secs(300);

/// Where Plugin objects may come from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjectOptions {
    /// The host's own namespace: where a Plugin's ConfigMap or pull Secret
    /// without a namespace is read.
    pub namespace: String,
    /// Namespaces whose NamespacedPlugins run (`*`: every namespace);
    /// empty: none do.
    pub tenant_namespaces: Vec<String>,
    /// PEM file of a CA registries may be signed by, besides the system
    /// roots.
    pub registry_ca: Option<std::path::PathBuf>,
    /// Registries spoken to over plain HTTP (development only).
    pub plain_http_registries: Vec<String>,
    /// Which OCI modules must carry a cosign signature by which keys
    /// (key files, loaded when Plugin objects start).
    pub signatures: Vec<crate::oci::SignatureRuleSettings>,
    /// The ServiceAccount each tenant namespace acts as.
    pub tenant_accounts: TenantAccounts,
    /// The tenants' ceiling and quotas.
    pub tenant_limits: crate::runtime::tenants::TenantOptions,
    /// The longest one pull may take, everything included (default: the
    /// OCI client's, 2 minutes).
    pub pull_timeout: Option<Duration>,
    /// How often serving tenant plugins' reads are asked again.
    pub tenant_recheck: Duration,
}

/// Why Plugin objects cannot be served at all.
#[derive(Debug, thiserror::Error)]
pub enum ObjectsError {
    #[error("registry CA {path}: {source}")]
    CaRead {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Ca(#[from] crate::oci::Error),
    #[error("pluginObjects.signatures: {0}")]
    SignatureKey(#[from] crate::oci::KeyError),
}

impl ObjectOptions {
    fn tenant_allowed(&self, namespace: &str) -> bool {
        tenant_allowed(&self.tenant_namespaces, namespace)
    }
}

/// Whether `pluginObjects.tenantNamespaces` (`*`: all) lets `namespace`
/// run its own NamespacedPlugins; `kubewasm rbac --config` asks the same.
pub fn tenant_allowed(tenant_namespaces: &[String], namespace: &str) -> bool {
    tenant_namespaces.iter().any(|n| n == "*" || n == namespace)
}

/// One object as last seen, and what its reconcile came to.
struct Known {
    generation: Option<i64>,
    parts: PluginParts,
    /// The spec (parts) and module digest last installed.
    installed: Option<(String, String)>,
    /// What serves (the spec's version, or an earlier spec's).
    serving: Option<Served>,
    outcome: Outcome,
    status: Option<PluginStatus>,
    /// This replica's entry of `status.replicas`, as last written.
    replica: Option<crate::crd::ReplicaStatus>,
    /// Every entry of `status.replicas` as last seen on the object (the
    /// leader's `Ready` reads the other replicas' there).
    others: Vec<crate::crd::ReplicaStatus>,
    /// The serving module's cache entries, kept from eviction.
    pins: Vec<crate::lru_files::Pin>,
}

/// The Plugin objects of one host.
pub struct PluginObjects {
    host: Arc<PluginHost>,
    client: kube::Client,
    fetcher: Fetcher,
    leadership: Leadership,
    options: ObjectOptions,
    /// This replica's name on status (its Pod's, else the host name).
    replica: String,
    /// The namespace of this replica's Pod, when it runs in one: where the
    /// leader lists the host's Pods (`report::check_replicas`).
    pod_namespace: Option<String>,
    /// The host's Pods as the leader last listed them; `None` when unknown.
    live: parking_lot::Mutex<Option<report::LivePods>>,
    /// Events about Plugin objects, as this replica.
    recorder: kube::runtime::events::Recorder,
    known: Mutex<BTreeMap<Source, Known>>,
    /// Tenant plugins' accounts, shared with the action sink.
    impersonations: Impersonations,
    /// Per registry host, the pulls it may serve at once.
    registries: parking_lot::Mutex<BTreeMap<String, Arc<tokio::sync::Semaphore>>>,
}

/// A watch event of either kind.
enum Change {
    Cluster(Event<Plugin>),
    Tenant(Event<NamespacedPlugin>),
}

impl PluginObjects {
    pub fn new(
        host: Arc<PluginHost>,
        client: kube::Client,
        folder: std::path::PathBuf,
        leadership: Leadership,
        options: ObjectOptions,
    ) -> Result<Self, ObjectsError> {
        use crate::oci::{ModuleCache, OciClient, PullOptions, SignaturePolicy, Transport};
        let kube_client = client.clone();
        let identity = crate::telemetry::identity::Identity::from_env();
        let mut transport = Transport::default();
        if let Some(path) = &options.registry_ca {
            let pem = std::fs::read(path).map_err(|source| ObjectsError::CaRead {
                path: path.clone(),
                source,
            })?;
            transport = transport.with_ca_pem(&pem, &path.display().to_string())?;
        }
        for registry in &options.plain_http_registries {
            transport = transport.with_plain_http(registry);
        }
        let signatures = SignaturePolicy::load(&options.signatures)?;
        // Pulled modules are kept by digest beside the compiled artifacts
        // (`<cache>/oci`), under the compile cache's cap: one budget, one
        // eviction pass over both.
        let compiled = host.runtime().engine().cache().cloned();
        let oci = compiled.as_ref().map(|compiled| {
            // A precompiled layer is taken for the optimized engine, under
            // this host's artifact key, unless its artifact is here.
            let precompiled = crate::oci::PrecompiledWanted {
                engine_key: compiled.engine_key().to_owned(),
                key_id: compiled.key().id(),
                max_bytes: crate::oci::DEFAULT_MAX_PRECOMPILED_BYTES,
                cached: Arc::new({
                    let compiled = compiled.clone();
                    move |digest: &str| compiled.contains(digest)
                }),
            };
            OciClient::new(
                transport.clone(),
                PullOptions {
                    cache: Some(ModuleCache::sharing(compiled.dir(), compiled.budget())),
                    signatures: signatures.clone(),
                    deadline: options
                        .pull_timeout
                        .unwrap_or(PullOptions::default().deadline),
                    precompiled: Some(precompiled),
                    ..PullOptions::default()
                },
            )
        });
        Ok(Self {
            fetcher: Fetcher {
                folder,
                client: Some(client.clone()),
                oci,
                compiled,
            },
            host,
            client,
            leadership,
            options,
            replica: identity.instance().to_owned(),
            pod_namespace: identity.pod_namespace().map(str::to_owned),
            live: parking_lot::Mutex::new(None),
            recorder: kube::runtime::events::Recorder::new(
                kube_client.clone(),
                kube::runtime::events::Reporter {
                    controller: "kubewasm".into(),
                    instance: Some(identity.instance().to_owned()),
                },
            ),
            known: Mutex::new(BTreeMap::new()),
            impersonations: Impersonations::default(),
            registries: parking_lot::Mutex::default(),
        })
    }

    /// Shares tenant plugins' accounts with `impersonations` (the action
    /// sink's), so their writes go out as their ServiceAccount.
    #[must_use]
    pub fn with_impersonations(mut self, impersonations: Impersonations) -> Self {
        self.impersonations = impersonations;
        self
    }

    /// Watches both kinds until `cancel`, once the cluster serves them:
    /// loads, swaps and unloads as the objects change, retries refused
    /// specs, and (while leading) writes status.
    pub async fn run(self: Arc<Self>, cancel: CancellationToken) {
        if !self.until_served(&cancel).await {
            return;
        }
        // Leading already (no change to wait for): which replicas count.
        self.check_replicas(Write::Changed).await;
        let cluster = watcher(Api::<Plugin>::all(self.client.clone()))
            .map(|e| e.map(Change::Cluster))
            .boxed();
        let tenants = watcher(Api::<NamespacedPlugin>::all(self.client.clone()))
            .map(|e| e.map(Change::Tenant))
            .boxed();
        let mut changes = stream::select(cluster, tenants);
        // Reconciles and unloads run off this loop, one at a time per
        // object: a slow registry holds only the objects that name it.
        let reconciles = keyed::Keyed::new(Op::merge, cancel.child_token());
        let work: keyed::Run<Source, Op> = {
            let this = self.clone();
            Arc::new(move |source, op| {
                let this = this.clone();
                async move {
                    match op {
                        Op::Reconcile { obj, retrying } => this.reconcile(*obj, retrying).await,
                        Op::Remove => this.remove(&source).await,
                        Op::Recheck => this.recheck(&source).await,
                    }
                }
                .boxed()
            })
        };
        let submit = |source: Source, op: Op| reconciles.submit(source, op, &work);
        let mut leader = self.leadership.subscribe();
        let mut retry = tokio::time::interval(RETRY);
        retry.tick().await;
        let mut recheck =
            tokio::time::interval(self.options.tenant_recheck.max(Duration::from_secs(1)));
        recheck.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        recheck.tick().await;
        // A name the plugin folder gave back: an object refused for it
        // loads now rather than at the next retry.
        let mut freed = self.host.origins().freed();
        // Objects listed by the current initial list of each kind.
        let mut listing: [Option<BTreeSet<Source>>; 2] = [None, None];
        loop {
            tokio::select! {
                () = cancel.cancelled() => break,
                change = changes.next() => match change {
                    Some(Ok(change)) => self.apply(change, &mut listing, &reconciles.keys(), &submit).await,
                    Some(Err(e)) => tracing::warn!(error = %e, "watching Plugin objects failed; retrying"),
                    None => break,
                },
                Ok(()) = leader.changed() => {
                    if leader.borrow_and_update().coordinates() {
                        self.check_replicas(Write::All).await;
                    }
                }
                _ = retry.tick() => {
                    self.retry_refused(|_| true, &submit).await;
                    self.check_replicas(Write::Changed).await;
                }
                _ = recheck.tick() => {
                    for source in self.serving_tenants().await {
                        submit(source, Op::Recheck);
                    }
                }
                Ok(()) = freed.changed() => self.retry_refused(|reason| reason == reasons::NAME_TAKEN, &submit).await,
            }
        }
        reconciles.stopped().await;
    }

    /// Submits what a watch event asks for; `busy` are the objects whose
    /// reconcile is under way (not known yet, but to be unloaded if a
    /// relist no longer lists them).
    async fn apply(
        &self,
        change: Change,
        listing: &mut [Option<BTreeSet<Source>>; 2],
        busy: &[Source],
        submit: &(dyn Fn(Source, Op) + Sync),
    ) {
        let (slot, event) = match change {
            Change::Cluster(e) => (0, seen(e, object_of_cluster)),
            Change::Tenant(e) => (1, seen(e, object_of_tenant)),
        };
        match event {
            Event::Init => listing[slot] = Some(BTreeSet::new()),
            Event::InitApply(obj) => {
                if let Some(seen) = listing[slot].as_mut() {
                    seen.insert(obj.source.clone());
                }
                submit(obj.source.clone(), Op::reconcile(obj));
            }
            Event::Apply(obj) => submit(obj.source.clone(), Op::reconcile(obj)),
            Event::Delete(obj) => submit(obj.source, Op::Remove),
            Event::InitDone => {
                // Objects deleted while the watch was down are unloaded.
                let seen = listing[slot].take().unwrap_or_default();
                let gone: BTreeSet<Source> = self
                    .known
                    .lock()
                    .await
                    .keys()
                    .chain(busy)
                    .filter(|s| matches!(s, Source::Cluster(_)) == (slot == 0))
                    .filter(|s| !seen.contains(s))
                    .cloned()
                    .collect();
                for source in gone {
                    submit(source, Op::Remove);
                }
            }
        }
    }

    async fn remove(&self, source: &Source) {
        if self.known.lock().await.remove(source).is_some() {
            self.host.telemetry().note(&source.display(), None);
            let name = source.plugin_name();
            // Only its own plugin: one refused for its name leaves the
            // folder's plugin of that name serving.
            if self.host.unload_from(&source.origin(), &name).await {
                tracing::info!(plugin = %name, object = %source.display(), "Plugin object deleted; plugin unloaded");
            }
            if matches!(source, Source::Tenant { .. }) {
                self.impersonations.remove(&name);
            }
        }
    }

    /// Reconciles again the objects whose spec was refused for a reason
    /// `due` accepts.
    async fn retry_refused(
        &self,
        due: impl Fn(reasons::Reason) -> bool,
        submit: &(dyn Fn(Source, Op) + Sync),
    ) {
        let refused: Vec<Seen> = self
            .known
            .lock()
            .await
            .iter()
            .filter(|(_, k)| matches!(k.outcome, Outcome::Refused { reason, .. } if due(reason)))
            .map(|(s, k)| Seen {
                source: s.clone(),
                generation: k.generation,
                parts: k.parts.clone(),
                status: None,
            })
            .collect();
        for obj in refused {
            submit(
                obj.source.clone(),
                Op::Reconcile {
                    obj: Box::new(obj),
                    retrying: true,
                },
            );
        }
    }
}

fn watcher<K>(api: Api<K>) -> impl futures::Stream<Item = Result<Event<K>, watcher::Error>> + Send
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    K::DynamicType: Default,
{
    watcher::watcher(api, watcher::Config::default()).default_backoff()
}
