//! Expected against observed calls: compared as objects (not text), with
//! the fixture's volatile fields taken out, a result message matched by
//! containment, and unasked-for parts (the call line, logs) ignored; a
//! difference is shown as the first differing field and a unified diff of
//! both sides as YAML.

use serde_json::Value;

use super::fixture::Call;

/// What to ignore when comparing one step's calls.
#[derive(Debug, Clone, Copy)]
pub struct Ignore<'a> {
    /// JSON pointers into each action and Event entry (`*` matches any
    /// key or index).
    pub volatile: &'a [String],
    /// Compare log lines even where the expectation gives none.
    pub logs: bool,
}

/// `None` when `observed` satisfies `expected`; else what differs: the
/// first differing field, then a unified diff.
pub fn compare(expected: &[Call], observed: &[Call], ignore: Ignore<'_>) -> Option<String> {
    let (want, got) = normalized(expected, observed, ignore);
    if want == got {
        return None;
    }
    let first = first_difference(&want, &got, "expect".to_owned())
        .unwrap_or_else(|| "expect: differs".to_owned());
    Some(format!("{first}\n{}", unified(&want, &got)))
}

/// Both sides as values, with what is not compared made equal.
fn normalized(expected: &[Call], observed: &[Call], ignore: Ignore<'_>) -> (Value, Value) {
    let mut want = Vec::new();
    let mut got = Vec::new();
    for i in 0..expected.len().max(observed.len()) {
        let e = expected.get(i);
        let o = observed.get(i);
        let mut ev = e.map(to_value);
        let mut ov = o.map(to_value);
        if let (Some(e), Some(o), Some(ev), Some(ov)) = (e, o, ev.as_mut(), ov.as_mut()) {
            if e.call.is_none() {
                remove(ov, "call");
            }
            if e.at.is_none() {
                remove(ov, "at");
            }
            if e.result.accepts(&o.result) {
                ov["result"] = ev["result"].clone();
            }
            if e.logs.is_none() && !ignore.logs {
                remove(ov, "logs");
            }
        }
        if let (None, Some(ov)) = (e, ov.as_mut()) {
            // An extra call: what it did, not when.
            remove(ov, "at");
            if !ignore.logs {
                remove(ov, "logs");
            }
        }
        for v in [ev.as_mut(), ov.as_mut()].into_iter().flatten() {
            for list in ["actions", "events"] {
                if let Some(Value::Array(entries)) = v.get_mut(list) {
                    for entry in entries {
                        for p in ignore.volatile {
                            remove_pointer(entry, p);
                        }
                    }
                }
            }
        }
        want.extend(ev);
        got.extend(ov);
    }
    (Value::Array(want), Value::Array(got))
}

fn to_value(c: &Call) -> Value {
    serde_json::to_value(c).unwrap_or(Value::Null)
}

fn remove(v: &mut Value, key: &str) {
    if let Some(m) = v.as_object_mut() {
        m.remove(key);
    }
}

/// Removes what `pointer` names from `v`; a `*` segment matches every key
/// or index.
pub fn remove_pointer(v: &mut Value, pointer: &str) {
    let segments: Vec<String> = pointer
        .split('/')
        .skip(1)
        .map(|s| s.replace("~1", "/").replace("~0", "~"))
        .collect();
    remove_at(v, &segments);
}

fn remove_at(v: &mut Value, segments: &[String]) {
    let Some((first, rest)) = segments.split_first() else {
        return;
    };
    let last = rest.is_empty();
    match v {
        Value::Object(map) => {
            if first == "*" {
                if last {
                    map.clear();
                } else {
                    for child in map.values_mut() {
                        remove_at(child, rest);
                    }
                }
            } else if last {
                map.remove(first);
            } else if let Some(child) = map.get_mut(first) {
                remove_at(child, rest);
            }
        }
        Value::Array(items) => {
            if first == "*" {
                if last {
                    items.clear();
                } else {
                    for child in items {
                        remove_at(child, rest);
                    }
                }
            } else if let Ok(i) = first.parse::<usize>() {
                if last {
                    if let Some(item) = items.get_mut(i) {
                        // Removing would shift the rest: blank it instead.
                        *item = Value::Null;
                    }
                } else if let Some(child) = items.get_mut(i) {
                    remove_at(child, rest);
                }
            }
        }
        _ => {}
    }
}

/// `path: expected X, observed Y` for the first place the values differ.
fn first_difference(want: &Value, got: &Value, path: String) -> Option<String> {
    match (want, got) {
        (Value::Object(a), Value::Object(b)) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            keys.into_iter().find_map(|k| {
                let sub = field_path(&path, k);
                match (a.get(k), b.get(k)) {
                    (Some(x), Some(y)) => first_difference(x, y, sub),
                    (Some(x), None) => {
                        Some(format!("{sub}: expected {}, observed nothing", short(x)))
                    }
                    (None, Some(y)) => {
                        Some(format!("{sub}: expected nothing, observed {}", short(y)))
                    }
                    (None, None) => None,
                }
            })
        }
        (Value::Array(a), Value::Array(b)) => {
            for i in 0..a.len().max(b.len()) {
                let sub = format!("{path}[{i}]");
                match (a.get(i), b.get(i)) {
                    (Some(x), Some(y)) => {
                        if let Some(d) = first_difference(x, y, sub) {
                            return Some(d);
                        }
                    }
                    (Some(x), None) => {
                        return Some(format!("{sub}: expected {}, observed nothing", short(x)));
                    }
                    (None, Some(y)) => {
                        return Some(format!("{sub}: expected nothing, observed {}", short(y)));
                    }
                    (None, None) => {}
                }
            }
            None
        }
        (a, b) if a == b => None,
        (a, b) => Some(format!(
            "{path}: expected {}, observed {}",
            short(a),
            short(b)
        )),
    }
}

