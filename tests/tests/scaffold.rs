//! `kubewasm new` (host/src/scaffold): each language's project builds with
//! its own `build.sh`, and the hello plugin it makes loads in the host and
//! handles the delta of its own fixture (`fixtures/cluster.yaml`) with the
//! exact action its `fixtures/README.md` promises; and its own unit test
//! passes with the language's test command, natively through the SDK's fake
//! host (and fails when the plugin's action changes). Toolchains as for the
//! language plugins: `plugins/install-toolchains.sh`. The C and Go projects
//! build with a PATH of exactly their compiler and `kubewasm` (no cargo,
//! wasm-tools nor wit-bindgen), and a trap in their plugins names the
//! functions it went through.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use kubewasm::scaffold::{self, Lang};
use kubewasm_tests::controlplane::ControlPlane;
use kubewasm_tests::e2e::kubewasm_bin;
use kubewasm_tests::{
    Harness, idle, install_file, language_artifacts, precompile_into, record_until_idle, repo_root,
    write_cluster,
};

/// The PATH the test runs under, plus where rustup and Go install.
fn full_path() -> OsString {
    let home = std::env::var("HOME").unwrap_or_default();
    let path = std::env::var("PATH").unwrap_or_default();
    format!("{home}/.cargo/bin:/usr/local/go/bin:{path}").into()
}

