//! TLS for the metrics listener, as controller-runtime's secure serving
//! does it: with `--metrics-auth` a scraper sends a bearer token, which
//! must not cross the Pod network in clear. The certificate comes from a
//! mounted folder (`--metrics-cert-dir`, holding `tls.crt` and `tls.key` as
//! a `kubernetes.io/tls` Secret mounts them, re-read when they change so
//! cert-manager can rotate them) or, when none is given, is self-signed at
//! start (encrypted, not authenticated: scrapers skip verification, as they
//! do for controller-runtime's).
//!
//! One port serves both: [`listener`] tells a TLS handshake from plain HTTP
//! by its first byte, so the kubelet's HTTP probes and `kubewasm probe
//! /readyz` keep working while `/metrics` and `/dead-letters` answer over
//! TLS only.

pub mod client;
pub mod listener;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// The certificate file's name in `--metrics-cert-dir`.
pub const CERT_FILE: &str = "tls.crt";
/// The key file's name in `--metrics-cert-dir`.
pub const KEY_FILE: &str = "tls.key";

/// How often a handshake may look at the mounted files for a new pair.
const RELOAD_CHECK: Duration = Duration::from_secs(10);

/// Where the listener's certificate comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlsSource {
    /// `tls.crt` and `tls.key` in this folder, re-read when they change.
    Dir(PathBuf),
    /// Generated at start for `localhost`, loopback and these names.
    SelfSigned(Vec<String>),
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error(
        "cannot read {path}: {source} (--metrics-cert-dir must hold tls.crt and tls.key, as a kubernetes.io/tls Secret mounts them)"
    )]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{path} holds no {what} in PEM form: {detail} (--metrics-cert-dir must hold tls.crt and tls.key, as a kubernetes.io/tls Secret mounts them)"
    )]
    Pem {
        path: PathBuf,
        what: &'static str,
        detail: String,
    },
    #[error("the key in {dir} does not fit its certificate or cannot sign: {source}")]
    Key { dir: PathBuf, source: rustls::Error },
    #[error("cannot generate a self-signed certificate for the metrics listener: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("cannot set up TLS for the metrics listener: {0}")]
    Config(#[source] rustls::Error),
}

/// The rustls configuration the listener accepts with: TLS 1.2 and 1.3 on
/// the ring provider, HTTP/1.1 (the only protocol the listener speaks).
pub fn server_config(source: &TlsSource) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    server_config_rechecking(source, RELOAD_CHECK)
}

/// [`server_config`], looking at a mounted folder at most every `recheck`.
fn server_config_rechecking(
    source: &TlsSource,
    recheck: Duration,
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let resolver: Arc<dyn ResolvesServerCert> = match source {
        TlsSource::Dir(dir) => Arc::new(CertDir::open(dir, provider.clone(), recheck)?),
        TlsSource::SelfSigned(names) => {
            Arc::new(Fixed(Arc::new(self_signed(names, &provider)?.key)))
        }
    };
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Config)?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A generated certificate: the pair the listener serves, and its PEM for
/// clients that pin it.
pub struct SelfSigned {
    pub key: CertifiedKey,
    pub cert_pem: String,
}

impl std::fmt::Debug for SelfSigned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SelfSigned").finish_non_exhaustive()
    }
}

/// A certificate for `localhost`, 127.0.0.1, ::1 and `names` (the Pod's
/// name, its IP), valid for a year, signed by its own fresh P-256 key.
pub fn self_signed(names: &[String], provider: &CryptoProvider) -> Result<SelfSigned, TlsError> {
    let mut sans = vec![
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "::1".to_owned(),
    ];
    sans.extend(names.iter().filter(|n| !n.is_empty()).cloned());
    sans.sort();
    sans.dedup();
    let certified = rcgen::generate_simple_self_signed(sans)?;
    let cert_pem = certified.cert.pem();
    let key_der = PrivateKeyDer::Pkcs8(certified.signing_key.serialize_der().into());
    let signer = provider
        .key_provider
        .load_private_key(key_der)
        .map_err(TlsError::Config)?;
    Ok(SelfSigned {
        key: CertifiedKey::new(vec![certified.cert.der().clone()], signer),
        cert_pem,
    })
}

