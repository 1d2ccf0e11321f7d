//! Plugin modules through a real OCI registry (Debian's docker-registry
//! over HTTPS under a test CA, tests/src/registry.rs): push and pull by tag
//! and digest in the Wasm artifact layout, the digest cache serving a
//! stopped registry and catching a tampered file, refusals (not a Wasm
//! artifact, wrong credentials, an untrusted CA) as typed errors, and the
//! `kubewasm push` / `kubewasm pull` round trip through the binary.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use kubewasm::oci::{self, Credentials, Error, ModuleCache, OciClient, PullOptions, Transport};
use kubewasm_tests::e2e::{kubewasm_bin, succeeded};
use kubewasm_tests::registry::Registry;
use kubewasm_tests::wasm;

fn client(registry: &Registry, cache: Option<ModuleCache>) -> OciClient {
    let transport = Transport::default()
        .with_ca_pem(&registry.ca_pem(), "test CA")
        .unwrap();
    OciClient::new(
        transport,
        PullOptions {
            cache,
            ..PullOptions::default()
        },
    )
}

#[tokio::test]
async fn a_pushed_plugin_pulls_by_tag_and_digest_in_the_wasm_artifact_layout() {
    let registry = Registry::start().await;
    let module = wasm("noop");
    let oci = client(&registry, None);
    let reference = format!("{}/plugins/noop:v1", registry.host());
    let pushed = oci
        .push(&module, &reference, &Credentials::Anonymous)
        .await
        .unwrap();
    assert_eq!(pushed.pinned, format!("{reference}@{}", pushed.digest));
    assert_eq!(pushed.layer_digest, oci::sha256_digest(&module));

    let by_tag = oci.pull(&reference, &Credentials::Anonymous).await.unwrap();
    assert_eq!(by_tag.bytes, module);
    assert_eq!(
        by_tag.digest, pushed.digest,
        "the tag resolves to the pushed manifest"
    );
    assert_eq!(
        by_tag.pinned,
        format!("{}/plugins/noop@{}", registry.host(), pushed.digest)
    );
    let by_digest = oci
        .pull(&by_tag.pinned, &Credentials::Anonymous)
        .await
        .unwrap();
    assert_eq!(by_digest.bytes, module);
    assert_eq!(by_digest.layer_digest, pushed.layer_digest);

    // What the registry holds, through its own API.
    let (content_type, body) = registry.manifest("plugins/noop", &pushed.digest).await;
    assert_eq!(content_type, "application/vnd.oci.image.manifest.v1+json");
    assert_eq!(oci::sha256_digest(&body), pushed.digest);
    let manifest: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        manifest["mediaType"],
        "application/vnd.oci.image.manifest.v1+json"
    );
    assert_eq!(
        manifest["config"]["mediaType"],
        "application/vnd.wasm.config.v0+json"
    );
    let layers = manifest["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1);
    assert_eq!(layers[0]["mediaType"], "application/wasm");
    assert_eq!(layers[0]["digest"], pushed.layer_digest.as_str());
    let config = registry
        .blob(
            "plugins/noop",
            manifest["config"]["digest"].as_str().unwrap(),
        )
        .await;
    let config: serde_json::Value = serde_json::from_slice(&config).unwrap();
    assert_eq!(config["architecture"], "wasm");
    assert_eq!(config["os"], "wasip2", "noop is a component");
    assert_eq!(config["layerDigests"][0], pushed.layer_digest.as_str());
}

