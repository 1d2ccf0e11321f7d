//! RFC 6901 JSON pointer lookups over JSON text, in one forward pass that
//! skips what the pointer does not name and stops once the value is found
//! (a handler reading `/spec/nodeName` never scans `status`). What the
//! pointer does not name is skipped by a byte scan (see [`Scan`]), not
//! tokenized: on a 4 KB Pod serde_json's skipping was half the cost of a
//! realistic handler's field reads, and sonic-rs's half serde_json's speed.
//! Several pointers share one pass; one is a pass of one.

use std::borrow::Cow;

/// Most segments a pointer can usefully have: objects are parsed with
/// serde_json, which refuses nesting deeper than 128, so a longer pointer
/// names nothing (and its segments are not built: `"/"` repeated a million
/// times would be a million strings).
pub const MAX_SEGMENTS: usize = 128;

/// A pointer's segments, unescaped (`~1` is `/`, `~0` is `~`); `None` for
/// text that is not a pointer (non-empty and not starting with `/`) or is
/// deeper than [`MAX_SEGMENTS`].
pub fn segments(pointer: &str) -> Option<Vec<String>> {
    segments_borrowed(pointer).map(|s| s.into_iter().map(Cow::into_owned).collect())
}

/// [`segments`], borrowed from `pointer` where no `~` escape needs a copy:
/// reading many pointers at once (`object.fields`) builds no string per
/// segment.
pub fn segments_borrowed(pointer: &str) -> Option<Vec<Cow<'_, str>>> {
    if pointer.is_empty() {
        return Some(Vec::new());
    }
    let rest = pointer.strip_prefix('/')?;
    if segment_count(pointer) > MAX_SEGMENTS {
        return None;
    }
    Some(
        rest.split('/')
            .map(|s| {
                if s.contains('~') {
                    Cow::Owned(s.replace("~1", "/").replace("~0", "~"))
                } else {
                    Cow::Borrowed(s)
                }
            })
            .collect(),
    )
}

/// How many segments `pointer` has (its `/`s), without building them.
pub fn segment_count(pointer: &str) -> usize {
    pointer.bytes().filter(|b| *b == b'/').count()
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

/// A cursor over JSON text. Skipping is a scan that counts brackets outside
/// strings (64 bytes at a time) and jumps over strings with `memchr`, not
/// a tokenizer. It checks only what it must to stay in step (the cache's
/// text was validated when it was stored); it never panics, and malformed
/// text ends the walk.
struct Scan<'a> {
    text: &'a str,
    at: usize,
}

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

    /// Inside an object or array: skips to just past its closing bracket,
    /// 64 bytes at a time where a block has no backslash (see [`Block`]),
    /// byte by byte otherwise.
    fn skip_rest(&mut self) -> Option<()> {
        let b = self.bytes();
        let mut st = Skip {
            depth: 1,
            in_string: false,
            escaped: false,
        };
        let mut pos = self.at;
        while let Some(chunk) = b.get(pos..pos + 64) {
            let Ok(chunk) = <&[u8; 64]>::try_from(chunk) else {
                break;
            };
            let blk = Block::of(chunk);
            let found = if blk.backslash != 0 || st.escaped {
                st.bytes(chunk)
            } else {
                st.block(&blk)
            };
            if let Some(i) = found {
                self.at = pos + i + 1;
                return Some(());
            }
            pos += 64;
        }
        let i = st.bytes(b.get(pos..)?)?;
        self.at = pos + i + 1;
        Some(())
    }
}

/// The state of a container skip between blocks.
struct Skip {
    /// Open brackets, counting the one skipped into.
    depth: u64,
    in_string: bool,
    /// The last byte was a backslash in a string.
    escaped: bool,
}

