//! The host side of the imports a plugin sees, independent of the WIT
//! version: object views, cache reads, buffered actions, logging and the
//! clock. `v0_1` and `v0_2` translate each version's types to these.
//!
//! This file holds the instance's state and what every import shares (its
//! scope, the kinds it resolved, the grant check); the guest's handles are
//! `handles.rs`'s, cache reads `cache.rs`'s, buffered actions
//! `actions.rs`'s, logging `log.rs`'s, the clock `clock.rs`'s, and the
//! memory limiter `limiter.rs`'s.

mod actions;
mod cache;
mod clock;
mod handles;
mod limiter;
mod log;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::access::{Grant, Verb};
use super::limits::{CallCaps, Cap, CapExceeded, StoreCaps};
use super::network::{GuardedLookupView, LookupPolicy};
use crate::actions::Action;
use crate::informer::selector::LabelSelector;
use crate::informer::{CacheView, Snapshot};
use crate::kind::{Gvk, KindInfo, KindRef, KindRegistry};
use crate::object::ObjectKey;
pub use limiter::MemoryLimiter;

/// What one registered plugin version may read and write.
#[derive(Debug, Default)]
pub struct PluginScope {
    pub kinds: KindRegistry,
    /// Readable kinds, each served by the informers of all the plugin's
    /// subscriptions to it (other namespaces or selectors: other caches).
    pub reads: HashMap<Gvk, Vec<CacheView>>,
    /// Declared index name -> (informer, the store's index name), one per
    /// cache of the index's kind.
    pub indexes: HashMap<String, Vec<(CacheView, String)>>,
    pub writes: HashSet<Gvk>,
    /// The operator's grant from the sidecar: every read and action is
    /// checked against it as well as against the registration.
    pub grant: Grant,
}

/// The Namespace kind, whose cache a namespaceSelector grant is evaluated on.
fn namespace_gvk() -> Gvk {
    Gvk::new("", "v1", "Namespace")
}

/// Why a cache read was refused (each WIT version has its own spelling).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadError {
    NotSubscribed(String),
    UnknownIndex(String),
    InvalidSelector(String),
    /// The sidecar's access list does not grant it.
    Forbidden(String),
}

/// Why an action was refused when the plugin emitted it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteError {
    NotDeclared(String),
    Invalid(String),
    /// The sidecar's access list does not grant it.
    Forbidden(String),
}

/// The object an action names, as the plugin gave it.
#[derive(Debug, Clone)]
pub struct ObjRef {
    pub kind: KindRef,
    pub namespace: Option<String>,
    pub name: String,
    /// The regarding uid of an Event (not a precondition).
    pub uid: Option<String>,
}
/// The store data of one plugin instance.
pub struct HostState {
    pub plugin: Arc<str>,
    /// `<plugin>@<version>`: who reports the plugin's Events.
    pub reporter: Arc<str>,
    wasi: WasiCtx,
    table: ResourceTable,
    pub limiter: MemoryLimiter,
    pub scope: Option<Arc<PluginScope>>,
    /// Snapshots taken during the current call: one consistent state per
    /// cache for the whole call (keyed by the informer's address; a call
    /// reads a few caches, so a list beats a hash map).
    snapshots: Vec<(usize, Snapshot)>,
    /// Kinds this instance resolved, valid for the registry and generation
    /// in `kinds_for`: a plugin names the same few kinds on every call, and
    /// resolving one walks the registry under a lock and copies its strings.
    kinds: Vec<(KindRef, Arc<KindInfo>)>,
    kinds_for: Option<(KindRegistry, u64)>,
    pub actions: Vec<Action>,
    /// The guest's captured stdout/stderr (no stdio grant).
    pub output: Option<super::stdio::GuestOutput>,
    /// The names the guest may look up (its network grant's).
    pub lookup: LookupPolicy,
    lookup_refused_logged: bool,
    /// The sidecar's caps on handles, actions and log bytes.
    pub caps: CallCaps,
    /// Object handles pushed and not yet dropped.
    live_handles: usize,
    /// `log` bytes written in the current call.
    log_bytes: u64,
    /// JSON bytes of the current call's applied objects and patches.
    action_bytes: u64,
    /// The first cap the current call went over: the call fails with it.
    pub cap_hit: Option<CapExceeded>,
    /// When the current call's deadline passes (sleeps are cut there).
    pub deadline: Option<std::time::Instant>,
    /// A wait of the current call was cut at the deadline: the call fails
    /// as a timeout.
    pub wait_cut: bool,
    /// A test harness's clock and log capture (`kubewasm test`).
    pub harness: Option<super::harness::Harness>,
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl HostState {
    pub fn new(plugin: Arc<str>, version: &str, wasi: WasiCtx, memory_limit: usize) -> Self {
        Self {
            reporter: Arc::from(format!("{plugin}@{version}")),
            plugin,
            wasi,
            table: ResourceTable::new(),
            limiter: MemoryLimiter {
                limit: memory_limit,
                exceeded: false,
                used: 0,
                caps: StoreCaps::default(),
            },
            scope: None,
            snapshots: Vec::new(),
            kinds: Vec::new(),
            kinds_for: None,
            actions: Vec::new(),
            output: None,
            lookup: LookupPolicy::default(),
            lookup_refused_logged: false,
            caps: CallCaps::default(),
            live_handles: 0,
            log_bytes: 0,
            action_bytes: 0,
            cap_hit: None,
            deadline: None,
            wait_cut: false,
            harness: None,
        }
    }

    /// What `wasi:sockets/ip-name-lookup` calls see (see
    /// [`super::network::GuardedLookup`]).
    pub fn lookup_view(&mut self) -> GuardedLookupView<'_> {
        GuardedLookupView {
            plugin: &self.plugin,
            policy: &self.lookup,
            refused_logged: &mut self.lookup_refused_logged,
            sockets: wasmtime_wasi::sockets::WasiSocketsCtxView {
                ctx: self.wasi.sockets(),
                table: &mut self.table,
            },
        }
    }

