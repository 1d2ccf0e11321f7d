//! The book (docs/book) as a reader gets it: built by mdbook, every link of
//! its HTML resolves (kubewasm_tests::book has the rules).
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
