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

/// The API server refuses a ConfigMap whose data and binaryData exceed 1 MiB.
pub fn check_configmap_fits(cm: &Value) {
    let data: usize = cm["data"]
        .as_object()
        .map_or(0, |m| m.values().map(|v| v.as_str().unwrap().len()).sum());
    let binary: usize = cm["binaryData"].as_object().map_or(0, |m| {
        m.values()
            .map(|v| decode_base64(v.as_str().unwrap()).len())
            .sum()
    });
    assert!(
        data + binary <= 1 << 20,
        "ConfigMap {} holds {} bytes, over the 1 MiB limit: move plugins into another ConfigMap or a plugin image",
        cm["metadata"]["name"],
        data + binary
    );
}

pub fn decode_base64(s: &str) -> Vec<u8> {
    let val = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("not base64: {c}"),
        }
    };
    // kustomize wraps long values over several lines.
    let s: Vec<u8> = s.bytes().filter(|c| !c.is_ascii_whitespace()).collect();
    let mut out = Vec::new();
    for chunk in s.chunks(4) {
        let pad = chunk.iter().filter(|&&c| c == b'=').count();
        let n = chunk
            .iter()
            .filter(|&&c| c != b'=')
            .fold(0u32, |acc, &c| (acc << 6) | val(c))
            << (6 * pad);
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..3 - pad]);
    }
    out
}
