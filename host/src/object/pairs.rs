//! An object's labels or annotations as spans of its own JSON text: the
//! cache holds their text once (a decoded copy of every key and value, each
//! its own allocation, cost a quarter of a Pod's cached size). A string
//! whose JSON text has escapes (an annotation holding JSON, say) is decoded
//! into a small side buffer instead, as its text is not its value.

use super::ObjectError;

/// Where one string is: a span of the object's text, or of `decoded`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    /// Offset; the top bit set means an offset into `decoded`.
    start: u32,
    len: u32,
}

const DECODED: u32 = 1 << 31;

/// The map of `metadata.labels` or `metadata.annotations` of one object,
/// in the order of its text (the API server writes keys sorted). Read it
/// through [`super::KObject::labels`] and friends, which pass the text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pairs {
    spans: Box<[(Span, Span)]>,
    decoded: Box<str>,
}

impl Pairs {
    /// Reads the map at `raw`, a slice of `text` (the object's whole text):
    /// a JSON object of strings, `null`, or absent (`None`).
    pub(super) fn locate(
        text: &str,
        raw: Option<&str>,
        what: &'static str,
    ) -> Result<Self, ObjectError> {
        let Some(raw) = raw else {
            return Ok(Self::default());
        };
        let base = (raw.as_ptr() as usize)
            .checked_sub(text.as_ptr() as usize)
            .filter(|b| b + raw.len() <= text.len())
            .ok_or(ObjectError::NotAnObject(what))?;
        let mut p = Parser {
            bytes: raw.as_bytes(),
            at: 0,
            base,
        };
        p.ws();
        if p.bytes[p.at..].starts_with(b"null") {
            return Ok(Self::default());
        }
        if !p.eat(b'{') {
            return Err(ObjectError::NotAnObject(what));
        }
        let mut spans = Vec::new();
        let mut decoded = String::new();
        p.ws();
        if !p.eat(b'}') {
            loop {
                p.ws();
                let key = p.string(&mut decoded, what)?;
                p.ws();
                if !p.eat(b':') {
                    return Err(ObjectError::NotAnObject(what));
                }
                p.ws();
                if p.bytes.get(p.at) != Some(&b'"') {
                    let found = match p.bytes.get(p.at) {
                        Some(b'{') => "map",
                        Some(b'[') => "sequence",
                        Some(b't' | b'f') => "boolean",
                        Some(b'n') => "null",
                        Some(b'-' | b'0'..=b'9') => "integer or float",
                        _ => "not JSON",
                    };
                    return Err(ObjectError::NotAString {
                        what,
                        key: p.resolve_key(key, &decoded, raw),
                        found,
                    });
                }
                let value = p.string(&mut decoded, what)?;
                spans.push((key, value));
                p.ws();
                if p.eat(b',') {
                    continue;
                }
                if p.eat(b'}') {
                    break;
                }
                return Err(ObjectError::NotAnObject(what));
            }
        }
        Ok(Self {
            spans: spans.into_boxed_slice(),
            decoded: decoded.into_boxed_str(),
        })
    }

    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// The pairs, read from `text`, the object's text they were located in.
    pub(super) fn iter<'a>(&'a self, text: &'a str) -> impl Iterator<Item = (&'a str, &'a str)> {
        self.spans
            .iter()
            .map(move |(k, v)| (self.resolve(text, *k), self.resolve(text, *v)))
    }

    pub(super) fn get<'a>(&'a self, text: &'a str, key: &str) -> Option<&'a str> {
        self.iter(text).find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    fn resolve<'a>(&'a self, text: &'a str, span: Span) -> &'a str {
        let (source, start) = if span.start & DECODED == 0 {
            (text, span.start)
        } else {
            (&*self.decoded, span.start & !DECODED)
        };
        let (start, len) = (start as usize, span.len as usize);
        source.get(start..start + len).unwrap_or_default()
    }

    /// Heap bytes besides the text.
    pub(super) fn heap_bytes(&self) -> usize {
        std::mem::size_of_val::<[(Span, Span)]>(&self.spans) + self.decoded.len()
    }
}

struct Parser<'a> {
    bytes: &'a [u8],
    at: usize,
    /// Where `bytes` starts in the object's text.
    base: usize,
}

