//! The conformance suite's machinery: a fixture's case run against the
//! simulated cluster and, action by action, against the real API server of
//! the test harness, each answer and each resulting object compared
//! ([`compare`]), the two worlds kept apart by [`translate`]: the case's
//! namespaces get a suffix on the shared server, and the server's uids and
//! resourceVersions stand for the simulation's.

pub mod compare;
pub mod mirror;
pub mod real;
pub mod translate;
