//! Least-recently-used eviction of a folder of cache files, shared by the
//! compile cache and the OCI module cache: both keep files whose mtime is
//! bumped on use, write through `.NAME.tmp` files renamed into place, and
//! must stay under a byte cap without ever deleting what is in use.

use std::path::{Path, PathBuf};
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
