//! The embedded local cluster: a folder of YAML/JSON manifests treated as a
//! cluster. Objects get uid, resourceVersion and creationTimestamp; editing
//! files produces the deltas a real watch would; plugins' actions are
//! applied back into the folder. It serves the same informers, cache,
//! dispatcher and executor as a real API server.
//!
//! Simplifications, on purpose: server-side apply is a JSON merge of the
//! applied object (no field ownership), there is no admission or garbage
//! collection, and Events are appended to `events.log` in the folder.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use parking_lot::Mutex;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::actions::executor::{ActionError, ActionSink};
use crate::actions::{Action, PatchType};
use crate::informer::selector::{FieldSelector, LabelSelector};
use crate::informer::{InformerSpec, Source, SourceError, WatchEvent};
use crate::kind::{Gvk, KindRegistry};
use crate::object::{KObject, ObjectKey, StripOptions};

/// The file events of the local cluster are appended to.
pub const EVENTS_LOG: &str = "events.log";

#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    #[error(
        "cannot read local cluster folder {path}: {source} (pass --local with an existing folder of manifests)"
    )]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("cannot watch {path}: {message}")]
    Watch { path: PathBuf, message: String },
}

type Id = (Gvk, ObjectKey);

#[derive(Debug, Clone)]
struct Entry {
    /// Full object, including the fields the cluster assigns.
    value: Value,
    file: PathBuf,
}

struct Watcher {
    spec: InformerSpec,
    labels: LabelSelector,
    fields: FieldSelector,
    tx: mpsc::UnboundedSender<Result<WatchEvent, SourceError>>,
}

impl Watcher {
    fn wants(&self, gvk: &Gvk, obj: &KObject) -> bool {
        self.spec.kind.gvk == *gvk
            && self
                .spec
                .namespace
                .as_deref()
                .is_none_or(|ns| obj.namespace() == Some(ns))
            && self.labels.matches(obj.meta())
            && self.fields.matches(obj)
    }
}

#[derive(Default)]
struct State {
    objects: BTreeMap<Id, Entry>,
    rv: u64,
    watchers: Vec<Watcher>,
    /// Per-id count of deletions, mixed into recreated objects' uids.
    incarnations: BTreeMap<Id, u64>,
    /// Parse errors already reported, so a broken file is logged once.
    reported: BTreeMap<PathBuf, String>,
    /// Invalid objects already reported (file and error), logged once.
    reported_names: std::collections::BTreeSet<(PathBuf, String)>,
}

/// A folder-backed cluster.
pub struct LocalCluster {
    dir: PathBuf,
    kinds: KindRegistry,
    strip: StripOptions,
    state: Mutex<State>,
}

impl std::fmt::Debug for LocalCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalCluster")
            .field("dir", &self.dir)
            .finish()
    }
}

/// Fields the cluster owns; ignored when comparing a file with the state.
const SYSTEM_FIELDS: [&str; 5] = [
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "generation",
    "managedFields",
];

fn user_view(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        for f in SYSTEM_FIELDS {
            meta.remove(f);
        }
    }
    v
}

fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let name = entry.file_name();
        if name.to_string_lossy().starts_with('.') {
            continue;
        }
        if path.is_dir() {
            walk(&path, out)?;
        } else if path
            .extension()
            .is_some_and(|e| e == "yaml" || e == "yml" || e == "json")
        {
            out.push(path);
        }
    }
    Ok(())
}

/// Parses one manifest file into objects (multi-document YAML and `List`s).
pub fn parse_manifests(path: &Path, text: &str) -> Result<Vec<Value>, String> {
    let mut docs = Vec::new();
    if path.extension().is_some_and(|e| e == "json") {
        docs.push(serde_json::from_str::<Value>(text).map_err(|e| e.to_string())?);
    } else {
        for doc in serde_yaml_ng::Deserializer::from_str(text) {
            let v = serde_json::to_value(
                <serde_yaml_ng::Value as serde::Deserialize>::deserialize(doc)
                    .map_err(|e| e.to_string())?,
            )
            .map_err(|e| e.to_string())?;
            if !v.is_null() {
                docs.push(v);
            }
        }
    }
    let mut out = Vec::new();
    for d in docs {
        if d["kind"].as_str().is_some_and(|k| k.ends_with("List")) && d["items"].is_array() {
            out.extend(d["items"].as_array().cloned().unwrap_or_default());
        } else {
            out.push(d);
        }
    }
    Ok(out)
}

