//! Buffered actions: each checked against the registration's writes and
//! the grant, the call's action caps and the API server's request size,
//! then held until the call returns.

use serde_json::Value;

use super::{HostState, ObjRef, WriteError};
use crate::actions::{Action, EventType, PatchType, Preconditions, Propagation, Target};
use crate::kind::{Gvk, KindRef};
use crate::runtime::access::Verb;
use crate::runtime::limits::Cap;

/// The largest request body the API server accepts (its
/// `MaxRequestBodyBytes`, 3 MiB): an action larger than this could never
/// be executed, so it is refused before it is parsed.
const MAX_REQUEST_BYTES: usize = 3 << 20;
impl HostState {
    /// Buffers an action of the current call; over `limits.actionsPerCall`
    /// the guest gets an error and the call fails.
    fn push_action(&mut self, action: Action) -> Result<(), WriteError> {
        if self.actions.len() >= self.caps.actions_per_call {
            let e = self.exceeded(Cap::ActionsPerCall);
            return Err(WriteError::Invalid(format!("plugin exceeded {e}")));
        }
        self.actions.push(action);
        Ok(())
    }

    /// Counts `json`, an applied object or a patch, against the call's
    /// `limits.actionBytesPerCall` before it is parsed (parsed JSON takes
    /// several times its text in host memory), and refuses one larger than
    /// the API server accepts in a request.
    fn charge_action_bytes(&mut self, what: &str, json: &str) -> Result<(), WriteError> {
        if json.len() > MAX_REQUEST_BYTES {
            return Err(WriteError::Invalid(format!(
                "{what} is {} bytes; the API server refuses requests over {MAX_REQUEST_BYTES} bytes",
                json.len()
            )));
        }
        self.action_bytes = self.action_bytes.saturating_add(json.len() as u64);
        if self.action_bytes > self.caps.action_bytes_per_call {
            let e = self.exceeded(Cap::ActionBytesPerCall);
            return Err(WriteError::Invalid(format!("plugin exceeded {e}")));
        }
        Ok(())
    }

    /// The checked target of `verb`: a write verb needs the kind in the
    /// registration's writes; every verb needs the sidecar's grant for the
    /// object's namespace.
    fn target(
        &mut self,
        r: ObjRef,
        verb: Verb,
        preconditions: Preconditions,
    ) -> Result<Target, WriteError> {
        let scope = self.scope().map_err(WriteError::Invalid)?;
        let kind = self.resolve(&scope, &r.kind).map_err(WriteError::Invalid)?;
        if verb != Verb::Events && !scope.writes.contains(&kind.gvk) {
            return Err(WriteError::NotDeclared(format!(
                "{} is not in this plugin's registration writes",
                kind.resource_name()
            )));
        }
        if r.name.is_empty() {
            return Err(WriteError::Invalid("object name is empty".into()));
        }
        let namespace = r.namespace.filter(|n| !n.is_empty());
        if kind.namespaced != namespace.is_some() {
            return Err(WriteError::Invalid(format!(
                "{} is {}, so a namespace must {}be given",
                kind.resource_name(),
                if kind.namespaced {
                    "namespaced"
                } else {
                    "cluster-scoped"
                },
                if kind.namespaced { "" } else { "not " }
            )));
        }
        crate::names::validate_object(&kind.gvk.kind, namespace.as_deref(), &r.name).map_err(
            |e| {
                WriteError::Invalid(format!(
                    "{} {}{}: {e}",
                    kind.resource_name(),
                    namespace
                        .as_deref()
                        .map(|n| format!("{}/", crate::names::excerpt(n)))
                        .unwrap_or_default(),
                    crate::names::excerpt(&r.name)
                ))
            },
        )?;
        self.granted(&scope, &kind, verb, namespace.as_deref())
            .map_err(WriteError::Forbidden)?;
        Ok(Target {
            kind,
            namespace,
            name: r.name,
            uid: r.uid,
            preconditions,
        })
    }

