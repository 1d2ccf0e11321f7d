//! Least-recently-used eviction of cache files under one byte budget,
//! shared by the compile cache and the OCI module cache: both keep files
//! whose mtime is bumped on use, write through `.NAME.tmp` files renamed
//! into place, and must stay under a byte cap without ever deleting what is
//! in use. The host gives both one [`Budget`] (the compile cache's cap):
//! one eviction pass over both folders, oldest first whatever the kind, so
//! the operator sizes one disk budget, not two.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// A temp file older than this was left by a crashed writer.
pub const STALE_TMP: Duration = Duration::from_secs(3600);

/// What an eviction did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Eviction {
    /// Files deleted.
    pub removed: usize,
    /// Their bytes.
    pub freed: u64,
    /// Bytes of files left (over the cap only when those kept on purpose
    /// exceed it).
    pub kept: u64,
}

/// A cache file: (last used, bytes, path), ordered oldest first.
pub type File = (SystemTime, u64, PathBuf);

/// The files directly in `dir` that `wanted` accepts; temp files
/// (`.NAME.tmp`) older than [`STALE_TMP`] are deleted on the way, younger
/// ones (a write in progress) skipped.
pub fn scan(dir: &Path, wanted: impl Fn(&Path) -> bool) -> Vec<File> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let now = SystemTime::now();
    let mut files = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(meta) = entry.metadata() else { continue };
        if !meta.is_file() {
            continue;
        }
        let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') && name.ends_with(".tmp") {
            if now.duration_since(modified).unwrap_or_default() > STALE_TMP {
                let _ = std::fs::remove_file(&path);
            }
            continue;
        }
        if wanted(&path) {
            files.push((modified, meta.len(), path));
        }
    }
    files
}

/// Deletes the least recently used of `files` until their total is at most
/// `max_bytes`, never one that `keep` names; `what` names the cache in the
/// warning a failed delete logs.
pub fn evict_oldest(
    mut files: Vec<File>,
    max_bytes: u64,
    keep: impl Fn(&Path) -> bool,
    what: &str,
) -> Eviction {
    let mut report = Eviction {
        kept: files.iter().map(|(_, len, _)| len).sum(),
        ..Eviction::default()
    };
    if report.kept <= max_bytes {
        return report;
    }
    // Oldest first; ties by path, so the order is stable.
    files.sort();
    for (_, len, path) in files {
        if report.kept <= max_bytes {
            break;
        }
        if keep(&path) {
            continue;
        }
        match std::fs::remove_file(&path) {
            Ok(()) => {
                report.kept -= len;
                report.removed += 1;
                report.freed += len;
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, cache = what, "cannot evict cache entry")
            }
        }
    }
    report
}

/// One folder a [`Budget`] covers: the files directly in it that `wanted`
/// accepts.
#[derive(Clone)]
struct Area {
    dir: PathBuf,
    wanted: fn(&Path) -> bool,
}

/// One byte cap over several cache folders and what is in use in them;
/// clones share it.
#[derive(Clone)]
pub struct Budget {
    inner: Arc<BudgetInner>,
}

struct BudgetInner {
    max_bytes: u64,
    areas: parking_lot::Mutex<Vec<Area>>,
    /// Files in use (with a count: two plugins may use the same file);
    /// eviction skips them.
    pinned: Arc<parking_lot::Mutex<HashMap<PathBuf, usize>>>,
}

impl std::fmt::Debug for Budget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let dirs: Vec<PathBuf> = self
            .inner
            .areas
            .lock()
            .iter()
            .map(|a| a.dir.clone())
            .collect();
        f.debug_struct("Budget")
            .field("max_bytes", &self.inner.max_bytes)
            .field("dirs", &dirs)
            .finish_non_exhaustive()
    }
}

/// Keeps a file from eviction while held.
#[derive(Debug)]
pub struct Pin {
    path: PathBuf,
    pinned: Arc<parking_lot::Mutex<HashMap<PathBuf, usize>>>,
}

impl Drop for Pin {
    fn drop(&mut self) {
        let mut pinned = self.pinned.lock();
        if let Some(n) = pinned.get_mut(&self.path) {
            *n -= 1;
            if *n == 0 {
                pinned.remove(&self.path);
            }
        }
    }
}

impl Budget {
    /// A budget of `max_bytes` over no folder yet.
    pub fn new(max_bytes: u64) -> Self {
        Self {
            inner: Arc::new(BudgetInner {
                max_bytes,
                areas: parking_lot::Mutex::new(Vec::new()),
                pinned: Arc::default(),
            }),
        }
    }

    pub fn max_bytes(&self) -> u64 {
        self.inner.max_bytes
    }

    /// Counts the files directly in `dir` that `wanted` accepts against
    /// this budget (once: a folder added again is not counted twice).
    pub fn cover(&self, dir: &Path, wanted: fn(&Path) -> bool) {
        let mut areas = self.inner.areas.lock();
        if !areas.iter().any(|a| a.dir == dir) {
            areas.push(Area {
                dir: dir.to_owned(),
                wanted,
            });
        }
    }

    /// Keeps `path` from eviction until the returned guard drops.
    pub fn pin(&self, path: &Path) -> Pin {
        *self.inner.pinned.lock().entry(path.to_owned()).or_insert(0) += 1;
        Pin {
            path: path.to_owned(),
            pinned: self.inner.pinned.clone(),
        }
    }

    /// Whether `path` is pinned.
    pub fn is_pinned(&self, path: &Path) -> bool {
        self.inner.pinned.lock().contains_key(path)
    }

    /// One eviction pass over every folder of the budget: the least
    /// recently used files of any folder go first, until all of them
    /// together are under the cap, never one pinned or `fresh` (just
    /// written); stale temp files go too. Errors only cost space (logged).
    pub fn evict(&self, fresh: &[&Path]) -> Eviction {
        let areas = self.inner.areas.lock().clone();
        let files = areas.iter().flat_map(|a| scan(&a.dir, a.wanted)).collect();
        let pinned = self.inner.pinned.lock().clone();
        let max_bytes = self.inner.max_bytes;
        let report = evict_oldest(
            files,
            max_bytes,
            |path| pinned.contains_key(path) || fresh.contains(&path),
            "cache",
        );
        let dirs: Vec<String> = areas.iter().map(|a| a.dir.display().to_string()).collect();
        if report.removed > 0 {
            tracing::info!(
                dirs = ?dirs,
                removed = report.removed,
                freed_bytes = report.freed,
                kept_bytes = report.kept,
                max_bytes,
                "cache over its cap: least recently used artifacts evicted (compiled plugins and pulled modules alike)"
            );
        }
        if report.kept > max_bytes {
            tracing::warn!(
                dirs = ?dirs,
                kept_bytes = report.kept,
                max_bytes,
                "cache stays over its cap: the entries in use are bigger than it (raise --compile-cache-max, compileCacheMax in the host config)"
            );
        }
        report
    }
}
