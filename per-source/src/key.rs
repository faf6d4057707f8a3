//! The client key: who a client is for every per-client count of both binaries.
//!
//! One host may hold a whole IPv6 /64 (SLAAC privacy addresses, a subscriber's
//! delegated prefix), so counting IPv6 addresses one by one lets a single client
//! rotate addresses past every per-client bound: tried against an app limited to
//! 10 requests per second, 100 requests from 100 addresses of one /64 were all
//! served. Every count (connections per source, a member's share and reserve,
//! `rate_limit`, `max_connections_per_client`) therefore keys a client by the
//! prefix of its address: the whole IPv4 address and the IPv6 /64 by default
//! (haproxy's `ipmask(32,64)`), both lengths configurable. An IPv4-mapped IPv6
//! address (a dual-stack listener) is keyed as its IPv4 address.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The prefix lengths client addresses are grouped by (`limits.client_ipv4_prefix`,
/// `limits.client_ipv6_prefix`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyRule {
    v4: u8,
    v6: u8,
}

/// A prefix length out of its range.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{len} is not a prefix length from {min} to {max}")]
pub struct BadPrefix {
    pub len: u8,
    pub min: u8,
    pub max: u8,
}

/// The shortest IPv4 prefix accepted: a /16 keyed as one client would let one
/// client's limits starve a whole provider's customers.
pub const MIN_V4: u8 = 16;
/// The shortest IPv6 prefix accepted: a /48 is a site's usual allocation.
pub const MIN_V6: u8 = 32;

impl Default for KeyRule {
    /// IPv4 address, IPv6 /64.
    fn default() -> KeyRule {
        KeyRule { v4: 32, v6: 64 }
    }
}

impl KeyRule {
    /// Grouping by IPv4 `/v4` and IPv6 `/v6`.
    pub fn new(v4: u8, v6: u8) -> Result<KeyRule, BadPrefix> {
        check(v4, MIN_V4, 32)?;
        check(v6, MIN_V6, 128)?;
        Ok(KeyRule { v4, v6 })
    }

    /// `ip` as a client: its address and its key.
    pub fn client(self, ip: IpAddr) -> Client {
        Client {
            ip: ip.to_canonical(),
            key: self.key(ip),
        }
    }

    /// The key `ip` is counted under.
    pub fn key(self, ip: IpAddr) -> ClientKey {
        match ip.to_canonical() {
            IpAddr::V4(v4) => {
                let bits = u32::from(v4) & mask32(self.v4);
                ClientKey {
                    addr: IpAddr::V4(Ipv4Addr::from(bits)),
                    prefix: self.v4,
                }
            }
            IpAddr::V6(v6) => {
                let bits = u128::from(v6) & mask128(self.v6);
                ClientKey {
                    addr: IpAddr::V6(Ipv6Addr::from(bits)),
                    prefix: self.v6,
                }
            }
        }
    }
}

fn check(len: u8, min: u8, max: u8) -> Result<(), BadPrefix> {
    if (min..=max).contains(&len) {
        Ok(())
    } else {
        Err(BadPrefix { len, min, max })
    }
}

fn mask32(len: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0)
}

fn mask128(len: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0)
}

/// A client: its address (what address lists such as `allow` and `deny` match;
/// an IPv4-mapped IPv6 address as its IPv4 address) and its key (what every
/// per-client count counts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Client {
    pub ip: IpAddr,
    pub key: ClientKey,
}

/// A client as every per-client count sees it: its address masked to the
/// rule's prefix. Made only by [`KeyRule::key`], so two keys are equal exactly
/// when their addresses fall in one prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ClientKey {
    addr: IpAddr,
    prefix: u8,
}

impl ClientKey {
    /// The first address of the prefix.
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// Whether `ip` falls in this key's prefix (the same rule keys it here).
    pub fn covers(&self, ip: IpAddr) -> bool {
        let rule = match self.addr {
            IpAddr::V4(_) => KeyRule {
                v4: self.prefix,
                v6: 128,
            },
            IpAddr::V6(_) => KeyRule {
                v4: 32,
                v6: self.prefix,
            },
        };
        rule.key(ip) == *self
    }
}

