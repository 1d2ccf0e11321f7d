//! What a test does to the API server: a restart, an outage of a given
//! length, a freeze (SIGSTOP) and its thaw.

use std::sync::mpsc::TryRecvError;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use rustix::process::{Pid, Signal, kill_process};

use super::{ControlPlane, READY_TIMEOUT};

const RESTARTED: &str = "KUBEWASM-CONTROLPLANE RESTARTED";

impl ControlPlane {
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
    ///
    /// [`ControlPlaneBuilder::stop_grace`]: super::ControlPlaneBuilder::stop_grace
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
