//! Requests made for a tenant go out as a ServiceAccount of the tenant's
//! namespace (`Impersonate-User`), as Flux's multi-tenancy lockdown does:
//! the API server's RBAC, not only the host's own checks, bounds what a
//! tenant's plugin reads and writes. The host itself needs only the
//! `impersonate` verb on those ServiceAccounts.

use std::collections::HashMap;
use std::sync::Arc;

use http::HeaderValue;

/// The header the API server reads the impersonated user from.
pub const USER_HEADER: &str = "Impersonate-User";

/// A ServiceAccount a tenant's requests go out as.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServiceAccountRef {
    pub namespace: String,
    pub name: String,
}

impl ServiceAccountRef {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The user name the API server gives it
    /// (`system:serviceaccount:<namespace>:<name>`); impersonated alone, it
    /// also gets the groups of the namespace's ServiceAccounts.
    pub fn username(&self) -> String {
        format!("system:serviceaccount:{}:{}", self.namespace, self.name)
    }

    /// Marks `request` as made by this ServiceAccount, replacing any
    /// impersonation the host's own credentials carried.
    pub fn impersonate<B>(&self, request: &mut http::Request<B>) -> Result<(), ImpersonateError> {
        let value = HeaderValue::from_str(&self.username()).map_err(|_| ImpersonateError {
            account: self.clone(),
        })?;
        let headers = request.headers_mut();
        // Groups or extras of the host's own impersonation would be
        // added to the tenant's identity: drop them.
        let stale: Vec<http::HeaderName> = headers
            .keys()
            .filter(|k| k.as_str().starts_with("impersonate-"))
            .cloned()
            .collect();
        for key in stale {
            headers.remove(key);
        }
        headers.insert(USER_HEADER, value);
        Ok(())
    }
}

impl std::fmt::Display for ServiceAccountRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ServiceAccount {}/{}", self.namespace, self.name)
    }
}

/// Marks `request` as made by `account`, when one is given (else it goes
/// as the host), failing as a kube error does.
pub fn act_as<B>(
    request: &mut http::Request<B>,
    account: Option<&ServiceAccountRef>,
) -> Result<(), kube::Error> {
    match account {
        Some(account) => account
            .impersonate(request)
            .map_err(|e| kube::Error::Service(Box::new(e))),
        None => Ok(()),
    }
}

/// Sends `request` as `account` (the host when `None`) and decodes the
/// answer.
pub async fn request_as<K: serde::de::DeserializeOwned>(
    client: &kube::Client,
    account: Option<&ServiceAccountRef>,
    mut request: http::Request<Vec<u8>>,
) -> Result<K, kube::Error> {
    act_as(&mut request, account)?;
    client.request::<K>(request).await
}

/// A name that cannot travel in a header (the API server's names always
/// can: this is a bug or a hand-built reference).
#[derive(Debug, thiserror::Error)]
#[error("{account}: its user name cannot be sent as an {USER_HEADER} header")]
pub struct ImpersonateError {
    pub account: ServiceAccountRef,
}

/// Which plugins act as whom. The Plugin objects set a tenant plugin's
/// account before it loads and drop it once it is unloaded; the action
/// sink reads it on every request. Cheap to clone (one shared map).
#[derive(Debug, Clone, Default)]
pub struct Impersonations(Arc<parking_lot::RwLock<HashMap<String, ServiceAccountRef>>>);

impl Impersonations {
    pub fn set(&self, plugin: &str, account: ServiceAccountRef) {
        self.0.write().insert(plugin.to_owned(), account);
    }

    pub fn remove(&self, plugin: &str) {
        self.0.write().remove(plugin);
    }

    pub fn get(&self, plugin: &str) -> Option<ServiceAccountRef> {
        self.0.read().get(plugin).cloned()
    }
}

/// Whether `plugin` is a tenant's (`<namespace>/<name>`: a NamespacedPlugin;
/// no folder plugin or Plugin name holds a slash). Such a plugin without an
/// account is refused every request rather than sent as the host.
pub fn is_tenant_plugin(plugin: &str) -> bool {
    plugin.contains('/')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn impersonation_replaces_the_hosts_own() {
        let sa = ServiceAccountRef::new("team-a", "kubewasm-tenant");
        let mut req = http::Request::builder()
            .header("Impersonate-User", "admin")
            .header("Impersonate-Group", "system:masters")
            .header("Impersonate-Extra-scopes", "x")
            .body(())
            .unwrap();
        sa.impersonate(&mut req).unwrap();
        let h = req.headers();
        assert_eq!(
            h.get_all(USER_HEADER).iter().collect::<Vec<_>>(),
            ["system:serviceaccount:team-a:kubewasm-tenant"]
        );
        assert!(h.get("impersonate-group").is_none(), "{h:?}");
        assert!(h.get("impersonate-extra-scopes").is_none(), "{h:?}");
    }

    #[test]
    fn accounts_are_set_and_dropped_per_plugin() {
        let map = Impersonations::default();
        let sa = ServiceAccountRef::new("team-a", "kubewasm-tenant");
        map.clone().set("team-a/x", sa.clone());
        assert_eq!(map.get("team-a/x"), Some(sa));
        map.remove("team-a/x");
        assert_eq!(map.get("team-a/x"), None);
        assert!(is_tenant_plugin("team-a/x"));
        assert!(!is_tenant_plugin("x"));
    }
}
