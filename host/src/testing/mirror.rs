//! A second cluster a fixture's cases can be mirrored into, beside the
//! simulated one: the conformance suite's real API server. It sees every
//! object the simulated cluster stores as a case says (its cache, a step's
//! delta), every object a step deletes, and each action the plugin emits
//! with the simulation's answer and the object after it, so that it can
//! put the same into the real server and compare.

use std::path::Path;
use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::Value;

use crate::actions::Action;
use crate::actions::executor::ActionError;

/// What a mirror is told.
pub trait Mirror: Send + Sync {
    /// A case of `file` begins: a world of its own.
    fn begin_case(&self, file: &Path, case: &str);
    /// The simulated cluster stored `object` as the case says.
    fn put(&self, object: &Value);
    /// The simulated cluster deleted `object` as the case says.
    fn removed(&self, object: &Value);
    /// The plugin's `action`, the simulation's `answer`, and the object
    /// the simulation holds after it (`None`: none).
    fn action<'a>(
        &'a self,
        action: &'a Action,
        answer: &'a Result<(), ActionError>,
        after: Option<Value>,
    ) -> BoxFuture<'a, ()>;
}

/// A mirror as [`super::Options`] carries it.
#[derive(Clone)]
pub struct MirrorHandle(pub Arc<dyn Mirror>);

impl std::fmt::Debug for MirrorHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MirrorHandle")
    }
}
