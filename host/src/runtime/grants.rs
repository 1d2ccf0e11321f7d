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

use std::path::{Path, PathBuf};

use serde::Deserialize;

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

/// A directory grant with its host path canonicalized: what is preopened.
pub type ResolvedDir = DirGrant;

impl GrantCeiling {
    /// Adds host paths never to grant.
    pub fn protect(&mut self, paths: impl IntoIterator<Item = PathBuf>) {
        self.protected.extend(paths);
    }

    /// Checks `grants` against the ceiling; the directory grants come back
    /// with canonical host paths (what is preopened, so a symlink swapped
    /// in later changes nothing). The error names the grant, the value
    /// asked, the ceiling and the host config key that raises it.
    pub fn check(&self, grants: &Grants) -> Result<Vec<ResolvedDir>, String> {
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

    fn check_dir(&self, dir: &DirGrant) -> Result<ResolvedDir, String> {
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
        Ok(DirGrant {
            host,
            guest: dir.guest.clone(),
        })
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
        assert_eq!(c.check(&Grants::default()), Ok(vec![]));
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