impl ClientKey {
    /// A key as [`fmt::Display`] writes it (an address, or a prefix in CIDR
    /// notation), masked as [`KeyRule::key`] masks: what another router (the
    /// pair's) sent.
    pub fn parse(text: &str) -> Option<ClientKey> {
        let (addr, prefix) = match text.split_once('/') {
            Some((a, p)) => (a.parse::<IpAddr>().ok()?, Some(p.parse::<u8>().ok()?)),
            None => (text.parse::<IpAddr>().ok()?, None),
        };
        let rule = match addr {
            IpAddr::V4(_) => KeyRule {
                v4: prefix.unwrap_or(32).min(32),
                v6: 128,
            },
            IpAddr::V6(_) => KeyRule {
                v4: 32,
                v6: prefix.unwrap_or(128).min(128),
            },
        };
        Some(rule.key(addr))
    }
}

impl fmt::Display for ClientKey {
    /// An address alone, a prefix in CIDR notation (`2001:db8:1:2::/64`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.addr {
            IpAddr::V4(a) if self.prefix == 32 => write!(f, "{a}"),
            IpAddr::V6(a) if self.prefix == 128 => write!(f, "{a}"),
            a => write!(f, "{a}/{}", self.prefix),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("address")
    }

    #[test]
    fn a_key_written_is_read_back_the_same() {
        let r = KeyRule::default();
        for a in ["192.0.2.7", "2001:db8:1:2::9", "::ffff:192.0.2.7"] {
            let key = r.key(ip(a));
            assert_eq!(ClientKey::parse(&key.to_string()), Some(key), "{a}");
        }
        assert_eq!(ClientKey::parse("nonsense"), None);
        assert_eq!(ClientKey::parse("192.0.2.7/x"), None);
    }

    #[test]
    fn by_default_an_ipv4_address_and_an_ipv6_64() {
        let r = KeyRule::default();
        assert_eq!(
            r.key(ip("2001:db8:1:2::1")),
            r.key(ip("2001:db8:1:2:ffff::9"))
        );
        assert_ne!(r.key(ip("2001:db8:1:2::1")), r.key(ip("2001:db8:1:3::1")));
        assert_ne!(r.key(ip("192.0.2.1")), r.key(ip("192.0.2.2")));
        assert_eq!(r.key(ip("::ffff:192.0.2.7")), r.key(ip("192.0.2.7")));
        assert_eq!(
            r.key(ip("2001:db8:1:2:3::4")).to_string(),
            "2001:db8:1:2::/64"
        );
        assert_eq!(r.key(ip("192.0.2.7")).to_string(), "192.0.2.7");
    }

    #[test]
    fn other_prefixes_group_wider_or_narrower() {
        let r = KeyRule::new(24, 128).expect("valid");
        assert_eq!(r.key(ip("192.0.2.1")), r.key(ip("192.0.2.200")));
        assert_ne!(r.key(ip("192.0.2.1")), r.key(ip("192.0.3.1")));
        assert_ne!(r.key(ip("2001:db8::1")), r.key(ip("2001:db8::2")));
        assert_eq!(r.key(ip("192.0.2.9")).to_string(), "192.0.2.0/24");
        let wide = KeyRule::new(32, 48).expect("valid");
        assert_eq!(
            wide.key(ip("2001:db8:1:2::1")),
            wide.key(ip("2001:db8:1:ff::1"))
        );
    }

    #[test]
    fn a_key_covers_the_addresses_of_its_prefix() {
        let k = KeyRule::default().key(ip("2001:db8:1:2::1"));
        assert!(k.covers(ip("2001:db8:1:2:abcd::1")));
        assert!(!k.covers(ip("2001:db8:1:3::1")));
        assert!(!k.covers(ip("192.0.2.1")));
        let v4 = KeyRule::new(24, 64).expect("valid").key(ip("192.0.2.1"));
        assert!(v4.covers(ip("192.0.2.99")) && !v4.covers(ip("192.0.3.1")));
    }

    #[test]
    fn prefixes_out_of_range_are_refused() {
        assert_eq!(
            KeyRule::new(8, 64),
            Err(BadPrefix {
                len: 8,
                min: 16,
                max: 32
            })
        );
        assert!(KeyRule::new(33, 64).is_err());
        assert!(KeyRule::new(32, 16).is_err());
        assert!(KeyRule::new(32, 129).is_err());
        assert!(KeyRule::new(16, 32).is_ok() && KeyRule::new(32, 128).is_ok());
    }
}
