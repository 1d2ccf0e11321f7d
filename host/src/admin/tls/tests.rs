use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::client::Verify;
use super::*;
use crate::admin::probe::{ProbeError, get_over};
use crate::admin::server::{Listener, MetricsServer};
use crate::telemetry::{Identity, Telemetry};

/// A CA and a leaf for 127.0.0.1 it signed, written as `dir/tls.crt`,
/// `dir/tls.key` and `ca_out`.
fn issue(dir: &Path, ca_out: &Path) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .signed_by(&leaf_key, &issuer)
        .unwrap();
    std::fs::write(ca_out, ca.pem()).unwrap();
    // As the kubelet swaps a Secret's files: write aside, then rename.
    std::fs::write(dir.join("tls.crt.new"), leaf.pem()).unwrap();
    std::fs::write(dir.join("tls.key.new"), leaf_key.serialize_pem()).unwrap();
    std::fs::rename(dir.join("tls.key.new"), dir.join(KEY_FILE)).unwrap();
    std::fs::rename(dir.join("tls.crt.new"), dir.join(CERT_FILE)).unwrap();
}

async fn serve(tls: Arc<rustls::ServerConfig>) -> (Listener, SocketAddr) {
    let telemetry = Telemetry::new(Identity::new(None, None, None));
    let server =
        MetricsServer::start_with(&"127.0.0.1:0".parse().unwrap(), telemetry, None, Some(tls))
            .await
            .unwrap()
            .unwrap();
    let addr = server.local_addr();
    (server, addr)
}

async fn ask(
    addr: SocketAddr,
    path: &'static str,
    verify: Option<Verify>,
) -> Result<(u16, String), ProbeError> {
    tokio::task::spawn_blocking(move || {
        get_over(
            &addr.to_string(),
            path,
            None,
            verify.as_ref(),
            Duration::from_secs(5),
        )
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn one_port_answers_probes_plain_and_metrics_over_tls_only() {
    let config = server_config(&TlsSource::SelfSigned(vec!["kubewasm-0".into()])).unwrap();
    let (server, addr) = serve(config).await;
    // The kubelet's HTTP probe, and a TLS one.
    assert_eq!(ask(addr, "/healthz", None).await.unwrap().0, 200);
    assert_eq!(
        ask(addr, "/healthz", Some(Verify::Skip)).await.unwrap().0,
        200
    );
    // /metrics and /dead-letters refuse a plain request, saying how to ask.
    for path in ["/metrics", "/dead-letters"] {
        let (code, body) = ask(addr, path, None).await.unwrap();
        assert_eq!(code, 400, "{path}: {body}");
        assert!(
            body.contains("served over TLS only") && body.contains("--insecure-skip-tls-verify"),
            "{body}"
        );
    }
    let (code, body) = ask(addr, "/metrics", Some(Verify::Skip)).await.unwrap();
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("kubewasm_"), "{body}");
    // The self-signed certificate is no CA's: a client that checks it
    // refuses before sending anything.
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("other-ca.crt");
    issue(dir.path(), &other);
    let e = ask(addr, "/metrics", Some(Verify::CaFile(other)))
        .await
        .unwrap_err();
    assert!(
        matches!(e, ProbeError::Request { .. }) && e.to_string().contains("certificate"),
        "{e}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_mounted_certificate_is_checked_against_its_ca_and_renewed_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    std::fs::create_dir(&certs).unwrap();
    let ca1 = dir.path().join("ca1.crt");
    let ca2 = dir.path().join("ca2.crt");
    issue(&certs, &ca1);
    let config = server_config_rechecking(&TlsSource::Dir(certs.clone()), Duration::ZERO).unwrap();
    let (server, addr) = serve(config).await;
    assert_eq!(
        ask(addr, "/metrics", Some(Verify::CaFile(ca1.clone())))
            .await
            .unwrap()
            .0,
        200
    );
    // A broken pair (a key cut short mid-write) keeps the served one.
    std::fs::write(certs.join(KEY_FILE), "-----BEGIN PRIVATE KEY-----\nMIG").unwrap();
    assert_eq!(
        ask(addr, "/metrics", Some(Verify::CaFile(ca1.clone())))
            .await
            .unwrap()
            .0,
        200
    );
    // Renewed by a new CA (cert-manager rotating): served from the next
    // handshake, the old CA no longer fits.
    issue(&certs, &ca2);
    assert_eq!(
        ask(addr, "/metrics", Some(Verify::CaFile(ca2)))
            .await
            .unwrap()
            .0,
        200
    );
    assert!(
        ask(addr, "/metrics", Some(Verify::CaFile(ca1)))
            .await
            .is_err()
    );
    server.stop().await;
}

#[test]
fn a_missing_or_mismatched_pair_is_refused_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let e = server_config(&TlsSource::Dir(dir.path().to_owned())).unwrap_err();
    assert!(
        e.to_string().contains("tls.crt") && e.to_string().contains("kubernetes.io/tls"),
        "{e}"
    );
    // Certificate of one pair, key of another.
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    issue(a.path(), &a.path().join("ca"));
    issue(b.path(), &b.path().join("ca"));
    std::fs::copy(b.path().join(KEY_FILE), a.path().join(KEY_FILE)).unwrap();
    let e = server_config(&TlsSource::Dir(a.path().to_owned())).unwrap_err();
    assert!(matches!(e, TlsError::Key { .. }), "{e}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_sends_nothing_delays_no_one() {
    let config = server_config(&TlsSource::SelfSigned(Vec::new())).unwrap();
    let (server, addr) = serve(config).await;
    // Idle connections: opened, silent. Handshakes wait beside the accept
    // loop, so the next client is served well inside the 10 s deadline
    // each idle one is given.
    let idle: Vec<_> =
        futures::future::join_all((0..8).map(|_| tokio::net::TcpStream::connect(addr))).await;
    let started = std::time::Instant::now();
    let (code, _) = tokio::time::timeout(
        Duration::from_secs(5),
        ask(addr, "/metrics", Some(Verify::Skip)),
    )
    .await
    .expect("served while idle connections wait")
    .unwrap();
    assert_eq!(code, 200);
    assert!(started.elapsed() < Duration::from_secs(5));
    drop(idle);
    server.stop().await;
}
