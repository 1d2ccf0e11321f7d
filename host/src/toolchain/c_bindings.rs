//! The C bindings of the built-in WIT's `plugin` world, as wit-bindgen's C
//! generator writes them, so a C author needs no wit-bindgen: `kubewasm new
//! --lang c` writes them into the project's `sdk/` beside the C SDK, and the
//! example plugins build with the same files (`plugins/c/sdk`).
//!
//! Generated ahead of time rather than by a generator inside kubewasm: the
//! bindings are as fixed as the WIT they come from (one set per WIT version,
//! and the C SDK is written against that version anyway), they can be read
//! and diffed in the repository, and the host binary carries no code
//! generator. The unit test below regenerates them with the `wit-bindgen-c`
//! crate and fails when the committed files differ (run it with
//! `KUBEWASM_REGENERATE=1` to write them). Without the `*_component_type.o`
//! object wit-bindgen would also write: `kubewasm componentize` embeds the
//! world's type instead (the SDK defines the symbol `plugin.c` uses to pull
//! that object in).

/// `plugin.h`: the world's types, imports and the exports to define.
pub const PLUGIN_H: &str = include_str!("../../../plugins/c/sdk/plugin.h");
/// `plugin.c`: the canonical ABI glue.
pub const PLUGIN_C: &str = include_str!("../../../plugins/c/sdk/plugin.c");

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::path::Path;

    use super::*;

    /// wit-bindgen's C bindings of the built-in WIT, by file name.
    fn generate() -> Vec<(String, String)> {
        let mut resolve = wit_parser::Resolve::default();
        let package = resolve
            .push_str("plugin.wit", crate::toolchain::PLUGIN_WIT)
            .unwrap();
        let world = resolve.select_world(&[package], Some("plugin")).unwrap();
        let opts = wit_bindgen_c::Opts {
            no_object_file: true,
            ..Default::default()
        };
        let mut files = wit_bindgen_core::Files::default();
        opts.build()
            .generate(&mut resolve, world, &mut files)
            .unwrap();
        files
            .iter()
            .map(|(name, bytes)| (name.to_owned(), String::from_utf8(bytes.to_vec()).unwrap()))
            .collect()
    }

    #[test]
    fn committed_bindings_are_the_generated_ones() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/c/sdk");
        let generated = generate();
        let names: Vec<&str> = generated.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["plugin.c", "plugin.h"]);
        if std::env::var_os("KUBEWASM_REGENERATE").is_some() {
            for (name, text) in &generated {
                std::fs::write(dir.join(name), text).unwrap();
            }
            return;
        }
        for ((name, text), committed) in generated.iter().zip([PLUGIN_C, PLUGIN_H]) {
            assert!(
                text == committed,
                "plugins/c/sdk/{name} is stale: run `KUBEWASM_REGENERATE=1 cargo test -p kubewasm --lib toolchain::c_bindings` and rebuild"
            );
        }
    }
}
