//! parse-all: the same subscriptions as `realistic`, but decodes the whole
//! Pod (bench_logic::evaluate) and emits its patch: the cost of parsing.
use kubewasm_sdk::prelude::*;

struct ParseAll;

impl Plugin for ParseAll {
    fn register(_config: String) -> Result<Registration, String> {
        Ok(Registration {
            subscriptions: vec![
                subscribe::<Pod>(&[DeltaType::Added, DeltaType::Updated, DeltaType::Resync]),
                read_only::<Node>(),
            ],
            writes: vec![kind::<Pod>()],
            indexes: vec![],
        })
    }

    fn handle(delta: Delta) -> Result<(), HandlerError> {
        let (Some(meta), Some(obj)) = (&delta.meta, &delta.object) else {
            return Ok(());
        };
        match bench_logic::evaluate(&obj.to_json()).map_err(permanent)? {
            Some(patch) => actions::patch(&object_ref::<Pod>(meta), PatchType::Merge, &patch)
                .map_err(kubewasm_sdk::action_error),
            None => Ok(()),
        }
    }
}

kubewasm_sdk::export_plugin!(ParseAll);
