//! Label and field selectors, with the grammar the API server accepts.
//!
//! [`LabelSelector`] is a port of apimachinery's `labels.Parse`
//! (`k8s.io/apimachinery/pkg/labels/selector.go`, v0.35): the same lexer,
//! parser, key and value validation, matching and canonical text. It is the
//! one implementation every plugin language reaches through the host, so a
//! selector must mean here exactly what it means to the API server.
//!
//! [`FieldSelector`] is a port of apimachinery's `fields.ParseSelector`
//! (`k8s.io/apimachinery/pkg/fields/selector.go`, v0.35.8) for the same
//! reason: the host refuses what the server refuses, sends the server's
//! canonical text, and the local cluster filters as a real one does.

use std::fmt;

use crate::kind::KindInfo;
use crate::object::{FieldValue, KObject, Meta};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid selector {selector:?}: {reason}")]
pub struct SelectorError {
    pub selector: String,
    pub reason: String,
}

/// apimachinery's `selection.Operator`. `=` and `==` stay distinct because
/// the canonical text prints each as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operator {
    In,
    NotIn,
    Equals,
    DoubleEquals,
    NotEquals,
    GreaterThan,
    LessThan,
    Exists,
    DoesNotExist,
}

/// One requirement, `Requirement` in apimachinery. Values are kept as
/// given; the parser hands them over sorted and deduplicated.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Requirement {
    key: String,
    op: Operator,
    values: Vec<String>,
}

/// A parsed label selector (`app=web,tier!=db,env in (a,b),!legacy,x>1`):
/// the AND of its requirements, sorted by key as apimachinery sorts them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    reqs: Vec<Requirement>,
}

/// Lexer tokens (apimachinery's `Token`, less `ErrorToken`, which its lexer
/// cannot produce: every special symbol alone is a token).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    End,
    ClosedPar,
    Comma,
    DoesNotExist,
    DoubleEquals,
    Equals,
    GreaterThan,
    Identifier,
    In,
    LessThan,
    NotEquals,
    NotIn,
    OpenPar,
}

/// apimachinery's `string2token`: the literals that are not identifiers.
fn keyword(lit: &[u8]) -> Option<Token> {
    Some(match lit {
        b")" => Token::ClosedPar,
        b"," => Token::Comma,
        b"!" => Token::DoesNotExist,
        b"==" => Token::DoubleEquals,
        b"=" => Token::Equals,
        b">" => Token::GreaterThan,
        b"in" => Token::In,
        b"<" => Token::LessThan,
        b"!=" => Token::NotEquals,
        b"notin" => Token::NotIn,
        b"(" => Token::OpenPar,
        _ => return None,
    })
}

