//! `kubewasm migrate`: a plugin folder as Plugin manifests.

use std::io::Write;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub(crate) struct MigrateArgs {
    /// Plugin folder (NAME.wasm and its sidecar NAME.yaml).
    folder: PathBuf,
    /// Take the modules from this ConfigMap (key NAME.wasm; `kubectl create configmap NAME
    /// --from-file=FOLDER`) instead of the host's plugin folder.
    #[arg(long)]
    configmap: Option<String>,
    /// The ConfigMap's namespace [default: the host's].
    #[arg(long, requires = "configmap")]
    configmap_namespace: Option<String>,
}

pub(crate) fn migrate(args: MigrateArgs) -> anyhow::Result<()> {
    use kubewasm::objects::migrate::{ModuleFrom, manifests};
    let from = match args.configmap {
        Some(name) => ModuleFrom::ConfigMap {
            name,
            namespace: args.configmap_namespace,
        },
        None => ModuleFrom::Folder,
    };
    let yaml = manifests(&args.folder, &from)?;
    std::io::stdout().lock().write_all(yaml.as_bytes())?;
    Ok(())
}
