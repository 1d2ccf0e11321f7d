//! Loading, replacing and unloading plugin versions: a new version is
//! compiled, registered and subscribed (receiving the cache as initial
//! deltas) before the old one stops, so nothing is missed across a swap:
//! the old version delivers only what it received before the new one
//! subscribed, and hands the deletes it had not handled (waiting,
//! retrying) and the plugin's dead deletes to the new version, ahead of
//! its replay. Everything else it held is in the replay or the new
//! version's own stream.
//! Gaining leadership takes the same path without recompiling: every
//! running version is resubscribed, receiving the cache again.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{Mutex, mpsc};

use crate::actions::executor::Executor;
use crate::dispatch::queue::Item;
use crate::dispatch::{
    Activity, DispatchOptions, Dispatcher, DispatcherParts, Key, PluginStats, SubId,
    SubscriptionFilter,
};
use crate::informer::DeltaType;
use crate::informer::selector::{FieldSelector, LabelSelector};
use crate::informer::{CacheView, Informer, InformerSet, InformerSpec, SubscriptionHandle};
use crate::kind::KindDiscovery;
use crate::kind::{KindError, KindRef, KindRegistry};
use crate::leader::Leadership;
use crate::origin::{Origin, Origins};
use crate::runtime::host::PluginScope;
use crate::runtime::{Actor, CompileSource, Content, LoadError, Manifest, Registration, Runtime};
use crate::telemetry::{PluginTelemetry, Telemetry};

/// How a version was loaded, for logs and the benchmark.
#[derive(Debug, Clone)]
pub struct LoadInfo {
    pub compile_source: CompileSource,
    pub compile_time: Duration,
    /// Instantiation plus `register` on every instance.
    pub start_time: Duration,
}

/// One running version of a plugin.
#[derive(Debug)]
pub struct PluginVersion {
    pub name: Arc<str>,
    pub registration: Registration,
    pub load: LoadInfo,
    dispatcher: Dispatcher,
    /// What each subscription asks for, to subscribe again on a new term.
    subscriptions: Vec<(InformerSpec, SubscriptionFilter)>,
    handles: parking_lot::Mutex<Vec<SubscriptionHandle>>,
    /// The leadership term its intakes forward in.
    term: std::sync::atomic::AtomicU64,
    indexes: Vec<(Arc<Informer>, String)>,
    prepared: Arc<crate::runtime::Prepared>,
}

impl PluginVersion {
    /// The version the plugin sees in its context (12 hex digits of the
    /// component's SHA-256).
    pub fn version(&self) -> &str {
        &self.prepared.version
    }

    /// This version's subscription pair fed by `informer`: its id, its
    /// registration index and its cut.
    fn successor_of(&self, informer: &Arc<Informer>) -> Option<(SubId, u32, u64)> {
        self.handles
            .lock()
            .iter()
            .zip(&self.subscriptions)
            .enumerate()
            .find(|(_, (h, _))| Arc::ptr_eq(&h.informer, informer))
            .map(|(id, (h, (_, f)))| (pair_id(id), f.index, h.cut))
    }

    /// This version's subscription pair reading `spec` (where a dead letter
    /// of an earlier version belongs now).
    fn pair_for(&self, spec: &InformerSpec) -> Option<(SubId, &SubscriptionFilter)> {
        self.subscriptions
            .iter()
            .enumerate()
            .find(|(_, (s, _))| s == spec)
            .map(|(id, (_, f))| (pair_id(id), f))
    }

    pub fn stats(&self) -> &Arc<PluginStats> {
        self.dispatcher.stats()
    }

    /// The source language, when the component says (see
    /// [`crate::runtime::language`]).
    pub fn language(&self) -> Option<&str> {
        self.prepared.language.as_deref()
    }

    /// What each subscription watches, as its informer describes it.
    pub fn subscription_specs(&self) -> Vec<String> {
        self.subscriptions
            .iter()
            .map(|(spec, _)| spec.to_string())
            .collect()
    }

    pub fn is_idle(&self) -> bool {
        self.dispatcher.is_idle()
    }

