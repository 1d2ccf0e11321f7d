//! kubewasm: Kubernetes shared informers feeding WebAssembly component
//! plugins, which read the cache through host imports and emit actions the
//! host executes.

pub mod actions;
pub mod activity;
pub mod admin;
pub mod app;
pub mod config;
pub mod crd;
pub mod dispatch;
pub mod informer;
pub mod kind;
#[cfg(test)]
mod layering;
pub mod leader;
pub mod lru_files;
pub mod manager;
pub mod names;
pub mod object;
pub mod objects;
pub mod oci;
pub mod openapi;
pub mod origin;
pub mod pointer;
pub mod precompile;
pub mod proto;
pub mod rbac;
pub mod redact;
pub mod reference;
pub mod reload;
pub mod runtime;
pub mod scaffold;
pub mod shard;
pub mod sim;
pub mod source;
pub mod telemetry;
pub mod testing;
pub mod toolchain;