    /// Resets per-call state.
    pub fn begin_call(&mut self) {
        self.snapshots.clear();
        self.actions.clear();
        self.log_bytes = 0;
        self.action_bytes = 0;
        self.cap_hit = None;
        self.wait_cut = false;
    }

    /// Records that the call went over `cap` (the first cap hit wins).
    fn exceeded(&mut self, cap: Cap) -> CapExceeded {
        let e = CapExceeded {
            cap,
            limit: self.caps.value(cap),
        };
        self.cap_hit.get_or_insert_with(|| e.clone());
        e
    }
    fn scope(&self) -> Result<Arc<PluginScope>, String> {
        self.scope
            .clone()
            .ok_or_else(|| "the cache and actions are not available during register".to_owned())
    }

    /// `kind` resolved in `scope`'s registry, remembered until the registry
    /// changes.
    fn resolve(&mut self, scope: &PluginScope, kind: &KindRef) -> Result<Arc<KindInfo>, String> {
        let generation = scope.kinds.generation();
        let valid = self
            .kinds_for
            .as_ref()
            .is_some_and(|(reg, g)| reg.same(&scope.kinds) && *g == generation);
        if !valid {
            self.kinds.clear();
            self.kinds_for = Some((scope.kinds.clone(), generation));
        }
        if let Some((_, info)) = self.kinds.iter().find(|(k, _)| k == kind) {
            return Ok(info.clone());
        }
        let info = Arc::new(scope.kinds.resolve(kind).map_err(|e| e.to_string())?);
        // Bounded: a plugin naming kinds without end resolves the rest anew.
        if self.kinds.len() < 64 {
            self.kinds.push((kind.clone(), info.clone()));
        }
        Ok(info)
    }
    /// Checks `verb` on `kind` in `namespace` against the grant; a
    /// namespaceSelector is evaluated on the call's snapshot of the
    /// plugin's Namespace cache.
    fn granted(
        &mut self,
        scope: &PluginScope,
        kind: &KindInfo,
        verb: Verb,
        namespace: Option<&str>,
    ) -> Result<(), String> {
        let namespaces: Vec<Snapshot> = if scope.grant.uses_selector() {
            scope
                .reads
                .get(&namespace_gvk())
                .map(|is| is.iter().map(|i| self.snapshot_of(i)).collect())
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        let matcher = |sel: &LabelSelector, ns: &str| {
            if namespaces.is_empty() {
                return None;
            }
            let key = ObjectKey::new(None, ns);
            Some(
                namespaces
                    .iter()
                    .find_map(|s| s.get(&key))
                    .is_some_and(|o| sel.matches(&o)),
            )
        };
        scope
            .grant
            .check(kind, verb, namespace, &matcher)
            .map_err(|d| d.0)
    }
}
