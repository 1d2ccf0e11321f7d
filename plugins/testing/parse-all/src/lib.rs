//! parse-all: the subscriptions of `realistic`, but per delta decodes the
//! whole Pod from `object.to-json()` with `bench_logic::evaluate` (the same
//! code the host benchmark runs natively) and emits its merge patch, when
//! there is one, as the only action: the cost of parsing in the guest.
//!
//! Config `{"repeat": N}` (default 1) runs the decision N times per delta,
//! so the benchmark can tell the guest's parse time from the call's cost.

use kubewasm_sdk::prelude::*;

struct ParseAll {
    repeat: u64,
}

impl Plugin for ParseAll {
    fn new(ctx: &Context) -> Result<Self, String> {
        let config: serde_json::Value = if ctx.config.trim().is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::from_str(&ctx.config).map_err(|e| format!("invalid config: {e}"))?
        };
        let repeat = match config.get("repeat") {
            None => 1,
            Some(v) => v
                .as_u64()
                .ok_or_else(|| format!("invalid config: repeat must be a count, not {v}"))?,
        };
        Ok(Self { repeat })
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

    fn handle(&mut self, delta: Delta) -> Result<Handled, HandlerError> {
        if delta.delta_type == DeltaType::Synced {
            return Ok(Done);
        }
        let pod = delta.object()?;
        let json = pod.to_json();
        let mut decided = None;
        for _ in 0..self.repeat {
            decided = bench_logic::evaluate(&json).map_err(permanent)?;
        }
        if let Some(patch) = decided {
            actions::patch(
                &ObjectRef::for_delta::<Pod>(&delta),
                PatchType::Merge,
                &patch,
                &Preconditions::uid(&delta.uid),
            )?;
        }
        Ok(Done)
    }
}

kubewasm_sdk::export_plugin!(ParseAll);
