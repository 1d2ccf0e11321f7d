//! Each Plugin object's reconciles run off the watch loop, one at a time
//! per object: a registry that stalls or trickles delays only the objects
//! that name it, never the watch, the status of other objects, or their
//! unloads. While one runs, the newest request for the same object waits
//! (merged with the one it replaces), as a controller's work queue keeps
//! one item per key, so a delete can never be overtaken by an older load.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;

use futures::future::BoxFuture;
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// What runs one item of a key.
pub type Run<K, T> = Arc<dyn Fn(K, T) -> BoxFuture<'static, ()> + Send + Sync>;

/// Per key: one item running, at most one waiting.
pub struct Keyed<K, T> {
    /// Present while the key's task runs; the item waiting after it.
    running: Arc<Mutex<HashMap<K, Option<T>>>>,
    merge: fn(T, T) -> T,
    tasks: TaskTracker,
    cancel: CancellationToken,
}

impl<K, T> Keyed<K, T>
where
    K: Eq + Hash + Clone + Send + 'static,
    T: Send + 'static,
{
    /// `merge(waiting, newer)` is what waits when a newer item comes for a
    /// key whose earlier one still waits. Tasks end at `cancel`.
    pub fn new(merge: fn(T, T) -> T, cancel: CancellationToken) -> Self {
        Self {
            running: Arc::default(),
            merge,
            tasks: TaskTracker::new(),
            cancel,
        }
    }

    /// Runs `item` for `key` now, or after the item running for it.
    pub fn submit(&self, key: K, item: T, run: &Run<K, T>) {
        {
            let mut running = self.running.lock();
            if let Some(waiting) = running.get_mut(&key) {
                *waiting = Some(match waiting.take() {
                    Some(earlier) => (self.merge)(earlier, item),
                    None => item,
                });
                return;
            }
            running.insert(key.clone(), None);
        }
        let (running, cancel, run) = (self.running.clone(), self.cancel.clone(), run.clone());
        self.tasks.spawn(async move {
            let mut item = item;
            loop {
                tokio::select! {
                    biased;
                    () = cancel.cancelled() => return,
                    () = run(key.clone(), item) => {}
                }
                let mut all = running.lock();
                match all.get_mut(&key).and_then(Option::take) {
                    Some(next) => item = next,
                    None => {
                        all.remove(&key);
                        return;
                    }
                }
            }
        });
    }

    /// The keys whose item runs or waits.
    pub fn keys(&self) -> Vec<K> {
        self.running.lock().keys().cloned().collect()
    }

    /// Waits for every task to end (after the cancel token fired, they
    /// stop at once).
    pub async fn stopped(&self) {
        self.tasks.close();
        self.tasks.wait().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;
    use tokio::sync::{Semaphore, mpsc};

    /// Items run per key in order, newer ones merged while one runs, and a
    /// key stuck in its run holds no other key.
    #[tokio::test]
    async fn one_item_per_key_runs_others_are_not_held() {
        let gate = Arc::new(Semaphore::new(0));
        let (tx, mut rx) = mpsc::unbounded_channel();
        let run: Run<&'static str, Vec<u32>> = {
            let gate = gate.clone();
            Arc::new(move |key, items| {
                let (gate, tx) = (gate.clone(), tx.clone());
                async move {
                    if key == "slow" {
                        gate.acquire().await.unwrap().forget();
                    }
                    tx.send((key, items)).unwrap();
                }
                .boxed()
            })
        };
        let merge = |mut a: Vec<u32>, b: Vec<u32>| {
            a.extend(b);
            a
        };
        let keyed = Keyed::new(merge, CancellationToken::new());
        keyed.submit("slow", vec![1], &run);
        keyed.submit("slow", vec![2], &run);
        keyed.submit("slow", vec![3], &run);
        keyed.submit("fast", vec![9], &run);
        // The slow key holds nothing else.
        assert_eq!(rx.recv().await, Some(("fast", vec![9])));
        assert_eq!(keyed.keys(), ["slow"]);
        gate.add_permits(2);
        assert_eq!(rx.recv().await, Some(("slow", vec![1])));
        // 2 and 3 came while 1 ran: one run, merged, in order.
        assert_eq!(rx.recv().await, Some(("slow", vec![2, 3])));
        keyed.stopped().await;
        assert!(keyed.keys().is_empty());
    }

    /// A run that never ends is dropped at the cancel token.
    #[tokio::test]
    async fn cancel_ends_a_stuck_run() {
        let cancel = CancellationToken::new();
        let keyed: Keyed<u8, ()> = Keyed::new(|_, b| b, cancel.clone());
        let run: Run<u8, ()> = Arc::new(|_, ()| futures::future::pending().boxed());
        keyed.submit(1, (), &run);
        cancel.cancel();
        keyed.stopped().await;
    }
}
