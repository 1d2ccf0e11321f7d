//! The on-disk cache of compiled components: one artifact per plugin
//! content and engine configuration, named `<sha256>-<compat>.cwasm`, so
//! that `kubewasm compile`, a compiler child process and the host all
//! compute the same name before compiling. Artifacts are written
//! atomically (a hidden temp file, synced, renamed) and kept under a size
//! cap by evicting the least recently used (a load touches the file's
//! mtime).
//!
//! An artifact is native code, so it is loaded only when its header's MAC
//! verifies under the artifact key ([`super::artifact_key`]) for the
//! content digest and engine its name claims: the file is read once, the
//! MAC checked over exactly the bytes then handed to wasmtime (which copies
//! them into its own memory), so a file changed after the check changes
//! nothing. An artifact that is refused (unsigned, another key's, modified,
//! cut, another plugin's under this name) or does not load is deleted,
//! logged with the file and the reason, and the plugin compiled again.
//!
//! Not wasmtime's own cache (`Config::cache`): its entries are keyed
//! inside `Component::new` and stored compressed, so a hit still reads the
//! plugin and decompresses tens of MB, and another process (the compiler
//! child, `kubewasm compile` in CI) cannot write an entry the host finds
//! without compiling.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use wasmtime::Engine;
use wasmtime::component::Component;

use super::artifact_key::{ArtifactKey, Refusal};
use crate::lru_files::Budget;

/// The default size cap: a few builds' worth of the JavaScript and Python
/// plugins (30-60 MB each) plus every Rust one, and the modules pulled for
/// Plugin objects (12-18 MB for JavaScript and Python), which share it.
pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;

const EXTENSION: &str = "cwasm";

#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("cannot write compile cache entry {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot serialize the compiled component: {0}")]
    Serialize(String),
}

/// The cache folder, and the budget (cap and files in use) it shares with
/// the OCI module cache.
#[derive(Clone)]
pub struct CompileCache {
    dir: PathBuf,
    compat: String,
    /// Signs what this cache writes and verifies what it loads.
    key: ArtifactKey,
    /// The byte cap over this folder (and the pulled modules that join
    /// it), and the artifacts loaded by a running plugin version, which
    /// eviction skips.
    budget: Budget,
}

impl std::fmt::Debug for CompileCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompileCache")
            .field("dir", &self.dir)
            .field("budget", &self.budget)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

/// Keeps an artifact from eviction while held.
pub use crate::lru_files::Pin;

pub use crate::lru_files::Eviction;

impl CompileCache {
    /// `compat` is the engine's compatibility key (see
    /// [`super::engine::compat_key`]); `key` signs and verifies artifacts.
    pub fn new(dir: PathBuf, max_bytes: u64, compat: String, key: ArtifactKey) -> Self {
        let budget = Budget::new(max_bytes);
        budget.cover(&dir, is_artifact);
        Self {
            dir,
            compat,
            key,
            budget,
        }
    }

    /// The budget this cache evicts under: a module cache that joins it
    /// ([`crate::oci::ModuleCache::sharing`]) is trimmed in the same pass.
    pub fn budget(&self) -> &Budget {
        &self.budget
    }

    /// The same folder, cap, key and pins for another engine (another
    /// compile tier, see [`super::tier`]): its artifacts are named with its
    /// own key, and eviction spares what either engine's plugins use.
    pub fn for_engine(&self, compat: String) -> Self {
        Self {
            compat,
            ..self.clone()
        }
    }

