//! The HTTP data path, through real sockets: routing, header handling, errors, limits.

use std::time::Duration;

use bytes::Bytes;
use e2e::{Backend, Echo, Refusing, TestRouter, events, raw};
use http::Request;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

const HA: &str = "ha-myapp-demo.example.com";

async fn router_with_backend() -> (TestRouter, Backend) {
    let backend = Backend::start().await;
    let r = TestRouter::start("").await;
    r.drop_event("01.yaml", &events::add_lb("myapp", "demo", backend.addr));
    r.wait_route(HA).await;
    (r, backend)
}

#[tokio::test]
async fn host_path_and_query_reach_the_backend_verbatim() {
    let (r, _b) = router_with_backend().await;
    let request = "GET /a%20b/../c//d?x=1&y=%2F&z=%zz HTTP/1.1\r\n\
         Host: HA-MyApp-Demo.Example.com.:8080\r\n\
         Cookie: GEAR=local-5464c9f6\r\n\
         X-Forwarded-For: 203.0.113.9\r\n\
         X-Forwarded-Proto: https\r\n\
         Connection: keep-alive, X-Hop\r\n\
         X-Hop: secret\r\n\
         Keep-Alive: timeout=5\r\n\
         TE: trailers\r\n\
         Proxy-Connection: keep-alive\r\n\
         Connection: close\r\n\r\n";
    let resp = raw::exchange(r.http, request.as_bytes(), Duration::from_secs(10)).await;
    assert_eq!(
        raw::status(&resp),
        Some(200),
        "{}",
        String::from_utf8_lossy(&resp)
    );
    let text = String::from_utf8_lossy(&resp);
    let body = &text[text.find("\r\n\r\n").expect("head end") + 4..];
    let echo = Echo::parse(body.as_bytes());
    assert_eq!(echo.target, "/a%20b/../c//d?x=1&y=%2F&z=%zz");
    assert_eq!(echo.all("host"), ["HA-MyApp-Demo.Example.com.:8080"]);
    assert_eq!(echo.header("cookie"), Some("GEAR=local-5464c9f6"));
    assert_eq!(
        echo.header("x-forwarded-for"),
        Some("203.0.113.9, 127.0.0.1")
    );
    assert_eq!(echo.header("x-forwarded-proto"), Some("http"));
    assert_eq!(
        echo.header("x-forwarded-host"),
        Some("HA-MyApp-Demo.Example.com.:8080")
    );
    assert_eq!(
        echo.header("x-forwarded-port"),
        Some(r.http.port().to_string().as_str())
    );
    for hop in ["x-hop", "keep-alive", "te", "proxy-connection"] {
        assert_eq!(echo.header(hop), None, "{hop} must not be forwarded");
    }
    assert_eq!(echo.version, "HTTP/1.1");
    // The backend's hop-by-hop Keep-Alive is not passed back; its cookie is.
    let head = &text[..text.find("\r\n\r\n").expect("head end")].to_ascii_lowercase();
    assert!(!head.contains("\r\nkeep-alive:"), "{head}");
    assert!(head.contains("set-cookie: gear=local-abc"), "{head}");
}

/// The first response in `bytes` and what follows it (by its `Content-Length`).
fn first_response(bytes: &[u8]) -> (&[u8], &[u8]) {
    let head_end = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a whole head")
        + 4;
    let head = String::from_utf8_lossy(&bytes[..head_end]).to_ascii_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .and_then(|v| v.trim().parse().ok())
        .expect("a content-length");
    bytes.split_at(head_end + len)
}

