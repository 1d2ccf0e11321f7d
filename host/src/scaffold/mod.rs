//! `kubewasm new`: creates a plugin project in Rust, JavaScript, Python, C
//! or Go. Each project holds a hello plugin (subscribes to ConfigMap
//! `added` deltas and annotates each ConfigMap with `kubewasm.io/hello:
//! NAME`) with the WIT bindings wired, the WIT itself (`wit/plugin.wit`,
//! embedded in this binary, or copied from a folder), the language's
//! kubewasm SDK where there is one in this repository, a `build.sh` that
//! writes `dist/NAME.wasm` and copies the sidecar `NAME.yaml` (the access
//! list the hello plugin needs) beside it, `fixtures/` (a cluster manifest and a
//! README saying how to run the plugin against it with
//! `kubewasm run --local fixtures --plugins dist --until-idle --dry-run`),
//! and a native unit test of the hello plugin through the SDK's fake host,
//! run by the language's own test command (`cargo test`, `node --test`,
//! `pytest`, `bash test.sh` for C, `go test ./...`).

use std::path::{Path, PathBuf};

pub use crate::toolchain::PLUGIN_WIT;

/// The WIT folder the repository's Rust SDK (`plugins/sdk`) generates its
/// bindings from; a project's copy reads `wit/` beside `sdk/`.
const RUST_SDK_WIT: &str = "\"../../wit/v0.2.0\"";

/// A language `kubewasm new` can create a plugin project in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Lang {
    Rust,
    Js,
    Python,
    C,
    Go,
}

impl Lang {
    /// Every language, in the order of the docs.
    pub const ALL: [Lang; 5] = [Lang::Rust, Lang::Js, Lang::Python, Lang::C, Lang::Go];

    /// The name used on the command line (`rust`, `js`, `python`, `c`, `go`).
    pub fn as_str(self) -> &'static str {
        match self {
            Lang::Rust => "rust",
            Lang::Js => "js",
            Lang::Python => "python",
            Lang::C => "c",
            Lang::Go => "go",
        }
    }
}

impl std::fmt::Display for Lang {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a project could not be created.
#[derive(Debug, thiserror::Error)]
pub enum ScaffoldError {
    #[error(
        "invalid plugin name {0:?}: use 1 to 63 lowercase letters, digits and dashes, starting with a letter and not ending with a dash"
    )]
    InvalidName(String),
    #[error("{0} already exists: choose another name or remove it")]
    Exists(PathBuf),
    #[error("no .wit file in {0}")]
    NoWit(PathBuf),
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// One file of a template: path in the project, contents (with `{{name}}`
/// and `{{crate}}` placeholders), whether it is executable.
type TemplateFile = (&'static str, &'static str, bool);

const COMMON: &[TemplateFile] = &[
    (
        "fixtures/cluster.yaml",
        include_str!("templates/common/cluster.yaml"),
        false,
    ),
    (
        "fixtures/README.md",
        include_str!("templates/common/fixtures-README.md"),
        false,
    ),
    (
        ".gitignore",
        include_str!("templates/common/gitignore"),
        false,
    ),
    (
        "{{name}}.yaml",
        include_str!("templates/common/sidecar.yaml"),
        false,
    ),
    (
        "tests/hello.yaml",
        include_str!("templates/common/hello.test.yaml"),
        false,
    ),
];

