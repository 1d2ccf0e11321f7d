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

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, TryRecvError};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use rustix::process::{Pid, Signal, kill_process};

const READY_PREFIX: &str = "KUBEWASM-CONTROLPLANE READY ";
const RESTARTED: &str = "KUBEWASM-CONTROLPLANE RESTARTED";
/// How long the API server may take to answer /readyz (start or restart).
const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// How long, after the API server, the node may take to report Ready.
const NODE_READY_TIMEOUT: Duration = Duration::from_secs(180);
/// How long a SIGTERM'd control plane may take to exit before SIGKILL (in
/// node mode it stops the kubelet, the containers and containerd too).
const STOP_TIMEOUT: Duration = Duration::from_secs(60);
/// Lines of the control plane's stderr kept for error messages.
const STDERR_LINES: usize = 200;

/// Options for [`ControlPlane`]; start with [`ControlPlane::builder`] or
/// [`ControlPlane::with_compaction`].
#[derive(Debug, Clone)]
pub struct ControlPlaneBuilder {
    compaction: Option<Duration>,
    watch_cache: bool,
    verbosity: u32,
    apiserver_args: Vec<String>,
    node: bool,
    audit: bool,
    stop_grace: Option<Duration>,
}

impl Default for ControlPlaneBuilder {
    fn default() -> Self {
        Self {
            compaction: None,
            watch_cache: true,
            verbosity: 0,
            apiserver_args: Vec::new(),
            node: false,
            audit: false,
            stop_grace: None,
        }
    }
}

impl ControlPlaneBuilder {
    /// The apiserver's `--etcd-compaction-interval` (default 5m). A short
    /// interval (2s) makes old resourceVersions expire so that watches and
    /// lists from them get 410 Gone.
    pub fn compaction(mut self, interval: Duration) -> Self {
        self.compaction = Some(interval);
        self
    }

    /// The apiserver's `--watch-cache` (default true). With the cache on, a
    /// 410 comes from the cache's window of recent events; with it off, every
    /// watch goes to etcd and a 410 follows etcd compaction.
    pub fn watch_cache(mut self, on: bool) -> Self {
        self.watch_cache = on;
        self
    }

    /// The apiserver's `-v` (its log goes to `dir()/apiserver.log`).
    pub fn verbosity(mut self, v: u32) -> Self {
        self.verbosity = v;
        self
    }

    /// An extra kube-apiserver flag, e.g. `--runtime-config=api/all=true`.
    pub fn apiserver_arg(mut self, arg: impl Into<String>) -> Self {
        self.apiserver_args.push(arg.into());
        self
    }

    /// The API server's audit log of every write (create, update, patch,
    /// delete, at level Metadata: who, which Pod's token, what, when),
    /// read with [`ControlPlane::audit_writes`]. How a test tells which
    /// replica made a write: a bound ServiceAccount token names its Pod.
    pub fn audit(mut self, on: bool) -> Self {
        self.audit = on;
        self
    }

    /// How long a stopping API server (a [`ControlPlane::restart`], an
    /// [`ControlPlane::outage`], the final stop) may take before it is
    /// killed: the control plane's `--stop-grace` (default 30 s). With
    /// clients watching, the kube-apiserver's graceful shutdown waits out
    /// the whole grace (FIELD-NOTES), so each restart costs it; a short
    /// grace (2 s) ends the old process soon after it stopped taking
    /// requests.
    pub fn stop_grace(mut self, grace: Duration) -> Self {
        self.stop_grace = Some(grace);
        self
    }

    /// A whole single-node cluster (`--node`): also kube-controller-manager,
    /// kube-scheduler, containerd and a kubelet; ready once the Node reports
    /// Ready. Needs root and Debian's containerd, runc and CNI plugins
    /// (`scripts/setup.sh`).
    pub fn node(mut self, on: bool) -> Self {
        self.node = on;
        self
    }

