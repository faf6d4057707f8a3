//! Members: every `address:port` that takes requests, with the runtime state that
//! must outlive a route-table swap.
//!
//! The route table is rebuilt on every change, but a member's in-flight count, its
//! connection limit, its idle connections, its health and its rotate state must not
//! reset when that happens: every table refers to the same [`Member`] for the same
//! address, found through the [`MemberRegistry`].
//!
//! The registry holds `Weak` references: a member removed from every table is freed
//! once its last in-flight request (which holds an `Arc`) has finished. That is the
//! drain: a removed member gets no new requests, and old ones complete. Its checker
//! ends with it.
//!
//! The request path never touches the registry; it reaches a `Member` through the
//! table. Whether a member may take new requests ([`Member::eligible`]) combines its
//! health ([`health`]) and the operator's rotate state ([`rotate`]), both read with
//! relaxed loads.
//!
//! Inside: [`probe`] makes one check, [`health`] holds the state and its rules,
//! [`checker`] schedules the checks, [`rotate`] persists the operator's choices.

pub mod checker;
pub mod health;
pub mod probe;
pub mod reserve;
pub mod rotate;
pub mod warm;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use per_source::ClientKey;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use self::health::{Health, Tracker};
use self::probe::Probe;
use self::reserve::{Reserve, ReserveSlot};
use self::rotate::{RotateError, RotateStore};
use crate::metrics::HealthMetrics;
use crate::upstream::{Pool, PoolSettings};

/// One member, shared by every route table that lists it.
#[derive(Debug)]
pub struct Member {
    /// `address:port`, exactly as announced.
    pub addr: Arc<str>,
    in_flight: AtomicUsize,
    /// Upgraded connections (WebSocket tunnels) open to it; they hold no slot.
    tunnels: AtomicUsize,
    /// One permit per request allowed in flight (`upstream.max_connections_per_backend`).
    slots: Arc<Semaphore>,
    /// Connections to it, idle ones kept alive.
    pub pool: Arc<Pool>,
    /// Shared with its checker (weakly), which ends when this is freed.
    pub health: Arc<Tracker>,
    /// Rotated out by an operator: no new requests, whatever its health.
    rotated_out: AtomicBool,
    /// Woken when the last in-flight request of a rotated-out member ends.
    drained: Notify,
    /// Slots held per client address, when one address may not take them all.
    sources: Option<Sources>,
    /// The last slots, for addresses that hold few (`upstream.source_reserve`).
    reserve: Option<Reserve>,
    /// Requests answered through it (the status page's rates and latencies).
    pub stats: Stats,
    /// Its cookie affinity id (the key is the process's: see `policy::affinity`),
    /// hashed once.
    affinity_id: std::sync::OnceLock<u64>,
}

/// Upper bounds of [`Stats`]' latency buckets, in milliseconds (the last is open).
pub const LATENCY_BUCKETS_MS: [u64; 5] = [5, 25, 100, 500, 2500];

/// Counters of the requests a member answered: a few relaxed atomic adds per
/// request, read by the status page, which turns them into rates itself.
#[derive(Debug, Default)]
pub struct Stats {
    requests: AtomicU64,
    /// 5xx answers, the router's own (502, 504) included.
    errors: AtomicU64,
    latency_us: AtomicU64,
    buckets: [AtomicU64; LATENCY_BUCKETS_MS.len() + 1],
}

/// A copy of [`Stats`] at one moment.
#[derive(Clone, Debug, serde::Serialize)]
pub struct StatsSnapshot {
    pub requests: u64,
    pub errors: u64,
    pub latency_us: u64,
    pub buckets: Vec<u64>,
}

impl Stats {
    pub fn record(&self, status: u16, elapsed: Duration) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        if status >= 500 {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
        let us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        self.latency_us.fetch_add(us, Ordering::Relaxed);
        let i = LATENCY_BUCKETS_MS
            .iter()
            .position(|ms| us <= ms * 1000)
            .unwrap_or(LATENCY_BUCKETS_MS.len());
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
    }

