//! Graceful shutdown of the in-process router.

use std::time::Duration;

use e2e::{Backend, TestRouter, events};

const HA: &str = "ha-myapp-demo.example.com";

#[tokio::test]
async fn in_flight_request_finishes_and_readiness_drops() {
    let b = Backend::start().await;
    let mut r = TestRouter::start("shutdown_grace: 10s\n").await;
    r.drop_event("01.yaml", &events::add_lb("myapp", "demo", b.addr));
    r.wait_route(HA).await;

    let slow = tokio::spawn({
        let addr = r.http;
        async move {
            e2e::raw::exchange(
                addr,
                format!("GET /slow?ms=1000 HTTP/1.1\r\nHost: {HA}\r\n\r\n").as_bytes(),
                Duration::from_secs(20),
            )
            .await
        }
    });
    // Let the request reach the member, then ask the router to stop.
    e2e::eventually("request in flight", Duration::from_secs(10), async || {
        b.hits() >= 2
    })
    .await;
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
    let b = Backend::start().await;
    let mut r = TestRouter::start("shutdown_grace: 300ms\n").await;
    r.drop_event("01.yaml", &events::add_lb("myapp", "demo", b.addr));
    r.wait_route(HA).await;
    let slow = tokio::spawn({
        let addr = r.http;
        async move {
            e2e::raw::exchange(
                addr,
                format!("GET /slow?ms=30000 HTTP/1.1\r\nHost: {HA}\r\n\r\n").as_bytes(),
                Duration::from_secs(60),
            )
            .await
        }
    });
    e2e::eventually("request in flight", Duration::from_secs(10), async || {
        b.hits() >= 2
    })
    .await;
    let stopped = r.begin_stop();
    // Far less than the member's 30 s: the grace period, not the request, decides.
    tokio::time::timeout(Duration::from_secs(10), stopped)
        .await
        .expect("router stopped once the grace period ended")
        .expect("join");
    slow.abort();
}
