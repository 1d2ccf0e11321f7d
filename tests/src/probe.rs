//! The apimachinery probes built beside the test control plane
//! (`tests/controlplane/bin/fieldselprobe`, `protoprobe`): small Go
//! commands the differential tests ask, one JSON line per question.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde::de::DeserializeOwned;

/// The probe `name` (beside `KUBEWASM_CONTROLPLANE_BIN` when set), which
/// must have been built: `tests/controlplane/build.sh` builds it.
pub fn path(name: &str) -> PathBuf {
    let probe = match std::env::var_os("KUBEWASM_CONTROLPLANE_BIN") {
        Some(bin) => PathBuf::from(bin).with_file_name(name),
        None => crate::repo_root().join("tests/controlplane/bin").join(name),
    };
    assert!(
        probe.is_file(),
        "{} is missing: run tests/controlplane/build.sh (it builds the apimachinery probes \
         beside the test control plane)",
        probe.display()
    );
    probe
}

/// Runs the probe `name` with `args` and `input` on its stdin; its
/// answers, one JSON line each.
pub fn ask<T: DeserializeOwned>(name: &str, args: &[&str], input: String) -> Vec<T> {
    let probe = path(name);
    let mut child = Command::new(&probe)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", probe.display()));
    let Some(mut stdin) = child.stdin.take() else {
        panic!("{}: no stdin", probe.display());
    };
    // Written from a thread: the probe answers while it reads, and a full
    // stdout pipe would otherwise stop both sides.
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("{}: {e}", probe.display()));
    if let Ok(Err(e)) = writer.join() {
        panic!("writing to {}: {e}", probe.display());
    }
    assert!(
        out.status.success(),
        "{} failed ({}): {}",
        probe.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("probe answer {l:?}: {e}")))
        .collect()
}
