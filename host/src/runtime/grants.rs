//! The host config's `grants`: the ceiling on what a sidecar's WASI grants
//! may open. A sidecar may ship with its plugin (a plugin image), so the
//! operator of the host, not the sidecar, decides which host folders may
//! be preopened, which environment variables passed, where network grants
//! may point and whether the host's stdout may be inherited. Nothing by
//! default. Some paths are never granted, whatever the ceiling lists: the
//! service-account token folder (the host's credentials to the API
//! server, usable without its leader fencing), `/proc` (the host's
//! memory and environment) and the host's own files (config, kubeconfig,
//! compile cache, artifact key, plugin and cluster folders). Paths are
//! compared canonicalized, so symlinks and `..` do not get around either
//! list.
//!
//! A granted folder is checked and opened once, at admission, and every
//! instance of that plugin version gets the opened folder ([`HeldDir`]),
//! never its path again: an instance created hours later, after the
//! folder was swapped for a symlink (to the token's folder, say), still
//! sees the folder that was checked.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};

use super::manifest::{DirGrant, Grants};
use super::network::NetworkCeiling;

/// Paths no sidecar is granted, on every host.
pub const NEVER: [&str; 3] = [
    "/var/run/secrets/kubernetes.io",
    "/run/secrets/kubernetes.io",
    "/proc",
];

/// The ceiling on sidecars' `grants` (host config `grants`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct GrantCeiling {
    /// Host folders a sidecar may preopen (read-only), each with what is
    /// below it.
    pub dirs: Vec<PathBuf>,
    /// Host environment variables a sidecar may pass, by name.
    pub env: Vec<String>,
    /// Destinations a sidecar's network grant may name: `host:port` as in
    /// a grant, `*.domain:port` for the names under a domain, CIDR
    /// networks.
    #[schemars(with = "Vec<String>")]
    pub network: NetworkCeiling,
    /// Whether a sidecar may inherit the host's stdout and stderr (its
    /// output then lands in the host's log stream unmarked).
    pub stdio: bool,
    /// The host's own files and folders, never granted (filled in from the
    /// host's settings, not the config file).
    #[serde(skip)]
    pub protected: Vec<PathBuf>,
}

/// A granted directory, opened at admission and held by the plugin
/// version: its instances are given this open directory, so nothing done
/// to the path after the check (a rename, a symlink swapped in) changes
/// what they see.
#[derive(Debug, Clone)]
pub struct HeldDir {
    /// The canonical host path that was checked (for messages and the
    /// manifest; never opened again).
    pub host: PathBuf,
    /// Where the guest sees it.
    pub guest: String,
    fd: Arc<OwnedFd>,
}

/// Why a granted directory could not be opened and held, or handed to an
/// instance.
#[derive(Debug, thiserror::Error)]
pub enum DirError {
    #[error("cannot open {path} (without following a symlink in its place): {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a directory (or is a symlink, which is not followed)")]
    NotDirectory { path: PathBuf },
    #[error(
        "{path} changed while it was checked: the opened folder is {opened} (a folder on its way was replaced, perhaps by a symlink); not granted: load the plugin again once the folder is in place"
    )]
    Changed { path: PathBuf, opened: PathBuf },
    #[error(
        "cannot read back where the opened {path} is through /proc/self/fd: {source} (the host needs /proc mounted to hold granted folders)"
    )]
    Proc {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "cannot hand the granted folder {host} to the instance as {guest}: {source} (is /proc mounted?)"
    )]
    Preopen {
        host: PathBuf,
        guest: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error(
        "directory grants are supported on Linux only (a granted folder is held open and handed to instances through /proc/self/fd): remove grants.dirs from the sidecar"
    )]
    Unsupported,
}

