//! Per-member runtime state, kept in a registry keyed by `address:port`, outside the
//! route table.
//!
//! The route table is rebuilt on every change, but a member's in-flight count and its
//! connection limit must not reset when that happens: every table refers to the same
//! [`Backend`] for the same address. Health and rotate state (a later layer) live here
//! for the same reason.
//!
//! The registry holds `Weak` references: a member removed from every table is freed
//! once its last in-flight request (which holds an `Arc`) has finished. That is the
//! drain: a removed member gets no new requests, and old ones complete.
//!
//! The request path never touches the registry; it reaches a `Backend` through the
//! table. Only the update path locks the registry's map.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// One member, shared by every route table that lists it.
#[derive(Debug)]
pub struct Backend {
    /// `address:port`, exactly as announced.
    pub addr: Arc<str>,
    in_flight: AtomicUsize,
    /// One permit per request allowed in flight (`upstream.max_connections_per_backend`).
    slots: Arc<Semaphore>,
}

impl Backend {
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Takes a slot for one request, waiting at most `queue` for one to free up.
    /// `None` means the member stayed full: answer 503 rather than queue forever.
    pub async fn acquire(self: &Arc<Self>, queue: Duration) -> Option<InFlight> {
        let permit = match self.slots.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => tokio::time::timeout(queue, self.slots.clone().acquire_owned())
                .await
                .ok()?
                .ok()?,
        };
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        Some(InFlight {
            backend: self.clone(),
            _permit: permit,
        })
    }
}

/// A request in flight to a member; dropping it (when the response body ends or the
/// client goes away) frees the slot.
#[derive(Debug)]
pub struct InFlight {
    backend: Arc<Backend>,
    _permit: OwnedSemaphorePermit,
}

impl InFlight {
    pub fn backend(&self) -> &Arc<Backend> {
        &self.backend
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.backend.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// All members known, by address.
#[derive(Debug)]
pub struct Registry {
    max_in_flight: usize,
    backends: Mutex<HashMap<Arc<str>, Weak<Backend>>>,
}

impl Registry {
    pub fn new(max_in_flight: usize) -> Registry {
        Registry {
            max_in_flight,
            backends: Mutex::new(HashMap::new()),
        }
    }

    /// The member at `addr`, created on first use.
    pub fn get(&self, addr: &str) -> Arc<Backend> {
        let mut map = self
            .backends
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(b) = map.get(addr).and_then(Weak::upgrade) {
            return b;
        }
        let backend = Arc::new(Backend {
            addr: Arc::from(addr),
            in_flight: AtomicUsize::new(0),
            slots: Arc::new(Semaphore::new(self.max_in_flight)),
        });
        // Forget members nobody refers to any more, so the map stays bounded.
        if map.len() > 64 && map.len().is_power_of_two() {
            map.retain(|_, w| w.strong_count() > 0);
        }
        map.insert(backend.addr.clone(), Arc::downgrade(&backend));
        backend
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_address_same_backend_until_dropped() {
        let r = Registry::new(2);
        let a = r.get("10.0.0.1:80");
        let b = r.get("10.0.0.1:80");
        assert!(Arc::ptr_eq(&a, &b));
        drop((a, b));
        let c = r.get("10.0.0.1:80");
        assert_eq!(
            Arc::strong_count(&c),
            1,
            "a fresh backend after all were dropped"
        );
    }

    #[tokio::test]
    async fn slots_bound_in_flight_and_free_on_drop() {
        let r = Registry::new(2);
        let b = r.get("10.0.0.1:80");
        let one = b.acquire(Duration::ZERO).await.expect("slot 1");
        let _two = b.acquire(Duration::ZERO).await.expect("slot 2");
        assert_eq!(b.in_flight(), 2);
        assert!(b.acquire(Duration::from_millis(10)).await.is_none(), "full");
        drop(one);
        assert_eq!(b.in_flight(), 1);
        assert!(b.acquire(Duration::ZERO).await.is_some());
    }
}
