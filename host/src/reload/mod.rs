//! The watched plugin folder: one plugin is `NAME.wasm` plus an optional
//! sidecar `NAME.yaml`. Every change triggers a rescan that compares content
//! hashes, so editors' temp files, half-written files and Kubernetes
//! ConfigMap volumes (which swap a `..data` symlink) all converge on what is
//! really there. A version that fails to load leaves the previous one
//! serving. Writes in place are debounced (200 ms: a half-written file
//! settles first); a rename into the folder is a finished write (how
//! `kubewasm compile` users, editors and ConfigMap volumes ship files), so
//! it is scanned at once: a precompiled plugin swaps in within milliseconds.

pub mod internal_events;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::event::{ModifyKind, RenameMode};
use notify::{EventKind, RecursiveMode, Watcher as _};
use notify_debouncer_full::{DebounceEventResult, new_debouncer};
use sha2::{Digest, Sha256};
use tokio::sync::{Mutex, mpsc};
use tokio_util::sync::CancellationToken;

use crate::manager::PluginHost;
use crate::origin::Origin;
use crate::runtime::manifest::ManifestError;
use crate::runtime::{Content, LoadError, Manifest};
use crate::telemetry::Telemetry;
use internal_events::{PluginLoadFailed, PluginLoaded};

#[derive(Debug, thiserror::Error)]
pub enum DirError {
    #[error(
        "cannot read plugin folder {path}: {source} (create it, or pass --plugins with an existing folder)"
    )]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot watch plugin folder {path}: {message}")]
    Watch { path: PathBuf, message: String },
}

/// What a scan did to one plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Loaded,
    Replaced,
    Unloaded,
    /// The file could not be loaded; the previous version (if any) serves.
    Failed(String),
}

/// Where a plugin file stands, for readiness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FileState {
    /// Seen, its first version not loaded yet.
    Loading,
    /// A version runs.
    Loaded,
    /// It could not be loaded and no version runs; the error was logged.
    Broken,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Known {
    Running(String),
    Failed(String),
}

/// The plugin folder and what it has loaded.
pub struct PluginDir {
    dir: PathBuf,
    host: Arc<PluginHost>,
    known: Mutex<BTreeMap<String, Known>>,
    running: Mutex<BTreeMap<String, String>>,
    /// Plugins whose current file could not be loaded, with the error.
    failed: parking_lot::Mutex<BTreeMap<String, String>>,
    /// Plugins refused for naming a kind the cluster does not serve, with
    /// the kind registry's generation then: retried when it moves.
    awaiting_kinds: parking_lot::Mutex<BTreeMap<String, u64>>,
    /// Plugins refused because a Plugin object holds their name: loaded
    /// again once it is free (the object deleted or renamed).
    awaiting_names: parking_lot::Mutex<std::collections::BTreeSet<String>>,
    /// Readable without waiting for a scan in progress.
    states: parking_lot::Mutex<BTreeMap<String, FileState>>,
    telemetry: Telemetry,
    /// How long writes in place settle before a scan, in milliseconds
    /// (renames do not wait).
    debounce_ms: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for PluginDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginDir").field("dir", &self.dir).finish()
    }
}

/// The plugin files of `dir` by plugin name (the file stem); also what
/// `kubewasm rbac` loads.
pub(crate) fn candidates(dir: &Path) -> Result<BTreeMap<String, PathBuf>, DirError> {
    let entries = std::fs::read_dir(dir).map_err(|source| DirError::Read {
        path: dir.to_owned(),
        source,
    })?;
    let mut out = BTreeMap::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let Some(file) = path.file_name().and_then(|f| f.to_str()) else {
            continue;
        };
        // Hidden entries are editors' temp files or ConfigMap internals
        // (`..data`, `..2026_11_22...`): the visible names resolve through them.
        if file.starts_with('.') {
            continue;
        }
        if let Some(stem) = file.strip_suffix(".wasm")
            && !stem.is_empty()
        {
            out.insert(stem.to_owned(), path);
        }
    }
    Ok(out)
}

