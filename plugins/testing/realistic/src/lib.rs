//! realistic: a typical handler's work per Pod delta, with no JSON parsing
//! in the guest: reads label `app` through the host, two fields
//! (`/spec/nodeName`, `/status/phase`) in one call, gets the Pod's Node from
//! the cache, and emits one merge patch annotating the Pod with the Node's
//! zone.

use kubewasm_sdk::prelude::*;

const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
const ZONE_ANNOTATION: &str = "kubewasm.io/zone";

struct Realistic {
    pointers: [String; 2],
}

impl Plugin for Realistic {
    fn new(_ctx: &Context) -> Result<Self, String> {
        Ok(Self {
            pointers: ["/spec/nodeName".to_owned(), "/status/phase".to_owned()],
        })
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
        let app = pod.label("app");
        let mut fields = pod.fields(&self.pointers).into_iter();
        let node = fields.next().flatten().and_then(FieldValue::into_string);
        let phase = fields.next().flatten().and_then(FieldValue::into_string);
        let zone = match &node {
            Some(node) => cache::get::<Node>(None, node)?.and_then(|n| n.label(ZONE_LABEL)),
            None => None,
        };
        let zone = zone.as_deref().unwrap_or("unknown");
        // Read like a real handler would, used by none: keep them.
        std::hint::black_box((app, phase));
        actions::annotate(
            &ObjectRef::for_delta::<Pod>(&delta),
            &[(ZONE_ANNOTATION, zone)],
            &Preconditions::uid(&delta.uid),
        )?;
        Ok(Done)
    }
}

kubewasm_sdk::export_plugin!(Realistic);
