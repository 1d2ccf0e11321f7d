//! Pulls from hostile and slow registries: a small HTTP server on
//! 127.0.0.1 per test answers as a scripted registry would (a manifest of
//! gibibytes, a response trickled a byte a second, thousands of signature
//! layers, a huge error body or token response, redirects to another
//! host), and each test checks that the pull fails with a typed error, a
//! short message, and having read at most its cap. Also: the digest cache
//! serves a module only to the registry, repository and credentials
//! verified for it, and a module whose signature fails is never cached.
//!
//! Run one test alone to read its memory figure, e.g.
//! `cargo test -p kubewasm --test oci_hostile gibibytes -- --nocapture`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

#[path = "oci_hostile/server.rs"]
mod server;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use kubewasm::oci::signature::{self, SIGNATURE_ANNOTATION, SIMPLE_SIGNING_MEDIA_TYPE};
use kubewasm::oci::{
    self, Credentials, Error, ModuleCache, OciClient, PullOptions, SignatureError, SignaturePolicy,
    SigningKey, Transport,
};
use server::{Body, Reply, Server};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// A core Wasm module of `len` bytes.
fn module(len: usize, seed: u8) -> Vec<u8> {
    let mut bytes = b"\0asm\x01\0\0\0".to_vec();
    bytes.extend((0..len.saturating_sub(8)).map(|i| (i as u8).wrapping_mul(31) ^ seed));
    bytes
}

/// A module as a registry holds it: the manifest's bytes and digest, the
/// layer's digest.
struct Artifact {
    module: Vec<u8>,
    manifest: Vec<u8>,
    digest: String,
    layer_digest: String,
}

fn artifact(module: Vec<u8>) -> Artifact {
    let layer_digest = oci::sha256_digest(&module);
    let (_, manifest) = oci::artifact::build(
        module.len() as u64,
        &layer_digest,
        "wasip1",
        "2026-01-01T00:00:00Z".into(),
    );
    let manifest = serde_json::to_vec(&manifest).unwrap();
    Artifact {
        digest: oci::sha256_digest(&manifest),
        module,
        manifest,
        layer_digest,
    }
}

/// A cosign signature manifest with `layers` layers of one payload.
fn sig_manifest(layers: usize, payload: &[u8], sig: &str) -> Vec<u8> {
    let layer = serde_json::json!({
        "mediaType": SIMPLE_SIGNING_MEDIA_TYPE,
        "digest": oci::sha256_digest(payload),
        "size": payload.len(),
        "annotations": {SIGNATURE_ANNOTATION: sig},
    });
    serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": format!("sha256:{}", "0".repeat(64)),
            "size": 0,
        },
        "layers": vec![layer; layers],
    }))
    .unwrap()
}

fn client(server: &Server, options: PullOptions) -> OciClient {
    client_for(&[server], options)
}

fn client_for(servers: &[&Server], options: PullOptions) -> OciClient {
    let mut transport = Transport::default();
    for server in servers {
        transport = transport.with_plain_http(&server.host());
    }
    OciClient::new(transport, options)
}

fn basic(username: &str, password: &str) -> Credentials {
    Credentials::Basic {
        username: username.into(),
        password: password.into(),
    }
}

fn basic_header(username: &str, password: &str) -> String {
    let encoded =
        base64::engine::general_purpose::STANDARD.encode(format!("{username}:{password}"));
    format!("Basic {encoded}")
}

