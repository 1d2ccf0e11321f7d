//! The Go tools of the tests (tests/tools): kubectl reports the test
//! cluster's version and applies and waits against it, and kstatus
//! computes cli-utils' status of an object.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use kubewasm_tests::controlplane::ControlPlane;
use kubewasm_tests::incluster::run;
use kubewasm_tests::tools::{compute_status, helm, kubectl};
use serde_json::json;

#[test]
fn versions_are_the_pinned_ones() {
    let out = run(
        Command::new(kubectl()).args(["version", "--client", "-o", "json"]),
        "kubectl version",
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    // The test cluster's release (tests/controlplane/go.mod).
    assert_eq!(v["clientVersion"]["gitVersion"], "v1.35.8", "{v}");
    let out = run(
        Command::new(helm()).args(["version", "--short"]),
        "helm version",
    );
    assert!(out.starts_with("v4."), "{out}");
}

#[test]
fn kstatus_computes_current_and_in_progress() {
    let deployment = |observed: i64, updated: i64| {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "namespace": "n", "generation": 2},
            "spec": {"replicas": 2},
            "status": {"observedGeneration": observed, "replicas": 2, "updatedReplicas": updated,
                       "readyReplicas": updated, "availableReplicas": updated,
                       "conditions": [{"type": "Available", "status": "True"}]}
        })
    };
    assert_eq!(compute_status(&deployment(2, 2))["status"], "Current");
    let rolling = compute_status(&deployment(2, 1));
    assert_eq!(rolling["status"], "InProgress", "{rolling}");
    assert_eq!(compute_status(&deployment(1, 2))["status"], "InProgress");
    // A custom resource is read by its conditions: Ready False with
    // Stalled is Failed.
    let plugin = json!({
        "apiVersion": "kubewasm.io/v1alpha1", "kind": "Plugin",
        "metadata": {"name": "p", "generation": 1},
        "status": {"observedGeneration": 1, "conditions": [
            {"type": "Stalled", "status": "True", "reason": "PullFailed", "message": "no such tag"}]}
    });
    let failed = compute_status(&plugin);
    assert_eq!(failed["status"], "Failed", "{failed}");
    assert_eq!(failed["message"], "no such tag");
}

#[test]
fn kubectl_applies_a_kustomization_and_waits() {
    let cp = ControlPlane::shared();
    let _logs = cp.logs_on_failure();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("kustomization.yaml"),
        "resources: [ns.yaml]\nconfigMapGenerator:\n  - {name: settings, namespace: tools-kubectl, literals: [a=b]}\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("ns.yaml"),
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: tools-kubectl}\n",
    )
    .unwrap();
    let kubeconfig = cp.admin_kubeconfig();
    run(
        Command::new(kubectl())
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("apply")
            .arg("-k")
            .arg(dir.path()),
        "kubectl apply -k",
    );
    run(
        Command::new(kubectl())
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args([
                "wait",
                "--for=jsonpath={.status.phase}=Active",
                "namespace/tools-kubectl",
                "--timeout=30s",
            ]),
        "kubectl wait",
    );
    let out = run(
        Command::new(kubectl())
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["get", "configmaps", "-n", "tools-kubectl", "-o", "name"]),
        "kubectl get",
    );
    assert!(out.contains("configmap/settings-"), "{out}");
}
