//! Bounds that hold for every mode (`limits:` in the configuration), and the global
//! connection cap.
//!
//! A permit is taken right after `accept` and held for the connection's life. When
//! none is left the new connection is closed at once (a FIN) and counted: with tens of
//! thousands of listeners, waiting for a permit *before* accepting (so excess clients
//! wait in the kernel backlog) would park one waiter per listener, so we refuse
//! instead, as sozu does for TCP.

use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;
use serde::Deserialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Bounds that hold for every mode.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Relayed connections open at once, all modes together; past it a new client
    /// connection is closed at once (counted as `rejected{reason="max_connections"}`).
    pub max_connections: usize,
    /// TCP connect to a target (a gear, a host port, a peer proxy's own connect).
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// A relayed connection with no byte in either direction for this long is closed.
    #[serde(with = "humantime_serde")]
    pub idle_timeout: Duration,
    /// Connections one client source (an IPv4 address, an IPv6 /64: see
    /// `client_ipv4_prefix` and `client_ipv6_prefix`) may have open,
    /// all ports together; unset: half of `max_connections`. Past it, its new
    /// connections are closed at once (`rejected{reason="source_limit"}`).
    pub max_connections_per_source: Option<usize>,
    /// Sources without that cap: the routers in front, which carry every client's
    /// traffic to this node (and, in cluster mode, `cluster.trusted_sources` and
    /// peer proxies, always).
    pub unlimited_sources: Vec<IpNet>,
    /// The prefix an IPv4 client is counted by: 32, the address (the router's
    /// key of the same name; see `per_source::key`).
    pub client_ipv4_prefix: u8,
    /// The prefix an IPv6 client is counted by: 64, since one host may hold a
    /// whole /64 and would otherwise rotate addresses past the cap.
    pub client_ipv6_prefix: u8,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 30_000,
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(600),
            max_connections_per_source: None,
            unlimited_sources: Vec::new(),
            client_ipv4_prefix: 32,
            client_ipv6_prefix: 64,
        }
    }
}

impl Limits {
    /// `max_connections_per_source`, or half of `max_connections` (at least one):
    /// one source can never take the node's every relay, and a router in front
    /// that is not listed in `unlimited_sources` still gets half.
    pub fn per_source(&self) -> usize {
        self.max_connections_per_source
            .unwrap_or(self.max_connections / 2)
            .max(1)
    }

    /// How client addresses are keyed (checked when the configuration loads).
    pub fn client_keys(&self) -> per_source::KeyRule {
        per_source::KeyRule::new(self.client_ipv4_prefix, self.client_ipv6_prefix)
            .unwrap_or_default()
    }

    /// Lowers `max_connections` to what `nofile` descriptors hold: two per relay
    /// (client and target), after a reserve for listeners, the state files, the
    /// admin socket and the metrics listener (`listeners` plus an eighth of the
    /// limit, at least 64). Returns the number it was lowered from, if it was.
    pub fn fit(&mut self, nofile: u64, listeners: usize) -> Option<usize> {
        let nofile = usize::try_from(nofile).unwrap_or(usize::MAX);
        let reserve = listeners + (nofile / 8).max(64);
        let fits = (nofile.saturating_sub(reserve) / 2).max(1);
        (self.max_connections > fits).then(|| std::mem::replace(&mut self.max_connections, fits))
    }
}

/// Connections that may be open at once.
#[derive(Clone)]
pub struct Admission {
    permits: Arc<Semaphore>,
    max: usize,
}

impl Admission {
    pub fn new(max: usize) -> Admission {
        Admission {
            permits: Arc::new(Semaphore::new(max.min(Semaphore::MAX_PERMITS))),
            max,
        }
    }

    /// The slots themselves, for the accept loop.
    pub fn slots(&self) -> Arc<Semaphore> {
        self.permits.clone()
    }

    /// A slot, or `None` when `max` connections are open.
    pub fn try_admit(&self) -> Option<OwnedSemaphorePermit> {
        self.permits.clone().try_acquire_owned().ok()
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.max.saturating_sub(self.permits.available_permits())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_holds_and_slots_come_back() {
        let a = Admission::new(2);
        let one = a.try_admit().expect("first");
        let _two = a.try_admit().expect("second");
        assert!(a.try_admit().is_none());
        assert_eq!(a.open(), 2);
        drop(one);
        assert!(a.try_admit().is_some());
    }
}
