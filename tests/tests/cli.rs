//! The `kubewasm` binary itself: `run --until-idle` over the demo cluster
//! prints the per-plugin summary and exits 0; a config file gives the same
//! run; bad settings fail with a message that names the problem.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use kubewasm_tests::e2e::kubewasm_bin;
use kubewasm_tests::{install, repo_root};

fn demo() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let cluster = dir.path().join("cluster");
    let plugins = dir.path().join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    let status = Command::new("cp")
        .arg("-r")
        .arg(repo_root().join("examples/cluster"))
        .arg(&cluster)
        .status()
        .unwrap();
    assert!(status.success());
    for (name, artifact) in [
        ("namespace-defaults", "namespace_defaults"),
        ("crashloop-watcher", "crashloop_watcher"),
        ("config-replicator", "config_replicator"),
    ] {
        let sidecar =
            std::fs::read_to_string(repo_root().join(format!("examples/plugins/{name}.yaml")))
                .unwrap();
        install(&plugins, name, artifact, Some(&sidecar));
    }
    (dir, cluster, plugins)
}

/// Parses the summary table: plugin -> (delivered, failed, retries, dead).
fn summary(stdout: &str) -> Vec<(String, [u64; 4])> {
    stdout
        .lines()
        .skip_while(|l| !l.starts_with("plugin"))
        .skip(1)
        .take_while(|l| !l.starts_with("actions"))
        .map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            let n = |i: usize| cols[i].parse::<u64>().unwrap();
            (cols[0].to_owned(), [n(1), n(2), n(3), n(4)])
        })
        .collect()
}

#[test]
fn until_idle_prints_the_summary_and_exits_zero() {
    let (dir, cluster, plugins) = demo();
    let out = Command::new(kubewasm_bin())
        .args(["run", "--until-idle", "--local"])
        .arg(&cluster)
        .arg("--plugins")
        .arg(&plugins)
        .arg("--cache-dir")
        .arg(dir.path().join("cache"))
        .env_remove("KUBECONFIG")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {:?}\n{stderr}", out.status);
    let rows = summary(&stdout);
    let names: Vec<&str> = rows.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "config-replicator",
            "crashloop-watcher",
            "namespace-defaults"
        ],
        "{stdout}"
    );
    for (name, [delivered, failed, _, dead]) in &rows {
        assert!(*delivered > 0, "{name} got nothing: {stdout}");
        assert_eq!((*failed, *dead), (0, 0), "{name}: {stdout}");
    }
    let applied: u64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("actions applied: "))
        .and_then(|r| r.split(',').next())
        .unwrap()
        .parse()
        .unwrap();
    assert!(applied > 0, "{stdout}");
    // Progress and sync are visible in the log.
    assert!(stderr.contains("cache synced"), "{stderr}");
    // The plugins' writes landed in the folder.
    assert!(cluster.join("events.log").exists());
}

