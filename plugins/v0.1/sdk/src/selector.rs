//! Kubernetes label selectors, parsed and matched in the guest.
//!
//! The grammar is kubectl's: requirements separated by commas, each one of
//! `key=value` (or `key==value`), `key!=value`, `key in (a,b)`,
//! `key notin (a,b)`, `key` (exists), `!key` (does not exist), `key>N`,
//! `key<N`. The empty selector matches everything. `!=` and `notin` also
//! match objects without the label, as in Kubernetes.
//!
//! ```
//! use kubewasm_sdk::selector::Selector;
//! let sel = Selector::parse("env in (prod,staging),!legacy").unwrap();
//! assert!(sel.matches_with(|k| (k == "env").then_some("prod")));
//! assert!(!sel.matches_with(|_| None));
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// One requirement of a selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requirement {
    /// `key=value`, `key==value`.
    Equals(String, String),
    /// `key!=value`: the label is absent or differs.
    NotEquals(String, String),
    /// `key in (a,b)`.
    In(String, Vec<String>),
    /// `key notin (a,b)`: the label is absent or none of them.
    NotIn(String, Vec<String>),
    /// `key`: the label is present.
    Exists(String),
    /// `!key`: the label is absent.
    DoesNotExist(String),
    /// `key>N`: the label is an integer greater than N.
    GreaterThan(String, i64),
    /// `key<N`: the label is an integer less than N.
    LessThan(String, i64),
}

impl Requirement {
    /// Whether the labels, read through `get`, satisfy this requirement.
    pub fn matches<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        let int = |k: &str| get(k).and_then(|v| v.parse::<i64>().ok());
        match self {
            Self::Equals(k, v) => get(k) == Some(v.as_str()),
            Self::NotEquals(k, v) => get(k) != Some(v.as_str()),
            Self::In(k, vs) => get(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            Self::NotIn(k, vs) => get(k).is_none_or(|l| vs.iter().all(|v| v != l)),
            Self::Exists(k) => get(k).is_some(),
            Self::DoesNotExist(k) => get(k).is_none(),
            Self::GreaterThan(k, n) => int(k).is_some_and(|l| l > *n),
            Self::LessThan(k, n) => int(k).is_some_and(|l| l < *n),
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Equals(k, v) => write!(f, "{k}={v}"),
            Self::NotEquals(k, v) => write!(f, "{k}!={v}"),
            Self::In(k, vs) => write!(f, "{k} in ({})", vs.join(",")),
            Self::NotIn(k, vs) => write!(f, "{k} notin ({})", vs.join(",")),
            Self::Exists(k) => f.write_str(k),
            Self::DoesNotExist(k) => write!(f, "!{k}"),
            Self::GreaterThan(k, n) => write!(f, "{k}>{n}"),
            Self::LessThan(k, n) => write!(f, "{k}<{n}"),
        }
    }
}

/// A parsed label selector: every requirement must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector(Vec<Requirement>);

impl Selector {
    /// The selector that matches everything.
    pub fn everything() -> Self {
        Self::default()
    }

    /// Parses kubectl's selector syntax; the error names the problem.
    pub fn parse(text: &str) -> Result<Self, String> {
        Parser {
            tokens: lex(text),
            pos: 0,
        }
        .selector()
        .map(Self)
        .map_err(|e| format!("invalid label selector {text:?}: {e}"))
    }

    /// Whether this is the empty selector (matches everything).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The requirements, in order.
    pub fn requirements(&self) -> &[Requirement] {
        &self.0
    }

    /// Whether labels given as pairs (as in [`ObjectMeta`](crate::ObjectMeta))
    /// match.
    pub fn matches(&self, labels: &[(String, String)]) -> bool {
        self.matches_with(|key| {
            labels
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
        })
    }

    /// Whether labels given as a map match.
    pub fn matches_map(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matches_with(|key| labels.get(key).map(String::as_str))
    }

    /// Whether the labels, read through `get`, match.
    pub fn matches_with<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.0.iter().all(|r| r.matches(&get))
    }
}