    /// Instances created so far: the first ones and every replacement
    /// after a trap (a quarantined plugin gets none).
    pub fn instantiations(&self) -> u64 {
        self.prepared
            .instantiations
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Subscribes every subscription again for leadership term `term`:
    /// the informer replays its cache into the new intake as initial deltas
    /// (atomically with live deltas, so order holds), then the old
    /// subscription goes (the informer stays up: it always has one).
    fn replay(&self, informers: &InformerSet, term: u64) {
        let mut handles = self.handles.lock();
        for (id, ((spec, filter), handle)) in self
            .subscriptions
            .iter()
            .zip(handles.iter_mut())
            .enumerate()
        {
            let (tx, rx) = mpsc::unbounded_channel();
            let fresh = informers.subscribe_as(spec.clone(), tx, self.name.clone());
            self.dispatcher.add_intake(
                pair_id(id),
                filter.clone(),
                fresh.informer.clone(),
                rx,
                term,
            );
            let old = std::mem::replace(handle, fresh);
            informers.unsubscribe(&old);
        }
        self.term.store(term, std::sync::atomic::Ordering::SeqCst);
    }

    /// Each subscription pair's informer, by pair id.
    fn informers(&self) -> Vec<Arc<Informer>> {
        self.handles
            .lock()
            .iter()
            .map(|h| h.informer.clone())
            .collect()
    }

    /// Stops delivering deltas the informers emit after now (a successor
    /// is about to subscribe and will receive them).
    fn cut(&self) {
        let cuts = self
            .handles
            .lock()
            .iter()
            .enumerate()
            .map(|(id, h)| (pair_id(id), h.informer.seq()))
            .collect();
        self.dispatcher.cut(cuts);
    }

    /// Stops; returns the deltas it did not handle (see [`Dispatcher::stop`]).
    async fn stop(&self, informers: &InformerSet) -> Vec<(Key, Item)> {
        let handles = std::mem::take(&mut *self.handles.lock());
        let left = self.dispatcher.stop().await;
        for h in &handles {
            informers.unsubscribe(h);
        }
        for (informer, index) in &self.indexes {
            informer.store().remove_index(index);
        }
        left
    }

    /// Stops with nobody to take over what it did not handle.
    async fn stop_for_good(&self, informers: &InformerSet) {
        let left = self.stop(informers).await;
        tracing::info!(
            plugin = %self.name,
            unhandled = left.len(),
            "plugin version stopped; what it had not handled is in the next leader's (or the next start's) replay"
        );
        self.dispatcher.drop_items(&left);
    }
}

/// Owns the running plugins.
pub struct PluginHost {
    runtime: Runtime,
    informers: Arc<InformerSet>,
    kinds: KindRegistry,
    executor: Arc<Executor>,
    activity: Arc<Activity>,
    dispatch: DispatchOptions,
    plugins: Mutex<BTreeMap<String, Arc<PluginVersion>>>,
    /// Stats survive version swaps: one line per plugin name in summaries.
    stats: parking_lot::Mutex<BTreeMap<String, Arc<PluginStats>>>,
    versions: std::sync::atomic::AtomicU64,
    /// Relearns the cluster's kinds when a registration names an unknown
    /// one (a CRD installed after start); `None` for the local cluster.
    discovery: Option<Arc<dyn KindDiscovery>>,
    leadership: Leadership,
    telemetry: Telemetry,
    /// Which origin holds each name: taken when a load starts, kept while
    /// a version serves, given back by an unload or a first load that
    /// failed.
    origins: Origins,
}

impl std::fmt::Debug for PluginHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginHost").finish_non_exhaustive()
    }
}

impl PluginHost {
    /// Counts each plugin's deliveries and actions into `telemetry` (give
    /// it the executor's, so one registry holds them all).
    pub fn new(
        runtime: Runtime,
        informers: Arc<InformerSet>,
        kinds: KindRegistry,
        executor: Arc<Executor>,
        activity: Arc<Activity>,
        dispatch: DispatchOptions,
        telemetry: Telemetry,
    ) -> Self {
        Self {
            runtime,
            informers,
            kinds,
            executor,
            activity,
            dispatch,
            plugins: Mutex::new(BTreeMap::new()),
            stats: parking_lot::Mutex::new(BTreeMap::new()),
            versions: std::sync::atomic::AtomicU64::new(0),
            discovery: None,
            leadership: Leadership::always(),
            telemetry,
            origins: Origins::default(),
        }
    }

