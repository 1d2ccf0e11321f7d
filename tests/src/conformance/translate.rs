//! One case's map between the simulation's names and the real server's.
//! Namespaces: every namespace the case names gets the case's suffix on
//! the server (cases share one API server, whose namespaces never finish
//! deleting without a controller manager). Uids: the server makes its own,
//! so each simulated uid stands for the server's uid of the same object.
//! ResourceVersions: per object, each simulated resourceVersion seen
//! beside the server's at the same point of the case; a resourceVersion
//! the case made up (a stale "1") is left as it is, stale on both sides.

use std::collections::{BTreeSet, HashMap};

use serde_json::Value;

/// An object's identity across both worlds: its kind (`apiVersion/kind`),
/// namespace (simulated name) and name.
pub type ObjectId = (String, Option<String>, String);

/// The identity of `object` as the simulation names it.
pub fn id_of(object: &Value) -> Option<ObjectId> {
    let kind = format!(
        "{}/{}",
        object["apiVersion"].as_str()?,
        object["kind"].as_str()?
    );
    let meta = &object["metadata"];
    Some((
        kind,
        meta["namespace"].as_str().map(str::to_owned),
        meta["name"].as_str()?.to_owned(),
    ))
}

#[derive(Debug, Default)]
pub struct Translation {
    suffix: String,
    namespaces: BTreeSet<String>,
    /// Simulated uid -> the server's.
    uids: HashMap<String, String>,
    /// Per object: (simulated, server) resourceVersions, newest last.
    versions: HashMap<ObjectId, Vec<(String, String)>>,
}

impl Translation {
    /// A map whose namespaces get `suffix` (`-c3`) on the server.
    pub fn new(suffix: impl Into<String>) -> Self {
        Self {
            suffix: suffix.into(),
            ..Self::default()
        }
    }

    /// Learns the namespaces `object` names (its own, or its name for a
    /// Namespace).
    pub fn learn_namespaces(&mut self, object: &Value) {
        if let Some(ns) = object["metadata"]["namespace"].as_str() {
            self.namespaces.insert(ns.to_owned());
        }
        if object["kind"] == "Namespace"
            && object["apiVersion"] == "v1"
            && let Some(name) = object["metadata"]["name"].as_str()
        {
            self.namespaces.insert(name.to_owned());
        }
    }

    /// The server's name of namespace `ns`.
    pub fn namespace(&self, ns: &str) -> String {
        if self.namespaces.contains(ns) {
            format!("{ns}{}", self.suffix)
        } else {
            ns.to_owned()
        }
    }

    /// The simulation's name of the server's namespace `ns`.
    pub fn namespace_back(&self, ns: &str) -> String {
        match ns.strip_suffix(&self.suffix) {
            Some(base) if self.namespaces.contains(base) => base.to_owned(),
            _ => ns.to_owned(),
        }
    }

    /// Records that the simulated object `sim` is the server's `real` (both
    /// as read at the same point of the case): their uids and
    /// resourceVersions stand for each other from now on.
    pub fn pair(&mut self, sim: &Value, real: &Value) {
        let text = |v: &Value, k: &str| v["metadata"][k].as_str().map(str::to_owned);
        if let (Some(s), Some(r)) = (text(sim, "uid"), text(real, "uid")) {
            self.uids.insert(s, r);
        }
        if let (Some(id), Some(s), Some(r)) = (
            id_of(sim),
            text(sim, "resourceVersion"),
            text(real, "resourceVersion"),
        ) {
            let seen = self.versions.entry(id).or_default();
            if seen.last() != Some(&(s.clone(), r.clone())) {
                seen.push((s, r));
            }
        }
    }

    /// The server's uid for a simulated one (itself when unknown: a uid
    /// the case made up matches nothing on either side).
    pub fn uid(&self, uid: &str) -> String {
        self.uids
            .get(uid)
            .cloned()
            .unwrap_or_else(|| uid.to_owned())
    }

    /// The simulated uid for one of the server's (itself when unknown).
    pub fn uid_back(&self, uid: &str) -> String {
        self.uids
            .iter()
            .find(|(_, r)| *r == uid)
            .map_or_else(|| uid.to_owned(), |(s, _)| s.clone())
    }

    /// The server's resourceVersion of object `id` for the simulated `rv`.
    pub fn resource_version(&self, id: &ObjectId, rv: &str) -> String {
        self.versions
            .get(id)
            .and_then(|seen| seen.iter().rev().find(|(s, _)| s == rv))
            .map_or_else(|| rv.to_owned(), |(_, r)| r.clone())
    }

