//! RFC 6901 JSON pointer lookups over JSON text, in one forward pass that
//! skips what the pointer does not name and stops once the value is found
//! (a handler reading `/spec/nodeName` never scans `status`). What the
//! pointer does not name is skipped by a byte scan (see [`Scan`]), not
//! tokenized: on a 4 KB Pod serde_json's skipping was half the cost of a
//! realistic handler's field reads, and sonic-rs's half serde_json's speed.
//! Several pointers share one pass; one is a pass of one.

/// A pointer's segments, unescaped (`~1` is `/`, `~0` is `~`); `None` for
/// text that is not a pointer (non-empty and not starting with `/`).
pub fn segments(pointer: &str) -> Option<Vec<String>> {
    if pointer.is_empty() {
        return Some(Vec::new());
    }
    let rest = pointer.strip_prefix('/')?;
    Some(
        rest.split('/')
            .map(|s| {
                if s.contains('~') {
                    s.replace("~1", "/").replace("~0", "~")
                } else {
                    s.to_owned()
                }
            })
            .collect(),
    )
}

/// The array index a segment names, if it is one (RFC 6901: digits only, no
/// sign, no leading zero).
pub fn array_index(segment: &str) -> Option<usize> {
    let digits = !segment.is_empty() && segment.bytes().all(|b| b.is_ascii_digit());
    if !digits || (segment.len() > 1 && segment.starts_with('0')) {
        return None;
    }
    segment.parse().ok()
}

/// The raw text of the value at `segments` in `json` (a segment indexes an
/// array when it is an index, and names a member of an object otherwise),
/// or `None` when there is none or the text is not JSON.
pub fn raw_at<'a, S: AsRef<str>>(json: &'a str, segments: &[S]) -> Option<&'a str> {
    if segments.is_empty() {
        return Some(json);
    }
    let path: Vec<&str> = segments.iter().map(AsRef::as_ref).collect();
    raw_at_many(json, &[path]).pop().flatten()
}

/// The raw text at each of several pointers (as [`raw_at`]), found in one
/// pass that ends at the last of them: a handler reading `/spec/nodeName`
/// and `/status/phase` skips the metadata once.
pub fn raw_at_many<'a, S: AsRef<str>>(json: &'a str, paths: &[Vec<S>]) -> Vec<Option<&'a str>> {
    let mut walk = Walk {
        paths,
        found: vec![None; paths.len()],
        pending: paths.len(),
        scan: Scan { text: json, at: 0 },
    };
    let live: Vec<usize> = (0..paths.len()).collect();
    // `None` is malformed text or an early stop: what was found is kept.
    let _ = walk.value(&live, 0);
    walk.found
}

/// A cursor over JSON text. Skipping is a byte scan that counts brackets
/// and jumps over strings with `memchr` (SIMD), not a tokenizer: measured
/// about twice as fast as serde_json's `IgnoredAny` on Pods. It checks
/// only what it must to stay in step (the cache's text was validated when
/// it was stored); it never panics, and malformed text ends the walk.
struct Scan<'a> {
    text: &'a str,
    at: usize,
}

/// Bytes that matter when skipping a container: quotes and brackets.
const STRUCTURAL: [bool; 256] = {
    let mut t = [false; 256];
    t[b'"' as usize] = true;
    t[b'{' as usize] = true;
    t[b'}' as usize] = true;
    t[b'[' as usize] = true;
    t[b']' as usize] = true;
    t
};

impl<'a> Scan<'a> {
    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    /// The next byte that is not whitespace, without consuming it.
    fn peek(&mut self) -> Option<u8> {
        let b = self.bytes();
        while let Some(&c) = b.get(self.at) {
            if !matches!(c, b' ' | b'\t' | b'\n' | b'\r') {
                return Some(c);
            }
            self.at += 1;
        }
        None
    }

