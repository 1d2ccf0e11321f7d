//! The shared wasmtime Engine of a compile tier (see [`super::tier`]), its
//! epoch ticker, and how a plugin's component is obtained: from the compile
//! cache when an artifact of its content is there (a mmap, well under a
//! millisecond), else compiled off the hot path (see [`super::compiler`])
//! and cached.

use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;
use wasmtime::component::Component;
use wasmtime::{Config, Engine};

use super::artifact_key::{ArtifactKey, KeyError};
use super::cache::{self, CompileCache, Pin};
use super::compiler::{self, ChildError, ChildRequest, CompileError, Compiler, Priority};
use super::tier::{FastFirst, Tier};

/// How often the epoch advances: the granularity of call deadlines.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("cannot configure the wasmtime engine: {0}")]
    Config(String),
    #[error("cannot start the epoch ticker thread: {0}")]
    Ticker(std::io::Error),
    #[error(transparent)]
    Key(#[from] KeyError),
}

/// Engine settings.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Enforce per-call deadlines (costs a check on loop back-edges).
    pub epoch_deadlines: bool,
    /// Where compiled components are cached; `None` disables the cache.
    pub cache_dir: Option<PathBuf>,
    /// The cache's size cap in bytes: after each new artifact the least
    /// recently used others are evicted down to it.
    pub cache_max_bytes: u64,
    /// Where components are compiled (the `run` command: a child process).
    pub compiler: Compiler,
    /// The operator's key (a file of at least 32 bytes) that signs the
    /// artifacts this host writes and verifies those it maps; `None`: a
    /// per-host key generated into the cache folder (see
    /// [`super::artifact_key`]).
    pub artifact_key: Option<PathBuf>,
    /// When a plugin not yet compiled is served by the fast tier first
    /// (see [`super::tier`]).
    pub fast_first: FastFirst,
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            epoch_deadlines: true,
            cache_dir: default_cache_dir(),
            cache_max_bytes: cache::DEFAULT_MAX_BYTES,
            compiler: Compiler::InProcess,
            artifact_key: None,
            fast_first: FastFirst::default(),
        }
    }
}

/// `$XDG_CACHE_HOME/kubewasm` or `~/.cache/kubewasm`.
pub fn default_cache_dir() -> Option<PathBuf> {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .map(|d| d.join("kubewasm").join("components"))
}

/// The engine configuration of a tier: one function, so that the host, its
/// compiler child and `kubewasm compile` produce artifacts each other can
/// load.
pub fn engine_config(epoch_deadlines: bool, tier: Tier) -> Config {
    let mut config = Config::new();
    config.strategy(tier.strategy());
    config.wasm_component_model(true);
    config.epoch_interruption(epoch_deadlines);
    config.parallel_compilation(true);
    // No plugin uses the component model's async ABI; with concurrency
    // support on (wasmtime's default) every call pays for its
    // bookkeeping.
    config.concurrency_support(false);
    config
}

/// The part of an artifact's name that says which engine it is for.
pub fn compat_key(engine: &Engine) -> String {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    format!("{:016x}", hasher.finish())
}

/// A plugin's bytes, with their content digest when the caller already has
/// it: the folder scan hashes each file once and passes the digest down,
/// since one SHA-256 of a 19 MB Python component takes about 9 ms of a
/// swap. Cloning shares the bytes (a tier-up keeps them while it
/// compiles).
#[derive(Debug, Clone)]
pub struct Content {
    bytes: Arc<Vec<u8>>,
    digest: Option<String>,
}

impl Content {
    /// `bytes` with their digest computed now (on the calling thread).
    pub fn hashed(bytes: Vec<u8>) -> Self {
        let digest = content_digest(&bytes);
        Self {
            bytes: Arc::new(bytes),
            digest: Some(digest),
        }
    }

