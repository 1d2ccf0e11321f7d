//! JSON text as Go's encoding/json writes it (what the API server's JSON
//! serializer uses): its string escapes (HTML characters too), its float
//! format, base64 for bytes, RFC 3339 times, and embedded JSON compacted.

use base64::Engine as _;

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Writes `s` as a JSON string the way encoding/json does with HTML
/// escaping on (json.NewEncoder's default): `<`, `>`, `&`, U+2028 and
/// U+2029 as `\u` escapes, each byte of invalid UTF-8 as `\ufffd`.
pub(crate) fn string(out: &mut Vec<u8>, s: &[u8]) {
    out.push(b'"');
    // Most strings of an object (names, labels, images) need no escape.
    if s.iter().all(|&b| PLAIN[usize::from(b)]) {
        out.extend_from_slice(s);
    } else {
        for chunk in s.utf8_chunks() {
            escape_valid(out, chunk.valid().as_bytes());
            for _ in chunk.invalid() {
                out.extend_from_slice(b"\\ufffd");
            }
        }
    }
    out.push(b'"');
}

/// ASCII that encoding/json writes as it is.
static PLAIN: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0x20;
    while b < 0x80 {
        table[b] = !matches!(b as u8, b'"' | b'\\' | b'<' | b'>' | b'&');
        b += 1;
    }
    table
};

fn escape_valid(out: &mut Vec<u8>, s: &[u8]) {
    let mut start = 0;
    let mut i = 0;
    while i < s.len() {
        let b = s[i];
        if PLAIN[usize::from(b)] || (b >= 0x80 && b != 0xe2) {
            i += 1;
            continue;
        }
        let escape: Option<&[u8]> = match b {
            b'"' => Some(b"\\\""),
            b'\\' => Some(b"\\\\"),
            b'\n' => Some(b"\\n"),
            b'\r' => Some(b"\\r"),
            b'\t' => Some(b"\\t"),
            0x08 => Some(b"\\b"),
            0x0c => Some(b"\\f"),
            b'<' | b'>' | b'&' | 0..0x20 => Some(b""),
            // U+2028 and U+2029: E2 80 A8 / E2 80 A9.
            0xe2 if s.get(i + 1) == Some(&0x80) && matches!(s.get(i + 2), Some(0xa8 | 0xa9)) => {
                Some(b"")
            }
            _ => None,
        };
        let Some(escape) = escape else {
            i += 1;
            continue;
        };
        out.extend_from_slice(&s[start..i]);
        if !escape.is_empty() {
            out.extend_from_slice(escape);
            i += 1;
        } else if b == 0xe2 {
            out.extend_from_slice(if s[i + 2] == 0xa8 {
                b"\\u2028"
            } else {
                b"\\u2029"
            });
            i += 3;
        } else {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[usize::from(b >> 4)]);
            out.push(HEX[usize::from(b & 0xf)]);
            i += 1;
        }
        start = i;
    }
    out.extend_from_slice(&s[start..]);
}

/// A float64 as encoding/json writes it: shortest digits, plain between
/// 1e-6 and 1e21, else an exponent with a sign (`1e+21`, `1e-7`). `None`
/// for NaN and infinities, which Go refuses.
pub(crate) fn float(out: &mut Vec<u8>, f: f64) -> Option<()> {
    if !f.is_finite() {
        return None;
    }
    let abs = f.abs();
    let text = if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        let e = format!("{f:e}");
        match e.split_once('e') {
            Some((mantissa, exp)) if !exp.starts_with('-') => format!("{mantissa}e+{exp}"),
            _ => e,
        }
    } else {
        format!("{f}")
    };
    out.extend_from_slice(text.as_bytes());
    Some(())
}

/// `[]byte` as encoding/json writes it: standard base64, padded.
pub(crate) fn base64(out: &mut Vec<u8>, bytes: &[u8]) {
    out.push(b'"');
    let start = out.len();
    // 4 characters per 3 bytes, rounded up: never short.
    out.resize(start + bytes.len().div_ceil(3) * 4, 0);
    let written = base64::engine::general_purpose::STANDARD
        .encode_slice(bytes, &mut out[start..])
        .unwrap_or(0);
    out.truncate(start + written);
    out.push(b'"');
}

