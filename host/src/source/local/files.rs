//! The local cluster's folder: finding and parsing manifests, rendering
//! them, and writing a file without ever losing a hand edit.
//!
//! # Writing over a file someone may be editing
//!
//! The cluster writes a file only over the content it last read from it
//! (or wrote to it), identified by a SHA-256 [`Fingerprint`] of its bytes;
//! the caller checks that before deciding what to write (and reads the
//! edit first when it differs). That leaves the window between the check
//! and the write, which [`replace`] closes instead of narrowing:
//!
//! - It writes the new text to a hidden temporary file beside the target
//!   and swaps the two names in one atomic `renameat2(RENAME_EXCHANGE)`.
//!   Whatever was at the path at that instant, the content that was
//!   checked or an edit saved since (by an editor's rename or in place),
//!   is now the temporary file: nothing was overwritten, and the cluster
//!   reads it to see which it was.
//! - If it is what was checked, the write is done and the temporary file
//!   removed. If not, it is an edit: it is swapped back to the path (the
//!   cluster's text leaves), and the caller reads the edit and decides the
//!   write again on top of it, as the API server answers a write over a
//!   stale resourceVersion. A second edit saved between the two swaps is
//!   newer than the first, so it is the one put back, and so on until a
//!   swap returns something superseded (bounded; past the bound the
//!   displaced file stays under its temporary name and the error names it).
//! - A new file is created with `RENAME_NOREPLACE` (a file someone created
//!   meanwhile is an edit), a file is removed by renaming it away and
//!   checking what was moved.
//!
//! Lock files would not do: editors ignore them. Comparing and then
//! renaming leaves a window in which a save is overwritten; it is the
//! fallback only where the exchange is not available (not Linux, or a
//! file system that refuses it), and that window is then a read and a
//! rename long. What no scheme can catch is a writer that holds the file
//! open and writes into it after the swap (an append to the displaced
//! file while it is being compared): editors truncate or replace files
//! when they save, which the swap does catch.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;
use sha2::{Digest, Sha256};

/// What a file held when the cluster read or wrote it.
pub(super) type Fingerprint = [u8; 32];

/// How many swaps [`replace`] makes against edits landing between them
/// before giving up (each needs a new save within microseconds).
const MAX_SWAPS: usize = 16;

pub(super) fn fingerprint(bytes: &[u8]) -> Fingerprint {
    Sha256::digest(bytes).into()
}

/// The file's fingerprint, `None` when there is no file.
pub(super) fn fingerprint_file(path: &Path) -> std::io::Result<Option<Fingerprint>> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(fingerprint(&bytes))),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Every manifest under `dir` (`.yaml`, `.yml`, `.json`), skipping hidden
/// files and folders (editors' swap files, the cluster's temporary ones).
pub(crate) fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let name = entry.file_name();
        if name.to_string_lossy().starts_with('.') {
            continue;
        }
        if path.is_dir() {
            walk(&path, out)?;
        } else if path
            .extension()
            .is_some_and(|e| e == "yaml" || e == "yml" || e == "json")
        {
            out.push(path);
        }
    }
    Ok(())
}

fn is_json(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "json")
}

/// Parses one manifest file into objects (multi-document YAML and `List`s).
pub fn parse_manifests(path: &Path, text: &str) -> Result<Vec<Value>, String> {
    let mut docs = Vec::new();
    if is_json(path) {
        docs.push(serde_json::from_str::<Value>(text).map_err(|e| e.to_string())?);
    } else {
        for doc in serde_yaml_ng::Deserializer::from_str(text) {
            let v = serde_json::to_value(
                <serde_yaml_ng::Value as serde::Deserialize>::deserialize(doc)
                    .map_err(|e| e.to_string())?,
            )
            .map_err(|e| e.to_string())?;
            if !v.is_null() {
                docs.push(v);
            }
        }
    }
    let mut out = Vec::new();
    for d in docs {
        if d["kind"].as_str().is_some_and(|k| k.ends_with("List")) && d["items"].is_array() {
            out.extend(d["items"].as_array().cloned().unwrap_or_default());
        } else {
            out.push(d);
        }
    }
    Ok(out)
}

/// The text of a manifest file holding `docs`: YAML documents, or for a
/// `.json` file one object (a `List` when there are several), so the file
/// still parses as what its name says.
pub(super) fn render(path: &Path, docs: &[&Value]) -> Result<String, String> {
    if is_json(path) {
        let value = match docs {
            [one] => (*one).clone(),
            many => serde_json::json!({"apiVersion": "v1", "kind": "List", "items": many}),
        };
        let mut text = serde_json::to_string_pretty(&value).map_err(|e| e.to_string())?;
        text.push('\n');
        return Ok(text);
    }
    let mut text = String::new();
    for (i, d) in docs.iter().enumerate() {
        if i > 0 {
            text.push_str("---\n");
        }
        text.push_str(&serde_yaml_ng::to_string(d).map_err(|e| e.to_string())?);
    }
    Ok(text)
}

