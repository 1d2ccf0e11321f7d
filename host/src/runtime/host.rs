//! The host side of the imports a plugin sees: object views, cache reads,
//! buffered actions, logging and the clock.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde_json::Value;
use wasmtime::component::{Resource, ResourceTable};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::access::{Grant, Verb};
use super::bindings::kubewasm::plugin::{actions, cache, clock, log, types};
use super::limits::{CallCaps, Cap, CapExceeded};
use crate::actions::{Action, EventType, PatchType, Propagation, Target};
use crate::informer::selector::LabelSelector;
use crate::informer::{CacheView, Snapshot};
use crate::kind::{Gvk, KindInfo, KindRef, KindRegistry};
use crate::object::{FieldValue, Meta, ObjectHandle, ObjectKey};

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

/// Enforces the per-plugin memory cap and remembers that it did.
#[derive(Debug)]
pub struct MemoryLimiter {
    pub limit: usize,
    pub exceeded: bool,
}

impl wasmtime::ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.limit {
            self.exceeded = true;
            return Err(wasmtime::format_err!(
                "plugin memory limit exceeded: wanted {desired} bytes (from {current}), limit is {} bytes; raise limits.memory in the plugin's sidecar if this is expected",
                self.limit
            ));
        }
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
}

/// The store data of one plugin instance.
pub struct HostState {
    pub plugin: Arc<str>,
    wasi: WasiCtx,
    table: ResourceTable,
    pub limiter: MemoryLimiter,
    pub scope: Option<Arc<PluginScope>>,
    /// Snapshots taken during the current call: one consistent state per
    /// cache for the whole call (keyed by the informer's address).
    snapshots: HashMap<usize, Snapshot>,
    pub actions: Vec<Action>,
    /// The guest's captured stdout/stderr (no stdio grant).
    pub output: Option<super::stdio::GuestOutput>,
    /// The sidecar's caps on handles, actions and log bytes.
    pub caps: CallCaps,
    /// Object handles pushed and not yet dropped.
    live_handles: usize,
    /// `log` bytes written in the current call.
    log_bytes: u64,
    /// The first cap the current call went over: the call fails with it.
    pub cap_hit: Option<CapExceeded>,
    /// When the current call's deadline passes (sleeps are cut there).
    pub deadline: Option<std::time::Instant>,
    /// A wait of the current call was cut at the deadline: the call fails
    /// as a timeout.
    pub wait_cut: bool,
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
    pub fn new(plugin: Arc<str>, wasi: WasiCtx, memory_limit: usize) -> Self {
        Self {
            plugin,
            wasi,
            table: ResourceTable::new(),
            limiter: MemoryLimiter {
                limit: memory_limit,
                exceeded: false,
            },
            scope: None,
            snapshots: HashMap::new(),
            actions: Vec::new(),
            output: None,
            caps: CallCaps::default(),
            live_handles: 0,
            log_bytes: 0,
            cap_hit: None,
            deadline: None,
            wait_cut: false,
        }
    }

    /// Resets per-call state.
    pub fn begin_call(&mut self) {
        self.snapshots.clear();
        self.actions.clear();
        self.log_bytes = 0;
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
        if self.live_handles >= self.caps.handles {
            let e = self.exceeded(Cap::Handles);
            return Err(wasmtime::format_err!("plugin exceeded {e}"));
        }
        let r = self.table.push(obj)?;
        self.live_handles += 1;
        Ok(r)
    }

    /// Buffers an action of the current call; over `limits.actionsPerCall`
    /// the guest gets an error and the call fails.
    fn push_action(&mut self, action: Action) -> Result<(), actions::ActionError> {
        if self.actions.len() >= self.caps.actions_per_call {
            let e = self.exceeded(Cap::ActionsPerCall);
            return Err(actions::ActionError::Invalid(format!(
                "plugin exceeded {e}"
            )));
        }
        self.actions.push(action);
        Ok(())
    }

    fn object(&self, r: &Resource<ObjectHandle>) -> wasmtime::Result<&ObjectHandle> {
        Ok(self.table.get(r)?)
    }

    fn scope(&self) -> Result<Arc<PluginScope>, String> {
        self.scope
            .clone()
            .ok_or_else(|| "the cache and actions are not available during register".to_owned())
    }

    /// The call's snapshot of a cache (one per cache per call).
    fn snapshot_of(&mut self, cache: &CacheView) -> Snapshot {
        self.snapshots
            .entry(cache.id())
            .or_insert_with(|| cache.snapshot())
            .clone()
    }

