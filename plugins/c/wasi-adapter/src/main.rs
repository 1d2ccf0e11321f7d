//! `wasi-adapter OUT`: writes the WASI preview1 reactor adapter to OUT.
use std::process::ExitCode;

fn main() -> ExitCode {
    let Some(out) = std::env::args_os().nth(1) else {
        eprintln!("usage: wasi-adapter OUT.wasm");
        return ExitCode::from(2);
    };
    let bytes = wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER;
    match std::fs::write(&out, bytes) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{}: {e}", std::path::Path::new(&out).display());
            ExitCode::FAILURE
        }
    }
}
