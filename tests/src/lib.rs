//! Shared helpers for the integration suites: building the guest plugins,
//! laying out plugin and cluster folders, and running the host until idle.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod book;
pub mod book_names;
pub mod book_timeless;
pub mod conformance;
pub mod controlplane;
pub mod docs;
pub mod e2e;
pub mod faultproxy;
pub mod host_child;
pub mod hostile_registry;
pub mod incluster;
pub mod manifests;
pub mod markdown;
pub mod objects;
pub mod probe;
pub mod registry;
pub mod tools;
pub mod walkthrough;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use kubewasm::actions::executor::{ActionSink, RecordingSink};
use kubewasm::app::{App, RunOptions};
use kubewasm::dispatch::{Activity, DispatchOptions};
use kubewasm::informer::InformerSet;
use kubewasm::kind::KindRegistry;
use kubewasm::object::StripOptions;
use kubewasm::runtime::EngineOptions;
use kubewasm::source::local::LocalCluster;
use kubewasm::telemetry::{Identity, Telemetry};
use tokio_util::sync::CancellationToken;

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

/// Builds every guest plugin once per test process (cargo makes repeat
/// builds no-ops) and returns the folder of `.wasm` files.
/// `KUBEWASM_PLUGIN_ARTIFACTS` names a folder of prebuilt ones instead
/// (a soak of pinned builds).
pub fn plugin_artifacts() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        if let Some(dir) = std::env::var_os("KUBEWASM_PLUGIN_ARTIFACTS") {
            return PathBuf::from(dir);
        }
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