impl LocalCluster {
    pub fn new(
        dir: PathBuf,
        kinds: KindRegistry,
        strip: StripOptions,
    ) -> Result<Arc<Self>, LocalError> {
        if !dir.is_dir() {
            return Err(LocalError::Read {
                path: dir.clone(),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "not a directory"),
            });
        }
        let cluster = Arc::new(Self {
            dir,
            kinds,
            strip,
            state: Mutex::new(State::default()),
        });
        cluster.rescan()?;
        Ok(cluster)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn len(&self) -> usize {
        self.state.lock().objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The current object, as the cluster holds it.
    pub fn get(&self, gvk: &Gvk, namespace: Option<&str>, name: &str) -> Option<Value> {
        self.state
            .lock()
            .objects
            .get(&(gvk.clone(), ObjectKey::new(namespace, name)))
            .map(|e| e.value.clone())
    }

    fn uid_for(&self, state: &State, id: &Id) -> String {
        let inc = state.incarnations.get(id).copied().unwrap_or(0);
        let h = Sha256::digest(format!("{}|{}|{inc}", id.0, id.1).as_bytes());
        let x: String = h.iter().take(16).map(|b| format!("{b:02x}")).collect();
        format!(
            "{}-{}-{}-{}-{}",
            &x[0..8],
            &x[8..12],
            &x[12..16],
            &x[16..20],
            &x[20..32]
        )
    }

    /// Reads every manifest and turns differences with the state into events.
    pub fn rescan(&self) -> Result<(), LocalError> {
        let mut files = Vec::new();
        walk(&self.dir, &mut files).map_err(|source| LocalError::Read {
            path: self.dir.clone(),
            source,
        })?;
        files.sort();
        let mut found: BTreeMap<Id, (Value, PathBuf)> = BTreeMap::new();
        let mut state = self.state.lock();
        // Files whose objects are kept as they were when missing from the
        // rescan: what cannot be read might still hold them, and a
        // deletion made up from a read error is what a garbage-collecting
        // plugin acts on.
        let mut broken = Vec::new();
        for file in files {
            let text = match std::fs::read_to_string(&file) {
                Ok(t) => t,
                // Gone since the walk: its objects went with it.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    let message = format!("cannot read: {e}");
                    if state.reported.get(&file) != Some(&message) {
                        tracing::error!(file = %file.display(), error = %e, "cannot read manifest; keeping its objects as they were until it reads");
                        state.reported.insert(file.clone(), message);
                    }
                    broken.push(file);
                    continue;
                }
            };
            match parse_manifests(&file, &text) {
                Ok(objs) => {
                    state.reported.remove(&file);
                    for v in objs {
                        let (Some(av), Some(kind), Some(name)) = (
                            v["apiVersion"].as_str(),
                            v["kind"].as_str(),
                            v["metadata"]["name"].as_str(),
                        ) else {
                            // It may be an object of this file being edited:
                            // the file's other objects are read, and those
                            // missing kept.
                            tracing::warn!(file = %file.display(), "skipping a document without apiVersion, kind and metadata.name; keeping the objects this file held that it no longer shows");
                            broken.push(file.clone());
                            continue;
                        };
                        let gvk = Gvk::from_api_version(av, kind);
                        if gvk.kind == "CustomResourceDefinition" {
                            self.kinds.learn_crd(&v);
                        }
                        let namespaced = self.kinds.by_gvk(&gvk).is_none_or(|k| k.namespaced);
                        let ns = if namespaced {
                            Some(v["metadata"]["namespace"].as_str().unwrap_or("default"))
                        } else {
                            None
                        };
                        // The API server would refuse it; so does the local one.
                        if let Err(e) = crate::names::validate_object(&gvk.kind, ns, name) {
                            let object = format!(
                                "{} {}{name}",
                                gvk.kind,
                                ns.map(|n| format!("{n}/")).unwrap_or_default()
                            );
                            if state.reported_names.insert((file.clone(), e.to_string())) {
                                tracing::error!(file = %file.display(), object = %object, error = %e, "skipping an object the API server would refuse");
                            }
                            continue;
                        }
                        found.insert((gvk, ObjectKey::new(ns, name)), (v, file.clone()));
                    }
                }
                Err(message) => {
                    // A broken file keeps its objects as they were: an editor's
                    // half-saved state must not look like a mass deletion.
                    if state.reported.get(&file) != Some(&message) {
                        tracing::error!(file = %file.display(), error = %message, "cannot parse manifest; keeping its objects as they were until it parses");
                        state.reported.insert(file.clone(), message);
                    }
                    broken.push(file);
                }
            }
        }
        let existing: Vec<Id> = state.objects.keys().cloned().collect();
        for id in existing {
            let keep = state
                .objects
                .get(&id)
                .is_some_and(|e| broken.contains(&e.file));
            if !found.contains_key(&id) && !keep {
                self.remove_locked(&mut state, &id);
            }
        }
        for (id, (mut value, file)) in found {
            if let Some(ns) = &id.1.namespace {
                value["metadata"]["namespace"] = json!(&**ns);
            }
            match state.objects.get(&id) {
                Some(e) if user_view(&e.value) == user_view(&value) => {
                    if e.file != file
                        && let Some(e) = state.objects.get_mut(&id)
                    {
                        e.file = file;
                    }
                }
                _ => {
                    // What no informer can cache (a label value that is not
                    // a string, say) would reach none of them: the object
                    // keeps its last good state.
                    if let Err(e) = KObject::from_value(value.clone(), self.strip) {
                        if state.reported_names.insert((file.clone(), e.to_string())) {
                            tracing::error!(file = %file.display(), object = %id.1, error = %e, "cannot read an object; keeping its last good state until it reads");
                        }
                        continue;
                    }
                    self.upsert_locked(&mut state, id, value, file);
                }
            }
        }
        Ok(())
    }

