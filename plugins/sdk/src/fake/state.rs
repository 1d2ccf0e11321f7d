//! The fake host's state (one per thread, so parallel tests stay apart) and
//! the answers the native imports (`wit.rs`) give from it: what the host
//! does for each import, over objects held as JSON.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use serde_json::Value;

use super::selector::Selector;
use super::wit::actions::{ActionError, Event, ObjectRef, PatchType, Preconditions, Propagation};
use super::wit::cache::CacheError;
use super::wit::clock::Instant;
use super::wit::log::Level;
use super::wit::types::{
    FieldValue, GroupVersionKind, KindRef, Object, ObjectMeta, OwnerReference,
};
use super::{Action, LogLine};
use crate::Registration;

/// The last-applied annotation the host strips from `to_json`.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// A cached object's identity: group, kind, namespace (`""` when
/// cluster-scoped), name. Ordered so a kind's objects list by namespace
/// then name, as the host's do.
pub(crate) type Key = (String, String, String, String);

pub(crate) struct State {
    pub(crate) cache: BTreeMap<Key, Rc<Value>>,
    handles: HashMap<u32, Rc<Value>>,
    next_handle: u32,
    pub(crate) peak_handles: usize,
    pub(crate) actions: Vec<Action>,
    pub(crate) logs: Vec<LogLine>,
    pub(crate) now: Instant,
    pub(crate) log_level: Level,
    pub(crate) registration: Option<Registration>,
}

impl State {
    pub(crate) fn new(now: Instant) -> Self {
        Self {
            cache: BTreeMap::new(),
            handles: HashMap::new(),
            next_handle: 1,
            peak_handles: 0,
            actions: Vec::new(),
            logs: Vec::new(),
            now,
            log_level: Level::Trace,
            registration: None,
        }
    }

    /// A new handle on `object`, as the host hands one to the guest.
    pub(crate) fn hand(&mut self, object: Rc<Value>) -> Object {
        let h = self.next_handle;
        self.next_handle += 1;
        self.handles.insert(h, object);
        self.peak_handles = self.peak_handles.max(self.handles.len());
        Object::new(h)
    }

