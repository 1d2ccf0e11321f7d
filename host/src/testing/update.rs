//! `--update`: writes the observed calls into a fixture as each step's
//! `expect`, the way golden-file tools accept a new snapshot, editing only
//! those `expect` blocks in the text (the rest of the file, comments
//! included, stays as written). A step written in flow style becomes block
//! style; a file whose `cases` or `steps` are flow sequences is rewritten
//! whole, and its comments are lost (the caller is told).

use saphyr_parser::{Event, Parser, Span};
use serde_json::Value;

use super::fixture::Call;

/// One step's new expectation.
#[derive(Debug, Clone)]
pub struct StepUpdate {
    pub case: usize,
    pub step: usize,
    pub calls: Vec<Call>,
}

/// What [`rewrite`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Rewritten {
    /// Only the `expect` blocks changed.
    InPlace(String),
    /// The document was written again whole (comments lost).
    Whole(String),
}

/// A parsed node with where its text is (byte offsets).
#[derive(Debug)]
enum Node {
    Scalar {
        text: String,
        start: usize,
        end: usize,
    },
    Map {
        start: usize,
        end: usize,
        flow: bool,
        entries: Vec<(Node, Node)>,
    },
    Seq {
        start: usize,
        end: usize,
        flow: bool,
        items: Vec<Node>,
    },
}

impl Node {
    fn start(&self) -> usize {
        match self {
            Node::Scalar { start, .. } | Node::Map { start, .. } | Node::Seq { start, .. } => {
                *start
            }
        }
    }

    /// Where its last character ends.
    fn end(&self) -> usize {
        match self {
            Node::Scalar { end, .. } | Node::Map { end, .. } | Node::Seq { end, .. } => *end,
        }
    }

    fn get(&self, key: &str) -> Option<(&Node, &Node)> {
        match self {
            Node::Map { entries, .. } => entries
                .iter()
                .find(|(k, _)| matches!(k, Node::Scalar { text, .. } if text == key))
                .map(|(k, v)| (k, v)),
            _ => None,
        }
    }
}

/// Character index -> byte offset.
struct Offsets(Vec<usize>);

impl Offsets {
    fn new(text: &str) -> Self {
        let mut v: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
        v.push(text.len());
        Self(v)
    }

    fn byte(&self, char_index: usize) -> usize {
        self.0
            .get(char_index)
            .copied()
            .unwrap_or_else(|| self.0.last().copied().unwrap_or(0))
    }
}

/// Parses the first document of `text` into nodes.
fn parse(text: &str) -> Result<Node, String> {
    let offsets = Offsets::new(text);
    let mut stack: Vec<(Node, Option<Node>)> = Vec::new();
    let mut root = None;
    let span_of = |s: &Span| (offsets.byte(s.start.index()), offsets.byte(s.end.index()));
    for event in Parser::new_from_str(text) {
        let (event, span) = event.map_err(|e| e.to_string())?;
        let (start, end) = span_of(&span);
        let node = match event {
            Event::Scalar(value, ..) => Some(Node::Scalar {
                text: value.into_owned(),
                start,
                end,
            }),
            Event::MappingStart(..) => {
                let flow = text[start..].starts_with('{');
                stack.push((
                    Node::Map {
                        start,
                        end: start,
                        flow,
                        entries: Vec::new(),
                    },
                    None,
                ));
                None
            }
            Event::SequenceStart(..) => {
                let flow = text[start..].starts_with('[');
                stack.push((
                    Node::Seq {
                        start,
                        end: start,
                        flow,
                        items: Vec::new(),
                    },
                    None,
                ));
                None
            }
            Event::MappingEnd | Event::SequenceEnd => {
                let (mut node, _) = stack.pop().ok_or("unbalanced document")?;
                if let Node::Map {
                    flow: true, end: e, ..
                }
                | Node::Seq {
                    flow: true, end: e, ..
                } = &mut node
                {
                    // The closing bracket.
                    *e = (*e).max(end);
                }
                Some(node)
            }
            Event::Alias(_) => {
                return Err("anchors and aliases are not supported by --update".into());
            }
            Event::DocumentEnd => break,
            _ => None,
        };
        let Some(node) = node else { continue };
        let node_end = node.end();
        match stack.last_mut() {
            None => {
                root = Some(node);
            }
            Some((parent, pending_key)) => match parent {
                Node::Map { entries, end, .. } => match pending_key.take() {
                    None => *pending_key = Some(node),
                    Some(key) => {
                        entries.push((key, node));
                        *end = (*end).max(node_end);
                    }
                },
                Node::Seq { items, end, .. } => {
                    items.push(node);
                    *end = (*end).max(node_end);
                }
                Node::Scalar { .. } => {}
            },
        }
        if root.is_some() && stack.is_empty() {
            break;
        }
    }
    root.ok_or_else(|| "the file holds no document".into())
}

