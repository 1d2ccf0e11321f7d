//! The WIT boundary fuzzed from the guest side (docs/book/src/security.md): the
//! `wit-fuzz` plugin (plugins/testing/wit-fuzz) reads each delta's object
//! as a program of host calls with arbitrary arguments (handles the host
//! never gave, pointers outside linear memory, invalid UTF-8, enum values
//! out of range, huge strings and lists, deep, huge and malformed JSON,
//! every action with garbage) and the host runs it through the real
//! runtime: the same engine, access checks, caps and deadlines as in
//! production.
//!
//! What must hold for every program: the host never panics (a panic hook
//! counts them, and the instance's thread must still answer), a trap only
//! fails the call, and host memory stays bounded: a counting allocator
//! (this binary's global allocator; linear memories are mmapped, not
//! counted) measures the host heap each call adds at its peak, and the heap
//! left after all calls.
//!
//! It runs in the ordinary test command: first every op with a fixed set
//! of argument patterns (so each host function is reached on every run),
//! then crafted programs (large and many actions, amplifying reads), then
//! random programs for 10 s (`BOLERO_RANDOM_TEST_TIME_MS` changes it,
//! `BOLERO_RANDOM_SEED` replays one, `WIT_FUZZ_PROGRAM` runs one program,
//! `WIT_FUZZ_REPORT_MIB` prints the large ones). Needs `bash
//! plugins/build.sh`.
// `unsafe` only for the counting allocator, which forwards to `System`.
#![allow(
    unsafe_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout
)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures::StreamExt;
use kubewasm::dispatch::Activity;
use kubewasm::informer::{
    Delta, DeltaType, InformerSet, InformerSpec, Source, SourceError, SubscriptionHandle,
    WatchEvent,
};
use kubewasm::kind::{Gvk, KindRef, KindRegistry};
use kubewasm::object::{KObject, StripOptions};
use kubewasm::runtime::host::PluginScope;
use kubewasm::runtime::{Actor, CallDelta, CallError, EngineOptions, Handled, Manifest, Runtime};

/// The host heap, counted: bytes live now and the most live since the
/// last [`reset_peak`].
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(by: usize) {
    let now = LIVE.fetch_add(by, Ordering::Relaxed) + by;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: forwards to the system allocator and only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            grew(new_size);
        }
        p
    }
}

#[global_allocator]
static HEAP: Counting = Counting;

fn reset_peak() -> usize {
    let live = LIVE.load(Ordering::Relaxed);
    PEAK.store(live, Ordering::Relaxed);
    live
}

/// The fuzz plugin's sidecar: a small memory limit (so the host's copies
/// of what the guest passes stay small too), the default caps otherwise,
/// and a grant that lets some calls through to the deeper checks
/// (configmaps: every verb; pods: read; secrets: nothing).
const SIDECAR: &str = "limits: {memory: 32Mi, timeout: 2s}\n\
access:\n  - {kinds: [configmaps], verbs: [read, apply, patch, delete, status, events]}\n  - {kinds: [pods], verbs: [read]}\n";

/// The most host heap one call may add at its peak. What a call can make
/// the host hold: copies of its arguments (each at most the guest's 32 MiB
/// memory, since it was in linear memory first), the actions it buffers
/// (at most `limits.actionBytesPerCall`, 8 MiB by default, of JSON, and
/// their parsed form), log records (1 MiB) and handles (100,000 table
/// entries). Measured peaks are printed.
const CALL_PEAK_BOUND: usize = 256 << 20;

/// The bound of a crafted program whose list aliases one string: the
/// hostcall fuel, set to the plugin's memory (32 MiB; wasmtime's default
/// would be 128 MiB), stops the copying.
const FUEL_BOUND: usize = 40 << 20;

/// The bound of a crafted program that passes one large argument: its copy
/// (16 MiB, or 20 MiB of pointers), and what parsing builds from at most 1
/// MiB of a selector (about 60 bytes a requirement).
const ONE_COPY_BOUND: usize = 48 << 20;

/// The most host heap the whole run may leave behind (instances replaced
/// after traps, compiled-kind caches, the allocator's bookkeeping).
const LEFT_BOUND: usize = 16 << 20;

/// A source that lists these objects once and then stays silent.
struct Fixed(Vec<serde_json::Value>);