    pub(crate) fn live_handles(&self) -> usize {
        self.handles.len()
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Rc<RefCell<State>>>> = const { RefCell::new(None) };
}

pub(crate) fn install(state: Rc<RefCell<State>>) {
    CURRENT.with(|c| *c.borrow_mut() = Some(state));
}

pub(crate) fn uninstall(state: &Rc<RefCell<State>>) {
    CURRENT.with(|c| {
        let mut c = c.borrow_mut();
        if c.as_ref().is_some_and(|s| Rc::ptr_eq(s, state)) {
            *c = None;
        }
    });
}

fn current() -> Rc<RefCell<State>> {
    CURRENT.with(|c| c.borrow().clone()).unwrap_or_else(|| {
        panic!(
            "kubewasm-sdk: a host call outside WebAssembly with no fake host on this thread: \
             create a kubewasm_sdk::fake::FakeHost first (natively, host calls go to it)"
        )
    })
}

pub(crate) fn with<R>(f: impl FnOnce(&mut State) -> R) -> R {
    let state = current();
    let mut state = state.borrow_mut();
    f(&mut state)
}

/// Reads the object behind handle `h`.
pub(crate) fn read<R>(h: u32, f: impl FnOnce(&Value) -> R) -> R {
    let object = with(|s| s.handles.get(&h).cloned())
        .unwrap_or_else(|| panic!("kubewasm-sdk fake host: object handle {h} is not live"));
    f(&object)
}

/// Drops handle `h` (an `Object` going out of scope).
pub(crate) fn release(h: u32) {
    CURRENT.with(|c| {
        if let Some(state) = c.borrow().as_ref()
            && let Ok(mut state) = state.try_borrow_mut()
        {
            state.handles.remove(&h);
        }
    });
}

// ---- reading objects ------------------------------------------------------

fn meta(o: &Value) -> Option<&serde_json::Map<String, Value>> {
    o.get("metadata").and_then(Value::as_object)
}

pub(crate) fn meta_opt(o: &Value, key: &str) -> Option<String> {
    meta(o)
        .and_then(|m| m.get(key))
        .and_then(Value::as_str)
        .map(str::to_owned)
}

pub(crate) fn meta_str(o: &Value, key: &str) -> String {
    meta_opt(o, key).unwrap_or_default()
}

pub(crate) fn gvk_of(o: &Value) -> GroupVersionKind {
    let api_version = o.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    GroupVersionKind {
        group: group.to_owned(),
        version: version.to_owned(),
        kind: o
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned(),
    }
}

pub(crate) fn namespace_of(o: &Value) -> Option<String> {
    meta_opt(o, "namespace").filter(|n| !n.is_empty())
}

pub(crate) fn map_get(o: &Value, map: &str, key: &str) -> Option<String> {
    meta(o)
        .and_then(|m| m.get(map))
        .and_then(|m| m.get(key))
        .and_then(Value::as_str)
        .map(str::to_owned)
}

pub(crate) fn map_of(o: &Value, map: &str) -> Vec<(String, String)> {
    let mut pairs: Vec<(String, String)> = meta(o)
        .and_then(|m| m.get(map))
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default();
    pairs.sort();
    pairs
}

pub(crate) fn owners_of(o: &Value) -> Vec<OwnerReference> {
    let text = |r: &Value, k: &str| r.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    let flag = |r: &Value, k: &str| r.get(k).and_then(Value::as_bool).unwrap_or(false);
    meta(o)
        .and_then(|m| m.get("ownerReferences"))
        .and_then(Value::as_array)
        .map(|refs| {
            refs.iter()
                .map(|r| OwnerReference {
                    api_version: text(r, "apiVersion"),
                    kind: text(r, "kind"),
                    name: text(r, "name"),
                    uid: text(r, "uid"),
                    controller: flag(r, "controller"),
                    block_owner_deletion: flag(r, "blockOwnerDeletion"),
                })
                .collect()
        })
        .unwrap_or_default()
}

pub(crate) fn finalizers_of(o: &Value) -> Vec<String> {
    meta(o)
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .map(|f| {
            f.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

pub(crate) fn meta_of(o: &Value) -> ObjectMeta {
    ObjectMeta {
        api_version: o
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned(),
        kind: gvk_of(o).kind,
        namespace: namespace_of(o),
        name: meta_str(o, "name"),
        uid: meta_str(o, "uid"),
        resource_version: meta_str(o, "resourceVersion"),
        generation: o.pointer("/metadata/generation").and_then(Value::as_i64),
        labels: map_of(o, "labels"),
        annotations: map_of(o, "annotations"),
        owner_references: owners_of(o),
        finalizers: finalizers_of(o),
        creation_timestamp: meta_opt(o, "creationTimestamp"),
        deletion_timestamp: meta_opt(o, "deletionTimestamp"),
    }
}

/// A JSON value as the host reports it: numbers that fit an `i64` are
/// integers, other numbers floats, arrays and objects compact text.
pub(crate) fn field_value(v: &Value) -> FieldValue {
    match v {
        Value::Null => FieldValue::Null,
        Value::Bool(b) => FieldValue::Boolean(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => FieldValue::Integer(i),
            None => FieldValue::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => FieldValue::Text(s.clone()),
        Value::Array(_) | Value::Object(_) => FieldValue::Json(v.to_string()),
    }
}

pub(crate) fn field_of(o: &Value, pointer: &str) -> Option<FieldValue> {
    if !pointer.is_empty() && !pointer.starts_with('/') {
        return None;
    }
    o.pointer(pointer).map(field_value)
}

pub(crate) fn stripped_json(o: &Value) -> String {
    let mut o = o.clone();
    if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
        let empty = match m.get_mut("annotations").and_then(Value::as_object_mut) {
            Some(a) => a.remove(LAST_APPLIED).is_some() && a.is_empty(),
            None => false,
        };
        if empty {
            m.remove("annotations");
        }
    }
    o.to_string()
}

/// The values at `pointer`, where a `*` segment iterates an array
/// (`/metadata/ownerReferences/*/uid`), as index keys.
fn index_keys(o: &Value, pointer: &str) -> Vec<String> {
    let mut at = vec![o];
    for seg in pointer.split('/').skip(1) {
        let seg = seg.replace("~1", "/").replace("~0", "~");
        at = at
            .into_iter()
            .flat_map(|v| -> Vec<&Value> {
                match (v, seg.as_str()) {
                    (Value::Array(items), "*") => items.iter().collect(),
                    (Value::Array(items), i) => i
                        .parse::<usize>()
                        .ok()
                        .and_then(|i| items.get(i))
                        .into_iter()
                        .collect(),
                    (Value::Object(m), k) => m.get(k).into_iter().collect(),
                    _ => Vec::new(),
                }
            })
            .collect();
    }
    at.into_iter()
        .filter_map(|v| match field_value(v) {
            FieldValue::Text(s) => Some(s),
            FieldValue::Integer(i) => Some(i.to_string()),
            FieldValue::Boolean(b) => Some(b.to_string()),
            FieldValue::Float(f) => Some(f.to_string()),
            FieldValue::Null | FieldValue::Json(_) => None,
        })
        .collect()
}

// ---- kinds ------------------------------------------------------------------

/// `configmaps` for `ConfigMap`, `policies` for `Policy`, `ingresses` for
/// `Ingress`: how the API server pluralises nearly every kind.
fn plural(kind: &str) -> String {
    let lower = kind.to_ascii_lowercase();
    if let Some(stem) = lower.strip_suffix('y')
        && !stem.ends_with(['a', 'e', 'i', 'o', 'u'])
    {
        return format!("{stem}ies");
    }
    if lower.ends_with('s')
        || lower.ends_with('x')
        || lower.ends_with("ch")
        || lower.ends_with("sh")
    {
        return format!("{lower}es");
    }
    format!("{lower}s")
}

/// Whether a kubectl resource name (`configmaps`, `deployments.apps`,
/// `widgets.v1.example.com`) names `gvk`. The fake resolves names without
/// discovery: the plural or singular of the kind, then the group (with an
/// optional version before it); no group matches any group.
fn resource_names(name: &str, gvk: &GroupVersionKind) -> bool {
    let (resource, group) = name.split_once('.').unwrap_or((name, ""));
    let kind_ok = resource == plural(&gvk.kind) || resource == gvk.kind.to_ascii_lowercase();
    let group_ok = group.is_empty()
        || group == gvk.group
        || group
            .split_once('.')
            .is_some_and(|(version, rest)| version == gvk.version && rest == gvk.group)
        || (group == gvk.version && gvk.group.is_empty());
    kind_ok && group_ok
}

/// Whether `kind` names objects of `gvk` (group and kind; any version).
pub(crate) fn names(kind: &KindRef, gvk: &GroupVersionKind) -> bool {
    match kind {
        KindRef::Gvk(k) => k.group == gvk.group && k.kind == gvk.kind,
        KindRef::ResourceName(name) => resource_names(name, gvk),
    }
}

/// Whether two kind references name the same kind.
fn same_kind(a: &KindRef, b: &KindRef) -> bool {
    match (a, b) {
        (KindRef::Gvk(g), other) | (other, KindRef::Gvk(g)) => names(other, g),
        (KindRef::ResourceName(x), KindRef::ResourceName(y)) => x == y,
    }
}

pub(crate) fn describe(kind: &KindRef) -> String {
    match kind {
        KindRef::Gvk(g) if g.group.is_empty() => format!("{}/{}", g.version, g.kind),
        KindRef::Gvk(g) => format!("{}/{}/{}", g.group, g.version, g.kind),
        KindRef::ResourceName(n) => n.clone(),
    }
}

// ---- cache ------------------------------------------------------------------

fn check_read(s: &State, kind: &KindRef) -> Result<(), CacheError> {
    match &s.registration {
        Some(reg)
            if !reg
                .subscriptions
                .iter()
                .any(|sub| same_kind(&sub.kind, kind)) =>
        {
            Err(CacheError::NotSubscribed(format!(
                "{} is not among the plugin's subscriptions (subscribe to it, with no delta types to only read it)",
                describe(kind)
            )))
        }
        _ => Ok(()),
    }
}

pub(crate) fn cache_get(
    kind: &KindRef,
    namespace: Option<&str>,
    name: &str,
) -> Result<Option<Object>, CacheError> {
    with(|s| {
        check_read(s, kind)?;
        let ns = namespace.unwrap_or("");
        let found = s
            .cache
            .iter()
            .find(|((_, _, n, m), o)| n == ns && m == name && names(kind, &gvk_of(o)))
            .map(|(_, o)| o.clone());
        Ok(found.map(|o| s.hand(o)))
    })
}

pub(crate) fn cache_list(
    kind: &KindRef,
    namespace: Option<&str>,
    label_selector: Option<&str>,
) -> Result<Vec<Object>, CacheError> {
    with(|s| {
        check_read(s, kind)?;
        let selector =
            Selector::parse(label_selector.unwrap_or("")).map_err(CacheError::InvalidSelector)?;
        let mut found: Vec<(&Key, &Rc<Value>)> = s
            .cache
            .iter()
            .filter(|((_, _, n, _), o)| {
                namespace.is_none_or(|ns| ns == n)
                    && names(kind, &gvk_of(o))
                    && selector.matches_labels(|k| {
                        o.pointer("/metadata/labels")
                            .and_then(|l| l.get(k))
                            .and_then(Value::as_str)
                    })
            })
            .collect();
        found.sort_by(|a, b| (&a.0.2, &a.0.3).cmp(&(&b.0.2, &b.0.3)));
        let found: Vec<Rc<Value>> = found.into_iter().map(|(_, o)| o.clone()).collect();
        Ok(found.into_iter().map(|o| s.hand(o)).collect())
    })
}

pub(crate) fn cache_by_index(index: &str, value: &str) -> Result<Vec<Object>, CacheError> {
    with(|s| {
        let declared = s
            .registration
            .as_ref()
            .and_then(|r| r.indexes.iter().find(|i| i.name == index))
            .map(|i| (i.kind.clone(), i.pointer.clone()));
        let Some((kind, pointer)) = declared else {
            return Err(CacheError::UnknownIndex(format!(
                "no index {index:?} was declared at registration (FakeHost::load registers the plugin)"
            )));
        };
        let found: Vec<Rc<Value>> = s
            .cache
            .values()
            .filter(|o| {
                names(&kind, &gvk_of(o)) && index_keys(o, &pointer).iter().any(|k| k == value)
            })
            .cloned()
            .collect();
        Ok(found.into_iter().map(|o| s.hand(o)).collect())
    })
}

// ---- actions ----------------------------------------------------------------

fn check_write(s: &State, kind: &KindRef) -> Result<(), ActionError> {
    match &s.registration {
        Some(reg) if !reg.writes.iter().any(|w| same_kind(w, kind)) => {
            Err(ActionError::NotDeclared(format!(
                "{} is not among the registration's writes",
                describe(kind)
            )))
        }
        _ => Ok(()),
    }
}

/// `apply` (`force` is `Some`) or `apply-status` (`None`).
pub(crate) fn apply(
    object_json: &str,
    force: Option<bool>,
    preconditions: &Preconditions,
) -> Result<(), ActionError> {
    let object: Value = serde_json::from_str(object_json)
        .map_err(|e| ActionError::Invalid(format!("the object is not JSON: {e}")))?;
    let has = |p: &str| {
        object
            .pointer(p)
            .and_then(Value::as_str)
            .is_some_and(|v| !v.is_empty())
    };
    if !(has("/apiVersion") && has("/kind") && has("/metadata/name")) {
        return Err(ActionError::Invalid(
            "an applied object needs apiVersion, kind and metadata.name".to_owned(),
        ));
    }
    with(|s| {
        check_write(s, &KindRef::Gvk(gvk_of(&object)))?;
        let preconditions = preconditions.clone();
        s.actions.push(match force {
            Some(force) => Action::Apply {
                object,
                force,
                preconditions,
            },
            None => Action::ApplyStatus {
                object,
                preconditions,
            },
        });
        Ok(())
    })
}

pub(crate) fn patch(
    target: &ObjectRef,
    patch_type: PatchType,
    patch: &str,
    preconditions: &Preconditions,
) -> Result<(), ActionError> {
    let value: Value = serde_json::from_str(patch)
        .map_err(|e| ActionError::Invalid(format!("the patch is not JSON: {e}")))?;
    match (patch_type, &value) {
        (PatchType::Merge, Value::Object(_)) | (PatchType::Json, Value::Array(_)) => {}
        (PatchType::Merge, _) => {
            return Err(ActionError::Invalid(
                "a merge patch must be a JSON object".to_owned(),
            ));
        }
        (PatchType::Json, _) => {
            return Err(ActionError::Invalid(
                "a JSON patch must be an array of operations".to_owned(),
            ));
        }
    }
    with(|s| {
        check_write(s, &target.kind)?;
        s.actions.push(Action::Patch {
            target: target.clone(),
            patch_type,
            patch: value,
            preconditions: preconditions.clone(),
        });
        Ok(())
    })
}

pub(crate) fn delete(
    target: &ObjectRef,
    propagation: Propagation,
    preconditions: &Preconditions,
) -> Result<(), ActionError> {
    with(|s| {
        check_write(s, &target.kind)?;
        s.actions.push(Action::Delete {
            target: target.clone(),
            propagation,
            preconditions: preconditions.clone(),
        });
        Ok(())
    })
}

pub(crate) fn record_event(event: &Event) -> Result<(), ActionError> {
    if event.reason.is_empty() {
        return Err(ActionError::Invalid("an Event needs a reason".to_owned()));
    }
    with(|s| s.actions.push(Action::Event(event.clone())));
    Ok(())
}

// ---- log and clock ----------------------------------------------------------

pub(crate) fn log_enabled(level: Level) -> bool {
    with(|s| level >= s.log_level)
}

pub(crate) fn log_write(level: Level, message: &str, fields: &[(String, String)]) {
    with(|s| {
        if level >= s.log_level {
            s.logs.push(LogLine {
                level,
                message: message.to_owned(),
                fields: fields.to_vec(),
            });
        }
    });
}

pub(crate) fn now() -> Instant {
    with(|s| s.now)
}
