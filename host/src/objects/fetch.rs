//! A Plugin's module bytes, from where its spec says: a file of the plugin
//! folder, a ConfigMap's `binaryData` key, or an OCI registry. An OCI
//! artifact's precompiled layer for this host's engine, when its MAC
//! verifies under the host's artifact key, goes into the compile cache, so
//! the install maps it instead of compiling.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{ConfigMap, Secret};

use crate::crd::{ModuleSource, OciModule};
use crate::lru_files::Pin;
use crate::oci::{self, Credentials, OciClient, PrecompiledPull, Reference};
use crate::runtime::cache::CompileCache;
use crate::source::kube::ServiceAccountRef;

use super::reasons::{self, Reason};
use super::tenant::get_as;

/// Why the module could not be had; each names the source and what to do.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("module file {path}: {source} (is it in the host's plugin folder?)")]
    File {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("module file {0:?} must be a file name in the plugin folder, without a path")]
    FileName(String),
    #[error("the host runs without a cluster: configMap and oci modules need one")]
    NoCluster,
    #[error("ConfigMap {namespace}/{name}: {source}")]
    ConfigMap {
        namespace: String,
        name: String,
        source: kube::Error,
    },
    #[error(
        "ConfigMap {namespace}/{name} has no binaryData key {key:?} (modules are binary: `kubectl create configmap --from-file` puts .wasm files there)"
    )]
    MissingKey {
        namespace: String,
        name: String,
        key: String,
    },
    #[error("OCI module {reference}: {message}")]
    Oci { reference: String, message: String },
    #[error(transparent)]
    Pull(#[from] oci::Error),
    #[error(
        "pull Secret {namespace}/{name}: {message} (a Secret of type kubernetes.io/dockerconfigjson with the registry's credentials)"
    )]
    PullSecret {
        namespace: String,
        name: String,
        message: String,
    },
    #[error("the module source names none of oci, configMap or file")]
    NoSource,
    /// The tenant's ServiceAccount may not read what its plugin names.
    #[error(
        "{account} may not get {what} (a NamespacedPlugin's references are read as its namespace's ServiceAccount): bind it a Role allowing it, or name another"
    )]
    TenantForbidden {
        account: ServiceAccountRef,
        what: String,
    },
}

impl FetchError {
    /// The condition reason this failure reports.
    pub fn reason(&self) -> Reason {
        match self {
            // A registry that cannot be read for the signature is a pull
            // failure; a signature that is missing or does not verify is a
            // refusal.
            Self::Pull(oci::Error::Signature(e))
                if !matches!(e, oci::SignatureError::Registry { .. }) =>
            {
                reasons::SIGNATURE_REFUSED
            }
            Self::Oci { .. } | Self::Pull(_) | Self::PullSecret { .. } => reasons::PULL_FAILED,
            Self::TenantForbidden { .. } => reasons::TENANT_FORBIDDEN,
            _ => reasons::FETCH_FAILED,
        }
    }
}

/// A fetched module: its bytes and, for OCI, the reference pinned by
/// digest that it came from.
pub struct Fetched {
    pub bytes: Vec<u8>,
    /// For OCI: the manifest's digest (what the spec pins or a tag
    /// resolved to).
    pub manifest_digest: Option<String>,
    pub resolved_reference: Option<String>,
    /// Keep an OCI module's cache entries from eviction while its plugin
    /// loads and then serves (a restart with the registry down needs them).
    pub pins: Vec<Pin>,
}

/// What fetching needs: the plugin folder, the cluster, and the namespace
/// a ConfigMap or pull Secret without one is read from.
pub struct Fetcher {
    pub folder: PathBuf,
    pub client: Option<kube::Client>,
    /// Pulls OCI modules (a digest cache under the host's cache folder).
    pub oci: Option<OciClient>,
    /// The optimized engine's compile cache: where a pulled precompiled
    /// layer goes once its MAC verifies.
    pub compiled: Option<CompileCache>,
}