/// The process's peak resident set (`VmHWM`, KiB), and a reset of it.
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn reset_peak_rss() -> bool {
    // "5" resets the peak resident set size (proc(5), clear_refs).
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

fn files_under(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for sub in ["oci/sha256", "oci/manifests/sha256", "oci/access/sha256"] {
        if let Ok(entries) = std::fs::read_dir(dir.join(sub)) {
            found.extend(
                entries
                    .flatten()
                    .map(|e| format!("{sub}/{}", e.file_name().to_string_lossy())),
            );
        }
    }
    found
}

/// A registry that answers a manifest request with 8 GiB: chunked (no
/// length to refuse by) the pull stops at the 4 MiB cap; with the length
/// declared it stops before the body. Either way the registry gets to
/// write only the cap and what the sockets buffer, never the gibibytes.
#[tokio::test]
async fn a_manifest_of_gibibytes_costs_at_most_the_cap() {
    // A first pull sets up what every pull shares (the TLS roots, the
    // runtime's buffers), so the figures below are the pulls' own.
    let warm = Server::start(|_, _| Reply::not_found()).await;
    let err = client(&warm, PullOptions::default())
        .pull(&format!("{}/x:v1", warm.host()), &Credentials::Anonymous)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err}");
    for declared in [false, true] {
        let server = Server::start(move |_, _| Reply {
            status: 200,
            headers: vec![(
                "Content-Type".into(),
                "application/vnd.oci.image.manifest.v1+json".into(),
            )],
            body: Body::Endless {
                fill: b' ',
                total: 8 * GIB,
                declared,
            },
        })
        .await;
        let oci = client(&server, PullOptions::default());
        let reference = format!("{}/plugins/huge:v1", server.host());
        let reset = reset_peak_rss();
        let before = peak_rss_kib();
        let err = oci
            .pull(&reference, &Credentials::Anonymous)
            .await
            .unwrap_err();
        let after = peak_rss_kib();
        match &err {
            Error::BodyTooLarge { what, limit, .. } => {
                assert_eq!(*what, "manifest");
                assert_eq!(*limit, oci::registry::MAX_MANIFEST_BYTES);
            }
            e => panic!("expected BodyTooLarge, got {e}"),
        }
        assert!(err.to_string().contains(&server.host()), "{err}");
        server.stop();
        let written = server.written();
        assert!(
            written < 64 * MIB,
            "the registry wrote {written} bytes of its 8 GiB manifest"
        );
        if reset && let (Some(before), Some(after)) = (before, after) {
            // Loose (other tests run beside this one): far below 8 GiB.
            // The kernel's RSS counters are approximate (per-thread
            // caches), so a peak read just after its reset can exceed
            // the next reading: a fall counts as no rise.
            let rose = after.saturating_sub(before);
            assert!(rose < 256 << 10, "peak RSS rose {rose} KiB");
        }
        println!(
            "8 GiB manifest ({}): registry wrote {:.1} MiB before the pull hung up; host peak RSS {} -> {} KiB{}",
            if declared {
                "Content-Length declared"
            } else {
                "chunked"
            },
            written as f64 / MIB as f64,
            before.unwrap_or(0),
            after.unwrap_or(0),
            if reset {
                " (peak reset before the pull)"
            } else {
                " (peak not resettable here)"
            }
        );
    }
}

/// A registry that trickles its manifest a byte a second never trips the
/// transport's read timeout; the pull's deadline ends it, naming the
/// registry and the deadline.
#[tokio::test]
async fn a_trickling_registry_fails_the_pull_at_its_deadline() {
    let body = artifact(module(64, 1)).manifest;
    let server = Server::start(move |_, _| Reply {
        status: 200,
        headers: Vec::new(),
        body: Body::Trickle {
            bytes: body.clone(),
            every: Duration::from_secs(1),
        },
    })
    .await;
    let oci = client(
        &server,
        PullOptions {
            deadline: Duration::from_secs(2),
            ..PullOptions::default()
        },
    );
    let reference = format!("{}/plugins/slow:v1", server.host());
    // A hang here is the failure this test exists for: bound it.
    let err = tokio::time::timeout(
        Duration::from_secs(60),
        oci.pull(&reference, &Credentials::Anonymous),
    )
    .await
    .expect("the pull outlived its deadline")
    .unwrap_err();
    match &err {
        Error::Deadline {
            registry, deadline, ..
        } => {
            assert_eq!(registry, &server.host());
            assert_eq!(*deadline, Duration::from_secs(2));
        }
        e => panic!("expected Deadline, got {e}"),
    }
    let text = err.to_string();
    assert!(
        text.contains(&server.host()) && text.contains("2s deadline"),
        "{text}"
    );
    assert!(server.written() > 0, "the registry was trickling");
}

