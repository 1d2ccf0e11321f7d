//! Why epoch deadlines cost the parse-all plugin what they do.
//!
//! Times `bench_logic::evaluate` (the parse-all plugin's decision: a corpus
//! Pod of about 4 KB decoded into k8s-openapi's typed Pod) natively, then
//! each guest core module given on the command line (see `run.sh`) in
//! wasmtime three ways:
//!
//! - `epochs`: compiled with epoch interruption, as the host runs plugins;
//! - `none`: compiled without any check;
//! - `trap-check`: compiled without epochs, after a rewrite that puts a
//!   check of the same density as wasmtime's (every function entry and
//!   every loop header) into the code: `global.get $stop` + `if
//!   unreachable end`. The check only branches to a trap: no call into the
//!   runtime and no deadline carried in a variable, which is what wasmtime's
//!   check has and what costs in very large functions.
//!
//! The rewrite is a measuring device, not a deadline: nothing can set the
//! global from another thread. The probe checks that it is live (set, the
//! next call traps) and that every variant returns the native result.
//!
//! `cargo run --release -- GUEST.wasm...`; `KUBEWASM_CORPUS` names the
//! corpus (default `../shared/corpus` beside the repository).

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail, ensure};
use wasm_encoder::reencode::{Error as ReencodeError, Reencode, utils};
use wasm_encoder::{BlockType, ConstExpr, ExportKind, GlobalType, Instruction, ValType};
use wasmtime::{Config, Engine, Linker, Module, Store, Val};

const CALLS: u32 = 20_000;
const ROUNDS: usize = 5;
/// The global the rewrite adds, exported so the probe can set it.
const STOP: &str = "epoch_probe_stop";

fn main() -> anyhow::Result<()> {
    let guests: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    if guests.is_empty() {
        bail!("usage: epoch-probe GUEST.wasm... (bench/epoch-probe/run.sh builds them)");
    }
    let pod = sample_pod()?;
    let expected = native_total(&pod);
    let native = best_us(|| native_total(&pod));
    println!(
        "pod: {} bytes compact; {CALLS} decisions per round, best of {ROUNDS}",
        pod.len()
    );
    println!("native Rust: {native:.2} us");
    println!("| guest | epochs | none | trap-check | epochs cost | trap-check cost |");
    println!("|---|---:|---:|---:|---:|---:|");
    for guest in &guests {
        let bytes = std::fs::read(guest).with_context(|| format!("reading {}", guest.display()))?;
        let rewritten = with_trap_checks(&bytes)?;
        let epochs = time_guest(&bytes, true, &pod, expected)?;
        let none = time_guest(&bytes, false, &pod, expected)?;
        let checked = time_guest(&rewritten, false, &pod, expected)?;
        check_trap_is_live(&rewritten, &pod)?;
        let name = guest
            .file_stem()
            .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
        println!(
            "| {name} | {epochs:.2} us ({:.2}x) | {none:.2} us ({:.2}x) | {checked:.2} us ({:.2}x) | {:+.0} % | {:+.0} % |",
            epochs / native,
            none / native,
            checked / native,
            (epochs / none - 1.0) * 100.0,
            (checked / none - 1.0) * 100.0,
        );
    }
    Ok(())
}

/// Microseconds per decision: the best of [`ROUNDS`] rounds of [`CALLS`].
fn best_us(mut round: impl FnMut() -> u32) -> f64 {
    (0..ROUNDS)
        .map(|_| {
            let start = Instant::now();
            std::hint::black_box(round());
            start.elapsed().as_secs_f64() * 1e6 / f64::from(CALLS)
        })
        .fold(f64::INFINITY, f64::min)
}

/// [`CALLS`] decisions natively: the total length of their patches, as
/// the guest's `run` returns it.
fn native_total(pod: &str) -> u32 {
    let mut total = 0u32;
    for _ in 0..CALLS {
        if let Ok(Some(patch)) = bench_logic::evaluate(std::hint::black_box(pod)) {
            total = total.wrapping_add(patch.len() as u32);
        }
    }
    total
}

struct Guest {
    store: Store<()>,
    instance: wasmtime::Instance,
    run: wasmtime::TypedFunc<(u32, u32, u32), u32>,
    text: (u32, u32),
}

fn instantiate(bytes: &[u8], epochs: bool, pod: &str) -> anyhow::Result<Guest> {
    let mut config = Config::new();
    config.epoch_interruption(epochs);
    let engine = Engine::new(&config)?;
    let module = Module::new(&engine, bytes)?;
    let mut store = Store::new(&engine, ());
    // Far away: the checks run, the deadline is never reached.
    store.set_epoch_deadline(u64::MAX / 2);
    let mut linker = Linker::new(&engine);
    // The guest needs no WASI: any import it declares traps if called.
    linker.define_unknown_imports_as_traps(&module)?;
    let instance = linker.instantiate(&mut store, &module)?;
    let alloc = instance.get_typed_func::<u32, u32>(&mut store, "alloc")?;
    let run = instance.get_typed_func::<(u32, u32, u32), u32>(&mut store, "run")?;
    let memory = instance
        .get_memory(&mut store, "memory")
        .context("the guest exports no memory")?;
    let len = u32::try_from(pod.len())?;
    let ptr = alloc.call(&mut store, len)?;
    memory.write(&mut store, usize::try_from(ptr)?, pod.as_bytes())?;
    Ok(Guest {
        store,
        instance,
        run,
        text: (ptr, len),
    })
}

