//! Fair by default: one client address holding a member's slots does not
//! take the app offline for the others. Each attack runs from 127.0.0.1 against the
//! default configuration while a probe from 127.0.0.2 asks for a page every 100 ms
//! on a new connection; at least 95 % of the probes must get 200 within 2 s.
//!
//! Each test also runs the same attack with `upstream.source_reserve: 0` (the
//! router before the reserve) and checks the probes then fail: the attack is real,
//! and the reserve is what holds it.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use e2e::probe::{Probed, probe};
use e2e::{Backend, TestRouter};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const HA: &str = "ha-myapp-demo.example.com";
const PROBE_FROM: &str = "127.0.0.2";
/// A request the test backend answers after 20 s.
const SLOW: &str = "/slow?ms=20000";

/// Waits until `r`'s member `b` has at least `n` requests in flight.
async fn wait_in_flight(r: &TestRouter, b: &Backend, n: u64) {
    e2e::eventually(
        &format!("{n} requests in flight"),
        Duration::from_secs(15),
        async || {
            r.backend_state(b.addr)
                .await
                .and_then(|s| s["in_flight"].as_u64())
                >= Some(n)
        },
    )
    .await;
}

/// Probes for `seconds` from [`PROBE_FROM`].
async fn probe_for(r: &TestRouter, seconds: u64) -> Probed {
    let until = Instant::now() + Duration::from_secs(seconds);
    probe(
        r.http,
        HA,
        PROBE_FROM,
        Duration::from_millis(100),
        Duration::from_secs(2),
        until,
    )
    .await
}

async fn zero_window_attack(extra: &str, probe_seconds: u64) -> (Probed, usize) {
    let (r, b) = TestRouter::with_backend(extra).await;
    // 4 connections × 32 streams (limits.h2_max_concurrent_streams): 128 streams
    // for 100 slots, each with a window of zero on a 4 MiB answer.
    let until = Instant::now() + Duration::from_secs(probe_seconds + 15);
    let addr = r.http;
    let attack = tokio::spawn(async move {
        e2e::attack::zero_window(addr, HA, "/stream?chunks=64", 4, 32, until).await
    });
    wait_in_flight(&r, &b, 90).await;
    let probed = probe_for(&r, probe_seconds).await;
    attack.abort();
    r.stop().await;
    (probed, 0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_streams_with_a_zero_window_from_one_address_leave_others_served() {
    let (probed, _) = zero_window_attack("", 8).await;
    eprintln!("reserve on: {probed:?}");
    assert!(probed.total >= 40, "{probed:?}");
    assert!(probed.share() >= 0.95, "probes answered: {probed:?}");
    // The control: without the reserve the same attack takes every slot.
    let (control, _) = zero_window_attack("upstream:\n  source_reserve: 0\n", 3).await;
    eprintln!("reserve off: {control:?}");
    assert!(
        control.share() <= 0.5,
        "without the reserve the attack should have taken the app: {control:?}"
    );
}

async fn slow_request_attack(extra: &str, probe_seconds: u64) -> Probed {
    let (r, b) = TestRouter::with_backend(extra).await;
    let until = Instant::now() + Duration::from_secs(probe_seconds + 15);
    let addr = r.http;
    let attack =
        tokio::spawn(
            async move { e2e::attack::slow_requests(addr, HA, SLOW, "", 300, until).await },
        );
    wait_in_flight(&r, &b, 90).await;
    let probed = probe_for(&r, probe_seconds).await;
    attack.abort();
    r.stop().await;
    probed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_requests_from_one_address_leave_others_served() {
    let probed = slow_request_attack("", 8).await;
    eprintln!("reserve on: {probed:?}");
    assert!(probed.total >= 40, "{probed:?}");
    assert!(probed.share() >= 0.95, "probes answered: {probed:?}");
    let control = slow_request_attack("upstream:\n  source_reserve: 0\n", 3).await;
    eprintln!("reserve off: {control:?}");
    assert!(
        control.share() <= 0.5,
        "without the reserve the attack should have taken the app: {control:?}"
    );
}

/// Opens `n` connections from 127.0.0.1 that send nothing.
async fn silent_connections(router: SocketAddr, n: usize) -> Vec<tokio::net::TcpStream> {
    let mut held = Vec::with_capacity(n);
    for _ in 0..n {
        held.push(
            tokio::net::TcpStream::connect(router)
                .await
                .expect("connect"),
        );
    }
    held
}

/// With the default per-source rule (a quarter of `limits.max_connections`, here
/// 4 000: what fits any test host's descriptor limit), one address holding 1 000
/// connections gets its next one closed at once, counted, while another address is
/// served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_source_holds_at_most_a_quarter_of_a_listener() {
    let (r, _b) = TestRouter::with_backend("limits:\n  max_connections: 4000\n").await;
    let held = silent_connections(r.http, 1000).await;
    e2e::eventually("1 000 open", Duration::from_secs(20), async || {
        r.metric("router_open_connections{listener=\"http\"}").await == Some(1000.0)
    })
    .await;
    let mut over = tokio::net::TcpStream::connect(r.http)
        .await
        .expect("the kernel accepts");
    let mut buf = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_secs(5), over.read(&mut buf)).await;
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "closed at once: {read:?}"
    );
    assert_eq!(
        r.metric("router_connections_refused_total{listener=\"http\",reason=\"source_limit\"}")
            .await,
        Some(1.0)
    );
    let probed = probe_for(&r, 2).await;
    assert_eq!(probed.ok, probed.total, "{probed:?}");
    drop(held);
}

