//! The embedded local cluster: a folder of YAML/JSON manifests treated as a
//! cluster. Editing files produces the deltas a real watch would; plugins'
//! actions are applied back into the folder. It serves the same informers,
//! cache, dispatcher and executor as a real API server, and treats objects
//! as the API server does where a controller can tell ([`lifecycle`]):
//! random uids (a manifest's `uid:` kept), resourceVersion on every write,
//! generation on spec changes, no-op writes that change nothing, deletion
//! with finalizers (a deletionTimestamp, then the delete when the last
//! finalizer goes), preconditions, and the garbage collector's cascading
//! deletion by owner references (background, foreground, orphan).
//!
//! The folder is the cluster's storage and the user's too, so no hand
//! edit is ever lost ([`files`]): a write goes only over the content the
//! cluster last read from the file; an edit found instead (before the
//! write, or by the atomic swap that writes it) is read first, and the
//! action is decided again on top of it, as the API server decides a write
//! that raced another: a write with a resourceVersion precondition fails
//! with a conflict (409) and the plugin's next attempt sees the edit; one
//! without (server-side apply, merge and JSON patches, deletes) is applied
//! to the edited object, as the server applies a patch to the latest
//! state. A file that holds something the cluster cannot read (a parse
//! error, a document it skips) is not written at all until it reads: the
//! writes to its objects fail as transient, naming it.
//!
//! Removing a document (or its file) deletes its object through the same
//! path as a plugin's delete: with finalizers it stays, terminating, in
//! the cluster's memory only, and no later write brings its document back
//! into the folder (another document of the file written later is written
//! without it); it goes when its finalizers are removed. Putting the
//! document back meanwhile updates the terminating object (it cannot be
//! undeleted, as on the server).
//!
//! Simplifications, on purpose: server-side apply is a JSON merge of the
//! applied object (no field ownership), there is no admission, and Events
//! are appended to `events.log` in the folder.

pub(crate) mod files;
pub(crate) mod lifecycle;
mod scan;
mod write;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub use files::parse_manifests;
use files::{Fingerprint, Swap};
use sim::gc::{Collector, Work};

use crate::actions::executor::{ActionError, ActionSink};
use crate::actions::{Action, Propagation};
use crate::informer::selector::{FieldSelector, LabelSelector};
use crate::informer::{InformerSpec, Source, SourceError, WatchEvent};
use crate::kind::{Gvk, KindRegistry};
use crate::object::{KObject, ObjectKey, StripOptions};
use crate::sim;

/// The file events of the local cluster are appended to.
pub const EVENTS_LOG: &str = "events.log";

/// How many times one write is decided again over edits found at the
/// write before it fails as transient (the executor retries it).
const WRITE_ATTEMPTS: usize = 8;

/// How many times a rescan reads the folder again when a file it rewrites
/// was edited meanwhile.
const RESCAN_ROUNDS: usize = 8;

/// The garbage collector's work items run after one write, at most
/// (against a cycle of owner references).
const WORK_BUDGET: usize = 100_000;

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

type Id = sim::gc::Id;

#[derive(Debug, Clone)]
struct Entry {
    /// Full object, including the fields the cluster assigns.
    value: Value,
    file: PathBuf,
    /// Its document left `file` (removed by hand) while finalizers hold
    /// it: it lives in memory only and is never written back.
    detached: bool,
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
            && self.labels.matches(obj)
            && self.fields.matches(obj)
    }
}

/// What one write does to an object.
#[derive(Debug)]
enum Next {
    /// Nothing (a write that changes nothing is not stored, as on the
    /// server: no resourceVersion, no event).
    Unchanged,
    /// Its next state (the cluster's fields set but resourceVersion).
    Put(Value),
    /// It goes; its final state.
    Gone(Value),
}

#[derive(Default)]
struct State {
    objects: BTreeMap<Id, Entry>,
    rv: u64,
    watchers: Vec<Watcher>,
    /// What each file held when the cluster last read it whole (or wrote
    /// it): a write goes only over that content.
    seen: BTreeMap<PathBuf, Fingerprint>,
    /// Files the last rescan could not take whole (unreadable, unparsable,
    /// or with a document it skipped): never written over.
    unreadable: BTreeSet<PathBuf>,
    /// The garbage collector's index and pending work, run before a
    /// write returns.
    gc: Collector,
    /// Work that failed (a file that cannot be written now), tried again
    /// after the next rescan.
    deferred: Vec<Work>,
    /// Parse errors already reported, so a broken file is logged once.
    reported: BTreeMap<PathBuf, String>,
    /// Invalid objects already reported (file and error), logged once.
    reported_names: BTreeSet<(PathBuf, String)>,
}

