//! The conformance suite's machinery: a fixture's case run against the
//! simulated cluster and, action by action, against the real API server of
//! the test harness, each answer and each resulting object compared
//! ([`compare`]), the two worlds kept apart by [`translate`]: the case's
//! namespaces get a suffix on the shared server, and the server's uids and
//! resourceVersions stand for the simulation's.

pub mod compare;
pub mod mirror;
pub mod real;
pub mod translate;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use kubewasm::testing::mirror::MirrorHandle;

use crate::controlplane::ControlPlane;
use mirror::RealMirror;

/// Runs `fixtures` with `plugin` through the simulation, mirrored into
/// `cp`'s server; fails (panics, for tests) on a failing case, on any
/// difference, or when fewer than `at_least` actions were compared. Not
/// from inside an async runtime: it runs its own.
pub fn conform(cp: &ControlPlane, plugin: &Path, fixtures: Vec<PathBuf>, at_least: usize) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let client = rt.block_on(cp.admin_client());
    let run = format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            % 0xfffff
    );
    let mirror = Arc::new(RealMirror::new(client, rt.handle().clone(), &run));
    let opts = kubewasm::testing::Options {
        plugin: plugin.to_owned(),
        fixtures,
        mirror: Some(MirrorHandle(mirror.clone())),
        ..Default::default()
    };
    let mut out = Vec::new();
    let summary = kubewasm::testing::run(&opts, &mut out).unwrap();
    let text = String::from_utf8_lossy(&out);
    assert_eq!(
        summary.exit_code(),
        0,
        "the fixtures fail on the simulation:\n{text}"
    );
    let compared = mirror.compared.load(Ordering::SeqCst);
    assert!(
        compared >= at_least,
        "only {compared} actions compared (at least {at_least} expected):\n{text}"
    );
    let findings = mirror.findings();
    assert!(
        findings.is_empty(),
        "the simulation and the API server differ ({} findings, {compared} actions compared):\n{}",
        findings.len(),
        findings.join("\n")
    );
    eprintln!(
        "{}: {compared} actions compared, no difference",
        plugin.display()
    );
}
