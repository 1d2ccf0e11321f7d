//! Loading, replacing and unloading plugin versions: a new version is
//! compiled, registered and subscribed (receiving the cache as initial
//! deltas) before the old one stops, so nothing is missed across a swap:
//! the old version delivers only what it received before the new one
//! subscribed, and hands the deletes it had not handled (waiting,
//! retrying) and the plugin's dead deletes to the new version, ahead of
//! its replay. Everything else it held is in the replay or the new
//! version's own stream.
//! Gaining leadership takes the same path without recompiling: every
//! running version is resubscribed, receiving the cache again. A version
//! served by the fast compile tier is replaced the same way by its
//! optimized code once that is compiled (see [`tier_up`]).
//!
//! A running version, its subscriptions and how it stops are
//! `version.rs`'s; starting one (instances, subscriptions, indexes, its
//! dispatcher) `start.rs`'s; the swap that hands the old version's
//! unhandled deletes to the new one `swap.rs`'s; checking a registration
//! against the kinds and the sidecar's grant `resolve.rs`'s; compiling a
//! fast-tier version's optimized code in the background and swapping it in
//! `tier_up.rs`'s.

mod resolve;
mod start;
mod swap;
mod tier_up;
mod version;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;

use crate::actions::executor::Executor;
use crate::dispatch::{Activity, DispatchOptions, PluginStats};
use crate::informer::InformerSet;
use crate::kind::{KindDiscovery, KindRegistry};
use crate::leader::Leadership;
use crate::origin::{Origin, Origins};
use crate::runtime::{CompileSource, Content, LoadError, Manifest, Prepared, Runtime, Tier};
use crate::telemetry::Telemetry;
pub use resolve::{narrow_to_grant, resolve_subscriptions, resolve_writes, unknown_kind};
pub use version::PluginVersion;

/// How a version was loaded, for logs and the benchmark.
#[derive(Debug, Clone)]
pub struct LoadInfo {
    pub compile_source: CompileSource,
    /// Which compiler made the code this version runs.
    pub tier: Tier,
    pub compile_time: Duration,
    /// Instantiation plus `register` on every instance.
    pub start_time: Duration,
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
    /// One swap of a plugin at a time (an install, a tier-up, an unload),
    /// by plugin name.
    swaps: parking_lot::Mutex<HashMap<String, Arc<Mutex<()>>>>,
    tier_ups: tier_up::TierUps,
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
            swaps: parking_lot::Mutex::default(),
            tier_ups: tier_up::TierUps::default(),
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

    /// The leadership gate deliveries follow (its shards too).
    pub fn leadership(&self) -> &Leadership {
        &self.leadership
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
    /// and hands over what it did not handle (see the module doc). A
    /// version served by the fast tier gets its optimized code in the
    /// background (see [`tier_up`]).
    pub async fn install(
        self: &Arc<Self>,
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
        self: &Arc<Self>,
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
        let content = content.into();
        let swap = self.swap_lock(name);
        let _swapping = swap.lock().await;
        let result = self
            .swap_in(
                name,
                Load::Content(content.clone(), Box::new(manifest.clone())),
            )
            .await;
        let version = match result {
            Ok(version) => version,
            Err(e) => {
                // A first load that failed leaves nothing serving: the name
                // is free again.
                if claimed {
                    self.origins.release(name, &origin);
                }
                return Err(e);
            }
        };
        // The previous version's tier-up, if any, is moot.
        self.tier_ups.cancel(name);
        if version.tier() == Tier::Fast {
            self.spawn_tier_up(name, &version, content, manifest);
        }
        Ok(version)
    }

    /// Serialises the swaps of plugin `name`.
    fn swap_lock(&self, name: &str) -> Arc<Mutex<()>> {
        self.swaps
            .lock()
            .entry(name.to_owned())
            .or_default()
            .clone()
    }

    /// Which source each plugin name belongs to.
    pub fn origins(&self) -> &Origins {
        &self.origins
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
        let swap = self.swap_lock(name);
        let _swapping = swap.lock().await;
        self.tier_ups.cancel(name);
        let old = self.plugins.lock().await.remove(name);
        if let Some(origin) = self.origins.holder(name) {
            self.origins.release(name, &origin);
        }
        match old {
            Some(old) => {
                old.stop_for_good(&self.informers).await;
                self.telemetry.metrics().plugin_fast_tier(name, None);
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
        self.tier_ups.stop().await;
        let all: Vec<_> = std::mem::take(&mut *self.plugins.lock().await)
            .into_values()
            .collect();
        // In parallel, under one grace: a plugin slow to drain does not
        // delay the others' stop.
        futures::future::join_all(all.iter().map(|p| p.stop_for_good(&self.informers))).await;
    }
}

/// What a new version is started from.
enum Load {
    /// A plugin's content and sidecar, to compile (or load from the cache).
    Content(Content, Box<Manifest>),
    /// Code already compiled (a tier-up's optimized code).
    Prepared(Arc<Prepared>),
}
