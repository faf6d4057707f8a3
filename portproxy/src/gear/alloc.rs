//! The OpenShift v2 allocation formulas (`frontend_proxy.rb port_range`, the container
//! plugin's `get_ip_addr`): each gear UID owns a block of public ports and a /25 of
//! 127/8. Pure arithmetic, checked at the edges and by property tests.
//!
//! v1's off-by-one (uid 6500's block came out empty) and v1's address overflow above
//! uid 131071 are not reproduced: the block is half-open `[begin, begin + n)` and an
//! address outside 127/8 is an error.

use std::net::Ipv4Addr;
use std::ops::RangeInclusive;

use serde::Deserialize;

/// The node.conf numbers; identical on every node of a district.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct Allocation {
    /// `PORTS_PER_USER`.
    pub ports_per_user: u16,
    /// `UID_BEGIN`.
    pub uid_begin: u32,
    /// `WRAPAROUND_UID`.
    pub wraparound_uid: u32,
    /// `IP_ADDRESS_WRAPAROUND_OFFSET` (below 1000): shifts wrapped UIDs off 127.0.0.x.
    pub ip_wraparound_offset: u32,
}

impl Default for Allocation {
    fn default() -> Allocation {
        Allocation {
            ports_per_user: 5,
            uid_begin: 500,
            wraparound_uid: 65536,
            ip_wraparound_offset: 1,
        }
    }
}

/// Why a block or an address cannot be computed.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    #[error("the port range {0}-{1} holds no block of {2} ports")]
    NoBlock(u16, u16, u16),
    #[error("host id {0} is outside 1-127")]
    HostId(u32),
    #[error("uid {0} maps outside 127.0.0.0/8")]
    Overflow(u32),
}

// === impl Allocation ===

impl Allocation {
    pub fn validate(&self) -> Result<(), (&'static str, &'static str)> {
        if self.ports_per_user == 0 {
            return Err(("gear.allocation.ports_per_user", "must be at least 1"));
        }
        if self.wraparound_uid == 0 || self.wraparound_uid > 65536 {
            return Err(("gear.allocation.wraparound_uid", "must be 1-65536"));
        }
        if self.ip_wraparound_offset >= 1000 {
            return Err(("gear.allocation.ip_wraparound_offset", "must be below 1000"));
        }
        Ok(())
    }

    /// The gear's public ports: `begin = ((uid - UID_BEGIN) mod slots) * n + PORT_BEGIN`
    /// with `slots = (end + 1 - PORT_BEGIN) / n`; a UID below `UID_BEGIN` lands in
    /// range too (Ruby's `%` is non-negative).
    pub fn port_block(
        &self,
        uid: u32,
        ports: &RangeInclusive<u16>,
    ) -> Result<RangeInclusive<u16>, AllocError> {
        let n = u32::from(self.ports_per_user);
        let begin = u32::from(*ports.start());
        let end = u32::from(*ports.end());
        let slots = (end + 1 - begin) / n;
        if slots == 0 {
            return Err(AllocError::NoBlock(
                *ports.start(),
                *ports.end(),
                self.ports_per_user,
            ));
        }
        let slot = (i64::from(uid) - i64::from(self.uid_begin)).rem_euclid(i64::from(slots));
        let first = begin + slot as u32 * n;
        let last = first + n - 1;
        // slot < slots and slots * n <= end + 1 - begin, so last <= end <= 65535.
        Ok(u16::try_from(first).unwrap_or(u16::MAX)..=u16::try_from(last).unwrap_or(u16::MAX))
    }

    /// The gear's loopback address number `host_id` (1–127):
    /// `127.0.0.0 + (offset << 7) + ((uid mod WRAPAROUND_UID) << 7) + host_id`, where
    /// offset is `IP_ADDRESS_WRAPAROUND_OFFSET` only once the UID has wrapped.
    pub fn address(&self, uid: u32, host_id: u32) -> Result<Ipv4Addr, AllocError> {
        if !(1..=127).contains(&host_id) {
            return Err(AllocError::HostId(host_id));
        }
        let offset = if uid < self.wraparound_uid {
            0
        } else {
            self.ip_wraparound_offset
        };
        let within = (u64::from(offset) << 7)
            + (u64::from(uid % self.wraparound_uid) << 7)
            + u64::from(host_id);
        if within > 0x00FF_FFFF {
            return Err(AllocError::Overflow(uid));
        }
        Ok(Ipv4Addr::from(0x7F00_0000 | within as u32))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const PORTS: RangeInclusive<u16> = 35531..=65535;

    fn block(uid: u32) -> RangeInclusive<u16> {
        Allocation::default()
            .port_block(uid, &PORTS)
            .expect("block")
    }

    #[test]
    fn blocks_at_the_edges() {
        assert_eq!(block(500), 35531..=35535);
        assert_eq!(block(1000), 38031..=38035);
        assert_eq!(block(1001), 38036..=38040);
        // The last slot is whole (v1 made it empty).
        assert_eq!(block(6500), 65531..=65535);
        // 6001 slots: uid 6501 wraps to the first block.
        assert_eq!(block(6501), 35531..=35535);
        // Below UID_BEGIN: Ruby's non-negative modulo.
        assert_eq!(block(499), 65531..=65535);
        assert_eq!(block(65536), block(500 + (65536 - 500) % 6001));
    }

    #[test]
    fn addresses_at_the_edges() {
        let a = Allocation::default();
        assert_eq!(a.address(500, 1), Ok(Ipv4Addr::new(127, 0, 250, 1)));
        assert_eq!(a.address(1000, 1), Ok(Ipv4Addr::new(127, 1, 244, 1)));
        assert_eq!(a.address(1001, 1), Ok(Ipv4Addr::new(127, 1, 244, 129)));
        // A wrapped uid is shifted off 127.0.0.x: never 127.0.0.1.
        assert_eq!(a.address(65536, 1), Ok(Ipv4Addr::new(127, 0, 0, 129)));
        assert_eq!(a.address(0, 1), Ok(Ipv4Addr::new(127, 0, 0, 1)));
        assert_eq!(a.address(500, 0), Err(AllocError::HostId(0)));
        assert_eq!(a.address(500, 128), Err(AllocError::HostId(128)));
    }

    #[test]
    fn a_range_without_a_whole_block_is_an_error() {
        let a = Allocation::default();
        assert!(matches!(
            a.port_block(500, &(40000..=40003)),
            Err(AllocError::NoBlock(..))
        ));
    }

    proptest! {
        #[test]
        fn blocks_stay_in_range_and_distinct_uids_of_one_period_never_overlap(
            a in 0u32..6001, b in 0u32..6001, host in 1u32..=127, uid in any::<u32>()
        ) {
            let x = block(500 + a);
            let y = block(500 + b);
            prop_assert!(*x.start() >= 35531 && x.start() <= x.end());
            prop_assert_eq!(x.end() - x.start(), 4);
            if a != b {
                prop_assert!(x.end() < y.start() || y.end() < x.start());
            }
            let any = block(uid);
            prop_assert!(*any.start() >= 35531 && any.start() <= any.end());
            // A narrower range: every block stays inside it.
            let narrow = Allocation::default().port_block(uid, &(40000..=50002)).expect("block");
            prop_assert!(*narrow.start() >= 40000 && *narrow.end() <= 50002);
            let ip = Allocation::default().address(uid, host).expect("in 127/8");
            prop_assert_eq!(ip.octets()[0], 127);
            prop_assert!(ip != Ipv4Addr::new(127, 0, 0, 1) || uid == 0);
        }
    }
}
