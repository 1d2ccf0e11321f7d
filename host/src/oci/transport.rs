//! How the registry is reached: HTTPS on the system roots plus the
//! operator's CA, plain HTTP only for registries named for it, and the
//! rustls provider kube already uses. Pulls read through a reqwest client
//! of their own ([`Transport::http_client`], used by [`super::registry`]),
//! since oci-client reads every body whole; pushes go through oci-client
//! ([`Transport::client`]). Both are built from the same settings. Also
//! sorts both clients' errors into the causes an operator can act on.

use std::error::Error as StdError;
use std::sync::Once;
use std::time::Duration;

use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::errors::{DigestError, OciDistributionError, OciErrorCode};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use super::Error;

/// Redirects a pull follows for one request (a registry sends blobs to
/// its storage, once).
pub const MAX_REDIRECTS: usize = 5;

const USER_AGENT: &str = concat!("kubewasm/", env!("CARGO_PKG_VERSION"));

/// Transport settings shared by every pull and push of a client.
#[derive(Debug, Clone)]
pub struct Transport {
    /// CA certificates (DER) trusted besides the system roots: a private
    /// registry's CA. Add them with [`Transport::with_ca_pem`].
    pub extra_roots: Vec<Vec<u8>>,
    /// Registries (`host[:port]`, as in references) reached over plain
    /// HTTP, for local development. Empty by default: HTTPS everywhere.
    pub plain_http: Vec<String>,
    pub connect_timeout: Duration,
    /// Longest wait for the next bytes of a response.
    pub read_timeout: Duration,
}

impl Default for Transport {
    fn default() -> Self {
        Self {
            extra_roots: Vec::new(),
            plain_http: Vec::new(),
            connect_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(60),
        }
    }
}

impl Transport {
    /// Trusts the certificates of a PEM bundle besides the system roots.
    /// `source` names the bundle in the error (a file, a Secret key).
    pub fn with_ca_pem(mut self, pem: &[u8], source: &str) -> Result<Self, Error> {
        let bad = |reason: String| Error::Ca {
            source_name: source.to_owned(),
            reason,
        };
        let mut found = 0;
        for cert in CertificateDer::pem_slice_iter(pem) {
            let cert = cert.map_err(|e| bad(format!("not a PEM certificate bundle ({e})")))?;
            self.extra_roots.push(cert.as_ref().to_vec());
            found += 1;
        }
        if found == 0 {
            return Err(bad("it holds no PEM CERTIFICATE block".to_owned()));
        }
        Ok(self)
    }

    /// Reaches `registry` over plain HTTP (never the default).
    pub fn with_plain_http(mut self, registry: &str) -> Self {
        self.plain_http.push(registry.to_owned());
        self
    }

    /// `http` for a registry named for plain HTTP, else `https`: the
    /// exact `host[:port]` match oci-client's `HttpsExcept` makes.
    pub(crate) fn scheme_for(&self, registry: &str) -> &'static str {
        if self.plain_http.iter().any(|r| r == registry) {
            "http"
        } else {
            "https"
        }
    }

    /// `scheme://host:port` of `registry` as a pull reaches it (the
    /// origin a cache grant names); `None` if it makes no URL.
    pub(crate) fn origin(&self, registry: &str) -> Option<String> {
        let scheme = self.scheme_for(registry);
        let url = reqwest::Url::parse(&format!("{scheme}://{registry}/")).ok()?;
        Some(format!(
            "{scheme}://{}:{}",
            url.host_str()?,
            url.port_or_known_default()?
        ))
    }

    /// The client a pull reads with: oci-client's TLS and timeout settings,
    /// at most [`MAX_REDIRECTS`] redirects and none from https to plain
    /// http, and no `Referer` (a redirect target, often another host, is
    /// not told which repository and digest led there). reqwest drops the
    /// `Authorization` header on a redirect to another host, port or
    /// scheme, so credentials stay with the registry they are for.
    pub(crate) fn http_client(&self) -> Result<reqwest::Client, Error> {
        install_crypto_provider();
        let roots = self
            .extra_roots
            .iter()
            .map(|der| reqwest::Certificate::from_der(der))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|source| Error::Http { source })?;
        reqwest::Client::builder()
            .tls_certs_merge(roots)
            .connect_timeout(self.connect_timeout)
            .read_timeout(self.read_timeout)
            .user_agent(USER_AGENT)
            .referer(false)
            .redirect(reqwest::redirect::Policy::custom(|attempt| {
                if attempt.previous().len() > MAX_REDIRECTS {
                    return attempt.error(format!("more than {MAX_REDIRECTS} redirects"));
                }
                let from_https = attempt
                    .previous()
                    .last()
                    .is_some_and(|url| url.scheme() == "https");
                if from_https && attempt.url().scheme() != "https" {
                    return attempt.error("a redirect from https to plain http is refused");
                }
                attempt.follow()
            }))
            .build()
            .map_err(|source| Error::Http { source })
    }

    pub(crate) fn client(&self) -> Result<oci_client::Client, Error> {
        install_crypto_provider();
        let config = ClientConfig {
            protocol: if self.plain_http.is_empty() {
                ClientProtocol::Https
            } else {
                ClientProtocol::HttpsExcept(self.plain_http.clone())
            },
            extra_root_certificates: self
                .extra_roots
                .iter()
                .map(|der| Certificate {
                    encoding: CertificateEncoding::Der,
                    data: der.clone(),
                })
                .collect(),
            connect_timeout: Some(self.connect_timeout),
            read_timeout: Some(self.read_timeout),
            // A module is one artifact: an index is refused, not resolved.
            platform_resolver: None,
            user_agent: USER_AGENT,
            ..ClientConfig::default()
        };
        oci_client::Client::try_from(config).map_err(|e| Error::Client { source: e })
    }
}

