//! The selector parsers' tests, by what they check: `field` the field
//! selectors the API server accepts and refuses, `apimachinery` ports of
//! `k8s.io/apimachinery/pkg/labels/selector_test.go`, `label` this port's
//! own label-selector checks and the golden file of the real apimachinery.

use super::label::{Operator, Requirement};
use super::lexer::{Lexer, Token};
use super::parser::{Context, Parser};
use super::*;
use crate::kind::KindInfo;
use crate::object::{KObject, StripOptions};

mod apimachinery;
mod field;
mod label;

fn obj(labels: serde_json::Value) -> KObject {
    KObject::from_value(
        serde_json::json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "n", "labels": labels},
            "status": {"phase": "Running"}}),
        StripOptions::default(),
    )
    .unwrap()
}

/// An error that quotes long text by an excerpt: it names the text's
/// length (`note`) and stays short, not a copy of the text.
fn assert_excerpted(e: &str, note: &str) {
    assert!(e.contains(note), "{e}");
    assert!(
        e.len() < 1500,
        "the error copies the text: {} bytes",
        e.len()
    );
}

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

/// Every token of `s`, the final `End` included, as the parser consumes
/// them in the context that reads `in` and `notin` as themselves.
fn tokens(s: &str) -> Vec<Token> {
    let mut p = Parser::new(s);
    let mut out = Vec::new();
    loop {
        let (t, _) = p.consume(Context::KeyAndOperator);
        out.push(t);
        if t == Token::End {
            return out;
        }
    }
}
