//! The book (docs/book) as a reader gets it: built by mdbook, every link of
//! its HTML resolves and stays in the book (kubewasm_tests::book has the
//! rules), its console examples run; its user pages carry no run dates,
//! commit hashes or issue numbers (kubewasm_tests::book_timeless); and the
//! names it uses (metrics, flags, config keys, Plugin fields, status
//! reasons) exist in the code (kubewasm_tests::book_names).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use kubewasm_tests::repo_root;

/// Builds the book into a temporary folder and follows every `href` and
/// `src` of its pages: a page, file or `#id` that is not there, a link out
/// of the book that misses the repository's file, or a placeholder host
/// fails here, naming the page and the link. External links are not
/// fetched (the tests have no internet).
#[test]
fn rendered_links_resolve() {
    let root = repo_root();
    let out = tempfile::tempdir().unwrap();
    kubewasm_tests::book::build(&root, out.path());
    assert!(
        out.path().join("index.html").is_file(),
        "mdbook wrote no index.html into {}",
        out.path().display()
    );
    let broken = kubewasm_tests::book::broken_links(out.path(), &root);
    assert!(
        broken.is_empty(),
        "broken links in the rendered book ({}):\n{}",
        broken.len(),
        broken.join("\n")
    );
}

/// The book's ```` ```console ```` examples run through the debug kubewasm
/// binary with trycmd: each `$ kubewasm ...` line's output must match the
/// lines under it (`[..]` any text on a line, `...` any lines; `? N` the exit
/// status). The split: an example that needs only the binary and the
/// repository's files (the built example plugins included) is a `console`
/// block, run here; one that needs a cluster, the network, root or other
/// tools (kubectl, `kubewasm run` against a cluster, podman, helm,
/// kustomize, the scripts) stays `sh` or `text`, and is not run; the build
/// outputs `scripts/deploy-plugins.sh` copies into `deploy/examples/plugin-folder/plugins`
/// are laid out as it would. Every `console` block of the book must run:
/// one trycmd would skip (`ignore`, a tilde or indented fence) fails here,
/// and so does a command other than `kubewasm` (trycmd knows no other).
///
/// Each page runs from a fresh folder that mirrors the repository's root
/// (a symlink to each of its entries), so paths read as from the root and
/// what a command writes (`kubewasm new`, a compile cache) stays there.
/// Its entries are the repository's own, so an example writes only new
/// files (`run --local` over examples/cluster takes `--dry-run`).
/// `TRYCMD=overwrite` writes the outputs back into the pages.
#[test]
fn console_examples_run() {
    let root = repo_root();
    let pages = kubewasm_tests::book::console_pages(&root);
    let (runnable, skipped): (Vec<_>, Vec<_>) = pages
        .iter()
        .flat_map(|(page, blocks)| blocks.iter().map(move |b| (page, b)))
        .partition(|(_, block)| block.runs());
    assert!(
        skipped.is_empty(),
        "console blocks trycmd would not run (use ```console at the line's start, no attributes):\n{}",
        skipped
            .iter()
            .map(|(page, block)| format!("{}:{}: {}", page.display(), block.line, block.fence))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        runnable.len() >= 5,
        "only {} console blocks found in the book: were they turned back into sh?",
        runnable.len()
    );
    // The examples read the built example plugins, under plugins/target and
    // where `scripts/deploy-plugins.sh` copies them.
    let built = kubewasm_tests::plugin_artifacts();
    let deployed: Vec<_> = [
        ("config_replicator", "config-replicator"),
        ("crashloop_watcher", "crashloop-watcher"),
        ("namespace_defaults", "namespace-defaults"),
    ]
    .into_iter()
    .map(|(artifact, name)| {
        (
            std::path::PathBuf::from(format!("deploy/examples/plugin-folder/plugins/{name}.wasm")),
            built.join(format!("{artifact}.wasm")),
        )
    })
    .collect();
    let work = tempfile::tempdir().unwrap();
    let cases = kubewasm_tests::book::lay_out_console_cases(&root, &pages, &deployed, work.path());
    let cache = work.path().join("cache");
    let tests = trycmd::TestCases::new();
    tests
        .register_bin(
            "kubewasm",
            kubewasm_tests::e2e::kubewasm_bin().to_path_buf(),
        )
        .env("KUBEWASM_CACHE_DIR", cache.display().to_string())
        .env("XDG_CACHE_HOME", cache.display().to_string())
        .env("KUBEWASM_LOG_FORMAT", "text")
        // Logs go to stderr, which trycmd mixes into the output; `kubewasm
        // test` logs only errors by default, the other commands also their
        // progress (compiling a plugin): the examples show what they print.
        .env("RUST_LOG", "error")
        .env("NO_COLOR", "1")
        .timeout(std::time::Duration::from_secs(300));
    for (case, _) in &cases {
        tests.case(case);
    }
    tests.run();
    if std::env::var_os("TRYCMD").is_some_and(|v| v == "overwrite") {
        for (case, page) in &cases {
            std::fs::copy(case, page).unwrap();
        }
    }
}