/// An integer in decimal, without core::fmt (a third of the time of a
/// small object went there).
pub(crate) fn int(out: &mut Vec<u8>, v: i64) {
    if v < 0 {
        out.push(b'-');
    }
    digits(out, v.unsigned_abs(), 1);
}

/// `n` in decimal, zero-padded to at least `width` digits.
fn digits(out: &mut Vec<u8>, mut n: u64, width: usize) {
    let mut buf = [b'0'; 20];
    let mut at = buf.len();
    while n > 0 || at > buf.len() - width {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if at == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[at..]);
}

/// A time as `2006-01-02T15:04:05Z` (metav1.Time) or, with `micros`,
/// `2006-01-02T15:04:05.000000Z` (metav1.MicroTime), in UTC. `None` for
/// years outside 0-9999, which Go's MarshalJSON refuses.
pub(crate) fn time(out: &mut Vec<u8>, seconds: i64, micros: Option<u32>) -> Option<()> {
    let days = seconds.div_euclid(86_400);
    let secs = seconds.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    if !(0..=9999).contains(&year) {
        return None;
    }
    let (year, month, day) = (
        year.unsigned_abs(),
        month.unsigned_abs(),
        day.unsigned_abs(),
    );
    let secs = secs.unsigned_abs();
    out.push(b'"');
    digits(out, year, 4);
    out.push(b'-');
    digits(out, month, 2);
    out.push(b'-');
    digits(out, day, 2);
    out.push(b'T');
    digits(out, secs / 3600, 2);
    out.push(b':');
    digits(out, secs / 60 % 60, 2);
    out.push(b':');
    digits(out, secs % 60, 2);
    if let Some(micros) = micros {
        out.push(b'.');
        digits(out, u64::from(micros), 6);
    }
    out.extend_from_slice(b"Z\"");
    Some(())
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's
/// `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Embeds JSON text (a RawExtension, FieldsV1 or apiextensions JSON) as
/// encoding/json embeds a MarshalJSON result: checked, then compacted, with
/// the same HTML escapes inside strings.
pub(crate) fn embed(out: &mut Vec<u8>, raw: &[u8]) -> Result<(), serde_json::Error> {
    serde_json::from_slice::<serde::de::IgnoredAny>(raw)?;
    // What the API server stores is compact already, and rarely has a
    // character to escape: then it is copied as it is.
    if !raw
        .iter()
        .any(|&b| matches!(b, b' ' | b'\t' | b'\n' | b'\r' | b'<' | b'>' | b'&' | 0xe2))
    {
        out.extend_from_slice(raw);
        return Ok(());
    }
    let mut in_string = false;
    let mut i = 0;
    while i < raw.len() {
        let b = raw[i];
        if in_string {
            match b {
                b'\\' => {
                    out.extend_from_slice(&raw[i..(i + 2).min(raw.len())]);
                    i += 2;
                    continue;
                }
                b'"' => in_string = false,
                b'<' | b'>' | b'&' => {
                    out.extend_from_slice(b"\\u00");
                    out.push(HEX[usize::from(b >> 4)]);
                    out.push(HEX[usize::from(b & 0xf)]);
                    i += 1;
                    continue;
                }
                0xe2 if raw.get(i + 1) == Some(&0x80)
                    && matches!(raw.get(i + 2), Some(0xa8 | 0xa9)) =>
                {
                    out.extend_from_slice(if raw[i + 2] == 0xa8 {
                        b"\\u2028"
                    } else {
                        b"\\u2029"
                    });
                    i += 3;
                    continue;
                }
                _ => {}
            }
            out.push(b);
        } else if !matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
            in_string = b == b'"';
            out.push(b);
        }
        i += 1;
    }
    Ok(())
}
