//! The rendered book: docs/book built by mdbook into a folder, and the
//! links of its HTML. The sources' check (crate::docs) cannot see what
//! mdBook does to a link: an included file's links stay relative to where
//! the file was, and a link to a `.md` outside the book becomes `.html`.
//! Here every `href` and `src` of every page is resolved where a reader
//! resolves it, in the built book. A link that climbs out of the book
//! (resolved from where it is built, docs/book/book, into the repository)
//! is refused: the book is also served on its own, with no repository
//! around it; such a link names the file on the forge instead, and a link
//! to this repository's files there (`URL/blob/main/PATH`,
//! `URL/tree/main/PATH`, URL being book.toml's `git-repository-url`) must
//! name a file (a folder) of the working tree (crate::docs::Repository).

use std::collections::{HashMap, HashSet};
use std::path::{Component, Path, PathBuf};
use std::process::Command;

/// Where the book is built by default (book.toml's `build-dir`), relative
/// to the repository: a link that climbs out of the book would resolve
/// from here.
pub const BUILT_AT: &str = "docs/book/book";

/// The mdbook binary: on PATH, else in cargo's bin (where
/// scripts/install-mdbook.sh puts it). Panics saying how to install it:
/// CI installs it, so a missing mdbook is a setup error, never a skip.
pub fn mdbook() -> PathBuf {
    let found = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .chain(std::env::var_os("CARGO_HOME").map(|h| PathBuf::from(h).join("bin")))
        .chain(std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo/bin")))
        .map(|dir| dir.join("mdbook"))
        .find(|bin| bin.is_file());
    found.unwrap_or_else(|| {
        panic!(
            "mdbook is not installed (not on PATH nor in ~/.cargo/bin): run `bash scripts/install-mdbook.sh`"
        )
    })
}

/// Builds the book of the repository at `root` into `dest`.
pub fn build(root: &Path, dest: &Path) {
    let bin = mdbook();
    let out = Command::new(&bin)
        .arg("build")
        .arg("-d")
        .arg(dest)
        .arg(root.join("docs/book"))
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", bin.display()));
    assert!(
        out.status.success(),
        "`mdbook build docs/book` failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every broken link of the book built into `out`, one line each: the page,
/// the link and what is wrong. `root` is the repository the book was built
/// from, for the links that leave the book.
pub fn broken_links(out: &Path, root: &Path) -> Vec<String> {
    let repository = crate::docs::Repository::of(root);
    let mut pages = Vec::new();
    walk(out, &mut pages);
    let mut ids = Ids::default();
    let mut broken = Vec::new();
    for page in &pages {
        let Ok(html) = std::fs::read_to_string(page) else {
            broken.push(format!("{}: cannot be read", page.display()));
            continue;
        };
        let rel = page.strip_prefix(out).unwrap_or(page);
        // 404.html sets `<base href="/">` (book.toml's `site-url`): its
        // links are relative to the book's root wherever it is served.
        const BASE: &str = "<base href=\"/\">";
        let (base, html) = match html.contains(BASE) {
            true => (Path::new(""), html.replace(BASE, "")),
            false => (rel.parent().unwrap_or(Path::new("")), html),
        };
        for link in attributes(&html, &["href", "src"]) {
            let checked = repository
                .check(root, &link)
                .unwrap_or_else(|| check(out, root, &repository, rel, base, &link, &mut ids));
            if let Err(why) = checked {
                broken.push(format!("{}: {link}: {why}", rel.display()));
            }
        }
    }
    broken
}

fn check(
    out: &Path,
    root: &Path,
    repository: &crate::docs::Repository,
    page: &Path,
    base: &Path,
    link: &str,
    ids: &mut Ids,
) -> Result<(), String> {
    if let Some(host) = external_host(link) {
        return match placeholder(&host) {
            true => Err(format!("{host} is a placeholder host, not a real address")),
            false => Ok(()),
        };
    }
    if link.starts_with("mailto:") || link.starts_with("javascript:") || link.starts_with("data:") {
        return Ok(());
    }
    if scheme(link).is_some() {
        return Err("an unknown scheme".to_string());
    }
    let (path, fragment) = match link.split_once('#') {
        Some((path, fragment)) => (path, Some(fragment)),
        None => (link, None),
    };
    let path = path.split_once('?').map_or(path, |(p, _)| p);
    let path = percent_decoded(path);
    let target = if path.is_empty() {
        Target::Book(page.to_path_buf())
    } else {
        resolve(&Path::new(BUILT_AT).join(base).join(&path))?
    };
    let file = match &target {
        Target::Book(rel) => {
            let file = out.join(rel);
            let file = if file.is_dir() {
                file.join("index.html")
            } else {
                file
            };
            if !file.is_file() {
                return Err(format!("no such page in the book ({})", rel.display()));
            }
            file
        }
        Target::Repository(rel) => {
            // mdBook made a link to a `.md` outside the book `.html`.
            let md = rel.with_extension("md");
            let rel = match rel.extension().is_some_and(|e| e == "html") && root.join(&md).is_file()
            {
                true => md,
                false => rel.clone(),
            };
            let what = match rel.as_os_str().is_empty() {
                true => "root".to_owned(),
                false => rel.display().to_string(),
            };
            return Err(format!(
                "leaves the book for the repository's {what}, which the book served on its own does not have: \
                 link it by its URL, {}{}",
                repository.link(root, &rel),
                match root.join(&rel).exists() {
                    true => "",
                    false => " (it names no file of the repository either)",
                }
            ));
        }
    };
    let Some(fragment) = fragment.filter(|f| !f.is_empty()) else {
        return Ok(());
    };
    let fragment = percent_decoded(fragment);
    if ids.of(&file).contains(&fragment) {
        Ok(())
    } else {
        Err(format!("{} has no id #{fragment}", file.display()))
    }
}

enum Target {
    /// A file of the built book, relative to its folder.
    Book(PathBuf),
    /// A file of the repository, relative to its root.
    Repository(PathBuf),
}

/// `path` (relative to the repository, starting at [`BUILT_AT`]) without
/// its `.` and `..`, as a file of the book or of the repository.
fn resolve(path: &Path) -> Result<Target, String> {
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    for component in path.components() {
        match component {
            Component::Normal(part) => parts.push(part),
            Component::CurDir => {}
            Component::ParentDir => {
                if parts.pop().is_none() {
                    return Err("climbs out of the repository".to_string());
                }
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err("an absolute path: the book may be served anywhere".to_string());
            }
        }
    }
    let resolved: PathBuf = parts.iter().collect();
    Ok(match resolved.strip_prefix(BUILT_AT) {
        Ok(rel) => Target::Book(rel.to_path_buf()),
        Err(_) => Target::Repository(resolved),
    })
}

/// The ids of each target page, read once: `id="..."` of an HTML page, the
/// heading anchors of a markdown file (as the forge renders it).
#[derive(Default)]
struct Ids(HashMap<PathBuf, HashSet<String>>);

impl Ids {
    fn of(&mut self, file: &Path) -> &HashSet<String> {
        self.0.entry(file.to_path_buf()).or_insert_with(|| {
            if file.extension().is_some_and(|e| e == "md") {
                crate::docs::heading_ids(file)
            } else {
                let html = std::fs::read_to_string(file).unwrap_or_default();
                attributes(&html, &["id", "name"]).into_iter().collect()
            }
        })
    }
}

/// The values of the named attributes of every tag, entities decoded.
/// mdBook quotes every attribute with `"`; text (code samples included) has
/// its quotes escaped, so it is never mistaken for an attribute.
pub fn attributes(html: &str, names: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for name in names {
        let needle = format!(" {name}=\"");
        let mut rest = html;
        while let Some(at) = rest.find(&needle) {
            let after = &rest[at + needle.len()..];
            let end = after.find('"').unwrap_or(after.len());
            found.push(entities_decoded(&after[..end]));
            rest = &after[end..];
        }
    }
    found
}

fn entities_decoded(value: &str) -> String {
    value
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&#x27;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

fn percent_decoded(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && let (Some(hi), Some(lo)) = (
                bytes.get(i + 1).copied().and_then(hex),
                bytes.get(i + 2).copied().and_then(hex),
            )
        {
            out.push((hi * 16 + lo) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A link's scheme (`https` of `https://...`), if it has one.
fn scheme(link: &str) -> Option<&str> {
    let (scheme, _) = link.split_once(':')?;
    let valid = scheme
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    valid.then_some(scheme)
}

/// The host of an `http(s)://` or protocol-relative link.
fn external_host(link: &str) -> Option<String> {
    let rest = link
        .strip_prefix("https://")
        .or_else(|| link.strip_prefix("http://"))
        .or_else(|| link.strip_prefix("//"))?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = authority.rsplit('@').next().unwrap_or("");
    let host = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.split(':').next().unwrap_or(""),
    };
    Some(host.to_ascii_lowercase())
}

/// Hosts that stand for "some address" (RFC 2606, RFC 6761) or were never
/// filled in: a reader following such a link gets nowhere.
fn placeholder(host: &str) -> bool {
    let host = host.trim_end_matches('.');
    host.is_empty()
        || [".invalid", ".example", ".test"]
            .iter()
            .any(|tld| host.ends_with(tld) || host == &tld[1..])
        || ["example.com", "example.org", "example.net"]
            .iter()
            .any(|d| host == *d || host.ends_with(&format!(".{d}")))
        || ["todo", "tbd", "xxx", "your-host", "host"].contains(&host)
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
        } else if path.extension().is_some_and(|e| e == "html") {
            out.push(path);
        }
    }
}

/// A ```` ```console ```` (or `trycmd`) block of a page: the examples run
/// through the binary (tests/tests/book.rs).
#[derive(Debug)]
pub struct ConsoleBlock {
    /// The line of its opening fence, from 1.
    pub line: usize,
    /// The opening fence as written.
    pub fence: String,
}

impl ConsoleBlock {
    /// Whether trycmd runs it: it reads only backtick fences at the start
    /// of a line whose info string is exactly `console` or `trycmd` (an
    /// attribute such as `ignore`, or anything after the language, skips
    /// the block).
    pub fn runs(&self) -> bool {
        let info = self.fence.trim_start_matches('`');
        self.fence.starts_with("```") && (info == "console" || info == "trycmd")
    }
}

/// The pages of the book (and README.md, whose regions it includes) that
/// hold console blocks, each with them.
pub fn console_pages(root: &Path) -> Vec<(PathBuf, Vec<ConsoleBlock>)> {
    crate::docs::pages(root)
        .into_iter()
        .filter_map(|page| {
            let text = std::fs::read_to_string(&page).ok()?;
            let blocks = console_blocks(&text);
            (!blocks.is_empty()).then_some((page, blocks))
        })
        .collect()
}

fn console_blocks(text: &str) -> Vec<ConsoleBlock> {
    let mut blocks = Vec::new();
    let mut open: Option<String> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let Some(c) = trimmed.chars().next().filter(|c| *c == '`' || *c == '~') else {
            continue;
        };
        let ticks: String = trimmed.chars().take_while(|x| *x == c).collect();
        if ticks.len() < 3 {
            continue;
        }
        let info = trimmed[ticks.len()..].trim();
        match &open {
            Some(fence) if info.is_empty() && ticks.starts_with(fence.as_str()) => open = None,
            Some(_) => {}
            None => {
                let lang = info.split([',', ' ', '\t', '{']).next().unwrap_or("");
                if lang == "console" || lang == "trycmd" {
                    blocks.push(ConsoleBlock {
                        line: i + 1,
                        fence: line.trim_end().to_string(),
                    });
                }
                open = Some(ticks);
            }
        }
    }
    blocks
}

/// Lays out the pages of `pages` in `work` as trycmd cases: a copy of each
/// page and beside it its `.in` folder, where its commands run, holding a
/// symlink to each entry of the repository's root (but `.git` and
/// `target`), plus each of `extra` (a path in the repository, and the file
/// to find there: build outputs a script would copy in). Returns each case
/// with the page it copies.
pub fn lay_out_console_cases(
    root: &Path,
    pages: &[(PathBuf, Vec<ConsoleBlock>)],
    extra: &[(PathBuf, PathBuf)],
    work: &Path,
) -> Vec<(PathBuf, PathBuf)> {
    let entries: Vec<PathBuf> = std::fs::read_dir(root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| !p.file_name().is_some_and(|n| n == ".git" || n == "target"))
        .collect();
    let mut cases = Vec::new();
    for (page, _) in pages {
        let rel = page.strip_prefix(root).unwrap_or(page);
        let name = rel.to_string_lossy().replace(['/', '\\'], "_");
        let case = work.join(&name);
        std::fs::copy(page, &case).unwrap_or_else(|e| panic!("{}: {e}", page.display()));
        let dir = case.with_extension("in");
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in &entries {
            let link = dir.join(entry.file_name().unwrap_or_default());
            std::os::unix::fs::symlink(entry, &link)
                .unwrap_or_else(|e| panic!("{}: {e}", link.display()));
        }
        for (rel, source) in extra {
            place(&dir, rel, source);
        }
        cases.push((case, page.clone()));
    }
    cases
}

/// Links `source` at `rel` in the mirror `dir`, turning each symlinked
/// folder on the way into a real folder of symlinks to its entries, so
/// nothing is written into the repository.
fn place(dir: &Path, rel: &Path, source: &Path) {
    let fail = |path: &Path, e: std::io::Error| -> ! { panic!("{}: {e}", path.display()) };
    let mut at = dir.to_path_buf();
    for part in rel.parent().into_iter().flat_map(Path::components) {
        at.push(part);
        let is_link = at
            .symlink_metadata()
            .is_ok_and(|m| m.file_type().is_symlink());
        if is_link {
            let target = std::fs::read_link(&at).unwrap_or_else(|e| fail(&at, e));
            std::fs::remove_file(&at).unwrap_or_else(|e| fail(&at, e));
            std::fs::create_dir(&at).unwrap_or_else(|e| fail(&at, e));
            for entry in std::fs::read_dir(&target).unwrap_or_else(|e| fail(&target, e)) {
                let entry = entry.unwrap_or_else(|e| fail(&target, e));
                let link = at.join(entry.file_name());
                std::os::unix::fs::symlink(entry.path(), &link).unwrap_or_else(|e| fail(&link, e));
            }
        } else if !at.exists() {
            std::fs::create_dir(&at).unwrap_or_else(|e| fail(&at, e));
        }
    }
    let dest = dir.join(rel);
    if dest.symlink_metadata().is_ok() {
        std::fs::remove_file(&dest).unwrap_or_else(|e| fail(&dest, e));
    }
    std::os::unix::fs::symlink(source, &dest).unwrap_or_else(|e| fail(&dest, e));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_skip_escaped_text() {
        let html = r#"<a href="a.html#x">a</a> <code>&lt;a href=&quot;b.html&quot;&gt;</code> <img src="i.png?v=1&amp;w=2">"#;
        assert_eq!(
            attributes(html, &["href", "src"]),
            ["a.html#x", "i.png?v=1&w=2"]
        );
    }

    #[test]
    fn links_resolve_in_the_book_or_the_repository() {
        assert!(matches!(
            resolve(Path::new("docs/book/book/reference/../access.html")),
            Ok(Target::Book(p)) if p == Path::new("access.html")
        ));
        assert!(matches!(
            resolve(Path::new("docs/book/book/../../../host/src/lib.rs")),
            Ok(Target::Repository(p)) if p == Path::new("host/src/lib.rs")
        ));
        assert!(resolve(Path::new("docs/book/book/../../../../x")).is_err());
    }

    /// A link out of the book is refused, naming the URL to write; a link
    /// to the repository's files on the forge must name one that exists.
    #[test]
    fn links_out_of_the_book_are_refused_and_forge_links_checked() {
        let root = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("docs/book")).unwrap();
        std::fs::create_dir_all(root.path().join("deploy")).unwrap();
        std::fs::write(root.path().join("cliff.toml"), "").unwrap();
        std::fs::write(
            root.path().join("docs/book/book.toml"),
            "[output.html]\ngit-repository-url = \"https://github.com/o/r\"\n",
        )
        .unwrap();
        let url = "https://github.com/o/r";
        let links = [
            "../../../deploy/",
            "../../../cliff.toml",
            &format!("{url}/tree/main/deploy"),
            &format!("{url}/blob/main/cliff.toml#L3"),
            &format!("{url}/blob/main/deploy"),
            &format!("{url}/tree/main/gone"),
            "https://github.com/other/r/blob/main/gone",
        ];
        let html: String = links
            .iter()
            .map(|l| format!("<a href=\"{l}\">x</a>"))
            .collect();
        std::fs::write(out.path().join("a.html"), html).unwrap();
        let broken = broken_links(out.path(), root.path());
        assert_eq!(broken.len(), 4, "{broken:#?}");
        assert!(
            broken[0].contains(&format!("link it by its URL, {url}/tree/main/deploy")),
            "{}",
            broken[0]
        );
        assert!(
            broken[1].contains(&format!("link it by its URL, {url}/blob/main/cliff.toml")),
            "{}",
            broken[1]
        );
        assert!(
            broken[2].contains(&format!("{url}/tree/main/deploy")),
            "{}",
            broken[2]
        );
        assert!(
            broken[3].contains("no such file in the repository (gone)"),
            "{}",
            broken[3]
        );
    }

    #[test]
    fn console_blocks_that_trycmd_skips_are_found() {
        let text = "```console\n$ a\n```\n```sh\n```console\n```\n```console,ignore\n```\n  ```console\n  ```\n~~~console\n~~~\n";
        let blocks = console_blocks(text);
        let found: Vec<(usize, bool)> = blocks.iter().map(|b| (b.line, b.runs())).collect();
        assert_eq!(found, [(1, true), (7, false), (9, false), (11, false)]);
    }

    #[test]
    fn placeholder_hosts_are_named() {
        for link in [
            "https://registry.example.invalid/x",
            "http://example.com",
            "https://docs.example.org/a",
            "https://foo.test:8443/",
        ] {
            let host = external_host(link).unwrap();
            assert!(placeholder(&host), "{link}");
        }
        for link in [
            "https://github.com/kubewasm/kubewasm",
            "http://127.0.0.1:9091/ui",
        ] {
            let host = external_host(link).unwrap();
            assert!(!placeholder(&host), "{link}");
        }
    }
}
