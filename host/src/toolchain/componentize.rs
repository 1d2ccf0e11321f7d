//! `kubewasm componentize`: a core module, as clang (wasm32-wasi) or Go
//! (GOOS=wasip1) writes it, made a plugin component, what
//! `wasm-tools component embed` and `component new --adapt` did before.
//! The world's type is embedded when the module carries none (from the WIT
//! built into this binary, or a folder), and a module importing
//! `wasi_snapshot_preview1` gets the WASI preview1 adapter of the wasmtime
//! this host runs on (reactor, or command for a module with `_start`).
//! The module is kept as it is, its `name` section included, so a trap's
//! backtrace names the guest's functions.

use std::path::{Path, PathBuf};

use wasi_preview1_component_adapter_provider::{
    WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME, WASI_SNAPSHOT_PREVIEW1_COMMAND_ADAPTER,
    WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
};
use wasmparser::{Encoding, KnownCustom, Parser, Payload};
use wit_component::{ComponentEncoder, StringEncoding};
use wit_parser::Resolve;

use crate::runtime::cache::write_atomically;

/// The world a plugin targets when none is named.
pub const DEFAULT_WORLD: &str = "plugin";

/// A cause kept from wit-parser or wit-component (both report anyhow errors).
type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a module could not be made a component. Each says what the author
/// should change.
#[derive(Debug, thiserror::Error)]
pub enum ComponentizeError {
    #[error("not a WebAssembly module (no \\0asm header): give the .wasm file your compiler wrote")]
    NotWasm,
    #[error(
        "already a component: componentize takes the core module a compiler writes (clang --target=wasm32-wasi, GOOS=wasip1 go build); the host loads this file as it is"
    )]
    AlreadyComponent,
    #[error("not a valid core module")]
    Invalid(#[source] wasmparser::BinaryReaderError),
    #[error("cannot read the WIT in {path}")]
    Wit {
        path: PathBuf,
        #[source]
        source: Cause,
    },
    #[error("no world {world:?} in {wit}")]
    NoWorld {
        world: String,
        wit: String,
        #[source]
        source: Cause,
    },
    #[error(
        "the module imports {} from `env`: {}",
        .names.join(", "),
        undefined_hint(*.language)
    )]
    Undefined {
        names: Vec<String>,
        language: Language,
    },
    #[error("{hint}")]
    Encode {
        hint: String,
        #[source]
        source: Cause,
    },
}

fn undefined_hint(language: Language) -> &'static str {
    match language {
        Language::C => {
            "functions declared but defined nowhere; link the files that define them (the SDK: sdk/kubewasm.c and sdk/plugin.c), or link with -Wl,--no-undefined to see them at build time"
        }
        Language::Go => {
            "functions declared with //go:wasmimport under a module the world does not have; import from the WIT's interfaces (kubewasm:plugin/...) as the SDK does"
        }
        Language::Other => "symbols the compiler left undefined; link the code that defines them",
    }
}

/// The source language, read from the module's `producers` section: hints
/// name the language's own fix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    C,
    Go,
    Other,
}

/// Where the WIT world comes from when the module carries no component type.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// A WIT folder (or file); `None`: the WIT built into this binary
    /// (`wit/v0.2.0`). A module that already carries its world's type
    /// (wit-bindgen's `component-type` section) keeps its own.
    pub wit: Option<PathBuf>,
    /// The world's name (or `package/world`); `None`: [`DEFAULT_WORLD`].
    pub world: Option<String>,
}

/// The WASI preview1 adapter a component was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adapter {
    /// For modules whose exports are called after `_initialize`
    /// (clang `-mexec-model=reactor`, Go `-buildmode=c-shared`).
    Reactor,
    /// For modules with a `_start` (clang's default command model).
    Command,
}

/// A component made by [`componentize`], and how.
#[derive(Debug)]
pub struct Componentized {
    pub component: Vec<u8>,
    /// The world whose type was embedded (`kubewasm:plugin/plugin@0.2.0`);
    /// `None` when the module carried its own.
    pub embedded_world: Option<String>,
    /// `None` when the module imports no WASI preview1.
    pub adapter: Option<Adapter>,
    /// Whether the module had a `name` section (kept: a trap's backtrace
    /// names the functions, else it shows their numbers).
    pub names: bool,
    pub language: Language,
}

