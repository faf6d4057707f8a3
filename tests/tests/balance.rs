//! Member choice through the real path: a hung member and a healthy one.

use std::time::Duration;

use e2e::{Backend, Refusing, TestRouter, events};

const HA: &str = "ha-myapp-demo.example.com";

/// Accepts connections and reads requests but never answers: a stuck gear.
async fn hung_member() -> std::net::SocketAddr {
    use tokio::io::AsyncReadExt;
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = l.local_addr().expect("addr");
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                }
            });
        }
    });
    addr
}

/// Sends 20 requests, each on its own task once the one before it has reached a
/// member (is held by the hung one, or answered); returns how many timed out.
async fn stuck_requests(balance: &str) -> usize {
    let healthy = Backend::start().await;
    let hung = hung_member().await;
    // Checks off: this is about balancing alone (a check would find the hung
    // member out; see tests/health.rs).
    let r = TestRouter::start(&format!(
        "upstream:\n  response_timeout: 2s\n  balance: {balance}\nhealth:\n  checks: false\n"
    ))
    .await;
    r.drop_event("01.yaml", &events::add_lb("myapp", "demo", healthy.addr));
    r.drop_event("02.yaml", &events::add_lb("myapp", "demo", hung));
    r.wait_member(hung).await;
    r.wait_member(healthy.addr).await;
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let held = held_by(&r, hung).await;
        let addr = r.http;
        tasks.push(tokio::spawn(async move {
            e2e::raw::status(
                &e2e::raw::exchange(
                    addr,
                    format!("GET / HTTP/1.1\r\nHost: {HA}\r\nConnection: close\r\n\r\n").as_bytes(),
                    Duration::from_secs(10),
                )
                .await,
            )
        }));
        let last = tasks.last().expect("just pushed");
        e2e::eventually(
            "the request reached a member",
            Duration::from_secs(10),
            async || last.is_finished() || held_by(&r, hung).await > held,
        )
        .await;
    }
    let mut stuck = 0;
    for t in tasks {
        match t.await.expect("join") {
            Some(200) => {}
            Some(504) => stuck += 1,
            other => panic!("unexpected answer {other:?}"),
        }
    }
    stuck
}

/// Requests `member` holds now.
async fn held_by(r: &TestRouter, member: std::net::SocketAddr) -> u64 {
    r.backend_state(member)
        .await
        .and_then(|s| s["in_flight"].as_u64())
        .unwrap_or(0)
}

#[tokio::test]
async fn p2c_stops_sending_to_a_member_that_holds_requests() {
    // Once the hung member holds a request, it loses every comparison with the
    // healthy one (at most a tie or two at the very start).
    let stuck = stuck_requests("p2c").await;
    assert!(
        stuck <= 2,
        "p2c sent {stuck} of 20 requests to the hung member"
    );
}

#[tokio::test]
async fn round_robin_keeps_feeding_a_hung_member() {
    // The contrast that makes the test above meaningful.
    let stuck = stuck_requests("round_robin").await;
    assert!(
        stuck >= 8,
        "round robin sent only {stuck} of 20 to the hung member"
    );
}

#[tokio::test]
async fn idempotent_requests_move_to_another_member_when_one_refuses() {
    let healthy = Backend::start().await;
    let refusing = Refusing::new();
    let dead = refusing.addr;
    // Health off: this is about the retry alone (with it on, the dead member
    // would be out after its first check or third refusal; see health.rs).
    let r = TestRouter::start(
        "upstream:\n  balance: round_robin\nhealth:\n  checks: false\n  passive_failures: 0\n",
    )
    .await;
    r.drop_event("01.yaml", &events::add_lb("myapp", "demo", healthy.addr));
    r.drop_event("02.yaml", &events::add_lb("myapp", "demo", dead));
    r.wait_member(dead).await;
    r.wait_member(healthy.addr).await;
    // Round robin sends every other request to the dead member first.
    for _ in 0..10 {
        assert_eq!(r.get(HA, "/").await.0, 200, "GET never sees the refusal");
    }
    // Each of the 5+ picks of the refusing member is one refused connect and
    // one retry; fewer means the "dead" port answered (it once was a released
    // port that a parallel test's backend could take; now it is held).
    let retries = r.metric("router_upstream_retries_total").await;
    let refused = r
        .metric("router_upstream_errors_total{kind=\"connect\"}")
        .await;
    assert!(
        retries >= Some(4.0) && refused >= Some(4.0),
        "10 GETs round robin over a live and a refusing member: {retries:?} retries, \
         {refused:?} refused connects (want 4+ each)"
    );
}

