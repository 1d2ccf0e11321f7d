//! The `kubewasm` binary itself: `run --until-idle` over the demo cluster
//! prints the per-plugin summary and exits 0; a config file gives the same
//! run; bad settings fail with a message that names the problem.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use kubewasm_tests::e2e::kubewasm_bin;
use kubewasm_tests::{install, repo_root, until_idle_local};

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
        Some(&format!(
            "config: {{mode: panic}}\nlimits: {{maxAttempts: 1}}\n{}",
            kubewasm_tests::TESTKIT_ACCESS
        )),
    );
    install(
        &plugins,
        "noisy",
        "testkit",
        Some(&format!(
            "config: {{mode: flood}}\n{}",
            kubewasm_tests::TESTKIT_ACCESS
        )),
    );
    std::fs::write(plugins.join("broken.wasm"), b"not wasm at all").unwrap();
    // The assertions read text log fields (`plugin=...`, `bytes=`).
    let out = until_idle_local(&cluster, &plugins, &dir.path().join("cache"))
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

/// `kubewasm run` serving probes and metrics on a free port over the demo
/// cluster: JSON logs (stderr is a file), /healthz up, /readyz 200 only with
/// every informer synced and every plugin file loaded, 503 naming a plugin
/// file that is not loaded yet, /metrics counters that move when an object
/// changes (no token asked: metrics authentication is off on the local
/// cluster), no web view on this listener, and the listener gone after
/// SIGTERM.
#[test]
fn probes_and_metrics_follow_the_running_host() {
    use std::time::{Duration, Instant};

    use kubewasm_tests::e2e::{http_get, sample};

    let (dir, cluster, plugins) = demo();
    let log = dir.path().join("host.log");
    let child = Command::new(kubewasm_bin())
        .args(["run", "--local"])
        .arg(&cluster)
        .arg("--plugins")
        .arg(&plugins)
        .arg("--cache-dir")
        .arg(dir.path().join("cache"))
        .args(["--metrics-addr", "127.0.0.1:0"])
        .env_remove("KUBECONFIG")
        .env_remove("KUBEWASM_LOG_FORMAT")
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let logs = || std::fs::read_to_string(&log).unwrap_or_default();
    let poll = |what: &str, check: &mut dyn FnMut() -> bool| {
        let start = Instant::now();
        while !check() {
            assert!(
                start.elapsed() < Duration::from_secs(120),
                "timed out waiting for {what}; log:\n{}",
                logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };

    // The bound address, from a JSON log line.
    let mut addr = None;
    poll("the metrics listener", &mut || {
        addr = logs().lines().find_map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).ok()?;
            (v["fields"]["message"] == "metrics listening" && v["fields"]["auth"] == false)
                .then(|| v["fields"]["addr"].as_str()?.parse().ok())?
        });
        addr.is_some()
    });
    let addr: std::net::SocketAddr = addr.unwrap();
    let child = Kill(child);
    assert_ne!(addr.port(), 0);
    assert_eq!(http_get(addr, "/healthz").unwrap().0, 200);
    assert_eq!(http_get(addr, "/ui").unwrap().0, 404);

    // Ready only once every informer has synced.
    poll("/readyz 200", &mut || {
        let (code, _, body) = http_get(addr, "/readyz").unwrap();
        assert!(code == 200 || code == 503, "{code} {body}");
        if code == 503 {
            assert!(!body.trim().is_empty(), "a 503 names what is not ready");
        }
        code == 200
    });
    let at_ready = logs();
    let started = at_ready.matches("starting informer").count();
    assert!(started >= 3, "{at_ready}");
    assert_eq!(
        at_ready.matches("cache synced").count(),
        started,
        "ready before every informer synced:\n{at_ready}"
    );
    for line in at_ready.lines() {
        let v: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not a JSON log line ({e}): {line}"));
        assert!(
            v["level"].is_string() && v["fields"]["message"].is_string(),
            "{line}"
        );
    }

    // A plugin file that is not loaded yet makes the host unready, named:
    // "not scanned yet" until the folder watcher's scan (200 ms after the
    // write), then "loading" until it serves. The probe is read every 20 ms
    // from the write until it is ready again: the window (the 200 ms and
    // the load) is seen whether the first probe lands before or after the
    // scan, and only those two answers may appear in it.
    install(&plugins, "late", "noop", None);
    let mut unready = Vec::new();
    poll("the late plugin loaded", &mut || {
        let (code, _, body) = http_get(addr, "/readyz").unwrap();
        if code == 503 && unready.last() != Some(&body) {
            unready.push(body);
        }
        code == 200
    });
    assert!(
        !unready.is_empty(),
        "never unready while the late plugin loaded"
    );
    for body in &unready {
        assert!(
            ["plugin late: not scanned yet\n", "plugin late: loading\n"].contains(&body.as_str()),
            "an unready answer other than the late plugin's: {unready:?}"
        );
    }
    assert!(logs().contains("\"plugin\":\"late\""), "{}", logs());

    // Metrics: the content type, and counters that move with the cluster.
    let (code, head, body) = http_get(addr, "/metrics").unwrap();
    assert_eq!(code, 200);
    assert!(
        head.to_lowercase()
            .contains("content-type: application/openmetrics-text; version=1.0.0"),
        "{head}"
    );
    let added = "kubewasm_informer_deltas_total{kind=\"configmaps\",type=\"added\"}";
    let cached = "kubewasm_cache_objects{kind=\"configmaps\"}";
    let before = sample(&body, added).unwrap_or_else(|| panic!("no {added} in:\n{body}"));
    let cached_before = sample(&body, cached).unwrap();
    assert!(before >= 1.0, "{body}");
    for series in [
        "kubewasm_leader 1",
        "kubewasm_plugin_queue_depth{plugin=\"config-replicator\"}",
        "kubewasm_plugin_call_duration_seconds_count{plugin=\"namespace-defaults\"}",
        "kubewasm_plugin_dead_letters_total{plugin=\"crashloop-watcher\"} 0",
        "kubewasm_cache_bytes{kind=\"configmaps\"}",
    ] {
        assert!(body.contains(series), "no {series} in:\n{body}");
    }
    let applied: f64 = body
        .lines()
        .filter(|l| l.starts_with("kubewasm_actions_total{") && l.contains("outcome=\"applied\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(applied > 0.0, "the demo plugins acted:\n{body}");
    std::fs::write(
        cluster.join("probe.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: metrics-probe, namespace: platform}\ndata: {x: y}\n",
    )
    .unwrap();
    let mut last = String::new();
    poll("the added ConfigMap counted", &mut || {
        last = http_get(addr, "/metrics").unwrap().2;
        sample(&last, added).unwrap_or(0.0) > before
            && sample(&last, cached).unwrap_or(0.0) > cached_before
    });
    assert_eq!(http_get(addr, "/healthz").unwrap().0, 200);

    // SIGTERM: a clean exit, and the listener is gone.
    let mut child = child;
    let status = Command::new("kill")
        .arg("-TERM")
        .arg(child.0.id().to_string())
        .status()
        .unwrap();
    assert!(status.success());
    let start = Instant::now();
    let exit = loop {
        if let Some(s) = child.0.try_wait().unwrap() {
            break s;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "{}", logs());
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(exit.success(), "{exit:?}\n{}", logs());
    assert!(std::net::TcpStream::connect(addr).is_err());
}

/// `kubewasm rbac` over a plugin folder and Plugin manifests together: the
/// folder plugin's registration within its sidecar, the Plugin's access
/// list cluster-wide or in the namespaces it lists, the NamespacedPlugin's
/// confined to a Role in its namespace (what the ClusterRole grants already
/// not repeated there), merged per rule; other kinds noted on stderr; a
/// spec the host would refuse fails naming the object and the field.
#[test]
fn rbac_merges_the_folder_and_plugin_objects_as_the_host_grants_them() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    install(
        &plugins,
        "recorder",
        "recorder",
        Some(&kubewasm_tests::e2e::recorder_sidecar(
            "team-a",
            &["configmaps"],
        )),
    );
    let objects = dir.path().join("objects.yaml");
    std::fs::write(
        &objects,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\n---\n\
         apiVersion: kubewasm.io/v1alpha1\nkind: Plugin\nmetadata: {name: ops}\nspec:\n  module: {oci: {reference: 'registry.example/ops:1'}}\n  access:\n    - {kinds: [deployments.apps], verbs: [read, patch, status]}\n    - {kinds: [configmaps], verbs: [read], namespaces: [team-a]}\n---\n\
         apiVersion: kubewasm.io/v1alpha1\nkind: NamespacedPlugin\nmetadata: {name: mine, namespace: team-b}\nspec:\n  module: {configMap: {name: modules, key: mine.wasm}}\n  access:\n    - {kinds: [configmaps, deployments.apps], verbs: [read, apply]}\n    - {kinds: [namespaces], verbs: [read]}\n",
    )
    .unwrap();
    let rbac = |objects: &std::path::Path| {
        Command::new(kubewasm_bin())
            .args(["rbac", "--plugins-only", "--plugins"])
            .arg(&plugins)
            .arg("--objects")
            .arg(objects)
            .arg("--cache-dir")
            .arg(dir.path().join("cache"))
            .env("RUST_LOG", "warn")
            .output()
            .unwrap()
    };
    let out = rbac(&objects);
    let (stdout, stderr) = (
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("note: ") && stderr.contains("ConfigMap settings ignored"),
        "{stderr}"
    );
    // (kind, namespace) -> its rules as "group/resource verbs".
    let roles = kubewasm_tests::manifests::roles(&stdout);
    let expected: Vec<(String, String, Vec<String>)> = [
        (
            "ClusterRole",
            "",
            vec![
                "apps/deployments get,list,patch,watch",
                "apps/deployments/status patch",
            ],
        ),
        (
            "Role",
            "team-a",
            vec![
                "/configmaps get,list,watch",
                "events.k8s.io/events create,patch",
            ],
        ),
        // The host's in team-b: the reads its cache makes for the tenant.
        ("Role", "team-b", vec!["/configmaps get,list,watch"]),
        // The tenant's own, bound to its ServiceAccount: everything its
        // plugin does there as it.
        (
            "Role",
            "team-b",
            vec![
                "/configmaps create,get,list,patch,watch",
                "apps/deployments create,get,list,patch,watch",
            ],
        ),
    ]
    .into_iter()
    .map(|(k, ns, rules)| {
        (
            k.to_owned(),
            ns.to_owned(),
            rules.into_iter().map(str::to_owned).collect(),
        )
    })
    .collect();
    assert_eq!(roles, expected, "{stdout}");
    // One rule for what both need, naming both.
    assert!(
        stdout.contains("# plugins.kubewasm.io/ops (may read); recorder (subscribes)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("from the registrations and sidecar access lists of: recorder; and the access lists of the Plugin objects: plugins.kubewasm.io/ops, namespacedplugins.kubewasm.io/mine in team-b."),
        "{stdout}"
    );

    // A tenant asking outside its namespace: refused as the host refuses it.
    let greedy = dir.path().join("greedy.yaml");
    std::fs::write(
        &greedy,
        "apiVersion: kubewasm.io/v1alpha1\nkind: NamespacedPlugin\nmetadata: {name: greedy, namespace: team-b}\nspec:\n  module: {configMap: {name: modules, key: g.wasm}}\n  access: [{kinds: [secrets], verbs: [read], namespaces: [kube-system]}]\n",
    )
    .unwrap();
    let out = rbac(&greedy);
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("namespacedplugins.kubewasm.io/greedy in team-b")
            && stderr.contains("greedy.yaml")
            && stderr.contains("access[0] names namespace kube-system"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
}

/// The book's and the README's relative links and anchors resolve
/// (kubewasm_tests::docs has the rules): a chapter moved or a heading
/// renamed fails here, naming the page, the line and the link.
#[test]
fn docs_links_resolve() {
    let root = repo_root();
    let pages = kubewasm_tests::docs::pages(&root);
    assert!(
        pages.len() > 20,
        "the book's pages were not found under docs/book/src"
    );
    let broken = kubewasm_tests::docs::broken_links(&root, &pages);
    assert!(
        broken.is_empty(),
        "broken links ({}):\n{}",
        broken.len(),
        broken.join("\n")
    );
}
