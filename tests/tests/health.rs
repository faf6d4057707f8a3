//! Member health, draining and rotate-out/in, through real sockets: real backends that
//! die, come back or answer 503, and the router's admin API.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use e2e::router::TestRouter;
use e2e::{Backend, events};

const HA: &str = "ha-myapp-demo.example.com";

/// Fast checks: down after 2 × 200 ms, back after 2 passes.
const FAST: &str =
    "health:\n  interval: 200ms\n  timeout: 150ms\n  jitter: 20ms\n  fall: 2\n  rise: 2\n";

/// GETs in a loop from `clients` tasks until `stop`; every status seen.
fn load(
    r: &Arc<TestRouter>,
    clients: usize,
    stop: &Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<Vec<u16>>> {
    (0..clients)
        .map(|_| {
            let (r, stop) = (r.clone(), stop.clone());
            tokio::spawn(async move {
                let mut seen = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    seen.push(r.get(HA, "/").await.0);
                }
                seen
            })
        })
        .collect()
}

#[tokio::test]
async fn a_killed_member_is_ejected_without_client_errors_and_used_again_after_rise() {
    // Active checks off: only passive detection can take an up member down (a
    // down one is still probed, which brings it back).
    let (_a, b, r) = two_members(&format!("{FAST}  checks: false\n")).await;
    let (b_addr, r) = (b.addr, Arc::new(r));

    let stop = Arc::new(AtomicBool::new(false));
    let clients = load(&r, 4, &stop);
    e2e::eventually(
        "both members take traffic at first",
        Duration::from_secs(10),
        async || b.proxied() > 0,
    )
    .await;

    // Kill b: listener and open connections go at once.
    drop(b);
    r.wait_health(b_addr, "down").await;

    // Back on the same address: used again once `rise` checks passed.
    let b = Backend::start_on(b_addr).await;
    r.wait_health(b_addr, "up").await;
    eventually_proxied(&b).await;
    stop.store(true, Ordering::Relaxed);

    let mut statuses = Vec::new();
    for c in clients {
        statuses.extend(c.await.expect("join"));
    }
    let errors: Vec<&u16> = statuses.iter().filter(|s| **s != 200).collect();
    assert!(statuses.len() > 50, "load ran: {} requests", statuses.len());
    assert!(
        errors.is_empty(),
        "idempotent requests never fail: {errors:?}"
    );
    // Passive detection ejected it, on the refusals the load met.
    assert_eq!(
        r.metric("router_backend_ejections_total{reason=\"passive\"}")
            .await,
        Some(1.0)
    );
    assert_eq!(
        r.metric("router_backend_ejections_total{reason=\"check\"}")
            .await,
        None
    );
    assert!(r.metric("router_backend_recoveries_total").await >= Some(1.0));
    assert_eq!(
        r.metric(&format!("router_backend_up{{backend=\"{b_addr}\"}}"))
            .await,
        Some(1.0)
    );
}

/// Two members of `myapp-demo` (`HA`) on a router started with `config`, both up.
async fn two_members(config: &str) -> (Backend, Backend, TestRouter) {
    let (a, b) = (Backend::start().await, Backend::start().await);
    let r = TestRouter::start(config).await;
    r.drop_event("01.yaml", &events::add_lb("myapp", "demo", a.addr));
    r.drop_event("02.yaml", &events::add_lb("myapp", "demo", b.addr));
    r.wait_health(a.addr, "up").await;
    r.wait_health(b.addr, "up").await;
    (a, b, r)
}

async fn eventually_proxied(b: &Backend) {
    let before = b.proxied();
    e2e::eventually(
        "traffic to the recovered member",
        Duration::from_secs(10),
        async || b.proxied() > before,
    )
    .await;
}

