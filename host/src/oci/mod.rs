//! Plugin modules from OCI registries, in the CNCF Wasm OCI artifact
//! layout ([`artifact`]): pull a reference (a tag resolved once to the
//! manifest digest, which the caller records), verify every byte against
//! its digest, keep the module in a digest-addressed disk cache
//! ([`cache`]) that serves pinned pulls with no network, and push a
//! `.wasm` as such an artifact. Credentials come from a dockerconfigjson
//! ([`auth`]); TLS from the system roots plus an optional CA
//! ([`transport`]). One [`OciClient`] serves every plugin: each call takes
//! its own credentials and builds its own connection, so one plugin's
//! Secret never authenticates another's pull. A [`SignaturePolicy`] in
//! [`PullOptions`] makes a pull also verify the module's cosign signature
//! ([`signature`]), cached pulls included; [`OciClient::push_signature`]
//! signs a pushed module the way `cosign sign --key` does.
//!
//! A registry is not trusted: it can hurt only the Plugins that name it.
//! Every body a pull reads from it is capped ([`registry`]: manifests and
//! indexes at 4 MiB, token responses, error bodies, signature manifests
//! and payloads, the module at [`PullOptions::max_module_bytes`]), a pull
//! reads at most [`PullOptions::max_signatures`] signatures, and the whole
//! pull (manifest, module, signatures) has one deadline
//! ([`PullOptions::deadline`]). Registry text reaches an error only as an
//! excerpt. The cache serves a module only to a registry, repository and
//! credentials verified for it ([`access`]), and a module whose signature
//! must verify enters the cache only once it has.

pub mod access;
pub mod artifact;
pub mod auth;
pub mod cache;
pub mod canonical;
pub mod precompiled;
pub mod registry;
pub mod sig_store;
pub mod signature;
pub mod transport;

use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};

use access::Grant;
use registry::Session;

pub use auth::{Credentials, DockerConfigError, credentials_from_docker_config};
pub use cache::ModuleCache;
pub use oci_client::Reference;
pub use precompiled::{PrecompiledLayer, PrecompiledPull, PrecompiledWanted};
pub use signature::{
    KeyError, PublicKey, SignatureError, SignaturePolicy, SignatureRule, SignatureRuleSettings,
    SigningKey, Verified,
};
pub use transport::Transport;