    /// The call's snapshots of every cache of `kind`, after checking that
    /// the grant lets the plugin read `namespace` (`None`: the whole cache,
    /// which the grant already narrowed at registration).
    fn snapshot_for(
        &mut self,
        kind: &types::KindRef,
        namespace: Option<&str>,
    ) -> Result<(KindInfo, Vec<Snapshot>), cache::CacheError> {
        let scope = self.scope().map_err(cache::CacheError::NotSubscribed)?;
        let kref = kind_ref(kind);
        let info = scope
            .kinds
            .resolve(&kref)
            .map_err(|e| cache::CacheError::NotSubscribed(e.to_string()))?;
        let informers = scope.reads.get(&info.gvk).ok_or_else(|| {
            cache::CacheError::NotSubscribed(format!(
                "{} is not among this plugin's subscriptions; add a subscription (with no delta types for read-only access)",
                info.resource_name()
            ))
        })?;
        let informers = informers.clone();
        let namespace = namespace.filter(|_| info.namespaced);
        if namespace.is_some() || !info.namespaced {
            self.granted(&scope, &info, Verb::Read, namespace)
                .map_err(cache::CacheError::NotSubscribed)?;
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
        r: actions::ObjectRef,
        verb: Verb,
    ) -> Result<Target, actions::ActionError> {
        let scope = self.scope().map_err(actions::ActionError::Invalid)?;
        let kind = scope
            .kinds
            .resolve(&kind_ref(&r.kind))
            .map_err(|e| actions::ActionError::Invalid(e.to_string()))?;
        if verb != Verb::Events && !scope.writes.contains(&kind.gvk) {
            return Err(actions::ActionError::NotDeclared(format!(
                "{} is not in this plugin's registration writes",
                kind.resource_name()
            )));
        }
        if r.name.is_empty() {
            return Err(actions::ActionError::Invalid("object name is empty".into()));
        }
        let namespace = r.namespace.filter(|n| !n.is_empty());
        if kind.namespaced != namespace.is_some() {
            return Err(actions::ActionError::Invalid(format!(
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
                actions::ActionError::Invalid(format!(
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
            .map_err(actions::ActionError::NotDeclared)?;
        Ok(Target {
            kind,
            namespace,
            name: r.name,
            uid: r.uid,
        })
    }

    fn apply_action(
        &mut self,
        object_json: &str,
        force: bool,
        status: bool,
    ) -> Result<(), actions::ActionError> {
        let object: Value = serde_json::from_str(object_json)
            .map_err(|e| actions::ActionError::Invalid(format!("object is not valid JSON: {e}")))?;
        let field = |p: &str| object.pointer(p).and_then(Value::as_str).map(str::to_owned);
        let (Some(api_version), Some(kind), Some(name)) = (
            field("/apiVersion"),
            field("/kind"),
            field("/metadata/name"),
        ) else {
            return Err(actions::ActionError::Invalid(
                "an applied object needs apiVersion, kind and metadata.name".into(),
            ));
        };
        let gvk = Gvk::from_api_version(&api_version, &kind);
        let target = self.target(
            actions::ObjectRef {
                kind: types::KindRef::Gvk(types::GroupVersionKind {
                    group: gvk.group,
                    version: gvk.version,
                    kind: gvk.kind,
                }),
                namespace: field("/metadata/namespace"),
                name,
                uid: None,
            },
            if status { Verb::Status } else { Verb::Apply },
        )?;
        self.push_action(Action::Apply {
            target,
            object,
            force,
            status,
        })
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

pub fn kind_ref(k: &types::KindRef) -> KindRef {
    match k {
        types::KindRef::Gvk(g) => KindRef::Gvk(Gvk::new(&g.group, &g.version, &g.kind)),
        types::KindRef::ResourceName(r) => KindRef::Resource(r.clone()),
    }
}

pub fn wit_meta(m: &Meta) -> types::ObjectMeta {
    let pairs = |v: &Vec<(Box<str>, Box<str>)>| {
        v.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    types::ObjectMeta {
        api_version: m.api_version.to_string(),
        kind: m.kind.to_string(),
        namespace: m.namespace.as_ref().map(|s| s.to_string()),
        name: m.name.to_string(),
        uid: m.uid.to_string(),
        resource_version: m.resource_version.to_string(),
        generation: m.generation,
        labels: pairs(&m.labels),
        annotations: pairs(&m.annotations),
        owner_references: m
            .owner_references
            .iter()
            .map(|o| types::OwnerReference {
                api_version: o.api_version.clone(),
                kind: o.kind.clone(),
                name: o.name.clone(),
                uid: o.uid.clone(),
                controller: o.controller.unwrap_or(false),
            })
            .collect(),
        creation_timestamp: m.creation_timestamp.as_ref().map(|s| s.to_string()),
        deletion_timestamp: m.deletion_timestamp.as_ref().map(|s| s.to_string()),
    }
}

fn wit_field(v: FieldValue) -> types::FieldValue {
    match v {
        FieldValue::Null => types::FieldValue::Null,
        FieldValue::Boolean(b) => types::FieldValue::Boolean(b),
        FieldValue::Integer(i) => types::FieldValue::Integer(i),
        FieldValue::Float(f) => types::FieldValue::Float(f),
        FieldValue::Text(s) => types::FieldValue::Text(s),
        FieldValue::Json(s) => types::FieldValue::Json(s),
    }
}

impl types::Host for HostState {}

impl types::HostObject for HostState {
    fn meta(&mut self, obj: Resource<ObjectHandle>) -> wasmtime::Result<types::ObjectMeta> {
        Ok(wit_meta(self.object(&obj)?.meta()))
    }

    fn field(
        &mut self,
        obj: Resource<ObjectHandle>,
        pointer: String,
    ) -> wasmtime::Result<Option<types::FieldValue>> {
        Ok(self.object(&obj)?.field(&pointer).map(wit_field))
    }

    fn fields(
        &mut self,
        obj: Resource<ObjectHandle>,
        pointers: Vec<String>,
    ) -> wasmtime::Result<Vec<Option<types::FieldValue>>> {
        let o = self.object(&obj)?;
        Ok(pointers.iter().map(|p| o.field(p).map(wit_field)).collect())
    }

    fn to_json(&mut self, obj: Resource<ObjectHandle>) -> wasmtime::Result<String> {
        Ok(self.object(&obj)?.json().to_owned())
    }

    fn drop(&mut self, obj: Resource<ObjectHandle>) -> wasmtime::Result<()> {
        self.table.delete(obj)?;
        self.live_handles = self.live_handles.saturating_sub(1);
        Ok(())
    }
}

impl cache::Host for HostState {
    fn get(
        &mut self,
        kind: types::KindRef,
        namespace: Option<String>,
        name: String,
    ) -> wasmtime::Result<Result<Option<Resource<ObjectHandle>>, cache::CacheError>> {
        let (info, snaps) = match self.snapshot_for(&kind, namespace.as_deref()) {
            Ok(v) => v,
            Err(e) => return Ok(Err(e)),
        };
        let ns = if info.namespaced {
            namespace.as_deref()
        } else {
            None
        };
        let key = ObjectKey::new(ns, &name);
        match snaps.iter().find_map(|s| s.get(&key)) {
            Some(o) => Ok(Ok(Some(self.push_object(o)?))),
            None => Ok(Ok(None)),
        }
    }

    fn list(
        &mut self,
        kind: types::KindRef,
        namespace: Option<String>,
        label_selector: Option<String>,
    ) -> wasmtime::Result<Result<Vec<Resource<ObjectHandle>>, cache::CacheError>> {
        let ns = namespace.as_deref().filter(|n| !n.is_empty());
        let (_, snaps) = match self.snapshot_for(&kind, ns) {
            Ok(v) => v,
            Err(e) => return Ok(Err(e)),
        };
        let selector = match LabelSelector::parse(label_selector.as_deref().unwrap_or("")) {
            Ok(s) => s,
            Err(e) => return Ok(Err(cache::CacheError::InvalidSelector(e.to_string()))),
        };
        let objs = merge(snaps.iter().map(|s| s.list(ns, &selector)));
        Ok(Ok(self.push_all(objs)?))
    }

    fn by_index(
        &mut self,
        index: String,
        value: String,
    ) -> wasmtime::Result<Result<Vec<Resource<ObjectHandle>>, cache::CacheError>> {
        let scope = match self.scope() {
            Ok(s) => s,
            Err(e) => return Ok(Err(cache::CacheError::UnknownIndex(e))),
        };
        let Some(caches) = scope.indexes.get(&index) else {
            return Ok(Err(cache::CacheError::UnknownIndex(format!(
                "no index {index:?} was declared at registration"
            ))));
        };
        let found: Vec<Vec<ObjectHandle>> = caches
            .iter()
            .map(|(informer, store_index)| {
                self.snapshot_of(informer)
                    .by_index(store_index, &value)
                    .unwrap_or_default()
            })
            .collect();
        let objs = merge(found);
        Ok(Ok(self.push_all(objs)?))
    }
}

impl actions::Host for HostState {
    fn apply(
        &mut self,
        object_json: String,
        force: bool,
    ) -> wasmtime::Result<Result<(), actions::ActionError>> {
        Ok(self.apply_action(&object_json, force, false))
    }

    fn apply_status(
        &mut self,
        object_json: String,
    ) -> wasmtime::Result<Result<(), actions::ActionError>> {
        Ok(self.apply_action(&object_json, true, true))
    }

    fn patch(
        &mut self,
        target: actions::ObjectRef,
        patch_type: actions::PatchType,
        patch: String,
    ) -> wasmtime::Result<Result<(), actions::ActionError>> {
        let result = (|| {
            let target = self.target(target, Verb::Patch)?;
            let patch: Value = serde_json::from_str(&patch).map_err(|e| {
                actions::ActionError::Invalid(format!("patch is not valid JSON: {e}"))
            })?;
            let patch_type = match patch_type {
                actions::PatchType::Merge if patch.is_object() => PatchType::Merge,
                actions::PatchType::Json if patch.is_array() => PatchType::Json,
                actions::PatchType::Merge => {
                    return Err(actions::ActionError::Invalid(
                        "a merge patch must be a JSON object".into(),
                    ));
                }
                actions::PatchType::Json => {
                    return Err(actions::ActionError::Invalid(
                        "a JSON patch must be an array of operations".into(),
                    ));
                }
            };
            self.push_action(Action::Patch {
                target,
                patch_type,
                patch,
            })
        })();
        Ok(result)
    }

    fn delete(
        &mut self,
        target: actions::ObjectRef,
        propagation: actions::Propagation,
    ) -> wasmtime::Result<Result<(), actions::ActionError>> {
        let result = self.target(target, Verb::Delete).and_then(|target| {
            self.push_action(Action::Delete {
                target,
                propagation: match propagation {
                    actions::Propagation::Background => Propagation::Background,
                    actions::Propagation::Foreground => Propagation::Foreground,
                    actions::Propagation::Orphan => Propagation::Orphan,
                },
            })
        });
        Ok(result)
    }

    fn record_event(
        &mut self,
        regarding: actions::ObjectRef,
        event_type: actions::EventType,
        reason: String,
        note: String,
    ) -> wasmtime::Result<Result<(), actions::ActionError>> {
        if reason.is_empty() || reason.len() > 128 {
            return Ok(Err(actions::ActionError::Invalid(
                "an Event reason must be 1 to 128 characters (UpperCamelCase by convention)".into(),
            )));
        }
        let result = self.target(regarding, Verb::Events).and_then(|regarding| {
            self.push_action(Action::Event {
                regarding,
                event_type: match event_type {
                    actions::EventType::Normal => EventType::Normal,
                    actions::EventType::Warning => EventType::Warning,
                },
                reason,
                // The API server caps Event notes at 1 KiB.
                note: note.chars().take(1024).collect(),
            })
        });
        Ok(result)
    }
}

impl log::Host for HostState {
    fn enabled(&mut self, level: log::Level) -> wasmtime::Result<bool> {
        Ok(match level {
            log::Level::Trace => tracing::enabled!(tracing::Level::TRACE),
            log::Level::Debug => tracing::enabled!(tracing::Level::DEBUG),
            log::Level::Info => tracing::enabled!(tracing::Level::INFO),
            log::Level::Warn => tracing::enabled!(tracing::Level::WARN),
            log::Level::Error => tracing::enabled!(tracing::Level::ERROR),
        })
    }

    fn write(
        &mut self,
        level: log::Level,
        message: String,
        fields: Vec<(String, String)>,
    ) -> wasmtime::Result<()> {
        let size = message.len() + fields.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>();
        self.log_bytes = self.log_bytes.saturating_add(size as u64);
        if self.log_bytes > self.caps.log_bytes_per_call {
            // Dropped: the call fails with the cap once it returns.
            if self.cap_hit.is_none() {
                let e = self.exceeded(Cap::LogBytesPerCall);
                tracing::warn!(target: "plugin", plugin = &*self.plugin, "log records dropped: plugin exceeded {e}");
            }
            return Ok(());
        }
        let fields: String = fields
            .iter()
            .map(|(k, v)| format!("{k}={v:?}"))
            .collect::<Vec<_>>()
            .join(" ");
        let plugin = &*self.plugin;
        match level {
            log::Level::Trace => tracing::trace!(target: "plugin", plugin, fields, "{message}"),
            log::Level::Debug => tracing::debug!(target: "plugin", plugin, fields, "{message}"),
            log::Level::Info => tracing::info!(target: "plugin", plugin, fields, "{message}"),
            log::Level::Warn => tracing::warn!(target: "plugin", plugin, fields, "{message}"),
            log::Level::Error => tracing::error!(target: "plugin", plugin, fields, "{message}"),
        }
        Ok(())
    }
}

impl clock::Host for HostState {
    fn now(&mut self) -> wasmtime::Result<clock::Instant> {
        let d = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Ok(clock::Instant {
            seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            nanoseconds: d.subsec_nanos(),
        })
    }

    fn now_rfc3339(&mut self) -> wasmtime::Result<String> {
        Ok(humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string())
    }
}
