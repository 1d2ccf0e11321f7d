use std::sync::atomic::Ordering;

use super::memory::{Conn, Store};
use super::*;

fn opts(identity: &str) -> ElectionOptions {
    ElectionOptions {
        identity: identity.into(),
        lease_name: "kubewasm".into(),
        namespace: "test".into(),
        lease_duration: Duration::from_secs(4),
        renew_deadline: Duration::from_secs(3),
        retry_period: Duration::from_millis(500),
        shards: None,
    }
}

struct Replica {
    conn: Arc<Conn>,
    leadership: Leadership,
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

fn replica(store: &Arc<Store>, identity: &str) -> Replica {
    let conn = Conn::new(store.clone());
    let leadership = Leadership::follower();
    let cancel = CancellationToken::new();
    let elector = Elector::new(conn.clone(), opts(identity), leadership.clone());
    let task = tokio::spawn(elector.run(cancel.clone()));
    Replica {
        conn,
        leadership,
        cancel,
        task,
    }
}

/// Polls (in paused time) until `cond`, returning how long it took.
async fn until(what: &str, limit: Duration, cond: impl Fn() -> bool) -> Duration {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "{what} not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    start.elapsed()
}

#[tokio::test(start_paused = true)]
async fn exactly_one_of_two_leads_and_keeps_leading() {
    let store = Arc::new(Store::default());
    let a = replica(&store, "a");
    until("a leads", Duration::from_secs(1), || {
        a.leadership.is_leader()
    })
    .await;
    let b = replica(&store, "b");
    // Many renewals later, still exactly one leader: the holder.
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(a.leadership.is_leader());
        assert!(!b.leadership.is_leader());
        assert_eq!(store.holder().as_deref(), Some("a"));
    }
    assert_eq!(a.leadership.state().term, 1, "no flapping");
    b.cancel.cancel();
    a.cancel.cancel();
    let _ = tokio::join!(a.task, b.task);
}

#[tokio::test(start_paused = true)]
async fn a_cut_off_leader_stops_acting_before_the_follower_may_start() {
    let store = Arc::new(Store::default());
    let a = replica(&store, "a");
    until("a leads", Duration::from_secs(1), || {
        a.leadership.is_leader()
    })
    .await;
    let b = replica(&store, "b");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let cut_at = Instant::now();
    a.conn.cut.store(true, Ordering::SeqCst);
    let mut a_rx = a.leadership.subscribe();
    let mut b_rx = b.leadership.subscribe();
    let a_stopped = async {
        a_rx.wait_for(|s| !s.leading).await.unwrap();
        Instant::now()
    };
    let b_started = async {
        b_rx.wait_for(|s| s.leading).await.unwrap();
        Instant::now()
    };
    let (a_stopped, b_started) = tokio::join!(a_stopped, b_started);
    // a stops within the renew deadline of its last renewal...
    assert!(
        a_stopped - cut_at <= Duration::from_secs(3),
        "{:?}",
        a_stopped - cut_at
    );
    // ...and b starts only once a's lease ran out on b's clock, after a stopped.
    assert!(b_started > a_stopped + Duration::from_millis(500));
    assert!(b_started - cut_at <= Duration::from_secs(4) + Duration::from_secs(1));
    assert_eq!(store.holder().as_deref(), Some("b"));
    // Reconnected, a stays a follower of b, ready to lead again.
    a.conn.cut.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!a.leadership.is_leader());
    b.cancel.cancel();
    b.task.await.unwrap();
    until("a leads again", Duration::from_secs(2), || {
        a.leadership.is_leader()
    })
    .await;
    assert_eq!(a.leadership.state().term, 2, "a new term: a new replay");
    a.cancel.cancel();
    a.task.await.unwrap();
}

/// Always may take, never gives up.
struct Greedy(Arc<tokio::sync::Mutex<()>>);

impl ShardBalance for Greedy {
    fn may_take(&self) -> bool {
        true
    }
    fn should_give_up(&self, _: u32) -> bool {
        false
    }
    fn turn(&self) -> Arc<tokio::sync::Mutex<()>> {
        self.0.clone()
    }
}

