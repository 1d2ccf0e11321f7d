//! Which object a plugin came from, the object as a reconcile needs it,
//! and what each object's queue runs.

use kube::ResourceExt;
use kube::runtime::watcher::Event;

use crate::crd::{NamespacedPlugin, Plugin, PluginParts, PluginStatus};
use crate::origin::Origin;

/// Which object a plugin came from.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) enum Source {
    Cluster(String),
    Tenant { namespace: String, name: String },
}

impl Source {
    /// The plugin's name in the host: a Plugin's name, or
    /// `<namespace>/<name>` for a NamespacedPlugin (a slash no Plugin name
    /// can hold, so the two never collide).
    pub(super) fn plugin_name(&self) -> String {
        match self {
            Self::Cluster(name) => name.clone(),
            Self::Tenant { namespace, name } => format!("{namespace}/{name}"),
        }
    }

    /// The object as the host tells plugin sources apart.
    pub(super) fn origin(&self) -> Origin {
        Origin::Object(self.display())
    }

    /// How errors name the object (`plugins.kubewasm.io/x`).
    pub(super) fn display(&self) -> String {
        match self {
            Self::Cluster(name) => format!("plugins.kubewasm.io/{name}"),
            Self::Tenant { namespace, name } => {
                format!("namespacedplugins.kubewasm.io/{name} in {namespace}")
            }
        }
    }
}

/// What one object's queue runs ([`keyed::Keyed`]).
pub(super) enum Op {
    /// Load or swap to what the object names; `retrying` a refused spec
    /// (run even if the generation was seen).
    Reconcile { obj: Box<Seen>, retrying: bool },
    /// Unload the object's plugin.
    Remove,
    /// Ask again whether a serving tenant plugin's account may still read
    /// what it reads.
    Recheck,
}

impl Op {
    pub(super) fn reconcile(obj: Seen) -> Self {
        Self::Reconcile {
            obj: Box::new(obj),
            retrying: false,
        }
    }

    /// A newer request over one that still waits: the newer wins; two
    /// reconciles keep the retry if either was one.
    pub(super) fn merge(earlier: Self, newer: Self) -> Self {
        match (earlier, newer) {
            (Self::Reconcile { retrying: a, .. }, Self::Reconcile { obj, retrying: b }) => {
                Self::Reconcile {
                    obj,
                    retrying: a || b,
                }
            }
            // A reconcile checks what a recheck would, and a removal
            // waiting is never undone by one.
            (earlier @ (Self::Reconcile { .. } | Self::Remove), Self::Recheck) => earlier,
            (_, newer) => newer,
        }
    }
}

/// An object as the reconcile needs it.
pub(super) struct Seen {
    pub(super) source: Source,
    pub(super) generation: Option<i64>,
    pub(super) parts: PluginParts,
    /// The status on the object as seen (other replicas' entries, the
    /// transition times a starting replica keeps).
    pub(super) status: Option<PluginStatus>,
}

/// A watch event of either kind, as the reconcile sees its object.
pub(super) fn seen<K>(event: Event<K>, of: fn(&K) -> Seen) -> Event<Seen> {
    match event {
        Event::Init => Event::Init,
        Event::InitApply(k) => Event::InitApply(of(&k)),
        Event::InitDone => Event::InitDone,
        Event::Apply(k) => Event::Apply(of(&k)),
        Event::Delete(k) => Event::Delete(of(&k)),
    }
}

pub(super) fn object_of_cluster(p: &Plugin) -> Seen {
    Seen {
        source: Source::Cluster(p.name_any()),
        generation: p.metadata.generation,
        parts: p.spec.parts.clone(),
        status: p.status.clone(),
    }
}

pub(super) fn object_of_tenant(p: &NamespacedPlugin) -> Seen {
    Seen {
        source: Source::Tenant {
            namespace: p.namespace().unwrap_or_default(),
            name: p.name_any(),
        },
        generation: p.metadata.generation,
        parts: p.spec.parts.clone(),
        status: p.status.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reconcile(generation: i64) -> Op {
        Op::reconcile(Seen {
            source: Source::Cluster("p".into()),
            generation: Some(generation),
            parts: PluginParts::default(),
            status: None,
        })
    }

    fn generation(op: &Op) -> Option<i64> {
        match op {
            Op::Reconcile { obj, .. } => obj.generation,
            _ => None,
        }
    }

    #[test]
    fn a_recheck_never_displaces_a_waiting_reconcile_or_removal() {
        let kept = Op::merge(reconcile(3), Op::Recheck);
        assert_eq!(generation(&kept), Some(3));
        assert!(matches!(Op::merge(Op::Remove, Op::Recheck), Op::Remove));
        // The other way round, the newer request wins as always.
        assert!(matches!(Op::merge(Op::Recheck, Op::Remove), Op::Remove));
        assert_eq!(generation(&Op::merge(Op::Recheck, reconcile(4))), Some(4));
        assert!(matches!(Op::merge(reconcile(3), Op::Remove), Op::Remove));
    }
}