/// What [`replace`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Swap {
    /// The path now holds the new text (or no file, for a removal).
    Written,
    /// The path did not hold the expected content: an edit, left in place
    /// (the newest one, when several raced); nothing was written.
    Edited,
}

/// A hidden name beside `path`, unique in this process, so a file left
/// by a crash is never reused (it may hold someone's edit).
fn temp_beside(path: &Path) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.{}-{n}.kubewasm", std::process::id()))
}

fn read_fingerprint(path: &Path) -> std::io::Result<Fingerprint> {
    std::fs::read(path).map(|b| fingerprint(&b))
}

/// Puts `text` at `path` (`None`: removes the file) if the path still
/// holds `expected` (`None`: no file); otherwise leaves the edit found
/// there and reports [`Swap::Edited`]. See the module's documentation.
pub(super) fn replace(
    path: &Path,
    expected: Option<Fingerprint>,
    text: Option<&[u8]>,
) -> std::io::Result<Swap> {
    match (expected, text) {
        (None, None) => Ok(Swap::Written),
        (None, Some(text)) => create(path, text),
        (Some(expected), None) => remove(path, expected),
        (Some(expected), Some(text)) => overwrite(path, expected, text),
    }
}

fn write_temp(path: &Path, text: &[u8]) -> std::io::Result<PathBuf> {
    use std::io::Write;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let tmp = temp_beside(path);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)?;
    f.write_all(text)?;
    Ok(tmp)
}

/// Removes `tmp`, which holds nothing anyone needs (our own text or a
/// superseded version).
fn discard(tmp: &Path) {
    if let Err(e) = std::fs::remove_file(tmp) {
        tracing::warn!(file = %tmp.display(), error = %e, "cannot remove a temporary file of the local cluster");
    }
}

fn create(path: &Path, text: &[u8]) -> std::io::Result<Swap> {
    let tmp = write_temp(path, text)?;
    match rename_noreplace(&tmp, path) {
        Ok(()) => Ok(Swap::Written),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {
            discard(&tmp);
            Ok(Swap::Edited)
        }
        Err(e) => {
            discard(&tmp);
            Err(e)
        }
    }
}

fn remove(path: &Path, expected: Fingerprint) -> std::io::Result<Swap> {
    let tmp = temp_beside(path);
    match std::fs::rename(path, &tmp) {
        Ok(()) => {}
        // Removed meanwhile: what this wanted.
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Swap::Written),
        Err(e) => return Err(e),
    }
    if read_fingerprint(&tmp)? == expected {
        discard(&tmp);
        return Ok(Swap::Written);
    }
    // An edit: back where it was, unless a newer file took the path.
    match rename_noreplace(&tmp, path) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::AlreadyExists => discard(&tmp),
        Err(e) => return Err(kept(e, &tmp)),
    }
    Ok(Swap::Edited)
}

fn kept(e: std::io::Error, tmp: &Path) -> std::io::Error {
    std::io::Error::new(
        e.kind(),
        format!("{e}; the version it displaced is kept as {}", tmp.display()),
    )
}

fn overwrite(path: &Path, expected: Fingerprint, text: &[u8]) -> std::io::Result<Swap> {
    let tmp = write_temp(path, text)?;
    match exchange(&tmp, path) {
        Ok(()) => {}
        // The file was removed by hand: that is the edit.
        Err(e) if e.kind() == ErrorKind::NotFound => {
            discard(&tmp);
            return Ok(Swap::Edited);
        }
        Err(e) if unsupported(&e) => return compare_then_rename(path, expected, &tmp),
        Err(e) => {
            discard(&tmp);
            return Err(e);
        }
    }
    let ours = fingerprint(text);
    let mut superseded = vec![expected, ours];
    let mut at_path = ours;
    for _ in 0..MAX_SWAPS {
        let displaced = read_fingerprint(&tmp).map_err(|e| kept(e, &tmp))?;
        if superseded.contains(&displaced) {
            discard(&tmp);
            return Ok(if at_path == ours {
                Swap::Written
            } else {
                Swap::Edited
            });
        }
        // An edit saved before the swap (or between two): it goes back
        // to the path, and whatever is there now comes out to be judged.
        superseded.push(at_path);
        at_path = displaced;
        match exchange(&tmp, path) {
            Ok(()) => {}
            // Removed meanwhile: newer than the edit in hand.
            Err(e) if e.kind() == ErrorKind::NotFound => {
                discard(&tmp);
                return Ok(Swap::Edited);
            }
            Err(e) => return Err(kept(e, &tmp)),
        }
    }
    Err(kept(
        std::io::Error::other(format!(
            "{} changed at each of {MAX_SWAPS} swaps",
            path.display()
        )),
        &tmp,
    ))
}

