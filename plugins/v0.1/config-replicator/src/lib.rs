//! config-replicator: copies source ConfigMaps (matching a label selector)
//! into every namespace matching another selector, keeps the copies in step
//! with their source, and deletes them when the source goes.
//! See README.md for the config and the exact actions.

use std::borrow::Cow;

use kubewasm_sdk::prelude::*;
use kubewasm_sdk::serde_json::{Map, Value, json};
use serde::Deserialize;

/// Label on every copy; objects carrying it are never replicated.
const REPLICA: &str = "kubewasm.io/replica";
/// Annotation on every copy: `<namespace>/<name>` of its source.
const REPLICA_OF: &str = "kubewasm.io/replica-of";
/// Annotation on a source overriding the configured namespace selector.
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

struct ConfigReplicator {
    source: Selector,
    namespaces: Selector,
}

/// What a copy is made of: the source's name, key, data and binaryData.
struct Copy {
    name: String,
    of: String,
    data: Map<String, Value>,
}

impl Copy {
    fn of(meta: &ObjectMeta, source: &Object) -> Result<Self, HandlerError> {
        let mut data = Map::new();
        for (key, pointer) in [("binaryData", "/binaryData"), ("data", "/data")] {
            match source.field_json(pointer)? {
                None | Some(Value::Null) => {}
                Some(v @ Value::Object(_)) => {
                    data.insert(key.to_owned(), v);
                }
                Some(_) => return Err(permanent(format!("{} has a non-object {key}", meta.key()))),
            }
        }
        Ok(Self {
            name: meta.name.clone(),
            of: meta.key(),
            data,
        })
    }

    fn apply_into(&self, namespace: &str) -> Result<(), HandlerError> {
        let mut object = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": self.name,
                "namespace": namespace,
                "labels": {REPLICA: "true"},
                "annotations": {REPLICA_OF: self.of},
            },
        });
        if let Value::Object(map) = &mut object {
            map.extend(self.data.clone());
        }
        actions::apply_json(&object, true)
    }
}

impl ConfigReplicator {
    fn is_source(&self, meta: &ObjectMeta) -> bool {
        meta.label(REPLICA) != Some("true") && self.source.matches(&meta.labels)
    }

