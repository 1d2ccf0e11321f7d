//! Where cosign keeps a module's signatures: the `sha256-<hex>.sig`
//! manifest in the module's repository (read to verify a pull, appended to
//! by [`OciClient::push_signature`]), and the digest cache's record of the
//! signature that verified a module, so that a host restarting while the
//! registry is down still serves only verified modules: the record is
//! verified again against the keys configured now, on every cached pull.

use std::collections::BTreeMap;

use futures::StreamExt;
use serde::{Deserialize, Serialize};

use super::signature::{
    self, MAX_PAYLOAD_BYTES, PublicKey, SIGNATURE_ANNOTATION, SIMPLE_SIGNING_MEDIA_TYPE, Signature,
    SignatureError, SigningKey, Verified,
};
use super::{
    Credentials, Error, OciClient, Pulled, Reference, Result, artifact, cache, sha256_digest,
    transport,
};

/// The config media type of cosign's signature images.
const SIG_CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.image.config.v1+json";

/// Manifest kinds a `.sig` may be stored as (older cosign wrote Docker v2).
const SIG_MANIFESTS: &[&str] = &[
    artifact::MANIFEST_MEDIA_TYPE,
    "application/vnd.docker.distribution.manifest.v2+json",
];

/// A signature manifest, as much as is read and written. Annotations are
/// kept whole, so appending a signature keeps the bundles and certificates
/// of the ones already there.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SigManifest {
    schema_version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    media_type: Option<String>,
    config: SigDescriptor,
    #[serde(default)]
    layers: Vec<SigDescriptor>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SigDescriptor {
    media_type: String,
    digest: String,
    size: u64,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    annotations: BTreeMap<String, String>,
}

impl SigDescriptor {
    fn oci(&self) -> oci_client::manifest::OciDescriptor {
        oci_client::manifest::OciDescriptor {
            media_type: self.media_type.clone(),
            digest: self.digest.clone(),
            size: i64::try_from(self.size).unwrap_or(i64::MAX),
            ..Default::default()
        }
    }
}

/// The image config cosign writes for a signature image: an empty image
/// whose rootfs lists the payload layers.
fn sig_config(layers: &[SigDescriptor]) -> Vec<u8> {
    let config = serde_json::json!({
        "architecture": "",
        "created": "0001-01-01T00:00:00Z",
        "history": [{"created": "0001-01-01T00:00:00Z"}],
        "os": "",
        "rootfs": {
            "type": "layers",
            "diff_ids": layers.iter().map(|l| l.digest.as_str()).collect::<Vec<_>>(),
        },
        "config": {},
    });
    serde_json::to_vec(&config).unwrap_or_default()
}

/// `reference`'s repository with the `.sig` tag of `digest`.
fn sig_reference(
    reference: &str,
    digest: &str,
) -> Result<(Reference, Reference, String), SignatureError> {
    let parsed: Reference = reference.parse().map_err(|e| SignatureError::Malformed {
        reference: reference.to_owned(),
        reason: format!("the reference does not parse ({e})"),
    })?;
    let tag = signature::signature_tag(digest).ok_or_else(|| SignatureError::Malformed {
        reference: reference.to_owned(),
        reason: format!("the manifest digest {digest} is not sha256"),
    })?;
    let sig = Reference::with_tag(
        parsed.registry().to_owned(),
        parsed.repository().to_owned(),
        tag.clone(),
    );
    Ok((parsed, sig, tag))
}

impl OciClient {
    /// Verifies that one of `keys` signed `pulled`'s manifest digest:
    /// first from the signature the cache recorded for it (no network),
    /// else from the registry's `.sig` manifest, whose verifying signature
    /// is then recorded in the cache.
    pub async fn verify(
        &self,
        pulled: &Pulled,
        keys: &[PublicKey],
        credentials: &Credentials,
    ) -> Result<Verified> {
        let reference = pulled.reference.as_str();
        let digest = pulled.digest.as_str();
        if let Some(cache) = &self.options.cache
            && let Some(record) = cache.signature(digest)
        {
            match serde_json::from_slice::<Signature>(&record) {
                Ok(sig) => match signature::verify(reference, digest, &[sig], keys) {
                    Ok(verified) => {
                        tracing::debug!(reference, digest, key = %verified.key, "OCI module signature verified from the cache");
                        return Ok(verified);
                    }
                    Err(e) => {
                        tracing::info!(reference, digest, error = %e, "cached signature does not verify with the keys configured now; reading the registry's");
                    }
                },
                Err(e) => {
                    tracing::warn!(reference, digest, error = %e, "cached signature record is unreadable; reading the registry's");
                }
            }
        }
        let signatures = self.signatures(reference, digest, credentials).await?;
        let verified = signature::verify(reference, digest, &signatures, keys)?;
        if let Some(cache) = &self.options.cache {
            let record = serde_json::to_vec(&verified.signature).unwrap_or_default();
            if let Err(e) = cache.put_signature(digest, &record) {
                tracing::warn!(reference, digest, dir = %cache.dir().display(), error = %e, "cannot cache the module's signature; a restart without the registry will not serve it");
            }
        }
        tracing::info!(reference, digest, key = %verified.key, "OCI module signature verified");
        Ok(verified)
    }