#[tokio::test]
async fn checks_alone_eject_within_interval_times_fall() {
    // No traffic at all: only the active checks can notice.
    let a = Backend::start().await;
    let b = Backend::start().await;
    let b_addr = b.addr;
    let r = TestRouter::start(FAST).await;
    r.drop_event("01.yaml", &events::add_lb("myapp", "demo", a.addr));
    r.drop_event("02.yaml", &events::add_lb("myapp", "demo", b.addr));
    r.wait_health(b_addr, "up").await;
    drop(b);
    r.wait_health(b_addr, "down").await;
    // Down after `fall` (2) failed checks, not later: interval × fall, read off
    // the transition the router recorded rather than off a clock.
    let (_, doc) = r.admin_get("/status").await;
    let doc: serde_json::Value = serde_json::from_str(&doc).expect("json");
    let want = b_addr.to_string();
    let history = doc["apps"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|app| app["members"].as_array().into_iter().flatten())
        .find(|m| m["address"] == want.as_str())
        .map(|m| m["history"].clone())
        .expect("the member on the status page");
    let last = history
        .as_array()
        .and_then(|h| h.last())
        .expect("a transition");
    assert_eq!(last["to"], "down", "{history}");
    assert!(
        last["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("2 checks failed in a row")),
        "{history}"
    );
    assert_eq!(
        r.metric("router_backend_ejections_total{reason=\"check\"}")
            .await,
        Some(1.0)
    );
    assert!(
        r.metric("router_health_checks_total{result=\"fail\"}")
            .await
            >= Some(2.0)
    );
}

#[tokio::test]
async fn a_new_member_that_fails_its_checks_never_gets_traffic() {
    let good = Backend::start().await;
    let bad = Backend::start().await;
    bad.force_status(503);
    let r = TestRouter::start(FAST).await;
    r.drop_event("01.yaml", &events::add_lb("myapp", "demo", good.addr));
    r.wait_health(good.addr, "up").await;
    r.drop_event("02.yaml", &events::add_lb("myapp", "demo", bad.addr));
    r.wait_member(bad.addr).await;
    // From the moment it is a member: unknown (gated), then down.
    for _ in 0..40 {
        assert_eq!(r.get(HA, "/").await.0, 200);
    }
    r.wait_health(bad.addr, "down").await;
    for _ in 0..20 {
        assert_eq!(r.get(HA, "/").await.0, 200);
    }
    assert_eq!(bad.proxied(), 0, "the failing member got no request");
    assert!(bad.hits() >= 2, "it was checked");
    // It starts passing: used after `rise`.
    bad.force_status(0);
    r.wait_health(bad.addr, "up").await;
    for _ in 0..40 {
        r.get(HA, "/").await;
    }
    assert!(bad.proxied() > 0, "used once healthy");
}

#[tokio::test]
async fn all_members_down_fails_open_by_default_and_503_when_configured() {
    for (fail_open, expect_member_answer) in [(true, true), (false, false)] {
        let a = Backend::start().await;
        let b = Backend::start().await;
        a.force_status(500);
        b.force_status(500);
        let extra = format!("{FAST}  fail_open: {fail_open}\n");
        let r = TestRouter::start(&extra).await;
        r.drop_event("01.yaml", &events::add_lb("myapp", "demo", a.addr));
        r.drop_event("02.yaml", &events::add_lb("myapp", "demo", b.addr));
        r.wait_health(a.addr, "down").await;
        r.wait_health(b.addr, "down").await;
        let (status, body) = r.get(HA, "/anything").await;
        if expect_member_answer {
            // The members' own 500 (their JSON echo): the request reached one.
            assert_eq!(status, 500);
            assert!(body.starts_with(b"{"), "{body:?}");
            assert_eq!(a.proxied() + b.proxied(), 1);
        } else {
            assert_eq!(status, 503);
            assert!(
                body.starts_with(b"application has no available backend\nrequest id: "),
                "{body:?}"
            );
            assert_eq!(a.proxied() + b.proxied(), 0);
        }
    }
}

#[tokio::test]
async fn a_removed_member_finishes_its_slow_request() {
    let a = Backend::start().await;
    let b = Backend::start().await;
    let r = Arc::new(TestRouter::start(FAST).await);
    r.drop_event("01.yaml", &events::add_lb("myapp", "demo", a.addr));
    r.wait_health(a.addr, "up").await;
    // Only a is a member: the slow request goes there.
    let slow = {
        let r = r.clone();
        tokio::spawn(async move { r.get(HA, "/slow?ms=1500").await })
    };
    e2e::eventually(
        "slow request in flight",
        Duration::from_secs(5),
        async || {
            r.backend_state(a.addr)
                .await
                .is_some_and(|s| s["in_flight"] == 1)
        },
    )
    .await;
    // Gear move: b added, a removed, while a's request runs.
    r.drop_event("02.yaml", &events::add_lb("myapp", "demo", b.addr));
    r.drop_event("03.yaml", &events::remove_endpoint("myapp", "demo", a.addr));
    e2e::eventually(
        "a removed from the route",
        Duration::from_secs(5),
        async || {
            let routes = r.admin_get("/routes").await.1;
            !routes.contains(&format!("\"address\": \"{}\"", a.addr))
        },
    )
    .await;
    r.wait_health(b.addr, "up").await;
    let before = a.proxied();
    for _ in 0..10 {
        assert_eq!(r.get(HA, "/").await.0, 200);
    }
    assert_eq!(a.proxied(), before, "no new request to the removed member");
    let (status, body) = slow.await.expect("join");
    assert_eq!(status, 200, "the in-flight request finished: {body:?}");
    let echo = e2e::Echo::parse(&body);
    assert_eq!(echo.port, a.addr.port());
}

/// Starts a GET of `/slow?ms=` and returns once `addr` holds it.
async fn slow_request(
    r: &Arc<TestRouter>,
    addr: std::net::SocketAddr,
    ms: u64,
) -> tokio::task::JoinHandle<u16> {
    let slow = {
        let r = r.clone();
        tokio::spawn(async move { r.get(HA, &format!("/slow?ms={ms}")).await.0 })
    };
    e2e::eventually("in flight", Duration::from_secs(5), async || {
        r.backend_state(addr)
            .await
            .is_some_and(|s| s["in_flight"] == 1)
    })
    .await;
    slow
}

#[tokio::test]
async fn rotate_out_drains_or_times_out_rotate_in_restores_and_survives_restart() {
    let a = Backend::start().await;
    let root = e2e::tempdir("rotate");
    let r = Arc::new(TestRouter::start_in(root.clone(), FAST).await);
    r.drop_event("01.yaml", &events::add_lb("myapp", "demo", a.addr));
    r.wait_health(a.addr, "up").await;
    let out = format!("/backends/{}/rotate-out", a.addr);
    let back = format!("/backends/{}/rotate-in", a.addr);

    // 1. Drained: the slow request ends before the timeout.
    let slow = slow_request(&r, a.addr, 800).await;
    let (status, body) = r.admin_post(&format!("{out}?timeout=10s")).await;
    assert_eq!(status, 200, "{body}");
    let doc: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(doc["result"], "drained", "{body}");
    assert_eq!(doc["in_flight"], 0);
    assert!(doc["waited_ms"].as_u64() >= Some(300), "it waited: {body}");
    assert_eq!(slow.await.expect("join"), 200);
    // No new traffic: the only member is out (fail-open never uses rotated-out ones).
    let before = a.proxied();
    assert_eq!(r.get(HA, "/").await.0, 503);
    assert_eq!(a.proxied(), before);

    // 2. Rotate in: traffic at once.
    let (status, body) = r.admin_post(&back).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(r.get(HA, "/").await.0, 200);

    // 3. Timeout: the request outlives the wait; the answer says so.
    let slow = slow_request(&r, a.addr, 2000).await;
    let (_, body) = r.admin_post(&format!("{out}?timeout=200ms")).await;
    let doc: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(doc["result"], "timeout", "{body}");
    assert_eq!(doc["in_flight"], 1);
    assert_eq!(
        slow.await.expect("join"),
        200,
        "a rotated-out member's request finishes"
    );

    // 4. The rotate state survives a restart.
    let state = r.backend_state(a.addr).await.expect("listed");
    assert_eq!(state["rotate"], "out");
    let r = Arc::into_inner(r).expect("sole owner");
    r.stop().await;
    let r = TestRouter::start_in(root, FAST).await;
    r.wait_member(a.addr).await;
    let state = r.backend_state(a.addr).await.expect("listed");
    assert_eq!(state["rotate"], "out", "{state}");
    assert_eq!(r.get(HA, "/").await.0, 503);
    assert_eq!(r.admin_post(&back).await.0, 200);
    assert_eq!(r.get(HA, "/").await.0, 200);

    // Bad calls.
    assert_eq!(
        r.admin_post("/backends/10.9.9.9:80/rotate-out").await.0,
        404
    );
    assert_eq!(r.admin_post("/backends/nonsense/rotate-out").await.0, 400);
    assert_eq!(r.admin_post(&format!("{out}?timeout=soon")).await.0, 400);
    assert_eq!(r.admin_get(&out).await.0, 405);
}

#[tokio::test]
async fn keep_awake_checks_go_to_the_front_end_with_the_app_host() {
    let gear = Backend::start().await;
    let front = Backend::start().await;
    let extra = format!("{FAST}  keep_awake_port: {}\n", front.addr.port());
    let r = TestRouter::start(&extra).await;
    r.drop_event("01.yaml", &events::add_lb("myapp", "demo", gear.addr));
    r.wait_health(gear.addr, "up").await;
    let hosts = front.check_hosts();
    assert!(!hosts.is_empty(), "the front end was checked");
    assert!(
        hosts.iter().all(|h| h == "myapp-demo.example.com"),
        "{hosts:?}"
    );
    assert!(
        gear.check_hosts().is_empty(),
        "not the gear's port directly"
    );
}

#[tokio::test]
async fn with_checks_off_a_passively_ejected_member_is_probed_back() {
    let (a, b, r) = two_members(
        "health:\n  checks: false\n  interval: 200ms\n  timeout: 150ms\n  jitter: 20ms\n  rise: 2\n",
    )
    .await;
    let b_addr = b.addr;
    assert_eq!(
        r.metric("router_health_checks_total{result=\"pass\"}")
            .await,
        Some(0.0),
        "no active checks"
    );
    drop(b);
    // Only traffic can notice: refusals eject it.
    e2e::eventually("passive ejection", Duration::from_secs(10), async || {
        assert_eq!(r.get(HA, "/").await.0, 200, "retried on the other member");
        r.backend_state(b_addr)
            .await
            .is_some_and(|s| s["health"] == "down")
    })
    .await;
    // Probed while down, so it comes back by itself.
    let b = Backend::start_on(b_addr).await;
    r.wait_health(b_addr, "up").await;
    assert!(
        r.metric("router_health_checks_total{result=\"pass\"}")
            .await
            >= Some(2.0)
    );
    assert_eq!(
        r.metric("router_backend_ejections_total{reason=\"passive\"}")
            .await,
        Some(1.0)
    );
    e2e::eventually(
        "traffic to the recovered member",
        Duration::from_secs(10),
        async || {
            r.get(HA, "/").await;
            b.proxied() > 0
        },
    )
    .await;
    drop(a);
}

/// A client whose request body breaks off (an aborted upload) or is malformed (a bad
/// chunk size) is at fault, not the member: 400 where the client still listens, the
/// `client_body` kind, and never a passive failure (three used to eject the member).
#[tokio::test]
async fn client_body_failures_are_never_charged_to_the_member() {
    let b = Backend::start().await;
    let r =
        TestRouter::start("health:\n  checks: false\n  passive_failures: 3\n  fail_open: false\n")
            .await;
    r.drop_event("01.yaml", &events::add_lb("myapp", "demo", b.addr));
    r.wait_route("ha-myapp-demo.example.com").await;
    assert_eq!(r.get("ha-myapp-demo.example.com", "/").await.0, 200);
    for i in 0..5 {
        // An upload that stops after 10 of 100 000 announced bytes, then goes away.
        let mut s = tokio::net::TcpStream::connect(r.http)
            .await
            .expect("connect");
        use tokio::io::AsyncWriteExt;
        s.write_all(b"POST /upload HTTP/1.1\r\nHost: ha-myapp-demo.example.com\r\nContent-Length: 100000\r\n\r\n0123456789")
            .await
            .expect("write");
        // Its sending side closes mid-body; the router ends the connection.
        s.shutdown().await.expect("shutdown");
        let closed = e2e::raw::read_all(&mut s, Duration::from_secs(10)).await;
        assert!(
            closed.is_empty() || e2e::raw::status(&closed) == Some(400),
            "{}",
            String::from_utf8_lossy(&closed)
        );
        drop(s);
        // A chunked body with a chunk size that is not hex.
        let raw = e2e::raw::exchange(
            r.http,
            format!("POST /c{i} HTTP/1.1\r\nHost: ha-myapp-demo.example.com\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n").as_bytes(),
            Duration::from_secs(5),
        )
        .await;
        assert_eq!(
            e2e::raw::status(&raw),
            Some(400),
            "{}",
            String::from_utf8_lossy(&raw)
        );
    }
    assert!(
        r.metric("router_upstream_errors_total{kind=\"client_body\"}")
            .await
            >= Some(10.0),
        "five aborted uploads and five bad chunk sizes"
    );
    assert_eq!(
        r.metric("router_upstream_errors_total{kind=\"reset\"}")
            .await,
        Some(0.0)
    );
    assert_eq!(
        r.metric("router_backend_ejections_total{reason=\"passive\"}")
            .await
            .unwrap_or(0.0),
        0.0
    );
    // The member still serves everyone.
    assert_eq!(r.get("ha-myapp-demo.example.com", "/").await.0, 200);
}

/// Slow start (`upstream.slow_start`): a member restarted under load takes a
/// share that rises over the window as documented (round robin: half the
/// requests warm, `share / 2` while warming), counted second by second by the
/// members themselves; `/backends` shows the share while it warms and nothing
/// after.
#[tokio::test]
async fn a_restarted_member_is_eased_back_in_over_slow_start() {
    let (a, b, r) = two_members(&format!(
        "{FAST}upstream:\n  balance: round_robin\n  slow_start: 8s\n"
    ))
    .await;
    let (b_addr, r) = (b.addr, Arc::new(r));
    let stop = Arc::new(AtomicBool::new(false));
    let clients = load(&r, 4, &stop);
    drop(b);
    r.wait_health(b_addr, "down").await;
    let b = Backend::start_on(b_addr).await;
    r.wait_health(b_addr, "up").await;

    // Each second: the member's share at its start and end (from /backends),
    // and the requests each member counted in it.
    let share = async || {
        let state = r.backend_state(b_addr).await.expect("listed");
        state["warming"]["share_percent"]
            .as_f64()
            .map(|p| p / 100.0)
    };
    let mut seconds = Vec::new();
    let mut at = (share().await, a.proxied(), b.proxied());
    while seconds.len() < 12 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = (share().await, a.proxied(), b.proxied());
        seconds.push((at.0, now.0, now.1 - at.1, now.2 - at.2));
        at = now;
        if seconds.last().is_some_and(|s| s.0.is_none()) {
            break; // one whole second warm
        }
    }
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.await.expect("join");
    }
    eprintln!("slow start, second by second: {seconds:?}");
    let table =
        format!("(share at start, at end, a's requests, b's requests) each second: {seconds:?}");
    let fraction = |&(_, _, a, b): &(Option<f64>, Option<f64>, usize, usize)| {
        assert!(a + b > 50, "too few requests to tell a share: {table}");
        b as f64 / (a + b) as f64
    };
    let (first, last) = (seconds.first().expect("one"), seconds.last().expect("one"));
    assert!(
        first.0.is_some_and(|s| s < 0.3),
        "warming from the start: {table}"
    );
    assert!(last.0.is_none(), "warm within the window: {table}");
    for s in &seconds {
        // Round robin: b takes its share of its turns, so half its mean share.
        let expected = match (s.0, s.1) {
            (Some(from), Some(to)) => (from + to) / 4.0,
            (Some(from), None) => (from + 1.0) / 4.0,
            (None, _) => 0.5,
        };
        let f = fraction(s);
        assert!(
            (f - expected).abs() < 0.12,
            "b took {f:.2} of a second's requests, its share says {expected:.2}: {table}"
        );
    }
    assert!(
        fraction(last) > fraction(first) + 0.2,
        "the share rose: {table}"
    );
}