impl PluginDir {
    /// Loads the plugins in `dir` into `host`, counting loads and failures
    /// into the host's telemetry.
    pub fn new(dir: PathBuf, host: Arc<PluginHost>) -> Self {
        let telemetry = host.telemetry().clone();
        Self {
            dir,
            host,
            known: Mutex::new(BTreeMap::new()),
            running: Mutex::new(BTreeMap::new()),
            failed: parking_lot::Mutex::new(BTreeMap::new()),
            awaiting_kinds: parking_lot::Mutex::new(BTreeMap::new()),
            awaiting_names: parking_lot::Mutex::new(std::collections::BTreeSet::new()),
            states: parking_lot::Mutex::new(BTreeMap::new()),
            telemetry,
            debounce_ms: std::sync::atomic::AtomicU64::new(200),
        }
    }

    /// Sets how long writes in place settle before a scan (default 200 ms),
    /// for watches started afterwards. Renames into the folder never wait.
    pub fn set_debounce(&self, debounce: Duration) {
        let ms = u64::try_from(debounce.as_millis()).unwrap_or(u64::MAX);
        self.debounce_ms
            .store(ms, std::sync::atomic::Ordering::Relaxed);
    }

    /// Plugin files in the folder that are neither loaded nor reported
    /// broken (one line each), or why the folder cannot be read.
    pub fn not_ready(&self) -> Vec<String> {
        let found = match candidates(&self.dir) {
            Ok(f) => f,
            Err(e) => return vec![e.to_string()],
        };
        let states = self.states.lock();
        found
            .keys()
            .filter_map(|name| match states.get(name) {
                Some(FileState::Loaded | FileState::Broken) => None,
                Some(FileState::Loading) => Some(format!("plugin {name}: loading")),
                None => Some(format!("plugin {name}: not scanned yet")),
            })
            .collect()
    }

    fn set_state(&self, name: &str, state: FileState) {
        let mut states = self.states.lock();
        match (states.get(name), state) {
            // A running version keeps serving whatever its successor does.
            (Some(FileState::Loaded), FileState::Loading | FileState::Broken) => {}
            _ => {
                states.insert(name.to_owned(), state);
            }
        }
    }

