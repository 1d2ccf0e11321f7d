//! A plugin's sidecar file (`NAME.yaml`, `NAME.yml` or `NAME.json` next to
//! `NAME.wasm`): its configuration, limits, the operator's access list and
//! WASI grants. The sidecar carries no format version: unknown keys are
//! errors, and the one incompatible change so far (`grants.network: true`)
//! is refused with the way to migrate.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use super::access::{AccessRule, Grant, Rule};
use super::network::NetworkGrant;

#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{path} is not a valid plugin manifest: {message} (keys: config, limits {{memory, timeout, concurrency, maxAttempts, handles, actionsPerCall, actionsPerSecond, logBytesPerCall, actionBytesPerCall}}, access [{{kinds, verbs, namespaces | namespaceSelector}}], grants {{env, stdio, dirs, network {{allow}}}})"
    )]
    Parse { path: PathBuf, message: String },
}

/// Parsed sidecar. Unknown keys are errors, so typos do not pass silently.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Manifest {
    /// Passed to the plugin's `register` as JSON.
    #[serde(default)]
    pub config: Option<serde_json::Value>,
    #[serde(default)]
    pub limits: Limits,
    /// The operator's access list; `None` (no `access` key): the plugin may
    /// read what it subscribes to and write nothing.
    #[serde(default)]
    pub access: Option<Vec<AccessRule>>,
    #[serde(default)]
    pub grants: Grants,
    /// `access`, validated at parse time.
    #[serde(skip)]
    pub rules: Option<Vec<Rule>>,
    /// The tenant namespace of a NamespacedPlugin's manifest (never read
    /// from a file): admitted against the tenants' ceiling and that
    /// namespace's quota, not the host's.
    #[serde(skip)]
    pub tenant: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Limits {
    /// Linear memory cap per instance, all its memories together (`64Mi`,
    /// `1Gi`, bytes).
    #[serde(deserialize_with = "de_bytes")]
    pub memory: u64,
    /// Deadline for one call (`1s`, `250ms`).
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// Instances handling different objects at once.
    pub concurrency: usize,
    /// Attempts per delta before it is recorded as dead; unset, the host
    /// config's `dispatch.maxAttempts` applies.
    pub max_attempts: Option<u32>,
    /// Object handles the guest may hold at once (leaked handles grow host
    /// memory); a call that goes over fails and the instance is replaced.
    pub handles: u32,
    /// Actions one call may emit; a call that goes over fails.
    pub actions_per_call: u32,
    /// Actions a second the host executes for the plugin (a burst of one
    /// second's worth); more wait, and the plugin's deltas with them.
    pub actions_per_second: u32,
    /// Bytes of `log` records one call may write (`1Mi`); a call that goes
    /// over fails and the rest of its records are dropped.
    #[serde(deserialize_with = "de_bytes")]
    pub log_bytes_per_call: u64,
    /// Bytes of JSON (applied objects and patches, as the guest wrote
    /// them) one call may buffer (`8Mi`); the host holds them parsed until
    /// the call's actions run, so this bounds the host memory a call can
    /// claim. An action that goes over fails the call.
    #[serde(deserialize_with = "de_bytes")]
    pub action_bytes_per_call: u64,
}

/// Most instances one plugin may run at once (each is a thread).
pub const MAX_CONCURRENCY: usize = 256;

impl Limits {
    /// Out-of-range values are errors rather than clamped or left to panic.
    fn check(&self) -> Result<(), String> {
        if self.concurrency == 0 || self.concurrency > MAX_CONCURRENCY {
            return Err(format!(
                "limits.concurrency must be 1 to {MAX_CONCURRENCY}, found {}",
                self.concurrency
            ));
        }
        if self.max_attempts == Some(0) {
            return Err("limits.maxAttempts must be at least 1".into());
        }
        for (key, value) in [
            ("limits.handles", u64::from(self.handles)),
            ("limits.actionsPerCall", u64::from(self.actions_per_call)),
            (
                "limits.actionsPerSecond",
                u64::from(self.actions_per_second),
            ),
            ("limits.logBytesPerCall", self.log_bytes_per_call),
            ("limits.actionBytesPerCall", self.action_bytes_per_call),
        ] {
            if value == 0 {
                return Err(format!("{key} must be at least 1"));
            }
        }
        if self.memory < (1 << 20) {
            return Err(format!(
                "limits.memory must be at least 1Mi, found {} bytes",
                self.memory
            ));
        }
        if self.timeout < super::engine::EPOCH_TICK {
            return Err(format!(
                "limits.timeout must be at least {:?}, found {:?}",
                super::engine::EPOCH_TICK,
                self.timeout
            ));
        }
        Ok(())
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory: 64 << 20,
            timeout: Duration::from_secs(1),
            concurrency: 1,
            max_attempts: None,
            handles: 100_000,
            actions_per_call: 1_000,
            actions_per_second: 100,
            log_bytes_per_call: 1 << 20,
            action_bytes_per_call: 8 << 20,
        }
    }
}

