//! Node mode's containers: images imported into or built for the node's
//! containerd, containers killed, and the programs built beside the
//! control plane.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

use super::{ControlPlane, binary};

impl ControlPlane {
    /// The Node's name in node mode.
    pub fn node_name(&self) -> Option<&str> {
        self.node.as_ref().map(|n| n.name.as_str())
    }

    /// Imports an image archive (docker-archive or OCI) into the node's
    /// containerd, where Pods with `imagePullPolicy: Never` find it.
    pub fn load_image(&self, archive: &Path) -> anyhow::Result<()> {
        let node = self
            .node
            .as_ref()
            .context("load_image needs node mode (ControlPlane::builder().node(true))")?;
        let out = Command::new("ctr")
            .arg("--address")
            .arg(&node.containerd_socket)
            .args([
                "--namespace",
                "k8s.io",
                "images",
                "import",
                "--all-platforms",
            ])
            .arg(archive)
            .output()
            .context("running ctr (Debian package containerd)")?;
        if !out.status.success() {
            bail!(
                "ctr images import {} failed ({}): {}",
                archive.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    }

    /// Kills a container abruptly (SIGKILL through containerd, as an OOM
    /// kill or a crash would end it); `id` is the Pod status's
    /// `containerID` with or without its `containerd://` prefix. The
    /// kubelet sees it exit and restarts it per the Pod's restart policy.
    pub fn kill_container(&self, id: &str) -> anyhow::Result<()> {
        let node = self
            .node
            .as_ref()
            .context("kill_container needs node mode (ControlPlane::builder().node(true))")?;
        let id = id.strip_prefix("containerd://").unwrap_or(id);
        let out = Command::new("ctr")
            .arg("--address")
            .arg(&node.containerd_socket)
            .args([
                "--namespace",
                "k8s.io",
                "tasks",
                "kill",
                "--signal",
                "SIGKILL",
                id,
            ])
            .output()
            .context("running ctr (Debian package containerd)")?;
        if !out.status.success() {
            bail!(
                "ctr tasks kill {id} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    }

    /// Builds a one-layer image from local files (`(source, path in image)`,
    /// mode 0755) with `kubewasm-controlplane image` and imports it. For
    /// static programs only: there is no base image.
    pub fn build_and_load_image(
        &self,
        name: &str,
        files: &[(&Path, &str)],
        symlinks: &[(&str, &str)],
    ) -> anyhow::Result<()> {
        let archive = self.dir().join(format!(
            "image-{}.tar",
            name.replace(|c: char| !c.is_ascii_alphanumeric(), "_")
        ));
        let mut cmd = Command::new(binary()?);
        cmd.arg("image")
            .arg("--out")
            .arg(&archive)
            .arg("--name")
            .arg(name);
        for (src, dst) in files {
            cmd.arg(format!("--add={}:{dst}", src.display()));
        }
        for (dst, target) in symlinks {
            cmd.arg(format!("--symlink={dst}={target}"));
        }
        let out = cmd
            .output()
            .context("running kubewasm-controlplane image")?;
        if !out.status.success() {
            bail!(
                "building image {name} failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        self.load_image(&archive)
    }

    /// A program built next to the control plane binary by `build.sh`:
    /// `pause` (the sandbox) or `apiprobe` (an in-cluster API client that
    /// verifies the projected CA and prints one line per request).
    pub fn tool(name: &str) -> anyhow::Result<PathBuf> {
        let bin = binary()?;
        let path = bin
            .parent()
            .context("the control plane binary has no folder")?
            .join(name);
        anyhow::ensure!(
            path.is_file(),
            "{} is missing: tests/controlplane/build.sh builds it",
            path.display()
        );
        Ok(path)
    }
}
