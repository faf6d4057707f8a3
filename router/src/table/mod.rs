//! The route table: host name → route, immutable, swapped whole with `ArcSwap`.
//!
//! Requests load the current table once (one atomic load), look the host up, clone the
//! `Arc<Route>` they need and drop the guard before any `.await`. The update path
//! builds the next table from the previous one and swaps it in; readers never lock.
//!
//! Cloning a table is O(1): its names and apps are one shared [`RouteMaps`], which
//! the builder changes in place in a second copy (see [`maps`]): changing one app
//! costs that app's own host names, never a copy of every route. So an event's
//! cost does not grow with the number of apps.
//!
//! This is the read side (what a request looks up) and [`balance`] (how a route
//! chooses among its members); [`build`] makes the next table from the routing
//! state that `spi-consumer` maintains and publishes it.

pub mod balance;
pub mod build;
pub mod generated;
pub mod hash;
pub mod mappings;
pub mod maps;
pub mod paths;
pub mod recent;
pub mod split;

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use spi_consumer::{AppKey, AppKeyRef};

use self::balance::{Balance, Candidate};
use crate::members::Member;

pub use self::build::{Builder, Naming};
pub use self::generated::Generated;
pub use self::maps::RouteMaps;

/// One application's routing: its names and its members.
#[derive(Debug)]
pub struct Route {
    pub app: AppKey,
    /// Display name and namespace, as the broker sent them.
    pub name: String,
    pub namespace: String,
    /// Every name this route answers to, lower-case: its generated names first.
    pub hosts: Vec<Arc<str>>,
    /// How many of the first `hosts` are resolved from the app's key and are not
    /// in the host map (see [`generated`]).
    pub(crate) generated: u8,
    /// Where requests go; empty means 503.
    pub members: Vec<Target>,
    /// Every endpoint the app has, routed or not (for the routes API).
    pub endpoints: Vec<EndpointInfo>,
    pub aliases: Vec<String>,
    /// Aliases that have a certificate.
    pub certificates: Vec<String>,
    /// Round-robin cursor.
    pub(crate) next: AtomicUsize,
    pub(crate) balance: Balance,
    pub(crate) fail_open: bool,
    /// Every member terminates TLS itself (protocol `tls`, not `https`/`wss`): TLS
    /// connections for its names are relayed, not terminated (see
    /// `request::passthrough`); a terminated request for them is 421.
    pub passthrough: bool,
    /// Members for each `tcp.listen` rule naming this app: (rule number, members).
    pub tcp: Vec<(usize, Vec<Target>)>,
    /// The app's traffic counters (the same across table updates; see
    /// [`crate::metrics::apps`]).
    pub traffic: Arc<crate::metrics::apps::AppTraffic>,
}

/// Which endpoints of which app a `tcp.listen` port goes to (see [`crate::tcp`]):
/// those with this cartridge name and/or listing this type or protocol.
#[derive(Clone, Debug)]
pub struct TcpMatch {
    pub app: AppKey,
    pub cartridge: Option<String>,
    pub endpoint: Option<String>,
}

impl TcpMatch {
    pub fn matches(&self, ep: &spi_consumer::decode::Endpoint) -> bool {
        self.cartridge
            .as_ref()
            .is_none_or(|c| ep.port_name.as_ref() == Some(c))
            && self
                .endpoint
                .as_ref()
                .is_none_or(|e| ep.types.contains(e) || ep.protocols.contains(e))
    }
}

/// Where a route sends requests: a member (shared by every route and table that
/// lists its address) and how this route's endpoint speaks to it.
#[derive(Debug, Clone)]
pub struct Target {
    pub member: Arc<Member>,
    /// The gear expects TLS (`https`/`wss`/`tls` protocols, i.e. `ssl_to_gear`).
    pub tls: bool,
    /// Path rewrites of a directly routed endpoint (see [`mappings`]); `None` for
    /// load balancers and endpoints whose mappings change nothing.
    pub mappings: Option<Arc<mappings::Mappings>>,
}

impl Candidate for Target {
    fn member(&self) -> &Member {
        &self.member
    }
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct EndpointInfo {
    pub address: String,
    pub gear_id: Option<String>,
    pub cartridge: Option<String>,
    pub types: Vec<String>,
    pub protocols: Vec<String>,
    pub routed: bool,
}

impl Route {
    /// Picks the member for the next request (see [`balance`]).
    pub fn pick(&self) -> Option<&Target> {
        self.pick_from(&self.members, None)
    }

