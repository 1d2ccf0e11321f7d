//! The names the book uses exist in the code. The book's generated
//! references already hold the code's names, so each name a page uses is
//! looked up there:
//!
//! | name | where a page uses it | the code's list |
//! |---|---|---|
//! | a metric `kubewasm_...` | anywhere but program code blocks | reference/metrics.md |
//! | a long flag `--foo` | a `kubewasm` command: in shell and text blocks, in inline code | reference/cli.md (the subcommand's flags and the global ones) |
//! | a host config key | YAML blocks of config.md and those with `kind: HostConfig` | reference/schemas/host-config.schema.json |
//! | a Plugin field | `spec.x`/`status.x` in plugin-objects.md and in sections on Plugin objects; YAML blocks with `kind: Plugin` or `NamespacedPlugin`; the fields of its Status table | reference/schemas/plugin.schema.json and namespacedplugin.schema.json |
//! | a status reason | the `reason(s)` column of a table, `Ready=False/Reason` | reference/status-reasons.md |
//!
//! (paths under docs/book/src). Each unknown name is reported with its
//! page, line and where the code's list is.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::Value;

use crate::markdown::{self, Block, Page};

mod flags;
mod metrics;
mod reasons;
mod schema;
#[cfg(test)]
mod tests;

pub use flags::*;
pub use metrics::*;
pub use reasons::*;
pub use schema::*;

/// Where the references are, relative to the repository.
pub const METRICS: &str = "docs/book/src/reference/metrics.md";
pub const CLI: &str = "docs/book/src/reference/cli.md";
pub const HOST_CONFIG: &str = "docs/book/src/reference/schemas/host-config.schema.json";
pub const PLUGIN: &str = "docs/book/src/reference/schemas/plugin.schema.json";
pub const NAMESPACED_PLUGIN: &str = "docs/book/src/reference/schemas/namespacedplugin.schema.json";
pub const REASONS: &str = "docs/book/src/reference/status-reasons.md";
/// The command line's definition, for its hidden commands (the reference
/// lists only those a user runs).
pub const CLI_SOURCE: &str = "host/src/cli/mod.rs";

/// A name a page uses that the code's list lacks.
#[derive(Debug, PartialEq)]
pub struct Unknown {
    /// The page, relative to the repository.
    pub page: String,
    pub line: usize,
    pub name: String,
    /// What is wrong, naming the code's list.
    pub why: String,
}

impl std::fmt::Display for Unknown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}: {}: {}",
            self.page, self.line, self.name, self.why
        )
    }
}

/// The book's pages (every `.md` under docs/book/src), each with its text,
/// shown relative to the repository.
pub fn book_pages(root: &Path) -> Vec<(String, String)> {
    crate::docs::pages(root)
        .into_iter()
        .filter(|p| p.starts_with(root.join("docs/book/src")))
        .map(|p| {
            let text = read(&p);
            (shown(root, &p), text)
        })
        .collect()
}

fn shown(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .display()
        .to_string()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn json(root: &Path, rel: &str) -> Value {
    let text = read(&root.join(rel));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Code blocks of these languages hold a program's identifiers
/// (`kubewasm_sdk::...`, `import kubewasm_fake`), not metrics.
const PROGRAM_LANGS: [&str; 8] = ["rust", "python", "py", "js", "javascript", "go", "c", "wit"];

// ---------------------------------------------------------------- metrics