/// A signature manifest of thousands of layers is refused as a whole:
/// no payload is requested, and the module is not cached.
#[tokio::test]
async fn thousands_of_signature_layers_are_refused_unread() {
    let signed = artifact(module(4096, 2));
    let key = SigningKey::from_bytes(&[7; 32], "team.key").unwrap();
    let payload = signature::payload("r/plugins/signed", &signed.digest);
    let sig = sig_manifest(5000, &payload, &key.sign(&payload));
    let sig_tag = signature::signature_tag(&signed.digest).unwrap();
    let manifest = signed.manifest.clone();
    let module = signed.module.clone();
    let layer_path = format!("/v2/plugins/signed/blobs/{}", signed.layer_digest);
    let server = Server::start(move |r, _| {
        if r.path.ends_with(&format!("/manifests/{sig_tag}")) {
            Reply::ok(sig.clone())
        } else if r.path.contains("/manifests/") {
            Reply::ok(manifest.clone())
        } else if r.path == layer_path {
            Reply::ok(module.clone())
        } else {
            Reply::not_found()
        }
    })
    .await;
    let cache_dir = tempfile::tempdir().unwrap();
    let oci = client(
        &server,
        PullOptions {
            cache: Some(ModuleCache::new(cache_dir.path(), 256 * MIB)),
            signatures: SignaturePolicy::everything(vec![key.public_key()]),
            ..PullOptions::default()
        },
    );
    let reference = format!("{}/plugins/signed:v1", server.host());
    let err = oci
        .pull(&reference, &Credentials::Anonymous)
        .await
        .unwrap_err();
    match &err {
        Error::Signature(SignatureError::TooMany { found, limit, .. }) => {
            assert_eq!((*found, *limit), (5000, oci::DEFAULT_MAX_SIGNATURES));
        }
        e => panic!("expected TooMany, got {e}"),
    }
    assert!(err.to_string().contains("5000 signatures"), "{err}");
    let payload_path = format!("/blobs/{}", oci::sha256_digest(&payload));
    let payloads = server
        .requests()
        .iter()
        .filter(|r| r.path.ends_with(&payload_path))
        .count();
    assert_eq!(payloads, 0, "no payload is read");
    assert!(
        files_under(cache_dir.path()).is_empty(),
        "an unverified module is not cached: {:?}",
        files_under(cache_dir.path())
    );
}

/// Error bodies are read to a few KiB and quoted as an excerpt: a 1 GiB
/// error page and a 1 MiB OCI error message both make a short message.
#[tokio::test]
async fn a_huge_error_body_stays_an_excerpt() {
    let page = Server::start(|_, _| Reply {
        status: 502,
        headers: Vec::new(),
        body: Body::Endless {
            fill: b'<',
            total: GIB,
            declared: false,
        },
    })
    .await;
    let oci = client(&page, PullOptions::default());
    let err = oci
        .pull(
            &format!("{}/plugins/x:v1", page.host()),
            &Credentials::Anonymous,
        )
        .await
        .unwrap_err();
    match &err {
        Error::Status {
            status, message, ..
        } => {
            assert_eq!(*status, 502);
            assert!(message.contains("not read"), "{message}");
        }
        e => panic!("expected Status, got {e}"),
    }
    let text = err.to_string();
    assert!(text.len() < 1024, "{} bytes: {text}", text.len());
    page.stop();
    assert!(
        page.written() < 64 * MIB,
        "{} bytes written",
        page.written()
    );

    let long = "A".repeat(MIB as usize);
    let envelope = format!(r#"{{"errors":[{{"code":"TOOMANYREQUESTS","message":"{long}"}}]}}"#);
    let oci_error = Server::start(move |_, _| Reply::status(429, &envelope)).await;
    let oci = client(&oci_error, PullOptions::default());
    let err = oci
        .pull(
            &format!("{}/plugins/x:v1", oci_error.host()),
            &Credentials::Anonymous,
        )
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, Error::Status { status: 429, .. }), "{text}");
    assert!(text.len() < 1024, "{} bytes: {text}", text.len());
    assert!(text.contains("TOOMANYREQUESTS"), "{text}");
}