impl std::fmt::Display for Componentized {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.embedded_world {
            Some(world) => write!(f, "world {world} (type embedded)")?,
            None => f.write_str("the module's own world type")?,
        }
        match self.adapter {
            Some(Adapter::Reactor) => f.write_str(", WASI preview1 reactor adapter")?,
            Some(Adapter::Command) => f.write_str(", WASI preview1 command adapter")?,
            None => f.write_str(", no WASI adapter (no WASI imports)")?,
        }
        if self.names {
            f.write_str(", function names kept")
        } else {
            write!(
                f,
                ", no name section: a trap's backtrace will show function numbers ({})",
                match self.language {
                    Language::Go => "build without -ldflags=-s",
                    Language::C => "link without -s / -Wl,--strip-all",
                    Language::Other => "build without stripping",
                }
            )
        }
    }
}

/// What the encoder needs to know of the module before encoding it.
#[derive(Debug, Default)]
struct Scan {
    has_type: bool,
    names: bool,
    start: bool,
    wasi_preview1: bool,
    undefined: Vec<String>,
    language: Option<Language>,
}

fn scan(module: &[u8]) -> Result<Scan, ComponentizeError> {
    if !module.starts_with(b"\0asm") {
        return Err(ComponentizeError::NotWasm);
    }
    let mut s = Scan::default();
    for payload in Parser::new(0).parse_all(module) {
        match payload.map_err(ComponentizeError::Invalid)? {
            Payload::Version {
                encoding: Encoding::Component,
                ..
            } => return Err(ComponentizeError::AlreadyComponent),
            Payload::ImportSection(reader) => {
                for import in reader.into_imports() {
                    let import = import.map_err(ComponentizeError::Invalid)?;
                    match import.module {
                        WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME => s.wasi_preview1 = true,
                        "env" => s.undefined.push(import.name.to_owned()),
                        _ => {}
                    }
                }
            }
            Payload::ExportSection(reader) => {
                for export in reader {
                    let export = export.map_err(ComponentizeError::Invalid)?;
                    s.start |= export.name == "_start";
                }
            }
            Payload::CustomSection(section) => {
                s.has_type |= section.name().starts_with("component-type");
                match section.as_known() {
                    KnownCustom::Name(_) => s.names = true,
                    KnownCustom::Producers(reader) => s.language = language_of(reader),
                    _ => {}
                }
            }
            _ => {}
        }
    }
    Ok(s)
}

fn language_of(reader: wasmparser::ProducersSectionReader<'_>) -> Option<Language> {
    for field in reader.into_iter().flatten() {
        if field.name != "language" {
            continue;
        }
        for value in field.values.into_iter().flatten() {
            if value.name == "Go" {
                return Some(Language::Go);
            }
            if value.name.starts_with('C') && !value.name.starts_with("C_plus_plus") {
                return Some(Language::C);
            }
        }
    }
    None
}

/// The WIT and world to embed: `opts.wit`, or the built-in WIT.
fn load_world(opts: &Options) -> Result<(Resolve, wit_parser::WorldId), ComponentizeError> {
    let mut resolve = Resolve::default();
    let (package, wit) = match &opts.wit {
        Some(path) => {
            let (package, _) = resolve
                .push_path(path)
                .map_err(|e| ComponentizeError::Wit {
                    path: path.clone(),
                    source: e.into(),
                })?;
            (package, path.display().to_string())
        }
        None => {
            let package = resolve
                .push_str("plugin.wit", crate::toolchain::PLUGIN_WIT)
                .map_err(|e| ComponentizeError::Wit {
                    path: PathBuf::from("<built-in wit/v0.2.0>"),
                    source: e.into(),
                })?;
            (package, "the built-in WIT (wit/v0.2.0)".to_owned())
        }
    };
    let world = opts.world.as_deref().unwrap_or(DEFAULT_WORLD);
    let id =
        resolve
            .select_world(&[package], Some(world))
            .map_err(|e| ComponentizeError::NoWorld {
                world: world.to_owned(),
                wit,
                source: e.into(),
            })?;
    Ok((resolve, id))
}

