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
//!
//! Whether a member may take new requests ([`Backend::eligible`]) combines its
//! health (see [`crate::health`]) and the operator's rotate state (see
//! [`crate::rotate`]); both are read with relaxed loads on the request path.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use prometheus::IntCounter;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use crate::health::{self, Health, HealthCell, Probe};
use crate::metrics::HealthMetrics;
use crate::rotate::{RotateError, RotateStore};
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
    pub health: HealthCell,
    /// How its checks are made.
    pub probe: Probe,
    /// Rotated out by an operator: no new requests, whatever its health.
    rotated_out: AtomicBool,
    /// Connect failures and resets in a row (passive detection).
    failures: AtomicU32,
    /// Woken when the last in-flight request of a rotated-out member ends.
    drained: Notify,
    /// Wakes this member's checker when it is ejected or freed: with active checks
    /// off, the checker sleeps on this instead of waking every interval.
    pub(crate) wake: Arc<Notify>,
    shared: Arc<Shared>,
}

/// Settings and metrics every backend refers to.
#[derive(Debug)]
struct Shared {
    pool: PoolSettings,
    health: Arc<health::Settings>,
    metrics: HealthMetrics,
}

impl std::fmt::Debug for HealthMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HealthMetrics")
    }
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
            if !up.expired(now, self.shared.pool.idle_timeout) && up.is_reusable() {
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
        if idle.len() < self.shared.pool.max_idle {
            idle.push(up);
        }
    }

    /// Closes idle connections older than the idle timeout.
    pub fn sweep(&self, now: Instant) {
        let expired: Vec<Upstream> = {
            let mut idle = self.idle();
            let (old, keep) = std::mem::take(&mut *idle)
                .into_iter()
                .partition(|u| u.expired(now, self.shared.pool.idle_timeout));
            *idle = keep;
            old
        };
        drop(expired);
    }

    pub fn idle_count(&self) -> usize {
        self.idle().len()
    }

    pub(crate) fn opened(&self) {
        self.shared.pool.opened.inc();
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Every slot is taken: a request will have to wait.
    pub fn full(&self) -> bool {
        self.slots.available_permits() == 0
    }

    /// May take new requests: up by health and not rotated out.
    pub fn eligible(&self) -> bool {
        self.health.get() == Health::Up && !self.rotated_out()
    }

    pub fn rotated_out(&self) -> bool {
        self.rotated_out.load(Ordering::Relaxed)
    }

    /// A connect failure or reset: enough in a row eject the member at once.
    pub fn record_failure(&self) {
        let threshold = self.shared.health.passive_failures;
        if threshold == 0 {
            return;
        }
        let n = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
        if n < threshold {
            return;
        }
        let was = self.health.get();
        if was != Health::Down && self.health.transition(was, Health::Down) {
            self.failures.store(0, Ordering::Relaxed);
            self.shared.metrics.ejected("passive");
            self.wake.notify_one();
            self.shared.metrics.set_up(&self.addr, false);
            tracing::warn!(member = %self.addr, failures = n, "member is down (connection failures)");
        }
    }

    /// A response arrived: the failure streak is over.
    pub fn record_success(&self) {
        // Load first: no write (and no cache-line bounce) on the usual path.
        if self.failures.load(Ordering::Relaxed) != 0 {
            self.failures.store(0, Ordering::Relaxed);
        }
    }

    /// Waits until no request is in flight, or `timeout`; true if drained.
    pub async fn drain(&self, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.drained.notified();
            if self.in_flight() == 0 {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.in_flight() == 0;
            }
        }
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
        let before = self.backend.in_flight.fetch_sub(1, Ordering::Relaxed);
        if before == 1 && self.backend.rotated_out() {
            self.backend.drained.notify_waiters();
        }
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.shared.metrics.forget(&self.addr);
        self.wake.notify_one();
    }
}

