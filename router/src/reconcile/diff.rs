//! What differs between the router's view of one app and the broker's, and the
//! routing events that make them agree.
//!
//! An endpoint is the same when its `address:port`, gear, cartridge, types and
//! protocols are (mappings are not compared: a broker older than mappings sends
//! none). Aliases compare by name. Certificates are out of scope: the REST API does
//! not return private keys.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use spi_consumer::apply::App;
use spi_consumer::decode::{AppId, Endpoint, RoutingEvent, endpoint_key};

use super::broker::BrokerApp;
use crate::table::Route;

/// One difference, as reported and counted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Difference {
    /// `missing_member`, `stale_member`, `changed_member`, `missing_alias`,
    /// `stale_alias`, `stale_app` or `missing_app`.
    pub kind: &'static str,
    /// The member (`address:port`) or the alias; empty for an app.
    pub what: String,
}

/// The comparable part of one endpoint.
#[derive(Debug, PartialEq, Eq)]
struct Seen<'a> {
    gear_id: Option<&'a str>,
    cartridge: Option<&'a str>,
    types: &'a [String],
    protocols: &'a [String],
}

/// The router's side of an app.
pub struct Ours<'a> {
    endpoints: BTreeMap<String, Seen<'a>>,
    aliases: BTreeSet<&'a str>,
}

