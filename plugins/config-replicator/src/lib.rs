//! config-replicator: copies source ConfigMaps (matching a label selector)
//! into every namespace matching another selector, keeps the copies in step
//! with their source, and deletes them when the source goes.
//! See README.md for the config and the exact actions.

use kubewasm_sdk::prelude::*;
use kubewasm_sdk::serde_json::{Map, Value, json};
use serde::Deserialize;

/// Label on every copy; objects carrying it are never replicated.
const REPLICA: &str = "kubewasm.io/replica";
/// Annotation on every copy: `<namespace>/<name>` of its source.
const REPLICA_OF: &str = "kubewasm.io/replica-of";
/// Annotation on every copy: the name of the plugin that made it. A
/// replicator deletes only its own copies, so replicators with different
/// selectors share a cluster.
const REPLICATED_BY: &str = "kubewasm.io/replicated-by";
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
    /// This plugin's name (from its context), recorded on its copies.
    me: String,
    source: LabelSelector,
    /// `source`'s canonical text, the filter of the cache lists of sources
    /// (`None` for the empty selector).
    source_filter: Option<String>,
    namespaces: LabelSelector,
}

/// Subscription indexes, in registration order.
const CONFIG_MAPS: u32 = 0;
const NAMESPACES: u32 = 1;

/// What a copy is made of: the source's name, key, data and binaryData,
/// and the replicator that makes it.
struct Copy<'a> {
    name: String,
    of: String,
    by: &'a str,
    data: Map<String, Value>,
}

impl<'a> Copy<'a> {
    /// `by`'s copy of `source`, named `name`, whose key is `key`.
    fn of(name: String, key: String, by: &'a str, source: &Object) -> Result<Self, HandlerError> {
        let mut data = Map::new();
        for (field, pointer) in [("binaryData", "/binaryData"), ("data", "/data")] {
            match source.field_json(pointer)? {
                None | Some(Value::Null) => {}
                Some(v @ Value::Object(_)) => {
                    data.insert(field.to_owned(), v);
                }
                Some(_) => return Err(permanent(format!("{key} has a non-object {field}"))),
            }
        }
        Ok(Self {
            name,
            of: key,
            by,
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
                "annotations": {REPLICA_OF: self.of, REPLICATED_BY: self.by},
            },
        });
        if let Value::Object(map) = &mut object {
            map.extend(self.data.clone());
        }
        actions::apply_json(&object, true, &Preconditions::none())
    }
}

fn is_replica(object: &Object) -> bool {
    object.label(REPLICA).as_deref() == Some("true")
}

impl ConfigReplicator {
    /// A copy this replicator made (another replicator's, or one made
    /// before copies were marked, is left alone).
    fn is_mine(&self, copy: &Object) -> bool {
        copy.annotation(REPLICATED_BY).as_deref() == Some(self.me.as_str())
    }

    fn is_source(&self, object: &Object) -> bool {
        !is_replica(object) && self.source.matches_object(object)
    }

    /// The namespace selector a source names in its annotation, parsed
    /// (`None`: it names none, the config's applies).
    fn own_selector(source: &Object) -> Result<Option<LabelSelector>, String> {
        source
            .annotation(REPLICATE_TO)
            .map(|text| {
                LabelSelector::parse(&text)
                    .map_err(|e| format!("{REPLICATE_TO} on {}: {e}", source.key()))
            })
            .transpose()
    }

    fn config_map_changed(&self, delta: &Delta) -> Result<(), HandlerError> {
        let object = delta.object()?;
        if is_replica(object) {
            return self.copy_seen(delta, object);
        }
        let source = self.is_source(object);
        match delta.delta_type {
            DeltaType::Deleted if source => self.delete_copies(&delta.key(), |_| true),
            DeltaType::Added | DeltaType::Resync if source => self.replicate(delta, object),
            DeltaType::Updated if source => self.replicate(delta, object),
            // No longer a source (labels changed): its copies go.
            DeltaType::Updated
                if delta
                    .old_object
                    .as_ref()
                    .is_some_and(|old| self.is_source(old)) =>
            {
                self.delete_copies(&delta.key(), |_| true)
            }
            _ => Ok(()),
        }
    }

