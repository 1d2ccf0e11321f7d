//! Structured logging into the host's log, tagged with the plugin's name:
//! `log::info("applied", &[("namespace", ns)])`.

use crate::bindings::kubewasm::plugin::log as raw;
pub use crate::bindings::kubewasm::plugin::log::Level;

/// Whether a record at `level` would be written: check before building a
/// costly message.
pub fn enabled(level: Level) -> bool {
    raw::enabled(level)
}

/// Writes a record with structured fields.
pub fn write(level: Level, message: &str, fields: &[(&str, &str)]) {
    let fields: Vec<(String, String)> = fields
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    raw::write(level, message, &fields);
}

/// A `trace` record.
pub fn trace(message: &str, fields: &[(&str, &str)]) {
    write(Level::Trace, message, fields);
}

/// A `debug` record.
pub fn debug(message: &str, fields: &[(&str, &str)]) {
    write(Level::Debug, message, fields);
}

/// An `info` record.
pub fn info(message: &str, fields: &[(&str, &str)]) {
    write(Level::Info, message, fields);
}

/// A `warn` record.
pub fn warn(message: &str, fields: &[(&str, &str)]) {
    write(Level::Warn, message, fields);
}

/// An `error` record.
pub fn error(message: &str, fields: &[(&str, &str)]) {
    write(Level::Error, message, fields);
}
