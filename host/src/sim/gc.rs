//! The garbage collector, as kube-controller-manager's runs it over owner
//! references: what it does after an object goes or is marked for a
//! foreground or orphan deletion, as the writes (deletes and merge
//! patches, each with a uid precondition) a simulation runs through its
//! own write path, so they are stored, versioned and watched as any
//! other write. Used by `kubewasm test`'s cluster and the embedded local
//! cluster alike.
//!
//! - An owner goes: each dependent with no live owner left is deleted
//!   (background; foreground or orphan where its own finalizers say so),
//!   the others lose their reference to it.
//! - Foreground (`foregroundDeletion` finalizer): the owner's dependents
//!   are deleted (in the foreground when they have dependents of their
//!   own) or, with another live owner, lose the reference; the owner's
//!   finalizer goes once no dependent blocks it (`blockOwnerDeletion`).
//! - Orphan (`orphan` finalizer): every dependent loses its reference,
//!   then the finalizer goes.
//!
//! One difference on purpose: an owner this cluster never held counts as
//! live. A real collector deletes a dependent whose owners are all
//! missing; a fixture's or a folder's cluster is often part of a real one
//! (objects copied with their owner references), and deleting what it
//! only cannot see would lose objects.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};

use serde_json::{Value, json};

use super::deletion::{FOREGROUND, ORPHAN, finalizers, is_terminating};
use crate::actions::{Action, PatchType, Preconditions, Propagation, Target};
use crate::kind::{Gvk, KindRegistry};
use crate::object::ObjectKey;

/// An object's identity in a simulated cluster.
pub type Id = (Gvk, ObjectKey);

/// Who writes the collector's actions (as a plugin name, in logs).
pub const ACTOR: &str = "garbage-collector";

/// The field manager of the collector's writes, as a cluster records
/// kube-controller-manager's.
pub const MANAGER: &str = "kube-controller-manager";

/// The field manager of `writer`'s writes: a plugin's as the host's sink
/// names it, the collector's as [`MANAGER`].
pub fn field_manager(writer: &str) -> String {
    if writer == ACTOR {
        MANAGER.into()
    } else {
        crate::actions::field_manager(writer)
    }
}

/// One item of the collector's work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Work {
    /// An object is terminating: if it carries the collector's `orphan`
    /// or `foregroundDeletion` finalizer, orphan or delete its
    /// dependents, then drop the finalizer.
    Finalize(Id),
    /// The object with this uid went.
    Collect(String),
}

/// Objects by uid, dependents by their owners' uids, the uids of objects
/// that went, and the work pending: kept by the one place a simulation
/// stores objects.
#[derive(Debug, Default, Clone)]
pub struct Collector {
    by_uid: HashMap<String, Id>,
    dependents: HashMap<String, BTreeSet<Id>>,
    gone: HashSet<String>,
    work: VecDeque<Work>,
}

impl Collector {
    /// `id` now holds `value` (`old`: what it held).
    pub fn stored(&mut self, id: &Id, old: Option<&Value>, value: &Value) {
        if let Some(old) = old {
            self.unindex(id, old);
        }
        if let Some(uid) = uid(value) {
            self.by_uid.insert(uid.to_owned(), id.clone());
        }
        for (owner, _) in owners(value) {
            self.dependents.entry(owner).or_default().insert(id.clone());
        }
    }

    /// `id` (last state `value`) is gone.
    pub fn removed(&mut self, id: &Id, value: &Value) {
        self.unindex(id, value);
        if let Some(uid) = uid(value) {
            self.gone.insert(uid.to_owned());
        }
    }

    fn unindex(&mut self, id: &Id, v: &Value) {
        if let Some(uid) = uid(v)
            && self.by_uid.get(uid) == Some(id)
        {
            self.by_uid.remove(uid);
        }
        for (owner, _) in owners(v) {
            if let Some(deps) = self.dependents.get_mut(&owner) {
                deps.remove(id);
                if deps.is_empty() {
                    self.dependents.remove(&owner);
                }
            }
        }
    }

    /// Queues what the collector does after a write stored `value` under
    /// `id` over `old` (`gone`: the write deleted it).
    pub fn follow(&mut self, id: &Id, old: Option<&Value>, value: &Value, gone: bool) {
        // An owner deleted in the foreground may be waiting for a
        // dependent that goes or lets go of it.
        let kept = if gone { Vec::new() } else { owners(value) };
        for (owner, _) in old.map(owners).unwrap_or_default() {
            if !kept.iter().any(|(u, _)| *u == owner)
                && let Some(owner) = self.by_uid.get(&owner).cloned()
            {
                self.queue(Work::Finalize(owner));
            }
        }
        if gone {
            if let Some(uid) = uid(value) {
                self.work.push_back(Work::Collect(uid.to_owned()));
            }
        } else if is_terminating(value)
            && finalizers(value)
                .iter()
                .any(|f| *f == ORPHAN || *f == FOREGROUND)
        {
            self.queue(Work::Finalize(id.clone()));
        }
    }