    /// Buffers a server-side apply of `object_json`.
    #[tracing::instrument(level = "debug", skip_all, fields(plugin = %self.plugin, kind = tracing::field::Empty, namespace = tracing::field::Empty, name = tracing::field::Empty))]
    pub(in crate::runtime) fn apply_action(
        &mut self,
        object_json: &str,
        force: bool,
        status: bool,
        preconditions: Preconditions,
    ) -> Result<(), WriteError> {
        self.charge_action_bytes("the applied object", object_json)?;
        let object: Value = serde_json::from_str(object_json)
            .map_err(|e| WriteError::Invalid(format!("object is not valid JSON: {e}")))?;
        let field = |p: &str| object.pointer(p).and_then(Value::as_str).map(str::to_owned);
        let (Some(api_version), Some(kind), Some(name)) = (
            field("/apiVersion"),
            field("/kind"),
            field("/metadata/name"),
        ) else {
            return Err(WriteError::Invalid(
                "an applied object needs apiVersion, kind and metadata.name".into(),
            ));
        };
        let span = tracing::Span::current();
        span.record("kind", kind.as_str());
        span.record("namespace", field("/metadata/namespace").as_deref());
        span.record("name", name.as_str());
        let target = self.target(
            ObjRef {
                kind: KindRef::Gvk(Gvk::from_api_version(&api_version, &kind)),
                namespace: field("/metadata/namespace"),
                name,
                uid: None,
            },
            if status { Verb::Status } else { Verb::Apply },
            preconditions,
        )?;
        self.push_action(Action::Apply {
            target,
            object,
            force,
            status,
        })
    }

    /// Buffers a patch; its JSON must fit its type.
    #[tracing::instrument(level = "debug", skip_all, fields(plugin = %self.plugin, kind = ?target.kind, namespace = target.namespace.as_deref(), name = %target.name))]
    pub(in crate::runtime) fn patch_action(
        &mut self,
        target: ObjRef,
        patch_type: PatchType,
        patch: &str,
        preconditions: Preconditions,
    ) -> Result<(), WriteError> {
        let target = self.target(target, Verb::Patch, preconditions)?;
        self.charge_action_bytes("the patch", patch)?;
        let patch: Value = serde_json::from_str(patch)
            .map_err(|e| WriteError::Invalid(format!("patch is not valid JSON: {e}")))?;
        match patch_type {
            PatchType::Merge if !patch.is_object() => {
                return Err(WriteError::Invalid(
                    "a merge patch must be a JSON object".into(),
                ));
            }
            PatchType::Json if !patch.is_array() => {
                return Err(WriteError::Invalid(
                    "a JSON patch must be an array of operations".into(),
                ));
            }
            _ => {}
        }
        self.push_action(Action::Patch {
            target,
            patch_type,
            patch,
        })
    }

    /// Buffers a delete.
    #[tracing::instrument(level = "debug", skip_all, fields(plugin = %self.plugin, kind = ?target.kind, namespace = target.namespace.as_deref(), name = %target.name))]
    pub(in crate::runtime) fn delete_action(
        &mut self,
        target: ObjRef,
        propagation: Propagation,
        preconditions: Preconditions,
    ) -> Result<(), WriteError> {
        let target = self.target(target, Verb::Delete, preconditions)?;
        self.push_action(Action::Delete {
            target,
            propagation,
        })
    }

    /// Buffers an Event about `regarding`.
    #[tracing::instrument(level = "debug", skip_all, fields(plugin = %self.plugin, kind = ?regarding.kind, namespace = regarding.namespace.as_deref(), name = %regarding.name))]
    pub(in crate::runtime) fn event_action(
        &mut self,
        regarding: ObjRef,
        event_type: EventType,
        reason: String,
        note: String,
    ) -> Result<(), WriteError> {
        if reason.is_empty() || reason.len() > 128 {
            return Err(WriteError::Invalid(
                "an Event reason must be 1 to 128 characters (UpperCamelCase by convention)".into(),
            ));
        }
        let regarding = self.target(regarding, Verb::Events, Preconditions::default())?;
        self.push_action(Action::Event {
            regarding,
            event_type,
            reason,
            // The API server caps Event notes at 1 KiB.
            note: note.chars().take(1024).collect(),
            reporter: self.reporter.clone(),
        })
    }
}