    /// Each plugin file's state: `loading` (no version runs yet),
    /// `loaded`, or `broken` (it could not be loaded and no version runs).
    pub fn file_states(&self) -> BTreeMap<String, &'static str> {
        self.states
            .lock()
            .iter()
            .map(|(name, state)| {
                let s = match state {
                    FileState::Loading => "loading",
                    FileState::Loaded => "loaded",
                    FileState::Broken => "broken",
                };
                (name.clone(), s)
            })
            .collect()
    }

    /// Plugins whose current file failed to load, with the error (a previous
    /// version may still be serving).
    pub fn failures(&self) -> BTreeMap<String, String> {
        self.failed.lock().clone()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Brings the running plugins in line with the folder.
    pub async fn scan(&self) -> Result<BTreeMap<String, Outcome>, DirError> {
        let found = candidates(&self.dir)?;
        let mut outcomes = BTreeMap::new();
        let mut known = self.known.lock().await;
        let mut changed = Vec::new();
        for (name, path) in &found {
            // Reading through the path follows symlinks (ConfigMap volumes).
            // Read and hashed in one pass: the content digest (the compile
            // cache's key) is computed once here and passed down; the
            // folder's digest adds the sidecar to it.
            let content = match Content::read_hashed(path) {
                Ok(c) => c,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    tracing::error!(plugin = %name, file = %path.display(), error = %e, "cannot read plugin file");
                    self.set_state(name, FileState::Broken);
                    continue;
                }
            };
            let sidecar = Manifest::sidecar_path(path);
            // A sidecar that exists but cannot be read is an error: loading
            // the plugin without its limits and config would be worse.
            let sidecar_text = sidecar.as_ref().map(|p| {
                std::fs::read_to_string(p).map_err(|source| ManifestError::Read {
                    path: p.clone(),
                    source,
                })
            });
            let mut h = Sha256::new();
            h.update(content.digest().unwrap_or_default().as_bytes());
            h.update([0xff]);
            match &sidecar_text {
                Some(Ok(t)) => h.update(t.as_bytes()),
                Some(Err(e)) => h.update(format!("\0unreadable: {e}").as_bytes()),
                None => {}
            }
            let digest: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
            match known.get(name) {
                Some(Known::Running(d)) if *d == digest => continue,
                // Refused for its name: tried again once the name is free.
                Some(Known::Failed(d)) if *d == digest && !self.name_freed_for(name, path) => {
                    continue;
                }
                _ => {}
            }
            self.set_state(name, FileState::Loading);
            changed.push((name, path, content, sidecar, sidecar_text, digest));
        }
        // Precompiled plugins first: a swap of one never waits behind
        // another plugin's compile in the same scan.
        if changed.len() > 1 {
            let runtime = self.host.runtime();
            changed.sort_by_cached_key(|(_, _, content, ..)| {
                !content.digest().is_some_and(|d| runtime.is_compiled(d))
            });
        }
        for (name, path, content, sidecar, sidecar_text, digest) in changed {
            let manifest = match (&sidecar, sidecar_text) {
                (Some(p), Some(Ok(t))) => Manifest::parse(p, &t).map_err(LoadError::from),
                (_, Some(Err(e))) => Err(LoadError::from(e)),
                _ => Ok(Manifest::default()),
            };
            // Taken before loading: a kind learned during the load counts
            // as a change.
            let kinds_generation = self.host.kinds().generation();
            let result = match manifest {
                Ok(m) => self
                    .host
                    .install_from(Origin::File(path.clone()), name, content, m)
                    .await
                    .map(|v| v.version().to_owned()),
                Err(e) => Err(e),
            };
            if let Err(e) = &result
                && e.is_cancelled()
            {
                // Shutting down: not the file's fault, and the rest waits
                // for the next start.
                tracing::info!(plugin = %name, "shutting down; plugin load abandoned");
                break;
            }
            if let Err(LoadError::UnknownKind(_)) = &result {
                self.awaiting_kinds
                    .lock()
                    .insert(name.clone(), kinds_generation);
            } else {
                self.awaiting_kinds.lock().remove(name);
            }
            if let Err(LoadError::NameTaken { .. }) = &result {
                self.awaiting_names.lock().insert(name.clone());
            } else {
                self.awaiting_names.lock().remove(name);
            }
            let was_running = self.running.lock().await.contains_key(name);
            match result {
                Ok(version) => {
                    let outcome = if was_running {
                        Outcome::Replaced
                    } else {
                        Outcome::Loaded
                    };
                    PluginLoaded {
                        plugin: name,
                        file: path,
                        version: &version,
                        replaced: was_running,
                    }
                    .emit(self.telemetry.metrics());
                    self.set_state(name, FileState::Loaded);
                    self.running
                        .lock()
                        .await
                        .insert(name.clone(), digest.clone());
                    known.insert(name.clone(), Known::Running(digest));
                    self.failed.lock().remove(name);
                    outcomes.insert(name.clone(), outcome);
                }
                Err(e) => {
                    let msg = e.to_string();
                    PluginLoadFailed {
                        plugin: name,
                        file: path,
                        error: &msg,
                        previous_serving: was_running,
                    }
                    .emit(self.telemetry.metrics());
                    self.set_state(name, FileState::Broken);
                    known.insert(name.clone(), Known::Failed(digest));
                    self.failed.lock().insert(name.clone(), msg.clone());
                    outcomes.insert(name.clone(), Outcome::Failed(msg));
                }
            }
        }
        let gone: Vec<String> = known
            .keys()
            .filter(|n| !found.contains_key(*n))
            .cloned()
            .collect();
        self.states.lock().retain(|n, _| found.contains_key(n));
        for name in gone {
            known.remove(&name);
            self.failed.lock().remove(&name);
            self.awaiting_kinds.lock().remove(&name);
            self.awaiting_names.lock().remove(&name);
            let origin = Origin::File(self.dir.join(format!("{name}.wasm")));
            if self.running.lock().await.remove(&name).is_some()
                && self.host.unload_from(&origin, &name).await
            {
                outcomes.insert(name, Outcome::Unloaded);
            }
        }
        Ok(outcomes)
    }

    /// Whether plugin `name` (file `path`) was refused for a name another
    /// source held, which is free now.
    fn name_freed_for(&self, name: &str, path: &Path) -> bool {
        self.awaiting_names.lock().contains(name)
            && self
                .host
                .origins()
                .holder(name)
                .is_none_or(|o| o == Origin::File(path.to_owned()))
    }

    /// Plugins refused for an unknown kind get another load once the
    /// cluster's kinds changed (a CRD installed since): discovery runs
    /// again while any waits. Returns whether any was due.
    pub async fn retry_awaiting_kinds(&self) -> bool {
        if self.awaiting_kinds.lock().is_empty() {
            return false;
        }
        self.host.refresh_kinds().await;
        let now = self.host.kinds().generation();
        let due: Vec<String> = self
            .awaiting_kinds
            .lock()
            .iter()
            .filter(|(_, at)| **at != now)
            .map(|(n, _)| n.clone())
            .collect();
        if due.is_empty() {
            return false;
        }
        let mut known = self.known.lock().await;
        for name in &due {
            tracing::info!(plugin = %name, "the cluster's kinds changed; loading the plugin again");
            known.remove(name);
        }
        true
    }

    /// Watches the folder until cancelled, rescanning on every change (and
    /// every `poll` as a safety net for filesystems without events, which
    /// also retries plugins waiting for a kind).
    pub async fn watch(
        self: Arc<Self>,
        cancel: CancellationToken,
        poll: Duration,
    ) -> Result<(), DirError> {
        self.watch_with_ready(cancel, poll, tokio::sync::oneshot::channel().0)
            .await
    }

    /// [`watch`](Self::watch), signalling `ready` once events are flowing.
    pub async fn watch_with_ready(
        self: Arc<Self>,
        cancel: CancellationToken,
        poll: Duration,
        ready: tokio::sync::oneshot::Sender<()>,
    ) -> Result<(), DirError> {
        let watch_error = |e: notify::Error| DirError::Watch {
            path: self.dir.clone(),
            message: e.to_string(),
        };
        let (tx, mut rx) = mpsc::unbounded_channel();
        let renamed = tx.clone();
        let mut renames = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
            if let Ok(e) = res
                && matches!(
                    e.kind,
                    EventKind::Modify(ModifyKind::Name(RenameMode::To | RenameMode::Both))
                )
            {
                let _ = renamed.send(());
            }
        })
        .map_err(watch_error)?;
        renames
            .watch(&self.dir, RecursiveMode::NonRecursive)
            .map_err(watch_error)?;
        let mut debouncer = new_debouncer(
            Duration::from_millis(self.debounce_ms.load(std::sync::atomic::Ordering::Relaxed)),
            None,
            move |res: DebounceEventResult| {
                let relevant = match &res {
                    Ok(events) => events.iter().any(|e| !e.kind.is_access()),
                    Err(_) => true,
                };
                if relevant {
                    let _ = tx.send(());
                }
            },
        )
        .map_err(watch_error)?;
        debouncer
            .watch(&self.dir, RecursiveMode::NonRecursive)
            .map_err(watch_error)?;
        // A name a Plugin object gave back: a plugin refused for it loads now.
        let mut freed = self.host.origins().freed();
        // `interval` panics on zero; the config refuses it, library callers get a floor.
        let mut ticker = tokio::time::interval(poll.max(Duration::from_millis(100)));
        ticker.tick().await;
        // Changes made between the initial scan and the watch being set up
        // would otherwise wait for the next poll.
        if let Err(e) = self.scan().await {
            tracing::error!(error = %e, "plugin folder scan failed");
        }
        let _ = ready.send(());
        loop {
            tokio::select! {
                () = cancel.cancelled() => break,
                Some(()) = rx.recv() => {}
                _ = ticker.tick() => {
                    self.retry_awaiting_kinds().await;
                }
                Ok(()) = freed.changed() => {
                    if self.awaiting_names.lock().is_empty() {
                        continue;
                    }
                }
            }
            while rx.try_recv().is_ok() {}
            if let Err(e) = self.scan().await {
                tracing::error!(error = %e, "plugin folder scan failed");
            }
        }
        drop(debouncer);
        drop(renames);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::actions::executor::{Executor, ExecutorOptions};
    use crate::dispatch::{Activity, DispatchOptions};
    use crate::informer::InformerSet;
    use crate::kind::KindRegistry;
    use crate::object::StripOptions;
    use crate::runtime::{EngineOptions, Runtime};
    use crate::source::local::LocalCluster;
    use crate::telemetry::Identity;

    /// A host over an empty local cluster, compiling nothing to disk.
    fn host(cluster: &Path) -> Arc<PluginHost> {
        let kinds = KindRegistry::builtin();
        let local =
            LocalCluster::new(cluster.to_owned(), kinds.clone(), StripOptions::default()).unwrap();
        let activity = Arc::new(Activity::default());
        let telemetry = Telemetry::new(Identity::from_env());
        let informers = Arc::new(InformerSet::new(
            local.clone(),
            activity.clone(),
            CancellationToken::new(),
            telemetry.clone(),
        ));
        let executor = Arc::new(Executor::new(
            local,
            ExecutorOptions::default(),
            telemetry.clone(),
        ));
        let runtime = Runtime::new(EngineOptions {
            cache_dir: None,
            ..EngineOptions::default()
        })
        .unwrap();
        Arc::new(PluginHost::new(
            runtime,
            informers,
            kinds,
            executor,
            activity,
            DispatchOptions::default(),
            telemetry,
        ))
    }

    fn load_failures(dir: &PluginDir, plugin: &str) -> String {
        let text = dir.telemetry.metrics().encode().unwrap();
        let series = format!("kubewasm_plugin_load_failures_total{{plugin=\"{plugin}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&series))
            .unwrap_or("0")
            .to_owned()
    }

    /// A folder plugin whose name a Plugin object holds is refused (the
    /// object's plugin is left alone), counted as a load failure naming
    /// both, not tried again while the name is held, and tried again on
    /// the first scan after the object gives the name back.
    #[tokio::test]
    async fn a_folder_plugin_waits_for_a_name_an_object_holds() {
        let cluster = tempfile::tempdir().unwrap();
        let folder = tempfile::tempdir().unwrap();
        let host = host(cluster.path());
        let dir = PluginDir::new(folder.path().to_owned(), host.clone());
        let object = Origin::Object("plugins.kubewasm.io/x".into());
        assert_eq!(host.origins().claim("x", &object), Ok(true));
        let freed = host.origins().freed();
        // Not a component: once it may load, the load fails for that, so
        // the error says which check the file reached.
        let file = folder.path().join("x.wasm");
        std::fs::write(&file, b"not wasm").unwrap();

        let outcomes = dir.scan().await.unwrap();
        let Some(Outcome::Failed(error)) = outcomes.get("x") else {
            panic!("{outcomes:?}");
        };
        assert!(
            error.contains("plugins.kubewasm.io/x") && error.contains("rename"),
            "{error}"
        );
        assert_eq!(dir.failures()["x"], *error);
        assert_eq!(dir.file_states()["x"], "broken");
        assert_eq!(load_failures(&dir, "x"), "1");
        assert_eq!(host.origins().holder("x"), Some(object.clone()));

        // The folder cannot unload the object's plugin.
        assert!(!host.unload_from(&Origin::File(file.clone()), "x").await);
        assert_eq!(host.origins().holder("x"), Some(object.clone()));

        // Still held: the next scan leaves it (no new failure).
        assert!(dir.scan().await.unwrap().is_empty());
        assert_eq!(load_failures(&dir, "x"), "1");

        // The object deleted: the name is free, and the file is loaded.
        host.unload_from(&object, "x").await;
        assert_eq!(host.origins().holder("x"), None);
        assert!(freed.has_changed().unwrap());
        let outcomes = dir.scan().await.unwrap();
        let Some(Outcome::Failed(error)) = outcomes.get("x") else {
            panic!("{outcomes:?}");
        };
        assert!(error.contains("WebAssembly"), "{error}");
        assert_eq!(load_failures(&dir, "x"), "2");
        // A first load that failed keeps no claim, and a file that fails
        // for itself waits for a change, not for a name.
        assert_eq!(host.origins().holder("x"), None);
        assert!(dir.scan().await.unwrap().is_empty());
        assert_eq!(host.origins().claim("x", &object), Ok(true));
    }
}
