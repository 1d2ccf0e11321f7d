//! Where cosign keeps a module's signatures: the `sha256-<hex>.sig`
//! manifest in the module's repository (read to verify a pull, appended to
//! by [`OciClient::push_signature`]), and the digest cache's record of the
//! signatures that verified a module, so that a host restarting while the
//! registry is down still serves only verified modules: the record is
//! verified again against the keys configured now, on every cached pull.
//! The signature manifest is read under the manifest cap, at most
//! [`super::PullOptions::max_signatures`] of its signatures are read, and
//! each payload under [`MAX_PAYLOAD_BYTES`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::registry::Session;
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

/// A reference whose signatures are read, or why it has none.
fn parse_for_signatures(reference: &str) -> Result<Reference, SignatureError> {
    reference
        .parse()
        .map_err(|e| malformed(reference, &format!("the reference does not parse ({e})")))
}

/// A malformed signature, its reason (which quotes the registry's
/// manifest) as an excerpt.
fn malformed(reference: &str, reason: &str) -> SignatureError {
    SignatureError::Malformed {
        reference: reference.to_owned(),
        reason: crate::names::excerpt(reason),
    }
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

/// The signature record the cache keeps for a manifest: the signatures
/// that verified it (one per key set that asked), newest last. A record of
/// one signature, as written before there could be several, reads too.
#[derive(Deserialize)]
#[serde(untagged)]
enum Record {
    Many(Vec<Signature>),
    One(Signature),
}

fn read_record(bytes: &[u8]) -> serde_json::Result<Vec<Signature>> {
    Ok(match serde_json::from_slice(bytes)? {
        Record::Many(all) => all,
        Record::One(one) => vec![one],
    })
}

impl OciClient {
    /// Verifies that one of `keys` signed `pulled`'s manifest digest:
    /// first from the signatures the cache recorded for it (no network),
    /// else from the registry's `.sig` manifest, whose verifying signature
    /// is then recorded in the cache. Within the pull deadline.
    pub async fn verify(
        &self,
        pulled: &Pulled,
        keys: &[PublicKey],
        credentials: &Credentials,
    ) -> Result<Verified> {
        let reference = pulled.reference.as_str();
        let parsed = parse_for_signatures(reference).map_err(Error::from)?;
        let verify = async {
            let mut session = Session::new(&self.transport, reference, &parsed, credentials)?;
            let verified = self.verify_with(&mut session, pulled, keys).await?;
            self.record_signatures(reference, &pulled.digest, std::slice::from_ref(&verified));
            Ok(verified)
        };
        self.within_deadline(reference, &parsed, verify).await
    }

    /// [`OciClient::verify`] with each of `key_sets` in turn (the policy's
    /// keys, a Plugin's own): every set must verify; their verifications
    /// in order.
    pub(crate) async fn verify_all(
        &self,
        session: &mut Session<'_>,
        pulled: &Pulled,
        key_sets: &[&[PublicKey]],
    ) -> Result<Vec<Verified>> {
        let mut verified = Vec::with_capacity(key_sets.len());
        for keys in key_sets {
            verified.push(self.verify_with(session, pulled, keys).await?);
        }
        Ok(verified)
    }

    async fn verify_with(
        &self,
        session: &mut Session<'_>,
        pulled: &Pulled,
        keys: &[PublicKey],
    ) -> Result<Verified> {
        let reference = pulled.reference.as_str();
        let digest = pulled.digest.as_str();
        if let Some(cache) = &self.options.cache
            && let Some(record) = cache.signature(digest)
        {
            match read_record(&record) {
                Ok(sigs) => match signature::verify(reference, digest, &sigs, keys) {
                    Ok(verified) => {
                        tracing::debug!(reference, digest, key = %verified.key, "OCI module signature verified from the cache");
                        return Ok(verified);
                    }
                    Err(e) => {
                        tracing::info!(reference, digest, error = %e, "cached signatures do not verify with the keys configured now; reading the registry's");
                    }
                },
                Err(e) => {
                    tracing::warn!(reference, digest, error = %e, "cached signature record is unreadable; reading the registry's");
                }
            }
        }
        let signatures = self.read_signatures(session, reference, digest).await?;
        let verified = signature::verify(reference, digest, &signatures, keys)?;
        tracing::info!(reference, digest, key = %verified.key, "OCI module signature verified");
        Ok(verified)
    }

    /// Adds the signatures of `verified` to the cache's record for manifest
    /// `digest` (written only when one is new). Only signatures that
    /// verified are recorded, and only once the module is in the cache.
    pub(crate) fn record_signatures(&self, reference: &str, digest: &str, verified: &[Verified]) {
        let Some(cache) = &self.options.cache else {
            return;
        };
        let mut record = cache
            .signature(digest)
            .and_then(|bytes| read_record(&bytes).ok())
            .unwrap_or_default();
        let before = record.len();
        for v in verified {
            if !record.contains(&v.signature) {
                record.push(v.signature.clone());
            }
        }
        if record.len() == before {
            return;
        }
        // One per key set that ever verified it: the newest few.
        let excess = record
            .len()
            .saturating_sub(self.options.max_signatures.max(1));
        record.drain(..excess);
        let bytes = serde_json::to_vec(&record).unwrap_or_default();
        if let Err(e) = cache.put_signature(digest, &bytes) {
            tracing::warn!(reference, digest, dir = %cache.dir().display(), error = %e, "cannot cache the module's signature; a restart without the registry will not serve it");
        }
    }

    /// The signatures the registry holds for manifest `digest` of
    /// `reference`'s repository, each payload checked against its digest;
    /// within the pull deadline.
    pub async fn signatures(
        &self,
        reference: &str,
        digest: &str,
        credentials: &Credentials,
    ) -> Result<Vec<Signature>, SignatureError> {
        let parsed = parse_for_signatures(reference)?;
        let read = async {
            let mut session = Session::new(&self.transport, reference, &parsed, credentials)?;
            Ok(self
                .read_signatures(&mut session, reference, digest)
                .await?)
        };
        self.within_deadline(reference, &parsed, read)
            .await
            .map_err(|e| match e {
                Error::Signature(e) => e,
                e => SignatureError::Registry {
                    reference: reference.to_owned(),
                    source: Box::new(e),
                },
            })
    }

    /// `future`, or [`Error::Deadline`] once the pull deadline passes.
    async fn within_deadline<T>(
        &self,
        reference: &str,
        parsed: &Reference,
        future: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        let deadline = self.options.deadline;
        tokio::time::timeout(deadline, future)
            .await
            .unwrap_or_else(|_| {
                Err(Error::Deadline {
                    reference: reference.to_owned(),
                    registry: parsed.resolve_registry().to_owned(),
                    deadline,
                })
            })
    }

    /// The signatures of the `.sig` manifest of `digest`, through
    /// `session` (the module's repository): at most
    /// [`super::PullOptions::max_signatures`], else none is read.
    async fn read_signatures(
        &self,
        session: &mut Session<'_>,
        reference: &str,
        digest: &str,
    ) -> Result<Vec<Signature>, SignatureError> {
        let tag = signature::signature_tag(digest).ok_or_else(|| {
            malformed(
                reference,
                &format!("the manifest digest {digest} is not sha256"),
            )
        })?;
        let failed = |e: Error| SignatureError::Registry {
            reference: reference.to_owned(),
            source: Box::new(e),
        };
        let body = match session.manifest(&tag, SIG_MANIFESTS).await {
            Ok(body) => body,
            Err(Error::NotFound { .. }) => {
                return Err(SignatureError::Unsigned {
                    reference: reference.to_owned(),
                    tag,
                });
            }
            Err(e) => return Err(failed(e)),
        };
        let manifest: SigManifest = serde_json::from_slice(&body).map_err(|e| {
            malformed(
                reference,
                &format!("its signature manifest {tag} is not an image manifest ({e})"),
            )
        })?;
        drop(body);
        let layers: Vec<&SigDescriptor> = manifest
            .layers
            .iter()
            .filter(|l| l.media_type == SIMPLE_SIGNING_MEDIA_TYPE)
            .collect();
        let limit = self.options.max_signatures;
        if layers.len() > limit {
            return Err(SignatureError::TooMany {
                reference: reference.to_owned(),
                tag,
                found: layers.len(),
                limit,
            });
        }
        let mut found = Vec::with_capacity(layers.len());
        for layer in layers {
            if layer.size > MAX_PAYLOAD_BYTES || cache::sha256_hex(&layer.digest).is_none() {
                return Err(malformed(
                    reference,
                    &format!(
                        "signature payload {} of {tag} ({} bytes) is not a sha256 blob of at most {MAX_PAYLOAD_BYTES} bytes",
                        layer.digest, layer.size
                    ),
                ));
            }
            let payload = self.payload(session, reference, layer).await?;
            found.push(Signature {
                payload,
                signature: layer.annotations.get(SIGNATURE_ANNOTATION).cloned(),
            });
        }
        if found.is_empty() {
            return Err(malformed(
                reference,
                &format!("its signature manifest {tag} has no {SIMPLE_SIGNING_MEDIA_TYPE} layer"),
            ));
        }
        Ok(found)
    }

    /// One payload blob, at most [`MAX_PAYLOAD_BYTES`], hashed against its
    /// digest.
    async fn payload(
        &self,
        session: &mut Session<'_>,
        reference: &str,
        layer: &SigDescriptor,
    ) -> Result<Vec<u8>, SignatureError> {
        let failed = |e: Error| SignatureError::Registry {
            reference: reference.to_owned(),
            source: Box::new(e),
        };
        let response = session.blob(&layer.digest).await.map_err(failed)?;
        let payload = match session
            .read_capped(response, MAX_PAYLOAD_BYTES, "signature payload")
            .await
        {
            Ok(payload) => payload,
            // More than its descriptor said, which was at most the cap.
            Err(Error::BodyTooLarge { .. }) => {
                return Err(malformed(
                    reference,
                    &format!(
                        "signature payload {} is over {MAX_PAYLOAD_BYTES} bytes",
                        layer.digest
                    ),
                ));
            }
            Err(e) => return Err(failed(e)),
        };
        let actual = sha256_digest(&payload);
        if actual != layer.digest {
            return Err(malformed(
                reference,
                &format!("signature payload {} hashes to {actual}", layer.digest),
            ));
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

        // The signatures there already, read as a pull reads them (capped).
        let mut session = Session::new(&self.transport, reference, &parsed, credentials)?;
        let mut layers = match session.manifest(&tag, SIG_MANIFESTS).await {
            Ok(body) => match serde_json::from_slice::<SigManifest>(&body) {
                Ok(m) => m.layers,
                Err(e) => {
                    tracing::warn!(reference, tag, error = %e, "existing signature manifest is unreadable; replaced");
                    Vec::new()
                }
            },
            Err(Error::NotFound { .. }) => Vec::new(),
            Err(e) => return Err(e),
        };
        let client = self.transport.client()?;
        let fail = |e| transport::classify(reference, &registry, e);
        let auth = credentials.to_registry_auth();
        client
            .auth(&sig_ref, &auth, oci_client::RegistryOperation::Push)
            .await
            .map_err(fail)?;
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