fn is_whitespace(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_special(b: u8) -> bool {
    matches!(b, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

/// apimachinery's byte-wise `Lexer`. Identifiers are any run of bytes that
/// are not special symbols or whitespace (validation rejects the bad ones
/// later); every delimiter is ASCII, so literals are valid `&str` slices.
struct Lexer<'a> {
    s: &'a str,
    pos: usize,
}

impl<'a> Lexer<'a> {
    /// The next byte, advancing; 0 at the end. A NUL byte in the input
    /// reads as 0 too and is consumed, as in apimachinery: it ends the
    /// token it follows, or the whole selector where a token would start.
    fn read(&mut self) -> u8 {
        match self.s.as_bytes().get(self.pos) {
            Some(&b) => {
                self.pos += 1;
                b
            }
            None => 0,
        }
    }

    /// Only ever called after a `read` that returned a real byte.
    fn unread(&mut self) {
        self.pos = self.pos.saturating_sub(1);
    }

    fn slice(&self, start: usize, end: usize) -> &'a str {
        self.s.get(start..end).unwrap_or_default()
    }

    fn scan_id_or_keyword(&mut self) -> (Token, &'a str) {
        let start = self.pos;
        let mut end = start;
        loop {
            let ch = self.read();
            if ch == 0 {
                break;
            }
            if is_special(ch) || is_whitespace(ch) {
                self.unread();
                break;
            }
            end = self.pos;
        }
        let lit = self.slice(start, end);
        (keyword(lit.as_bytes()).unwrap_or(Token::Identifier), lit)
    }

    /// The longest run of special symbols that is a token, grown one byte
    /// at a time (`!=` and `==`; `<=` is `<` then `=`).
    fn scan_special_symbol(&mut self) -> (Token, &'a str) {
        let start = self.pos;
        let mut best = (Token::End, start);
        loop {
            let ch = self.read();
            if ch == 0 {
                break;
            }
            if !is_special(ch) {
                self.unread();
                break;
            }
            match self.s.as_bytes().get(start..self.pos).and_then(keyword) {
                Some(tok) => best = (tok, self.pos),
                None => {
                    self.unread();
                    break;
                }
            }
        }
        (best.0, self.slice(start, best.1))
    }

    fn lex(&mut self) -> (Token, &'a str) {
        let mut ch = self.read();
        while is_whitespace(ch) {
            ch = self.read();
        }
        if ch == 0 {
            return (Token::End, "");
        }
        self.unread();
        if is_special(ch) {
            self.scan_special_symbol()
        } else {
            self.scan_id_or_keyword()
        }
    }
}

/// Where the parser is: `in` and `notin` are operators only after a key;
/// anywhere else (`in in (notin)`) they are identifiers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Context {
    KeyAndOperator,
    Values,
}

/// apimachinery's recursive-descent `Parser` over the scanned tokens,
/// which always end with `Token::End`.
struct Parser<'a> {
    items: Vec<(Token, &'a str)>,
    position: usize,
}

/// How an error names the token it found: apimachinery prints the end of
/// the input as `''`, which names nothing.
fn found(tok: Token, lit: &str) -> String {
    if tok == Token::End {
        "end of string".to_owned()
    } else {
        format!("'{lit}'")
    }
}

impl<'a> Parser<'a> {
    fn new(selector: &'a str) -> Self {
        let mut lexer = Lexer {
            s: selector,
            pos: 0,
        };
        let mut items = Vec::new();
        loop {
            let item = lexer.lex();
            items.push(item);
            if item.0 == Token::End {
                break;
            }
        }
        Self { items, position: 0 }
    }

    fn lookahead(&self, context: Context) -> (Token, &'a str) {
        let (tok, lit) = self
            .items
            .get(self.position)
            .copied()
            .unwrap_or((Token::End, ""));
        match tok {
            Token::In | Token::NotIn if context == Context::Values => (Token::Identifier, lit),
            _ => (tok, lit),
        }
    }

