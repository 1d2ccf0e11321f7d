//! `kubewasm record`: runs the plugins of a folder against a real cluster
//! and writes, per plugin, a fixture `kubewasm test` replays: the cache it
//! started from, each delta it received, and what each call did (its
//! result, actions and Events) as that step's `expect`.
//!
//! Nothing is written to the cluster: the plugins' actions are sent as
//! server-side dry runs (`dryRun=All`, [`KubeSink::server_dry_run`]), so
//! each is answered as the server would answer it (a 409, 403 or 422 is
//! kept as the step's `failures`, which the replay's simulated cluster
//! answers the same way) and none persists. Later deltas never saw the
//! actions, so the fixture says `dryRun: true`: the replay answers
//! actions without applying them either.
//!
//! Each plugin is driven one step at a time by the runner `kubewasm test`
//! uses (its own thread, informer specs listed and watched as the host's
//! informers would be), not by the host's concurrent dispatcher: a
//! plugin's cache reads then see exactly the deltas before the call, in
//! the recording as in the replay, and no coalescing makes the two differ.
//!
//! [`KubeSink::server_dry_run`]: crate::source::kube::KubeSink::server_dry_run

mod capture;
pub mod scrub;
mod session;
mod watch;

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

pub use session::Recorded;

use crate::runtime::LoadError;
use crate::runtime::harness::Harness;
use crate::source::kube::{KubeError, KubeTarget};
use crate::testing::plugin::{PluginError, PluginUnderTest};

/// When a recording stops (SIGINT and SIGTERM stop it too, and what was
/// recorded is written).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// This long after the caches synced.
    After(Duration),
    /// Once no delta arrived and no retry or requeue came due for `quiet`
    /// after the caches synced (every call has run by then: a plugin is
    /// called as each delta arrives).
    UntilIdle { quiet: Duration },
}

/// The quiet period of `--until-idle` unless `--quiet` says otherwise.
pub const DEFAULT_QUIET: Duration = Duration::from_secs(2);

/// What `kubewasm record` does.
#[derive(Debug, Clone)]
pub struct Options {
    pub kubeconfig: PathBuf,
    pub context: Option<String>,
    /// The plugin folder (`NAME.wasm` beside its sidecar `NAME.yaml`).
    pub plugins: PathBuf,
    pub out: PathBuf,
    pub stop: Stop,
    /// The seed of every plugin's recording (written into its fixture).
    pub seed: Option<u64>,
    /// The compile cache (default: the host's).
    pub cache_dir: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error(transparent)]
    Kube(#[from] KubeError),
    #[error(
        "the API server {server} of kubeconfig {kubeconfig} does not answer: {source} (is the cluster up, and is the kubeconfig's server right?)"
    )]
    Unreachable {
        kubeconfig: PathBuf,
        server: String,
        source: kube::Error,
    },
    #[error("cannot write to the output folder {path}: {source} (pass a writable --out DIR)")]
    OutDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read the plugin folder {path}: {source} (pass --plugins DIR)")]
    PluginDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("no plugin in {path}: put NAME.wasm (and its sidecar NAME.yaml) there")]
    NoPlugin { path: PathBuf },
    #[error(transparent)]
    Plugin(#[from] PluginError),
    #[error("the plugin {path} does not load: {source}")]
    Load { path: PathBuf, source: LoadError },
    #[error("plugin {plugin}: {message}")]
    Watch { plugin: String, message: String },
    #[error("plugin {plugin}: cannot record a step: {message}")]
    Step { plugin: String, message: String },
    #[error("plugin {plugin}: stopped before its caches were listed: nothing recorded")]
    Interrupted { plugin: String },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
    #[error("the recording thread of plugin {0} panicked")]
    Panicked(String),
}

/// One plugin's recording: its name, and the fixture written or why not.
pub type Outcome = (String, Result<Recorded, RecordError>);

