//! Pipeline and cache benchmark (prints figures; not a timed test).
//!
//! Run: `bash plugins/build.sh && cargo bench -p kubewasm --bench pipeline`.
//! Objects are real Pods from the corpus (KUBEWASM_CORPUS, default
//! ../shared/corpus), cloned under new names to reach the counts below.
//!
//! 1. Bytes per cached Pod: live heap bytes (a counting allocator) of the
//!    lister cache holding N Pods, against their compact JSON size with
//!    and without managedFields.
//! 2. Decode: one watch event line of a served Pod (managedFields
//!    included) into the cache's form, the way the API-server source did
//!    it before (a `DynamicObject`, then a `Value`, then text) and the way
//!    it does now (the object's text, scanned once).
//! 3. Throughput: an initial list of N Pods through source -> informer ->
//!    cache -> dispatcher -> plugin (no-op and realistic), deltas/s.
//! 4. Latency: updates paced at 5k/s (ARCHITECTURE.md's rate); p50/p99 from the
//!    informer receiving a delta to the plugin call returning. One instance
//!    of each plugin is also swept over rates from 500/s up to 80 % of its
//!    measured throughput (the latency-against-rate plot of
//!    docs/book/src/contributing/performance.md).
//!
//! `KUBEWASM_BENCH_UI=open` attaches one web-view page (`--ui`) to the
//! pipeline: the same event stream an open browser tab reads (its feed
//! subscription, sampling and JSON encoding; no socket), so the figures
//! compare with a run without it (the default: no page open).
//!
//! Besides the Markdown tables, every figure is printed once more as a
//! `BENCH-JSON {...}` line, which `scripts/bench.sh`'s report reads.
#![allow(
    unsafe_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::cast_precision_loss
)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use kubewasm::actions::Action;
use kubewasm::actions::executor::{ActionError, ActionSink, Executor, ExecutorOptions};
use kubewasm::dispatch::{Activity, DispatchOptions, PluginStats};
use kubewasm::informer::{InformerSet, InformerSpec, Source, SourceError, Store, WatchEvent};
use kubewasm::kind::{Gvk, KindRegistry};
use kubewasm::manager::PluginHost;
use kubewasm::object::{KObject, StripOptions};
use kubewasm::runtime::limits::Ceiling;
use kubewasm::runtime::{EngineOptions, Manifest, Runtime};
use kubewasm::telemetry::{Identity, Telemetry};
use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Counts live heap bytes, to measure what the cache really holds.
struct Counting;
static LIVE: AtomicI64 = AtomicI64::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: same layout contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: `ptr` came from `alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size as i64 - layout.size() as i64, Ordering::Relaxed);
        // SAFETY: forwarded unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn corpus() -> PathBuf {
    std::env::var("KUBEWASM_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/corpus"))
}

/// Corpus Pods with managedFields, as the API server sends them.
fn corpus_pods() -> Vec<Value> {
    let dir = corpus().join("objects/Pod");
    let mut pods = Vec::new();
    for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let Ok(text) = std::fs::read_to_string(e.path()) else {
            continue;
        };
        let Ok(v) = serde_json::from_str::<Value>(&text) else {
            continue;
        };
        if v["kind"] == "Pod" && v["metadata"]["name"].is_string() {
            pods.push(v);
        }
    }
    pods.sort_by_key(|p| p["metadata"]["name"].as_str().unwrap_or("").to_owned());
    pods
}

fn plugin(name: &str) -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!(
        "../plugins/target/wasm32-wasip2/release/{name}.wasm"
    ));
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}; run plugins/build.sh first", p.display()))
}

/// Pod number `i`: corpus Pod `i % len` under a unique name and namespace.
fn clone_pod(pods: &[Value], i: usize) -> Value {
    let mut p = pods[i % pods.len()].clone();
    p["metadata"]["name"] = Value::from(format!("pod-{i}"));
    p["metadata"]["namespace"] = Value::from(format!("ns-{}", i % 50));
    p["metadata"]["uid"] = Value::from(format!("uid-{i}"));
    p["metadata"]["resourceVersion"] = Value::from(format!("{}", i + 1));
    p["spec"]["nodeName"] = Value::from(format!("node-{}", i % 20));
    p
}

fn percentile(sorted: &[usize], q: f64) -> usize {
    sorted[((sorted.len() - 1) as f64 * q) as usize]
}

fn cache_bytes(pods: &[Value]) {
    const N: usize = 10_000;
    let mut full = Vec::with_capacity(N);
    let mut stripped = Vec::with_capacity(N);
    let store = Store::default();
    store.add_index("by-node", "/spec/nodeName");
    // Everything allocated from here on and still live at the end is the
    // cache: the objects, their decoded metadata, the maps and indexes.
    let before = LIVE.load(Ordering::SeqCst);
    let objects: Vec<KObject> = (0..N)
        .map(|i| {
            let v = clone_pod(pods, i);
            full.push(serde_json::to_string(&v).unwrap().len());
            let o = KObject::from_value(v, StripOptions::default()).unwrap();
            stripped.push(o.json().len());
            o
        })
        .collect();
    for o in objects {
        store.upsert(Arc::new(o));
    }
    let after = LIVE.load(Ordering::SeqCst);
    full.sort_unstable();
    stripped.sort_unstable();
    let per = (after - before) as f64 / N as f64;
    let full_avg = full.iter().sum::<usize>() as f64 / N as f64;
    let stripped_avg = stripped.iter().sum::<usize>() as f64 / N as f64;
    println!(
        "## Bytes per cached Pod ({N} Pods from {} corpus Pods)",
        pods.len()
    );
    println!(
        "compact JSON as served (with managedFields): avg {full_avg:.0} B (p50 {} B, p99 {} B)",
        percentile(&full, 0.5),
        percentile(&full, 0.99)
    );
    println!("compact JSON stripped (no managedFields/last-applied): avg {stripped_avg:.0} B");
    println!(
        "cache, live heap incl. meta, maps, namespace + by-node index: {per:.0} B/Pod = {:.2}x served JSON, {:.2}x stripped JSON (goal <= 1.0x)",
        per / full_avg,
        per / stripped_avg
    );
    emit(&serde_json::json!({
        "bench": "cache-bytes", "pods": N, "bytes_per_pod": per,
        "served_json_avg": full_avg, "stripped_json_avg": stripped_avg,
    }));
    drop(store);
}

/// Feeds one informer per kind from channels the benchmark writes.
#[derive(Default)]
struct Feed {
    streams: Mutex<HashMap<Gvk, mpsc::UnboundedReceiver<Result<WatchEvent, SourceError>>>>,
}

impl Source for Feed {
    fn watch(&self, spec: &InformerSpec) -> BoxStream<'static, Result<WatchEvent, SourceError>> {
        match self.streams.lock().remove(&spec.kind.gvk) {
            Some(mut rx) => Box::pin(futures::stream::poll_fn(move |cx| rx.poll_recv(cx))),
            None => Box::pin(
                futures::stream::iter([Ok(WatchEvent::Init), Ok(WatchEvent::InitDone)])
                    .chain(futures::stream::pending()),
            ),
        }
    }
}
use futures::StreamExt;

#[derive(Default)]
struct NullSink(AtomicU64);
impl ActionSink for NullSink {
    fn execute<'a>(&'a self, _: &'a str, _: &'a Action) -> BoxFuture<'a, Result<(), ActionError>> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Box::pin(async { Ok(()) })
    }
}

async fn wait_delivered(host: &PluginHost, name: &str, n: u64) {
    let stats = host.stats().get(name).cloned().unwrap();
    while stats.delivered.load(Ordering::Relaxed) < n {
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
}

/// Watch event lines of `N` served Pods decoded the old way and the
/// current way; prints microseconds per event and the ratio.
fn decode(pods: &[Value]) {
    use kube::core::{DynamicObject, WatchEvent as KubeEvent};
    use kubewasm::source::kube::raw::RawObject;
    const N: usize = 5_000;
    // `type` before `object`, as the API server writes them (a `json!`
    // map would sort `object` first, which serde can only buffer).
    let lines: Vec<String> = (0..N)
        .map(|i| format!(r#"{{"type":"ADDED","object":{}}}"#, clone_pod(pods, i)))
        .collect();
    let bytes: usize = lines.iter().map(String::len).sum();
    let strip = StripOptions::default();
    let time = |f: &dyn Fn(&str) -> KObject| {
        // Best of three passes: the machine is shared.
        (0..3)
            .map(|_| {
                let start = Instant::now();
                for l in &lines {
                    std::hint::black_box(f(l));
                }
                start.elapsed().as_secs_f64() * 1e6 / N as f64
            })
            .fold(f64::INFINITY, f64::min)
    };
    let before = time(&|l| {
        let KubeEvent::Added(o) = serde_json::from_str::<KubeEvent<DynamicObject>>(l).unwrap()
        else {
            unreachable!()
        };
        KObject::from_value(serde_json::to_value(&o).unwrap(), strip).unwrap()
    });
    let now = time(&|l| {
        let KubeEvent::Added(o) = serde_json::from_str::<KubeEvent<RawObject>>(l).unwrap() else {
            unreachable!()
        };
        KObject::from_parts(o.parts(), Some(("v1", "Pod")), strip).unwrap()
    });
    println!(
        "## Decode: a watch event of a served Pod (avg {} B) into the cache's form",
        bytes / N
    );
    println!(
        "before (DynamicObject -> Value -> text): {before:.1} us; now (text scanned once): {now:.1} us; {:.2}x",
        before / now
    );
    emit(&serde_json::json!({
        "bench": "decode", "event_bytes": bytes / N, "before_us": before, "now_us": now,
    }));
}

/// One table row of a pipeline phase (`phase`: `initial-list` with its
/// `throughput`, or `paced` at `rate`), printed and emitted.
fn row(stats: &PluginStats, plugin: &str, instances: usize, mut phase: Value) {
    let label = match phase["rate"].as_f64() {
        Some(rate) => format!("updates paced at {rate:.0}/s"),
        None if phase["phase"] == "initial-list" => "initial list".to_owned(),
        None => "initial list, one delta per queue lock".to_owned(),
    };
    let throughput = phase["throughput"]
        .as_f64()
        .map_or_else(|| "-".to_owned(), |t| format!("{t:.0}/s"));
    let (p50, p99, call) = (
        stats.latency.quantile(0.5),
        stats.latency.quantile(0.99),
        stats.call_time.quantile(0.5),
    );
    println!(
        "| {plugin} | {instances} | {label} | {throughput} | {} | {} | {} |",
        fmt(p50),
        fmt(p99),
        fmt(call)
    );
    if let Value::Object(m) = &mut phase {
        m.extend([
            ("bench".to_owned(), Value::from("pipeline")),
            ("plugin".to_owned(), Value::from(plugin)),
            ("instances".to_owned(), Value::from(instances)),
            ("p50_us".to_owned(), micros(p50)),
            ("p99_us".to_owned(), micros(p99)),
            ("call_p50_us".to_owned(), micros(call)),
            ("ui_page".to_owned(), Value::from(ui_page_open())),
        ]);
    }
    emit(&phase);
}

/// One machine-readable figure for the report (scripts/bench.sh).
fn emit(v: &Value) {
    println!("BENCH-JSON {v}");
}

fn micros(d: Option<Duration>) -> Value {
    d.map_or(Value::Null, |d| Value::from(d.as_secs_f64() * 1e6))
}

fn fmt(d: Option<Duration>) -> String {
    d.map_or_else(
        || "-".into(),
        |d| format!("{:.1} us", d.as_secs_f64() * 1e6),
    )
}

/// The initial list of `N` Pods through the whole pipeline, then updates
/// paced at 5k/s (or half the measured rate when that is lower) and, with
/// `sweep`, at each rate of [`SWEEP`] below 80 % of the measured rate.
/// One pipeline run. `intake_batch` other than the default measures only
/// the initial list's throughput, as phase `initial-list-batch-N` (the
/// comparison of batched and per-delta queueing in one run).
async fn pipeline(
    pods: &[Value],
    plugin_name: &str,
    concurrency: usize,
    sweep: bool,
    intake_batch: usize,
) {
    const N: usize = 20_000;
    let pod_gvk = Gvk::new("", "v1", "Pod");
    let node_gvk = Gvk::new("", "v1", "Node");
    let feed = Arc::new(Feed::default());
    let (pod_tx, pod_rx) = mpsc::unbounded_channel();
    let (node_tx, node_rx) = mpsc::unbounded_channel();
    feed.streams.lock().insert(pod_gvk, pod_rx);
    feed.streams.lock().insert(node_gvk, node_rx);
    node_tx.send(Ok(WatchEvent::Init)).unwrap();
    for n in 0..20 {
        let node = serde_json::json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": format!("node-{n}"), "uid": format!("n{n}"), "resourceVersion": "1",
                "labels": {"topology.kubernetes.io/zone": format!("zone-{}", n % 3)}}});
        node_tx
            .send(Ok(WatchEvent::InitApply(
                KObject::from_value(node, StripOptions::default()).unwrap(),
            )))
            .unwrap();
    }
    node_tx.send(Ok(WatchEvent::InitDone)).unwrap();

    let cancel = CancellationToken::new();
    let activity = Arc::new(Activity::default());
    // One telemetry for the whole pipeline, as `kubewasm run` wires it.
    let telemetry = Telemetry::new(Identity::from_env());
    let page = ui_page_open().then(|| {
        let events = kubewasm::admin::ui::stream(
            telemetry.clone(),
            kubewasm::telemetry::feed::Filter::default(),
            cancel.clone(),
        );
        tokio::spawn(async move {
            let mut events = std::pin::pin!(events);
            let mut n = 0u64;
            while futures::StreamExt::next(&mut events).await.is_some() {
                n += 1;
            }
            n
        })
    });
    let informers = Arc::new(InformerSet::new(
        feed.clone(),
        activity.clone(),
        cancel.child_token(),
        telemetry.clone(),
    ));
    let sink = Arc::new(NullSink::default());
    let executor = Arc::new(Executor::new(
        sink.clone(),
        ExecutorOptions::default(),
        telemetry.clone(),
    ));
    let cache = tempfile::tempdir().unwrap();
    let runtime = Runtime::new(EngineOptions {
        epoch_deadlines: true,
        cache_dir: Some(cache.path().to_owned()),
        ..Default::default()
    })
    .unwrap()
    // The pipeline's own speed: no action rate.
    .with_ceiling(Ceiling {
        actions_per_second: u32::MAX,
        ..Ceiling::default()
    });
    let host = Arc::new(PluginHost::new(
        runtime,
        informers.clone(),
        KindRegistry::builtin(),
        executor,
        activity.clone(),
        DispatchOptions {
            intake_batch,
            ..DispatchOptions::default()
        },
        telemetry.clone(),
    ));
    // What the bench plugins do: read pods and nodes, write pods.
    let mut manifest = Manifest::parse(
        std::path::Path::new("bench.yaml"),
        "access:\n  - {kinds: [pods, nodes], verbs: [read]}\n  - {kinds: [pods], verbs: [apply, patch, delete, status, events]}\n",
    )
    .unwrap();
    manifest.limits.concurrency = concurrency;
    manifest.limits.actions_per_second = u32::MAX;
    host.install("bench", plugin(plugin_name), manifest)
        .await
        .unwrap();

    // Objects are decoded (as the watcher would) before the clock starts.
    let objects: Vec<KObject> = (0..N)
        .map(|i| KObject::from_value(clone_pod(pods, i), StripOptions::default()).unwrap())
        .collect();
    let stats = host.stats().get("bench").cloned().unwrap();
    let start = Instant::now();
    pod_tx.send(Ok(WatchEvent::Init)).unwrap();
    for o in objects {
        pod_tx.send(Ok(WatchEvent::InitApply(o))).unwrap();
    }
    pod_tx.send(Ok(WatchEvent::InitDone)).unwrap();
    wait_delivered(&host, "bench", N as u64).await;
    let elapsed = start.elapsed();
    let rate = N as f64 / elapsed.as_secs_f64();
    let default_batch = intake_batch == kubewasm::dispatch::INTAKE_BATCH;
    let phase = if default_batch {
        "initial-list".to_owned()
    } else {
        format!("initial-list-batch-{intake_batch}")
    };
    row(
        &stats,
        plugin_name,
        concurrency,
        serde_json::json!({"phase": phase, "throughput": rate}),
    );
    if !default_batch {
        host.shutdown().await;
        informers.shutdown().await;
        cancel.cancel();
        return;
    }

    let mut rates = vec![(rate / 2.0).clamp(100.0, 5_000.0)];
    if sweep {
        rates.extend(SWEEP.iter().copied().filter(|r| *r <= rate * 0.8));
        rates.sort_by(f64::total_cmp);
        rates.dedup();
    }
    let mut seq = 0usize;
    for paced in rates {
        seq = paced_updates(pods, &pod_tx, &host, plugin_name, concurrency, paced, seq).await;
    }
    host.shutdown().await;
    informers.shutdown().await;
    cancel.cancel();
    if let Some(page) = page {
        let events = page.await.unwrap();
        println!("<!-- the open page received {events} events -->");
    }
}

/// Whether a web-view page watches the pipeline (`KUBEWASM_BENCH_UI=open`).
fn ui_page_open() -> bool {
    std::env::var("KUBEWASM_BENCH_UI").is_ok_and(|v| v == "open")
}

/// Delta rates of the latency sweep.
const SWEEP: [f64; 6] = [500.0, 1_000.0, 2_000.0, 5_000.0, 10_000.0, 20_000.0];

/// About two seconds of updates paced at `paced`/s, spread over all
/// objects; prints and emits the latency percentiles. Returns the next
/// update sequence number (resourceVersions keep growing across phases).
async fn paced_updates(
    pods: &[Value],
    pod_tx: &mpsc::UnboundedSender<Result<WatchEvent, SourceError>>,
    host: &PluginHost,
    plugin_name: &str,
    concurrency: usize,
    paced: f64,
    seq: usize,
) -> usize {
    const N: usize = 20_000;
    let stats = host.stats().get("bench").cloned().unwrap();
    stats.latency.reset();
    stats.call_time.reset();
    let updates = (paced * 2.0) as usize; // about two seconds
    // Batches every millisecond (a spinning pacer would take one of the
    // two cores from the pipeline).
    let per_ms = (paced / 1000.0).max(1.0);
    let delivered_before = stats.delivered.load(Ordering::Relaxed);
    let updated: Vec<KObject> = (seq..seq + updates)
        .map(|u| {
            let i = (u * 7919) % N;
            let mut v = clone_pod(pods, i);
            v["metadata"]["resourceVersion"] = Value::from(format!("{}", N + u + 1));
            v["metadata"]["labels"]["bench-seq"] = Value::from(u.to_string());
            KObject::from_value(v, StripOptions::default()).unwrap()
        })
        .collect();
    let t0 = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut sent = 0usize;
    let mut pending = updated.into_iter();
    while sent < updates {
        tick.tick().await;
        let due = ((t0.elapsed().as_secs_f64() * 1000.0 + 1.0) * per_ms) as usize;
        while sent < due.min(updates) {
            pod_tx
                .send(Ok(WatchEvent::Apply(pending.next().unwrap())))
                .unwrap();
            sent += 1;
        }
    }
    wait_delivered(host, "bench", delivered_before + updates as u64).await;
    row(
        &stats,
        plugin_name,
        concurrency,
        serde_json::json!({"phase": "paced", "rate": paced}),
    );
    seq + updates
}

fn main() {
    let pods = corpus_pods();
    if pods.is_empty() {
        println!(
            "no corpus Pods under {}: set KUBEWASM_CORPUS to the corpus folder; skipping (nothing measured)",
            corpus().display()
        );
        return;
    }
    cache_bytes(&pods);
    println!();
    decode(&pods);
    println!();
    println!(
        "## Pipeline: source -> informer -> cache -> dispatcher -> plugin (2-core machine; web-view page {})",
        if ui_page_open() { "open" } else { "closed" }
    );
    println!("| plugin | instances | phase | throughput | latency p50 | latency p99 | call p50 |");
    println!("|---|---|---|---|---|---|---|");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    for (name, conc) in [("noop", 1), ("noop", 2), ("realistic", 1), ("realistic", 2)] {
        if conc == 1 {
            // Per-delta queueing (what the dispatcher did before batches),
            // beside the default, in the same run.
            rt.block_on(pipeline(&pods, name, conc, false, 1));
        }
        rt.block_on(pipeline(
            &pods,
            name,
            conc,
            conc == 1,
            kubewasm::dispatch::INTAKE_BATCH,
        ));
    }
}
