//! The store's resource limiter: the plugin's memory cap over all its
//! linear memories, and the host's ceiling on instances, memories and
//! tables.

use crate::runtime::limits::StoreCaps;

/// Enforces the instance's memory cap (over all its linear memories
/// together: a component may define several) and the host's ceiling on the
/// core instances, memories and tables it creates; remembers when the
/// memory cap was hit.
#[derive(Debug)]
pub struct MemoryLimiter {
    pub limit: usize,
    pub exceeded: bool,
    /// Bytes of every linear memory of the store (memories only grow, and
    /// live as long as the store).
    pub used: usize,
    pub caps: StoreCaps,
}

impl wasmtime::ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let total = self.used.saturating_sub(current).saturating_add(desired);
        if total > self.limit {
            self.exceeded = true;
            return Err(wasmtime::format_err!(
                "plugin memory limit exceeded: its memories would take {total} bytes (one growing from {current} to {desired}), limit is {} bytes; raise limits.memory in the plugin's sidecar if this is expected",
                self.limit
            ));
        }
        self.used = total;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 1_000_000)
    }

    fn instances(&self) -> usize {
        self.caps.instances
    }

    fn memories(&self) -> usize {
        self.caps.memories
    }

    fn tables(&self) -> usize {
        self.caps.tables
    }
}
