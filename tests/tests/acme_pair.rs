//! ACME for the HA pair, for real: two routers in network namespaces behind
//! keepalived's VIP, fed by ActiveMQ (see `e2e::hapair`), sharing ACME through
//! each other's admin API (`acme.peer`), and Pebble in the broker's namespace,
//! whose DNS sends every name to the VIP, so the CA validates on whichever
//! router holds it. Pebble keeps its random validation waits and refused nonces.
//!
//! - An alias whose orderer is router b, while a holds the VIP: one order,
//!   validated on a (the answer was put there by b), the certificate served by
//!   both routers (curl and `openssl s_client`, verified against Pebble's root).
//! - An alias whose orderer is a, the VIP holder, killed with `kill -9` in the
//!   middle of its order: b takes the order over by its URL, the certificate
//!   arrives, and Pebble has one order for it, not two.
//! - a restarted: it catches up from b and serves that certificate too, with no
//!   new order.
//! - Renewal of 60-second certificates: b renews its alias at two thirds of the
//!   lifetime, both routers serve the new one, and a client loop through the VIP
//!   meanwhile has no failed request.
//!
//! Needs root, network namespaces, keepalived, ActiveMQ and Pebble (tests/run.sh
//! installs them).

use std::time::{Duration, Instant};

use e2e::hapair::{NAMES, Pair, publish_route};
use e2e::netns::{A_IP, B_IP, MQ_IP, VIP};
use e2e::pebble::{Pebble, Place};

const TOKEN: &str = "acme-pair-test-token";

/// Router `i`'s configuration with the admin listener off loopback (TLS, the
/// token) and ACME from `pebble`, its peer the other router.
fn acme_config(pair: &Pair, pebble: &Pebble, i: usize) -> String {
    let other = [B_IP, A_IP][i];
    pair.admin_off_loopback(i, TOKEN)
        + &format!(
            "acme:\n  directory: {dir}\n  ca_file: {ca}\n  check_interval: 1s\n  peer: \"{other}:9090\"\n  node: {node}\n  peer_timeout: 3s\n\
             app_defaults:\n  acme: true\n",
            dir = pebble.directory,
            ca = pebble.ca_file.display(),
            node = NAMES[i],
        )
}

/// An alias of `app-ns` that router `node` orders while both are up.
fn alias_ordered_by(node: char, stem: &str) -> String {
    (0..)
        .map(|n| format!("{stem}{n}.example.test"))
        .find(|a| router::issuer::orderer(a) == node)
        .expect("an alias")
}

/// Whether `ip`:8443 serves `alias` a certificate that verifies against
/// Pebble's root (curl from the client namespace); if not, why not (curl's
/// exit code and error, or the status).
fn served(pair: &Pair, root: &std::path::Path, alias: &str, ip: &str) -> Result<(), String> {
    let status = e2e::hapair::curl_status(
        pair.topo
            .cmd("c", "curl")
            .args(["-m", "3", "--cacert"])
            .arg(root)
            .args(["--resolve", &format!("{alias}:8443:{ip}")])
            .arg(format!("https://{alias}:8443/")),
    )?;
    match status {
        200 => Ok(()),
        other => Err(format!("status {other}")),
    }
}

fn wait_served(pair: &Pair, root: &std::path::Path, alias: &str, ip: &str, limit: Duration) {
    let start = Instant::now();
    e2e::wait_for(
        &format!("{alias} served a verified certificate on {ip}"),
        limit,
        Duration::from_millis(250),
        || {
            served(pair, root, alias, ip).inspect_err(|_| {
                // Near the end, the routers' own account of why.
                if start.elapsed() + Duration::from_millis(500) > limit {
                    for n in NAMES {
                        let log = std::fs::read_to_string(pair.dir.join(format!("router-{n}.log")))
                            .unwrap_or_default();
                        eprintln!("--- router-{n}:\n{}", tail(&log, 40));
                    }
                }
            })
        },
    );
}