    /// Reads the file at `path` and hashes it in the same pass, a chunk at
    /// a time while it is in the CPU's cache (a 19 MB component read and
    /// then hashed is brought through memory twice).
    pub fn read_hashed(path: &std::path::Path) -> std::io::Result<Self> {
        use std::io::Read;
        const CHUNK: usize = 1 << 20;
        let mut file = std::fs::File::open(path)?;
        let size = file.metadata().map_or(0, |m| m.len());
        let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0).saturating_add(1));
        let mut hasher = Sha256::new();
        // To its end, as std::fs::read (a file that grows while read by a
        // writer not using a rename is read whole).
        loop {
            let start = bytes.len();
            let n = (&mut file).take(CHUNK as u64).read_to_end(&mut bytes)?;
            if n == 0 {
                break;
            }
            hasher.update(&bytes[start..]);
        }
        let digest = hasher
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        Ok(Self {
            bytes: Arc::new(bytes),
            digest: Some(digest),
        })
    }

    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The content digest, if already known.
    pub fn digest(&self) -> Option<&str> {
        self.digest.as_deref()
    }
}

/// Bytes whose digest [`WasmEngine::obtain`] computes off the async threads.
impl From<Vec<u8>> for Content {
    fn from(bytes: Vec<u8>) -> Self {
        Self {
            bytes: Arc::new(bytes),
            digest: None,
        }
    }
}

/// A plugin content's SHA-256 (hex): the cache key and the plugin's version.
pub fn content_digest(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The shared engine of a tier plus the ticker that drives epoch
/// deadlines.
#[derive(Clone)]
pub struct WasmEngine {
    engine: Engine,
    options: EngineOptions,
    tier: Tier,
    compat: String,
    cache: Option<CompileCache>,
    /// Signs and verifies compiled artifacts (the cache's key; without a
    /// cache, one of this process only, which the compiler child signs its
    /// output with).
    key: ArtifactKey,
    /// Cancelled when the host shuts down: kills compiler children.
    shutdown: CancellationToken,
    stop: Arc<AtomicBool>,
}

impl std::fmt::Debug for WasmEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmEngine")
            .field("options", &self.options)
            .finish()
    }
}

impl Drop for WasmEngine {
    fn drop(&mut self) {
        // The ticker holds its own Arc; stop it when the last engine handle goes.
        if Arc::strong_count(&self.stop) == 2 {
            self.stop.store(true, Ordering::Relaxed);
        }
    }
}

/// How a component was obtained, for logs and the benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompileSource {
    Compiled,
    Cached,
}

/// A component ready to check and pre-instantiate.
#[derive(Debug)]
pub struct Obtained {
    pub component: Component,
    pub source: CompileSource,
    /// The tier of the engine that compiled it (the one to run it on).
    pub tier: Tier,
    /// The content's SHA-256 (hex).
    pub digest: String,
    /// Keeps its cache artifact from eviction while the plugin runs.
    pub pin: Option<Pin>,
}

impl WasmEngine {
    /// The optimized tier's engine.
    pub fn new(options: EngineOptions) -> Result<Self, EngineError> {
        let (engine, compat) = Self::configured(&options, Tier::Optimized)?;
        let key = match (&options.artifact_key, &options.cache_dir) {
            (Some(file), _) => ArtifactKey::from_file(file)?,
            (None, Some(dir)) => ArtifactKey::for_cache(dir)?,
            (None, None) => ArtifactKey::ephemeral()?,
        };
        let cache = options.cache_dir.clone().map(|dir| {
            CompileCache::new(dir, options.cache_max_bytes, compat.clone(), key.clone())
        });
        let stop = spawn_ticker(&engine, options.epoch_deadlines)?;
        Ok(Self {
            engine,
            options,
            tier: Tier::Optimized,
            compat,
            cache,
            key,
            shutdown: CancellationToken::new(),
            stop,
        })
    }

    /// The engine of `tier` next to this one: the same options, artifact
    /// key, cache folder (its artifacts under its own engine key, evicted
    /// with this one's) and shutdown.
    pub fn sibling(&self, tier: Tier) -> Result<Self, EngineError> {
        let (engine, compat) = Self::configured(&self.options, tier)?;
        let stop = spawn_ticker(&engine, self.options.epoch_deadlines)?;
        Ok(Self {
            engine,
            options: self.options.clone(),
            tier,
            cache: self.cache.as_ref().map(|c| c.for_engine(compat.clone())),
            compat,
            key: self.key.clone(),
            shutdown: self.shutdown.clone(),
            stop,
        })
    }

