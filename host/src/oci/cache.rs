//! The on-disk cache of pulled modules, by digest: the module layer at
//! `<root>/oci/sha256/<hex>.wasm` and the manifest that names it at
//! `<root>/oci/manifests/sha256/<hex>.json`. Both are content-addressed, so
//! every read is checked against its name: a pull by digest is served with
//! no network (the host starts while the registry is down), and a file
//! that no longer hashes to its name is deleted and pulled again. Files are
//! written atomically (temp file, synced, renamed) and evicted least
//! recently used first (a read touches the mtime). In the host the cache
//! shares the compile cache's budget ([`ModuleCache::sharing`]): one cap,
//! one eviction pass over compiled artifacts and pulled modules together,
//! sparing the modules of plugins loading or serving ([`ModuleCache::pin`]).
//! Beside each manifest, a record of who was verified for it
//! ([`super::access`]): the cache serves a module only to them.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use super::Credentials;
use super::access::{self, Grant, IdentityKey};
use crate::lru_files::{Budget, Pin};
use crate::runtime::cache::write_atomically;

/// The cache folder (`<root>/oci`) and the budget it is evicted under.
#[derive(Debug, Clone)]
pub struct ModuleCache {
    dir: PathBuf,
    budget: Budget,
    /// Read (or made) on first use, then kept.
    identity_key: Arc<parking_lot::Mutex<Option<IdentityKey>>>,
}

pub use crate::lru_files::Eviction;

/// The hex of a `sha256:<64 hex>` digest; `None` for anything else, so a
/// digest can never name a path outside the cache.
pub(crate) fn sha256_hex(digest: &str) -> Option<&str> {
    let hex = digest.strip_prefix("sha256:")?;
    (hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))).then_some(hex)
}

impl ModuleCache {
    /// A cache of its own under `root` (modules go to its `oci/`
    /// subfolder) holding at most `max_bytes` (`kubewasm pull`, tests).
    pub fn new(root: &Path, max_bytes: u64) -> Self {
        Self::sharing(root, &Budget::new(max_bytes))
    }

    /// A cache under `root` evicted under `budget` together with whatever
    /// else it covers: the host passes the compile cache's folder and
    /// budget, so pulled modules and compiled artifacts are one cap.
    pub fn sharing(root: &Path, budget: &Budget) -> Self {
        let dir = root.join("oci");
        for sub in [
            "sha256",
            "manifests/sha256",
            "signatures/sha256",
            "access/sha256",
        ] {
            budget.cover(&dir.join(sub), |_| true);
        }
        Self {
            dir,
            budget: budget.clone(),
            identity_key: Arc::default(),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn max_bytes(&self) -> u64 {
        self.budget.max_bytes()
    }

    /// Keeps a pulled module from eviction while the guards are held: its
    /// layer, the manifest (`digest`) that names it, the signature that
    /// verified it and the record of who may be served it, all of which a
    /// pull from the cache needs (the registry may be down when the host
    /// restarts).
    pub fn pin(&self, digest: &str, layer_digest: &str) -> Vec<Pin> {
        [
            self.module_path(layer_digest),
            self.manifest_path(digest),
            self.signature_path(digest),
            self.access_path(digest),
        ]
        .into_iter()
        .flatten()
        .map(|path| self.budget.pin(&path))
        .collect()
    }

    /// Where the module layer with `digest` is kept.
    pub fn module_path(&self, digest: &str) -> Option<PathBuf> {
        sha256_hex(digest).map(|h| self.dir.join("sha256").join(format!("{h}.wasm")))
    }

    /// The signature that verified the module of manifest `digest` (a
    /// [`super::signature::Signature`] as JSON): not content-addressed, but
    /// self-checking, since it is verified again on every cached pull.
    fn signature_path(&self, digest: &str) -> Option<PathBuf> {
        sha256_hex(digest).map(|h| self.dir.join("signatures/sha256").join(format!("{h}.json")))
    }

    /// The signature record of manifest `digest`, if cached.
    pub fn signature(&self, digest: &str) -> Option<Vec<u8>> {
        let path = self.signature_path(digest)?;
        let bytes = std::fs::read(&path).ok()?;
        touch(&path);
        Some(bytes)
    }

    /// Stores the signature that verified manifest `digest`'s module.
    pub fn put_signature(&self, digest: &str, bytes: &[u8]) -> std::io::Result<PathBuf> {
        let path = self
            .signature_path(digest)
            .ok_or_else(|| not_sha256(digest))?;
        write_atomically(&path, &[bytes])?;
        Ok(path)
    }

    /// The record of who was verified for manifest `digest`.
    fn access_path(&self, digest: &str) -> Option<PathBuf> {
        sha256_hex(digest).map(|h| self.dir.join("access/sha256").join(format!("{h}.json")))
    }

    /// The identity [`Grant`]s name `credentials` by; `None` when the
    /// cache's identity key can neither be read nor made (then nothing is
    /// served from the cache and nothing recorded: every pull asks its
    /// registry).
    pub(crate) fn identity(&self, credentials: &Credentials) -> Option<String> {
        if *credentials == Credentials::Anonymous {
            return Some(IdentityKey::anonymous());
        }
        let mut slot = self.identity_key.lock();
        if slot.is_none() {
            let path = self.dir.join("identity.key");
            match IdentityKey::load_or_create(&path) {
                Ok(key) => *slot = Some(key),
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "cannot read or make the OCI cache's identity key; modules pulled with credentials are not served from the cache");
                }
            }
        }
        slot.map(|key| key.identity(credentials))
    }