/// A kept-alive request in origin form (the shape the router's own HTTP/1.1
/// path takes, whose fields go to the member as they came, without a map):
/// the client's fields reach the member in their case with the forwarding ones
/// set as the trust rule says and the hop-by-hop ones left out, and the
/// member's answer reaches the client without its hop-by-hop fields; the next
/// request on the connection is served too.
#[tokio::test]
async fn a_kept_alive_requests_fields_reach_the_member_as_they_came() {
    let (r, _b) = router_with_backend().await;
    let request = format!(
        "GET /first HTTP/1.1\r\n\
         Host: {HA}\r\n\
         X-Custom-Field: Some Value\r\n\
         X-Forwarded-For: 203.0.113.9\r\n\
         X-Forwarded-Proto: forged\r\n\
         X-Forwarded-Port: 1\r\n\
         Keep-Alive: timeout=5\r\n\
         TE: trailers\r\n\
         Cookie: a=1\r\n\r\n\
         GET /second HTTP/1.1\r\nHost: {HA}\r\nConnection: close\r\n\r\n"
    );
    let resp = expect_status(&r, &request, 200).await.into_bytes();
    let (first, second) = first_response(&resp);
    let text = String::from_utf8_lossy(first);
    let (head, body) = text.split_once("\r\n\r\n").expect("head end");
    let echo = Echo::parse(body.as_bytes());
    assert_eq!(echo.target, "/first");
    assert_eq!(echo.header("x-custom-field"), Some("Some Value"));
    assert_eq!(echo.header("cookie"), Some("a=1"));
    // The default trust keeps the client's list and appends to it.
    assert_eq!(
        echo.header("x-forwarded-for"),
        Some("203.0.113.9, 127.0.0.1")
    );
    assert_eq!(echo.all("x-forwarded-proto"), ["http"]);
    assert_eq!(
        echo.all("x-forwarded-port"),
        [r.http.port().to_string().as_str()]
    );
    assert_eq!(echo.all("x-forwarded-host"), [HA]);
    for hop in ["keep-alive", "te"] {
        assert_eq!(echo.header(hop), None, "{hop} must not be forwarded");
    }
    let head = head.to_ascii_lowercase();
    assert!(!head.contains("\r\nkeep-alive:"), "{head}");
    assert!(head.contains("\r\nset-cookie: gear=local-abc"), "{head}");
    assert!(
        head.contains("\r\ncontent-type: application/json"),
        "{head}"
    );
    assert_eq!(
        raw::status(second),
        Some(200),
        "{}",
        String::from_utf8_lossy(second)
    );
    let second = String::from_utf8_lossy(second);
    let body = second.split_once("\r\n\r\n").expect("head end").1;
    assert_eq!(Echo::parse(body.as_bytes()).target, "/second");
}

/// Sends `req` raw and checks the status; returns the whole answer as text.
async fn expect_status(r: &TestRouter, req: &str, want: u16) -> String {
    let resp = raw::exchange(r.http, req.as_bytes(), Duration::from_secs(10)).await;
    let text = String::from_utf8_lossy(&resp).into_owned();
    assert_eq!(raw::status(&resp), Some(want), "{req:?} -> {text}");
    text
}

/// `Connection: host` must not strip the Host header on its way to the member (nor
/// can a client strip the X-Forwarded-* the router sets); CONNECT is answered 405 by
/// the router, never forwarded, and logged with its real status.
#[tokio::test]
async fn connection_cannot_strip_host_and_connect_is_405() {
    let (r, b) = router_with_backend().await;
    let text = expect_status(
        &r,
        &format!(
            "GET /h HTTP/1.1\r\nHost: {HA}\r\nConnection: host, x-forwarded-proto, close\r\n\r\n"
        ),
        200,
    )
    .await;
    let echo = Echo::parse(&text.as_bytes()[text.find("\r\n\r\n").expect("head end") + 4..]);
    assert_eq!(echo.all("host"), [HA]);
    assert_eq!(echo.header("x-forwarded-proto"), Some("http"));

    let before = b.proxied();
    let head = expect_status(
        &r,
        &format!("CONNECT {HA}:443 HTTP/1.1\r\nHost: {HA}:443\r\nConnection: close\r\n\r\n"),
        405,
    )
    .await
    .to_ascii_lowercase();
    assert!(head.contains("\r\nallow: get,"), "{head}");
    let allow = head
        .lines()
        .find(|l| l.starts_with("allow:"))
        .expect("allow header");
    assert!(
        !allow.contains("connect"),
        "CONNECT is not allowed: {allow}"
    );
    assert_eq!(b.proxied(), before, "never forwarded to the member");
    e2e::eventually("405 counted", Duration::from_secs(5), async || {
        r.metric("router_http_requests_total{class=\"4xx\"}").await >= Some(1.0)
    })
    .await;
}