    /// Picks among `targets` (the route's members, or a `tcp.listen` rule's) with
    /// the route's balancer, cursor and `fail_open`, avoiding `not` if given.
    pub fn pick_from<'a>(&self, targets: &'a [Target], not: Option<&Member>) -> Option<&'a Target> {
        self.balance.pick(targets, &self.next, self.fail_open, not)
    }

    /// Picks with `balance` in place of the route's own (an app's `balance`).
    pub fn pick_by(&self, balance: Balance) -> Option<&Target> {
        balance.pick(&self.members, &self.next, self.fail_open, None)
    }

    /// The member a key hashed `key` goes to (an app balanced by a key).
    pub fn pick_hashed(&self, key: u64) -> Option<&Target> {
        hash::pick(&self.members, key, self.fail_open, None)
    }

    /// Picks a member other than `not`, for a retry: the same policy, the same
    /// health and rotate rules and the same `fail_open`, minus the member that failed.
    pub fn pick_other(&self, not: &Member) -> Option<&Target> {
        self.pick_from(&self.members, Some(not))
    }
}

/// A host name and its route in one reference count: the host map's key, which
/// holds its value. One count an entry instead of a name's and a route's: an
/// entry is cloned for each copy of the maps (see [`maps`]) and when a table is
/// first built.
#[derive(Clone, Debug)]
pub(crate) struct HostRoute {
    pub(crate) route: Arc<Route>,
    /// Which of `route.hosts`.
    at: u32,
}

impl HostRoute {
    /// The route's `at`-th name; `None` past its names.
    pub(crate) fn new(route: Arc<Route>, at: usize) -> Option<HostRoute> {
        let at = u32::try_from(at)
            .ok()
            .filter(|&i| (i as usize) < route.hosts.len())?;
        Some(HostRoute { route, at })
    }

    pub(crate) fn name(&self) -> &str {
        &self.route.hosts[self.at as usize]
    }
}

impl std::hash::Hash for HostRoute {
    /// As the name's own hash: looked up by `&str`.
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name().hash(state);
    }
}

impl PartialEq for HostRoute {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name()
    }
}

impl Eq for HostRoute {}

impl std::borrow::Borrow<str> for HostRoute {
    fn borrow(&self) -> &str {
        self.name()
    }
}

/// An app's route as the app map's key, which holds its value: hashed and compared
/// as the app's key, looked up by [`AppKeyRef`], one reference count an entry (the
/// same reason as [`HostRoute`]).
#[derive(Clone, Debug)]
pub(crate) struct AppRoute(pub(crate) Arc<Route>);

impl std::hash::Hash for AppRoute {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (&self.0.app as &dyn AppKeyRef).hash(state);
    }
}

impl PartialEq for AppRoute {
    fn eq(&self, other: &Self) -> bool {
        self.0.app == other.0.app
    }
}

impl Eq for AppRoute {}

impl<'a> std::borrow::Borrow<dyn AppKeyRef + 'a> for AppRoute {
    fn borrow(&self) -> &(dyn AppKeyRef + 'a) {
        &self.0.app
    }
}

/// Host → route, plus app → route to find an app's names again when it changes.
#[derive(Clone, Debug, Default)]
pub struct RouteTable {
    /// The names and apps (what events change): shared with the tables that differ
    /// only in splits or policies, and written in place by the builder (see
    /// [`maps`]).
    pub(crate) maps: Arc<RouteMaps>,
    /// How generated names are taken apart; none: every name is in `hosts`.
    pub(crate) generated: Option<Arc<Generated>>,
    /// Names shared between apps by weight (blue/green), set by the operator.
    pub splits: crate::keyed::Keyed<Arc<str>, Arc<split::Split>>,
    /// Names whose path prefixes go to other apps, set by the operator.
    pub paths: crate::keyed::Keyed<Arc<str>, Arc<paths::PathTable>>,
    /// The policy of each app with settings of its own (see [`crate::policy`]).
    pub policies: crate::keyed::Keyed<AppKey, Arc<crate::policy::Policy>>,
    /// The policy of every other app (`app_defaults:`); none when that is empty.
    pub default_policy: Option<Arc<crate::policy::Policy>>,
}

impl RouteTable {
    /// The route for a normalised host name (see `request::route::normalize_host`):
    /// its own, else the wildcard alias one label up (`a.customer.com` under
    /// `*.customer.com`; exact names always win).
    pub fn lookup(&self, host: &str) -> Option<&Arc<Route>> {
        self.listed(host)
            .or_else(|| self.generated_route(host))
            .or_else(|| self.wildcard_route(host))
    }

    /// The route of the wildcard alias covering `host`, one label deep.
    fn wildcard_route(&self, host: &str) -> Option<&Arc<Route>> {
        if self.maps.wildcards == 0 {
            return None;
        }
        self.listed(&crate::tls::store::wildcard_of(host)?)
    }

    /// The route of a name in the host map.
    pub(crate) fn listed(&self, host: &str) -> Option<&Arc<Route>> {
        self.maps.listed(host)
    }

