//! The API server's audit log of writes ([`ControlPlaneBuilder::audit`]),
//! read back as [`AuditWrite`]s.
//!
//! [`ControlPlaneBuilder::audit`]: super::ControlPlaneBuilder::audit

use anyhow::Context;

use super::ControlPlane;

/// [`ControlPlaneBuilder::audit`]'s files in the state folder.
///
/// [`ControlPlaneBuilder::audit`]: super::ControlPlaneBuilder::audit
pub(super) const AUDIT_POLICY_FILE: &str = "audit-policy.yaml";
pub(super) const AUDIT_LOG: &str = "audit.log";
/// Writes only, once each (when the response is complete).
pub(super) const AUDIT_POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted, Panic]
rules:
  - level: Metadata
    verbs: [create, update, patch, delete, deletecollection]
  - level: None
"#;

/// One write request from the API server's audit log.
#[derive(Debug, Clone)]
pub struct AuditWrite {
    /// When the server received it.
    pub at: k8s_openapi::jiff::Timestamp,
    pub user: String,
    /// The Pod whose bound ServiceAccount token made it, if any.
    pub pod: Option<String>,
    pub verb: String,
    /// `resource` or `resource/subresource`, with `group/` before it
    /// outside the core group.
    pub resource: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub code: Option<u16>,
}

impl ControlPlane {
    /// Every write in the audit log so far, in the order the server
    /// completed them (needs [`ControlPlaneBuilder::audit`]).
    ///
    /// [`ControlPlaneBuilder::audit`]: super::ControlPlaneBuilder::audit
    pub fn audit_writes(&self) -> anyhow::Result<Vec<AuditWrite>> {
        let path = self.dir().join(AUDIT_LOG);
        let text = std::fs::read_to_string(&path).with_context(|| {
            format!(
                "reading {} (start the control plane with .audit(true))",
                path.display()
            )
        })?;
        let mut out = Vec::new();
        // The last line may be half-written while the server runs.
        for line in text.lines() {
            let Ok(e) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            let str_of = |v: &serde_json::Value| v.as_str().map(str::to_owned);
            let r = &e["objectRef"];
            let mut resource = str_of(&r["resource"]).unwrap_or_default();
            if let Some(sub) = r["subresource"].as_str() {
                resource = format!("{resource}/{sub}");
            }
            if let Some(g) = r["apiGroup"].as_str().filter(|g| !g.is_empty()) {
                resource = format!("{g}/{resource}");
            }
            let at = e["requestReceivedTimestamp"]
                .as_str()
                .and_then(|t| t.parse().ok())
                .with_context(|| format!("audit event without a timestamp: {line}"))?;
            out.push(AuditWrite {
                at,
                user: str_of(&e["user"]["username"]).unwrap_or_default(),
                pod: e["user"]["extra"]["authentication.kubernetes.io/pod-name"][0]
                    .as_str()
                    .map(str::to_owned),
                verb: str_of(&e["verb"]).unwrap_or_default(),
                resource,
                namespace: str_of(&r["namespace"]),
                name: str_of(&r["name"]),
                code: e["responseStatus"]["code"]
                    .as_u64()
                    .and_then(|c| u16::try_from(c).ok()),
            });
        }
        Ok(out)
    }
}
