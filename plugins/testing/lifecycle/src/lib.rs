//! lifecycle: a small controller for the embedded cluster's API-server
//! behaviour tests. See README.md for what it does per object name.

use std::collections::BTreeMap;

use kubewasm_sdk::prelude::*;
use kubewasm_sdk::serde_json::{Value, json};
use serde::Deserialize;

/// The finalizer the `fin-*` objects carry.
const FINALIZER: &str = "test.kubewasm.io/cleanup";

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Config {
    /// Whether the `race-*` writes carry the delta's resourceVersion.
    #[serde(default)]
    resource_versions: bool,
}

struct Lifecycle {
    resource_versions: bool,
    /// The first uid seen per `stale-*` object (namespace/name).
    first_uid: BTreeMap<String, String>,
}

fn line(event: &str, mut fields: Value) {
    fields["event"] = json!(event);
    log::info(&format!("lifecycle {fields}"), &[]);
}

fn describe(delta: &Delta, object: &Object) -> Value {
    json!({
        "type": delta.delta_type.as_str(),
        "namespace": delta.namespace,
        "name": delta.name,
        "uid": delta.uid,
        "resourceVersion": delta.resource_version,
        "generation": object.generation(),
        "terminating": object.is_terminating(),
        "finalizers": object.finalizers(),
        "lastFailure": delta.last_failure.as_ref().map(Failure::kind),
    })
}

impl Lifecycle {
    fn finalizer(&self, delta: &Delta, object: &Object) -> Result<Handled, HandlerError> {
        if delta.delta_type == DeltaType::Deleted {
            line("gone", describe(delta, object));
            return Ok(Done);
        }
        if object.is_terminating() {
            if object.has_finalizer(FINALIZER) {
                line("finalizing", describe(delta, object));
                actions::remove_finalizer(object, FINALIZER)?;
            }
            return Ok(Done);
        }
        if !object.has_finalizer(FINALIZER) {
            actions::add_finalizer(object, FINALIZER)?;
        } else if object.field_str("/data/delete").as_deref() == Some("yes") {
            actions::delete_object(object, Propagation::Background)?;
        }
        Ok(Done)
    }

    fn stale(&mut self, delta: &Delta, object: &Object) -> Result<Handled, HandlerError> {
        let key = delta.key();
        if delta.delta_type == DeltaType::Deleted {
            return Ok(Done);
        }
        if let Some(failure) = delta.last_failure.as_ref().filter(|f| f.is_conflict()) {
            line(
                "stale-uid-refused",
                json!({"name": delta.name, "uid": delta.uid, "message": failure.message()}),
            );
            self.first_uid.insert(key, delta.uid.clone());
            return Ok(Done);
        }
        let first = self
            .first_uid
            .entry(key)
            .or_insert_with(|| delta.uid.clone())
            .clone();
        if first != delta.uid {
            actions::delete(
                &ObjectRef::from_object(object),
                Propagation::Background,
                &Preconditions::uid(first),
            )?;
        }
        Ok(Done)
    }

    fn race(&self, delta: &Delta, object: &Object) -> Result<Handled, HandlerError> {
        if delta.delta_type == DeltaType::Deleted || object.is_terminating() {
            return Ok(Done);
        }
        let data = object.field_json("/data")?.unwrap_or(Value::Null);
        let keys: Vec<&str> = data
            .as_object()
            .map(|m| m.keys().map(String::as_str).collect())
            .unwrap_or_default();
        let saw = keys.join(",");
        let preconditions = if self.resource_versions {
            Preconditions::of_delta(delta)
        } else {
            Preconditions::uid(delta.uid.clone())
        };
        let target = ObjectRef::from_object(object);
        if keys.contains(&"stop") {
            if object.annotation("kubewasm.io/saw").as_deref() != Some(saw.as_str()) {
                line("race-stopped", json!({"name": delta.name, "saw": saw}));
                actions::annotate(&target, &[("kubewasm.io/saw", &saw)], &preconditions)?;
            }
            return Ok(Done);
        }
        let writes: u64 = object
            .annotation("kubewasm.io/writes")
            .and_then(|w| w.parse().ok())
            .unwrap_or(0);
        actions::annotate(
            &target,
            &[
                ("kubewasm.io/writes", &(writes + 1).to_string()),
                ("kubewasm.io/saw", &saw),
            ],
            &preconditions,
        )?;
        Ok(Done)
    }
}

impl Plugin for Lifecycle {
    fn new(ctx: &Context) -> Result<Self, String> {
        let config: Config = ctx.parse_config()?;
        Ok(Self {
            resource_versions: config.resource_versions,
            first_uid: BTreeMap::new(),
        })
    }

    fn registration(&self) -> Registration {
        Registration::new()
            .subscribe(Subscription::kind::<ConfigMap>().deltas([
                DeltaType::Added,
                DeltaType::Updated,
                DeltaType::Deleted,
            ]))
            .writes::<ConfigMap>()
    }

    fn handle(&mut self, delta: Delta) -> Result<Handled, HandlerError> {
        if delta.delta_type == DeltaType::Synced {
            return Ok(Done);
        }
        let object = delta.object()?;
        let name = delta.name.as_str();
        if name.starts_with("fin-") || name.starts_with("stale-") {
            line("delta", describe(&delta, object));
        }
        if name.starts_with("fin-") {
            self.finalizer(&delta, object)
        } else if name.starts_with("stale-") {
            self.stale(&delta, object)
        } else if name.starts_with("race-") {
            self.race(&delta, object)
        } else {
            Ok(Done)
        }
    }
}

kubewasm_sdk::export_plugin!(Lifecycle);
