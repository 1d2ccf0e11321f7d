//! The CNCF Wasm OCI artifact layout (the one `oci-wasm` and `wkg` write):
//! an OCI image manifest whose config is `application/vnd.wasm.config.v0+json`
//! and whose layer is the `application/wasm` module, optionally followed by
//! kubewasm's precompiled layers ([`PRECOMPILED_MEDIA_TYPE`]): the module
//! compiled for one engine, so that a host with that engine maps it instead
//! of compiling. Kept here rather
//! than taken from `oci-wasm`: its 0.6 release pins oci-client 0.17 and
//! wit-component 0.253 (a second wasmparser/wit stack beside wasmtime's) and
//! returns anyhow errors; the layout itself is three media types and a small
//! config document.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The manifest's media type: a plain OCI image manifest.
pub const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
/// The config blob's media type.
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// The module layer's media type.
pub const LAYER_MEDIA_TYPE: &str = "application/wasm";

/// A precompiled layer's media type: a compile cache artifact (the
/// `kubewasm compile` format: a MAC header under the operator's artifact
/// key, then wasmtime's serialized component) of the module layer, for the
/// engine its [`ENGINE_KEY_ANNOTATION`] names. Native code: a host maps it
/// only once the MAC verifies under its own key.
pub const PRECOMPILED_MEDIA_TYPE: &str = "application/vnd.kubewasm.plugin.precompiled.v1";
/// A precompiled layer's annotation: the engine key (the engine
/// configuration's compatibility hash) it was compiled for; a host whose
/// engine key differs does not download the layer.
pub const ENGINE_KEY_ANNOTATION: &str = "io.kubewasm.precompiled.engine-key";
/// A precompiled layer's annotation: the digest (`sha256:...`) of the
/// module layer it was compiled from.
pub const WASM_DIGEST_ANNOTATION: &str = "io.kubewasm.precompiled.wasm-digest";
/// A precompiled layer's annotation: the id of the artifact key its MAC is
/// under (not the key: a hash of it), so that a host with another key
/// skips the download.
pub const KEY_ID_ANNOTATION: &str = "io.kubewasm.precompiled.key-id";

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
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
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

/// The layers of a Wasm artifact: its module, and the precompiled layers
/// beside it (none in artifacts other tools write).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layers {
    pub wasm: Descriptor,
    pub precompiled: Vec<Precompiled>,
}

/// A precompiled layer as its annotations describe it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Precompiled {
    pub layer: Descriptor,
    /// The engine key it was compiled for.
    pub engine_key: String,
    /// The module layer's digest it was compiled from.
    pub wasm_digest: String,
    /// The artifact key's id its MAC is under.
    pub key_id: String,
}

impl Precompiled {
    /// The layer's annotations read; the error names the missing one.
    pub fn from_layer(layer: &Descriptor) -> Result<Self, String> {
        let get = |name: &str| {
            layer
                .annotations
                .get(name)
                .cloned()
                .ok_or_else(|| format!("its precompiled layer has no {name} annotation"))
        };
        Ok(Self {
            engine_key: get(ENGINE_KEY_ANNOTATION)?,
            wasm_digest: get(WASM_DIGEST_ANNOTATION)?,
            key_id: get(KEY_ID_ANNOTATION)?,
            layer: layer.clone(),
        })
    }
}

/// Reads `body` as a Wasm artifact's manifest and returns its module
/// layer; the error says what was found instead.
pub fn wasm_layer(body: &[u8]) -> Result<Descriptor, String> {
    layers(body).map(|l| l.wasm)
}

