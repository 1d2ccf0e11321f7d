//! A `kubewasm` child process whose stderr goes to a log file: the one
//! piece the suites that drive the binary share, whether against a
//! kubeconfig ([`crate::e2e::HostProcess`]) or over the embedded cluster
//! (`run_local`, and each suite's own `LocalHost`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The child and its log. On drop it is stopped (SIGCONT then SIGTERM,
/// SIGKILL after 5 s); a failing test prints the tail of its log, which
/// says why the host did not act and goes with the test's folder.
pub struct HostChild {
    child: Child,
    log: PathBuf,
}

impl HostChild {
    /// Spawns `cmd`, its stdout discarded and its stderr written to `log`.
    pub fn spawn(cmd: &mut Command, log: PathBuf) -> Self {
        let child = cmd
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start kubewasm");
        Self { child, log }
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The host's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The exit status, if the host has exited.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().unwrap()
    }

    fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
        assert!(status.success(), "kill -{sig} failed");
    }

    /// The address the metrics listener bound (from the text log line
    /// `metrics listening addr=...`), once it is up.
    pub async fn metrics_addr(&self, timeout: Duration) -> std::net::SocketAddr {
        let line = self.wait_line("metrics listening", timeout).await;
        line.split("addr=")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("no address in {line:?}"))
    }

    /// Freezes the process (SIGSTOP): its watches stall, nothing is lost.
    pub fn pause(&self) {
        self.signal("STOP");
    }

    pub fn resume(&self) {
        self.signal("CONT");
    }

    /// Waits until the log contains `needle`.
    pub async fn wait_log(&self, needle: &str, timeout: Duration) {
        let start = Instant::now();
        while !self.logs().contains(needle) {
            assert!(
                start.elapsed() < timeout,
                "host log never showed {needle:?} within {timeout:?}; log:\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the log contains `needle`; returns the first line
    /// holding it.
    pub async fn wait_line(&self, needle: &str, timeout: Duration) -> String {
        self.wait_log(needle, timeout).await;
        self.logs()
            .lines()
            .find(|l| l.contains(needle))
            .map(str::to_owned)
            .unwrap_or_default()
    }

    /// SIGKILL and wait: no drain, no release, as when a node dies.
    pub fn kill(mut self) {
        self.signal("KILL");
        let _ = self.child.wait();
    }

    /// SIGTERM and wait: returns the exit status (the host drains and exits 0).
    pub fn stop(mut self) -> ExitStatus {
        self.terminate()
    }

    /// [`stop`](Self::stop), also returning the log.
    pub fn stop_with_logs(mut self) -> (ExitStatus, String) {
        let status = self.terminate();
        (status, self.logs())
    }

    fn terminate(&mut self) -> ExitStatus {
        self.signal("TERM");
        let start = Instant::now();
        loop {
            if let Some(status) = self.try_wait() {
                return status;
            }
            if start.elapsed() > Duration::from_secs(20) {
                let _ = self.child.kill();
                panic!(
                    "host did not exit within 20s of SIGTERM; log:\n{}",
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for HostChild {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let logs = self.logs();
            let lines: Vec<&str> = logs.lines().collect();
            let tail = &lines[lines.len().saturating_sub(200)..];
            eprintln!(
                "--- last {} lines of the host log ({}) ---\n{}\n--- end of host log ---",
                tail.len(),
                self.log.display(),
                tail.join("\n")
            );
        }
        if let Ok(None) = self.child.try_wait() {
            let _ = Command::new("kill")
                .arg("-CONT")
                .arg(self.child.id().to_string())
                .status();
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(self.child.id().to_string())
                .status();
            for _ in 0..100 {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
