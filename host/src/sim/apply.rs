//! Server-side apply with field ownership, as the API server's field
//! manager does it (structured-merge-diff's `Updater`), so that a plugin
//! meets in `kubewasm test` and `run --local` what it meets on a cluster:
//!
//! - The applied object is merged by the kind's schema ([`super::merge`]):
//!   `map` lists element by element on their keys, `set` lists as sets,
//!   atomic lists and maps replaced whole.
//! - Each manager owns the paths it last applied ([`super::fields`]),
//!   kept in `metadata.managedFields` as the server keeps them
//!   (operation `Apply` or `Update`, `fieldsV1`), so the stored object
//!   carries its ownership from write to write.
//! - A path a manager applied before and no longer applies is removed,
//!   unless another manager owns it.
//! - Changing a value another manager owns is a conflict (409) unless the
//!   apply is forced (the host's sink always forces); forced, the path
//!   changes hands.
//! - A patch (operation `Update`) takes the paths it changes from the
//!   others, once the object has managed fields at all (the server does
//!   not start tracking with an update).
//! - An object stored without managed fields (a fixture's) is owned at its
//!   first apply by `before-first-apply`, an updater, so that the apply
//!   never removes what was there before it.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::fields::{self, Path, Set, Step, Ty};
use super::merge;
use crate::actions::executor::ActionError;

/// The manager that owns what an object had before its first apply.
pub const BEFORE_FIRST_APPLY: &str = "before-first-apply";

/// Who writes, as the server's field manager records it.
#[derive(Debug, Clone)]
pub struct Writer<'a> {
    /// The field manager (`kubewasm/<plugin>` for a plugin's writes).
    pub manager: &'a str,
    /// `status` for a write of the status subresource.
    pub subresource: Option<&'a str>,
    /// The apiVersion the write was made in.
    pub api_version: String,
    /// The server's clock, as managedFields time it.
    pub time: String,
}

/// Which part of the object a write may change (the server's reset
/// fields): all of it, all but the status a subresource owns, or only
/// that status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Whole,
    Main,
    Status,
}

impl Part {
    fn keeps(self, path: &Path) -> bool {
        let under_status = matches!(path.first(), Some(Step::Field(f)) if f == "status");
        match self {
            Part::Whole => true,
            Part::Main => !under_status,
            Part::Status => under_status,
        }
    }

    /// What of an applied body the write takes.
    fn restrict(self, body: &Value) -> Value {
        let mut out = body.clone();
        match (self, out.as_object_mut()) {
            (Part::Main, Some(o)) => {
                o.remove("status");
                out
            }
            (Part::Status, Some(o)) => match o.remove("status") {
                Some(s) => json!({ "status": s }),
                None => json!({}),
            },
            _ => out,
        }
    }

    /// The paths `value` sets in this part, each with its leaf value.
    fn fields(self, ty: Ty<'_>, value: &Value) -> BTreeMap<Path, Option<Value>> {
        let mut all = fields::fields(ty, value);
        all.retain(|p, _| self.keeps(p));
        all
    }
}

/// One manager's entry of `metadata.managedFields`.
#[derive(Debug, Clone, PartialEq)]
struct Entry {
    manager: String,
    /// `Apply` or `Update`.
    operation: String,
    subresource: Option<String>,
    api_version: String,
    time: Option<String>,
    fields: Set,
}

impl Entry {
    fn is(&self, manager: &str, operation: &str, subresource: Option<&str>) -> bool {
        self.manager == manager
            && self.operation == operation
            && self.subresource.as_deref() == subresource
    }

    fn read(v: &Value) -> Entry {
        let text = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        Entry {
            manager: text("manager").unwrap_or_default(),
            operation: text("operation").unwrap_or_default(),
            subresource: text("subresource").filter(|s| !s.is_empty()),
            api_version: text("apiVersion").unwrap_or_default(),
            time: text("time"),
            fields: v
                .get("fieldsV1")
                .map(fields::from_fields_v1)
                .unwrap_or_default(),
        }
    }

    fn to_json(&self) -> Value {
        let mut o = Map::new();
        o.insert("manager".into(), json!(self.manager));
        o.insert("operation".into(), json!(self.operation));
        o.insert("apiVersion".into(), json!(self.api_version));
        if let Some(t) = &self.time {
            o.insert("time".into(), json!(t));
        }
        o.insert("fieldsType".into(), json!("FieldsV1"));
        o.insert("fieldsV1".into(), fields::to_fields_v1(&self.fields));
        if let Some(s) = &self.subresource {
            o.insert("subresource".into(), json!(s));
        }
        Value::Object(o)
    }
}

