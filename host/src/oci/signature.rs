//! Cosign keyed signatures of plugin modules, in cosign's own layout so
//! that `cosign sign --key` and `cosign verify --key` interoperate with
//! `kubewasm push --sign-key` and a verifying pull:
//!
//! - the signed payload is a "simple signing" JSON document naming the
//!   module's manifest digest ([`payload`]);
//! - the signature is ECDSA P-256 over SHA-256 of the payload bytes, ASN.1
//!   DER, base64 (cosign's default `generate-key-pair` keys);
//! - signatures live in the module's repository as the manifest tagged
//!   `sha256-<hex>.sig` ([`signature_tag`]): one layer of media type
//!   [`SIMPLE_SIGNING_MEDIA_TYPE`] per signature, its payload as the blob and
//!   the signature in the [`SIGNATURE_ANNOTATION`] annotation.
//!
//! As `cosign verify`, a signature is accepted when a configured key
//! verifies it and its payload names the pulled digest; the payload's
//! `docker-reference` is not compared (a module copied to a mirror keeps its
//! signature). Transparency-log bundles and keyless (Fulcio) certificates
//! are not checked: keys are the trust root here.
//!
//! Implemented on RustCrypto's `p256` rather than the `sigstore` crate: its
//! `cosign` feature (0.15, which does share our oci-client 0.18 and
//! reqwest 0.13) also enables `verify` -> `fulcio` -> `oauth`, adding 130
//! crates to the lock (openidconnect, oauth2, webbrowser, prost, rsa 0.9
//! with the unfixed RUSTSEC-2023-0071, a second thiserror, digest and sha2
//! major) for keyless flows this host does not use, and it builds its own
//! registry client beside [`super::transport`]. `p256` adds 20 small crates on
//! the sha2 0.11 / digest 0.11 the lock already has.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use p256::ecdsa::signature::{Signer as _, Verifier as _};
use p256::pkcs8::{DecodePrivateKey as _, DecodePublicKey as _, EncodePublicKey as _, LineEnding};
use serde::{Deserialize, Serialize};

/// The media type of a signature layer (its blob is the payload).
pub const SIMPLE_SIGNING_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The layer annotation holding the base64 signature.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// The payload's `critical.type`.
pub const PAYLOAD_TYPE: &str = "cosign container image signature";
/// Larger payload blobs are refused before download: cosign's are a few
/// hundred bytes (more with `-a` annotations).
pub const MAX_PAYLOAD_BYTES: u64 = 64 << 10;

/// The tag cosign stores the signatures of manifest `digest` under
/// (`sha256-<hex>.sig`); `None` when `digest` is not a sha256 digest.
pub fn signature_tag(digest: &str) -> Option<String> {
    super::cache::sha256_hex(digest).map(|hex| format!("sha256-{hex}.sig"))
}

/// The simple-signing payload (cosign's `payload.SimpleContainerImage`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SimpleSigning {
    pub critical: Critical,
    /// Free-form claims (`cosign sign -a k=v`); kept, not checked.
    #[serde(default)]
    pub optional: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Critical {
    pub identity: Identity,
    pub image: Image,
    #[serde(rename = "type")]
    pub kind: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Identity {
    #[serde(rename = "docker-reference")]
    pub docker_reference: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Image {
    #[serde(rename = "docker-manifest-digest")]
    pub docker_manifest_digest: String,
}

/// The payload cosign signs for manifest `digest` of `docker_reference`
/// (`registry/repository`, no tag).
pub fn payload(docker_reference: &str, digest: &str) -> Vec<u8> {
    let doc = SimpleSigning {
        critical: Critical {
            identity: Identity {
                docker_reference: docker_reference.to_owned(),
            },
            image: Image {
                docker_manifest_digest: digest.to_owned(),
            },
            kind: PAYLOAD_TYPE.to_owned(),
        },
        optional: None,
    };
    // Serializing a struct of strings cannot fail.
    serde_json::to_vec(&doc).unwrap_or_default()
}

/// A key could not be used; names the file and what to do.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("cannot read signing key {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "key {key} is cosign's encrypted private key format, which kubewasm does not read; sign with an unencrypted PKCS#8 P-256 key instead (`openssl ecparam -genkey -name prime256v1 -noout | openssl pkcs8 -topk8 -nocrypt -out kubewasm.key` and `openssl ec -in kubewasm.key -pubout -out kubewasm.pub`; `cosign import-key-pair --key kubewasm.key` lets cosign sign with the same key)"
    )]
    Encrypted { key: String },
    #[error(
        "key {key} is not an ECDSA P-256 {kind} key in PEM ({reason}); cosign's default keys (`cosign generate-key-pair`: use cosign.pub) and openssl prime256v1 keys are"
    )]
    NotP256 {
        key: String,
        kind: &'static str,
        reason: String,
    },
    #[error("signature rule for {prefix:?} names no keys; give at least one public key file")]
    NoKeys { prefix: String },
}