    pub fn key(&self) -> &ArtifactKey {
        &self.key
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn max_bytes(&self) -> u64 {
        self.budget.max_bytes()
    }

    /// Where the artifact of content `digest` (SHA-256, hex) lives.
    pub fn artifact(&self, digest: &str) -> PathBuf {
        self.dir
            .join(format!("{digest}-{}.{EXTENSION}", self.compat))
    }

    /// Whether content `digest` has an artifact (it may still fail to load).
    pub fn contains(&self, digest: &str) -> bool {
        self.artifact(digest).is_file()
    }

    /// Loads the artifact of `digest`, if there is one that verifies and
    /// loads; touches it (its mtime is the eviction order). An artifact
    /// that exists but is refused (see [`Refused`]) or does not load
    /// (another engine's) is deleted, with a warning naming it and why, so
    /// that the caller's recompile replaces it.
    pub fn load(&self, engine: &Engine, digest: &str) -> Option<(Component, PathBuf)> {
        let path = self.artifact(digest);
        if !path.is_file() {
            return None;
        }
        match load_signed(engine, &self.key, &self.compat, digest, &path) {
            Ok(component) => {
                touch(&path);
                Some((component, path))
            }
            Err(e) => {
                let removed = std::fs::remove_file(&path).is_ok();
                e.log(&path, &self.key, removed);
                None
            }
        }
    }

    /// Writes `body` (a serialized component) as the artifact of `digest`,
    /// signed: to a hidden temp file, synced, then renamed, so no reader
    /// ever sees half of it.
    pub fn store(&self, digest: &str, body: &[u8]) -> Result<PathBuf, CacheError> {
        let path = self.artifact(digest);
        let header = self.key.header(digest, &self.compat, body);
        write_atomically(&path, &[&header, body]).map_err(|source| CacheError::Write {
            path: path.clone(),
            source,
        })?;
        Ok(path)
    }

    /// The engine key its artifacts are named and signed for.
    pub fn engine_key(&self) -> &str {
        &self.compat
    }

    /// Takes `artifact` (a precompiled layer pulled with a plugin's module:
    /// MAC header and serialized component) as the artifact of content
    /// `digest` once its MAC verifies under this cache's key for that
    /// digest and this engine; anything else is refused unwritten, so the
    /// plugin is compiled. The load maps it (verifying it again).
    pub fn adopt(&self, digest: &str, artifact: &[u8]) -> Result<PathBuf, AdoptError> {
        self.key
            .verify(digest, &self.compat, artifact)
            .map_err(AdoptError::Refused)?;
        let path = self.artifact(digest);
        write_atomically(&path, &[artifact]).map_err(|source| {
            AdoptError::Write(CacheError::Write {
                path: path.clone(),
                source,
            })
        })?;
        self.evict(&[path.as_path()]);
        Ok(path)
    }

    /// Keeps `path` from eviction until the returned guard drops.
    pub fn pin(&self, path: &Path) -> Pin {
        self.budget.pin(path)
    }

    /// Deletes the least recently used entries of the budget (artifacts,
    /// and pulled modules when a module cache shares it) until they are
    /// under its cap, never one in use or `fresh` (just written); also
    /// deletes temp files a crashed writer left. Errors only cost space
    /// (logged).
    pub fn evict(&self, fresh: &[&Path]) -> Eviction {
        self.budget.evict(fresh)
    }
}

/// Why a pulled precompiled artifact was not taken into the cache.
#[derive(Debug, thiserror::Error)]
pub enum AdoptError {
    /// Its MAC does not verify under this host's key: never written.
    #[error("refused: {0}")]
    Refused(Refusal),
    #[error(transparent)]
    Write(CacheError),
}

/// The files of the folder that are artifacts.
fn is_artifact(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == EXTENSION)
}

/// Why a signed artifact file was not loaded.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error("cannot read it: {0}")]
    Read(std::io::Error),
    /// Its MAC does not verify: never mapped.
    #[error("{0}")]
    Mac(Refusal),
    /// Verified, but wasmtime refused it (another engine's settings).
    #[error("{0:#}")]
    Load(wasmtime::Error),
}

impl Refused {
    fn log(&self, path: &Path, key: &ArtifactKey, removed: bool) {
        match self {
            Refused::Mac(reason) => tracing::warn!(
                path = %path.display(),
                reason = %reason,
                key = %key.source(),
                removed,
                "compile cache artifact refused: native code is mapped only when its MAC verifies; compiling the plugin's .wasm instead"
            ),
            other => tracing::warn!(
                path = %path.display(),
                error = %other,
                removed,
                "compile cache entry does not load; recompiling"
            ),
        }
    }
}

/// Reads the artifact at `path` once, verifies its MAC under `key` for
/// content `digest` and engine `compat`, and loads exactly the bytes
/// verified (wasmtime copies them into its own memory, so a file changed
/// after the check changes nothing).
pub(crate) fn load_signed(
    engine: &Engine,
    key: &ArtifactKey,
    compat: &str,
    digest: &str,
    path: &Path,
) -> Result<Component, Refused> {
    let bytes = std::fs::read(path).map_err(Refused::Read)?;
    let body = key.verify(digest, compat, &bytes).map_err(Refused::Mac)?;
    deserialize_verified(engine, body).map_err(Refused::Load)
}

#[allow(unsafe_code)]
fn deserialize_verified(engine: &Engine, body: &[u8]) -> Result<Component, wasmtime::Error> {
    // SAFETY: `body`'s MAC verified under the artifact key for the content
    // digest and engine key its file's name claims: it is
    // `Component::serialize` / `Engine::precompile_component` output that
    // this host, its compiler child or `kubewasm compile` wrote with the
    // same key. wasmtime checks the header and engine settings and refuses
    // mismatches.
    unsafe { Component::deserialize(engine, body) }
}

/// Sets `path`'s mtime to now: the LRU clock. A read-only cache (shipped
/// in an image) keeps its times.
fn touch(path: &Path) {
    if let Ok(f) = std::fs::File::options().append(true).open(path) {
        let _ = f.set_modified(SystemTime::now());
    }
}

static TMP_SEQ: AtomicU64 = AtomicU64::new(0);

