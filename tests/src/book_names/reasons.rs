//! Status reasons: reference/status-reasons.md, and the pages that must list them all.

use super::*;

/// The reasons of reference/status-reasons.md, each with the conditions
/// that carry it (`Ready=False`, ...), and the condition types.
#[derive(Debug, Default)]
pub struct Reasons {
    pub reasons: BTreeMap<String, BTreeSet<String>>,
    pub conditions: BTreeSet<String>,
}

impl Reasons {
    pub fn parse(reference: &str) -> Self {
        let mut out = Reasons::default();
        let page = markdown::read(reference);
        for table in markdown::tables(&page.prose) {
            let (Some(reason), Some(conditions)) =
                (table.column(&["reason"]), table.column(&["conditions"]))
            else {
                continue;
            };
            for row in &table.rows {
                let Some(name) = row
                    .cells
                    .get(reason)
                    .and_then(|c| markdown::ticked(c).first().copied())
                else {
                    continue;
                };
                let carried: BTreeSet<String> =
                    markdown::ticked(row.cells.get(conditions).copied().unwrap_or(""))
                        .into_iter()
                        .map(str::to_owned)
                        .collect();
                for c in &carried {
                    if let Some((condition, _)) = c.split_once('=') {
                        out.conditions.insert(condition.to_owned());
                    }
                }
                out.reasons.insert(name.to_owned(), carried);
            }
        }
        out
    }

    /// The reasons a `Ready=False` condition may carry: why a Plugin is not
    /// Ready.
    pub fn not_ready(&self) -> BTreeSet<&str> {
        self.reasons
            .iter()
            .filter(|(_, c)| c.contains("Ready=False"))
            .map(|(r, _)| r.as_str())
            .collect()
    }
}

/// The reason-looking names of a page, with their lines: the backticked
/// CamelCase words of a table's `reason` or `reasons` column, and the
/// reason of a `Condition=Status/Reason` (`Serving=True/PreviousVersion`).
pub fn reason_names(page: &Page, conditions: &BTreeSet<String>) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for table in markdown::tables(&page.prose) {
        let Some(col) = table.column(&["reason", "reasons"]) else {
            continue;
        };
        for row in &table.rows {
            for word in markdown::ticked(row.cells.get(col).copied().unwrap_or("")) {
                let camel = word.starts_with(|c: char| c.is_ascii_uppercase())
                    && word.chars().all(|c| c.is_ascii_alphanumeric());
                if camel {
                    out.push((row.line, word.to_owned()));
                }
            }
        }
    }
    for (line, text) in &page.prose {
        for condition in conditions {
            for status in ["True", "False"] {
                let prefix = format!("{condition}={status}/");
                for (at, _) in text.match_indices(&prefix) {
                    let rest = &text[at + prefix.len()..];
                    let name: String = rest
                        .chars()
                        .take_while(char::is_ascii_alphanumeric)
                        .collect();
                    if !name.is_empty() {
                        out.push((*line, name));
                    }
                }
            }
        }
    }
    out
}

/// Every reason-looking name of a page's reason tables (or written as
/// `Condition=Status/Reason`) that is neither a reason nor a condition of
/// reference/status-reasons.md (a reasons column may name a condition:
/// "as `Ready`'s refusals").
pub fn unknown_reasons(root: &Path) -> Vec<Unknown> {
    let reasons = Reasons::parse(&read(&root.join(REASONS)));
    assert!(reasons.reasons.len() > 10, "{REASONS} lists no reasons");
    let mut unknown = Vec::new();
    let mut checked = 0;
    for (page, text) in book_pages(root) {
        if page == REASONS {
            continue;
        }
        let parsed = markdown::read(&text);
        for (line, name) in reason_names(&parsed, &reasons.conditions) {
            checked += 1;
            if !reasons.reasons.contains_key(&name) && !reasons.conditions.contains(&name) {
                unknown.push(Unknown {
                    page: page.clone(),
                    line,
                    name,
                    why: format!("no such status reason in {REASONS} (generated from host/src/objects/reasons.rs)"),
                });
            }
        }
    }
    assert!(
        checked > 20,
        "only {checked} status reasons found in the book's reason tables"
    );
    unknown
}

/// The reasons a page that lists them does not name (in backticks,
/// anywhere on it): plugin-objects.md documents every reason, and
/// troubleshooting.md every reason a Plugin is not Ready for. Each is
/// reported at the page's first table of reasons (else its line 1).
pub fn missing_reasons(root: &Path) -> Vec<Unknown> {
    let reasons = Reasons::parse(&read(&root.join(REASONS)));
    let all: BTreeSet<&str> = reasons.reasons.keys().map(String::as_str).collect();
    let not_ready = reasons.not_ready();
    let mut missing = Vec::new();
    for (page, expected, what) in [
        ("docs/book/src/plugin-objects.md", &all, "a status reason"),
        (
            "docs/book/src/troubleshooting.md",
            &not_ready,
            "a reason of Ready=False",
        ),
    ] {
        let text = read(&root.join(page));
        let parsed = markdown::read(&text);
        let line = markdown::tables(&parsed.prose)
            .iter()
            .find(|t| t.column(&["reason", "reasons"]).is_some())
            .map_or(1, |t| t.line);
        // A reason is named in backticks, or as `Serving=True/Reason`.
        let named: BTreeSet<String> = markdown::code_spans(&parsed.prose)
            .into_iter()
            .map(|s| s.text)
            .chain(
                reason_names(&parsed, &reasons.conditions)
                    .into_iter()
                    .map(|(_, n)| n),
            )
            .collect();
        for reason in expected {
            if !named.contains(*reason) {
                missing.push(Unknown {
                    page: page.to_owned(),
                    line,
                    name: (*reason).to_owned(),
                    why: format!("{what} ({REASONS}) this page does not name"),
                });
            }
        }
    }
    missing
}