/// A bearer challenge whose token service answers with a gibibyte: the
/// token response is refused at its cap.
#[tokio::test]
async fn a_huge_token_response_is_refused_at_its_cap() {
    let server = Server::start(|r, addr| {
        if r.path.starts_with("/token") {
            return Reply {
                status: 200,
                headers: Vec::new(),
                body: Body::Endless {
                    fill: b'x',
                    total: GIB,
                    declared: false,
                },
            };
        }
        Reply::status(401, "").header(
            "WWW-Authenticate",
            &format!(r#"Bearer realm="http://{addr}/token",service="test""#),
        )
    })
    .await;
    let oci = client(&server, PullOptions::default());
    let err = oci
        .pull(
            &format!("{}/plugins/x:v1", server.host()),
            &basic("alice", "pw"),
        )
        .await
        .unwrap_err();
    match &err {
        Error::BodyTooLarge { what, limit, .. } => {
            assert_eq!(
                (*what, *limit),
                ("token response", oci::registry::MAX_TOKEN_BYTES)
            );
        }
        e => panic!("expected BodyTooLarge, got {e}"),
    }
    let token = server
        .requests()
        .into_iter()
        .find(|r| r.path.starts_with("/token"))
        .unwrap();
    assert!(
        token.path.contains("scope=repository%3Aplugins%2Fx%3Apull"),
        "{}",
        token.path
    );
    assert_eq!(
        token.authorization(),
        Some(basic_header("alice", "pw").as_str())
    );
    server.stop();
    assert!(server.written() < 64 * MIB);
}

/// A registry may send the module's bytes from another host (its
/// storage): the redirect is followed, the credentials stay behind (the
/// other host sees no `Authorization`), and the bytes are checked against
/// their digest as any others. A redirect loop ends after five hops.
#[tokio::test]
async fn a_redirect_to_another_host_is_followed_without_the_credentials() {
    let art = artifact(module(2048, 3));
    let storage = {
        let module = art.module.clone();
        Server::start(move |_, _| Reply::ok(module.clone())).await
    };
    let storage_host = storage.host();
    let manifest = art.manifest.clone();
    let alice = basic_header("alice", "pw");
    let registry = Server::start(move |r, addr| {
        if r.authorization() != Some(alice.as_str()) {
            return Reply::status(401, "").header("WWW-Authenticate", r#"Basic realm="test""#);
        }
        if r.path.contains("/manifests/") {
            Reply::ok(manifest.clone())
        } else if r.path.contains("/loop/") {
            Reply::status(307, "").header("Location", &format!("http://{addr}{}", r.path))
        } else {
            Reply::status(307, "").header(
                "Location",
                &format!("http://{storage_host}/storage/blob?sig=x"),
            )
        }
    })
    .await;
    let oci = client_for(&[&registry, &storage], PullOptions::default());
    let reference = format!("{}/plugins/moved:v1", registry.host());
    let pulled = oci.pull(&reference, &basic("alice", "pw")).await.unwrap();
    assert_eq!(pulled.bytes, art.module);
    assert_eq!(pulled.digest, art.digest);
    let at_storage = storage.requests();
    assert_eq!(at_storage.len(), 1);
    assert_eq!(at_storage[0].path, "/storage/blob?sig=x");
    assert_eq!(
        at_storage[0].authorization(),
        None,
        "credentials never leave the registry's host"
    );
    assert!(
        !at_storage[0].headers.contains_key("referer"),
        "the storage host is not told where the redirect came from"
    );

    // A redirect loop: the pull stops following after five redirects.
    let looping = artifact(module(2048, 4));
    let loop_manifest = looping.manifest.clone();
    let loop_registry = Server::start(move |r, addr| {
        if r.path.contains("/manifests/") {
            Reply::ok(loop_manifest.clone())
        } else {
            Reply::status(307, "").header("Location", &format!("http://{addr}{}", r.path))
        }
    })
    .await;
    let oci = client(&loop_registry, PullOptions::default());
    let err = oci
        .pull(
            &format!("{}/plugins/loop:v1", loop_registry.host()),
            &Credentials::Anonymous,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Registry { .. }), "{err}");
    assert!(err.to_string().contains("redirects"), "{err}");
    let blob_requests = loop_registry
        .requests()
        .iter()
        .filter(|r| r.path.contains("/blobs/"))
        .count();
    assert_eq!(blob_requests, 1 + oci::transport::MAX_REDIRECTS);
}

/// KEP-2535 for the digest cache: a module pulled with alice's
/// credentials from repository team-a is served from the cache (after a
/// restart, with the registry down) only to that registry, repository and
/// credentials. Another registry, another repository, other credentials
/// or none are sent to their registry; and a registry naming the cached
/// layer in a manifest of its own must serve the layer itself.
#[tokio::test]
async fn a_cached_module_is_served_only_to_the_registry_repository_and_credentials_verified_for_it()
{
    let private = artifact(module(8192, 5));
    let registry = {
        let (manifest, module, digest, layer) = (
            private.manifest.clone(),
            private.module.clone(),
            private.digest.clone(),
            private.layer_digest.clone(),
        );
        let alice = basic_header("alice", "pw");
        Server::start(move |r, _| {
            if r.authorization() != Some(alice.as_str()) {
                return Reply::status(401, "").header("WWW-Authenticate", r#"Basic realm="test""#);
            }
            if r.path == "/v2/team-a/m/manifests/v1"
                || r.path == format!("/v2/team-a/m/manifests/{digest}")
            {
                Reply::ok(manifest.clone())
            } else if r.path == format!("/v2/team-a/m/blobs/{layer}") {
                Reply::ok(module.clone())
            } else {
                Reply::not_found()
            }
        })
        .await
    };
    // Tenant B's own registry: it has A's manifest bytes (not secret), and
    // a manifest of its own naming A's layer digest, but not the layer.
    let borrowed = {
        let (_, manifest) = oci::artifact::build(
            private.module.len() as u64,
            &private.layer_digest,
            "wasip1",
            "2030-01-01T00:00:00Z".into(),
        );
        serde_json::to_vec(&manifest).unwrap()
    };
    let borrowed_digest = oci::sha256_digest(&borrowed);
    let evil = {
        let (theirs, copied) = (borrowed.clone(), private.manifest.clone());
        let (borrowed_digest, digest) = (borrowed_digest.clone(), private.digest.clone());
        Server::start(move |r, _| {
            if r.path.ends_with(&format!("/manifests/{borrowed_digest}")) {
                Reply::ok(theirs.clone())
            } else if r.path.ends_with(&format!("/manifests/{digest}")) {
                Reply::ok(copied.clone())
            } else {
                Reply::not_found()
            }
        })
        .await
    };
    let cache_dir = tempfile::tempdir().unwrap();
    let options = || PullOptions {
        cache: Some(ModuleCache::new(cache_dir.path(), 256 * MIB)),
        ..PullOptions::default()
    };
    let alice = basic("alice", "pw");
    let a_tag = format!("{}/team-a/m:v1", registry.host());
    let a_pinned = format!("{}/team-a/m@{}", registry.host(), private.digest);

    let first = client_for(&[&registry, &evil], options())
        .pull(&a_tag, &alice)
        .await
        .unwrap();
    assert_eq!(first.bytes, private.module);
    assert!(!first.from_cache);
    let asked = registry.requests().len();

    // A restart (a new client, the same cache folder) while the registry
    // is down: the grant was kept, so the host's own pinned module serves.
    registry.stop();
    let oci = client_for(&[&registry, &evil], options());
    let again = oci.pull(&a_pinned, &alice).await.unwrap();
    assert!(again.from_cache, "the verified pull is served offline");
    assert_eq!(again.bytes, private.module);
    assert_eq!(registry.requests().len(), asked, "with no request");

    // Not for anyone else: each goes to its registry (down: unreachable).
    for (reference, credentials, who) in [
        (
            format!("{}/team-b/m@{}", registry.host(), private.digest),
            alice.clone(),
            "another repository",
        ),
        (a_pinned.clone(), Credentials::Anonymous, "no credentials"),
        (
            a_pinned.clone(),
            basic("alice", "guess"),
            "other credentials",
        ),
    ] {
        let err = oci.pull(&reference, &credentials).await.unwrap_err();
        assert!(
            matches!(err, Error::Unreachable { .. }),
            "{who}: expected the registry to be asked, got {err}"
        );
    }

    // Another registry naming A's digest: asked, and it can serve A's
    // manifest (not secret), but not A's module; the cached layer is not
    // lent to it.
    let err = oci
        .pull(
            &format!("{}/x@{}", evil.host(), private.digest),
            &Credentials::Anonymous,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err}");
    let err = oci
        .pull(
            &format!("{}/x@{borrowed_digest}", evil.host()),
            &Credentials::Anonymous,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err}");
    let evil_asked: Vec<String> = evil.requests().into_iter().map(|r| r.path).collect();
    assert_eq!(
        evil_asked
            .iter()
            .filter(|p| p.ends_with(&format!("/blobs/{}", private.layer_digest)))
            .count(),
        2,
        "the layer was asked of the other registry both times: {evil_asked:?}"
    );
}

/// A module whose signature does not verify takes no cache space; one
/// that verifies (the policy's key, then a Plugin's own) is cached with
/// its signatures and its grant.
#[tokio::test]
async fn a_module_enters_the_cache_only_once_its_signatures_verify() {
    let art = artifact(module(4096, 6));
    let team = SigningKey::from_bytes(&[9; 32], "team.key").unwrap();
    let plugin_key = SigningKey::from_bytes(&[10; 32], "plugin.key").unwrap();
    let payload = signature::payload("r/plugins/m", &art.digest);
    let signed_by = Arc::new(parking_lot::Mutex::new(Vec::<String>::new()));
    let server = {
        let (manifest, module, layer) = (
            art.manifest.clone(),
            art.module.clone(),
            art.layer_digest.clone(),
        );
        let (payload, signed_by) = (payload.clone(), signed_by.clone());
        let tag = signature::signature_tag(&art.digest).unwrap();
        let payload_digest = oci::sha256_digest(&payload);
        Server::start(move |r, _| {
            if r.path.ends_with(&format!("/manifests/{tag}")) {
                let sigs = signed_by.lock().clone();
                if sigs.is_empty() {
                    return Reply::not_found();
                }
                let layers: Vec<serde_json::Value> = sigs
                    .iter()
                    .map(|s| {
                        serde_json::json!({
                            "mediaType": SIMPLE_SIGNING_MEDIA_TYPE,
                            "digest": payload_digest,
                            "size": payload.len(),
                            "annotations": {SIGNATURE_ANNOTATION: s},
                        })
                    })
                    .collect();
                let mut manifest: serde_json::Value =
                    serde_json::from_slice(&sig_manifest(0, &payload, "")).unwrap();
                manifest["layers"] = serde_json::Value::Array(layers);
                Reply::ok(serde_json::to_vec(&manifest).unwrap())
            } else if r.path.contains("/manifests/") {
                Reply::ok(manifest.clone())
            } else if r.path.ends_with(&format!("/blobs/{layer}")) {
                Reply::ok(module.clone())
            } else if r.path.ends_with(&format!("/blobs/{payload_digest}")) {
                Reply::ok(payload.clone())
            } else {
                Reply::not_found()
            }
        })
        .await
    };
    let cache_dir = tempfile::tempdir().unwrap();
    let oci = client(
        &server,
        PullOptions {
            cache: Some(ModuleCache::new(cache_dir.path(), 256 * MIB)),
            signatures: SignaturePolicy::everything(vec![team.public_key()]),
            ..PullOptions::default()
        },
    );
    let reference = format!("{}/plugins/m:v1", server.host());

    let err = oci
        .pull(&reference, &Credentials::Anonymous)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Signature(SignatureError::Unsigned { .. })),
        "{err}"
    );
    assert_eq!(files_under(cache_dir.path()), Vec::<String>::new());

    // Signed by the policy's key, but the Plugin's own key has not signed.
    signed_by.lock().push(team.sign(&payload));
    let err = oci
        .pull_with_keys(
            &reference,
            &Credentials::Anonymous,
            &[plugin_key.public_key()],
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Signature(SignatureError::NotVerified { .. })),
        "{err}"
    );
    assert_eq!(files_under(cache_dir.path()), Vec::<String>::new());

    // Both have signed: cached, with both signatures recorded.
    signed_by.lock().push(plugin_key.sign(&payload));
    let pulled = oci
        .pull_with_keys(
            &reference,
            &Credentials::Anonymous,
            &[plugin_key.public_key()],
        )
        .await
        .unwrap();
    assert_eq!(pulled.verified.unwrap().key, "public key of team.key");
    let mut files = files_under(cache_dir.path());
    files.sort();
    assert_eq!(files.len(), 3, "module, manifest and grant: {files:?}");

    // Offline, both verify from the cache's record.
    server.stop();
    let pinned = oci
        .pull_with_keys(
            &pulled.pinned,
            &Credentials::Anonymous,
            &[plugin_key.public_key()],
        )
        .await
        .unwrap();
    assert!(pinned.from_cache);
}

