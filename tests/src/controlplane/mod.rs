//! A real Kubernetes control plane for end-to-end tests: the official
//! kube-apiserver (k8s.io/kubernetes v1.35) and an embedded etcd, both on
//! 127.0.0.1, run by the Go program in `tests/controlplane/` (see its
//! README.md). In the light mode (the default, ready in seconds) there is no
//! controller-manager, scheduler or kubelet: namespaces are never finalized,
//! owner references are not garbage-collected, Pods are not scheduled. The
//! node mode ([`ControlPlaneBuilder::node`], [`ControlPlane::shared_node`])
//! adds kube-controller-manager, kube-scheduler, containerd and a kubelet: a
//! whole single-node cluster whose Pods run (with `hostNetwork`, images
//! imported with [`ControlPlane::load_image`]).
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use kubewasm_tests::controlplane::ControlPlane;
//! let cp = ControlPlane::shared(); // one per test binary; use your own namespace
//! let client = cp.admin_client().await;
//! # Ok(()) }
//! ```
//!
//! Environment:
//! - `KUBEWASM_CONTROLPLANE_BIN`: use this binary instead of building
//!   `tests/controlplane/bin/kubewasm-controlplane` with `build.sh`.
//! - `KUBEWASM_CONTROLPLANE_KEEP=1`: keep the state folder (etcd data,
//!   `apiserver.log`, kubeconfigs) after the test and print where it is.
//! - `KUBEWASM_CONTROLPLANE_LOG=1`: echo the control plane's stderr.
//!
//! This file holds the running control plane, its clients and its logs;
//! starting one is `builder.rs`'s, node mode's images and containers
//! `node.rs`'s, the API server's audit log `audit.rs`'s, and restarts,
//! outages and freezes of the API server `faults.rs`'s.

mod audit;
mod builder;
mod faults;
mod node;

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use rustix::process::{Pid, Signal, kill_process};

pub use audit::AuditWrite;
pub use builder::ControlPlaneBuilder;
pub use faults::Outage;

/// How long the API server may take to answer /readyz (start or restart).
const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// How long a SIGTERM'd control plane may take to exit before SIGKILL (in
/// node mode it stops the kubelet, the containers and containerd too).
const STOP_TIMEOUT: Duration = Duration::from_secs(60);

enum Dir {
    Temp(tempfile::TempDir),
    Kept(PathBuf),
}

/// A running control plane; stopped (SIGTERM, then wait) on drop.
pub struct ControlPlane {
    child: Mutex<Option<Child>>,
    /// Kept open: the control plane exits when it closes (see `--exit-on-stdin-eof`).
    _stdin: Mutex<Option<ChildStdin>>,
    pid: Pid,
    lines: Mutex<Receiver<String>>,
    stderr_tail: Arc<Mutex<VecDeque<String>>>,
    dir: Dir,
    server: String,
    etcd: String,
    admin_kubeconfig: PathBuf,
    user_kubeconfig: PathBuf,
    restart_lock: tokio::sync::Mutex<()>,
    node: Option<NodeInfo>,
}

/// What node mode adds to the ready line.
#[derive(Debug, Clone)]
struct NodeInfo {
    name: String,
    containerd_socket: PathBuf,
}

/// The components' log files in the state folder, in start order.
pub const COMPONENT_LOGS: [&str; 6] = [
    "etcd.log",
    "apiserver.log",
    "controller-manager.log",
    "scheduler.log",
    "containerd.log",
    "kubelet.log",
];

impl std::fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPlane")
            .field("server", &self.server)
            .field("etcd", &self.etcd)
            .field("dir", &self.dir())
            .finish()
    }
}

impl ControlPlane {
    /// Default options: watch cache on, compaction every 5 minutes.
    pub fn builder() -> ControlPlaneBuilder {
        ControlPlaneBuilder::default()
    }

    /// Starts a control plane with default options (see [`ControlPlaneBuilder::start`]).
    pub async fn start() -> anyhow::Result<ControlPlane> {
        Self::builder().start().await
    }

