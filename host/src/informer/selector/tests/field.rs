//! Field selectors: what the API server accepts, refuses and matches.

use super::*;

#[test]
fn field_selectors_are_limited_to_what_the_server_supports() {
    let kinds = crate::kind::KindRegistry::builtin();
    let kind = |r: &str| {
        kinds
            .resolve(&crate::kind::KindRef::Resource(r.into()))
            .unwrap()
    };
    let sel = |s: &str| FieldSelector::parse(s).unwrap();
    sel("spec.nodeName=n,status.phase!=Running,metadata.namespace=x")
        .check_supported(&kind("pods"))
        .unwrap();
    let e = sel("spec.nodeName=n")
        .check_supported(&kind("configmaps"))
        .unwrap_err();
    assert!(
        e.contains("configmaps") && e.contains("spec.nodeName") && e.contains("metadata.name"),
        "{e}"
    );
    // Cluster-scoped kinds have no metadata.namespace.
    assert!(
        sel("metadata.namespace=x")
            .check_supported(&kind("nodes"))
            .is_err()
    );
    sel("spec.unschedulable=true")
        .check_supported(&kind("nodes"))
        .unwrap();
    // CRDs: whatever their selectableFields say; not known here.
    let widget = KindInfo::new("example.com", "v1", "Widget", "widgets", true);
    sel("spec.color=red").check_supported(&widget).unwrap();
}

/// A field set written out in a test table.
type Fields = &'static [(&'static str, &'static str)];

const NAME_X: Fields = &[("metadata.name", "x")];
const NAME_Y: Fields = &[("metadata.name", "y")];

