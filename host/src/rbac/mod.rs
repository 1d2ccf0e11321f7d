//! `kubewasm rbac`: the least-privilege RBAC for a folder of plugins,
//! derived from what each plugin declares at registration, the way the host
//! loads it (compile, instantiate, `register`), within what its sidecar's
//! access list grants, without a cluster.
//!
//! A plugin can only act inside its registration and its grant: the host
//! refuses the rest, so RBAC that covers both covers everything the host
//! will do for it.

pub mod access;
pub mod load;
pub mod policy;
pub mod render;

use std::path::PathBuf;

pub use access::{Access, Read, Resource, Scope, Where, Write};
pub use load::LoadedPlugin;
pub use policy::{Policy, Rule};

use crate::kind::KindRegistry;
use crate::runtime::{EngineOptions, LoadError, Runtime};

#[derive(Debug, thiserror::Error)]
pub enum RbacError {
    #[error(
        "cannot read plugin folder {path}: {source} (pass --plugins with the folder of NAME.wasm files)"
    )]
    Folder {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "no plugins in {0}: it holds no NAME.wasm file (for the example plugins run scripts/deploy-plugins.sh first)"
    )]
    Empty(PathBuf),
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("plugin {plugin} ({path}) does not load: {source}")]
    Load {
        plugin: String,
        path: PathBuf,
        source: LoadError,
    },
    #[error("plugin {plugin}: {message}")]
    Kind { plugin: String, message: String },
    #[error("{path} is not a CustomResourceDefinition manifest: {message}")]
    Crd { path: PathBuf, message: String },
    #[error("cannot start the WebAssembly engine: {0}")]
    Engine(#[from] crate::runtime::engine::EngineError),
}

/// What `kubewasm rbac` is asked for.
#[derive(Debug, Clone)]
pub struct RbacOptions {
    /// The plugin folder (`NAME.wasm` plus optional sidecars).
    pub plugins: PathBuf,
    /// Namespace the host runs in: its ServiceAccount and its Lease.
    pub namespace: String,
    /// Name of the roles and bindings.
    pub name: String,
    /// The host's ServiceAccount (in `namespace`) the roles are bound to.
    pub service_account: String,
    /// Also emit the host's own Role (its leader-election Lease); `false`
    /// for a further set of plugins bound to an existing ServiceAccount.
    pub host_role: bool,
    /// Name of the leader-election Lease.
    pub lease_name: String,
    /// With the host's own roles, also the ClusterRole `--metrics-auth`
    /// needs (create TokenReviews and SubjectAccessReviews).
    pub metrics_auth: bool,
    /// CustomResourceDefinition manifests (files or folders of YAML/JSON)
    /// for kinds the built-in table does not know.
    pub crds: Vec<PathBuf>,
    /// Compile cache (as `run --cache-dir`); `None` compiles every time.
    pub cache_dir: Option<PathBuf>,
}

impl RbacOptions {
    pub fn new(plugins: PathBuf) -> Self {
        Self {
            plugins,
            namespace: "kubewasm".into(),
            name: "kubewasm".into(),
            service_account: "kubewasm".into(),
            host_role: true,
            lease_name: "kubewasm".into(),
            metrics_auth: true,
            crds: Vec::new(),
            cache_dir: crate::runtime::engine::default_cache_dir(),
        }
    }
}

/// Loads the folder and derives the policy.
pub async fn policy(opts: &RbacOptions) -> Result<(Vec<Access>, Policy), RbacError> {
    let kinds = KindRegistry::builtin();
    for path in &opts.crds {
        access::learn_crds(&kinds, path)?;
    }
    let runtime = Runtime::new(EngineOptions {
        epoch_deadlines: true,
        cache_dir: opts.cache_dir.clone(),
        ..EngineOptions::default()
    })?;
    let plugins = load::load_folder(&opts.plugins, &runtime).await?;
    let accesses = plugins
        .iter()
        .map(|p| access::access(p, &kinds))
        .collect::<Result<Vec<_>, _>>()?;
    let policy = policy::derive(&accesses, &opts.namespace, &opts.lease_name);
    Ok((accesses, policy))
}

/// The YAML `kubewasm rbac` prints.
pub async fn generate(opts: &RbacOptions) -> Result<String, RbacError> {
    let (accesses, policy) = policy(opts).await?;
    Ok(render::render(opts, &accesses, &policy))
}
