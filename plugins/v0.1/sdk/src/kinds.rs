//! Naming kinds from k8s-openapi types, and delta types.

use std::fmt;

use k8s_openapi::Resource;

use crate::{DeltaType, GroupVersionKind, KindRef};

/// The [`KindRef`] of a k8s-openapi type: `kind_ref::<Pod>()`.
pub fn kind_ref<K: Resource>() -> KindRef {
    KindRef::of::<K>()
}

impl GroupVersionKind {
    /// The group/version/kind of a k8s-openapi type.
    pub fn of<K: Resource>() -> Self {
        Self {
            group: K::GROUP.to_owned(),
            version: K::VERSION.to_owned(),
            kind: K::KIND.to_owned(),
        }
    }

    /// Splits an `apiVersion` (`apps/v1`, `v1`) and pairs it with `kind`.
    pub fn from_api_version(api_version: &str, kind: &str) -> Self {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        Self {
            group: group.to_owned(),
            version: version.to_owned(),
            kind: kind.to_owned(),
        }
    }

    /// Whether this is `K`'s group and kind (any version).
    pub fn is<K: Resource>(&self) -> bool {
        self.group == K::GROUP && self.kind == K::KIND
    }

    /// The `apiVersion` string: `apps/v1`, or `v1` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

impl KindRef {
    /// The kind of a k8s-openapi type.
    pub fn of<K: Resource>() -> Self {
        Self::Gvk(GroupVersionKind::of::<K>())
    }

    /// A kind named as kubectl would (`pods`, `deployments.apps`,
    /// `widgets.v1.example.com`), resolved by the host through discovery.
    pub fn resource(name: impl Into<String>) -> Self {
        Self::ResourceName(name.into())
    }
}

impl DeltaType {
    /// Every delta type.
    pub const ALL: [Self; 5] = [
        Self::Added,
        Self::Updated,
        Self::Deleted,
        Self::Resync,
        Self::Synced,
    ];

    /// The delta types that carry an object (all but `synced`): what
    /// [`Subscription::kind`](crate::Subscription::kind) delivers by default.
    pub const OBJECT: [Self; 4] = [Self::Added, Self::Updated, Self::Deleted, Self::Resync];

    /// The WIT name: `added`, `updated`, `deleted`, `resync` or `synced`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "added",
            Self::Updated => "updated",
            Self::Deleted => "deleted",
            Self::Resync => "resync",
            Self::Synced => "synced",
        }
    }
}

impl fmt::Display for DeltaType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::Pod;

    use super::*;

    #[test]
    fn kinds_from_types() {
        let d = GroupVersionKind::of::<Deployment>();
        assert_eq!(
            (d.group.as_str(), d.version.as_str(), d.kind.as_str()),
            ("apps", "v1", "Deployment")
        );
        assert_eq!(d.api_version(), "apps/v1");
        assert!(d.is::<Deployment>() && !d.is::<Pod>());
        assert_eq!(GroupVersionKind::of::<Pod>().api_version(), "v1");
        assert_eq!(
            GroupVersionKind::from_api_version("apps/v1", "Deployment"),
            d
        );
        assert_eq!(
            GroupVersionKind::from_api_version("v1", "Pod"),
            GroupVersionKind::of::<Pod>()
        );
        assert_eq!(
            kind_ref::<Pod>(),
            KindRef::Gvk(GroupVersionKind::of::<Pod>())
        );
        assert_eq!(DeltaType::Resync.to_string(), "resync");
    }
}
