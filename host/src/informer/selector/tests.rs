use super::label::{Operator, Requirement};
use super::lexer::{Lexer, Token};
use super::parser::{Context, Parser};
use super::*;
use crate::kind::KindInfo;
use crate::object::{KObject, StripOptions};

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

fn obj(labels: serde_json::Value) -> KObject {
    KObject::from_value(
        serde_json::json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "n", "labels": labels},
            "status": {"phase": "Running"}}),
        StripOptions::default(),
    )
    .unwrap()
}

#[test]
fn label_selector_grammar() {
    let o = obj(serde_json::json!({"app": "web", "env": "prod"}));
    let m = o.meta();
    for (sel, want) in [
        ("", true),
        ("app=web", true),
        ("app==web", true),
        ("app!=web", false),
        ("app=web,env=dev", false),
        ("env in (prod, staging)", true),
        ("env notin (prod)", false),
        ("tier notin (db)", true),
        ("app", true),
        ("!app", false),
        ("!legacy", true),
        ("app in (web),!legacy,env", true),
    ] {
        assert_eq!(LabelSelector::parse(sel).unwrap().matches(m), want, "{sel}");
    }
    assert!(LabelSelector::parse("app=web,,x").is_err());
    assert!(LabelSelector::parse("env in prod").is_err());
    assert!(LabelSelector::parse("a b").is_err());
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

// Ported from k8s.io/apimachinery/pkg/labels/selector_test.go.

fn parse(s: &str) -> LabelSelector {
    LabelSelector::parse(s).unwrap_or_else(|e| panic!("{s:?}: {e}"))
}

/// A label set written out in a test table.
type Labels = &'static [(&'static str, &'static str)];

fn pairs<'a>(set: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<&'a str> {
    move |k| set.iter().find(|(n, _)| *n == k).map(|(_, v)| *v)
}

fn req(key: &str, op: Operator, values: &[&str]) -> Requirement {
    let values = values.iter().map(|v| (*v).to_owned()).collect();
    Requirement::new(key, op, values).unwrap()
}

fn tokens(s: &str) -> Vec<Token> {
    Parser::new(s).items.iter().map(|(t, _)| *t).collect()
}

#[test]
fn apimachinery_selector_parse() {
    // TestSelectorParse: good strings print back without their spaces.
    for s in [
        "x=a,y=b,z=c",
        "",
        "x!=a,y=b",
        "x=",
        "x= ",
        "x=,z= ",
        "x= ,z= ",
        "!x",
        "x>1",
        "x>1,z<5",
    ] {
        assert_eq!(parse(s).to_string(), s.replace(' ', ""), "{s:?}");
    }
    for s in ["x=a||y=b", "x==a==b", "!x=a", "x<a"] {
        assert!(LabelSelector::parse(s).is_err(), "{s:?}");
    }
}

#[test]
fn apimachinery_deterministic_parse() {
    assert_eq!(parse("x=a,a=x"), parse("a=x,x=a"));
    assert_eq!(parse("x=a,a=x").to_string(), "a=x,x=a");
}

#[test]
fn apimachinery_selector_matches() {
    // TestSelectorMatches and TestEverything.
    const LABELSET: Labels = &[("foo", "bar"), ("baz", "blah")];
    let cases: &[(&str, Labels, bool)] = &[
        ("", &[("x", "y")], true),
        ("x=y", &[("x", "y")], true),
        ("x=y,z=w", &[("x", "y"), ("z", "w")], true),
        ("x!=y,z!=w", &[("x", "z"), ("z", "a")], true),
        ("notin=in", &[("notin", "in")], true),
        ("x", &[("x", "z")], true),
        ("!x", &[("y", "z")], true),
        ("x>1", &[("x", "2")], true),
        ("x<1", &[("x", "0")], true),
        ("x=z", &[], false),
        ("x=y", &[("x", "z")], false),
        ("x=y,z=w", &[("x", "w"), ("z", "w")], false),
        ("x!=y,z!=w", &[("x", "z"), ("z", "w")], false),
        ("x", &[("y", "z")], false),
        ("!x", &[("x", "z")], false),
        ("x>1", &[("x", "0")], false),
        ("x<1", &[("x", "2")], false),
        ("foo=bar", LABELSET, true),
        ("baz=blah", LABELSET, true),
        ("foo=bar,baz=blah", LABELSET, true),
        ("foo=blah", LABELSET, false),
        ("baz=bar", LABELSET, false),
        ("foo=bar,foobar=bar,baz=blah", LABELSET, false),
    ];
    for (sel, set, want) in cases {
        assert_eq!(parse(sel).matches_labels(pairs(set)), *want, "{sel:?}");
    }
    assert!(parse("").is_empty());
    assert!(!parse("x").is_empty());
}

#[test]
fn apimachinery_lexer() {
    // TestLexer: the first token and its literal.
    for (s, want) in [
        ("", Token::End),
        (",", Token::Comma),
        ("notin", Token::NotIn),
        ("in", Token::In),
        ("=", Token::Equals),
        ("==", Token::DoubleEquals),
        (">", Token::GreaterThan),
        ("<", Token::LessThan),
        ("!", Token::DoesNotExist),
        ("!=", Token::NotEquals),
        ("(", Token::OpenPar),
        (")", Token::ClosedPar),
        ("~", Token::Identifier),
        ("||", Token::Identifier),
    ] {
        assert_eq!(Lexer { s, pos: 0 }.lex(), (want, s), "{s:?}");
    }
}

#[test]
fn apimachinery_lexer_sequence_and_lookahead() {
    // TestLexerSequence and TestParserLookahead (which adds the end).
    use Token::*;
    let cases: &[(&str, &[Token])] = &[
        (
            "key in ( value )",
            &[Identifier, In, OpenPar, Identifier, ClosedPar],
        ),
        (
            "key notin ( value )",
            &[Identifier, NotIn, OpenPar, Identifier, ClosedPar],
        ),
        (
            "key in ( value1, value2 )",
            &[
                Identifier, In, OpenPar, Identifier, Comma, Identifier, ClosedPar,
            ],
        ),
        ("key", &[Identifier]),
        ("!key", &[DoesNotExist, Identifier]),
        ("()", &[OpenPar, ClosedPar]),
        ("", &[]),
        (
            "x in (),y",
            &[Identifier, In, OpenPar, ClosedPar, Comma, Identifier],
        ),
        (
            "== != (), = notin",
            &[
                DoubleEquals,
                NotEquals,
                OpenPar,
                ClosedPar,
                Comma,
                Equals,
                NotIn,
            ],
        ),
        ("key>2", &[Identifier, GreaterThan, Identifier]),
        ("key<1", &[Identifier, LessThan, Identifier]),
    ];
    for (s, want) in cases {
        let mut want = want.to_vec();
        want.push(End);
        assert_eq!(tokens(s), want, "{s:?}");
    }
    // Lookahead and consume agree, and only the Values context reads
    // `in`/`notin` as identifiers.
    let mut p = Parser::new("in notin");
    assert_eq!(p.lookahead(Context::KeyAndOperator), (In, "in"));
    assert_eq!(p.lookahead(Context::Values), (Identifier, "in"));
    assert_eq!(p.consume(Context::KeyAndOperator), (In, "in"));
    assert_eq!(p.consume(Context::Values), (Identifier, "notin"));
    assert_eq!(p.consume(Context::Values), (End, ""));
}

#[test]
fn apimachinery_parse_operator() {
    // TestParseOperator.
    for (s, want) in [
        ("in", Ok(Operator::In)),
        ("=", Ok(Operator::Equals)),
        ("==", Ok(Operator::DoubleEquals)),
        (">", Ok(Operator::GreaterThan)),
        ("<", Ok(Operator::LessThan)),
        ("notin", Ok(Operator::NotIn)),
        ("!=", Ok(Operator::NotEquals)),
        ("!", Err("'!'")),
        ("exists", Err("'exists'")),
        ("(", Err("'('")),
    ] {
        let got = Parser::new(s).parse_operator();
        match want {
            Ok(op) => assert_eq!(got, Ok(op), "{s:?}"),
            Err(named) => {
                let e = got.unwrap_err();
                assert_eq!(
                    e,
                    format!("found {named}, expected: in, notin, =, ==, !=, >, <")
                );
            }
        }
    }
}

#[test]
fn apimachinery_requirement_constructor() {
    // TestRequirementConstructor (less x18: an unsupported operator is
    // unrepresentable here); the error must name what is wrong.
    use Operator::*;
    let a254 = "a".repeat(254);
    let cases: &[(&str, Operator, &[&str], Option<&str>)] = &[
        ("x1", In, &[], Some("values set can't be empty")),
        ("x2", NotIn, &[], Some("values set can't be empty")),
        ("x3", In, &["foo"], None),
        ("x4", NotIn, &["foo"], None),
        ("x5", Equals, &["bar", "foo"], Some("one single value")),
        ("x6", Exists, &[], None),
        ("x7", DoesNotExist, &[], None),
        ("x8", Exists, &["foo"], Some("values set must be empty")),
        ("x9", In, &["bar"], None),
        ("x10", In, &["bar"], None),
        ("x11", GreaterThan, &["1"], None),
        ("x12", LessThan, &["6"], None),
        (
            "x13",
            GreaterThan,
            &[],
            Some("exactly one value is required"),
        ),
        ("x14", GreaterThan, &["bar"], Some(r#""bar" for key "x14""#)),
        (
            "x15",
            LessThan,
            &["bar"],
            Some("the value must be an integer"),
        ),
        (&a254, Exists, &[], Some("invalid label key \"aaaa")),
        (
            "x16",
            Equals,
            &[&a254],
            Some("must be no more than 63 bytes"),
        ),
        (
            "x17",
            Equals,
            &["a b"],
            Some(r#"label value "a b" for key "x17""#),
        ),
    ];
    for (key, op, values, want) in cases {
        let values = values.iter().map(|v| (*v).to_owned()).collect();
        match (Requirement::new(key, *op, values), want) {
            (Ok(_), None) => {}
            (Err(e), Some(part)) => assert!(e.contains(part), "{key}: {e}"),
            (got, _) => panic!("{key}: {got:?}, want error {want:?}"),
        }
    }
    // ValidatedSelectorFromSet: a 64-character value.
    let long = "axahm2EJ8Phiephe2eixohbee9eGeiyees1thuozi1xoh0GiuH3diewi8iem7Nui";
    let e = LabelSelector::parse(&format!("Key={long}")).unwrap_err();
    assert!(
        e.reason.contains(long) && e.reason.contains("63 bytes"),
        "{e}"
    );
}

#[test]
fn apimachinery_to_string() {
    // TestToString (less the case with a zero-value Requirement, which
    // cannot be built here). Requirements print in the order given.
    use Operator::*;
    let cases: &[(&[Requirement], &str)] = &[
        (
            &[
                req("x", In, &["abc", "def"]),
                req("y", NotIn, &["jkl"]),
                req("z", Exists, &[]),
            ],
            "x in (abc,def),y notin (jkl),z",
        ),
        (
            &[
                req("x", NotIn, &["abc", "def"]),
                req("y", NotEquals, &["jkl"]),
                req("z", DoesNotExist, &[]),
            ],
            "x notin (abc,def),y!=jkl,!z",
        ),
        (
            &[
                req("x", NotIn, &["abc"]),
                req("y", In, &["jkl", "mno"]),
                req("z", NotIn, &[""]),
            ],
            "x notin (abc),y in (jkl,mno),z notin ()",
        ),
        (
            &[
                req("x", Equals, &["abc"]),
                req("y", DoubleEquals, &["jkl"]),
                req("z", NotEquals, &["a"]),
                req("z", Exists, &[]),
            ],
            "x=abc,y==jkl,z!=a,z",
        ),
        (
            &[
                req("x", GreaterThan, &["2"]),
                req("y", LessThan, &["8"]),
                req("z", Exists, &[]),
            ],
            "x>2,y<8,z",
        ),
        // Values print sorted however they were given.
        (&[req("x", In, &["b", "a"])], "x in (a,b)"),
    ];
    for (reqs, want) in cases {
        let sel = LabelSelector {
            reqs: reqs.to_vec(),
        };
        assert_eq!(sel.to_string(), *want);
    }
}

#[test]
fn apimachinery_requirement_selector_matching() {
    // TestRequirementSelectorMatching (less the zero-value Requirement).
    use Operator::*;
    let cases: &[(Labels, &[Requirement], bool)] = &[
        (
            &[("x", "foo"), ("y", "baz")],
            &[req("x", In, &["foo"]), req("y", NotIn, &["alpha"])],
            true,
        ),
        (
            &[("x", "foo"), ("y", "baz")],
            &[req("x", In, &["foo"]), req("y", In, &["alpha"])],
            false,
        ),
        (
            &[("y", "")],
            &[req("x", NotIn, &[""]), req("y", Exists, &[])],
            true,
        ),
        (
            &[("y", "")],
            &[req("x", DoesNotExist, &[]), req("y", Exists, &[])],
            true,
        ),
        (
            &[("y", "")],
            &[req("x", NotIn, &[""]), req("y", DoesNotExist, &[])],
            false,
        ),
        (&[("y", "baz")], &[req("x", In, &[""])], false),
        (&[("z", "2")], &[req("z", GreaterThan, &["1"])], true),
        (&[("z", "v2")], &[req("z", GreaterThan, &["1"])], false),
    ];
    for (set, reqs, want) in cases {
        let sel = LabelSelector {
            reqs: reqs.to_vec(),
        };
        assert_eq!(sel.matches_labels(pairs(set)), *want, "{sel} on {set:?}");
    }
}

#[test]
fn apimachinery_set_selector_parser() {
    // TestSetSelectorParser: (input, the requirements it parses to when
    // valid and compared, valid).
    use Operator::*;
    let cases: Vec<(&str, Option<Vec<Requirement>>, bool)> = vec![
        ("", Some(vec![]), true),
        ("\rx", Some(vec![req("x", Exists, &[])]), true),
        (
            "this-is-a-dns.domain.com/key-with-dash",
            Some(vec![req(
                "this-is-a-dns.domain.com/key-with-dash",
                Exists,
                &[],
            )]),
            true,
        ),
        (
            "this-is-another-dns.domain.com/key-with-dash in (so,what)",
            Some(vec![req(
                "this-is-another-dns.domain.com/key-with-dash",
                In,
                &["so", "what"],
            )]),
            true,
        ),
        (
            "0.1.2.domain/99 notin (10.10.100.1, tick.tack.clock)",
            Some(vec![req(
                "0.1.2.domain/99",
                NotIn,
                &["10.10.100.1", "tick.tack.clock"],
            )]),
            true,
        ),
        (
            "foo  in\t (abc)",
            Some(vec![req("foo", In, &["abc"])]),
            true,
        ),
        (
            "x notin\n (abc)",
            Some(vec![req("x", NotIn, &["abc"])]),
            true,
        ),
        (
            "x  notin\t\t\t(abc,def)",
            Some(vec![req("x", NotIn, &["abc", "def"])]),
            true,
        ),
        (
            "x in (abc,def)",
            Some(vec![req("x", In, &["abc", "def"])]),
            true,
        ),
        ("x in (abc,)", Some(vec![req("x", In, &["", "abc"])]), true),
        ("x in (abc,abc)", Some(vec![req("x", In, &["abc"])]), true),
        ("x in ()", Some(vec![req("x", In, &[""])]), true),
        ("x in (a,,)", Some(vec![req("x", In, &["", "a"])]), true),
        ("x in (a,,,)", Some(vec![req("x", In, &["", "a"])]), true),
        ("x in (a,,,,,,)", Some(vec![req("x", In, &["", "a"])]), true),
        (
            "x in (a,,a,,a,,a,,)",
            Some(vec![req("x", In, &["", "a"])]),
            true,
        ),
        (
            "x notin (abc,,def),bar,z in (),w",
            Some(vec![
                req("bar", Exists, &[]),
                req("w", Exists, &[]),
                req("x", NotIn, &["", "abc", "def"]),
                req("z", In, &[""]),
            ]),
            true,
        ),
        // Upstream does not compare this one (its expected order is
        // unsorted); here the sorted result is.
        (
            "x,y in (a)",
            Some(vec![req("x", Exists, &[]), req("y", In, &["a"])]),
            true,
        ),
        ("x=a", Some(vec![req("x", Equals, &["a"])]), true),
        ("x>1", Some(vec![req("x", GreaterThan, &["1"])]), true),
        ("x<7", Some(vec![req("x", LessThan, &["7"])]), true),
        (
            "x=a,y!=b",
            Some(vec![req("x", Equals, &["a"]), req("y", NotEquals, &["b"])]),
            true,
        ),
        (
            "x=a,y!=b,z in (h,i,j)",
            Some(vec![
                req("x", Equals, &["a"]),
                req("y", NotEquals, &["b"]),
                req("z", In, &["h", "i", "j"]),
            ]),
            true,
        ),
        ("x=a||y=b", None, false),
        ("x,,y", None, false),
        (",x,y", None, false),
        ("x nott in (y)", None, false),
        ("x notin ( )", Some(vec![req("x", NotIn, &[""])]), true),
        (
            "x notin (, a)",
            Some(vec![req("x", NotIn, &["", "a"])]),
            true,
        ),
        ("a in (xyz),", None, false),
        ("a in (xyz)b notin ()", None, false),
        ("a ", Some(vec![req("a", Exists, &[])]), true),
        (
            "a in (x,y,notin, z,in)",
            Some(vec![req("a", In, &["in", "notin", "x", "y", "z"])]),
            true,
        ),
        ("a in (xyz abc)", None, false),
        ("a notin(", None, false),
        ("a (", None, false),
        ("(", None, false),
        // TestMatchesNothing's selectors, contradictory ones included,
        // all parse.
        ("a,!a", None, true),
        ("a=b,a!=b", None, true),
        ("a in (b),a notin (b)", None, true),
    ];
    for (s, want, valid) in cases {
        match LabelSelector::parse(s) {
            Ok(sel) => {
                assert!(valid, "{s:?} parsed as {sel}");
                if let Some(want) = want {
                    assert_eq!(sel.reqs, want, "{s:?}");
                }
            }
            Err(e) => assert!(!valid, "{e}"),
        }
    }
}

#[test]
fn errors_name_the_offending_part() {
    for (s, part) in [
        ("a,", "found end of string, expected: identifier after ','"),
        (
            ",a",
            "found ',', expected: !, identifier, or 'end of string'",
        ),
        ("a b", "found 'b', expected: in, notin, =, ==, !=, >, <"),
        ("!a=b", "found '=', expected: ',' or 'end of string'"),
        ("x in a", "found 'a' expected: '('"),
        ("x in (a b)", "found 'b', expected: ',' or ')'"),
        ("x in (a,=)", "found '=', expected: ',', or identifier"),
        ("x in (=)", "found '=', expected: ',', ')' or identifier"),
        ("x=(a)", "found '(', expected: identifier"),
        ("!", "found end of string, expected: identifier"),
        ("x>a", r#"invalid value "a" for key "x""#),
        ("x=a_", r#"invalid label value "a_" for key "x""#),
        (
            "A.com/b",
            r#"invalid label key "A.com/b": prefix part a lowercase"#,
        ),
        (
            "a/b/c",
            "invalid label key \"a/b/c\": a valid label key must",
        ),
        ("/a", "prefix part must be non-empty"),
        ("a/", "name part must be non-empty"),
        ("x=é", r#"invalid label value "é""#),
    ] {
        let e = LabelSelector::parse(s).unwrap_err();
        assert_eq!(e.selector, s);
        assert!(e.reason.contains(part), "{s:?}: {e}");
    }
    // Both problems with one value are reported.
    let e = LabelSelector::parse("x>-1_").unwrap_err();
    assert!(
        e.reason.contains("integer") && e.reason.contains("label value"),
        "{e}"
    );
    // The Display wraps the reason with the selector.
    let e = LabelSelector::parse("a b").unwrap_err();
    assert!(
        e.to_string()
            .starts_with("invalid selector \"a b\": unable to parse requirement: ")
    );
}

#[test]
fn key_and_value_limits() {
    let name63 = "n".repeat(63);
    let prefix253 = format!(
        "{}.{}.{}.{}",
        "p".repeat(63),
        "p".repeat(63),
        "p".repeat(63),
        "p".repeat(61)
    );
    assert_eq!(prefix253.len(), 253);
    parse(&format!("{prefix253}/{name63}=v"));
    parse(&format!("x={name63}"));
    for bad in [
        format!("{prefix253}p/{name63}"),
        format!("{prefix253}/{name63}n"),
        format!("x={name63}v"),
        format!("x in (a,{name63}v)"),
    ] {
        let e = LabelSelector::parse(&bad).unwrap_err();
        assert!(e.reason.contains("must be no more than"), "{e}");
    }
    // A subdomain label may exceed 63 characters: the regex has no limit.
    parse(&format!("{}.com/a", "p".repeat(64)));
}

#[test]
fn lexer_quirks_match_apimachinery() {
    // A NUL byte ends the token before it (and is consumed), or the
    // selector where a token would start.
    assert_eq!(parse("x,\0y").to_string(), "x,y");
    assert_eq!(parse("x\0").to_string(), "x");
    assert!(parse("\0x,y").is_empty());
    assert!(LabelSelector::parse("x\0y").is_err());
    // Only space, tab, CR and LF separate; other blanks are key bytes.
    assert!(LabelSelector::parse("x\u{b}").is_err());
    // `<=` is `<` then `=`; `!==` is `!=` then `=`.
    assert!(LabelSelector::parse("x<=1").is_err());
    let e = LabelSelector::parse("x!==").unwrap_err();
    assert!(e.reason.ends_with("found '=', expected: identifier"), "{e}");
}

#[test]
fn canonical_text_reparses_to_the_same_selector() {
    for s in [
        "b in (y,x,,x),!a,c=d,c==e,c!=f,d>1,d<0,in notin (in),e",
        "x in ()",
        "x=",
    ] {
        let sel = parse(s);
        assert_eq!(parse(&sel.to_string()), sel, "{s:?} -> {sel}");
    }
    assert_eq!(
        parse("c=d, !b ,a in (y,x)").to_string(),
        "a in (x,y),!b,c=d"
    );
}

#[test]
fn gt_lt_need_integers_on_both_sides() {
    let sel = parse("n>1");
    for (value, want) in [
        ("2", true),
        ("1", false),
        ("+2", true),
        ("-5", false),
        ("2.5", false),
        ("0x10", false),
        ("99999999999999999999", false),
        ("", false),
    ] {
        assert_eq!(
            sel.matches_labels(pairs(&[("n", value)])),
            want,
            "{value:?}"
        );
    }
    assert!(!sel.matches_labels(pairs(&[])));
    // Negative bounds are not label values: `n<-3` does not parse.
    assert!(LabelSelector::parse("n<-3").is_err());
    assert!(parse("n<0").matches_labels(pairs(&[("n", "-4")])));
}

/// The golden file holds what the real apimachinery (v0.35.8) `Parse`,
/// `String` and `Matches` give for ~1000 selectors: every verdict,
/// canonical text and match must agree.
#[test]
fn agrees_with_apimachinery_golden() {
    let mut lines = include_str!("../selector_golden.jsonl")
        .lines()
        .filter(|l| !l.starts_with('#'));
    let header: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    let sets: Vec<Vec<(String, String)>> = header["label_sets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|set| {
            set.as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
                .collect()
        })
        .collect();
    let mut count = 0;
    for line in lines {
        let case: Vec<Option<String>> = serde_json::from_str(line).unwrap();
        let [Some(s), canonical, matches @ ..] = &case[..] else {
            panic!("bad golden line {line}");
        };
        let matches = matches.first().cloned().flatten();
        let got = LabelSelector::parse(s);
        match (&got, &canonical) {
            (Ok(sel), Some(want)) => {
                assert_eq!(&sel.to_string(), want, "{s:?}");
                assert_eq!(&parse(want), sel, "{s:?} reparsed");
                let got: String = sets
                    .iter()
                    .map(|set| {
                        let lookup =
                            |k: &str| set.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
                        if sel.matches_labels(lookup) { '1' } else { '0' }
                    })
                    .collect();
                assert_eq!(Some(got), matches, "{s:?} matches");
            }
            (Err(_), None) => {}
            _ => panic!("{s:?}: got {got:?}, apimachinery gives {canonical:?}"),
        }
        count += 1;
    }
    assert!(count > 1000, "{count} golden cases");
}
