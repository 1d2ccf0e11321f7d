//! The host side of the imports a plugin sees, independent of the WIT
//! version: object views, cache reads, buffered actions, logging and the
//! clock. `v0_1` and `v0_2` translate each version's types to these.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde_json::Value;
use wasmtime::component::{Resource, ResourceTable};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::access::{Grant, Verb};
use super::limits::{CallCaps, Cap, CapExceeded, StoreCaps};
use super::network::{GuardedLookupView, LookupPolicy};
use crate::actions::{Action, EventType, PatchType, Preconditions, Propagation, Target};
use crate::informer::selector::LabelSelector;
use crate::informer::{CacheView, Snapshot};
use crate::kind::{Gvk, KindInfo, KindRef, KindRegistry};
use crate::object::{ObjectHandle, ObjectKey};

/// The largest request body the API server accepts (its
/// `MaxRequestBodyBytes`, 3 MiB): an action larger than this could never
/// be executed, so it is refused before it is parsed.
const MAX_REQUEST_BYTES: usize = 3 << 20;

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

/// Enforces the instance's memory cap (over all its linear memories
/// together: a component may define several) and the host's ceiling on the
/// core instances, memories and tables it creates; remembers when the
/// memory cap was hit.
#[derive(Debug)]
pub struct MemoryLimiter {
    pub limit: usize,
    pub exceeded: bool,
    /// Bytes of every linear memory of the store (memories only grow, and
    /// live as long as the store).
    pub used: usize,
    pub caps: StoreCaps,
}