    /// A request that got no answer from the member (502, 504): an error, with no
    /// latency to count.
    pub fn record_failure(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.errors.fetch_add(1, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            requests: self.requests.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            latency_us: self.latency_us.load(Ordering::Relaxed),
            buckets: self
                .buckets
                .iter()
                .map(|b| b.load(Ordering::Relaxed))
                .collect(),
        }
    }
}

/// How many of a member's slots one client address holds, so that no single
/// address can take all of them (`upstream.source_share`). An address is a
/// client key (`per_source::key`: an IPv6 /64 by default).
///
/// Why: a slot is held until the response has been handed to the client, so clients
/// that read slowly (`slowhttptest -X`) or hold requests open would otherwise fill
/// every slot of an app from one address, and the app would answer 503 to everyone
/// else. Entries exist only while an address holds a slot, so the map is never
/// larger than the member's slot count.
///
/// An address at its share waits (up to the queue timeout) for one of its own
/// slots to come back, like a full member: a busy client alone on a member (a load
/// balancer in front, a load test) is slowed to its share, never refused while its
/// own requests keep finishing; one that holds its slots (slow reads) gets 503.
///
/// Each address present has its own semaphore of `limit` permits, so a returned
/// slot wakes exactly one waiter of the same address (in arrival order), never the
/// waiters of other addresses.
#[derive(Debug)]
struct Sources {
    limit: u32,
    held: Mutex<HashMap<ClientKey, Arc<Semaphore>>>,
    forgets: std::sync::atomic::AtomicU32,
}

impl Sources {
    fn held(&self) -> MutexGuard<'_, HashMap<ClientKey, Arc<Semaphore>>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes one of `ip`'s slots, waiting until `deadline` if it holds its share.
    async fn take_by(
        &self,
        ip: ClientKey,
        deadline: tokio::time::Instant,
    ) -> Option<OwnedSemaphorePermit> {
        let own = self.own(ip);
        // Whatever happens to this wait (served, timed out, or the client gone and
        // the future dropped), the entry is forgotten if nobody else needs it.
        let _forget = Forget { sources: self, ip };
        // (Edition 2024: the wait's temporaries drop before `_forget` does.)
        match own.clone().try_acquire_owned() {
            Ok(p) => Some(p),
            Err(_) => tokio::time::timeout_at(deadline, own.acquire_owned())
                .await
                .ok()
                .and_then(Result::ok),
        }
    }

    /// One of `ip`'s slots if one is free now (`None`: it would have to wait).
    fn try_take(&self, ip: ClientKey) -> Option<OwnedSemaphorePermit> {
        let own = self.own(ip);
        let _forget = Forget { sources: self, ip };
        own.try_acquire_owned().ok()
    }

    /// `ip`'s semaphore, made if it has none.
    fn own(&self, ip: ClientKey) -> Arc<Semaphore> {
        self.held()
            .entry(ip)
            .or_insert_with(|| Arc::new(Semaphore::new(self.limit as usize)))
            .clone()
    }

    /// Removes `ip`'s entry once nobody holds or waits for one of its slots (only
    /// the map refers to its semaphore then), so the map stays no larger than the
    /// member's slot count plus its waiters.
    ///
    /// A wait cancelled mid-way (the client went away) may drop its reference after
    /// its `Forget` ran; such leftovers are swept every 1024 calls.
    fn forget(&self, ip: ClientKey) {
        let mut held = self.held();
        if held.get(&ip).is_some_and(|s| Arc::strong_count(s) == 1) {
            held.remove(&ip);
        }
        if self.forgets.fetch_add(1, Ordering::Relaxed) % 1024 == 1023 {
            held.retain(|_, s| Arc::strong_count(s) > 1);
        }
    }

    /// Slots `ip` holds now.
    #[cfg(test)]
    fn count(&self, ip: ClientKey) -> Option<u32> {
        self.held()
            .get(&ip)
            .map(|s| self.limit - s.available_permits() as u32)
    }
}

/// Forgets an address's entry when a wait for its slot ends (dropped after the
/// wait's own reference to the semaphore, as locals drop in reverse order).
struct Forget<'a> {
    sources: &'a Sources,
    ip: ClientKey,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.sources.forget(self.ip);
    }
}

