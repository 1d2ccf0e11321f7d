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
        self.sh_with(script, what, &[])
    }

    /// [`Workdir::sh`] with more environment variables.
    pub fn sh_with(&self, script: &str, what: &str, env: &[(&str, &str)]) -> String {
        let mut cmd = self.command("bash");
        cmd.args(["-c", &format!("set -euxo pipefail\n{script}")]);
        for (key, value) in env {
            cmd.env(key, value);
        }
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

/// The ```` ```sh ```` blocks of `page` (under docs/book/src) after the
/// heading line `heading` and before the next heading of that level or
/// above, in order, as the book writes them.
pub fn sh_blocks(page: &str, heading: &str) -> Vec<String> {
    let text = std::fs::read_to_string(repo_root().join("docs/book/src").join(page)).unwrap();
    let level = heading.chars().take_while(|c| *c == '#').count();
    let mut lines = text.lines().skip_while(|l| l.trim_end() != heading);
    assert!(lines.next().is_some(), "{page} has no heading {heading:?}");
    let mut blocks = Vec::new();
    // The sh block being read; `other` inside another fence (yaml, text),
    // whose `# comment` lines are no headings.
    let mut current: Option<String> = None;
    let mut other = false;
    for line in lines {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if current.is_none()
            && !other
            && (1..=level).contains(&hashes)
            && line[hashes..].starts_with(' ')
        {
            break;
        }
        match (&mut current, line.trim_end()) {
            (None, "```sh") if !other => current = Some(String::new()),
            (None, fence) if fence.starts_with("```") => other = !other,
            (Some(_), "```") => blocks.extend(current.take()),
            (Some(block), text) => {
                block.push_str(text);
                block.push('\n');
            }
            (None, _) => {}
        }
    }
    assert!(
        current.is_none(),
        "{page}: a ```sh block under {heading:?} is not closed"
    );
    blocks
}

/// Every `## ` section of `page` with its ```` ```sh ```` blocks, in order.
pub fn sections(page: &str) -> Vec<(String, Vec<String>)> {
    let text = std::fs::read_to_string(repo_root().join("docs/book/src").join(page)).unwrap();
    let mut fenced = false;
    let mut headings = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with("## ") {
            headings.push(line.trim_end().to_owned());
        }
    }
    headings
        .into_iter()
        .map(|h| {
            let blocks = sh_blocks(page, &h);
            (h, blocks)
        })
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
