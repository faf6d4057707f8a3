//! Connections held per client source, with a cap: what keeps one client from
//! taking every connection place of a listener (the router's HTTP, HTTPS and
//! `tcp.listen` listeners, the portproxy's).
//!
//! A *source* is a [`ClientKey`]: an IPv4 address, or an IPv6 /64 by default
//! (see [`key`]). The same key is what every other per-client count of both
//! binaries uses.
//!
//! Entries exist only while a source holds a connection, so the map is never
//! larger than the listener's connection limit. One lock per accept and per close.

pub mod key;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

pub use key::{BadPrefix, Client, ClientKey, KeyRule};

/// The counts of one listener (or a group of listeners sharing a cap).
#[derive(Debug)]
pub struct PerSource {
    cap: AtomicUsize,
    held: Mutex<HashMap<ClientKey, usize>>,
}

/// One connection counted for its source; dropping it gives the place back.
#[derive(Debug)]
pub struct SourceSlot {
    source: ClientKey,
    /// Where it is counted; none for an [`SourceSlot::uncounted`] one.
    of: Option<Arc<PerSource>>,
}

impl SourceSlot {
    /// The source it is counted for.
    pub fn source(&self) -> ClientKey {
        self.source
    }

    /// A connection of `source` that no cap holds (a load balancer in front,
    /// which carries many clients, each counted once its PROXY header names
    /// it): nothing is counted, so nothing is hashed at its accept or close.
    pub fn uncounted(source: ClientKey) -> SourceSlot {
        SourceSlot { source, of: None }
    }

    /// Whether it is an [`SourceSlot::uncounted`] one.
    pub fn is_uncounted(&self) -> bool {
        self.of.is_none()
    }
}

impl Drop for SourceSlot {
    fn drop(&mut self) {
        let Some(of) = &self.of else {
            return;
        };
        let mut held = of.held();
        if let Some(n) = held.get_mut(&self.source) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.source);
            }
        }
    }
}

impl PerSource {
    /// At most `cap` connections per source (0: none at all).
    pub fn new(cap: usize) -> Arc<PerSource> {
        Arc::new(PerSource {
            cap: AtomicUsize::new(cap),
            held: Mutex::new(HashMap::new()),
        })
    }

    /// A new cap for connections counted from now on (a reload).
    pub fn set_cap(&self, cap: usize) {
        self.cap.store(cap, Ordering::Relaxed);
    }

    pub fn cap(&self) -> usize {
        self.cap.load(Ordering::Relaxed)
    }

    fn held(&self) -> MutexGuard<'_, HashMap<ClientKey, usize>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a connection from `source`, or `None` if it holds the cap.
    pub fn slot(self: &Arc<Self>, source: ClientKey) -> Option<SourceSlot> {
        let cap = self.cap();
        let mut held = self.held();
        let n = held.entry(source).or_insert(0);
        if *n >= cap {
            if *n == 0 {
                held.remove(&source);
            }
            return None;
        }
        *n += 1;
        Some(SourceSlot {
            source,
            of: Some(self.clone()),
        })
    }

    /// Connections `source` holds now.
    pub fn holds(&self, source: ClientKey) -> usize {
        self.held().get(&source).copied().unwrap_or(0)
    }

    /// The source holding the most connections, and how many.
    pub fn heaviest(&self) -> Option<(ClientKey, usize)> {
        self.held()
            .iter()
            .max_by_key(|(_, n)| **n)
            .map(|(ip, n)| (*ip, *n))
    }

    /// Sources holding a connection now.
    pub fn sources(&self) -> usize {
        self.held().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> ClientKey {
        KeyRule::default().key(s.parse().expect("address"))
    }

    #[test]
    fn a_source_stops_at_the_cap_and_gets_its_places_back() {
        let p = PerSource::new(2);
        let a = p.slot(ip("10.0.0.1")).expect("first");
        let _b = p.slot(ip("10.0.0.1")).expect("second");
        assert!(p.slot(ip("10.0.0.1")).is_none());
        assert!(
            p.slot(ip("10.0.0.2")).is_some(),
            "another source is not affected"
        );
        assert_eq!(p.heaviest(), Some((ip("10.0.0.1"), 2)));
        drop(a);
        assert_eq!(p.holds(ip("10.0.0.1")), 1);
        let a2 = p.slot(ip("10.0.0.1")).expect("a place again");
        // An uncounted slot holds no place and gives none back.
        let balancer = SourceSlot::uncounted(ip("10.0.0.1"));
        assert_eq!(balancer.source(), ip("10.0.0.1"));
        assert!(balancer.is_uncounted() && !a2.is_uncounted());
        drop(balancer);
        assert_eq!(p.holds(ip("10.0.0.1")), 2);
    }

    #[test]
    fn ipv6_counts_by_its_64_and_mapped_v4_as_v4() {
        let p = PerSource::new(1);
        let _a = p.slot(ip("2001:db8:1:2::1")).expect("first");
        assert!(p.slot(ip("2001:db8:1:2:ffff::9")).is_none(), "same /64");
        assert!(p.slot(ip("2001:db8:1:3::1")).is_some(), "another /64");
        let _v4 = p.slot(ip("192.0.2.7")).expect("v4");
        assert!(p.slot(ip("::ffff:192.0.2.7")).is_none(), "the same address");
    }

    #[test]
    fn entries_go_with_their_last_connection_and_a_zero_cap_admits_none() {
        let p = PerSource::new(3);
        drop(p.slot(ip("10.0.0.1")));
        assert_eq!(p.sources(), 0);
        p.set_cap(0);
        assert!(p.slot(ip("10.0.0.1")).is_none());
        assert_eq!(p.sources(), 0);
    }
}
