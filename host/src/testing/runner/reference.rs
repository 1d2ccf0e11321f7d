//! `KIND [NAMESPACE/]NAME`, as kubectl names an object.

use crate::kind::{KindRef, KindRegistry};
use crate::object::ObjectKey;
use crate::testing::cluster::Id;

/// `KIND [NAMESPACE/]NAME` as an id.
pub fn parse_ref(kinds: &KindRegistry, text: &str) -> Result<Id, String> {
    let usage = || {
        format!(
            "{text:?} is not a reference: write `KIND NAMESPACE/NAME` (`configmaps team-a/settings`) or `KIND NAME` for cluster-scoped objects"
        )
    };
    let (kind, name) = text.trim().split_once(' ').ok_or_else(usage)?;
    let info = kinds
        .resolve(&KindRef::Resource(kind.to_owned()))
        .map_err(|e| format!("{text:?}: {e}"))?;
    let (ns, name) = match name.trim().split_once('/') {
        Some((ns, name)) => (Some(ns), name),
        None => (None, name.trim()),
    };
    match (info.namespaced, ns) {
        (true, None) => Err(format!(
            "{text:?}: {} is namespaced: write {kind} NAMESPACE/{name}",
            info.resource_name()
        )),
        (false, Some(_)) => Err(format!(
            "{text:?}: {} is cluster-scoped: drop the namespace",
            info.resource_name()
        )),
        _ => Ok((info.gvk, ObjectKey::new(ns, name))),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::kind::Gvk;

    #[test]
    fn references_name_a_kind_and_an_object_as_kubectl_would() {
        let kinds = KindRegistry::builtin();
        let (gvk, key) = parse_ref(&kinds, "configmaps team-a/settings").unwrap();
        assert_eq!(gvk, Gvk::new("", "v1", "ConfigMap"));
        assert_eq!(key, ObjectKey::new(Some("team-a"), "settings"));
        assert_eq!(
            parse_ref(&kinds, "ConfigMap team-a/settings").unwrap().0,
            gvk
        );
        let (gvk, key) = parse_ref(&kinds, "deployments.apps shop/web").unwrap();
        assert_eq!(gvk, Gvk::new("apps", "v1", "Deployment"));
        assert_eq!(key.to_string(), "shop/web");
        assert_eq!(
            parse_ref(&kinds, "namespaces team-a").unwrap().1,
            ObjectKey::new(None, "team-a")
        );
        for (text, says) in [
            ("configmaps settings", "is namespaced"),
            ("namespaces a/b", "is cluster-scoped"),
            ("settings", "is not a reference"),
            ("widgets a/b", "widgets"),
        ] {
            let e = parse_ref(&kinds, text).unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
        }
    }
}