    /// The signatures the registry holds for manifest `digest` of
    /// `reference`'s repository, each payload checked against its digest.
    pub async fn signatures(
        &self,
        reference: &str,
        digest: &str,
        credentials: &Credentials,
    ) -> Result<Vec<Signature>, SignatureError> {
        let (parsed, sig_ref, tag) = sig_reference(reference, digest)?;
        let registry = parsed.resolve_registry().to_owned();
        let failed = |e: Error| SignatureError::Registry {
            reference: reference.to_owned(),
            source: Box::new(e),
        };
        let malformed = |reason: String| SignatureError::Malformed {
            reference: reference.to_owned(),
            reason,
        };
        let client = self.transport.client().map_err(failed)?;
        let auth = credentials.to_registry_auth();
        let body = match client
            .pull_manifest_raw(&sig_ref, &auth, SIG_MANIFESTS)
            .await
        {
            Ok((body, _)) => body,
            Err(e) => {
                return Err(match transport::classify(reference, &registry, e) {
                    Error::NotFound { .. } => SignatureError::Unsigned {
                        reference: reference.to_owned(),
                        tag,
                    },
                    e => failed(e),
                });
            }
        };
        let manifest: SigManifest = serde_json::from_slice(&body).map_err(|e| {
            malformed(format!(
                "its signature manifest {tag} is not an image manifest ({e})"
            ))
        })?;
        let mut found = Vec::new();
        for layer in manifest
            .layers
            .iter()
            .filter(|l| l.media_type == SIMPLE_SIGNING_MEDIA_TYPE)
        {
            if layer.size > MAX_PAYLOAD_BYTES || cache::sha256_hex(&layer.digest).is_none() {
                return Err(malformed(format!(
                    "signature payload {} of {tag} ({} bytes) is not a sha256 blob of at most {MAX_PAYLOAD_BYTES} bytes",
                    layer.digest, layer.size
                )));
            }
            let payload = self
                .payload(&client, reference, &registry, &sig_ref, layer)
                .await?;
            found.push(Signature {
                payload,
                signature: layer.annotations.get(SIGNATURE_ANNOTATION).cloned(),
            });
        }
        if found.is_empty() {
            return Err(malformed(format!(
                "its signature manifest {tag} has no {SIMPLE_SIGNING_MEDIA_TYPE} layer"
            )));
        }
        Ok(found)
    }

    /// One payload blob, at most [`MAX_PAYLOAD_BYTES`], hashed against its
    /// digest.
    async fn payload(
        &self,
        client: &oci_client::Client,
        reference: &str,
        registry: &str,
        sig_ref: &Reference,
        layer: &SigDescriptor,
    ) -> Result<Vec<u8>, SignatureError> {
        let malformed = |reason: String| SignatureError::Malformed {
            reference: reference.to_owned(),
            reason,
        };
        let failed = |e: Error| SignatureError::Registry {
            reference: reference.to_owned(),
            source: Box::new(e),
        };
        let mut stream = client
            .pull_blob_stream(sig_ref, &layer.oci())
            .await
            .map_err(|e| failed(transport::classify(reference, registry, e)))?;
        let mut payload = Vec::new();
        while let Some(chunk) = stream.stream.next().await {
            let chunk = chunk.map_err(|e| {
                malformed(format!(
                    "signature payload {} unreadable ({e})",
                    layer.digest
                ))
            })?;
            if (payload.len() + chunk.len()) as u64 > MAX_PAYLOAD_BYTES {
                return Err(malformed(format!(
                    "signature payload {} is over {MAX_PAYLOAD_BYTES} bytes",
                    layer.digest
                )));
            }
            payload.extend_from_slice(&chunk);
        }
        let actual = sha256_digest(&payload);
        if actual != layer.digest {
            return Err(malformed(format!(
                "signature payload {} hashes to {actual}",
                layer.digest
            )));
        }
        Ok(payload)
    }

