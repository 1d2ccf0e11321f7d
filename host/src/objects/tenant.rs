//! Tenants: who a NamespacedPlugin acts as, and what is checked before
//! anything it names is read. Everything a tenant references lives in its
//! own namespace (the CRD's CEL rules refuse any namespace; the host checks
//! again before a read, naming only its own field). The reads of what it
//! references and its plugin's writes go out impersonating a ServiceAccount
//! of that namespace (Flux's lockdown), so the API server's RBAC bounds a
//! tenant; the kinds its access list lets it read through the host's shared
//! cache are asked of the API server for that ServiceAccount too
//! (SelfSubjectAccessReview, impersonated), since those reads never reach
//! the server as the tenant.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::PostParams;
use kube::core::Request;
use serde::de::DeserializeOwned;

use super::reasons::{self, Reason};
use crate::crd::PluginParts;
use crate::runtime::access::{GrantKind, Verb};
use crate::source::kube::ServiceAccountRef;
use crate::source::kube::impersonate::request_as;

/// The ServiceAccount tenants act as unless the host config names another.
pub const DEFAULT_SERVICE_ACCOUNT: &str = "kubewasm-tenant";

/// Why a tenant's plugin cannot be served: the condition reason and the
/// message (what to do). An API server that could not answer a check is
/// [`reasons::TENANT_CHECK_FAILED`]: retried, never a reason to stop a
/// serving plugin.
pub type Refusal = (Reason, String);

/// Which ServiceAccount each tenant namespace acts as
/// (`pluginObjects.tenants`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantAccounts {
    default: String,
    per_namespace: BTreeMap<String, String>,
}

impl Default for TenantAccounts {
    fn default() -> Self {
        Self {
            default: DEFAULT_SERVICE_ACCOUNT.to_owned(),
            per_namespace: BTreeMap::new(),
        }
    }
}

impl TenantAccounts {
    /// `default` (else [`DEFAULT_SERVICE_ACCOUNT`]) for every tenant
    /// namespace but those `per_namespace` names (namespace, account).
    pub fn new(
        default: Option<String>,
        per_namespace: impl IntoIterator<Item = (String, String)>,
    ) -> Self {
        Self {
            default: default.unwrap_or_else(|| DEFAULT_SERVICE_ACCOUNT.to_owned()),
            per_namespace: per_namespace.into_iter().collect(),
        }
    }

    /// The ServiceAccount `namespace`'s plugins act as.
    pub fn account(&self, namespace: &str) -> ServiceAccountRef {
        let name = self.per_namespace.get(namespace).unwrap_or(&self.default);
        ServiceAccountRef::new(namespace, name.clone())
    }

    /// Every ServiceAccount name tenants may act as (the host's RBAC lets
    /// it impersonate these names only).
    pub fn names(&self) -> BTreeSet<String> {
        std::iter::once(self.default.clone())
            .chain(self.per_namespace.values().cloned())
            .collect()
    }
}

/// Refuses a spec that references an object outside `namespace`, naming
/// only its own field: whether the other object exists is never asked.
pub fn check_references(parts: &PluginParts, namespace: &str) -> Result<(), Refusal> {
    match parts.reference_outside(namespace) {
        None => Ok(()),
        Some(field) => Err((
            reasons::OUTSIDE_NAMESPACE,
            format!(
                "a NamespacedPlugin references objects of its own namespace {namespace} only: {field} names another; remove it"
            ),
        )),
    }
}

/// Whether the tenant's ServiceAccount exists, asked with the host's
/// credentials (`get` on those names is part of its RBAC), so that a
/// missing one is told apart from one without permissions. A host that may
/// not ask goes on: the impersonated requests will be refused if it is.
pub async fn check_account(
    client: &kube::Client,
    account: &ServiceAccountRef,
) -> Result<(), Refusal> {
    let api = kube::Api::<ServiceAccount>::namespaced(client.clone(), &account.namespace);
    match api.get_opt(&account.name).await {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err((
            reasons::TENANT_ACCOUNT_MISSING,
            format!(
                "{account}, which this namespace's plugins act as, does not exist: create it and bind it a Role allowing what the plugin reads and writes here (`kubewasm rbac` prints one)"
            ),
        )),
        Err(kube::Error::Api(s)) if s.code == 403 => {
            tracing::debug!(%account, "the host may not read tenant ServiceAccounts; the impersonated requests tell");
            Ok(())
        }
        Err(e) => Err((
            reasons::TENANT_CHECK_FAILED,
            format!("cannot tell whether {account} exists: {e}; asking again"),
        )),
    }
}