    /// Builds the binary if needed, starts the control plane in a temp
    /// folder and waits (up to 120 s, not counting the build) until the API
    /// server answers /readyz. The waiting runs on a blocking thread.
    pub async fn start(self) -> anyhow::Result<ControlPlane> {
        tokio::task::spawn_blocking(move || self.start_blocking())
            .await
            .context("the control plane start task failed")?
    }

    /// [`Self::start`] for synchronous code (blocks the calling thread).
    pub fn start_blocking(self) -> anyhow::Result<ControlPlane> {
        let bin = binary()?;
        let root = tempfile::Builder::new()
            .prefix("kubewasm-controlplane-")
            .tempdir()
            .context("creating the control plane's temp folder")?;
        let keep = std::env::var_os("KUBEWASM_CONTROLPLANE_KEEP").is_some_and(|v| v == "1");
        let echo = std::env::var_os("KUBEWASM_CONTROLPLANE_LOG").is_some_and(|v| v == "1");

        let mut cmd = Command::new(&bin);
        cmd.arg("--dir")
            .arg(root.path())
            // The test process may never drop a shared instance: when it
            // exits, stdin closes and the control plane stops by itself.
            .arg("--exit-on-stdin-eof")
            .arg(format!("--watch-cache={}", self.watch_cache))
            .arg(format!("--v={}", self.verbosity));
        if !keep {
            cmd.arg("--remove-dir");
        }
        if let Some(every) = self.compaction {
            cmd.arg(format!(
                "--etcd-compaction-interval={}ms",
                every.as_millis()
            ));
        }
        for a in &self.apiserver_args {
            cmd.arg(format!("--apiserver-arg={a}"));
        }
        if self.audit {
            let policy = root.path().join(AUDIT_POLICY_FILE);
            std::fs::write(&policy, AUDIT_POLICY)
                .with_context(|| format!("writing {}", policy.display()))?;
            cmd.arg(format!(
                "--apiserver-arg=--audit-policy-file={}",
                policy.display()
            ))
            .arg(format!(
                "--apiserver-arg=--audit-log-path={}",
                root.path().join(AUDIT_LOG).display()
            ))
            .arg("--apiserver-arg=--audit-log-format=json")
            // Written as each request completes, not batched.
            .arg("--apiserver-arg=--audit-log-mode=blocking");
        }
        if self.node {
            cmd.arg("--node");
        }
        if let Some(grace) = self.stop_grace {
            cmd.arg(format!("--stop-grace={}ms", grace.as_millis()));
        }
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .with_context(|| format!("spawning {}", bin.display()))?;
        let pid = Pid::from_child(&child);

        // stdout: protocol lines into a channel.
        let (tx, lines) = mpsc::channel();
        let stdout = child.stdout.take().context("child stdout")?;
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        // stderr: the last lines, for error messages.
        let stderr_tail = Arc::new(Mutex::new(VecDeque::with_capacity(STDERR_LINES)));
        let stderr = child.stderr.take().context("child stderr")?;
        let tail = stderr_tail.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if echo {
                    eprintln!("{line}");
                }
                let mut t = tail.lock().unwrap();
                if t.len() == STDERR_LINES {
                    t.pop_front();
                }
                t.push_back(line);
            }
        });
        let stdin = child.stdin.take();

        let dir = if keep {
            let path = root.keep();
            eprintln!("kubewasm-controlplane: keeping {}", path.display());
            Dir::Kept(path)
        } else {
            Dir::Temp(root)
        };
        let mut cp = ControlPlane {
            child: Mutex::new(Some(child)),
            _stdin: Mutex::new(stdin),
            pid,
            lines: Mutex::new(lines),
            stderr_tail,
            dir,
            server: String::new(),
            etcd: String::new(),
            node: None,
            admin_kubeconfig: PathBuf::new(),
            user_kubeconfig: PathBuf::new(),
            restart_lock: tokio::sync::Mutex::new(()),
        };
        let started = Instant::now();
        let timeout = if self.node {
            READY_TIMEOUT + NODE_READY_TIMEOUT
        } else {
            READY_TIMEOUT
        };
        let ready = cp
            .wait_line_blocking(|l| l.starts_with(READY_PREFIX), timeout)
            .context("waiting for the control plane to become ready")?;
        let info: serde_json::Value = serde_json::from_str(&ready[READY_PREFIX.len()..])
            .with_context(|| format!("bad ready line: {ready}"))?;
        let field = |k: &str| {
            info[k]
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| anyhow!("ready line without {k}: {ready}"))
        };
        cp.server = field("server")?;
        cp.etcd = field("etcd")?;
        cp.admin_kubeconfig = field("adminKubeconfig")?.into();
        cp.user_kubeconfig = field("userKubeconfig")?.into();
        if self.node {
            let node = &info["node"];
            cp.node = Some(NodeInfo {
                name: node["name"]
                    .as_str()
                    .ok_or_else(|| anyhow!("ready line without node.name: {ready}"))?
                    .to_owned(),
                containerd_socket: node["containerdSocket"]
                    .as_str()
                    .ok_or_else(|| anyhow!("ready line without node.containerdSocket: {ready}"))?
                    .into(),
            });
        }
        if echo {
            eprintln!(
                "kubewasm-controlplane: {} ready in {:?}",
                cp.server,
                started.elapsed()
            );
        }
        Ok(cp)
    }
}

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

