//! The simulated API server's write path, shared by `kubewasm test`'s
//! cluster (`testing::cluster`) and the embedded local cluster
//! (`source::local`): given an action and the stored object, what the API
//! server answers and what it stores. Each simulation keeps only its own
//! storage (memory, a folder of manifests), its resourceVersion counter
//! and how it tells watchers; the server's rules live here, one file each,
//! and `tests/tests/sim_server.rs` holds them to a real API server:
//!
//! - [`preconditions`]: a uid or resourceVersion in the request options or
//!   in the body (apply, merge patch, JSON patch result) is a precondition;
//!   a JSON patch's `test` operations are evaluated.
//! - [`status`]: kinds with a status subresource: main-resource writes keep
//!   the stored status, status writes change only the status.
//! - [`meta`]: the fields the server owns (uid, creationTimestamp,
//!   deletion fields, generation) are carried over every write; generation
//!   moves on spec changes, for kinds that have one.
//! - [`deletion`]: finalizers hold a delete (deletionTimestamp, which no
//!   later write removes), no new finalizer on a terminating object, the
//!   last finalizer removed deletes it; Pods bound to a node are deleted
//!   gracefully.
//! - A write that changes nothing stores nothing ([`Outcome::Unchanged`]):
//!   no new resourceVersion, no watch event.
//! - [`apply`]: server-side apply merges by the kind's schema
//!   ([`merge`], [`fields`]) and keeps who owns which field in
//!   `metadata.managedFields`: a field its manager no longer applies is
//!   removed, another manager's is a conflict unless forced; a patch takes
//!   the fields it changes.
//! - [`validate`]: the result validated before it is stored (built-in
//!   kinds from the target release's OpenAPI schemas, custom resources
//!   from their CRD's schema, which also prunes what it does not declare).

pub mod apply;
pub mod deletion;
pub mod fields;
pub mod gc;
pub mod merge;
pub mod meta;
pub mod preconditions;
pub mod status;
pub mod validate;

use std::time::SystemTime;

use serde_json::{Value, json};

use crate::actions::executor::ActionError;
use crate::actions::{Action, PatchType, Target};
use crate::kind::KindRegistry;
use crate::openapi::Write;

pub use validate::{Check, NoValidation, OpenApi, Validate};

/// What a write does to the stored object.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Nothing changed: nothing is stored, the resourceVersion stays and
    /// no watcher hears of it.
    Unchanged,
    /// The object's new state (created or updated), with the server's
    /// fields set; the storage gives it its next resourceVersion.
    Put(Value),
    /// The object is deleted; its last state.
    Gone(Value),
}

/// What the write path needs from the simulation that runs it.
pub struct Context<'a> {
    pub kinds: &'a KindRegistry,
    /// The server's clock (virtual in `kubewasm test`).
    pub now: SystemTime,
    /// Whether a garbage collector runs to finish foreground and orphan
    /// deletions: only then does a delete add its finalizer (without one,
    /// the object would wait forever where a cluster's collector would
    /// finish it).
    pub garbage_collector: bool,
    /// Checks a write's result before it is stored.
    pub validator: &'a dyn Validate,
    /// The field manager the write is recorded under in managedFields
    /// (the sink's `kubewasm/<plugin>` for a plugin's writes).
    pub manager: &'a str,
}

impl Context<'_> {
    /// `now` as the server writes timestamps.
    pub fn timestamp(&self) -> String {
        timestamp(self.now)
    }

    /// The write's manager, as managedFields records it.
    fn writer(&self, target: &Target, subresource: Option<&'static str>) -> apply::Writer<'_> {
        apply::Writer {
            manager: self.manager,
            subresource,
            api_version: target.kind.gvk.api_version(),
            time: self.timestamp(),
        }
    }
}