#[tokio::test]
async fn the_digest_cache_serves_a_stopped_registry_and_repulls_a_tampered_file() {
    let mut registry = Registry::start().await;
    let module = wasm("noop");
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = ModuleCache::new(cache_dir.path(), 64 << 20);
    let oci = client(&registry, Some(cache.clone()));
    let reference = format!("{}/plugins/noop:v1", registry.host());
    let pushed = oci
        .push(&module, &reference, &Credentials::Anonymous)
        .await
        .unwrap();
    let first = oci
        .pull(&pushed.pinned, &Credentials::Anonymous)
        .await
        .unwrap();
    assert!(!first.from_cache);
    let path = first.path.clone().unwrap();
    assert_eq!(
        path,
        cache_dir.path().join(format!(
            "oci/sha256/{}.wasm",
            pushed.layer_digest.trim_start_matches("sha256:")
        ))
    );

    registry.stop();
    let offline = oci
        .pull(&pushed.pinned, &Credentials::Anonymous)
        .await
        .unwrap();
    assert!(offline.from_cache, "a pinned pull needs no registry");
    assert_eq!(offline.bytes, module);
    assert_eq!(offline.digest, pushed.digest);
    // A tag needs the registry to resolve: the error says it is unreachable.
    let err = oci
        .pull(&reference, &Credentials::Anonymous)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Unreachable { .. }), "{err}");
    assert!(err.to_string().contains(registry.host()), "{err}");

    // Tampered on disk: detected; with the registry down the pull fails
    // rather than serve it, and once it is back the module is pulled again.
    let mut tampered = module.clone();
    tampered[100] ^= 0xff;
    std::fs::write(&path, &tampered).unwrap();
    let err = oci
        .pull(&pushed.pinned, &Credentials::Anonymous)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Unreachable { .. }), "{err}");
    assert!(!path.exists(), "the tampered file is deleted");
    std::fs::write(&path, &tampered).unwrap();
    registry.resume().await;
    let again = oci
        .pull(&pushed.pinned, &Credentials::Anonymous)
        .await
        .unwrap();
    assert!(!again.from_cache);
    assert_eq!(again.bytes, module);
    assert_eq!(
        std::fs::read(&path).unwrap(),
        module,
        "the cache holds the good bytes again"
    );
}

#[tokio::test]
async fn a_registry_serving_other_bytes_than_the_digest_is_refused_naming_both() {
    let registry = Registry::start().await;
    let module = wasm("noop");
    let cache_dir = tempfile::tempdir().unwrap();
    let oci = client(
        &registry,
        Some(ModuleCache::new(cache_dir.path(), 64 << 20)),
    );
    let reference = format!("{}/plugins/noop:v1", registry.host());
    let pushed = oci
        .push(&module, &reference, &Credentials::Anonymous)
        .await
        .unwrap();
    // Same length, one byte changed, in the registry's own storage.
    let mut other = module.clone();
    other[100] ^= 0xff;
    std::fs::write(registry.blob_file(&pushed.layer_digest), &other).unwrap();
    let err = oci
        .pull(&reference, &Credentials::Anonymous)
        .await
        .unwrap_err();
    let Error::DigestMismatch {
        reference: r,
        expected,
        actual,
    } = &err
    else {
        panic!("{err}")
    };
    assert_eq!(r, &reference);
    assert_eq!(expected, &pushed.layer_digest);
    assert_eq!(actual, &oci::sha256_digest(&other));
    assert!(
        !cache_dir.path().join("oci/sha256").exists()
            || std::fs::read_dir(cache_dir.path().join("oci/sha256"))
                .unwrap()
                .count()
                == 0,
        "nothing refused reaches the cache"
    );
}

#[tokio::test]
async fn an_image_that_is_not_a_wasm_artifact_is_refused_by_name() {
    let registry = Registry::start().await;
    let config = registry.put_blob("images/app", b"{}").await;
    let layer = registry.put_blob("images/app", b"not a tarball").await;
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config, "size": 2},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": layer, "size": 13}],
    });
    registry
        .put_manifest(
            "images/app",
            "v1",
            "application/vnd.oci.image.manifest.v1+json",
            &serde_json::to_vec(&manifest).unwrap(),
        )
        .await;
    let reference = format!("{}/images/app:v1", registry.host());
    let err = client(&registry, None)
        .pull(&reference, &Credentials::Anonymous)
        .await
        .unwrap_err();
    let Error::NotWasm {
        reference: r,
        reason,
    } = &err
    else {
        panic!("{err}")
    };
    assert_eq!(r, &reference);
    assert!(
        reason.contains("application/vnd.oci.image.config.v1+json"),
        "{err}"
    );

    let missing = format!("{}/images/none:v1", registry.host());
    let err = client(&registry, None)
        .pull(&missing, &Credentials::Anonymous)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err}");
}

#[tokio::test]
async fn modules_over_the_size_limit_are_refused_before_download() {
    let registry = Registry::start().await;
    let module = wasm("noop");
    let reference = format!("{}/plugins/noop:v1", registry.host());
    client(&registry, None)
        .push(&module, &reference, &Credentials::Anonymous)
        .await
        .unwrap();
    let small = OciClient::new(
        Transport::default()
            .with_ca_pem(&registry.ca_pem(), "test CA")
            .unwrap(),
        PullOptions {
            max_module_bytes: 1024,
            ..PullOptions::default()
        },
    );
    let err = small
        .pull(&reference, &Credentials::Anonymous)
        .await
        .unwrap_err();
    let Error::TooLarge { size, limit, .. } = err else {
        panic!("{err}")
    };
    assert_eq!((size, limit), (module.len() as u64, 1024));
}