/// A shard holder cut off past its renew deadline is suspended, not
/// lost: reconnected before anyone took its Lease, it renews its own
/// record and resumes with its `held_since` kept (what it set aside
/// goes on); had another replica held it, the suspension is forfeited.
#[tokio::test(start_paused = true)]
async fn a_shard_renewed_again_by_its_holder_resumes_and_one_taken_over_is_forfeited() {
    use crate::shard::{ShardKey, ShardSet};
    let store = Arc::new(Store::default());
    let conn = Conn::new(store.clone());
    let leadership = Leadership::sharded(ShardSet::sharded(2, ShardKey::Uid, false));
    let cancel = CancellationToken::new();
    let balance: Arc<dyn ShardBalance> = Arc::new(Greedy(Arc::default()));
    let elector = Elector::new(conn.clone(), opts("a"), leadership.clone()).for_shard(0, balance);
    let task = tokio::spawn(elector.run(cancel.clone()));
    until("a holds shard 0", Duration::from_secs(1), || {
        leadership.held_since(0).is_some()
    })
    .await;
    let since = leadership.held_since(0);
    conn.cut.store(true, Ordering::SeqCst);
    until("suspended", Duration::from_secs(4), || {
        leadership.suspended_since(0).is_some()
    })
    .await;
    assert_eq!(leadership.suspended_since(0), since);
    conn.cut.store(false, Ordering::SeqCst);
    until("held again", Duration::from_secs(2), || {
        leadership.held_since(0).is_some()
    })
    .await;
    assert_eq!(
        leadership.held_since(0),
        since,
        "nobody held it in between: held since the first term"
    );
    assert!(leadership.state().term > since.unwrap_or(0), "a new term");

    // Cut off again, and this time another replica takes the Lease.
    conn.cut.store(true, Ordering::SeqCst);
    until("suspended again", Duration::from_secs(4), || {
        leadership.suspended_since(0).is_some()
    })
    .await;
    let b = replica(&store, "b");
    until("b holds the Lease", Duration::from_secs(10), || {
        store.holder().as_deref() == Some("b")
    })
    .await;
    conn.cut.store(false, Ordering::SeqCst);
    until("the suspension forfeited", Duration::from_secs(3), || {
        leadership.suspended_since(0).is_none()
    })
    .await;
    b.cancel.cancel();
    b.task.await.unwrap();
    until("a holds shard 0 anew", Duration::from_secs(3), || {
        leadership.held_since(0).is_some()
    })
    .await;
    assert_eq!(
        leadership.held_since(0),
        Some(leadership.state().term),
        "taken from another holder: held since this term only"
    );
    cancel.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn release_on_shutdown_hands_over_within_a_retry_period() {
    let store = Arc::new(Store::default());
    let a = replica(&store, "a");
    until("a leads", Duration::from_secs(1), || {
        a.leadership.is_leader()
    })
    .await;
    let b = replica(&store, "b");
    tokio::time::sleep(Duration::from_secs(2)).await;
    a.cancel.cancel();
    a.task.await.unwrap();
    assert!(!a.leadership.is_leader());
    assert_ne!(store.holder().as_deref(), Some("a"), "released");
    let took = until("b leads", Duration::from_secs(4), || {
        b.leadership.is_leader()
    })
    .await;
    assert!(
        took <= Duration::from_millis(600),
        "took {took:?}: a released lease is taken at the next retry, not after the lease duration"
    );
    b.cancel.cancel();
    b.task.await.unwrap();
}

/// Unsharded, a leader cut off past its renew deadline is suspended:
/// reconnected before anyone took the Lease, it renews its own record
/// and resumes, held since its first term.
#[tokio::test(start_paused = true)]
async fn an_unsharded_leader_renewed_again_by_itself_resumes() {
    let store = Arc::new(Store::default());
    let a = replica(&store, "a");
    until("a leads", Duration::from_secs(1), || {
        a.leadership.is_leader()
    })
    .await;
    let since = a.leadership.held_since_whole();
    assert_eq!(since, Some(1));
    a.conn.cut.store(true, Ordering::SeqCst);
    until("suspended", Duration::from_secs(4), || {
        a.leadership.suspended_since_whole().is_some()
    })
    .await;
    a.conn.cut.store(false, Ordering::SeqCst);
    until("leading again", Duration::from_secs(2), || {
        a.leadership.is_leader()
    })
    .await;
    assert_eq!(a.leadership.state().term, 2, "a new term");
    assert_eq!(a.leadership.held_since_whole(), since, "nobody in between");
    a.cancel.cancel();
    a.task.await.unwrap();
}

/// A replica releasing the Lease writes how far its informers had
/// followed the API server; the next holder is told to wait for it.
#[tokio::test(start_paused = true)]
async fn a_released_lease_carries_the_last_holders_high_waters_to_the_next() {
    let store = Arc::new(Store::default());
    let a_leadership = Leadership::follower();
    let a_cancel = CancellationToken::new();
    let marks = super::super::HandoverMarks::from([("configmaps".to_owned(), 42)]);
    let a = Elector::new(Conn::new(store.clone()), opts("a"), a_leadership.clone())
        .with_high_waters(Arc::new({
            let marks = marks.clone();
            move || marks.clone()
        }));
    let a_task = tokio::spawn(a.run(a_cancel.clone()));
    until("a leads", Duration::from_secs(1), || {
        a_leadership.is_leader()
    })
    .await;
    let b = replica(&store, "b");
    assert!(
        b.leadership.take_handover().is_empty(),
        "nothing handed over yet"
    );
    a_cancel.cancel();
    a_task.await.unwrap();
    until("b leads", Duration::from_secs(2), || {
        b.leadership.is_leader()
    })
    .await;
    assert_eq!(b.leadership.take_handover(), marks);
    assert!(b.leadership.take_handover().is_empty(), "taken once");
    b.cancel.cancel();
    b.task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_lease_taken_by_another_closes_the_gate_at_the_next_renewal() {
    let store = Arc::new(Store::default());
    let a = replica(&store, "a");
    until("a leads", Duration::from_secs(1), || {
        a.leadership.is_leader()
    })
    .await;
    // Someone else forcibly takes it (an operator, a split brain).
    let intruder = Conn::new(store.clone());
    let mut l = intruder.get().await.unwrap().unwrap();
    if let Some(s) = l.spec.as_mut() {
        s.holder_identity = Some("z".into());
    }
    assert_eq!(intruder.replace(l).await.unwrap(), Written::Done);
    let took = until("a follows", Duration::from_secs(2), || {
        !a.leadership.is_leader()
    })
    .await;
    assert!(took <= Duration::from_millis(600), "{took:?}");
    a.cancel.cancel();
    a.task.await.unwrap();
}