/// Serves one pair for the process's life.
#[derive(Debug)]
struct Fixed(Arc<CertifiedKey>);

impl ResolvesServerCert for Fixed {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

/// The pair in a mounted folder, re-read when either file's modification
/// time changes (looked at during a handshake, at most every ten seconds:
/// a Secret's mounted files are swapped by a symlink, so a reader never
/// sees half a pair). A pair that fails to load keeps the one served.
#[derive(Debug)]
struct CertDir {
    dir: PathBuf,
    provider: Arc<CryptoProvider>,
    recheck: Duration,
    state: Mutex<Loaded>,
}

#[derive(Debug)]
struct Loaded {
    key: Arc<CertifiedKey>,
    stamp: (Option<SystemTime>, Option<SystemTime>),
    checked: Instant,
}

impl CertDir {
    fn open(
        dir: &Path,
        provider: Arc<CryptoProvider>,
        recheck: Duration,
    ) -> Result<Self, TlsError> {
        let stamp = stamp(dir);
        let key = Arc::new(load_pair(dir, &provider)?);
        Ok(Self {
            dir: dir.to_owned(),
            provider,
            recheck,
            state: Mutex::new(Loaded {
                key,
                stamp,
                checked: Instant::now(),
            }),
        })
    }

    fn current(&self) -> Arc<CertifiedKey> {
        let mut state = self.state.lock();
        if state.checked.elapsed() < self.recheck {
            return state.key.clone();
        }
        state.checked = Instant::now();
        let now = stamp(&self.dir);
        if now != state.stamp {
            match load_pair(&self.dir, &self.provider) {
                Ok(key) => {
                    tracing::info!(dir = %self.dir.display(), "metrics listener: serving the renewed certificate");
                    state.key = Arc::new(key);
                    state.stamp = now;
                }
                Err(e) => {
                    tracing::warn!(dir = %self.dir.display(), error = %e, "metrics listener: the changed certificate does not load; still serving the previous one");
                }
            }
        }
        state.key.clone()
    }
}

impl ResolvesServerCert for CertDir {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

fn stamp(dir: &Path) -> (Option<SystemTime>, Option<SystemTime>) {
    let modified = |f: &str| {
        std::fs::metadata(dir.join(f))
            .and_then(|m| m.modified())
            .ok()
    };
    (modified(CERT_FILE), modified(KEY_FILE))
}

fn load_pair(dir: &Path, provider: &CryptoProvider) -> Result<CertifiedKey, TlsError> {
    let read = |name: &str| {
        let path = dir.join(name);
        std::fs::read(&path)
            .map(|bytes| (path.clone(), bytes))
            .map_err(|source| TlsError::Read { path, source })
    };
    let (cert_path, cert_pem) = read(CERT_FILE)?;
    let (key_path, key_pem) = read(KEY_FILE)?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem {
            path: cert_path.clone(),
            what: "certificate",
            detail: e.to_string(),
        })?;
    if chain.is_empty() {
        return Err(TlsError::Pem {
            path: cert_path,
            what: "certificate",
            detail: "no CERTIFICATE block".into(),
        });
    }
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| TlsError::Pem {
        path: key_path,
        what: "private key",
        detail: e.to_string(),
    })?;
    let signer = provider
        .key_provider
        .load_private_key(key)
        .map_err(|source| TlsError::Key {
            dir: dir.to_owned(),
            source,
        })?;
    let pair = CertifiedKey::new(chain, signer);
    pair.keys_match().map_err(|source| TlsError::Key {
        dir: dir.to_owned(),
        source,
    })?;
    Ok(pair)
}

#[cfg(test)]
mod tests;