/// Why [`Member::acquire`] gave no slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Full {
    /// Every slot stayed taken for the queue timeout.
    Member,
    /// This client address holds its share of the member's slots already.
    Source,
}

impl Member {
    /// Its cookie affinity id under `key` (one key per process).
    pub fn affinity_id(&self, key: &crate::policy::affinity::AffinityKey) -> u64 {
        *self.affinity_id.get_or_init(|| key.id(&self.addr))
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    pub fn tunnels(&self) -> usize {
        self.tunnels.load(Ordering::Relaxed)
    }

    /// What the balancer compares: requests in flight plus open tunnels (a tunnel
    /// holds no slot, but it is a connection the gear serves, as haproxy's
    /// `leastconn` counts it).
    pub fn load(&self) -> usize {
        self.in_flight() + self.tunnels()
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

    /// A slot for one request if one is free now, by the same rules as
    /// [`Member::acquire`] (the client's share, the reserve); `None`: it would
    /// have to wait (the caller then waits in `acquire`). The common case takes
    /// no deadline, no timer and no future.
    pub fn try_acquire(self: &Arc<Self>, source: Option<ClientKey>) -> Option<MemberSlot> {
        let taken = match (&self.sources, source) {
            (Some(sources), Some(ip)) => Some((ip, sources.try_take(ip)?)),
            _ => None,
        };
        // From here the slot gives back what it took on every path.
        let mut slot = MemberSlot {
            member: self.clone(),
            permit: None,
            source: taken,
            claim: None,
        };
        if let (Some(reserve), Some(ip)) = (&self.reserve, source) {
            slot.claim = Some(reserve.try_claim(ip)?);
        }
        slot.permit = Some(self.slots.clone().try_acquire_owned().ok()?);
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        Some(slot)
    }

    /// Takes a slot for one request, waiting at most `queue` for one to free up.
    /// `None` means the member stayed full: answer 503 rather than queue forever.
    /// `source` is the client's key: it may hold at most its share of the
    /// slots (`upstream.source_share`), and takes the last ones only while it
    /// holds few ([`reserve`]); `None` (unit tests) is never limited.
    pub async fn acquire(
        self: &Arc<Self>,
        queue: Duration,
        source: Option<ClientKey>,
    ) -> Result<MemberSlot, Full> {
        let deadline = tokio::time::Instant::now() + queue;
        let ip = source;
        let source = match (&self.sources, ip) {
            (Some(sources), Some(ip)) => match sources.take_by(ip, deadline).await {
                Some(permit) => Some((ip, permit)),
                None => return Err(Full::Source),
            },
            _ => None,
        };
        // From here the slot for `source` is counted: the guard gives it back on
        // every path, the permits with it.
        let mut slot = MemberSlot {
            member: self.clone(),
            permit: None,
            source,
            claim: None,
        };
        if let (Some(reserve), Some(ip)) = (&self.reserve, ip) {
            slot.claim = Some(reserve.claim(ip, deadline).await.ok_or(Full::Source)?);
        }
        let permit = match self.slots.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                match tokio::time::timeout_at(deadline, self.slots.clone().acquire_owned()).await {
                    Ok(Ok(p)) => p,
                    _ => return Err(Full::Member),
                }
            }
        };
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        slot.permit = Some(permit);
        Ok(slot)
    }
}

/// A request in flight to a member; dropping it (when the response body ends or the
/// client goes away) frees the slot.
#[derive(Debug)]
pub struct MemberSlot {
    member: Arc<Member>,
    /// `None` only while [`Member::acquire`] waits for it.
    permit: Option<OwnedSemaphorePermit>,
    /// The client key and the slot it holds in the member's [`Sources`].
    source: Option<(ClientKey, OwnedSemaphorePermit)>,
    /// Its place in the member's [`Reserve`] accounting.
    claim: Option<ReserveSlot>,
}

impl MemberSlot {
    pub fn member(&self) -> &Arc<Member> {
        &self.member
    }

