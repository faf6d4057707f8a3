//! The route table: host name → route, immutable, swapped whole with `ArcSwap`.
//!
//! Requests load the current table once (one atomic load), look the host up, clone the
//! `Arc<Route>` they need and drop the guard before any `.await`. The update path
//! builds the next table from the previous one and swaps it in; readers never lock.
//!
//! Both maps are persistent (`imbl`): cloning a table is O(1) and changing one app
//! costs O(log n) plus that app's own host names, never a copy of every route. So an
//! event's cost does not grow with the number of apps.
//!
//! Which endpoints become members (the `endpoint_types` filter) and which names an app
//! answers to (HA name, optional app name, aliases) is decided here, from the routing
//! state that `spi-consumer` maintains.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use arc_swap::ArcSwap;
use http::uri::Authority;
use spi_consumer::{App, AppKey, Publish, RoutingState};

use crate::backend::{Backend, Registry};
use crate::balance::Balance;
use crate::health::Probe;
use crate::metrics::Metrics;

/// One application's routing: its names and its members.
#[derive(Debug)]
pub struct Route {
    pub app: AppKey,
    /// Display name and namespace, as the broker sent them.
    pub name: String,
    pub namespace: String,
    /// Every name this route answers to, lower-case.
    pub hosts: Vec<Arc<str>>,
    /// The routable members; empty means 503.
    pub members: Vec<Member>,
    /// Every endpoint the app has, routed or not (for the routes API).
    pub endpoints: Vec<EndpointInfo>,
    pub aliases: Vec<String>,
    /// Aliases that have a certificate.
    pub certificates: Vec<String>,
    /// Round-robin cursor.
    next: AtomicUsize,
    balance: Balance,
    fail_open: bool,
}

/// A member of a route: where to connect, and its shared runtime state.
#[derive(Debug, Clone)]
pub struct Member {
    pub backend: Arc<Backend>,
    /// `public_address:public_port`, dialled exactly.
    pub authority: Authority,
    /// The gear expects TLS (`https`/`wss`/`tls` protocols, i.e. `ssl_to_gear`).
    pub tls: bool,
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
    /// Picks the member for the next request (see [`crate::balance`]).
    pub fn pick(&self) -> Option<&Member> {
        self.balance.pick(&self.members, &self.next, self.fail_open)
    }
}

/// Host → route, plus app → route to find an app's names again when it changes.
#[derive(Clone, Debug, Default)]
pub struct RouteTable {
    hosts: imbl::HashMap<Arc<str>, Arc<Route>>,
    apps: imbl::OrdMap<AppKey, Arc<Route>>,
}

impl RouteTable {
    /// The route for a normalised host name (see [`normalize_host`]).
    pub fn lookup(&self, host: &str) -> Option<&Arc<Route>> {
        self.hosts.get(host)
    }

    pub fn routes(&self) -> impl Iterator<Item = &Arc<Route>> {
        self.apps.values()
    }

    pub fn host_count(&self) -> usize {
        self.hosts.len()
    }

    pub fn app_count(&self) -> usize {
        self.apps.len()
    }
}

/// Lower-cases a Host header value and strips its port and a trailing dot, for lookup.
/// Returns `None` for values no route can ever match (empty, bad characters).
pub fn normalize_host(raw: &str) -> Option<std::borrow::Cow<'_, str>> {
    let host = if let Some(rest) = raw.strip_prefix('[') {
        // IPv6 literal: "[::1]:8080".
        let end = rest.find(']')?;
        &raw[..end + 2]
    } else {
        match raw.rsplit_once(':') {
            Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
            Some(_) => return None,
            None => raw,
        }
    };
    let host = host.strip_suffix('.').unwrap_or(host);
    if host.is_empty()
        || !host.bytes().all(|b| {
            b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'[' | b']' | b':')
        })
    {
        return None;
    }
    if host.bytes().any(|b| b.is_ascii_uppercase()) {
        Some(std::borrow::Cow::Owned(host.to_ascii_lowercase()))
    } else {
        Some(std::borrow::Cow::Borrowed(host))
    }
}

/// The naming rules, from the configuration.
#[derive(Clone, Debug)]
pub struct Naming {
    pub cloud_domain: String,
    pub ha_prefix: String,
    pub ha_suffix: String,
    pub app_dns: bool,
    pub endpoint_types: Vec<String>,
    /// How members are chosen (not naming, but decided at the same place).
    pub balance: Balance,
    /// With every member down, send to them anyway (`health.fail_open`).
    pub fail_open: bool,
}

impl Naming {
    /// `<prefix><app>-<ns><suffix>.<cloud_domain>`, lower-case.
    pub fn ha_name(&self, app: &AppKey) -> String {
        format!(
            "{}{}-{}{}.{}",
            self.ha_prefix, app.name, app.namespace, self.ha_suffix, self.cloud_domain
        )
        .to_ascii_lowercase()
    }

