//! parse-all: the subscriptions of `realistic`, but per delta decodes the
//! whole Pod from `object.to-json()` with `bench_logic::evaluate` (the same
//! code the host benchmark runs natively) and emits its merge patch, when
//! there is one, as the only action: the cost of parsing in the guest.

use kubewasm_sdk::prelude::*;

struct ParseAll;

impl Plugin for ParseAll {
    fn new(_config: &str) -> Result<Self, String> {
        Ok(Self)
    }

    fn registration(&self) -> Registration {
        Registration::new()
            .subscribe(Subscription::kind::<Pod>().deltas([
                DeltaType::Added,
                DeltaType::Updated,
                DeltaType::Resync,
            ]))
            .subscribe(Subscription::kind::<Node>().cache_only())
            .writes::<Pod>()
    }

    fn handle(&mut self, delta: Delta) -> Result<(), HandlerError> {
        if delta.delta_type == DeltaType::Synced {
            return Ok(());
        }
        let (meta, pod) = delta.parts()?;
        match bench_logic::evaluate(&pod.to_json()).map_err(permanent)? {
            Some(patch) => {
                actions::patch(&ObjectRef::from_meta::<Pod>(meta), PatchType::Merge, &patch)
            }
            None => Ok(()),
        }
    }
}

kubewasm_sdk::export_plugin!(ParseAll);
