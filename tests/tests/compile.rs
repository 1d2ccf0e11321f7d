//! Plugin loading through the binary: `kubewasm compile` precompiles a
//! folder (a bad file fails alone and the exit says so) and the host then
//! loads without compiling; the host compiles in a child process whose
//! errors read as an in-process compile's; an artifact whose MAC does not
//! verify (tampered, another plugin's under a valid name, truncated,
//! unsigned, signed with another key) is refused naming the file and the
//! reason, and the plugin is served from its `.wasm`; the cache stays
//! under its cap.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use kubewasm_tests::e2e::kubewasm_bin;
use kubewasm_tests::{install, repo_root, until_idle_local, wasm};

/// A local cluster with one Pod, an empty plugin folder and a cache path.
struct Setup {
    dir: tempfile::TempDir,
}

impl Setup {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        for sub in ["cluster", "plugins"] {
            std::fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        std::fs::write(
            dir.path().join("cluster/pods.yaml"),
            "apiVersion: v1\nkind: Pod\nmetadata: {name: a, namespace: default}\n",
        )
        .unwrap();
        Self { dir }
    }
    fn cluster(&self) -> PathBuf {
        self.dir.path().join("cluster")
    }
    fn plugins(&self) -> PathBuf {
        self.dir.path().join("plugins")
    }
    fn cache(&self) -> PathBuf {
        self.dir.path().join("cache")
    }
    fn compile(&self, folder: &Path, extra: &[&str]) -> Output {
        Command::new(kubewasm_bin())
            .args(["--log-format", "text", "compile"])
            .arg(folder)
            .arg("--cache-dir")
            .arg(self.cache())
            .args(extra)
            .output()
            .unwrap()
    }
    fn run(&self, extra: &[&str]) -> Output {
        until_idle_local(&self.cluster(), &self.plugins(), &self.cache())
            .args(extra)
            .output()
            .unwrap()
    }
}

/// stdout and stderr; quotes dropped from stderr, so that a log field
/// reads `key=value` whether it was recorded as a string or displayed.
fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).replace('"', ""),
    )
}