impl Source for Fixed {
    fn watch(
        &self,
        spec: &InformerSpec,
    ) -> futures::stream::BoxStream<'static, Result<WatchEvent, SourceError>> {
        let mut evs = vec![Ok(WatchEvent::Init)];
        evs.extend(
            self.0
                .iter()
                .map(|v| KObject::from_value(v.clone(), StripOptions::default()).unwrap())
                .filter(|o| o.gvk() == spec.kind.gvk)
                .map(|o| Ok(WatchEvent::InitApply(o))),
        );
        evs.push(Ok(WatchEvent::InitDone));
        Box::pin(futures::stream::iter(evs).chain(futures::stream::pending()))
    }
}

fn objects() -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    for ns in ["default", "team-a"] {
        for i in 0..5 {
            out.push(serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("cm-{i}"), "namespace": ns, "uid": format!("u-cm-{ns}-{i}"),
                    "resourceVersion": "1", "labels": {"app": "web", "i": i.to_string()},
                    "annotations": {"note": "x"}, "finalizers": ["a/b"],
                    "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u-p", "controller": true}]},
                "data": {"k": "v", "nested": "{\"a\": [1, 2]}"}}));
            out.push(serde_json::json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("pod-{i}"), "namespace": ns, "uid": format!("u-pod-{ns}-{i}"),
                    "resourceVersion": "1", "labels": {"app": "web"}},
                "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "x"}]}}));
            out.push(serde_json::json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": format!("s-{i}"), "namespace": ns, "uid": format!("u-s-{ns}-{i}"),
                    "resourceVersion": "1"}, "data": {"password": "aHVudGVyMg=="}}));
        }
    }
    out
}

/// The plugin, registered, with a scope over real informers of the
/// objects above; kept for the whole binary (bolero calls the target once
/// per input).
struct Fuzzer {
    actor: Actor,
    /// Keeps the informers running.
    _informers: (
        InformerSet,
        Vec<SubscriptionHandle>,
        Vec<tokio::sync::mpsc::UnboundedReceiver<Delta>>,
    ),
    _rt: tokio::runtime::Runtime,
    _cache: tempfile::TempDir,
}

fn fuzzer() -> &'static Mutex<Fuzzer> {
    static F: OnceLock<Mutex<Fuzzer>> = OnceLock::new();
    F.get_or_init(|| {
        let wasm = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../plugins/target/wasm32-wasip2/release/wit_fuzz.wasm");
        let bytes = std::fs::read(&wasm)
            .unwrap_or_else(|e| panic!("{}: {e}; run bash plugins/build.sh", wasm.display()));
        let rt = tokio::runtime::Runtime::new().unwrap();
        let cache = tempfile::tempdir().unwrap();
        let runtime = Runtime::new(EngineOptions {
            cache_dir: Some(cache.path().to_owned()),
            ..Default::default()
        })
        .unwrap();
        let manifest = Manifest::parse(Path::new("wit-fuzz.yaml"), SIDECAR).unwrap();
        let grant = manifest.grant("wit-fuzz");
        let prepared = Arc::new(runtime.prepare("wit-fuzz", &bytes, manifest).unwrap());
        let actor = Actor::spawn(prepared, 0).unwrap();
        rt.block_on(actor.register("{}".into())).unwrap();

        let kinds = KindRegistry::builtin();
        let informers = InformerSet::new(
            Arc::new(Fixed(objects())),
            Arc::new(Activity::default()),
            Default::default(),
            kubewasm::telemetry::Telemetry::new(kubewasm::telemetry::Identity::from_env()),
        );
        let (mut handles, mut receivers, mut reads) = (Vec::new(), Vec::new(), HashMap::new());
        for resource in ["configmaps", "pods", "secrets"] {
            let kind = kinds.resolve(&KindRef::Resource(resource.into())).unwrap();
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            let h = rt.block_on(async {
                let h = informers.subscribe(
                    InformerSpec {
                        kind: kind.clone(),
                        namespace: None,
                        label_selector: None,
                        field_selector: None,
                    },
                    tx,
                );
                h.informer.wait_synced().await;
                h
            });
            reads.insert(kind.gvk.clone(), vec![h.informer.view()]);
            handles.push(h);
            receivers.push(rx);
        }
        actor.set_scope(Arc::new(PluginScope {
            kinds,
            reads,
            indexes: HashMap::new(),
            writes: [Gvk::new("", "v1", "ConfigMap"), Gvk::new("", "v1", "Pod")]
                .into_iter()
                .collect(),
            grant,
        }));
        Mutex::new(Fuzzer {
            actor,
            _informers: (informers, handles, receivers),
            _rt: rt,
            _cache: cache,
        })
    })
}

