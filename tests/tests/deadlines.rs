//! Every quiet state of a client connection has a deadline (a client must not hold a connection for free):
//! silent sockets, a half-sent h2 preface, keep-alive between requests, and a
//! client that floods PINGs without ever reading its answers.

use std::time::Duration;

use e2e::{Backend, TestRouter, events};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const HA: &str = "ha-myapp-demo.example.com";
const SHORT: &str =
    "limits:\n  header_read_timeout: 300ms\n  idle_timeout: 400ms\n  send_timeout: 500ms\n";

async fn router() -> (TestRouter, Backend) {
    let b = Backend::start().await;
    let r = TestRouter::start(SHORT).await;
    r.drop_event("01.yaml", &events::add_lb("myapp", "demo", b.addr));
    r.wait_route(HA).await;
    (r, b)
}

/// Reads until the router closes the connection (EOF or reset); fails after 5 s.
async fn closed_by_router(s: &mut TcpStream) {
    let mut buf = [0u8; 4096];
    tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .expect("the router closed the connection at its deadline");
}

async fn no_client_connection_left(r: &TestRouter) {
    e2e::eventually(
        "no client connection open",
        Duration::from_secs(10),
        async || r.metric("router_open_connections{listener=\"http\"}").await == Some(0.0),
    )
    .await;
}

#[tokio::test]
async fn silent_and_half_preface_connections_are_closed_at_the_head_deadline() {
    let (r, _b) = router().await;
    no_client_connection_left(&r).await;
    let mut silent = TcpStream::connect(r.http).await.expect("connect");
    let mut half = TcpStream::connect(r.http).await.expect("connect");
    // The first 16 of the 24 preface bytes: the h1/h2 detection waits for the rest.
    half.write_all(b"PRI * HTTP/2.0\r\n").await.expect("write");
    closed_by_router(&mut silent).await;
    closed_by_router(&mut half).await;
    no_client_connection_left(&r).await;
    assert_eq!(r.get(HA, "/").await.0, 200, "the listener still serves");
}