    fn configured(options: &EngineOptions, tier: Tier) -> Result<(Engine, String), EngineError> {
        let config = engine_config(options.epoch_deadlines, tier);
        let engine = Engine::new(&config).map_err(|e| EngineError::Config(format!("{e:#}")))?;
        let compat = compat_key(&engine);
        Ok((engine, compat))
    }

    /// Abandons compiles (killing compiler children) once `shutdown` is
    /// cancelled.
    #[must_use]
    pub fn with_shutdown(mut self, shutdown: CancellationToken) -> Self {
        self.shutdown = shutdown;
        self
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub fn epoch_deadlines(&self) -> bool {
        self.options.epoch_deadlines
    }

    /// The engine key: what names its artifacts (see [`compat_key`]).
    pub fn engine_key(&self) -> &str {
        &self.compat
    }

    /// The compile tier of this engine.
    pub fn tier(&self) -> Tier {
        self.tier
    }

    /// When a plugin is served by the fast tier first.
    pub fn fast_first(&self) -> FastFirst {
        self.options.fast_first
    }

    /// The operator's artifact key file, if one is configured.
    pub fn artifact_key_file(&self) -> Option<PathBuf> {
        self.options.artifact_key.clone()
    }

    /// The compile cache, if enabled.
    pub fn cache(&self) -> Option<&CompileCache> {
        self.cache.as_ref()
    }

    /// The component of `digest` from the cache, pinned, if one loads.
    pub fn cached(&self, digest: &str) -> Option<Obtained> {
        let cache = self.cache.as_ref()?;
        let (component, path) = cache.load(&self.engine, digest)?;
        Some(Obtained {
            component,
            source: CompileSource::Cached,
            tier: self.tier,
            digest: digest.to_owned(),
            pin: Some(cache.pin(&path)),
        })
    }

    /// Deletes the cached artifact of `digest`, if any (the fast tier's,
    /// once optimized code serves: only a restart before that would use
    /// it). A running version keeps the code it loaded.
    pub fn forget(&self, digest: &str) {
        if let Some(cache) = &self.cache {
            let path = cache.artifact(digest);
            match std::fs::remove_file(&path) {
                Ok(()) => {
                    tracing::debug!(path = %path.display(), tier = %self.tier, "compile cache artifact no longer needed; deleted")
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "cannot delete a compile cache artifact no longer needed; eviction will")
                }
            }
        }
    }

    /// `content` with its digest (computed off the async threads if not
    /// known yet, and also returned on its own) and this engine's cached
    /// component of it, if one loads.
    pub async fn lookup(
        &self,
        content: Content,
    ) -> Result<(Content, String, Option<Obtained>), CompileError> {
        let me = self.clone();
        tokio::task::spawn_blocking(move || {
            let Content { bytes, digest } = content;
            let digest = digest.unwrap_or_else(|| content_digest(&bytes));
            let hit = me.cached(&digest);
            let content = Content {
                bytes,
                digest: Some(digest.clone()),
            };
            (content, digest, hit)
        })
        .await
        .map_err(joined)
    }

    /// [`obtain`](Self::obtain) on the calling thread, compiling in this
    /// process whatever the configured compiler (`kubewasm compile`,
    /// `kubewasm rbac`, tests and benches).
    pub fn obtain_blocking(&self, name: &str, bytes: &[u8]) -> Result<Obtained, CompileError> {
        let digest = content_digest(bytes);
        if let Some(hit) = self.cached(&digest) {
            return Ok(hit);
        }
        self.compile_here(name, bytes, digest)
    }

    /// The component of `bytes` (plugin `name`): from the cache when an
    /// artifact of the same content and engine loads, else compiled by the
    /// configured [`Compiler`] (a child that cannot be started falls back
    /// to compiling in process, with a warning) and cached. Never blocks
    /// the calling async thread. A compile logs its start (with the size),
    /// its end (with the time) and, when slow, progress every
    /// [`COMPILE_PROGRESS`].
    pub async fn obtain(
        &self,
        name: &str,
        content: impl Into<Content>,
    ) -> Result<Obtained, CompileError> {
        self.obtain_with(name, content.into(), Priority::Load).await
    }

