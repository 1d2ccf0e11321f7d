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

/// The Python SDK (`plugins/python/sdk`) beyond the config-replicator: enum
/// values given as names, and the readable error a wrong name gets instead
/// of a trap in componentize-py's bindings; and the Python twin's orphan
/// handling, compared action for action with the Rust plugin's.
mod python_sdk {
    use std::path::{Path, PathBuf};
    use std::process::Command;

    use kubewasm::scaffold::{self, Lang};
    use kubewasm_tests::{
        Harness, REPLICATOR_CLUSTER, REPLICATOR_SIDECAR, idle, install, install_file,
        precompile_into, record_until_idle, repo_root, write_cluster,
    };

    /// A plugin whose subscription's delta types and whose delete's
    /// propagation come from its config, as strings.
    const ENUMS_APP: &str = r#"import kubewasm
from kubewasm import actions, kinds, object_ref, parse_config, registration, subscription


class Enums(kubewasm.Plugin):
    def __init__(self, ctx):
        self.config = parse_config(ctx, {"deltas": ["added"], "propagation": "background"})

    def registration(self):
        return registration(
            subscriptions=[subscription(kinds.ConfigMap, deltas=self.config["deltas"])],
            writes=[kinds.ConfigMap],
        )

    def handle(self, delta):
        actions.delete(object_ref(kinds.ConfigMap, delta), self.config["propagation"])


Handler = kubewasm.handler(Enums)
"#;

    /// The enums plugin's fixture: a ConfigMap added is deleted with the
    /// configured propagation, named as the WIT names it.
    const ENUMS_FIXTURE: &str = r#"sidecar: ../enums.yaml
config: {propagation: foreground}
cases:
  - name: the delete carries the configured propagation
    steps:
      - delta: added
        object: {apiVersion: v1, kind: ConfigMap, metadata: {name: old, namespace: demo}}
        expect:
          - call: added configmaps demo/old
            result: ok
            actions:
              - delete: {target: configmaps demo/old, propagation: foreground}
"#;

    /// Builds [`ENUMS_APP`] in a `kubewasm new --lang python` project (the
    /// SDK as the scaffold embeds it) with the repository's componentize-py.
    fn build_enums_plugin(work: &Path) -> PathBuf {
        let root = scaffold::create(Lang::Python, "enums", work, None).unwrap();
        std::fs::write(root.join("app.py"), ENUMS_APP).unwrap();
        // Its fixture pins the hello plugin this app replaces; build.sh runs
        // what tests/ holds, here a case of this app's own.
        std::fs::write(root.join("tests/hello.yaml"), ENUMS_FIXTURE).unwrap();
        std::fs::write(root.join("enums.yaml"), ACCESS).unwrap();
        let cpy = repo_root().join("plugins/python/.venv/bin/componentize-py");
        assert!(
            cpy.exists(),
            "{} is missing: run plugins/install-toolchains.sh",
            cpy.display()
        );
        let status = Command::new("bash")
            .arg("build.sh")
            .current_dir(&root)
            .env("COMPONENTIZE_PY", &cpy)
            .env("KUBEWASM", kubewasm_tests::e2e::kubewasm_bin())
            .status()
            .expect("run build.sh");
        assert!(status.success(), "build.sh of the enums plugin failed");
        root.join("dist/enums.wasm")
    }

    const ACCESS: &str = "access:\n  - {kinds: [configmaps], verbs: [read, delete]}\n";

    /// Names are accepted in any case (`Added`, `Orphan`); a wrong name
    /// refuses the registration, or fails the delta permanently, with a
    /// message naming the value and the accepted names.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn enum_names_work_and_a_wrong_one_is_a_readable_error() {
        let work = tempfile::tempdir().unwrap();
        let wasm = build_enums_plugin(work.path());
        let h = Harness::new();
        write_cluster(
            h.cluster.path(),
            &[(
                "cluster.yaml",
                "apiVersion: v1\nkind: Namespace\nmetadata: {name: demo}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: greeting, namespace: demo}\ndata: {message: hello}\n",
            )],
        );
        precompile_into(&h, &wasm);
        for (name, config) in [
            ("strings", "{deltas: [Added], propagation: Orphan}"),
            ("bad-delta", "{deltas: [added, add]}"),
            ("bad-propagation", "{propagation: sideways}"),
        ] {
            install_file(
                h.plugins.path(),
                name,
                &wasm,
                Some(&format!("config: {config}\n{ACCESS}")),
            );
        }
        let (app, sink) = h.start_recording().await;
        idle(&app).await;
        let summary = app.summary();
        app.shutdown().await;
        let actions: Vec<String> = sink
            .take()
            .iter()
            .map(|(plugin, a)| format!("{plugin}: {}", kubewasm_tests::describe(a)))
            .collect();
        assert_eq!(
            actions,
            vec!["strings: delete Orphan configmaps demo/greeting"]
        );

        let refused = summary
            .failed_loads
            .get("bad-delta")
            .unwrap_or_else(|| panic!("bad-delta loaded: {summary}"));
        assert!(
            refused.starts_with("the plugin's register call failed: "),
            "{refused}"
        );
        assert!(
            refused.ends_with(r#": subscription to v1/ConfigMap: invalid delta type "add": expected one of "added", "updated", "deleted", "resync", "synced", "requeue" (or a kubewasm.DeltaType)"#),
            "{refused}"
        );

        let dead = &summary.plugins["bad-propagation"].dead_letters;
        assert_eq!(dead.len(), 1, "{summary}");
        assert!(
            dead[0].last_error.ends_with(r#": invalid propagation "sideways": expected one of "background", "foreground", "orphan" (or a kubewasm.Propagation)"#),
            "{}",
            dead[0].last_error
        );
        assert_eq!(summary.plugins["bad-propagation"].dead, 1);
        assert_eq!(summary.plugins["strings"].dead, 0);
    }

    /// A copy whose source is gone (deleted while no replica led) is
    /// deleted when the copies are replayed: the Python twin emits exactly
    /// the Rust plugin's actions over the same cluster.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn config_replicator_deletes_orphan_copies_like_the_rust_plugin() {
        let cluster = format!("{REPLICATOR_CLUSTER}{}", kubewasm_tests::REPLICATOR_ORPHANS);
        let rust = replicator_actions(&cluster, |h| {
            install(
                h.plugins.path(),
                "replicator",
                "config_replicator",
                Some(REPLICATOR_SIDECAR),
            );
        })
        .await;
        let python = replicator_actions(&cluster, super::installer("python")).await;
        assert!(
            rust.iter()
                .any(|a| a == "replicator: delete Background configmaps team-a/gone"),
            "{rust:#?}"
        );
        assert!(
            !rust
                .iter()
                .any(|a| a.contains("team-a/others") || a.contains("team-a/unmarked")),
            "another replicator's or an unmarked orphan swept: {rust:#?}"
        );
        assert_eq!(python, rust);
    }

    /// The actions of the plugin `install` puts in over `cluster`'s sync.
    async fn replicator_actions(cluster: &str, install: impl FnOnce(&Harness)) -> Vec<String> {
        let h = Harness::new();
        write_cluster(h.cluster.path(), &[("cluster.yaml", cluster)]);
        install(&h);
        record_until_idle(&h).await
    }
}
