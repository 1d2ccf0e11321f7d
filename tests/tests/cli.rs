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
