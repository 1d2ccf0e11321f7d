//! Tiered compilation (`fastFirstCompile: auto`): a plugin whose optimized
//! code is not in the compile cache is served at once by fast-tier (Winch)
//! code, its optimized (Cranelift) code compiled in the background and
//! swapped in through the hot swap.
//! - Through the binary, with an empty cache: the JavaScript
//!   config-replicator's first delta is served by the fast tier well before
//!   its optimized code is compiled; the tier-up then swaps without a
//!   restart, the copies following the source across it; a restart maps
//!   the optimized artifact directly (and the fast one is gone).
//! - Through the pipeline, the optimized compile held at a gate until the
//!   fast tier has served live deltas: across the tier-up swap every delta
//!   the recorder plugin receives is handled exactly once, by one version
//!   or the other.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use kubewasm::actions::Action;
use kubewasm::actions::executor::{Executor, ExecutorOptions, RecordingSink};
use kubewasm::dispatch::{Activity, DispatchOptions};
use kubewasm::manager::PluginHost;
use kubewasm::runtime::{Compiler, EngineOptions, FastFirst, Manifest, Runtime, Tier};
use kubewasm::source::local::LocalCluster;
use kubewasm_tests::e2e::{eventually, kubewasm_bin, recorder_sidecar};
use kubewasm_tests::host_child::HostChild;
use kubewasm_tests::{
    Harness, LocalInformers, REPLICATOR_CLUSTER, REPLICATOR_SIDECAR, install_file,
    language_artifacts, run_local, wasm, write_cluster,
};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(300);

/// `kubewasm run` over a local cluster folder, logging (text) to a file.
struct LocalHost {
    host: HostChild,
}

impl LocalHost {
    fn start(dir: &Path) -> Self {
        let log = dir.join(format!("host-{}.log", nanos()));
        let host = HostChild::spawn(
            run_local(
                &dir.join("cluster"),
                &dir.join("plugins"),
                &dir.join("cache"),
            )
            .args(["--metrics-addr", "off"]),
            log,
        );
        Self { host }
    }

    fn logs(&self) -> String {
        self.host.logs().replace('"', "")
    }

    /// The first log line holding every one of `needles`.
    fn line(&self, needles: &[&str]) -> Option<String> {
        self.logs()
            .lines()
            .find(|l| needles.iter().all(|n| l.contains(n)))
            .map(str::to_owned)
    }

    async fn wait_line(&self, needles: &[&str]) -> String {
        eventually(
            &format!("a host log line with {needles:?}"),
            WAIT,
            || async { self.line(needles) },
        )
        .await
    }

    /// The host's resident set, MiB.
    fn rss_mib(&self) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.host.pid())).unwrap();
        let kb: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap();
        kb / 1024.0
    }

    fn stop(self) {
        let (status, logs) = self.host.stop_with_logs();
        assert!(status.success(), "host exit {status}; log:\n{logs}");
    }
}

fn nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// A `key=value` field of a text log line.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

/// `data["ca.crt"]` of team-a's copy of the CA bundle, if there is one.
fn copy_data(cluster: &Path) -> Option<String> {
    let text = std::fs::read_to_string(cluster.join("team-a/configmaps-ca-bundle.yaml")).ok()?;
    let v: Value = serde_yaml_ng::from_str(&text).ok()?;
    v["data"]["ca.crt"].as_str().map(str::to_owned)
}

