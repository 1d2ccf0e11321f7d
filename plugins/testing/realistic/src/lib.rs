//! realistic: per Pod delta, reads metadata and two fields through the host,
//! does one cache get (the Pod's Node) and emits one merge patch. No JSON
//! parsing in the guest.
use kubewasm_sdk::prelude::*;

struct Realistic;

impl Plugin for Realistic {
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
        let _app = label(meta, "app");
        let mut fields = obj
            .fields(&["/spec/nodeName".to_owned(), "/status/phase".to_owned()])
            .into_iter();
        let node = match fields.next().flatten() {
            Some(FieldValue::Text(n)) => n,
            _ => return Ok(()),
        };
        let _phase = fields.next().flatten();
        let zone = cache::get(&kind::<Node>(), None, &node)
            .map_err(|e| retry(format!("{e:?}")))?
            .and_then(|n| label(&n.meta(), "topology.kubernetes.io/zone").map(str::to_owned))
            .unwrap_or_else(|| "unknown".to_owned());
        let patch = format!(r#"{{"metadata":{{"annotations":{{"kubewasm.io/zone":"{zone}"}}}}}}"#);
        actions::patch(&object_ref::<Pod>(meta), PatchType::Merge, &patch)
            .map_err(kubewasm_sdk::action_error)
    }
}

kubewasm_sdk::export_plugin!(Realistic);
