//! recorder: the end-to-end suite's observer. For every delta of the
//! resources named in its config (within one namespace) it records an
//! Event whose note describes the delta exactly (sequence number, version
//! id, type, name, resourceVersion, old resourceVersion, initial and
//! final-state-unknown flags), so a test can read the plugin's view back
//! from the real API server.
//!
//! Config: `{"namespace": "e2e-1", "resources": ["configmaps"]}`.

use kubewasm_sdk::prelude::*;
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    namespace: String,
    resources: Vec<String>,
}

struct Recorder {
    config: Config,
    /// Tells versions apart across a hot swap: the load time in ns.
    version: String,
    seq: u64,
    /// The kind each subscription delivered last, for the `synced` deltas
    /// (which carry no object, so no kind, under 0.2).
    kinds: Vec<String>,
}

impl Plugin for Recorder {
    fn new(ctx: &Context) -> Result<Self, String> {
        let config: Config = ctx.parse_config()?;
        let now = clock::now();
        Ok(Self {
            kinds: vec![String::new(); config.resources.len()],
            config,
            version: format!("{}{:09}", now.seconds, now.nanoseconds),
            seq: 0,
        })
    }

    fn registration(&self) -> Registration {
        self.config
            .resources
            .iter()
            .fold(Registration::new(), |r, res| {
                r.subscribe(
                    Subscription::resource(res.clone())
                        .namespace(self.config.namespace.clone())
                        .deltas([
                            DeltaType::Added,
                            DeltaType::Updated,
                            DeltaType::Deleted,
                            DeltaType::Synced,
                        ]),
                )
            })
    }

    fn handle(&mut self, delta: Delta) -> Result<Handled, HandlerError> {
        self.seq += 1;
        let old_rv = delta
            .old_object
            .as_ref()
            .map(Object::resource_version)
            .unwrap_or_default();
        let slot = usize::try_from(delta.subscription)
            .ok()
            .and_then(|i| self.kinds.get_mut(i));
        let kind = match (delta.kind(), slot) {
            (Some(gvk), Some(slot)) => {
                slot.clone_from(&gvk.kind);
                gvk.kind
            }
            (Some(gvk), None) => gvk.kind,
            (None, Some(slot)) => slot.clone(),
            (None, None) => String::new(),
        };
        let note = serde_json::json!({
            "seq": self.seq,
            "version": self.version,
            "subscription": delta.subscription,
            "kind": kind,
            "type": delta.delta_type.as_str(),
            "name": delta.name,
            "rv": delta.resource_version,
            "oldRv": old_rv,
            "initial": delta.initial,
            "unknown": delta.final_state_unknown,
        });
        let regarding = ObjectRef::new(
            KindRef::resource("configmaps"),
            Some(&self.config.namespace),
            "kubewasm-recorder",
        );
        actions::event(&regarding, EventType::Normal, "Delta", &note.to_string())?;
        Ok(Done)
    }
}

kubewasm_sdk::export_plugin!(Recorder);