/// Start of the line holding byte `at`.
fn line_start(text: &str, at: usize) -> usize {
    text[..at].rfind('\n').map_or(0, |i| i + 1)
}

/// End of the line holding byte `at` (before its newline).
fn line_end(text: &str, at: usize) -> usize {
    text[at..].find('\n').map_or(text.len(), |i| at + i)
}

/// The column of byte `at`, in characters.
fn column(text: &str, at: usize) -> usize {
    text[line_start(text, at)..at].chars().count()
}

/// `expect:` and the calls as block YAML, its lines after the first
/// indented to `indent` (the first continues where the key starts).
fn expect_block(calls: &[Call], indent: usize) -> Result<String, String> {
    if calls.is_empty() {
        return Ok("expect: []".into());
    }
    let yaml = serde_yaml_ng::to_string(calls).map_err(|e| e.to_string())?;
    let pad = " ".repeat(indent + 2);
    let mut out = String::from("expect:");
    for line in yaml.lines() {
        out.push('\n');
        if !line.is_empty() {
            out.push_str(&pad);
            out.push_str(line);
        }
    }
    Ok(out)
}

/// `text` with each update's calls as its step's `expect`.
pub fn rewrite(text: &str, updates: &[StepUpdate]) -> Result<Rewritten, String> {
    match in_place(text, updates) {
        Ok(Some(t)) => Ok(Rewritten::InPlace(t)),
        Ok(None) => whole(text, updates).map(Rewritten::Whole),
        Err(e) => Err(e),
    }
}

/// The edits, or `None` when the layout needs a whole rewrite.
fn in_place(text: &str, updates: &[StepUpdate]) -> Result<Option<String>, String> {
    let root = parse(text)?;
    let Some((_, cases)) = root.get("cases") else {
        return Err("the file has no `cases`".into());
    };
    let Node::Seq {
        items: cases,
        flow: false,
        ..
    } = cases
    else {
        return Ok(None);
    };
    let mut edits: Vec<(usize, usize, String)> = Vec::new();
    for u in updates {
        let case = cases
            .get(u.case)
            .ok_or_else(|| format!("no case {} in the file", u.case + 1))?;
        let Some((_, steps)) = case.get("steps") else {
            return Err(format!("case {} has no steps", u.case + 1));
        };
        let Node::Seq {
            items: steps,
            flow: false,
            ..
        } = steps
        else {
            return Ok(None);
        };
        let step = steps
            .get(u.step)
            .ok_or_else(|| format!("case {}: no step {}", u.case + 1, u.step + 1))?;
        let Node::Map {
            entries,
            flow,
            start,
            end,
        } = step
        else {
            return Err(format!(
                "case {} step {}: not a map",
                u.case + 1,
                u.step + 1
            ));
        };
        if *flow {
            // `- {pending: true}` becomes block style: its pairs as
            // written, one a line, then `expect`.
            let col = column(text, *start);
            let pad = " ".repeat(col);
            let mut block = String::new();
            for (k, v) in entries {
                if matches!(k, Node::Scalar { text, .. } if text == "expect") {
                    continue;
                }
                if !block.is_empty() {
                    block.push('\n');
                    block.push_str(&pad);
                }
                block.push_str(&text[k.start()..k.end()]);
                block.push_str(": ");
                block.push_str(&text[v.start()..v.end()]);
            }
            block.push('\n');
            block.push_str(&pad);
            block.push_str(&expect_block(&u.calls, col)?);
            edits.push((*start, *end, block));
            continue;
        }
        match step.get("expect") {
            Some((key, value)) => {
                let col = column(text, key.start());
                let stop = line_end(text, value.end().max(key.end()));
                edits.push((key.start(), stop, expect_block(&u.calls, col)?));
            }
            None => {
                let Some((first, _)) = entries.first() else {
                    return Err(format!("case {} step {}: empty", u.case + 1, u.step + 1));
                };
                let col = column(text, first.start());
                let at = line_end(text, *end);
                let block = format!("\n{}{}", " ".repeat(col), expect_block(&u.calls, col)?);
                edits.push((at, at, block));
            }
        }
    }
    edits.sort_by_key(|(start, ..)| std::cmp::Reverse(*start));
    let mut out = text.to_owned();
    for (start, end, replacement) in edits {
        out.replace_range(start..end, &replacement);
    }
    Ok(Some(out))
}