/// A key file's text.
fn read_pem(path: &Path) -> Result<String, KeyError> {
    std::fs::read_to_string(path).map_err(|source| KeyError::Read {
        path: path.to_owned(),
        source,
    })
}

/// A public key signatures are verified against, named by where it came
/// from (errors and logs say which key verified what).
#[derive(Clone)]
pub struct PublicKey {
    key: p256::ecdsa::VerifyingKey,
    source: String,
}

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("PublicKey").field(&self.source).finish()
    }
}

impl PublicKey {
    /// An SPKI `PUBLIC KEY` PEM (what `cosign generate-key-pair` writes to
    /// cosign.pub); `source` names it in errors.
    pub fn from_pem(pem: &str, source: &str) -> Result<Self, KeyError> {
        let key = p256::ecdsa::VerifyingKey::from_public_key_pem(pem.trim()).map_err(|e| {
            KeyError::NotP256 {
                key: source.to_owned(),
                kind: "public",
                reason: e.to_string(),
            }
        })?;
        Ok(Self {
            key,
            source: source.to_owned(),
        })
    }

    pub fn load(path: &Path) -> Result<Self, KeyError> {
        let pem = read_pem(path)?;
        Self::from_pem(&pem, &path.display().to_string())
    }

    /// Where the key came from (a file path).
    pub fn source(&self) -> &str {
        &self.source
    }

    pub fn to_pem(&self) -> String {
        // Encoding a valid P-256 point cannot fail.
        self.key
            .to_public_key_pem(LineEnding::LF)
            .unwrap_or_default()
    }

    fn verifies(&self, payload: &[u8], signature: &p256::ecdsa::DerSignature) -> bool {
        self.key.verify(payload, signature).is_ok()
    }
}

/// A private key `kubewasm push --sign-key` signs with.
pub struct SigningKey {
    key: p256::ecdsa::SigningKey,
    source: String,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("SigningKey").field(&self.source).finish()
    }
}

impl SigningKey {
    /// An unencrypted PKCS#8 `PRIVATE KEY` or SEC1 `EC PRIVATE KEY` PEM of a
    /// P-256 key. Cosign's encrypted format is refused with how to make a
    /// key that works with both tools.
    pub fn from_pem(pem: &str, source: &str) -> Result<Self, KeyError> {
        let pem = pem.trim();
        if pem.contains("ENCRYPTED") {
            return Err(KeyError::Encrypted {
                key: source.to_owned(),
            });
        }
        let key = if pem.starts_with("-----BEGIN EC PRIVATE KEY-----") {
            p256::SecretKey::from_sec1_pem(pem)
                .map(p256::ecdsa::SigningKey::from)
                .map_err(|e| e.to_string())
        } else {
            p256::ecdsa::SigningKey::from_pkcs8_pem(pem).map_err(|e| e.to_string())
        }
        .map_err(|reason| KeyError::NotP256 {
            key: source.to_owned(),
            kind: "private",
            reason,
        })?;
        Ok(Self {
            key,
            source: source.to_owned(),
        })
    }

    pub fn load(path: &Path) -> Result<Self, KeyError> {
        let pem = read_pem(path)?;
        Self::from_pem(&pem, &path.display().to_string())
    }

    /// A key from 32 secret bytes (tests make keys this way).
    pub fn from_bytes(secret: &[u8], source: &str) -> Result<Self, KeyError> {
        let key = p256::ecdsa::SigningKey::from_slice(secret).map_err(|e| KeyError::NotP256 {
            key: source.to_owned(),
            kind: "private",
            reason: e.to_string(),
        })?;
        Ok(Self {
            key,
            source: source.to_owned(),
        })
    }

    pub fn public_key(&self) -> PublicKey {
        PublicKey {
            key: *self.key.verifying_key(),
            source: format!("public key of {}", self.source),
        }
    }

