//! The shutdown signal `run` and `record` wait for.

/// SIGTERM and Ctrl-C, registered once at the start of `run`: a signal
/// that arrives while the host is still starting is then held for it
/// (under the default action it would kill the host mid-start, exit
/// status "signal 15") and acted on as soon as startup is done.
pub(crate) struct ShutdownSignal {
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
}

impl ShutdownSignal {
    pub(crate) fn install() -> Self {
        Self {
            #[cfg(unix)]
            term: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok(),
        }
    }

    pub(crate) async fn recv(&mut self) {
        let ctrl_c = tokio::signal::ctrl_c();
        #[cfg(unix)]
        if let Some(term) = self.term.as_mut() {
            tokio::select! {
                _ = ctrl_c => {}
                _ = term.recv() => {}
            }
            return;
        }
        let _ = ctrl_c.await;
    }
}
