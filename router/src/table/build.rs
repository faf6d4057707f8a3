//! Building the next route table from the routing state, and publishing it: the end
//! of an event's path (decoded → applied → persisted → **published**) and the one
//! place it meets the request path, the `ArcSwap<RouteTable>`.
//!
//! Which endpoints become members (the `endpoint_types` filter) and which names an
//! app answers to (HA name, optional app name, aliases) is decided here. Members are
//! found (or created) in the [`MemberRegistry`], so their state survives the swap.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use arc_swap::ArcSwap;
use spi_consumer::{App, AppKey, AppKeyRef, Publish, RoutingState};

use super::balance::Balance;
use super::{AppRoute, EndpointInfo, Generated, HostRoute, Route, RouteTable, Target};
use crate::members::MemberRegistry;
use crate::members::probe::Probe;
use crate::metrics::Metrics;
use crate::tls::store::CertIndex;

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
    /// The `tcp.listen` rules, by number: their members are kept per app too.
    pub tcp: Arc<[super::TcpMatch]>,
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
    /// The same naming, to take generated names apart (shared with every table).
    generated: Arc<Generated>,
    registry: Arc<MemberRegistry>,
    live: Arc<ArcSwap<RouteTable>>,
    metrics: Metrics,
    /// The alias certificates follow the same changes (see [`crate::tls::store`]).
    certs: Option<Arc<std::sync::Mutex<CertIndex>>>,
    /// Where changes are remembered for the status page.
    recent: Option<Arc<super::recent::Recent>>,
}

impl Builder {
    pub fn new(
        naming: Naming,
        registry: Arc<MemberRegistry>,
        live: Arc<ArcSwap<RouteTable>>,
        metrics: Metrics,
    ) -> Builder {
        Builder {
            generated: Arc::new(Generated::new(&naming)),
            naming,
            registry,
            live,
            metrics,
            certs: None,
            recent: None,
        }
    }

    /// Also remembers each change in `recent`.
    pub fn with_recent(mut self, recent: Arc<super::recent::Recent>) -> Builder {
        self.recent = Some(recent);
        self
    }

    /// Also keeps `certs` in step with the state.
    pub fn with_certs(mut self, certs: Arc<std::sync::Mutex<CertIndex>>) -> Builder {
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
        if !next
            .generated
            .as_ref()
            .is_some_and(|g| Arc::ptr_eq(g, &self.generated))
        {
            next.generated = Some(self.generated.clone());
        }
        for key in changed {
            let mut removed = None;
            if let Some((AppRoute(old), ())) = next.apps.remove_with_key(key as &dyn AppKeyRef) {
                removed = Some(format!("{}-{}", old.name, old.namespace));
                next.passthrough -= usize::from(old.passthrough);
                next.generated_names -= usize::from(old.generated);
                for host in &old.hosts[usize::from(old.generated)..] {
                    // Only if the name still points at this app (an alias may have moved).
                    if next.listed(host).is_some_and(|r| r.app == *key) {
                        next.hosts.remove(&**host);
                    }
                }
            }
            let app = state.app(key).filter(|a| a.is_announced());
            if let Some(old) = &removed
                && app.is_none_or(|a| label(a) != old.as_str())
            {
                self.metrics.app_traffic.remove(old);
            }
            if let Some(app) = app {
                let route = Arc::new(self.route(key, app));
                next.passthrough += usize::from(route.passthrough);
                next.generated_names += usize::from(route.generated);
                for at in usize::from(route.generated)..route.hosts.len() {
                    if let Some(host) = HostRoute::new(route.clone(), at) {
                        // The key is the entry: a name another app had is replaced
                        // whole.
                        next.hosts.remove(host.name());
                        next.hosts.insert(host, ());
                    }
                }
                next.apps.insert(AppRoute(route), ());
            }
        }
        next
    }