    fn consume(&mut self, context: Context) -> (Token, &'a str) {
        let item = self.lookahead(context);
        self.position += 1;
        item
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, String> {
        let mut reqs = Vec::new();
        loop {
            let (tok, lit) = self.lookahead(Context::Values);
            match tok {
                Token::Identifier | Token::DoesNotExist => {
                    let req = self
                        .parse_requirement()
                        .map_err(|e| format!("unable to parse requirement: {e}"))?;
                    reqs.push(req);
                    let (t, l) = self.consume(Context::Values);
                    match t {
                        Token::End => return Ok(reqs),
                        Token::Comma => {
                            let (t2, l2) = self.lookahead(Context::Values);
                            if t2 != Token::Identifier && t2 != Token::DoesNotExist {
                                return Err(format!(
                                    "found {}, expected: identifier after ','",
                                    found(t2, l2)
                                ));
                            }
                        }
                        _ => {
                            return Err(format!(
                                "found {}, expected: ',' or 'end of string'",
                                found(t, l)
                            ));
                        }
                    }
                }
                Token::End => return Ok(reqs),
                _ => {
                    return Err(format!(
                        "found {}, expected: !, identifier, or 'end of string'",
                        found(tok, lit)
                    ));
                }
            }
        }
    }

    fn parse_requirement(&mut self) -> Result<Requirement, String> {
        let (key, op) = self.parse_key_and_infer_operator()?;
        if let Some(op) = op {
            return Requirement::new(key, op, Vec::new());
        }
        let op = self.parse_operator()?;
        let values = match op {
            Operator::In | Operator::NotIn => self.parse_values()?,
            _ => vec![self.parse_exact_value()?],
        };
        Requirement::new(key, op, values)
    }

    /// The key, with `Exists` or `DoesNotExist` when no binary operator can
    /// follow (`!key` never takes one: what follows is a parse error).
    fn parse_key_and_infer_operator(&mut self) -> Result<(&'a str, Option<Operator>), String> {
        let (mut tok, mut lit) = self.consume(Context::Values);
        let negated = tok == Token::DoesNotExist;
        if negated {
            (tok, lit) = self.consume(Context::Values);
        }
        if tok != Token::Identifier {
            return Err(format!("found {}, expected: identifier", found(tok, lit)));
        }
        validate_label_key(lit)?;
        if negated {
            return Ok((lit, Some(Operator::DoesNotExist)));
        }
        let (next, _) = self.lookahead(Context::Values);
        let op = matches!(next, Token::End | Token::Comma).then_some(Operator::Exists);
        Ok((lit, op))
    }

    fn parse_operator(&mut self) -> Result<Operator, String> {
        let (tok, lit) = self.consume(Context::KeyAndOperator);
        Ok(match tok {
            Token::In => Operator::In,
            Token::Equals => Operator::Equals,
            Token::DoubleEquals => Operator::DoubleEquals,
            Token::GreaterThan => Operator::GreaterThan,
            Token::LessThan => Operator::LessThan,
            Token::NotIn => Operator::NotIn,
            Token::NotEquals => Operator::NotEquals,
            _ => {
                return Err(format!(
                    "found {}, expected: in, notin, =, ==, !=, >, <",
                    found(tok, lit)
                ));
            }
        })
    }

    /// `(a,b,c)`, sorted and deduplicated like apimachinery's string set;
    /// `()` is the set holding the empty value.
    fn parse_values(&mut self) -> Result<Vec<String>, String> {
        let (tok, lit) = self.consume(Context::Values);
        if tok != Token::OpenPar {
            return Err(format!("found {} expected: '('", found(tok, lit)));
        }
        let (tok, lit) = self.lookahead(Context::Values);
        let mut values = match tok {
            Token::Identifier | Token::Comma => {
                let values = self.parse_identifiers_list()?;
                // parse_identifiers_list stops only before ')'.
                self.consume(Context::Values);
                values
            }
            Token::ClosedPar => {
                self.consume(Context::Values);
                vec![String::new()]
            }
            _ => {
                return Err(format!(
                    "found {}, expected: ',', ')' or identifier",
                    found(tok, lit)
                ));
            }
        };
        values.sort_unstable();
        values.dedup();
        Ok(values)
    }

    /// A comma-separated list of possibly empty values (`a,,b` holds `""`),
    /// up to but not including the `)`.
    fn parse_identifiers_list(&mut self) -> Result<Vec<String>, String> {
        let mut values: Vec<String> = Vec::new();
        loop {
            let (tok, lit) = self.consume(Context::Values);
            match tok {
                Token::Identifier => {
                    values.push(lit.to_owned());
                    let (tok2, lit2) = self.lookahead(Context::Values);
                    match tok2 {
                        Token::Comma => {}
                        Token::ClosedPar => return Ok(values),
                        _ => {
                            return Err(format!(
                                "found {}, expected: ',' or ')'",
                                found(tok2, lit2)
                            ));
                        }
                    }
                }
                Token::Comma => {
                    let (tok2, _) = self.lookahead(Context::Values);
                    // A comma first, last or doubled stands for "".
                    if values.is_empty() || matches!(tok2, Token::Comma | Token::ClosedPar) {
                        values.push(String::new());
                    }
                    if tok2 == Token::ClosedPar {
                        return Ok(values);
                    }
                }
                _ => {
                    return Err(format!(
                        "found {}, expected: ',', or identifier",
                        found(tok, lit)
                    ));
                }
            }
        }
    }

    /// The value after `=`, `==`, `!=`, `>` or `<`; none (`x=`) is "".
    fn parse_exact_value(&mut self) -> Result<String, String> {
        let (tok, _) = self.lookahead(Context::Values);
        if matches!(tok, Token::End | Token::Comma) {
            return Ok(String::new());
        }
        let (tok, lit) = self.consume(Context::Values);
        if tok == Token::Identifier {
            return Ok(lit.to_owned());
        }
        Err(format!("found {}, expected: identifier", found(tok, lit)))
    }
}

/// apimachinery's `RegexError`, verbatim (its doubled spaces included) so
/// messages read as the API server's do.
fn regex_error(msg: &str, re: &str, examples: &[&str]) -> String {
    let mut out = format!("{msg} (e.g. ");
    for (i, e) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push_str(&format!("'{e}', "));
    }
    out.push_str(&format!("regex used for validation is '{re}')"));
    out
}

