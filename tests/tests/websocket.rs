//! WebSocket through the router: 101 passthrough, then a byte tunnel both ways.

use std::time::Duration;

use e2e::{Backend, TestRouter, events};
use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

type Ws = tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>;

/// A WebSocket to the test app through the router's plain listener.
async fn open_ws(r: &TestRouter) -> Ws {
    let tcp = tokio::net::TcpStream::connect(r.http)
        .await
        .expect("connect");
    let req = "ws://ha-myapp-demo.example.com/chat"
        .into_client_request()
        .expect("request");
    tokio_tungstenite::client_async(req, tcp)
        .await
        .expect("handshake")
        .0
}

#[tokio::test]
async fn websocket_echo_through_the_router() {
    let b = Backend::start().await;
    let r = TestRouter::start("").await;
    r.drop_event("01.yaml", &events::add_lb("myapp", "demo", b.addr));
    r.wait_route("ha-myapp-demo.example.com").await;

    let tcp = tokio::net::TcpStream::connect(r.http)
        .await
        .expect("connect");
    let mut req = "ws://ha-myapp-demo.example.com/chat"
        .into_client_request()
        .expect("request");
    req.headers_mut()
        .insert("cookie", "GEAR=local-1".parse().expect("cookie"));
    let (mut ws, resp) = tokio_tungstenite::client_async(req, tcp)
        .await
        .expect("websocket handshake through the router");
    assert_eq!(resp.status(), 101);
    // The tunnel is counted on its member, apart from the request slots.
    let member = r
        .backend_state(b.addr)
        .await
        .expect("the member in /backends");
    assert_eq!(
        (member["tunnels"].as_u64(), member["in_flight"].as_u64()),
        (Some(1), Some(0))
    );

    for i in 0..50 {
        let text = format!("message {i}");
        ws.send(Message::text(text.clone())).await.expect("send");
        let got = ws.next().await.expect("open").expect("frame");
        assert_eq!(got, Message::text(text));
    }
    let big = vec![9u8; 1 << 20];
    ws.send(Message::binary(big.clone()))
        .await
        .expect("send binary");
    let got = ws.next().await.expect("open").expect("frame");
    assert_eq!(got.into_data().len(), big.len());
    ws.close(None).await.expect("close");
    drop(ws);

    // Closed: the tunnel count goes back to 0.
    e2e::eventually(
        "tunnel count back to 0",
        std::time::Duration::from_secs(10),
        async || {
            r.backend_state(b.addr)
                .await
                .is_some_and(|s| s["tunnels"] == 0 && s["in_flight"] == 0)
        },
    )
    .await;
}

/// WebSocket tunnels hold no request slot: with `max_connections_per_backend: 2`
/// and five tunnels open to the one member, requests are still served at once (a
/// tunnel used to keep its slot, and the third client of a chat app got 503).
#[tokio::test]
async fn tunnels_leave_the_members_request_slots_free() {
    let b = Backend::start().await;
    let r =
        TestRouter::start("upstream:\n  max_connections_per_backend: 2\n  queue_timeout: 200ms\n")
            .await;
    r.drop_event("01.yaml", &events::add_lb("myapp", "demo", b.addr));
    r.wait_route("ha-myapp-demo.example.com").await;
    let mut tunnels = Vec::new();
    for _ in 0..5 {
        tunnels.push(open_ws(&r).await);
    }
    for _ in 0..3 {
        let (status, _) = r.get("ha-myapp-demo.example.com", "/").await;
        assert_eq!(status, 200, "a request beside five tunnels");
    }
    let state = r
        .backend_state(b.addr)
        .await
        .expect("the member in /backends");
    assert_eq!(state["tunnels"], 5);
    for ws in &mut tunnels {
        ws.send(Message::text("still there")).await.expect("send");
        assert_eq!(
            ws.next().await.expect("open").expect("frame"),
            Message::text("still there")
        );
    }
}

