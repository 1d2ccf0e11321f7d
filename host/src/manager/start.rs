//! Starting a version: its instances compiled, started and registered,
//! the kinds it names learnt, its subscriptions, indexes and dispatcher
//! made; everything is validated before any informer is touched.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::resolve::{narrow_to_grant, resolve_subscriptions, resolve_writes, unknown_kind};
use super::version::{PluginVersion, pair_id};
use super::{Load, LoadInfo, PluginHost};
use crate::dispatch::{
    DispatchOptions, Dispatcher, DispatcherParts, PluginStats, SubscriptionFilter,
};
use crate::informer::{CacheView, Informer, InformerSpec, SubscriptionHandle};
use crate::kind::KindRef;
use crate::runtime::host::PluginScope;
use crate::runtime::{Actor, LoadError, Registration};
use crate::telemetry::PluginTelemetry;

impl PluginHost {
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
    /// Compiles, registers and subscribes a version (not delivering until
    /// [`Dispatcher::start_when_synced`]); `previous` is cut just before.
    /// Everything is validated before any informer is touched.
    pub(super) async fn start(
        &self,
        name: &str,
        load: Load,
        previous: Option<&PluginVersion>,
    ) -> Result<PluginVersion, LoadError> {
        let Instances {
            prepared,
            actors,
            registration,
            start_time,
        } = self.instantiate(name, load).await?;
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
        for (id, (filter, informer, rx, cut)) in subscribed.intakes.into_iter().enumerate() {
            dispatcher.add_intake(pair_id(id), filter, informer, rx, term, cut);
        }
        tracing::info!(
            plugin = name,
            compile = ?prepared.compile_source,
            tier = %prepared.tier,
            compile_ms = prepared.compile_time.as_millis() as u64,
            start_ms = start_time.as_millis() as u64,
            subscriptions = registration.subscriptions.len(),
            "plugin version started"
        );
        Ok(PluginVersion {
            name: plugin,
            load: LoadInfo {
                compile_source: prepared.compile_source,
                tier: prepared.tier,
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
    /// runtime's compiler, off the async threads), unless already
    /// prepared, starts its instances and registers each; the kinds it
    /// names are learnt.
    async fn instantiate(&self, name: &str, load: Load) -> Result<Instances, LoadError> {
        let prepared = match load {
            Load::Content(content, manifest) => {
                Arc::new(self.runtime.prepare_async(name, content, *manifest).await?)
            }
            Load::Prepared(prepared) => prepared,
        };
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
    /// The action rate a tenant's plugin shares with its namespace's
    /// others (its quota's `actionsPerSecond`); `None` for the operator's.
    fn namespace_rate(
        &self,
        manifest: &crate::runtime::Manifest,
    ) -> Option<crate::actions::rate::SharedRate> {
        let namespace = manifest.tenant.as_deref()?;
        let tenants = self.runtime().tenants();
        let limiter = tenants.rate(namespace)?;
        Some(crate::actions::rate::SharedRate::new(
            limiter,
            tenants.quota(namespace).actions_per_second,
            &format!(
                "namespace {namespace}'s quota actionsPerSecond (pluginObjects.tenants quota, host config)"
            ),
        ))
    }

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
                shared_rate: self.namespace_rate(&prepared.manifest),
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
                .push((filter, handle.informer.clone(), rx, handle.cut));
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
        u64,
    )>,
    /// Per kind, the caches the plugin may read.
    reads: HashMap<crate::kind::Gvk, Vec<CacheView>>,
}
