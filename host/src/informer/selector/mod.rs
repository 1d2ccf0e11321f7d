//! Label and field selectors, with the grammar the API server accepts.
//!
//! [`LabelSelector`] is a port of apimachinery's `labels.Parse`
//! (`k8s.io/apimachinery/pkg/labels/selector.go`, v0.35): the same lexer,
//! parser, key and value validation, matching and canonical text. It is the
//! one implementation every plugin language reaches through the host, so a
//! selector must mean here exactly what it means to the API server.
//!
//! [`FieldSelector`] is a port of apimachinery's `fields.ParseSelector`
//! (`k8s.io/apimachinery/pkg/fields/selector.go`, v0.35.8) for the same
//! reason: the host refuses what the server refuses, sends the server's
//! canonical text, and the local cluster filters as a real one does.
//!
//! Label selectors are lexed (`lexer.rs`), parsed (`parser.rs`) and checked
//! (`validation.rs`) as apimachinery does, then matched (`label.rs`); field
//! selectors have their own grammar (`field.rs`).

mod field;
mod label;
mod lexer;
mod parser;
#[cfg(test)]
mod tests;
mod validation;

/// The longest selector text parsed, label or field: 1 MiB. A selector
/// travels to the API server in a request's URL, and Go's HTTP server, the
/// API server's, reads a request's line and headers up to 1 MiB
/// (`http.DefaultMaxHeaderBytes`), so a longer one could never be sent. The
/// cap also bounds what parsing builds from text a plugin passes: about 60
/// bytes per requirement, a million of them in 16 MiB of `a,`.
pub const MAX_SELECTOR_BYTES: usize = 1 << 20;

pub use field::{FieldOp, FieldSelector, FieldSelectorError, supported_fields};
pub use label::{LabelSelector, SelectorError};
