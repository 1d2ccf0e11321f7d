//! The config-replicator written in JavaScript, Python, C and Go
//! (`plugins/{js,python,c,go}`), each driven through the real host over the
//! same fixture as the Rust plugin's test (`tests/examples.rs`) with the
//! same exact expected actions. The artifacts come from
//! `plugins/build-languages.sh` (toolchains: `plugins/install-toolchains.sh`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use kubewasm_tests::{
    Harness, REPLICATOR_SIDECAR, check_replicator_copies_exactly, check_replicator_follows_source,
    install_file, language_artifacts, precompile_into,
};

fn installer(lang: &str) -> impl FnOnce(&Harness) {
    let artifact = language_artifacts().join(format!("{lang}-config-replicator.wasm"));
    move |h| {
        precompile_into(h, &artifact);
        install_file(
            h.plugins.path(),
            "replicator",
            &artifact,
            Some(REPLICATOR_SIDECAR),
        );
    }
}

macro_rules! language_tests {
    ($($module:ident => $lang:literal),* $(,)?) => {$(
        mod $module {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn config_replicator_copies_to_matching_namespaces_exactly() {
                check_replicator_copies_exactly(installer($lang)).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn config_replicator_follows_its_source_through_update_new_namespace_and_delete() {
                check_replicator_follows_source(installer($lang)).await;
            }
        }
    )*};
}

language_tests! {
    javascript => "js",
    python => "python",
    c => "c",
    go => "go",
}
