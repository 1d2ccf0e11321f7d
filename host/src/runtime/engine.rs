//! The one shared wasmtime Engine, its epoch ticker, and the on-disk cache
//! of compiled components.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::{Config, Engine};

/// How often the epoch advances: the granularity of call deadlines.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("cannot configure the wasmtime engine: {0}")]
    Config(String),
    #[error("cannot start the epoch ticker thread: {0}")]
    Ticker(std::io::Error),
}

/// Engine settings.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Enforce per-call deadlines (costs a check on loop back-edges).
    pub epoch_deadlines: bool,
    /// Where compiled components are cached; `None` disables the cache.
    pub cache_dir: Option<PathBuf>,
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            epoch_deadlines: true,
            cache_dir: default_cache_dir(),
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

/// The shared engine plus the ticker that drives epoch deadlines.
#[derive(Clone)]
pub struct WasmEngine {
    engine: Engine,
    options: EngineOptions,
    compat: String,
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

impl WasmEngine {
    pub fn new(options: EngineOptions) -> Result<Self, EngineError> {
        let mut config = Config::new();
        config.wasm_component_model(true);
        config.epoch_interruption(options.epoch_deadlines);
        config.parallel_compilation(true);
        // No plugin uses the component model's async ABI; with concurrency
        // support on (wasmtime's default) every call pays for its
        // bookkeeping.
        config.concurrency_support(false);
        let engine = Engine::new(&config).map_err(|e| EngineError::Config(format!("{e:#}")))?;
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let compat = format!("{:016x}", hasher.finish());
        let stop = Arc::new(AtomicBool::new(false));
        if options.epoch_deadlines {
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
        Ok(Self {
            engine,
            options,
            compat,
            stop,
        })
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub fn epoch_deadlines(&self) -> bool {
        self.options.epoch_deadlines
    }

    /// Compiles `bytes` (plugin `name`), or loads the artifact a previous run
    /// cached for the same content and engine; also returns the content's
    /// SHA-256 (hex), the cache key and the plugin's version. Cache failures
    /// only cost a recompile. A compile logs its start (with the size), its end (with
    /// the time) and, when it is slow, progress every [`COMPILE_PROGRESS`].
    pub fn component(
        &self,
        name: &str,
        bytes: &[u8],
    ) -> Result<(Component, CompileSource, String), wasmtime::Error> {
        let digest = Sha256::digest(bytes);
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        let cached = self
            .options
            .cache_dir
            .as_ref()
            .map(|dir| dir.join(format!("{hex}-{}.cwasm", self.compat)));
        if let Some(path) = &cached
            && path.exists()
        {
            match load_cached(&self.engine, path) {
                Ok(c) => return Ok((c, CompileSource::Cached, hex)),
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "ignoring unusable compile cache entry")
                }
            }
        }
        tracing::info!(plugin = name, bytes = bytes.len(), "compiling component");
        let started = std::time::Instant::now();
        let progress = {
            let (name, size) = (name.to_owned(), bytes.len());
            spawn_progress(COMPILE_PROGRESS, move |elapsed| {
                tracing::info!(
                    plugin = %name,
                    bytes = size,
                    elapsed_s = elapsed.as_secs(),
                    "still compiling component"
                );
            })
        };
        let compiled = Component::new(&self.engine, bytes);
        drop(progress);
        let component = compiled?;
        tracing::info!(
            plugin = name,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "component compiled"
        );
        if let Some(path) = &cached
            && let Err(e) = store_cached(&component, path)
        {
            tracing::warn!(path = %path.display(), error = %e, "cannot write compile cache entry");
        }
        Ok((component, CompileSource::Compiled, hex))
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

#[allow(unsafe_code)]
fn load_cached(engine: &Engine, path: &Path) -> Result<Component, wasmtime::Error> {
    // SAFETY: the file was written by `store_cached` from `Component::serialize`
    // of this very engine configuration (its compatibility hash is in the file
    // name) into a directory only this host writes; wasmtime additionally
    // checks the header and engine settings and refuses mismatches.
    unsafe { Component::deserialize_file(engine, path) }
}

fn store_cached(component: &Component, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let bytes = component.serialize()?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    // Write then rename, so a crash never leaves a half-written artifact.
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn progress_ticks_until_its_guard_is_dropped() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let guard = spawn_progress(Duration::from_millis(20), move |elapsed| {
            let _ = tx.send(elapsed);
        })
        .unwrap();
        let first = rx.recv().await.unwrap();
        let second = rx.recv().await.unwrap();
        assert!(second > first && first >= Duration::from_millis(20));
        drop(guard);
        // The ticker ends (dropping its sender) once its owner is gone.
        let rest = tokio::time::timeout(Duration::from_secs(10), async {
            let mut n = 0;
            while rx.recv().await.is_some() {
                n += 1;
            }
            n
        })
        .await
        .unwrap();
        assert!(rest <= 1, "{rest} ticks after the guard was dropped");
    }
}