    /// Delivers only while `leadership` leads (the default: always).
    #[must_use]
    pub fn with_leadership(mut self, leadership: Leadership) -> Self {
        self.leadership = leadership;
        self
    }

    /// Replays the cache to every running plugin for the current term
    /// (just gained): from then on they are live.
    pub async fn replay_all(&self) {
        let plugins = self.plugins.lock().await;
        let state = self.leadership.state();
        if !state.leading {
            return;
        }
        for v in plugins.values() {
            if v.term.load(std::sync::atomic::Ordering::SeqCst) != state.term {
                v.replay(&self.informers, state.term);
            }
        }
        tracing::info!(
            plugins = plugins.len(),
            term = state.term,
            "leading: cache replayed to every plugin"
        );
    }

    /// What this host counts into.
    pub fn telemetry(&self) -> &Telemetry {
        &self.telemetry
    }

    /// Refresh kinds through `discovery` when a plugin names an unknown one.
    #[must_use]
    pub fn with_discovery(mut self, discovery: Arc<dyn KindDiscovery>) -> Self {
        self.discovery = Some(discovery);
        self
    }

    /// The first kind the registration names that the registry does not
    /// know.
    fn unknown_kind<'r>(&self, registration: &'r Registration) -> Option<&'r KindRef> {
        unknown_kind(&self.kinds, registration)
    }

    /// Runs discovery again if any kind the registration names is unknown;
    /// refuses the registration if one still is.
    async fn learn_kinds(&self, name: &str, registration: &Registration) -> Result<(), LoadError> {
        if let Some(kind) = self.unknown_kind(registration)
            && let Some(discovery) = &self.discovery
        {
            tracing::info!(plugin = name, kind = %kind, "unknown kind; refreshing discovery");
            if let Err(e) = discovery.refresh().await {
                tracing::warn!(plugin = name, error = %e, "discovery refresh failed");
            }
        }
        match self.unknown_kind(registration) {
            Some(kind) => Err(LoadError::UnknownKind(kind.to_string())),
            None => Ok(()),
        }
    }

    /// The kinds the host knows; their [`KindRegistry::generation`] tells
    /// when a plugin refused for an unknown kind may load now.
    pub fn kinds(&self) -> &KindRegistry {
        &self.kinds
    }

    /// Learns the cluster's kinds again (rate-limited; nothing without an
    /// API server).
    pub async fn refresh_kinds(&self) {
        if let Some(discovery) = &self.discovery
            && let Err(e) = discovery.refresh().await
        {
            tracing::warn!(error = %e, "discovery refresh failed");
        }
    }

    pub fn informers(&self) -> &Arc<InformerSet> {
        &self.informers
    }

    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    pub fn executor(&self) -> &Arc<Executor> {
        &self.executor
    }

    /// Loads `bytes` as plugin `name` and starts it; the previous version,
    /// if any, keeps serving until the new one is subscribed, then stops
    /// and hands over what it did not handle (see the module doc).
    pub async fn install(
        &self,
        name: &str,
        content: impl Into<Content>,
        manifest: Manifest,
    ) -> Result<Arc<PluginVersion>, LoadError> {
        self.install_from(Origin::Direct, name, content, manifest)
            .await
    }

    /// [`install`](Self::install) for a plugin of `origin`: refused with
    /// [`LoadError::NameTaken`] while another origin serves or loads a
    /// plugin of that name.
    pub async fn install_from(
        &self,
        origin: Origin,
        name: &str,
        content: impl Into<Content>,
        manifest: Manifest,
    ) -> Result<Arc<PluginVersion>, LoadError> {
        let claimed = self
            .origins
            .claim(name, &origin)
            .map_err(|holder| LoadError::NameTaken {
                name: name.to_owned(),
                holder: holder.to_string(),
            })?;
        let result = self.swap_in(name, content.into(), manifest).await;
        // A first load that failed leaves nothing serving: the name is
        // free again.
        if result.is_err() && claimed {
            self.origins.release(name, &origin);
        }
        result
    }

    /// Which source each plugin name belongs to.
    pub fn origins(&self) -> &Origins {
        &self.origins
    }

    async fn swap_in(
        &self,
        name: &str,
        content: Content,
        manifest: Manifest,
    ) -> Result<Arc<PluginVersion>, LoadError> {
        let previous = self.plugins.lock().await.get(name).cloned();
        let version = match self
            .start(name, content, manifest, previous.as_deref())
            .await
        {
            Ok(v) => Arc::new(v),
            Err(e) => {
                if let Some(p) = &previous {
                    p.dispatcher.uncut();
                }
                return Err(e);
            }
        };
        let old = {
            let mut plugins = self.plugins.lock().await;
            let old = plugins.insert(name.to_owned(), version.clone());
            // Leadership was gained while it started: its intakes belong to
            // the old term; `replay_all` either ran before the insert or
            // will skip it, so replay here (under the same lock).
            let state = self.leadership.state();
            if state.leading && version.term.load(std::sync::atomic::Ordering::SeqCst) != state.term
            {
                version.replay(&self.informers, state.term);
            }
            old
        };
        if let Some(old) = &old {
            let old_informers = old.informers();
            let left = old.stop(&self.informers).await;
            let (keep, drop): (Vec<_>, Vec<_>) = left
                .into_iter()
                .map(|(key, item)| {
                    let to = old_informers
                        .get(key.0 as usize)
                        .and_then(|i| version.successor_of(i));
                    (to, key, item)
                })
                .partition(|(to, _, item)| {
                    to.is_some_and(|(_, _, cut)| {
                        item.delta.dtype == DeltaType::Deleted && item.seq <= cut
                    })
                });
            let dropped: Vec<_> = drop.into_iter().map(|(_, k, i)| (k, i)).collect();
            old.dispatcher.drop_items(&dropped);
            let handed: Vec<_> = keep
                .into_iter()
                .filter_map(|(to, key, item)| to.map(|(id, index, _)| moved(id, index, key, item)))
                .collect();
            tracing::info!(
                plugin = name,
                handed_over = handed.len(),
                covered = dropped.len(),
                "previous version stopped; the deletes it had not handled go to the new version (the rest is in the new version's replay or stream)"
            );
            version.dispatcher.hand_over(handed);
        }
        self.requeue_dead_letters(name, &version);
        version.dispatcher.start_when_synced(version.informers());
        Ok(version)
    }

    /// A new version gets the plugin's dead letters: permanently failed
    /// deletes are queued again (ahead of the replay), in the subscription
    /// pair that reads the same informer; parked keys came over with the
    /// old version's queue, and the other dead deltas' objects are in the
    /// replay, so their records are cleared.
    fn requeue_dead_letters(&self, name: &str, version: &PluginVersion) {
        let dead = version.stats().dead_letters.lock().take();
        if dead.is_empty() {
            return;
        }
        let total = dead.len();
        let requeued: Vec<_> = dead
            .into_iter()
            .filter(|t| !t.parked && t.item.delta.dtype == DeltaType::Deleted)
            .filter_map(|t| {
                let (id, filter) = version.pair_for(t.spec.as_ref()?)?;
                Some(moved(id, filter.index, t.key, t.item))
            })
            .collect();
        // Settled when they died; counted again while queued.
        self.activity
            .emit(requeued.iter().map(|(_, i)| i.weight).sum());
        tracing::info!(
            plugin = name,
            dead_letters = total,
            requeued_deletes = requeued.len(),
            "new version: dead deletes queued again, the other dead deltas' objects are in its replay"
        );
        version.dispatcher.hand_over(requeued);
    }

    /// [`unload`](Self::unload) if `origin` holds `name`: a source never
    /// unloads another's plugin of the same name.
    pub async fn unload_from(&self, origin: &Origin, name: &str) -> bool {
        if self.origins.holder(name).as_ref() != Some(origin) {
            return false;
        }
        self.unload(name).await
    }

    /// Stops and removes plugin `name` after its in-flight call; the name
    /// is free for any origin afterwards.
    pub async fn unload(&self, name: &str) -> bool {
        let old = self.plugins.lock().await.remove(name);
        if let Some(origin) = self.origins.holder(name) {
            self.origins.release(name, &origin);
        }
        match old {
            Some(old) => {
                old.stop_for_good(&self.informers).await;
                tracing::info!(plugin = name, "plugin unloaded");
                true
            }
            None => false,
        }
    }

    pub async fn get(&self, name: &str) -> Option<Arc<PluginVersion>> {
        self.plugins.lock().await.get(name).cloned()
    }

    /// The running versions, by plugin name.
    pub async fn versions(&self) -> Vec<Arc<PluginVersion>> {
        self.plugins.lock().await.values().cloned().collect()
    }

    pub async fn names(&self) -> Vec<String> {
        self.plugins.lock().await.keys().cloned().collect()
    }

    pub fn stats(&self) -> BTreeMap<String, Arc<PluginStats>> {
        self.stats.lock().clone()
    }

    pub async fn all_idle(&self) -> bool {
        self.plugins.lock().await.values().all(|p| p.is_idle())
    }

    /// Whether every plugin is idle or waits on an informer the API server
    /// refuses (it cannot go on until the host's identity is granted).
    pub async fn all_idle_or_refused(&self) -> bool {
        self.plugins
            .lock()
            .await
            .values()
            .all(|p| p.is_idle() || p.informers().iter().any(|i| i.forbidden().is_some()))
    }

    /// Stops every plugin, draining in-flight calls.
    pub async fn shutdown(&self) {
        let all: Vec<_> = std::mem::take(&mut *self.plugins.lock().await)
            .into_values()
            .collect();
        // In parallel, under one grace: a plugin slow to drain does not
        // delay the others' stop.
        futures::future::join_all(all.iter().map(|p| p.stop_for_good(&self.informers))).await;
    }

    /// Compiles, registers and subscribes a version (not delivering until
    /// [`Dispatcher::start_when_synced`]); `previous` is cut just before.
    /// Everything is validated before any informer is touched.
    async fn start(
        &self,
        name: &str,
        content: Content,
        manifest: Manifest,
        previous: Option<&PluginVersion>,
    ) -> Result<PluginVersion, LoadError> {
        let Instances {
            prepared,
            actors,
            registration,
            start_time,
        } = self.instantiate(name, content, manifest).await?;
        let resolved = self.resolve_subscriptions(&registration)?;
        let (writes, write_kinds) = self.resolve_writes(&registration)?;
        let grant = prepared.manifest.grant(name);
        let resolved = narrow_to_grant(&grant, resolved, &write_kinds)?;
        let plugin: Arc<str> = Arc::from(name);
        let dispatcher = self.dispatcher(&plugin, &prepared, &actors, &resolved);

        // Read before subscribing: if leadership is gained after this, the
        // version is replayed for the new term.
        let term = self.leadership.state().term;
        if let Some(previous) = previous {
            previous.cut();
        }
        let subscribed = self.subscribe(&plugin, resolved.clone());
        let version_id = self
            .versions
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (index_map, indexes) =
            match self.add_indexes(name, version_id, &registration, &subscribed) {
                Ok(built) => built,
                Err(e) => {
                    self.undo(&subscribed.handles);
                    return Err(e);
                }
            };
        let scope = Arc::new(PluginScope {
            kinds: self.kinds.clone(),
            reads: subscribed.reads,
            indexes: index_map,
            writes,
            grant,
        });
        for actor in &actors {
            actor.set_scope(scope.clone());
        }
        for (id, (filter, informer, rx)) in subscribed.intakes.into_iter().enumerate() {
            dispatcher.add_intake(pair_id(id), filter, informer, rx, term);
        }
        tracing::info!(
            plugin = name,
            compile = ?prepared.compile_source,
            compile_ms = prepared.compile_time.as_millis() as u64,
            start_ms = start_time.as_millis() as u64,
            subscriptions = registration.subscriptions.len(),
            "plugin version started"
        );
        Ok(PluginVersion {
            name: plugin,
            load: LoadInfo {
                compile_source: prepared.compile_source,
                compile_time: prepared.compile_time,
                start_time,
            },
            registration,
            dispatcher,
            subscriptions: resolved,
            handles: parking_lot::Mutex::new(subscribed.handles),
            term: std::sync::atomic::AtomicU64::new(term),
            indexes,
            prepared,
        })
    }

    /// Obtains the component (from the cache, else compiled by the
    /// runtime's compiler, off the async threads), starts its instances
    /// and registers each; the kinds it names are learnt.
    async fn instantiate(
        &self,
        name: &str,
        content: Content,
        manifest: Manifest,
    ) -> Result<Instances, LoadError> {
        let prepared = Arc::new(self.runtime.prepare_async(name, content, manifest).await?);
        let started = Instant::now();
        let config = prepared.manifest.config_json();
        let mut actors = Vec::new();
        for i in 0..prepared.manifest.limits.concurrency {
            actors.push(Arc::new(
                Actor::spawn(prepared.clone(), i).map_err(|e| LoadError::Start(e.to_string()))?,
            ));
        }
        let mut registration = None;
        for actor in &actors {
            let r = actor
                .register(config.clone())
                .await
                .map_err(|e| LoadError::Register(e.to_string()))?;
            registration.get_or_insert(r);
        }
        let registration = registration.ok_or_else(|| LoadError::Start("no instance".into()))?;
        self.learn_kinds(name, &registration).await?;
        Ok(Instances {
            prepared,
            actors,
            registration,
            start_time: started.elapsed(),
        })
    }

    /// Each subscription as an informer spec and a delivery filter.
    fn resolve_subscriptions(
        &self,
        registration: &Registration,
    ) -> Result<Vec<(InformerSpec, SubscriptionFilter)>, LoadError> {
        resolve_subscriptions(&self.kinds, self.dispatch.default_resync, registration)
    }

    /// The kinds the registration declares it writes.
    fn resolve_writes(
        &self,
        registration: &Registration,
    ) -> Result<(HashSet<crate::kind::Gvk>, Vec<crate::kind::KindInfo>), LoadError> {
        resolve_writes(&self.kinds, registration)
    }

    /// The version's dispatcher: the host's dispatch options, with the
    /// sidecar's where it sets them.
    fn dispatcher(
        &self,
        plugin: &Arc<str>,
        prepared: &crate::runtime::Prepared,
        actors: &[Arc<Actor>],
        resolved: &[(InformerSpec, SubscriptionFilter)],
    ) -> Dispatcher {
        let stats = self
            .stats
            .lock()
            .entry(plugin.to_string())
            .or_insert_with(|| Arc::new(PluginStats::default()))
            .clone();
        let kinds: Vec<String> = resolved
            .iter()
            .map(|(spec, _)| spec.kind.resource_name())
            .collect();
        let telemetry = PluginTelemetry {
            counters: self.telemetry.metrics().plugin(plugin, &kinds),
            telemetry: self.telemetry.clone(),
        };
        let limits = &prepared.manifest.limits;
        Dispatcher::new(DispatcherParts {
            plugin: plugin.clone(),
            actors: actors.to_vec(),
            executor: self.executor.clone(),
            activity: self.activity.clone(),
            stats,
            options: DispatchOptions {
                max_attempts: limits.max_attempts.or(self.dispatch.max_attempts),
                actions_per_second: limits.actions_per_second,
                ..self.dispatch.clone()
            },
            leadership: self.leadership.clone(),
            telemetry,
        })
    }

    /// Subscribes every resolved subscription; every subscription's cache
    /// is readable (two subscriptions to one kind, in other namespaces or
    /// with other selectors, are two caches).
    fn subscribe(
        &self,
        plugin: &Arc<str>,
        resolved: Vec<(InformerSpec, SubscriptionFilter)>,
    ) -> Subscribed {
        let mut subscribed = Subscribed {
            handles: Vec::new(),
            intakes: Vec::new(),
            reads: HashMap::new(),
        };
        for (spec, filter) in resolved {
            let (tx, rx) = mpsc::unbounded_channel();
            let handle = self.informers.subscribe_as(spec, tx, plugin.clone());
            let same_kind = subscribed.reads.entry(filter.kind.clone()).or_default();
            let view = handle.informer.view();
            if !same_kind.iter().any(|v| v.id() == view.id()) {
                same_kind.push(view);
            }
            subscribed
                .intakes
                .push((filter, handle.informer.clone(), rx));
            subscribed.handles.push(handle);
        }
        subscribed
    }

    /// The registration's indexes, each over every cache of its kind the
    /// plugin reads (added here, where the informers are owned; the plugin
    /// gets read-only views).
    #[allow(clippy::type_complexity)]
    fn add_indexes(
        &self,
        name: &str,
        version_id: u64,
        registration: &Registration,
        subscribed: &Subscribed,
    ) -> Result<
        (
            HashMap<String, Vec<(CacheView, String)>>,
            Vec<(Arc<Informer>, String)>,
        ),
        LoadError,
    > {
        let mut index_map = HashMap::new();
        let mut indexes = Vec::new();
        for idx in &registration.indexes {
            let fail = |m: String| LoadError::BadRegistration(format!("index {:?}: {m}", idx.name));
            let kind = self
                .kinds
                .resolve(&idx.kind)
                .map_err(|e| fail(e.to_string()))?;
            if !subscribed.reads.contains_key(&kind.gvk) {
                return Err(fail(format!("{} is not subscribed", kind.resource_name())));
            }
            let store_name = format!("{name}#{version_id}/{}", idx.name);
            let mut on = Vec::new();
            let mut added = HashSet::new();
            for handle in subscribed
                .handles
                .iter()
                .filter(|h| h.informer.spec().kind.gvk == kind.gvk)
            {
                if !added.insert(Arc::as_ptr(&handle.informer) as usize) {
                    continue;
                }
                handle.informer.store().add_index(&store_name, &idx.pointer);
                on.push((handle.informer.view(), store_name.clone()));
                indexes.push((handle.informer.clone(), store_name.clone()));
            }
            index_map.insert(idx.name.clone(), on);
        }
        Ok((index_map, indexes))
    }

    fn undo(&self, handles: &[SubscriptionHandle]) {
        for h in handles {
            self.informers.unsubscribe(h);
        }
    }
}

