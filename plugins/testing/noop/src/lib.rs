//! noop: subscribes to every Pod delta (all namespaces, all delta types) and
//! does nothing: the floor of the host's per-delta overhead. It reads
//! nothing, not even its config.

use kubewasm_sdk::prelude::*;

struct Noop;

impl Plugin for Noop {
    fn new(_ctx: &Context) -> Result<Self, String> {
        Ok(Self)
    }

    fn registration(&self) -> Registration {
        Registration::new().subscribe(Subscription::kind::<Pod>().deltas(DeltaType::SUBSCRIBABLE))
    }

    fn handle(&mut self, _delta: Delta) -> Result<Handled, HandlerError> {
        Ok(Done)
    }
}

kubewasm_sdk::export_plugin!(Noop);