/// Each kind the (confined) access list lets the plugin read may be
/// listed and watched by the tenant's ServiceAccount in its namespace:
/// the host's cache serves those reads with its own credentials, so the
/// API server is asked on the tenant's behalf before the plugin loads.
pub async fn check_reads(
    client: &kube::Client,
    account: &ServiceAccountRef,
    parts: &PluginParts,
) -> Result<(), Refusal> {
    let kinds: BTreeSet<String> = parts
        .access
        .iter()
        .flatten()
        .filter(|a| a.verbs.contains(&Verb::Read))
        .flat_map(|a| a.kinds.iter().cloned())
        .collect();
    for kind in kinds {
        let Ok(grant) = GrantKind::parse(&kind) else {
            // The manifest parser names it; nothing to ask.
            continue;
        };
        for verb in ["list", "watch"] {
            let allowed = review(client, account, &grant, verb).await.map_err(|e| {
                (
                    reasons::TENANT_CHECK_FAILED,
                    format!("cannot ask whether {account} may {verb} {kind}: {e}; asking again"),
                )
            })?;
            if !allowed {
                return Err((
                    reasons::TENANT_FORBIDDEN,
                    format!(
                        "{account} may not {verb} {kind} in {ns}, which the plugin's access lets it read: bind it a Role allowing get, list and watch on {kind} (`kubewasm rbac` prints one), or drop the kind from access",
                        ns = account.namespace
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// A SelfSubjectAccessReview made as `account`: whether it may `verb`
/// `kind` in its namespace.
async fn review(
    client: &kube::Client,
    account: &ServiceAccountRef,
    kind: &GrantKind,
    verb: &str,
) -> Result<bool, kube::Error> {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(account.namespace.clone()),
                verb: Some(verb.to_owned()),
                group: Some(kind.group.clone()),
                resource: Some(kind.plural.clone()),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    let body = serde_json::to_vec(&review).map_err(kube::Error::SerdeError)?;
    let request = Request::new("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews")
        .create(&PostParams::default(), body)
        .map_err(kube::Error::BuildRequest)?;
    let answer: SelfSubjectAccessReview = request_as(client, Some(account), request).await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

/// Gets the namespaced object `name` of `K` in `namespace`, as `account`
/// when given (else as the host).
pub async fn get_as<K>(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    account: Option<&ServiceAccountRef>,
) -> Result<K, kube::Error>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + DeserializeOwned
        + Clone
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api = kube::Api::<K>::namespaced(client.clone(), namespace);
    let request = Request::new(api.resource_url())
        .get(name, &kube::api::GetParams::default())
        .map_err(kube::Error::BuildRequest)?;
    request_as(client, account, request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_namespace_acts_as_its_account() {
        let accounts = TenantAccounts::new(None, [("team-b".to_owned(), "plugins".to_owned())]);
        assert_eq!(
            accounts.account("team-a").username(),
            "system:serviceaccount:team-a:kubewasm-tenant"
        );
        assert_eq!(
            accounts.account("team-b").username(),
            "system:serviceaccount:team-b:plugins"
        );
        assert_eq!(
            accounts.names().into_iter().collect::<Vec<_>>(),
            ["kubewasm-tenant", "plugins"]
        );
    }

    #[test]
    fn a_reference_outside_is_refused_naming_only_the_field() {
        let parts: PluginParts = serde_yaml_ng::from_str(
            "module: {oci: {reference: 'r.io/x:1', pullSecret: {name: regcred, namespace: kubewasm}}}",
        )
        .unwrap();
        let (reason, message) = check_references(&parts, "team-a").unwrap_err();
        assert_eq!(reason, reasons::OUTSIDE_NAMESPACE);
        assert!(
            message.contains("module.oci.pullSecret.namespace"),
            "{message}"
        );
        assert!(
            !message.contains("kubewasm") && !message.contains("regcred"),
            "the other namespace and object are not named: {message}"
        );
    }
}