/// All members known, by address.
#[derive(Debug)]
pub struct Registry {
    max_in_flight: usize,
    shared: Arc<Shared>,
    backends: Mutex<HashMap<Arc<str>, Weak<Backend>>>,
    rotate: RotateStore,
    /// Where health checkers run; `None` runs none (unit tests).
    checkers: Option<tokio::runtime::Handle>,
    /// Members first seen before this spread their first checks over an interval.
    startup_until: Instant,
}

/// How a [`Registry`] is made.
pub struct RegistryConfig {
    pub max_in_flight: usize,
    pub pool: PoolSettings,
    pub health: health::Settings,
    pub metrics: HealthMetrics,
    pub rotate: RotateStore,
    pub checkers: Option<tokio::runtime::Handle>,
}

impl Registry {
    pub fn new(c: RegistryConfig) -> Registry {
        Registry {
            max_in_flight: c.max_in_flight,
            shared: Arc::new(Shared {
                pool: c.pool,
                health: Arc::new(c.health),
                metrics: c.metrics,
            }),
            backends: Mutex::new(HashMap::new()),
            rotate: c.rotate,
            checkers: c.checkers,
            startup_until: Instant::now() + Duration::from_secs(2),
        }
    }

    fn map(&self) -> MutexGuard<'_, HashMap<Arc<str>, Weak<Backend>>> {
        self.backends.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every member some table still lists (or a request still holds), by address.
    pub fn live(&self) -> Vec<Arc<Backend>> {
        let mut v: Vec<Arc<Backend>> = self.map().values().filter_map(Weak::upgrade).collect();
        v.sort_by(|a, b| a.addr.cmp(&b.addr));
        v
    }

    pub fn find(&self, addr: &str) -> Option<Arc<Backend>> {
        self.map().get(addr).and_then(Weak::upgrade)
    }

    /// Rotates `addr` out (`true`) or in, durably first, then in the live member.
    /// Works for an address not (yet) routed: it applies when the member appears.
    pub fn rotate(&self, addr: &str, out: bool) -> Result<Option<Arc<Backend>>, RotateError> {
        self.rotate.set(addr, out)?;
        let b = self.find(addr);
        if let Some(b) = &b {
            b.rotated_out.store(out, Ordering::Relaxed);
            if !out {
                b.drained.notify_waiters();
            }
        }
        Ok(b)
    }

    /// Rotated-out addresses, live or not.
    pub fn rotated_out(&self) -> std::collections::BTreeSet<String> {
        self.rotate.all()
    }

    /// Closes expired idle connections of every member; run periodically.
    pub fn sweep(&self) {
        let live: Vec<Arc<Backend>> = self.map().values().filter_map(Weak::upgrade).collect();
        let now = Instant::now();
        for b in live {
            b.sweep(now);
        }
    }

