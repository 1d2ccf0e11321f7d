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

mod files;
mod lifecycle;

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
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
use lifecycle::{Deletion, FOREGROUND, ORPHAN};

use crate::actions::executor::{ActionError, ActionSink};
use crate::actions::{Action, PatchType, Propagation, Target};
use crate::informer::selector::{FieldSelector, LabelSelector};
use crate::informer::{InformerSpec, Source, SourceError, WatchEvent};
use crate::kind::{Gvk, KindRegistry};
use crate::object::{KObject, ObjectKey, StripOptions};

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

type Id = (Gvk, ObjectKey);

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
            && self.labels.matches(obj.meta())
            && self.fields.matches(obj)
    }
}

/// What the garbage collector does after a write.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Work {
    /// An object is terminating: if it carries the collector's `orphan`
    /// or `foregroundDeletion` finalizer, orphan or delete its dependents,
    /// then drop the finalizer.
    Finalize(Id),
    /// The object with this uid went: its dependents with no owner left
    /// are deleted (background cascading deletion), the others lose their
    /// reference to it.
    Collect(String),
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

/// Objects by uid and by the uids of their owners, for the garbage
/// collector (kept by [`LocalCluster::store`], the one place objects change).
#[derive(Default)]
struct Owners {
    by_uid: HashMap<String, Id>,
    dependents: HashMap<String, BTreeSet<Id>>,
}

impl Owners {
    fn insert(&mut self, id: &Id, v: &Value) {
        if let Some(uid) = lifecycle::uid(v) {
            self.by_uid.insert(uid.to_owned(), id.clone());
        }
        for (owner, _) in lifecycle::owners(v) {
            self.dependents.entry(owner).or_default().insert(id.clone());
        }
    }

    fn remove(&mut self, id: &Id, v: &Value) {
        if let Some(uid) = lifecycle::uid(v)
            && self.by_uid.get(uid) == Some(id)
        {
            self.by_uid.remove(uid);
        }
        for (owner, _) in lifecycle::owners(v) {
            if let Some(deps) = self.dependents.get_mut(&owner) {
                deps.remove(id);
                if deps.is_empty() {
                    self.dependents.remove(&owner);
                }
            }
        }
    }

    fn dependents(&self, owner_uid: &str) -> Vec<Id> {
        self.dependents
            .get(owner_uid)
            .map(|d| d.iter().cloned().collect())
            .unwrap_or_default()
    }
}

