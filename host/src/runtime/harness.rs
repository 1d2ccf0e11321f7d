//! What a test harness (`kubewasm test`) puts in place of the host's own
//! clock, log and randomness: a plugin reads a virtual time that moves only
//! when the harness moves it (its `clock` import and WASI's wall clock),
//! its log records are captured for comparison instead of logged, and
//! WASI's random sources are seeded, so that one fixture gives one outcome.
//! The running host never sets one.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;

/// One captured log record (or a line of the guest's captured output).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    /// `TRACE`, `DEBUG`, `INFO`, `WARN`, `ERROR`, or `OUTPUT` for a line
    /// the guest printed.
    pub level: &'static str,
    pub message: String,
    pub fields: Vec<(String, String)>,
}

impl std::fmt::Display for LogLine {
    /// `INFO copy deleted copy="team-a/x" source="platform/x"`: the fields
    /// as the host's log writes them.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.level, self.message)?;
        for (k, v) in &self.fields {
            write!(f, " {k}={v:?}")?;
        }
        Ok(())
    }
}

#[derive(Debug)]
struct State {
    now: SystemTime,
    seed: u64,
    logs: Vec<LogLine>,
}

/// The virtual clock, log capture and seed one plugin version runs with.
#[derive(Debug, Clone)]
pub struct Harness {
    state: Arc<Mutex<State>>,
}

impl Harness {
    /// A harness whose clock reads `now` and whose random sources start
    /// from `seed`.
    pub fn new(now: SystemTime, seed: u64) -> Self {
        Self {
            state: Arc::new(Mutex::new(State {
                now,
                seed,
                logs: Vec::new(),
            })),
        }
    }

    /// Now, as the plugin sees it.
    pub fn now(&self) -> SystemTime {
        self.state.lock().now
    }

    /// Sets the clock (for a new case).
    pub fn set_now(&self, now: SystemTime) {
        self.state.lock().now = now;
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        let mut s = self.state.lock();
        s.now += by;
    }

    /// The seed instances created from now on start their random sources
    /// from.
    pub fn set_seed(&self, seed: u64) {
        self.state.lock().seed = seed;
    }

    pub fn seed(&self) -> u64 {
        self.state.lock().seed
    }

    pub(super) fn log(&self, line: LogLine) {
        self.state.lock().logs.push(line);
    }

    /// Takes the records captured since the last take.
    pub fn take_logs(&self) -> Vec<LogLine> {
        std::mem::take(&mut self.state.lock().logs)
    }

    /// WASI's wall clock reading this harness's time.
    pub(super) fn wall_clock(&self) -> WallClock {
        WallClock(self.clone())
    }
}

/// `wasi:clocks/wall-clock` on the virtual time.
pub(super) struct WallClock(Harness);

impl wasmtime_wasi::HostWallClock for WallClock {
    fn resolution(&self) -> Duration {
        Duration::from_nanos(1)
    }

    fn now(&self) -> Duration {
        self.0
            .now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_moves_only_when_told_and_logs_are_taken_once() {
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let h = Harness::new(start, 7);
        assert_eq!(h.now(), start);
        h.advance(Duration::from_millis(1500));
        assert_eq!(h.now(), start + Duration::from_millis(1500));
        assert_eq!(
            wasmtime_wasi::HostWallClock::now(&h.wall_clock()),
            Duration::from_millis(1_001_500)
        );
        h.log(LogLine {
            level: "INFO",
            message: "copy deleted".into(),
            fields: vec![("copy".into(), "a/b".into())],
        });
        let logs = h.take_logs();
        assert_eq!(logs.len(), 1);
        assert_eq!(logs[0].to_string(), r#"INFO copy deleted copy="a/b""#);
        assert!(h.take_logs().is_empty());
    }
}