    /// The signature of `payload` as cosign stores it: base64 of the DER
    /// ECDSA signature over its SHA-256.
    pub fn sign(&self, payload: &[u8]) -> String {
        let signature: p256::ecdsa::Signature = self.key.sign(payload);
        BASE64.encode(signature.to_der().as_bytes())
    }
}

/// One signature as found in a `.sig` manifest: the payload blob and the
/// layer's signature annotation (absent when the layer has none).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signature {
    /// The payload bytes, base64 (signed as they are, byte for byte).
    #[serde(with = "base64_bytes")]
    pub payload: Vec<u8>,
    pub signature: Option<String>,
}

mod base64_bytes {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD as BASE64;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&BASE64.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        BASE64.decode(text).map_err(serde::de::Error::custom)
    }
}

/// Which key verified which signature of a module.
#[derive(Debug, Clone)]
pub struct Verified {
    /// The manifest digest the signature names.
    pub digest: String,
    /// The verifying key's source.
    pub key: String,
    pub signature: Signature,
}

/// Why a module's signature was refused; each names the reference.
#[derive(Debug, thiserror::Error)]
pub enum SignatureError {
    #[error(
        "{reference} is unsigned: its repository has no signature manifest {tag}, and the host's signature policy requires one; sign it (`kubewasm push --sign-key` or `cosign sign --key`)"
    )]
    Unsigned { reference: String, tag: String },
    #[error(
        "{reference}: none of its {signatures} signature(s) verifies with the configured key(s) [{}]; sign it with the private key of one of them, or configure the key it was signed with", keys.join(", ")
    )]
    NotVerified {
        reference: String,
        signatures: usize,
        keys: Vec<String>,
    },
    #[error(
        "{reference}: its signature manifest {tag} holds {found} signatures, over the {limit} a pull reads; none was read. Remove old signatures (push the .sig manifest again with only the current ones)"
    )]
    TooMany {
        reference: String,
        tag: String,
        found: usize,
        limit: usize,
    },
    #[error("{reference}: malformed signature: {reason}")]
    Malformed { reference: String, reason: String },
    #[error(
        "{reference}: the signature verifies but signs manifest {signed}, not {pulled}: a signature of another module was copied here, so it is refused"
    )]
    PayloadDigestMismatch {
        reference: String,
        pulled: String,
        signed: String,
    },
    #[error("{reference}: cannot read its signatures: {source}")]
    Registry {
        reference: String,
        source: Box<super::Error>,
    },
}

/// Verifies that one of `signatures` is a signature by one of `keys` of a
/// payload naming manifest `digest`. When none is, the error is the most
/// telling one found: a verified signature of another digest or with a
/// broken payload first, then "no key verified", then a malformed
/// signature.
pub fn verify(
    reference: &str,
    digest: &str,
    signatures: &[Signature],
    keys: &[PublicKey],
) -> Result<Verified, SignatureError> {
    let mut claim_error = None;
    let mut well_formed = 0;
    let mut malformed = None;
    for sig in signatures {
        let der = match decode_signature(sig.signature.as_deref()) {
            Ok(der) => der,
            Err(reason) => {
                malformed.get_or_insert(reason);
                continue;
            }
        };
        well_formed += 1;
        let Some(key) = keys.iter().find(|k| k.verifies(&sig.payload, &der)) else {
            continue;
        };
        match check_claims(reference, digest, &sig.payload) {
            Ok(()) => {
                return Ok(Verified {
                    digest: digest.to_owned(),
                    key: key.source.clone(),
                    signature: sig.clone(),
                });
            }
            Err(e) => {
                claim_error.get_or_insert(e);
            }
        }
    }
    if let Some(e) = claim_error {
        return Err(e);
    }
    if well_formed > 0 || malformed.is_none() {
        return Err(SignatureError::NotVerified {
            reference: reference.to_owned(),
            signatures: signatures.len(),
            keys: keys.iter().map(|k| k.source.clone()).collect(),
        });
    }
    Err(SignatureError::Malformed {
        reference: reference.to_owned(),
        reason: crate::names::excerpt(&malformed.unwrap_or_default()),
    })
}

fn decode_signature(annotation: Option<&str>) -> Result<p256::ecdsa::DerSignature, String> {
    let text = annotation
        .ok_or_else(|| format!("a signature layer has no {SIGNATURE_ANNOTATION} annotation"))?;
    let bytes = BASE64
        .decode(text.trim())
        .map_err(|e| format!("the signature annotation is not base64 ({e})"))?;
    p256::ecdsa::DerSignature::try_from(bytes.as_slice())
        .map_err(|e| format!("the signature is not an ASN.1 DER ECDSA P-256 signature ({e})"))
}

