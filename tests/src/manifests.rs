//! Rendering and reading manifests: `kubectl kustomize` (kubectl on PATH,
//! else tests/tools' in .tools/bin, else a `kustomize` binary) and
//! multi-document YAML as JSON values.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// `kubectl kustomize` (on PATH, else .tools/bin/kubectl of
/// tests/tools/build.sh), else a `kustomize` binary (scripts/setup.sh
/// installs one when kubectl is missing).
pub fn kustomize(dir: &Path) -> String {
    let runs = |bin: &str, args: &[&str]| {
        Command::new(bin)
            .args(args)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    // tests/tools/build.sh's kubectl (the test cluster's version, built by
    // scripts/setup.sh) first, else one on PATH.
    let tools_kubectl = crate::repo_root().join(".tools/bin/kubectl");
    let mut cmd = if tools_kubectl.is_file() {
        let mut c = Command::new(tools_kubectl);
        c.arg("kustomize");
        c
    } else if runs("kubectl", &["version", "--client"]) {
        let mut c = Command::new("kubectl");
        c.arg("kustomize");
        c
    } else if runs("kustomize", &["version"]) {
        let mut c = Command::new("kustomize");
        c.arg("build");
        c
    } else {
        panic!(
            "no kubectl: run scripts/setup.sh (tests/tools/build.sh builds one into .tools/bin), or put kubectl or kustomize on PATH"
        );
    };
    let out = cmd.arg(dir).output().unwrap();
    assert!(
        out.status.success(),
        "rendering {} failed: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The documents of a multi-document YAML stream (empty ones dropped).
pub fn docs(yaml: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(yaml)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .filter(|v: &Value| !v.is_null())
        .collect()
}

/// The ClusterRoles and Roles of `kubewasm rbac` output, in order, as
/// (kind, namespace or "", rules as "group/resource verb,verb").
pub fn roles(yaml: &str) -> Vec<(String, String, Vec<String>)> {
    docs(yaml)
        .iter()
        .filter(|d| d["kind"] == "ClusterRole" || d["kind"] == "Role")
        .map(|d| {
            let rules = d["rules"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| {
                    let verbs: Vec<&str> = r["verbs"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|v| v.as_str().unwrap())
                        .collect();
                    format!(
                        "{}/{} {}",
                        r["apiGroups"][0].as_str().unwrap(),
                        r["resources"][0].as_str().unwrap(),
                        verbs.join(",")
                    )
                })
                .collect();
            (
                d["kind"].as_str().unwrap().to_owned(),
                d["metadata"]["namespace"].as_str().unwrap_or("").to_owned(),
                rules,
            )
        })
        .collect()
}
