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
}

impl Plugin for Recorder {
    fn new(config: &str) -> Result<Self, String> {
        let config: Config = parse_config(config)?;
        let now = clock::now();
        Ok(Self {
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

    fn handle(&mut self, delta: Delta) -> Result<(), HandlerError> {
        self.seq += 1;
        let (name, rv) = delta
            .meta
            .as_ref()
            .map(|m| (m.name.clone(), m.resource_version.clone()))
            .unwrap_or_default();
        let old_rv = delta
            .old_meta()
            .map(|m| m.resource_version)
            .unwrap_or_default();
        let note = serde_json::json!({
            "seq": self.seq,
            "version": self.version,
            "subscription": delta.subscription,
            "kind": delta.kind.kind,
            "type": delta.delta_type.as_str(),
            "name": name,
            "rv": rv,
            "oldRv": old_rv,
            "initial": delta.initial,
            "unknown": delta.final_state_unknown,
        });
        let regarding = ObjectRef::new(
            KindRef::resource("configmaps"),
            Some(&self.config.namespace),
            "kubewasm-recorder",
        );
        actions::event(&regarding, EventType::Normal, "Delta", &note.to_string())
    }
}

kubewasm_sdk::export_plugin!(Recorder);
