//! Where a write's result is validated before it is stored: every create
//! and every update that changes something passes through
//! [`Validate::validate`] in [`super::write`]. The simulations check with
//! [`OpenApi`]: built-in kinds as the target API server validates them
//! ([`crate::openapi`]), so a fixture cannot pass where a cluster refuses.

use serde_json::Value;

use crate::actions::executor::ActionError;
use crate::kind::KindInfo;
use crate::openapi::{self, Write};

/// One write to check, as the simulated server is about to store it.
#[derive(Debug, Clone, Copy)]
pub struct Check<'a> {
    /// The request, as errors name it (`patch configmaps a/b`).
    pub what: &'a str,
    pub kind: &'a KindInfo,
    /// How the body came: the server decodes and answers per verb.
    pub write: Write,
    /// A write of the status subresource.
    pub status: bool,
    /// The stored object, for an update.
    pub old: Option<&'a Value>,
    /// The object the write makes.
    pub new: &'a Value,
    /// A custom resource's structural schema, from its CRD.
    pub schema: Option<&'a Value>,
}

/// Checks an object the simulated server is about to store.
pub trait Validate: Send + Sync {
    /// `Ok` to store `check.new`; otherwise the server's answer, an
    /// [`ActionError::Invalid`] naming the request and the fields.
    fn validate(&self, check: &Check<'_>) -> Result<(), ActionError>;
}

/// Accepts everything: for unit tests of the write path's other rules.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoValidation;

impl Validate for NoValidation {
    fn validate(&self, _check: &Check<'_>) -> Result<(), ActionError> {
        Ok(())
    }
}

/// Built-in kinds validated as kube-apiserver 1.35.8 validates them
/// ([`crate::openapi`]); custom resources against their CRD's schema
/// where the cluster holds it ([`openapi::custom`]), passing otherwise.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenApi;

impl Validate for OpenApi {
    fn validate(&self, check: &Check<'_>) -> Result<(), ActionError> {
        let gvk = &check.kind.gvk;
        if let Some(schema) = check.schema {
            return openapi::custom::validate(gvk, schema, check.new).map_err(|refusal| {
                let status = refusal.status();
                ActionError::Invalid(ActionError::server_words(
                    check.what,
                    &status.message,
                    &status.reason,
                ))
            });
        }
        let result = match check.old {
            Some(old) if check.status => {
                openapi::validate_status_update(gvk, old, check.new, check.write)
            }
            Some(old) => openapi::validate_update(gvk, old, check.new, check.write),
            None => openapi::validate_create(gvk, check.new, check.write),
        };
        result.map_err(|refusal| {
            let status = refusal.status();
            // As the host's sink reads the real server's answer: an apply
            // body that does not fit the schema comes back as a 500 there.
            if status.code == 500 && check.write == Write::Apply {
                ActionError::apply_body_untyped(check.what, &status.message)
            } else {
                ActionError::Invalid(ActionError::server_words(
                    check.what,
                    &status.message,
                    &status.reason,
                ))
            }
        })
    }
}