impl<'a> Ours<'a> {
    /// From the live route table (for a report while events keep flowing).
    pub fn of_route(route: &'a Route) -> Ours<'a> {
        Ours {
            endpoints: route
                .endpoints
                .iter()
                .map(|e| {
                    (
                        e.address.clone(),
                        Seen {
                            gear_id: e.gear_id.as_deref(),
                            cartridge: e.cartridge.as_deref(),
                            types: &e.types,
                            protocols: &e.protocols,
                        },
                    )
                })
                .collect(),
            aliases: route.aliases.iter().map(String::as_str).collect(),
        }
    }

    /// From the saved state (when fixing, with the event source stopped).
    pub fn of_app(app: &'a App) -> Ours<'a> {
        Ours {
            endpoints: app
                .endpoints
                .iter()
                .map(|(k, e)| (k.clone(), seen(e)))
                .collect(),
            aliases: app.aliases.iter().map(String::as_str).collect(),
        }
    }
}

fn seen(e: &Endpoint) -> Seen<'_> {
    Seen {
        gear_id: e.gear_id.as_deref(),
        cartridge: e.port_name.as_deref(),
        types: &e.types,
        protocols: &e.protocols,
    }
}

/// Differences between `ours` and the broker's `theirs` (`None`: the broker does not
/// know the app).
pub fn diff(ours: &Ours<'_>, theirs: Option<&BrokerApp>) -> Vec<Difference> {
    let Some(theirs) = theirs else {
        return vec![Difference {
            kind: "stale_app",
            what: String::new(),
        }];
    };
    let mut out = Vec::new();
    let broker: BTreeMap<String, &Endpoint> = theirs
        .endpoints
        .iter()
        .map(|e| (endpoint_key(&e.address, e.port), e))
        .collect();
    for (key, e) in &broker {
        match ours.endpoints.get(key) {
            None => out.push(Difference {
                kind: "missing_member",
                what: key.clone(),
            }),
            Some(s) if *s != seen(e) => out.push(Difference {
                kind: "changed_member",
                what: key.clone(),
            }),
            Some(_) => {}
        }
    }
    for key in ours.endpoints.keys().filter(|k| !broker.contains_key(*k)) {
        out.push(Difference {
            kind: "stale_member",
            what: key.clone(),
        });
    }
    for a in theirs
        .aliases
        .iter()
        .filter(|a| !ours.aliases.contains(a.as_str()))
    {
        out.push(Difference {
            kind: "missing_alias",
            what: a.clone(),
        });
    }
    for a in ours
        .aliases
        .iter()
        .filter(|a| !theirs.aliases.contains(**a))
    {
        out.push(Difference {
            kind: "stale_alias",
            what: a.to_string(),
        });
    }
    out
}

/// What differs for an app the router has no route for: `missing_app` when the
/// broker has anything to route (an endpoint or an alias), else nothing.
pub fn unknown(theirs: Option<&BrokerApp>) -> Vec<Difference> {
    match theirs {
        Some(t) if !t.endpoints.is_empty() || !t.aliases.is_empty() => vec![Difference {
            kind: "missing_app",
            what: String::new(),
        }],
        _ => Vec::new(),
    }
}

/// The events that create an app the router never heard of as the broker has it.
pub fn creates(id: &AppId, theirs: &BrokerApp) -> Vec<RoutingEvent> {
    let endpoints = theirs
        .endpoints
        .iter()
        .map(|e| RoutingEvent::AddPublicEndpoint {
            app: id.clone(),
            endpoint: e.clone(),
        });
    let aliases = theirs.aliases.iter().map(|a| RoutingEvent::AddAlias {
        app: id.clone(),
        alias: a.clone(),
    });
    endpoints.chain(aliases).collect()
}

/// The events that turn `app` into what the broker says.
pub fn fixes(app: &App, theirs: Option<&BrokerApp>) -> Vec<RoutingEvent> {
    let id = AppId {
        name: app.name.clone(),
        namespace: app.namespace.clone(),
    };
    let Some(broker) = theirs else {
        return vec![RoutingEvent::DeleteApplication { app: id }];
    };
    let ours = Ours::of_app(app);
    diff(&ours, theirs)
        .into_iter()
        .filter_map(|d| match d.kind {
            "missing_member" | "changed_member" => broker
                .endpoints
                .iter()
                .find(|e| endpoint_key(&e.address, e.port) == d.what)
                .map(|e| RoutingEvent::AddPublicEndpoint {
                    app: id.clone(),
                    endpoint: e.clone(),
                }),
            "stale_member" => {
                app.endpoints
                    .get(&d.what)
                    .map(|e| RoutingEvent::RemovePublicEndpoint {
                        app: id.clone(),
                        gear_id: e.gear_id.clone(),
                        address: e.address.clone(),
                        port: e.port,
                    })
            }
            "missing_alias" => Some(RoutingEvent::AddAlias {
                app: id.clone(),
                alias: d.what,
            }),
            "stale_alias" => Some(RoutingEvent::RemoveAlias {
                app: id.clone(),
                alias: d.what,
            }),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(addr: &str, port: u16, types: &[&str]) -> Endpoint {
        Endpoint {
            gear_id: Some("g1".into()),
            port_name: Some("haproxy-1.4".into()),
            address: addr.into(),
            port,
            protocols: vec!["http".into()],
            types: types.iter().map(|t| t.to_string()).collect(),
            mappings: vec![],
        }
    }

    fn app(eps: &[Endpoint], aliases: &[&str]) -> App {
        let mut state = spi_consumer::RoutingState::default();
        let id = AppId {
            name: "MyApp".into(),
            namespace: "demo".into(),
        };
        for e in eps {
            state.apply(&RoutingEvent::AddPublicEndpoint {
                app: id.clone(),
                endpoint: e.clone(),
            });
        }
        for a in aliases {
            state.apply(&RoutingEvent::AddAlias {
                app: id.clone(),
                alias: a.to_string(),
            });
        }
        let key = spi_consumer::AppKey::of(&id);
        (**state.app(&key).expect("app")).clone()
    }

    #[test]
    fn every_kind_and_the_events_that_fix_it() {
        let ours = app(
            &[
                ep("10.0.0.1", 1, &["load_balancer"]),
                ep("10.0.0.2", 2, &["load_balancer"]),
                ep("10.0.0.3", 3, &["web_framework"]),
            ],
            &["old.example.com", "kept.example.com"],
        );
        let theirs = BrokerApp {
            endpoints: vec![
                ep("10.0.0.1", 1, &["load_balancer"]),
                ep("10.0.0.3", 3, &["load_balancer"]),
                ep("10.0.0.4", 4, &["load_balancer"]),
            ],
            aliases: [
                "kept.example.com".to_string(),
                "new.example.com".to_string(),
            ]
            .into(),
        };
        let mut kinds: Vec<(&str, String)> = diff(&Ours::of_app(&ours), Some(&theirs))
            .into_iter()
            .map(|d| (d.kind, d.what))
            .collect();
        kinds.sort();
        assert_eq!(
            kinds,
            [
                ("changed_member", "10.0.0.3:3".into()),
                ("missing_alias", "new.example.com".into()),
                ("missing_member", "10.0.0.4:4".into()),
                ("stale_alias", "old.example.com".into()),
                ("stale_member", "10.0.0.2:2".into()),
            ]
        );
        // Applying the fixes leaves nothing to fix.
        let mut state = spi_consumer::RoutingState::default();
        let id = AppId {
            name: "MyApp".into(),
            namespace: "demo".into(),
        };
        for e in ours.endpoints.values() {
            state.apply(&RoutingEvent::AddPublicEndpoint {
                app: id.clone(),
                endpoint: (**e).clone(),
            });
        }
        for a in &ours.aliases {
            state.apply(&RoutingEvent::AddAlias {
                app: id.clone(),
                alias: a.clone(),
            });
        }
        for e in fixes(&ours, Some(&theirs)) {
            state.apply(&e);
        }
        let key = spi_consumer::AppKey::of(&id);
        let fixed = state.app(&key).expect("app");
        assert!(diff(&Ours::of_app(fixed), Some(&theirs)).is_empty());
        // Never heard of: created as the broker has it, and then nothing differs.
        assert_eq!(unknown(Some(&theirs))[0].kind, "missing_app");
        assert!(unknown(None).is_empty());
        let mut state = spi_consumer::RoutingState::default();
        for e in creates(&id, &theirs) {
            state.apply(&e);
        }
        let created = state.app(&key).expect("created");
        assert!(diff(&Ours::of_app(created), Some(&theirs)).is_empty());
        // Gone at the broker: the app is deleted.
        assert!(matches!(
            fixes(&ours, None)[..],
            [RoutingEvent::DeleteApplication { .. }]
        ));
    }
}