/// Makes `module` (a core module) a plugin component, validated.
pub fn componentize(module: &[u8], opts: &Options) -> Result<Componentized, ComponentizeError> {
    let s = scan(module)?;
    let language = s.language.unwrap_or(Language::Other);
    if !s.undefined.is_empty() {
        return Err(ComponentizeError::Undefined {
            names: s.undefined,
            language,
        });
    }
    let mut bytes = module.to_vec();
    let mut embedded_world = None;
    if !s.has_type {
        let (resolve, world) = load_world(opts)?;
        wit_component::embed_component_metadata(&mut bytes, &resolve, world, StringEncoding::UTF8)
            .map_err(|e| ComponentizeError::Encode {
                hint: "cannot embed the world's type".to_owned(),
                source: e.into(),
            })?;
        let w = &resolve.worlds[world];
        embedded_world = Some(match w.package {
            Some(p) => resolve.id_of_name(p, &w.name),
            None => w.name.clone(),
        });
    }
    let adapter = s.wasi_preview1.then_some(if s.start {
        Adapter::Command
    } else {
        Adapter::Reactor
    });
    let component = encode(&bytes, adapter).map_err(|e| ComponentizeError::Encode {
        hint: encode_hint(&e, language),
        source: e.into(),
    })?;
    Ok(Componentized {
        component,
        embedded_world,
        adapter,
        names: s.names,
        language,
    })
}

fn encode(module: &[u8], adapter: Option<Adapter>) -> anyhow::Result<Vec<u8>> {
    let mut encoder = ComponentEncoder::default().validate(true).module(module)?;
    if let Some(adapter) = adapter {
        let bytes = match adapter {
            Adapter::Reactor => WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
            Adapter::Command => WASI_SNAPSHOT_PREVIEW1_COMMAND_ADAPTER,
        };
        encoder = encoder.adapter(WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME, bytes)?;
    }
    encoder.encode()
}

/// What the author should change, from wit-component's error chain (its
/// messages are the only signal it gives; an unknown one gets a general
/// hint and the chain as the cause).
fn encode_hint(e: &anyhow::Error, language: Language) -> String {
    let chain = format!("{e:#}");
    let exports = match language {
        Language::C => {
            " (C: link sdk/kubewasm.c and sdk/plugin.c, define kw_plugin_register and kw_plugin_handle, and build a reactor: -mexec-model=reactor)"
        }
        Language::Go => {
            " (Go: import the SDK, call kw.Export in an init function, and build with -buildmode=c-shared)"
        }
        Language::Other => "",
    };
    let missing = quoted_after(&chain, "failed to find export of interface `")
        .and_then(|interface| {
            let function = quoted_after(&chain, &format!("{interface}` function `"))?;
            Some(format!("{interface}#{function}"))
        })
        .or_else(|| quoted_after(&chain, "failed to find export of function `").map(str::to_owned))
        .or_else(|| quoted_after(&chain, "does not export required function `").map(str::to_owned));
    if let Some(name) = missing {
        return format!("the module does not export `{name}`, which the world requires{exports}");
    }
    if let Some(module) = quoted_after(&chain, "module requires an import interface named `") {
        return format!(
            "the module imports from `{module}`, which is neither an interface of the world nor WASI preview1: import only what the WIT declares (bindings of the same WIT version as the world)"
        );
    }
    if chain.contains("no top-level imported function") || chain.contains("unknown function") {
        return "the module imports a function the world does not declare: import only what the WIT declares (bindings of the same WIT version as the world)".to_owned();
    }
    if chain.contains("type mismatch") || chain.contains("function has wrong type") {
        return "an import or export does not have the type the world gives it: the bindings were made for another WIT version than the world's".to_owned();
    }
    "cannot make a plugin component of this module".to_owned()
}

/// The text between `prefix` and the next backquote, if `prefix` occurs.
fn quoted_after<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let rest = &text[text.find(prefix)? + prefix.len()..];
    Some(&rest[..rest.find('`')?])
}

/// Reads `input`, componentizes it and writes `output` (atomically: a
/// failed run leaves no half-written component behind).
pub fn componentize_file(
    input: &Path,
    output: &Path,
    opts: &Options,
) -> Result<Componentized, FileError> {
    let module = std::fs::read(input).map_err(|source| FileError::Read {
        path: input.to_owned(),
        source,
    })?;
    let done = componentize(&module, opts).map_err(|source| FileError::Componentize {
        path: input.to_owned(),
        source,
    })?;
    write_atomically(output, &[&done.component]).map_err(|source| FileError::Write {
        path: output.to_owned(),
        source,
    })?;
    Ok(done)
}

/// [`componentize_file`]'s errors: each names the file.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}")]
    Componentize {
        path: PathBuf,
        source: ComponentizeError,
    },
    #[error("cannot write {path}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

#[cfg(test)]
mod tests;
