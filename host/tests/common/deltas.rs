//! What an informer subscription delivered, as short strings, for the
//! tests that drive an informer against the mock API server.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use kubewasm::informer::Delta;
use tokio::sync::mpsc;

/// `Added a@5 initial`, `Updated b@8 old=b@6`, `Deleted b@6 unknown`...
pub fn describe(d: &Delta) -> String {
    let obj = |o: &Option<kubewasm::object::ObjectHandle>| {
        o.as_ref()
            .map(|o| format!("{}@{}", o.name(), o.meta().resource_version))
            .unwrap_or_default()
    };
    let mut s = format!("{:?} {}", d.dtype, obj(&d.object));
    if d.old.is_some() {
        s = format!("{s} old={}", obj(&d.old));
    }
    if d.initial {
        s.push_str(" initial");
    }
    if d.final_state_unknown {
        s.push_str(" unknown");
    }
    s.trim_end().to_owned()
}

/// The next `n` deltas, described; fails after 30 s without them.
pub async fn take(rx: &mut mpsc::UnboundedReceiver<Delta>, n: usize) -> Vec<String> {
    let mut out = Vec::new();
    while out.len() < n {
        let d = tokio::time::timeout(Duration::from_secs(30), rx.recv())
            .await
            .unwrap_or_else(|_| panic!("only {out:?} within 30s"))
            .unwrap();
        out.push(describe(&d));
    }
    out
}

/// Fails if another delta arrives within 300 ms.
pub async fn no_more(rx: &mut mpsc::UnboundedReceiver<Delta>) {
    if let Ok(Some(d)) = tokio::time::timeout(Duration::from_millis(300), rx.recv()).await {
        panic!("unexpected delta {}", describe(&d));
    }
}
