//! The last slots of a member, kept for client addresses that hold few of them
//! (`upstream.source_reserve`, on by default). An "address" here is a client
//! key (`per_source::key`: an IPv6 /64 by default), so a client's many
//! addresses in one prefix count as one.
//!
//! Why: a slot is held until the response has been handed to the client, so one
//! address with many slow readers (h2 streams whose window it never opens,
//! `slowhttptest -X`) or many slow requests can hold every slot of a member, and
//! the app answers 503 to everyone else. A fixed per-address share
//! (`upstream.source_share`) does not close that: two addresses at 50 % still take
//! all, and a single busy client behind one address (a load balancer, a load test)
//! is slowed to its share when nobody else is there.
//!
//! The rule instead: of a member's `max_connections_per_backend` slots, the last
//! `reserve` (10 % by default, at least one) go only to requests from addresses
//! that hold fewer than `light` slots of that member (a fifth of the reserve, at
//! least one). Every other request needs an *open* permit too, of which there are
//! `slots - reserve`; past them it waits, up to the queue timeout, for one to come
//! back (503 then, as for a full member). So:
//! - one address alone still gets 90 of 100 slots, no wait on the others;
//! - one address cannot take the reserve: it holds 90 at most, and every other
//!   address finds a slot within the time the reserved ones turn over (one request
//!   each at a time while it holds fewer than `light`);
//! - several heavy addresses share the open slots between them; the reserve lasts
//!   as long as fewer than `reserve / light` of them (5 by default) are each
//!   holding `light` reserved slots.
//!
//! Cost per request: one lock of a small map (entries only for addresses holding a
//! slot, hashed by a multiply: the map never holds more than the member's slots, so
//! a crafted collision costs at most a scan of those) on take and on release, and
//! one atomic add for the open permit (a waker only when someone waits). Measured
//! with `bench/instructions.py`: see `bench/RESULTS.md` ("Fair by default").

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use per_source::ClientKey;
use tokio::sync::Notify;

/// How a member's slots are split (see the module doc).
#[derive(Debug)]
pub struct Reserve {
    /// Open permits left, of `slots - reserve`: for requests that may not take
    /// a reserved slot.
    open: AtomicUsize,
    /// Requests waiting for an open permit, and their wake-up.
    waiting: AtomicUsize,
    freed: Notify,
    /// An address holding this many slots takes only open ones.
    light: u32,
    /// Slots held per address. An entry at zero stays (the same client's next
    /// request finds it) until the map holds more than `2 * slots` entries; then
    /// the zeros go, so it stays bounded.
    held: Mutex<HashMap<ClientKey, u32, BuildHasherDefault<IpHasher>>>,
    slots: usize,
}

/// An address's claim on a member; give it back with [`Reserve::release`].
#[derive(Debug)]
pub struct ReserveSlot {
    ip: ClientKey,
    /// It holds an open permit (else a reserved slot).
    open: bool,
}

/// A multiply-and-fold hash for the few addresses a member's map holds.
#[derive(Default)]
pub struct IpHasher(u64);

impl Hasher for IpHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.0 = (self.0.rotate_left(5) ^ u64::from_le_bytes(word))
                .wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.write_u64(u64::from(n));
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

impl Reserve {
    /// For a member with `slots` slots, `percent` of them reserved; `None` when
    /// nothing is reserved (`percent` 0).
    pub fn new(slots: usize, percent: u8) -> Option<Reserve> {
        if percent == 0 || slots == 0 {
            return None;
        }
        let reserve = (slots * usize::from(percent.min(100)))
            .div_ceil(100)
            .clamp(1, slots);
        let light = u32::try_from(reserve.div_ceil(5))
            .unwrap_or(u32::MAX)
            .max(1);
        Some(Reserve {
            open: AtomicUsize::new(slots - reserve),
            waiting: AtomicUsize::new(0),
            freed: Notify::new(),
            light,
            held: Mutex::new(HashMap::default()),
            slots,
        })
    }

    fn held(&self) -> MutexGuard<'_, HashMap<ClientKey, u32, BuildHasherDefault<IpHasher>>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes an open permit if one is free, or a reserved place if `ip` holds few
    /// slots; else waits for an open permit until `deadline` (`None`: it did not
    /// come). Counting happens here: the claim is `ip`'s until released.
    pub async fn claim(
        &self,
        ip: ClientKey,
        deadline: tokio::time::Instant,
    ) -> Option<ReserveSlot> {
        if let Some(claimed) = self.try_claim(ip) {
            return Some(claimed);
        }
        if !self.wait_open(deadline).await {
            return None;
        }
        *self.held().entry(ip).or_insert(0) += 1;
        Some(ReserveSlot { ip, open: true })
    }

