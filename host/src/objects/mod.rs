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
mod report;
mod source;
mod status;
mod tenant;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use backon::BackoffBuilder;
use futures::{FutureExt, StreamExt, stream};
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use crate::crd::{NamespacedPlugin, Plugin, PluginParts, PluginStatus};
use crate::leader::Leadership;
use crate::manager::PluginHost;
use crate::runtime::{Content, LoadError};

pub use fetch::{FetchError, Fetcher};
pub use status::{MANAGER, Outcome, Served, clears_by_itself, replica_for, status_for};
pub use tenant::{DEFAULT_SERVICE_ACCOUNT, TenantAccounts};

use report::{Write, same_status};
use source::{Op, Seen, Source, object_of_cluster, object_of_tenant, seen};

use crate::source::kube::{Impersonations, ServiceAccountRef};

/// How often specs that could not be served are tried again (a registry
/// back up, a ConfigMap created, a CRD installed).
const RETRY: Duration = Duration::from_secs(30);

/// How often, by default, a serving tenant plugin's account is asked again
/// whether it may read what the plugin reads through the shared cache
/// (`pluginObjects.tenants.recheck`).
pub const TENANT_RECHECK: Duration = Duration::from_secs(300);

/// What a failed pull adds when this replica never served the object: it
/// started (a Pod replaced, a rollout) and its cache holds no copy.
const NO_COPY: &str = "; this replica holds no copy of the module in its cache, so nothing serves until the registry answers (a cache on an emptyDir is emptied when its Pod is replaced: give it a PersistentVolumeClaim to serve pinned modules across Pod replacements)";

/// Pulls from one registry at once: a registry that stalls holds this
/// many reconciles, and only of the objects that name it.
const PULLS_PER_REGISTRY: usize = 2;