/// Fails listing `items`, one a line, under `what`, when there are any.
fn assert_none<T: std::fmt::Display>(what: &str, items: &[T]) {
    assert!(
        items.is_empty(),
        "{what} ({}):\n{}",
        items.len(),
        items
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// The user pages (all but docs/book/src/contributing/) carry no date of
/// a run, no commit hash and no issue number of this project: they read
/// the same any day (kubewasm_tests::book_timeless has the rules). Dated
/// figures and history go to the contributor pages.
#[test]
fn user_pages_carry_no_run_dates_commit_hashes_or_issue_numbers() {
    let root = repo_root();
    let pages = kubewasm_tests::book_timeless::user_pages(&root);
    assert!(pages.len() > 20, "the user pages were not found");
    let repository = kubewasm_tests::docs::Repository::of(&root);
    let found = kubewasm_tests::book_timeless::findings(&root, repository.slug());
    assert_none(
        "user pages carry run dates, commit hashes or issue numbers \
         (move dated figures and history to docs/book/src/contributing/)",
        &found,
    );
}

/// Every metric a page names is one the registry serves
/// (reference/metrics.md).
#[test]
fn metrics_the_book_names_exist() {
    let unknown = kubewasm_tests::book_names::unknown_metrics(&repo_root());
    assert_none("metrics the code does not have", &unknown);
}

/// Every long flag of a `kubewasm` command a page shows is one of that
/// subcommand or a global one (reference/cli.md, from clap).
#[test]
fn flags_the_book_names_exist() {
    let unknown = kubewasm_tests::book_names::unknown_flags(&repo_root());
    assert_none(
        "kubewasm commands and flags the CLI does not have",
        &unknown,
    );
}

/// Every key of a host config the book shows is in the host config's
/// schema (reference/schemas/host-config.schema.json).
#[test]
fn config_keys_the_book_names_exist() {
    let unknown = kubewasm_tests::book_names::unknown_config_keys(&repo_root());
    assert_none("host config keys the code does not have", &unknown);
}

/// Every Plugin field the book names (`spec.x`, `status.x`, the keys of a
/// Plugin manifest, the Status table) is in the CRDs' schemas
/// (reference/schemas/plugin.schema.json).
#[test]
fn plugin_fields_the_book_names_exist() {
    let unknown = kubewasm_tests::book_names::unknown_plugin_fields(&repo_root());
    assert_none("Plugin fields the CRDs do not have", &unknown);
}

/// Every status reason of the book's reason tables (and of a
/// `Serving=True/Reason`) is one the code gives (reference/status-reasons.md,
/// generated from host/src/objects/reasons.rs).
#[test]
fn status_reasons_the_book_names_exist() {
    let unknown = kubewasm_tests::book_names::unknown_reasons(&repo_root());
    assert_none("status reasons the code does not give", &unknown);
}

/// plugin-objects.md names every status reason, and troubleshooting.md
/// every reason a Plugin is not Ready for, so their lists agree with the
/// code and with each other.
#[test]
fn the_reason_lists_name_every_reason() {
    let missing = kubewasm_tests::book_names::missing_reasons(&repo_root());
    assert_none(
        "reasons the code gives that these pages do not name",
        &missing,
    );
}