fn source(pem: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: ca-bundle, namespace: platform, labels: {{kubewasm.io/replicate: 'true'}}}}\ndata: {{ca.crt: {pem}}}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_plugin_is_served_by_the_fast_tier_at_once_then_by_its_optimized_code() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = dir.path().join("cluster");
    // The replicator's cluster with the source in a file of its own, to
    // change and delete.
    let (namespaces, _) = REPLICATOR_CLUSTER
        .split_once("---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: ca-bundle")
        .unwrap();
    write_cluster(
        &cluster,
        &[
            ("cluster.yaml", namespaces),
            ("platform/ca-bundle.yaml", &source("PEM-1")),
        ],
    );
    let plugins = dir.path().join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    install_file(
        &plugins,
        "replicator",
        &language_artifacts().join("js-config-replicator.wasm"),
        Some(REPLICATOR_SIDECAR),
    );
    // The binary is built before the clock starts.
    kubewasm_bin();

    let started = Instant::now();
    let host = LocalHost::start(dir.path());
    // The first delta: the initial sync's copy, by the fast tier (the
    // tier-up has not happened when the copy is seen, and tiers only go up).
    eventually("the first copy", WAIT, || async {
        copy_data(&cluster).filter(|d| d == "PEM-1")
    })
    .await;
    let first_delta = started.elapsed();
    let fast_rss = host.rss_mib();
    assert!(
        host.line(&["plugin tiered up"]).is_none(),
        "optimized code was ready before the first delta was served:\n{}",
        host.logs()
    );
    let fast_started = host
        .line(&["plugin version started", "plugin=replicator"])
        .unwrap();
    assert_eq!(field(&fast_started, "tier"), Some("fast"), "{fast_started}");
    let fast_compile = host
        .line(&["component compiled", "tier=fast"])
        .and_then(|l| field(&l, "elapsed_ms").map(str::to_owned))
        .unwrap();

    // Live changes while the optimized code compiles and after the swap:
    // the copies follow each one.
    let mut changes = 0;
    let mut tiered_up = None;
    while tiered_up.is_none() || changes < 3 + tiered_up.unwrap_or(0) {
        changes += 1;
        let pem = format!("PEM-{}", changes + 1);
        write_cluster(&cluster, &[("platform/ca-bundle.yaml", &source(&pem))]);
        eventually("the copy to follow the source", WAIT, || async {
            copy_data(&cluster).filter(|d| *d == pem)
        })
        .await;
        if tiered_up.is_none() && host.line(&["plugin tiered up"]).is_some() {
            tiered_up = Some(changes);
        }
    }
    let tier_up = host.wait_line(&["plugin tiered up"]).await;
    let tier_up_at = started.elapsed();
    assert_eq!(field(&tier_up, "tier"), Some("optimized"), "{tier_up}");
    let optimized_compile = field(&tier_up, "compile_ms").unwrap().to_owned();
    let optimized_rss = host.rss_mib();
    let swapped = host
        .line(&[
            "plugin version started",
            "plugin=replicator",
            "tier=optimized",
        ])
        .unwrap();
    assert_eq!(field(&swapped, "version"), field(&fast_started, "version"));
    assert!(
        host.line(&["the fast tier keeps serving"]).is_none(),
        "{}",
        host.logs()
    );
    // The source goes: so do its copies (the optimized code serves).
    std::fs::remove_file(cluster.join("platform/ca-bundle.yaml")).unwrap();
    eventually("the copies to go", WAIT, || async {
        copy_data(&cluster).is_none().then_some(())
    })
    .await;
    eprintln!(
        "JS config-replicator, empty cache: first delta at {:.2} s (fast compile {fast_compile} ms); optimized code swapped in at {:.2} s (background compile {optimized_compile} ms); {changes} source changes followed across it, {} before the swap was seen; host RSS {fast_rss:.0} MiB on fast code, {optimized_rss:.0} MiB after the tier-up",
        first_delta.as_secs_f64(),
        tier_up_at.as_secs_f64(),
        tiered_up.unwrap_or(0) - 1,
    );
    host.stop();

    // The cache keeps the optimized artifact only; a restart maps it.
    let artifacts: Vec<_> = std::fs::read_dir(dir.path().join("cache"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".cwasm"))
        .collect();
    assert_eq!(artifacts.len(), 1, "{artifacts:?}");
    let host = LocalHost::start(dir.path());
    write_cluster(&cluster, &[("platform/ca-bundle.yaml", &source("PEM-X"))]);
    eventually("the copy after the restart", WAIT, || async {
        copy_data(&cluster).filter(|d| d == "PEM-X")
    })
    .await;
    let restarted = host.wait_line(&["plugin version started"]).await;
    assert_eq!(field(&restarted, "tier"), Some("optimized"), "{restarted}");
    assert_eq!(field(&restarted, "compile"), Some("Cached"), "{restarted}");
    assert!(
        host.line(&["compiling component"]).is_none(),
        "{}",
        host.logs()
    );
    host.stop();
}

/// A compiler child that holds background (tier-up) compiles until the
/// test opens its gate; load compiles go straight to the real binary.
struct Gate {
    fifo: PathBuf,
    program: PathBuf,
    released: bool,
}

