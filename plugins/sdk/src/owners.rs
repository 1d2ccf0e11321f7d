//! Owner references: finding an object's owners, and making the objects a
//! plugin creates owned by (and garbage-collected with) another.

use k8s_openapi::Resource;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference as K8sOwnerReference;
use serde_json::{Map, Value};

use crate::{GroupVersionKind, HandlerError, Object, OwnerReference, permanent};

impl OwnerReference {
    /// Whether the owner is of `K`'s group and kind (any version).
    pub fn is<K: Resource>(&self) -> bool {
        self.gvk().is::<K>()
    }

    /// The owner's group/version/kind, from its `apiVersion` and `kind`.
    pub fn gvk(&self) -> GroupVersionKind {
        GroupVersionKind::from_api_version(&self.api_version, &self.kind)
    }

    /// A controller reference (`controller: true`,
    /// `blockOwnerDeletion: true`) to the object of kind `gvk` named `name`
    /// with uid `uid`.
    pub fn controller_of(gvk: &GroupVersionKind, name: &str, uid: &str) -> Self {
        Self {
            api_version: gvk.api_version(),
            kind: gvk.kind.clone(),
            name: name.to_owned(),
            uid: uid.to_owned(),
            controller: true,
            block_owner_deletion: true,
        }
    }

    /// The JSON form of `metadata.ownerReferences` entries: `apiVersion`,
    /// `kind`, `name`, `uid`, then `controller` and `blockOwnerDeletion`
    /// only when `true`.
    pub fn to_json(&self) -> Value {
        let mut map = Map::new();
        map.insert(
            "apiVersion".to_owned(),
            Value::from(self.api_version.as_str()),
        );
        map.insert("kind".to_owned(), Value::from(self.kind.as_str()));
        map.insert("name".to_owned(), Value::from(self.name.as_str()));
        map.insert("uid".to_owned(), Value::from(self.uid.as_str()));
        if self.controller {
            map.insert("controller".to_owned(), Value::Bool(true));
        }
        if self.block_owner_deletion {
            map.insert("blockOwnerDeletion".to_owned(), Value::Bool(true));
        }
        Value::Object(map)
    }
}

impl From<OwnerReference> for K8sOwnerReference {
    /// For typed (k8s-openapi) objects:
    /// `meta.owner_references = Some(vec![controller_ref(&obj).into()])`.
    fn from(o: OwnerReference) -> Self {
        Self {
            api_version: o.api_version,
            kind: o.kind,
            name: o.name,
            uid: o.uid,
            controller: o.controller.then_some(true),
            block_owner_deletion: o.block_owner_deletion.then_some(true),
        }
    }
}

impl From<K8sOwnerReference> for OwnerReference {
    fn from(o: K8sOwnerReference) -> Self {
        Self {
            api_version: o.api_version,
            kind: o.kind,
            name: o.name,
            uid: o.uid,
            controller: o.controller.unwrap_or(false),
            block_owner_deletion: o.block_owner_deletion.unwrap_or(false),
        }
    }
}

/// The first owner reference of `object` (in `metadata.ownerReferences`
/// order) of `K`'s group and kind, any version: `find_owner::<ReplicaSet>(&pod)`.
/// One host call.
pub fn find_owner<K: Resource>(object: &Object) -> Option<OwnerReference> {
    object
        .owner_references()
        .into_iter()
        .find(OwnerReference::is::<K>)
}

/// The owner reference of `object` marked `controller: true`, if any (one
/// host call).
pub fn controller_owner(object: &Object) -> Option<OwnerReference> {
    object.controller()
}

/// A controller reference to `object` (its apiVersion, kind, name and uid;
/// `controller` and `blockOwnerDeletion` true), to embed in what the plugin
/// creates so that it is garbage-collected with `object`. Three host calls.
pub fn controller_ref(object: &Object) -> OwnerReference {
    OwnerReference::controller_of(&object.kind(), &object.name(), &object.uid())
}

/// Makes `owner` the controller of the JSON object `dependent` (what you
/// then pass to [`actions::apply_json`](crate::actions::apply_json)):
/// [`set_owner_reference`] with [`controller_ref`]`(owner)`.
pub fn set_controller_reference(dependent: &mut Value, owner: &Object) -> Result<(), HandlerError> {
    set_owner_reference(dependent, &controller_ref(owner))
}