/// Writes `parts` one after the other to `path` through a hidden temp
/// file in the same folder, synced before the rename.
pub(crate) fn write_atomically(path: &Path, parts: &[&[u8]]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // The PID and a random number: replicas that share one cache volume
    // (a PersistentVolumeClaim) each run as PID 1 of their container.
    let tmp = dir.join(format!(
        ".{name}.{}.{:x}.{}.tmp",
        std::process::id(),
        fastrand::u64(..),
        TMP_SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        for part in parts {
            f.write_all(part)?;
        }
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::artifact_key::{HEADER_BYTES, KeySource};

    fn key(byte: u8) -> ArtifactKey {
        ArtifactKey::from_bytes(&[byte; 32], KeySource::Ephemeral)
    }

    /// An engine and the serialized artifact of the smallest component.
    fn empty_component() -> (Engine, Vec<u8>) {
        let engine = Engine::new(&crate::runtime::engine::engine_config(
            false,
            crate::runtime::tier::Tier::Optimized,
        ))
        .unwrap();
        let body = Component::new(&engine, b"\0asm\x0d\0\x01\0")
            .unwrap()
            .serialize()
            .unwrap();
        (engine, body)
    }

    fn cache(dir: &Path, max_bytes: u64) -> CompileCache {
        CompileCache::new(dir.to_owned(), max_bytes, "c".into(), key(1))
    }

    /// An artifact file of `len` bytes (header included), `age_s` old.
    fn artifact(cache: &CompileCache, digest: &str, len: usize, age_s: u64) -> PathBuf {
        let path = cache.store(digest, &vec![0u8; len - HEADER_BYTES]).unwrap();
        let f = std::fs::File::options().append(true).open(&path).unwrap();
        f.set_modified(SystemTime::now() - std::time::Duration::from_secs(age_s))
            .unwrap();
        path
    }

    #[test]
    fn eviction_removes_the_least_recently_used_down_to_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let cache = cache(dir.path(), 2500);
        let oldest = artifact(&cache, "a", 1000, 300);
        let old = artifact(&cache, "b", 1000, 200);
        let recent = artifact(&cache, "c", 1000, 100);
        let fresh = artifact(&cache, "d", 1000, 0);
        let report = cache.evict(&[fresh.as_path()]);
        assert_eq!(
            report,
            Eviction {
                removed: 2,
                freed: 2000,
                kept: 2000
            }
        );
        assert!(!oldest.exists() && !old.exists());
        assert!(recent.exists() && fresh.exists());
    }

    #[test]
    fn eviction_skips_pinned_and_fresh_artifacts_even_over_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let cache = cache(dir.path(), 1500);
        let in_use = artifact(&cache, "a", 1000, 300);
        let unused = artifact(&cache, "b", 1000, 200);
        let fresh = artifact(&cache, "c", 1000, 0);
        let pin = cache.pin(&in_use);
        let report = cache.evict(&[fresh.as_path()]);
        assert_eq!((report.removed, report.kept), (1, 2000));
        assert!(in_use.exists() && !unused.exists() && fresh.exists());
        // Unpinned, it is the oldest and goes next.
        drop(pin);
        let report = cache.evict(&[fresh.as_path()]);
        assert_eq!((report.removed, report.kept), (1, 1000));
        assert!(!in_use.exists());
    }

    #[test]
    fn eviction_ignores_other_files_and_removes_stale_temp_files() {
        let dir = tempfile::tempdir().unwrap();
        let cache = cache(dir.path(), 0);
        std::fs::write(dir.path().join("README"), "x").unwrap();
        let stale = dir.path().join(".x.cwasm.1.0.tmp");
        let live = dir.path().join(".y.cwasm.1.1.tmp");
        for p in [&stale, &live] {
            std::fs::write(p, "x").unwrap();
        }
        std::fs::File::options()
            .append(true)
            .open(&stale)
            .unwrap()
            .set_modified(SystemTime::now() - 2 * crate::lru_files::STALE_TMP)
            .unwrap();
        cache.evict(&[]);
        assert!(dir.path().join("README").exists() && live.exists() && !stale.exists());
    }

    #[test]
    fn the_tiers_artifacts_are_named_apart_and_share_the_cap_and_the_pins() {
        let dir = tempfile::tempdir().unwrap();
        let optimized = cache(dir.path(), 1500);
        let fast = optimized.for_engine("f".into());
        let older = artifact(&optimized, "a", 1000, 200);
        let pinned = artifact(&fast, "a", 1000, 300);
        assert_eq!(
            (older.file_name().unwrap(), pinned.file_name().unwrap()),
            ("a-c.cwasm".as_ref(), "a-f.cwasm".as_ref())
        );
        assert!(fast.contains("a") && optimized.contains("a"));
        // Over the cap: eviction through either engine's cache spares what
        // the other's plugins use, and counts both engines' files.
        let _in_use = fast.pin(&pinned);
        let report = optimized.evict(&[]);
        assert_eq!((report.removed, report.kept), (1, 1000));
        assert!(pinned.exists() && !older.exists());
    }

    #[test]
    fn a_store_leaves_no_temp_file_and_replaces_the_old_artifact() {
        let dir = tempfile::tempdir().unwrap();
        let cache = cache(dir.path(), DEFAULT_MAX_BYTES);
        cache.store("a", b"one").unwrap();
        let path = cache.store("a", b"two").unwrap();
        let artifact = std::fs::read(&path).unwrap();
        assert_eq!(cache.key().verify("a", "c", &artifact), Ok(&b"two"[..]));
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, ["a-c.cwasm"]);
    }

    /// A real component's artifact: what the cache maps, and each way an
    /// artifact it did not sign is refused (deleted, nothing mapped).
    #[test]
    fn only_artifacts_whose_mac_verifies_are_mapped() {
        let (engine, body) = empty_component();
        let dir = tempfile::tempdir().unwrap();
        let cache = cache(dir.path(), DEFAULT_MAX_BYTES);
        let path = cache.store("d1", &body).unwrap();
        let good = std::fs::read(&path).unwrap();
        assert!(cache.load(&engine, "d1").is_some());
        let other = CompileCache::new(dir.path().to_owned(), DEFAULT_MAX_BYTES, "c".into(), key(2));
        let foreign = {
            let p = cache.store("d2", &body).unwrap();
            let bytes = std::fs::read(&p).unwrap();
            std::fs::remove_file(p).unwrap();
            bytes
        };
        let other_key = {
            let p = other.store("d1", &body).unwrap();
            std::fs::read(p).unwrap()
        };
        let mut tampered = good.clone();
        let last = tampered.len() - 1;
        tampered[last] ^= 0x80;
        for (what, bytes) in [
            ("tampered", tampered),
            ("truncated", good[..good.len() / 2].to_vec()),
            ("another plugin's under this name", foreign),
            ("signed with another key", other_key),
            ("unsigned", body.clone()),
        ] {
            std::fs::write(&path, &bytes).unwrap();
            assert!(cache.load(&engine, "d1").is_none(), "{what} was mapped");
            assert!(!path.exists(), "{what} was not deleted");
        }
        // What `load` refuses, `load_signed` says why.
        std::fs::write(&path, &body).unwrap();
        let e = load_signed(&engine, cache.key(), "c", "d1", &path).unwrap_err();
        assert!(matches!(e, Refused::Mac(Refusal::Unsigned)), "{e}");
        // Signed, but not an artifact wasmtime loads: refused by wasmtime
        // after the MAC passed, deleted too.
        let path = cache.store("d3", b"not an artifact").unwrap();
        let e = load_signed(&engine, cache.key(), "c", "d3", &path).unwrap_err();
        assert!(matches!(e, Refused::Load(_)), "{e}");
        assert!(cache.load(&engine, "d3").is_none() && !path.exists());
    }

    /// A pulled precompiled artifact enters the cache only when its MAC
    /// verifies for this module and engine under this host's key; then
    /// the load maps it instead of compiling.
    #[test]
    fn a_pulled_artifact_is_adopted_only_when_its_mac_verifies() {
        let (engine, body) = empty_component();
        let pushed = {
            let mut a = key(1).header("d1", "c", &body).to_vec();
            a.extend_from_slice(&body);
            a
        };
        let dir = tempfile::tempdir().unwrap();
        let cache = cache(dir.path(), DEFAULT_MAX_BYTES);
        // Another key's, another engine's, another module's, tampered:
        // refused, nothing written.
        let foreign =
            CompileCache::new(dir.path().to_owned(), DEFAULT_MAX_BYTES, "c".into(), key(2));
        let mut tampered = pushed.clone();
        let last = tampered.len() - 1;
        tampered[last] ^= 1;
        for (what, cache, digest, bytes) in [
            ("another key's", &foreign, "d1", &pushed),
            ("another module's", &cache, "d2", &pushed),
            ("tampered", &cache, "d1", &tampered),
            ("unsigned", &cache, "d1", &body),
        ] {
            let e = cache.adopt(digest, bytes).unwrap_err();
            assert!(matches!(e, AdoptError::Refused(_)), "{what}: {e}");
            assert!(!cache.contains(digest), "{what} was written");
        }
        let other_engine = cache.for_engine("x".into());
        assert!(matches!(
            other_engine.adopt("d1", &pushed),
            Err(AdoptError::Refused(Refusal::Mismatch))
        ));
        assert!(!other_engine.contains("d1"));
        // Ours: written, and mapped.
        let path = cache.adopt("d1", &pushed).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), pushed);
        assert!(cache.load(&engine, "d1").is_some());
    }
}
