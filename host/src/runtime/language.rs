//! The source language of a component, from the `producers` custom
//! sections its toolchain wrote (the web view shows it; nothing else
//! depends on it). Read once per load, off the async threads.

use wasmparser::{KnownCustom, Parser, Payload};

/// The language the component was written in, when its producers (or,
/// for a linked interpreter, its own name in its data) say. What
/// toolchains write, checked on this repository's plugins: a Rust guest
/// names `wit-bindgen-rust` (release builds may strip everything); a C
/// guest `wit-bindgen-c` (and so does a Rust guest's wasi-libc) or, built
/// with `kubewasm componentize` (no type object of wit-bindgen's),
/// `language: C99` or `C11` as clang writes it; a Go guest
/// `language: go1.x`; componentize-js and componentize-py link an
/// interpreter (`dylink.0` sections) whose producers say only `Rust`, so
/// their own names are looked for in the data. Any guest embeds the WASI
/// adapter, whose producers say `Rust` too: a bare `Rust` proves nothing
/// beside another tool.
pub fn detect(bytes: &[u8]) -> Option<String> {
    let mut languages: Vec<String> = Vec::new();
    let mut tools: Vec<String> = Vec::new();
    let mut linked = false;
    for payload in Parser::new(0).parse_all(bytes) {
        let section = match payload {
            Ok(Payload::CustomSection(section)) => section,
            Ok(_) => continue,
            Err(_) => break,
        };
        if section.name() == "dylink.0" {
            linked = true;
        }
        let KnownCustom::Producers(reader) = section.as_known() else {
            continue;
        };
        for field in reader.into_iter().flatten() {
            for value in field.values.into_iter().flatten() {
                match field.name {
                    "language" => languages.push(value.name.to_ascii_lowercase()),
                    "processed-by" | "sdk" => tools.push(value.name.to_ascii_lowercase()),
                    _ => {}
                }
            }
        }
    }
    let tool = |t: &str| tools.iter().any(|x| x.contains(t));
    let named = |needle: &[u8]| linked && bytes.windows(needle.len()).any(|w| w == needle);
    let found = if tool("componentize-py") || named(b"componentize-py") {
        "Python"
    } else if tool("componentize-js") || tool("componentizejs") || named(b"componentize-js") {
        "JavaScript"
    } else if languages.iter().any(|l| l.starts_with("go")) || tool("tinygo") {
        "Go"
    } else if tool("wit-bindgen-rust") {
        "Rust"
    } else if tool("wit-bindgen-c") || languages.iter().any(|l| is_c(l)) {
        "C"
    } else if linked {
        // An interpreter this list does not know.
        return None;
    } else if languages.iter().any(|l| l == "rust") {
        "Rust"
    } else {
        return None;
    };
    Some(found.to_owned())
}

/// `c89`, `c99`, `c11`, `c17` (lowercased): clang's names for C.
fn is_c(language: &str) -> bool {
    language
        .strip_prefix('c')
        .is_some_and(|v| !v.is_empty() && v.chars().all(|c| c.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A core module with one `producers` section of `fields`.
    fn module(fields: &[(&str, &[&str])]) -> Vec<u8> {
        fn name(out: &mut Vec<u8>, s: &str) {
            out.push(s.len() as u8);
            out.extend_from_slice(s.as_bytes());
        }
        let mut body = Vec::new();
        name(&mut body, "producers");
        body.push(fields.len() as u8);
        for (field, values) in fields {
            name(&mut body, field);
            body.push(values.len() as u8);
            for v in *values {
                name(&mut body, v);
                name(&mut body, "1.0");
            }
        }
        let mut m = b"\0asm\x01\0\0\0".to_vec();
        m.push(0);
        m.push(body.len() as u8);
        m.extend(body);
        m
    }

    #[test]
    fn the_language_comes_from_the_producers_section() {
        let detect = |fields: &[(&str, &[&str])]| detect(&module(fields));
        assert_eq!(
            detect(&[(
                "processed-by",
                &["wit-component", "wit-bindgen-rust", "wit-bindgen-c"]
            )])
            .as_deref(),
            Some("Rust")
        );
        assert_eq!(
            detect(&[("processed-by", &["wit-component", "wit-bindgen-c"])]).as_deref(),
            Some("C")
        );
        // A C guest made a component by `kubewasm componentize`: clang's
        // language names, and the WASI adapter's `Rust` beside them.
        assert_eq!(
            detect(&[
                ("language", &["C99", "C11", "Rust"]),
                ("processed-by", &["Debian clang", "wit-component", "rustc"])
            ])
            .as_deref(),
            Some("C")
        );
        assert_eq!(
            detect(&[
                ("language", &["go1.26.8"]),
                ("processed-by", &["Go cmd/compile"])
            ])
            .as_deref(),
            Some("Go")
        );
        assert_eq!(
            detect(&[("processed-by", &["componentize-py"])]).as_deref(),
            Some("Python")
        );
        assert_eq!(detect(&[("language", &["Rust"])]).as_deref(), Some("Rust"));
        assert_eq!(detect(&[]), None);
        assert_eq!(super::detect(b"not wasm"), None);
    }
}