    /// Options with `--etcd-compaction-interval` set; finish with `.start().await`.
    pub fn with_compaction(interval: Duration) -> ControlPlaneBuilder {
        Self::builder().compaction(interval)
    }

    /// One control plane per test binary, started on first use with default
    /// options. Tests sharing it must each use their own namespace and must
    /// not restart it (start a private one for that). It stops when the test
    /// binary exits.
    pub fn shared() -> &'static ControlPlane {
        static SHARED: OnceLock<ControlPlane> = OnceLock::new();
        SHARED.get_or_init(|| {
            ControlPlane::builder()
                .start_blocking()
                .unwrap_or_else(|e| panic!("starting the shared control plane: {e:#}"))
        })
    }

    /// One whole single-node cluster per test binary (see
    /// [`ControlPlaneBuilder::node`]), started on first use. Tests sharing it
    /// must each use their own namespace. It stops when the test binary exits.
    pub fn shared_node() -> &'static ControlPlane {
        static SHARED: OnceLock<ControlPlane> = OnceLock::new();
        SHARED.get_or_init(|| {
            ControlPlane::builder()
                .node(true)
                .start_blocking()
                .unwrap_or_else(|e| panic!("starting the shared single-node cluster: {e:#}"))
        })
    }

    /// The port of the API server, for in-cluster clients on the host
    /// network (`KUBERNETES_SERVICE_HOST=127.0.0.1`, `KUBERNETES_SERVICE_PORT`).
    pub fn port(&self) -> u16 {
        self.server
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no port in {}", self.server))
    }

    /// The last `lines` lines of every component's log in the state folder,
    /// for a test's failure message.
    pub fn component_logs(&self, lines: usize) -> String {
        let mut out = String::new();
        for name in COMPONENT_LOGS {
            let Ok(text) = std::fs::read_to_string(self.dir().join(name)) else {
                continue;
            };
            let all: Vec<&str> = text.lines().collect();
            let from = all.len().saturating_sub(lines);
            out.push_str(&format!(
                "--- last {} lines of {name} ---\n",
                all.len() - from
            ));
            for l in &all[from..] {
                out.push_str(l);
                out.push('\n');
            }
        }
        out
    }

    /// A guard that prints [`Self::component_logs`] when the test panics
    /// while it is alive.
    pub fn logs_on_failure(&self) -> LogsOnFailure<'_> {
        LogsOnFailure(self)
    }

    /// `https://127.0.0.1:PORT`
    pub fn server(&self) -> &str {
        &self.server
    }

    /// `http://127.0.0.1:PORT` of the embedded etcd.
    pub fn etcd(&self) -> &str {
        &self.etcd
    }

    /// Kubeconfig of a `system:masters` user.
    pub fn admin_kubeconfig(&self) -> &Path {
        &self.admin_kubeconfig
    }

    /// Kubeconfig of `kubewasm-e2e`, a user with no groups beyond
    /// `system:authenticated`: it can do nothing until RBAC grants it.
    pub fn user_kubeconfig(&self) -> &Path {
        &self.user_kubeconfig
    }

    /// The state folder: etcd data, pki, kubeconfigs, `apiserver.log`, `etcd.log`.
    pub fn dir(&self) -> &Path {
        match &self.dir {
            Dir::Temp(t) => t.path(),
            Dir::Kept(p) => p,
        }
    }

    /// `kubectl get ARGS...` as the admin: kubectl's own get command
    /// (k8s.io/kubectl, built into the control plane binary as
    /// `kubectl-get`), so a test reads what an operator's terminal shows.
    /// Returns stdout, or the exit status and stderr as the error.
    pub fn kubectl_get(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = Command::new(binary()?)
            .arg("kubectl-get")
            .arg("--kubeconfig")
            .arg(&self.admin_kubeconfig)
            .args(args)
            .output()
            .context("running kubewasm-controlplane kubectl-get")?;
        if !out.status.success() {
            bail!(
                "kubectl get {}: {}: {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The non-admin user's name, for RoleBinding subjects.
    pub const USER: &'static str = "kubewasm-e2e";

    /// A client for the admin user. Make one per test (per tokio runtime):
    /// a client is bound to the runtime it was created on.
    pub async fn admin_client(&self) -> kube::Client {
        client_from(&self.admin_kubeconfig)
            .await
            .unwrap_or_else(|e| panic!("admin client: {e:#}"))
    }

    /// A client for the non-admin user `kubewasm-e2e`.
    pub async fn user_client(&self) -> kube::Client {
        client_from(&self.user_kubeconfig)
            .await
            .unwrap_or_else(|e| panic!("user client: {e:#}"))
    }

    /// The last lines the control plane wrote to stderr (failures include
    /// the tail of `apiserver.log`).
    pub fn stderr_tail(&self) -> String {
        let t = self.stderr_tail.lock().unwrap();
        let mut s = String::from("--- kubewasm-controlplane stderr ---\n");
        for l in t.iter() {
            s.push_str(l);
            s.push('\n');
        }
        s
    }

    /// Stops the control plane: SIGTERM, wait (SIGKILL after 30 s).
    fn stop(&self) {
        let Some(mut child) = self.child.lock().unwrap().take() else {
            return;
        };
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        let _ = kill_process(self.pid, Signal::TERM);
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            if matches!(child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("kubewasm-controlplane did not stop within {STOP_TIMEOUT:?}: killing it");
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Prints the components' logs if the test panics; see
/// [`ControlPlane::logs_on_failure`].
pub struct LogsOnFailure<'a>(&'a ControlPlane);

impl Drop for LogsOnFailure<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}\n{}", self.0.stderr_tail(), self.0.component_logs(40));
        }
    }
}

