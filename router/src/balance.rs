//! Choosing a member for a request.
//!
//! - [`Balance::P2c`] (default): power of two choices on least outstanding requests.
//!   Two members are drawn at random and the one with fewer requests in flight wins:
//!   nearly as good as scanning every member for the least loaded, at O(1), and it
//!   keeps a slow or stuck member from collecting a queue (round robin would keep
//!   sending it its share).
//! - [`Balance::RoundRobin`]: each member in turn.
//!
//! Cookies pass untouched either way, so the gear haproxy's `GEAR` stickiness still
//! pins a session to a gear behind the member.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde::Deserialize;

use crate::table::Member;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Balance {
    #[default]
    P2c,
    RoundRobin,
}

impl Balance {
    /// Picks from `members` among those [eligible](crate::backend::Backend::eligible);
    /// `cursor` is the route's round-robin position. If none is eligible and
    /// `fail_open` is set, picks among all members not rotated out: when every
    /// member looks down, the checks are more likely wrong than every gear (a bad
    /// check path, a network blip), and trying beats a certain 503.
    pub fn pick<'a>(
        self,
        members: &'a [Member],
        cursor: &AtomicUsize,
        fail_open: bool,
    ) -> Option<&'a Member> {
        if let Some(m) = self.pick_among(members, cursor, |m| m.backend.eligible()) {
            return Some(m);
        }
        if fail_open {
            return self.pick_among(members, cursor, |m| !m.backend.rotated_out());
        }
        None
    }

    fn pick_among<'a>(
        self,
        members: &'a [Member],
        cursor: &AtomicUsize,
        ok: impl Fn(&Member) -> bool,
    ) -> Option<&'a Member> {
        let n = members.len();
        match n {
            0 => None,
            1 => members.first().filter(|m| ok(m)),
            _ => match self {
                Balance::RoundRobin => {
                    let start = cursor.fetch_add(1, Ordering::Relaxed);
                    (0..n)
                        .filter_map(|i| members.get((start + i) % n))
                        .find(|m| ok(m))
                }
                Balance::P2c => {
                    let a = random_below(n);
                    // A second, different member: offset by 1..n.
                    let b = (a + 1 + random_below(n - 1)) % n;
                    let (ma, mb) = (members.get(a)?, members.get(b)?);
                    match (ok(ma), ok(mb)) {
                        (true, true) => Some(if mb.backend.in_flight() < ma.backend.in_flight() {
                            mb
                        } else {
                            ma
                        }),
                        // Some members are out: the least busy of the others. Rare,
                        // and routes have few members, so a scan is fine.
                        _ => members
                            .iter()
                            .filter(|m| ok(m))
                            .min_by_key(|m| m.backend.in_flight()),
                    }
                }
            },
        }
    }
}

thread_local! {
    /// xorshift64* state per thread: no lock and no shared cache line on the
    /// request path. Seeded from the thread's stack address and the clock.
    static RNG: Cell<u64> = Cell::new({
        let local = 0u8;
        let addr = &local as *const u8 as u64;
        let time = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        (addr ^ time.rotate_left(17)) | 1
    });
}

/// A number in `0..n` (n > 0); uniform enough for load balancing.
pub(crate) fn random_below(n: usize) -> usize {
    RNG.with(|s| {
        let mut x = s.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        s.set(x);
        (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 32) as usize % n
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::backend::tests::registry;

    fn members(n: usize) -> (Vec<Member>, crate::backend::Registry) {
        let r = registry(1000);
        let ms = (0..n)
            .map(|i| {
                let addr = format!("10.0.0.{i}:80");
                Member {
                    backend: r.member(&addr),
                    authority: addr.parse().expect("authority"),
                    tls: false,
                }
            })
            .collect();
        (ms, r)
    }

    #[test]
    fn round_robin_takes_turns() {
        let (ms, _r) = members(3);
        let cursor = AtomicUsize::new(0);
        let picked: Vec<String> = (0..6)
            .map(|_| {
                Balance::RoundRobin
                    .pick(&ms, &cursor, true)
                    .expect("m")
                    .backend
                    .addr
                    .to_string()
            })
            .collect();
        assert_eq!(picked[..3], picked[3..]);
        assert_eq!(
            picked[..3]
                .iter()
                .collect::<std::collections::BTreeSet<_>>()
                .len(),
            3
        );
    }

    #[tokio::test]
    async fn p2c_avoids_the_busy_member() {
        let (ms, _r) = members(2);
        // Member 0 has 5 requests in flight; member 1 none.
        let mut held = Vec::new();
        for _ in 0..5 {
            held.push(ms[0].backend.acquire(Duration::ZERO).await.expect("slot"));
        }
        let cursor = AtomicUsize::new(0);
        for _ in 0..100 {
            let m = Balance::P2c.pick(&ms, &cursor, true).expect("member");
            assert!(
                Arc::ptr_eq(&m.backend, &ms[1].backend),
                "always the idle one"
            );
        }
    }

    #[test]
    fn p2c_spreads_over_idle_members() {
        let (ms, _r) = members(4);
        let cursor = AtomicUsize::new(0);
        let mut counts = std::collections::HashMap::new();
        for _ in 0..4000 {
            let m = Balance::P2c.pick(&ms, &cursor, true).expect("member");
            *counts.entry(m.backend.addr.to_string()).or_insert(0) += 1;
        }
        assert_eq!(counts.len(), 4, "{counts:?}");
        assert!(
            counts.values().all(|c| *c > 500),
            "roughly even: {counts:?}"
        );
    }

    #[test]
    fn down_members_are_skipped_unless_all_are_down() {
        let (ms, r) = members(3);
        for _ in 0..3 {
            ms[0].backend.record_failure();
        }
        r.rotate(&ms[1].backend.addr, true).expect("rotate");
        let cursor = AtomicUsize::new(0);
        for balance in [Balance::P2c, Balance::RoundRobin] {
            for _ in 0..50 {
                let m = balance.pick(&ms, &cursor, true).expect("member");
                assert!(Arc::ptr_eq(&m.backend, &ms[2].backend), "{balance:?}");
            }
        }
        // All out: fail open goes to the down one (never the rotated-out one)...
        for _ in 0..3 {
            ms[2].backend.record_failure();
        }
        for _ in 0..50 {
            let m = Balance::P2c.pick(&ms, &cursor, true).expect("fail open");
            assert!(!Arc::ptr_eq(&m.backend, &ms[1].backend));
        }
        // ...and without fail open, nothing.
        assert!(Balance::P2c.pick(&ms, &cursor, false).is_none());
        assert!(Balance::RoundRobin.pick(&ms, &cursor, false).is_none());
    }

    #[test]
    fn random_below_stays_in_range() {
        for n in 1..50 {
            for _ in 0..100 {
                assert!(random_below(n) < n);
            }
        }
    }
}
