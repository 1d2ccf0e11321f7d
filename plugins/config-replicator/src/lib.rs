//! config-replicator: copy ConfigMaps matching a selector into every
//! namespace matching another selector, keep copies in sync, and delete
//! them when the source goes.

use std::cell::RefCell;

use kubewasm_sdk::prelude::*;
use kubewasm_sdk::selector::Selector;
use serde::Deserialize;

const REPLICA: &str = "kubewasm.io/replica";
const REPLICA_OF: &str = "kubewasm.io/replica-of";
const REPLICATE_TO: &str = "kubewasm.io/replicate-to";

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Config {
    #[serde(default = "default_source")]
    source_selector: String,
    #[serde(default)]
    namespace_selector: String,
}

fn default_source() -> String {
    "kubewasm.io/replicate=true".to_owned()
}

struct State {
    source: Selector,
    namespaces: Selector,
}

thread_local! {
    static STATE: RefCell<Option<State>> = const { RefCell::new(None) };
}

struct ConfigReplicator;

fn cache_err(e: CacheError) -> HandlerError {
    retry(format!("cache read failed: {e:?}"))
}

fn is_source(state: &State, meta: &ObjectMeta) -> bool {
    label(meta, REPLICA) != Some("true") && state.source.matches(&meta.labels)
}

/// Namespaces a source goes to, sorted by name.
fn targets(state: &State, source: &ObjectMeta) -> Result<Vec<ObjectMeta>, HandlerError> {
    let override_sel = annotation(source, REPLICATE_TO)
        .map(Selector::parse)
        .transpose()
        .map_err(permanent)?;
    let sel = override_sel.as_ref().unwrap_or(&state.namespaces);
    let all = cache::list(&kind::<Namespace>(), None, None).map_err(cache_err)?;
    Ok(all
        .iter()
        .map(Object::meta)
        .filter(|ns| {
            sel.matches(&ns.labels)
                && ns.deletion_timestamp.is_none()
                && Some(&ns.name) != source.namespace.as_ref()
        })
        .collect())
}

fn copy_into(source: &Object, meta: &ObjectMeta, ns: &str) -> Result<(), HandlerError> {
    let of = format!("{}/{}", meta.namespace.as_deref().unwrap_or(""), meta.name);
    let mut copy = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": meta.name, "namespace": ns, "labels": {REPLICA: "true"}, "annotations": {REPLICA_OF: of}},
    });
    for f in ["data", "binaryData"] {
        if let Some(FieldValue::Json(v)) = source.field(&format!("/{f}")) {
            copy[f] = serde_json::from_str(&v).map_err(|e| permanent(format!("bad {f}: {e}")))?;
        }
    }
    actions::apply(&copy.to_string(), true).map_err(kubewasm_sdk::action_error)
}

impl Plugin for ConfigReplicator {
    fn register(config: String) -> Result<Registration, String> {
        let cfg: Config = serde_json::from_str(&config).map_err(|e| format!("bad config: {e}"))?;
        let state = State {
            source: Selector::parse(&cfg.source_selector)?,
            namespaces: Selector::parse(&cfg.namespace_selector)?,
        };
        STATE.with(|s| *s.borrow_mut() = Some(state));
        let mut cms = subscribe::<ConfigMap>(&[
            DeltaType::Added,
            DeltaType::Updated,
            DeltaType::Deleted,
            DeltaType::Resync,
        ]);
        cms.fields = vec!["/data".into(), "/binaryData".into()];
        let mut nss = subscribe::<Namespace>(&[DeltaType::Added, DeltaType::Updated]);
        nss.fields = vec!["/metadata/labels".into()];
        Ok(Registration {
            subscriptions: vec![cms, nss],
            writes: vec![kind::<ConfigMap>()],
            indexes: vec![],
        })
    }

    fn handle(delta: Delta) -> Result<(), HandlerError> {
        let (Some(meta), Some(obj)) = (&delta.meta, &delta.object) else {
            return Ok(());
        };
        STATE.with(|s| {
            let s = s.borrow();
            let state = s.as_ref().ok_or_else(|| permanent("not registered"))?;
            if delta.subscription == 1 {
                return namespace_changed(state, meta, &delta);
            }
            if !is_source(state, meta) {
                return Ok(());
            }
            match delta.delta_type {
                DeltaType::Deleted => delete_copies(meta),
                _ => {
                    let targets = targets(state, meta)?;
                    let count = targets.len().to_string();
                    log::debug(
                        "replicating",
                        &[("source", &meta.name), ("targets", &count)],
                    );
                    for ns in targets {
                        copy_into(obj, meta, &ns.name)?;
                    }
                    Ok(())
                }
            }
        })
    }
}

/// A namespace appeared or its labels changed: give it every source it now matches.
fn namespace_changed(state: &State, ns: &ObjectMeta, delta: &Delta) -> Result<(), HandlerError> {
    // Initial namespaces are covered by the sources' own initial deltas
    // (the host delivers nothing before every cache has synced).
    if ns.deletion_timestamp.is_some() || delta.initial {
        return Ok(());
    }
    let old_labels = delta.old_object.as_ref().map(|o| o.meta().labels);
    let sources = cache::list(&kind::<ConfigMap>(), None, None).map_err(cache_err)?;
    for src in &sources {
        let m = src.meta();
        if !is_source(state, &m) || m.namespace.as_ref() == Some(&ns.name) {
            continue;
        }
        let sel = match annotation(&m, REPLICATE_TO) {
            Some(s) => Selector::parse(s).map_err(permanent)?,
            None => state.namespaces.clone(),
        };
        let was = old_labels.as_ref().is_some_and(|l| sel.matches(l));
        if sel.matches(&ns.labels) && !was {
            copy_into(src, &m, &ns.name)?;
        }
    }
    Ok(())
}

fn delete_copies(source: &ObjectMeta) -> Result<(), HandlerError> {
    let of = format!(
        "{}/{}",
        source.namespace.as_deref().unwrap_or(""),
        source.name
    );
    let copies = cache::list(&kind::<ConfigMap>(), None, Some(&format!("{REPLICA}=true")))
        .map_err(cache_err)?;
    for c in copies {
        let m = c.meta();
        if annotation(&m, REPLICA_OF) == Some(of.as_str()) {
            actions::delete(&object_ref::<ConfigMap>(&m), Propagation::Background)
                .map_err(kubewasm_sdk::action_error)?;
        }
    }
    Ok(())
}

kubewasm_sdk::export_plugin!(ConfigReplicator);