/// The default largest module a pull accepts: the Python plugin is 18 MB.
pub const DEFAULT_MAX_MODULE_BYTES: u64 = 64 << 20;
/// The default time a whole pull may take: a 64 MiB module at about
/// 560 KB/s, while a registry that trickles a byte a minute is given up on.
pub const DEFAULT_PULL_DEADLINE: Duration = Duration::from_secs(120);
/// The default largest precompiled layer a pull accepts: the Python
/// plugin's optimized artifact is about 46 MB.
pub const DEFAULT_MAX_PRECOMPILED_BYTES: u64 = 128 << 20;
/// The default most signatures read for one module: cosign appends one
/// per `sign`, and each is a request.
pub const DEFAULT_MAX_SIGNATURES: usize = 16;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// An error and its causes on one line, as an excerpt: what a client
/// error says can hold a registry's text (a redirect's location).
fn chain(e: &BoxError) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let said = cause.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        next = cause.source();
    }
    crate::names::excerpt(&text)
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "{reference:?} is not an OCI reference ({source}); write registry/repository:tag or registry/repository@sha256:<64 hex>"
    )]
    Reference {
        reference: String,
        source: oci_client::ParseError,
    },
    #[error(
        "registry {registry} is unreachable for {reference}: {}; check the address and that the registry is up", chain(.source)
    )]
    Unreachable {
        reference: String,
        registry: String,
        source: BoxError,
    },
    #[error(
        "TLS with registry {registry} failed for {reference}: {}; if its certificate is signed by a private CA, trust that CA (--ca FILE, or the registry CA in the host config)", chain(.source)
    )]
    Tls {
        reference: String,
        registry: String,
        source: BoxError,
    },
    #[error(
        "{reference} is not in registry {registry}; check the repository, the tag or the digest"
    )]
    NotFound { reference: String, registry: String },
    #[error(
        "registry {registry} refused {reference}: unauthorized; give credentials that may pull (or push) it (a kubernetes.io/dockerconfigjson Secret, --username/--password or --docker-config)"
    )]
    Unauthorized { reference: String, registry: String },
    #[error(
        "{reference} is not a Wasm OCI artifact: {reason}; publish the module with `kubewasm push` (or wkg), whose config is application/vnd.wasm.config.v0+json and layer application/wasm"
    )]
    NotWasm { reference: String, reason: String },
    #[error(
        "{reference}: digest mismatch, expected {expected}, got {actual}; the bytes served are not the ones named, so they are refused (pin the digest the registry holds, or check what sits between it and this host)"
    )]
    DigestMismatch {
        reference: String,
        expected: String,
        actual: String,
    },
    #[error(
        "{reference}: the module is {size} bytes, over the limit of {limit}; raise the module size limit or make the module smaller"
    )]
    TooLarge {
        reference: String,
        size: u64,
        limit: u64,
    },
    #[error("registry {registry} failed for {reference}: {}", chain(.source))]
    Registry {
        reference: String,
        registry: String,
        source: BoxError,
    },
    /// A status the protocol does not explain; `message` is an excerpt of
    /// what the registry said.
    #[error(
        "registry {registry} answered HTTP {status} for {reference}: {message}; the registry's logs say why"
    )]
    Status {
        reference: String,
        registry: String,
        status: u16,
        message: String,
    },
    #[error(
        "registry {registry} sent a {what} over {limit} bytes for {reference}; refused without reading the rest (a {what} is far smaller: the registry is broken or hostile)"
    )]
    BodyTooLarge {
        reference: String,
        registry: String,
        what: &'static str,
        limit: u64,
    },
    #[error(
        "pulling {reference} from registry {registry} took longer than the {} deadline; check that the registry is up and answering at speed, or raise the pull deadline", humantime::format_duration(*.deadline)
    )]
    Deadline {
        reference: String,
        registry: String,
        deadline: Duration,
    },
    /// The registry broke the distribution protocol (a token service that
    /// sends no token, a realm that is not a URL); `reason` is an excerpt.
    #[error("registry {registry} broke the distribution protocol for {reference}: {reason}")]
    Protocol {
        reference: String,
        registry: String,
        reason: String,
    },
    #[error("bad registry CA {source_name}: {reason}; give a PEM file of CERTIFICATE blocks")]
    Ca { source_name: String, reason: String },
    #[error("cannot build the registry client: {source}")]
    Client {
        source: oci_client::errors::OciDistributionError,
    },
    #[error("cannot build the registry client: {source}")]
    Http { source: reqwest::Error },
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The signature policy refused the module (or its signatures could
    /// not be read): the Plugin's `SignatureRefused`.
    #[error(transparent)]
    Signature(#[from] SignatureError),
    #[error("cannot write OCI cache entry for {digest} under {dir}: {source}")]
    Cache {
        digest: String,
        dir: PathBuf,
        source: std::io::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `sha256:<hex>` of `bytes`: the OCI digest.
pub fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", crate::runtime::engine::content_digest(bytes))
}

/// Limits and where pulled modules are kept.
#[derive(Debug, Clone)]
pub struct PullOptions {
    /// Largest module layer accepted: refused from the manifest's size
    /// before its download, and cut off if the registry sends more.
    pub max_module_bytes: u64,
    /// The digest cache; `None` pulls without one (the CLI).
    pub cache: Option<ModuleCache>,
    /// Which modules must carry a cosign signature by which keys; a pull
    /// of such a module fails unless one verifies. Empty by default.
    pub signatures: SignaturePolicy,
    /// The longest a whole pull may take (manifest, module and
    /// signatures, redirects and token requests included): the transport's
    /// timeouts bound each wait, and a registry sending a byte just before
    /// each would hold a pull forever without this.
    pub deadline: Duration,
    /// The most signatures read for one module; a signature manifest with
    /// more is refused, none of them read.
    pub max_signatures: usize,
    /// The precompiled layer a pull also takes, when the artifact has one
    /// for this host; `None` (the CLI) takes none.
    pub precompiled: Option<PrecompiledWanted>,
}

impl Default for PullOptions {
    fn default() -> Self {
        Self {
            max_module_bytes: DEFAULT_MAX_MODULE_BYTES,
            cache: None,
            signatures: SignaturePolicy::default(),
            deadline: DEFAULT_PULL_DEADLINE,
            max_signatures: DEFAULT_MAX_SIGNATURES,
            precompiled: None,
        }
    }
}

/// A pulled module.
#[derive(Debug, Clone)]
pub struct Pulled {
    /// The reference as asked for.
    pub reference: String,
    /// The manifest's digest (`sha256:...`): what a tag resolved to; write
    /// it to status and pin it.
    pub digest: String,
    /// `registry/repository@digest`: the pinned form of `reference`.
    pub pinned: String,
    /// The module layer's digest (the content hash of `bytes`).
    pub layer_digest: String,
    /// The signature that verified it, when the policy required one.
    pub verified: Option<Verified>,
    pub bytes: Vec<u8>,
    /// Where the cache keeps it (when there is a cache).
    pub path: Option<PathBuf>,
    /// Served from the cache with no registry request.
    pub from_cache: bool,
    /// The precompiled layer for this host's engine, or why there is none.
    pub precompiled: PrecompiledPull,
}

/// A pushed module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pushed {
    /// The manifest's digest: pull `pinned` to get exactly this module.
    pub digest: String,
    /// `REF@digest` (the reference as given, with the digest appended).
    pub pinned: String,
    pub layer_digest: String,
}

/// Pulls and pushes plugin modules.
#[derive(Debug, Clone)]
pub struct OciClient {
    transport: Transport,
    options: PullOptions,
}

fn parse(reference: &str) -> Result<Reference> {
    reference.parse().map_err(|source| Error::Reference {
        reference: reference.to_owned(),
        source,
    })
}

impl OciClient {
    pub fn new(transport: Transport, options: PullOptions) -> Self {
        Self { transport, options }
    }

    pub fn options(&self) -> &PullOptions {
        &self.options
    }

    /// Pulls the module `reference` names. A digest reference whose
    /// manifest and module are in the cache, verified for this registry,
    /// repository and these credentials, is served from it without
    /// touching the network; a tag is resolved at the registry once, and
    /// the returned [`Pulled::digest`] is what it resolved to. When the
    /// signature policy names keys for `reference`, the module is returned
    /// only if one of them verifies its signature, and it enters the cache
    /// only then; a cached module is verified again before it is served.
    pub async fn pull(&self, reference: &str, credentials: &Credentials) -> Result<Pulled> {
        self.pull_with_keys(reference, credentials, &[]).await
    }

    /// [`OciClient::pull`], where one of `keys` (a Plugin's own) must also
    /// verify the module's signature, besides the policy's; within the
    /// same deadline, and the module is cached only once both verify.
    pub async fn pull_with_keys(
        &self,
        reference: &str,
        credentials: &Credentials,
        keys: &[PublicKey],
    ) -> Result<Pulled> {
        let parsed = parse(reference)?;
        let deadline = self.options.deadline;
        let until = tokio::time::Instant::now() + deadline;
        let pull = self.pull_within_deadline(reference, &parsed, credentials, keys, until);
        match tokio::time::timeout_at(until, pull).await {
            Ok(result) => result,
            Err(_) => {
                let registry = parsed.resolve_registry().to_owned();
                tracing::warn!(reference, registry = %registry, deadline = ?deadline, "OCI pull over its deadline; given up");
                Err(Error::Deadline {
                    reference: reference.to_owned(),
                    registry,
                    deadline,
                })
            }
        }
    }

    async fn pull_within_deadline(
        &self,
        reference: &str,
        parsed: &Reference,
        credentials: &Credentials,
        keys: &[PublicKey],
        until: tokio::time::Instant,
    ) -> Result<Pulled> {
        let mut key_sets: Vec<&[PublicKey]> = Vec::new();
        key_sets.extend(self.options.signatures.required_keys(reference));
        if !keys.is_empty() {
            key_sets.push(keys);
        }
        let grant = self.grant(parsed, credentials);
        if let Some(digest) = parsed.digest()
            && let Some(grant) = &grant
            && let Some(mut pulled) = self.cached(reference, parsed, digest, grant)?
        {
            if !key_sets.is_empty() {
                let mut session = Session::new(&self.transport, reference, parsed, credentials)?;
                let verified = self.verify_all(&mut session, &pulled, &key_sets).await?;
                self.record_signatures(reference, digest, &verified);
                pulled.verified = verified.into_iter().next();
            }
            tracing::info!(reference, digest = %pulled.digest, "OCI module served from the digest cache");
            return Ok(pulled);
        }
        let mut session = Session::new(&self.transport, reference, parsed, credentials)?;
        let tag_or_digest = parsed.digest().or(parsed.tag()).unwrap_or("latest");
        let body = session
            .manifest(tag_or_digest, artifact::ACCEPTED_MANIFESTS)
            .await?;
        // The digest recorded is the one computed over the bytes read.
        let digest = sha256_digest(&body);
        if let Some(expected) = parsed.digest()
            && expected != digest
        {
            return Err(Error::DigestMismatch {
                reference: reference.to_owned(),
                expected: expected.to_owned(),
                actual: digest,
            });
        }
        let (layer, precompiled) = self.layers(reference, &body)?;
        // A layer the cache holds is used only under a grant for this
        // manifest: a registry naming a cached layer in a manifest of its
        // own must still serve the layer's bytes ([`access`]).
        let cache = self.options.cache.as_ref();
        let granted = match (cache, &grant) {
            (Some(cache), Some(grant)) => cache.granted(&digest, grant),
            _ => false,
        };
        let cached = cache
            .filter(|_| granted)
            .and_then(|c| c.module(&layer.digest));
        let (bytes, module_cached) = match cached {
            Some(bytes) => (bytes, true),
            None => (self.download(&mut session, reference, &layer).await?, false),
        };
        let mut pulled = Pulled {
            reference: reference.to_owned(),
            pinned: pinned(parsed, &digest),
            digest,
            layer_digest: layer.digest,
            verified: None,
            bytes,
            path: None,
            from_cache: false,
            precompiled: PrecompiledPull::NotAsked,
        };
        // Verified before anything is stored: a module that fails never
        // takes cache space nor evicts another.
        let verified = self.verify_all(&mut session, &pulled, &key_sets).await?;
        // After the signatures: a module refused costs no precompiled
        // download.
        pulled.precompiled = self
            .precompiled(
                &mut session,
                reference,
                &pulled.layer_digest,
                &precompiled,
                until,
            )
            .await;
        let stored = Stored {
            manifest: &body,
            module_cached,
            grant: grant.filter(|_| !granted),
        };
        pulled.path = self.store(&pulled, stored)?;
        self.record_signatures(reference, &pulled.digest, &verified);
        pulled.verified = verified.into_iter().next();
        tracing::info!(
            reference,
            registry = %session.registry(),
            digest = %pulled.digest,
            layer_digest = %pulled.layer_digest,
            bytes = pulled.bytes.len(),
            module_cached,
            "OCI module pulled"
        );
        Ok(pulled)
    }

    /// Who this pull is, to the cache: `None` without a cache, or when the
    /// credentials' identity cannot be computed (then the cache neither
    /// serves nor records: every pull asks its registry).
    fn grant(&self, parsed: &Reference, credentials: &Credentials) -> Option<Grant> {
        let cache = self.options.cache.as_ref()?;
        Some(Grant {
            origin: self.transport.origin(parsed.resolve_registry())?,
            repository: parsed.repository().to_owned(),
            identity: cache.identity(credentials)?,
        })
    }

    /// A pinned pull from the cache alone; `None` on a miss: not cached,
    /// a corrupt entry (deleted by the cache), or not verified for `grant`.
    fn cached(
        &self,
        reference: &str,
        parsed: &Reference,
        digest: &str,
        grant: &Grant,
    ) -> Result<Option<Pulled>> {
        let Some(cache) = &self.options.cache else {
            return Ok(None);
        };
        let Some(body) = cache.manifest(digest) else {
            return Ok(None);
        };
        if !cache.granted(digest, grant) {
            tracing::info!(
                reference,
                digest,
                origin = %grant.origin,
                repository = %grant.repository,
                "OCI module cached but not verified for this registry, repository and credentials; asking the registry"
            );
            return Ok(None);
        }
        let layer = self.wasm_layer(reference, &body)?;
        let Some(bytes) = cache.module(&layer.digest) else {
            return Ok(None);
        };
        Ok(Some(Pulled {
            reference: reference.to_owned(),
            digest: digest.to_owned(),
            pinned: pinned(parsed, digest),
            layer_digest: layer.digest.clone(),
            path: cache.module_path(&layer.digest),
            verified: None,
            bytes,
            from_cache: true,
            precompiled: PrecompiledPull::NotAsked,
        }))
    }

    fn wasm_layer(&self, reference: &str, body: &[u8]) -> Result<artifact::Descriptor> {
        self.layers(reference, body).map(|(layer, _)| layer)
    }

    /// The module layer of the manifest `body` (checked) and its
    /// precompiled layers (checked when one is downloaded).
    fn layers(
        &self,
        reference: &str,
        body: &[u8],
    ) -> Result<(artifact::Descriptor, Vec<artifact::Precompiled>)> {
        // The reason quotes the registry's media types and JSON errors.
        let artifact::Layers {
            wasm: layer,
            precompiled,
        } = artifact::layers(body).map_err(|reason| Error::NotWasm {
            reference: reference.to_owned(),
            reason: crate::names::excerpt(&reason),
        })?;
        if cache::sha256_hex(&layer.digest).is_none() {
            return Err(Error::NotWasm {
                reference: reference.to_owned(),
                reason: format!(
                    "its layer digest {:?} is not sha256",
                    crate::names::excerpt(&layer.digest)
                ),
            });
        }
        if layer.size > self.options.max_module_bytes {
            return Err(Error::TooLarge {
                reference: reference.to_owned(),
                size: layer.size,
                limit: self.options.max_module_bytes,
            });
        }
        Ok((layer, precompiled))
    }

    /// Streams the module layer under the module limit; see
    /// [`Self::download_capped`].
    async fn download(
        &self,
        session: &mut Session<'_>,
        reference: &str,
        layer: &artifact::Descriptor,
    ) -> Result<Vec<u8>> {
        self.download_capped(session, reference, layer, self.options.max_module_bytes)
            .await
    }

    /// Streams the layer, refusing more bytes than `limit` (whatever the
    /// manifest said) and bytes that do not hash to the layer's digest.
    async fn download_capped(
        &self,
        session: &mut Session<'_>,
        reference: &str,
        layer: &artifact::Descriptor,
        limit: u64,
    ) -> Result<Vec<u8>> {
        let too_large = |size: u64| Error::TooLarge {
            reference: reference.to_owned(),
            size,
            limit,
        };
        let mut response = session.blob(&layer.digest).await?;
        if let Some(len) = response.content_length()
            && len > limit
        {
            return Err(too_large(len));
        }
        // The manifest's size is at most the limit (checked), but a lie.
        let mut bytes = Vec::with_capacity(usize::try_from(layer.size).unwrap_or(0));
        let mut hasher = Sha256::new();
        while let Some(chunk) = session.chunk(&mut response).await? {
            if (bytes.len() + chunk.len()) as u64 > limit {
                return Err(too_large((bytes.len() + chunk.len()) as u64));
            }
            hasher.update(&chunk);
            bytes.extend_from_slice(&chunk);
        }
        let actual = format!(
            "sha256:{}",
            hasher
                .finalize()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        );
        if actual != layer.digest {
            return Err(Error::DigestMismatch {
                reference: reference.to_owned(),
                expected: layer.digest.clone(),
                actual,
            });
        }
        Ok(bytes)
    }

    /// Writes the module, then its manifest (so a cached manifest's module
    /// is there too), then the grant (so a grant's module is there), and
    /// trims the cache; returns the module's path.
    fn store(&self, pulled: &Pulled, stored: Stored<'_>) -> Result<Option<PathBuf>> {
        let Some(cache) = &self.options.cache else {
            return Ok(None);
        };
        let failed = |digest: &str, source| Error::Cache {
            digest: digest.to_owned(),
            dir: cache.dir().to_owned(),
            source,
        };
        let module_path = if stored.module_cached {
            cache.module_path(&pulled.layer_digest).unwrap_or_default()
        } else {
            cache
                .put_module(&pulled.layer_digest, &pulled.bytes)
                .map_err(|e| failed(&pulled.layer_digest, e))?
        };
        let manifest_path = cache
            .put_manifest(&pulled.digest, stored.manifest)
            .map_err(|e| failed(&pulled.digest, e))?;
        let mut fresh = vec![module_path.clone(), manifest_path];
        if let Some(grant) = stored.grant {
            fresh.push(
                cache
                    .put_grant(&pulled.digest, grant)
                    .map_err(|e| failed(&pulled.digest, e))?,
            );
        }
        let fresh: Vec<&Path> = fresh.iter().map(PathBuf::as_path).collect();
        cache.evict(&fresh);
        Ok(Some(module_path))
    }

    /// Publishes `module` (a `.wasm` component or core module) under
    /// `reference` as a Wasm OCI artifact.
    pub async fn push(
        &self,
        module: &[u8],
        reference: &str,
        credentials: &Credentials,
    ) -> Result<Pushed> {
        self.push_with(module, None, reference, credentials).await
    }

    /// [`OciClient::push`], with `precompiled` (the module compiled for an
    /// engine) as a second layer: one manifest, so a signature of it covers
    /// both layers.
    pub async fn push_with(
        &self,
        module: &[u8],
        precompiled: Option<&PrecompiledLayer>,
        reference: &str,
        credentials: &Credentials,
    ) -> Result<Pushed> {
        let parsed = parse(reference)?;
        let Some(os) = artifact::wasm_os(module) else {
            return Err(Error::NotWasm {
                reference: reference.to_owned(),
                reason: "the file is not a WebAssembly binary (no \\0asm header)".to_owned(),
            });
        };
        let registry = parsed.resolve_registry().to_owned();
        let layer_digest = sha256_digest(module);
        let created = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
        let (config, mut manifest) =
            artifact::build(module.len() as u64, &layer_digest, os, created);
        let precompiled = precompiled.map(|p| {
            let digest = sha256_digest(&p.bytes);
            manifest.layers.push(artifact::precompiled_layer(
                p.bytes.len() as u64,
                &digest,
                &p.engine_key,
                &layer_digest,
                &p.key_id,
            ));
            (p, digest)
        });
        // Serializing a struct of strings cannot fail.
        let body = serde_json::to_vec(&manifest).unwrap_or_default();
        let digest = sha256_digest(&body);
        let config_digest = sha256_digest(&config);

        let client = self.transport.client()?;
        let fail = |e| transport::classify(reference, &registry, e);
        // Authenticates for push (oci-client then reuses the token).
        client
            .auth(
                &parsed,
                &credentials.to_registry_auth(),
                oci_client::RegistryOperation::Push,
            )
            .await
            .map_err(fail)?;
        client
            .push_blob(&parsed, module.to_vec(), &layer_digest)
            .await
            .map_err(fail)?;
        if let Some((p, digest)) = &precompiled {
            client
                .push_blob(&parsed, p.bytes.clone(), digest)
                .await
                .map_err(fail)?;
        }
        client
            .push_blob(&parsed, config, &config_digest)
            .await
            .map_err(fail)?;
        client
            .push_manifest_raw(
                &parsed,
                body,
                http::HeaderValue::from_static(artifact::MANIFEST_MEDIA_TYPE),
            )
            .await
            .map_err(fail)?;
        tracing::info!(
            reference,
            digest = %digest,
            layer_digest = %layer_digest,
            precompiled = precompiled.as_ref().map(|(p, _)| p.engine_key.as_str()),
            "OCI module pushed"
        );
        Ok(Pushed {
            pinned: format!(
                "{}@{digest}",
                reference.split('@').next().unwrap_or(reference)
            ),
            digest,
            layer_digest,
        })
    }

    /// [`OciClient::push`] of a file.
    pub async fn push_file(
        &self,
        path: &Path,
        reference: &str,
        credentials: &Credentials,
    ) -> Result<Pushed> {
        let module = tokio::fs::read(path).await.map_err(|source| Error::Read {
            path: path.to_owned(),
            source,
        })?;
        self.push(&module, reference, credentials).await
    }
}

/// What [`OciClient::store`] writes besides the module.
struct Stored<'a> {
    manifest: &'a [u8],
    /// The module's layer is in the cache already.
    module_cached: bool,
    /// A grant to record (`None`: recorded already, or no cache identity).
    grant: Option<Grant>,
}

fn pinned(parsed: &Reference, digest: &str) -> String {
    format!("{}/{}@{digest}", parsed.registry(), parsed.repository())
}
