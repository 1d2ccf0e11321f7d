//! `kubewasm compile`: a folder precompiled into the cache the host loads.

use std::io::Write;
use std::path::PathBuf;

use super::parse_size;

#[derive(clap::Args, Debug)]
pub(crate) struct CompileArgs {
    /// Folder of plugins (NAME.wasm; sidecars are not needed).
    folder: PathBuf,
    /// Compile cache to write (what `run --cache-dir` reads) [default: $XDG_CACHE_HOME/kubewasm/components].
    #[arg(long, visible_alias = "out", env = "KUBEWASM_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
    /// Size cap of the cache: older artifacts beyond it are evicted (this run's never).
    #[arg(long, value_parser = parse_size, default_value = "1Gi")]
    compile_cache_max: u64,
    /// Sign the artifacts with this key file (at least 32 bytes; the host verifies with its --artifact-key)
    /// [default: the cache folder's own key, which only a host using that folder accepts].
    #[arg(long, env = "KUBEWASM_ARTIFACT_KEY")]
    artifact_key: Option<PathBuf>,
    /// Compile for a host run with --no-epoch-deadlines (benchmarks only).
    #[arg(long, hide = true)]
    no_epoch_deadlines: bool,
}

pub(crate) fn compile(args: CompileArgs) -> anyhow::Result<()> {
    use kubewasm::runtime::CompileSource;
    let mut engine = kubewasm::runtime::EngineOptions {
        epoch_deadlines: !args.no_epoch_deadlines,
        cache_max_bytes: args.compile_cache_max,
        artifact_key: args.artifact_key,
        ..Default::default()
    };
    if args.cache_dir.is_some() {
        engine.cache_dir = args.cache_dir;
    }
    let report = kubewasm::precompile::compile_folder(&args.folder, engine)?;
    let mut out = std::io::stdout().lock();
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    let (mut compiled, mut cached) = (0, 0);
    for f in &report.files {
        match &f.outcome {
            Ok(c) => {
                let what = match c.source {
                    CompileSource::Compiled => {
                        compiled += 1;
                        "compiled"
                    }
                    CompileSource::Cached => {
                        cached += 1;
                        "cached  "
                    }
                };
                writeln!(
                    out,
                    "{what}  {}  {:.1} MiB in {:.2} s  {}",
                    f.path.display(),
                    mib(c.artifact_bytes),
                    c.elapsed.as_secs_f64(),
                    c.artifact.display()
                )?;
            }
            Err(e) => writeln!(
                out,
                "FAILED    {}: {e} (fix or remove the file; nothing was cached for it)",
                f.path.display()
            )?,
        }
    }
    let failed: Vec<&str> = report.failed().map(|f| f.name.as_str()).collect();
    writeln!(
        out,
        "{} plugins: {compiled} compiled, {cached} already cached, {} failed; cache {} holds {:.1} MiB (cap {:.1} MiB)",
        report.files.len(),
        failed.len(),
        report.cache_dir.display(),
        mib(report.cache_bytes),
        mib(report.cache_max_bytes)
    )?;
    match &report.key {
        kubewasm::runtime::artifact_key::KeySource::Operator(path) => writeln!(
            out,
            "artifacts signed with the key {}: hosts run with the same --artifact-key map them",
            path.display()
        )?,
        other => writeln!(
            out,
            "artifacts signed with {other}: only a host using this cache folder maps them (pass --artifact-key to ship them elsewhere)"
        )?,
    }
    anyhow::ensure!(
        failed.is_empty(),
        "{} of {} plugins did not compile: {}",
        failed.len(),
        report.files.len(),
        failed.join(", ")
    );
    Ok(())
}
