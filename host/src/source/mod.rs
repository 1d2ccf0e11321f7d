//! Object sources behind the informers, and the sinks that carry out
//! actions against the same cluster: a real API server or the embedded
//! local cluster. Everything above (informers, cache, dispatcher, executor)
//! is shared; only this layer differs.

pub mod kube;
pub mod local;
