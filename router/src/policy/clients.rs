//! Per-client state of the app limits: a token bucket per (app, client key) for
//! `rate_limit`, a count of requests in flight per (app, client key) for
//! `max_connections_per_client` (nginx's `limit_conn` counts the same thing: a
//! connection counts while it has a request being processed). A client is its
//! [`ClientKey`] (an IPv6 /64 by default), so rotating addresses inside one
//! prefix does not buy a fresh bucket.
//!
//! Bounded: at most [`MAX_TRACKED`] buckets in all. A full shard first forgets the
//! buckets that have refilled (they say nothing a fresh one would not); if none
//! has, a new client is let through untracked and counted
//! (`router_app_limit_untracked_total`): a flood of distinct addresses cannot grow
//! memory, and a rate limit is a fairness tool, not a wall (`allow`/`deny` are).
//! In-flight counts are as many as requests in flight, which the connection limits
//! bound already; an entry goes when its count reaches zero.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use per_source::ClientKey;

use spi_consumer::AppKey;
use token_bucket::{Rate, TokenBucket};

use super::Refused;

/// Buckets kept at most (16 shards): about 64 bytes each, 6 MiB in all.
pub const MAX_TRACKED: usize = 100_000;
const SHARDS: usize = 16;

type Key = (u64, ClientKey);

/// The maps' hasher: a key's first half is already a keyed hash of (app, client)
/// ([`Clients::key`]), so the maps use it as it is instead of hashing it again.
#[derive(Clone, Copy, Debug, Default)]
struct KeyHash(u64);

impl std::hash::Hasher for KeyHash {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only reached for the address half: folded in, cheaply.
        for b in bytes {
            self.0 = self.0.rotate_left(5) ^ u64::from(*b);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 ^= v;
    }
}

type Map<V> = HashMap<Key, V, std::hash::BuildHasherDefault<KeyHash>>;

/// A client's bucket for an app, and what the pair's other router has not
/// been told of it yet.
#[derive(Debug)]
struct Bucket {
    tokens: TokenBucket,
    /// Tokens taken here since the last count sent to the peer (pair only).
    unsent: u32,
    /// Whose it is and its rate, for the peer (which may have no bucket yet).
    app: AppKey,
    rate: Rate,
}

/// One client's requests to one app counted on the pair's other router, or
/// here for it ([`Clients::take_unsent`], [`Clients::add_peer`]).
#[derive(Debug, Clone, PartialEq)]
pub struct PeerCount {
    pub app: AppKey,
    pub rate: Rate,
    pub client: ClientKey,
    pub n: u32,
}

/// A client's requests in flight to an app, and whose they are (for the
/// pair's other router: kept only with a pair, as cloning the app's key for
/// every request cost 130 instructions a request).
#[derive(Debug)]
struct Held {
    n: u32,
    app: Option<AppKey>,
}

/// A client's requests in flight to an app on the pair's other router, or
/// here for it ([`Clients::held_now`], [`Clients::set_peer_held`]).
#[derive(Debug, Clone, PartialEq)]
pub struct PeerHeld {
    pub app: AppKey,
    pub client: ClientKey,
    pub n: u32,
}

/// The state of every app's limits.
#[derive(Debug)]
pub struct Clients {
    buckets: [Mutex<Map<Bucket>>; SHARDS],
    in_flight: Arc<[Mutex<Map<Held>>; SHARDS]>,
    /// The pair's other router's requests in flight, as it last sent them,
    /// counted until `peer_held_until` (a peer that stops sending is
    /// forgotten).
    peer_held: [Mutex<Map<u32>>; SHARDS],
    /// Milliseconds since `started`.
    peer_held_until: std::sync::atomic::AtomicU64,
    started: Instant,
    hasher: std::hash::RandomState,
    /// Clients let through untracked because their shard was full
    /// (`router_app_limit_untracked_total`).
    untracked: prometheus::IntCounter,
    /// A pair shares the rate limits (see [`crate::pair::counts`]): tokens
    /// taken here are counted for the peer.
    shared: std::sync::atomic::AtomicBool,
}