#[tokio::test]
async fn unknown_host_is_404_and_bad_hosts_are_400() {
    let (r, b) = router_with_backend().await;
    assert_eq!(r.get("nobody.example.com", "/").await.0, 404);
    let cases: [(&str, u16); 8] = [
        // HTTP/1.0 without Host: nothing to route on.
        ("GET / HTTP/1.0\r\n\r\n", 400),
        // HTTP/1.1 without Host, even in absolute form (RFC 9112 §3.2; found by
        // the client_stream fuzz target), and two Hosts in absolute form.
        (
            "GET http://ha-myapp-demo.example.com/ HTTP/1.1\r\nConnection: close\r\n\r\n",
            400,
        ),
        (
            "GET http://ha-myapp-demo.example.com/ HTTP/1.1\r\nHost: a\r\nHost: b\r\nConnection: close\r\n\r\n",
            400,
        ),
        // An authority without the scheme http or https (the http crate reads
        // `://host/` with an empty scheme; found by the client_stream fuzz target).
        (
            "GET ://ha-myapp-demo.example.com/ HTTP/1.1\r\nHost: other\r\nConnection: close\r\n\r\n",
            400,
        ),
        (
            "GET ftp://ha-myapp-demo.example.com/ HTTP/1.1\r\nHost: other\r\nConnection: close\r\n\r\n",
            400,
        ),
        // Two Host headers: refused (request smuggling).
        (
            "GET / HTTP/1.1\r\nHost: ha-myapp-demo.example.com\r\nHost: other\r\nConnection: close\r\n\r\n",
            400,
        ),
        (
            "GET / HTTP/1.1\r\nHost: bad host!\r\nConnection: close\r\n\r\n",
            400,
        ),
        ("GARBAGE\r\n\r\n", 400),
    ];
    for (req, want) in cases {
        let resp = raw::exchange(r.http, req.as_bytes(), Duration::from_secs(10)).await;
        assert_eq!(
            raw::status(&resp),
            Some(want),
            "{req:?} -> {}",
            String::from_utf8_lossy(&resp)
        );
    }
    // A 400 ends the connection: a request after it is not served (found by the
    // client_stream fuzz target).
    let before = b.proxied();
    let two_hosts = "GET / HTTP/1.1\r\nHost: ha-myapp-demo.example.com\r\nHost: x\r\n\r\n\
                     GET /next HTTP/1.1\r\nHost: ha-myapp-demo.example.com\r\n\r\n";
    let resp = raw::exchange(r.http, two_hosts.as_bytes(), Duration::from_secs(10)).await;
    let text = String::from_utf8_lossy(&resp);
    assert_eq!(text.matches("HTTP/1.1 ").count(), 1, "{text}");
    assert!(
        text.to_ascii_lowercase().contains("connection: close"),
        "{text}"
    );
    assert_eq!(
        b.proxied(),
        before,
        "nothing after the 400 reached the member"
    );
}

#[tokio::test]
async fn aliases_route_case_insensitively() {
    let (r, b) = router_with_backend().await;
    r.drop_event(
        "02.yaml",
        &events::add_alias("myapp", "demo", "www.Example.NET"),
    );
    r.wait_route("www.example.net").await;
    let (status, body) = r.get("WWW.example.net:80", "/x").await;
    assert_eq!(status, 200);
    assert_eq!(Echo::parse(&body).port, b.addr.port());
    // The plain app name is served too (app_dns defaults to true).
    assert_eq!(r.get("myapp-demo.example.com", "/").await.0, 200);
}

#[tokio::test]
async fn app_without_routable_member_is_503() {
    let b = Backend::start().await;
    let r = TestRouter::start("").await;
    // Only a web_framework endpoint: known app, nothing to route to.
    r.drop_event(
        "01.yaml",
        &events::add_endpoint("myapp", "demo", b.addr, "web_framework", "php-5.4"),
    );
    r.wait_route(HA).await;
    assert_eq!(r.get(HA, "/").await.0, 503);
    assert_eq!(
        b.hits(),
        0,
        "web_framework endpoints are not routed by default"
    );
}

