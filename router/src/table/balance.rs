//! Choosing a member for a request.
//!
//! - [`Balance::P2c`] (default): power of two choices on least outstanding requests.
//!   Two members are drawn at random and the one with fewer requests in flight and
//!   open tunnels (WebSocket, passthrough, TCP ports: see [`Member::load`]) wins:
//!   nearly as good as scanning every member for the least loaded, at O(1), and it
//!   keeps a slow or stuck member from collecting a queue (round robin would keep
//!   sending it its share).
//! - [`Balance::RoundRobin`]: each member in turn.
//!
//! Either way a member warming up after it came up (`upstream.slow_start`, see
//! [`crate::members::warm`]) is a candidate for only its share of picks.
//!
//! Cookies pass untouched either way, so the gear haproxy's `GEAR` stickiness still
//! pins a session to a gear behind the member.

use std::sync::atomic::{AtomicUsize, Ordering};

use serde::Deserialize;

use crate::members::Member;
use crate::members::warm::Draw;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Balance {
    #[default]
    P2c,
    RoundRobin,
}

/// What a balancer picks from: a route's entry for one member.
pub trait Candidate {
    fn member(&self) -> &Member;
}

impl Balance {
    /// Picks from `items` among those [eligible](Member::eligible), never `not` (the
    /// member a retry moves away from); `cursor` is the route's round-robin position.
    /// If none is eligible and `fail_open` is set, picks among all members not
    /// rotated out: when every member looks down, the checks are more likely wrong
    /// than every gear (a bad check path, a network blip), and trying beats a
    /// certain 503.
    pub fn pick<'a, T: Candidate>(
        self,
        items: &'a [T],
        cursor: &AtomicUsize,
        fail_open: bool,
        not: Option<&Member>,
    ) -> Option<&'a T> {
        let other = |m: &Member| not.is_none_or(|n| !std::ptr::eq(m, n));
        // One turn of the cursor per pick, whichever pass answers: advancing it in
        // both passes sent every fail-open pick (new members, all unknown) to the
        // same member when there were two.
        let start = match self {
            Balance::RoundRobin => cursor.fetch_add(1, Ordering::Relaxed),
            Balance::P2c => 0,
        };
        // Slow start: a warming member is a candidate only for its share of
        // picks; when none else is, it takes the request anyway.
        let draw = Draw::default();
        let admitted = |m: &Member| m.eligible() && other(m) && draw.admits(m.health.share());
        if let Some(t) = self.pick_among(items, start, admitted) {
            return Some(t);
        }
        if draw.met()
            && let Some(t) = self.pick_among(items, start, |m| m.eligible() && other(m))
        {
            return Some(t);
        }
        if fail_open {
            return self.pick_among(items, start, |m| !m.rotated_out() && other(m));
        }
        None
    }

    fn pick_among<T: Candidate>(
        self,
        items: &[T],
        start: usize,
        ok: impl Fn(&Member) -> bool,
    ) -> Option<&T> {
        let n = items.len();
        match n {
            0 => None,
            1 => items.first().filter(|t| ok(t.member())),
            _ => match self {
                Balance::RoundRobin => (0..n)
                    .filter_map(|i| items.get((start + i) % n))
                    .find(|t| ok(t.member())),
                Balance::P2c => {
                    let a = fastrand::usize(..n);
                    // A second, different member: offset by 1..n.
                    let b = (a + 1 + fastrand::usize(..n - 1)) % n;
                    let (ta, tb) = (items.get(a)?, items.get(b)?);
                    let (ma, mb) = (ta.member(), tb.member());
                    match (ok(ma), ok(mb)) {
                        (true, true) => Some(if mb.load() < ma.load() { tb } else { ta }),
                        // Some members are out: the least busy of the others. Rare,
                        // and routes have few members, so a scan is fine.
                        _ => items
                            .iter()
                            .filter(|t| ok(t.member()))
                            .min_by_key(|t| t.member().load()),
                    }
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::members::tests::registry;

    /// Candidates are plain members here.
    impl Candidate for Arc<Member> {
        fn member(&self) -> &Member {
            self
        }
    }

    fn members(n: usize) -> (Vec<Arc<Member>>, crate::members::MemberRegistry) {
        let r = registry(1000);
        let ms = (0..n)
            .map(|i| r.member(&format!("10.0.0.{i}:80")))
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
                    .pick(&ms, &cursor, true, None)
                    .expect("m")
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

    /// With no member eligible (new ones not checked yet, or all down) fail-open
    /// round robin still takes turns: the cursor moves once per pick.
    #[test]
    fn fail_open_round_robin_takes_turns() {
        let (ms, _r) = members(2);
        for m in &ms {
            for _ in 0..3 {
                m.health.record_failure();
            }
        }
        assert!(ms.iter().all(|m| !m.eligible()));
        let cursor = AtomicUsize::new(0);
        let picked: Vec<bool> = (0..4)
            .map(|_| {
                let m = Balance::RoundRobin
                    .pick(&ms, &cursor, true, None)
                    .expect("fail open");
                Arc::ptr_eq(m, &ms[0])
            })
            .collect();
        assert_eq!(picked, [true, false, true, false]);
    }

    #[tokio::test]
    async fn p2c_avoids_the_busy_member() {
        let (ms, _r) = members(2);
        // Member 0 has 5 requests in flight; member 1 none.
        let mut held = Vec::new();
        for _ in 0..5 {
            held.push(ms[0].acquire(Duration::ZERO, None).await.expect("slot"));
        }
        let cursor = AtomicUsize::new(0);
        for _ in 0..100 {
            let m = Balance::P2c.pick(&ms, &cursor, true, None).expect("member");
            assert!(Arc::ptr_eq(m, &ms[1]), "always the idle one");
        }
    }

    #[test]
    fn p2c_spreads_over_idle_members() {
        let (ms, _r) = members(4);
        let cursor = AtomicUsize::new(0);
        let mut counts = std::collections::HashMap::new();
        for _ in 0..4000 {
            let m = Balance::P2c.pick(&ms, &cursor, true, None).expect("member");
            *counts.entry(m.addr.to_string()).or_insert(0) += 1;
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
            ms[0].health.record_failure();
        }
        r.rotate(&ms[1].addr, true).expect("rotate");
        let cursor = AtomicUsize::new(0);
        for balance in [Balance::P2c, Balance::RoundRobin] {
            for _ in 0..50 {
                let m = balance.pick(&ms, &cursor, true, None).expect("member");
                assert!(Arc::ptr_eq(m, &ms[2]), "{balance:?}");
            }
        }
        // All out: fail open goes to the down one (never the rotated-out one)...
        for _ in 0..3 {
            ms[2].health.record_failure();
        }
        for _ in 0..50 {
            let m = Balance::P2c
                .pick(&ms, &cursor, true, None)
                .expect("fail open");
            assert!(!Arc::ptr_eq(m, &ms[1]));
        }
        // ...and without fail open, nothing.
        assert!(Balance::P2c.pick(&ms, &cursor, false, None).is_none());
        assert!(
            Balance::RoundRobin
                .pick(&ms, &cursor, false, None)
                .is_none()
        );
    }

    #[test]
    fn a_retry_never_picks_the_member_it_moves_away_from() {
        let (ms, r) = members(3);
        let cursor = AtomicUsize::new(0);
        for balance in [Balance::P2c, Balance::RoundRobin] {
            for _ in 0..100 {
                let m = balance
                    .pick(&ms, &cursor, true, Some(&ms[0]))
                    .expect("other");
                assert!(!Arc::ptr_eq(m, &ms[0]), "{balance:?}");
            }
        }
        // The others down: fail open still applies to a retry (but never to `not`);
        // without it, no retry.
        for _ in 0..3 {
            ms[1].health.record_failure();
            ms[2].health.record_failure();
        }
        let m = Balance::P2c
            .pick(&ms, &cursor, true, Some(&ms[0]))
            .expect("fail open");
        assert!(!Arc::ptr_eq(m, &ms[0]));
        assert!(
            Balance::P2c
                .pick(&ms, &cursor, false, Some(&ms[0]))
                .is_none()
        );
        // Rotated out is never picked, not even failing open.
        r.rotate(&ms[1].addr, true).expect("rotate");
        r.rotate(&ms[2].addr, true).expect("rotate");
        assert!(
            Balance::P2c
                .pick(&ms, &cursor, true, Some(&ms[0]))
                .is_none()
        );
    }

    /// Slow start: a member halfway through its warm-up takes about half of
    /// a warm member's share with either balancer, and all of it once it is
    /// the only member that can take the request.
    #[test]
    fn a_warming_member_takes_its_share() {
        let (ms, r) = members(2);
        r.set_health(crate::members::health::HealthSettings {
            slow_start: Duration::from_secs(100),
            ..Default::default()
        });
        ms[1].health.warmup().began_ago(Duration::from_secs(50));
        let share = ms[1].health.share().expect("warming");
        assert!((0.49..0.52).contains(&share), "{share}");
        let cursor = AtomicUsize::new(0);
        for balance in [Balance::P2c, Balance::RoundRobin] {
            let picks = 20_000;
            let warming = (0..picks)
                .filter(|_| {
                    let m = balance.pick(&ms, &cursor, true, None).expect("member");
                    Arc::ptr_eq(m, &ms[1])
                })
                .count();
            // Warm, each would take half; at share 0.5 a quarter.
            let fraction = warming as f64 / picks as f64;
            assert!(
                (0.22..0.28).contains(&fraction),
                "{balance:?}: the warming member took {fraction} of the picks"
            );
            // The other out (a retry moving away from it): the warming one takes all.
            for _ in 0..100 {
                let m = balance
                    .pick(&ms, &cursor, false, Some(&ms[0]))
                    .expect("the warming member, whatever its share");
                assert!(Arc::ptr_eq(m, &ms[1]));
            }
        }
    }
}
