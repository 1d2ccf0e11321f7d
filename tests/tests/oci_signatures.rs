//! Cosign signatures of plugin modules through a real registry (Debian's
//! docker-registry under a test CA, tests/src/registry.rs): `kubewasm push
//! --sign-key` then `kubewasm pull --verify-key`; unsigned, wrongly signed
//! and tampered modules refused; the digest cache serving a verified module
//! with the registry down, and refusing it under other keys; and both
//! directions with the cosign CLI (built from its Go module by
//! scripts/install-cosign.sh into .tools/bin).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use kubewasm::oci::{
    self, Credentials, ModuleCache, OciClient, PublicKey, PullOptions, SignatureError,
    SignaturePolicy, Transport,
};
use kubewasm_tests::e2e::{kubewasm_bin, refused, succeeded};
use kubewasm_tests::registry::{Registry, test_key};

/// An unencrypted PKCS#8 P-256 key pair made by openssl: (private, public).
fn openssl_keys(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let key = dir.join(format!("{name}.key"));
    let public = dir.join(format!("{name}.pub"));
    let sec1 = succeeded(
        Command::new("openssl")
            .args(["ecparam", "-genkey", "-name", "prime256v1", "-noout"])
            .output()
            .unwrap(),
    );
    let sec1_path = dir.join(format!("{name}.sec1"));
    std::fs::write(&sec1_path, sec1.stdout).unwrap();
    succeeded(
        Command::new("openssl")
            .args(["pkcs8", "-topk8", "-nocrypt", "-in"])
            .arg(&sec1_path)
            .arg("-out")
            .arg(&key)
            .output()
            .unwrap(),
    );
    succeeded(
        Command::new("openssl")
            .args(["ec", "-pubout", "-in"])
            .arg(&key)
            .arg("-out")
            .arg(&public)
            .output()
            .unwrap(),
    );
    (key, public)
}

fn kubewasm(registry: &Registry, args: &[&str]) -> Output {
    Command::new(kubewasm_bin())
        .args(args)
        .arg("--ca")
        .arg(registry.ca_path())
        .output()
        .unwrap()
}

fn plugin() -> PathBuf {
    kubewasm_tests::plugin_artifacts().join("noop.wasm")
}

/// `kubewasm push [--sign-key KEY]`: the pinned reference it printed.
fn push(registry: &Registry, reference: &str, key: Option<&Path>) -> String {
    let plugin = plugin();
    let mut args = vec!["push", plugin.to_str().unwrap(), reference];
    if let Some(key) = key {
        args.extend(["--sign-key", key.to_str().unwrap()]);
    }
    let out = succeeded(kubewasm(registry, &args));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    // stdout is the pinned reference alone, so `REF=$(kubewasm push ...)`
    // works signed or not; the signature's place goes to stderr.
    let pinned = stdout.trim_end().to_owned();
    assert!(
        !pinned.contains('\n') && pinned.contains("@sha256:"),
        "push printed {stdout:?}"
    );
    if key.is_some() {
        let digest = pinned.split('@').nth(1).unwrap();
        let tag = format!("sha256-{}.sig", digest.trim_start_matches("sha256:"));
        assert!(
            stderr
                .lines()
                .any(|l| l.starts_with("signature: ") && l.ends_with(&tag)),
            "push --sign-key printed to stderr {stderr:?}"
        );
    }
    pinned
}

fn pull(registry: &Registry, reference: &str, out: &Path, key: &Path) -> Output {
    kubewasm(
        registry,
        &[
            "pull",
            reference,
            "-o",
            out.to_str().unwrap(),
            "--verify-key",
            key.to_str().unwrap(),
        ],
    )
}