#[tokio::test]
async fn h2_prior_knowledge_uses_authority_as_host() {
    let (r, _b) = router_with_backend().await;
    // A real h2 connection to the router whose requests name the app in :authority.
    let tcp = tokio::net::TcpStream::connect(r.http)
        .await
        .expect("connect");
    let (mut send, conn) = hyper::client::conn::http2::handshake(
        TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await
    .expect("h2 handshake");
    tokio::spawn(conn);
    let req = Request::get(format!("http://{HA}/h2?q=1"))
        .body(Full::<Bytes>::default())
        .expect("req");
    let resp = send.send_request(req).await.expect("h2 request");
    assert_eq!(resp.version(), http::Version::HTTP_2);
    assert_eq!(resp.status(), 200);
    let echo = Echo::parse(&resp.into_body().collect().await.expect("body").to_bytes());
    assert_eq!(echo.target, "/h2?q=1");
    assert_eq!(
        echo.version, "HTTP/1.1",
        "members are spoken to in HTTP/1.1"
    );
    assert_eq!(echo.all("host"), [HA], "Host comes from :authority");
}

#[tokio::test]
async fn curl_http1_and_h2_prior_knowledge() {
    let (r, _b) = router_with_backend().await;
    for flag in ["--http1.1", "--http2-prior-knowledge"] {
        let out = tokio::process::Command::new("curl")
            .args([
                "-sS",
                flag,
                "-H",
                &format!("Host: {HA}"),
                "-w",
                "\n%{http_code} %{http_version}",
            ])
            .arg(format!("http://{}/curl?v=1", r.http))
            .output()
            .await
            .expect("curl runs (apt-get install curl)");
        let text = String::from_utf8_lossy(&out.stdout);
        let (body, tail) = text.rsplit_once('\n').expect("status line");
        let want = if flag == "--http1.1" {
            "200 1.1"
        } else {
            "200 2"
        };
        assert_eq!(tail, want, "{flag}: {text}");
        assert_eq!(Echo::parse(body.as_bytes()).header("host"), Some(HA));
    }
}

#[tokio::test]
async fn oversized_headers_get_431() {
    let (r, _b) = router_with_backend().await;
    let big = "a".repeat(70 * 1024);
    let req = format!("GET / HTTP/1.1\r\nHost: {HA}\r\nX-Big: {big}\r\n\r\n");
    let resp = raw::exchange(r.http, req.as_bytes(), Duration::from_secs(10)).await;
    assert_eq!(
        raw::status(&resp),
        Some(431),
        "{}",
        String::from_utf8_lossy(&resp[..resp.len().min(200)])
    );
}

#[tokio::test]
async fn slow_request_head_is_cut_off() {
    let r = TestRouter::start("limits:\n  header_read_timeout: 300ms\n").await;
    let mut s = tokio::net::TcpStream::connect(r.http)
        .await
        .expect("connect");
    use tokio::io::AsyncWriteExt;
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n")
        .await
        .expect("write");
    // Never finish the head: the router must answer 408 or close, not wait forever.
    let resp = raw::read_all(&mut s, Duration::from_secs(10)).await;
    assert!(
        resp.is_empty() || raw::status(&resp) == Some(408),
        "{}",
        String::from_utf8_lossy(&resp)
    );
    // And the connection really is closed (read_all returned before its limit).
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 1];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await;
    assert!(matches!(n, Ok(Ok(0)) | Ok(Err(_))), "connection still open");
}

#[tokio::test]
async fn refused_member_is_502_and_counted() {
    // A bound port that never listens: every connect is refused.
    let refusing = Refusing::new();
    let dead = refusing.addr;
    let r = TestRouter::start("").await;
    r.drop_event("01.yaml", &events::add_lb("myapp", "demo", dead));
    r.wait_member(dead).await;
    assert_eq!(r.get(HA, "/").await.0, 502);
    assert_eq!(
        r.metric("router_upstream_errors_total{kind=\"connect\"}")
            .await,
        Some(1.0)
    );
    assert!(r.metric("router_http_requests_total{class=\"5xx\"}").await >= Some(1.0));
}

#[tokio::test]
async fn slow_member_is_504() {
    let b = Backend::start().await;
    let r = TestRouter::start("upstream:\n  response_timeout: 300ms\n").await;
    r.drop_event("01.yaml", &events::add_lb("myapp", "demo", b.addr));
    r.wait_route(HA).await;
    assert_eq!(r.get(HA, "/slow?ms=3000").await.0, 504);
    assert_eq!(
        r.metric("router_upstream_errors_total{kind=\"response_timeout\"}")
            .await,
        Some(1.0)
    );
    assert_eq!(r.get(HA, "/slow?ms=10").await.0, 200);
}

