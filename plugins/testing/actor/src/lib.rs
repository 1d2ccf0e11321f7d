//! actor: the conformance fixtures' plugin. It emits exactly the actions a
//! script lists, so that one fixture step pins one behaviour of the API
//! server (a precondition in a body, a status write, a refused finalizer)
//! and the same step can be run against the simulation and a real API
//! server and the answers compared. The host executes the actions after
//! the call returns; the call's result is the first refusal, as for any
//! plugin (a script of one action pins that action's answer).
//!
//! A script is a ConfigMap labelled `actor=script`; its `data.actions` is
//! a JSON array, each entry one of
//! `{"apply": OBJECT, "force": BOOL}`, `{"applyStatus": OBJECT}`,
//! `{"patch": TARGET, "type": "merge"|"json", "body": VALUE}`,
//! `{"delete": TARGET, "propagation": "background"|"foreground"|"orphan"}`,
//! each with optional `"uid"` and `"resourceVersion"` preconditions. A
//! TARGET is `{"resource": "configmaps", "namespace": NS, "name": NAME}`.
//! An action the host refuses before sending it (not declared, not
//! granted, malformed) fails the call at once.
//!
//! Config (all optional): `{"writes": ["configmaps", ...]}` the resources
//! it may write (default: configmaps), and `{"watch": [{"resource":
//! "pods", "namespace": NS, "labels": SEL, "fields": SEL}]}` more
//! subscriptions whose deltas it only logs (`seen TYPE RESOURCE NS/NAME`),
//! to pin which objects a selector delivers and what the plugin's own
//! writes echo back.

use kubewasm_sdk::prelude::*;
use serde::Deserialize;
use serde_json::Value;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default)]
    writes: Vec<String>,
    #[serde(default)]
    watch: Vec<Watch>,
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct Watch {
    resource: String,
    namespace: Option<String>,
    labels: Option<String>,
    fields: Option<String>,
}

struct Actor {
    config: Config,
}

impl Plugin for Actor {
    fn new(ctx: &Context) -> Result<Self, String> {
        Ok(Self {
            config: ctx.parse_config()?,
        })
    }

    fn registration(&self) -> Registration {
        let scripts = Subscription::kind::<ConfigMap>()
            .labels("actor=script")
            .deltas([DeltaType::Added, DeltaType::Updated]);
        let mut r = Registration::new().subscribe(scripts);
        for w in &self.config.watch {
            let mut s = Subscription::resource(w.resource.clone()).deltas([
                DeltaType::Added,
                DeltaType::Updated,
                DeltaType::Deleted,
            ]);
            if let Some(ns) = &w.namespace {
                s = s.namespace(ns.clone());
            }
            if let Some(l) = &w.labels {
                s = s.labels(l.clone());
            }
            if let Some(f) = &w.fields {
                s = s.field_selector(f.clone());
            }
            r = r.subscribe(s);
        }
        let writes: Vec<String> = if self.config.writes.is_empty() {
            vec!["configmaps".to_owned()]
        } else {
            self.config.writes.clone()
        };
        writes
            .into_iter()
            .fold(r, |r, w| r.writes_kind(KindRef::resource(w)))
    }

    fn handle(&mut self, delta: Delta) -> Result<Handled, HandlerError> {
        if delta.subscription != 0 {
            let resource = self
                .config
                .watch
                .get(delta.subscription as usize - 1)
                .map_or("?", |w| w.resource.as_str());
            log::info(
                &format!("seen {} {resource} {}", delta.delta_type, delta.key()),
                &[],
            );
            return Ok(Done);
        }
        let object = delta.object()?;
        let Some(text) = object.field_str("/data/actions") else {
            return Err(permanent("a script needs data.actions"));
        };
        let actions: Vec<Value> = serde_json::from_str(&text)
            .map_err(|e| permanent(format!("data.actions is not a JSON array: {e}")))?;
        for action in &actions {
            run(action)?;
        }
        Ok(Done)
    }
}

/// Emits one scripted action; the host's answer.
fn run(action: &Value) -> Result<(), HandlerError> {
    let pre = preconditions(action);
    if let Some(object) = action.get("apply") {
        let force = action.get("force").and_then(Value::as_bool).unwrap_or(true);
        return actions::apply_json(object, force, &pre);
    }
    if let Some(object) = action.get("applyStatus") {
        return actions::apply_status_json(object, &pre);
    }
    if let Some(target) = action.get("patch") {
        let patch_type = match action.get("type").and_then(Value::as_str) {
            Some("json") => PatchType::Json,
            _ => PatchType::Merge,
        };
        let body = action.get("body").cloned().unwrap_or(Value::Null);
        return actions::patch(&target_of(target)?, patch_type, &body.to_string(), &pre);
    }
    if let Some(target) = action.get("delete") {
        let propagation = match action.get("propagation").and_then(Value::as_str) {
            Some("foreground") => Propagation::Foreground,
            Some("orphan") => Propagation::Orphan,
            _ => Propagation::Background,
        };
        return actions::delete(&target_of(target)?, propagation, &pre);
    }
    Err(permanent(format!("not an action: {action}")))
}

fn preconditions(action: &Value) -> Preconditions {
    let text = |k: &str| {
        action
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    Preconditions::uid(text("uid")).with_resource_version(text("resourceVersion"))
}

fn target_of(target: &Value) -> Result<ObjectRef, HandlerError> {
    let text = |k: &str| target.get(k).and_then(Value::as_str);
    let resource = text("resource").ok_or_else(|| permanent("a target needs resource"))?;
    let name = text("name").ok_or_else(|| permanent("a target needs name"))?;
    Ok(ObjectRef::new(
        KindRef::resource(resource),
        text("namespace"),
        name,
    ))
}

kubewasm_sdk::export_plugin!(Actor);
