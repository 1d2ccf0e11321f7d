//! What the book's checks read of a markdown page, each piece with the line
//! it starts on so a failure names `page:line`: its fenced code blocks (with
//! their language), its prose lines (outside those blocks), the inline code
//! spans of its prose (which may run over a line break, as CommonMark
//! allows within a paragraph), its tables and its headings.

/// A fenced code block.
#[derive(Debug)]
pub struct Block<'a> {
    /// The first word of its info string (`sh` of ```` ```sh ````), empty
    /// when it has none.
    pub lang: &'a str,
    /// Its lines between the fences, each with its line number (from 1).
    pub lines: Vec<(usize, &'a str)>,
}

/// A page read once: its blocks and its prose lines.
#[derive(Debug)]
pub struct Page<'a> {
    pub blocks: Vec<Block<'a>>,
    /// The lines outside fenced blocks (the fences included in neither),
    /// numbered from 1.
    pub prose: Vec<(usize, &'a str)>,
}

/// An inline code span: its text (a line break inside it read as a space)
/// and the line it opens on.
#[derive(Debug, PartialEq)]
pub struct Span {
    pub line: usize,
    pub text: String,
}

/// A row of a table: its cells, trimmed, and its line.
#[derive(Debug)]
pub struct Row<'a> {
    pub line: usize,
    pub cells: Vec<&'a str>,
}

/// A table: its header's cells and its rows (the delimiter row left out).
#[derive(Debug)]
pub struct Table<'a> {
    /// The line of its header.
    pub line: usize,
    pub header: Vec<&'a str>,
    pub rows: Vec<Row<'a>>,
}

impl Table<'_> {
    /// The index of the header cell `name` (case-insensitive), if any.
    pub fn column(&self, names: &[&str]) -> Option<usize> {
        self.header
            .iter()
            .position(|h| names.iter().any(|n| h.eq_ignore_ascii_case(n)))
    }
}

/// Splits `text` into its fenced blocks and its prose. A fence is three or
/// more backticks or tildes, at any indentation (the book indents them in
/// lists); it closes at a fence of the same character, at least as long,
/// with no info string.
pub fn read(text: &str) -> Page<'_> {
    let mut blocks = Vec::new();
    let mut prose = Vec::new();
    let mut open: Option<(char, usize, Block)> = None;
    for (i, line) in text.lines().enumerate() {
        let number = i + 1;
        let trimmed = line.trim_start();
        let fence = trimmed
            .chars()
            .next()
            .filter(|c| *c == '`' || *c == '~')
            .map(|c| (c, trimmed.chars().take_while(|x| *x == c).count()))
            .filter(|(_, n)| *n >= 3);
        match (&mut open, fence) {
            (Some((c, n, _)), Some((fc, fnum)))
                if *c == fc && fnum >= *n && trimmed[fnum..].trim().is_empty() =>
            {
                if let Some((_, _, block)) = open.take() {
                    blocks.push(block);
                }
            }
            (Some((_, _, block)), _) => block.lines.push((number, line)),
            (None, Some((c, n))) => {
                let info = trimmed[n * c.len_utf8()..].trim();
                let lang = info.split([',', ' ', '\t', '{']).next().unwrap_or("");
                open = Some((
                    c,
                    n,
                    Block {
                        lang,
                        lines: Vec::new(),
                    },
                ));
            }
            (None, None) => prose.push((number, line)),
        }
    }
    if let Some((_, _, block)) = open {
        blocks.push(block);
    }
    Page { blocks, prose }
}

/// The inline code spans of the prose lines `prose`: a run of backticks
/// opens one that the next run of as many backticks, in the same paragraph,
/// closes; a run no such run follows is literal text.
pub fn code_spans(prose: &[(usize, &str)]) -> Vec<Span> {
    let mut spans = Vec::new();
    for paragraph in paragraphs(prose) {
        let mut text = String::new();
        let mut starts = Vec::new();
        for (number, line) in &paragraph {
            starts.push((text.len(), *number));
            text.push_str(line);
            text.push('\n');
        }
        let line_at = |offset: usize| {
            starts
                .iter()
                .take_while(|(start, _)| *start <= offset)
                .last()
                .map_or(0, |(_, n)| *n)
        };
        let bytes = text.as_bytes();
        let run_at = |i: usize| bytes[i..].iter().take_while(|b| **b == b'`').count();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] != b'`' {
                i += 1;
                continue;
            }
            let n = run_at(i);
            let mut j = i + n;
            let close = loop {
                match bytes[j..].iter().position(|b| *b == b'`') {
                    None => break None,
                    Some(at) => {
                        let k = j + at;
                        let m = run_at(k);
                        if m == n {
                            break Some(k);
                        }
                        j = k + m;
                    }
                }
            };
            match close {
                Some(k) => {
                    let inner = text[i + n..k].replace('\n', " ");
                    let inner = match inner.strip_prefix(' ').and_then(|s| s.strip_suffix(' ')) {
                        Some(stripped) if !stripped.trim().is_empty() => stripped.to_owned(),
                        _ => inner,
                    };
                    spans.push(Span {
                        line: line_at(i),
                        text: inner,
                    });
                    i = k + n;
                }
                None => i += n,
            }
        }
    }
    spans
}

