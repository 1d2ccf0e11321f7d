//! Host-side bindings generated from `wit/v0.1.0`.

wasmtime::component::bindgen!({
    path: "../wit/v0.1.0",
    world: "plugin",
    imports: { default: trappable },
    with: {
        "kubewasm:plugin/types.object": crate::object::ObjectHandle,
    },
});

/// The WIT package version this host implements.
pub const WIT_VERSION: &str = "0.1.0";
/// The export a plugin must provide.
pub const HANDLER_EXPORT: &str = "kubewasm:plugin/handler@0.1.0";