impl Default for Clients {
    /// With a counter of its own (tests).
    fn default() -> Clients {
        let counter = prometheus::IntCounter::new("untracked", "untracked")
            .unwrap_or_else(|_| unreachable!("a fixed, valid name"));
        Clients::new(counter)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Clients {
    pub fn new(untracked: prometheus::IntCounter) -> Clients {
        Clients {
            buckets: std::array::from_fn(|_| Mutex::new(Map::default())),
            in_flight: Arc::new(std::array::from_fn(|_| Mutex::new(Map::default()))),
            peer_held: std::array::from_fn(|_| Mutex::new(Map::default())),
            peer_held_until: std::sync::atomic::AtomicU64::new(0),
            started: Instant::now(),
            hasher: std::hash::RandomState::new(),
            untracked,
            shared: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// From now on, tokens taken here are counted for the pair's other router.
    pub fn share_with_peer(&self) {
        self.shared
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// One keyed hash of (app, client) picks the shard and, with the address, is
    /// the entry's key (two apps' entries for one client share a key only if their
    /// 64-bit hashes collide: never in practice, and the hasher is keyed per process).
    fn key(&self, app: &AppKey, client: ClientKey) -> (Key, usize) {
        let h = self.hasher.hash_one((app, client));
        ((h, client), (h >> 32) as usize % SHARDS)
    }

    /// One token of `client`'s bucket for `app`, or how long until there is one.
    pub fn take_token(&self, app: &AppKey, client: ClientKey, rate: &Rate) -> Result<(), Refused> {
        self.take_token_at(app, client, rate, Instant::now())
    }

    fn take_token_at(
        &self,
        app: &AppKey,
        client: ClientKey,
        rate: &Rate,
        now: Instant,
    ) -> Result<(), Refused> {
        let (key, shard) = self.key(app, client);
        let mut buckets = lock(&self.buckets[shard]);
        let Some(bucket) = self.bucket(&mut buckets, key, (app, rate), now) else {
            self.untracked.inc();
            return Ok(());
        };
        bucket
            .tokens
            .take(rate, now)
            .map_err(|wait| Refused::Rate {
                retry_after: wait.ceil().max(1.0) as u64,
            })?;
        if self.shared.load(std::sync::atomic::Ordering::Relaxed) {
            bucket.unsent = bucket.unsent.saturating_add(1);
        }
        Ok(())
    }

    /// `key`'s bucket in its shard's map, made full if there is none and the
    /// shard has room (first forgetting the buckets that refilled and owe the
    /// peer nothing); `None` when it has none.
    fn bucket<'m>(
        &self,
        buckets: &'m mut Map<Bucket>,
        key: Key,
        (app, rate): (&AppKey, &Rate),
        now: Instant,
    ) -> Option<&'m mut Bucket> {
        if !buckets.contains_key(&key) && buckets.len() >= MAX_TRACKED / SHARDS {
            buckets.retain(|_, b| b.tokens.level(rate, now) < rate.burst || b.unsent > 0);
            if buckets.len() >= MAX_TRACKED / SHARDS {
                return None;
            }
        }
        Some(buckets.entry(key).or_insert_with(|| Bucket {
            tokens: TokenBucket::full(rate, now),
            unsent: 0,
            app: app.clone(),
            rate: *rate,
        }))
    }

    /// The tokens taken here since the last call, by client and app (at most
    /// one entry per bucket kept: [`MAX_TRACKED`]), for the pair's other
    /// router; each bucket's count starts again from zero.
    pub fn take_unsent(&self) -> Vec<PeerCount> {
        let mut out = Vec::new();
        for shard in &self.buckets {
            for ((_, client), b) in lock(shard).iter_mut() {
                if b.unsent > 0 {
                    out.push(PeerCount {
                        app: b.app.clone(),
                        rate: b.rate,
                        client: *client,
                        n: std::mem::take(&mut b.unsent),
                    });
                }
            }
        }
        out
    }

    /// Tokens the pair's other router took for `count`'s client: taken here
    /// too (down to one burst of debt), so that a client counts once across
    /// the pair. Never counted back to the peer.
    pub fn add_peer(&self, count: &PeerCount) {
        self.add_peer_at(count, Instant::now());
    }

    fn add_peer_at(&self, count: &PeerCount, now: Instant) {
        let (key, shard) = self.key(&count.app, count.client);
        let mut buckets = lock(&self.buckets[shard]);
        if let Some(bucket) = self.bucket(&mut buckets, key, (&count.app, &count.rate), now) {
            bucket.tokens.spend(&count.rate, f64::from(count.n), now);
        }
    }

    /// Counts one request of `client` to `app` in flight, unless `max` are
    /// (here and, on a pair, on the other router as it last said).
    pub fn hold(&self, app: &AppKey, client: ClientKey, max: u32) -> Result<ClientSlot, Refused> {
        let (key, shard) = self.key(app, client);
        let peer = self.peer_held_of(key, shard);
        let mut counts = lock(&self.in_flight[shard]);
        let held = counts.entry(key).or_insert_with(|| Held {
            n: 0,
            app: self
                .shared
                .load(std::sync::atomic::Ordering::Relaxed)
                .then(|| app.clone()),
        });
        if held.n.saturating_add(peer) >= max {
            if held.n == 0 {
                counts.remove(&key);
            }
            return Err(Refused::MemberSlot);
        }
        held.n += 1;
        Ok(ClientSlot {
            key,
            shard,
            counts: self.in_flight.clone(),
        })
    }

    /// The peer's count for `key`, while it is fresh (0 without a pair).
    fn peer_held_of(&self, key: Key, shard: usize) -> u32 {
        use std::sync::atomic::Ordering::Relaxed;
        if !self.shared.load(Relaxed) {
            return 0;
        }
        let now = self.started.elapsed().as_millis() as u64;
        if now >= self.peer_held_until.load(Relaxed) {
            return 0;
        }
        lock(&self.peer_held[shard]).get(&key).copied().unwrap_or(0)
    }

    /// Every client's requests in flight here, by app (for the peer).
    pub fn held_now(&self) -> Vec<PeerHeld> {
        let mut out = Vec::new();
        for shard in self.in_flight.iter() {
            for ((_, client), held) in lock(shard).iter() {
                if let Some(app) = &held.app {
                    out.push(PeerHeld {
                        app: app.clone(),
                        client: *client,
                        n: held.n,
                    });
                }
            }
        }
        out
    }

    /// The pair's other router's requests in flight, all of them (what it
    /// does not name holds none there), counted with this router's for
    /// `valid_for` (the peer sends again well within it while it holds any).
    pub fn set_peer_held(&self, held: &[PeerHeld], valid_for: std::time::Duration) {
        let mut by_shard: Vec<Vec<(Key, u32)>> = vec![Vec::new(); SHARDS];
        for h in held {
            let (key, shard) = self.key(&h.app, h.client);
            by_shard[shard].push((key, h.n));
        }
        for (shard, entries) in self.peer_held.iter().zip(by_shard) {
            let mut map = lock(shard);
            map.clear();
            map.extend(entries);
        }
        let until = (self.started.elapsed() + valid_for).as_millis() as u64;
        self.peer_held_until
            .store(until, std::sync::atomic::Ordering::Relaxed);
    }

    /// Requests in flight counted for `app` from `client` (tests, the status page).
    pub fn in_flight(&self, app: &AppKey, client: ClientKey) -> u32 {
        let (key, shard) = self.key(app, client);
        lock(&self.in_flight[shard]).get(&key).map_or(0, |h| h.n)
    }

    /// Buckets kept now.
    pub fn tracked(&self) -> usize {
        self.buckets.iter().map(|b| lock(b).len()).sum()
    }
}

/// One request counted in flight; uncounted when dropped.
#[derive(Debug)]
pub struct ClientSlot {
    key: Key,
    shard: usize,
    counts: Arc<[Mutex<Map<Held>>; SHARDS]>,
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut counts = lock(&self.counts[self.shard]);
        if let Some(held) = counts.get_mut(&self.key) {
            held.n = held.n.saturating_sub(1);
            if held.n == 0 {
                counts.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use per_source::KeyRule;

    use super::*;

    fn app(n: &str) -> AppKey {
        AppKey {
            name: n.into(),
            namespace: "ns".into(),
        }
    }

    #[test]
    fn a_bucket_gives_its_burst_then_its_rate() {
        let c = Clients::default();
        let rate = Rate {
            per_second: 2.0,
            burst: 3.0,
        };
        let ip = key("192.0.2.1");
        let t0 = Instant::now();
        for _ in 0..3 {
            assert!(c.take_token_at(&app("a"), ip, &rate, t0).is_ok());
        }
        let Err(Refused::Rate { retry_after }) = c.take_token_at(&app("a"), ip, &rate, t0) else {
            panic!("the fourth at once is refused");
        };
        assert_eq!(retry_after, 1);
        // Another app, another client: buckets of their own.
        assert!(c.take_token_at(&app("b"), ip, &rate, t0).is_ok());
        assert!(
            c.take_token_at(&app("a"), key("192.0.2.2"), &rate, t0)
                .is_ok()
        );
        // Half a second later: one more token (2 per second).
        let t1 = t0 + Duration::from_millis(500);
        assert!(c.take_token_at(&app("a"), ip, &rate, t1).is_ok());
        assert!(c.take_token_at(&app("a"), ip, &rate, t1).is_err());
    }

    #[test]
    fn a_pair_counts_a_client_once_and_never_echoes_the_peer() {
        let rate = Rate {
            per_second: 1.0,
            burst: 10.0,
        };
        let (a, b) = (Clients::default(), Clients::default());
        a.share_with_peer();
        b.share_with_peer();
        let (ip, t0) = (key("192.0.2.1"), Instant::now());
        for _ in 0..6 {
            assert!(a.take_token_at(&app("a"), ip, &rate, t0).is_ok());
        }
        let counts = a.take_unsent();
        assert_eq!(counts.len(), 1);
        assert_eq!((counts[0].client, counts[0].n), (ip, 6));
        assert!(a.take_unsent().is_empty(), "sent once");
        for c in &counts {
            b.add_peer_at(c, t0);
        }
        // b's bucket lost a's six: four left, then 429.
        let served = (0..10)
            .filter(|_| b.take_token_at(&app("a"), ip, &rate, t0).is_ok())
            .count();
        assert_eq!(served, 4);
        // What b took for a's counts is not sent back; what it served is.
        let back = b.take_unsent();
        assert_eq!(back.len(), 1);
        assert_eq!(back[0].n, 4);
        // A flood of counts costs at most one burst of debt.
        let flood = PeerCount {
            n: 1_000_000,
            ..counts[0].clone()
        };
        b.add_peer_at(&flood, t0);
        let refill = t0 + std::time::Duration::from_secs(11);
        assert!(b.take_token_at(&app("a"), ip, &rate, refill).is_ok());
    }

    #[test]
    fn a_pair_counts_requests_in_flight_once_while_the_peer_says_so() {
        let (a, b) = (Clients::default(), Clients::default());
        a.share_with_peer();
        b.share_with_peer();
        let ip = key("192.0.2.1");
        let held: Vec<ClientSlot> = (0..2)
            .map(|_| a.hold(&app("a"), ip, 3).expect("held on a"))
            .collect();
        let now = a.held_now();
        assert_eq!(now.len(), 1);
        assert_eq!((now[0].client, now[0].n), (ip, 2));
        b.set_peer_held(&now, Duration::from_secs(60));
        let third = b.hold(&app("a"), ip, 3).expect("the third, on b");
        assert!(
            matches!(b.hold(&app("a"), ip, 3), Err(Refused::MemberSlot)),
            "a fourth across the pair is refused"
        );
        assert_eq!(b.in_flight(&app("a"), ip), 1, "a refusal leaves no count");
        // Another app is not touched; a's requests end: b counts its own only.
        assert!(b.hold(&app("b"), ip, 1).is_ok());
        drop(held);
        b.set_peer_held(&a.held_now(), Duration::from_secs(60));
        assert!(b.hold(&app("a"), ip, 3).is_ok());
        drop(third);
        // A peer that stops sending is forgotten.
        b.set_peer_held(&now, Duration::ZERO);
        let all: Vec<ClientSlot> = (0..3)
            .map(|_| b.hold(&app("a"), ip, 3).expect("b alone"))
            .collect();
        assert_eq!(all.len(), 3);
    }

    #[test]
    fn holds_count_until_dropped_and_leave_nothing_behind() {
        let c = Clients::default();
        let ip = key("192.0.2.1");
        let a = c.hold(&app("a"), ip, 2).expect("first");
        let b = c.hold(&app("a"), ip, 2).expect("second");
        assert!(matches!(c.hold(&app("a"), ip, 2), Err(Refused::MemberSlot)));
        drop(a);
        let again = c.hold(&app("a"), ip, 2).expect("room again");
        drop((b, again));
        assert_eq!(c.in_flight(&app("a"), ip), 0);
        assert!(c.in_flight.iter().all(|s| lock(s).is_empty()));
    }

    #[test]
    fn a_flood_of_addresses_stays_bounded() {
        let c = Clients::default();
        let rate = Rate {
            per_second: 1.0,
            burst: 1.0,
        };
        let t0 = Instant::now();
        for i in 0..(MAX_TRACKED as u32 + 5_000) {
            let ip = KeyRule::default().key(std::net::Ipv4Addr::from(0x0a00_0000 + i).into());
            let _ = c.take_token_at(&app("a"), ip, &rate, t0);
        }
        assert!(c.tracked() <= MAX_TRACKED);
        assert!(c.untracked.get() >= 5_000);
        // Once they refilled, the old buckets make room for new clients.
        let later = t0 + Duration::from_secs(2);
        let ip = key("198.51.100.1");
        assert!(c.take_token_at(&app("a"), ip, &rate, later).is_ok());
        assert!(
            c.take_token_at(&app("a"), ip, &rate, later).is_err(),
            "tracked again"
        );
    }

    fn key(ip: &str) -> ClientKey {
        KeyRule::default().key(ip.parse().expect("ip"))
    }

    #[test]
    fn one_ipv6_64_shares_a_bucket_and_mapped_ipv4_is_the_ipv4_address() {
        let c = Clients::default();
        let rate = Rate {
            per_second: 1.0,
            burst: 2.0,
        };
        let t0 = Instant::now();
        assert!(
            c.take_token_at(&app("a"), key("2001:db8:1:2::1"), &rate, t0)
                .is_ok()
        );
        assert!(
            c.take_token_at(&app("a"), key("2001:db8:1:2::2"), &rate, t0)
                .is_ok()
        );
        assert!(
            c.take_token_at(&app("a"), key("2001:db8:1:2:ffff::3"), &rate, t0)
                .is_err(),
            "a third address of the same /64 finds the bucket empty"
        );
        assert!(
            c.take_token_at(&app("a"), key("2001:db8:1:3::1"), &rate, t0)
                .is_ok()
        );
        assert_eq!(key("::ffff:192.0.2.1"), key("192.0.2.1"));
    }
}
