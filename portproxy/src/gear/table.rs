//! The gear mapping table and its rules: which public port forwards to which gear
//! `ip:port`, what may be mapped, and what each operator verb changes.
//!
//! Pure: no sockets, no files. `Gear` (in `mod.rs`) binds, persists and swaps.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use ipnet::IpNet;

use crate::numbers::{PortRange, strict_port};

/// A mapping request or an error in one, for the operator.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    #[error("`{0}` is not a port (1-65535, plain decimal)")]
    Port(String),
    #[error("port {port} is outside the public range {start}-{end}")]
    OutOfRange { port: u16, start: u16, end: u16 },
    #[error("`{0}` is not IP:PORT (IPv4 a.b.c.d:port or [IPv6]:port)")]
    Target(String),
    #[error("target {0} is outside the allowed networks")]
    NotAllowed(SocketAddr),
    #[error("port {port} is mapped to {existing}; remove it first")]
    Conflict { port: u16, existing: SocketAddr },
    #[error("port {0} appears twice with different targets")]
    Twice(u16),
    #[error("port {0} would forward to itself")]
    Loop(u16),
}

/// What may be mapped.
#[derive(Debug, Clone)]
pub struct Rules {
    pub ports: PortRange,
    pub allowed: Vec<IpNet>,
}

impl Rules {
    pub fn port(&self, s: &str) -> Result<u16, RuleError> {
        let p = strict_port(s).map_err(|_| RuleError::Port(s.into()))?;
        if !self.ports.contains(p) {
            return Err(RuleError::OutOfRange {
                port: p,
                start: *self.ports.0.start(),
                end: *self.ports.0.end(),
            });
        }
        Ok(p)
    }

    /// `a.b.c.d:port` (four plain decimal octets; `010.0.0.1` is refused) or
    /// `[v6]:port`, with a port 1-65535, inside an allowed network.
    pub fn target(&self, s: &str) -> Result<SocketAddr, RuleError> {
        let bad = || RuleError::Target(s.into());
        let addr: SocketAddr = s.parse().map_err(|_| bad())?;
        if addr.port() == 0 {
            return Err(bad());
        }
        if !self.allowed.iter().any(|n| n.contains(&addr.ip())) {
            return Err(RuleError::NotAllowed(addr));
        }
        Ok(addr)
    }
}

/// Public port → gear address.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Table {
    map: BTreeMap<u16, SocketAddr>,
}

impl Table {
    pub fn from_map(map: BTreeMap<u16, SocketAddr>) -> Table {
        Table { map }
    }

    pub fn get(&self, port: u16) -> Option<SocketAddr> {
        self.map.get(&port).copied()
    }

    pub fn iter(&self) -> impl Iterator<Item = (u16, SocketAddr)> + '_ {
        self.map.iter().map(|(p, a)| (*p, *a))
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The mappings `add` would create, all or nothing: an identical mapping is
    /// skipped (a no-op), a port mapped elsewhere is a conflict.
    pub fn plan_add(
        &self,
        pairs: &[(u16, SocketAddr)],
    ) -> Result<Vec<(u16, SocketAddr)>, RuleError> {
        let mut new: BTreeMap<u16, SocketAddr> = BTreeMap::new();
        for &(port, target) in pairs {
            match self.map.get(&port) {
                Some(&existing) if existing == target => continue,
                Some(&existing) => return Err(RuleError::Conflict { port, existing }),
                None => {}
            }
            if let Some(&other) = new.get(&port)
                && other != target
            {
                return Err(RuleError::Twice(port));
            }
            new.insert(port, target);
        }
        Ok(new.into_iter().collect())
    }

    /// The mapped ports among `ports` (unknown ones are no-ops).
    pub fn plan_remove(&self, ports: impl IntoIterator<Item = u16>) -> Vec<u16> {
        let mut out: Vec<u16> = ports
            .into_iter()
            .filter(|p| self.map.contains_key(p))
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    pub fn with_added(&self, pairs: &[(u16, SocketAddr)]) -> Table {
        let mut t = self.clone();
        t.map.extend(pairs.iter().copied());
        t
    }

    pub fn with_removed(&self, ports: &[u16]) -> Table {
        let mut t = self.clone();
        for p in ports {
            t.map.remove(p);
        }
        t
    }
}

/// OpenShift's defaults: 35531–65535, targets on loopback (for tests).
#[cfg(test)]
pub(crate) fn default_rules() -> Rules {
    Rules {
        ports: PortRange(35531..=65535),
        allowed: vec![ipnet::IpNet::V4(
            ipnet::Ipv4Net::new(std::net::Ipv4Addr::new(127, 0, 0, 0), 8).unwrap_or_default(),
        )],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> Rules {
        default_rules()
    }

    fn a(s: &str) -> SocketAddr {
        s.parse().expect("addr")
    }

    #[test]
    fn ports_and_targets_are_validated_like_openshift_did_and_stricter() {
        let r = rules();
        assert_eq!(r.port("35531"), Ok(35531));
        for bad in [
            "0",
            "abc",
            "+35531",
            "035531",
            "65536",
            "99999999999",
            "",
            "3553 1",
        ] {
            assert!(r.port(bad).is_err(), "{bad}");
        }
        assert!(matches!(r.port("16384"), Err(RuleError::OutOfRange { .. })));
        assert_eq!(r.target("127.0.250.1:8080"), Ok(a("127.0.250.1:8080")));
        for bad in [
            "127.0.250:8080",
            "127.0.250.1.1:8080",
            "127.0.256.1:8080",
            "127.0.x.1:80",
            "127.0.0.1:0",
            "127.0.0.1",
            "010.0.0.1:80",
            "127.0.0.1:65536",
        ] {
            assert!(matches!(r.target(bad), Err(RuleError::Target(_))), "{bad}");
        }
        assert!(matches!(
            r.target("[::1]:80"),
            Err(RuleError::NotAllowed(_))
        ));
        assert!(matches!(
            r.target("10.0.0.1:80"),
            Err(RuleError::NotAllowed(_))
        ));
    }

    #[test]
    fn adding_is_idempotent_and_a_port_mapped_elsewhere_is_a_conflict() {
        let t = Table::default().with_added(&[(35531, a("127.0.250.1:8080"))]);
        assert_eq!(t.plan_add(&[(35531, a("127.0.250.1:8080"))]), Ok(vec![]));
        assert_eq!(
            t.plan_add(&[
                (35532, a("127.0.250.1:8081")),
                (35531, a("127.0.250.2:8080"))
            ]),
            Err(RuleError::Conflict {
                port: 35531,
                existing: a("127.0.250.1:8080")
            })
        );
        assert_eq!(
            t.plan_add(&[(35533, a("127.0.250.1:1")), (35533, a("127.0.250.1:2"))]),
            Err(RuleError::Twice(35533))
        );
        assert_eq!(t.plan_remove([35531, 40000, 35531]), vec![35531]);
        assert!(t.with_removed(&[35531]).is_empty());
    }
}
