//! Ported from k8s.io/apimachinery/pkg/labels/selector_test.go.

use super::*;

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