impl FromStr for Selector {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// The canonical text, which [`Selector::parse`] reads back (and the host's
/// cache accepts).
impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token<'a> {
    Word(&'a str),
    Not,
    Equals,
    NotEquals,
    Greater,
    Less,
    Open,
    Close,
    Comma,
}

fn is_special(c: char) -> bool {
    matches!(c, '!' | '=' | '(' | ')' | ',' | '<' | '>') || c.is_whitespace()
}

fn lex(text: &str) -> Vec<Token<'_>> {
    let mut tokens = Vec::new();
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        let (token, len) = match c {
            c if c.is_whitespace() => {
                rest = &rest[c.len_utf8()..];
                continue;
            }
            '!' if rest.starts_with("!=") => (Token::NotEquals, 2),
            '!' => (Token::Not, 1),
            '=' if rest.starts_with("==") => (Token::Equals, 2),
            '=' => (Token::Equals, 1),
            '>' => (Token::Greater, 1),
            '<' => (Token::Less, 1),
            '(' => (Token::Open, 1),
            ')' => (Token::Close, 1),
            ',' => (Token::Comma, 1),
            _ => {
                let len = rest.find(is_special).unwrap_or(rest.len());
                (Token::Word(&rest[..len]), len)
            }
        };
        tokens.push(token);
        rest = &rest[len..];
    }
    tokens
}

fn is_name(s: &str) -> bool {
    let ends_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    s.len() <= 63
        && ends_ok(s.chars().next())
        && ends_ok(s.chars().last())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn check_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|part| {
                is_name(part) && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            })
    });
    if prefix_ok && is_name(name) {
        Ok(())
    } else {
        Err(format!("{key:?} is not a valid label key"))
    }
}

fn check_value(value: &str) -> Result<(), String> {
    if value.is_empty() || is_name(value) {
        Ok(())
    } else {
        Err(format!("{value:?} is not a valid label value"))
    }
}

