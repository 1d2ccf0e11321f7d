//! A registration checked against the kinds the host knows and the
//! sidecar's grant: each subscription as an informer spec and a delivery
//! filter, the kinds it writes, and subscriptions narrowed to the granted
//! namespaces. Free functions, so `kubewasm test` checks a plugin as a
//! load does.

use std::collections::HashSet;
use std::time::Duration;

use crate::dispatch::SubscriptionFilter;
use crate::informer::InformerSpec;
use crate::informer::selector::{FieldSelector, LabelSelector};
use crate::kind::{KindError, KindRef, KindRegistry};
use crate::runtime::{LoadError, Registration};

/// The first kind `registration` names that `kinds` does not know.
pub fn unknown_kind<'r>(
    kinds: &KindRegistry,
    registration: &'r Registration,
) -> Option<&'r KindRef> {
    registration
        .subscriptions
        .iter()
        .map(|s| &s.kind)
        .chain(registration.writes.iter())
        .chain(registration.indexes.iter().map(|i| &i.kind))
        .find(|k| matches!(kinds.resolve(k), Err(KindError::Unknown(_))))
}

/// Each subscription as an informer spec and a delivery filter, or an
/// error naming the subscription and what is wrong with it.
pub fn resolve_subscriptions(
    kinds: &KindRegistry,
    default_resync: Option<Duration>,
    registration: &Registration,
) -> Result<Vec<(InformerSpec, SubscriptionFilter)>, LoadError> {
    let mut resolved = Vec::new();
    for (i, sub) in registration.subscriptions.iter().enumerate() {
        let bad =
            |m: String| LoadError::BadRegistration(format!("subscription {i} ({}): {m}", sub.kind));
        let kind = kinds.resolve(&sub.kind).map_err(|e| bad(e.to_string()))?;
        kinds
            .check_watchable(&kind)
            .map_err(|e| bad(e.to_string()))?;
        if let Some(s) = &sub.label_selector {
            LabelSelector::parse(s).map_err(|e| bad(e.to_string()))?;
        }
        // The informer gets the canonical text (apimachinery's
        // `String()`): what the server is sent and the informer's id
        // shows, so two spellings of one selector share an informer.
        let field_selector = match &sub.field_selector {
            Some(s) => {
                let parsed = FieldSelector::parse(s).map_err(|e| bad(e.to_string()))?;
                parsed.check_supported(&kind).map_err(bad)?;
                (!parsed.is_empty()).then(|| parsed.to_string())
            }
            None => None,
        };
        if sub.namespace.is_some() && !kind.namespaced {
            return Err(bad(format!(
                "{} is cluster-scoped; drop the namespace",
                kind.resource_name()
            )));
        }
        if let Some(f) = sub.fields.iter().find(|f| !f.starts_with('/')) {
            return Err(bad(format!(
                "field {f:?} is not a JSON pointer (it must start with '/')"
            )));
        }
        let spec = InformerSpec {
            kind: kind.clone(),
            namespace: sub.namespace.clone(),
            label_selector: sub.label_selector.clone(),
            field_selector,
        };
        let filter = SubscriptionFilter {
            index: u32::try_from(i).unwrap_or(u32::MAX),
            kind: kind.gvk.clone(),
            deltas: sub.deltas.clone(),
            fields: sub.fields.clone(),
            resync: sub.resync.period(default_resync),
        };
        resolved.push((spec, filter));
    }
    Ok(resolved)
}

/// The kinds the registration declares it writes.
pub fn resolve_writes(
    kinds: &KindRegistry,
    registration: &Registration,
) -> Result<(HashSet<crate::kind::Gvk>, Vec<crate::kind::KindInfo>), LoadError> {
    let mut writes = HashSet::new();
    let mut write_kinds = Vec::new();
    for w in &registration.writes {
        let info = kinds
            .resolve(w)
            .map_err(|e| LoadError::BadRegistration(format!("writes: {e}")))?;
        writes.insert(info.gvk.clone());
        write_kinds.push(info);
    }
    Ok((writes, write_kinds))
}

/// Checks the registration against the sidecar's grant, and narrows each
/// subscription to every namespace that the grant confines to a list into
/// one subscription per granted namespace (the same delivery filter, so the
/// plugin sees one subscription; its caches hold only what it may read).
pub fn narrow_to_grant(
    grant: &crate::runtime::access::Grant,
    resolved: Vec<(InformerSpec, SubscriptionFilter)>,
    writes: &[crate::kind::KindInfo],
) -> Result<Vec<(InformerSpec, SubscriptionFilter)>, LoadError> {
    use crate::runtime::access::{ReadRequest, ReadScope};
    let reads: Vec<ReadRequest<'_>> = resolved
        .iter()
        .map(|(spec, _)| ReadRequest {
            kind: &spec.kind,
            namespace: spec.namespace.as_deref(),
        })
        .collect();
    let scopes = grant
        .check_registration(&reads, writes)
        .map_err(|d| LoadError::NotGranted(d.0))?;
    let mut out = Vec::with_capacity(resolved.len());
    for ((spec, filter), scope) in resolved.into_iter().zip(scopes) {
        match scope {
            ReadScope::AsAsked => out.push((spec, filter)),
            ReadScope::Narrowed(namespaces) => {
                tracing::info!(plugin = %grant.plugin, kind = %spec.kind.resource_name(), namespaces = ?namespaces, "subscription narrowed to the namespaces its sidecar grants");
                for ns in namespaces {
                    let mut narrowed = spec.clone();
                    narrowed.namespace = Some(ns);
                    out.push((narrowed, filter.clone()));
                }
            }
        }
    }
    Ok(out)
}