/// The managers of `object` (`None`: it has no managed fields).
fn entries(object: &Value) -> Option<Vec<Entry>> {
    let list = object.pointer("/metadata/managedFields")?.as_array()?;
    (!list.is_empty()).then(|| list.iter().map(Entry::read).collect())
}

/// `object` without its managed fields: what is merged and compared.
fn without_managed(object: &Value) -> Value {
    let mut out = object.clone();
    if let Some(m) = out.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
    }
    out
}

/// Stores `owners` in `object`'s managedFields, as the server does: the
/// meta paths nobody owns taken out, empty entries dropped, sorted by
/// operation, time and manager; no managedFields when none is left.
fn store(object: &mut Value, mut owners: Vec<Entry>) {
    for e in &mut owners {
        e.fields = fields::strip(std::mem::take(&mut e.fields));
    }
    owners.retain(|e| !e.fields.is_empty());
    owners.sort_by(|a, b| {
        (
            &a.operation,
            &a.time,
            &a.manager,
            &a.api_version,
            &a.subresource,
        )
            .cmp(&(
                &b.operation,
                &b.time,
                &b.manager,
                &b.api_version,
                &b.subresource,
            ))
    });
    let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    if owners.is_empty() {
        meta.remove("managedFields");
    } else {
        let list = owners.iter().map(Entry::to_json).collect();
        meta.insert("managedFields".into(), Value::Array(list));
    }
}

/// What a write changed, path by path (the server's `Compare`).
#[derive(Debug, Default)]
struct Diff {
    added: Set,
    modified: Set,
    removed: Set,
}

impl Diff {
    fn of(before: &BTreeMap<Path, Option<Value>>, after: &BTreeMap<Path, Option<Value>>) -> Self {
        let mut d = Diff::default();
        for (p, v) in after {
            match before.get(p) {
                None => d.added.insert(p.clone()),
                Some(old) if old != v && (old.is_some() || v.is_some()) => {
                    d.modified.insert(p.clone())
                }
                Some(_) => false,
            };
        }
        d.removed = before
            .keys()
            .filter(|p| !after.contains_key(*p))
            .cloned()
            .collect();
        d.added = fields::strip(d.added);
        d.modified = fields::strip(d.modified);
        d.removed = fields::strip(d.removed);
        d
    }

    fn changed(&self) -> Set {
        self.added.union(&self.modified).cloned().collect()
    }

    fn is_empty(&self) -> bool {
        self.added.is_empty() && self.modified.is_empty() && self.removed.is_empty()
    }
}

/// Takes what `diff` changed from every manager but `me`, and what it
/// removed; unless `force`, a change to another's path is a conflict.
fn take_over(
    owners: &mut [Entry],
    me: usize,
    diff: &Diff,
    force: bool,
    what: &str,
) -> Result<(), ActionError> {
    let changed = diff.changed();
    let conflicts: Vec<(&Entry, Set)> = owners
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != me)
        .map(|(_, e)| (e, e.fields.intersection(&changed).cloned().collect::<Set>()))
        .filter(|(_, c)| !c.is_empty())
        .collect();
    if !force && !conflicts.is_empty() {
        return Err(conflict(what, &conflicts));
    }
    for (i, e) in owners.iter_mut().enumerate() {
        if i != me {
            e.fields
                .retain(|p| !changed.contains(p) && !diff.removed.contains(p));
        }
    }
    Ok(())
}

/// A manager as the server's conflict message names it: an applier by
/// its name, an updater with the apiVersion it wrote, either with its
/// subresource.
fn manager_text(e: &Entry) -> String {
    let mut out = format!("{:?}", e.manager);
    if let Some(s) = &e.subresource {
        out.push_str(&format!(" with subresource {s:?}"));
    }
    if e.operation == "Update" {
        out.push_str(&format!(" using {}", e.api_version));
    }
    out
}

/// The server's 409 for an apply that would change others' fields, in its
/// words (`Apply failed with 1 conflict: conflict with "m": .data.a`).
fn conflict(what: &str, conflicts: &[(&Entry, Set)]) -> ActionError {
    let count: usize = conflicts.iter().map(|(_, c)| c.len()).sum();
    let message = match conflicts {
        [(e, paths)] if paths.len() == 1 => format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            manager_text(e),
            paths.iter().map(fields::path_text).collect::<String>()
        ),
        _ => {
            let mut by_manager: Vec<(String, &Set)> = conflicts
                .iter()
                .map(|(e, paths)| (manager_text(e), paths))
                .collect();
            by_manager.sort_by(|a, b| a.0.cmp(&b.0));
            let lines: Vec<String> = by_manager
                .iter()
                .flat_map(|(m, paths)| {
                    std::iter::once(format!("conflicts with {m}:"))
                        .chain(paths.iter().map(|p| format!("- {}", fields::path_text(p))))
                })
                .collect();
            format!("Apply failed with {count} conflicts: {}", lines.join("\n"))
        }
    };
    ActionError::Conflict(ActionError::server_words(what, &message, "Conflict"))
}

