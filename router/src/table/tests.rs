use std::collections::BTreeMap;

use spi_consumer::decode::{Decoded, decode};

use std::collections::BTreeSet;

use arc_swap::ArcSwap;
use spi_consumer::RoutingState;

use super::*;
use crate::metrics::Metrics;

fn naming(app_dns: bool) -> Naming {
    Naming {
        cloud_domain: "example.com".into(),
        ha_prefix: "ha-".into(),
        ha_suffix: "".into(),
        app_dns,
        wildcard_aliases: true,
        endpoint_types: vec!["load_balancer".into()],
        balance: crate::table::balance::Balance::RoundRobin,
        fail_open: true,
        tcp: Arc::from([]),
    }
}

fn builder(app_dns: bool) -> Builder {
    Builder::new(
        naming(app_dns),
        Arc::new(crate::members::tests::registry(100)),
        Arc::new(ArcSwap::from_pointee(RouteTable::default())),
        Metrics::new().expect("metrics"),
    )
}

/// The table as `host -> [members]`, to compare with the fixtures' README.
fn view(t: &RouteTable) -> BTreeMap<String, Vec<String>> {
    t.names()
        .map(|(name, route)| {
            (
                name.to_string(),
                route
                    .members
                    .iter()
                    .map(|m| m.member.addr.to_string())
                    .collect(),
            )
        })
        .collect()
}