/// [`ControlPlaneBuilder::audit`]'s files in the state folder.
const AUDIT_POLICY_FILE: &str = "audit-policy.yaml";
const AUDIT_LOG: &str = "audit.log";
/// Writes only, once each (when the response is complete).
const AUDIT_POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted, Panic]
rules:
  - level: Metadata
    verbs: [create, update, patch, delete, deletecollection]
  - level: None
"#;

/// One write request from the API server's audit log.
#[derive(Debug, Clone)]
pub struct AuditWrite {
    /// When the server received it.
    pub at: k8s_openapi::jiff::Timestamp,
    pub user: String,
    /// The Pod whose bound ServiceAccount token made it, if any.
    pub pod: Option<String>,
    pub verb: String,
    /// `resource` or `resource/subresource`, with `group/` before it
    /// outside the core group.
    pub resource: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub code: Option<u16>,
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

    /// The Node's name in node mode.
    pub fn node_name(&self) -> Option<&str> {
        self.node.as_ref().map(|n| n.name.as_str())
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

    /// Imports an image archive (docker-archive or OCI) into the node's
    /// containerd, where Pods with `imagePullPolicy: Never` find it.
    pub fn load_image(&self, archive: &Path) -> anyhow::Result<()> {
        let node = self
            .node
            .as_ref()
            .context("load_image needs node mode (ControlPlane::builder().node(true))")?;
        let out = Command::new("ctr")
            .arg("--address")
            .arg(&node.containerd_socket)
            .args([
                "--namespace",
                "k8s.io",
                "images",
                "import",
                "--all-platforms",
            ])
            .arg(archive)
            .output()
            .context("running ctr (Debian package containerd)")?;
        if !out.status.success() {
            bail!(
                "ctr images import {} failed ({}): {}",
                archive.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    }

    /// Kills a container abruptly (SIGKILL through containerd, as an OOM
    /// kill or a crash would end it); `id` is the Pod status's
    /// `containerID` with or without its `containerd://` prefix. The
    /// kubelet sees it exit and restarts it per the Pod's restart policy.
    pub fn kill_container(&self, id: &str) -> anyhow::Result<()> {
        let node = self
            .node
            .as_ref()
            .context("kill_container needs node mode (ControlPlane::builder().node(true))")?;
        let id = id.strip_prefix("containerd://").unwrap_or(id);
        let out = Command::new("ctr")
            .arg("--address")
            .arg(&node.containerd_socket)
            .args([
                "--namespace",
                "k8s.io",
                "tasks",
                "kill",
                "--signal",
                "SIGKILL",
                id,
            ])
            .output()
            .context("running ctr (Debian package containerd)")?;
        if !out.status.success() {
            bail!(
                "ctr tasks kill {id} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    }

    /// Builds a one-layer image from local files (`(source, path in image)`,
    /// mode 0755) with `kubewasm-controlplane image` and imports it. For
    /// static programs only: there is no base image.
    pub fn build_and_load_image(
        &self,
        name: &str,
        files: &[(&Path, &str)],
        symlinks: &[(&str, &str)],
    ) -> anyhow::Result<()> {
        let archive = self.dir().join(format!(
            "image-{}.tar",
            name.replace(|c: char| !c.is_ascii_alphanumeric(), "_")
        ));
        let mut cmd = Command::new(binary()?);
        cmd.arg("image")
            .arg("--out")
            .arg(&archive)
            .arg("--name")
            .arg(name);
        for (src, dst) in files {
            cmd.arg(format!("--add={}:{dst}", src.display()));
        }
        for (dst, target) in symlinks {
            cmd.arg(format!("--symlink={dst}={target}"));
        }
        let out = cmd
            .output()
            .context("running kubewasm-controlplane image")?;
        if !out.status.success() {
            bail!(
                "building image {name} failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        self.load_image(&archive)
    }

    /// A program built next to the control plane binary by `build.sh`:
    /// `pause` (the sandbox) or `apiprobe` (an in-cluster API client that
    /// verifies the projected CA and prints one line per request).
    pub fn tool(name: &str) -> anyhow::Result<PathBuf> {
        let bin = binary()?;
        let path = bin
            .parent()
            .context("the control plane binary has no folder")?
            .join(name);
        anyhow::ensure!(
            path.is_file(),
            "{} is missing: tests/controlplane/build.sh builds it",
            path.display()
        );
        Ok(path)
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

    /// Every write in the audit log so far, in the order the server
    /// completed them (needs [`ControlPlaneBuilder::audit`]).
    pub fn audit_writes(&self) -> anyhow::Result<Vec<AuditWrite>> {
        let path = self.dir().join(AUDIT_LOG);
        let text = std::fs::read_to_string(&path).with_context(|| {
            format!(
                "reading {} (start the control plane with .audit(true))",
                path.display()
            )
        })?;
        let mut out = Vec::new();
        // The last line may be half-written while the server runs.
        for line in text.lines() {
            let Ok(e) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            let str_of = |v: &serde_json::Value| v.as_str().map(str::to_owned);
            let r = &e["objectRef"];
            let mut resource = str_of(&r["resource"]).unwrap_or_default();
            if let Some(sub) = r["subresource"].as_str() {
                resource = format!("{resource}/{sub}");
            }
            if let Some(g) = r["apiGroup"].as_str().filter(|g| !g.is_empty()) {
                resource = format!("{g}/{resource}");
            }
            let at = e["requestReceivedTimestamp"]
                .as_str()
                .and_then(|t| t.parse().ok())
                .with_context(|| format!("audit event without a timestamp: {line}"))?;
            out.push(AuditWrite {
                at,
                user: str_of(&e["user"]["username"]).unwrap_or_default(),
                pod: e["user"]["extra"]["authentication.kubernetes.io/pod-name"][0]
                    .as_str()
                    .map(str::to_owned),
                verb: str_of(&e["verb"]).unwrap_or_default(),
                resource,
                namespace: str_of(&r["namespace"]),
                name: str_of(&r["name"]),
                code: e["responseStatus"]["code"]
                    .as_u64()
                    .and_then(|c| u16::try_from(c).ok()),
            });
        }
        Ok(out)
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

    /// Stops the API server (etcd keeps running) and starts it again on the
    /// same port with the same data; returns once /readyz answers again.
    /// Watches and connections break meanwhile, exactly like a real restart.
    pub async fn restart(&self) -> anyhow::Result<()> {
        let _one_at_a_time = self.restart_lock.lock().await;
        // Drop any stale protocol line first.
        while self.lines.lock().unwrap().try_recv().is_ok() {}
        kill_process(self.pid, Signal::HUP).context("sending SIGHUP to the control plane")?;
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let next = self.lines.lock().unwrap().try_recv();
            match next {
                Ok(line) if line == RESTARTED => return Ok(()),
                Ok(_) => {}
                Err(TryRecvError::Disconnected) => {
                    bail!(
                        "the control plane exited during a restart\n{}",
                        self.stderr_tail()
                    )
                }
                Err(TryRecvError::Empty) if Instant::now() >= deadline => {
                    bail!(
                        "the API server did not restart within {READY_TIMEOUT:?}\n{}",
                        self.stderr_tail()
                    )
                }
                Err(TryRecvError::Empty) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    /// An API server outage of `down`: the API server is stopped (etcd
    /// keeps running), stays down, and is started again on the same port
    /// with the same data; returns once /readyz answers again. Meanwhile
    /// connections are refused, as when a control-plane node reboots.
    ///
    /// The control plane only knows a restart (SIGHUP: stop, then start at
    /// once), so the restarted kube-apiserver is frozen (SIGSTOP) as soon
    /// as its process appears, long before it listens, and thawed when
    /// `down` has passed since the stop began. A stop that takes longer
    /// than `down` (see [`ControlPlaneBuilder::stop_grace`]) makes the
    /// outage longer; the report says what happened. `down` is at most
    /// 90 s: the control plane gives up on a kube-apiserver that is not
    /// ready within 120 s of its start.
    pub async fn outage(&self, down: Duration) -> anyhow::Result<Outage> {
        anyhow::ensure!(
            down <= Duration::from_secs(90),
            "an outage of {down:?} is longer than the control plane waits for a restarted API server (keep it at most 90 s)"
        );
        let _one_at_a_time = self.restart_lock.lock().await;
        while self.lines.lock().unwrap().try_recv().is_ok() {}
        let old = self.apiserver_pid()?;
        let began = Instant::now();
        kill_process(self.pid, Signal::HUP).context("sending SIGHUP to the control plane")?;
        let deadline = began + READY_TIMEOUT;
        // The old process gone and the new one frozen: found by polling
        // /proc (a scan takes about a millisecond; a kube-apiserver takes
        // seconds from exec to listening).
        let new = loop {
            match self.apiserver_pid_other_than(old) {
                Ok(pid) => break pid,
                Err(_) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                Err(e) => return Err(e.context("the API server did not come back after SIGHUP")),
            }
        };
        let frozen = began.elapsed() < down;
        let thaw = if frozen {
            kill_process(new, Signal::STOP).context("SIGSTOP to the restarted kube-apiserver")?;
            Some(Thaw(new))
        } else {
            None
        };
        let stopped_after = began.elapsed();
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], self.port()));
        let refused = matches!(
            std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused
        );
        tokio::time::sleep_until((began + down).into()).await;
        drop(thaw);
        loop {
            let next = self.lines.lock().unwrap().try_recv();
            match next {
                Ok(line) if line == RESTARTED => break,
                Ok(_) => {}
                Err(TryRecvError::Disconnected) => {
                    bail!(
                        "the control plane exited during an outage\n{}",
                        self.stderr_tail()
                    )
                }
                Err(TryRecvError::Empty) if Instant::now() >= deadline + down => {
                    bail!(
                        "the API server did not come back within {READY_TIMEOUT:?} of the outage's end\n{}",
                        self.stderr_tail()
                    )
                }
                Err(TryRecvError::Empty) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
        Ok(Outage {
            stopped_after,
            refused,
            down: began.elapsed(),
        })
    }

    /// The kube-apiserver's own process: the child of the control plane
    /// started as `kubewasm-controlplane apiserver ...`.
    fn apiserver_pid(&self) -> anyhow::Result<Pid> {
        self.find_apiserver(None)
    }

    /// [`Self::apiserver_pid`], once it is not `old` (a restart's new one).
    fn apiserver_pid_other_than(&self, old: Pid) -> anyhow::Result<Pid> {
        self.find_apiserver(Some(old))
    }

    fn find_apiserver(&self, not: Option<Pid>) -> anyhow::Result<Pid> {
        let parent = self.pid.as_raw_nonzero().get();
        for entry in std::fs::read_dir("/proc")
            .context("reading /proc")?
            .flatten()
        {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<i32>().ok())
                .filter(|p| not.is_none_or(|n| n.as_raw_nonzero().get() != *p))
            else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            // `pid (comm) state ppid ...`; comm may hold spaces.
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<i32>().ok());
            if ppid != Some(parent) {
                continue;
            }
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            if cmdline.split(|b| *b == 0).nth(1) == Some(b"apiserver".as_slice()) {
                return Pid::from_raw(pid).context("pid 0");
            }
        }
        bail!("no kube-apiserver process under the control plane (pid {parent})")
    }

    /// Freezes the kube-apiserver (SIGSTOP): connections stay open and
    /// nothing answers, as with a hung or partitioned server.
    pub fn pause_apiserver(&self) -> anyhow::Result<()> {
        kill_process(self.apiserver_pid()?, Signal::STOP).context("SIGSTOP to the kube-apiserver")
    }

    /// Thaws a [`Self::pause_apiserver`]d kube-apiserver.
    pub fn resume_apiserver(&self) -> anyhow::Result<()> {
        kill_process(self.apiserver_pid()?, Signal::CONT).context("SIGCONT to the kube-apiserver")
    }

    fn wait_line_blocking(
        &self,
        want: impl Fn(&str) -> bool,
        timeout: Duration,
    ) -> anyhow::Result<String> {
        let deadline = Instant::now() + timeout;
        let lines = self.lines.lock().unwrap();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match lines.recv_timeout(left) {
                Ok(line) if want(&line) => return Ok(line),
                Ok(_) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    // Give the stderr reader a moment to catch the last lines.
                    std::thread::sleep(Duration::from_millis(200));
                    let status = self
                        .child
                        .lock()
                        .unwrap()
                        .as_mut()
                        .and_then(|c| c.try_wait().ok().flatten());
                    bail!(
                        "the control plane exited ({}) before it was ready\n{}",
                        status.map_or("status unknown".into(), |s| s.to_string()),
                        self.stderr_tail()
                    )
                }
                Err(RecvTimeoutError::Timeout) => {
                    bail!("not ready within {timeout:?}\n{}", self.stderr_tail())
                }
            }
        }
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

/// What [`ControlPlane::outage`] did.
#[derive(Debug, Clone, Copy)]
pub struct Outage {
    /// From the stop's start until the old kube-apiserver had exited and
    /// the new one was frozen.
    pub stopped_after: Duration,
    /// Whether connections to the API server's port were refused while it
    /// was down (false: the new process was caught after it had started
    /// listening, so connections hung instead).
    pub refused: bool,
    /// From the stop's start until /readyz answered again.
    pub down: Duration,
}

/// Thaws a frozen kube-apiserver when dropped, also when the test fails.
struct Thaw(Pid);

impl Drop for Thaw {
    fn drop(&mut self) {
        let _ = kill_process(self.0, Signal::CONT);
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
    BIN.get_or_init(|| {
        if let Some(bin) = std::env::var_os("KUBEWASM_CONTROLPLANE_BIN") {
            return Ok(bin.into());
        }
        let dir = crate::repo_root().join("tests/controlplane");
        let status = Command::new("bash")
            .arg(dir.join("build.sh"))
            .status()
            .map_err(|e| format!("running tests/controlplane/build.sh: {e}"))?;
        if !status.success() {
            return Err(format!(
                "tests/controlplane/build.sh failed ({status}): it needs Go and the Go module proxy"
            ));
        }
        Ok(dir.join("bin/kubewasm-controlplane"))
    })
    .clone()
    .map_err(|e| anyhow!(e))
}