/// reqwest is built without a provider of its own (no aws-lc); ring, which
/// kube uses, becomes the process default unless one is already set.
pub fn install_crypto_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// What went wrong talking to the registry, in an operator's terms.
pub(crate) fn classify(reference: &str, registry: &str, e: OciDistributionError) -> Error {
    let reference = reference.to_owned();
    let registry = registry.to_owned();
    match e {
        OciDistributionError::RequestError(ref r) if is_tls(r) => Error::Tls {
            reference,
            registry,
            source: Box::new(e),
        },
        OciDistributionError::RequestError(ref r) if r.is_connect() || r.is_timeout() => {
            Error::Unreachable {
                reference,
                registry,
                source: Box::new(e),
            }
        }
        OciDistributionError::UnauthorizedError { .. }
        | OciDistributionError::AuthenticationFailure(_) => Error::Unauthorized {
            reference,
            registry,
        },
        OciDistributionError::ServerError {
            code: 401 | 403, ..
        } => Error::Unauthorized {
            reference,
            registry,
        },
        OciDistributionError::ServerError { code: 404, .. }
        | OciDistributionError::ImageManifestNotFoundError(_) => Error::NotFound {
            reference,
            registry,
        },
        OciDistributionError::RegistryError { ref envelope, .. } => {
            let code = envelope.errors.first().map(|e| &e.code);
            match code {
                Some(OciErrorCode::Unauthorized | OciErrorCode::Denied) => Error::Unauthorized {
                    reference,
                    registry,
                },
                Some(
                    OciErrorCode::ManifestUnknown
                    | OciErrorCode::NameUnknown
                    | OciErrorCode::NotFound
                    | OciErrorCode::BlobUnknown,
                ) => Error::NotFound {
                    reference,
                    registry,
                },
                _ => Error::Registry {
                    reference,
                    registry,
                    source: Box::new(e),
                },
            }
        }
        OciDistributionError::DigestError(DigestError::VerificationError { expected, actual }) => {
            Error::DigestMismatch {
                reference,
                expected,
                actual,
            }
        }
        e => Error::Registry {
            reference,
            registry,
            source: Box::new(e),
        },
    }
}

/// What went wrong sending a pull's request or reading its body, in an
/// operator's terms. The URL is dropped from the error: the message names
/// the registry and reference, and a redirect's URL is the registry's text.
pub(crate) fn classify_http(reference: &str, registry: &str, e: reqwest::Error) -> Error {
    let reference = reference.to_owned();
    let registry = registry.to_owned();
    let e = e.without_url();
    if is_tls(&e) {
        return Error::Tls {
            reference,
            registry,
            source: Box::new(e),
        };
    }
    if e.is_redirect() {
        return Error::Registry {
            reference,
            registry,
            source: Box::new(e),
        };
    }
    // Refused connections, timeouts, and bodies cut off mid-way.
    Error::Unreachable {
        reference,
        registry,
        source: Box::new(e),
    }
}

/// Whether a rustls error (a refused certificate, a failed handshake) is
/// somewhere in the chain; io::Error hides its payload from `source()`.
fn is_tls(e: &(dyn StdError + 'static)) -> bool {
    let mut next: Option<&(dyn StdError + 'static)> = Some(e);
    while let Some(err) = next {
        if err.is::<rustls::Error>() {
            return true;
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && let Some(inner) = io.get_ref()
            && is_tls(inner)
        {
            return true;
        }
        next = err.source();
    }
    false
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_ca_bundle_must_hold_certificates() {
        let err = Transport::default()
            .with_ca_pem(b"not pem", "ca.pem")
            .unwrap_err();
        assert!(err.to_string().contains("ca.pem"), "{err}");
    }

    #[test]
    fn plain_http_is_never_the_default() {
        assert!(Transport::default().plain_http.is_empty());
    }
}