    /// Consumes `c` (after whitespace) or fails.
    fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek()? == c).then(|| self.at += 1)
    }

    /// At an opening quote: the string's raw contents (escapes left as
    /// they are), the cursor past the closing quote.
    fn string(&mut self) -> Option<&'a [u8]> {
        let b = self.bytes();
        let start = self.at + 1;
        let mut i = start;
        loop {
            i += memchr::memchr2(b'"', b'\\', b.get(i..)?)?;
            if b[i] == b'"' {
                self.at = i + 1;
                return b.get(start..i);
            }
            // An escape: skip the backslash and the byte it escapes.
            i += 2;
        }
    }

    /// Skips one value; returns its text.
    fn skip_value(&mut self) -> Option<&'a str> {
        let first = self.peek()?;
        let start = self.at;
        match first {
            b'"' => {
                self.string()?;
            }
            b'{' | b'[' => {
                self.at += 1;
                self.skip_rest()?;
            }
            _ => {
                // A number, true, false or null: up to the next delimiter.
                let b = self.bytes();
                let len = b
                    .get(self.at..)?
                    .iter()
                    .position(|&c| matches!(c, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'))
                    .unwrap_or(b.len() - self.at);
                if len == 0 {
                    return None;
                }
                self.at += len;
            }
        }
        self.text.get(start..self.at)
    }

    /// Inside an object or array: skips to just past its closing bracket.
    fn skip_rest(&mut self) -> Option<()> {
        let b = self.bytes();
        let mut depth = 1usize;
        loop {
            let skip = b
                .get(self.at..)?
                .iter()
                .position(|&c| STRUCTURAL[usize::from(c)])?;
            self.at += skip;
            match b[self.at] {
                b'"' => {
                    self.string()?;
                    continue;
                }
                b'{' | b'[' => depth += 1,
                _ => depth -= 1,
            }
            self.at += 1;
            if depth == 0 {
                return Some(());
            }
        }
    }
}

/// A several-pointer walk over one text.
struct Walk<'p, 'a, S> {
    paths: &'p [Vec<S>],
    found: Vec<Option<&'a str>>,
    /// Paths not yet found or known absent: the walk stops at zero.
    pending: usize,
    scan: Scan<'a>,
}