#[derive(Default)]
struct State {
    objects: BTreeMap<Id, Entry>,
    owners: Owners,
    rv: u64,
    watchers: Vec<Watcher>,
    /// What each file held when the cluster last read it whole (or wrote
    /// it): a write goes only over that content.
    seen: BTreeMap<PathBuf, Fingerprint>,
    /// Files the last rescan could not take whole (unreadable, unparsable,
    /// or with a document it skipped): never written over.
    unreadable: BTreeSet<PathBuf>,
    /// The garbage collector's pending work, run before a write returns.
    work: VecDeque<Work>,
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

/// [`settle_next`] for a plugin's write, after the checks the server makes
/// on it (preconditions in its body, no new finalizers while terminating).
fn checked_next(target: &Target, stored: &Value, next: Value) -> Result<Next, ActionError> {
    lifecycle::check_body(target, stored, &next)?;
    lifecycle::check_no_new_finalizers(target, stored, &next)?;
    Ok(settle_next(stored, next))
}

fn deletion(stored: &Value, propagation: Propagation) -> Next {
    match lifecycle::delete(stored, propagation) {
        Deletion::Gone => Next::Gone(stored.clone()),
        Deletion::Terminating(v) => Next::Put(v),
        Deletion::AlreadyTerminating => Next::Unchanged,
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
        let deferred = std::mem::take(&mut state.deferred);
        state.work.extend(deferred);
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

    /// One pass over the folder. `false` when a file it had to rewrite
    /// was edited meanwhile (the folder must be read again).
    fn scan(&self, state: &mut State) -> Result<bool, LocalError> {
        let mut files = Vec::new();
        files::walk(&self.dir, &mut files).map_err(|source| LocalError::Read {
            path: self.dir.clone(),
            source,
        })?;
        files.sort();
        let mut found: BTreeMap<Id, (Value, PathBuf)> = BTreeMap::new();
        // Files whose objects are kept as they were when missing from the
        // rescan: what cannot be read might still hold them, and a
        // deletion made up from a read error is what a garbage-collecting
        // plugin acts on.
        let mut broken = BTreeSet::new();
        // Files read whole, and those with a document the cluster did not
        // take (never written over, so nothing of them is lost).
        let mut read: BTreeMap<PathBuf, Fingerprint> = BTreeMap::new();
        let mut refused = BTreeSet::new();
        for file in &files {
            let bytes = match std::fs::read(file) {
                Ok(b) => b,
                // Gone since the walk: its objects went with it.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    let message = format!("cannot read: {e}");
                    if state.reported.get(file) != Some(&message) {
                        tracing::error!(file = %file.display(), error = %e, "cannot read manifest; keeping its objects as they were until it reads");
                        state.reported.insert(file.clone(), message);
                    }
                    broken.insert(file.clone());
                    continue;
                }
            };
            let parsed = std::str::from_utf8(&bytes)
                .map_err(|e| format!("not UTF-8: {e}"))
                .and_then(|text| parse_manifests(file, text));
            match parsed {
                Ok(objs) => {
                    state.reported.remove(file);
                    read.insert(file.clone(), files::fingerprint(&bytes));
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
                            broken.insert(file.clone());
                            refused.insert(file.clone());
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
                            refused.insert(file.clone());
                            continue;
                        }
                        found.insert((gvk, ObjectKey::new(ns, name)), (v, file.clone()));
                    }
                }
                Err(message) => {
                    // A broken file keeps its objects as they were: an editor's
                    // half-saved state must not look like a mass deletion.
                    if state.reported.get(file) != Some(&message) {
                        tracing::error!(file = %file.display(), error = %message, "cannot parse manifest; keeping its objects as they were until it parses");
                        state.reported.insert(file.clone(), message);
                    }
                    broken.insert(file.clone());
                }
            }
        }
        // Documents gone from the folder: deleted as a plugin's delete is
        // (finalizers hold them, detached from their file).
        let existing: Vec<Id> = state.objects.keys().cloned().collect();
        for id in existing {
            let Some(e) = state.objects.get(&id) else {
                continue;
            };
            if found.contains_key(&id) || broken.contains(&e.file) {
                continue;
            }
            let next = deletion(&e.value, Propagation::Background);
            if let Some(e) = state.objects.get_mut(&id) {
                e.detached = true;
            }
            self.store(state, &id, None, next);
        }
        // Files to write again: a document whose object went (its last
        // finalizer removed by hand) leaves the file, or the next read
        // would create the object anew.
        let mut rewrite = BTreeSet::new();
        for (id, (mut value, file)) in found {
            if let Some(ns) = &id.1.namespace {
                value["metadata"]["namespace"] = json!(&**ns);
            }
            let next = match state.objects.get_mut(&id) {
                Some(e) if lifecycle::user_view(&e.value) == lifecycle::user_view(&value) => {
                    e.file = file;
                    e.detached = false;
                    continue;
                }
                Some(e) => {
                    let stored = e.value.clone();
                    if let Err(err) =
                        lifecycle::check_no_new_finalizers(&file.display(), &stored, &value)
                    {
                        if state.reported_names.insert((file.clone(), err.to_string())) {
                            tracing::error!(file = %file.display(), object = %id.1, error = %err, "cannot take an edit the API server would refuse; keeping the object's last good state until it reads");
                        }
                        refused.insert(file);
                        continue;
                    }
                    settle_next(&stored, value)
                }
                None => {
                    lifecycle::create(&mut value, || lifecycle::new_uid().unwrap_or_default());
                    if lifecycle::uid(&value).is_none() {
                        tracing::error!(file = %file.display(), object = %id.1, "cannot draw a random uid; the object is read at the next change");
                        refused.insert(file);
                        continue;
                    }
                    Next::Put(value)
                }
            };
            // What no informer can cache (a label value that is not a
            // string, say) would reach none of them: the object keeps its
            // last good state.
            if let Next::Put(v) | Next::Gone(v) = &next
                && let Err(e) = KObject::from_value(v.clone(), self.strip)
            {
                if state.reported_names.insert((file.clone(), e.to_string())) {
                    tracing::error!(file = %file.display(), object = %id.1, error = %e, "cannot read an object; keeping its last good state until it reads");
                }
                refused.insert(file);
                continue;
            }
            if matches!(next, Next::Gone(_)) {
                rewrite.insert(file.clone());
            }
            self.store(state, &id, Some(&file), next);
            if let Some(e) = state.objects.get_mut(&id) {
                e.file = file;
                e.detached = false;
            }
        }
        state
            .seen
            .retain(|f, _| read.contains_key(f) || broken.contains(f));
        for (file, fp) in read {
            if !refused.contains(&file) {
                state.seen.insert(file, fp);
            }
        }
        state.unreadable = broken.union(&refused).cloned().collect();
        for file in rewrite {
            if refused.contains(&file) {
                continue;
            }
            let text = self
                .render(state, &file, None)
                .map_err(|message| LocalError::Parse {
                    path: file.clone(),
                    message,
                })?;
            let expected = state.seen.get(&file).copied();
            match files::replace(&file, expected, text.as_deref().map(str::as_bytes)) {
                Ok(Swap::Written) => self.wrote(state, &file, text.as_deref()),
                Ok(Swap::Edited) => return Ok(false),
                Err(e) => {
                    tracing::error!(file = %file.display(), error = %e, "cannot write the documents of deleted objects out of a manifest; they come back as new objects if it is read again");
                }
            }
        }
        Ok(true)
    }

    /// Records what the cluster wrote to `file`.
    fn wrote(&self, state: &mut State, file: &Path, text: Option<&str>) {
        match text {
            Some(t) => {
                state
                    .seen
                    .insert(file.to_owned(), files::fingerprint(t.as_bytes()));
            }
            None => {
                state.seen.remove(file);
            }
        }
    }

    /// The text `file` should hold: the documents of the objects living in
    /// it, with `overlay` (an object's next state) applied; `None` when no
    /// object is left.
    fn render(
        &self,
        state: &State,
        file: &Path,
        overlay: Option<(&Id, &Next)>,
    ) -> Result<Option<String>, String> {
        let mut docs: BTreeMap<&Id, &Value> = state
            .objects
            .iter()
            .filter(|(_, e)| e.file == file && !e.detached)
            .map(|(id, e)| (id, &e.value))
            .collect();
        match overlay {
            Some((id, Next::Put(v))) => {
                docs.insert(id, v);
            }
            Some((id, Next::Gone(_))) => {
                docs.remove(id);
            }
            Some((_, Next::Unchanged)) | None => {}
        }
        if docs.is_empty() {
            return Ok(None);
        }
        let docs: Vec<&Value> = docs.into_values().collect();
        files::render(file, &docs).map(Some)
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
                if let Some(old) = &old {
                    state.owners.remove(id, &old.value);
                }
                state.owners.insert(id, &value);
                let (file, detached) = match &old {
                    Some(e) => (e.file.clone(), e.detached),
                    None => (file.map(Path::to_owned).unwrap_or_default(), false),
                };
                let gc = lifecycle::is_terminating(&value)
                    && lifecycle::finalizers(&value)
                        .iter()
                        .any(|f| *f == ORPHAN || *f == FOREGROUND);
                state.objects.insert(
                    id.clone(),
                    Entry {
                        value: value.clone(),
                        file,
                        detached,
                    },
                );
                self.notify(state, &id.0, old.as_ref().map(|e| &e.value), &value, false);
                if gc {
                    state.work.push_back(Work::Finalize(id.clone()));
                }
            }
            Next::Gone(mut value) => {
                state.rv += 1;
                set_rv(&mut value, state.rv);
                let old = state.objects.remove(id);
                if let Some(old) = &old {
                    state.owners.remove(id, &old.value);
                }
                self.notify(state, &id.0, old.as_ref().map(|e| &e.value), &value, true);
                if let Some(uid) = lifecycle::uid(&value) {
                    state.work.push_back(Work::Collect(uid.to_owned()));
                }
                // An owner deleted in the foreground may be waiting for it.
                for (owner, _) in lifecycle::owners(&value) {
                    if let Some(owner) = state.owners.by_uid.get(&owner).cloned()
                        && !state.work.contains(&Work::Finalize(owner.clone()))
                    {
                        state.work.push_back(Work::Finalize(owner));
                    }
                }
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

    /// Whether `file` changed since the cluster last read it; if so, reads
    /// it (a rescan: its edits become deltas before the write is decided
    /// again). A file the rescan could not take whole is not written over.
    fn read_edit(&self, state: &mut State, file: &Path) -> Result<bool, ActionError> {
        let now = files::fingerprint_file(file).map_err(|e| transient(file, e))?;
        if now == state.seen.get(file).copied() && !state.unreadable.contains(file) {
            return Ok(false);
        }
        tracing::info!(file = %file.display(), found = "before-write", "a manifest changed since the local cluster read it: reading the edit first, the write is decided again on top of it");
        self.rescan_locked(state)
            .map_err(|e| ActionError::Transient(e.to_string()))?;
        if state.unreadable.contains(file) {
            return Err(ActionError::Transient(format!(
                "{} holds an edit the local cluster cannot read (its error is logged); not written, so the edit is kept: fix the file",
                file.display()
            )));
        }
        Ok(true)
    }

    /// One object's write, as the API server's storage makes it: `decide`
    /// computes its next state from its current one (`None`: it does not
    /// exist); the file it lives in (`new_file` for a new object) is
    /// written over only the content the cluster last read, and an edit
    /// found there is read first and `decide` asked again.
    fn write_object(
        &self,
        state: &mut State,
        id: &Id,
        new_file: Option<&Path>,
        mut decide: impl FnMut(Option<&Value>) -> Result<Next, ActionError>,
    ) -> Result<(), ActionError> {
        for attempt in 1..=WRITE_ATTEMPTS {
            let (file, detached) = match state.objects.get(id) {
                Some(e) => (Some(e.file.clone()), e.detached),
                None => (new_file.map(Path::to_owned), false),
            };
            let file = file.filter(|_| !detached);
            if let Some(f) = &file
                && self.read_edit(state, f)?
            {
                continue;
            }
            let next = decide(state.objects.get(id).map(|e| &e.value))?;
            if matches!(next, Next::Unchanged) {
                return Ok(());
            }
            if let Some(f) = &file {
                // The file gets the resourceVersion `store` gives next.
                let preview = match &next {
                    Next::Put(v) => {
                        let mut v = v.clone();
                        set_rv(&mut v, state.rv + 1);
                        Next::Put(v)
                    }
                    Next::Gone(_) | Next::Unchanged => Next::Unchanged,
                };
                let overlay = match &next {
                    Next::Gone(_) => &next,
                    _ => &preview,
                };
                let text = self
                    .render(state, f, Some((id, overlay)))
                    .map_err(|e| ActionError::Invalid(format!("{}: {e}", f.display())))?;
                #[cfg(test)]
                if let Some(hook) = self.before_swap.lock().as_mut() {
                    hook(f);
                }
                let expected = state.seen.get(f).copied();
                match files::replace(f, expected, text.as_deref().map(str::as_bytes)) {
                    Ok(Swap::Written) => self.wrote(state, f, text.as_deref()),
                    Ok(Swap::Edited) => {
                        tracing::info!(file = %f.display(), found = "at-swap", attempt, "a manifest was edited while the local cluster wrote it: the edit stays, is read first, and the write is decided again on top of it");
                        self.rescan_locked(state)
                            .map_err(|e| ActionError::Transient(e.to_string()))?;
                        continue;
                    }
                    Err(e) => return Err(transient(f, e)),
                }
            }
            self.store(state, id, file.as_deref(), next);
            return Ok(());
        }
        Err(ActionError::Transient(format!(
            "{id_kind} {key}: its manifest was edited at each of {WRITE_ATTEMPTS} attempts to write it; retried",
            id_kind = id.0.kind,
            key = id.1
        )))
    }

    /// Runs the garbage collector's pending work (each item one or more
    /// writes through [`write_object`](Self::write_object)); an item that
    /// fails is logged and tried again after the next rescan.
    fn run_work(&self, state: &mut State) {
        let mut budget = WORK_BUDGET;
        while let Some(work) = state.work.pop_front() {
            if budget == 0 {
                tracing::error!(dir = %self.dir.display(), "the local cluster's garbage collection did not settle (a cycle of owner references?); the rest is tried after the next change");
                state.deferred.push(work);
                state.deferred.extend(state.work.drain(..));
                return;
            }
            budget -= 1;
            if let Err(e) = self.collect(state, &work) {
                tracing::warn!(work = ?work, error = %e, "local cluster garbage collection failed; tried again after the next change");
                state.deferred.push(work);
            }
        }
    }

    /// One item of the garbage collector's work, as kube-controller-manager's
    /// garbage collector does it.
    fn collect(&self, state: &mut State, work: &Work) -> Result<(), ActionError> {
        match work {
            Work::Finalize(id) => {
                let Some(owner) = state.objects.get(id).map(|e| e.value.clone()) else {
                    return Ok(());
                };
                let Some(uid) = lifecycle::uid(&owner).map(str::to_owned) else {
                    return Ok(());
                };
                if !lifecycle::is_terminating(&owner) {
                    return Ok(());
                }
                let finalizers = lifecycle::finalizers(&owner);
                let gc = if finalizers.contains(&ORPHAN) {
                    ORPHAN
                } else if finalizers.contains(&FOREGROUND) {
                    FOREGROUND
                } else {
                    return Ok(());
                };
                for dep in state.owners.dependents(&uid) {
                    self.write_object(state, &dep, None, |cur| {
                        Ok(match cur {
                            None => Next::Unchanged,
                            // Orphaned: the reference to the owner goes.
                            Some(v) if gc == ORPHAN => {
                                settle_next(v, lifecycle::without_owner(v, &uid))
                            }
                            // Deleted in the foreground too, as the
                            // collector deletes an owner's dependents.
                            Some(v) => deletion(v, Propagation::Foreground),
                        })
                    })?;
                }
                // The owner waits for the dependents that block it.
                let blocked = gc == FOREGROUND
                    && state.owners.dependents(&uid).iter().any(|dep| {
                        state.objects.get(dep).is_some_and(|e| {
                            lifecycle::owners(&e.value)
                                .iter()
                                .any(|(u, block)| *u == uid && *block)
                        })
                    });
                if !blocked {
                    self.write_object(state, id, None, |cur| {
                        Ok(match cur {
                            Some(v) if lifecycle::uid(v) == Some(&uid) => {
                                settle_next(v, lifecycle::without_finalizer(v, gc))
                            }
                            _ => Next::Unchanged,
                        })
                    })?;
                }
                Ok(())
            }
            Work::Collect(owner_uid) => {
                for dep in state.owners.dependents(owner_uid) {
                    let live_owner = state.objects.get(&dep).is_some_and(|e| {
                        lifecycle::owners(&e.value)
                            .iter()
                            .any(|(u, _)| u != owner_uid && state.owners.by_uid.contains_key(u))
                    });
                    self.write_object(state, &dep, None, |cur| {
                        Ok(match cur {
                            None => Next::Unchanged,
                            Some(v) if live_owner => {
                                settle_next(v, lifecycle::without_owner(v, owner_uid))
                            }
                            Some(v) => deletion(v, Propagation::Background),
                        })
                    })?;
                }
                Ok(())
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
            Action::Apply {
                target,
                object,
                status,
                ..
            } => {
                let new_file = self.file_for_new(id, &target.kind.plural)?;
                let applied = if *status {
                    json!({"status": object.get("status").cloned().unwrap_or(Value::Null)})
                } else {
                    object.clone()
                };
                self.write_object(state, id, Some(&new_file), |stored| {
                    lifecycle::check_preconditions(target, stored)?;
                    match stored {
                        None if *status => {
                            Err(ActionError::NotFound(format!("{target} does not exist")))
                        }
                        None => {
                            let mut value = json!({});
                            json_patch::merge(&mut value, &applied);
                            // The server gives a new object its own uid,
                            // whatever the body says.
                            if let Some(meta) =
                                value.get_mut("metadata").and_then(Value::as_object_mut)
                            {
                                meta.remove("uid");
                            }
                            let uid = lifecycle::new_uid().map_err(|e| {
                                ActionError::Transient(format!("cannot draw a random uid: {e}"))
                            })?;
                            lifecycle::create(&mut value, || uid);
                            Ok(Next::Put(value))
                        }
                        Some(stored) => {
                            let mut value = stored.clone();
                            json_patch::merge(&mut value, &applied);
                            checked_next(target, stored, value)
                        }
                    }
                })?;
                tracing::debug!(plugin, target = %target, "local apply");
            }
            Action::Patch {
                target,
                patch_type,
                patch,
            } => {
                let ops: Option<json_patch::Patch> = match patch_type {
                    PatchType::Merge => None,
                    PatchType::Json => Some(
                        serde_json::from_value(patch.clone())
                            .map_err(|e| ActionError::Invalid(format!("bad JSON patch: {e}")))?,
                    ),
                };
                self.write_object(state, id, None, |stored| {
                    let Some(stored) = stored else {
                        return Err(ActionError::NotFound(format!("{target} does not exist")));
                    };
                    lifecycle::check_preconditions(target, Some(stored))?;
                    let mut value = stored.clone();
                    match &ops {
                        None => json_patch::merge(&mut value, patch),
                        Some(ops) => json_patch::patch(&mut value, ops).map_err(|e| match e.kind {
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
                        })?,
                    }
                    checked_next(target, stored, value)
                })?;
            }
            Action::Delete {
                target,
                propagation,
            } => {
                self.write_object(state, id, None, |stored| {
                    let Some(stored) = stored else {
                        return Err(ActionError::NotFound(format!("{target} does not exist")));
                    };
                    lifecycle::check_preconditions(target, Some(stored))?;
                    Ok(deletion(stored, *propagation))
                })?;
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
        files::walk(root.path(), &mut files).unwrap();
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

    /// A cluster over a temporary folder with a watch on every ConfigMap,
    /// for the API-server behaviour tests.
    struct Fixture {
        dir: tempfile::TempDir,
        cluster: Arc<LocalCluster>,
        kind: Arc<crate::kind::KindInfo>,
        watch: BoxStream<'static, Result<WatchEvent, SourceError>>,
    }

    impl Fixture {
        fn new(files: &[(&str, &str)]) -> Self {
            let dir = tempfile::tempdir().unwrap();
            for (rel, text) in files {
                let p = dir.path().join(rel);
                std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                std::fs::write(p, text).unwrap();
            }
            let kinds = KindRegistry::builtin();
            let cluster = LocalCluster::new(
                dir.path().to_owned(),
                kinds.clone(),
                StripOptions::default(),
            )
            .unwrap();
            let kind = Arc::new(
                kinds
                    .resolve(&crate::kind::KindRef::Resource("configmaps".into()))
                    .unwrap(),
            );
            let watch = cluster.watch(&InformerSpec {
                kind: (*kind).clone(),
                namespace: None,
                label_selector: None,
                field_selector: None,
            });
            let mut f = Self {
                dir,
                cluster,
                kind,
                watch,
            };
            f.events();
            f
        }

        fn path(&self, rel: &str) -> PathBuf {
            self.dir.path().join(rel)
        }

        fn text(&self, rel: &str) -> Option<String> {
            std::fs::read_to_string(self.path(rel)).ok()
        }

        fn target(&self, name: &str) -> Target {
            Target::new(self.kind.clone(), Some("d".into()), name)
        }

        fn run(&self, action: Action) -> Result<(), ActionError> {
            self.cluster.apply_action("p", &action)
        }

        fn patch(&self, name: &str, patch: Value) -> Result<(), ActionError> {
            self.run(Action::Patch {
                target: self.target(name),
                patch_type: PatchType::Merge,
                patch,
            })
        }

        fn delete(&self, target: Target) -> Result<(), ActionError> {
            self.run(Action::Delete {
                target,
                propagation: Propagation::Background,
            })
        }

        fn get(&self, name: &str) -> Option<Value> {
            self.cluster
                .get(&Gvk::new("", "v1", "ConfigMap"), Some("d"), name)
        }

        fn meta(&self, name: &str, field: &str) -> Value {
            self.get(name).unwrap()["metadata"][field].clone()
        }

        /// The watch events so far: `apply NAME`, `apply NAME terminating`,
        /// `delete NAME`.
        fn events(&mut self) -> Vec<String> {
            use futures::{FutureExt, StreamExt};
            let mut out = Vec::new();
            while let Some(Some(e)) = self.watch.next().now_or_never() {
                match e.unwrap() {
                    WatchEvent::Apply(o) | WatchEvent::InitApply(o) => out.push(format!(
                        "apply {}{}",
                        o.name(),
                        if o.meta().deletion_timestamp.is_some() {
                            " terminating"
                        } else {
                            ""
                        }
                    )),
                    WatchEvent::Delete(o) => out.push(format!("delete {}", o.name())),
                    _ => {}
                }
            }
            out
        }
    }

    fn cm(name: &str, extra: &str) -> String {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: d\n{extra}"
        )
    }

    const HELD: &str = "  finalizers: [example.com/cleanup]\n";

    #[tokio::test]
    async fn a_delete_waits_for_the_finalizers_and_the_last_one_deletes() {
        let mut f = Fixture::new(&[("c.yaml", &cm("c", HELD))]);
        let generation = f.meta("c", "generation").as_i64().unwrap();
        f.delete(f.target("c")).unwrap();
        assert_eq!(f.events(), ["apply c terminating"]);
        assert!(f.meta("c", "deletionTimestamp").is_string());
        assert_eq!(f.meta("c", "deletionGracePeriodSeconds"), 0);
        assert_eq!(f.meta("c", "generation"), generation + 1);
        assert!(f.text("c.yaml").unwrap().contains("deletionTimestamp"));
        // A delete of a terminating object changes nothing.
        let rv = f.meta("c", "resourceVersion");
        f.delete(f.target("c")).unwrap();
        assert_eq!(f.events(), Vec::<String>::new());
        assert_eq!(f.meta("c", "resourceVersion"), rv);
        // No new finalizer while terminating (the server's 422).
        let e = f
            .patch(
                "c",
                json!({"metadata": {"finalizers": ["example.com/cleanup", "x/y"]}}),
            )
            .unwrap_err();
        assert!(
            matches!(&e, ActionError::Invalid(m) if m.contains("no new finalizers")),
            "{e}"
        );
        // Other writes go through; the deletionTimestamp cannot be unset.
        f.patch(
            "c",
            json!({"metadata": {"deletionTimestamp": null, "labels": {"a": "b"}}}),
        )
        .unwrap();
        assert_eq!(f.events(), ["apply c terminating"]);
        // The last finalizer removed (as the SDK does, a JSON patch with
        // preconditions): a delete, and the document leaves the folder.
        let mut target = f.target("c");
        target.preconditions.resource_version =
            Some(f.meta("c", "resourceVersion").as_str().unwrap().to_owned());
        f.run(Action::Patch {
            target,
            patch_type: PatchType::Json,
            patch: json!([{"op": "remove", "path": "/metadata/finalizers/0"}]),
        })
        .unwrap();
        assert_eq!(f.events(), ["delete c"]);
        assert!(f.get("c").is_none());
        assert!(!f.path("c.yaml").exists());
    }

    #[tokio::test]
    async fn a_removed_file_deletes_gracefully_and_is_not_written_back() {
        let two = format!("{}---\n{}", cm("held", HELD), cm("free", ""));
        let mut f = Fixture::new(&[("two.yaml", &two)]);
        std::fs::remove_file(f.path("two.yaml")).unwrap();
        f.cluster.rescan().unwrap();
        let mut events = f.events();
        events.sort();
        assert_eq!(events, ["apply held terminating", "delete free"]);
        // The terminating object lives on in memory; a write to it does not
        // bring its file back.
        f.patch("held", json!({"data": {"k": "v"}})).unwrap();
        assert_eq!(f.events(), ["apply held terminating"]);
        assert!(!f.path("two.yaml").exists());
        f.cluster.rescan().unwrap();
        assert_eq!(
            f.events(),
            Vec::<String>::new(),
            "its absence is not deleted again"
        );
        // A new object written to that file's path meanwhile does not carry it.
        std::fs::write(f.path("two.yaml"), cm("other", "")).unwrap();
        f.cluster.rescan().unwrap();
        f.patch("other", json!({"data": {"k": "v"}})).unwrap();
        assert!(!f.text("two.yaml").unwrap().contains("held"));
        assert_eq!(f.events(), ["apply other", "apply other"]);
        // Its finalizer removed: gone, nothing written.
        f.patch("held", json!({"metadata": {"finalizers": null}}))
            .unwrap();
        assert_eq!(f.events(), ["delete held"]);
        assert!(f.get("held").is_none());
    }

    #[tokio::test]
    async fn a_document_put_back_updates_the_terminating_object() {
        let mut f = Fixture::new(&[("c.yaml", &cm("c", HELD))]);
        let uid = f.meta("c", "uid");
        std::fs::remove_file(f.path("c.yaml")).unwrap();
        f.cluster.rescan().unwrap();
        assert_eq!(f.events(), ["apply c terminating"]);
        std::fs::write(
            f.path("c.yaml"),
            cm("c", &format!("{HELD}data: {{k: back}}\n")),
        )
        .unwrap();
        f.cluster.rescan().unwrap();
        assert_eq!(f.events(), ["apply c terminating"]);
        assert_eq!(f.meta("c", "uid"), uid);
        assert_eq!(f.get("c").unwrap()["data"]["k"], "back");
        // Attached again: the finalizer removed by hand in the file deletes
        // it, and its document leaves the file (or it would come back).
        std::fs::write(
            f.path("c.yaml"),
            cm("c", "  finalizers: []\ndata: {k: back}\n"),
        )
        .unwrap();
        f.cluster.rescan().unwrap();
        assert_eq!(f.events(), ["delete c"]);
        assert!(!f.path("c.yaml").exists());
        f.cluster.rescan().unwrap();
        assert_eq!(f.events(), Vec::<String>::new());
    }

    #[tokio::test]
    async fn uids_are_new_for_a_recreated_object_and_kept_from_a_manifest() {
        let mut f = Fixture::new(&[
            ("c.yaml", &cm("c", "")),
            (
                "given.yaml",
                &cm("given", "  uid: 1b4e28ba-2fa1-41d2-883f-0016d3cca427\n"),
            ),
        ]);
        assert_eq!(
            f.meta("given", "uid"),
            "1b4e28ba-2fa1-41d2-883f-0016d3cca427"
        );
        let first = f.meta("c", "uid");
        assert!(f.meta("c", "creationTimestamp").is_string());
        std::fs::remove_file(f.path("c.yaml")).unwrap();
        f.cluster.rescan().unwrap();
        std::fs::write(f.path("c.yaml"), cm("c", "")).unwrap();
        f.cluster.rescan().unwrap();
        assert_eq!(f.events(), ["delete c", "apply c"]);
        let second = f.meta("c", "uid");
        assert_ne!(first, second);
        // A uid precondition from the first incarnation fails (409), the
        // same for a resourceVersion one, and the object stays.
        let mut stale = f.target("c");
        stale.preconditions.uid = Some(first.as_str().unwrap().to_owned());
        let e = f.delete(stale).unwrap_err();
        assert!(
            e.is_conflict() && e.to_string().contains("UID in precondition"),
            "{e}"
        );
        let mut stale = f.target("c");
        stale.preconditions.resource_version = Some("1".into());
        assert!(f.delete(stale).unwrap_err().is_conflict());
        assert!(f.get("c").is_some());
        let mut current = f.target("c");
        current.preconditions.uid = Some(second.as_str().unwrap().to_owned());
        f.delete(current).unwrap();
        assert_eq!(f.events(), ["delete c"]);
        // A plugin's apply creating it again gives it a new uid too, whatever
        // its body says.
        f.run(Action::Apply {
            target: f.target("c"),
            object: json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "c", "namespace": "d", "uid": second}}),
            force: true,
            status: false,
        })
        .unwrap();
        let third = f.meta("c", "uid");
        assert!(third != first && third != second, "{third}");
    }

    #[tokio::test]
    async fn generation_and_resource_version_move_as_on_the_server() {
        let mut f = Fixture::new(&[("c.yaml", &cm("c", "spec: {n: 1}\n"))]);
        let state = |f: &Fixture| {
            (
                f.meta("c", "generation").as_i64().unwrap(),
                f.meta("c", "resourceVersion")
                    .as_str()
                    .unwrap()
                    .parse::<u64>()
                    .unwrap(),
            )
        };
        let (g, rv) = state(&f);
        assert_eq!(g, 1);
        f.patch("c", json!({"spec": {"n": 2}})).unwrap();
        assert_eq!(state(&f), (2, rv + 1));
        f.patch("c", json!({"metadata": {"labels": {"a": "b"}}}))
            .unwrap();
        assert_eq!(state(&f), (2, rv + 2));
        f.run(Action::Apply {
            target: f.target("c"),
            object: json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "c", "namespace": "d"}, "status": {"ok": true}}),
            force: true,
            status: true,
        })
        .unwrap();
        assert_eq!(state(&f), (2, rv + 3));
        assert_eq!(f.events().len(), 3);
        // A write that changes nothing stores nothing.
        f.patch("c", json!({"spec": {"n": 2}})).unwrap();
        assert_eq!(state(&f), (2, rv + 3));
        assert_eq!(f.events(), Vec::<String>::new());
        // A hand edit is a write too.
        let text = f.text("c.yaml").unwrap().replace("n: 2", "n: 3");
        std::fs::write(f.path("c.yaml"), text).unwrap();
        f.cluster.rescan().unwrap();
        assert_eq!(state(&f), (3, rv + 4));
    }

    #[tokio::test]
    async fn an_edit_made_before_a_write_is_read_first() {
        let mut f = Fixture::new(&[("c.yaml", &cm("c", "data: {a: '1'}\n"))]);
        let rv = f.meta("c", "resourceVersion").as_str().unwrap().to_owned();
        // Edited, not read yet (the folder watcher has not fired).
        std::fs::write(f.path("c.yaml"), cm("c", "data: {a: '1', edit: yes}\n")).unwrap();
        // A write that expects the old resourceVersion: the edit is read,
        // and the write fails as on the server (409).
        let mut stale = f.target("c");
        stale.preconditions.resource_version = Some(rv.clone());
        let e = f
            .run(Action::Patch {
                target: stale,
                patch_type: PatchType::Merge,
                patch: json!({"data": {"plugin": "x"}}),
            })
            .unwrap_err();
        assert!(e.is_conflict(), "{e}");
        assert_eq!(f.events(), ["apply c"], "the edit reached the watchers");
        assert!(f.text("c.yaml").unwrap().contains("edit: yes"));
        // Without a precondition, the patch is applied over the edit.
        std::fs::write(
            f.path("c.yaml"),
            cm("c", "data: {a: '1', edit: yes, more: yes}\n"),
        )
        .unwrap();
        f.patch("c", json!({"data": {"plugin": "x"}})).unwrap();
        assert_eq!(f.events(), ["apply c", "apply c"]);
        let data = f.get("c").unwrap()["data"].clone();
        assert_eq!(
            data,
            json!({"a": "1", "edit": "yes", "more": "yes", "plugin": "x"})
        );
        let on_disk = parse_manifests(Path::new("c.yaml"), &f.text("c.yaml").unwrap()).unwrap();
        assert_eq!(on_disk[0]["data"], data);
    }

    #[tokio::test]
    async fn an_edit_saved_while_the_cluster_writes_is_kept_and_the_write_redone_over_it() {
        for precondition in [false, true] {
            let mut f = Fixture::new(&[("c.yaml", &cm("c", "data: {a: '1'}\n"))]);
            let rv = f.meta("c", "resourceVersion").as_str().unwrap().to_owned();
            // The edit lands after the write's check, before its swap, once.
            let edit = cm("c", "data: {a: '1', edit: yes}\n");
            let mut once = Some(edit.clone());
            *f.cluster.before_swap.lock() = Some(Box::new(move |file: &Path| {
                if let Some(text) = once.take() {
                    std::fs::write(file, text).unwrap();
                }
            }));
            let mut target = f.target("c");
            if precondition {
                target.preconditions.resource_version = Some(rv);
            }
            let r = f.run(Action::Patch {
                target,
                patch_type: PatchType::Merge,
                patch: json!({"data": {"plugin": "x"}}),
            });
            let on_disk = parse_manifests(Path::new("c.yaml"), &f.text("c.yaml").unwrap()).unwrap();
            let data = f.get("c").unwrap()["data"].clone();
            assert_eq!(on_disk[0]["data"], data, "the folder and the cluster agree");
            if precondition {
                assert!(r.unwrap_err().is_conflict());
                assert_eq!(data, json!({"a": "1", "edit": "yes"}));
                assert_eq!(f.events(), ["apply c"]);
            } else {
                r.unwrap();
                assert_eq!(data, json!({"a": "1", "edit": "yes", "plugin": "x"}));
                assert_eq!(f.events(), ["apply c", "apply c"]);
            }
            let hidden: Vec<_> = std::fs::read_dir(f.dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .filter(|n| n.to_string_lossy().starts_with('.'))
                .collect();
            assert!(hidden.is_empty(), "{hidden:?}");
        }
    }

    #[tokio::test]
    async fn a_file_holding_what_the_cluster_cannot_read_is_never_written() {
        let text = format!("{}---\n{}", cm("c", ""), cm("Not_Valid", ""));
        let f = Fixture::new(&[("c.yaml", &text)]);
        let e = f.patch("c", json!({"data": {"k": "v"}})).unwrap_err();
        assert!(e.transient() && e.to_string().contains("c.yaml"), "{e}");
        assert_eq!(f.text("c.yaml").unwrap(), text);
        // Half-saved: the same until it parses.
        std::fs::write(f.path("c.yaml"), "apiVersion: v1\nkind: [\n").unwrap();
        assert!(
            f.patch("c", json!({"data": {"k": "v"}}))
                .unwrap_err()
                .transient()
        );
        std::fs::write(f.path("c.yaml"), cm("c", "")).unwrap();
        f.patch("c", json!({"data": {"k": "v"}})).unwrap();
        assert!(f.text("c.yaml").unwrap().contains("k: v"));
    }

    #[tokio::test]
    async fn json_manifests_are_written_as_json() {
        let f = Fixture::new(&[(
            "c.json",
            r#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "d"}}"#,
        )]);
        f.patch("c", json!({"data": {"k": "v"}})).unwrap();
        let v: Value = serde_json::from_str(&f.text("c.json").unwrap()).unwrap();
        assert_eq!(v["data"]["k"], "v");
    }

    fn owned(name: &str, owners: &[(&str, bool)], extra: &str) -> String {
        let refs: Vec<String> = owners
            .iter()
            .map(|(uid, block)| {
                format!("{{apiVersion: v1, kind: ConfigMap, name: o, uid: {uid}, blockOwnerDeletion: {block}}}")
            })
            .collect();
        cm(
            name,
            &format!("  ownerReferences: [{}]\n{extra}", refs.join(", ")),
        )
    }

    #[tokio::test]
    async fn background_deletion_collects_dependents_with_no_owner_left() {
        let mut f = Fixture::new(&[
            ("o.yaml", &cm("o", "  uid: owner-1\n")),
            ("p.yaml", &cm("p", "  uid: owner-2\n")),
            ("a.yaml", &owned("a", &[("owner-1", false)], "")),
            (
                "b.yaml",
                &owned("b", &[("owner-1", false), ("owner-2", false)], ""),
            ),
            ("held.yaml", &owned("held", &[("owner-1", false)], HELD)),
            (
                "grandchild.yaml",
                &cm(
                    "g",
                    "  ownerReferences: [{apiVersion: v1, kind: ConfigMap, name: a, uid: child-a}]\n",
                ),
            ),
        ]);
        // a's uid is random: point the grandchild at it.
        let a_uid = f.meta("a", "uid");
        let text = f
            .text("grandchild.yaml")
            .unwrap()
            .replace("child-a", a_uid.as_str().unwrap());
        std::fs::write(f.path("grandchild.yaml"), text).unwrap();
        f.cluster.rescan().unwrap();
        f.events();
        f.delete(f.target("o")).unwrap();
        let mut events = f.events();
        events.sort();
        assert_eq!(
            events,
            [
                "apply b",
                "apply held terminating",
                "delete a",
                "delete g",
                "delete o"
            ]
        );
        // b keeps its other owner and loses the reference to the gone one.
        assert_eq!(
            lifecycle::owners(&f.get("b").unwrap()),
            [("owner-2".to_owned(), false)]
        );
        for gone in ["o.yaml", "a.yaml", "grandchild.yaml"] {
            assert!(!f.path(gone).exists(), "{gone}");
        }
    }

    #[tokio::test]
    async fn foreground_deletion_waits_for_blocking_dependents() {
        let mut f = Fixture::new(&[
            ("o.yaml", &cm("o", "  uid: owner-1\n")),
            (
                "blocker.yaml",
                &owned("blocker", &[("owner-1", true)], HELD),
            ),
            ("free.yaml", &owned("free", &[("owner-1", false)], "")),
        ]);
        f.run(Action::Delete {
            target: f.target("o"),
            propagation: Propagation::Foreground,
        })
        .unwrap();
        // The dependents are deleted in the foreground too (the collector's
        // finalizer added, then dropped once they have no dependents).
        let mut events = f.events();
        events.sort();
        assert_eq!(
            events,
            [
                "apply blocker terminating",
                "apply blocker terminating",
                "apply free terminating",
                "apply o terminating",
                "delete free"
            ]
        );
        assert_eq!(lifecycle::finalizers(&f.get("o").unwrap()), [FOREGROUND]);
        assert_eq!(
            lifecycle::finalizers(&f.get("blocker").unwrap()),
            ["example.com/cleanup"]
        );
        // The owner goes once its blocking dependent has.
        f.patch("blocker", json!({"metadata": {"finalizers": null}}))
            .unwrap();
        assert_eq!(f.events(), ["delete blocker", "delete o"]);
        assert!(f.get("o").is_none());
    }

    #[tokio::test]
    async fn orphan_deletion_drops_the_references_and_keeps_the_dependents() {
        let mut f = Fixture::new(&[
            ("o.yaml", &cm("o", "  uid: owner-1\n")),
            ("a.yaml", &owned("a", &[("owner-1", true)], "")),
        ]);
        f.run(Action::Delete {
            target: f.target("o"),
            propagation: Propagation::Orphan,
        })
        .unwrap();
        assert_eq!(f.events(), ["apply o terminating", "apply a", "delete o"]);
        assert!(
            f.get("a").unwrap()["metadata"]
                .get("ownerReferences")
                .is_none()
        );
        assert!(!f.text("a.yaml").unwrap().contains("ownerReferences"));
    }
}