/// `name` on `path` (a PATH value), if it is there.
fn find_on(path: &std::ffi::OsStr, name: &str) -> Option<PathBuf> {
    std::env::split_paths(path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

fn tool(name: &str) -> PathBuf {
    find_on(&full_path(), name)
        .unwrap_or_else(|| panic!("{name} not found: run plugins/install-toolchains.sh"))
}

/// A folder of links to exactly what a C or Go project's build.sh runs:
/// the shell's coreutils, the compiler (clang-19 and the wasm-ld it calls,
/// or go) and `kubewasm`. Nothing that builds Rust or handles components
/// is findable on it.
fn toolchain_bin(lang: Lang, dir: &Path) -> OsString {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let mut tools: Vec<(String, PathBuf)> = ["dirname", "mkdir", "cp", "ls"]
        .iter()
        .map(|t| (t.to_string(), tool(t)))
        .collect();
    match lang {
        Lang::C => {
            // clang-19 runs `wasm-ld-19`, found on PATH.
            tools.push(("clang-19".into(), tool("clang-19")));
            tools.push(("wasm-ld-19".into(), tool("wasm-ld-19")));
        }
        Lang::Go => tools.push(("go".into(), tool("go"))),
        _ => unreachable!("only C and Go build with kubewasm componentize"),
    }
    tools.push(("kubewasm".into(), kubewasm_bin().to_owned()));
    for (name, target) in tools {
        std::os::unix::fs::symlink(target, bin.join(name)).unwrap();
    }
    let path = OsString::from(&bin);
    for absent in ["cargo", "rustc", "wasm-tools", "wit-bindgen"] {
        assert_eq!(
            find_on(&path, absent),
            None,
            "{absent} is on the build's PATH"
        );
    }
    path
}

/// Runs the project's build.sh, reusing what the repository's own builds
/// already fetched (npm packages, the Python venv, a cargo target folder)
/// so the test needs no network of its own. C and Go get
/// [`toolchain_bin`]'s PATH and nothing else.
fn build(lang: Lang, root: &Path) {
    let plugins = repo_root().join("plugins");
    let mut cmd = Command::new(tool("bash"));
    cmd.arg("build.sh")
        .current_dir(root)
        .env("PATH", full_path())
        // build.sh runs the project's fixtures with it (tests/*.yaml).
        .env("KUBEWASM", kubewasm_bin())
        .env(
            "CARGO_TARGET_DIR",
            repo_root().join("target/scaffold-tools"),
        );
    match lang {
        Lang::Rust => {}
        Lang::Js => {
            language_artifacts(); // node_modules
            std::os::unix::fs::symlink(plugins.join("js/node_modules"), root.join("node_modules"))
                .unwrap();
        }
        Lang::Python => {
            language_artifacts(); // the venv
            cmd.env(
                "COMPONENTIZE_PY",
                plugins.join("python/.venv/bin/componentize-py"),
            );
        }
        Lang::C | Lang::Go => {
            let tools = root.parent().unwrap().join(format!("{lang}-tools"));
            cmd.env_remove("CARGO_TARGET_DIR")
                .env("PATH", toolchain_bin(lang, &tools));
        }
    }
    let status = cmd.status().expect("run build.sh");
    assert!(status.success(), "{lang}: build.sh failed");
}

/// The project's unit tests, run with its language's test command: the
/// SDK's fake host stands in for the host (no WebAssembly, no kubewasm).
fn unit_tests(lang: Lang, root: &Path) -> std::process::Output {
    let plugins = repo_root().join("plugins");
    let home = std::env::var("HOME").unwrap_or_default();
    let path = std::env::var("PATH").unwrap_or_default();
    let mut cmd = match lang {
        Lang::Rust => {
            let mut c = Command::new("cargo");
            c.args(["test", "--quiet"]).env(
                "CARGO_TARGET_DIR",
                repo_root().join("target/scaffold-tools"),
            );
            c
        }
        Lang::Js => {
            let mut c = Command::new("node");
            c.arg("--test");
            c
        }
        Lang::Python => {
            // The venv of plugins/python: componentize-py (the fake generates
            // the bindings with it) and pytest (plugins/install-toolchains.sh).
            let mut c = Command::new(plugins.join("python/.venv/bin/python"));
            c.args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
                .env("PYTHONDONTWRITEBYTECODE", "1");
            c
        }
        Lang::C => {
            let mut c = Command::new("bash");
            c.arg("test.sh");
            c
        }
        Lang::Go => {
            let mut c = Command::new("go");
            c.args(["test", "-count=1", "./..."]);
            c
        }
    };
    cmd.current_dir(root).env(
        "PATH",
        format!("{home}/.cargo/bin:/usr/local/go/bin:{path}"),
    );
    cmd.output()
        .unwrap_or_else(|e| panic!("{lang}: run the unit tests: {e}"))
}

/// The project's unit test passes as created, and fails once the hello
/// plugin annotates with another key: it checks the plugin's action.
fn unit_test_passes_then_catches_a_change(lang: Lang) {
    let work = tempfile::tempdir().unwrap();
    let root = scaffold::create(lang, "hello", work.path(), None).unwrap();
    let started = std::time::Instant::now();
    let out = unit_tests(lang, &root);
    assert!(
        out.status.success(),
        "{lang}: the unit tests failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{lang}: unit tests passed in {:?}", started.elapsed());
    let source = root.join(match lang {
        Lang::Rust => "src/lib.rs",
        Lang::Js => "index.js",
        Lang::Python => "app.py",
        Lang::C => "hello.c",
        Lang::Go => "main.go",
    });
    // The key as the plugin's code spells it (not as comments or the Rust
    // test module, in the same file, do).
    let key = match lang {
        Lang::Rust | Lang::C => "\"kubewasm.io/hello\",",
        Lang::Js => "'kubewasm.io/hello'",
        Lang::Python | Lang::Go => "\"kubewasm.io/hello\":",
    };
    let text = std::fs::read_to_string(&source).unwrap();
    assert!(
        text.contains(key),
        "{lang}: {key} not in {}",
        source.display()
    );
    std::fs::write(&source, text.replacen(key, &key.replace("hello", "bye"), 1)).unwrap();
    let out = unit_tests(lang, &root);
    assert!(
        !out.status.success(),
        "{lang}: the unit tests pass although the plugin annotates another key"
    );
}

#[test]
fn rust_scaffold_unit_test_runs_on_the_fake_host() {
    unit_test_passes_then_catches_a_change(Lang::Rust);
}

#[test]
fn js_scaffold_unit_test_runs_on_the_fake_host() {
    unit_test_passes_then_catches_a_change(Lang::Js);
}

#[test]
fn python_scaffold_unit_test_runs_on_the_fake_host() {
    unit_test_passes_then_catches_a_change(Lang::Python);
}

#[test]
fn c_scaffold_unit_test_runs_on_the_fake_host() {
    unit_test_passes_then_catches_a_change(Lang::C);
}

#[test]
fn go_scaffold_unit_test_runs_on_the_fake_host() {
    unit_test_passes_then_catches_a_change(Lang::Go);
}

async fn builds_loads_and_handles_its_fixture(lang: Lang) {
    let work = tempfile::tempdir().unwrap();
    let root = scaffold::create(lang, "hello", work.path(), None).unwrap();
    build(lang, &root);
    let wasm = root.join("dist/hello.wasm");
    let h = Harness::new();
    let cluster = std::fs::read_to_string(root.join("fixtures/cluster.yaml")).unwrap();
    write_cluster(h.cluster.path(), &[("cluster.yaml", &cluster)]);
    precompile_into(&h, &wasm);
    // With the sidecar build.sh put beside it: the access list it needs.
    let sidecar = std::fs::read_to_string(root.join("dist/hello.yaml")).unwrap();
    install_file(h.plugins.path(), "hello", &wasm, Some(&sidecar));
    let actions = record_until_idle(&h).await;
    assert_eq!(
        actions,
        vec![
            r#"hello: patch Merge configmaps demo/greeting {"metadata":{"annotations":{"kubewasm.io/hello":"hello"}}}"#
        ],
        "{lang}"
    );
    // The fixture agrees with a real API server, action by action.
    let (wasm, fixture) = (wasm.clone(), root.join("tests/hello.yaml"));
    tokio::task::spawn_blocking(move || {
        kubewasm_tests::conformance::conform(ControlPlane::shared(), &wasm, vec![fixture], 2);
    })
    .await
    .unwrap();
    fixture_catches_a_change(lang, &root);
}

/// build.sh ran the project's fixture (it fails when a fixture does); the
/// fixture fails once it expects another annotation, naming the field.
fn fixture_catches_a_change(lang: Lang, root: &Path) {
    let fixture = root.join("tests/hello.yaml");
    let text = std::fs::read_to_string(&fixture).unwrap();
    let pinned = "kubewasm.io/hello: hello\n";
    assert_eq!(text.matches(pinned).count(), 4, "{lang}: {text}");
    std::fs::write(
        &fixture,
        text.replacen(pinned, "kubewasm.io/hello: bye\n", 1),
    )
    .unwrap();
    let out = Command::new(kubewasm_bin())
        .args(["test", "dist/hello.wasm", "tests/hello.yaml"])
        .current_dir(root)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{lang}: {stdout}");
    assert!(
        stdout.contains("FAIL  tests/hello.yaml :: the initial list annotates the greeting")
            && stdout.contains("kubewasm.io/hello"),
        "{lang}: {stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_scaffold_builds_and_handles_a_delta() {
    builds_loads_and_handles_its_fixture(Lang::Rust).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn js_scaffold_builds_and_handles_a_delta() {
    builds_loads_and_handles_its_fixture(Lang::Js).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_scaffold_builds_and_handles_a_delta() {
    builds_loads_and_handles_its_fixture(Lang::Python).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_scaffold_builds_and_handles_a_delta() {
    builds_loads_and_handles_its_fixture(Lang::C).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_scaffold_builds_and_handles_a_delta() {
    builds_loads_and_handles_its_fixture(Lang::Go).await;
}

/// A C plugin that aborts in a function of its own.
const C_CRASHER: &str = r#"#include "kubewasm.h"
#include <stdlib.h>

bool kw_plugin_register(const kw_context *ctx, kw_registration *reg, char **error) {
  (void)ctx;
  (void)error;
  const kw_delta_type deltas[] = {KW_ADDED};
  kw_subscribe(reg, "", "v1", "ConfigMap", deltas, 1, NULL, 0);
  return true;
}

__attribute__((noinline)) static void check_greeting(const kw_delta *d) {
  if (d->name.len > 0) abort();
}

bool kw_plugin_handle(const kw_delta *d, kw_handled *handled, kw_error *err) {
  (void)handled;
  (void)err;
  if (d->delta_type == KW_SYNCED) return true;
  check_greeting(d);
  return true;
}
"#;

/// A Go plugin that panics (the SDK recovers it) on ConfigMap `boom` and
/// deadlocks (a Go runtime crash: a trap) on `stuck`.
const GO_CRASHER: &str = r#"//go:build wasip1

package main

import kw "hello/sdk"

type crasher struct{}

func (crasher) Registration() kw.Registration {
	return kw.Registration{}.Subscribe(kw.Subscribe(kw.ConfigMap).WithDeltas(kw.Added))
}

func (crasher) Handle(d *kw.Delta) (kw.Handled, error) {
	switch d.Name {
	case "boom":
		explode(d.Name)
	case "stuck":
		waitForever()
	}
	return kw.Done, nil
}

//go:noinline
func explode(name string) {
	panic("exploded on " + name)
}

//go:noinline
func waitForever() {
	var never chan int
	<-never
}

func init() {
	kw.Export(func(kw.Context) (kw.Plugin, error) { return crasher{}, nil })
}

func main() {}
"#;

/// The 1-based line of `source` that contains `needle`.
fn line_of(source: &str, needle: &str) -> usize {
    source.lines().position(|l| l.contains(needle)).unwrap() + 1
}

/// Builds `source` (written over the hello plugin's `file`, and `fixture`
/// over its fixture, which build.sh runs) in a `kubewasm new` project, runs
/// it over ConfigMaps `names` with one attempt per delta, and returns each
/// dead letter's error by ConfigMap name.
async fn crash(
    lang: Lang,
    file: &str,
    source: &str,
    fixture: &str,
    names: &[&str],
) -> Vec<(String, String)> {
    let work = tempfile::tempdir().unwrap();
    let root = scaffold::create(lang, "hello", work.path(), None).unwrap();
    std::fs::write(root.join(file), source).unwrap();
    std::fs::write(root.join("tests/hello.yaml"), fixture).unwrap();
    build(lang, &root);
    let h = Harness::new();
    let mut cluster = "apiVersion: v1\nkind: Namespace\nmetadata: {name: demo}\n".to_owned();
    for name in names {
        cluster += &format!(
            "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: demo}}\n"
        );
    }
    write_cluster(h.cluster.path(), &[("cluster.yaml", &cluster)]);
    let wasm = root.join("dist/hello.wasm");
    precompile_into(&h, &wasm);
    install_file(
        h.plugins.path(),
        "hello",
        &wasm,
        Some("access:\n  - {kinds: [configmaps], verbs: [read]}\nlimits: {maxAttempts: 1}\n"),
    );
    let (app, _sink) = h.start_recording().await;
    idle(&app).await;
    let summary = app.summary();
    app.shutdown().await;
    let mut dead: Vec<(String, String)> = summary.plugins["hello"]
        .dead_letters
        .iter()
        .map(|d| (d.name.clone(), d.last_error.clone()))
        .collect();
    dead.sort();
    assert_eq!(
        dead.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        names,
        "{summary}"
    );
    dead
}

/// The C build keeps the name section: the trap's backtrace, as the host
/// logs it, names the plugin's functions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_c_trap_names_the_plugins_functions() {
    // Its fixture (run by build.sh) expects the trap, naming the function.
    let fixture = r#"sidecar: ../hello.yaml
cases:
  - name: the trap names the plugin's function
    steps:
      - delta: added
        object: {apiVersion: v1, kind: ConfigMap, metadata: {name: greeting, namespace: demo}}
        expect:
          - call: added configmaps demo/greeting
            result: {trapped: "!check_greeting"}
"#;
    let dead = crash(Lang::C, "hello.c", C_CRASHER, fixture, &["greeting"]).await;
    let error = &dead[0].1;
    assert!(error.starts_with("plugin trapped: "), "{error}");
    for frame in ["!abort", "!check_greeting", "!kw_plugin_handle"] {
        assert!(error.contains(frame), "{frame} missing: {error}");
    }
    assert!(!error.contains("<wasm function"), "{error}");
}

/// The Go build keeps the name section: a Go runtime crash's backtrace
/// names Go's functions, and the error names the plugin's function with
/// its file and line (from the Go runtime's traceback); a panic the SDK
/// recovers names them too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_go_crash_names_the_plugins_function_file_and_line() {
    // Its fixture (run by build.sh) expects both, with file and line.
    let fixture = format!(
        r#"sidecar: ../hello.yaml
cases:
  - name: a recovered panic fails permanently, naming where it was raised
    steps:
      - delta: added
        object: {{apiVersion: v1, kind: ConfigMap, metadata: {{name: boom, namespace: demo}}}}
        expect:
          - call: added configmaps demo/boom
            result: {{permanent: "exploded on boom (at main.explode, hello/main.go:{})"}}
  - name: a deadlock traps, naming the function
    steps:
      - delta: added
        object: {{apiVersion: v1, kind: ConfigMap, metadata: {{name: stuck, namespace: demo}}}}
        expect:
          - call: added configmaps demo/stuck
            result: {{trapped: "deadlock! (at main.waitForever, hello/main.go:{})"}}
"#,
        line_of(GO_CRASHER, "panic("),
        line_of(GO_CRASHER, "<-never")
    );
    let dead = crash(
        Lang::Go,
        "main.go",
        GO_CRASHER,
        &fixture,
        &["boom", "stuck"],
    )
    .await;
    let (boom, stuck) = (&dead[0].1, &dead[1].1);
    assert_eq!(
        boom,
        &format!(
            "plugin failed permanently: panic: exploded on boom (at main.explode, hello/main.go:{})",
            line_of(GO_CRASHER, "panic(")
        )
    );
    assert!(stuck.starts_with("plugin trapped: "), "{stuck}");
    for frame in ["!runtime.fatal", "!runtime.checkdead"] {
        assert!(stuck.contains(frame), "{frame} missing: {stuck}");
    }
    assert!(!stuck.contains("<wasm function"), "{stuck}");
    assert!(
        stuck.ends_with(&format!(
            "(guest output: fatal error: all goroutines are asleep - deadlock! (at main.waitForever, hello/main.go:{}))",
            line_of(GO_CRASHER, "<-never")
        )),
        "{stuck}"
    );
}

/// `kubewasm componentize` on what is not a core module: exit 1, the file
/// named with what to do, and no output written.
#[test]
fn componentize_refuses_what_is_not_a_core_module() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.wasm");
    for (file, bytes, says) in [
        (
            "notes.txt",
            &b"hello"[..],
            "notes.txt: not a WebAssembly module (no \\0asm header): give the .wasm file your compiler wrote",
        ),
        (
            "component.wasm",
            &b"\0asm\x0d\0\x01\0"[..],
            "component.wasm: already a component: componentize takes the core module a compiler writes",
        ),
    ] {
        let input = dir.path().join(file);
        std::fs::write(&input, bytes).unwrap();
        let run = Command::new(kubewasm_bin())
            .arg("componentize")
            .arg(&input)
            .arg("-o")
            .arg(&out)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains(says), "{stderr}");
        assert!(!out.exists());
    }
}