/// A version's started, registered instances.
struct Instances {
    prepared: Arc<crate::runtime::Prepared>,
    actors: Vec<Arc<Actor>>,
    registration: Registration,
    /// Instantiation plus `register` on every instance.
    start_time: Duration,
}

/// A version's subscriptions, before its dispatcher takes their intakes.
struct Subscribed {
    handles: Vec<SubscriptionHandle>,
    intakes: Vec<(
        SubscriptionFilter,
        Arc<Informer>,
        mpsc::UnboundedReceiver<crate::informer::Delta>,
    )>,
    /// Per kind, the caches the plugin may read.
    reads: HashMap<crate::kind::Gvk, Vec<CacheView>>,
}

/// `item` of `key`, moved to subscription pair `id` (registration index
/// `index`) of a new version with fresh attempts.
fn moved(id: SubId, index: u32, key: Key, mut item: Item) -> (Key, Item) {
    item.attempts = 0;
    item.delta.subscription = index;
    ((id, key.1), item)
}

/// A subscription pair's id: its position in the version's subscriptions.
fn pair_id(position: usize) -> SubId {
    SubId::try_from(position).unwrap_or(SubId::MAX)
}

/// The first kind `registration` names that `kinds` does not know.
pub fn unknown_kind<'r>(
    kinds: &KindRegistry,
    registration: &'r Registration,
) -> Option<&'r KindRef> {
    registration
        .subscriptions
        .iter()
        .map(|s| &s.kind)
        .chain(registration.writes.iter())
        .chain(registration.indexes.iter().map(|i| &i.kind))
        .find(|k| matches!(kinds.resolve(k), Err(KindError::Unknown(_))))
}