/// Field selectors the API server accepts, from apimachinery's rules
/// (`pkg/fields/selector.go`: split at unescaped commas, sort, skip empty
/// terms, split each at its first `!=`/`==`/`=`, unescape the value):
/// the input, its requirements (field, operator, unescaped value) in
/// parsed order, the canonical text, and whether field sets match. Each
/// row was checked against apimachinery v0.35.8 (`fieldselprobe`), and
/// `tests/tests/field_selectors.rs` checks them again on every run.
#[allow(clippy::type_complexity)]
const ACCEPTED: &[(&str, &[(&str, &str, &str)], &str, &[(Fields, bool)])] = &[
    // Empty: everything.
    ("", &[], "", &[(&[], true), (NAME_X, true)]),
    (",", &[], "", &[(&[], true)]),
    (",,,", &[], "", &[(NAME_X, true)]),
    // `=`, `==` (printed `=`) and `!=`; a missing field is "".
    (
        "metadata.name=x",
        &[("metadata.name", "=", "x")],
        "metadata.name=x",
        &[(NAME_X, true), (NAME_Y, false), (&[], false)],
    ),
    (
        "metadata.name==x",
        &[("metadata.name", "=", "x")],
        "metadata.name=x",
        &[(NAME_X, true), (NAME_Y, false)],
    ),
    (
        "metadata.name!=x",
        &[("metadata.name", "!=", "x")],
        "metadata.name!=x",
        &[(NAME_X, false), (NAME_Y, true), (&[], true)],
    ),
    // Empty values.
    (
        "metadata.name=",
        &[("metadata.name", "=", "")],
        "metadata.name=",
        &[(&[], true), (NAME_X, false)],
    ),
    (
        "metadata.name!=",
        &[("metadata.name", "!=", "")],
        "metadata.name!=",
        &[(&[], false), (NAME_X, true)],
    ),
    (
        "a==",
        &[("a", "=", "")],
        "a=",
        &[(&[], true), (&[("a", "1")], false)],
    ),
    // Several terms: all must hold; sorted by their text, duplicates kept.
    (
        "status.phase=Running,metadata.name=x",
        &[
            ("metadata.name", "=", "x"),
            ("status.phase", "=", "Running"),
        ],
        "metadata.name=x,status.phase=Running",
        &[
            (&[("metadata.name", "x"), ("status.phase", "Running")], true),
            (
                &[("metadata.name", "x"), ("status.phase", "Pending")],
                false,
            ),
            (NAME_X, false),
        ],
    ),
    (
        "b=1,a=2,a=1",
        &[("a", "=", "1"), ("a", "=", "2"), ("b", "=", "1")],
        "a=1,a=2,b=1",
        &[(&[("a", "1"), ("b", "1")], false)],
    ),
    (
        "a=b\\,c,d!=e",
        &[("a", "=", "b,c"), ("d", "!=", "e")],
        "a=b\\,c,d!=e",
        &[
            (&[("a", "b,c")], true),
            (&[("a", "b,c"), ("d", "e")], false),
        ],
    ),
    (
        ",metadata.name=x,",
        &[("metadata.name", "=", "x")],
        "metadata.name=x",
        &[(NAME_X, true)],
    ),
    // Escapes: `\,`, `\=`, `\\` in a value are the character itself.
    (
        "metadata.name=a\\,b",
        &[("metadata.name", "=", "a,b")],
        "metadata.name=a\\,b",
        &[
            (&[("metadata.name", "a,b")], true),
            (&[("metadata.name", "a\\,b")], false),
        ],
    ),
    (
        "metadata.name=a\\=b",
        &[("metadata.name", "=", "a=b")],
        "metadata.name=a\\=b",
        &[(&[("metadata.name", "a=b")], true)],
    ),
    (
        "metadata.name=a\\\\b",
        &[("metadata.name", "=", "a\\b")],
        "metadata.name=a\\\\b",
        &[
            (&[("metadata.name", "a\\b")], true),
            (&[("metadata.name", "a\\\\b")], false),
        ],
    ),
    (
        "x=\\\\\\\\",
        &[("x", "=", "\\\\")],
        "x=\\\\\\\\",
        &[(&[("x", "\\\\")], true)],
    ),
    (
        "a=\\=",
        &[("a", "=", "=")],
        "a=\\=",
        &[(&[("a", "=")], true)],
    ),
    // The field is taken as written: a backslash, `!` or comma escape
    // stays in it.
    (
        "a\\,b=c",
        &[("a\\,b", "=", "c")],
        "a\\,b=c",
        &[(&[("a\\,b", "c")], true), (&[("a,b", "c")], false)],
    ),
    (
        "a!b=c",
        &[("a!b", "=", "c")],
        "a!b=c",
        &[(&[("a!b", "c")], true)],
    ),
    // Nothing is trimmed: spaces belong to the field and the value.
    (
        "metadata.name = x",
        &[("metadata.name ", "=", " x")],
        "metadata.name = x",
        &[(NAME_X, false), (&[("metadata.name ", " x")], true)],
    ),
    // An empty field and value together mean nothing; an empty field
    // alone is a term.
    ("=", &[], "", &[(NAME_X, true)]),
    ("!=", &[], "", &[(NAME_X, true)]),
    ("==", &[], "", &[(NAME_X, true)]),
    (
        "=x",
        &[("", "=", "x")],
        "=x",
        &[(&[], false), (&[("", "x")], true)],
    ),
    // Unicode values are plain text.
    (
        "metadata.name=héllo✓",
        &[("metadata.name", "=", "héllo✓")],
        "metadata.name=héllo✓",
        &[(&[("metadata.name", "héllo✓")], true)],
    ),
];

