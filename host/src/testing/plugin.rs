//! The plugin under test, loaded as the host loads it: the same engine and
//! compile cache, the sidecar checked against the host's default ceiling,
//! `register` on a fresh instance per case, the registration resolved,
//! checked against the sidecar's access list and narrowed to it by the
//! manager's own functions, and its caches served by detached informers
//! filled from the case's cluster.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::dispatch::SubscriptionFilter;
use crate::informer::selector::{FieldSelector, LabelSelector};
use crate::informer::{CacheView, Informer, InformerSpec};
use crate::kind::KindRegistry;
use crate::object::{KObject, ObjectKey, StripOptions};
use crate::runtime::harness::Harness;
use crate::runtime::host::PluginScope;
use crate::runtime::{Actor, LoadError, Manifest, Prepared, Registration, Runtime};
use crate::telemetry::Telemetry;

use super::cluster::SimCluster;

/// Why the plugin file cannot be tested at all (bad input).
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    #[error("cannot read the plugin {path}: {source} (pass the .wasm the plugin's build writes)")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{path} is not a WebAssembly component (give the plugin's .wasm first, then the fixtures)"
    )]
    NotWasm { path: PathBuf },
    #[error("{path}: {source}")]
    Load { path: PathBuf, source: LoadError },
    #[error("cannot start the wasmtime engine: {0}")]
    Engine(#[from] crate::runtime::engine::EngineError),
}

/// The plugin file, compiled once per sidecar it runs with.
pub struct PluginUnderTest {
    pub name: String,
    pub path: PathBuf,
    bytes: Vec<u8>,
    runtime: Runtime,
    /// The sidecar every case without its own uses (`--sidecar`, else the
    /// one beside the plugin).
    default_sidecar: Option<PathBuf>,
    /// Prepared versions by sidecar, sharing one harness.
    prepared: HashMap<Option<PathBuf>, Arc<Prepared>>,
    pub harness: Harness,
    /// What its caches and actions count into.
    pub telemetry: Telemetry,
}

impl std::fmt::Debug for PluginUnderTest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginUnderTest")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// One case's registered instance with its caches.
pub struct Instance {
    pub actor: Actor,
    pub prepared: Arc<Prepared>,
    pub registration: Registration,
    pub kinds: KindRegistry,
    /// The subscription pairs, in the host's order: each informer spec and
    /// delivery filter (a subscription narrowed to N namespaces is N pairs).
    pub pairs: Vec<(InformerSpec, SubscriptionFilter)>,
    /// The pairs' caches (pairs with equal specs share one, as informers
    /// are shared in the host).
    caches: Vec<Cache>,
    /// `pairs[i]` reads `caches[pair_cache[i]]`.
    pair_cache: Vec<usize>,
    /// The plugin under test's, for its run's executor.
    pub telemetry: Telemetry,
}

impl std::fmt::Debug for Instance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Instance").finish_non_exhaustive()
    }
}

/// One detached informer and what it selects.
struct Cache {
    informer: Arc<Informer>,
    labels: LabelSelector,
    fields: FieldSelector,
}

impl Cache {
    /// Whether this cache holds `obj` (as the API server's list and watch
    /// for its spec would select it).
    fn selects(&self, obj: &KObject) -> bool {
        let spec = self.informer.spec();
        obj.gvk() == spec.kind.gvk
            && spec
                .namespace
                .as_deref()
                .is_none_or(|ns| obj.namespace() == Some(ns))
            && self.labels.matches(obj)
            && self.fields.matches(obj)
    }
}

