//! A sink that records actions instead of executing them.

use futures::future::BoxFuture;
use parking_lot::Mutex;

use super::{ActionError, ActionSink};
use crate::actions::Action;

/// Records actions instead of executing them: for fixture tests and
/// `--dry-run`-style inspection.
#[derive(Debug, Default)]
pub struct RecordingSink {
    actions: Mutex<Vec<(String, Action)>>,
}

impl RecordingSink {
    pub fn take(&self) -> Vec<(String, Action)> {
        std::mem::take(&mut *self.actions.lock())
    }
}

impl ActionSink for RecordingSink {
    fn execute<'a>(
        &'a self,
        plugin: &'a str,
        action: &'a Action,
    ) -> BoxFuture<'a, Result<(), ActionError>> {
        self.actions
            .lock()
            .push((plugin.to_owned(), action.clone()));
        Box::pin(async { Ok(()) })
    }
}