    fn upsert_locked(&self, state: &mut State, id: Id, mut value: Value, file: PathBuf) {
        state.rv += 1;
        let rv = state.rv.to_string();
        let old_value = state.objects.get(&id).map(|e| e.value.clone());
        let (uid, created, generation) = match state.objects.get(&id) {
            Some(old) => {
                let m = &old.value["metadata"];
                let spec_changed = old.value.get("spec") != value.get("spec");
                let generation = m["generation"].as_i64().unwrap_or(1) + i64::from(spec_changed);
                (m["uid"].clone(), m["creationTimestamp"].clone(), generation)
            }
            None => (json!(self.uid_for(state, &id)), json!(now_rfc3339()), 1),
        };
        if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("uid".into(), uid);
            meta.insert("creationTimestamp".into(), created);
            meta.insert("resourceVersion".into(), json!(rv));
            meta.insert("generation".into(), json!(generation));
        }
        state.objects.insert(
            id.clone(),
            Entry {
                value: value.clone(),
                file,
            },
        );
        self.notify(state, &id.0, old_value.as_ref(), &value, false);
    }

    fn remove_locked(&self, state: &mut State, id: &Id) -> Option<Entry> {
        let entry = state.objects.remove(id)?;
        *state.incarnations.entry(id.clone()).or_default() += 1;
        self.notify(state, &id.0, None, &entry.value, true);
        Some(entry)
    }

    /// Tells each watcher what the API server's watch would: an update
    /// that makes an object stop matching a watcher's selectors is a
    /// delete there (carrying the object as it is now), one that makes it
    /// start matching an add.
    fn notify(
        &self,
        state: &mut State,
        gvk: &Gvk,
        old: Option<&Value>,
        value: &Value,
        deleted: bool,
    ) {
        let obj = match KObject::from_value(value.clone(), self.strip) {
            Ok(o) => o,
            Err(e) => {
                tracing::warn!(kind = %gvk, error = %e, "local object cannot be cached");
                return;
            }
        };
        let old = old.and_then(|v| KObject::from_value(v.clone(), self.strip).ok());
        state.watchers.retain(|w| {
            let now = w.wants(gvk, &obj);
            let before = old.as_ref().is_some_and(|o| w.wants(gvk, o));
            let Ok(o) = KObject::from_value(value.clone(), self.strip) else {
                return true;
            };
            let ev = match (deleted, now, before) {
                (true, true, _) | (false, false, true) => WatchEvent::Delete(o),
                (false, true, _) => WatchEvent::Apply(o),
                _ => return !w.tx.is_closed(),
            };
            w.tx.send(Ok(ev)).is_ok()
        });
    }

    /// Watches the folder until cancelled, rescanning on changes.
    pub async fn watch_files(self: Arc<Self>, cancel: CancellationToken) -> Result<(), LocalError> {
        use notify::RecursiveMode;
        use notify_debouncer_full::{DebounceEventResult, new_debouncer};
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut debouncer = new_debouncer(
            Duration::from_millis(150),
            None,
            move |res: DebounceEventResult| {
                if res
                    .as_ref()
                    .map_or(true, |evs| evs.iter().any(|e| !e.kind.is_access()))
                {
                    let _ = tx.send(());
                }
            },
        )
        .map_err(|e| LocalError::Watch {
            path: self.dir.clone(),
            message: e.to_string(),
        })?;
        debouncer
            .watch(&self.dir, RecursiveMode::Recursive)
            .map_err(|e| LocalError::Watch {
                path: self.dir.clone(),
                message: e.to_string(),
            })?;
        loop {
            tokio::select! {
                () = cancel.cancelled() => break,
                r = rx.recv() => if r.is_none() { break },
            }
            while rx.try_recv().is_ok() {}
            if let Err(e) = self.rescan() {
                tracing::error!(error = %e, "local cluster rescan failed");
            }
        }
        drop(debouncer);
        Ok(())
    }

    fn file_for_new(&self, id: &Id, plural: &str) -> Result<PathBuf, ActionError> {
        let ns = id.1.namespace.as_deref().unwrap_or("_cluster");
        let group = if id.0.group.is_empty() {
            String::new()
        } else {
            format!(".{}", id.0.group)
        };
        let ns_dir = Path::new(ns);
        let file = PathBuf::from(format!("{plural}{group}-{}.yaml", id.1.name));
        // Names are validated before this; refuse anything that is not one
        // plain component anyway, so nothing is ever written outside the folder.
        let plain = |p: &Path| {
            let mut c = p.components();
            matches!(
                (c.next(), c.next()),
                (Some(std::path::Component::Normal(_)), None)
            )
        };
        if !plain(ns_dir) || !plain(&file) {
            return Err(ActionError::Invalid(format!(
                "{ns}/{}: not a plain file name",
                id.1.name
            )));
        }
        Ok(self.dir.join(ns_dir).join(file))
    }

    /// Rewrites the file an object lives in from the state.
    fn persist(&self, state: &State, file: &Path) -> Result<(), ActionError> {
        let docs: Vec<&Value> = state
            .objects
            .values()
            .filter(|e| e.file == file)
            .map(|e| &e.value)
            .collect();
        let io = |e: std::io::Error| {
            ActionError::Transient(format!("cannot write {}: {e}", file.display()))
        };
        if docs.is_empty() {
            match std::fs::remove_file(file) {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(io(e)),
            }
        }
        let mut text = String::new();
        for (i, d) in docs.iter().enumerate() {
            if i > 0 {
                text.push_str("---\n");
            }
            text.push_str(
                &serde_yaml_ng::to_string(d).map_err(|e| ActionError::Invalid(e.to_string()))?,
            );
        }
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent).map_err(io)?;
        }
        let tmp = file.with_extension("kubewasm-tmp");
        std::fs::write(&tmp, text).map_err(io)?;
        std::fs::rename(&tmp, file).map_err(io)
    }

    fn apply_action(&self, plugin: &str, action: &Action) -> Result<(), ActionError> {
        // Checked here too, whoever built the action: a namespace or name
        // becomes a path in the folder.
        let target = match action {
            Action::Apply { target, .. }
            | Action::Patch { target, .. }
            | Action::Delete { target, .. } => target,
            Action::Event { regarding, .. } => regarding,
        };
        crate::names::validate_object(
            &target.kind.gvk.kind,
            target.namespace.as_deref(),
            &target.name,
        )
        .map_err(|e| ActionError::Invalid(format!("{target}: {e}")))?;
        let mut state = self.state.lock();
        match action {
            Action::Apply {
                target,
                object,
                status,
                ..
            } => {
                let id = (
                    target.kind.gvk.clone(),
                    ObjectKey::new(target.namespace.as_deref(), &target.name),
                );
                check_preconditions(target, state.objects.get(&id).map(|e| &e.value))?;
                let (mut value, file) = match state.objects.get(&id) {
                    Some(e) => (e.value.clone(), e.file.clone()),
                    None if *status => {
                        return Err(ActionError::NotFound(format!("{target} does not exist")));
                    }
                    None => (json!({}), self.file_for_new(&id, &target.kind.plural)?),
                };
                let mut applied = object.clone();
                if *status {
                    applied =
                        json!({"status": object.get("status").cloned().unwrap_or(Value::Null)});
                }
                json_patch::merge(&mut value, &applied);
                self.upsert_locked(&mut state, id, value, file.clone());
                self.persist(&state, &file)?;
                tracing::debug!(plugin, target = %target, "local apply");
                Ok(())
            }
            Action::Patch {
                target,
                patch_type,
                patch,
            } => {
                let id = (
                    target.kind.gvk.clone(),
                    ObjectKey::new(target.namespace.as_deref(), &target.name),
                );
                let Some(entry) = state.objects.get(&id).cloned() else {
                    return Err(ActionError::NotFound(format!("{target} does not exist")));
                };
                check_preconditions(target, Some(&entry.value))?;
                let mut value = entry.value;
                match patch_type {
                    PatchType::Merge => json_patch::merge(&mut value, patch),
                    PatchType::Json => {
                        let ops: json_patch::Patch = serde_json::from_value(patch.clone())
                            .map_err(|e| ActionError::Invalid(format!("bad JSON patch: {e}")))?;
                        json_patch::patch(&mut value, &ops).map_err(|e| match e.kind {
                            // A failed `test` is the object having changed
                            // (the SDK's optimistic lock), as for the API
                            // server's sink.
                            json_patch::PatchErrorKind::TestFailed => ActionError::Conflict(format!(
                                "patch {target}: the JSON patch's test of {} failed: the object changed since the plugin read it",
                                e.path
                            )),
                            _ => ActionError::Invalid(format!(
                                "patch {target}: the JSON patch does not apply: {e}"
                            )),
                        })?;
                    }
                }
                self.upsert_locked(&mut state, id, value, entry.file.clone());
                self.persist(&state, &entry.file)
            }
            Action::Delete { target, .. } => {
                let id = (
                    target.kind.gvk.clone(),
                    ObjectKey::new(target.namespace.as_deref(), &target.name),
                );
                if let Some(e) = state.objects.get(&id) {
                    check_preconditions(target, Some(&e.value))?;
                }
                match self.remove_locked(&mut state, &id) {
                    Some(entry) => self.persist(&state, &entry.file),
                    None => Err(ActionError::NotFound(format!("{target} does not exist"))),
                }
            }
            Action::Event {
                regarding,
                event_type,
                reason,
                note,
                reporter,
            } => {
                let line = json!({
                    "reportingInstance": reporter,
                    "eventTime": now_rfc3339(),
                    "type": format!("{event_type:?}"),
                    "reason": reason,
                    "note": note,
                    "regarding": {"kind": regarding.kind.gvk.kind, "apiVersion": regarding.kind.gvk.api_version(),
                        "namespace": regarding.namespace, "name": regarding.name, "uid": regarding.uid},
                    "reportingController": "kubewasm",
                    "action": plugin,
                });
                use std::io::Write;
                let path = self.dir.join(EVENTS_LOG);
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&path)
                    .and_then(|mut f| writeln!(f, "{line}"))
                    .map_err(|e| {
                        ActionError::Transient(format!("cannot append to {}: {e}", path.display()))
                    })
            }
        }
    }
}

