//! The handles the guest holds on host resources (objects, selectors),
//! counted against `limits.handles`.

use wasmtime::component::Resource;

use super::HostState;
use crate::object::ObjectHandle;
use crate::runtime::limits::Cap;

impl HostState {
    /// A handle on `obj` for the guest. Over `limits.handles` this traps:
    /// the instance, and every handle it leaked, is then discarded.
    pub fn push_object(&mut self, obj: ObjectHandle) -> wasmtime::Result<Resource<ObjectHandle>> {
        self.push_handle(obj)
    }

    /// Any resource the guest holds a handle on (objects, selectors),
    /// counted against `limits.handles`.
    pub(in crate::runtime) fn push_handle<T: Send + 'static>(
        &mut self,
        value: T,
    ) -> wasmtime::Result<Resource<T>> {
        if self.live_handles >= self.caps.handles {
            let e = self.exceeded(Cap::Handles);
            return Err(wasmtime::format_err!("plugin exceeded {e}"));
        }
        let r = self.table.push(value)?;
        self.live_handles += 1;
        Ok(r)
    }

    /// The value behind a handle the guest holds.
    pub(in crate::runtime) fn handle_value<T: 'static>(
        &self,
        r: &Resource<T>,
    ) -> wasmtime::Result<&T> {
        Ok(self.table.get(r)?)
    }

    /// Drops a handle the guest let go of.
    pub(in crate::runtime) fn drop_handle<T: 'static>(
        &mut self,
        r: Resource<T>,
    ) -> wasmtime::Result<()> {
        self.table.delete(r)?;
        self.live_handles = self.live_handles.saturating_sub(1);
        Ok(())
    }
    pub(in crate::runtime) fn object(
        &self,
        r: &Resource<ObjectHandle>,
    ) -> wasmtime::Result<&ObjectHandle> {
        self.handle_value(r)
    }
    pub(super) fn push_all(
        &mut self,
        objs: Vec<ObjectHandle>,
    ) -> wasmtime::Result<Vec<Resource<ObjectHandle>>> {
        objs.into_iter().map(|o| self.push_object(o)).collect()
    }
}