    /// Whether `grant` is recorded for manifest `digest`.
    pub(crate) fn granted(&self, digest: &str, grant: &Grant) -> bool {
        let Some(path) = self.access_path(digest) else {
            return false;
        };
        let found = access::read(&path).contains(grant);
        if found {
            touch(&path);
        }
        found
    }

    /// Records `grant` for manifest `digest` (its registry served the
    /// manifest and the module to those credentials).
    pub(crate) fn put_grant(&self, digest: &str, grant: Grant) -> std::io::Result<PathBuf> {
        let path = self.access_path(digest).ok_or_else(|| not_sha256(digest))?;
        let record = access::with(access::read(&path), grant);
        write_atomically(&path, &[&record])?;
        Ok(path)
    }

    fn manifest_path(&self, digest: &str) -> Option<PathBuf> {
        sha256_hex(digest).map(|h| self.dir.join("manifests/sha256").join(format!("{h}.json")))
    }

    /// The module layer with `digest`, if cached and intact.
    pub fn module(&self, digest: &str) -> Option<Vec<u8>> {
        self.read_verified(self.module_path(digest)?, digest)
    }

    /// The manifest with `digest`, if cached and intact.
    pub fn manifest(&self, digest: &str) -> Option<Vec<u8>> {
        self.read_verified(self.manifest_path(digest)?, digest)
    }

    /// Stores a module layer (its digest checked by the caller); returns its path.
    pub fn put_module(&self, digest: &str, bytes: &[u8]) -> std::io::Result<PathBuf> {
        let path = self.module_path(digest).ok_or_else(|| not_sha256(digest))?;
        write_atomically(&path, &[bytes])?;
        Ok(path)
    }

    /// Stores a manifest (its digest checked by the caller).
    pub fn put_manifest(&self, digest: &str, bytes: &[u8]) -> std::io::Result<PathBuf> {
        let path = self
            .manifest_path(digest)
            .ok_or_else(|| not_sha256(digest))?;
        write_atomically(&path, &[bytes])?;
        Ok(path)
    }