/// Field selectors the API server refuses, and the start of its error
/// text, which ours repeats before saying what to do.
const REFUSED: &[(&str, &str)] = &[
    (
        "metadata.name",
        "invalid selector: 'metadata.name'; can't understand 'metadata.name'",
    ),
    ("a=1,b", "invalid selector: 'a=1,b'; can't understand 'b'"),
    (
        "metadata.name=x,,y",
        "invalid selector: 'metadata.name=x,,y'; can't understand 'y'",
    ),
    // An unescaped comma ends the term.
    (
        "metadata.name=a,b",
        "invalid selector: 'metadata.name=a,b'; can't understand 'b'",
    ),
    // The first bad term in sorted order is the one named.
    ("z,a", "invalid selector: 'z,a'; can't understand 'a'"),
    // An unescaped `=` in a value (code point 61).
    (
        "metadata.name=a=b",
        "invalid field selector: unescaped character in value: 61",
    ),
    (
        "a=b!=c",
        "invalid field selector: unescaped character in value: 61",
    ),
    (
        "a===b",
        "invalid field selector: unescaped character in value: 61",
    ),
    (
        "a!==b",
        "invalid field selector: unescaped character in value: 61",
    ),
    // Only `\\`, `\,` and `\=` are escapes, and a value cannot end in `\`.
    (
        "metadata.name=a\\b",
        "invalid field selector: invalid escape sequence: \\b",
    ),
    (
        "x=a\\ b",
        "invalid field selector: invalid escape sequence: \\ ",
    ),
    (
        "metadata.name=a\\",
        "invalid field selector: invalid escape sequence: \\",
    ),
    (
        "b=\\,,a=\\x",
        "invalid field selector: invalid escape sequence: \\x",
    ),
];

fn field_lookup(set: Fields) -> impl Fn(&str) -> Option<&'static str> {
    move |k| set.iter().find(|(n, _)| *n == k).map(|(_, v)| *v)
}

#[test]
fn field_selector_grammar_is_the_api_servers() {
    for (input, want_reqs, canonical, sets) in ACCEPTED {
        let sel = FieldSelector::parse(input).unwrap_or_else(|e| panic!("{input:?}: {e}"));
        let reqs: Vec<(&str, &str, &str)> = sel
            .requirements()
            .map(|(field, op, value)| {
                let op = match op {
                    FieldOp::Equals => "=",
                    FieldOp::NotEquals => "!=",
                };
                (field, op, value)
            })
            .collect();
        assert_eq!(&reqs, want_reqs, "{input:?} requirements");
        assert_eq!(sel.to_string(), *canonical, "{input:?} canonical text");
        assert_eq!(sel.is_empty(), want_reqs.is_empty(), "{input:?} is_empty");
        // The canonical text means the same selector.
        let again = FieldSelector::parse(canonical).unwrap();
        assert_eq!(again.to_string(), *canonical, "{input:?} reparsed");
        for (set, want) in *sets {
            assert_eq!(
                sel.matches_fields(field_lookup(set)),
                *want,
                "{input:?} on {set:?}"
            );
            assert_eq!(
                again.matches_fields(field_lookup(set)),
                *want,
                "{input:?} reparsed on {set:?}"
            );
        }
    }
    for (input, server) in REFUSED {
        let e = FieldSelector::parse(input).expect_err(input).to_string();
        assert!(
            e.starts_with(server),
            "{input:?}: {e:?} does not start with {server:?}"
        );
        assert!(
            e.len() > server.len() + 10,
            "{input:?}: {e:?} says nothing to do"
        );
    }
}

#[test]
fn field_selector_errors_say_what_to_write() {
    let e = FieldSelector::parse("metadata.name=a=b").unwrap_err();
    assert_eq!(
        e,
        FieldSelectorError::Unescaped {
            term: "metadata.name=a=b".into(),
            character: '='
        }
    );
    assert!(e.to_string().contains(r"write it as \= in a value"), "{e}");
    let e = FieldSelector::parse(r"metadata.name=a\b").unwrap_err();
    assert!(e.to_string().contains(r"'metadata.name=a\b'"), "{e}");
    assert!(
        e.to_string().contains(r"write a literal backslash as \\"),
        "{e}"
    );
    let e = FieldSelector::parse("phase").unwrap_err();
    assert!(e.to_string().contains("FIELD=VALUE"), "{e}");
}

