//! `--dry-run`: what would be sent, logged instead of sent.

use crate::actions::{Action, PatchType};
use crate::redact::Redactor;

/// `--dry-run`'s line for an action: what would be sent, body included
/// (an apply's object as it would go, with its preconditions; a patch's
/// patch; an Event's note).
pub(super) fn dry_run(plugin: &str, action: &Action, redactor: &Redactor) {
    match action {
        Action::Apply { target, object, .. } => {
            let g = &target.kind.gvk;
            let mut body = object.clone();
            target.preconditions.embed_in(&mut body);
            redactor.redact(&g.api_version(), &g.kind, &mut body);
            tracing::info!(plugin, action = %action.summary(), body = %body, "dry run: not sending (server-side apply)");
        }
        Action::Patch {
            target,
            patch_type: PatchType::Merge,
            patch,
        } => {
            let g = &target.kind.gvk;
            let mut body = patch.clone();
            target.preconditions.embed_in(&mut body);
            redactor.redact(&g.api_version(), &g.kind, &mut body);
            tracing::info!(plugin, action = %action.summary(), body = %body, "dry run: not sending (merge patch)");
        }
        Action::Patch {
            target,
            patch_type: PatchType::Json,
            patch,
        } => {
            let g = &target.kind.gvk;
            let mut ops = target.preconditions.json_patch_ops();
            ops.extend(patch.as_array().into_iter().flatten().cloned());
            let mut body = serde_json::Value::Array(ops);
            redactor.json_patch(&g.api_version(), &g.kind, &mut body);
            tracing::info!(plugin, action = %action.summary(), body = %body, "dry run: not sending (JSON patch)");
        }
        Action::Delete { .. } | Action::Event { .. } => {
            tracing::info!(plugin, action = %action, "dry run: not sending");
        }
    }
}
