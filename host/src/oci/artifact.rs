//! The CNCF Wasm OCI artifact layout (the one `oci-wasm` and `wkg` write):
//! an OCI image manifest whose config is `application/vnd.wasm.config.v0+json`
//! and whose single layer is the `application/wasm` module. Kept here rather
//! than taken from `oci-wasm`: its 0.6 release pins oci-client 0.17 and
//! wit-component 0.253 (a second wasmparser/wit stack beside wasmtime's) and
//! returns anyhow errors; the layout itself is three media types and a small
//! config document.

use serde::{Deserialize, Serialize};

/// The manifest's media type: a plain OCI image manifest.
pub const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
/// The config blob's media type.
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// The module layer's media type.
pub const LAYER_MEDIA_TYPE: &str = "application/wasm";

/// What a pull accepts from the registry: every manifest kind, so that an
/// image or an index is named as "not a Wasm artifact" instead of "not found".
pub(crate) const ACCEPTED_MANIFESTS: &[&str] = &[
    MANIFEST_MEDIA_TYPE,
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];

/// A content descriptor (the fields we read and write).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    pub media_type: String,
    pub digest: String,
    pub size: u64,
}

/// An image manifest, as much of it as the layout needs.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub schema_version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_type: Option<String>,
    /// An index has none; a missing config is "not a Wasm artifact".
    #[serde(default)]
    pub config: Option<Descriptor>,
    #[serde(default)]
    pub layers: Vec<Descriptor>,
}

/// The config document of the layout (`oci-wasm`'s `WasmConfig`, without
/// the optional `component` world summary).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WasmConfig {
    pub created: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author: Option<String>,
    pub architecture: String,
    pub os: String,
    pub layer_digests: Vec<String>,
}

/// Reads `body` as a Wasm artifact's manifest and returns its module
/// layer; the error says what was found instead.
pub fn wasm_layer(body: &[u8]) -> Result<Descriptor, String> {
    let manifest: Manifest = serde_json::from_slice(body)
        .map_err(|e| format!("its manifest is not an OCI image manifest ({e})"))?;
    let media_type = manifest
        .media_type
        .as_deref()
        .unwrap_or(MANIFEST_MEDIA_TYPE);
    if media_type != MANIFEST_MEDIA_TYPE {
        return Err(format!(
            "its manifest is {media_type}, not {MANIFEST_MEDIA_TYPE}"
        ));
    }
    let config = manifest
        .config
        .ok_or_else(|| "its manifest has no config".to_owned())?;
    if config.media_type != CONFIG_MEDIA_TYPE {
        return Err(format!(
            "its config is {}, not {CONFIG_MEDIA_TYPE}",
            config.media_type
        ));
    }
    match manifest.layers.as_slice() {
        [layer] if layer.media_type == LAYER_MEDIA_TYPE => Ok(layer.clone()),
        layers => Err(format!(
            "it has layers [{}], not one {LAYER_MEDIA_TYPE} layer",
            layers
                .iter()
                .map(|l| l.media_type.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// The OS a module targets: `wasip2` for a component, `wasip1` for a core
/// module (the layer's version field tells them apart); `None` when the
/// bytes are no WebAssembly binary at all.
pub fn wasm_os(module: &[u8]) -> Option<&'static str> {
    match module {
        [0, b'a', b's', b'm', 1, 0, 0, 0, ..] => Some("wasip1"),
        [0, b'a', b's', b'm', _, _, 1, 0, ..] => Some("wasip2"),
        _ => None,
    }
}

/// The config blob and the manifest (both serialized: their digests are
/// over exactly these bytes) for `module` with layer digest `layer_digest`.
pub fn build(
    module_len: u64,
    layer_digest: &str,
    os: &str,
    created: String,
) -> (Vec<u8>, Manifest) {
    let config = WasmConfig {
        created,
        author: None,
        architecture: "wasm".to_owned(),
        os: os.to_owned(),
        layer_digests: vec![layer_digest.to_owned()],
    };
    // Serializing a struct of strings cannot fail.
    let config = serde_json::to_vec(&config).unwrap_or_default();
    let manifest = Manifest {
        schema_version: 2,
        media_type: Some(MANIFEST_MEDIA_TYPE.to_owned()),
        artifact_type: None,
        config: Some(Descriptor {
            media_type: CONFIG_MEDIA_TYPE.to_owned(),
            digest: super::sha256_digest(&config),
            size: config.len() as u64,
        }),
        layers: vec![Descriptor {
            media_type: LAYER_MEDIA_TYPE.to_owned(),
            digest: layer_digest.to_owned(),
            size: module_len,
        }],
    };
    (config, manifest)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_built_manifest_reads_back_as_its_layer_and_others_are_named() {
        let (_, manifest) = build(8, "sha256:ab", "wasip2", "2026-01-01T00:00:00Z".into());
        let body = serde_json::to_vec(&manifest).unwrap();
        assert_eq!(wasm_layer(&body).unwrap().digest, "sha256:ab");

        let mut image = manifest.clone();
        image.config.as_mut().unwrap().media_type =
            "application/vnd.oci.image.config.v1+json".into();
        let err = wasm_layer(&serde_json::to_vec(&image).unwrap()).unwrap_err();
        assert!(
            err.contains("application/vnd.oci.image.config.v1+json"),
            "{err}"
        );

        let mut tar = manifest.clone();
        tar.layers[0].media_type = "application/vnd.oci.image.layer.v1.tar+gzip".into();
        let err = wasm_layer(&serde_json::to_vec(&tar).unwrap()).unwrap_err();
        assert!(err.contains("tar+gzip"), "{err}");

        let index = br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}"#;
        assert!(wasm_layer(index).unwrap_err().contains("index"));
    }

    #[test]
    fn components_and_core_modules_are_told_apart() {
        assert_eq!(wasm_os(b"\0asm\x0d\0\x01\0rest"), Some("wasip2"));
        assert_eq!(wasm_os(b"\0asm\x01\0\0\0rest"), Some("wasip1"));
        assert_eq!(wasm_os(b"#!/bin/sh\n"), None);
    }
}