/// Reads `body` as a Wasm artifact's manifest: one module layer, and any
/// number of precompiled layers (each with its annotations); anything
/// else is not an artifact this host runs, and the error says what was
/// found instead.
pub fn layers(body: &[u8]) -> Result<Layers, String> {
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
    let named = || {
        manifest
            .layers
            .iter()
            .map(|l| l.media_type.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (wasm, rest): (Vec<&Descriptor>, Vec<&Descriptor>) = manifest
        .layers
        .iter()
        .partition(|l| l.media_type == LAYER_MEDIA_TYPE);
    let ([wasm], true) = (
        wasm.as_slice(),
        rest.iter().all(|l| l.media_type == PRECOMPILED_MEDIA_TYPE),
    ) else {
        return Err(format!(
            "it has layers [{}], not one {LAYER_MEDIA_TYPE} layer (and optionally {PRECOMPILED_MEDIA_TYPE} layers)",
            named()
        ));
    };
    let precompiled = rest
        .into_iter()
        .map(Precompiled::from_layer)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Layers {
        wasm: (*wasm).clone(),
        precompiled,
    })
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
            annotations: BTreeMap::new(),
        }),
        layers: vec![Descriptor {
            media_type: LAYER_MEDIA_TYPE.to_owned(),
            digest: layer_digest.to_owned(),
            size: module_len,
            annotations: BTreeMap::new(),
        }],
    };
    (config, manifest)
}

/// The descriptor of a precompiled layer of `len` bytes and `digest`,
/// compiled from the module layer `wasm_digest` for `engine_key`, its MAC
/// under the key of id `key_id`.
pub fn precompiled_layer(
    len: u64,
    digest: &str,
    engine_key: &str,
    wasm_digest: &str,
    key_id: &str,
) -> Descriptor {
    Descriptor {
        media_type: PRECOMPILED_MEDIA_TYPE.to_owned(),
        digest: digest.to_owned(),
        size: len,
        annotations: BTreeMap::from([
            (ENGINE_KEY_ANNOTATION.to_owned(), engine_key.to_owned()),
            (WASM_DIGEST_ANNOTATION.to_owned(), wasm_digest.to_owned()),
            (KEY_ID_ANNOTATION.to_owned(), key_id.to_owned()),
        ]),
    }
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
    fn precompiled_layers_are_read_beside_the_module_with_their_annotations() {
        let (_, mut manifest) = build(8, "sha256:ab", "wasip2", "2026-01-01T00:00:00Z".into());
        let layer = precompiled_layer(100, "sha256:cd", "e1", "sha256:ab", "k1");
        manifest.layers.push(layer.clone());
        let body = serde_json::to_vec(&manifest).unwrap();
        // The annotations are on the wire under their documented names.
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            json["layers"][1]["annotations"][ENGINE_KEY_ANNOTATION],
            "e1"
        );
        assert_eq!(json["layers"][0].get("annotations"), None);
        let read = layers(&body).unwrap();
        assert_eq!(read.wasm.digest, "sha256:ab");
        assert_eq!(
            read.precompiled,
            [Precompiled {
                layer: layer.clone(),
                engine_key: "e1".into(),
                wasm_digest: "sha256:ab".into(),
                key_id: "k1".into(),
            }]
        );
        // What reads only the module layer still reads it.
        assert_eq!(wasm_layer(&body).unwrap().digest, "sha256:ab");

        // A precompiled layer without its annotations: named.
        let mut bare = manifest.clone();
        bare.layers[1].annotations.remove(KEY_ID_ANNOTATION);
        let err = layers(&serde_json::to_vec(&bare).unwrap()).unwrap_err();
        assert!(err.contains(KEY_ID_ANNOTATION), "{err}");
        // Precompiled layers alone, or beside another kind: refused.
        let mut alone = manifest.clone();
        alone.layers.remove(0);
        let err = layers(&serde_json::to_vec(&alone).unwrap()).unwrap_err();
        assert!(err.contains("not one application/wasm layer"), "{err}");
        let mut other = manifest.clone();
        other.layers[1].media_type = "application/octet-stream".into();
        assert!(layers(&serde_json::to_vec(&other).unwrap()).is_err());
    }

    #[test]
    fn components_and_core_modules_are_told_apart() {
        assert_eq!(wasm_os(b"\0asm\x0d\0\x01\0rest"), Some("wasip2"));
        assert_eq!(wasm_os(b"\0asm\x01\0\0\0rest"), Some("wasip1"));
        assert_eq!(wasm_os(b"#!/bin/sh\n"), None);
    }
}