    /// How many routes are passthrough: with none, TLS connections are terminated
    /// without reading their ClientHello first.
    pub fn passthrough(&self) -> usize {
        self.maps.passthrough
    }

    /// The route whose generated name `host` is.
    fn generated_route(&self, host: &str) -> Option<&Arc<Route>> {
        let generated = self.generated.as_deref()?;
        // A route with generated names made them with the same naming from the
        // same key, so `host` is one of them: no comparison needed.
        let app = |key: Option<(&str, &str)>| self.app_ref(&key?).filter(|r| r.generated > 0);
        let label = generated.label(host)?;
        let found = app(generated.ha_key(label)).or_else(|| app(generated.app_key(label)));
        debug_assert!(found.is_none_or(|r| r.hosts.iter().any(|h| **h == *host)));
        found
    }

    /// Every name and the route it resolves to, as [`lookup`](Self::lookup) would.
    pub fn names(&self) -> impl Iterator<Item = (&str, &Arc<Route>)> {
        let listed = self.maps.hosts.iter().map(|h| (h.name(), &h.route));
        let generated = self.maps.apps.iter().map(|a| &a.0).flat_map(|r| {
            r.hosts[..usize::from(r.generated)]
                .iter()
                .map(move |h| (&**h, r))
                .filter(|(h, _)| self.listed(h).is_none())
        });
        listed.chain(generated)
    }

    /// The route a request for `host` goes to: [`lookup`](Self::lookup), unless the
    /// name is split between apps, then the next app of the split that is in the
    /// table (none in the table: the name's own route).
    pub fn route_for(&self, host: &str) -> Option<&Arc<Route>> {
        if !self.splits.is_empty()
            && let Some(split) = self.splits.get(host)
            && let Some(app) = split.pick(|k| self.app(k).is_some())
        {
            return self.app(app);
        }
        self.lookup(host)
    }

    /// The route a request for `host` and `path` goes to by the name's path
    /// rules (see [`paths`]), with the rewrite of its matched prefix; `None`:
    /// no rule takes it (the name's own route, [`route_for`](Self::route_for)).
    pub fn path_route(
        &self,
        host: &str,
        path: &str,
    ) -> Option<(&Arc<Route>, Option<paths::Rewrite>)> {
        if self.paths.is_empty() {
            return None;
        }
        let found = self.paths.get(host)?.find(path)?;
        Some((self.app(found.app)?, found.rewrite))
    }

    /// The policy of an app: its own, else the defaults', else none.
    pub fn policy_for(&self, app: &AppKey) -> Option<&Arc<crate::policy::Policy>> {
        if self.policies.is_empty() {
            return self.default_policy.as_ref();
        }
        self.policies.get(app).or(self.default_policy.as_ref())
    }

    /// The apps a name is split between (blue/green), if it is.
    pub fn split_apps(&self, host: &str) -> impl Iterator<Item = &Arc<Route>> {
        self.splits
            .get(host)
            .into_iter()
            .flat_map(|s| s.apps().collect::<Vec<_>>())
            .filter_map(|k| self.app(&k))
    }

    /// The route of one app.
    pub fn app(&self, key: &AppKey) -> Option<&Arc<Route>> {
        self.app_ref(key)
    }

    fn app_ref(&self, key: &dyn AppKeyRef) -> Option<&Arc<Route>> {
        self.maps.app(key)
    }

    /// Every route, ordered by app.
    pub fn routes(&self) -> impl Iterator<Item = &Arc<Route>> {
        let mut routes: Vec<&Arc<Route>> = self.maps.apps.iter().map(|a| &a.0).collect();
        routes.sort_unstable_by(|a, b| a.app.cmp(&b.app));
        routes.into_iter()
    }

    /// The app's route and its members for `tcp.listen` rule `rule`.
    pub fn tcp_targets(&self, app: &AppKey, rule: usize) -> Option<(Arc<Route>, Vec<Target>)> {
        let route = self.app(app)?;
        let (_, targets) = route.tcp.iter().find(|(r, _)| *r == rule)?;
        Some((route.clone(), targets.clone()))
    }

    /// How many names the table routes (an alias that is also another app's
    /// generated name counts twice).
    pub fn host_count(&self) -> usize {
        self.maps.hosts.len() + self.maps.generated_names
    }

    pub fn app_count(&self) -> usize {
        self.maps.apps.len()
    }
}

/// Puts freshly compiled app policies into the live table (after a settings
/// change, a reload of `app_defaults`, or at start).
pub fn publish_policies(live: &arc_swap::ArcSwap<RouteTable>, policies: &crate::policy::Policies) {
    let (own, default) = policies.compiled();
    live.rcu(|t| {
        let mut next = RouteTable::clone(t);
        next.policies = own.clone();
        next.default_policy = default.clone();
        Arc::new(next)
    });
}

#[cfg(test)]
mod tests;