#[test]
fn a_config_file_gives_the_same_run_and_bad_settings_are_named() {
    let (dir, cluster, _plugins) = demo();
    let config = dir.path().join("kubewasm.yaml");
    std::fs::write(
        &config,
        "apiVersion: kubewasm.io/v1alpha1\nkind: HostConfig\nplugins: plugins\nlocal: cluster\ncacheDir: cache\nuntilIdle: true\ndryRun: true\n",
    )
    .unwrap();
    let before = std::fs::read_dir(&cluster).unwrap().count();
    let out = Command::new(kubewasm_bin())
        .args(["run", "--config"])
        .arg(&config)
        .env_remove("KUBECONFIG")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(summary(&stdout).len(), 3, "{stdout}");
    // Dry run: nothing written into the cluster folder.
    assert_eq!(std::fs::read_dir(&cluster).unwrap().count(), before);
    assert!(!cluster.join("events.log").exists());

    std::fs::write(
        &config,
        "apiVersion: kubewasm.io/v1alpha1\nkind: HostConfig\nplugin: x\n",
    )
    .unwrap();
    let out = Command::new(kubewasm_bin())
        .args(["run", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("kubewasm.yaml") && stderr.contains("unknown field `plugin`"),
        "{stderr}"
    );

    let out = Command::new(kubewasm_bin())
        .args(["run", "--plugins", "p", "--local", "l", "--kubeconfig", "k"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--local"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn until_idle_fails_naming_failed_loads_and_dead_letters_and_guest_output_reaches_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = dir.path().join("cluster");
    let plugins = dir.path().join("plugins");
    std::fs::create_dir_all(&cluster).unwrap();
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::write(
        cluster.join("pods.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata: {name: panic-1, namespace: default}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: flood-1, namespace: default}\n",
    )
    .unwrap();
    // No stdio grant: the guest's stderr is captured and logged anyway.
    install(
        &plugins,
        "panicky",
        "testkit",
        Some("config: {mode: panic}\nlimits: {maxAttempts: 1}\n"),
    );
    install(
        &plugins,
        "noisy",
        "testkit",
        Some("config: {mode: flood}\n"),
    );
    std::fs::write(plugins.join("broken.wasm"), b"not wasm at all").unwrap();
    let out = Command::new(kubewasm_bin())
        .args(["run", "--until-idle", "--local"])
        .arg(&cluster)
        .arg("--plugins")
        .arg(&plugins)
        .arg("--cache-dir")
        .arg(dir.path().join("cache"))
        .env_remove("KUBECONFIG")
        .env("RUST_LOG", "info")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stdout}\n{stderr}");
    // The summary is still printed, and the exit says why.
    assert_eq!(summary(&stdout).len(), 2, "{stdout}");
    assert!(
        stderr.contains("plugin broken failed to load")
            && stderr.contains("not a WebAssembly file"),
        "{stderr}"
    );
    assert!(
        stderr.contains("plugin panicky: 1 delta(s) went to dead letters"),
        "{stderr}"
    );
    // The panic message, attributed to the plugin, in the log and in the
    // dead delta's error.
    let line = |needle: &str, plugin: &str| {
        stderr
            .lines()
            .any(|l| l.contains(needle) && l.contains(plugin))
    };
    assert!(
        line(
            "guest output: testkit panicked on purpose on default/panic-1",
            "panicky"
        ),
        "{stderr}"
    );
    // The dead delta's error (a multi-line trap backtrace) ends with the cause.
    assert!(
        stderr.contains(
            "wasm trap: wasm `unreachable` instruction executed (guest output: testkit panicked on purpose on default/panic-1)"
        ),
        "{stderr}"
    );
    // A flood is cut at 64 KiB per call, with a note.
    let flood_lines = stderr
        .lines()
        .filter(|l| l.contains("guest output: ffff") && l.contains("noisy"))
        .count();
    assert_eq!(flood_lines, 64, "{stderr}");
    assert!(
        line("guest output truncated: 139264 more bytes dropped", "noisy"),
        "{stderr}"
    );
    // Compiling a new component logs its start with the size and its end with the time.
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("compiling component") && l.contains("bytes=")),
        "{stderr}"
    );
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("component compiled") && l.contains("elapsed_ms=")),
        "{stderr}"
    );
}

#[test]
fn without_a_cluster_flag_or_kubeconfig_the_error_says_what_to_pass() {
    let home = tempfile::tempdir().unwrap();
    let plugins = home.path().join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    // A ./cluster folder is no longer picked up by itself.
    std::fs::create_dir_all(home.path().join("cluster")).unwrap();
    let out = Command::new(kubewasm_bin())
        .args(["run", "--until-idle", "--plugins"])
        .arg(&plugins)
        .current_dir(home.path())
        .env("HOME", home.path())
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("--local DIR") && stderr.contains("--kubeconfig"),
        "{stderr}"
    );
}