const LABEL_KEY_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const LABEL_KEY_ERR: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_ERR: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_ERR: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
/// Longest label name part and label value.
const LABEL_MAX_LEN: usize = 63;
/// Longest DNS-1123 subdomain (a label key's prefix).
const DNS1123_SUBDOMAIN_MAX_LEN: usize = 253;

/// `^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`, without a regex engine.
fn is_label_name(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(f), Some(l)) => {
            f.is_ascii_alphanumeric()
                && l.is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// The DNS-1123 subdomain regex: dot-separated lowercase labels that start
/// and end with an alphanumeric. (The regex puts no length on a label.)
fn is_dns1123_subdomain(s: &str) -> bool {
    s.split('.').all(|label| {
        let b = label.as_bytes();
        match (b.first(), b.last()) {
            (Some(f), Some(l)) => {
                (f.is_ascii_lowercase() || f.is_ascii_digit())
                    && (l.is_ascii_lowercase() || l.is_ascii_digit())
                    && b.iter()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
            }
            _ => false,
        }
    })
}

/// apimachinery's `content.IsLabelKey`: the problems with `key`, if any.
fn label_key_errors(key: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = key.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_owned());
            } else {
                if prefix.len() > DNS1123_SUBDOMAIN_MAX_LEN {
                    errs.push(format!(
                        "prefix part must be no more than {DNS1123_SUBDOMAIN_MAX_LEN} bytes"
                    ));
                }
                if !is_dns1123_subdomain(prefix) {
                    errs.push(format!(
                        "prefix part {}",
                        regex_error(
                            DNS1123_SUBDOMAIN_ERR,
                            DNS1123_SUBDOMAIN_FMT,
                            &["example.com"]
                        )
                    ));
                }
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a valid label key {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(
                    LABEL_KEY_ERR,
                    LABEL_KEY_FMT,
                    &["MyName", "my.name", "123-abc"]
                )
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_owned());
    } else if name.len() > LABEL_MAX_LEN {
        errs.push(format!(
            "name part must be no more than {LABEL_MAX_LEN} bytes"
        ));
    }
    if !is_label_name(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                LABEL_KEY_ERR,
                LABEL_KEY_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// apimachinery's `content.IsLabelValue`: the problems with `value`.
fn label_value_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > LABEL_MAX_LEN {
        errs.push(format!("must be no more than {LABEL_MAX_LEN} bytes"));
    }
    if !value.is_empty() && !is_label_name(value) {
        errs.push(regex_error(
            LABEL_VALUE_ERR,
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

fn validate_label_key(key: &str) -> Result<(), String> {
    let errs = label_key_errors(key);
    if errs.is_empty() {
        Ok(())
    } else {
        Err(format!("invalid label key {key:?}: {}", errs.join("; ")))
    }
}

/// Go's `strconv.ParseInt(s, 10, 64)`, which `i64::from_str` matches:
/// optional sign, decimal digits, no spaces or underscores.
fn parse_int(s: &str) -> Option<i64> {
    s.parse().ok()
}

impl Requirement {
    /// apimachinery's `NewRequirement`: checks the key, the number of
    /// values the operator takes, integer values for `>`/`<` and every
    /// value; all problems are reported, in apimachinery's order.
    fn new(key: &str, op: Operator, values: Vec<String>) -> Result<Self, String> {
        let mut errs = Vec::new();
        if let Err(e) = validate_label_key(key) {
            errs.push(e);
        }
        match op {
            Operator::In | Operator::NotIn if values.is_empty() => {
                errs.push("for 'in', 'notin' operators, values set can't be empty".to_owned());
            }
            Operator::Equals | Operator::DoubleEquals | Operator::NotEquals
                if values.len() != 1 =>
            {
                errs.push(format!(
                    "exact-match compatibility requires one single value, got {values:?}"
                ));
            }
            Operator::Exists | Operator::DoesNotExist if !values.is_empty() => {
                errs.push(format!(
                    "values set must be empty for exists and does not exist, got {values:?}"
                ));
            }
            Operator::GreaterThan | Operator::LessThan => {
                if values.len() != 1 {
                    errs.push(format!(
                        "for 'Gt', 'Lt' operators, exactly one value is required, got {values:?}"
                    ));
                }
                for v in values.iter().filter(|v| parse_int(v).is_none()) {
                    errs.push(format!(
                        "invalid value {v:?} for key {key:?}: for 'Gt', 'Lt' operators, the value must be an integer"
                    ));
                }
            }
            _ => {}
        }
        for v in &values {
            let problems = label_value_errors(v);
            if !problems.is_empty() {
                errs.push(format!(
                    "invalid label value {v:?} for key {key:?}: {}",
                    problems.join("; ")
                ));
            }
        }
        if errs.is_empty() {
            Ok(Self {
                key: key.to_owned(),
                op,
                values,
            })
        } else {
            Err(errs.join("; "))
        }
    }

    /// apimachinery's `Requirement.Matches`: `!=` and `notin` match an
    /// absent label; `>` and `<` need the label to be an integer.
    fn matches<'l>(&self, label: &impl Fn(&str) -> Option<&'l str>) -> bool {
        let has = |v: &str| self.values.iter().any(|x| x == v);
        match self.op {
            Operator::In | Operator::Equals | Operator::DoubleEquals => {
                label(&self.key).is_some_and(has)
            }
            Operator::NotIn | Operator::NotEquals => label(&self.key).is_none_or(|v| !has(v)),
            Operator::Exists => label(&self.key).is_some(),
            Operator::DoesNotExist => label(&self.key).is_none(),
            Operator::GreaterThan | Operator::LessThan => {
                let (Some(actual), [bound]) = (label(&self.key).and_then(parse_int), &*self.values)
                else {
                    return false;
                };
                let Some(bound) = parse_int(bound) else {
                    return false;
                };
                if self.op == Operator::GreaterThan {
                    actual > bound
                } else {
                    actual < bound
                }
            }
        }
    }
}

/// apimachinery's `Requirement.String()`: `!k`, `k`, `k=v`, `k==v`,
/// `k!=v`, `k>v`, `k<v`, `k in (a,b)`, `k notin (a,b)`, values sorted.
impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.op == Operator::DoesNotExist {
            f.write_str("!")?;
        }
        f.write_str(&self.key)?;
        let (before, after) = match self.op {
            Operator::Exists | Operator::DoesNotExist => return Ok(()),
            Operator::Equals => ("=", ""),
            Operator::DoubleEquals => ("==", ""),
            Operator::NotEquals => ("!=", ""),
            Operator::GreaterThan => (">", ""),
            Operator::LessThan => ("<", ""),
            Operator::In => (" in (", ")"),
            Operator::NotIn => (" notin (", ")"),
        };
        let mut values: Vec<&str> = self.values.iter().map(String::as_str).collect();
        values.sort_unstable();
        write!(f, "{before}{}{after}", values.join(","))
    }
}

/// The canonical text apimachinery's `Selector.String()` prints:
/// requirements sorted by key, joined by `,` (`a in (x,y),!b,c=d`).
/// Parsing it gives the same selector back.
impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, req) in self.reqs.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{req}")?;
        }
        Ok(())
    }
}