/// A module whose precompiled layer the registry serves a byte a second,
/// declares at gibibytes, or made for another engine: the module is pulled
/// all the same, within its deadline, and the layer says why it is not
/// there (the host then compiles); a layer over the cap or for another
/// engine is never requested.
#[tokio::test]
async fn a_precompiled_layer_that_is_slow_huge_or_foreign_never_fails_the_module() {
    let module = module(4096, 3);
    let layer_digest = oci::sha256_digest(&module);
    let precompiled = vec![9u8; 256];
    let precompiled_digest = oci::sha256_digest(&precompiled);
    let wanted = oci::PrecompiledWanted {
        engine_key: "e1".into(),
        key_id: "k1".into(),
        max_bytes: 64 * MIB,
        cached: Arc::new(|_| false),
    };
    for (case, engine_key, size) in [
        ("slow", "e1", precompiled.len() as u64),
        ("huge", "e1", 8 * GIB),
        ("foreign", "e2", precompiled.len() as u64),
    ] {
        let (_, mut manifest) = oci::artifact::build(
            module.len() as u64,
            &layer_digest,
            "wasip1",
            "2026-01-01T00:00:00Z".into(),
        );
        manifest.layers.push(oci::artifact::precompiled_layer(
            size,
            &precompiled_digest,
            engine_key,
            &layer_digest,
            "k1",
        ));
        let manifest = serde_json::to_vec(&manifest).unwrap();
        let (module, precompiled) = (module.clone(), precompiled.clone());
        let (module_path, layer_path) = (
            format!("/v2/plugins/p/blobs/{layer_digest}"),
            format!("/v2/plugins/p/blobs/{precompiled_digest}"),
        );
        let layer_requested = layer_path.clone();
        let server = Server::start(move |r, _| {
            if r.path.contains("/manifests/") {
                Reply::ok(manifest.clone())
            } else if r.path == module_path {
                Reply::ok(module.clone())
            } else if r.path == layer_path {
                Reply {
                    status: 200,
                    headers: Vec::new(),
                    body: Body::Trickle {
                        bytes: precompiled.clone(),
                        every: Duration::from_secs(1),
                    },
                }
            } else {
                Reply::not_found()
            }
        })
        .await;
        let oci = client(
            &server,
            PullOptions {
                deadline: Duration::from_secs(4),
                precompiled: Some(wanted.clone()),
                ..PullOptions::default()
            },
        );
        let reference = format!("{}/plugins/p:v1", server.host());
        let pulled = tokio::time::timeout(
            Duration::from_secs(60),
            oci.pull(&reference, &Credentials::Anonymous),
        )
        .await
        .expect("the pull outlived its deadline")
        .unwrap_or_else(|e| panic!("{case}: {e}"));
        assert_eq!(pulled.layer_digest, layer_digest, "{case}");
        let requested = server.requests().iter().any(|r| r.path == layer_requested);
        match (case, &pulled.precompiled) {
            ("slow", oci::PrecompiledPull::Failed { reason }) => {
                assert!(reason.contains("deadline"), "{reason}");
                assert!(requested);
            }
            ("huge", oci::PrecompiledPull::TooLarge { size, limit }) => {
                assert_eq!((*size, *limit), (8 * GIB, 64 * MIB));
                assert!(!requested, "a layer over the cap was requested");
            }
            ("foreign", oci::PrecompiledPull::OtherEngine { found }) => {
                assert_eq!(found, &["e2".to_owned()]);
                assert!(!requested, "another engine's layer was requested");
            }
            (case, other) => panic!("{case}: {other:?}"),
        }
    }
}