impl Skip {
    /// Byte by byte: the index of the bracket that closes the container.
    fn bytes(&mut self, chunk: &[u8]) -> Option<usize> {
        for (i, &c) in chunk.iter().enumerate() {
            if self.in_string {
                if self.escaped {
                    self.escaped = false;
                } else if c == b'\\' {
                    self.escaped = true;
                } else if c == b'"' {
                    self.in_string = false;
                }
                continue;
            }
            match c {
                b'"' => self.in_string = true,
                b'{' | b'[' => self.depth += 1,
                b'}' | b']' => {
                    self.depth = self.depth.checked_sub(1)?;
                    if self.depth == 0 {
                        return Some(i);
                    }
                }
                _ => {}
            }
        }
        None
    }

    /// A block with no backslash and no escape pending: every quote opens
    /// or closes a string, so the bytes inside strings are a prefix XOR of
    /// the quotes, and the brackets outside them are counted with
    /// popcounts; bits are walked one by one only in the block where the
    /// depth can reach zero.
    fn block(&mut self, blk: &Block) -> Option<usize> {
        let mut inside = blk.quote;
        for shift in [1, 2, 4, 8, 16, 32] {
            inside ^= inside << shift;
        }
        if self.in_string {
            inside = !inside;
        }
        self.in_string = inside >> 63 == 1;
        let open = blk.open & !inside;
        let close = blk.close & !inside;
        if u64::from(close.count_ones()) < self.depth {
            self.depth = self.depth + u64::from(open.count_ones()) - u64::from(close.count_ones());
            return None;
        }
        let mut both = open | close;
        while both != 0 {
            let i = both.trailing_zeros();
            both &= both - 1;
            if open >> i & 1 == 1 {
                self.depth += 1;
            } else {
                self.depth -= 1;
                if self.depth == 0 {
                    return Some(i as usize);
                }
            }
        }
        None
    }
}

/// One 64-byte block as bit masks (bit i is byte i): quotes, backslashes,
/// opening and closing brackets. Built with SSE2 (part of every x86-64),
/// a byte loop elsewhere.
struct Block {
    quote: u64,
    backslash: u64,
    open: u64,
    close: u64,
}

