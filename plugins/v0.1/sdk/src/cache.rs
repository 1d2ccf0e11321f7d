//! Typed reads of the host's lister cache: never an API call, and only
//! kinds the plugin subscribed to (a cache-only subscription suffices).
//!
//! Every [`CacheError`] means the plugin asked for
//! something its registration does not allow (an unsubscribed kind, an
//! undeclared index, a bad selector): retrying cannot help, so they map to
//! [`HandlerError::Permanent`].

use k8s_openapi::Resource;

use crate::bindings::kubewasm::plugin::cache as raw;
use crate::{CacheError, HandlerError, KindRef, Object, permanent};

fn refused(e: CacheError) -> HandlerError {
    permanent(match e {
        CacheError::NotSubscribed(m) => {
            format!("cache read refused, not subscribed or not granted: {m}")
        }
        CacheError::UnknownIndex(m) => format!("cache read refused, unknown index: {m}"),
        CacheError::InvalidSelector(m) => format!("cache read refused, invalid selector: {m}"),
    })
}

/// One `K` by namespace (`None` if cluster-scoped) and name.
pub fn get<K: Resource>(
    namespace: Option<&str>,
    name: &str,
) -> Result<Option<Object>, HandlerError> {
    get_kind(&KindRef::of::<K>(), namespace, name)
}

/// One object of any kind by namespace and name.
pub fn get_kind(
    kind: &KindRef,
    namespace: Option<&str>,
    name: &str,
) -> Result<Option<Object>, HandlerError> {
    raw::get(kind, namespace, name).map_err(refused)
}

/// The `K`s in one namespace or all (`None`), optionally filtered by a
/// label selector; sorted by namespace then name.
pub fn list<K: Resource>(
    namespace: Option<&str>,
    label_selector: Option<&str>,
) -> Result<Vec<Object>, HandlerError> {
    list_kind(&KindRef::of::<K>(), namespace, label_selector)
}

/// Like [`list`], for any kind.
pub fn list_kind(
    kind: &KindRef,
    namespace: Option<&str>,
    label_selector: Option<&str>,
) -> Result<Vec<Object>, HandlerError> {
    raw::list(kind, namespace, label_selector).map_err(refused)
}

/// The objects whose declared index yields `value`; sorted by namespace
/// then name.
pub fn by_index(index: &str, value: &str) -> Result<Vec<Object>, HandlerError> {
    raw::by_index(index, value).map_err(refused)
}
