//! End-to-end helpers: the real `kubewasm` binary as a subprocess against
//! the test control plane, namespaces, and reading the recorder plugin's
//! view (Events it records) back from the API server.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};

use crate::host_child::HostChild;
use crate::{install, repo_root};

/// Builds the `kubewasm` binary once per test process (debug), unless
/// `KUBEWASM_BIN` names one: the soak run uses a release build, and
/// scripts/test.sh the debug one its `cargo test --no-run` left (built with
/// the tests' features; this `cargo build` would build a second set).
pub fn kubewasm_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(bin) = std::env::var_os("KUBEWASM_BIN") {
            return PathBuf::from(bin);
        }
        let status = Command::new(env!("CARGO"))
            .args(["build", "-p", "kubewasm", "--bin", "kubewasm"])
            .current_dir(repo_root())
            .status()
            .expect("run cargo build");
        assert!(status.success(), "building the kubewasm binary failed");
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .map_or_else(|| repo_root().join("target"), |t| repo_root().join(t));
        target.join("debug/kubewasm")
    })
}

/// `kubewasm run` against a kubeconfig, logs to a file, SIGTERM on drop
/// (see [`HostChild`]), then its folders removed.
pub struct HostProcess {
    /// First: stopped before the folders holding its log and cache go.
    host: HostChild,
    pub plugins: tempfile::TempDir,
    _cache: tempfile::TempDir,
}

impl HostProcess {
    /// Starts the host with `plugins` (`(name, artifact, sidecar)`).
    pub fn start(kubeconfig: &Path, plugins: &[(&str, &str, Option<&str>)]) -> Self {
        Self::start_with(kubeconfig, |dir| {
            for (name, artifact, sidecar) in plugins {
                install(dir, name, artifact, *sidecar);
            }
        })
    }

    /// Starts the host after `fill` has put plugins into its folder.
    pub fn start_with(kubeconfig: &Path, fill: impl FnOnce(&Path)) -> Self {
        Self::start_args(kubeconfig, &[], &[], fill)
    }

    /// [`start_with`](Self::start_with) with extra environment variables
    /// (the downward API's `POD_NAME`, ...).
    pub fn start_with_env(
        kubeconfig: &Path,
        env: &[(&str, &str)],
        fill: impl FnOnce(&Path),
    ) -> Self {
        Self::start_args(kubeconfig, &[], env, fill)
    }

    /// An empty plugin folder and the host config file `config`
    /// (`--config`): Plugin objects alone.
    pub fn with_config(kubeconfig: &Path, config: &Path) -> Self {
        let config = config.to_str().unwrap();
        Self::start_args(kubeconfig, &["--config", config], &[], |_| {})
    }

    /// Like [`start_with`](Self::start_with), with extra `run` flags and
    /// environment variables (e.g. `POD_NAME`).
    pub fn start_args(
        kubeconfig: &Path,
        args: &[&str],
        env: &[(&str, &str)],
        fill: impl FnOnce(&Path),
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let cache = tempfile::tempdir().unwrap();
        fill(dir.path());
        let log = dir.path().join("host.log");
        let host = HostChild::spawn(
            Command::new(kubewasm_bin())
                .args(["run"])
                .args(args)
                .envs(env.iter().copied())
                .arg("--kubeconfig")
                .arg(kubeconfig)
                .arg("--plugins")
                .arg(dir.path())
                .arg("--cache-dir")
                .arg(cache.path())
                // The suites read these logs as text; several hosts run at once,
                // so each metrics listener takes a free port.
                .args(["--log-format", "text", "--metrics-addr", "127.0.0.1:0"])
                .env("RUST_LOG", "info,kube_client=warn,kube_runtime=warn")
                .env_remove("KUBECONFIG")
                .envs(env.iter().copied()),
            log,
        );
        Self {
            host,
            plugins: dir,
            _cache: cache,
        }
    }

    pub fn logs(&self) -> String {
        self.host.logs()
    }

    /// The host's process id.
    pub fn pid(&self) -> u32 {
        self.host.pid()
    }

    /// The address the metrics listener bound, once it is up.
    pub async fn metrics_addr(&self, timeout: Duration) -> std::net::SocketAddr {
        self.host.metrics_addr(timeout).await
    }

    /// Freezes the process (SIGSTOP): its watches stall, nothing is lost.
    pub fn pause(&self) {
        self.host.pause();
    }

    pub fn resume(&self) {
        self.host.resume();
    }

