//! Who may be served a cached module (Kubernetes KEP-2535, "ensure secret
//! pulled images"): a digest in the cache is not a licence to run it.
//! Without this, a tenant who learns another's digest writes
//! `anything.invalid/x@sha256:<digest>` with no pull Secret and is served
//! the other tenant's private module from the cache.
//!
//! The cache serves a module only to a pull whose [`Grant`] (the registry
//! as reached, `scheme://host:port`; the repository; the credentials'
//! identity) is recorded for the module's manifest digest. A grant is
//! recorded only after that registry, with those credentials, served the
//! manifest *and* the module layer's bytes (downloaded and hashed). A
//! manifest alone proves little: it is a small document anyone who saw it
//! can serve from a registry of their own, naming a layer digest they do
//! not have. So a pull without a grant goes to its registry, and a layer
//! the cache holds is downloaded again unless the grant is there: the
//! bytes are the proof of access. Checking with an authenticated manifest
//! request instead would be that weaker proof, and would need the registry
//! up at every restart.
//!
//! Records live beside the cache (`<root>/oci/access/sha256/<hex>.json`,
//! under the cache's budget and pinned with the module), so a host that
//! restarts while its registry is down still serves the modules it pulled
//! itself. Modules cached before records existed have none: each is
//! checked with its registry once. The identity of Basic credentials is a
//! keyed BLAKE3 hash under a random key kept in `<root>/oci/identity.key`
//! (mode 0600): the record says whether credentials are the same, not what
//! they are, and the key keeps a weak password from being looked up in a
//! table. Anyone who can write the cache folder can forge a grant; that is
//! the host's own disk, which no tenant reaches.

use std::io::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::Credentials;

/// Grants kept per manifest digest, the most recent: enough for every
/// repository and credential that pulls one module in practice, and a
/// bound on what a tenant pulling one digest many ways can make us keep.
pub const MAX_GRANTS: usize = 64;
/// A record larger than this is not read (it cannot hold [`MAX_GRANTS`]
/// grants of references a registry accepts, so it was not written by us).
const MAX_RECORD_BYTES: u64 = 256 << 10;

/// One (registry, repository, credentials) a module was verified for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grant {
    /// `scheme://host:port` as the pull reached it.
    pub origin: String,
    pub repository: String,
    /// `anonymous`, or `basic:` and the keyed hash of the credentials.
    pub identity: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Record {
    grants: Vec<Grant>,
}

/// The key credentials are hashed under; never printed.
#[derive(Clone, Copy)]
pub(crate) struct IdentityKey([u8; blake3::KEY_LEN]);

impl std::fmt::Debug for IdentityKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("IdentityKey(..)")
    }
}

impl IdentityKey {
    /// The identity of `credentials`: the same for the same user and
    /// password, and nothing else about them.
    pub(crate) fn identity(&self, credentials: &Credentials) -> String {
        match credentials {
            Credentials::Anonymous => Self::anonymous(),
            Credentials::Basic { username, password } => {
                let mut hasher = blake3::Hasher::new_keyed(&self.0);
                hasher.update(b"kubewasm registry credentials v1\0");
                hasher.update(&(username.len() as u64).to_le_bytes());
                hasher.update(username.as_bytes());
                hasher.update(password.as_bytes());
                format!("basic:{}", hasher.finalize().to_hex())
            }
        }
    }

    /// The identity of anonymous pulls (no key needed).
    pub(crate) fn anonymous() -> String {
        "anonymous".to_owned()
    }

    /// Reads the key at `path`, or makes one there: written to a temp file
    /// and hard-linked into place, so two hosts sharing the folder agree on
    /// the first one linked.
    pub(crate) fn load_or_create(path: &Path) -> std::io::Result<Self> {
        match read_key(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            other => return other,
        }
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        let mut key = [0u8; blake3::KEY_LEN];
        getrandom::fill(&mut key).map_err(std::io::Error::other)?;
        let tmp = dir.join(format!(
            ".identity.key.{}.{:02x}{:02x}{:02x}{:02x}.tmp",
            std::process::id(),
            key[0],
            key[1],
            key[2],
            key[3]
        ));
        let written = (|| {
            let mut file = private_file(&tmp)?;
            file.write_all(&key)?;
            file.sync_all()?;
            std::fs::hard_link(&tmp, path)
        })();
        let _ = std::fs::remove_file(&tmp);
        match written {
            Ok(()) => Ok(Self(key)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => read_key(path),
            Err(e) => Err(e),
        }
    }
}

fn read_key(path: &Path) -> std::io::Result<IdentityKey> {
    let bytes = std::fs::read(path)?;
    let key = <[u8; blake3::KEY_LEN]>::try_from(bytes.as_slice()).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "{} holds {} bytes, not a {}-byte key; delete it (cached modules are then pulled again once)",
                path.display(),
                bytes.len(),
                blake3::KEY_LEN
            ),
        )
    })?;
    Ok(IdentityKey(key))
}

