//! The book's user pages read the same whatever day they are read: no date
//! of a run, no commit hash, no issue number of this project's tracker. A
//! reader cannot use "measured on 2026-11-24" or "until 482d209" or "issue
//! 25"; dated figures and the project's history belong to the contributor
//! pages (docs/book/src/contributing/, not checked here).
//!
//! What counts, outside and inside fenced code blocks unless said:
//! - a date `YYYY-MM-DD`, but not one that starts an RFC 3339 timestamp
//!   (`2026-01-01T00:00:00Z`, a fixture's clock in an example);
//! - a month and a year (`November 2026`, `Nov 2026`);
//! - outside fenced code blocks only (a plugin version in a sample output
//!   is a hex word too), a commit hash: a word of 7 to 40 lowercase hex
//!   characters with a digit and a letter, not a `sha256:`/`sha512:`
//!   digest (whole or cut short); a word runs over letters, digits, `_`
//!   and `-`, so a Pod name (`kubewasm-5857cf9997-swt57`) is no hash;
//! - an issue number: `issue N`/`issues N`, a `#N` not after a word
//!   character, `/` or `&` (an upstream project's `npm/cli#9846` passes: it
//!   points the reader at why a workaround exists, a stable pointer, not
//!   this project's history; `PKCS#8` and `&#39;` are no issues), and this
//!   repository's own `OWNER/REPO#N` or `OWNER/REPO/issues/N` (`/pull/N`).
//!
//! The README regions a user page includes (`{{#include}}`) are checked as
//! part of it, under the README's name and lines.

use std::path::{Path, PathBuf};

use crate::markdown;

/// One thing found: where, what kind, and the text.
#[derive(Debug, PartialEq)]
pub struct Finding {
    /// The file, relative to the repository.
    pub file: String,
    pub line: usize,
    pub kind: Kind,
    pub text: String,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    Date,
    CommitHash,
    IssueNumber,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.kind {
            Kind::Date => "a run date",
            Kind::CommitHash => "a commit hash",
            Kind::IssueNumber => "an issue number",
        };
        write!(f, "{}:{}: {kind}: {}", self.file, self.line, self.text)
    }
}

/// The user pages: every `.md` under docs/book/src but the contributor
/// pages of docs/book/src/contributing/.
pub fn user_pages(root: &Path) -> Vec<PathBuf> {
    let contributing = root.join("docs/book/src/contributing");
    crate::docs::pages(root)
        .into_iter()
        .filter(|p| p.starts_with(root.join("docs/book/src")) && !p.starts_with(&contributing))
        .collect()
}

/// What the user pages of the repository at `root` carry that they should
/// not. `repository` is this project's `OWNER/REPO` (its own issue
/// references are never upstream).
pub fn findings(root: &Path, repository: &str) -> Vec<Finding> {
    let mut found = Vec::new();
    for page in user_pages(root) {
        let text =
            std::fs::read_to_string(&page).unwrap_or_else(|e| panic!("{}: {e}", page.display()));
        found.extend(in_text(&shown(root, &page), &text, repository));
        for (file, region) in included(root, &page, &text) {
            found.extend(in_region(&shown(root, &file), &region, repository));
        }
    }
    found
}

fn shown(root: &Path, file: &Path) -> String {
    let file = crate::docs::lexical(file);
    file.strip_prefix(root)
        .unwrap_or(&file)
        .display()
        .to_string()
}

/// The findings of one page's text, shown as `file`.
pub fn in_text(file: &str, text: &str, repository: &str) -> Vec<Finding> {
    let page = markdown::read(text);
    let code: Vec<(usize, &str)> = page.blocks.iter().flat_map(|b| b.lines.clone()).collect();
    let mut lines: Vec<(usize, &str, bool)> = page
        .prose
        .iter()
        .map(|(n, l)| (*n, *l, true))
        .chain(code.iter().map(|(n, l)| (*n, *l, false)))
        .collect();
    lines.sort_by_key(|(n, _, _)| *n);
    let mut found = Vec::new();
    for (line, text, prose) in lines {
        let mut push = |kind, texts: Vec<String>| {
            found.extend(texts.into_iter().map(|text| Finding {
                file: file.to_owned(),
                line,
                kind,
                text,
            }));
        };
        push(Kind::Date, dates(text));
        push(Kind::Date, months(text));
        if prose {
            push(Kind::CommitHash, commit_hashes(text));
        }
        push(Kind::IssueNumber, issue_numbers(text, repository));
    }
    found
}