const RUST: &[TemplateFile] = &[
    (
        "Cargo.toml",
        include_str!("templates/rust/Cargo.toml"),
        false,
    ),
    (
        "src/lib.rs",
        include_str!("templates/rust/src/lib.rs"),
        false,
    ),
    ("build.sh", include_str!("templates/rust/build.sh"), true),
    ("README.md", include_str!("templates/rust/README.md"), false),
    (
        "sdk/Cargo.toml",
        include_str!("templates/rust/sdk-Cargo.toml"),
        false,
    ),
    (
        "sdk/README.md",
        include_str!("../../../plugins/sdk/README.md"),
        false,
    ),
    (
        "sdk/src/lib.rs",
        include_str!("../../../plugins/sdk/src/lib.rs"),
        false,
    ),
    (
        "sdk/src/actions.rs",
        include_str!("../../../plugins/sdk/src/actions.rs"),
        false,
    ),
    (
        "sdk/src/cache.rs",
        include_str!("../../../plugins/sdk/src/cache.rs"),
        false,
    ),
    (
        "sdk/src/clock.rs",
        include_str!("../../../plugins/sdk/src/clock.rs"),
        false,
    ),
    (
        "sdk/src/error.rs",
        include_str!("../../../plugins/sdk/src/error.rs"),
        false,
    ),
    (
        "sdk/src/kinds.rs",
        include_str!("../../../plugins/sdk/src/kinds.rs"),
        false,
    ),
    (
        "sdk/src/label_selector.rs",
        include_str!("../../../plugins/sdk/src/label_selector.rs"),
        false,
    ),
    (
        "sdk/src/log.rs",
        include_str!("../../../plugins/sdk/src/log.rs"),
        false,
    ),
    (
        "sdk/src/meta.rs",
        include_str!("../../../plugins/sdk/src/meta.rs"),
        false,
    ),
    (
        "sdk/src/object.rs",
        include_str!("../../../plugins/sdk/src/object.rs"),
        false,
    ),
    (
        "sdk/src/owners.rs",
        include_str!("../../../plugins/sdk/src/owners.rs"),
        false,
    ),
    (
        "sdk/src/patch.rs",
        include_str!("../../../plugins/sdk/src/patch.rs"),
        false,
    ),
    (
        "sdk/src/registration.rs",
        include_str!("../../../plugins/sdk/src/registration.rs"),
        false,
    ),
    (
        "sdk/src/fake/mod.rs",
        include_str!("../../../plugins/sdk/src/fake/mod.rs"),
        false,
    ),
    (
        "sdk/src/fake/selector.rs",
        include_str!("../../../plugins/sdk/src/fake/selector.rs"),
        false,
    ),
    (
        "sdk/src/fake/state.rs",
        include_str!("../../../plugins/sdk/src/fake/state.rs"),
        false,
    ),
    (
        "sdk/src/fake/wit.rs",
        include_str!("../../../plugins/sdk/src/fake/wit.rs"),
        false,
    ),
];

const JS: &[TemplateFile] = &[
    (
        "package.json",
        include_str!("templates/js/package.json"),
        false,
    ),
    (
        "package-lock.json",
        include_str!("templates/js/package-lock.json"),
        false,
    ),
    ("index.js", include_str!("templates/js/index.js"), false),
    (
        "index.test.js",
        include_str!("templates/js/index.test.js"),
        false,
    ),
    ("build.sh", include_str!("templates/js/build.sh"), true),
    ("README.md", include_str!("templates/js/README.md"), false),
    (
        "sdk/kubewasm.js",
        include_str!("../../../plugins/js/sdk/kubewasm.js"),
        false,
    ),
    (
        "sdk/kubewasm.d.ts",
        include_str!("../../../plugins/js/sdk/kubewasm.d.ts"),
        false,
    ),
    (
        "sdk/fake.js",
        include_str!("../../../plugins/js/sdk/fake.js"),
        false,
    ),
    (
        "sdk/fake-hooks.js",
        include_str!("../../../plugins/js/sdk/fake-hooks.js"),
        false,
    ),
    (
        "sdk/fake-imports.js",
        include_str!("../../../plugins/js/sdk/fake-imports.js"),
        false,
    ),
    (
        "sdk/fake-selector.js",
        include_str!("../../../plugins/js/sdk/fake-selector.js"),
        false,
    ),
];

const PYTHON: &[TemplateFile] = &[
    (
        "requirements.txt",
        include_str!("templates/python/requirements.txt"),
        false,
    ),
    ("app.py", include_str!("templates/python/app.py"), false),
    (
        "test_app.py",
        include_str!("templates/python/test_app.py"),
        false,
    ),
    (
        "conftest.py",
        include_str!("templates/python/conftest.py"),
        false,
    ),
    ("build.sh", include_str!("templates/python/build.sh"), true),
    (
        "README.md",
        include_str!("templates/python/README.md"),
        false,
    ),
    (
        "sdk/kubewasm/__init__.py",
        include_str!("../../../plugins/python/sdk/kubewasm/__init__.py"),
        false,
    ),
    (
        "sdk/kubewasm/patch.py",
        include_str!("../../../plugins/python/sdk/kubewasm/patch.py"),
        false,
    ),
    (
        "sdk/kubewasm_fake.py",
        include_str!("../../../plugins/python/sdk/kubewasm_fake.py"),
        false,
    ),
    (
        "sdk/kubewasm_fake_selector.py",
        include_str!("../../../plugins/python/sdk/kubewasm_fake_selector.py"),
        false,
    ),
];

