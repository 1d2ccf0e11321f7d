//! A user's folder for the book's walkthroughs (the install quick start,
//! the tutorial), run on the real node as the pages write them: a release
//! that `scripts/release.sh` writes into `dist/`, kubectl, Helm and
//! kubewasm first on PATH, and the shell blocks of a page's section.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;

use crate::controlplane::ControlPlane;
use crate::e2e::kubewasm_bin;
use crate::incluster::run;
use crate::markdown;
use crate::registry::Registry;
use crate::repo_root;
use crate::tools::{helm, kubectl};

/// A temporary folder the book's commands run in, with a `bin/` of
/// kubectl, helm and kubewasm first on PATH and the cluster's kubeconfig.
pub struct Workdir {
    dir: tempfile::TempDir,
    kubeconfig: PathBuf,
}

impl Workdir {
    pub fn new(cp: &ControlPlane) -> Self {
        let work = Self {
            dir: tempfile::tempdir().unwrap(),
            kubeconfig: cp.admin_kubeconfig().to_owned(),
        };
        let bin = work.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        for (name, path) in [
            ("kubectl", kubectl()),
            ("helm", helm()),
            ("kubewasm", kubewasm_bin().to_path_buf()),
        ] {
            std::os::unix::fs::symlink(path, bin.join(name)).unwrap();
        }
        work
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `program` in this folder, with its kubeconfig and PATH.
    pub fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(program);
        cmd.current_dir(self.path())
            .env("KUBECONFIG", &self.kubeconfig)
            .env(
                "PATH",
                format!(
                    "{}:{}",
                    self.path().join("bin").display(),
                    std::env::var("PATH").unwrap_or_default()
                ),
            );
        cmd
    }

    /// Runs `script` with bash (`set -euxo pipefail`) here; its output.
    pub fn sh(&self, script: &str, what: &str) -> String {
        let mut cmd = self.command("bash");
        cmd.args(["-c", &format!("set -euxo pipefail\n{script}")]);
        run(&mut cmd, what)
    }

    pub fn kubectl(&self, args: &[&str]) -> std::process::Output {
        self.command("kubectl").args(args).output().unwrap()
    }
}

/// `scripts/release.sh VERSION` into `dist` with the debug binary the
/// other tests run (RELEASE_BINARY) and no key (RELEASE_UNSIGNED): the
/// release's layout, chart and image, without a second build of the
/// dependency tree for the musl target. Its listing.
pub fn release(dist: &Path, version: &str) -> String {
    run(
        Command::new("bash")
            .arg(repo_root().join("scripts/release.sh"))
            .arg(version)
            .env("DIST", dist)
            .env("RELEASE_BINARY", kubewasm_bin())
            .env("RELEASE_UNSIGNED", "1"),
        "scripts/release.sh",
    )
}

/// A heading of a page: its line, its level and its line's text.
type Heading<'a> = (usize, usize, &'a str);

/// The headings of a page's prose (not `#` lines inside code blocks).
fn headings<'a>(page: &markdown::Page<'a>) -> Vec<Heading<'a>> {
    page.prose
        .iter()
        .filter_map(|&(line, text)| {
            let level = text.chars().take_while(|c| *c == '#').count();
            ((1..=6).contains(&level) && text[level..].starts_with(' '))
                .then(|| (line, level, text.trim_end()))
        })
        .collect()
}

/// The `sh` blocks of `page` under heading `at` (an index of `headings`),
/// up to the next heading of its level or above, as the book writes them.
fn blocks_under(page: &markdown::Page<'_>, headings: &[Heading<'_>], at: usize) -> Vec<String> {
    let (start, level, _) = headings[at];
    let end = headings[at + 1..]
        .iter()
        .find(|(_, l, _)| *l <= level)
        .map_or(usize::MAX, |(line, _, _)| *line);
    page.blocks
        .iter()
        .filter(|b| b.lang == "sh")
        .filter(|b| {
            b.lines
                .first()
                .is_some_and(|(l, _)| (start..end).contains(l))
        })
        .map(|b| b.lines.iter().map(|(_, l)| format!("{l}\n")).collect())
        .collect()
}

/// A page of the book (under docs/book/src).
fn page_text(page: &str) -> String {
    std::fs::read_to_string(repo_root().join("docs/book/src").join(page)).unwrap()
}

/// The ```` ```sh ```` blocks of `page` (under docs/book/src) after the
/// heading line `heading` and before the next heading of that level or
/// above, in order, as the book writes them.
pub fn sh_blocks(page: &str, heading: &str) -> Vec<String> {
    let text = page_text(page);
    let read = markdown::read(&text);
    let all = headings(&read);
    let at = all
        .iter()
        .position(|(_, _, h)| *h == heading)
        .unwrap_or_else(|| panic!("{page} has no heading {heading:?}"));
    blocks_under(&read, &all, at)
}

/// Every `## ` section of `page` with its ```` ```sh ```` blocks, in order.
pub fn sections(page: &str) -> Vec<(String, Vec<String>)> {
    let text = page_text(page);
    let read = markdown::read(&text);
    let all = headings(&read);
    (0..all.len())
        .filter(|&i| all[i].1 == 2)
        .map(|i| (all[i].2.to_owned(), blocks_under(&read, &all, i)))
        .collect()
}

/// The values this node needs, as a `values.yaml` beside the release: the
/// host network, the API server on loopback, the image as imported (never
/// pulled), and the test registry's CA for the host's pulls.
pub fn node_values(cp: &ControlPlane, registry: &Registry) -> serde_json::Value {
    json!({
        "hostNetwork": true,
        "logLevel": "info,kubewasm::objects=debug",
        "apiServer": {"host": "127.0.0.1", "port": cp.port().to_string()},
        "image": {"pullPolicy": "Never"},
        "config": {"pluginObjects": {"registryCA": "/etc/kubewasm/registry-ca.crt"}},
        "configFiles": {"registry-ca.crt": String::from_utf8(registry.ca_pem()).unwrap()},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pages the node tests run, read as they read them: each step's
    /// commands under its heading, none lost to a `#` line inside a block.
    #[test]
    fn the_walkthroughs_blocks_are_found_under_their_headings() {
        let steps: Vec<(String, usize)> = sections("tutorial.md")
            .into_iter()
            .map(|(h, blocks)| (h, blocks.len()))
            .collect();
        let counts: Vec<usize> = steps.iter().map(|(_, n)| *n).collect();
        assert_eq!(counts, [1, 2, 2, 1, 1, 1, 1, 2, 1, 0], "{steps:?}");
        assert_eq!(steps[0].0, "## What you need");
        let quick = sh_blocks("install.md", "## Quick start");
        assert_eq!(quick.len(), 2, "{quick:?}");
        assert!(quick[0].contains("helm install kubewasm"), "{quick:?}");
        // The fixture heredoc's `# yaml-language-server` line is in a block.
        assert!(sections("tutorial.md")[3].1[0].contains("# yaml-language-server"));
    }
}
