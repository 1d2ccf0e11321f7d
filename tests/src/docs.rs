//! The relative links of the book (docs/book/src) and the README: every
//! link to a file must name one that exists, every `#anchor` a heading of
//! its page, and every `{{#include FILE:ANCHOR}}` a file holding that
//! anchor. Anchors follow mdBook's rule (lowercased; alphanumerics, `_` and
//! `-` kept, whitespace to `-`, the rest dropped; a repeated heading gets
//! `-1`, `-2`...), which is also GitHub's for these headings, so one check
//! serves the rendered book and the files browsed on a forge; but for a
//! heading with `--` or quotes outside code, which mdBook 0.5's smart
//! punctuation turns into a dash or curly quotes before the id is made: a
//! link to such a heading passes here and fails in the rendered book
//! (crate::book checks that, from mdBook's own HTML).
//!
//! A book page never links a file of the repository outside the book by a
//! relative path: it resolves on the forge but not in the book served on its
//! own. It links the file on the forge instead, `URL/blob/main/PATH` (a
//! folder: `URL/tree/main/PATH`, URL being book.toml's
//! `git-repository-url`), and such a link must name a file (or folder) of
//! the working tree.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// The markdown files checked: README.md and every page below
/// docs/book/src (the book is the home of the documentation; the rendered
/// book's links are checked by crate::book).
pub fn pages(root: &Path) -> Vec<PathBuf> {
    let mut pages = vec![root.join("README.md")];
    walk(&root.join("docs/book/src"), &mut pages);
    pages
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for path in paths {
        if path.is_dir() {
            walk(&path, out);
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
}

/// Every broken link of `pages`, one line each: the page, the line, the
/// target and what is wrong.
pub fn broken_links(root: &Path, pages: &[PathBuf]) -> Vec<String> {
    let repository = Repository::of(root);
    let book = root.join("docs/book/src");
    let mut broken = Vec::new();
    for page in pages {
        let Ok(text) = std::fs::read_to_string(page) else {
            broken.push(format!("{}: cannot be read", page.display()));
            continue;
        };
        let shown = page
            .strip_prefix(root)
            .unwrap_or(page)
            .display()
            .to_string();
        let dir = page.parent().unwrap_or(root);
        for (number, line) in prose_lines(&text) {
            for target in includes(line).into_iter().chain(links(line)) {
                let checked = match &target {
                    Target::Link(link) => repository.check(root, link).or_else(|| {
                        page.starts_with(&book)
                            .then(|| repository.leaving(root, &book, dir, link).map(Err))
                            .flatten()
                    }),
                    Target::Include { .. } => None,
                };
                if let Err(why) = checked.unwrap_or_else(|| check(page, dir, &target)) {
                    broken.push(format!("{shown}:{number}: {target}: {why}"));
                }
            }
        }
    }
    broken
}

/// This repository on its forge: book.toml's `git-repository-url`.
pub struct Repository {
    /// `https://github.com/OWNER/REPO`, no trailing `/`.
    pub url: String,
}

impl Repository {
    /// Reads docs/book/book.toml of the repository at `root`.
    pub fn of(root: &Path) -> Self {
        let path = root.join("docs/book/book.toml");
        let toml =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let url = toml
            .lines()
            .find_map(|l| l.trim().strip_prefix("git-repository-url"))
            .and_then(|rest| rest.split('"').nth(1))
            .unwrap_or_else(|| panic!("{} has no git-repository-url", path.display()))
            .trim_end_matches('/')
            .to_owned();
        Self { url }
    }

    /// `OWNER/REPO`.
    pub fn slug(&self) -> &str {
        let rest = self.url.split("://").nth(1).unwrap_or(&self.url);
        rest.split_once('/').map_or(rest, |(_, slug)| slug)
    }

    /// The link to `rel` (a path of the repository) on the forge: `tree`
    /// for a folder, `blob` for a file.
    pub fn link(&self, root: &Path, rel: &Path) -> String {
        let kind = if root.join(rel).is_dir() {
            "tree"
        } else {
            "blob"
        };
        let path = rel.to_string_lossy();
        let path = path.trim_end_matches('/');
        match path.is_empty() {
            true => self.url.clone(),
            false => format!("{}/{kind}/main/{path}", self.url),
        }
    }

    /// For a link to a file of this repository on the forge
    /// (`URL/blob/main/PATH`, `URL/tree/main/PATH`), whether the working
    /// tree has it (a file for `blob`, a folder for `tree`); `None` for any
    /// other link.
    pub fn check(&self, root: &Path, link: &str) -> Option<Result<(), String>> {
        let rest = link.strip_prefix(&self.url)?.strip_prefix('/')?;
        let rest = rest.split(['#', '?']).next().unwrap_or(rest);
        let (kind, path) = rest.split_once("/main/").or_else(|| {
            // `URL/tree/main` alone: the root.
            rest.strip_suffix("/main").map(|kind| (kind, ""))
        })?;
        let path = path.trim_end_matches('/');
        if path.split('/').any(|p| p == ".." || p == ".") {
            return Some(Err(format!("{link}: a path with `..` or `.`")));
        }
        let file = root.join(path);
        Some(match kind {
            "blob" if file.is_file() => Ok(()),
            "tree" if file.is_dir() => Ok(()),
            "blob" | "tree" if file.exists() => Err(format!(
                "{path} is a {}: link {}",
                if file.is_dir() { "folder" } else { "file" },
                self.link(root, Path::new(path))
            )),
            "blob" | "tree" => Err(format!("no such file in the repository ({path})")),
            _ => Err(format!("{link}: neither /blob/main/ nor /tree/main/")),
        })
    }

    /// For a relative link of a book page (in `dir`, under `book`): what
    /// is wrong when it leaves the book (a reader of the book served on its
    /// own has no repository around it), saying which link to write
    /// instead; `None` when it stays in it (the usual checks follow).
    pub fn leaving(&self, root: &Path, book: &Path, dir: &Path, link: &str) -> Option<String> {
        if link.contains("://") || link.starts_with("mailto:") || link.starts_with('#') {
            return None;
        }
        let file = link.split(['#', '?']).next().unwrap_or(link);
        let target = lexical(&dir.join(file));
        if target.starts_with(book) {
            return None;
        }
        let rel = target.strip_prefix(root).unwrap_or(&target);
        let missing = match target.exists() {
            true => "",
            false => " (it names no file of the repository either)",
        };
        Some(format!(
            "leaves the book (the book is served on its own too): link the repository's {} by its URL, {}{missing}",
            if rel.as_os_str().is_empty() {
                "root".to_owned()
            } else {
                rel.display().to_string()
            },
            self.link(root, rel)
        ))
    }
}

/// `path` without its `.` and `..`, as written (no file system access).
pub fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

fn check(page: &Path, dir: &Path, target: &Target) -> Result<(), String> {
    match target {
        Target::Include { file, anchor } => {
            let path = dir.join(file);
            let text = std::fs::read_to_string(&path)
                .map_err(|e| format!("the included file {} cannot be read: {e}", path.display()))?;
            match anchor {
                Some(anchor) if !text.contains(&format!("ANCHOR: {anchor}")) => Err(format!(
                    "{} has no `ANCHOR: {anchor}` (mdBook's include anchors)",
                    path.display()
                )),
                _ => Ok(()),
            }
        }
        Target::Link(link) => {
            if link.contains("://") || link.starts_with("mailto:") {
                return Ok(());
            }
            let (file, anchor) = match link.split_once('#') {
                Some((file, anchor)) => (file, Some(anchor)),
                None => (link.as_str(), None),
            };
            let path = if file.is_empty() {
                page.to_path_buf()
            } else {
                dir.join(file)
            };
            if !path.exists() {
                return Err(format!("no such file ({})", path.display()));
            }
            let Some(anchor) = anchor else {
                return Ok(());
            };
            if path.extension().is_none_or(|e| e != "md") {
                return Ok(());
            }
            let ids = heading_ids(&path);
            if ids.contains(anchor) {
                Ok(())
            } else {
                Err(format!(
                    "{} has no heading with the anchor #{anchor}",
                    path.display()
                ))
            }
        }
    }
}

#[derive(Debug)]
enum Target {
    Link(String),
    Include {
        file: String,
        anchor: Option<String>,
    },
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Link(link) => write!(f, "({link})"),
            Target::Include { file, anchor } => match anchor {
                Some(anchor) => write!(f, "{{{{#include {file}:{anchor}}}}}"),
                None => write!(f, "{{{{#include {file}}}}}"),
            },
        }
    }
}