/// Adds `reference` to `dependent`'s `metadata.ownerReferences` (creating
/// `metadata` and the list as needed), replacing an entry for the same
/// owner (same uid, or same group, kind and name). A permanent error when
/// `dependent` is not a JSON object, its metadata or list is malformed, or
/// `reference` is a controller and another owner already is (an object has
/// at most one controller).
pub fn set_owner_reference(
    dependent: &mut Value,
    reference: &OwnerReference,
) -> Result<(), HandlerError> {
    let Value::Object(root) = dependent else {
        return Err(permanent(
            "owner reference: the dependent is not a JSON object",
        ));
    };
    let Value::Object(meta) = root
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()))
    else {
        return Err(permanent("owner reference: metadata is not a JSON object"));
    };
    let list = meta
        .entry("ownerReferences")
        .or_insert_with(|| Value::Array(Vec::new()));
    if list.is_null() {
        *list = Value::Array(Vec::new());
    }
    let Value::Array(list) = list else {
        return Err(permanent(
            "owner reference: metadata.ownerReferences is not a list",
        ));
    };
    let gvk = reference.gvk();
    let same = |entry: &Value| {
        let field = |k: &str| entry.get(k).and_then(Value::as_str).unwrap_or("");
        field("uid") == reference.uid
            || (GroupVersionKind::from_api_version(field("apiVersion"), field("kind")).group
                == gvk.group
                && field("kind") == reference.kind
                && field("name") == reference.name)
    };
    if reference.controller
        && let Some(other) = list
            .iter()
            .find(|e| e.get("controller").and_then(Value::as_bool) == Some(true) && !same(e))
    {
        let field = |k: &str| other.get(k).and_then(Value::as_str).unwrap_or("");
        return Err(permanent(format!(
            "owner reference: already controlled by {} {}",
            field("kind"),
            field("name")
        )));
    }
    let entry = reference.to_json();
    match list.iter_mut().find(|e| same(e)) {
        Some(existing) => *existing = entry,
        None => list.push(entry),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
    use serde_json::json;

    use super::*;

    fn deployment_ref(uid: &str) -> OwnerReference {
        OwnerReference::controller_of(&GroupVersionKind::of::<Deployment>(), "web", uid)
    }

    #[test]
    fn references() {
        let r = deployment_ref("d-1");
        assert_eq!(
            r.to_json(),
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "d-1", "controller": true, "blockOwnerDeletion": true})
        );
        assert!(r.is::<Deployment>() && !r.is::<ReplicaSet>());
        let k: K8sOwnerReference = r.clone().into();
        assert_eq!(k.controller, Some(true));
        assert_eq!(OwnerReference::from(k), r);
        let plain = &crate::meta::tests::owners()[0];
        assert_eq!(
            plain.to_json(),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "c"})
        );
    }

    #[test]
    fn setting_the_controller() {
        let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap"});
        set_owner_reference(&mut cm, &deployment_ref("d-1")).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(
            cm["metadata"]["ownerReferences"],
            json!([deployment_ref("d-1").to_json()])
        );
        // Same owner again (new uid: recreated): replaced, not added.
        set_owner_reference(&mut cm, &deployment_ref("d-2")).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(
            cm["metadata"]["ownerReferences"],
            json!([deployment_ref("d-2").to_json()])
        );
        // A plain owner is added beside it.
        let plain = &crate::meta::tests::owners()[0];
        set_owner_reference(&mut cm, plain).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(
            cm["metadata"]["ownerReferences"].as_array().map(Vec::len),
            Some(2)
        );
        // Another controller is refused.
        let other = OwnerReference::controller_of(&GroupVersionKind::of::<ReplicaSet>(), "rs", "r");
        let err = set_owner_reference(&mut cm, &other)
            .err()
            .map(|e| e.message().to_owned());
        assert_eq!(
            err.as_deref(),
            Some("owner reference: already controlled by Deployment web")
        );
        assert!(set_owner_reference(&mut json!([]), &other).is_err());
        assert!(set_owner_reference(&mut json!({"metadata": 1}), &other).is_err());
        let mut null_list = json!({"metadata": {"ownerReferences": null}});
        assert!(set_owner_reference(&mut null_list, &other).is_ok());
    }
}