    /// A copy of ours whose source is gone (or no longer a source) is
    /// deleted. Level, not edge: a source deleted while no replica led (a
    /// leadership handover, a restart) never arrives as a delete; the next
    /// leader's replay of the copies finds the orphans.
    fn copy_seen(&self, delta: &Delta, copy: &Object) -> Result<(), HandlerError> {
        if delta.delta_type == DeltaType::Deleted || !self.is_mine(copy) {
            return Ok(());
        }
        let Some(of) = copy.annotation(REPLICA_OF) else {
            return Ok(());
        };
        let Some((ns, name)) = of.split_once('/') else {
            return Ok(());
        };
        let live =
            cache::get::<ConfigMap>(Some(ns), name)?.is_some_and(|source| self.is_source(&source));
        if !live {
            actions::delete(
                &ObjectRef::for_delta::<ConfigMap>(delta),
                Propagation::Background,
                &Preconditions::uid(&delta.uid),
            )?;
            log::info(
                "orphan copy deleted",
                &[("copy", &delta.key()), ("source", &format!("{ns}/{name}"))],
            );
        }
        Ok(())
    }

    /// Applies the source into each target namespace (by name), then deletes
    /// its copies in namespaces that exist, are not terminating and are no
    /// longer targets.
    fn replicate(&self, delta: &Delta, object: &Object) -> Result<(), HandlerError> {
        let own = Self::own_selector(object).map_err(permanent)?;
        let selector = own.as_ref().unwrap_or(&self.namespaces);
        let copy = Copy::of(delta.name.clone(), delta.key(), &self.me, object)?;
        // The live (not terminating) namespaces, by name, and whether each
        // matches the source's selector.
        let live: Vec<(String, bool)> = cache::list::<Namespace>(None, None)?
            .iter()
            .filter(|ns| !ns.is_terminating())
            .map(|ns| (ns.name(), selector.matches_object(ns)))
            .collect();
        let targets: Vec<&str> = live
            .iter()
            .filter(|(name, matches)| *matches && Some(name) != delta.namespace.as_ref())
            .map(|(name, _)| name.as_str())
            .collect();
        for ns in &targets {
            copy.apply_into(ns)?;
        }
        let stale = |ns: &str| !targets.contains(&ns) && live.iter().any(|(name, _)| name == ns);
        self.delete_copies(&copy.of, stale)?;
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
        let ns = delta.object()?;
        if delta.initial || ns.is_terminating() {
            return Ok(());
        }
        let name = &delta.name;
        for source in cache::list::<ConfigMap>(None, self.source_filter.as_deref())? {
            if !self.is_source(&source) || source.namespace().as_ref() == Some(name) {
                continue;
            }
            let own = match Self::own_selector(&source) {
                Ok(s) => s,
                Err(e) => {
                    log::warn(
                        "source skipped",
                        &[("source", &source.key()), ("error", &e)],
                    );
                    continue;
                }
            };
            let selector = own.as_ref().unwrap_or(&self.namespaces);
            let now = selector.matches_object(ns);
            let before = delta
                .old_object
                .as_ref()
                .is_some_and(|old| selector.matches_object(old));
            if now && !before {
                Copy::of(source.name(), source.key(), &self.me, &source)?.apply_into(name)?;
            } else if before && !now {
                self.delete_copies(&source.key(), |n| n == name)?;
            }
        }
        Ok(())
    }

    /// Deletes (background) every cached copy of ours of the source whose
    /// key is `of` in a namespace `keep` accepts, in namespace order.
    fn delete_copies(&self, of: &str, keep: impl Fn(&str) -> bool) -> Result<(), HandlerError> {
        for copy in cache::list::<ConfigMap>(None, Some(&format!("{REPLICA}=true")))? {
            if copy.annotation(REPLICA_OF).as_deref() == Some(of)
                && self.is_mine(&copy)
                && copy.namespace().as_deref().is_some_and(&keep)
            {
                actions::delete(
                    &ObjectRef::for_object::<ConfigMap>(&copy),
                    Propagation::Background,
                    &Preconditions::uid(copy.uid()),
                )?;
                log::info("copy deleted", &[("copy", &copy.key()), ("source", of)]);
            }
        }
        Ok(())
    }
}

