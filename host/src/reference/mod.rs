//! The book's reference pages, generated from the code that defines what
//! they describe, so they cannot drift: the command line from clap
//! ([`cli`], written by the binary's tests with its man pages), the
//! metrics from the registry ([`metrics`]), the reasons of a Plugin
//! object's conditions from their list ([`status_reasons`]) and the JSON
//! Schemas of the host config, the sidecar and the Plugin kinds from their
//! Rust types ([`schemas`]). Each page is committed; its test fails when the
//! committed page differs from what the code generates, and
//! `KUBEWASM_REGENERATE=1` on that test writes it instead:
//!
//! ```text
//! KUBEWASM_REGENERATE=1 cargo test -p kubewasm --lib reference
//! KUBEWASM_REGENERATE=1 cargo test -p kubewasm --bin kubewasm reference
//! ```

pub mod cli;
#[cfg(test)]
mod metrics;
pub mod schemas;
#[cfg(test)]
mod status_reasons;

use std::path::{Path, PathBuf};

/// The environment variable that makes the staleness tests write the
/// pages they check.
pub const REGENERATE: &str = "KUBEWASM_REGENERATE";

/// The repository's root (where the pages live, relative to it).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap_or(Path::new(env!("CARGO_MANIFEST_DIR")))
        .to_path_buf()
}

/// A generated page's first lines: its title, and the comment that names
/// what it is generated from (`source`) and the command (`how`, run with
/// [`REGENERATE`] set) that rewrites it.
pub fn page_head(title: &str, source: &str, how: &str) -> String {
    format!(
        "# {title}\n\n<!-- Generated from {source}: do not edit; `{REGENERATE}=1 {how}` rewrites it. -->\n\n"
    )
}

/// Compares the committed file at `relative` (to the repository's root)
/// with `generated`, or writes it when [`REGENERATE`] is set. The error
/// names the file and the command that regenerates it (`how`).
pub fn check_or_write(relative: &str, generated: &[u8], how: &str) -> Result<(), String> {
    let path = repo_root().join(relative);
    if std::env::var_os(REGENERATE).is_some() {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        return std::fs::write(&path, generated).map_err(|e| format!("{relative}: {e}"));
    }
    match std::fs::read(&path) {
        Ok(committed) if committed == generated => Ok(()),
        Ok(_) => Err(format!(
            "{relative} is stale (the code it is generated from changed): run `{REGENERATE}=1 {how}` and commit it"
        )),
        Err(e) => Err(format!(
            "{relative} cannot be read ({e}): run `{REGENERATE}=1 {how}` to write it"
        )),
    }
}

#[cfg(test)]
mod tests;
