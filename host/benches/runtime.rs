//! Plugin runtime benchmark: prints per-delta figures (not a timed test).
//!
//! Run: `bash plugins/build.sh && cargo bench -p kubewasm --bench runtime`;
//! `-- realistic` (or `noop`, `parse`, `compile`) runs only that section,
//! for a profiler.
//! Uses a realistic Pod from the corpus (KUBEWASM_CORPUS, default
//! ../shared/corpus) when present, else a built-in 4 KB Pod.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::collapsible_if
)]

use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;
use common::{PodBench, best_of_five, emit};

use kubewasm::informer::DeltaType;
use kubewasm::kind::Gvk;
use kubewasm::runtime::{Actor, CallDelta, Manifest};

fn plugin(name: &str) -> Vec<u8> {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!(
        "../plugins/target/wasm32-wasip2/release/{name}.wasm"
    ));
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}; run plugins/build.sh first", p.display()))
}

fn measure(actor: &Actor, delta: &CallDelta, n: usize) -> Duration {
    for _ in 0..n / 10 {
        let (r, _) = actor.handle_blocking(delta.clone());
        r.unwrap();
    }
    let start = Instant::now();
    for _ in 0..n {
        let (r, _) = actor.handle_blocking(delta.clone());
        r.unwrap();
    }
    start.elapsed() / n as u32
}

/// Per-delta cost of calls made inline on the instance's thread, as the
/// dispatcher's worker makes them: no thread hand-off, only the call.
fn measure_inline(actor: &Actor, delta: &CallDelta, n: usize) -> Duration {
    let delta = delta.clone();
    actor
        .serve_blocking(move |caller| {
            best_of_five(n, |count| {
                for _ in 0..count {
                    caller.handle(&delta).0.unwrap();
                }
            })
        })
        .unwrap()
}

/// Per-delta microseconds inline (the dispatcher's path) and with a thread
/// round trip per delta (what each delta cost before the worker moved onto
/// the instance's thread).
fn emit_per_delta(plugin: &str, wit: &str, inline_us: f64, handoff_us: f64) {
    emit(
        &serde_json::json!({"bench": "runtime", "plugin": plugin, "wit": wit, "us": inline_us, "handoff_us": handoff_us}),
    );
}

