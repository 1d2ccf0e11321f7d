//! apimachinery's label-selector lexer: the input as tokens.

/// Lexer tokens (apimachinery's `Token`, less `ErrorToken`, which its lexer
/// cannot produce: every special symbol alone is a token).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Token {
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
pub(super) fn keyword(lit: &[u8]) -> Option<Token> {
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

pub(super) fn is_whitespace(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

pub(super) fn is_special(b: u8) -> bool {
    matches!(b, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

/// apimachinery's byte-wise `Lexer`. Identifiers are any run of bytes that
/// are not special symbols or whitespace (validation rejects the bad ones
/// later); every delimiter is ASCII, so literals are valid `&str` slices.
pub(super) struct Lexer<'a> {
    pub(super) s: &'a str,
    pub(super) pos: usize,
}

impl<'a> Lexer<'a> {
    /// The next byte, advancing; 0 at the end. A NUL byte in the input
    /// reads as 0 too and is consumed, as in apimachinery: it ends the
    /// token it follows, or the whole selector where a token would start.
    pub(super) fn read(&mut self) -> u8 {
        match self.s.as_bytes().get(self.pos) {
            Some(&b) => {
                self.pos += 1;
                b
            }
            None => 0,
        }
    }

    /// Only ever called after a `read` that returned a real byte.
    pub(super) fn unread(&mut self) {
        self.pos = self.pos.saturating_sub(1);
    }

    pub(super) fn slice(&self, start: usize, end: usize) -> &'a str {
        self.s.get(start..end).unwrap_or_default()
    }

    pub(super) fn scan_id_or_keyword(&mut self) -> (Token, &'a str) {
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
    pub(super) fn scan_special_symbol(&mut self) -> (Token, &'a str) {
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

    pub(super) fn lex(&mut self) -> (Token, &'a str) {
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