#[tokio::test]
async fn connect_timeout_is_504() {
    // A listener that never accepts, with its accept queue filled: Linux then drops
    // further SYNs, so a connect neither succeeds nor fails until it times out.
    let sock =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    sock.bind(
        &"127.0.0.1:0"
            .parse::<std::net::SocketAddr>()
            .expect("addr")
            .into(),
    )
    .expect("bind");
    sock.listen(0).expect("listen");
    let addr = sock.local_addr().expect("addr").as_socket().expect("inet");
    let mut fillers = Vec::new();
    loop {
        match tokio::time::timeout(
            Duration::from_millis(200),
            tokio::net::TcpStream::connect(addr),
        )
        .await
        {
            Ok(Ok(s)) => fillers.push(s),
            Ok(Err(e)) => panic!("filler connect failed: {e}"),
            Err(_) => break, // the queue is full: SYNs are now dropped
        }
        assert!(fillers.len() < 64, "accept queue never filled");
    }
    let r = TestRouter::start("upstream:\n  connect_timeout: 300ms\n").await;
    r.drop_event("01.yaml", &events::add_lb("myapp", "demo", addr));
    r.wait_member(addr).await;
    assert_eq!(r.get(HA, "/").await.0, 504);
    assert_eq!(
        r.metric("router_upstream_errors_total{kind=\"connect_timeout\"}")
            .await,
        Some(1.0)
    );
    drop(fillers);
}

/// A member that answers the first request of each connection with keep-alive, then
/// closes the connection when the next request arrives without answering it: what a
/// gear's haproxy does when its keep-alive timeout fires just as we reuse the
/// connection. Counts connections.
async fn flaky_member() -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = l.local_addr().expect("addr");
    let seen = std::sync::Arc::new(AtomicUsize::new(0));
    let s2 = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                continue;
            };
            s2.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                for answer in [true, false] {
                    let mut got = Vec::new();
                    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                        match s.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(k) => got.extend_from_slice(&buf[..k]),
                        }
                    }
                    if !answer {
                        return; // close without a response byte
                    }
                    let _ = s
                        .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                        .await;
                }
            });
        }
    });
    (addr, seen)
}

#[tokio::test]
async fn idempotent_request_is_retried_once_when_reused_connection_closed() {
    let (addr, seen) = flaky_member().await;
    // No health checks: the member counts connections, and a check is one.
    let r = TestRouter::start("health:\n  checks: false\n").await;
    r.drop_event("01.yaml", &events::add_lb("myapp", "demo", addr));
    r.wait_member(addr).await;
    // First request: a new connection, kept alive in the pool.
    assert_eq!(r.get(HA, "/").await, (200, Bytes::from_static(b"ok")));
    // Second: the pooled connection is closed under it; sent again on a new one.
    assert_eq!(r.get(HA, "/").await, (200, Bytes::from_static(b"ok")));
    assert_eq!(r.metric("router_upstream_retries_total").await, Some(1.0));
    assert_eq!(seen.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert_eq!(
        r.metric("router_upstream_connections_opened_total").await,
        Some(2.0)
    );
}

#[tokio::test]
async fn non_idempotent_request_is_never_replayed() {
    let (addr, seen) = flaky_member().await;
    // No health checks: the member counts connections, and a check is one.
    let r = TestRouter::start("health:\n  checks: false\n").await;
    r.drop_event("01.yaml", &events::add_lb("myapp", "demo", addr));
    r.wait_member(addr).await;
    assert_eq!(r.get(HA, "/").await.0, 200);
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let req = Request::post(format!("http://{}/", r.http))
        .header("host", HA)
        .body(Full::new(Bytes::from_static(b"payment=1")))
        .expect("req");
    let resp = client.request(req).await.expect("response");
    assert_eq!(resp.status(), 502);
    assert_eq!(
        seen.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "sent exactly once"
    );
    assert_eq!(r.metric("router_upstream_retries_total").await, Some(0.0));
}

#[tokio::test]
async fn keep_alive_connections_to_members_are_reused() {
    let (r, b) = router_with_backend().await;
    let opened = r
        .metric("router_upstream_connections_opened_total")
        .await
        .unwrap_or(0.0);
    for _ in 0..20 {
        assert_eq!(r.get(HA, "/").await.0, 200);
    }
    // Sequential requests share one member connection.
    assert_eq!(
        r.metric("router_upstream_connections_opened_total").await,
        Some(opened),
        "no new connection for sequential requests"
    );
    assert!(b.hits() >= 20);
}

#[tokio::test]
async fn bodies_stream_both_ways() {
    let (r, _b) = router_with_backend().await;
    // Upload 8 MiB in chunks of unknown total length (chunked encoding).
    let chunks = futures_util::stream::iter((0..128).map(|_| {
        Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from(vec![7u8; 64 * 1024])))
    }));
    let client: Client<_, StreamBody<_>> = Client::builder(TokioExecutor::new()).build_http();
    let req = Request::put(format!("http://{}/upload", r.http))
        .header("host", HA)
        .body(StreamBody::new(chunks))
        .expect("req");
    let resp = client.request(req).await.expect("upload");
    assert_eq!(resp.status(), 200);
    let echo = Echo::parse(&resp.into_body().collect().await.expect("body").to_bytes());
    assert_eq!(echo.body_len, 8 * 1024 * 1024);
    // Download 16 MiB streamed by the member.
    let (status, body) = r.get(HA, "/stream?chunks=256").await;
    assert_eq!(status, 200);
    assert_eq!(body.len(), 256 * 64 * 1024);
}