/// A region included from another file: its lines, numbered as there.
fn in_region(file: &str, lines: &[(usize, String)], repository: &str) -> Vec<Finding> {
    // Read as a page of its own, then renumbered.
    let text: String = lines.iter().map(|(_, l)| format!("{l}\n")).collect();
    in_text(file, &text, repository)
        .into_iter()
        .map(|mut f| {
            f.line = lines.get(f.line - 1).map_or(f.line, |(n, _)| *n);
            f
        })
        .collect()
}

/// The regions `{{#include FILE}}` and `{{#include FILE:ANCHOR}}` of a page
/// pull in from outside the book's sources (a book page is checked as
/// itself), each as its file and its numbered lines.
fn included(root: &Path, page: &Path, text: &str) -> Vec<(PathBuf, Vec<(usize, String)>)> {
    let dir = page.parent().unwrap_or(Path::new("."));
    let src = root.join("docs/book/src");
    let mut out = Vec::new();
    for line in text.lines() {
        let Some(spec) = line
            .split("{{#include ")
            .nth(1)
            .and_then(|rest| rest.split("}}").next())
        else {
            continue;
        };
        let (file, anchor) = match spec.trim().split_once(':') {
            Some((file, anchor)) => (file, Some(anchor)),
            None => (spec.trim(), None),
        };
        let path = crate::docs::lexical(&dir.join(file));
        if path.starts_with(&src) {
            continue;
        }
        let Ok(included) = std::fs::read_to_string(&path) else {
            continue;
        };
        let numbered: Vec<(usize, String)> = included
            .lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l.to_owned()))
            .collect();
        let region = match anchor {
            None => numbered,
            Some(anchor) => numbered
                .into_iter()
                .skip_while(|(_, l)| !l.contains(&format!("ANCHOR: {anchor}")))
                .skip(1)
                .take_while(|(_, l)| !l.contains(&format!("ANCHOR_END: {anchor}")))
                .collect(),
        };
        out.push((path, region));
    }
    out
}

/// `YYYY-MM-DD` (a plausible date: 19xx or 20xx, month 01-12, day 01-31)
/// not inside a longer number and not starting an RFC 3339 timestamp.
pub fn dates(line: &str) -> Vec<String> {
    let b = line.as_bytes();
    let digits = |from: usize, n: usize| {
        b.get(from..from + n)
            .is_some_and(|s| s.iter().all(u8::is_ascii_digit))
    };
    let number = |from: usize, n: usize| line[from..from + n].parse::<u32>().unwrap_or(0);
    let mut found = Vec::new();
    for i in 0..b.len() {
        let shaped = digits(i, 4)
            && b.get(i + 4) == Some(&b'-')
            && digits(i + 5, 2)
            && b.get(i + 7) == Some(&b'-')
            && digits(i + 8, 2);
        if !shaped
            || (i > 0 && b[i - 1].is_ascii_digit())
            || b.get(i + 10).is_some_and(u8::is_ascii_digit)
        {
            continue;
        }
        let plausible = (1900..2100).contains(&number(i, 4))
            && (1..=12).contains(&number(i + 5, 2))
            && (1..=31).contains(&number(i + 8, 2));
        let timestamp =
            b.get(i + 10) == Some(&b'T') && b.get(i + 11).is_some_and(u8::is_ascii_digit);
        if plausible && !timestamp {
            found.push(line[i..i + 10].to_owned());
        }
    }
    found
}