fn main() {
    let section = common::selected(&common::names(), &["noop", "realistic", "parse", "compile"]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let bench = PodBench::new(&rt);
    let (pod_json, delta, scope) = (&bench.pod_json, &bench.delta, &bench.scope);
    let n = 20_000;
    let cache = tempfile::tempdir().unwrap();
    let start_configured = |name: &str, epochs: bool, config: &str| {
        let runtime = common::runtime(cache.path(), epochs);
        let prepared = Arc::new(
            runtime
                .prepare(name, &plugin(name), Manifest::default())
                .unwrap(),
        );
        let actor = Actor::spawn(prepared, 0).unwrap();
        rt.block_on(actor.register(config.into())).unwrap();
        actor.set_scope(scope.clone());
        actor
    };
    let start_actor = |name: &str, epochs: bool| start_configured(name, epochs, "{}");
    println!("per-delta cost, {n} calls each, one core");
    println!(
        "  (WIT 0.1 plugins: the whole metadata lowered per call; 0.2: scalars + handles, read on demand)"
    );
    println!(
        "  columns: inline on the instance's thread (the dispatcher's worker: the hot path) | one thread round trip per delta (before)"
    );
    let per = |t: Duration| (t.as_secs_f64() * 1e6, 1.0 / t.as_secs_f64());
    let row =
        |label: &str, plugin: &str, v: &str, inline: Duration, handoff: Duration, goal: &str| {
            let ((us, rate), (hus, _)) = (per(inline), per(handoff));
            println!("  {label}, WIT {v}: {us:>7.2} us ({rate:>7.0}/s) | {hus:>7.2} us  {goal}");
            emit_per_delta(plugin, v, us, hus);
        };
    if section("noop") {
        for (v, name) in [("0.1", "noop_v0_1"), ("0.2", "noop")] {
            let actor = start_actor(name, true);
            let inline = measure_inline(&actor, delta, n * 10);
            let handoff = measure(&actor, delta, n);
            row(
                "noop plugin (host overhead)",
                "noop",
                v,
                inline,
                handoff,
                "goal <= 1 us",
            );
            // The floor: a synced delta (no object, empty strings) is the
            // component call alone, with the host's bookkeeping.
            let synced = CallDelta::new(DeltaType::Synced, 0, Gvk::new("", "v1", "Pod"));
            let bare = measure_inline(&actor, &synced, n * 10);
            println!(
                "    of which the bare call (a synced delta: no object, empty strings): {:.2} us",
                bare.as_secs_f64() * 1e6
            );
            emit(
                &serde_json::json!({"bench": "runtime", "plugin": "bare-call", "wit": v, "us": bare.as_secs_f64() * 1e6}),
            );
        }
    }
    if section("realistic") {
        let mut inline_02 = Duration::ZERO;
        for (v, name) in [("0.1", "realistic_v0_1"), ("0.2", "realistic")] {
            let actor = start_actor(name, true);
            let inline = measure_inline(&actor, delta, n * 2);
            let handoff = measure(&actor, delta, n);
            row(
                "realistic (labels + 2 fields + get + 1 action)",
                "realistic",
                v,
                inline,
                handoff,
                "goal >= 100000/s",
            );
            inline_02 = inline;
        }
        let realistic_noepoch = start_actor("realistic", false);
        let ne = measure_inline(&realistic_noepoch, delta, n * 2);
        let epoch = (inline_02.as_secs_f64() / ne.as_secs_f64() - 1.0) * 100.0;
        println!(
            "  epoch deadlines cost on realistic (0.2, inline): {epoch:>+6.1} %  (goal <= 10 %)"
        );
        emit(&serde_json::json!({"bench": "runtime", "plugin": "epoch-cost", "percent": epoch}));
    }
    if section("parse") {
        // WIT 0.1 (the whole metadata lowered, the text read through the
        // delta's object) beside 0.2, the same decision in both.
        let per_wit = [("0.1", "parse_all_v0_1"), ("0.2", "parse_all")].map(|(v, name)| {
            let actor = start_actor(name, true);
            (
                v,
                measure_inline(&actor, delta, n / 2),
                measure(&actor, delta, n / 4),
            )
        });
        let t_parse = per_wit[1].1;
        let t_native = best_of_five(n / 2, |count| {
            for _ in 0..count {
                std::hint::black_box(
                    bench_logic::evaluate(std::hint::black_box(pod_json)).unwrap(),
                );
            }
        });
        for (v, inline, handoff) in per_wit {
            row(
                "parse whole pod in plugin",
                "parse-all",
                v,
                inline,
                handoff,
                "",
            );
            println!(
                "  same logic as native Rust: {:>7.2} us  (ratio {:.2}x inline on WIT {v}, goal <= 1.2x)",
                t_native.as_secs_f64() * 1e6,
                inline.as_secs_f64() / t_native.as_secs_f64(),
            );
        }
        emit(
            &serde_json::json!({"bench": "runtime", "plugin": "parse-all-native", "us": t_native.as_secs_f64() * 1e6}),
        );
        // Where the difference goes: the call and the text's copy into the
        // guest (the decision run 0 times), and the guest's own parse (the
        // difference between 11 runs and 1 per delta, over 10).
        let copy_only = measure_inline(
            &start_configured("parse_all", true, r#"{"repeat":0}"#),
            delta,
            n / 2,
        );
        let repeat = 11;
        let eleven = |epochs: bool| {
            let actor = start_configured("parse_all", epochs, &format!(r#"{{"repeat":{repeat}}}"#));
            measure_inline(&actor, delta, n / 10)
        };
        let guest = eleven(true).saturating_sub(t_parse) / (repeat - 1);
        let guest_no_epoch = eleven(false).saturating_sub(measure_inline(
            &start_actor("parse_all", false),
            delta,
            n / 2,
        )) / (repeat - 1);
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        println!(
            "  parse-all split: call + to-json copy + patch {:.2} us | guest parse {:.2} us ({:.2}x native; {:.2} us = {:.2}x without epoch checks)",
            us(copy_only),
            us(guest),
            guest.as_secs_f64() / t_native.as_secs_f64(),
            us(guest_no_epoch),
            guest_no_epoch.as_secs_f64() / t_native.as_secs_f64(),
        );
        emit(
            &serde_json::json!({"bench": "runtime", "plugin": "parse-all-split",
            "call_copy_us": us(copy_only), "guest_parse_us": us(guest),
            "guest_parse_no_epoch_us": us(guest_no_epoch), "native_us": us(t_native)}),
        );
    }
    if section("compile") {
        for name in ["noop", "config_replicator", "parse_all"] {
            let bytes = plugin(name);
            let compiled = common::compile_then_load(name, &bytes);
            let prepared = Arc::new(compiled.prepared);
            let t2 = Instant::now();
            let actor = Actor::spawn(prepared, 0).unwrap();
            rt.block_on(actor.register("{}".into())).unwrap();
            let inst_t = t2.elapsed();
            println!(
                "  {name:<18} {:>7} KiB: cold compile {:>7.1} ms, cached load {:>6.2} ms, instantiate+register {:>6.2} ms",
                bytes.len() / 1024,
                compiled.cold.as_secs_f64() * 1e3,
                compiled.cached.as_secs_f64() * 1e3,
                inst_t.as_secs_f64() * 1e3
            );
        }
    }
}
