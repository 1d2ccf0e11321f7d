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
                if let Err(why) = check(page, dir, &target) {
                    broken.push(format!("{shown}:{number}: {target}: {why}"));
                }
            }
        }
    }
    broken
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

    #[test]
    fn links_skip_code_and_urls_are_not_checked() {
        let found = links("see [a](a.md#x) and `[b](b.md)` or [c](https://e.org)");
        let shown: Vec<String> = found.iter().map(|t| t.to_string()).collect();
        assert_eq!(shown, ["(a.md#x)", "(https://e.org)"]);
    }
}