/// The index of `writer`'s entry for `operation`, added when it has none.
fn entry_of(owners: &mut Vec<Entry>, w: &Writer<'_>, operation: &str) -> usize {
    if let Some(i) = owners
        .iter()
        .position(|e| e.is(w.manager, operation, w.subresource))
    {
        return i;
    }
    owners.push(Entry {
        manager: w.manager.to_string(),
        operation: operation.to_string(),
        subresource: w.subresource.map(str::to_string),
        api_version: w.api_version.clone(),
        time: None,
        fields: Set::new(),
    });
    owners.len() - 1
}

/// The managers of `live` (its managed fields; without any, everything
/// it has owned by [`BEFORE_FIRST_APPLY`]).
fn owners_of(ty: Ty<'_>, w: &Writer<'_>, live: &Value, clean: &Value, part: Part) -> Vec<Entry> {
    entries(live).unwrap_or_else(|| {
        let fields = fields::strip(part.fields(ty, clean).into_keys().collect());
        vec![Entry {
            manager: BEFORE_FIRST_APPLY.into(),
            operation: "Update".into(),
            subresource: None,
            api_version: w.api_version.clone(),
            time: Some(w.time.clone()),
            fields,
        }]
    })
}

/// Removes from `merged` what the applier owned before (`last`) and no
/// longer does, where no manager owns it (the applier's new paths
/// counted, its object's identity included).
fn prune(ty: Ty<'_>, merged: &mut Value, owners: &[Entry], applied: &Set, last: &Set) {
    if last.is_empty() {
        return;
    }
    let mut owned: Set = applied.clone();
    owned.extend(owners.iter().flat_map(|e| e.fields.iter().cloned()));
    let owned = fields::with_parents(&owned);
    let gone: Set = fields::with_parents(last)
        .difference(&owned)
        .cloned()
        .collect();
    merge::remove_all(ty, merged, &gone);
}

/// `body` applied by `w` over `live` (`None`: the apply creates the
/// object): the object to store, its managedFields updated. Only the
/// `part` of the body the write may change counts.
pub fn apply(
    ty: Ty<'_>,
    w: &Writer<'_>,
    live: Option<&Value>,
    body: &Value,
    force: bool,
    part: Part,
    what: &str,
) -> Result<Value, ActionError> {
    let clean = live.map_or_else(|| json!({}), without_managed);
    let mut owners = match live {
        Some(l) => owners_of(ty, w, l, &clean, part),
        None => Vec::new(),
    };
    let config = part.restrict(body);
    let applied: Set = part.fields(ty, &config).into_keys().collect();
    let mut merged = merge::merge(ty, Some(&clean), &config);
    let me = entry_of(&mut owners, w, "Apply");
    let last = std::mem::replace(&mut owners[me].fields, fields::strip(applied.clone()));
    prune(ty, &mut merged, &owners, &applied, &last);
    let diff = Diff::of(&part.fields(ty, &clean), &part.fields(ty, &merged));
    take_over(&mut owners, me, &diff, force, what)?;
    if !diff.is_empty() || owners[me].time.is_none() {
        owners[me].time = Some(w.time.clone());
    }
    store(&mut merged, owners);
    Ok(merged)
}

/// Records a patch by `w` (operation `Update`) that made `next` of
/// `stored`: it owns what it changed, taken from the others. An object
/// without managed fields stays without (the server starts tracking at
/// the first apply or create).
pub fn record_update(ty: Ty<'_>, w: &Writer<'_>, stored: &Value, next: &mut Value, part: Part) {
    let Some(mut owners) = entries(stored) else {
        if let Some(m) = next.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("managedFields");
        }
        return;
    };
    let diff = Diff::of(
        &part.fields(ty, &without_managed(stored)),
        &part.fields(ty, &without_managed(next)),
    );
    if diff.is_empty() {
        store(next, owners);
        return;
    }
    let me = entry_of(&mut owners, w, "Update");
    // Forced: an update never conflicts.
    if take_over(&mut owners, me, &diff, true, "").is_ok() {
        let mine = &mut owners[me];
        mine.fields.retain(|p| !diff.removed.contains(p));
        mine.fields.extend(diff.changed());
        mine.time = Some(w.time.clone());
        mine.api_version = w.api_version.clone();
    }
    store(next, owners);
}