impl LabelSelector {
    /// Parses `selector` as the API server's `labels.Parse` does; the error
    /// names the offending token, key or value. Empty (or blank) text is the
    /// selector that matches everything.
    pub fn parse(selector: &str) -> Result<Self, SelectorError> {
        let mut reqs = Parser::new(selector)
            .parse()
            .map_err(|reason| SelectorError {
                selector: selector.to_owned(),
                reason,
            })?;
        // Deterministic, as apimachinery's sort.Sort(ByKey); stable, so
        // requirements on one key keep their written order.
        reqs.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(Self { reqs })
    }

    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    pub fn matches(&self, meta: &Meta) -> bool {
        self.matches_labels(|k| meta.label(k))
    }

    /// Whether a label set matches, the set given as a lookup (`Meta`'s
    /// labels, a list of pairs a plugin sent, a map), so no caller has to
    /// copy its labels into one shape first.
    pub fn matches_labels<'l>(&self, label: impl Fn(&str) -> Option<&'l str>) -> bool {
        self.reqs.iter().all(|r| r.matches(&label))
    }
}

/// Why a field selector does not parse. Each message starts with the API
/// server's own text for the same mistake (apimachinery's `ParseSelector`),
/// then says how to write it.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum FieldSelectorError {
    /// A term with no `=`, `==` or `!=`.
    #[error(
        "invalid selector: '{selector}'; can't understand '{term}' \
         (write each comma-separated term as FIELD=VALUE, FIELD==VALUE or FIELD!=VALUE)"
    )]
    Term { selector: String, term: String },
    /// A backslash in a value before anything but `\`, `,` or `=`, or at its end.
    #[error(
        "invalid field selector: invalid escape sequence: {sequence} (in '{term}': \
         a value escapes only a backslash, comma or equals sign, as \\\\, \\, and \\=; \
         write a literal backslash as \\\\)"
    )]
    InvalidEscape { term: String, sequence: String },
    /// A `,` or `=` in a value that is not escaped. The server prints the
    /// character's code point, so this does too, then the character.
    #[error(
        "invalid field selector: unescaped character in value: {} ('{character}' in '{term}': \
         write it as \\{character} in a value)",
        u32::from(*character)
    )]
    Unescaped { term: String, character: char },
}