const C: &[TemplateFile] = &[
    ("hello.c", include_str!("templates/c/hello.c"), false),
    (
        "hello_test.c",
        include_str!("templates/c/hello_test.c"),
        false,
    ),
    ("test.sh", include_str!("templates/c/test.sh"), true),
    ("build.sh", include_str!("templates/c/build.sh"), true),
    ("README.md", include_str!("templates/c/README.md"), false),
    (
        "sdk/kubewasm.h",
        include_str!("../../../plugins/c/sdk/kubewasm.h"),
        false,
    ),
    (
        "sdk/kubewasm.c",
        include_str!("../../../plugins/c/sdk/kubewasm.c"),
        false,
    ),
    (
        "sdk/fake/kubewasm_fake.h",
        include_str!("../../../plugins/c/sdk/fake/kubewasm_fake.h"),
        false,
    ),
    (
        "sdk/fake/kubewasm_fake.c",
        include_str!("../../../plugins/c/sdk/fake/kubewasm_fake.c"),
        false,
    ),
    (
        "sdk/fake/cJSON.h",
        include_str!("../../../plugins/c/vendor/cjson/cJSON.h"),
        false,
    ),
    (
        "sdk/fake/cJSON.c",
        include_str!("../../../plugins/c/vendor/cjson/cJSON.c"),
        false,
    ),
    (
        "sdk/fake/cJSON-LICENSE",
        include_str!("../../../plugins/c/vendor/cjson/LICENSE"),
        false,
    ),
    (
        "sdk/plugin.h",
        crate::toolchain::c_bindings::PLUGIN_H,
        false,
    ),
    (
        "sdk/plugin.c",
        crate::toolchain::c_bindings::PLUGIN_C,
        false,
    ),
];

const GO: &[TemplateFile] = &[
    ("go.mod", include_str!("templates/go/go.mod"), false),
    ("main.go", include_str!("templates/go/main.go"), false),
    (
        "main_test.go",
        include_str!("templates/go/main_test.go"),
        false,
    ),
    ("build.sh", include_str!("templates/go/build.sh"), true),
    ("README.md", include_str!("templates/go/README.md"), false),
    (
        "sdk/abi.go",
        include_str!("../../../plugins/go/sdk/abi.go"),
        false,
    ),
    (
        "sdk/actions.go",
        include_str!("../../../plugins/go/sdk/actions.go"),
        false,
    ),
    (
        "sdk/fake.go",
        include_str!("../../../plugins/go/sdk/fake.go"),
        false,
    ),
    (
        "sdk/fake_selector.go",
        include_str!("../../../plugins/go/sdk/fake_selector.go"),
        false,
    ),
    (
        "sdk/host.go",
        include_str!("../../../plugins/go/sdk/host.go"),
        false,
    ),
    (
        "sdk/kubewasm.go",
        include_str!("../../../plugins/go/sdk/kubewasm.go"),
        false,
    ),
    (
        "sdk/object.go",
        include_str!("../../../plugins/go/sdk/object.go"),
        false,
    ),
    (
        "sdk/owners.go",
        include_str!("../../../plugins/go/sdk/owners.go"),
        false,
    ),
    (
        "sdk/patch.go",
        include_str!("../../../plugins/go/sdk/patch.go"),
        false,
    ),
    (
        "sdk/types.go",
        include_str!("../../../plugins/go/sdk/types.go"),
        false,
    ),
];

fn templates(lang: Lang) -> Vec<&'static [TemplateFile]> {
    match lang {
        Lang::Rust => vec![COMMON, RUST],
        Lang::Js => vec![COMMON, JS],
        Lang::Python => vec![COMMON, PYTHON],
        Lang::C => vec![COMMON, C],
        Lang::Go => vec![COMMON, GO],
    }
}