    /// The member at `addr`, created on first use (with `probe` saying how to check
    /// it, and its first check scheduled).
    pub fn get(&self, addr: &str, probe: impl FnOnce() -> Probe) -> Arc<Backend> {
        let mut map = self.map();
        if let Some(b) = map.get(addr).and_then(Weak::upgrade) {
            return b;
        }
        let settings = &self.shared.health;
        // Unchecked members wait for their first pass only if checks will run.
        let gated = settings.gate_new && settings.active && self.checkers.is_some();
        let health = if gated { Health::Unknown } else { Health::Up };
        let backend = Arc::new(Backend {
            addr: Arc::from(addr),
            socket_addr: addr.parse().ok(),
            in_flight: AtomicUsize::new(0),
            slots: Arc::new(Semaphore::new(self.max_in_flight)),
            idle: Mutex::new(Vec::new()),
            health: HealthCell::new(health),
            probe: probe(),
            rotated_out: AtomicBool::new(self.rotate.contains(addr)),
            failures: AtomicU32::new(0),
            drained: Notify::new(),
            wake: Arc::new(Notify::new()),
            shared: self.shared.clone(),
        });
        self.shared
            .metrics
            .set_up(&backend.addr, health == Health::Up);
        // Forget members nobody refers to any more, so the map stays bounded.
        if map.len() > 64 && map.len().is_power_of_two() {
            map.retain(|_, w| w.strong_count() > 0);
        }
        map.insert(backend.addr.clone(), Arc::downgrade(&backend));
        if let Some(rt) = &self.checkers {
            let first = health::first_delay(settings, Instant::now() < self.startup_until);
            rt.spawn(health::run(
                Arc::downgrade(&backend),
                backend.wake.clone(),
                settings.clone(),
                self.shared.metrics.clone(),
                first,
            ));
        }
        backend
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A registry without checkers (nothing leaves the machine in unit tests).
    pub(crate) fn registry(max_in_flight: usize) -> Registry {
        Registry::new(RegistryConfig {
            max_in_flight,
            pool: PoolSettings {
                max_idle: 4,
                idle_timeout: Duration::from_secs(8),
                opened: IntCounter::new("t", "t").expect("counter"),
            },
            health: health::Settings::default(),
            metrics: HealthMetrics::detached(),
            rotate: RotateStore::in_memory(),
            checkers: None,
        })
    }

    impl Registry {
        pub(crate) fn member(&self, addr: &str) -> Arc<Backend> {
            self.get(addr, Probe::default)
        }
    }

    #[test]
    fn passive_failures_eject_and_rotate_blocks() {
        let r = registry(2);
        let b = r.member("10.0.0.1:80");
        assert!(b.eligible(), "no checkers: up from the start");
        b.record_failure();
        b.record_failure();
        b.record_success();
        b.record_failure();
        b.record_failure();
        assert!(b.eligible(), "a success breaks the streak");
        b.record_failure();
        assert_eq!(b.health.get(), Health::Down, "three in a row");
        assert!(!b.eligible());

        let c = r.member("10.0.0.2:80");
        r.rotate("10.0.0.2:80", true).expect("rotate");
        assert!(!c.eligible());
        r.rotate("10.0.0.2:80", false).expect("rotate");
        assert!(c.eligible());
        // Rotate state applies to members that appear later.
        r.rotate("10.0.0.3:80", true).expect("rotate");
        assert!(r.member("10.0.0.3:80").rotated_out());
    }

    #[tokio::test]
    async fn drain_waits_for_in_flight() {
        let r = registry(2);
        let b = r.member("10.0.0.1:80");
        let slot = b.acquire(Duration::ZERO).await.expect("slot");
        r.rotate("10.0.0.1:80", true).expect("rotate");
        assert!(!b.drain(Duration::from_millis(20)).await, "still in flight");
        let waiter = {
            let b = b.clone();
            tokio::spawn(async move { b.drain(Duration::from_secs(30)).await })
        };
        tokio::task::yield_now().await;
        drop(slot);
        assert!(
            waiter.await.expect("join"),
            "drained once the request ended"
        );
    }

    #[test]
    fn same_address_same_backend_until_dropped() {
        let r = registry(2);
        let a = r.member("10.0.0.1:80");
        let b = r.member("10.0.0.1:80");
        assert!(Arc::ptr_eq(&a, &b));
        drop((a, b));
        let c = r.member("10.0.0.1:80");
        assert_eq!(
            Arc::strong_count(&c),
            1,
            "a fresh backend after all were dropped"
        );
    }

    #[tokio::test]
    async fn slots_bound_in_flight_and_free_on_drop() {
        let r = registry(2);
        let b = r.member("10.0.0.1:80");
        let one = b.acquire(Duration::ZERO).await.expect("slot 1");
        let _two = b.acquire(Duration::ZERO).await.expect("slot 2");
        assert_eq!(b.in_flight(), 2);
        assert!(b.acquire(Duration::from_millis(10)).await.is_none(), "full");
        drop(one);
        assert_eq!(b.in_flight(), 1);
        assert!(b.acquire(Duration::ZERO).await.is_some());
    }
}
