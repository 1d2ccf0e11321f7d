//! scripts/release.sh: a release written with the debug binary
//! (`RELEASE_BINARY`) and a throwaway cosign key into a temp dist dir holds
//! what docs/book/src/contributing/releasing.md says: SHA256SUMS verifies every file,
//! `cosign verify-blob` accepts each signature and refuses a tampered
//! file, the SBOMs are CycloneDX 1.5 by its schema, the chart lints, the
//! OCI layout's index names the tag, and the image's signature verifies
//! with `cosign verify` once the layout is pushed to a registry and the
//! signature attached. And it refuses what it should: a version that is not
//! the workspace's, no key without RELEASE_UNSIGNED=1.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use kubewasm_tests::e2e::kubewasm_bin;
use kubewasm_tests::incluster::succeeded;
use kubewasm_tests::registry::Registry;
use kubewasm_tests::repo_root;
use kubewasm_tests::tools::helm;
use serde_json::Value;

const VERSION: &str = "0.1.0-rc.1";
const PASSWORD: &str = "release-test";

fn cosign() -> PathBuf {
    let bin = repo_root().join(".tools/bin/cosign");
    assert!(
        bin.is_file(),
        "{} is missing: run scripts/install-cosign.sh (or scripts/setup.sh)",
        bin.display()
    );
    bin
}

/// cosign with its state in `home`, no transparency log or TUF fetch.
fn cosign_cmd(home: &Path) -> Command {
    let mut cmd = Command::new(cosign());
    cmd.env("HOME", home)
        .env("TUF_ROOT", home.join("tuf"))
        .env("COSIGN_PASSWORD", PASSWORD)
        .env("COSIGN_EXPERIMENTAL", "0")
        .current_dir(home);
    cmd
}

fn release(dist: &Path, version: &str) -> Command {
    let mut cmd = Command::new("bash");
    cmd.arg(repo_root().join("scripts/release.sh"))
        .arg(version)
        .env("DIST", dist)
        .env("RELEASE_BINARY", kubewasm_bin())
        .env_remove("RELEASE_KEY")
        .env_remove("RELEASE_UNSIGNED");
    cmd
}

fn verify_blob(home: &Path, file: &Path, signature: &Path) -> Output {
    cosign_cmd(home)
        .args(["verify-blob", "--insecure-ignore-tlog=true", "--key"])
        .arg(home.join("cosign.pub"))
        .arg("--signature")
        .arg(signature)
        .arg(file)
        .output()
        .unwrap()
}

