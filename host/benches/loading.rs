//! Plugin loading (issue 13, point 5), printed as figures, not a timed
//! test:
//! - `swap`: a precompiled plugin file renamed into the watched folder to
//!   the first delta its new version serves, through a folder scan (what
//!   the watcher runs at once on a rename into the folder) and through the
//!   watcher itself. Goal: <= 10 ms.
//! - `rss`: the `kubewasm` binary's RSS before, at peak and after loading
//!   the JavaScript (QuickJS) and Python config-replicators, compiled in a
//!   child process, in process, or precompiled by `kubewasm compile`. Goal:
//!   back within 20 % of the value before the compile.
//! - `cache`: the compile cache after N builds of the plugins (new
//!   content each time, as a new build writes), with and without a cap.
//!
//! Run: `bash plugins/build.sh && bash plugins/build-languages.sh js python
//! && cargo bench -p kubewasm --bench loading [-- swap rss cache]`
//! (`--features jemalloc` measures the image's allocator).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use kubewasm::actions::Action;
use kubewasm::actions::executor::{ActionError, ActionSink, Executor, ExecutorOptions};
use kubewasm::dispatch::{Activity, DispatchOptions};
use kubewasm::informer::InformerSet;
use kubewasm::kind::KindRegistry;
use kubewasm::manager::PluginHost;
use kubewasm::object::{KObject, StripOptions};
use kubewasm::reload::PluginDir;
use kubewasm::runtime::{EngineOptions, Runtime};
use kubewasm::telemetry::{Identity, Telemetry};
use tokio_util::sync::CancellationToken;

#[allow(dead_code)] // the compile timing is the other benches'
mod common;
use common::Fixed;

fn rust_plugin(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!(
        "../plugins/target/wasm32-wasip2/release/{name}.wasm"
    ))
}

fn language_plugin(lang: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!(
        "../plugins/target/languages/{lang}-config-replicator.wasm"
    ))
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run plugins/build.sh and plugins/build-languages.sh js python first",
            path.display()
        )
    })
}

/// `bytes` with a custom section carrying `tag`: the same plugin as a new
/// build (new content hash, so a new cache entry).
fn rebuilt(bytes: &[u8], tag: &str) -> Vec<u8> {
    fn leb(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let b = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(b);
                return;
            }
            out.push(b | 0x80);
        }
    }
    let name = b"kubewasm-bench";
    let mut body = Vec::new();
    leb(name.len(), &mut body);
    body.extend_from_slice(name);
    body.extend_from_slice(tag.as_bytes());
    let mut out = bytes.to_vec();
    out.push(0);
    leb(body.len(), &mut out);
    out.extend(body);
    out
}

const REPLICATOR_SIDECAR: &str = "config:\n  sourceSelector: kubewasm.io/replicate=true\n  namespaceSelector: tenant=yes\naccess:\n  - kinds: [configmaps, namespaces]\n    verbs: [read]\n  - kinds: [configmaps]\n    verbs: [apply, delete]\n";
const NOOP_SIDECAR: &str = "access:\n  - {kinds: [pods], verbs: [read]}\n";

fn object(v: serde_json::Value) -> KObject {
    KObject::from_value(v, StripOptions::default()).unwrap()
}

fn objects() -> Vec<KObject> {
    let mut v = Vec::new();
    for (ns, tenant) in [("platform", false), ("team-a", true), ("team-b", true)] {
        v.push(object(serde_json::json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": ns, "uid": format!("ns-{ns}"), "resourceVersion": "1",
                "labels": if tenant { serde_json::json!({"tenant": "yes"}) } else { serde_json::json!({}) }}})));
    }
    v.push(object(serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "ca-bundle", "namespace": "platform", "uid": "cm-1", "resourceVersion": "2",
            "labels": {"kubewasm.io/replicate": "true"}},
        "data": {"ca.crt": "x"}})));
    for i in 0..100 {
        v.push(object(serde_json::json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("p-{i}"), "namespace": "team-a", "uid": format!("pod-{i}"), "resourceVersion": "3"}})));
    }
    v
}

#[derive(Default)]
struct NullSink;
impl ActionSink for NullSink {
    fn execute<'a>(&'a self, _: &'a str, _: &'a Action) -> BoxFuture<'a, Result<(), ActionError>> {
        Box::pin(async { Ok(()) })
    }
}

fn stats(samples: &mut [Duration]) -> String {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    format!(
        "median {:.2} ms, min {:.2} ms, max {:.2} ms ({} swaps)",
        ms(samples[samples.len() / 2]),
        ms(samples[0]),
        ms(samples[samples.len() - 1]),
        samples.len()
    )
}

