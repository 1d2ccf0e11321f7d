//! What the runtime and languages benchmarks share: a fixed source, the
//! names picked on the command line, the compile/cached-load timing, the
//! corpus Pod delta and scope the benchmark plugins (noop, realistic,
//! parse-all) run with, and the inline best-of-five measurement.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kubewasm::dispatch::Activity;
use kubewasm::informer::{
    Delta, DeltaType, InformerSet, InformerSpec, Source, SourceError, SubscriptionHandle,
    WatchEvent,
};
use kubewasm::kind::{Gvk, KindRef, KindRegistry};
use kubewasm::object::{KObject, StripOptions};
use kubewasm::runtime::host::PluginScope;
use kubewasm::runtime::{CallDelta, CompileSource, EngineOptions, Manifest, Prepared, Runtime};

/// A source that lists these objects once and then stays silent.
pub struct Fixed(pub Vec<KObject>);

impl Source for Fixed {
    fn watch(
        &self,
        spec: &InformerSpec,
    ) -> futures::stream::BoxStream<'static, Result<WatchEvent, SourceError>> {
        let objs: Vec<_> = self
            .0
            .iter()
            .filter(|o| o.gvk() == spec.kind.gvk)
            .map(|o| {
                Ok(WatchEvent::InitApply(
                    KObject::from_json(o.json(), StripOptions::default()).unwrap(),
                ))
            })
            .collect();
        let mut evs = vec![Ok(WatchEvent::Init)];
        evs.extend(objs);
        evs.push(Ok(WatchEvent::InitDone));
        Box::pin(futures::stream::iter(evs).chain(futures::stream::pending()))
    }
}

/// The names given after `--` (`cargo bench ... -- a b`).
pub fn names() -> Vec<String> {
    std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect()
}

/// Whether `name`, one of `among`, is to run: all of `among` run when
/// none of them is among `names`.
pub fn selected(names: &[String], among: &[&str]) -> impl Fn(&str) -> bool + use<> {
    let only: Vec<String> = names
        .iter()
        .filter(|n| among.contains(&n.as_str()))
        .cloned()
        .collect();
    move |name| only.is_empty() || only.iter().any(|o| o == name)
}

/// A machine-readable figure for scripts/bench.sh's report.
pub fn emit(v: &serde_json::Value) {
    println!("BENCH-JSON {v}");
}

/// The corpus (KUBEWASM_CORPUS, default ../shared/corpus): its Pods are
/// in `objects/Pod`.
pub fn corpus_pods_dir() -> PathBuf {
    std::env::var("KUBEWASM_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/corpus"))
        .join("objects/Pod")
}

/// The corpus Pods scheduled on a node (`spec.nodeName` set), compact,
/// managedFields removed, in file name order; none without a corpus.
pub fn corpus_pods() -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(corpus_pods_dir()) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    files.sort();
    files
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .filter_map(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .filter_map(|mut v| {
            if let Some(m) = v["metadata"].as_object_mut() {
                m.remove("managedFields");
            }
            v["spec"]["nodeName"]
                .is_string()
                .then(|| serde_json::to_string(&v).unwrap())
        })
        .collect()
}

/// The corpus Pod closest to 4 KB compact (see [`corpus_pods`]), else a
/// built-in 4 KB Pod; says which on stdout.
pub fn sample_pod() -> String {
    let dir = corpus_pods_dir();
    if let Some(s) = corpus_pods()
        .into_iter()
        .min_by_key(|s| s.len().abs_diff(4096))
    {
        println!(
            "pod: from corpus {}, {} bytes compact",
            dir.display(),
            s.len()
        );
        return s;
    }
    println!(
        "pod: corpus not found at {}; using a built-in pod",
        dir.display()
    );
    let containers: Vec<_> = (0..4).map(|i| serde_json::json!({"name": format!("c{i}"), "image": "registry.example/app:1.2.3",
        "env": (0..6).map(|j| serde_json::json!({"name": format!("VAR_{j}"), "value": "some-value-here"})).collect::<Vec<_>>(),
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}})).collect();
    serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-1", "namespace": "shop", "uid": "u", "resourceVersion": "1",
        "labels": {"app": "web"}}, "spec": {"nodeName": "node-1", "containers": containers},
        "status": {"phase": "Running", "containerStatuses": [{"name": "c0", "restartCount": 2, "ready": true, "image": "x", "imageID": "y"}]}}).to_string()
}