/// The access line of a WebSocket upgrade names the member that answered 101 (it used
/// to say "-": the tunnel holds the member's slot, not the response).
#[tokio::test]
async fn websocket_access_line_names_the_member() {
    let b = Backend::start().await;
    let dir = e2e::tempdir("ws-log");
    let cfg = e2e::process::spool_router(
        &dir,
        &events::add_lb("myapp", "demo", b.addr),
        &e2e::process::spool_config(&dir, "127.0.0.1:0", true, ""),
    );
    let mut router = e2e::process::RouterProcess::start(&cfg).await;
    e2e::eventually("route", std::time::Duration::from_secs(10), async || {
        router.status("ha-myapp-demo.example.com", "/").await == Some(200)
    })
    .await;
    let tcp = tokio::net::TcpStream::connect(router.http)
        .await
        .expect("connect");
    let req = "ws://ha-myapp-demo.example.com/chat"
        .into_client_request()
        .expect("request");
    let (mut ws, resp) = tokio_tungstenite::client_async(req, tcp)
        .await
        .expect("handshake");
    assert_eq!(resp.status(), 101);
    ws.send(Message::text("hi")).await.expect("send");
    assert_eq!(
        ws.next().await.expect("open").expect("frame"),
        Message::text("hi")
    );
    let line = loop {
        let v = tokio::time::timeout(std::time::Duration::from_secs(10), router.logs.recv())
            .await
            .expect("an access line in time")
            .expect("router running");
        if v["target"] == "access" && v["path"] == "/chat" {
            break v;
        }
    };
    assert_eq!(line["status"], 101);
    assert_eq!(line["upstream"], b.addr.to_string(), "{line}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A WebSocket tunnel keeps its connection's place among `limits.max_connections`
/// (a thousand tunnels are a thousand sockets): at the limit a new client waits,
/// and gets in as soon as a tunnel closes.
#[tokio::test]
async fn websocket_tunnels_count_against_max_connections() {
    use std::time::Duration;
    let b = Backend::start().await;
    let r =
        TestRouter::start("limits:\n  max_connections: 2\n  max_connections_per_source: 3\n").await;
    r.drop_event("01.yaml", &events::add_lb("myapp", "demo", b.addr));
    r.wait_route("ha-myapp-demo.example.com").await;
    let mut first = open_ws(&r).await;
    let mut second = open_ws(&r).await;
    e2e::eventually("both tunnels counted", Duration::from_secs(5), async || {
        r.metric("router_open_connections{listener=\"http\"}").await == Some(2.0)
    })
    .await;
    // A third client waits for a place (tunnels are never evicted): its request
    // is sent now and must not reach the member while both tunnels live.
    let proxied = b.proxied();
    let mut third = tokio::net::TcpStream::connect(r.http)
        .await
        .expect("connect");
    tokio::io::AsyncWriteExt::write_all(
        &mut third,
        b"GET / HTTP/1.1\r\nHost: ha-myapp-demo.example.com\r\nConnection: close\r\n\r\n",
    )
    .await
    .expect("write");
    // Both tunnels still carry messages (round trips through the router after
    // the third request was in its hands).
    for ws in [&mut first, &mut second] {
        ws.send(Message::text("ping")).await.expect("send");
        assert_eq!(
            ws.next().await.expect("open").expect("frame"),
            Message::text("ping")
        );
    }
    assert_eq!(
        b.proxied(),
        proxied,
        "served beside two tunnels at max_connections 2"
    );
    let third = tokio::spawn(async move {
        let mut out = Vec::new();
        let _ = tokio::io::AsyncReadExt::read_to_end(&mut third, &mut out).await;
        String::from_utf8_lossy(&out).into_owned()
    });
    first.close(None).await.expect("close");
    drop(first);
    let answer = tokio::time::timeout(Duration::from_secs(10), third)
        .await
        .expect("served once a tunnel closed")
        .expect("join");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    drop(second);
}

/// A tunnel with no byte either way for `limits.tunnel_idle_timeout` is closed and
/// its member connection and tunnel count freed; a tunnel in use stays open past that.
#[tokio::test]
async fn idle_tunnels_close_at_the_tunnel_idle_timeout() {
    use std::time::{Duration, Instant};
    let b = Backend::start().await;
    let r = TestRouter::start("limits:\n  tunnel_idle_timeout: 1s\n").await;
    r.drop_event("01.yaml", &events::add_lb("myapp", "demo", b.addr));
    r.wait_route("ha-myapp-demo.example.com").await;
    let mut busy = open_ws(&r).await;
    let mut idle = open_ws(&r).await;
    let opened = Instant::now();
    // The busy one talks every 300 ms for 2.5 s: well past the idle timeout.
    while opened.elapsed() < Duration::from_millis(2500) {
        busy.send(Message::text("hi")).await.expect("send");
        assert_eq!(
            busy.next().await.expect("open").expect("frame"),
            Message::text("hi")
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // The idle one has been closed by the router by now.
    let end = tokio::time::timeout(Duration::from_secs(5), idle.next())
        .await
        .expect("the idle tunnel ended");
    assert!(
        !matches!(end, Some(Ok(Message::Text(_)))),
        "no message on an idle tunnel: {end:?}"
    );
    e2e::eventually(
        "one tunnel left, the busy one",
        Duration::from_secs(5),
        async || {
            r.backend_state(b.addr)
                .await
                .is_some_and(|s| s["tunnels"] == 1)
        },
    )
    .await;
    busy.send(Message::text("still")).await.expect("send");
    assert_eq!(
        busy.next().await.expect("open").expect("frame"),
        Message::text("still")
    );
}

/// An app's own `tunnel_idle_timeout` (its settings) replaces the configuration's
/// (1 h here): its idle tunnel is closed after 500 ms.
#[tokio::test]
async fn an_apps_own_tunnel_idle_timeout_applies_to_its_tunnels() {
    use std::time::Duration;
    let b = Backend::start().await;
    let r = TestRouter::start("limits:\n  tunnel_idle_timeout: 1h\n").await;
    r.drop_event("01.yaml", &events::add_lb("myapp", "demo", b.addr));
    r.wait_route("ha-myapp-demo.example.com").await;
    let (s, text) = r
        .admin_call(
            "PUT",
            "/apps/myapp-demo/settings",
            r#"{"tunnel_idle_timeout": "500ms"}"#,
            None,
        )
        .await;
    assert_eq!(s, 200, "{text}");
    let mut idle = open_ws(&r).await;
    let end = tokio::time::timeout(Duration::from_secs(10), idle.next())
        .await
        .expect("the idle tunnel ended well before the configuration's hour");
    assert!(
        !matches!(end, Some(Ok(Message::Text(_)))),
        "no message on an idle tunnel: {end:?}"
    );
}

/// A member that takes the upgrade request and closes without answering (a gear
/// going away) gives way to another member, on a fresh connection, as any
/// request that was sent but never answered: every handshake gets its 101.
#[tokio::test]
async fn an_upgrade_a_member_closed_unanswered_goes_to_another_member() {
    use tokio::io::AsyncReadExt;
    let b = Backend::start().await;
    // Reads the request head, then closes.
    let closer = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let closer_addr = closer.local_addr().expect("addr");
    let closed = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = closed.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = closer.accept().await {
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf).await;
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    });
    // Round robin, no checks, no passive ejection: the closer stays in turn.
    let r = TestRouter::start(
        "upstream:\n  balance: round_robin\nhealth:\n  checks: false\n  passive_failures: 0\n",
    )
    .await;
    r.drop_event("01.yaml", &events::add_lb("myapp", "demo", b.addr));
    r.drop_event("02.yaml", &events::add_lb("myapp", "demo", closer_addr));
    r.wait_member(b.addr).await;
    r.wait_member(closer_addr).await;
    let before = r
        .metric("router_upstream_retries_total")
        .await
        .unwrap_or(0.0);
    for i in 0..6 {
        let mut ws = open_ws(&r).await;
        let text = format!("message {i}");
        ws.send(Message::text(text.clone())).await.expect("send");
        let got = ws.next().await.expect("open").expect("frame");
        assert_eq!(got, Message::text(text), "handshake {i}");
    }
    let closed = closed.load(std::sync::atomic::Ordering::SeqCst);
    assert!(closed >= 3, "the closer took its turns: {closed}");
    let retries = r.grown_since("router_upstream_retries_total", before).await;
    assert!(
        retries >= closed as f64,
        "each closed handshake was sent again: {retries} retries, {closed} closed"
    );
}

/// A WebSocket still open when the grace ends is closed cleanly: the router
/// tells both sides the stream ended and reads what the client still sends
/// until it closes (at most a second) before the process exits. Without that,
/// what the client sent after the router's socket went (the process gone) was
/// answered with a reset (found by the pair's planned-move test, about one
/// run in ten). The client here is raw bytes: masked frames every millisecond,
/// going on for 100 ms after it read the end, as a client that has not
/// processed the end yet does.
#[tokio::test]
async fn a_websocket_open_at_the_grace_end_is_closed_not_reset() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let b = Backend::start().await;
    let dir = e2e::tempdir("ws-grace");
    let config = e2e::process::spool_config(&dir, "127.0.0.1:0", false, "shutdown_grace: 300ms\n");
    let cfg = e2e::process::spool_router(&dir, &events::add_lb("myapp", "demo", b.addr), &config);
    let router = e2e::process::RouterProcess::start(&cfg).await;
    let host = "ha-myapp-demo.example.com";
    e2e::eventually("routed", Duration::from_secs(10), async || {
        router.status(host, "/").await == Some(200)
    })
    .await;
    let mut tcp = tokio::net::TcpStream::connect(router.http)
        .await
        .expect("connect");
    let upgrade = format!(
        "GET /chat HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    tcp.write_all(upgrade.as_bytes()).await.expect("upgrade");
    let mut head = [0u8; 1024];
    let n = tcp.read(&mut head).await.expect("101");
    assert!(
        head[..n].starts_with(b"HTTP/1.1 101"),
        "{}",
        String::from_utf8_lossy(&head[..n])
    );
    let (mut rd, mut wr) = tcp.into_split();
    // A masked text frame of 64 bytes (mask 0: the payload as it is).
    let mut frame = vec![0x81, 0x80 | 64, 0, 0, 0, 0];
    frame.extend_from_slice(&[b'x'; 64]);
    let ended = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ended_w = ended.clone();
    let writer = tokio::spawn(async move {
        let mut after_end = 0;
        loop {
            if let Err(e) = wr.write_all(&frame).await {
                return Some(e);
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
            if ended_w.load(std::sync::atomic::Ordering::Relaxed) {
                after_end += 1;
                if after_end >= 100 {
                    return None;
                }
            }
        }
    });
    let mut got = [0u8; 8192];
    assert!(
        rd.read(&mut got).await.expect("an echo") > 0,
        "an echo before the stop"
    );
    router.signal("TERM");
    let mut echoed = 0usize;
    let read_end = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match rd.read(&mut got).await {
                Ok(0) => return None,
                Ok(n) => echoed += n,
                Err(e) => return Some(e),
            }
        }
    })
    .await
    .expect("the tunnel ended within the grace and the linger");
    ended.store(true, std::sync::atomic::Ordering::Relaxed);
    let write_end = writer.await.expect("writer");
    let reset = |e: &Option<std::io::Error>| {
        e.as_ref().is_some_and(|e| {
            matches!(
                e.kind(),
                std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
            )
        })
    };
    assert!(
        !reset(&read_end) && !reset(&write_end),
        "the WebSocket open at the grace's end was reset, not closed (after {echoed} bytes echoed): read {read_end:?}, write {write_end:?}"
    );
    assert!(echoed > 1000, "it echoed through the grace: {echoed} bytes");
}