impl Fetcher {
    /// The module of `source`; `namespace` is the default namespace of a
    /// ConfigMap or Secret it names (the host's, or a NamespacedPlugin's
    /// own, which its CEL rules and [`super::tenant::check_references`]
    /// keep it to). With `account` (a tenant's), every object is read as
    /// that ServiceAccount, never with the host's credentials. `plugin`
    /// names the plugin in logs.
    pub async fn fetch(
        &self,
        plugin: &str,
        source: &ModuleSource,
        namespace: &str,
        account: Option<&ServiceAccountRef>,
    ) -> Result<Fetched, FetchError> {
        if let Some(file) = &source.file {
            return self.file(file).map(|bytes| Fetched {
                bytes,
                manifest_digest: None,
                resolved_reference: None,
                pins: Vec::new(),
            });
        }
        if let Some(cm) = &source.config_map {
            let client = self.client.clone().ok_or(FetchError::NoCluster)?;
            let ns = cm.namespace.as_deref().unwrap_or(namespace);
            let map = get_as::<ConfigMap>(&client, ns, &cm.name, account)
                .await
                .map_err(|source| {
                    forbidden(account, &source, || format!("configmaps {ns}/{}", cm.name))
                        .unwrap_or_else(|| FetchError::ConfigMap {
                            namespace: ns.to_owned(),
                            name: cm.name.clone(),
                            source,
                        })
                })?;
            let bytes = map
                .binary_data
                .and_then(|mut d| d.remove(&cm.key))
                .ok_or_else(|| FetchError::MissingKey {
                    namespace: ns.to_owned(),
                    name: cm.name.clone(),
                    key: cm.key.clone(),
                })?;
            return Ok(Fetched {
                bytes: bytes.0,
                manifest_digest: None,
                resolved_reference: None,
                pins: Vec::new(),
            });
        }
        if let Some(module) = &source.oci {
            return self.pull(plugin, module, namespace, account).await;
        }
        Err(FetchError::NoSource)
    }

    /// Pulls an OCI module: by digest from the cache when it holds it (the
    /// registry may be down), else from the registry with the pull
    /// Secret's credentials; every byte is checked against its digest.
    async fn pull(
        &self,
        plugin: &str,
        module: &OciModule,
        namespace: &str,
        account: Option<&ServiceAccountRef>,
    ) -> Result<Fetched, FetchError> {
        let client = self.oci.as_ref().ok_or_else(|| FetchError::Oci {
            reference: module.reference.clone(),
            message: "this host pulls no OCI modules (it runs without a cache folder)".into(),
        })?;
        let credentials = match &module.pull_secret {
            None => Credentials::Anonymous,
            Some(secret) => {
                let ns = secret.namespace.as_deref().unwrap_or(namespace);
                let refuse = |message: String| FetchError::PullSecret {
                    namespace: ns.to_owned(),
                    name: secret.name.clone(),
                    message,
                };
                let kube = self.client.clone().ok_or(FetchError::NoCluster)?;
                let found = get_as::<Secret>(&kube, ns, &secret.name, account)
                    .await
                    .map_err(|e| {
                        forbidden(account, &e, || format!("secrets {ns}/{}", secret.name))
                            .unwrap_or_else(|| refuse(e.to_string()))
                    })?;
                let config = found
                    .data
                    .and_then(|mut d| d.remove(".dockerconfigjson"))
                    .ok_or_else(|| refuse("it has no .dockerconfigjson key".into()))?;
                let registry = module
                    .reference
                    .parse::<Reference>()
                    .map(|r| r.resolve_registry().to_owned())
                    .map_err(|e| refuse(format!("the reference does not parse: {e}")))?;
                oci::credentials_from_docker_config(&config.0, &registry)
                    .map_err(|e| refuse(e.to_string()))?
            }
        };
        // The Plugin's own keys verify within the pull, so that the module
        // is cached only once they have, and under the pull's deadline.
        let keys = if module.verify_keys.is_empty() {
            Vec::new()
        } else {
            self.verify_keys(module, namespace, account).await?
        };
        let mut pulled = client
            .pull_with_keys(&module.reference, &credentials, &keys)
            .await?;
        let precompiled = std::mem::replace(&mut pulled.precompiled, PrecompiledPull::NotAsked);
        self.adopt(plugin, &pulled.reference, &pulled.layer_digest, precompiled)
            .await;
        let pins = client
            .options()
            .cache
            .as_ref()
            .map(|c| c.pin(&pulled.digest, &pulled.layer_digest))
            .unwrap_or_default();
        Ok(Fetched {
            bytes: pulled.bytes,
            manifest_digest: Some(pulled.digest.clone()),
            resolved_reference: Some(pulled.pinned),
            pins,
        })
    }

