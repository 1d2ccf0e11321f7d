//! `kubewasm compile`: every plugin of a folder compiled into the compile
//! cache, under the names the host looks up (content hash and engine), so
//! that an image or a CI job ships artifacts and the host maps them at
//! start instead of compiling. Each file is checked as the host checks it
//! (header, compile, exports, imports); a file that fails gets its own
//! error and leaves no artifact. Artifacts are signed with the artifact
//! key (`--artifact-key`, else the cache folder's own), and a host maps
//! only those its own key verifies.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::reload::{DirError, candidates};
use crate::runtime::artifact_key::KeySource;
use crate::runtime::engine::EngineError;
use crate::runtime::{CompileSource, EngineOptions, LoadError, Manifest, Runtime};

#[derive(Debug, thiserror::Error)]
pub enum PrecompileError {
    #[error(transparent)]
    Dir(#[from] DirError),
    #[error("no plugins (NAME.wasm) in {0}: nothing to compile")]
    Empty(PathBuf),
    #[error("no compile cache folder: pass --cache-dir DIR")]
    NoCache,
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// What happened to one plugin file.
#[derive(Debug)]
pub struct FileReport {
    pub name: String,
    pub path: PathBuf,
    pub outcome: Result<Compiled, FileError>,
}

/// A plugin whose artifact is in the cache.
#[derive(Debug, Clone)]
pub struct Compiled {
    pub source: CompileSource,
    pub elapsed: Duration,
    pub artifact: PathBuf,
    pub artifact_bytes: u64,
}

/// Why one file has no artifact.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("cannot read it: {0}")]
    Read(std::io::Error),
    #[error("{0}")]
    Load(LoadError),
    #[error(
        "compiled, but its artifact could not be written to {0}: check that the cache folder is writable"
    )]
    NotStored(PathBuf),
}

/// The whole run.
#[derive(Debug)]
pub struct Report {
    pub files: Vec<FileReport>,
    pub cache_dir: PathBuf,
    /// Bytes of artifacts in the cache after the run.
    pub cache_bytes: u64,
    pub cache_max_bytes: u64,
    /// The key the artifacts are signed with.
    pub key: KeySource,
}

impl Report {
    pub fn failed(&self) -> impl Iterator<Item = &FileReport> {
        self.files.iter().filter(|f| f.outcome.is_err())
    }
}

/// Compiles every `NAME.wasm` of `dir` into `engine.cache_dir`, in this
/// process and one at a time (a short-lived command: its memory goes when
/// it exits). Artifacts of this run are never evicted by it.
pub fn compile_folder(dir: &Path, engine: EngineOptions) -> Result<Report, PrecompileError> {
    let cache_dir = engine.cache_dir.clone().ok_or(PrecompileError::NoCache)?;
    let cache_max_bytes = engine.cache_max_bytes;
    let found = candidates(dir)?;
    if found.is_empty() {
        return Err(PrecompileError::Empty(dir.to_owned()));
    }
    let runtime = Runtime::new(engine)?;
    let mut files = Vec::new();
    // Held to the end: this run's artifacts are pinned against eviction.
    let mut pins = Vec::new();
    for (name, path) in found {
        let started = Instant::now();
        let outcome = compile_file(&runtime, &name, &path).map(|(compiled, pin)| {
            pins.push(pin);
            Compiled {
                elapsed: started.elapsed(),
                ..compiled
            }
        });
        files.push(FileReport {
            name,
            path,
            outcome,
        });
    }
    let cache_bytes = runtime
        .engine()
        .cache()
        .map(|c| c.evict(&[]).kept)
        .unwrap_or_default();
    let key = runtime
        .engine()
        .cache()
        .map_or(KeySource::Ephemeral, |c| c.key().source().clone());
    drop(pins);
    Ok(Report {
        files,
        cache_dir,
        cache_bytes,
        cache_max_bytes,
        key,
    })
}

fn compile_file(
    runtime: &Runtime,
    name: &str,
    path: &Path,
) -> Result<(Compiled, Option<crate::runtime::cache::Pin>), FileError> {
    let bytes = std::fs::read(path).map_err(FileError::Read)?;
    compile_bytes(runtime, name, &bytes)
}

/// A module compiled for `kubewasm push --precompiled`: the artifact as
/// the compile cache holds it (MAC header included), for a precompiled
/// layer.
#[derive(Debug, Clone)]
pub struct Artifact {
    pub bytes: Vec<u8>,
    /// The engine key it was compiled for.
    pub engine_key: String,
    /// The id of the artifact key its MAC is under.
    pub key_id: String,
    pub elapsed: Duration,
}

/// Why `kubewasm push --precompiled` has no artifact.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    #[error(
        "--precompiled needs --artifact-key: the layer is signed with the key the hosts verify with (a key of this run only would verify nowhere)"
    )]
    NoKey,
    #[error("cannot make a scratch compile cache: {0}")]
    Scratch(std::io::Error),
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    File(#[from] FileError),
}

/// Compiles `bytes` (plugin `name`) as the host would for `engine`'s
/// optimized tier (checked as `kubewasm compile` checks a file) and returns
/// its artifact signed with `engine.artifact_key`, which is required. The
/// compile goes through a scratch cache folder, removed after.
pub fn compile_artifact(
    name: &str,
    bytes: &[u8],
    mut engine: EngineOptions,
) -> Result<Artifact, ArtifactError> {
    if engine.artifact_key.is_none() {
        return Err(ArtifactError::NoKey);
    }
    let scratch = crate::runtime::engine::private_temp_dir().map_err(ArtifactError::Scratch)?;
    engine.cache_dir = Some(scratch.clone());
    let compiled = (|| {
        let runtime = Runtime::new(engine)?;
        let started = Instant::now();
        let (compiled, pin) = compile_bytes(&runtime, name, bytes)?;
        drop(pin);
        let artifact = std::fs::read(&compiled.artifact).map_err(FileError::Read)?;
        let (engine_key, key_id) = match runtime.engine().cache() {
            Some(c) => (c.engine_key().to_owned(), c.key().id()),
            None => (runtime.engine().engine_key().to_owned(), String::new()),
        };
        Ok(Artifact {
            bytes: artifact,
            engine_key,
            key_id,
            elapsed: started.elapsed(),
        })
    })();
    if let Err(e) = std::fs::remove_dir_all(&scratch) {
        tracing::warn!(path = %scratch.display(), error = %e, "cannot remove the scratch compile cache");
    }
    compiled
}

fn compile_bytes(
    runtime: &Runtime,
    name: &str,
    bytes: &[u8],
) -> Result<(Compiled, Option<crate::runtime::cache::Pin>), FileError> {
    let bytes = bytes.to_vec();
    runtime
        .check_file(&bytes, &Manifest::default())
        .map_err(FileError::Load)?;
    let obtained = runtime
        .engine()
        .obtain_blocking(name, &bytes)
        .map_err(|e| FileError::Load(e.into()))?;
    let artifact = runtime
        .engine()
        .cache()
        .map(|c| c.artifact(&obtained.digest))
        .unwrap_or_default();
    if let Err(e) = runtime.check(&obtained.component) {
        // Not a plugin the host runs: its artifact would only take space.
        drop(obtained);
        let _ = std::fs::remove_file(&artifact);
        return Err(FileError::Load(e));
    }
    let artifact_bytes = std::fs::metadata(&artifact)
        .map_err(|_| FileError::NotStored(artifact.clone()))?
        .len();
    Ok((
        Compiled {
            source: obtained.source,
            elapsed: Duration::ZERO,
            artifact,
            artifact_bytes,
        },
        obtained.pin,
    ))
}