/// The document written again with the updates (comments are lost).
fn whole(text: &str, updates: &[StepUpdate]) -> Result<String, String> {
    let mut doc: Value = serde_yaml_ng::from_str(text).map_err(|e| e.to_string())?;
    for u in updates {
        let calls = serde_json::to_value(&u.calls).map_err(|e| e.to_string())?;
        let step = doc
            .pointer_mut(&format!("/cases/{}/steps/{}", u.case, u.step))
            .and_then(Value::as_object_mut)
            .ok_or_else(|| format!("case {} step {}: not found", u.case + 1, u.step + 1))?;
        step.insert("expect".into(), calls);
    }
    serde_yaml_ng::to_string(&doc).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::testing::fixture::{CallResult, Fixture};
    use std::path::Path;

    fn ok(call: &str) -> Call {
        Call {
            call: Some(call.into()),
            at: None,
            result: CallResult::Ok,
            actions: Vec::new(),
            events: Vec::new(),
            logs: None,
        }
    }

    fn upd(case: usize, step: usize, calls: Vec<Call>) -> StepUpdate {
        StepUpdate { case, step, calls }
    }

    #[test]
    fn only_the_expect_blocks_change_and_comments_stay() {
        let text = "# yaml-language-server: $schema=x.json
cases:
  # the first case
  - name: one
    steps:
      - delta: added   # inline comment
        object: configmaps a/b
        expect:
          - result: retry   # old
            call: x
      - pending: true
      - {pending: true, name: flow}
  - name: two
    steps:
      - expect: []
        pending: true
";
        let out = rewrite(
            text,
            &[
                upd(0, 0, vec![ok("added configmaps a/b")]),
                upd(0, 1, vec![ok("requeue configmaps a/b")]),
                upd(0, 2, vec![]),
                upd(1, 0, vec![ok("p")]),
            ],
        )
        .unwrap();
        let Rewritten::InPlace(out) = out else {
            panic!("{out:?}")
        };
        assert!(
            out.starts_with("# yaml-language-server: $schema=x.json\ncases:\n  # the first case\n"),
            "{out}"
        );
        assert!(out.contains("      - delta: added   # inline comment\n        object: configmaps a/b\n        expect:\n          - call: added configmaps a/b\n            result: ok\n      - pending: true\n        expect:\n          - call: requeue configmaps a/b\n"), "{out}");
        assert!(
            out.contains("      - pending: true\n        name: flow\n        expect: []\n"),
            "{out}"
        );
        assert!(out.contains("      - expect:\n          - call: p\n            result: ok\n        pending: true\n"), "{out}");
        let f = Fixture::parse(Path::new("f.yaml"), &out).unwrap();
        assert_eq!(
            f.cases[0].steps[0].expect.as_ref().unwrap()[0],
            ok("added configmaps a/b")
        );
        assert_eq!(f.cases[0].steps[2].expect.as_ref().unwrap().len(), 0);
        assert_eq!(f.cases[1].steps[0].expect.as_ref().unwrap()[0], ok("p"));
    }

    #[test]
    fn flow_cases_are_rewritten_whole() {
        let text = "cases: [{name: one, steps: [{pending: true}]}]\n";
        let out = rewrite(text, &[upd(0, 0, vec![ok("c")])]).unwrap();
        let Rewritten::Whole(out) = out else {
            panic!("{out:?}")
        };
        let f = Fixture::parse(Path::new("f.yaml"), &out).unwrap();
        assert_eq!(f.cases[0].steps[0].expect.as_ref().unwrap()[0], ok("c"));
    }
}