/// Called between a write's check and its swap (tests make an edit there).
#[cfg(test)]
type SwapHook = Box<dyn FnMut(&Path) + Send>;

/// A folder-backed cluster.
pub struct LocalCluster {
    dir: PathBuf,
    kinds: KindRegistry,
    strip: StripOptions,
    state: Mutex<State>,
    #[cfg(test)]
    before_swap: Mutex<Option<SwapHook>>,
}

impl std::fmt::Debug for LocalCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalCluster")
            .field("dir", &self.dir)
            .finish()
    }
}

fn transient(file: &Path, e: impl std::fmt::Display) -> ActionError {
    ActionError::Transient(format!("cannot write {}: {e}", file.display()))
}

fn set_rv(v: &mut Value, rv: u64) {
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("resourceVersion".into(), json!(rv.to_string()));
    }
}

/// A write's result over `stored` as the server stores it: the cluster's
/// fields carried, nothing stored when nothing changed, the object gone
/// when it is terminating and its last finalizer went.
fn settle_next(stored: &Value, mut next: Value) -> Next {
    lifecycle::carry_system_fields(stored, &mut next);
    if next == *stored {
        Next::Unchanged
    } else if lifecycle::finalized(&next) {
        Next::Gone(next)
    } else {
        Next::Put(next)
    }
}

/// A delete of `stored` as the server does it (this cluster's garbage
/// collector finishes foreground and orphan deletions).
fn deletion(stored: &Value, propagation: Propagation) -> Next {
    next_of(sim::deletion::delete(
        std::time::SystemTime::now(),
        true,
        stored,
        propagation,
    ))
}