/// At `limits.max_connections`, with every connection holding a request in flight
/// (slow readers of a streamed answer, all from 127.0.0.1), a client from another
/// address makes room: one connection of the source holding the most is closed,
/// instead of the newcomer waiting for one to end by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_limit_a_busy_connection_of_the_heaviest_source_makes_room() {
    let (r, _b) = TestRouter::with_backend(
        "limits:\n  max_connections: 30\n  max_connections_per_source: 30\n",
    )
    .await;
    let mut readers = silent_connections(r.http, 30).await;
    for s in &mut readers {
        let req = format!("GET /stream?chunks=64 HTTP/1.1\r\nHost: {HA}\r\n\r\n");
        s.write_all(req.as_bytes()).await.expect("write");
    }
    e2e::eventually("30 busy", Duration::from_secs(20), async || {
        r.metric("router_open_connections{listener=\"http\"}").await == Some(30.0)
    })
    .await;
    let probed = probe_for(&r, 3).await;
    assert!(probed.total >= 20, "{probed:?}");
    assert_eq!(probed.ok, probed.total, "{probed:?}");
    assert!(
        r.metric("router_connections_evicted_total{listener=\"http\"}")
            .await
            >= Some(1.0)
    );
    drop(readers);
}

/// Behind a CDN or load balancer named in `forwarded.trusted`, every request comes
/// from its address: the slot share goes by the client it names last in
/// `X-Forwarded-For`. One client's slow requests through it leave another's served;
/// with the default trust (every address, so no `X-Forwarded-For` can be believed)
/// both are the proxy's address, and the second is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_a_named_proxy_the_share_is_per_real_client() {
    async fn run(extra: &str) -> u32 {
        let (r, b) = TestRouter::with_backend(extra).await;
        let until = Instant::now() + Duration::from_secs(20);
        let attacker = "X-Forwarded-For: 198.51.100.1\r\n";
        let addr = r.http;
        let attack = tokio::spawn(async move {
            e2e::attack::slow_requests(addr, HA, SLOW, attacker, 150, until).await
        });
        wait_in_flight(&r, &b, 90).await;
        let mut ok = 0;
        for _ in 0..5 {
            let req = format!(
                "GET / HTTP/1.1\r\nHost: {HA}\r\nX-Forwarded-For: 198.51.100.2\r\nConnection: close\r\n\r\n"
            );
            let resp = e2e::raw::exchange(r.http, req.as_bytes(), Duration::from_secs(2)).await;
            ok += u32::from(e2e::raw::status(&resp) == Some(200));
        }
        attack.abort();
        r.stop().await;
        ok
    }
    let named = run(
        "forwarded:\n  trusted: [127.0.0.1/32]\nlimits:\n  max_connections_per_source: 10000\n",
    )
    .await;
    assert_eq!(named, 5, "the other client behind the proxy is served");
    let default = run("limits:\n  max_connections_per_source: 10000\n").await;
    assert_eq!(default, 0, "without naming the proxy, it is one client");
}
