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
//! table. Only the update path locks the registry's map. Each backend also keeps its
//! idle keep-alive connections: a short std `Mutex` around a `Vec` (push and pop,
//! never held across an await).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use prometheus::IntCounter;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::upstream::Upstream;

/// One member, shared by every route table that lists it.
#[derive(Debug)]
pub struct Backend {
    /// `address:port`, exactly as announced.
    pub addr: Arc<str>,
    /// The same, parsed; `None` if the address is not an IP literal.
    pub socket_addr: Option<SocketAddr>,
    in_flight: AtomicUsize,
    /// One permit per request allowed in flight (`upstream.max_connections_per_backend`).
    slots: Arc<Semaphore>,
    /// Keep-alive connections waiting for a request, most recently used last.
    idle: Mutex<Vec<Upstream>>,
    pool: PoolSettings,
}

/// How idle connections are kept, from `upstream.*`.
#[derive(Clone, Debug)]
pub struct PoolSettings {
    pub max_idle: usize,
    pub idle_timeout: Duration,
    /// `router_upstream_connections_opened_total`.
    pub opened: IntCounter,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Upstream")
    }
}

impl Backend {
    fn idle(&self) -> MutexGuard<'_, Vec<Upstream>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An idle connection that is still usable, if there is one.
    pub fn take_idle(&self) -> Option<Upstream> {
        let now = Instant::now();
        loop {
            let mut up = self.idle().pop()?;
            if !up.expired(now, self.pool.idle_timeout) && up.is_reusable() {
                return Some(up);
            }
            // Closed by the member or too old: drop it (outside the lock) and go on.
        }
    }

    /// Returns a connection after its response was read to the end.
    pub fn put_idle(&self, mut up: Upstream) {
        if !up.is_reusable() {
            return;
        }
        up.mark_idle(Instant::now());
        let mut idle = self.idle();
        if idle.len() < self.pool.max_idle {
            idle.push(up);
        }
    }

    /// Closes idle connections older than the idle timeout.
    pub fn sweep(&self, now: Instant) {
        let expired: Vec<Upstream> = {
            let mut idle = self.idle();
            let (old, keep) = std::mem::take(&mut *idle)
                .into_iter()
                .partition(|u| u.expired(now, self.pool.idle_timeout));
            *idle = keep;
            old
        };
        drop(expired);
    }

    pub fn idle_count(&self) -> usize {
        self.idle().len()
    }

    pub(crate) fn opened(&self) {
        self.pool.opened.inc();
    }

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
    pool: PoolSettings,
    backends: Mutex<HashMap<Arc<str>, Weak<Backend>>>,
}

impl Registry {
    pub fn new(max_in_flight: usize, pool: PoolSettings) -> Registry {
        Registry {
            max_in_flight,
            pool,
            backends: Mutex::new(HashMap::new()),
        }
    }

    /// Closes expired idle connections of every member; run periodically.
    pub fn sweep(&self) {
        let live: Vec<Arc<Backend>> = self
            .backends
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .filter_map(Weak::upgrade)
            .collect();
        let now = Instant::now();
        for b in live {
            b.sweep(now);
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
            socket_addr: addr.parse().ok(),
            in_flight: AtomicUsize::new(0),
            slots: Arc::new(Semaphore::new(self.max_in_flight)),
            idle: Mutex::new(Vec::new()),
            pool: self.pool.clone(),
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
pub(crate) mod tests {
    use super::*;

    pub(crate) fn registry(max_in_flight: usize) -> Registry {
        Registry::new(
            max_in_flight,
            PoolSettings {
                max_idle: 4,
                idle_timeout: Duration::from_secs(8),
                opened: IntCounter::new("t", "t").expect("counter"),
            },
        )
    }

    #[test]
    fn same_address_same_backend_until_dropped() {
        let r = registry(2);
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
        let r = registry(2);
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