impl HeldDir {
    /// Opens `host` (a canonical path, already checked against the
    /// ceiling) without following a symlink in its place, and checks on
    /// the opened handle that it is a directory and is still `host`: a
    /// folder on the way swapped between the check and the open is
    /// refused, not granted.
    #[cfg(target_os = "linux")]
    fn open(host: &Path, guest: &str) -> Result<Self, DirError> {
        use rustix::fs::{FileType, Mode, OFlags};
        use rustix::io::Errno;
        let fd = rustix::fs::open(
            host,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            // A symlink in its place (O_DIRECTORY with O_NOFOLLOW).
            Errno::NOTDIR | Errno::LOOP => DirError::NotDirectory {
                path: host.to_owned(),
            },
            e => DirError::Open {
                path: host.to_owned(),
                source: e.into(),
            },
        })?;
        // With O_PATH, O_NOFOLLOW opens a symlink itself rather than
        // failing: the type is checked on the handle.
        let stat = rustix::fs::fstat(&fd).map_err(|e| DirError::Open {
            path: host.to_owned(),
            source: e.into(),
        })?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::Directory {
            return Err(DirError::NotDirectory {
                path: host.to_owned(),
            });
        }
        let held = Self {
            host: host.to_owned(),
            guest: guest.to_owned(),
            fd: Arc::new(fd),
        };
        let opened = std::fs::read_link(held.reopen_path()).map_err(|source| DirError::Proc {
            path: host.to_owned(),
            source,
        })?;
        if opened != host {
            return Err(DirError::Changed {
                path: host.to_owned(),
                opened,
            });
        }
        Ok(held)
    }

    #[cfg(not(target_os = "linux"))]
    fn open(_host: &Path, _guest: &str) -> Result<Self, DirError> {
        Err(DirError::Unsupported)
    }

    /// `/proc/self/fd/N` of the held directory: a link the kernel resolves
    /// to this very open directory, whatever happened to its path since.
    fn reopen_path(&self) -> PathBuf {
        use std::os::fd::AsRawFd;
        PathBuf::from(format!("/proc/self/fd/{}", self.fd.as_raw_fd()))
    }

    /// Preopens the held directory, read-only, as the guest's path in `b`.
    /// wasmtime-wasi 48 preopens by path only (`WasiCtxBuilder` has no way
    /// to add an opened directory), so it is given the held directory's
    /// `/proc/self/fd/N`, which no change to the filesystem redirects.
    pub fn preopen(&self, b: &mut WasiCtxBuilder) -> Result<(), DirError> {
        b.preopened_dir(self.reopen_path(), &self.guest, FsPerms::ReadOnly)
            .map(|_| ())
            .map_err(|e| DirError::Preopen {
                host: self.host.clone(),
                guest: self.guest.clone(),
                source: e.into(),
            })
    }

    /// The grant as checked: the canonical host path and the guest path.
    pub fn grant(&self) -> DirGrant {
        DirGrant {
            host: self.host.clone(),
            guest: self.guest.clone(),
        }
    }
}

impl GrantCeiling {
    /// Adds host paths never to grant.
    pub fn protect(&mut self, paths: impl IntoIterator<Item = PathBuf>) {
        self.protected.extend(paths);
    }

    /// Checks `grants` against the ceiling; each granted directory comes
    /// back opened ([`HeldDir`]), checked on the opened handle: its
    /// instances are given that handle, not the path, so a symlink swapped
    /// in later changes nothing. The error names the grant, the value
    /// asked, the ceiling and the host config key that raises it.
    pub fn check(&self, grants: &Grants) -> Result<Vec<HeldDir>, String> {
        if grants.stdio && !self.stdio {
            return Err("the sidecar's grants.stdio (true) exceeds the host's ceiling grants.stdio (false, the default; host config): drop it from the sidecar (the plugin's output is still logged), or set grants.stdio: true in the host config".into());
        }
        for var in &grants.env {
            if !self.env.contains(var) {
                return Err(format!(
                    "the sidecar's grants.env asks for {var:?}, which the host's ceiling grants.env does not list ({}; host config): remove it from the sidecar, or add it to the host config's grants.env",
                    list(&self.env)
                ));
            }
        }
        self.network.check(&grants.network)?;
        grants.dirs.iter().map(|d| self.check_dir(d)).collect()
    }