/// `wasm` with a custom section appended: the same plugin under another
/// digest (a new version as a registry sees it).
pub fn with_custom_section(wasm: &[u8], name: &str, payload: &[u8]) -> Vec<u8> {
    fn leb(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let mut body = Vec::new();
    leb(name.len(), &mut body);
    body.extend_from_slice(name.as_bytes());
    body.extend_from_slice(payload);
    let mut out = wasm.to_vec();
    out.push(0);
    leb(body.len(), &mut out);
    out.extend_from_slice(&body);
    out
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

/// Installs the testkit plugin as `name`, its sidecar `head` (config,
/// limits, grants) followed by [`TESTKIT_ACCESS`].
pub fn install_testkit(dir: &Path, name: &str, head: &str) {
    install(
        dir,
        name,
        "testkit",
        Some(&format!("{head}{TESTKIT_ACCESS}")),
    );
}

/// `kubewasm run` over the local cluster folder `cluster` with the
/// plugins in `plugins` and its compile cache in `cache`; text logs at
/// info (the suites read their fields), `KUBECONFIG` unset. More flags
/// may follow.
pub fn run_local(cluster: &Path, plugins: &Path, cache: &Path) -> Command {
    let mut cmd = Command::new(e2e::kubewasm_bin());
    cmd.args(["--log-format", "text", "run", "--local"])
        .arg(cluster)
        .arg("--plugins")
        .arg(plugins)
        .arg("--cache-dir")
        .arg(cache)
        .env_remove("KUBECONFIG")
        .env("RUST_LOG", "info");
    cmd
}

/// [`run_local`] until the host is idle (`--until-idle`).
pub fn until_idle_local(cluster: &Path, plugins: &Path, cache: &Path) -> Command {
    let mut cmd = run_local(cluster, plugins, cache);
    cmd.arg("--until-idle");
    cmd
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
        objects: None,
        plugins: plugins.to_owned(),
        cluster: kubewasm::app::ClusterTarget::Local(local.to_owned()),
        dry_run: false,
        until_idle: true,
        engine: EngineOptions {
            epoch_deadlines: true,
            cache_dir: Some(cache.to_owned()),
            ..Default::default()
        },
        strip: StripOptions::default(),
        dispatch: DispatchOptions {
            base_backoff: Duration::from_millis(10),
            ..DispatchOptions::default()
        },
        poll: Duration::from_secs(30),
        election: None,
        shutdown_grace: Duration::from_secs(20),
        event_queue: kubewasm::actions::executor::DEFAULT_EVENT_QUEUE,
        metrics_addr: kubewasm::admin::server::MetricsAddr::Off,
        ui: false,
        admin: Default::default(),
        limits: Default::default(),
    }
}

/// A host over a temp cluster and plugin folder.
/// What [`Harness::local_informers`] builds.
pub struct LocalInformers {
    pub kinds: KindRegistry,
    pub cluster: Arc<LocalCluster>,
    pub activity: Arc<Activity>,
    pub telemetry: Telemetry,
    pub informers: Arc<InformerSet>,
}

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

    /// The informer side of a pipeline over the embedded cluster folder,
    /// for the suites that assemble a [`PluginHost`](kubewasm::manager::PluginHost)
    /// by hand (their own sink, leadership or compiler).
    pub fn local_informers(&self) -> LocalInformers {
        let kinds = KindRegistry::builtin();
        let cluster = LocalCluster::new(
            self.cluster.path().to_owned(),
            kinds.clone(),
            StripOptions::default(),
        )
        .unwrap();
        let activity = Arc::new(Activity::default());
        let telemetry = Telemetry::new(Identity::from_env());
        let informers = Arc::new(InformerSet::new(
            cluster.clone(),
            activity.clone(),
            CancellationToken::new(),
            telemetry.clone(),
        ));
        LocalInformers {
            kinds,
            cluster,
            activity,
            telemetry,
            informers,
        }
    }

    /// Starts the host with actions recorded instead of applied.
    pub async fn start_recording(&self) -> (App, Arc<RecordingSink>) {
        self.start_recording_with(&self.options()).await
    }

    /// [`start_recording`](Self::start_recording) with options changed from
    /// [`options`](Self::options).
    pub async fn start_recording_with(&self, options: &RunOptions) -> (App, Arc<RecordingSink>) {
        let sink = Arc::new(RecordingSink::default());
        let app = App::start_with(
            options,
            Some(sink.clone() as Arc<dyn ActionSink>),
            Telemetry::new(Identity::from_env()),
            CancellationToken::new(),
        )
        .await
        .unwrap();
        (app, sink)
    }

    /// Starts the host applying actions into the local cluster.
    pub async fn start(&self) -> App {
        App::start_with(
            &self.options(),
            None,
            Telemetry::new(Identity::from_env()),
            CancellationToken::new(),
        )
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
            ..
        } => format!(
            "event {event_type:?} {reason} {regarding} uid={} {note:?}",
            regarding.uid.as_deref().unwrap_or("-")
        ),
    }
}

/// Copies a built plugin file at `path` into `dir` as `NAME.wasm`, with a
/// sidecar (like [`install`], for artifacts outside the Rust workspace).
pub fn install_file(dir: &Path, name: &str, path: &Path, sidecar: Option<&str>) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let tmp = dir.join(format!(".{name}.wasm.tmp"));
    std::fs::write(&tmp, bytes).unwrap();
    if let Some(text) = sidecar {
        std::fs::write(dir.join(format!("{name}.yaml")), text).unwrap();
    }
    std::fs::rename(tmp, dir.join(format!("{name}.wasm"))).unwrap();
}

/// Builds the non-Rust plugins (`plugins/build-languages.sh`, a no-op when
/// nothing changed) once per test process and returns their folder,
/// `plugins/target/languages` (`<lang>-config-replicator.wasm`). C and Go
/// are made components by the `kubewasm` binary the end-to-end tests use.
pub fn language_artifacts() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let plugins = repo_root().join("plugins");
        let status = Command::new("bash")
            .arg(plugins.join("build-languages.sh"))
            .env("KUBEWASM", e2e::kubewasm_bin())
            .status()
            .expect("run plugins/build-languages.sh");
        assert!(
            status.success(),
            "building the language plugins failed: run plugins/install-toolchains.sh, then plugins/build-languages.sh to see why"
        );
        plugins.join("target/languages")
    })
}

