//! Shared helpers for the integration suites: building the guest plugins,
//! laying out plugin and cluster folders, and running the host until idle.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use kubewasm::actions::executor::{ActionSink, RecordingSink};
use kubewasm::app::{App, RunOptions};
use kubewasm::dispatch::DispatchOptions;
use kubewasm::object::StripOptions;
use kubewasm::runtime::EngineOptions;
use tokio_util::sync::CancellationToken;

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

/// Builds every guest plugin once per test process (cargo makes repeat
/// builds no-ops) and returns the folder of `.wasm` files.
pub fn plugin_artifacts() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let plugins = repo_root().join("plugins");
        let status = Command::new("bash")
            .arg(plugins.join("build.sh"))
            .status()
            .expect("run plugins/build.sh");
        assert!(
            status.success(),
            "building the guest plugins failed: run plugins/build.sh to see why"
        );
        plugins.join("target/wasm32-wasip2/release")
    })
}

/// The bytes of a built plugin (`noop`, `config_replicator`, ...).
pub fn wasm(name: &str) -> Vec<u8> {
    let path = plugin_artifacts().join(format!("{name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Copies plugin `artifact` into `dir` as `NAME.wasm`, with a sidecar.
pub fn install(dir: &Path, name: &str, artifact: &str, sidecar: Option<&str>) {
    let tmp = dir.join(format!(".{name}.wasm.tmp"));
    std::fs::write(&tmp, wasm(artifact)).unwrap();
    if let Some(text) = sidecar {
        std::fs::write(dir.join(format!("{name}.yaml")), text).unwrap();
    }
    std::fs::rename(tmp, dir.join(format!("{name}.wasm"))).unwrap();
}

/// Writes manifests (`(relative path, yaml)`) into a cluster folder.
pub fn write_cluster(dir: &Path, files: &[(&str, &str)]) {
    for (rel, text) in files {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
}

pub fn init_logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_test_writer()
        .try_init();
}

/// Test options: a private compile cache, fast retries.
pub fn options(plugins: &Path, local: &Path, cache: &Path) -> RunOptions {
    RunOptions {
        plugins: plugins.to_owned(),
        cluster: kubewasm::app::ClusterTarget::Local(local.to_owned()),
        dry_run: false,
        until_idle: true,
        engine: EngineOptions {
            epoch_deadlines: true,
            cache_dir: Some(cache.to_owned()),
        },
        strip: StripOptions::default(),
        dispatch: DispatchOptions {
            base_backoff: Duration::from_millis(10),
            ..DispatchOptions::default()
        },
        poll: Duration::from_secs(30),
    }
}

/// A host over a temp cluster and plugin folder.
pub struct Harness {
    pub plugins: tempfile::TempDir,
    pub cluster: tempfile::TempDir,
    pub cache: tempfile::TempDir,
}

impl Default for Harness {
    fn default() -> Self {
        Self::new()
    }
}

impl Harness {
    pub fn new() -> Self {
        init_logs();
        Self {
            plugins: tempfile::tempdir().unwrap(),
            cluster: tempfile::tempdir().unwrap(),
            cache: tempfile::tempdir().unwrap(),
        }
    }

    pub fn options(&self) -> RunOptions {
        options(self.plugins.path(), self.cluster.path(), self.cache.path())
    }

    /// Starts the host with actions recorded instead of applied.
    pub async fn start_recording(&self) -> (App, Arc<RecordingSink>) {
        let sink = Arc::new(RecordingSink::default());
        let app = App::start_with_sink(
            &self.options(),
            Some(sink.clone() as Arc<dyn ActionSink>),
            CancellationToken::new(),
        )
        .await
        .unwrap();
        (app, sink)
    }

    /// Starts the host applying actions into the local cluster.
    pub async fn start(&self) -> App {
        App::start(&self.options(), CancellationToken::new())
            .await
            .unwrap()
    }
}

/// Waits for idle with a generous bound, failing the test if never idle.
pub async fn idle(app: &App) {
    tokio::time::timeout(Duration::from_secs(60), app.wait_idle())
        .await
        .expect("host did not become idle within 60s");
}

/// A canonical one-line description of an action, for exact assertions.
pub fn describe(action: &kubewasm::actions::Action) -> String {
    use kubewasm::actions::Action;
    match action {
        Action::Apply {
            target,
            object,
            force,
            status,
        } => {
            format!(
                "apply{} force={force} {target} {object}",
                if *status { "-status" } else { "" }
            )
        }
        Action::Patch {
            target,
            patch_type,
            patch,
        } => format!("patch {patch_type:?} {target} {patch}"),
        Action::Delete {
            target,
            propagation,
        } => format!("delete {propagation:?} {target}"),
        Action::Event {
            regarding,
            event_type,
            reason,
            note,
        } => format!(
            "event {event_type:?} {reason} {regarding} uid={} {note:?}",
            regarding.uid.as_deref().unwrap_or("-")
        ),
    }
}