    fn check_dir(&self, dir: &DirGrant) -> Result<HeldDir, String> {
        let asked = dir.host.display();
        let never = self.never();
        // Inside or above a protected path: never. As written first (a
        // token folder that is not mounted here is still refused), then
        // resolved.
        let exposes = |host: &Path| {
            never
                .iter()
                .find(|n| host.starts_with(n) || n.starts_with(host))
                .map(|n| {
                    format!(
                        "the sidecar's grants.dirs entry {asked} ({}) would expose {}, which is never granted (the service-account token, /proc or the host's own files): remove it from the sidecar",
                        host.display(),
                        n.display()
                    )
                })
        };
        if let Some(e) = exposes(&absolute(&dir.host)) {
            return Err(e);
        }
        let host = dir.host.canonicalize().map_err(|e| {
            format!("the sidecar's grants.dirs entry {asked}: cannot resolve it: {e}")
        })?;
        if let Some(e) = exposes(&host) {
            return Err(e);
        }
        let allowed = self
            .dirs
            .iter()
            .filter_map(|d| d.canonicalize().ok())
            .any(|d| host.starts_with(d));
        if !allowed {
            let ceiling: Vec<String> = self.dirs.iter().map(|d| d.display().to_string()).collect();
            return Err(format!(
                "the sidecar's grants.dirs entry {asked} ({}) is outside the host's ceiling grants.dirs ({}; host config): remove it from the sidecar, or add it (or a folder above it) to the host config's grants.dirs",
                host.display(),
                list(&ceiling)
            ));
        }
        HeldDir::open(&host, &dir.guest)
            .map_err(|e| format!("the sidecar's grants.dirs entry {asked}: {e}"))
    }

    /// Every never-granted path, as given and canonicalized (a path that
    /// does not exist here is still refused as written).
    fn never(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for p in NEVER
            .iter()
            .map(PathBuf::from)
            .chain(self.protected.iter().cloned())
        {
            if let Ok(c) = p.canonicalize()
                && c != p
            {
                out.push(c);
            }
            out.push(p);
        }
        out
    }
}

fn list(items: &[String]) -> String {
    if items.is_empty() {
        "none: the default".to_owned()
    } else {
        items.join(", ")
    }
}