/// Compiles the plugin at `path` once per test process into a compile
/// cache shared by test processes (`target/kubewasm-test-cache`, keyed by
/// content and engine like the host's own cache), then links the compiled
/// files into the harness's private cache: large guests (JavaScript,
/// Python: 12-18 MB) take minutes to compile in a debug build, once.
pub fn precompile_into(h: &Harness, path: &Path) {
    static DONE: OnceLock<std::sync::Mutex<std::collections::HashSet<PathBuf>>> = OnceLock::new();
    let shared = repo_root().join("target/kubewasm-test-cache");
    {
        let mut done = DONE.get_or_init(Default::default).lock().unwrap();
        if !done.contains(path) {
            std::fs::create_dir_all(&shared).unwrap();
            let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let engine = options(h.plugins.path(), h.cluster.path(), &shared).engine;
            kubewasm::runtime::Runtime::new(engine)
                .unwrap()
                .prepare("precompile", &bytes, kubewasm::runtime::Manifest::default())
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            done.insert(path.to_owned());
        }
    }
    link_tree(&shared, h.cache.path());
}

fn link_tree(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&target).unwrap();
            link_tree(&entry.path(), &target);
        } else if !target.exists() && std::fs::hard_link(entry.path(), &target).is_err() {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// Runs the host with actions recorded until idle; every plugin must end
/// with no dead delta. Returns `"<plugin>: <describe(action)>"` in order.
pub async fn record_until_idle(h: &Harness) -> Vec<String> {
    let (app, sink) = h.start_recording().await;
    idle(&app).await;
    let summary = app.summary();
    app.shutdown().await;
    for (name, p) in &summary.plugins {
        assert_eq!(p.dead, 0, "{name} had dead deltas: {summary}");
    }
    sink.take()
        .iter()
        .map(|(plugin, a)| format!("{plugin}: {}", describe(a)))
        .collect()
}

/// The config-replicator fixture (shared by the Rust plugin's test and its
/// JavaScript, Python, C and Go twins): two tenant namespaces, two others,
/// one source ConfigMap and one that is not a source.
pub const REPLICATOR_CLUSTER: &str = "
apiVersion: v1
kind: Namespace
metadata: {name: platform}
---
apiVersion: v1
kind: Namespace
metadata: {name: team-a, labels: {tenant: 'yes'}}
---
apiVersion: v1
kind: Namespace
metadata: {name: team-b, labels: {tenant: 'yes'}}
---
apiVersion: v1
kind: Namespace
metadata: {name: sandbox}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: ca-bundle, namespace: platform, labels: {kubewasm.io/replicate: 'true'}}
data: {ca.crt: PEM-1}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: local-only, namespace: platform}
data: {x: y}
";

/// Replicas whose sources are gone, as a restart finds them: the one this
/// replicator made goes; another replicator's and an unmarked one (made
/// before copies were marked) stay.
pub const REPLICATOR_ORPHANS: &str = "
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: gone
  namespace: team-a
  labels: {kubewasm.io/replica: 'true'}
  annotations: {kubewasm.io/replica-of: platform/gone, kubewasm.io/replicated-by: replicator}
data: {x: y}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: others
  namespace: team-a
  labels: {kubewasm.io/replica: 'true'}
  annotations: {kubewasm.io/replica-of: platform/others, kubewasm.io/replicated-by: other-replicator}
data: {x: y}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: unmarked
  namespace: team-a
  labels: {kubewasm.io/replica: 'true'}
  annotations: {kubewasm.io/replica-of: platform/unmarked}
data: {x: y}
";

/// The access list the config-replicators need (every language): read the
/// sources and namespaces, apply and delete copies.
pub const REPLICATOR_ACCESS: &str = "access:\n  - {kinds: [configmaps, namespaces], verbs: [read]}\n  - {kinds: [configmaps], verbs: [apply, delete]}\n";

/// The access list of the testkit plugin in every mode: everything on the
/// Pods and ConfigMaps it subscribes to and writes.
pub const TESTKIT_ACCESS: &str = "access:\n  - {kinds: [pods, configmaps], verbs: [read, apply, patch, delete, status, events]}\n";