/// A field selector term's operator; `==` parses as `=`, as in apimachinery
/// (`hasTerm` and `notHasTerm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldOp {
    Equals,
    NotEquals,
}

/// One term: the field as written (no trimming, no validation: the server
/// refuses unknown fields later, per kind) and the unescaped value.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FieldRequirement {
    field: String,
    op: FieldOp,
    value: String,
}

impl fmt::Display for FieldRequirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = match self.op {
            FieldOp::Equals => "=",
            FieldOp::NotEquals => "!=",
        };
        write!(f, "{}{op}{}", self.field, escape_field_value(&self.value))
    }
}

/// A field selector (`metadata.name=x,status.phase!=Running`): a port of
/// apimachinery's `fields.ParseSelector` (`pkg/fields/selector.go`,
/// v0.35.8), so a subscription is accepted or refused exactly as the API
/// server would, and the local cluster filters as a real one does.
///
/// The grammar: comma-separated terms, each `FIELD=VALUE`, `FIELD==VALUE` or
/// `FIELD!=VALUE`, split at the first operator; nothing is trimmed; empty
/// terms are skipped. In a value `\`, `,` and `=` must be escaped (`\\`,
/// `\,`, `\=`) and no other escape exists; the field is taken as written.
/// Terms are kept in the order of their sorted text, as the server keeps
/// them, and a term with an empty field and an empty value means nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector {
    reqs: Vec<FieldRequirement>,
}

