//! Label selectors: this port's own checks, and the golden file of what
//! the real apimachinery gives.

use super::*;

#[test]
fn label_selector_grammar() {
    let o = obj(serde_json::json!({"app": "web", "env": "prod"}));
    let m = &o;
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
    let mut lines = include_str!("../../selector_golden.jsonl")
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

#[test]
fn selectors_over_a_request_s_limit_are_refused_and_errors_show_an_excerpt() {
    // A requirement per two bytes: exactly at the cap it parses.
    let mut at_cap = "a,".repeat(MAX_SELECTOR_BYTES / 2);
    at_cap.pop();
    at_cap.push('b');
    assert_eq!(at_cap.len(), MAX_SELECTOR_BYTES);
    assert_eq!(parse(&at_cap).reqs.len(), MAX_SELECTOR_BYTES / 2);

    at_cap.push('c');
    let e = LabelSelector::parse(&at_cap).unwrap_err().to_string();
    assert_excerpted(&e, "it is 1048577 bytes, over the 1048576");

    // A key of a million slashes: refused as a key of more than two parts,
    // and named by its start.
    let slashes = "/0".repeat(MAX_SELECTOR_BYTES / 2);
    let e = LabelSelector::parse(&slashes).unwrap_err().to_string();
    assert!(e.contains("a valid label key must consist of"), "{e}");
    assert_excerpted(&e, "(1048576 bytes)");
}