    /// [`obtain`](Self::obtain) at `priority` (a tier-up compiles in the
    /// background).
    pub async fn obtain_with(
        &self,
        name: &str,
        content: Content,
        priority: Priority,
    ) -> Result<Obtained, CompileError> {
        let (content, digest, hit) = self.lookup(content).await?;
        if let Some(hit) = hit {
            return Ok(hit);
        }
        let bytes = content.bytes;
        if let Compiler::Child { program } = &self.options.compiler {
            match self
                .compile_in_child(program, name, &bytes, &digest, priority)
                .await
            {
                Err(ChildError::Spawn { program, source }) => {
                    tracing::warn!(plugin = name, program = %program.display(), error = %source, "cannot start the compiler process; compiling in this process");
                }
                Err(ChildError::Failed(CompileError::Mismatch { expected, found })) => {
                    tracing::warn!(
                        plugin = name,
                        expected,
                        found,
                        "the compiler process is another build; compiling in this process"
                    );
                }
                Err(ChildError::Failed(e @ CompileError::Store { .. })) => {
                    tracing::warn!(plugin = name, error = %e, "the compiler process cannot write the cache; compiling in this process");
                }
                Err(ChildError::Failed(e)) => return Err(e),
                Ok(obtained) => return Ok(obtained),
            }
        }
        let (me, name) = (self.clone(), name.to_owned());
        tokio::task::spawn_blocking(move || me.compile_here(&name, &bytes, digest))
            .await
            .map_err(joined)?
    }

    /// Compiles in a child that writes the artifact, signed, into the
    /// cache (or into a private temp folder without one), then maps it once
    /// its MAC verifies.
    async fn compile_in_child(
        &self,
        program: &std::path::Path,
        name: &str,
        bytes: &[u8],
        digest: &str,
        priority: Priority,
    ) -> Result<Obtained, ChildError> {
        let cache = self.cache.clone();
        let (out, scratch) = match &cache {
            Some(c) => (c.artifact(digest), None),
            None => {
                let dir = private_temp_dir().map_err(|e| CompileError::Store {
                    path: std::env::temp_dir(),
                    message: format!(
                        "cannot create a private folder for the compiler's output: {e}"
                    ),
                })?;
                (
                    dir.join(format!("{digest}-{}.cwasm", self.compat)),
                    Some(dir),
                )
            }
        };
        let request = ChildRequest {
            out: out.clone(),
            compat: self.compat.clone(),
            digest: digest.to_owned(),
            epoch_deadlines: self.options.epoch_deadlines,
            tier: self.tier,
            priority,
            parent: Some(std::process::id()),
        };
        let started = Instant::now();
        tracing::info!(
            plugin = name,
            bytes = bytes.len(),
            compiler = "child",
            tier = %self.tier,
            "compiling component"
        );
        let progress = self.progress(name, bytes.len());
        let compiled =
            compiler::compile_in_child(program, &request, &self.key, bytes, &self.shutdown).await;
        drop(progress);
        let compiled = compiled?;
        let (engine, key, compat, digest, tier) = (
            self.engine.clone(),
            self.key.clone(),
            self.compat.clone(),
            digest.to_owned(),
            self.tier,
        );
        let obtained = tokio::task::spawn_blocking(move || {
            let loaded = cache::load_signed(&engine, &key, &compat, &digest, &out).map_err(|e| {
                CompileError::Artifact {
                    path: out.clone(),
                    message: e.to_string(),
                }
            });
            match &cache {
                // Loaded: the file and its folder can go.
                None => {
                    if let Some(dir) = &scratch {
                        let _ = std::fs::remove_dir_all(dir);
                    }
                    loaded.map(|component| (component, None))
                }
                Some(c) => {
                    let pin = c.pin(&out);
                    c.evict(&[out.as_path()]);
                    loaded.map(|component| (component, Some(pin)))
                }
            }
            .map(|(component, pin)| Obtained {
                component,
                source: CompileSource::Compiled,
                tier,
                digest,
                pin,
            })
        })
        .await
        .map_err(joined)??;
        tracing::info!(
            plugin = name,
            elapsed_ms = started.elapsed().as_millis() as u64,
            compile_ms = compiled.elapsed_ms,
            artifact_bytes = compiled.artifact_bytes,
            compiler = "child",
            tier = %self.tier,
            "component compiled"
        );
        Ok(obtained)
    }