/// What the benchmark plugins (plugins/testing/{noop,realistic,parse-all}
/// and their twins in other languages) run with: an `updated` delta of
/// [`sample_pod`], and a scope whose Node cache holds that Pod's Node
/// (zone label `eu-1a`), with the access the realistic plugin needs.
pub struct PodBench {
    pub pod_json: String,
    pub delta: CallDelta,
    pub scope: Arc<PluginScope>,
    /// Keeps the Node informer running.
    _informer: (
        InformerSet,
        SubscriptionHandle,
        tokio::sync::mpsc::UnboundedReceiver<Delta>,
    ),
}

impl PodBench {
    pub fn new(rt: &tokio::runtime::Runtime) -> Self {
        let pod_json = sample_pod();
        let pod = Arc::new(KObject::from_json(&pod_json, StripOptions::default()).unwrap());
        let node_name = match pod.field("/spec/nodeName") {
            Some(kubewasm::object::FieldValue::Text(n)) => n,
            _ => "node-1".into(),
        };
        let node = KObject::from_value(
            serde_json::json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node_name,
            "labels": {"topology.kubernetes.io/zone": "eu-1a"}}}),
            StripOptions::default(),
        )
        .unwrap();
        let kinds = KindRegistry::builtin();
        let informers = InformerSet::new(
            Arc::new(Fixed(vec![node])),
            Arc::new(Activity::default()),
            Default::default(),
            kubewasm::telemetry::Telemetry::new(kubewasm::telemetry::Identity::from_env()),
        );
        let node_kind = kinds.resolve(&KindRef::Resource("nodes".into())).unwrap();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let handle = rt.block_on(async {
            let h = informers.subscribe(
                InformerSpec {
                    kind: node_kind.clone(),
                    namespace: None,
                    label_selector: None,
                    field_selector: None,
                },
                tx,
            );
            h.informer.wait_synced().await;
            h
        });
        let scope = Arc::new(PluginScope {
            kinds: kinds.clone(),
            reads: HashMap::from([(node_kind.gvk.clone(), vec![handle.informer.view()])]),
            indexes: HashMap::new(),
            writes: [Gvk::new("", "v1", "Pod")].into_iter().collect(),
            // What the realistic plugin does: read nodes, apply and patch pods.
            grant: Manifest::parse(
                Path::new("bench.yaml"),
                "access:\n  - {kinds: [nodes], verbs: [read]}\n  - {kinds: [pods], verbs: [apply, patch, delete, status, events]}\n",
            )
            .unwrap()
            .grant("bench"),
        });
        Self {
            pod_json,
            delta: Self::updated(pod),
            scope,
            _informer: (informers, handle, rx),
        }
    }

    /// An `updated` delta of `pod` (subscription 0, no old object).
    pub fn updated(pod: Arc<KObject>) -> CallDelta {
        CallDelta {
            object: Some(pod),
            ..CallDelta::new(DeltaType::Updated, 0, Gvk::new("", "v1", "Pod"))
        }
    }
}

/// Per-iteration time of `run(count)` over `n` iterations: a tenth to warm
/// up, then the best of five rounds (a shared machine only ever adds time).
pub fn best_of_five(n: usize, mut run: impl FnMut(usize)) -> Duration {
    run(n / 10);
    (0..5)
        .map(|_| {
            let start = Instant::now();
            run(n / 5);
            start.elapsed() / (n / 5) as u32
        })
        .min()
        .unwrap_or_default()
}

/// A runtime whose compiled components are cached in `cache`, with epoch
/// deadlines on or off.
pub fn runtime(cache: &Path, epoch_deadlines: bool) -> Runtime {
    Runtime::new(EngineOptions {
        epoch_deadlines,
        cache_dir: Some(cache.to_owned()),
        ..Default::default()
    })
    .unwrap()
}

/// A component prepared twice over one empty compile cache: the first
/// compiles, the second loads what the first cached.
pub struct Compiled {
    pub prepared: Prepared,
    pub cold: Duration,
    pub cached: Duration,
    /// The compile cache, kept as long as what was loaded from it.
    _cache: tempfile::TempDir,
}

pub fn compile_then_load(name: &str, bytes: &[u8]) -> Compiled {
    let dir = tempfile::tempdir().unwrap();
    let opts = EngineOptions {
        epoch_deadlines: true,
        cache_dir: Some(dir.path().to_owned()),
        ..Default::default()
    };
    let t0 = Instant::now();
    let cold = Runtime::new(opts.clone())
        .unwrap()
        .prepare(name, bytes, Manifest::default())
        .unwrap();
    let cold_t = t0.elapsed();
    drop(cold);
    let t1 = Instant::now();
    let prepared = Runtime::new(opts)
        .unwrap()
        .prepare(name, bytes, Manifest::default())
        .unwrap();
    let cached = t1.elapsed();
    assert_eq!(prepared.compile_source, CompileSource::Cached);
    Compiled {
        prepared,
        cold: cold_t,
        cached,
        _cache: dir,
    }
}
