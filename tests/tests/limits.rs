//! Bounded host memory and time per plugin: a guest that keeps handles,
//! emits more actions or logs more than its sidecar's caps fails the call
//! with an error naming the cap (and counted); a guest asleep in a WASI
//! call is cut at its deadline; a sidecar cannot raise its limits over the
//! host config's ceiling.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use kubewasm_tests::{Harness, idle, install_testkit, until_idle_local, write_cluster};

fn pods(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: {n}, namespace: default}}\nspec: {{containers: [{{name: c, image: x}}]}}\n"))
        .collect::<Vec<_>>()
        .join("---\n")
}

/// (plugin, testkit config, limits, the error its dead delta must carry)
const CASES: [(&str, &str, &str, &str); 4] = [
    (
        "leaky",
        "{mode: leak, count: 50}",
        "{handles: 20, maxAttempts: 1}",
        "plugin exceeded limits.handles (20 live object handles",
    ),
    (
        "chatty",
        "{mode: actions, count: 20}",
        "{actionsPerCall: 5, maxAttempts: 1}",
        "plugin exceeded limits.actionsPerCall (5 actions in one call)",
    ),
    (
        "loud",
        "{mode: log, count: 100}",
        "{logBytesPerCall: 10Ki, maxAttempts: 1}",
        "plugin exceeded limits.logBytesPerCall (10240 bytes of log records in one call)",
    ),
    (
        "sleepy",
        "{mode: sleep, count: 30}",
        "{timeout: 300ms, maxAttempts: 1}",
        "plugin exceeded its 300ms deadline and was interrupted",
    ),
];

#[test]
fn caps_fail_the_call_naming_the_cap_a_sleep_is_cut_at_the_deadline_and_the_ceiling_holds() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = dir.path().join("cluster");
    let plugins = dir.path().join("plugins");
    std::fs::create_dir_all(&cluster).unwrap();
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::write(
        cluster.join("pods.yaml"),
        pods(&["leak-1", "actions-1", "log-1", "sleep-1", "fine-1"]),
    )
    .unwrap();
    for (name, config, limits, _) in CASES {
        install_testkit(
            &plugins,
            name,
            &format!("config: {config}\nlimits: {limits}\n"),
        );
    }
    // Within the default ceilings, but over this host's.
    install_testkit(&plugins, "greedy", "limits: {memory: 768Mi}\n");
    let config = dir.path().join("host.yaml");
    std::fs::write(
        &config,
        "apiVersion: kubewasm.io/v1alpha1\nkind: HostConfig\nlimits: {memory: 512Mi}\n",
    )
    .unwrap();
    let mut run = until_idle_local(&cluster, &plugins, &dir.path().join("cache"));
    run.arg("--config").arg(&config);
    let started = Instant::now();
    let out = run.output().unwrap();
    let elapsed = started.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stdout}\n{stderr}");
    for (name, _, _, error) in CASES {
        assert!(
            stderr.contains(&format!("plugin {name}: 1 delta(s) went to dead letters")),
            "{name}: {stderr}"
        );
        assert!(
            stderr
                .lines()
                .any(|l| l.contains(error) && l.contains(name)),
            "{name}: no line with {error:?} in\n{stderr}"
        );
    }
    // The 30 s sleep ended at its 300 ms deadline: the whole run is short.
    assert!(
        elapsed < Duration::from_secs(20),
        "the run took {elapsed:?}: the sleep was not cut\n{stderr}"
    );
    // Over the host's ceiling: refused, naming both values.
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("plugin greedy failed to load")
                && l.contains("limits.memory (805306368 bytes)")
                && l.contains("ceiling limits.memory (536870912 bytes")),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_over_a_cap_is_counted_and_a_call_within_it_is_not() {
    let (summary, metrics, actions) = two_testkits_on_two_pods(
        (
            "over",
            "config: {mode: actions, count: 6}\nlimits: {actionsPerCall: 5, maxAttempts: 2}\n",
        ),
        (
            "within",
            "config: {mode: actions, count: 5}\nlimits: {actionsPerCall: 5}\n",
        ),
    )
    .await;
    let over = &summary.plugins["over"];
    assert_eq!((over.failed_calls, over.dead), (4, 2), "{summary}");
    assert_eq!(summary.plugins["within"].dead, 0, "{summary}");
    // None of the failed calls' actions ran; all of the others' did.
    assert!(actions.iter().all(|(p, _)| p == "within"), "{actions:?}");
    assert_eq!(actions.len(), 10);
    for expected in [
        "kubewasm_plugin_limit_exceeded_total{plugin=\"over\",limit=\"actions_per_call\"} 4",
        "kubewasm_plugin_limit_exceeded_total{plugin=\"within\",limit=\"actions_per_call\"} 0",
        "kubewasm_plugin_limit_exceeded_total{plugin=\"over\",limit=\"handles\"} 0",
    ] {
        assert!(
            metrics.contains(expected),
            "missing {expected:?} in\n{metrics}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_over_its_action_rate_waits_and_none_of_its_actions_is_lost() {
    // 2 calls of 10 actions at 5 a second: a burst of 5, then 15 wait.
    let (summary, metrics, actions) = two_testkits_on_two_pods(
        (
            "flood",
            "config: {mode: actions, count: 10}\nlimits: {actionsPerSecond: 5}\n",
        ),
        ("calm", "config: {mode: actions, count: 2}\n"),
    )
    .await;
    assert_eq!(summary.plugins["flood"].dead, 0, "{summary}");
    let count = |plugin: &str| actions.iter().filter(|(p, _)| p == plugin).count();
    assert_eq!((count("flood"), count("calm")), (20, 4), "{actions:?}");
    for expected in [
        "kubewasm_plugin_actions_throttled_total{plugin=\"flood\"} 15",
        "kubewasm_plugin_actions_throttled_total{plugin=\"calm\"} 0",
    ] {
        assert!(
            metrics.contains(expected),
            "missing {expected:?} in\n{metrics}"
        );
    }
    // 15 actions at 5 a second waited about 3 s in all.
    let waited: f64 = metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix("kubewasm_plugin_action_throttle_seconds_total{plugin=\"flood\"} ")
        })
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no throttle seconds for flood in\n{metrics}"));
    assert!(waited >= 2.5, "{waited}");
}