impl wasmtime::ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let total = self.used.saturating_sub(current).saturating_add(desired);
        if total > self.limit {
            self.exceeded = true;
            return Err(wasmtime::format_err!(
                "plugin memory limit exceeded: its memories would take {total} bytes (one growing from {current} to {desired}), limit is {} bytes; raise limits.memory in the plugin's sidecar if this is expected",
                self.limit
            ));
        }
        self.used = total;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 1_000_000)
    }

    fn instances(&self) -> usize {
        self.caps.instances
    }

    fn memories(&self) -> usize {
        self.caps.memories
    }

    fn tables(&self) -> usize {
        self.caps.tables
    }
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

    /// A handle on `obj` for the guest. Over `limits.handles` this traps:
    /// the instance, and every handle it leaked, is then discarded.
    pub fn push_object(&mut self, obj: ObjectHandle) -> wasmtime::Result<Resource<ObjectHandle>> {
        self.push_handle(obj)
    }

    /// Any resource the guest holds a handle on (objects, selectors),
    /// counted against `limits.handles`.
    pub(super) fn push_handle<T: Send + 'static>(
        &mut self,
        value: T,
    ) -> wasmtime::Result<Resource<T>> {
        if self.live_handles >= self.caps.handles {
            let e = self.exceeded(Cap::Handles);
            return Err(wasmtime::format_err!("plugin exceeded {e}"));
        }
        let r = self.table.push(value)?;
        self.live_handles += 1;
        Ok(r)
    }

    /// The value behind a handle the guest holds.
    pub(super) fn handle_value<T: 'static>(&self, r: &Resource<T>) -> wasmtime::Result<&T> {
        Ok(self.table.get(r)?)
    }

    /// Drops a handle the guest let go of.
    pub(super) fn drop_handle<T: 'static>(&mut self, r: Resource<T>) -> wasmtime::Result<()> {
        self.table.delete(r)?;
        self.live_handles = self.live_handles.saturating_sub(1);
        Ok(())
    }

    /// Buffers an action of the current call; over `limits.actionsPerCall`
    /// the guest gets an error and the call fails.
    fn push_action(&mut self, action: Action) -> Result<(), WriteError> {
        if self.actions.len() >= self.caps.actions_per_call {
            let e = self.exceeded(Cap::ActionsPerCall);
            return Err(WriteError::Invalid(format!("plugin exceeded {e}")));
        }
        self.actions.push(action);
        Ok(())
    }

    /// Counts `json`, an applied object or a patch, against the call's
    /// `limits.actionBytesPerCall` before it is parsed (parsed JSON takes
    /// several times its text in host memory), and refuses one larger than
    /// the API server accepts in a request.
    fn charge_action_bytes(&mut self, what: &str, json: &str) -> Result<(), WriteError> {
        if json.len() > MAX_REQUEST_BYTES {
            return Err(WriteError::Invalid(format!(
                "{what} is {} bytes; the API server refuses requests over {MAX_REQUEST_BYTES} bytes",
                json.len()
            )));
        }
        self.action_bytes = self.action_bytes.saturating_add(json.len() as u64);
        if self.action_bytes > self.caps.action_bytes_per_call {
            let e = self.exceeded(Cap::ActionBytesPerCall);
            return Err(WriteError::Invalid(format!("plugin exceeded {e}")));
        }
        Ok(())
    }

    pub(super) fn object(&self, r: &Resource<ObjectHandle>) -> wasmtime::Result<&ObjectHandle> {
        self.handle_value(r)
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

    /// The call's snapshot of a cache (one per cache per call).
    fn snapshot_of(&mut self, cache: &CacheView) -> Snapshot {
        let id = cache.id();
        if let Some((_, s)) = self.snapshots.iter().find(|(i, _)| *i == id) {
            return s.clone();
        }
        let s = cache.snapshot();
        self.snapshots.push((id, s.clone()));
        s
    }

    /// The call's snapshots of every cache of `kind`, after checking that
    /// the grant lets the plugin read `namespace` (`None`: the whole cache,
    /// which the grant already narrowed at registration).
    fn snapshot_for(
        &mut self,
        kind: &KindRef,
        namespace: Option<&str>,
    ) -> Result<(Arc<KindInfo>, Vec<Snapshot>), ReadError> {
        let scope = self.scope().map_err(ReadError::NotSubscribed)?;
        let info = self
            .resolve(&scope, kind)
            .map_err(ReadError::NotSubscribed)?;
        let informers = scope.reads.get(&info.gvk).ok_or_else(|| {
            ReadError::NotSubscribed(format!(
                "{} is not among this plugin's subscriptions; add a subscription (with no delta types for read-only access)",
                info.resource_name()
            ))
        })?;
        let namespace = namespace.filter(|_| info.namespaced);
        if namespace.is_some() || !info.namespaced {
            self.granted(&scope, &info, Verb::Read, namespace)
                .map_err(ReadError::Forbidden)?;
        }
        let snaps = informers.iter().map(|i| self.snapshot_of(i)).collect();
        Ok((info, snaps))
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
                    .is_some_and(|o| sel.matches(o.meta())),
            )
        };
        scope
            .grant
            .check(kind, verb, namespace, &matcher)
            .map_err(|d| d.0)
    }

    fn push_all(
        &mut self,
        objs: Vec<ObjectHandle>,
    ) -> wasmtime::Result<Vec<Resource<ObjectHandle>>> {
        objs.into_iter().map(|o| self.push_object(o)).collect()
    }

    /// The checked target of `verb`: a write verb needs the kind in the
    /// registration's writes; every verb needs the sidecar's grant for the
    /// object's namespace.
    fn target(
        &mut self,
        r: ObjRef,
        verb: Verb,
        preconditions: Preconditions,
    ) -> Result<Target, WriteError> {
        let scope = self.scope().map_err(WriteError::Invalid)?;
        let kind = self.resolve(&scope, &r.kind).map_err(WriteError::Invalid)?;
        if verb != Verb::Events && !scope.writes.contains(&kind.gvk) {
            return Err(WriteError::NotDeclared(format!(
                "{} is not in this plugin's registration writes",
                kind.resource_name()
            )));
        }
        if r.name.is_empty() {
            return Err(WriteError::Invalid("object name is empty".into()));
        }
        let namespace = r.namespace.filter(|n| !n.is_empty());
        if kind.namespaced != namespace.is_some() {
            return Err(WriteError::Invalid(format!(
                "{} is {}, so a namespace must {}be given",
                kind.resource_name(),
                if kind.namespaced {
                    "namespaced"
                } else {
                    "cluster-scoped"
                },
                if kind.namespaced { "" } else { "not " }
            )));
        }
        crate::names::validate_object(&kind.gvk.kind, namespace.as_deref(), &r.name).map_err(
            |e| {
                WriteError::Invalid(format!(
                    "{} {}{}: {e}",
                    kind.resource_name(),
                    namespace
                        .as_deref()
                        .map(|n| format!("{n}/"))
                        .unwrap_or_default(),
                    r.name
                ))
            },
        )?;
        self.granted(&scope, &kind, verb, namespace.as_deref())
            .map_err(WriteError::Forbidden)?;
        Ok(Target {
            kind,
            namespace,
            name: r.name,
            uid: r.uid,
            preconditions,
        })
    }

    /// Buffers a server-side apply of `object_json`.
    #[tracing::instrument(level = "debug", skip_all, fields(plugin = %self.plugin, kind = tracing::field::Empty, namespace = tracing::field::Empty, name = tracing::field::Empty))]
    pub(super) fn apply_action(
        &mut self,
        object_json: &str,
        force: bool,
        status: bool,
        preconditions: Preconditions,
    ) -> Result<(), WriteError> {
        self.charge_action_bytes("the applied object", object_json)?;
        let object: Value = serde_json::from_str(object_json)
            .map_err(|e| WriteError::Invalid(format!("object is not valid JSON: {e}")))?;
        let field = |p: &str| object.pointer(p).and_then(Value::as_str).map(str::to_owned);
        let (Some(api_version), Some(kind), Some(name)) = (
            field("/apiVersion"),
            field("/kind"),
            field("/metadata/name"),
        ) else {
            return Err(WriteError::Invalid(
                "an applied object needs apiVersion, kind and metadata.name".into(),
            ));
        };
        let span = tracing::Span::current();
        span.record("kind", kind.as_str());
        span.record("namespace", field("/metadata/namespace").as_deref());
        span.record("name", name.as_str());
        let target = self.target(
            ObjRef {
                kind: KindRef::Gvk(Gvk::from_api_version(&api_version, &kind)),
                namespace: field("/metadata/namespace"),
                name,
                uid: None,
            },
            if status { Verb::Status } else { Verb::Apply },
            preconditions,
        )?;
        self.push_action(Action::Apply {
            target,
            object,
            force,
            status,
        })
    }

    /// Buffers a patch; its JSON must fit its type.
    #[tracing::instrument(level = "debug", skip_all, fields(plugin = %self.plugin, kind = ?target.kind, namespace = target.namespace.as_deref(), name = %target.name))]
    pub(super) fn patch_action(
        &mut self,
        target: ObjRef,
        patch_type: PatchType,
        patch: &str,
        preconditions: Preconditions,
    ) -> Result<(), WriteError> {
        let target = self.target(target, Verb::Patch, preconditions)?;
        self.charge_action_bytes("the patch", patch)?;
        let patch: Value = serde_json::from_str(patch)
            .map_err(|e| WriteError::Invalid(format!("patch is not valid JSON: {e}")))?;
        match patch_type {
            PatchType::Merge if !patch.is_object() => {
                return Err(WriteError::Invalid(
                    "a merge patch must be a JSON object".into(),
                ));
            }
            PatchType::Json if !patch.is_array() => {
                return Err(WriteError::Invalid(
                    "a JSON patch must be an array of operations".into(),
                ));
            }
            _ => {}
        }
        self.push_action(Action::Patch {
            target,
            patch_type,
            patch,
        })
    }

    /// Buffers a delete.
    #[tracing::instrument(level = "debug", skip_all, fields(plugin = %self.plugin, kind = ?target.kind, namespace = target.namespace.as_deref(), name = %target.name))]
    pub(super) fn delete_action(
        &mut self,
        target: ObjRef,
        propagation: Propagation,
        preconditions: Preconditions,
    ) -> Result<(), WriteError> {
        let target = self.target(target, Verb::Delete, preconditions)?;
        self.push_action(Action::Delete {
            target,
            propagation,
        })
    }

    /// Buffers an Event about `regarding`.
    #[tracing::instrument(level = "debug", skip_all, fields(plugin = %self.plugin, kind = ?regarding.kind, namespace = regarding.namespace.as_deref(), name = %regarding.name))]
    pub(super) fn event_action(
        &mut self,
        regarding: ObjRef,
        event_type: EventType,
        reason: String,
        note: String,
    ) -> Result<(), WriteError> {
        if reason.is_empty() || reason.len() > 128 {
            return Err(WriteError::Invalid(
                "an Event reason must be 1 to 128 characters (UpperCamelCase by convention)".into(),
            ));
        }
        let regarding = self.target(regarding, Verb::Events, Preconditions::default())?;
        self.push_action(Action::Event {
            regarding,
            event_type,
            reason,
            // The API server caps Event notes at 1 KiB.
            note: note.chars().take(1024).collect(),
            reporter: self.reporter.clone(),
        })
    }

    /// One object of a readable kind, from the call's snapshot.
    #[tracing::instrument(level = "trace", skip_all, fields(plugin = %self.plugin, kind = ?kind, namespace = namespace, name = name))]
    pub(super) fn cache_get(
        &mut self,
        kind: &KindRef,
        namespace: Option<&str>,
        name: &str,
    ) -> wasmtime::Result<Result<Option<Resource<ObjectHandle>>, ReadError>> {
        let (info, snaps) = match self.snapshot_for(kind, namespace) {
            Ok(v) => v,
            Err(e) => return Ok(Err(e)),
        };
        let ns = if info.namespaced { namespace } else { None };
        let key = ObjectKey::new(ns, name);
        match snaps.iter().find_map(|s| s.get(&key)) {
            Some(o) => Ok(Ok(Some(self.push_object(o)?))),
            None => Ok(Ok(None)),
        }
    }

    /// Objects of a readable kind, optionally in one namespace and
    /// matching a label selector.
    #[tracing::instrument(level = "trace", skip_all, fields(plugin = %self.plugin, kind = ?kind, namespace = namespace))]
    pub(super) fn cache_list(
        &mut self,
        kind: &KindRef,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> wasmtime::Result<Result<Vec<Resource<ObjectHandle>>, ReadError>> {
        let ns = namespace.filter(|n| !n.is_empty());
        let (_, snaps) = match self.snapshot_for(kind, ns) {
            Ok(v) => v,
            Err(e) => return Ok(Err(e)),
        };
        let selector = match LabelSelector::parse(label_selector.unwrap_or("")) {
            Ok(s) => s,
            Err(e) => return Ok(Err(ReadError::InvalidSelector(e.to_string()))),
        };
        let objs = merge(snaps.iter().map(|s| s.list(ns, &selector)));
        Ok(Ok(self.push_all(objs)?))
    }

    /// Objects a declared index maps `value` to.
    #[tracing::instrument(level = "trace", skip_all, fields(plugin = %self.plugin, index = index, value = value))]
    pub(super) fn cache_by_index(
        &mut self,
        index: &str,
        value: &str,
    ) -> wasmtime::Result<Result<Vec<Resource<ObjectHandle>>, ReadError>> {
        let scope = match self.scope() {
            Ok(s) => s,
            Err(e) => return Ok(Err(ReadError::UnknownIndex(e))),
        };
        let Some(caches) = scope.indexes.get(index) else {
            return Ok(Err(ReadError::UnknownIndex(format!(
                "no index {index:?} was declared at registration"
            ))));
        };
        let found: Vec<Vec<ObjectHandle>> = caches
            .iter()
            .map(|(informer, store_index)| {
                self.snapshot_of(informer)
                    .by_index(store_index, value)
                    .unwrap_or_default()
            })
            .collect();
        let objs = merge(found);
        Ok(Ok(self.push_all(objs)?))
    }

    /// Whether a plugin log record at `level` would be written (under a
    /// test harness every record is captured).
    pub(super) fn log_enabled(&self, level: tracing::Level) -> bool {
        if self.harness.is_some() {
            return true;
        }
        match level {
            tracing::Level::TRACE => tracing::enabled!(target: "plugin", tracing::Level::TRACE),
            tracing::Level::DEBUG => tracing::enabled!(target: "plugin", tracing::Level::DEBUG),
            tracing::Level::INFO => tracing::enabled!(target: "plugin", tracing::Level::INFO),
            tracing::Level::WARN => tracing::enabled!(target: "plugin", tracing::Level::WARN),
            _ => tracing::enabled!(target: "plugin", tracing::Level::ERROR),
        }
    }

    /// Writes a plugin log record, within `limits.logBytesPerCall`.
    pub(super) fn log_write(
        &mut self,
        level: tracing::Level,
        message: &str,
        fields: &[(String, String)],
    ) {
        let size = message.len() + fields.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>();
        self.log_bytes = self.log_bytes.saturating_add(size as u64);
        if self.log_bytes > self.caps.log_bytes_per_call {
            // Dropped: the call fails with the cap once it returns.
            if self.cap_hit.is_none() {
                let e = self.exceeded(Cap::LogBytesPerCall);
                tracing::warn!(target: "plugin", plugin = &*self.plugin, "log records dropped: plugin exceeded {e}");
            }
            return;
        }
        if let Some(h) = &self.harness {
            h.log(super::harness::LogLine {
                level: level_name(level),
                message: message.to_owned(),
                fields: fields.to_vec(),
            });
            return;
        }
        let fields: String = fields
            .iter()
            .map(|(k, v)| format!("{k}={v:?}"))
            .collect::<Vec<_>>()
            .join(" ");
        let plugin = &*self.plugin;
        match level {
            tracing::Level::TRACE => tracing::trace!(target: "plugin", plugin, fields, "{message}"),
            tracing::Level::DEBUG => tracing::debug!(target: "plugin", plugin, fields, "{message}"),
            tracing::Level::INFO => tracing::info!(target: "plugin", plugin, fields, "{message}"),
            tracing::Level::WARN => tracing::warn!(target: "plugin", plugin, fields, "{message}"),
            _ => tracing::error!(target: "plugin", plugin, fields, "{message}"),
        }
    }
}

