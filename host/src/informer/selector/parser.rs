//! apimachinery's label-selector parser: tokens to requirements.

use super::label::{Operator, Requirement};
use super::lexer::{Lexer, Token};
use super::validation::validate_label_key;

/// Where the parser is: `in` and `notin` are operators only after a key;
/// anywhere else (`in in (notin)`) they are identifiers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Context {
    KeyAndOperator,
    Values,
}

/// apimachinery's recursive-descent `Parser`. apimachinery scans every
/// token first; this one scans as it goes, holding only the next token,
/// so what parsing builds never grows with the tokens it has not reached
/// (a selector of a million commas was 24 MiB of tokens before its first
/// error).
pub(super) struct Parser<'a> {
    lexer: Lexer<'a>,
    /// The next token, already scanned; `Token::End` for good at the end.
    next: (Token, &'a str),
}

/// How an error names the token it found: apimachinery prints the end of
/// the input as `''`, which names nothing.
pub(super) fn found(tok: Token, lit: &str) -> String {
    if tok == Token::End {
        "end of string".to_owned()
    } else {
        format!("'{lit}'")
    }
}

impl<'a> Parser<'a> {
    pub(super) fn new(selector: &'a str) -> Self {
        let mut lexer = Lexer {
            s: selector,
            pos: 0,
        };
        let next = lexer.lex();
        Self { lexer, next }
    }

    pub(super) fn lookahead(&self, context: Context) -> (Token, &'a str) {
        match self.next {
            (Token::In | Token::NotIn, lit) if context == Context::Values => {
                (Token::Identifier, lit)
            }
            item => item,
        }
    }

    pub(super) fn consume(&mut self, context: Context) -> (Token, &'a str) {
        let item = self.lookahead(context);
        if self.next.0 != Token::End {
            self.next = self.lexer.lex();
        }
        item
    }

    pub(super) fn parse(&mut self) -> Result<Vec<Requirement>, String> {
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

    pub(super) fn parse_requirement(&mut self) -> Result<Requirement, String> {
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
    pub(super) fn parse_key_and_infer_operator(
        &mut self,
    ) -> Result<(&'a str, Option<Operator>), String> {
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

    pub(super) fn parse_operator(&mut self) -> Result<Operator, String> {
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
    pub(super) fn parse_values(&mut self) -> Result<Vec<String>, String> {
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
    pub(super) fn parse_identifiers_list(&mut self) -> Result<Vec<String>, String> {
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
    pub(super) fn parse_exact_value(&mut self) -> Result<String, String> {
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
