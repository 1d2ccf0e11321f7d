//! Log setup: text for people at a terminal, JSON lines for everything else
//! (a container's stderr goes to a log collector), unless asked otherwise.

use std::io::IsTerminal;

/// Log format of `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

impl LogFormat {
    /// The format to use: the one asked for, else text on a terminal and
    /// JSON otherwise.
    pub fn resolve(asked: Option<LogFormat>, stderr_is_terminal: bool) -> LogFormat {
        asked.unwrap_or(if stderr_is_terminal {
            LogFormat::Text
        } else {
            LogFormat::Json
        })
    }
}

/// Installs the global subscriber on stderr (filter from `RUST_LOG`,
/// default `info`).
pub fn init(asked: Option<LogFormat>) {
    init_with(asked, "info");
}

/// [`init`] with another default filter (`kubewasm test` logs only
/// errors unless `RUST_LOG` says otherwise: its output is the report).
pub fn init_with(asked: Option<LogFormat>, default_filter: &str) {
    let terminal = std::io::stderr().is_terminal();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    // Colour only on a terminal: log files and collectors get plain text.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(terminal)
        .with_writer(std::io::stderr);
    match LogFormat::resolve(asked, terminal) {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_off_a_terminal_unless_asked() {
        assert_eq!(LogFormat::resolve(None, true), LogFormat::Text);
        assert_eq!(LogFormat::resolve(None, false), LogFormat::Json);
        assert_eq!(
            LogFormat::resolve(Some(LogFormat::Text), false),
            LogFormat::Text
        );
        assert_eq!(
            LogFormat::resolve(Some(LogFormat::Json), true),
            LogFormat::Json
        );
    }
}