#[test]
fn refuses_other_versions_and_no_key() {
    let dist = tempfile::tempdir().unwrap();
    for (version, says) in [
        ("0.2.0", "not the workspace's version 0.1.0"),
        ("v0.1.0", "not a SemVer version"),
        ("0.1", "not a SemVer version"),
        ("0.1.0-01", "not a SemVer version"),
    ] {
        let out = release(dist.path(), version).output().unwrap();
        assert!(!out.status.success(), "{version} was taken");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{version}: {err}");
    }
    let out = release(dist.path(), "0.1.0").output().unwrap();
    assert!(
        !out.status.success(),
        "released unsigned without RELEASE_UNSIGNED=1"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("RELEASE_UNSIGNED=1"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn release_is_verifiable_end_to_end() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    succeeded(
        cosign_cmd(home).arg("generate-key-pair").output().unwrap(),
        "cosign generate-key-pair",
    );
    let dist = home.join("dist");
    let out = succeeded(
        release(&dist, VERSION)
            .env("RELEASE_KEY", home.join("cosign.key"))
            .env("COSIGN_PASSWORD", PASSWORD)
            .output()
            .unwrap(),
        "scripts/release.sh",
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("RELEASE_BINARY"), "{stdout}");

    let bin = format!("kubewasm-{VERSION}-x86_64-linux-musl");
    let image = format!("kubewasm-{VERSION}-image");
    let files: BTreeSet<String> = std::fs::read_dir(&dist)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    let artifacts = [
        bin.clone(),
        format!("{bin}.cdx.json"),
        format!("{image}.oci.tar"),
        format!("{image}.cdx.json"),
        format!("{image}.payload.json"),
        format!("kubewasm-{VERSION}.tgz"),
        "CHANGELOG.md".to_owned(),
    ];
    let mut expected: BTreeSet<String> = artifacts.iter().cloned().collect();
    expected.extend(artifacts.iter().map(|a| format!("{a}.sig")));
    expected.extend(["cosign.pub", "SHA256SUMS", "SHA256SUMS.sig"].map(String::from));
    assert_eq!(files, expected);
    // Every file is printed with its size.
    for f in &files {
        assert!(stdout.contains(f.as_str()), "{f} not printed:\n{stdout}");
    }
    // The public key is the throwaway key's.
    assert_eq!(
        std::fs::read_to_string(dist.join("cosign.pub")).unwrap(),
        std::fs::read_to_string(home.join("cosign.pub")).unwrap()
    );

    // SHA256SUMS names and verifies every other file.
    let sums = std::fs::read_to_string(dist.join("SHA256SUMS")).unwrap();
    let summed: BTreeSet<String> = sums
        .lines()
        .map(|l| l.split_once("  ").unwrap().1.to_owned())
        .collect();
    let mut others = files.clone();
    others.remove("SHA256SUMS");
    others.remove("SHA256SUMS.sig");
    assert_eq!(summed, others);
    succeeded(
        Command::new("sha256sum")
            .args(["--check", "--strict", "SHA256SUMS"])
            .current_dir(&dist)
            .output()
            .unwrap(),
        "sha256sum --check",
    );

    // Each signature verifies under the key; a tampered file is refused.
    for a in artifacts.iter().chain([&"SHA256SUMS".to_owned()]) {
        succeeded(
            verify_blob(home, &dist.join(a), &dist.join(format!("{a}.sig"))),
            &format!("cosign verify-blob {a}"),
        );
    }
    let tampered = home.join("tampered");
    let mut bytes = std::fs::read(dist.join(format!("kubewasm-{VERSION}.tgz"))).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&tampered, bytes).unwrap();
    let refused = verify_blob(
        home,
        &tampered,
        &dist.join(format!("kubewasm-{VERSION}.tgz.sig")),
    );
    assert!(!refused.status.success(), "a tampered chart verified");

    // The SBOMs are CycloneDX 1.5 by its JSON schema (the validator of the
    // supply-chain check), and say what they describe.
    for sbom in [format!("{bin}.cdx.json"), format!("{image}.cdx.json")] {
        let venv = repo_root().join(".tools/venv/bin/python");
        succeeded(
            Command::new(&venv)
                .arg("-c")
                .arg(
                    "import sys\n\
                     from cyclonedx.schema import SchemaVersion\n\
                     from cyclonedx.validation.json import JsonStrictValidator\n\
                     e = JsonStrictValidator(SchemaVersion.V1_5).validate_str(open(sys.argv[1]).read())\n\
                     sys.exit(str(e) if e else 0)",
                )
                .arg(dist.join(&sbom))
                .output()
                .unwrap_or_else(|e| {
                    panic!("{}: {e} (run scripts/install-supply-chain-tools.sh)", venv.display())
                }),
            &format!("CycloneDX 1.5 validation of {sbom}"),
        );
    }
    let image_sbom: Value =
        serde_json::from_slice(&std::fs::read(dist.join(format!("{image}.cdx.json"))).unwrap())
            .unwrap();
    assert_eq!(image_sbom["metadata"]["component"]["type"], "container");
    assert_eq!(image_sbom["metadata"]["component"]["version"], VERSION);
    let components = image_sbom["components"].as_array().unwrap();
    assert!(components.iter().any(|c| c["name"] == "/kubewasm"));
    assert!(components.iter().any(|c| c["name"] == "wasmtime"));

    // The chart lints and carries the version.
    let chart = dist.join(format!("kubewasm-{VERSION}.tgz"));
    succeeded(
        Command::new(helm())
            .args(["lint", "--strict"])
            .arg(&chart)
            .output()
            .unwrap(),
        "helm lint --strict of the packaged chart",
    );
    let shown = succeeded(
        Command::new(helm())
            .args(["show", "chart"])
            .arg(&chart)
            .output()
            .unwrap(),
        "helm show chart",
    );
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.contains(&format!("version: {VERSION}")), "{shown}");
    assert!(shown.contains(&format!("appVersion: {VERSION}")), "{shown}");

    // The changelog is a section of this version.
    let changelog = std::fs::read_to_string(dist.join("CHANGELOG.md")).unwrap();
    assert!(changelog.contains(&format!("## {VERSION}")), "{changelog}");
    assert!(changelog.contains("### Host"), "{changelog}");

    // The OCI layout's index names the tag; its manifest is the payload's.
    let layout = home.join("layout");
    std::fs::create_dir_all(&layout).unwrap();
    succeeded(
        Command::new("tar")
            .arg("-xf")
            .arg(dist.join(format!("{image}.oci.tar")))
            .arg("-C")
            .arg(&layout)
            .output()
            .unwrap(),
        "tar -x of the image",
    );
    let index: Value =
        serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).unwrap();
    let named: Vec<&Value> = index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| {
            let name = &m["annotations"]["org.opencontainers.image.ref.name"];
            *name == format!("localhost/kubewasm:{VERSION}") || *name == VERSION
        })
        .collect();
    assert_eq!(named.len(), 1, "{index}");
    let digest = named[0]["digest"].as_str().unwrap().to_owned();
    let payload: Value =
        serde_json::from_slice(&std::fs::read(dist.join(format!("{image}.payload.json"))).unwrap())
            .unwrap();
    assert_eq!(
        payload["critical"]["image"]["docker-manifest-digest"],
        digest.as_str()
    );

    // Pushed as it is, with the signature attached, `cosign verify` accepts
    // the image under the release key.
    push_attach_verify(home, &dist, &layout, &image, &digest);
}