impl Parser<'_> {
    /// A key's text, for an error message.
    fn resolve_key(&self, key: Span, decoded: &str, raw: &str) -> String {
        let (source, start) = if key.start & DECODED == 0 {
            (raw, (key.start as usize).saturating_sub(self.base))
        } else {
            (decoded, (key.start & !DECODED) as usize)
        };
        source
            .get(start..start + key.len as usize)
            .unwrap_or_default()
            .to_owned()
    }

    fn ws(&mut self) {
        while self
            .bytes
            .get(self.at)
            .is_some_and(|b| matches!(b, b' ' | b'\n' | b'\r' | b'\t'))
        {
            self.at += 1;
        }
    }

    fn eat(&mut self, b: u8) -> bool {
        let hit = self.bytes.get(self.at) == Some(&b);
        if hit {
            self.at += 1;
        }
        hit
    }

    /// One JSON string: its span in the text when it has no escapes, else
    /// its decoded value appended to `decoded`.
    fn string(&mut self, decoded: &mut String, what: &'static str) -> Result<Span, ObjectError> {
        if !self.eat(b'"') {
            return Err(ObjectError::NotAnObject(what));
        }
        let start = self.at;
        let mut escaped = false;
        loop {
            match self.bytes.get(self.at) {
                None => return Err(ObjectError::NotAnObject(what)),
                Some(b'"') => break,
                Some(b'\\') => {
                    escaped = true;
                    self.at += 2;
                }
                Some(_) => self.at += 1,
            }
        }
        let end = self.at;
        self.at += 1;
        let too_long = || ObjectError::NotAnObject(what);
        if !escaped {
            let at = u32::try_from(self.base + start)
                .ok()
                .filter(|s| s & DECODED == 0)
                .ok_or_else(too_long)?;
            let len = u32::try_from(end - start).map_err(|_| too_long())?;
            return Ok(Span { start: at, len });
        }
        let quoted = self
            .bytes
            .get(start - 1..=end)
            .and_then(|b| std::str::from_utf8(b).ok())
            .ok_or_else(too_long)?;
        let value: String = serde_json::from_str(quoted)?;
        let at = u32::try_from(decoded.len()).map_err(|_| too_long())?;
        decoded.push_str(&value);
        Ok(Span {
            start: at | DECODED,
            len: u32::try_from(value.len()).map_err(|_| too_long())?,
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::object::{KObject, StripOptions};

    fn object(text: &str) -> KObject {
        KObject::from_json_text(text, Some(("v1", "ConfigMap")), StripOptions::default()).unwrap()
    }

    #[test]
    fn labels_and_annotations_are_read_from_the_text_or_decoded_when_escaped() {
        let o = object(
            r#"{"metadata":{"name":"a","labels":{"app":"web","tier":""},"annotations":{"json":"{\"k\":\"v\"}","plain":"x","\u00e9t\u00e9":"\u00e9"}}}"#,
        );
        assert_eq!(
            o.labels().collect::<Vec<_>>(),
            [("app", "web"), ("tier", "")]
        );
        assert_eq!(o.label("tier"), Some(""));
        assert_eq!(o.label("nope"), None);
        assert_eq!(
            o.annotations().collect::<Vec<_>>(),
            [("json", r#"{"k":"v"}"#), ("plain", "x"), ("été", "é")]
        );
        assert_eq!(o.annotation("json"), Some(r#"{"k":"v"}"#));
        // Only the escaped strings take room of their own.
        assert_eq!(o.meta().labels.heap_bytes(), 2 * 16);
        assert_eq!(
            o.meta().annotations.heap_bytes(),
            3 * 16 + r#"{"k":"v"}été"#.len() + "é".len()
        );
    }

    #[test]
    fn the_same_labels_compare_equal_across_objects_whatever_their_place() {
        let a = object(r#"{"metadata":{"name":"a","labels":{"app":"web"}}}"#);
        let b = object(r#"{"data":{"x":"y"},"metadata":{"name":"bb","labels":{"app":"web"}}}"#);
        assert!(a.labels().eq(b.labels()));
        let c = KObject::from_value(
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "c", "labels": {"app": "web"}, "annotations": null}}),
            StripOptions::default(),
        )
        .unwrap();
        assert!(a.labels().eq(c.labels()));
        assert_eq!(c.annotations().count(), 0);
    }

    #[test]
    fn labels_that_are_not_a_map_of_strings_refuse_the_object() {
        for text in [
            r#"{"metadata":{"name":"a","labels":{"x":7}}}"#,
            r#"{"metadata":{"name":"a","labels":["x"]}}"#,
            r#"{"metadata":{"name":"a","annotations":{"x":{"y":"z"}}}}"#,
        ] {
            let err =
                KObject::from_json_text(text, Some(("v1", "ConfigMap")), StripOptions::default())
                    .unwrap_err()
                    .to_string();
            assert!(err.contains("metadata."), "{text}: {err}");
        }
    }
}