    /// Signs manifest `digest` of `reference`'s repository with `key` and
    /// publishes the signature as `cosign sign --key` does (payload blob,
    /// config, `sha256-<hex>.sig` manifest), after the signatures already
    /// there. Returns the `.sig` reference.
    pub async fn push_signature(
        &self,
        reference: &str,
        digest: &str,
        key: &SigningKey,
        credentials: &Credentials,
    ) -> Result<String> {
        let (parsed, sig_ref, tag) = sig_reference(reference, digest)?;
        let registry = parsed.resolve_registry().to_owned();
        let docker_reference = format!("{}/{}", parsed.registry(), parsed.repository());
        let payload = signature::payload(&docker_reference, digest);
        let payload_digest = sha256_digest(&payload);
        let signed = key.sign(&payload);

        let client = self.transport.client()?;
        let fail = |e| transport::classify(reference, &registry, e);
        let auth = credentials.to_registry_auth();
        client
            .auth(&sig_ref, &auth, oci_client::RegistryOperation::Push)
            .await
            .map_err(fail)?;
        let mut layers = match client
            .pull_manifest_raw(&sig_ref, &auth, SIG_MANIFESTS)
            .await
        {
            Ok((body, _)) => match serde_json::from_slice::<SigManifest>(&body) {
                Ok(m) => m.layers,
                Err(e) => {
                    tracing::warn!(reference, tag, error = %e, "existing signature manifest is unreadable; replaced");
                    Vec::new()
                }
            },
            Err(e) => match fail(e) {
                Error::NotFound { .. } => Vec::new(),
                e => return Err(e),
            },
        };
        // ECDSA here is deterministic (RFC 6979): signing again adds nothing.
        layers.retain(|l| {
            l.digest != payload_digest || l.annotations.get(SIGNATURE_ANNOTATION) != Some(&signed)
        });
        layers.push(SigDescriptor {
            media_type: SIMPLE_SIGNING_MEDIA_TYPE.to_owned(),
            digest: payload_digest.clone(),
            size: payload.len() as u64,
            annotations: BTreeMap::from([(SIGNATURE_ANNOTATION.to_owned(), signed)]),
        });
        let config = sig_config(&layers);
        let config_digest = sha256_digest(&config);
        let manifest = SigManifest {
            schema_version: 2,
            media_type: Some(artifact::MANIFEST_MEDIA_TYPE.to_owned()),
            config: SigDescriptor {
                media_type: SIG_CONFIG_MEDIA_TYPE.to_owned(),
                digest: config_digest.clone(),
                size: config.len() as u64,
                annotations: BTreeMap::new(),
            },
            layers,
        };
        client
            .push_blob(&sig_ref, payload, &payload_digest)
            .await
            .map_err(fail)?;
        client
            .push_blob(&sig_ref, config, &config_digest)
            .await
            .map_err(fail)?;
        // Serializing a struct of strings cannot fail.
        let body = serde_json::to_vec(&manifest).unwrap_or_default();
        client
            .push_manifest_raw(
                &sig_ref,
                body,
                http::HeaderValue::from_static(artifact::MANIFEST_MEDIA_TYPE),
            )
            .await
            .map_err(fail)?;
        let pushed = format!("{docker_reference}:{tag}");
        tracing::info!(reference, digest, key = ?key, signature = %pushed, "OCI module signature pushed");
        Ok(pushed)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_signature_config_lists_the_payload_layers() {
        let layer = SigDescriptor {
            media_type: SIMPLE_SIGNING_MEDIA_TYPE.into(),
            digest: "sha256:ab".into(),
            size: 2,
            annotations: BTreeMap::new(),
        };
        let config: serde_json::Value = serde_json::from_slice(&sig_config(&[layer])).unwrap();
        assert_eq!(
            config["rootfs"]["diff_ids"],
            serde_json::json!(["sha256:ab"])
        );
    }
}
