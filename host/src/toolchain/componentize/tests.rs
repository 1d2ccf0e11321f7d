#![allow(clippy::unwrap_used, clippy::expect_used)]

use wasm_encoder::{
    CodeSection, EntityType, ExportKind, ExportSection, Function, FunctionSection, ImportSection,
    MemorySection, MemoryType, Module, NameMap, NameSection, TypeSection, ValType,
};

use super::*;

/// A world of one function, `f: func() -> u32`, exported at the root.
const TINY_WIT: &str = "package test:tiny;\n\nworld tiny {\n    export f: func() -> u32;\n}\n";

/// How [`module`] builds its core module.
#[derive(Default)]
struct Shape {
    /// Export `f` (the world's function); else export `g`.
    export_f: bool,
    /// Import `wasi_snapshot_preview1::sched_yield`, as a wasip1 build would.
    wasi: bool,
    /// Import `env::missing`, as a C build with an undefined function does.
    undefined: bool,
    /// Import `foo::bar`, a module the world does not have.
    foreign: bool,
    /// Export `_start` besides.
    start: bool,
    /// A `name` section naming the function `tiny_handler`.
    names: bool,
}

/// A core module whose exported function traps (`unreachable`).
fn module(shape: &Shape) -> Vec<u8> {
    let mut m = Module::new();
    let mut types = TypeSection::new();
    types.ty().function([], [ValType::I32]);
    types.ty().function([], []);
    m.section(&types);
    let mut imports = ImportSection::new();
    let mut imported = 0;
    if shape.wasi {
        imports.import(
            "wasi_snapshot_preview1",
            "sched_yield",
            EntityType::Function(0),
        );
        imported += 1;
    }
    if shape.undefined {
        imports.import("env", "missing", EntityType::Function(1));
        imported += 1;
    }
    if shape.foreign {
        imports.import("foo", "bar", EntityType::Function(1));
        imported += 1;
    }
    m.section(&imports);
    let mut funcs = FunctionSection::new();
    funcs.function(0);
    funcs.function(1);
    m.section(&funcs);
    let mut memories = MemorySection::new();
    memories.memory(MemoryType {
        minimum: 1,
        maximum: None,
        memory64: false,
        shared: false,
        page_size_log2: None,
    });
    m.section(&memories);
    let mut exports = ExportSection::new();
    let handler = imported;
    exports.export(
        if shape.export_f { "f" } else { "g" },
        ExportKind::Func,
        handler,
    );
    if shape.start {
        exports.export("_start", ExportKind::Func, handler + 1);
    }
    exports.export("memory", ExportKind::Memory, 0);
    m.section(&exports);
    let mut code = CodeSection::new();
    let mut f = Function::new([]);
    f.instructions().unreachable().end();
    code.function(&f);
    let mut start = Function::new([]);
    start.instructions().end();
    code.function(&start);
    m.section(&code);
    if shape.names {
        let mut names = NameSection::new();
        let mut map = NameMap::new();
        map.append(handler, "tiny_handler");
        names.functions(&map);
        m.section(&names);
    }
    m.finish()
}

fn tiny_wit() -> (tempfile::TempDir, Options) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tiny.wit"), TINY_WIT).unwrap();
    let opts = Options {
        wit: Some(dir.path().to_owned()),
        world: Some("tiny".to_owned()),
    };
    (dir, opts)
}

/// The trap message of calling `f` of `component` in wasmtime.
fn call_f(component: &[u8]) -> String {
    let engine = wasmtime::Engine::default();
    let component = wasmtime::component::Component::new(&engine, component).unwrap();
    let linker = wasmtime::component::Linker::<()>::new(&engine);
    let mut store = wasmtime::Store::new(&engine, ());
    let instance = linker.instantiate(&mut store, &component).unwrap();
    let f = instance
        .get_typed_func::<(), (u32,)>(&mut store, "f")
        .unwrap();
    format!("{:#}", f.call(&mut store, ()).unwrap_err())
}

#[test]
fn names_survive_into_the_trap_backtrace() {
    let (_dir, opts) = tiny_wit();
    let named = componentize(
        &module(&Shape {
            export_f: true,
            names: true,
            ..Default::default()
        }),
        &opts,
    )
    .unwrap();
    assert!(named.names);
    assert_eq!(named.adapter, None);
    assert_eq!(named.embedded_world.as_deref(), Some("test:tiny/tiny"));
    let trap = call_f(&named.component);
    assert!(trap.contains("!tiny_handler"), "{trap}");

    let stripped = componentize(
        &module(&Shape {
            export_f: true,
            ..Default::default()
        }),
        &opts,
    )
    .unwrap();
    assert!(!stripped.names);
    assert!(
        stripped.to_string().contains("no name section"),
        "{stripped}"
    );
    let trap = call_f(&stripped.component);
    assert!(!trap.contains("tiny_handler"), "{trap}");
    assert!(trap.contains("<wasm function "), "{trap}");
}