impl<'a, S: AsRef<str>> Walk<'_, 'a, S> {
    fn segment(&self, path: usize, depth: usize) -> &str {
        self.paths[path][depth].as_ref()
    }

    /// The value at the cursor, which `live` paths lead to, `depth` segments
    /// deep. Every live path is settled when it returns `Some`; `None` ends
    /// the walk (malformed text, or nothing left to find).
    fn value(&mut self, live: &[usize], depth: usize) -> Option<()> {
        if live.iter().any(|&i| self.paths[i].len() == depth) {
            // A path ends here: take the value's text; longer paths (one
            // names a part of another) are walked through that text.
            let raw = self.scan.skip_value()?;
            for &i in live {
                self.found[i] = raw_at(raw, &self.paths[i][depth..]);
            }
            return self.settle(live.len());
        }
        match self.scan.peek()? {
            b'{' => self.object(live, depth),
            b'[' => self.array(live, depth),
            // A scalar has no members: the live paths name nothing.
            _ => {
                self.scan.skip_value()?;
                self.settle(live.len())
            }
        }
    }

    /// Marks `n` paths settled; `None` once none is left.
    fn settle(&mut self, n: usize) -> Option<()> {
        self.pending = self.pending.saturating_sub(n);
        (self.pending > 0).then_some(())
    }

    fn object(&mut self, live: &[usize], depth: usize) -> Option<()> {
        self.scan.eat(b'{')?;
        let mut left = live.len();
        let mut hits: Vec<usize> = Vec::new();
        if self.scan.peek()? == b'}' {
            self.scan.at += 1;
            return self.settle(left);
        }
        loop {
            if self.scan.peek()? != b'"' {
                return None;
            }
            let key = self.scan.string()?;
            self.scan.eat(b':')?;
            hits.clear();
            if key.contains(&b'\\') {
                // Rare: compare the unescaped key.
                let quoted = std::str::from_utf8(key).ok()?;
                let key: String = serde_json::from_str(&format!("\"{quoted}\"")).ok()?;
                hits.extend(
                    live.iter()
                        .copied()
                        .filter(|&i| self.segment(i, depth) == key),
                );
            } else {
                hits.extend(
                    live.iter()
                        .copied()
                        .filter(|&i| self.segment(i, depth).as_bytes() == key),
                );
            }
            if hits.is_empty() {
                self.scan.skip_value()?;
            } else {
                left -= hits.len();
                self.value(&hits, depth + 1)?;
            }
            if left == 0 {
                return self.scan.skip_rest();
            }
            match self.scan.peek()? {
                b',' => self.scan.at += 1,
                b'}' => {
                    self.scan.at += 1;
                    // Keys are unique: a path not matched by now is not here.
                    return self.settle(left);
                }
                _ => return None,
            }
        }
    }

    fn array(&mut self, live: &[usize], depth: usize) -> Option<()> {
        self.scan.eat(b'[')?;
        let indexed: Vec<(usize, Option<usize>)> = live
            .iter()
            .map(|&i| (i, array_index(self.segment(i, depth))))
            .collect();
        let Some(last) = indexed.iter().filter_map(|(_, j)| *j).max() else {
            self.scan.skip_rest()?;
            return self.settle(live.len());
        };
        let mut left = live.len();
        let mut hits: Vec<usize> = Vec::new();
        if self.scan.peek()? == b']' {
            self.scan.at += 1;
            return self.settle(left);
        }
        for j in 0..=last {
            hits.clear();
            hits.extend(
                indexed
                    .iter()
                    .filter(|(_, k)| *k == Some(j))
                    .map(|(i, _)| *i),
            );
            if hits.is_empty() {
                self.scan.skip_value()?;
            } else {
                left -= hits.len();
                self.value(&hits, depth + 1)?;
            }
            match self.scan.peek()? {
                b',' => self.scan.at += 1,
                b']' => {
                    self.scan.at += 1;
                    // Indexes past the end, and segments that are not indexes.
                    return self.settle(left);
                }
                _ => return None,
            }
        }
        self.scan.skip_rest()?;
        self.settle(left)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn at<'a>(json: &'a str, pointer: &str) -> Option<&'a str> {
        raw_at(json, &segments(pointer).unwrap())
    }

    #[test]
    fn finds_what_serde_json_pointer_finds() {
        let doc =
            r#"{"a":{"b":[1,{"c":"x"},[true]],"0":{"d":null}},"e/f":2,"g~h":3,"s":"t","n":[]}"#;
        let value: serde_json::Value = serde_json::from_str(doc).unwrap();
        for p in [
            "", "/a", "/a/b", "/a/b/0", "/a/b/1/c", "/a/b/2/0", "/a/0", "/a/0/d", "/e~1f", "/g~0h",
            "/s", "/s/x", "/n/0", "/a/b/3", "/a/b/01", "/a/b/+1", "/a/b/x", "/z", "/a/z/y", "/a/",
            "//",
        ] {
            let want = value.pointer(p).map(|v| v.to_string());
            let got = at(doc, p).map(|raw| {
                serde_json::from_str::<serde_json::Value>(raw)
                    .unwrap()
                    .to_string()
            });
            assert_eq!(got, want, "{p}");
        }
        assert_eq!(segments("no-slash"), None);
    }

    #[test]
    fn several_pointers_in_one_pass_find_what_each_finds_alone() {
        let doc = r#"{"a":{"b":[1,{"c":"x"},[true]],"0":{"d":null}},"e/f":2,"s":"t","n":[],"z":{"y":[{"x":1}]}}"#;
        let pointers = [
            "", "/a", "/a/b", "/a/b/0", "/a/b/1/c", "/a/b/2/0", "/a/0/d", "/e~1f", "/s", "/s/x",
            "/n/0", "/a/b/3", "/a/b/01", "/a/b/x", "/q", "/z/y/0/x", "/z/y/0", "/z",
        ];
        // Every pair, every triple in order, and all at once (prefixes,
        // shared parents, absent and scalar steps mixed).
        let mut sets: Vec<Vec<&str>> = vec![pointers.to_vec()];
        for (i, a) in pointers.iter().enumerate() {
            for b in &pointers[i..] {
                sets.push(vec![a, b]);
                sets.push(vec![b, a, "/z/y/0/x"]);
            }
        }
        for set in sets {
            let paths: Vec<Vec<String>> = set.iter().map(|p| segments(p).unwrap()).collect();
            let got = raw_at_many(doc, &paths);
            let want: Vec<Option<&str>> = set.iter().map(|p| at(doc, p)).collect();
            assert_eq!(got, want, "{set:?}");
        }
    }

    #[test]
    fn brackets_and_quotes_in_strings_and_whitespace_are_skipped() {
        let doc = " { \"a\" : \"x}]\\\"{[\" , \"b\" :\n[ {\"c\" : \"]\\\\\"} , -2.5e3 , true ] ,\"d\":{ },\"e\":[ ], \"f\" : null } ";
        let value: serde_json::Value = serde_json::from_str(doc).unwrap();
        for p in [
            "/a", "/b/0/c", "/b/1", "/b/2", "/b/3", "/d", "/d/x", "/e", "/e/0", "/f", "/g",
        ] {
            let want = value.pointer(p).cloned();
            let got = at(doc, p).map(|raw| serde_json::from_str::<serde_json::Value>(raw).unwrap());
            assert_eq!(got, want, "{p}");
            let many = raw_at_many(doc, &[segments("/b/1").unwrap(), segments(p).unwrap()]);
            let got = many[1].map(|raw| serde_json::from_str::<serde_json::Value>(raw).unwrap());
            assert_eq!(got, value.pointer(p).cloned(), "/b/1 then {p}");
        }
    }

    #[test]
    fn keys_with_escapes_match_and_bad_text_finds_nothing() {
        assert_eq!(at(r#"{"a\"b":1}"#, "/a\"b"), Some("1"));
        assert_eq!(at(r#"{"a\u0062":1}"#, "/ab"), Some("1"));
        assert_eq!(at(r#"{"a":"#, "/a"), None);
        assert_eq!(at("not json", "/a"), None);
    }
}
