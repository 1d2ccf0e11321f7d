//! A stranger's `kubectl apply -k deploy/` on a fresh clone: the base, and
//! every overlay that needs nothing uncommitted, renders from a clone of
//! HEAD and applies to a real API server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

use kubewasm_tests::controlplane::ControlPlane;
use kubewasm_tests::incluster::apply_all;
use kubewasm_tests::manifests::{docs, kustomize};
use kubewasm_tests::repo_root;

/// The overlays that need files a fresh clone does not have: the plugins'
/// .wasm build outputs (scripts/deploy-plugins.sh), the operator's registry
/// CA and signature key. Each says so in its kustomization.yaml.
const NEED_UNCOMMITTED: &[&str] = &["add-plugin", "host-config", "plugin-folder", "single-node"];
/// The overlays a fresh clone renders and applies as it is.
const FROM_A_FRESH_CLONE: &[&str] = &["plugin-image", "plugin-image-signed", "shards"];

/// A stranger's `kubectl apply -k deploy/`: a fresh clone of HEAD (only
/// what is committed: no build outputs, nothing uncommitted) renders, every
/// object it renders is small enough for a client-side apply, and each is
/// accepted by a real API server, applied server-side as `kubectl apply
/// --server-side` does; then the same for each overlay that needs nothing
/// uncommitted.
#[tokio::test]
async fn a_fresh_clone_applies_the_base_and_the_overlays_that_need_nothing_built() {
    let mut examples: Vec<String> = std::fs::read_dir(repo_root().join("deploy/examples"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    examples.sort();
    let mut known: Vec<&str> = NEED_UNCOMMITTED
        .iter()
        .chain(FROM_A_FRESH_CLONE)
        .copied()
        .collect();
    known.sort_unstable();
    assert_eq!(
        examples, known,
        "each overlay in deploy/examples is applied here from a fresh clone, or listed in NEED_UNCOMMITTED"
    );

    let dir = tempfile::tempdir().unwrap();
    let clone = dir.path().join("kubewasm");
    let head = git(&repo_root(), &["rev-parse", "HEAD"]);
    let root = repo_root().to_str().unwrap().to_owned();
    git(
        dir.path(),
        &["clone", "--quiet", "--no-checkout", &root, "kubewasm"],
    );
    git(&clone, &["checkout", "--quiet", "--detach", head.trim()]);

    let client = ControlPlane::shared().admin_client().await;
    let overlays = std::iter::once("deploy".to_owned()).chain(
        FROM_A_FRESH_CLONE
            .iter()
            .map(|o| format!("deploy/examples/{o}")),
    );
    for overlay in overlays {
        let d = docs(&kustomize(&clone.join(&overlay)));
        assert!(d.len() > 10, "{overlay}: {} objects", d.len());
        // A client-side `kubectl apply -k` works too: it stores each object
        // in its last-applied annotation, which holds at most 256 KiB.
        for doc in &d {
            let size = serde_json::to_string(doc).unwrap().len();
            assert!(
                size < 200 << 10,
                "{overlay}: {} {} is {size} bytes, too big for a client-side apply",
                doc["kind"],
                doc["metadata"]["name"]
            );
        }
        apply_all(&client, &d).await;
        // Each is there as applied.
        let discovery = kube::discovery::Discovery::new(client.clone())
            .run()
            .await
            .unwrap();
        for doc in &d {
            let gvk = kube::core::GroupVersionKind::try_from(
                &serde_json::from_value::<kube::core::TypeMeta>(doc.clone()).unwrap(),
            )
            .unwrap();
            let (ar, caps) = discovery.resolve_gvk(&gvk).unwrap();
            let api: kube::Api<kube::api::DynamicObject> = match caps.scope {
                kube::discovery::Scope::Namespaced => kube::Api::namespaced_with(
                    client.clone(),
                    doc["metadata"]["namespace"].as_str().unwrap(),
                    &ar,
                ),
                kube::discovery::Scope::Cluster => kube::Api::all_with(client.clone(), &ar),
            };
            let name = doc["metadata"]["name"].as_str().unwrap();
            api.get(name)
                .await
                .unwrap_or_else(|e| panic!("{overlay}: {} {name}: {e}", gvk.kind));
        }
    }
}

/// Runs git in `dir`; its stdout.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}