/// A time as the API server writes it (RFC 3339, seconds).
pub fn timestamp(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

/// Carries out `action` over `stored` (`None`: no such object) as the API
/// server would; `new_uid` draws the uid of an object it creates. Events
/// change no object: [`Outcome::Unchanged`].
pub fn write(
    ctx: &Context<'_>,
    action: &Action,
    stored: Option<&Value>,
    new_uid: &mut dyn FnMut() -> Result<String, ActionError>,
) -> Result<Outcome, ActionError> {
    let target = action.target();
    let what = format!("{} {target}", action.verb());
    let has_status = status::has_subresource(ctx.kinds, &target.kind.gvk);
    // A custom resource's schema, from its CRD: read once for the request.
    let schema = ctx.kinds.crd_schema(&target.kind.gvk);
    let req = Request {
        what: &what,
        target,
        has_status,
        schema: schema.as_deref(),
    };
    if let Action::Apply { object, .. } = action {
        fits_schema(&req, object)?;
    }
    // Its merge types, which outlive the write's Ty.
    let crd_schema = match fields::Ty::builtin(&target.kind.gvk) {
        Some(_) => None,
        None => req.schema.and_then(fields::crd_schema),
    };
    let ty = fields::Ty::builtin(&target.kind.gvk)
        .unwrap_or_else(|| fields::Ty::custom(crd_schema.as_ref()));
    // What the resource's own writes own: all but a subresource's status.
    let main = if has_status {
        apply::Part::Main
    } else {
        apply::Part::Whole
    };
    match action {
        Action::Event { .. } => Ok(Outcome::Unchanged),
        Action::Delete { propagation, .. } => {
            let stored = stored.ok_or_else(|| not_found(&what, target))?;
            preconditions::check_options(&what, target, stored)?;
            Ok(deletion::delete(
                ctx.now,
                ctx.garbage_collector,
                stored,
                *propagation,
            ))
        }
        Action::Apply {
            object,
            status: true,
            force,
            ..
        } => {
            if !has_status {
                return Err(status::no_subresource(&what, target));
            }
            let stored = stored.ok_or_else(|| not_found(&what, target))?;
            let mut body = object.clone();
            target.preconditions.embed_in(&mut body);
            preconditions::check_body(&what, target, Some(stored), &body)?;
            let writer = ctx.writer(target, Some("status"));
            let next = apply::apply(
                ty,
                &writer,
                Some(stored),
                &body,
                *force,
                apply::Part::Status,
                &what,
            )?;
            settle(ctx, &req, stored, next, Scope::Status, Write::Apply)
        }
        Action::Apply { object, force, .. } => {
            let mut body = object.clone();
            target.preconditions.embed_in(&mut body);
            preconditions::check_body(&what, target, stored, &body)?;
            let writer = ctx.writer(target, None);
            let next = apply::apply(ty, &writer, stored, &body, *force, main, &what)?;
            match stored {
                None => create(ctx, &req, next, new_uid),
                Some(stored) => settle(ctx, &req, stored, next, Scope::Main, Write::Apply),
            }
        }
        Action::Patch {
            patch_type, patch, ..
        } => {
            let stored = stored.ok_or_else(|| not_found(&what, target))?;
            let mut next = match patch_type {
                PatchType::Merge => {
                    let mut body = patch.clone();
                    target.preconditions.embed_in(&mut body);
                    let mut next = stored.clone();
                    json_patch::merge(&mut next, &body);
                    next
                }
                PatchType::Json => preconditions::json_patch(&what, target, stored, patch)?,
            };
            preconditions::check_body(&what, target, Some(stored), &next)?;
            let writer = ctx.writer(target, None);
            apply::record_update(ty, &writer, stored, &mut next, main);
            settle(ctx, &req, stored, next, Scope::Main, Write::Patch)
        }
    }
}

/// One request as the write path's steps share it.
struct Request<'a> {
    /// As errors name it (`patch configmaps a/b`).
    what: &'a str,
    target: &'a Target,
    /// The kind has a status subresource.
    has_status: bool,
    /// A custom resource's schema, from its CRD.
    schema: Option<&'a Value>,
}

/// A new object from an applied body: the server's fields set, its status
/// dropped where a status subresource owns it.
fn create(
    ctx: &Context<'_>,
    req: &Request<'_>,
    mut value: Value,
    new_uid: &mut dyn FnMut() -> Result<String, ActionError>,
) -> Result<Outcome, ActionError> {
    let Request { what, target, .. } = *req;
    if req.has_status
        && let Some(o) = value.as_object_mut()
    {
        o.remove("status");
    }
    prune(req, &mut value);
    let uid = new_uid()?;
    meta::create(ctx, &target.kind.gvk, &mut value, uid);
    if let Some(ns) = &target.namespace
        && let Some(m) = value.get_mut("metadata").and_then(Value::as_object_mut)
    {
        m.insert("namespace".into(), json!(ns));
    }
    ctx.validator.validate(&Check {
        what,
        kind: &target.kind,
        write: Write::Apply,
        status: false,
        old: None,
        new: &value,
        schema: req.schema,
    })?;
    Ok(Outcome::Put(value))
}

/// Which part of an object a write goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    /// The resource itself (its status kept where a subresource owns it).
    Main,
    /// The status subresource (the rest already kept by the caller).
    Status,
}

/// An update's result as the server stores it: the stored status kept
/// where a status subresource owns it, the server's fields carried, the
/// terminating-object rules, nothing stored when nothing changed, the
/// object gone when its last finalizer went.
fn settle(
    ctx: &Context<'_>,
    req: &Request<'_>,
    stored: &Value,
    mut next: Value,
    scope: Scope,
    write: Write,
) -> Result<Outcome, ActionError> {
    let Request { what, target, .. } = *req;
    if req.has_status && scope == Scope::Main {
        status::keep_stored(stored, &mut next);
    }
    deletion::check_no_new_finalizers(what, stored, &next)?;
    prune(req, &mut next);
    meta::carry(&target.kind.gvk, stored, &mut next, req.has_status);
    if next == *stored {
        return Ok(Outcome::Unchanged);
    }
    if deletion::finalized(&next) {
        return Ok(Outcome::Gone(next));
    }
    ctx.validator.validate(&Check {
        what,
        kind: &target.kind,
        write,
        status: scope == Scope::Status,
        old: Some(stored),
        new: &next,
        schema: req.schema,
    })?;
    Ok(Outcome::Put(next))
}

/// A custom resource's apply body against its CRD's schema: the server's
/// structured merge cannot type a body that does not fit (a 500 there,
/// which the host reads as invalid).
fn fits_schema(req: &Request<'_>, body: &Value) -> Result<(), ActionError> {
    let Some(schema) = req.schema else {
        return Ok(());
    };
    crate::openapi::custom::check_apply(schema, body).map_err(|e| {
        let target = req.target;
        let gvk = &target.kind.gvk;
        ActionError::apply_body_untyped(
            req.what,
            &format!(
                "failed to create typed patch object (/{}; {}, Kind={}): {}",
                target.name,
                gvk.api_version(),
                gvk.kind,
                e.0
            ),
        )
    })
}

/// The server's pruning of what a custom resource's schema does not
/// declare.
fn prune(req: &Request<'_>, value: &mut Value) {
    if let Some(schema) = req.schema {
        crate::openapi::custom::prune(schema, value);
    }
}

fn not_found(what: &str, target: &Target) -> ActionError {
    ActionError::NotFound(format!(
        "{what}: {} {:?} not found (NotFound)",
        target.kind.resource_name(),
        target.name
    ))
}

#[cfg(test)]
mod tests;