/// The prose lines grouped by paragraph: a blank line, a skipped fenced
/// block (a gap in the numbering) or a heading ends one.
fn paragraphs<'a>(prose: &[(usize, &'a str)]) -> Vec<Vec<(usize, &'a str)>> {
    let mut out: Vec<Vec<(usize, &'a str)>> = Vec::new();
    let mut last = 0;
    for (number, line) in prose {
        let gap = *number != last + 1;
        last = *number;
        if line.trim().is_empty() {
            out.push(Vec::new());
            continue;
        }
        let heading = line.trim_start().starts_with('#');
        if gap || heading || out.is_empty() {
            out.push(Vec::new());
        }
        if let Some(current) = out.last_mut() {
            current.push((*number, line));
        }
        if heading {
            out.push(Vec::new());
        }
    }
    out.retain(|p| !p.is_empty());
    out
}

/// The tables of the prose: a header row, a delimiter row (`|---|`), then
/// the rows up to the first line that is not one. Cells split at `|` not
/// escaped as `\|`.
pub fn tables<'a>(prose: &[(usize, &'a str)]) -> Vec<Table<'a>> {
    let mut tables = Vec::new();
    let mut i = 0;
    while i + 1 < prose.len() {
        let (line, head) = prose[i];
        let (_, delimiter) = prose[i + 1];
        let is_delimiter = delimiter.trim().starts_with('|')
            && delimiter
                .trim()
                .chars()
                .all(|c| matches!(c, '|' | '-' | ':' | ' '));
        if !(head.trim().starts_with('|') && is_delimiter) {
            i += 1;
            continue;
        }
        let mut table = Table {
            line,
            header: cells(head),
            rows: Vec::new(),
        };
        i += 2;
        while let Some((number, line)) = prose.get(i).copied() {
            if !line.trim().starts_with('|') {
                break;
            }
            table.rows.push(Row {
                line: number,
                cells: cells(line),
            });
            i += 1;
        }
        tables.push(table);
    }
    tables
}

fn cells(line: &str) -> Vec<&str> {
    let line = line.trim();
    let line = line.strip_prefix('|').unwrap_or(line);
    let line = line.strip_suffix('|').unwrap_or(line);
    let mut out = Vec::new();
    let mut start = 0;
    let bytes = line.as_bytes();
    for (i, b) in bytes.iter().enumerate() {
        if *b == b'|' && (i == 0 || bytes[i - 1] != b'\\') {
            out.push(line[start..i].trim());
            start = i + 1;
        }
    }
    out.push(line[start..].trim());
    out
}

/// The heading a prose line is under (its text without the `#`s), for
/// each prose line: `None` before the first heading.
pub fn sections<'a>(prose: &[(usize, &'a str)]) -> Vec<Option<&'a str>> {
    let mut current = None;
    prose
        .iter()
        .map(|(_, line)| {
            let hashes = line.chars().take_while(|c| *c == '#').count();
            if (1..=6).contains(&hashes) && line[hashes..].starts_with(' ') {
                current = Some(line[hashes..].trim());
            }
            current
        })
        .collect()
}

/// The backticked words of `text` (`` `a` `` in `` see `a` ``): the inline
/// code spans of one table cell or line.
pub fn ticked(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_and_prose_are_apart() {
        let page = read("a\n```sh\nx\n  ```\nb\n  ~~~~text\ny\n~~~\n```\n~~~~~\n```\nz\n```\n");
        let langs: Vec<&str> = page.blocks.iter().map(|b| b.lang).collect();
        assert_eq!(langs, ["sh", "text", ""]);
        assert_eq!(page.blocks[0].lines, [(3, "x")]);
        assert_eq!(page.blocks[1].lines, [(7, "y"), (8, "~~~"), (9, "```")]);
        assert_eq!(page.blocks[2].lines, [(12, "z")]);
        assert_eq!(page.prose, [(1, "a"), (5, "b")]);
    }

    #[test]
    fn code_spans_run_over_a_line_break_but_not_a_paragraph() {
        let prose = [
            (1, "see `cargo bench -p"),
            (2, "kubewasm --bench x` and ``a ` b``"),
            (3, "a lone ` backtick"),
            (4, ""),
            (5, "` closes nothing above"),
        ];
        let spans = code_spans(&prose);
        assert_eq!(
            spans,
            [
                Span {
                    line: 1,
                    text: "cargo bench -p kubewasm --bench x".into()
                },
                Span {
                    line: 2,
                    text: "a ` b".into()
                },
            ]
        );
    }

    #[test]
    fn tables_split_at_unescaped_bars() {
        let prose = [
            (1, "| reason | meaning |"),
            (2, "|---|---|"),
            (3, "| `A` | x \\| y |"),
            (4, "after"),
        ];
        let tables = tables(&prose);
        assert_eq!(tables.len(), 1);
        assert_eq!(tables[0].column(&["Reason"]), Some(0));
        assert_eq!(tables[0].rows[0].cells, ["`A`", "x \\| y"]);
        assert_eq!(tables[0].rows[0].line, 3);
        assert_eq!(tables[0].line, 1);
    }
}
