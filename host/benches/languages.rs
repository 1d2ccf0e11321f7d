//! The guest languages through the host's runtime, as two markdown tables
//! (not timed tests).
//!
//! `replicator`: the config-replicator in every guest language: .wasm
//! size, cold compile, cached load, instantiate+register and per-delta
//! times. Per-delta times are the median of several rounds, each the mean
//! of many calls on one long-lived instance: "source" is an `updated` delta
//! of a source ConfigMap (two namespace targets: a cache list of
//! namespaces, two applies, a list of replicas), "ignored" one of a
//! ConfigMap that is not a source (the call, the delta's metadata and a
//! label check).
//!
//! `per-delta`: the cost of each guest language per delta: the benchmark
//! plugins noop, realistic and parse-all (plugins/testing in Rust, their
//! twins in plugins/<lang>/bench) on the runtime benchmark's delta (an
//! `updated` corpus Pod of about 4 KB, its Node cached), one instance each,
//! calls made inline as the dispatcher's worker makes them (best of five
//! rounds), next to the same logic as native Rust. Before a plugin is
//! timed, its actions are compared with the Rust guest's on every
//! scheduled corpus Pod and a few edge cases; a mismatch is reported as an
//! error, not a figure. Prints `BENCH-JSON` lines for scripts/bench.sh's
//! report (docs/book/src/contributing/performance.md).
//!
//! Run: `bash plugins/build.sh && bash plugins/build-languages.sh js-variants
//! js python c go bench && cargo bench -p kubewasm --bench languages`
//! (`js`: jco's QuickJS backend, the default; `js-sm`: componentize-js,
//! StarlingMonkey; `js-qjs-small`: QuickJS size-optimised; the per-delta
//! table's plugins come from `build-languages.sh bench`). A missing
//! artifact is reported as such and skipped. `-- per-delta` (or
//! `replicator`) prints only that table; `-- js python` measures only the
//! plugins so labelled (`rust`, `c`, `go`, `js`, `js-sm`, `js-qjs-small`,
//! `python`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kubewasm::actions::Action;
use kubewasm::dispatch::Activity;
use kubewasm::informer::{DeltaType, InformerSet, InformerSpec};
use kubewasm::kind::{Gvk, KindRef, KindRegistry};
use kubewasm::object::{FieldValue, KObject, ObjectKey, StripOptions};
use kubewasm::runtime::host::PluginScope;
use kubewasm::runtime::{Actor, CallDelta, Manifest};

mod common;
use common::{Fixed, PodBench, best_of_five, emit};

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
    let names = common::names();
    let table = common::selected(&names, &["replicator", "per-delta"]);
    let selected = common::selected(
        &names,
        &["rust", "c", "go", "js", "js-sm", "js-qjs-small", "python"],
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    if table("replicator") {
        replicator(&rt, &selected);
    }
    if table("per-delta") {
        per_delta_by_language(&rt, &selected);
    }
}

