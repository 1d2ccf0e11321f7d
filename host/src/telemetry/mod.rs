//! Who this replica is, for logs, Events and the leader election Lease.

pub mod identity;
