//! Plugin objects whose OCI artifact carries a precompiled layer
//! (`kubewasm push --precompiled`), pulled from the test registry (Debian's
//! docker-registry on 127.0.0.1 with a test CA) by the host binary against
//! the real API server: the layer for the host's engine, signed with its
//! artifact key, is mapped and the module never compiled; one signed with
//! another key is not downloaded, and one modified in the registry is
//! refused by its MAC; both are compiled and served. Its own test binary:
//! every host watches every Plugin of its control plane.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use kube::api::{DynamicObject, PostParams};
use kubewasm_tests::controlplane::ControlPlane;
use kubewasm_tests::e2e::{HostProcess, host_config, install_plugin_crds, kubewasm_bin, namespace};
use kubewasm_tests::objects::{api, wait_condition};
use kubewasm_tests::registry::Registry;
use kubewasm_tests::{wasm, with_custom_section};
use serde_json::json;

/// `kubewasm push FILE REF --precompiled --artifact-key KEY`; its stdout
/// (the pinned reference) and stderr.
fn push_precompiled(registry: &Registry, file: &Path, reference: &str, key: &Path) -> String {
    let out = Command::new(kubewasm_bin())
        .arg("push")
        .arg(file)
        .arg(reference)
        .arg("--precompiled")
        .arg("--artifact-key")
        .arg(key)
        .arg("--ca")
        .arg(registry.ca_path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "push failed: {stderr}");
    assert!(stderr.contains("precompiled: engine key"), "{stderr}");
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

fn plugin(name: &str, reference: &str, ns: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "kubewasm.io/v1alpha1", "kind": "Plugin",
        "metadata": {"name": name},
        "spec": {
            "module": {"oci": {"reference": reference}},
            "config": {"mode": "requeue", "count": 3_600_000, "tag": name},
            "access": [{"kinds": ["configmaps"], "verbs": ["read"], "namespaces": [ns]}],
        },
    }))
    .unwrap()
}

/// The host's log lines naming `plugin` and holding every one of `needles`.
fn lines<'a>(logs: &'a str, plugin: &str, needles: &[&str]) -> Vec<&'a str> {
    logs.lines()
        .filter(|l| l.contains(plugin) && needles.iter().all(|n| l.contains(n)))
        .collect()
}

#[tokio::test]
async fn a_precompiled_layer_is_mapped_only_for_the_hosts_key_and_any_other_compiled() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    install_plugin_crds(&client).await;
    let ns = "objects-precompiled";
    namespace(&client, ns, json!({})).await;
    let registry = Registry::start().await;
    let work = tempfile::tempdir().unwrap();
    let (key, other_key) = (
        work.path().join("artifact.key"),
        work.path().join("other.key"),
    );
    std::fs::write(&key, "ab".repeat(32)).unwrap();
    std::fs::write(&other_key, "cd".repeat(32)).unwrap();
    // Three builds of testkit (three digests: none is compiled by the
    // time the next loads).
    let testkit = wasm("testkit");
    let build = |tag: &str| {
        let file = work.path().join(format!("{tag}.wasm"));
        std::fs::write(
            &file,
            with_custom_section(&testkit, "kubewasm-test", tag.as_bytes()),
        )
        .unwrap();
        file
    };
    let host_ref = |repo: &str| format!("{}/precompiled/{repo}:v1", registry.host());

    // Signed with the hosts' key.
    let good = push_precompiled(&registry, &build("good"), &host_ref("good"), &key);
    // Signed with another key.
    let foreign = push_precompiled(
        &registry,
        &build("foreign"),
        &host_ref("foreign"),
        &other_key,
    );
    // Signed with the hosts' key, then its layer modified in the registry
    // (a new blob, the manifest rewritten to name it).
    push_precompiled(&registry, &build("tampered"), &host_ref("tampered"), &key);
    let (_, body) = registry.manifest("precompiled/tampered", "v1").await;
    let mut manifest: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let layer = &mut manifest["layers"][1];
    assert_eq!(
        layer["mediaType"],
        kubewasm::oci::artifact::PRECOMPILED_MEDIA_TYPE
    );
    let mut bytes = registry
        .blob("precompiled/tampered", layer["digest"].as_str().unwrap())
        .await;
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    layer["digest"] = json!(registry.put_blob("precompiled/tampered", &bytes).await);
    registry
        .put_manifest(
            "precompiled/tampered",
            "v1",
            kubewasm::oci::artifact::MANIFEST_MEDIA_TYPE,
            &serde_json::to_vec(&manifest).unwrap(),
        )
        .await;

    let (_config, config_file) = host_config(&format!(
        "artifactKey: {}\npluginObjects:\n  registryCA: {}\n",
        key.display(),
        registry.ca_path().display(),
    ));
    let host = HostProcess::with_config(cp.admin_kubeconfig(), &config_file);
    let plugins = api(&client, "Plugin", None);
    for (name, reference) in [
        ("pre-good", good.clone()),
        ("pre-foreign", foreign),
        ("pre-tampered", host_ref("tampered")),
    ] {
        plugins
            .create(&PostParams::default(), &plugin(name, &reference, ns))
            .await
            .unwrap();
        wait_condition(&plugins, &host, name, 1, ("Ready", "True", "Serving")).await;
    }
    let (exit, logs) = host.stop_with_logs();
    assert!(exit.success(), "{logs}");

    // Mapped, never compiled.
    assert_eq!(
        lines(&logs, "pre-good", &["precompiled layer verified"]).len(),
        1,
        "{logs}"
    );
    assert!(
        lines(&logs, "pre-good", &["compiling component"]).is_empty(),
        "{logs}"
    );
    // Another key's: not downloaded (the reason names the key), compiled.
    assert_eq!(
        lines(
            &logs,
            "pre-foreign",
            &[
                "precompiled layer not for this host",
                "another artifact key"
            ]
        )
        .len(),
        1,
        "{logs}"
    );
    assert!(
        !lines(&logs, "pre-foreign", &["compiling component"]).is_empty(),
        "{logs}"
    );
    // Modified: refused by its MAC, compiled.
    assert_eq!(
        lines(
            &logs,
            "pre-tampered",
            &["precompiled layer not used", "MAC does not match"]
        )
        .len(),
        1,
        "{logs}"
    );
    assert!(
        !lines(&logs, "pre-tampered", &["compiling component"]).is_empty(),
        "{logs}"
    );
}