fn check_claims(reference: &str, digest: &str, payload: &[u8]) -> Result<(), SignatureError> {
    // The reasons quote the payload, the registry's text.
    let malformed = |reason: String| SignatureError::Malformed {
        reference: reference.to_owned(),
        reason: crate::names::excerpt(&reason),
    };
    let doc: SimpleSigning = serde_json::from_slice(payload).map_err(|e| {
        malformed(format!(
            "the signed payload is not a simple-signing document ({e})"
        ))
    })?;
    if doc.critical.kind != PAYLOAD_TYPE {
        return Err(malformed(format!(
            "the signed payload's type is {:?}, not {PAYLOAD_TYPE:?}",
            doc.critical.kind
        )));
    }
    let signed = doc.critical.image.docker_manifest_digest;
    if signed != digest {
        return Err(SignatureError::PayloadDigestMismatch {
            reference: reference.to_owned(),
            pulled: digest.to_owned(),
            // The payload's text, up to its 64 KiB.
            signed: crate::names::excerpt(&signed),
        });
    }
    Ok(())
}

/// A rule of the host config's signature policy, as written
/// (`pluginObjects.signatures`): modules whose `registry/repository`
/// starts with `prefix` must carry a signature by one of `keys`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SignatureRuleSettings {
    /// A registry (`registry.example.com`), a repository prefix
    /// (`registry.example.com/team`), or `*` for every registry. The
    /// longest matching rule applies.
    pub prefix: String,
    /// Public key PEM files (cosign.pub); any one of them may verify.
    pub keys: Vec<PathBuf>,
}

/// One rule with its keys loaded.
#[derive(Debug, Clone)]
pub struct SignatureRule {
    pub prefix: String,
    pub keys: Vec<PublicKey>,
}

/// Which modules must be signed, and by whom. Empty (the default): none.
#[derive(Debug, Clone, Default)]
pub struct SignaturePolicy {
    rules: Vec<SignatureRule>,
}

impl SignaturePolicy {
    pub fn new(rules: Vec<SignatureRule>) -> Self {
        Self { rules }
    }

    /// Every module must be signed by one of `keys` (`kubewasm pull --verify-key`).
    pub fn everything(keys: Vec<PublicKey>) -> Self {
        Self::new(vec![SignatureRule {
            prefix: "*".to_owned(),
            keys,
        }])
    }