/// One `BENCH-JSON` line of sorted swap times, for `sync-bench report`.
fn bench_json(path: &str, label: &str, sorted: &[Duration]) {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let v = serde_json::json!({
        "bench": "swap", "path": path, "plugin": label,
        "median_ms": ms(sorted[sorted.len() / 2]),
        "max_ms": ms(sorted[sorted.len() - 1]),
        "swaps": sorted.len(),
    });
    println!("BENCH-JSON {v}");
}

/// Waits (polling the counter, off the runtime) until `counter`
/// passes `from`; returns when it did.
fn first_delta_after(counter: &Arc<kubewasm::dispatch::PluginStats>, from: u64) -> Instant {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if counter.delivered.load(Ordering::Acquire) > from {
            return Instant::now();
        }
        assert!(Instant::now() < deadline, "no delta within 60 s");
        // Yield: on 2 cores a busy spin would take one from the swap.
        std::thread::yield_now();
    }
}

/// The swap measurements for one plugin.
fn swap(label: &str, name: &str, original: &[u8], sidecar: &str, rounds: usize) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let folder = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let staging = tempfile::tempdir().unwrap();
    let engine = EngineOptions {
        epoch_deadlines: true,
        cache_dir: Some(cache.path().to_owned()),
        ..Default::default()
    };
    let cancel = CancellationToken::new();
    let activity = Arc::new(Activity::default());
    let (host, dir) = rt.block_on(async {
        let telemetry = Telemetry::new(Identity::from_env());
        let informers = Arc::new(InformerSet::new(
            Arc::new(Fixed(objects())),
            activity.clone(),
            cancel.child_token(),
            telemetry.clone(),
        ));
        let executor = Arc::new(Executor::new(
            Arc::new(NullSink),
            ExecutorOptions::default(),
            telemetry.clone(),
        ));
        let host = Arc::new(PluginHost::new(
            Runtime::new(engine.clone()).unwrap(),
            informers,
            KindRegistry::builtin(),
            executor,
            activity.clone(),
            DispatchOptions::default(),
            telemetry,
        ));
        let dir = Arc::new(PluginDir::new(folder.path().to_owned(), host.clone()));
        (host, dir)
    });
    std::fs::write(folder.path().join(format!("{name}.yaml")), sidecar).unwrap();
    // `kubewasm compile` of each build into the host's cache, then the
    // file renamed into the folder.
    let ship = |round: usize| {
        let bytes = rebuilt(original, &format!("{label}-{round}"));
        let stage = staging.path().join(format!("{name}.wasm"));
        std::fs::write(&stage, &bytes).unwrap();
        let report = kubewasm::precompile::compile_folder(staging.path(), engine.clone()).unwrap();
        assert!(report.failed().next().is_none());
        stage
    };
    let stage = ship(0);
    std::fs::rename(&stage, folder.path().join(format!("{name}.wasm"))).unwrap();
    rt.block_on(dir.scan()).unwrap();
    let counter = host.stats().get(name).cloned().unwrap();
    let wait_idle = || {
        while !rt.block_on(host.all_idle()) {
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    wait_idle();

    let mut scan_to_first = Vec::new();
    let mut scan_returned = Vec::new();
    for round in 1..=rounds {
        let stage = ship(round);
        let before = counter.delivered.load(Ordering::Acquire);
        let t0 = Instant::now();
        std::fs::rename(&stage, folder.path().join(format!("{name}.wasm"))).unwrap();
        let scanning = {
            let dir = dir.clone();
            rt.spawn(async move { dir.scan().await })
        };
        let first = first_delta_after(&counter, before);
        let outcome = rt.block_on(scanning).unwrap().unwrap();
        let returned = t0.elapsed();
        assert_eq!(
            outcome.get(name),
            Some(&kubewasm::reload::Outcome::Replaced)
        );
        let v = rt.block_on(host.get(name)).unwrap();
        assert_eq!(
            v.load.compile_source,
            kubewasm::runtime::CompileSource::Cached
        );
        scan_to_first.push(first - t0);
        scan_returned.push(returned);
        wait_idle();
    }
    println!(
        "  {label}: file renamed in, folder scan -> first delta of the new version: {}",
        stats(&mut scan_to_first)
    );
    bench_json("scan", label, &scan_to_first);
    println!(
        "  {label}: the scan's own end (swap done, old version stopped): {}",
        stats(&mut scan_returned)
    );

    // Through the watcher: its debounce comes first.
    let watcher_cancel = CancellationToken::new();
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let watching = {
        let dir = dir.clone();
        let c = watcher_cancel.clone();
        rt.spawn(async move {
            dir.watch_with_ready(c, Duration::from_secs(3600), ready_tx)
                .await
        })
    };
    rt.block_on(ready_rx).unwrap();
    let mut watched = Vec::new();
    for round in rounds + 1..=rounds + rounds.min(3) {
        let stage = ship(round);
        let before = counter.delivered.load(Ordering::Acquire);
        let t0 = Instant::now();
        std::fs::rename(&stage, folder.path().join(format!("{name}.wasm"))).unwrap();
        watched.push(first_delta_after(&counter, before) - t0);
        wait_idle();
    }
    println!(
        "  {label}: file renamed in, watcher -> first delta: {}",
        stats(&mut watched)
    );
    bench_json("watcher", label, &watched);
    watcher_cancel.cancel();
    rt.block_on(watching).unwrap().unwrap();
    rt.block_on(host.shutdown());
    cancel.cancel();
}

/// `/proc/PID/status` fields in KiB.
fn proc_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// A `/proc/PID/smaps_rollup` field in KiB.
fn rollup_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn mib(kib: u64) -> String {
    format!("{:.0} MiB", kib as f64 / 1024.0)
}

/// RSS once it stops moving (within 1 % over 1.5 s): the allocator's
/// decay (jemalloc: 1 s) has run.
fn settled_rss(pid: u32) -> u64 {
    let mut last = proc_kib(pid, "VmRSS:");
    let mut stable_since = Instant::now();
    let start = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(100));
        let now = proc_kib(pid, "VmRSS:");
        if now.abs_diff(last) * 100 > last {
            stable_since = Instant::now();
        }
        last = now;
        if stable_since.elapsed() >= Duration::from_millis(1500)
            || start.elapsed() > Duration::from_secs(30)
        {
            return now;
        }
    }
}

