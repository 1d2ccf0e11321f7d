//! Host-side bindings of every WIT version the host runs: `wit/v0.1.0` and
//! `wit/v0.2.0`. Both map the `object` resource to the same host type, so
//! one cache serves plugins of either version.

/// `kubewasm:plugin@0.1.0`: eager metadata in every delta.
pub mod v0_1 {
    wasmtime::component::bindgen!({
        path: "../wit/v0.1.0",
        world: "plugin",
        imports: { default: trappable },
        with: {
            "kubewasm:plugin/types.object": crate::object::ObjectHandle,
        },
    });
}

/// `kubewasm:plugin@0.2.0`: lazy objects, reconcile outcomes,
/// preconditions, identity and host-side selectors.
pub mod v0_2 {
    wasmtime::component::bindgen!({
        path: "../wit/v0.2.0",
        world: "plugin",
        imports: { default: trappable },
        // The delta's strings are lowered from the host's own text, not
        // from copies made per call.
        ownership: Borrowing { duplicate_if_necessary: true },
        with: {
            "kubewasm:plugin/types.object": crate::object::ObjectHandle,
            "kubewasm:plugin/selectors.label-selector": crate::informer::selector::LabelSelector,
        },
    });
}

/// The WIT package versions this host implements, oldest first.
pub const WIT_VERSIONS: [&str; 2] = ["0.1.0", "0.2.0"];
/// The interface a plugin exports, without its version.
pub const HANDLER_INTERFACE: &str = "kubewasm:plugin/handler";

/// Which contract a component was built for, from the version of its
/// handler export: any semver-compatible version of one the host implements
/// (`0.1.x`, `0.2.x`; for 0.x releases the minor version is the breaking
/// one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Contract {
    V0_1,
    V0_2,
}

impl Contract {
    /// The contract a handler export's version belongs to, if the host
    /// runs it.
    pub fn for_version(version: &str) -> Option<Self> {
        let mut parts = version.split(['.', '-', '+']);
        let (major, minor) = (parts.next()?, parts.next()?);
        let _patch: u64 = parts.next()?.parse().ok()?;
        match (major, minor) {
            ("0", "1") => Some(Self::V0_1),
            ("0", "2") => Some(Self::V0_2),
            _ => None,
        }
    }

    /// The version string the host's bindings use.
    pub fn version(self) -> &'static str {
        match self {
            Self::V0_1 => WIT_VERSIONS[0],
            Self::V0_2 => WIT_VERSIONS[1],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn semver_compatible_versions_are_accepted_and_others_refused() {
        assert_eq!(Contract::for_version("0.1.0"), Some(Contract::V0_1));
        assert_eq!(Contract::for_version("0.1.7"), Some(Contract::V0_1));
        assert_eq!(Contract::for_version("0.2.0"), Some(Contract::V0_2));
        assert_eq!(Contract::for_version("0.2.3-rc.1"), Some(Contract::V0_2));
        for refused in ["0.0.9", "0.3.0", "1.0.0", "0.1", "x", ""] {
            assert_eq!(Contract::for_version(refused), None, "{refused}");
        }
    }
}
