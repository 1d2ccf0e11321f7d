//! Runs of the config-replicator's fixtures: passing, a failing expectation
//! (the field named, a diff) and `--update`, `--junit`, a bad fixture
//! (exit 2), a simulated conflict, the sidecar's access list, the
//! JavaScript twin with its compile cached, and the fixture schema.

use super::*;

const REPLICATOR_TESTS: &str = "plugins/config-replicator/tests";

/// A copy of the config-replicator's fixtures in a temporary folder, the
/// example sidecar's path made absolute, so a test may change them.
fn replicator_fixtures() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let from = repo_root().join(REPLICATOR_TESTS);
    copy_tree(&from, dir.path());
    let fixture = dir.path().join("replicate.yaml");
    let sidecar = repo_root().join("examples/plugins/config-replicator.yaml");
    let text = std::fs::read_to_string(&fixture).unwrap().replace(
        "sidecar: ../../../examples/plugins/config-replicator.yaml",
        &format!("sidecar: {}", sidecar.display()),
    );
    std::fs::write(&fixture, text).unwrap();
    dir
}

fn copy_tree(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&target).unwrap();
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

#[test]
fn the_config_replicator_fixtures_pass() {
    let (out, took) = kubewasm_test(
        &shared_cache(),
        &[
            &replicator(),
            &format!("{REPLICATOR_TESTS}/replicate.yaml"),
            &format!("{REPLICATOR_TESTS}/access.yaml"),
        ],
    );
    let report = text(&out);
    assert_eq!(out.status.code(), Some(0), "{report}");
    let passed = stdout(&out)
        .lines()
        .filter(|l| l.starts_with("PASS "))
        .count();
    assert_eq!(passed, 9, "{report}");
    assert!(
        stdout(&out).contains("test result: ok. 9 passed; 0 failed; 0 errors"),
        "{report}"
    );
    eprintln!("config-replicator, 9 cases: {took:?}\n{report}");
}

/// A simulated 409 on the second apply: the call's result is the conflict
/// (the host hands it back), and the pending retry is attempt 2, told of
/// the conflict, with the fresh object; it applies both copies again.
#[test]
fn a_simulated_conflict_is_handed_back_and_retried() {
    let (out, _) = kubewasm_test(
        &shared_cache(),
        &[
            &replicator(),
            &format!("{REPLICATOR_TESTS}/replicate.yaml"),
            "--filter",
            "conflict",
        ],
    );
    let report = text(&out);
    assert_eq!(out.status.code(), Some(0), "{report}");
    assert!(stdout(&out).contains("1 passed"), "{report}");
    assert!(stdout(&out).contains("6 filtered out"), "{report}");
    let fixture =
        std::fs::read_to_string(repo_root().join(REPLICATOR_TESTS).join("replicate.yaml")).unwrap();
    assert!(fixture.contains("conflict: 'action 2 of 2 (apply (force) configmaps team-b/ca-bundle) failed after 1 attempt(s): conflict:"));
    assert!(
        fixture.contains("call: added configmaps platform/ca-bundle (attempt 2, after conflict)")
    );

    // The conflict is checked: expecting `ok` instead fails, naming it.
    let dir = replicator_fixtures();
    let path = dir.path().join("replicate.yaml");
    let lines: Vec<String> = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    let at = lines
        .iter()
        .position(|l| l.trim_start().starts_with("conflict: 'action 2 of 2"))
        .unwrap();
    assert_eq!(lines[at - 1].trim(), "result:");
    let indent = &lines[at - 1][..lines[at - 1].len() - "result:".len()];
    let mut changed: Vec<String> = lines[..at - 1].to_vec();
    changed.push(format!("{indent}result: ok"));
    changed.extend(lines[at + 1..].iter().cloned());
    let changed = changed.join("\n") + "\n";
    std::fs::write(&path, changed).unwrap();
    let (out, _) = kubewasm_test(
        &shared_cache(),
        &[
            &replicator(),
            path.to_str().unwrap(),
            "--filter",
            "conflict",
        ],
    );
    let report = text(&out);
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(
        stdout(&out).contains("step 1: expect[0].result: expected \"ok\", observed {\"conflict\":"),
        "{report}"
    );
}