/// Panics anywhere in the process (the instance's thread included).
static PANICS: AtomicUsize = AtomicUsize::new(0);

fn count_panics() {
    static HOOK: OnceLock<()> = OnceLock::new();
    HOOK.get_or_init(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, Ordering::SeqCst);
            previous(info);
        }));
    });
}

/// What the runs saw, for the figures printed at the end.
#[derive(Default, Debug)]
struct Seen {
    calls: usize,
    ok: usize,
    traps: usize,
    limits: usize,
    timeouts: usize,
    oom: usize,
    handler_errors: usize,
    max_peak: usize,
    max_actions: usize,
}

static SEEN: Mutex<Option<Seen>> = Mutex::new(None);

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `WIT_FUZZ_REPORT_MIB=N`: print each program whose call adds more than N
/// MiB of host heap, to find what is large before it is over the bound
/// (with a long `BOLERO_RANDOM_TEST_TIME_MS`).
fn report_over() -> Option<usize> {
    static OVER: OnceLock<Option<usize>> = OnceLock::new();
    *OVER.get_or_init(|| std::env::var("WIT_FUZZ_REPORT_MIB").ok()?.parse().ok())
}

/// Runs one program, checks what must hold after any program, and
/// returns the call's outcome.
fn run(program: &[u8]) -> Result<Handled, CallError> {
    let f = fuzzer().lock().unwrap_or_else(|e| e.into_inner());
    let obj = Arc::new(
        KObject::from_value(
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "program", "namespace": "default", "uid": "u-program",
                    "resourceVersion": "7", "labels": {"app": "web"}},
                "data": {"program": hex(program)}}),
            StripOptions::default(),
        )
        .unwrap(),
    );
    let delta = CallDelta {
        object: Some(obj.clone()),
        old: Some(obj),
        ..CallDelta::new(DeltaType::Updated, 0, Gvk::new("", "v1", "ConfigMap"))
    };
    let panics = PANICS.load(Ordering::SeqCst);
    let before = reset_peak();
    let (result, _) = f.actor.handle_blocking(delta);
    let peak = PEAK.load(Ordering::Relaxed).saturating_sub(before);
    assert_eq!(
        PANICS.load(Ordering::SeqCst),
        panics,
        "the host panicked on program {}",
        hex(program)
    );
    assert!(
        !matches!(result, Err(CallError::Unavailable(_))),
        "the instance's thread is gone after program {}: {result:?}",
        hex(program)
    );
    assert!(
        peak <= CALL_PEAK_BOUND,
        "one call added {} MiB of host heap at its peak (bound {} MiB), program {}",
        peak >> 20,
        CALL_PEAK_BOUND >> 20,
        hex(program)
    );
    if report_over().is_some_and(|mib| peak > mib << 20) {
        println!(
            "WIT-FUZZ large: {} MiB, program {}",
            peak >> 20,
            hex(program)
        );
    }
    let mut seen = SEEN.lock().unwrap();
    let seen = seen.get_or_insert_with(Seen::default);
    seen.calls += 1;
    seen.max_peak = seen.max_peak.max(peak);
    match &result {
        Ok(handled) => {
            assert!(handled.actions.len() <= 1_000, "over limits.actionsPerCall");
            seen.max_actions = seen.max_actions.max(handled.actions.len());
            seen.ok += 1;
        }
        Err(CallError::Trap(_)) => seen.traps += 1,
        Err(CallError::Limit(_)) => seen.limits += 1,
        Err(CallError::Timeout(_)) => seen.timeouts += 1,
        Err(CallError::OutOfMemory(_)) => seen.oom += 1,
        Err(CallError::Retry(_) | CallError::Permanent(_)) => seen.handler_errors += 1,
        Err(CallError::Unavailable(_)) => unreachable!(),
    }
    result
}

/// Argument patterns for the `every_op` pass: zeros, all ones, small
/// ascending and large values, each after the op byte.
fn patterns(op: u8) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for fill in [0x00u8, 0xff, 0x07, 0x80, 0x3c] {
        let mut p = vec![op];
        p.extend(std::iter::repeat_n(fill, 48));
        out.push(p);
    }
    let mut ascending = vec![op];
    ascending.extend(0u8..64);
    out.push(ascending);
    out
}

/// The number of ops the plugin knows (its `OPS` table).
const OPS: u8 = 26;

