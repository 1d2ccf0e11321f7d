//! The Go tools of the tests (tests/tools, built into `.tools/bin` by
//! `tests/tools/build.sh`, which scripts/setup.sh runs): Helm, kubectl at
//! the test cluster's version, and kstatus (cli-utils' computed status of
//! one object).

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::repo_root;

/// `.tools/bin/NAME`, or a panic naming the script that builds it.
pub fn tool(name: &str) -> PathBuf {
    let path = repo_root().join(".tools/bin").join(name);
    assert!(
        path.is_file(),
        "{} is missing: build it with `bash tests/tools/build.sh` (scripts/setup.sh runs it)",
        path.display()
    );
    path
}

/// Helm v4 (`helm.sh/helm/v4/cmd/helm`).
pub fn helm() -> PathBuf {
    tool("helm")
}

/// kubectl at the test cluster's version.
pub fn kubectl() -> PathBuf {
    tool("kubectl")
}

/// The kstatus program.
pub fn kstatus() -> PathBuf {
    tool("kstatus")
}

/// What kstatus computes for `object`: `{"status": "Current", "message":
/// ..., "conditions": [...]}`.
pub fn compute_status(object: &Value) -> Value {
    let mut child = Command::new(kstatus())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start kstatus");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(object.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "kstatus failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("kstatus prints one JSON line")
}