fn time_guest(bytes: &[u8], epochs: bool, pod: &str, expected: u32) -> anyhow::Result<f64> {
    let mut guest = instantiate(bytes, epochs, pod)?;
    let (ptr, len) = guest.text;
    let got = guest.run.call(&mut guest.store, (ptr, len, CALLS))?;
    ensure!(
        got == expected,
        "the guest's decisions differ from native ({got} against {expected} bytes of patches)"
    );
    let mut failed = None;
    let us = best_us(
        || match guest.run.call(&mut guest.store, (ptr, len, CALLS)) {
            Ok(total) => total,
            Err(e) => {
                failed = Some(e);
                0
            }
        },
    );
    match failed {
        Some(e) => Err(e.into()),
        None => Ok(us),
    }
}

/// The rewritten module traps once its global is set: the checks are in
/// the code that was timed, not optimised away.
fn check_trap_is_live(rewritten: &[u8], pod: &str) -> anyhow::Result<()> {
    let mut guest = instantiate(rewritten, false, pod)?;
    let stop = guest
        .instance
        .get_global(&mut guest.store, STOP)
        .context("the rewrite exported no stop global")?;
    stop.set(&mut guest.store, Val::I32(1))?;
    let (ptr, len) = guest.text;
    match guest.run.call(&mut guest.store, (ptr, len, 1)) {
        Err(e)
            if e.downcast_ref::<wasmtime::Trap>()
                == Some(&wasmtime::Trap::UnreachableCodeReached) =>
        {
            Ok(())
        }
        Err(e) => bail!("the set stop global trapped with something else: {e}"),
        Ok(_) => {
            bail!("the set stop global did not stop the guest: the checks are not in the code")
        }
    }
}

/// Adds a mutable i32 global (exported as [`STOP`]) and `global.get; if
/// unreachable end` at every function entry and after every `loop`.
fn with_trap_checks(bytes: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut globals = 0u32;
    for payload in wasmparser::Parser::new(0).parse_all(bytes) {
        match payload? {
            wasmparser::Payload::ImportSection(imports) => {
                for import in imports.into_imports() {
                    if matches!(import?.ty, wasmparser::TypeRef::Global(_)) {
                        globals += 1;
                    }
                }
            }
            wasmparser::Payload::GlobalSection(section) => globals += section.count(),
            wasmparser::Payload::Version {
                encoding: wasmparser::Encoding::Component,
                ..
            } => bail!("a component: give the probe the guest's core module (run.sh builds it)"),
            _ => {}
        }
    }
    let mut rewrite = TrapChecks {
        stop: globals,
        added: false,
    };
    let mut module = wasm_encoder::Module::new();
    rewrite
        .parse_core_module(&mut module, wasmparser::Parser::new(0), bytes)
        .map_err(|e| anyhow::anyhow!("rewriting the module: {e:?}"))?;
    ensure!(
        rewrite.added,
        "the module has no global section to add the stop global to"
    );
    let out = module.finish();
    wasmparser::validate(&out).context("the rewritten module is invalid")?;
    Ok(out)
}

struct TrapChecks {
    /// The index the added global gets: after every imported and defined one.
    stop: u32,
    added: bool,
}

impl TrapChecks {
    fn check(&self, function: &mut wasm_encoder::Function) {
        function.instruction(&Instruction::GlobalGet(self.stop));
        function.instruction(&Instruction::If(BlockType::Empty));
        function.instruction(&Instruction::Unreachable);
        function.instruction(&Instruction::End);
    }
}

impl Reencode for TrapChecks {
    type Error = std::convert::Infallible;

    fn parse_global_section(
        &mut self,
        globals: &mut wasm_encoder::GlobalSection,
        section: wasmparser::GlobalSectionReader<'_>,
    ) -> Result<(), ReencodeError<Self::Error>> {
        utils::parse_global_section(self, globals, section)?;
        globals.global(
            GlobalType {
                val_type: ValType::I32,
                mutable: true,
                shared: false,
            },
            &ConstExpr::i32_const(0),
        );
        self.added = true;
        Ok(())
    }

    fn parse_export_section(
        &mut self,
        exports: &mut wasm_encoder::ExportSection,
        section: wasmparser::ExportSectionReader<'_>,
    ) -> Result<(), ReencodeError<Self::Error>> {
        utils::parse_export_section(self, exports, section)?;
        exports.export(STOP, ExportKind::Global, self.stop);
        Ok(())
    }

    fn parse_function_body(
        &mut self,
        code: &mut wasm_encoder::CodeSection,
        body: wasmparser::FunctionBody<'_>,
    ) -> Result<(), ReencodeError<Self::Error>> {
        let mut function = self.new_function_with_parsed_locals(&body)?;
        self.check(&mut function);
        let mut reader = body.get_operators_reader()?;
        while !reader.eof() {
            let op = reader.read()?;
            let is_loop = matches!(op, wasmparser::Operator::Loop { .. });
            function.instruction(&self.instruction(op)?);
            if is_loop {
                self.check(&mut function);
            }
        }
        code.function(&function);
        Ok(())
    }
}

/// The corpus Pod the runtime benchmark uses: scheduled, managedFields
/// removed, compact, closest to 4 KB.
fn sample_pod() -> anyhow::Result<String> {
    let dir = std::env::var("KUBEWASM_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../../shared/corpus"))
        .join("objects/Pod");
    let entries = std::fs::read_dir(&dir).with_context(|| {
        format!(
            "no corpus Pods at {}: set KUBEWASM_CORPUS to the corpus folder",
            dir.display()
        )
    })?;
    let mut files: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    files.sort();
    files
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .filter_map(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .filter_map(|mut pod| {
            if let Some(meta) = pod["metadata"].as_object_mut() {
                meta.remove("managedFields");
            }
            if pod["spec"]["nodeName"].is_string() {
                serde_json::to_string(&pod).ok()
            } else {
                None
            }
        })
        .min_by_key(|s| s.len().abs_diff(4096))
        .with_context(|| format!("no scheduled Pod in {}", dir.display()))
}