/// The lines outside fenced code blocks, numbered from 1.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fence: Option<&str> = None;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let marker = ["```", "~~~"].into_iter().find(|m| trimmed.starts_with(m));
        match (fence, marker) {
            (None, Some(m)) => fence = Some(m),
            (Some(open), Some(m)) if open == m => fence = None,
            (None, None) => out.push((i + 1, line)),
            _ => {}
        }
    }
    out
}

/// A line without its inline code spans (a link in backticks is an example).
fn without_code(line: &str) -> String {
    let mut out = String::new();
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
        } else if !in_code {
            out.push(c);
        }
    }
    out
}

fn links(line: &str) -> Vec<Target> {
    let line = without_code(line);
    let mut out = Vec::new();
    let mut rest = line.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let end = after.find(')').unwrap_or(after.len());
        // `[text](target "title")`: the target ends at the first space.
        let target = after[..end].split_whitespace().next().unwrap_or("");
        let target = target.trim_start_matches('<').trim_end_matches('>');
        if !target.is_empty() {
            out.push(Target::Link(target.to_string()));
        }
        rest = &after[end..];
    }
    out
}

fn includes(line: &str) -> Vec<Target> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("{{#include ") {
        let after = &rest[at + "{{#include ".len()..];
        let end = after.find("}}").unwrap_or(after.len());
        let spec = after[..end].trim();
        let mut parts = spec.splitn(2, ':');
        let file = parts.next().unwrap_or("").to_string();
        // A named anchor; line ranges (`:10:20`) are not checked.
        let anchor = parts
            .next()
            .filter(|a| !a.is_empty() && !a.starts_with(|c: char| c.is_ascii_digit()))
            .map(str::to_string);
        out.push(Target::Include { file, anchor });
        rest = &after[end..];
    }
    out
}

