//! The book's tutorial (docs/book/src/tutorial.md), run on the real
//! single-node cluster exactly as it is written, in one shell as the page
//! says: a release from `scripts/release.sh` in `dist/`, Helm installing a
//! host that requires signatures, `kubewasm new`, the plugin's code and
//! fixtures, `bash build.sh`, a signed push to an OCI registry, the Plugin
//! and its RBAC, the annotation it writes, an unsigned version refused
//! while the signed one keeps serving, and the clean-up. The only line the
//! test changes is the one the reader changes: `REGISTRY`, to the test
//! registry on 127.0.0.1. Prints how long each step took.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams};
use kubewasm_tests::controlplane::ControlPlane;
use kubewasm_tests::e2e::eventually;
use kubewasm_tests::incluster::NS;
use kubewasm_tests::registry::Registry;
use kubewasm_tests::repo_root;
use kubewasm_tests::walkthrough::{Workdir, node_values, release, sections};

/// The release the tutorial names.
const VERSION: &str = "0.1.0";
/// The line of the tutorial the reader changes to their registry.
const REGISTRY_LINE: &str = "export REGISTRY=registry.example.com/you   # yours";

/// The toolchain `rust-toolchain.toml` pins (it has wasm32-wasip2): the
/// tutorial's project lies outside the repository, where rustup would pick
/// the machine's default.
fn pinned_toolchain() -> String {
    let text = std::fs::read_to_string(repo_root().join("rust-toolchain.toml")).unwrap();
    text.lines()
        .find_map(|l| l.trim().strip_prefix("channel"))
        .and_then(|rest| rest.split('"').nth(1))
        .expect("rust-toolchain.toml names a channel")
        .to_owned()
}

#[tokio::test]
async fn the_tutorial_runs_as_written() {
    let cp = ControlPlane::shared_node();
    let _logs = cp.logs_on_failure();
    let client = cp.admin_client().await;
    let registry = Registry::start().await;

    let work = Workdir::new(cp);
    let dist = work.path().join("dist");
    release(&dist, VERSION);
    cp.load_image(&dist.join(format!("kubewasm-{VERSION}-image.oci.tar")))
        .unwrap();
    std::fs::write(
        work.path().join("values.yaml"),
        serde_yaml_ng::to_string(&node_values(cp, &registry)).unwrap(),
    )
    .unwrap();

    // The page's sections, each marked so that its time can be read back.
    let sections = sections("tutorial.md");
    let mut script = String::new();
    let mut steps = Vec::new();
    for (heading, blocks) in &sections {
        if blocks.is_empty() {
            continue;
        }
        script.push_str(&format!("echo '@@ step {}'\n", steps.len()));
        steps.push(heading.trim_start_matches("## ").to_owned());
        for block in blocks {
            script.push_str(block);
        }
    }
    assert!(
        steps.len() >= 8,
        "the tutorial's steps with commands: {steps:?}"
    );
    assert!(
        script.contains(REGISTRY_LINE),
        "the tutorial sets REGISTRY with {REGISTRY_LINE:?}"
    );
    let mut script = script.replace(
        REGISTRY_LINE,
        &format!("export REGISTRY={}/you", registry.host()),
    );
    script.push_str("echo '@@ end'\n");

    // The reader's machine: the registry's CA (the page's
    // KUBEWASM_REGISTRY_CA), the pinned toolchain, and a build folder that
    // outlives the run (a second run compiles nothing).
    let ca = registry.ca_path();
    let toolchain = pinned_toolchain();
    let target = repo_root().join("target/tutorial-plugin");
    let started = Instant::now();
    let mut cmd = work.command("bash");
    cmd.args(["-c", &format!("set -euxo pipefail\n{script}")])
        .env("KUBEWASM_REGISTRY_CA", &ca)
        .env("RUSTUP_TOOLCHAIN", &toolchain)
        .env("CARGO_TARGET_DIR", &target);
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Read the markers as they come, to time each step.
    let stdout = child.stdout.take().unwrap();
    let marks = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut marks = Vec::new();
        let mut text = String::new();
        for line in std::io::BufReader::new(stdout).lines() {
            let line = line.unwrap();
            if line.starts_with("@@ ") {
                marks.push(Instant::now());
            }
            text.push_str(&line);
            text.push('\n');
        }
        (marks, text)
    });
    let out = child.wait_with_output().unwrap();
    let (marks, stdout) = marks.join().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the tutorial failed ({}) after {:?}:\n{stdout}\n{stderr}",
        out.status,
        started.elapsed()
    );
    assert_eq!(marks.len(), steps.len() + 1, "{stdout}");
    eprintln!("the tutorial on the real node, step by step:");
    for (i, step) in steps.iter().enumerate() {
        eprintln!(
            "  {:>7.1} s  {step}",
            (marks[i + 1] - marks[i]).as_secs_f64()
        );
    }
    eprintln!(
        "  {:>7.1} s  in all ({VERSION} released and imported before)",
        (marks[steps.len()] - marks[0]).as_secs_f64()
    );
    assert!(
        stdout.contains("test result: ok. 3 passed"),
        "the fixtures ran: {stdout}"
    );

    // What the clean-up says it leaves: no host, no Lease, no namespace.
    let namespaces: Api<Namespace> = Api::all(client.clone());
    eventually(
        "the tutorial namespace gone",
        Duration::from_secs(120),
        || async {
            namespaces
                .get_opt("tutorial")
                .await
                .unwrap()
                .is_none()
                .then_some(())
        },
    )
    .await;
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), NS);
    let left = pods
        .list(&ListParams::default().labels("app.kubernetes.io/name=kubewasm"))
        .await
        .unwrap();
    assert!(
        left.items
            .iter()
            .all(|p| p.metadata.deletion_timestamp.is_some()),
        "host Pods left after helm uninstall --wait: {:?}",
        left.items
            .iter()
            .map(|p| &p.metadata.name)
            .collect::<Vec<_>>()
    );
}