    fn route(&self, key: &AppKey, app: &App) -> Route {
        let mut hosts: Vec<Arc<str>> = vec![Arc::from(self.naming.ha_name(key))];
        if self.naming.app_dns {
            hosts.push(Arc::from(self.naming.app_name(key)));
        }
        hosts.dedup();
        // Resolved from the key, not stored, where the key resolves back.
        let generated = if self.generated.resolves(key) {
            hosts.len() as u8
        } else {
            0
        };
        hosts.extend(app.aliases.iter().map(|a| Arc::from(a.as_str())));
        hosts.dedup();

        let mut members = Vec::new();
        let mut endpoints = Vec::new();
        let mut passthrough = true;
        for (addr, ep) in &app.endpoints {
            let mut routed = self.naming.routed(&ep.types);
            if routed {
                match addr.parse::<SocketAddr>() {
                    Ok(_) => {
                        let has = |names: &[&str]| {
                            ep.protocols.iter().any(|p| names.contains(&p.as_str()))
                        };
                        let tls = has(&["https", "wss", "tls"]);
                        // The "SNI proxy" protocol: the gear terminates TLS itself.
                        passthrough &= has(&["tls"]) && !has(&["https", "wss"]);
                        // HTTP checks for plain HTTP members (no protocols listed
                        // means the default, http); TCP for TLS and anything else.
                        let http = !tls && (ep.protocols.is_empty() || has(&["http", "ws"]));
                        let member = self.registry.get(addr, || Probe {
                            tcp_only: !http,
                            host: Some(Arc::from(self.naming.app_name(key))),
                        });
                        // A load balancer's mappings are the node's own (never
                        // reachable through the router); a web framework's apply.
                        let mappings = (!ep.types.iter().any(|t| t == "load_balancer"))
                            .then(|| super::mappings::Mappings::of(&ep.mappings))
                            .flatten()
                            .map(Arc::new);
                        members.push(Target {
                            member,
                            tls,
                            mappings,
                        })
                    }
                    Err(e) => {
                        tracing::warn!(app = %key, member = %addr, error = %e, "member address is not an IP address and port; not routed");
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
        let passthrough = passthrough && !members.is_empty();
        let tcp = self.tcp_targets(key, app);
        Route {
            app: key.clone(),
            name: app.name.clone(),
            namespace: app.namespace.clone(),
            hosts,
            generated,
            members,
            endpoints,
            aliases: app.aliases.iter().cloned().collect(),
            certificates: app.certificates.keys().cloned().collect(),
            next: AtomicUsize::new(0),
            balance: self.naming.balance,
            fail_open: self.naming.fail_open,
            passthrough,
            tcp,
            traffic: self.metrics.app_traffic.of(&label(app)),
        }
    }

    /// Members of `app` for each `tcp.listen` rule that names it, checked by TCP.
    fn tcp_targets(&self, key: &AppKey, app: &App) -> Vec<(usize, Vec<Target>)> {
        let mut out = Vec::new();
        for (rule, m) in self.naming.tcp.iter().enumerate() {
            if m.app != *key {
                continue;
            }
            let targets = app
                .endpoints
                .iter()
                .filter(|(addr, ep)| m.matches(ep) && addr.parse::<SocketAddr>().is_ok())
                .map(|(addr, _)| Target {
                    member: self.registry.get(addr, || Probe {
                        tcp_only: true,
                        host: None,
                    }),
                    tls: false,
                    mappings: None,
                })
                .collect();
            out.push((rule, targets));
        }
        out
    }
}

/// From this many changed apps on (the saved state at start, a resync), the
/// certificates are indexed on a thread of their own while the table is built.
pub(crate) const SIDE_BY_SIDE: usize = 1_000;

impl Publish for Builder {
    fn publish(&mut self, state: &RoutingState, changed: &BTreeSet<AppKey>) {
        let now = std::time::Instant::now();
        let certs = self.certs.clone();
        let index = |certs: &std::sync::Mutex<CertIndex>| {
            certs
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .update(state, changed, now)
        };
        // Certificates are published before the table: a new alias is routable only
        // once its certificate is.
        let built = match &certs {
            Some(certs) if changed.len() >= SIDE_BY_SIDE => {
                let base = self.live.load_full();
                std::thread::scope(|s| {
                    let indexed = s.spawn(|| index(certs));
                    let next = Arc::new(self.update(&base, state, changed));
                    if indexed.join().is_err() {
                        tracing::error!("indexing the certificates failed");
                    }
                    Some((base, next))
                })
            }
            Some(certs) => {
                index(certs);
                None
            }
            None => None,
        };
        // rcu: the admin API swaps the table too (splits), never losing either change.
        self.live.rcu(|current| match &built {
            Some((base, next)) if Arc::ptr_eq(base, current) => next.clone(),
            _ => Arc::new(self.update(current, state, changed)),
        });
        if let Some(certs) = &certs {
            certs
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .read_restored_expiry();
        }
        let next = self.live.load();
        self.metrics.routes.set(next.host_count() as i64);
        self.metrics.apps.set(next.app_count() as i64);
        self.metrics.table_updates.inc();
        if let Some(recent) = self.recent.as_ref().filter(|_| !changed.is_empty()) {
            recent.record(changed.len(), changed.iter().map(|k| k.to_string()));
        }
        tracing::debug!(apps = changed.len(), "route table updated");
    }
}

/// An app's label in the per-app metrics and the admin API: `name-namespace`.
fn label(app: &App) -> String {
    format!("{}-{}", app.name, app.namespace)
}