fn level_name(level: tracing::Level) -> &'static str {
    match level {
        tracing::Level::TRACE => "TRACE",
        tracing::Level::DEBUG => "DEBUG",
        tracing::Level::INFO => "INFO",
        tracing::Level::WARN => "WARN",
        _ => "ERROR",
    }
}

impl HostState {
    /// Now, as the plugin sees it: the system's time, or a test harness's.
    fn clock_now(&self) -> std::time::SystemTime {
        self.harness
            .as_ref()
            .map_or_else(std::time::SystemTime::now, super::harness::Harness::now)
    }

    /// Wall-clock time since the Unix epoch: (seconds, nanoseconds).
    pub(super) fn clock_parts(&self) -> (i64, u32) {
        let d = self
            .clock_now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        (
            i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            d.subsec_nanos(),
        )
    }

    /// Now as RFC 3339 with seconds precision.
    pub(super) fn clock_rfc3339(&self) -> String {
        humantime::format_rfc3339_seconds(self.clock_now()).to_string()
    }
}

/// The objects of several caches of one kind, each once (caches with
/// overlapping selections hold the same object).
fn merge(lists: impl IntoIterator<Item = Vec<ObjectHandle>>) -> Vec<ObjectHandle> {
    let mut lists = lists.into_iter();
    let Some(mut out) = lists.next() else {
        return Vec::new();
    };
    let mut rest = lists.peekable();
    if rest.peek().is_none() {
        return out;
    }
    let mut seen: HashSet<ObjectKey> = out.iter().map(|o| o.key()).collect();
    for list in rest {
        for o in list {
            if seen.insert(o.key()) {
                out.push(o);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Records each new span's name and fields.
    #[derive(Clone, Default)]
    struct Spans(Arc<parking_lot::Mutex<Vec<String>>>);

    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Spans {
        fn on_new_span(
            &self,
            attrs: &tracing::span::Attributes<'_>,
            _: &tracing::span::Id,
            _: tracing_subscriber::layer::Context<'_, S>,
        ) {
            struct Fields(String);
            impl tracing::field::Visit for Fields {
                fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
                    self.0.push_str(&format!(" {}={v:?}", f.name()));
                }
            }
            let mut fields = Fields(attrs.metadata().name().to_owned());
            attrs.record(&mut fields);
            self.0.lock().push(fields.0);
        }
    }

    /// A trace shows each guest call into the host, named for the plugin
    /// and what it asked, without its arguments' bulk.
    #[test]
    fn host_functions_open_a_span_with_the_plugin_and_the_object() {
        use tracing_subscriber::layer::SubscriberExt;
        let spans = Spans::default();
        let subscriber = tracing_subscriber::registry()
            .with(spans.clone())
            .with(tracing_subscriber::filter::LevelFilter::TRACE);
        tracing::subscriber::with_default(subscriber, || {
            let wasi = wasmtime_wasi::WasiCtx::builder().build();
            let mut h = HostState::new(Arc::from("labeler"), "v1", wasi, 1 << 20);
            let _ = h.cache_by_index("by-owner", "web");
            let _ = h.delete_action(
                ObjRef {
                    kind: KindRef::Gvk(Gvk::from_api_version("v1", "ConfigMap")),
                    namespace: Some("default".into()),
                    name: "web".into(),
                    uid: None,
                },
                Propagation::Background,
                Preconditions::default(),
            );
        });
        let spans = spans.0.lock().clone();
        assert_eq!(
            spans[0],
            r#"cache_by_index plugin=labeler index="by-owner" value="web""#
        );
        assert!(
            spans[1].starts_with("delete_action plugin=labeler kind=")
                && spans[1].ends_with(r#" namespace="default" name=web"#),
            "{spans:?}"
        );
    }

    fn widgets_crd(versions: &[&str]) -> Value {
        let versions: Vec<Value> = versions
            .iter()
            .map(|v| serde_json::json!({"name": v}))
            .collect();
        serde_json::json!({"spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"kind": "Widget", "plural": "widgets"}, "versions": versions}})
    }

    /// The memo of resolved kinds never answers for a registry that has
    /// changed: a kind learned, a preferred version moved, another registry.
    #[test]
    fn resolved_kinds_follow_the_registry() {
        let kinds = KindRegistry::builtin();
        let scope = |kinds: &KindRegistry| PluginScope {
            kinds: kinds.clone(),
            reads: HashMap::new(),
            indexes: HashMap::new(),
            writes: HashSet::new(),
            grant: super::super::Manifest::default().grant("t"),
        };
        let mut host = HostState::new("t".into(), "v", WasiCtx::builder().build(), 1 << 20);
        let widgets = KindRef::Resource("widgets".into());
        let pods = KindRef::Resource("pods".into());
        assert!(host.resolve(&scope(&kinds), &widgets).is_err());
        assert!(host.resolve(&scope(&kinds), &pods).unwrap().namespaced);

        kinds.learn_crd(&widgets_crd(&["v1", "v2"]));
        let got = host.resolve(&scope(&kinds), &widgets).unwrap();
        assert_eq!(got.gvk, Gvk::new("example.com", "v1", "Widget"));
        kinds.set_preferred("example.com", "v2");
        let got = host.resolve(&scope(&kinds), &widgets).unwrap();
        assert_eq!(got.gvk, Gvk::new("example.com", "v2", "Widget"));

        // Another registry (nothing known) at whatever generation.
        let empty = KindRegistry::default();
        assert!(host.resolve(&scope(&empty), &pods).is_err());
    }
}
