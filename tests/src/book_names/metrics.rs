//! Metric names: the families reference/metrics.md lists.

use super::*;

/// The metrics of reference/metrics.md: each series it lists and, for a
/// counter (`_total`) or a histogram (`_bucket`, `_count`, `_sum`), the
/// family's name a page may use for them all.
pub struct Metrics(BTreeSet<String>);

impl Metrics {
    pub fn parse(reference: &str) -> Self {
        let mut names = BTreeSet::new();
        let page = markdown::read(reference);
        for table in markdown::tables(&page.prose) {
            let Some(col) = table.column(&["metric"]) else {
                continue;
            };
            for row in &table.rows {
                for series in markdown::ticked(row.cells.get(col).copied().unwrap_or("")) {
                    names.insert(series.to_owned());
                    for suffix in ["_total", "_bucket", "_count", "_sum"] {
                        if let Some(family) = series.strip_suffix(suffix) {
                            names.insert(family.to_owned());
                        }
                    }
                }
            }
        }
        Self(names)
    }

    pub fn knows(&self, name: &str) -> bool {
        self.0.contains(name)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The metric names of a line: `kubewasm_[a-z0-9_]+` standing alone, not
/// part of a longer identifier (`..._kubewasm_rbac`), a path
/// (`sdk/kubewasm_fake.py`), a Rust path (`kubewasm_sdk::`) or a dotted
/// name (`kubewasm_fake.install`).
pub fn metric_names(line: &str) -> Vec<&str> {
    let b = line.as_bytes();
    let mut found = Vec::new();
    for (at, _) in line.match_indices("kubewasm_") {
        if at > 0 && (b[at - 1].is_ascii_alphanumeric() || b"_/.-".contains(&b[at - 1])) {
            continue;
        }
        let len = b[at..]
            .iter()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || **c == b'_')
            .count();
        let end = at + len;
        let rest = &line[end..];
        let dotted = rest.starts_with("::")
            || (rest.starts_with('.')
                && rest[1..].starts_with(|c: char| c.is_ascii_alphanumeric()))
            || rest.starts_with(|c: char| c.is_ascii_uppercase());
        if !dotted && len > "kubewasm_".len() {
            found.push(&line[at..end]);
        }
    }
    found
}

/// Every metric a page names that reference/metrics.md does not list.
pub fn unknown_metrics(root: &Path) -> Vec<Unknown> {
    let metrics = Metrics::parse(&read(&root.join(METRICS)));
    assert!(metrics.len() > 20, "{METRICS} lists no metrics");
    let mut unknown = Vec::new();
    let mut checked = 0;
    for (page, text) in book_pages(root) {
        if page == METRICS {
            continue;
        }
        let parsed = markdown::read(&text);
        let lines = parsed.prose.iter().copied().chain(
            parsed
                .blocks
                .iter()
                .filter(|b| !PROGRAM_LANGS.contains(&b.lang))
                .flat_map(|b| b.lines.iter().copied()),
        );
        for (line, text) in lines {
            for name in metric_names(text) {
                checked += 1;
                if !metrics.knows(name) {
                    unknown.push(Unknown {
                        page: page.clone(),
                        line,
                        name: name.to_owned(),
                        why: format!("no such metric in {METRICS} (generated from the registry)"),
                    });
                }
            }
        }
    }
    assert!(
        checked > 20,
        "only {checked} metric names found in the book"
    );
    unknown
}

// ---------------------------------------------------------------- flags