impl Gate {
    fn new(dir: &Path) -> Self {
        use std::os::unix::fs::PermissionsExt;
        let fifo = dir.join("gate");
        assert!(
            Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap()
                .success()
        );
        let program = dir.join("gated-kubewasm");
        std::fs::write(
            &program,
            format!(
                "#!/bin/sh\ncase \" $* \" in *\" --background \"*) read _ < '{}' ;; esac\nexec '{}' \"$@\"\n",
                fifo.display(),
                kubewasm_bin().display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
        Self {
            fifo,
            program,
            released: false,
        }
    }

    fn compiler(&self) -> Compiler {
        Compiler::Child {
            program: self.program.clone(),
        }
    }

    /// Lets the held compile go (opening the FIFO waits for its reader).
    async fn release(&mut self) {
        self.released = true;
        let fifo = self.fifo.clone();
        tokio::task::spawn_blocking(move || std::fs::write(fifo, b"go\n"))
            .await
            .unwrap()
            .unwrap();
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        if !self.released {
            // A failed test's held child, if any, is killed with the
            // runtime; a writer nobody reads blocks only this thread.
            let fifo = self.fifo.clone();
            std::thread::spawn(move || std::fs::write(fifo, b"go\n"));
        }
    }
}

/// One recorder Event: the delta as the plugin saw it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Seen {
    version: String,
    delta: String,
    name: String,
    rv: String,
    initial: bool,
}

fn seen(actions: Vec<(String, Action)>) -> Vec<Seen> {
    actions
        .into_iter()
        .filter_map(|(_, a)| match a {
            Action::Event { note, .. } => {
                let n: Value = serde_json::from_str(&note).unwrap();
                Some(Seen {
                    version: n["version"].as_str()?.to_owned(),
                    delta: n["type"].as_str()?.to_owned(),
                    name: n["name"].as_str().unwrap_or_default().to_owned(),
                    rv: n["rv"].as_str().unwrap_or_default().to_owned(),
                    initial: n["initial"].as_bool()?,
                })
            }
            _ => None,
        })
        .collect()
}

fn cm(name: &str, v: usize) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: app}}\ndata: {{v: \"{v}\"}}\n"
    )
}

struct Pipeline {
    cluster: Arc<LocalCluster>,
    host: Arc<PluginHost>,
    activity: Arc<Activity>,
    sink: Arc<RecordingSink>,
    seen: Vec<Seen>,
}

impl Pipeline {
    async fn settled(&self) {
        eventually("the pipeline to settle", WAIT, || async {
            let done = self.host.informers().all_synced()
                && self.activity.is_idle()
                && self.host.all_idle().await;
            done.then_some(())
        })
        .await;
    }

    /// Changes the cluster's files, waits until the informer has fanned
    /// the change out and everything settled, and collects the recorder's
    /// Events.
    async fn change(&mut self, change: impl FnOnce()) {
        let before = self.activity.emitted.load(Ordering::SeqCst);
        change();
        self.cluster.rescan().unwrap();
        eventually("the change to reach the informer", WAIT, || async {
            (self.activity.emitted.load(Ordering::SeqCst) > before).then_some(())
        })
        .await;
        self.settled().await;
        self.seen.extend(seen(self.sink.take()));
    }

    /// ConfigMap `app/<name>` as the cluster holds it.
    fn get(&self, name: &str) -> Option<Value> {
        let cm = kubewasm::kind::Gvk::new("", "v1", "ConfigMap");
        self.cluster.get(&cm, Some("app"), name)
    }