impl Block {
    #[cfg(target_arch = "x86_64")]
    #[allow(unsafe_code)] // SSE2 intrinsics: see the SAFETY note
    fn of(chunk: &[u8; 64]) -> Self {
        use std::arch::x86_64::{
            __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_or_si128,
            _mm_set1_epi8,
        };
        let mut blk = Block {
            quote: 0,
            backslash: 0,
            open: 0,
            close: 0,
        };
        for (k, part) in chunk.as_chunks::<16>().0.iter().enumerate() {
            // SAFETY: SSE2 is part of the x86-64 baseline, so the intrinsics
            // exist on every CPU this runs on; `part` is 16 readable bytes
            // and the load has no alignment requirement.
            let [quote, backslash, open, close] = unsafe {
                let v = _mm_loadu_si128(part.as_ptr().cast::<__m128i>());
                // `{` and `[` differ only in bit 0x20, as do `}` and `]`.
                let folded = _mm_or_si128(v, _mm_set1_epi8(0x20));
                [(v, b'"'), (v, b'\\'), (folded, b'{'), (folded, b'}')].map(|(v, c)| {
                    let eq = _mm_cmpeq_epi8(v, _mm_set1_epi8(c as i8));
                    u64::from(_mm_movemask_epi8(eq) as u16)
                })
            };
            let at = 16 * k;
            blk.quote |= quote << at;
            blk.backslash |= backslash << at;
            blk.open |= open << at;
            blk.close |= close << at;
        }
        blk
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn of(chunk: &[u8; 64]) -> Self {
        let mut blk = Block {
            quote: 0,
            backslash: 0,
            open: 0,
            close: 0,
        };
        for (i, &c) in chunk.iter().enumerate() {
            let bit = 1u64 << i;
            match c {
                b'"' => blk.quote |= bit,
                b'\\' => blk.backslash |= bit,
                b'{' | b'[' => blk.open |= bit,
                b'}' | b']' => blk.close |= bit,
                _ => {}
            }
        }
        blk
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
            // Rare: a key with an escape is compared unescaped.
            let key: Cow<'_, [u8]> = if key.contains(&b'\\') {
                let quoted = std::str::from_utf8(key).ok()?;
                let key: String = serde_json::from_str(&format!("\"{quoted}\"")).ok()?;
                Cow::Owned(key.into_bytes())
            } else {
                Cow::Borrowed(key)
            };
            hits.clear();
            hits.extend(
                live.iter()
                    .copied()
                    .filter(|&i| self.segment(i, depth).as_bytes() == &*key),
            );
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

/// Tests: a pointer to every node of `v` (the root last), and with
/// `absent`, one to an absent member and one past the end below each
/// object and array.
#[cfg(test)]
pub(crate) fn every_pointer(v: &serde_json::Value, absent: bool) -> Vec<String> {
    use serde_json::Value;
    fn walk(v: &Value, at: String, absent: bool, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                if absent {
                    out.push(format!("{at}/absent~1key"));
                }
                for (k, v) in m {
                    let k = k.replace('~', "~0").replace('/', "~1");
                    walk(v, format!("{at}/{k}"), absent, out);
                }
            }
            Value::Array(a) => {
                if absent {
                    out.push(format!("{at}/{}", a.len()));
                }
                for (i, v) in a.iter().enumerate() {
                    walk(v, format!("{at}/{i}"), absent, out);
                }
            }
            _ => {}
        }
        out.push(at);
    }
    let mut out = Vec::new();
    walk(v, String::new(), absent, &mut out);
    out
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
        // Deeper than any object serde_json parses: names nothing.
        assert_eq!(
            segments(&"/a".repeat(MAX_SEGMENTS)).map(|s| s.len()),
            Some(MAX_SEGMENTS)
        );
        assert_eq!(segments(&"/".repeat(MAX_SEGMENTS + 1)), None);
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

    /// Documents of a few hundred bytes whose strings hold quotes,
    /// backslashes and brackets at every offset, so that strings, escapes
    /// and brackets straddle the 64-byte blocks of the skip: every pointer
    /// to every node reads what serde_json's `Value::pointer` reads.
    #[test]
    fn blocks_straddled_by_strings_escapes_and_brackets() {
        use serde_json::{Value, json};
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        // Most strings need no escape (their blocks take the 64-byte
        // path), some hold brackets, a few quotes and backslashes.
        fn text(next: &mut impl FnMut(u64) -> u64) -> String {
            let alphabet: &[char] = match next(8) {
                0..=3 => &['a', 'b', 'é', '-'],
                4..=6 => &['a', '{', '}', '[', ']', ' ', ':', ','],
                _ => &['a', '"', '\\', '{', ']', '\n'],
            };
            (0..next(90))
                .map(|_| alphabet[next(alphabet.len() as u64) as usize])
                .collect()
        }
        fn value(next: &mut impl FnMut(u64) -> u64, depth: u32) -> Value {
            match if depth > 3 { next(3) } else { next(5) } {
                0 => Value::String(text(next)),
                1 => json!(next(1000)),
                2 => json!(null),
                3 => Value::Array((0..next(5)).map(|_| value(next, depth + 1)).collect()),
                _ => Value::Object(
                    (0..next(5))
                        .map(|i| (format!("k{i}{}", text(next)), value(next, depth + 1)))
                        .collect(),
                ),
            }
        }
        for _ in 0..300 {
            let doc = json!({"a": value(&mut next, 0), "b": value(&mut next, 0), "c": value(&mut next, 0)});
            let text = doc.to_string();
            for p in &every_pointer(&doc, false) {
                let got = at(&text, p).map(|raw| serde_json::from_str::<Value>(raw).unwrap());
                assert_eq!(got.as_ref(), doc.pointer(p), "{p} in {text}");
            }
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
