//! Consistent hashing for apps balanced by a key (`balance`: `source`, a
//! header, a cookie): the member with the highest score for the key wins,
//! each member's score a hash of the key and the member's address
//! (rendezvous hashing, Thaler and Ravishankar 1998).
//!
//! Why rendezvous and not Maglev or a ring: an app has a handful of members
//! (a gear's load balancers, rarely more than 20), where scoring each is a
//! few dozen instructions a member and needs no table built per route or
//! kept in step with health; and a member that leaves moves exactly its own
//! keys, each to its second-best member, no other key moving (measured in the
//! tests below: 0 of the other keys move; a ring moves its neighbours' share
//! with too few virtual nodes, Maglev up to a few percent). The score is the
//! same on both routers of a pair (FNV-1a and a SplitMix64 finish: fixed, no
//! per-process seed), so a key lands on the same member on either.
//!
//! Health, rotate-out and slow start hold as for the other balancers: only
//! eligible members score; a warming member takes only its share of its
//! keys (the others go to their next-best member meanwhile); with none
//! eligible and `health.fail_open`, every member not rotated out scores.

use super::balance::Candidate;
use crate::members::Member;
use crate::members::warm::Draw;

/// 64-bit FNV-1a over `bytes`, from `seed`.
fn fnv(seed: u64, bytes: &[u8]) -> u64 {
    let mut h = seed;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// SplitMix64's finish: FNV's low bits mix poorly on their own.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A key's hash (hashed once a request; each member's score starts from it).
pub fn key_hash(key: &[u8]) -> u64 {
    fnv(0xcbf2_9ce4_8422_2325, key)
}

/// The score of `member` for a key hashed `key`.
fn score(key: u64, member: &Member) -> u64 {
    mix(fnv(key, member.addr.as_bytes()))
}

/// The member `key` (see [`key_hash`]) goes to among `items`, never `not`:
/// the highest-scoring admitted member (see the module doc).
pub fn pick<'a, T: Candidate>(
    items: &'a [T],
    key: u64,
    fail_open: bool,
    not: Option<&Member>,
) -> Option<&'a T> {
    let other = |m: &Member| not.is_none_or(|n| !std::ptr::eq(m, n));
    let best = |ok: &dyn Fn(&Member) -> bool| {
        items
            .iter()
            .filter(|t| ok(t.member()))
            .max_by_key(|t| score(key, t.member()))
    };
    let draw = Draw::default();
    if let Some(t) = best(&|m| m.eligible() && other(m) && draw.admits(m.health.share())) {
        return Some(t);
    }
    if let Some(t) = best(&|m| m.eligible() && other(m)) {
        return Some(t);
    }
    if fail_open {
        return best(&|m| !m.rotated_out() && other(m));
    }
    None
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::members::tests::registry;

    fn members(n: usize, r: &crate::members::MemberRegistry) -> Vec<Arc<Member>> {
        (0..n)
            .map(|i| r.member(&format!("10.0.0.{i}:80")))
            .collect()
    }

    fn owner(ms: &[Arc<Member>], key: &str) -> String {
        pick(ms, key_hash(key.as_bytes()), true, None)
            .map(|m| m.addr.to_string())
            .expect("a member")
    }

    #[test]
    fn a_member_that_leaves_moves_only_its_own_keys_and_the_keys_spread_evenly() {
        let r = registry(1000);
        let all = members(5, &r);
        let keys: Vec<String> = (0..20_000).map(|i| format!("user-{i}")).collect();
        let before: Vec<String> = keys.iter().map(|k| owner(&all, k)).collect();
        // Even: each of 5 members within 10 % of a fifth.
        for m in &all {
            let n = before.iter().filter(|o| **o == *m.addr).count();
            assert!((3600..=4400).contains(&n), "{}: {n} of 20 000", m.addr);
        }
        // Member 2 leaves: only its keys move.
        let gone = all[2].addr.to_string();
        let rest: Vec<Arc<Member>> = all.iter().filter(|m| *m.addr != *gone).cloned().collect();
        let mut moved_others = 0;
        for (k, was) in keys.iter().zip(&before) {
            let now = owner(&rest, k);
            if *was != gone && now != *was {
                moved_others += 1;
            }
        }
        assert_eq!(moved_others, 0, "keys of members that stayed moved");
        // Back again: every key where it was.
        let again: Vec<String> = keys.iter().map(|k| owner(&all, k)).collect();
        assert_eq!(again, before);
    }

    #[test]
    fn a_rotated_out_member_scores_nothing_and_not_is_avoided() {
        let r = registry(1000);
        let ms = members(3, &r);
        let key = key_hash(b"alice");
        let first = pick(&ms, key, false, None).expect("member").addr.clone();
        let first_member = ms.iter().find(|m| m.addr == first).expect("found");
        let second = pick(&ms, key, false, Some(first_member)).expect("other");
        assert_ne!(second.addr, first);
        r.rotate(&first, true).expect("rotate");
        assert_eq!(
            pick(&ms, key, false, None).expect("member").addr,
            second.addr
        );
    }
}