    /// Loads the rules' key files; a rule without keys is an error (it
    /// would require signatures nothing can verify).
    pub fn load(settings: &[SignatureRuleSettings]) -> Result<Self, KeyError> {
        let mut rules = Vec::with_capacity(settings.len());
        for rule in settings {
            if rule.keys.is_empty() {
                return Err(KeyError::NoKeys {
                    prefix: rule.prefix.clone(),
                });
            }
            let keys = rule
                .keys
                .iter()
                .map(|p| PublicKey::load(p))
                .collect::<Result<Vec<_>, _>>()?;
            rules.push(SignatureRule {
                prefix: rule.prefix.clone(),
                keys,
            });
        }
        Ok(Self { rules })
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The keys that must verify `reference`'s module, from the longest
    /// rule whose prefix covers its `registry/repository` (whole path
    /// segments: `reg.io/team` covers `reg.io/team/x`, not
    /// `reg.io/teamx`). Both are compared in one spelling
    /// ([`super::canonical`]): host case, default ports and Docker Hub's
    /// aliases do not escape a rule. `None`: no signature required (or the
    /// reference does not parse, which the pull itself then refuses).
    pub fn required_keys(&self, reference: &str) -> Option<&[PublicKey]> {
        let parsed: super::Reference = reference.parse().ok()?;
        let name = super::canonical::name(&parsed);
        // The length of the longest canonical prefix of `rule` covering
        // `name`; `*` covers everything, shortest of all.
        let covering = |rule: &SignatureRule| -> Option<usize> {
            if rule.prefix.trim() == "*" {
                return Some(0);
            }
            super::canonical::prefixes(&rule.prefix)
                .into_iter()
                .filter(|p| super::canonical::covers(p, &name))
                .map(|p| p.len())
                .max()
        };
        self.rules
            .iter()
            .filter_map(|r| covering(r).map(|len| (len, r)))
            .max_by_key(|(len, _)| *len)
            .map(|(_, r)| r.keys.as_slice())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const DIGEST: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
    const OTHER: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";
    const REF: &str = "reg.test/plugins/noop@sha256:1111111111111111111111111111111111111111111111111111111111111111";

    fn key(name: &str) -> SigningKey {
        let mut secret = [0u8; 32];
        getrandom::fill(&mut secret).unwrap();
        SigningKey::from_bytes(&secret, name).unwrap()
    }

    fn signed(key: &SigningKey, digest: &str) -> Signature {
        let payload = payload("reg.test/plugins/noop", digest);
        Signature {
            signature: Some(key.sign(&payload)),
            payload,
        }
    }

    #[test]
    fn a_signature_by_a_configured_key_over_the_pulled_digest_verifies() {
        let good = key("good");
        let other = key("other");
        let keys = [other.public_key(), good.public_key()];
        let verified = verify(REF, DIGEST, &[signed(&good, DIGEST)], &keys).unwrap();
        assert_eq!(verified.key, "public key of good");
        assert_eq!(verified.digest, DIGEST);
        // The PEM round trip is what the host config loads.
        let pem = good.public_key().to_pem();
        let loaded = PublicKey::from_pem(&pem, "good.pub").unwrap();
        verify(REF, DIGEST, &[signed(&good, DIGEST)], &[loaded]).unwrap();
    }

    #[test]
    fn a_signature_by_another_key_is_not_verified() {
        let err = verify(
            REF,
            DIGEST,
            &[signed(&key("mallory"), DIGEST)],
            &[key("good").public_key()],
        )
        .unwrap_err();
        assert!(
            matches!(err, SignatureError::NotVerified { signatures: 1, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("public key of good"), "{err}");
        assert!(err.to_string().contains(REF), "{err}");
    }

    #[test]
    fn a_tampered_payload_is_not_verified() {
        let good = key("good");
        let mut sig = signed(&good, DIGEST);
        // Same digest, another identity: the signature no longer covers it.
        sig.payload = payload("reg.test/evil/noop", DIGEST);
        let err = verify(REF, DIGEST, &[sig], &[good.public_key()]).unwrap_err();
        assert!(matches!(err, SignatureError::NotVerified { .. }), "{err}");
    }

    #[test]
    fn a_valid_signature_of_another_digest_is_refused_as_a_mismatch() {
        let good = key("good");
        let err = verify(REF, DIGEST, &[signed(&good, OTHER)], &[good.public_key()]).unwrap_err();
        match &err {
            SignatureError::PayloadDigestMismatch { pulled, signed, .. } => {
                assert_eq!(pulled, DIGEST);
                assert_eq!(signed, OTHER);
            }
            e => panic!("expected a digest mismatch, got {e}"),
        }
        // Among several, the one that matches wins.
        verify(
            REF,
            DIGEST,
            &[signed(&good, OTHER), signed(&good, DIGEST)],
            &[good.public_key()],
        )
        .unwrap();
    }

    #[test]
    fn malformed_signatures_and_payloads_are_named() {
        let good = key("good");
        let mut no_annotation = signed(&good, DIGEST);
        no_annotation.signature = None;
        let err = verify(REF, DIGEST, &[no_annotation], &[good.public_key()]).unwrap_err();
        assert!(matches!(err, SignatureError::Malformed { .. }), "{err}");
        assert!(err.to_string().contains(SIGNATURE_ANNOTATION), "{err}");

        let mut not_der = signed(&good, DIGEST);
        not_der.signature = Some(BASE64.encode(b"not a signature"));
        let err = verify(REF, DIGEST, &[not_der], &[good.public_key()]).unwrap_err();
        assert!(err.to_string().contains("DER"), "{err}");

        let junk = b"{\"not\":\"simple signing\"}".to_vec();
        let sig = Signature {
            signature: Some(good.sign(&junk)),
            payload: junk,
        };
        let err = verify(REF, DIGEST, &[sig], &[good.public_key()]).unwrap_err();
        assert!(err.to_string().contains("simple-signing"), "{err}");
    }

    #[test]
    fn the_payload_is_cosigns_simple_signing_document() {
        let doc: serde_json::Value =
            serde_json::from_slice(&payload("reg.test/plugins/noop", DIGEST)).unwrap();
        assert_eq!(
            doc,
            serde_json::json!({
                "critical": {
                    "identity": {"docker-reference": "reg.test/plugins/noop"},
                    "image": {"docker-manifest-digest": DIGEST},
                    "type": "cosign container image signature"
                },
                "optional": null
            })
        );
        assert_eq!(
            signature_tag(DIGEST).unwrap(),
            "sha256-1111111111111111111111111111111111111111111111111111111111111111.sig"
        );
        assert_eq!(signature_tag("md5:00"), None);
    }

    #[test]
    fn keys_load_from_pem_and_cosigns_encrypted_keys_are_refused_with_a_way_out() {
        // openssl's PKCS#8 and SEC1 forms of one key.
        let pkcs8 = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgxXAZ31t7kXZCm1tV
URTfus+sL4NCnr6Te5MJT4rYe2uhRANCAARZ4QQKn5MLSOMQeLFGqkLqIaDUHtz5
bLzrFIULH5i3TdyaWtvkk44LCF4vyq+HSg9Cb7ZTHJMN8gOVLc22YKx2
-----END PRIVATE KEY-----
";
        let sec1 = "-----BEGIN EC PRIVATE KEY-----
MHcCAQEEIMVwGd9be5F2QptbVVEU37rPrC+DQp6+k3uTCU+K2HtroAoGCCqGSM49
AwEHoUQDQgAEWeEECp+TC0jjEHixRqpC6iGg1B7c+Wy86xSFCx+Yt03cmlrb5JOO
CwheL8qvh0oPQm+2UxyTDfIDlS3NtmCsdg==
-----END EC PRIVATE KEY-----
";
        let a = SigningKey::from_pem(pkcs8, "a.key").unwrap();
        let b = SigningKey::from_pem(sec1, "b.key").unwrap();
        assert_eq!(a.public_key().to_pem(), b.public_key().to_pem());

        let encrypted = "-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\neyJrZGYiOnt9fQ==\n-----END ENCRYPTED SIGSTORE PRIVATE KEY-----\n";
        let err = SigningKey::from_pem(encrypted, "cosign.key").unwrap_err();
        assert!(matches!(err, KeyError::Encrypted { .. }), "{err}");
        assert!(err.to_string().contains("openssl"), "{err}");

        let err = PublicKey::from_pem(
            "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n",
            "x.pub",
        )
        .unwrap_err();
        assert!(err.to_string().contains("x.pub"), "{err}");
    }

    #[test]
    fn the_longest_matching_rule_applies_on_whole_path_segments() {
        let team = key("team").public_key();
        let all = key("all").public_key();
        let policy = SignaturePolicy::new(vec![
            SignatureRule {
                prefix: "reg.test".into(),
                keys: vec![all.clone()],
            },
            SignatureRule {
                prefix: "reg.test/team/".into(),
                keys: vec![team.clone()],
            },
        ]);
        let source = |r: &str| policy.required_keys(r).map(|k| k[0].source().to_owned());
        assert_eq!(source("reg.test/team/x:1").as_deref(), Some(team.source()));
        assert_eq!(source("reg.test/teamx/y:1").as_deref(), Some(all.source()));
        assert_eq!(source("reg.test/other@sha256:1111111111111111111111111111111111111111111111111111111111111111").as_deref(), Some(all.source()));
        assert_eq!(source("other.test/team/x:1"), None);
        assert_eq!(source("reg.testing/x:1"), None);
        // The rule's registry in every spelling of the reference.
        for spelling in [
            "reg.test:443/team/x:1",
            "REG.test/team/x:1",
            "reg.test:0443/team/x:1",
            "Reg.Test:80/team/x:1",
        ] {
            assert_eq!(
                source(spelling).as_deref(),
                Some(team.source()),
                "{spelling}"
            );
        }
        assert_eq!(source("reg.test:5000/team/x:1"), None);
        // Docker Hub short names match the resolved registry too.
        let hub = SignaturePolicy::new(vec![SignatureRule {
            prefix: "index.docker.io/library".into(),
            keys: vec![all],
        }]);
        for spelling in [
            "x:1",
            "library/x:1",
            "docker.io/x:1",
            "docker.io/library/x:1",
            "index.docker.io/x:1",
            "registry-1.docker.io/x:1",
            "registry-1.docker.io/library/x:1",
        ] {
            assert!(hub.required_keys(spelling).is_some(), "{spelling}");
        }
        assert!(hub.required_keys("someone/x:1").is_none());
        assert!(
            SignaturePolicy::everything(vec![team])
                .required_keys("any.test/x:1")
                .is_some()
        );
        assert!(
            SignaturePolicy::default()
                .required_keys("reg.test/x:1")
                .is_none()
        );
    }
}