/// What a crafted program must end in.
#[derive(Debug)]
enum Expect {
    /// `done`, with this many actions buffered.
    Actions(usize),
    /// A failed call whose error contains this text.
    Error(&'static str),
}

/// Programs written by hand for what random bytes rarely reach: actions
/// the host accepts, many of them, large ones, and reads that would make
/// the host build more than the guest could take (op and argument bytes as
/// `plugins/testing/wit-fuzz/src/lib.rs` reads them).
fn crafted() -> Vec<(&'static str, Vec<u8>, Expect, usize)> {
    // ConfigMap default/default: kind (builtin, ConfigMap), namespace, name
    const TARGET: [u8; 7] = [2, 0, 1, 0, 1, 0, 1];
    // {ConfigMap default/default, data.k: VALUE} as JSON
    let object = |value: &[u8]| {
        let mut p = vec![0, 0, 0, 1, 0, 1];
        p.extend_from_slice(value);
        p
    };
    // apply OBJECT, no force, no preconditions
    let apply = |value: &[u8]| {
        let mut p = vec![14];
        p.extend(object(value));
        p.extend([0, 0, 0]);
        p
    };
    // merge patch of TARGET with OBJECT, no preconditions
    let patch = |value: &[u8]| {
        let mut p = vec![16];
        p.extend(TARGET);
        p.push(0);
        p.extend(object(value));
        p.extend([0, 0]);
        p
    };
    let repeat = |times: u8, op: Vec<u8>| {
        let mut p = vec![21, times];
        p.extend(op);
        p.extend([24, 0]); // return done
        p
    };
    // "app", and "app" repeated to 4 MiB and to 1 MiB
    let (small, four_mib, one_mib) = (vec![0, 12], vec![3, 12, 7, 2], vec![3, 12, 7, 0]);
    let mut event = vec![18];
    event.extend(TARGET);
    event.extend([0, 0, 0, 9, 3, 12, 7, 2]); // no uid, Normal, reason ConfigMap, 4 MiB note
    vec![
        (
            "one apply",
            repeat(1, apply(&small)),
            Expect::Actions(1),
            CALL_PEAK_BOUND,
        ),
        (
            "255 applies",
            repeat(255, apply(&small)),
            Expect::Actions(255),
            CALL_PEAK_BOUND,
        ),
        // Over the API server's 3 MiB: refused to the guest, which goes on.
        (
            "one 4 MiB apply",
            repeat(1, apply(&four_mib)),
            Expect::Actions(0),
            CALL_PEAK_BOUND,
        ),
        (
            "255 applies of 1 MiB",
            repeat(255, apply(&one_mib)),
            Expect::Error("limits.actionBytesPerCall"),
            CALL_PEAK_BOUND,
        ),
        (
            "255 patches of 1 MiB",
            repeat(255, patch(&one_mib)),
            Expect::Error("limits.actionBytesPerCall"),
            CALL_PEAK_BOUND,
        ),
        // Notes are cut to 1 KiB: 255 Events are small.
        (
            "255 events of 4 MiB",
            repeat(255, event),
            Expect::Actions(255),
            CALL_PEAK_BOUND,
        ),
        // One 1 MiB string as the keys and values of 65,536 log fields:
        // 128 GiB to copy, stopped by the hostcall fuel (the plugin's memory).
        (
            "a 1 MiB string aliased 131,072 times",
            vec![25, 7, 0, 6, 6],
            Expect::Error("fuel allocated for hostcalls has been exhausted"),
            FUEL_BOUND,
        ),
        // `label-selector.parse` of "/0" repeated to 16 MiB: one key of
        // eight million parts (a host that split it built 128 MiB of
        // slices, and 272 MiB at its peak: found by this fuzz test).
        (
            "a 16 MiB label key of eight million parts",
            vec![10, 3, 31, 7, 4],
            Expect::Actions(0),
            ONE_COPY_BOUND,
        ),
        // "a," repeated to 16 MiB: eight million requirements, over the
        // 1 MiB a request can carry, refused before any is built.
        (
            "a 16 MiB selector of eight million requirements",
            vec![10, 3, 50, 7, 4],
            Expect::Actions(0),
            ONE_COPY_BOUND,
        ),
        // "a," repeated to 512 KiB: parsed, 262,145 requirements.
        (
            "a 512 KiB selector of 262,145 requirements",
            vec![10, 3, 50, 6, 9],
            Expect::Actions(0),
            ONE_COPY_BOUND,
        ),
        // A delete in a namespace of "default" repeated to 16 MiB: the
        // host quoted it whole in each error that wrapped the last, 128
        // MiB at its peak (found by this fuzz test).
        (
            "a delete in a 16 MiB namespace",
            vec![17, 2, 1, 1, 3, 1, 7, 4, 0, 9, 0, 0, 0],
            Expect::Actions(0),
            ONE_COPY_BOUND,
        ),
        // `object.fields` of "/metadata/namev1" 524,288 times: 20 MiB in
        // the guest; the host built each pointer's segments twice, 154 MiB
        // at its peak (found by this fuzz test). Now what it would build
        // is counted first, and over the plugin's memory it traps.
        (
            "524,288 two-segment pointers",
            vec![11, 0, 4, 2, 27, 7, 7, 2],
            Expect::Error("more than the plugin's memory limit"),
            ONE_COPY_BOUND,
        ),
        // The whole object (pointer "") a million times.
        (
            "a million whole-object fields",
            vec![11, 0, 6, 7, 3, 24, 0],
            Expect::Error("more than the plugin's memory limit"),
            CALL_PEAK_BOUND,
        ),
    ]
}

/// `WIT_FUZZ_PROGRAM=<hex>` runs that program alone and prints its peak
/// (for a failure's program, which the assertion message gives in hex).
fn replay() -> bool {
    let Ok(hex) = std::env::var("WIT_FUZZ_PROGRAM") else {
        return false;
    };
    let program: Vec<u8> = (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    let result = run(&program);
    println!(
        "WIT-FUZZ replay: {:?} -> {result:?}",
        SEEN.lock().unwrap().take()
    );
    true
}

#[test]
fn wit_boundary() {
    count_panics();
    if replay() {
        return;
    }
    // Warm up (instantiation, kind caches), then take the baseline.
    for _ in 0..2 {
        run(&[]).expect("an empty program is a clean done");
    }
    let baseline = LIVE.load(Ordering::Relaxed);

    for op in 0..OPS {
        for p in patterns(op) {
            // What must hold is checked in `run`; any outcome is fine.
            let _ = run(&p);
        }
        // The op repeated 200 times with the same arguments.
        let _ = run(&[21, 200, op, 6, 9, 4, 3, 1, 7, 2, 5]);
    }
    let every_op = SEEN.lock().unwrap().take();
    for (name, program, expect, bound) in crafted() {
        let result = run(&program);
        let seen = SEEN.lock().unwrap().take().unwrap();
        println!("WIT-FUZZ crafted {name}: {seen:?}");
        assert!(
            seen.max_peak <= bound,
            "crafted program {name:?} added {} MiB of host heap (bound {} MiB)",
            seen.max_peak >> 20,
            bound >> 20
        );
        match (&expect, &result) {
            (Expect::Actions(n), Ok(handled)) if handled.actions.len() == *n => {}
            (Expect::Error(text), Err(e)) if e.to_string().contains(text) => {}
            _ => panic!("crafted program {name:?}: expected {expect:?}, got {result:?}"),
        }
    }

    bolero::check!()
        .with_test_time(Duration::from_secs(10))
        .with_max_len(4096)
        .for_each(|program: &[u8]| {
            let _ = run(program);
        });

    // Still serving: an empty program is a clean `done`.
    let f = fuzzer().lock().unwrap_or_else(|e| e.into_inner());
    let empty = Arc::new(
        KObject::from_value(
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "program", "namespace": "default", "uid": "u", "resourceVersion": "1"},
                "data": {"program": ""}}),
            StripOptions::default(),
        )
        .unwrap(),
    );
    let (result, _) = f.actor.handle_blocking(CallDelta {
        object: Some(empty),
        ..CallDelta::new(DeltaType::Added, 0, Gvk::new("", "v1", "ConfigMap"))
    });
    let handled = result.expect("the plugin serves after the fuzz run");
    assert!(handled.actions.is_empty());
    drop(f);

    let left = LIVE.load(Ordering::Relaxed).saturating_sub(baseline);
    let random = SEEN.lock().unwrap().take();
    println!("WIT-FUZZ every-op: {every_op:?}");
    println!("WIT-FUZZ random: {random:?}");
    println!(
        "WIT-FUZZ host heap left after all calls: {} KiB (bound {} MiB)",
        left >> 10,
        LEFT_BOUND >> 20
    );
    assert!(
        left <= LEFT_BOUND,
        "the fuzz run left {} MiB of host heap (bound {} MiB)",
        left >> 20,
        LEFT_BOUND >> 20
    );
    assert_eq!(PANICS.load(Ordering::SeqCst), 0);
}