/// The fallback where names cannot be exchanged: the window between the
/// comparison and the rename is the only one left open.
fn compare_then_rename(path: &Path, expected: Fingerprint, tmp: &Path) -> std::io::Result<Swap> {
    if fingerprint_file(path)? != Some(expected) {
        discard(tmp);
        return Ok(Swap::Edited);
    }
    std::fs::rename(tmp, path)?;
    Ok(Swap::Written)
}

fn unsupported(e: &std::io::Error) -> bool {
    e.kind() == ErrorKind::Unsupported
        || matches!(
            e.raw_os_error(),
            Some(code) if code == rustix::io::Errno::INVAL.raw_os_error()
                || code == rustix::io::Errno::NOSYS.raw_os_error()
                || code == rustix::io::Errno::OPNOTSUPP.raw_os_error()
        )
}

#[cfg(target_os = "linux")]
fn exchange(a: &Path, b: &Path) -> std::io::Result<()> {
    use rustix::fs::{CWD, RenameFlags, renameat_with};
    renameat_with(CWD, a, CWD, b, RenameFlags::EXCHANGE).map_err(Into::into)
}

#[cfg(not(target_os = "linux"))]
fn exchange(_: &Path, _: &Path) -> std::io::Result<()> {
    Err(std::io::Error::from(ErrorKind::Unsupported))
}

#[cfg(target_os = "linux")]
fn rename_noreplace(from: &Path, to: &Path) -> std::io::Result<()> {
    use rustix::fs::{CWD, RenameFlags, renameat_with};
    match renameat_with(CWD, from, CWD, to, RenameFlags::NOREPLACE) {
        Ok(()) => Ok(()),
        Err(e) => {
            let e = std::io::Error::from(e);
            if unsupported(&e) {
                rename_if_absent(from, to)
            } else {
                Err(e)
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn rename_noreplace(from: &Path, to: &Path) -> std::io::Result<()> {
    rename_if_absent(from, to)
}

/// A hard link fails on an existing name, atomically, on every file
/// system that has links; the fallback of `RENAME_NOREPLACE`.
fn rename_if_absent(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::hard_link(from, to)?;
    std::fs::remove_file(from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(s: &str) -> Option<Fingerprint> {
        Some(fingerprint(s.as_bytes()))
    }

    fn hidden(dir: &Path) -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with('.'))
            .collect()
    }

    #[test]
    fn a_file_still_as_read_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("a.yaml");
        std::fs::write(&f, "old").unwrap();
        assert_eq!(replace(&f, fp("old"), Some(b"new")).unwrap(), Swap::Written);
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "new");
        assert!(hidden(dir.path()).is_empty());
    }

    #[test]
    fn an_edit_since_the_read_is_kept_and_reported() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("a.yaml");
        std::fs::write(&f, "edited by hand").unwrap();
        assert_eq!(replace(&f, fp("old"), Some(b"new")).unwrap(), Swap::Edited);
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "edited by hand");
        assert!(hidden(dir.path()).is_empty());
        // The same for a removal, and for a file created meanwhile.
        assert_eq!(replace(&f, fp("old"), None).unwrap(), Swap::Edited);
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "edited by hand");
        assert_eq!(replace(&f, None, Some(b"new")).unwrap(), Swap::Edited);
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "edited by hand");
        assert!(hidden(dir.path()).is_empty());
    }

    #[test]
    fn a_file_removed_by_hand_is_an_edit_that_stays() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("a.yaml");
        assert_eq!(replace(&f, fp("old"), Some(b"new")).unwrap(), Swap::Edited);
        assert!(!f.exists());
        assert_eq!(replace(&f, fp("old"), None).unwrap(), Swap::Written);
        assert!(hidden(dir.path()).is_empty());
    }

    #[test]
    fn new_files_are_created_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("ns/a.json");
        assert_eq!(replace(&f, None, Some(b"{}")).unwrap(), Swap::Written);
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "{}");
        assert_eq!(replace(&f, fp("{}"), None).unwrap(), Swap::Written);
        assert!(!f.exists());
        assert!(hidden(&dir.path().join("ns")).is_empty());
    }

    #[test]
    fn json_files_stay_json() {
        let a = serde_json::json!({"kind": "ConfigMap", "metadata": {"name": "a"}});
        let b = serde_json::json!({"kind": "ConfigMap", "metadata": {"name": "b"}});
        let p = Path::new("x.json");
        let one = parse_manifests(p, &render(p, &[&a]).unwrap()).unwrap();
        assert_eq!(one.len(), 1);
        assert_eq!(one[0], a);
        assert_eq!(
            parse_manifests(p, &render(p, &[&a, &b]).unwrap()).unwrap(),
            [a.clone(), b.clone()]
        );
        let y = Path::new("x.yaml");
        assert_eq!(
            parse_manifests(y, &render(y, &[&a, &b]).unwrap()).unwrap(),
            [a, b]
        );
    }
}