/// The ids mdBook gives the headings of a page, includes expanded.
pub fn heading_ids(page: &Path) -> HashSet<String> {
    let mut used = HashSet::new();
    let text = expanded(page, 0);
    for (_, line) in prose_lines(&text) {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let id = anchor(&line[hashes..]);
        let mut unique = id.clone();
        let mut counter = 1;
        while !used.insert(unique.clone()) {
            unique = format!("{id}-{counter}");
            counter += 1;
        }
    }
    used
}

/// The page's text with its `{{#include}}`s replaced by what they include.
fn expanded(page: &Path, depth: usize) -> String {
    let Ok(text) = std::fs::read_to_string(page) else {
        return String::new();
    };
    if depth > 4 || !text.contains("{{#include ") {
        return text;
    }
    let dir = page.parent().unwrap_or(Path::new("."));
    let mut out = String::new();
    for line in text.lines() {
        let found = includes(line);
        match found.first() {
            Some(Target::Include { file, anchor }) => {
                let included = expanded(&dir.join(file), depth + 1);
                out.push_str(&between_anchors(&included, anchor.as_deref()));
            }
            _ => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

fn between_anchors(text: &str, anchor: Option<&str>) -> String {
    let Some(anchor) = anchor else {
        return text.to_string();
    };
    let start = format!("ANCHOR: {anchor}");
    let end = format!("ANCHOR_END: {anchor}");
    text.lines()
        .skip_while(|l| !l.contains(&start))
        .skip(1)
        .take_while(|l| !l.contains(&end))
        .collect::<Vec<_>>()
        .join("\n")
}

/// mdBook's id of a heading's text (`id_from_content`), after the markdown
/// is rendered: code spans, emphasis and link targets leave only text.
pub fn anchor(heading: &str) -> String {
    let mut text = String::new();
    let mut rest = heading;
    // `[text](target)` renders as `text`.
    while let Some(open) = rest.find('[') {
        text.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after.find("](") {
            Some(close) => {
                text.push_str(&after[..close]);
                let target = &after[close + 2..];
                rest = target.find(')').map_or("", |end| &target[end + 1..]);
            }
            None => {
                text.push('[');
                rest = after;
            }
        }
    }
    text.push_str(rest);
    text.trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '_' || c == '-' {
                Some(c)
            } else if c.is_whitespace() {
                Some('-')
            } else {
                None
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anchors_follow_mdbook() {
        assert_eq!(anchor(" The web view (`--ui`)"), "the-web-view---ui");
        assert_eq!(
            anchor(" Config file (`apiVersion: kubewasm.io/v1alpha1`, `kind: HostConfig`)"),
            "config-file-apiversion-kubewasmiov1alpha1-kind-hostconfig"
        );
        assert_eq!(anchor(" See [the book](x.md) now"), "see-the-book-now");
    }

    /// A book page's relative link out of the book is refused, naming the
    /// URL to write; a link to the repository's files on the forge must
    /// name one of the working tree.
    #[test]
    fn links_stay_in_the_book_and_forge_links_name_files() {
        let root = crate::repo_root();
        let repository = Repository::of(&root);
        assert_eq!(repository.url, "https://github.com/kubewasm/kubewasm");
        assert_eq!(repository.slug(), "kubewasm/kubewasm");
        let book = root.join("docs/book/src");
        let leaving =
            |dir: &str, link: &str| repository.leaving(&root, &book, &book.join(dir), link);
        assert_eq!(
            leaving("", "../../../deploy/").unwrap(),
            "leaves the book (the book is served on its own too): link the repository's deploy by its URL, https://github.com/kubewasm/kubewasm/tree/main/deploy"
        );
        assert!(
            leaving("", "../../../")
                .unwrap()
                .ends_with("its URL, https://github.com/kubewasm/kubewasm")
        );
        assert!(
            leaving("reference", "../../../fixture.schema.json")
                .unwrap()
                .ends_with("/blob/main/docs/fixture.schema.json")
        );
        for stays in [
            "reference/cli.md#x",
            "../src/config.md",
            "#anchor",
            "https://e.org/x",
        ] {
            assert_eq!(leaving("", stays), None, "{stays}");
        }
        let check = |link: &str| repository.check(&root, link);
        assert_eq!(
            check("https://github.com/kubewasm/kubewasm/tree/main/deploy"),
            Some(Ok(()))
        );
        assert_eq!(
            check("https://github.com/kubewasm/kubewasm/blob/main/cliff.toml#L1"),
            Some(Ok(()))
        );
        assert_eq!(
            check("https://github.com/kubewasm/kubewasm/tree/main"),
            Some(Ok(()))
        );
        for broken in [
            "https://github.com/kubewasm/kubewasm/blob/main/deploy",
            "https://github.com/kubewasm/kubewasm/tree/main/cliff.toml",
            "https://github.com/kubewasm/kubewasm/blob/main/no-such-file",
            "https://github.com/kubewasm/kubewasm/blob/main/../x",
        ] {
            assert!(matches!(check(broken), Some(Err(_))), "{broken}");
        }
        assert_eq!(check("https://github.com/kubewasm/kubewasm/issues"), None);
        assert_eq!(
            check("https://github.com/kubewasm/kubewasm-x/blob/main/y"),
            None
        );
    }

    #[test]
    fn links_skip_code_and_urls_are_not_checked() {
        let found = links("see [a](a.md#x) and `[b](b.md)` or [c](https://e.org)");
        let shown: Vec<String> = found.iter().map(|t| t.to_string()).collect();
        assert_eq!(shown, ["(a.md#x)", "(https://e.org)"]);
    }
}
