//! The admin surface, at the entry layer: the host's HTTP listeners (the
//! metrics listener serving `/healthz`, `/readyz`, `/metrics` and
//! `/dead-letters`, optionally behind Kubernetes authentication, and the
//! live web view on a listener of its own), `kubewasm probe`, and the view
//! of the running host they read. It may import everything; telemetry,
//! which the data path counts and logs with, imports none of it.

pub mod auth;
pub mod probe;
pub mod server;
pub mod tls;
pub mod ui;
pub mod view;
