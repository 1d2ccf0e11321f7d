//! Starting a control plane: the options, the spawn, and the wait for its
//! ready line.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use rustix::process::Pid;

use super::audit::{AUDIT_LOG, AUDIT_POLICY, AUDIT_POLICY_FILE};
use super::{ControlPlane, Dir, NodeInfo, READY_TIMEOUT, binary};

const READY_PREFIX: &str = "KUBEWASM-CONTROLPLANE READY ";

/// How long, after the API server, the node may take to report Ready.
const NODE_READY_TIMEOUT: Duration = Duration::from_secs(180);

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
    controllers: Option<String>,
    audit: bool,
    stop_grace: Option<Duration>,
    release_1_36: bool,
}

impl Default for ControlPlaneBuilder {
    fn default() -> Self {
        Self {
            compaction: None,
            watch_cache: true,
            verbosity: 0,
            apiserver_args: Vec::new(),
            node: false,
            controllers: None,
            audit: false,
            stop_grace: None,
            release_1_36: false,
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

    /// Without [`Self::node`]: also kube-controller-manager running only
    /// `controllers` (its `--controllers`, e.g. `garbagecollector`), to
    /// compare with what they do at a fraction of a node's cost.
    pub fn controllers(mut self, controllers: impl Into<String>) -> Self {
        self.controllers = Some(controllers.into());
        self
    }

    /// The API server of Kubernetes 1.36 instead of the default release
    /// ([`binary_1_36`](super::binary_1_36)), for what that release adds
    /// (its alpha features behind `--feature-gates`, through
    /// [`Self::apiserver_arg`]). Not with [`Self::node`] or
    /// [`Self::controllers`]: that build has the API server alone.
    pub fn kubernetes_1_36(mut self) -> Self {
        self.release_1_36 = true;
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
        if self.release_1_36 && (self.node || self.controllers.is_some()) {
            bail!("the Kubernetes 1.36 build has the API server alone: no node, no controllers");
        }
        let bin = if self.release_1_36 {
            super::binary_1_36()?
        } else {
            binary()?
        };
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
        if let Some(c) = &self.controllers {
            cmd.arg(format!("--controllers={c}"));
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

impl ControlPlane {
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
}