/// The `access:` list of example plugin `name`'s sidecar in
/// examples/plugins (its last key), to append to a test's own config.
pub fn example_access(name: &str) -> String {
    let text =
        std::fs::read_to_string(repo_root().join(format!("examples/plugins/{name}.yaml"))).unwrap();
    let at = text
        .find("\naccess:")
        .expect("the example sidecar has an access list");
    text[at + 1..].to_owned()
}

/// The config-replicator's sidecar in the replicator tests.
pub const REPLICATOR_SIDECAR: &str = "config: {namespaceSelector: tenant=yes}\naccess:\n  - {kinds: [configmaps, namespaces], verbs: [read]}\n  - {kinds: [configmaps], verbs: [apply, delete]}\n";

/// The initial sync of [`REPLICATOR_CLUSTER`] emits exactly one apply per
/// tenant namespace. `install(h)` puts the plugin, named `replicator`
/// with [`REPLICATOR_SIDECAR`], into the harness's plugin folder.
pub async fn check_replicator_copies_exactly(install: impl FnOnce(&Harness)) {
    let h = Harness::new();
    write_cluster(h.cluster.path(), &[("cluster.yaml", REPLICATOR_CLUSTER)]);
    install(&h);
    let actions = record_until_idle(&h).await;
    let copy = |ns: &str| {
        format!(
            r#"replicator: apply force=true configmaps {ns}/ca-bundle {{"apiVersion":"v1","data":{{"ca.crt":"PEM-1"}},"kind":"ConfigMap","metadata":{{"annotations":{{"kubewasm.io/replica-of":"platform/ca-bundle","kubewasm.io/replicated-by":"replicator"}},"labels":{{"kubewasm.io/replica":"true"}},"name":"ca-bundle","namespace":"{ns}"}}}}"#
        )
    };
    assert_eq!(actions, vec![copy("team-a"), copy("team-b")]);
}

/// With actions applied for real: the copies follow an update of the
/// source and a namespace labelled in, and all go with the source.
pub async fn check_replicator_follows_source(install: impl FnOnce(&Harness)) {
    let h = Harness::new();
    write_cluster(h.cluster.path(), &[("cluster.yaml", REPLICATOR_CLUSTER)]);
    install(&h);
    let app = h.start().await;
    idle(&app).await;
    let cm = kubewasm::kind::Gvk::new("", "v1", "ConfigMap");
    let data = |ns: &str| {
        app.local()
            .unwrap()
            .get(&cm, Some(ns), "ca-bundle")
            .map(|v| v["data"]["ca.crt"].clone())
    };
    assert_eq!(data("team-a"), Some(serde_json::json!("PEM-1")));
    assert_eq!(data("sandbox"), None);
    // Update the source and label the sandbox in.
    let updated = REPLICATOR_CLUSTER.replace("PEM-1", "PEM-2").replace(
        "metadata: {name: sandbox}",
        "metadata: {name: sandbox, labels: {tenant: 'yes'}}",
    );
    write_cluster(h.cluster.path(), &[("cluster.yaml", &updated)]);
    app.local().unwrap().rescan().unwrap();
    idle(&app).await;
    for ns in ["team-a", "team-b", "sandbox"] {
        assert_eq!(data(ns), Some(serde_json::json!("PEM-2")), "{ns}");
    }
    // Delete the source: every copy goes.
    let without: String = updated
        .split("---")
        .filter(|d| !d.contains("ca-bundle"))
        .collect::<Vec<_>>()
        .join("---");
    write_cluster(h.cluster.path(), &[("cluster.yaml", &without)]);
    app.local().unwrap().rescan().unwrap();
    idle(&app).await;
    for ns in ["team-a", "team-b", "sandbox"] {
        assert_eq!(data(ns), None, "{ns}");
    }
    assert!(
        app.local()
            .unwrap()
            .get(&cm, Some("platform"), "local-only")
            .is_some()
    );
    let summary = app.summary();
    app.shutdown().await;
    for (name, p) in &summary.plugins {
        assert_eq!(p.dead, 0, "{name} had dead deltas: {summary}");
    }
}