/// A `kubewasm run` over a local cluster, its log followed for lines.
struct Host {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Host {
    fn start(cluster: &Path, plugins: &Path, cache: &Path, compiler: &str) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_kubewasm"))
            .args(["--log-format", "text", "run", "--local"])
            .arg(cluster)
            .arg("--plugins")
            .arg(plugins)
            .arg("--cache-dir")
            .arg(cache)
            .args(["--compiler", compiler, "--metrics-addr", "off"])
            .env("RUST_LOG", "info")
            .env_remove("KUBECONFIG")
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line.replace('"', "")).is_err() {
                    break;
                }
            }
        });
        Self { child, lines }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for a log line holding every needle.
    fn wait_for(&self, needles: &[&str]) -> String {
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(600))
                .expect("the host's log ended or stalled");
            if line.contains("ERROR") {
                println!("    host: {line}");
            }
            if needles.iter().all(|n| line.contains(n)) {
                return line;
            }
        }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn install(plugins: &Path, name: &str, bytes: &[u8], sidecar: &str) {
    std::fs::write(plugins.join(format!("{name}.yaml")), sidecar).unwrap();
    let tmp = plugins.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(tmp, plugins.join(format!("{name}.wasm"))).unwrap();
}

fn rss(compiler: &str, precompiled: bool) {
    let dir = tempfile::tempdir().unwrap();
    let (cluster, plugins, cache) = (
        dir.path().join("cluster"),
        dir.path().join("plugins"),
        dir.path().join("cache"),
    );
    for d in [&cluster, &plugins] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(
        cluster.join("objects.yaml"),
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: team-a, labels: {tenant: 'yes'}}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: ca-bundle, namespace: default, labels: {kubewasm.io/replicate: 'true'}}\ndata: {ca.crt: x}\n",
    )
    .unwrap();
    let langs = [
        ("js", read(&language_plugin("js"))),
        ("python", read(&language_plugin("python"))),
    ];
    if precompiled {
        let stage = dir.path().join("stage");
        std::fs::create_dir_all(&stage).unwrap();
        for (lang, bytes) in &langs {
            std::fs::write(stage.join(format!("{lang}-config-replicator.wasm")), bytes).unwrap();
        }
        let out = Command::new(env!("CARGO_BIN_EXE_kubewasm"))
            .arg("compile")
            .arg(&stage)
            .arg("--cache-dir")
            .arg(&cache)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    }
    let host = Host::start(&cluster, &plugins, &cache, compiler);
    // No plugin yet, so no informer: the host is up once its cluster is.
    host.wait_for(&["local cluster loaded"]);
    let before = settled_rss(host.pid());
    let mut row = format!(
        "  {:<12} before {:>8}",
        if precompiled { "precompiled" } else { compiler },
        mib(before)
    );
    let mode = if precompiled { "precompiled" } else { compiler };
    let mut langs_json = Vec::new();
    for (lang, bytes) in &langs {
        let name = format!("{lang}-config-replicator");
        let t = Instant::now();
        install(&plugins, &name, bytes, REPLICATOR_SIDECAR);
        host.wait_for(&["plugin version started", &format!("plugin={name}")]);
        let loaded = t.elapsed();
        let after = settled_rss(host.pid());
        let anon = rollup_kib(host.pid(), "Anonymous:");
        row.push_str(&format!(
            " | {lang}: loaded in {:>5.1} s, after {:>8} ({:+.0} %; {} anonymous, {} file-backed)",
            loaded.as_secs_f64(),
            mib(after),
            (after as f64 / before as f64 - 1.0) * 100.0,
            mib(anon),
            mib(after.saturating_sub(anon)),
        ));
        langs_json.push(serde_json::json!({
            "lang": lang, "loaded_s": loaded.as_secs_f64(), "after_mib": after as f64 / 1024.0,
        }));
    }
    let peak = proc_kib(host.pid(), "VmHWM:");
    row.push_str(&format!(" | peak {}", mib(peak)));
    println!("{row}");
    let v = serde_json::json!({
        "bench": "rss", "mode": mode, "before_mib": before as f64 / 1024.0,
        "peak_mib": peak as f64 / 1024.0, "loads": langs_json,
    });
    println!("BENCH-JSON {v}");
}