/// The config-replicator table.
fn replicator(rt: &tokio::runtime::Runtime, selected: &impl Fn(&str) -> bool) {
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
        kubewasm::telemetry::Telemetry::new(kubewasm::telemetry::Identity::from_env()),
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

/// The benchmark plugins, as plugins/testing names them.
const BENCH_PLUGINS: [&str; 3] = ["noop", "realistic", "parse-all"];

/// The languages of the per-delta table, the Rust guest first (the
/// reference every other is checked against and compared with).
const BENCH_LANGUAGES: [&str; 5] = ["rust", "c", "go", "js", "python"];

/// Where `lang`'s build of the benchmark plugin `plugin` is.
fn bench_artifact(lang: &str, plugin: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/target");
    if lang == "rust" {
        root.join(format!(
            "wasm32-wasip2/release/{}.wasm",
            plugin.replace('-', "_")
        ))
    } else {
        root.join(format!("languages/{lang}-{plugin}.wasm"))
    }
}

/// What a call did, comparable across languages: the actions (a failure:
/// that it failed, the messages differ by language).
#[derive(Debug, PartialEq)]
enum Outcome {
    Handled(Vec<Action>, Option<Duration>),
    Failed,
}

fn outcome(actor: &Actor, delta: &CallDelta) -> Outcome {
    match actor.handle_blocking(delta.clone()).0 {
        Ok(h) => Outcome::Handled(h.actions, h.requeue_after),
        Err(_) => Outcome::Failed,
    }
}

/// The deltas every plugin's actions are checked on: the measured delta,
/// every scheduled corpus Pod that is a valid Pod (on nodes that are not
/// cached: zone `unknown`), the measured Pod unscheduled and pending, and a
/// `synced` delta; and how many corpus Pods were left out because the
/// typed decoder of bench-logic (k8s-openapi's Pod) refuses them (the
/// untyped parsers of the other languages accept, say, a timestamp that
/// reads `"null"`: the decision is defined on valid Pods only).
fn check_deltas(bench: &PodBench) -> (Vec<CallDelta>, usize) {
    let pod_delta = |json: &str| {
        PodBench::updated(Arc::new(
            KObject::from_json(json, StripOptions::default()).unwrap(),
        ))
    };
    let mut deltas = vec![bench.delta.clone()];
    let (valid, invalid): (Vec<String>, Vec<String>) = common::corpus_pods()
        .into_iter()
        .partition(|p| bench_logic::evaluate(p).is_ok());
    deltas.extend(valid.iter().map(|p| pod_delta(p)));
    let mut pending: serde_json::Value = serde_json::from_str(&bench.pod_json).unwrap();
    pending["spec"].as_object_mut().unwrap().remove("nodeName");
    pending["status"] = serde_json::json!({"phase": "Pending"});
    deltas.push(pod_delta(&pending.to_string()));
    deltas.push(CallDelta::new(
        DeltaType::Synced,
        0,
        Gvk::new("", "v1", "Pod"),
    ));
    (deltas, invalid.len())
}

/// The machine's load average (1, 5, 15 min).
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// A command's first line of output, or `unknown`.
fn output_of(program: &str, args: &[&str]) -> String {
    std::process::Command::new(program)
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "unknown".into())
}

/// Per-delta time of `delta` on `actor`, calls made inline on its thread
/// (as the dispatcher's worker makes them): best of five rounds, the call
/// count sized to about a second in all; an error if a call fails.
fn inline_per_delta(actor: &Actor, delta: &CallDelta) -> Result<(Duration, usize), String> {
    let delta = delta.clone();
    actor
        .serve_blocking(move |caller| {
            let mut failed = None;
            let mut run = |count: usize| {
                for _ in 0..count {
                    if failed.is_some() {
                        return;
                    }
                    if let Err(e) = caller.handle(&delta).0 {
                        failed = Some(e.to_string());
                    }
                }
            };
            let start = Instant::now();
            run(20);
            let per = start.elapsed() / 20;
            let n = ((1.0 / per.as_secs_f64().max(1e-9)) as usize).clamp(1_000, 200_000);
            let t = best_of_five(n, &mut run);
            match failed {
                Some(e) => Err(e),
                None => Ok((t, n)),
            }
        })
        .map_err(|e| e.to_string())?
}

/// The realistic plugin's logic natively on the host's own objects: label
/// `app`, two fields, the Node from the cache, the patch's text (no
/// component call, no action validation).
fn native_realistic(bench: &PodBench) -> Duration {
    let pod = bench.delta.object.clone().unwrap();
    let nodes = bench.scope.reads[&Gvk::new("", "v1", "Node")][0].clone();
    let pointers = ["/spec/nodeName", "/status/phase"];
    best_of_five(200_000, |count| {
        for _ in 0..count {
            let pod = std::hint::black_box(&pod);
            let app = pod.label("app");
            let mut fields = pod.fields(&pointers).into_iter();
            let mut text = || match fields.next().flatten() {
                Some(FieldValue::Text(s)) => Some(s),
                _ => None,
            };
            let (node, phase) = (text(), text());
            let zone = node
                .and_then(|n| nodes.snapshot().get(&ObjectKey::new(None, &n)))
                .and_then(|n| n.label("topology.kubernetes.io/zone").map(str::to_owned));
            let patch = serde_json::json!({"metadata": {"annotations":
                {"kubewasm.io/zone": zone.as_deref().unwrap_or("unknown")}}})
            .to_string();
            std::hint::black_box((app, phase, patch));
        }
    })
}