/// Each subscription as an informer spec and a delivery filter, or an
/// error naming the subscription and what is wrong with it.
pub fn resolve_subscriptions(
    kinds: &KindRegistry,
    default_resync: Option<Duration>,
    registration: &Registration,
) -> Result<Vec<(InformerSpec, SubscriptionFilter)>, LoadError> {
    let mut resolved = Vec::new();
    for (i, sub) in registration.subscriptions.iter().enumerate() {
        let bad =
            |m: String| LoadError::BadRegistration(format!("subscription {i} ({}): {m}", sub.kind));
        let kind = kinds.resolve(&sub.kind).map_err(|e| bad(e.to_string()))?;
        kinds
            .check_watchable(&kind)
            .map_err(|e| bad(e.to_string()))?;
        if let Some(s) = &sub.label_selector {
            LabelSelector::parse(s).map_err(|e| bad(e.to_string()))?;
        }
        // The informer gets the canonical text (apimachinery's
        // `String()`): what the server is sent and the informer's id
        // shows, so two spellings of one selector share an informer.
        let field_selector = match &sub.field_selector {
            Some(s) => {
                let parsed = FieldSelector::parse(s).map_err(|e| bad(e.to_string()))?;
                parsed.check_supported(&kind).map_err(bad)?;
                (!parsed.is_empty()).then(|| parsed.to_string())
            }
            None => None,
        };
        if sub.namespace.is_some() && !kind.namespaced {
            return Err(bad(format!(
                "{} is cluster-scoped; drop the namespace",
                kind.resource_name()
            )));
        }
        if let Some(f) = sub.fields.iter().find(|f| !f.starts_with('/')) {
            return Err(bad(format!(
                "field {f:?} is not a JSON pointer (it must start with '/')"
            )));
        }
        let spec = InformerSpec {
            kind: kind.clone(),
            namespace: sub.namespace.clone(),
            label_selector: sub.label_selector.clone(),
            field_selector,
        };
        let filter = SubscriptionFilter {
            index: u32::try_from(i).unwrap_or(u32::MAX),
            kind: kind.gvk.clone(),
            deltas: sub.deltas.clone(),
            fields: sub.fields.clone(),
            resync: sub.resync.period(default_resync),
        };
        resolved.push((spec, filter));
    }
    Ok(resolved)
}