/// What of the outside world the plugin may see. Nothing by default, and
/// never more than the host config's `grants` ceiling (see
/// [`super::grants`]), checked at load.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Grants {
    /// Host environment variables passed through, by name.
    #[serde(default)]
    pub env: Vec<String>,
    /// Inherit the host's stdout/stderr (debug printing).
    #[serde(default)]
    pub stdio: bool,
    /// Read-only directories.
    #[serde(default)]
    pub dirs: Vec<DirGrant>,
    /// Destinations the plugin may connect or send to (`host:port`); the
    /// names listed are the only ones it may look up.
    #[serde(default)]
    pub network: NetworkGrant,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DirGrant {
    pub host: PathBuf,
    pub guest: String,
}

pub(crate) fn de_bytes<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Num(u64),
        Text(String),
    }
    match Raw::deserialize(d)? {
        Raw::Num(n) => Ok(n),
        Raw::Text(s) => parse_bytes(&s).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "{s:?} is not a size; write e.g. 64Mi, 512Ki, 1Gi or a byte count"
            ))
        }),
    }
}

/// The JSON Schema of a size [`de_bytes`] reads: a byte count, or a
/// number with a unit.
pub fn size_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "anyOf": [
            {"type": "integer", "minimum": 0},
            {"type": "string", "pattern": "^[0-9]+(Ki|Mi|Gi|K|k|M|G)?$"}
        ],
        "description": "A size: bytes, or with a unit (`64Mi`, `1Gi`, `512Ki`, `500K`)"
    })
}

/// The JSON Schema of a duration as `humantime` reads it (`250ms`, `1s`,
/// `5m`, `10h`).
pub fn duration_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "pattern": "^([0-9]+ *[a-zµ]+ *)+$",
        "description": "A duration (`250ms`, `1s`, `5m`, `10h`)"
    })
}

/// Parses `64Mi`, `1Gi`, `500K`, `1048576`.
pub fn parse_bytes(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().ok()?;
    let mult: u64 = match unit {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "K" | "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        _ => return None,
    };
    n.checked_mul(mult)
}

impl Manifest {
    /// The sidecar of `wasm`, if one exists (a dangling symlink or a
    /// folder counts: reading it then fails with an error naming it).
    pub fn sidecar_path(wasm: &Path) -> Option<PathBuf> {
        ["yaml", "yml", "json"]
            .iter()
            .map(|ext| wasm.with_extension(ext))
            .find(|p| p.symlink_metadata().is_ok())
    }