fn fixture(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/spi-events")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Applies a fixture to the state and the table, as the consumer would.
fn step(b: &Builder, state: &mut RoutingState, table: &RouteTable, name: &str) -> RouteTable {
    let Ok(Decoded::Event(e)) = decode(&fixture(name)) else {
        panic!("{name} does not decode")
    };
    let mut changed = BTreeSet::new();
    if let spi_consumer::apply::Applied::Changed(k) = state.apply(&e) {
        changed.insert(k);
    }
    b.update(table, state, &changed)
}

fn hosts(pairs: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
    pairs
        .iter()
        .map(|(h, m)| (h.to_string(), m.iter().map(|s| s.to_string()).collect()))
        .collect()
}

#[test]
fn replay_01_to_22_matches_the_readme_table() {
    let b = builder(false);
    let mut state = RoutingState::new();
    let mut table = RouteTable::default();
    let names: Vec<String> = std::fs::read_dir(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/spi-events"),
    )
    .expect("fixtures")
    .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
    .filter(|n| n.ends_with(".yaml") && n.as_str() < "23")
    .collect::<BTreeSet<_>>()
    .into_iter()
    .collect();
    assert_eq!(names.len(), 22);
    let ha = "ha-myapp-demo.example.com";
    for name in &names {
        table = step(&b, &mut state, &table, name);
        let expected = match &name[..2] {
            // create_application alone: known, but no route yet.
            "01" => hosts(&[]),
            // The web_framework endpoint is kept but not routed.
            "02" => hosts(&[(ha, &[])]),
            "03" => hosts(&[(ha, &["10.0.0.11:38032"])]),
            "05" | "06" => hosts(&[(ha, &["10.0.0.11:38032", "10.0.0.12:38037"])]),
            "07" | "08" => hosts(&[
                (ha, &["10.0.0.11:38032", "10.0.0.12:38037"]),
                ("www.example.net", &["10.0.0.11:38032", "10.0.0.12:38037"]),
            ]),
            "09" | "10" => hosts(&[
                (ha, &["10.0.0.11:38032", "10.0.0.12:38037"]),
                (
                    "secure.example.net",
                    &["10.0.0.11:38032", "10.0.0.12:38037"],
                ),
                ("www.example.net", &["10.0.0.11:38032", "10.0.0.12:38037"]),
            ]),
            "12" | "13" => hosts(&[
                (ha, &["10.0.0.11:38032", "10.0.0.12:38037"]),
                (
                    "secure.example.net",
                    &["10.0.0.11:38032", "10.0.0.12:38037"],
                ),
            ]),
            "14" | "15" => hosts(&[
                (ha, &["10.0.0.11:38032"]),
                ("secure.example.net", &["10.0.0.11:38032"]),
            ]),
            "16" | "17" => hosts(&[
                (ha, &["10.0.0.11:38032", "10.0.0.14:38032"]),
                (
                    "secure.example.net",
                    &["10.0.0.11:38032", "10.0.0.14:38032"],
                ),
            ]),
            // The README's "routable state after 01-18".
            "18" | "19" | "20" => hosts(&[
                (ha, &["10.0.0.14:38032"]),
                ("secure.example.net", &["10.0.0.14:38032"]),
            ]),
            // Known names, no member left: 503 until the app is deleted.
            "21" => hosts(&[(ha, &[]), ("secure.example.net", &[])]),
            "22" => hosts(&[]),
            _ => continue,
        };
        assert_eq!(view(&table), expected, "after {name}");
    }
    assert_eq!(table.app_count(), 0);
}

#[test]
fn app_dns_and_ha_suffix_are_configurable() {
    let mut n = naming(true);
    n.ha_suffix = "-ha".into();
    n.ha_prefix = "".into();
    let b = Builder::new(
        n,
        Arc::new(crate::members::tests::registry(100)),
        Arc::new(ArcSwap::from_pointee(RouteTable::default())),
        Metrics::new().expect("metrics"),
    );
    let mut state = RoutingState::new();
    let table = step(
        &b,
        &mut state,
        &RouteTable::default(),
        "40-edge-create_application-mixed-case.yaml",
    );
    assert!(view(&table).is_empty());
    let table = step(
        &b,
        &mut state,
        &table,
        "41-edge-add_public_endpoint-numeric-looking-strings.yaml",
    );
    assert_eq!(
        view(&table).keys().collect::<Vec<_>>(),
        ["2048-acme-ha.example.com", "2048-acme.example.com"]
    );
}

#[test]
fn tls_members_are_marked() {
    let b = builder(false);
    let mut state = RoutingState::new();
    let t = step(
        &b,
        &mut state,
        &RouteTable::default(),
        "42-edge-add_public_endpoint-ssl_to_gear.yaml",
    );
    let r = t.lookup("ha-secureapp-demo.example.com").expect("route");
    assert!(r.members[0].tls);
}

/// Applies an event body given inline (a variant of a fixture).
fn step_body(b: &Builder, state: &mut RoutingState, table: &RouteTable, body: &str) -> RouteTable {
    let Ok(Decoded::Event(e)) = decode(body.as_bytes()) else {
        panic!("does not decode: {body}")
    };
    let mut changed = BTreeSet::new();
    if let spi_consumer::apply::Applied::Changed(k) = state.apply(&e) {
        changed.insert(k);
    }
    b.update(table, state, &changed)
}

/// An app is passthrough when every routed member terminates TLS itself (`tls`,
/// not `https`/`wss`); the table counts such routes, and stops counting them when
/// they change or go.
#[test]
fn passthrough_routes_are_marked_and_counted() {
    let b = builder(false);
    let mut state = RoutingState::new();
    let ssl_to_gear =
        String::from_utf8(fixture("42-edge-add_public_endpoint-ssl_to_gear.yaml")).expect("utf-8");
    let sni_proxy = ssl_to_gear.replace("- https\n- wss\n", "- tls\n");
    let t = step_body(&b, &mut state, &RouteTable::default(), &sni_proxy);
    let r = t.lookup("ha-secureapp-demo.example.com").expect("route");
    assert!(r.passthrough && r.members[0].tls);
    assert_eq!(t.passthrough(), 1);
    // A second member that is re-encrypted (ssl_to_gear): the app is terminated.
    let mixed = ssl_to_gear
        .replace("38047", "38048")
        .replace("000077", "000078");
    let t = step_body(&b, &mut state, &t, &mixed);
    let r = t.lookup("ha-secureapp-demo.example.com").expect("route");
    assert_eq!(
        (r.passthrough, r.members.len(), t.passthrough()),
        (false, 2, 0)
    );
    // The fixture itself (https, wss) was never passthrough.
    let mut state = RoutingState::new();
    let t = step_body(&b, &mut state, &RouteTable::default(), &ssl_to_gear);
    assert_eq!(t.passthrough(), 0);
}

/// The tables after fixture 03 (one member) and then 05 (two members).
fn one_then_two_members() -> (RouteTable, RouteTable) {
    let b = builder(false);
    let mut state = RoutingState::new();
    let one = step(
        &b,
        &mut state,
        &RouteTable::default(),
        "03-add_public_endpoint-load_balancer.yaml",
    );
    let two = step(
        &b,
        &mut state,
        &one,
        "05-add_public_endpoint-load_balancer-gear2.yaml",
    );
    (one, two)
}

#[test]
fn members_keep_their_state_across_swaps() {
    let (t1, t2) = one_then_two_members();
    let ha = "ha-myapp-demo.example.com";
    let before = &t1.lookup(ha).expect("r1").members[0].member;
    let after = &t2.lookup(ha).expect("r2").members[0].member;
    assert!(Arc::ptr_eq(before, after));
    // The old table still serves the old route: in-flight readers are unaffected.
    assert_eq!(t1.lookup(ha).expect("r1").members.len(), 1);
}

#[test]
fn round_robin_visits_every_member() {
    let (_, t) = one_then_two_members();
    let r = t.lookup("ha-myapp-demo.example.com").expect("route");
    let picked: BTreeSet<String> = (0..4)
        .map(|_| r.pick().expect("member").member.addr.to_string())
        .collect();
    assert_eq!(picked.len(), 2);
}

/// `n` apps, each with one load-balancer member, one alias and its certificate.
fn many_apps(n: usize) -> RoutingState {
    RoutingState::from_apps((0..n).map(|i| {
        let alias = format!("www{i}.example.net");
        let endpoint = spi_consumer::decode::Endpoint {
            gear_id: Some(format!("gear{i}")),
            port_name: Some("haproxy-1.4".into()),
            address: "10.1.0.1".into(),
            port: 30_000 + (i % 30_000) as u16,
            protocols: vec!["http".into()],
            types: vec!["load_balancer".into()],
            mappings: Vec::new(),
        };
        let bundle = spi_consumer::CertBundle {
            certificate_pem: format!("cert {i}"),
            private_key_pem: format!("key {i}"),
            pass_phrase: None,
        };
        spi_consumer::App {
            name: format!("app{i}"),
            namespace: "demo".into(),
            scalable: None,
            ha: None,
            endpoints: [(endpoint.key(), Box::new(endpoint))].into_iter().collect(),
            aliases: [alias.clone()].into_iter().collect(),
            certificates: [(alias, Arc::new(bundle))].into_iter().collect(),
        }
    }))
}

fn restoring_index() -> Arc<std::sync::Mutex<crate::tls::store::CertIndex>> {
    Arc::new(std::sync::Mutex::new(
        crate::tls::store::CertIndex::new(
            None,
            Arc::new(rustls::crypto::aws_lc_rs::default_provider()),
            crate::metrics::TlsMetrics::detached(),
            std::time::Duration::from_secs(10),
        )
        .restoring(),
    ))
}

/// A batch large enough to index the certificates on another thread (the saved
/// state at start) publishes the same table as the same apps published one by one,
/// and indexes every certificate.
#[test]
fn a_large_batch_publishes_what_one_by_one_does() {
    let state = many_apps(super::build::SIDE_BY_SIDE + 200);
    let all: BTreeSet<AppKey> = state.apps().map(|(k, _)| k.clone()).collect();

    let publisher = |certs| {
        let live = Arc::new(ArcSwap::from_pointee(RouteTable::default()));
        let b = Builder::new(
            naming(false),
            Arc::new(crate::members::tests::registry(100)),
            live.clone(),
            Metrics::new().expect("metrics"),
        )
        .with_certs(certs);
        (b, live)
    };
    let certs = restoring_index();
    let (mut batch, a) = publisher(certs.clone());
    spi_consumer::Publish::publish(&mut batch, &state, &all);

    let (mut one, b) = publisher(restoring_index());
    for key in &all {
        spi_consumer::Publish::publish(&mut one, &state, &BTreeSet::from([key.clone()]));
    }

    let (a, b) = (a.load_full(), b.load_full());
    assert_eq!(a.app_count(), all.len());
    assert_eq!(a.host_count(), 2 * all.len(), "HA name and alias");
    assert_eq!(view(&a), view(&b));
    // Restored certificates are indexed unparsed (the one-by-one index parses each
    // after the first, and these are not real keys): every alias is listed.
    let listed = certs.lock().expect("index").live().load_full();
    for i in 0..all.len() {
        let alias = format!("www{i}.example.net");
        assert!(listed.has_own(&alias), "{alias}");
    }
}

/// One app with these aliases, served by one load balancer.
fn app_with(name: &str, namespace: &str, aliases: &[&str]) -> spi_consumer::App {
    let endpoint = spi_consumer::decode::Endpoint {
        gear_id: Some(format!("gear-{name}")),
        port_name: Some("haproxy-1.4".into()),
        address: "10.1.0.1".into(),
        port: 30_000,
        protocols: vec!["http".into()],
        types: vec!["load_balancer".into()],
        mappings: Vec::new(),
    };
    spi_consumer::App {
        name: name.into(),
        namespace: namespace.into(),
        scalable: None,
        ha: None,
        endpoints: [(endpoint.key(), Box::new(endpoint))].into_iter().collect(),
        aliases: aliases.iter().map(|a| a.to_string()).collect(),
        certificates: Default::default(),
    }
}

fn keys(state: &RoutingState) -> BTreeSet<AppKey> {
    state.apps().map(|(k, _)| k.clone()).collect()
}

#[test]
fn generated_names_resolve_from_the_key_and_only_aliases_are_stored() {
    let state = many_apps(50);
    let t = builder(true).update(&RouteTable::default(), &state, &keys(&state));
    assert_eq!(t.maps.hosts.len(), 50, "the aliases only");
    assert_eq!(t.host_count(), 150, "HA name, app name and alias");
    assert_eq!(t.names().count(), 150);
    for i in [0, 7, 49] {
        for host in [
            format!("ha-app{i}-demo.example.com"),
            format!("app{i}-demo.example.com"),
            format!("www{i}.example.net"),
        ] {
            let r = t.lookup(&host).unwrap_or_else(|| panic!("{host}"));
            assert_eq!(&*r.app.name, format!("app{i}"), "{host}");
        }
    }
    for host in [
        "ha-app50-demo.example.com",
        "ha-app1-other.example.com",
        "ha-app1-demo.example.org",
        "ha-app1-demo",
        "ha-ha-app1-demo.example.com",
        "app1-demo-.example.com",
    ] {
        assert!(t.lookup(host).is_none(), "{host}");
    }
    // Without app_dns the app name is no name.
    let t = builder(false).update(&RouteTable::default(), &state, &keys(&state));
    assert!(t.lookup("app1-demo.example.com").is_none());
    assert!(t.lookup("ha-app1-demo.example.com").is_some());
    assert_eq!(t.host_count(), 100);
}

#[test]
fn an_alias_wins_over_another_apps_generated_name_until_it_goes() {
    let b = builder(false);
    let taken = "ha-shop-acme.example.com";
    let state = RoutingState::from_apps([
        app_with("shop", "acme", &[]),
        app_with("squatter", "acme", &[taken]),
    ]);
    let t = b.update(&RouteTable::default(), &state, &keys(&state));
    assert_eq!(&*t.lookup(taken).expect("route").app.name, "squatter");

    let state = RoutingState::from_apps([
        app_with("shop", "acme", &[]),
        app_with("squatter", "acme", &[]),
    ]);
    let t = b.update(&t, &state, &keys(&state));
    assert_eq!(&*t.lookup(taken).expect("route").app.name, "shop");
    assert!(t.maps.hosts.is_empty());
}

#[test]
fn a_key_that_does_not_resolve_back_keeps_its_names_in_the_host_map() {
    let b = builder(true);
    let state = RoutingState::from_apps([app_with("a-b", "c", &[]), app_with("a", "bc", &[])]);
    let t = b.update(&RouteTable::default(), &state, &keys(&state));
    assert_eq!(t.maps.hosts.len(), 2, "a-b's two names");
    assert_eq!(
        &*t.lookup("ha-a-b-c.example.com").expect("a-b").app.name,
        "a-b"
    );
    assert_eq!(&*t.lookup("a-bc.example.com").expect("a").app.name, "a");
    assert_eq!(t.host_count(), 4);

    let state = RoutingState::from_apps([app_with("a", "bc", &[])]);
    let t = b.update(
        &t,
        &state,
        &keys(&state)
            .into_iter()
            .chain([AppKey {
                name: "a-b".into(),
                namespace: "c".into(),
            }])
            .collect(),
    );
    assert!(t.maps.hosts.is_empty());
    assert!(t.lookup("ha-a-b-c.example.com").is_none());
    assert_eq!(t.host_count(), 2);
}

/// The table as every name's app, plus the counts, to compare two tables whole.
fn whole(t: &RouteTable) -> (BTreeMap<String, String>, usize, usize, usize) {
    let names = t
        .names()
        .map(|(n, r)| (n.to_string(), r.app.to_string()))
        .collect();
    (names, t.app_count(), t.host_count(), t.passthrough())
}

/// Publishing writes the spare copy of the maps in place (see `table::maps`): after
/// every batch the live table is the one a fresh build of the whole state makes,
/// also across aliases moving between apps, apps going, an admin change of the
/// splits between batches (same maps) and a reader holding an old table (the
/// spare is then copied once, counted).
#[test]
fn the_spare_copy_publishes_what_a_fresh_build_does() {
    let metrics = Metrics::new().expect("metrics");
    let live = Arc::new(ArcSwap::from_pointee(RouteTable::default()));
    let mut b = Builder::new(
        naming(true),
        Arc::new(crate::members::tests::registry(100)),
        live.clone(),
        metrics.clone(),
    );
    let fresh = builder(true);
    let app = |name: &str, aliases: &[&str]| app_with(name, "acme", aliases);
    // Each batch: the whole state, and the apps it changed (all the consumer passes).
    let steps: Vec<(Vec<spi_consumer::App>, &[&str])> = vec![
        (
            vec![
                app("a", &["www.a.net"]),
                app("b", &[]),
                app("c", &["x.net"]),
            ],
            &["a", "b", "c"],
        ),
        // x.net moves from c to b; a gets a second alias.
        (
            vec![
                app("a", &["www.a.net", "a.net"]),
                app("b", &["x.net"]),
                app("c", &[]),
            ],
            &["a", "b", "c"],
        ),
        // c goes; d takes b's generated name as an alias.
        (
            vec![
                app("a", &["a.net"]),
                app("b", &["x.net"]),
                app("d", &["ha-b-acme.example.com"]),
            ],
            &["a", "c", "d"],
        ),
        // d lets it go again, b goes.
        (vec![app("a", &["a.net"]), app("d", &[])], &["b", "d"]),
        (
            vec![app("a", &[]), app("e", &["a.net", "x.net"])],
            &["a", "d", "e"],
        ),
        (
            vec![app("a", &["x.net"]), app("e", &["a.net"])],
            &["a", "e"],
        ),
    ];
    let mut held = None;
    for (i, (apps, changed)) in steps.into_iter().enumerate() {
        let state = RoutingState::from_apps(apps);
        let changed: BTreeSet<AppKey> = changed
            .iter()
            .map(|n| AppKey {
                name: (*n).into(),
                namespace: "acme".into(),
            })
            .collect();
        if i == 2 {
            // The admin API swaps the table between batches: the maps stay shared.
            let weights = BTreeMap::from([("a-acme".to_string(), 1)]);
            let split = Arc::new(split::Split::new(weights).expect("split"));
            live.rcu(|t| {
                let mut next = RouteTable::clone(t);
                next.splits
                    .insert(Arc::from("s.example.com"), split.clone());
                Arc::new(next)
            });
        }
        if i == 3 {
            // A reader keeps the table before the last one: its maps are the spare.
            held = Some(live.load_full());
        }
        spi_consumer::Publish::publish(&mut b, &state, &changed);
        let now = live.load_full();
        let want = fresh.update(&RouteTable::default(), &state, &keys(&state));
        assert_eq!(whole(&now), whole(&want), "after batch {i}");
        if i >= 2 {
            assert!(
                now.splits.contains_key("s.example.com"),
                "batch {i} kept the admin's split"
            );
        }
    }
    // One copy to start (no spare yet), one for the held spare's batch.
    assert_eq!(metrics.table_copies.get(), 2);
    drop(held);
}

/// A wildcard alias answers for names one label under it; exact names and
/// generated names win; its removal takes it out (and the count with it).
#[test]
fn wildcard_aliases_answer_one_label_deep_and_exact_names_win() {
    let b = builder(false);
    let mut state = RoutingState::new();
    let lb = |app: &str, port: u16| {
        format!(
            "---\n:action: :add_public_endpoint\n:app_name: {app}\n:namespace: demo\n\
             :gear_id: 0000{port}\n:public_port: {port}\n:public_address: 10.0.0.1\n\
             :protocols:\n- http\n:types:\n- load_balancer\n:mappings: []\n"
        )
    };
    let alias = |app: &str, alias: &str, action: &str| {
        format!(
            "---\n:action: :{action}\n:app_name: {app}\n:namespace: demo\n:alias: \"{alias}\"\n"
        )
    };
    let mut t = RouteTable::default();
    for body in [
        lb("wild", 35001),
        alias("wild", "*.customer.com", "add_alias"),
        lb("exact", 35002),
        alias("exact", "www.customer.com", "add_alias"),
    ] {
        t = step_body(&b, &mut state, &t, &body);
    }
    let app = |host: &str| t.lookup(host).map(|r| r.name.clone());
    assert_eq!(app("a.customer.com").as_deref(), Some("wild"));
    assert_eq!(app("www.customer.com").as_deref(), Some("exact"));
    assert_eq!(app("a.b.customer.com"), None, "one label deep");
    assert_eq!(app("customer.com"), None, "not the bare domain");
    assert_eq!(app("ha-exact-demo.example.com").as_deref(), Some("exact"));
    assert_eq!(t.maps.wildcards, 1);
    let t = step_body(
        &b,
        &mut state,
        &t,
        &alias("wild", "*.customer.com", "remove_alias"),
    );
    assert_eq!(t.lookup("a.customer.com").map(|r| r.name.clone()), None);
    assert_eq!(t.maps.wildcards, 0);
    // Off (the default), the alias is kept in the state but not routed.
    let mut naming = naming(false);
    naming.wildcard_aliases = false;
    let off = Builder::new(
        naming,
        Arc::new(crate::members::tests::registry(100)),
        Arc::new(ArcSwap::from_pointee(RouteTable::default())),
        Metrics::new().expect("metrics"),
    );
    let mut state = RoutingState::new();
    let mut t = RouteTable::default();
    for body in [
        lb("wild", 35001),
        alias("wild", "*.customer.com", "add_alias"),
    ] {
        t = step_body(&off, &mut state, &t, &body);
    }
    assert!(t.lookup("a.customer.com").is_none() && t.lookup("*.customer.com").is_none());
}