/// apimachinery's `EscapeValue`: `\`, `,` and `=` get a backslash.
fn escape_field_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// apimachinery's `splitTerms`: splits at commas not escaped by a
/// backslash; the terms keep their backslashes.
fn split_terms(selector: &str) -> Vec<&str> {
    if selector.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::with_capacity(1);
    let mut start = 0;
    let mut in_slash = false;
    for (i, c) in selector.char_indices() {
        if in_slash {
            in_slash = false;
        } else if c == '\\' {
            in_slash = true;
        } else if c == ',' {
            terms.push(&selector[start..i]);
            start = i + 1;
        }
    }
    terms.push(&selector[start..]);
    terms
}

/// apimachinery's `splitTerm`: the first place an operator starts (`!=`,
/// then `==`, then `=`) splits the term; the field cannot escape anything.
fn split_term(term: &str) -> Option<(&str, FieldOp, &str)> {
    const OPERATORS: [(&str, FieldOp); 3] = [
        ("!=", FieldOp::NotEquals),
        ("==", FieldOp::Equals),
        ("=", FieldOp::Equals),
    ];
    term.char_indices().find_map(|(i, _)| {
        OPERATORS.iter().find_map(|(text, op)| {
            term[i..]
                .strip_prefix(text)
                .map(|rhs| (&term[..i], *op, rhs))
        })
    })
}

/// apimachinery's `UnescapeValue`, its errors turned into ours for `term`.
fn unescape_value(value: &str, term: &str) -> Result<String, FieldSelectorError> {
    let mut out = String::with_capacity(value.len());
    let mut in_slash = false;
    for c in value.chars() {
        if in_slash {
            if !matches!(c, '\\' | ',' | '=') {
                return Err(FieldSelectorError::InvalidEscape {
                    term: term.to_owned(),
                    sequence: format!("\\{c}"),
                });
            }
            out.push(c);
            in_slash = false;
        } else if c == '\\' {
            in_slash = true;
        } else if matches!(c, ',' | '=') {
            return Err(FieldSelectorError::Unescaped {
                term: term.to_owned(),
                character: c,
            });
        } else {
            out.push(c);
        }
    }
    if in_slash {
        return Err(FieldSelectorError::InvalidEscape {
            term: term.to_owned(),
            sequence: "\\".to_owned(),
        });
    }
    Ok(out)
}

/// The JSON pointer of a dotted field label (`spec.nodeName` ->
/// `/spec/nodeName`); a `~` or `/` in a segment is escaped, so it names
/// that key and nothing deeper.
fn field_pointer(field: &str) -> String {
    let mut pointer = String::with_capacity(field.len() + 1);
    for segment in field.split('.') {
        pointer.push('/');
        pointer.push_str(&segment.replace('~', "~0").replace('/', "~1"));
    }
    pointer
}

impl FieldSelector {
    /// Parses `selector` as the API server's `fields.ParseSelector` does.
    /// Empty text, or only commas, is the selector that matches everything.
    /// When several terms are wrong, the error names the first in sorted
    /// order, the one the server names.
    pub fn parse(selector: &str) -> Result<Self, FieldSelectorError> {
        let mut terms = split_terms(selector);
        terms.sort_unstable();
        let mut reqs = Vec::with_capacity(terms.len());
        for term in terms.into_iter().filter(|t| !t.is_empty()) {
            let (field, op, raw) = split_term(term).ok_or_else(|| FieldSelectorError::Term {
                selector: selector.to_owned(),
                term: term.to_owned(),
            })?;
            let value = unescape_value(raw, term)?;
            // ParseSelector's identity transform drops a term whose field
            // and value are both empty (`=`, `!=`): it selects everything.
            if field.is_empty() && value.is_empty() {
                continue;
            }
            reqs.push(FieldRequirement {
                field: field.to_owned(),
                op,
                value,
            });
        }
        Ok(Self { reqs })
    }

    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// The terms as apimachinery's `Requirements()` gives them: field,
    /// operator and unescaped value, in parsed order.
    pub fn requirements(&self) -> impl Iterator<Item = (&str, FieldOp, &str)> {
        self.reqs
            .iter()
            .map(|r| (r.field.as_str(), r.op, r.value.as_str()))
    }

