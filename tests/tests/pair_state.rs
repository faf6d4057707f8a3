//! The pair as one router, through the real path: two routers in network
//! namespaces, their admin listeners off loopback (TLS, the token), each the
//! other's `pair.peer`. A setting, a split and a rotate-out put on one router
//! are in force on the other; a rotate-out answers once both drained; a router
//! that was down catches up at once, and the older entries it sends back never
//! roll the newer ones back; a link cut and restored loses nothing put
//! meanwhile; a rate limit and the requests in flight count a client once
//! across the pair. Needs root and network namespaces (see
//! `e2e::netns`).

use std::time::Duration;

use e2e::hapair::{NAMES, Pair, publish_route};
use e2e::netns::{A_IP, B_IP, MQ_IP};

const TOKEN: &str = "pair-state-test-token";

/// Router `i`'s configuration: admin off loopback (TLS, the token), the
/// other router as its peer.
fn pair_config(pair: &Pair, i: usize) -> String {
    let other = [B_IP, A_IP][i];
    let key = pair.dir.join("affinity.key");
    std::fs::write(&key, [9u8; 32]).expect("affinity key");
    pair.admin_off_loopback(i, TOKEN)
        + &format!(
            "affinity_key_file: {key}\npair:\n  peer: \"{other}:9090\"\n  node: {node}\n  interval: 300ms\n  timeout: 2s\n",
            key = key.display(),
            node = NAMES[i],
        )
}

/// `router check-pair` run on router `i` against the other: its exit code
/// and what it printed.
fn check_pair(pair: &Pair, i: usize) -> (Option<i32>, String) {
    let (ip, other) = ([A_IP, B_IP][i], [B_IP, A_IP][i]);
    // The CLI calls its own router at listen.admin: its address, which the
    // admin certificate names.
    let cli = pair.dir.join(format!("cli-{}.yaml", NAMES[i]));
    let config = std::fs::read_to_string(pair.config(i)).expect("config");
    std::fs::write(
        &cli,
        config.replace("admin: 0.0.0.0:9090", &format!("admin: {ip}:9090")),
    )
    .expect("cli config");
    let out = pair
        .topo
        .cmd(NAMES[i], e2e::bin("router").to_str().expect("path"))
        .arg("--config")
        .arg(&cli)
        .args(["check-pair", &format!("{other}:9090")])
        .output()
        .expect("router check-pair");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

/// A call on router `i`'s admin API: the status and the body.
fn admin(pair: &Pair, i: usize, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
    let ip = [A_IP, B_IP][i];
    let mut cmd = pair.topo.cmd(NAMES[i], "curl");
    cmd.args(["-s", "-m", "40", "-X", method, "--cacert"])
        .arg(pair.dir.join("ca.pem"))
        .args(["-H", &format!("Authorization: Bearer {TOKEN}")])
        .args(["-w", "\n%{http_code}"]);
    if let Some(body) = body {
        cmd.args(["-H", "Content-Type: application/json", "--data", body]);
    }
    let out = cmd
        .arg(format!("https://{ip}:9090{path}"))
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, status) = text.rsplit_once('\n').unwrap_or(("", &text));
    (status.trim().parse().unwrap_or(0), body.to_string())
}

/// Router `i`'s metrics page.
fn metrics(pair: &Pair, i: usize) -> String {
    let ip = [A_IP, B_IP][i];
    pair.topo.sh(
        NAMES[i],
        &format!("curl -s -m 2 http://{ip}:9091/metrics || true"),
    )
}

/// Waits until router `i`'s `GET path` answers 200 with a body containing
/// `want` (whitespace aside: the API pretty-prints); the failure says what it
/// answered last.
fn wait_shows(pair: &Pair, i: usize, path: &str, want: &str, what: &str) {
    e2e::wait_for(
        &format!("router {} {what}", NAMES[i]),
        Duration::from_secs(15),
        Duration::from_millis(100),
        || match admin(pair, i, "GET", path, None) {
            (200, body) if compact(&body).contains(want) => Ok(()),
            (status, body) => Err(format!("{path}: {status} {}", compact(&body))),
        },
    );
}