/// Time from a Plugin's creation to `Ready` for the Python
/// config-replicator (`KUBEWASM_PYTHON_WASM`, else the languages build's
/// `plugins/target/languages/python-config-replicator.wasm`), pushed with
/// and without a precompiled layer, each to a host with an empty compile
/// cache. Prints the figures; run with `--ignored --nocapture`.
#[tokio::test]
#[ignore = "a measurement: compiles the 19 MB Python component several times"]
async fn python_time_to_ready_with_and_without_a_precompiled_layer() {
    let python = std::env::var_os("KUBEWASM_PYTHON_WASM")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            kubewasm_tests::repo_root()
                .join("plugins/target/languages/python-config-replicator.wasm")
        });
    let cp = ControlPlane::shared();
    let client = cp.admin_client().await;
    install_plugin_crds(&client).await;
    let registry = Registry::start().await;
    let work = tempfile::tempdir().unwrap();
    let key = work.path().join("artifact.key");
    std::fs::write(&key, "ab".repeat(32)).unwrap();
    let file = work.path().join("python.wasm");
    std::fs::copy(&python, &file).unwrap();
    let plain = format!("{}/python/plain:v1", registry.host());
    let pusher = registry.oci_client();
    pusher
        .push(
            &std::fs::read(&file).unwrap(),
            &plain,
            &kubewasm::oci::Credentials::Anonymous,
        )
        .await
        .unwrap();
    let started = Instant::now();
    let precompiled = push_precompiled(
        &registry,
        &file,
        &format!("{}/python/precompiled:v1", registry.host()),
        &key,
    );
    eprintln!(
        "push --precompiled took {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let (_config, config_file) = host_config(&format!(
        "artifactKey: {}\npluginObjects:\n  registryCA: {}\n",
        key.display(),
        registry.ca_path().display(),
    ));
    let plugins = api(&client, "Plugin", None);
    for (round, (what, reference)) in [("plain", plain), ("precompiled", precompiled)]
        .into_iter()
        .enumerate()
    {
        // A new host each: an empty compile cache.
        let host = HostProcess::with_config(cp.admin_kubeconfig(), &config_file);
        let name = format!("python-{what}");
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "kubewasm.io/v1alpha1", "kind": "Plugin",
            "metadata": {"name": name},
            "spec": {
                "module": {"oci": {"reference": reference}},
                "config": {"sourceSelector": "kubewasm.io/replicate=true", "namespaceSelector": format!("tenant=r{round}")},
                "access": [
                    {"kinds": ["configmaps", "namespaces"], "verbs": ["read"]},
                    {"kinds": ["configmaps"], "verbs": ["apply", "delete"]},
                ],
            },
        }))
        .unwrap();
        let created = Instant::now();
        plugins.create(&PostParams::default(), &obj).await.unwrap();
        wait_condition(&plugins, &host, &name, 1, ("Ready", "True", "Serving")).await;
        let ready = created.elapsed();
        plugins
            .delete(&name, &kube::api::DeleteParams::default())
            .await
            .unwrap();
        let (_, logs) = host.stop_with_logs();
        let compiles = lines(&logs, &name, &["component compiled"]).len();
        eprintln!(
            "{what}: Plugin created -> Ready=True in {:.2} s; compiles: {compiles}",
            ready.as_secs_f64(),
        );
        // For scripts/bench.sh's report (which reads stderr too).
        eprintln!(
            "BENCH-JSON {}",
            json!({"bench": "precompiled", "layer": what, "ready_s": ready.as_secs_f64(), "compiles": compiles})
        );
        // Where the time went, by the host's own timestamps (a pull's line
        // names its reference, not the plugin).
        let steps = [
            "OCI module pulled",
            "precompiled layer",
            "compiling component",
            "component compiled",
            "Plugin object loaded",
        ];
        for l in logs.lines().filter(|l| {
            steps.iter().any(|s| l.contains(s))
                && (l.contains(&name) || l.contains(&format!("python/{what}")))
        }) {
            eprintln!("  {}", &l[..l.floor_char_boundary(300)]);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
