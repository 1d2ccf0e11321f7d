//! kubewasm: Kubernetes shared informers feeding WebAssembly component
//! plugins, which read the cache through host imports and emit actions the
//! host executes.

pub mod actions;
pub mod informer;
pub mod kind;
pub mod object;
pub mod runtime;