/// Waits until router `i`'s `router_pair_peer_up` is `up` (`why`: what the
/// test did to make it so).
fn wait_peer_up(pair: &Pair, i: usize, up: u8, why: &str) {
    let other = [B_IP, A_IP][i];
    let want = format!("router_pair_peer_up{{peer=\"{other}:9090\"}} {up}");
    e2e::wait_until(
        &format!("router {} counts its peer {up} ({why})", NAMES[i]),
        Duration::from_secs(10),
        || metrics(pair, i).contains(&want),
    );
}

/// Puts `app-ns`'s `max_connections_per_client` on router `i` (`when`: for
/// the failure message).
fn put_limit(pair: &Pair, i: usize, limit: u32, when: &str) {
    let body = format!("{{\"max_connections_per_client\": {limit}}}");
    let (status, answer) = admin(pair, i, "PUT", "/apps/app-ns/settings", Some(&body));
    assert_eq!(status, 200, "PUT on {} {when}: {answer}", NAMES[i]);
}

/// Cuts the link: b drops a's packets to and from its admin port (nftables
/// in b's namespace); returns once a counts b down.
fn cut_link(pair: &Pair) {
    let cut = format!(
        "nft add table inet pairtest && \
         nft add chain inet pairtest input '{{ type filter hook input priority 0; }}' && \
         nft add rule inet pairtest input ip saddr {A_IP} tcp dport 9090 drop && \
         nft add rule inet pairtest input ip saddr {A_IP} tcp sport 9090 drop && echo cut"
    );
    assert!(
        pair.topo.sh("b", &cut).contains("cut"),
        "nft in b's namespace"
    );
    wait_peer_up(pair, 0, 0, "the link cut");
}

/// Restores the link [`cut_link`] cut; returns once each router counts the
/// other up again (b's own call in flight when the link came back fails
/// first, after `pair.timeout`: each side sees the link on its own calls).
fn restore_link(pair: &Pair) {
    pair.topo.sh("b", "nft delete table inet pairtest");
    wait_peer_up(pair, 0, 1, "the link restored");
    wait_peer_up(pair, 1, 1, "the link restored");
}

/// `body` without whitespace.
fn compact(body: &str) -> String {
    body.split_whitespace().collect()
}

/// Both routers started as each other's peer, the test app routed on both,
/// each reaching the other.
fn started_pair() -> Pair {
    let mut pair = Pair::prepare(&[]);
    for i in 0..2 {
        std::fs::write(pair.config(i), pair_config(&pair, i)).expect("config");
    }
    pair.start_router(0);
    pair.start_router(1);
    publish_route(&pair);
    wait_shows(&pair, 1, "/routes", "app-ns", "has the app");
    wait_shows(&pair, 0, "/routes", "app-ns", "has the app");
    wait_peer_up(&pair, 0, 1, "both started");
    wait_peer_up(&pair, 1, 1, "both started");
    pair
}

/// A rotate-out on a takes the member out on both and answers once both
/// drained, naming each router's result; a rotate-in on b brings it back on a.
fn one_rotate_out(pair: &Pair) {
    let member = format!("{MQ_IP}:8080");
    let (status, body) = admin(
        pair,
        0,
        "POST",
        &format!("/backends/{member}/rotate-out?timeout=5s"),
        None,
    );
    assert_eq!(status, 200, "rotate-out on a: {body}");
    let doc: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(doc["result"], "drained", "{body}");
    let routers = doc["routers"].as_array().expect("routers");
    assert_eq!(routers.len(), 2, "{body}");
    assert_eq!(routers[0]["router"], "a", "{body}");
    assert_eq!(routers[1]["router"], format!("{B_IP}:9090"), "{body}");
    assert_eq!(routers[1]["result"], "drained", "{body}");
    wait_shows(
        pair,
        1,
        "/backends",
        "\"rotate\":\"out\"",
        "has the member rotated out",
    );
    // And rotate-in on b brings it back on a.
    let (status, body) = admin(
        pair,
        1,
        "POST",
        &format!("/backends/{member}/rotate-in"),
        None,
    );
    assert_eq!(status, 200, "rotate-in on b: {body}");
    wait_shows(
        pair,
        0,
        "/backends",
        "\"rotate\":\"in\"",
        "has the member back in",
    );
}