    fn read_verified(&self, path: PathBuf, digest: &str) -> Option<Vec<u8>> {
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot read OCI cache entry; pulling again");
                return None;
            }
        };
        let actual = super::sha256_digest(&bytes);
        if actual != digest {
            let removed = std::fs::remove_file(&path).is_ok();
            tracing::warn!(
                path = %path.display(),
                expected = %digest,
                actual = %actual,
                removed,
                "OCI cache entry does not match its digest (changed on disk); deleted, pulling again"
            );
            return None;
        }
        touch(&path);
        Some(bytes)
    }

    /// Deletes the least recently used entries of the budget (modules,
    /// manifests and signatures, and compiled artifacts when it is the
    /// compile cache's) until they are under its cap, never one pinned or
    /// `fresh` (just written or about to be served); also deletes stale
    /// temp files. Errors only cost space (logged).
    pub fn evict(&self, fresh: &[&Path]) -> Eviction {
        self.budget.evict(fresh)
    }
}

fn not_sha256(digest: &str) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!("{digest:?} is not a sha256 digest"),
    )
}

/// Sets `path`'s mtime to now: the LRU clock. A read-only cache keeps its times.
fn touch(path: &Path) {
    if let Ok(f) = std::fs::File::options().append(true).open(path) {
        let _ = f.set_modified(SystemTime::now());
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::oci::sha256_digest;

    fn age(path: &Path, secs: u64) {
        let f = std::fs::File::options().append(true).open(path).unwrap();
        f.set_modified(SystemTime::now() - std::time::Duration::from_secs(secs))
            .unwrap();
    }

    #[test]
    fn entries_read_back_only_while_they_match_their_digest() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ModuleCache::new(dir.path(), 1 << 20);
        let bytes = b"\0asm module".to_vec();
        let digest = sha256_digest(&bytes);
        let path = cache.put_module(&digest, &bytes).unwrap();
        assert!(path.ends_with(format!("oci/sha256/{}.wasm", sha256_hex(&digest).unwrap())));
        assert_eq!(cache.module(&digest).unwrap(), bytes);

        std::fs::write(&path, b"tampered").unwrap();
        assert_eq!(cache.module(&digest), None);
        assert!(!path.exists(), "a corrupt entry is deleted");
    }

    #[test]
    fn digests_that_are_not_sha256_hex_name_no_path() {
        let cache = ModuleCache::new(Path::new("/c"), 1);
        assert!(cache.module_path("sha256:../../etc/passwd").is_none());
        assert!(
            cache
                .module_path(&format!("sha512:{}", "a".repeat(64)))
                .is_none()
        );
        assert!(
            cache
                .module_path(&format!("sha256:{}", "A".repeat(64)))
                .is_none()
        );
        assert!(
            cache
                .module_path(&format!("sha256:{}", "a".repeat(64)))
                .is_some()
        );
    }

    #[test]
    fn eviction_removes_the_least_recently_used_down_to_the_cap_sparing_fresh() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ModuleCache::new(dir.path(), 250);
        let put = |fill: u8, secs: u64| {
            let bytes = vec![fill; 100];
            let digest = sha256_digest(&bytes);
            let path = cache.put_module(&digest, &bytes).unwrap();
            age(&path, secs);
            (digest, path)
        };
        let (oldest, oldest_path) = put(1, 300);
        let (middle, _) = put(2, 200);
        let (newest, _) = put(3, 100);
        // Reading the middle one makes it the most recently used.
        assert!(cache.module(&middle).is_some());

        let report = cache.evict(&[]);
        assert_eq!(
            report,
            Eviction {
                removed: 1,
                freed: 100,
                kept: 200
            }
        );
        assert!(cache.module(&oldest).is_none());
        assert!(cache.module(&middle).is_some() && cache.module(&newest).is_some());

        // A fresh entry is kept even when it is the oldest.
        let (_, again) = put(1, 1000);
        assert_eq!(again, oldest_path);
        let report = cache.evict(&[again.as_path()]);
        assert_eq!(report.removed, 1);
        assert!(again.exists());
        assert_eq!(report.kept, 200);
    }

    /// The host's one budget: compiled artifacts and pulled modules are
    /// evicted in one pass under the compile cache's cap, the least
    /// recently used of either kind first, never an artifact a plugin has
    /// loaded nor a module whose plugin loads or serves.
    #[test]
    fn modules_and_artifacts_share_one_cap_oldest_first_sparing_what_is_in_use() {
        use crate::runtime::artifact_key::{ArtifactKey, HEADER_BYTES, KeySource};
        use crate::runtime::cache::CompileCache;
        let dir = tempfile::tempdir().unwrap();
        let key = ArtifactKey::from_bytes(&[1; 32], KeySource::Ephemeral);
        let compiled = CompileCache::new(dir.path().to_owned(), 300, "c".into(), key);
        let modules = ModuleCache::sharing(dir.path(), compiled.budget());
        assert_eq!(modules.max_bytes(), 300);
        let artifact = |digest: &str, secs: u64| {
            let path = compiled.store(digest, &[0u8; 100 - HEADER_BYTES]).unwrap();
            age(&path, secs);
            path
        };
        let module = |fill: u8, secs: u64| {
            let bytes = vec![fill; 100];
            let digest = sha256_digest(&bytes);
            let path = modules.put_module(&digest, &bytes).unwrap();
            age(&path, secs);
            (digest, path)
        };
        // Oldest first: a loaded artifact, a serving module, then unused
        // entries of both kinds, interleaved.
        let loaded = artifact("a", 600);
        let (serving, serving_path) = module(1, 500);
        let (_, old_module) = module(2, 400);
        let old_artifact = artifact("b", 300);
        let (_, newer_module) = module(3, 200);
        let newest = artifact("c", 100);
        let loaded_pin = compiled.pin(&loaded);
        let manifest = format!("sha256:{}", "e".repeat(64));
        let serving_pins = modules.pin(&manifest, &serving);
        assert_eq!(
            serving_pins.len(),
            4,
            "layer, manifest, signature and access record"
        );

        // Over the cap by 300 bytes: the compile cache's eviction (after a
        // compile) trims modules too.
        let report = compiled.evict(&[]);
        assert_eq!(
            report,
            Eviction {
                removed: 3,
                freed: 300,
                kept: 300
            },
            "600 bytes of six entries, two in use, down to the 300-byte cap"
        );
        for (gone, what) in [
            (&old_module, "the oldest unused entry (a module)"),
            (&old_artifact, "the next oldest (an artifact)"),
            (&newer_module, "the next (a module)"),
        ] {
            assert!(!gone.exists(), "{what} was kept");
        }
        for (kept, what) in [
            (&loaded, "the loaded artifact"),
            (&serving_path, "the serving module"),
            (&newest, "the newest artifact"),
        ] {
            assert!(kept.exists(), "{what} was evicted");
        }

        // Pins released, a module pulled: the module cache's eviction (after
        // a pull) takes the oldest entry, an artifact.
        drop(loaded_pin);
        drop(serving_pins);
        let (_, pulled) = module(4, 0);
        let report = modules.evict(&[pulled.as_path()]);
        assert_eq!((report.removed, report.kept), (1, 300));
        assert!(!loaded.exists(), "the unpinned artifact, oldest, goes");
        assert!(serving_path.exists() && newest.exists() && pulled.exists());
    }

    #[test]
    fn under_the_cap_nothing_is_evicted_and_stale_temp_files_go() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ModuleCache::new(dir.path(), 1 << 20);
        let bytes = vec![7u8; 10];
        cache.put_module(&sha256_digest(&bytes), &bytes).unwrap();
        let tmp = cache.dir().join("sha256/.x.wasm.1.1.tmp");
        std::fs::write(&tmp, b"partial").unwrap();
        age(&tmp, 7200);
        let report = cache.evict(&[]);
        assert_eq!(
            report,
            Eviction {
                removed: 0,
                freed: 0,
                kept: 10
            }
        );
        assert!(!tmp.exists());
    }
}
