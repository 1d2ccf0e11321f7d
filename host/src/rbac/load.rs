//! Loads every plugin of a folder as the host would (sidecar, compile,
//! instantiate, `register` with the sidecar's config) and keeps only what
//! RBAC needs: the registration and the sidecar.

use std::path::Path;
use std::sync::Arc;

use super::RbacError;
use crate::runtime::{Actor, LoadError, Manifest, Registration, Runtime};

/// One plugin of the folder, registered.
#[derive(Debug, Clone)]
pub struct LoadedPlugin {
    /// The file stem: the name the host gives the plugin.
    pub name: String,
    pub registration: Registration,
    pub manifest: Manifest,
}

/// Every `NAME.wasm` of `dir`, by name. A plugin that does not load is an
/// error: RBAC generated without it would miss what it needs.
pub async fn load_folder(dir: &Path, runtime: &Runtime) -> Result<Vec<LoadedPlugin>, RbacError> {
    let files = crate::reload::candidates(dir).map_err(|e| match e {
        crate::reload::DirError::Read { path, source } => RbacError::Folder { path, source },
        other => RbacError::Folder {
            path: dir.to_owned(),
            source: std::io::Error::other(other.to_string()),
        },
    })?;
    if files.is_empty() {
        return Err(RbacError::Empty(dir.to_owned()));
    }
    let mut out = Vec::with_capacity(files.len());
    for (name, path) in files {
        let load_err = |source: LoadError| RbacError::Load {
            plugin: name.clone(),
            path: path.clone(),
            source,
        };
        let bytes = std::fs::read(&path).map_err(|source| RbacError::Read {
            path: path.clone(),
            source,
        })?;
        let manifest = match Manifest::sidecar_path(&path) {
            Some(sidecar) => Manifest::load(&sidecar).map_err(|e| load_err(e.into()))?,
            None => Manifest::default(),
        };
        // RBAC follows `access` alone: the sidecar's WASI grants are for the
        // host that runs the plugin, and its ceilings are not this command's.
        let manifest = Manifest {
            grants: Default::default(),
            ..manifest
        };
        let rt = runtime.clone();
        let (owned, m) = (name.clone(), manifest.clone());
        let prepared = tokio::task::spawn_blocking(move || rt.prepare(&owned, &bytes, m))
            .await
            .map_err(|e| load_err(LoadError::Start(e.to_string())))?
            .map_err(load_err)?;
        let config = prepared.manifest.config_json();
        let actor = Actor::spawn(Arc::new(prepared), 0)
            .map_err(|e| load_err(LoadError::Start(e.to_string())))?;
        let registration = actor
            .register(config)
            .await
            .map_err(|e| load_err(LoadError::Register(e.to_string())))?;
        tracing::debug!(plugin = %name, subscriptions = registration.subscriptions.len(), writes = registration.writes.len(), "plugin registered");
        out.push(LoadedPlugin {
            name,
            registration,
            manifest,
        });
    }
    Ok(out)
}