/// A guest blocked in a socket read (a peer that accepts and never
/// answers) is cut at its call's deadline like a sleep: the call fails as a
/// timeout, the delta goes to dead letters, and the run ends.
#[test]
fn a_socket_read_that_never_returns_is_cut_at_the_deadline() {
    let peer = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = peer.local_addr().unwrap();
    // Accepts (the kernel's backlog does) and never writes.
    let dir = tempfile::tempdir().unwrap();
    let cluster = dir.path().join("cluster");
    let plugins = dir.path().join("plugins");
    std::fs::create_dir_all(&cluster).unwrap();
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::write(cluster.join("pods.yaml"), pods(&["stall-1"])).unwrap();
    install_testkit(
        &plugins,
        "stalled",
        &format!(
            "config: {{mode: stall, connect: ['{addr}']}}\nlimits: {{timeout: 500ms, maxAttempts: 1}}\ngrants:\n  network: {{allow: ['{addr}']}}\n"
        ),
    );
    // The host config lets sidecars grant loopback destinations.
    let config = dir.path().join("host.yaml");
    std::fs::write(
        &config,
        "apiVersion: kubewasm.io/v1alpha1\nkind: HostConfig\ngrants: {network: ['127.0.0.0/8:*']}\n",
    )
    .unwrap();
    let mut run = until_idle_local(&cluster, &plugins, &dir.path().join("cache"));
    run.arg("--config").arg(&config);
    let started = Instant::now();
    let mut child = run
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("stderr")).unwrap())
        .spawn()
        .unwrap();
    // Uncut, the read blocks for good: fail instead of hanging the suite.
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the run still blocked after 60 s: the read was not cut\n{}",
                std::fs::read_to_string(dir.path().join("stderr")).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stderr = std::fs::read_to_string(dir.path().join("stderr")).unwrap();
    let elapsed = started.elapsed();
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains("plugin stalled: 1 delta(s) went to dead letters"),
        "{stderr}"
    );
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("plugin exceeded its 500ms deadline") && l.contains("stalled")),
        "{stderr}"
    );
    // Bounded by the deadline, not by the peer (which never answers): the
    // instance blocked in the read does not hold the run's exit.
    assert!(
        !stderr.contains("did not finish within the stop grace"),
        "{elapsed:?}\n{stderr}"
    );
    assert!(elapsed < Duration::from_secs(10), "{elapsed:?}\n{stderr}");
    eprintln!("socket read cut: the run took {elapsed:?}");
    drop(peer);
}

/// Two testkits (`(name, sidecar head)`) over Pods `actions-1` and
/// `actions-2`, run until idle: the summary, the metrics text and the
/// actions they emitted.
async fn two_testkits_on_two_pods(
    a: (&str, &str),
    b: (&str, &str),
) -> (
    kubewasm::app::Summary,
    String,
    Vec<(String, kubewasm::actions::Action)>,
) {
    let h = Harness::new();
    write_cluster(
        h.cluster.path(),
        &[("pods.yaml", &pods(&["actions-1", "actions-2"]))],
    );
    for (name, head) in [a, b] {
        install_testkit(h.plugins.path(), name, head);
    }
    let (app, sink) = h.start_recording().await;
    idle(&app).await;
    let summary = app.summary();
    let metrics = app.telemetry().metrics().encode().unwrap();
    app.shutdown().await;
    (summary, metrics, sink.take())
}