    /// The namespace selector for a source: its annotation or the config's.
    fn selector_for(&self, source: &ObjectMeta) -> Result<Cow<'_, Selector>, String> {
        match source.annotation(REPLICATE_TO) {
            Some(text) => Selector::parse(text)
                .map(Cow::Owned)
                .map_err(|e| format!("{REPLICATE_TO} on {}: {e}", source.key())),
            None => Ok(Cow::Borrowed(&self.namespaces)),
        }
    }

    fn config_map_changed(&self, delta: &Delta) -> Result<(), HandlerError> {
        let (meta, object) = delta.parts()?;
        if meta.label(REPLICA) == Some("true") {
            return self.copy_seen(delta, meta);
        }
        let source = self.is_source(meta);
        match delta.delta_type {
            DeltaType::Deleted if source => delete_copies(meta, |_| true),
            DeltaType::Added | DeltaType::Resync if source => self.replicate(meta, object),
            DeltaType::Updated if source => self.replicate(meta, object),
            // No longer a source (labels changed): its copies go.
            DeltaType::Updated if delta.old_meta().is_some_and(|old| self.is_source(&old)) => {
                delete_copies(meta, |_| true)
            }
            _ => Ok(()),
        }
    }

    /// A copy whose source is gone (or no longer a source) is deleted. Level,
    /// not edge: a source deleted while no replica led (a leadership
    /// handover, a restart) never arrives as a delete; the next leader's
    /// replay of the copies finds the orphans.
    fn copy_seen(&self, delta: &Delta, copy: &ObjectMeta) -> Result<(), HandlerError> {
        if delta.delta_type == DeltaType::Deleted {
            return Ok(());
        }
        let Some((ns, name)) = copy
            .annotation(REPLICA_OF)
            .and_then(|of| of.split_once('/'))
        else {
            return Ok(());
        };
        let live = cache::get::<ConfigMap>(Some(ns), name)?
            .is_some_and(|source| self.is_source(&source.meta()));
        if !live {
            actions::delete(
                &ObjectRef::from_meta::<ConfigMap>(copy),
                Propagation::Background,
            )?;
            log::info(
                "orphan copy deleted",
                &[("copy", &copy.key()), ("source", &format!("{ns}/{name}"))],
            );
        }
        Ok(())
    }

    /// Applies the source into each target namespace (by name), then deletes
    /// its copies in namespaces that exist, are not terminating and are no
    /// longer targets.
    fn replicate(&self, meta: &ObjectMeta, object: &Object) -> Result<(), HandlerError> {
        let selector = self.selector_for(meta).map_err(permanent)?;
        let copy = Copy::of(meta, object)?;
        let namespaces: Vec<ObjectMeta> = cache::list::<Namespace>(None, None)?
            .iter()
            .map(Object::meta)
            .collect();
        let targets: Vec<&str> = namespaces
            .iter()
            .filter(|ns| {
                !ns.is_terminating()
                    && Some(&ns.name) != meta.namespace.as_ref()
                    && selector.matches(&ns.labels)
            })
            .map(|ns| ns.name.as_str())
            .collect();
        for ns in &targets {
            copy.apply_into(ns)?;
        }
        let stale = |ns: &str| {
            !targets.contains(&ns)
                && namespaces
                    .iter()
                    .any(|n| n.name == ns && !n.is_terminating())
        };
        delete_copies(meta, stale)?;
        let count = targets.len().to_string();
        log::debug(
            "replicated",
            &[("source", &copy.of), ("namespaces", &count)],
        );
        Ok(())
    }

    /// A live namespace appeared or changed labels: copies every source it
    /// now matches (and did not before) into it, and deletes the copies of
    /// sources it no longer matches. Initial namespaces are covered by the
    /// sources' own initial deltas.
    fn namespace_changed(&self, delta: &Delta) -> Result<(), HandlerError> {
        let (ns, _) = delta.parts()?;
        if delta.initial || ns.is_terminating() {
            return Ok(());
        }
        let old_labels = delta.old_meta().map(|m| m.labels);
        let filter = (!self.source.is_empty()).then(|| self.source.to_string());
        for source in cache::list::<ConfigMap>(None, filter.as_deref())? {
            let meta = source.meta();
            if !self.is_source(&meta) || meta.namespace.as_ref() == Some(&ns.name) {
                continue;
            }
            let selector = match self.selector_for(&meta) {
                Ok(s) => s,
                Err(e) => {
                    log::warn("source skipped", &[("source", &meta.key()), ("error", &e)]);
                    continue;
                }
            };
            let now = selector.matches(&ns.labels);
            let before = old_labels.as_ref().is_some_and(|l| selector.matches(l));
            if now && !before {
                Copy::of(&meta, &source)?.apply_into(&ns.name)?;
            } else if before && !now {
                delete_copies(&meta, |n| n == ns.name)?;
            }
        }
        Ok(())
    }
}

/// Deletes (background) every cached copy of `source` in a namespace
/// `keep` accepts, in namespace order.
fn delete_copies(source: &ObjectMeta, keep: impl Fn(&str) -> bool) -> Result<(), HandlerError> {
    let of = source.key();
    for copy in cache::list::<ConfigMap>(None, Some(&format!("{REPLICA}=true")))? {
        let meta = copy.meta();
        if meta.annotation(REPLICA_OF) == Some(of.as_str())
            && meta.namespace.as_deref().is_some_and(&keep)
        {
            actions::delete(
                &ObjectRef::from_meta::<ConfigMap>(&meta),
                Propagation::Background,
            )?;
            log::info("copy deleted", &[("copy", &meta.key()), ("source", &of)]);
        }
    }
    Ok(())
}

impl Plugin for ConfigReplicator {
    fn new(config: &str) -> Result<Self, String> {
        let config: Config = parse_config(config)?;
        Ok(Self {
            source: Selector::parse(&config.source_selector)?,
            namespaces: Selector::parse(&config.namespace_selector)?,
        })
    }

    fn registration(&self) -> Registration {
        Registration::new()
            .subscribe(
                Subscription::kind::<ConfigMap>()
                    .deltas([
                        DeltaType::Added,
                        DeltaType::Updated,
                        DeltaType::Deleted,
                        DeltaType::Resync,
                    ])
                    .fields(["/data", "/binaryData"]),
            )
            .subscribe(
                Subscription::kind::<Namespace>()
                    .deltas([DeltaType::Added, DeltaType::Updated])
                    .fields(["/metadata/labels"]),
            )
            .writes::<ConfigMap>()
    }

    fn handle(&mut self, delta: Delta) -> Result<(), HandlerError> {
        if delta.delta_type == DeltaType::Synced {
            Ok(())
        } else if delta.is::<Namespace>() {
            self.namespace_changed(&delta)
        } else if delta.is::<ConfigMap>() {
            self.config_map_changed(&delta)
        } else {
            Ok(())
        }
    }
}

kubewasm_sdk::export_plugin!(ConfigReplicator);
