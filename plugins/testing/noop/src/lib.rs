//! noop: subscribes to every Pod delta and does nothing: the floor of the
//! host's per-delta overhead.
use kubewasm_sdk::prelude::*;

struct Noop;

impl Plugin for Noop {
    fn register(_config: String) -> Result<Registration, String> {
        let all = [
            DeltaType::Added,
            DeltaType::Updated,
            DeltaType::Deleted,
            DeltaType::Resync,
            DeltaType::Synced,
        ];
        Ok(Registration {
            subscriptions: vec![subscribe::<Pod>(&all)],
            writes: vec![],
            indexes: vec![],
        })
    }

    fn handle(_delta: Delta) -> Result<(), HandlerError> {
        Ok(())
    }
}

kubewasm_sdk::export_plugin!(Noop);