impl Plugin for ConfigReplicator {
    fn new(ctx: &Context) -> Result<Self, String> {
        let config: Config = ctx.parse_config()?;
        let source = LabelSelector::parse(&config.source_selector)
            .map_err(|e| format!("invalid config: sourceSelector: {e}"))?;
        let namespaces = LabelSelector::parse(&config.namespace_selector)
            .map_err(|e| format!("invalid config: namespaceSelector: {e}"))?;
        let text = source.to_string();
        Ok(Self {
            me: ctx.name.clone(),
            source,
            source_filter: (!text.is_empty()).then_some(text),
            namespaces,
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

    fn handle(&mut self, delta: Delta) -> Result<Handled, HandlerError> {
        match (delta.delta_type, delta.subscription) {
            (DeltaType::Synced, _) => {}
            (_, NAMESPACES) => self.namespace_changed(&delta)?,
            (_, CONFIG_MAPS) => self.config_map_changed(&delta)?,
            _ => {}
        }
        Ok(Done)
    }
}

kubewasm_sdk::export_plugin!(ConfigReplicator);

/// Native unit tests through the SDK's fake host (`cargo test -p
/// config-replicator`): no WebAssembly, no host.
#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use kubewasm_sdk::fake::{Action, FakeHost};
    use kubewasm_sdk::serde_json::{Value, json};

    use super::*;

    fn namespace(name: &str, labels: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})
    }

    fn source() -> Value {
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "settings", "namespace": "default", "labels": {"kubewasm.io/replicate": "true"}},
            "data": {"color": "blue"},
        })
    }

    fn load(host: &FakeHost) -> ConfigReplicator {
        host.put(namespace("default", json!({})))
            .put(namespace("team-a", json!({"team": "a"})))
            .put(namespace("team-b", json!({"team": "b"})));
        host.load("replicator", r#"{"namespaceSelector": "team"}"#)
            .unwrap()
    }

    #[test]
    fn a_source_is_copied_into_each_matching_namespace() {
        let host = FakeHost::new();
        let mut plugin = load(&host);
        let delta = host.added(source());
        assert_eq!(delta.subscription, CONFIG_MAPS);
        assert_eq!(host.handle(&mut plugin, delta), Ok(Done));
        let actions = host.take_actions();
        assert_eq!(
            actions.iter().map(ToString::to_string).collect::<Vec<_>>(),
            [
                "apply ConfigMap team-a/settings force",
                "apply ConfigMap team-b/settings force"
            ]
        );
        let Action::Apply { object, .. } = &actions[0] else {
            panic!("{actions:?}");
        };
        assert_eq!(
            object,
            &json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {
                    "name": "settings", "namespace": "team-a",
                    "labels": {"kubewasm.io/replica": "true"},
                    "annotations": {
                        "kubewasm.io/replica-of": "default/settings",
                        "kubewasm.io/replicated-by": "replicator",
                    },
                },
                "data": {"color": "blue"},
            })
        );
        assert_eq!(host.live_handles(), 0);
    }

    #[test]
    fn a_copy_whose_source_is_gone_is_deleted() {
        let host = FakeHost::new();
        let mut plugin = load(&host);
        let copy = |ns: &str, by: &str| {
            json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {
                    "name": "settings", "namespace": ns,
                    "labels": {"kubewasm.io/replica": "true"},
                    "annotations": {"kubewasm.io/replica-of": "default/settings", "kubewasm.io/replicated-by": by},
                },
            })
        };
        host.put(source()).put(copy("team-b", "replicator"));
        // The source goes: each of this replicator's copies is deleted,
        // guarded by its uid.
        let delta = host.deleted(source());
        assert_eq!(host.handle(&mut plugin, delta), Ok(Done));
        assert_eq!(
            host.take_action_lines(),
            ["delete ConfigMap team-b/settings background uid=uid-team-b-settings"]
        );
        // A copy seen later (a resync) with its source gone is an orphan;
        // another replicator's copy is left alone.
        let delta = host.resync(copy("team-a", "replicator"));
        assert_eq!(host.handle(&mut plugin, delta), Ok(Done));
        let delta = host.resync(copy("team-c", "someone-else"));
        assert_eq!(host.handle(&mut plugin, delta), Ok(Done));
        assert_eq!(
            host.take_action_lines(),
            ["delete ConfigMap team-a/settings background uid=uid-team-a-settings"]
        );
        assert_eq!(
            host.logs().last().unwrap().to_string(),
            "info orphan copy deleted copy=team-a/settings source=default/settings"
        );
    }
}