    fn rv(&self, name: &str) -> String {
        self.get(name).unwrap()["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// Step `step` of the changes: updates, creates or deletes one
    /// ConfigMap of the cluster in `dir`, noting it in `made`.
    async fn step(&mut self, dir: &Path, made: &mut Made, step: usize) {
        let write = |name: &str| {
            write_cluster(dir, &[(&format!("app/{name}.yaml"), &cm(name, step + 1))]);
        };
        match step % 3 {
            0 => {
                // An update, or a creation again after a delete.
                let name = format!("c{}", step % 12);
                let delta = if self.get(&name).is_some() {
                    "updated"
                } else {
                    "added"
                };
                self.change(|| write(&name)).await;
                made.live.push((name.clone(), self.rv(&name), delta.into()));
            }
            1 => {
                let name = format!("n{step}");
                self.change(|| write(&name)).await;
                made.live
                    .push((name.clone(), self.rv(&name), "added".into()));
            }
            _ => {
                let name = format!("c{}", 11 - step % 12);
                if self.get(&name).is_some() {
                    self.change(|| {
                        std::fs::remove_file(dir.join(format!("app/{name}.yaml"))).unwrap()
                    })
                    .await;
                    made.deleted.push(name);
                }
            }
        }
    }
}

/// What the test did to the cluster, to find in the recorder's Events.
#[derive(Default)]
struct Made {
    /// (name, resourceVersion, delta type) of each update and creation.
    live: Vec<(String, String, String)>,
    deleted: Vec<String>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tier_up_swap_hands_every_delta_to_exactly_one_version() {
    let h = Harness::new();
    let files: Vec<(String, String)> = (0..12)
        .map(|i| (format!("app/c{i}.yaml"), cm(&format!("c{i}"), 0)))
        .collect();
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect();
    write_cluster(h.cluster.path(), &refs);
    let mut gate = Gate::new(h.plugins.path());
    let LocalInformers {
        kinds,
        cluster,
        activity,
        telemetry,
        informers,
    } = h.local_informers();
    let sink = Arc::new(RecordingSink::default());
    let executor = Arc::new(
        Executor::new(sink.clone(), ExecutorOptions::default(), telemetry.clone())
            .with_activity(activity.clone()),
    );
    // Every plugin, however small, is served by the fast tier first.
    let runtime = Runtime::new(EngineOptions {
        epoch_deadlines: true,
        cache_dir: Some(h.cache.path().to_owned()),
        compiler: gate.compiler(),
        fast_first: FastFirst::Auto { min_bytes: 0 },
        ..Default::default()
    })
    .unwrap();
    let host = Arc::new(PluginHost::new(
        runtime,
        informers,
        kinds,
        executor,
        activity.clone(),
        DispatchOptions::default(),
        telemetry,
    ));
    let manifest = Manifest::parse(
        Path::new("recorder.yaml"),
        &recorder_sidecar("app", &["configmaps"]),
    )
    .unwrap();
    let fast = host
        .install("recorder", wasm("recorder"), manifest)
        .await
        .unwrap();
    assert_eq!(fast.tier(), Tier::Fast);
    assert!(host.tier_up_pending("recorder"));
    let mut p = Pipeline {
        cluster,
        host: host.clone(),
        activity,
        sink,
        seen: Vec::new(),
    };
    p.settled().await;
    p.seen.extend(seen(p.sink.take()));
    let dir = h.cluster.path().to_owned();
    let mut made = Made::default();
    let mut step = 0;
    // The fast tier serves live deltas while the optimized code is held.
    while step < 6 {
        p.step(&dir, &mut made, step).await;
        step += 1;
    }
    assert_eq!(host.get("recorder").await.unwrap().tier(), Tier::Fast);
    let fast_seen = p.seen.len();
    gate.release().await;
    // Changes go on until optimized code serves, and a few after.
    let mut after = 0;
    while after < 4 {
        p.step(&dir, &mut made, step).await;
        step += 1;
        if host.get("recorder").await.unwrap().tier() == Tier::Optimized {
            after += 1;
        }
        assert!(step < 5_000, "optimized code never swapped in");
    }
    assert!(!host.tier_up_pending("recorder"));
    let optimized = host.get("recorder").await.unwrap();
    assert_eq!(optimized.version(), fast.version());

    let versions: BTreeSet<&str> = p.seen.iter().map(|s| s.version.as_str()).collect();
    assert_eq!(versions.len(), 2, "{:#?}", p.seen);
    let fast_id = &p.seen[0].version;
    assert!(p.seen[..fast_seen].iter().all(|s| s.version == *fast_id));
    // Every delete handled exactly once, by one version or the other (a
    // name comes back when the tier-up takes many steps, so deletes are
    // counted per name).
    let mut deletes: BTreeMap<&str, usize> = BTreeMap::new();
    for name in &made.deleted {
        *deletes.entry(name.as_str()).or_default() += 1;
    }
    for (name, made) in &deletes {
        let n = p
            .seen
            .iter()
            .filter(|s| s.delta == "deleted" && s.name == *name)
            .count();
        assert_eq!(
            n, *made,
            "{name} deleted {made} times, its delete handled {n} times: {:#?}",
            p.seen
        );
    }
    // Every update and creation handled exactly once, and nothing else
    // live.
    let mut live: Vec<(String, String, String)> = p
        .seen
        .iter()
        .filter(|s| !s.initial && !matches!(s.delta.as_str(), "synced" | "deleted"))
        .map(|s| (s.name.clone(), s.rv.clone(), s.delta.clone()))
        .collect();
    live.sort();
    made.live.sort();
    assert_eq!(live, made.live, "{:#?}", p.seen);
    // Each version handled live changes; the optimized one started from a
    // replay of the cache.
    let by_version: BTreeMap<&str, usize> = p
        .seen
        .iter()
        .filter(|s| !s.initial && s.delta != "synced")
        .fold(BTreeMap::new(), |mut m, s| {
            *m.entry(s.version.as_str()).or_default() += 1;
            m
        });
    assert!(
        by_version.values().all(|n| *n > 0) && by_version.len() == 2,
        "{by_version:?}"
    );
    assert!(
        p.seen.iter().any(|s| s.version != *fast_id && s.initial),
        "no replay for the optimized version: {:#?}",
        p.seen
    );
    let fast_live = by_version.get(fast_id.as_str()).copied().unwrap_or(0);
    let total: usize = by_version.values().sum();
    eprintln!(
        "tier-up under changes: {total} live deltas ({} deletes), {fast_live} handled by the fast tier, {} by optimized code",
        made.deleted.len(),
        total - fast_live,
    );
    host.shutdown().await;
}
