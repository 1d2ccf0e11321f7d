//! Every grant has a ceiling in the host config, enforced at load through
//! the real loader: a sidecar that asks for a folder, a variable, stdio, a
//! destination, more memory x concurrency than the host allows, or whose
//! plugin would take the host over its total memory, or a component that
//! creates more core instances than the host allows, does not load, and
//! the error names the grant, what was asked and the ceiling (and the host
//! config key that raises it); what the ceiling allows loads and is
//! granted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use kubewasm::app::RunOptions;
use kubewasm::runtime::grants::GrantCeiling;
use kubewasm::runtime::limits::Ceiling;
use kubewasm_tests::{Harness, idle, install, install_testkit, write_cluster};

const POD: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: a, namespace: default}\nspec: {containers: [{name: c, image: x}]}\n";

/// Loads the testkit plugins `(name, sidecar head)` under the ceiling
/// `limits` and returns the failed loads and the plugins that loaded.
async fn load(
    h: &Harness,
    plugins: &[(&str, String)],
    limits: Ceiling,
) -> (BTreeMap<String, String>, Vec<String>) {
    write_cluster(h.cluster.path(), &[("pods.yaml", POD)]);
    for (name, head) in plugins {
        install_testkit(h.plugins.path(), name, head);
    }
    let opts = RunOptions {
        limits,
        ..h.options()
    };
    let (app, _sink) = h.start_recording_with(&opts).await;
    idle(&app).await;
    let summary = app.summary();
    app.shutdown().await;
    (
        summary.failed_loads.clone(),
        summary.plugins.keys().cloned().collect(),
    )
}

fn refused<'a>(failed: &'a BTreeMap<String, String>, plugin: &str) -> &'a str {
    failed
        .get(plugin)
        .unwrap_or_else(|| panic!("{plugin} must fail to load: {failed:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_over_the_default_ceiling_do_not_load_and_name_the_ceiling() {
    let h = Harness::new();
    let outside = tempfile::tempdir().unwrap();
    let folder = (
        "folder",
        format!(
            "grants:\n  dirs: [{{host: {}, guest: /data}}]\n",
            outside.path().display()
        ),
    );
    let plugins = [
        folder.clone(),
        ("variable", "grants:\n  env: [HOME]\n".to_owned()),
        ("printer", "grants:\n  stdio: true\n".to_owned()),
        (
            "caller",
            "grants:\n  network: {allow: ['127.0.0.1:80']}\n".to_owned(),
        ),
        (
            "wide",
            "limits: {memory: 512Mi, concurrency: 4}\n".to_owned(),
        ),
        ("fine", "config: {mode: echo}\n".to_owned()),
    ];
    let (failed, _) = load(&h, &plugins, Ceiling::default()).await;
    for (plugin, wants) in [
        (
            "folder",
            &[
                "the sidecar's grants.dirs entry",
                "outside the host's ceiling grants.dirs (none: the default; host config)",
            ][..],
        ),
        (
            "variable",
            &[
                "grants.env asks for \"HOME\"",
                "ceiling grants.env does not list (none: the default; host config)",
            ],
        ),
        (
            "printer",
            &["grants.stdio (true) exceeds the host's ceiling grants.stdio (false"],
        ),
        (
            "caller",
            &[
                "grants.network.allow entry \"127.0.0.1:80\" is outside the host's ceiling grants.network (none: the default; host config)",
                "add it",
            ],
        ),
        (
            "wide",
            &[
                "limits.memory x limits.concurrency (536870912 bytes x 4 = 2147483648 bytes)",
                "ceiling limits.pluginMemory (1073741824 bytes, host config)",
            ],
        ),
    ] {
        let e = refused(&failed, plugin);
        for want in wants {
            assert!(e.contains(want), "{plugin}: {want:?} not in {e}");
        }
    }
    assert!(!failed.contains_key("fine"), "{failed:?}");

    // With `/` in the ceiling the folder loads, but the service-account
    // token and the host's own compile cache are never granted.
    let h = Harness::new();
    let cache = h.cache.path().display().to_string();
    let plugins = [
        (
            "token",
            "grants:\n  dirs: [{host: /var/run/secrets/kubernetes.io/serviceaccount, guest: /t}]\n"
                .to_owned(),
        ),
        (
            "cachereader",
            format!("grants:\n  dirs: [{{host: {cache}, guest: /c}}]\n"),
        ),
        folder,
    ];
    let limits = Ceiling {
        grants: GrantCeiling {
            dirs: vec!["/".into()],
            ..GrantCeiling::default()
        },
        ..Ceiling::default()
    };
    let (failed, loaded) = load(&h, &plugins, limits).await;
    for plugin in ["token", "cachereader"] {
        let e = refused(&failed, plugin);
        assert!(e.contains("never granted"), "{plugin}: {e}");
    }
    assert!(!failed.contains_key("folder"), "{failed:?}");
    assert!(loaded.contains(&"folder".to_owned()), "{loaded:?}");
}

/// What the ceiling allows is granted: the folder (written with `..`,
/// resolved to the ceiling's) is preopened when the instance starts (a
/// preopen that fails fails the load) and the variable passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_within_the_ceiling_load_and_are_granted() {
    let h = Harness::new();
    let shared = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(shared.path().join("certs")).unwrap();
    let limits = Ceiling {
        grants: GrantCeiling {
            dirs: vec![shared.path().to_owned()],
            env: vec!["PATH".into()],
            ..GrantCeiling::default()
        },
        ..Ceiling::default()
    };
    let (failed, loaded) = load(
        &h,
        &[(
            "granted",
            format!(
                "config: {{mode: echo}}\ngrants:\n  env: [PATH]\n  dirs: [{{host: {}/certs/.., guest: /shared}}]\n",
                shared.path().display()
            ),
        )],
        limits,
    )
    .await;
    assert!(failed.is_empty(), "{failed:?}");
    assert_eq!(loaded, ["granted"]);
}

