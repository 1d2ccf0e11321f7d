//! The web view (`kubewasm run --ui`, on its own listener) in a real
//! browser: Debian's chromium driven by Playwright (tests/ui/web-view.mjs)
//! against the `kubewasm` binary over the embedded local cluster and over
//! the test control plane's kube-apiserver. The page loads without console
//! errors, a plugin dropped into the folder appears, a broken one shows its
//! error, a created object shows in the feed and the cache browser within a
//! second, the feed's filter and pause work, and a Secret viewed in the
//! cache browser shows its keys with redacted values only. Screenshots go
//! to `<target>/ui-artifacts` (the path is printed). The listener's Host
//! and Origin checks are tested over HTTP in tests/tests/admin.rs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use kubewasm_tests::controlplane::ControlPlane;
use kubewasm_tests::e2e::{HostProcess, namespace};
use kubewasm_tests::host_child::HostChild;
use kubewasm_tests::{install, plugin_artifacts, repo_root, run_local};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);

/// Where screenshots are kept: `<target>/ui-artifacts`.
fn artifacts() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map_or_else(|| repo_root().join("target"), |t| repo_root().join(t));
    target.join("ui-artifacts")
}

fn chromium() -> PathBuf {
    let path =
        std::env::var_os("CHROMIUM").map_or_else(|| "/usr/bin/chromium".into(), PathBuf::from);
    assert!(
        path.exists(),
        "{} is missing: scripts/setup.sh installs Debian's chromium (or set CHROMIUM)",
        path.display()
    );
    path
}

/// tests/ui with playwright-core installed from its lock file (setup.sh
/// does it; done here too when missing, e.g. a clone set up before).
fn ui_dir() -> PathBuf {
    let dir = repo_root().join("tests/ui");
    if !dir.join("node_modules/playwright-core").is_dir() {
        let status = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund"])
            .current_dir(&dir)
            .status()
            .expect("run npm ci in tests/ui");
        assert!(status.success(), "npm ci in tests/ui failed");
    }
    dir
}

/// The config-replicator example (it watches every ConfigMap) and a
/// recorder granted `read` on the Secrets of `ns`, so that the page has a
/// Secret cache to browse.
fn install_plugins(dir: &Path, ns: &str) {
    install_replicator(dir);
    install(
        dir,
        "secret-reader",
        "recorder",
        Some(&kubewasm_tests::e2e::recorder_sidecar(ns, &["secrets"])),
    );
}

/// The config-replicator example: it watches every ConfigMap.
fn install_replicator(dir: &Path) {
    let sidecar =
        std::fs::read_to_string(repo_root().join("examples/plugins/config-replicator.yaml"))
            .unwrap();
    install(
        dir,
        "config-replicator",
        "config_replicator",
        Some(&sidecar),
    );
}

