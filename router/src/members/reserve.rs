//! The last slots of a member, kept for client addresses that hold few of them
//! (`upstream.source_reserve`, on by default).
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
//! slot) on take and on release, and one semaphore permit.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How a member's slots are split (see the module doc).
#[derive(Debug)]
pub struct Reserve {
    /// Permits for requests that may not take a reserved slot: `slots - reserve`.
    open: Arc<Semaphore>,
    /// An address holding this many slots takes only open ones.
    light: u32,
    /// Slots held per address (entries removed at zero).
    held: Mutex<HashMap<IpAddr, u32>>,
}

/// An address's claim on a member, given back when dropped.
#[derive(Debug)]
pub struct Claim {
    ip: IpAddr,
    /// An open permit, unless the request took a reserved slot.
    _open: Option<OwnedSemaphorePermit>,
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
            open: Arc::new(Semaphore::new(slots - reserve)),
            light,
            held: Mutex::new(HashMap::new()),
        })
    }

    fn held(&self) -> MutexGuard<'_, HashMap<IpAddr, u32>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes an open permit if one is free, or a reserved place if `ip` holds few
    /// slots; else waits for an open permit until `deadline` (`None`: it did not
    /// come). Counting happens here: the claim is `ip`'s until dropped.
    pub async fn claim(&self, ip: IpAddr, deadline: tokio::time::Instant) -> Option<Claim> {
        let open = match self.open.clone().try_acquire_owned() {
            Ok(p) => Some(p),
            Err(_) if self.holds(ip) < self.light => None,
            Err(_) => {
                let wait = self.open.clone().acquire_owned();
                Some(tokio::time::timeout_at(deadline, wait).await.ok()?.ok()?)
            }
        };
        *self.held().entry(ip).or_insert(0) += 1;
        Some(Claim { ip, _open: open })
    }

    /// Slots `ip` holds now.
    pub fn holds(&self, ip: IpAddr) -> u32 {
        self.held().get(&ip).copied().unwrap_or(0)
    }

    /// Gives `claim` back (its open permit goes back as it drops).
    pub fn release(&self, claim: Claim) {
        let mut held = self.held();
        if let Some(n) = held.get_mut(&claim.ip) {
            *n -= 1;
            if *n == 0 {
                held.remove(&claim.ip);
            }
        }
    }

    /// Open permits free now (tests).
    #[cfg(test)]
    pub fn open_free(&self) -> usize {
        self.open.available_permits()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, last])
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
        // An open permit back: the heavy address goes on.
        r.release(heavy.pop().expect("claim"));
        assert!(r.claim(ip(1), soon()).await.is_some());
    }
}