    fn queue(&mut self, work: Work) {
        if !self.work.contains(&work) {
            self.work.push_back(work);
        }
    }

    /// The next item of work.
    pub fn next_work(&mut self) -> Option<Work> {
        self.work.pop_front()
    }

    /// Puts work back at the end (a write it needs failed for now).
    pub fn defer(&mut self, work: Work) {
        self.queue(work);
    }

    /// Drops the pending work (none is left to a dry run).
    pub fn clear(&mut self) {
        self.work.clear();
    }

    fn dependents_of(&self, uid: &str) -> Vec<Id> {
        self.dependents
            .get(uid)
            .map(|d| d.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Whether the owner with `uid` is live for its dependents: held and
    /// not waiting for its dependents to go, or never held here.
    fn solid(&self, uid: &str, get: &dyn Fn(&Id) -> Option<Value>) -> bool {
        match self.by_uid.get(uid) {
            Some(id) => !get(id).is_some_and(|o| waiting(&o)),
            None => !self.gone.contains(uid),
        }
    }

    /// The writes `work` takes, given the objects (`get`).
    pub fn plan(
        &self,
        kinds: &KindRegistry,
        work: &Work,
        get: &dyn Fn(&Id) -> Option<Value>,
    ) -> Vec<Action> {
        let mut out = Vec::new();
        match work {
            Work::Finalize(id) => {
                let Some(owner) = get(id) else {
                    return out;
                };
                let Some(owner_uid) = uid(&owner).map(str::to_owned) else {
                    return out;
                };
                if !is_terminating(&owner) {
                    return out;
                }
                let fins = finalizers(&owner);
                let orphan = fins.contains(&ORPHAN);
                if !orphan && !fins.contains(&FOREGROUND) {
                    return out;
                }
                let mut blocked = false;
                for dep_id in self.dependents_of(&owner_uid) {
                    let Some(dep) = get(&dep_id) else { continue };
                    if orphan {
                        out.extend(without_owners(kinds, &dep_id, &dep, &[&owner_uid]));
                        continue;
                    }
                    blocked |= owners(&dep)
                        .iter()
                        .any(|(u, block)| *u == owner_uid && *block);
                    if is_terminating(&dep) {
                        continue;
                    }
                    out.extend(self.release_or_delete(kinds, &dep_id, &dep, &owner_uid, get));
                }
                // The collector's finalizer goes once nothing blocks it
                // (for a foreground deletion, its blocking dependents'
                // own deletions queue this again as they go).
                if orphan || !blocked {
                    let finalizer = if orphan { ORPHAN } else { FOREGROUND };
                    out.extend(without_finalizer(kinds, id, &owner, finalizer));
                }
            }
            Work::Collect(owner_uid) => {
                for dep_id in self.dependents_of(owner_uid) {
                    let Some(dep) = get(&dep_id) else { continue };
                    if is_terminating(&dep) {
                        continue;
                    }
                    out.extend(self.release_or_delete(kinds, &dep_id, &dep, owner_uid, get));
                }
            }
        }
        out
    }

    /// A dependent whose owner `owner_uid` goes (or waits for it): it
    /// loses the references to owners that are gone or waiting when a
    /// live one is left, and is deleted otherwise.
    fn release_or_delete(
        &self,
        kinds: &KindRegistry,
        id: &Id,
        dep: &Value,
        owner_uid: &str,
        get: &dyn Fn(&Id) -> Option<Value>,
    ) -> Option<Action> {
        let refs = owners(dep);
        let (live, dead): (Vec<&str>, Vec<&str>) = refs
            .iter()
            .map(|(u, _)| u.as_str())
            .partition(|u| *u != owner_uid && self.solid(u, get));
        if !live.is_empty() {
            return without_owners(kinds, id, dep, &dead);
        }
        let waited = refs.iter().any(|(u, _)| {
            self.by_uid
                .get(u)
                .and_then(get)
                .is_some_and(|o| waiting(&o))
        });
        let own = finalizers(dep);
        let propagation = if waited && !self.dependents_of(uid(dep)?).is_empty() {
            Propagation::Foreground
        } else if own.contains(&ORPHAN) {
            Propagation::Orphan
        } else if own.contains(&FOREGROUND) {
            Propagation::Foreground
        } else {
            Propagation::Background
        };
        Some(Action::Delete {
            target: target(kinds, id, dep)?,
            propagation,
        })
    }
}

/// An owner deleted in the foreground: its dependents go first.
fn waiting(owner: &Value) -> bool {
    is_terminating(owner) && finalizers(owner).contains(&FOREGROUND)
}

fn uid(v: &Value) -> Option<&str> {
    v.pointer("/metadata/uid").and_then(Value::as_str)
}

/// The uids of `v`'s owners, each with whether it blocks the owner's
/// foreground deletion (`blockOwnerDeletion`).
pub fn owners(v: &Value) -> Vec<(String, bool)> {
    v.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map(|refs| {
            refs.iter()
                .filter_map(|r| {
                    let uid = r.get("uid")?.as_str()?.to_owned();
                    let block = r.get("blockOwnerDeletion").and_then(Value::as_bool) == Some(true);
                    Some((uid, block))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The collector's write to `v` (`id`), taken only if `v` is still the
/// object it read (its uid as a precondition).
fn target(kinds: &KindRegistry, id: &Id, v: &Value) -> Option<Target> {
    let kind = kinds.by_gvk(&id.0)?;
    let mut target = Target::new(
        kind,
        id.1.namespace.as_deref().map(str::to_owned),
        &*id.1.name,
    );
    target.preconditions = Preconditions {
        uid: uid(v).map(str::to_owned),
        resource_version: None,
    };
    Some(target)
}

/// A merge patch of one metadata list (`null` when it ends empty, as the
/// collector's patch leaves it).
fn patch_list(
    kinds: &KindRegistry,
    id: &Id,
    v: &Value,
    field: &str,
    list: Vec<Value>,
) -> Option<Action> {
    let value = if list.is_empty() {
        Value::Null
    } else {
        json!(list)
    };
    Some(Action::Patch {
        target: target(kinds, id, v)?,
        patch_type: PatchType::Merge,
        patch: json!({"metadata": {field: value}}),
    })
}

fn without_owners(kinds: &KindRegistry, id: &Id, v: &Value, uids: &[&str]) -> Option<Action> {
    let refs = v.pointer("/metadata/ownerReferences")?.as_array()?;
    let kept: Vec<Value> = refs
        .iter()
        .filter(|r| {
            !r.get("uid")
                .and_then(Value::as_str)
                .is_some_and(|u| uids.contains(&u))
        })
        .cloned()
        .collect();
    if kept.len() == refs.len() {
        return None;
    }
    patch_list(kinds, id, v, "ownerReferences", kept)
}

fn without_finalizer(kinds: &KindRegistry, id: &Id, v: &Value, finalizer: &str) -> Option<Action> {
    let list: Vec<Value> = finalizers(v)
        .into_iter()
        .filter(|f| *f != finalizer)
        .map(|f| json!(f))
        .collect();
    patch_list(kinds, id, v, "finalizers", list)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn cm(name: &str, uid: &str, owners: &[&str]) -> (Id, Value) {
        let refs: Vec<Value> = owners
            .iter()
            .map(|u| json!({"apiVersion": "v1", "kind": "ConfigMap", "name": u, "uid": u}))
            .collect();
        let v = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "a", "uid": uid, "ownerReferences": refs}});
        (
            (
                Gvk::new("", "v1", "ConfigMap"),
                ObjectKey::new(Some("a"), name),
            ),
            v,
        )
    }

    /// A dependent of an owner deleted in the foreground that has
    /// dependents of its own is deleted in the foreground too (so its
    /// own go first); one without, in the background; each write is
    /// taken only on the object the collector read (its uid).
    #[test]
    fn a_foreground_deletion_reaches_down_in_the_foreground() {
        let kinds = KindRegistry::builtin();
        let mut gc = Collector::default();
        let (owner_id, mut owner) = cm("o", "o", &[]);
        owner["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        owner["metadata"]["finalizers"] = json!([FOREGROUND]);
        let (mid_id, mid) = cm("mid", "mid", &["o"]);
        let (leaf_id, leaf) = cm("leaf", "leaf", &["mid"]);
        let (flat_id, flat) = cm("flat", "flat", &["o"]);
        let objects: HashMap<Id, Value> = [
            (owner_id.clone(), owner.clone()),
            (mid_id.clone(), mid.clone()),
            (leaf_id.clone(), leaf.clone()),
            (flat_id.clone(), flat.clone()),
        ]
        .into();
        for (id, v) in &objects {
            gc.stored(id, None, v);
        }
        gc.follow(&owner_id, None, &owner, false);
        let work = gc.next_work().unwrap();
        assert_eq!(work, Work::Finalize(owner_id));
        let plan = gc.plan(&kinds, &work, &|id| objects.get(id).cloned());
        let described: Vec<String> = plan
            .iter()
            .map(|a| match a {
                Action::Delete {
                    target,
                    propagation,
                } => {
                    assert!(target.preconditions.uid.is_some());
                    format!("delete {} {propagation:?}", target.name)
                }
                Action::Patch { target, patch, .. } => format!("patch {} {patch}", target.name),
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(
            described,
            [
                "delete flat Background",
                "delete mid Foreground",
                r#"patch o {"metadata":{"finalizers":null}}"#
            ]
        );
    }
}