/// A kube client from a kubeconfig file.
pub async fn client_from(kubeconfig: &Path) -> anyhow::Result<kube::Client> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig)
        .with_context(|| format!("reading {}", kubeconfig.display()))?;
    let config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .with_context(|| format!("loading {}", kubeconfig.display()))?;
    Ok(kube::Client::try_from(config)?)
}

/// The control plane binary: `KUBEWASM_CONTROLPLANE_BIN`, or
/// `tests/controlplane/bin/kubewasm-controlplane` built by `build.sh` (a
/// no-op when up to date; a cold build takes minutes) once per process.
pub fn binary() -> anyhow::Result<PathBuf> {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    if let Some(bin) = std::env::var_os("KUBEWASM_CONTROLPLANE_BIN") {
        return Ok(bin.into());
    }
    built(&BIN, &[], "kubewasm-controlplane")
}

/// The API server of Kubernetes 1.36,
/// `tests/controlplane/bin/kubewasm-apiserver-1.36` (the same program built
/// against that release, without the node), built by `build.sh --next`
/// once per process.
pub fn binary_1_36() -> anyhow::Result<PathBuf> {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    built(&BIN, &["--next"], "kubewasm-apiserver-1.36")
}

/// `name` in tests/controlplane/bin, once `build.sh ARGS` succeeded (the
/// first call's answer is kept in `once`).
fn built(
    once: &OnceLock<Result<PathBuf, String>>,
    args: &[&str],
    name: &str,
) -> anyhow::Result<PathBuf> {
    once.get_or_init(|| {
        let dir = crate::repo_root().join("tests/controlplane");
        let status = Command::new("bash")
            .arg(dir.join("build.sh"))
            .args(args)
            .status()
            .map_err(|e| format!("running tests/controlplane/build.sh: {e}"))?;
        if !status.success() {
            return Err(format!(
                "tests/controlplane/build.sh {} failed ({status}): it needs Go and the Go module proxy",
                args.join(" ")
            ));
        }
        Ok(dir.join("bin").join(name))
    })
    .clone()
    .map_err(|e| anyhow!(e))
}