impl Source for LocalCluster {
    fn watch(&self, spec: &InformerSpec) -> BoxStream<'static, Result<WatchEvent, SourceError>> {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let labels = LabelSelector::parse(spec.label_selector.as_deref().unwrap_or(""));
        let fields = FieldSelector::parse(spec.field_selector.as_deref().unwrap_or(""));
        let (labels, fields) = match (labels, fields) {
            (Ok(labels), Ok(fields)) => (labels, fields),
            (labels, fields) => {
                let error = labels
                    .err()
                    .map(|e| e.to_string())
                    .or_else(|| fields.err().map(|e| e.to_string()))
                    .unwrap_or_default();
                let _ = tx.send(Err(SourceError::Other(format!("{spec}: {error}"))));
                return Box::pin(futures::stream::unfold(rx, |mut rx| async move {
                    rx.recv().await.map(|v| (v, rx))
                }));
            }
        };
        let watcher = Watcher {
            spec: spec.clone(),
            labels,
            fields,
            tx,
        };
        let mut state = self.state.lock();
        let _ = watcher.tx.send(Ok(WatchEvent::Init));
        for ((gvk, _), entry) in &state.objects {
            if let Ok(obj) = KObject::from_value(entry.value.clone(), self.strip)
                && watcher.wants(gvk, &obj)
            {
                let _ = watcher.tx.send(Ok(WatchEvent::InitApply(obj)));
            }
        }
        let _ = watcher.tx.send(Ok(WatchEvent::InitDone));
        state.watchers.push(watcher);
        drop(state);
        Box::pin(futures::stream::poll_fn(move |cx| rx.poll_recv(cx)))
    }
}

