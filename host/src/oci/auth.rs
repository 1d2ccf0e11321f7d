//! Registry credentials: anonymous, or a user and password, read from the
//! `.dockerconfigjson` of a `kubernetes.io/dockerconfigjson` Secret (the
//! same JSON as `~/.docker/config.json`). A pure function over bytes, so
//! the controller hands it a Secret's data and the CLI a file.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde::Deserialize;

/// How to authenticate to a registry.
#[derive(Clone, Default, PartialEq, Eq)]
pub enum Credentials {
    #[default]
    Anonymous,
    Basic {
        username: String,
        password: String,
    },
}

#[cfg(test)]
impl Credentials {
    /// Basic credentials, for tests.
    pub(crate) fn basic(username: &str, password: &str) -> Self {
        Self::Basic {
            username: username.into(),
            password: password.into(),
        }
    }
}

/// Never prints the password.
impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credentials::Anonymous => f.write_str("Anonymous"),
            Credentials::Basic { username, .. } => f
                .debug_struct("Basic")
                .field("username", username)
                .finish_non_exhaustive(),
        }
    }
}

impl Credentials {
    pub(crate) fn to_registry_auth(&self) -> oci_client::secrets::RegistryAuth {
        match self {
            Credentials::Anonymous => oci_client::secrets::RegistryAuth::Anonymous,
            Credentials::Basic { username, password } => {
                oci_client::secrets::RegistryAuth::Basic(username.clone(), password.clone())
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DockerConfigError {
    #[error("the docker config is not JSON with an \"auths\" map: {0}")]
    Json(#[source] serde_json::Error),
    #[error(
        "the docker config's entry for {registry} has an \"auth\" that is not base64 of user:password"
    )]
    BadAuth { registry: String },
    #[error(
        "the docker config's entry for {registry} has neither \"auth\" nor \"username\" and \"password\""
    )]
    Incomplete { registry: String },
}

#[derive(Deserialize)]
struct DockerConfig {
    auths: BTreeMap<String, Entry>,
}

#[derive(Deserialize)]
struct Entry {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
}

/// The credentials `config` (a `.dockerconfigjson`) holds for `registry`
/// (`host[:port]`, as in a reference): anonymous when it has no entry for
/// that host. Keys may carry a scheme and a path (`https://host/v1/`);
/// Docker Hub's names (`docker.io`, `index.docker.io`) are one host.
pub fn credentials_from_docker_config(
    config: &[u8],
    registry: &str,
) -> Result<Credentials, DockerConfigError> {
    let config: DockerConfig = serde_json::from_slice(config).map_err(DockerConfigError::Json)?;
    let wanted = host_of(registry);
    let Some((key, entry)) = config.auths.iter().find(|(k, _)| host_of(k) == wanted) else {
        return Ok(Credentials::Anonymous);
    };
    if let Some(auth) = entry.auth.as_deref().filter(|a| !a.is_empty()) {
        let bad = || DockerConfigError::BadAuth {
            registry: key.clone(),
        };
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(auth.trim())
            .map_err(|_| bad())?;
        let decoded = String::from_utf8(decoded).map_err(|_| bad())?;
        let (username, password) = decoded.split_once(':').ok_or_else(bad)?;
        return Ok(Credentials::Basic {
            username: username.to_owned(),
            password: password.to_owned(),
        });
    }
    match (&entry.username, &entry.password) {
        (Some(username), Some(password)) => Ok(Credentials::Basic {
            username: username.clone(),
            password: password.clone(),
        }),
        _ => Err(DockerConfigError::Incomplete {
            registry: key.clone(),
        }),
    }
}

/// `https://Host:5000/v1/` -> `host:5000`; Docker Hub's aliases -> `docker.io`.
fn host_of(key: &str) -> String {
    let rest = key.split_once("://").map_or(key, |(_, r)| r);
    let host = rest.split('/').next().unwrap_or(rest).to_ascii_lowercase();
    match host.as_str() {
        "index.docker.io" | "registry-1.docker.io" => "docker.io".to_owned(),
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_auth_field_and_username_password_are_read_for_the_matching_host() {
        // "alice:s3cr:et" in base64: a password may hold colons.
        let config = br#"{"auths":{
            "https://reg.example:5000/v1/":{"auth":"YWxpY2U6czNjcjpldA=="},
            "other.example":{"username":"bob","password":"pw"}}}"#;
        assert_eq!(
            credentials_from_docker_config(config, "reg.example:5000").unwrap(),
            Credentials::basic("alice", "s3cr:et")
        );
        assert_eq!(
            credentials_from_docker_config(config, "other.example").unwrap(),
            Credentials::basic("bob", "pw")
        );
        // Another port is another registry.
        assert_eq!(
            credentials_from_docker_config(config, "reg.example").unwrap(),
            Credentials::Anonymous
        );
    }

    #[test]
    fn docker_hub_aliases_match_each_other() {
        let config =
            br#"{"auths":{"https://index.docker.io/v1/":{"username":"u","password":"p"}}}"#;
        assert_eq!(
            credentials_from_docker_config(config, "docker.io").unwrap(),
            Credentials::basic("u", "p")
        );
        assert_eq!(
            credentials_from_docker_config(config, "index.docker.io").unwrap(),
            Credentials::basic("u", "p")
        );
    }

    #[test]
    fn malformed_configs_are_named() {
        assert!(matches!(
            credentials_from_docker_config(b"{}", "r"),
            Err(DockerConfigError::Json(_))
        ));
        let bad = br#"{"auths":{"r":{"auth":"not base64!"}}}"#;
        let err = credentials_from_docker_config(bad, "r").unwrap_err();
        assert!(matches!(err, DockerConfigError::BadAuth { .. }), "{err}");
        // base64 of "nocolon"
        let bad = br#"{"auths":{"r":{"auth":"bm9jb2xvbg=="}}}"#;
        assert!(matches!(
            credentials_from_docker_config(bad, "r"),
            Err(DockerConfigError::BadAuth { .. })
        ));
        let half = br#"{"auths":{"r":{"username":"u"}}}"#;
        assert!(matches!(
            credentials_from_docker_config(half, "r"),
            Err(DockerConfigError::Incomplete { .. })
        ));
    }

    #[test]
    fn the_password_is_not_printed() {
        let s = format!("{:?}", Credentials::basic("alice", "hunter2"));
        assert!(s.contains("alice") && !s.contains("hunter2"), "{s}");
    }
}
