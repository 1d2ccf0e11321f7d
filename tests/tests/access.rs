//! Operator-granted access, end to end through the embedded local cluster:
//! the sidecar's access list refuses a registration that asks for more,
//! narrows subscriptions to the granted namespaces, refuses cache reads and
//! actions outside the grant with errors naming the kind, verb and
//! namespace, and `kubewasm rbac` follows the grant; network grants reach
//! only their destinations and look up only their names, within the host
//! config's ceiling.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use kubewasm::runtime::grants::GrantCeiling;
use kubewasm::runtime::limits::Ceiling;
use kubewasm::runtime::network::{NetworkCeiling, Pattern};
use kubewasm_tests::{Harness, describe, idle, install, write_cluster};

/// A ceiling whose `grants.network` allows `patterns`.
fn network_ceiling(patterns: &[&str]) -> Ceiling {
    Ceiling {
        grants: GrantCeiling {
            network: NetworkCeiling {
                allow: patterns
                    .iter()
                    .map(|p| Pattern::parse(p).unwrap())
                    .collect(),
            },
            ..GrantCeiling::default()
        },
        ..Ceiling::default()
    }
}

fn pod(ns: &str, name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {ns}}}\nspec: {{containers: [{{name: c, image: x}}]}}\n"
    )
}

/// Starts recording with `sidecar` for testkit plugin `p`; returns the
/// failed loads and the recorded actions.
async fn run(
    cluster: &[(&str, &str)],
    sidecar: Option<&str>,
) -> (std::collections::BTreeMap<String, String>, Vec<String>) {
    run_under(cluster, sidecar, Ceiling::default()).await
}