#[tokio::test]
async fn member_status_codes_pass_through() {
    let (r, _b) = router_with_backend().await;
    for code in [201u16, 302, 401, 404, 500, 503] {
        assert_eq!(r.get(HA, &format!("/status/{code}")).await.0, code);
    }
}

#[tokio::test]
async fn connection_limit_holds_extra_clients_until_a_slot_frees() {
    let b = Backend::start().await;
    let r =
        TestRouter::start("limits:\n  max_connections: 1\n  max_connections_per_source: 2\n").await;
    r.drop_event("01.yaml", &events::add_lb("myapp", "demo", b.addr));
    r.wait_route(HA).await;
    // Once wait_route's connection has closed, take the only slot with a request in
    // flight (a quiet connection would be evicted to make room: see below).
    e2e::eventually(
        "no client connection open",
        Duration::from_secs(10),
        async || r.metric("router_open_connections{listener=\"http\"}").await == Some(0.0),
    )
    .await;
    let first = tokio::spawn({
        let addr = r.http;
        async move {
            raw::exchange(
                addr,
                format!("GET /slow?ms=1500 HTTP/1.1\r\nHost: {HA}\r\nConnection: close\r\n\r\n")
                    .as_bytes(),
                Duration::from_secs(10),
            )
            .await
        }
    });
    let before = b.hits();
    e2e::eventually("in flight", Duration::from_secs(10), async || {
        b.hits() > before
    })
    .await;
    // The second client's request is sent (the kernel accepts it) while `first`
    // is busy; the member must never have both at once.
    let mut second = tokio::net::TcpStream::connect(r.http)
        .await
        .expect("connect");
    tokio::io::AsyncWriteExt::write_all(
        &mut second,
        format!("GET / HTTP/1.1\r\nHost: {HA}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .expect("write");
    // Not vacuous: the second request was in the router's hands while the first
    // waited on its member (1.5 s; it ends only at the close after its answer).
    assert!(
        !first.is_finished(),
        "the first request ended too soon to tell"
    );
    let second =
        tokio::spawn(async move { raw::read_all(&mut second, Duration::from_secs(10)).await });
    assert_eq!(raw::status(&first.await.expect("join")), Some(200));
    let resp = second.await.expect("join");
    assert_eq!(raw::status(&resp), Some(200));
    assert_eq!(
        b.max_in_flight(),
        1,
        "the member had both requests at once: served beyond max_connections"
    );
}

/// Slowloris: every slot held by a connection that never finishes its request head.
/// At `limits.max_connections` the quietest connection is evicted to make room, so a
/// real client is served at once instead of after `header_read_timeout`.
#[tokio::test]
async fn at_the_connection_limit_the_quietest_connection_makes_room() {
    use tokio::io::AsyncWriteExt;
    let b = Backend::start().await;
    let r = TestRouter::start("limits:\n  max_connections: 20\n  max_connections_per_source: 30\n  header_read_timeout: 30s\n").await;
    r.drop_event("01.yaml", &events::add_lb("myapp", "demo", b.addr));
    r.wait_route(HA).await;
    let mut slow = Vec::new();
    for _ in 0..20 {
        let mut s = tokio::net::TcpStream::connect(r.http)
            .await
            .expect("connect");
        s.write_all(format!("GET / HTTP/1.1\r\nHost: {HA}\r\nX-a: ").as_bytes())
            .await
            .expect("write");
        slow.push(s);
    }
    e2e::eventually("every slot taken", Duration::from_secs(10), async || {
        r.metric("router_open_connections{listener=\"http\"}").await == Some(20.0)
    })
    .await;
    // Served within the exchange's 10 s, so not after the 30 s head timeout.
    for _ in 0..5 {
        let resp = raw::exchange(
            r.http,
            format!("GET / HTTP/1.1\r\nHost: {HA}\r\nConnection: close\r\n\r\n").as_bytes(),
            Duration::from_secs(10),
        )
        .await;
        assert_eq!(raw::status(&resp), Some(200));
    }
    // The first made room by an eviction; the slot it freed was reused by the next.
    assert!(
        r.metric("router_connections_evicted_total{listener=\"http\"}")
            .await
            >= Some(1.0)
    );
    drop(slow);
}

#[tokio::test]
async fn idle_member_connections_close_after_idle_timeout() {
    let b = Backend::start().await;
    let r = TestRouter::start("upstream:\n  idle_timeout: 200ms\n").await;
    r.drop_event("01.yaml", &events::add_lb("myapp", "demo", b.addr));
    r.wait_route(HA).await;
    let opened = r
        .metric("router_upstream_connections_opened_total")
        .await
        .unwrap_or(0.0);
    // wait_route's connection went back to the pool; the sweeper closes it once
    // it has idled 200 ms.
    e2e::eventually(
        "the idle connection closed",
        Duration::from_secs(10),
        async || {
            r.backend_state(b.addr)
                .await
                .is_some_and(|m| m["idle_connections"] == 0)
        },
    )
    .await;
    assert_eq!(r.get(HA, "/").await.0, 200);
    assert_eq!(
        r.metric("router_upstream_connections_opened_total").await,
        Some(opened + 1.0),
        "the idle connection expired; a new one was opened"
    );
}

#[tokio::test]
async fn bodiless_responses_return_their_connection() {
    let (r, _b) = router_with_backend().await;
    let opened = r
        .metric("router_upstream_connections_opened_total")
        .await
        .unwrap_or(0.0);
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    for method in [http::Method::HEAD, http::Method::GET, http::Method::HEAD] {
        let req = Request::builder()
            .method(method.clone())
            .uri(format!("http://{}/", r.http))
            .header("host", HA)
            .body(Full::default())
            .expect("req");
        let resp = client.request(req).await.expect("response");
        assert_eq!(resp.status(), 200, "{method}");
        let _ = resp.into_body().collect().await;
    }
    assert_eq!(
        r.metric("router_upstream_connections_opened_total").await,
        Some(opened)
    );
}

/// One request from `source` (a loopback address) through the router; what the
/// member saw.
async fn echo_from(source: &str, r: &TestRouter, extra_headers: &str) -> Echo {
    let req = format!("GET / HTTP/1.1\r\nHost: {HA}\r\n{extra_headers}Connection: close\r\n\r\n");
    let resp = raw::exchange_from(source, r.http, req.as_bytes(), Duration::from_secs(10)).await;
    let text = String::from_utf8_lossy(&resp);
    let body = &text[text.find("\r\n\r\n").expect("head end") + 4..];
    Echo::parse(body.as_bytes())
}

/// `forwarded.header` adds RFC 7239 `Forwarded`; what a client sent in `Forwarded`
/// and `X-Forwarded-For` is appended to only from `forwarded.trusted` addresses and
/// replaced from any other, so a client cannot forge the chain.
#[tokio::test]
async fn forwarded_header_and_the_trust_rule() {
    let b = Backend::start().await;
    let r = TestRouter::start(
        "forwarded:\n  header: true\n  by: _router1\n  trusted: [127.0.0.2/32]\n",
    )
    .await;
    r.drop_event("01.yaml", &events::add_lb("myapp", "demo", b.addr));
    r.wait_route(HA).await;
    let forged = "Forwarded: for=198.51.100.7\r\nX-Forwarded-For: 198.51.100.7\r\n";
    let trusted = echo_from("127.0.0.2", &r, forged).await;
    assert_eq!(
        trusted.all("forwarded"),
        [format!(
            "for=198.51.100.7, for=127.0.0.2;proto=http;by=_router1;host=\"{HA}\""
        )]
    );
    assert_eq!(trusted.all("x-forwarded-for"), ["198.51.100.7, 127.0.0.2"]);
    let other = echo_from("127.0.0.1", &r, forged).await;
    assert_eq!(
        other.all("forwarded"),
        [format!(
            "for=127.0.0.1;proto=http;by=_router1;host=\"{HA}\""
        )]
    );
    assert_eq!(other.all("x-forwarded-for"), ["127.0.0.1"]);
}
