//! noop: subscribes to every Pod delta (all namespaces, all delta types) and
//! does nothing: the floor of the host's per-delta overhead.

use kubewasm_sdk::prelude::*;

struct Noop;

impl Plugin for Noop {
    fn new(_config: &str) -> Result<Self, String> {
        Ok(Self)
    }

    fn registration(&self) -> Registration {
        Registration::new().subscribe(Subscription::kind::<Pod>().deltas(DeltaType::ALL))
    }

    fn handle(&mut self, _delta: Delta) -> Result<(), HandlerError> {
        Ok(())
    }
}

kubewasm_sdk::export_plugin!(Noop);
