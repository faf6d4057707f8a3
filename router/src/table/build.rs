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
use spi_consumer::{App, AppKey, Publish, RoutingState};

use super::balance::Balance;
use super::maps::Change;
use super::{EndpointInfo, Generated, Route, RouteMaps, RouteTable, Target};
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
    /// `wildcard_aliases`: `*.domain` aliases are routed (else left out).
    pub wildcard_aliases: bool,
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

    /// The aliases that are routed: every one, but a wildcard (`*.domain`)
    /// only with `wildcard_aliases`.
    fn admitted<'a>(
        &self,
        aliases: impl IntoIterator<Item = &'a String>,
    ) -> impl Iterator<Item = &'a str> {
        let wildcards = self.wildcard_aliases;
        aliases
            .into_iter()
            .map(String::as_str)
            .filter(move |a| wildcards || !a.starts_with("*."))
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
    /// The maps the live table had before this builder's last publish.
    spare: Option<Spare>,
}

/// The copy of the maps that is not live (see [`super::maps`]): `behind` is what
/// `ahead` was made from by `changes`.
struct Spare {
    behind: Arc<RouteMaps>,
    ahead: Arc<RouteMaps>,
    changes: Vec<Change>,
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
            spare: None,
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

    /// The next table: `table` with the apps in `changed` rebuilt from `state`, in
    /// a copy of its maps (publishing writes the spare copy instead).
    pub fn update(
        &self,
        table: &RouteTable,
        state: &RoutingState,
        changed: &BTreeSet<AppKey>,
    ) -> RouteTable {
        let mut maps = RouteMaps::clone(&table.maps);
        self.apply(&mut maps, state, changed);
        self.table_with(table, Arc::new(maps))
    }

    /// `table` with `maps` (and this builder's naming for generated names).
    fn table_with(&self, table: &RouteTable, maps: Arc<RouteMaps>) -> RouteTable {
        let mut next = table.clone();
        next.maps = maps;
        if !next
            .generated
            .as_ref()
            .is_some_and(|g| Arc::ptr_eq(g, &self.generated))
        {
            next.generated = Some(self.generated.clone());
        }
        next
    }

    /// Rebuilds the apps in `changed` from `state` in `maps`; what it put, in order.
    fn apply(
        &self,
        maps: &mut RouteMaps,
        state: &RoutingState,
        changed: &BTreeSet<AppKey>,
    ) -> Vec<Change> {
        let mut changes = Vec::with_capacity(changed.len());
        for key in changed {
            let app = state.app(key).filter(|a| a.is_announced());
            let route = app.map(|app| Arc::new(self.route(key, app)));
            changes.push(match &route {
                Some(r) => Change::Put(r.clone()),
                None => Change::Gone(key.clone()),
            });
            if let Some(old) = maps.replace(key, route) {
                let old = format!("{}-{}", old.name, old.namespace);
                if app.is_none_or(|a| label(a) != old) {
                    self.metrics.app_traffic.remove(&old);
                }
            }
        }
        changes
    }

    /// `base`'s maps with the apps in `changed` rebuilt: written into the spare
    /// copy when it is one batch behind `base`'s and no reader holds it, else
    /// into a clone of `base`'s (see [`super::maps`]).
    fn next_maps(
        &mut self,
        base: &RouteTable,
        state: &RoutingState,
        changed: &BTreeSet<AppKey>,
    ) -> (RouteMaps, Vec<Change>) {
        let spare = self
            .spare
            .take()
            .filter(|s| Arc::ptr_eq(&s.ahead, &base.maps))
            .and_then(|s| Some((Arc::try_unwrap(s.behind).ok()?, s.changes)));
        let mut maps = match spare {
            Some((mut behind, changes)) => {
                behind.catch_up(&changes);
                behind
            }
            None => {
                self.metrics.table_copies.inc();
                RouteMaps::clone(&base.maps)
            }
        };
        let changes = self.apply(&mut maps, state, changed);
        (maps, changes)
    }

    /// Publishes `maps` as the next table of `base`, keeping `base`'s maps as the
    /// spare. The admin API swaps the table too (splits, policies): a table it
    /// swapped in meanwhile has the same maps and gets the new ones; one with
    /// other maps is rebuilt with `changed` (rcu: neither change is lost).
    fn swap_in(
        &mut self,
        base: &RouteTable,
        (maps, changes): (RouteMaps, Vec<Change>),
        state: &RoutingState,
        changed: &BTreeSet<AppKey>,
    ) {
        let maps = Arc::new(maps);
        let previous = self.live.rcu(|current| {
            Arc::new(if Arc::ptr_eq(&current.maps, &base.maps) {
                self.table_with(current, maps.clone())
            } else {
                self.update(current, state, changed)
            })
        });
        self.spare = Arc::ptr_eq(&previous.maps, &base.maps).then(|| Spare {
            behind: base.maps.clone(),
            ahead: maps,
            changes,
        });
    }

    /// An app's names: its generated ones first (how many of them, when they
    /// are resolved from the key rather than stored), then its admitted aliases.
    fn hosts(&self, key: &AppKey, app: &App) -> (Vec<Arc<str>>, u8) {
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
        hosts.extend(self.naming.admitted(&app.aliases).map(Arc::from));
        hosts.dedup();
        (hosts, generated)
    }

    fn route(&self, key: &AppKey, app: &App) -> Route {
        let (hosts, generated) = self.hosts(key, app);
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
        let base = self.live.load_full();
        let next = match &certs {
            Some(certs) if changed.len() >= SIDE_BY_SIDE => std::thread::scope(|s| {
                let indexed = s.spawn(|| index(certs));
                let next = self.next_maps(&base, state, changed);
                if indexed.join().is_err() {
                    tracing::error!("indexing the certificates failed");
                }
                next
            }),
            Some(certs) => {
                index(certs);
                self.next_maps(&base, state, changed)
            }
            None => self.next_maps(&base, state, changed),
        };
        self.swap_in(&base, next, state, changed);
        drop(base);
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
