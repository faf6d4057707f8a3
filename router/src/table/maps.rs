//! The table's names and apps: what routing events change, in two plain hash sets
//! that the builder keeps a second copy of (left-right), not a persistent map.
//!
//! Why not persistent: with `imbl`'s HAMT, publishing a table shares every node
//! with the next one, so an event's first write to each node copies it, and
//! copying a node clones the reference count of each of its entries (32 child
//! nodes or a leaf's routes), cold in cache at 100 000 apps; the old table's drop
//! touches them again. That was 19 % of the router's CPU per routing event
//! (`bench-events --perf`, 2026-11-28; bench/RESULTS.md) and the largest item.
//!
//! Instead the builder (see [`super::build`]) writes the batch into the copy that
//! is not live (the one it published a batch ago, once no reader holds it):
//! first the previous batch's changes, as the live copy had them ([`catch_up`]),
//! then this batch's; then it publishes that copy and keeps the other. A write
//! is a hash-set insert; nothing is copied per batch but the changed apps. When
//! the spare copy is still held (a reader that keeps a table: the reconcile
//! check, the status page), the builder clones the live copy once instead.
//!
//! [`catch_up`]: RouteMaps::catch_up

use std::collections::HashSet;
use std::sync::Arc;

use spi_consumer::{AppKey, AppKeyRef};

use super::{AppRoute, HostRoute, Route};

/// A set of table entries, hashed with `foldhash` (seeded per process, so names
/// an app owner chooses cannot be made to collide), not SipHash: a lookup hashes
/// the name a client sent on every request.
pub(crate) type Entries<K> = HashSet<K, foldhash::fast::RandomState>;

/// Host → route and app → route, with the counts the request path asks for.
#[derive(Clone, Debug, Default)]
pub struct RouteMaps {
    /// The names not resolved from an app's key: aliases, and the generated names
    /// of apps whose key does not resolve back (see [`super::generated`]).
    pub(crate) hosts: Entries<HostRoute>,
    /// Hashed, not ordered: a generated name is resolved here on the request path,
    /// and a B-tree's search (a string comparison, two pointers followed, per
    /// step) cost 1.2 µs a lookup at 160 000 apps against 0.3 µs for a hash map.
    pub(crate) apps: Entries<AppRoute>,
    /// How many names are resolved from app keys (the sum of `Route::generated`).
    pub(crate) generated_names: usize,
    /// How many routes are passthrough: with none, TLS connections are terminated
    /// without reading their ClientHello first.
    pub(crate) passthrough: usize,
    /// How many names in `hosts` are wildcards (`*.domain`): with none, a name
    /// not found costs no second lookup.
    pub(crate) wildcards: usize,
}

impl RouteMaps {
    /// The route of a name in the host map.
    pub(crate) fn listed(&self, host: &str) -> Option<&Arc<Route>> {
        if self.hosts.is_empty() {
            return None;
        }
        self.hosts.get(host).map(|k| &k.route)
    }

    pub(crate) fn app(&self, key: &dyn AppKeyRef) -> Option<&Arc<Route>> {
        self.apps.get(key).map(|a| &a.0)
    }

    /// Puts `route` (none: nothing) where `key`'s route was, with its names;
    /// returns the route it replaces. The only write to the maps: the same writes
    /// in the same order make the same maps (what [`catch_up`](Self::catch_up)
    /// relies on).
    pub(crate) fn replace(
        &mut self,
        key: &AppKey,
        route: Option<Arc<Route>>,
    ) -> Option<Arc<Route>> {
        // One hash and one probe: the app map's entry is its route.
        let old = match &route {
            Some(route) => self.apps.replace(AppRoute(route.clone())),
            None => self.apps.take(key as &dyn AppKeyRef),
        }
        .map(|AppRoute(r)| r);
        if let Some(old) = &old {
            self.passthrough -= usize::from(old.passthrough);
            self.generated_names -= usize::from(old.generated);
            for host in &old.hosts[usize::from(old.generated)..] {
                // Only if the name still points at this app (an alias may have moved).
                if self.listed(host).is_some_and(|r| r.app == *key) && self.hosts.remove(&**host) {
                    self.wildcards -= usize::from(host.starts_with("*."));
                }
            }
        }
        if let Some(route) = route {
            self.passthrough += usize::from(route.passthrough);
            self.generated_names += usize::from(route.generated);
            for at in usize::from(route.generated)..route.hosts.len() {
                if let Some(host) = HostRoute::new(route.clone(), at) {
                    let wildcard = host.name().starts_with("*.");
                    // The key is the entry: a name another app had is replaced whole.
                    if self.hosts.replace(host).is_none() {
                        self.wildcards += usize::from(wildcard);
                    }
                }
            }
        }
        old
    }

    /// Makes the same replacements as were made in the copy that is live.
    pub(crate) fn catch_up(&mut self, changes: &[Change]) {
        for change in changes {
            match change {
                Change::Put(route) => self.replace(&route.app, Some(route.clone())),
                Change::Gone(key) => self.replace(key, None),
            };
        }
    }
}

/// One [`RouteMaps::replace`], kept to make it again in the other copy.
#[derive(Debug)]
pub(crate) enum Change {
    /// The app's route is this one.
    Put(Arc<Route>),
    /// The app has no route.
    Gone(AppKey),
}