    /// Refuses a field the API server does not support for `kind`, as the
    /// server does (`field label not supported`). Kinds that are not built
    /// in (CRDs) support `metadata.name`, `metadata.namespace` and their
    /// CRD's `selectableFields`, which the registry does not know: every
    /// field passes for them.
    pub fn check_supported(&self, kind: &KindInfo) -> Result<(), String> {
        if !crate::kind::is_builtin(&kind.gvk) {
            return Ok(());
        }
        let supported = supported_fields(kind);
        for r in &self.reqs {
            if !supported.contains(&r.field.as_str()) {
                return Err(format!(
                    "field label not supported for {}: {:?} (the API server supports {})",
                    kind.resource_name(),
                    r.field,
                    supported.join(", ")
                ));
            }
        }
        Ok(())
    }

    /// Whether an object matches, its fields read at the dotted paths the
    /// terms name (a missing field, `null`, an object or an array reads as
    /// the empty string, as a field the server's field set lacks does).
    pub fn matches(&self, obj: &KObject) -> bool {
        self.matches_fields(|field| match obj.field(&field_pointer(field))? {
            FieldValue::Text(s) => Some(s),
            other => other.as_index_key(),
        })
    }

    /// Whether a field set matches, given as a lookup (apimachinery's
    /// `Fields.Get`: a missing field is the empty string).
    pub fn matches_fields<V: AsRef<str>>(&self, field: impl Fn(&str) -> Option<V>) -> bool {
        self.reqs.iter().all(|r| {
            let actual = field(&r.field);
            let actual = actual.as_ref().map_or("", AsRef::as_ref);
            (actual == r.value) == (r.op == FieldOp::Equals)
        })
    }
}

/// The canonical text, apimachinery's `String()`: the terms in parsed order
/// (`==` printed as `=`) with their values escaped. What the host sends to
/// the API server and shows as the informer's selector.
impl fmt::Display for FieldSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.reqs.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

/// The field labels a Kubernetes 1.35 API server accepts in a field
/// selector for a built-in kind: `metadata.name` and `metadata.namespace`
/// (the generic set, also for most cluster-scoped kinds) plus the kind's
/// own; the cluster-scoped kinds with their own set have no
/// `metadata.namespace`. Checked against a real server by
/// `tests/tests/e2e.rs`.
pub fn supported_fields(kind: &KindInfo) -> Vec<&'static str> {
    let mut fields = vec!["metadata.name"];
    let own: &[&str] = match (kind.gvk.group.as_str(), kind.plural.as_str()) {
        ("", "pods") => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.podIPs",
            "status.nominatedNodeName",
        ],
        ("", "events") => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        ("", "secrets") => &["type"],
        ("", "namespaces") => &["status.phase"],
        ("", "nodes") => &["spec.unschedulable"],
        ("", "replicationcontrollers") => &["status.replicas"],
        ("", "services") => &["spec.clusterIP", "spec.type"],
        ("batch", "jobs") => &["status.successful"],
        ("certificates.k8s.io", "certificatesigningrequests") => &["spec.signerName"],
        ("resource.k8s.io", "resourceslices") => &["spec.nodeName", "spec.driver"],
        _ => &[],
    };
    if kind.namespaced || own.is_empty() {
        fields.push("metadata.namespace");
    }
    fields.extend(own);
    fields
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::StripOptions;

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
        let mut lines = include_str!("selector_golden.jsonl")
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
}