    /// Waits until the log contains `needle`.
    pub async fn wait_log(&self, needle: &str, timeout: Duration) {
        self.host.wait_log(needle, timeout).await;
    }

    /// Waits until the log contains `needle`; returns the first line
    /// holding it.
    pub async fn wait_line(&self, needle: &str, timeout: Duration) -> String {
        self.host.wait_line(needle, timeout).await
    }

    /// SIGKILL and wait: no drain, no release, as when a node dies.
    pub fn kill(self) {
        self.host.kill();
    }

    /// SIGTERM and wait: returns the exit status (the host drains and exits 0).
    pub fn stop(self) -> std::process::ExitStatus {
        self.host.stop()
    }

    /// [`stop`](Self::stop), also returning the log (gone with the folder).
    pub fn stop_with_logs(self) -> (std::process::ExitStatus, String) {
        self.host.stop_with_logs()
    }
}

/// Creates namespace `name` (with labels) and its `default` ServiceAccount
/// (no controller-manager runs to create it).
pub async fn namespace(client: &kube::Client, name: &str, labels: Value) {
    let ns: Namespace = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "labels": labels}
    }))
    .unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let sa: ServiceAccount = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": name}
    }))
    .unwrap();
    let _ = Api::<ServiceAccount>::namespaced(client.clone(), name)
        .create(&PostParams::default(), &sa)
        .await;
}

/// One delta as the recorder plugin saw it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Seen {
    pub version: String,
    pub seq: u64,
    pub delta: String,
    pub name: String,
    pub rv: String,
    pub old_rv: String,
    pub initial: bool,
    pub unknown: bool,
    /// The Event's `reportingInstance`: `<pod or host>/recorder`.
    pub instance: String,
}

impl Seen {
    /// `added a initial`, `updated a`, `deleted b unknown`, `synced`.
    pub fn short(&self) -> String {
        let mut s = format!("{} {}", self.delta, self.name);
        if self.initial {
            s.push_str(" initial");
        }
        if self.unknown {
            s.push_str(" unknown");
        }
        s.trim().to_owned()
    }
}

/// The Events the recorder test plugin wrote in `ns` (events.k8s.io/v1,
/// label `kubewasm.io/plugin=recorder`), unordered.
pub async fn recorder_events(client: &kube::Client, ns: &str) -> Vec<kube::core::DynamicObject> {
    plugin_events(client, ns, "recorder").await
}

/// One recorder Event: which replica wrote it (`reportingInstance`), when,
/// and the delta it describes.
#[derive(Debug, Clone)]
pub struct Written {
    pub instance: String,
    pub at: k8s_openapi::jiff::Timestamp,
    pub version: String,
    pub seq: u64,
    pub delta: String,
    pub name: String,
    pub rv: String,
    /// A replay of the cache (initial list, or a new leader's or shard
    /// holder's), not a live change.
    pub initial: bool,
}

impl Written {
    /// One recorder Event, read.
    pub fn of(e: &kube::core::DynamicObject) -> Self {
        let text = |v: &Value, what: &str| {
            v.as_str()
                .unwrap_or_else(|| panic!("a recorder Event without {what}: {v}"))
                .to_owned()
        };
        let note: Value = serde_json::from_str(&text(&e.data["note"], "a note")).unwrap();
        Written {
            instance: text(&e.data["reportingInstance"], "reportingInstance"),
            at: text(&e.data["eventTime"], "eventTime").parse().unwrap(),
            version: text(&note["version"], "version"),
            seq: note["seq"].as_u64().unwrap(),
            delta: text(&note["type"], "type"),
            name: text(&note["name"], "name"),
            rv: text(&note["rv"], "rv"),
            initial: note["initial"].as_bool().unwrap_or(false),
        }
    }
}

/// The recorder's Events in `ns` as [`Written`], in each plugin version's
/// order of delivery.
pub async fn recorder_written(client: &kube::Client, ns: &str) -> Vec<Written> {
    let mut out: Vec<Written> = recorder_events(client, ns)
        .await
        .iter()
        .map(Written::of)
        .collect();
    out.sort_by(|a, b| (&a.version, a.seq).cmp(&(&b.version, b.seq)));
    out
}

/// The recorder's Events in one namespace as they are written, each read
/// once (a watch), for suites whose recorders write tens of thousands:
/// listing them all again at every look would cost more than the hosts
/// under test. Stops when dropped.
pub struct WrittenFeed {
    seen: std::sync::Arc<std::sync::Mutex<(std::collections::HashSet<String>, Vec<Written>)>>,
    task: tokio::task::JoinHandle<()>,
}