impl ActionSink for LocalCluster {
    fn execute<'a>(
        &'a self,
        plugin: &'a str,
        action: &'a Action,
    ) -> BoxFuture<'a, Result<(), ActionError>> {
        let r = self.apply_action(plugin, action);
        Box::pin(async move { r })
    }
}

/// Enforces a write's preconditions as the API server does: a uid or
/// resourceVersion that differs from the stored object's is a conflict
/// (the server's 409, with its wording).
fn check_preconditions(
    target: &crate::actions::Target,
    stored: Option<&Value>,
) -> Result<(), ActionError> {
    let p = &target.preconditions;
    if p.is_empty() {
        return Ok(());
    }
    let Some(stored) = stored else {
        return Err(ActionError::Conflict(format!(
            "{target}: Precondition failed: the object does not exist"
        )));
    };
    let meta = |f: &str| {
        stored
            .pointer(&format!("/metadata/{f}"))
            .and_then(Value::as_str)
            .unwrap_or("")
    };
    if let Some(uid) = &p.uid
        && uid != meta("uid")
    {
        return Err(ActionError::Conflict(format!(
            "{target}: Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
            meta("uid")
        )));
    }
    if let Some(rv) = &p.resource_version
        && rv != meta("resourceVersion")
    {
        return Err(ActionError::Conflict(format!(
            "{target}: the object has been modified; please apply your changes to the latest version and try again (resourceVersion in precondition: {rv}, in object meta: {})",
            meta("resourceVersion")
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actions::Target;

    #[tokio::test]
    async fn an_object_that_stops_matching_a_selector_is_deleted_from_that_watch() {
        use futures::{FutureExt, StreamExt};
        let dir = tempfile::tempdir().unwrap();
        let cm = |app: &str| {
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c, namespace: d, labels: {{app: {app}}}}}\n"
            )
        };
        std::fs::write(dir.path().join("c.yaml"), cm("a")).unwrap();
        let kinds = KindRegistry::builtin();
        let cluster = LocalCluster::new(
            dir.path().to_owned(),
            kinds.clone(),
            StripOptions::default(),
        )
        .unwrap();
        cluster.rescan().unwrap();
        let kind = kinds
            .resolve(&crate::kind::KindRef::Resource("configmaps".into()))
            .unwrap();
        let spec = |sel: &str| InformerSpec {
            kind: kind.clone(),
            namespace: None,
            label_selector: Some(sel.into()),
            field_selector: None,
        };
        let mut a = cluster.watch(&spec("app=a"));
        let mut b = cluster.watch(&spec("app=b"));
        let mut all = cluster.watch(&spec(""));
        let describe = |e: WatchEvent| match e {
            WatchEvent::Init => "init".to_owned(),
            WatchEvent::InitDone => "init-done".to_owned(),
            WatchEvent::InitApply(o) => {
                format!("init-apply {}", o.meta().label("app").unwrap_or(""))
            }
            WatchEvent::Apply(o) => format!("apply {}", o.meta().label("app").unwrap_or("")),
            WatchEvent::Delete(o) => format!("delete {}", o.meta().label("app").unwrap_or("")),
            WatchEvent::Progress => "progress".to_owned(),
        };
        let next = |s: &mut BoxStream<'static, Result<WatchEvent, SourceError>>| {
            let e = s
                .next()
                .now_or_never()
                .flatten()
                .map(|r| describe(r.unwrap()));
            e.unwrap_or_else(|| "nothing".into())
        };
        for (s, first) in [(&mut a, "init-apply a"), (&mut all, "init-apply a")] {
            assert_eq!(next(s), "init");
            assert_eq!(next(s), first);
            assert_eq!(next(s), "init-done");
        }
        assert_eq!(
            (next(&mut b), next(&mut b)),
            ("init".into(), "init-done".into())
        );
        // The label changes from a to b: a delete for `app=a` (with the
        // object as it is now), an add for `app=b`, an update for all.
        std::fs::write(dir.path().join("c.yaml"), cm("b")).unwrap();
        cluster.rescan().unwrap();
        assert_eq!(next(&mut a), "delete b");
        assert_eq!(next(&mut b), "apply b");
        assert_eq!(next(&mut all), "apply b");
        for s in [&mut a, &mut b, &mut all] {
            assert_eq!(next(s), "nothing");
        }
    }

    /// A file the cluster cannot read, parse or cache must not read as the
    /// deletion of the objects it held: they keep their last good state
    /// until it reads again.
    #[tokio::test]
    async fn a_file_that_cannot_be_read_keeps_its_objects_as_they_were() {
        use futures::{FutureExt, StreamExt};
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.yaml");
        let cm = |name: &str, app: &str| {
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: d, labels: {{app: {app}}}}}\n"
            )
        };
        std::fs::write(&file, cm("c", "a")).unwrap();
        let kinds = KindRegistry::builtin();
        let cluster = LocalCluster::new(
            dir.path().to_owned(),
            kinds.clone(),
            StripOptions::default(),
        )
        .unwrap();
        let kind = kinds
            .resolve(&crate::kind::KindRef::Resource("configmaps".into()))
            .unwrap();
        let mut all = cluster.watch(&InformerSpec {
            kind,
            namespace: None,
            label_selector: None,
            field_selector: None,
        });
        let mut next = || match all.next().now_or_never().flatten() {
            None => "nothing".to_owned(),
            Some(Ok(WatchEvent::Init)) => "init".to_owned(),
            Some(Ok(WatchEvent::InitDone)) => "init-done".to_owned(),
            Some(Ok(WatchEvent::InitApply(o) | WatchEvent::Apply(o))) => {
                format!("apply {} {}", o.name(), o.meta().label("app").unwrap_or(""))
            }
            Some(Ok(WatchEvent::Delete(o))) => format!("delete {}", o.name()),
            Some(other) => format!("{other:?}"),
        };
        assert_eq!(next(), "init");
        assert_eq!(next(), "apply c a");
        assert_eq!(next(), "init-done");
        let gvk = Gvk::new("", "v1", "ConfigMap");
        let app = |cluster: &LocalCluster| {
            cluster
                .get(&gvk, Some("d"), "c")
                .map(|v| v["metadata"]["labels"]["app"].clone())
        };
        for (what, text) in [
            ("not UTF-8", b"apiVersion: v1\nkind: \xff\n".to_vec()),
            ("not YAML", b"apiVersion: v1\nkind: [\n".to_vec()),
            (
                "a label value no informer can cache",
                cm("c", "7").into_bytes(),
            ),
            (
                "a document without a name",
                b"apiVersion: v1\nkind: ConfigMap\nmetadata: {namespace: d}\n".to_vec(),
            ),
        ] {
            std::fs::write(&file, text).unwrap();
            cluster.rescan().unwrap();
            assert_eq!(next(), "nothing", "{what}");
            assert_eq!(app(&cluster), Some(json!("a")), "{what}");
        }
        // Readable again: the change, then a real deletion, come through.
        std::fs::write(&file, cm("c", "b")).unwrap();
        cluster.rescan().unwrap();
        assert_eq!(next(), "apply c b");
        std::fs::remove_file(&file).unwrap();
        cluster.rescan().unwrap();
        assert_eq!(next(), "delete c");
        assert_eq!(next(), "nothing");
        assert!(cluster.is_empty());
    }

    #[tokio::test]
    async fn actions_with_escaping_names_are_refused_and_write_nothing() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("a").join("b").join("cluster");
        std::fs::create_dir_all(&dir).unwrap();
        let kinds = KindRegistry::builtin();
        let cluster =
            LocalCluster::new(dir.clone(), kinds.clone(), StripOptions::default()).unwrap();
        let kind = kinds
            .resolve(&crate::kind::KindRef::Resource("configmaps".into()))
            .unwrap();
        for (ns, name) in [
            ("../../x", "cm"),
            ("default", "../../../x"),
            ("default", "a/b"),
            ("..", "cm"),
        ] {
            let action = Action::Apply {
                target: Target {
                    kind: kind.clone().into(),
                    namespace: Some(ns.into()),
                    name: name.into(),
                    uid: None,
                    preconditions: Default::default(),
                },
                object: json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": name, "namespace": ns}, "data": {"k": "v"}}),
                force: true,
                status: false,
            };
            let err = cluster.execute("p", &action).await.unwrap_err();
            assert!(
                matches!(&err, ActionError::Invalid(m) if m.contains(&format!("{ns}/{name}"))),
                "{ns}/{name}: {err}"
            );
        }
        // Nothing was created anywhere under the root but the cluster folder.
        let mut files = Vec::new();
        walk(root.path(), &mut files).unwrap();
        assert!(files.is_empty(), "{files:?}");
        let mut entries = Vec::new();
        for e in walkdir(root.path()) {
            entries.push(e);
        }
        assert_eq!(
            entries,
            [root.path().join("a"), root.path().join("a/b"), dir.clone()]
        );
    }

    fn walkdir(p: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let mut items: Vec<PathBuf> = std::fs::read_dir(p)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        items.sort();
        for i in items {
            out.push(i.clone());
            if i.is_dir() {
                out.extend(walkdir(&i));
            }
        }
        out
    }

    #[test]
    fn manifests_with_invalid_names_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("m.yaml"),
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok, namespace: default}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: ../escape, namespace: default}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: fine, namespace: ../../x}\n",
        )
        .unwrap();
        let cluster = LocalCluster::new(
            dir.path().to_owned(),
            KindRegistry::builtin(),
            StripOptions::default(),
        )
        .unwrap();
        assert_eq!(cluster.len(), 1);
        assert!(
            cluster
                .get(&Gvk::new("", "v1", "ConfigMap"), Some("default"), "ok")
                .is_some()
        );
    }
}