    pub fn app_name(&self, app: &AppKey) -> String {
        format!("{}-{}.{}", app.name, app.namespace, self.cloud_domain).to_ascii_lowercase()
    }

    fn routed(&self, types: &[String]) -> bool {
        types.iter().any(|t| self.endpoint_types.contains(t))
    }
}

/// Builds route tables from the routing state and publishes them.
pub struct Builder {
    naming: Naming,
    registry: Arc<Registry>,
    live: Arc<ArcSwap<RouteTable>>,
    metrics: Metrics,
    /// The alias certificates follow the same changes (see [`crate::tls::store`]).
    certs: Option<Arc<std::sync::Mutex<crate::tls::store::CertIndex>>>,
}

impl Builder {
    pub fn new(
        naming: Naming,
        registry: Arc<Registry>,
        live: Arc<ArcSwap<RouteTable>>,
        metrics: Metrics,
    ) -> Builder {
        Builder {
            naming,
            registry,
            live,
            metrics,
            certs: None,
        }
    }

    /// Also keeps `certs` in step with the state.
    pub fn with_certs(
        mut self,
        certs: Arc<std::sync::Mutex<crate::tls::store::CertIndex>>,
    ) -> Builder {
        self.certs = Some(certs);
        self
    }

    /// The next table: `table` with the apps in `changed` rebuilt from `state`.
    pub fn update(
        &self,
        table: &RouteTable,
        state: &RoutingState,
        changed: &BTreeSet<AppKey>,
    ) -> RouteTable {
        let mut next = table.clone();
        for key in changed {
            if let Some(old) = next.apps.remove(key) {
                for host in &old.hosts {
                    // Only if the name still points at this app (an alias may have moved).
                    if next.hosts.get(host).is_some_and(|r| r.app == *key) {
                        next.hosts.remove(host);
                    }
                }
            }
            if let Some(app) = state.app(key).filter(|a| a.is_announced()) {
                let route = Arc::new(self.route(key, app));
                for host in &route.hosts {
                    next.hosts.insert(host.clone(), route.clone());
                }
                next.apps.insert(key.clone(), route);
            }
        }
        next
    }

    fn route(&self, key: &AppKey, app: &App) -> Route {
        let mut hosts: Vec<Arc<str>> = vec![Arc::from(self.naming.ha_name(key))];
        if self.naming.app_dns {
            hosts.push(Arc::from(self.naming.app_name(key)));
        }
        hosts.extend(app.aliases.iter().map(|a| Arc::from(a.as_str())));
        hosts.dedup();

        let mut members = Vec::new();
        let mut endpoints = Vec::new();
        for (addr, ep) in &app.endpoints {
            let mut routed = self.naming.routed(&ep.types);
            if routed {
                match addr.parse::<Authority>() {
                    Ok(authority) => {
                        let has = |names: &[&str]| {
                            ep.protocols.iter().any(|p| names.contains(&p.as_str()))
                        };
                        let tls = has(&["https", "wss", "tls"]);
                        // HTTP checks for plain HTTP members (no protocols listed
                        // means the default, http); TCP for TLS and anything else.
                        let http = !tls && (ep.protocols.is_empty() || has(&["http", "ws"]));
                        let backend = self.registry.get(addr, || Probe {
                            tcp_only: !http,
                            host: Some(Arc::from(self.naming.app_name(key))),
                        });
                        members.push(Member {
                            backend,
                            authority,
                            tls,
                        })
                    }
                    Err(e) => {
                        tracing::warn!(app = %key, member = %addr, error = %e, "member address is not usable; not routed");
                        routed = false;
                    }
                }
            }
            endpoints.push(EndpointInfo {
                address: addr.clone(),
                gear_id: ep.gear_id.clone(),
                cartridge: ep.port_name.clone(),
                types: ep.types.clone(),
                protocols: ep.protocols.clone(),
                routed,
            });
        }
        Route {
            app: key.clone(),
            name: app.name.clone(),
            namespace: app.namespace.clone(),
            hosts,
            members,
            endpoints,
            aliases: app.aliases.iter().cloned().collect(),
            certificates: app.certificates.keys().cloned().collect(),
            next: AtomicUsize::new(0),
            balance: self.naming.balance,
            fail_open: self.naming.fail_open,
        }
    }
}

impl Publish for Builder {
    fn publish(&mut self, state: &RoutingState, changed: &BTreeSet<AppKey>) {
        // Certificates first: a new alias is routable only once its certificate is.
        if let Some(certs) = &self.certs {
            certs.lock().unwrap_or_else(|p| p.into_inner()).update(
                state,
                changed,
                std::time::Instant::now(),
            );
        }
        let current = self.live.load_full();
        let next = self.update(&current, state, changed);
        self.metrics.routes.set(next.host_count() as i64);
        self.metrics.apps.set(next.app_count() as i64);
        self.metrics.table_updates.inc();
        self.live.store(Arc::new(next));
        tracing::debug!(apps = changed.len(), "route table updated");
    }
}

#[cfg(test)]
mod tests;