/// Whether `name` is a valid plugin name: a DNS label starting with a
/// letter (it names the folder, the package and `dist/NAME.wasm`).
pub fn valid_name(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// Creates the project `dest/name` for `lang` and returns its path. The WIT
/// comes from `wit_dir` (every `.wit` file in it) when given, else the one
/// embedded in this binary. Refuses an existing `dest/name`.
pub fn create(
    lang: Lang,
    name: &str,
    dest: &Path,
    wit_dir: Option<&Path>,
) -> Result<PathBuf, ScaffoldError> {
    if !valid_name(name) {
        return Err(ScaffoldError::InvalidName(name.to_owned()));
    }
    let root = dest.join(name);
    if root.exists() {
        return Err(ScaffoldError::Exists(root));
    }
    let wit = match wit_dir {
        Some(dir) => read_wit(dir)?,
        None => vec![("plugin.wit".to_owned(), PLUGIN_WIT.to_owned())],
    };
    let crate_name = name.replace('-', "_");
    for (file, text) in &wit {
        write(&root.join("wit").join(file), text, false)?;
    }
    for set in templates(lang) {
        for (path, text, executable) in set {
            let mut text = text
                .replace("{{name}}", name)
                .replace("{{crate}}", &crate_name);
            if path.starts_with("sdk/src/") {
                // The Rust SDK's bindings read the WIT beside it.
                text = text.replace(RUST_SDK_WIT, "\"../wit\"");
            }
            let path = path.replace("{{name}}", name);
            write(&root.join(path), &text, *executable)?;
        }
    }
    // The fixtures' schema, from the types `kubewasm test` reads them with
    // (this binary's version of the format), for editors.
    write(
        &root.join("tests/fixture.schema.json"),
        &crate::testing::fixture::schema_text(),
        false,
    )?;
    Ok(root)
}

/// The `.wit` files directly in `dir`, sorted by name.
fn read_wit(dir: &Path) -> Result<Vec<(String, String)>, ScaffoldError> {
    let read_err = |source| ScaffoldError::Read {
        path: dir.to_owned(),
        source,
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(read_err)? {
        let path = entry.map_err(read_err)?.path();
        if path.extension().is_some_and(|e| e == "wit") && path.is_file() {
            let text = std::fs::read_to_string(&path).map_err(|source| ScaffoldError::Read {
                path: path.clone(),
                source,
            })?;
            if let Some(file) = path.file_name() {
                files.push((file.to_string_lossy().into_owned(), text));
            }
        }
    }
    if files.is_empty() {
        return Err(ScaffoldError::NoWit(dir.to_owned()));
    }
    files.sort();
    Ok(files)
}

fn write(path: &Path, text: &str, executable: bool) -> Result<(), ScaffoldError> {
    let write_err = |source| ScaffoldError::Write {
        path: path.to_owned(),
        source,
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(write_err)?;
    }
    std::fs::write(path, text).map_err(write_err)?;
    #[cfg(unix)]
    if executable {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
            .map_err(write_err)?;
    }
    #[cfg(not(unix))]
    let _ = executable;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn names() {
        for ok in ["hello", "a", "zone-annotator", "x1"] {
            assert!(valid_name(ok), "{ok}");
        }
        for bad in ["", "Hello", "1x", "-x", "x-", "a_b", "a.b", &"a".repeat(64)] {
            assert!(!valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn creates_every_language_and_refuses_to_overwrite() {
        let dir = tempfile::tempdir().unwrap();
        for lang in Lang::ALL {
            let name = format!("hello-{lang}");
            let root = create(lang, &name, dir.path(), None).unwrap();
            assert_eq!(root, dir.path().join(&name));
            let wit = std::fs::read_to_string(root.join("wit/plugin.wit")).unwrap();
            assert_eq!(wit, PLUGIN_WIT);
            assert!(root.join("build.sh").is_file(), "{lang}");
            assert!(root.join("fixtures/cluster.yaml").is_file(), "{lang}");
            // The fixture parses as `kubewasm test` reads it, and its schema
            // is this binary's.
            let fixture =
                crate::testing::fixture::Fixture::load(&root.join("tests/hello.yaml")).unwrap();
            assert_eq!(fixture.cases.len(), 3, "{lang}");
            let schema = std::fs::read_to_string(root.join("tests/fixture.schema.json")).unwrap();
            assert_eq!(schema, crate::testing::fixture::schema_text(), "{lang}");
            // The sidecar parses and grants what the hello plugin does.
            let sidecar = root.join(format!("{name}.yaml"));
            let m = crate::runtime::Manifest::load(&sidecar).unwrap();
            assert_eq!(m.rules.as_ref().map(Vec::len), Some(1), "{lang}");
            let build = std::fs::read_to_string(root.join("build.sh")).unwrap();
            assert!(build.contains(&format!("dist/{name}.yaml")), "{lang}");
            let readme = std::fs::read_to_string(root.join("fixtures/README.md")).unwrap();
            assert!(
                readme.contains(
                    "kubewasm run --local fixtures --plugins dist --until-idle --dry-run"
                )
            );
            assert!(readme.contains(&format!("dist/{name}.wasm")));
            assert!(matches!(
                create(lang, &name, dir.path(), None),
                Err(ScaffoldError::Exists(_))
            ));
        }
        assert!(matches!(
            create(Lang::Rust, "Bad", dir.path(), None),
            Err(ScaffoldError::InvalidName(_))
        ));
    }

    /// Every file of the repository's SDKs (but their own tests) is in the
    /// projects, so a new SDK file cannot be left out of `kubewasm new`; and
    /// each project ships its unit test and the fake host it runs on.
    #[test]
    fn ships_each_sdk_whole_with_its_fake_host_and_a_unit_test() {
        let plugins = Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins");
        fn files(dir: &Path, under: &Path, out: &mut Vec<String>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    if path.file_name().is_some_and(|n| n != "__pycache__") {
                        files(&path, under, out);
                    }
                } else {
                    out.push(
                        path.strip_prefix(under)
                            .unwrap()
                            .to_string_lossy()
                            .into_owned(),
                    );
                }
            }
        }
        let cases: [(Lang, &str, &str, &[&str]); 4] = [
            (
                Lang::Rust,
                "sdk/src",
                "sdk/src",
                &["src/lib.rs", "sdk/src/fake/mod.rs"],
            ),
            (Lang::Js, "js/sdk", "sdk", &["index.test.js", "sdk/fake.js"]),
            (
                Lang::Python,
                "python/sdk",
                "sdk",
                &["test_app.py", "conftest.py"],
            ),
            (Lang::Go, "go/sdk", "sdk", &["main_test.go", "sdk/fake.go"]),
        ];
        for (lang, repo, project, tests) in cases {
            let shipped: Vec<&str> = templates(lang)
                .iter()
                .flat_map(|set| set.iter().map(|(path, _, _)| *path))
                .collect();
            let mut sdk = Vec::new();
            files(&plugins.join(repo), &plugins.join(repo), &mut sdk);
            for file in sdk.iter().filter(|f| !f.ends_with("_test.go")) {
                let want = format!("{project}/{file}");
                assert!(
                    shipped.contains(&want.as_str()),
                    "{lang}: {want} is not shipped"
                );
            }
            for test in tests {
                assert!(shipped.contains(test), "{lang}: {test} is not shipped");
            }
        }
        let c: Vec<&str> = templates(Lang::C)
            .iter()
            .flat_map(|set| set.iter().map(|(path, _, _)| *path))
            .collect();
        for file in [
            "hello_test.c",
            "test.sh",
            "sdk/fake/kubewasm_fake.c",
            "sdk/fake/cJSON.c",
        ] {
            assert!(c.contains(&file), "c: {file} is not shipped");
        }
        // The Rust SDK's copy generates its bindings from the project's wit/.
        let dir = tempfile::tempdir().unwrap();
        let root = create(Lang::Rust, "r", dir.path(), None).unwrap();
        let lib = std::fs::read_to_string(root.join("sdk/src/lib.rs")).unwrap();
        assert!(lib.contains(r#"path: "../wit""#) && !lib.contains(RUST_SDK_WIT));
    }

    #[test]
    fn copies_wit_from_a_folder() {
        let dir = tempfile::tempdir().unwrap();
        let wit = dir.path().join("wit-src");
        std::fs::create_dir(&wit).unwrap();
        std::fs::write(wit.join("world.wit"), "package a:b;\n").unwrap();
        let root = create(Lang::Go, "custom", dir.path(), Some(&wit)).unwrap();
        assert_eq!(
            std::fs::read_to_string(root.join("wit/world.wit")).unwrap(),
            "package a:b;\n"
        );
        let empty = dir.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        assert!(matches!(
            create(Lang::Go, "other", dir.path(), Some(&empty)),
            Err(ScaffoldError::NoWit(_))
        ));
    }
}