impl PluginUnderTest {
    /// Reads the plugin and starts the engine (compile cache `cache_dir`,
    /// the host's default when `None`); its caches and actions count into
    /// `telemetry`.
    pub fn open(
        path: &Path,
        name: Option<String>,
        sidecar: Option<PathBuf>,
        cache_dir: Option<PathBuf>,
        harness: Harness,
        telemetry: Telemetry,
    ) -> Result<Self, PluginError> {
        let bytes = std::fs::read(path).map_err(|source| PluginError::Read {
            path: path.to_owned(),
            source,
        })?;
        if !bytes.starts_with(b"\0asm") {
            return Err(PluginError::NotWasm {
                path: path.to_owned(),
            });
        }
        let mut options = crate::runtime::EngineOptions::default();
        if cache_dir.is_some() {
            options.cache_dir = cache_dir;
        }
        let runtime = Runtime::new(options)?;
        let name = name.unwrap_or_else(|| {
            path.file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "plugin".into())
        });
        Ok(Self {
            name,
            path: path.to_owned(),
            bytes,
            runtime,
            default_sidecar: sidecar.or_else(|| Manifest::sidecar_path(path)),
            prepared: HashMap::new(),
            harness,
            telemetry,
        })
    }

    /// The version for `sidecar` (the default one when `None`): compiled,
    /// or loaded from the compile cache, once.
    pub fn prepared(&mut self, sidecar: Option<&Path>) -> Result<Arc<Prepared>, LoadError> {
        let sidecar = sidecar.map(Path::to_owned).or(self.default_sidecar.clone());
        if let Some(p) = self.prepared.get(&sidecar) {
            return Ok(p.clone());
        }
        let manifest = match &sidecar {
            Some(path) => Manifest::load(path)?,
            None => Manifest::default(),
        };
        // The first compiles (or loads from the compile cache); the others
        // reuse its component.
        let prepared = match self.prepared.values().next() {
            Some(base) => self.runtime.prepare_like(base, manifest)?,
            None => self.runtime.prepare(&self.name, &self.bytes, manifest)?,
        }
        .with_harness(self.harness.clone());
        let prepared = Arc::new(prepared);
        self.prepared.insert(sidecar, prepared.clone());
        Ok(prepared)
    }

    /// A fresh instance of `prepared`, registered with `config` (the
    /// sidecar's when `None`) and resolved against `kinds` as the host
    /// does; its caches are empty until [`Instance::sync`].
    pub fn start(
        &self,
        prepared: Arc<Prepared>,
        config: Option<String>,
        kinds: KindRegistry,
    ) -> Result<Instance, LoadError> {
        let config = config.unwrap_or_else(|| prepared.manifest.config_json());
        let actor =
            Actor::spawn(prepared.clone(), 0).map_err(|e| LoadError::Start(e.to_string()))?;
        let registration = actor
            .serve_blocking(move |c| c.register(config))
            .and_then(|r| r)
            .map_err(|e| LoadError::Register(e.to_string()))?;
        if let Some(kind) = crate::manager::unknown_kind(&kinds, &registration) {
            return Err(LoadError::UnknownKind(format!(
                "{kind} (add its CustomResourceDefinition to the fixture's cache)"
            )));
        }
        let resolved = crate::manager::resolve_subscriptions(
            &kinds,
            crate::dispatch::DispatchOptions::default().default_resync,
            &registration,
        )?;
        let (writes, write_kinds) = crate::manager::resolve_writes(&kinds, &registration)?;
        let grant = prepared.manifest.grant(&self.name);
        let pairs = crate::manager::narrow_to_grant(&grant, resolved, &write_kinds)?;

        let mut caches: Vec<Cache> = Vec::new();
        let mut pair_cache = Vec::new();
        let mut reads: HashMap<crate::kind::Gvk, Vec<CacheView>> = HashMap::new();
        for (spec, filter) in &pairs {
            let at = match caches.iter().position(|c| c.informer.spec() == spec) {
                Some(at) => at,
                None => {
                    let parse_err = |e: String| LoadError::BadRegistration(format!("{spec}: {e}"));
                    caches.push(Cache {
                        informer: Informer::detached(
                            spec.clone(),
                            self.telemetry
                                .metrics()
                                .informer(&spec.kind.resource_name()),
                        ),
                        labels: LabelSelector::parse(spec.label_selector.as_deref().unwrap_or(""))
                            .map_err(|e| parse_err(e.to_string()))?,
                        fields: FieldSelector::parse(spec.field_selector.as_deref().unwrap_or(""))
                            .map_err(|e| parse_err(e.to_string()))?,
                    });
                    caches.len() - 1
                }
            };
            pair_cache.push(at);
            let views = reads.entry(filter.kind.clone()).or_default();
            let view = caches[at].informer.view();
            if !views.iter().any(|v| v.id() == view.id()) {
                views.push(view);
            }
        }
        let mut indexes: HashMap<String, Vec<(CacheView, String)>> = HashMap::new();
        for idx in &registration.indexes {
            let fail = |m: String| LoadError::BadRegistration(format!("index {:?}: {m}", idx.name));
            let kind = kinds.resolve(&idx.kind).map_err(|e| fail(e.to_string()))?;
            if !reads.contains_key(&kind.gvk) {
                return Err(fail(format!("{} is not subscribed", kind.resource_name())));
            }
            let on = indexes.entry(idx.name.clone()).or_default();
            for cache in caches
                .iter()
                .filter(|c| c.informer.spec().kind.gvk == kind.gvk)
            {
                cache.informer.store().add_index(&idx.name, &idx.pointer);
                on.push((cache.informer.view(), idx.name.clone()));
            }
        }
        actor.set_scope(Arc::new(PluginScope {
            kinds: kinds.clone(),
            reads,
            indexes,
            writes,
            grant,
        }));
        Ok(Instance {
            actor,
            prepared,
            registration,
            kinds,
            pairs,
            caches,
            pair_cache,
            telemetry: self.telemetry.clone(),
        })
    }
}

impl Instance {
    /// Makes every cache hold what the cluster's list would give it now.
    pub fn sync(&self, cluster: &SimCluster) {
        let objects: Vec<crate::object::ObjectHandle> = cluster
            .objects()
            .into_iter()
            .filter_map(|(_, v)| KObject::from_value(v, StripOptions::default()).ok())
            .map(Arc::new)
            .collect();
        for cache in &self.caches {
            let store = cache.informer.store();
            let mut keep = std::collections::HashSet::new();
            for obj in objects.iter().filter(|o| cache.selects(o)) {
                let key = obj.key();
                let same = store.get(&key).is_some_and(|old| *old == **obj);
                if !same {
                    store.upsert(obj.clone());
                }
                keep.insert(key);
            }
            for old in store.snapshot().iter() {
                if !keep.contains(&old.key()) {
                    store.remove(&old.key());
                }
            }
        }
    }

    /// Whether pair `pair`'s cache selects `obj`.
    pub fn pair_selects(&self, pair: usize, obj: &KObject) -> bool {
        self.caches[self.pair_cache[pair]].selects(obj)
    }

    /// Pair `pair`'s cached state of `key`.
    pub fn cached(&self, pair: usize, key: &ObjectKey) -> Option<crate::object::ObjectHandle> {
        self.caches[self.pair_cache[pair]].informer.store().get(key)
    }

    /// Pair `pair`'s cached objects, by namespace and name.
    pub fn cached_all(&self, pair: usize) -> Vec<crate::object::ObjectHandle> {
        let mut all: Vec<_> = self.caches[self.pair_cache[pair]]
            .informer
            .store()
            .snapshot()
            .iter()
            .cloned()
            .collect();
        all.sort_by_key(|a| a.key());
        all
    }
}