/// The cache's artifacts: (name, size); not its key file.
fn artifacts(cache: &Path) -> Vec<(String, u64)> {
    let mut v: Vec<_> = std::fs::read_dir(cache)
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().ends_with(".cwasm"))
                .map(|e| {
                    (
                        e.file_name().to_string_lossy().into_owned(),
                        e.metadata().unwrap().len(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn lines_with<'a>(log: &'a str, needles: &[&str]) -> Vec<&'a str> {
    log.lines()
        .filter(|l| needles.iter().all(|n| l.contains(n)))
        .collect()
}

const NOOP_ACCESS: &str = "access:\n  - {kinds: [pods], verbs: [read]}\n";

#[test]
fn compile_precompiles_a_folder_names_bad_files_and_the_host_then_loads_without_compiling() {
    let s = Setup::new();
    let good = ["noop", "config_replicator"];
    let replicator_access =
        std::fs::read_to_string(repo_root().join("examples/plugins/config-replicator.yaml"))
            .unwrap();
    install(&s.plugins(), "noop", "noop", Some(NOOP_ACCESS));
    install(
        &s.plugins(),
        "config_replicator",
        "config_replicator",
        Some(&replicator_access),
    );
    let folder = s.dir.path().join("to-compile");
    std::fs::create_dir_all(&folder).unwrap();
    for name in good {
        install(&folder, name, name, None);
    }
    let noop = wasm("noop");
    std::fs::write(folder.join("half.wasm"), &noop[..noop.len() / 2]).unwrap();
    std::fs::write(folder.join("core.wasm"), b"\0asm\x01\0\0\0").unwrap();
    install(&folder, "old-wit", "wrong_version", None);

    let out = s.compile(&folder, &[]);
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "{stdout}\n{stderr}");
    for (file, cause) in [
        ("half.wasm", "truncated"),
        ("core.wasm", "core WebAssembly module"),
        ("old-wit.wasm", "@0.0.9"),
    ] {
        assert_eq!(
            lines_with(&stdout, &["FAILED", file, cause, "fix or remove the file"]).len(),
            1,
            "{file}: {stdout}"
        );
    }
    for name in good {
        assert_eq!(
            lines_with(&stdout, &["compiled", &format!("{name}.wasm")]).len(),
            1,
            "{stdout}"
        );
    }
    assert!(
        stdout.contains("5 plugins: 2 compiled, 0 already cached, 3 failed"),
        "{stdout}"
    );
    assert!(
        stderr.contains("3 of 5 plugins did not compile: core, half, old-wit"),
        "{stderr}"
    );
    // An artifact per good file, none for the bad ones.
    assert_eq!(
        artifacts(&s.cache()).len(),
        2,
        "{:?}",
        artifacts(&s.cache())
    );

    // Again: nothing to compile, and a clean folder exits 0.
    for bad in ["half", "core", "old-wit"] {
        std::fs::remove_file(folder.join(format!("{bad}.wasm"))).unwrap();
    }
    let out = s.compile(&folder, &[]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("2 plugins: 0 compiled, 2 already cached, 0 failed"),
        "{stdout}"
    );

    // The host maps the shipped artifacts: no compile at all.
    let out = s.run(&[]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        lines_with(&stderr, &["compiling component"]).is_empty(),
        "{stderr}"
    );
    for name in good {
        assert_eq!(
            lines_with(
                &stderr,
                &[
                    "plugin version started",
                    &format!("plugin={name}"),
                    "compile=Cached"
                ]
            )
            .len(),
            1,
            "{name}: {stderr}"
        );
    }
}

#[test]
fn the_host_compiles_in_a_child_whose_errors_read_as_in_process_ones() {
    let s = Setup::new();
    install(&s.plugins(), "noop", "noop", Some(NOOP_ACCESS));
    let noop = wasm("noop");
    // Passes the header checks; only the compiler finds the cut.
    std::fs::write(s.plugins().join("half.wasm"), &noop[..noop.len() / 2]).unwrap();
    // Whole, but not a component a compiler accepts: a section of an
    // unknown kind (invalid, not truncated).
    let mut garbage = b"\0asm\x0d\0\x01\0".to_vec();
    garbage.extend([0x20, 0x01, 0x00]);
    std::fs::write(s.plugins().join("garbage.wasm"), &garbage).unwrap();

    // The run's closing error: one line per plugin that did not load.
    let failure = |stderr: &str, plugin: &str| -> String {
        let line = lines_with(stderr, &[&format!("plugin {plugin} failed to load:")]);
        assert_eq!(line.len(), 1, "{plugin}: {stderr}");
        line[0].trim().to_owned()
    };
    let out = s.run(&[]);
    let (stdout, child) = text(&out);
    assert!(!out.status.success(), "{stdout}\n{child}");
    // Compiled by the child (the default), loaded, served.
    assert_eq!(
        lines_with(
            &child,
            &["component compiled", "plugin=noop", "compiler=child"]
        )
        .len(),
        1,
        "{child}"
    );
    assert!(
        child.contains("plugin half failed to load") && child.contains("truncated"),
        "{child}"
    );

    std::fs::remove_dir_all(s.cache()).unwrap();
    let out = s.run(&["--compiler", "in-process"]);
    let (stdout, here) = text(&out);
    assert!(!out.status.success(), "{stdout}\n{here}");
    assert!(
        lines_with(&here, &["compiling component", "compiler=in-process"]).len() == 3,
        "{here}"
    );
    for plugin in ["half", "garbage"] {
        assert_eq!(failure(&child, plugin), failure(&here, plugin), "{plugin}");
    }
    assert!(failure(&child, "garbage").contains("invalid"), "{child}");
}

#[test]
fn a_corrupt_cache_artifact_is_deleted_and_recompiled() {
    let s = Setup::new();
    install(&s.plugins(), "noop", "noop", Some(NOOP_ACCESS));
    let out = s.compile(&s.plugins(), &[]);
    assert!(out.status.success(), "{:?}", text(&out));
    let [(name, len)] = artifacts(&s.cache()).try_into().unwrap();
    let path = s.cache().join(&name);
    // Half of it, then garbage: what a full disk or bit rot leaves.
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.truncate(len as usize / 2);
    bytes.extend([0xa5; 4096]);
    std::fs::write(&path, &bytes).unwrap();

    let out = s.run(&[]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(
        lines_with(
            &stderr,
            &[
                "compile cache artifact refused",
                &name,
                "MAC does not match",
                "removed=true"
            ]
        )
        .len(),
        1,
        "{stderr}"
    );
    assert_eq!(
        lines_with(
            &stderr,
            &["plugin version started", "plugin=noop", "compile=Compiled"]
        )
        .len(),
        1,
        "{stderr}"
    );
    // Rewritten whole: the next start maps it.
    assert_eq!(artifacts(&s.cache()), [(name, len)]);
    let out = s.run(&[]);
    let (_, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        lines_with(
            &stderr,
            &["plugin version started", "plugin=noop", "compile=Cached"]
        )
        .len(),
        1,
        "{stderr}"
    );
}

/// Native code only from the host or its operator: an artifact the host's
/// key does not verify is never mapped, whatever its name says. Each is
/// put in place of noop's artifact; each run refuses it naming the file
/// and the reason, deletes it, and serves noop compiled from its `.wasm`.
#[test]
fn artifacts_the_host_key_does_not_verify_are_refused_and_the_wasm_served() {
    let s = Setup::new();
    install(&s.plugins(), "noop", "noop", Some(NOOP_ACCESS));
    let out = s.compile(&s.plugins(), &[]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("only a host using this cache folder maps them"),
        "{stdout}"
    );
    let [(name, _)] = artifacts(&s.cache()).try_into().unwrap();
    let path = s.cache().join(&name);
    let good = std::fs::read(&path).unwrap();

    // Another plugin's artifact, signed with this very key, renamed to
    // noop's: what a plugin image shipping `cache/` could do.
    let other = s.dir.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    install(&other, "realistic", "realistic", None);
    assert!(s.compile(&other, &[]).status.success());
    let foreign_name = artifacts(&s.cache())
        .into_iter()
        .map(|(n, _)| n)
        .find(|n| *n != name)
        .unwrap();
    let foreign = std::fs::read(s.cache().join(&foreign_name)).unwrap();
    // The same plugin compiled by someone holding another key.
    let elsewhere = s.dir.path().join("elsewhere");
    let key = s.dir.path().join("operator.key");
    std::fs::write(&key, "0123456789abcdef0123456789abcdef\n").unwrap();
    let out = Command::new(kubewasm_bin())
        .args(["--log-format", "text", "compile"])
        .arg(s.plugins())
        .arg("--cache-dir")
        .arg(&elsewhere)
        .arg("--artifact-key")
        .arg(&key)
        .output()
        .unwrap();
    assert!(out.status.success(), "{:?}", text(&out));
    assert!(
        text(&out)
            .0
            .contains("hosts run with the same --artifact-key map them"),
        "{:?}",
        text(&out)
    );
    let other_key = std::fs::read(elsewhere.join(&name)).unwrap();
    // Past the 48-byte header, one byte of machine code changed.
    let mut tampered = good.clone();
    let mid = 48 + (good.len() - 48) / 2;
    tampered[mid] ^= 0x01;
    // Another release's format: the header's version byte (after
    // `KWCWASM`) says v1, HMAC-SHA256.
    assert_eq!(&good[..8], b"KWCWASM\x02");
    let mut v1 = good.clone();
    v1[7] = 1;

    for (what, bytes, reason) in [
        ("tampered", tampered, "its MAC does not match"),
        ("foreign", foreign, "its MAC does not match"),
        (
            "truncated in its header",
            good[..30].to_vec(),
            "it is truncated",
        ),
        (
            "truncated in its code",
            good[..good.len() - 100].to_vec(),
            "its MAC does not match",
        ),
        (
            "unsigned (a raw wasmtime artifact)",
            good[48..].to_vec(),
            "no kubewasm signature header",
        ),
        (
            "signed with another key",
            other_key,
            "signed with another key",
        ),
        (
            "in another release's format",
            v1,
            "it is in artifact format v1",
        ),
    ] {
        std::fs::write(&path, &bytes).unwrap();
        let out = s.run(&[]);
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{what}: {stdout}\n{stderr}");
        assert_eq!(
            lines_with(
                &stderr,
                &[
                    "compile cache artifact refused",
                    &name,
                    reason,
                    "removed=true"
                ]
            )
            .len(),
            1,
            "{what}: {stderr}"
        );
        assert_eq!(
            lines_with(
                &stderr,
                &["plugin version started", "plugin=noop", "compile=Compiled"]
            )
            .len(),
            1,
            "{what}: {stderr}"
        );
        // What it compiled replaced the refused file, signed.
        assert_eq!(std::fs::read(&path).unwrap().len(), good.len(), "{what}");
    }
}

/// The operator's key: `kubewasm compile --artifact-key` signs, a host run
/// with the same key maps without compiling, a host with another key
/// refuses and compiles.
#[test]
fn artifacts_signed_with_the_operators_key_load_only_under_that_key() {
    let s = Setup::new();
    install(&s.plugins(), "noop", "noop", Some(NOOP_ACCESS));
    let (key, other) = (s.dir.path().join("a.key"), s.dir.path().join("b.key"));
    std::fs::write(&key, [1u8; 32]).unwrap();
    std::fs::write(&other, [2u8; 32]).unwrap();
    let key_arg = key.to_str().unwrap();
    let out = s.compile(&s.plugins(), &["--artifact-key", key_arg]);
    assert!(out.status.success(), "{:?}", text(&out));
    let out = s.run(&["--artifact-key", key_arg]);
    let (_, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        lines_with(
            &stderr,
            &["plugin version started", "plugin=noop", "compile=Cached"]
        )
        .len(),
        1,
        "{stderr}"
    );
    let out = s.run(&["--artifact-key", other.to_str().unwrap()]);
    let (_, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        lines_with(
            &stderr,
            &["compile cache artifact refused", "signed with another key"]
        )
        .len(),
        1,
        "{stderr}"
    );
    assert_eq!(
        lines_with(
            &stderr,
            &["plugin version started", "plugin=noop", "compile=Compiled"]
        )
        .len(),
        1,
        "{stderr}"
    );
    // A key too short to be one is an error at start, naming the file.
    std::fs::write(&other, "secret\n").unwrap();
    let out = s.run(&["--artifact-key", other.to_str().unwrap()]);
    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(
        stderr.contains("b.key holds 6 bytes, fewer than 32"),
        "{stderr}"
    );
}

#[test]
fn the_cache_stays_under_its_cap_evicting_the_least_recently_used() {
    let s = Setup::new();
    let names = ["noop", "realistic", "recorder", "crashloop_watcher"];
    let mut sizes = Vec::new();
    // One build per plugin, as successive CI runs would write them.
    for name in names {
        let folder = s.dir.path().join(name);
        std::fs::create_dir_all(&folder).unwrap();
        install(&folder, name, name, None);
        let before: Vec<String> = artifacts(&s.cache()).into_iter().map(|(n, _)| n).collect();
        let out = s.compile(&folder, &["--compile-cache-max", "1Gi"]);
        assert!(out.status.success(), "{:?}", text(&out));
        let added = artifacts(&s.cache())
            .into_iter()
            .find(|(n, _)| !before.contains(n))
            .unwrap();
        sizes.push(added);
    }
    // A cap that holds the two newest artifacts but not three.
    let newest_two: u64 = sizes[2..].iter().map(|(_, l)| l).sum();
    let cap = newest_two + sizes[1].1.min(sizes[2].1) / 2;
    // The oldest are the first built (their mtimes are their build times).
    let folder = s.dir.path().join("crashloop_watcher");
    let out = s.compile(&folder, &["--compile-cache-max", &cap.to_string()]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let left = artifacts(&s.cache());
    let total: u64 = left.iter().map(|(_, l)| l).sum();
    assert!(total <= cap, "{total} > {cap}: {left:?}");
    let kept: Vec<&String> = left.iter().map(|(n, _)| n).collect();
    assert!(
        kept.contains(&&sizes[3].0),
        "the one just used stays: {left:?}"
    );
    assert!(
        !kept.contains(&&sizes[0].0),
        "the oldest goes first: {left:?}"
    );
    assert!(
        lines_with(&stderr, &["least recently used artifacts evicted"]).len() == 1,
        "{stderr}"
    );
}
