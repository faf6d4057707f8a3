//! Members that speak h2 (`members_protocol: h2`) get the one retry decision the
//! HTTP/1.1 path has: a member that cannot be reached (nothing was sent) gives
//! way to another member of the app. Real router, a real h2c member (hyper's
//! server) and a member whose port is closed.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use e2e::{TestRouter, events};

const HOST: &str = "ha-hh-demo.example.com";

/// An h2c member (prior knowledge) answering 200 "h2 member" to everything.
async fn h2c_member() -> SocketAddr {
    use hyper::server::conn::http2;
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let service = hyper::service::service_fn(|_req| async {
                    Ok::<_, Infallible>(hyper::Response::new(http_body_util::Full::new(
                        bytes::Bytes::from_static(b"h2 member"),
                    )))
                });
                let _ = http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn an_unreachable_h2_member_gives_way_to_another() {
    let live = h2c_member().await;
    // A bound port that never listens: connecting to it is refused.
    let refusing = e2e::Refusing::new();
    let dead = refusing.addr;
    // Round robin and no health checks or passive ejection: the dead member stays
    // in turn, so every other request meets it first.
    let r = TestRouter::start(
        "upstream:\n  balance: round_robin\nhealth:\n  checks: false\n  passive_failures: 0\n",
    )
    .await;
    r.drop_event("01.yaml", &events::add_lb("hh", "demo", live));
    r.drop_event("02.yaml", &events::add_lb("hh", "demo", dead));
    r.wait_member(live).await;
    r.wait_member(dead).await;
    r.set_members_h2("hh-demo").await;
    let before = r
        .metric("router_upstream_retries_total")
        .await
        .unwrap_or(0.0);
    for i in 0..6 {
        let req = format!("GET /{i} HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n");
        let out = e2e::raw::exchange(r.http, req.as_bytes(), Duration::from_secs(10)).await;
        assert_eq!(
            e2e::raw::status(&out),
            Some(200),
            "request {i}: {}",
            String::from_utf8_lossy(&out)
        );
        assert!(
            out.ends_with(b"h2 member"),
            "{}",
            String::from_utf8_lossy(&out)
        );
    }
    let retries = r.grown_since("router_upstream_retries_total", before).await;
    assert!(
        retries >= 3.0,
        "every turn of the dead member moved to the live one: {retries} retries"
    );
    assert!(
        r.metric("router_upstream_errors_total{kind=\"connect\"}")
            .await
            .unwrap_or(0.0)
            >= 3.0
    );
}