/// Why the Plugin kinds cannot be watched yet (`PluginObjects::run`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NotServed {
    /// 404: the CRDs are not installed, or not established yet.
    Absent,
    /// 403: the host's RBAC does not let it list them.
    Forbidden,
    /// Anything else (the API server away, a timeout): said each time.
    Failed,
}

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

    /// Whether the cluster serves the Plugin kinds: `Ok(false)` when the
    /// API server answers 404 (their CRDs are not installed, or not yet
    /// established); any other failure is an error, not an answer.
    pub async fn served(client: &kube::Client) -> Result<bool, kube::Error> {
        match Api::<Plugin>::all(client.clone())
            .list(&kube::api::ListParams::default().limit(1))
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Returns once the cluster serves the Plugin kinds (`false` if
    /// cancelled first). Until then plugins come from the folder alone;
    /// asked again with a backoff from 1 s to [`RETRY`], so CRDs applied
    /// beside the Deployment (`kubectl apply -k`, established a moment
    /// after the Pod starts) or installed later are picked up without a
    /// restart.
    async fn until_served(&self, cancel: &CancellationToken) -> bool {
        // backon, as the executor's retries: 1 s, doubling, at most RETRY
        // (no jitter: one request per host, and "within 30 s" holds),
        // without an end.
        let mut waits = backon::ExponentialBuilder::default()
            .with_min_delay(Duration::from_secs(1))
            .with_max_delay(RETRY)
            .with_factor(2.0)
            .without_max_times()
            .build();
        // What was last said, so that a state that lasts is said once.
        let mut said: Option<NotServed> = None;
        loop {
            let now = match Self::served(&self.client).await {
                Ok(true) => {
                    if said.is_some() {
                        tracing::info!(
                            "the cluster serves plugins.kubewasm.io now: watching Plugin objects"
                        );
                    }
                    return true;
                }
                Ok(false) => NotServed::Absent,
                Err(kube::Error::Api(s)) if s.code == 403 => NotServed::Forbidden,
                Err(e) => {
                    tracing::warn!(
                        error = %e,
                        "could not tell whether the cluster serves plugins.kubewasm.io; asking again"
                    );
                    NotServed::Failed
                }
            };
            if said != Some(now) {
                match now {
                    NotServed::Absent => tracing::info!(
                        "the cluster does not serve plugins.kubewasm.io (install deploy/base/crds.yaml): plugins come from the folder until it does"
                    ),
                    NotServed::Forbidden => tracing::warn!(
                        "the host may not list plugins.kubewasm.io: plugins come from the folder until it may; grant the host's roles (`kubewasm rbac`, deploy/base/rbac.yaml) or turn Plugin objects off (pluginObjects.enabled: false)"
                    ),
                    NotServed::Failed => {}
                }
                said = Some(now);
            }
            let wait = waits.next().unwrap_or(RETRY);
            tokio::select! {
                () = cancel.cancelled() => return false,
                () = tokio::time::sleep(wait) => {}
            }
        }
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

    /// Loads (or swaps to) what the object names, if its spec or module
    /// changed, and writes its status while leading.
    async fn reconcile(&self, obj: Seen, retrying: bool) {
        let name = obj.source.plugin_name();
        let spec_key = serde_json::to_string(&obj.parts).unwrap_or_default();
        let (previous_install, serving, mut previous_status, previous_replica) = {
            let mut known = self.known.lock().await;
            // The same generation again (the watch resumed, or the event is
            // a status write): nothing to load; refused specs are retried on
            // their own timer. Another replica's entry may have changed,
            // which the leader's Ready counts.
            if !retrying
                && let Some(k) = known.get_mut(&obj.source)
                && k.generation.is_some()
                && k.generation == obj.generation
                && k.parts == obj.parts
            {
                let entries = obj.status.map(|s| s.replicas).unwrap_or_default();
                if k.others != entries {
                    // An entry of a Pod not known to be ready (it started
                    // after the last list): list again, so it counts.
                    let unknown = {
                        let live = self.live.lock();
                        entries.iter().any(|r| {
                            r.name != self.replica
                                && live
                                    .as_ref()
                                    .is_some_and(|pods| pods.get(&r.name) != Some(&true))
                        })
                    };
                    k.others = entries;
                    drop(known);
                    if unknown && self.leadership.state().coordinates() {
                        self.list_pods().await;
                    }
                    self.refresh(&obj.source, Write::Changed).await;
                }
                return;
            }
            match known.get(&obj.source) {
                Some(k) => (
                    k.installed.clone(),
                    k.serving.clone(),
                    k.status.clone(),
                    k.replica.clone(),
                ),
                // A replica that starts reads the status on the object, to
                // keep its transition times.
                None => (None, None, obj.status.clone(), None),
            }
        };
        let others = obj
            .status
            .as_ref()
            .map(|s| s.replicas.clone())
            .unwrap_or_default();
        // A new spec: say so before fetching and compiling it, while
        // leading, unless the object already speaks of this generation (a
        // replica starting, or taking over, finds it so).
        if !retrying
            && self.leadership.state().coordinates()
            && previous_status
                .as_ref()
                .is_none_or(|p| p.observed_generation != obj.generation)
        {
            let loading = Outcome::Loading {
                serving: serving.clone(),
            };
            let status = status_for(
                &loading,
                obj.generation,
                previous_status.as_ref(),
                &self.counted(&others),
            );
            self.write_status(&obj.source, &status).await;
            previous_status = Some(status);
        }
        // The new module's cache entries, pinned from the fetch on: kept
        // while it loads and, once it serves, with it.
        let mut fetched_pins = Vec::new();
        let outcome = match self.prepare(&obj).await {
            Err((reason, mut message)) => {
                if reason == reasons::PULL_FAILED && serving.is_none() && previous_install.is_none()
                {
                    message.push_str(NO_COPY);
                }
                Outcome::Refused {
                    reason,
                    message,
                    serving: serving.clone(),
                }
            }
            Ok((manifest, fetched, account)) => {
                if let Some(account) = account {
                    // Set before the install, so the new version's first
                    // write already goes out as the tenant.
                    self.impersonations.set(&name, account);
                }
                fetched_pins = fetched.pins;
                let content = Content::hashed(fetched.bytes);
                let digest = format!("sha256:{}", content.digest().unwrap_or_default());
                let unchanged = previous_install
                    .as_ref()
                    .is_some_and(|(s, d)| *s == spec_key && *d == digest);
                let served = |version: String| Served {
                    version,
                    content_digest: digest.clone(),
                    manifest_digest: fetched.manifest_digest.clone(),
                    resolved_reference: fetched.resolved_reference.clone(),
                };
                match (&serving, unchanged) {
                    (Some(s), true) => Outcome::Serving(served(s.version.clone())),
                    _ => match self
                        .host
                        .install_from(obj.source.origin(), &name, content, manifest)
                        .await
                    {
                        Ok(v) => {
                            tracing::info!(plugin = %name, version = v.version(), %digest, object = %obj.source.display(), "Plugin object loaded");
                            Outcome::Serving(served(v.version().to_owned()))
                        }
                        Err(e) => Outcome::Refused {
                            reason: load_reason(&e),
                            message: e.to_string(),
                            serving: serving.clone(),
                        },
                    },
                }
            }
        };
        if let Outcome::Refused {
            reason, message, ..
        } = &outcome
            && !retrying
        {
            tracing::warn!(plugin = %name, object = %obj.source.display(), %reason, error = %message, "Plugin object not served");
        }
        self.note(&obj.source, &outcome).await;
        let status = status_for(
            &outcome,
            obj.generation,
            previous_status.as_ref(),
            &self.counted(&others),
        );
        let (installed, serving) = match &outcome {
            Outcome::Serving(s) => (Some((spec_key, s.content_digest.clone())), Some(s.clone())),
            Outcome::Refused { .. } | Outcome::Loading { .. } => (previous_install, serving),
        };
        let changed_status = previous_status
            .as_ref()
            .is_none_or(|p| !same_status(p, &status));
        let replica = replica_for(&self.replica, &outcome, obj.generation);
        let changed_replica = previous_replica.as_ref() != Some(&replica);
        let mut known = self.known.lock().await;
        // A refused spec leaves the previous module serving: its entries
        // stay pinned, the refused one's are let go.
        let pins = match &outcome {
            Outcome::Serving(_) => fetched_pins,
            Outcome::Refused { .. } | Outcome::Loading { .. } => known
                .get_mut(&obj.source)
                .map(|k| std::mem::take(&mut k.pins))
                .unwrap_or_default(),
        };
        known.insert(
            obj.source.clone(),
            Known {
                generation: obj.generation,
                parts: obj.parts,
                installed,
                serving,
                outcome,
                status: Some(status.clone()),
                replica: Some(replica.clone()),
                others,
                pins,
            },
        );
        drop(known);
        if changed_status && self.leadership.state().coordinates() {
            self.write_status(&obj.source, &status).await;
        }
        if changed_replica {
            self.write_replica(&obj.source, &replica).await;
        }
    }

    /// The manifest and module an object asks for, and the account a
    /// tenant's acts as, or why it cannot run: (condition reason, message).
    async fn prepare(
        &self,
        obj: &Seen,
    ) -> Result<
        (
            crate::runtime::Manifest,
            fetch::Fetched,
            Option<ServiceAccountRef>,
        ),
        tenant::Refusal,
    > {
        let (parts, namespace, account) = match &obj.source {
            Source::Cluster(_) => (obj.parts.clone(), self.options.namespace.as_str(), None),
            Source::Tenant { namespace, .. } => {
                if !self.options.tenant_allowed(namespace) {
                    return Err((
                        reasons::NAMESPACE_NOT_ALLOWED,
                        format!(
                            "namespace {namespace} may not run its own plugins: the host config's pluginObjects.tenantNamespaces does not list it"
                        ),
                    ));
                }
                if obj.parts.access.is_none() {
                    return Err((
                        reasons::INVALID_SPEC,
                        "a NamespacedPlugin lists its access (what it may read and write in its namespace)".into(),
                    ));
                }
                // Before any read: whatever another namespace holds, its
                // name is never asked for.
                tenant::check_references(&obj.parts, namespace)?;
                let confined = obj
                    .parts
                    .confined_to(namespace)
                    .map_err(|e| (reasons::NOT_GRANTED, e.to_string()))?;
                let account = self.options.tenant_accounts.account(namespace);
                tenant::check_account(&self.client, &account).await?;
                tenant::check_reads(&self.client, &account, &confined).await?;
                (confined, namespace.as_str(), Some(account))
            }
        };
        // Checked before fetching, so a taken name costs no pull; the
        // install checks again (the folder may take it meanwhile).
        let name = obj.source.plugin_name();
        if let Some(holder) = self.host.origins().holder(&name)
            && holder != obj.source.origin()
        {
            let e = LoadError::NameTaken {
                name,
                holder: holder.to_string(),
            };
            return Err((reasons::NAME_TAKEN, e.to_string()));
        }
        let mut manifest = parts
            .manifest(&obj.source.display())
            .map_err(|e| (reasons::INVALID_SPEC, e.to_string()))?;
        // A tenant's plugin is admitted against the tenants' ceiling and
        // its namespace's quota, never the operator's.
        if let Source::Tenant { namespace, .. } = &obj.source {
            manifest.tenant = Some(namespace.clone());
        }
        let _slot = self.registry_slot(&parts.module).await;
        let fetched = self
            .fetcher
            .fetch(&name, &parts.module, namespace, account.as_ref())
            .await
            .map_err(|e| (e.reason(), e.to_string()))?;
        Ok((manifest, fetched, account))
    }

    /// A slot of the registry an OCI module is pulled from
    /// ([`PULLS_PER_REGISTRY`]); `None` for other sources.
    async fn registry_slot(
        &self,
        module: &crate::crd::ModuleSource,
    ) -> Option<tokio::sync::OwnedSemaphorePermit> {
        let reference = module
            .oci
            .as_ref()?
            .reference
            .parse::<crate::oci::Reference>()
            .ok()?;
        let registry = reference.resolve_registry().to_ascii_lowercase();
        let slots = self
            .registries
            .lock()
            .entry(registry)
            .or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(PULLS_PER_REGISTRY)))
            .clone();
        slots.acquire_owned().await.ok()
    }
}