    /// The request became a tunnel (101 Switching Protocols): its slot goes back,
    /// and the tunnel is counted apart for as long as it lives.
    ///
    /// Why: a slot bounds the requests a member works on at once
    /// (`max_connections_per_backend`, 100), while a WebSocket tunnel may stay open
    /// for an hour, mostly idle. Holding a slot for it let 100 WebSocket clients of
    /// one gear turn every other request to it into 503. Tunnels are bounded by the
    /// client connections they keep (`limits.max_connections`), as in haproxy and
    /// nginx, where no per-server limit is set by default.
    pub fn into_tunnel(self) -> TunnelSlot {
        let member = self.member.clone();
        member.tunnels.fetch_add(1, Ordering::Relaxed);
        drop(self);
        TunnelSlot { member }
    }
}

/// A tunnel open to a member (see [`MemberSlot::into_tunnel`]).
#[derive(Debug)]
pub struct TunnelSlot {
    member: Arc<Member>,
}

impl Drop for TunnelSlot {
    fn drop(&mut self) {
        self.member.tunnels.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Drop for MemberSlot {
    fn drop(&mut self) {
        if let (Some(reserve), Some(claim)) = (&self.member.reserve, self.claim.take()) {
            reserve.release(claim);
        }
        if let (Some(sources), Some((ip, permit))) = (&self.member.sources, self.source.take()) {
            drop(permit);
            sources.forget(ip);
        }
        if self.permit.is_none() {
            return;
        }
        let before = self.member.in_flight.fetch_sub(1, Ordering::Relaxed);
        if before == 1 && self.member.rotated_out() {
            self.member.drained.notify_waiters();
        }
    }
}

/// All members known, by address.
#[derive(Debug)]
pub struct MemberRegistry {
    max_in_flight: usize,
    max_per_source: usize,
    reserve_percent: u8,
    pool: Arc<PoolSettings>,
    health: health::SharedSettings,
    metrics: HealthMetrics,
    members: Mutex<HashMap<Arc<str>, Weak<Member>>>,
    rotate: RotateStore,
    /// Where health checkers run; `None` runs none (unit tests).
    checkers: Option<tokio::runtime::Handle>,
    /// Members first seen before this spread their first checks over an interval.
    startup_until: Instant,
}

/// How a [`MemberRegistry`] is made.
pub struct MemberRegistryConfig {
    pub max_in_flight: usize,
    /// Slots of a member one client address may hold (≥ `max_in_flight`: no limit).
    pub max_per_source: usize,
    /// Percent of a member's slots kept for addresses holding few
    /// (`upstream.source_reserve`; 0: none).
    pub reserve_percent: u8,
    pub pool: PoolSettings,
    pub health: health::HealthSettings,
    pub metrics: HealthMetrics,
    pub rotate: RotateStore,
    pub checkers: Option<tokio::runtime::Handle>,
}

impl MemberRegistry {
    pub fn new(c: MemberRegistryConfig) -> MemberRegistry {
        MemberRegistry {
            max_in_flight: c.max_in_flight,
            max_per_source: c.max_per_source,
            reserve_percent: c.reserve_percent,
            pool: Arc::new(c.pool),
            health: Arc::new(arc_swap::ArcSwap::from_pointee(c.health)),
            metrics: c.metrics,
            members: Mutex::new(HashMap::new()),
            rotate: c.rotate,
            checkers: c.checkers,
            startup_until: Instant::now() + Duration::from_secs(2),
        }
    }

    /// Replaces the health settings of every member (a reload).
    pub fn set_health(&self, settings: health::HealthSettings) {
        self.health.store(Arc::new(settings));
    }

    fn map(&self) -> MutexGuard<'_, HashMap<Arc<str>, Weak<Member>>> {
        self.members.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every member some table still lists (or a request still holds), by address.
    pub fn live(&self) -> Vec<Arc<Member>> {
        let mut v: Vec<Arc<Member>> = self.map().values().filter_map(Weak::upgrade).collect();
        v.sort_by(|a, b| a.addr.cmp(&b.addr));
        v
    }

    pub fn find(&self, addr: &str) -> Option<Arc<Member>> {
        self.map().get(addr).and_then(Weak::upgrade)
    }

    /// Rotates `addr` out (`true`) or in, durably first, then in the live member.
    /// Works for an address not (yet) routed: it applies when the member appears.
    pub fn rotate(&self, addr: &str, out: bool) -> Result<Option<Arc<Member>>, RotateError> {
        self.rotate.set(addr, out)?;
        let m = self.find(addr);
        if let Some(m) = &m {
            m.rotated_out.store(out, Ordering::Relaxed);
            if !out {
                m.drained.notify_waiters();
            }
        }
        Ok(m)
    }

    /// Rotated-out addresses, live or not.
    pub fn rotated_out(&self) -> std::collections::BTreeSet<String> {
        self.rotate.all()
    }

    /// Closes expired idle connections of every member; run periodically.
    pub fn sweep(&self) {
        let live: Vec<Arc<Member>> = self.map().values().filter_map(Weak::upgrade).collect();
        let now = Instant::now();
        for m in live {
            m.pool.sweep(now);
        }
    }

    /// The member at `addr`, created on first use (with `probe` saying how to check
    /// it, and its first check scheduled).
    pub fn get(&self, addr: &str, probe: impl FnOnce() -> Probe) -> Arc<Member> {
        let mut map = self.map();
        if let Some(m) = map.get(addr).and_then(Weak::upgrade) {
            return m;
        }
        let settings = self.health.load();
        // Unchecked members wait for their first pass only if checks will run.
        let gated = settings.gate_new && settings.active && self.checkers.is_some();
        let initial = if gated { Health::Unknown } else { Health::Up };
        let addr: Arc<str> = Arc::from(addr);
        let member = Arc::new(Member {
            in_flight: AtomicUsize::new(0),
            tunnels: AtomicUsize::new(0),
            slots: Arc::new(Semaphore::new(self.max_in_flight)),
            pool: Arc::new(Pool::new(addr.clone(), self.pool.clone())),
            health: Arc::new({
                let t = Tracker::new(
                    addr.clone(),
                    probe(),
                    initial,
                    self.health.clone(),
                    self.metrics.clone(),
                );
                if Instant::now() < self.startup_until {
                    t
                } else {
                    t.announced_later()
                }
            }),
            rotated_out: AtomicBool::new(self.rotate.contains(&addr)),
            drained: Notify::new(),
            sources: (self.max_per_source < self.max_in_flight).then(|| Sources {
                limit: u32::try_from(self.max_per_source).unwrap_or(u32::MAX),
                held: Mutex::new(HashMap::new()),
                forgets: Default::default(),
            }),
            reserve: Reserve::new(self.max_in_flight, self.reserve_percent),
            stats: Stats::default(),
            affinity_id: std::sync::OnceLock::new(),
            addr,
        });
        // Forget members nobody refers to any more, so the map stays bounded.
        if map.len() > 64 && map.len().is_power_of_two() {
            map.retain(|_, w| w.strong_count() > 0);
        }
        map.insert(member.addr.clone(), Arc::downgrade(&member));
        if let Some(rt) = &self.checkers {
            let first = health::first_delay(&settings, Instant::now() < self.startup_until);
            // The checker holds the tracker weakly: it ends when the member is freed.
            rt.spawn(checker::run(Arc::downgrade(&member.health), first));
        }
        member
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn key(ip: &str) -> ClientKey {
        per_source::KeyRule::default().key(ip.parse().expect("ip"))
    }

    /// A registry without checkers (nothing leaves the machine in unit tests).
    pub(crate) fn registry(max_in_flight: usize) -> MemberRegistry {
        MemberRegistry::new(registry_config(max_in_flight))
    }

    fn registry_config(max_in_flight: usize) -> MemberRegistryConfig {
        MemberRegistryConfig {
            max_in_flight,
            max_per_source: max_in_flight,
            reserve_percent: 0,
            pool: PoolSettings {
                max_idle: 4,
                workers: 1,
                idle_timeout: Duration::from_secs(8),
                opened: prometheus::IntCounter::new("t", "t").expect("counter"),
            },
            health: health::HealthSettings::default(),
            metrics: HealthMetrics::detached(),
            rotate: RotateStore::in_memory(),
            checkers: None,
        }
    }

    impl MemberRegistry {
        pub(crate) fn member(&self, addr: &str) -> Arc<Member> {
            self.get(addr, Probe::default)
        }
    }

    #[test]
    fn passive_failures_eject_and_rotate_blocks() {
        let r = registry(2);
        let b = r.member("10.0.0.1:80");
        assert!(b.eligible(), "no checkers: up from the start");
        for _ in 0..3 {
            b.health.record_failure();
        }
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

    /// Taking a slot without waiting follows the waiting way's rules: the
    /// member's slots, the client's share and the reserve, each counted back
    /// when it cannot take one.
    #[tokio::test]
    async fn a_slot_taken_now_follows_the_share_and_the_reserve_and_leaks_nothing() {
        let r = MemberRegistry::new(MemberRegistryConfig {
            max_per_source: 2,
            reserve_percent: 25,
            ..registry_config(4)
        });
        let b = r.member("10.0.0.1:80");
        let heavy = key("192.0.2.1");
        let first = b.try_acquire(Some(heavy)).expect("a free slot");
        let second = b.try_acquire(Some(heavy)).expect("its second");
        assert!(b.try_acquire(Some(heavy)).is_none(), "its share is two");
        assert_eq!(b.in_flight(), 2, "a refused try holds nothing");
        let light = b
            .try_acquire(Some(key("192.0.2.2")))
            .expect("another client");
        let other = b
            .try_acquire(Some(key("192.0.2.3")))
            .expect("the reserve: light");
        assert!(
            b.try_acquire(Some(key("192.0.2.4"))).is_none(),
            "all four taken"
        );
        assert_eq!(b.in_flight(), 4);
        drop((first, second, light, other));
        assert_eq!(b.in_flight(), 0);
        // What the tries gave back, the waiting way takes again.
        let again = b.acquire(Duration::ZERO, Some(heavy)).await.expect("slot");
        let twice = b.acquire(Duration::ZERO, Some(heavy)).await.expect("slot");
        drop((again, twice));
        assert_eq!(b.in_flight(), 0);
    }

    #[tokio::test]
    async fn drain_waits_for_in_flight() {
        let r = registry(2);
        let b = r.member("10.0.0.1:80");
        let slot = b.acquire(Duration::ZERO, None).await.expect("slot");
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
    fn same_address_same_member_until_dropped() {
        let r = registry(2);
        let a = r.member("10.0.0.1:80");
        let b = r.member("10.0.0.1:80");
        assert!(Arc::ptr_eq(&a, &b));
        drop((a, b));
        let c = r.member("10.0.0.1:80");
        assert_eq!(
            Arc::strong_count(&c),
            1,
            "a fresh member after all were dropped"
        );
    }

    #[tokio::test]
    async fn slots_bound_in_flight_and_free_on_drop() {
        let r = registry(2);
        let b = r.member("10.0.0.1:80");
        let one = b.acquire(Duration::ZERO, None).await.expect("slot 1");
        let _two = b.acquire(Duration::ZERO, None).await.expect("slot 2");
        assert_eq!(b.in_flight(), 2);
        assert_eq!(
            b.acquire(Duration::from_millis(10), None).await.err(),
            Some(Full::Member),
            "full"
        );
        drop(one);
        assert_eq!(b.in_flight(), 1);
        assert!(b.acquire(Duration::ZERO, None).await.is_ok());
    }

    #[tokio::test]
    async fn one_client_address_holds_at_most_its_share() {
        let mut r = registry(4);
        r.max_per_source = 2;
        let b = r.member("10.0.0.1:80");
        let (a, c) = (key("192.0.2.1"), key("192.0.2.2"));
        let a1 = b.acquire(Duration::ZERO, Some(a)).await.expect("a 1");
        let a2 = b.acquire(Duration::ZERO, Some(a)).await.expect("a 2");
        assert_eq!(
            b.acquire(Duration::from_millis(20), Some(a)).await.err(),
            Some(Full::Source),
            "refused once its own slots stayed taken for the queue timeout"
        );
        // An address at its share gets the next of its own slots that comes back.
        let waiter = {
            let b = b.clone();
            tokio::spawn(async move { b.acquire(Duration::from_secs(30), Some(a)).await })
        };
        tokio::task::yield_now().await;
        drop(a2);
        let _a2 = waiter
            .await
            .expect("join")
            .expect("served when its own slot came back");
        let _c1 = b
            .acquire(Duration::ZERO, Some(c))
            .await
            .expect("another address");
        let _c2 = b
            .acquire(Duration::ZERO, Some(c))
            .await
            .expect("another address");
        assert_eq!(b.in_flight(), 4);
        // Full: a wait that ends in vain counts nothing for the address.
        drop(a1);
        let _a3 = b
            .acquire(Duration::ZERO, Some(a))
            .await
            .expect("a's freed slot");
        assert_eq!(
            b.acquire(Duration::from_millis(10), Some(c)).await.err(),
            Some(Full::Source)
        );
        let sources = b.sources.as_ref().expect("limited");
        assert_eq!(sources.count(a), Some(2));
        assert_eq!(sources.count(c), Some(2));
    }

    #[tokio::test]
    async fn a_returned_slot_goes_to_its_own_address_first_in_line() {
        let mut r = registry(8);
        r.max_per_source = 1;
        let b = r.member("10.0.0.1:80");
        let (a, c) = (key("192.0.2.1"), key("192.0.2.2"));
        let a1 = b.acquire(Duration::ZERO, Some(a)).await.expect("a");
        let c1 = b.acquire(Duration::ZERO, Some(c)).await.expect("c");
        let wait = |ip| {
            let b = b.clone();
            tokio::spawn(async move { b.acquire(Duration::from_secs(5), Some(ip)).await })
        };
        let (first, second, other) = (wait(a), wait(a), wait(c));
        tokio::task::yield_now().await;
        // A slot of `a` comes back: the first waiter of `a` gets it, nobody else.
        drop(a1);
        let first = first.await.expect("join").expect("served");
        tokio::task::yield_now().await;
        assert!(!second.is_finished() && !other.is_finished());
        drop(first);
        let _second = second.await.expect("join").expect("served next");
        assert!(!other.is_finished());
        drop(c1);
        let _other = other.await.expect("join").expect("c's own slot");
    }

    #[tokio::test]
    async fn a_cancelled_wait_leaves_no_entry_behind() {
        let mut r = registry(8);
        r.max_per_source = 1;
        let b = r.member("10.0.0.1:80");
        let a = key("192.0.2.1");
        let a1 = b.acquire(Duration::ZERO, Some(a)).await.expect("a");
        let waiter = {
            let b = b.clone();
            tokio::spawn(async move { b.acquire(Duration::from_secs(5), Some(a)).await })
        };
        tokio::task::yield_now().await;
        // The client goes away mid-wait, then the holder finishes.
        waiter.abort();
        let _ = waiter.await;
        drop(a1);
        assert_eq!(b.sources.as_ref().expect("limited").count(a), None);
        assert_eq!(b.in_flight(), 0);
    }

    #[tokio::test]
    async fn a_vain_wait_gives_the_address_its_count_back() {
        let mut r = registry(2);
        r.max_per_source = 1;
        let b = r.member("10.0.0.1:80");
        let (a, c, d) = (key("192.0.2.1"), key("192.0.2.2"), key("192.0.2.3"));
        let _a = b.acquire(Duration::ZERO, Some(a)).await.expect("a");
        let _c = b.acquire(Duration::ZERO, Some(c)).await.expect("c");
        assert_eq!(
            b.acquire(Duration::from_millis(10), Some(d)).await.err(),
            Some(Full::Member)
        );
        assert_eq!(b.sources.as_ref().expect("limited").count(d), None);
        assert_eq!(b.in_flight(), 2);
    }
}