#[test]
fn a_module_signed_by_push_verifies_and_unsigned_wrongly_signed_or_tampered_ones_are_refused() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let registry = rt.block_on(Registry::start());
    let dir = tempfile::tempdir().unwrap();
    let (key, public) = openssl_keys(dir.path(), "team");
    let (_, other_public) = openssl_keys(dir.path(), "other");
    let module = std::fs::read(plugin()).unwrap();

    let signed = push(
        &registry,
        &format!("{}/plugins/signed:v1", registry.host()),
        Some(&key),
    );
    let out = dir.path().join("signed.wasm");
    let pulled = succeeded(pull(&registry, &signed, &out, &public));
    assert!(
        String::from_utf8_lossy(&pulled.stdout).contains("signature verified by"),
        "{}",
        String::from_utf8_lossy(&pulled.stdout)
    );
    assert_eq!(std::fs::read(&out).unwrap(), module);
    // Pushing and signing again keeps one signature (ECDSA is deterministic).
    push(
        &registry,
        &format!("{}/plugins/signed:v1", registry.host()),
        Some(&key),
    );
    let digest = signed.split('@').nth(1).unwrap().to_owned();
    let tag = format!("sha256-{}.sig", digest.trim_start_matches("sha256:"));
    let (_, sig_manifest) = rt.block_on(registry.manifest("plugins/signed", &tag));
    let mut sig_manifest: serde_json::Value = serde_json::from_slice(&sig_manifest).unwrap();
    assert_eq!(sig_manifest["layers"].as_array().unwrap().len(), 1);

    // Another key: refused, naming the key it tried; nothing written.
    let out = dir.path().join("other.wasm");
    let err = refused(pull(&registry, &signed, &out, &other_public));
    assert!(err.contains("none of its 1 signature(s) verifies"), "{err}");
    assert!(err.contains("other.pub"), "{err}");
    assert!(!out.exists());

    // Unsigned: refused as such.
    let unsigned = push(
        &registry,
        &format!("{}/plugins/unsigned:v1", registry.host()),
        None,
    );
    let err = refused(pull(&registry, &unsigned, &out, &public));
    assert!(err.contains("is unsigned"), "{err}");
    assert!(err.contains("plugins/unsigned"), "{err}");
    assert!(!out.exists());

    // The signature annotation tampered with (its last byte of DER
    // changed): refused.
    let annotation =
        &mut sig_manifest["layers"][0]["annotations"]["dev.cosignproject.cosign/signature"];
    let mut der = base64_decode(annotation.as_str().unwrap());
    *der.last_mut().unwrap() ^= 1;
    *annotation = serde_json::Value::String(base64_encode(&der));
    rt.block_on(registry.put_manifest(
        "plugins/signed",
        &tag,
        "application/vnd.oci.image.manifest.v1+json",
        &serde_json::to_vec(&sig_manifest).unwrap(),
    ));
    let err = refused(pull(&registry, &signed, &out, &public));
    assert!(err.contains("none of its 1 signature(s) verifies"), "{err}");
    assert!(!out.exists());
}

fn base64_decode(text: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .unwrap()
}

fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn client(registry: &Registry, cache: &Path, keys: Vec<PublicKey>) -> OciClient {
    OciClient::new(
        Transport::default()
            .with_ca_pem(&registry.ca_pem(), "test CA")
            .unwrap(),
        PullOptions {
            cache: Some(ModuleCache::new(cache, 64 << 20)),
            signatures: SignaturePolicy::everything(keys),
            ..PullOptions::default()
        },
    )
}

#[tokio::test]
async fn the_digest_cache_serves_a_verified_module_offline_only_under_the_keys_that_verified_it() {
    let mut registry = Registry::start().await;
    let cache = tempfile::tempdir().unwrap();
    let key = test_key("team");
    let reference = format!("{}/plugins/cached:v1", registry.host());
    let module = kubewasm_tests::wasm("noop");
    let signer = client(&registry, cache.path(), vec![]);
    let pushed = signer
        .push(&module, &reference, &Credentials::Anonymous)
        .await
        .unwrap();
    signer
        .push_signature(&reference, &pushed.digest, &key, &Credentials::Anonymous)
        .await
        .unwrap();

    let verifying = client(&registry, cache.path(), vec![key.public_key()]);
    let pulled = verifying
        .pull(&pushed.pinned, &Credentials::Anonymous)
        .await
        .unwrap();
    assert_eq!(pulled.bytes, module);
    assert_eq!(pulled.verified.unwrap().key, "public key of team");

    registry.stop();
    // The registry is down: the cached module and its cached signature serve.
    let again = verifying
        .pull(&pushed.pinned, &Credentials::Anonymous)
        .await
        .unwrap();
    assert!(again.from_cache);
    assert!(again.verified.is_some());
    // Under another key the cached signature does not verify and the
    // registry cannot be asked: not served.
    let rotated = client(&registry, cache.path(), vec![test_key("new").public_key()]);
    let err = rotated
        .pull(&pushed.pinned, &Credentials::Anonymous)
        .await
        .unwrap_err();
    assert!(
        matches!(err, oci::Error::Signature(SignatureError::Registry { .. })),
        "{err}"
    );
    // Back up: the registry's signature is read, and refused under that key.
    registry.resume().await;
    let err = rotated
        .pull(&pushed.pinned, &Credentials::Anonymous)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            oci::Error::Signature(SignatureError::NotVerified { .. })
        ),
        "{err}"
    );
}