#[tokio::test]
async fn a_full_member_queues_briefly_then_answers_503() {
    let a = Backend::start().await;
    let r = std::sync::Arc::new(
        TestRouter::start(
            "upstream:\n  max_connections_per_backend: 2\n  queue_timeout: 700ms\n  source_share: 100\n  source_reserve: 0\nhealth:\n  checks: false\n",
        )
        .await,
    );
    r.drop_event("01.yaml", &events::add_lb("myapp", "demo", a.addr));
    r.wait_member(a.addr).await;
    let fill = |ms: u64| {
        (0..2)
            .map(|_| {
                let r = r.clone();
                tokio::spawn(async move { r.get(HA, &format!("/slow?ms={ms}")).await.0 })
            })
            .collect::<Vec<_>>()
    };
    let full = async || {
        e2e::eventually("two in flight", Duration::from_secs(5), async || {
            r.backend_state(a.addr)
                .await
                .is_some_and(|s| s["in_flight"] == 2)
        })
        .await
    };
    // Slots free within the queue wait: the third request is served.
    let short = fill(300);
    full().await;
    assert_eq!(r.get(HA, "/").await.0, 200, "waited for a slot");
    assert!(r.metric("router_upstream_queue_waits_total").await >= Some(1.0));
    for t in short {
        assert_eq!(t.await.expect("join"), 200);
    }
    // They don't: 503 after the wait, and the member never saw a third request.
    let long = fill(2500);
    full().await;
    let before = a.proxied();
    let (status, body) = r.get(HA, "/").await;
    assert_eq!(status, 503);
    assert!(
        body.starts_with(b"application backend is at capacity\nrequest id: "),
        "{body:?}"
    );
    assert_eq!(a.proxied(), before);
    assert_eq!(
        r.metric("router_upstream_errors_total{kind=\"busy\"}")
            .await,
        Some(1.0)
    );
    for t in long {
        assert_eq!(t.await.expect("join"), 200);
    }
}

/// A GET from `source` (another loopback address than the test's own 127.0.0.1).
async fn get_from(source: &str, r: &TestRouter) -> u16 {
    let req = format!("GET / HTTP/1.1\r\nHost: {HA}\r\nConnection: close\r\n\r\n");
    let resp =
        e2e::raw::exchange_from(source, r.http, req.as_bytes(), Duration::from_secs(10)).await;
    e2e::raw::status(&resp).expect("status line")
}

/// One client address holds at most `upstream.source_share` of a member's slots:
/// past it that address waits for its own slots (503 when they stay taken), while
/// another address is served at once (a slow reader or a slow app cannot take an
/// app offline from one address).
#[tokio::test]
async fn one_client_address_holds_at_most_its_share_of_a_member() {
    let a = Backend::start().await;
    let r = std::sync::Arc::new(
        TestRouter::start(
            "upstream:\n  max_connections_per_backend: 4\n  queue_timeout: 500ms\n  source_share: 50\nhealth:\n  checks: false\n",
        )
        .await,
    );
    r.drop_event("01.yaml", &events::add_lb("myapp", "demo", a.addr));
    r.wait_member(a.addr).await;
    let hold: Vec<_> = (0..2)
        .map(|_| {
            let r = r.clone();
            tokio::spawn(async move { r.get(HA, "/slow?ms=3000").await.0 })
        })
        .collect();
    e2e::eventually("two in flight", Duration::from_secs(5), async || {
        r.backend_state(a.addr)
            .await
            .is_some_and(|s| s["in_flight"] == 2)
    })
    .await;
    // The same address again: over its share, it waits for one of its own slots;
    // they stay taken past the queue timeout, so 503.
    let (status, body) = r.get(HA, "/").await;
    assert_eq!(status, 503);
    assert!(
        body.starts_with(
            b"too many requests from this address to this application backend\nrequest id: "
        ),
        "{body:?}"
    );
    // Another address: served beside the held slots (waiting for one would be
    // the 503 above, after the queue timeout).
    assert_eq!(get_from("127.0.0.2", &r).await, 200);
    assert_eq!(
        r.metric("router_upstream_errors_total{kind=\"source_share\"}")
            .await,
        Some(1.0)
    );
    for t in hold {
        assert_eq!(t.await.expect("join"), 200);
    }
}