/// The lines of a router's log about ACME.
fn acme_lines(log: &str) -> String {
    log.lines()
        .filter(|l| l.contains("ACME") || l.contains("acme"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// `GET /acme/orders` on router `i`'s admin API: the peer's orders it holds.
fn peer_orders(pair: &Pair, i: usize) -> String {
    let ip = [A_IP, B_IP][i];
    let out = pair
        .topo
        .cmd(NAMES[i], "curl")
        .args(["-s", "-m", "2", "--cacert"])
        .arg(pair.dir.join("ca.pem"))
        .args(["-H", &format!("Authorization: Bearer {TOKEN}")])
        .arg(format!("https://{ip}:9090/acme/orders"))
        .output()
        .expect("curl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Router `i`'s `router_acme_peer_reachable` is 1.
fn peer_reachable(pair: &Pair, i: usize) -> bool {
    let ip = [A_IP, B_IP][i];
    let other = [B_IP, A_IP][i];
    let metrics = pair.topo.sh(
        NAMES[i],
        &format!("curl -s -m 2 http://{ip}:9091/metrics || true"),
    );
    metrics.contains(&format!(
        "router_acme_peer_reachable{{peer=\"{other}:9090\"}} 1"
    ))
}

#[test]
fn one_order_per_alias_for_the_pair_served_by_both_and_a_kill_mid_order_loses_nothing() {
    let mut pair = Pair::prepare(&[]);
    let place = Place {
        netns: Some(pair.topo.ns("m")),
        ip: MQ_IP.into(),
        answer: VIP.into(),
    };
    // Certificates valid for 60 s: renewed at 40 s.
    let pebble = Pebble::start_at(&place, 8080, 8443, Some(60));
    let root = pair.dir.join("pebble-root.pem");
    std::fs::write(&root, pebble.root()).expect("root");
    for i in 0..2 {
        std::fs::write(pair.config(i), acme_config(&pair, &pebble, i)).expect("config");
    }
    pair.start_router(0);
    pair.start_router(1);
    publish_route(&pair);
    pair.start_keepalived(0);
    pair.start_keepalived(1);
    pair.wait_vip(0, VIP, Duration::from_secs(15));

    // 1. Ordered by b while a holds the VIP: Pebble validates on a, which has
    // the answer because b put it there; both serve the certificate.
    let by_b = alias_ordered_by('b', "shop");
    let added = Instant::now();
    pair.publish(&e2e::events::add_alias("app", "ns", &by_b));
    wait_served(&pair, &root, &by_b, B_IP, Duration::from_secs(90));
    let on_b = added.elapsed();
    wait_served(&pair, &root, &by_b, A_IP, Duration::from_secs(10));
    eprintln!(
        "add_alias to a verified handshake: on b (the orderer) {on_b:?}, on a {:?}",
        added.elapsed()
    );
    assert_eq!(pebble.orders(), 1, "one order for the pair");
    let s_client = pair.topo.sh(
        "c",
        &format!(
            "echo | openssl s_client -connect {VIP}:8443 -servername {by_b} -CAfile {} 2>&1",
            root.display()
        ),
    );
    assert!(
        s_client.contains("Verify return code: 0"),
        "openssl s_client through the VIP: {s_client}"
    );

    // 2. Ordered by a, the VIP holder, killed once b holds its order's URL.
    let by_a = alias_ordered_by('a', "cart");
    pair.publish(&e2e::events::add_alias("app", "ns", &by_a));
    e2e::wait_for(
        "router-a's order recorded on b",
        Duration::from_secs(30),
        Duration::from_millis(20),
        || {
            let orders = peer_orders(&pair, 1);
            if orders.contains(&by_a) {
                Ok(())
            } else {
                Err(orders)
            }
        },
    );
    assert!(
        served(&pair, &root, &by_a, A_IP).is_err(),
        "the order is in flight"
    );
    // Pebble is held still from just before the kill until b holds the VIP. A
    // validation landing in that gap (the fraction of a second in which a's
    // kernel still holds the VIP and refuses the connection) fails the order at
    // any CA: no router can answer for a dead one, and the CA then wants a new
    // order (the router places it; the certificate still arrives, from a second
    // order: see operations.md). Pebble's random wait of up to 15 s hits that
    // gap now and then; held still, its waits end when it goes on, at b.
    pebble.freeze(true);
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &pair.router_pid(0)])
        .status();
    pair.wait_vip(1, VIP, Duration::from_secs(5));
    pebble.freeze(false);
    let killed = Instant::now();
    wait_served(&pair, &root, &by_a, B_IP, Duration::from_secs(90));
    eprintln!(
        "kill -9 of the orderer to the certificate served by the other: {:?}",
        killed.elapsed()
    );
    let log_b = std::fs::read_to_string(pair.dir.join("router-b.log")).expect("log");
    assert!(
        log_b.contains("ACME order taken over"),
        "b resumed a's order: {}",
        tail(&log_b, 30)
    );
    assert_eq!(
        pebble.orders(),
        2,
        "a failover in the middle of an order starts no second one; b's ACME lines:\n{}",
        acme_lines(&log_b)
    );

    // 3. a back: it catches up from b, serves the certificate, orders nothing.
    let _ = pair.routers[0].take().map(|mut c| c.wait());
    pair.start_router(0);
    wait_served(&pair, &root, &by_a, A_IP, Duration::from_secs(30));
    wait_served(&pair, &root, &by_b, A_IP, Duration::from_secs(5));
    assert_eq!(pebble.orders(), 2, "a restart orders nothing");
    e2e::wait_until(
        "b sees a again (router_acme_peer_reachable)",
        Duration::from_secs(10),
        || peer_reachable(&pair, 1),
    );

    // 4. Renewal: b renews its alias before expiry and both routers serve the
    // new certificate, with no failed request through the VIP meanwhile.
    let first = [serial(&pair, &by_b, A_IP), serial(&pair, &by_b, B_IP)];
    assert!(!first[0].is_empty() && first[0] == first[1], "{first:?}");
    let (mut requests, mut failed) = (0, Vec::new());
    let start = Instant::now();
    let mut holders = vec![(Duration::ZERO, pair.holder_now(VIP))];
    while serial(&pair, &by_b, A_IP) == first[0] || serial(&pair, &by_b, B_IP) == first[0] {
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "{by_b} not renewed on both within 90 s"
        );
        requests += 1;
        let at = start.elapsed();
        if let Err(why) = served(&pair, &root, &by_b, VIP) {
            failed.push(format!(
                "at {at:?} (VIP on {}): {why}",
                pair.holder_now(VIP)
            ));
        }
        let holder = pair.holder_now(VIP);
        if holders.last().is_some_and(|h| h.1 != holder) {
            holders.push((start.elapsed(), holder));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "renewed after {:?}: {requests} requests, {} failed; VIP holders {holders:?}",
        start.elapsed(),
        failed.len()
    );
    assert!(requests > 10, "the client loop ran: {requests}");
    assert!(
        failed.is_empty(),
        "no failed request while renewing; VIP holders {holders:?}; failed:\n{}",
        failed.join("\n")
    );
    assert_eq!(
        serial(&pair, &by_b, A_IP),
        serial(&pair, &by_b, B_IP),
        "the same renewed certificate on both"
    );
}

/// The serial of the certificate `ip`:8443 serves for `alias` (empty if none).
fn serial(pair: &Pair, alias: &str, ip: &str) -> String {
    pair.topo
        .sh(
            "c",
            &format!(
                "echo | openssl s_client -connect {ip}:8443 -servername {alias} 2>/dev/null | openssl x509 -noout -serial 2>/dev/null || true"
            ),
        )
        .trim()
        .to_string()
}
