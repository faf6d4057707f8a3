//! Graceful shutdown of the in-process router.

use std::time::Duration;

use e2e::{Backend, TestRouter, events};

const HA: &str = "ha-myapp-demo.example.com";

/// A router with one member, and a request to it that takes `ms` to answer, already
/// in flight when this returns.
async fn router_with_slow_request(
    config: &str,
    ms: u64,
) -> (TestRouter, Backend, tokio::task::JoinHandle<Vec<u8>>) {
    let b = Backend::start().await;
    let r = TestRouter::start(config).await;
    r.drop_event("01.yaml", &events::add_lb("myapp", "demo", b.addr));
    r.wait_route(HA).await;
    let addr = r.http;
    let slow = tokio::spawn(async move {
        e2e::raw::exchange(
            addr,
            format!("GET /slow?ms={ms} HTTP/1.1\r\nHost: {HA}\r\n\r\n").as_bytes(),
            Duration::from_secs(60),
        )
        .await
    });
    // Let the request reach the member (wait_route made the first hit).
    e2e::eventually("request in flight", Duration::from_secs(10), async || {
        b.hits() >= 2
    })
    .await;
    (r, b, slow)
}

#[tokio::test]
async fn in_flight_request_finishes_and_readiness_drops() {
    let (mut r, _b, slow) = router_with_slow_request("shutdown_grace: 10s\n", 1000).await;
    let stopped = r.begin_stop();
    // Readiness drops at once (keepalived moves the VIP) while the admin API stays up.
    e2e::eventually("not ready", Duration::from_secs(5), async || {
        r.admin_get("/readyz").await.0 == 503
    })
    .await;
    let resp = slow.await.expect("join");
    assert_eq!(
        e2e::raw::status(&resp),
        Some(200),
        "{}",
        String::from_utf8_lossy(&resp)
    );
    // The keep-alive connection is closed after the in-flight response.
    let head = String::from_utf8_lossy(&resp).to_ascii_lowercase();
    assert!(head.contains("connection: close"), "{head}");
    tokio::time::timeout(Duration::from_secs(10), stopped)
        .await
        .expect("router stopped after draining")
        .expect("join");
    assert!(
        tokio::net::TcpStream::connect(r.http).await.is_err(),
        "listener closed"
    );
}

#[tokio::test]
async fn grace_period_bounds_the_drain() {
    let (mut r, _b, slow) = router_with_slow_request("shutdown_grace: 300ms\n", 30000).await;
    let stopped = r.begin_stop();
    // Far less than the member's 30 s: the grace period, not the request, decides.
    tokio::time::timeout(Duration::from_secs(10), stopped)
        .await
        .expect("router stopped once the grace period ended")
        .expect("join");
    slow.abort();
}
