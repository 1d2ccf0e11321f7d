//! The config-replicator in every guest language, through the host's
//! runtime: prints a markdown table of .wasm size, cold compile, cached
//! load, instantiate+register and per-delta times (not a timed test).
//!
//! Run: `bash plugins/build.sh && bash plugins/build-languages.sh js-variants
//! js python c go && cargo bench -p kubewasm --bench languages`
//! (`js`: jco's QuickJS backend, the default; `js-sm`: componentize-js,
//! StarlingMonkey; `js-qjs-small`: QuickJS size-optimised). A missing
//! artifact is reported as such and skipped. Per-delta times are the median of
//! several rounds, each the mean of many calls on one long-lived instance:
//! "source" is an `updated` delta of a source ConfigMap (two namespace
//! targets: a cache list of namespaces, two applies, a list of replicas),
//! "ignored" one of a ConfigMap that is not a source (the call, the delta's
//! metadata and a label check). `-- js python` measures only the plugins
//! so labelled (`rust`, `c`, `go`, `js`, `js-sm`, `js-qjs-small`, `python`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kubewasm::dispatch::Activity;
use kubewasm::informer::{DeltaType, InformerSet, InformerSpec};
use kubewasm::kind::{Gvk, KindRef, KindRegistry};
use kubewasm::object::{KObject, StripOptions};
use kubewasm::runtime::host::PluginScope;
use kubewasm::runtime::{Actor, CallDelta, Manifest};

mod common;
use common::Fixed;

fn object(v: serde_json::Value) -> KObject {
    KObject::from_value(v, StripOptions::default()).unwrap()
}

fn namespace(name: &str, tenant: bool) -> KObject {
    let labels = if tenant {
        serde_json::json!({"tenant": "yes"})
    } else {
        serde_json::json!({})
    };
    object(serde_json::json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "uid": format!("ns-{name}"), "resourceVersion": "1", "labels": labels}}))
}

fn config_map(name: &str, source: bool) -> KObject {
    let labels = if source {
        serde_json::json!({"kubewasm.io/replicate": "true"})
    } else {
        serde_json::json!({"app": "web"})
    };
    object(serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "platform", "uid": format!("cm-{name}"),
            "resourceVersion": "2", "labels": labels},
        "data": {"ca.crt": "-----BEGIN CERTIFICATE-----\nMIIB...\n-----END CERTIFICATE-----\n", "mode": "strict"}}))
}

/// (label, path) of every plugin measured, Rust first.
fn plugins() -> Vec<(&'static str, PathBuf)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/target");
    let mut v = vec![(
        "rust",
        root.join("wasm32-wasip2/release/config_replicator.wasm"),
    )];
    for lang in ["c", "go", "js", "js-sm", "js-qjs-small", "python"] {
        v.push((
            lang,
            root.join(format!("languages/{lang}-config-replicator.wasm")),
        ));
    }
    v
}

/// The median over `rounds` of the mean time of `calls` calls; an error
/// (a trap after many calls, say) is reported instead.
fn per_delta(actor: &Actor, delta: &CallDelta, calls: usize, rounds: usize) -> String {
    let call = || actor.handle_blocking(delta.clone()).0.map(drop);
    let mut samples = Vec::with_capacity(rounds);
    for _ in 0..calls / 10 + 1 {
        if let Err(e) = call() {
            return format!("failed: {e}");
        }
    }
    for _ in 0..rounds {
        let start = Instant::now();
        for n in 0..calls {
            if let Err(e) = call() {
                return format!("failed after {n} calls: {e}");
            }
        }
        samples.push(start.elapsed() / calls as u32);
    }
    samples.sort();
    format!("{} us", us(samples[rounds / 2]))
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e3)
}

fn us(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e6)
}

fn main() {
    let selected = common::selected();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let kinds = KindRegistry::builtin();
    let objects = vec![
        namespace("platform", false),
        namespace("team-a", true),
        namespace("team-b", true),
        namespace("sandbox", false),
        config_map("ca-bundle", true),
        config_map("local-only", false),
    ];
    let informers = InformerSet::new(
        Arc::new(Fixed(objects)),
        Arc::new(Activity::default()),
        Default::default(),
    );
    let mut reads = HashMap::new();
    let mut handles = Vec::new();
    for resource in ["configmaps", "namespaces"] {
        let kind = kinds.resolve(&KindRef::Resource(resource.into())).unwrap();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let handle = rt.block_on(async {
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
        reads.insert(kind.gvk.clone(), vec![handle.informer.view()]);
        handles.push((handle, rx));
    }
    let cm = Gvk::new("", "v1", "ConfigMap");
    let scope = Arc::new(PluginScope {
        kinds: kinds.clone(),
        reads,
        indexes: HashMap::new(),
        writes: [cm.clone()].into_iter().collect(),
        // What the config replicators do: read, apply and delete copies.
        grant: Manifest::parse(
            Path::new("bench.yaml"),
            "access:\n  - {kinds: [configmaps, namespaces], verbs: [read]}\n  - {kinds: [configmaps], verbs: [apply, delete, events]}\n",
        )
        .unwrap()
        .grant("bench"),
    });
    let delta = |source: bool| CallDelta {
        dtype: DeltaType::Updated,
        subscription: 0,
        kind: cm.clone(),
        object: Some(Arc::new(config_map(
            if source { "ca-bundle" } else { "local-only" },
            source,
        ))),
        old: Some(Arc::new(config_map(
            if source { "ca-bundle" } else { "local-only" },
            source,
        ))),
        initial: false,
        final_state_unknown: false,
        ..CallDelta::new(DeltaType::Updated, 0, cm.clone())
    };
    let (source, ignored) = (delta(true), delta(false));
    let config = r#"{"namespaceSelector":"tenant=yes"}"#.to_owned();

    println!(
        "config-replicator per guest language, through kubewasm's runtime (one core per call)\n"
    );
    println!(
        "| plugin | .wasm size | cold compile | cached load | instantiate + register | per delta: source (2 applies) | per delta: ignored |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (label, path) in plugins() {
        if !selected(label) {
            continue;
        }
        let Ok(bytes) = std::fs::read(&path) else {
            println!(
                "| {label} | missing: {} (build it first) | | | | | |",
                path.display()
            );
            continue;
        };
        let compiled = common::compile_then_load(label, &bytes);
        let prepared = Arc::new(compiled.prepared);
        // Median of several fresh instances.
        let mut inst: Vec<Duration> = (0..5)
            .map(|_| {
                let t = Instant::now();
                let actor = Actor::spawn(prepared.clone(), 0).unwrap();
                rt.block_on(actor.register(config.clone())).unwrap();
                t.elapsed()
            })
            .collect();
        inst.sort();
        let actor = Actor::spawn(prepared, 0).unwrap();
        rt.block_on(actor.register(config.clone())).unwrap();
        actor.set_scope(scope.clone());
        let (actions, _) = actor.handle_blocking(source.clone());
        assert_eq!(
            actions.unwrap().actions.len(),
            2,
            "{label}: two applies expected"
        );
        let t_source = per_delta(&actor, &source, 2_000, 5);
        let t_ignored = per_delta(&actor, &ignored, 5_000, 5);
        println!(
            "| {label} | {} KiB | {} ms | {} ms | {} ms | {} | {} |",
            bytes.len().div_ceil(1024),
            ms(compiled.cold),
            ms(compiled.cached),
            ms(inst[2]),
            t_source,
            t_ignored,
        );
    }
    drop(handles);
}