    /// [`Reserve::claim`] without waiting: `None` when it would wait for an open
    /// permit (a heavy client and none open).
    pub fn try_claim(&self, ip: ClientKey) -> Option<ReserveSlot> {
        let open = if self.try_open() {
            true
        } else if self.holds(ip) < self.light {
            false
        } else {
            return None;
        };
        *self.held().entry(ip).or_insert(0) += 1;
        Some(ReserveSlot { ip, open })
    }

    fn try_open(&self) -> bool {
        self.open
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }

    /// Waits for an open permit until `deadline`; true if it got one. A release
    /// counts the permit back before it looks for waiters, and a waiter counts
    /// itself before it looks for a permit, so none is missed.
    async fn wait_open(&self, deadline: tokio::time::Instant) -> bool {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let _gone = Waiting(&self.waiting);
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if self.try_open() {
                return true;
            }
            if tokio::time::timeout_at(deadline, freed).await.is_err() {
                return self.try_open();
            }
        }
    }

    /// Slots `ip` holds now.
    pub fn holds(&self, ip: ClientKey) -> u32 {
        self.held().get(&ip).copied().unwrap_or(0)
    }

    /// Gives `claim` back, its open permit with it.
    pub fn release(&self, claim: ReserveSlot) {
        {
            let mut held = self.held();
            if let Some(n) = held.get_mut(&claim.ip) {
                *n -= 1;
                if *n == 0 && held.len() > 2 * self.slots {
                    held.retain(|_, n| *n > 0);
                }
            }
        }
        if claim.open {
            self.open.fetch_add(1, Ordering::SeqCst);
            if self.waiting.load(Ordering::SeqCst) > 0 {
                self.freed.notify_one();
            }
        }
    }

    /// Open permits free now (tests).
    #[cfg(test)]
    pub fn open_free(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }
}

/// One waiter counted in [`Reserve::wait_open`], however the wait ends.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> ClientKey {
        per_source::KeyRule::default().key([127, 0, 0, last].into())
    }

    #[test]
    fn sizes() {
        assert!(Reserve::new(100, 0).is_none());
        let r = Reserve::new(100, 10).expect("reserve");
        assert_eq!((r.open_free(), r.light), (90, 2));
        let r = Reserve::new(1, 10).expect("reserve");
        assert_eq!((r.open_free(), r.light), (0, 1));
        let r = Reserve::new(8, 50).expect("reserve");
        assert_eq!((r.open_free(), r.light), (4, 1));
    }

    #[tokio::test]
    async fn a_heavy_address_stops_at_the_open_slots_a_light_one_gets_the_reserve() {
        let r = Reserve::new(10, 20).expect("reserve"); // 8 open, 2 reserved, light 1
        let soon = || tokio::time::Instant::now() + std::time::Duration::from_millis(20);
        let mut heavy = Vec::new();
        for _ in 0..8 {
            heavy.push(r.claim(ip(1), soon()).await.expect("open slot"));
        }
        assert!(
            r.claim(ip(1), soon()).await.is_none(),
            "no reserved slot for it"
        );
        let light = r.claim(ip(2), soon()).await.expect("reserved slot");
        assert!(r.claim(ip(2), soon()).await.is_none(), "one at a time");
        assert_eq!(r.holds(ip(2)), 1);
        r.release(light);
        assert_eq!(r.holds(ip(2)), 0);
        // Zeros are swept once the map holds more than twice the slots.
        for last in 10..40 {
            let c = r
                .claim(ip(last), soon())
                .await
                .expect("a reserved or open slot");
            r.release(c);
        }
        assert!(r.held().len() <= 2 * 10 + 1, "{}", r.held().len());
        // An open permit back: the heavy address goes on.
        r.release(heavy.pop().expect("claim"));
        assert!(r.claim(ip(1), soon()).await.is_some());
    }

    #[tokio::test]
    async fn a_waiter_gets_the_open_permit_released_while_it_waits() {
        let r = std::sync::Arc::new(Reserve::new(4, 25).expect("reserve")); // 3 open
        let later = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
        let mut held = Vec::new();
        for _ in 0..3 {
            held.push(r.claim(ip(1), later).await.expect("open"));
        }
        let waiter = {
            let r = r.clone();
            tokio::spawn(async move { r.claim(ip(1), later).await.map(|c| c.open) })
        };
        tokio::task::yield_now().await;
        r.release(held.pop().expect("claim"));
        assert_eq!(waiter.await.expect("join"), Some(true));
        assert_eq!(r.open_free(), 0);
    }
}
