//! An in-memory Lease with resourceVersion checks and a switch that
//! cuts one replica off from it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::future::BoxFuture;
use k8s_openapi::api::coordination::v1::Lease;
use parking_lot::Mutex;

use super::{LeaseBackend, LeaseError, Written};

#[derive(Debug, Default)]
pub struct Store {
    lease: Mutex<Option<Lease>>,
    version: Mutex<u64>,
}

impl Store {
    pub fn holder(&self) -> Option<String> {
        self.lease
            .lock()
            .as_ref()
            .and_then(|l| l.spec.as_ref()?.holder_identity.clone())
            .filter(|h| !h.is_empty())
    }

    fn write(&self, mut lease: Lease) {
        let mut v = self.version.lock();
        *v += 1;
        lease.metadata.resource_version = Some(v.to_string());
        *self.lease.lock() = Some(lease);
    }
}

/// One replica's connection to the shared store.
#[derive(Debug)]
pub struct Conn {
    pub store: Arc<Store>,
    pub cut: AtomicBool,
}

impl Conn {
    pub fn new(store: Arc<Store>) -> Arc<Self> {
        Arc::new(Self {
            store,
            cut: AtomicBool::new(false),
        })
    }

    fn check(&self) -> Result<(), LeaseError> {
        if self.cut.load(Ordering::SeqCst) {
            return Err(LeaseError::Unavailable("partitioned".into()));
        }
        Ok(())
    }
}

impl LeaseBackend for Conn {
    fn get(&self) -> BoxFuture<'_, Result<Option<Lease>, LeaseError>> {
        Box::pin(async move {
            self.check()?;
            // A round trip: other electors run meanwhile, as they do
            // against an API server.
            tokio::task::yield_now().await;
            Ok(self.store.lease.lock().clone())
        })
    }

    fn create(&self, lease: Lease) -> BoxFuture<'_, Result<Written, LeaseError>> {
        Box::pin(async move {
            self.check()?;
            if self.store.lease.lock().is_some() {
                return Ok(Written::Lost);
            }
            self.store.write(lease);
            Ok(Written::Done)
        })
    }

    fn replace(&self, lease: Lease) -> BoxFuture<'_, Result<Written, LeaseError>> {
        Box::pin(async move {
            self.check()?;
            let current = self
                .store
                .lease
                .lock()
                .as_ref()
                .and_then(|l| l.metadata.resource_version.clone());
            if current != lease.metadata.resource_version {
                return Ok(Written::Lost);
            }
            self.store.write(lease);
            Ok(Written::Done)
        })
    }
}