impl WrittenFeed {
    pub fn start(client: &kube::Client, ns: &str) -> Self {
        use futures::StreamExt as _;
        let api: Api<kube::core::DynamicObject> =
            Api::namespaced_with(client.clone(), ns, &events_resource());
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Default::default()));
        let task = tokio::spawn({
            let seen = std::sync::Arc::clone(&seen);
            async move {
                let config =
                    kube::runtime::watcher::Config::default().labels("kubewasm.io/plugin=recorder");
                let mut events = std::pin::pin!(kube::runtime::watcher(api, config));
                while let Some(e) = events.next().await {
                    let (kube::runtime::watcher::Event::Apply(e)
                    | kube::runtime::watcher::Event::InitApply(e)) = (match e {
                        Ok(e) => e,
                        Err(_) => continue,
                    })
                    else {
                        continue;
                    };
                    let name = e.metadata.name.clone().unwrap_or_default();
                    let mut guard = seen.lock().unwrap();
                    let (names, all): &mut (std::collections::HashSet<String>, Vec<Written>) =
                        &mut guard;
                    if names.insert(name) {
                        all.push(Written::of(&e));
                    }
                }
            }
        });
        Self { seen, task }
    }

    /// Everything written so far, in each plugin version's order of
    /// delivery.
    pub fn written(&self) -> Vec<Written> {
        let mut out = self.seen.lock().unwrap().1.clone();
        out.sort_by(|a, b| (&a.version, a.seq).cmp(&(&b.version, b.seq)));
        out
    }
}

impl Drop for WrittenFeed {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn events_resource() -> kube::core::ApiResource {
    kube::core::ApiResource {
        group: "events.k8s.io".into(),
        version: "v1".into(),
        api_version: "events.k8s.io/v1".into(),
        kind: "Event".into(),
        plural: "events".into(),
    }
}

/// The Events plugin `plugin` wrote in `ns` (label `kubewasm.io/plugin`).
pub async fn plugin_events(
    client: &kube::Client,
    ns: &str,
    plugin: &str,
) -> Vec<kube::core::DynamicObject> {
    let api: Api<kube::core::DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &events_resource());
    api.list(&ListParams::default().labels(&format!("kubewasm.io/plugin={plugin}")))
        .await
        .unwrap()
        .items
}

/// What a plugin believes exists (name -> resourceVersion), replaying its
/// deltas `(type, name, rv)` in order.
pub fn replay_view<'a>(
    deltas: impl IntoIterator<Item = (&'a str, &'a str, &'a str)>,
) -> BTreeMap<String, String> {
    let mut state = BTreeMap::new();
    for (delta, name, rv) in deltas {
        match delta {
            "added" | "updated" => {
                state.insert(name.to_owned(), rv.to_owned());
            }
            "deleted" => {
                state.remove(name);
            }
            _ => {}
        }
    }
    state
}

/// What the server holds (name -> resourceVersion) of the ConfigMaps `api`
/// lists.
pub async fn configmap_versions(api: &Api<ConfigMap>) -> BTreeMap<String, String> {
    api.list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|c| {
            (
                c.metadata.name.unwrap(),
                c.metadata.resource_version.unwrap(),
            )
        })
        .collect()
}

/// The field managers in an object's managedFields.
pub fn field_managers(meta: &kube::api::ObjectMeta) -> Vec<String> {
    meta.managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.clone())
        .collect()
}

/// What the recorder believes exists (name -> resourceVersion), replaying
/// its deltas `seen` in order.
pub fn seen_view<'a>(seen: impl IntoIterator<Item = &'a Seen>) -> BTreeMap<String, String> {
    replay_view(
        seen.into_iter()
            .map(|s| (s.delta.as_str(), s.name.as_str(), s.rv.as_str())),
    )
}

/// Waits until `plugin`'s view of the ConfigMaps in `ns`, replayed from
/// what it recorded ([`seen_view`]), equals `server`
/// ([`configmap_versions`]); returns what it recorded. Fails after
/// `timeout`, saying `what` it waited for.
pub async fn recorded_until_view_is(
    client: &kube::Client,
    ns: &str,
    plugin: &str,
    server: &BTreeMap<String, String>,
    what: &str,
    timeout: Duration,
) -> Vec<Seen> {
    eventually(what, timeout, || async {
        let seen = recorded_by(client, ns, plugin).await;
        (seen_view(&seen) == *server).then_some(seen)
    })
    .await
}