/// Requests in flight count once across the pair: two slow requests held on
/// a, `max_connections_per_client` 2: b refuses a third (429) while they run,
/// and serves again once they ended.
fn requests_in_flight_count_once(pair: &Pair) {
    let host = e2e::hapair::HOST;
    put_limit(pair, 0, 2, "for requests in flight");
    wait_shows(
        pair,
        1,
        "/apps/app-ns/settings",
        "\"max_connections_per_client\":2",
        "has the in-flight limit",
    );
    let slow: Vec<std::process::Child> = (0..2)
        .map(|_| {
            pair.topo
                .cmd("c", "curl")
                .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-m", "20"])
                .args(["-H", &format!("Host: {host}")])
                .arg(format!("http://{A_IP}:8080/slow?ms=4000"))
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("curl")
        })
        .collect();
    let on_b = || {
        e2e::hapair::curl_status(
            pair.topo
                .cmd("c", "curl")
                .args(["-m", "5", "-H", &format!("Host: {host}")])
                .arg(format!("http://{B_IP}:8080/")),
        )
    };
    e2e::wait_for(
        "b refuses a third request in flight (429)",
        Duration::from_secs(3),
        Duration::from_millis(50),
        || match on_b() {
            Ok(429) => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
    for child in slow {
        let out = child.wait_with_output().expect("curl");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "200",
            "a slow request held on a"
        );
    }
    e2e::wait_for(
        "b serves again once a's requests ended",
        Duration::from_secs(3),
        Duration::from_millis(50),
        || match on_b() {
            Ok(200) => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
}

#[test]
fn what_is_put_on_either_router_applies_on_both_and_survives_a_restart() {
    let mut pair = started_pair();

    // 1. A setting put on a is in force on b: an HSTS policy and header
    // actions with the limit.
    let body = r#"{"max_connections_per_client": 50, "hsts": {"max_age": "1d"},
                   "headers": {"response": [{"set": {"name": "X-Frame-Options", "value": "DENY"}}]}}"#;
    let (status, answer) = admin(&pair, 0, "PUT", "/apps/app-ns/settings", Some(body));
    assert_eq!(status, 200, "PUT on a: {answer}");
    wait_shows(
        &pair,
        1,
        "/apps/app-ns/settings",
        "\"max_connections_per_client\":50",
        "has a's setting",
    );
    wait_shows(
        &pair,
        1,
        "/apps/app-ns/settings",
        "\"hsts\":{\"max_age\":",
        "has a's HSTS",
    );
    wait_shows(
        &pair,
        1,
        "/apps/app-ns/settings",
        "X-Frame-Options",
        "has a's header action",
    );

    // 2. A split put on b is in force on a.
    let host = e2e::hapair::HOST;
    let (status, body) = admin(
        &pair,
        1,
        "POST",
        &format!("/aliases/{host}/split"),
        Some(r#"{"app-ns": 7}"#),
    );
    assert_eq!(status, 200, "split on b: {body}");
    wait_shows(&pair, 0, "/routes", "\"app-ns\":7", "has b's split");
    // And path routes put on b are in force on a.
    let (status, body) = admin(
        &pair,
        1,
        "POST",
        &format!("/aliases/{host}/paths"),
        Some(r#"{"/api": {"app": "app-ns", "rewrite": "/"}}"#),
    );
    assert_eq!(status, 200, "paths on b: {body}");
    wait_shows(
        &pair,
        0,
        "/routes",
        "\"/api\":{\"app\":\"app-ns\"",
        "has b's paths",
    );

    one_rotate_out(&pair);

    // 4. b goes away; a's setting changes meanwhile; a counts b down.
    pair.stop_router(1);
    wait_peer_up(&pair, 0, 0, "b stopped");
    put_limit(&pair, 0, 80, "with b down");
    // b comes back with its older entries (max_connections_per_client 50) and sends them: the
    // newer one stays on a, and b takes it at once.
    pair.start_router(1);
    wait_shows(
        &pair,
        1,
        "/apps/app-ns/settings",
        "\"max_connections_per_client\":80",
        "caught up with a's newer setting",
    );
    let (_, on_a) = admin(&pair, 0, "GET", "/apps/app-ns/settings", None);
    assert!(
        compact(&on_a).contains("\"max_connections_per_client\":80"),
        "b's older entry rolled a back: {on_a}"
    );

    // 5. The link cut (b drops a's packets to and from its admin port) and
    // restored: what each put meanwhile is in force on both afterwards.
    cut_link(&pair);
    put_limit(&pair, 0, 90, "with the link cut");
    let (status, body) = admin(
        &pair,
        1,
        "POST",
        &format!("/aliases/{host}/split"),
        Some(r#"{"app-ns": 3}"#),
    );
    assert_eq!(status, 200, "split on b, link cut: {body}");
    restore_link(&pair);
    wait_shows(
        &pair,
        1,
        "/apps/app-ns/settings",
        "\"max_connections_per_client\":90",
        "has a's setting put while cut",
    );
    wait_shows(
        &pair,
        0,
        "/routes",
        "\"app-ns\":3",
        "has b's split put while cut",
    );
    // Bad input on the link: a body that is not the updates is 400 and
    // changes nothing; without the token, 401.
    let (status, body) = admin(&pair, 1, "POST", "/pair/updates", Some("{not json"));
    assert_eq!(status, 400, "garbage on /pair/updates: {body}");
    let (status, body) = admin(&pair, 1, "POST", "/pair/counts", Some(r#"{"node": 3}"#));
    assert_eq!(status, 400, "garbage on /pair/counts: {body}");
    let no_token = pair.topo.sh(
        "c",
        &format!("curl -s -o /dev/null -w '%{{http_code}}' -k -X POST --data '{{}}' https://{B_IP}:9090/pair/updates"),
    );
    assert_eq!(no_token.trim(), "401", "/pair/updates without the token");

    // 6. In agreement: the same settings, key and shared entries' versions
    // (which `GET /pair/state` lists, and check-pair compares).
    let (status, state) = admin(&pair, 1, "GET", "/pair/state", None);
    let state = compact(&state);
    assert!(
        status == 200
            && state.contains("\"settings:app-ns\":")
            && state.contains("\"peer_up\":true"),
        "b's /pair/state: {status} {state}"
    );
    let (code, text) = check_pair(&pair, 0);
    assert_eq!(code, Some(0), "router check-pair on a: {text}");
    requests_in_flight_count_once(&pair);
    let received = e2e::metric_sum(
        &metrics(&pair, 1),
        "router_pair_updates_received_total",
        &[],
    );
    assert!(received >= 1.0, "b counted what it applied: {received}");
}

/// `bench/pair_limit.py` from the client namespace: (served, refused, other).
fn limit_load(pair: &Pair, ips: &str, rate: u32, secs: u32) -> (u32, u32, u32) {
    let out = pair
        .topo
        .cmd("c", "python3")
        .arg(e2e::hapair::repo().join("bench/pair_limit.py"))
        .args([ips, &rate.to_string(), &secs.to_string(), e2e::hapair::HOST])
        .output()
        .expect("pair_limit.py");
    let text = String::from_utf8_lossy(&out.stdout);
    let n: Vec<u32> = text
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    assert_eq!(
        n.len(),
        3,
        "pair_limit.py: {text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (n[0], n[1], n[2])
}

#[test]
fn a_client_alternating_between_the_routers_is_limited_once() {
    let mut pair = started_pair();
    let limit = r#"{"rate_limit": {"requests_per_second": 10, "burst": 10}}"#;
    let (status, body) = admin(&pair, 0, "PUT", "/apps/app-ns/settings", Some(limit));
    assert_eq!(status, 200, "PUT the limit on a: {body}");
    wait_shows(
        &pair,
        1,
        "/apps/app-ns/settings",
        "\"requests_per_second\":10",
        "has the limit",
    );

    // 30 requests a second for 8 s, every other one to each router: one
    // router alone would serve 8 x 10 + 10 = 90, two unshared routers 180.
    let both = format!("{A_IP},{B_IP}");
    let (served, refused, other) = limit_load(&pair, &both, 30, 8);
    eprintln!("alternating, both up: {served} served, {refused} refused (429), {other} other");
    assert_eq!(other, 0, "every request is served or refused");
    let bound = (1.25 * 10.0 * 8.0 + 10.0) as u32;
    assert!(
        served <= bound,
        "a client is limited once across the pair: {served} served > {bound} (1.25 x the limit x 8 s + one burst)"
    );
    assert!(served >= 70, "the limit is still served: {served} < 70");
    let bytes = e2e::metric_sum(&metrics(&pair, 0), "router_pair_count_bytes_total", &[]);
    assert!(bytes > 0.0, "a sent its counts: {bytes} bytes");

    // The link cut: each router enforces the limit alone (never zero, never
    // waiting on the link), at most twice the limit across the pair.
    cut_link(&pair);
    let (served, refused, other) = limit_load(&pair, &both, 30, 4);
    eprintln!("alternating, link cut: {served} served, {refused} refused, {other} other");
    assert_eq!(other, 0, "every request is served or refused");
    assert!(
        (40..=102).contains(&served),
        "with the link cut each router serves the limit alone (4 s x 10/s at least, two routers' worth at most): {served}"
    );
    restore_link(&pair);

    // b killed: a alone still serves the whole limit (never waits on b,
    // never zero): 4 s at 30/s against 10/s.
    pair.stop_router(1);
    wait_peer_up(&pair, 0, 0, "b stopped");
    let (served, refused, other) = limit_load(&pair, A_IP, 30, 4);
    eprintln!("a alone: {served} served, {refused} refused, {other} other");
    assert_eq!(other, 0, "every request is served or refused");
    assert!(
        (30..=52).contains(&served),
        "the survivor serves the whole limit (4 s x 10/s, with at most one burst of debt or credit): {served}"
    );
}

/// `n` `PUT /apps/app-ns/settings` on router `i` over one keep-alive
/// connection (a curl config of `n` requests), each with its own
/// `max_connections_per_client` (`base` + k): spawned, to run beside others.
fn put_many(pair: &Pair, i: usize, n: u32, base: u32) -> std::process::Child {
    let ip = [A_IP, B_IP][i];
    let mut conf = String::new();
    for k in 0..n {
        if k > 0 {
            conf.push_str("next\n");
        }
        conf += &format!(
            "url = \"https://{ip}:9090/apps/app-ns/settings\"\nrequest = \"PUT\"\n\
             header = \"Authorization: Bearer {TOKEN}\"\nheader = \"Content-Type: application/json\"\n\
             data = \"{{\\\"max_connections_per_client\\\": {}}}\"\n\
             cacert = \"{}\"\nsilent\noutput = \"/dev/null\"\nwrite-out = \"%{{http_code}}\\n\"\n",
            base + k,
            pair.dir.join("ca.pem").display()
        );
    }
    let file = pair.dir.join(format!("puts-{}.conf", NAMES[i]));
    std::fs::write(&file, conf).expect("curl config");
    pair.topo
        .cmd(NAMES[i], "curl")
        .arg("-K")
        .arg(&file)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("curl")
}

/// `settings:app-ns` as router `i` saved it in `state_dir/pair.json`.
fn saved_limit(pair: &Pair, i: usize) -> serde_json::Value {
    let path = pair
        .dir
        .join(format!("state-{}", NAMES[i]))
        .join("pair.json");
    let text = std::fs::read_to_string(&path).expect("pair.json");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("pair.json is JSON");
    doc["entries"]["settings:app-ns"]["value"]["max_connections_per_client"].clone()
}

/// Router `i`'s `max_connections_per_client` in force for app-ns.
fn live_limit(pair: &Pair, i: usize) -> serde_json::Value {
    let (status, body) = admin(pair, i, "GET", "/apps/app-ns/settings", None);
    assert_eq!(status, 200, "GET settings on {}: {body}", NAMES[i]);
    let doc: serde_json::Value = serde_json::from_str(&body).expect("json");
    doc["own"]["max_connections_per_client"].clone()
}

#[test]
fn interleaved_writes_on_both_routers_end_in_one_value_and_the_future_is_refused() {
    let pair = started_pair();
    // 1. 1 500 writes on each router at once, each router's link carrying
    // them to the other while its own operator writes: every round, both
    // end agreeing on the last write, in force and saved.
    for round in 0..2u32 {
        let base = 1000 + round * 10_000;
        let writers = [
            put_many(&pair, 0, 1500, base),
            put_many(&pair, 1, 1500, base + 5000),
        ];
        for (i, w) in writers.into_iter().enumerate() {
            let out = w.wait_with_output().expect("curl");
            let codes = String::from_utf8_lossy(&out.stdout);
            let bad: Vec<&str> = codes.lines().filter(|c| *c != "200").collect();
            assert!(
                codes.lines().count() == 1500 && bad.is_empty(),
                "round {round}: PUTs on {}: {} answered, not 200: {bad:?}",
                NAMES[i],
                codes.lines().count()
            );
        }
        e2e::wait_for(
            &format!("round {round}: both routers agree on the last write, in force and saved"),
            Duration::from_secs(15),
            Duration::from_millis(200),
            || {
                let seen = [
                    live_limit(&pair, 0),
                    live_limit(&pair, 1),
                    saved_limit(&pair, 0),
                    saved_limit(&pair, 1),
                ];
                if seen.iter().all(|v| *v == seen[0]) && seen[0].is_u64() {
                    Ok(())
                } else {
                    Err(format!("in force a, b; saved a, b: {seen:?}"))
                }
            },
        );
        let (_, state_a) = admin(&pair, 0, "GET", "/pair/state", None);
        let (_, state_b) = admin(&pair, 1, "GET", "/pair/state", None);
        let versions = |s: &str| {
            let doc: serde_json::Value = serde_json::from_str(s).expect("json");
            doc["versions"].clone()
        };
        assert_eq!(
            versions(&state_a),
            versions(&state_b),
            "round {round}: the same versions"
        );
    }

    // 2. Entries from the future (ten years ahead, 2^63, 2^64-1) are refused
    // with 400 and counted; nothing applies; b's next ordinary PUT is in
    // force on a.
    let ten_years = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64
        + 10 * 365 * 24 * 3600 * 1000)
        << 1;
    for version in [ten_years, 1u64 << 63, u64::MAX] {
        let body = format!(
            r#"{{"node": "b", "epoch": 1, "updates": [{{"key": "settings:app-ns", "value": {{"max_connections_per_client": 7}}, "version": {version}}}]}}"#
        );
        let (status, answer) = admin(&pair, 0, "POST", "/pair/updates", Some(&body));
        assert_eq!(status, 400, "version {version} from the future: {answer}");
        assert!(answer.contains("pair.max_clock_skew"), "{answer}");
    }
    assert_ne!(
        live_limit(&pair, 0),
        serde_json::json!(7),
        "the future applied"
    );
    let refused = e2e::metric_sum(
        &metrics(&pair, 0),
        "router_pair_updates_refused_total",
        &[("reason", "future")],
    );
    assert_eq!(refused, 3.0, "a counted each refused entry");
    put_limit(&pair, 1, 33, "after the refused future");
    wait_shows(
        &pair,
        0,
        "/apps/app-ns/settings",
        "\"max_connections_per_client\":33",
        "has b's write after the refused future",
    );
}