fn us_f(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// The per-delta table: noop, realistic and parse-all in every language,
/// next to native Rust.
fn per_delta_by_language(rt: &tokio::runtime::Runtime, selected: &impl Fn(&str) -> bool) {
    let load_start = load_average();
    let bench = PodBench::new(rt);
    let (checks, invalid) = check_deltas(&bench);
    let cache = tempfile::tempdir().unwrap();
    let runtime = common::runtime(cache.path(), true);
    let start = |path: &Path, config: &str| -> Result<Actor, String> {
        let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let prepared = runtime
            .prepare(&name, &bytes, Manifest::default())
            .map_err(|e| e.to_string())?;
        let actor = Actor::spawn(Arc::new(prepared), 0).map_err(|e| e.to_string())?;
        rt.block_on(actor.register(config.into()))
            .map_err(|e| e.to_string())?;
        actor.set_scope(bench.scope.clone());
        Ok(actor)
    };

    println!(
        "\nper delta by guest language: one instance each, calls inline on its thread, best of 5 rounds (epoch deadlines on)\n"
    );
    let native_parse = best_of_five(20_000, |count| {
        for _ in 0..count {
            std::hint::black_box(
                bench_logic::evaluate(std::hint::black_box(&bench.pod_json)).unwrap(),
            );
        }
    });
    let native_realistic = native_realistic(&bench);
    for (plugin, t) in [("realistic", native_realistic), ("parse-all", native_parse)] {
        emit(
            &serde_json::json!({"bench": "languages", "lang": "native", "plugin": plugin, "us": us_f(t)}),
        );
    }

    // The Rust guest's outcomes on the check deltas, per plugin.
    let mut reference: HashMap<&str, Vec<Outcome>> = HashMap::new();
    // Per language and plugin: the time, or why there is none.
    let mut cells: Vec<(&str, Vec<Result<Duration, String>>)> = Vec::new();
    // Per language: the guest's parse alone (parse-all run 11 times per
    // delta instead of once, the difference over 10).
    let mut parse_alone: HashMap<&str, Duration> = HashMap::new();
    // Checks the plugin's actions against the Rust guest's (the Rust
    // guest's become the reference), then times it.
    let mut measure = |lang: &'static str, plugin: &'static str, path: &Path| {
        if !path.exists() {
            return Err(format!("missing: {} (build it first)", path.display()));
        }
        let actor = start(path, "{}")?;
        let got: Vec<Outcome> = checks.iter().map(|d| outcome(&actor, d)).collect();
        if plugin == "parse-all" && lang == "rust" {
            // The Rust guest against the same code natively.
            let native = bench_logic::evaluate(&bench.pod_json).unwrap();
            let patch = match &got[0] {
                Outcome::Handled(a, _) => match a.as_slice() {
                    [Action::Patch { patch, .. }] => Some(patch.clone()),
                    _ => None,
                },
                Outcome::Failed => None,
            };
            let want = native.map(|n| serde_json::from_str::<serde_json::Value>(&n).unwrap());
            if patch != want {
                return Err(format!("rust guest's patch {patch:?}, native {want:?}"));
            }
        }
        match reference.get(plugin) {
            None if lang == "rust" => {
                reference.insert(plugin, got);
            }
            None => return Err("not checked: the rust guest is missing".into()),
            Some(want) => {
                if let Some(i) = (0..checks.len()).find(|&i| got[i] != want[i]) {
                    return Err(format!(
                        "mismatch on check delta {i} ({}): got {:?}, the rust guest {:?}",
                        checks[i]
                            .object
                            .as_ref()
                            .map_or("synced".into(), |o| o.key().to_string()),
                        got[i],
                        want[i]
                    ));
                }
            }
        }
        let (t, calls) = inline_per_delta(&actor, &bench.delta)?;
        emit(
            &serde_json::json!({"bench": "languages", "lang": lang, "plugin": plugin,
                "us": us_f(t), "calls": calls, "checked": checks.len()}),
        );
        if plugin == "parse-all" {
            let eleven = start(path, r#"{"repeat":11}"#)?;
            let (t11, _) = inline_per_delta(&eleven, &bench.delta)?;
            let alone = t11.saturating_sub(t) / 10;
            emit(&serde_json::json!({"bench": "languages", "lang": lang,
                    "plugin": "parse-alone", "us": us_f(alone)}));
            parse_alone.insert(lang, alone);
        }
        Ok(t)
    };
    for lang in BENCH_LANGUAGES {
        if !selected(lang) && lang != "rust" {
            continue;
        }
        let mut row = Vec::new();
        for plugin in BENCH_PLUGINS {
            let path = bench_artifact(lang, plugin);
            let result = measure(lang, plugin, &path);
            if let Err(e) = &result {
                emit(
                    &serde_json::json!({"bench": "languages", "lang": lang, "plugin": plugin, "error": e}),
                );
            }
            row.push(result);
        }
        cells.push((lang, row));
    }
    let load_end = load_average();

    let show = |t: Duration, base: Option<Duration>| match base {
        Some(b) => format!(
            "{:.2} us ({:.2}x)",
            us_f(t),
            t.as_secs_f64() / b.as_secs_f64()
        ),
        None => format!("{:.2} us", us_f(t)),
    };
    let rust: Vec<Option<Duration>> = cells
        .iter()
        .find(|(l, _)| *l == "rust")
        .map(|(_, r)| r.iter().map(|c| c.as_ref().ok().copied()).collect())
        .unwrap_or_else(|| vec![None; 3]);
    println!(
        "| language | noop | realistic | parse-all | parse-all / native | the parse alone (x native) |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    println!(
        "| native Rust (no component) | - | {} | {} | 1.00x | {} |",
        show(native_realistic, None),
        show(native_parse, None),
        show(native_parse, None),
    );
    let mut problems = Vec::new();
    for (lang, row) in &cells {
        let mut line = format!("| {lang} |");
        for (i, cell) in row.iter().enumerate() {
            match cell {
                Ok(t) => line.push_str(&format!(" {} |", show(*t, rust[i]))),
                Err(e) => {
                    line.push_str(if e.starts_with("missing") {
                        " missing |"
                    } else {
                        " error |"
                    });
                    problems.push(format!("{lang} {}: {e}", BENCH_PLUGINS[i]));
                }
            }
        }
        match &row[2] {
            Ok(t) => line.push_str(&format!(
                " {:.2}x |",
                t.as_secs_f64() / native_parse.as_secs_f64()
            )),
            Err(_) => line.push_str(" - |"),
        }
        match parse_alone.get(lang) {
            Some(a) => line.push_str(&format!(" {} |", show(*a, Some(native_parse)))),
            None => line.push_str(" - |"),
        }
        println!("{line}");
    }
    println!(
        "\n(x) in a language's row: against the Rust guest's time. Each plugin's actions matched the Rust guest's on {} deltas before it was timed ({invalid} corpus Pods left out: not valid Pods to k8s-openapi). Load average (1, 5, 15 min): {load_start} at the start, {load_end} at the end.",
        checks.len()
    );
    for p in &problems {
        println!("  {p}");
    }
    emit(&serde_json::json!({"bench": "languages-run",
        "date": output_of("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
        "commit": output_of("git", &["describe", "--always", "--dirty"]),
        "pod_bytes": bench.pod_json.len(), "checked": checks.len(), "invalid_pods": invalid,
        "load_start": load_start, "load_end": load_end}));
}