/// Runs `script` (in tests/ui) with Chromium, `UI_ARTIFACTS` and `env`;
/// prints its output and returns its `UI-RESULT` line, failing the test
/// (with `context`) when there is none or the script failed.
fn run_script(script: &str, env: &[(&str, &std::ffi::OsStr)], context: &str) -> Value {
    let out_dir = artifacts();
    let output = Command::new("node")
        .arg(script)
        .current_dir(ui_dir())
        .env("CHROMIUM", chromium())
        .env("UI_ARTIFACTS", &out_dir)
        .envs(env.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("run node tests/ui/{script}: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}{stderr}");
    println!("screenshots: {}", out_dir.display());
    let result: Value = stdout
        .lines()
        .find_map(|l| l.strip_prefix("UI-RESULT "))
        .map(|j| serde_json::from_str(j).unwrap())
        .unwrap_or_else(|| panic!("no UI-RESULT line:\n{stdout}\n{stderr}\n{context}"));
    assert!(
        output.status.success(),
        "tests/ui/{script} failed: {}\n(screenshots in {})",
        result["problems"],
        out_dir.display()
    );
    result
}

/// Runs the browser test against `url` with `env`; returns its result line.
fn browse(name: &str, url: &str, plugins: &Path, env: &[(&str, &str)]) -> Value {
    let noop = plugin_artifacts().join("noop.wasm");
    let mut vars: Vec<(&str, &std::ffi::OsStr)> = vec![
        ("UI_URL", url.as_ref()),
        ("UI_NAME", name.as_ref()),
        ("UI_PLUGINS", plugins.as_os_str()),
        ("UI_NOOP_WASM", noop.as_os_str()),
    ];
    vars.extend(env.iter().map(|(k, v)| (*k, v.as_ref())));
    let result = run_script("web-view.mjs", &vars, "");
    assert!(
        result["feedMs"].as_u64().unwrap() <= 1000 && result["cacheMs"].as_u64().unwrap() <= 1000,
        "{result}"
    );
    result
}

/// A temp folder with the local cluster's, the plugins' and the compile
/// cache's folders in it.
fn local_dirs() -> (tempfile::TempDir, PathBuf, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let (cluster, plugins, cache) = (
        dir.path().join("cluster"),
        dir.path().join("plugins"),
        dir.path().join("cache"),
    );
    for d in [&cluster, &plugins, &cache] {
        std::fs::create_dir_all(d).unwrap();
    }
    (dir, cluster, plugins, cache)
}

/// `kubewasm run --local` with `--ui` on a free loopback port; stopped on
/// drop.
struct LocalHost {
    host: HostChild,
}

impl LocalHost {
    fn start(cluster: &Path, plugins: &Path, cache: &Path, log: PathBuf, extra: &[&str]) -> Self {
        let host = HostChild::spawn(
            run_local(cluster, plugins, cache)
                .args([
                    "--ui",
                    "--ui-addr",
                    "127.0.0.1:0",
                    "--metrics-addr",
                    "127.0.0.1:0",
                ])
                .args(extra),
            log,
        );
        Self { host }
    }

    fn logs(&self) -> String {
        self.host.logs()
    }

    /// The web view's address, from the `web view serving url=...` line.
    fn url(&mut self) -> String {
        let start = Instant::now();
        loop {
            let logs = self.logs();
            if let Some(url) = logged_url(&logs) {
                return url;
            }
            if let Some(status) = self.host.try_wait() {
                panic!("kubewasm exited ({status}) before serving the web view:\n{logs}");
            }
            assert!(start.elapsed() < WAIT, "no web view address in:\n{logs}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The web view's URL, from the `web view serving url=...` log line.
fn logged_url(logs: &str) -> Option<String> {
    logs.lines()
        .find_map(|l| l.split("web view serving url=").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .map(str::to_owned)
}

/// One browser test at a time: each drives chromium against a host, and on
/// 2 cores two of them side by side took the load test's clicks past its
/// one-second bound (1,051 ms) while the view itself kept up.
fn one_browser_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static BROWSER: std::sync::Mutex<()> = std::sync::Mutex::new(());
    BROWSER
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[test]
fn the_web_view_over_the_local_cluster() {
    let _browser = one_browser_at_a_time();
    let (dir, cluster, plugins, cache) = local_dirs();
    for ns in ["ui-a", "ui-b"] {
        std::fs::write(
            cluster.join(format!("{ns}.json")),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}).to_string(),
        )
        .unwrap();
    }
    install_plugins(&plugins, "ui-a");
    let mut host = LocalHost::start(&cluster, &plugins, &cache, dir.path().join("host.log"), &[]);
    let url = host.url();
    let cluster_dir = cluster.to_str().unwrap();
    let result = browse(
        "local",
        &url,
        &plugins,
        &[
            ("UI_CLUSTER_DIR", cluster_dir),
            ("UI_NAMESPACE", "ui-a"),
            ("UI_OTHER_NS", "ui-b"),
        ],
    );
    println!("local cluster: {result}");
    drop(host);
}

// Its own runtime: the lock only orders this test among the browser tests.
#[allow(clippy::await_holding_lock)]
#[tokio::test]
async fn the_web_view_over_the_real_api_server() {
    let _browser = one_browser_at_a_time();
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    namespace(&client, "ui-a", json!({})).await;
    namespace(&client, "ui-b", json!({})).await;
    let host = HostProcess::start_args(
        cp.admin_kubeconfig(),
        &["--ui", "--ui-addr", "127.0.0.1:0"],
        &[],
        |dir| install_plugins(dir, "ui-a"),
    );
    host.wait_log("web view serving", WAIT).await;
    let url = logged_url(&host.logs()).unwrap();
    let metrics = host.metrics_addr(WAIT).await;
    assert!(
        !url.contains(&metrics.to_string()),
        "the web view is not on the metrics listener"
    );
    let kubeconfig = cp.admin_kubeconfig().to_str().unwrap().to_owned();
    let plugins = host.plugins.path().to_owned();
    let result = tokio::task::spawn_blocking(move || {
        browse(
            "apiserver",
            &url,
            &plugins,
            &[
                ("UI_KUBECONFIG", kubeconfig.as_str()),
                ("UI_NAMESPACE", "ui-a"),
                ("UI_OTHER_NS", "ui-b"),
            ],
        )
    })
    .await
    .unwrap();
    println!("real API server: {result}");
    assert!(host.stop().success(), "the host exits 0 on SIGTERM");
}

/// The page under load: 6,000 Pods resynced every second offer the noop
/// plugin about 6,000 deltas/s (the feed's budget samples them; see
/// `telemetry::feed`) while the browser measures frame gaps (the feed
/// streaming untouched, then under clicks) and the time from a click
/// (pause, resume, the cache browser's Load) to its effect. It fails when
/// the load is not reached (the plugin's median rate while measuring under
/// 4,000 deltas/s: the browser shares two cores with the host, and a CI
/// run measured 4,964 with 6,000 offered), the feed adds no row, a click
/// takes more than a second to show, or a frame is held for a second: the
/// page froze. The figures are printed (`UI-RESULT`).
#[test]
fn the_web_view_stays_responsive_at_thousands_of_deltas_per_second() {
    let _browser = one_browser_at_a_time();
    const PODS: usize = 6000;
    const NAMESPACES: usize = 20;
    let (dir, cluster, plugins, cache) = local_dirs();
    for n in 0..NAMESPACES {
        let ns = format!("load-{n}");
        std::fs::write(
            cluster.join(format!("{ns}.json")),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}).to_string(),
        )
        .unwrap();
        std::fs::create_dir_all(cluster.join(&ns)).unwrap();
    }
    for i in 0..PODS {
        let ns = format!("load-{}", i % NAMESPACES);
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("pod-{i}"), "namespace": ns, "labels": {"app": format!("app-{}", i % 50)}},
            "spec": {"containers": [{"name": "main", "image": "registry.example/app:1"}]},
        });
        std::fs::write(
            cluster.join(&ns).join(format!("pod-{i}.json")),
            pod.to_string(),
        )
        .unwrap();
    }
    install(&plugins, "load", "noop", None);
    let config = dir.path().join("kubewasm.yaml");
    std::fs::write(
        &config,
        "apiVersion: kubewasm.io/v1alpha1\nkind: HostConfig\ndispatch: {defaultResync: 1s}\n",
    )
    .unwrap();
    let mut host = LocalHost::start(
        &cluster,
        &plugins,
        &cache,
        dir.path().join("host.log"),
        &["--config", config.to_str().unwrap()],
    );
    let url = host.url();
    let vars: [(&str, &std::ffi::OsStr); 5] = [
        ("UI_URL", url.as_ref()),
        ("UI_NAME", "load".as_ref()),
        ("UI_PLUGIN", "load".as_ref()),
        ("UI_RATE_MIN", "4000".as_ref()),
        ("UI_SECONDS", "10".as_ref()),
    ];
    let result = run_script("responsive.mjs", &vars, &host.logs());
    let click_max = result["clickMs"]["max"].as_f64().unwrap();
    let gap_max = result["frameGapMs"]["max"].as_f64().unwrap();
    let cache_ms = result["cacheLoadMs"].as_f64().unwrap();
    assert!(
        result["clicks"].as_u64().unwrap() >= 10 && click_max <= 1000.0 && cache_ms <= 1000.0,
        "a click took over a second to show under load: {result}"
    );
    assert!(
        gap_max < 1000.0,
        "the page froze for {gap_max} ms: {result}"
    );
    assert!(
        result["feedRowsAddedPerSecondLive"].as_f64().unwrap() > 0.0,
        "the feed added no row to the page under load: {result}"
    );
    drop(host);
}