fn field_path(path: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if plain {
        format!("{path}.{key}")
    } else {
        format!("{path}[{key:?}]")
    }
}

/// A value in at most one line of 120 characters.
fn short(v: &Value) -> String {
    let text = v.to_string();
    if text.chars().count() > 120 {
        let cut: String = text.chars().take(117).collect();
        format!("{cut}...")
    } else {
        text
    }
}

/// Both sides as YAML (as calls, so their keys keep the fixture's order),
/// line by line.
fn unified(want: &Value, got: &Value) -> String {
    let yaml = |v: &Value| {
        let text = match serde_json::from_value::<Vec<Call>>(v.clone()) {
            Ok(calls) => serde_yaml_ng::to_string(&calls),
            Err(_) => serde_yaml_ng::to_string(v),
        };
        text.unwrap_or_else(|e| format!("{e}\n"))
    };
    let (a, b) = (yaml(want), yaml(got));
    similar::TextDiff::from_lines(&a, &b)
        .unified_diff()
        .context_radius(3)
        .header("expected", "observed")
        .to_string()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::testing::fixture::{ActionEntry, Apply, CallResult, Preconditions};
    use serde_json::json;

    fn call(data: &str, stamp: &str, result: CallResult) -> Call {
        Call {
            call: Some("added configmaps a/b".into()),
            at: None,
            result,
            actions: vec![ActionEntry::Apply(Apply {
                force: true,
                preconditions: Preconditions::default(),
                object: json!({"metadata": {"annotations": {"stamp": stamp}}, "data": {"ca.crt": data}}),
            })],
            events: Vec::new(),
            logs: Some(vec!["INFO copied".into()]),
        }
    }

    const NONE: Ignore<'static> = Ignore {
        volatile: &[],
        logs: false,
    };

    #[test]
    fn a_difference_names_the_field_and_shows_a_unified_diff() {
        let want = [call("PEM-1", "t1", CallResult::Ok)];
        let got = [call("PEM-2", "t1", CallResult::Ok)];
        let report = compare(&want, &got, NONE).unwrap();
        let first = report.lines().next().unwrap();
        assert_eq!(
            first,
            r#"expect[0].actions[0].apply.object.data["ca.crt"]: expected "PEM-1", observed "PEM-2""#
        );
        assert!(report.contains("--- expected\n+++ observed\n"), "{report}");
        assert!(
            report.contains("-          ca.crt: PEM-1\n+          ca.crt: PEM-2\n"),
            "{report}"
        );
        assert!(compare(&want, &want, NONE).is_none());
    }

    #[test]
    fn volatile_fields_messages_and_unasked_parts_are_not_compared() {
        let volatile = ["/apply/object/metadata/annotations/stamp".to_owned()];
        let ignore = Ignore {
            volatile: &volatile,
            logs: false,
        };
        let want = [call(
            "x",
            "t1",
            CallResult::Conflict(Some("modified".into())),
        )];
        let mut got = [call(
            "x",
            "t2",
            CallResult::Conflict(Some("action 1 of 1 failed: conflict: modified".into())),
        )];
        assert!(compare(&want, &got, NONE).is_some());
        assert!(compare(&want, &got, ignore).is_none());
        // No call line and no logs expected: neither is compared.
        let mut lax = want.clone();
        lax[0].call = None;
        lax[0].logs = None;
        got[0].call = Some("resync configmaps a/b".into());
        got[0].logs = Some(vec!["DEBUG other".into()]);
        assert!(compare(&lax, &got, ignore).is_none());
        // Unless the case asks for logs.
        let with_logs = Ignore {
            logs: true,
            ..ignore
        };
        assert!(compare(&lax, &got, with_logs).unwrap().contains("logs"));
        // A call missing or extra is a difference.
        let report = compare(&want, &[], ignore).unwrap();
        assert!(report.starts_with("expect[0]: expected {"), "{report}");
    }

    #[test]
    fn wildcards_remove_in_every_key_and_index() {
        let mut v =
            json!({"a": [{"t": 1, "k": 2}, {"t": 3}], "b": {"x": {"t": 1}, "y": {"t": 2, "u": 0}}});
        remove_pointer(&mut v, "/a/*/t");
        remove_pointer(&mut v, "/b/*/t");
        assert_eq!(
            v,
            json!({"a": [{"k": 2}, {}], "b": {"x": {}, "y": {"u": 0}}})
        );
        let mut v = json!({"m": {"a~b/c": 1, "d": 2}});
        remove_pointer(&mut v, "/m/a~0b~1c");
        assert_eq!(v, json!({"m": {"d": 2}}));
    }
}