/// `path`, absolute, for the protected list (relative paths are the
/// current folder's).
pub fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grants(yaml: &str) -> Grants {
        serde_yaml_ng::from_str(yaml).unwrap()
    }

    fn ceiling(yaml: &str) -> GrantCeiling {
        serde_yaml_ng::from_str(yaml).unwrap()
    }

    #[test]
    fn nothing_is_granted_by_default() {
        let c = GrantCeiling::default();
        assert!(c.check(&Grants::default()).unwrap().is_empty());
        for (sidecar, key) in [
            ("{stdio: true}", "grants.stdio"),
            ("{env: [HOME]}", "grants.env"),
            ("{network: {allow: ['127.0.0.1:80']}}", "grants.network"),
            ("{dirs: [{host: /tmp, guest: /t}]}", "grants.dirs"),
        ] {
            let e = c.check(&grants(sidecar)).unwrap_err();
            assert!(
                e.contains(&format!("the sidecar's {key}"))
                    && e.contains(&format!("ceiling {key}"))
                    && e.contains("host config"),
                "{sidecar}: {e}"
            );
        }
    }

    #[test]
    fn env_stdio_and_network_within_the_ceiling_pass() {
        let c =
            ceiling("{env: [HTTP_PROXY, NO_PROXY], stdio: true, network: ['*.example.com:443']}");
        assert!(
            c.check(&grants(
                "{env: [NO_PROXY], stdio: true, network: {allow: ['api.example.com:443']}}"
            ))
            .is_ok()
        );
        let e = c
            .check(&grants("{env: [AWS_SECRET_ACCESS_KEY]}"))
            .unwrap_err();
        assert!(
            e.contains("\"AWS_SECRET_ACCESS_KEY\"") && e.contains("HTTP_PROXY, NO_PROXY"),
            "{e}"
        );
        let unknown: Result<GrantCeiling, _> = serde_yaml_ng::from_str("{dir: [/x]}");
        assert!(unknown.is_err(), "unknown keys are errors");
    }

    #[test]
    fn dirs_must_be_under_a_ceiling_dir_compared_canonically() {
        let root = tempfile::tempdir().unwrap();
        let root = root.path().canonicalize().unwrap();
        let shared = root.join("shared");
        let other = root.join("other");
        for d in [shared.join("certs"), other.clone()] {
            std::fs::create_dir_all(d).unwrap();
        }
        // A symlink inside the allowed folder pointing out of it.
        std::os::unix::fs::symlink(&other, shared.join("escape")).unwrap();
        let c = GrantCeiling {
            dirs: vec![shared.clone()],
            ..GrantCeiling::default()
        };
        let dir = |host: &Path| Grants {
            dirs: vec![DirGrant {
                host: host.to_owned(),
                guest: "/g".into(),
            }],
            ..Grants::default()
        };
        assert_eq!(
            c.check(&dir(&shared.join("certs"))).unwrap()[0].host,
            shared.join("certs")
        );
        // `..` is resolved before comparing, and the preopen gets the
        // canonical path.
        let dotted = shared.join("certs/../certs");
        assert_eq!(
            c.check(&dir(&dotted)).unwrap()[0].host,
            shared.join("certs")
        );
        for outside in [
            other.clone(),
            shared.join("escape"),
            shared.join("certs/../.."),
        ] {
            let e = c.check(&dir(&outside)).unwrap_err();
            assert!(
                e.contains("outside the host's ceiling grants.dirs")
                    && e.contains(&shared.display().to_string()),
                "{}: {e}",
                outside.display()
            );
        }
        let e = c.check(&dir(&shared.join("missing"))).unwrap_err();
        assert!(e.contains("cannot resolve"), "{e}");
    }

    /// What an instance reads at `file` under its one preopen, `/data`,
    /// set up by `preopen`: through the WASI context an instance gets (the
    /// host side of `wasi:filesystem`, as a guest's calls reach it).
    fn read_as_instance(preopen: impl FnOnce(&mut WasiCtxBuilder), file: &str) -> String {
        use wasmtime_wasi::filesystem::WasiFilesystemCtxView;
        use wasmtime_wasi::p2::bindings::sync::filesystem::preopens::Host as _;
        use wasmtime_wasi::p2::bindings::sync::filesystem::types::{
            DescriptorFlags, HostDescriptor as _, OpenFlags, PathFlags,
        };
        let mut b = WasiCtxBuilder::new();
        preopen(&mut b);
        let mut ctx = b.build();
        let mut table = wasmtime::component::ResourceTable::new();
        let mut view = WasiFilesystemCtxView {
            ctx: ctx.filesystem(),
            table: &mut table,
        };
        let mut dirs = view.get_directories().unwrap();
        assert_eq!(dirs.len(), 1);
        let (dir, guest) = dirs.remove(0);
        assert_eq!(guest, "/data");
        let f = view
            .open_at(
                dir,
                PathFlags::empty(),
                file.to_owned(),
                OpenFlags::empty(),
                DescriptorFlags::READ,
            )
            .unwrap();
        let (bytes, _) = view.read(f, 64, 0).unwrap();
        String::from_utf8(bytes).unwrap()
    }

    #[test]
    fn a_granted_folder_swapped_for_a_symlink_after_admission_is_still_the_original() {
        let root = tempfile::tempdir().unwrap();
        let root = root.path().canonicalize().unwrap();
        let shared = root.join("shared");
        let data = shared.join("data");
        // Stands for the token's folder: what an attacker would point at.
        let secrets = root.join("secrets");
        for (d, content) in [(&data, "original"), (&secrets, "token")] {
            std::fs::create_dir_all(d).unwrap();
            std::fs::write(d.join("marker"), content).unwrap();
        }
        let c = GrantCeiling {
            dirs: vec![shared.clone()],
            ..GrantCeiling::default()
        };
        let grants = Grants {
            dirs: vec![DirGrant {
                host: data.clone(),
                guest: "/data".into(),
            }],
            ..Grants::default()
        };
        let held = c.check(&grants).unwrap();
        assert_eq!(held[0].grant().host, data);
        // After admission, before the instance: the folder is moved away
        // and a symlink to the secrets put in its place.
        std::fs::rename(&data, shared.join("moved")).unwrap();
        std::os::unix::fs::symlink(&secrets, &data).unwrap();
        // Preopened by path, as before, the instance would read the secret.
        let by_path = read_as_instance(
            |b| {
                b.preopened_dir(&data, "/data", FsPerms::ReadOnly).unwrap();
            },
            "marker",
        );
        assert_eq!(by_path, "token");
        // Given the held folder, it reads the folder that was checked, for
        // every instance.
        for _ in 0..2 {
            let seen = read_as_instance(|b| held[0].preopen(b).unwrap(), "marker");
            assert_eq!(seen, "original");
        }
        // And the grant checked now refuses the symlink's target.
        let e = c.check(&grants).unwrap_err();
        assert!(e.contains("outside the host's ceiling"), "{e}");
    }

    #[test]
    fn a_folder_changed_between_the_check_and_the_open_is_refused_on_the_handle() {
        let root = tempfile::tempdir().unwrap();
        let root = root.path().canonicalize().unwrap();
        let real = root.join("real");
        std::fs::create_dir_all(&real).unwrap();
        std::fs::write(root.join("file"), "x").unwrap();
        std::os::unix::fs::symlink(&real, root.join("link")).unwrap();
        // The open itself: a symlink in the checked path's place (the
        // swap between canonicalizing and opening) is not followed.
        let e = HeldDir::open(&root.join("link"), "/g").unwrap_err();
        assert!(
            matches!(&e, DirError::NotDirectory { path } if path.ends_with("link")),
            "{e}"
        );
        let e = HeldDir::open(&root.join("file"), "/g").unwrap_err();
        assert!(matches!(e, DirError::NotDirectory { .. }), "{e}");
        // A folder on the way swapped for a symlink: the handle is not
        // where the checked path says, and the grant is refused.
        let e = HeldDir::open(&root.join("link/."), "/g").unwrap_err();
        assert!(
            matches!(&e, DirError::Changed { opened, .. } if opened == &real),
            "{e}"
        );
        assert!(e.to_string().contains("load the plugin again"), "{e}");
        assert_eq!(HeldDir::open(&real, "/g").unwrap().host, real);
    }

    #[test]
    fn the_token_proc_and_the_hosts_own_files_are_never_granted() {
        let root = tempfile::tempdir().unwrap();
        let root = root.path().canonicalize().unwrap();
        let cache = root.join("cache");
        std::fs::create_dir_all(cache.join("sub")).unwrap();
        // Everything is within the ceiling: the refusal is the never list.
        let mut c = GrantCeiling {
            dirs: vec!["/".into()],
            ..GrantCeiling::default()
        };
        c.protect([cache.clone()]);
        let dir = |host: &str| Grants {
            dirs: vec![DirGrant {
                host: host.into(),
                guest: "/g".into(),
            }],
            ..Grants::default()
        };
        for refused in [
            "/proc",
            "/proc/self",
            "/",
            cache.to_str().unwrap(),
            cache.join("sub").to_str().unwrap(),
            // Above the cache: it would expose it.
            root.to_str().unwrap(),
        ] {
            let e = c.check(&dir(refused)).unwrap_err();
            assert!(e.contains("never granted"), "{refused}: {e}");
        }
        // The token folder, mounted here or not, in either spelling.
        for token in [
            "/var/run/secrets/kubernetes.io/serviceaccount",
            "/run/secrets/kubernetes.io/serviceaccount/token",
            "/var/run/secrets",
        ] {
            let e = c.check(&dir(token)).unwrap_err();
            assert!(e.contains("never granted"), "{token}: {e}");
        }
        // Elsewhere under the ceiling: granted.
        let elsewhere = root.join("data");
        std::fs::create_dir_all(&elsewhere).unwrap();
        assert!(c.check(&dir(elsewhere.to_str().unwrap())).is_ok());
    }
}