/// A month's name (capitalized, whole or as its usual abbreviation) and a
/// year, `November 2026` or `Nov. 2026`.
pub fn months(line: &str) -> Vec<String> {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    let mut found = Vec::new();
    let words: Vec<(usize, &str)> = words(line, |c| c.is_ascii_alphanumeric() || c == '.');
    for pair in words.windows(2) {
        let [(at, month), (_, year)] = pair else {
            continue;
        };
        let name = month.trim_end_matches('.');
        let is_month = MONTHS.iter().any(|m| {
            *m == name
                || (name.len() >= 3 && m.starts_with(name) && (name.len() == 3 || name == "Sept"))
        });
        let year = year.trim_end_matches('.');
        let is_year = year.len() == 4
            && year.bytes().all(|c| c.is_ascii_digit())
            && (year.starts_with("19") || year.starts_with("20"));
        let between = &line[at + month.len()..];
        if is_month && is_year && between.starts_with(' ') {
            found.push(format!("{month} {year}"));
        }
    }
    found
}

/// A lowercase hex word of 7 to 40 characters with a digit and a letter,
/// not a `sha256:` or `sha512:` digest.
pub fn commit_hashes(line: &str) -> Vec<String> {
    words(line, |c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        .into_iter()
        .filter(|(at, word)| {
            (7..=40).contains(&word.len())
                && word
                    .bytes()
                    .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
                && word.bytes().any(|c| c.is_ascii_digit())
                && word.bytes().any(|c| c.is_ascii_alphabetic())
                && !["sha256:", "sha512:"]
                    .iter()
                    .any(|p| line[..*at].ends_with(p))
        })
        .map(|(_, word)| word.to_owned())
        .collect()
}

/// `issue N`, `issues N`, a `#N` of this project (see the module's doc),
/// and `REPO#N` or `REPO/issues/N` and `REPO/pull/N` with `repository` this
/// project's `OWNER/REPO`.
pub fn issue_numbers(line: &str, repository: &str) -> Vec<String> {
    let mut found = Vec::new();
    // The `#`s of `issue #N` already found.
    let mut covered = Vec::new();
    let lower = line.to_ascii_lowercase();
    let b = line.as_bytes();
    let number_at = |from: usize| {
        let n = b[from.min(b.len())..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count();
        (n > 0).then_some(from + n)
    };
    for (at, word) in words(&lower, |c| c.is_ascii_alphabetic()) {
        if word != "issue" && word != "issues" {
            continue;
        }
        let after = at + word.len();
        let spaces = b[after..].iter().take_while(|c| **c == b' ').count();
        let hash = usize::from(b.get(after + spaces) == Some(&b'#'));
        if spaces > 0
            && let Some(end) = number_at(after + spaces + hash)
            && !b.get(end).is_some_and(|c| c.is_ascii_alphanumeric())
        {
            covered.push(after + spaces);
            found.push(line[at..end].to_owned());
        }
    }
    let own = repository.to_ascii_lowercase();
    for (at, _) in line.match_indices('#') {
        let Some(end) = number_at(at + 1).filter(|_| !covered.contains(&at)) else {
            continue;
        };
        if b.get(end)
            .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_' || *c == b'-')
        {
            continue;
        }
        let before = b[..at].last().copied();
        let upstream = before
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'/' || c == b'&');
        if !upstream || lower[..at].ends_with(&own) {
            let start = if lower[..at].ends_with(&own) {
                at - own.len()
            } else {
                at
            };
            found.push(line[start..end].to_owned());
        }
    }
    for kind in ["/issues/", "/pull/"] {
        let needle = format!("{own}{kind}");
        for (at, _) in lower.match_indices(&needle) {
            if let Some(end) = number_at(at + needle.len()) {
                found.push(line[at..end].to_owned());
            }
        }
    }
    found
}

/// The words of `line` (maximal runs of characters `part` accepts), each
/// with its byte offset.
fn words(line: &str, part: impl Fn(char) -> bool) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in line.char_indices() {
        match (part(c), start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                out.push((s, &line[s..i]));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        out.push((s, &line[s..]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPO: &str = "kubewasm/kubewasm";

    #[test]
    fn dates_are_found_but_not_a_timestamp() {
        assert_eq!(
            dates("Measured (2026-11-24, the 2-core machine"),
            ["2026-11-24"]
        );
        assert_eq!(dates("after 2026-11-27: the"), ["2026-11-27"]);
        for legit in [
            "The clock starts at `clock:` (default `2026-01-01T00:00:00Z`)",
            "handles: 1000000",
            "a range 1-2026-01-011",
            "version 2026-13-45",
            "kubernetes 1.34-2026",
        ] {
            assert!(dates(legit).is_empty(), "{legit}");
        }
    }

    #[test]
    fn months_and_years_are_found() {
        assert_eq!(months("as of November 2026, the"), ["November 2026"]);
        assert_eq!(months("as of November 2026."), ["November 2026"]);
        assert_eq!(months("(Nov. 2026)"), ["Nov. 2026"]);
        assert_eq!(months("Sept 2025"), ["Sept 2025"]);
        for legit in [
            "it may 2026",
            "Mayday 2026",
            "November 26",
            "Marathon 2026",
            "a March of 2026",
        ] {
            assert!(months(legit).is_empty(), "{legit}");
        }
    }

    #[test]
    fn commit_hashes_are_found_in_prose_only() {
        assert_eq!(commit_hashes("Until 482d209 the"), ["482d209"]);
        assert_eq!(commit_hashes("swap` against 91665cb, quiet"), ["91665cb"]);
        for legit in [
            "`sha256:4f2a9c1e8b7d` of the module",
            "@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "a number like 1000000",
            "the deadbeef case",
            "pod kubewasm-5857cf9997-swt57 leads",
            "uuid 123e4567-e89b-12d3-a456-426614174000",
        ] {
            assert!(commit_hashes(legit).is_empty(), "{legit}");
        }
        // A plugin version in a ```text block is sample output.
        let page = "```text\n    plugin/config-replicator: 67699cf4113e\n```\nthen 67699cf4113e\n";
        let found = in_text("p.md", page, REPO);
        assert_eq!(
            found,
            [Finding {
                file: "p.md".into(),
                line: 4,
                kind: Kind::CommitHash,
                text: "67699cf4113e".into(),
            }]
        );
    }

    #[test]
    fn issue_numbers_of_this_project_are_found() {
        assert_eq!(
            issue_numbers("at the time of issue 25, and Issues #7", REPO),
            ["issue 25", "Issues #7"]
        );
        assert_eq!(issue_numbers("fixed (#25).", REPO), ["#25"]);
        assert_eq!(
            issue_numbers("see kubewasm/kubewasm#12", REPO),
            ["kubewasm/kubewasm#12"]
        );
        assert_eq!(
            issue_numbers(
                "https://github.com/kubewasm/kubewasm/issues/38 or /pull/40",
                REPO
            ),
            ["kubewasm/kubewasm/issues/38"]
        );
        for legit in [
            "lock file\", npm/cli#9846); 11.13",
            "an unencrypted PKCS#8 or SEC1 key",
            "[the heading](#1-install)",
            "an issue with 5 nodes",
            "&#39;quoted&#39;",
            "# 1 replica",
            "tissue 5",
        ] {
            assert!(
                issue_numbers(legit, REPO).is_empty(),
                "{legit}: {:?}",
                issue_numbers(legit, REPO)
            );
        }
    }

    /// The README regions a user page includes are read, under the
    /// README's lines; contributor pages are not.
    #[test]
    fn included_regions_count_and_contributor_pages_do_not() {
        let root = tempfile::tempdir().unwrap();
        let src = root.path().join("docs/book/src");
        std::fs::create_dir_all(src.join("contributing")).unwrap();
        std::fs::write(
            root.path().join("README.md"),
            "Measured 2026-01-02.\n<!-- ANCHOR: intro -->\nSince 482d209.\n<!-- ANCHOR_END: intro -->\n",
        )
        .unwrap();
        std::fs::write(
            src.join("intro.md"),
            "# Intro\n\n{{#include ../../../README.md:intro}}\n",
        )
        .unwrap();
        std::fs::write(src.join("contributing/notes.md"), "Run on 2026-01-02.\n").unwrap();
        let found: Vec<String> = findings(root.path(), REPO)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(found, ["README.md:3: a commit hash: 482d209"]);
    }

    #[test]
    fn a_finding_names_the_page_and_the_line() {
        let found = in_text(
            "docs/book/src/x.md",
            "# X\n\nMeasured on 2026-11-24.\n",
            REPO,
        );
        assert_eq!(
            found.iter().map(ToString::to_string).collect::<Vec<_>>(),
            ["docs/book/src/x.md:3: a run date: 2026-11-24"]
        );
    }
}