fn next_of(outcome: sim::Outcome) -> Next {
    match outcome {
        sim::Outcome::Unchanged => Next::Unchanged,
        sim::Outcome::Put(v) => Next::Put(v),
        sim::Outcome::Gone(v) => Next::Gone(v),
    }
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
            #[cfg(test)]
            before_swap: Mutex::new(None),
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

    /// The current object, as the cluster holds it (a terminating object
    /// whose document was removed too, until its finalizers go).
    pub fn get(&self, gvk: &Gvk, namespace: Option<&str>, name: &str) -> Option<Value> {
        self.state
            .lock()
            .objects
            .get(&(gvk.clone(), ObjectKey::new(namespace, name)))
            .map(|e| e.value.clone())
    }

    /// Reads every manifest and turns differences with the state into
    /// events, then runs the garbage collection they call for.
    pub fn rescan(&self) -> Result<(), LocalError> {
        let mut state = self.state.lock();
        self.rescan_locked(&mut state)?;
        for work in std::mem::take(&mut state.deferred) {
            state.gc.defer(work);
        }
        self.run_work(&mut state);
        Ok(())
    }

    fn rescan_locked(&self, state: &mut State) -> Result<(), LocalError> {
        for _ in 0..RESCAN_ROUNDS {
            if self.scan(state)? {
                return Ok(());
            }
        }
        tracing::warn!(dir = %self.dir.display(), "local cluster files kept changing while they were read; they are read again at the next change");
        Ok(())
    }

    /// Applies a decided write to the state: a new resourceVersion, the
    /// watchers told, the garbage collector's follow-up queued. `file` is
    /// where a new object lives.
    fn store(&self, state: &mut State, id: &Id, file: Option<&Path>, next: Next) {
        match next {
            Next::Unchanged => {}
            Next::Put(mut value) => {
                state.rv += 1;
                set_rv(&mut value, state.rv);
                let old = state.objects.get(id).cloned();
                state.gc.stored(id, old.as_ref().map(|e| &e.value), &value);
                let (file, detached) = match &old {
                    Some(e) => (e.file.clone(), e.detached),
                    None => (file.map(Path::to_owned).unwrap_or_default(), false),
                };
                state.objects.insert(
                    id.clone(),
                    Entry {
                        value: value.clone(),
                        file,
                        detached,
                    },
                );
                self.notify(state, &id.0, old.as_ref().map(|e| &e.value), &value, false);
                state
                    .gc
                    .follow(id, old.as_ref().map(|e| &e.value), &value, false);
            }
            Next::Gone(mut value) => {
                state.rv += 1;
                set_rv(&mut value, state.rv);
                let old = state.objects.remove(id);
                state.gc.removed(id, &value);
                self.notify(state, &id.0, old.as_ref().map(|e| &e.value), &value, true);
                state
                    .gc
                    .follow(id, old.as_ref().map(|e| &e.value), &value, true);
            }
        }
    }

    /// Tells each watcher what the API server's watch would: an update
    /// that makes an object stop matching a watcher's selectors is a
    /// delete there (carrying the object as it is now), one that makes it
    /// start matching an add; a delete reaches the watchers the object
    /// matched before or after its last write.
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
                (true, true, _) | (true, _, true) | (false, false, true) => WatchEvent::Delete(o),
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
        // A rescan first, then one per batch of events: what changed between
        // the first read and this watch has no event, so the watch rescans
        // once it is in place, as an informer lists after it starts
        // watching (a file removed in that gap stayed in the cluster until
        // the next change, which a test saw under load).
        loop {
            if let Err(e) = self.rescan() {
                tracing::error!(error = %e, "local cluster rescan failed");
            }
            tokio::select! {
                () = cancel.cancelled() => break,
                r = rx.recv() => if r.is_none() { break },
            }
            while rx.try_recv().is_ok() {}
        }
        drop(debouncer);
        Ok(())
    }

    /// Runs the garbage collector's pending work ([`sim::gc`]): its
    /// writes go through the plugins' write path; an item whose write
    /// fails is logged and tried again after the next rescan.
    fn run_work(&self, state: &mut State) {
        let mut budget = WORK_BUDGET;
        while let Some(work) = state.gc.next_work() {
            if budget == 0 {
                tracing::error!(dir = %self.dir.display(), "the local cluster's garbage collection did not settle (a cycle of owner references?); the rest is tried after the next change");
                state.deferred.push(work);
                while let Some(w) = state.gc.next_work() {
                    state.deferred.push(w);
                }
                return;
            }
            budget -= 1;
            let objects = &state.objects;
            let actions = state.gc.plan(&self.kinds, &work, &|id| {
                objects.get(id).map(|e| e.value.clone())
            });
            for action in actions {
                let id = (
                    action.target().kind.gvk.clone(),
                    ObjectKey::new(action.target().namespace.as_deref(), &action.target().name),
                );
                if let Err(e) = self.apply_locked(state, sim::gc::ACTOR, &action, &id) {
                    if e.is_conflict() || matches!(e, ActionError::NotFound(_)) {
                        // The object changed or went meanwhile: what
                        // followed that queued its own work.
                        continue;
                    }
                    tracing::warn!(work = ?work, error = %e, "local cluster garbage collection failed; tried again after the next change");
                    state.deferred.push(work.clone());
                }
            }
        }
    }

    fn apply_action(&self, plugin: &str, action: &Action) -> Result<(), ActionError> {
        // Checked here too, whoever built the action: a namespace or name
        // becomes a path in the folder.
        let target = action.target();
        crate::names::validate_object(
            &target.kind.gvk.kind,
            target.namespace.as_deref(),
            &target.name,
        )
        .map_err(|e| ActionError::Invalid(format!("{target}: {e}")))?;
        let id = (
            target.kind.gvk.clone(),
            ObjectKey::new(target.namespace.as_deref(), &target.name),
        );
        let mut state = self.state.lock();
        let result = self.apply_locked(&mut state, plugin, action, &id);
        // Whatever the write's outcome, what it (or an edit read on its
        // way) left to the garbage collector runs now.
        self.run_work(&mut state);
        result
    }

    fn apply_locked(
        &self,
        state: &mut State,
        plugin: &str,
        action: &Action,
        id: &Id,
    ) -> Result<(), ActionError> {
        match action {
            Action::Apply { target, .. }
            | Action::Patch { target, .. }
            | Action::Delete { target, .. } => {
                let new_file = match action {
                    Action::Apply { .. } => Some(self.file_for_new(id, &target.kind.plural)?),
                    _ => None,
                };
                let manager = sim::gc::field_manager(plugin);
                let ctx = sim::Context {
                    kinds: &self.kinds,
                    now: std::time::SystemTime::now(),
                    garbage_collector: true,
                    validator: &sim::OpenApi,
                    manager: &manager,
                };
                self.write_object(state, id, new_file.as_deref(), |stored| {
                    let mut uid = || {
                        lifecycle::new_uid().map_err(|e| {
                            ActionError::Transient(format!("cannot draw a random uid: {e}"))
                        })
                    };
                    sim::write(&ctx, action, stored, &mut uid).map(next_of)
                })?;
                tracing::debug!(plugin, target = %target, verb = action.operation(), "local write");
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
                    "eventTime": lifecycle::now_rfc3339(),
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
                    })?;
            }
        }
        Ok(())
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

#[cfg(test)]
mod tests;