/// The kinds the registration declares it writes.
pub fn resolve_writes(
    kinds: &KindRegistry,
    registration: &Registration,
) -> Result<(HashSet<crate::kind::Gvk>, Vec<crate::kind::KindInfo>), LoadError> {
    let mut writes = HashSet::new();
    let mut write_kinds = Vec::new();
    for w in &registration.writes {
        let info = kinds
            .resolve(w)
            .map_err(|e| LoadError::BadRegistration(format!("writes: {e}")))?;
        writes.insert(info.gvk.clone());
        write_kinds.push(info);
    }
    Ok((writes, write_kinds))
}

/// Checks the registration against the sidecar's grant, and narrows each
/// subscription to every namespace that the grant confines to a list into
/// one subscription per granted namespace (the same delivery filter, so the
/// plugin sees one subscription; its caches hold only what it may read).
pub fn narrow_to_grant(
    grant: &crate::runtime::access::Grant,
    resolved: Vec<(InformerSpec, SubscriptionFilter)>,
    writes: &[crate::kind::KindInfo],
) -> Result<Vec<(InformerSpec, SubscriptionFilter)>, LoadError> {
    use crate::runtime::access::{ReadRequest, ReadScope};
    let reads: Vec<ReadRequest<'_>> = resolved
        .iter()
        .map(|(spec, _)| ReadRequest {
            kind: &spec.kind,
            namespace: spec.namespace.as_deref(),
        })
        .collect();
    let scopes = grant
        .check_registration(&reads, writes)
        .map_err(|d| LoadError::NotGranted(d.0))?;
    let mut out = Vec::with_capacity(resolved.len());
    for ((spec, filter), scope) in resolved.into_iter().zip(scopes) {
        match scope {
            ReadScope::AsAsked => out.push((spec, filter)),
            ReadScope::Narrowed(namespaces) => {
                tracing::info!(plugin = %grant.plugin, kind = %spec.kind.resource_name(), namespaces = ?namespaces, "subscription narrowed to the namespaces its sidecar grants");
                for ns in namespaces {
                    let mut narrowed = spec.clone();
                    narrowed.namespace = Some(ns);
                    out.push((narrowed, filter.clone()));
                }
            }
        }
    }
    Ok(out)
}