#[test]
fn wasi_preview1_gets_the_reactor_adapter_or_the_command_one_with_start() {
    let (_dir, opts) = tiny_wit();
    let reactor = componentize(
        &module(&Shape {
            export_f: true,
            wasi: true,
            names: true,
            ..Default::default()
        }),
        &opts,
    )
    .unwrap();
    assert_eq!(reactor.adapter, Some(Adapter::Reactor));
    assert!(call_f_with_wasi(&reactor.component).contains("!tiny_handler"));

    let command = componentize(
        &module(&Shape {
            export_f: true,
            wasi: true,
            start: true,
            ..Default::default()
        }),
        &opts,
    )
    .unwrap();
    assert_eq!(command.adapter, Some(Adapter::Command));
    let text = command.to_string();
    assert!(text.contains("command adapter"), "{text}");
}

/// [`call_f`] with WASI preview2 linked (what the adapter imports).
fn call_f_with_wasi(component: &[u8]) -> String {
    struct Ctx(wasmtime_wasi::WasiCtx, wasmtime::component::ResourceTable);
    impl wasmtime_wasi::WasiView for Ctx {
        fn ctx(&mut self) -> wasmtime_wasi::WasiCtxView<'_> {
            wasmtime_wasi::WasiCtxView {
                ctx: &mut self.0,
                table: &mut self.1,
            }
        }
    }
    let engine = wasmtime::Engine::default();
    let component = wasmtime::component::Component::new(&engine, component).unwrap();
    let mut linker = wasmtime::component::Linker::<Ctx>::new(&engine);
    wasmtime_wasi::p2::add_to_linker_sync(&mut linker).unwrap();
    let ctx = Ctx(
        wasmtime_wasi::WasiCtx::builder().build(),
        wasmtime::component::ResourceTable::new(),
    );
    let mut store = wasmtime::Store::new(&engine, ctx);
    let instance = linker.instantiate(&mut store, &component).unwrap();
    let f = instance
        .get_typed_func::<(), (u32,)>(&mut store, "f")
        .unwrap();
    format!("{:#}", f.call(&mut store, ()).unwrap_err())
}

#[test]
fn errors_say_what_to_change() {
    let (_dir, opts) = tiny_wit();
    assert!(matches!(
        componentize(b"hello", &opts),
        Err(ComponentizeError::NotWasm)
    ));
    let component = componentize(
        &module(&Shape {
            export_f: true,
            ..Default::default()
        }),
        &opts,
    )
    .unwrap()
    .component;
    assert!(matches!(
        componentize(&component, &opts),
        Err(ComponentizeError::AlreadyComponent)
    ));
    assert!(matches!(
        componentize(b"\0asm\x01\0\0\0\x01\x05", &opts),
        Err(ComponentizeError::Invalid(_))
    ));

    let undefined = componentize(
        &module(&Shape {
            export_f: true,
            undefined: true,
            ..Default::default()
        }),
        &opts,
    )
    .unwrap_err();
    assert!(
        undefined
            .to_string()
            .starts_with("the module imports missing from `env`: "),
        "{undefined}"
    );

    let foreign = componentize(
        &module(&Shape {
            export_f: true,
            foreign: true,
            ..Default::default()
        }),
        &opts,
    )
    .unwrap_err();
    assert!(
        foreign
            .to_string()
            .starts_with("the module imports from `foo`, which is neither an interface of the world nor WASI preview1"),
        "{foreign}"
    );

    let missing = componentize(&module(&Shape::default()), &opts).unwrap_err();
    let text = missing.to_string();
    assert_eq!(
        text,
        "the module does not export `f`, which the world requires"
    );
    assert!(
        std::error::Error::source(&missing).is_some(),
        "wit-component's own error is kept as the cause"
    );

    let no_world = componentize(
        &module(&Shape::default()),
        &Options {
            world: Some("nope".to_owned()),
            ..opts.clone()
        },
    )
    .unwrap_err();
    assert!(
        no_world.to_string().starts_with("no world \"nope\" in "),
        "{no_world}"
    );

    let bad_wit = componentize(
        &module(&Shape::default()),
        &Options {
            wit: Some("/nonexistent/wit".into()),
            world: None,
        },
    )
    .unwrap_err();
    assert!(
        bad_wit
            .to_string()
            .starts_with("cannot read the WIT in /nonexistent/wit"),
        "{bad_wit}"
    );
}

/// The built-in WIT's `plugin` world is the default: a module exporting
/// nothing is told which export of it is missing.
#[test]
fn the_built_in_plugin_world_is_the_default() {
    let err = componentize(&module(&Shape::default()), &Options::default()).unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with(
            "the module does not export `kubewasm:plugin/handler@0.2.0#register`, which the world requires"
        ),
        "{text}"
    );
}

#[test]
fn componentize_file_writes_the_component_or_nothing() {
    let (dir, opts) = tiny_wit();
    let core = dir.path().join("core.wasm");
    let out = dir.path().join("out.wasm");
    std::fs::write(&core, module(&Shape::default())).unwrap();
    let err = componentize_file(&core, &out, &opts).unwrap_err();
    assert!(err.to_string().ends_with("core.wasm"), "{err}");
    assert!(!out.exists());
    std::fs::write(
        &core,
        module(&Shape {
            export_f: true,
            ..Default::default()
        }),
    )
    .unwrap();
    let done = componentize_file(&core, &out, &opts).unwrap();
    assert_eq!(std::fs::read(&out).unwrap(), done.component);
}