    pub fn load(path: &Path) -> Result<Self, ManifestError> {
        let text = std::fs::read_to_string(path).map_err(|source| ManifestError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(path, &text)
    }

    pub fn parse(path: &Path, text: &str) -> Result<Self, ManifestError> {
        let parsed: Result<Self, String> = if path.extension().is_some_and(|e| e == "json") {
            serde_json::from_str(text).map_err(|e| e.to_string())
        } else if text.trim().is_empty() {
            Ok(Self::default())
        } else {
            serde_yaml_ng::from_str(text).map_err(|e| e.to_string())
        };
        let bad = |message| ManifestError::Parse {
            path: path.to_owned(),
            message,
        };
        let mut m = parsed.map_err(bad)?;
        m.limits.check().map_err(bad)?;
        m.rules = match &m.access {
            None => None,
            Some(list) => Some(
                list.iter()
                    .enumerate()
                    .map(|(i, r)| r.compile(i))
                    .collect::<Result<_, _>>()
                    .map_err(bad)?,
            ),
        };
        Ok(m)
    }

    /// What this sidecar grants plugin `plugin`.
    pub fn grant(&self, plugin: &str) -> Grant {
        Grant::new(plugin, self.rules.clone())
    }

    /// The config as the JSON text `register` receives.
    pub fn config_json(&self) -> String {
        self.config
            .as_ref()
            .map_or_else(|| "{}".to_owned(), serde_json::Value::to_string)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sidecar_with_defaults_and_units() {
        let m = Manifest::parse(
            Path::new("p.yaml"),
            "config:\n  threshold: 3\nlimits:\n  memory: 32Mi\n  timeout: 250ms\n  concurrency: 2\n  maxAttempts: 3\n",
        )
        .unwrap();
        assert_eq!(m.limits.memory, 32 << 20);
        assert_eq!(m.limits.timeout, Duration::from_millis(250));
        let caps = Manifest::parse(
            Path::new("p.yaml"),
            "limits: {handles: 10, actionsPerCall: 5, logBytesPerCall: 4Ki, actionBytesPerCall: 1Mi}",
        )
        .unwrap()
        .limits;
        assert_eq!(
            (
                caps.handles,
                caps.actions_per_call,
                caps.log_bytes_per_call,
                caps.action_bytes_per_call
            ),
            (10, 5, 4096, 1 << 20)
        );
        assert_eq!(m.config_json(), r#"{"threshold":3}"#);
        assert_eq!(
            Manifest::parse(Path::new("p.yaml"), "").unwrap(),
            Manifest::default()
        );
    }

    #[test]
    fn rejects_unknown_keys_with_a_clear_error() {
        let err = Manifest::parse(Path::new("/x/p.yaml"), "limit:\n  memory: 1Mi\n").unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("/x/p.yaml") && msg.contains("unknown field `limit`"),
            "{msg}"
        );
        let err = Manifest::parse(Path::new("p.yaml"), "limits:\n  memory: lots\n").unwrap_err();
        assert!(err.to_string().contains("not a size"), "{err}");
    }

    #[test]
    fn access_lists_and_network_grants_are_validated_naming_the_file() {
        let m = Manifest::parse(
            Path::new("p.yaml"),
            "access:\n  - kinds: [configmaps, deployments.apps]\n    verbs: [read, apply]\n    namespaces: [team-a]\ngrants:\n  network: {allow: ['db.example.com:5432']}\n",
        )
        .unwrap();
        assert_eq!(m.rules.as_ref().map(Vec::len), Some(1));
        assert_eq!(m.grants.network.allow.len(), 1);
        assert!(
            Manifest::parse(Path::new("p.yaml"), "")
                .unwrap()
                .rules
                .is_none()
        );
        for (text, want) in [
            (
                "access: [{kinds: [pods], verbs: []}]",
                "access[0]: verbs is empty",
            ),
            (
                "access: [{kinds: [pods], verbs: [write]}]",
                "unknown variant `write`",
            ),
            ("grants: {network: true}", "no longer accepted"),
        ] {
            let err = Manifest::parse(Path::new("/x/p.yaml"), text)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains(want) && err.contains("/x/p.yaml"),
                "{text}: {err}"
            );
        }
    }

    #[test]
    fn out_of_range_limits_are_errors_naming_the_key() {
        for (text, key) in [
            ("limits: {timeout: 0s}", "limits.timeout"),
            ("limits: {concurrency: 0}", "limits.concurrency"),
            ("limits: {concurrency: 100000}", "limits.concurrency"),
            ("limits: {maxAttempts: 0}", "limits.maxAttempts"),
            ("limits: {memory: 1Ki}", "limits.memory"),
            ("limits: {handles: 0}", "limits.handles"),
            ("limits: {actionsPerCall: 0}", "limits.actionsPerCall"),
            ("limits: {logBytesPerCall: 0}", "limits.logBytesPerCall"),
            (
                "limits: {actionBytesPerCall: 0}",
                "limits.actionBytesPerCall",
            ),
        ] {
            let err = Manifest::parse(Path::new("/x/p.yaml"), text)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains(key) && err.contains("/x/p.yaml"),
                "{text}: {err}"
            );
        }
        // Unset, the host's dispatch.maxAttempts applies.
        assert_eq!(Manifest::default().limits.max_attempts, None);
        let m = Manifest::parse(Path::new("p.yaml"), "limits: {maxAttempts: 2}").unwrap();
        assert_eq!(m.limits.max_attempts, Some(2));
    }
}