/// The cosign CLI that scripts/install-cosign.sh builds.
fn cosign() -> PathBuf {
    let bin = kubewasm_tests::repo_root().join(".tools/bin/cosign");
    assert!(
        bin.exists(),
        "{} is missing: run scripts/install-cosign.sh (or scripts/setup.sh)",
        bin.display()
    );
    bin
}

/// cosign with the test CA, no transparency log or TUF fetch, and its
/// state in `home`.
fn cosign_cmd(registry: &Registry, home: &Path) -> Command {
    let mut cmd = Command::new(cosign());
    cmd.env("HOME", home)
        .env("TUF_ROOT", home.join("tuf"))
        .env("COSIGN_PASSWORD", "test-password")
        .env("SSL_CERT_FILE", registry.ca_path())
        .env("COSIGN_EXPERIMENTAL", "0")
        .current_dir(home);
    cmd
}

#[test]
fn signatures_interoperate_with_the_cosign_cli_both_ways() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let registry = rt.block_on(Registry::start());
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    succeeded(
        cosign_cmd(&registry, home)
            .arg("generate-key-pair")
            .output()
            .unwrap(),
    );
    let (cosign_key, cosign_pub) = (home.join("cosign.key"), home.join("cosign.pub"));

    // cosign signs, kubewasm verifies.
    let by_cosign = push(
        &registry,
        &format!("{}/plugins/by-cosign:v1", registry.host()),
        None,
    );
    succeeded(
        cosign_cmd(&registry, home)
            .args(["sign", "--yes", "--tlog-upload=false", "--key"])
            .arg(&cosign_key)
            .arg("--registry-cacert")
            .arg(registry.ca_path())
            .arg(&by_cosign)
            .output()
            .unwrap(),
    );
    let out = home.join("by-cosign.wasm");
    succeeded(pull(&registry, &by_cosign, &out, &cosign_pub));
    assert_eq!(
        std::fs::read(&out).unwrap(),
        std::fs::read(plugin()).unwrap()
    );
    let (_, other_pub) = openssl_keys(home, "other");
    let err = refused(pull(&registry, &by_cosign, &out, &other_pub));
    assert!(err.contains("none of its"), "{err}");

    // kubewasm signs, cosign verifies (and refuses under another key).
    let (key, public) = openssl_keys(home, "kubewasm");
    let by_kubewasm = push(
        &registry,
        &format!("{}/plugins/by-kubewasm:v1", registry.host()),
        Some(&key),
    );
    let verify = |public: &Path| {
        cosign_cmd(&registry, home)
            .args(["verify", "--insecure-ignore-tlog=true", "--key"])
            .arg(public)
            .arg("--registry-cacert")
            .arg(registry.ca_path())
            .arg(&by_kubewasm)
            .output()
            .unwrap()
    };
    let verified = succeeded(verify(&public));
    let claims: serde_json::Value = serde_json::from_slice(&verified.stdout).unwrap();
    assert_eq!(
        claims[0]["critical"]["image"]["docker-manifest-digest"],
        by_kubewasm.split('@').nth(1).unwrap()
    );
    assert!(!verify(&cosign_pub).status.success());
}
