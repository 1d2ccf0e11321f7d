//! The client side, for `kubewasm probe` and `kubewasm dead-letters`: a
//! token is only ever sent over TLS, verified against a CA file
//! (`--ca-file`, e.g. the `ca.crt` of the Secret mounted as
//! `--metrics-cert-dir`) or, for the self-signed certificate, explicitly
//! not verified (`--insecure-skip-tls-verify`, as with kubectl).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

/// How the client checks the listener's certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verify {
    /// Against the certificates in this PEM file.
    CaFile(PathBuf),
    /// Not at all (a self-signed certificate).
    Skip,
}

#[derive(Debug, thiserror::Error)]
pub enum ClientTlsError {
    #[error("cannot read the CA file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the CA file {path} holds no usable certificate: {detail}")]
    Ca { path: PathBuf, detail: String },
    #[error("cannot set up TLS: {0}")]
    Config(#[source] rustls::Error),
}

/// The rustls client configuration for `verify`.
pub fn client_config(verify: &Verify) -> Result<Arc<rustls::ClientConfig>, ClientTlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(ClientTlsError::Config)?;
    let mut config = match verify {
        Verify::CaFile(path) => builder
            .with_root_certificates(roots(path)?)
            .with_no_client_auth(),
        Verify::Skip => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerify(provider)))
            .with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The name to check the certificate for: the address's host, an IP or a
/// DNS name.
pub fn server_name(host: &str) -> Option<ServerName<'static>> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_owned()).ok()
}

fn roots(path: &Path) -> Result<rustls::RootCertStore, ClientTlsError> {
    let pem = std::fs::read(path).map_err(|source| ClientTlsError::Read {
        path: path.to_owned(),
        source,
    })?;
    let ca = |detail: String| ClientTlsError::Ca {
        path: path.to_owned(),
        detail,
    };
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ca(e.to_string()))?;
    let mut store = rustls::RootCertStore::empty();
    let (added, _) = store.add_parsable_certificates(certs);
    if added == 0 {
        return Err(ca("no CERTIFICATE block parses".into()));
    }
    Ok(store)
}

/// Accepts any certificate, still checking that the server holds its key.
#[derive(Debug)]
struct NoVerify(Arc<CryptoProvider>);

impl ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