/// [`run`] under the host ceiling `limits`.
async fn run_under(
    cluster: &[(&str, &str)],
    sidecar: Option<&str>,
    limits: Ceiling,
) -> (std::collections::BTreeMap<String, String>, Vec<String>) {
    let h = Harness::new();
    write_cluster(h.cluster.path(), cluster);
    install(h.plugins.path(), "p", "testkit", sidecar);
    let opts = kubewasm::app::RunOptions {
        limits,
        ..h.options()
    };
    let (app, sink) = h.start_recording_with(&opts).await;
    idle(&app).await;
    let failed = app.summary().failed_loads;
    app.shutdown().await;
    let actions = sink.take().iter().map(|(_, a)| describe(a)).collect();
    (failed, actions)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registration_asking_more_than_granted_does_not_load() {
    // testkit declares writes of pods and configmaps; configmaps get no
    // write verb.
    let (failed, actions) = run(
        &[("pods.yaml", &pod("default", "a"))],
        Some(
            "config: {mode: echo}\naccess:\n  - {kinds: [pods, configmaps], verbs: [read]}\n  - {kinds: [pods], verbs: [patch]}\n",
        ),
    )
    .await;
    let err = failed.get("p").expect("p must fail to load");
    assert!(
        err.contains("configmaps") && err.contains("apply") && err.contains("p.yaml"),
        "{err}"
    );
    assert!(actions.is_empty(), "{actions:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_access_list_a_writing_plugin_is_told_how_to_grant() {
    let (failed, _) = run(&[("pods.yaml", &pod("default", "a"))], None).await;
    let err = failed.get("p").expect("p must fail to load");
    assert!(
        err.contains("no access list") && err.contains("access:") && err.contains("verbs:"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_are_narrowed_to_the_granted_namespaces() {
    let cluster = format!("{}---\n{}", pod("team-a", "x"), pod("team-b", "y"));
    let (failed, actions) = run(
        &[("pods.yaml", &cluster)],
        Some(
            "config: {mode: echo}\naccess:\n  - {kinds: [pods, configmaps], verbs: [read, patch], namespaces: [team-a]}\n",
        ),
    )
    .await;
    assert!(failed.is_empty(), "{failed:?}");
    // Only the pod in team-a reached the plugin.
    assert_eq!(
        actions,
        vec![
            r#"patch Merge pods team-a/x {"metadata":{"annotations":{"kubewasm.io/seen":"added"}}}"#
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_reads_and_actions_outside_the_grant_are_refused_naming_them() {
    let cluster = format!(
        "{}---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: x, namespace: probe}}\n",
        pod("default", "a")
    );
    // Pods: read and patch everywhere, no events; ConfigMaps: read and
    // delete in team-a only, so `probe/x` is out of reach.
    let (failed, actions) = run(
        &[("cluster.yaml", &cluster)],
        Some(
            "config: {mode: probe}\naccess:\n  - {kinds: [pods], verbs: [read, patch]}\n  - {kinds: [configmaps], verbs: [read, delete], namespaces: [team-a]}\n",
        ),
    )
    .await;
    assert!(failed.is_empty(), "{failed:?}");
    assert_eq!(actions.len(), 1, "{actions:?}");
    assert!(
        actions[0].starts_with("patch Merge pods default/a "),
        "{actions:?}"
    );
    let json = &actions[0][actions[0].find('{').unwrap()..];
    let patch: serde_json::Value = serde_json::from_str(json).unwrap();
    let note = |k: &str| {
        patch["metadata"]["annotations"][k]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let read = note("kubewasm.io/read");
    assert!(
        read.contains("may not read configmaps in namespace probe") && read.contains("[team-a]"),
        "{read}"
    );
    let delete = note("kubewasm.io/delete");
    assert!(
        delete.contains("may not delete configmaps in namespace probe")
            && delete.contains("[team-a]"),
        "{delete}"
    );
    let event = note("kubewasm.io/event");
    assert!(
        event.contains("grants no events on pods") && event.contains("verbs: [events]"),
        "{event}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_grant_the_same_probe_passes() {
    let cluster = format!(
        "{}---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: x, namespace: probe}}\n",
        pod("default", "a")
    );
    let (failed, actions) = run(
        &[("cluster.yaml", &cluster)],
        Some(
            "config: {mode: probe}\naccess:\n  - {kinds: [pods], verbs: [read, patch, events]}\n  - {kinds: [configmaps], verbs: [read, delete]}\n",
        ),
    )
    .await;
    assert!(failed.is_empty(), "{failed:?}");
    let annotated = actions
        .iter()
        .find(|a| a.starts_with("patch Merge pods default/a"))
        .unwrap_or_else(|| panic!("{actions:?}"));
    assert!(
        annotated.contains(
            r#"{"kubewasm.io/delete":"ok","kubewasm.io/event":"ok","kubewasm.io/read":"ok"}"#
        ),
        "{annotated}"
    );
    assert!(
        actions
            .iter()
            .any(|a| a.starts_with("delete Background configmaps probe/x")),
        "{actions:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbac_follows_the_grant_not_the_registration() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    install(
        &plugins,
        "p",
        "testkit",
        Some(
            "config: {mode: echo}\naccess:\n  - {kinds: [pods, configmaps], verbs: [read, patch], namespaces: [team-a, team-b]}\n",
        ),
    );
    let mut opts = kubewasm::rbac::RbacOptions::new(plugins);
    opts.cache_dir = Some(dir.path().join("cache"));
    opts.host_role = false;
    let yaml = kubewasm::rbac::generate(&opts).await.unwrap();
    let docs: Vec<serde_json::Value> = serde_yaml_ng::Deserializer::from_str(&yaml)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .filter(|v: &serde_json::Value| !v.is_null())
        .collect();
    let kinds: Vec<(String, String)> = docs
        .iter()
        .map(|d| {
            (
                d["kind"].as_str().unwrap().to_owned(),
                d["metadata"]["namespace"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    // No ClusterRole: the registration subscribes in every namespace, the
    // grant confines it to two.
    assert_eq!(
        kinds,
        vec![
            ("Role".into(), "team-a".into()),
            ("RoleBinding".into(), "team-a".into()),
            ("Role".into(), "team-b".into()),
            ("RoleBinding".into(), "team-b".into()),
        ],
        "{yaml}"
    );
    // Only the granted verb: patch, no create/delete (which the registration's
    // writes would have needed), no status, no Events.
    let rules: Vec<String> = docs[0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| format!("{}:{}", r["resources"][0], r["verbs"]))
        .collect();
    assert_eq!(
        rules,
        vec![
            r#""configmaps":["get","list","patch","watch"]"#,
            r#""pods":["get","list","patch","watch"]"#,
        ],
        "{yaml}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn network_grants_let_through_only_the_listed_destinations() {
    let granted = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let (g, o) = (
        granted.local_addr().unwrap().to_string(),
        other.local_addr().unwrap().to_string(),
    );
    let sidecar = format!(
        "config: {{mode: connect, connect: ['{g}', '{o}']}}\n{}grants:\n  network: {{allow: ['{g}']}}\n",
        kubewasm_tests::TESTKIT_ACCESS
    );
    // The host config lets sidecars point at loopback; the grant picks one
    // port of it.
    let (failed, actions) = run_under(
        &[("pods.yaml", &pod("default", "a"))],
        Some(&sidecar),
        network_ceiling(&["127.0.0.0/8:*"]),
    )
    .await;
    assert!(failed.is_empty(), "{failed:?}");
    assert_eq!(actions.len(), 1, "{actions:?}");
    let json = &actions[0][actions[0].find('{').unwrap()..];
    let patch: serde_json::Value = serde_json::from_str(json).unwrap();
    let outcome = patch["metadata"]["annotations"]["kubewasm.io/connect"]
        .as_str()
        .unwrap()
        .to_owned();
    let (first, second) = outcome.split_once(';').unwrap();
    assert_eq!(first, format!("{g}=ok"), "{outcome}");
    assert!(
        second.starts_with(&format!("{o}=error")),
        "the ungranted port must be refused: {outcome}"
    );
    // The granted listener saw the connection; the other saw none.
    granted.set_nonblocking(true).unwrap();
    other.set_nonblocking(true).unwrap();
    assert!(granted.accept().is_ok());
    assert!(other.accept().is_err());
}

/// A name of this machine's hosts file other than `localhost` that
/// resolves to a loopback address, if there is one.
fn another_loopback_name() -> Option<String> {
    use std::net::ToSocketAddrs;
    let hosts = std::fs::read_to_string("/etc/hosts").ok()?;
    hosts
        .lines()
        .filter_map(|l| {
            let mut words = l.split('#').next()?.split_whitespace();
            let ip: std::net::IpAddr = words.next()?.parse().ok()?;
            ip.is_loopback()
                .then(|| words.map(str::to_owned).collect::<Vec<_>>())
        })
        .flatten()
        .filter(|n| {
            !n.starts_with("localhost")
                && n.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
        })
        .find(|n| {
            (n.as_str(), 1)
                .to_socket_addrs()
                .is_ok_and(|mut a| a.all(|a| a.ip().is_loopback()))
        })
}

/// A guest may look up only the names its grant lists: with loopback
/// granted by address, `localhost` (named in the grant) resolves and
/// connects, while another name that resolves to loopback is refused at
/// the lookup, before any connect (a lookup of any name would carry data to
/// whoever serves its zone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn name_lookups_are_limited_to_the_granted_names() {
    let Some(other) = another_loopback_name() else {
        eprintln!("no other loopback name in /etc/hosts: skipping");
        return;
    };
    let granted = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = granted.local_addr().unwrap().port();
    let sidecar = format!(
        "config: {{mode: connect, connect: ['localhost:{port}', '{other}:{port}']}}\n{}grants:\n  network: {{allow: ['localhost:{port}', '127.0.0.0/8:{port}']}}\n",
        kubewasm_tests::TESTKIT_ACCESS
    );
    let (failed, actions) = run_under(
        &[("pods.yaml", &pod("default", "a"))],
        Some(&sidecar),
        network_ceiling(&["localhost:*", "127.0.0.0/8:*"]),
    )
    .await;
    assert!(failed.is_empty(), "{failed:?}");
    assert_eq!(actions.len(), 1, "{actions:?}");
    let json = &actions[0][actions[0].find('{').unwrap()..];
    let patch: serde_json::Value = serde_json::from_str(json).unwrap();
    let outcome = patch["metadata"]["annotations"]["kubewasm.io/connect"]
        .as_str()
        .unwrap()
        .to_owned();
    let (first, second) = outcome.split_once(';').unwrap();
    assert_eq!(first, format!("localhost:{port}=ok"), "{outcome}");
    assert!(
        second.starts_with(&format!("{other}:{port}=error")),
        "the ungranted name must not resolve: {outcome}"
    );
    // Only the granted name's connection reached the listener.
    granted.set_nonblocking(true).unwrap();
    assert!(granted.accept().is_ok());
    assert!(granted.accept().is_err(), "{outcome}");
}

/// A network grant outside the host's ceiling does not load.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_network_grant_outside_the_ceiling_does_not_load() {
    let sidecar = format!(
        "config: {{mode: echo}}\n{}grants:\n  network: {{allow: ['10.1.2.3:5432']}}\n",
        kubewasm_tests::TESTKIT_ACCESS
    );
    let (failed, _) = run_under(
        &[("pods.yaml", &pod("default", "a"))],
        Some(&sidecar),
        network_ceiling(&["127.0.0.0/8:*"]),
    )
    .await;
    let err = failed.get("p").expect("p must fail to load");
    assert!(
        err.contains("\"10.1.2.3:5432\" is outside the host's ceiling grants.network (127.0.0.0/8:*; host config)"),
        "{err}"
    );
}