/// The recorder's view in `ns`, in the order it saw it (per version).
pub async fn recorded(client: &kube::Client, ns: &str) -> Vec<Seen> {
    recorded_by(client, ns, "recorder").await
}

/// [`recorded`] for a recorder installed as `plugin`.
pub async fn recorded_by(client: &kube::Client, ns: &str, plugin: &str) -> Vec<Seen> {
    let mut out: Vec<Seen> = plugin_events(client, ns, plugin)
        .await
        .iter()
        .flat_map(|e| {
            // A repeated Event is one object with a series count: each
            // repeat is a delta seen again.
            let count = e.data["series"]["count"].as_u64().unwrap_or(1);
            let seen = seen_of(e);
            (0..count).filter_map(move |_| seen.clone())
        })
        .collect();
    out.sort();
    out
}

fn seen_of(e: &kube::core::DynamicObject) -> Option<Seen> {
    let note: Value = serde_json::from_str(e.data["note"].as_str()?).ok()?;
    Some(Seen {
        version: note["version"].as_str()?.to_owned(),
        seq: note["seq"].as_u64()?,
        delta: note["type"].as_str()?.to_owned(),
        name: note["name"].as_str()?.to_owned(),
        rv: note["rv"].as_str()?.to_owned(),
        old_rv: note["oldRv"].as_str()?.to_owned(),
        initial: note["initial"].as_bool()?,
        unknown: note["unknown"].as_bool()?,
        instance: e.data["reportingInstance"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    })
}

/// A plain HTTP/1.1 GET: (status, headers, body).
pub fn http_get(addr: std::net::SocketAddr, path: &str) -> std::io::Result<(u16, String, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    let (head, body) = out
        .split_once("\r\n\r\n")
        .ok_or_else(|| std::io::Error::other(format!("no header end in {out:?}")))?;
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no status in {head:?}")))?;
    Ok((code, head.to_owned(), body.to_owned()))
}

/// The value of the sample `series` (name and labels exactly as exposed)
/// in a Prometheus text body.
pub fn sample(body: &str, series: &str) -> Option<f64> {
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// Polls `check` until it returns `Some`, failing after `timeout`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    eventually_seen(what, timeout, || {
        let attempt = check();
        async move { attempt.await.ok_or_else(String::new) }
    })
    .await
}

/// [`eventually`] for checks that say what they saw: `Err(seen)` until
/// done, and the failure after `timeout` prints the last `seen`.
pub async fn eventually_seen<T, F, Fut>(what: &str, timeout: Duration, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    match poll_seen(timeout, check).await {
        Ok(v) => v,
        Err(seen) => panic!(
            "timed out after {timeout:?} waiting for {what}{}",
            if seen.is_empty() {
                String::new()
            } else {
                format!("; last seen:\n{seen}")
            }
        ),
    }
}