/// An expectation that does not hold: exit 1, the differing field named,
/// a unified diff; `--update` writes the observation back, and the file is
/// then exactly what it was (comments and layout kept).
#[test]
fn a_failing_fixture_names_the_field_and_update_writes_it_back() {
    let dir = replicator_fixtures();
    let path = dir.path().join("replicate.yaml");
    let original = std::fs::read_to_string(&path).unwrap();
    let marker = "data:\n                    ca.crt: PEM-2";
    assert_eq!(original.matches(marker).count(), 2, "the fixture changed");
    let broken = original.replacen(marker, "data:\n                    ca.crt: PEM-3", 1);
    std::fs::write(&path, &broken).unwrap();

    let (out, _) = kubewasm_test(&shared_cache(), &[&replicator(), path.to_str().unwrap()]);
    let report = text(&out);
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(
        stdout(&out).contains(
            r#"step 1: expect[0].actions[0].apply.object.data["ca.crt"]: expected "PEM-3", observed "PEM-2""#
        ),
        "{report}"
    );
    assert!(
        stdout(&out).contains("--- expected\n    +++ observed"),
        "{report}"
    );
    assert!(
        stdout(&out).contains("-          ca.crt: PEM-3\n    +          ca.crt: PEM-2"),
        "{report}"
    );
    assert!(
        stdout(&out).contains("test result: FAILED. 6 passed; 1 failed"),
        "{report}"
    );

    let (out, _) = kubewasm_test(
        &shared_cache(),
        &[&replicator(), path.to_str().unwrap(), "--update"],
    );
    let report = text(&out);
    assert_eq!(out.status.code(), Some(0), "{report}");
    assert!(
        stdout(&out).contains("UPDATED") && stdout(&out).contains("1 updated"),
        "{report}"
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), original);
    let (out, _) = kubewasm_test(&shared_cache(), &[&replicator(), path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
}

#[test]
fn junit_reports_each_case_and_the_failure() {
    let dir = replicator_fixtures();
    let path = dir.path().join("replicate.yaml");
    let original = std::fs::read_to_string(&path).unwrap();
    let marker = "data:\n                    ca.crt: PEM-2";
    std::fs::write(
        &path,
        original.replacen(marker, "data:\n                    ca.crt: PEM-9", 1),
    )
    .unwrap();
    let junit = dir.path().join("junit.xml");
    let (out, _) = kubewasm_test(
        &shared_cache(),
        &[
            &replicator(),
            path.to_str().unwrap(),
            dir.path().join("access.yaml").to_str().unwrap(),
            "--junit",
            junit.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let xml = std::fs::read_to_string(&junit).unwrap();
    let report = quick_junit::Report::deserialize_from_str(&xml).unwrap();
    assert_eq!(
        (report.tests, report.failures, report.errors),
        (9, 1, 0),
        "{xml}"
    );
    assert_eq!(report.test_suites.len(), 2);
    let failed: Vec<_> = report
        .test_suites
        .iter()
        .flat_map(|s| &s.test_cases)
        .filter(|c| !matches!(c.status, quick_junit::TestCaseStatus::Success { .. }))
        .collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(
        failed[0].name.as_str(),
        "a changed source updates its copies"
    );
    assert_eq!(failed[0].classname.as_ref().unwrap().as_str(), "replicate");
    assert!(
        xml.contains("ca.crt&quot;]: expected &quot;PEM-9&quot;, observed &quot;PEM-2&quot;"),
        "{xml}"
    );
}

/// A fixture that cannot be run as written: exit 2, the message names the
/// file, the case and the field.
#[test]
fn a_bad_fixture_exits_2_naming_the_file_case_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.yaml");
    std::fs::write(
        &path,
        "cases:\n  - name: fine\n    steps: [{pending: true, expect: []}]\n  - name: typo in a result\n    steps:\n      - pending: true\n        expect:\n          - result: retyr\n",
    )
    .unwrap();
    let (out, _) = kubewasm_test(&shared_cache(), &[&replicator(), path.to_str().unwrap()]);
    let report = text(&out);
    assert_eq!(out.status.code(), Some(2), "{report}");
    let expected = format!(
        "ERROR {}: case 2 (\"typo in a result\"): cases[1].steps[0].expect[0].result: expected one of ok,",
        path.display()
    );
    assert!(stdout(&out).contains(&expected), "{report}");
    assert!(stdout(&out).contains("found retyr"), "{report}");

    // A reference to an object the cache does not hold: exit 2 too.
    std::fs::write(
        &path,
        format!(
            "sidecar: {}\ncases:\n  - name: missing object\n    steps:\n      - delta: added\n        object: configmaps nowhere/nothing\n        expect: []\n",
            repo_root().join("examples/plugins/config-replicator.yaml").display()
        ),
    )
    .unwrap();
    let (out, _) = kubewasm_test(&shared_cache(), &[&replicator(), path.to_str().unwrap()]);
    let report = text(&out);
    assert_eq!(out.status.code(), Some(2), "{report}");
    assert!(
        stdout(&out).contains(
            "cases[0].steps[0].object: configmaps nowhere/nothing is not in the cache at this step"
        ),
        "{report}"
    );

    // The arguments swapped: exit 2, saying what the plugin must be.
    let (out, _) = kubewasm_test(&shared_cache(), &[path.to_str().unwrap(), &replicator()]);
    let report = text(&out);
    assert_eq!(out.status.code(), Some(2), "{report}");
    assert!(
        report.contains("is not a WebAssembly component (give the plugin's .wasm first"),
        "{report}"
    );
}

/// The sidecar's access list holds as in the host: a write outside it is
/// refused when emitted (the handler's error is the call's result), a
/// registration it does not cover is refused at load; the fixture says so.
#[test]
fn the_sidecars_access_list_is_enforced() {
    let (out, _) = kubewasm_test(
        &shared_cache(),
        &[&replicator(), &format!("{REPLICATOR_TESTS}/access.yaml")],
    );
    let report = text(&out);
    assert_eq!(out.status.code(), Some(0), "{report}");
    let fixture =
        std::fs::read_to_string(repo_root().join(REPLICATOR_TESTS).join("access.yaml")).unwrap();
    assert!(fixture.contains("may not apply configmaps in namespace team-b: its sidecar grants apply on configmaps only in namespaces [team-a]"));

    // Without the case's sidecar (the plugin's permissive one), the same
    // step writes into team-b and the expectation fails.
    let dir = replicator_fixtures();
    let path = dir.path().join("access.yaml");
    let text_before = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        text_before.replace(
            "    sidecar: team-a-only.yaml\n",
            &format!(
                "    sidecar: {}\n",
                repo_root()
                    .join("examples/plugins/config-replicator.yaml")
                    .display()
            ),
        ),
    )
    .unwrap();
    let (out, _) = kubewasm_test(&shared_cache(), &[&replicator(), path.to_str().unwrap()]);
    let report = text(&out);
    assert_eq!(out.status.code(), Some(1), "{report}");
    // It now writes into team-b too, and its call succeeds.
    assert!(
        stdout(&out).contains("step 1: expect[0].actions: expected nothing, observed [{\"apply\""),
        "{report}"
    );
    assert!(
        stdout(&out).contains("-    permanent: 'action refused, not granted"),
        "{report}"
    );
    assert!(stdout(&out).contains("+  result: ok"), "{report}");
}

/// The JavaScript config-replicator passes the Rust one's fixture; its
/// compile (seconds) happens once: the second run loads it from the
/// compile cache.
#[test]
fn the_javascript_twin_passes_the_same_fixture_and_its_compile_is_cached() {
    let js = js_replicator();
    let cache = tempfile::tempdir().unwrap();
    let args = [
        js.to_str().unwrap(),
        "plugins/config-replicator/tests/replicate.yaml",
        "--name",
        "config_replicator",
    ];
    let (first, cold) = kubewasm_test(cache.path(), &args);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first));
    assert!(
        stdout(&first).contains(", compiled in "),
        "{}",
        text(&first)
    );
    let (second, warm) = kubewasm_test(cache.path(), &args);
    let report = text(&second);
    assert_eq!(second.status.code(), Some(0), "{report}");
    assert!(stdout(&second).contains("compile cached"), "{report}");
    assert!(stdout(&second).contains("7 passed"), "{report}");
    assert!(warm * 2 < cold, "cold {cold:?}, cached {warm:?}");
    eprintln!("JavaScript config-replicator, 7 cases: cold {cold:?}, cached {warm:?}\n{report}");
}

/// The JavaScript config-replicator, as plugins/build-languages.sh writes
/// it (built through the harness when it is not there yet).
fn js_replicator() -> PathBuf {
    let built = repo_root().join("plugins/target/languages/js-config-replicator.wasm");
    if built.is_file() {
        return built;
    }
    language_artifacts().join("js-config-replicator.wasm")
}

#[test]
fn the_schema_is_printed() {
    let out = Command::new(kubewasm_bin())
        .args(["test", "--schema"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let printed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let committed: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo_root().join("docs/fixture.schema.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(printed, committed);
    assert_eq!(printed["title"], "kubewasm test fixture");
}