#[tokio::test]
async fn keep_alive_connections_close_after_the_idle_timeout() {
    let (r, _b) = router().await;
    let mut s = TcpStream::connect(r.http).await.expect("connect");
    s.write_all(format!("GET / HTTP/1.1\r\nHost: {HA}\r\n\r\n").as_bytes())
        .await
        .expect("write");
    let mut buf = [0u8; 4096];
    let n = s.read(&mut buf).await.expect("response");
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    closed_by_router(&mut s).await;

    // h2 with prior knowledge: one request, then quiet.
    let tcp = TcpStream::connect(r.http).await.expect("connect");
    let (mut send, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await
    .expect("h2 handshake");
    let conn = tokio::spawn(conn);
    let req = http::Request::get(format!("http://{HA}/"))
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .expect("request");
    let resp = send.send_request(req).await.expect("response");
    assert_eq!(resp.status(), 200);
    drop(resp);
    tokio::time::timeout(Duration::from_secs(5), conn)
        .await
        .expect("the router ended the idle h2 connection")
        .expect("join")
        .ok();
    no_client_connection_left(&r).await;
}

#[tokio::test]
async fn a_client_that_floods_pings_and_never_reads_is_cut_at_the_send_timeout() {
    let (r, _b) = router().await;
    no_client_connection_left(&r).await;
    let socket =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    // A tiny receive window so that the router's PONGs back up quickly.
    socket.set_recv_buffer_size(4096).expect("rcvbuf");
    socket.connect(&r.http.into()).expect("connect");
    socket.set_nonblocking(true).expect("nonblocking");
    let mut s = TcpStream::from_std(socket.into()).expect("tokio stream");
    // Preface, an empty SETTINGS frame, then PING frames for ever (never reading).
    let frames = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";
    let ping = b"\x00\x00\x08\x06\x00\x00\x00\x00\x00pingpong";
    let mut pings = Vec::with_capacity(ping.len() * 4096);
    for _ in 0..4096 {
        pings.extend_from_slice(ping);
    }
    s.write_all(frames).await.expect("preface");
    let flood = tokio::spawn(async move {
        // Ends when the router closes the connection (the write fails) or after
        // a bound well past the deadline.
        let _ = tokio::time::timeout(Duration::from_secs(20), async {
            while s.write_all(&pings).await.is_ok() {}
        })
        .await;
    });
    no_client_connection_left(&r).await;
    assert_eq!(r.get(HA, "/").await.0, 200, "others are served throughout");
    flood.abort();
}

/// One h2 connection that asks for 100 responses and never opens its flow-control
/// window holds at most `limits.h2_max_concurrent_streams` of a member's slots, so a
/// normal client beside it keeps getting 200 at once; and only for
/// `limits.send_timeout`: then the connection is closed and the slots are free.
#[tokio::test]
async fn a_zero_window_h2_client_holds_a_bounded_share_of_a_members_slots() {
    let b = Backend::start().await;
    let r = TestRouter::start(
        "upstream:\n  max_connections_per_backend: 40\n  queue_timeout: 500ms\n  source_share: 100\nlimits:\n  h2_max_concurrent_streams: 32\n  send_timeout: 3s\n",
    )
    .await;
    r.drop_event("01.yaml", &events::add_lb("myapp", "demo", b.addr));
    r.wait_route(HA).await;

    // Preface; SETTINGS_INITIAL_WINDOW_SIZE = 0; then 100 GETs, never a WINDOW_UPDATE.
    let mut attack =
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x06\x04\x00\x00\x00\x00\x00\x00\x04\x00\x00\x00\x00"
            .to_vec();
    let mut block = b"\x82\x86\x84\x41".to_vec();
    block.push(HA.len() as u8);
    block.extend_from_slice(HA.as_bytes());
    for i in 0..100u32 {
        let len = (block.len() as u32).to_be_bytes();
        attack.extend_from_slice(&len[1..]);
        attack.extend_from_slice(b"\x01\x05");
        attack.extend_from_slice(&(2 * i + 1).to_be_bytes());
        attack.extend_from_slice(&block);
    }
    let mut s = TcpStream::connect(r.http).await.expect("connect");
    s.write_all(&attack).await.expect("write");
    // Read (so TCP never blocks the router) but never grant a window.
    let mut reader = tokio::spawn(async move {
        let mut buf = [0u8; 16 * 1024];
        while let Ok(n) = s.read(&mut buf).await {
            if n == 0 {
                break;
            }
        }
    });
    let in_flight = async || {
        let (_, doc) = r.admin_get("/backends").await;
        let doc: serde_json::Value = serde_json::from_str(&doc).expect("json");
        doc["backends"][0]["in_flight"].as_u64()
    };
    e2e::eventually(
        "the attacker's streams reached the member",
        Duration::from_secs(10),
        async || in_flight().await == Some(32),
    )
    .await;
    // Beside it (a client that had to queue for a slot would get 503 after the
    // queue timeout).
    for _ in 0..10 {
        assert_eq!(r.get(HA, "/").await.0, 200, "a normal client beside it");
    }
    assert_eq!(in_flight().await, Some(32), "never more than its share");
    e2e::eventually(
        "the stalled connection's slots are free again",
        Duration::from_secs(15),
        async || in_flight().await == Some(0),
    )
    .await;
    tokio::time::timeout(Duration::from_secs(5), &mut reader)
        .await
        .expect("the router closed the stalled connection")
        .expect("reader");
}

/// A POST whose head arrives but whose body trickles in (R-U-Dead-Yet,
/// `slowhttptest -B`).
async fn slow_body(r: &TestRouter, length: usize, sent: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect(r.http).await.expect("connect");
    let head = format!("POST /upload HTTP/1.1\r\nHost: {HA}\r\nContent-Length: {length}\r\n\r\n");
    s.write_all(head.as_bytes()).await.expect("head");
    s.write_all(sent).await.expect("body start");
    s
}

async fn response_head(s: &mut TcpStream) -> String {
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
        .await
        .expect("an answer")
        .expect("read");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// Clients that send their bodies slowly never take a member's slot: the body is
/// read ahead first, and the slow ones get 408 at `header_read_timeout` while a
/// normal client beside them gets 200 at once. The member never sees them and
/// stays healthy.
#[tokio::test]
async fn slow_request_bodies_never_hold_a_members_slots() {
    let b = Backend::start().await;
    let r = TestRouter::start(
        "upstream:\n  max_connections_per_backend: 2\n  queue_timeout: 300ms\nlimits:\n  header_read_timeout: 2s\n",
    )
    .await;
    r.drop_event("01.yaml", &events::add_lb("myapp", "demo", b.addr));
    r.wait_route(HA).await;
    let before = b.proxied();
    let mut slow = Vec::new();
    for _ in 0..6 {
        slow.push(slow_body(&r, 1000, b"name=value&").await);
    }
    e2e::eventually(
        "six slow bodies open",
        Duration::from_secs(10),
        async || r.metric("router_open_connections{listener=\"http\"}").await == Some(6.0),
    )
    .await;
    // Had the slow bodies held the member's two slots, a normal client would get
    // 503 after the 300 ms queue_timeout.
    for _ in 0..5 {
        assert_eq!(r.get(HA, "/").await.0, 200, "a normal client beside them");
    }
    for s in &mut slow {
        let head = response_head(s).await;
        assert!(head.starts_with("HTTP/1.1 408"), "{head}");
    }
    assert_eq!(
        b.proxied() - before,
        5,
        "the member saw only the normal requests"
    );
    assert_eq!(
        r.metric("router_upstream_errors_total{kind=\"client_timeout\"}")
            .await,
        Some(6.0)
    );
}

/// Past `limits.body_buffer_bytes` the body streams to the member; when it then
/// stalls for `limits.body_timeout` the request ends with 408, as the client's
/// fault: the member is not ejected.
#[tokio::test]
async fn a_body_that_stalls_after_the_read_ahead_is_408_and_blames_no_member() {
    let b = Backend::start().await;
    let r = TestRouter::start(
        "health:\n  passive_failures: 1\nlimits:\n  body_buffer_bytes: 1024\n  body_timeout: 500ms\n",
    )
    .await;
    r.drop_event("01.yaml", &events::add_lb("myapp", "demo", b.addr));
    r.wait_route(HA).await;
    r.wait_health(b.addr, "up").await;
    let mut s = slow_body(&r, 100_000, &[b'x'; 4096]).await;
    let head = response_head(&mut s).await;
    assert!(head.starts_with("HTTP/1.1 408"), "{head}");
    assert_eq!(
        r.metric("router_upstream_errors_total{kind=\"client_timeout\"}")
            .await,
        Some(1.0)
    );
    let state = r.backend_state(b.addr).await.expect("listed");
    assert_eq!(
        state["health"], "up",
        "one failure would have ejected it: {state}"
    );
    assert_eq!(r.get(HA, "/").await.0, 200);
}