#[test]
fn field_selector_on_objects() {
    let o = KObject::from_value(
        serde_json::json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "n", "labels": {"a/b": "c"}},
            "spec": {"hostNetwork": true, "priority": 7, "nodeName": "a,b"},
            "status": {"phase": "Running"}}),
        StripOptions::default(),
    )
    .unwrap();
    for (sel, want) in [
        ("metadata.name=p", true),
        ("metadata.name==p", true),
        ("status.phase!=Pending", true),
        ("metadata.namespace=x", false),
        ("metadata.name=p,status.phase=Running", true),
        ("metadata.name=p,status.phase=Pending", false),
        // Spaces are part of the field and value.
        ("metadata.name = p", false),
        ("metadata.name= p", false),
        // Escaped values compare unescaped.
        (r"spec.nodeName=a\,b", true),
        // Booleans and numbers read as their text.
        ("spec.hostNetwork=true", true),
        ("spec.priority=7", true),
        // Missing fields and objects read as "".
        ("spec.missing=", true),
        ("spec=", true),
        // Dots separate keys; a `/` is part of one.
        ("metadata.labels.a/b=c", true),
        ("metadata/name=p", false),
    ] {
        let parsed = FieldSelector::parse(sel).unwrap_or_else(|e| panic!("{sel:?}: {e}"));
        assert_eq!(parsed.matches(&o), want, "{sel:?}");
    }
}

#[test]
fn field_selectors_over_a_request_s_limit_are_refused_and_errors_show_an_excerpt() {
    let e = FieldSelector::parse(&"a=b,".repeat(MAX_SELECTOR_BYTES / 4 + 1)).unwrap_err();
    assert_eq!(
        e,
        FieldSelectorError::TooLong {
            bytes: MAX_SELECTOR_BYTES + 4,
            max: MAX_SELECTOR_BYTES
        }
    );
    let long_term = "x".repeat(100_000);
    let e = FieldSelector::parse(&long_term).unwrap_err().to_string();
    assert_excerpted(&e, "(100000 bytes)");
}

/// The server's field set, not the object's JSON: computed and defaulted
/// fields read as the registries' `GetAttrs` write them.
#[test]
fn selectors_read_the_fields_the_server_computes() {
    use crate::object::{KObject, StripOptions};
    let obj = |v: serde_json::Value| KObject::from_value(v, StripOptions::default()).unwrap();
    let sel = |s: &str| FieldSelector::parse(s).unwrap();
    let node =
        obj(serde_json::json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}}));
    assert!(sel("spec.unschedulable=false").matches(&node));
    assert!(!sel("spec.unschedulable=true").matches(&node));
    let cordoned = obj(serde_json::json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "n"}, "spec": {"unschedulable": true}}));
    assert!(sel("spec.unschedulable=true").matches(&cordoned));
    let pod = obj(serde_json::json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "a"},
        "status": {"podIPs": [{"ip": "10.0.0.7"}, {"ip": "fd00::7"}]}}));
    assert!(sel("spec.hostNetwork=false").matches(&pod));
    assert!(sel("status.podIP=10.0.0.7").matches(&pod));
    let job = obj(serde_json::json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "j", "namespace": "a"}, "status": {"succeeded": 2}}));
    assert!(sel("status.successful=2").matches(&job));
    let fresh = obj(serde_json::json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "j", "namespace": "a"}}));
    assert!(sel("status.successful=0").matches(&fresh));
    let rc = obj(
        serde_json::json!({"apiVersion": "v1", "kind": "ReplicationController",
        "metadata": {"name": "r", "namespace": "a"}}),
    );
    assert!(sel("status.replicas=0").matches(&rc));
    let event = obj(serde_json::json!({"apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "e", "namespace": "a"}, "source": {"component": "kubelet"}}));
    assert!(sel("source=kubelet").matches(&event));
    // Anything else is the object's own field.
    assert!(sel("metadata.name=e,metadata.namespace=a").matches(&event));
}
