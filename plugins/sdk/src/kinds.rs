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

/// A group/version/kind spelled with static strings, so that it can be a
/// `const` (a [`GroupVersionKind`] owns its strings). Convert it where a
/// kind is needed: `KindRef::from(EVENT)`, `EVENT.kind_ref()`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StaticKind {
    /// The API group; `""` for the core group.
    pub group: &'static str,
    /// The version (`v1`).
    pub version: &'static str,
    /// The kind (`Event`).
    pub kind: &'static str,
}

/// events.k8s.io/v1 Event, the kind [`actions::event`](crate::actions::event)
/// records (recording needs no `writes` declaration; reading Events back
/// needs a subscription, e.g. `Subscription::to(EVENT.into())`).
pub const EVENT: StaticKind = StaticKind {
    group: "events.k8s.io",
    version: "v1",
    kind: "Event",
};

impl StaticKind {
    /// The owned [`GroupVersionKind`].
    pub fn gvk(self) -> GroupVersionKind {
        GroupVersionKind {
            group: self.group.to_owned(),
            version: self.version.to_owned(),
            kind: self.kind.to_owned(),
        }
    }

    /// The [`KindRef`] (`KindRef::Gvk`).
    pub fn kind_ref(self) -> KindRef {
        KindRef::Gvk(self.gvk())
    }

    /// Whether `gvk` is this group and kind (any version).
    pub fn matches(self, gvk: &GroupVersionKind) -> bool {
        gvk.group == self.group && gvk.kind == self.kind
    }
}

impl From<StaticKind> for GroupVersionKind {
    fn from(kind: StaticKind) -> Self {
        kind.gvk()
    }
}

impl From<StaticKind> for KindRef {
    fn from(kind: StaticKind) -> Self {
        kind.kind_ref()
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
    /// Every delta type, `requeue` included.
    pub const ALL: [Self; 6] = [
        Self::Added,
        Self::Updated,
        Self::Deleted,
        Self::Resync,
        Self::Synced,
        Self::Requeue,
    ];

    /// Every delta type a subscription lists: all but `requeue`, which
    /// comes whenever the handler asks for it (`Handled::RequeueAfter`),
    /// whatever the subscription says.
    pub const SUBSCRIBABLE: [Self; 5] = [
        Self::Added,
        Self::Updated,
        Self::Deleted,
        Self::Resync,
        Self::Synced,
    ];

    /// The object delta types a subscription lists (added, updated,
    /// deleted, resync): what
    /// [`Subscription::kind`](crate::Subscription::kind) delivers by default.
    pub const OBJECT: [Self; 4] = [Self::Added, Self::Updated, Self::Deleted, Self::Resync];

    /// The WIT name: `added`, `updated`, `deleted`, `resync`, `synced` or
    /// `requeue`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "added",
            Self::Updated => "updated",
            Self::Deleted => "deleted",
            Self::Resync => "resync",
            Self::Synced => "synced",
            Self::Requeue => "requeue",
        }
    }

    /// Whether a delta of this type carries an object (all but `synced`).
    pub fn has_object(self) -> bool {
        self != Self::Synced
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
        assert_eq!(DeltaType::Requeue.as_str(), "requeue");
        assert!(!DeltaType::SUBSCRIBABLE.contains(&DeltaType::Requeue));
        assert!(!DeltaType::Synced.has_object() && DeltaType::Requeue.has_object());
        let event = KindRef::from(EVENT);
        assert_eq!(event, KindRef::of::<k8s_openapi::api::events::v1::Event>());
        assert!(EVENT.matches(&GroupVersionKind::of::<k8s_openapi::api::events::v1::Event>()));
        assert!(!EVENT.matches(&GroupVersionKind::from_api_version("v1", "Event")));
    }
}