    /// Compiles on this thread and caches the artifact (a failed write
    /// only costs the next start a compile).
    fn compile_here(
        &self,
        name: &str,
        bytes: &[u8],
        digest: String,
    ) -> Result<Obtained, CompileError> {
        tracing::info!(
            plugin = name,
            bytes = bytes.len(),
            compiler = "in-process",
            tier = %self.tier,
            "compiling component"
        );
        let started = Instant::now();
        let progress = self.progress(name, bytes.len());
        let compiled = Component::new(&self.engine, bytes);
        drop(progress);
        let component = compiled.map_err(|e| CompileError::from_wasmtime(&e))?;
        tracing::info!(
            plugin = name,
            elapsed_ms = started.elapsed().as_millis() as u64,
            compiler = "in-process",
            tier = %self.tier,
            "component compiled"
        );
        let mut pin = None;
        if let Some(cache) = &self.cache {
            let stored = component
                .serialize()
                .map_err(|e| cache::CacheError::Serialize(format!("{e:#}")))
                .and_then(|bytes| cache.store(&digest, &bytes));
            match stored {
                Ok(path) => {
                    pin = Some(cache.pin(&path));
                    cache.evict(&[path.as_path()]);
                }
                Err(e) => {
                    tracing::warn!(plugin = name, error = %e, "cannot write compile cache entry")
                }
            }
        }
        Ok(Obtained {
            component,
            source: CompileSource::Compiled,
            tier: self.tier,
            digest,
            pin,
        })
    }

    fn progress(&self, name: &str, size: usize) -> Option<tokio_util::sync::DropGuard> {
        let name = name.to_owned();
        spawn_progress(COMPILE_PROGRESS, move |elapsed| {
            tracing::info!(
                plugin = %name,
                bytes = size,
                elapsed_s = elapsed.as_secs(),
                "still compiling component"
            );
        })
    }
}

/// Advances `engine`'s epoch every [`EPOCH_TICK`] on a thread of its own
/// (when deadlines are on) until the engine goes or the returned flag is
/// set.
fn spawn_ticker(engine: &Engine, epoch_deadlines: bool) -> Result<Arc<AtomicBool>, EngineError> {
    let stop = Arc::new(AtomicBool::new(false));
    if epoch_deadlines {
        let weak = engine.weak();
        let stop2 = stop.clone();
        std::thread::Builder::new()
            .name("kubewasm-epoch".into())
            .spawn(move || {
                while !stop2.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    match weak.upgrade() {
                        Some(engine) => engine.increment_epoch(),
                        None => break,
                    }
                }
            })
            .map_err(EngineError::Ticker)?;
    }
    Ok(stop)
}

/// A fresh folder only this user can enter, for a compile without a cache.
pub(crate) fn private_temp_dir() -> std::io::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!(
        "kubewasm-compile-{}-{:016x}",
        std::process::id(),
        fastrand::u64(..)
    ));
    let mut builder = std::fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(&dir)?;
    Ok(dir)
}

fn joined(e: tokio::task::JoinError) -> CompileError {
    CompileError::Process {
        message: format!("the compile task failed: {e}"),
    }
}

/// How often a slow compile reports that it is still going.
pub const COMPILE_PROGRESS: Duration = Duration::from_secs(5);

/// Calls `tick` with the elapsed time every `every` until the returned guard
/// is dropped (the ticker task is owned by the work it reports on). Without
/// a tokio runtime there is no ticker.
pub fn spawn_progress(
    every: Duration,
    tick: impl Fn(Duration) + Send + 'static,
) -> Option<tokio_util::sync::DropGuard> {
    let handle = tokio::runtime::Handle::try_current().ok()?;
    let cancel = tokio_util::sync::CancellationToken::new();
    let stop = cancel.clone();
    handle.spawn(async move {
        let start = tokio::time::Instant::now();
        let mut ticker = tokio::time::interval_at(start + every, every);
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                _ = ticker.tick() => tick(start.elapsed()),
            }
        }
    });
    Some(cancel.drop_guard())
}

#[cfg(test)]
mod tests;