    /// `object` (a body the simulation saw: a delta's object, an applied
    /// object, a merge patch with `target`'s identity) as the server must
    /// get it: namespaces suffixed, uids and resourceVersions mapped, also
    /// in owner references.
    pub fn object(&self, object: &Value, target: Option<&ObjectId>) -> Value {
        let mut out = object.clone();
        let id = id_of(object).or_else(|| target.cloned());
        if let Some(meta) = out.get_mut("metadata").and_then(Value::as_object_mut) {
            if let Some(ns) = meta.get("namespace").and_then(Value::as_str) {
                let ns = self.namespace(ns);
                meta.insert("namespace".into(), Value::from(ns));
            }
            if object["kind"] == "Namespace"
                && let Some(name) = meta.get("name").and_then(Value::as_str)
            {
                let name = self.namespace(name);
                meta.insert("name".into(), Value::from(name));
            }
            if let Some(uid) = meta.get("uid").and_then(Value::as_str) {
                let uid = self.uid(uid);
                meta.insert("uid".into(), Value::from(uid));
            }
            if let (Some(rv), Some(id)) = (meta.get("resourceVersion").and_then(Value::as_str), &id)
            {
                let rv = self.resource_version(id, rv);
                meta.insert("resourceVersion".into(), Value::from(rv));
            }
            if let Some(owners) = meta
                .get_mut("ownerReferences")
                .and_then(Value::as_array_mut)
            {
                for owner in owners {
                    if let Some(uid) = owner["uid"].as_str() {
                        owner["uid"] = Value::from(self.uid(uid));
                    }
                }
            }
        }
        out
    }

    /// A JSON patch (RFC 6902) on `target` as the server must get it: the
    /// values its operations test or set at `/metadata/uid`,
    /// `/metadata/resourceVersion` and `/metadata/namespace` mapped.
    pub fn json_patch(&self, patch: &Value, target: &ObjectId) -> Value {
        let mut out = patch.clone();
        for op in out.as_array_mut().into_iter().flatten() {
            let path = op["path"].as_str().unwrap_or_default().to_owned();
            let Some(value) = op.get("value").and_then(Value::as_str).map(str::to_owned) else {
                continue;
            };
            let mapped = match path.as_str() {
                "/metadata/uid" => self.uid(&value),
                "/metadata/resourceVersion" => self.resource_version(target, &value),
                "/metadata/namespace" => self.namespace(&value),
                _ => continue,
            };
            op["value"] = Value::from(mapped);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn cm(ns: &str, uid: &str, rv: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "x", "namespace": ns, "uid": uid, "resourceVersion": rv}})
    }

    #[test]
    fn namespaces_uids_and_versions_map_both_ways() {
        let mut t = Translation::new("-c1");
        t.learn_namespaces(
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "demo"}}),
        );
        t.pair(
            &cm("demo", "sim-uid", "5"),
            &cm("demo-c1", "real-uid", "7001"),
        );
        t.pair(
            &cm("demo", "sim-uid", "6"),
            &cm("demo-c1", "real-uid", "7009"),
        );
        assert_eq!(t.namespace("demo"), "demo-c1");
        assert_eq!(t.namespace("kube-system"), "kube-system");
        assert_eq!(t.namespace_back("demo-c1"), "demo");
        let out = t.object(&cm("demo", "sim-uid", "5"), None);
        assert_eq!(out, cm("demo-c1", "real-uid", "7001"));
        // A made-up resourceVersion and uid stay as they are: stale, or
        // unknown, on both sides.
        assert_eq!(
            t.object(&cm("demo", "other", "1"), None),
            cm("demo-c1", "other", "1")
        );
        let id = id_of(&cm("demo", "", "")).unwrap();
        let patch = json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": "6"},
            {"op": "test", "path": "/metadata/uid", "value": "sim-uid"},
            {"op": "replace", "path": "/data/a", "value": "6"},
        ]);
        assert_eq!(
            t.json_patch(&patch, &id),
            json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": "7009"},
                {"op": "test", "path": "/metadata/uid", "value": "real-uid"},
                {"op": "replace", "path": "/data/a", "value": "6"},
            ])
        );
    }

    #[test]
    fn owner_references_and_namespace_objects_are_mapped() {
        let mut t = Translation::new("-c2");
        t.learn_namespaces(&json!({"metadata": {"namespace": "team"}}));
        t.pair(
            &cm("team", "owner-sim", "1"),
            &cm("team-c2", "owner-real", "9"),
        );
        let child = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "team",
                         "ownerReferences": [{"uid": "owner-sim", "name": "x"}]}});
        let out = t.object(&child, None);
        assert_eq!(out["metadata"]["ownerReferences"][0]["uid"], "owner-real");
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}});
        assert_eq!(t.object(&ns, None)["metadata"]["name"], "team-c2");
    }
}
