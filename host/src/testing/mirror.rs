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
pub use crate::testing::cluster::Change;

/// What a mirror is told.
pub trait Mirror: Send + Sync {
    /// A case of `file` begins: a world of its own.
    fn begin_case(&self, file: &Path, case: &str);
    /// The simulated cluster stored `object` as the case says.
    fn put(&self, object: &Value);
    /// The simulated cluster deleted `object` as the case says.
    fn removed(&self, object: &Value);
    /// The plugin's `action`, the simulation's `answer` and what it holds
    /// after it.
    fn action<'a>(
        &'a self,
        action: &'a Action,
        answer: &'a Result<(), ActionError>,
        after: After,
    ) -> BoxFuture<'a, ()>;
}

/// The simulation after an action.
#[derive(Debug, Clone, Default)]
pub struct After {
    /// The target (`None`: there is none).
    pub target: Option<Value>,
    /// What the action and the garbage collector after it changed, in
    /// order (what a watch would report; empty for a write that changed
    /// nothing).
    pub changed: Vec<Change>,
    /// Every object the cluster holds, when something was deleted (what
    /// the garbage collector may have acted on); empty otherwise.
    pub world: Vec<Value>,
}

/// A mirror as [`super::Options`] carries it.
#[derive(Clone)]
pub struct MirrorHandle(pub Arc<dyn Mirror>);

impl std::fmt::Debug for MirrorHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MirrorHandle")
    }
}