fn cache_growth(builds: usize, cap: Option<&str>) {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let stage = dir.path().join("stage");
    std::fs::create_dir_all(&stage).unwrap();
    let plugins: Vec<(String, Vec<u8>)> = vec![
        ("js-config-replicator".into(), read(&language_plugin("js"))),
        (
            "config-replicator".into(),
            read(&rust_plugin("config_replicator")),
        ),
        (
            "namespace-defaults".into(),
            read(&rust_plugin("namespace_defaults")),
        ),
    ];
    let mut sizes = Vec::new();
    for build in 0..builds {
        for (name, bytes) in &plugins {
            std::fs::write(
                stage.join(format!("{name}.wasm")),
                rebuilt(bytes, &format!("build-{build}")),
            )
            .unwrap();
        }
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_kubewasm"));
        cmd.arg("compile")
            .arg(&stage)
            .arg("--cache-dir")
            .arg(&cache);
        if let Some(cap) = cap {
            cmd.args(["--compile-cache-max", cap]);
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{out:?}");
        let bytes: u64 = std::fs::read_dir(&cache)
            .unwrap()
            .flatten()
            .map(|e| e.metadata().unwrap().len())
            .sum();
        sizes.push(bytes as f64 / f64::from(1 << 20));
    }
    let v = serde_json::json!({"bench": "cache", "cap": cap, "builds": builds, "mib": sizes});
    println!("BENCH-JSON {v}");
    println!(
        "  cap {:<8}: MiB after each build: {}",
        cap.unwrap_or("1Gi (default)"),
        sizes
            .iter()
            .map(|m| format!("{m:.1}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
}

fn main() {
    let selected = common::selected(&common::names(), &["swap", "rss", "cache"]);
    if selected("swap") {
        println!(
            "swap: precompiled plugin file renamed into the folder -> first delta served by the new version (goal <= 10 ms)"
        );
        swap(
            "noop (Rust, 51 KB)",
            "noop",
            &read(&rust_plugin("noop")),
            NOOP_SIDECAR,
            20,
        );
        let replicator = rust_plugin("config_replicator");
        swap(
            "config-replicator (Rust)",
            "config-replicator",
            &read(&replicator),
            REPLICATOR_SIDECAR,
            20,
        );
        if language_plugin("js").exists() {
            swap(
                "config-replicator (JS, QuickJS)",
                "js-config-replicator",
                &read(&language_plugin("js")),
                REPLICATOR_SIDECAR,
                10,
            );
        }
        if language_plugin("python").exists() {
            swap(
                "config-replicator (Python)",
                "py-config-replicator",
                &read(&language_plugin("python")),
                REPLICATOR_SIDECAR,
                2,
            );
        }
    }
    if selected("rss") {
        println!(
            "rss: kubewasm run's RSS before loading, after the JS then the Python config-replicator (settled), and its peak (goal: within 20 % of before)"
        );
        rss("child", true);
        rss("child", false);
        rss("in-process", false);
    }
    if selected("cache") {
        println!(
            "cache: compile cache size after each build of 3 plugins (JS config-replicator + 2 Rust), each build new content"
        );
        cache_growth(8, Some("16Mi"));
        cache_growth(8, None);
    }
}