    /// Puts a pulled precompiled layer into the compile cache if its MAC
    /// verifies for module `layer_digest` and this engine under the host's
    /// key; logs why not otherwise (the install then compiles).
    async fn adopt(
        &self,
        plugin: &str,
        reference: &str,
        layer_digest: &str,
        precompiled: PrecompiledPull,
    ) {
        let (engine_key, bytes) = match precompiled {
            PrecompiledPull::Fetched { engine_key, bytes } => (engine_key, bytes),
            PrecompiledPull::NotAsked | PrecompiledPull::Absent => return,
            PrecompiledPull::AlreadyCompiled => {
                tracing::debug!(
                    plugin,
                    reference,
                    "precompiled layer not pulled: the compile cache holds the module's artifact"
                );
                return;
            }
            why @ (PrecompiledPull::OtherEngine { .. }
            | PrecompiledPull::OtherKey { .. }
            | PrecompiledPull::OtherModule { .. }) => {
                tracing::info!(plugin, reference, reason = %why, "precompiled layer not for this host; compiling the module");
                return;
            }
            why @ (PrecompiledPull::TooLarge { .. } | PrecompiledPull::Failed { .. }) => {
                tracing::warn!(plugin, reference, reason = %why, "precompiled layer refused; compiling the module");
                return;
            }
        };
        let Some(cache) = self.compiled.clone() else {
            return;
        };
        let digest = layer_digest
            .strip_prefix("sha256:")
            .unwrap_or(layer_digest)
            .to_owned();
        let size = bytes.len();
        // A MAC over tens of MB, and a file write: off the async threads.
        let adopted = tokio::task::spawn_blocking(move || cache.adopt(&digest, &bytes)).await;
        match adopted {
            Ok(Ok(path)) => tracing::info!(
                plugin,
                reference,
                engine_key = %engine_key,
                bytes = size,
                path = %path.display(),
                "precompiled layer verified with the artifact key; the module is mapped, not compiled"
            ),
            Ok(Err(e)) => tracing::warn!(
                plugin,
                reference,
                engine_key = %engine_key,
                reason = %e,
                "precompiled layer not used; compiling the module (native code is mapped only when its MAC verifies under this host's artifact key)"
            ),
            Err(e) => {
                tracing::warn!(plugin, reference, error = %e, "precompiled layer check failed; compiling the module")
            }
        }
    }

    /// The public keys a Plugin names, read from their ConfigMaps.
    async fn verify_keys(
        &self,
        module: &OciModule,
        namespace: &str,
        account: Option<&ServiceAccountRef>,
    ) -> Result<Vec<oci::PublicKey>, FetchError> {
        let kube = self.client.clone().ok_or(FetchError::NoCluster)?;
        let mut keys = Vec::with_capacity(module.verify_keys.len());
        for key in &module.verify_keys {
            let ns = key.namespace.as_deref().unwrap_or(namespace);
            let source = format!("ConfigMap {ns}/{} key {}", key.config_map, key.key);
            let refuse = |message: String| FetchError::Oci {
                reference: module.reference.clone(),
                message: format!("verification key {source}: {message}"),
            };
            let map = get_as::<ConfigMap>(&kube, ns, &key.config_map, account)
                .await
                .map_err(|e| {
                    forbidden(account, &e, || {
                        format!("configmaps {ns}/{}", key.config_map)
                    })
                    .unwrap_or_else(|| refuse(e.to_string()))
                })?;
            let pem = map
                .data
                .and_then(|mut d| d.remove(&key.key))
                .ok_or_else(|| refuse("no such data key".into()))?;
            keys.push(oci::PublicKey::from_pem(&pem, &source).map_err(|e| refuse(e.to_string()))?);
        }
        Ok(keys)
    }

    fn file(&self, name: &str) -> Result<Vec<u8>, FetchError> {
        // The CRD's rule already refuses paths; the host does not rely on it.
        if name.is_empty() || Path::new(name).file_name() != Some(std::ffi::OsStr::new(name)) {
            return Err(FetchError::FileName(name.to_owned()));
        }
        let path = self.folder.join(name);
        std::fs::read(&path).map_err(|source| FetchError::File { path, source })
    }
}

/// A tenant's read refused by the API server (403), as its own error:
/// the fix is the tenant's RBAC, not the host's.
fn forbidden(
    account: Option<&ServiceAccountRef>,
    error: &kube::Error,
    what: impl FnOnce() -> String,
) -> Option<FetchError> {
    match (account, error) {
        (Some(account), kube::Error::Api(s)) if s.code == 403 => {
            Some(FetchError::TenantForbidden {
                account: account.clone(),
                what: what(),
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oci::SignatureError;

    /// A refused signature is its own reason on status; a registry that
    /// cannot be read for it stays a pull failure (retried, not refused).
    #[test]
    fn signature_refusals_report_signature_refused() {
        let refused = FetchError::Pull(oci::Error::Signature(SignatureError::Unsigned {
            reference: "reg.test/x:1".into(),
            tag: "sha256-00.sig".into(),
        }));
        assert_eq!(refused.reason(), reasons::SIGNATURE_REFUSED);
        let down = FetchError::Pull(oci::Error::Signature(SignatureError::Registry {
            reference: "reg.test/x:1".into(),
            source: Box::new(oci::Error::NotFound {
                reference: "reg.test/x:1".into(),
                registry: "reg.test".into(),
            }),
        }));
        assert_eq!(down.reason(), reasons::PULL_FAILED);
    }
}
