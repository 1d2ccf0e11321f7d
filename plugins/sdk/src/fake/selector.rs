//! Label selectors for the fake host: a copy of the host's port of
//! apimachinery's `labels.Parse` (`host/src/informer/selector.rs`), so a
//! selector means in a unit test what it means to the host and the API
//! server; checked against the same golden file
//! (`host/src/informer/selector_golden.jsonl`).

use std::fmt;

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
pub struct Selector {
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

/// apimachinery's recursive-descent `Parser`, scanning tokens as it goes
/// (as the host's does) and holding only the next one.
struct Parser<'a> {
    lexer: Lexer<'a>,
    /// The next token, already scanned; `Token::End` for good at the end.
    next: (Token, &'a str),
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
        let next = lexer.lex();
        Self { lexer, next }
    }

    fn lookahead(&self, context: Context) -> (Token, &'a str) {
        match self.next {
            (Token::In | Token::NotIn, lit) if context == Context::Values => {
                (Token::Identifier, lit)
            }
            item => item,
        }
    }

    fn consume(&mut self, context: Context) -> (Token, &'a str) {
        let item = self.lookahead(context);
        if self.next.0 != Token::End {
            self.next = self.lexer.lex();
        }
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
    // At most three parts: one, prefix/name, or too many.
    let mut parts = key.splitn(3, '/');
    let name = match (parts.next(), parts.next(), parts.next()) {
        (Some(name), None, _) => name,
        (Some(prefix), Some(name), None) => {
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
            name
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
        Err(format!(
            "invalid label key {:?}: {}",
            excerpt(key),
            errs.join("; ")
        ))
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
impl fmt::Display for Selector {
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

/// The longest selector text parsed, as the host's `MAX_SELECTOR_BYTES`:
/// a request to the API server carries no more.
const MAX_SELECTOR_BYTES: usize = 1 << 20;

/// How an error quotes long text, as the host's `names::excerpt`: whole up
/// to 256 bytes, beyond that its start and its length.
fn excerpt(text: &str) -> String {
    const SHOWN: usize = 256;
    if text.len() <= SHOWN {
        return text.to_owned();
    }
    let cut = text.floor_char_boundary(SHOWN);
    format!("{}... ({} bytes)", &text[..cut], text.len())
}

impl Selector {
    /// Parses `selector` as the API server's `labels.Parse` does (the
    /// host's message on error). Blank text matches everything.
    pub fn parse(selector: &str) -> Result<Self, String> {
        if selector.len() > MAX_SELECTOR_BYTES {
            return Err(format!(
                "invalid selector {:?}: it is {} bytes, over the {MAX_SELECTOR_BYTES} a request \
                 to the API server can carry; select on fewer values, or on a label the objects share",
                excerpt(selector),
                selector.len()
            ));
        }
        let mut reqs = Parser::new(selector)
            .parse()
            .map_err(|reason| format!("invalid selector {:?}: {reason}", excerpt(selector)))?;
        // apimachinery's sort.Sort(ByKey); stable.
        reqs.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(Self { reqs })
    }

    /// Whether a label set, given as a lookup, matches.
    pub fn matches_labels<'l>(&self, label: impl Fn(&str) -> Option<&'l str>) -> bool {
        self.reqs.iter().all(|r| r.matches(&label))
    }
}