#[cfg(unix)]
fn private_file(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::File::options()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
}

#[cfg(not(unix))]
fn private_file(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::File::create(path)
}

/// The grants recorded at `path`; none when there is no record or it is
/// unreadable (the pull then asks the registry, and records anew).
pub(crate) fn read(path: &Path) -> Vec<Grant> {
    let read = || -> std::io::Result<Vec<Grant>> {
        let file = std::fs::File::open(path)?;
        if file.metadata()?.len() > MAX_RECORD_BYTES {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("over {MAX_RECORD_BYTES} bytes"),
            ));
        }
        let record: Record = serde_json::from_reader(std::io::BufReader::new(file))?;
        Ok(record.grants)
    };
    match read() {
        Ok(grants) => grants,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "unreadable OCI cache access record; its modules are checked with their registries again");
            Vec::new()
        }
    }
}

/// `grants` with `grant` as the most recent, at most [`MAX_GRANTS`], as
/// the record's bytes.
pub(crate) fn with(mut grants: Vec<Grant>, grant: Grant) -> Vec<u8> {
    grants.retain(|g| *g != grant);
    grants.push(grant);
    let excess = grants.len().saturating_sub(MAX_GRANTS);
    grants.drain(..excess);
    // Serializing a struct of strings cannot fail.
    serde_json::to_vec(&Record { grants }).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn identities_tell_credentials_apart_without_showing_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("oci/identity.key");
        let key = IdentityKey::load_or_create(&path).unwrap();
        let alice = key.identity(&Credentials::basic("alice", "hunter2"));
        assert!(alice.starts_with("basic:") && !alice.contains("hunter2"));
        assert_eq!(alice, key.identity(&Credentials::basic("alice", "hunter2")));
        assert_ne!(alice, key.identity(&Credentials::basic("alice", "hunter3")));
        // The boundary between user and password is part of the identity.
        assert_ne!(
            key.identity(&Credentials::basic("ab", "c")),
            key.identity(&Credentials::basic("a", "bc"))
        );
        assert_eq!(key.identity(&Credentials::Anonymous), "anonymous");
        // The key is kept: a restart computes the same identities.
        let again = IdentityKey::load_or_create(&path).unwrap();
        assert_eq!(
            again.identity(&Credentials::basic("alice", "hunter2")),
            alice
        );
        assert_eq!(format!("{again:?}"), "IdentityKey(..)");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        // Another cache's key gives other identities.
        let other = tempfile::tempdir().unwrap();
        let other = IdentityKey::load_or_create(&other.path().join("k")).unwrap();
        assert_ne!(
            other.identity(&Credentials::basic("alice", "hunter2")),
            alice
        );
    }

    #[test]
    fn records_keep_the_most_recent_grants_and_ignore_junk() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.json");
        assert!(read(&path).is_empty());
        let grant = |i: usize| Grant {
            origin: "https://reg.test:443".into(),
            repository: format!("team/m{i}"),
            identity: "anonymous".into(),
        };
        let mut grants = Vec::new();
        for i in 0..MAX_GRANTS + 5 {
            std::fs::write(&path, with(grants, grant(i))).unwrap();
            grants = read(&path);
        }
        assert_eq!(grants.len(), MAX_GRANTS);
        assert_eq!(grants[0], grant(5), "the oldest went first");
        // Granting again makes it the most recent, once.
        std::fs::write(&path, with(grants, grant(5))).unwrap();
        let grants = read(&path);
        assert_eq!(grants.len(), MAX_GRANTS);
        assert_eq!(grants.last(), Some(&grant(5)));

        std::fs::write(&path, b"{not json").unwrap();
        assert!(read(&path).is_empty());
    }
}