#[tokio::test]
async fn credentials_are_required_when_auth_is_on_and_wrong_ones_are_unauthorized() {
    let registry = Registry::start_with_auth("alice", "right-password").await;
    let module = wasm("noop");
    let oci = client(&registry, None);
    let reference = format!("{}/plugins/noop:v1", registry.host());
    let docker_config = format!(
        r#"{{"auths":{{"https://{}":{{"username":"alice","password":"right-password"}}}}}}"#,
        registry.host()
    );
    let good =
        oci::credentials_from_docker_config(docker_config.as_bytes(), registry.host()).unwrap();
    assert!(matches!(good, Credentials::Basic { .. }));
    let pushed = oci.push(&module, &reference, &good).await.unwrap();
    assert_eq!(
        oci.pull(&reference, &good).await.unwrap().digest,
        pushed.digest
    );

    let wrong = Credentials::Basic {
        username: "alice".into(),
        password: "wrong".into(),
    };
    for credentials in [wrong, Credentials::Anonymous] {
        let err = oci.pull(&reference, &credentials).await.unwrap_err();
        assert!(
            matches!(err, Error::Unauthorized { .. }),
            "{credentials:?}: {err}"
        );
        let err = oci
            .push(&module, &reference, &credentials)
            .await
            .unwrap_err();
        assert!(
            matches!(err, Error::Unauthorized { .. }),
            "{credentials:?}: {err}"
        );
    }
}

#[tokio::test]
async fn without_the_ca_the_tls_handshake_fails_naming_the_ca_option() {
    let registry = Registry::start().await;
    let reference = format!("{}/plugins/noop:v1", registry.host());
    let oci = OciClient::new(Transport::default(), PullOptions::default());
    let err = oci
        .pull(&reference, &Credentials::Anonymous)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Tls { .. }), "{err}");
    assert!(err.to_string().contains("--ca"), "{err}");
}

#[test]
fn the_cli_pushes_and_pulls_through_the_registry() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let registry = rt.block_on(Registry::start());
    let dir = tempfile::tempdir().unwrap();
    let plugin = kubewasm_tests::plugin_artifacts().join("noop.wasm");
    let reference = format!("{}/plugins/noop:cli", registry.host());
    let push = succeeded(
        Command::new(kubewasm_bin())
            .arg("push")
            .arg(&plugin)
            .arg(&reference)
            .arg("--ca")
            .arg(registry.ca_path())
            .output()
            .unwrap(),
    );
    let pinned = String::from_utf8(push.stdout).unwrap().trim().to_owned();
    let digest = pinned
        .strip_prefix(&format!("{reference}@"))
        .unwrap_or_else(|| panic!("push printed {pinned:?}"));
    assert!(
        digest.starts_with("sha256:") && digest.len() == 71,
        "{digest}"
    );

    // By tag to the default name; by digest to -o.
    let pull = succeeded(
        Command::new(kubewasm_bin())
            .current_dir(dir.path())
            .args(["pull", &reference, "--ca"])
            .arg(registry.ca_path())
            .output()
            .unwrap(),
    );
    assert!(String::from_utf8_lossy(&pull.stdout).contains(digest));
    let module = std::fs::read(&plugin).unwrap();
    assert_eq!(std::fs::read(dir.path().join("noop.wasm")).unwrap(), module);
    let out = dir.path().join("pinned.wasm");
    let pinned_ref = format!("{}/plugins/noop@{digest}", registry.host());
    succeeded(
        Command::new(kubewasm_bin())
            .args(["pull", &pinned_ref, "-o"])
            .arg(&out)
            .arg("--ca")
            .arg(registry.ca_path())
            .output()
            .unwrap(),
    );
    assert_eq!(std::fs::read(&out).unwrap(), module);

    // Without --ca: refused, and the message names the option.
    let pull = Command::new(kubewasm_bin())
        .current_dir(dir.path())
        .args(["pull", &reference])
        .output()
        .unwrap();
    assert!(!pull.status.success());
    let stderr = String::from_utf8_lossy(&pull.stderr);
    assert!(stderr.contains("--ca"), "{stderr}");
}
