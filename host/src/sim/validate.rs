//! Where a write's result is validated before it is stored: the hook for
//! checking objects against the OpenAPI schema of the Kubernetes version
//! the host targets (required fields, types, immutable fields). Every
//! create and every update that changes something passes through
//! [`Validate::validate`] in [`super::write`]; no check is made yet
//! ([`NoValidation`]), so a simulation answers success where the server's
//! validation would answer 422.

use serde_json::Value;

use crate::actions::executor::ActionError;
use crate::kind::KindInfo;

/// Checks an object the simulated server is about to store.
pub trait Validate: Send + Sync {
    /// `Ok` to store `new` (an object of `kind`; `old` is the stored one
    /// for an update); otherwise the server's answer, an
    /// [`ActionError::Invalid`] (422) naming `what` (`patch configmaps a/b`)
    /// and the field.
    fn validate(
        &self,
        what: &str,
        kind: &KindInfo,
        old: Option<&Value>,
        new: &Value,
    ) -> Result<(), ActionError>;
}

/// Accepts everything: what the simulations use until schema validation
/// exists.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoValidation;

impl Validate for NoValidation {
    fn validate(
        &self,
        _what: &str,
        _kind: &KindInfo,
        _old: Option<&Value>,
        _new: &Value,
    ) -> Result<(), ActionError> {
        Ok(())
    }
}