fn layout_blob(layout: &Path, digest: &str) -> Vec<u8> {
    let (algo, hex) = digest.split_once(':').unwrap();
    std::fs::read(layout.join("blobs").join(algo).join(hex)).unwrap()
}

fn push_attach_verify(home: &Path, dist: &Path, layout: &Path, image: &str, digest: &str) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let registry = rt.block_on(Registry::start());
    let manifest_bytes = layout_blob(layout, digest);
    let manifest: Value = serde_json::from_slice(&manifest_bytes).unwrap();
    rt.block_on(async {
        let mut blobs = vec![manifest["config"]["digest"].as_str().unwrap().to_owned()];
        for layer in manifest["layers"].as_array().unwrap() {
            blobs.push(layer["digest"].as_str().unwrap().to_owned());
        }
        for b in blobs {
            assert_eq!(
                registry
                    .put_blob("kubewasm", &layout_blob(layout, &b))
                    .await,
                b
            );
        }
        registry
            .put_manifest(
                "kubewasm",
                VERSION,
                manifest["mediaType"]
                    .as_str()
                    .unwrap_or("application/vnd.oci.image.manifest.v1+json"),
                &manifest_bytes,
            )
            .await;
    });
    let reference = format!("{}/kubewasm@{digest}", registry.host());
    let with_registry = |cmd: &mut Command| {
        cmd.env("SSL_CERT_FILE", registry.ca_path())
            .arg("--registry-cacert")
            .arg(registry.ca_path());
    };
    let mut attach = cosign_cmd(home);
    attach.args(["attach", "signature", "--payload"]);
    attach
        .arg(dist.join(format!("{image}.payload.json")))
        .arg("--signature")
        .arg(dist.join(format!("{image}.payload.json.sig")));
    with_registry(&mut attach);
    attach.arg(&reference);
    succeeded(attach.output().unwrap(), "cosign attach signature");
    let verify = |key: &Path| {
        let mut cmd = cosign_cmd(home);
        cmd.args(["verify", "--insecure-ignore-tlog=true", "--key"])
            .arg(key);
        with_registry(&mut cmd);
        cmd.arg(&reference).output().unwrap()
    };
    let verified = succeeded(
        verify(&dist.join("cosign.pub")),
        "cosign verify of the pushed image",
    );
    let claims: Value = serde_json::from_slice(&verified.stdout).unwrap();
    assert_eq!(
        claims[0]["critical"]["image"]["docker-manifest-digest"],
        digest
    );
    // Another key does not verify it.
    let other = home.join("other");
    std::fs::create_dir_all(&other).unwrap();
    succeeded(
        cosign_cmd(&other)
            .arg("generate-key-pair")
            .output()
            .unwrap(),
        "cosign generate-key-pair (other)",
    );
    assert!(!verify(&other.join("cosign.pub")).status.success());
}