/// The loop of [`eventually_seen`] without its panic: `check` every 200 ms
/// until `Ok`, or the last `seen` once `timeout` has passed, for a caller
/// that gathers more before it fails.
pub async fn poll_seen<T, F, Fut>(timeout: Duration, mut check: F) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let start = Instant::now();
    loop {
        let seen = match check().await {
            Ok(v) => return Ok(v),
            Err(seen) => seen,
        };
        if start.elapsed() >= timeout {
            return Err(seen);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The recorder's sidecar for `resources` in `ns`: it reads them there and
/// records Events regarding the ConfigMap `kubewasm-recorder` there.
pub fn recorder_sidecar(ns: &str, resources: &[&str]) -> String {
    format!(
        "config: {}\naccess:\n  - {{kinds: {}, verbs: [read], namespaces: [{ns}]}}\n  - {{kinds: [configmaps], verbs: [events], namespaces: [{ns}]}}\n",
        json!({"namespace": ns, "resources": resources}),
        json!(resources)
    )
}

/// A host config file (`apiVersion`/`kind` written for you) holding
/// `body`, in a folder that lives as long as the returned guard.
pub fn host_config(body: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("kubewasm.yaml");
    std::fs::write(
        &file,
        format!("apiVersion: kubewasm.io/v1alpha1\nkind: HostConfig\n{body}"),
    )
    .unwrap();
    (dir, file)
}

/// ConfigMap data by name.
pub type DataByName = BTreeMap<String, Option<BTreeMap<String, String>>>;

/// The data of the ConfigMaps in `api` matching `selector`, by name.
pub async fn data_by_name(api: &Api<ConfigMap>, selector: &str) -> kube::Result<DataByName> {
    Ok(api
        .list(&ListParams::default().labels(selector))
        .await?
        .items
        .into_iter()
        .filter_map(|c| Some((c.metadata.name?, c.data)))
        .collect())
}

/// config-replicator's promise: in every tenant the copies (labelled
/// `kubewasm.io/replica`) equal the sources in `sources_ns` matching
/// `source_selector`, and none outlives its source. The sources once it
/// holds, `None` while it does not.
pub async fn copies_match_sources(
    client: &kube::Client,
    sources_ns: &str,
    source_selector: &str,
    tenants: &[&str],
) -> kube::Result<Option<DataByName>> {
    let sources = data_by_name(
        &Api::namespaced(client.clone(), sources_ns),
        source_selector,
    )
    .await?;
    for t in tenants {
        let copies =
            data_by_name(&Api::namespaced(client.clone(), t), "kubewasm.io/replica").await?;
        if copies != sources {
            return Ok(None);
        }
    }
    Ok(Some(sources))
}

/// Installs the Plugin and NamespacedPlugin CRDs (deploy/base/crds.yaml)
/// and waits until the API server serves them.
pub async fn install_plugin_crds(client: &kube::Client) {
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> = Api::all(client.clone());
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/base/crds.yaml"),
    )
    .unwrap();
    for doc in serde_yaml_ng::Deserializer::from_str(&text) {
        let crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition = serde::Deserialize::deserialize(doc).unwrap();
        let name = crd.metadata.name.clone().unwrap();
        crds.patch(
            &name,
            &kube::api::PatchParams::apply("kubewasm-tests").force(),
            &kube::api::Patch::Apply(&crd),
        )
        .await
        .unwrap();
        let established = kube::runtime::wait::await_condition(
            crds.clone(),
            &name,
            kube::runtime::wait::conditions::is_crd_established(),
        );
        tokio::time::timeout(Duration::from_secs(30), established)
            .await
            .expect("the CRD is established within 30 s")
            .unwrap();
    }
}

/// The `testkit-requeue` lines of a host log: `(tag, type, namespace,
/// name, attempt, initial)`, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequeueLine {
    pub tag: String,
    pub delta: String,
    pub namespace: String,
    pub name: String,
    pub attempt: u64,
    pub initial: bool,
}

pub fn requeue_lines(logs: &str) -> Vec<RequeueLine> {
    logs.lines()
        .filter_map(|l| {
            let at = l.find("testkit-requeue {")? + "testkit-requeue ".len();
            let v: Value = serde_json::Deserializer::from_str(&l[at..])
                .into_iter()
                .next()?
                .ok()?;
            Some(RequeueLine {
                tag: v["tag"].as_str()?.to_owned(),
                delta: v["type"].as_str()?.to_owned(),
                namespace: v["namespace"].as_str()?.to_owned(),
                name: v["name"].as_str()?.to_owned(),
                attempt: v["attempt"].as_u64()?,
                initial: v["initial"].as_bool()?,
            })
        })
        .collect()
}

/// A command's output, asserting it succeeded (its output in the message
/// otherwise).
pub fn succeeded(out: std::process::Output) -> std::process::Output {
    assert!(
        out.status.success(),
        "stdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A command's stderr, asserting it failed.
pub fn refused(out: std::process::Output) -> String {
    assert!(
        !out.status.success(),
        "expected a refusal, got: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Creates, updates and deletes ConfigMaps labelled `label=true` in `ns`
/// (the sources of a config-replicator) until `stop`, at about 20 changes
/// a second (pacing, not synchronisation); returns how many it made.
pub async fn churn(
    client: kube::Client,
    ns: &str,
    label: &str,
    stop: &std::sync::atomic::AtomicBool,
) -> usize {
    use kube::api::{DeleteParams, Patch, PatchParams};
    let api: Api<ConfigMap> = Api::namespaced(client, ns);
    let mut rng: u64 = 0x9e37_79b9_7f4a_7c15
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
    let mut changes = 0;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let name = format!("src-{}", rng % 12);
        let exists = api.get_opt(&name).await.unwrap().is_some();
        let result = if exists && rng.is_multiple_of(4) {
            api.delete(&name, &DeleteParams::default())
                .await
                .map(|_| ())
        } else {
            let cm = json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "labels": {label: "true"}},
                "data": {"value": format!("{rng:x}")}
            });
            api.patch(&name, &PatchParams::apply("churn"), &Patch::Apply(&cm))
                .await
                .map(|_| ())
        };
        match result {
            Ok(()) => changes += 1,
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => panic!("churn on {ns}/{name}: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    changes
}