/// Records every plugin of the folder until `opts.stop` or `cancel`;
/// returns each plugin's outcome (a fixture written, or why not). The
/// errors returned directly are the ones before any plugin ran: the out
/// folder, the plugin folder, a plugin that does not load, the kubeconfig
/// and the API server.
pub fn run(
    rt: &tokio::runtime::Runtime,
    opts: &Options,
    cancel: &CancellationToken,
) -> Result<Vec<Outcome>, RecordError> {
    writable(&opts.out)?;
    // The kubeconfig first: it is read at once, a plugin may take seconds
    // to compile.
    let target = KubeTarget::new(Some(opts.kubeconfig.clone()), opts.context.clone());
    let client = rt.block_on(target.client())?;
    let mut plugins = Vec::new();
    for path in plugin_files(&opts.plugins)? {
        let mut plugin = PluginUnderTest::open(
            &path,
            None,
            None,
            opts.cache_dir.clone(),
            Harness::new(std::time::UNIX_EPOCH, 0),
            // Nothing serves `/metrics` here: the recording counts into its own.
            crate::telemetry::Telemetry::new(crate::telemetry::Identity::from_env()),
        )?;
        plugin.prepared(None).map_err(|source| RecordError::Load {
            path: path.clone(),
            source,
        })?;
        plugins.push(plugin);
    }
    let version = rt.block_on(client.apiserver_version());
    let server = cluster_url(rt, &target);
    if let Err(source) = version {
        return Err(RecordError::Unreachable {
            kubeconfig: opts.kubeconfig.clone(),
            server,
            source,
        });
    }
    let ctx = session::Context {
        main: rt.handle().clone(),
        client,
        server,
        out: opts.out.clone(),
        stop: opts.stop,
        seed: opts.seed,
        cancel,
    };
    let results = std::thread::scope(|scope| {
        let handles: Vec<_> = plugins
            .iter_mut()
            .map(|plugin| {
                let name = plugin.name.clone();
                let ctx = &ctx;
                let handle = std::thread::Builder::new()
                    .name(format!("record {name}"))
                    .spawn_scoped(scope, move || session::record(plugin, ctx));
                (name, handle)
            })
            .collect();
        handles
            .into_iter()
            .map(|(name, handle)| {
                let result = match handle {
                    Ok(h) => h
                        .join()
                        .unwrap_or_else(|_| Err(RecordError::Panicked(name.clone()))),
                    Err(e) => Err(RecordError::Runtime(e)),
                };
                (name, result)
            })
            .collect()
    });
    Ok(results)
}

/// The kubeconfig's server, for messages and the fixture's header.
fn cluster_url(rt: &tokio::runtime::Runtime, target: &KubeTarget) -> String {
    let Some(path) = &target.kubeconfig else {
        return "the cluster".into();
    };
    let options = kube::config::KubeConfigOptions {
        context: target.context.clone(),
        ..Default::default()
    };
    kube::config::Kubeconfig::read_from(path)
        .ok()
        .and_then(|kc| {
            rt.block_on(kube::Config::from_custom_kubeconfig(kc, &options))
                .ok()
        })
        .map_or_else(|| "the cluster".into(), |c| c.cluster_url.to_string())
}

/// Creates `out` and checks a file can be written in it.
fn writable(out: &Path) -> Result<(), RecordError> {
    let err = |source| RecordError::OutDir {
        path: out.to_owned(),
        source,
    };
    std::fs::create_dir_all(out).map_err(err)?;
    let probe = out.join(".kubewasm-record-probe");
    std::fs::write(&probe, b"").map_err(err)?;
    std::fs::remove_file(&probe).map_err(err)
}

/// The folder's `*.wasm` files, by name.
fn plugin_files(dir: &Path) -> Result<Vec<PathBuf>, RecordError> {
    let err = |source| RecordError::PluginDir {
        path: dir.to_owned(),
        source,
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(err)? {
        let path = entry.map_err(err)?.path();
        if path.extension().is_some_and(|e| e == "wasm") && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    if files.is_empty() {
        return Err(RecordError::NoPlugin {
            path: dir.to_owned(),
        });
    }
    Ok(files)
}

/// `to` as a path relative to the folder `from` (both made absolute), so a
/// fixture names its sidecar wherever the two are moved together.
fn relative(from: &Path, to: &Path) -> Option<PathBuf> {
    let from = std::fs::canonicalize(from).ok()?;
    let to = std::fs::canonicalize(to).ok()?;
    let common = from
        .components()
        .zip(to.components())
        .take_while(|(a, b)| a == b)
        .count();
    let mut out = PathBuf::new();
    for _ in from.components().skip(common) {
        out.push("..");
    }
    for c in to.components().skip(common) {
        out.push(c);
    }
    Some(out)
}

/// Writes `text` to `path` through a temporary file, so a reader never
/// sees half of it.
fn write_atomically(path: &Path, text: &str) -> Result<(), RecordError> {
    let err = |source| RecordError::Write {
        path: path.to_owned(),
        source,
    };
    let tmp = path.with_extension("kubewasm-tmp");
    std::fs::write(&tmp, text).map_err(err)?;
    std::fs::rename(&tmp, path).map_err(err)
}