struct Parser<'a> {
    tokens: Vec<Token<'a>>,
    pos: usize,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<Token<'a>> {
        self.tokens.get(self.pos).copied()
    }

    fn next(&mut self) -> Option<Token<'a>> {
        let t = self.peek();
        self.pos += 1;
        t
    }

    fn selector(&mut self) -> Result<Vec<Requirement>, String> {
        let mut reqs = Vec::new();
        if self.peek().is_none() {
            return Ok(reqs);
        }
        loop {
            reqs.push(self.requirement()?);
            match self.next() {
                None => return Ok(reqs),
                Some(Token::Comma) => {}
                Some(t) => return Err(format!("expected ',' but found {t:?}")),
            }
        }
    }

    fn key(&mut self) -> Result<String, String> {
        match self.next() {
            Some(Token::Word(k)) if k != "in" && k != "notin" => {
                check_key(k)?;
                Ok(k.to_owned())
            }
            Some(t) => Err(format!("expected a label key but found {t:?}")),
            None => Err("expected a label key".to_owned()),
        }
    }

    fn requirement(&mut self) -> Result<Requirement, String> {
        if self.peek() == Some(Token::Not) {
            self.pos += 1;
            return Ok(Requirement::DoesNotExist(self.key()?));
        }
        let key = self.key()?;
        Ok(match self.peek() {
            None | Some(Token::Comma) => Requirement::Exists(key),
            Some(Token::Equals) => {
                self.pos += 1;
                Requirement::Equals(key, self.value()?)
            }
            Some(Token::NotEquals) => {
                self.pos += 1;
                Requirement::NotEquals(key, self.value()?)
            }
            Some(Token::Word("in")) => {
                self.pos += 1;
                Requirement::In(key, self.set()?)
            }
            Some(Token::Word("notin")) => {
                self.pos += 1;
                Requirement::NotIn(key, self.set()?)
            }
            Some(Token::Greater) => {
                self.pos += 1;
                Requirement::GreaterThan(key, self.integer()?)
            }
            Some(Token::Less) => {
                self.pos += 1;
                Requirement::LessThan(key, self.integer()?)
            }
            Some(t) => {
                return Err(format!(
                    "expected an operator after {key:?} but found {t:?}"
                ));
            }
        })
    }

    /// A value after `=` or `!=`; may be empty (`key=` matches an empty label).
    fn value(&mut self) -> Result<String, String> {
        match self.peek() {
            Some(Token::Word(v)) => {
                self.pos += 1;
                check_value(v)?;
                Ok(v.to_owned())
            }
            None | Some(Token::Comma) => Ok(String::new()),
            Some(t) => Err(format!("expected a value but found {t:?}")),
        }
    }

    fn integer(&mut self) -> Result<i64, String> {
        match self.next() {
            Some(Token::Word(v)) => v.parse().map_err(|_| format!("{v:?} is not an integer")),
            _ => Err("expected an integer".to_owned()),
        }
    }

    fn set(&mut self) -> Result<Vec<String>, String> {
        if self.next() != Some(Token::Open) {
            return Err("expected '(' to open a set of values".to_owned());
        }
        let mut values = Vec::new();
        loop {
            match self.next() {
                Some(Token::Word(v)) => {
                    check_value(v)?;
                    values.push(v.to_owned());
                }
                Some(t) => return Err(format!("expected a value in the set but found {t:?}")),
                None => return Err("unterminated set of values".to_owned()),
            }
            match self.next() {
                Some(Token::Comma) => {}
                Some(Token::Close) => return Ok(values),
                Some(t) => return Err(format!("expected ',' or ')' but found {t:?}")),
                None => return Err("unterminated set of values".to_owned()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn matching() {
        let l = labels(&[
            ("app", "web"),
            ("env", "prod"),
            ("tier", ""),
            ("kubewasm.io/defaults", "enabled"),
            ("size", "12"),
        ]);
        for (s, want) in [
            ("", true),
            ("   ", true),
            ("app=web", true),
            ("app==web", true),
            ("app = web", true),
            ("app=db", false),
            ("app!=web", false),
            ("app!=db", true),
            ("missing!=x", true),
            ("env in (prod,dev)", true),
            ("env in (dev)", false),
            ("missing in (a)", false),
            ("env notin (prod)", false),
            ("env notin (dev, qa)", true),
            ("missing notin (a)", true),
            ("app", true),
            ("missing", false),
            ("!missing", true),
            ("!app", false),
            ("! app", false),
            ("tier=", true),
            ("app=,env=prod", false),
            ("kubewasm.io/defaults=enabled", true),
            ("kubewasm.io/defaults=disabled", false),
            ("app=web,env=dev", false),
            ("!legacy,app,env in (prod),app!=db", true),
            ("size>10", true),
            ("size<10", false),
            ("app>1", false),
        ] {
            let sel = Selector::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"));
            assert_eq!(sel.matches(&l), want, "{s}");
        }
    }

    #[test]
    fn map_and_closure_agree() {
        let sel = Selector::parse("a=1,!b").unwrap();
        let map = BTreeMap::from([("a".to_owned(), "1".to_owned())]);
        assert!(sel.matches_map(&map));
        assert!(sel.matches_with(|k| map.get(k).map(String::as_str)));
        assert!(Selector::everything().is_empty());
    }

    #[test]
    fn errors() {
        for bad in [
            "env in prod",
            "env in ()",
            "env in (a",
            "env in (a b)",
            "app=web prod",
            "app=web,",
            ",app",
            "=web",
            "!",
            "in",
            "app=we$b",
            "-app=x",
            "a/b/c=1",
            "/x=1",
            "size>ten",
            "app)",
        ] {
            let err = Selector::parse(bad).err();
            assert!(err.is_some(), "{bad:?} should not parse");
            assert!(err.unwrap().contains("invalid label selector"));
        }
    }

    #[test]
    fn display_round_trips() {
        let text = "app=web,env!=dev,tier in (a,b),x notin (c),y,!z,n>1,m<2";
        let sel: Selector = text.parse().unwrap();
        assert_eq!(sel.to_string(), text);
        assert_eq!(Selector::parse(&sel.to_string()).unwrap(), sel);
        assert_eq!(sel.requirements().len(), 8);
        assert_eq!(Selector::parse("a == b").unwrap().to_string(), "a=b");
    }
}