/// `limits.totalMemory`: the second plugin that would take the host over
/// it does not load, naming what it asked, what the others hold and the
/// ceiling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_together_stay_under_the_total_memory_ceiling() {
    let h = Harness::new();
    let limits = Ceiling {
        total_memory: 200 << 20,
        ..Ceiling::default()
    };
    let head = "config: {mode: echo}\nlimits: {memory: 128Mi}\n".to_owned();
    let (failed, loaded) = load(&h, &[("a", head.clone()), ("b", head)], limits).await;
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(loaded.len(), 1, "{loaded:?}");
    let e = failed.values().next().unwrap();
    assert!(
        e.contains("(134217728 bytes) and the 134217728 bytes the other loaded plugins reserve")
            && e.contains("limits.totalMemory (209715200 bytes, host config)"),
        "{e}"
    );
}

/// `limits.instances`: noop creates 3 core instances; a ceiling of 2 fails
/// its load naming the key, 3 loads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_creating_more_instances_than_the_ceiling_does_not_load() {
    for (instances, loads) in [(2, false), (3, true)] {
        let h = Harness::new();
        write_cluster(h.cluster.path(), &[("pods.yaml", POD)]);
        install(
            h.plugins.path(),
            "noop",
            "noop",
            Some("access:\n  - {kinds: [pods], verbs: [read]}\n"),
        );
        let opts = RunOptions {
            limits: Ceiling {
                instances,
                ..Ceiling::default()
            },
            ..h.options()
        };
        let (app, _sink) = h.start_recording_with(&opts).await;
        idle(&app).await;
        let failed = app.summary().failed_loads.clone();
        app.shutdown().await;
        if loads {
            assert!(failed.is_empty(), "{instances}: {failed:?}");
        } else {
            let e = refused(&failed, "noop");
            assert!(
                e.contains("the host's ceiling limits.instances (2 core instances per plugin instance; host config)")
                    && e.contains("instance count too high at 3"),
                "{e}"
            );
        }
    }
}