fn watcher<K>(api: Api<K>) -> impl futures::Stream<Item = Result<Event<K>, watcher::Error>> + Send
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    K::DynamicType: Default,
{
    watcher::watcher(api, watcher::Config::default()).default_backoff()
}

/// The condition reason of a load failure.
fn load_reason(e: &LoadError) -> reasons::Reason {
    match e {
        LoadError::NotGranted(_) | LoadError::OverCeiling(_) => reasons::NOT_GRANTED,
        LoadError::OverQuota(_) => reasons::QUOTA_EXCEEDED,
        LoadError::Manifest(_) => reasons::INVALID_SPEC,
        LoadError::UnknownKind(_) => reasons::UNKNOWN_KIND,
        LoadError::Register(_) | LoadError::BadRegistration(_) => reasons::REGISTER_FAILED,
        LoadError::Compile(_) | LoadError::Invalid(_) | LoadError::Truncated => {
            reasons::COMPILE_FAILED
        }
        LoadError::NotWasm
        | LoadError::CoreModule
        | LoadError::WrongVersion { .. }
        | LoadError::NotAPlugin { .. }
        | LoadError::Imports(_) => reasons::NOT_A_PLUGIN,
        LoadError::Start(_) => reasons::START_FAILED,
        LoadError::NameTaken { .. } => reasons::NAME_TAKEN,
    }
}
